/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conn_impl.h — the state of one connection (internal to conn.c and
 * pipeline.c; nothing else includes it: everyone else has the opaque
 * kvl__rconn of conn.h).
 *
 * conn.c owns the socket, the names and the control reader; pipeline.c
 * owns the data path state below "the run" (see pipeline.c's file comment
 * for its invariants). `broken` and `why` are set by both: whichever
 * notices the failure first. A connection is used by one thread at a time;
 * nothing here locks. With TLS (`tls` set), every byte goes through
 * tls.h's transfers instead of the socket calls.
 */
#ifndef KVL_REDIS_CONN_IMPL_H
#define KVL_REDIS_CONN_IMPL_H

#include <sys/uio.h>

#include <hiredis/hiredis.h>

#include "store/redis/spec.h"
#include "store/redis/pipeline.h"
#include "store/redis/tls.h"

#define RC_IN (64u << 10)    /* input buffer */
#define RC_SINK (16u << 10)  /* where dropped payload bytes go */
#define RC_STAGE (32u << 10) /* command headers of one send window */
#define RC_IOV 256           /* iovecs of one send window */
#define RC_RIOV 64           /* iovecs of one receive */
#define RC_PEEK 128          /* bytes read past a payload before a big one */
#define RC_BIG (16u << 10)   /* payloads from here are received in place */
#define RC_LINE_MAX (RC_IN / 2)
#define RC_OP_HDR 192        /* stage bytes of an op beyond its key */

enum { RD_LINE, RD_BULK, RD_CRLF, RD_SKIP };

struct kvl__rconn {
	redisContext *ctx; /* owns the socket */
	int fd;
	kvl__tls_conn *tls; /* NULL: plaintext (sendmsg/recvmsg on fd) */
	int broken;
	int answered;       /* a reply has come (for the plaintext hint) */
	void *owner;
	kvl__rconn *next;
	redisReader *reader; /* control replies; created on first use */
	char host[KVL__REDIS_HOST_MAX];
	char name[KVL__REDIS_HOST_MAX + 8];
	char why[200];

	/* the run */
	kvl__rconn_job job;
	size_t send_at, reply_at;
	uint32_t piece_at;
	int started;
	uint64_t inflight;
	uint64_t progress_ns;

	/* send window */
	int iov_n, iov_at;
	size_t stage_n;
	struct iovec iov[RC_IOV];

	/* receive */
	int rd;
	uint64_t left, pos;
	uint32_t seg_at;
	size_t in_pos, in_len;
	char *in, *sink, *stage; /* inside this allocation */
};

#endif /* KVL_REDIS_CONN_IMPL_H */
