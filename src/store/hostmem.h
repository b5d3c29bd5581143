/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hostmem.h — where the embedded store's payloads live (internal).
 *
 * Plain mode hands out 64-byte aligned heap blocks (huge pages from 2 MiB)
 * and keeps up to `keep` bytes of freed blocks for reuse by exact length: a
 * full store evicts one object per put, and a pool's pages all have one
 * size, so reuse spares the kernel a page fault per 4 KiB of every new
 * object. Pinned mode (builds with CUDA, a device present) carves blocks out of
 * pinned, mapped chunks (an arena, arena.h), so GPU copies read and write
 * store objects in place, and objects stored one after the other lie at a
 * constant pitch, which the copy engines move with one 2D copy per layer;
 * pinning memory is slow, reusing it is not. Thread-safe (one mutex, a
 * leaf lock).
 */
#ifndef KVL_HOSTMEM_H
#define KVL_HOSTMEM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "store/arena.h"

#define KVL__HOSTMEM_SIZES 16

typedef struct kvl__hostmem {
	pthread_mutex_t mu;
	int pinned;
	size_t keep, kept;  /* plain mode: bytes kept for reuse, at most/now */
	kvl__arena arena;   /* pinned mode */
	struct {            /* plain mode's kept blocks, by length */
		size_t len;
		void *head;
	} free[KVL__HOSTMEM_SIZES];
} kvl__hostmem;

/* pinned: 1 to ask for pinned memory; it is granted only with CUDA and a
 * usable device (h->pinned says which). keep: plain mode's reuse bound.
 * capacity: the store's, which sizes pinned chunks
 * (kvl__hostmem_chunk_bytes). */
void kvl__hostmem_init(kvl__hostmem *h, int pinned, size_t keep,
                       uint64_t capacity);
/* Bytes of each pinned chunk of a store of `capacity` bytes: a quarter of
 * it, from 256 MiB to 2 GiB, a whole number of 2 MiB pages. The arena pins
 * chunks as lengths need them, so a store pins at most its capacity plus
 * about one chunk per object length (a chunk serves one length until all
 * of its blocks are free again). */
size_t kvl__hostmem_chunk_bytes(uint64_t capacity);
void kvl__hostmem_destroy(kvl__hostmem *h);
/* Pins `bytes` ahead (pinned mode), so that first puts do not pay for
 * pinning. 0, or KVL_ENOMEM when CUDA refused. */
int kvl__hostmem_prealloc(kvl__hostmem *h, size_t bytes);
void *kvl__hostmem_alloc(kvl__hostmem *h, size_t len);
void kvl__hostmem_free(kvl__hostmem *h, void *p, size_t len);

#endif
