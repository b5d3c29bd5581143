/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mem_slab.c — the embedded store's record slab (mem.h): records come from
 * three size classes in 2 MiB chunks that ask for transparent huge pages,
 * so that a lookup (slot, record, list neighbours) rarely misses the TLB.
 * Chunks are returned to the system only by mem_slab_destroy.
 */
#include <stddef.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "store/mem.h"

#define MEM_SLAB_CHUNK (2u << 20) /* one huge page */

/* Record sizes: multiples of the cache line; the first holds a 130-byte key
 * in three lines, the last any key shorter than KVL_KEY_MAX. */
static const uint16_t mem_class_size[MEM_NCLASS] = { 192, 256, 384 };
_Static_assert(offsetof(struct mem_obj, key) + 131 <= 192,
               "the smallest record class holds a 130-byte key");

/* A free record, on its class's free list. */
struct mem_free_rec {
	struct mem_free_rec *next;
};

/* A slab chunk; records follow the first cache line. */
struct mem_chunk {
	struct mem_chunk *next;
};


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
struct mem_obj *mem_rec_alloc(struct mem_slab *sl, size_t need)
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
void mem_free_list(struct mem_slab *sl, struct mem_obj *list)
{
	if (!list)
		return;
	for (struct mem_obj *o = list; o; o = mem_dead_next(o))
		kvl__hostmem_free(&sl->payloads, o->data, o->len);
	pthread_mutex_lock(&sl->mu);
	while (list) {
		struct mem_obj *o = list;
		list = mem_dead_next(o);
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

void mem_slab_destroy(struct mem_slab *sl)
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

