/* SPDX-License-Identifier: Apache-2.0 */
/*
 * evict.c — the embedded store's eviction policies (lru, slru; evict.h)
 * and the ghost list of slru: a bounded first-in, first-out memory of
 * 64-bit key hashes.
 *
 * Ghost design: a ring holds the hashes in the order they were added, at
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
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "kvlink.h"
#include "store/evict.h"
#include "store/shadow.h"

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

/* -------------------------------------------------------------- policies */

/* A policy: where stored and touched objects go on the lists, and which
 * object goes next. */
struct kvl__evict_policy {
	const char *name;
	/* stored; behind: see kvl__evict_link */
	void (*link)(kvl__evict *ev, kvl__evict_node *n,
	             kvl__evict_node *behind);
	void (*touch)(kvl__evict *ev, kvl__evict_node *n); /* a hit */
	void (*unlink)(kvl__evict *ev, kvl__evict_node *n, int evicted,
	               uint64_t held);
	kvl__evict_node *(*victim)(const kvl__evict *ev);  /* next to go */
	int prefix; /* batches in prefix order: kvl__evict_prefix */
};

static void list_remove(kvl__evict *ev, kvl__evict_node *n)
{
	if (n->newer)
		n->newer->older = n->older;
	else
		ev->list[n->seg].head = n->older;
	if (n->older)
		n->older->newer = n->newer;
	else
		ev->list[n->seg].tail = n->newer;
}

static void list_push(kvl__evict *ev, kvl__evict_node *n, uint8_t seg)
{
	n->seg = seg;
	n->newer = NULL;
	n->older = ev->list[seg].head;
	if (ev->list[seg].head)
		ev->list[seg].head->newer = n;
	else
		ev->list[seg].tail = n;
	ev->list[seg].head = n;
}

/* Links n on at's list just behind it (older). */
static void list_behind(kvl__evict *ev, kvl__evict_node *n,
                        kvl__evict_node *at)
{
	n->seg = at->seg;
	n->newer = at;
	n->older = at->older;
	if (at->older)
		at->older->newer = n;
	else
		ev->list[at->seg].tail = n;
	at->older = n;
}

/* lru: one list. */
static void lru_link(kvl__evict *ev, kvl__evict_node *n,
                     kvl__evict_node *behind)
{
	(void)behind;
	list_push(ev, n, 0);
}

static void lru_touch(kvl__evict *ev, kvl__evict_node *n)
{
	if (ev->list[0].head != n) {
		list_remove(ev, n);
		list_push(ev, n, 0);
	}
}

static void lru_unlink(kvl__evict *ev, kvl__evict_node *n, int evicted,
                       uint64_t held)
{
	(void)evicted;
	(void)held;
	list_remove(ev, n);
}

static kvl__evict_node *lru_victim(const kvl__evict *ev)
{
	return ev->list[0].tail;
}

/* slru: list 0 is probation, list 1 protected. */
enum { SLRU_PROBATION = 0, SLRU_PROTECTED = 1 };

/* The protected list's limit of x: x - x (10 - share) / 10, so that share
 * 9 is x - x/10 and share 0 is nothing. */
static inline uint64_t slru_share(const kvl__evict *ev, uint64_t x)
{
	return x - x / 10 * (10u - ev->share) -
	       x % 10 * (10u - ev->share) / 10;
}

/* While the protected list is over its share, and at most `budget`
 * times, sends its tail back to the head if it has a second chance left
 * (using it up), else demotes it to the probation head. Second chances
 * are earned one per hit, so their rounds cost O(1) amortized. */
static void slru_fit(kvl__evict *ev, unsigned budget)
{
	uint64_t max_bytes = slru_share(ev, ev->capacity);
	uint64_t max_count = ev->max_objects ? slru_share(ev, ev->max_objects)
	                                     : UINT64_MAX;
	while ((ev->prot_bytes > max_bytes || ev->prot_count > max_count) &&
	       budget) {
		kvl__evict_node *d = ev->list[SLRU_PROTECTED].tail;
		list_remove(ev, d);
		if (d->freq) {
			d->freq--;
			list_push(ev, d, SLRU_PROTECTED);
			continue;
		}
		ev->prot_bytes -= ev->cost(d);
		ev->prot_count--;
		list_push(ev, d, SLRU_PROBATION);
		budget--;
	}
}

/* A lowered share (adaptive) drains this many objects per operation. */
#define SLRU_DRAIN 2

/* Puts n at the protected head and fits the list to its share: wholly,
 * or by SLRU_DRAIN demotions where the share may have been lowered. */
static void slru_protect(kvl__evict *ev, kvl__evict_node *n)
{
	list_push(ev, n, SLRU_PROTECTED);
	ev->prot_bytes += ev->cost(n);
	ev->prot_count++;
	slru_fit(ev, ev->adapt ? SLRU_DRAIN : UINT_MAX);
}

/* A new object goes to protected if the ghost remembers it, else to the
 * probation head, or just behind `behind` when that is on probation. */
static void slru_place(kvl__evict *ev, kvl__evict_node *n,
                       kvl__evict_node *behind)
{
	n->freq = 0;
	if (kvl__ghost_take(&ev->ghost, n->hash))
		slru_protect(ev, n);
	else if (behind && behind->seg == SLRU_PROBATION)
		list_behind(ev, n, behind);
	else
		list_push(ev, n, SLRU_PROBATION);
}

static void slru_link(kvl__evict *ev, kvl__evict_node *n,
                      kvl__evict_node *behind)
{
	(void)behind;
	slru_place(ev, n, NULL);
}

static void slru_touch(kvl__evict *ev, kvl__evict_node *n)
{
	if (n->seg == SLRU_PROTECTED) {
		if (n->freq < ev->fmax)
			n->freq++;
		if (ev->list[SLRU_PROTECTED].head != n) {
			list_remove(ev, n);
			list_push(ev, n, SLRU_PROTECTED);
		}
		return;
	}
	list_remove(ev, n);
	n->freq = 0;
	slru_protect(ev, n);
}

static void slru_unlink(kvl__evict *ev, kvl__evict_node *n, int evicted,
                        uint64_t held)
{
	list_remove(ev, n);
	if (n->seg == SLRU_PROTECTED) {
		ev->prot_bytes -= ev->cost(n);
		ev->prot_count--;
	} else if (evicted) {
		/* Out of memory here only makes the ghost forget this key. */
		uint64_t base = ev->max_objects ? ev->max_objects : held;
		size_t limit = base > SIZE_MAX / 2 ? SIZE_MAX : (size_t)base * 2;
		(void)kvl__ghost_add(&ev->ghost, n->hash, limit);
	}
}

static kvl__evict_node *slru_victim(const kvl__evict *ev)
{
	return ev->list[SLRU_PROBATION].tail ? ev->list[SLRU_PROBATION].tail
	                                     : ev->list[SLRU_PROTECTED].tail;
}

/* adaptive: slru whose configuration follows whichever of ADAPT_N shadows
 * (shadow.h) missed least lately. A shadow models the store over a
 * 1-in-rate sample of keys at 1/rate of its capacity in objects, rate
 * chosen so that it holds ADAPT_SHADOW_CAP to twice that many; their
 * misses halve every ADAPT_WINDOW x its capacity sampled accesses. The
 * shadows start with the store under max_objects, else at its first
 * eviction with what it held then as the capacity; until then, and if
 * they cannot be allocated, the policy keeps its first configuration. */
#define ADAPT_N 3
#define ADAPT_SHADOW_CAP 1024
/* Misses halve every 16 x the shadow's capacity: a memory long enough
 * that configurations within a few misses of each other (the noise of a
 * 1,024-key sample) do not make the store switch back and forth, each
 * switch costing hits (measured: docs/benchmarks.md). */
#define ADAPT_WINDOW 16
#define ADAPT_FIRST 1

/* 10 % and 30 % protected without second chances, and 90 % protected
 * with up to three: measured in docs/replay.md, the first two win where
 * the cache holds a conversation's turns (near LRU order, at or above
 * exact LRU there: a small protected list still keeps a shared prompt
 * from the flood), the last where reuse is rare and far apart. */
static const struct {
	uint8_t share, fmax;
} adapt_cfg[ADAPT_N] = {{1, 0}, {3, 0}, {9, 3}};

struct kvl__adapt {
	kvl__shadow sh[ADAPT_N];
	uint64_t rate, ops, window;
	unsigned cur;
};

static void adapt_set(kvl__evict *ev, unsigned i)
{
	ev->share = adapt_cfg[i].share;
	ev->fmax = adapt_cfg[i].fmax;
}

static void adapt_free(struct kvl__adapt *a)
{
	if (!a)
		return;
	for (unsigned i = 0; i < ADAPT_N; i++)
		kvl__shadow_free(&a->sh[i]);
	free(a);
}

static void adapt_start(kvl__evict *ev, uint64_t held)
{
	uint64_t cap = ev->max_objects ? ev->max_objects : held;
	struct kvl__adapt *a = calloc(1, sizeof *a);
	if (!a || !cap)
		goto fail;
	a->rate = cap > ADAPT_SHADOW_CAP ? cap / ADAPT_SHADOW_CAP : 1;
	size_t scap = (size_t)(cap / a->rate);
	a->window = ADAPT_WINDOW * (uint64_t)scap;
	a->cur = ADAPT_FIRST;
	for (unsigned i = 0; i < ADAPT_N; i++)
		if (kvl__shadow_init(&a->sh[i], scap, adapt_cfg[i].share,
		                     adapt_cfg[i].fmax))
			goto fail;
	ev->adapt = a;
	return;
fail:
	adapt_free(a);
}

static int adapt_sampled(const struct kvl__adapt *a, uint64_t hash)
{
	return ((hash * 0x9e3779b97f4a7c15ull) >> 32) % a->rate == 0;
}

/* An access to a sampled key (stored behind `behind`, or NULL): each
 * shadow sees it, the misses decay, and the store takes the configuration
 * of the shadow that misses least. */
static void adapt_access(kvl__evict *ev, uint64_t hash,
                         const kvl__evict_node *behind)
{
	struct kvl__adapt *a = ev->adapt;
	if (!a || !adapt_sampled(a, hash))
		return;
	const uint64_t *bh = behind && adapt_sampled(a, behind->hash)
	                             ? &behind->hash
	                             : NULL;
	unsigned best = a->cur;
	for (unsigned i = 0; i < ADAPT_N; i++)
		a->sh[i].misses += kvl__shadow_access(&a->sh[i], hash, bh);
	for (unsigned i = 0; i < ADAPT_N; i++)
		if (a->sh[i].misses < a->sh[best].misses)
			best = i;
	if (++a->ops == a->window) {
		a->ops = 0;
		for (unsigned i = 0; i < ADAPT_N; i++)
			a->sh[i].misses /= 2;
	}
	if (best != a->cur) {
		a->cur = best;
		adapt_set(ev, best);
	}
}

static void adaptive_link(kvl__evict *ev, kvl__evict_node *n,
                          kvl__evict_node *behind)
{
	adapt_access(ev, n->hash, behind);
	slru_place(ev, n, behind);
	slru_fit(ev, SLRU_DRAIN);
}

static void adaptive_touch(kvl__evict *ev, kvl__evict_node *n)
{
	adapt_access(ev, n->hash, NULL);
	slru_touch(ev, n);
	slru_fit(ev, SLRU_DRAIN);
}

static void adaptive_unlink(kvl__evict *ev, kvl__evict_node *n, int evicted,
                            uint64_t held)
{
	slru_unlink(ev, n, evicted, held);
	if (!ev->adapt) {
		if (evicted && !ev->model)
			adapt_start(ev, held);
	} else if (!evicted && adapt_sampled(ev->adapt, n->hash)) {
		for (unsigned i = 0; i < ADAPT_N; i++)
			kvl__shadow_remove(&ev->adapt->sh[i], n->hash);
	}
}

/* The default first. */
static const struct kvl__evict_policy policies[] = {
	{"adaptive", adaptive_link, adaptive_touch, adaptive_unlink,
	 slru_victim, 1},
	{"slru", slru_link, slru_touch, slru_unlink, slru_victim, 0},
	{"lru", lru_link, lru_touch, lru_unlink, lru_victim, 0},
};
#define N_POLICIES (sizeof policies / sizeof policies[0])

const char *kvl_mem_policy_name(size_t i)
{
	return i < N_POLICIES ? policies[i].name : NULL;
}

int kvl__evict_policy(const char *name)
{
	for (size_t i = 0; i < N_POLICIES; i++)
		if (!strcmp(name, policies[i].name))
			return (int)i;
	return -1;
}

void kvl__evict_init(kvl__evict *ev, size_t policy, uint64_t capacity,
                     uint64_t max_objects,
                     uint64_t (*cost)(const kvl__evict_node *n))
{
	*ev = (kvl__evict){.policy = &policies[policy < N_POLICIES ? policy : 0],
	                   .capacity = capacity,
	                   .max_objects = max_objects,
	                   .cost = cost,
	                   .ghost = KVL__GHOST_INIT,
	                   .share = 9};
	if (ev->policy->link == adaptive_link) {
		adapt_set(ev, ADAPT_FIRST);
		if (max_objects)
			adapt_start(ev, max_objects);
	}
}

void kvl__evict_init_model(kvl__evict *ev, uint64_t max_objects,
                           uint8_t share, uint8_t fmax,
                           uint64_t (*cost)(const kvl__evict_node *n))
{
	*ev = (kvl__evict){.policy = &policies[0],
	                   .capacity = UINT64_MAX,
	                   .max_objects = max_objects,
	                   .cost = cost,
	                   .ghost = KVL__GHOST_INIT,
	                   .share = share,
	                   .fmax = fmax,
	                   .model = 1};
}

void kvl__evict_free(kvl__evict *ev)
{
	kvl__ghost_free(&ev->ghost);
	adapt_free(ev->adapt);
	ev->adapt = NULL;
}

void kvl__evict_link(kvl__evict *ev, kvl__evict_node *n,
                     kvl__evict_node *behind)
{
	ev->policy->link(ev, n, behind);
}

int kvl__evict_prefix(const kvl__evict *ev)
{
	return ev->policy->prefix;
}

void kvl__evict_touch(kvl__evict *ev, kvl__evict_node *n)
{
	ev->policy->touch(ev, n);
}

void kvl__evict_unlink(kvl__evict *ev, kvl__evict_node *n, int evicted,
                       uint64_t held)
{
	ev->policy->unlink(ev, n, evicted, held);
}

kvl__evict_node *kvl__evict_victim(const kvl__evict *ev)
{
	return ev->policy->victim(ev);
}
