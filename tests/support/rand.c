/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rand.c — splitmix64 (Steele, Lea and Flood's SplittableRandom finalizer
 * over a Weyl sequence) and the byte patterns of rand.h: eight bytes of one
 * number at a time, little end first, so that a pattern's prefix does not
 * depend on its length.
 */
#include <stdlib.h>
#include <string.h>

#include "kvl_assert.h"
#include "rand.h"

uint64_t splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

unsigned rand_below(uint64_t *state, unsigned n)
{
	return (unsigned)(splitmix64(state) % n);
}

void fill_pattern(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x100000001b3ull + 1;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w = splitmix64(&x);
		memcpy(p + i, &w, 8);
	}
	uint64_t w = splitmix64(&x);
	for (; i < n; i++, w >>= 8)
		p[i] = (uint8_t)w;
}

uint8_t *pattern(size_t n, uint64_t seed)
{
	uint8_t *p = malloc(n ? n : 1);
	ASSERT_TRUE(p != NULL);
	fill_pattern(p, n, seed);
	return p;
}
