/* SPDX-License-Identifier: Apache-2.0 */
/*
 * arena.c — one-length chunks with a bitmap of taken blocks (arena.h).
 *
 * Invariants: chunks[] is sorted by address; a chunk with block == 0 is
 * unassigned (no bitmap, every byte free); in an assigned chunk n_free
 * counts the clear bits and no clear bit lies below `low`.
 */
#include <stdlib.h>
#include <string.h>

#include "store/arena.h"

struct kvl__arena_chunk {
	uint8_t *mem;
	size_t bytes;
	size_t block;     /* bytes per block; 0: unassigned */
	size_t n_blocks, n_free, low;
	uint64_t *used;   /* n_blocks bits */
};

static size_t round_block(size_t len)
{
	return (len + KVL__ARENA_ALIGN - 1) & ~(size_t)(KVL__ARENA_ALIGN - 1);
}

void kvl__arena_init(kvl__arena *a, size_t chunk_bytes,
                     void *(*chunk_alloc)(size_t), void (*chunk_free)(void *))
{
	memset(a, 0, sizeof *a);
	a->chunk_bytes = chunk_bytes;
	a->chunk_alloc = chunk_alloc;
	a->chunk_free = chunk_free;
}

void kvl__arena_destroy(kvl__arena *a)
{
	for (size_t i = 0; i < a->n_chunks; i++) {
		a->chunk_free(a->chunks[i]->mem);
		free(a->chunks[i]->used);
		free(a->chunks[i]);
	}
	free(a->chunks);
	memset(a, 0, sizeof *a);
}

static int is_used(const kvl__arena_chunk *c, size_t i)
{
	return (c->used[i / 64] >> (i % 64)) & 1;
}

/* A new, unassigned chunk of `bytes`, in address order; NULL on failure. */
static kvl__arena_chunk *chunk_add(kvl__arena *a, size_t bytes)
{
	if (a->n_chunks == a->cap_chunks) {
		size_t cap = a->cap_chunks ? 2 * a->cap_chunks : 8;
		kvl__arena_chunk **c = realloc(a->chunks, cap * sizeof *c);
		if (!c)
			return NULL;
		a->chunks = c;
		a->cap_chunks = cap;
	}
	kvl__arena_chunk *c = calloc(1, sizeof *c);
	if (!c || !(c->mem = a->chunk_alloc(bytes))) {
		free(c);
		return NULL;
	}
	c->bytes = bytes;
	size_t at = a->n_chunks;
	while (at > 0 && a->chunks[at - 1]->mem > c->mem)
		at--;
	memmove(a->chunks + at + 1, a->chunks + at,
	        (a->n_chunks - at) * sizeof *a->chunks);
	a->chunks[at] = c;
	a->n_chunks++;
	return c;
}

int kvl__arena_reserve(kvl__arena *a, size_t bytes)
{
	size_t have = 0;
	for (size_t i = 0; i < a->n_chunks; i++)
		have += a->chunks[i]->bytes;
	for (; have < bytes; have += a->chunk_bytes)
		if (!chunk_add(a, a->chunk_bytes))
			return -1;
	return 0;
}

/* Gives an unassigned chunk blocks of `block` bytes; 0 or -1. */
static int chunk_assign(kvl__arena_chunk *c, size_t block)
{
	size_t n = c->bytes / block;
	c->used = calloc((n + 63) / 64, sizeof *c->used);
	if (!c->used)
		return -1;
	c->block = block;
	c->n_blocks = c->n_free = n;
	c->low = 0;
	return 0;
}

/* The lowest clear bit at or above c->low (c has one). */
static size_t first_free(kvl__arena_chunk *c)
{
	size_t w = c->low / 64;
	uint64_t bits = ~c->used[w] & (~0ull << (c->low % 64));
	while (!bits)
		bits = ~c->used[++w];
	return w * 64 + (size_t)__builtin_ctzll(bits);
}

static void *take(kvl__arena *a, kvl__arena_chunk *c, size_t i)
{
	c->used[i / 64] |= 1ull << (i % 64);
	c->n_free--;
	if (i == c->low)
		c->low = i + 1;
	a->last = c;
	a->next = i + 1;
	return c->mem + i * c->block;
}

void *kvl__arena_alloc(kvl__arena *a, size_t len)
{
	size_t block = round_block(len ? len : 1);
	kvl__arena_chunk *c = a->last;
	/* Right after the previous block: the run goes on. */
	if (c && c->block == block && a->next < c->n_blocks &&
	    !is_used(c, a->next))
		return take(a, c, a->next);
	kvl__arena_chunk *spare = NULL;
	for (size_t i = 0; i < a->n_chunks; i++) {
		c = a->chunks[i];
		if (c->block == block && c->n_free)
			return take(a, c, first_free(c));
		if (!c->block && !spare && c->bytes >= block)
			spare = c;
	}
	if (!spare) /* whole blocks: none of it is wasted at the end */
		spare = chunk_add(a, (a->chunk_bytes + block - 1) / block * block);
	if (!spare || chunk_assign(spare, block))
		return NULL;
	return take(a, spare, 0);
}

/* The chunk holding p (binary search over chunks by address). */
static kvl__arena_chunk *chunk_of(const kvl__arena *a, const uint8_t *p)
{
	size_t lo = 0, hi = a->n_chunks;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (a->chunks[mid]->mem <= p)
			lo = mid;
		else
			hi = mid;
	}
	return a->chunks[lo];
}

void kvl__arena_free(kvl__arena *a, void *p, size_t len)
{
	(void)len;
	if (!p)
		return;
	kvl__arena_chunk *c = chunk_of(a, p);
	size_t i = (size_t)((uint8_t *)p - c->mem) / c->block;
	c->used[i / 64] &= ~(1ull << (i % 64));
	c->n_free++;
	if (i < c->low)
		c->low = i;
	if (c->n_free < c->n_blocks)
		return;
	/* Wholly free: any length may have it now. */
	free(c->used);
	c->used = NULL;
	c->block = c->n_blocks = c->n_free = c->low = 0;
	if (a->last == c)
		a->last = NULL;
}
