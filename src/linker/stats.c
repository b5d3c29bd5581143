/*
 * stats.c — the linker's latency histograms, and rendering of linker and
 * store counters as Prometheus text or JSON.
 *
 * Rendering appends into a caller buffer through a small cursor that keeps
 * counting past the end, so one pass both fills the buffer and learns the
 * length the caller needs when it was too small.
 */
#include <stdarg.h>
#include <stdio.h>

#include "linker/linker.h"
#include "store/store.h"

void kvl__hist_add(kvl__hist *h, uint64_t ns)
{
	uint64_t us = (ns + 999) / 1000;
	int b = 0;
	while (b < KVL__HIST_BUCKETS && (1ull << b) < us)
		b++;
	atomic_fetch_add_explicit(&h->bucket[b], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
}

typedef struct cursor {
	char *buf;
	size_t len, used; /* used may exceed len: the length needed */
} cursor;

static void put(cursor *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void put(cursor *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	size_t room = c->used < c->len ? c->len - c->used : 0;
	int n = vsnprintf(room ? c->buf + c->used : NULL, room, fmt, ap);
	va_end(ap);
	if (n > 0)
		c->used += (size_t)n;
}

static uint64_t ld(const _Atomic uint64_t *v)
{
	return atomic_load_explicit(v, memory_order_relaxed);
}

static int finish(cursor *c, size_t *needed)
{
	if (needed)
		*needed = c->used;
	if (c->used >= c->len) {
		if (c->len)
			c->buf[c->len - 1] = '\0';
		return KVL_ERANGE;
	}
	return 0;
}

#define STORE_FIELDS(X)                                          \
	X(objects, "gauge", "objects held by the store")         \
	X(bytes, "gauge", "bytes held by the store")             \
	X(capacity, "gauge", "byte capacity of the store")       \
	X(hits, "counter", "keys found by exists or get")        \
	X(misses, "counter", "keys not found by exists or get")  \
	X(puts, "counter", "objects newly stored")               \
	X(evictions, "counter", "objects evicted to make room")  \
	X(errors, "counter", "per-key store failures")

static void store_prom(cursor *c, const kvl_store_stats *s)
{
#define STORE_PROM_(name, type, help)                                       \
	put(c, "# HELP kvlink_store_" #name " %s\n# TYPE kvlink_store_" #name \
	       " %s\nkvlink_store_" #name " %llu\n",                          \
	    help, type, (unsigned long long)s->name);
	STORE_FIELDS(STORE_PROM_)
#undef STORE_PROM_
}

static void store_json(cursor *c, const kvl_store_stats *s)
{
	const char *sep = "";
#define STORE_JSON_(name, type, help)                                  \
	put(c, "%s\"" #name "\":%llu", sep, (unsigned long long)s->name); \
	sep = ",";
	STORE_FIELDS(STORE_JSON_)
#undef STORE_JSON_
}

int kvl_store_stats_render(kvl_store *store, kvl_stats_format format,
                           char *buf, size_t len, size_t *needed)
{
	if (!store)
		return KVL_EINVAL;
	if (len && !buf)
		return kvl__fail(&store->err, KVL_EINVAL,
		                 "stats_render: buf is NULL with len %zu", len);
	if (format != KVL_STATS_PROMETHEUS && format != KVL_STATS_JSON)
		return kvl__fail(&store->err, KVL_EINVAL,
		                 "stats_render: unknown format %d", (int)format);
	kvl_store_stats s;
	int rc = kvl_store_stats_get(store, &s);
	if (rc)
		return rc;
	cursor c = {buf, len, 0};
	if (format == KVL_STATS_PROMETHEUS) {
		store_prom(&c, &s);
	} else {
		put(&c, "{");
		store_json(&c, &s);
		put(&c, "}\n");
	}
	rc = finish(&c, needed);
	if (rc)
		kvl__fail(&store->err, rc, "stats_render: the text needs %zu "
		          "bytes and a NUL, len is %zu", c.used, len);
	return rc;
}

static const struct {
	const char *name, *help;
	size_t off;
} hists[] = {
	{"lookup", "kvl_linker_lookup calls",
	 offsetof(kvl__linker_stats, lookup_ns)},
	{"batch", "load batches, start to last layer",
	 offsetof(kvl__linker_stats, batch_ns)},
	{"offload", "offload requests, accepted to completed",
	 offsetof(kvl__linker_stats, offload_ns)},
};

static void hist_prom(cursor *c, const char *name, const char *help,
                      const kvl__hist *h)
{
	put(c, "# HELP kvlink_%s_seconds %s\n# TYPE kvlink_%s_seconds "
	       "histogram\n",
	    name, help, name);
	uint64_t cum = 0;
	for (int b = 0; b < KVL__HIST_BUCKETS; b++) {
		cum += ld(&h->bucket[b]);
		put(c, "kvlink_%s_seconds_bucket{le=\"%g\"} %llu\n", name,
		    (double)(1ull << b) / 1e6, (unsigned long long)cum);
	}
	cum += ld(&h->bucket[KVL__HIST_BUCKETS]);
	put(c, "kvlink_%s_seconds_bucket{le=\"+Inf\"} %llu\n", name,
	    (unsigned long long)cum);
	put(c, "kvlink_%s_seconds_sum %.9f\nkvlink_%s_seconds_count %llu\n",
	    name, (double)ld(&h->sum_ns) / 1e9, name,
	    (unsigned long long)ld(&h->count));
}

static void hist_json(cursor *c, const char *name, const kvl__hist *h)
{
	put(c, "\"%s\":{\"count\":%llu,\"sum_seconds\":%.9f,"
	       "\"buckets_us\":[",
	    name, (unsigned long long)ld(&h->count),
	    (double)ld(&h->sum_ns) / 1e9);
	for (int b = 0; b <= KVL__HIST_BUCKETS; b++)
		put(c, "%s%llu", b ? "," : "",
		    (unsigned long long)ld(&h->bucket[b]));
	put(c, "]}");
}

int kvl_linker_stats(kvl_linker *lk, kvl_stats_format format, char *buf,
                     size_t len, size_t *needed)
{
	if (!lk)
		return KVL_EINVAL;
	if (len && !buf)
		return kvl__fail(&lk->err, KVL_EINVAL,
		                 "stats: buf is NULL with len %zu", len);
	if (format != KVL_STATS_PROMETHEUS && format != KVL_STATS_JSON)
		return kvl__fail(&lk->err, KVL_EINVAL,
		                 "stats: unknown format %d", (int)format);
	const kvl__linker_stats *st = &lk->stats;
	kvl_store_stats ss;
	int rc = kvl_store_stats_get(lk->store, &ss);
	if (rc)
		return rc;
	cursor c = {buf, len, 0};
	if (format == KVL_STATS_PROMETHEUS) {
#define COUNTER_PROM_(name, help)                                        \
	put(&c, "# HELP kvlink_" #name "_total %s\n# TYPE kvlink_" #name \
	        "_total counter\nkvlink_" #name "_total %llu\n",         \
	    help, (unsigned long long)ld(&st->name));
		KVL__LINKER_COUNTERS(COUNTER_PROM_)
#undef COUNTER_PROM_
		for (size_t i = 0; i < sizeof hists / sizeof hists[0]; i++)
			hist_prom(&c, hists[i].name, hists[i].help,
			          (const kvl__hist *)((const char *)st +
			                              hists[i].off));
		store_prom(&c, &ss);
	} else {
		put(&c, "{\"linker\":{");
		const char *sep = "";
#define COUNTER_JSON_(name, help)                       \
	put(&c, "%s\"" #name "\":%llu", sep,            \
	    (unsigned long long)ld(&st->name));         \
	sep = ",";
		KVL__LINKER_COUNTERS(COUNTER_JSON_)
#undef COUNTER_JSON_
		put(&c, "},\"latency\":{");
		for (size_t i = 0; i < sizeof hists / sizeof hists[0]; i++) {
			put(&c, "%s", i ? "," : "");
			hist_json(&c, hists[i].name,
			          (const kvl__hist *)((const char *)st +
			                              hists[i].off));
		}
		put(&c, "},\"store\":{");
		store_json(&c, &ss);
		put(&c, "}}\n");
	}
	rc = finish(&c, needed);
	if (rc)
		kvl__fail(&lk->err, rc, "stats: the text needs %zu bytes and "
		          "a NUL, len is %zu", c.used, len);
	return rc;
}
