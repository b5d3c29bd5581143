/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_evict.c — the embedded store's eviction policies and their ghost
 * list: the store options policy= and max_objects=, the segmented LRU
 * (probation, protected, its 90 % share, demotion, the ghost's promotion),
 * exact LRU under max_objects, and kvl__ghost against a reference model
 * under random operations.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/kvl_assert.h"
#include "support/stores.h"

#include "store/evict.h"
#include "store/shadow.h"
#include "kvlink.h"

/* ------------------------------------------------------------ helpers */

/* The objects of these tests: the 100 bytes of payload each (the key and
 * 64 bytes of bookkeeping make up their accounted size), read back 8 bytes
 * at a time. */
static uint8_t payload[100];

static int put_obj(kvl_store *s, const char *key)
{
	return put1(s, key, payload, sizeof payload);
}

static int64_t get_obj(kvl_store *s, const char *key)
{
	uint8_t d[8];
	return get1(s, key, 0, d, sizeof d);
}

/* Asserts which of the one-letter keys in `all` are present: `present`
 * lists them. exists touches, so this is for the end of a test. */
static void expect_present(kvl_store *s, const char *all, const char *present)
{
	for (const char *k = all; *k; k++) {
		char key[2] = {*k, 0};
		int want = strchr(present, *k) != NULL;
		if (exists1(s, key) != want)
			fail_msg("key %s is %s, expected %s", key,
			         want ? "absent" : "present",
			         want ? "present" : "absent");
	}
}

/* ------------------------------------------------------------ options */

static void test_options(void **state)
{
	(void)state;
	kvl_store_close(open_ok("mem:?policy=lru"));
	kvl_store_close(open_ok("mem:?policy=slru&max_objects=3"));
	kvl_store_close(open_ok("mem:?max_objects=1"));
	open_fails("mem:?policy=lfu", KVL_EPARSE, "policy=lfu");
	open_fails("mem:?policy=LRU", KVL_EPARSE, "unknown eviction policy");
	open_fails("mem:?max_objects=0", KVL_EPARSE, "max_objects=0");
	open_fails("mem:?max_objects=many", KVL_EPARSE, "max_objects=many");
	open_fails("mem:?max_objects=-1", KVL_EPARSE, "max_objects=-1");
	kvl_store_close(open_ok("mem:?policy=adaptive&capacity=1MiB"));
	assert_string_equal(kvl_mem_policy_name(0), "adaptive");
	assert_string_equal(kvl_mem_policy_name(1), "slru");
	assert_string_equal(kvl_mem_policy_name(2), "lru");
	assert_null(kvl_mem_policy_name(3));
}

/* ------------------------------------------------------------------ lru */

/* max_objects bounds the count exactly, whatever the byte capacity. */
static void test_lru_max_objects(void **state)
{
	(void)state;
	kvl_store *s = open_ok("mem:?policy=lru&max_objects=3");
	ASSERT_EQ(put_obj(s, "a"), KVL_PUT_STORED);
	ASSERT_EQ(put_obj(s, "b"), KVL_PUT_STORED);
	ASSERT_EQ(put_obj(s, "c"), KVL_PUT_STORED);
	ASSERT_EQ(exists1(s, "a"), 1);     /* LRU order: b c a */
	ASSERT_EQ(put_obj(s, "d"), KVL_PUT_STORED); /* evicts b */
	ASSERT_EQ(put_obj(s, "c"), KVL_PUT_PRESENT); /* no touch */
	ASSERT_EQ(put_obj(s, "e"), KVL_PUT_STORED); /* evicts c */
	kvl_store_stats st = store_stats(s);
	ASSERT_EQ(st.objects, 3);
	ASSERT_EQ(st.evictions, 2);
	expect_present(s, "abcde", "ade");
	kvl_store_close(s);
}

/* ----------------------------------------------------------------- slru */

/* A hit (exists or get) promotes to protected; new objects evict each
 * other on probation. */
static void test_slru_promotion(void **state)
{
	(void)state;
	kvl_store *s = open_ok("mem:?policy=slru&max_objects=4");
	put_obj(s, "a");
	put_obj(s, "b");
	put_obj(s, "c");
	ASSERT_EQ(exists1(s, "a"), 1); /* a → protected */
	ASSERT_EQ(get_obj(s, "b"), 8); /* b → protected */
	/* Probation: c. Protected: b a. */
	put_obj(s, "d");                /* 4 objects */
	put_obj(s, "e");                /* evicts c */
	put_obj(s, "f");                /* evicts d */
	put_obj(s, "g");                /* evicts e */
	ASSERT_EQ(store_stats(s).evictions, 3);
	expect_present(s, "abcdefg", "abfg");
	kvl_store_close(s);
}

/* The protected list holds at most max_objects - max_objects / 10: beyond
 * that its tail is demoted to the probation head. */
static void test_slru_demotion_count(void **state)
{
	(void)state;
	kvl_store *s = open_ok("mem:?policy=slru&max_objects=10");
	const char *keys = "abcdefghij";
	for (const char *k = keys; *k; k++) {
		char key[2] = {*k, 0};
		put_obj(s, key);
	}
	/* Promote all ten in order: the tenth demotes a (protected holds
	 * 9), which is then alone on probation. */
	for (const char *k = keys; *k; k++) {
		char key[2] = {*k, 0};
		ASSERT_EQ(exists1(s, key), 1);
	}
	put_obj(s, "x"); /* evicts a */
	put_obj(s, "y"); /* evicts x: probation's tail */
	ASSERT_EQ(store_stats(s).evictions, 2);
	expect_present(s, "abcdefghijxy", "bcdefghijy");
	kvl_store_close(s);
}

/* The same share in bytes when only the byte capacity limits: objects of
 * 100 + 1 + 64 bytes, capacity for 10, protected at most 9. */
static void test_slru_demotion_bytes(void **state)
{
	(void)state;
	kvl_store *s = open_ok("mem:?policy=slru&capacity=1650");
	const char *keys = "abcdefghij";
	for (const char *k = keys; *k; k++) {
		char key[2] = {*k, 0};
		put_obj(s, key);
	}
	ASSERT_EQ(store_stats(s).objects, 10);
	for (const char *k = keys; *k; k++) {
		char key[2] = {*k, 0};
		ASSERT_EQ(exists1(s, key), 1);
	}
	put_obj(s, "x"); /* evicts a, demoted when j was promoted */
	ASSERT_EQ(store_stats(s).evictions, 1);
	expect_present(s, "abcdefghijx", "bcdefghijx");
	kvl_store_close(s);
}

/* An object evicted from probation and stored again while the ghost
 * remembers it goes straight to protected. */
static void test_slru_ghost(void **state)
{
	(void)state;
	kvl_store *s = open_ok("mem:?policy=slru&max_objects=3");
	put_obj(s, "a");
	put_obj(s, "b");
	put_obj(s, "c");
	put_obj(s, "d"); /* evicts a: remembered */
	put_obj(s, "a"); /* evicts b; a → protected */
	put_obj(s, "e"); /* evicts c */
	put_obj(s, "f"); /* evicts d */
	put_obj(s, "g"); /* evicts e */
	ASSERT_EQ(store_stats(s).evictions, 5);
	expect_present(s, "abcdefg", "afg");
	kvl_store_close(s);
}

/* Removed objects are not remembered: stored again, they are new. */
static void test_slru_remove_forgets(void **state)
{
	(void)state;
	kvl_store *s = open_ok("mem:?policy=slru&max_objects=3");
	put_obj(s, "a");
	put_obj(s, "b");
	put_obj(s, "c");
	const char *ka = "a";
	int res;
	ASSERT_EQ(kvl_store_remove(s, &ka, 1, &res), 0);
	ASSERT_EQ(res, 1);
	put_obj(s, "a"); /* probation, not protected */
	put_obj(s, "d"); /* evicts b */
	put_obj(s, "e"); /* evicts c */
	put_obj(s, "f"); /* evicts a */
	ASSERT_EQ(store_stats(s).evictions, 3);
	expect_present(s, "abcdef", "def");
	kvl_store_close(s);
}

/* When probation is empty the protected tail goes. */
static void test_slru_protected_victim(void **state)
{
	(void)state;
	kvl_store *s = open_ok("mem:?policy=slru&max_objects=2");
	put_obj(s, "a");
	put_obj(s, "b");
	/* Share of 2 is 2: both fit on protected; b is the most recent. */
	ASSERT_EQ(exists1(s, "a"), 1);
	ASSERT_EQ(exists1(s, "b"), 1);
	put_obj(s, "c"); /* probation empty: evicts a, protected's tail */
	ASSERT_EQ(store_stats(s).evictions, 1);
	expect_present(s, "abc", "bc");
	kvl_store_close(s);
}

/* Threads storing, finding, reading and removing keys at once, with
 * constant eviction: the lists, the protected share and the ghost stay
 * consistent (under ASan and UBSan this also checks the memory). */
struct churn {
	kvl_store *s;
	unsigned seed;
	int bad;
};

static void *churn_main(void *p)
{
	struct churn *c = p;
	uint64_t x = c->seed;
	uint8_t d[16];
	for (int i = 0; i < 20000; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		unsigned r = (unsigned)(x >> 33);
		char key[16];
		snprintf(key, sizeof key, "k%03u", r % 400);
		const char *k = key;
		int res;
		switch (r % 7) {
		case 0:
		case 1:
		case 2: { /* two keys in one put: linked behind each other */
			char key2[16];
			snprintf(key2, sizeof key2, "k%03u", (r + 1) % 400);
			const char *ks[2] = {key, key2};
			kvl_iov iov[2] = {{payload, sizeof payload},
			                  {payload, sizeof payload}};
			size_t np[2] = {1, 1};
			int rs[2];
			if (kvl_store_put(c->s, ks, 2, iov, np, rs))
				c->bad++;
			for (int j = 0; j < 2; j++)
				if (rs[j] != KVL_PUT_STORED &&
				    rs[j] != KVL_PUT_PRESENT)
					c->bad++;
			break;
		}
		case 3:
		case 4:
			if (kvl_store_exists(c->s, &k, 1, &res) || res < 0)
				c->bad++;
			break;
		case 5: {
			kvl_range rg = {4, d, sizeof d};
			size_t nr = 1;
			int got;
			if (kvl_store_get(c->s, &k, 1, &rg, &nr, &got) ||
			    (got != 0 && got != KVL_ENOTFOUND))
				c->bad++;
			break;
		}
		default:
			if (kvl_store_remove(c->s, &k, 1, &res) || res < 0)
				c->bad++;
		}
	}
	return NULL;
}

/* Four threads of puts, exists, gets and removes under policy `p`: the
 * counts and bytes stay consistent (run under TSan in CI). */
static void threads_under(const char *p)
{
	/* 100 objects by count, 59 by bytes (168 each). */
	char uri[96];
	snprintf(uri, sizeof uri, "mem:?policy=%s&max_objects=100&capacity=10000",
	         p);
	kvl_store *s = open_ok(uri);
	struct churn c[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		c[i] = (struct churn){s, 17u + (unsigned)i, 0};
		ASSERT_EQ(pthread_create(&th[i], NULL, churn_main, &c[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		ASSERT_EQ(c[i].bad, 0);
	}
	kvl_store_stats st = store_stats(s);
	assert_true(st.evictions > 0);
	assert_true(st.objects <= 100);
	assert_true(st.bytes <= 10000);
	ASSERT_EQ(st.bytes, st.objects * 168); /* 100 + 4 + 64 */
	unsigned present = 0;
	for (unsigned i = 0; i < 400; i++) {
		char key[16];
		snprintf(key, sizeof key, "k%03u", i);
		present += exists1(s, key) == 1;
	}
	ASSERT_EQ(present, st.objects);
	kvl_store_close(s);
}

static void test_slru_threads(void **state)
{
	(void)state;
	threads_under("slru");
}

static void test_adaptive_threads(void **state)
{
	(void)state;
	threads_under("adaptive");
}

/* ------------------------------------------------------------- adaptive */

/* Puts the one-letter keys of `keys` in one call. */
static void put_batch(kvl_store *s, const char *keys)
{
	const char *k[8];
	char names[8][2];
	kvl_iov pieces[8];
	size_t counts[8];
	int res[8];
	size_t n = strlen(keys);
	for (size_t i = 0; i < n; i++) {
		names[i][0] = keys[i];
		names[i][1] = 0;
		k[i] = names[i];
		pieces[i] = (kvl_iov){.addr = payload, .len = sizeof payload};
		counts[i] = 1;
	}
	ASSERT_EQ(kvl_store_put(s, k, n, pieces, counts, res), 0);
	for (size_t i = 0; i < n; i++)
		ASSERT_EQ(res[i], KVL_PUT_STORED);
}

/* adaptive keeps a put's pages in prefix order: the batch's first key is
 * its most recent, so a full store evicts a chain from its end (slru, in
 * store order, from its start: every later page is then useless). */
static void test_adaptive_prefix_order(void **state)
{
	(void)state;
	kvl_store *s = open_ok("mem:?policy=adaptive&max_objects=3");
	put_batch(s, "abc");
	put_obj(s, "d"); /* evicts c */
	expect_present(s, "abcd", "abd");
	kvl_store_close(s);
	s = open_ok("mem:?policy=slru&max_objects=3");
	put_batch(s, "abc");
	put_obj(s, "d"); /* evicts a */
	expect_present(s, "abcd", "bcd");
	kvl_store_close(s);
}

/* A shadow against the same lists with a plain, linear-search index: the
 * same hits and misses step by step, over a stream with repeats, hints
 * to link behind, removals and hashes that share their low bits. */
#define REF_CAP 16
struct ref_model {
	kvl__evict ev;
	kvl__evict_node nodes[REF_CAP];
	int used[REF_CAP];
	size_t count;
};

static uint64_t one_cost(const kvl__evict_node *n)
{
	(void)n;
	return 1;
}

static kvl__evict_node *ref_find(struct ref_model *r, uint64_t h)
{
	for (size_t i = 0; i < REF_CAP; i++)
		if (r->used[i] && r->nodes[i].hash == h)
			return &r->nodes[i];
	return NULL;
}

static int ref_access(struct ref_model *r, uint64_t h, const uint64_t *behind)
{
	kvl__evict_node *n = ref_find(r, h);
	if (n) {
		kvl__evict_touch(&r->ev, n);
		return 0;
	}
	if (r->count == REF_CAP) {
		kvl__evict_node *v = kvl__evict_victim(&r->ev);
		kvl__evict_unlink(&r->ev, v, 1, r->count--);
		r->used[v - r->nodes] = 0;
	}
	size_t i = 0;
	while (r->used[i])
		i++;
	r->nodes[i] = (kvl__evict_node){.hash = h};
	r->used[i] = 1;
	kvl__evict_link(&r->ev, &r->nodes[i], behind ? ref_find(r, *behind)
	                                             : NULL);
	r->count++;
	return 1;
}

static void test_shadow_model(void **state)
{
	(void)state;
	static const uint8_t cfg[][2] = {{0, 0}, {1, 0}, {3, 0}, {5, 3},
	                                 {9, 3}};
	for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
		kvl__shadow sh;
		ASSERT_EQ(kvl__shadow_init(&sh, REF_CAP, cfg[c][0], cfg[c][1]),
		          0);
		struct ref_model *r = calloc(1, sizeof *r);
		assert_non_null(r);
		kvl__evict_init_model(&r->ev, REF_CAP, cfg[c][0], cfg[c][1],
		                      one_cost);
		uint64_t x = 12345, prev = 0, misses = 0;
		for (int step = 0; step < 20000; step++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			/* 48 keys; k << 40 gives them equal low bits. */
			uint64_t k = (x >> 33) % 48 + 1;
			uint64_t h = (x >> 60) & 1 ? k << 40 : k;
			if ((x >> 20) % 16 == 0) {
				kvl__shadow_remove(&sh, h);
				kvl__evict_node *n = ref_find(r, h);
				if (n) {
					kvl__evict_unlink(&r->ev, n, 0,
					                  r->count--);
					r->used[n - r->nodes] = 0;
				}
				continue;
			}
			const uint64_t *behind = (x >> 24) & 1 ? &prev : NULL;
			int want = ref_access(r, h, behind);
			int got = kvl__shadow_access(&sh, h, behind);
			if (got != want)
				fail_msg("config %zu, step %d, hash %llx: shadow "
				         "%s, model %s",
				         c, step, (unsigned long long)h,
				         got ? "missed" : "hit",
				         want ? "missed" : "hit");
			ASSERT_EQ(sh.count, r->count);
			misses += (uint64_t)got;
			prev = h;
		}
		/* Neither all hits nor all misses: the stream exercised both. */
		if (misses < 1000 || misses > 19000)
			fail_msg("config %zu: %llu misses of 20000", c,
			         (unsigned long long)misses);
		kvl__evict_free(&r->ev);
		free(r);
		kvl__shadow_free(&sh);
	}
}

/* ---------------------------------------------------------------- ghost */

static void test_ghost_basic(void **state)
{
	(void)state;
	kvl__ghost g = KVL__GHOST_INIT;
	ASSERT_EQ(kvl__ghost_take(&g, 1), 0); /* empty, no table yet */
	ASSERT_EQ(kvl__ghost_add(&g, 1, 10), 0);
	ASSERT_EQ(kvl__ghost_add(&g, 2, 10), 0);
	ASSERT_EQ(kvl__ghost_add(&g, 3, 10), 0);
	ASSERT_EQ(g.count, 3);
	ASSERT_EQ(kvl__ghost_take(&g, 2), 1);
	ASSERT_EQ(kvl__ghost_take(&g, 2), 0);
	ASSERT_EQ(kvl__ghost_take(&g, 4), 0);
	ASSERT_EQ(g.count, 2);
	/* Limit: the oldest positions go, taken ones included. */
	for (uint64_t h = 100; h < 108; h++)
		ASSERT_EQ(kvl__ghost_add(&g, h, 10), 0);
	/* Positions now: 1 2(taken) 3 100..107 = 11 > 10 → 1 forgotten. */
	ASSERT_EQ(kvl__ghost_take(&g, 1), 0);
	ASSERT_EQ(kvl__ghost_take(&g, 3), 1);
	/* A re-added hash is as new as its last add. */
	ASSERT_EQ(kvl__ghost_add(&g, 100, 10), 0);
	for (uint64_t h = 200; h < 209; h++)
		ASSERT_EQ(kvl__ghost_add(&g, h, 10), 0);
	ASSERT_EQ(kvl__ghost_take(&g, 101), 0);
	ASSERT_EQ(kvl__ghost_take(&g, 100), 1);
	/* Limit 0 forgets everything. */
	ASSERT_EQ(kvl__ghost_add(&g, 300, 0), 0);
	ASSERT_EQ(g.count, 0);
	ASSERT_EQ(kvl__ghost_take(&g, 208), 0);
	ASSERT_EQ(kvl__ghost_take(&g, 300), 0);
	kvl__ghost_free(&g);
	kvl__ghost_free(&g); /* freeing twice is harmless */
}

/* Random adds (with repeats and colliding low bits), takes and changing
 * limits against a plain model: a list of (hash, position) where a hash is
 * remembered while its newest position is within the last `limit` and it
 * was not taken since. */
static void test_ghost_model(void **state)
{
	(void)state;
	enum { OPS = 60000, SPACE = 3000 };
	uint64_t *ring = calloc(OPS, sizeof *ring);
	uint64_t *newest = calloc(SPACE, sizeof *newest); /* pos + 1, 0: none */
	assert_non_null(ring);
	assert_non_null(newest);
	kvl__ghost g = KVL__GHOST_INIT;
	uint64_t x = 42, tail = 0, head = 0;
	size_t limit = 500;
	for (int op = 0; op < OPS; op++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		uint64_t r = x >> 33;
		uint64_t k = r % SPACE;
		/* Hashes that share their low 20 bits. */
		uint64_t h = (k << 20) | 0x5a5a5;
		if (r % 997 == 0)
			limit = 1 + (size_t)(r % 2000);
		if (r % 3 == 0) {
			int want = newest[k] != 0;
			ASSERT_EQ(kvl__ghost_take(&g, h), want);
			newest[k] = 0;
			continue;
		}
		ASSERT_EQ(kvl__ghost_add(&g, h, limit), 0);
		ring[tail] = k;
		newest[k] = ++tail;
		while (tail - head > limit) {
			uint64_t old = ring[head];
			if (newest[old] == head + 1)
				newest[old] = 0;
			head++;
		}
		size_t live = 0;
		if (op % 5000 == 0) {
			for (size_t i = 0; i < SPACE; i++)
				live += newest[i] != 0;
			ASSERT_EQ(g.count, live);
		}
	}
	for (uint64_t k = 0; k < SPACE; k++)
		ASSERT_EQ(kvl__ghost_take(&g, (k << 20) | 0x5a5a5),
		          newest[k] != 0);
	ASSERT_EQ(g.count, 0);
	kvl__ghost_free(&g);
	free(ring);
	free(newest);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_options),
		cmocka_unit_test(test_lru_max_objects),
		cmocka_unit_test(test_slru_promotion),
		cmocka_unit_test(test_slru_demotion_count),
		cmocka_unit_test(test_slru_demotion_bytes),
		cmocka_unit_test(test_slru_ghost),
		cmocka_unit_test(test_slru_remove_forgets),
		cmocka_unit_test(test_slru_protected_victim),
		cmocka_unit_test(test_slru_threads),
		cmocka_unit_test(test_adaptive_threads),
		cmocka_unit_test(test_adaptive_prefix_order),
		cmocka_unit_test(test_shadow_model),
		cmocka_unit_test(test_ghost_basic),
		cmocka_unit_test(test_ghost_model),
	};
	return cmocka_run_group_tests_name("evict", tests, NULL, NULL);
}
