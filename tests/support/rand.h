/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rand.h — the tests' deterministic random numbers: splitmix64 over a
 * caller's state (the same seed gives the same sequence on every machine),
 * and byte patterns drawn from it that differ by seed and by offset, so that
 * a misplaced or stale range shows. All but pattern() (which asserts its
 * allocation) are safe on any thread of any program.
 */
#ifndef KVL_TEST_RAND_H
#define KVL_TEST_RAND_H

#include <stddef.h>
#include <stdint.h>

/* The next number of the splitmix64 sequence; advances *state. */
uint64_t splitmix64(uint64_t *state);

/* A number below n (n > 0), from splitmix64(state). */
unsigned rand_below(uint64_t *state, unsigned n);

/* Fills p[0..n) with the pattern of `seed`. */
void fill_pattern(uint8_t *p, size_t n, uint64_t seed);

/* A new buffer (free it) of n bytes (n may be 0) holding the pattern of
 * `seed`; asserts that the allocation worked. */
uint8_t *pattern(size_t n, uint64_t seed);

#endif
