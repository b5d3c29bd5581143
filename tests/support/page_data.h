/* SPDX-License-Identifier: Apache-2.0 */
/*
 * page_data.h — the pages of a test: deterministic sets of page hashes (a
 * chain over consecutive tokens, as an engine hashes a prompt), namespace
 * seeds, and the bytes a page holds in an engine's slots (a pattern of the
 * page hash, the pool, the layer, the component and the offset, so that a
 * page in the wrong slot, layer or pool shows), written into slots and
 * checked there.
 *
 * page_byte, slot_fill and slot_check assert nothing (any thread may use
 * them); hash_chain and ns_seed assert (kvl_assert.h).
 *
 * (Named page_data.h, not pages.h: src/pages.h is the library's own.)
 */
#ifndef KVL_TEST_PAGE_DATA_H
#define KVL_TEST_PAGE_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "kvlink.h"

/* One buffer of an engine: component `comp` (its index in the pool) of
 * layer `layer` of pool `pool`; slot s is bytes [0, bytes) at
 * base + s * stride. */
typedef struct page_buf {
	int pool;
	uint32_t layer, comp;
	uint8_t *base;
	size_t stride, bytes;
} page_buf;

/* n page hashes (any n) of the prompt first_token, first_token + 1, …,
 * page_tokens tokens a page, chained after `prior` (a namespace seed, or
 * NULL); asserts that kvl_hash_pages made all n. */
void hash_chain(kvl_hash *out, size_t n, uint64_t first_token,
                uint32_t page_tokens, const kvl_hash *prior);

/* The namespace seed of one salt (kvl_namespace_seed), asserted. */
kvl_hash ns_seed(const char *salt);

/* Byte `off` of component `comp` of `layer` of `page` in pool `pool`. */
uint8_t page_byte(const kvl_hash *page, int pool, uint32_t layer,
                  uint32_t comp, size_t off);

/* Writes `page`'s bytes (page NULL: the byte `fill`) into every layer of
 * `slot` of `pool`, over the n buffers of bufs. */
void slot_fill(const page_buf *bufs, size_t n, int pool, size_t slot,
               const kvl_hash *page, uint8_t fill);

/* 1 when every layer in [min_layer, max_layer) of `slot` of `pool` holds
 * `page`'s bytes (page NULL: only `fill`); else 0 and, when why, the first
 * difference described in why[whylen]. When checked, adds the bytes of the
 * buffers found right. */
int slot_check(const page_buf *bufs, size_t n, int pool, size_t slot,
               const kvl_hash *page, uint8_t fill, uint32_t min_layer,
               uint32_t max_layer, char *why, size_t whylen, size_t *checked);

#endif
