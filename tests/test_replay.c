/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_replay.c — `kvlink replay`: the hit ratios it reports, through the
 * real linker and embedded store, on small hand-made traces (written inline
 * below, worked out by hand in the comments) and on the shared Mooncake
 * trace, whose exact-LRU token hit ratios are published in the shared
 * README: 8.40 % at 1,000 blocks, 31.65 % at 6,000, 58.19 % at 20,000 and
 * 65.12 % unlimited.
 *
 * The semantics these pin (kvlink's, see docs/replay.md): per request in
 * file order, the lookup's one existence query touches every present block
 * of the request (also those after the first missing one); the hit is the
 * longest present prefix; then the offload touches the present blocks again
 * (its own existence query) and stores the absent ones in order, each
 * evicting the policy's victim when the store is full.
 *
 * Runs the tool named by KVL_TOOL (set by tests/CMakeLists.txt). The trace
 * comes from KVL_TRACE; without it the hand-made tests still run and the
 * program then exits 77 (skipped) saying so.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/kvl_assert.h"

/* One replay's JSON line, as the numbers the tests look at. */
struct run {
	char policy[16];
	long long capacity_blocks; /* -1: null (unlimited) */
	unsigned long long hit_tokens, input_tokens, hit_blocks, blocks;
	unsigned long long evictions, requests, bad_lines, stored_blocks;
	double token_hit_ratio;
};

static unsigned long long json_u64(const char *line, const char *key)
{
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\":", key);
	const char *p = strstr(line, pat);
	if (!p)
		fail_msg("no \"%s\" in %s", key, line);
	p += strlen(pat);
	if (!strncmp(p, "null", 4))
		return ~0ull;
	return strtoull(p, NULL, 10);
}

static void parse_run(const char *line, struct run *r)
{
	memset(r, 0, sizeof *r);
	const char *p = strstr(line, "\"policy\":\"");
	if (!p)
		fail_msg("no policy in %s", line);
	p += 10;
	size_t n = strcspn(p, "\"");
	if (n >= sizeof r->policy)
		fail_msg("policy too long in %s", line);
	memcpy(r->policy, p, n);
	unsigned long long cap = json_u64(line, "capacity_blocks");
	r->capacity_blocks = cap == ~0ull ? -1 : (long long)cap;
	r->hit_tokens = json_u64(line, "hit_tokens");
	r->input_tokens = json_u64(line, "input_tokens");
	r->hit_blocks = json_u64(line, "hit_blocks");
	r->blocks = json_u64(line, "blocks");
	r->evictions = json_u64(line, "evictions");
	r->stored_blocks = json_u64(line, "stored_blocks");
	r->requests = json_u64(line, "requests");
	r->bad_lines = json_u64(line, "bad_lines");
	const char *q = strstr(line, "\"token_hit_ratio\":");
	if (!q)
		fail_msg("no token_hit_ratio in %s", line);
	r->token_hit_ratio = strtod(q + 18, NULL);
}

/* Runs `kvlink replay --json ARGS TRACE` and parses up to cap runs. Fails
 * the test unless the tool exits 0. Returns the number of runs. */
static size_t replay(const char *trace, const char *args, struct run *runs,
                     size_t cap)
{
	const char *tool = getenv("KVL_TOOL");
	if (!tool || !*tool)
		fail_msg("KVL_TOOL is not set (run through ctest)");
	if (strchr(tool, '\'') || strchr(trace, '\''))
		fail_msg("paths with quotes are not supported");
	char cmd[4096];
	snprintf(cmd, sizeof cmd, "'%s' replay --json --no-progress %s '%s'",
	         tool, args, trace);
	FILE *f = popen(cmd, "r");
	if (!f)
		fail_msg("cannot run %s", cmd);
	char line[4096];
	size_t n = 0;
	while (fgets(line, sizeof line, f)) {
		if (n == cap)
			fail_msg("more than %zu runs from %s", cap, cmd);
		parse_run(line, &runs[n++]);
	}
	int st = pclose(f);
	if (st != 0)
		fail_msg("%s: exit status %d", cmd, st);
	return n;
}

/* Writes text to a new temporary file; its path goes into path (64
 * bytes). */
static void write_trace(char *path, const char *text)
{
	const char *dir = getenv("TMPDIR");
	snprintf(path, 64, "%s/kvl_replay_XXXXXX",
	         dir && strlen(dir) < 40 ? dir : "/tmp");
	int fd = mkstemp(path);
	if (fd < 0)
		fail_msg("mkstemp(%s) failed", path);
	size_t len = strlen(text);
	if (write(fd, text, len) != (ssize_t)len)
		fail_msg("write %s failed", path);
	close(fd);
}

#define REQ(in, ids)                                                        \
	"{\"timestamp\": 0, \"input_length\": " #in                        \
	", \"output_length\": 1, \"hash_ids\": " ids "}\n"

/* ---------------------------------------------------- hand-made traces */

/* Exact LRU, capacity 3, every block looked up and stored
 * (--partial-blocks; old → new after each request):
 *   1. [1,2,3] 1536: hit 0; store 1,2,3            1 2 3
 *   2. [1,2,3] 1500: hit 3 = min(1536, 1500) tokens 1 2 3
 *   3. [4]      100: hit 0; 4 evicts 1             2 3 4
 *   4. [1,2,3] 1500: 1 is missing: hit 0, but the lookup and the offload
 *      touch 2 and 3 (after the first miss), so storing 1 evicts 4
 *                                                  2 3 1
 *   5. [5]      512: evicts 2                      3 1 5
 *   6. [1]      512: hit 1 = 512 tokens
 * Token hits 1500 + 512 = 2012 of 5660; blocks 4 of 12; 3 evictions. A
 * simulator that walks each request block by block (insert 1 evicting 2,
 * insert 2 evicting 3, …) would end request 4 with 1 2 3, evict 1 in
 * request 5 and miss request 6. */
static const char t_lru[] =
	REQ(1536, "[1, 2, 3]") REQ(1500, "[1,2,3]") REQ(100, "[4]")
	REQ(1500, "[1, 2, 3]") REQ(512, "[5]") REQ(512, "[1]");

static void test_lru_touch_order(void **state)
{
	(void)state;
	char path[64];
	struct run r[1];
	write_trace(path, t_lru);
	replay(path, "--partial-blocks --policy lru --capacity-blocks 3", r, 1);
	unlink(path);
	ASSERT_U64(r[0].requests, 6);
	ASSERT_U64(r[0].input_tokens, 5660);
	ASSERT_U64(r[0].hit_tokens, 2012);
	ASSERT_U64(r[0].blocks, 12);
	ASSERT_U64(r[0].hit_blocks, 4);
	ASSERT_U64(r[0].evictions, 3);
	assert_string_equal(r[0].policy, "lru");
}

/* Partly filled last blocks and empty requests, unlimited capacity:
 *   [7,8] 700;  [] 0;  [7,8] 700;  [7] 3.
 * By default a request's blocks are its whole ones (input_length / 512):
 *   [7]: hit 0, store 7;  nothing;  [7]: hit 1 block, 512 tokens;  none
 *   (3 tokens fill no block). Token hits 512 of 1403; blocks 1 of 2;
 *   1 stored.
 * With --partial-blocks every hash_id counts:
 *   hit 0, store 7 and 8;  nothing;  hit 2 blocks, but only
 *   min(2 x 512, 700) = 700 tokens;  hit 1 block, 3 tokens.
 *   Token hits 703 of 1403; blocks 3 of 5; 2 stored. */
static const char t_partial[] =
	REQ(700, "[7, 8]") REQ(0, "[]") REQ(700, "[7, 8]") REQ(3, "[7]");

static void test_partial_blocks(void **state)
{
	(void)state;
	static const struct {
		const char *args;
		unsigned long long hit_tokens, blocks, hit_blocks, stored;
	} want[] = {
		{"--sweep unlimited --policy lru,slru", 512, 2, 1, 1},
		{"--partial-blocks --sweep unlimited --policy lru,slru", 703, 5,
		 3, 2},
	};
	char path[64];
	write_trace(path, t_partial);
	for (size_t w = 0; w < 2; w++) {
		struct run r[2];
		size_t n = replay(path, want[w].args, r, 2);
		ASSERT_U64(n, 2);
		for (size_t i = 0; i < n; i++) {
			ASSERT_U64(r[i].capacity_blocks, -1);
			ASSERT_U64(r[i].input_tokens, 1403);
			ASSERT_U64(r[i].hit_tokens, want[w].hit_tokens);
			ASSERT_U64(r[i].blocks, want[w].blocks);
			ASSERT_U64(r[i].hit_blocks, want[w].hit_blocks);
			ASSERT_U64(r[i].stored_blocks, want[w].stored);
			ASSERT_U64(r[i].evictions, 0);
		}
	}
	unlink(path);
}

/* A prefix read twice survives a scan under slru, not under lru.
 * Capacity 4: [1,2] twice (the second hits both), the scan [10,11,12],
 * then [1,2] again.
 *   lru: storing 12 evicts 1, so the last request misses; storing 1 again
 *        evicts 10. Token hits 1024 of 4608, 2 evictions.
 *   slru: the hits promote 1 and 2 to protected; 10, 11 and 12 go to
 *        probation, and 12 evicts 10 (the probation tail): the last
 *        request hits both. Token hits 2048, 1 eviction. */
static const char t_scan[] =
	REQ(1024, "[1, 2]") REQ(1024, "[1, 2]") REQ(1536, "[10, 11, 12]")
	REQ(1024, "[1, 2]");

static void test_scan(void **state)
{
	(void)state;
	char path[64];
	struct run r[2];
	write_trace(path, t_scan);
	size_t n = replay(path, "--sweep 4 --policy lru,slru", r, 2);
	unlink(path);
	ASSERT_U64(n, 2);
	assert_string_equal(r[0].policy, "lru");
	ASSERT_U64(r[0].hit_tokens, 1024);
	ASSERT_U64(r[0].hit_blocks, 2);
	ASSERT_U64(r[0].evictions, 2);
	assert_string_equal(r[1].policy, "slru");
	ASSERT_U64(r[1].hit_tokens, 2048);
	ASSERT_U64(r[1].hit_blocks, 4);
	ASSERT_U64(r[1].evictions, 1);
}

/* slru's ghost: a block evicted from probation and stored again goes to
 * protected. Capacity 3; requests of one block: 1 2 3 4 1 5 6 7 1.
 *   lru: 4 evicts 1; 1 evicts 2; 5, 6, 7 evict 3, 4, 1: the last 1
 *        misses (and evicts 5). 0 hits, 6 evictions.
 *   slru: 4 evicts 1 (remembered); 1 evicts 2 and, remembered, goes to
 *        protected; 5, 6, 7 evict 3, 4, 5 from probation: the last 1
 *        hits. 512 tokens, 5 evictions. */
static const char t_ghost[] =
	REQ(512, "[1]") REQ(512, "[2]") REQ(512, "[3]") REQ(512, "[4]")
	REQ(512, "[1]") REQ(512, "[5]") REQ(512, "[6]") REQ(512, "[7]")
	REQ(512, "[1]");

static void test_ghost(void **state)
{
	(void)state;
	char path[64];
	struct run r[2];
	write_trace(path, t_ghost);
	size_t n = replay(path, "--sweep 3 --policy lru,slru", r, 2);
	unlink(path);
	ASSERT_U64(n, 2);
	ASSERT_U64(r[0].hit_tokens, 0);
	ASSERT_U64(r[0].evictions, 6);
	ASSERT_U64(r[1].hit_tokens, 512);
	ASSERT_U64(r[1].hit_blocks, 1);
	ASSERT_U64(r[1].evictions, 5);
}

/* The default policy is adaptive, and --skip-bad counts what it skips. */
static void test_default_and_skip(void **state)
{
	(void)state;
	char path[64];
	struct run r[1];
	write_trace(path, REQ(512, "[1]") "{\"timestamp\": 1}\n"
	                  REQ(512, "[1]") "not json\n");
	replay(path, "--skip-bad 2>/dev/null", r, 1);
	unlink(path);
	assert_string_equal(r[0].policy, "adaptive");
	ASSERT_U64(r[0].requests, 2);
	ASSERT_U64(r[0].bad_lines, 2);
	ASSERT_U64(r[0].hit_tokens, 512);
}

/* ------------------------------------------------------ the real trace */

static const char *trace_path(void)
{
	const char *t = getenv("KVL_TRACE");
	return t && *t && access(t, R_OK) == 0 ? t : NULL;
}

/* The shared README's exact-LRU numbers, and slru against them. The exact
 * token counts pin the replay beyond the README's two decimals. */
static void test_synthetic_trace(void **state)
{
	(void)state;
	static const struct {
		long long cap;
		double lru_pct;              /* the README's */
		unsigned long long lru_hits; /* hit tokens, exact */
	} ref[] = {
		{1000, 8.40, 5142055},
		{6000, 31.65, 19365920},
		{20000, 58.19, 35610903},
		{-1, 65.12, 39852661},
	};
	struct run r[8];
	size_t n = replay(trace_path(),
	                  "--partial-blocks --sweep 1000,6000,20000,unlimited "
	                  "--policy lru,slru",
	                  r, 8);
	ASSERT_U64(n, 8);
	for (size_t i = 0; i < 4; i++) {
		const struct run *lru = &r[2 * i], *slru = &r[2 * i + 1];
		assert_string_equal(lru->policy, "lru");
		assert_string_equal(slru->policy, "slru");
		ASSERT_U64(lru->capacity_blocks, ref[i].cap);
		ASSERT_U64(lru->requests, 3993);
		ASSERT_U64(lru->input_tokens, 61194628);
		double pct = 100.0 * (double)lru->hit_tokens /
		             (double)lru->input_tokens;
		if (fabs(pct - ref[i].lru_pct) >= 0.005)
			fail_msg("lru at %lld blocks: %.4f %%, the README says "
			         "%.2f %%",
			         ref[i].cap, pct, ref[i].lru_pct);
		ASSERT_U64(lru->hit_tokens, ref[i].lru_hits);
		print_message("    %6lld blocks: lru %.2f %%, slru %.2f %%\n",
		              ref[i].cap, pct,
		              100.0 * (double)slru->hit_tokens /
		                      (double)slru->input_tokens);
		if (slru->hit_tokens < lru->hit_tokens)
			fail_msg("slru below lru at %lld blocks: %llu < %llu "
			         "tokens",
			         ref[i].cap, slru->hit_tokens, lru->hit_tokens);
	}
	/* Unlimited: every policy the same, no eviction. */
	ASSERT_U64(r[7].hit_tokens, r[6].hit_tokens);
	ASSERT_U64(r[7].evictions, 0);
	/* Clearly better at 6000 blocks: at least 2 points. */
	double gain = 100.0 * ((double)r[3].hit_tokens - (double)r[2].hit_tokens) /
	              (double)r[2].input_tokens;
	if (gain < 2.0)
		fail_msg("slru gains only %.2f points over lru at 6000 blocks",
		         gain);
}

/* By default only whole blocks count: 3,989 of the trace's 3,993
 * requests end in a partly filled block, leaving 117,888 of its 121,877
 * hash_ids. The exact-LRU token counts are those of an independent
 * simulator of the same accesses (bench/policy_sim.py). */
static void test_synthetic_trace_whole_blocks(void **state)
{
	(void)state;
	static const struct {
		long long cap;
		unsigned long long lru_hits;
	} ref[] = {{1000, 5227520}, {6000, 19796992}};
	struct run r[4];
	size_t n = replay(trace_path(), "--sweep 1000,6000 --policy lru,slru",
	                  r, 4);
	ASSERT_U64(n, 4);
	for (size_t i = 0; i < 2; i++) {
		const struct run *lru = &r[2 * i], *slru = &r[2 * i + 1];
		assert_string_equal(lru->policy, "lru");
		ASSERT_U64(lru->capacity_blocks, ref[i].cap);
		ASSERT_U64(lru->blocks, 117888);
		ASSERT_U64(slru->blocks, 117888);
		ASSERT_U64(lru->input_tokens, 61194628);
		ASSERT_U64(lru->hit_tokens, ref[i].lru_hits);
		if (slru->hit_tokens < lru->hit_tokens)
			fail_msg("slru below lru at %lld blocks", ref[i].cap);
	}
}

int main(void)
{
	const struct CMUnitTest hand[] = {
		cmocka_unit_test(test_lru_touch_order),
		cmocka_unit_test(test_partial_blocks),
		cmocka_unit_test(test_scan),
		cmocka_unit_test(test_ghost),
		cmocka_unit_test(test_default_and_skip),
	};
	int failed = cmocka_run_group_tests_name("replay", hand, NULL, NULL);
	if (failed)
		return 1;
	if (!trace_path()) {
		const char *t = getenv("KVL_TRACE");
		printf("skipped: the shared trace (KVL_TRACE=%s) is not "
		       "readable: its reference hit ratios were not checked\n",
		       t ? t : "(unset)");
		return 77;
	}
	const struct CMUnitTest trace[] = {
		cmocka_unit_test(test_synthetic_trace),
		cmocka_unit_test(test_synthetic_trace_whole_blocks),
	};
	return cmocka_run_group_tests_name("replay-trace", trace, NULL, NULL)
	               ? 1
	               : 0;
}
