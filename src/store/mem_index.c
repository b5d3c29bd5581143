/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mem_index.c — the embedded store's key index (mem.h): a word-at-a-time
 * key hash and the open-addressing table. Large tables are mapped on their
 * own and ask for transparent huge pages, so random probes rarely miss the
 * TLB.
 */
#include <stdlib.h>
#include <sys/mman.h>

#include "store/mem.h"

#define MEM_TABLE_HUGE (2u << 20) /* tables this big get huge pages */

static inline uint64_t mem_rd64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static inline uint64_t mem_rd32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* 64x64 -> 128 multiply, folded. */
static inline uint64_t mem_mix(uint64_t a, uint64_t b)
{
#ifdef __SIZEOF_INT128__
	__uint128_t r = (__uint128_t)a * b;
	return (uint64_t)r ^ (uint64_t)(r >> 64);
#else
	uint64_t ha = a >> 32, la = (uint32_t)a, hb = b >> 32, lb = (uint32_t)b;
	uint64_t rh = ha * hb, rm0 = ha * lb, rm1 = hb * la, rl = la * lb;
	uint64_t t = rl + (rm0 << 32), c = t < rl;
	uint64_t lo = t + (rm1 << 32);
	c += lo < t;
	uint64_t hi = rh + (rm0 >> 32) + (rm1 >> 32) + c;
	return lo ^ hi;
#endif
}

#define MEM_P0 0xa0761d6478bd642full
#define MEM_P1 0xe7037ed1a0b428dbull
#define MEM_P2 0x8ebc6af09c88c6e3ull
#define MEM_P3 0x589965cc75374cc3ull
#define MEM_P4 0x1d8e4e27c47d124full

/* A word-at-a-time hash in the style of wyhash: 64 bytes per round in four
 * independent lanes. Only ever compared within this process. */
static uint64_t mem_hash(const char *key, size_t len)
{
	const unsigned char *p = (const unsigned char *)key;
	uint64_t seed = MEM_P0 ^ len, a, b;

	if (len <= 16) {
		if (len >= 4) {
			size_t m = (len >> 3) << 2;
			a = (mem_rd32(p) << 32) | mem_rd32(p + m);
			b = (mem_rd32(p + len - 4) << 32) |
			    mem_rd32(p + len - 4 - m);
		} else if (len > 0) {
			a = ((uint64_t)p[0] << 16) | ((uint64_t)p[len >> 1] << 8) |
			    p[len - 1];
			b = 0;
		} else {
			a = b = 0;
		}
	} else {
		size_t i = len;
		if (i > 64) {
			uint64_t s1 = seed, s2 = seed ^ MEM_P2;
			uint64_t s3 = seed ^ MEM_P3, s4 = seed ^ MEM_P4;
			do {
				s1 = mem_mix(mem_rd64(p) ^ MEM_P1,
				             mem_rd64(p + 8) ^ s1);
				s2 = mem_mix(mem_rd64(p + 16) ^ MEM_P2,
				             mem_rd64(p + 24) ^ s2);
				s3 = mem_mix(mem_rd64(p + 32) ^ MEM_P3,
				             mem_rd64(p + 40) ^ s3);
				s4 = mem_mix(mem_rd64(p + 48) ^ MEM_P4,
				             mem_rd64(p + 56) ^ s4);
				p += 64;
				i -= 64;
			} while (i > 64);
			seed = (s1 ^ s2) ^ (s3 ^ s4);
		}
		while (i > 16) {
			seed = mem_mix(mem_rd64(p) ^ MEM_P1, mem_rd64(p + 8) ^ seed);
			p += 16;
			i -= 16;
		}
		a = mem_rd64(p + i - 16);
		b = mem_rd64(p + i - 8);
	}
	return mem_mix(MEM_P1 ^ len, mem_mix(a ^ MEM_P1, b ^ seed));
}

/* The slot holding `key`, or the empty slot that ends its probe; *found
 * tells which. */
size_t mem_find(const struct mem_index *m, uint64_t h, const char *key,
                       size_t len, int *found)
{
	size_t i = h & m->mask;
	for (;;) {
		const struct mem_slot *sl = &m->slots[i];
		if (!sl->obj) {
			*found = 0;
			return i;
		}
		if (sl->hash == h && sl->obj->key_len == len &&
		    memcmp(sl->obj->key, key, len) == 0) {
			*found = 1;
			return i;
		}
		i = (i + 1) & m->mask;
	}
}

size_t mem_slot_of(const struct mem_index *m, const struct mem_obj *o)
{
	size_t i = o->node.hash & m->mask;
	while (m->slots[i].obj != o)
		i = (i + 1) & m->mask;
	return i;
}

/* Empties slot i and shifts later entries of its probe run back. */
void mem_slot_delete(struct mem_index *m, size_t i)
{
	size_t j = i;
	for (;;) {
		j = (j + 1) & m->mask;
		if (!m->slots[j].obj)
			break;
		size_t home = m->slots[j].hash & m->mask;
		/* j's entry may fill i if its home is not in (i, j]. */
		if (((j - home) & m->mask) >= ((j - i) & m->mask)) {
			m->slots[i] = m->slots[j];
			i = j;
		}
	}
	m->slots[i].obj = NULL;
	m->slots[i].hash = 0;
}

/* A zeroed table of n slots. Large ones are mapped on their own and asked
 * for transparent huge pages: random probes then rarely miss the TLB. */
static struct mem_slot *mem_table_alloc(size_t n)
{
	if (n > SIZE_MAX / sizeof(struct mem_slot))
		return NULL;
	size_t bytes = n * sizeof(struct mem_slot);
	if (bytes < MEM_TABLE_HUGE)
		return calloc(n, sizeof(struct mem_slot));
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
#ifdef MADV_HUGEPAGE
	madvise(p, bytes, MADV_HUGEPAGE);
#endif
	MEM_LSAN_ROOT(p, bytes);
	return p;
}

static void mem_table_free(struct mem_slot *s, size_t n)
{
	if (n * sizeof(struct mem_slot) < MEM_TABLE_HUGE) {
		free(s);
	} else {
		MEM_LSAN_UNROOT(s, n * sizeof(struct mem_slot));
		munmap(s, n * sizeof(struct mem_slot));
	}
}

/* Doubles the table. KVL_ENOMEM leaves it as it was. */
int mem_grow(struct mem_index *m)
{
	size_t n = (m->mask + 1) * 2;
	struct mem_slot *s = mem_table_alloc(n);
	if (!s)
		return KVL_ENOMEM;
	for (size_t i = 0; i <= m->mask; i++) {
		struct mem_obj *o = m->slots[i].obj;
		if (!o)
			continue;
		size_t j = o->node.hash & (n - 1);
		while (s[j].obj)
			j = (j + 1) & (n - 1);
		s[j] = m->slots[i];
	}
	mem_table_free(m->slots, m->mask + 1);
	m->slots = s;
	m->mask = n - 1;
	return 0;
}

/* Hashes keys[0..n) into h and their lengths into kl (no lock). */
void mem_hash_keys(const char *const *keys, size_t n, uint64_t *h,
                          size_t *kl)
{
	for (size_t i = 0; i < n; i++) {
		kl[i] = strlen(keys[i]);
		h[i] = mem_hash(keys[i], kl[i]);
	}
}


/* Under mu, before looking n keys up: starts the cache misses of all of
 * them at once instead of one after another. A lookup that hits touches
 * its slot, its object's header and key, and (to move it to the LRU head)
 * both list neighbours; each stage prefetches what the next one reads.
 * Only hints: a wrong guess costs nothing but the fetch. */
void mem_prefetch(const struct mem_index *m, const uint64_t *h,
                         size_t n)
{
	const struct mem_obj *cand[MEM_CHUNK];

	for (size_t i = 0; i < n; i++)
		__builtin_prefetch(&m->slots[h[i] & m->mask]);
	for (size_t i = 0; i < n; i++) {
		/* The home slot only: probes rarely go further. The three
		 * lines of the smallest record class hold a 130-byte key. */
		const struct mem_slot *sl = &m->slots[h[i] & m->mask];
		cand[i] = sl->hash == h[i] ? sl->obj : NULL;
		if (cand[i]) {
			const char *p = (const char *)cand[i];
			__builtin_prefetch(p, 1);
			__builtin_prefetch(p + 64);
			__builtin_prefetch(p + 128);
		}
	}
	for (size_t i = 0; i < n; i++) {
		const struct mem_obj *o = cand[i];
		if (!o)
			continue;
		if (o->node.older)
			__builtin_prefetch(o->node.older, 1);
		if (o->node.newer)
			__builtin_prefetch(o->node.newer, 1);
	}
}


int mem_index_init(struct mem_index *ix)
{
	ix->slots = mem_table_alloc(MEM_TABLE_MIN);
	ix->mask = MEM_TABLE_MIN - 1;
	return ix->slots ? 0 : KVL_ENOMEM;
}

void mem_index_free(struct mem_index *ix)
{
	if (ix->slots)
		mem_table_free(ix->slots, ix->mask + 1);
	ix->slots = NULL;
}
