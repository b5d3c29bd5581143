/* SPDX-License-Identifier: Apache-2.0 */
/*
 * arena.h — blocks carved out of large chunks so that objects stored
 * together lie at a constant pitch (internal; the embedded store's pinned
 * payloads, hostmem.h).
 *
 * Why: the GPU copy engines move a layer of many objects with one 2D copy
 * when the objects lie at one pitch (rows = objects, pitch = the object's
 * block). So each chunk serves blocks of one length (64-byte aligned), a
 * bitmap says which are taken, and an allocation continues right after
 * the previous one when that block is free (else it takes the lowest free
 * block of a chunk of its length): the objects of one offload, allocated
 * one after the other, land in consecutive blocks, and so do the objects
 * that replace a run evicted together. A chunk whose blocks are all free
 * again may serve another length. Chunks go back to their allocator only
 * at destroy.
 *
 * Not thread-safe: the caller serializes (hostmem.c holds its lock).
 */
#ifndef KVL_ARENA_H
#define KVL_ARENA_H

#include <stddef.h>
#include <stdint.h>

#define KVL__ARENA_ALIGN 64u

typedef struct kvl__arena_chunk kvl__arena_chunk;

typedef struct kvl__arena {
	void *(*chunk_alloc)(size_t len); /* NULL on failure */
	void (*chunk_free)(void *p);
	size_t chunk_bytes;          /* a reserved chunk's size; one made
	                              * for a block length holds whole
	                              * blocks, at least this many bytes */
	kvl__arena_chunk **chunks;   /* by address */
	size_t n_chunks, cap_chunks;
	kvl__arena_chunk *last;      /* the chunk of the last allocation */
	size_t next;                 /* the block after it */
} kvl__arena;

/* An empty arena whose chunks of chunk_bytes come from chunk_alloc. */
void kvl__arena_init(kvl__arena *a, size_t chunk_bytes,
                     void *(*chunk_alloc)(size_t), void (*chunk_free)(void *));
/* Returns every chunk to chunk_free. */
void kvl__arena_destroy(kvl__arena *a);
/* Allocates chunks until the arena holds at least `bytes`; 0 or -1. */
int kvl__arena_reserve(kvl__arena *a, size_t bytes);
/* A block of at least len bytes (len rounded up to KVL__ARENA_ALIGN),
 * 64-byte aligned, or NULL. */
void *kvl__arena_alloc(kvl__arena *a, size_t len);
/* Frees a block that kvl__arena_alloc returned for len. */
void kvl__arena_free(kvl__arena *a, void *p, size_t len);

#endif /* KVL_ARENA_H */
