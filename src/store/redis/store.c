/*
 * store_redis.c — the Redis store (scheme "redis"): a standalone server or a
 * Redis Cluster, found out at open.
 *
 * URI: redis://[user:password@]host:port[,host:port…][/db][?options]
 * (see docs/redis.md). The hosts are seeds: open connects to the first one
 * that answers, asks "INFO cluster", and then either uses that server alone
 * (standalone: one host only) or loads the slot map with CLUSTER SLOTS.
 *
 * Objects are Redis strings: put is "SET key value NX [EX ttl]" (stored,
 * or nil: already present), exists is "EXISTS key", remove is "UNLINK key",
 * and get is one "GETRANGE key lo hi" per key covering its ranges, whose
 * payload is scattered into the destinations as it arrives (redis_conn.c);
 * ranges that overlap, or whose gaps exceed both the bytes wanted and
 * 64 KiB, take one GETRANGE each. A GETRANGE whose reply is shorter than
 * asked (the key is absent, or the object is shorter) writes nothing and is
 * followed by "EXISTS key; STRLEN key" to tell KVL_ENOTFOUND from
 * KVL_ERANGE. The store is never trusted (store->trusted = 0): kvlink
 * verifies payload checksums on every read.
 *
 * A call runs in the calling thread, in rounds. Each round routes the
 * pending operations (the key's slot → its master, or a replica for reads
 * with replicas=1; a redirection overrides it once), takes one connection
 * per node from the node's pool (or connects), runs all nodes' pipelines at
 * once (kvl__rconn_run: non-blocking sockets and poll, so nodes work in
 * parallel without a thread per node and without handing buffers between
 * threads), and sorts the outcomes: done, or pending again after MOVED /
 * ASK (route to the named node), TRYAGAIN / CLUSTERDOWN / LOADING (back
 * off, retry), READONLY or a lost connection (refresh the slot map, retry
 * once on a fresh connection). An operation takes at most R_MAX_TRIES
 * rounds; then it fails with KVL_EIO naming the last reason.
 *
 * The slot map comes from CLUSTER SLOTS: at open, after a redirection or a
 * failure that may mean the topology changed (at most every 100 ms, one
 * refresh at a time), and at least every 10 s. Nodes are created on demand
 * (seeds, CLUSTER SLOTS, redirections) and live until close. A node that
 * cannot be connected to, or that stalled past timeout_ms, is "down" for a
 * backoff (100 ms doubling to 1 s): operations routed to it fail at once
 * instead of waiting again on every call, and the slot map is refreshed so
 * that a failover moves them to the new master.
 *
 * Locking: `mu` guards the slot map, the node table's length and the refresh
 * state; a node's own lock guards its pool and its failure record
 * (node.c). The two are never held together. Node pointers and the node table entries below n_nodes never
 * change once published, so a node id obtained under `mu` may be used
 * without it. Counters are atomics. Network I/O never happens under a lock.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "store/redis/spec.h"
#include "store/redis/node.h"
#include "store/redis/pipeline.h"
#include "store/backend.h"

#define R_NONE 0xffffu
#define R_MAX_NODES 1024
#define R_MAX_REPLICAS 8
#define R_MAX_TRIES 6             /* rounds one operation may take */
#define R_REFRESH_MIN_NS 100000000ull /* slot map refreshes: 100 ms apart */
#define R_REFRESH_EVERY_NS 10000000000ull /* and at least every 10 s */
#define R_GAP_MIN (64u << 10)     /* gap bytes a GETRANGE may always read */
#define R_DEFAULT_MAX_VALUE (512ull << 20)

enum { R_PENDING, R_RUNNING, R_DONE };
/* Retry reasons kept in rop.err while pending (positive: not error codes). */
enum { R_RETRY_MOVED = 1, R_RETRY_ASK, R_RETRY_AGAIN, R_RETRY_REFRESH };

struct rset {
	uint16_t n;
	uint16_t ids[R_MAX_REPLICAS];
};

struct rstore {
	/* immutable after open */
	char *user, *password;
	kvl__rconn_cfg cfg;
	uint64_t ttl, inflight, max_value;
	uint32_t timeout_ms;
	unsigned pool_max;
	int cluster, replicas;
	char set_tail[64];
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

	atomic_uint_fast64_t hits, misses, puts, errors, rr;
};

/* ------------------------------------------------------------- helpers */

static uint64_t r_now(void) { return kvl__now_ns(); }

static void r_sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) != 0)
		;
}

/* Percent-decodes n bytes of s into a new string. NULL: out of memory or a
 * bad escape. */
static char *pct_decode(const char *s, size_t n)
{
	char *out = malloc(n + 1), *o = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] != '%') {
			*o++ = s[i];
			continue;
		}
		unsigned v = 0;
		for (int k = 1; k <= 2; k++) {
			char ch = i + (size_t)k < n ? s[i + (size_t)k] : '\0';
			unsigned d = ch >= '0' && ch <= '9' ? (unsigned)(ch - '0') :
			             ch >= 'a' && ch <= 'f' ? (unsigned)(ch - 'a' + 10) :
			             ch >= 'A' && ch <= 'F' ? (unsigned)(ch - 'A' + 10) :
			                                      99;
			if (d > 15) {
				free(out);
				return NULL;
			}
			v = v * 16 + d;
		}
		*o++ = (char)v;
		i += 2;
	}
	*o = '\0';
	return out;
}

/* --------------------------------------------------------------- nodes */

/* The id of node host:port, created if new. R_NONE when the table is
 * full or out of memory. */
static uint16_t node_get_locked(struct rstore *r, const char *host, int port)
{
	size_t n = atomic_load(&r->n_nodes);
	for (size_t i = 0; i < n; i++)
		if (kvl__rnode_port(r->nodes[i]) == port &&
		    strcmp(kvl__rnode_host(r->nodes[i]), host) == 0)
			return (uint16_t)i;
	if (n == R_MAX_NODES)
		return R_NONE;
	kvl__rnode *nd = kvl__rnode_new(host, port);
	if (!nd)
		return R_NONE;
	r->nodes[n] = nd;
	atomic_store(&r->n_nodes, n + 1);
	return (uint16_t)n;
}

/* ------------------------------------------------------------ slot map */

/* Installs the slot map of a CLUSTER SLOTS reply given by a node at
 * `asked` (the host used for entries without one). 0, or -1 with a reason
 * in why when the reply is malformed. */
static int topo_install_locked(struct rstore *r, const redisReply *rep,
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
				r, h, (int)nd->element[1]->integer);
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
	free(r->slot_master);
	free(r->slot_rset);
	free(r->rsets);
	r->slot_master = master;
	r->slot_rset = rsi;
	r->rsets = sets;
	r->n_rsets = n_sets;
	return 0;
fail:
	free(master);
	free(rsi);
	free(sets);
	return -1;
}

/* Asks one node for CLUSTER SLOTS and installs the answer. 0 or <0. */
static int topo_load_from(struct rstore *r, kvl__rnode *nd, char *why,
                          size_t whylen)
{
	kvl__rconn *c = NULL;
	int rc = kvl__rnode_conn(nd, &r->cfg, &c, why, whylen);
	if (rc < 0)
		return rc;
	kvl__rcmd cmd = { 2, { "CLUSTER", "SLOTS" }, { 7, 5 } };
	redisReply *rep;
	rc = kvl__rconn_control(c, 1, &cmd, (struct redisReply **)&rep,
	                        r->timeout_ms, why, whylen);
	if (rc == 0) {
		pthread_mutex_lock(&r->mu);
		if (topo_install_locked(r, rep, kvl__rnode_host(nd), why,
		                        whylen) < 0)
			rc = KVL_EIO;
		pthread_mutex_unlock(&r->mu);
		freeReplyObject(rep);
	} else {
		kvl__rnode_flush(nd);
	}
	kvl__rnode_conn_put(c, r->pool_max);
	return rc;
}

/* Reloads the slot map from the first node that answers: the masters of
 * the current map first, then every other known node (replicas, seeds).
 * At most one refresh runs at a time and refreshes are R_REFRESH_MIN_NS
 * apart; a call that finds one too recent or running returns at once. */
static void topo_refresh(struct rstore *r)
{
	if (!r->cluster)
		return;
	pthread_mutex_lock(&r->mu);
	uint64_t now = r_now();
	if (r->refreshing || now - r->last_refresh < R_REFRESH_MIN_NS) {
		pthread_mutex_unlock(&r->mu);
		return;
	}
	r->refreshing = 1;
	size_t n = atomic_load(&r->n_nodes), k = 0;
	uint16_t *order = malloc(n * sizeof *order);
	uint8_t *seen = calloc(n ? n : 1, 1);
	if (order && seen) {
		for (size_t s = 0; s < KVL__REDIS_SLOTS; s++) {
			uint16_t m = r->slot_master[s];
			if (m != R_NONE && !seen[m]) {
				seen[m] = 1;
				order[k++] = m;
			}
		}
		for (size_t i = 0; i < n; i++)
			if (!seen[i])
				order[k++] = (uint16_t)i;
	}
	pthread_mutex_unlock(&r->mu);

	/* Nodes that are up first; the down ones only if none answered. */
	int done = 0;
	for (int pass = 0; pass < 2 && !done; pass++)
		for (size_t i = 0; i < k && !done; i++) {
			kvl__rnode *nd = r->nodes[order[i]];
			if (kvl__rnode_is_down(nd, r_now()) != pass)
				continue;
			if (pass)
				kvl__rnode_clear_down(nd);
			char why[KVL__ERRMSG_MAX];
			done = topo_load_from(r, nd, why, sizeof why) == 0;
		}
	free(order);
	free(seen);
	pthread_mutex_lock(&r->mu);
	r->refreshing = 0;
	r->last_refresh = r_now();
	pthread_mutex_unlock(&r->mu);
}

/* The node an op goes to now (mu held). R_NONE: the slot has no node. */
static uint16_t route_locked(struct rstore *r, kvl__rop *op, uint64_t now)
{
	if (op->redirect != R_NONE) {
		uint16_t id = op->redirect;
		op->redirect = R_NONE;
		return id;
	}
	if (!r->cluster)
		return 0;
	uint16_t slot = kvl__redis_key_slot(op->key, op->klen);
	uint16_t m = r->slot_master[slot];
	int read = op->kind == KVL__ROP_EXISTS || op->kind == KVL__ROP_GET ||
	           op->kind == KVL__ROP_CHECK;
	if (read && r->replicas && !op->to_master &&
	    r->slot_rset[slot] != R_NONE) {
		const struct rset *rs = &r->rsets[r->slot_rset[slot]];
		uint64_t start = atomic_fetch_add(&r->rr, 1);
		for (uint16_t i = 0; i < rs->n; i++) {
			uint16_t id = rs->ids[(start + i) % rs->n];
			if (!kvl__rnode_is_down(r->nodes[id], now))
				return id;
		}
	}
	return m;
}

/* ---------------------------------------------------------------- calls */

enum call_kind { CALL_EXISTS, CALL_GET, CALL_PUT, CALL_REMOVE };

struct rcall {
	struct rstore *r;
	kvl_store *store;
	enum call_kind kind;
	const char *fn;
	kvl__rop *ops;
	size_t n_ops;
	kvl__rop **order; /* n_ops */
	int64_t *kres;    /* per key: result so far */
	int need_refresh, need_backoff, msg_set;
	/* get */
	uint64_t *kneed;  /* per key: the object length its ranges need */
	uint32_t *kfirst; /* per key: its first op */
	uint32_t *kparts; /* per key: its ops */
	uint8_t *kshort;  /* per key: 1 short reply seen, 2 checked */
};

/* Records the failure of op's key (the first failure of the call also
 * becomes the store's message). */
static void call_fail(struct rcall *k, kvl__rop *op, int code,
                      const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void call_fail(struct rcall *k, kvl__rop *op, int code,
                      const char *fmt, ...)
{
	op->state = R_DONE;
	op->err = code;
	if (k->kres[op->index] >= 0)
		k->kres[op->index] = code;
	if (k->msg_set)
		return;
	k->msg_set = 1;
	char msg[KVL__ERRMSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	kvl__fail(&k->store->err, code, "%s: key \"%s\": %s", k->fn, op->key,
	          msg);
}

/* The error callback of the connections: classifies an error reply while
 * its text is at hand. */
static void call_on_error(void *ctx, kvl__rconn *c, kvl__rop *op,
                          const char *msg, size_t len)
{
	struct rcall *k = ctx;
	struct rstore *r = k->r;
	char host[KVL__REDIS_HOST_MAX];
	uint16_t slot = 0;
	int port = 0;

	switch (kvl__redis_classify(msg, len, &slot, host, &port)) {
	case KVL__REDIS_ERR_MOVED:
	case KVL__REDIS_ERR_ASK: {
		int moved = msg[0] == 'M';
		if (!host[0])
			snprintf(host, sizeof host, "%s", kvl__rconn_host(c));
		pthread_mutex_lock(&r->mu);
		uint16_t id = node_get_locked(r, host, port);
		if (moved && id != R_NONE && r->cluster) {
			r->slot_master[slot] = id;
			r->slot_rset[slot] = R_NONE;
		}
		pthread_mutex_unlock(&r->mu);
		if (id == R_NONE) {
			op->err = KVL_EIO;
			break;
		}
		op->redirect = id;
		op->err = moved ? R_RETRY_MOVED : R_RETRY_ASK;
		if (moved)
			k->need_refresh = 1;
		return;
	}
	case KVL__REDIS_ERR_TRYAGAIN:
		op->err = R_RETRY_AGAIN;
		op->to_master = 1; /* a replica still loading: its master */
		k->need_backoff = 1;
		return;
	case KVL__REDIS_ERR_READONLY:
		if (!r->cluster) { /* a standalone replica: nowhere else */
			op->err = KVL_EIO;
			break;
		}
		op->err = R_RETRY_REFRESH;
		op->to_master = 1;
		k->need_refresh = 1;
		return;
	case KVL__REDIS_ERR_OOM:
		op->err = k->kind == CALL_PUT ? KVL_EFULL : KVL_EIO;
		break;
	case KVL__REDIS_ERR_AUTH:
	case KVL__REDIS_ERR_OTHER:
		op->err = KVL_EIO;
		break;
	}
	call_fail(k, op, op->err, "%s replied: %.*s", kvl__rconn_name(c),
	          (int)(len > 300 ? 300 : len), msg);
}

/* Makes op pending again for the next round. */
static void op_retry(struct rcall *k, kvl__rop *op, const char *why)
{
	if (op->tries + 1 >= R_MAX_TRIES) {
		call_fail(k, op, KVL_EIO, "gave up after %d attempts: %s",
		          R_MAX_TRIES, why);
		return;
	}
	op->tries++;
	op->state = R_PENDING;
}

/* Decides an op whose reply came, for the kind of call. */
static void op_outcome(struct rcall *k, kvl__rop *op, kvl__rconn *c)
{
	const char *name = kvl__rconn_name(c);

	switch ((kvl__rop_out)op->out) {
	case KVL__ROUT_ERR:
		if (op->err < 0)
			return; /* a final error, recorded by the callback */
		op->asking = op->err == R_RETRY_ASK;
		op_retry(k, op,
		         op->err == R_RETRY_AGAIN ? "the cluster asked to try "
		                                    "again (TRYAGAIN, "
		                                    "CLUSTERDOWN or LOADING)" :
		         op->err == R_RETRY_REFRESH ? "a write reached a replica" :
		                                      "too many redirections");
		return;
	case KVL__ROUT_NONE:
	case KVL__ROUT_LOST:
		/* Once on a fresh connection (a pooled one may be stale after
		 * a restart); a replica read then goes to the master. */
		if (op->lost++ == 0) {
			op->to_master = 1;
			op->asking = 0;
			k->need_refresh = 1;
			op_retry(k, op, kvl__rconn_why(c));
			return;
		}
		call_fail(k, op, KVL_EIO, "connection to %s lost: %s", name,
		          kvl__rconn_why(c));
		return;
	case KVL__ROUT_TIMEOUT:
		call_fail(k, op, KVL_EIO, "%s: %s", name, kvl__rconn_why(c));
		return;
	case KVL__ROUT_PROTO:
		call_fail(k, op, KVL_EIO, "%s sent a reply of an unexpected "
		          "type", name);
		return;
	default:
		break;
	}
	op->asking = 0;
	op->state = R_DONE;
	int64_t *res = &k->kres[op->index];
	int out = op->out;
	switch ((kvl__rop_kind)op->kind) {
	case KVL__ROP_EXISTS:
	case KVL__ROP_DEL:
		if (out != KVL__ROUT_INT)
			break;
		if (*res >= 0)
			*res = k->kind == CALL_GET ?
			       (op->ival[0] ? 0 : KVL_ENOTFOUND) :
			       op->ival[0] != 0;
		return;
	case KVL__ROP_PUT:
		if (out != KVL__ROUT_OK && out != KVL__ROUT_NIL)
			break;
		*res = out == KVL__ROUT_OK ? KVL_PUT_STORED : KVL_PUT_PRESENT;
		return;
	case KVL__ROP_GET:
		if (out == KVL__ROUT_SHORT) {
			if (!k->kshort[op->index])
				k->kshort[op->index] = 1;
			return;
		}
		if (out != KVL__ROUT_BULK)
			break;
		return; /* the key's total is set at the end */
	case KVL__ROP_CHECK: {
		if (out != KVL__ROUT_INT)
			break;
		uint64_t need = k->kneed[op->index];
		if (!op->ival[0]) {
			*res = KVL_ENOTFOUND;
		} else if (need == UINT64_MAX) {
			call_fail(k, op, KVL_ERANGE,
			          "a range ends beyond byte 2^63, past the "
			          "object's %lld bytes",
			          (long long)op->ival[1]);
		} else if ((uint64_t)op->ival[1] < need) {
			call_fail(k, op, KVL_ERANGE,
			          "a range ends at byte %llu, beyond the "
			          "object's %lld bytes",
			          (unsigned long long)need,
			          (long long)op->ival[1]);
		} else {
			/* Absent when read, present now: a put raced. */
			*res = KVL_ENOTFOUND;
		}
		return;
	}
	}
	call_fail(k, op, KVL_EIO, "%s sent a reply of an unexpected type",
	          name);
}

/* GET: keys whose GETRANGE came back short get one CHECK op instead of
 * their parts. */
static void call_checks(struct rcall *k, size_t n_keys)
{
	for (size_t i = 0; i < n_keys; i++) {
		if (k->kshort[i] != 1 || k->kres[i] < 0)
			continue;
		k->kshort[i] = 2;
		kvl__rop *first = &k->ops[k->kfirst[i]];
		for (uint32_t j = 1; j < k->kparts[i]; j++)
			first[j].state = R_DONE;
		first->kind = KVL__ROP_CHECK;
		first->state = R_PENDING;
		first->asking = 0;
		first->redirect = R_NONE;
	}
}

/* Groups the routed ops k->order[0..m) by node, stably (a key's ops keep
 * their order), and writes the first index of each group into start[],
 * with start[groups] = m. Returns the number of groups, or 0 (ops failed
 * with KVL_ENOMEM) when out of memory. *start_out is malloc'ed. */
static size_t call_group(struct rcall *k, size_t m, size_t **start_out)
{
	size_t n_nodes = atomic_load(&k->r->n_nodes), groups = 0;
	size_t *cnt = calloc(n_nodes + 1, sizeof *cnt);
	kvl__rop **tmp = malloc(m * sizeof *tmp);
	size_t *start = NULL;
	if (cnt && tmp) {
		for (size_t i = 0; i < m; i++)
			cnt[k->order[i]->node + 1]++;
		for (size_t i = 0; i < n_nodes; i++) {
			groups += cnt[i + 1] != 0;
			cnt[i + 1] += cnt[i];
		}
		start = malloc((groups + 1) * sizeof *start);
	}
	if (!start) {
		for (size_t i = 0; i < m; i++)
			call_fail(k, k->order[i], KVL_ENOMEM, "out of memory");
		free(cnt);
		free(tmp);
		return 0;
	}
	for (size_t i = 0; i < m; i++)
		tmp[cnt[k->order[i]->node]++] = k->order[i];
	memcpy(k->order, tmp, m * sizeof *tmp);
	size_t g = 0;
	for (size_t i = 0; i < m; i++)
		if (i == 0 || k->order[i]->node != k->order[i - 1]->node)
			start[g++] = i;
	start[groups] = m;
	free(cnt);
	free(tmp);
	*start_out = start;
	return groups;
}

/* Runs every op of the call to its end (see the file comment). */
static void call_run(struct rcall *k, size_t n_keys)
{
	struct rstore *r = k->r;
	char msg[KVL__ERRMSG_MAX];

	/* New replicas and nodes show up in the map within 10 s even when
	 * nothing redirects. */
	if (r->cluster) {
		pthread_mutex_lock(&r->mu);
		int stale = r_now() - r->last_refresh > R_REFRESH_EVERY_NS &&
		            !r->refreshing;
		pthread_mutex_unlock(&r->mu);
		if (stale)
			topo_refresh(r);
	}
	for (int round = 0;; round++) {
		/* Route. Ops whose slot has no node wait for a refresh. */
		size_t m = 0;
		uint64_t now = r_now();
		pthread_mutex_lock(&r->mu);
		for (size_t i = 0; i < k->n_ops; i++) {
			kvl__rop *op = &k->ops[i];
			if (op->state != R_PENDING)
				continue;
			op->node = route_locked(r, op, now);
			if (op->node != R_NONE)
				k->order[m++] = op;
		}
		pthread_mutex_unlock(&r->mu);
		for (size_t i = 0; i < k->n_ops; i++) {
			kvl__rop *op = &k->ops[i];
			if (op->state != R_PENDING || op->node != R_NONE)
				continue;
			k->need_refresh = k->need_backoff = 1;
			op_retry(k, op, "its slot is served by no node (the "
			                "cluster is down or resharding)");
		}

		/* One connection per node; all nodes run at once. */
		size_t *start = NULL;
		size_t groups = m ? call_group(k, m, &start) : 0;
		kvl__rconn *small[8], **conns = small;
		if (groups > 8 && !(conns = calloc(groups, sizeof *conns))) {
			for (size_t i = 0; i < m; i++)
				call_fail(k, k->order[i], KVL_ENOMEM,
				          "out of memory");
			groups = 0;
			conns = small;
		}
		size_t live = 0;
		kvl__rconn *run[8], **runp = groups > 8 ? NULL : run;
		if (!runp && !(runp = malloc(groups * sizeof *runp))) {
			for (size_t i = 0; i < m; i++)
				call_fail(k, k->order[i], KVL_ENOMEM,
				          "out of memory");
			groups = 0;
		}
		for (size_t g = 0; g < groups; g++) {
			kvl__rop **ops = k->order + start[g];
			size_t n = start[g + 1] - start[g];
			kvl__rnode *nd = r->nodes[ops[0]->node];
			conns[g] = NULL;
			if (kvl__rnode_conn(nd, &r->cfg, &conns[g], msg,
			                    sizeof msg) < 0) {
				for (size_t i = 0; i < n; i++) {
					kvl__rop *op = ops[i];
					if (op->lost++ == 0 && r->cluster) {
						/* Maybe failed over: refresh. */
						k->need_refresh = 1;
						op->to_master = 1;
						op_retry(k, op, msg);
					} else {
						call_fail(k, op, KVL_EIO, "%s",
						          msg);
					}
				}
				continue;
			}
			kvl__rconn_job job = {
				.ops = ops, .n = n, .inflight = r->inflight,
				.set_tail = r->set_tail,
				.set_tail_len = r->set_tail_len,
				.set_argc = r->set_argc,
				.on_error = call_on_error, .ctx = k,
			};
			for (size_t i = 0; i < n; i++) {
				ops[i]->state = R_RUNNING;
				ops[i]->err = 0;
			}
			kvl__rconn_start(conns[g], &job);
			runp[live++] = conns[g];
		}
		kvl__rconn_run(runp, live, r->timeout_ms);

		/* Outcomes, then the connections back to their pools. */
		for (size_t g = 0; g < groups; g++) {
			kvl__rconn *c = conns[g];
			if (!c)
				continue;
			int timed_out = 0;
			for (size_t i = start[g]; i < start[g + 1]; i++) {
				kvl__rop *op = k->order[i];
				timed_out |= op->out == KVL__ROUT_TIMEOUT;
				op->state = R_DONE;
				op_outcome(k, op, c);
			}
			if (kvl__rconn_broken(c)) {
				kvl__rnode *nd = kvl__rconn_owner(c);
				if (timed_out)
					kvl__rnode_mark_down(nd,
					                     kvl__rconn_why(c));
				else
					kvl__rnode_flush(nd);
			}
			kvl__rnode_conn_put(c, r->pool_max);
		}
		if (conns != small)
			free(conns);
		if (runp != run)
			free(runp);
		free(start);

		if (k->kind == CALL_GET)
			call_checks(k, n_keys);
		int pending = 0;
		for (size_t i = 0; i < k->n_ops && !pending; i++)
			pending = k->ops[i].state == R_PENDING;
		if (!pending)
			break;
		if (k->need_refresh) {
			topo_refresh(r);
			k->need_refresh = 0;
		}
		if (k->need_backoff) {
			r_sleep_ms(10u << (round < 4 ? round : 4));
			k->need_backoff = 0;
		}
	}
}

/* Allocates the call's arrays: n_ops ops (zeroed, pending, no redirect)
 * and the per-key arrays. KVL_ENOMEM. */
static int call_init(struct rcall *k, struct rstore *r, kvl_store *store,
                     enum call_kind kind, const char *fn, size_t n_keys,
                     size_t n_ops, size_t n_segs, kvl__rseg **segs)
{
	memset(k, 0, sizeof *k);
	k->r = r;
	k->store = store;
	k->kind = kind;
	k->fn = fn;
	size_t bytes = n_ops * (sizeof(kvl__rop) + sizeof(kvl__rop *)) +
	               n_keys * sizeof(int64_t);
	if (kind == CALL_GET)
		bytes += n_segs * sizeof(kvl__rseg) +
		         n_keys * (sizeof(uint64_t) + 2 * sizeof(uint32_t) + 1);
	char *p = calloc(1, bytes ? bytes : 1);
	if (!p)
		return kvl__fail(&store->err, KVL_ENOMEM,
		                 "%s: out of memory for %zu keys", fn, n_keys);
	k->ops = (kvl__rop *)(void *)p;
	p += n_ops * sizeof(kvl__rop);
	k->kres = (int64_t *)(void *)p;
	p += n_keys * sizeof(int64_t);
	if (kind == CALL_GET) {
		*segs = (kvl__rseg *)(void *)p;
		p += n_segs * sizeof(kvl__rseg);
		k->kneed = (uint64_t *)(void *)p;
		p += n_keys * sizeof(uint64_t);
	}
	k->order = (kvl__rop **)(void *)p;
	p += n_ops * sizeof(kvl__rop *);
	if (kind == CALL_GET) {
		k->kfirst = (uint32_t *)(void *)p;
		p += n_keys * sizeof(uint32_t);
		k->kparts = (uint32_t *)(void *)p;
		p += n_keys * sizeof(uint32_t);
		k->kshort = (uint8_t *)p;
	}
	return 0;
}

static void call_free(struct rcall *k)
{
	free(k->ops);
}

/* A new op for key i. */
static kvl__rop *call_op(struct rcall *k, const char *key, size_t i,
                         kvl__rop_kind kind)
{
	kvl__rop *op = &k->ops[k->n_ops++];
	op->key = key;
	op->klen = (uint32_t)strlen(key);
	op->kind = (uint8_t)kind;
	op->index = (uint32_t)i;
	op->redirect = R_NONE;
	op->state = R_PENDING;
	return op;
}

/* ----------------------------------------------------------- operations */

static int redis_simple(kvl_store *store, void *impl, const char *const *keys,
                        size_t n, int *results, enum call_kind kind,
                        const char *fn)
{
	struct rstore *r = impl;
	struct rcall k;
	int rc = call_init(&k, r, store, kind, fn, n, n, 0, NULL);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++)
		call_op(&k, keys[i], i,
		        kind == CALL_EXISTS ? KVL__ROP_EXISTS : KVL__ROP_DEL);
	call_run(&k, n);
	uint64_t hits = 0, misses = 0, errors = 0;
	for (size_t i = 0; i < n; i++) {
		results[i] = (int)k.kres[i];
		errors += results[i] < 0;
		hits += results[i] == 1;
		misses += results[i] == 0;
	}
	if (kind == CALL_EXISTS) {
		atomic_fetch_add(&r->hits, hits);
		atomic_fetch_add(&r->misses, misses);
	}
	atomic_fetch_add(&r->errors, errors);
	call_free(&k);
	return 0;
}

static int redis_exists(kvl_store *store, void *impl, const kvl__batch *b)
{
	return redis_simple(store, impl, b->keys, b->n, b->results,
	                    CALL_EXISTS, b->fn);
}

static int redis_remove(kvl_store *store, void *impl, const kvl__batch *b)
{
	return redis_simple(store, impl, b->keys, b->n, b->results,
	                    CALL_REMOVE, b->fn);
}

static void seg_sort(kvl__rseg *s, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		kvl__rseg t = s[i];
		size_t j = i;
		while (j > 0 && s[j - 1].off > t.off) {
			s[j] = s[j - 1];
			j--;
		}
		s[j] = t;
	}
}

static int redis_get(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct rstore *r = impl;
	const char *const *keys = b->keys;
	size_t n = b->n;
	const kvl_range *ranges = b->ranges;
	const size_t *n_ranges = b->counts;
	int *results = b->results;
	struct rcall k;
	kvl__rseg *segs = NULL;
	size_t total_ranges = 0;
	for (size_t i = 0; i < n; i++)
		total_ranges += n_ranges[i];
	/* Each key has at most its ranges and one probe as segments, and at
	 * most one op per segment (or one when it has none). */
	int rc = call_init(&k, r, store, CALL_GET, b->fn, n,
	                   total_ranges + n, total_ranges + n, &segs);
	if (rc < 0)
		return rc;

	size_t at = 0, ns = 0;
	for (size_t i = 0; i < n; i++) {
		const kvl_range *rg = ranges + at;
		size_t nr = n_ranges[i];
		at += nr;
		uint64_t total = 0, need = 0, data_end = 0, probe = 0;
		int bad = 0;
		kvl__rseg *sg = segs + ns;
		size_t q = 0;
		for (size_t j = 0; j < nr; j++) {
			uint64_t off = rg[j].offset, len = rg[j].len;
			if (off > (uint64_t)INT64_MAX ||
			    len > (uint64_t)INT64_MAX - off ||
			    len > (uint64_t)INT64_MAX - total) {
				bad = 1;
				need = UINT64_MAX;
				continue;
			}
			uint64_t end = off + len;
			if (end > need)
				need = end;
			total += len;
			if (len == 0) {
				if (off > probe)
					probe = off;
				continue;
			}
			sg[q++] = (kvl__rseg){ off, (size_t)len, rg[j].addr };
			if (end > data_end)
				data_end = end;
		}
		k.kneed[i] = need;
		k.kres[i] = (int64_t)total;
		k.kfirst[i] = (uint32_t)k.n_ops;
		if (bad) {
			call_op(&k, keys[i], i, KVL__ROP_CHECK);
			k.kshort[i] = 2;
			k.kparts[i] = 1;
			continue;
		}
		if (probe > data_end) /* an empty range past every byte read */
			sg[q++] = (kvl__rseg){ probe - 1, 1, NULL };
		if (q == 0) {
			call_op(&k, keys[i], i, KVL__ROP_EXISTS);
			k.kparts[i] = 1;
			continue;
		}
		seg_sort(sg, q);
		ns += q;
		/* One GETRANGE per run of segments that neither overlap nor
		 * leave more gap bytes than they read (or R_GAP_MIN). */
		size_t p0 = 0;
		while (p0 < q) {
			uint64_t lo = sg[p0].off, hi = lo + sg[p0].len;
			uint64_t used = sg[p0].len, gap = 0;
			size_t p1 = p0 + 1;
			while (p1 < q && sg[p1].off >= hi) {
				uint64_t gp = sg[p1].off - hi;
				uint64_t allow = used + sg[p1].len;
				if (allow < R_GAP_MIN)
					allow = R_GAP_MIN;
				if (gap + gp > allow)
					break;
				gap += gp;
				used += sg[p1].len;
				hi = sg[p1].off + sg[p1].len;
				p1++;
			}
			kvl__rop *op = call_op(&k, keys[i], i, KVL__ROP_GET);
			op->lo = lo;
			op->hi = hi;
			op->seg = sg + p0;
			op->nseg = (uint32_t)(p1 - p0);
			p0 = p1;
		}
		k.kparts[i] = (uint32_t)(k.n_ops - k.kfirst[i]);
	}

	call_run(&k, n);
	uint64_t hits = 0, misses = 0, errors = 0;
	for (size_t i = 0; i < n; i++) {
		results[i] = k.kres[i] < 0 ? (int)k.kres[i] : 0;
		hits += results[i] >= 0;
		misses += results[i] == KVL_ENOTFOUND;
		errors += results[i] < 0 && results[i] != KVL_ENOTFOUND;
	}
	atomic_fetch_add(&r->hits, hits);
	atomic_fetch_add(&r->misses, misses);
	atomic_fetch_add(&r->errors, errors);
	call_free(&k);
	return 0;
}

static int redis_put(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct rstore *r = impl;
	const char *const *keys = b->keys;
	size_t n = b->n;
	const kvl_iov *pieces = b->pieces;
	const size_t *n_pieces = b->counts;
	int *results = b->results;
	struct rcall k;
	int rc = call_init(&k, r, store, CALL_PUT, b->fn, n, n, 0,
	                   NULL);
	if (rc < 0)
		return rc;
	size_t at = 0;
	for (size_t i = 0; i < n; i++) {
		const kvl_iov *pc = n_pieces[i] ? pieces + at : NULL;
		size_t np = n_pieces[i];
		at += np;
		uint64_t len = 0;
		int too_big = 0;
		for (size_t j = 0; j < np; j++) {
			if (pc[j].len > r->max_value - len)
				too_big = 1;
			else
				len += pc[j].len;
		}
		kvl__rop *op = call_op(&k, keys[i], i, KVL__ROP_PUT);
		if (too_big || np > UINT32_MAX) {
			call_fail(&k, op, KVL_ERANGE,
			          "the object is larger than the %llu bytes a "
			          "Redis string may hold (proto-max-bulk-len)",
			          (unsigned long long)r->max_value);
			continue;
		}
		op->pieces = pc;
		op->npieces = (uint32_t)np;
		op->vlen = len;
	}
	call_run(&k, n);
	uint64_t puts = 0, errors = 0;
	for (size_t i = 0; i < n; i++) {
		results[i] = (int)k.kres[i];
		puts += results[i] == KVL_PUT_STORED;
		errors += results[i] < 0;
	}
	atomic_fetch_add(&r->puts, puts);
	atomic_fetch_add(&r->errors, errors);
	call_free(&k);
	return 0;
}

/* ---------------------------------------------------------------- stats */

static void redis_stats(void *impl, kvl_store_stats *out)
{
	struct rstore *r = impl;
	out->hits = atomic_load(&r->hits);
	out->misses = atomic_load(&r->misses);
	out->puts = atomic_load(&r->puts);
	out->errors = atomic_load(&r->errors);

	/* The masters: every node that serves a slot, or the one server. */
	size_t n = atomic_load(&r->n_nodes), k = 0;
	uint16_t *ids = malloc((n ? n : 1) * sizeof *ids);
	uint8_t *seen = calloc(n ? n : 1, 1);
	int unknown = !ids || !seen;
	if (!unknown) {
		pthread_mutex_lock(&r->mu);
		if (!r->cluster) {
			ids[k++] = 0;
		} else {
			for (size_t s = 0; s < KVL__REDIS_SLOTS; s++) {
				uint16_t m = r->slot_master[s];
				if (m == R_NONE)
					unknown = 1;
				else if (m < n && !seen[m]) {
					seen[m] = 1;
					ids[k++] = m;
				}
			}
		}
		pthread_mutex_unlock(&r->mu);
	}
	uint64_t objects = 0, bytes = 0, capacity = 0, evictions = 0;
	int no_cap = 0;
	for (size_t i = 0; i < k; i++) {
		kvl__rnode *nd = r->nodes[ids[i]];
		kvl__rconn *c = NULL;
		char why[KVL__ERRMSG_MAX];
		if (kvl__rnode_conn(nd, &r->cfg, &c, why, sizeof why) < 0) {
			unknown = 1;
			continue;
		}
		kvl__rcmd cmds[3] = {
			{ 1, { "DBSIZE" }, { 6 } },
			{ 2, { "INFO", "memory" }, { 4, 6 } },
			{ 2, { "INFO", "stats" }, { 4, 5 } },
		};
		redisReply *rep[3];
		if (kvl__rconn_control(c, 3, cmds, (struct redisReply **)rep,
		                       r->timeout_ms, why, sizeof why) < 0) {
			unknown = 1;
			kvl__rnode_conn_put(c, r->pool_max);
			continue;
		}
		int f1 = 0, f2 = 0, f3 = 0;
		if (rep[0]->type == REDIS_REPLY_INTEGER)
			objects += (uint64_t)rep[0]->integer;
		else
			unknown = 1;
		if (rep[1]->type == REDIS_REPLY_STRING) {
			const char *info = rep[1]->str;
			bytes += kvl__redis_info_u64(info, "used_memory", &f1);
			uint64_t mm = kvl__redis_info_u64(info, "maxmemory", &f2);
			capacity += mm;
			no_cap |= mm == 0;
		}
		if (rep[2]->type == REDIS_REPLY_STRING)
			evictions += kvl__redis_info_u64(rep[2]->str,
			                                 "evicted_keys", &f3);
		unknown |= !f1 || !f2;
		for (int j = 0; j < 3; j++)
			freeReplyObject(rep[j]);
		kvl__rnode_conn_put(c, r->pool_max);
	}
	free(ids);
	free(seen);
	out->objects = unknown ? UINT64_MAX : objects;
	out->bytes = unknown ? UINT64_MAX : bytes;
	out->capacity = no_cap || unknown ? 0 : capacity;
	out->evictions = evictions;
}

/* ------------------------------------------------------------ open, close */

static void redis_close(void *impl)
{
	struct rstore *r = impl;
	if (!r)
		return;
	size_t n = atomic_load(&r->n_nodes);
	for (size_t i = 0; i < n; i++)
		kvl__rnode_free(r->nodes[i]);
	free(r->slot_master);
	free(r->slot_rset);
	free(r->rsets);
	pthread_mutex_destroy(&r->mu);
	free(r->user);
	free(r->password);
	free(r);
}

/* Reads the options into r. 0 or KVL_EPARSE. */
static int redis_options(struct rstore *r, kvl__uri *uri, uint64_t *db,
                         char *errbuf, size_t errlen)
{
	uint64_t connect_ms = 1000, timeout_ms = 2000, pool = 4;
	int rc;

	r->inflight = 2u << 20;
	if ((rc = kvl__uri_u64(uri, "connect_timeout_ms", &connect_ms, errbuf,
	                       errlen)) < 0 ||
	    (rc = kvl__uri_u64(uri, "timeout_ms", &timeout_ms, errbuf,
	                       errlen)) < 0 ||
	    (rc = kvl__uri_u64(uri, "ttl", &r->ttl, errbuf, errlen)) < 0 ||
	    (rc = kvl__uri_size(uri, "inflight", &r->inflight, errbuf,
	                        errlen)) < 0 ||
	    (rc = kvl__uri_bool(uri, "replicas", &r->replicas, errbuf,
	                        errlen)) < 0 ||
	    (rc = kvl__uri_u64(uri, "pool", &pool, errbuf, errlen)) < 0)
		return rc;
	uint64_t dbo = 0;
	if ((rc = kvl__uri_u64(uri, "db", &dbo, errbuf, errlen)) < 0)
		return rc;
	if (rc == 1) {
		if (*db != UINT64_MAX && *db != dbo)
			return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
			                     "redis: the database is given "
			                     "twice (path /%llu and db=%llu)",
			                     (unsigned long long)*db,
			                     (unsigned long long)dbo);
		*db = dbo;
	}
	if (*db == UINT64_MAX)
		*db = 0;
	if (connect_ms == 0 || connect_ms > 3600000 || timeout_ms == 0 ||
	    timeout_ms > 3600000)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "redis: connect_timeout_ms and timeout_ms "
		                     "must be 1..3600000 (got %llu and %llu)",
		                     (unsigned long long)connect_ms,
		                     (unsigned long long)timeout_ms);
	if (r->ttl > 100ull * 365 * 86400)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "redis: ttl=%llu: at most 100 years of "
		                     "seconds",
		                     (unsigned long long)r->ttl);
	if (*db > 1000000)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "redis: db=%llu is not a database number",
		                     (unsigned long long)*db);
	if (r->inflight < 4096)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "redis: inflight=%llu: at least 4096 bytes",
		                     (unsigned long long)r->inflight);
	if (pool > 1024)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "redis: pool=%llu: at most 1024 idle "
		                     "connections per node",
		                     (unsigned long long)pool);
	r->cfg.connect_timeout_ms = (uint32_t)connect_ms;
	r->cfg.timeout_ms = (uint32_t)timeout_ms;
	r->timeout_ms = (uint32_t)timeout_ms;
	r->pool_max = (unsigned)pool;
	return 0;
}

/* Splits "user:password@" off the authority and parses the hosts into
 * seed nodes. 0 or KVL_EPARSE / KVL_ENOMEM. */
static int redis_authority(struct rstore *r, const char *auth, char *errbuf,
                           size_t errlen)
{
	const char *at = strrchr(auth, '@'), *hosts = auth;
	if (at) {
		const char *colon = memchr(auth, ':', (size_t)(at - auth));
		if (!colon)
			return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
			                     "redis: credentials before '@' must "
			                     "be user:password or :password");
		if (colon > auth &&
		    !(r->user = pct_decode(auth, (size_t)(colon - auth))))
			return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
			                     "redis: bad %%-escape in the user "
			                     "name");
		r->password = pct_decode(colon + 1, (size_t)(at - colon - 1));
		if (!r->password)
			return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
			                     "redis: bad %%-escape in the "
			                     "password");
		hosts = at + 1;
	}
	if (!*hosts)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "redis: no host; expected "
		                     "redis://host:port[,host:port…]");
	for (const char *p = hosts;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char host[KVL__REDIS_HOST_MAX];
		int port;
		if (len == 0 || kvl__redis_parse_addr(p, len, host, &port) < 0 ||
		    !host[0])
			return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
			                     "redis: bad address \"%.*s\" "
			                     "(expected host:port, [v6addr]:port "
			                     "or host)",
			                     (int)(len > 200 ? 200 : len), p);
		if (node_get_locked(r, host, port) == R_NONE)
			return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
			                     "redis: out of memory or too many "
			                     "hosts");
		if (!comma)
			break;
		p = comma + 1;
	}
	return 0;
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
static int redis_discover(struct rstore *r, uint64_t db, char *errbuf,
                          size_t errlen)
{
	size_t n_seeds = atomic_load(&r->n_nodes);
	char tried[KVL__ERRMSG_MAX] = "";
	size_t used = 0;
	kvl__rconn_cfg probe = r->cfg;
	probe.db = 0;
	probe.readonly = 0;

	for (size_t i = 0; i < n_seeds; i++) {
		kvl__rnode *nd = r->nodes[i];
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
		                        r->timeout_ms, why, sizeof why);
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
			                   "redis %s: %s%s", kvl__rnode_name(nd),
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
		r->cluster =
			rep[0]->type == REDIS_REPLY_STRING &&
			kvl__redis_info_u64(rep[0]->str, "cluster_enabled",
			                    &found) == 1;
		r->max_value = R_DEFAULT_MAX_VALUE;
		if (rep[1]->type == REDIS_REPLY_ARRAY && rep[1]->elements == 2 &&
		    rep[1]->element[1]->type == REDIS_REPLY_STRING) {
			uint64_t v = strtoull(rep[1]->element[1]->str, NULL, 10);
			if (v)
				r->max_value = v;
		}
		freeReplyObject(rep[0]);
		freeReplyObject(rep[1]);

		if (!r->cluster) {
			kvl__rconn_close(c);
			if (n_seeds > 1)
				return kvl__fail_buf(
					errbuf, errlen, KVL_EINVAL,
					"redis: %zu hosts given but %s is not a "
					"cluster node (cluster_enabled:0); a "
					"standalone server takes one host:port",
					n_seeds, kvl__rnode_name(nd));
			if (r->replicas)
				return kvl__fail_buf(
					errbuf, errlen, KVL_EINVAL,
					"redis: replicas=1 needs a Redis Cluster; "
					"%s is a standalone server",
					kvl__rnode_name(nd));
			r->cfg.db = (uint32_t)db;
			if (db) { /* check SELECT now: a clear error at open */
				kvl__rconn *d = NULL;
				rc = kvl__rnode_conn(nd, &r->cfg, &d, errbuf,
				                     errlen);
				if (rc < 0)
					return rc;
				kvl__rnode_conn_put(d, r->pool_max);
			}
			return 0;
		}
		if (db)
			rc = kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
			                   "redis: db=%llu: a Redis Cluster has "
			                   "only database 0 (%s is a cluster "
			                   "node)",
			                   (unsigned long long)db, kvl__rnode_name(nd));
		kvl__rcmd sl = { 2, { "CLUSTER", "SLOTS" }, { 7, 5 } };
		redisReply *slots = NULL;
		if (rc == 0)
			rc = kvl__rconn_control(c, 1, &sl,
			                        (struct redisReply **)&slots,
			                        r->timeout_ms, errbuf, errlen);
		kvl__rconn_close(c);
		if (rc < 0)
			return rc;
		pthread_mutex_lock(&r->mu);
		rc = topo_install_locked(r, slots, kvl__rnode_host(nd), why, sizeof why);
		r->last_refresh = r_now();
		pthread_mutex_unlock(&r->mu);
		freeReplyObject(slots);
		if (rc < 0)
			return kvl__fail_buf(errbuf, errlen, KVL_EIO,
			                     "redis %s: %s", kvl__rnode_name(nd), why);
		r->cfg.readonly = r->replicas;
		return 0;
	}
	return kvl__fail_buf(errbuf, errlen, KVL_EIO,
	                     "redis: cannot reach any server: %s", tried);
}

static int redis_open(kvl_store *store, kvl__uri *uri, void **impl,
                      kvl__store_caps *caps, char *errbuf, size_t errlen)
{
	uint64_t db = UINT64_MAX;
	int rc;

	if (uri->path[0] && strcmp(uri->path, "/") != 0) {
		const char *p = uri->path + 1;
		db = 0;
		if (!*p)
			db = UINT64_MAX;
		for (; *p; p++) {
			if (*p < '0' || *p > '9' || db > 1000000)
				return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
				                     "redis: path \"%s\": expected "
				                     "/DB (a database number)",
				                     uri->path);
			db = db * 10 + (uint64_t)(*p - '0');
		}
	}
	struct rstore *r = calloc(1, sizeof *r);
	if (!r)
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "redis: out of memory");
	pthread_mutex_init(&r->mu, NULL);
	atomic_init(&r->n_nodes, 0);
	if ((rc = redis_options(r, uri, &db, errbuf, errlen)) < 0 ||
	    (rc = redis_authority(r, uri->authority, errbuf, errlen)) < 0)
		goto fail;
	/* Unknown options are refused before any connection is made. */
	if ((rc = kvl__uri_check_unused(uri, errbuf, errlen)) < 0)
		goto fail;
	r->cfg.user = r->user;
	r->cfg.password = r->password;

	char *t = r->set_tail;
	t += sprintf(t, "\r\n$2\r\nNX\r\n");
	r->set_argc = 4;
	if (r->ttl) {
		char num[24];
		int nl = sprintf(num, "%llu", (unsigned long long)r->ttl);
		t += sprintf(t, "$2\r\nEX\r\n$%d\r\n%s\r\n", nl, num);
		r->set_argc = 6;
	}
	r->set_tail_len = (size_t)(t - r->set_tail);

	if ((rc = redis_discover(r, db, errbuf, errlen)) < 0)
		goto fail;
	(void)store;
	(void)caps; /* never trusted: kvlink verifies reads */
	*impl = r;
	return 0;
fail:
	redis_close(r);
	return rc;
}

const kvl__store_ops kvl__store_redis_ops = {
	.scheme = "redis",
	.open = redis_open,
	.close = redis_close,
	.exists = redis_exists,
	.get = redis_get,
	.put = redis_put,
	.remove = redis_remove,
	.reg = NULL,
	.stats = redis_stats,
};
