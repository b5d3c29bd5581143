/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tier.h — what the tier: store (tier.c) tells about each of its tiers
 * (internal): for tests and the command-line tool, which link the static
 * library. Not part of the public API; the stats renders of kvlink.h show
 * the same figures.
 *
 * Every function is thread-safe and may run while other threads call the
 * store.
 */
#ifndef KVL_STORE_TIER_H
#define KVL_STORE_TIER_H

#include <stddef.h>
#include <stdint.h>

#include "kvlink.h"

#define KVL__TIER_MAX 8 /* tiers of one tier: store, at most */

/* One tier's figures. A key counts in the highest tier that answered it. */
typedef struct kvl__tier_stats {
	uint64_t hits;        /* keys it served to exists or get (no tier
	                       * above had them) */
	uint64_t failures;    /* keys whose call on it failed (I/O, full,
	                       * down, …); another tier may have served them */
	uint64_t promotions;  /* objects copied from it up into the top */
	uint64_t spills;      /* objects it evicted that a lower tier took */
	uint64_t spills_lost; /* objects it evicted that no lower tier took */
	uint64_t read_bytes;  /* bytes its gets served to callers */
	uint64_t read_ns;     /* time in its get calls (misses included) */
	kvl_store_stats own;  /* the tier's own store counters */
} kvl__tier_stats;

/* The promoter's figures. */
typedef struct kvl__tier_promote_stats {
	uint64_t queued;  /* keys queued for promotion */
	uint64_t dropped; /* keys not queued (queue full) or still waiting
	                   * at close */
	uint64_t failed;  /* promotions that could not read the object below
	                   * or write it into the top (or was larger than
	                   * promote_max) */
	uint64_t waiting; /* keys waiting now */
} kvl__tier_promote_stats;

/* The number of tiers of s, or 0 when s is not a tier: store. */
size_t kvl__tier_count(const kvl_store *s);

/* Tier i of s (0: the top), or NULL. The tier store owns it: do not close
 * it. Tests put into and read from one tier through it. */
kvl_store *kvl__tier_at(kvl_store *s, size_t i);

/* [out] tier i's figures. 0, or KVL_EINVAL (not a tier store, i out of
 * range, out NULL). */
int kvl__tier_stats_get(kvl_store *s, size_t i, kvl__tier_stats *out);

/* [out] the promoter's figures (all 0 with promote=0). 0 or KVL_EINVAL. */
int kvl__tier_promote_stats_get(kvl_store *s, kvl__tier_promote_stats *out);

#endif /* KVL_STORE_TIER_H */
