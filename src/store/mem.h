/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mem.h — the parts of the embedded store (internal to src/store/mem*.c):
 * its object records, the key index (mem_index.c) and the record slab
 * (mem_slab.c). mem.c holds the store itself and describes its design.
 */
#ifndef KVL_MEM_H
#define KVL_MEM_H

#include <string.h>

#include "kvlink.h"
#include "store/evict.h"
#include "store/hostmem.h"

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

#define MEM_CHUNK 64              /* keys per lock hold */
#define MEM_TABLE_MIN 1024u       /* initial slots, a power of two */
#define MEM_CLS_MALLOC 0xff       /* a record from malloc */
#define MEM_LINKED 1              /* values of mem_obj.linked */
#define MEM_EVICTED 2

/* A record: everything a lookup reads (header and a 130-byte key) in three
 * cache lines. `node` comes first, so a policy's node is its record. */
struct mem_obj {
	kvl__evict_node node;   /* list links and key hash (mu) */
	size_t len;             /* payload bytes; immutable */
	unsigned char *data;    /* payload (NULL when len is 0); immutable */
	uint32_t readers;       /* gets copying from it now (mu) */
	uint16_t key_len;       /* immutable */
	uint8_t linked;         /* MEM_LINKED: in the table and the list;
	                         * MEM_EVICTED: unlinked to make room; 0:
	                         * never linked, or removed (mu) */
	uint8_t cls;            /* size class, or MEM_CLS_MALLOC; immutable */
	char key[];             /* key_len bytes and a NUL */
};

static inline struct mem_obj *mem_obj_of(kvl__evict_node *n)
{
	return (struct mem_obj *)(void *)n;
}

/* Objects to free once the lock is dropped, chained through node.older
 * (they are on no policy list any more). */
static inline void mem_dead_push(struct mem_obj **dead, struct mem_obj *o)
{
	o->node.older = *dead ? &(*dead)->node : NULL;
	*dead = o;
}

static inline struct mem_obj *mem_dead_next(const struct mem_obj *o)
{
	return o->node.older ? mem_obj_of(o->node.older) : NULL;
}

/* ----------------------------------------------------------- mem_index.c */

/* The key index: an open-addressing table (linear probing, backward-shift
 * deletion, no tombstones) from keys to records; each slot keeps the key's
 * 64-bit hash so probes compare hashes before keys. Guarded by the store's
 * lock. */
struct mem_slot {
	uint64_t hash;
	struct mem_obj *obj; /* NULL: empty */
};

struct mem_index {
	struct mem_slot *slots; /* mask + 1 slots */
	size_t mask;
};

/* A table of MEM_TABLE_MIN slots; 0 or KVL_ENOMEM. */
int mem_index_init(struct mem_index *ix);
void mem_index_free(struct mem_index *ix);
/* Hashes keys[0..n) into h and their lengths into kl (no lock needed). */
void mem_hash_keys(const char *const *keys, size_t n, uint64_t *h, size_t *kl);
/* The slot holding `key`, or the empty slot that ends its probe; *found
 * tells which. */
size_t mem_find(const struct mem_index *ix, uint64_t h, const char *key,
                size_t len, int *found);
/* The slot of record o, which is in the table. */
size_t mem_slot_of(const struct mem_index *ix, const struct mem_obj *o);
/* Empties slot i and shifts later entries of its probe run back. */
void mem_slot_delete(struct mem_index *ix, size_t i);
/* Doubles the table. KVL_ENOMEM leaves it as it was. */
int mem_grow(struct mem_index *ix);
/* Starts the cache misses of n lookups at once (hints only). */
void mem_prefetch(const struct mem_index *ix, const uint64_t *h, size_t n);

/* ------------------------------------------------------------ mem_slab.c */

/* Records from three size classes in 2 MiB chunks that ask for transparent
 * huge pages (a record that fits no class is malloc'ed), and the payload
 * memory (hostmem.h). The slab's lock is a leaf lock, never held with the
 * store's. */
#define MEM_NCLASS 3

struct mem_free_rec;
struct mem_chunk;

struct mem_slab {
	pthread_mutex_t mu;
	struct mem_free_rec *free[MEM_NCLASS]; /* (mu) */
	char *bump;                /* next unused byte of the newest chunk (mu) */
	size_t left;               /* bytes after bump (mu) */
	struct mem_chunk *chunks;  /* every chunk, newest first (mu) */
	kvl__hostmem payloads;     /* payload memory (its own lock) */
};

/* A record of at least `need` bytes (its cls set), or NULL. */
struct mem_obj *mem_rec_alloc(struct mem_slab *sl, size_t need);
/* Frees a chain of dead records (mem_dead_push): payloads, then records
 * under one hold of the slab's lock. */
void mem_free_list(struct mem_slab *sl, struct mem_obj *list);
/* Frees every chunk and the payload memory. */
void mem_slab_destroy(struct mem_slab *sl);

#endif /* KVL_MEM_H */
