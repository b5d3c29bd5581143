/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cluster.h — the Redis client of the redis:// store (internal; store.c
 * is its one user): a standalone server or a Redis Cluster, found out at
 * connect, behind one interface that runs operations on keys.
 *
 * The client knows nodes, their connection pools and down state, the slot
 * map, routing (masters, replicas, redirections) and retries; it knows
 * nothing of kvl_store's batches. Its user knows what the operations mean
 * and nothing of nodes, slots or retries: it fills a call with operations
 * (kvl__rop, pipeline.h), runs it, and decides through the call's hooks
 * what each operation's reply or failure means for its kind of call.
 *
 * Life cycle: kvl__rcluster_new, kvl__rcluster_seed for each seed address,
 * kvl__rcluster_connect (cold: connects, asks, loads the slot map), then
 * calls and kvl__rcluster_masters from any number of threads at once, and
 * kvl__rcluster_close once they are over.
 *
 * Threads: a client is thread-safe once connected (new, seed and connect
 * are not); a call (kvl__rcall) belongs to the thread that made it, and its
 * hooks run in that thread during kvl__rcall_run (or kvl__rcall_fail).
 */
#ifndef KVL_REDIS_CLUSTER_H
#define KVL_REDIS_CLUSTER_H

#include "store/redis/pipeline.h"
#include "store/redis/spec.h"

typedef struct kvl__rcluster kvl__rcluster;

/* How the client talks to its nodes. */
typedef struct kvl__rcluster_cfg {
	const char *user;     /* NULL: AUTH with the password only */
	const char *password; /* NULL: no AUTH; both borrowed until close */
	uint32_t db;          /* a standalone server's database (SELECT);
	                       * nonzero is refused by a cluster */
	int replicas;         /* reads from replicas (a cluster only) */
	uint32_t connect_timeout_ms;
	uint32_t timeout_ms;  /* replies, and progress of a data-path run */
	uint64_t inflight;    /* bytes in flight per connection */
	unsigned pool_max;    /* idle connections kept per node */
	const struct kvl__tls *tls; /* NULL: plaintext; else every node's
	                             * connections use TLS with this context
	                             * (borrowed until close) */
	/* What follows a put's value (kvl__rconn_job); borrowed until close. */
	const char *set_tail;
	size_t set_tail_len;
	int set_argc;
} kvl__rcluster_cfg;

/* A client with no seeds yet into *out. KVL_ENOMEM. */
int kvl__rcluster_new(kvl__rcluster **out);

/* Adds host:port (parsed by kvl__redis_parse_addr) to the seeds, which
 * connect tries in the order given; a repeated address is one seed.
 * KVL_ENOMEM: out of memory or too many nodes. */
int kvl__rcluster_seed(kvl__rcluster *cl, const char *host, int port);

/* Connects to the seeds in order, asks the first that answers whether it
 * is a cluster node (and its proto-max-bulk-len), and loads the slot map
 * with CLUSTER SLOTS; a standalone server must be the one seed. A seed
 * that cannot be reached or does not answer is skipped for the next.
 * Errors, with a message in errbuf: KVL_EIO (no seed answered, a refused
 * password, a malformed slot map), KVL_EINVAL (more than one seed or
 * replicas=1 for a standalone server, a database other than 0 for a
 * cluster, SELECT refused), KVL_ENOMEM. */
int kvl__rcluster_connect(kvl__rcluster *cl, const kvl__rcluster_cfg *cfg,
                          char *errbuf, size_t errlen);

/* Closes every connection and frees the client. NULL is a no-op. */
void kvl__rcluster_close(kvl__rcluster *cl);

/* The largest bulk string the server takes (its proto-max-bulk-len, or
 * Redis's default 512 MiB when it does not say); fixed at connect. */
uint64_t kvl__rcluster_max_bulk(const kvl__rcluster *cl);

/* Runs the n control commands on each master (every node that serves a
 * slot, or the one server) and hands their replies to fn(ctx, replies),
 * one master at a time (the replies are freed after fn returns). Returns 0
 * when every master answered, 1 when some did not (a slot without a
 * master, a master that could not be reached or failed the commands, out
 * of memory): the replies seen then cover only part of the data. */
/* Sums kvl__rnode_counts over every node known. */
void kvl__rcluster_node_counts(kvl__rcluster *cl, uint64_t *downs,
                               uint64_t *refused);

int kvl__rcluster_masters(kvl__rcluster *cl, size_t n, const kvl__rcmd *cmds,
                          void (*fn)(void *ctx, struct redisReply **replies),
                          void *ctx);

/* ---------------------------------------------------------------- calls */

/* A set of operations that the client routes and runs to completion, in
 * rounds (call.c): every operation ends once, done or failed. */
typedef struct kvl__rcall kvl__rcall;

/* How the operations of a kind of call end: the user's verdicts. */
typedef struct kvl__rcall_hooks {
	/* The code of an error reply that neither redirects nor asks for a
	 * retry (kind: OOM, AUTH or OTHER); op then fails with it. */
	int (*error_code)(void *ctx, const kvl__rop *op,
	                  kvl__redis_err_kind kind);
	/* op got its reply (op->out: INT, OK, NIL, BULK or SHORT) from the
	 * node named `node`, and is done: the hook records what it means,
	 * and may fail it (kvl__rcall_fail) or redo it (kvl__rcall_redo). */
	void (*reply)(void *ctx, kvl__rcall *k, kvl__rop *op,
	              const char *node);
	/* op failed for good with code (<0) and a reason (valid only during
	 * the call); called once per failure. */
	void (*failed)(void *ctx, const kvl__rop *op, int code,
	               const char *why);
	/* After each round's outcomes, before the next: may redo or drop
	 * operations. NULL: nothing to do. */
	void (*round)(void *ctx, kvl__rcall *k);
} kvl__rcall_hooks;

/* A call for at most max_ops operations over client cl, whose hooks get
 * ctx (both borrowed until kvl__rcall_free). NULL: out of memory. */
kvl__rcall *kvl__rcall_new(kvl__rcluster *cl, size_t max_ops,
                           const kvl__rcall_hooks *hooks, void *ctx);
void kvl__rcall_free(kvl__rcall *k); /* NULL is a no-op */

/* A new operation of the given kind on key (NUL-terminated, borrowed until
 * the call is freed) for the user's item `index`: pending, its other
 * request fields zero for the caller to fill. At most max_ops in all. */
kvl__rop *kvl__rcall_add(kvl__rcall *k, const char *key, uint32_t index,
                         kvl__rop_kind kind);

/* Operations added so far, and operation i of them (in the order added). */
size_t kvl__rcall_count(const kvl__rcall *k);
kvl__rop *kvl__rcall_op(kvl__rcall *k, size_t i);

/* Fails op for good (it will not run, or not again) with code and a
 * printf-style reason, through the failed hook. */
void kvl__rcall_fail(kvl__rcall *k, kvl__rop *op, int code, const char *fmt,
                     ...) __attribute__((format(printf, 4, 5)));

/* Ends op without running it again (no hook is called). */
void kvl__rcall_drop(kvl__rop *op);

/* Makes a done op pending again as an operation of another kind on the
 * same key, routed afresh (its retry counts carry over). */
void kvl__rcall_redo(kvl__rop *op, kvl__rop_kind kind);

/* Runs every pending operation to its end: routes each to a node, runs
 * all nodes' pipelines at once, and retries after redirections, retry
 * replies and lost connections, until each is done or failed. Blocks;
 * never fails as a whole (outcomes go to the hooks). */
void kvl__rcall_run(kvl__rcall *k);

#endif /* KVL_REDIS_CLUSTER_H */
