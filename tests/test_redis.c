/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_redis.c — the redis:// store against real servers: a standalone
 * redis-server and a Redis Cluster of 3 masters with one replica each,
 * started on loopback ports by tests/redis/run.sh (which this program runs
 * itself under when started without them, and which stops every server on
 * exit, also when a test crashes). More servers (a password, maxmemory, a
 * server to kill, pause or restart) are started by tests/redis/servers.sh
 * in the same directory, so they are stopped the same way.
 *
 * Covers: a round trip of every operation, databases, TTLs, stats and the
 * size limit (standalone); a wrong or missing password; a server down,
 * restarted, or paused past the timeout (clear errors in time, recovery
 * without reopening); eviction under maxmemory allkeys-lru, also between a
 * lookup and a load of the linker; the linker's offload / lookup /
 * layer-wise load over both kinds of deployment; cluster slots against
 * CLUSTER KEYSLOT and keys spread over every master; ASK and MOVED
 * redirections while a slot is migrated by hand (CLUSTER SETSLOT, MIGRATE);
 * reads from replicas; and a master killed during a stream of load batches:
 * no wait hangs, no page reported valid has wrong bytes, and full batches
 * succeed again once the replica has taken over.
 *
 * Exits 77 (skipped) without redis-server, or in a build without hiredis.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
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
#include "support/shell.h"
#include "support/rand.h"
#include "support/stores.h"

#include "kvl_config.h"
#include "kvlink.h"

#if !KVL_HAVE_REDIS
int main(void)
{
	printf("skipped: this kvlink is built without hiredis (no redis://)\n");
	return 77;
}
#else

#include "store/redis/spec.h"

/* ================================================================ helpers */

static int standalone_port;
static int cluster_ports[6]; /* masters first */

/* redis-cli against 127.0.0.1:port; the output into out. */
#define CLI(out, port, fmt, ...)                                            \
	shell(out, sizeof(out), "redis-cli -h 127.0.0.1 -p %d " fmt, port,   \
	      ##__VA_ARGS__)

static long long cli_int(int port, const char *args)
{
	char out[256];
	if (shell(out, sizeof out, "redis-cli -h 127.0.0.1 -p %d %s", port,
	          args) != 0)
		fail_msg("redis-cli -p %d %s failed: %s", port, args, out);
	return strtoll(out, NULL, 10);
}

/* servers.sh CMD DIR ARGS: the output (a port for "standalone"). */
static int servers(char *out, size_t cap, const char *args)
{
	return shell(out, cap,
	             "bash \"$KVL_REDIS_SERVERS\" %.*s \"$KVL_REDIS_DIR\" %s",
	             (int)strcspn(args, " "), args,
	             strchr(args, ' ') ? strchr(args, ' ') + 1 : "");
}

static int start_server(const char *opts)
{
	char cmd[512], out[256];
	snprintf(cmd, sizeof cmd, "standalone %s", opts);
	if (servers(out, sizeof out, cmd) != 0)
		fail_msg("could not start a redis-server (%s): %s", opts, out);
	return atoi(out);
}

static void server_do(const char *what, int port)
{
	char cmd[128], out[256];
	snprintf(cmd, sizeof cmd, "%s %d", what, port);
	if (servers(out, sizeof out, cmd) != 0)
		fail_msg("servers.sh %s failed: %s", cmd, out);
}

static int open_err(char *eb, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int open_err(char *eb, size_t cap, const char *fmt, ...)
{
	char uri[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(uri, sizeof uri, fmt, ap);
	va_end(ap);
	kvl_store *s = NULL;
	int rc = kvl_store_open(uri, &s, eb, cap);
	if (rc == 0) {
		kvl_store_close(s);
		fail_msg("kvl_store_open(\"%s\") succeeded", uri);
	}
	assert_null(s);
	return rc;
}

static void cluster_uri(char *buf, size_t cap, const char *opts)
{
	int n = snprintf(buf, cap, "redis://");
	for (int i = 0; i < 6; i++)
		n += snprintf(buf + n, cap - (size_t)n, "%s127.0.0.1:%d",
		              i ? "," : "", cluster_ports[i]);
	snprintf(buf + n, cap - (size_t)n, "%s%s", opts[0] ? "?" : "", opts);
}

/* ---------------------------------------------------- an engine's pages */

#define E_LAYERS 4
#define E_COMP (8u << 10) /* bytes of k (and of v) per layer and page */
#define E_PAGE 16         /* tokens per page */

/* One engine: pool "kv", k and v for each layer, `slots` slots. */
typedef struct eng {
	uint8_t *mem;
	size_t slots;
	kvl_layout *l;
	int pool;
	kvl_linker *lk;
} eng;

static uint8_t *eng_at(const eng *e, uint32_t layer, int comp, size_t slot)
{
	return e->mem + ((size_t)(layer * 2 + (uint32_t)comp) * e->slots +
	                 slot) * E_COMP;
}

static void eng_init(eng *e, size_t slots, kvl_store *s)
{
	memset(e, 0, sizeof *e);
	e->slots = slots;
	e->mem = aligned_alloc(64, (size_t)E_LAYERS * 2 * slots * E_COMP);
	assert_non_null(e->mem);
	memset(e->mem, 0xee, (size_t)E_LAYERS * 2 * slots * E_COMP);
	char err[256];
	kvl_shard one = KVL_SHARD_SINGLE;
	ASSERT_CODE(kvl_layout_create("redis-test/bf16", E_PAGE, &one, &e->l,
	                              err, sizeof err),
	            0);
	ASSERT_CODE(kvl_layout_add_pool(e->l, "kv", KVL_HIT_ALL_PAGES, 0, 0,
	                                &e->pool),
	            0);
	for (uint32_t ly = 0; ly < E_LAYERS; ly++)
		for (int c = 0; c < 2; c++) {
			kvl_buffer b = { .base = eng_at(e, ly, c, 0),
				         .page_stride = E_COMP,
				         .page_bytes = E_COMP,
				         .num_pages = slots,
				         .mem = KVL_MEM_HOST };
			ASSERT_CODE(kvl_layout_add_buffer(e->l, e->pool,
			                                  c ? "v" : "k", ly, &b),
			            0);
		}
	ASSERT_CODE(kvl_layout_finalize(e->l), 0);
	int rc = kvl_linker_open(s, e->l, NULL, &e->lk, err, sizeof err);
	if (rc)
		fail_msg("kvl_linker_open: %s", err);
}

static void eng_free(eng *e)
{
	kvl_linker_close(e->lk);
	kvl_layout_free(e->l);
	free(e->mem);
}

/* The bytes page h must hold in layer ly, component c. */
static void page_bytes(uint8_t *out, const kvl_hash *h, uint32_t ly, int c)
{
	uint64_t seed;
	memcpy(&seed, h->bytes, 8);
	fill_pattern(out, E_COMP,
	             seed ^ (ly * 2 + (uint64_t)c + 1) * 0x1234567);
}

static void eng_fill(eng *e, size_t slot, const kvl_hash *h)
{
	for (uint32_t ly = 0; ly < E_LAYERS; ly++)
		for (int c = 0; c < 2; c++)
			page_bytes(eng_at(e, ly, c, slot), h, ly, c);
}

static int eng_check(const eng *e, size_t slot, const kvl_hash *h)
{
	static _Thread_local uint8_t want[E_COMP];
	for (uint32_t ly = 0; ly < E_LAYERS; ly++)
		for (int c = 0; c < 2; c++) {
			page_bytes(want, h, ly, c);
			if (memcmp(eng_at(e, ly, c, slot), want, E_COMP))
				return 0;
		}
	return 1;
}

/* n page hashes of a prompt drawn from seed. */
static kvl_hash *make_pages(size_t n, uint64_t seed)
{
	uint64_t *tok = malloc(n * E_PAGE * sizeof *tok);
	kvl_hash *h = malloc(n * sizeof *h);
	assert_non_null(tok);
	assert_non_null(h);
	uint64_t x = seed;
	for (size_t i = 0; i < n * E_PAGE; i++)
		tok[i] = splitmix64(&x) % 128000;
	size_t got = 0;
	ASSERT_CODE(kvl_hash_pages(tok, n * E_PAGE, E_PAGE, NULL, h, n, &got),
	            0);
	ASSERT_EQ(got, n);
	free(tok);
	return h;
}

/* Waits for the completion of request id (HANG_MS at most): 0, or -1. No
 * cmocka assertion: also used off the main thread. */
static int poll_done(kvl_linker *lk, uint64_t id, kvl_completion *out)
{
	uint64_t t0 = now_ms();
	while (now_ms() - t0 < HANG_MS) {
		kvl_completion c[4];
		size_t n = 0;
		if (kvl_linker_poll(lk, c, 4, &n, 100) != 0)
			return -1;
		for (size_t i = 0; i < n; i++)
			if (c[i].id == id) {
				*out = c[i];
				return 0;
			}
	}
	return -1;
}

static kvl_completion wait_done(kvl_linker *lk, uint64_t id)
{
	kvl_completion c = { 0 };
	if (poll_done(lk, id, &c) < 0)
		fail_msg("request %llu never completed", (unsigned long long)id);
	return c;
}

/* Offloads pages[0..n) from slots 0..n of src and waits for it. */
static kvl_completion offload_all(eng *src, const kvl_hash *pages, size_t n,
                                  uint64_t id)
{
	size_t *slots = malloc(n * sizeof *slots);
	assert_non_null(slots);
	for (size_t i = 0; i < n; i++) {
		slots[i] = i;
		eng_fill(src, i, &pages[i]);
	}
	const size_t *sp[1] = { slots };
	ASSERT_CODE(kvl_linker_offload(src->lk, id, pages, n, sp, NULL), 0);
	ASSERT_CODE(kvl_linker_flush(src->lk, 20000), 0);
	kvl_completion c = wait_done(src->lk, id);
	free(slots);
	return c;
}

/* Loads pages[0..n) into slots 0..n of dst (n <= 64), layer by layer, and
 * waits for every layer and the completion; every page reported valid is
 * checked (*wrong counts bad ones). 0, or -1 with the reason in why when
 * something hung (a wait that timed out, no completion). No cmocka
 * assertion: also used off the main thread. */
static int try_load(eng *dst, const kvl_hash *pages, size_t n, uint64_t id,
                    kvl_completion *out, int *wrong, char *why, size_t cap)
{
	size_t slots[64];
	for (size_t i = 0; i < n; i++)
		slots[i] = i;
	memset(dst->mem, 0xee, (size_t)E_LAYERS * 2 * dst->slots * E_COMP);
	const size_t *sp[1] = { slots };
	uint64_t batch;
	int rc = kvl_linker_load(dst->lk, id, pages, n, sp);
	if (rc == 0)
		rc = kvl_linker_start(dst->lk, &batch);
	if (rc) {
		snprintf(why, cap, "load/start: %s", kvl_err_name(rc));
		return -1;
	}
	for (uint32_t ly = 0; ly < E_LAYERS; ly++) {
		rc = kvl_linker_wait(dst->lk, batch, ly, 15000);
		if (rc == KVL_ETIMEDOUT) {
			snprintf(why, cap, "layer %u of a load batch did not "
			         "complete within 15 s", ly);
			return -1;
		}
		if (rc)
			break;
	}
	if (poll_done(dst->lk, id, out) < 0) {
		snprintf(why, cap, "load %llu never completed",
		         (unsigned long long)id);
		return -1;
	}
	for (size_t i = 0; i < out->valid_pages; i++)
		if (!eng_check(dst, i, &pages[i]))
			(*wrong)++;
	return 0;
}

static kvl_completion load_all(eng *dst, const kvl_hash *pages, size_t n,
                               uint64_t id, int *wrong)
{
	kvl_completion c = { 0 };
	char why[256];
	if (try_load(dst, pages, n, id, &c, wrong, why, sizeof why) < 0)
		fail_msg("%s", why);
	return c;
}

/* ========================================================== standalone */

static void test_standalone_ops(void **state)
{
	(void)state;
	int P = standalone_port;
	kvl_store *s = open_okf("redis://127.0.0.1:%d", P);
	const size_t len = 100000;
	uint8_t *a = pattern(len, 1), *d = calloc(1, len);
	assert_non_null(d);

	/* Three pieces in, three ranges out, one of them empty. */
	const char *k = "ops/a";
	remove1(s, k);
	kvl_iov pc[] = { { a, 10 }, { a + 10, 60000 }, { a + 60010, len - 60010 } };
	size_t np = 3;
	int pr = 99;
	ASSERT_CODE(kvl_store_put(s, &k, 1, pc, &np, &pr), 0);
	ASSERT_CODE(pr, KVL_PUT_STORED);
	ASSERT_EQ(cli_int(P, "strlen ops/a"), len);
	ASSERT_CODE(put1(s, k, a, 5), KVL_PUT_PRESENT);
	kvl_range rg[] = { { 50000, d + 50000, 50000 }, { 7, d + 7, 0 },
		           { 0, d, 50000 } };
	size_t nr = 3;
	int gr = 99;
	ASSERT_CODE(kvl_store_get(s, &k, 1, rg, &nr, &gr), 0);
	ASSERT_CODE(gr, 0);
	assert_memory_equal(d, a, len);
	/* Ranges far apart: read with more than one GETRANGE. */
	kvl_range far[] = { { 1, d, 1 }, { len - 2, d + 1, 2 } };
	nr = 2;
	ASSERT_CODE(kvl_store_get(s, &k, 1, far, &nr, &gr), 0);
	ASSERT_CODE(gr, 0);
	ASSERT_EQ(d[0], a[1]);
	ASSERT_EQ(d[2], a[len - 1]);
	/* Overlapping ranges. */
	kvl_range ov[] = { { 0, d, 1000 }, { 500, d + 2000, 1000 } };
	ASSERT_CODE(kvl_store_get(s, &k, 1, ov, &nr, &gr), 0);
	ASSERT_CODE(gr, 0);
	assert_memory_equal(d, a, 1000);
	assert_memory_equal(d + 2000, a + 500, 1000);
	ASSERT_CODE(get1(s, k, len, d, 1), KVL_ERANGE);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "ops/a");
	ASSERT_CONTAINS(kvl_store_errmsg(s), "100000 bytes");
	ASSERT_CODE(get1(s, "ops/none", 0, d, 1), KVL_ENOTFOUND);

	/* Stats: DBSIZE and the client's counters. */
	kvl_store_stats st;
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_EQ(st.objects, cli_int(P, "dbsize"));
	assert_true(st.bytes > len);
	ASSERT_EQ(st.capacity, 0); /* no maxmemory */
	assert_true(st.hits >= 3 && st.misses >= 1 && st.puts >= 1);
	ASSERT_EQ(remove1(s, k), 1);
	ASSERT_EQ(remove1(s, k), 0);
	ASSERT_EQ(exists1(s, k), 0);
	kvl_store_close(s);

	/* The smallest cap on bytes in flight: one command at a time. */
	s = open_okf("redis://127.0.0.1:%d?inflight=4096", P);
	{
		enum { N = 20 };
		const char *ks[N];
		char kb[N][16];
		kvl_iov iv[N];
		kvl_range rr[N];
		size_t one[N];
		int res[N];
		int res64[N];
		for (int i = 0; i < N; i++) {
			snprintf(kb[i], sizeof kb[i], "inf/%02d", i);
			ks[i] = kb[i];
			iv[i] = (kvl_iov){ a + i * 4000, 4000 };
			rr[i] = (kvl_range){ 0, d + i * 4000, 4000 };
			one[i] = 1;
		}
		ASSERT_CODE(kvl_store_remove(s, ks, N, res), 0);
		ASSERT_CODE(kvl_store_put(s, ks, N, iv, one, res), 0);
		for (int i = 0; i < N; i++)
			ASSERT_CODE(res[i], KVL_PUT_STORED);
		memset(d, 0, len);
		ASSERT_CODE(kvl_store_get(s, ks, N, rr, one, res64), 0);
		for (int i = 0; i < N; i++)
			ASSERT_CODE(res64[i], 0);
		assert_memory_equal(d, a, N * 4000);
		ASSERT_CODE(kvl_store_remove(s, ks, N, res), 0);
	}
	kvl_store_close(s);

	/* A database by path or option; keys do not cross databases. */
	s = open_okf("redis://127.0.0.1:%d/5", P);
	kvl_store *s0 = open_okf("redis://127.0.0.1:%d", P);
	kvl_store *s5 = open_okf("redis://127.0.0.1:%d?db=5", P);
	ASSERT_CODE(put1(s, "db/k", a, 10), KVL_PUT_STORED);
	ASSERT_EQ(cli_int(P, "-n 5 exists db/k"), 1);
	ASSERT_EQ(cli_int(P, "-n 0 exists db/k"), 0);
	ASSERT_EQ(exists1(s5, "db/k"), 1);
	ASSERT_EQ(exists1(s0, "db/k"), 0);
	kvl_store_close(s);
	kvl_store_close(s0);
	kvl_store_close(s5);

	/* A TTL on every object stored. */
	s = open_okf("redis://127.0.0.1:%d?ttl=100", P);
	ASSERT_CODE(put1(s, "ttl/k", a, 10), KVL_PUT_STORED);
	long long ttl = cli_int(P, "ttl ttl/k");
	assert_true(ttl > 0 && ttl <= 100);
	kvl_store_close(s);

	/* Refused at open, with the reason. */
	char eb[512];
	ASSERT_CODE(open_err(eb, sizeof eb, "redis://127.0.0.1:%d,127.0.0.1:1",
	                     P),
	            KVL_EINVAL);
	ASSERT_CONTAINS(eb, "standalone");
	ASSERT_CODE(open_err(eb, sizeof eb, "redis://127.0.0.1:%d?replicas=1",
	                     P),
	            KVL_EINVAL);
	ASSERT_CONTAINS(eb, "replicas=1 needs a Redis Cluster");
	ASSERT_CODE(open_err(eb, sizeof eb, "redis://127.0.0.1:%d/99999", P),
	            KVL_EINVAL);
	ASSERT_CONTAINS(eb, "SELECT 99999");

	/* Objects above proto-max-bulk-len are refused before sending. */
	char out[64];
	CLI(out, P, "config set proto-max-bulk-len 1mb");
	s = open_okf("redis://127.0.0.1:%d", P);
	uint8_t *big = pattern((1u << 20) + 1, 3);
	ASSERT_CODE(put1(s, "ops/big", big, (1u << 20) + 1), KVL_ERANGE);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "proto-max-bulk-len");
	ASSERT_CODE(put1(s, "ops/big", big, 1u << 20), KVL_PUT_STORED);
	CLI(out, P, "config set proto-max-bulk-len 512mb");
	remove1(s, "ops/big");
	kvl_store_close(s);
	free(big);
	free(a);
	free(d);
}

static void linker_roundtrip(const char *uri, uint64_t seed)
{
	kvl_store *s = open_ok(uri);
	eng src, dst;
	eng_init(&src, 48, s);
	eng_init(&dst, 48, s);
	const size_t n = 40;
	kvl_hash *pages = make_pages(n, seed);

	kvl_completion c = offload_all(&src, pages, n, 1);
	ASSERT_CODE(c.status, 0);
	ASSERT_EQ(c.valid_pages, n);
	size_t prefix = 99;
	ASSERT_CODE(kvl_linker_lookup(dst.lk, pages, n, NULL, &prefix),
	            0);
	ASSERT_EQ(prefix, n);
	int wrong = 0;
	c = load_all(&dst, pages, n, 2, &wrong);
	ASSERT_CODE(c.status, 0);
	ASSERT_EQ(c.valid_pages, n);
	ASSERT_EQ(wrong, 0);
	/* Offloading again stores nothing new. */
	c = offload_all(&src, pages, n, 3);
	ASSERT_CODE(c.status, 0);

	eng_free(&src);
	eng_free(&dst);
	free(pages);
	kvl_store_close(s);
}

static void test_linker_standalone(void **state)
{
	(void)state;
	char uri[128];
	snprintf(uri, sizeof uri, "redis://127.0.0.1:%d?inflight=256KiB",
	         standalone_port);
	linker_roundtrip(uri, 11);
}

static void test_wrong_password(void **state)
{
	(void)state;
	int P = start_server("--requirepass p@ss:w/rd");
	char eb[512];
	ASSERT_CODE(open_err(eb, sizeof eb, "redis://:wrong@127.0.0.1:%d", P),
	            KVL_EIO);
	ASSERT_CONTAINS(eb, "authentication failed");
	ASSERT_CONTAINS(eb, "WRONGPASS");
	ASSERT_CODE(open_err(eb, sizeof eb, "redis://nobody:wrong@127.0.0.1:%d",
	                     P),
	            KVL_EIO);
	ASSERT_CONTAINS(eb, "as user nobody");
	ASSERT_CODE(open_err(eb, sizeof eb, "redis://127.0.0.1:%d", P), KVL_EIO);
	ASSERT_CONTAINS(eb, "NOAUTH");
	ASSERT_CONTAINS(eb, "needs a password");
	/* Right, %-escaped, with and without the user name. */
	kvl_store *s = open_okf("redis://:p%%40ss%%3Aw%%2Frd@127.0.0.1:%d", P);
	ASSERT_CODE(put1(s, "pw/k", "x", 1), KVL_PUT_STORED);
	kvl_store_close(s);
	s = open_okf("redis://default:p%%40ss%%3Aw%%2Frd@127.0.0.1:%d", P);
	ASSERT_EQ(exists1(s, "pw/k"), 1);
	kvl_store_close(s);
}

/* Tenants: tenant=NAME puts every key of the handle under "kvl1:NAME:", so
 * Redis ACL key patterns separate tenants (the docs/redis.md example):
 * each tenant reads and writes its own keys only, the same key names of
 * two tenants never meet, and a key outside the user's patterns is
 * KVL_EPERM naming NOPERM, not an I/O error. */
static void test_tenants(void **state)
{
	(void)state;
	int P = start_server("");
	char out[512];
	for (int t = 0; t < 2; t++)
		ASSERT_CODE(CLI(out, P, "ACL SETUSER tenant%c on '>pw%c' "
		                        "'~kvl1:tenant%c:*' '+@all'",
		                'A' + t, 'A' + t, 'A' + t),
		            0);
	kvl_store *a = open_okf("redis://tenantA:pwA@127.0.0.1:%d"
	                        "?tenant=tenantA", P);
	kvl_store *b = open_okf("redis://tenantB:pwB@127.0.0.1:%d"
	                        "?tenant=tenantB", P);
	uint8_t va[32] = { 0xa }, vb[32] = { 0xb }, d[32];
	ASSERT_CODE(put1(a, "tn/k", va, sizeof va), KVL_PUT_STORED);
	ASSERT_EQ(exists1(b, "tn/k"), 0); /* B's tn/k is another key */
	ASSERT_CODE(put1(b, "tn/k", vb, sizeof vb), KVL_PUT_STORED);
	ASSERT_EQ(get1(a, "tn/k", 0, d, sizeof d), sizeof d);
	assert_memory_equal(d, va, sizeof va);
	ASSERT_EQ(get1(b, "tn/k", 0, d, sizeof d), sizeof d);
	assert_memory_equal(d, vb, sizeof vb);
	ASSERT_EQ(cli_int(P, "EXISTS kvl1:tenantA:tn/k"), 1);
	ASSERT_EQ(cli_int(P, "EXISTS kvl1:tenantB:tn/k"), 1);
	ASSERT_EQ(cli_int(P, "EXISTS tn/k"), 0);

	/* A's credentials with B's prefix, or with none: refused by the
	 * ACL, as KVL_EPERM. */
	kvl_store *x = open_okf("redis://tenantA:pwA@127.0.0.1:%d"
	                        "?tenant=tenantB", P);
	ASSERT_CODE(get1_rc(x, "tn/k", 0, d, sizeof d), KVL_EPERM);
	ASSERT_CONTAINS(kvl_store_errmsg(x), "NOPERM");
	ASSERT_CODE(put1_rc(x, "tn/x", va, sizeof va), KVL_EPERM);
	kvl_store_close(x);
	x = open_okf("redis://tenantA:pwA@127.0.0.1:%d", P);
	ASSERT_CODE(put1_rc(x, "tn/k", va, sizeof va), KVL_EPERM);
	kvl_store_close(x);
	/* A tenant's linker: offload, lookup and load under its prefix. */
	eng e;
	eng_init(&e, 2, a);
	kvl_hash pg[2];
	memset(pg, 0x5a, sizeof pg);
	pg[1].bytes[0] = 1;
	kvl_completion c = offload_all(&e, pg, 2, 1);
	ASSERT_CODE(c.status, 0);
	size_t prefix = 0;
	ASSERT_RC(e.lk, kvl_linker_lookup(e.lk, pg, 2, NULL, &prefix), 0);
	ASSERT_EQ(prefix, 2);
	char key[KVL_KEY_MAX], cmd[KVL_KEY_MAX + 32];
	ASSERT_CODE(kvl_layout_key(e.l, e.pool, &pg[0], key, sizeof key), 0);
	snprintf(cmd, sizeof cmd, "EXISTS kvl1:tenantA:%s", key);
	ASSERT_EQ(cli_int(P, cmd), 1);
	eng_free(&e);
	kvl_store_close(a);
	kvl_store_close(b);
}

static void test_restart(void **state)
{
	(void)state;
	int P = start_server("");
	/* The node's own back-off, without the store's breaker (see
	 * test_breaker). */
	kvl_store *s = open_okf("redis://127.0.0.1:%d?connect_timeout_ms=500"
	                        "&breaker=0",
	                       P);
	uint8_t buf[64] = { 1 };
	ASSERT_CODE(put1(s, "rs/a", buf, 64), KVL_PUT_STORED);

	server_do("kill", P);
	uint64_t t0 = now_ms();
	ASSERT_CODE(get1(s, "rs/a", 0, buf, 64), KVL_EIO);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "rs/a");
	int r = 99;
	const char *k = "rs/a";
	ASSERT_CODE(kvl_store_exists(s, &k, 1, &r), 0);
	ASSERT_CODE(r, KVL_EIO);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "down");
	/* How fast a dead server is reported: bench_redis --failures. */
	ASSERT_TRUE_MSG(now_ms() - t0 < HANG_MS, "calls to a dead server hung");

	/* Back (empty: nothing persists): served again without reopening. */
	server_do("restart", P);
	t0 = now_ms();
	int ok = 0;
	while (!ok && now_ms() - t0 < HANG_MS) {
		ok = put1(s, "rs/b", buf, 64) == KVL_PUT_STORED;
		if (!ok)
			sleep_ms(50);
	}
	assert_true(ok);
	print_message("    served again %llu ms after the restart\n",
	              (unsigned long long)(now_ms() - t0));
	ASSERT_CODE(get1(s, "rs/a", 0, buf, 64), KVL_ENOTFOUND);
	ASSERT_EQ(get1(s, "rs/b", 0, buf, 64), 64);
	kvl_store_close(s);
}

static void test_timeout(void **state)
{
	(void)state;
	int P = start_server("");
	kvl_store *s = open_okf("redis://127.0.0.1:%d?timeout_ms=300&breaker=0",
	                        P);
	uint8_t buf[64] = { 2 };
	ASSERT_CODE(put1(s, "to/a", buf, 64), KVL_PUT_STORED);

	server_do("pause", P);
	uint64_t t0 = now_ms();
	ASSERT_CODE(get1(s, "to/a", 0, buf, 64), KVL_EIO);
	uint64_t took = now_ms() - t0;
	ASSERT_CONTAINS(kvl_store_errmsg(s), "no progress for 300 ms");
	print_message("    a paused server failed the get after %llu ms\n",
	              (unsigned long long)took);
	/* Not before the timeout; after it, only a hang is too late (how
	 * long it takes: bench_redis --failures). */
	ASSERT_TRUE_MSG(took >= 250 && took < HANG_MS,
	                "the get failed after %llu ms (timeout_ms=300)",
	                (unsigned long long)took);
	/* Meanwhile calls fail too (at once, while the node is marked down:
	 * bench_redis --failures measures it). */
	t0 = now_ms();
	ASSERT_CODE(get1(s, "to/a", 0, buf, 64), KVL_EIO);
	ASSERT_TRUE_MSG(now_ms() - t0 < HANG_MS, "a get of a paused server hung");

	server_do("resume", P);
	t0 = now_ms();
	int64_t r = KVL_EIO;
	while (r != 64 && now_ms() - t0 < HANG_MS) {
		r = get1(s, "to/a", 0, buf, 64);
		if (r != 64)
			sleep_ms(50);
	}
	ASSERT_EQ(r, 64);
	kvl_store_close(s);
}

/* What kvlink logs during test_breaker. */
static struct {
	pthread_mutex_t mu;
	char text[4096];
} logged = {PTHREAD_MUTEX_INITIALIZER, ""};

static void log_capture(void *user, kvl_log_level level,
                        const char *component, const char *message)
{
	(void)user;
	pthread_mutex_lock(&logged.mu);
	size_t n = strlen(logged.text);
	snprintf(logged.text + n, sizeof logged.text - n, "%d [%s] %s\n",
	         (int)level, component, message);
	pthread_mutex_unlock(&logged.mu);
}

static int logged_has(const char *needle)
{
	pthread_mutex_lock(&logged.mu);
	int has = strstr(logged.text, needle) != NULL;
	pthread_mutex_unlock(&logged.mu);
	return has;
}

/* The store's circuit breaker: a server that stalls (paused) fails three
 * calls after the timeout each, then calls fail at once with KVL_EIO
 * without reaching the network, a linker's lookup among them; the prober
 * closes the breaker once the server answers again, with nobody calling.
 * The log says the node and the store went down (warnings naming them,
 * the password redacted) and came back (info). */
static void test_breaker(void **state)
{
	(void)state;
	int P = start_server("--requirepass s3cret");
	logged.text[0] = '\0';
	ASSERT_CODE(kvl_log_set(log_capture, NULL, KVL_LOG_INFO), KVL_OK);
	kvl_store *s = open_okf("redis://:s3cret@127.0.0.1:%d?timeout_ms=200"
	                        "&breaker=3&breaker_ms=50",
	                        P);
	uint8_t buf[64] = { 3 };
	ASSERT_CODE(put1(s, "br/a", buf, 64), KVL_PUT_STORED);
	kvl_store_stats st;
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_EQ(st.breaker_open, 0);

	server_do("pause", P);
	const char *k = "br/a";
	int r = 99, rc = 0, calls = 0;
	/* Failed calls: the first one stalls, later ones meet the node's
	 * back-off; the third opens the breaker. */
	for (; calls < 3; calls++) {
		rc = kvl_store_exists(s, &k, 1, &r);
		ASSERT_TRUE(rc == KVL_EIO || (rc == 0 && r == KVL_EIO));
	}
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_EQ(st.breaker_open, 1);
	/* The store's breaker and the node's back-off. */
	ASSERT_TRUE(st.breaker_opens >= 2);
	ASSERT_CODE(kvl_store_exists(s, &k, 1, &r), KVL_EIO);
	ASSERT_CODE(r, KVL_EIO);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "store is down: 3 calls");
	ASSERT_CODE(get1_rc(s, "br/a", 0, buf, 64), KVL_EIO);
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_TRUE(st.breaker_refused >= 2);

	/* A linker's lookup says the store is down (no miss). */
	eng e;
	eng_init(&e, 2, s);
	kvl_hash pg[2];
	memset(pg, 7, sizeof pg);
	size_t prefix = 99;
	ASSERT_RC(e.lk, kvl_linker_lookup(e.lk, pg, 2, NULL, &prefix), KVL_EIO);
	ASSERT_EQ(prefix, 0);
	ASSERT_CONTAINS(kvl_linker_errmsg(e.lk), "store is down");
	eng_free(&e);

	/* Back: the prober closes the breaker without any call. */
	server_do("resume", P);
	uint64_t t0 = now_ms();
	do {
		sleep_ms(20);
		ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	} while (st.breaker_open && now_ms() - t0 < 30000);
	ASSERT_EQ(st.breaker_open, 0);
	ASSERT_EQ(get1(s, "br/a", 0, buf, 64), 64);
	kvl_store_close(s);
	kvl_log_set(NULL, NULL, KVL_LOG_WARNING);
	char want[128];
	snprintf(want, sizeof want, "1 [redis] 127.0.0.1:%d is down", P);
	ASSERT_TRUE_MSG(logged_has(want), "no node warning in: %s",
	                logged.text);
	snprintf(want, sizeof want, "1 [store] redis://:***@127.0.0.1:%d?", P);
	ASSERT_TRUE_MSG(logged_has(want) && logged_has("3 calls in a row"),
	                "no breaker warning in: %s", logged.text);
	ASSERT_TRUE_MSG(logged_has("2 [store] redis://:***@") &&
	                        logged_has("answers again"),
	                "no info that the store is back in: %s", logged.text);
	ASSERT_TRUE_MSG(!logged_has("s3cret"), "the password was logged: %s",
	                logged.text);
}

/* A seed that accepts connections but does not answer (a paused server)
 * is skipped at open, and the next seed serves; alone, it fails the open
 * with KVL_EIO after about the timeout. */
static void test_paused_seed(void **state)
{
	(void)state;
	int P = start_server("");
	server_do("pause", P);
	char eb[512];
	uint64_t t0 = now_ms();
	ASSERT_CODE(open_err(eb, sizeof eb,
	                     "redis://127.0.0.1:%d?timeout_ms=300", P),
	            KVL_EIO);
	ASSERT_TRUE_MSG(now_ms() - t0 < HANG_MS, "opening a paused seed hung");
	ASSERT_CONTAINS(eb, "no reply");
	kvl_store *s = open_okf("redis://127.0.0.1:%d,127.0.0.1:%d?"
	                       "timeout_ms=300",
	                       P, cluster_ports[0]);
	uint8_t buf[64], back[64];
	memset(buf, 7, sizeof buf);
	ASSERT_CODE(put1(s, "ps/a", buf, sizeof buf), KVL_PUT_STORED);
	ASSERT_EQ(get1(s, "ps/a", 0, back, sizeof back), 64);
	assert_memory_equal(buf, back, sizeof buf);
	kvl_store_close(s);
	server_do("resume", P);
}

static void test_eviction(void **state)
{
	(void)state;
	int P = start_server("--maxmemory 4mb --maxmemory-policy allkeys-lru");
	kvl_store *s = open_okf("redis://127.0.0.1:%d", P);
	const size_t len = 256u << 10, n = 48;
	uint8_t *d = malloc(len);
	assert_non_null(d);
	uint8_t **src = malloc(n * sizeof *src);
	assert_non_null(src);
	char key[32];
	for (size_t i = 0; i < n; i++) {
		src[i] = pattern(len, 100 + i);
		snprintf(key, sizeof key, "ev/%02zu", i);
		int r = put1(s, key, src[i], len);
		if (r != KVL_PUT_STORED)
			fail_msg("put %s == %s: %s", key, kvl_err_name(r),
			         kvl_store_errmsg(s));
	}
	size_t present = 0;
	for (size_t i = 0; i < n; i++) {
		snprintf(key, sizeof key, "ev/%02zu", i);
		memset(d, 0xa5, len);
		int64_t r = get1(s, key, 0, d, len);
		if (r == (int64_t)len) {
			present++;
			assert_memory_equal(d, src[i], len);
		} else {
			ASSERT_CODE(r, KVL_ENOTFOUND);
			ASSERT_EQ(d[0], 0xa5);
			ASSERT_EQ(d[len - 1], 0xa5);
		}
	}
	print_message("    %zu of %zu objects of 256 KiB left under maxmemory "
	              "4mb\n",
	              present, n);
	assert_true(present > 0 && present < n);
	kvl_store_stats st;
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	assert_true(st.evictions > 0);
	ASSERT_EQ(st.capacity, 4u << 20);
	ASSERT_EQ(st.objects, present);

	/* Without an eviction policy a full server refuses puts: EFULL. */
	CLI(key, P, "config set maxmemory-policy noeviction");
	int full = 0;
	for (size_t i = 0; i < n && !full; i++) {
		char k2[32];
		snprintf(k2, sizeof k2, "ev/full/%02zu", i);
		int r = put1(s, k2, src[i], len);
		full = r == KVL_EFULL;
		if (!full)
			ASSERT_CODE(r, KVL_PUT_STORED);
	}
	assert_true(full);
	ASSERT_CONTAINS(kvl_store_errmsg(s), "OOM");
	CLI(key, P, "config set maxmemory-policy allkeys-lru");

	/* Through the linker: pages found by a lookup are evicted before the
	 * load; the load fails cleanly and what it reports valid is right. */
	CLI(key, P, "flushall");
	eng a, b;
	eng_init(&a, 16, s);
	eng_init(&b, 16, s);
	kvl_hash *pages = make_pages(12, 21);
	kvl_completion c = offload_all(&a, pages, 12, 1);
	ASSERT_CODE(c.status, 0);
	size_t prefix = 0;
	ASSERT_CODE(kvl_linker_lookup(b.lk, pages, 12, NULL, &prefix), 0);
	ASSERT_EQ(prefix, 12);
	for (size_t i = 0; i < n; i++) { /* push them out */
		snprintf(key, sizeof key, "ev/%02zu", i);
		put1(s, key, src[i], len);
	}
	int wrong = 0;
	c = load_all(&b, pages, 12, 2, &wrong);
	ASSERT_EQ(wrong, 0);
	assert_true(c.valid_pages < 12);
	ASSERT_CODE(c.status, KVL_ENOTFOUND);
	eng_free(&a);
	eng_free(&b);
	free(pages);

	for (size_t i = 0; i < n; i++)
		free(src[i]);
	free(src);
	free(d);
	kvl_store_close(s);
}

/* ============================================================= cluster */

/* The port of the master serving `slot` (from CLUSTER NODES of `ask`), and
 * its node id into id (64 bytes). 0 if none. */
static int slot_owner(int ask, int slot, char *id)
{
	static char out[65536];
	if (CLI(out, ask, "cluster nodes") != 0)
		return 0;
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		char nid[64], addr[128], flags[128];
		int used = 0;
		if (sscanf(line, "%63s %127s %127s %*s %*s %*s %*s %*s%n", nid,
		           addr, flags, &used) < 3 ||
		    !strstr(flags, "master") || strstr(flags, "fail"))
			continue;
		for (char *t = line + used; *t;) {
			while (*t == ' ')
				t++;
			if (!*t)
				break;
			int a = -1, b = -1, w = 0;
			if (*t != '[' && sscanf(t, "%d-%d%n", &a, &b, &w) == 2) {
			} else if (*t != '[' && sscanf(t, "%d%n", &a, &w) == 1) {
				b = a;
			}
			if (a <= slot && slot <= b && a >= 0) {
				if (id)
					snprintf(id, 64, "%.40s", nid);
				char *colon = strrchr(strtok(addr, "@"), ':');
				return colon ? atoi(colon + 1) : 0;
			}
			while (*t && *t != ' ')
				t++;
		}
	}
	return 0;
}

static void test_cluster_ops(void **state)
{
	(void)state;
	char uri[512];
	cluster_uri(uri, sizeof uri, "");
	kvl_store *s = open_ok(uri);
	/* Slots agree with the server's, hash tags included. */
	static const char *const tags[] = {
		"foo", "{user1000}.following", "a{b}c", "{}x", "x{}{y}",
		"kvl1:m:00ff:abc:kv:tp0_cp0_pp0", "z{{q}}", "{a",
	};
	for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++) {
		char cmd[160];
		snprintf(cmd, sizeof cmd, "cluster keyslot '%s'", tags[i]);
		ASSERT_EQ(kvl__redis_key_slot(tags[i], strlen(tags[i])),
		          cli_int(cluster_ports[0], cmd));
	}

	/* Many keys in one batch: spread over every master, read back. */
	enum { N = 300 };
	const size_t len = 3000;
	char (*keys)[32] = malloc(N * sizeof *keys);
	const char **kp = malloc(N * sizeof *kp);
	kvl_iov *iov = malloc(N * sizeof *iov);
	kvl_range *rg = malloc(N * sizeof *rg);
	size_t *cnt = malloc(N * sizeof *cnt);
	int *res = malloc(N * sizeof *res);
	int *res64 = malloc(N * sizeof *res64);
	uint8_t *src = pattern(N * len, 5), *d = calloc(N, len);
	assert_true(keys && kp && iov && rg && cnt && res && res64 && d);
	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof keys[i], "cl/%03d", i);
		kp[i] = keys[i];
		iov[i] = (kvl_iov){ src + (size_t)i * len, len };
		rg[i] = (kvl_range){ 0, d + (size_t)i * len, len };
		cnt[i] = 1;
	}
	ASSERT_CODE(kvl_store_remove(s, kp, N, res), 0);
	ASSERT_CODE(kvl_store_put(s, kp, N, iov, cnt, res), 0);
	for (int i = 0; i < N; i++)
		ASSERT_CODE(res[i], KVL_PUT_STORED);
	long long total = 0;
	for (int m = 0; m < 3; m++) {
		long long k = cli_int(cluster_ports[m], "dbsize");
		assert_true(k > N / 10);
		total += k;
	}
	ASSERT_CODE(kvl_store_exists(s, kp, N, res), 0);
	for (int i = 0; i < N; i++)
		ASSERT_EQ(res[i], 1);
	ASSERT_CODE(kvl_store_get(s, kp, N, rg, cnt, res64), 0);
	for (int i = 0; i < N; i++)
		ASSERT_CODE(res64[i], 0);
	assert_memory_equal(d, src, N * len);
	kvl_store_stats st;
	ASSERT_CODE(kvl_store_stats_get(s, &st), 0);
	ASSERT_EQ(st.objects, total);
	char eb[512];
	cluster_uri(uri, sizeof uri, "db=2");
	ASSERT_CODE(open_err(eb, sizeof eb, "%s", uri), KVL_EINVAL);
	ASSERT_CONTAINS(eb, "only database 0");
	ASSERT_CODE(kvl_store_remove(s, kp, N, res), 0);
	kvl_store_close(s);
	free(keys);
	free(kp);
	free(iov);
	free(rg);
	free(cnt);
	free(res);
	free(res64);
	free(src);
	free(d);
}

static void test_linker_cluster(void **state)
{
	(void)state;
	char uri[512];
	cluster_uri(uri, sizeof uri, "");
	linker_roundtrip(uri, 12);
}

/* Moves slot of `key` to another master by hand, checking the store on
 * the way: ASK while migrating, MOVED after. */
static void test_cluster_reshard(void **state)
{
	(void)state;
	char uri[512], out[512], src_id[64], dst_id[64];
	cluster_uri(uri, sizeof uri, "");
	kvl_store *s = open_ok(uri);
	const char *ka = "rs:{t7}a", *kb = "rs:{t7}b", *kc = "rs:{t7}c";
	int slot = kvl__redis_key_slot(ka, strlen(ka));
	int src = slot_owner(cluster_ports[0], slot, src_id);
	assert_true(src > 0);
	int dst = 0;
	for (int m = 0; m < 3 && !dst; m++)
		if (cluster_ports[m] != src)
			dst = cluster_ports[m];
	assert_true(dst > 0);
	CLI(dst_id, dst, "cluster myid");

	uint8_t *a = pattern(70000, 31), *b = pattern(5000, 32);
	uint8_t *c = pattern(9000, 33), *d = malloc(70000);
	assert_non_null(d);
	ASSERT_CODE(put1(s, ka, a, 70000), KVL_PUT_STORED);
	ASSERT_CODE(put1(s, kb, b, 5000), KVL_PUT_STORED);

	/* Migrating: a is moved, b is not yet. */
	ASSERT_EQ(CLI(out, dst, "cluster setslot %d importing %s", slot,
	              src_id),
	          0);
	ASSERT_EQ(CLI(out, src, "cluster setslot %d migrating %s", slot,
	              dst_id),
	          0);
	ASSERT_EQ(CLI(out, src, "migrate 127.0.0.1 %d '' 0 5000 keys '%s'",
	              dst, ka),
	          0);
	ASSERT_CONTAINS(out, "OK");
	ASSERT_EQ(cli_int(src, "exists 'rs:{t7}a'"), 0);
	/* a: the source says ASK, the target serves it after ASKING. */
	ASSERT_EQ(get1(s, ka, 0, d, 70000), 70000);
	assert_memory_equal(d, a, 70000);
	ASSERT_EQ(get1(s, kb, 0, d, 5000), 5000);
	assert_memory_equal(d, b, 5000);
	ASSERT_EQ(exists1(s, ka), 1);
	/* A new key of the slot goes to the target (ASK). */
	ASSERT_CODE(put1(s, kc, c, 9000), KVL_PUT_STORED);
	ASSERT_EQ(cli_int(src, "exists 'rs:{t7}c'"), 0);
	ASSERT_EQ(get1(s, kc, 0, d, 9000), 9000);
	assert_memory_equal(d, c, 9000);
	ASSERT_CODE(put1(s, kc, c, 9000), KVL_PUT_PRESENT);

	/* Done: b moves too, and every master learns the new owner. */
	ASSERT_EQ(CLI(out, src, "migrate 127.0.0.1 %d '' 0 5000 keys '%s'",
	              dst, kb),
	          0);
	for (int m = 0; m < 3; m++)
		ASSERT_EQ(CLI(out, cluster_ports[m], "cluster setslot %d node %s",
		              slot, dst_id),
		          0);
	/* The store's map still says src: MOVED, then the new owner. */
	ASSERT_EQ(get1(s, kb, 0, d, 5000), 5000);
	assert_memory_equal(d, b, 5000);
	ASSERT_EQ(get1(s, ka, 0, d, 70000), 70000);
	assert_memory_equal(d, a, 70000);
	ASSERT_EQ(exists1(s, kc), 1);
	ASSERT_EQ(slot_owner(cluster_ports[0], slot, NULL), dst);
	/* A fresh store reads the new map. */
	kvl_store *s2 = open_ok(uri);
	ASSERT_EQ(get1(s2, kc, 0, d, 9000), 9000);
	kvl_store_close(s2);

	const char *all[] = { ka, kb, kc };
	int res[3];
	ASSERT_CODE(kvl_store_remove(s, all, 3, res), 0);
	ASSERT_EQ(res[0] + res[1] + res[2], 3);
	kvl_store_close(s);
	free(a);
	free(b);
	free(c);
	free(d);
}

static void test_cluster_replicas(void **state)
{
	(void)state;
	char uri[512], out[4096];
	cluster_uri(uri, sizeof uri, "");
	kvl_store *w = open_ok(uri);
	/* CLUSTER SLOTS lists a replica once its master's node has heard of
	 * its replication offset: wait for that (its output, one value a line,
	 * shows ports above 16383 only as node ports). */
	uint64_t t0 = now_ms();
	for (int i = 3; i < 6; i++) {
		char line[16];
		snprintf(line, sizeof line, "\n%d\n", cluster_ports[i]);
		for (;;) {
			char slots[8192] = "\n";
			shell(slots + 1, sizeof slots - 2,
			      "redis-cli -h 127.0.0.1 -p %d cluster slots",
			      cluster_ports[0]);
			strcat(slots, "\n");
			if (strstr(slots, line))
				break;
			if (now_ms() - t0 > HANG_MS)
				fail_msg("CLUSTER SLOTS never listed replica %d",
				         cluster_ports[i]);
			sleep_ms(50);
		}
	}
	cluster_uri(uri, sizeof uri, "replicas=1");
	kvl_store *r = open_ok(uri);
	enum { N = 60 };
	char key[32];
	uint8_t *src = pattern(N * 1000, 41), d[1000];
	for (int i = 0; i < N; i++) {
		snprintf(key, sizeof key, "rp/%02d", i);
		remove1(w, key);
		ASSERT_CODE(put1(w, key, src + i * 1000, 1000), KVL_PUT_STORED);
	}
	/* Replication is asynchronous: wait until every key is visible. */
	t0 = now_ms();
	int seen = 0;
	while (seen < N && now_ms() - t0 < HANG_MS) {
		seen = 0;
		for (int i = 0; i < N; i++) {
			snprintf(key, sizeof key, "rp/%02d", i);
			if (get1(r, key, 0, d, 1000) == 1000) {
				assert_memory_equal(d, src + i * 1000, 1000);
				seen++;
			}
		}
	}
	ASSERT_EQ(seen, N);
	/* The reads went to replicas. */
	long long on_replicas = 0;
	for (int i = 3; i < 6; i++) {
		CLI(out, cluster_ports[i], "info commandstats");
		const char *p = strstr(out, "cmdstat_getrange:calls=");
		if (p)
			on_replicas += atoll(p + 23);
	}
	print_message("    %lld GETRANGE calls served by replicas\n",
	              on_replicas);
	assert_true(on_replicas >= N);
	for (int i = 0; i < N; i++) {
		snprintf(key, sizeof key, "rp/%02d", i);
		ASSERT_EQ(remove1(w, key), 1);
	}
	free(src);
	kvl_store_close(w);
	kvl_store_close(r);
}

/* Waits until every master's replica has its master's replication
 * offset. */
static void wait_replicated(void)
{
	char out[4096];
	for (int m = 0; m < 3; m++) {
		uint64_t t0 = now_ms();
		for (;;) {
			CLI(out, cluster_ports[m], "info replication");
			const char *mo = strstr(out, "master_repl_offset:");
			const char *so = strstr(out, ",offset=");
			if (mo && so && atoll(mo + 19) == atoll(so + 8))
				break;
			if (now_ms() - t0 > HANG_MS)
				fail_msg("replica of %d lagging: %s",
				         cluster_ports[m], out);
			sleep_ms(20);
		}
	}
}

struct churn {
	eng *dst;
	const kvl_hash *pages;
	size_t n;
	atomic_int stop;
	atomic_uint_fast64_t kill_ms; /* when the master was killed, or 0 */
	atomic_uint_fast64_t ok_before; /* read by the main thread */
	uint64_t failed, recovered_ms;
	atomic_uint_fast64_t ok_after; /* read by the main thread */
	atomic_int hung;
	int wrong;
	int statuses[16];
	char why[256];
};

static void *churn_loads(void *p)
{
	struct churn *ch = p;
	uint64_t id = 100;
	while (!atomic_load(&ch->stop)) {
		uint64_t t0 = now_ms(), killed = atomic_load(&ch->kill_ms);
		kvl_completion c;
		if (try_load(ch->dst, ch->pages, ch->n, id++, &c, &ch->wrong,
		             ch->why, sizeof ch->why) < 0) {
			atomic_store(&ch->hung, 1);
			break;
		}
		if (c.status == 0 && c.valid_pages == ch->n) {
			if (!killed) {
				atomic_fetch_add(&ch->ok_before, 1);
			} else if (t0 > killed) {
				if (atomic_fetch_add(&ch->ok_after, 1) == 0)
					ch->recovered_ms = now_ms() - killed;
			}
		} else {
			ch->failed++;
			ch->statuses[-c.status & 15]++;
			sleep_ms(20);
		}
	}
	return NULL;
}

static void test_cluster_failover(void **state)
{
	(void)state;
	char uri[512];
	cluster_uri(uri, sizeof uri, "timeout_ms=1000&connect_timeout_ms=500");
	kvl_store *s = open_ok(uri);
	eng src, dst;
	eng_init(&src, 64, s);
	eng_init(&dst, 64, s);
	const size_t n = 64;
	kvl_hash *pages = make_pages(n, 77);
	kvl_completion c = offload_all(&src, pages, n, 1);
	ASSERT_CODE(c.status, 0);
	wait_replicated();

	struct churn ch = { .dst = &dst, .pages = pages, .n = n };
	pthread_t th;
	ASSERT_EQ(pthread_create(&th, NULL, churn_loads, &ch), 0);
	/* Loads run before the kill, however slow the machine. */
	for (uint64_t t0 = now_ms(); now_ms() - t0 < HANG_MS;) {
		sleep_ms(100);
		if (atomic_load(&ch.ok_before) >= 3 || atomic_load(&ch.hung))
			break;
	}

	/* The master of slot 0, and a master that stays. */
	int victim = slot_owner(cluster_ports[0], 0, NULL);
	int other = victim == cluster_ports[0] ? cluster_ports[1]
	                                       : cluster_ports[0];
	assert_true(victim > 0);
	server_do("kill", victim);
	uint64_t killed = now_ms();
	atomic_store(&ch.kill_ms, killed);
	/* Full batches again once a replica took over (no restart). */
	while (now_ms() - killed < HANG_MS && !atomic_load(&ch.hung)) {
		sleep_ms(100);
		if (atomic_load(&ch.ok_after) >= 3)
			break;
	}
	atomic_store(&ch.stop, 1);
	pthread_join(th, NULL);
	if (atomic_load(&ch.hung))
		fail_msg("%s", ch.why);
	print_message("    %llu full batches before the kill, %llu failed "
	              "cleanly (EIO %d, ENOTFOUND %d), %llu full after; "
	              "served again %llu ms after the kill\n",
	              (unsigned long long)atomic_load(&ch.ok_before),
	              (unsigned long long)ch.failed, ch.statuses[-KVL_EIO],
	              ch.statuses[-KVL_ENOTFOUND],
	              (unsigned long long)atomic_load(&ch.ok_after),
	              (unsigned long long)ch.recovered_ms);
	ASSERT_EQ(ch.wrong, 0);
	assert_true(atomic_load(&ch.ok_before) > 0);
	assert_true(atomic_load(&ch.ok_after) >= 3);
	/* The old master's slots now have a new master. */
	int owner = slot_owner(other, 0, NULL);
	assert_true(owner > 0 && owner != victim);

	eng_free(&src);
	eng_free(&dst);
	free(pages);
	kvl_store_close(s);
}

/* ================================================================= main */

int main(int argc, char **argv)
{
	(void)argc;
	if (!getenv("KVL_REDIS_DIR")) {
		/* Run again under the script that starts the servers. */
		execlp("bash", "bash", KVL_REDIS_RUN, "both", argv[0],
		       (char *)NULL);
		fprintf(stderr, "test_redis: cannot run %s: %s\n",
		        KVL_REDIS_RUN, strerror(errno));
		return 1;
	}
	const char *sa = getenv("KVL_REDIS_STANDALONE");
	const char *cl = getenv("KVL_REDIS_CLUSTER");
	if (!sa || !cl || sscanf(cl, "%d %d %d %d %d %d", &cluster_ports[0],
	                         &cluster_ports[1], &cluster_ports[2],
	                         &cluster_ports[3], &cluster_ports[4],
	                         &cluster_ports[5]) != 6) {
		fprintf(stderr, "test_redis: run me under tests/redis/run.sh "
		                "both\n");
		return 1;
	}
	standalone_port = atoi(strchr(sa, ':') + 1);

	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_standalone_ops),
		cmocka_unit_test(test_linker_standalone),
		cmocka_unit_test(test_wrong_password),
		cmocka_unit_test(test_tenants),
		cmocka_unit_test(test_restart),
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_breaker),
		cmocka_unit_test(test_paused_seed),
		cmocka_unit_test(test_eviction),
		cmocka_unit_test(test_cluster_ops),
		cmocka_unit_test(test_linker_cluster),
		cmocka_unit_test(test_cluster_reshard),
		cmocka_unit_test(test_cluster_replicas),
		/* Last: it kills a master. */
		cmocka_unit_test(test_cluster_failover),
	};
	return cmocka_run_group_tests_name("redis", tests, NULL, NULL);
}
#endif
