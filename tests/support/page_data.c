/* SPDX-License-Identifier: Apache-2.0 */
/*
 * page_data.c — page hashes, seeds and slot bytes of page_data.h. The byte
 * pattern mixes a byte of the hash (which one moves with offset, layer and
 * component) with the offset, layer, component and pool, so neighbouring
 * bytes, layers, components, pools and pages all differ.
 */
#include <stdio.h>
#include <stdlib.h>

#include "kvl_assert.h"
#include "page_data.h"

void hash_chain(kvl_hash *out, size_t n, uint64_t first_token,
                uint32_t page_tokens, const kvl_hash *prior)
{
	size_t n_tok = n * page_tokens;
	uint64_t *tokens = malloc((n_tok ? n_tok : 1) * sizeof *tokens);
	ASSERT_TRUE(tokens != NULL);
	for (size_t i = 0; i < n_tok; i++)
		tokens[i] = first_token + i;
	size_t got = 0;
	ASSERT_CODE(kvl_hash_pages(tokens, n_tok, page_tokens, prior, out, n,
	                           &got),
	            KVL_OK);
	ASSERT_EQ(got, n);
	free(tokens);
}

kvl_hash ns_seed(const char *salt)
{
	kvl_hash ns;
	const char *salts[1] = {salt};
	ASSERT_CODE(kvl_namespace_seed(salts, 1, &ns), KVL_OK);
	return ns;
}

uint8_t page_byte(const kvl_hash *page, int pool, uint32_t layer,
                  uint32_t comp, size_t off)
{
	return (uint8_t)(page->bytes[(off + layer * 7 + comp * 13) %
	                             KVL_HASH_BYTES] ^
	                 (uint8_t)(off * 31 + layer * 17 + comp * 5 +
	                           (size_t)pool * 3 + 1));
}

void slot_fill(const page_buf *bufs, size_t n, int pool, size_t slot,
               const kvl_hash *page, uint8_t fill)
{
	for (size_t i = 0; i < n; i++) {
		const page_buf *b = &bufs[i];
		if (b->pool != pool)
			continue;
		uint8_t *p = b->base + slot * b->stride;
		for (size_t o = 0; o < b->bytes; o++)
			p[o] = page ? page_byte(page, pool, b->layer, b->comp, o)
			            : fill;
	}
}

int slot_check(const page_buf *bufs, size_t n, int pool, size_t slot,
               const kvl_hash *page, uint8_t fill, uint32_t min_layer,
               uint32_t max_layer, char *why, size_t whylen, size_t *checked)
{
	for (size_t i = 0; i < n; i++) {
		const page_buf *b = &bufs[i];
		if (b->pool != pool || b->layer < min_layer ||
		    b->layer >= max_layer)
			continue;
		const uint8_t *p = b->base + slot * b->stride;
		for (size_t o = 0; o < b->bytes; o++) {
			uint8_t want = page ? page_byte(page, pool, b->layer,
			                                b->comp, o)
			                    : fill;
			if (p[o] != want) {
				if (why)
					snprintf(why, whylen,
					         "pool %d slot %zu layer %u comp "
					         "%u byte %zu: 0x%02x, want "
					         "0x%02x",
					         pool, slot, b->layer, b->comp, o,
					         p[o], want);
				return 0;
			}
		}
		if (checked)
			*checked += b->bytes;
	}
	return 1;
}
