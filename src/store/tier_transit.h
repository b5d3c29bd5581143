/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tier_transit.h — the tier: store's record of objects on their way down
 * (internal to tier*.c). Between the moment a tier evicts an object (it is
 * invisible there at once) and the end of its spill into a lower tier, the
 * object is in no tier; a read that misses a key in every tier asks this
 * record whether the key was on its way down meanwhile, and then looks
 * again instead of reporting it absent.
 */
#ifndef KVL_TIER_TRANSIT_H
#define KVL_TIER_TRANSIT_H

#include <stdint.h>

#include "core/internal.h"

#define TRANSIT_MOVING 512 /* objects in transit tracked at once */
#define TRANSIT_DONE 1024  /* finished transits remembered */

typedef struct kvl__transit {
	pthread_mutex_t mu;
	uint64_t moving[TRANSIT_MOVING]; /* key hashes, n_moving of them (mu) */
	size_t n_moving;                 /* (mu) */
	/* Transits with no free slot: in progress, and begun ever (mu). */
	uint64_t untracked_live, untracked_seq;
	uint64_t done[TRANSIT_DONE]; /* the newest finished transits (mu) */
	uint64_t n_done;    /* transits finished, ever (mu) */
} kvl__transit;

void kvl__transit_init(kvl__transit *tr);
void kvl__transit_destroy(kvl__transit *tr);

/* An object of key hash h (kvl__evict_key_hash) becomes invisible in its tier: its transit
 * begins. Called under that tier's lock: takes only the record's. */
void kvl__transit_begin(kvl__transit *tr, uint64_t h);

/* Its spill is over (taken below, or lost). */
void kvl__transit_end(kvl__transit *tr, uint64_t h);

/* A mark taken before a look at the tiers. */
typedef struct kvl__transit_mark {
	uint64_t n_done, untracked_seq;
} kvl__transit_mark;
kvl__transit_mark kvl__transit_mark_now(kvl__transit *tr);

/* 1 when one of the key hashes h[0..n) was on its way down at some moment
 * since mark m (it is still, or its transit ended since), or when the
 * record cannot tell (more transits than it keeps); else 0: a look since m
 * that missed them in every tier saw the truth. */
int kvl__transit_since(kvl__transit *tr, kvl__transit_mark m,
                       const uint64_t *h, size_t n);

/* 1 while key hash h is on its way down. */
int kvl__transit_moving(kvl__transit *tr, uint64_t h);

#endif /* KVL_TIER_TRANSIT_H */
