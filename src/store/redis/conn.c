/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conn.c — one connection to one Redis node: connect, handshake and
 * control commands through hiredis (see conn.h). The data path over the
 * same connection is pipeline.c's.
 *
 * A control command sends its commands in one write and reads replies
 * with a hiredis reader created on first use, waiting for progress with
 * poll(2) up to the timeout; any failure marks the connection broken.
 * Over TLS (rediss://) the handshake follows the TCP connect and the
 * control bytes go through tls.h; the plaintext calls are unchanged.
 * One thread at a time; nothing here locks.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "store/redis/conn_impl.h"

/* ------------------------------------------------------------- helpers */

void *kvl__rconn_owner(const kvl__rconn *c) { return c->owner; }
const char *kvl__rconn_name(const kvl__rconn *c) { return c->name; }
const char *kvl__rconn_host(const kvl__rconn *c) { return c->host; }
int kvl__rconn_broken(const kvl__rconn *c) { return c->broken; }
const char *kvl__rconn_why(const kvl__rconn *c) { return c->why; }
kvl__rconn **kvl__rconn_next(kvl__rconn *c) { return &c->next; }

/* Waits until fd is ready for `events` or `ms` pass. 1 ready, 0 timeout,
 * -1 error. */
static int wait_fd(int fd, short events, int64_t ms)
{
	struct pollfd p = { .fd = fd, .events = events };
	if (ms < 0)
		ms = 0;
	for (;;) {
		int r = poll(&p, 1, (int)(ms > 3600000 ? 3600000 : ms));
		if (r >= 0)
			return r > 0;
		if (errno != EINTR)
			return -1;
	}
}

/* Control I/O without blocking, over TLS or the plain socket: the bytes
 * moved (> 0), 0 when it would block, -1 when the connection failed (the
 * reason in c->why). */
static ssize_t ctl_send(kvl__rconn *c, const char *p, size_t n)
{
	if (c->tls) {
		struct iovec v = { (void *)p, n };
		ssize_t w = kvl__tls_writev(c->tls, &v, 1, c->why,
		                            sizeof c->why);
		return w == KVL__TLS_AGAIN ? 0 : w;
	}
	for (;;) {
		ssize_t w = send(c->fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w >= 0 || errno == EAGAIN || errno == EWOULDBLOCK)
			return w > 0 ? w : 0;
		if (errno != EINTR)
			break;
	}
	snprintf(c->why, sizeof c->why, "send failed: %s", strerror(errno));
	return -1;
}

/* What a connection closed by the server says: on a plaintext connection
 * that never got a reply, the likely cause too (a TLS server drops a
 * client that does not start with a TLS handshake). */
static void ctl_closed(kvl__rconn *c)
{
	snprintf(c->why, sizeof c->why, "connection closed by the server%s",
	         !c->tls && !c->answered ?
	         " before any reply (a TLS port? use rediss://)" :
	         c->tls && kvl__tls_no_cert_yet(c->tls) ?
	         " right after the TLS handshake (does the server require a "
	         "client certificate? tls_cert=)" :
	         "");
}

static ssize_t ctl_recv(kvl__rconn *c, char *p, size_t n)
{
	if (c->tls) {
		struct iovec v = { p, n };
		ssize_t r = kvl__tls_readv(c->tls, &v, 1, c->why,
		                           sizeof c->why);
		if (r == KVL__TLS_CLOSED) {
			ctl_closed(c);
			return -1;
		}
		return r == KVL__TLS_AGAIN ? 0 : r;
	}
	for (;;) {
		ssize_t r = recv(c->fd, p, n, MSG_DONTWAIT);
		if (r > 0)
			return r;
		if (r == 0) {
			ctl_closed(c);
			return -1;
		}
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		if (errno != EINTR)
			break;
	}
	snprintf(c->why, sizeof c->why, "receive failed: %s%s", strerror(errno),
	         errno == ECONNRESET && !c->answered ?
	         " before any reply (a TLS port? use rediss://)" :
	         "");
	return -1;
}

/* The events a control transfer waits for (plain: `plain`). */
static short ctl_events(const kvl__rconn *c, int writing, short plain)
{
	if (!c->tls)
		return plain;
	return kvl__tls_events(c->tls, !writing, writing);
}

/* ---------------------------------------------------- open and control */

int kvl__rconn_open(const char *host, int port, const kvl__rconn_cfg *cfg,
                    void *owner, kvl__rconn **out, char *errbuf,
                    size_t errlen)
{
	struct timeval tv = {
		.tv_sec = cfg->connect_timeout_ms / 1000,
		.tv_usec = (suseconds_t)(cfg->connect_timeout_ms % 1000) * 1000,
	};
	redisContext *ctx = redisConnectWithTimeout(host, port, tv);
	if (!ctx)
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "redis %s:%d: out of memory", host, port);
	if (ctx->err) {
		int rc = kvl__fail_buf(errbuf, errlen, KVL_EIO,
		                       "redis %s:%d: cannot connect: %s", host,
		                       port, ctx->errstr);
		redisFree(ctx);
		return rc;
	}
	kvl__rconn *c = calloc(1, sizeof *c + RC_IN + RC_SINK + RC_STAGE);
	if (!c) {
		redisFree(ctx);
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "redis %s:%d: out of memory", host, port);
	}
	c->ctx = ctx;
	c->fd = ctx->fd;
	c->owner = owner;
	c->in = (char *)(c + 1);
	c->sink = c->in + RC_IN;
	c->stage = c->sink + RC_SINK;
	snprintf(c->host, sizeof c->host, "%s", host);
	snprintf(c->name, sizeof c->name, "%s:%d", host, port);
	if (cfg->tls) {
		int rc = kvl__tls_connect(cfg->tls, c->fd, host,
		                          cfg->connect_timeout_ms, &c->tls,
		                          c->why, sizeof c->why);
		if (rc < 0) {
			rc = kvl__fail_buf(errbuf, errlen, rc, "redis %s: %s",
			                   c->name, c->why);
			kvl__rconn_close(c);
			return rc;
		}
	}

	/* The handshake, pipelined. */
	kvl__rcmd cmds[3];
	const char *what[3];
	size_t n = 0;
	char dbs[24];
	if (cfg->password) {
		kvl__rcmd *m = &cmds[n];
		what[n++] = "AUTH";
		m->argc = 0;
		m->argv[m->argc++] = "AUTH";
		if (cfg->user)
			m->argv[m->argc++] = cfg->user;
		m->argv[m->argc++] = cfg->password;
		for (int i = 0; i < m->argc; i++)
			m->len[i] = strlen(m->argv[i]);
	}
	if (cfg->db) {
		snprintf(dbs, sizeof dbs, "%u", cfg->db);
		cmds[n] = (kvl__rcmd){ 2, { "SELECT", dbs }, { 6, strlen(dbs) } };
		what[n++] = "SELECT";
	}
	if (cfg->readonly) {
		cmds[n] = (kvl__rcmd){ 1, { "READONLY" }, { 8 } };
		what[n++] = "READONLY";
	}
	if (n) {
		redisReply *rep[3];
		int rc = kvl__rconn_control(c, n, cmds, (struct redisReply **)rep,
		                            cfg->timeout_ms, errbuf, errlen);
		for (size_t i = 0; i < n && rc == 0; i++) {
			if (rep[i]->type != REDIS_REPLY_ERROR)
				continue;
			if (strcmp(what[i], "AUTH") == 0)
				rc = kvl__fail_buf(errbuf, errlen, KVL_EIO,
				                   "redis %s: authentication "
				                   "failed%s%s: %s",
				                   c->name,
				                   cfg->user ? " as user " : "",
				                   cfg->user ? cfg->user : "",
				                   rep[i]->str);
			else if (strcmp(what[i], "SELECT") == 0)
				rc = kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
				                   "redis %s: SELECT %u (option "
				                   "db) refused: %s",
				                   c->name, cfg->db, rep[i]->str);
			else
				rc = kvl__fail_buf(errbuf, errlen, KVL_EIO,
				                   "redis %s: %s refused: %s",
				                   c->name, what[i], rep[i]->str);
		}
		for (size_t i = 0; i < n; i++)
			if (rep[i])
				freeReplyObject(rep[i]);
		if (rc < 0) {
			kvl__rconn_close(c);
			return rc;
		}
	}
	*out = c;
	return 0;
}

void kvl__rconn_close(kvl__rconn *c)
{
	if (!c)
		return;
	if (c->reader)
		redisReaderFree(c->reader);
	kvl__tls_close(c->tls); /* before the socket it uses */
	redisFree(c->ctx);
	free(c);
}

int kvl__rconn_control(kvl__rconn *c, size_t n, const kvl__rcmd *cmds,
                       struct redisReply **replies, uint32_t timeout_ms,
                       char *errbuf, size_t errlen)
{
	char *buf = NULL;
	size_t len = 0, got = 0;
	int rc = 0;
	const int64_t tmo_ns = (int64_t)timeout_ms * 1000000;

	for (size_t i = 0; i < n; i++)
		replies[i] = NULL;
	if (c->broken)
		return kvl__fail_buf(errbuf, errlen, KVL_EIO,
		                     "redis %s: connection failed earlier: %s",
		                     c->name, c->why);
	for (size_t i = 0; i < n; i++) {
		char *cmd = NULL;
		int l = redisFormatCommandArgv(&cmd, cmds[i].argc,
		                               (const char **)cmds[i].argv,
		                               cmds[i].len);
		char *nb = l < 0 ? NULL : realloc(buf, len + (size_t)l);
		if (!nb) {
			if (l >= 0)
				redisFreeCommand(cmd);
			free(buf);
			c->broken = 1;
			return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
			                     "redis %s: out of memory", c->name);
		}
		buf = nb;
		memcpy(buf + len, cmd, (size_t)l);
		len += (size_t)l;
		redisFreeCommand(cmd);
	}

	uint64_t last = kvl__now_ns();
	size_t off = 0;
	while (off < len) {
		ssize_t w = ctl_send(c, buf + off, len - off);
		if (w > 0) {
			off += (size_t)w;
			last = kvl__now_ns();
			continue;
		}
		if (w == 0) {
			int64_t left = tmo_ns - (int64_t)(kvl__now_ns() - last);
			int r = wait_fd(c->fd, ctl_events(c, 1, POLLOUT),
			                left / 1000000 + 1);
			if (r > 0 && left > 0)
				continue;
			snprintf(c->why, sizeof c->why,
			         r >= 0 ? "timed out after %u ms sending" :
			                  "poll failed sending (%u ms)",
			         timeout_ms);
		}
		rc = KVL_EIO;
		goto out;
	}

	if (!c->reader && !(c->reader = redisReaderCreate())) {
		snprintf(c->why, sizeof c->why, "out of memory");
		rc = KVL_ENOMEM;
		goto out;
	}
	while (got < n) {
		void *rep = NULL;
		if (redisReaderGetReply(c->reader, &rep) != REDIS_OK) {
			snprintf(c->why, sizeof c->why, "protocol error: %s",
			         c->reader->errstr);
			rc = KVL_EIO;
			goto out;
		}
		if (rep) {
			replies[got++] = rep;
			continue;
		}
		char tmp[16384];
		ssize_t r = ctl_recv(c, tmp, sizeof tmp);
		if (r > 0) {
			c->answered = 1;
			if (redisReaderFeed(c->reader, tmp, (size_t)r) !=
			    REDIS_OK) {
				snprintf(c->why, sizeof c->why,
				         "out of memory reading a reply");
				rc = KVL_ENOMEM;
				goto out;
			}
			last = kvl__now_ns();
			continue;
		}
		if (r == 0) {
			int64_t left = tmo_ns - (int64_t)(kvl__now_ns() - last);
			int w = wait_fd(c->fd, ctl_events(c, 0, POLLIN),
			                left / 1000000 + 1);
			if (w > 0 && left > 0)
				continue;
			snprintf(c->why, sizeof c->why,
			         "no reply within %u ms", timeout_ms);
		}
		rc = KVL_EIO;
		goto out;
	}
out:
	free(buf);
	if (rc < 0) {
		for (size_t i = 0; i < got; i++) {
			freeReplyObject(replies[i]);
			replies[i] = NULL;
		}
		c->broken = 1;
		return kvl__fail_buf(errbuf, errlen, rc, "redis %s: %s",
		                     c->name, c->why);
	}
	return 0;
}
