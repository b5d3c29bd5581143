/*
 * evict.c — the ghost list of the embedded store's eviction policy: a
 * bounded first-in, first-out memory of 64-bit key hashes (see evict.h).
 *
 * Design: a ring holds the hashes in the order they were added, at
 * positions head..tail-1 (position p lives in ring[p & (ring_cap - 1)]);
 * an open-addressing table (linear probing, backward-shift deletion, no
 * tombstones) maps each remembered hash to the position of its newest ring
 * entry. Forgetting the oldest position deletes its hash from the table only
 * when the table still points at that position, so an entry superseded by a
 * later add, or already taken, ages out of the ring without effect.
 *
 * Invariants: head <= tail; tail - head <= ring_cap; every table slot points
 * at a position in [head, tail) whose ring entry holds the slot's hash;
 * count = live slots <= tail - head; the table is at most half full.
 * Not thread-safe (the caller's lock guards it).
 */
#include <stdlib.h>

#include "store/evict.h"
#include "kvlink.h"

#define GHOST_MIN 64 /* first ring and table sizes, powers of two */

static inline size_t ghost_home(const kvl__ghost *g, uint64_t h)
{
	/* Fibonacci hashing: callers' hashes may share low bits. */
	return (size_t)((h * 0x9e3779b97f4a7c15ull) >> 32) & g->mask;
}

/* The slot holding h, or the empty slot that ends its probe; *found says
 * which. Needs a table. */
static size_t ghost_find(const kvl__ghost *g, uint64_t h, int *found)
{
	size_t i = ghost_home(g, h);
	for (;;) {
		const struct kvl__ghost_slot *s = &g->slots[i];
		if (!s->seq1) {
			*found = 0;
			return i;
		}
		if (s->hash == h) {
			*found = 1;
			return i;
		}
		i = (i + 1) & g->mask;
	}
}

/* Empties slot i and shifts later entries of its probe run back. */
static void ghost_delete(kvl__ghost *g, size_t i)
{
	size_t j = i;
	for (;;) {
		j = (j + 1) & g->mask;
		if (!g->slots[j].seq1)
			break;
		size_t home = ghost_home(g, g->slots[j].hash);
		/* j's entry may fill i if its home is not in (i, j]. */
		if (((j - home) & g->mask) >= ((j - i) & g->mask)) {
			g->slots[i] = g->slots[j];
			i = j;
		}
	}
	g->slots[i].seq1 = 0;
	g->slots[i].hash = 0;
	g->count--;
}

/* Doubles the table (or makes the first one). KVL_ENOMEM: unchanged. */
static int ghost_grow_table(kvl__ghost *g)
{
	size_t n = g->slots ? (g->mask + 1) * 2 : GHOST_MIN;
	struct kvl__ghost_slot *s = calloc(n, sizeof *s);
	if (!s)
		return KVL_ENOMEM;
	struct kvl__ghost_slot *old = g->slots;
	size_t old_n = old ? g->mask + 1 : 0;
	g->slots = s;
	g->mask = n - 1;
	for (size_t i = 0; i < old_n; i++) {
		if (!old[i].seq1)
			continue;
		size_t j = ghost_home(g, old[i].hash);
		while (s[j].seq1)
			j = (j + 1) & g->mask;
		s[j] = old[i];
	}
	free(old);
	return 0;
}

/* Doubles the ring (or makes the first one), keeping every position.
 * KVL_ENOMEM: unchanged. */
static int ghost_grow_ring(kvl__ghost *g)
{
	size_t n = g->ring_cap ? g->ring_cap * 2 : GHOST_MIN;
	uint64_t *r = malloc(n * sizeof *r);
	if (!r)
		return KVL_ENOMEM;
	for (uint64_t p = g->head; p < g->tail; p++)
		r[p & (n - 1)] = g->ring[p & (g->ring_cap - 1)];
	free(g->ring);
	g->ring = r;
	g->ring_cap = n;
	return 0;
}

/* Forgets the oldest position. */
static void ghost_drop_oldest(kvl__ghost *g)
{
	uint64_t h = g->ring[g->head & (g->ring_cap - 1)];
	int found;
	size_t i = ghost_find(g, h, &found);
	if (found && g->slots[i].seq1 == g->head + 1)
		ghost_delete(g, i);
	g->head++;
}

int kvl__ghost_add(kvl__ghost *g, uint64_t hash, size_t limit)
{
	if (limit == 0) {
		while (g->head < g->tail)
			ghost_drop_oldest(g);
		return 0;
	}
	if (g->tail - g->head == g->ring_cap && ghost_grow_ring(g))
		return KVL_ENOMEM;
	if ((!g->slots || (g->count + 1) * 2 > g->mask + 1) &&
	    ghost_grow_table(g))
		return KVL_ENOMEM;
	int found;
	size_t i = ghost_find(g, hash, &found);
	if (!found) {
		g->slots[i].hash = hash;
		g->count++;
	}
	g->slots[i].seq1 = g->tail + 1;
	g->ring[g->tail & (g->ring_cap - 1)] = hash;
	g->tail++;
	while (g->tail - g->head > limit)
		ghost_drop_oldest(g);
	return 0;
}

int kvl__ghost_take(kvl__ghost *g, uint64_t hash)
{
	if (!g->count)
		return 0;
	int found;
	size_t i = ghost_find(g, hash, &found);
	if (found)
		ghost_delete(g, i);
	return found;
}

void kvl__ghost_free(kvl__ghost *g)
{
	free(g->ring);
	free(g->slots);
	*g = (kvl__ghost)KVL__GHOST_INIT;
}
