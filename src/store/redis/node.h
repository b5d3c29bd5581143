/* SPDX-License-Identifier: Apache-2.0 */
/*
 * node.h — one Redis node as the Redis client sees it (internal; used by
 * cluster.c, call.c and probe.c): its address, its pool of idle
 * connections and its failure record, which is the node's circuit
 * breaker.
 *
 * A node that cannot be connected to, or that stalled past the timeout, is
 * "down": kvl__rnode_conn fails at once instead of waiting again on every
 * call, and its idle connections are dropped. It stays down until a probe
 * (kvl__rnode_probe, run by the client's prober thread after a backoff of
 * 100 ms doubling to 1 s) reaches it, so no engine call pays for finding
 * out whether it is back.
 *
 * Threads: every function is thread-safe. A node's own mutex guards its
 * pool and its failure record; its down_until is also read without it (an
 * atomic). The address and names never change once the node is made.
 * Network I/O never happens under the lock.
 */
#ifndef KVL_REDIS_NODE_H
#define KVL_REDIS_NODE_H

#include "store/redis/conn.h"

typedef struct kvl__rnode kvl__rnode;

/* A node for host:port (the host as given, NUL-terminated; an IPv6
 * address unbracketed), up and with an empty pool. NULL: out of memory. */
kvl__rnode *kvl__rnode_new(const char *host, int port);

/* Closes the pooled connections and frees the node. */
void kvl__rnode_free(kvl__rnode *nd);

const char *kvl__rnode_host(const kvl__rnode *nd);
int kvl__rnode_port(const kvl__rnode *nd);
const char *kvl__rnode_name(const kvl__rnode *nd); /* "host:port" or
                                                    * "[v6]:port" */

/* 1 while the node is down (until a probe or kvl__rnode_clear_down). */
int kvl__rnode_is_down(kvl__rnode *nd);

/* When the node's next probe is due (monotonic ns), or 0 when it is up. */
uint64_t kvl__rnode_probe_at(kvl__rnode *nd);

/* kick(ctx) is called each time the node goes down (its prober's wake-up);
 * set once, before the node is used. */
void kvl__rnode_set_kick(kvl__rnode *nd, void (*kick)(void *ctx), void *ctx);

/* Probes a down node whose backoff has ended: connects with cfg and sends
 * PING. 0: up again (the connection joins the pool, pool_max at most);
 * 1: nothing due (up, or the backoff lasts); <0: still down (for a longer
 * backoff). */
int kvl__rnode_probe(kvl__rnode *nd, const kvl__rconn_cfg *cfg,
                     unsigned pool_max);

/* Adds to *downs the times the node went down (up, then a failure) and
 * to *refused the connections it refused at once while down. */
void kvl__rnode_counts(kvl__rnode *nd, uint64_t *downs, uint64_t *refused);

/* Ends the backoff now (a last try at a node that is down). */
void kvl__rnode_clear_down(kvl__rnode *nd);

/* Records a failure to reach the node (why: for messages): it is down,
 * its idle connections closed, and probed after a backoff, longer with
 * each failure in a row. */
void kvl__rnode_mark_down(kvl__rnode *nd, const char *why);

/* Closes every idle connection of the node (after one of them was found
 * dead: the others are likely dead too, e.g. after a restart). */
void kvl__rnode_flush(kvl__rnode *nd);

/* A connection to the node into *out: an idle one, or a new one made with
 * cfg (whose owner is the node). KVL_EIO (message in errbuf) at once when
 * the node is down, or when it cannot be reached (it is then down), or
 * kvl__rconn_open's other errors. A connection made ends the node's
 * failure record. */
int kvl__rnode_conn(kvl__rnode *nd, const kvl__rconn_cfg *cfg,
                    kvl__rconn **out, char *errbuf, size_t errlen);

/* Returns a connection to its node's pool, or closes it (broken, or the
 * pool holds pool_max already). */
void kvl__rnode_conn_put(kvl__rconn *c, unsigned pool_max);

#endif /* KVL_REDIS_NODE_H */
