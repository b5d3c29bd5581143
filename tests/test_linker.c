/*
 * test_linker.c — the linker (kvl_linker_*): lookups across pools and ranks,
 * layer-wise load batches, background offloads, cancellation, shutdown and
 * exactly-once completions.
 *
 * Each test builds two host layouts of the same shape at different addresses
 * (a source engine and a destination engine): pool "kv" (ALL_PAGES, k and v
 * over layers 0..3), optionally "swa" (TRAILING_PAGES(w), one component at
 * layers 1 and 3) and "mla" (KVL_POOL_REPLICATED_TP, layers 0..3). Source
 * slots are filled with a pattern derived from the page hash, offloaded,
 * flushed, then loaded into other slots of the destination, whose bytes are
 * compared layer by layer (and slots not loaded are checked untouched).
 * Stores are the embedded "mem:" store and, for failure and timing paths,
 * the fault-injection store "fault+mem:" (tests that need it skip and say
 * why when this build cannot open it). With KVL_TEST_STORE_URI set (e.g.
 * by tests/mooncake/run.sh or tests/redis/run.sh), every test runs on that
 * store instead, "fault+" wrapped where it needs faults, each test in a
 * key namespace of its own (a shared server keeps earlier tests' objects).
 *
 * Every accepted request is collected with collect(), which polls until all
 * expected ids arrived (10 s at most) and fails on an id seen twice, an id
 * not expected, or one missing.
 *
 * Covers: open errors and defaults; lookup prefixes, holes of ALL_PAGES and
 * TRAILING pools, pool_pages subsets, namespace seeds, one store exists
 * call per lookup, ranks as threads sharing a store and a rank group (a
 * rank lacking pages, a rank whose store is down, a peer that never
 * comes); load round trips, per-layer waits, partial requests, duplicate
 * ids, bad slots, max_request_pages, small io_batch, empty batches and the
 * batch ring (EFULL, forgotten old batches); evicted and corrupt objects,
 * store errors at a given layer, a store that is down, wait and flush
 * timeouts, random errors, bit flips and evictions (never wrong bytes
 * reported valid); cancel before and after start; offload skipping present
 * pages, replicated pools written by tp rank 0 only, a store too small, a
 * full request queue; shutdown with queued and running work, two shutdowns
 * at once, close with work queued (ASan: nothing leaks); and exactly-once
 * under concurrent engine threads and pollers, with and without a shutdown
 * in the middle.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

#include <cmocka.h>

#include <unistd.h>

#include "kvlink.h"
#include "store/store.h"
#include "store/fault.h"

#define NP 16          /* slots per pool */
#define N_LAYERS 4
#define K_BYTES 64
#define V_BYTES 48
#define KV_STRIDE 128  /* k then v in one slot, then a gap */
#define W_BYTES 40
#define W_STRIDE 64
#define C_BYTES 32
#define C_STRIDE 32
#define MAXP 32        /* pages of one request in these tests */
#define MAX_POOLS 3
#define MAX_BUFS 16
#define FILL 0xEE      /* what destination memory holds before a load */
#define MEM_URI "mem:?capacity=16MiB"
#define STORE_URI store_uri("", NULL)
#define COLLECT_MS 10000
#define LONG_MS 10000

/* ================================================================= helpers */

/* The store under test: $KVL_TEST_STORE_URI, or the embedded store. */
static const char *env_store(void)
{
	const char *e = getenv("KVL_TEST_STORE_URI");
	return e && *e ? e : NULL;
}

/* `prefix` + the store under test + `opts` as more query options, e.g.
 * store_uri("fault+", "fault.seed=3"). From a ring of static buffers. */
static const char *store_uri(const char *prefix, const char *opts)
{
	static char ring[8][1024];
	static unsigned next;
	char *out = ring[next++ % 8];
	const char *base = env_store() ? env_store() : MEM_URI;
	int n = snprintf(out, sizeof ring[0], "%s%s%s%s", prefix, base,
	                 !opts ? "" : strchr(base, '?') ? "&" : "?",
	                 opts ? opts : "");
	assert_true(n > 0 && (size_t)n < sizeof ring[0]);
	return out;
}

/* Each test's key namespace on a shared store: the layout's model tag
 * carries the process and the test's number. */
static unsigned test_number;

static int next_test(void **state)
{
	(void)state;
	test_number++;
	return 0;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000,
	                      .tv_nsec = (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static void expect_msg(const char *msg, const char *needle)
{
	assert_non_null(msg);
	if (!strstr(msg, needle))
		print_error("message \"%s\" does not contain \"%s\"\n", msg,
		            needle);
	assert_non_null(strstr(msg, needle));
}

/* Asserts rc == want and prints the linker's message when it is not. */
#define EXPECT_RC(lk, rc, want)                                            \
	do {                                                               \
		int rc_ = (rc);                                            \
		if (rc_ != (want))                                         \
			print_error("%s: got %s, want %s (%s)\n", #rc,     \
			            kvl_err_name(rc_), kvl_err_name(want), \
			            (lk) ? kvl_linker_errmsg(lk) : "");    \
		assert_int_equal(rc_, (want));                             \
	} while (0)

typedef struct hcfg {
	int swa;             /* add pool "swa" */
	uint32_t swa_window; /* its TRAILING_PAGES window (default 2) */
	int mla;             /* add replicated pool "mla" */
	int cuda;            /* describe "kv" as CUDA memory */
	kvl_shard shard;     /* all zero: a single rank */
} hcfg;

/* One buffer (pool, layer, component) of a host, for filling and checks. */
typedef struct hbuf {
	int pool;
	uint32_t layer, comp;
	uint8_t *base;
	size_t stride, bytes;
} hbuf;

/* One engine's memory and its layout. */
typedef struct host {
	uint8_t *mem;
	size_t mem_bytes;
	kvl_layout *l;
	int kv, swa, mla; /* pool ids, -1 when absent */
	int n_pools;
	hbuf bufs[MAX_BUFS];
	size_t n_bufs;
	kvl_mem_kind kv_mem;
} host;

static void add_buf(host *h, int pool, const char *comp, uint32_t comp_i,
                    uint32_t layer, uint8_t *base, size_t stride,
                    size_t bytes)
{
	kvl_buffer b = {.base = base, .page_stride = stride,
	                .page_bytes = bytes, .num_pages = NP,
	                .mem = pool == h->kv ? h->kv_mem : KVL_MEM_HOST,
	                .device = 0};
	int rc = kvl_layout_add_buffer(h->l, pool, comp, layer, &b);
	if (rc)
		print_error("add_buffer: %s\n", kvl_layout_errmsg(h->l));
	assert_int_equal(rc, KVL_OK);
	assert_true(h->n_bufs < MAX_BUFS);
	h->bufs[h->n_bufs++] = (hbuf){.pool = pool, .layer = layer,
	                              .comp = comp_i, .base = base,
	                              .stride = stride, .bytes = bytes};
}

/* Builds (and unless `unfinalized`, finalizes) a host layout. */
static void host_init2(host *h, const hcfg *cfg, int unfinalized)
{
	memset(h, 0, sizeof *h);
	size_t kv = (size_t)N_LAYERS * NP * KV_STRIDE;
	size_t swa = 2 * (size_t)NP * W_STRIDE;
	size_t mla = (size_t)N_LAYERS * NP * C_STRIDE;
	h->mem_bytes = kv + swa + mla;
	h->mem = aligned_alloc(64, h->mem_bytes);
	assert_non_null(h->mem);
	memset(h->mem, FILL, h->mem_bytes);
	kvl_shard single = KVL_SHARD_SINGLE;
	const kvl_shard *sh = cfg && cfg->shard.tp_size ? &cfg->shard
	                                                : &single;
	char err[256] = "";
	char tag[64] = "test-model/bf16";
	if (env_store())
		snprintf(tag, sizeof tag, "test-%ld-%u/bf16", (long)getpid(),
		         test_number);
	int rc = kvl_layout_create(tag, 16, sh, &h->l, err, sizeof err);
	if (rc)
		print_error("layout_create: %s\n", err);
	assert_int_equal(rc, KVL_OK);
	h->kv = h->swa = h->mla = -1;
	h->kv_mem = cfg && cfg->cuda ? KVL_MEM_CUDA : KVL_MEM_HOST;
	assert_int_equal(kvl_layout_add_pool(h->l, "kv", KVL_HIT_ALL_PAGES, 0,
	                                     0, &h->kv),
	                 KVL_OK);
	h->n_pools = 1;
	if (cfg && cfg->swa) {
		uint32_t w = cfg->swa_window ? cfg->swa_window : 2;
		assert_int_equal(kvl_layout_add_pool(h->l, "swa",
		                                     KVL_HIT_TRAILING_PAGES,
		                                     w, 0, &h->swa),
		                 KVL_OK);
		h->n_pools++;
	}
	if (cfg && cfg->mla) {
		assert_int_equal(kvl_layout_add_pool(h->l, "mla",
		                                     KVL_HIT_ALL_PAGES, 0,
		                                     KVL_POOL_REPLICATED_TP,
		                                     &h->mla),
		                 KVL_OK);
		h->n_pools++;
	}
	for (uint32_t ly = 0; ly < N_LAYERS; ly++) {
		uint8_t *base = h->mem + (size_t)ly * NP * KV_STRIDE;
		add_buf(h, h->kv, "k", 0, ly, base, KV_STRIDE, K_BYTES);
		add_buf(h, h->kv, "v", 1, ly, base + K_BYTES, KV_STRIDE,
		        V_BYTES);
	}
	if (h->swa >= 0) {
		add_buf(h, h->swa, "w", 0, 1, h->mem + kv, W_STRIDE, W_BYTES);
		add_buf(h, h->swa, "w", 0, 3, h->mem + kv + NP * W_STRIDE,
		        W_STRIDE, W_BYTES);
	}
	if (h->mla >= 0)
		for (uint32_t ly = 0; ly < N_LAYERS; ly++)
			add_buf(h, h->mla, "c", 0, ly,
			        h->mem + kv + swa + (size_t)ly * NP * C_STRIDE,
			        C_STRIDE, C_BYTES);
	if (unfinalized)
		return;
	rc = kvl_layout_finalize(h->l);
	if (rc)
		print_error("finalize: %s\n", kvl_layout_errmsg(h->l));
	assert_int_equal(rc, KVL_OK);
}

static void host_init(host *h, const hcfg *cfg)
{
	host_init2(h, cfg, 0);
}

static void host_free(host *h)
{
	kvl_layout_free(h->l);
	free(h->mem);
}

static uint8_t pat(const kvl_hash *page, int pool, uint32_t layer,
                   uint32_t comp, size_t off)
{
	return (uint8_t)(page->bytes[(off + layer * 7 + comp * 13) %
	                             KVL_HASH_BYTES] ^
	                 (uint8_t)(off * 31 + layer * 17 + comp * 5 +
	                           (size_t)pool * 3 + 1));
}

/* Writes the pattern of `page` into every layer of `slot` of `pool`. */
static void fill_page(host *h, int pool, size_t slot, const kvl_hash *page)
{
	for (size_t i = 0; i < h->n_bufs; i++) {
		const hbuf *b = &h->bufs[i];
		if (b->pool != pool)
			continue;
		uint8_t *p = b->base + slot * b->stride;
		for (size_t o = 0; o < b->bytes; o++)
			p[o] = pat(page, pool, b->layer, b->comp, o);
	}
}

/* 1 when every layer < max_layer of `slot` of `pool` holds `page`'s
 * pattern; else 0 and, when `why`, prints the first difference. */
static int page_ok(const host *h, int pool, size_t slot,
                   const kvl_hash *page, uint32_t max_layer, int why)
{
	for (size_t i = 0; i < h->n_bufs; i++) {
		const hbuf *b = &h->bufs[i];
		if (b->pool != pool || b->layer >= max_layer)
			continue;
		const uint8_t *p = b->base + slot * b->stride;
		for (size_t o = 0; o < b->bytes; o++) {
			uint8_t want = pat(page, pool, b->layer, b->comp, o);
			if (p[o] != want) {
				if (why)
					print_error("pool %d slot %zu layer "
					            "%u comp %u byte %zu: want "
					            "0x%02x got 0x%02x\n",
					            pool, slot, b->layer,
					            b->comp, o, want, p[o]);
				return 0;
			}
		}
	}
	return 1;
}

/* 1 when every byte of `slot` of `pool`, at layers >= min_layer, is FILL. */
static int slot_untouched(const host *h, int pool, size_t slot,
                          uint32_t min_layer)
{
	for (size_t i = 0; i < h->n_bufs; i++) {
		const hbuf *b = &h->bufs[i];
		if (b->pool != pool || b->layer < min_layer)
			continue;
		const uint8_t *p = b->base + slot * b->stride;
		for (size_t o = 0; o < b->bytes; o++)
			if (p[o] != FILL) {
				print_error("pool %d slot %zu layer %u byte "
				            "%zu was written (0x%02x)\n",
				            pool, slot, b->layer, o, p[o]);
				return 0;
			}
	}
	return 1;
}

/* n distinct page hashes, a chain over `seed`'s tokens. */
static void make_pages(kvl_hash *out, size_t n, uint64_t seed)
{
	uint64_t tokens[16 * MAXP];
	assert_true(n <= MAXP);
	for (size_t i = 0; i < 16 * n; i++)
		tokens[i] = seed * 1000003 + i;
	size_t got = 0;
	assert_int_equal(kvl_hash_pages(tokens, 16 * n, 16, NULL, out, n,
	                                &got),
	                 KVL_OK);
	assert_int_equal(got, n);
}

static kvl_hash make_seed(const char *salt)
{
	kvl_hash ns;
	const char *salts[1] = {salt};
	assert_int_equal(kvl_namespace_seed(salts, 1, &ns), KVL_OK);
	return ns;
}

/* A request: pages, and per pool a slot array (or none). */
typedef struct req {
	size_t n;
	kvl_hash pages[MAXP];
	size_t slot[MAX_POOLS][MAXP];
	const size_t *sp[MAX_POOLS];
} req;

static void req_init(req *r, const kvl_hash *pages, size_t n)
{
	memset(r, 0, sizeof *r);
	assert_true(n <= MAXP);
	r->n = n;
	if (n)
		memcpy(r->pages, pages, n * sizeof *pages);
	for (int p = 0; p < MAX_POOLS; p++)
		for (size_t i = 0; i < MAXP; i++)
			r->slot[p][i] = KVL_NO_SLOT;
}

/* Pages [from, n) of pool `pool` use slots first + (i - from). */
static void req_pool(req *r, int pool, size_t first, size_t from)
{
	assert_true(pool >= 0 && pool < MAX_POOLS);
	r->sp[pool] = r->slot[pool];
	for (size_t i = from; i < r->n; i++)
		r->slot[pool][i] = first + (i - from);
}

static void fill_req(host *h, const req *r)
{
	for (int p = 0; p < h->n_pools; p++)
		for (size_t i = 0; r->sp[p] && i < r->n; i++)
			if (r->slot[p][i] != KVL_NO_SLOT)
				fill_page(h, p, r->slot[p][i], &r->pages[i]);
}

/* Asserts that pages < valid of r hold their pattern in h's slots at every
 * layer < max_layer. */
static void check_req(const host *h, const req *r, size_t valid,
                      uint32_t max_layer)
{
	for (int p = 0; p < h->n_pools; p++)
		for (size_t i = 0; r->sp[p] && i < valid; i++)
			if (r->slot[p][i] != KVL_NO_SLOT &&
			    !page_ok(h, p, r->slot[p][i], &r->pages[i],
			             max_layer, 1)) {
				print_error("request page %zu, pool %d: wrong "
				            "bytes\n", i, p);
				fail();
			}
}

/* Leading pages of r whose bytes are right in every pool (all layers). */
static size_t req_good_prefix(const host *h, const req *r)
{
	for (size_t i = 0; i < r->n; i++)
		for (int p = 0; p < h->n_pools; p++)
			if (r->sp[p] && r->slot[p][i] != KVL_NO_SLOT &&
			    !page_ok(h, p, r->slot[p][i], &r->pages[i],
			             N_LAYERS, 0))
				return i;
	return r->n;
}

static void reset_slots(host *h, const req *r)
{
	for (size_t i = 0; i < h->n_bufs; i++) {
		const hbuf *b = &h->bufs[i];
		const size_t *sl = r->sp[b->pool];
		for (size_t j = 0; sl && j < r->n; j++)
			if (sl[j] != KVL_NO_SLOT)
				memset(b->base + sl[j] * b->stride, FILL,
				       b->bytes);
	}
}

static kvl_store *open_store(const char *uri)
{
	kvl_store *s = NULL;
	char err[256] = "";
	int rc = kvl_store_open(uri, &s, err, sizeof err);
	if (rc)
		print_error("store_open %s: %s\n", uri, err);
	assert_int_equal(rc, KVL_OK);
	assert_non_null(s);
	return s;
}

static kvl_linker *open_lk(const host *h, kvl_store *s,
                           const kvl_linker_opts *o)
{
	kvl_linker *lk = NULL;
	char err[256] = "";
	int rc = kvl_linker_open(h->l, s, o, &lk, err, sizeof err);
	if (rc)
		print_error("linker_open: %s\n", err);
	assert_int_equal(rc, KVL_OK);
	assert_non_null(lk);
	return lk;
}

/* The store key of `page` (⊕ ns) in pool `pool` of h. */
static void key_of(const host *h, int pool, const kvl_hash *page,
                   const kvl_hash *ns, char *key)
{
	kvl_hash x = *page;
	for (int i = 0; ns && i < KVL_HASH_BYTES; i++)
		x.bytes[i] ^= ns->bytes[i];
	assert_int_equal(kvl_layout_key(h->l, pool, &x, key, KVL_KEY_MAX),
	                 KVL_OK);
}

static void remove_page(kvl_store *s, const host *h, int pool,
                        const kvl_hash *page, const kvl_hash *ns)
{
	char key[KVL_KEY_MAX];
	key_of(h, pool, page, ns, key);
	const char *k = key;
	int res = -100;
	assert_int_equal(kvl_store_remove(s, &k, 1, &res), KVL_OK);
	assert_int_equal(res, 1);
}

static int page_present(kvl_store *s, const host *h, int pool,
                        const kvl_hash *page, const kvl_hash *ns)
{
	char key[KVL_KEY_MAX];
	key_of(h, pool, page, ns, key);
	const char *k = key;
	int res = -100;
	assert_int_equal(kvl_store_exists(s, &k, 1, &res), KVL_OK);
	assert_true(res == 0 || res == 1);
	return res;
}

/* Polls until every id of ids[n] completed once; out[i] gets ids[i]'s
 * completion. Fails on a duplicate, an unexpected id or a missing one. */
static void collect(kvl_linker *lk, const uint64_t *ids, size_t n,
                    kvl_completion *out)
{
	uint8_t *seen = calloc(n ? n : 1, 1);
	assert_non_null(seen);
	size_t got = 0;
	uint64_t deadline = now_ms() + COLLECT_MS;
	while (got < n) {
		kvl_completion c[16];
		size_t k = 0;
		assert_int_equal(kvl_linker_poll(lk, c, 16, &k, 50), KVL_OK);
		assert_true(k <= 16);
		for (size_t j = 0; j < k; j++) {
			size_t i = 0;
			while (i < n && ids[i] != c[j].id)
				i++;
			if (i == n) {
				print_error("unexpected completion of id %llu "
				            "(status %s)\n",
				            (unsigned long long)c[j].id,
				            kvl_err_name(c[j].status));
				fail();
			}
			if (seen[i]) {
				print_error("id %llu completed twice\n",
				            (unsigned long long)c[j].id);
				fail();
			}
			seen[i] = 1;
			out[i] = c[j];
			got++;
		}
		if (got < n && now_ms() > deadline) {
			for (size_t i = 0; i < n; i++)
				if (!seen[i])
					print_error("id %llu never completed\n",
					            (unsigned long long)ids[i]);
			fail();
		}
	}
	free(seen);
}

static kvl_completion collect1(kvl_linker *lk, uint64_t id)
{
	kvl_completion c;
	memset(&c, 0, sizeof c);
	collect(lk, &id, 1, &c);
	return c;
}

/* Asserts that nothing is reported within ms. */
static void expect_none(kvl_linker *lk, uint32_t ms)
{
	kvl_completion c[4];
	size_t k = 99;
	assert_int_equal(kvl_linker_poll(lk, c, 4, &k, ms), KVL_OK);
	if (k)
		print_error("unexpected completion of id %llu (status %s)\n",
		            (unsigned long long)c[0].id,
		            kvl_err_name(c[0].status));
	assert_int_equal(k, 0);
}

static void expect_completion(const kvl_completion *c, kvl_req_kind kind,
                              int status, size_t valid, size_t n)
{
	if (c->status != status || c->valid_pages != valid)
		print_error("id %llu: status %s valid %zu, want %s valid %zu\n",
		            (unsigned long long)c->id, kvl_err_name(c->status),
		            c->valid_pages, kvl_err_name(status), valid);
	assert_int_equal(c->kind, kind);
	assert_int_equal(c->status, status);
	assert_int_equal(c->valid_pages, valid);
	assert_int_equal(c->n_pages, n);
}

/* Offloads r from lk, flushes and returns its completion. */
static kvl_completion offload_sync(kvl_linker *lk, uint64_t id, const req *r,
                                   const kvl_hash *ns)
{
	EXPECT_RC(lk, kvl_linker_offload(lk, id, r->pages, r->n, ns, r->sp),
	          KVL_OK);
	EXPECT_RC(lk, kvl_linker_flush(lk, LONG_MS), KVL_OK);
	return collect1(lk, id);
}

/* Loads r as the only request of a batch; waits every layer in order into
 * waits[] (may be NULL) and returns the completion. */
static kvl_completion load_sync(kvl_linker *lk, uint64_t id, const req *r,
                                const kvl_hash *ns, int *waits)
{
	EXPECT_RC(lk, kvl_linker_load(lk, id, r->pages, r->n, ns, r->sp),
	          KVL_OK);
	uint64_t b = 0;
	EXPECT_RC(lk, kvl_linker_start(lk, &b), KVL_OK);
	for (uint32_t ly = 0; ly < kvl_linker_layers(lk); ly++) {
		int rc = kvl_linker_wait(lk, b, ly, LONG_MS);
		assert_int_not_equal(rc, KVL_ETIMEDOUT);
		if (waits)
			waits[ly] = rc;
	}
	return collect1(lk, id);
}

static size_t lookup(kvl_linker *lk, const kvl_hash *pages, size_t n,
                     const kvl_hash *ns, const uint8_t *const *pool_pages)
{
	size_t prefix = 12345;
	EXPECT_RC(lk, kvl_linker_lookup(lk, pages, n, ns, pool_pages, &prefix),
	          KVL_OK);
	return prefix;
}

/* --------------------------------------------------------- fault store */

/* 1 when this build opens "fault+" stores around the store under test;
 * else prints why (once) and returns 0. */
static int fault_store_ok(void)
{
	static int known = -1;
	if (known >= 0)
		return known;
	kvl_store *s = NULL;
	char err[256] = "";
	const char *uri = store_uri("fault+", "fault.latency_ms=1");
	int rc = kvl_store_open(uri, &s, err, sizeof err);
	if (rc)
		printf("[  SKIP    ] the fault store cannot be opened (%s): "
		       "%s: %s\n",
		       uri, kvl_err_name(rc), err);
	kvl_store_close(s);
	return known = rc == 0;
}

#define NEED_FAULT_STORE()                                                 \
	do {                                                               \
		if (!fault_store_ok()) {                                   \
			skip();                                            \
			return;                                            \
		}                                                          \
	} while (0)

/* Changes the fault store's configuration for the calls that follow. */
static void fault_latency(kvl_store *s, uint32_t ms)
{
	kvl__fault_cfg cfg;
	assert_int_equal(kvl__fault_get(s, &cfg), KVL_OK);
	cfg.latency_ms = ms;
	cfg.latency_p = 1;
	assert_int_equal(kvl__fault_set(s, &cfg), KVL_OK);
}

static uint64_t fault_gets(kvl_store *s)
{
	uint64_t gets = 0;
	assert_int_equal(kvl__fault_calls(s, &gets, NULL), KVL_OK);
	return gets;
}

/* The get call `k` calls from now fails whole (1: the next one). */
static void fault_fail_get_in(kvl_store *s, uint64_t k)
{
	kvl__fault_cfg cfg;
	assert_int_equal(kvl__fault_get(s, &cfg), KVL_OK);
	cfg.fail_get_call = fault_gets(s) + k;
	assert_int_equal(kvl__fault_set(s, &cfg), KVL_OK);
}

static uint64_t fault_puts(kvl_store *s)
{
	uint64_t puts = 0;
	assert_int_equal(kvl__fault_calls(s, NULL, &puts), KVL_OK);
	return puts;
}

/* Waits until the store has received `n` get (or put) calls: the linker's
 * thread is then inside the n-th one, sleeping its latency. */
static void fault_await_calls(kvl_store *s, int puts, uint64_t n)
{
	uint64_t deadline = now_ms() + COLLECT_MS;
	while ((puts ? fault_puts(s) : fault_gets(s)) < n) {
		assert_true(now_ms() < deadline);
		sleep_ms(1);
	}
}

static void fault_down(kvl_store *s, int down)
{
	kvl__fault_cfg cfg;
	assert_int_equal(kvl__fault_get(s, &cfg), KVL_OK);
	cfg.down = down;
	assert_int_equal(kvl__fault_set(s, &cfg), KVL_OK);
}

/* ================================================================== open */

static void test_open_errors(void **state)
{
	(void)state;
	host h, u;
	host_init(&h, NULL);
	host_init2(&u, NULL, 1);
	kvl_store *s = open_store(STORE_URI);
	kvl_linker *lk = (kvl_linker *)&h; /* must stay untouched on error */
	char err[256];

	err[0] = 0;
	assert_int_equal(kvl_linker_open(NULL, s, NULL, &lk, err, sizeof err),
	                 KVL_EINVAL);
	assert_true(strlen(err) > 0);
	err[0] = 0;
	assert_int_equal(kvl_linker_open(h.l, NULL, NULL, &lk, err,
	                                 sizeof err),
	                 KVL_EINVAL);
	assert_true(strlen(err) > 0);
	err[0] = 0;
	assert_int_equal(kvl_linker_open(h.l, s, NULL, NULL, err, sizeof err),
	                 KVL_EINVAL);
	assert_true(strlen(err) > 0);
	err[0] = 0;
	assert_int_equal(kvl_linker_open(u.l, s, NULL, &lk, err, sizeof err),
	                 KVL_EINVAL);
	expect_msg(err, "finalized");

	kvl_linker_opts o;
	memset(&o, 0, sizeof o);
	err[0] = 0;
	assert_int_equal(kvl_linker_open(h.l, s, &o, &lk, err, sizeof err),
	                 KVL_EINVAL);
	expect_msg(err, "struct_size");
	o.struct_size = sizeof o + 8;
	err[0] = 0;
	assert_int_equal(kvl_linker_open(h.l, s, &o, &lk, err, sizeof err),
	                 KVL_EINVAL);
	expect_msg(err, "struct_size");
	/* A pool on a CUDA device in a build without CUDA. */
	if (!kvl_has_feature("cuda")) {
		hcfg cc = {.cuda = 1};
		host g;
		host_init(&g, &cc);
		err[0] = 0;
		assert_int_equal(kvl_linker_open(g.l, s, NULL, &lk, err,
		                                 sizeof err),
		                 KVL_ENOTSUP);
		expect_msg(err, "CUDA");
		host_free(&g);
	}
	/* No message buffer: still fails cleanly. */
	assert_int_equal(kvl_linker_open(h.l, s, &o, &lk, NULL, 0), KVL_EINVAL);
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
	expect_completion((kvl_completion[]){offload_sync(lk, 1, &r, NULL)},
	                  KVL_REQ_OFFLOAD, 0, 2, 2);
	assert_int_equal(lookup(lk, pg, 2, NULL, NULL), 2);
	kvl_linker_close(lk);

	kvl_linker_close(NULL);
	kvl_linker_shutdown(NULL);
	assert_int_equal(kvl_linker_layers(NULL), 0);
	assert_non_null(kvl_linker_errmsg(NULL));
	kvl_store_close(s);
	host_free(&u);
	host_free(&h);
}

/* ================================================================ lookup */

static void test_lookup_basic(void **state)
{
	(void)state;
	hcfg cfg = {.swa = 1};
	host h;
	host_init(&h, &cfg);
	kvl_store *s = open_store(STORE_URI);
	kvl_linker *lk = open_lk(&h, s, NULL);
	kvl_hash pg[8];
	make_pages(pg, 8, 2);

	/* Nothing stored: 0; n_pages 0: 0 (pages may be NULL). */
	assert_int_equal(lookup(lk, pg, 8, NULL, NULL), 0);
	assert_int_equal(lookup(lk, NULL, 0, NULL, NULL), 0);
	assert_int_equal(lookup(lk, pg, 0, NULL, NULL), 0);
	size_t prefix = 0;
	EXPECT_RC(lk, kvl_linker_lookup(lk, NULL, 3, NULL, NULL, &prefix),
	          KVL_EINVAL);
	EXPECT_RC(lk, kvl_linker_lookup(lk, pg, 3, NULL, NULL, NULL),
	          KVL_EINVAL);

	/* Offload pages 0..5 of both pools. */
	req r;
	req_init(&r, pg, 6);
	req_pool(&r, h.kv, 0, 0);
	req_pool(&r, h.swa, 0, 0);
	fill_req(&h, &r);
	expect_completion((kvl_completion[]){offload_sync(lk, 1, &r, NULL)},
	                  KVL_REQ_OFFLOAD, 0, 6, 6);
	assert_int_equal(lookup(lk, pg, 6, NULL, NULL), 6);
	assert_int_equal(lookup(lk, pg, 8, NULL, NULL), 6);
	assert_int_equal(lookup(lk, pg, 3, NULL, NULL), 3);

	/* One store exists call per lookup: every (page, pool) asked counts
	 * once as a hit or a miss. */
	kvl_store_stats a, b;
	assert_int_equal(kvl_store_stats_get(s, &a), KVL_OK);
	assert_int_equal(lookup(lk, pg, 8, NULL, NULL), 6);
	assert_int_equal(kvl_store_stats_get(s, &b), KVL_OK);
	assert_int_equal((b.hits + b.misses) - (a.hits + a.misses), 8 * 2);
	assert_int_equal(b.hits - a.hits, 6 * 2);

	/* ALL_PAGES: a hole in the middle ends the prefix. */
	remove_page(s, &h, h.kv, &pg[2], NULL);
	assert_int_equal(lookup(lk, pg, 8, NULL, NULL), 2);
	remove_page(s, &h, h.kv, &pg[0], NULL);
	assert_int_equal(lookup(lk, pg, 8, NULL, NULL), 0);

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
	expect_completion((kvl_completion[]){offload_sync(lk, id, &r, NULL)},
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
	kvl_store *s = open_store(STORE_URI);
	kvl_linker *lk = open_lk(&h, s, NULL);
	kvl_hash pg[6];
	make_pages(pg, 6, 3);
	store_pattern(lk, &h, pg, 4, (const uint8_t[]){0, 1, 0, 1}, 1);
	assert_int_equal(lookup(lk, pg, 4, NULL, NULL), 4);
	assert_int_equal(lookup(lk, pg, 3, NULL, NULL), 2);
	remove_page(s, &h, h.swa, &pg[3], NULL);
	assert_int_equal(lookup(lk, pg, 4, NULL, NULL), 2);
	kvl_linker_close(lk);
	kvl_store_close(s);
	host_free(&h);

	/* Window 2: kv on pages 0..5, swa on 1, 2, 4, 5 → {0, 3, 6}. */
	hcfg c2 = {.swa = 1, .swa_window = 2};
	host_init(&h, &c2);
	s = open_store(STORE_URI);
	lk = open_lk(&h, s, NULL);
	store_pattern(lk, &h, pg, 6, (const uint8_t[]){0, 1, 1, 0, 1, 1}, 1);
	assert_int_equal(lookup(lk, pg, 6, NULL, NULL), 6);
	assert_int_equal(lookup(lk, pg, 5, NULL, NULL), 3);
	assert_int_equal(lookup(lk, pg, 4, NULL, NULL), 3);
	assert_int_equal(lookup(lk, pg, 2, NULL, NULL), 0);

	/* pool_pages: swa asked only for pages 4, 5 → 6 (kv all present). */
	const uint8_t tail[6] = {0, 0, 0, 0, 1, 1};
	const uint8_t *pp1[2] = {NULL, tail};
	pp1[h.kv] = NULL;
	pp1[h.swa] = tail;
	assert_int_equal(lookup(lk, pg, 6, NULL, pp1), 6);
	/* swa asked for pages 0..3 only: 4, 5 count as absent → 3. */
	const uint8_t head[6] = {1, 1, 1, 1, 0, 0};
	const uint8_t *pp2[2];
	pp2[h.kv] = NULL;
	pp2[h.swa] = head;
	assert_int_equal(lookup(lk, pg, 6, NULL, pp2), 3);
	/* kv asked for pages 0..2 only → kv allows 1..3; swa → 3. */
	const uint8_t kv3[6] = {1, 1, 1, 0, 0, 0};
	const uint8_t *pp3[2];
	pp3[h.kv] = kv3;
	pp3[h.swa] = NULL;
	assert_int_equal(lookup(lk, pg, 6, NULL, pp3), 3);
	/* swa with no flag does not constrain: kv's 6 even where swa has
	 * holes; and the store is asked only the flagged items. */
	const uint8_t none[6] = {0};
	const uint8_t *pp4[2];
	pp4[h.kv] = NULL;
	pp4[h.swa] = none;
	kvl_store_stats a, b;
	assert_int_equal(kvl_store_stats_get(s, &a), KVL_OK);
	assert_int_equal(lookup(lk, pg, 6, NULL, pp4), 6);
	assert_int_equal(lookup(lk, pg, 6, NULL, pp1), 6);
	assert_int_equal(kvl_store_stats_get(s, &b), KVL_OK);
	assert_int_equal((b.hits + b.misses) - (a.hits + a.misses),
	                 6 + (6 + 2));

	/* Holes: without swa page 5 → 3; without swa page 2 too → 0. */
	remove_page(s, &h, h.swa, &pg[5], NULL);
	assert_int_equal(lookup(lk, pg, 6, NULL, NULL), 3);
	remove_page(s, &h, h.swa, &pg[2], NULL);
	assert_int_equal(lookup(lk, pg, 6, NULL, NULL), 0);
	assert_int_equal(lookup(lk, pg, 6, NULL, pp4), 6);

	kvl_linker_close(lk);
	kvl_store_close(s);
	host_free(&h);
}

static void test_lookup_namespace(void **state)
{
	(void)state;
	host src, dst;
	host_init(&src, NULL);
	host_init(&dst, NULL);
	kvl_store *s = open_store(STORE_URI);
	kvl_linker *lk = open_lk(&src, s, NULL);
	kvl_hash pg[5];
	make_pages(pg, 5, 4);
	kvl_hash na = make_seed("tenant-a"), nb = make_seed("tenant-b");

	req r;
	req_init(&r, pg, 5);
	req_pool(&r, src.kv, 3, 0);
	fill_req(&src, &r);
	expect_completion((kvl_completion[]){offload_sync(lk, 1, &r, &na)},
	                  KVL_REQ_OFFLOAD, 0, 5, 5);
	assert_int_equal(lookup(lk, pg, 5, &nb, NULL), 0);
	assert_int_equal(lookup(lk, pg, 5, NULL, NULL), 0);
	assert_int_equal(lookup(lk, pg, 5, &na, NULL), 5);
	assert_int_equal(page_present(s, &src, src.kv, &pg[1], &na), 1);
	assert_int_equal(page_present(s, &src, src.kv, &pg[1], NULL), 0);

	/* Loads find the pages only under the same seed. */
	kvl_linker *ld = open_lk(&dst, s, NULL);
	req d;
	req_init(&d, pg, 5);
	req_pool(&d, dst.kv, 8, 0);
	kvl_completion c = load_sync(ld, 10, &d, &nb, NULL);
	expect_completion(&c, KVL_REQ_LOAD, KVL_ENOTFOUND, 0, 5);
	c = load_sync(ld, 11, &d, &na, NULL);
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
	a->rc = kvl_linker_lookup(a->lk, a->pages, a->n, NULL, NULL,
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
	kvl_store *s = open_store(STORE_URI);
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
		kvl_completion c = offload_sync(lks[r], 100 + r, &q, NULL);
		expect_completion(&c, KVL_REQ_OFFLOAD, 0, 8, 8);
	}
	ranks_lookup(lks, n_ranks, pg, 8, 8);
	/* The last rank lacks page 5 of its kv shard: everyone gets 5. */
	remove_page(s, &h[n_ranks - 1], h[n_ranks - 1].kv, &pg[5], NULL);
	ranks_lookup(lks, n_ranks, pg, 8, 5);
	/* Rank 1 lacks page 3: everyone gets 3. */
	remove_page(s, &h[1], h[1].kv, &pg[3], NULL);
	ranks_lookup(lks, n_ranks, pg, 8, 3);
	/* The replicated pool is shared: without its page 1 → 1. */
	remove_page(s, &h[0], h[0].mla, &pg[1], NULL);
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
	kvl_store *s = open_store(STORE_URI);
	kvl_rank_group *g = NULL;
	assert_int_equal(kvl_rank_group_create(2, 100, &g), KVL_OK);
	kvl_linker_opts o = {.struct_size = sizeof o};
	o.allreduce = kvl_rank_group_allreduce;
	o.allreduce_user = g;
	kvl_linker *lk = open_lk(&h, s, &o);
	kvl_hash pg[2];
	make_pages(pg, 2, 25);
	size_t prefix = 99;
	EXPECT_RC(lk, kvl_linker_lookup(lk, pg, 2, NULL, NULL, &prefix),
	          KVL_ETIMEDOUT);
	expect_msg(kvl_linker_errmsg(lk), "all-reduce");
	EXPECT_RC(lk, kvl_linker_lookup(lk, pg, 2, NULL, NULL, &prefix),
	          KVL_ESTATE);
	kvl_linker_close(lk);
	kvl_rank_group_free(g);
	kvl_store_close(s);
	host_free(&h);
}

/* ================================================================== load */

static void test_load_roundtrip(void **state)
{
	(void)state;
	hcfg cfg = {.swa = 1};
	host src, dst;
	host_init(&src, &cfg);
	host_init(&dst, &cfg);
	kvl_store *s = open_store(STORE_URI);
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
	kvl_completion c = offload_sync(ls, 1, &r, NULL);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 6, 6);
	assert_int_equal(lookup(ld, pg, 6, NULL, NULL), 6);

	/* Load into other slots: kv for every page (slots 15 down to 10),
	 * swa only for the trailing window (pages 4 and 5 into slots 7, 8).
	 */
	req d;
	req_init(&d, pg, 6);
	req_pool(&d, dst.kv, 0, 0);
	for (size_t i = 0; i < 6; i++)
		d.slot[dst.kv][i] = 15 - i;
	req_pool(&d, dst.swa, 7, 4);
	EXPECT_RC(ld, kvl_linker_load(ld, 2, d.pages, 6, NULL, d.sp), KVL_OK);
	uint64_t b = 0;
	EXPECT_RC(ld, kvl_linker_start(ld, &b), KVL_OK);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++) {
		EXPECT_RC(ld, kvl_linker_wait(ld, b, ly, LONG_MS), KVL_OK);
		/* Layer ly is complete: its bytes are there. */
		check_req(&dst, &d, 6, ly + 1);
	}
	EXPECT_RC(ld, kvl_linker_wait(ld, b, 0, 0), KVL_OK);
	EXPECT_RC(ld, kvl_linker_wait(ld, b, N_LAYERS, 0), KVL_ERANGE);
	EXPECT_RC(ld, kvl_linker_wait(ld, b + 1, 0, 0), KVL_ENOTFOUND);
	EXPECT_RC(ld, kvl_linker_wait(ld, b + 1000, 0, 0), KVL_ENOTFOUND);
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
	c = load_sync(ld, 3, &w, NULL, NULL);
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
	EXPECT_RC(ld, kvl_linker_load(ld, 4, e1.pages, 3, NULL, e1.sp),
	          KVL_OK);
	EXPECT_RC(ld, kvl_linker_load(ld, 5, e2.pages, 3, NULL, e2.sp),
	          KVL_OK);
	EXPECT_RC(ld, kvl_linker_start(ld, &b), KVL_OK);
	EXPECT_RC(ld, kvl_linker_wait(ld, b, N_LAYERS - 1, LONG_MS), KVL_OK);
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
		kvl_store *s = open_store(STORE_URI);
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
		kvl_completion c = offload_sync(ls, 1, &r, NULL);
		expect_completion(&c, KVL_REQ_OFFLOAD, 0, 7, 7);
		kvl_store_stats st;
		assert_int_equal(kvl_store_stats_get(s, &st), KVL_OK);
		assert_int_equal(st.puts, 7 + 5);
		assert_int_equal(lookup(ld, pg, 7, NULL, NULL), 7);
		memset(dst.mem, FILL, dst.mem_bytes);
		req d1, d2;
		req_init(&d1, pg, 7);
		req_pool(&d1, dst.kv, 9, 0);
		req_pool(&d1, dst.swa, 0, 2);
		req_init(&d2, pg, 4);
		req_pool(&d2, dst.kv, 0, 0);
		EXPECT_RC(ld, kvl_linker_load(ld, 2, d1.pages, 7, NULL, d1.sp),
		          KVL_OK);
		EXPECT_RC(ld, kvl_linker_load(ld, 3, d2.pages, 4, NULL, d2.sp),
		          KVL_OK);
		uint64_t b = 0;
		EXPECT_RC(ld, kvl_linker_start(ld, &b), KVL_OK);
		for (uint32_t ly = 0; ly < N_LAYERS; ly++)
			EXPECT_RC(ld, kvl_linker_wait(ld, b, ly, LONG_MS),
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
		EXPECT_RC(ld, kvl_linker_lookup(ld, many, 8, NULL, NULL,
		                                &prefix),
		          KVL_ERANGE);
		EXPECT_RC(ld, kvl_linker_load(ld, 4, m.pages, 8, NULL, m.sp),
		          KVL_ERANGE);
		EXPECT_RC(ld, kvl_linker_offload(ld, 5, m.pages, 8, NULL,
		                                 m.sp),
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
	kvl_store *s = open_store(STORE_URI);
	kvl_linker *lk = open_lk(&h, s, NULL);
	kvl_hash pg[4];
	make_pages(pg, 4, 7);
	req r;
	req_init(&r, pg, 4);
	req_pool(&r, h.kv, 0, 0);
	fill_req(&h, &r);
	expect_completion((kvl_completion[]){offload_sync(lk, 1, &r, NULL)},
	                  KVL_REQ_OFFLOAD, 0, 4, 4);
	memset(h.mem, FILL, h.mem_bytes);

	/* Duplicate id while queued: EEXIST, and the original still
	 * completes exactly once. */
	req d;
	req_init(&d, pg, 4);
	req_pool(&d, h.kv, 4, 0);
	EXPECT_RC(lk, kvl_linker_load(lk, 7, d.pages, 4, NULL, d.sp), KVL_OK);
	EXPECT_RC(lk, kvl_linker_load(lk, 7, d.pages, 4, NULL, d.sp),
	          KVL_EEXIST);
	expect_msg(kvl_linker_errmsg(lk), "7");
	/* Another id in the same batch. */
	EXPECT_RC(lk, kvl_linker_load(lk, 8, d.pages, 4, NULL, d.sp), KVL_OK);
	uint64_t b = 0;
	EXPECT_RC(lk, kvl_linker_start(lk, &b), KVL_OK);
	EXPECT_RC(lk, kvl_linker_wait(lk, b, N_LAYERS - 1, LONG_MS), KVL_OK);
	kvl_completion cc[2];
	collect(lk, (const uint64_t[]){7, 8}, 2, cc);
	expect_completion(&cc[0], KVL_REQ_LOAD, 0, 4, 4);
	expect_completion(&cc[1], KVL_REQ_LOAD, 0, 4, 4);
	expect_none(lk, 20);
	/* Polled: the id is free again. */
	kvl_completion c = load_sync(lk, 7, &d, NULL, NULL);
	expect_completion(&c, KVL_REQ_LOAD, 0, 4, 4);
	check_req(&h, &d, 4, N_LAYERS);

	/* Slot out of range: ERANGE, nothing reported later. */
	req bad;
	req_init(&bad, pg, 4);
	req_pool(&bad, h.kv, 0, 0);
	bad.slot[h.kv][2] = NP;
	EXPECT_RC(lk, kvl_linker_load(lk, 20, bad.pages, 4, NULL, bad.sp),
	          KVL_ERANGE);
	expect_msg(kvl_linker_errmsg(lk), "slot");
	EXPECT_RC(lk, kvl_linker_offload(lk, 21, bad.pages, 4, NULL, bad.sp),
	          KVL_ERANGE);
	bad.slot[h.kv][2] = KVL_NO_SLOT - 1;
	EXPECT_RC(lk, kvl_linker_load(lk, 22, bad.pages, 4, NULL, bad.sp),
	          KVL_ERANGE);
	/* swa slot out of range next to good kv slots. */
	req bad2;
	req_init(&bad2, pg, 4);
	req_pool(&bad2, h.kv, 0, 0);
	req_pool(&bad2, h.swa, NP - 1, 2); /* pages 2, 3 → NP-1, NP */
	EXPECT_RC(lk, kvl_linker_load(lk, 23, bad2.pages, 4, NULL, bad2.sp),
	          KVL_ERANGE);

	/* Nothing to load: all NULL, or only KVL_NO_SLOT. */
	req none;
	req_init(&none, pg, 4);
	EXPECT_RC(lk, kvl_linker_load(lk, 24, none.pages, 4, NULL, none.sp),
	          KVL_EINVAL);
	none.sp[h.kv] = none.slot[h.kv];
	EXPECT_RC(lk, kvl_linker_load(lk, 25, none.pages, 4, NULL, none.sp),
	          KVL_EINVAL);
	EXPECT_RC(lk, kvl_linker_offload(lk, 26, none.pages, 4, NULL,
	                                 none.sp),
	          KVL_EINVAL);
	EXPECT_RC(lk, kvl_linker_load(lk, 27, d.pages, 0, NULL, d.sp),
	          KVL_EINVAL);
	EXPECT_RC(lk, kvl_linker_load(lk, 28, NULL, 4, NULL, d.sp),
	          KVL_EINVAL);
	EXPECT_RC(lk, kvl_linker_load(lk, 29, d.pages, 4, NULL, NULL),
	          KVL_EINVAL);
	EXPECT_RC(lk, kvl_linker_offload(lk, 30, NULL, 4, NULL, d.sp),
	          KVL_EINVAL);
	assert_int_equal(kvl_linker_load(NULL, 31, d.pages, 4, NULL, d.sp),
	                 KVL_EINVAL);
	int co = 0;
	assert_int_equal(kvl_linker_cancel(lk, 1, NULL), KVL_EINVAL);
	assert_int_equal(kvl_linker_cancel(NULL, 1, &co), KVL_EINVAL);
	assert_int_equal(kvl_linker_start(lk, NULL), KVL_EINVAL);
	size_t k = 0;
	assert_int_equal(kvl_linker_poll(lk, NULL, 2, &k, 0), KVL_EINVAL);
	assert_int_equal(kvl_linker_poll(lk, cc, 2, NULL, 0), KVL_EINVAL);

	/* Empty batch: every layer is complete; nothing is reported. */
	EXPECT_RC(lk, kvl_linker_start(lk, &b), KVL_OK);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++)
		EXPECT_RC(lk, kvl_linker_wait(lk, b, ly, LONG_MS), KVL_OK);
	uint64_t b2 = 0;
	EXPECT_RC(lk, kvl_linker_start(lk, &b2), KVL_OK);
	assert_true(b2 > b);
	EXPECT_RC(lk, kvl_linker_wait(lk, b2, N_LAYERS - 1, LONG_MS), KVL_OK);
	expect_none(lk, 50);

	/* Wait on a batch that was never started. */
	EXPECT_RC(lk, kvl_linker_wait(lk, b2 + 1, 0, 0), KVL_ENOTFOUND);

	/* The batch ring wraps: old batches are forgotten, new ones work. */
	uint64_t first = 0, last = 0;
	for (int i = 0; i < KVL_LINKER_MAX_BATCHES + 3; i++) {
		EXPECT_RC(lk, kvl_linker_start(lk, &last), KVL_OK);
		if (i == 0)
			first = last;
		EXPECT_RC(lk, kvl_linker_wait(lk, last, N_LAYERS - 1, LONG_MS),
		          KVL_OK);
	}
	EXPECT_RC(lk, kvl_linker_wait(lk, first, 0, 0), KVL_ENOTFOUND);
	EXPECT_RC(lk, kvl_linker_wait(lk, last, 0, 0), KVL_OK);
	expect_none(lk, 0);

	kvl_linker_close(lk);
	kvl_store_close(s);
	host_free(&h);
}

/* ======================================================== failure paths */

static void test_load_evicted(void **state)
{
	(void)state;
	hcfg cfg = {.swa = 1};
	host src, dst;
	host_init(&src, &cfg);
	host_init(&dst, &cfg);
	kvl_store *s = open_store(STORE_URI);
	kvl_linker *ls = open_lk(&src, s, NULL);
	kvl_linker *ld = open_lk(&dst, s, NULL);
	kvl_hash pg[6];
	make_pages(pg, 6, 8);
	req r;
	req_init(&r, pg, 6);
	req_pool(&r, src.kv, 0, 0);
	req_pool(&r, src.swa, 0, 0);
	fill_req(&src, &r);
	expect_completion((kvl_completion[]){offload_sync(ls, 1, &r, NULL)},
	                  KVL_REQ_OFFLOAD, 0, 6, 6);
	assert_int_equal(lookup(ld, pg, 6, NULL, NULL), 6);

	/* kv page 3 vanishes after the lookup: the batch fails from layer 0
	 * (kv's first layer); pages 0..2 are valid. */
	remove_page(s, &src, src.kv, &pg[3], NULL);
	req d;
	req_init(&d, pg, 6);
	req_pool(&d, dst.kv, 0, 0);
	int waits[N_LAYERS];
	kvl_completion c = load_sync(ld, 2, &d, NULL, waits);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++)
		assert_int_equal(waits[ly], KVL_ENOTFOUND);
	expect_msg(kvl_linker_errmsg(ld), "layer 0");
	expect_completion(&c, KVL_REQ_LOAD, KVL_ENOTFOUND, 3, 6);
	check_req(&dst, &d, 3, N_LAYERS);

	/* swa page 4 vanishes: swa's first layer is 1, so layer 0 is fine
	 * and the batch fails from layer 1; pages 0..3 valid. A second
	 * request of the batch that does not touch it succeeds. */
	memset(dst.mem, FILL, dst.mem_bytes);
	remove_page(s, &src, src.swa, &pg[4], NULL);
	req e, f;
	req_init(&e, pg, 3);
	req_pool(&e, dst.kv, 0, 0);
	/* f loads swa pages 4, 5 only (pages 0..3 have no slot); page 4 is
	 * absent → valid 4. */
	req_init(&f, pg, 6);
	req_pool(&f, dst.swa, 4, 4);
	EXPECT_RC(ld, kvl_linker_load(ld, 3, e.pages, 3, NULL, e.sp), KVL_OK);
	EXPECT_RC(ld, kvl_linker_load(ld, 4, f.pages, 6, NULL, f.sp), KVL_OK);
	uint64_t b = 0;
	EXPECT_RC(ld, kvl_linker_start(ld, &b), KVL_OK);
	EXPECT_RC(ld, kvl_linker_wait(ld, b, 0, LONG_MS), KVL_OK);
	EXPECT_RC(ld, kvl_linker_wait(ld, b, 1, LONG_MS), KVL_ENOTFOUND);
	expect_msg(kvl_linker_errmsg(ld), "failed at layer 1");
	EXPECT_RC(ld, kvl_linker_wait(ld, b, 2, LONG_MS), KVL_ENOTFOUND);
	EXPECT_RC(ld, kvl_linker_wait(ld, b, 3, LONG_MS), KVL_ENOTFOUND);
	EXPECT_RC(ld, kvl_linker_wait(ld, b, 0, 0), KVL_OK);
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
	c = load_sync(ld, 5, &g, NULL, waits);
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
	key_of(h, pool, page, NULL, key);
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
	key_of(h, pool, page, NULL, key);
	const char *k = key;
	kvl_range rg = {0, buf, *len};
	size_t one = 1;
	int64_t got = -100;
	assert_int_equal(kvl_store_get(s, &k, 1, &rg, &one, &got), KVL_OK);
	assert_int_equal(got, (int64_t)*len);
	return buf;
}

static void run_corrupt(const char *uri)
{
	hcfg cfg = {.swa = 1};
	host src, dst;
	host_init(&src, &cfg);
	host_init(&dst, &cfg);
	kvl_store *s = open_store(uri);
	kvl_linker *ls = open_lk(&src, s, NULL);
	kvl_linker *ld = open_lk(&dst, s, NULL);
	kvl_hash pg[6];
	make_pages(pg, 6, 9);
	req r;
	req_init(&r, pg, 6);
	req_pool(&r, src.kv, 0, 0);
	req_pool(&r, src.swa, 0, 0);
	fill_req(&src, &r);
	expect_completion((kvl_completion[]){offload_sync(ls, 1, &r, NULL)},
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
	kvl_completion c = load_sync(ld, 2, &d, NULL, waits);
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
	c = load_sync(ld, 3, &e, NULL, waits);
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
	c = load_sync(ld, 4, &t, NULL, NULL);
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
	c = load_sync(ld, 5, &f, NULL, waits);
	if (!s->trusted) {
		/* A store that reads whole objects has every layer read,
		 * and checked, with the first. */
		int at = s->whole_reads ? 0 : 2;
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
	kvl_store *s = open_store(store_uri("fault+", NULL));
	if (!s->whole_reads) { /* say it, unless the store under test does */
		kvl_store_close(s);
		s = open_store(store_uri("fault+", "fault.whole_reads=1"));
	}
	assert_true(s->whole_reads);
	kvl_linker *ls = open_lk(&src, s, NULL);
	kvl_linker *ld = open_lk(&dst, s, NULL);
	kvl_hash pg[5];
	make_pages(pg, 5, 12);
	req r;
	req_init(&r, pg, 5);
	req_pool(&r, src.kv, 0, 0);
	req_pool(&r, src.swa, 0, 0);
	fill_req(&src, &r);
	expect_completion((kvl_completion[]){offload_sync(ls, 1, &r, NULL)},
	                  KVL_REQ_OFFLOAD, 0, 5, 5);

	/* kv pages 0..4 (first layer 0), swa pages 3, 4 (first layer 1):
	 * two gets, every byte of every layer. */
	req d;
	req_init(&d, pg, 5);
	req_pool(&d, dst.kv, 0, 0);
	req_pool(&d, dst.swa, 0, 3);
	int waits[N_LAYERS];
	uint64_t gets = fault_gets(s);
	kvl_completion c = load_sync(ld, 2, &d, NULL, waits);
	assert_int_equal(fault_gets(s) - gets, 2);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++)
		assert_int_equal(waits[ly], KVL_OK);
	expect_completion(&c, KVL_REQ_LOAD, 0, 5, 5);
	check_req(&dst, &d, 5, N_LAYERS);

	/* The swa read (layer 1) fails: kv's pages 0..2 stay valid. */
	memset(dst.mem, FILL, dst.mem_bytes);
	fault_fail_get_in(s, 2);
	c = load_sync(ld, 3, &d, NULL, waits);
	assert_int_equal(waits[0], KVL_OK);
	for (uint32_t ly = 1; ly < N_LAYERS; ly++)
		assert_int_equal(waits[ly], KVL_EIO);
	expect_completion(&c, KVL_REQ_LOAD, KVL_EIO, 3, 5);
	check_req(&dst, &d, 3, N_LAYERS);

	/* The kv read fails: nothing is valid. */
	fault_fail_get_in(s, 1);
	c = load_sync(ld, 4, &d, NULL, waits);
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
	c = load_sync(ld, 5, &d, NULL, waits);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++)
		assert_int_equal(waits[ly], KVL_ECORRUPT);
	expect_completion(&c, KVL_REQ_LOAD, KVL_ECORRUPT, 1, 5);
	check_req(&dst, &d, 1, N_LAYERS);

	/* swa page 4 evicted: the batch fails from swa's layer 1, valid 4
	 * once kv page 1 is good again. */
	remove_page(s, &src, src.kv, &pg[1], NULL);
	req one;
	req_init(&one, pg + 1, 1);
	req_pool(&one, src.kv, 1, 0);
	expect_completion((kvl_completion[]){offload_sync(ls, 6, &one, NULL)},
	                  KVL_REQ_OFFLOAD, 0, 1, 1);
	remove_page(s, &src, src.swa, &pg[4], NULL);
	memset(dst.mem, FILL, dst.mem_bytes);
	c = load_sync(ld, 7, &d, NULL, waits);
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
static void test_load_store_error(void **state)
{
	(void)state;
	NEED_FAULT_STORE();
	hcfg cfg = {.swa = 1};
	host src, dst;
	host_init(&src, &cfg);
	host_init(&dst, &cfg);
	kvl_store *s =
		open_store(store_uri("fault+", "fault.fail_get_call=3"));
	if (s->whole_reads) {
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
	expect_completion((kvl_completion[]){offload_sync(ls, 1, &r, NULL)},
	                  KVL_REQ_OFFLOAD, 0, 5, 5);
	assert_int_equal(lookup(ld, pg, 5, NULL, NULL), 5);
	assert_int_equal(fault_gets(s), 0); /* offload and lookup: no get */

	req d;
	req_init(&d, pg, 5);
	req_pool(&d, dst.kv, 0, 0);
	req_pool(&d, dst.swa, 0, 3);
	int waits[N_LAYERS];
	kvl_completion c = load_sync(ld, 2, &d, NULL, waits);
	/* One get per layer; none for layer 3: nothing valid is left. */
	assert_int_equal(fault_gets(s), 3);
	assert_int_equal(waits[0], KVL_OK);
	assert_int_equal(waits[1], KVL_OK);
	assert_int_equal(waits[2], KVL_EIO);
	assert_int_equal(waits[3], KVL_EIO);
	expect_completion(&c, KVL_REQ_LOAD, KVL_EIO, 0, 5);
	/* Layers 0 and 1 did arrive. */
	check_req(&dst, &d, 5, 2);

	/* Only that call failed: a new batch loads everything. */
	memset(dst.mem, FILL, dst.mem_bytes);
	c = load_sync(ld, 3, &d, NULL, waits);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++)
		assert_int_equal(waits[ly], KVL_OK);
	expect_completion(&c, KVL_REQ_LOAD, 0, 5, 5);
	check_req(&dst, &d, 5, N_LAYERS);
	assert_int_equal(fault_gets(s), 3 + N_LAYERS);

	/* The first get of a batch fails: every layer fails. */
	fault_fail_get_in(s, 1);
	c = load_sync(ld, 4, &d, NULL, waits);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++)
		assert_int_equal(waits[ly], KVL_EIO);
	expect_completion(&c, KVL_REQ_LOAD, KVL_EIO, 0, 5);

	/* The store is down: lookup fails with EIO (prefix 0), offload
	 * completes with EIO, a load fails at layer 0; back up, all works. */
	fault_down(s, 1);
	size_t prefix = 99;
	EXPECT_RC(ld, kvl_linker_lookup(ld, pg, 5, NULL, NULL, &prefix),
	          KVL_EIO);
	expect_msg(kvl_linker_errmsg(ld), "lookup");
	kvl_hash p2[2];
	make_pages(p2, 2, 110);
	req o;
	req_init(&o, p2, 2);
	req_pool(&o, src.kv, 8, 0);
	c = offload_sync(ls, 5, &o, NULL);
	expect_completion(&c, KVL_REQ_OFFLOAD, KVL_EIO, 0, 2);
	c = load_sync(ld, 6, &d, NULL, waits);
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
	c = offload_sync(ls, 9, &o, NULL);
	expect_completion(&c, KVL_REQ_OFFLOAD, KVL_EIO, 0, 2);
	assert_int_equal(lookup(ld, pg, 5, NULL, NULL), 5);
	assert_int_equal(lookup(ld, p2, 2, NULL, NULL), 0);
	c = offload_sync(ls, 7, &o, NULL);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 2, 2);
	memset(dst.mem, FILL, dst.mem_bytes);
	c = load_sync(ld, 8, &d, NULL, NULL);
	expect_completion(&c, KVL_REQ_LOAD, 0, 5, 5);
	check_req(&dst, &d, 5, N_LAYERS);

	kvl_linker_close(ld);
	kvl_linker_close(ls);
	kvl_store_close(s);
	host_free(&dst);
	host_free(&src);
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
		s[r] = open_store(store_uri("fault+", NULL));
		kvl_linker_opts o = {.struct_size = sizeof o};
		o.allreduce = kvl_rank_group_allreduce;
		o.allreduce_user = g;
		lks[r] = open_lk(&h[r], s[r], &o);
		req q;
		req_init(&q, pg, 4);
		req_pool(&q, h[r].kv, 0, 0);
		fill_req(&h[r], &q);
		kvl_completion c = offload_sync(lks[r], 1, &q, NULL);
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
	assert_true(now_ms() - t0 < 5000);
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

/* A slow store: wait and flush time out, then succeed; a load canceled
 * after its batch started completes normally. */
static void test_slow_store(void **state)
{
	(void)state;
	NEED_FAULT_STORE();
	host src, dst;
	host_init(&src, NULL);
	host_init(&dst, NULL);
	kvl_store *s = open_store(store_uri("fault+", NULL));
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
	EXPECT_RC(ls, kvl_linker_offload(ls, 1, r.pages, 3, NULL, r.sp),
	          KVL_OK);
	EXPECT_RC(ls, kvl_linker_flush(ls, 10), KVL_ETIMEDOUT);
	expect_msg(kvl_linker_errmsg(ls), "flush");
	EXPECT_RC(ls, kvl_linker_flush(ls, 0), KVL_ETIMEDOUT);
	EXPECT_RC(ls, kvl_linker_flush(ls, LONG_MS), KVL_OK);
	kvl_completion c = collect1(ls, 1);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 3, 3);

	/* Wait times out, then returns 0. */
	req d;
	req_init(&d, pg, 3);
	req_pool(&d, dst.kv, 5, 0);
	EXPECT_RC(ld, kvl_linker_load(ld, 2, d.pages, 3, NULL, d.sp), KVL_OK);
	uint64_t b = 0;
	EXPECT_RC(ld, kvl_linker_start(ld, &b), KVL_OK);
	/* Started: cancel no longer withdraws it. */
	int co = -1;
	EXPECT_RC(ld, kvl_linker_cancel(ld, 2, &co), KVL_OK);
	assert_int_equal(co, 0);
	EXPECT_RC(ld, kvl_linker_wait(ld, b, 0, 10), KVL_ETIMEDOUT);
	expect_msg(kvl_linker_errmsg(ld), "wait");
	EXPECT_RC(ld, kvl_linker_wait(ld, b, N_LAYERS - 1, 0), KVL_ETIMEDOUT);
	expect_none(ld, 0); /* not complete yet */
	EXPECT_RC(ld, kvl_linker_wait(ld, b, N_LAYERS - 1, LONG_MS), KVL_OK);
	c = collect1(ld, 2);
	expect_completion(&c, KVL_REQ_LOAD, 0, 3, 3);
	check_req(&dst, &d, 3, N_LAYERS);

	/* An empty batch is complete at once: it never holds the ring. */
	EXPECT_RC(ld, kvl_linker_start(ld, &b), KVL_OK);
	EXPECT_RC(ld, kvl_linker_wait(ld, b, N_LAYERS - 1, 0), KVL_OK);

	/* Slow batches hold the ring: KVL_LINKER_MAX_BATCHES unfinished
	 * batches, then start says EFULL (and accepts nothing). */
	fault_latency(s, 5);
	uint64_t ids[KVL_LINKER_MAX_BATCHES + 1];
	uint64_t first = 0, last = 0;
	for (int i = 0; i < KVL_LINKER_MAX_BATCHES; i++) {
		ids[i] = i ? 1000 + (uint64_t)i : 3;
		EXPECT_RC(ld, kvl_linker_load(ld, ids[i], d.pages, 3, NULL,
		                              d.sp),
		          KVL_OK);
		EXPECT_RC(ld, kvl_linker_start(ld, i ? &last : &first), KVL_OK);
	}
	ids[KVL_LINKER_MAX_BATCHES] = 4;
	EXPECT_RC(ld, kvl_linker_load(ld, 4, d.pages, 3, NULL, d.sp), KVL_OK);
	EXPECT_RC(ld, kvl_linker_start(ld, &b), KVL_EFULL);
	expect_msg(kvl_linker_errmsg(ld), "batches");
	EXPECT_RC(ld, kvl_linker_wait(ld, last, N_LAYERS - 1, LONG_MS),
	          KVL_OK);
	EXPECT_RC(ld, kvl_linker_wait(ld, first, N_LAYERS - 1, 0), KVL_OK);
	/* Load 4 stayed queued and goes into the next batch. */
	EXPECT_RC(ld, kvl_linker_start(ld, &b), KVL_OK);
	assert_int_equal(b, last + 1);
	EXPECT_RC(ld, kvl_linker_wait(ld, b, N_LAYERS - 1, LONG_MS), KVL_OK);
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
		kvl_store *s = open_store(uri);
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
			kvl_completion c = offload_sync(ls, base + 1, &r, NULL);
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
			EXPECT_RC(ld, kvl_linker_load(ld, base + 2, d1.pages,
			                              8, NULL, d1.sp),
			          KVL_OK);
			EXPECT_RC(ld, kvl_linker_load(ld, base + 3, d2.pages,
			                              8, NULL, d2.sp),
			          KVL_OK);
			uint64_t b = 0;
			EXPECT_RC(ld, kvl_linker_start(ld, &b), KVL_OK);
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

/* ================================================================ cancel */

static void test_cancel(void **state)
{
	(void)state;
	host src, dst;
	host_init(&src, NULL);
	host_init(&dst, NULL);
	kvl_store *s = open_store(STORE_URI);
	kvl_linker *ls = open_lk(&src, s, NULL);
	kvl_linker *ld = open_lk(&dst, s, NULL);
	kvl_hash pg[4];
	make_pages(pg, 4, 12);
	req r;
	req_init(&r, pg, 4);
	req_pool(&r, src.kv, 0, 0);
	fill_req(&src, &r);
	expect_completion((kvl_completion[]){offload_sync(ls, 1, &r, NULL)},
	                  KVL_REQ_OFFLOAD, 0, 4, 4);

	req a, b, c3;
	req_init(&a, pg, 4);
	req_pool(&a, dst.kv, 0, 0);
	req_init(&b, pg, 4);
	req_pool(&b, dst.kv, 4, 0);
	req_init(&c3, pg, 4);
	req_pool(&c3, dst.kv, 8, 0);
	EXPECT_RC(ld, kvl_linker_load(ld, 10, a.pages, 4, NULL, a.sp), KVL_OK);
	EXPECT_RC(ld, kvl_linker_load(ld, 11, b.pages, 4, NULL, b.sp), KVL_OK);
	EXPECT_RC(ld, kvl_linker_load(ld, 12, c3.pages, 4, NULL, c3.sp),
	          KVL_OK);
	/* Before start: withdrawn (middle and head of the queue). */
	int co = -1;
	EXPECT_RC(ld, kvl_linker_cancel(ld, 11, &co), KVL_OK);
	assert_int_equal(co, 1);
	kvl_completion c = collect1(ld, 11);
	expect_completion(&c, KVL_REQ_LOAD, KVL_ECANCELED, 0, 4);
	co = -1;
	EXPECT_RC(ld, kvl_linker_cancel(ld, 10, &co), KVL_OK);
	assert_int_equal(co, 1);
	c = collect1(ld, 10);
	expect_completion(&c, KVL_REQ_LOAD, KVL_ECANCELED, 0, 4);
	/* Twice, unknown: ENOTFOUND. */
	EXPECT_RC(ld, kvl_linker_cancel(ld, 11, &co), KVL_ENOTFOUND);
	EXPECT_RC(ld, kvl_linker_cancel(ld, 999, &co), KVL_ENOTFOUND);
	expect_msg(kvl_linker_errmsg(ld), "999");
	/* The canceled ones are not in the next batch: their slots stay
	 * untouched, the remaining one (the tail) loads. */
	uint64_t bt = 0;
	EXPECT_RC(ld, kvl_linker_start(ld, &bt), KVL_OK);
	EXPECT_RC(ld, kvl_linker_wait(ld, bt, N_LAYERS - 1, LONG_MS), KVL_OK);
	c = collect1(ld, 12);
	expect_completion(&c, KVL_REQ_LOAD, 0, 4, 4);
	check_req(&dst, &c3, 4, N_LAYERS);
	for (size_t sl = 0; sl < 8; sl++)
		assert_true(slot_untouched(&dst, dst.kv, sl, 0));
	expect_none(ld, 20);
	/* A canceled id is free again; canceling the tail then loading more
	 * keeps the queue intact. */
	EXPECT_RC(ld, kvl_linker_load(ld, 10, a.pages, 4, NULL, a.sp), KVL_OK);
	EXPECT_RC(ld, kvl_linker_load(ld, 11, b.pages, 4, NULL, b.sp), KVL_OK);
	EXPECT_RC(ld, kvl_linker_cancel(ld, 11, &co), KVL_OK);
	assert_int_equal(co, 1);
	EXPECT_RC(ld, kvl_linker_load(ld, 13, b.pages, 4, NULL, b.sp), KVL_OK);
	EXPECT_RC(ld, kvl_linker_start(ld, &bt), KVL_OK);
	EXPECT_RC(ld, kvl_linker_wait(ld, bt, N_LAYERS - 1, LONG_MS), KVL_OK);
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
	EXPECT_RC(ld, kvl_linker_load(ld, 14, a.pages, 4, NULL, a.sp), KVL_OK);
	EXPECT_RC(ld, kvl_linker_start(ld, &bt), KVL_OK);
	co = -1;
	int rc = kvl_linker_cancel(ld, 14, &co);
	assert_true((rc == KVL_OK && co == 0) || rc == KVL_ENOTFOUND);
	c = collect1(ld, 14);
	expect_completion(&c, KVL_REQ_LOAD, 0, 4, 4);
	/* Offloads cannot be canceled as loads. */
	EXPECT_RC(ls, kvl_linker_offload(ls, 15, r.pages, 4, NULL, r.sp),
	          KVL_OK);
	EXPECT_RC(ls, kvl_linker_flush(ls, LONG_MS), KVL_OK);
	EXPECT_RC(ls, kvl_linker_cancel(ls, 15, &co), KVL_ENOTFOUND);
	c = collect1(ls, 15);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 4, 4);

	kvl_linker_close(ld);
	kvl_linker_close(ls);
	kvl_store_close(s);
	host_free(&dst);
	host_free(&src);
}

/* =============================================================== offload */

static void test_offload_present(void **state)
{
	(void)state;
	hcfg cfg = {.swa = 1};
	host h;
	host_init(&h, &cfg);
	kvl_store *s = open_store(STORE_URI);
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
	kvl_completion c = offload_sync(lk, 1, &q, NULL);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 4, 4);
	assert_int_equal(kvl_store_stats_get(s, &b), KVL_OK);
	assert_int_equal(b.puts - a.puts, 8);
	/* Again: all present, skipped, counted as stored. */
	c = offload_sync(lk, 2, &q, NULL);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 4, 4);
	assert_int_equal(kvl_store_stats_get(s, &a), KVL_OK);
	assert_int_equal(a.puts, b.puts);
	/* Pages 0..5 with 0..3 present: only 4 and 5 are written. */
	c = offload_sync(lk, 3, &r, NULL);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 6, 6);
	assert_int_equal(kvl_store_stats_get(s, &b), KVL_OK);
	assert_int_equal(b.puts - a.puts, 4);
	assert_int_equal(lookup(lk, pg, 6, NULL, NULL), 6);

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
		EXPECT_RC(lk, kvl_linker_offload(lk, ids[i], t.pages, 3, NULL,
		                                 t.sp),
		          KVL_OK);
	}
	EXPECT_RC(lk, kvl_linker_flush(lk, LONG_MS), KVL_OK);
	/* Everything flushed is already pollable. */
	size_t k = 0;
	assert_int_equal(kvl_linker_poll(lk, cc, 5, &k, 0), KVL_OK);
	assert_int_equal(k, 5);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(cc[i].id, ids[i]); /* FIFO */
		expect_completion(&cc[i], KVL_REQ_OFFLOAD, 0, 3, 3);
	}
	EXPECT_RC(lk, kvl_linker_flush(lk, 0), KVL_OK);
	expect_none(lk, 0);
	/* Duplicate id while open: EEXIST (tolerates it having finished). */
	EXPECT_RC(lk, kvl_linker_offload(lk, 40, q.pages, 4, NULL, q.sp),
	          KVL_OK);
	int rc = kvl_linker_offload(lk, 40, q.pages, 4, NULL, q.sp);
	assert_true(rc == KVL_EEXIST || rc == KVL_OK);
	uint64_t dup[2] = {40, 40};
	if (rc == KVL_OK) {
		/* It had completed already: two completions of id 40. */
		EXPECT_RC(lk, kvl_linker_flush(lk, LONG_MS), KVL_OK);
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
	s = open_store("mem:?capacity=512");
	lk = open_lk(&h, s, NULL);
	c = offload_sync(lk, 50, &q, NULL);
	expect_completion(&c, KVL_REQ_OFFLOAD, KVL_ERANGE, 0, 4);
	assert_int_equal(lookup(lk, pg, 4, NULL, NULL), 0);
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
	kvl_store *s = open_store(STORE_URI);
	kvl_linker *l0 = open_lk(&h0, s, NULL);
	kvl_linker *l1 = open_lk(&h1, s, NULL);
	kvl_hash pg[3];
	make_pages(pg, 3, 14);
	char k0[KVL_KEY_MAX], k1[KVL_KEY_MAX];
	key_of(&h0, h0.mla, &pg[0], NULL, k0);
	key_of(&h1, h1.mla, &pg[0], NULL, k1);
	assert_string_equal(k0, k1); /* one object for every tp rank */
	assert_null(strstr(k1, "tp"));
	key_of(&h1, h1.kv, &pg[0], NULL, k1);
	assert_non_null(strstr(k1, "tp1_"));

	req r;
	req_init(&r, pg, 3);
	req_pool(&r, h1.kv, 0, 0);
	req_pool(&r, h1.mla, 0, 0);
	fill_req(&h1, &r);
	kvl_store_stats a, b;
	assert_int_equal(kvl_store_stats_get(s, &a), KVL_OK);
	kvl_completion c = offload_sync(l1, 1, &r, NULL);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 3, 3);
	assert_int_equal(kvl_store_stats_get(s, &b), KVL_OK);
	assert_int_equal(b.puts - a.puts, 3);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(page_present(s, &h1, h1.kv, &pg[i], NULL), 1);
		assert_int_equal(page_present(s, &h1, h1.mla, &pg[i], NULL),
		                 0);
	}
	/* Only mla from rank 1: nothing written, still status 0. */
	req m;
	req_init(&m, pg, 3);
	req_pool(&m, h1.mla, 0, 0);
	c = offload_sync(l1, 2, &m, NULL);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 3, 3);
	assert_int_equal(page_present(s, &h1, h1.mla, &pg[0], NULL), 0);
	/* Rank 0 writes it. */
	req r0;
	req_init(&r0, pg, 3);
	req_pool(&r0, h0.kv, 0, 0);
	req_pool(&r0, h0.mla, 0, 0);
	fill_req(&h0, &r0);
	c = offload_sync(l0, 3, &r0, NULL);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 3, 3);
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(page_present(s, &h1, h1.mla, &pg[i], NULL),
		                 1);
	/* Rank 1 loads the replicated page rank 0 wrote. */
	kvl_linker *ld = open_lk(&d1, s, NULL);
	assert_int_equal(lookup(ld, pg, 3, NULL, NULL), 3);
	req d;
	req_init(&d, pg, 3);
	req_pool(&d, d1.kv, 4, 0);
	req_pool(&d, d1.mla, 9, 0);
	c = load_sync(ld, 4, &d, NULL, NULL);
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

static void test_queue_full(void **state)
{
	(void)state;
	host h;
	host_init(&h, NULL);
	kvl_store *s = open_store(STORE_URI);
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
		EXPECT_RC(lk, kvl_linker_offload(lk, ids[i], r.pages, 2, NULL,
		                                 r.sp),
		          KVL_OK);
	EXPECT_RC(lk, kvl_linker_offload(lk, 5, r.pages, 2, NULL, r.sp),
	          KVL_EFULL);
	expect_msg(kvl_linker_errmsg(lk), "max_requests");
	/* Loads share the limit. */
	EXPECT_RC(lk, kvl_linker_load(lk, 6, r.pages, 2, NULL, r.sp),
	          KVL_EFULL);
	/* Completed but not polled still counts. */
	EXPECT_RC(lk, kvl_linker_flush(lk, LONG_MS), KVL_OK);
	EXPECT_RC(lk, kvl_linker_offload(lk, 5, r.pages, 2, NULL, r.sp),
	          KVL_EFULL);
	kvl_completion cc[4];
	collect(lk, ids, 4, cc);
	for (int i = 0; i < 4; i++)
		expect_completion(&cc[i], KVL_REQ_OFFLOAD, 0, 2, 2);
	expect_none(lk, 20); /* the refused ones are never reported */
	/* Polled: accepted again. */
	EXPECT_RC(lk, kvl_linker_offload(lk, 5, r.pages, 2, NULL, r.sp),
	          KVL_OK);
	for (uint64_t id = 6; id < 9; id++)
		EXPECT_RC(lk, kvl_linker_load(lk, id, r.pages, 2, NULL, r.sp),
		          KVL_OK);
	EXPECT_RC(lk, kvl_linker_load(lk, 9, r.pages, 2, NULL, r.sp),
	          KVL_EFULL);
	/* Poll one frees one place. */
	EXPECT_RC(lk, kvl_linker_flush(lk, LONG_MS), KVL_OK);
	kvl_completion c = collect1(lk, 5);
	expect_completion(&c, KVL_REQ_OFFLOAD, 0, 2, 2);
	EXPECT_RC(lk, kvl_linker_load(lk, 9, r.pages, 2, NULL, r.sp), KVL_OK);
	uint64_t b = 0;
	EXPECT_RC(lk, kvl_linker_start(lk, &b), KVL_OK);
	EXPECT_RC(lk, kvl_linker_wait(lk, b, N_LAYERS - 1, LONG_MS), KVL_OK);
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
	kvl_store *s = open_store(slow ? store_uri("fault+", NULL)
	                               : STORE_URI);
	kvl_hash pg[4];
	make_pages(pg, 4, 16);
	req r;
	req_init(&r, pg, 4);
	req_pool(&r, src.kv, 0, 0);
	fill_req(&src, &r);
	kvl_linker *ls = open_lk(&src, s, NULL);
	expect_completion((kvl_completion[]){offload_sync(ls, 1, &r, NULL)},
	                  KVL_REQ_OFFLOAD, 0, 4, 4);
	kvl_linker_close(ls);
	if (slow)
		fault_latency(s, 100);

	/* Loads stay queued (never started); offloads queue up. */
	kvl_linker *lk = open_lk(&dst, s, NULL);
	req d;
	req_init(&d, pg, 4);
	req_pool(&d, dst.kv, 0, 0);
	uint64_t ids[8] = {10, 11, 12, 20, 21, 22, 23, 24};
	for (int i = 0; i < 3; i++)
		EXPECT_RC(lk, kvl_linker_load(lk, ids[i], d.pages, 4, NULL,
		                              d.sp),
		          KVL_OK);
	for (int i = 3; i < 8; i++) {
		kvl_hash p2[2];
		make_pages(p2, 2, 200 + (uint64_t)i);
		req t;
		req_init(&t, p2, 2);
		req_pool(&t, dst.kv, 4 + (size_t)i, 0);
		EXPECT_RC(lk, kvl_linker_offload(lk, ids[i], t.pages, 2, NULL,
		                                 t.sp),
		          KVL_OK);
	}
	if (slow)
		fault_await_calls(s, 1, 2); /* offload 20 is being written */
	uint64_t t0 = now_ms();
	kvl_linker_shutdown(lk);
	/* Only the offload being written is finished. */
	if (slow)
		assert_true(now_ms() - t0 < 2000);
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
	for (size_t sl = 0; sl < 4; sl++)
		assert_true(slot_untouched(&dst, dst.kv, sl, 0));
	/* Closed for new work; polls return at once; shutdown idempotent. */
	uint64_t b = 0;
	EXPECT_RC(lk, kvl_linker_load(lk, 30, d.pages, 4, NULL, d.sp),
	          KVL_ECLOSED);
	expect_msg(kvl_linker_errmsg(lk), "shutting down");
	EXPECT_RC(lk, kvl_linker_offload(lk, 31, d.pages, 4, NULL, d.sp),
	          KVL_ECLOSED);
	EXPECT_RC(lk, kvl_linker_start(lk, &b), KVL_ECLOSED);
	EXPECT_RC(lk, kvl_linker_flush(lk, LONG_MS), KVL_OK);
	int co = -1;
	EXPECT_RC(lk, kvl_linker_cancel(lk, 10, &co), KVL_ENOTFOUND);
	t0 = now_ms();
	expect_none(lk, 5000);
	assert_true(now_ms() - t0 < 2000);
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

/* Shutdown while a batch runs on a slow store: waiters wake up. */
static void test_shutdown_running(void **state)
{
	(void)state;
	NEED_FAULT_STORE();
	host src, dst;
	host_init(&src, NULL);
	host_init(&dst, NULL);
	kvl_store *s = open_store(store_uri("fault+", NULL));
	kvl_linker *ls = open_lk(&src, s, NULL);
	kvl_hash pg[2];
	make_pages(pg, 2, 17);
	req r;
	req_init(&r, pg, 2);
	req_pool(&r, src.kv, 0, 0);
	fill_req(&src, &r);
	expect_completion((kvl_completion[]){offload_sync(ls, 1, &r, NULL)},
	                  KVL_REQ_OFFLOAD, 0, 2, 2);
	kvl_linker_close(ls);
	fault_latency(s, 200);

	kvl_linker *lk = open_lk(&dst, s, NULL);
	req d;
	req_init(&d, pg, 2);
	req_pool(&d, dst.kv, 0, 0);
	EXPECT_RC(lk, kvl_linker_load(lk, 2, d.pages, 2, NULL, d.sp), KVL_OK);
	uint64_t b = 0, b2 = 0;
	EXPECT_RC(lk, kvl_linker_start(lk, &b), KVL_OK);
	/* A second batch, started but not yet taken by the loader. */
	EXPECT_RC(lk, kvl_linker_load(lk, 3, d.pages, 2, NULL, d.sp), KVL_OK);
	EXPECT_RC(lk, kvl_linker_start(lk, &b2), KVL_OK);
	waiter_arg wa[3] = {{lk, b, N_LAYERS - 1, -100},
	                    {lk, b, 2, -100},
	                    {lk, b2, 0, -100}};
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&t[i], NULL, waiter_main,
		                                &wa[i]),
		                 0);
	fault_await_calls(s, 0, 1); /* layer 0's get is in the store */
	uint64_t t0 = now_ms();
	kvl_linker_shutdown(lk);
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	/* The running layer finishes; the others are not read. */
	assert_true(now_ms() - t0 < 1000);
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
	EXPECT_RC(lk, kvl_linker_wait(lk, b, N_LAYERS - 1, UINT32_MAX),
	          KVL_ECANCELED);
	EXPECT_RC(lk, kvl_linker_wait(lk, b2, 0, UINT32_MAX), KVL_ECANCELED);
	expect_none(lk, 100);
	/* Nothing after the running layer was read. */
	assert_int_equal(fault_gets(s), 1);

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
	kvl_store *s = open_store(store_uri("fault+", NULL));
	kvl_linker *lk = open_lk(&h, s, NULL);
	kvl_hash pg[2];
	make_pages(pg, 2, 22);
	req r;
	req_init(&r, pg, 2);
	req_pool(&r, h.kv, 0, 0);
	fill_req(&h, &r);
	fault_latency(s, 200);
	uint64_t ids[2] = {1, 2};
	EXPECT_RC(lk, kvl_linker_offload(lk, 1, r.pages, 2, NULL, r.sp),
	          KVL_OK);
	EXPECT_RC(lk, kvl_linker_offload(lk, 2, r.pages, 2, NULL, r.sp),
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
	kvl_store *s = open_store(STORE_URI);
	kvl_hash pg[4];
	make_pages(pg, 4, 18);
	req r;
	req_init(&r, pg, 4);
	req_pool(&r, h.kv, 0, 0);
	fill_req(&h, &r);
	for (int round = 0; round < 3; round++) {
		kvl_linker *lk = open_lk(&h, s, NULL);
		for (uint64_t i = 0; i < 5; i++)
			EXPECT_RC(lk, kvl_linker_offload(lk, i, r.pages, 4,
			                                 NULL, r.sp),
			          KVL_OK);
		req d;
		req_init(&d, pg, 4);
		req_pool(&d, h.kv, 8, 0);
		for (uint64_t i = 0; i < 3; i++)
			EXPECT_RC(lk, kvl_linker_load(lk, 100 + i, d.pages, 4,
			                              NULL, d.sp),
			          KVL_OK);
		uint64_t b = 0;
		if (round > 0)
			EXPECT_RC(lk, kvl_linker_start(lk, &b), KVL_OK);
		for (uint64_t i = 0; i < 2; i++)
			EXPECT_RC(lk, kvl_linker_load(lk, 200 + i, d.pages, 4,
			                              NULL, d.sp),
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
	int trusted;   /* the store's: payload checksums are not checked */
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
			rc = kvl_linker_load(sh->lk, id, r.pages, 4, NULL,
			                     r.sp);
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
			rc = kvl_linker_offload(sh->lk, id, r.pages, 4, NULL,
			                        r.sp);
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
			/* Two loads of one engine may share a batch and its
			 * slots: a store that is not trusted has the layer
			 * checksums catch the page overwritten by the other. */
			if (rc && rc != KVL_ENOTFOUND &&
			    !(rc == KVL_ECANCELED && sh->may_close) &&
			    !(rc == KVL_ECORRUPT && !sh->trusted))
				sh_error(sh, "wait", rc);
		} else if (op == 10) {
			size_t prefix = 0;
			rc = kvl_linker_lookup(sh->lk, sh->pg, 8, NULL, NULL,
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
	kvl_store *s = open_store(STORE_URI);
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
	sh->trusted = s->trusted;
	/* Pages 0..7 from slots 0..7 (offloads re-offer subsets of them). */
	req r;
	req_init(&r, pg, 8);
	req_pool(&r, src.kv, 0, 0);
	fill_req(&src, &r);
	kvl_completion c0 = offload_sync(sh->lk, 1, &r, NULL);
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
		} else if (c->status == KVL_ECORRUPT && !sh->trusted) {
			/* Slots shared within a batch (engine_main). */
			assert_int_equal(c->kind, KVL_REQ_LOAD);
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
		cmocka_unit_test_setup(test_lookup_basic, next_test),
		cmocka_unit_test_setup(test_lookup_trailing, next_test),
		cmocka_unit_test_setup(test_lookup_namespace, next_test),
		cmocka_unit_test_setup(test_lookup_ranks, next_test),
		cmocka_unit_test_setup(test_lookup_rank_down, next_test),
		cmocka_unit_test_setup(test_load_roundtrip, next_test),
		cmocka_unit_test_setup(test_io_batch, next_test),
		cmocka_unit_test_setup(test_load_args, next_test),
		cmocka_unit_test_setup(test_load_evicted, next_test),
		cmocka_unit_test_setup(test_load_corrupt, next_test),
		cmocka_unit_test_setup(test_load_store_error, next_test),
		cmocka_unit_test_setup(test_load_whole_reads, next_test),
		cmocka_unit_test_setup(test_slow_store, next_test),
		cmocka_unit_test_setup(test_random_errors, next_test),
		cmocka_unit_test_setup(test_cancel, next_test),
		cmocka_unit_test_setup(test_offload_present, next_test),
		cmocka_unit_test_setup(test_offload_replicated, next_test),
		cmocka_unit_test_setup(test_queue_full, next_test),
		cmocka_unit_test_setup(test_shutdown_queued, next_test),
		cmocka_unit_test_setup(test_shutdown_running, next_test),
		cmocka_unit_test_setup(test_shutdown_concurrent, next_test),
		cmocka_unit_test_setup(test_close_busy, next_test),
		cmocka_unit_test_setup(test_exactly_once_threads, next_test),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
