/*
 * evict.h — the memory of recently evicted keys (a "ghost" list) that the
 * embedded store's segmented-LRU eviction policy consults, and the names of
 * the store's policies (internal).
 *
 * A kvl__ghost remembers the 64-bit hashes of the keys it is given, in
 * first-in, first-out order, and forgets the oldest beyond a limit the
 * caller passes on each add. It holds hashes only (never keys or objects),
 * so two keys whose hashes collide share an entry; callers use it as a hint,
 * where a false "seen" costs nothing but a different placement.
 *
 * Not thread-safe: the owner serializes every call (the store's mutex).
 * Memory: a ring of 8-byte hashes (8 to 16 bytes per position held) plus an
 * open-addressing table of 16-byte slots a quarter to half full (32 to 64
 * bytes per remembered hash): 40 to 80 bytes per remembered hash, grown by
 * doubling and returned only by kvl__ghost_free.
 */
#ifndef KVL_EVICT_H
#define KVL_EVICT_H

#include <stddef.h>
#include <stdint.h>

struct kvl__ghost_slot {
	uint64_t hash;
	uint64_t seq1; /* 1 + the ring position of its newest entry; 0: empty */
};

typedef struct kvl__ghost {
	uint64_t *ring;   /* hashes at positions [head, tail), ring_cap slots */
	size_t ring_cap;  /* a power of two, or 0 before the first add */
	uint64_t head, tail;
	struct kvl__ghost_slot *slots; /* mask + 1 slots, or NULL */
	size_t mask;
	size_t count;     /* hashes remembered now (live table slots) */
} kvl__ghost;

#define KVL__GHOST_INIT {0}

/* Remembers `hash` as the newest entry (an older entry of the same hash is
 * superseded), then forgets the oldest entries while more than `limit`
 * positions are held (superseded and taken entries hold a position until
 * they age out, so at most `limit` hashes are remembered). limit 0 forgets
 * everything. Returns 0, or KVL_ENOMEM when growing failed: the hash is
 * then not remembered and the rest is unchanged. */
int kvl__ghost_add(kvl__ghost *g, uint64_t hash, size_t limit);

/* 1 if `hash` is remembered, and forgets it; else 0. Allocates nothing. */
int kvl__ghost_take(kvl__ghost *g, uint64_t hash);

/* Frees everything; the ghost is then empty and may be used again. */
void kvl__ghost_free(kvl__ghost *g);

/* The name of the embedded store's eviction policy number i (0 is the
 * default; see store_mem.c), or NULL past the last. For tools that list
 * or sweep the policies. Thread-safe. */
const char *kvl__mem_policy_name(size_t i);

#endif /* KVL_EVICT_H */
