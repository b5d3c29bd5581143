/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hostmem.c — payload memory of the embedded store: heap blocks with
 * exact-length reuse, or a pinned arena (see hostmem.h).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "store/hostmem.h"
#include "kvlink.h"
#include "gpu/device.h"

/* Pinned chunks are a quarter of the capacity, within these bounds. A run
 * of objects ends where its chunk does, and each 2D copy of a run costs
 * the copy engines a few microseconds: on an H200, a 4 GiB prefix of
 * 2 MiB objects loaded at 0.96-0.97 of the PCIe ceiling from 256 MiB
 * chunks (16 runs a layer), at 0.98 from 1 GiB and 0.985-0.99 from 2 GiB.
 * A chunk serves one object length, so where pools have many lengths,
 * larger chunks pin more memory beyond the capacity (hostmem.h). */
#define HOSTMEM_CHUNK_MIN (256ull << 20)
#define HOSTMEM_CHUNK_MAX (2ull << 30)
#define HOSTMEM_ALIGN 64u
#define HOSTMEM_HUGE (2u << 20)

size_t kvl__hostmem_chunk_bytes(uint64_t capacity)
{
	uint64_t c = capacity / 4;
	if (c < HOSTMEM_CHUNK_MIN)
		c = HOSTMEM_CHUNK_MIN;
	if (c > HOSTMEM_CHUNK_MAX)
		c = HOSTMEM_CHUNK_MAX;
	return (size_t)((c + HOSTMEM_HUGE - 1) & ~(uint64_t)(HOSTMEM_HUGE - 1));
}

void kvl__hostmem_init(kvl__hostmem *h, int pinned, size_t keep,
                       uint64_t capacity)
{
	memset(h, 0, sizeof *h);
	h->keep = keep;
	pthread_mutex_init(&h->mu, NULL);
	h->pinned = pinned && kvl__dev_usable();
	if (h->pinned)
		kvl__arena_init(&h->arena, kvl__hostmem_chunk_bytes(capacity),
		                kvl__dev_host_alloc,
		                kvl__dev_host_free);
}

int kvl__hostmem_prealloc(kvl__hostmem *h, size_t bytes)
{
	if (!h->pinned)
		return 0;
	pthread_mutex_lock(&h->mu);
	int rc = kvl__arena_reserve(&h->arena, bytes);
	pthread_mutex_unlock(&h->mu);
	return rc ? KVL_ENOMEM : 0;
}

void kvl__hostmem_destroy(kvl__hostmem *h)
{
	if (h->pinned)
		kvl__arena_destroy(&h->arena);
	for (int i = 0; !h->pinned && i < KVL__HOSTMEM_SIZES; i++)
		while (h->free[i].head) {
			void *b = h->free[i].head;
			memcpy(&h->free[i].head, b, sizeof(void *));
			free(b);
		}
	pthread_mutex_destroy(&h->mu);
}

static void *heap_alloc(size_t len)
{
	void *p = NULL;
	size_t align = len >= HOSTMEM_HUGE ? HOSTMEM_HUGE : HOSTMEM_ALIGN;
	if (posix_memalign(&p, align, len) != 0)
		return NULL;
	if (len >= HOSTMEM_HUGE)
		madvise(p, len & ~(size_t)(HOSTMEM_HUGE - 1), MADV_HUGEPAGE);
	return p;
}

/* A kept block of exactly len bytes, or NULL. Holds mu. */
static void *take_free(kvl__hostmem *h, size_t len)
{
	for (int i = 0; i < KVL__HOSTMEM_SIZES; i++)
		if (h->free[i].len == len && h->free[i].head) {
			void *p = h->free[i].head;
			memcpy(&h->free[i].head, p, sizeof(void *));
			return p;
		}
	return NULL;
}

/* Keeps a block on the list of its length; 0 if no list is left. */
static int give_free(kvl__hostmem *h, void *p, size_t len)
{
	for (int i = 0; i < KVL__HOSTMEM_SIZES; i++)
		if (h->free[i].len == len || !h->free[i].head) {
			h->free[i].len = len;
			memcpy(p, &h->free[i].head, sizeof(void *));
			h->free[i].head = p;
			return 1;
		}
	return 0;
}

void *kvl__hostmem_alloc(kvl__hostmem *h, size_t len)
{
	pthread_mutex_lock(&h->mu);
	void *p = h->pinned ? kvl__arena_alloc(&h->arena, len)
	          : len >= sizeof(void *) ? take_free(h, len)
	                                  : NULL;
	if (p && !h->pinned)
		h->kept -= len;
	pthread_mutex_unlock(&h->mu);
	if (!p && !h->pinned)
		p = heap_alloc(len);
	return p;
}

void kvl__hostmem_free(kvl__hostmem *h, void *p, size_t len)
{
	if (!p)
		return;
	int kept = 0;
	pthread_mutex_lock(&h->mu);
	if (h->pinned) {
		kvl__arena_free(&h->arena, p, len);
		kept = 1;
	} else if (len >= sizeof(void *) && h->kept + len <= h->keep) {
		kept = give_free(h, p, len);
		if (kept)
			h->kept += len;
	}
	pthread_mutex_unlock(&h->mu);
	if (!kept)
		free(p);
}
