/* SPDX-License-Identifier: Apache-2.0 */
/*
 * node.c — one Redis node: its pool of idle connections and its failure
 * record (see node.h).
 *
 * Invariants: `idle` is a list of n_idle connections that are not broken
 * and have no work (empty while down); `fails` counts the failures in a
 * row (0 once a connection is made) and down_until is when the backoff
 * they earned ends and the next probe is due (0: up). While down, nothing
 * but a probe (or a refresh's last try, kvl__rnode_clear_down) connects. Locking: `mu` guards idle, n_idle, fails and why; down_until is
 * an atomic, written under `mu` (but by kvl__rnode_clear_down) and read
 * without it. host, port and name never change once the node is made.
 * Connections are opened and closed outside the lock.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include <hiredis/hiredis.h>

#include "core/log.h"
#include "store/redis/node.h"
#include "store/redis/spec.h"

#define R_DOWN_MIN_NS 100000000ull    /* first backoff of a down node */
#define R_DOWN_MAX_NS 1000000000ull   /* longest backoff */

struct kvl__rnode {
	int port;
	char host[KVL__REDIS_HOST_MAX];
	char name[KVL__REDIS_HOST_MAX + 8];
	pthread_mutex_t mu;
	kvl__rconn *idle;  /* (mu) pool of idle connections */
	unsigned n_idle;   /* (mu) */
	unsigned fails;    /* (mu) failed connects in a row */
	char why[200];     /* (mu) the last connect failure */
	_Atomic uint64_t down_until; /* monotonic ns; 0: up */
	_Atomic uint64_t downs;      /* times it went down from up */
	_Atomic uint64_t refused;    /* connections refused while down */
	void (*kick)(void *ctx);     /* told when the node goes down */
	void *kick_ctx;
};

kvl__rnode *kvl__rnode_new(const char *host, int port)
{
	kvl__rnode *nd = calloc(1, sizeof *nd);
	if (!nd)
		return NULL;
	nd->port = port;
	snprintf(nd->host, sizeof nd->host, "%s", host);
	if (strchr(host, ':'))
		snprintf(nd->name, sizeof nd->name, "[%s]:%d", host, port);
	else
		snprintf(nd->name, sizeof nd->name, "%s:%d", host, port);
	pthread_mutex_init(&nd->mu, NULL);
	atomic_init(&nd->down_until, 0);
	atomic_init(&nd->downs, 0);
	atomic_init(&nd->refused, 0);
	return nd;
}

void kvl__rnode_free(kvl__rnode *nd)
{
	while (nd->idle) {
		kvl__rconn *c = nd->idle;
		nd->idle = *kvl__rconn_next(c);
		kvl__rconn_close(c);
	}
	pthread_mutex_destroy(&nd->mu);
	free(nd);
}

const char *kvl__rnode_host(const kvl__rnode *nd) { return nd->host; }
int kvl__rnode_port(const kvl__rnode *nd) { return nd->port; }
const char *kvl__rnode_name(const kvl__rnode *nd) { return nd->name; }

void kvl__rnode_set_kick(kvl__rnode *nd, void (*kick)(void *ctx), void *ctx)
{
	nd->kick = kick;
	nd->kick_ctx = ctx;
}

int kvl__rnode_is_down(kvl__rnode *nd)
{
	return atomic_load(&nd->down_until) != 0;
}

uint64_t kvl__rnode_probe_at(kvl__rnode *nd)
{
	return atomic_load(&nd->down_until);
}

void kvl__rnode_clear_down(kvl__rnode *nd)
{
	atomic_store(&nd->down_until, 0);
}

void kvl__rnode_counts(kvl__rnode *nd, uint64_t *downs, uint64_t *refused)
{
	*downs += atomic_load(&nd->downs);
	*refused += atomic_load(&nd->refused);
}

void kvl__rnode_flush(kvl__rnode *nd)
{
	pthread_mutex_lock(&nd->mu);
	kvl__rconn *c = nd->idle;
	nd->idle = NULL;
	nd->n_idle = 0;
	pthread_mutex_unlock(&nd->mu);
	while (c) {
		kvl__rconn *next = *kvl__rconn_next(c);
		kvl__rconn_close(c);
		c = next;
	}
}

/* Rate limits of a node's going down and coming back (every node). */
static kvl__log_limit down_limit, up_limit;

void kvl__rnode_mark_down(kvl__rnode *nd, const char *why)
{
	pthread_mutex_lock(&nd->mu);
	if (nd->fails == 0) {
		atomic_fetch_add(&nd->downs, 1);
		kvl__log(&down_limit, KVL_LOG_WARNING, "redis",
		         "%s is down (%s); calls that need it fail at once "
		         "while it is probed in the background",
		         nd->name, why);
	}
	unsigned f = nd->fails < 8 ? ++nd->fails : nd->fails;
	uint64_t back = R_DOWN_MIN_NS << (f - 1);
	if (back > R_DOWN_MAX_NS)
		back = R_DOWN_MAX_NS;
	snprintf(nd->why, sizeof nd->why, "%.*s", (int)sizeof nd->why - 1,
	         why);
	atomic_store(&nd->down_until, kvl__now_ns() + back);
	pthread_mutex_unlock(&nd->mu);
	/* Its idle connections reach a node that failed: none is trusted. */
	kvl__rnode_flush(nd);
	if (nd->kick)
		nd->kick(nd->kick_ctx);
}

/* The node answered: up, its failure record cleared. */
static void node_up(kvl__rnode *nd)
{
	pthread_mutex_lock(&nd->mu);
	if (nd->fails)
		kvl__log(&up_limit, KVL_LOG_INFO, "redis", "%s is back",
		         nd->name);
	nd->fails = 0;
	atomic_store(&nd->down_until, 0);
	pthread_mutex_unlock(&nd->mu);
}

int kvl__rnode_probe(kvl__rnode *nd, const kvl__rconn_cfg *cfg,
                     unsigned pool_max)
{
	uint64_t at = atomic_load(&nd->down_until);
	if (at == 0 || at > kvl__now_ns())
		return 1;
	char why[KVL__ERRMSG_MAX];
	kvl__rconn *c = NULL;
	int rc = kvl__rconn_open(nd->host, nd->port, cfg, nd, &c, why,
	                         sizeof why);
	if (rc == 0) {
		kvl__rcmd ping = { 1, { "PING" }, { 4 } };
		struct redisReply *rep = NULL;
		rc = kvl__rconn_control(c, 1, &ping, &rep, cfg->timeout_ms, why,
		                        sizeof why);
		if (rep)
			freeReplyObject(rep);
	}
	if (rc < 0) {
		kvl__rconn_close(c);
		kvl__rnode_mark_down(nd, why);
		return rc;
	}
	node_up(nd);
	kvl__rnode_conn_put(c, pool_max);
	return 0;
}

int kvl__rnode_conn(kvl__rnode *nd, const kvl__rconn_cfg *cfg,
                    kvl__rconn **out, char *errbuf, size_t errlen)
{
	pthread_mutex_lock(&nd->mu);
	uint64_t now = kvl__now_ns(), until = atomic_load(&nd->down_until);
	if (until) {
		atomic_fetch_add(&nd->refused, 1);
		int rc = kvl__fail_buf(errbuf, errlen, KVL_EIO,
		                       "redis %s is down (%s); the next probe "
		                       "is in %llu ms",
		                       nd->name, nd->why,
		                       (unsigned long long)(until > now ?
		                               (until - now) / 1000000 + 1 : 0));
		pthread_mutex_unlock(&nd->mu);
		return rc;
	}
	kvl__rconn *c = nd->idle;
	if (c) {
		nd->idle = *kvl__rconn_next(c);
		nd->n_idle--;
	}
	pthread_mutex_unlock(&nd->mu);
	if (c) {
		*kvl__rconn_next(c) = NULL;
		*out = c;
		return 0;
	}
	int rc = kvl__rconn_open(nd->host, nd->port, cfg, nd, &c, errbuf,
	                         errlen);
	if (rc < 0) {
		if (rc == KVL_EIO)
			kvl__rnode_mark_down(nd,
			                     errbuf && errlen ? errbuf : "");
		return rc;
	}
	node_up(nd);
	*out = c;
	return 0;
}

void kvl__rnode_conn_put(kvl__rconn *c, unsigned pool_max)
{
	kvl__rnode *nd = kvl__rconn_owner(c);
	if (!kvl__rconn_broken(c)) {
		pthread_mutex_lock(&nd->mu);
		if (nd->n_idle < pool_max) {
			*kvl__rconn_next(c) = nd->idle;
			nd->idle = c;
			nd->n_idle++;
			c = NULL;
		}
		pthread_mutex_unlock(&nd->mu);
	}
	kvl__rconn_close(c);
}
