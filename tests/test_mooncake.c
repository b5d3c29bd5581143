/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_mooncake.c — the mooncake:// store: clear errors without Mooncake
 * (always), and against a real deployment (tests/mooncake/run.sh: a master
 * and a client holding the pool's memory, in other processes) objects,
 * "already exists", byte ranges of whole objects, the two ways of moving
 * bytes (ranges through kvlink's shim, whole objects through the C API),
 * batch holds and page groups, eviction under pressure,
 * reads that outlast their lease, a holder that dies and a master that
 * dies: every failure is a clean per-key or per-request error, and loads
 * never report a wrong byte valid.
 * The generic store and linker suites run on the same deployment too
 * (ctest: mooncake_store, mooncake_linker, mooncake_isolation).
 *
 * Without a deployment (neither $KVL_MOONCAKE_CTL nor a mooncake://
 * $KVL_TEST_STORE_URI) only the first test runs, and the program exits 77
 * (skipped) after it, saying why; with part of a deployment (one of them,
 * or no $KVL_MOONCAKE_LIB) it fails.
 */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/clock.h"
#include "support/kvl_assert.h"
#include "support/stores.h"

#include "core/layout.h"
#include "kvlink.h"
#include "store/store.h"

/* ------------------------------------------------------------ helpers */

static const char *deployment(void)
{
	const char *ctl = getenv("KVL_MOONCAKE_CTL");
	const char *uri = env_store();
	if (!ctl || !*ctl || !uri || strncmp(uri, "mooncake://", 11) != 0)
		return NULL;
	return uri;
}

/* main runs the deployment's tests only when there is one. */
#define NEED_DEPLOYMENT() assert_non_null(deployment())

/* Runs $KVL_MOONCAKE_CTL ACTION (stop-holder, start-master, …). */
static void ctl(const char *action)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "%s %s", getenv("KVL_MOONCAKE_CTL"), action);
	if (system(cmd) != 0)
		fail_msg("%s failed", cmd);
}

/* `uri` with its staging= option set to `staging`. */
static void with_staging(char *out, size_t n, const char *uri,
                         const char *staging)
{
	const char *at = strstr(uri, "staging=");
	assert_non_null(at);
	at += strlen("staging=");
	int w = snprintf(out, n, "%.*s%s%s", (int)(at - uri), uri, staging,
	                 at + strcspn(at, "&"));
	assert_true(w > 0 && (size_t)w < n);
}

/* Key i of a test, unique to this process. */
static void key_of(char *buf, const char *test, size_t i)
{
	snprintf(buf, KVL_KEY_MAX, "kvl-test-mooncake:%ld:%s:%zu",
	         (long)getpid(), test, i);
}

static uint8_t byte_of(size_t key, size_t i)
{
	return (uint8_t)(key * 131 + i * 7 + (i >> 9));
}

/* Puts n objects of `len` bytes (key i: bytes byte_of(i, …)); results in
 * res. */
static void put_n(kvl_store *s, const char *test, size_t n, size_t len,
                  int *res)
{
	char (*keys)[KVL_KEY_MAX] = malloc(n * KVL_KEY_MAX);
	const char **kp = malloc(n * sizeof *kp);
	kvl_iov *iov = malloc(n * sizeof *iov);
	size_t *one = malloc(n * sizeof *one);
	uint8_t *data = malloc(n * len);
	assert_true(keys && kp && iov && one && data);
	for (size_t i = 0; i < n; i++) {
		key_of(keys[i], test, i);
		kp[i] = keys[i];
		for (size_t b = 0; b < len; b++)
			data[i * len + b] = byte_of(i, b);
		iov[i] = (kvl_iov){data + i * len, len};
		one[i] = 1;
	}
	ASSERT_CODE(kvl_store_put(s, kp, n, iov, one, res), KVL_OK);
	free(keys);
	free(kp);
	free(iov);
	free(one);
	free(data);
}

/* Reads n objects of `len` bytes whole; res[i] as kvl_store_get; bytes of
 * every key that reports success are checked. */
static void get_n(kvl_store *s, const char *test, size_t n, size_t len,
                  int *res)
{
	char (*keys)[KVL_KEY_MAX] = malloc(n * KVL_KEY_MAX);
	const char **kp = malloc(n * sizeof *kp);
	kvl_range *rg = malloc(n * sizeof *rg);
	size_t *one = malloc(n * sizeof *one);
	uint8_t *data = malloc(n * len);
	assert_true(keys && kp && rg && one && data);
	memset(data, 0xEE, n * len);
	for (size_t i = 0; i < n; i++) {
		key_of(keys[i], test, i);
		kp[i] = keys[i];
		rg[i] = (kvl_range){0, data + i * len, len};
		one[i] = 1;
	}
	int rc = kvl_store_get(s, kp, n, rg, one, res);
	for (size_t i = 0; i < n; i++) {
		if (rc)
			res[i] = rc;
		if (res[i] < 0)
			continue;
		ASSERT_CODE(res[i], 0);
		for (size_t b = 0; b < len; b++)
			if (data[i * len + b] != byte_of(i, b))
				fail_msg("key %zu byte %zu wrong", i, b);
	}
	free(keys);
	free(kp);
	free(rg);
	free(one);
	free(data);
}

/* ------------------------------------------------------- no Mooncake */

static void test_open_errors(void **state)
{
	(void)state;
	/* No library: ENOTSUP naming it and how to point at it. */
	open_fails("mooncake://127.0.0.1:1?lib=/nonexistent/libmooncake_store.so",
	           KVL_ENOTSUP, "libmooncake_store.so");
	open_fails("mooncake://127.0.0.1:1?lib=/nonexistent/libmooncake_store.so",
	           KVL_ENOTSUP, "lib=");
	/* A library that is not Mooncake's. */
	open_fails("mooncake://127.0.0.1:1?lib=libcrypto.so.3", KVL_ENOTSUP,
	           "has no mooncake_store_");
	/* KVL_MOONCAKE_LIB when lib= is not given. */
	const char *old = getenv("KVL_MOONCAKE_LIB");
	char *saved = old ? strdup(old) : NULL;
	setenv("KVL_MOONCAKE_LIB", "/nonexistent/from-env.so", 1);
	open_fails("mooncake://127.0.0.1:1", KVL_ENOTSUP, "from-env.so");
	if (saved)
		setenv("KVL_MOONCAKE_LIB", saved, 1);
	else
		unsetenv("KVL_MOONCAKE_LIB");
	free(saved);
	/* Malformed URIs and options, refused before loading anything. */
	open_fails("mooncake://", KVL_EPARSE, "MASTER_HOST");
	open_fails("mooncake://h:1/db", KVL_EPARSE, "path");
	open_fails("mooncake://h:1?replicas=0", KVL_EPARSE, "replicas");
	open_fails("mooncake://h:1?staging=1KiB", KVL_EPARSE, "staging");
	open_fails("mooncake://h:1?segmnet=1GiB", KVL_EPARSE, "segmnet");
	open_fails("mooncake://h:1?segment=lots", KVL_EPARSE, "segment");
	open_fails("mooncake://h:1?api=fast", KVL_EPARSE, "auto, ranges or whole");
	open_fails("mooncake://h:1?groups=maybe", KVL_EPARSE, "groups");
}

/* A page's objects of every pool and shard share one group; other pages,
 * and keys that are not a page's, do not. */
static void test_page_group(void **state)
{
	(void)state;
	char fa[33], fb[33], h1[65], h2[65], k[4][KVL_KEY_MAX];
	char g[4][KVL_KEY_MAX];
	memset(fa, 'a', 32), fa[32] = 0;
	memset(fb, '0', 32), fb[32] = 0;
	memset(h1, '7', 64), h1[64] = 0;
	memset(h2, 'e', 64), h2[64] = 0;
	snprintf(k[0], KVL_KEY_MAX, "kvl1:m:%s:%s:kv:tp0_cp0_pp0", fa, h1);
	snprintf(k[1], KVL_KEY_MAX, "kvl1:m:%s:%s:idx:cp0_pp0", fb, h1);
	snprintf(k[2], KVL_KEY_MAX, "kvl1:m:%s:%s:kv:tp0_cp0_pp0", fa, h2);
	snprintf(k[3], KVL_KEY_MAX, "kvl1:t:kvl1:m:%s:%s:kv:tp1_cp0_pp0", fa,
	         h1);
	for (int i = 0; i < 4; i++)
		assert_true(kvl__page_group(k[i], g[i]) > 0);
	char want[KVL_KEY_MAX];
	snprintf(want, sizeof want, "kvl1:m:%s", h1);
	assert_string_equal(g[0], want);
	assert_string_equal(g[1], want);
	assert_string_not_equal(g[2], want);
	snprintf(want, sizeof want, "kvl1:t:kvl1:m:%s", h1);
	assert_string_equal(g[3], want);
	/* Not a page's key: no group. */
	char bad[KVL_KEY_MAX];
	assert_int_equal(kvl__page_group("plain-key", bad), 0);
	snprintf(bad, sizeof bad, "kvl1:m:%s:%.63s:kv:tp0_cp0_pp0", fa, h1);
	assert_int_equal(kvl__page_group(bad, g[0]), 0);
	snprintf(bad, sizeof bad, "kvl1:m:%s:%s:kv:tp0_cp0_pp0", fa, h1);
	bad[40] = 'A'; /* upper case is not kvlink's hex */
	assert_int_equal(kvl__page_group(bad, g[0]), 0);
}

/* ------------------------------------------------------ a deployment */

/* An engine: one pool of ENG_LAYERS layers, one 64 KiB component, ENG_SLOTS
 * slots in host memory, and a linker on store s. */
#define ENG_LAYERS 4
#define ENG_SLOTS 8
#define ENG_BYTES (64 << 10)
typedef struct engine {
	kvl_layout *l;
	kvl_linker *lk;
	uint8_t *mem;
	int pool;
} engine;

static void engine_open(engine *e, kvl_store *s, const char *tag)
{
	e->mem = malloc((size_t)ENG_LAYERS * ENG_SLOTS * ENG_BYTES);
	assert_non_null(e->mem);
	ASSERT_CODE(kvl_layout_create(tag, 16, NULL, &e->l, NULL, 0), KVL_OK);
	ASSERT_CODE(kvl_layout_add_pool(e->l, "kv", KVL_HIT_ALL_PAGES, 0, 0,
	                                &e->pool),
	            KVL_OK);
	for (uint32_t ly = 0; ly < ENG_LAYERS; ly++) {
		kvl_buffer b = {
			.base = e->mem + (size_t)ly * ENG_SLOTS * ENG_BYTES,
			.page_stride = ENG_BYTES,
			.page_bytes = ENG_BYTES,
			.num_pages = ENG_SLOTS,
			.mem = KVL_MEM_HOST};
		ASSERT_CODE(kvl_layout_add_buffer(e->l, e->pool, "kv", ly, &b),
		            KVL_OK);
	}
	ASSERT_CODE(kvl_layout_finalize(e->l), KVL_OK);
	char err[512] = "";
	int rc = kvl_linker_open(s, e->l, NULL, &e->lk, err, sizeof err);
	if (rc)
		fail_msg("linker: %s", err);
}

static void engine_close(engine *e)
{
	kvl_linker_close(e->lk);
	kvl_layout_free(e->l);
	free(e->mem);
}

static void pages_of(kvl_hash *h, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++) {
		memset(&h[i], 0, sizeof h[i]);
		h[i].bytes[0] = (uint8_t)i;
		h[i].bytes[1] = (uint8_t)seed;
		h[i].bytes[2] = (uint8_t)getpid();
	}
}

static kvl_completion collect(kvl_linker *lk, uint64_t id)
{
	kvl_completion c;
	size_t n = 0;
	for (int i = 0; i < 600; i++) {
		ASSERT_CODE(kvl_linker_poll(lk, &c, 1, &n, 1000), KVL_OK);
		if (n && c.id == id)
			return c;
	}
	fail_msg("request %llu never completed", (unsigned long long)id);
	return c;
}

/* Offloads pages 0..n-1 from slots 0..n-1 (filled with a pattern). */
static void engine_offload(engine *e, const kvl_hash *h, size_t n,
                           uint64_t id)
{
	size_t slots[ENG_SLOTS];
	for (size_t i = 0; i < n; i++) {
		slots[i] = i;
		for (uint32_t ly = 0; ly < ENG_LAYERS; ly++)
			memset(e->mem + ((size_t)ly * ENG_SLOTS + i) * ENG_BYTES,
			       (int)(i * 16 + ly + 1), ENG_BYTES);
	}
	const size_t *sl[1] = {slots};
	ASSERT_CODE(kvl_linker_offload(e->lk, id, h, n, sl, NULL), KVL_OK);
	kvl_completion c = collect(e->lk, id);
	ASSERT_CODE(c.status, KVL_OK);
	ASSERT_EQ(c.valid_pages, n);
}

/* Loads pages 0..n-1 into slots n.. and returns the completion; *waits
 * gets the wait of the last layer. */
static kvl_completion engine_load(engine *e, const kvl_hash *h, size_t n,
                                  uint64_t id, int *wait)
{
	size_t slots[ENG_SLOTS];
	for (size_t i = 0; i < n; i++)
		slots[i] = n + i;
	const size_t *sl[1] = {slots};
	uint64_t b;
	ASSERT_CODE(kvl_linker_load(e->lk, id, h, n, sl), KVL_OK);
	ASSERT_CODE(kvl_linker_start(e->lk, &b), KVL_OK);
	*wait = kvl_linker_wait(e->lk, b, ENG_LAYERS - 1, 600000);
	return collect(e->lk, id);
}

/* 1 when the store moves byte ranges through kvlink's shim, 0 when whole
 * objects through the C API, as its stats say; *direct and *staged get the
 * bytes of ranges read each way. */
static int moves_ranges(kvl_store *s, unsigned long long *direct,
                        unsigned long long *staged)
{
	char buf[8192];
	ASSERT_CODE(kvl_store_stats_render(s, KVL_STATS_JSON, buf, sizeof buf,
	                                   NULL),
	            KVL_OK);
	const char *at = strstr(buf, "\"mooncake\":{\"api\":\"");
	if (!at)
		fail_msg("no mooncake member in %s", buf);
	int ranges = strncmp(at + 19, "ranges", 6) == 0;
	const char *d = strstr(at, "\"read_bytes_direct\":");
	const char *st = strstr(at, "\"read_bytes_staged\":");
	assert_true(d && st);
	if (direct)
		*direct = strtoull(d + 20, NULL, 10);
	if (staged)
		*staged = strtoull(st + 20, NULL, 10);
	return ranges;
}

/* The way the deployment's URI asks for (run.sh's api=) is the way used:
 * ranges through the shim, or whole objects with api=whole (auto: ranges
 * when the library has the shim); the linker reads layer by layer on
 * ranges only. api=ranges of a library without the shim fails at open,
 * naming the shim. */
static void test_api(void **state)
{
	(void)state;
	NEED_DEPLOYMENT();
	const char *uri = deployment();
	const char *lib = getenv("KVL_MOONCAKE_LIB");
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	assert_non_null(h);
	int has_shim = dlsym(h, "kvl_mc_shim_version") != NULL;
	kvl_store *s = open_ok(uri);
	int ranges = moves_ranges(s, NULL, NULL);
	ASSERT_EQ(ranges, strstr(uri, "api=whole") ? 0 : has_shim);
	ASSERT_EQ(kvl__store_caps_of(s).whole_reads, !ranges);
	kvl_store_close(s);
	char other[1024];
	snprintf(other, sizeof other, "mooncake://127.0.0.1:9?lib=%s&api=ranges",
	         lib);
	if (has_shim) /* past the shim, to the master (not at port 9) */
		open_fails(other, KVL_EIO, "127.0.0.1:9");
	else
		open_fails(other, KVL_ENOTSUP, "shim");
}

/* A hold keeps the object leased (ranges): a remove that will not wait for
 * leases fails while it is held, and succeeds once the hold is let go and
 * the lease ran out. Page groups lease a page's other objects with it;
 * groups=0 does not. Whole objects hold nothing. */
static void hold_run(const char *uri, int groups, int *held, int *other)
{
	char u[1200];
	snprintf(u, sizeof u, "%s&groups=%d", uri, groups);
	kvl_store *s = open_ok(u);
	snprintf(u, sizeof u, "%s&remove_wait_ms=0", uri);
	kvl_store *r = open_ok(u);
	char fp[33], hash[65], k[2][KVL_KEY_MAX];
	memset(fp, 'c', 32), fp[32] = 0;
	snprintf(hash, sizeof hash, "%08x%056d", (unsigned)getpid() * 2 + groups,
	         0);
	snprintf(k[0], KVL_KEY_MAX, "kvl1:hold:%s:%s:kv:tp0_cp0_pp0", fp, hash);
	snprintf(k[1], KVL_KEY_MAX, "kvl1:hold:%s:%s:idx:tp0_cp0_pp0", fp, hash);
	const char *kp[2] = {k[0], k[1]};
	static uint8_t data[4096];
	kvl_iov iov[2] = {{data, sizeof data}, {data, sizeof data}};
	size_t one[2] = {1, 1};
	int res[2];
	ASSERT_CODE(kvl_store_put(s, kp, 2, iov, one, res), KVL_OK);
	ASSERT_CODE(res[0], KVL_PUT_STORED);
	ASSERT_CODE(res[1], KVL_PUT_STORED);
	usleep(300 * 1000); /* any lease of the put has run out */
	ASSERT_CODE(kvl__store_hold(s, kp, 1, res), KVL_OK);
	int h = res[0];
	ASSERT_CODE(kvl_store_remove(r, kp, 2, res), KVL_OK);
	*held = res[0] < 0;  /* the held object stayed */
	*other = res[1] < 0; /* its group's other object stayed */
	if (h == 1) {
		ASSERT_CODE(kvl__store_unhold(s, kp, 1, res), KVL_OK);
	}
	usleep(300 * 1000);
	ASSERT_CODE(kvl_store_remove(r, kp, 2, res), KVL_OK);
	for (int i = 0; i < 2; i++)
		assert_true(res[i] >= 0); /* gone now, or already */
	kvl_store_close(r);
	kvl_store_close(s);
}

static void test_holds_and_groups(void **state)
{
	(void)state;
	NEED_DEPLOYMENT();
	const char *uri = deployment();
	kvl_store *s = open_ok(uri);
	int ranges = moves_ranges(s, NULL, NULL);
	kvl_store_close(s);
	int held, other;
	hold_run(uri, 1, &held, &other);
	printf("hold, groups=1: held %d, its group's other %d\n", held, other);
	ASSERT_EQ(held, ranges);
	ASSERT_EQ(other, ranges);
	/* Through a fault+ store, which passes holds on. */
	char wrapped[1200];
	snprintf(wrapped, sizeof wrapped, "fault+%s", uri);
	hold_run(wrapped, 1, &held, &other);
	ASSERT_EQ(held, ranges);
	if (!ranges)
		return; /* whole objects: no groups either */
	hold_run(uri, 0, &held, &other);
	printf("hold, groups=0: held %d, the other %d\n", held, other);
	ASSERT_EQ(held, 1);
	ASSERT_EQ(other, 0);
}

/* A linker registers its pools with the store: on ranges, its layer-wise
 * loads land straight in the slots (no staged bytes), layer by layer. */
static void test_linker_direct(void **state)
{
	(void)state;
	NEED_DEPLOYMENT();
	kvl_store *s = open_ok(deployment());
	engine e;
	engine_open(&e, s, "direct");
	kvl_hash h[4];
	pages_of(h, 4, 41);
	engine_offload(&e, h, 4, 1);
	int wait;
	kvl_completion c = engine_load(&e, h, 4, 2, &wait);
	ASSERT_CODE(c.status, KVL_OK);
	ASSERT_EQ(c.valid_pages, 4);
	ASSERT_CODE(wait, KVL_OK);
	for (size_t i = 0; i < 4; i++)
		for (uint32_t ly = 0; ly < ENG_LAYERS; ly++)
			ASSERT_EQ(e.mem[((size_t)ly * ENG_SLOTS + 4 + i) * ENG_BYTES + 9],
			          (uint8_t)(i * 16 + ly + 1));
	unsigned long long direct, staged;
	int ranges = moves_ranges(s, &direct, &staged);
	printf("linker loads: %llu bytes direct, %llu staged\n", direct,
	       staged);
	if (ranges) {
		assert_true(direct >= 4ull * ENG_LAYERS * ENG_BYTES);
	} else {
		ASSERT_U64(direct, 0);
		ASSERT_U64(staged, 0);
	}
	engine_close(&e);
	kvl_store_close(s);
}

static void test_master_down_at_open(void **state)
{
	(void)state;
	NEED_DEPLOYMENT();
	const char *lib = getenv("KVL_MOONCAKE_LIB");
	char uri[1024];
	/* Port 9 (discard): nobody listens there. */
	snprintf(uri, sizeof uri, "mooncake://127.0.0.1:9?lib=%s", lib);
	double t = now_s();
	open_fails(uri, KVL_EIO, "127.0.0.1:9");
	printf("master down at open: KVL_EIO after %.1f s\n", now_s() - t);
}

static void test_objects(void **state)
{
	(void)state;
	NEED_DEPLOYMENT();
	kvl_store *s = open_ok(deployment());
	int ranges = moves_ranges(s, NULL, NULL);
	int again = ranges ? KVL_PUT_PRESENT : KVL_PUT_STORED;
	int res[4];
	int got[4];
	/* Three objects. Putting them again: Mooncake keeps the first
	 * bytes; its put session says they were there (ranges), its C API
	 * does not, and then it "counts as stored" (whole). */
	put_n(s, "objects", 3, 100000, res);
	for (int i = 0; i < 3; i++)
		ASSERT_CODE(res[i], KVL_PUT_STORED);
	put_n(s, "objects", 3, 100000, res);
	for (int i = 0; i < 3; i++)
		ASSERT_CODE(res[i], again);
	/* Other bytes under key 0: also "stored", and the first stay. */
	static uint8_t other[100000];
	memset(other, 0x55, sizeof other);
	char k0[KVL_KEY_MAX];
	key_of(k0, "objects", 0);
	const char *kp0 = k0;
	kvl_iov io = {other, sizeof other};
	size_t one = 1;
	ASSERT_CODE(kvl_store_put(s, &kp0, 1, &io, &one, res), KVL_OK);
	ASSERT_CODE(res[0], again);
	get_n(s, "objects", 3, 100000, got);
	for (int i = 0; i < 3; i++)
		ASSERT_CODE(got[i], 0);

	/* Ranges of one object: the head alone (the object is larger than
	 * the ranges), two pieces, and one past the end. */
	char k9[KVL_KEY_MAX];
	key_of(k9, "objects", 9);
	const char *kp[2] = {k0, k9};
	uint8_t a[64], b[1000];
	kvl_range rg[3] = {{0, a, sizeof a}, {50000, b, sizeof b}};
	size_t nr[2] = {1, 1};
	ASSERT_CODE(kvl_store_get(s, kp, 2, rg, nr, got), KVL_OK);
	ASSERT_CODE(got[0], 0);
	ASSERT_CODE(got[1], KVL_ENOTFOUND);
	for (size_t i = 0; i < sizeof a; i++)
		ASSERT_EQ(a[i], byte_of(0, i));
	nr[0] = 2;
	rg[1] = (kvl_range){50000, b, sizeof b};
	ASSERT_CODE(kvl_store_get(s, kp, 1, rg, nr, got), KVL_OK);
	ASSERT_CODE(got[0], 0);
	for (size_t i = 0; i < sizeof b; i++)
		ASSERT_EQ(b[i], byte_of(0, 50000 + i));
	rg[0] = (kvl_range){99999, a, 2};
	nr[0] = 1;
	ASSERT_CODE(kvl_store_get(s, kp, 1, rg, nr, got), KVL_OK);
	ASSERT_CODE(got[0], KVL_ERANGE);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "beyond");

	/* exists and remove. */
	int ex[2];
	ASSERT_CODE(kvl_store_exists(s, kp, 2, ex), KVL_OK);
	ASSERT_EQ(ex[0], 1);
	ASSERT_EQ(ex[1], 0);
	ASSERT_CODE(kvl_store_remove(s, kp, 2, ex), KVL_OK);
	ASSERT_EQ(ex[0], 1);
	ASSERT_EQ(ex[1], 0);
	ASSERT_CODE(kvl_store_exists(s, kp, 1, ex), KVL_OK);
	ASSERT_EQ(ex[0], 0);
	get_n(s, "objects", 3, 100000, got);
	ASSERT_CODE(got[0], KVL_ENOTFOUND);
	ASSERT_CODE(got[1], 0);

	kvl_store_stats st;
	ASSERT_CODE(kvl_store_stats_get(s, &st), KVL_OK);
	ASSERT_U64(st.puts, ranges ? 3 : 7); /* newly stored, as told */
	ASSERT_U64(st.errors, 1); /* the get past the end */
	kvl_store_close(s);

	/* With 2 MiB of staging (halves of 1 MiB), a 3 MiB object through
	 * staging is a clear KVL_ERANGE, and the same object in registered
	 * memory moves in place, with no limit. Small enough to move well
	 * within the 50 ms read lease this program runs with. */
	char uri[1024];
	with_staging(uri, sizeof uri, deployment(), "2MiB");
	s = open_ok(uri);
	size_t big = 3 << 20;
	put_n(s, "objects-big", 1, big, res);
	ASSERT_CODE(res[0], KVL_ERANGE);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "staging=");
	uint8_t *bsrc = malloc(big), *bdst = malloc(big);
	assert_true(bsrc && bdst);
	for (size_t i = 0; i < big; i++)
		bsrc[i] = byte_of(7, i);
	memset(bdst, 0, big);
	ASSERT_CODE(kvl_store_register(s, bsrc, big, KVL_MEM_HOST), KVL_OK);
	ASSERT_CODE(kvl_store_register(s, bdst, big, KVL_MEM_HOST), KVL_OK);
	char kb[KVL_KEY_MAX];
	key_of(kb, "objects-big-registered", 0);
	const char *kbp = kb;
	kvl_iov bio = {bsrc, big};
	kvl_range brg = {0, bdst, big};
	ASSERT_CODE(kvl_store_put(s, &kbp, 1, &bio, &one, res), KVL_OK);
	ASSERT_CODE(res[0], KVL_PUT_STORED);
	ASSERT_CODE(kvl_store_get(s, &kbp, 1, &brg, &one, got), KVL_OK);
	ASSERT_CODE(got[0], 0);
	assert_memory_equal(bdst, bsrc, big);
	ASSERT_CODE(kvl_store_remove(s, &kbp, 1, res), KVL_OK);
	ASSERT_CODE(kvl_store_stats_get(s, &st), KVL_OK);
	ASSERT_U64(st.puts, 1);
	ASSERT_U64(st.errors, 1); /* the put too large for staging */
	kvl_store_close(s);
	free(bsrc);
	free(bdst);
}

/* Reads that outlast the master's read lease (ctest runs this program
 * with a 50 ms lease): one call for 192 MiB into registered memory takes
 * longer, Mooncake fails it with LEASE_EXPIRED, and kvlink reads each key
 * again alone. Every key reads right or fails cleanly (KVL_EIO naming the
 * lease), never with wrong bytes. */
static void test_lease_expiry(void **state)
{
	(void)state;
	NEED_DEPLOYMENT();
	kvl_store *s = open_ok(deployment());
	enum { N = 12, LEN = 16 << 20 };
	uint8_t *src = malloc((size_t)N * LEN), *dst = malloc((size_t)N * LEN);
	assert_true(src && dst);
	ASSERT_CODE(kvl_store_register(s, src, (size_t)N * LEN, KVL_MEM_HOST),
	            KVL_OK);
	ASSERT_CODE(kvl_store_register(s, dst, (size_t)N * LEN, KVL_MEM_HOST),
	            KVL_OK);
	char keys[N][KVL_KEY_MAX];
	const char *kp[N];
	kvl_iov iov[N];
	kvl_range rg[N];
	size_t one[N];
	int res[N];
	int got[N];
	for (size_t i = 0; i < N; i++) {
		key_of(keys[i], "lease", i);
		kp[i] = keys[i];
		for (size_t b = 0; b < LEN; b += 4096)
			memset(src + i * LEN + b, (int)(i * 16 + b / 4096), 4096);
		iov[i] = (kvl_iov){src + i * LEN, LEN};
		rg[i] = (kvl_range){0, dst + i * LEN, LEN};
		one[i] = 1;
	}
	ASSERT_CODE(kvl_store_put(s, kp, N, iov, one, res), KVL_OK);
	for (size_t i = 0; i < N; i++)
		ASSERT_CODE(res[i], KVL_PUT_STORED);
	double t = now_s();
	ASSERT_CODE(kvl_store_get(s, kp, N, rg, one, got), KVL_OK);
	size_t good = 0;
	for (size_t i = 0; i < N; i++) {
		if (got[i] == 0) {
			if (memcmp(dst + i * LEN, src + i * LEN, LEN))
				fail_msg("key %zu: wrong bytes reported read", i);
			good++;
		} else {
			ASSERT_CODE(got[i], KVL_EIO);
			ASSERT_CONTAINS(kvl_store_errmsg(s), "lease");
		}
	}
	printf("lease expiry: %zu of %d keys read in %.2f s, the rest "
	       "failed cleanly\n",
	       good, N, now_s() - t);
	kvl_store_remove(s, kp, N, res);
	kvl_store_close(s);
	free(src);
	free(dst);
}

/* The pool holds less than is put: every put is stored or refused with
 * KVL_EFULL (never another error), old objects go, and reads of what went
 * say KVL_ENOTFOUND. */
static void test_eviction(void **state)
{
	(void)state;
	NEED_DEPLOYMENT();
	kvl_store *s = open_ok(deployment());
	enum { N = 160, LEN = 4 << 20 }; /* 640 MiB into a 256 MiB pool */
	size_t stored = 0, full = 0;
	for (size_t i = 0; i < N; i += 8) {
		int res[8];
		char test[32];
		snprintf(test, sizeof test, "evict%zu", i);
		put_n(s, test, 8, LEN, res);
		for (int k = 0; k < 8; k++) {
			if (res[k] == KVL_PUT_STORED)
				stored++;
			else if (res[k] == KVL_EFULL)
				full++;
			else
				fail_msg("put %zu: %s (%s)", i + k,
				         kvl_err_name(res[k]),
				         kvl_store_errmsg(s));
		}
	}
	size_t present = 0, absent = 0;
	for (size_t i = 0; i < N; i += 8) {
		int got[8];
		char test[32];
		snprintf(test, sizeof test, "evict%zu", i);
		get_n(s, test, 8, LEN, got);
		for (int k = 0; k < 8; k++) {
			if (got[k] == KVL_ENOTFOUND)
				absent++;
			else if (got[k] == 0)
				present++;
			else
				fail_msg("get %zu: %s", i + k,
				         kvl_err_name(got[k]));
		}
	}
	printf("eviction: %zu stored, %zu refused (full); then %zu present, "
	       "%zu gone\n",
	       stored, full, present, absent);
	assert_true(present < N);
	assert_true(present * (size_t)LEN <= (size_t)300 << 20);
	kvl_store_close(s);
}

/* The client that holds the objects dies: reads fail cleanly, puts find
 * no room; a new holder brings room back. */
static void test_holder_dies(void **state)
{
	(void)state;
	NEED_DEPLOYMENT();
	kvl_store *s = open_ok(deployment());
	int res[8];
	int got[8];
	put_n(s, "holder", 8, 256 << 10, res);
	for (int i = 0; i < 8; i++)
		ASSERT_CODE(res[i], KVL_PUT_STORED);
	engine e;
	engine_open(&e, s, "holder-test");
	kvl_hash h[4];
	pages_of(h, 4, 1);
	engine_offload(&e, h, 4, 1);
	ctl("stop-holder");
	double t = now_s();
	/* The load completes, failed, with no page valid. */
	int wait;
	kvl_completion c = engine_load(&e, h, 4, 2, &wait);
	assert_true(c.status < 0);
	assert_true(wait < 0);
	ASSERT_EQ(c.valid_pages, 0);
	printf("holder died: the load completes with %s\n",
	       kvl_err_name(c.status));
	engine_close(&e);
	get_n(s, "holder", 8, 256 << 10, got);
	for (int i = 0; i < 8; i++)
		if (got[i] >= 0)
			fail_msg("get %d after its holder died: %lld bytes", i,
			         (long long)got[i]);
	printf("holder died: reads fail with %s after %.1f s (%s)\n",
	       kvl_err_name(got[0]), now_s() - t, kvl_store_errmsg(s));
	ctl("start-holder");
	/* Puts may still be placed on the dead holder's memory until the
	 * master drops it (its client TTL, 10 s by default); then all land
	 * in the new holder's. */
	int ok = 0;
	double t_back = now_s();
	for (int tries = 0; tries < 300 && !ok; tries++) {
		char test[32];
		snprintf(test, sizeof test, "holder-back%d", tries);
		put_n(s, test, 8, 4096, res);
		ok = 1;
		for (int i = 0; i < 8; i++)
			ok &= res[i] == KVL_PUT_STORED;
		if (!ok)
			sleep_ms(200);
	}
	printf("new holder: every put stored after %.1f s\n",
	       now_s() - t_back);
	assert_true(ok);
	kvl_store_close(s);
}

/* The master dies: every call fails with KVL_EIO, none hangs; a linker's
 * lookup and offload report it through their results. */
static void test_master_dies(void **state)
{
	(void)state;
	NEED_DEPLOYMENT();
	kvl_store *s = open_ok(deployment());
	int res[4];
	int got[4];
	put_n(s, "master", 4, 65536, res);
	engine e;
	engine_open(&e, s, "master-test");
	kvl_hash h[4];
	pages_of(h, 4, 2);
	engine_offload(&e, h, 4, 1);
	ctl("stop-master");
	double t = now_s();
	size_t prefix = 99;
	ASSERT_CODE(kvl_linker_lookup(e.lk, h, 4, NULL, &prefix),
	            KVL_EIO);
	int wait;
	kvl_completion c = engine_load(&e, h, 4, 2, &wait);
	assert_true(c.status < 0);
	ASSERT_EQ(c.valid_pages, 0);
	pages_of(h, 4, 3);
	const size_t slots[4] = {0, 1, 2, 3}, *sl[1] = {slots};
	ASSERT_CODE(kvl_linker_offload(e.lk, 3, h, 4, sl, NULL), KVL_OK);
	c = collect(e.lk, 3);
	assert_true(c.status < 0);
	ASSERT_EQ(c.valid_pages, 0);
	engine_close(&e);
	int ex[4];
	char k0[KVL_KEY_MAX];
	key_of(k0, "master", 0);
	const char *kp[1] = {k0};
	ASSERT_CODE(kvl_store_exists(s, kp, 1, ex), KVL_EIO);
	get_n(s, "master", 4, 65536, got);
	for (int i = 0; i < 4; i++)
		assert_true(got[i] < 0);
	/* The failed calls opened the store's circuit breaker: calls now
	 * fail whole, at once. */
	kvl_store_stats st;
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_EQ(st.breaker_open, 1);
	uint8_t b[16] = {0};
	kvl_iov iov = {b, sizeof b};
	size_t one = 1;
	ASSERT_CODE(kvl_store_put(s, kp, 1, &iov, &one, res), KVL_EIO);
	ASSERT_CODE(res[0], KVL_EIO);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "calls in a row failed");
	printf("master died: exists, get and put fail after %.1f s (%s)\n",
	       now_s() - t, kvl_store_errmsg(s));
	kvl_store_close(s);
	/* A fresh deployment for the next test: the old holder is stopped
	 * before the new master starts, so that it never registers there
	 * (a dead holder's segment would take puts until the master's
	 * client TTL drops it). */
	ctl("stop-holder");
	ctl("start-master");
	ctl("start-holder");
}

int main(void)
{
	const char *ctl = getenv("KVL_MOONCAKE_CTL");
	const char *uri = getenv("KVL_TEST_STORE_URI");
	const char *lib = getenv("KVL_MOONCAKE_LIB");
	int has_ctl = ctl && *ctl;
	int has_uri = uri && strncmp(uri, "mooncake://", 11) == 0;
	if (!has_ctl && !has_uri) {
		const struct CMUnitTest alone[] = {
			cmocka_unit_test(test_open_errors),
			cmocka_unit_test(test_page_group),
		};
		int rc = cmocka_run_group_tests(alone, NULL, NULL);
		if (rc)
			return rc;
		printf("SKIP: no Mooncake deployment, so 9 of 11 tests did not "
		       "run: run through tests/mooncake/run.sh (ctest does as "
		       "mooncake_mooncake when KVL_MOONCAKE_LIB is set)\n");
		return 77;
	}
	if (!has_ctl || !has_uri || !lib || !*lib) {
		fprintf(stderr, "test_mooncake: part of a Mooncake deployment: "
		        "KVL_MOONCAKE_CTL %s, KVL_TEST_STORE_URI %s, "
		        "KVL_MOONCAKE_LIB %s (tests/mooncake/run.sh sets all "
		        "three)\n", has_ctl ? "set" : "unset",
		        has_uri ? "a mooncake:// URI" : "not a mooncake:// URI",
		        lib && *lib ? "set" : "unset");
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open_errors),
		cmocka_unit_test(test_page_group),
		cmocka_unit_test(test_api),
		cmocka_unit_test(test_holds_and_groups),
		cmocka_unit_test(test_linker_direct),
		cmocka_unit_test(test_master_down_at_open),
		cmocka_unit_test(test_objects),
		cmocka_unit_test(test_lease_expiry),
		cmocka_unit_test(test_eviction),
		cmocka_unit_test(test_master_dies),
		cmocka_unit_test(test_holder_dies),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
