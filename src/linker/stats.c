/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats.c — the linker's latency histograms, and its counters (with its
 * store's) as Prometheus text or JSON, through core/render.h.
 */
#include <stdarg.h>
#include <stdio.h>

#include "linker/linker.h"
#include "core/render.h"

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

static uint64_t ld(const _Atomic uint64_t *v)
{
	return atomic_load_explicit(v, memory_order_relaxed);
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

/* A bucket's bound, 2^b microseconds, in seconds and exactly (%g would
 * round 1.048576 to 1.04858). */
static void put_bound_seconds(kvl__cursor *c, int b)
{
	unsigned long long us = 1ull << b;
	char frac[8];
	int n = snprintf(frac, sizeof frac, "%06llu", us % 1000000);
	while (n > 1 && frac[n - 1] == '0')
		frac[--n] = '\0';
	if (us % 1000000 == 0)
		kvl__put(c, "%llu", us / 1000000);
	else
		kvl__put(c, "%llu.%s", us / 1000000, frac);
}

static void hist_prom(kvl__cursor *c, const char *name, const char *help,
                      const kvl__hist *h)
{
	kvl__put(c, "# HELP kvlink_%s_seconds %s\n# TYPE kvlink_%s_seconds "
	       "histogram\n",
	    name, help, name);
	uint64_t cum = 0;
	for (int b = 0; b < KVL__HIST_BUCKETS; b++) {
		cum += ld(&h->bucket[b]);
		kvl__put(c, "kvlink_%s_seconds_bucket{le=\"", name);
		put_bound_seconds(c, b);
		kvl__put(c, "\"} %llu\n", (unsigned long long)cum);
	}
	cum += ld(&h->bucket[KVL__HIST_BUCKETS]);
	kvl__put(c, "kvlink_%s_seconds_bucket{le=\"+Inf\"} %llu\n", name,
	    (unsigned long long)cum);
	kvl__put(c, "kvlink_%s_seconds_sum %.9f\nkvlink_%s_seconds_count %llu\n",
	    name, (double)ld(&h->sum_ns) / 1e9, name,
	    (unsigned long long)ld(&h->count));
}

static void hist_json(kvl__cursor *c, const char *name, const kvl__hist *h)
{
	kvl__put(c, "\"%s\":{\"count\":%llu,\"sum_seconds\":%.9f,"
	       "\"buckets_us\":[",
	    name, (unsigned long long)ld(&h->count),
	    (double)ld(&h->sum_ns) / 1e9);
	for (int b = 0; b <= KVL__HIST_BUCKETS; b++)
		kvl__put(c, "%s%llu", b ? "," : "",
		    (unsigned long long)ld(&h->bucket[b]));
	kvl__put(c, "]}");
}

int kvl_linker_stats_render(kvl_linker *lk, kvl_stats_format format, char *buf,
                     size_t len, size_t *needed)
{
	if (!lk)
		return KVL_EINVAL;
	int rc = kvl__render_check(&lk->err, "stats", format, buf, len);
	const kvl__linker_stats *st = &lk->stats;
	kvl_store_stats ss;
	if (rc || (rc = kvl_store_stats_get(lk->store, &ss)))
		return rc;
	kvl__cursor c = {buf, len, 0};
	if (format == KVL_STATS_PROMETHEUS) {
#define COUNTER_PROM_(name, help)                                        \
	kvl__put(&c, "# HELP kvlink_" #name "_total %s\n# TYPE kvlink_" #name \
	        "_total counter\nkvlink_" #name "_total %llu\n",         \
	    help, (unsigned long long)ld(&st->name));
		KVL__LINKER_COUNTERS(COUNTER_PROM_)
#undef COUNTER_PROM_
		for (size_t i = 0; i < sizeof hists / sizeof hists[0]; i++)
			hist_prom(&c, hists[i].name, hists[i].help,
			          (const kvl__hist *)((const char *)st +
			                              hists[i].off));
		kvl__render_store_prom(&c, &ss, kvl__store_note(lk->store));
		kvl__store_render_more(lk->store, &c, format);
	} else {
		kvl__put(&c, "{\"linker\":{");
		const char *sep = "";
#define COUNTER_JSON_(name, help)                       \
	kvl__put(&c, "%s\"" #name "\":%llu", sep,            \
	    (unsigned long long)ld(&st->name));         \
	sep = ",";
		KVL__LINKER_COUNTERS(COUNTER_JSON_)
#undef COUNTER_JSON_
		kvl__put(&c, "},\"latency\":{");
		for (size_t i = 0; i < sizeof hists / sizeof hists[0]; i++) {
			kvl__put(&c, "%s", i ? "," : "");
			hist_json(&c, hists[i].name,
			          (const kvl__hist *)((const char *)st +
			                              hists[i].off));
		}
		kvl__put(&c, "},\"store\":{");
		kvl__render_store_json(&c, &ss, kvl__store_note(lk->store));
		kvl__store_render_more(lk->store, &c, format);
		kvl__put(&c, "}}\n");
	}
	rc = kvl__cursor_finish(&c, needed);
	if (rc)
		kvl__fail(&lk->err, rc, "stats: the text needs %zu bytes and "
		          "a NUL, len is %zu", c.used, len);
	return rc;
}
