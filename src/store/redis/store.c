/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.c — the Redis store (schemes "redis" and "rediss"): what
 * kvl_store's calls mean in Redis commands, over the Redis client of
 * cluster.h (a standalone server or a Redis Cluster, found out at open;
 * nodes, slots, routing and retries are the client's).
 *
 * URI: redis[s]://[user:password@]host:port[,host:port…][/db][?options]
 * (see docs/redis.md). The hosts are the client's seeds; the options set
 * its timeouts, pools, bytes in flight and replica reads, and this file's
 * ttl; with rediss:// the tls_* options make the store's TLS context
 * (tls.h), which every connection of the client uses and which is freed
 * after the client.
 *
 * Objects are Redis strings: put is "SET key value NX [EX ttl]" (stored,
 * or nil: already present), exists is "EXISTS key", remove is "UNLINK key",
 * and get is one "GETRANGE key lo hi" per key covering its ranges, whose
 * payload is scattered into the destinations as it arrives (pipeline.c);
 * ranges that overlap, or whose gaps exceed both the bytes wanted and
 * 64 KiB, take one GETRANGE each. A GETRANGE whose reply is shorter than
 * asked (the key is absent, or the object is shorter) writes nothing and is
 * followed by "EXISTS key; STRLEN key" to tell KVL_ENOTFOUND from
 * KVL_ERANGE; the same pair answers the tier: store's size query. A put
 * larger than the server's proto-max-bulk-len fails with
 * KVL_ERANGE before it is sent; a put refused for maxmemory is KVL_EFULL.
 * The store is never trusted (store->trusted = 0): kvlink verifies payload
 * checksums on every read. Stats: hits, misses, puts and errors are this
 * store's counters; objects, bytes, capacity and evictions are summed over
 * DBSIZE, INFO memory and INFO stats of every master.
 *
 * Each kvl_store call is one client call (struct req: one operation per
 * key, or per GETRANGE of a get); the hooks below turn each operation's
 * outcome into its key's result, and the first failure of the call into
 * the store's message. Threads: a req belongs to the calling thread; the
 * store's fields are fixed at open but for the counters, which are
 * atomics; no lock of its own.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include <hiredis/hiredis.h>

#include "store/redis/cluster.h"
#include "store/redis/tls.h"
#include "store/backend.h"

#define R_GAP_MIN (64u << 10)     /* gap bytes a GETRANGE may always read */

struct rstore {
	/* immutable after open */
	kvl__rcluster *cl;
	kvl__tls *tls; /* rediss://: the context of every connection */
	char *user, *password;
	uint64_t ttl, max_value;
	char set_tail[64];
	size_t set_tail_len;
	int set_argc;

	atomic_uint_fast64_t hits, misses, puts, errors;
};

/* ------------------------------------------------------------- helpers */

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

/* ---------------------------------------------------------------- calls */

enum call_kind { CALL_EXISTS, CALL_GET, CALL_PUT, CALL_REMOVE, CALL_SIZE };

/* One kvl_store call: the client call and each key's result so far. */
struct req {
	kvl__rcall *k;
	kvl_store *store;
	enum call_kind kind;
	const char *fn;
	size_t n_keys;
	int64_t *kres;    /* per key: result so far */
	int msg_set;
	/* get */
	uint64_t *kneed;  /* per key: the object length its ranges need */
	uint32_t *kfirst; /* per key: its first op */
	uint32_t *kparts; /* per key: its ops */
	uint8_t *kshort;  /* per key: 1 short reply seen, 2 checked */
};

/* An error reply that the client does not act on: maxmemory reached is
 * the store being full for a put, an ACL refusal (NOPERM) is KVL_EPERM,
 * any other a failure of the key. */
static int req_error_code(void *ctx, const kvl__rop *op,
                          kvl__redis_err_kind kind)
{
	struct req *q = ctx;
	(void)op;
	if (kind == KVL__REDIS_ERR_AUTH)
		return KVL_EPERM;
	return kind == KVL__REDIS_ERR_OOM && q->kind == CALL_PUT ? KVL_EFULL :
	                                                          KVL_EIO;
}

/* Records the failure of op's key (the first failure of the call also
 * becomes the store's message). */
static void req_failed(void *ctx, const kvl__rop *op, int code,
                       const char *why)
{
	struct req *q = ctx;
	if (q->kres[op->index] >= 0)
		q->kres[op->index] = code;
	if (q->msg_set)
		return;
	q->msg_set = 1;
	kvl__fail(&q->store->err, code, "%s: key \"%s\": %s", q->fn, op->key,
	          why);
}

/* What an op's reply means for its key, for the kind of call. */
static void req_reply(void *ctx, kvl__rcall *k, kvl__rop *op,
                      const char *name)
{
	struct req *q = ctx;
	int64_t *res = &q->kres[op->index];
	int out = op->out;
	switch ((kvl__rop_kind)op->kind) {
	case KVL__ROP_EXISTS:
	case KVL__ROP_DEL:
		if (out != KVL__ROUT_INT)
			break;
		if (*res >= 0)
			*res = q->kind == CALL_GET ?
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
			if (!q->kshort[op->index])
				q->kshort[op->index] = 1;
			return;
		}
		if (out != KVL__ROUT_BULK)
			break;
		return; /* the key's total is set at the end */
	case KVL__ROP_CHECK: {
		if (out != KVL__ROUT_INT)
			break;
		if (q->kind == CALL_SIZE) { /* the length, or absent */
			if (*res >= 0)
				*res = op->ival[0] ? op->ival[1] : KVL_ENOTFOUND;
			return;
		}
		uint64_t need = q->kneed[op->index];
		if (!op->ival[0]) {
			*res = KVL_ENOTFOUND;
		} else if (need == UINT64_MAX) {
			kvl__rcall_fail(k, op, KVL_ERANGE,
			                "a range ends beyond byte 2^63, past "
			                "the object's %lld bytes",
			                (long long)op->ival[1]);
		} else if ((uint64_t)op->ival[1] < need) {
			kvl__rcall_fail(k, op, KVL_ERANGE,
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
	kvl__rcall_fail(k, op, KVL_EIO, "%s sent a reply of an unexpected type",
	                name);
}

/* GET: keys whose GETRANGE came back short get one CHECK op instead of
 * their parts. */
static void get_round(void *ctx, kvl__rcall *k)
{
	struct req *q = ctx;
	for (size_t i = 0; i < q->n_keys; i++) {
		if (q->kshort[i] != 1 || q->kres[i] < 0)
			continue;
		q->kshort[i] = 2;
		for (uint32_t j = 1; j < q->kparts[i]; j++)
			kvl__rcall_drop(kvl__rcall_op(k, q->kfirst[i] + j));
		kvl__rcall_redo(kvl__rcall_op(k, q->kfirst[i]), KVL__ROP_CHECK);
	}
}

static const kvl__rcall_hooks req_hooks = {
	.error_code = req_error_code,
	.reply = req_reply,
	.failed = req_failed,
};

static const kvl__rcall_hooks get_hooks = {
	.error_code = req_error_code,
	.reply = req_reply,
	.failed = req_failed,
	.round = get_round,
};

/* Allocates the call for n_ops ops and the per-key arrays (for a get also
 * n_segs segments into *segs). KVL_ENOMEM. */
static int req_init(struct req *q, struct rstore *r, kvl_store *store,
                    enum call_kind kind, const char *fn, size_t n_keys,
                    size_t n_ops, size_t n_segs, kvl__rseg **segs)
{
	memset(q, 0, sizeof *q);
	q->store = store;
	q->kind = kind;
	q->fn = fn;
	q->n_keys = n_keys;
	size_t bytes = n_keys * sizeof(int64_t);
	if (kind == CALL_GET)
		bytes += n_segs * sizeof(kvl__rseg) +
		         n_keys * (sizeof(uint64_t) + 2 * sizeof(uint32_t) + 1);
	char *p = calloc(1, bytes ? bytes : 1);
	q->k = p ? kvl__rcall_new(r->cl, n_ops,
	                          kind == CALL_GET ? &get_hooks : &req_hooks,
	                          q) :
	           NULL;
	if (!q->k) {
		free(p);
		return kvl__fail(&store->err, KVL_ENOMEM,
		                 "%s: out of memory for %zu keys", fn, n_keys);
	}
	q->kres = (int64_t *)(void *)p;
	p += n_keys * sizeof(int64_t);
	if (kind == CALL_GET) {
		*segs = (kvl__rseg *)(void *)p;
		p += n_segs * sizeof(kvl__rseg);
		q->kneed = (uint64_t *)(void *)p;
		p += n_keys * sizeof(uint64_t);
		q->kfirst = (uint32_t *)(void *)p;
		p += n_keys * sizeof(uint32_t);
		q->kparts = (uint32_t *)(void *)p;
		p += n_keys * sizeof(uint32_t);
		q->kshort = (uint8_t *)p;
	}
	return 0;
}

static void req_free(struct req *q)
{
	kvl__rcall_free(q->k);
	free(q->kres);
}

/* A new op for key i. */
static kvl__rop *req_op(struct req *q, const char *key, size_t i,
                        kvl__rop_kind kind)
{
	return kvl__rcall_add(q->k, key, (uint32_t)i, kind);
}

/* ----------------------------------------------------------- operations */

static int redis_simple(kvl_store *store, void *impl, const char *const *keys,
                        size_t n, int *results, enum call_kind kind,
                        const char *fn)
{
	struct rstore *r = impl;
	struct req rq;
	int rc = req_init(&rq, r, store, kind, fn, n, n, 0, NULL);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++)
		req_op(&rq, keys[i], i,
		       kind == CALL_EXISTS ? KVL__ROP_EXISTS : KVL__ROP_DEL);
	kvl__rcall_run(rq.k);
	uint64_t hits = 0, misses = 0, errors = 0;
	for (size_t i = 0; i < n; i++) {
		results[i] = (int)rq.kres[i];
		errors += results[i] < 0;
		hits += results[i] == 1;
		misses += results[i] == 0;
	}
	if (kind == CALL_EXISTS) {
		atomic_fetch_add(&r->hits, hits);
		atomic_fetch_add(&r->misses, misses);
	}
	atomic_fetch_add(&r->errors, errors);
	req_free(&rq);
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

/* An object's length, for the tier: store's promotions (which read
 * objects whole): one "EXISTS key; STRLEN key". */
static int redis_size(kvl_store *store, void *impl, const char *key,
                      uint64_t *len)
{
	struct rstore *r = impl;
	struct req rq;
	int rc = req_init(&rq, r, store, CALL_SIZE, "size", 1, 1, 0, NULL);
	if (rc < 0)
		return rc;
	req_op(&rq, key, 0, KVL__ROP_CHECK);
	kvl__rcall_run(rq.k);
	int64_t v = rq.kres[0];
	req_free(&rq);
	if (v == KVL_ENOTFOUND)
		return 0;
	if (v < 0)
		return (int)v;
	*len = (uint64_t)v;
	return 1;
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
	struct req rq;
	kvl__rseg *segs = NULL;
	size_t total_ranges = 0;
	for (size_t i = 0; i < n; i++)
		total_ranges += n_ranges[i];
	/* Each key has at most its ranges and one probe as segments, and at
	 * most one op per segment (or one when it has none). */
	int rc = req_init(&rq, r, store, CALL_GET, b->fn, n,
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
		rq.kneed[i] = need;
		rq.kres[i] = (int64_t)total;
		rq.kfirst[i] = (uint32_t)kvl__rcall_count(rq.k);
		if (bad) {
			req_op(&rq, keys[i], i, KVL__ROP_CHECK);
			rq.kshort[i] = 2;
			rq.kparts[i] = 1;
			continue;
		}
		if (probe > data_end) /* an empty range past every byte read */
			sg[q++] = (kvl__rseg){ probe - 1, 1, NULL };
		if (q == 0) {
			req_op(&rq, keys[i], i, KVL__ROP_EXISTS);
			rq.kparts[i] = 1;
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
			kvl__rop *op = req_op(&rq, keys[i], i, KVL__ROP_GET);
			op->lo = lo;
			op->hi = hi;
			op->seg = sg + p0;
			op->nseg = (uint32_t)(p1 - p0);
			p0 = p1;
		}
		rq.kparts[i] =
			(uint32_t)(kvl__rcall_count(rq.k) - rq.kfirst[i]);
	}

	kvl__rcall_run(rq.k);
	uint64_t hits = 0, misses = 0, errors = 0;
	for (size_t i = 0; i < n; i++) {
		results[i] = rq.kres[i] < 0 ? (int)rq.kres[i] : 0;
		hits += results[i] >= 0;
		misses += results[i] == KVL_ENOTFOUND;
		errors += results[i] < 0 && results[i] != KVL_ENOTFOUND;
	}
	atomic_fetch_add(&r->hits, hits);
	atomic_fetch_add(&r->misses, misses);
	atomic_fetch_add(&r->errors, errors);
	req_free(&rq);
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
	struct req rq;
	int rc = req_init(&rq, r, store, CALL_PUT, b->fn, n, n, 0, NULL);
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
		kvl__rop *op = req_op(&rq, keys[i], i, KVL__ROP_PUT);
		if (too_big || np > UINT32_MAX) {
			kvl__rcall_fail(rq.k, op, KVL_ERANGE,
			                "the object is larger than the %llu "
			                "bytes a Redis string may hold "
			                "(proto-max-bulk-len)",
			                (unsigned long long)r->max_value);
			continue;
		}
		op->pieces = pc;
		op->npieces = (uint32_t)np;
		op->vlen = len;
	}
	kvl__rcall_run(rq.k);
	uint64_t puts = 0, errors = 0;
	for (size_t i = 0; i < n; i++) {
		results[i] = (int)rq.kres[i];
		puts += results[i] == KVL_PUT_STORED;
		errors += results[i] < 0;
	}
	atomic_fetch_add(&r->puts, puts);
	atomic_fetch_add(&r->errors, errors);
	req_free(&rq);
	return 0;
}

/* ---------------------------------------------------------------- stats */

/* What the masters said: DBSIZE, INFO memory and INFO stats of each. */
struct stats_sum {
	uint64_t objects, bytes, capacity, evictions;
	int no_cap, unknown;
};

static void stats_add(void *ctx, redisReply **rep)
{
	struct stats_sum *t = ctx;
	int f1 = 0, f2 = 0, f3 = 0;
	if (rep[0]->type == REDIS_REPLY_INTEGER)
		t->objects += (uint64_t)rep[0]->integer;
	else
		t->unknown = 1;
	if (rep[1]->type == REDIS_REPLY_STRING) {
		const char *info = rep[1]->str;
		t->bytes += kvl__redis_info_u64(info, "used_memory", &f1);
		uint64_t mm = kvl__redis_info_u64(info, "maxmemory", &f2);
		t->capacity += mm;
		t->no_cap |= mm == 0;
	}
	if (rep[2]->type == REDIS_REPLY_STRING)
		t->evictions += kvl__redis_info_u64(rep[2]->str, "evicted_keys",
		                                    &f3);
	t->unknown |= !f1 || !f2;
}

static void redis_stats(void *impl, kvl_store_stats *out)
{
	struct rstore *r = impl;
	out->hits = atomic_load(&r->hits);
	out->misses = atomic_load(&r->misses);
	out->puts = atomic_load(&r->puts);
	out->errors = atomic_load(&r->errors);
	/* The nodes' back-offs are their circuit breakers. */
	kvl__rcluster_node_counts(r->cl, &out->breaker_opens,
	                          &out->breaker_refused);

	kvl__rcmd cmds[3] = {
		{ 1, { "DBSIZE" }, { 6 } },
		{ 2, { "INFO", "memory" }, { 4, 6 } },
		{ 2, { "INFO", "stats" }, { 4, 5 } },
	};
	struct stats_sum t = { 0 };
	if (kvl__rcluster_masters(r->cl, 3, cmds, stats_add, &t))
		t.unknown = 1;
	out->objects = t.unknown ? UINT64_MAX : t.objects;
	out->bytes = t.unknown ? UINT64_MAX : t.bytes;
	out->capacity = t.no_cap || t.unknown ? 0 : t.capacity;
	out->evictions = t.evictions;
}

/* ------------------------------------------------------------ open, close */

static void redis_close(void *impl)
{
	struct rstore *r = impl;
	if (!r)
		return;
	kvl__rcluster_close(r->cl);
	kvl__tls_free(r->tls); /* after every connection that uses it */
	free(r->user);
	free(r->password);
	free(r);
}

/* Reads the options into r and cfg. 0 or KVL_EPARSE. */
static int redis_options(struct rstore *r, kvl__rcluster_cfg *cfg,
                         kvl__uri *uri, uint64_t *db, char *errbuf,
                         size_t errlen)
{
	uint64_t connect_ms = 1000, timeout_ms = 2000, pool = 4;
	int rc;

	cfg->inflight = 2u << 20;
	if ((rc = kvl__uri_u64(uri, "connect_timeout_ms", &connect_ms, errbuf,
	                       errlen)) < 0 ||
	    (rc = kvl__uri_u64(uri, "timeout_ms", &timeout_ms, errbuf,
	                       errlen)) < 0 ||
	    (rc = kvl__uri_u64(uri, "ttl", &r->ttl, errbuf, errlen)) < 0 ||
	    (rc = kvl__uri_size(uri, "inflight", &cfg->inflight, errbuf,
	                        errlen)) < 0 ||
	    (rc = kvl__uri_bool(uri, "replicas", &cfg->replicas, errbuf,
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
	if (cfg->inflight < 4096)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "redis: inflight=%llu: at least 4096 bytes",
		                     (unsigned long long)cfg->inflight);
	if (pool > 1024)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "redis: pool=%llu: at most 1024 idle "
		                     "connections per node",
		                     (unsigned long long)pool);
	cfg->connect_timeout_ms = (uint32_t)connect_ms;
	cfg->timeout_ms = (uint32_t)timeout_ms;
	cfg->pool_max = (unsigned)pool;
	return 0;
}

/* Reads the TLS options into tc (rediss://); with redis:// each of them
 * is refused. 0 or KVL_EPARSE. */
static int redis_tls_options(kvl__uri *uri, int tls, kvl__tls_cfg *tc,
                             char *errbuf, size_t errlen)
{
	static const char *const names[] = { "tls_ca", "tls_cert", "tls_key",
		                             "tls_server_name" };
	const char *v[4] = { NULL, NULL, NULL, NULL };
	for (int i = 0; i < 4; i++) {
		if (kvl__uri_str(uri, names[i], &v[i]) && !tls)
			return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
			                     "redis: option %s is for TLS: use "
			                     "rediss://",
			                     names[i]);
	}
	if (!tls)
		return 0;
	if (v[2] && !v[1])
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "redis: tls_key=%s without tls_cert (the "
		                     "client certificate it belongs to)",
		                     v[2]);
	*tc = (kvl__tls_cfg){ .ca = v[0], .cert = v[1], .key = v[2],
		              .server_name = v[3] };
	return 0;
}

/* Splits "user:password@" off the authority and parses the hosts into
 * the client's seeds. 0 or KVL_EPARSE / KVL_ENOMEM. */
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
		if (kvl__rcluster_seed(r->cl, host, port) < 0)
			return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
			                     "redis: out of memory or too many "
			                     "hosts");
		if (!comma)
			break;
		p = comma + 1;
	}
	return 0;
}

static int redis_open(kvl_store *store, kvl__uri *uri, void **impl,
                      kvl__store_caps *caps, char *errbuf, size_t errlen)
{
	const int tls = strcmp(uri->scheme, "rediss") == 0;
	uint64_t db = UINT64_MAX;
	int rc;

	if (strchr(uri->path, '@'))
		/* Not shown: the part of the password after its '/'. */
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "redis: a '/' before '@': write a '/' of "
		                     "the user or password as %%2F");
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
	if (r && kvl__rcluster_new(&r->cl) < 0) {
		free(r);
		r = NULL;
	}
	if (!r)
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "redis: out of memory");
	kvl__rcluster_cfg cfg = { 0 };
	if ((rc = redis_options(r, &cfg, uri, &db, errbuf, errlen)) < 0 ||
	    (rc = redis_authority(r, uri->authority, errbuf, errlen)) < 0)
		goto fail;
	/* Unknown options are refused before any file is read or any
	 * connection is made. */
	kvl__tls_cfg tc;
	if ((rc = redis_tls_options(uri, tls, &tc, errbuf, errlen)) < 0 ||
	    (rc = kvl__uri_check_unused(uri, errbuf, errlen)) < 0 ||
	    (tls && (rc = kvl__tls_new(&tc, &r->tls, errbuf, errlen)) < 0))
		goto fail;
	cfg.tls = r->tls;
	cfg.user = r->user;
	cfg.password = r->password;
	cfg.db = (uint32_t)db;

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
	cfg.set_tail = r->set_tail;
	cfg.set_tail_len = r->set_tail_len;
	cfg.set_argc = r->set_argc;

	if ((rc = kvl__rcluster_connect(r->cl, &cfg, errbuf, errlen)) < 0)
		goto fail;
	r->max_value = kvl__rcluster_max_bulk(r->cl);
	(void)store;
	caps->remote = 1; /* and never trusted: kvlink verifies reads */
	*impl = r;
	return 0;
fail:
	redis_close(r);
	return rc;
}

/* redis:// and rediss:// (over TLS) are one backend: redis_open reads the
 * scheme. */
#define REDIS_OPS(name)                                                   \
	{                                                                 \
		.scheme = name, .open = redis_open, .close = redis_close, \
		.exists = redis_exists, .get = redis_get,                 \
		.put = redis_put, .remove = redis_remove, .reg = NULL,    \
		.stats = redis_stats, .size = redis_size,                 \
	}

const kvl__store_ops kvl__store_redis_ops = REDIS_OPS("redis");
const kvl__store_ops kvl__store_rediss_ops = REDIS_OPS("rediss");
