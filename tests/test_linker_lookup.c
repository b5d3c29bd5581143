/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_linker_lookup.c — the linker's lookups (kvl_linker_lookup): the
 * prefix of pages a load would restore, across pools and ranks.
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
 * Covers: lookup prefixes and bad arguments, holes of ALL_PAGES and
 * TRAILING pools, pool_pages subsets, this rank's set (lookup_set),
 * probers (every rank's set from a layout of sizes only, tp ranks and
 * pipeline stages, keys of any shard, failures), namespace seeds (loads find pages only
 * under their seed), one store exists call per lookup, ranks as threads
 * sharing a store and a rank group (a rank lacking pages, a replicated pool
 * shared by the ranks, a rank whose store is down, a peer that never comes).
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

/* ================================================================ lookup */

static void test_lookup_basic(void **state)
{
	(void)state;
	hcfg cfg = {.swa = 1};
	host h;
	host_init(&h, &cfg);
	kvl_store *s = open_ok(STORE_URI);
	kvl_linker *lk = open_lk(&h, s, NULL);
	kvl_hash pg[8];
	make_pages(pg, 8, 2);

	/* Nothing stored: 0; n_pages 0: 0 (pages may be NULL). */
	assert_int_equal(lookup(lk, pg, 8, NULL), 0);
	assert_int_equal(lookup(lk, NULL, 0, NULL), 0);
	assert_int_equal(lookup(lk, pg, 0, NULL), 0);
	size_t prefix = 0;
	ASSERT_RC(lk, kvl_linker_lookup(lk, NULL, 3, NULL, &prefix),
	          KVL_EINVAL);
	ASSERT_RC(lk, kvl_linker_lookup(lk, pg, 3, NULL, NULL),
	          KVL_EINVAL);

	/* Offload pages 0..5 of both pools. */
	req r;
	req_init(&r, pg, 6);
	req_pool(&r, h.kv, 0, 0);
	req_pool(&r, h.swa, 0, 0);
	fill_req(&h, &r);
	expect_completion((kvl_completion[]){offload_sync(lk, 1, &r)},
	                  KVL_REQ_OFFLOAD, 0, 6, 6);
	assert_int_equal(lookup(lk, pg, 6, NULL), 6);
	assert_int_equal(lookup(lk, pg, 8, NULL), 6);
	assert_int_equal(lookup(lk, pg, 3, NULL), 3);

	/* One store exists call per lookup: every (page, pool) asked counts
	 * once as a hit or a miss. */
	kvl_store_stats a, b;
	assert_int_equal(kvl_store_stats_get(s, &a), KVL_OK);
	assert_int_equal(lookup(lk, pg, 8, NULL), 6);
	assert_int_equal(kvl_store_stats_get(s, &b), KVL_OK);
	assert_int_equal((b.hits + b.misses) - (a.hits + a.misses), 8 * 2);
	assert_int_equal(b.hits - a.hits, 6 * 2);

	/* ALL_PAGES: a hole in the middle ends the prefix. */
	remove_page(s, &h, h.kv, &pg[2]);
	assert_int_equal(lookup(lk, pg, 8, NULL), 2);
	remove_page(s, &h, h.kv, &pg[0]);
	assert_int_equal(lookup(lk, pg, 8, NULL), 0);

	kvl_linker_close(lk);
	kvl_store_close(s);
	host_free(&h);
}

/* Stores `kv` pages of pool kv and the swa pages flagged in swa_at. */
static void store_pattern(kvl_linker *lk, host *h, const kvl_hash *pg,
                          size_t n, const uint8_t *swa_at, uint64_t id)
{
	req r;
	req_init(&r, pg, n);
	req_pool(&r, h->kv, 0, 0);
	req_pool(&r, h->swa, 0, 0);
	for (size_t i = 0; i < n; i++)
		if (!swa_at[i])
			r.slot[h->swa][i] = KVL_NO_SLOT;
	fill_req(h, &r);
	expect_completion((kvl_completion[]){offload_sync(lk, id, &r)},
	                  KVL_REQ_OFFLOAD, 0, n, n);
}

static void test_lookup_trailing(void **state)
{
	(void)state;
	/* The documented example with a window of 1: kv on pages 0..3, swa
	 * on pages 1 and 3 → {0, 2, 4} → 4; without swa page 3 → 2. */
	hcfg c1 = {.swa = 1, .swa_window = 1};
	host h;
	host_init(&h, &c1);
	kvl_store *s = open_ok(STORE_URI);
	kvl_linker *lk = open_lk(&h, s, NULL);
	kvl_hash pg[6];
	make_pages(pg, 6, 3);
	store_pattern(lk, &h, pg, 4, (const uint8_t[]){0, 1, 0, 1}, 1);
	assert_int_equal(lookup(lk, pg, 4, NULL), 4);
	assert_int_equal(lookup(lk, pg, 3, NULL), 2);
	remove_page(s, &h, h.swa, &pg[3]);
	assert_int_equal(lookup(lk, pg, 4, NULL), 2);
	kvl_linker_close(lk);
	kvl_store_close(s);
	host_free(&h);

	/* Window 2: kv on pages 0..5, swa on 1, 2, 4, 5 → {0, 3, 6}. */
	hcfg c2 = {.swa = 1, .swa_window = 2};
	host_init(&h, &c2);
	s = open_ok(STORE_URI);
	lk = open_lk(&h, s, NULL);
	store_pattern(lk, &h, pg, 6, (const uint8_t[]){0, 1, 1, 0, 1, 1}, 1);
	assert_int_equal(lookup(lk, pg, 6, NULL), 6);
	assert_int_equal(lookup(lk, pg, 5, NULL), 3);
	assert_int_equal(lookup(lk, pg, 4, NULL), 3);
	assert_int_equal(lookup(lk, pg, 2, NULL), 0);

	/* pool_pages: swa asked only for pages 4, 5 → 6 (kv all present). */
	const uint8_t tail[6] = {0, 0, 0, 0, 1, 1};
	const uint8_t *pp1[2] = {NULL, tail};
	pp1[h.kv] = NULL;
	pp1[h.swa] = tail;
	assert_int_equal(lookup(lk, pg, 6, pp1), 6);
	/* swa asked for pages 0..3 only: 4, 5 count as absent → 3. */
	const uint8_t head[6] = {1, 1, 1, 1, 0, 0};
	const uint8_t *pp2[2];
	pp2[h.kv] = NULL;
	pp2[h.swa] = head;
	assert_int_equal(lookup(lk, pg, 6, pp2), 3);
	/* kv asked for pages 0..2 only → kv allows 1..3; swa → 3. */
	const uint8_t kv3[6] = {1, 1, 1, 0, 0, 0};
	const uint8_t *pp3[2];
	pp3[h.kv] = kv3;
	pp3[h.swa] = NULL;
	assert_int_equal(lookup(lk, pg, 6, pp3), 3);
	/* swa with no flag does not constrain: kv's 6 even where swa has
	 * holes; and the store is asked only the flagged items. */
	const uint8_t none[6] = {0};
	const uint8_t *pp4[2];
	pp4[h.kv] = NULL;
	pp4[h.swa] = none;
	kvl_store_stats a, b;
	assert_int_equal(kvl_store_stats_get(s, &a), KVL_OK);
	assert_int_equal(lookup(lk, pg, 6, pp4), 6);
	assert_int_equal(lookup(lk, pg, 6, pp1), 6);
	assert_int_equal(kvl_store_stats_get(s, &b), KVL_OK);
	assert_int_equal((b.hits + b.misses) - (a.hits + a.misses),
	                 6 + (6 + 2));

	/* Holes: without swa page 5 → 3; without swa page 2 too → 0. */
	remove_page(s, &h, h.swa, &pg[5]);
	assert_int_equal(lookup(lk, pg, 6, NULL), 3);
	remove_page(s, &h, h.swa, &pg[2]);
	assert_int_equal(lookup(lk, pg, 6, NULL), 0);
	assert_int_equal(lookup(lk, pg, 6, pp4), 6);

	kvl_linker_close(lk);
	kvl_store_close(s);
	host_free(&h);
}

/* kvl_linker_lookup_set: this rank's whole set, with its holes, and no
 * all-reduce; the empty prefix on a store failure; bad arguments. */
static void test_lookup_set(void **state)
{
	(void)state;
	/* A group of 2 whose peer never comes: lookup_set must not call it. */
	kvl_rank_group *g = NULL;
	assert_int_equal(kvl_rank_group_create(2, 100, &g), KVL_OK);
	kvl_linker_opts o = {.struct_size = sizeof o};
	o.allreduce = kvl_rank_group_allreduce;
	o.allreduce_user = g;
	hcfg cfg = {.swa = 1, .swa_window = 2};
	host h;
	host_init(&h, &cfg);
	kvl_store *s = open_ok(store_uri(fault_store_ok() ? "fault+" : "", NULL));
	kvl_linker *lk = open_lk(&h, s, &o);
	kvl_hash pg[70];
	make_pages(pg, 6, 31);
	for (size_t i = 6; i < 70; i++) /* never stored */
		memset(pg[i].bytes, (int)i, sizeof pg[i].bytes);
	/* kv on pages 0..5, swa on 1, 2, 4, 5 → {0, 3, 6}. */
	store_pattern(lk, &h, pg, 6, (const uint8_t[]){0, 1, 1, 0, 1, 1}, 1);
	uint64_t bits[3] = {~0ull, ~0ull, ~0ull};
	ASSERT_RC(lk, kvl_linker_lookup_set(lk, pg, 6, NULL, bits, 1), KVL_OK);
	assert_int_equal(bits[0], (1u << 0) | (1u << 3) | (1u << 6));
	assert_int_equal(bits[1], ~0ull); /* beyond the words asked */
	/* 70 pages need two words; the second is cleared. */
	ASSERT_RC(lk, kvl_linker_lookup_set(lk, pg, 70, NULL, bits, 3),
	          KVL_OK);
	assert_int_equal(bits[0], (1u << 0) | (1u << 3) | (1u << 6));
	assert_int_equal(bits[1], 0);
	assert_int_equal(bits[2], ~0ull);
	/* pool_pages as in kvl_linker_lookup. */
	const uint8_t head[6] = {1, 1, 1, 1, 0, 0};
	const uint8_t *pp[2];
	pp[h.kv] = NULL;
	pp[h.swa] = head;
	ASSERT_RC(lk, kvl_linker_lookup_set(lk, pg, 6, pp, bits, 1), KVL_OK);
	assert_int_equal(bits[0], (1u << 0) | (1u << 3));
	/* n_pages 0: the empty prefix (pages may be NULL). */
	bits[0] = ~0ull;
	ASSERT_RC(lk, kvl_linker_lookup_set(lk, NULL, 0, NULL, bits, 1),
	          KVL_OK);
	assert_int_equal(bits[0], 1);

	/* Bad arguments. */
	bits[0] = 42;
	ASSERT_FAILS(lk, kvl_linker_lookup_set(lk, pg, 70, NULL, bits, 1),
	             KVL_ERANGE, "bitmap words");
	assert_int_equal(bits[0], 42); /* nothing written */
	ASSERT_FAILS(lk, kvl_linker_lookup_set(lk, pg, 6, NULL, NULL, 1),
	             KVL_EINVAL, "bits is NULL");
	ASSERT_FAILS(lk, kvl_linker_lookup_set(lk, NULL, 6, NULL, bits, 1),
	             KVL_EINVAL, "pages is NULL");
	assert_int_equal(bits[0], 1);
	const uint8_t none[6] = {0};
	const uint8_t *pn[2] = {none, none};
	ASSERT_FAILS(lk, kvl_linker_lookup_set(lk, pg, 6, pn, bits, 1),
	             KVL_EINVAL, "asks for no page");
	assert_int_equal(kvl_linker_lookup_set(NULL, pg, 6, NULL, bits, 1),
	                 KVL_EINVAL);

	/* A store that cannot answer: KVL_EIO and only the empty prefix. */
	if (fault_store_ok()) {
		fault_down(s, 1);
		bits[0] = ~0ull;
		ASSERT_RC(lk, kvl_linker_lookup_set(lk, pg, 6, NULL, bits, 1),
		          KVL_EIO);
		assert_int_equal(bits[0], 1);
		fault_down(s, 0);
		ASSERT_RC(lk, kvl_linker_lookup_set(lk, pg, 6, NULL, bits, 1),
		          KVL_OK);
		assert_int_equal(bits[0], (1u << 0) | (1u << 3) | (1u << 6));
	}
	kvl_linker_close(lk);
	kvl_store_close(s);
	host_free(&h);
	kvl_rank_group_free(g);
}

static void test_lookup_namespace(void **state)
{
	(void)state;
	host src, dst;
	host_init(&src, NULL);
	host_init(&dst, NULL);
	kvl_store *s = open_ok(STORE_URI);
	kvl_linker *lk = open_lk(&src, s, NULL);
	/* The same prompt hashed bare and in two tenants' namespaces. */
	kvl_hash na = make_seed("tenant-a"), nb = make_seed("tenant-b");
	kvl_hash pg[5], pa[5], pb[5];
	make_pages(pg, 5, 4);
	make_pages_in(pa, 5, 4, &na);
	make_pages_in(pb, 5, 4, &nb);

	req r;
	req_init(&r, pa, 5);
	req_pool(&r, src.kv, 3, 0);
	fill_req(&src, &r);
	expect_completion((kvl_completion[]){offload_sync(lk, 1, &r)},
	                  KVL_REQ_OFFLOAD, 0, 5, 5);
	assert_int_equal(lookup(lk, pb, 5, NULL), 0);
	assert_int_equal(lookup(lk, pg, 5, NULL), 0);
	assert_int_equal(lookup(lk, pa, 5, NULL), 5);
	assert_int_equal(page_present(s, &src, src.kv, &pa[1]), 1);
	assert_int_equal(page_present(s, &src, src.kv, &pg[1]), 0);

	/* Loads find the pages only in the same namespace. */
	kvl_linker *ld = open_lk(&dst, s, NULL);
	req d;
	req_init(&d, pb, 5);
	req_pool(&d, dst.kv, 8, 0);
	kvl_completion c = load_sync(ld, 10, &d, NULL);
	expect_completion(&c, KVL_REQ_LOAD, KVL_ENOTFOUND, 0, 5);
	req_init(&d, pa, 5);
	req_pool(&d, dst.kv, 8, 0);
	c = load_sync(ld, 11, &d, NULL);
	expect_completion(&c, KVL_REQ_LOAD, 0, 5, 5);
	check_req(&dst, &d, 5, N_LAYERS);

	kvl_linker_close(ld);
	kvl_linker_close(lk);
	kvl_store_close(s);
	host_free(&dst);
	host_free(&src);
}

/* ------------------------------------------------------ ranks as threads */

typedef struct rank_arg {
	kvl_linker *lk;
	const kvl_hash *pages;
	size_t n;
	size_t prefix;
	int rc;
} rank_arg;

static void *rank_main(void *p)
{
	rank_arg *a = p;
	a->rc = kvl_linker_lookup(a->lk, a->pages, a->n, NULL,
	                          &a->prefix);
	return NULL;
}

/* Every rank looks up pg[n] at once; each must get `want`. */
static void ranks_lookup(kvl_linker **lks, unsigned n_ranks,
                         const kvl_hash *pg, size_t n, size_t want)
{
	pthread_t t[8];
	rank_arg a[8];
	for (unsigned r = 0; r < n_ranks; r++) {
		a[r] = (rank_arg){.lk = lks[r], .pages = pg, .n = n,
		                  .prefix = 999, .rc = -100};
		assert_int_equal(pthread_create(&t[r], NULL, rank_main, &a[r]),
		                 0);
	}
	for (unsigned r = 0; r < n_ranks; r++)
		assert_int_equal(pthread_join(t[r], NULL), 0);
	for (unsigned r = 0; r < n_ranks; r++) {
		if (a[r].rc || a[r].prefix != want)
			print_error("rank %u of %u: rc %s prefix %zu, want "
			            "%zu\n",
			            r, n_ranks, kvl_err_name(a[r].rc),
			            a[r].prefix, want);
		assert_int_equal(a[r].rc, KVL_OK);
		assert_int_equal(a[r].prefix, want);
	}
}

static void run_ranks(unsigned n_ranks)
{
	host h[8];
	kvl_linker *lks[8];
	kvl_store *s = open_ok(STORE_URI);
	kvl_rank_group *g = NULL;
	assert_int_equal(kvl_rank_group_create(n_ranks, 10000, &g), KVL_OK);
	kvl_hash pg[8];
	make_pages(pg, 8, 5);
	for (unsigned r = 0; r < n_ranks; r++) {
		hcfg cfg = {.mla = 1,
		            .shard = {r, n_ranks, 0, 1, 0, 1}};
		host_init(&h[r], &cfg);
		kvl_linker_opts o = {.struct_size = sizeof o};
		o.allreduce = kvl_rank_group_allreduce;
		o.allreduce_user = g;
		lks[r] = open_lk(&h[r], s, &o);
	}
	/* Every rank offloads its shard of pages 0..7. */
	for (unsigned r = 0; r < n_ranks; r++) {
		req q;
		req_init(&q, pg, 8);
		req_pool(&q, h[r].kv, 0, 0);
		req_pool(&q, h[r].mla, 0, 0);
		fill_req(&h[r], &q);
		kvl_completion c = offload_sync(lks[r], 100 + r, &q);
		expect_completion(&c, KVL_REQ_OFFLOAD, 0, 8, 8);
	}
	ranks_lookup(lks, n_ranks, pg, 8, 8);
	/* The last rank lacks page 5 of its kv shard: everyone gets 5. */
	remove_page(s, &h[n_ranks - 1], h[n_ranks - 1].kv, &pg[5]);
	ranks_lookup(lks, n_ranks, pg, 8, 5);
	/* Rank 1 lacks page 3: everyone gets 3. */
	remove_page(s, &h[1], h[1].kv, &pg[3]);
	ranks_lookup(lks, n_ranks, pg, 8, 3);
	/* The replicated pool is shared: without its page 1 → 1. */
	remove_page(s, &h[0], h[0].mla, &pg[1]);
	ranks_lookup(lks, n_ranks, pg, 8, 1);

	for (unsigned r = 0; r < n_ranks; r++) {
		kvl_linker_close(lks[r]);
		host_free(&h[r]);
	}
	kvl_rank_group_free(g);
	kvl_store_close(s);
}

static void test_lookup_ranks(void **state)
{
	(void)state;
	run_ranks(2);
	run_ranks(4);

	/* A rank whose peer never comes: the all-reduce's error is the
	 * lookup's, and the broken group keeps failing (ESTATE). */
	host h;
	host_init(&h, NULL);
	kvl_store *s = open_ok(STORE_URI);
	kvl_rank_group *g = NULL;
	assert_int_equal(kvl_rank_group_create(2, 100, &g), KVL_OK);
	kvl_linker_opts o = {.struct_size = sizeof o};
	o.allreduce = kvl_rank_group_allreduce;
	o.allreduce_user = g;
	kvl_linker *lk = open_lk(&h, s, &o);
	kvl_hash pg[2];
	make_pages(pg, 2, 25);
	size_t prefix = 99;
	ASSERT_RC(lk, kvl_linker_lookup(lk, pg, 2, NULL, &prefix),
	          KVL_ETIMEDOUT);
	ASSERT_CONTAINS(kvl_linker_errmsg(lk), "all-reduce");
	ASSERT_RC(lk, kvl_linker_lookup(lk, pg, 2, NULL, &prefix),
	          KVL_ESTATE);
	kvl_linker_close(lk);
	kvl_rank_group_free(g);
	kvl_store_close(s);
	host_free(&h);
}

/* One rank's store is down during a lookup across 2 ranks: that rank gets
 * its error, the other gets prefix 0, and nobody waits for the group's
 * timeout. */
static void test_lookup_rank_down(void **state)
{
	(void)state;
	NEED_FAULT_STORE();
	kvl_rank_group *g = NULL;
	assert_int_equal(kvl_rank_group_create(2, 10000, &g), KVL_OK);
	host h[2];
	kvl_store *s[2];
	kvl_linker *lks[2];
	kvl_hash pg[4];
	make_pages(pg, 4, 21);
	for (unsigned r = 0; r < 2; r++) {
		hcfg cfg = {.shard = {r, 2, 0, 1, 0, 1}};
		host_init(&h[r], &cfg);
		s[r] = open_ok(store_uri("fault+", NULL));
		kvl_linker_opts o = {.struct_size = sizeof o};
		o.allreduce = kvl_rank_group_allreduce;
		o.allreduce_user = g;
		lks[r] = open_lk(&h[r], s[r], &o);
		req q;
		req_init(&q, pg, 4);
		req_pool(&q, h[r].kv, 0, 0);
		fill_req(&h[r], &q);
		kvl_completion c = offload_sync(lks[r], 1, &q);
		expect_completion(&c, KVL_REQ_OFFLOAD, 0, 4, 4);
	}
	ranks_lookup(lks, 2, pg, 4, 4);
	fault_down(s[1], 1);
	pthread_t t[2];
	rank_arg a[2];
	uint64_t t0 = now_ms();
	for (unsigned r = 0; r < 2; r++) {
		a[r] = (rank_arg){.lk = lks[r], .pages = pg, .n = 4,
		                  .prefix = 999, .rc = -100};
		assert_int_equal(pthread_create(&t[r], NULL, rank_main, &a[r]),
		                 0);
	}
	for (unsigned r = 0; r < 2; r++)
		assert_int_equal(pthread_join(t[r], NULL), 0);
	ASSERT_TRUE_MSG(now_ms() - t0 < HANG_MS, "ranks' lookups hung");
	assert_int_equal(a[0].rc, KVL_OK);
	assert_int_equal(a[0].prefix, 0);
	assert_int_equal(a[1].rc, KVL_EIO);
	/* The group is still in step. */
	fault_down(s[1], 0);
	ranks_lookup(lks, 2, pg, 4, 4);
	for (unsigned r = 0; r < 2; r++) {
		kvl_linker_close(lks[r]);
		kvl_store_close(s[r]);
		host_free(&h[r]);
	}
	kvl_rank_group_free(g);
}

/* ================================================================ prober */

/* The set lk can restore of pg[0..n) (this rank's), as a bitmap word. */
static uint64_t rank_set(kvl_linker *lk, const kvl_hash *pg, size_t n)
{
	uint64_t bits = 0;
	ASSERT_RC(lk, kvl_linker_lookup_set(lk, pg, n, NULL, &bits, 1),
	          KVL_OK);
	return bits;
}

static uint64_t prober_set(kvl_prober *pr, const kvl_hash *pg, size_t n)
{
	uint64_t bits = 0;
	ASSERT_RC(pr, kvl_prober_lookup_set(pr, pg, n, &bits, 1), KVL_OK);
	return bits;
}

/* Two tp ranks with kv, swa and a replicated mla pool store their pages;
 * a prober over a layout of sizes only answers what both can restore:
 * the intersection of the ranks' own sets, as holes appear on either. */
static void test_prober_ranks(void **state)
{
	(void)state;
	kvl_store *s = open_ok(STORE_URI);
	host h[2];
	kvl_linker *lk[2];
	kvl_hash pg[6];
	make_pages(pg, 6, 41);
	for (unsigned r = 0; r < 2; r++) {
		hcfg cfg = {.swa = 1, .mla = 1, .shard = {r, 2, 0, 1, 0, 1}};
		host_init(&h[r], &cfg);
		lk[r] = open_lk(&h[r], s, NULL);
		req q;
		req_init(&q, pg, 6);
		req_pool(&q, h[r].kv, 0, 0);
		req_pool(&q, h[r].swa, 0, 0);
		req_pool(&q, h[r].mla, 0, 0);
		fill_req(&h[r], &q);
		expect_completion((kvl_completion[]){offload_sync(lk[r], 1, &q)},
		                  KVL_REQ_OFFLOAD, 0, 6, 6);
	}
	/* The prober's layout: sizes only, its tp rank does not matter. */
	host shp;
	hcfg scfg = {.swa = 1, .mla = 1, .shard = {1, 2, 0, 1, 0, 1},
	             .shapes = 1};
	host_init(&shp, &scfg);
	const kvl_layout *stages[1] = {shp.l};
	kvl_prober *pr = NULL;
	char err[256] = "";
	ASSERT_RC(err, kvl_prober_open(s, stages, 1, &pr, err, sizeof err),
	          KVL_OK);
	size_t prefix = 99;
	ASSERT_RC(pr, kvl_prober_lookup(pr, pg, 6, &prefix), KVL_OK);
	assert_int_equal(prefix, 6);
	/* Holes: rank 1's kv page 4; rank 0's (the only) mla page 3; rank
	 * 1's swa page 1 (window 2: prefix 1 still needs only page 0). */
	const struct {
		unsigned rank;
		int pool;
		size_t page;
		uint64_t want;
	} holes[] = {{1, 0, 4, 0x1f}, {0, 2, 3, 0x0f}, {1, 1, 1, 0x03}};
	for (size_t i = 0; i < 3; i++) {
		host *hr = &h[holes[i].rank];
		int pool = holes[i].pool == 0 ? hr->kv
		           : holes[i].pool == 1 ? hr->swa
		                                : hr->mla;
		remove_page(s, hr, pool, &pg[holes[i].page]);
		uint64_t both = rank_set(lk[0], pg, 6) & rank_set(lk[1], pg, 6);
		assert_int_equal(prober_set(pr, pg, 6), both);
		assert_int_equal(both, holes[i].want);
	}
	ASSERT_RC(pr, kvl_prober_lookup(pr, pg, 6, &prefix), KVL_OK);
	assert_int_equal(prefix, 1);

	/* Any rank's keys from one layout. */
	char want[KVL_KEY_MAX], got[KVL_KEY_MAX];
	kvl_shard r1 = {1, 2, 0, 1, 0, 1}, r0 = {0, 2, 0, 1, 0, 1};
	assert_int_equal(kvl_layout_key(h[1].l, h[1].kv, &pg[0], want,
	                                sizeof want),
	                 KVL_OK);
	ASSERT_RC(shp.l, kvl_layout_shard_key(shp.l, shp.kv, &r1, &pg[0], got,
	                                      sizeof got),
	          KVL_OK);
	assert_string_equal(got, want);
	ASSERT_RC(h[1].l, kvl_layout_shard_key(h[1].l, h[1].kv, &r0, &pg[0],
	                                       got, sizeof got),
	          KVL_OK);
	assert_int_equal(kvl_layout_key(h[0].l, h[0].kv, &pg[0], want,
	                                sizeof want),
	                 KVL_OK);
	assert_string_equal(got, want);
	kvl_shard other = {0, 4, 0, 1, 0, 1}, beyond = {2, 2, 0, 1, 0, 1};
	ASSERT_FAILS(shp.l, kvl_layout_shard_key(shp.l, shp.kv, &other,
	                                         &pg[0], got, sizeof got),
	             KVL_EINVAL, "not one of this layout's");
	ASSERT_FAILS(shp.l, kvl_layout_shard_key(shp.l, shp.kv, &beyond,
	                                         &pg[0], got, sizeof got),
	             KVL_EINVAL, "not one of this layout's");
	ASSERT_FAILS(shp.l, kvl_layout_shard_key(shp.l, shp.kv, &r1, &pg[0],
	                                         got, 10),
	             KVL_ERANGE, "buflen");
	ASSERT_FAILS(shp.l, kvl_layout_shard_key(shp.l, shp.kv, NULL, &pg[0],
	                                         got, sizeof got),
	             KVL_EINVAL, "NULL");
	kvl_prober_close(pr);
	for (unsigned r = 0; r < 2; r++) {
		kvl_linker_close(lk[r]);
		host_free(&h[r]);
	}
	host_free(&shp);
	kvl_store_close(s);
}

/* Two pipeline stages: one layout each; a page missing on either stage
 * ends the prefix. */
static void test_prober_stages(void **state)
{
	(void)state;
	kvl_store *s = open_ok(STORE_URI);
	host h[2], shp[2];
	kvl_linker *lk[2];
	kvl_hash pg[5];
	make_pages(pg, 5, 43);
	const kvl_layout *stages[2];
	for (unsigned st = 0; st < 2; st++) {
		hcfg cfg = {.shard = {0, 1, 0, 1, st, 2}};
		host_init(&h[st], &cfg);
		lk[st] = open_lk(&h[st], s, NULL);
		req q;
		req_init(&q, pg, 5);
		req_pool(&q, h[st].kv, 0, 0);
		fill_req(&h[st], &q);
		expect_completion((kvl_completion[]){offload_sync(lk[st], 1,
		                                                  &q)},
		                  KVL_REQ_OFFLOAD, 0, 5, 5);
		cfg.shapes = 1;
		host_init(&shp[st], &cfg);
		stages[1 - st] = shp[st].l; /* any order */
	}
	kvl_prober *pr = NULL;
	char err[256] = "";
	ASSERT_RC(err, kvl_prober_open(s, stages, 2, &pr, err, sizeof err),
	          KVL_OK);
	size_t prefix = 0;
	ASSERT_RC(pr, kvl_prober_lookup(pr, pg, 5, &prefix), KVL_OK);
	assert_int_equal(prefix, 5);
	remove_page(s, &h[1], h[1].kv, &pg[3]);
	ASSERT_RC(pr, kvl_prober_lookup(pr, pg, 5, &prefix), KVL_OK);
	assert_int_equal(prefix, 3);
	remove_page(s, &h[0], h[0].kv, &pg[1]);
	ASSERT_RC(pr, kvl_prober_lookup(pr, pg, 5, &prefix), KVL_OK);
	assert_int_equal(prefix, 1);
	/* n_pages 0: the empty prefix (pages may be NULL). */
	ASSERT_RC(pr, kvl_prober_lookup(pr, NULL, 0, &prefix), KVL_OK);
	assert_int_equal(prefix, 0);

	/* Bad stage lists. */
	const kvl_layout *one[1] = {shp[0].l};
	const kvl_layout *twice[2] = {shp[0].l, shp[0].l};
	const kvl_layout *mixed[2] = {shp[0].l, h[0].l};
	kvl_prober *bad = NULL;
	ASSERT_FAILS(err, kvl_prober_open(s, one, 1, &bad, err, sizeof err),
	             KVL_EINVAL, "one per stage");
	ASSERT_FAILS(err, kvl_prober_open(s, twice, 2, &bad, err, sizeof err),
	             KVL_EINVAL, "two layouts of pipeline stage 0");
	ASSERT_FAILS(err, kvl_prober_open(s, NULL, 0, &bad, err, sizeof err),
	             KVL_EINVAL, "no layouts");
	ASSERT_FAILS(err, kvl_prober_open(NULL, one, 1, &bad, err, sizeof err),
	             KVL_EINVAL, "NULL");
	assert_null(bad);
	/* A layout with memory is described just as well (only sizes are
	 * read): stage 0 with memory, stage 1 of sizes. */
	mixed[0] = h[0].l;
	mixed[1] = shp[1].l;
	ASSERT_RC(err, kvl_prober_open(s, mixed, 2, &bad, err, sizeof err),
	          KVL_OK);
	ASSERT_RC(bad, kvl_prober_lookup(bad, pg, 5, &prefix), KVL_OK);
	assert_int_equal(prefix, 1);
	kvl_prober_close(bad);
	kvl_prober_close(pr);
	for (unsigned st = 0; st < 2; st++) {
		kvl_linker_close(lk[st]);
		host_free(&h[st]);
		host_free(&shp[st]);
	}
	kvl_store_close(s);
}

/* A prober's failures: a store that cannot answer is not a miss; bad
 * arguments. */
static void test_prober_failures(void **state)
{
	(void)state;
	NEED_FAULT_STORE();
	kvl_store *s = open_ok(store_uri("fault+", NULL));
	host shp;
	hcfg cfg = {.shapes = 1};
	host_init(&shp, &cfg);
	const kvl_layout *stages[1] = {shp.l};
	kvl_prober *pr = NULL;
	char err[256] = "";
	ASSERT_RC(err, kvl_prober_open(s, stages, 1, &pr, err, sizeof err),
	          KVL_OK);
	kvl_hash pg[70];
	make_pages(pg, 4, 44);
	for (size_t i = 4; i < 70; i++)
		memset(pg[i].bytes, (int)i, sizeof pg[i].bytes);
	uint64_t bits[2] = {42, 42};
	size_t prefix = 9;
	fault_down(s, 1);
	ASSERT_FAILS(pr, kvl_prober_lookup_set(pr, pg, 4, bits, 2), KVL_EIO,
	             "store");
	assert_int_equal(bits[0], 1);
	ASSERT_FAILS(pr, kvl_prober_lookup(pr, pg, 4, &prefix), KVL_EIO,
	             "store");
	assert_int_equal(prefix, 0);
	fault_down(s, 0);
	bits[0] = 42;
	ASSERT_FAILS(pr, kvl_prober_lookup_set(pr, pg, 70, bits, 1),
	             KVL_ERANGE, "bitmap words");
	assert_int_equal(bits[0], 42);
	ASSERT_RC(pr, kvl_prober_lookup_set(pr, pg, 70, bits, 2), KVL_OK);
	assert_int_equal(bits[0], 1);
	assert_int_equal(bits[1], 0);
	ASSERT_FAILS(pr, kvl_prober_lookup_set(pr, pg, 4, NULL, 1), KVL_EINVAL,
	             "bits is NULL");
	ASSERT_FAILS(pr, kvl_prober_lookup_set(pr, NULL, 4, bits, 1),
	             KVL_EINVAL, "pages is NULL");
	ASSERT_FAILS(pr, kvl_prober_lookup(pr, pg, 4, NULL), KVL_EINVAL,
	             "prefix_out");
	assert_int_equal(kvl_prober_lookup(NULL, pg, 4, &prefix), KVL_EINVAL);
	assert_string_equal(kvl_prober_errmsg(NULL), "prober is NULL");
	kvl_prober_close(pr);
	kvl_prober_close(NULL);
	/* No linker, and no page I/O, over a layout of sizes only. */
	kvl_linker *lk = NULL;
	ASSERT_FAILS(err, kvl_linker_open(s, shp.l, NULL, &lk, err,
	                                  sizeof err),
	             KVL_EINVAL, "sizes only");
	assert_null(lk);
	size_t slot = 0;
	int res = 0;
	ASSERT_FAILS(s, kvl_pages_put(s, shp.l, shp.kv, pg, &slot, 1, &res),
	             KVL_EINVAL, "sizes only");
	ASSERT_FAILS(s, kvl_pages_get(s, shp.l, shp.kv, pg, &slot, 1,
	                              KVL_ALL_LAYERS, &res),
	             KVL_EINVAL, "sizes only");
	assert_int_equal(kvl_pages_exists(s, shp.l, shp.kv, pg, 1, &res),
	                 KVL_OK);
	host_free(&shp);
	kvl_store_close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_lookup_basic, next_test),
		cmocka_unit_test_setup(test_lookup_trailing, next_test),
		cmocka_unit_test_setup(test_lookup_set, next_test),
		cmocka_unit_test_setup(test_lookup_namespace, next_test),
		cmocka_unit_test_setup(test_lookup_ranks, next_test),
		cmocka_unit_test_setup(test_lookup_rank_down, next_test),
		cmocka_unit_test_setup(test_prober_ranks, next_test),
		cmocka_unit_test_setup(test_prober_stages, next_test),
		cmocka_unit_test_setup(test_prober_failures, next_test),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
