/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pipeline.h — the zero-copy pipelined data path of one connection
 * (internal): the operations of the redis:// store (kvl__rop), and the run
 * that carries them over many connections at once. The store mapping
 * (store.c) fills the operations' requests and reads their replies; the
 * Redis client (call.c) routes them, runs them here and retries them.
 *
 * A list of operations (kvl__rop) per connection, pipelined and run over
 * any number of connections at once from one thread with non-blocking
 * sends and receives and poll(2). The commands are written by pipeline.c
 * (RESP arrays of bulk strings) with sendmsg: a put's value goes from the
 * caller's pieces to the socket with no copy in user space. Replies are
 * parsed by pipeline.c too, so that the payload of a GETRANGE is received
 * with recvmsg straight into the caller's destination ranges (the one
 * unavoidable copy, by the kernel); only the few bytes read past a reply's
 * end (at most a small peek when the next reply is large) go through the
 * connection's input buffer and are copied from there.
 *
 * Bytes in flight: a connection starts sending an operation only while the
 * bytes of the operations it has sent and not yet seen answered (request
 * and expected reply bytes) stay within the cap; one operation is always
 * allowed, however large.
 *
 * A connection that fails during a run is marked broken (conn.h): every
 * operation of it that had not received all its replies gets
 * KVL__ROUT_LOST or KVL__ROUT_TIMEOUT.
 *
 * Threads: a run, and every connection in it, belongs to the thread that
 * calls kvl__rconn_run; nothing here locks.
 */
#ifndef KVL_REDIS_PIPELINE_H
#define KVL_REDIS_PIPELINE_H

#include "store/redis/conn.h"

/* A destination segment of a GETRANGE: object bytes [off, off + len) go to
 * addr, or are dropped when addr is NULL. A GET op's segments are sorted by
 * offset, do not overlap, and lie in [lo, hi). */
typedef struct kvl__rseg {
	uint64_t off;
	size_t len;
	char *addr;
} kvl__rseg;

typedef enum kvl__rop_kind {
	KVL__ROP_EXISTS, /* EXISTS key                     → integer       */
	KVL__ROP_GET,    /* GETRANGE key lo hi-1           → bulk, scattered */
	KVL__ROP_CHECK,  /* EXISTS key; STRLEN key         → two integers  */
	KVL__ROP_PUT,    /* SET key <pieces> NX [EX ttl]   → +OK or nil    */
	KVL__ROP_DEL,    /* UNLINK key                     → integer       */
} kvl__rop_kind;

/* What the reply of an operation was (its last command's, or the first
 * error among its commands). */
typedef enum kvl__rop_out {
	KVL__ROUT_NONE = 0, /* not run yet */
	KVL__ROUT_INT,      /* integer(s) in ival */
	KVL__ROUT_OK,       /* +OK */
	KVL__ROUT_NIL,      /* nil bulk */
	KVL__ROUT_BULK,     /* GET: hi - lo bytes, scattered into the segments */
	KVL__ROUT_SHORT,    /* GET: a bulk of another length (nothing written) */
	KVL__ROUT_ERR,      /* an error reply; the error callback saw it */
	KVL__ROUT_LOST,     /* the connection failed before the reply */
	KVL__ROUT_TIMEOUT,  /* no progress on the connection for the timeout */
	KVL__ROUT_PROTO,    /* a reply of an unexpected type */
} kvl__rop_out;

/* One operation on one key. The caller fills the request fields; the
 * connection fills the reply fields. The remaining fields belong to the
 * Redis client (call.c: routing and retries), but for `index`, which is
 * its user's (store.c), and are never touched here. */
typedef struct kvl__rop {
	/* request */
	const char *key;
	uint32_t klen;
	uint8_t kind;   /* kvl__rop_kind */
	uint8_t asking; /* send ASKING before the command */
	/* GET */
	uint64_t lo, hi;
	const kvl__rseg *seg;
	uint32_t nseg;
	/* PUT */
	uint32_t npieces;
	const kvl_iov *pieces;
	uint64_t vlen; /* sum of the pieces' lengths */

	/* reply */
	uint8_t out;     /* kvl__rop_out */
	uint8_t got;     /* replies received */
	uint8_t nrep;    /* replies expected (set when sent) */
	int64_t ival[2]; /* integer replies (CHECK: exists, strlen) */
	uint64_t cost;   /* bytes counted in flight while it runs */

	/* the client's (index: its user's) */
	uint32_t index;    /* the key's index in the caller's arrays */
	uint16_t node;     /* node it is sent to in this round */
	uint16_t redirect; /* node a MOVED/ASK named, or 0xffff */
	uint8_t state;
	uint8_t tries;     /* redirections and retries so far */
	uint8_t lost;      /* connection losses so far */
	uint8_t to_master; /* a retry of a replica read goes to the master */
	int err;           /* the client's verdict when it failed */
} kvl__rop;

/* Called for each error reply of an operation, with the message without the
 * '-' and the CRLF (valid only during the call). */
typedef void (*kvl__rconn_err_fn)(void *ctx, kvl__rconn *c, kvl__rop *op,
                                  const char *msg, size_t len);

/* Hands the connection its operations for one run: ops[0..n) in order (the
 * array is borrowed until the run ends). `inflight` caps the bytes in
 * flight; `set_tail` is what follows a put's value ("\r\n" and the NX/EX
 * arguments, set_argc arguments in all). */
typedef struct kvl__rconn_job {
	kvl__rop **ops;
	size_t n;
	uint64_t inflight;
	const char *set_tail;
	size_t set_tail_len;
	int set_argc;
	kvl__rconn_err_fn on_error;
	void *ctx;
} kvl__rconn_job;

void kvl__rconn_start(kvl__rconn *c, const kvl__rconn_job *job);

/* Runs the jobs of n connections at once until every operation has its
 * reply or its connection failed. A connection that moves no byte for
 * timeout_ms while it has work fails with KVL__ROUT_TIMEOUT. Never fails as
 * a whole: outcomes are per operation. */
void kvl__rconn_run(kvl__rconn **conns, size_t n, uint32_t timeout_ms);

#endif /* KVL_REDIS_PIPELINE_H */
