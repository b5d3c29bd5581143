/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tier.c — the tier: store, a store made of stores, top (fastest) first:
 *   tier:mem:?capacity=8GiB|file:/nvme/kvlink?capacity=1TiB|redis://h:7000
 *   tier:?write=through&promote_queue=1024|mem:?capacity=8GiB|redis://h:7000
 * The tiers' URIs are separated by '|' and keep their own queries; the
 * tier store's options, when there are any, come first as "?…|" (uri.c
 * parses tier: URIs so). This file opens and closes it; tier_ops.c holds
 * the operations, tier_stats.c the counters.
 *
 * Semantics:
 *  - exists and get see the union: each key is asked of the top tier, and
 *    of the next one down only if no tier above had it (runs of the keys
 *    left, as slices of the caller's arrays). A tier that fails a key
 *    does not fail it: the next one is asked; only when no tier has it
 *    does the key get the first failure seen (else absent).
 *  - A get served by a lower tier offers the key to the promoter
 *    (tier_promote.h), whose thread copies the object into the top tier
 *    later; the get never waits for it. A full queue drops the offer.
 *  - put writes to the top tier; a key the top tier fails falls back to
 *    the next one down. With write=through it writes to every tier, and
 *    stored anywhere is stored.
 *  - Every tier that can tell its evictions (kvl__store_on_evict: mem:,
 *    file:, a fault+ around one) hands its victims over before freeing
 *    them, and they are put into the tiers below (kvl__tier_spill), on the
 *    thread whose call evicted them.
 *  - remove removes from every tier.
 *  - hold, unhold, register and unregister reach every tier
 *    (tier_hold.c).
 *
 * Options: write=top|through (top), promote=0|1 (1), promote_queue=N keys
 * waiting at most (256, 1 to 16384), promote_max=BYTES largest object
 * promoted (64MiB), spill=0|1 (1), and the door's breaker, tenant and
 * secret_file, which belong to the tier store: its tiers are opened
 * wrapped (no secret: this store seals and checks) and may not take a
 * tenant of their own (their evicted keys must be this store's keys).
 *
 * Capabilities: never trusted unless every tier is (objects may move down
 * into a tier that is not), whole reads if any tier reads whole objects,
 * never in place (the linker uses its copy paths; peek cannot see lower
 * tiers), never remote (each remote tier has its own breaker, so a tier
 * that is down fails fast and the others still serve).
 *
 * Threads: everything is immutable after open but the counters (atomics)
 * and the promoter (its own lock); the tiers are thread-safe themselves.
 * Close stops the promoter first (its thread calls the tiers), then closes
 * the tiers top first, so that no spill runs into a closed store.
 */
#include <stdio.h>
#include <stdlib.h>

#include "store/tier_impl.h"

#define TIER_QUEUE_DEFAULT 256u
#define TIER_QUEUE_MAX 16384u
#define TIER_PROMOTE_MAX_DEFAULT (64ull << 20)

static const char tier_example[] =
	"e.g. \"tier:mem:?capacity=8GiB|file:/var/cache/kvlink\"";

static void tier_close(void *impl)
{
	struct tier_store *t = impl;
	if (!t)
		return;
	kvl__promoter_free(t->promoter);
	for (size_t i = 0; i < t->n; i++)
		kvl_store_close(t->tier[i]);
	kvl__transit_destroy(&t->transit);
	kvl__holds_destroy(&t->holds);
	free(t);
}

/* The scheme of one tier's URI, lowercased and without "fault+" wrappers,
 * into out. */
static void tier_base_scheme(const char *uri, char *out, size_t cap)
{
	size_t n = 0;
	while (uri[n] && uri[n] != ':' && n + 1 < cap) {
		char ch = uri[n];
		out[n++] = (char)(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
	}
	out[n] = '\0';
	while (strncmp(out, "fault+", 6) == 0)
		memmove(out, out + 6, strlen(out + 6) + 1);
}

/* 1 when a tier's open refused one of the tier store's own options (given
 * in the wrong place). */
static int tier_own_option(const char *msg)
{
	static const char *const names[] = {
		"'write'", "'promote'", "'promote_queue'", "'promote_max'",
		"'spill'",
	};
	if (!strstr(msg, "unknown option"))
		return 0;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strstr(msg, names[i]))
			return 1;
	return 0;
}

/* Opens tier i from its URI into t->tier[i]. */
static int tier_open_one(struct tier_store *t, size_t i, const char *uri,
                         char *errbuf, size_t errlen)
{
	char scheme[32], msg[KVL__ERRMSG_MAX] = "";
	kvl__uri_redact(uri, t->shown[i], sizeof t->shown[i]);
	tier_base_scheme(uri, scheme, sizeof scheme);
	if (strcmp(scheme, "tier") == 0)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "tier: store: tier %zu (\"%s\") is a tier: "
		                     "store itself; list its tiers in this one "
		                     "instead",
		                     i, t->shown[i]);
	int rc = kvl__store_open_wrapped(uri, &t->tier[i], msg, sizeof msg);
	if (rc < 0)
		return kvl__fail_buf(errbuf, errlen, rc,
		                     "tier: store: tier %zu (\"%s\"): %s%s", i,
		                     t->shown[i], msg,
		                     tier_own_option(msg)
		                             ? " (the tier store's own options "
		                               "go first: tier:?write=through|…)"
		                             : "");
	if (t->tier[i]->tenant_len) {
		kvl_store_close(t->tier[i]);
		t->tier[i] = NULL;
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "tier: store: tier %zu (\"%s\"): tenant= "
		                     "belongs to the tier store "
		                     "(tier:?tenant=NAME|…), not to one tier",
		                     i, t->shown[i]);
	}
	return 0;
}

/* Splits the tiers' URIs (uri->path) and opens each, top first. */
static int tier_open_all(struct tier_store *t, const char *list,
                         char *errbuf, size_t errlen)
{
	if (!*list)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "tier: store names no tiers; expected "
		                     "tier:[?options|]URI|URI[|URI…], %s",
		                     tier_example);
	char *copy = strdup(list);
	if (!copy)
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "tier: store: out of memory");
	size_t n = 1;
	for (const char *p = copy; *p; p++)
		n += *p == '|';
	int rc = 0;
	if (n > KVL__TIER_MAX)
		rc = kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                   "tier: store has %zu tiers; at most %d", n,
		                   KVL__TIER_MAX);
	else if (n == 1) {
		char shown[TIER_SHOWN];
		kvl__uri_redact(copy, shown, sizeof shown);
		rc = kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                   "tier: store has one tier (\"%s\"); it needs "
		                   "two or more separated by '|', %s",
		                   shown, tier_example);
	}
	char *p = copy;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		char *bar = strchr(p, '|');
		if (bar)
			*bar = '\0';
		if (!*p)
			rc = kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
			                   "tier: store: tier %zu is empty (two "
			                   "'|' in a row, or one at an end)",
			                   i);
		else
			rc = tier_open_one(t, i, p, errbuf, errlen);
		if (rc == 0)
			t->n = i + 1;
		p = bar ? bar + 1 : p;
	}
	free(copy);
	return rc;
}

/* The tier store's own options. */
static int tier_options(struct tier_store *t, kvl__uri *uri, int *promote,
                        uint64_t *queue, int *spill, char *errbuf,
                        size_t errlen)
{
	const char *write = NULL;
	int rc;
	if (kvl__uri_str(uri, "write", &write) == 1) {
		if (strcmp(write, "through") == 0)
			t->write_through = 1;
		else if (strcmp(write, "top") != 0)
			return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
			                     "tier: store option write=%s: "
			                     "expected top (puts go to the top "
			                     "tier) or through (to every tier)",
			                     write);
	}
	if ((rc = kvl__uri_bool(uri, "promote", promote, errbuf, errlen)) < 0 ||
	    (rc = kvl__uri_u64(uri, "promote_queue", queue, errbuf,
	                       errlen)) < 0 ||
	    (rc = kvl__uri_size(uri, "promote_max", &t->promote_max, errbuf,
	                        errlen)) < 0 ||
	    (rc = kvl__uri_bool(uri, "spill", spill, errbuf, errlen)) < 0)
		return rc;
	if (*queue == 0 || *queue > TIER_QUEUE_MAX)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "tier: store option promote_queue=%llu: "
		                     "1 to %u keys (promote=0 turns promotion "
		                     "off)",
		                     (unsigned long long)*queue, TIER_QUEUE_MAX);
	return 0;
}

/* Asks each tier above the bottom for its victims. A tier that cannot
 * tell them (a remote store evicting on its own) is left as it is. */
static void tier_hook_spills(struct tier_store *t)
{
	for (size_t i = 0; i + 1 < t->n; i++) {
		t->hook[i] = (kvl__evict_hook){kvl__tier_spill, &t->slot[i],
		                               kvl__tier_unlinked};
		t->spills[i] = kvl__store_on_evict(t->tier[i], &t->hook[i]) == 0;
	}
}

static int tier_open(kvl_store *store, kvl__uri *uri, void **impl,
                     kvl__store_caps *caps, char *errbuf, size_t errlen)
{
	uint64_t queue = TIER_QUEUE_DEFAULT;
	int promote = 1, spill = 1;
	struct tier_store *t = calloc(1, sizeof *t);
	if (!t)
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "tier: store: out of memory");
	t->promote_max = TIER_PROMOTE_MAX_DEFAULT;
	kvl__transit_init(&t->transit);
	kvl__holds_init(&t->holds);
	for (size_t i = 0; i < KVL__TIER_MAX; i++)
		t->slot[i] = (struct tier_slot){t, (unsigned)i};

	int rc = tier_options(t, uri, &promote, &queue, &spill, errbuf,
	                      errlen);
	if (rc == 0)
		rc = tier_open_all(t, uri->path, errbuf, errlen);
	if (rc == 0 && promote &&
	    !(t->promoter = kvl__promoter_new((size_t)queue,
	                                      kvl__tier_promote_one, t)))
		rc = kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                   "tier: store: cannot start the promoter");
	if (rc < 0) {
		tier_close(t);
		return rc;
	}
	if (spill)
		tier_hook_spills(t);

	caps->trusted = 1;
	for (size_t i = 0; i < t->n; i++) {
		kvl__store_caps c = kvl__store_caps_of(t->tier[i]);
		caps->trusted &= c.trusted != 0;
		caps->whole_reads |= c.whole_reads != 0;
		if (c.layer_read_min > caps->layer_read_min)
			caps->layer_read_min = c.layer_read_min;
		if (t->tier[i]->note[0] && !store->note[0])
			snprintf(store->note, sizeof store->note,
			         "tier %zu: %.400s", i, t->tier[i]->note);
	}
	*impl = t;
	return 0;
}

const kvl__store_ops kvl__store_tier_ops = {
	.scheme = "tier",
	.open = tier_open,
	.close = tier_close,
	.exists = kvl__tier_exists,
	.get = kvl__tier_get,
	.put = kvl__tier_put,
	.remove = kvl__tier_remove,
	.reg = kvl__tier_reg,
	.unreg = kvl__tier_unreg,
	.hold = kvl__tier_hold,
	.unhold = kvl__tier_unhold,
	.stats = kvl__tier_stats_whole,
	.render = kvl__tier_render,
};
