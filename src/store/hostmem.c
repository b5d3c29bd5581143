/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hostmem.c — payload memory of the embedded store: heap blocks, or pinned
 * chunks with exact-size free lists (see hostmem.h).
 *
 * Invariants (under mu): a pinned block is either handed out, or on the
 * free list of its exact length, or an unused tail of the newest chunk;
 * chunks are returned to CUDA only by destroy.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "store/hostmem.h"
#include "kvlink.h"
#include "gpu/device.h"

#define HOSTMEM_CHUNK (256ull << 20)
#define HOSTMEM_ALIGN 64u
#define HOSTMEM_HUGE (2u << 20)

struct kvl__hostmem_chunk {
	struct kvl__hostmem_chunk *next;
	void *mem;
};

static void *pinned_alloc(size_t len)
{
	return kvl__dev_host_alloc(len);
}

static void pinned_free(void *p)
{
	kvl__dev_host_free(p);
}

void kvl__hostmem_init(kvl__hostmem *h, int pinned, size_t keep)
{
	memset(h, 0, sizeof *h);
	h->keep = keep;
	pthread_mutex_init(&h->mu, NULL);
	h->pinned = pinned && kvl__dev_usable();
}

static void chunks_free(struct kvl__hostmem_chunk *c)
{
	while (c) {
		struct kvl__hostmem_chunk *next = c->next;
		pinned_free(c->mem);
		free(c);
		c = next;
	}
}

int kvl__hostmem_prealloc(kvl__hostmem *h, size_t bytes)
{
	for (size_t done = 0; h->pinned && done < bytes; done += HOSTMEM_CHUNK) {
		struct kvl__hostmem_chunk *c = malloc(sizeof *c);
		void *mem = c ? pinned_alloc(HOSTMEM_CHUNK) : NULL;
		if (!mem) {
			free(c);
			return KVL_ENOMEM;
		}
		c->mem = mem;
		pthread_mutex_lock(&h->mu);
		c->next = h->spare;
		h->spare = c;
		pthread_mutex_unlock(&h->mu);
	}
	return 0;
}

void kvl__hostmem_destroy(kvl__hostmem *h)
{
	for (int i = 0; !h->pinned && i < KVL__HOSTMEM_SIZES; i++)
		while (h->free[i].head) {
			void *b = h->free[i].head;
			memcpy(&h->free[i].head, b, sizeof(void *));
			free(b);
		}
	chunks_free(h->chunks);
	chunks_free(h->spare);
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

/* A block of exactly len bytes from the free lists, or NULL. Holds mu. */
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

/* Puts a block on the free list of its length; 0 if no list is left. */
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

/* Pinned blocks are rounded to 64 bytes so that they stay aligned. */
static size_t block_len(const kvl__hostmem *h, size_t len)
{
	return h->pinned ? (len + HOSTMEM_ALIGN - 1) & ~(size_t)(HOSTMEM_ALIGN - 1)
	                 : len;
}

void *kvl__hostmem_alloc(kvl__hostmem *h, size_t len)
{
	len = block_len(h, len);
	pthread_mutex_lock(&h->mu);
	void *p = len >= sizeof(void *) ? take_free(h, len) : NULL;
	if (p && !h->pinned)
		h->kept -= len;
	if (!p && h->pinned && h->left < len) {
		/* The old tail is dropped: chunks hold few distinct sizes. */
		size_t size = len > HOSTMEM_CHUNK ? len : HOSTMEM_CHUNK;
		struct kvl__hostmem_chunk *c = NULL;
		void *mem = NULL;
		if (h->spare && size == HOSTMEM_CHUNK) {
			c = h->spare;
			h->spare = c->next;
			mem = c->mem;
		} else {
			c = malloc(sizeof *c);
			mem = c ? pinned_alloc(size) : NULL;
		}
		if (mem) {
			c->mem = mem;
			c->next = h->chunks;
			h->chunks = c;
			h->bump = mem;
			h->left = size;
		} else {
			free(c);
		}
	}
	if (!p && h->pinned && h->left >= len) {
		p = h->bump;
		h->bump += len;
		h->left -= len;
	}
	pthread_mutex_unlock(&h->mu);
	if (!p && !h->pinned)
		p = heap_alloc(len);
	return p;
}

void kvl__hostmem_free(kvl__hostmem *h, void *p, size_t len)
{
	if (!p)
		return;
	len = block_len(h, len);
	int kept = 0;
	pthread_mutex_lock(&h->mu);
	if (h->pinned) {
		/* A block no list takes stays in its chunk until destroy. */
		kept = give_free(h, p, len) || 1;
	} else if (len >= sizeof(void *) && h->kept + len <= h->keep) {
		kept = give_free(h, p, len);
		if (kept)
			h->kept += len;
	}
	pthread_mutex_unlock(&h->mu);
	if (!kept)
		free(p);
}
