/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_linker_failures.c — the linker when the store fails it: what a
 * batch, its waits and its completions say, and that no byte reported valid
 * is wrong.
 *
 * Each test builds a source and a destination engine of one shape
 * (tests/support/linker_fixture.h: pool "kv", optionally "swa" and
 * "mla"), fills source slots with their pages' bytes, offloads, flushes,
 * loads into other slots of the destination and compares layer by layer;
 * every accepted request is collected exactly once (collect()). Stores are
 * the embedded "mem:" store and, for failure and timing paths, the
 * fault-injection store "fault+mem:" (tests that need it skip and say why
 * when this build cannot open it). With KVL_TEST_STORE_URI set (e.g. by
 * tests/mooncake/run.sh or tests/redis/run.sh), every test runs on that
 * store instead, "fault+" wrapped where it needs faults, each test in a key
 * namespace of its own.
 *
 * Covers: objects evicted between lookup and load (the batch fails from
 * the pool's first layer), garbage, foreign, truncated and bit-flipped
 * objects (verifying and trusted stores), stores that read whole objects,
 * a store error at a given layer, a store that is down (lookup, offload,
 * load) and a failing put, a slow store (wait and flush timeouts, cancel
 * after start, batches holding the ring: EFULL), and random errors, bit
 * flips and evictions (never wrong bytes reported valid).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/linker_fixture.h"
#include "store/store.h"
#include "store/fault.h"

/* ======================================================== failure paths */

static void test_load_evicted(void **state)
{
	(void)state;
	hcfg cfg = {.swa = 1};
	host src, dst;
	host_init(&src, &cfg);
	host_init(&dst, &cfg);
	kvl_store *s = open_ok(STORE_URI);
	kvl_linker *ls = open_lk(&src, s, NULL);
	kvl_linker *ld = open_lk(&dst, s, NULL);
	kvl_hash pg[6];
	make_pages(pg, 6, 8);
	req r;
	req_init(&r, pg, 6);
	req_pool(&r, src.kv, 0, 0);
	req_pool(&r, src.swa, 0, 0);
	fill_req(&src, &r);
	expect_completion((kvl_completion[]){offload_sync(ls, 1, &r)},
	                  KVL_REQ_OFFLOAD, 0, 6, 6);
	assert_int_equal(lookup(ld, pg, 6, NULL), 6);

	/* kv page 3 vanishes after the lookup: the batch fails from layer 0
	 * (kv's first layer); pages 0..2 are valid. */
	remove_page(s, &src, src.kv, &pg[3]);
	req d;
	req_init(&d, pg, 6);
	req_pool(&d, dst.kv, 0, 0);
	int waits[N_LAYERS];
	kvl_completion c = load_sync(ld, 2, &d, waits);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++)
		assert_int_equal(waits[ly], KVL_ENOTFOUND);
	ASSERT_CONTAINS(kvl_linker_errmsg(ld), "layer 0");
	expect_completion(&c, KVL_REQ_LOAD, KVL_ENOTFOUND, 3, 6);
	check_req(&dst, &d, 3, N_LAYERS);

	/* swa page 4 vanishes: swa's first layer is 1, so layer 0 is fine
	 * and the batch fails from layer 1; pages 0..3 valid. A second
	 * request of the batch that does not touch it succeeds. */
	memset(dst.mem, FILL, dst.mem_bytes);
	remove_page(s, &src, src.swa, &pg[4]);
	req e, f;
	req_init(&e, pg, 3);
	req_pool(&e, dst.kv, 0, 0);
	/* f loads swa pages 4, 5 only (pages 0..3 have no slot); page 4 is
	 * absent → valid 4. */
	req_init(&f, pg, 6);
	req_pool(&f, dst.swa, 4, 4);
	ASSERT_RC(ld, kvl_linker_load(ld, 3, e.pages, 3, e.sp), KVL_OK);
	ASSERT_RC(ld, kvl_linker_load(ld, 4, f.pages, 6, f.sp), KVL_OK);
	uint64_t b = 0;
	ASSERT_RC(ld, kvl_linker_start(ld, &b), KVL_OK);
	ASSERT_RC(ld, kvl_linker_wait(ld, b, 0, LONG_MS), KVL_OK);
	ASSERT_RC(ld, kvl_linker_wait(ld, b, 1, LONG_MS), KVL_ENOTFOUND);
	ASSERT_CONTAINS(kvl_linker_errmsg(ld), "failed at layer 1");
	ASSERT_RC(ld, kvl_linker_wait(ld, b, 2, LONG_MS), KVL_ENOTFOUND);
	ASSERT_RC(ld, kvl_linker_wait(ld, b, 3, LONG_MS), KVL_ENOTFOUND);
	ASSERT_RC(ld, kvl_linker_wait(ld, b, 0, 0), KVL_OK);
	kvl_completion cc[2];
	collect(ld, (const uint64_t[]){3, 4}, 2, cc);
	expect_completion(&cc[0], KVL_REQ_LOAD, 0, 3, 3);
	expect_completion(&cc[1], KVL_REQ_LOAD, KVL_ENOTFOUND, 4, 6);
	check_req(&dst, &e, 3, N_LAYERS);

	/* Both pools, kv and swa: swa page 4 absent, kv pages 0..2 present,
	 * kv 3 absent → valid 3 (the lowest failing page). */
	memset(dst.mem, FILL, dst.mem_bytes);
	req g;
	req_init(&g, pg, 6);
	req_pool(&g, dst.kv, 0, 0);
	req_pool(&g, dst.swa, 0, 0);
	c = load_sync(ld, 5, &g, waits);
	assert_int_equal(waits[0], KVL_ENOTFOUND);
	expect_completion(&c, KVL_REQ_LOAD, KVL_ENOTFOUND, 3, 6);
	check_req(&dst, &g, 3, N_LAYERS);

	kvl_linker_close(ld);
	kvl_linker_close(ls);
	kvl_store_close(s);
	host_free(&dst);
	host_free(&src);
}

/* Replaces the object under `page`'s key by `len` bytes of `data`. */
static void plant(kvl_store *s, const host *h, int pool, const kvl_hash *page,
                  const void *data, size_t len)
{
	char key[KVL_KEY_MAX];
	key_of(h, pool, page, key);
	const char *k = key;
	int res = -100;
	assert_int_equal(kvl_store_remove(s, &k, 1, &res), KVL_OK);
	kvl_iov iov = {(void *)data, len};
	size_t one = 1;
	assert_int_equal(kvl_store_put(s, &k, 1, &iov, &one, &res), KVL_OK);
	assert_int_equal(res, KVL_PUT_STORED);
}

/* The whole stored object of `page` into a new buffer; *len its size. */
static uint8_t *object_of(kvl_store *s, const host *h, int pool,
                          const kvl_hash *page, size_t *len)
{
	assert_int_equal(kvl_layout_object_size(h->l, pool, len, NULL),
	                 KVL_OK);
	uint8_t *buf = malloc(*len);
	assert_non_null(buf);
	char key[KVL_KEY_MAX];
	key_of(h, pool, page, key);
	const char *k = key;
	kvl_range rg = {0, buf, *len};
	size_t one = 1;
	int got = -100;
	assert_int_equal(kvl_store_get(s, &k, 1, &rg, &one, &got), KVL_OK);
	assert_int_equal(got, 0);
	return buf;
}

/* A page removed while its batch is being read: a store that holds a
 * batch's objects (file:, Mooncake's sessions) still reads its later
 * layers, so the load is whole. Every store call takes 200 ms, so the
 * remove lands after layer 0 and before the reads of layer 1. */
static void test_evicted_mid_batch(void **state)
{
	(void)state;
	NEED_FAULT_STORE();
	host src, dst;
	host_init(&src, NULL);
	host_init(&dst, NULL);
	kvl_store *s = open_ok(store_uri("fault+", NULL));
	kvl_linker *ls = open_lk(&src, s, NULL);
	kvl_linker *ld = open_lk(&dst, s, NULL);
	kvl_hash pg[4];
	make_pages(pg, 4, 31);
	req r;
	req_init(&r, pg, 4);
	req_pool(&r, src.kv, 0, 0);
	fill_req(&src, &r);
	expect_completion((kvl_completion[]){offload_sync(ls, 1, &r)},
	                  KVL_REQ_OFFLOAD, 0, 4, 4);
	char key[KVL_KEY_MAX];
	key_of(&src, src.kv, &pg[0], key);
	const char *probe = key;
	int held = 0;
	ASSERT_CODE(kvl__store_hold(s, &probe, 1, &held), KVL_OK);
	if (held != 1) {
		printf("[  SKIP    ] this store holds nothing: a page removed "
		       "mid-batch fails its later layers\n");
		kvl_linker_close(ld);
		kvl_linker_close(ls);
		kvl_store_close(s);
		host_free(&dst);
		host_free(&src);
		skip();
	}
	ASSERT_CODE(kvl__store_unhold(s, &probe, 1, &held), KVL_OK);
	fault_latency(s, 200);

	req d;
	req_init(&d, pg, 4);
	req_pool(&d, dst.kv, 0, 0);
	ASSERT_RC(ld, kvl_linker_load(ld, 2, d.pages, 4, d.sp), KVL_OK);
	uint64_t b = 0;
	ASSERT_RC(ld, kvl_linker_start(ld, &b), KVL_OK);
	ASSERT_RC(ld, kvl_linker_wait(ld, b, 0, LONG_MS), KVL_OK);
	fault_latency(s, 0);
	remove_page(s, &src, src.kv, &pg[2]);
	for (uint32_t ly = 1; ly < N_LAYERS; ly++)
		ASSERT_RC(ld, kvl_linker_wait(ld, b, ly, LONG_MS), KVL_OK);
	kvl_completion c = collect1(ld, 2);
	expect_completion(&c, KVL_REQ_LOAD, 0, 4, 4);
	check_req(&dst, &d, 4, N_LAYERS);
	assert_int_equal(page_present(s, &src, src.kv, &pg[2]), 0);

	kvl_linker_close(ld);
	kvl_linker_close(ls);
	kvl_store_close(s);
	host_free(&dst);
	host_free(&src);
}

/* Whether the linker reads pool `pool` of h with its first layer on store
 * s: on whole reads, and where its layers are smaller per page than a
 * read is worth (caps.layer_read_min: Mooncake's ranges). */
static int reads_with_first(kvl_store *s, const host *h, int pool)
{
	kvl__store_caps c = kvl__store_caps_of(s);
	size_t off, len = 0;
	for (uint32_t ly = 0; ly < N_LAYERS; ly++)
		if (kvl_layout_layer_range(h->l, pool, ly, &off, &len) == KVL_OK)
			break;
	return c.whole_reads || len < c.layer_read_min;
}

static void run_corrupt(const char *uri)
{
	hcfg cfg = {.swa = 1};
	host src, dst;
	host_init(&src, &cfg);
	host_init(&dst, &cfg);
	kvl_store *s = open_ok(uri);
	kvl_linker *ls = open_lk(&src, s, NULL);
	kvl_linker *ld = open_lk(&dst, s, NULL);
	kvl_hash pg[6];
	make_pages(pg, 6, 9);
	req r;
	req_init(&r, pg, 6);
	req_pool(&r, src.kv, 0, 0);
	req_pool(&r, src.swa, 0, 0);
	fill_req(&src, &r);
	expect_completion((kvl_completion[]){offload_sync(ls, 1, &r)},
	                  KVL_REQ_OFFLOAD, 0, 6, 6);
	size_t len = 0;

	/* Garbage of the right size under kv page 2: ECORRUPT at layer 0,
	 * valid 2. */
	uint8_t *junk = malloc(4096);
	assert_non_null(junk);
	for (size_t i = 0; i < 4096; i++)
		junk[i] = (uint8_t)(i * 7 + 3);
	assert_int_equal(kvl_layout_object_size(src.l, src.kv, &len, NULL),
	                 KVL_OK);
	assert_true(len <= 4096);
	plant(s, &src, src.kv, &pg[2], junk, len);
	req d;
	req_init(&d, pg, 6);
	req_pool(&d, dst.kv, 0, 0);
	int waits[N_LAYERS];
	kvl_completion c = load_sync(ld, 2, &d, waits);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++)
		assert_int_equal(waits[ly], KVL_ECORRUPT);
	expect_completion(&c, KVL_REQ_LOAD, KVL_ECORRUPT, 2, 6);
	check_req(&dst, &d, 2, N_LAYERS);

	/* Another page's (intact) object under swa page 5's key: the header
	 * names the wrong page → ECORRUPT from swa's first layer (1). */
	memset(dst.mem, FILL, dst.mem_bytes);
	uint8_t *other = object_of(s, &src, src.swa, &pg[4], &len);
	plant(s, &src, src.swa, &pg[5], other, len);
	free(other);
	req e;
	req_init(&e, pg, 6);
	req_pool(&e, dst.swa, 0, 4);
	c = load_sync(ld, 3, &e, waits);
	assert_int_equal(waits[0], KVL_OK);
	for (uint32_t ly = 1; ly < N_LAYERS; ly++)
		assert_int_equal(waits[ly], KVL_ECORRUPT);
	expect_completion(&c, KVL_REQ_LOAD, KVL_ECORRUPT, 5, 6);
	check_req(&dst, &e, 5, N_LAYERS);

	/* A truncated object: ECORRUPT too. */
	uint8_t *obj = object_of(s, &src, src.kv, &pg[1], &len);
	plant(s, &src, src.kv, &pg[1], obj, len - 8);
	req t;
	req_init(&t, pg, 2);
	req_pool(&t, dst.kv, 10, 0);
	c = load_sync(ld, 4, &t, NULL);
	expect_completion(&c, KVL_REQ_LOAD, KVL_ECORRUPT, 1, 2);
	plant(s, &src, src.kv, &pg[1], obj, len); /* restore it */
	free(obj);

	/* A flipped payload byte in layer 2 of kv page 4: a verifying store
	 * fails the batch at layer 2 with valid 4; the trusted default store
	 * does not check payloads (documented) and passes it. */
	size_t off = 0, llen = 0;
	assert_int_equal(kvl_layout_layer_range(src.l, src.kv, 2, &off, &llen),
	                 KVL_OK);
	obj = object_of(s, &src, src.kv, &pg[4], &len);
	obj[off + 5] ^= 0x40;
	plant(s, &src, src.kv, &pg[4], obj, len);
	free(obj);
	req f;
	req_init(&f, pg, 6);
	req_pool(&f, dst.kv, 0, 0);
	f.slot[dst.kv][2] = KVL_NO_SLOT; /* skip the garbage page */
	memset(dst.mem, FILL, dst.mem_bytes);
	c = load_sync(ld, 5, &f, waits);
	if (!kvl__store_caps_of(s).trusted) {
		/* A store that reads a pool whole has every layer read, and
		 * checked, with the first. */
		int at = reads_with_first(s, &dst, dst.kv) ? 0 : 2;
		for (int ly = 0; ly < N_LAYERS; ly++)
			assert_int_equal(waits[ly],
			                 ly < at ? KVL_OK : KVL_ECORRUPT);
		expect_completion(&c, KVL_REQ_LOAD, KVL_ECORRUPT, 4, 6);
		check_req(&dst, &f, 4, N_LAYERS);
	} else {
		for (uint32_t ly = 0; ly < N_LAYERS; ly++)
			assert_int_equal(waits[ly], KVL_OK);
		expect_completion(&c, KVL_REQ_LOAD, 0, 6, 6);
	}

	free(junk);
	kvl_linker_close(ld);
	kvl_linker_close(ls);
	kvl_store_close(s);
	host_free(&dst);
	host_free(&src);
}

static void test_load_corrupt(void **state)
{
	(void)state;
	run_corrupt(STORE_URI);
	if (!env_store())
		run_corrupt(store_uri("", "verify=1"));
}

/* A store that reads whole objects (as Mooncake's does): the linker reads
 * every layer of a pool's pages with the pool's first layer, one get per
 * pool and batch, and checks them all there; failures surface at that
 * layer. */
static void test_load_whole_reads(void **state)
{
	(void)state;
	NEED_FAULT_STORE();
	hcfg cfg = {.swa = 1};
	host src, dst;
	host_init(&src, &cfg);
	host_init(&dst, &cfg);
	kvl_store *s = open_ok(store_uri("fault+", NULL));
	if (!kvl__store_caps_of(s).whole_reads) { /* say it, unless the store under test does */
		kvl_store_close(s);
		s = open_ok(store_uri("fault+", "fault.whole_reads=1"));
	}
	assert_true(kvl__store_caps_of(s).whole_reads);
	kvl_linker *ls = open_lk(&src, s, NULL);
	kvl_linker *ld = open_lk(&dst, s, NULL);
	kvl_hash pg[5];
	make_pages(pg, 5, 12);
	req r;
	req_init(&r, pg, 5);
	req_pool(&r, src.kv, 0, 0);
	req_pool(&r, src.swa, 0, 0);
	fill_req(&src, &r);
	expect_completion((kvl_completion[]){offload_sync(ls, 1, &r)},
	                  KVL_REQ_OFFLOAD, 0, 5, 5);

	/* kv pages 0..4 (first layer 0), swa pages 3, 4 (first layer 1):
	 * two gets, every byte of every layer. */
	req d;
	req_init(&d, pg, 5);
	req_pool(&d, dst.kv, 0, 0);
	req_pool(&d, dst.swa, 0, 3);
	int waits[N_LAYERS];
	uint64_t gets = fault_gets(s);
	kvl_completion c = load_sync(ld, 2, &d, waits);
	assert_int_equal(fault_gets(s) - gets, 2);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++)
		assert_int_equal(waits[ly], KVL_OK);
	expect_completion(&c, KVL_REQ_LOAD, 0, 5, 5);
	check_req(&dst, &d, 5, N_LAYERS);

	/* The swa read (layer 1) fails: kv's pages 0..2 stay valid. */
	memset(dst.mem, FILL, dst.mem_bytes);
	fault_fail_get_in(s, 2);
	c = load_sync(ld, 3, &d, waits);
	assert_int_equal(waits[0], KVL_OK);
	for (uint32_t ly = 1; ly < N_LAYERS; ly++)
		assert_int_equal(waits[ly], KVL_EIO);
	expect_completion(&c, KVL_REQ_LOAD, KVL_EIO, 3, 5);
	check_req(&dst, &d, 3, N_LAYERS);

	/* The kv read fails: nothing is valid. */
	fault_fail_get_in(s, 1);
	c = load_sync(ld, 4, &d, waits);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++)
		assert_int_equal(waits[ly], KVL_EIO);
	expect_completion(&c, KVL_REQ_LOAD, KVL_EIO, 0, 5);

	/* A flipped byte in the last layer of kv page 1 is caught at layer
	 * 0, where it was read: valid 1. */
	size_t off = 0, llen = 0, len = 0;
	assert_int_equal(kvl_layout_layer_range(src.l, src.kv, N_LAYERS - 1,
	                                        &off, &llen),
	                 KVL_OK);
	uint8_t *obj = object_of(s, &src, src.kv, &pg[1], &len);
	obj[off + llen - 1] ^= 0x01;
	plant(s, &src, src.kv, &pg[1], obj, len);
	free(obj);
	memset(dst.mem, FILL, dst.mem_bytes);
	c = load_sync(ld, 5, &d, waits);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++)
		assert_int_equal(waits[ly], KVL_ECORRUPT);
	expect_completion(&c, KVL_REQ_LOAD, KVL_ECORRUPT, 1, 5);
	check_req(&dst, &d, 1, N_LAYERS);

	/* swa page 4 evicted: the batch fails from swa's layer 1, valid 4
	 * once kv page 1 is good again. */
	remove_page(s, &src, src.kv, &pg[1]);
	req one;
	req_init(&one, pg + 1, 1);
	req_pool(&one, src.kv, 1, 0);
	expect_completion((kvl_completion[]){offload_sync(ls, 6, &one)},
	                  KVL_REQ_OFFLOAD, 0, 1, 1);
	remove_page(s, &src, src.swa, &pg[4]);
	memset(dst.mem, FILL, dst.mem_bytes);
	c = load_sync(ld, 7, &d, waits);
	assert_int_equal(waits[0], KVL_OK);
	for (uint32_t ly = 1; ly < N_LAYERS; ly++)
		assert_int_equal(waits[ly], KVL_ENOTFOUND);
	expect_completion(&c, KVL_REQ_LOAD, KVL_ENOTFOUND, 4, 5);
	check_req(&dst, &d, 4, N_LAYERS);

	kvl_linker_close(ld);
	kvl_linker_close(ls);
	kvl_store_close(s);
	host_free(&dst);
	host_free(&src);
}

/* Store errors: the 3rd get call of a batch (layer 2) fails whole. */

/* A store whose reads cost at least some bytes (caps.layer_read_min, as
 * Mooncake's ranges): pools whose layers are smaller per page read every
 * layer with their first, one get per pool and batch, as on whole reads;
 * with a threshold below every layer, one get per layer. */
static void test_load_small_layers(void **state)
{
	(void)state;
	NEED_FAULT_STORE();
	kvl_store *probe = open_ok(store_uri("fault+", NULL));
	int whole = kvl__store_caps_of(probe).whole_reads;
	kvl_store_close(probe);
	if (whole) {
		printf("SKIP test_load_small_layers: the store reads whole "
		       "objects (test_load_whole_reads covers it)\n");
		skip();
	}
	hcfg cfg = {.swa = 1};
	host src, dst;
	host_init(&src, &cfg);
	host_init(&dst, &cfg);
	const char *opts[2] = {"fault.layer_read_min=1GiB",
	                       "fault.layer_read_min=1"};
	for (int t = 0; t < 2; t++) {
		kvl_store *s = open_ok(store_uri("fault+", opts[t]));
		kvl_linker *ls = open_lk(&src, s, NULL);
		kvl_linker *ld = open_lk(&dst, s, NULL);
		kvl_hash pg[5];
		make_pages(pg, 5, 40 + t);
		req r;
		req_init(&r, pg, 5);
		req_pool(&r, src.kv, 0, 0);
		fill_req(&src, &r);
		expect_completion((kvl_completion[]){offload_sync(ls, 1, &r)},
		                  KVL_REQ_OFFLOAD, 0, 5, 5);
		req d;
		req_init(&d, pg, 5);
		req_pool(&d, dst.kv, 0, 0);
		int waits[N_LAYERS];
		uint64_t gets = fault_gets(s);
		kvl_completion c = load_sync(ld, 2, &d, waits);
		uint64_t calls = fault_gets(s) - gets;
		printf("layer_read_min %s: %llu gets\n", opts[t] + 21,
		       (unsigned long long)calls);
		if (t == 0)
			assert_int_equal(calls, 1);
		else
			assert_true(calls > 1);
		expect_completion(&c, KVL_REQ_LOAD, 0, 5, 5);
		check_req(&dst, &d, 5, N_LAYERS);
		kvl_linker_close(ls);
		kvl_linker_close(ld);
		kvl_store_close(s);
	}
	host_free(&src);
	host_free(&dst);
}

static void test_load_store_error(void **state)
{
	(void)state;
	NEED_FAULT_STORE();
	hcfg cfg = {.swa = 1};
	host src, dst;
	host_init(&src, &cfg);
	host_init(&dst, &cfg);
	/* One get per layer even where layers this small would go with the
	 * first (fault.layer_read_min=0: Mooncake's ranges). */
	kvl_store *s = open_ok(store_uri(
		"fault+", "fault.fail_get_call=3&fault.layer_read_min=0"
		          "&fault.holds=1"));
	if (kvl__store_caps_of(s).whole_reads) {
		printf("[  SKIP    ] one get per layer: this store reads whole "
		       "objects (test_load_whole_reads covers it)\n");
		kvl_store_close(s);
		host_free(&dst);
		host_free(&src);
		skip();
	}
	kvl_linker *ls = open_lk(&src, s, NULL);
	kvl_linker *ld = open_lk(&dst, s, NULL);
	kvl_hash pg[5];
	make_pages(pg, 5, 10);
	req r;
	req_init(&r, pg, 5);
	req_pool(&r, src.kv, 0, 0);
	req_pool(&r, src.swa, 0, 0);
	fill_req(&src, &r);
	expect_completion((kvl_completion[]){offload_sync(ls, 1, &r)},
	                  KVL_REQ_OFFLOAD, 0, 5, 5);
	assert_int_equal(lookup(ld, pg, 5, NULL), 5);
	assert_int_equal(fault_gets(s), 0); /* offload and lookup: no get */

	req d;
	req_init(&d, pg, 5);
	req_pool(&d, dst.kv, 0, 0);
	req_pool(&d, dst.swa, 0, 3);
	int waits[N_LAYERS];
	kvl_completion c = load_sync(ld, 2, &d, waits);
	/* One get per layer; none for layer 3: nothing valid is left. */
	assert_int_equal(fault_gets(s), 3);
	assert_int_equal(waits[0], KVL_OK);
	assert_int_equal(waits[1], KVL_OK);
	assert_int_equal(waits[2], KVL_EIO);
	assert_int_equal(waits[3], KVL_EIO);
	/* The wait tells what the store said, not only the code. */
	ASSERT_CONTAINS(kvl_linker_errmsg(ld), "failed at layer 2");
	ASSERT_CONTAINS(kvl_linker_errmsg(ld), "injected failure of get call 3");
	expect_completion(&c, KVL_REQ_LOAD, KVL_EIO, 0, 5);
	/* Layers 0 and 1 did arrive; the failed batch let go of its
	 * holds. */
	check_req(&dst, &d, 5, 2);
	uint64_t taken = 0;
	ASSERT_RC(s, kvl__fault_holds(s, NULL, NULL, &taken), KVL_OK);
	assert_int_equal(taken, 5 + 2); /* kv, and swa from page 3 */
	assert_int_equal(pages_held(s, &dst, dst.kv, pg, 5), 0);
	assert_int_equal(pages_held(s, &dst, dst.swa, pg, 5), 0);

	/* Only that call failed: a new batch loads everything. */
	memset(dst.mem, FILL, dst.mem_bytes);
	c = load_sync(ld, 3, &d, waits);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++)
		assert_int_equal(waits[ly], KVL_OK);
	expect_completion(&c, KVL_REQ_LOAD, 0, 5, 5);
	check_req(&dst, &d, 5, N_LAYERS);
	assert_int_equal(fault_gets(s), 3 + N_LAYERS);

	/* The first get of a batch fails: every layer fails. */
	fault_fail_get_in(s, 1);
	c = load_sync(ld, 4, &d, waits);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++)
		assert_int_equal(waits[ly], KVL_EIO);
	expect_completion(&c, KVL_REQ_LOAD, KVL_EIO, 0, 5);

	/* The store is down: lookup fails with EIO (prefix 0), offload
	 * completes with EIO, a load fails at layer 0; back up, all works. */
	fault_down(s, 1);
	size_t prefix = 99;
	ASSERT_RC(ld, kvl_linker_lookup(ld, pg, 5, NULL, &prefix),
	          KVL_EIO);
	ASSERT_CONTAINS(kvl_linker_errmsg(ld), "lookup");
	kvl_hash p2[2];
	make_pages(p2, 2, 110);
	req o;
	req_init(&o, p2, 2);
	req_pool(&o, src.kv, 8, 0);
	c = offload_sync(ls, 5, &o);
	expect_completion(&c, KVL_REQ_OFFLOAD, KVL_EIO, 0, 2);
	c = load_sync(ld, 6, &d, waits);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++)
		assert_int_equal(waits[ly], KVL_EIO);
	expect_completion(&c, KVL_REQ_LOAD, KVL_EIO, 0, 5);
	fault_down(s, 0);
	/* The next put call fails: that offload fails, valid 0. */
	kvl__fault_cfg fc;
	uint64_t puts = 0;
	assert_int_equal(kvl__fault_get(s, &fc), KVL_OK);
	assert_int_equal(kvl__fault_calls(s, NULL, &puts), KVL_OK);
	fc.fail_put_call = puts + 1;
	assert_int_equal(kvl__fault_set(s, &fc), KVL_OK);
	c = offload_sync(ls, 9, &o);
	expect_completion(&c, KVL_REQ_OFFLOAD, KVL_EIO, 0, 2);
	assert_int_equal(lookup(ld, pg, 5, NULL), 5);
	assert_int_equal(lookup(ld, p2, 2, NULL), 0);
	c = offload_sync(ls, 7, &o);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 2, 2);
	memset(dst.mem, FILL, dst.mem_bytes);
	c = load_sync(ld, 8, &d, NULL);
	expect_completion(&c, KVL_REQ_LOAD, 0, 5, 5);
	check_req(&dst, &d, 5, N_LAYERS);
	/* Every batch, failed or not, let go of its holds. */
	assert_int_equal(pages_held(s, &dst, dst.kv, pg, 5), 0);
	assert_int_equal(pages_held(s, &dst, dst.swa, pg, 5), 0);

	kvl_linker_close(ld);
	kvl_linker_close(ls);
	kvl_store_close(s);
	host_free(&dst);
	host_free(&src);
}

/* A slow store: wait and flush time out, then succeed; a load canceled
 * after its batch started completes normally. */
static void test_slow_store(void **state)
{
	(void)state;
	NEED_FAULT_STORE();
	host src, dst;
	host_init(&src, NULL);
	host_init(&dst, NULL);
	kvl_store *s = open_ok(store_uri("fault+", NULL));
	kvl_linker *ls = open_lk(&src, s, NULL);
	kvl_linker *ld = open_lk(&dst, s, NULL);
	kvl_hash pg[3];
	make_pages(pg, 3, 11);
	req r;
	req_init(&r, pg, 3);
	req_pool(&r, src.kv, 0, 0);
	fill_req(&src, &r);
	fault_latency(s, 300);

	/* Flush times out while the offload is in the store, then ends. */
	ASSERT_RC(ls, kvl_linker_offload(ls, 1, r.pages, 3, r.sp, NULL),
	          KVL_OK);
	ASSERT_RC(ls, kvl_linker_flush(ls, 10), KVL_ETIMEDOUT);
	ASSERT_CONTAINS(kvl_linker_errmsg(ls), "flush");
	ASSERT_RC(ls, kvl_linker_flush(ls, 0), KVL_ETIMEDOUT);
	ASSERT_RC(ls, kvl_linker_flush(ls, LONG_MS), KVL_OK);
	kvl_completion c = collect1(ls, 1);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 3, 3);

	/* Wait times out, then returns 0. */
	req d;
	req_init(&d, pg, 3);
	req_pool(&d, dst.kv, 5, 0);
	ASSERT_RC(ld, kvl_linker_load(ld, 2, d.pages, 3, d.sp), KVL_OK);
	uint64_t b = 0;
	ASSERT_RC(ld, kvl_linker_start(ld, &b), KVL_OK);
	/* Started: cancel no longer withdraws it. */
	int co = -1;
	ASSERT_RC(ld, kvl_linker_cancel(ld, 2, &co), KVL_OK);
	assert_int_equal(co, 0);
	ASSERT_RC(ld, kvl_linker_wait(ld, b, 0, 10), KVL_ETIMEDOUT);
	ASSERT_CONTAINS(kvl_linker_errmsg(ld), "wait");
	ASSERT_RC(ld, kvl_linker_wait(ld, b, N_LAYERS - 1, 0), KVL_ETIMEDOUT);
	expect_none(ld, 0); /* not complete yet */
	ASSERT_RC(ld, kvl_linker_wait(ld, b, N_LAYERS - 1, LONG_MS), KVL_OK);
	c = collect1(ld, 2);
	expect_completion(&c, KVL_REQ_LOAD, 0, 3, 3);
	check_req(&dst, &d, 3, N_LAYERS);

	/* An empty batch is complete at once: it never holds the ring. */
	ASSERT_RC(ld, kvl_linker_start(ld, &b), KVL_OK);
	ASSERT_RC(ld, kvl_linker_wait(ld, b, N_LAYERS - 1, 0), KVL_OK);

	/* Slow batches hold the ring: KVL_LINKER_MAX_BATCHES unfinished
	 * batches, then start says EFULL (and accepts nothing). */
	fault_latency(s, 5);
	uint64_t ids[KVL_LINKER_MAX_BATCHES + 1];
	uint64_t first = 0, last = 0;
	for (int i = 0; i < KVL_LINKER_MAX_BATCHES; i++) {
		ids[i] = i ? 1000 + (uint64_t)i : 3;
		ASSERT_RC(ld, kvl_linker_load(ld, ids[i], d.pages, 3,
		                              d.sp),
		          KVL_OK);
		ASSERT_RC(ld, kvl_linker_start(ld, i ? &last : &first), KVL_OK);
	}
	ids[KVL_LINKER_MAX_BATCHES] = 4;
	ASSERT_RC(ld, kvl_linker_load(ld, 4, d.pages, 3, d.sp), KVL_OK);
	ASSERT_RC(ld, kvl_linker_start(ld, &b), KVL_EFULL);
	ASSERT_CONTAINS(kvl_linker_errmsg(ld), "batches");
	ASSERT_RC(ld, kvl_linker_wait(ld, last, N_LAYERS - 1, LONG_MS),
	          KVL_OK);
	ASSERT_RC(ld, kvl_linker_wait(ld, first, N_LAYERS - 1, 0), KVL_OK);
	/* Load 4 stayed queued and goes into the next batch. */
	ASSERT_RC(ld, kvl_linker_start(ld, &b), KVL_OK);
	assert_int_equal(b, last + 1);
	ASSERT_RC(ld, kvl_linker_wait(ld, b, N_LAYERS - 1, LONG_MS), KVL_OK);
	kvl_completion cc[KVL_LINKER_MAX_BATCHES + 1];
	collect(ld, ids, KVL_LINKER_MAX_BATCHES + 1, cc);
	for (int i = 0; i <= KVL_LINKER_MAX_BATCHES; i++)
		expect_completion(&cc[i], KVL_REQ_LOAD, 0, 3, 3);

	kvl_linker_close(ld);
	kvl_linker_close(ls);
	kvl_store_close(s);
	host_free(&dst);
	host_free(&src);
}

/* A failed batch's wait for a layer returns once that layer has landed
 * for the batch's other requests too: an engine that goes on with them
 * (vLLM recomputes only the failed request's blocks) never reads a layer
 * still on its way. Every store call takes 20 ms. */
static void test_failed_wait_lands_the_layer(void **state)
{
	(void)state;
	NEED_FAULT_STORE();
	host src, dst;
	host_init(&src, NULL);
	host_init(&dst, NULL);
	kvl_store *s = open_ok(store_uri("fault+", NULL));
	kvl_linker *ls = open_lk(&src, s, NULL);
	kvl_linker *ld = open_lk(&dst, s, NULL);
	kvl_hash pa[3], pb[3];
	make_pages(pa, 3, 71);
	make_pages(pb, 3, 72);
	req a, b;
	req_init(&a, pa, 3);
	req_pool(&a, src.kv, 0, 0);
	req_init(&b, pb, 3);
	req_pool(&b, src.kv, 3, 0);
	fill_req(&src, &a);
	fill_req(&src, &b);
	expect_completion((kvl_completion[]){offload_sync(ls, 1, &a)},
	                  KVL_REQ_OFFLOAD, 0, 3, 3);
	expect_completion((kvl_completion[]){offload_sync(ls, 2, &b)},
	                  KVL_REQ_OFFLOAD, 0, 3, 3);
	remove_page(s, &src, src.kv, &pa[0]); /* a fails at layer 0 */
	fault_latency(s, 20);
	req da, db;
	req_init(&da, pa, 3);
	req_pool(&da, dst.kv, 8, 0);
	req_init(&db, pb, 3);
	req_pool(&db, dst.kv, 12, 0);
	ASSERT_RC(ld, kvl_linker_load(ld, 3, da.pages, 3, da.sp), KVL_OK);
	ASSERT_RC(ld, kvl_linker_load(ld, 4, db.pages, 3, db.sp), KVL_OK);
	uint64_t batch = 0;
	ASSERT_RC(ld, kvl_linker_start(ld, &batch), KVL_OK);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++) {
		ASSERT_RC(ld, kvl_linker_wait(ld, batch, ly, LONG_MS),
		          KVL_ENOTFOUND);
		check_req(&dst, &db, 3, ly + 1); /* landed when wait returned */
	}
	kvl_completion cc[2];
	collect(ld, (const uint64_t[]){3, 4}, 2, cc);
	expect_completion(&cc[0], KVL_REQ_LOAD, KVL_ENOTFOUND, 0, 3);
	expect_completion(&cc[1], KVL_REQ_LOAD, 0, 3, 3);
	kvl_linker_close(ld);
	kvl_linker_close(ls);
	kvl_store_close(s);
	host_free(&dst);
	host_free(&src);
}

/* Random store faults: a completion never reports wrong bytes as valid. */
static void test_random_errors(void **state)
{
	(void)state;
	NEED_FAULT_STORE();
	hcfg cfg = {.swa = 1};
	host src, dst;
	host_init(&src, &cfg);
	host_init(&dst, &cfg);
	size_t n_ok = 0, n_fail = 0, n_corrupt = 0;
	static const char *const faults[] = {
		"fault.error=0.2",
		"fault.error=0.02",
		"fault.corrupt=0.02",
		"fault.error=0.01&fault.corrupt=0.01&fault.evict=0.01",
	};
	for (unsigned seed = 1; seed <= 4; seed++) {
		char opts[160];
		snprintf(opts, sizeof opts, "%s&fault.seed=%u",
		         faults[seed - 1], seed);
		const char *uri = store_uri("fault+", opts);
		kvl_store *s = open_ok(uri);
		kvl_linker_opts o = {.struct_size = sizeof o};
		o.io_batch = 3; /* several store calls per layer */
		kvl_linker *ls = open_lk(&src, s, &o);
		kvl_linker *ld = open_lk(&dst, s, &o);
		for (unsigned round = 0; round < 8; round++) {
			kvl_hash pg[8];
			make_pages(pg, 8, 1000 + seed * 10 + round);
			req r;
			req_init(&r, pg, 8);
			req_pool(&r, src.kv, 0, 0);
			req_pool(&r, src.swa, 0, 0);
			fill_req(&src, &r);
			uint64_t base = (uint64_t)round * 10;
			kvl_completion c = offload_sync(ls, base + 1, &r);
			assert_int_equal(c.kind, KVL_REQ_OFFLOAD);
			assert_true(c.valid_pages <= 8);
			if (c.status == 0)
				assert_int_equal(c.valid_pages, 8);
			else
				assert_true(c.valid_pages < 8);
			/* Two requests in one batch. */
			req d1, d2;
			req_init(&d1, pg, 8);
			req_pool(&d1, dst.kv, 0, 0);
			req_pool(&d1, dst.swa, 0, 6);
			req_init(&d2, pg, 8);
			req_pool(&d2, dst.kv, 8, 0);
			reset_slots(&dst, &d1);
			reset_slots(&dst, &d2);
			ASSERT_RC(ld, kvl_linker_load(ld, base + 2, d1.pages,
			                              8, d1.sp),
			          KVL_OK);
			ASSERT_RC(ld, kvl_linker_load(ld, base + 3, d2.pages,
			                              8, d2.sp),
			          KVL_OK);
			uint64_t b = 0;
			ASSERT_RC(ld, kvl_linker_start(ld, &b), KVL_OK);
			int prev = 0;
			for (uint32_t ly = 0; ly < N_LAYERS; ly++) {
				int rc = kvl_linker_wait(ld, b, ly, LONG_MS);
				assert_int_not_equal(rc, KVL_ETIMEDOUT);
				/* Once failed, failed for every later layer. */
				if (prev)
					assert_int_equal(rc, prev);
				prev = rc;
			}
			kvl_completion cc[2];
			collect(ld, (const uint64_t[]){base + 2, base + 3}, 2,
			        cc);
			const req *dr[2] = {&d1, &d2};
			for (int i = 0; i < 2; i++) {
				assert_int_equal(cc[i].kind, KVL_REQ_LOAD);
				assert_int_equal(cc[i].n_pages, 8);
				if (cc[i].status == 0) {
					assert_int_equal(cc[i].valid_pages, 8);
					n_ok++;
				} else {
					assert_true(cc[i].valid_pages < 8);
					n_fail++;
					n_corrupt += cc[i].status ==
					             KVL_ECORRUPT;
					/* A failed request fails the batch. */
					assert_int_not_equal(prev, 0);
				}
				/* Every page < valid_pages has its bytes. */
				size_t good = req_good_prefix(&dst, dr[i]);
				if (good < cc[i].valid_pages) {
					print_error("%s round %u request %d: "
					            "status %s valid_pages %zu "
					            "but page %zu is wrong\n",
					            uri, round, i,
					            kvl_err_name(cc[i].status),
					            cc[i].valid_pages, good);
					check_req(&dst, dr[i],
					          cc[i].valid_pages, N_LAYERS);
				}
			}
			if (prev == 0)
				assert_true(cc[0].status == 0 &&
				            cc[1].status == 0);
		}
		kvl_linker_close(ld);
		kvl_linker_close(ls);
		kvl_store_close(s);
	}
	printf("random faults: %zu loads succeeded, %zu failed (%zu "
	       "corrupt)\n",
	       n_ok, n_fail, n_corrupt);
	assert_true(n_fail > 0);    /* the faults did bite */
	assert_true(n_corrupt > 0); /* and checksums caught flipped bits */
	assert_true(n_ok > 0);
	host_free(&dst);
	host_free(&src);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_load_evicted, next_test),
		cmocka_unit_test_setup(test_evicted_mid_batch, next_test),
		cmocka_unit_test_setup(test_load_corrupt, next_test),
		cmocka_unit_test_setup(test_load_store_error, next_test),
		cmocka_unit_test_setup(test_load_whole_reads, next_test),
		cmocka_unit_test_setup(test_load_small_layers, next_test),
		cmocka_unit_test_setup(test_slow_store, next_test),
		cmocka_unit_test_setup(test_failed_wait_lands_the_layer,
		                       next_test),
		cmocka_unit_test_setup(test_random_errors, next_test),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
