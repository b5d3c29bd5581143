/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_linker_load.c — the linker's layer-wise loads (kvl_linker_load,
 * _start, _wait, _poll): bytes that round-trip from one engine to another,
 * layer by layer, and the arguments and batches around them.
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
 * Covers: load round trips into other slots, per-layer waits (a layer's
 * bytes are there when its wait returns), slots not named left untouched,
 * partial requests (one pool only), two requests in one batch, small
 * io_batch and max_request_pages, duplicate ids, bad slots, nothing to
 * load, bad arguments, empty batches and the batch ring (old batches
 * forgotten), and slots that would receive (or give) two pages.
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

/* ================================================================== load */

static void test_load_roundtrip(void **state)
{
	(void)state;
	hcfg cfg = {.swa = 1};
	host src, dst;
	host_init(&src, &cfg);
	host_init(&dst, &cfg);
	kvl_store *s = open_ok(STORE_URI);
	kvl_linker *ls = open_lk(&src, s, NULL);
	kvl_linker *ld = open_lk(&dst, s, NULL);
	assert_int_equal(kvl_linker_layers(ld), N_LAYERS);
	kvl_hash pg[6];
	make_pages(pg, 6, 6);

	req r;
	req_init(&r, pg, 6);
	req_pool(&r, src.kv, 2, 0);
	req_pool(&r, src.swa, 2, 0);
	fill_req(&src, &r);
	kvl_completion c = offload_sync(ls, 1, &r);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 6, 6);
	assert_int_equal(lookup(ld, pg, 6, NULL), 6);

	/* Load into other slots: kv for every page (slots 15 down to 10),
	 * swa only for the trailing window (pages 4 and 5 into slots 7, 8).
	 */
	req d;
	req_init(&d, pg, 6);
	req_pool(&d, dst.kv, 0, 0);
	for (size_t i = 0; i < 6; i++)
		d.slot[dst.kv][i] = 15 - i;
	req_pool(&d, dst.swa, 7, 4);
	ASSERT_RC(ld, kvl_linker_load(ld, 2, d.pages, 6, d.sp), KVL_OK);
	uint64_t b = 0;
	ASSERT_RC(ld, kvl_linker_start(ld, &b), KVL_OK);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++) {
		ASSERT_RC(ld, kvl_linker_wait(ld, b, ly, LONG_MS), KVL_OK);
		/* Layer ly is complete: its bytes are there. */
		check_req(&dst, &d, 6, ly + 1);
	}
	ASSERT_RC(ld, kvl_linker_wait(ld, b, 0, 0), KVL_OK);
	ASSERT_RC(ld, kvl_linker_wait(ld, b, N_LAYERS, 0), KVL_ERANGE);
	ASSERT_RC(ld, kvl_linker_wait(ld, b + 1, 0, 0), KVL_ENOTFOUND);
	ASSERT_RC(ld, kvl_linker_wait(ld, b + 1000, 0, 0), KVL_ENOTFOUND);
	c = collect1(ld, 2);
	expect_completion(&c, KVL_REQ_LOAD, 0, 6, 6);
	check_req(&dst, &d, 6, N_LAYERS);
	/* Slots not named were not written. */
	for (size_t sl = 0; sl < 10; sl++)
		assert_true(slot_untouched(&dst, dst.kv, sl, 0));
	for (size_t sl = 0; sl < NP; sl++)
		if (sl != 7 && sl != 8)
			assert_true(slot_untouched(&dst, dst.swa, sl, 0));
	expect_none(ld, 0);

	/* Partial request: only swa, others NULL. */
	req w;
	req_init(&w, pg, 6);
	req_pool(&w, dst.swa, 10, 4);
	c = load_sync(ld, 3, &w, NULL);
	expect_completion(&c, KVL_REQ_LOAD, 0, 6, 6);
	check_req(&dst, &w, 6, N_LAYERS);
	for (size_t sl = 0; sl < 10; sl++)
		assert_true(slot_untouched(&dst, dst.kv, sl, 0));

	/* Two requests in one batch, loaded into separate slots. */
	req e1, e2;
	req_init(&e1, pg, 3);
	req_pool(&e1, dst.kv, 0, 0);
	req_init(&e2, pg + 3, 3);
	req_pool(&e2, dst.kv, 3, 0);
	req_pool(&e2, dst.swa, 0, 0);
	ASSERT_RC(ld, kvl_linker_load(ld, 4, e1.pages, 3, e1.sp),
	          KVL_OK);
	ASSERT_RC(ld, kvl_linker_load(ld, 5, e2.pages, 3, e2.sp),
	          KVL_OK);
	ASSERT_RC(ld, kvl_linker_start(ld, &b), KVL_OK);
	ASSERT_RC(ld, kvl_linker_wait(ld, b, N_LAYERS - 1, LONG_MS), KVL_OK);
	kvl_completion cc[2];
	collect(ld, (const uint64_t[]){4, 5}, 2, cc);
	expect_completion(&cc[0], KVL_REQ_LOAD, 0, 3, 3);
	expect_completion(&cc[1], KVL_REQ_LOAD, 0, 3, 3);
	check_req(&dst, &e1, 3, N_LAYERS);
	check_req(&dst, &e2, 3, N_LAYERS);

	kvl_linker_close(ld);
	kvl_linker_close(ls);
	kvl_store_close(s);
	host_free(&dst);
	host_free(&src);
}

/* Small io_batch: requests are cut into several store calls per layer;
 * bytes still round-trip. max_request_pages bounds every request. */
static void test_io_batch(void **state)
{
	(void)state;
	hcfg cfg = {.swa = 1};
	host src, dst;
	host_init(&src, &cfg);
	host_init(&dst, &cfg);
	kvl_hash pg[7];
	static const uint32_t sizes[] = {1, 2, 5, 64};
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		/* New pages each round: a shared store keeps the last's. */
		make_pages(pg, 7, 23 + 100 * (unsigned)k);
		kvl_store *s = open_ok(STORE_URI);
		kvl_linker_opts o = {.struct_size = sizeof o};
		o.io_batch = sizes[k];
		o.max_request_pages = 7;
		kvl_linker *ls = open_lk(&src, s, &o);
		kvl_linker *ld = open_lk(&dst, s, &o);
		req r;
		req_init(&r, pg, 7);
		req_pool(&r, src.kv, 1, 0);
		req_pool(&r, src.swa, 3, 2);
		fill_req(&src, &r);
		kvl_completion c = offload_sync(ls, 1, &r);
		expect_completion(&c, KVL_REQ_OFFLOAD, 0, 7, 7);
		kvl_store_stats st;
		assert_int_equal(kvl_store_stats_get(s, &st), KVL_OK);
		assert_int_equal(st.puts, 7 + 5);
		assert_int_equal(lookup(ld, pg, 7, NULL), 7);
		memset(dst.mem, FILL, dst.mem_bytes);
		req d1, d2;
		req_init(&d1, pg, 7);
		req_pool(&d1, dst.kv, 9, 0);
		req_pool(&d1, dst.swa, 0, 2);
		req_init(&d2, pg, 4);
		req_pool(&d2, dst.kv, 0, 0);
		ASSERT_RC(ld, kvl_linker_load(ld, 2, d1.pages, 7, d1.sp),
		          KVL_OK);
		ASSERT_RC(ld, kvl_linker_load(ld, 3, d2.pages, 4, d2.sp),
		          KVL_OK);
		uint64_t b = 0;
		ASSERT_RC(ld, kvl_linker_start(ld, &b), KVL_OK);
		for (uint32_t ly = 0; ly < N_LAYERS; ly++)
			ASSERT_RC(ld, kvl_linker_wait(ld, b, ly, LONG_MS),
			          KVL_OK);
		kvl_completion cc[2];
		collect(ld, (const uint64_t[]){2, 3}, 2, cc);
		expect_completion(&cc[0], KVL_REQ_LOAD, 0, 7, 7);
		expect_completion(&cc[1], KVL_REQ_LOAD, 0, 4, 4);
		check_req(&dst, &d1, 7, N_LAYERS);
		check_req(&dst, &d2, 4, N_LAYERS);

		/* More pages than max_request_pages: ERANGE everywhere. */
		kvl_hash many[8];
		make_pages(many, 8, 24);
		req m;
		req_init(&m, many, 8);
		req_pool(&m, dst.kv, 0, 0);
		size_t prefix = 0;
		ASSERT_RC(ld, kvl_linker_lookup(ld, many, 8, NULL,
		                                &prefix),
		          KVL_ERANGE);
		ASSERT_RC(ld, kvl_linker_load(ld, 4, m.pages, 8, m.sp),
		          KVL_ERANGE);
		ASSERT_RC(ld, kvl_linker_offload(ld, 5, m.pages, 8,
		                                 m.sp, NULL),
		          KVL_ERANGE);
		expect_none(ld, 0);
		kvl_linker_close(ld);
		kvl_linker_close(ls);
		kvl_store_close(s);
	}
	host_free(&dst);
	host_free(&src);
}

static void test_load_args(void **state)
{
	(void)state;
	hcfg cfg = {.swa = 1};
	host h;
	host_init(&h, &cfg);
	kvl_store *s = open_ok(STORE_URI);
	kvl_linker *lk = open_lk(&h, s, NULL);
	kvl_hash pg[4];
	make_pages(pg, 4, 7);
	req r;
	req_init(&r, pg, 4);
	req_pool(&r, h.kv, 0, 0);
	fill_req(&h, &r);
	expect_completion((kvl_completion[]){offload_sync(lk, 1, &r)},
	                  KVL_REQ_OFFLOAD, 0, 4, 4);
	memset(h.mem, FILL, h.mem_bytes);

	/* Duplicate id while queued: EEXIST, and the original still
	 * completes exactly once. */
	req d;
	req_init(&d, pg, 4);
	req_pool(&d, h.kv, 4, 0);
	ASSERT_RC(lk, kvl_linker_load(lk, 7, d.pages, 4, d.sp), KVL_OK);
	ASSERT_RC(lk, kvl_linker_load(lk, 7, d.pages, 4, d.sp),
	          KVL_EEXIST);
	ASSERT_CONTAINS(kvl_linker_errmsg(lk), "7");
	/* Another id in the same batch, into other slots. */
	req d2;
	req_init(&d2, pg, 4);
	req_pool(&d2, h.kv, 8, 0);
	ASSERT_RC(lk, kvl_linker_load(lk, 8, d2.pages, 4, d2.sp), KVL_OK);
	uint64_t b = 0;
	ASSERT_RC(lk, kvl_linker_start(lk, &b), KVL_OK);
	ASSERT_RC(lk, kvl_linker_wait(lk, b, N_LAYERS - 1, LONG_MS), KVL_OK);
	kvl_completion cc[2];
	collect(lk, (const uint64_t[]){7, 8}, 2, cc);
	expect_completion(&cc[0], KVL_REQ_LOAD, 0, 4, 4);
	expect_completion(&cc[1], KVL_REQ_LOAD, 0, 4, 4);
	expect_none(lk, 20);
	check_req(&h, &d2, 4, N_LAYERS);
	/* Polled: the id is free again. */
	kvl_completion c = load_sync(lk, 7, &d, NULL);
	expect_completion(&c, KVL_REQ_LOAD, 0, 4, 4);
	check_req(&h, &d, 4, N_LAYERS);

	/* Slot out of range: ERANGE, nothing reported later. */
	req bad;
	req_init(&bad, pg, 4);
	req_pool(&bad, h.kv, 0, 0);
	bad.slot[h.kv][2] = NP;
	ASSERT_RC(lk, kvl_linker_load(lk, 20, bad.pages, 4, bad.sp),
	          KVL_ERANGE);
	ASSERT_CONTAINS(kvl_linker_errmsg(lk), "slot");
	ASSERT_RC(lk, kvl_linker_offload(lk, 21, bad.pages, 4, bad.sp, NULL),
	          KVL_ERANGE);
	bad.slot[h.kv][2] = KVL_NO_SLOT - 1;
	ASSERT_RC(lk, kvl_linker_load(lk, 22, bad.pages, 4, bad.sp),
	          KVL_ERANGE);
	/* swa slot out of range next to good kv slots. */
	req bad2;
	req_init(&bad2, pg, 4);
	req_pool(&bad2, h.kv, 0, 0);
	req_pool(&bad2, h.swa, NP - 1, 2); /* pages 2, 3 → NP-1, NP */
	ASSERT_RC(lk, kvl_linker_load(lk, 23, bad2.pages, 4, bad2.sp),
	          KVL_ERANGE);

	/* Nothing to load: all NULL, or only KVL_NO_SLOT. */
	req none;
	req_init(&none, pg, 4);
	ASSERT_RC(lk, kvl_linker_load(lk, 24, none.pages, 4, none.sp),
	          KVL_EINVAL);
	none.sp[h.kv] = none.slot[h.kv];
	ASSERT_RC(lk, kvl_linker_load(lk, 25, none.pages, 4, none.sp),
	          KVL_EINVAL);
	ASSERT_RC(lk, kvl_linker_offload(lk, 26, none.pages, 4,
	                                 none.sp, NULL),
	          KVL_EINVAL);
	ASSERT_RC(lk, kvl_linker_load(lk, 27, d.pages, 0, d.sp),
	          KVL_EINVAL);
	ASSERT_RC(lk, kvl_linker_load(lk, 28, NULL, 4, d.sp),
	          KVL_EINVAL);
	ASSERT_RC(lk, kvl_linker_load(lk, 29, d.pages, 4, NULL),
	          KVL_EINVAL);
	ASSERT_RC(lk, kvl_linker_offload(lk, 30, NULL, 4, d.sp, NULL),
	          KVL_EINVAL);
	assert_int_equal(kvl_linker_load(NULL, 31, d.pages, 4, d.sp),
	                 KVL_EINVAL);
	int co = 0;
	assert_int_equal(kvl_linker_cancel(lk, 1, NULL), KVL_EINVAL);
	assert_int_equal(kvl_linker_cancel(NULL, 1, &co), KVL_EINVAL);
	assert_int_equal(kvl_linker_start(lk, NULL), KVL_EINVAL);
	size_t k = 0;
	assert_int_equal(kvl_linker_poll(lk, NULL, 2, &k, 0), KVL_EINVAL);
	assert_int_equal(kvl_linker_poll(lk, cc, 2, NULL, 0), KVL_EINVAL);

	/* Empty batch: every layer is complete; nothing is reported. */
	ASSERT_RC(lk, kvl_linker_start(lk, &b), KVL_OK);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++)
		ASSERT_RC(lk, kvl_linker_wait(lk, b, ly, LONG_MS), KVL_OK);
	uint64_t b2 = 0;
	ASSERT_RC(lk, kvl_linker_start(lk, &b2), KVL_OK);
	assert_true(b2 > b);
	ASSERT_RC(lk, kvl_linker_wait(lk, b2, N_LAYERS - 1, LONG_MS), KVL_OK);
	expect_none(lk, 50);

	/* Wait on a batch that was never started. */
	ASSERT_RC(lk, kvl_linker_wait(lk, b2 + 1, 0, 0), KVL_ENOTFOUND);

	/* The batch ring wraps: old batches are forgotten, new ones work. */
	uint64_t first = 0, last = 0;
	for (int i = 0; i < KVL_LINKER_MAX_BATCHES + 3; i++) {
		ASSERT_RC(lk, kvl_linker_start(lk, &last), KVL_OK);
		if (i == 0)
			first = last;
		ASSERT_RC(lk, kvl_linker_wait(lk, last, N_LAYERS - 1, LONG_MS),
		          KVL_OK);
	}
	ASSERT_RC(lk, kvl_linker_wait(lk, first, 0, 0), KVL_ENOTFOUND);
	ASSERT_RC(lk, kvl_linker_wait(lk, last, 0, 0), KVL_OK);
	expect_none(lk, 0);

	kvl_linker_close(lk);
	kvl_store_close(s);
	host_free(&h);
}

/* No two pages of one batch write one slot: within a load, across the
 * loads of a batch (the second is refused with both named), and a slot is
 * free again once its batch started or its load was canceled. An offload
 * refuses two different pages read from one slot. */
static void test_load_slot_twice(void **state)
{
	(void)state;
	host h;
	host_init(&h, NULL);
	kvl_store *s = open_ok(STORE_URI);
	kvl_linker *lk = open_lk(&h, s, NULL);
	kvl_hash pg[4];
	make_pages(pg, 4, 9);
	req r;
	req_init(&r, pg, 4);
	req_pool(&r, h.kv, 0, 0);
	fill_req(&h, &r);
	expect_completion((kvl_completion[]){offload_sync(lk, 1, &r)},
	                  KVL_REQ_OFFLOAD, 0, 4, 4);
	memset(h.mem, FILL, h.mem_bytes);

	/* Pages 1 and 2 into slot 3. */
	req d;
	req_init(&d, pg, 4);
	req_pool(&d, h.kv, 4, 0);
	d.slot[h.kv][1] = d.slot[h.kv][2] = 3;
	ASSERT_RC(lk, kvl_linker_load(lk, 2, d.pages, 4, d.sp), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_linker_errmsg(lk), "pages 1 and 2");
	ASSERT_CONTAINS(kvl_linker_errmsg(lk), "slot 3 of pool 'kv'");

	/* Load 3 takes slots 4..7; load 4 wants slot 6 in the same batch. */
	req a, b;
	req_init(&a, pg, 4);
	req_pool(&a, h.kv, 4, 0);
	req_init(&b, pg, 2);
	req_pool(&b, h.kv, 8, 0);
	b.slot[h.kv][1] = 6;
	ASSERT_RC(lk, kvl_linker_load(lk, 3, a.pages, 4, a.sp), KVL_OK);
	ASSERT_RC(lk, kvl_linker_load(lk, 4, b.pages, 2, b.sp), KVL_EINVAL);
	ASSERT_CONTAINS(kvl_linker_errmsg(lk), "load 4: page 1");
	ASSERT_CONTAINS(kvl_linker_errmsg(lk), "slot 6 of pool 'kv'");
	ASSERT_CONTAINS(kvl_linker_errmsg(lk), "page 2 of load 3");
	/* Refused whole: the id is free and page 0's slot 8 unclaimed. */
	b.slot[h.kv][1] = 9;
	ASSERT_RC(lk, kvl_linker_load(lk, 4, b.pages, 2, b.sp), KVL_OK);
	uint64_t bt = 0;
	ASSERT_RC(lk, kvl_linker_start(lk, &bt), KVL_OK);
	ASSERT_RC(lk, kvl_linker_wait(lk, bt, N_LAYERS - 1, LONG_MS), KVL_OK);
	kvl_completion cc[2];
	collect(lk, (const uint64_t[]){3, 4}, 2, cc);
	expect_completion(&cc[0], KVL_REQ_LOAD, 0, 4, 4);
	expect_completion(&cc[1], KVL_REQ_LOAD, 0, 2, 2);
	check_req(&h, &a, 4, N_LAYERS);
	check_req(&h, &b, 2, N_LAYERS);

	/* The batch started: its slots are free for the next one. A
	 * canceled load gives its slots back too. */
	ASSERT_RC(lk, kvl_linker_load(lk, 5, a.pages, 4, a.sp), KVL_OK);
	int canceled = 0;
	ASSERT_RC(lk, kvl_linker_cancel(lk, 5, &canceled), KVL_OK);
	assert_int_equal(canceled, 1);
	expect_completion((kvl_completion[]){collect1(lk, 5)}, KVL_REQ_LOAD,
	                  KVL_ECANCELED, 0, 4);
	kvl_completion c = load_sync(lk, 6, &a, NULL);
	expect_completion(&c, KVL_REQ_LOAD, 0, 4, 4);

	/* Offloads: two different pages from slot 0 are refused; one page
	 * named twice with its slot is stored once. */
	req o;
	req_init(&o, pg, 2);
	req_pool(&o, h.kv, 0, 0);
	o.slot[h.kv][1] = 0;
	ASSERT_RC(lk, kvl_linker_offload(lk, 7, o.pages, 2, o.sp, NULL),
	          KVL_EINVAL);
	ASSERT_CONTAINS(kvl_linker_errmsg(lk), "pages 0 and 1 both come from "
	                                       "slot 0 of pool 'kv'");
	o.pages[1] = o.pages[0];
	ASSERT_RC(lk, kvl_linker_offload(lk, 7, o.pages, 2, o.sp, NULL),
	          KVL_OK);
	ASSERT_RC(lk, kvl_linker_flush(lk, LONG_MS), KVL_OK);
	expect_completion((kvl_completion[]){collect1(lk, 7)},
	                  KVL_REQ_OFFLOAD, 0, 2, 2);
	expect_none(lk, 20);

	kvl_linker_close(lk);
	kvl_store_close(s);
	host_free(&h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_load_roundtrip, next_test),
		cmocka_unit_test_setup(test_io_batch, next_test),
		cmocka_unit_test_setup(test_load_args, next_test),
		cmocka_unit_test_setup(test_load_slot_twice, next_test),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
