/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_lookup.c — restorable sets, kvl_bitmap_max and the in-process rank
 * group.
 *
 * Covers the design's worked example (a full-attention pool and a recurrent
 * pool over pages a, b, c, d, on one rank and across two), each hit policy on
 * hand-checked inputs, word boundaries against a brute-force reference that
 * applies the definition directly, every error path, and the rank group:
 * many rounds across four threads, disagreeing ranks, a missing rank (time
 * out, then broken), a group of one.
 *
 * Threads never call cmocka's assertions (they longjmp into the main thread's
 * test); they record what they saw and the main thread checks it after join.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/rand.h"

#include "kvlink.h"

#define SENTINEL 0xA5A5A5A5A5A5A5A5ULL

/* Deterministic generator, the same on every libc. */
static int bit(const uint64_t *bits, size_t p)
{
	return (int)((bits[p / 64] >> (p % 64)) & 1);
}

/* Asserts that bits over 0..n_pages is exactly the set `want` (a list of
 * prefix lengths, ascending, n_want of them), bit by bit. */
static void assert_set(const uint64_t *bits, size_t n_pages,
                       const size_t *want, size_t n_want)
{
	size_t k = 0;
	for (size_t p = 0; p <= n_pages; p++) {
		int expect = k < n_want && want[k] == p;
		if (expect)
			k++;
		if (bit(bits, p) != expect)
			print_error("prefix length %zu: expected bit %d\n", p,
			            expect);
		assert_int_equal(bit(bits, p), expect);
	}
	assert_int_equal(k, n_want);
	/* Nothing above n_pages in the last word. */
	for (size_t p = n_pages + 1; p < kvl_bitmap_words(n_pages) * 64; p++)
		assert_int_equal(bit(bits, p), 0);
}

#define ASSERT_SET(bits, n_pages, ...)                                     \
	do {                                                               \
		const size_t want_[] = {__VA_ARGS__};                      \
		assert_set((bits), (n_pages), want_,                       \
		           sizeof want_ / sizeof want_[0]);                \
	} while (0)

static const kvl_policy ALL = {KVL_HIT_ALL_PAGES, 0};

static kvl_policy trailing(uint32_t w)
{
	kvl_policy p = {KVL_HIT_TRAILING_PAGES, w};
	return p;
}

/* One pool's set: shorthand for the hand-checked cases. */
static void one_pool(kvl_policy pol, const uint8_t *present, size_t n,
                     uint64_t *bits)
{
	const uint8_t *pres[1] = {present};
	assert_int_equal(kvl_restorable_set( &pol, pres, 1,n, bits,
	                                    kvl_bitmap_words(n)),
	                 KVL_OK);
}

/* ============================================================ the example */

/* Pages a, b, c, d. kv: ALL_PAGES, all present. mamba: TRAILING_PAGES(1),
 * present only after b and after d. */
static const uint8_t EX_KV[4] = {1, 1, 1, 1};
static const uint8_t EX_MAMBA[4] = {0, 1, 0, 1};

static int example_rank0(uint64_t *bits)
{
	kvl_policy pol[2] = {ALL, {KVL_HIT_TRAILING_PAGES, 1}};
	const uint8_t *pres[2] = {EX_KV, EX_MAMBA};
	return kvl_restorable_set( pol, pres, 2,4, bits, 1);
}

/* The second rank: kv has a and b only, mamba after a and after b: {1, 2}. */
static int example_rank1(uint64_t *bits)
{
	static const uint8_t kv[4] = {1, 1, 0, 0};
	static const uint8_t mamba[4] = {1, 1, 0, 0};
	kvl_policy pol[2] = {ALL, {KVL_HIT_TRAILING_PAGES, 1}};
	const uint8_t *pres[2] = {kv, mamba};
	return kvl_restorable_set( pol, pres, 2,4, bits, 1);
}

static void test_example_one_rank(void **state)
{
	(void)state;
	uint64_t bits[1] = {SENTINEL};
	assert_int_equal(example_rank0(bits), KVL_OK);
	/* {2, 4} plus the trivial empty prefix. */
	assert_int_equal(bit(bits, 0), 1);
	assert_int_equal(bit(bits, 1), 0);
	assert_int_equal(bit(bits, 2), 1);
	assert_int_equal(bit(bits, 3), 0);
	assert_int_equal(bit(bits, 4), 1);
	assert_int_equal(bits[0], 0x15);
	assert_int_equal(kvl_bitmap_max(bits, 1), 4);

	uint64_t other[1];
	assert_int_equal(example_rank1(other), KVL_OK);
	ASSERT_SET(other, 4, 0, 1, 2);
	assert_int_equal(kvl_bitmap_max(other, 1), 2);
}

struct example_arg {
	kvl_rank_group *group;
	int rank;
	int rc_set, rc_reduce;
	uint64_t bits[1];
};

static void *example_thread(void *p)
{
	struct example_arg *a = p;
	a->rc_set = a->rank == 0 ? example_rank0(a->bits)
	                         : example_rank1(a->bits);
	a->rc_reduce = kvl_rank_group_allreduce(a->bits, 1, a->group);
	return NULL;
}

static void test_example_two_ranks(void **state)
{
	(void)state;
	kvl_rank_group *g = NULL;
	assert_int_equal(kvl_rank_group_create(2, 10000, &g), KVL_OK);
	assert_non_null(g);
	struct example_arg a[2];
	pthread_t t[2];
	for (int r = 0; r < 2; r++) {
		a[r] = (struct example_arg){.group = g, .rank = r};
		assert_int_equal(pthread_create(&t[r], NULL, example_thread,
		                                &a[r]),
		                 0);
	}
	for (int r = 0; r < 2; r++) {
		pthread_join(t[r], NULL);
		assert_int_equal(a[r].rc_set, KVL_OK);
		assert_int_equal(a[r].rc_reduce, KVL_OK);
		/* {2, 4} ∩ {1, 2} = {2}: the longest common prefix is 2. */
		ASSERT_SET(a[r].bits, 4, 0, 2);
		assert_int_equal(kvl_bitmap_max(a[r].bits, 1), 2);
	}
	kvl_rank_group_free(g);
}

/* ========================================================== single policies */

static void test_all_pages(void **state)
{
	(void)state;
	uint64_t bits[1];
	static const uint8_t full[5] = {1, 1, 1, 1, 1};
	static const uint8_t hole[5] = {1, 1, 0, 1, 1};
	static const uint8_t first[5] = {0, 1, 1, 1, 1};
	static const uint8_t last[5] = {1, 1, 1, 1, 0};
	static const uint8_t none[5] = {0, 0, 0, 0, 0};
	static const uint8_t nonzero[5] = {7, 255, 2, 1, 9};

	one_pool(ALL, full, 5, bits);
	ASSERT_SET(bits, 5, 0, 1, 2, 3, 4, 5);
	one_pool(ALL, hole, 5, bits);
	ASSERT_SET(bits, 5, 0, 1, 2);
	one_pool(ALL, first, 5, bits);
	ASSERT_SET(bits, 5, 0);
	one_pool(ALL, last, 5, bits);
	ASSERT_SET(bits, 5, 0, 1, 2, 3, 4);
	one_pool(ALL, none, 5, bits);
	ASSERT_SET(bits, 5, 0);
	/* Any non-zero byte means present. */
	one_pool(ALL, nonzero, 5, bits);
	ASSERT_SET(bits, 5, 0, 1, 2, 3, 4, 5);
	/* The window is ignored for ALL_PAGES. */
	kvl_policy odd = {KVL_HIT_ALL_PAGES, 3};
	one_pool(odd, hole, 5, bits);
	ASSERT_SET(bits, 5, 0, 1, 2);
}

static void test_trailing_pages(void **state)
{
	(void)state;
	uint64_t bits[1];
	/* Page:                    0  1  2  3  4  5 */
	static const uint8_t pr[6] = {1, 1, 0, 1, 1, 1};

	one_pool(trailing(1), pr, 6, bits);
	ASSERT_SET(bits, 6, 0, 1, 2, 4, 5, 6);
	one_pool(trailing(2), pr, 6, bits);
	ASSERT_SET(bits, 6, 0, 1, 2, 5, 6);
	one_pool(trailing(3), pr, 6, bits);
	ASSERT_SET(bits, 6, 0, 1, 2, 6);
	/* Windows larger than p reach back to page 0 only. */
	one_pool(trailing(4), pr, 6, bits);
	ASSERT_SET(bits, 6, 0, 1, 2);
	one_pool(trailing(UINT32_MAX), pr, 6, bits);
	ASSERT_SET(bits, 6, 0, 1, 2);

	/* Page 0 missing: a window of w keeps p only from p = w + 1 on. */
	static const uint8_t pr2[5] = {0, 1, 1, 1, 1};
	one_pool(trailing(1), pr2, 5, bits);
	ASSERT_SET(bits, 5, 0, 2, 3, 4, 5);
	one_pool(trailing(2), pr2, 5, bits);
	ASSERT_SET(bits, 5, 0, 3, 4, 5);
	one_pool(trailing(3), pr2, 5, bits);
	ASSERT_SET(bits, 5, 0, 4, 5);
	one_pool(trailing(4), pr2, 5, bits);
	ASSERT_SET(bits, 5, 0, 5);
	one_pool(trailing(5), pr2, 5, bits);
	ASSERT_SET(bits, 5, 0);

	/* Only the last page present: just p = n for w = 1. */
	static const uint8_t pr3[4] = {0, 0, 0, 1};
	one_pool(trailing(1), pr3, 4, bits);
	ASSERT_SET(bits, 4, 0, 4);
	one_pool(trailing(2), pr3, 4, bits);
	ASSERT_SET(bits, 4, 0);
}

static void test_null_pool(void **state)
{
	(void)state;
	uint64_t bits[1];
	static const uint8_t hole[5] = {1, 1, 1, 0, 1};
	kvl_policy pol[3] = {ALL, trailing(1), trailing(2)};

	/* Pools 1 and 2 are left out: only the kv pool constrains. */
	const uint8_t *pres[3] = {hole, NULL, NULL};
	assert_int_equal(kvl_restorable_set( pol, pres, 3,5, bits, 1), KVL_OK);
	ASSERT_SET(bits, 5, 0, 1, 2, 3);

	/* Every pool left out: every prefix. */
	const uint8_t *none[3] = {NULL, NULL, NULL};
	assert_int_equal(kvl_restorable_set( pol, none, 3,5, bits, 1), KVL_OK);
	ASSERT_SET(bits, 5, 0, 1, 2, 3, 4, 5);

	/* No pools at all: the same; the arrays may then be NULL. */
	assert_int_equal(kvl_restorable_set( NULL, NULL, 0,5, bits, 1), KVL_OK);
	ASSERT_SET(bits, 5, 0, 1, 2, 3, 4, 5);
}

static void test_zero_pages(void **state)
{
	(void)state;
	uint64_t bits[2] = {SENTINEL, SENTINEL};
	kvl_policy pol[3] = {ALL, trailing(1), trailing(7)};
	static const uint8_t dummy[1] = {0};
	const uint8_t *pres[3] = {dummy, dummy, NULL};

	assert_int_equal(kvl_bitmap_words(0), 1);
	assert_int_equal(kvl_restorable_set( pol, pres, 3,0, bits, 1), KVL_OK);
	assert_int_equal(bits[0], 1);
	assert_int_equal(bits[1], SENTINEL); /* only the needed words */
	assert_int_equal(kvl_bitmap_max(bits, 1), 0);
	assert_int_equal(kvl_restorable_set( pol, pres, 3,0, bits, 0),
	                 KVL_ERANGE);
}

/* ================================================= against the definition */

/* The definition, applied literally: O(n * w) per pool. */
static void reference(size_t n, size_t n_pools, const kvl_policy *pol,
                      const uint8_t *const *present, uint64_t *bits)
{
	memset(bits, 0, kvl_bitmap_words(n) * sizeof *bits);
	for (size_t p = 0; p <= n; p++) {
		int ok = 1;
		for (size_t i = 0; i < n_pools && ok && p > 0; i++) {
			if (!present[i])
				continue;
			size_t from = 0;
			if (pol[i].kind == KVL_HIT_TRAILING_PAGES &&
			    p > pol[i].window)
				from = p - pol[i].window;
			for (size_t j = from; j < p; j++)
				if (!present[i][j])
					ok = 0;
		}
		if (ok)
			bits[p / 64] |= (uint64_t)1 << (p % 64);
	}
}

#define MAX_PAGES 200
#define MAX_POOLS 4

static void test_word_boundaries(void **state)
{
	(void)state;
	static const size_t sizes[] = {0,  1,   2,   62,  63,  64, 65,
	                               66, 127, 128, 129, 191, 192, 200};
	static uint8_t store[MAX_POOLS][MAX_PAGES];
	uint64_t got[MAX_PAGES / 64 + 2], want[MAX_PAGES / 64 + 2];
	uint64_t seed = 0x6b766c696e6bULL;
	unsigned nonempty = 0;

	for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
		size_t n = sizes[si];
		size_t nw = kvl_bitmap_words(n);
		for (int it = 0; it < 400; it++) {
			size_t n_pools = 1 + splitmix64(&seed) % MAX_POOLS;
			kvl_policy pol[MAX_POOLS];
			const uint8_t *pres[MAX_POOLS];
			/* Mostly-present pages so that long runs happen. */
			unsigned miss_per_256 = 1 + splitmix64(&seed) % 64;
			for (size_t i = 0; i < n_pools; i++) {
				if (splitmix64(&seed) % 3 == 0) {
					pol[i] = ALL;
				} else {
					uint32_t w = 1 + splitmix64(&seed) %
					                     (n + 3);
					if (splitmix64(&seed) % 4 == 0)
						w = 1 + splitmix64(&seed) % 4;
					pol[i] = trailing(w);
				}
				for (size_t j = 0; j < n; j++)
					store[i][j] = splitmix64(&seed) % 256 >=
					              miss_per_256;
				pres[i] = splitmix64(&seed) % 8 == 0 ? NULL
				                                   : store[i];
			}
			for (size_t w = 0; w < sizeof got / sizeof got[0]; w++)
				got[w] = SENTINEL;
			reference(n, n_pools, pol, pres, want);
			assert_int_equal(kvl_restorable_set( pol,
			                                    pres, n_pools,n, got, nw),
			                 KVL_OK);
			for (size_t w = 0; w < nw; w++) {
				if (got[w] != want[w])
					print_error("n_pages %zu, iteration "
					            "%d, word %zu\n",
					            n, it, w);
				assert_int_equal(got[w], want[w]);
			}
			assert_int_equal(got[nw], SENTINEL);
			assert_int_equal(bit(got, 0), 1);
			size_t max = kvl_bitmap_max(got, nw);
			assert_int_equal(bit(got, max), 1);
			for (size_t p = max + 1; p <= n; p++)
				assert_int_equal(bit(got, p), 0);
			if (max > 0)
				nonempty++;
		}
	}
	/* The generator does reach interesting sets. */
	assert_true(nonempty > 1000);
}

/* ================================================================= errors */

static void test_errors(void **state)
{
	(void)state;
	uint64_t bits[3] = {SENTINEL, SENTINEL, SENTINEL};
	static const uint8_t pr[130];
	const uint8_t *pres[2] = {pr, pr};
	kvl_policy pol[2] = {ALL, trailing(2)};

	/* Unknown policy kind, even on a pool that is left out. */
	pol[1].kind = (kvl_hit_policy)7;
	assert_int_equal(kvl_restorable_set( pol, pres, 2,4, bits, 3),
	                 KVL_EINVAL);
	const uint8_t *half[2] = {pr, NULL};
	assert_int_equal(kvl_restorable_set( pol, half, 2,4, bits, 3),
	                 KVL_EINVAL);
	pol[1].kind = (kvl_hit_policy)-1;
	assert_int_equal(kvl_restorable_set( pol, pres, 2,4, bits, 3),
	                 KVL_EINVAL);

	/* Window 0 for TRAILING_PAGES. */
	pol[1] = trailing(0);
	assert_int_equal(kvl_restorable_set( pol, pres, 2,4, bits, 3),
	                 KVL_EINVAL);
	pol[1] = trailing(2);

	/* NULL arrays. */
	assert_int_equal(kvl_restorable_set( pol, pres, 2,4, NULL, 3),
	                 KVL_EINVAL);
	assert_int_equal(kvl_restorable_set( NULL, pres, 2,4, bits, 3),
	                 KVL_EINVAL);
	assert_int_equal(kvl_restorable_set( pol, NULL, 2,4, bits, 3),
	                 KVL_EINVAL);

	/* Too few words: 63 pages fit one word, 64 need two, 128 three. */
	assert_int_equal(kvl_restorable_set( pol, pres, 2,63, bits, 0),
	                 KVL_ERANGE);
	assert_int_equal(kvl_restorable_set( pol, pres, 2,64, bits, 1),
	                 KVL_ERANGE);
	assert_int_equal(kvl_restorable_set( pol, pres, 2,128, bits, 2),
	                 KVL_ERANGE);

	/* Nothing was written by any failed call. */
	for (int w = 0; w < 3; w++)
		assert_int_equal(bits[w], SENTINEL);

	/* Enough words works; extra words are left alone. */
	assert_int_equal(kvl_restorable_set( pol, pres, 2,63, bits, 3), KVL_OK);
	assert_int_equal(bits[0], 1);
	assert_int_equal(bits[1], SENTINEL);
}

static void test_bitmap_max(void **state)
{
	(void)state;
	uint64_t b[4] = {0, 0, 0, 0};

	assert_int_equal(kvl_bitmap_max(NULL, 4), 0);
	assert_int_equal(kvl_bitmap_max(b, 0), 0);
	assert_int_equal(kvl_bitmap_max(b, 4), 0);
	b[0] = 1;
	assert_int_equal(kvl_bitmap_max(b, 4), 0);
	b[0] = 0x15;
	assert_int_equal(kvl_bitmap_max(b, 4), 4);
	b[0] = 1ULL << 63 | 1;
	assert_int_equal(kvl_bitmap_max(b, 4), 63);
	b[1] = 1;
	assert_int_equal(kvl_bitmap_max(b, 4), 64);
	assert_int_equal(kvl_bitmap_max(b, 1), 63); /* only n_words count */
	b[2] = 1ULL << 8 | 1ULL << 7;
	assert_int_equal(kvl_bitmap_max(b, 4), 136);
	b[3] = 1ULL << 63;
	assert_int_equal(kvl_bitmap_max(b, 4), 255);
	b[2] = 0;
	b[3] = 0;
	assert_int_equal(kvl_bitmap_max(b, 4), 64);
}

/* ============================================================= rank group */

#define N_RANKS 4
#define N_ROUNDS 2000
#define MAX_WORDS 5

/* Rank r's bitmap in round k, the same wherever it is computed. Mostly ones
 * so that the AND of four is not simply zero. */
static void round_bits(unsigned round, unsigned rank, uint64_t *bits,
                       size_t n_words)
{
	uint64_t s = (uint64_t)round << 32 | rank;
	for (size_t w = 0; w < n_words; w++)
		bits[w] = splitmix64(&s) | splitmix64(&s);
}

static size_t round_words(unsigned round)
{
	return 1 + (round * 7 + round / 13) % MAX_WORDS;
}

struct rounds_arg {
	kvl_rank_group *group;
	unsigned rank;
	unsigned bad_rc, bad_bits;
	int first_rc;
};

static void *rounds_thread(void *p)
{
	struct rounds_arg *a = p;
	for (unsigned k = 0; k < N_ROUNDS; k++) {
		size_t n = round_words(k);
		uint64_t mine[MAX_WORDS + 1], want[MAX_WORDS], tmp[MAX_WORDS];
		round_bits(k, a->rank, mine, n);
		mine[n] = SENTINEL;
		for (size_t w = 0; w < n; w++)
			want[w] = ~(uint64_t)0;
		for (unsigned r = 0; r < N_RANKS; r++) {
			round_bits(k, r, tmp, n);
			for (size_t w = 0; w < n; w++)
				want[w] &= tmp[w];
		}
		int rc = kvl_rank_group_allreduce(mine, n, a->group);
		if (rc != KVL_OK) {
			if (!a->bad_rc++)
				a->first_rc = rc;
			continue;
		}
		if (memcmp(mine, want, n * sizeof *mine) != 0 ||
		    mine[n] != SENTINEL)
			a->bad_bits++;
	}
	return NULL;
}

static void test_group_rounds(void **state)
{
	(void)state;
	kvl_rank_group *g = NULL;
	assert_int_equal(kvl_rank_group_create(N_RANKS, 30000, &g), KVL_OK);
	struct rounds_arg a[N_RANKS];
	pthread_t t[N_RANKS];
	for (unsigned r = 0; r < N_RANKS; r++) {
		a[r] = (struct rounds_arg){.group = g, .rank = r};
		assert_int_equal(pthread_create(&t[r], NULL, rounds_thread,
		                                &a[r]),
		                 0);
	}
	for (unsigned r = 0; r < N_RANKS; r++) {
		pthread_join(t[r], NULL);
		if (a[r].bad_rc)
			print_error("rank %u: first failure %s\n", r,
			            kvl_err_name(a[r].first_rc));
		assert_int_equal(a[r].bad_rc, 0);
		assert_int_equal(a[r].bad_bits, 0);
	}
	kvl_rank_group_free(g);
}

struct call_arg {
	kvl_rank_group *group;
	size_t n_words;
	int null_bits; /* pass NULL instead of bits */
	uint64_t bits[4];
	int rc;
};

static void *call_thread(void *p)
{
	struct call_arg *a = p;
	a->rc = kvl_rank_group_allreduce(a->null_bits ? NULL : a->bits,
	                                 a->n_words, a->group);
	return NULL;
}

/* Runs one round with n callers on their own threads. */
static void run_round(struct call_arg *a, unsigned n)
{
	pthread_t t[8];
	for (unsigned r = 0; r < n; r++)
		assert_int_equal(
			pthread_create(&t[r], NULL, call_thread, &a[r]), 0);
	for (unsigned r = 0; r < n; r++)
		pthread_join(t[r], NULL);
}

static void test_group_mismatch(void **state)
{
	(void)state;
	kvl_rank_group *g = NULL;
	assert_int_equal(kvl_rank_group_create(3, 30000, &g), KVL_OK);
	struct call_arg a[3];
	for (unsigned r = 0; r < 3; r++) {
		a[r] = (struct call_arg){.group = g, .n_words = 1};
		for (int w = 0; w < 4; w++)
			a[r].bits[w] = SENTINEL + r + (unsigned)w;
	}
	a[1].n_words = 2;
	run_round(a, 3);
	for (unsigned r = 0; r < 3; r++) {
		assert_int_equal(a[r].rc, KVL_EINVAL);
		for (int w = 0; w < 4; w++)
			assert_int_equal(a[r].bits[w],
			                 SENTINEL + r + (unsigned)w);
	}

	/* A NULL bitmap fails its round the same way. */
	for (unsigned r = 0; r < 3; r++)
		a[r].n_words = 2;
	a[1].null_bits = 1;
	run_round(a, 3);
	for (unsigned r = 0; r < 3; r++) {
		assert_int_equal(a[r].rc, KVL_EINVAL);
		for (int w = 0; w < 4; w++)
			assert_int_equal(a[r].bits[w],
			                 SENTINEL + r + (unsigned)w);
	}
	a[1].null_bits = 0;

	/* The group is not broken: the next round agrees and works. */
	for (unsigned r = 0; r < 3; r++) {
		a[r].n_words = 2;
		a[r].bits[0] = ~(uint64_t)0 ^ (1ULL << r);
		a[r].bits[1] = 0xF0F0ULL | (1ULL << (40 + r));
		a[r].bits[2] = SENTINEL;
	}
	run_round(a, 3);
	for (unsigned r = 0; r < 3; r++) {
		assert_int_equal(a[r].rc, KVL_OK);
		assert_int_equal(a[r].bits[0], ~(uint64_t)0 ^ 7);
		assert_int_equal(a[r].bits[1], 0xF0F0ULL);
		assert_int_equal(a[r].bits[2], SENTINEL);
	}
	kvl_rank_group_free(g);
}

static void test_group_timeout(void **state)
{
	(void)state;
	/* Three ranks, two show up: one of them times out and breaks the
	 * group, the other is woken with KVL_ESTATE. */
	kvl_rank_group *g = NULL;
	assert_int_equal(kvl_rank_group_create(3, 100, &g), KVL_OK);
	struct call_arg a[2];
	for (unsigned r = 0; r < 2; r++) {
		a[r] = (struct call_arg){.group = g, .n_words = 1};
		a[r].bits[0] = SENTINEL;
	}
	run_round(a, 2);
	unsigned timed_out = 0;
	for (unsigned r = 0; r < 2; r++) {
		if (a[r].rc == KVL_ETIMEDOUT)
			timed_out++;
		else
			assert_int_equal(a[r].rc, KVL_ESTATE);
		assert_int_equal(a[r].bits[0], SENTINEL);
	}
	assert_int_equal(timed_out, 1);

	/* The latecomer, and every later call, find it broken. */
	uint64_t b[1] = {SENTINEL};
	for (int i = 0; i < 3; i++) {
		assert_int_equal(kvl_rank_group_allreduce(b, 1, g), KVL_ESTATE);
		assert_int_equal(b[0], SENTINEL);
	}
	kvl_rank_group_free(g);

	/* A lone caller in a group of two. */
	assert_int_equal(kvl_rank_group_create(2, 100, &g), KVL_OK);
	assert_int_equal(kvl_rank_group_allreduce(b, 1, g), KVL_ETIMEDOUT);
	assert_int_equal(kvl_rank_group_allreduce(b, 1, g), KVL_ESTATE);
	assert_int_equal(b[0], SENTINEL);
	kvl_rank_group_free(g);
}

static void test_group_create_free(void **state)
{
	(void)state;
	kvl_rank_group *g = (kvl_rank_group *)&g;
	assert_int_equal(kvl_rank_group_create(0, 100, &g), KVL_EINVAL);
	assert_ptr_equal(g, (kvl_rank_group *)&g); /* out untouched */
	assert_int_equal(kvl_rank_group_create(2, 100, NULL), KVL_EINVAL);
	kvl_rank_group_free(NULL);

	uint64_t b[2] = {0x15, 0};
	assert_int_equal(kvl_rank_group_allreduce(b, 2, NULL), KVL_EINVAL);
}

static void test_group_one_rank(void **state)
{
	(void)state;
	/* Timeout 0: a group of one never waits, so it never times out. */
	kvl_rank_group *g = NULL;
	assert_int_equal(kvl_rank_group_create(1, 0, &g), KVL_OK);
	for (unsigned k = 0; k < 1000; k++) {
		uint64_t b[3] = {k, ~(uint64_t)k, SENTINEL};
		assert_int_equal(kvl_rank_group_allreduce(b, 2, g), KVL_OK);
		assert_int_equal(b[0], k);
		assert_int_equal(b[1], ~(uint64_t)k);
		assert_int_equal(b[2], SENTINEL);
	}
	/* A bad bitmap fails its round without breaking the group. */
	uint64_t b[1] = {5};
	assert_int_equal(kvl_rank_group_allreduce(b, 0, g), KVL_EINVAL);
	assert_int_equal(kvl_rank_group_allreduce(b, 1, g), KVL_OK);
	assert_int_equal(b[0], 5);
	kvl_rank_group_free(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_example_one_rank),
		cmocka_unit_test(test_example_two_ranks),
		cmocka_unit_test(test_all_pages),
		cmocka_unit_test(test_trailing_pages),
		cmocka_unit_test(test_null_pool),
		cmocka_unit_test(test_zero_pages),
		cmocka_unit_test(test_word_boundaries),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_bitmap_max),
		cmocka_unit_test(test_group_rounds),
		cmocka_unit_test(test_group_mismatch),
		cmocka_unit_test(test_group_timeout),
		cmocka_unit_test(test_group_create_free),
		cmocka_unit_test(test_group_one_rank),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
