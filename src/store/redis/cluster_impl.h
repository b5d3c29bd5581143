/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cluster_impl.h — the Redis client's state (internal to cluster.c and
 * call.c; its user, store.c, has the opaque kvl__rcluster of cluster.h).
 *
 * cluster.c owns the node table, the slot map and its refresh; call.c runs
 * calls over them through the functions below, and reads the fields fixed
 * at connect and the published entries of the node table.
 *
 * Locking: `mu` guards the slot map, the node table's length and the
 * refresh state (see cluster.c); a node's own lock guards its pool
 * (node.h). The two are never held together. Node pointers and the node
 * table entries below n_nodes never change once published, so a node id
 * obtained under `mu` may be used without it.
 */
#ifndef KVL_REDIS_CLUSTER_IMPL_H
#define KVL_REDIS_CLUSTER_IMPL_H

#include <stdatomic.h>

#include "store/redis/cluster.h"
#include "store/redis/node.h"

#define R_NONE 0xffffu
#define R_MAX_NODES 1024
#define R_MAX_REPLICAS 8

/* The replicas of a range of slots. */
struct rset {
	uint16_t n;
	uint16_t ids[R_MAX_REPLICAS];
};

struct kvl__rcluster {
	/* fixed at connect */
	kvl__rconn_cfg cfg;
	uint64_t inflight, max_bulk;
	uint32_t timeout_ms;
	unsigned pool_max;
	int cluster, replicas;
	const char *set_tail;
	size_t set_tail_len;
	int set_argc;

	pthread_mutex_t mu;
	kvl__rnode *nodes[R_MAX_NODES]; /* [0, n_nodes) published */
	_Atomic size_t n_nodes;
	uint16_t *slot_master;  /* (mu) KVL__REDIS_SLOTS node ids (cluster) */
	uint16_t *slot_rset;    /* (mu) index in rsets, or R_NONE */
	struct rset *rsets;     /* (mu) */
	size_t n_rsets;         /* (mu) */
	uint64_t last_refresh;  /* (mu) */
	int refreshing;         /* (mu) */

	atomic_uint_fast64_t rr; /* replica reads, for round robin */

	/* probe.c: the prober that reconnects down nodes */
	pthread_mutex_t probe_mu;
	pthread_cond_t probe_cv;
	pthread_t prober;
	int probe_started, probe_stop, probe_kicked; /* (probe_mu) */
};

/* The node an op goes to now (mu held): the node a redirection named
 * (once), else its slot's master, or for a read with replicas=1 a replica
 * of the slot that is up. R_NONE: the slot has no node. */
uint16_t kvl__rcluster_route_locked(kvl__rcluster *cl, kvl__rop *op);

/* A MOVED (moved = 1) or ASK for `slot` named host:port: the id of that
 * node, created if new; after MOVED the slot map points the slot there.
 * R_NONE when the node table is full or out of memory. Takes mu. */
uint16_t kvl__rcluster_redirected(kvl__rcluster *cl, int moved,
                                  uint16_t slot, const char *host, int port);

/* Reloads the slot map (see cluster.c); returns at once when a refresh
 * ran too recently or is running, or for a standalone server. */
void kvl__rcluster_refresh(kvl__rcluster *cl);

/* Refreshes the slot map when it is older than 10 s and no refresh is
 * running (new replicas and nodes show up without redirections). */
void kvl__rcluster_refresh_stale(kvl__rcluster *cl);

/* probe.c: a node went down (every node's kick; starts the prober the
 * first time), and the prober's end (before the nodes are freed). */
void kvl__rprobe_kick(void *ctx);
void kvl__rprobe_stop(kvl__rcluster *cl);

#endif /* KVL_REDIS_CLUSTER_IMPL_H */
