/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_linker_lifecycle.c — a linker's life: open, cancel, the request
 * queue, shutdown, close, and every accepted request completing exactly
 * once.
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
 * Covers: open errors and defaults; cancel before and after start (and of
 * unknown ids and offloads); a full request queue (max_requests, refused
 * requests never reported); shutdown with queued and running work (waiters
 * woken), two shutdowns at once, close with work queued (ASan: nothing
 * leaks); and exactly-once under concurrent engine threads and pollers,
 * with and without a shutdown in the middle.
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

/* ================================================================== open */

static void test_open_errors(void **state)
{
	(void)state;
	host h, u;
	host_init(&h, NULL);
	host_init2(&u, NULL, 1);
	kvl_store *s = open_ok(STORE_URI);
	kvl_linker *lk = (kvl_linker *)&h; /* must stay untouched on error */
	char err[256];

	err[0] = 0;
	assert_int_equal(kvl_linker_open(s, NULL, NULL, &lk, err, sizeof err),
	                 KVL_EINVAL);
	assert_true(strlen(err) > 0);
	err[0] = 0;
	assert_int_equal(kvl_linker_open(NULL, h.l, NULL, &lk, err,
	                                 sizeof err),
	                 KVL_EINVAL);
	assert_true(strlen(err) > 0);
	err[0] = 0;
	assert_int_equal(kvl_linker_open(s, h.l, NULL, NULL, err, sizeof err),
	                 KVL_EINVAL);
	assert_true(strlen(err) > 0);
	err[0] = 0;
	assert_int_equal(kvl_linker_open(s, u.l, NULL, &lk, err, sizeof err),
	                 KVL_EINVAL);
	ASSERT_CONTAINS(err, "finalized");

	kvl_linker_opts o;
	memset(&o, 0, sizeof o);
	err[0] = 0;
	assert_int_equal(kvl_linker_open(s, h.l, &o, &lk, err, sizeof err),
	                 KVL_EINVAL);
	ASSERT_CONTAINS(err, "struct_size");
	o.struct_size = sizeof o + 8;
	err[0] = 0;
	assert_int_equal(kvl_linker_open(s, h.l, &o, &lk, err, sizeof err),
	                 KVL_EINVAL);
	ASSERT_CONTAINS(err, "struct_size");
	/* A pool on a CUDA device in a build without CUDA. */
	if (!kvl_has_feature("cuda")) {
		hcfg cc = {.cuda = 1};
		host g;
		host_init(&g, &cc);
		err[0] = 0;
		assert_int_equal(kvl_linker_open(s, g.l, NULL, &lk, err,
		                                 sizeof err),
		                 KVL_ENOTSUP);
		ASSERT_CONTAINS(err, "CUDA");
		host_free(&g);
	}
	/* No message buffer: still fails cleanly. */
	assert_int_equal(kvl_linker_open(s, h.l, &o, &lk, NULL, 0), KVL_EINVAL);
	assert_ptr_equal(lk, (kvl_linker *)&h);

	/* Defaults: opts NULL, {sizeof o}, and an earlier struct_size. */
	lk = open_lk(&h, s, NULL);
	assert_int_equal(kvl_linker_layers(lk), N_LAYERS);
	kvl_linker_close(lk);
	kvl_linker_opts o2 = {.struct_size = sizeof o2};
	lk = open_lk(&h, s, &o2);
	kvl_linker_close(lk);
	kvl_linker_opts o3 = {
		.struct_size = offsetof(kvl_linker_opts, max_requests)};
	lk = open_lk(&h, s, &o3);
	/* The defaults work: a round trip of one page. */
	kvl_hash pg[2];
	make_pages(pg, 2, 1);
	req r;
	req_init(&r, pg, 2);
	req_pool(&r, h.kv, 0, 0);
	fill_req(&h, &r);
	expect_completion((kvl_completion[]){offload_sync(lk, 1, &r)},
	                  KVL_REQ_OFFLOAD, 0, 2, 2);
	assert_int_equal(lookup(lk, pg, 2, NULL), 2);
	kvl_linker_close(lk);

	kvl_linker_close(NULL);
	kvl_linker_shutdown(NULL);
	assert_int_equal(kvl_linker_layers(NULL), 0);
	assert_non_null(kvl_linker_errmsg(NULL));
	kvl_store_close(s);
	host_free(&u);
	host_free(&h);
}

/* ================================================================ cancel */

static void test_cancel(void **state)
{
	(void)state;
	host src, dst;
	host_init(&src, NULL);
	host_init(&dst, NULL);
	kvl_store *s = open_ok(STORE_URI);
	kvl_linker *ls = open_lk(&src, s, NULL);
	kvl_linker *ld = open_lk(&dst, s, NULL);
	kvl_hash pg[4];
	make_pages(pg, 4, 12);
	req r;
	req_init(&r, pg, 4);
	req_pool(&r, src.kv, 0, 0);
	fill_req(&src, &r);
	expect_completion((kvl_completion[]){offload_sync(ls, 1, &r)},
	                  KVL_REQ_OFFLOAD, 0, 4, 4);

	req a, b, c3;
	req_init(&a, pg, 4);
	req_pool(&a, dst.kv, 0, 0);
	req_init(&b, pg, 4);
	req_pool(&b, dst.kv, 4, 0);
	req_init(&c3, pg, 4);
	req_pool(&c3, dst.kv, 8, 0);
	ASSERT_RC(ld, kvl_linker_load(ld, 10, a.pages, 4, a.sp), KVL_OK);
	ASSERT_RC(ld, kvl_linker_load(ld, 11, b.pages, 4, b.sp), KVL_OK);
	ASSERT_RC(ld, kvl_linker_load(ld, 12, c3.pages, 4, c3.sp),
	          KVL_OK);
	/* Before start: withdrawn (middle and head of the queue). */
	int co = -1;
	ASSERT_RC(ld, kvl_linker_cancel(ld, 11, &co), KVL_OK);
	assert_int_equal(co, 1);
	kvl_completion c = collect1(ld, 11);
	expect_completion(&c, KVL_REQ_LOAD, KVL_ECANCELED, 0, 4);
	co = -1;
	ASSERT_RC(ld, kvl_linker_cancel(ld, 10, &co), KVL_OK);
	assert_int_equal(co, 1);
	c = collect1(ld, 10);
	expect_completion(&c, KVL_REQ_LOAD, KVL_ECANCELED, 0, 4);
	/* Twice, unknown: ENOTFOUND. */
	ASSERT_RC(ld, kvl_linker_cancel(ld, 11, &co), KVL_ENOTFOUND);
	ASSERT_RC(ld, kvl_linker_cancel(ld, 999, &co), KVL_ENOTFOUND);
	ASSERT_CONTAINS(kvl_linker_errmsg(ld), "999");
	/* The canceled ones are not in the next batch: their slots stay
	 * untouched, the remaining one (the tail) loads. */
	uint64_t bt = 0;
	ASSERT_RC(ld, kvl_linker_start(ld, &bt), KVL_OK);
	ASSERT_RC(ld, kvl_linker_wait(ld, bt, N_LAYERS - 1, LONG_MS), KVL_OK);
	c = collect1(ld, 12);
	expect_completion(&c, KVL_REQ_LOAD, 0, 4, 4);
	check_req(&dst, &c3, 4, N_LAYERS);
	for (size_t sl = 0; sl < 8; sl++)
		assert_true(slot_untouched(&dst, dst.kv, sl, 0));
	expect_none(ld, 20);
	/* A canceled id is free again; canceling the tail then loading more
	 * keeps the queue intact. */
	ASSERT_RC(ld, kvl_linker_load(ld, 10, a.pages, 4, a.sp), KVL_OK);
	ASSERT_RC(ld, kvl_linker_load(ld, 11, b.pages, 4, b.sp), KVL_OK);
	ASSERT_RC(ld, kvl_linker_cancel(ld, 11, &co), KVL_OK);
	assert_int_equal(co, 1);
	ASSERT_RC(ld, kvl_linker_load(ld, 13, b.pages, 4, b.sp), KVL_OK);
	ASSERT_RC(ld, kvl_linker_start(ld, &bt), KVL_OK);
	ASSERT_RC(ld, kvl_linker_wait(ld, bt, N_LAYERS - 1, LONG_MS), KVL_OK);
	kvl_completion cc[3];
	collect(ld, (const uint64_t[]){10, 11, 13}, 3, cc);
	expect_completion(&cc[0], KVL_REQ_LOAD, 0, 4, 4);
	expect_completion(&cc[1], KVL_REQ_LOAD, KVL_ECANCELED, 0, 4);
	expect_completion(&cc[2], KVL_REQ_LOAD, 0, 4, 4);
	check_req(&dst, &a, 4, N_LAYERS);
	check_req(&dst, &b, 4, N_LAYERS);

	/* After start: either still running (canceled_out 0) or already
	 * done (ENOTFOUND); either way it completes normally, once. (The
	 * deterministic case is in test_slow_store.) */
	ASSERT_RC(ld, kvl_linker_load(ld, 14, a.pages, 4, a.sp), KVL_OK);
	ASSERT_RC(ld, kvl_linker_start(ld, &bt), KVL_OK);
	co = -1;
	int rc = kvl_linker_cancel(ld, 14, &co);
	assert_true((rc == KVL_OK && co == 0) || rc == KVL_ENOTFOUND);
	c = collect1(ld, 14);
	expect_completion(&c, KVL_REQ_LOAD, 0, 4, 4);
	/* Offloads cannot be canceled as loads. */
	ASSERT_RC(ls, kvl_linker_offload(ls, 15, r.pages, 4, r.sp, NULL),
	          KVL_OK);
	ASSERT_RC(ls, kvl_linker_flush(ls, LONG_MS), KVL_OK);
	ASSERT_RC(ls, kvl_linker_cancel(ls, 15, &co), KVL_ENOTFOUND);
	c = collect1(ls, 15);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 4, 4);

	kvl_linker_close(ld);
	kvl_linker_close(ls);
	kvl_store_close(s);
	host_free(&dst);
	host_free(&src);
}

static void test_queue_full(void **state)
{
	(void)state;
	host h;
	host_init(&h, NULL);
	kvl_store *s = open_ok(STORE_URI);
	kvl_linker_opts o = {.struct_size = sizeof o};
	o.max_requests = 4;
	kvl_linker *lk = open_lk(&h, s, &o);
	kvl_hash pg[2];
	make_pages(pg, 2, 15);
	req r;
	req_init(&r, pg, 2);
	req_pool(&r, h.kv, 0, 0);
	fill_req(&h, &r);

	uint64_t ids[4] = {1, 2, 3, 4};
	for (int i = 0; i < 4; i++)
		ASSERT_RC(lk, kvl_linker_offload(lk, ids[i], r.pages, 2,
		                                 r.sp, NULL),
		          KVL_OK);
	ASSERT_RC(lk, kvl_linker_offload(lk, 5, r.pages, 2, r.sp, NULL),
	          KVL_EFULL);
	ASSERT_CONTAINS(kvl_linker_errmsg(lk), "max_requests");
	/* Loads share the limit. */
	ASSERT_RC(lk, kvl_linker_load(lk, 6, r.pages, 2, r.sp),
	          KVL_EFULL);
	/* Completed but not polled still counts. */
	ASSERT_RC(lk, kvl_linker_flush(lk, LONG_MS), KVL_OK);
	ASSERT_RC(lk, kvl_linker_offload(lk, 5, r.pages, 2, r.sp, NULL),
	          KVL_EFULL);
	kvl_completion cc[4];
	collect(lk, ids, 4, cc);
	for (int i = 0; i < 4; i++)
		expect_completion(&cc[i], KVL_REQ_OFFLOAD, 0, 2, 2);
	expect_none(lk, 20); /* the refused ones are never reported */
	/* Polled: accepted again. */
	ASSERT_RC(lk, kvl_linker_offload(lk, 5, r.pages, 2, r.sp, NULL),
	          KVL_OK);
	/* Loads of one batch into slots of their own. */
	req l[4];
	for (int i = 0; i < 4; i++) {
		req_init(&l[i], pg, 2);
		req_pool(&l[i], h.kv, 2 + 2 * (size_t)i, 0);
	}
	for (uint64_t id = 6; id < 9; id++)
		ASSERT_RC(lk, kvl_linker_load(lk, id, l[id - 6].pages, 2,
		                              l[id - 6].sp),
		          KVL_OK);
	ASSERT_RC(lk, kvl_linker_load(lk, 9, l[3].pages, 2, l[3].sp),
	          KVL_EFULL);
	/* Poll one frees one place. */
	ASSERT_RC(lk, kvl_linker_flush(lk, LONG_MS), KVL_OK);
	kvl_completion c = collect1(lk, 5);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 2, 2);
	ASSERT_RC(lk, kvl_linker_load(lk, 9, l[3].pages, 2, l[3].sp), KVL_OK);
	uint64_t b = 0;
	ASSERT_RC(lk, kvl_linker_start(lk, &b), KVL_OK);
	ASSERT_RC(lk, kvl_linker_wait(lk, b, N_LAYERS - 1, LONG_MS), KVL_OK);
	uint64_t lids[4] = {6, 7, 8, 9};
	collect(lk, lids, 4, cc);
	for (int i = 0; i < 4; i++)
		expect_completion(&cc[i], KVL_REQ_LOAD, 0, 2, 2);
	expect_none(lk, 20);

	kvl_linker_close(lk);
	kvl_store_close(s);
	host_free(&h);
}

/* ====================================================== shutdown / close */

static void test_shutdown_queued(void **state)
{
	(void)state;
	/* With the fault store the offloads stay queued behind a slow store;
	 * without it they may finish before shutdown (either is allowed). */
	int slow = fault_store_ok();
	if (!slow)
		printf("shutdown with queued offloads: embedded store only "
		       "(offloads may finish before shutdown)\n");
	host src, dst;
	host_init(&src, NULL);
	host_init(&dst, NULL);
	kvl_store *s = open_ok(slow ? store_uri("fault+", NULL)
	                               : STORE_URI);
	kvl_hash pg[4];
	make_pages(pg, 4, 16);
	req r;
	req_init(&r, pg, 4);
	req_pool(&r, src.kv, 0, 0);
	fill_req(&src, &r);
	kvl_linker *ls = open_lk(&src, s, NULL);
	expect_completion((kvl_completion[]){offload_sync(ls, 1, &r)},
	                  KVL_REQ_OFFLOAD, 0, 4, 4);
	kvl_linker_close(ls);
	if (slow)
		fault_latency(s, 100);

	/* Loads stay queued (never started); offloads queue up. */
	kvl_linker *lk = open_lk(&dst, s, NULL);
	req d[3];
	uint64_t ids[8] = {10, 11, 12, 20, 21, 22, 23, 24};
	for (int i = 0; i < 3; i++) {
		req_init(&d[i], pg, 4);
		req_pool(&d[i], dst.kv, 4 * (size_t)i, 0);
		ASSERT_RC(lk, kvl_linker_load(lk, ids[i], d[i].pages, 4,
		                              d[i].sp),
		          KVL_OK);
	}
	for (int i = 3; i < 8; i++) {
		kvl_hash p2[2];
		make_pages(p2, 2, 200 + (uint64_t)i);
		req t;
		req_init(&t, p2, 2);
		req_pool(&t, dst.kv, 4 + (size_t)i, 0);
		ASSERT_RC(lk, kvl_linker_offload(lk, ids[i], t.pages, 2,
		                                 t.sp, NULL),
		          KVL_OK);
	}
	if (slow)
		fault_await_calls(s, 1, 2); /* offload 20 is being written */
	uint64_t t0 = now_ms();
	kvl_linker_shutdown(lk);
	/* Only the offload being written is finished (counted below: 4
	 * canceled, 2 puts); the clock only catches a hang. */
	if (slow)
		ASSERT_TRUE_MSG(now_ms() - t0 < HANG_MS, "shutdown hung");
	kvl_completion cc[8];
	collect(lk, ids, 8, cc);
	for (int i = 0; i < 3; i++)
		expect_completion(&cc[i], KVL_REQ_LOAD, KVL_ECANCELED, 0, 4);
	int n_canceled = 0;
	for (int i = 3; i < 8; i++) {
		assert_int_equal(cc[i].kind, KVL_REQ_OFFLOAD);
		if (cc[i].status == KVL_ECANCELED) {
			expect_completion(&cc[i], KVL_REQ_OFFLOAD,
			                  KVL_ECANCELED, 0, 2);
			n_canceled++;
		} else {
			expect_completion(&cc[i], KVL_REQ_OFFLOAD, 0, 2, 2);
			/* Completions of one queue come in FIFO order: no
			 * written offload after a canceled one. */
			assert_int_equal(n_canceled, 0);
		}
	}
	if (slow) {
		assert_int_equal(n_canceled, 4);
		assert_int_equal(fault_puts(s), 2); /* setup's and offload 20 */
	}
	/* The loads never touched their slots. */
	for (size_t sl = 0; sl < 12; sl++)
		assert_true(slot_untouched(&dst, dst.kv, sl, 0));
	/* Closed for new work; polls return at once; shutdown idempotent. */
	uint64_t b = 0;
	ASSERT_RC(lk, kvl_linker_load(lk, 30, d[0].pages, 4, d[0].sp),
	          KVL_ECLOSED);
	ASSERT_CONTAINS(kvl_linker_errmsg(lk), "shutting down");
	ASSERT_RC(lk, kvl_linker_offload(lk, 31, d[0].pages, 4, d[0].sp, NULL),
	          KVL_ECLOSED);
	ASSERT_RC(lk, kvl_linker_start(lk, &b), KVL_ECLOSED);
	ASSERT_RC(lk, kvl_linker_flush(lk, LONG_MS), KVL_OK);
	int co = -1;
	ASSERT_RC(lk, kvl_linker_cancel(lk, 10, &co), KVL_ENOTFOUND);
	/* A poll that waited would take its whole timeout (HANG_MS). */
	t0 = now_ms();
	expect_none(lk, 2 * HANG_MS);
	ASSERT_TRUE_MSG(now_ms() - t0 < HANG_MS,
	                "a poll after shutdown waited its timeout");
	kvl_linker_shutdown(lk);
	expect_none(lk, 0);
	kvl_linker_close(lk);
	kvl_store_close(s);
	host_free(&dst);
	host_free(&src);
}

typedef struct waiter_arg {
	kvl_linker *lk;
	uint64_t batch;
	uint32_t layer;
	int rc;
} waiter_arg;

static void *waiter_main(void *p)
{
	waiter_arg *a = p;
	a->rc = kvl_linker_wait(a->lk, a->batch, a->layer, UINT32_MAX);
	return NULL;
}

/* Shutdown while a batch runs on a slow store: waiters wake up, and the
 * batch lets go of the objects it held. */
static void test_shutdown_running(void **state)
{
	(void)state;
	NEED_FAULT_STORE();
	host src, dst;
	host_init(&src, NULL);
	host_init(&dst, NULL);
	kvl_store *s = open_ok(store_uri("fault+", "fault.holds=1"));
	kvl_linker *ls = open_lk(&src, s, NULL);
	kvl_hash pg[2];
	make_pages(pg, 2, 17);
	req r;
	req_init(&r, pg, 2);
	req_pool(&r, src.kv, 0, 0);
	fill_req(&src, &r);
	expect_completion((kvl_completion[]){offload_sync(ls, 1, &r)},
	                  KVL_REQ_OFFLOAD, 0, 2, 2);
	kvl_linker_close(ls);
	fault_latency(s, 200);

	kvl_linker *lk = open_lk(&dst, s, NULL);
	req d;
	req_init(&d, pg, 2);
	req_pool(&d, dst.kv, 0, 0);
	ASSERT_RC(lk, kvl_linker_load(lk, 2, d.pages, 2, d.sp), KVL_OK);
	uint64_t b = 0, b2 = 0;
	ASSERT_RC(lk, kvl_linker_start(lk, &b), KVL_OK);
	/* A second batch, started but not yet taken by the loader. */
	ASSERT_RC(lk, kvl_linker_load(lk, 3, d.pages, 2, d.sp), KVL_OK);
	ASSERT_RC(lk, kvl_linker_start(lk, &b2), KVL_OK);
	waiter_arg wa[3] = {{lk, b, N_LAYERS - 1, -100},
	                    {lk, b, 2, -100},
	                    {lk, b2, 0, -100}};
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&t[i], NULL, waiter_main,
		                                &wa[i]),
		                 0);
	fault_await_calls(s, 0, 1); /* layer 0's get is in the store */
	/* The running batch holds its objects (the second holds nothing
	 * yet). */
	assert_int_equal(pages_held(s, &dst, dst.kv, pg, 2), 2);
	uint64_t t0 = now_ms();
	kvl_linker_shutdown(lk);
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	/* The running layer finishes; the others are not read (fault_gets
	 * below); the clock only catches a hang. */
	ASSERT_TRUE_MSG(now_ms() - t0 < HANG_MS, "shutdown hung its waiters");
	for (int i = 0; i < 3; i++) {
		if (wa[i].rc != KVL_ECANCELED)
			print_error("waiter %d: %s\n", i,
			            kvl_err_name(wa[i].rc));
		assert_int_equal(wa[i].rc, KVL_ECANCELED);
	}
	kvl_completion cc[2];
	collect(lk, (const uint64_t[]){2, 3}, 2, cc);
	expect_completion(&cc[0], KVL_REQ_LOAD, KVL_ECANCELED, 0, 2);
	expect_completion(&cc[1], KVL_REQ_LOAD, KVL_ECANCELED, 0, 2);
	/* Waits after shutdown return at once too. */
	ASSERT_RC(lk, kvl_linker_wait(lk, b, N_LAYERS - 1, UINT32_MAX),
	          KVL_ECANCELED);
	ASSERT_RC(lk, kvl_linker_wait(lk, b2, 0, UINT32_MAX), KVL_ECANCELED);
	expect_none(lk, 100);
	/* Nothing after the running layer was read, and the batch let go
	 * of what it held. */
	assert_int_equal(fault_gets(s), 1);
	assert_int_equal(pages_held(s, &dst, dst.kv, pg, 2), 0);

	kvl_linker_close(lk);
	kvl_store_close(s);
	host_free(&dst);
	host_free(&src);
}

typedef struct shut_arg {
	kvl_linker *lk;
	unsigned delay_ms;
	int flush_rc; /* kvl_linker_flush(lk, 0) right after shutdown */
} shut_arg;

static void *shut_main(void *p)
{
	shut_arg *a = p;
	sleep_ms(a->delay_ms);
	kvl_linker_shutdown(a->lk);
	a->flush_rc = kvl_linker_flush(a->lk, 0);
	return NULL;
}

/* Two threads shut down at once while an offload is being written: when
 * either call returns, the threads are joined and every request is done. */
static void test_shutdown_concurrent(void **state)
{
	(void)state;
	NEED_FAULT_STORE();
	host h;
	host_init(&h, NULL);
	kvl_store *s = open_ok(store_uri("fault+", NULL));
	kvl_linker *lk = open_lk(&h, s, NULL);
	kvl_hash pg[2];
	make_pages(pg, 2, 22);
	req r;
	req_init(&r, pg, 2);
	req_pool(&r, h.kv, 0, 0);
	fill_req(&h, &r);
	fault_latency(s, 200);
	uint64_t ids[2] = {1, 2};
	ASSERT_RC(lk, kvl_linker_offload(lk, 1, r.pages, 2, r.sp, NULL),
	          KVL_OK);
	ASSERT_RC(lk, kvl_linker_offload(lk, 2, r.pages, 2, r.sp, NULL),
	          KVL_OK);
	fault_await_calls(s, 1, 1); /* the first offload is being written */
	shut_arg a[2] = {{lk, 0, -100}, {lk, 30, -100}};
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, shut_main, &a[i]),
		                 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	for (int i = 0; i < 2; i++) {
		if (a[i].flush_rc)
			print_error("shutdown %d returned with offloads still "
			            "running (flush: %s)\n",
			            i, kvl_err_name(a[i].flush_rc));
		assert_int_equal(a[i].flush_rc, KVL_OK);
	}
	kvl_completion cc[2];
	collect(lk, ids, 2, cc);
	expect_completion(&cc[0], KVL_REQ_OFFLOAD, 0, 2, 2);
	expect_completion(&cc[1], KVL_REQ_OFFLOAD, KVL_ECANCELED, 0, 2);
	kvl_linker_close(lk);
	kvl_store_close(s);
	host_free(&h);
}

/* Close without shutdown or polling, with work everywhere (ASan: no leak). */
static void test_close_busy(void **state)
{
	(void)state;
	host h;
	host_init(&h, NULL);
	kvl_store *s = open_ok(STORE_URI);
	kvl_hash pg[4];
	make_pages(pg, 4, 18);
	req r;
	req_init(&r, pg, 4);
	req_pool(&r, h.kv, 0, 0);
	fill_req(&h, &r);
	for (int round = 0; round < 3; round++) {
		kvl_linker *lk = open_lk(&h, s, NULL);
		for (uint64_t i = 0; i < 5; i++)
			ASSERT_RC(lk, kvl_linker_offload(lk, i, r.pages, 4, r.sp, NULL),
			          KVL_OK);
		/* Two pages a load, each load into slots of its own. */
		req d[5];
		for (size_t k = 0; k < 5; k++) {
			req_init(&d[k], pg, 2);
			req_pool(&d[k], h.kv, 4 + 2 * k, 0);
		}
		for (uint64_t i = 0; i < 3; i++)
			ASSERT_RC(lk, kvl_linker_load(lk, 100 + i, d[i].pages,
			                              2, d[i].sp),
			          KVL_OK);
		uint64_t b = 0;
		if (round > 0)
			ASSERT_RC(lk, kvl_linker_start(lk, &b), KVL_OK);
		for (uint64_t i = 0; i < 2; i++)
			ASSERT_RC(lk, kvl_linker_load(lk, 200 + i,
			                              d[3 + i].pages, 2,
			                              d[3 + i].sp),
			          KVL_OK);
		if (round == 2) {
			kvl_completion c[2];
			size_t k = 0;
			assert_int_equal(kvl_linker_poll(lk, c, 2, &k, 10),
			                 KVL_OK);
		}
		kvl_linker_close(lk);
	}
	kvl_store_close(s);
	host_free(&h);
}

/* ==================================================== exactly once, threads */

#define ENGINES 4
#define OPS 200
#define MAX_RECS (ENGINES * OPS + 16)

typedef struct shared {
	kvl_linker *lk;
	host *src, *dst;
	const kvl_hash *pg; /* 8 stored pages */
	pthread_mutex_t mu;
	uint64_t accepted[MAX_RECS];
	size_t n_accepted;
	kvl_completion done[MAX_RECS];
	size_t n_done;
	int stop;
	int may_close; /* a shutdown may come: ECLOSED, ECANCELED are fine */
	int errors;    /* failed expectations inside threads */
} shared;

static void sh_error(shared *sh, const char *what, int rc)
{
	pthread_mutex_lock(&sh->mu);
	if (sh->errors++ < 10)
		print_error("%s: %s (%s)\n", what, kvl_err_name(rc),
		            kvl_linker_errmsg(sh->lk));
	pthread_mutex_unlock(&sh->mu);
}

static void sh_accept(shared *sh, uint64_t id)
{
	pthread_mutex_lock(&sh->mu);
	sh->accepted[sh->n_accepted++] = id;
	pthread_mutex_unlock(&sh->mu);
}

static size_t sh_count(shared *sh, size_t *done)
{
	pthread_mutex_lock(&sh->mu);
	size_t acc = sh->n_accepted;
	*done = sh->n_done;
	pthread_mutex_unlock(&sh->mu);
	return acc;
}

static void sh_poll(shared *sh, uint32_t ms)
{
	kvl_completion c[8];
	size_t k = 0;
	int rc = kvl_linker_poll(sh->lk, c, 8, &k, ms);
	if (rc)
		sh_error(sh, "poll", rc);
	pthread_mutex_lock(&sh->mu);
	for (size_t i = 0; i < k; i++) {
		if (sh->n_done < MAX_RECS)
			sh->done[sh->n_done] = c[i];
		sh->n_done++;
	}
	pthread_mutex_unlock(&sh->mu);
}

typedef struct engine_arg {
	shared *sh;
	unsigned t;
} engine_arg;

/* ECLOSED after a shutdown is an accepted refusal; else rc is an error. */
static int refused(shared *sh, int rc)
{
	return rc == KVL_ECLOSED && sh->may_close;
}

static void *engine_main(void *p)
{
	engine_arg *a = p;
	shared *sh = a->sh;
	unsigned seed = 12345u + a->t;
	const host *src = sh->src, *dst = sh->dst;
	for (unsigned i = 0; i < OPS; i++) {
		uint64_t id = ((uint64_t)(a->t + 1) << 32) | i;
		unsigned op = (unsigned)rand_r(&seed) % 12;
		size_t first = (unsigned)rand_r(&seed) % 5;
		req r;
		req_init(&r, sh->pg + first, 4);
		int rc;
		if (op < 5) {
			/* Each engine loads into its own destination slots. */
			req_pool(&r, dst->kv, a->t * 4, 0);
			rc = kvl_linker_load(sh->lk, id, r.pages, 4,
			                     r.sp);
			/* Its previous load may hold them for the batch: with
			 * these valid arguments, the only KVL_EINVAL. (Not
			 * told by the message: the handle keeps the latest
			 * failure of any thread, another engine's maybe.) */
			if (rc == KVL_EINVAL)
				continue;
			if (rc) {
				if (!refused(sh, rc))
					sh_error(sh, "load", rc);
				continue;
			}
			sh_accept(sh, id);
			if (op < 2) {
				int co = -1;
				rc = kvl_linker_cancel(sh->lk, id, &co);
				if (rc && rc != KVL_ENOTFOUND)
					sh_error(sh, "cancel", rc);
			}
		} else if (op < 8) {
			req_pool(&r, src->kv, first, 0);
			rc = kvl_linker_offload(sh->lk, id, r.pages, 4,
			                        r.sp, NULL);
			if (rc) {
				if (!refused(sh, rc))
					sh_error(sh, "offload", rc);
				continue;
			}
			sh_accept(sh, id);
		} else if (op < 10) {
			uint64_t b = 0;
			rc = kvl_linker_start(sh->lk, &b);
			if (rc == KVL_EFULL || refused(sh, rc))
				continue;
			if (rc) {
				sh_error(sh, "start", rc);
				continue;
			}
			rc = kvl_linker_wait(sh->lk, b, N_LAYERS - 1, LONG_MS);
			if (rc && rc != KVL_ENOTFOUND &&
			    !(rc == KVL_ECANCELED && sh->may_close))
				sh_error(sh, "wait", rc);
		} else if (op == 10) {
			size_t prefix = 0;
			rc = kvl_linker_lookup(sh->lk, sh->pg, 8, NULL,
			                       &prefix);
			if (rc || prefix != 8)
				sh_error(sh, "lookup", rc ? rc : -999);
		} else {
			sh_poll(sh, 0);
		}
	}
	return NULL;
}

static void *poller_main(void *p)
{
	shared *sh = p;
	for (;;) {
		pthread_mutex_lock(&sh->mu);
		int stop = sh->stop;
		pthread_mutex_unlock(&sh->mu);
		if (stop)
			break;
		sh_poll(sh, 20);
	}
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* ENGINES threads issue OPS random calls each on one linker while a poller
 * (and the engines themselves) poll; with `shutdown_at`, the main thread
 * shuts the linker down once that many requests were accepted. Every
 * accepted id must complete exactly once, and nothing else. */
static void run_exactly_once(size_t shutdown_at)
{
	host src, dst;
	host_init(&src, NULL);
	host_init(&dst, NULL);
	kvl_store *s = open_ok(STORE_URI);
	shared *sh = calloc(1, sizeof *sh);
	assert_non_null(sh);
	pthread_mutex_init(&sh->mu, NULL);
	kvl_hash pg[8];
	make_pages(pg, 8, 19);
	sh->lk = open_lk(&src, s, NULL);
	sh->src = &src;
	sh->dst = &dst;
	sh->pg = pg;
	sh->may_close = shutdown_at > 0;
	/* Pages 0..7 from slots 0..7 (offloads re-offer subsets of them). */
	req r;
	req_init(&r, pg, 8);
	req_pool(&r, src.kv, 0, 0);
	fill_req(&src, &r);
	kvl_completion c0 = offload_sync(sh->lk, 1, &r);
	expect_completion(&c0, KVL_REQ_OFFLOAD, 0, 8, 8);

	pthread_t pt, et[ENGINES];
	engine_arg ea[ENGINES];
	assert_int_equal(pthread_create(&pt, NULL, poller_main, sh), 0);
	for (unsigned t = 0; t < ENGINES; t++) {
		ea[t] = (engine_arg){sh, t};
		assert_int_equal(pthread_create(&et[t], NULL, engine_main,
		                                &ea[t]),
		                 0);
	}
	size_t done = 0;
	uint64_t deadline = now_ms() + COLLECT_MS;
	if (shutdown_at) {
		while (sh_count(sh, &done) < shutdown_at &&
		       now_ms() < deadline)
			sleep_ms(1);
		kvl_linker_shutdown(sh->lk);
	}
	for (unsigned t = 0; t < ENGINES; t++)
		assert_int_equal(pthread_join(et[t], NULL), 0);
	/* Loads queued after an engine's last start: one more batch. */
	uint64_t b = 0;
	int rc = kvl_linker_start(sh->lk, &b);
	assert_int_equal(rc, shutdown_at ? KVL_ECLOSED : KVL_OK);
	deadline = now_ms() + COLLECT_MS;
	for (;;) {
		size_t acc = sh_count(sh, &done);
		if (done >= acc || now_ms() > deadline)
			break;
		sleep_ms(10);
	}
	pthread_mutex_lock(&sh->mu);
	sh->stop = 1;
	pthread_mutex_unlock(&sh->mu);
	assert_int_equal(pthread_join(pt, NULL), 0);
	sh_poll(sh, 50); /* anything extra would show up here */
	assert_int_equal(sh->errors, 0);

	size_t n = sh->n_accepted;
	if (sh->n_done != n)
		print_error("%zu requests accepted, %zu completions\n", n,
		            sh->n_done);
	assert_int_equal(sh->n_done, n);
	assert_true(n >= (shutdown_at ? shutdown_at : ENGINES * OPS / 3));
	uint64_t *acc = malloc(n * sizeof *acc), *got = malloc(n * sizeof *got);
	assert_non_null(acc);
	assert_non_null(got);
	memcpy(acc, sh->accepted, n * sizeof *acc);
	size_t n_load = 0, n_cancel = 0;
	for (size_t i = 0; i < n; i++) {
		const kvl_completion *c = &sh->done[i];
		got[i] = c->id;
		assert_int_equal(c->n_pages, 4);
		if (c->kind == KVL_REQ_LOAD)
			n_load++;
		else
			assert_int_equal(c->kind, KVL_REQ_OFFLOAD);
		if (c->status == KVL_ECANCELED) {
			/* Offloads are canceled only by a shutdown. */
			if (c->kind == KVL_REQ_OFFLOAD)
				assert_true(shutdown_at > 0);
			assert_int_equal(c->valid_pages, 0);
			n_cancel++;
		} else {
			expect_completion(c, c->kind, 0, 4, 4);
		}
	}
	qsort(acc, n, sizeof *acc, cmp_u64);
	qsort(got, n, sizeof *got, cmp_u64);
	for (size_t i = 0; i < n; i++) {
		if (i && got[i] == got[i - 1])
			print_error("id %llx completed twice\n",
			            (unsigned long long)got[i]);
		if (acc[i] != got[i])
			print_error("accepted %llx, completed %llx\n",
			            (unsigned long long)acc[i],
			            (unsigned long long)got[i]);
		assert_int_equal(acc[i], got[i]);
	}
	printf("exactly once%s: %zu requests (%zu loads, %zu canceled)\n",
	       shutdown_at ? " with a shutdown" : "", n, n_load, n_cancel);
	free(acc);
	free(got);
	kvl_linker_close(sh->lk);
	pthread_mutex_destroy(&sh->mu);
	free(sh);
	kvl_store_close(s);
	host_free(&dst);
	host_free(&src);
}

static void test_exactly_once_threads(void **state)
{
	(void)state;
	run_exactly_once(0);
	run_exactly_once(150);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_open_errors, next_test),
		cmocka_unit_test_setup(test_cancel, next_test),
		cmocka_unit_test_setup(test_queue_full, next_test),
		cmocka_unit_test_setup(test_shutdown_queued, next_test),
		cmocka_unit_test_setup(test_shutdown_running, next_test),
		cmocka_unit_test_setup(test_shutdown_concurrent, next_test),
		cmocka_unit_test_setup(test_close_busy, next_test),
		cmocka_unit_test_setup(test_exactly_once_threads, next_test),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
