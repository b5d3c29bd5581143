/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_linker_offload.c — the linker's background offloads
 * (kvl_linker_offload, _flush): what is written to the store, and when.
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
 * Covers: offloads skipping pages already present (counted as stored),
 * several offloads and one flush (FIFO completions), a duplicate id, a
 * store too small for one object; replicated pools written by tp rank 0
 * only and loaded by another rank.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/linker_fixture.h"

/* =============================================================== offload */

static void test_offload_present(void **state)
{
	(void)state;
	hcfg cfg = {.swa = 1};
	host h;
	host_init(&h, &cfg);
	kvl_store *s = open_ok(STORE_URI);
	kvl_linker *lk = open_lk(&h, s, NULL);
	kvl_hash pg[6];
	make_pages(pg, 6, 13);
	req r;
	req_init(&r, pg, 6);
	req_pool(&r, h.kv, 0, 0);
	req_pool(&r, h.swa, 0, 0);
	fill_req(&h, &r);

	kvl_store_stats a, b;
	assert_int_equal(kvl_store_stats_get(s, &a), KVL_OK);
	req q;
	req_init(&q, pg, 4);
	req_pool(&q, h.kv, 0, 0);
	req_pool(&q, h.swa, 0, 0);
	kvl_completion c = offload_sync(lk, 1, &q);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 4, 4);
	assert_int_equal(kvl_store_stats_get(s, &b), KVL_OK);
	assert_int_equal(b.puts - a.puts, 8);
	/* Again: all present, skipped, counted as stored. */
	c = offload_sync(lk, 2, &q);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 4, 4);
	assert_int_equal(kvl_store_stats_get(s, &a), KVL_OK);
	assert_int_equal(a.puts, b.puts);
	/* Pages 0..5 with 0..3 present: only 4 and 5 are written. */
	c = offload_sync(lk, 3, &r);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 6, 6);
	assert_int_equal(kvl_store_stats_get(s, &b), KVL_OK);
	assert_int_equal(b.puts - a.puts, 4);
	assert_int_equal(lookup(lk, pg, 6, NULL), 6);

	/* Several offloads, then one flush waits for all. */
	uint64_t ids[5];
	kvl_completion cc[5];
	for (int i = 0; i < 5; i++) {
		kvl_hash p2[3];
		make_pages(p2, 3, 100 + (uint64_t)i);
		req t;
		req_init(&t, p2, 3);
		req_pool(&t, h.kv, (size_t)i * 3, 0);
		ids[i] = 10 + (uint64_t)i;
		ASSERT_RC(lk, kvl_linker_offload(lk, ids[i], t.pages, 3,
		                                 t.sp, NULL),
		          KVL_OK);
	}
	ASSERT_RC(lk, kvl_linker_flush(lk, LONG_MS), KVL_OK);
	/* Everything flushed is already pollable. */
	size_t k = 0;
	assert_int_equal(kvl_linker_poll(lk, cc, 5, &k, 0), KVL_OK);
	assert_int_equal(k, 5);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(cc[i].id, ids[i]); /* FIFO */
		expect_completion(&cc[i], KVL_REQ_OFFLOAD, 0, 3, 3);
	}
	ASSERT_RC(lk, kvl_linker_flush(lk, 0), KVL_OK);
	expect_none(lk, 0);
	/* Duplicate id while open: EEXIST (tolerates it having finished). */
	ASSERT_RC(lk, kvl_linker_offload(lk, 40, q.pages, 4, q.sp, NULL),
	          KVL_OK);
	int rc = kvl_linker_offload(lk, 40, q.pages, 4, q.sp, NULL);
	assert_true(rc == KVL_EEXIST || rc == KVL_OK);
	uint64_t dup[2] = {40, 40};
	if (rc == KVL_OK) {
		/* It had completed already: two completions of id 40. */
		ASSERT_RC(lk, kvl_linker_flush(lk, LONG_MS), KVL_OK);
		assert_int_equal(kvl_linker_poll(lk, cc, 5, &k, 0), KVL_OK);
		assert_int_equal(k, 2);
		assert_int_equal(cc[0].id, dup[0]);
		assert_int_equal(cc[1].id, dup[1]);
	} else {
		c = collect1(lk, 40);
		expect_completion(&c, KVL_REQ_OFFLOAD, 0, 4, 4);
	}

	kvl_linker_close(lk);
	kvl_store_close(s);

	/* A store too small for one object: the offload completes with the
	 * store's error and no valid page; nothing is found. */
	s = open_ok("mem:?capacity=512");
	lk = open_lk(&h, s, NULL);
	c = offload_sync(lk, 50, &q);
	expect_completion(&c, KVL_REQ_OFFLOAD, KVL_ERANGE, 0, 4);
	assert_int_equal(lookup(lk, pg, 4, NULL), 0);
	kvl_linker_close(lk);
	kvl_store_close(s);
	host_free(&h);
}

static void test_offload_replicated(void **state)
{
	(void)state;
	hcfg c0 = {.mla = 1, .shard = {0, 2, 0, 1, 0, 1}};
	hcfg c1 = {.mla = 1, .shard = {1, 2, 0, 1, 0, 1}};
	host h0, h1, d1;
	host_init(&h0, &c0);
	host_init(&h1, &c1);
	host_init(&d1, &c1);
	kvl_store *s = open_ok(STORE_URI);
	kvl_linker *l0 = open_lk(&h0, s, NULL);
	kvl_linker *l1 = open_lk(&h1, s, NULL);
	kvl_hash pg[3];
	make_pages(pg, 3, 14);
	char k0[KVL_KEY_MAX], k1[KVL_KEY_MAX];
	key_of(&h0, h0.mla, &pg[0], k0);
	key_of(&h1, h1.mla, &pg[0], k1);
	assert_string_equal(k0, k1); /* one object for every tp rank */
	assert_null(strstr(k1, "tp"));
	key_of(&h1, h1.kv, &pg[0], k1);
	assert_non_null(strstr(k1, "tp1_"));

	req r;
	req_init(&r, pg, 3);
	req_pool(&r, h1.kv, 0, 0);
	req_pool(&r, h1.mla, 0, 0);
	fill_req(&h1, &r);
	kvl_store_stats a, b;
	assert_int_equal(kvl_store_stats_get(s, &a), KVL_OK);
	kvl_completion c = offload_sync(l1, 1, &r);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 3, 3);
	assert_int_equal(kvl_store_stats_get(s, &b), KVL_OK);
	assert_int_equal(b.puts - a.puts, 3);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(page_present(s, &h1, h1.kv, &pg[i]), 1);
		assert_int_equal(page_present(s, &h1, h1.mla, &pg[i]),
		                 0);
	}
	/* Only mla from rank 1: nothing written, still status 0. */
	req m;
	req_init(&m, pg, 3);
	req_pool(&m, h1.mla, 0, 0);
	c = offload_sync(l1, 2, &m);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 3, 3);
	assert_int_equal(page_present(s, &h1, h1.mla, &pg[0]), 0);
	/* Rank 0 writes it. */
	req r0;
	req_init(&r0, pg, 3);
	req_pool(&r0, h0.kv, 0, 0);
	req_pool(&r0, h0.mla, 0, 0);
	fill_req(&h0, &r0);
	c = offload_sync(l0, 3, &r0);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 3, 3);
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(page_present(s, &h1, h1.mla, &pg[i]),
		                 1);
	/* Rank 1 loads the replicated page rank 0 wrote. */
	kvl_linker *ld = open_lk(&d1, s, NULL);
	assert_int_equal(lookup(ld, pg, 3, NULL), 3);
	req d;
	req_init(&d, pg, 3);
	req_pool(&d, d1.kv, 4, 0);
	req_pool(&d, d1.mla, 9, 0);
	c = load_sync(ld, 4, &d, NULL);
	expect_completion(&c, KVL_REQ_LOAD, 0, 3, 3);
	check_req(&d1, &d, 3, N_LAYERS);

	kvl_linker_close(ld);
	kvl_linker_close(l1);
	kvl_linker_close(l0);
	kvl_store_close(s);
	host_free(&d1);
	host_free(&h1);
	host_free(&h0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_offload_present, next_test),
		cmocka_unit_test_setup(test_offload_replicated, next_test),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
