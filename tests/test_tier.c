/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tier.c — the tier: store (src/store/tier.c) over embedded and
 * fault-injection tiers: its URI and every kind of bad input, lookups that
 * see the union, gets served by a lower tier and their promotion into the
 * top (awaited with a bounded poll), puts to the top and written through,
 * spill-down of what a small top tier evicts (an embedded or a file:
 * one; a damaged file is never handed down), failing tiers that degrade
 * without failing what another tier can serve (and honest results when
 * none can), remove from every tier, close with promotions queued, the
 * stats renders' per-tier figures, and the linker loading pages that only
 * the lower tier holds.
 */
#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/linker_fixture.h"
#include "support/tmpdir.h"

#include "store/fault.h"
#include "store/store.h"
#include "store/tier.h"

#define OBJ 4096
#define AWAIT_MS 10000 /* a promotion that takes longer has failed */

/* --------------------------------------------------------------- helpers */

/* Bytes of object `key`: a pattern no two keys share. */
static void fill_obj(uint8_t *buf, size_t len, const char *key)
{
	uint32_t h = 2166136261u;
	for (const char *p = key; *p; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	for (size_t i = 0; i < len; i++) {
		h = h * 1103515245u + 12345u;
		buf[i] = (uint8_t)(h >> 16);
	}
}

static void put_obj(kvl_store *s, const char *key, int expect)
{
	uint8_t buf[OBJ];
	fill_obj(buf, sizeof buf, key);
	ASSERT_CODE_MSG(put1(s, key, buf, sizeof buf), expect, "put of %s",
	                key);
}

/* 1 when s reads key whole with its own bytes. */
static int obj_ok(kvl_store *s, const char *key)
{
	uint8_t want[OBJ], got[OBJ];
	fill_obj(want, sizeof want, key);
	memset(got, 0, sizeof got);
	return get1(s, key, 0, got, sizeof got) == OBJ &&
	       memcmp(want, got, sizeof got) == 0;
}

static kvl__tier_stats tier_stats(kvl_store *s, size_t i)
{
	kvl__tier_stats t;
	ASSERT_CODE(kvl__tier_stats_get(s, i, &t), KVL_OK);
	return t;
}

static kvl__tier_promote_stats promote_stats(kvl_store *s)
{
	kvl__tier_promote_stats p;
	ASSERT_CODE(kvl__tier_promote_stats_get(s, &p), KVL_OK);
	return p;
}

/* Waits (AWAIT_MS at most) until tier 0 of s holds key. */
static void await_in_top(kvl_store *s, const char *key)
{
	uint64_t t0 = now_ms();
	while (exists1(kvl__tier_at(s, 0), key) != 1) {
		ASSERT_TRUE_MSG(now_ms() - t0 < AWAIT_MS,
		                "%s was not promoted into the top tier within "
		                "%d ms", key, AWAIT_MS);
		sleep_ms(1);
	}
}

static void set_down(kvl_store *fault, int down)
{
	kvl__fault_cfg c;
	ASSERT_CODE(kvl__fault_get(fault, &c), KVL_OK);
	c.down = down;
	ASSERT_CODE(kvl__fault_set(fault, &c), KVL_OK);
}

/* -------------------------------------------------------------- the URI */

static void test_uri(void **state)
{
	(void)state;
	/* Each tier keeps its own '?' and '&'. */
	kvl_store *s = open_ok("tier:mem:?capacity=1MiB&policy=lru|"
	                       "mem:?capacity=2MiB&max_objects=9");
	ASSERT_EQ(kvl__tier_count(s), 2);
	ASSERT_U64(tier_stats(s, 0).own.capacity, 1u << 20);
	ASSERT_U64(tier_stats(s, 1).own.capacity, 2u << 20);
	ASSERT_U64(store_stats(s).capacity, 3u << 20);
	kvl_store_close(s);

	s = open_ok("TIER:?write=through&promote=0&spill=0&breaker=2|mem:|"
	            "fault+mem:|mem:?capacity=1KiB");
	ASSERT_EQ(kvl__tier_count(s), 3);
	ASSERT_TRUE(kvl__tier_at(s, 3) == NULL);
	kvl_store_close(s);
	ASSERT_EQ(kvl__tier_count(NULL), 0);

	char out[256];
	ASSERT_CODE(kvl_uri_redact("tier:mem:?capacity=1G|redis://u:pw@h:1"
	                           "?password=x|mem:",
	                           out, sizeof out),
	            KVL_OK);
	ASSERT_EQ(strcmp(out, "tier:mem:?capacity=1G|redis://u:***@h:1"
	                      "?password=***|mem:"),
	          0);
	/* Malformed, a tier: URI with credentials of its own loses them
	 * too (messages print what they were given). */
	ASSERT_CODE(kvl_uri_redact("tier://u:pw@h|mem:", out, sizeof out),
	            KVL_OK);
	ASSERT_EQ(strcmp(out, "tier://u:***@h|mem:"), 0);
}

static void test_uri_bad(void **state)
{
	(void)state;
	open_fails("tier:", KVL_EPARSE, "names no tiers");
	open_fails("tier:?write=through", KVL_EPARSE, "names no tiers");
	open_fails("tier:mem:?capacity=1MiB", KVL_EPARSE,
	           "has one tier (\"mem:?capacity=1MiB\")");
	open_fails("tier:mem:||mem:", KVL_EPARSE, "tier 1 is empty");
	open_fails("tier:mem:|", KVL_EPARSE, "tier 1 is empty");
	open_fails("tier:|mem:", KVL_EPARSE, "tier 0 is empty");
	open_fails("tier:mem:|tier:mem:|mem:", KVL_EPARSE,
	           "tier 1 (\"tier:mem:\") is a tier: store itself");
	open_fails("tier:mem:|fault+TIER:mem:", KVL_EPARSE,
	           "is a tier: store itself");
	open_fails("fault+tier:mem:|mem:", KVL_EPARSE,
	           "cannot wrap a tier: store");
	open_fails("tier:?wrte=through|mem:|mem:", KVL_EPARSE,
	           "unknown option 'wrte' for scheme tier:");
	open_fails("tier:?write=up|mem:|mem:", KVL_EPARSE, "write=up");
	open_fails("tier:?promote_queue=0|mem:|mem:", KVL_EPARSE,
	           "promote_queue=0");
	open_fails("tier:?promote=maybe|mem:|mem:", KVL_EPARSE,
	           "promote=maybe");
	open_fails("tier:mem:?capacity=1MiB&write=through|mem:", KVL_EPARSE,
	           "tier 0 (\"mem:?capacity=1MiB&write=through\"): store URI: "
	           "unknown option 'write' for scheme mem: (the tier store's "
	           "own options go first");
	open_fails("tier:mem:|fault+mem:?tenant=a", KVL_EPARSE,
	           "tier 1 (\"fault+mem:?tenant=a\"): tenant= belongs to the "
	           "tier store");
	open_fails("tier:mem:|nosuch:", KVL_ENOTSUP,
	           "tier 1 (\"nosuch:\"): unknown store scheme 'nosuch'");
	open_fails("tier:mem:|mem:?capacity=0", KVL_EPARSE,
	           "tier 1 (\"mem:?capacity=0\")");
	open_fails("tier:mem:|mem:|mem:|mem:|mem:|mem:|mem:|mem:|mem:",
	           KVL_EPARSE, "9 tiers; at most 8");
	/* The tier store's own tenant is fine. */
	kvl_store *s = open_ok("tier:?tenant=t1|mem:|mem:");
	put_obj(s, "k", KVL_PUT_STORED);
	ASSERT_EQ(exists1(kvl__tier_at(s, 0), "kvl1:t1:k"), 1);
	ASSERT_TRUE(obj_ok(s, "k"));
	kvl_store_close(s);
}

/* --------------------------------------------------------------- reads */

static void test_union_lookup(void **state)
{
	(void)state;
	kvl_store *s = open_ok("tier:?promote=0|mem:|mem:|mem:");
	put_obj(kvl__tier_at(s, 0), "a", KVL_PUT_STORED);
	put_obj(kvl__tier_at(s, 1), "b", KVL_PUT_STORED);
	put_obj(kvl__tier_at(s, 2), "c", KVL_PUT_STORED);

	const char *keys[] = {"a", "b", "none", "c", "", "b"};
	int res[6];
	ASSERT_RC(s, kvl_store_exists(s, keys, 6, res), KVL_OK);
	ASSERT_EQ(res[0], 1);
	ASSERT_EQ(res[1], 1);
	ASSERT_EQ(res[2], 0);
	ASSERT_EQ(res[3], 1);
	ASSERT_CODE(res[4], KVL_EINVAL);
	ASSERT_EQ(res[5], 1);
	ASSERT_U64(tier_stats(s, 0).hits, 1);
	ASSERT_U64(tier_stats(s, 1).hits, 2);
	ASSERT_U64(tier_stats(s, 2).hits, 1);

	/* A get reads from the highest tier that has the key. */
	ASSERT_TRUE(obj_ok(s, "a"));
	ASSERT_TRUE(obj_ok(s, "b"));
	ASSERT_TRUE(obj_ok(s, "c"));
	uint8_t buf[OBJ];
	ASSERT_CODE(get1(s, "none", 0, buf, sizeof buf), KVL_ENOTFOUND);
	ASSERT_CODE(get1(s, "c", 1, buf, sizeof buf), KVL_ERANGE);
	kvl_store_stats st = store_stats(s);
	ASSERT_U64(st.hits, 4 + 3);
	ASSERT_U64(st.misses, 2);
	ASSERT_U64(tier_stats(s, 2).hits, 2);
	/* promote=0: nothing moved up. */
	ASSERT_EQ(exists1(kvl__tier_at(s, 0), "c"), 0);
	kvl_store_close(s);
}

static void test_promotion(void **state)
{
	(void)state;
	kvl_store *s = open_ok("tier:mem:|mem:");
	kvl_store *top = kvl__tier_at(s, 0);
	put_obj(kvl__tier_at(s, 1), "p", KVL_PUT_STORED);
	ASSERT_EQ(exists1(top, "p"), 0);
	/* An exists does not promote; a get does, later. */
	ASSERT_EQ(exists1(s, "p"), 1);
	ASSERT_TRUE(obj_ok(s, "p"));
	ASSERT_U64(tier_stats(s, 1).hits, 2);
	await_in_top(s, "p");
	ASSERT_TRUE(obj_ok(top, "p")); /* the whole object, its own bytes */
	ASSERT_U64(tier_stats(s, 1).promotions, 1);
	ASSERT_TRUE(obj_ok(s, "p"));
	ASSERT_U64(tier_stats(s, 0).hits, 1);
	kvl__tier_promote_stats p = promote_stats(s);
	ASSERT_U64(p.queued, 1);
	ASSERT_U64(p.failed, 0);

	/* A range read (one layer) promotes the whole object too. */
	put_obj(kvl__tier_at(s, 1), "q", KVL_PUT_STORED);
	uint8_t part[16];
	ASSERT_EQ(get1(s, "q", 100, part, sizeof part), sizeof part);
	await_in_top(s, "q");
	ASSERT_TRUE(obj_ok(top, "q"));
	kvl_store_close(s);
}

/* ----------------------------------------------------------------- puts */

static void test_put_top_and_through(void **state)
{
	(void)state;
	kvl_store *s = open_ok("tier:mem:|mem:");
	put_obj(s, "x", KVL_PUT_STORED);
	ASSERT_EQ(exists1(kvl__tier_at(s, 0), "x"), 1);
	ASSERT_EQ(exists1(kvl__tier_at(s, 1), "x"), 0);
	put_obj(s, "x", KVL_PUT_PRESENT);
	ASSERT_U64(store_stats(s).puts, 1);
	kvl_store_close(s);

	s = open_ok("tier:?write=through|mem:|mem:|mem:");
	put_obj(s, "y", KVL_PUT_STORED);
	for (size_t i = 0; i < 3; i++)
		ASSERT_TRUE_MSG(obj_ok(kvl__tier_at(s, i), "y"), "tier %zu", i);
	put_obj(s, "y", KVL_PUT_PRESENT);
	/* Present in one tier, missing in another: stored. */
	remove1(kvl__tier_at(s, 2), "y");
	put_obj(s, "y", KVL_PUT_STORED);
	ASSERT_TRUE(obj_ok(kvl__tier_at(s, 2), "y"));
	kvl_store_close(s);

	/* An object too large for the top falls back to the next tier. */
	s = open_ok("tier:mem:?capacity=1KiB|mem:");
	put_obj(s, "big", KVL_PUT_STORED);
	ASSERT_EQ(exists1(kvl__tier_at(s, 0), "big"), 0);
	ASSERT_TRUE(obj_ok(kvl__tier_at(s, 1), "big"));
	ASSERT_U64(tier_stats(s, 0).failures, 1);
	kvl_store_close(s);
}

/* ------------------------------------------------------------ spill-down */

/* n objects through s, then every one read back: 1 if all were. */
static size_t put_and_count(kvl_store *s, size_t n)
{
	char key[32];
	for (size_t i = 0; i < n; i++) {
		snprintf(key, sizeof key, "obj%zu", i);
		put_obj(s, key, KVL_PUT_STORED);
	}
	size_t ok = 0;
	for (size_t i = 0; i < n; i++) {
		snprintf(key, sizeof key, "obj%zu", i);
		ok += obj_ok(s, key);
	}
	return ok;
}

static void test_spill_down(void **state)
{
	(void)state;
	/* 200 objects of 4 KiB through a 64 KiB top: the working set is
	 * 12 times the top tier, and stays readable. */
	kvl_store *s = open_ok("tier:?promote=0|mem:?capacity=64KiB|"
	                       "mem:?capacity=16MiB");
	ASSERT_EQ(put_and_count(s, 200), 200);
	kvl__tier_stats t0 = tier_stats(s, 0);
	ASSERT_TRUE(t0.own.evictions >= 180);
	ASSERT_U64(t0.spills, t0.own.evictions);
	ASSERT_U64(t0.spills_lost, 0);
	ASSERT_U64(store_stats(s).evictions, 0);
	kvl_store_close(s);

	/* Three tiers, promotion on: what the middle evicts goes lower. */
	s = open_ok("tier:mem:?capacity=32KiB|mem:?capacity=128KiB|"
	            "mem:?capacity=16MiB");
	ASSERT_EQ(put_and_count(s, 200), 200);
	ASSERT_TRUE(tier_stats(s, 1).spills > 0);
	ASSERT_U64(tier_stats(s, 1).spills_lost, 0);
	kvl_store_close(s);

	/* Without spill-down, the top's victims are gone. */
	s = open_ok("tier:?promote=0&spill=0|mem:?capacity=64KiB|"
	            "mem:?capacity=16MiB");
	size_t ok = put_and_count(s, 200);
	ASSERT_TRUE_MSG(ok < 20, "%zu of 200 readable", ok);
	ASSERT_U64(store_stats(s).evictions, tier_stats(s, 0).own.evictions);
	kvl_store_close(s);

	/* A spill that no lower tier takes is counted as lost. */
	s = open_ok("tier:?promote=0|mem:?capacity=64KiB|fault+mem:");
	set_down(kvl__tier_at(s, 1), 1);
	ok = put_and_count(s, 100);
	ASSERT_TRUE(ok < 20);
	t0 = tier_stats(s, 0);
	ASSERT_U64(t0.spills, 0);
	ASSERT_U64(t0.spills_lost, t0.own.evictions);
	ASSERT_U64(store_stats(s).evictions, t0.own.evictions);
	kvl_store_close(s);
}

/* A reader that checks, while the writer puts, that every object whose put
 * returned reads back whole: an object on its way down is never missed. */
struct spill_race {
	kvl_store *s;
	atomic_size_t written;
	atomic_int stop;
	size_t reads, missed;
};

static void *spill_reader(void *arg)
{
	struct spill_race *r = arg;
	char key[32];
	uint64_t x = 88172645463325252ull;
	while (!atomic_load(&r->stop)) {
		size_t n = atomic_load(&r->written);
		if (n == 0)
			continue;
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		snprintf(key, sizeof key, "race%zu", (size_t)(x % n));
		r->reads++;
		r->missed += !obj_ok(r->s, key);
	}
	return NULL;
}

/* 2000 objects written through `uri` (a small top over a middle tier)
 * while a reader checks every one whose put returned. */
static void spill_race_run(const char *uri)
{
	struct spill_race r = {.s = open_ok(uri)};
	atomic_init(&r.written, 0);
	atomic_init(&r.stop, 0);
	pthread_t th;
	ASSERT_EQ(pthread_create(&th, NULL, spill_reader, &r), 0);
	char key[32];
	for (size_t i = 0; i < 2000; i++) {
		snprintf(key, sizeof key, "race%zu", i);
		put_obj(r.s, key, KVL_PUT_STORED);
		atomic_store(&r.written, i + 1);
	}
	atomic_store(&r.stop, 1);
	pthread_join(th, NULL);
	ASSERT_TRUE(r.reads > 0);
	ASSERT_EQ_MSG(r.missed, 0, "%zu of %zu reads, %s", r.missed, r.reads,
	              uri);
	ASSERT_TRUE(tier_stats(r.s, 1).spills > 0);
	ASSERT_U64(tier_stats(r.s, 1).spills_lost, 0);
	ASSERT_U64(store_stats(r.s).evictions, 0);
	kvl_store_close(r.s);
}

static void test_spill_concurrent_reads(void **state)
{
	(void)state;
	spill_race_run("tier:mem:?capacity=48KiB|mem:?capacity=64KiB|"
	               "mem:?capacity=32MiB");
	/* The middle a file: store: its victims are read back from their
	 * files and spilled while the reader looks. */
	char *dir = tmpdir_make("tier-race");
	char uri[PATH_MAX + 128];
	snprintf(uri, sizeof uri, "tier:mem:?capacity=48KiB|file:%s?"
	         "capacity=128KiB|mem:?capacity=32MiB", dir);
	spill_race_run(uri);
	tmpdir_remove(dir);
}

/* The one object file under dir/data (asserted), into path. */
static void only_data_file(const char *dir, char *path, size_t len)
{
	int found = 0;
	for (unsigned x = 0; x < 256; x++) {
		char sub[PATH_MAX / 2];
		snprintf(sub, sizeof sub, "%s/data/%02x", dir, x);
		DIR *d = opendir(sub);
		if (!d)
			continue;
		struct dirent *de;
		while ((de = readdir(d)))
			if (de->d_name[0] != '.') {
				snprintf(path, len, "%s/%s", sub, de->d_name);
				found++;
			}
		closedir(d);
	}
	ASSERT_EQ_MSG(found, 1, "object files under %s", dir);
}

/* A file: tier's victims spill down; a damaged one is not handed down. */
static void test_spill_from_file(void **state)
{
	(void)state;
	char *dir = tmpdir_make("tier-file");
	/* 4 KiB objects cost 8 KiB there (with their header page): 8 fit. */
	kvl_store *s = open_okf("tier:?promote=0|file:%s?capacity=64KiB|"
	                        "mem:?capacity=16MiB", dir);
	ASSERT_EQ(put_and_count(s, 200), 200);
	kvl__tier_stats t0 = tier_stats(s, 0);
	ASSERT_TRUE(t0.own.evictions >= 190);
	ASSERT_U64(t0.spills, t0.own.evictions);
	ASSERT_U64(t0.spills_lost, 0);
	ASSERT_TRUE(obj_ok(kvl__tier_at(s, 1), "obj0"));
	kvl_store_close(s);
	tmpdir_remove(dir);

	/* A file damaged on disk is evicted, but not handed down: the tier
	 * below never holds it, and it reads as absent, never as data. */
	dir = tmpdir_make("tier-file-bad");
	s = open_okf("tier:?promote=0|file:%s?capacity=64KiB|mem:", dir);
	put_obj(s, "bad", KVL_PUT_STORED);
	char path[PATH_MAX];
	only_data_file(dir, path, sizeof path);
	FILE *fp = fopen(path, "r+b");
	ASSERT_TRUE(fp != NULL);
	ASSERT_EQ(fseek(fp, 4096 + 100, SEEK_SET), 0);
	int c = fgetc(fp);
	ASSERT_EQ(fseek(fp, 4096 + 100, SEEK_SET), 0);
	fputc(c ^ 0x5a, fp);
	fclose(fp);
	char key[32];
	for (int i = 0; i < 20; i++) {
		snprintf(key, sizeof key, "good%d", i);
		put_obj(s, key, KVL_PUT_STORED);
	}
	t0 = tier_stats(s, 0);
	ASSERT_U64(t0.spills_lost, 1);
	ASSERT_U64(t0.spills, t0.own.evictions - 1);
	ASSERT_EQ(exists1(kvl__tier_at(s, 1), "bad"), 0);
	uint8_t buf[OBJ];
	ASSERT_CODE(get1(s, "bad", 0, buf, sizeof buf), KVL_ENOTFOUND);
	ASSERT_TRUE(obj_ok(s, "good0"));
	kvl_store_close(s);
	tmpdir_remove(dir);

	/* Three tiers, promotion on: the file: middle's victims go lower. */
	dir = tmpdir_make("tier-file-mid");
	s = open_okf("tier:mem:?capacity=32KiB|file:%s?capacity=128KiB|"
	             "mem:?capacity=16MiB", dir);
	ASSERT_EQ(put_and_count(s, 200), 200);
	ASSERT_TRUE(tier_stats(s, 1).spills > 0);
	ASSERT_U64(tier_stats(s, 1).spills_lost, 0);
	kvl_store_close(s);
	tmpdir_remove(dir);
}

/* ------------------------------------------------------------- failures */

static void test_failing_tier_degrades(void **state)
{
	(void)state;
	/* The top fails every key: puts fall back, reads fall through. */
	kvl_store *s = open_ok("tier:fault+mem:?fault.error=1|mem:");
	put_obj(s, "f", KVL_PUT_STORED);
	ASSERT_TRUE(obj_ok(kvl__tier_at(s, 1), "f"));
	ASSERT_EQ(exists1(s, "f"), 1);
	ASSERT_TRUE(obj_ok(s, "f"));
	ASSERT_TRUE(tier_stats(s, 0).failures >= 3);
	ASSERT_U64(tier_stats(s, 1).hits, 2);
	/* No tier has it and one failed: the failure, not absence. */
	uint8_t buf[OBJ];
	ASSERT_CODE(get1(s, "none", 0, buf, sizeof buf), KVL_EIO);
	ASSERT_CODE(exists1(s, "none"), KVL_EIO);
	ASSERT_U64(store_stats(s).errors, 2);
	kvl_store_close(s);

	/* The lower tier is down: what the top has is served; a miss is
	 * the lower tier's failure; a write-through put still stores. */
	s = open_ok("tier:?write=through|mem:|fault+mem:");
	kvl_store *low = kvl__tier_at(s, 1);
	put_obj(s, "g", KVL_PUT_STORED);
	set_down(low, 1);
	ASSERT_EQ(exists1(s, "g"), 1);
	ASSERT_TRUE(obj_ok(s, "g"));
	put_obj(s, "h", KVL_PUT_STORED);
	ASSERT_CODE(get1(s, "none", 0, buf, sizeof buf), KVL_EIO);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "tier 1 (\"fault+mem:\")");
	ASSERT_CONTAINS(kvl_store_errmsg(s), "store is down");
	kvl_store_close(s);

	/* Every tier fails: the put fails, and says why. */

	s = open_ok("tier:fault+mem:|fault+mem:");
	set_down(kvl__tier_at(s, 0), 1);
	set_down(kvl__tier_at(s, 1), 1);
	ASSERT_CODE(put1(s, "i", buf, sizeof buf), KVL_EIO);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "store is down");
	set_down(kvl__tier_at(s, 1), 0);
	put_obj(s, "i", KVL_PUT_STORED);
	/* The top fails whole while a lower tier serves: the promotion of
	 * what was read fails, counted, and the read is still served. */
	ASSERT_TRUE(obj_ok(s, "i"));
	uint64_t t0 = now_ms();
	while (promote_stats(s).failed == 0 && now_ms() - t0 < AWAIT_MS)
		sleep_ms(1);
	ASSERT_U64(promote_stats(s).failed, 1);
	set_down(kvl__tier_at(s, 0), 0);
	kvl_store_close(s);
}

/* --------------------------------------------------------------- remove */

static void test_remove_all(void **state)
{
	(void)state;
	kvl_store *s = open_ok("tier:?write=through|mem:|mem:|fault+mem:");
	put_obj(s, "r", KVL_PUT_STORED);
	put_obj(kvl__tier_at(s, 2), "only_low", KVL_PUT_STORED);
	ASSERT_EQ(remove1(s, "r"), 1);
	ASSERT_EQ(remove1(s, "only_low"), 1);
	ASSERT_EQ(remove1(s, "never"), 0);
	for (size_t i = 0; i < 3; i++) {
		ASSERT_EQ(exists1(kvl__tier_at(s, i), "r"), 0);
		ASSERT_EQ(exists1(kvl__tier_at(s, i), "only_low"), 0);
	}
	ASSERT_EQ(exists1(s, "r"), 0);
	/* A tier that fails may keep it: the failure is the result. */
	put_obj(s, "r2", KVL_PUT_STORED);
	set_down(kvl__tier_at(s, 2), 1);
	ASSERT_CODE(remove1(s, "r2"), KVL_EIO);
	ASSERT_EQ(exists1(kvl__tier_at(s, 0), "r2"), 0);
	set_down(kvl__tier_at(s, 2), 0);
	ASSERT_EQ(exists1(kvl__tier_at(s, 2), "r2"), 1);
	kvl_store_close(s);
}

/* ---------------------------------------------------------------- holds */

/* The holds of key that tier i of s counts now (a fault.holds=1 tier). */
static uint32_t held_at(kvl_store *s, size_t i, const char *key)
{
	uint32_t now = 99;
	ASSERT_CODE(kvl__fault_holds(kvl__tier_at(s, i), key, &now, NULL),
	            KVL_OK);
	return now;
}

static void hold_ok(kvl_store *s, const char *const *keys, size_t n,
                    const int *want)
{
	int res[8];
	for (size_t i = 0; i < n; i++)
		res[i] = 99;
	ASSERT_CODE(kvl__store_hold(s, keys, n, res), KVL_OK);
	for (size_t i = 0; i < n; i++)
		ASSERT_CODE_MSG(res[i], want[i], "hold of %s", keys[i]);
}

static void unhold_ok(kvl_store *s, const char *const *keys, size_t n)
{
	int res[8];
	ASSERT_CODE(kvl__store_unhold(s, keys, n, res), KVL_OK);
	for (size_t i = 0; i < n; i++)
		ASSERT_CODE_MSG(res[i], 0, "unhold of %s", keys[i]);
}

/* A hold reaches every tier and an unhold lets go exactly where holds
 * were taken, even after the key moved between tiers; a key no tier holds
 * is 0, or the error of a tier that failed it; the call fails whole only
 * when every tier failed; an unhold of a key not held is KVL_ENOTFOUND and
 * touches no tier. */
static void test_holds_reach_every_tier(void **state)
{
	(void)state;
	kvl_store *s = open_ok("tier:?promote=0|fault+mem:?fault.holds=1"
	                       "|fault+mem:?fault.holds=1");
	kvl_store *top = kvl__tier_at(s, 0), *low = kvl__tier_at(s, 1);
	put_obj(top, "a", KVL_PUT_STORED);
	put_obj(low, "b", KVL_PUT_STORED);
	put_obj(top, "c", KVL_PUT_STORED);
	put_obj(low, "c", KVL_PUT_STORED);
	const char *abcd[4] = {"a", "b", "c", "d"};
	hold_ok(s, abcd, 4, (int[]){1, 1, 1, 0});
	ASSERT_U64(held_at(s, 0, "a"), 1);
	ASSERT_U64(held_at(s, 1, "a"), 0);
	ASSERT_U64(held_at(s, 0, "b"), 0);
	ASSERT_U64(held_at(s, 1, "b"), 1);
	ASSERT_U64(held_at(s, 0, "c"), 1);
	ASSERT_U64(held_at(s, 1, "c"), 1);

	/* "a" spills down, "b" is promoted; both are held again. */
	ASSERT_EQ(remove1(top, "a"), 1);
	put_obj(low, "a", KVL_PUT_STORED);
	put_obj(top, "b", KVL_PUT_STORED);
	hold_ok(s, abcd, 2, (int[]){1, 1});
	ASSERT_U64(held_at(s, 1, "a"), 1);
	ASSERT_U64(held_at(s, 0, "b"), 1);
	ASSERT_U64(held_at(s, 1, "b"), 2);

	/* Let go of it all: every tier ends with no hold. */
	unhold_ok(s, abcd, 2);
	unhold_ok(s, abcd, 3);
	for (size_t i = 0; i < 3; i++)
		for (size_t t = 0; t < 2; t++)
			ASSERT_U64(held_at(s, t, abcd[i]), 0);
	int res[4] = {99, 99, 99, 99};
	ASSERT_CODE(kvl__store_unhold(s, abcd, 1, res), KVL_OK);
	ASSERT_CODE(res[0], KVL_ENOTFOUND);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "\"a\" is not held");

	/* A failing tier: its keys get its error unless another tier held
	 * them; every tier failing fails the call. */
	set_down(low, 1);
	hold_ok(s, abcd, 3, (int[]){KVL_EIO, 1, 1});
	ASSERT_CONTAINS(kvl_store_errmsg(s), "tier 1");
	ASSERT_U64(held_at(s, 0, "b"), 1);
	set_down(top, 1);
	ASSERT_CODE(kvl__store_hold(s, abcd, 3, res), KVL_EIO);
	for (size_t i = 0; i < 3; i++)
		ASSERT_CODE(res[i], KVL_EIO);
	/* Unholds reach tiers that are down. */
	const char *bc[2] = {"b", "c"};
	unhold_ok(s, bc, 2);
	ASSERT_U64(held_at(s, 0, "b"), 0);
	ASSERT_U64(held_at(s, 0, "c"), 0);
	kvl_store_close(s);
}

/* Registrations reach every tier and are forgotten at every tier; one
 * tier refusing is no failure, all refusing is. */
static void test_register_reaches_every_tier(void **state)
{
	(void)state;
	kvl_store *s = open_ok("tier:fault+mem:|fault+mem:");
	static uint8_t one[64], two[64];
	uint64_t live[2];
	ASSERT_CODE(kvl_store_register(s, one, sizeof one, KVL_MEM_HOST),
	            KVL_OK);
	set_down(kvl__tier_at(s, 1), 1);
	ASSERT_CODE(kvl_store_register(s, two, sizeof two, KVL_MEM_HOST),
	            KVL_OK);
	set_down(kvl__tier_at(s, 0), 1);
	ASSERT_CODE(kvl_store_register(s, two, sizeof two, KVL_MEM_HOST),
	            KVL_EIO);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "tier 0");
	for (size_t i = 0; i < 2; i++)
		ASSERT_CODE(kvl__fault_regs(kvl__tier_at(s, i), &live[i]),
		            KVL_OK);
	ASSERT_U64(live[0], 2);
	ASSERT_U64(live[1], 1);
	kvl__store_unregister(s, one);
	kvl__store_unregister(s, two);
	for (size_t i = 0; i < 2; i++) {
		ASSERT_CODE(kvl__fault_regs(kvl__tier_at(s, i), &live[i]),
		            KVL_OK);
		ASSERT_U64(live[i], 0);
	}
	kvl_store_close(s);
}

/* ---------------------------------------------------------------- close */

static void test_close_with_promotions_queued(void **state)
{
	(void)state;
	enum { N = 64 };
	kvl_store *s = open_ok("tier:?promote_queue=8|mem:|fault+mem:");
	kvl_store *low = kvl__tier_at(s, 1);
	char names[N][16];
	const char *keys[N];
	for (size_t i = 0; i < N; i++) {
		snprintf(names[i], sizeof names[i], "c%zu", i);
		keys[i] = names[i];
		put_obj(low, keys[i], KVL_PUT_STORED);
	}
	/* Every read of the lower tier takes 50 ms now: the promoter's
	 * reads are slow, so its queue fills and the rest is dropped. */
	kvl__fault_cfg c;
	ASSERT_CODE(kvl__fault_get(low, &c), KVL_OK);
	c.latency_ms = 50;
	c.latency_p = 1;
	ASSERT_CODE(kvl__fault_set(low, &c), KVL_OK);

	static uint8_t bufs[N][OBJ];
	kvl_range r[N];
	size_t nr[N];
	int res[N];
	for (size_t i = 0; i < N; i++) {
		r[i] = (kvl_range){.offset = 0, .addr = bufs[i], .len = OBJ};
		nr[i] = 1;
	}
	uint64_t t0 = now_ms();
	ASSERT_RC(s, kvl_store_get(s, keys, N, r, nr, res), KVL_OK);
	for (size_t i = 0; i < N; i++)
		ASSERT_CODE(res[i], 0);
	kvl__tier_promote_stats p = promote_stats(s);
	ASSERT_U64(p.queued + p.dropped, N);
	ASSERT_TRUE(p.dropped >= N - 9);
	/* The get waited for its own read only, never for promotions. */
	ASSERT_TRUE(now_ms() - t0 < 50 + 2000);

	t0 = now_ms();
	kvl_store_close(s); /* at most the promotion in progress is awaited */
	ASSERT_TRUE_MSG(now_ms() - t0 < 2000, "close took %llu ms",
	                (unsigned long long)(now_ms() - t0));
}

/* ------------------------------------------------------ a remote tier */

/* The store under test ($KVL_TEST_STORE_URI: a Redis cluster in the
 * redis_tier run, a file: store in file_tier, else fault+mem:) as the
 * lower tier: promotion from it, and spill-down of the embedded top into
 * it. */
static void test_remote_lower_tier(void **state)
{
	(void)state;
	const char *low_uri = env_store() ? env_store() : "fault+mem:";
	kvl_store *s = open_okf("tier:mem:?capacity=64KiB|%s", low_uri);
	kvl_store *top = kvl__tier_at(s, 0), *low = kvl__tier_at(s, 1);
	char key[64];
	snprintf(key, sizeof key, "tier-remote-%ld-p", (long)getpid());
	put_obj(low, key, KVL_PUT_STORED);
	ASSERT_TRUE(obj_ok(s, key));
	ASSERT_U64(tier_stats(s, 1).hits, 1);
	await_in_top(s, key);
	ASSERT_TRUE(obj_ok(top, key));
	ASSERT_U64(promote_stats(s).failed, 0);

	/* 100 objects through a top of 16: all readable, the rest below. */
	size_t ok = 0;
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < 100; i++) {
			snprintf(key, sizeof key, "tier-remote-%ld-%zu",
			         (long)getpid(), i);
			if (pass == 0)
				put_obj(s, key, KVL_PUT_STORED);
			else
				ok += obj_ok(s, key);
		}
	ASSERT_EQ(ok, 100);
	ASSERT_TRUE(tier_stats(s, 0).spills >= 80);
	ASSERT_U64(tier_stats(s, 0).spills_lost, 0);
	/* The first, long evicted from the top, is below. */
	snprintf(key, sizeof key, "tier-remote-%ld-0", (long)getpid());
	ASSERT_EQ(exists1(low, key), 1);
	kvl_store_close(s);
}

/* ---------------------------------------------------------------- stats */

static void test_stats_render(void **state)
{
	(void)state;
	kvl_store *s = open_ok("tier:?promote=0|mem:?capacity=1MiB|mem:");
	put_obj(kvl__tier_at(s, 1), "s", KVL_PUT_STORED);
	ASSERT_TRUE(obj_ok(s, "s"));
	static char buf[16384];
	size_t need = 0;
	ASSERT_RC(s, kvl_store_stats_render(s, KVL_STATS_PROMETHEUS, buf,
	                                    sizeof buf, &need),
	          KVL_OK);
	ASSERT_CONTAINS(buf, "kvlink_store_hits_total 1\n");
	ASSERT_CONTAINS(buf, "kvlink_store_tier_info{tier=\"0\",uri=\"mem:"
	                     "?capacity=1MiB\"} 1\n");
	ASSERT_CONTAINS(buf, "kvlink_store_tier_hits_total{tier=\"0\"} 0\n");
	ASSERT_CONTAINS(buf, "kvlink_store_tier_hits_total{tier=\"1\"} 1\n");
	ASSERT_CONTAINS(buf, "kvlink_store_tier_objects{tier=\"1\"} 1\n");
	ASSERT_CONTAINS(buf, "kvlink_store_promotions_dropped_total 0\n");
	ASSERT_RC(s, kvl_store_stats_render(s, KVL_STATS_JSON, buf,
	                                    sizeof buf, &need),
	          KVL_OK);
	ASSERT_CONTAINS(buf, "{\"objects\":1,");
	ASSERT_CONTAINS(buf, ",\"tiers\":[{\"uri\":\"mem:?capacity=1MiB\","
	                     "\"hits\":0,");
	ASSERT_CONTAINS(buf, "{\"uri\":\"mem:\",\"hits\":1,\"failures\":0,");
	ASSERT_CONTAINS(buf, "\"promotions\":{\"queued\":0,");
	ASSERT_EQ(buf[strlen(buf) - 2], '}');
	kvl_store_close(s);
}

/* --------------------------------------------------------------- linker */

static void test_linker_loads_from_lower_tier(void **state)
{
	(void)state;
	hcfg cfg = {.swa = 1};
	host src, dst;
	host_init(&src, &cfg);
	host_init(&dst, &cfg);
	kvl_store *s = open_ok("tier:?write=through|fault+mem:?fault.holds=1"
	                       "|fault+mem:?fault.holds=1");
	kvl_store *top = kvl__tier_at(s, 0);
	kvl_linker *ls = open_lk(&src, s, NULL);
	kvl_linker *ld = open_lk(&dst, s, NULL);
	uint64_t live;
	for (size_t i = 0; i < 2; i++) { /* the pools, by both linkers */
		ASSERT_CODE(kvl__fault_regs(kvl__tier_at(s, i), &live), KVL_OK);
		ASSERT_TRUE(live >= 4);
	}
	kvl_hash pg[6];
	make_pages(pg, 6, 6);

	req r;
	req_init(&r, pg, 6);
	req_pool(&r, src.kv, 2, 0);
	req_pool(&r, src.swa, 2, 0);
	fill_req(&src, &r);
	kvl_completion c = offload_sync(ls, 1, &r);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 6, 6);
	/* Only the lower tier keeps them. */
	for (size_t i = 0; i < 6; i++) {
		remove_page(top, &src, src.kv, &pg[i]);
		remove_page(top, &src, src.swa, &pg[i]);
	}
	ASSERT_EQ(lookup(ld, pg, 6, NULL), 6);

	req d;
	req_init(&d, pg, 6);
	req_pool(&d, dst.kv, 8, 0);
	req_pool(&d, dst.swa, 8, 0);
	c = load_sync(ld, 2, &d, NULL);
	expect_completion(&c, KVL_REQ_LOAD, 0, 6, 6);
	check_req(&dst, &d, 6, N_LAYERS);
	ASSERT_TRUE(tier_stats(s, 1).hits >= 12);
	/* The load held its objects where they were, and let them go. */
	uint64_t taken;
	ASSERT_CODE(kvl__fault_holds(kvl__tier_at(s, 1), NULL, NULL, &taken),
	            KVL_OK);
	ASSERT_TRUE(taken >= 12);
	char key[KVL_KEY_MAX];
	for (size_t i = 0; i < 6; i++) {
		key_of(&src, src.kv, &pg[i], key);
		ASSERT_U64(held_at(s, 1, key), 0);
		key_of(&src, src.swa, &pg[i], key);
		ASSERT_U64(held_at(s, 1, key), 0);
	}

	/* The promotions land in the top tier, and a second load reads
	 * from there. */
	uint64_t t0 = now_ms();
	while (!(page_present(top, &src, src.kv, &pg[5]) &&
	         page_present(top, &src, src.swa, &pg[5]))) {
		ASSERT_TRUE_MSG(now_ms() - t0 < AWAIT_MS,
		                "pages not promoted within %d ms", AWAIT_MS);
		sleep_ms(1);
	}
	for (size_t i = 0; i < 6; i++)
		ASSERT_EQ(page_present(top, &src, src.kv, &pg[i]), 1);
	reset_slots(&dst, &d);
	uint64_t top_hits = tier_stats(s, 0).hits;
	c = load_sync(ld, 3, &d, NULL);
	expect_completion(&c, KVL_REQ_LOAD, 0, 6, 6);
	check_req(&dst, &d, 6, N_LAYERS);
	ASSERT_TRUE(tier_stats(s, 0).hits > top_hits);

	kvl_linker_close(ld);
	kvl_linker_close(ls);
	for (size_t i = 0; i < 2; i++) { /* forgotten at close */
		ASSERT_CODE(kvl__fault_regs(kvl__tier_at(s, i), &live), KVL_OK);
		ASSERT_U64(live, 0);
	}
	kvl_store_close(s);
	host_free(&dst);
	host_free(&src);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_uri),
		cmocka_unit_test(test_uri_bad),
		cmocka_unit_test(test_union_lookup),
		cmocka_unit_test(test_promotion),
		cmocka_unit_test(test_put_top_and_through),
		cmocka_unit_test(test_spill_down),
		cmocka_unit_test(test_spill_concurrent_reads),
		cmocka_unit_test(test_spill_from_file),
		cmocka_unit_test(test_failing_tier_degrades),
		cmocka_unit_test(test_remove_all),
		cmocka_unit_test(test_holds_reach_every_tier),
		cmocka_unit_test(test_register_reaches_every_tier),
		cmocka_unit_test(test_close_with_promotions_queued),
		cmocka_unit_test(test_remote_lower_tier),
		cmocka_unit_test(test_stats_render),
		cmocka_unit_test_setup(test_linker_loads_from_lower_tier,
		                       next_test),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
