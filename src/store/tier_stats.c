/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tier_stats.c — the tier: store's counters: the store as a whole
 * (kvl_store_stats), each tier's figures (tier.h) and the promoter's, and
 * how both stats renders show them after the store's own counters.
 *
 * The whole: objects, bytes and capacity are the tiers' sums (an object
 * held by two tiers counts twice; a tier that cannot tell a count makes
 * the sum unknown, UINT64_MAX); hits, misses, puts and errors are what the
 * callers of the tier store saw; evictions are the objects that left the
 * store to make room: the bottom tier's evictions, plus those of a tier
 * that does not spill, plus the spills no lower tier took.
 */
#include <stdio.h>

#include "store/tier_impl.h"

static uint64_t ld(atomic_uint_fast64_t *a)
{
	return (uint64_t)atomic_load(a);
}

/* a + b, unknown (UINT64_MAX) when either is. */
static uint64_t add_known(uint64_t a, uint64_t b)
{
	return a == UINT64_MAX || b == UINT64_MAX || b > UINT64_MAX - 1 - a
	               ? UINT64_MAX
	               : a + b;
}

static void tier_fill(struct tier_store *t, size_t i, kvl__tier_stats *o)
{
	memset(o, 0, sizeof *o);
	kvl_store_stats_get(t->tier[i], &o->own);
	o->hits = ld(&t->c[i].hits);
	o->failures = ld(&t->c[i].failures);
	o->promotions = ld(&t->c[i].promotions);
	o->spills = ld(&t->c[i].spills);
	o->spills_lost = ld(&t->c[i].spills_lost);
	o->read_bytes = ld(&t->c[i].read_bytes);
	o->read_ns = ld(&t->c[i].read_ns);
}

static void promote_fill(struct tier_store *t, kvl__tier_promote_stats *o)
{
	memset(o, 0, sizeof *o);
	if (t->promoter)
		kvl__promoter_counts(t->promoter, &o->queued, &o->dropped,
		                     &o->waiting);
	o->failed = ld(&t->promote_failed);
}

void kvl__tier_stats_whole(void *impl, kvl_store_stats *out)
{
	struct tier_store *t = impl;
	uint64_t gone = 0;
	for (size_t i = 0; i < t->n; i++) {
		kvl__tier_stats s;
		tier_fill(t, i, &s);
		out->objects = add_known(out->objects, s.own.objects);
		out->bytes = add_known(out->bytes, s.own.bytes);
		out->capacity = add_known(out->capacity, s.own.capacity);
		gone = add_known(gone, t->spills[i] ? s.spills_lost
		                                    : s.own.evictions);
	}
	out->evictions = gone;
	out->hits = ld(&t->hits);
	out->misses = ld(&t->misses);
	out->puts = ld(&t->puts);
	out->errors = ld(&t->errors);
}

/* ------------------------------------------------------------- renders */

#define TIER_FIELDS(X)                                                     \
	X(hits, "keys a tier served to exists or get (no tier above had "  \
	        "them)")                                                   \
	X(failures, "keys whose call on a tier failed (another tier may "  \
	            "have served them)")                                   \
	X(promotions, "objects copied from a tier up into the top tier")   \
	X(spills, "objects a tier evicted that a lower tier took")         \
	X(spills_lost, "objects a tier evicted that no lower tier took")    \
	X(read_bytes, "bytes a tier's gets served")                        \
	X(read_ns, "nanoseconds in a tier's get calls, misses included")

#define OWN_FIELDS(X)                                                      \
	X(objects, "gauge", "objects a tier holds")                        \
	X(bytes, "gauge", "bytes a tier holds")                            \
	X(evictions, "counter", "objects a tier dropped to make room")

/* s with '"' and '\' escaped (as JSON strings and Prometheus labels
 * want) and control characters left out. */
static void put_escaped(kvl__cursor *c, const char *s)
{
	for (; *s; s++)
		if (*s == '"' || *s == '\\')
			kvl__put(c, "\\%c", *s);
		else if ((unsigned char)*s >= 0x20)
			kvl__put(c, "%c", *s);
}

static void render_prom(struct tier_store *t, kvl__cursor *c,
                        const kvl__tier_stats *s,
                        const kvl__tier_promote_stats *p)
{
	kvl__put(c, "# HELP kvlink_store_tier_info a tier of the store (0: "
	            "the top) and its URI\n# TYPE kvlink_store_tier_info "
	            "gauge\n");
	for (size_t i = 0; i < t->n; i++) {
		kvl__put(c, "kvlink_store_tier_info{tier=\"%zu\",uri=\"", i);
		put_escaped(c, t->shown[i]);
		kvl__put(c, "\"} 1\n");
	}
#define TIER_PROM_(name, help)                                            \
	kvl__put(c, "# HELP kvlink_store_tier_" #name "_total %s\n# TYPE "  \
	            "kvlink_store_tier_" #name "_total counter\n",           \
	         help);                                                     \
	for (size_t i = 0; i < t->n; i++)                                   \
		kvl__put(c, "kvlink_store_tier_" #name "_total{tier=\"%zu\"} " \
		            "%llu\n",                                           \
		         i, (unsigned long long)s[i].name);
	TIER_FIELDS(TIER_PROM_)
#undef TIER_PROM_
#define OWN_PROM_(name, type, help)                                        \
	{                                                                  \
		const char *sfx = strcmp(type, "counter") ? "" : "_total";   \
		kvl__put(c, "# HELP kvlink_store_tier_" #name "%s %s\n"      \
		            "# TYPE kvlink_store_tier_" #name "%s %s\n",     \
		         sfx, help, sfx, type);                             \
		for (size_t i = 0; i < t->n; i++) {                         \
			kvl__put(c, "kvlink_store_tier_" #name "%s{tier="   \
			            "\"%zu\"} ",                            \
			         sfx, i);                                   \
			kvl__put_count(c, s[i].own.name, "NaN");                     \
			kvl__put(c, "\n");                                  \
		}                                                           \
	}
	OWN_FIELDS(OWN_PROM_)
#undef OWN_PROM_
	kvl__put(c, "# HELP kvlink_store_promotions_queued_total keys queued "
	            "for promotion into the top tier\n# TYPE "
	            "kvlink_store_promotions_queued_total counter\n"
	            "kvlink_store_promotions_queued_total %llu\n"
	            "# HELP kvlink_store_promotions_dropped_total keys not "
	            "promoted: the queue was full, or they waited at close\n"
	            "# TYPE kvlink_store_promotions_dropped_total counter\n"
	            "kvlink_store_promotions_dropped_total %llu\n"
	            "# HELP kvlink_store_promotions_failed_total promotions "
	            "that could not read below or write into the top\n"
	            "# TYPE kvlink_store_promotions_failed_total counter\n"
	            "kvlink_store_promotions_failed_total %llu\n"
	            "# HELP kvlink_store_promotions_waiting keys waiting for "
	            "promotion now\n# TYPE kvlink_store_promotions_waiting "
	            "gauge\nkvlink_store_promotions_waiting %llu\n",
	         (unsigned long long)p->queued, (unsigned long long)p->dropped,
	         (unsigned long long)p->failed, (unsigned long long)p->waiting);
}

static void render_json(struct tier_store *t, kvl__cursor *c,
                        const kvl__tier_stats *s,
                        const kvl__tier_promote_stats *p)
{
	kvl__put(c, ",\"tiers\":[");
	for (size_t i = 0; i < t->n; i++) {
		kvl__put(c, "%s{\"uri\":\"", i ? "," : "");
		put_escaped(c, t->shown[i]);
		kvl__put(c, "\"");
#define TIER_JSON_(name, help) \
	kvl__put(c, ",\"" #name "\":%llu", (unsigned long long)s[i].name);
		TIER_FIELDS(TIER_JSON_)
#undef TIER_JSON_
#define OWN_JSON_(name, type, help)             \
	kvl__put(c, ",\"" #name "\":");         \
	kvl__put_count(c, s[i].own.name, "null");
		OWN_FIELDS(OWN_JSON_)
#undef OWN_JSON_
		kvl__put(c, "}");
	}
	kvl__put(c, "],\"promotions\":{\"queued\":%llu,\"dropped\":%llu,"
	            "\"failed\":%llu,\"waiting\":%llu}",
	         (unsigned long long)p->queued, (unsigned long long)p->dropped,
	         (unsigned long long)p->failed, (unsigned long long)p->waiting);
}

void kvl__tier_render(void *impl, kvl__cursor *c, kvl_stats_format format)
{
	struct tier_store *t = impl;
	kvl__tier_stats s[KVL__TIER_MAX];
	kvl__tier_promote_stats p;
	for (size_t i = 0; i < t->n; i++)
		tier_fill(t, i, &s[i]);
	promote_fill(t, &p);
	if (format == KVL_STATS_PROMETHEUS)
		render_prom(t, c, s, &p);
	else
		render_json(t, c, s, &p);
}

/* ------------------------------------------------------------- control */

static struct tier_store *tier_of(const kvl_store *s)
{
	return s && s->ops == &kvl__store_tier_ops ? s->impl : NULL;
}

size_t kvl__tier_count(const kvl_store *s)
{
	struct tier_store *t = tier_of(s);
	return t ? t->n : 0;
}

kvl_store *kvl__tier_at(kvl_store *s, size_t i)
{
	struct tier_store *t = tier_of(s);
	return t && i < t->n ? t->tier[i] : NULL;
}

int kvl__tier_stats_get(kvl_store *s, size_t i, kvl__tier_stats *out)
{
	struct tier_store *t = tier_of(s);
	if (!t || i >= t->n || !out)
		return KVL_EINVAL;
	tier_fill(t, i, out);
	return 0;
}

int kvl__tier_promote_stats_get(kvl_store *s, kvl__tier_promote_stats *out)
{
	struct tier_store *t = tier_of(s);
	if (!t || !out)
		return KVL_EINVAL;
	promote_fill(t, out);
	return 0;
}
