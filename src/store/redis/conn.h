/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conn.h — one connection to one Redis node (internal): connect and
 * handshake, control commands, and what the rest of the redis:// store
 * may know of a connection. Used by the Redis client (node.c, cluster.c,
 * call.c) and by pipeline.h, which adds the data path.
 *
 * Two ways to talk over a connection, never at the same time:
 *
 *  - Control commands (kvl__rconn_control, here): cold-path commands (AUTH,
 *    INFO, CLUSTER SLOTS, DBSIZE, …) formatted by hiredis, their replies
 *    parsed by a hiredis reader into redisReply trees. Used while the
 *    connection has no data-path work.
 *
 *  - The data path (kvl__rconn_run, pipeline.h): a list of operations per
 *    connection, pipelined and run over any number of connections at once
 *    from one thread, with commands written and replies parsed by kvlink
 *    itself, zero-copy.
 *
 * A connection that fails (closed by the server, reset, a protocol error, no
 * progress for the timeout) is marked broken. A broken connection must be
 * closed, never reused.
 *
 * Threads: a connection is used by one thread at a time (the node pools
 * hand it out); nothing here locks.
 */
#ifndef KVL_REDIS_CONN_H
#define KVL_REDIS_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"

struct redisReply; /* hiredis */
struct kvl__tls;   /* tls.h */

typedef struct kvl__rconn kvl__rconn;

/* How to set up a connection. */
typedef struct kvl__rconn_cfg {
	const char *user;     /* NULL: AUTH with the password only */
	const char *password; /* NULL: no AUTH */
	uint32_t db;          /* SELECT when nonzero */
	int readonly;         /* send READONLY (cluster replica reads) */
	uint32_t connect_timeout_ms;
	uint32_t timeout_ms;  /* handshake replies */
	const struct kvl__tls *tls; /* NULL: plaintext; else the TLS
	                             * handshake follows the TCP connect */
} kvl__rconn_cfg;

/* Connects to host:port within cfg->connect_timeout_ms, then with
 * cfg->tls runs the TLS handshake within connect_timeout_ms more, and runs
 * the Redis handshake (AUTH, SELECT, READONLY as cfg says). `owner` is
 * kept for the caller (kvl__rconn_owner). Errors, with a message naming
 * host:port in errbuf: KVL_EIO (cannot connect, TLS refused or
 * "certificate verify failed: …", connection lost, authentication
 * refused), KVL_EINVAL (SELECT refused), KVL_ENOMEM. */
int kvl__rconn_open(const char *host, int port, const kvl__rconn_cfg *cfg,
                    void *owner, kvl__rconn **out, char *errbuf,
                    size_t errlen);

/* Closes the socket and frees the connection. NULL is a no-op. */
void kvl__rconn_close(kvl__rconn *c);

void *kvl__rconn_owner(const kvl__rconn *c);
const char *kvl__rconn_name(const kvl__rconn *c); /* "host:port" */
const char *kvl__rconn_host(const kvl__rconn *c);

/* 1 when the connection failed and must be closed. */
int kvl__rconn_broken(const kvl__rconn *c);

/* Why the connection failed, for messages ("" while it has not). */
const char *kvl__rconn_why(const kvl__rconn *c);

/* Link for the caller's lists (pools). */
kvl__rconn **kvl__rconn_next(kvl__rconn *c);

/* One control command: argc arguments of the given lengths. */
typedef struct kvl__rcmd {
	int argc;
	const char *argv[6];
	size_t len[6];
} kvl__rcmd;

/* Sends n control commands in one write and reads their n replies into
 * [out] replies[i] (free each with freeReplyObject; error replies are
 * replies, not failures), waiting at most timeout_ms for progress.
 * Errors (the connection is then broken and every replies[i] NULL):
 * KVL_EIO (connection failed, timed out, protocol error), KVL_ENOMEM. */
int kvl__rconn_control(kvl__rconn *c, size_t n, const kvl__rcmd *cmds,
                       struct redisReply **replies, uint32_t timeout_ms,
                       char *errbuf, size_t errlen);

#endif /* KVL_REDIS_CONN_H */
