/* SPDX-License-Identifier: Apache-2.0 */
/*
 * evict.h — the embedded store's eviction policies (internal): which
 * object goes next when room is needed, and the memory of recently evicted
 * keys (a "ghost" list) that the segmented-LRU policy consults.
 *
 * Policies keep the store's objects on one or two doubly linked lists of
 * kvl__evict_node, most recent first:
 *
 *  - lru: exact LRU on one list.
 *  - slru: segmented LRU for prefix caches. A new object goes
 *    to the head of the probation list; a hit there promotes it to the head
 *    of the protected list (a hit on protected moves it to its head). The
 *    protected list holds at most 90 % of the capacity (bytes, and objects
 *    under max_objects); beyond that its tail is demoted to the probation
 *    head. Eviction takes the probation tail, or the protected tail when
 *    probation is empty. The hashes of keys evicted from probation are
 *    remembered in a ghost list of at most 2 x max_objects entries (2 x the
 *    objects held when there is no max_objects); a key stored again while
 *    remembered goes straight to protected. Why: in prefix-cache traffic
 *    most pages are never read again (a request's own tail), while a page
 *    read once (a shared document, a conversation) is likely read many
 *    more times, often long after it was first stored; LRU lets the first
 *    kind flush the second.
 *  - adaptive (the default): slru's lists with a configuration that
 *    follows the workload: 10 % or 30 % protected, or 90 % with second
 *    chances (a protected object earns one per hit, up to 3; a tail with
 *    one left goes back to the head instead of being demoted).
 *    Three shadows (shadow.h), one per configuration, model the store
 *    over a sample of the keys, and the store takes the configuration of
 *    the one that missed least lately. Batches are in prefix order
 *    (kvl__evict_prefix). Why: a large protected share wins where reuse
 *    is rare and far apart (documents), a small one where the cache holds
 *    most of the working set (conversations), and a chain is worth most
 *    at its start. Cost: O(1) per operation (three shadow accesses for a
 *    sampled key); memory: 1 byte per object (in the node's padding) and
 *    at most about 1.4 MiB for the shadows (1,024 to 2,047 keys each),
 *    whatever the capacity.
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

/* An object as the policies see it; the store embeds it in its records. */
typedef struct kvl__evict_node {
	struct kvl__evict_node *newer, *older; /* NULL at the ends */
	uint64_t hash; /* of the key */
	uint8_t seg;   /* the list it is on */
	uint8_t freq;  /* protected: second chances left (up to fmax) */
} kvl__evict_node;

struct kvl__evict_policy;

/* A policy's state over the store's objects. Not thread-safe: the store's
 * lock guards it. */
typedef struct kvl__evict {
	const struct kvl__evict_policy *policy;
	struct {
		kvl__evict_node *head, *tail; /* most, least recent */
	} list[2];
	uint64_t capacity;    /* bytes the store holds at most */
	uint64_t max_objects; /* objects it holds at most (0: no limit) */
	/* The accounted bytes of a node's object. */
	uint64_t (*cost)(const kvl__evict_node *n);
	/* slru: the cost and number of objects on the protected list; the
	 * probation list is every other object. */
	uint64_t prot_bytes, prot_count;
	kvl__ghost ghost;                /* slru: keys evicted from probation */
	/* slru's configuration: the protected list's share in tenths, and
	 * the second chances a protected object earns by hits (0: none). */
	uint8_t share, fmax;
	uint8_t model;                   /* a shadow's (never adapts) */
	struct kvl__adapt *adapt;        /* adaptive: its shadows, or NULL */
} kvl__evict;

/* Starts policy number `policy` (kvl_mem_policy_name) with empty lists. */
void kvl__evict_init(kvl__evict *ev, size_t policy, uint64_t capacity,
                     uint64_t max_objects,
                     uint64_t (*cost)(const kvl__evict_node *n));
void kvl__evict_free(kvl__evict *ev);

/* The number of the policy called `name`, or -1. */
int kvl__evict_policy(const char *name);

/* The adaptive policy's lists with a fixed configuration, for a shadow
 * (shadow.h): at most max_objects, no byte limit, never adapting. */
void kvl__evict_init_model(kvl__evict *ev, uint64_t max_objects,
                           uint8_t share, uint8_t fmax,
                           uint64_t (*cost)(const kvl__evict_node *n));

/* Whether the policy wants batches in prefix order: a batch's keys
 * touched from the last to the first, and each object a put stores linked
 * behind the one it stored before (`behind`), so that the first page of
 * a chain is the most recent and a chain is evicted from its end (a lost
 * early page makes every later one useless). */
int kvl__evict_prefix(const kvl__evict *ev);

/* n was stored (behind: NULL, or an object the same put stored just
 * before, still held, behind which a prefix-order policy links n); n was
 * found (a hit); n leaves its list (`evicted`: to make room, else removed)
 * while `held` objects are held, n among them. */
void kvl__evict_link(kvl__evict *ev, kvl__evict_node *n,
                     kvl__evict_node *behind);
void kvl__evict_touch(kvl__evict *ev, kvl__evict_node *n);
void kvl__evict_unlink(kvl__evict *ev, kvl__evict_node *n, int evicted,
                       uint64_t held);

/* The object to evict next, or NULL when none is held. */
kvl__evict_node *kvl__evict_victim(const kvl__evict *ev);

#endif /* KVL_EVICT_H */
