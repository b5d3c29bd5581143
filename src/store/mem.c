/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mem.c — the embedded store (scheme "mem"): an object cache in this
 * process's memory, bounded by a byte capacity (option capacity=) and
 * optionally by a number of objects (max_objects=N: at most N, exactly),
 * with a choice of eviction policy (policy=; evict.h describes them).
 *
 * An object is a record (struct mem_obj in mem.h: its policy node, lengths,
 * then the key) from the record slab (mem_slab.c) and a separate payload
 * allocation (64-byte aligned). The key index (mem_index.c) maps keys to
 * records. The ghost list of slru costs 40 to 80 bytes per remembered key
 * (evict.h), outside the accounted bytes.
 *
 * Accounting: an object costs its payload length + its key length +
 * MEM_OBJ_OVERHEAD (64) bytes, which stands for the record header, the table
 * slot and allocator slack. `used` is the sum over every object still in
 * memory, including one that was evicted or removed while a reader was
 * copying it, so the accounted bytes never exceed the capacity. Stats report
 * `used` as bytes. Slab chunks are returned to the system only by close.
 * Payload memory comes from hostmem.c: plain heap blocks (freed ones kept
 * for reuse up to capacity/16 or 64 MiB, not counted in `used`), or, with
 * pinned=1 in a CUDA build, a pinned arena (arena.h) that GPU copies use
 * in place, where objects put one after another lie at a constant pitch.
 * Counters: a key found by exists or by a get whose ranges fit is a hit; a
 * key not found is a miss; a get range beyond the object and a put that
 * fails (KVL_ERANGE, KVL_EFULL, KVL_ENOMEM) count as errors only.
 *
 * Invariants (all under `mu`):
 *  - An object is "linked" when it is in the table and on a policy list;
 *    only linked objects are visible. Objects are immutable once linked: only
 *    their policy node, `readers` and `linked` ever change.
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
 *
 *  - A wrapper may ask for the victims (kvl__store_on_evict: the tier:
 *    store spills them down). An evicted object is then marked
 *    MEM_EVICTED and told to the hook's `unlinked` at its unlink, and
 *    handed to the hook, key and bytes, when it is freed: after the lock
 *    is dropped (a victim that was being read, at its last unpin).
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

#include "store/backend.h"
#include "store/mem.h"
#include "gpu/device.h"

/* Freed payload bytes kept for reuse (plain memory), at most. */
#define MEM_KEEP_MAX (64ull << 20)
#define MEM_OBJ_OVERHEAD 64u              /* accounted bytes per object */
#define MEM_DEFAULT_CAPACITY (8ull << 30) /* 8 GiB */

struct mem_store {
	pthread_mutex_t mu;
	struct mem_slab slab;
	struct mem_index ix;   /* (mu) */
	size_t count;          /* linked objects (mu) */
	kvl__evict ev;         /* (mu) the eviction policy's lists */
	uint64_t max_objects;  /* 0: no limit; immutable */
	uint64_t capacity;     /* immutable */
	uint64_t used;         /* (mu) see above */
	uint64_t pinned;       /* (mu) */
	uint64_t hits, misses, puts, evictions, errors; /* (mu) */
	/* Who gets the victims of evictions before they are freed (a tier:
	 * store spilling them down); set once before the store is shared. */
	const kvl__evict_hook *hook;
};

/* Accounted bytes of an object. */
static inline uint64_t mem_cost(const struct mem_obj *o)
{
	return (uint64_t)o->len + o->key_len + MEM_OBJ_OVERHEAD;
}

static uint64_t mem_node_cost(const kvl__evict_node *n)
{
	return mem_cost((const struct mem_obj *)(const void *)n);
}


static inline size_t mem_min(size_t a, size_t b)
{
	return a < b ? a : b;
}

/* --------------------------------------------------- lists and pins (mu) */

static inline void mem_touch(struct mem_store *m, struct mem_obj *o)
{
	kvl__evict_touch(&m->ev, &o->node);
}

/* Touches the found objects of a chunk (NULL: not found) in the order the
 * policy wants: first to last, or last to first (kvl__evict_prefix). */
static void mem_touch_chunk(struct mem_store *m, struct mem_obj *const *o,
                            size_t cn)
{
	int back = kvl__evict_prefix(&m->ev);
	for (size_t k = 0; k < cn; k++) {
		struct mem_obj *x = o[back ? cn - 1 - k : k];
		if (x)
			mem_touch(m, x);
	}
}

/* Makes o (in slot `slot`) invisible; `evicted` tells the policy why. Without
 * readers it goes onto *dead to be freed after the lock is dropped; else the
 * last unpin frees it. */
static void mem_unlink(struct mem_store *m, struct mem_obj *o, size_t slot,
                       int evicted, struct mem_obj **dead)
{
	mem_slot_delete(&m->ix, slot);
	kvl__evict_unlink(&m->ev, &o->node, evicted, m->count);
	o->linked = evicted ? MEM_EVICTED : 0;
	if (evicted && m->hook) /* on its way to the hook from now */
		m->hook->unlinked(m->hook->ctx,
		                 kvl__evict_key_hash(o->key));
	m->count--;
	if (o->readers == 0) {
		m->used -= mem_cost(o);
		mem_dead_push(dead, o);
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
	if (o->linked != MEM_LINKED) {
		m->used -= mem_cost(o);
		mem_dead_push(dead, o);
	}
}

/* Frees a chain of dead objects (mem_dead_push) after the lock is
 * dropped, handing each evicted one to on_evict first. */
static void mem_free_dead(struct mem_store *m, struct mem_obj *dead)
{
	if (m->hook)
		for (struct mem_obj *o = dead; o; o = mem_dead_next(o))
			if (o->linked == MEM_EVICTED)
				m->hook->fn(m->hook->ctx,
				            kvl__evict_key_hash(o->key), o->key,
				            o->data, o->len);
	mem_free_list(&m->slab, dead);
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
		kvl__evict_node *vn = kvl__evict_victim(&m->ev);
		if (!vn) /* cannot happen: used > pinned means an unpinned one,
		          * and max >= 1 */
			return KVL_EFULL;
		struct mem_obj *v = mem_obj_of(vn);
		mem_unlink(m, v, mem_slot_of(&m->ix, v), 1, dead);
		m->evictions++;
	}
	return 0;
}

/* ---------------------------------------------------------------- exists */

static int mem_exists(kvl_store *store, void *impl, const kvl__batch *bt)
{
	struct mem_store *m = impl;
	const char *const *keys = bt->keys;
	size_t n = bt->n;
	int *results = bt->results;
	uint64_t h[MEM_CHUNK];
	size_t kl[MEM_CHUNK];
	struct mem_obj *obj[MEM_CHUNK];
	size_t chunks = (n + MEM_CHUNK - 1) / MEM_CHUNK;

	(void)store;
	/* Chunks from the last under a prefix-order policy, so that the whole
	 * batch is touched last to first. */
	for (size_t c = 0; c < chunks; c++) {
		size_t base = (kvl__evict_prefix(&m->ev) ? chunks - 1 - c : c) *
		              MEM_CHUNK;
		size_t cn = mem_min(MEM_CHUNK, n - base);
		const char *const *k = keys + base;
		mem_hash_keys(k, cn, h, kl);

		pthread_mutex_lock(&m->mu);
		mem_prefetch(&m->ix, h, cn);
		for (size_t i = 0; i < cn; i++) {
			int found;
			size_t s = mem_find(&m->ix, h[i], k[i], kl[i], &found);
			results[base + i] = found;
			obj[i] = found ? m->ix.slots[s].obj : NULL;
			if (found)
				m->hits++;
			else
				m->misses++;
		}
		mem_touch_chunk(m, obj, cn);
		pthread_mutex_unlock(&m->mu);
	}
	return 0;
}

/* ------------------------------------------------------------------- get */

static int mem_get(kvl_store *store, void *impl, const kvl__batch *bt)
{
	struct mem_store *m = impl;
	const char *const *keys = bt->keys;
	size_t n = bt->n;
	const kvl_range *ranges = bt->ranges;
	const size_t *n_ranges = bt->counts;
	uint64_t h[MEM_CHUNK];
	size_t kl[MEM_CHUNK];
	struct mem_obj *obj[MEM_CHUNK];
	const kvl_range *rg[MEM_CHUNK];
	size_t next_rg = 0; /* index in ranges of the next key's first */

	for (size_t base = 0; base < n; base += MEM_CHUNK) {
		size_t cn = mem_min(MEM_CHUNK, n - base);
		const char *const *k = keys + base;
		const size_t *nr = n_ranges + base;
		int *res = bt->results + base;
		/* The first range failure of the chunk, for the message. */
		size_t bad_key = SIZE_MAX, bad_range = 0, bad_len = 0;

		mem_hash_keys(k, cn, h, kl);
		for (size_t i = 0; i < cn; i++) {
			rg[i] = nr[i] ? ranges + next_rg : NULL;
			next_rg += nr[i];
		}

		pthread_mutex_lock(&m->mu);
		mem_prefetch(&m->ix, h, cn);
		for (size_t i = 0; i < cn; i++) {
			int found;
			size_t s = mem_find(&m->ix, h[i], k[i], kl[i], &found);
			obj[i] = NULL;
			if (!found) {
				res[i] = KVL_ENOTFOUND;
				m->misses++;
				continue;
			}
			struct mem_obj *o = m->ix.slots[s].obj;
			size_t j;
			for (j = 0; j < nr[i]; j++) {
				const kvl_range *r = &rg[i][j];
				if (r->offset > o->len ||
				    r->len > o->len - r->offset)
					break;
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
			m->hits++;
			obj[i] = o;
			res[i] = 0;
		}
		mem_touch_chunk(m, obj, cn);
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
			mem_free_dead(m, dead);
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
	struct mem_obj *obj[MEM_CHUNK];
	for (size_t base = 0; base < n; base += MEM_CHUNK) {
		size_t cn = mem_min(MEM_CHUNK, n - base);
		mem_hash_keys(keys + base, cn, h, kl);
		pthread_mutex_lock(&m->mu);
		for (size_t i = 0; i < cn; i++) {
			int found;
			size_t s = mem_find(&m->ix, h[i], keys[base + i], kl[i],
			                    &found);
			kvl__view *v = &views[base + i];
			*v = (kvl__view){0};
			results[base + i] = found;
			obj[i] = NULL;
			if (!found) {
				m->misses++;
				continue;
			}
			struct mem_obj *o = obj[i] = m->ix.slots[s].obj;
			mem_pin(m, o);
			m->hits++;
			*v = (kvl__view){.data = o->data, .len = o->len,
			                 .handle = o,
			                 .pinned = m->slab.payloads.pinned};
		}
		mem_touch_chunk(m, obj, cn);
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
	mem_free_dead(m, dead);
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
	o->node = (kvl__evict_node){.hash = hash};
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

/* A key and its hash. */
typedef struct mem_key {
	const char *key;
	size_t len;
	uint64_t hash;
} mem_key;

/* The object the same put stored before o, if a prefix-order policy
 * wants o behind it and it is still held (prev: its key, or NULL). */
static kvl__evict_node *mem_behind(struct mem_store *m, const mem_key *prev)
{
	if (!prev || !kvl__evict_prefix(&m->ev))
		return NULL;
	int found;
	size_t s = mem_find(&m->ix, prev->hash, prev->key, prev->len, &found);
	return found ? &m->ix.slots[s].obj->node : NULL;
}

/* Links a filled object unless its key appeared meanwhile, behind the
 * object of key `prev` (the put's previous stored key, or NULL) where the
 * policy keeps prefix order. Returns KVL_PUT_STORED, KVL_PUT_PRESENT (o
 * is then on *dead), or a negative code (o is then the caller's to
 * free). */
static int mem_insert(struct mem_store *m, struct mem_obj *o,
                      const mem_key *prev, struct mem_obj **dead)
{
	int found, rc;
	size_t s = mem_find(&m->ix, o->node.hash, o->key, o->key_len, &found);
	if (found) {
		mem_dead_push(dead, o);
		return KVL_PUT_PRESENT;
	}
	rc = mem_make_room(m, mem_cost(o), dead);
	if (rc < 0)
		return rc;
	if ((m->count + 1) * 4 > (m->ix.mask + 1) * 3) {
		rc = mem_grow(&m->ix);
		if (rc < 0)
			return rc;
	}
	/* Evictions and growth moved slots: find the empty one again. */
	s = mem_find(&m->ix, o->node.hash, o->key, o->key_len, &found);
	m->ix.slots[s].hash = o->node.hash;
	m->ix.slots[s].obj = o;
	o->linked = MEM_LINKED;
	kvl__evict_link(&m->ev, &o->node, mem_behind(m, prev));
	m->count++;
	m->used += mem_cost(o);
	m->puts++;
	return KVL_PUT_STORED;
}

static int mem_put(kvl_store *store, void *impl, const kvl__batch *bt)
{
	struct mem_store *m = impl;
	const char *const *keys = bt->keys;
	size_t n = bt->n;
	const kvl_iov *pieces = bt->pieces;
	const size_t *n_pieces = bt->counts;
	int *results = bt->results;
	uint64_t h[MEM_CHUNK];
	size_t kl[MEM_CHUNK];
	size_t next_pc = 0; /* index in pieces of the next key's first */
	enum { PENDING = 2 }; /* not a result value */
	mem_key prev;       /* the last key this put stored */
	int have_prev = 0;

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
			mem_find(&m->ix, h[i], k[i], kl[i], &found);
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
			int rc = mem_insert(m, o, have_prev ? &prev : NULL,
			                    &dead);
			uint64_t pinned = m->pinned;
			if (rc < 0)
				m->errors++;
			pthread_mutex_unlock(&m->mu);
			mem_free_dead(m, dead);
			res[i] = rc;
			if (rc == KVL_PUT_STORED) {
				prev = (mem_key){k[i], kl[i], h[i]};
				have_prev = 1;
			}
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
				o->node.older = NULL;
				mem_free_list(&m->slab, o);
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
	int rc = mem_insert(m, o, NULL, &dead);
	if (rc < 0)
		m->errors++;
	pthread_mutex_unlock(&m->mu);
	mem_free_dead(m, dead);
	if (rc < 0) {
		o->node.older = NULL;
		mem_free_list(&m->slab, o);
		kvl__fail(&store->err, rc, "commit: key \"%s\": %s", key,
		          kvl_strerror(rc));
	}
	return rc;
}

/* ---------------------------------------------------------------- remove */

static int mem_remove(kvl_store *store, void *impl, const kvl__batch *bt)
{
	struct mem_store *m = impl;
	const char *const *keys = bt->keys;
	size_t n = bt->n;
	int *results = bt->results;
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
			size_t s = mem_find(&m->ix, h[i], k[i], kl[i], &found);
			if (found)
				mem_unlink(m, m->ix.slots[s].obj, s, 0, &dead);
			results[base + i] = found;
		}
		pthread_mutex_unlock(&m->mu);
		mem_free_dead(m, dead);
	}
	return 0;
}

/* ------------------------------------------------- size, eviction hook */

static int mem_size(kvl_store *store, void *impl, const char *key,
                    uint64_t *len)
{
	(void)store;
	struct mem_store *m = impl;
	uint64_t h;
	size_t kl;
	int found;
	mem_hash_keys(&key, 1, &h, &kl);
	pthread_mutex_lock(&m->mu);
	size_t s = mem_find(&m->ix, h, key, kl, &found);
	if (found)
		*len = m->ix.slots[s].obj->len;
	pthread_mutex_unlock(&m->mu);
	return found;
}

static int mem_on_evict(kvl_store *store, void *impl,
                        const kvl__evict_hook *hook)
{
	(void)store;
	struct mem_store *m = impl;
	m->hook = hook;
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
		for (kvl__evict_node *n = m->ev.list[l].head, *next; n;
		     n = next) {
			struct mem_obj *o = mem_obj_of(n);
			next = n->older;
			kvl__hostmem_free(&m->slab.payloads, o->data, o->len);
			if (o->cls == MEM_CLS_MALLOC)
				free(o);
		}
	kvl__evict_free(&m->ev);
	mem_slab_destroy(&m->slab);
	mem_index_free(&m->ix);
	pthread_mutex_destroy(&m->mu);
	free(m);
}

static int mem_open(kvl_store *store, kvl__uri *uri, void **impl,
                    kvl__store_caps *caps, char *errbuf, size_t errlen)
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
	int policy = 0; /* the default */
	const char *policy_name = NULL;
	if (kvl__uri_str(uri, "policy", &policy_name) == 1 &&
	    (policy = kvl__evict_policy(policy_name)) < 0)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "mem: store option policy=%s: unknown "
		                     "eviction policy (known: adaptive, slru, lru)",
		                     policy_name);
	/* Pinned payloads let GPU copies use objects in place; the default
	 * asks for them whenever this build has CUDA. */
	int pinned = kvl_has_feature("cuda");
	int asked_pinned = kvl__uri_bool(uri, "pinned", &pinned, errbuf,
	                                 errlen);
	if (asked_pinned < 0)
		return asked_pinned;
	/* prealloc=1 pins the whole capacity at open (pinned mode only). */
	int prealloc = 0;
	rc = kvl__uri_bool(uri, "prealloc", &prealloc, errbuf, errlen);
	if (rc < 0)
		return rc;
	/* Pinning is for GPU copies in place: without a usable device the
	 * store keeps ordinary memory, and an option that asked for pinning
	 * says so (kvl_store_errmsg, the stats render) instead of passing
	 * silently. */
	int can_pin = kvl__dev_usable();
	if (asked_pinned == 1 && pinned && !can_pin)
		snprintf(store->note, sizeof store->note,
		         "mem: pinned=1 has no effect: %s; objects live in "
		         "ordinary (pageable) memory",
		         kvl_has_feature("cuda") ? "no usable CUDA device"
		                                 : "this build has no CUDA");
	else if (prealloc && !(pinned && can_pin))
		snprintf(store->note, sizeof store->note,
		         "mem: prealloc=1 has no effect: objects are not pinned "
		         "(%s)",
		         !pinned ? "pinned=0"
		         : kvl_has_feature("cuda") ? "no usable CUDA device"
		                                   : "this build has no CUDA");

	struct mem_store *m = calloc(1, sizeof *m);
	if (!m || mem_index_init(&m->ix)) {
		free(m);
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "mem: store: out of memory");
	}
	pthread_mutex_init(&m->mu, NULL);
	pthread_mutex_init(&m->slab.mu, NULL);
	m->capacity = capacity;
	m->max_objects = max_objects;
	kvl__evict_init(&m->ev, (size_t)policy, capacity, max_objects,
	                mem_node_cost);
	kvl__hostmem_init(&m->slab.payloads, pinned,
	                  capacity / 16 < MEM_KEEP_MAX ? capacity / 16
	                                               : MEM_KEEP_MAX,
	                  capacity);
	if (prealloc &&
	    kvl__hostmem_prealloc(&m->slab.payloads, (size_t)capacity)) {
		kvl__hostmem_destroy(&m->slab.payloads);
		mem_index_free(&m->ix);
		pthread_mutex_destroy(&m->mu);
		pthread_mutex_destroy(&m->slab.mu);
		free(m);
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "mem: cannot pin %llu bytes ahead "
		                     "(prealloc=1)",
		                     (unsigned long long)capacity);
	}
	(void)store;
	caps->trusted = !verify;
	caps->in_place = 1;
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

const kvl__store_ops kvl__store_mem_ops = {
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
	.on_evict = mem_on_evict,
	.size = mem_size,
};
