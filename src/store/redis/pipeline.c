/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pipeline.c — the zero-copy pipelined data path of a connection: the
 * commands written into send windows, the replies parsed as they arrive
 * with GETRANGE payloads scattered into their destinations, and runs over
 * many connections at once (see pipeline.h for the design).
 *
 * Data path state of a connection during a run (one thread):
 *  - ops[0..send_at) have been put into send windows (the op at send_at
 *    may be partly in one: `started`, its next piece `piece_at`); a window
 *    is an iovec array over the stage (command headers written here) and
 *    the callers' pieces; it is refilled only when fully sent, so the stage
 *    bytes it points to stay put until then.
 *  - ops[0..reply_at) have all their replies; the reply parser is in state
 *    `rd`: at the start of a reply line, inside a GETRANGE payload being
 *    scattered (`left` bytes to go, object offset `pos`, segment `seg_at`),
 *    at the payload's CRLF, or skipping a payload nobody wants.
 *  - `inflight` is the cost of ops[reply_at..send_at): it only grows when a
 *    new op starts, and only while it stays within the job's cap.
 * Invariant after each parse: in RD_BULK the input buffer is empty, so the
 * rest of the payload can be received straight into the destination.
 *
 * Over TLS the same windows and iovecs go through tls.h instead of
 * sendmsg/recvmsg (OpenSSL decrypts into its record buffer and copies from
 * there into the destinations: TLS's own copy), the poll events are the
 * session's, and a session holding decrypted bytes is read without
 * waiting. The plaintext path is unchanged.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "store/redis/conn_impl.h"

/* ------------------------------------------------------------- helpers */

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* Decimal digits of v at p; returns their number. */
static size_t put_dec(char *p, uint64_t v)
{
	char t[20];
	size_t n = 0;
	do {
		t[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (size_t i = 0; i < n; i++)
		p[i] = t[n - 1 - i];
	return n;
}

/* "<t><v>\r\n" */
static char *put_hdr(char *p, char t, uint64_t v)
{
	*p++ = t;
	p += put_dec(p, v);
	*p++ = '\r';
	*p++ = '\n';
	return p;
}

/* One bulk-string argument. */
static char *put_arg(char *p, const char *s, size_t n)
{
	p = put_hdr(p, '$', n);
	memcpy(p, s, n);
	p += n;
	*p++ = '\r';
	*p++ = '\n';
	return p;
}

static char *put_arg_u64(char *p, uint64_t v)
{
	char t[20];
	return put_arg(p, t, put_dec(t, v));
}

static char *put_str(char *p, const char *s)
{
	size_t n = strlen(s);
	memcpy(p, s, n);
	return p + n;
}

/* Marks the connection broken with outcome `out` for every op still
 * waiting for a reply (sent or not). Returns -1. */
static int conn_fail(kvl__rconn *c, int out, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int conn_fail(kvl__rconn *c, int out, const char *fmt, ...)
{
	if (!c->broken) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(c->why, sizeof c->why, fmt, ap);
		va_end(ap);
		c->broken = 1;
	}
	for (size_t i = c->reply_at; i < c->job.n; i++)
		c->job.ops[i]->out = (uint8_t)out;
	c->reply_at = c->job.n;
	c->send_at = c->job.n;
	c->iov_n = c->iov_at = 0;
	c->inflight = 0;
	return -1;
}

/* ------------------------------------------------------- send windows */

/* Bytes an op counts in flight: its request without a put's value, plus
 * what it carries (a put's value, a get's payload). */
static uint64_t op_cost(const kvl__rop *op)
{
	uint64_t c = op->klen + 64;
	if (op->kind == KVL__ROP_GET)
		c += op->hi - op->lo;
	else if (op->kind == KVL__ROP_PUT)
		c += op->vlen;
	return c;
}

static void win_add(kvl__rconn *c, const void *p, size_t n)
{
	c->iov[c->iov_n].iov_base = (void *)p;
	c->iov[c->iov_n].iov_len = n;
	c->iov_n++;
}

/* Writes the headers of op (every command of it, or a put's up to its
 * value) into the stage and adds them to the window. */
static void win_start_op(kvl__rconn *c, kvl__rop *op)
{
	char *p0 = c->stage + c->stage_n, *p = p0;
	unsigned nrep = 1;

	if (op->asking) {
		p = put_str(p, "*1\r\n$6\r\nASKING\r\n");
		nrep++;
	}
	switch ((kvl__rop_kind)op->kind) {
	case KVL__ROP_EXISTS:
		p = put_str(p, "*2\r\n$6\r\nEXISTS\r\n");
		p = put_arg(p, op->key, op->klen);
		break;
	case KVL__ROP_GET:
		p = put_str(p, "*4\r\n$8\r\nGETRANGE\r\n");
		p = put_arg(p, op->key, op->klen);
		p = put_arg_u64(p, op->lo);
		p = put_arg_u64(p, op->hi - 1);
		break;
	case KVL__ROP_CHECK:
		p = put_str(p, "*2\r\n$6\r\nEXISTS\r\n");
		p = put_arg(p, op->key, op->klen);
		p = put_str(p, "*2\r\n$6\r\nSTRLEN\r\n");
		p = put_arg(p, op->key, op->klen);
		nrep++;
		break;
	case KVL__ROP_PUT:
		p = put_hdr(p, '*', (uint64_t)c->job.set_argc);
		p = put_str(p, "$3\r\nSET\r\n");
		p = put_arg(p, op->key, op->klen);
		p = put_hdr(p, '$', op->vlen);
		break;
	case KVL__ROP_DEL:
		p = put_str(p, "*2\r\n$6\r\nUNLINK\r\n");
		p = put_arg(p, op->key, op->klen);
		break;
	}
	op->nrep = (uint8_t)nrep;
	op->got = 0;
	op->out = KVL__ROUT_NONE;
	op->ival[0] = op->ival[1] = 0;
	op->cost = op_cost(op);
	c->inflight += op->cost;
	c->stage_n += (size_t)(p - p0);
	win_add(c, p0, (size_t)(p - p0));
}

/* Builds the next send window from the ops not yet sent, within the
 * bytes-in-flight cap. Leaves it empty when nothing may go now. */
static void win_fill(kvl__rconn *c)
{
	c->iov_n = c->iov_at = 0;
	c->stage_n = 0;
	while (c->send_at < c->job.n) {
		kvl__rop *op = c->job.ops[c->send_at];
		if (!c->started) {
			uint64_t cost = op_cost(op);
			if (c->inflight && c->inflight + cost > c->job.inflight)
				break;
			if (c->stage_n + op->klen * 2 + RC_OP_HDR > RC_STAGE ||
			    c->iov_n + 3 > RC_IOV)
				break;
			win_start_op(c, op);
			if (op->kind != KVL__ROP_PUT) {
				c->send_at++;
				continue;
			}
			c->started = 1;
			c->piece_at = 0;
		}
		/* A put's value, piece by piece, then its tail. */
		while (c->piece_at < op->npieces && c->iov_n < RC_IOV - 1) {
			const kvl_iov *pc = &op->pieces[c->piece_at++];
			if (pc->len)
				win_add(c, pc->addr, pc->len);
		}
		if (c->piece_at < op->npieces)
			break;
		win_add(c, c->job.set_tail, c->job.set_tail_len);
		c->started = 0;
		c->send_at++;
	}
}

/* Sends what it can without blocking. 0, or -1 when the connection
 * failed. */
static int conn_write(kvl__rconn *c)
{
	for (;;) {
		if (c->iov_at == c->iov_n) {
			win_fill(c);
			if (!c->iov_n)
				return 0;
		}
		ssize_t w;
		if (c->tls) {
			char why[sizeof c->why];
			w = kvl__tls_writev(c->tls, c->iov + c->iov_at,
			                    c->iov_n - c->iov_at, why,
			                    sizeof why);
			if (w == KVL__TLS_AGAIN)
				return 0;
			if (w < 0)
				return conn_fail(c, KVL__ROUT_LOST, "%s", why);
		} else {
			struct msghdr m = { 0 };
			m.msg_iov = c->iov + c->iov_at;
			m.msg_iovlen = (size_t)(c->iov_n - c->iov_at);
			w = sendmsg(c->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
			if (w < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN || errno == EWOULDBLOCK)
					return 0;
				return conn_fail(c, KVL__ROUT_LOST,
				                 "send failed: %s",
				                 strerror(errno));
			}
		}
		c->progress_ns = kvl__now_ns();
		size_t done = (size_t)w;
		while (done) {
			struct iovec *v = &c->iov[c->iov_at];
			if (done >= v->iov_len) {
				done -= v->iov_len;
				c->iov_at++;
			} else {
				v->iov_base = (char *)v->iov_base + done;
				v->iov_len -= done;
				done = 0;
			}
		}
		/* Skip empty entries so that iov_at == iov_n means "all sent". */
		while (c->iov_at < c->iov_n && c->iov[c->iov_at].iov_len == 0)
			c->iov_at++;
	}
}

/* ------------------------------------------------------ reply parsing */

static kvl__rop *head_op(const kvl__rconn *c)
{
	return c->job.ops[c->reply_at];
}

/* One more reply of the head op has been consumed. */
static void reply_done(kvl__rconn *c)
{
	kvl__rop *op = head_op(c);
	if (++op->got == op->nrep) {
		c->inflight -= op->cost;
		c->reply_at++;
	}
}

/* Copies n payload bytes at src (object offset c->pos on) into the head
 * op's segments, or drops them in gaps, and advances. */
static void scatter_copy(kvl__rconn *c, const char *src, uint64_t n)
{
	const kvl__rop *op = head_op(c);
	while (n) {
		const kvl__rseg *g = &op->seg[c->seg_at];
		uint64_t take;
		if (c->pos < g->off) {
			take = min_u64(g->off - c->pos, n);
		} else {
			take = min_u64(g->off + g->len - c->pos, n);
			if (g->addr)
				memcpy(g->addr + (c->pos - g->off), src,
				       (size_t)take);
			if (c->pos + take == g->off + g->len)
				c->seg_at++;
		}
		c->pos += take;
		src += take;
		n -= take;
	}
}

/* Advances over n payload bytes that recvmsg already put in place. */
static void scatter_skip(kvl__rconn *c, uint64_t n)
{
	const kvl__rop *op = head_op(c);
	c->pos += n;
	while (c->seg_at < op->nseg &&
	       c->pos >= op->seg[c->seg_at].off + op->seg[c->seg_at].len)
		c->seg_at++;
}

/* iovecs for the rest of the current payload, from c->pos: destination
 * memory for the segments, the sink for gaps and dropped bytes. Sets
 * *bytes to what they cover. */
static int scatter_iov(kvl__rconn *c, struct iovec *iov, int max,
                       uint64_t *bytes)
{
	const kvl__rop *op = head_op(c);
	uint64_t pos = c->pos, left = c->left, total = 0;
	uint32_t s = c->seg_at;
	int n = 0;
	while (left && n < max) {
		const kvl__rseg *g = &op->seg[s];
		uint64_t take;
		char *to;
		if (pos < g->off) {
			take = min_u64(min_u64(g->off - pos, left), RC_SINK);
			to = c->sink;
		} else {
			take = min_u64(g->off + g->len - pos, left);
			if (g->addr) {
				to = g->addr + (pos - g->off);
			} else {
				take = min_u64(take, RC_SINK);
				to = c->sink;
			}
			if (pos + take == g->off + g->len)
				s++;
		}
		iov[n].iov_base = to;
		iov[n].iov_len = (size_t)take;
		n++;
		pos += take;
		left -= take;
		total += take;
	}
	*bytes = total;
	return n;
}

/* 1 when the reply after the current one (after_current) or the current
 * one is a GETRANGE payload big enough to be received in place. */
static int next_is_big(const kvl__rconn *c, int after_current)
{
	size_t i = c->reply_at + (after_current ? 1 : 0);
	if (i >= c->send_at)
		return 0;
	const kvl__rop *op = c->job.ops[i];
	return op->kind == KVL__ROP_GET && op->hi - op->lo >= RC_BIG;
}

/* Parses an integer of a reply line. 0 or -1. */
static int parse_i64(const char *s, size_t n, int64_t *out)
{
	int neg = 0;
	uint64_t v = 0;
	if (n && *s == '-') {
		neg = 1;
		s++;
		n--;
	}
	if (n == 0 || n > 19)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v > (uint64_t)INT64_MAX)
		return -1;
	*out = neg ? -(int64_t)v : (int64_t)v;
	return 0;
}

/* Handles one reply line (type character t, then n bytes at s). */
static int on_line(kvl__rconn *c, char t, const char *s, size_t n)
{
	kvl__rop *op = head_op(c);
	int asking = op->asking && op->got == 0; /* the reply to ASKING */
	int main = op->got - (op->asking ? 1 : 0);
	int64_t v;

	switch (t) {
	case '+':
		if (!asking && op->out == KVL__ROUT_NONE)
			op->out = op->kind == KVL__ROP_PUT ? KVL__ROUT_OK :
			                                     KVL__ROUT_PROTO;
		reply_done(c);
		return 0;
	case '-':
		if (op->out != KVL__ROUT_ERR) {
			op->out = KVL__ROUT_ERR;
			c->job.on_error(c->job.ctx, c, op, s, n);
		}
		reply_done(c);
		return 0;
	case ':':
		if (parse_i64(s, n, &v) < 0)
			return conn_fail(c, KVL__ROUT_LOST,
			                 "protocol error: bad integer reply");
		if (!asking) {
			op->ival[main & 1] = v;
			if (op->out == KVL__ROUT_NONE || op->out == KVL__ROUT_INT)
				op->out = op->kind == KVL__ROP_EXISTS ||
				                  op->kind == KVL__ROP_CHECK ||
				                  op->kind == KVL__ROP_DEL ?
				          KVL__ROUT_INT :
				          KVL__ROUT_PROTO;
		}
		reply_done(c);
		return 0;
	case '$':
		if (parse_i64(s, n, &v) < 0 || v < -1)
			return conn_fail(c, KVL__ROUT_LOST,
			                 "protocol error: bad bulk length");
		if (v < 0) {
			if (!asking && op->out == KVL__ROUT_NONE)
				op->out = op->kind == KVL__ROP_PUT ?
				          KVL__ROUT_NIL :
				          KVL__ROUT_PROTO;
			reply_done(c);
			return 0;
		}
		if (op->kind == KVL__ROP_GET && !asking &&
		    op->out == KVL__ROUT_NONE && (uint64_t)v == op->hi - op->lo) {
			c->rd = RD_BULK;
			c->left = (uint64_t)v;
			c->pos = op->lo;
			c->seg_at = 0;
			return 0;
		}
		if (!asking && op->out == KVL__ROUT_NONE)
			op->out = op->kind == KVL__ROP_GET ? KVL__ROUT_SHORT :
			                                     KVL__ROUT_PROTO;
		c->rd = RD_SKIP;
		c->left = (uint64_t)v + 2;
		return 0;
	default:
		return conn_fail(c, KVL__ROUT_LOST,
		                 "protocol error: unexpected reply type '%c'",
		                 t);
	}
}

/* Consumes the buffered input. 0, or -1 when the connection failed. */
static int conn_parse(kvl__rconn *c)
{
	for (;;) {
		size_t avail = c->in_len - c->in_pos;
		const char *p = c->in + c->in_pos;
		uint64_t take;
		switch (c->rd) {
		case RD_LINE: {
			if (!avail)
				return 0;
			if (c->reply_at >= c->send_at)
				return conn_fail(c, KVL__ROUT_LOST,
				                 "protocol error: a reply to no "
				                 "request");
			const char *nl = memchr(p, '\n', avail);
			if (!nl) {
				if (avail >= RC_LINE_MAX)
					return conn_fail(c, KVL__ROUT_LOST,
					                 "protocol error: reply "
					                 "line too long");
				return 0;
			}
			if (nl == p || nl[-1] != '\r')
				return conn_fail(c, KVL__ROUT_LOST,
				                 "protocol error: bad line end");
			size_t len = (size_t)(nl - p) - 1;
			c->in_pos += (size_t)(nl - p) + 1;
			if (len == 0)
				return conn_fail(c, KVL__ROUT_LOST,
				                 "protocol error: empty line");
			if (on_line(c, p[0], p + 1, len - 1) < 0)
				return -1;
			break;
		}
		case RD_BULK:
			take = min_u64(avail, c->left);
			scatter_copy(c, p, take);
			c->in_pos += (size_t)take;
			c->left -= take;
			if (c->left)
				return 0;
			c->rd = RD_CRLF;
			break;
		case RD_CRLF:
			if (avail < 2)
				return 0;
			if (p[0] != '\r' || p[1] != '\n')
				return conn_fail(c, KVL__ROUT_LOST,
				                 "protocol error: payload not "
				                 "followed by CRLF");
			c->in_pos += 2;
			c->rd = RD_LINE;
			head_op(c)->out = KVL__ROUT_BULK;
			reply_done(c);
			break;
		case RD_SKIP:
			take = min_u64(avail, c->left);
			c->in_pos += (size_t)take;
			c->left -= take;
			if (c->left)
				return 0;
			c->rd = RD_LINE;
			reply_done(c);
			break;
		}
	}
}

/* Receives what it can without blocking and handles the replies. 0, or -1
 * when the connection failed. */
static int conn_read(kvl__rconn *c)
{
	for (int iter = 0; iter < 16; iter++) {
		if (conn_parse(c) < 0)
			return -1;
		if (c->reply_at == c->job.n)
			return 0; /* every reply is in */
		/* Otherwise read even when no reply is due: unexpected data
		 * is a protocol error, a closed socket a lost connection. */
		if (c->in_pos == c->in_len) {
			c->in_pos = c->in_len = 0;
		} else if (c->in_pos && RC_IN - c->in_len < RC_IN / 4) {
			memmove(c->in, c->in + c->in_pos, c->in_len - c->in_pos);
			c->in_len -= c->in_pos;
			c->in_pos = 0;
		}
		struct iovec iov[RC_RIOV];
		int n = 0;
		uint64_t direct = 0;
		size_t room = RC_IN - c->in_len;
		if (c->rd == RD_BULK) {
			/* The buffer is empty (see the invariant): the rest of
			 * the payload goes straight to its destination. */
			n = scatter_iov(c, iov, RC_RIOV - 1, &direct);
			if (direct == c->left && next_is_big(c, 1) &&
			    room > RC_PEEK)
				room = RC_PEEK;
		} else if (c->rd == RD_LINE && c->in_pos == c->in_len &&
		           next_is_big(c, 0) && room > RC_PEEK) {
			room = RC_PEEK;
		}
		iov[n].iov_base = c->in + c->in_len;
		iov[n].iov_len = room;
		n++;
		ssize_t r;
		if (c->tls) {
			char why[sizeof c->why];
			r = kvl__tls_readv(c->tls, iov, n, why, sizeof why);
			if (r == KVL__TLS_AGAIN)
				return 0;
			if (r == KVL__TLS_FAILED)
				return conn_fail(c, KVL__ROUT_LOST, "%s", why);
			if (r == KVL__TLS_CLOSED)
				r = 0;
		} else {
			struct msghdr m = { 0 };
			m.msg_iov = iov;
			m.msg_iovlen = (size_t)n;
			r = recvmsg(c->fd, &m, MSG_DONTWAIT);
			if (r < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN || errno == EWOULDBLOCK)
					return 0;
				return conn_fail(c, KVL__ROUT_LOST,
				                 "receive failed: %s",
				                 strerror(errno));
			}
		}
		if (r == 0)
			return conn_fail(c, KVL__ROUT_LOST,
			                 "connection closed by the server");
		c->progress_ns = kvl__now_ns();
		uint64_t d = min_u64((uint64_t)r, direct);
		if (d) {
			scatter_skip(c, d);
			c->left -= d;
			if (c->left == 0)
				c->rd = RD_CRLF;
		}
		c->in_len += (size_t)((uint64_t)r - d);
	}
	return conn_parse(c);
}

/* ----------------------------------------------------------------- runs */

void kvl__rconn_start(kvl__rconn *c, const kvl__rconn_job *job)
{
	c->job = *job;
	c->send_at = c->reply_at = 0;
	c->piece_at = 0;
	c->started = 0;
	c->inflight = 0;
	c->iov_n = c->iov_at = 0;
	c->stage_n = 0;
	c->rd = RD_LINE;
	c->in_pos = c->in_len = 0;
	c->progress_ns = kvl__now_ns();
	for (size_t i = 0; i < job->n; i++)
		job->ops[i]->out = KVL__ROUT_NONE;
	if (c->broken)
		conn_fail(c, KVL__ROUT_LOST, "connection failed earlier");
}

void kvl__rconn_run(kvl__rconn **conns, size_t n, uint32_t timeout_ms)
{
	struct pollfd small_pfd[16];
	size_t small_map[16];
	struct pollfd *pfd = small_pfd;
	size_t *map = small_map;
	const uint64_t tmo = (uint64_t)timeout_ms * 1000000;

	if (n > 16) {
		pfd = malloc(n * sizeof *pfd);
		map = malloc(n * sizeof *map);
		if (!pfd || !map) {
			for (size_t i = 0; i < n; i++)
				conn_fail(conns[i], KVL__ROUT_LOST,
				          "out of memory");
			free(pfd);
			free(map);
			return;
		}
	}
	for (;;) {
		size_t k = 0;
		uint64_t now = kvl__now_ns(), wait = UINT64_MAX;
		for (size_t i = 0; i < n; i++) {
			kvl__rconn *c = conns[i];
			if (c->broken || c->reply_at == c->job.n)
				continue;
			if (conn_write(c) < 0)
				continue;
			now = kvl__now_ns();
			uint64_t dl = c->progress_ns + tmo;
			if (now >= dl) {
				conn_fail(c, KVL__ROUT_TIMEOUT,
				          "no progress for %u ms (timeout_ms)",
				          timeout_ms);
				continue;
			}
			if (dl - now < wait)
				wait = dl - now;
			pfd[k].fd = c->fd;
			if (c->tls) {
				/* Decrypted bytes poll(2) cannot see: no wait. */
				if (kvl__tls_pending(c->tls))
					wait = 0;
				pfd[k].events = kvl__tls_events(
					c->tls, 1, c->iov_at < c->iov_n);
			} else {
				pfd[k].events = (short)(POLLIN |
				                        (c->iov_at < c->iov_n ?
				                                 POLLOUT : 0));
			}
			pfd[k].revents = 0;
			map[k++] = i;
		}
		if (!k)
			break;
		int ms = (int)min_u64((wait + 999999) / 1000000, 3600000);
		int r = poll(pfd, k, ms);
		if (r < 0 && errno != EINTR) {
			for (size_t j = 0; j < k; j++)
				conn_fail(conns[map[j]], KVL__ROUT_LOST,
				          "poll failed: %s", strerror(errno));
			break;
		}
		for (size_t j = 0; r >= 0 && j < k; j++) {
			kvl__rconn *c = conns[map[j]];
			if (c->tls ? pfd[j].revents || kvl__tls_pending(c->tls) :
			             pfd[j].revents & (POLLIN | POLLHUP | POLLERR))
				conn_read(c);
		}
	}
	/* A connection goes back to a pool only with nothing left over. */
	for (size_t i = 0; i < n; i++) {
		kvl__rconn *c = conns[i];
		if (!c->broken && (c->in_pos != c->in_len || c->rd != RD_LINE ||
		                   (c->tls && kvl__tls_pending(c->tls))))
			conn_fail(c, KVL__ROUT_LOST,
			          "protocol error: data after the last reply");
	}
	if (pfd != small_pfd) {
		free(pfd);
		free(map);
	}
}
