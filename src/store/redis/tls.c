/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tls.c — TLS for rediss:// connections with OpenSSL (see tls.h).
 *
 * A context holds the SSL_CTX (TLS 1.2 or later, peer verification always
 * on, the CA and client certificate loaded at open) and kvlink's own socket
 * BIO: its reads and writes are recv/send with MSG_DONTWAIT (so the socket
 * needs no O_NONBLOCK and blocks nobody) and MSG_NOSIGNAL (a write to a
 * closed connection is an error, never SIGPIPE).
 *
 * A session's invariants:
 *  - rd_wait / wr_wait: what the last read / write that moved nothing
 *    waits for (POLLIN or POLLOUT: TLS may need to write to read, or read
 *    to write); POLLIN / POLLOUT after progress.
 *  - A write that returned "again" is pending: w_ptr/w_len are what
 *    SSL_write was given, and the next write passes them unchanged (OpenSSL
 *    requires the same bytes again). Small iovecs are gathered into
 *    `bounce` first, so that each TLS record carries many commands; a large
 *    iovec (a put's value) is handed to SSL_write in place.
 *  - `dead` after a fatal error: no close_notify is sent then.
 * OpenSSL's error queue is per thread; it is cleared before each call.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "core/internal.h"
#include "store/redis/tls.h"

#define TLS_BOUNCE (16u << 10) /* gathered small iovecs: one TLS record */
#define TLS_DIRECT 4096        /* iovecs from here go to SSL_write as is */

struct kvl__tls {
	SSL_CTX *ctx;
	BIO_METHOD *bio;
	char *server_name;
};

struct kvl__tls_conn {
	SSL *ssl;
	int fd;
	int sys_err; /* errno of the last failed send/recv of the BIO */
	int dead;
	int up;   /* the handshake is done */
	int data; /* application bytes have come */
	short rd_wait, wr_wait;
	int w_pending;
	const char *w_ptr;
	size_t w_len;
	char bounce[TLS_BOUNCE];
};

/* ------------------------------------------------------------ the BIO */

static int bio_write(BIO *b, const char *buf, int len)
{
	kvl__tls_conn *s = BIO_get_data(b);
	BIO_clear_retry_flags(b);
	for (;;) {
		ssize_t w = send(s->fd, buf, (size_t)len,
		                 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w >= 0)
			return (int)w;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			BIO_set_retry_write(b);
		else
			s->sys_err = errno;
		return -1;
	}
}

static int bio_read(BIO *b, char *buf, int len)
{
	kvl__tls_conn *s = BIO_get_data(b);
	BIO_clear_retry_flags(b);
	for (;;) {
		ssize_t r = recv(s->fd, buf, (size_t)len, MSG_DONTWAIT);
		if (r >= 0)
			return (int)r; /* 0: end of stream */
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			BIO_set_retry_read(b);
		else
			s->sys_err = errno;
		return -1;
	}
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	(void)b;
	(void)num;
	(void)ptr;
	return cmd == BIO_CTRL_FLUSH ? 1 : 0; /* nothing is buffered here */
}

static int bio_create(BIO *b)
{
	BIO_set_init(b, 1);
	return 1;
}

/* ----------------------------------------------------------- messages */

/* OpenSSL's reason for the oldest error of this thread's queue. */
static const char *ssl_reason(char *buf, size_t cap)
{
	unsigned long e = ERR_peek_error();
	if (!e)
		return "no reason given";
	const char *r = ERR_reason_error_string(e);
	if (r)
		snprintf(buf, cap, "%s", r);
	else
		ERR_error_string_n(e, buf, cap);
	return buf;
}

/* Why a TLS call of `what` failed with SSL error err, into why. */
static void ssl_why(kvl__tls_conn *s, int err, const char *what, char *why,
                    size_t cap)
{
	char r[256];
	long vr = SSL_get_verify_result(s->ssl);
	if (err == SSL_ERROR_SSL && vr != X509_V_OK)
		snprintf(why, cap, "TLS %s: certificate verify failed: %s",
		         what, X509_verify_cert_error_string(vr));
	else if (err == SSL_ERROR_SSL)
		snprintf(why, cap, "TLS %s: %s", what, ssl_reason(r, sizeof r));
	else if (err == SSL_ERROR_ZERO_RETURN)
		snprintf(why, cap, "TLS %s: the server ended the session", what);
	else if (err == SSL_ERROR_SYSCALL && ERR_peek_error())
		snprintf(why, cap, "TLS %s: %s", what, ssl_reason(r, sizeof r));
	else if (err == SSL_ERROR_SYSCALL && s->sys_err)
		snprintf(why, cap, "TLS %s: %s", what, strerror(s->sys_err));
	else if (err == SSL_ERROR_SYSCALL)
		snprintf(why, cap, "TLS %s: connection closed by the server",
		         what);
	else
		snprintf(why, cap, "TLS %s: error %d", what, err);
	if (s->up && !s->data && !SSL_get_certificate(s->ssl)) {
		size_t n = strlen(why);
		snprintf(why + n, cap - n, " (right after the handshake: does "
		         "the server require a client certificate? tls_cert=)");
	}
	ERR_clear_error();
}

/* 1 when error e is the server closing the socket without close_notify
 * (a server that exits or drops the client). */
static int peer_eof(const kvl__tls_conn *s, int e)
{
	unsigned long q = ERR_peek_error();
	if (e == SSL_ERROR_SYSCALL)
		return !q && !s->sys_err;
	return e == SSL_ERROR_SSL && ERR_GET_LIB(q) == ERR_LIB_SSL &&
	       ERR_GET_REASON(q) == SSL_R_UNEXPECTED_EOF_WHILE_READING;
}

/* ------------------------------------------------------------ context */

/* KVL_EINVAL naming option `opt`=path when the file cannot be opened. */
static int check_file(const char *opt, const char *path, char *errbuf,
                      size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "redis: %s=%s: cannot read: %s", opt, path,
		                     strerror(errno));
	fclose(f);
	return 0;
}

/* An encrypted key would make OpenSSL prompt on the terminal: never. */
static int no_passphrase(char *buf, int size, int rw, void *u)
{
	(void)buf;
	(void)size;
	(void)rw;
	(void)u;
	return 0;
}

int kvl__tls_new(const kvl__tls_cfg *cfg, kvl__tls **out, char *errbuf,
                 size_t errlen)
{
	char r[256];
	int rc;
	kvl__tls *t = calloc(1, sizeof *t);
	if (!t)
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "redis: out of memory");
	ERR_clear_error();
	t->ctx = SSL_CTX_new(TLS_client_method());
	t->bio = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
	                      "kvlink redis socket");
	if (cfg->server_name && !(t->server_name = strdup(cfg->server_name)))
		goto nomem;
	if (!t->ctx || !t->bio)
		goto nomem;
	BIO_meth_set_write(t->bio, bio_write);
	BIO_meth_set_read(t->bio, bio_read);
	BIO_meth_set_ctrl(t->bio, bio_ctrl);
	BIO_meth_set_create(t->bio, bio_create);
	SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
	                                 SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_default_passwd_cb(t->ctx, no_passphrase);

	if (cfg->ca) {
		if ((rc = check_file("tls_ca", cfg->ca, errbuf, errlen)) < 0)
			goto fail;
		if (SSL_CTX_load_verify_locations(t->ctx, cfg->ca, NULL) != 1) {
			rc = kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
			                   "redis: tls_ca=%s: no PEM CA "
			                   "certificate loaded: %s",
			                   cfg->ca, ssl_reason(r, sizeof r));
			goto fail;
		}
	} else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
		rc = kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                   "redis: the system's CA certificates cannot "
		                   "be loaded (%s); give tls_ca=FILE",
		                   ssl_reason(r, sizeof r));
		goto fail;
	}
	if (cfg->cert) {
		const char *key = cfg->key ? cfg->key : cfg->cert;
		if ((rc = check_file("tls_cert", cfg->cert, errbuf, errlen)) <
		            0 ||
		    (rc = check_file(cfg->key ? "tls_key" : "tls_cert", key,
		                     errbuf, errlen)) < 0)
			goto fail;
		if (SSL_CTX_use_certificate_chain_file(t->ctx, cfg->cert) != 1) {
			rc = kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
			                   "redis: tls_cert=%s: no PEM "
			                   "certificate loaded: %s",
			                   cfg->cert, ssl_reason(r, sizeof r));
			goto fail;
		}
		if (SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM) !=
		    1) {
			rc = kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
			                   "redis: %s=%s: no private key loaded "
			                   "(PEM, not encrypted): %s",
			                   cfg->key ? "tls_key" : "tls_cert", key,
			                   ssl_reason(r, sizeof r));
			goto fail;
		}
		if (SSL_CTX_check_private_key(t->ctx) != 1) {
			rc = kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
			                   "redis: tls_key=%s does not match "
			                   "tls_cert=%s: %s",
			                   key, cfg->cert, ssl_reason(r, sizeof r));
			goto fail;
		}
	}
	ERR_clear_error();
	*out = t;
	return 0;
nomem:
	rc = kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
	                   "redis: out of memory for TLS");
fail:
	ERR_clear_error();
	kvl__tls_free(t);
	return rc;
}

void kvl__tls_free(kvl__tls *t)
{
	if (!t)
		return;
	SSL_CTX_free(t->ctx);
	BIO_meth_free(t->bio);
	free(t->server_name);
	free(t);
}

/* ------------------------------------------------------------ sessions */

static int is_ip(const char *s)
{
	unsigned char a[16];
	return inet_pton(AF_INET, s, a) == 1 || inet_pton(AF_INET6, s, a) == 1;
}

int kvl__tls_connect(const kvl__tls *t, int fd, const char *host,
                     uint32_t timeout_ms, kvl__tls_conn **out, char *why,
                     size_t cap)
{
	kvl__tls_conn *s = calloc(1, sizeof *s);
	BIO *b = NULL;
	if (!s) {
		snprintf(why, cap, "out of memory for TLS");
		return KVL_ENOMEM;
	}
	s->fd = fd;
	s->rd_wait = POLLIN;
	s->wr_wait = POLLOUT;
	ERR_clear_error();
	s->ssl = SSL_new(t->ctx);
	b = s->ssl ? BIO_new(t->bio) : NULL;
	if (!b) {
		snprintf(why, cap, "out of memory for TLS");
		SSL_free(s->ssl);
		free(s);
		ERR_clear_error();
		return KVL_ENOMEM;
	}
	BIO_set_data(b, s);
	SSL_set_bio(s->ssl, b, b);

	/* The name to verify: the option, else the node's own host. */
	const char *name = t->server_name ? t->server_name : host;
	X509_VERIFY_PARAM *vp = SSL_get0_param(s->ssl);
	X509_VERIFY_PARAM_set_hostflags(vp,
	                                X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
	int ok = is_ip(name) ? X509_VERIFY_PARAM_set1_ip_asc(vp, name) :
	                       SSL_set_tlsext_host_name(s->ssl, name) == 1 &&
	                               X509_VERIFY_PARAM_set1_host(vp, name, 0);
	if (!ok) {
		snprintf(why, cap, "TLS: cannot verify the name \"%s\"", name);
		kvl__tls_close(s);
		ERR_clear_error();
		return KVL_EIO;
	}

	const uint64_t deadline = kvl__now_ns() + (uint64_t)timeout_ms * 1000000;
	for (;;) {
		ERR_clear_error();
		int r = SSL_connect(s->ssl);
		if (r == 1) {
			s->up = 1;
			break;
		}
		int e = SSL_get_error(s->ssl, r);
		if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
			ssl_why(s, e, "handshake", why, cap);
			s->dead = 1;
			kvl__tls_close(s);
			return KVL_EIO;
		}
		uint64_t now = kvl__now_ns();
		struct pollfd p = { .fd = fd, .events = e == SSL_ERROR_WANT_READ ?
		                                                POLLIN :
		                                                POLLOUT };
		int pr = now < deadline ?
		         poll(&p, 1, (int)((deadline - now) / 1000000 + 1)) :
		         0;
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0) {
			if (pr == 0)
				snprintf(why, cap,
				         "TLS handshake: no answer within %u ms "
				         "(connect_timeout_ms; is it a TLS "
				         "port?)",
				         timeout_ms);
			else
				snprintf(why, cap, "TLS handshake: poll: %s",
				         strerror(errno));
			s->dead = 1;
			kvl__tls_close(s);
			return KVL_EIO;
		}
	}
	*out = s;
	return 0;
}

void kvl__tls_close(kvl__tls_conn *s)
{
	if (!s)
		return;
	if (!s->dead) {
		ERR_clear_error();
		SSL_shutdown(s->ssl); /* one try: close_notify, no wait */
	}
	SSL_free(s->ssl); /* and the BIO */
	ERR_clear_error();
	free(s);
}

ssize_t kvl__tls_writev(kvl__tls_conn *s, const struct iovec *iov, int n,
                        char *why, size_t cap)
{
	if (!s->w_pending) {
		int i = 0;
		while (i < n && iov[i].iov_len == 0)
			i++;
		if (i == n)
			return KVL__TLS_AGAIN;
		if (iov[i].iov_len >= TLS_DIRECT) {
			s->w_ptr = iov[i].iov_base;
			s->w_len = iov[i].iov_len;
		} else {
			size_t len = 0;
			for (; i < n && len < TLS_BOUNCE; i++) {
				size_t take = iov[i].iov_len;
				if (take > TLS_BOUNCE - len)
					take = TLS_BOUNCE - len;
				memcpy(s->bounce + len, iov[i].iov_base, take);
				len += take;
			}
			s->w_ptr = s->bounce;
			s->w_len = len;
		}
		if (s->w_len > INT_MAX / 2)
			s->w_len = INT_MAX / 2;
	}
	ERR_clear_error();
	int r = SSL_write(s->ssl, s->w_ptr, (int)s->w_len);
	if (r > 0) {
		s->w_pending = 0;
		s->wr_wait = POLLOUT;
		return r;
	}
	int e = SSL_get_error(s->ssl, r);
	if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
		s->w_pending = 1;
		s->wr_wait = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
		return KVL__TLS_AGAIN;
	}
	ssl_why(s, e, "send", why, cap);
	s->dead = 1;
	return KVL__TLS_FAILED;
}

ssize_t kvl__tls_readv(kvl__tls_conn *s, const struct iovec *iov, int n,
                       char *why, size_t cap)
{
	size_t total = 0;
	for (int i = 0; i < n; i++) {
		size_t off = 0;
		while (off < iov[i].iov_len) {
			size_t want = iov[i].iov_len - off;
			ERR_clear_error();
			int r = SSL_read(s->ssl, (char *)iov[i].iov_base + off,
			                 (int)(want > INT_MAX / 2 ? INT_MAX / 2 :
			                                            want));
			if (r > 0) {
				off += (size_t)r;
				total += (size_t)r;
				s->data = 1;
				s->rd_wait = POLLIN;
				continue;
			}
			int e = SSL_get_error(s->ssl, r);
			if (e == SSL_ERROR_WANT_READ ||
			    e == SSL_ERROR_WANT_WRITE) {
				s->rd_wait = e == SSL_ERROR_WANT_READ ? POLLIN :
				                                        POLLOUT;
				return total ? (ssize_t)total : KVL__TLS_AGAIN;
			}
			if (e == SSL_ERROR_ZERO_RETURN || peer_eof(s, e)) {
				s->dead = e != SSL_ERROR_ZERO_RETURN;
				ERR_clear_error();
				return total ? (ssize_t)total : KVL__TLS_CLOSED;
			}
			ssl_why(s, e, "receive", why, cap);
			s->dead = 1;
			return KVL__TLS_FAILED;
		}
	}
	return (ssize_t)total;
}

int kvl__tls_no_cert_yet(const kvl__tls_conn *s)
{
	return !s->data && !SSL_get_certificate(s->ssl);
}

int kvl__tls_pending(const kvl__tls_conn *s)
{
	return SSL_pending(s->ssl) > 0;
}

short kvl__tls_events(const kvl__tls_conn *s, int reading, int writing)
{
	return (short)((reading ? s->rd_wait : 0) | (writing ? s->wr_wait : 0));
}
