/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tier_impl.h — the tier: store's state, shared by its files (internal to
 * src/store/tier*.c): tier.c opens and closes it, tier_ops.c carries the
 * four operations, the spill-down and the promotions, tier_hold.c the
 * holds and registrations, tier_stats.c counts and renders. tier.c
 * describes the design.
 */
#ifndef KVL_TIER_IMPL_H
#define KVL_TIER_IMPL_H

#include <stdatomic.h>

#include "store/backend.h"
#include "store/holds.h"
#include "store/tier.h"
#include "store/tier_promote.h"
#include "store/tier_transit.h"

#define TIER_SHOWN 160 /* bytes of a tier's redacted URI kept for stats */

struct tier_store;

/* What the spill-down of tier `index` needs: its victims go below it. */
struct tier_slot {
	struct tier_store *t;
	unsigned index;
};

/* Per tier counters (kvl__tier_stats). */
struct tier_counts {
	atomic_uint_fast64_t hits, failures, promotions, spills, spills_lost;
	atomic_uint_fast64_t read_bytes, read_ns; /* gets it was asked */
};

struct tier_store {
	size_t n;                        /* tiers, 2 to KVL__TIER_MAX */
	kvl_store *tier[KVL__TIER_MAX];  /* owned; top first */
	struct tier_slot slot[KVL__TIER_MAX];
	kvl__evict_hook hook[KVL__TIER_MAX]; /* each tier's spill-down */
	int spills[KVL__TIER_MAX];       /* 1: its victims go down */
	char shown[KVL__TIER_MAX][TIER_SHOWN]; /* redacted URIs */
	int write_through;               /* write=through */
	uint64_t promote_max;            /* largest object promoted */
	kvl__promoter *promoter;         /* NULL: promote=0 */
	struct tier_counts c[KVL__TIER_MAX];
	/* The store as a whole: keys found, not found, newly stored, failed
	 * for the caller; promotions that failed. */
	atomic_uint_fast64_t hits, misses, puts, errors, promote_failed;
	/* Objects on their way down (tier_transit.h): a read that missed
	 * one looks again. */
	kvl__transit transit;
	/* The holds taken on callers' behalf, and by which tiers
	 * (tier_hold.c). */
	kvl__holds holds;
	/* Everything above is immutable after open but the atomics, the
	 * promoter, the transits and the holds (each its own lock). */
};

/* tier_ops.c */
int kvl__tier_exists(kvl_store *store, void *impl, const kvl__batch *b);
int kvl__tier_get(kvl_store *store, void *impl, const kvl__batch *b);
int kvl__tier_put(kvl_store *store, void *impl, const kvl__batch *b);
int kvl__tier_remove(kvl_store *store, void *impl, const kvl__batch *b);
void kvl__tier_spill(void *ctx, uint64_t key_hash, const char *key,
                     const void *data, size_t len);
void kvl__tier_unlinked(void *ctx, uint64_t key_hash);
void kvl__tier_promote_one(void *ctx, const char *key, unsigned from);

/* tier_hold.c */
int kvl__tier_reg(kvl_store *store, void *impl, void *addr, size_t len,
                  kvl_mem_kind mem);
void kvl__tier_unreg(kvl_store *store, void *impl, void *addr);
int kvl__tier_hold(kvl_store *store, void *impl, const kvl__batch *b);
int kvl__tier_unhold(kvl_store *store, void *impl, const kvl__batch *b);

/* tier_stats.c */
void kvl__tier_stats_whole(void *impl, kvl_store_stats *out);
void kvl__tier_render(void *impl, kvl__cursor *c, kvl_stats_format format);

#endif /* KVL_TIER_IMPL_H */
