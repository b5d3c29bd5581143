/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_fault.c — the fault-injection store ("fault+<inner URI>",
 * store_fault.c) over the embedded store: URI rebuilding and option checks,
 * every kind of injected fault (per-key errors, corruption, eviction,
 * latency, a store that is down, one failing get or put call), determinism
 * for a seed, run-time control through kvl__fault_set, nesting, the trusted
 * flag, corruption caught by kvl_pages_get, and many threads at once.
 *
 * Timing is measured only as a lower bound (a delayed call takes at least
 * the delay); probabilities are checked with wide bounds.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "support/clock.h"
#include "support/faults.h"
#include "support/kvl_assert.h"
#include "support/rand.h"
#include "support/stores.h"

#include "kvlink.h"
#include "store/store.h"
#include "store/fault.h"

/* --------------------------------------------------------------- helpers */

static void set_error(kvl_store *s, double p)
{
	kvl__fault_cfg c = fault_cfg(s);
	c.error = p;
	fault_set_cfg(s, &c);
}

struct fcounts {
	uint64_t errors, corruptions, evictions, delays;
};

static struct fcounts counts_of(kvl_store *s)
{
	struct fcounts c = { 0, 0, 0, 0 };
	ASSERT_CODE(kvl__fault_counts(s, &c.errors, &c.corruptions,
	                              &c.evictions, &c.delays),
	            0);
	return c;
}

/* Number of bits that differ between a and b. */
static size_t bits_differ(const uint8_t *a, const uint8_t *b, size_t n)
{
	size_t d = 0;
	for (size_t i = 0; i < n; i++)
		d += (size_t)__builtin_popcount((unsigned)(a[i] ^ b[i]));
	return d;
}

/* Keys "<prefix><i>" for i < n, in one allocation (free the array). */
static char **make_keys(const char *prefix, size_t n)
{
	char **k = malloc(n * (sizeof *k + 48));
	assert_non_null(k);
	char *text = (char *)(k + n);
	for (size_t i = 0; i < n; i++) {
		k[i] = text + i * 48;
		snprintf(k[i], 48, "%s%zu", prefix, i);
	}
	return k;
}

/* -------------------------------------------------------------- the URI */

static void test_uri_rebuild(void **state)
{
	(void)state;
	kvl_store_stats st;
	kvl_store *s;

	/* Inner options reach the inner store; fault.* ones do not (the
	 * embedded store would reject them as unknown). */
	s = open_ok("fault+mem:?capacity=64KiB&fault.seed=7&fault.error=0");
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_U64(st.capacity, 64 * 1024);
	uint8_t *big = calloc(1, 100 * 1024);
	assert_non_null(big);
	ASSERT_CODE(put1_rc(s, "big", big, 100 * 1024), KVL_ERANGE);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "capacity");
	free(big);
	kvl_store_close(s);

	s = open_ok("fault+mem:?fault.seed=3&capacity=1MiB&verify=1"
	            "&fault.corrupt=0");
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_U64(st.capacity, 1024 * 1024);
	kvl_store_close(s);

	s = open_ok("fault+mem:");
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_U64(st.capacity, 8ull << 30);
	kvl_store_close(s);

	s = open_ok("FAULT+MEM:?capacity=2MiB"); /* schemes ignore case */
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_U64(st.capacity, 2 * 1024 * 1024);
	kvl_store_close(s);

	/* The inner store's own errors come back with its message. */
	open_fails("fault+mem:?capcity=1MiB&fault.error=0.5", KVL_EPARSE,
	           "capcity");
	open_fails("fault+mem:?capacity=0", KVL_EPARSE, "capacity=0");
	open_fails("fault+mem:?capacity=lots", KVL_EPARSE, "lots");
	/* The authority and the path are passed on (and mem refuses them). */
	open_fails("fault+mem://somehost:1/some/path?capacity=1MiB",
	           KVL_EPARSE, "somehost:1/some/path");
	open_fails("fault+mem:rel/path", KVL_EPARSE, "rel/path");
	open_fails("fault+nosuch:?fault.error=0.5", KVL_ENOTSUP, "nosuch");
	open_fails("fault+:", KVL_EPARSE, "fault+");
}

static void test_unknown_option(void **state)
{
	(void)state;
	open_fails("fault+mem:?fault.eror=0.1", KVL_EPARSE, "fault.eror");
	open_fails("fault+mem:?capacity=1MiB&fault.latency=5", KVL_EPARSE,
	           "'fault.latency'");
	open_fails("fault+mem:?fault.=1", KVL_EPARSE, "'fault.'");
	/* The fault options are the outer store's: the inner fault store of
	 * a nested URI never sees them, so they are not "unknown" there. */
	kvl_store_close(open_ok("fault+fault+mem:?fault.error=0.5"));
}

static void test_bad_values(void **state)
{
	(void)state;
	static const struct {
		const char *uri, *needle;
	} bad[] = {
		{ "fault+mem:?fault.error=1.5", "fault.error=1.5" },
		{ "fault+mem:?fault.error=-0.1", "fault.error=-0.1" },
		{ "fault+mem:?fault.error=nan", "fault.error=nan" },
		{ "fault+mem:?fault.corrupt=2", "fault.corrupt=2" },
		{ "fault+mem:?fault.evict=abc", "fault.evict=abc" },
		{ "fault+mem:?fault.latency_p=1.01", "fault.latency_p" },
		{ "fault+mem:?fault.latency_ms=-5", "fault.latency_ms" },
		{ "fault+mem:?fault.latency_ms=3600001", "fault.latency_ms" },
		{ "fault+mem:?fault.seed=x", "fault.seed=x" },
		{ "fault+mem:?fault.down=2", "fault.down=2" },
		{ "fault+mem:?fault.fail_get_call=-1", "fault.fail_get_call" },
		{ "fault+mem:?fault.fail_put_call=1.5", "fault.fail_put_call" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		open_fails(bad[i].uri, KVL_EPARSE, bad[i].needle);

	/* The bounds themselves are fine. */
	kvl_store_close(open_ok("fault+mem:?fault.error=0&fault.corrupt=1"
	                        "&fault.evict=0.0&fault.latency_p=1.0"
	                        "&fault.latency_ms=0&fault.seed=0"
	                        "&fault.down=0&fault.fail_get_call=0"));
}

/* ------------------------------------------------------- per-key faults */

static void test_passthrough(void **state)
{
	(void)state;
	kvl_store *s = open_ok("fault+mem:?capacity=16MiB&fault.error=0"
	                       "&fault.corrupt=0&fault.evict=0&fault.seed=9");
	enum { N = 4, A = 1000, B = 3000 };
	static uint8_t src[N][A + B], dst[N][A + B];
	const char *keys[N] = { "p0", "p1", "p2", "p3" };
	kvl_iov pieces[2 * N];
	kvl_range ranges[2 * N];
	size_t two[N] = { 2, 2, 2, 2 };
	int res[N];
	int got[N];

	for (int i = 0; i < N; i++) {
		fill_pattern(src[i], sizeof src[i], (uint64_t)i + 1);
		pieces[2 * i] = (kvl_iov){ src[i], A };
		pieces[2 * i + 1] = (kvl_iov){ src[i] + A, B };
		/* Read the two halves swapped into dst. */
		ranges[2 * i] = (kvl_range){ A, dst[i], B };
		ranges[2 * i + 1] = (kvl_range){ 0, dst[i] + B, A };
	}
	ASSERT_CODE(kvl_store_put(s, keys, N, pieces, two, res), 0);
	for (int i = 0; i < N; i++)
		ASSERT_CODE(res[i], KVL_PUT_STORED);
	ASSERT_CODE(kvl_store_put(s, keys, N, pieces, two, res), 0);
	for (int i = 0; i < N; i++)
		ASSERT_CODE(res[i], KVL_PUT_PRESENT);

	memset(dst, 0, sizeof dst);
	ASSERT_CODE(kvl_store_get(s, keys, N, ranges, two, got), 0);
	for (int i = 0; i < N; i++) {
		ASSERT_CODE(got[i], 0);
		assert_memory_equal(dst[i], src[i] + A, B);
		assert_memory_equal(dst[i] + B, src[i], A);
	}
	for (int i = 0; i < N; i++)
		ASSERT_EQ(exists1_rc(s, keys[i]), 1);

	/* A bad key in the middle: store.c splits the call around it. */
	const char *mixed[3] = { "p0", "", "p2" };
	int ex[3];
	ASSERT_CODE(kvl_store_exists(s, mixed, 3, ex), 0);
	ASSERT_EQ(ex[0], 1);
	ASSERT_CODE(ex[1], KVL_EINVAL);
	ASSERT_EQ(ex[2], 1);

	ASSERT_EQ(remove1_rc(s, "p1"), 1);
	ASSERT_EQ(remove1_rc(s, "p1"), 0);
	ASSERT_EQ(exists1_rc(s, "p1"), 0);
	ASSERT_CODE(get1_rc(s, "p1", 0, dst[1], 16), KVL_ENOTFOUND);
	ASSERT_CODE(get1_rc(s, "p2", 0, dst[2], A + B + 1), KVL_ERANGE);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "beyond");

	kvl_store_stats st;
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_U64(st.objects, 3);
	ASSERT_U64(st.puts, 4);
	ASSERT_U64(st.errors, 1); /* the range error, counted by mem */
	struct fcounts c = counts_of(s);
	ASSERT_U64(c.errors, 0);
	ASSERT_U64(c.corruptions, 0);
	ASSERT_U64(c.evictions, 0);
	ASSERT_U64(c.delays, 0);
	kvl_store_close(s);
}

static void test_error_all(void **state)
{
	(void)state;
	kvl_store *s = open_ok("fault+mem:?capacity=16MiB&fault.error=1");
	enum { N = 8, LEN = 256 };
	char **keys = make_keys("e", N);
	static uint8_t src[LEN], dst[N][LEN];
	kvl_iov pieces[N];
	kvl_range ranges[N];
	size_t ones[N];
	int res[N];
	int got[N];

	fill_pattern(src, LEN, 42);
	for (int i = 0; i < N; i++) {
		pieces[i] = (kvl_iov){ src, LEN };
		ranges[i] = (kvl_range){ 0, dst[i], LEN };
		ones[i] = 1;
	}
	const char *const *k = (const char *const *)keys;

	/* put: every key fails and nothing is written. */
	ASSERT_CODE(kvl_store_put(s, k, N, pieces, ones, res), 0);
	for (int i = 0; i < N; i++)
		ASSERT_CODE(res[i], KVL_EIO);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "injected I/O error");
	set_error(s, 0);
	ASSERT_CODE(kvl_store_exists(s, k, N, res), 0);
	for (int i = 0; i < N; i++)
		ASSERT_EQ(res[i], 0);

	ASSERT_CODE(kvl_store_put(s, k, N, pieces, ones, res), 0);
	for (int i = 0; i < N; i++)
		ASSERT_CODE(res[i], KVL_PUT_STORED);
	set_error(s, 1);

	/* get: nothing of any key is read. */
	memset(dst, 0xAA, sizeof dst);
	ASSERT_CODE(kvl_store_get(s, k, N, ranges, ones, got), 0);
	for (int i = 0; i < N; i++) {
		ASSERT_CODE(got[i], KVL_EIO);
		for (int j = 0; j < LEN; j++)
			if (dst[i][j] != 0xAA)
				fail_msg("key %d byte %d written by a failed "
				         "get",
				         i, j);
	}
	ASSERT_CODE(kvl_store_exists(s, k, N, res), 0);
	for (int i = 0; i < N; i++)
		ASSERT_CODE(res[i], KVL_EIO);
	ASSERT_CODE(kvl_store_remove(s, k, N, res), 0);
	for (int i = 0; i < N; i++)
		ASSERT_CODE(res[i], KVL_EIO);

	/* The failed remove removed nothing. */
	set_error(s, 0);
	ASSERT_CODE(kvl_store_exists(s, k, N, res), 0);
	for (int i = 0; i < N; i++)
		ASSERT_EQ(res[i], 1);

	ASSERT_U64(counts_of(s).errors, 4 * N);
	kvl_store_stats st;
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_U64(st.errors, 4 * N); /* mem itself failed nothing */
	kvl_store_close(s);
	free(keys);
}

enum { RATE_N = 2000, RATE_LEN = 64 };

/* Puts RATE_N keys in one call into a new store opened from `uri`; writes
 * the per-key results into res and returns the store. */
static kvl_store *rate_put(const char *uri, char **keys, const uint8_t *src,
                           int *res)
{
	static kvl_iov pieces[RATE_N];
	static size_t ones[RATE_N];
	kvl_store *s = open_ok(uri);
	for (int i = 0; i < RATE_N; i++) {
		pieces[i] = (kvl_iov){ (void *)(src + (size_t)i * RATE_LEN),
		                       RATE_LEN };
		ones[i] = 1;
	}
	ASSERT_CODE(kvl_store_put(s, (const char *const *)keys, RATE_N,
	                          pieces, ones, res),
	            0);
	return s;
}

static void test_error_rate(void **state)
{
	(void)state;
	const char *uri = "fault+mem:?capacity=64MiB&fault.error=0.3"
	                  "&fault.seed=7";
	char **keys = make_keys("rate-key-", RATE_N);
	const char *const *k = (const char *const *)keys;
	uint8_t *src = malloc((size_t)RATE_N * RATE_LEN);
	uint8_t *dst = malloc((size_t)RATE_N * RATE_LEN);
	int *a = malloc(RATE_N * sizeof *a), *b = malloc(RATE_N * sizeof *b);
	int *got = malloc(RATE_N * sizeof *got);
	kvl_range *ranges = malloc(RATE_N * sizeof *ranges);
	size_t *ones = malloc(RATE_N * sizeof *ones);
	assert_true(src && dst && a && b && got && ranges && ones);
	fill_pattern(src, (size_t)RATE_N * RATE_LEN, 77);

	kvl_store *s1 = rate_put(uri, keys, src, a);
	int fails = 0;
	for (int i = 0; i < RATE_N; i++) {
		if (a[i] == KVL_EIO)
			fails++;
		else
			ASSERT_CODE(a[i], KVL_PUT_STORED);
	}
	print_message("    error=0.3: %d of %d keys failed (%.1f %%)\n", fails,
	              RATE_N, 100.0 * fails / RATE_N);
	if (fails < RATE_N / 5 || fails > RATE_N * 2 / 5)
		fail_msg("%d of %d keys failed with error=0.3 (expected 20 "
		         "to 40 %%)",
		         fails, RATE_N);
	ASSERT_U64(counts_of(s1).errors, (uint64_t)fails);

	/* The same seed and calls give the same keys. */
	kvl_store *s2 = rate_put(uri, keys, src, b);
	for (int i = 0; i < RATE_N; i++)
		if (a[i] != b[i])
			fail_msg("seed 7: key %d: %s then %s", i,
			         kvl_err_name(a[i]), kvl_err_name(b[i]));
	kvl_store_close(s2);

	/* Another seed gives another pattern. */
	kvl_store *s3 = rate_put("fault+mem:?capacity=64MiB&fault.error=0.3"
	                         "&fault.seed=8",
	                         keys, src, b);
	int same = 1;
	for (int i = 0; i < RATE_N; i++)
		same &= a[i] == b[i];
	if (same)
		fail_msg("seeds 7 and 8 failed the very same %d keys", fails);
	kvl_store_close(s3);

	/* Exactly the keys that failed were not written. */
	set_error(s1, 0);
	ASSERT_CODE(kvl_store_exists(s1, k, RATE_N, b), 0);
	for (int i = 0; i < RATE_N; i++)
		ASSERT_EQ(b[i], a[i] == KVL_EIO ? 0 : 1);

	/* A get with errors: the other keys read their exact bytes. */
	set_error(s1, 0.3);
	memset(dst, 0xAA, (size_t)RATE_N * RATE_LEN);
	for (int i = 0; i < RATE_N; i++) {
		ranges[i] = (kvl_range){ 0, dst + (size_t)i * RATE_LEN,
		                         RATE_LEN };
		ones[i] = 1;
	}
	uint64_t before = counts_of(s1).errors;
	ASSERT_CODE(kvl_store_get(s1, k, RATE_N, ranges, ones, got), 0);
	int read_fails = 0;
	for (int i = 0; i < RATE_N; i++) {
		const uint8_t *d = dst + (size_t)i * RATE_LEN;
		if (got[i] == KVL_EIO) {
			read_fails++;
			for (int j = 0; j < RATE_LEN; j++)
				if (d[j] != 0xAA)
					fail_msg("key %d written by a failed "
					         "get",
					         i);
		} else if (a[i] == KVL_EIO) {
			ASSERT_CODE(got[i], KVL_ENOTFOUND);
		} else {
			ASSERT_CODE(got[i], 0);
			assert_memory_equal(d, src + (size_t)i * RATE_LEN,
			                    RATE_LEN);
		}
	}
	if (read_fails < RATE_N / 5 || read_fails > RATE_N * 2 / 5)
		fail_msg("%d of %d gets failed with error=0.3", read_fails,
		         RATE_N);
	ASSERT_U64(counts_of(s1).errors - before, (uint64_t)read_fails);
	kvl_store_close(s1);

	free(keys);
	free(src);
	free(dst);
	free(a);
	free(b);
	free(got);
	free(ranges);
	free(ones);
}

/* Keys with 0 to 3 ranges and pieces each, half of them failing: the runs
 * handed to the inner store must line up with the right items. */
static void test_error_runs(void **state)
{
	(void)state;
	enum { N = 300, PIECE = 40 };
	kvl_store *s = open_ok("fault+mem:?capacity=64MiB&fault.error=0.5"
	                       "&fault.seed=11");
	char **keys = make_keys("run", N);
	const char *const *k = (const char *const *)keys;
	static uint8_t src[N][3 * PIECE], dst[N][3 * PIECE];
	static kvl_iov pieces[3 * N];
	static kvl_range ranges[3 * N];
	static size_t cnt[N];
	static int res[N], present[N];
	static int got[N];
	size_t at = 0;

	for (int i = 0; i < N; i++) {
		cnt[i] = (size_t)(i % 4);
		fill_pattern(src[i], sizeof src[i], (uint64_t)i + 1000);
		for (size_t j = 0; j < cnt[i]; j++) {
			pieces[at] = (kvl_iov){ src[i] + j * PIECE, PIECE };
			/* Ranges in reverse order of the pieces. */
			ranges[at] = (kvl_range){ (cnt[i] - 1 - j) * PIECE,
			                          dst[i] + j * PIECE, PIECE };
			at++;
		}
	}
	ASSERT_CODE(kvl_store_put(s, k, N, pieces, cnt, res), 0);
	int fails = 0;
	for (int i = 0; i < N; i++) {
		fails += res[i] == KVL_EIO;
		if (res[i] != KVL_EIO)
			ASSERT_CODE(res[i], KVL_PUT_STORED);
		present[i] = res[i] == KVL_PUT_STORED;
	}
	assert_true(fails > 0 && fails < N);

	memset(dst, 0xAA, sizeof dst);
	ASSERT_CODE(kvl_store_get(s, k, N, ranges, cnt, got), 0);
	int ok = 0;
	for (int i = 0; i < N; i++) {
		if (got[i] == KVL_EIO) {
			for (size_t j = 0; j < sizeof dst[i]; j++)
				if (dst[i][j] != 0xAA)
					fail_msg("key %d written by a failed "
					         "get",
					         i);
			continue;
		}
		if (!present[i]) {
			ASSERT_CODE(got[i], KVL_ENOTFOUND);
			continue;
		}
		ok++;
		ASSERT_CODE(got[i], 0);
		for (size_t j = 0; j < cnt[i]; j++)
			assert_memory_equal(dst[i] + j * PIECE,
			                    src[i] + (cnt[i] - 1 - j) * PIECE,
			                    PIECE);
	}
	assert_true(ok > 0);
	kvl_store_close(s);
	free(keys);
}

static void test_corrupt(void **state)
{
	(void)state;
	enum { LEN = 4096, ROUNDS = 50 };
	kvl_store *s = open_ok("fault+mem:?fault.corrupt=1&fault.seed=5");
	static uint8_t src[LEN], dst[LEN + 64];
	fill_pattern(src, LEN, 3);
	ASSERT_CODE(put1_rc(s, "c", src, LEN), KVL_PUT_STORED);

	/* Three ranges into one buffer, in object order, with the last 64
	 * bytes of dst never read into. */
	const char *key = "c";
	kvl_range r[3] = {
		{ 0, dst, 1000 },
		{ 1000, dst + 1000, 2000 },
		{ 3000, dst + 3000, LEN - 3000 },
	};
	size_t nr = 3;
	int flipped_in[3] = { 0, 0, 0 };
	for (int round = 0; round < ROUNDS; round++) {
		int got = 0;
		memset(dst, 0x5A, sizeof dst);
		ASSERT_CODE(kvl_store_get(s, &key, 1, r, &nr, &got), 0);
		ASSERT_CODE(got, 0); /* reported as a success */
		ASSERT_EQ(bits_differ(dst, src, LEN), 1);
		for (int j = LEN; j < LEN + 64; j++)
			ASSERT_EQ(dst[j], 0x5A);
		for (int j = 0; j < LEN; j++)
			if (dst[j] != src[j])
				flipped_in[j < 1000 ? 0 : j < 3000 ? 1 : 2]++;
	}
	print_message("    flips per range: %d %d %d\n", flipped_in[0],
	              flipped_in[1], flipped_in[2]);
	assert_true(flipped_in[1] > 0); /* half the bytes: surely hit */
	ASSERT_U64(counts_of(s).corruptions, ROUNDS);

	/* Nothing to flip in a read of 0 bytes. */
	kvl_range empty = { 10, dst, 0 };
	size_t one = 1;
	int got = 99;
	ASSERT_CODE(kvl_store_get(s, &key, 1, &empty, &one, &got), 0);
	ASSERT_EQ(got, 0);
	ASSERT_U64(counts_of(s).corruptions, ROUNDS);

	/* The stored object itself was never touched. */
	kvl__fault_cfg c = fault_cfg(s);
	c.corrupt = 0;
	fault_set_cfg(s, &c);
	memset(dst, 0, sizeof dst);
	ASSERT_EQ(get1_rc(s, "c", 0, dst, LEN), LEN);
	assert_memory_equal(dst, src, LEN);
	kvl_store_close(s);
}

/* kvlink's checks catch what the fault store corrupts: a page read through
 * it is never reported valid. */
static void test_corrupt_pages(void **state)
{
	(void)state;
	enum { PAGES = 16, LAYERS = 4, BYTES = 512 };
	char eb[KVL__ERRMSG_MAX];
	kvl_layout *l = NULL;
	int pool = -1;
	uint8_t *mem[LAYERS];

	ASSERT_CODE(kvl_layout_create("fault-test", 16, NULL, &l, eb,
	                              sizeof eb),
	            0);
	ASSERT_CODE(kvl_layout_add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0,
	                                &pool),
	            0);
	for (uint32_t ly = 0; ly < LAYERS; ly++) {
		mem[ly] = aligned_alloc(64, PAGES * BYTES);
		assert_non_null(mem[ly]);
		fill_pattern(mem[ly], PAGES * BYTES, ly + 1);
		kvl_buffer b = { .base = mem[ly], .page_stride = BYTES,
			         .page_bytes = BYTES, .num_pages = PAGES,
			         .mem = KVL_MEM_HOST, .device = 0 };
		ASSERT_CODE(kvl_layout_add_buffer(l, pool, "kv", ly, &b), 0);
	}
	ASSERT_CODE(kvl_layout_finalize(l), 0);

	kvl_store *s = open_ok("fault+mem:?capacity=64MiB&fault.seed=21");
	kvl_hash pages[PAGES / 2];
	size_t from[PAGES / 2], to[PAGES / 2];
	int res[PAGES / 2];
	for (int i = 0; i < PAGES / 2; i++) {
		memset(&pages[i], 0, sizeof pages[i]);
		pages[i].bytes[0] = (uint8_t)i;
		pages[i].bytes[31] = 0xC5;
		from[i] = (size_t)i;
		to[i] = (size_t)(PAGES / 2 + i);
	}
	ASSERT_CODE(kvl_pages_put(s, l, pool, pages, from, PAGES / 2, res), 0);
	for (int i = 0; i < PAGES / 2; i++)
		ASSERT_CODE(res[i], KVL_PUT_STORED);

	kvl__fault_cfg c = fault_cfg(s);
	c.corrupt = 1;
	fault_set_cfg(s, &c);
	int corrupt = 0;
	for (int round = 0; round < 4; round++) {
		ASSERT_CODE(kvl_pages_get(s, l, pool, pages, to, PAGES / 2,
		                          KVL_ALL_LAYERS, res),
		            0);
		for (int i = 0; i < PAGES / 2; i++) {
			/* A flip in the payload fails its layer checksum;
			 * one in the header makes the object absent. */
			if (res[i] != KVL_ECORRUPT && res[i] != KVL_ENOTFOUND)
				fail_msg("page %d read through a corrupting "
				         "store: %s, expected KVL_ECORRUPT",
				         i, kvl_err_name(res[i]));
			corrupt += res[i] == KVL_ECORRUPT;
		}
	}
	assert_true(corrupt > 0);

	c.corrupt = 0;
	fault_set_cfg(s, &c);
	ASSERT_CODE(kvl_pages_get(s, l, pool, pages, to, PAGES / 2,
	                          KVL_ALL_LAYERS, res),
	            0);
	for (int i = 0; i < PAGES / 2; i++)
		ASSERT_CODE(res[i], 0);
	for (uint32_t ly = 0; ly < LAYERS; ly++)
		assert_memory_equal(mem[ly] + (PAGES / 2) * BYTES, mem[ly],
		                    (PAGES / 2) * BYTES);

	kvl_store_close(s);
	kvl_layout_free(l);
	for (uint32_t ly = 0; ly < LAYERS; ly++)
		free(mem[ly]);
}

static void test_evict(void **state)
{
	(void)state;
	kvl_store *s = open_ok("fault+mem:?fault.evict=1");
	uint8_t v[32] = { 1, 2, 3 }, d[32];

	ASSERT_CODE(put1_rc(s, "x", v, sizeof v), KVL_PUT_STORED); /* no evict */
	ASSERT_EQ(exists1_rc(s, "x"), 0);
	ASSERT_U64(counts_of(s).evictions, 1);

	kvl__fault_cfg c = fault_cfg(s);
	c.evict = 0;
	fault_set_cfg(s, &c);
	ASSERT_EQ(exists1_rc(s, "x"), 0); /* really gone from the inner store */
	ASSERT_CODE(put1_rc(s, "x", v, sizeof v), KVL_PUT_STORED);
	ASSERT_EQ(exists1_rc(s, "x"), 1);

	c.evict = 1;
	fault_set_cfg(s, &c);
	ASSERT_CODE(get1_rc(s, "x", 0, d, sizeof d), KVL_ENOTFOUND);
	ASSERT_U64(counts_of(s).evictions, 2);
	/* Absent keys: nothing to evict, nothing counted. */
	ASSERT_EQ(exists1_rc(s, "x"), 0);
	ASSERT_U64(counts_of(s).evictions, 2);

	kvl_store_stats st;
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_U64(st.objects, 0);
	ASSERT_U64(st.errors, 0); /* evictions are not errors */
	kvl_store_close(s);
}

/* ------------------------------------------------------ whole-call faults */

static void test_down(void **state)
{
	(void)state;
	kvl_store *s = open_ok("fault+mem:?fault.down=1");
	const char *key = "d";
	uint8_t v[16] = { 9 }, d[16];
	kvl_iov iov = { v, sizeof v };
	kvl_range r = { 0, d, sizeof d };
	size_t one = 1;
	int res = 99;
	int got = 99;

	ASSERT_CODE(kvl_store_put(s, &key, 1, &iov, &one, &res), KVL_EIO);
	ASSERT_CODE(res, KVL_EIO);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "down");
	ASSERT_CODE(kvl_store_exists(s, &key, 1, &res), KVL_EIO);
	ASSERT_CODE(kvl_store_get(s, &key, 1, &r, &one, &got), KVL_EIO);
	ASSERT_CODE(got, KVL_EIO);
	ASSERT_CODE(kvl_store_remove(s, &key, 1, &res), KVL_EIO);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "store is down");
	ASSERT_CODE(kvl_store_register(s, d, sizeof d, KVL_MEM_HOST), KVL_EIO);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "down");

	kvl_store_stats st; /* stats still answer */
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_U64(st.puts, 0);
	ASSERT_U64(st.errors, 4);
	ASSERT_U64(counts_of(s).errors, 4);

	kvl__fault_cfg c = fault_cfg(s);
	ASSERT_EQ(c.down, 1);
	c.down = 0;
	fault_set_cfg(s, &c);
	ASSERT_CODE(put1_rc(s, key, v, sizeof v), KVL_PUT_STORED);
	ASSERT_EQ(get1_rc(s, key, 0, d, sizeof d), sizeof d);
	assert_memory_equal(d, v, sizeof v);
	ASSERT_CODE(kvl_store_register(s, d, sizeof d, KVL_MEM_HOST), 0);
	kvl_store_close(s);
}

/* The door's circuit breaker, on by option over the fault store: calls
 * failed in a row open it; calls then fail at once and never reach the
 * store; per-key failures of every key count as failed calls, a partial
 * one does not; the prober closes it once the store answers. */
static void test_breaker(void **state)
{
	(void)state;
	kvl_store *s = open_ok("fault+mem:?breaker=2&breaker_ms=10");
	const char *keys[2] = { "b1", "b2" };
	uint8_t v[16] = { 5 }, d[16];
	int res[2] = { 99, 99 };
	ASSERT_CODE(put1_rc(s, "b1", v, sizeof v), KVL_PUT_STORED);

	/* One failed call, then a success: the count starts again. */
	fault_down(s, 1);
	ASSERT_CODE(kvl_store_exists(s, keys, 2, res), KVL_EIO);
	fault_down(s, 0);
	ASSERT_CODE(kvl_store_exists(s, keys, 2, res), 0);
	fault_down(s, 1);
	ASSERT_CODE(kvl_store_exists(s, keys, 2, res), KVL_EIO);
	kvl_store_stats st;
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_U64(st.breaker_open, 0);
	/* Every key failing is a failed call too: the second in a row. */
	fault_down(s, 0);
	kvl__fault_cfg c = fault_cfg(s);
	c.error = 1.0;
	fault_set_cfg(s, &c);
	ASSERT_CODE(kvl_store_exists(s, keys, 2, res), 0);
	ASSERT_CODE(res[0], KVL_EIO);
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_U64(st.breaker_open, 1);
	ASSERT_U64(st.breaker_opens, 1);

	/* Open: refused whole, before the store. */
	c.error = 0;
	c.down = 1;
	fault_set_cfg(s, &c);
	uint64_t gets = fault_gets(s);
	for (int i = 0; i < 5; i++)
		ASSERT_CODE(get1_rc(s, "b1", 0, d, sizeof d), KVL_EIO);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "store is down: 2 calls");
	ASSERT_U64(fault_gets(s), gets);
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_TRUE(st.breaker_refused >= 5);
	/* Bad keys are still refused as such, not by the breaker. */
	const char *bad = "";
	ASSERT_CODE(kvl_store_exists(s, &bad, 1, res), 0);
	ASSERT_CODE(res[0], KVL_EINVAL);

	/* The store is back: the prober finds it, nobody calling. */
	c.down = 0;
	fault_set_cfg(s, &c);
	uint64_t t0 = now_ms();
	do {
		sleep_ms(5);
		ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	} while (st.breaker_open && now_ms() - t0 < 30000);
	ASSERT_U64(st.breaker_open, 0);
	ASSERT_EQ(get1_rc(s, "b1", 0, d, sizeof d), sizeof d);
	kvl_store_close(s);

	/* Off by default on stores that are not remote; bad values. */
	s = open_ok("fault+mem:?fault.down=1");
	for (int i = 0; i < 5; i++)
		ASSERT_CODE(kvl_store_exists(s, keys, 2, res), KVL_EIO);
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_U64(st.breaker_opens, 0);
	kvl_store_close(s);
	char eb[256];
	kvl_store *x = NULL;
	ASSERT_CODE(kvl_store_open("mem:?breaker_ms=0", &x, eb, sizeof eb),
	            KVL_EPARSE);
	ASSERT_CONTAINS(eb, "breaker_ms");
	ASSERT_CODE(kvl_store_open("mem:?breaker=x", &x, eb, sizeof eb),
	            KVL_EPARSE);
}

/* Holds through the door: a store that holds nothing answers 0 for each
 * key, a malformed key is KVL_EINVAL, an open breaker refuses a hold but
 * never an unhold (what was held is let go even while the store is
 * refused). Mooncake's holds themselves: test_mooncake. */
static void test_holds(void **state)
{
	(void)state;
	kvl_store *s = open_ok("fault+mem:?breaker=1&breaker_ms=10000");
	const char *keys[3] = {"h1", "", "h3"};
	int res[3] = {99, 99, 99};
	ASSERT_CODE(kvl__store_hold(s, keys, 3, res), KVL_OK);
	ASSERT_CODE(res[0], 0);
	ASSERT_CODE(res[1], KVL_EINVAL);
	ASSERT_CODE(res[2], 0);
	/* A failed call opens the breaker (breaker=1). */
	fault_down(s, 1);
	ASSERT_CODE(kvl_store_exists(s, keys, 1, res), KVL_EIO);
	kvl_store_stats st;
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_U64(st.breaker_open, 1);
	res[0] = 99;
	ASSERT_CODE(kvl__store_hold(s, keys, 1, res), KVL_EIO);
	ASSERT_CODE(res[0], KVL_EIO);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "calls in a row failed");
	res[0] = res[2] = 99;
	const char *held[2] = {"h1", "h3"};
	ASSERT_CODE(kvl__store_unhold(s, held, 2, res), KVL_OK);
	ASSERT_CODE(res[0], 0);
	ASSERT_CODE(res[1], 0);
	/* Forgetting memory never registered is harmless. */
	kvl__store_unregister(s, res);
	kvl__store_unregister(NULL, res);
	kvl_store_close(s);
}

/* fault.holds=1: the store counts holds itself (present keys 1, absent
 * 0), fails them while down, lets them go one at a time (a key not held is
 * KVL_ENOTFOUND), even while down; registrations are counted until
 * forgotten. */
static void test_holds_self(void **state)
{
	(void)state;
	kvl_store *s = open_ok("fault+mem:?fault.holds=1");
	uint8_t v[64];
	fill_pattern(v, sizeof v, 3);
	ASSERT_CODE(put1_rc(s, "here", v, sizeof v), KVL_PUT_STORED);
	const char *keys[3] = {"here", "gone", "here"};
	int res[3] = {99, 99, 99};
	ASSERT_CODE(kvl__store_hold(s, keys, 3, res), KVL_OK);
	ASSERT_CODE(res[0], 1);
	ASSERT_CODE(res[1], 0);
	ASSERT_CODE(res[2], 1);
	uint32_t now = 99;
	uint64_t taken = 99;
	ASSERT_CODE(kvl__fault_holds(s, "here", &now, &taken), KVL_OK);
	ASSERT_U64(now, 2);
	ASSERT_U64(taken, 2);
	ASSERT_CODE(kvl__fault_holds(s, "gone", &now, NULL), KVL_OK);
	ASSERT_U64(now, 0);

	fault_down(s, 1);
	res[0] = 99;
	ASSERT_CODE(kvl__store_hold(s, keys, 1, res), KVL_EIO);
	ASSERT_CODE(res[0], KVL_EIO);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "store is down");
	res[0] = res[1] = 99;
	const char *both[2] = {"here", "gone"};
	ASSERT_CODE(kvl__store_unhold(s, both, 2, res), KVL_OK);
	ASSERT_CODE(res[0], 0);
	ASSERT_CODE(res[1], KVL_ENOTFOUND);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "\"gone\" is not held");
	fault_down(s, 0);
	ASSERT_CODE(kvl__fault_holds(s, "here", &now, &taken), KVL_OK);
	ASSERT_U64(now, 1);
	ASSERT_U64(taken, 2);
	ASSERT_CODE(kvl__store_unhold(s, keys, 1, res), KVL_OK);
	ASSERT_CODE(res[0], 0);
	ASSERT_CODE(kvl__store_unhold(s, keys, 1, res), KVL_OK);
	ASSERT_CODE(res[0], KVL_ENOTFOUND);
	ASSERT_CODE(kvl__fault_holds(s, "here", &now, NULL), KVL_OK);
	ASSERT_U64(now, 0);
	ASSERT_CODE(kvl__fault_holds(s, NULL, &now, NULL), KVL_EINVAL);

	/* Registrations: counted while they last, never below 0. */
	uint64_t live = 99;
	ASSERT_CODE(kvl__fault_regs(s, &live), KVL_OK);
	ASSERT_U64(live, 0);
	ASSERT_CODE(kvl_store_register(s, v, sizeof v, KVL_MEM_HOST), KVL_OK);
	ASSERT_CODE(kvl__fault_regs(s, &live), KVL_OK);
	ASSERT_U64(live, 1);
	kvl__store_unregister(s, v);
	kvl__store_unregister(s, v);
	ASSERT_CODE(kvl__fault_regs(s, &live), KVL_OK);
	ASSERT_U64(live, 0);
	ASSERT_CODE(kvl__fault_regs(s, NULL), KVL_EINVAL);
	kvl_store_close(s);

	/* Without the option, holds go to the inner store (mem: holds
	 * nothing) and nothing is counted. */
	s = open_ok("fault+mem:");
	ASSERT_CODE(put1_rc(s, "here", v, sizeof v), KVL_PUT_STORED);
	ASSERT_CODE(kvl__store_hold(s, keys, 1, res), KVL_OK);
	ASSERT_CODE(res[0], 0);
	ASSERT_CODE(kvl__fault_holds(s, "here", &now, &taken), KVL_OK);
	ASSERT_U64(now, 0);
	ASSERT_U64(taken, 0);
	kvl_store_close(s);
}

static void test_fail_call(void **state)
{
	(void)state;
	kvl_store *s = open_ok("fault+mem:?fault.fail_get_call=3"
	                       "&fault.fail_put_call=2");
	uint8_t v[64], d[64];
	fill_pattern(v, sizeof v, 1);

	ASSERT_CODE(put1_rc(s, "a", v, sizeof v), KVL_PUT_STORED); /* put 1 */
	ASSERT_CODE(put1_rc(s, "b", v, sizeof v), KVL_EIO);        /* put 2 */
	ASSERT_CONTAINS(kvl_store_errmsg(s), "fail_put_call");
	ASSERT_EQ(exists1_rc(s, "b"), 0);
	ASSERT_CODE(put1_rc(s, "b", v, sizeof v), KVL_PUT_STORED); /* put 3 */

	for (int call = 1; call <= 6; call++) {
		memset(d, 0, sizeof d);
		int64_t got = get1_rc(s, "a", 0, d, sizeof d);
		if (call == 3) {
			ASSERT_CODE(got, KVL_EIO);
			ASSERT_CONTAINS(kvl_store_errmsg(s), "fail_get_call");
		} else {
			ASSERT_EQ(got, sizeof d);
			assert_memory_equal(d, v, sizeof v);
		}
	}
	uint64_t gets = 0, puts = 0;
	ASSERT_CODE(kvl__fault_calls(s, &gets, &puts), 0);
	ASSERT_U64(gets, 6);
	ASSERT_U64(puts, 3);

	/* Fail the next get from now on, through the control API. */
	kvl__fault_cfg c = fault_cfg(s);
	ASSERT_U64(c.fail_get_call, 3);
	c.fail_get_call = gets + 1;
	fault_set_cfg(s, &c);
	ASSERT_CODE(get1_rc(s, "a", 0, d, sizeof d), KVL_EIO);
	ASSERT_EQ(get1_rc(s, "a", 0, d, sizeof d), sizeof d);
	ASSERT_U64(counts_of(s).errors, 3); /* one key in each failed call */
	kvl_store_close(s);
}

static void test_latency(void **state)
{
	(void)state;
	kvl_store *s = open_ok("fault+mem:?fault.latency_ms=20");
	uint8_t v[64] = { 0 }, d[64];

	kvl__fault_cfg c = fault_cfg(s);
	ASSERT_EQ(c.latency_ms, 20);
	assert_true(c.latency_p == 1.0); /* default with latency_ms */
	ASSERT_CODE(put1_rc(s, "l", v, sizeof v), KVL_PUT_STORED);
	uint64_t t0 = now_ns();
	ASSERT_EQ(get1_rc(s, "l", 0, d, sizeof d), sizeof d);
	uint64_t took = now_ns() - t0;
	print_message("    get with latency_ms=20 took %.1f ms\n",
	              (double)took / 1e6);
	if (took < 20000000u)
		fail_msg("get took %.3f ms, expected at least 20",
		         (double)took / 1e6);
	ASSERT_U64(counts_of(s).delays, 2);

	c.latency_p = 0;
	fault_set_cfg(s, &c);
	ASSERT_EQ(get1_rc(s, "l", 0, d, sizeof d), sizeof d);
	ASSERT_U64(counts_of(s).delays, 2);
	kvl_store_close(s);

	s = open_ok("fault+mem:?fault.latency_ms=1&fault.latency_p=0.5");
	for (int i = 0; i < 40; i++)
		ASSERT_EQ(exists1_rc(s, "l"), 0);
	uint64_t delays = counts_of(s).delays;
	print_message("    latency_p=0.5: %llu of 40 calls delayed\n",
	              (unsigned long long)delays);
	assert_true(delays > 0 && delays < 40);
	kvl_store_close(s);
}

/* ------------------------------------------------------------- control */

static void test_set_runtime(void **state)
{
	(void)state;
	kvl_store *s = open_ok("fault+mem:");
	uint8_t v[8] = { 1 };

	kvl__fault_cfg c = fault_cfg(s);
	assert_true(c.error == 0 && c.corrupt == 0 && c.evict == 0);
	assert_true(c.latency_p == 1.0);
	ASSERT_EQ(c.latency_ms, 0);
	ASSERT_EQ(c.down, 0);
	ASSERT_U64(c.fail_get_call, 0);
	ASSERT_U64(c.fail_put_call, 0);

	ASSERT_CODE(put1_rc(s, "r1", v, sizeof v), KVL_PUT_STORED);
	c.error = 1;
	fault_set_cfg(s, &c);
	ASSERT_CODE(put1_rc(s, "r2", v, sizeof v), KVL_EIO);
	assert_true(fault_cfg(s).error == 1.0);

	/* Bad values change nothing. */
	kvl__fault_cfg bad = c;
	bad.error = 1.5;
	ASSERT_CODE(kvl__fault_set(s, &bad), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "error=1.5");
	bad = c;
	bad.corrupt = NAN;
	ASSERT_CODE(kvl__fault_set(s, &bad), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "corrupt");
	bad = c;
	bad.evict = -0.5;
	ASSERT_CODE(kvl__fault_set(s, &bad), KVL_EINVAL);
	bad = c;
	bad.latency_ms = 3600001;
	ASSERT_CODE(kvl__fault_set(s, &bad), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "latency_ms");
	ASSERT_CODE(kvl__fault_set(s, NULL), KVL_EINVAL);
	ASSERT_CODE(kvl__fault_get(s, NULL), KVL_EINVAL);
	assert_true(fault_cfg(s).error == 1.0);
	assert_true(fault_cfg(s).corrupt == 0.0);

	c.error = 0;
	c.down = 7; /* any non-zero is "down" */
	fault_set_cfg(s, &c);
	ASSERT_EQ(fault_cfg(s).down, 1);
	ASSERT_CODE(put1_rc(s, "r2", v, sizeof v), KVL_EIO);
	c.down = 0;
	fault_set_cfg(s, &c);
	ASSERT_CODE(put1_rc(s, "r2", v, sizeof v), KVL_PUT_STORED);
	kvl_store_close(s);
}

static void test_not_fault_store(void **state)
{
	(void)state;
	kvl_store *m = open_ok("mem:?capacity=1MiB");
	kvl__fault_cfg c = { 0 };
	uint64_t x = 0;

	ASSERT_CODE(kvl__fault_set(m, &c), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(m), "not a fault store");
	ASSERT_CODE(kvl__fault_get(m, &c), KVL_EINVAL);
	ASSERT_CODE(kvl__fault_counts(m, &x, &x, &x, &x), KVL_EINVAL);
	ASSERT_CODE(kvl__fault_calls(m, &x, &x), KVL_EINVAL);
	ASSERT_CODE(kvl__fault_set(NULL, &c), KVL_EINVAL);
	ASSERT_CODE(kvl__fault_get(NULL, &c), KVL_EINVAL);
	ASSERT_CODE(kvl__fault_counts(NULL, NULL, NULL, NULL, NULL),
	            KVL_EINVAL);
	kvl_store_close(m);

	kvl_store *f = open_ok("fault+mem:");
	ASSERT_CODE(kvl__fault_counts(f, NULL, NULL, NULL, NULL), 0);
	ASSERT_CODE(kvl__fault_calls(f, NULL, NULL), 0);
	kvl_store_close(f);
}

static void test_nesting(void **state)
{
	(void)state;
	kvl_store *s = open_ok("fault+fault+mem:?capacity=1MiB&fault.seed=4");
	kvl_store_stats st;
	uint8_t v[100], d[100];

	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_U64(st.capacity, 1024 * 1024);
	ASSERT_EQ(kvl__store_caps_of(s).trusted, 0);
	fill_pattern(v, sizeof v, 8);
	ASSERT_CODE(put1_rc(s, "n", v, sizeof v), KVL_PUT_STORED);
	ASSERT_EQ(get1_rc(s, "n", 0, d, sizeof d), sizeof d);
	assert_memory_equal(d, v, sizeof v);
	set_error(s, 1); /* the outer one */
	ASSERT_CODE(get1_rc(s, "n", 0, d, sizeof d), KVL_EIO);
	kvl_store_close(s);

	s = open_ok("fault+fault+fault+mem:?fault.down=1");
	ASSERT_CODE(exists1_rc(s, "n"), KVL_EIO);
	kvl_store_close(s);
	open_fails("fault+fault+mem:?capacity=1MiB&bogus=1", KVL_EPARSE,
	           "bogus");
}

static void test_trusted(void **state)
{
	(void)state;
	static const struct {
		const char *uri;
		int trusted;
	} cases[] = {
		{ "mem:", 1 },
		{ "mem:?verify=1", 0 },
		{ "fault+mem:", 0 },
		{ "fault+mem:?verify=0", 0 },
		{ "fault+mem:?fault.error=0", 0 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		kvl_store *s = open_ok(cases[i].uri);
		if (kvl__store_caps_of(s).trusted != cases[i].trusted)
			fail_msg("\"%s\": trusted == %d, expected %d",
			         cases[i].uri, kvl__store_caps_of(s).trusted, cases[i].trusted);
		kvl_store_close(s);
	}
}

/* --------------------------------------------------------------- threads */

enum { T_THREADS = 4, T_ROUNDS = 150, T_KEYS = 16, T_LEN = 128 };

struct worker {
	kvl_store *s;
	int id;
	uint64_t eio; /* KVL_EIO results seen */
	int bad;      /* a result outside what may happen */
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	char names[T_KEYS][32];
	const char *keys[T_KEYS];
	uint8_t src[T_KEYS][T_LEN], dst[T_KEYS][T_LEN];
	kvl_iov pieces[T_KEYS];
	kvl_range ranges[T_KEYS];
	size_t ones[T_KEYS];
	int res[T_KEYS];
	int got[T_KEYS];

	for (int i = 0; i < T_KEYS; i++) {
		snprintf(names[i], sizeof names[i], "t%d-%d", w->id, i);
		keys[i] = names[i];
		fill_pattern(src[i], T_LEN, (uint64_t)(w->id * 100 + i));
		pieces[i] = (kvl_iov){ src[i], T_LEN };
		ranges[i] = (kvl_range){ 0, dst[i], T_LEN };
		ones[i] = 1;
	}
	for (int round = 0; round < T_ROUNDS; round++) {
		if (kvl_store_put(w->s, keys, T_KEYS, pieces, ones, res) < 0)
			w->bad++;
		for (int i = 0; i < T_KEYS; i++) {
			w->eio += res[i] == KVL_EIO;
			w->bad += res[i] != KVL_EIO && res[i] != 0 &&
			          res[i] != 1;
		}
		if (kvl_store_get(w->s, keys, T_KEYS, ranges, ones, got) < 0)
			w->bad++;
		for (int i = 0; i < T_KEYS; i++) {
			w->eio += got[i] == KVL_EIO;
			w->bad += got[i] != KVL_EIO &&
			          got[i] != KVL_ENOTFOUND && got[i] != 0;
			/* Corrupted reads differ by exactly one bit. */
			if (got[i] == 0 &&
			    bits_differ(dst[i], src[i], T_LEN) > 1)
				w->bad++;
		}
		if (kvl_store_exists(w->s, keys, T_KEYS, res) < 0)
			w->bad++;
		for (int i = 0; i < T_KEYS; i++) {
			w->eio += res[i] == KVL_EIO;
			w->bad += res[i] != KVL_EIO && res[i] != 0 &&
			          res[i] != 1;
		}
	}
	return NULL;
}

struct toggler {
	kvl_store *s;
	int stop; /* (mu) */
	pthread_mutex_t mu;
};

static void *toggler_main(void *arg)
{
	struct toggler *t = arg;
	for (int i = 0;; i++) {
		pthread_mutex_lock(&t->mu);
		int stop = t->stop;
		pthread_mutex_unlock(&t->mu);
		if (stop)
			break;
		kvl__fault_cfg c;
		if (kvl__fault_get(t->s, &c) == 0) {
			c.error = (i & 1) ? 0.2 : 0.05;
			c.corrupt = (i & 2) ? 0.3 : 0.0;
			kvl__fault_set(t->s, &c);
		}
		uint64_t e;
		kvl__fault_counts(t->s, &e, NULL, NULL, NULL);
		kvl_store_stats st;
		kvl_store_stats_get(t->s, &st);
		struct timespec ts = { 0, 200000 };
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void test_threads(void **state)
{
	(void)state;
	kvl_store *s = open_ok("fault+mem:?capacity=64MiB&fault.error=0.2"
	                       "&fault.corrupt=0.2&fault.evict=0.05"
	                       "&fault.seed=9");
	pthread_t th[T_THREADS], tt;
	struct worker w[T_THREADS];
	struct toggler tog = { .s = s, .stop = 0 };

	pthread_mutex_init(&tog.mu, NULL);
	assert_int_equal(pthread_create(&tt, NULL, toggler_main, &tog), 0);
	for (int i = 0; i < T_THREADS; i++) {
		w[i] = (struct worker){ .s = s, .id = i };
		assert_int_equal(pthread_create(&th[i], NULL, worker_main,
		                                &w[i]),
		                 0);
	}
	uint64_t eio = 0;
	for (int i = 0; i < T_THREADS; i++) {
		pthread_join(th[i], NULL);
		eio += w[i].eio;
		if (w[i].bad)
			fail_msg("thread %d saw %d impossible results", i,
			         w[i].bad);
	}
	pthread_mutex_lock(&tog.mu);
	tog.stop = 1;
	pthread_mutex_unlock(&tog.mu);
	pthread_join(tt, NULL);
	pthread_mutex_destroy(&tog.mu);

	struct fcounts c = counts_of(s);
	print_message("    %d threads: %llu errors, %llu corruptions, %llu "
	              "evictions\n",
	              T_THREADS, (unsigned long long)c.errors,
	              (unsigned long long)c.corruptions,
	              (unsigned long long)c.evictions);
	ASSERT_U64(c.errors, eio); /* every injected error seen once */
	assert_true(c.errors > 0);
	kvl_store_stats st;
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_U64(st.errors, eio);
	uint64_t gets = 0, puts = 0;
	ASSERT_CODE(kvl__fault_calls(s, &gets, &puts), 0);
	ASSERT_U64(gets, T_THREADS * T_ROUNDS);
	ASSERT_U64(puts, T_THREADS * T_ROUNDS);
	kvl_store_close(s);
}

/* ------------------------------------------------------------------ main */

int main(void)
{
	/* store.c must route "fault+" URIs to the fault store. */
	char eb[KVL__ERRMSG_MAX] = "";
	kvl_store *probe = NULL;
	int rc = kvl_store_open("fault+mem:", &probe, eb, sizeof eb);
	if (rc != 0) {
		fprintf(stderr,
		        "test_fault: kvl_store_open(\"fault+mem:\") == %s: %s\n"
		        "(store.c must send schemes starting with \"fault+\" "
		        "to kvl__store_fault_ops)\n",
		        kvl_err_name(rc), eb);
		return 1;
	}
	kvl_store_close(probe);

	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_uri_rebuild),
		cmocka_unit_test(test_unknown_option),
		cmocka_unit_test(test_bad_values),
		cmocka_unit_test(test_passthrough),
		cmocka_unit_test(test_error_all),
		cmocka_unit_test(test_error_rate),
		cmocka_unit_test(test_error_runs),
		cmocka_unit_test(test_corrupt),
		cmocka_unit_test(test_corrupt_pages),
		cmocka_unit_test(test_evict),
		cmocka_unit_test(test_down),
		cmocka_unit_test(test_breaker),
		cmocka_unit_test(test_holds),
		cmocka_unit_test(test_holds_self),
		cmocka_unit_test(test_fail_call),
		cmocka_unit_test(test_latency),
		cmocka_unit_test(test_set_runtime),
		cmocka_unit_test(test_not_fault_store),
		cmocka_unit_test(test_nesting),
		cmocka_unit_test(test_trusted),
		cmocka_unit_test(test_threads),
	};
	return cmocka_run_group_tests_name("fault", tests, NULL, NULL) ? 1 : 0;
}
