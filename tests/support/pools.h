/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pools.h — an engine's pools for the tests: host memory and a kvl_layout
 * over it, of a shape the test picks:
 *  - pool "kv" (KVL_HIT_ALL_PAGES): components "k" and "v" at every layer,
 *    one slot holding k then v (then a gap up to kv_stride);
 *  - optionally pool "swa" (KVL_HIT_TRAILING_PAGES(swa_window)): one
 *    component "w" at layers 1 and 3 only;
 *  - optionally pool "mla" (KVL_POOL_REPLICATED_TP): one component "c" at
 *    every layer.
 * The memory holds, one after the other, kv's layers, then swa's two, then
 * mla's layers (slot-major within each), and starts as the byte `fill`.
 * Every buffer is also listed (page_data.h's page_buf) for filling and
 * checking slots.
 */
#ifndef KVL_TEST_POOLS_H
#define KVL_TEST_POOLS_H

#include <stddef.h>
#include <stdint.h>

#include "kvlink.h"
#include "page_data.h"

#define POOLS_MAX_BUFS 24

typedef struct pools_shape {
	const char *tag;        /* model tag of the layout */
	const kvl_shard *shard; /* NULL: a single rank */
	size_t slots;           /* slots of every pool */
	uint32_t layers;        /* layers of kv and mla */
	size_t k_bytes, v_bytes, kv_stride;
	int swa;                /* add pool "swa" */
	uint32_t swa_window;
	size_t w_bytes, w_stride;
	int mla;                /* add pool "mla" */
	size_t c_bytes, c_stride;
	kvl_mem_kind kv_mem;    /* what kv's buffers say they are */
	uint8_t fill;           /* what the memory holds at first */
	int unfinalized;        /* leave the layout open */
	int shapes;             /* describe sizes only (kvl_layout_add_shape) */
} pools_shape;

typedef struct pools {
	uint8_t *mem;
	size_t mem_bytes;
	kvl_layout *l;
	int kv, swa, mla; /* pool ids, -1 when absent */
	int n_pools;
	page_buf bufs[POOLS_MAX_BUFS];
	size_t n_bufs;
} pools;

/* Builds p to `shape` (and finalizes its layout unless shape->unfinalized);
 * asserts every step, printing the layout's message. */
void pools_init(pools *p, const pools_shape *shape);

/* Frees p's layout and memory. */
void pools_free(pools *p);

#endif
