/* SPDX-License-Identifier: Apache-2.0 */
/*
 * restorable.c — restorable sets: which prompt prefixes can be restored.
 *
 * A restorable set is a bitmap over prefix lengths p = 0..n_pages: bit p is
 * set when the first p pages can be restored for every pool. Each pool
 * contributes the set its hit policy allows, and pools intersect:
 *
 *   KVL_HIT_ALL_PAGES        p in 0..m, m the index of the first missing page
 *   KVL_HIT_TRAILING_PAGES w p = 0, or p >= 1 with pages [max(0, p-w), p)
 *                            all present
 *
 * Both are computed in one pass per pool: ALL_PAGES finds the first missing
 * page; TRAILING_PAGES tracks `run`, the length of the run of present pages
 * that ends at page p-1, and keeps p when that run covers the window
 * (run >= w) or reaches back to page 0 (run == p). Invariants of a set
 * written here: bit 0 is set, and no bit above n_pages is set.
 * kvl_restorable_set is a pure function: it allocates nothing and touches
 * nothing but its output.
 *
 * Ranks intersect their sets with an all-reduce (bitwise AND): the
 * engine's, or the in-process rank group of rank_group.c.
 */
#include <string.h>

#include "core/internal.h"

/* Bits 0..r of a word (r < 64). */
static uint64_t low_mask(unsigned r)
{
	return r == 63 ? ~(uint64_t)0 : ((uint64_t)1 << (r + 1)) - 1;
}

static int policy_ok(const kvl_policy *pol)
{
	switch (pol->kind) {
	case KVL_HIT_ALL_PAGES:
		return 1;
	case KVL_HIT_TRAILING_PAGES:
		return pol->window >= 1;
	}
	return 0;
}

/* ALL_PAGES: clears every p above the first missing page. */
static void and_all_pages(size_t n_pages, const uint8_t *present,
                          uint64_t *bits)
{
	const uint8_t *hole = memchr(present, 0, n_pages);
	if (!hole)
		return;
	size_t first_out = (size_t)(hole - present) + 1; /* lowest p dropped */
	size_t w = first_out / 64;
	size_t n_words = kvl_bitmap_words(n_pages);

	bits[w] &= ((uint64_t)1 << (first_out % 64)) - 1;
	for (w++; w < n_words; w++)
		bits[w] = 0;
}

/* TRAILING_PAGES(window): keeps p when the run of present pages ending at
 * page p-1 covers the window or starts at page 0. One pass, a word at a
 * time. */
static void and_trailing_pages(size_t n_pages, const uint8_t *present,
                               uint32_t window, uint64_t *bits)
{
	uint64_t word = 1; /* p = 0, the empty prefix */
	size_t run = 0;

	for (size_t p = 1; p <= n_pages; p++) {
		run = present[p - 1] ? run + 1 : 0;
		if (run >= window || run == p)
			word |= (uint64_t)1 << (p % 64);
		if (p % 64 == 63) {
			bits[p / 64] &= word;
			word = 0;
		}
	}
	if (n_pages % 64 != 63)
		bits[n_pages / 64] &= word;
}

int kvl_restorable_set(const kvl_policy *policies,
                       const uint8_t *const *present, size_t n_pools,
                       size_t n_pages, uint64_t *bits, size_t n_words)
{
	if (!bits || (n_pools > 0 && (!policies || !present)))
		return KVL_EINVAL;
	for (size_t i = 0; i < n_pools; i++)
		if (!policy_ok(&policies[i]))
			return KVL_EINVAL;
	size_t need = kvl_bitmap_words(n_pages);
	if (n_words < need)
		return KVL_ERANGE;

	/* Start from every p in 0..n_pages, then let each pool take away. */
	for (size_t w = 0; w + 1 < need; w++)
		bits[w] = ~(uint64_t)0;
	bits[need - 1] = low_mask((unsigned)(n_pages % 64));

	for (size_t i = 0; i < n_pools; i++) {
		if (!present[i])
			continue;
		if (policies[i].kind == KVL_HIT_ALL_PAGES)
			and_all_pages(n_pages, present[i], bits);
		else
			and_trailing_pages(n_pages, present[i],
			                   policies[i].window, bits);
	}
	return KVL_OK;
}

void kvl__set_empty(uint64_t *bits, size_t words)
{
	memset(bits, 0, words * 8);
	bits[0] = 1;
}

int kvl__set_out(kvl__err *e, const char *op, uint64_t *bits, size_t n_words,
                 size_t n_pages)
{
	if (!bits)
		return kvl__fail(e, KVL_EINVAL, "%s: bits is NULL", op);
	size_t words = kvl_bitmap_words(n_pages);
	if (n_words < words)
		return kvl__fail(e, KVL_ERANGE,
		                 "%s: %zu pages need %zu bitmap words, n_words "
		                 "is %zu",
		                 op, n_pages, words, n_words);
	kvl__set_empty(bits, words);
	return 0;
}

size_t kvl_bitmap_max(const uint64_t *bits, size_t n_words)
{
	if (!bits)
		return 0;
	for (size_t w = n_words; w-- > 0;) {
		if (bits[w])
			return w * 64 + 63 - (size_t)__builtin_clzll(bits[w]);
	}
	return 0;
}
