/*
 * store_mem.c — the embedded store (scheme "mem"): an object cache in this
 * process's memory, bounded by a byte capacity (option capacity=) and
 * optionally by a number of objects (max_objects=N: at most N, exactly),
 * with a choice of eviction policy (policy=).
 *
 * An object is a record (struct mem_obj: links, hash, lengths, then the key)
 * and a separate payload allocation (64-byte aligned). Records come from a
 * small slab allocator with three size classes in 2 MiB chunks that ask for
 * transparent huge pages, so that a lookup (slot, record, list neighbours)
 * rarely misses the TLB; a record that fits no class is malloc'ed. An
 * open-addressing hash table (linear probing, backward-shift deletion, no
 * tombstones) maps keys to records; each slot keeps the key's 64-bit hash so
 * probes compare hashes before keys. The eviction policy keeps the objects
 * on one or two doubly linked lists, most recent first:
 *
 *  - lru: exact LRU on one list.
 *  - slru (the default): segmented LRU for prefix caches. A new object goes
 *    to the head of the probation list; a hit there promotes it to the head
 *    of the protected list (a hit on protected moves it to its head). The
 *    protected list holds at most 90 % of the capacity (bytes, and objects
 *    under max_objects); beyond that its tail is demoted to the probation
 *    head. Eviction takes the probation tail, or the protected tail when
 *    probation is empty. The hashes of keys evicted from probation are
 *    remembered in a ghost list (evict.c) of at most 2 x max_objects
 *    entries (2 x the objects held when there is no max_objects); a key
 *    stored again while remembered goes straight to protected. Why: in
 *    prefix-cache traffic most pages are never read again (a request's own
 *    tail), while a page read once (a shared document, a conversation) is
 *    likely read many more times, often long after it was first stored;
 *    LRU lets the first kind flush the second. The ghost costs 40 to 80
 *    bytes per remembered key (evict.h), outside the accounted bytes.
 *
 * Accounting: an object costs its payload length + its key length +
 * MEM_OBJ_OVERHEAD (64) bytes, which stands for the record header, the table
 * slot and allocator slack. `used` is the sum over every object still in
 * memory, including one that was evicted or removed while a reader was
 * copying it, so the accounted bytes never exceed the capacity. Stats report
 * `used` as bytes. Slab chunks are returned to the system only by close.
 * Payload memory comes from hostmem.c: plain heap blocks (freed ones kept
 * for reuse up to capacity/16 or 64 MiB, not counted in `used`), or, with
 * pinned=1 in a CUDA build, pinned chunks that GPU copies use in place.
 * Counters: a key found by exists or by a get whose ranges fit is a hit; a
 * key not found is a miss; a get range beyond the object and a put that
 * fails (KVL_ERANGE, KVL_EFULL, KVL_ENOMEM) count as errors only.
 *
 * Invariants (all under `mu`):
 *  - An object is "linked" when it is in the table and on a policy list;
 *    only linked objects are visible. Objects are immutable once linked: only
 *    their list links and `seg`, `readers` and `linked` ever change.
 *  - used <= capacity; pinned <= used. `pinned` is the cost of objects with
 *    readers > 0 (linked or not).
 *  - An object is freed exactly when it is unlinked and has no readers: by
 *    the unlink (evict, remove) if it had none, else by the last unpin.
 *  - Put fills a new object before taking the lock to link it, so a half
 *    written object is never visible; if the key appeared meanwhile, the new
 *    copy is dropped and the result is KVL_PUT_PRESENT.
 *  - Get pins (readers++) under the lock, copies outside it, unpins under
 *    it: a pinned object may be unlinked (invisible at once) but its memory
 *    stays until the unpin.
 *  - A policy sees an object when it is stored (link), found by exists,
 *    read by get or peeked (touch: a put that finds the key present is no
 *    touch), and when it is unlinked (evicted or removed). With lru, LRU is
 *    exact: stored and touched objects move to the head.
 *  - To make room, the policy's victims are unlinked one by one until the
 *    new object fits in the capacity and, under max_objects, the count
 *    stays within it. A pinned victim is unlinked too but its bytes stay
 *    counted until it is freed; when the pinned bytes alone leave no room
 *    the put fails with KVL_EFULL and nothing is evicted.
 *  - slru: prot_bytes and prot_count are the cost and number of objects on
 *    the protected list; the probation list is every other linked object.
 *
 * Locking: `mu` guards the table, the policy's lists and ghost, the counters
 * and every object's mutable fields. `slab.mu` (a leaf lock, never held with
 * `mu`) guards the slab's free lists and chunks. Hashing, payload copies,
 * allocation and freeing happen outside `mu`; get and exists allocate
 * nothing and take `mu` once or twice per MEM_CHUNK keys. The table doubles
 * under `mu` (on put) when it is 3/4 full, and so do the ghost's ring and
 * table (on an eviction) when full.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "store/evict.h"
#include "store/hostmem.h"
#include "store/store.h"

/* Freed payload bytes kept for reuse (plain memory), at most. */
#define MEM_KEEP_MAX (64ull << 20)

/* AddressSanitizer cannot see inside the slab unless told. */
#if defined(__SANITIZE_ADDRESS__)
#define MEM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MEM_ASAN 1
#endif
#endif
/* Nor does LeakSanitizer look into mmap'd memory (the slab and large
 * tables), where the only pointers to payloads live: registered as root
 * regions, a store left open at exit is not reported as leaked. */
#ifdef MEM_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/lsan_interface.h>
#define MEM_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define MEM_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#define MEM_LSAN_ROOT(p, n) __lsan_register_root_region(p, n)
#define MEM_LSAN_UNROOT(p, n) __lsan_unregister_root_region(p, n)
#else
#define MEM_POISON(p, n) ((void)(p), (void)(n))
#define MEM_UNPOISON(p, n) ((void)(p), (void)(n))
#define MEM_LSAN_ROOT(p, n) ((void)(p), (void)(n))
#define MEM_LSAN_UNROOT(p, n) ((void)(p), (void)(n))
#endif

#define MEM_OBJ_OVERHEAD 64u            /* accounted bytes per object */
#define MEM_DEFAULT_CAPACITY (8ull << 30) /* 8 GiB */
#define MEM_CHUNK 64                    /* keys per lock hold */
#define MEM_TABLE_MIN 1024u             /* initial slots, a power of two */
#define MEM_ALIGN 64u                   /* payload alignment */
#define MEM_TABLE_HUGE (2u << 20)       /* tables this big get huge pages */
#define MEM_SLAB_CHUNK (2u << 20)       /* one huge page */
#define MEM_NCLASS 3
#define MEM_CLS_MALLOC 0xff             /* a record from malloc */

/* Record sizes: multiples of the cache line; the first holds a 130-byte key
 * in three lines, the last any key shorter than KVL_KEY_MAX. */
static const uint16_t mem_class_size[MEM_NCLASS] = { 192, 256, 384 };

/* A record: everything a lookup reads (header and a 130-byte key) in three
 * cache lines. */
struct mem_obj {
	struct mem_obj *newer; /* LRU neighbours (mu); NULL at the ends */
	struct mem_obj *older;
	uint64_t hash;          /* of the key; immutable */
	size_t len;             /* payload bytes; immutable */
	unsigned char *data;    /* payload (NULL when len is 0); immutable */
	uint32_t readers;       /* gets copying from it now (mu) */
	uint16_t key_len;       /* immutable */
	uint8_t linked;         /* in the table and the list (mu) */
	uint8_t cls;            /* size class, or MEM_CLS_MALLOC; immutable */
	uint8_t seg;            /* the policy's list it is on (mu) */
	char key[];             /* key_len bytes and a NUL */
};

/* A free record, on its class's free list. */
struct mem_free_rec {
	struct mem_free_rec *next;
};

/* A slab chunk; records follow the first cache line. */
struct mem_chunk {
	struct mem_chunk *next;
};

struct mem_slab {
	pthread_mutex_t mu;
	struct mem_free_rec *free[MEM_NCLASS]; /* (mu) */
	char *bump;                /* next unused byte of the newest chunk (mu) */
	size_t left;               /* bytes after bump (mu) */
	struct mem_chunk *chunks;  /* every chunk, newest first (mu) */
	kvl__hostmem payloads;     /* payload memory (its own lock) */
};

/* Accounted bytes of an object. */
static inline uint64_t mem_cost(const struct mem_obj *o)
{
	return (uint64_t)o->len + o->key_len + MEM_OBJ_OVERHEAD;
}

struct mem_slot {
	uint64_t hash;
	struct mem_obj *obj; /* NULL: empty */
};

struct mem_store {
	pthread_mutex_t mu;
	struct mem_slab slab;
	struct mem_slot *slots; /* mask + 1 slots (mu) */
	size_t mask;
	size_t count;          /* linked objects (mu) */
	struct mem_list {
		struct mem_obj *head; /* most recent (mu) */
		struct mem_obj *tail; /* least recent (mu) */
	} list[2];             /* the policy's lists, by seg */
	const struct mem_policy *policy; /* immutable */
	uint64_t max_objects;  /* 0: no limit; immutable */
	uint64_t prot_bytes, prot_count; /* (mu) slru: on the protected list */
	kvl__ghost ghost;      /* (mu) slru: keys evicted from probation */
	uint64_t capacity;     /* immutable */
	uint64_t used;         /* (mu) see above */
	uint64_t pinned;       /* (mu) */
	uint64_t hits, misses, puts, evictions, errors; /* (mu) */
};

/* ------------------------------------------------------------------ hash */

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

/* ----------------------------------------------------- table and LRU (mu) */

/* The slot holding `key`, or the empty slot that ends its probe; *found
 * tells which. */
static size_t mem_find(const struct mem_store *m, uint64_t h, const char *key,
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

static size_t mem_slot_of(const struct mem_store *m, const struct mem_obj *o)
{
	size_t i = o->hash & m->mask;
	while (m->slots[i].obj != o)
		i = (i + 1) & m->mask;
	return i;
}

/* Empties slot i and shifts later entries of its probe run back. */
static void mem_slot_delete(struct mem_store *m, size_t i)
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
static int mem_grow(struct mem_store *m)
{
	size_t n = (m->mask + 1) * 2;
	struct mem_slot *s = mem_table_alloc(n);
	if (!s)
		return KVL_ENOMEM;
	for (size_t i = 0; i <= m->mask; i++) {
		struct mem_obj *o = m->slots[i].obj;
		if (!o)
			continue;
		size_t j = o->hash & (n - 1);
		while (s[j].obj)
			j = (j + 1) & (n - 1);
		s[j] = m->slots[i];
	}
	mem_table_free(m->slots, m->mask + 1);
	m->slots = s;
	m->mask = n - 1;
	return 0;
}

/* ------------------------------------------------- eviction policies (mu) */

/* An eviction policy: where stored and touched objects go on the lists,
 * and which object goes next. Every hook runs under mu. */
struct mem_policy {
	const char *name;
	void (*link)(struct mem_store *m, struct mem_obj *o);  /* stored */
	void (*touch)(struct mem_store *m, struct mem_obj *o); /* a hit */
	/* o leaves its list; `evicted`: to make room (else removed). */
	void (*unlink)(struct mem_store *m, struct mem_obj *o, int evicted);
	struct mem_obj *(*victim)(const struct mem_store *m); /* next to go */
};

static void mem_list_remove(struct mem_store *m, struct mem_obj *o)
{
	struct mem_list *l = &m->list[o->seg];
	if (o->newer)
		o->newer->older = o->older;
	else
		l->head = o->older;
	if (o->older)
		o->older->newer = o->newer;
	else
		l->tail = o->newer;
}

static void mem_list_push(struct mem_store *m, struct mem_obj *o, uint8_t seg)
{
	struct mem_list *l = &m->list[seg];
	o->seg = seg;
	o->newer = NULL;
	o->older = l->head;
	if (l->head)
		l->head->newer = o;
	else
		l->tail = o;
	l->head = o;
}

/* lru: one list. */
static void lru_link(struct mem_store *m, struct mem_obj *o)
{
	mem_list_push(m, o, 0);
}

static void lru_touch(struct mem_store *m, struct mem_obj *o)
{
	if (m->list[0].head != o) {
		mem_list_remove(m, o);
		mem_list_push(m, o, 0);
	}
}

static void lru_unlink(struct mem_store *m, struct mem_obj *o, int evicted)
{
	(void)evicted;
	mem_list_remove(m, o);
}

static struct mem_obj *lru_victim(const struct mem_store *m)
{
	return m->list[0].tail;
}

/* slru: list 0 is probation, list 1 protected. */
enum { SLRU_PROBATION = 0, SLRU_PROTECTED = 1 };

/* The limit x - x/10 (90 %) of the protected list, for bytes and count. */
static inline uint64_t slru_share(uint64_t x)
{
	return x - x / 10;
}

/* Puts o at the protected head, then demotes protected tails to the
 * probation head while the protected list is over its share. */
static void slru_protect(struct mem_store *m, struct mem_obj *o)
{
	mem_list_push(m, o, SLRU_PROTECTED);
	m->prot_bytes += mem_cost(o);
	m->prot_count++;
	uint64_t max_bytes = slru_share(m->capacity);
	uint64_t max_count = m->max_objects ? slru_share(m->max_objects)
	                                    : UINT64_MAX;
	while (m->prot_bytes > max_bytes || m->prot_count > max_count) {
		struct mem_obj *d = m->list[SLRU_PROTECTED].tail;
		mem_list_remove(m, d);
		m->prot_bytes -= mem_cost(d);
		m->prot_count--;
		mem_list_push(m, d, SLRU_PROBATION);
	}
}

static void slru_link(struct mem_store *m, struct mem_obj *o)
{
	if (kvl__ghost_take(&m->ghost, o->hash))
		slru_protect(m, o);
	else
		mem_list_push(m, o, SLRU_PROBATION);
}

static void slru_touch(struct mem_store *m, struct mem_obj *o)
{
	if (o->seg == SLRU_PROTECTED) {
		if (m->list[SLRU_PROTECTED].head != o) {
			mem_list_remove(m, o);
			mem_list_push(m, o, SLRU_PROTECTED);
		}
		return;
	}
	mem_list_remove(m, o);
	slru_protect(m, o);
}

static void slru_unlink(struct mem_store *m, struct mem_obj *o, int evicted)
{
	mem_list_remove(m, o);
	if (o->seg == SLRU_PROTECTED) {
		m->prot_bytes -= mem_cost(o);
		m->prot_count--;
	} else if (evicted) {
		/* Out of memory here only makes the ghost forget this key. */
		uint64_t base = m->max_objects ? m->max_objects : m->count;
		size_t limit = base > SIZE_MAX / 2 ? SIZE_MAX : (size_t)base * 2;
		(void)kvl__ghost_add(&m->ghost, o->hash, limit);
	}
}

static struct mem_obj *slru_victim(const struct mem_store *m)
{
	return m->list[SLRU_PROBATION].tail ? m->list[SLRU_PROBATION].tail
	                                    : m->list[SLRU_PROTECTED].tail;
}

static const struct mem_policy mem_policies[] = {
	{"slru", slru_link, slru_touch, slru_unlink, slru_victim},
	{"lru", lru_link, lru_touch, lru_unlink, lru_victim},
};
#define MEM_POLICY_DEFAULT (&mem_policies[0])

const char *kvl__mem_policy_name(size_t i)
{
	return i < sizeof mem_policies / sizeof mem_policies[0]
	               ? mem_policies[i].name
	               : NULL;
}

static inline void mem_touch(struct mem_store *m, struct mem_obj *o)
{
	m->policy->touch(m, o);
}

/* Makes o (in slot `slot`) invisible; `evicted` tells the policy why. Without
 * readers it goes onto *dead to be freed after the lock is dropped; else the
 * last unpin frees it. */
static void mem_unlink(struct mem_store *m, struct mem_obj *o, size_t slot,
                       int evicted, struct mem_obj **dead)
{
	mem_slot_delete(m, slot);
	m->policy->unlink(m, o, evicted);
	o->linked = 0;
	m->count--;
	if (o->readers == 0) {
		m->used -= mem_cost(o);
		o->older = *dead;
		*dead = o;
	}
}

static inline void mem_pin(struct mem_store *m, struct mem_obj *o)
{
	if (o->readers++ == 0)
		m->pinned += mem_cost(o);
}

static inline void mem_unpin(struct mem_store *m, struct mem_obj *o,
                             struct mem_obj **dead)
{
	if (--o->readers)
		return;
	m->pinned -= mem_cost(o);
	if (!o->linked) {
		m->used -= mem_cost(o);
		o->older = *dead;
		*dead = o;
	}
}

/* Evicts the policy's victims until `need` more bytes and, under
 * max_objects, one more object fit. KVL_EFULL (nothing evicted) when pinned
 * objects alone leave too little room. */
static int mem_make_room(struct mem_store *m, uint64_t need,
                         struct mem_obj **dead)
{
	uint64_t max = m->max_objects ? m->max_objects : UINT64_MAX;
	if (need <= m->capacity - m->used && m->count < max)
		return 0;
	if (need > m->capacity - m->pinned)
		return KVL_EFULL;
	while (need > m->capacity - m->used || m->count >= max) {
		struct mem_obj *v = m->policy->victim(m);
		if (!v) /* cannot happen: used > pinned means an unpinned one,
		         * and max >= 1 */
			return KVL_EFULL;
		mem_unlink(m, v, mem_slot_of(m, v), 1, dead);
		m->evictions++;
	}
	return 0;
}

/* ------------------------------------------------------------------ slab */

/* Adds a 2 MiB chunk, aligned so that it can be one huge page. Under
 * slab.mu. */
static int mem_chunk_new(struct mem_slab *sl)
{
	size_t n = MEM_SLAB_CHUNK;
	char *p = mmap(NULL, 2 * n, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return KVL_ENOMEM;
	uintptr_t a = ((uintptr_t)p + n - 1) & ~(uintptr_t)(n - 1);
	char *c = (char *)a;
	if (c > p)
		munmap(p, (size_t)(c - p));
	if (c + n < p + 2 * n)
		munmap(c + n, (size_t)(p + 2 * n - (c + n)));
#ifdef MADV_HUGEPAGE
	madvise(c, n, MADV_HUGEPAGE);
#endif
	MEM_LSAN_ROOT(c, n);
	struct mem_chunk *ch = (struct mem_chunk *)(void *)c;
	ch->next = sl->chunks;
	sl->chunks = ch;
	sl->bump = c + 64;
	sl->left = n - 64;
	MEM_POISON(sl->bump, sl->left);
	return 0;
}

/* A record of at least `need` bytes (its cls set), or NULL. */
static struct mem_obj *mem_rec_alloc(struct mem_slab *sl, size_t need)
{
	unsigned c = 0;
	while (c < MEM_NCLASS && mem_class_size[c] < need)
		c++;
	if (c == MEM_NCLASS) {
		struct mem_obj *o = malloc(need);
		if (o)
			o->cls = MEM_CLS_MALLOC;
		return o;
	}
	size_t size = mem_class_size[c];
	void *r = NULL;
	pthread_mutex_lock(&sl->mu);
	if (sl->free[c]) {
		struct mem_free_rec *f = sl->free[c];
		MEM_UNPOISON(f, size);
		sl->free[c] = f->next;
		r = f;
	} else if (sl->left >= size || mem_chunk_new(sl) == 0) {
		r = sl->bump;
		MEM_UNPOISON(r, size);
		sl->bump += size;
		sl->left -= size;
	}
	pthread_mutex_unlock(&sl->mu);
	struct mem_obj *o = r;
	if (o)
		o->cls = (uint8_t)c;
	return o;
}

/* Frees a list of objects linked through `older` (payloads, then records
 * under one hold of slab.mu). */
static void mem_free_list(struct mem_store *m, struct mem_obj *list)
{
	struct mem_slab *sl = &m->slab;
	if (!list)
		return;
	for (struct mem_obj *o = list; o; o = o->older)
		kvl__hostmem_free(&sl->payloads, o->data, o->len);
	pthread_mutex_lock(&sl->mu);
	while (list) {
		struct mem_obj *o = list;
		list = o->older;
		if (o->cls == MEM_CLS_MALLOC) {
			free(o);
			continue;
		}
		struct mem_free_rec *f = (struct mem_free_rec *)(void *)o;
		f->next = sl->free[o->cls];
		sl->free[o->cls] = f;
		MEM_POISON(f, mem_class_size[o->cls]);
	}
	pthread_mutex_unlock(&sl->mu);
}

static void mem_slab_destroy(struct mem_slab *sl)
{
	kvl__hostmem_destroy(&sl->payloads);
	struct mem_chunk *ch = sl->chunks;
	while (ch) {
		struct mem_chunk *next = ch->next;
		MEM_UNPOISON(ch, MEM_SLAB_CHUNK);
		MEM_LSAN_UNROOT(ch, MEM_SLAB_CHUNK);
		munmap(ch, MEM_SLAB_CHUNK);
		ch = next;
	}
	pthread_mutex_destroy(&sl->mu);
}

/* Hashes keys[0..n) into h and their lengths into kl (no lock). */
static void mem_hash_keys(const char *const *keys, size_t n, uint64_t *h,
                          size_t *kl)
{
	for (size_t i = 0; i < n; i++) {
		kl[i] = strlen(keys[i]);
		h[i] = mem_hash(keys[i], kl[i]);
	}
}

static inline size_t mem_min(size_t a, size_t b)
{
	return a < b ? a : b;
}

/* Under mu, before looking n keys up: starts the cache misses of all of
 * them at once instead of one after another. A lookup that hits touches
 * its slot, its object's header and key, and (to move it to the LRU head)
 * both list neighbours; each stage prefetches what the next one reads.
 * Only hints: a wrong guess costs nothing but the fetch. */
static void mem_prefetch(const struct mem_store *m, const uint64_t *h,
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
		if (o->older)
			__builtin_prefetch(o->older, 1);
		if (o->newer)
			__builtin_prefetch(o->newer, 1);
	}
}

/* ---------------------------------------------------------------- exists */

static int mem_exists(kvl_store *store, void *impl, const char *const *keys,
                      size_t n, int *results)
{
	struct mem_store *m = impl;
	uint64_t h[MEM_CHUNK];
	size_t kl[MEM_CHUNK];

	(void)store;
	for (size_t base = 0; base < n; base += MEM_CHUNK) {
		size_t cn = mem_min(MEM_CHUNK, n - base);
		const char *const *k = keys + base;
		mem_hash_keys(k, cn, h, kl);

		pthread_mutex_lock(&m->mu);
		mem_prefetch(m, h, cn);
		for (size_t i = 0; i < cn; i++) {
			int found;
			size_t s = mem_find(m, h[i], k[i], kl[i], &found);
			results[base + i] = found;
			if (found) {
				mem_touch(m, m->slots[s].obj);
				m->hits++;
			} else {
				m->misses++;
			}
		}
		pthread_mutex_unlock(&m->mu);
	}
	return 0;
}

/* ------------------------------------------------------------------- get */

static int mem_get(kvl_store *store, void *impl, const char *const *keys,
                   size_t n, const kvl_range *ranges, const size_t *n_ranges,
                   int64_t *results)
{
	struct mem_store *m = impl;
	uint64_t h[MEM_CHUNK];
	size_t kl[MEM_CHUNK];
	struct mem_obj *obj[MEM_CHUNK];
	const kvl_range *rg[MEM_CHUNK];
	size_t next_rg = 0; /* index in ranges of the next key's first */

	for (size_t base = 0; base < n; base += MEM_CHUNK) {
		size_t cn = mem_min(MEM_CHUNK, n - base);
		const char *const *k = keys + base;
		const size_t *nr = n_ranges + base;
		int64_t *res = results + base;
		/* The first range failure of the chunk, for the message. */
		size_t bad_key = SIZE_MAX, bad_range = 0, bad_len = 0;

		mem_hash_keys(k, cn, h, kl);
		for (size_t i = 0; i < cn; i++) {
			rg[i] = nr[i] ? ranges + next_rg : NULL;
			next_rg += nr[i];
		}

		pthread_mutex_lock(&m->mu);
		mem_prefetch(m, h, cn);
		for (size_t i = 0; i < cn; i++) {
			int found;
			size_t s = mem_find(m, h[i], k[i], kl[i], &found);
			obj[i] = NULL;
			if (!found) {
				res[i] = KVL_ENOTFOUND;
				m->misses++;
				continue;
			}
			struct mem_obj *o = m->slots[s].obj;
			uint64_t total = 0;
			size_t j;
			for (j = 0; j < nr[i]; j++) {
				const kvl_range *r = &rg[i][j];
				if (r->offset > o->len ||
				    r->len > o->len - r->offset ||
				    r->len > (uint64_t)INT64_MAX - total)
					break;
				total += r->len;
			}
			if (j < nr[i]) {
				res[i] = KVL_ERANGE;
				m->errors++;
				if (bad_key == SIZE_MAX) {
					bad_key = i;
					bad_range = j;
					bad_len = o->len;
				}
				continue;
			}
			mem_pin(m, o);
			mem_touch(m, o);
			m->hits++;
			obj[i] = o;
			res[i] = (int64_t)total;
		}
		pthread_mutex_unlock(&m->mu);

		size_t pinned = 0;
		for (size_t i = 0; i < cn; i++) {
			const struct mem_obj *o = obj[i];
			if (!o)
				continue;
			pinned++;
			for (size_t j = 0; j < nr[i]; j++)
				if (rg[i][j].len)
					memcpy(rg[i][j].addr,
					       o->data + rg[i][j].offset,
					       rg[i][j].len);
		}

		if (pinned) {
			struct mem_obj *dead = NULL;
			pthread_mutex_lock(&m->mu);
			for (size_t i = 0; i < cn; i++)
				if (obj[i])
					mem_unpin(m, obj[i], &dead);
			pthread_mutex_unlock(&m->mu);
			mem_free_list(m, dead);
		}

		if (bad_key != SIZE_MAX) {
			const kvl_range *r = &rg[bad_key][bad_range];
			kvl__fail(&store->err, KVL_ERANGE,
			          "kvl_store_get: key \"%s\": range %zu "
			          "(offset %llu, len %zu) is beyond the object's "
			          "%zu bytes",
			          k[bad_key], bad_range,
			          (unsigned long long)r->offset, r->len, bad_len);
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ peek */

/* Pins present objects and hands out their bytes; mem_release unpins. */
static int mem_peek(kvl_store *store, void *impl, const char *const *keys,
                    size_t n, kvl__view *views, int *results)
{
	(void)store;
	struct mem_store *m = impl;
	uint64_t h[MEM_CHUNK];
	size_t kl[MEM_CHUNK];
	for (size_t base = 0; base < n; base += MEM_CHUNK) {
		size_t cn = mem_min(MEM_CHUNK, n - base);
		mem_hash_keys(keys + base, cn, h, kl);
		pthread_mutex_lock(&m->mu);
		for (size_t i = 0; i < cn; i++) {
			int found;
			size_t s = mem_find(m, h[i], keys[base + i], kl[i],
			                    &found);
			kvl__view *v = &views[base + i];
			*v = (kvl__view){0};
			results[base + i] = found;
			if (!found) {
				m->misses++;
				continue;
			}
			struct mem_obj *o = m->slots[s].obj;
			mem_pin(m, o);
			mem_touch(m, o);
			m->hits++;
			*v = (kvl__view){.data = o->data, .len = o->len,
			                 .handle = o,
			                 .pinned = m->slab.payloads.pinned};
		}
		pthread_mutex_unlock(&m->mu);
	}
	return 0;
}

static void mem_release(kvl_store *store, void *impl, kvl__view *views,
                        size_t n)
{
	(void)store;
	struct mem_store *m = impl;
	struct mem_obj *dead = NULL;
	pthread_mutex_lock(&m->mu);
	for (size_t i = 0; i < n; i++)
		if (views[i].handle) {
			mem_unpin(m, views[i].handle, &dead);
			views[i].handle = NULL;
		}
	pthread_mutex_unlock(&m->mu);
	mem_free_list(m, dead);
}

/* ------------------------------------------------------------------- put */

/* A new, filled, unlinked object for key/pieces, or NULL (out of memory). */
/* A record for key around payload `data` (len bytes), or NULL. */
static struct mem_obj *mem_obj_wrap(struct mem_store *m, const char *key,
                                    size_t key_len, uint64_t hash, void *data,
                                    size_t len)
{
	struct mem_obj *o =
		mem_rec_alloc(&m->slab, sizeof(struct mem_obj) + key_len + 1);
	if (!o)
		return NULL;
	o->newer = o->older = NULL;
	o->hash = hash;
	o->len = len;
	o->data = data;
	o->readers = 0;
	o->key_len = (uint16_t)key_len;
	o->linked = 0;
	memcpy(o->key, key, key_len + 1);
	return o;
}

static struct mem_obj *mem_obj_new(struct mem_store *m, const char *key,
                                   size_t key_len, uint64_t hash,
                                   const kvl_iov *pc, size_t n_pc, size_t len)
{
	void *data = NULL;
	if (len && !(data = kvl__hostmem_alloc(&m->slab.payloads, len)))
		return NULL;
	struct mem_obj *o = mem_obj_wrap(m, key, key_len, hash, data, len);
	if (!o) {
		kvl__hostmem_free(&m->slab.payloads, data, len);
		return NULL;
	}
	size_t at = 0;
	for (size_t j = 0; j < n_pc; j++) {
		if (pc[j].len)
			memcpy(o->data + at, pc[j].addr, pc[j].len);
		at += pc[j].len;
	}
	return o;
}

/* Links a filled object unless its key appeared meanwhile. Returns
 * KVL_PUT_STORED, KVL_PUT_PRESENT (o is then on *dead), or a negative code
 * (o is then the caller's to free). */
static int mem_insert(struct mem_store *m, struct mem_obj *o,
                      struct mem_obj **dead)
{
	int found, rc;
	size_t s = mem_find(m, o->hash, o->key, o->key_len, &found);
	if (found) {
		o->older = *dead;
		*dead = o;
		return KVL_PUT_PRESENT;
	}
	rc = mem_make_room(m, mem_cost(o), dead);
	if (rc < 0)
		return rc;
	if ((m->count + 1) * 4 > (m->mask + 1) * 3) {
		rc = mem_grow(m);
		if (rc < 0)
			return rc;
	}
	/* Evictions and growth moved slots: find the empty one again. */
	s = mem_find(m, o->hash, o->key, o->key_len, &found);
	m->slots[s].hash = o->hash;
	m->slots[s].obj = o;
	o->linked = 1;
	m->policy->link(m, o);
	m->count++;
	m->used += mem_cost(o);
	m->puts++;
	return KVL_PUT_STORED;
}

static int mem_put(kvl_store *store, void *impl, const char *const *keys,
                   size_t n, const kvl_iov *pieces, const size_t *n_pieces,
                   int *results)
{
	struct mem_store *m = impl;
	uint64_t h[MEM_CHUNK];
	size_t kl[MEM_CHUNK];
	size_t next_pc = 0; /* index in pieces of the next key's first */
	enum { PENDING = 2 }; /* not a result value */

	for (size_t base = 0; base < n; base += MEM_CHUNK) {
		size_t cn = mem_min(MEM_CHUNK, n - base);
		const char *const *k = keys + base;
		int *res = results + base;
		uint64_t errors = 0;

		mem_hash_keys(k, cn, h, kl);

		/* Skip keys already present before copying anything. */
		pthread_mutex_lock(&m->mu);
		for (size_t i = 0; i < cn; i++) {
			int found;
			mem_find(m, h[i], k[i], kl[i], &found);
			res[i] = found ? KVL_PUT_PRESENT : PENDING;
		}
		pthread_mutex_unlock(&m->mu);

		for (size_t i = 0; i < cn; i++) {
			size_t np = n_pieces[base + i];
			const kvl_iov *p = np ? pieces + next_pc : NULL;
			next_pc += np;
			if (res[i] != PENDING)
				continue;

			uint64_t len = 0;
			int too_big = 0;
			for (size_t j = 0; j < np; j++) {
				if (p[j].len > SIZE_MAX - len)
					too_big = 1;
				else
					len += p[j].len;
			}
			if (too_big || len > m->capacity ||
			    kl[i] + MEM_OBJ_OVERHEAD > m->capacity - len) {
				res[i] = kvl__fail(&store->err, KVL_ERANGE,
				                   "kvl_store_put: key \"%s\": "
				                   "object of %s%llu bytes does "
				                   "not fit in the capacity of "
				                   "%llu bytes",
				                   k[i], too_big ? "over " : "",
				                   (unsigned long long)len,
				                   (unsigned long long)m->capacity);
				errors++;
				continue;
			}
			struct mem_obj *o = mem_obj_new(m, k[i], kl[i], h[i], p,
			                                np, (size_t)len);
			if (!o) {
				res[i] = kvl__fail(&store->err, KVL_ENOMEM,
				                   "kvl_store_put: key \"%s\": out "
				                   "of memory for %llu bytes",
				                   k[i], (unsigned long long)len);
				errors++;
				continue;
			}

			struct mem_obj *dead = NULL;
			pthread_mutex_lock(&m->mu);
			int rc = mem_insert(m, o, &dead);
			uint64_t pinned = m->pinned;
			if (rc < 0)
				m->errors++;
			pthread_mutex_unlock(&m->mu);
			mem_free_list(m, dead);
			res[i] = rc;
			if (rc == KVL_EFULL)
				kvl__fail(&store->err, rc,
				          "kvl_store_put: key \"%s\": no room for "
				          "%llu bytes: %llu of the %llu bytes of "
				          "capacity are being read",
				          k[i], (unsigned long long)mem_cost(o),
				          (unsigned long long)pinned,
				          (unsigned long long)m->capacity);
			else if (rc < 0)
				kvl__fail(&store->err, rc,
				          "kvl_store_put: key \"%s\": out of "
				          "memory growing the index",
				          k[i]);
			if (rc < 0) {
				o->older = NULL;
				mem_free_list(m, o);
			}
		}
		if (errors) {
			pthread_mutex_lock(&m->mu);
			m->errors += errors;
			pthread_mutex_unlock(&m->mu);
		}
	}
	return 0;
}

/* ------------------------------------------------- put in place (reserve) */

/* Memory for a new object of len bytes that the caller fills in place. */
static int mem_reserve(kvl_store *store, void *impl, uint64_t len,
                       kvl__view *out)
{
	struct mem_store *m = impl;
	if (len == 0 || len > m->capacity)
		return kvl__fail(&store->err, KVL_ERANGE,
		                 "reserve: %llu bytes do not fit the capacity of "
		                 "%llu bytes",
		                 (unsigned long long)len,
		                 (unsigned long long)m->capacity);
	void *data = kvl__hostmem_alloc(&m->slab.payloads, (size_t)len);
	if (!data)
		return kvl__fail(&store->err, KVL_ENOMEM,
		                 "reserve: out of memory for %llu bytes",
		                 (unsigned long long)len);
	*out = (kvl__view){.data = data, .len = len,
	                   .pinned = m->slab.payloads.pinned};
	return 0;
}

static void mem_abort(kvl_store *store, void *impl, kvl__view *v)
{
	(void)store;
	struct mem_store *m = impl;
	kvl__hostmem_free(&m->slab.payloads, (void *)v->data, v->len);
	v->data = NULL;
}

/* Makes a reserved object visible under key: KVL_PUT_STORED, PRESENT (the
 * reservation is dropped) or <0 (dropped too). */
static int mem_commit(kvl_store *store, void *impl, const char *key,
                      kvl__view *v)
{
	struct mem_store *m = impl;
	uint64_t h;
	size_t kl;
	mem_hash_keys(&key, 1, &h, &kl);
	struct mem_obj *o = mem_obj_wrap(m, key, kl, h, (void *)v->data,
	                                 (size_t)v->len);
	if (!o) {
		mem_abort(store, impl, v);
		return kvl__fail(&store->err, KVL_ENOMEM,
		                 "commit: out of memory");
	}
	v->data = NULL;
	struct mem_obj *dead = NULL;
	pthread_mutex_lock(&m->mu);
	int rc = mem_insert(m, o, &dead);
	if (rc < 0)
		m->errors++;
	pthread_mutex_unlock(&m->mu);
	mem_free_list(m, dead);
	if (rc < 0) {
		o->older = NULL;
		mem_free_list(m, o);
		kvl__fail(&store->err, rc, "commit: key \"%s\": %s", key,
		          kvl_strerror(rc));
	}
	return rc;
}

/* ---------------------------------------------------------------- remove */

static int mem_remove(kvl_store *store, void *impl, const char *const *keys,
                      size_t n, int *results)
{
	struct mem_store *m = impl;
	uint64_t h[MEM_CHUNK];
	size_t kl[MEM_CHUNK];

	(void)store;
	for (size_t base = 0; base < n; base += MEM_CHUNK) {
		size_t cn = mem_min(MEM_CHUNK, n - base);
		const char *const *k = keys + base;
		struct mem_obj *dead = NULL;

		mem_hash_keys(k, cn, h, kl);
		pthread_mutex_lock(&m->mu);
		for (size_t i = 0; i < cn; i++) {
			int found;
			size_t s = mem_find(m, h[i], k[i], kl[i], &found);
			if (found)
				mem_unlink(m, m->slots[s].obj, s, 0, &dead);
			results[base + i] = found;
		}
		pthread_mutex_unlock(&m->mu);
		mem_free_list(m, dead);
	}
	return 0;
}

/* ------------------------------------------------------ open, close, stats */

static void mem_close(void *impl)
{
	struct mem_store *m = impl;
	if (!m)
		return;
	/* No call is in progress, so nothing is pinned: every object is
	 * linked and on a list. */
	for (int l = 0; l < 2; l++)
		for (struct mem_obj *o = m->list[l].head, *next; o; o = next) {
			next = o->older;
			kvl__hostmem_free(&m->slab.payloads, o->data, o->len);
			if (o->cls == MEM_CLS_MALLOC)
				free(o);
		}
	kvl__ghost_free(&m->ghost);
	mem_slab_destroy(&m->slab);
	mem_table_free(m->slots, m->mask + 1);
	pthread_mutex_destroy(&m->mu);
	free(m);
}

static int mem_open(kvl_store *store, kvl__uri *uri, void **impl, char *errbuf,
                    size_t errlen)
{
	uint64_t capacity = MEM_DEFAULT_CAPACITY;
	int verify = 0, rc;

	if (uri->authority[0] || uri->path[0])
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "mem: store takes no host or path (got "
		                     "\"%s%s\"); options go after '?', e.g. "
		                     "mem:?capacity=8GiB",
		                     uri->authority, uri->path);
	rc = kvl__uri_size(uri, "capacity", &capacity, errbuf, errlen);
	if (rc < 0)
		return rc;
	if (capacity == 0)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "mem: store option capacity=0: the capacity "
		                     "must be at least 1 byte");
	rc = kvl__uri_bool(uri, "verify", &verify, errbuf, errlen);
	if (rc < 0)
		return rc;
	uint64_t max_objects = 0;
	rc = kvl__uri_u64(uri, "max_objects", &max_objects, errbuf, errlen);
	if (rc < 0)
		return rc;
	if (rc == 1 && max_objects == 0)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "mem: store option max_objects=0: leave it "
		                     "out for no limit, or allow at least 1 "
		                     "object");
	const struct mem_policy *policy = MEM_POLICY_DEFAULT;
	const char *policy_name = NULL;
	if (kvl__uri_str(uri, "policy", &policy_name) == 1) {
		size_t np = sizeof mem_policies / sizeof mem_policies[0], i = 0;
		while (i < np && strcmp(policy_name, mem_policies[i].name))
			i++;
		if (i == np)
			return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
			                     "mem: store option policy=%s: "
			                     "unknown eviction policy (known: "
			                     "slru, lru)",
			                     policy_name);
		policy = &mem_policies[i];
	}
	/* Pinned payloads let GPU copies use objects in place; the default
	 * asks for them whenever this build has CUDA. */
	int pinned = kvl_has_feature("cuda");
	rc = kvl__uri_bool(uri, "pinned", &pinned, errbuf, errlen);
	if (rc < 0)
		return rc;
	/* prealloc=1 pins the whole capacity at open (pinned mode only). */
	int prealloc = 0;
	rc = kvl__uri_bool(uri, "prealloc", &prealloc, errbuf, errlen);
	if (rc < 0)
		return rc;

	struct mem_store *m = calloc(1, sizeof *m);
	if (m)
		m->slots = mem_table_alloc(MEM_TABLE_MIN);
	if (!m || !m->slots) {
		free(m);
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "mem: store: out of memory");
	}
	pthread_mutex_init(&m->mu, NULL);
	pthread_mutex_init(&m->slab.mu, NULL);
	m->mask = MEM_TABLE_MIN - 1;
	m->capacity = capacity;
	m->max_objects = max_objects;
	m->policy = policy;
	kvl__hostmem_init(&m->slab.payloads, pinned,
	                  capacity / 16 < MEM_KEEP_MAX ? capacity / 16
	                                               : MEM_KEEP_MAX);
	if (prealloc &&
	    kvl__hostmem_prealloc(&m->slab.payloads, (size_t)capacity)) {
		kvl__hostmem_destroy(&m->slab.payloads);
		mem_table_free(m->slots, m->mask + 1);
		pthread_mutex_destroy(&m->mu);
		pthread_mutex_destroy(&m->slab.mu);
		free(m);
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "mem: cannot pin %llu bytes ahead "
		                     "(prealloc=1)",
		                     (unsigned long long)capacity);
	}
	store->trusted = !verify;
	*impl = m;
	return 0;
}

static void mem_stats(void *impl, kvl_store_stats *out)
{
	struct mem_store *m = impl;
	pthread_mutex_lock(&m->mu);
	out->objects = m->count;
	out->bytes = m->used;
	out->capacity = m->capacity;
	out->hits = m->hits;
	out->misses = m->misses;
	out->puts = m->puts;
	out->evictions = m->evictions;
	out->errors = m->errors;
	pthread_mutex_unlock(&m->mu);
}

const kvl_store_ops kvl__store_mem_ops = {
	.scheme = "mem",
	.open = mem_open,
	.close = mem_close,
	.exists = mem_exists,
	.get = mem_get,
	.put = mem_put,
	.remove = mem_remove,
	.reg = NULL,
	.stats = mem_stats,
	.peek = mem_peek,
	.release = mem_release,
	.reserve = mem_reserve,
	.commit = mem_commit,
	.abort = mem_abort,
};
