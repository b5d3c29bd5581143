/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cluster.c — the Redis client (see cluster.h): its seeds and what they
 * turn out to be, the node table, the slot map with its refresh, routing,
 * and control commands on every master. The call machinery that runs
 * operations over it is call.c's.
 *
 * Connect tries the seeds in order: the first that answers is asked
 * "INFO cluster" (and CONFIG GET proto-max-bulk-len); the client then
 * either uses that server alone (standalone: one seed only; node 0) or
 * loads the slot map with CLUSTER SLOTS.
 *
 * The slot map comes from CLUSTER SLOTS: at connect, after a redirection
 * or a failure that may mean the topology changed (at most every 100 ms,
 * one refresh at a time), and at least every 10 s. A MOVED also points its
 * slot at the named node at once. Nodes are created on demand (seeds,
 * CLUSTER SLOTS, redirections) and live until close. A node that is down
 * (node.h) is tried last when refreshing and skipped by replica reads;
 * operations routed to it fail at once and ask for a refresh (call.c), so
 * that a failover moves them to the new master.
 *
 * Invariants: node ids are indexes in `nodes`; every id in the slot map
 * and in rsets is below n_nodes. Locking: `mu` guards the slot map, the
 * node table's length and the refresh state; a node's own lock guards its
 * pool and failure record (node.c). The two are never held together.
 * Node pointers and the node table entries below n_nodes never change once
 * published, so a node id obtained under `mu` may be used without it.
 * Network I/O never happens under a lock.
 */
#include <stdio.h>
#include <stdlib.h>

#include <hiredis/hiredis.h>

#include "store/redis/cluster_impl.h"

#define R_REFRESH_MIN_NS 100000000ull /* slot map refreshes: 100 ms apart */
#define R_REFRESH_EVERY_NS 10000000000ull /* and at least every 10 s */
#define R_DEFAULT_MAX_VALUE (512ull << 20)

/* --------------------------------------------------------------- nodes */

/* The id of node host:port, created if new. R_NONE when the table is
 * full or out of memory. */
static uint16_t node_get_locked(kvl__rcluster *cl, const char *host,
                                int port)
{
	size_t n = atomic_load(&cl->n_nodes);
	for (size_t i = 0; i < n; i++)
		if (kvl__rnode_port(cl->nodes[i]) == port &&
		    strcmp(kvl__rnode_host(cl->nodes[i]), host) == 0)
			return (uint16_t)i;
	if (n == R_MAX_NODES)
		return R_NONE;
	kvl__rnode *nd = kvl__rnode_new(host, port);
	if (!nd)
		return R_NONE;
	kvl__rnode_set_kick(nd, kvl__rprobe_kick, cl);
	cl->nodes[n] = nd;
	atomic_store(&cl->n_nodes, n + 1);
	return (uint16_t)n;
}

/* ------------------------------------------------------------ slot map */

/* Installs the slot map of a CLUSTER SLOTS reply given by a node at
 * `asked` (the host used for entries without one). 0, or -1 with a reason
 * in why when the reply is malformed. */
static int topo_install_locked(kvl__rcluster *cl, const redisReply *rep,
                               const char *asked, char *why, size_t whylen)
{
	uint16_t *master = malloc(KVL__REDIS_SLOTS * sizeof *master);
	uint16_t *rsi = malloc(KVL__REDIS_SLOTS * sizeof *rsi);
	struct rset *sets = NULL;
	size_t n_sets = 0;

	if (!master || !rsi) {
		snprintf(why, whylen, "out of memory");
		goto fail;
	}
	for (size_t s = 0; s < KVL__REDIS_SLOTS; s++)
		master[s] = rsi[s] = R_NONE;
	if (rep->type != REDIS_REPLY_ARRAY) {
		snprintf(why, whylen, "CLUSTER SLOTS: not an array%s%s",
		         rep->type == REDIS_REPLY_ERROR ? ": " : "",
		         rep->type == REDIS_REPLY_ERROR ? rep->str : "");
		goto fail;
	}
	sets = calloc(rep->elements ? rep->elements : 1, sizeof *sets);
	if (!sets) {
		snprintf(why, whylen, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < rep->elements; i++) {
		const redisReply *e = rep->element[i];
		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
		    e->element[0]->type != REDIS_REPLY_INTEGER ||
		    e->element[1]->type != REDIS_REPLY_INTEGER ||
		    e->element[0]->integer < 0 ||
		    e->element[1]->integer >= KVL__REDIS_SLOTS ||
		    e->element[0]->integer > e->element[1]->integer) {
			snprintf(why, whylen, "CLUSTER SLOTS: malformed entry "
			         "%zu", i);
			goto fail;
		}
		uint16_t ids[1 + R_MAX_REPLICAS];
		size_t n_ids = 0;
		for (size_t j = 2; j < e->elements && n_ids < 1 + R_MAX_REPLICAS;
		     j++) {
			const redisReply *nd = e->element[j];
			if (nd->type != REDIS_REPLY_ARRAY || nd->elements < 2 ||
			    nd->element[0]->type != REDIS_REPLY_STRING ||
			    nd->element[1]->type != REDIS_REPLY_INTEGER ||
			    nd->element[1]->integer <= 0 ||
			    nd->element[1]->integer > 65535) {
				snprintf(why, whylen, "CLUSTER SLOTS: malformed "
				         "node in entry %zu", i);
				goto fail;
			}
			const char *h = nd->element[0]->str;
			if (strcmp(h, "?") == 0) { /* unknown endpoint */
				if (j == 2)
					break;
				continue;
			}
			if (!h[0])
				h = asked;
			uint16_t id = node_get_locked(
				cl, h, (int)nd->element[1]->integer);
			if (id == R_NONE) {
				snprintf(why, whylen, "too many nodes (at most "
				         "%d)", R_MAX_NODES);
				goto fail;
			}
			ids[n_ids++] = id;
		}
		if (!n_ids)
			continue; /* no usable master: slots stay unserved */
		struct rset *rs = &sets[n_sets];
		rs->n = (uint16_t)(n_ids - 1);
		memcpy(rs->ids, ids + 1, (n_ids - 1) * sizeof ids[0]);
		for (long long s = e->element[0]->integer;
		     s <= e->element[1]->integer; s++) {
			master[s] = ids[0];
			rsi[s] = rs->n ? (uint16_t)n_sets : R_NONE;
		}
		n_sets++;
	}
	free(cl->slot_master);
	free(cl->slot_rset);
	free(cl->rsets);
	cl->slot_master = master;
	cl->slot_rset = rsi;
	cl->rsets = sets;
	cl->n_rsets = n_sets;
	return 0;
fail:
	free(master);
	free(rsi);
	free(sets);
	return -1;
}

/* Asks one node for CLUSTER SLOTS and installs the answer. 0 or <0. */
static int topo_load_from(kvl__rcluster *cl, kvl__rnode *nd, char *why,
                          size_t whylen)
{
	kvl__rconn *c = NULL;
	int rc = kvl__rnode_conn(nd, &cl->cfg, &c, why, whylen);
	if (rc < 0)
		return rc;
	kvl__rcmd cmd = { 2, { "CLUSTER", "SLOTS" }, { 7, 5 } };
	redisReply *rep;
	rc = kvl__rconn_control(c, 1, &cmd, (struct redisReply **)&rep,
	                        cl->timeout_ms, why, whylen);
	if (rc == 0) {
		pthread_mutex_lock(&cl->mu);
		if (topo_install_locked(cl, rep, kvl__rnode_host(nd), why,
		                        whylen) < 0)
			rc = KVL_EIO;
		pthread_mutex_unlock(&cl->mu);
		freeReplyObject(rep);
	} else {
		kvl__rnode_flush(nd);
	}
	kvl__rnode_conn_put(c, cl->pool_max);
	return rc;
}

/* Reloads the slot map from the first node that answers: the masters of
 * the current map first, then every other known node (replicas, seeds).
 * At most one refresh runs at a time and refreshes are R_REFRESH_MIN_NS
 * apart; a call that finds one too recent or running returns at once. */
void kvl__rcluster_refresh(kvl__rcluster *cl)
{
	if (!cl->cluster)
		return;
	pthread_mutex_lock(&cl->mu);
	uint64_t now = kvl__now_ns();
	if (cl->refreshing || now - cl->last_refresh < R_REFRESH_MIN_NS) {
		pthread_mutex_unlock(&cl->mu);
		return;
	}
	cl->refreshing = 1;
	size_t n = atomic_load(&cl->n_nodes), k = 0;
	uint16_t *order = malloc(n * sizeof *order);
	uint8_t *seen = calloc(n ? n : 1, 1);
	if (order && seen) {
		for (size_t s = 0; s < KVL__REDIS_SLOTS; s++) {
			uint16_t m = cl->slot_master[s];
			if (m != R_NONE && !seen[m]) {
				seen[m] = 1;
				order[k++] = m;
			}
		}
		for (size_t i = 0; i < n; i++)
			if (!seen[i])
				order[k++] = (uint16_t)i;
	}
	pthread_mutex_unlock(&cl->mu);

	/* Nodes that are up first; the down ones only if none answered. */
	int done = 0;
	for (int pass = 0; pass < 2 && !done; pass++)
		for (size_t i = 0; i < k && !done; i++) {
			kvl__rnode *nd = cl->nodes[order[i]];
			if (kvl__rnode_is_down(nd) != pass)
				continue;
			if (pass)
				kvl__rnode_clear_down(nd);
			char why[KVL__ERRMSG_MAX];
			done = topo_load_from(cl, nd, why, sizeof why) == 0;
		}
	free(order);
	free(seen);
	pthread_mutex_lock(&cl->mu);
	cl->refreshing = 0;
	cl->last_refresh = kvl__now_ns();
	pthread_mutex_unlock(&cl->mu);
}

void kvl__rcluster_refresh_stale(kvl__rcluster *cl)
{
	if (!cl->cluster)
		return;
	pthread_mutex_lock(&cl->mu);
	int stale = kvl__now_ns() - cl->last_refresh > R_REFRESH_EVERY_NS &&
	            !cl->refreshing;
	pthread_mutex_unlock(&cl->mu);
	if (stale)
		kvl__rcluster_refresh(cl);
}

/* ------------------------------------------------------------- routing */

uint16_t kvl__rcluster_route_locked(kvl__rcluster *cl, kvl__rop *op)
{
	if (op->redirect != R_NONE) {
		uint16_t id = op->redirect;
		op->redirect = R_NONE;
		return id;
	}
	if (!cl->cluster)
		return 0;
	uint16_t slot = kvl__redis_key_slot(op->key, op->klen);
	uint16_t m = cl->slot_master[slot];
	int read = op->kind == KVL__ROP_EXISTS || op->kind == KVL__ROP_GET ||
	           op->kind == KVL__ROP_CHECK;
	if (read && cl->replicas && !op->to_master &&
	    cl->slot_rset[slot] != R_NONE) {
		const struct rset *rs = &cl->rsets[cl->slot_rset[slot]];
		uint64_t start = atomic_fetch_add(&cl->rr, 1);
		for (uint16_t i = 0; i < rs->n; i++) {
			uint16_t id = rs->ids[(start + i) % rs->n];
			if (!kvl__rnode_is_down(cl->nodes[id]))
				return id;
		}
	}
	return m;
}

uint16_t kvl__rcluster_redirected(kvl__rcluster *cl, int moved,
                                  uint16_t slot, const char *host, int port)
{
	pthread_mutex_lock(&cl->mu);
	uint16_t id = node_get_locked(cl, host, port);
	if (moved && id != R_NONE && cl->cluster) {
		cl->slot_master[slot] = id;
		cl->slot_rset[slot] = R_NONE;
	}
	pthread_mutex_unlock(&cl->mu);
	return id;
}

/* ------------------------------------------------------------- masters */

void kvl__rcluster_node_counts(kvl__rcluster *cl, uint64_t *downs,
                               uint64_t *refused)
{
	size_t n = atomic_load(&cl->n_nodes);
	for (size_t i = 0; i < n; i++)
		kvl__rnode_counts(cl->nodes[i], downs, refused);
}

int kvl__rcluster_masters(kvl__rcluster *cl, size_t n_cmds,
                          const kvl__rcmd *cmds,
                          void (*fn)(void *ctx, struct redisReply **replies),
                          void *ctx)
{
	/* The masters: every node that serves a slot, or the one server. */
	size_t n = atomic_load(&cl->n_nodes), k = 0;
	uint16_t *ids = malloc((n ? n : 1) * sizeof *ids);
	uint8_t *seen = calloc(n ? n : 1, 1);
	int unknown = !ids || !seen;
	if (!unknown) {
		pthread_mutex_lock(&cl->mu);
		if (!cl->cluster) {
			ids[k++] = 0;
		} else {
			for (size_t s = 0; s < KVL__REDIS_SLOTS; s++) {
				uint16_t m = cl->slot_master[s];
				if (m == R_NONE)
					unknown = 1;
				else if (m < n && !seen[m]) {
					seen[m] = 1;
					ids[k++] = m;
				}
			}
		}
		pthread_mutex_unlock(&cl->mu);
	}
	for (size_t i = 0; i < k; i++) {
		kvl__rnode *nd = cl->nodes[ids[i]];
		kvl__rconn *c = NULL;
		char why[KVL__ERRMSG_MAX];
		if (kvl__rnode_conn(nd, &cl->cfg, &c, why, sizeof why) < 0) {
			unknown = 1;
			continue;
		}
		struct redisReply *rep[8];
		if (n_cmds > 8 ||
		    kvl__rconn_control(c, n_cmds, cmds, rep, cl->timeout_ms,
		                       why, sizeof why) < 0) {
			unknown = 1;
			kvl__rnode_conn_put(c, cl->pool_max);
			continue;
		}
		fn(ctx, rep);
		for (size_t j = 0; j < n_cmds; j++)
			freeReplyObject(rep[j]);
		kvl__rnode_conn_put(c, cl->pool_max);
	}
	free(ids);
	free(seen);
	return unknown;
}

/* ------------------------------------------------------------- connect */

int kvl__rcluster_new(kvl__rcluster **out)
{
	kvl__rcluster *cl = calloc(1, sizeof *cl);
	if (!cl)
		return KVL_ENOMEM;
	pthread_mutex_init(&cl->mu, NULL);
	pthread_mutex_init(&cl->probe_mu, NULL);
	kvl__cond_init_monotonic(&cl->probe_cv);
	atomic_init(&cl->n_nodes, 0);
	*out = cl;
	return 0;
}

int kvl__rcluster_seed(kvl__rcluster *cl, const char *host, int port)
{
	return node_get_locked(cl, host, port) == R_NONE ? KVL_ENOMEM : 0;
}

uint64_t kvl__rcluster_max_bulk(const kvl__rcluster *cl)
{
	return cl->max_bulk;
}

void kvl__rcluster_close(kvl__rcluster *cl)
{
	if (!cl)
		return;
	kvl__rprobe_stop(cl); /* it probes the nodes */
	size_t n = atomic_load(&cl->n_nodes);
	for (size_t i = 0; i < n; i++)
		kvl__rnode_free(cl->nodes[i]);
	free(cl->slot_master);
	free(cl->slot_rset);
	free(cl->rsets);
	pthread_cond_destroy(&cl->probe_cv);
	pthread_mutex_destroy(&cl->probe_mu);
	pthread_mutex_destroy(&cl->mu);
	free(cl);
}

/* Appends why a seed could not be used to the list `tried` (used bytes
 * so far in *used) and marks the node down. */
static void seed_skip(kvl__rnode *nd, const char *why, char *tried,
                      size_t cap, size_t *used)
{
	int w = snprintf(tried + *used, cap - *used, "%s%s", *used ? "; " : "",
	                 why);
	if (w > 0 && (size_t)w < cap - *used)
		*used += (size_t)w;
	kvl__rnode_mark_down(nd, why);
}

/* Connects to the seeds in order, asks the first that answers whether it
 * is a cluster node, and loads the slot map. A seed that cannot be reached
 * or does not answer (a paused server) is skipped for the next. */
int kvl__rcluster_connect(kvl__rcluster *cl, const kvl__rcluster_cfg *cfg,
                          char *errbuf, size_t errlen)
{
	uint32_t db = cfg->db;
	cl->cfg.user = cfg->user;
	cl->cfg.password = cfg->password;
	cl->cfg.connect_timeout_ms = cfg->connect_timeout_ms;
	cl->cfg.timeout_ms = cfg->timeout_ms;
	cl->cfg.tls = cfg->tls;
	cl->timeout_ms = cfg->timeout_ms;
	cl->inflight = cfg->inflight;
	cl->pool_max = cfg->pool_max;
	cl->replicas = cfg->replicas;
	cl->set_tail = cfg->set_tail;
	cl->set_tail_len = cfg->set_tail_len;
	cl->set_argc = cfg->set_argc;

	size_t n_seeds = atomic_load(&cl->n_nodes);
	char tried[KVL__ERRMSG_MAX] = "";
	size_t used = 0;
	kvl__rconn_cfg probe = cl->cfg;
	probe.db = 0;
	probe.readonly = 0;

	for (size_t i = 0; i < n_seeds; i++) {
		kvl__rnode *nd = cl->nodes[i];
		kvl__rconn *c = NULL;
		char why[KVL__ERRMSG_MAX];
		int rc = kvl__rconn_open(kvl__rnode_host(nd),
		                         kvl__rnode_port(nd), &probe, nd, &c,
		                         why, sizeof why);
		if (rc == KVL_EIO && !strstr(why, "authentication")) {
			seed_skip(nd, why, tried, sizeof tried, &used);
			continue;
		}
		if (rc < 0)
			return kvl__fail_buf(errbuf, errlen, rc, "%s", why);

		kvl__rcmd cmds[2] = {
			{ 2, { "INFO", "cluster" }, { 4, 7 } },
			{ 3, { "CONFIG", "GET", "proto-max-bulk-len" },
			  { 6, 3, 18 } },
		};
		redisReply *rep[2];
		rc = kvl__rconn_control(c, 2, cmds, (struct redisReply **)rep,
		                        cl->timeout_ms, why, sizeof why);
		if (rc < 0) {
			kvl__rconn_close(c);
			if (rc != KVL_EIO)
				return kvl__fail_buf(errbuf, errlen, rc, "%s",
				                     why);
			seed_skip(nd, why, tried, sizeof tried, &used);
			continue;
		}
		if (rep[0]->type == REDIS_REPLY_ERROR) {
			int noauth = strncmp(rep[0]->str, "NOAUTH", 6) == 0;
			rc = kvl__fail_buf(errbuf, errlen, KVL_EIO,
			                   "redis %s: %s%s",
			                   kvl__rnode_name(nd),
			                   rep[0]->str,
			                   noauth ? " (the server needs a "
			                            "password: redis://:PASSWORD"
			                            "@host:port)" :
			                            "");
			freeReplyObject(rep[0]);
			freeReplyObject(rep[1]);
			kvl__rconn_close(c);
			return rc;
		}
		int found = 0;
		cl->cluster =
			rep[0]->type == REDIS_REPLY_STRING &&
			kvl__redis_info_u64(rep[0]->str, "cluster_enabled",
			                    &found) == 1;
		cl->max_bulk = R_DEFAULT_MAX_VALUE;
		if (rep[1]->type == REDIS_REPLY_ARRAY && rep[1]->elements == 2 &&
		    rep[1]->element[1]->type == REDIS_REPLY_STRING) {
			uint64_t v = strtoull(rep[1]->element[1]->str, NULL, 10);
			if (v)
				cl->max_bulk = v;
		}
		freeReplyObject(rep[0]);
		freeReplyObject(rep[1]);

		if (!cl->cluster) {
			kvl__rconn_close(c);
			if (n_seeds > 1)
				return kvl__fail_buf(
					errbuf, errlen, KVL_EINVAL,
					"redis: %zu hosts given but %s is not a "
					"cluster node (cluster_enabled:0); a "
					"standalone server takes one host:port",
					n_seeds, kvl__rnode_name(nd));
			if (cl->replicas)
				return kvl__fail_buf(
					errbuf, errlen, KVL_EINVAL,
					"redis: replicas=1 needs a Redis Cluster; "
					"%s is a standalone server",
					kvl__rnode_name(nd));
			cl->cfg.db = db;
			if (db) { /* check SELECT now: a clear error at open */
				kvl__rconn *d = NULL;
				rc = kvl__rnode_conn(nd, &cl->cfg, &d, errbuf,
				                     errlen);
				if (rc < 0)
					return rc;
				kvl__rnode_conn_put(d, cl->pool_max);
			}
			return 0;
		}
		if (db)
			rc = kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
			                   "redis: db=%llu: a Redis Cluster has "
			                   "only database 0 (%s is a cluster "
			                   "node)",
			                   (unsigned long long)db,
			                   kvl__rnode_name(nd));
		kvl__rcmd sl = { 2, { "CLUSTER", "SLOTS" }, { 7, 5 } };
		redisReply *slots = NULL;
		if (rc == 0)
			rc = kvl__rconn_control(c, 1, &sl,
			                        (struct redisReply **)&slots,
			                        cl->timeout_ms, errbuf, errlen);
		kvl__rconn_close(c);
		if (rc < 0)
			return rc;
		pthread_mutex_lock(&cl->mu);
		rc = topo_install_locked(cl, slots, kvl__rnode_host(nd), why,
		                         sizeof why);
		cl->last_refresh = kvl__now_ns();
		pthread_mutex_unlock(&cl->mu);
		freeReplyObject(slots);
		if (rc < 0)
			return kvl__fail_buf(errbuf, errlen, KVL_EIO,
			                     "redis %s: %s",
			                     kvl__rnode_name(nd), why);
		cl->cfg.readonly = cl->replicas;
		return 0;
	}
	return kvl__fail_buf(errbuf, errlen, KVL_EIO,
	                     "redis: cannot reach any server: %s", tried);
}
