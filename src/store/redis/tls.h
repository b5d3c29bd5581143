/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tls.h — TLS for the connections of the rediss:// store (internal): one
 * OpenSSL context per store (CA, client certificate, server name) and, per
 * connection, a TLS session over the socket that conn.c connected. Used
 * by conn.c (handshake, control commands) and pipeline.c (the data path);
 * a connection without TLS never calls into this file, so the plain path
 * keeps its own sendmsg/recvmsg.
 *
 * Transfers never block: they move what they can and say, when they move
 * nothing, which readiness of the socket they wait for (a TLS read may need
 * the socket writable and a write may need it readable).
 * kvl__tls_pending says when decrypted bytes wait inside the session, which
 * poll(2) cannot see: a caller must read those before it polls.
 *
 * Threads: a context is immutable after kvl__tls_new and shared by every
 * connection of the store; a session belongs to its connection, used by
 * one thread at a time.
 */
#ifndef KVL_REDIS_TLS_H
#define KVL_REDIS_TLS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* The store's TLS settings: the files are read once, at kvl__tls_new. */
typedef struct kvl__tls_cfg {
	const char *ca;          /* PEM CA certificates; NULL: the system's */
	const char *cert;        /* PEM client certificate (chain); or NULL */
	const char *key;         /* its private key; NULL: in cert's file */
	const char *server_name; /* SNI and the name verified; NULL: each
	                          * node's host (an IP address or a name) */
} kvl__tls_cfg;

typedef struct kvl__tls kvl__tls;           /* a store's context */
typedef struct kvl__tls_conn kvl__tls_conn; /* one connection's session */

/* A context from cfg (strings copied) into *out: TLS 1.2 or later, the
 * server's certificate always verified against the CA and the name.
 * Errors with the file and OpenSSL's reason in errbuf: KVL_EINVAL (a file
 * that cannot be read or parsed, a key that does not match the
 * certificate), KVL_ENOMEM. */
int kvl__tls_new(const kvl__tls_cfg *cfg, kvl__tls **out, char *errbuf,
                 size_t errlen);

/* Frees a context whose sessions are all closed. NULL is a no-op. */
void kvl__tls_free(kvl__tls *t);

/* Runs the TLS handshake on connected socket fd (not taken over: the
 * caller closes it) for node `host`, within timeout_ms, into *out.
 * Errors, the reason in why: KVL_EIO ("certificate verify failed: …", the
 * server closed the connection or spoke no TLS, no handshake within the
 * time), KVL_ENOMEM. */
int kvl__tls_connect(const kvl__tls *t, int fd, const char *host,
                     uint32_t timeout_ms, kvl__tls_conn **out, char *why,
                     size_t cap);

/* Ends the session (a close_notify when it can go at once) and frees it.
 * NULL is a no-op. */
void kvl__tls_close(kvl__tls_conn *s);

/* Outcomes of the transfers besides a byte count. */
#define KVL__TLS_AGAIN 0    /* nothing moved: wait (kvl__tls_events) */
#define KVL__TLS_FAILED (-1) /* the session failed: why says how */
#define KVL__TLS_CLOSED (-2) /* the server ended the session */

/* Sends from the n iovecs (in order) what can go now: the bytes taken
 * (> 0), or KVL__TLS_AGAIN or KVL__TLS_FAILED. After KVL__TLS_AGAIN the
 * next call must pass the same bytes first (the iovecs not advanced). */
ssize_t kvl__tls_writev(kvl__tls_conn *s, const struct iovec *iov, int n,
                        char *why, size_t cap);

/* Receives into the n iovecs (in order) what has arrived: the bytes
 * (> 0), or KVL__TLS_AGAIN, KVL__TLS_FAILED or KVL__TLS_CLOSED. */
ssize_t kvl__tls_readv(kvl__tls_conn *s, const struct iovec *iov, int n,
                       char *why, size_t cap);

/* 1 when the session has received nothing yet and sent no client
 * certificate (for the hint of a connection dropped at once). */
int kvl__tls_no_cert_yet(const kvl__tls_conn *s);

/* 1 when decrypted bytes wait in the session (readable without polling). */
int kvl__tls_pending(const kvl__tls_conn *s);

/* The poll(2) events that the session waits for: when `reading`, those
 * its last read needed (POLLIN, or POLLOUT), and when `writing` (bytes
 * wait to be sent), those its last write needed (POLLOUT, or POLLIN). */
short kvl__tls_events(const kvl__tls_conn *s, int reading, int writing);

#endif /* KVL_REDIS_TLS_H */
