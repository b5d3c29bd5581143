/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_store.c — the store API (kvl_store_*), the URI parser and the
 * embedded "mem:" backend.
 *
 * Every backend in `backends` runs the same per-backend tests; a backend's
 * flags say which of the stricter ones apply (exact LRU, exact counters,
 * pinned reads). The file: store runs them in a throwaway directory, with
 * io_uring and with its pread fallback forced. Set KVL_TEST_STORE_URI to run the generic ones against one
 * more store, e.g. KVL_TEST_STORE_URI=redis://127.0.0.1:6379.
 * Tests that need something a backend lacks skip and say why.
 */
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <cmocka.h>

#include "support/kvl_assert.h"
#include "support/rand.h"
#include "support/stores.h"
#include "support/tmpdir.h"

#include "kvlink.h"
#include "store/store.h"
#include "store/store.h"
#include "store/uri.h"

/* --------------------------------------------------------------- helpers */

enum {
	BK_EXACT_LRU = 1,   /* eviction is exact LRU by accounted bytes */
	BK_EXACT_STATS = 2, /* counters follow the documented rules */
	BK_PINNED = 4,      /* reads pin objects in process memory */
	BK_NO_EMPTY = 8,    /* refuses empty objects (KVL_ENOTSUP) */
	BK_PRESENT_STORED = 16, /* a put of a present key says STORED */
	BK_FRESH_DIR = 32,  /* keeps objects in a directory: cap_fmt takes
	                     * a new one ("%s"), then the capacity */
};

/* What a put of a key stored by an earlier call gives on b. */
#define PRESENT(b)                                                          \
	((b)->flags & BK_PRESENT_STORED ? KVL_PUT_STORED : KVL_PUT_PRESENT)

/* What a put of an empty object gives on b, and a read of it after. */
#define EMPTY_PUT(b) ((b)->flags & BK_NO_EMPTY ? KVL_ENOTSUP : KVL_PUT_STORED)
#define EMPTY_GET(b) ((b)->flags & BK_NO_EMPTY ? KVL_ENOTFOUND : 0)

struct backend {
	const char *name;
	const char *uri;     /* room for every ordinary test */
	const char *cap_fmt; /* URI with a capacity of %llu bytes, or NULL */
	unsigned flags;
};

static struct backend backends[] = {
	/* policy=lru: the default policy (slru) is not exact LRU. */
	{ "mem", "mem:?capacity=256MiB", "mem:?capacity=%llu&policy=lru",
	  BK_EXACT_LRU | BK_EXACT_STATS | BK_PINNED },
	/* The fault-injection wrapper with no faults on: a pass-through. */
	{ "fault+mem", "fault+mem:?capacity=256MiB",
	  "fault+mem:?capacity=%llu&fault.seed=1&policy=lru",
	  BK_EXACT_LRU | BK_EXACT_STATS | BK_PINNED },
	/* The file store (its uri is made in main, in a throwaway directory),
	 * through io_uring where the kernel allows it, and through preads. */
	{ "file", NULL, "file:%s?capacity=%llu",
	  BK_EXACT_LRU | BK_EXACT_STATS | BK_FRESH_DIR },
	{ "file-pread", NULL, "file:%s?capacity=%llu&io=pread",
	  BK_EXACT_LRU | BK_EXACT_STATS | BK_FRESH_DIR },
	/* Buffered I/O, as on a file system that refuses O_DIRECT. */
	{ "file-buffered", NULL, "file:%s?capacity=%llu&direct=0",
	  BK_EXACT_LRU | BK_EXACT_STATS | BK_FRESH_DIR },
};

/* Where the file store's directories go (made in main). */
static char *file_root;

static struct backend env_backend = { "env", NULL, NULL, 0 };

static kvl_store *open_cap(const struct backend *b, unsigned long long cap)
{
	char uri[4096 + 64];
	if (b->flags & BK_FRESH_DIR) { /* a new, empty store each time */
		static unsigned seq;
		char name[32];
		snprintf(name, sizeof name, "cap%u", seq++);
		char *dir = tmpdir_sub(file_root, name);
		snprintf(uri, sizeof uri, b->cap_fmt, dir, cap);
		free(dir);
	} else {
		snprintf(uri, sizeof uri, b->cap_fmt, cap);
	}
	return open_ok(uri);
}

/* Opens the backend's ordinary store. Tests remove their keys first, since
 * a shared server may hold keys of an earlier run. */
static kvl_store *open_backend(const struct backend *b)
{
	return open_ok(b->uri);
}

static const struct backend *bk(void **state)
{
	return *state;
}

/* ------------------------------------------------------- sizes and URIs */

static void test_parse_size(void **state)
{
	static const struct {
		const char *s;
		uint64_t v;
	} ok[] = {
		{ "0", 0 },
		{ "1", 1 },
		{ "4096", 4096 },
		{ "1K", 1024 },
		{ "1k", 1024 },
		{ "1KiB", 1024 },
		{ "1kib", 1024 },
		{ "3KIB", 3072 },
		{ "2M", 2ull << 20 },
		{ "2MiB", 2ull << 20 },
		{ "3G", 3ull << 30 },
		{ "8GiB", 8ull << 30 },
		{ "1T", 1ull << 40 },
		{ "5tib", 5ull << 40 },
		{ "007", 7 },
		{ "18446744073709551615", UINT64_MAX },
		{ "17179869183G", 17179869183ull << 30 },
		{ "16777215T", 16777215ull << 40 },
	};
	static const char *const bad[] = {
		"",       "-1",        "+1",         " 1",
		"1 ",     "1.5G",      "12Q",        "G",
		"KiB",    "1GB",       "1KB",        "1Gi",
		"1iB",    "1B",        "0x10",       "1e3",
		"1P",     "1K1",       "1KiBs",      "18446744073709551616",
		"99999999999999999999", "17179869184G", "16777216T",
		"18014398509481984K",
	};
	(void)state;
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		uint64_t v = 42;
		int rc = kvl_parse_size(ok[i].s, &v);
		if (rc != 0 || v != ok[i].v)
			fail_msg("kvl_parse_size(\"%s\") == %d, %" PRIu64
			         "; expected 0, %" PRIu64,
			         ok[i].s, rc, v, ok[i].v);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint64_t v = 42;
		int rc = kvl_parse_size(bad[i], &v);
		if (rc != KVL_EPARSE || v != 42)
			fail_msg("kvl_parse_size(\"%s\") == %d (value %" PRIu64
			         "), expected KVL_EPARSE and no value",
			         bad[i], rc, v);
	}
	uint64_t v = 0;
	ASSERT_CODE(kvl_parse_size(NULL, &v), KVL_EPARSE);
}

static void test_uri_parse(void **state)
{
	kvl__uri u;
	char eb[256];
	const char *sv = NULL;
	uint64_t n = 0;
	int b = -1;
	double p = -1;
	(void)state;

	ASSERT_CODE(kvl__uri_parse("redis://h1:1,h2:2/0?x=y&n=12&b=1&p=0.25",
	                           &u, eb, sizeof eb),
	            0);
	assert_string_equal(u.scheme, "redis");
	assert_string_equal(u.authority, "h1:1,h2:2");
	assert_string_equal(u.path, "/0");
	ASSERT_EQ(u.n_opts, 4);
	ASSERT_EQ(kvl__uri_str(&u, "x", &sv), 1);
	assert_string_equal(sv, "y");
	ASSERT_EQ(kvl__uri_str(&u, "absent", &sv), 0);
	assert_string_equal(sv, "y");
	ASSERT_CODE(kvl__uri_check_unused(&u, eb, sizeof eb), KVL_EPARSE);
	ASSERT_CONTAINS(eb, "'n'");
	ASSERT_EQ(kvl__uri_u64(&u, "n", &n, eb, sizeof eb), 1);
	ASSERT_U64(n, 12);
	ASSERT_EQ(kvl__uri_bool(&u, "b", &b, eb, sizeof eb), 1);
	ASSERT_EQ(b, 1);
	ASSERT_EQ(kvl__uri_prob(&u, "p", &p, eb, sizeof eb), 1);
	assert_true(p == 0.25);
	ASSERT_CODE(kvl__uri_check_unused(&u, eb, sizeof eb), 0);
	kvl__uri_free(&u);

	ASSERT_CODE(kvl__uri_parse("Mem:", &u, eb, sizeof eb), 0);
	assert_string_equal(u.scheme, "mem");
	assert_string_equal(u.authority, "");
	assert_string_equal(u.path, "");
	ASSERT_EQ(u.n_opts, 0);
	kvl__uri_free(&u);

	ASSERT_CODE(kvl__uri_parse("mem:?", &u, eb, sizeof eb), 0);
	ASSERT_EQ(u.n_opts, 0);
	kvl__uri_free(&u);

	ASSERT_CODE(kvl__uri_parse("file:/var/cache?a=1", &u, eb, sizeof eb), 0);
	assert_string_equal(u.scheme, "file");
	assert_string_equal(u.path, "/var/cache");
	kvl__uri_free(&u);

	/* Malformed values through the getters. */
	ASSERT_CODE(kvl__uri_parse("x:?b=2&n=12x&p=1.5&s=1X&q=-0.1", &u, eb,
	                           sizeof eb),
	            0);
	ASSERT_CODE(kvl__uri_bool(&u, "b", &b, eb, sizeof eb), KVL_EPARSE);
	ASSERT_CONTAINS(eb, "b=2");
	ASSERT_CODE(kvl__uri_u64(&u, "n", &n, eb, sizeof eb), KVL_EPARSE);
	ASSERT_CONTAINS(eb, "n=12x");
	ASSERT_CODE(kvl__uri_prob(&u, "p", &p, eb, sizeof eb), KVL_EPARSE);
	ASSERT_CONTAINS(eb, "p=1.5");
	ASSERT_CODE(kvl__uri_prob(&u, "q", &p, eb, sizeof eb), KVL_EPARSE);
	ASSERT_CODE(kvl__uri_size(&u, "s", &n, eb, sizeof eb), KVL_EPARSE);
	ASSERT_CONTAINS(eb, "s=1X");
	kvl__uri_free(&u);

	static const struct {
		const char *uri;
		const char *needle;
	} bad[] = {
		{ "foo", "missing scheme" },
		{ ":x", "empty scheme" },
		{ "", "missing scheme" },
		{ "1mem:", "scheme" },
		{ "m em:", "scheme" },
		{ "mem:?a", "'a' has no value" },
		{ "mem:?a=", "'a' has an empty value" },
		{ "mem:?=1", "empty option name" },
		{ "mem:?a=1&", "empty option name" },
		{ "mem:?a=1&&b=2", "empty option name" },
		{ "mem:?a=1&a=2", "'a' given twice" },
		{ "mem:?a=1 ", "space" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		eb[0] = '\0';
		int rc = kvl__uri_parse(bad[i].uri, &u, eb, sizeof eb);
		if (rc != KVL_EPARSE)
			fail_msg("kvl__uri_parse(\"%s\") == %s, expected "
			         "KVL_EPARSE",
			         bad[i].uri, kvl_err_name(rc));
		ASSERT_CONTAINS(eb, bad[i].needle);
		assert_null(u.buf);
	}

	/* More options than the parser holds. */
	char many[1024] = "mem:?";
	for (int i = 0; i <= KVL__URI_MAX_OPTS; i++) {
		char o[16];
		snprintf(o, sizeof o, "%so%d=1", i ? "&" : "", i);
		strcat(many, o);
	}
	ASSERT_CODE(kvl__uri_parse(many, &u, eb, sizeof eb), KVL_EPARSE);
	ASSERT_CONTAINS(eb, "more than");
}

/* ------------------------------------------------------------------ open */

static void test_open_defaults(void **state)
{
	static const char *const uris[] = { NULL, "", "mem:", "MEM:", "mem:?",
	                                    "mem://" };
	(void)state;
	for (size_t i = 0; i < sizeof uris / sizeof uris[0]; i++) {
		kvl_store *s = open_ok(uris[i]);
		kvl_store_stats st = store_stats(s);
		ASSERT_U64(st.capacity, 8ull << 30);
		ASSERT_U64(st.objects, 0);
		ASSERT_U64(st.bytes, 0);
		ASSERT_EQ(kvl__store_caps_of(s).trusted, 1);
		assert_string_equal(kvl_store_errmsg(s), "");
		kvl_store_close(s);
	}

	kvl_store *s = open_ok("mem:?capacity=1GiB&verify=1");
	ASSERT_U64(store_stats(s).capacity, 1ull << 30);
	ASSERT_EQ(kvl__store_caps_of(s).trusted, 0);
	kvl_store_close(s);

	s = open_ok("mem:?verify=0&capacity=12345");
	ASSERT_U64(store_stats(s).capacity, 12345);
	ASSERT_EQ(kvl__store_caps_of(s).trusted, 1);
	kvl_store_close(s);

	/* The errbuf is optional. */
	s = NULL;
	ASSERT_CODE(kvl_store_open("mem:", &s, NULL, 0), 0);
	kvl_store_close(s);
}

/* Renders s's stats into buf (a fixed size that always suffices here). */
#define ASSERT_NOT_CONTAINS(hay, needle)                                   \
	ASSERT_TRUE_MSG(!strstr(hay, needle), "\"%s\" contains \"%s\"",  \
	                hay, needle)

static void render(kvl_store *s, kvl_stats_format f, char *buf, size_t len)
{
	size_t need = 0;
	ASSERT_RC(s, kvl_store_stats_render(s, f, buf, len, &need), KVL_OK);
}

/* A count the store cannot tell (UINT64_MAX) renders as NaN / null, never
 * as 18446744073709551615; the others as numbers. */
static void test_stats_unknown(void **state)
{
	(void)state;
	char buf[4096];
	kvl_store *s = open_ok("fault+mem:?fault.stats_unknown=1");
	kvl_store_stats st = store_stats(s);
	ASSERT_U64(st.objects, UINT64_MAX);
	ASSERT_U64(st.bytes, UINT64_MAX);
	render(s, KVL_STATS_JSON, buf, sizeof buf);
	ASSERT_CONTAINS(buf, "\"objects\":null,\"bytes\":null,");
	ASSERT_CONTAINS(buf, "\"capacity\":8589934592,");
	ASSERT_NOT_CONTAINS(buf, "18446744073709551615");
	render(s, KVL_STATS_PROMETHEUS, buf, sizeof buf);
	ASSERT_CONTAINS(buf, "\nkvlink_store_objects NaN\n");
	ASSERT_CONTAINS(buf, "\nkvlink_store_bytes NaN\n");
	ASSERT_CONTAINS(buf, "\nkvlink_store_capacity 8589934592\n");
	ASSERT_NOT_CONTAINS(buf, "18446744073709551615");
	kvl_store_close(s);
}

/* pinned=1 and prealloc=1 ask for pinned memory; without a usable CUDA
 * device there is none to have: the store opens in ordinary memory and says
 * so, in its message and in both stats renders (through a fault store
 * too); with a device, or when nothing was asked, there is no note. */
static void test_pinned_note(void **state)
{
	(void)state;
	static const char *const uris[] = {
		"mem:?pinned=1", "mem:?prealloc=1&capacity=1MiB",
		"mem:?pinned=0&prealloc=1&capacity=1MiB",
		"fault+mem:?pinned=1"};
	static const char *const says[] = {"pinned=1", "prealloc=1",
	                                   "pinned=0", "pinned=1"};
	int dev = kvl_has_feature("cuda-device");
	char buf[4096];
	for (size_t i = 0; i < sizeof uris / sizeof uris[0]; i++) {
		kvl_store *s = open_ok(uris[i]);
		const char *msg = kvl_store_errmsg(s);
		int noted = !dev || strstr(uris[i], "pinned=0");
		if (!noted) {
			assert_string_equal(msg, "");
			kvl_store_close(s);
			continue;
		}
		ASSERT_CONTAINS(msg, says[i]);
		ASSERT_CONTAINS(msg, "no effect");
		render(s, KVL_STATS_JSON, buf, sizeof buf);
		ASSERT_CONTAINS(buf, "\"note\":\"mem: ");
		ASSERT_CONTAINS(buf, says[i]);
		render(s, KVL_STATS_PROMETHEUS, buf, sizeof buf);
		ASSERT_CONTAINS(buf, "# kvlink_store note: mem: ");
		/* A failure replaces the message; the renders keep the note. */
		ASSERT_CODE(kvl_store_stats_get(s, NULL), KVL_EINVAL);
		ASSERT_NOT_CONTAINS(kvl_store_errmsg(s), "no effect");
		render(s, KVL_STATS_JSON, buf, sizeof buf);
		ASSERT_CONTAINS(buf, says[i]);
		kvl_store_close(s);
	}
	/* Nothing asked for: no note. */
	kvl_store *s = open_ok("mem:?pinned=0");
	assert_string_equal(kvl_store_errmsg(s), "");
	render(s, KVL_STATS_JSON, buf, sizeof buf);
	ASSERT_NOT_CONTAINS(buf, "note");
	kvl_store_close(s);
}

/* A range or piece whose address + length does not end below 2^64 fails
 * its key with KVL_EINVAL (before: accepted, and copied through the wrap);
 * the other keys of the call are served. */
static void test_wrapping_ranges(void **state)
{
	(void)state;
	kvl_store *s = open_ok("mem:");
	const char *keys[2] = {"wrap", "fine"};
	char v[16] = "0123456789abcdef", b[16];
	kvl_iov pc[2] = {{(void *)(UINTPTR_MAX - 7), 16}, {v, 16}};
	size_t one[2] = {1, 1};
	int res[2] = {-100, -100};
	ASSERT_RC(s, kvl_store_put(s, keys, 2, pc, one, res), KVL_OK);
	ASSERT_CODE(res[0], KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "wraps");
	ASSERT_CODE(res[1], KVL_PUT_STORED);
	kvl_range r[2] = {{0, (void *)(UINTPTR_MAX - 3), 8}, {0, b, 16}};
	const char *gk[2] = {"fine", "fine"};
	ASSERT_RC(s, kvl_store_get(s, gk, 2, r, one, res), KVL_OK);
	ASSERT_CODE(res[0], KVL_EINVAL);
	ASSERT_CODE(res[1], KVL_OK);
	assert_memory_equal(b, v, 16);
	ASSERT_CODE(kvl_store_register(s, (void *)(UINTPTR_MAX - 7), 8,
	                               KVL_MEM_HOST),
	            KVL_EINVAL);
	ASSERT_CODE(kvl_store_register(s, (void *)(UINTPTR_MAX - 8), 8,
	                               KVL_MEM_HOST),
	            KVL_OK);
	kvl_store_close(s);
}

static void test_open_malformed(void **state)
{
	static const struct {
		const char *uri;
		int code;
		const char *needle;
	} bad[] = {
		{ "foo", KVL_EPARSE, "missing scheme" },
		{ ":x", KVL_EPARSE, "empty scheme" },
		{ "mem:?capacity=", KVL_EPARSE, "'capacity' has an empty value" },
		{ "mem:?capacity", KVL_EPARSE, "'capacity' has no value" },
		{ "mem:?capacity=12Q", KVL_EPARSE, "capacity=12Q" },
		{ "mem:?capacity=-1", KVL_EPARSE, "capacity=-1" },
		{ "mem:?capacity=99999999999999999999", KVL_EPARSE,
		  "capacity=99999999999999999999" },
		{ "mem:?capacity=0", KVL_EPARSE, "capacity=0" },
		{ "mem:?capacity=1G&capacity=2G", KVL_EPARSE,
		  "'capacity' given twice" },
		{ "mem:?bogus=1", KVL_EPARSE, "unknown option 'bogus'" },
		{ "mem:?capacity=1G&verfy=1", KVL_EPARSE,
		  "unknown option 'verfy'" },
		{ "mem:?verify=2", KVL_EPARSE, "verify=2" },
		{ "mem:?&", KVL_EPARSE, "empty option name" },
		{ "mem://host:1", KVL_EPARSE, "host:1" },
		{ "mem:/some/path", KVL_EPARSE, "/some/path" },
		{ "nosuch://x", KVL_ENOTSUP, "'nosuch'" },
		{ "file:relative/dir", KVL_EPARSE, "absolute" },
	};
	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char eb[KVL__ERRMSG_MAX];
		kvl_store *s = (kvl_store *)(uintptr_t)0x1;
		memset(eb, 'z', sizeof eb);
		int rc = kvl_store_open(bad[i].uri, &s, eb, sizeof eb);
		if (rc != bad[i].code)
			fail_msg("kvl_store_open(\"%s\") == %s, expected %s",
			         bad[i].uri, kvl_err_name(rc),
			         kvl_err_name(bad[i].code));
		if (s != (kvl_store *)(uintptr_t)0x1)
			fail_msg("kvl_store_open(\"%s\") wrote *out on failure",
			         bad[i].uri);
		assert_non_null(memchr(eb, '\0', sizeof eb));
		ASSERT_CONTAINS(eb, bad[i].needle);
		/* Without an errbuf it still fails the same way. */
		ASSERT_CODE(kvl_store_open(bad[i].uri, &s, NULL, 0),
		            bad[i].code);
	}

	/* A tiny errbuf is truncated, not overrun. */
	char small[8];
	memset(small, 'z', sizeof small);
	kvl_store *s = NULL;
	ASSERT_CODE(kvl_store_open("mem:?bogus=1", &s, small, sizeof small),
	            KVL_EPARSE);
	ASSERT_EQ(strlen(small), sizeof small - 1);

	char eb[256];
	ASSERT_CODE(kvl_store_open("mem:", NULL, eb, sizeof eb), KVL_EINVAL);
	ASSERT_CONTAINS(eb, "out");
}

static void test_null_store(void **state)
{
	const char *key = "k";
	int r;
	int r64;
	kvl_range rg = { 0, &r, 1 };
	kvl_iov iov = { &r, 1 };
	size_t one = 1;
	kvl_store_stats st;
	(void)state;

	kvl_store_close(NULL);
	assert_string_equal(kvl_store_errmsg(NULL), "store is NULL");
	ASSERT_CODE(kvl_store_exists(NULL, &key, 1, &r), KVL_EINVAL);
	ASSERT_CODE(kvl_store_get(NULL, &key, 1, &rg, &one, &r64), KVL_EINVAL);
	ASSERT_CODE(kvl_store_put(NULL, &key, 1, &iov, &one, &r), KVL_EINVAL);
	ASSERT_CODE(kvl_store_remove(NULL, &key, 1, &r), KVL_EINVAL);
	ASSERT_CODE(kvl_store_register(NULL, &r, 1, KVL_MEM_HOST), KVL_EINVAL);
	ASSERT_CODE(kvl_store_stats_get(NULL, &st), KVL_EINVAL);
}

/* ------------------------------------------------- per-backend behaviour */

static void test_roundtrip(void **state)
{
	const struct backend *be = bk(state);
	kvl_store *s = open_backend(be);
	const size_t len = 3 * 4096 + 17;
	uint8_t *a = pattern(len, 1), *b = pattern(1000, 2);
	const char *keys[] = { "rt/a", "rt/b" };
	int pres[2] = { 9, 9 };
	int gres[2] = { 9, 9 };

	remove1(s, keys[0]);
	remove1(s, keys[1]);

	/* Object a in three pieces, b in one. */
	kvl_iov pieces[] = { { a, 100 }, { a + 100, 4000 },
		             { a + 4100, len - 4100 }, { b, 1000 } };
	size_t np[] = { 3, 1 };
	ASSERT_CODE(kvl_store_put(s, keys, 2, pieces, np, pres), 0);
	ASSERT_CODE(pres[0], KVL_PUT_STORED);
	ASSERT_CODE(pres[1], KVL_PUT_STORED);

	int eres[3] = { 9, 9, 9 };
	const char *ekeys[] = { "rt/a", "rt/absent", "rt/b" };
	ASSERT_CODE(kvl_store_exists(s, ekeys, 3, eres), 0);
	ASSERT_EQ(eres[0], 1);
	ASSERT_EQ(eres[1], 0);
	ASSERT_EQ(eres[2], 1);

	/* Three ranges of a (out of order, one empty), two of b. */
	uint8_t *d = calloc(1, 20000);
	assert_non_null(d);
	kvl_range ranges[] = {
		{ 8192, d, 4096 + 17 },
		{ 0, d + 5000, 1 },
		{ 7, d + 6000, 0 },
		{ 1, d + 7000, 999 },
		{ 0, d + 8000, 1000 },
	};
	size_t nr[] = { 3, 2 };
	ASSERT_CODE(kvl_store_get(s, keys, 2, ranges, nr, gres), 0);
	ASSERT_CODE(gres[0], 0);
	ASSERT_CODE(gres[1], 0);
	assert_memory_equal(d, a + 8192, 4096 + 17);
	ASSERT_EQ(d[5000], a[0]);
	assert_memory_equal(d + 7000, b + 1, 999);
	assert_memory_equal(d + 8000, b, 1000);

	/* The whole object, and a key with no ranges. */
	uint8_t *whole = malloc(len);
	assert_non_null(whole);
	ASSERT_EQ(get1(s, "rt/a", 0, whole, len), (int64_t)len);
	assert_memory_equal(whole, a, len);
	size_t nr0 = 0;
	ASSERT_CODE(kvl_store_get(s, keys, 1, ranges, &nr0, gres), 0);
	ASSERT_EQ(gres[0], 0);

	/* An empty object. */
	size_t zero = 0;
	const char *ek = "rt/empty";
	remove1(s, ek);
	ASSERT_CODE(kvl_store_put(s, &ek, 1, NULL, &zero, pres), 0);
	ASSERT_CODE(pres[0], EMPTY_PUT(be));
	ASSERT_EQ(exists1(s, ek), !(be->flags & BK_NO_EMPTY));
	ASSERT_EQ(get1(s, ek, 0, d, 0), EMPTY_GET(be));
	ASSERT_CODE(get1(s, ek, 0, d, 1),
	            be->flags & BK_NO_EMPTY ? KVL_ENOTFOUND : KVL_ERANGE);

	/* A key of the longest allowed length. */
	char longkey[KVL_KEY_MAX];
	memset(longkey, 'L', KVL_KEY_MAX - 1);
	longkey[KVL_KEY_MAX - 1] = '\0';
	remove1(s, longkey);
	ASSERT_CODE(put1(s, longkey, b, 10), KVL_PUT_STORED);
	ASSERT_EQ(get1(s, longkey, 0, d, 10), 10);
	assert_memory_equal(d, b, 10);

	remove1(s, ek);
	remove1(s, longkey);
	free(whole);
	free(d);
	free(a);
	free(b);
	kvl_store_close(s);
}

static void test_put_present(void **state)
{
	const struct backend *be = bk(state);
	kvl_store *s = open_backend(be);
	uint8_t *a = pattern(5000, 3), *b = pattern(5000, 4);
	uint8_t d[5000];

	remove1(s, "pp/k");
	ASSERT_CODE(put1(s, "pp/k", a, 5000), KVL_PUT_STORED);
	ASSERT_CODE(put1(s, "pp/k", b, 5000), PRESENT(be));
	ASSERT_CODE(put1(s, "pp/k", b, 10), PRESENT(be));
	ASSERT_EQ(get1(s, "pp/k", 0, d, 5000), 5000);
	assert_memory_equal(d, a, 5000);

	/* The same key twice in one batch: stored once, then present. */
	const char *keys[] = { "pp/twice", "pp/twice" };
	kvl_iov iov[] = { { a, 64 }, { b, 64 } };
	size_t np[] = { 1, 1 };
	int res[2] = { 9, 9 };
	remove1(s, keys[0]);
	ASSERT_CODE(kvl_store_put(s, keys, 2, iov, np, res), 0);
	ASSERT_CODE(res[0], KVL_PUT_STORED);
	ASSERT_CODE(res[1], KVL_PUT_PRESENT);
	ASSERT_EQ(get1(s, keys[0], 0, d, 64), 64);
	assert_memory_equal(d, a, 64);

	remove1(s, "pp/k");
	remove1(s, "pp/twice");
	free(a);
	free(b);
	kvl_store_close(s);
}

static void test_get_absent_and_range(void **state)
{
	kvl_store *s = open_backend(bk(state));
	uint8_t *a = pattern(4096, 5);
	uint8_t d[8192], untouched[8192];
	memset(untouched, 0xa5, sizeof untouched);

	remove1(s, "ga/absent");
	remove1(s, "ga/k");
	memcpy(d, untouched, sizeof d);
	ASSERT_CODE(get1(s, "ga/absent", 0, d, 100), KVL_ENOTFOUND);
	assert_memory_equal(d, untouched, sizeof d);

	ASSERT_CODE(put1(s, "ga/k", a, 4096), KVL_PUT_STORED);
	static const struct {
		uint64_t off;
		size_t len;
		int64_t want;
	} cases[] = {
		{ 0, 4096, 4096 },
		{ 4096, 0, 0 },
		{ 4095, 1, 1 },
		{ 0, 4097, KVL_ERANGE },
		{ 4096, 1, KVL_ERANGE },
		{ 4097, 0, KVL_ERANGE },
		{ 1, 4096, KVL_ERANGE },
		{ UINT64_MAX, 2, KVL_ERANGE },
		{ UINT64_MAX - 1, 4, KVL_ERANGE },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int64_t r = get1(s, "ga/k", cases[i].off, d, cases[i].len);
		if (r != cases[i].want)
			fail_msg("get(off %" PRIu64 ", len %zu) == %" PRId64
			         " (%s), expected %" PRId64,
			         cases[i].off, cases[i].len, r,
			         kvl_err_name((int)r), cases[i].want);
	}
	ASSERT_CONTAINS(kvl_store_errmsg(s), "ga/k");

	/* One bad range fails its key only; the other keys are read. */
	const char *keys[] = { "ga/k", "ga/k", "ga/absent", "ga/k" };
	memcpy(d, untouched, sizeof d);
	kvl_range rg[] = {
		{ 0, d, 100 },            /* key 0 */
		{ 100, d + 100, 100 },    /* key 1: good */
		{ 4000, d + 1000, 200 },  /* key 1: bad */
		{ 0, d + 2000, 10 },      /* key 2: absent */
		{ 10, d + 3000, 50 },     /* key 3 */
	};
	size_t nr[] = { 1, 2, 1, 1 };
	int res[4] = { 9, 9, 9, 9 };
	ASSERT_CODE(kvl_store_get(s, keys, 4, rg, nr, res), 0);
	ASSERT_CODE(res[0], 0);
	ASSERT_CODE(res[1], KVL_ERANGE);
	ASSERT_CODE(res[2], KVL_ENOTFOUND);
	ASSERT_CODE(res[3], 0);
	assert_memory_equal(d, a, 100);
	assert_memory_equal(d + 1000, untouched, 200);
	assert_memory_equal(d + 2000, untouched, 10);
	assert_memory_equal(d + 3000, a + 10, 50);

	remove1(s, "ga/k");
	free(a);
	kvl_store_close(s);
}

static void test_remove(void **state)
{
	kvl_store *s = open_backend(bk(state));
	uint8_t buf[100] = { 1, 2, 3 };

	remove1(s, "rm/a");
	remove1(s, "rm/b");
	ASSERT_CODE(put1(s, "rm/a", buf, sizeof buf), KVL_PUT_STORED);
	ASSERT_CODE(put1(s, "rm/b", buf, sizeof buf), KVL_PUT_STORED);
	const char *keys[] = { "rm/a", "rm/none", "rm/a" };
	int res[3] = { 9, 9, 9 };
	ASSERT_CODE(kvl_store_remove(s, keys, 3, res), 0);
	ASSERT_EQ(res[0], 1);
	ASSERT_EQ(res[1], 0);
	ASSERT_EQ(res[2], 0);
	ASSERT_EQ(exists1(s, "rm/a"), 0);
	ASSERT_EQ(exists1(s, "rm/b"), 1);
	ASSERT_CODE(get1(s, "rm/a", 0, buf, 1), KVL_ENOTFOUND);
	/* A removed key can be stored again with new bytes. */
	uint8_t other[50];
	memset(other, 7, sizeof other);
	ASSERT_CODE(put1(s, "rm/a", other, sizeof other), KVL_PUT_STORED);
	ASSERT_EQ(get1(s, "rm/a", 0, buf, 50), 50);
	assert_memory_equal(buf, other, 50);
	ASSERT_CODE(get1(s, "rm/a", 0, buf, 51), KVL_ERANGE);
	remove1(s, "rm/a");
	remove1(s, "rm/b");
	kvl_store_close(s);
}

static void test_null_args(void **state)
{
	const struct backend *be = bk(state);
	kvl_store *s = open_backend(be);
	const char *key = "na/k";
	uint8_t buf[64] = { 0 };
	kvl_range rg = { 0, buf, 1 };
	kvl_iov iov = { buf, 1 };
	size_t one = 1;
	int r;
	int r64;

	remove1(s, key);
	ASSERT_CODE(kvl_store_exists(s, NULL, 1, &r), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "keys");
	ASSERT_CODE(kvl_store_exists(s, &key, 1, NULL), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "results");
	ASSERT_CODE(kvl_store_get(s, NULL, 1, &rg, &one, &r64), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "keys");
	ASSERT_CODE(kvl_store_get(s, &key, 1, NULL, &one, &r64), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "ranges");
	ASSERT_CODE(kvl_store_get(s, &key, 1, &rg, NULL, &r64), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "n_ranges");
	ASSERT_CODE(kvl_store_get(s, &key, 1, &rg, &one, NULL), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "results");
	ASSERT_CODE(kvl_store_put(s, NULL, 1, &iov, &one, &r), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "keys");
	ASSERT_CODE(kvl_store_put(s, &key, 1, NULL, &one, &r), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "pieces");
	ASSERT_CODE(kvl_store_put(s, &key, 1, &iov, NULL, &r), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "n_pieces");
	ASSERT_CODE(kvl_store_put(s, &key, 1, &iov, &one, NULL), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "results");
	ASSERT_CODE(kvl_store_remove(s, NULL, 1, &r), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "keys");
	ASSERT_CODE(kvl_store_remove(s, &key, 1, NULL), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "results");
	ASSERT_CODE(kvl_store_stats_get(s, NULL), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "out");
	ASSERT_CODE(kvl_store_register(s, NULL, 10, KVL_MEM_HOST), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "addr");
	ASSERT_CODE(kvl_store_register(s, buf, 0, KVL_MEM_HOST), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "len");
	ASSERT_CODE(kvl_store_register(s, buf, sizeof buf, (kvl_mem_kind)7),
	            KVL_EINVAL);
	ASSERT_CODE(kvl_store_register(s, buf, sizeof buf, KVL_MEM_HOST), 0);
	/* Nothing was stored by the refused calls. */
	ASSERT_EQ(exists1(s, key), 0);

	/* NULL pieces/ranges are fine when every count is 0. */
	size_t zero = 0;
	ASSERT_CODE(kvl_store_put(s, &key, 1, NULL, &zero, &r), 0);
	ASSERT_CODE(r, EMPTY_PUT(be));
	ASSERT_CODE(kvl_store_get(s, &key, 1, NULL, &zero, &r64), 0);
	ASSERT_EQ(r64, EMPTY_GET(be));
	remove1(s, key);

	/* Bad keys fail alone; the good keys around them are carried out, with
	 * their pieces and ranges matched up right. */
	char toolong[KVL_KEY_MAX + 10];
	memset(toolong, 'x', sizeof toolong - 1);
	toolong[sizeof toolong - 1] = '\0';
	char jtl[KVL_KEY_MAX + 1]; /* one byte too long */
	memset(jtl, 'y', KVL_KEY_MAX);
	jtl[KVL_KEY_MAX] = '\0';
	uint8_t *src = pattern(600, 6);
	const char *keys[] = { "na/1", NULL, "na/2", "", toolong,
		               "na/3", jtl, "na/4" };
	size_t np[] = { 1, 2, 2, 1, 1, 3, 1, 1 };
	kvl_iov pc[] = {
		{ src, 10 },                             /* na/1 */
		{ src, 1 }, { src, 1 },                  /* NULL */
		{ src + 10, 20 }, { src + 30, 30 },      /* na/2 */
		{ src, 1 },                              /* "" */
		{ src, 1 },                              /* toolong */
		{ src + 60, 1 }, { src + 61, 2 }, { src + 63, 3 }, /* na/3 */
		{ src, 1 },                              /* jtl */
		{ NULL, 0 },                             /* na/4: empty */
	};
	int res[8];
	for (int i = 0; i < 8; i++)
		res[i] = 99;
	for (int i = 0; i < 8; i++)
		if (keys[i] && keys[i][0] && strlen(keys[i]) < KVL_KEY_MAX)
			remove1(s, keys[i]);
	ASSERT_CODE(kvl_store_put(s, keys, 8, pc, np, res), 0);
	ASSERT_CODE(res[0], KVL_PUT_STORED);
	ASSERT_CODE(res[1], KVL_EINVAL);
	ASSERT_CODE(res[2], KVL_PUT_STORED);
	ASSERT_CODE(res[3], KVL_EINVAL);
	ASSERT_CODE(res[4], KVL_EINVAL);
	ASSERT_CODE(res[5], KVL_PUT_STORED);
	ASSERT_CODE(res[6], KVL_EINVAL);
	ASSERT_CODE(res[7], EMPTY_PUT(be));

	uint8_t d[600];
	memset(d, 0, sizeof d);
	size_t nr[] = { 1, 1, 2, 1, 1, 1, 1, 1 };
	kvl_range rr[] = {
		{ 0, d, 10 },                       /* na/1 */
		{ 0, d + 100, 1 },                  /* NULL */
		{ 0, d + 200, 20 }, { 20, d + 220, 30 }, /* na/2 */
		{ 0, d + 300, 1 },                  /* "" */
		{ 0, d + 300, 1 },                  /* toolong */
		{ 0, d + 400, 6 },                  /* na/3 */
		{ 0, d + 300, 1 },                  /* jtl */
		{ 0, d + 500, 0 },                  /* na/4 */
	};
	int gres[8];
	ASSERT_CODE(kvl_store_get(s, keys, 8, rr, nr, gres), 0);
	ASSERT_CODE(gres[0], 0);
	ASSERT_CODE(gres[1], KVL_EINVAL);
	ASSERT_CODE(gres[2], 0);
	ASSERT_CODE(gres[3], KVL_EINVAL);
	ASSERT_CODE(gres[4], KVL_EINVAL);
	ASSERT_CODE(gres[5], 0);
	ASSERT_CODE(gres[6], KVL_EINVAL);
	ASSERT_EQ(gres[7], EMPTY_GET(be));
	assert_memory_equal(d, src, 10);
	assert_memory_equal(d + 200, src + 10, 50);
	assert_memory_equal(d + 400, src + 60, 6);
	ASSERT_EQ(d[100], 0);
	ASSERT_EQ(d[300], 0);

	/* The message names the argument. */
	const char *k2[] = { "na/1", NULL };
	int e2[2];
	ASSERT_CODE(kvl_store_exists(s, k2, 2, e2), 0);
	ASSERT_EQ(e2[0], 1);
	ASSERT_CODE(e2[1], KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "keys[1] is NULL");
	k2[1] = "";
	ASSERT_CODE(kvl_store_remove(s, k2 + 1, 1, e2), 0);
	ASSERT_CODE(e2[0], KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "keys[0] is empty");
	k2[1] = toolong;
	ASSERT_CODE(kvl_store_exists(s, k2, 2, e2), 0);
	ASSERT_CODE(e2[1], KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "keys[1]");
	char longer[32];
	snprintf(longer, sizeof longer, "longer than %d", KVL_KEY_MAX - 1);
	ASSERT_CONTAINS(kvl_store_errmsg(s), longer);

	/* A NULL destination with a length fails that key only. */
	kvl_range nullr = { 0, NULL, 5 };
	ASSERT_CODE(kvl_store_get(s, &keys[0], 1, &nullr, &one, &r64), 0);
	ASSERT_CODE(r64, KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "ranges[0].addr");
	kvl_iov nulli = { NULL, 5 };
	const char *nk = "na/nullpiece";
	ASSERT_CODE(kvl_store_put(s, &nk, 1, &nulli, &one, &r), 0);
	ASSERT_CODE(r, KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "pieces[0].addr");
	ASSERT_EQ(exists1(s, nk), 0);

	for (int i = 0; i < 8; i++)
		if (res[i] == KVL_PUT_STORED)
			remove1(s, keys[i]);
	free(src);
	kvl_store_close(s);
}

static void test_n_zero(void **state)
{
	const struct backend *b = bk(state);
	kvl_store *s = open_backend(b);
	kvl_store_stats before = store_stats(s);

	ASSERT_CODE(kvl_store_exists(s, NULL, 0, NULL), 0);
	ASSERT_CODE(kvl_store_get(s, NULL, 0, NULL, NULL, NULL), 0);
	ASSERT_CODE(kvl_store_put(s, NULL, 0, NULL, NULL, NULL), 0);
	ASSERT_CODE(kvl_store_remove(s, NULL, 0, NULL), 0);
	if (b->flags & BK_EXACT_STATS) {
		kvl_store_stats after = store_stats(s);
		ASSERT_U64(after.hits, before.hits);
		ASSERT_U64(after.misses, before.misses);
		ASSERT_U64(after.puts, before.puts);
		ASSERT_U64(after.errors, before.errors);
	}
	kvl_store_close(s);
}

/* Accounted bytes of one object of `len` bytes under a key of `key_len`,
 * as the backend reports them. */
static uint64_t object_cost(const struct backend *b, size_t key_len,
                            size_t len)
{
	kvl_store *s = open_cap(b, 1ull << 30);
	char key[KVL_KEY_MAX];
	memset(key, 'c', key_len);
	key[key_len] = '\0';
	uint8_t *p = pattern(len, 0);
	ASSERT_CODE(put1(s, key, p, len), KVL_PUT_STORED);
	uint64_t cost = store_stats(s).bytes;
	free(p);
	kvl_store_close(s);
	if (cost < len + key_len)
		fail_msg("an object of %zu bytes under a %zu-byte key is "
		         "accounted as %" PRIu64 " bytes",
		         len, key_len, cost);
	return cost;
}

static void test_stats_exact(void **state)
{
	const struct backend *b = bk(state);
	if (!(b->flags & BK_EXACT_STATS) || !b->cap_fmt)
		skip();
	const size_t len = 100;
	const uint64_t cost = object_cost(b, 4, len); /* keys "st/x" */
	const unsigned long long cap = 1 << 20;
	kvl_store *s = open_cap(b, cap);
	uint8_t *p = pattern(len, 7);
	uint8_t d[200];

	kvl_store_stats st = store_stats(s);
	ASSERT_U64(st.capacity, cap);
	ASSERT_U64(st.objects + st.bytes + st.hits + st.misses + st.puts +
	                   st.evictions + st.errors,
	           0);

	ASSERT_CODE(put1(s, "st/a", p, len), KVL_PUT_STORED);
	ASSERT_CODE(put1(s, "st/b", p, len), KVL_PUT_STORED);
	ASSERT_CODE(put1(s, "st/c", p, len), KVL_PUT_STORED);
	ASSERT_CODE(put1(s, "st/a", p, len), KVL_PUT_PRESENT);
	st = store_stats(s);
	ASSERT_U64(st.puts, 3);
	ASSERT_U64(st.objects, 3);
	ASSERT_U64(st.bytes, 3 * cost);

	const char *ek[] = { "st/a", "st/b", "st/z" };
	int er[3];
	ASSERT_CODE(kvl_store_exists(s, ek, 3, er), 0);
	ASSERT_EQ(get1(s, "st/a", 0, d, len), (int64_t)len);
	ASSERT_CODE(get1(s, "st/z", 0, d, len), KVL_ENOTFOUND);
	ASSERT_CODE(get1(s, "st/b", 1, d, len), KVL_ERANGE);
	ASSERT_EQ(remove1(s, "st/c"), 1);
	ASSERT_EQ(remove1(s, "st/c"), 0);

	uint8_t *big = malloc(cap + 1);
	assert_non_null(big);
	ASSERT_CODE(put1(s, "st/big", big, cap + 1), KVL_ERANGE);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "st/big");

	st = store_stats(s);
	ASSERT_U64(st.objects, 2);
	ASSERT_U64(st.bytes, 2 * cost);
	ASSERT_U64(st.capacity, cap);
	ASSERT_U64(st.hits, 3);   /* exists a, b; get a */
	ASSERT_U64(st.misses, 2); /* exists z; get z */
	ASSERT_U64(st.puts, 3);
	ASSERT_U64(st.evictions, 0);
	ASSERT_U64(st.errors, 2); /* the bad range, the big object */

	free(big);
	free(p);
	kvl_store_close(s);
}

static void test_lru_exact(void **state)
{
	const struct backend *b = bk(state);
	if (!(b->flags & BK_EXACT_LRU) || !b->cap_fmt)
		skip();
	/* Objects larger than a backend's overhead per object (the file
	 * store's is a 4 KiB header page), so that sizes below add up as the
	 * comments say. */
	const size_t len = b->flags & BK_FRESH_DIR ? 5000 : 1000;
	const uint64_t cost = object_cost(b, 6, len); /* keys "lru/NN" */
	uint8_t *p = pattern(len, 8);
	uint8_t d[5000];
	char key[16];

	/* Room for exactly four objects (and not five). */
	kvl_store *s = open_cap(b, 5 * cost - 1);
	for (int i = 0; i < 4; i++) {
		snprintf(key, sizeof key, "lru/%02d", i);
		ASSERT_CODE(put1(s, key, p, len), KVL_PUT_STORED);
	}
	ASSERT_U64(store_stats(s).bytes, 4 * cost);
	ASSERT_U64(store_stats(s).evictions, 0);

	/* Order, oldest first: 00 01 02 03. Touch 00 with exists and 01 with
	 * get: 02 03 00 01. A present put does not touch: put 02 again. */
	ASSERT_EQ(exists1(s, "lru/00"), 1);
	ASSERT_EQ(get1(s, "lru/01", 10, d, 10), 10);
	ASSERT_CODE(put1(s, "lru/02", p, len), KVL_PUT_PRESENT);
	/* A miss and a failed get touch nothing. */
	ASSERT_EQ(exists1(s, "lru/99"), 0);
	ASSERT_CODE(get1(s, "lru/03", len - 1, d, 2), KVL_ERANGE);

	/* 04 evicts 02; 05 evicts 03. */
	ASSERT_CODE(put1(s, "lru/04", p, len), KVL_PUT_STORED);
	ASSERT_CODE(put1(s, "lru/05", p, len), KVL_PUT_STORED);
	ASSERT_U64(store_stats(s).evictions, 2);
	ASSERT_U64(store_stats(s).objects, 4);

	/* Check with get (which touches) in the order that keeps the
	 * survivors' relative order: 00 01 04 05. */
	static const int alive[] = { 1, 1, 0, 0, 1, 1 };
	for (int i = 0; i < 6; i++) {
		snprintf(key, sizeof key, "lru/%02d", i);
		int64_t r = get1(s, key, 0, d, len);
		if (alive[i])
			ASSERT_EQ(r, (int64_t)len);
		else
			ASSERT_CODE(r, KVL_ENOTFOUND);
	}

	/* A bigger object evicts as many of the oldest as it needs: one of
	 * 3*len bytes costs cost + 2*len, more than two free slots' worth
	 * minus one byte, less than three: it evicts 00 and 01. */
	uint8_t *p2 = pattern(3 * len, 9);
	ASSERT_CODE(put1(s, "lru/06", p2, 3 * len), KVL_PUT_STORED);
	static const int alive2[] = { 0, 0, 0, 0, 1, 1, 1 };
	for (int i = 0; i < 7; i++) {
		snprintf(key, sizeof key, "lru/%02d", i);
		ASSERT_EQ(exists1(s, key), alive2[i]);
	}
	ASSERT_U64(store_stats(s).evictions, 4);
	ASSERT_U64(store_stats(s).bytes, 2 * cost + (cost + 2 * len));

	/* Removing makes room without evictions. */
	ASSERT_EQ(remove1(s, "lru/04"), 1);
	ASSERT_CODE(put1(s, "lru/07", p, len), KVL_PUT_STORED);
	ASSERT_U64(store_stats(s).evictions, 4);

	/* The object larger than the capacity fails; one of exactly the
	 * capacity fits and evicts everything. */
	kvl_store_close(s);
	s = open_cap(b, 4 * cost);
	for (int i = 0; i < 4; i++) {
		snprintf(key, sizeof key, "lru/%02d", i);
		ASSERT_CODE(put1(s, key, p, len), KVL_PUT_STORED);
	}
	size_t whole = (size_t)(4 * cost - (cost - len));
	uint8_t *p4 = pattern(whole + 1, 10);
	ASSERT_CODE(put1(s, "lru/xx", p4, whole + 1), KVL_ERANGE);
	ASSERT_U64(store_stats(s).objects, 4);
	ASSERT_CODE(put1(s, "lru/xx", p4, whole), KVL_PUT_STORED);
	ASSERT_U64(store_stats(s).objects, 1);
	ASSERT_U64(store_stats(s).bytes, 4 * cost);
	ASSERT_U64(store_stats(s).evictions, 4);

	free(p4);
	free(p2);
	free(p);
	kvl_store_close(s);
}

/* ----------------------------------------------------------- concurrency */

#define CONC_IDS 200
#define CONC_READERS 4
#define CONC_WRITERS 2

struct conc {
	kvl_store *s;
	uint8_t *data[CONC_IDS];
	size_t len[CONC_IDS];
	atomic_int bad;      /* wrong bytes or unexpected results */
	atomic_long full;    /* KVL_EFULL seen by writers */
	atomic_long seen;    /* complete reads */
	atomic_long missing; /* KVL_ENOTFOUND reads */
	atomic_int writers;  /* writers still running */
	atomic_long stored;  /* puts that stored an object */
	char msg[256];
	pthread_mutex_t mu;
};

struct conc_arg {
	struct conc *c;
	unsigned id;
	int iters;
};

static void conc_fail(struct conc *c, const char *what, long long v)
{
	if (atomic_fetch_add(&c->bad, 1) == 0) {
		pthread_mutex_lock(&c->mu);
		snprintf(c->msg, sizeof c->msg, "%s (%lld)", what, v);
		pthread_mutex_unlock(&c->mu);
	}
}

static void conc_key(char *buf, size_t n, unsigned id)
{
	snprintf(buf, n, "conc/%05u", id);
}

static void *conc_reader(void *p)
{
	struct conc_arg *a = p;
	struct conc *c = a->c;
	uint64_t x = a->id * 7919 + 1;
	uint8_t *d = malloc(16384 * 4);
	if (!d) {
		conc_fail(c, "reader malloc", 0);
		return NULL;
	}
	/* Readers start once an object was stored, and go on while the
	 * writers do until both outcomes were seen: however the threads are
	 * scheduled, they cannot finish before the writers began. */
	while (atomic_load(&c->stored) == 0 && atomic_load(&c->writers) > 0)
		sched_yield();
	for (int it = 0;
	     it < a->iters ||
	     (atomic_load(&c->writers) > 0 &&
	      (atomic_load(&c->seen) == 0 || atomic_load(&c->missing) == 0));
	     it++) {
		/* A batch of four keys, the first read in two ranges. */
		char kb[4][32];
		const char *keys[4];
		unsigned ids[4];
		kvl_range rg[5];
		size_t nr[4] = { 2, 1, 1, 1 };
		int res[4];
		for (int k = 0; k < 4; k++) {
			ids[k] = (unsigned)(splitmix64(&x) % CONC_IDS);
			conc_key(kb[k], sizeof kb[k], ids[k]);
			keys[k] = kb[k];
		}
		size_t half = c->len[ids[0]] / 2;
		rg[0] = (kvl_range){ half, d + half, c->len[ids[0]] - half };
		rg[1] = (kvl_range){ 0, d, half };
		for (int k = 1; k < 4; k++)
			rg[k + 1] = (kvl_range){ 0, d + 16384 * k,
				                 c->len[ids[k]] };
		memset(d, 0xee, 16384 * 4);
		if (kvl_store_get(c->s, keys, 4, rg, nr, res) != 0) {
			conc_fail(c, "kvl_store_get failed", 0);
			break;
		}
		for (int k = 0; k < 4; k++) {
			size_t len = c->len[ids[k]];
			const uint8_t *dk = d + 16384 * k;
			if (res[k] == KVL_ENOTFOUND) {
				if (dk[0] != 0xee || dk[len - 1] != 0xee)
					conc_fail(c, "absent key wrote bytes",
					          ids[k]);
				atomic_fetch_add(&c->missing, 1);
			} else if (res[k] == 0) {
				if (memcmp(dk, c->data[ids[k]], len) != 0)
					conc_fail(c, "wrong bytes for id",
					          ids[k]);
				atomic_fetch_add(&c->seen, 1);
			} else {
				conc_fail(c, "unexpected get result", res[k]);
			}
		}
		int er;
		if (kvl_store_exists(c->s, keys, 1, &er) != 0 ||
		    (er != 0 && er != 1))
			conc_fail(c, "unexpected exists result", er);
	}
	free(d);
	return NULL;
}

static void *conc_writer(void *p)
{
	struct conc_arg *a = p;
	struct conc *c = a->c;
	uint64_t x = a->id * 104729 + 3;
	for (int it = 0; it < a->iters; it++) {
		unsigned id = (unsigned)(splitmix64(&x) % CONC_IDS);
		char kb[32], tiny[32];
		const char *keys[2] = { kb, tiny };
		conc_key(kb, sizeof kb, id);
		/* Many distinct small keys make the index grow under the
		 * readers. */
		snprintf(tiny, sizeof tiny, "tiny/%u/%d", a->id, it);
		kvl_iov iov[3] = { { c->data[id], 100 },
			           { c->data[id] + 100, c->len[id] - 100 },
			           { c->data[id], 16 } };
		size_t np[2] = { 2, 1 };
		int res[2];
		if (kvl_store_put(c->s, keys, 2, iov, np, res) != 0) {
			conc_fail(c, "kvl_store_put failed", 0);
			break;
		}
		for (int k = 0; k < 2; k++) {
			if (res[k] == KVL_EFULL)
				atomic_fetch_add(&c->full, 1);
			else if (res[k] == KVL_PUT_STORED)
				atomic_fetch_add(&c->stored, 1);
			else if (res[k] != KVL_PUT_STORED &&
			         res[k] != KVL_PUT_PRESENT)
				conc_fail(c, "unexpected put result", res[k]);
		}
		if (it % 16 == 0) {
			int rr;
			conc_key(kb, sizeof kb,
			         (unsigned)(splitmix64(&x) % CONC_IDS));
			if (kvl_store_remove(c->s, keys, 1, &rr) != 0 ||
			    (rr != 0 && rr != 1))
				conc_fail(c, "unexpected remove result", rr);
		}
	}
	atomic_fetch_sub(&c->writers, 1);
	return NULL;
}

static void test_concurrency(void **state)
{
	const struct backend *b = bk(state);
	struct conc *c = calloc(1, sizeof *c);
	assert_non_null(c);
	pthread_mutex_init(&c->mu, NULL);
	size_t total = 0;
	for (unsigned i = 0; i < CONC_IDS; i++) {
		c->len[i] = 4096 + (i % 12) * 1000; /* up to 15 KiB */
		c->data[i] = pattern(c->len[i], 1000 + i);
		total += c->len[i];
	}
	/* Room for about a third of the objects: constant eviction. */
	c->s = b->cap_fmt ? open_cap(b, total / 3) : open_backend(b);
	for (unsigned i = 0; i < CONC_IDS; i++) {
		char kb[32];
		conc_key(kb, sizeof kb, i);
		remove1(c->s, kb);
	}

	atomic_store(&c->writers, CONC_WRITERS);
	pthread_t th[CONC_READERS + CONC_WRITERS];
	struct conc_arg args[CONC_READERS + CONC_WRITERS];
	/* Writers first: readers wait for them. */
	for (int i = 0; i < CONC_READERS + CONC_WRITERS; i++) {
		bool writer = i < CONC_WRITERS;
		args[i] = (struct conc_arg){ c, (unsigned)i,
			                     writer ? 4000 : 3000 };
		int rc = pthread_create(&th[i], NULL,
		                        writer ? conc_writer : conc_reader,
		                        &args[i]);
		ASSERT_EQ(rc, 0);
	}
	for (int i = 0; i < CONC_READERS + CONC_WRITERS; i++)
		pthread_join(th[i], NULL);

	if (atomic_load(&c->bad))
		fail_msg("%d bad outcomes; first: %s", atomic_load(&c->bad),
		         c->msg);
	print_message("    %ld complete reads, %ld misses, %ld full puts\n",
	              atomic_load(&c->seen), atomic_load(&c->missing),
	              atomic_load(&c->full));
	assert_true(atomic_load(&c->seen) > 0);
	assert_true(atomic_load(&c->missing) > 0);

	/* Afterwards, a consistent state. */
	kvl_store_stats st = store_stats(c->s);
	if (b->flags & BK_EXACT_LRU) {
		assert_true(st.bytes <= st.capacity);
		assert_true(st.evictions > 0);
		unsigned present = 0;
		for (unsigned i = 0; i < CONC_IDS; i++) {
			char kb[32];
			conc_key(kb, sizeof kb, i);
			present += exists1(c->s, kb) == 1;
		}
		assert_true(present <= st.objects);
	}
	for (unsigned i = 0; i < CONC_IDS; i++)
		free(c->data[i]);
	kvl_store_close(c->s);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

/* An object that is being read stays whole while the store fills up: the
 * object it holds blocks room (KVL_EFULL), then is evicted (invisible at
 * once), and the reader still has every byte; the last unpin frees it.
 * Deterministic: the read is held by an in-place peek (the same pin a get
 * takes while it copies) for as long as the test needs. Then a get races
 * the same fill-up once: whatever the timing it sees all or nothing. */
struct pin {
	kvl_store *s;
	const char *key;
	uint8_t *dst;
	size_t len;
	atomic_int started;
	atomic_int done;
	int result;
};

static void *pin_reader(void *p)
{
	struct pin *pn = p;
	kvl_range r = { 0, pn->dst, pn->len };
	size_t one = 1;
	atomic_store(&pn->started, 1);
	if (kvl_store_get(pn->s, &pn->key, 1, &r, &one, &pn->result) != 0)
		pn->result = -1000;
	atomic_store(&pn->done, 1);
	return NULL;
}

static void test_pinned_read(void **state)
{
	const struct backend *b = bk(state);
	if (!(b->flags & BK_PINNED) || !b->cap_fmt)
		skip();
	const size_t big = 64u << 20, small = 64u << 10, full = 4u << 20;
	uint8_t *src = pattern(big, 11);
	uint8_t *sp = pattern(full, 12);
	char key[32];

	/* 1. Held by a peek: full put refused, then evicted while held
	 * (stores that lend their memory; the fault wrapper does not). */
	kvl_store *s = open_cap(b, big + (2u << 20));
	const char *bk_key = "pin/big";
	int i = 0;
	if (!kvl__store_caps_of(s).in_place) {
		print_message("    %s lends no memory: the held read runs on "
		              "mem: only\n", b->name);
		kvl_store_close(s);
		goto race;
	}
	ASSERT_CODE(put1(s, bk_key, src, big), KVL_PUT_STORED);
	kvl__view v = { 0 };
	int found = -100;
	ASSERT_CODE(kvl__store_peek(s, &bk_key, 1, &v, &found), 0);
	ASSERT_CODE(found, 1);
	ASSERT_U64(v.len, big);
	/* No room while the big object is held. */
	ASSERT_CODE(put1(s, "pin/full", sp, full), KVL_EFULL);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "pin/full");
	/* Small objects push it out of the LRU tail: it goes first (its
	 * bytes stay counted while held, so an older small one goes too). */
	for (; i < 64 && store_stats(s).evictions == 0; i++) {
		snprintf(key, sizeof key, "pin/s%02d", i);
		int r = put1(s, key, sp, small);
		if (r != KVL_PUT_STORED)
			fail_msg("put %s == %s", key, kvl_err_name(r));
	}
	assert_true(store_stats(s).evictions > 0);
	ASSERT_EQ(exists1(s, bk_key), 0); /* invisible at once */
	if (memcmp(v.data, src, big) != 0)
		fail_msg("the held object's bytes changed after its eviction");
	kvl__store_release(s, &v, 1);
	/* The evicted object is freed by the last unpin: what remains is
	 * exactly the small objects. */
	kvl_store_stats st = store_stats(s);
	assert_true(st.objects > 0);
	ASSERT_U64(st.bytes, st.objects * (st.bytes / st.objects));
	assert_true(st.bytes < (uint64_t)big);
	ASSERT_EQ(exists1(s, bk_key), 0);
	/* Room again for the object the pin refused. */
	ASSERT_CODE(put1(s, "pin/full", sp, full), KVL_PUT_STORED);
	kvl_store_close(s);

race:
	/* 2. A get racing the same fill-up: all or nothing. */
	s = open_cap(b, big + (2u << 20));
	struct pin pn = { .s = s, .key = "pin/big", .len = big };
	ASSERT_CODE(put1(s, pn.key, src, big), KVL_PUT_STORED);
	pn.dst = mmap(NULL, big, PROT_READ | PROT_WRITE,
	              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(pn.dst != MAP_FAILED);
	pthread_t th;
	ASSERT_EQ(pthread_create(&th, NULL, pin_reader, &pn), 0);
	while (!atomic_load(&pn.started))
		sched_yield();
	int r_full = put1(s, "pin/full", sp, full);
	for (i = 0; i < 64 && store_stats(s).evictions == 0; i++) {
		snprintf(key, sizeof key, "pin/s%02d", i);
		int r = put1(s, key, sp, small);
		if (r != KVL_PUT_STORED)
			fail_msg("put %s == %s", key, kvl_err_name(r));
	}
	pthread_join(th, NULL);
	if (pn.result == KVL_ENOTFOUND) {
		assert_true(r_full == KVL_PUT_STORED);
	} else {
		ASSERT_CODE(pn.result, 0);
		if (memcmp(pn.dst, src, big) != 0)
			fail_msg("the pinned object's bytes changed under "
			         "the reader");
	}
	if (r_full == KVL_EFULL)
		ASSERT_CONTAINS(kvl_store_errmsg(s), "pin/full");
	munmap(pn.dst, big);
	kvl_store_close(s);
	free(sp);
	free(src);
}

/* ------------------------------------------------------------------ main */

static int run_backend(struct backend *b)
{
	struct CMUnitTest tests[] = {
		cmocka_unit_test_prestate(test_roundtrip, b),
		cmocka_unit_test_prestate(test_put_present, b),
		cmocka_unit_test_prestate(test_get_absent_and_range, b),
		cmocka_unit_test_prestate(test_remove, b),
		cmocka_unit_test_prestate(test_null_args, b),
		cmocka_unit_test_prestate(test_n_zero, b),
		cmocka_unit_test_prestate(test_stats_exact, b),
		cmocka_unit_test_prestate(test_lru_exact, b),
		cmocka_unit_test_prestate(test_concurrency, b),
		cmocka_unit_test_prestate(test_pinned_read, b),
	};
	char name[64];
	snprintf(name, sizeof name, "store[%s]", b->name);
	print_message("[==========] backend %s: %s\n", b->name, b->uri);
	return _cmocka_run_group_tests(name, tests, sizeof tests / sizeof tests[0],
	                               NULL, NULL);
}

/* Whether the store at uri reads whole objects (Mooncake without
 * kvlink's shim). */
static int whole_reads(const char *uri)
{
	kvl_store *s = open_ok(uri);
	int whole = kvl__store_caps_of(s).whole_reads;
	kvl_store_close(s);
	return whole;
}

int main(void)
{
	const struct CMUnitTest common[] = {
		cmocka_unit_test(test_parse_size),
		cmocka_unit_test(test_uri_parse),
		cmocka_unit_test(test_open_defaults),
		cmocka_unit_test(test_open_malformed),
		cmocka_unit_test(test_stats_unknown),
		cmocka_unit_test(test_wrapping_ranges),
		cmocka_unit_test(test_pinned_note),
		cmocka_unit_test(test_null_store),
	};
	int failed = cmocka_run_group_tests_name("store", common, NULL, NULL);
	file_root = tmpdir_make("test-store");
	static char file_uris[3][4096 + 64];
	for (size_t i = 0, f = 0; i < sizeof backends / sizeof backends[0]; i++)
		if (backends[i].flags & BK_FRESH_DIR) {
			char *dir = tmpdir_sub(file_root, backends[i].name);
			snprintf(file_uris[f], sizeof file_uris[f],
			         backends[i].cap_fmt, dir, 256ull << 20);
			backends[i].uri = file_uris[f++];
			free(dir);
		}
	for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
		failed += run_backend(&backends[i]);
	tmpdir_remove(file_root);
	const char *env = env_store();
	if (env) {
		env_backend.uri = env;
		/* Mooncake holds no empty objects, and on whole objects does
		 * not tell a put of a present key from a new one
		 * (docs/mooncake.md). */
		if (strncmp(env, "mooncake:", 9) == 0)
			env_backend.flags |= BK_NO_EMPTY;
		if (strncmp(env, "mooncake:", 9) == 0 && whole_reads(env))
			env_backend.flags |= BK_PRESENT_STORED;
		failed += run_backend(&env_backend);
	}
	return failed ? 1 : 0;
}
