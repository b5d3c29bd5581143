/* SPDX-License-Identifier: Apache-2.0 */
/*
 * holds.h — counted holds per key, for a store that keeps holds on behalf
 * of others (internal): the tier: store remembers which of its tiers held
 * each hold of a key, so that an unhold lets go exactly where a hold took;
 * the fault store's fault.holds=1 keeps holds itself, as Mooncake does, for
 * tests without Mooncake.
 *
 * A key's entry counts its holds (n) and, for each of up to KVL__HOLDS_PARTS parts (the
 * tiers), the holds that part took (c[part] <= n). A hold names the parts
 * that took it as a bit mask. An unhold lets go at the parts that took
 * every hold still counted (c[part] == n): taking from the best-covered
 * parts first keeps each part's count at most the key's, so that when n
 * reaches 0 every part has been let go exactly as often as it held.
 *
 * Keys are known by their XXH3-128 hash (two keys that collide would share
 * an entry: 2^-128). Thread-safe: one mutex guards the table.
 */
#ifndef KVL_STORE_HOLDS_H
#define KVL_STORE_HOLDS_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"

#define KVL__HOLDS_PARTS 8 /* parts per key (KVL__TIER_MAX) */

struct kvl__hold_entry;

typedef struct kvl__holds {
	pthread_mutex_t mu;
	struct kvl__hold_entry **slot; /* chains; n_slots a power of two (mu) */
	size_t n_slots, n_keys;        /* (mu) */
} kvl__holds;

void kvl__holds_init(kvl__holds *h);
void kvl__holds_destroy(kvl__holds *h); /* forgets every hold left */

/* One more hold of key, taken by the parts in mask (bits below
 * KVL__HOLDS_PARTS; 0: by none, counted all the same). 0 or KVL_ENOMEM
 * (nothing changed). */
int kvl__holds_add(kvl__holds *h, const char *key, unsigned mask);

/* One hold of key fewer: [out] *mask the parts to let go at. 0, or
 * KVL_ENOTFOUND when key has no hold (*mask 0). */
int kvl__holds_take(kvl__holds *h, const char *key, unsigned *mask);

/* The holds of key counted now. */
uint32_t kvl__holds_count(kvl__holds *h, const char *key);

#endif /* KVL_STORE_HOLDS_H */
