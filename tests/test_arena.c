/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_arena.c — the embedded store's pinned payload arena (store/arena.h)
 * over plain memory: blocks allocated one after another lie at a constant
 * pitch, and so do the blocks that replace a run freed together, in
 * whatever order it was freed; an allocation goes on after the previous
 * one before it fills holes; a run stops at a taken block and at a
 * chunk's end; a chunk freed whole serves another length; reserve pins
 * ahead; every block is aligned and inside a chunk, none is handed out
 * twice (a random model of allocations and frees); the embedded store's
 * chunks follow its capacity.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/kvl_assert.h"

#include "store/arena.h"
#include "store/hostmem.h"

#define CHUNK (1u << 20)

static size_t chunks_made, chunks_freed;

static void *chunk_alloc(size_t len)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, len))
		return NULL;
	chunks_made++;
	return p;
}

static void chunk_free(void *p)
{
	chunks_freed++;
	free(p);
}

static kvl__arena arena(void)
{
	kvl__arena a;
	chunks_made = chunks_freed = 0;
	kvl__arena_init(&a, CHUNK, chunk_alloc, chunk_free);
	return a;
}

/* n blocks of len bytes into b[]. */
static void alloc_n(kvl__arena *a, uint8_t **b, size_t n, size_t len)
{
	for (size_t i = 0; i < n; i++) {
		b[i] = kvl__arena_alloc(a, len);
		ASSERT_TRUE(b[i] != NULL);
		ASSERT_EQ((uintptr_t)b[i] % KVL__ARENA_ALIGN, 0);
	}
}

/* The length of the run at b[0]: blocks at b[0] + k * (b[1] - b[0]). */
static size_t run_len(uint8_t *const *b, size_t n)
{
	if (n < 2 || b[1] <= b[0])
		return n ? 1 : 0;
	size_t k = 2;
	while (k < n && b[k] == b[0] + k * (size_t)(b[1] - b[0]))
		k++;
	return k;
}

static void test_consecutive_allocations_are_a_run(void **state)
{
	(void)state;
	kvl__arena a = arena();
	uint8_t *b[16];
	alloc_n(&a, b, 16, 1000); /* rounded to 1024 */
	ASSERT_EQ(run_len(b, 16), 16);
	ASSERT_EQ(b[1] - b[0], 1024);
	kvl__arena_destroy(&a);
	ASSERT_EQ(chunks_freed, chunks_made);
}

/* A run evicted together, in any order, comes back as a run. */
static void test_freed_run_is_refilled_in_order(void **state)
{
	(void)state;
	kvl__arena a = arena();
	uint8_t *b[64], *c[16];
	alloc_n(&a, b, 64, CHUNK / 64); /* the chunk is full */
	ASSERT_EQ(run_len(b, 64), 64);
	static const int order[16] = {9,  3, 14, 0, 7, 12, 1, 15,
	                              4, 10,  6, 2, 13, 5, 11, 8};
	for (int i = 0; i < 16; i++)
		kvl__arena_free(&a, b[16 + order[i]], CHUNK / 64);
	alloc_n(&a, c, 16, CHUNK / 64);
	ASSERT_TRUE(c[0] == b[16]);
	ASSERT_EQ(run_len(c, 16), 16);
	kvl__arena_destroy(&a);
}

/* An allocation goes on after the previous one while that block is free,
 * even with lower blocks free; then it takes the lowest. */
static void test_run_goes_on_before_filling_holes(void **state)
{
	(void)state;
	kvl__arena a = arena();
	uint8_t *b[3];
	alloc_n(&a, b, 3, 4096);
	kvl__arena_free(&a, b[0], 4096);
	uint8_t *next = kvl__arena_alloc(&a, 4096);
	ASSERT_TRUE(next == b[2] + 4096);
	kvl__arena_destroy(&a);
}

/* A block taken in the middle of a freed range splits the next run. */
static void test_run_breaks_at_a_taken_block(void **state)
{
	(void)state;
	kvl__arena a = arena();
	uint8_t *b[32], *c[8];
	alloc_n(&a, b, 32, CHUNK / 32); /* the chunk is full */
	for (int i = 0; i < 8; i++)
		if (i != 4)
			kvl__arena_free(&a, b[i], CHUNK / 32);
	alloc_n(&a, c, 7, CHUNK / 32);
	ASSERT_EQ(run_len(c, 7), 4);
	ASSERT_TRUE(c[4] == b[5]);
	ASSERT_EQ(run_len(c + 4, 3), 3);
	kvl__arena_destroy(&a);
}

/* A chunk made for a length holds whole blocks, at least CHUNK bytes;
 * the next block goes to a new chunk. */
static void test_run_ends_with_its_chunk(void **state)
{
	(void)state;
	kvl__arena a = arena();
	size_t per = (CHUNK + (100u << 10) - 1) / (100u << 10); /* 11 */
	uint8_t *b[32];
	alloc_n(&a, b, per + 3, 100u << 10);
	ASSERT_EQ(chunks_made, 2);
	ASSERT_EQ(run_len(b, per + 3), per);
	ASSERT_EQ(run_len(b + per, 3), 3);
	/* A block larger than a chunk gets a chunk of its own. */
	uint8_t *big = kvl__arena_alloc(&a, 3 * CHUNK + 5);
	ASSERT_TRUE(big != NULL);
	ASSERT_EQ(chunks_made, 3);
	memset(big, 1, 3 * CHUNK + 5);
	kvl__arena_destroy(&a);
	ASSERT_EQ(chunks_freed, 3);
}

/* Lengths do not share a chunk until one is wholly free again. */
static void test_free_chunk_serves_another_length(void **state)
{
	(void)state;
	kvl__arena a = arena();
	uint8_t *x = kvl__arena_alloc(&a, 4096);
	uint8_t *y = kvl__arena_alloc(&a, 8192);
	ASSERT_TRUE(x && y);
	ASSERT_EQ(chunks_made, 2);
	kvl__arena_free(&a, x, 4096);
	uint8_t *z = kvl__arena_alloc(&a, 512);
	ASSERT_TRUE(z == x);
	ASSERT_EQ(chunks_made, 2);
	kvl__arena_destroy(&a);
}

static void test_reserve_pins_ahead(void **state)
{
	(void)state;
	kvl__arena a = arena();
	ASSERT_EQ(kvl__arena_reserve(&a, 3 * CHUNK + 1), 0);
	ASSERT_EQ(chunks_made, 4);
	uint8_t *b[3];
	alloc_n(&a, b, 3, 64);
	ASSERT_TRUE(kvl__arena_alloc(&a, 8192) != NULL);
	ASSERT_EQ(chunks_made, 4);
	ASSERT_EQ(kvl__arena_reserve(&a, 2 * CHUNK), 0);
	ASSERT_EQ(chunks_made, 4);
	kvl__arena_destroy(&a);
	ASSERT_EQ(chunks_freed, 4);
}

static void *refuse(size_t len)
{
	(void)len;
	return NULL;
}

static void test_allocator_refuses(void **state)
{
	(void)state;
	kvl__arena a;
	kvl__arena_init(&a, CHUNK, refuse, chunk_free);
	ASSERT_TRUE(kvl__arena_alloc(&a, 100) == NULL);
	ASSERT_EQ(kvl__arena_reserve(&a, 1), -1);
	kvl__arena_destroy(&a);
}

/* The store's pinned chunks: a quarter of its capacity, from 256 MiB to
 * 2 GiB, whole 2 MiB pages (hostmem.h). */
static void test_chunk_bytes_follow_capacity(void **state)
{
	(void)state;
	const uint64_t mib = 1ull << 20;
	static const struct {
		uint64_t capacity, chunk_mib;
	} cases[] = {
		{0, 256},           {1, 256},         {256 << 20, 256},
		{1ull << 30, 256},  {6ull << 30, 1536}, {(6ull << 30) + 4, 1538},
		{8ull << 30, 2048}, {1ull << 40, 2048},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		ASSERT_EQ_MSG(kvl__hostmem_chunk_bytes(cases[i].capacity),
		              cases[i].chunk_mib * mib, "capacity %llu",
		              (unsigned long long)cases[i].capacity);
}

/* Random allocations and frees of three lengths: no block overlaps
 * another live one, each stays intact until freed. */
static void test_model(void **state)
{
	(void)state;
	enum { LIVE = 600, OPS = 20000 };
	static const size_t lens[3] = {3000, 4096, 70000};
	kvl__arena a = arena();
	uint8_t *live[LIVE] = {0};
	size_t len[LIVE] = {0};
	unsigned seed = 12345;
	for (int op = 0; op < OPS; op++) {
		seed = seed * 1103515245u + 12345u;
		size_t i = (seed >> 8) % LIVE;
		if (live[i]) {
			for (size_t k = 0; k < len[i]; k += 512)
				ASSERT_EQ(live[i][k], (uint8_t)i);
			kvl__arena_free(&a, live[i], len[i]);
			live[i] = NULL;
			continue;
		}
		len[i] = lens[(seed >> 20) % 3];
		live[i] = kvl__arena_alloc(&a, len[i]);
		ASSERT_TRUE(live[i] != NULL);
		for (size_t j = 0; j < LIVE; j++)
			if (j != i && live[j])
				ASSERT_TRUE(live[j] + len[j] <= live[i] ||
				            live[i] + len[i] <= live[j]);
		memset(live[i], (int)i, len[i]);
	}
	kvl__arena_destroy(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_consecutive_allocations_are_a_run),
		cmocka_unit_test(test_freed_run_is_refilled_in_order),
		cmocka_unit_test(test_run_goes_on_before_filling_holes),
		cmocka_unit_test(test_run_breaks_at_a_taken_block),
		cmocka_unit_test(test_run_ends_with_its_chunk),
		cmocka_unit_test(test_free_chunk_serves_another_length),
		cmocka_unit_test(test_reserve_pins_ahead),
		cmocka_unit_test(test_allocator_refuses),
		cmocka_unit_test(test_model),
		cmocka_unit_test(test_chunk_bytes_follow_capacity),
	};
	return cmocka_run_group_tests_name("arena", tests, NULL, NULL);
}
