/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shadow.h — a model of the embedded store's eviction over key hashes
 * only (internal to src/store/). The adaptive policy (evict.h) runs one
 * per configuration it may choose, each over the keys of a 1-in-rate
 * sample at 1/rate of the store's capacity, and follows the one that
 * misses least.
 *
 * A shadow holds at most `cap` hashes in nodes of its own, ordered by a
 * kvl__evict of the segmented policy with a fixed configuration, found
 * through an open-addressing table (linear probing, backward-shift
 * deletion). Two keys whose hashes collide are one key here: the model
 * is a hint. Memory, fixed at init: cap nodes (32 bytes each), a table of
 * 2 to 4 x cap pointers, and the policy's ghost (up to 2 x cap hashes,
 * 40 to 80 bytes each). Not thread-safe: the store's lock guards it.
 */
#ifndef KVL_SHADOW_H
#define KVL_SHADOW_H

#include "store/evict.h"

typedef struct kvl__shadow {
	kvl__evict ev;           /* the modelled policy over nodes[] */
	kvl__evict_node *nodes;  /* cap of them */
	kvl__evict_node *unused; /* chained by `older` */
	kvl__evict_node **table; /* mask + 1 slots, NULL: empty */
	size_t mask, cap, count;
	double misses;           /* counted by the caller, decayed */
} kvl__shadow;

/* A shadow of `cap` (>= 1) objects under the adaptive policy's segmented
 * lists with a fixed configuration: the protected list at share/10 of
 * them, second chances up to fmax (evict.h).
 * 0, or KVL_ENOMEM (then *s holds nothing to free). */
int kvl__shadow_init(kvl__shadow *s, size_t cap, uint8_t share,
                     uint8_t fmax);
void kvl__shadow_free(kvl__shadow *s);

/* An access to the key with this hash: a hit (touched; returns 0) or a
 * miss (stored, evicting the model's victim when full, and linked behind
 * the key whose hash is *behind when given and held: kvl__evict_link;
 * returns 1). */
int kvl__shadow_access(kvl__shadow *s, uint64_t hash, const uint64_t *behind);

/* Forgets the key with this hash, if held (it was removed from the store). */
void kvl__shadow_remove(kvl__shadow *s, uint64_t hash);

#endif /* KVL_SHADOW_H */
