/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_errors.c — walks the bad-input table of docs/errors.md: every row of
 * the table is one check here, and the table is read at run time, so a row
 * without a check (or a check without a row) fails the test, and so does a
 * row whose documented result differs from what kvlink returns.
 *
 * The table's rows look like
 *   | `uri.no-scheme` | kvl_store_open | `mem` | `KVL_EPARSE` |
 * (first cell the row's id in backticks, last cell the result: a kvl_errno
 * name, or "exit N" for the command-line tool). Each check returns the code
 * it got; checks of handle functions also require that the handle's message
 * (or the open call's errbuf) says something. A check that does not apply
 * to this build (CUDA present, Redis absent) says so and is skipped.
 *
 * The table is found next to this file (../docs/errors.md from __FILE__),
 * or at $KVL_ERRORS_MD. The command-line rows run $KVL_TOOL (set by ctest).
 * Exit status: 0 all rows agree, 1 otherwise, 77 when the table cannot be
 * found.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/codec.h"
#include "kvlink.h"
#include "store/fault.h"

#include "support/faults.h"
#include "support/kvl_assert.h"
#include "support/pools.h"
#include "support/stores.h"

#define SKIP 1000       /* a check that does not apply to this build */
#define EXIT_BASE 2000  /* EXIT_BASE + n: the tool exited with status n */

/* The message of the last failure, noted by the checks. */
static char g_msg[512];
static int g_msg_noted;

static int note(int rc, const char *msg)
{
	snprintf(g_msg, sizeof g_msg, "%s", msg ? msg : "");
	g_msg_noted = 1;
	return rc;
}

static const char *g_skip_why;

static int skip(const char *why)
{
	g_skip_why = why;
	return SKIP;
}

/* ============================================================ fixtures */

#define NP 8
#define N_LAYERS 2
#define K_BYTES 64
#define V_BYTES 32
#define STRIDE 128

/* An engine: its memory and a finalized layout with pool "kv" (k and v at
 * layers 0 and 1, NP slots), a pools.h engine. */
typedef pools eng;

static kvl_layout *layout_new(void)
{
	kvl_layout *l = NULL;
	ASSERT_CODE(kvl_layout_create("errors/bf16", 16, NULL, &l, NULL, 0),
	            KVL_OK);
	return l;
}

static kvl_buffer buf_at(void *base, size_t bytes)
{
	return (kvl_buffer){.base = base, .page_stride = STRIDE,
	                    .page_bytes = bytes, .num_pages = NP};
}

static void eng_init_tag(eng *e, const char *tag)
{
	pools_shape sh = {.tag = tag, .slots = NP, .layers = N_LAYERS,
	                  .k_bytes = K_BYTES, .v_bytes = V_BYTES,
	                  .kv_stride = STRIDE, .fill = 0};
	pools_init(e, &sh);
	for (size_t i = 0; i < e->mem_bytes; i++)
		e->mem[i] = (uint8_t)(i * 7 + 3);
}

static void eng_init(eng *e)
{
	eng_init_tag(e, "errors/bf16");
}

static void eng_free(eng *e)
{
	pools_free(e);
}

static kvl_hash page_n(unsigned n)
{
	kvl_hash h;
	for (int i = 0; i < KVL_HASH_BYTES; i++)
		h.bytes[i] = (uint8_t)(n * 31 + i);
	return h;
}

static kvl_linker *linker(eng *e, kvl_store *s, const kvl_linker_opts *o)
{
	kvl_linker *lk = NULL;
	char err[256] = "";
	ASSERT_RC(err, kvl_linker_open(s, e->l, o, &lk, err, sizeof err),
	          KVL_OK);
	return lk;
}

/* Stores page `h` from slot 0 with kvl_pages_put. */
static void put_page(kvl_store *s, eng *e, const kvl_hash *h)
{
	size_t slot = 0;
	int res = -100;
	ASSERT_CODE(kvl_pages_put(s, e->l, e->kv, h, &slot, 1, &res), KVL_OK);
	ASSERT_TRUE(res >= 0);
}

static void fault_set(kvl_store *s, void (*edit)(kvl__fault_cfg *))
{
	kvl__fault_cfg c = fault_cfg(s);
	edit(&c);
	fault_set_cfg(s, &c);
}

static void set_down(kvl__fault_cfg *c) { c->down = 1; }
static void set_slow(kvl__fault_cfg *c)
{
	c->latency_ms = 300;
	c->latency_p = 1;
}
static void set_corrupt(kvl__fault_cfg *c) { c->corrupt = 1; }
static void set_fail_get1(kvl__fault_cfg *c) { c->fail_get_call = 1; }
static void set_error(kvl__fault_cfg *c) { c->error = 1; }

/* Polls until the completion of `id` arrives (5 s at most); its status,
 * or -1000 when it never came. */
static int completion_of(kvl_linker *lk, uint64_t id, size_t *valid)
{
	for (int i = 0; i < 500; i++) {
		kvl_completion c;
		size_t n = 0;
		kvl_linker_poll(lk, &c, 1, &n, 10);
		if (n && c.id == id) {
			if (valid)
				*valid = c.valid_pages;
			return c.status;
		}
	}
	return -1000;
}

/* One load of page `h` into slot 1, started and waited for; returns the
 * wait's code, the completion's status through *status. */
static int load_one(kvl_linker *lk, const kvl_hash *h, int *status)
{
	size_t slot = 1;
	const size_t *sp[1] = {&slot};
	ASSERT_CODE(kvl_linker_load(lk, 7, h, 1, sp), KVL_OK);
	uint64_t b;
	ASSERT_CODE(kvl_linker_start(lk, &b), KVL_OK);
	int rc = kvl_linker_wait(lk, b, N_LAYERS - 1, 5000);
	*status = completion_of(lk, 7, NULL);
	return rc;
}

/* ============================================================== hashes */

static int r_hash_page_size_zero(void)
{
	uint64_t t[4] = {1, 2, 3, 4};
	kvl_hash out[4];
	size_t n;
	return kvl_hash_pages(t, 4, 0, NULL, out, 4, &n);
}

static int r_hash_tokens_null(void)
{
	kvl_hash out[4];
	size_t n;
	return kvl_hash_pages(NULL, 4, 2, NULL, out, 4, &n);
}

static int r_hash_out_small(void)
{
	uint64_t t[4] = {1, 2, 3, 4};
	kvl_hash out[1];
	size_t n;
	return kvl_hash_pages(t, 4, 2, NULL, out, 1, &n);
}

static int r_bigram_page_size_zero(void)
{
	uint64_t t[4] = {1, 2, 3, 4};
	kvl_hash out[4];
	size_t n;
	return kvl_hash_bigram_pages(t, 4, 0, NULL, out, 4, &n);
}

static int r_bigram_out_small(void)
{
	uint64_t t[5] = {1, 2, 3, 4, 5}; /* 4 pairs: 2 pages of 2 */
	kvl_hash out[1];
	size_t n;
	return kvl_hash_bigram_pages(t, 5, 2, NULL, out, 1, &n);
}

static int r_sgseed_out_null(void)
{
	int seeded;
	return kvl_sglang_namespace_seed("lora", NULL, NULL, &seeded);
}

static int r_seed_no_salts(void)
{
	const char *s[1] = {"a"};
	kvl_hash h;
	return kvl_namespace_seed(s, 0, &h);
}

static int r_seed_null_salt(void)
{
	const char *s[2] = {"a", NULL};
	kvl_hash h;
	return kvl_namespace_seed(s, 2, &h);
}

static int r_hex_short(void)
{
	kvl_hash h;
	return kvl_hash_from_hex("abcdef", &h);
}

static int r_hex_bad_char(void)
{
	kvl_hash h;
	char hex[65];
	memset(hex, 'a', 64);
	hex[64] = 0;
	hex[10] = 'g';
	return kvl_hash_from_hex(hex, &h);
}

static int r_hex_null(void)
{
	kvl_hash h;
	return kvl_hash_from_hex(NULL, &h);
}

/* ============================================================= layouts */

static int create(const char *tag, uint32_t ps, const kvl_shard *sh)
{
	kvl_layout *l = NULL;
	char err[256] = "";
	int rc = kvl_layout_create(tag, ps, sh, &l, err, sizeof err);
	kvl_layout_free(l);
	return note(rc, err);
}

static int r_layout_tag_empty(void) { return create("", 16, NULL); }
static int r_layout_tag_space(void) { return create("llama 3", 16, NULL); }
static int r_layout_tag_long(void)
{
	char tag[KVL_NAME_MAX + 2];
	memset(tag, 'm', sizeof tag - 1);
	tag[sizeof tag - 1] = 0;
	return create(tag, 16, NULL);
}
static int r_layout_page_size_zero(void) { return create("m", 0, NULL); }
static int r_layout_shard_rank(void)
{
	kvl_shard s = {2, 2, 0, 1, 0, 1};
	return create("m", 16, &s);
}
static int r_layout_shard_size_zero(void)
{
	kvl_shard s = {0, 1, 0, 0, 0, 1};
	return create("m", 16, &s);
}
static int r_layout_out_null(void)
{
	char err[256] = "";
	return note(kvl_layout_create("m", 16, NULL, NULL, err, sizeof err),
	            err);
}

static int add_pool(const char *name, kvl_hit_policy pol, uint32_t w,
                    uint32_t flags, int twice)
{
	kvl_layout *l = layout_new();
	int id, rc = kvl_layout_add_pool(l, name, pol, w, flags, &id);
	if (twice && rc == 0)
		rc = kvl_layout_add_pool(l, name, pol, w, flags, &id);
	note(rc, kvl_layout_errmsg(l));
	kvl_layout_free(l);
	return rc;
}

static int r_pool_name_empty(void)
{
	return add_pool("", KVL_HIT_ALL_PAGES, 0, 0, 0);
}
static int r_pool_name_colon(void)
{
	return add_pool("k:v", KVL_HIT_ALL_PAGES, 0, 0, 0);
}
static int r_pool_dup(void)
{
	return add_pool("kv", KVL_HIT_ALL_PAGES, 0, 0, 1);
}
static int r_pool_policy(void)
{
	return add_pool("kv", (kvl_hit_policy)7, 0, 0, 0);
}
static int r_pool_window_all(void)
{
	return add_pool("kv", KVL_HIT_ALL_PAGES, 1, 0, 0);
}
static int r_pool_window_zero(void)
{
	return add_pool("swa", KVL_HIT_TRAILING_PAGES, 0, 0, 0);
}
static int r_pool_flags(void)
{
	return add_pool("kv", KVL_HIT_ALL_PAGES, 0, 0x8, 0);
}
static int pool_format(const char *dtype, const char *mem_layout, int pool)
{
	kvl_layout *l = layout_new();
	int id, rc = kvl_layout_add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0, &id);
	if (rc == 0)
		rc = kvl_layout_pool_format(l, id + pool, dtype, mem_layout);
	note(rc, kvl_layout_errmsg(l));
	kvl_layout_free(l);
	return rc;
}
static int r_format_dtype_null(void) { return pool_format(NULL, "", 0); }
static int r_format_dtype_bad(void) { return pool_format("bf 16", "", 0); }
static int r_format_layout_bad(void) { return pool_format("bf16", "N/HD", 0); }
static int r_format_pool(void) { return pool_format("bf16", "NHD", 1); }
static int r_format_finalized(void)
{
	eng e;
	eng_init(&e);
	int rc = kvl_layout_pool_format(e.l, 0, "bf16", NULL);
	note(rc, kvl_layout_errmsg(e.l));
	eng_free(&e);
	return rc;
}
static int r_pool_finalized(void)
{
	eng e;
	eng_init(&e);
	int id, rc = kvl_layout_add_pool(e.l, "more", KVL_HIT_ALL_PAGES, 0, 0,
	                                 &id);
	note(rc, kvl_layout_errmsg(e.l));
	eng_free(&e);
	return rc;
}

static uint8_t g_arena[4 * NP * STRIDE] __attribute__((aligned(64)));

/* Adds buffer b as component `comp` of layer `layer` to a fresh pool,
 * after a first good buffer when `first`. */
static int add_buf(const char *comp, uint32_t layer, const kvl_buffer *b,
                   int first, int pool_id)
{
	kvl_layout *l = layout_new();
	int kv;
	ASSERT_CODE(kvl_layout_add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0, &kv),
	            KVL_OK);
	if (first) {
		kvl_buffer g = buf_at(g_arena, K_BYTES);
		ASSERT_CODE(kvl_layout_add_buffer(l, kv, "k", 0, &g), KVL_OK);
	}
	int rc = kvl_layout_add_buffer(l, pool_id < 0 ? kv : pool_id, comp,
	                               layer, b);
	note(rc, kvl_layout_errmsg(l));
	kvl_layout_free(l);
	return rc;
}

static int r_buffer_misaligned(void)
{
	kvl_buffer b = buf_at(g_arena + 4, K_BYTES);
	return add_buf("k", 0, &b, 0, -1);
}
static int r_buffer_stride(void)
{
	kvl_buffer b = buf_at(g_arena, K_BYTES);
	b.page_stride = 100;
	return add_buf("k", 0, &b, 0, -1);
}
static int r_buffer_bytes_zero(void)
{
	kvl_buffer b = buf_at(g_arena, 0);
	return add_buf("k", 0, &b, 0, -1);
}
static int r_buffer_bytes_stride(void)
{
	kvl_buffer b = buf_at(g_arena, STRIDE + 8);
	return add_buf("k", 0, &b, 0, -1);
}
static int r_buffer_pages_zero(void)
{
	kvl_buffer b = buf_at(g_arena, K_BYTES);
	b.num_pages = 0;
	return add_buf("k", 0, &b, 0, -1);
}
static int r_buffer_pages_differ(void)
{
	kvl_buffer b = buf_at(g_arena + NP * STRIDE, K_BYTES);
	b.num_pages = NP - 1;
	return add_buf("k", 1, &b, 1, -1);
}
static int r_buffer_base_null(void)
{
	kvl_buffer b = buf_at(NULL, K_BYTES);
	return add_buf("k", 0, &b, 0, -1);
}
static int r_buffer_null(void)
{
	return add_buf("k", 0, NULL, 0, -1);
}
static int r_buffer_mem_kind(void)
{
	kvl_buffer b = buf_at(g_arena, K_BYTES);
	b.mem = (kvl_mem_kind)5;
	return add_buf("k", 0, &b, 0, -1);
}
static int r_buffer_comp_name(void)
{
	kvl_buffer b = buf_at(g_arena, K_BYTES);
	return add_buf("k/v", 0, &b, 0, -1);
}
static int r_buffer_layer_all(void)
{
	kvl_buffer b = buf_at(g_arena, K_BYTES);
	return add_buf("k", KVL_ALL_LAYERS, &b, 0, -1);
}
static int r_buffer_layer_max(void)
{
	kvl_buffer b = buf_at(g_arena, K_BYTES);
	return add_buf("k", KVL_MAX_LAYER + 1u, &b, 0, -1);
}
static int r_buffer_wraps(void)
{
	kvl_buffer b = buf_at((void *)(UINTPTR_MAX - 7 - STRIDE), K_BYTES);
	return add_buf("k", 0, &b, 0, -1);
}
static int r_buffer_pool_unknown(void)
{
	kvl_buffer b = buf_at(g_arena, K_BYTES);
	return add_buf("k", 0, &b, 0, 9);
}
static int r_buffer_dup(void)
{
	kvl_buffer b = buf_at(g_arena + NP * STRIDE, K_BYTES);
	return add_buf("k", 0, &b, 1, -1);
}
static int r_buffer_finalized(void)
{
	eng e;
	eng_init(&e);
	kvl_buffer b = buf_at(g_arena, K_BYTES);
	int rc = kvl_layout_add_buffer(e.l, e.kv, "k", 5, &b);
	note(rc, kvl_layout_errmsg(e.l));
	eng_free(&e);
	return rc;
}

static int r_finalize_no_pools(void)
{
	kvl_layout *l = layout_new();
	int rc = kvl_layout_finalize(l);
	note(rc, kvl_layout_errmsg(l));
	kvl_layout_free(l);
	return rc;
}

static int r_finalize_pool_empty(void)
{
	kvl_layout *l = layout_new();
	int kv;
	ASSERT_CODE(kvl_layout_add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0, &kv),
	            KVL_OK);
	int rc = kvl_layout_finalize(l);
	note(rc, kvl_layout_errmsg(l));
	kvl_layout_free(l);
	return rc;
}

static int r_finalize_overlap(void)
{
	kvl_layout *l = layout_new();
	int kv;
	ASSERT_CODE(kvl_layout_add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0, &kv),
	            KVL_OK);
	kvl_buffer k = buf_at(g_arena, K_BYTES), v = buf_at(g_arena + 32,
	                                                     K_BYTES);
	ASSERT_CODE(kvl_layout_add_buffer(l, kv, "k", 0, &k), KVL_OK);
	ASSERT_CODE(kvl_layout_add_buffer(l, kv, "v", 0, &v), KVL_OK);
	int rc = kvl_layout_finalize(l);
	note(rc, kvl_layout_errmsg(l));
	kvl_layout_free(l);
	return rc;
}

static int r_finalize_missing_comp(void)
{
	kvl_layout *l = layout_new();
	int kv;
	ASSERT_CODE(kvl_layout_add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0, &kv),
	            KVL_OK);
	kvl_buffer k0 = buf_at(g_arena, K_BYTES),
		   v0 = buf_at(g_arena + K_BYTES, V_BYTES),
		   k1 = buf_at(g_arena + NP * STRIDE, K_BYTES);
	ASSERT_CODE(kvl_layout_add_buffer(l, kv, "k", 0, &k0), KVL_OK);
	ASSERT_CODE(kvl_layout_add_buffer(l, kv, "v", 0, &v0), KVL_OK);
	ASSERT_CODE(kvl_layout_add_buffer(l, kv, "k", 1, &k1), KVL_OK);
	int rc = kvl_layout_finalize(l);
	note(rc, kvl_layout_errmsg(l));
	kvl_layout_free(l);
	return rc;
}

static int r_finalize_twice(void)
{
	eng e;
	eng_init(&e);
	int rc = kvl_layout_finalize(e.l);
	note(rc, kvl_layout_errmsg(e.l));
	eng_free(&e);
	return rc;
}

static int r_query_unfinalized(void)
{
	kvl_layout *l = layout_new();
	int n;
	int rc = kvl_layout_pool_count(l, &n);
	note(rc, kvl_layout_errmsg(l));
	kvl_layout_free(l);
	return rc;
}

/* A query on a finalized engine layout: which one by `what`. */
static int query(int what)
{
	eng e;
	eng_init(&e);
	int rc = 0, id;
	size_t a, b;
	uint32_t layers[1];
	kvl_iov pieces[1];
	char hex[33], key[16];
	kvl_hash h = page_n(1);
	switch (what) {
	case 0: rc = kvl_layout_pool_id(e.l, "nope", &id); break;
	case 1: rc = kvl_layout_pool_info(e.l, 9, NULL, NULL, NULL, NULL); break;
	case 2: rc = kvl_layout_pool_layers(e.l, e.kv, layers, 1, &a); break;
	case 3: rc = kvl_layout_layer_range(e.l, e.kv, 99, &a, &b); break;
	case 4: rc = kvl_layout_page_pieces(e.l, e.kv, NP, 0, pieces, 1, &a);
		break;
	case 5: rc = kvl_layout_page_pieces(e.l, e.kv, 0, KVL_ALL_LAYERS,
	                                    pieces, 1, &a);
		break;
	case 6: rc = kvl_layout_key(e.l, e.kv, &h, key, sizeof key); break;
	case 7: rc = kvl_layout_fingerprint(e.l, 9, hex, sizeof hex); break;
	case 8: rc = kvl_layout_object_size(e.l, 9, &a, &b); break;
	case 9: rc = kvl_layout_key(e.l, e.kv, NULL, key, sizeof key); break;
	}
	note(rc, kvl_layout_errmsg(e.l));
	eng_free(&e);
	return rc;
}

static int r_query_pool_name(void) { return query(0); }
static int r_query_pool_id(void) { return query(1); }
static int r_query_layers_cap(void) { return query(2); }
static int r_query_layer_range(void) { return query(3); }
static int r_query_pieces_slot(void) { return query(4); }
static int r_query_pieces_cap(void) { return query(5); }
static int r_query_key_buf(void) { return query(6); }
static int r_query_fingerprint(void) { return query(7); }
static int r_query_object_size(void) { return query(8); }
static int r_query_key_null(void) { return query(9); }

/* ====================================================== restorable sets */

static int restorable(kvl_policy pol, size_t n_words, int null_present)
{
	uint8_t present[4] = {1, 1, 1, 1};
	const uint8_t *pp[1] = {present};
	uint64_t bits[2];
	return kvl_restorable_set( &pol, null_present ? NULL : pp, 1,4, bits,
	                          n_words);
}

static int r_restorable_window(void)
{
	return restorable((kvl_policy){KVL_HIT_TRAILING_PAGES, 0}, 1, 0);
}
static int r_restorable_kind(void)
{
	return restorable((kvl_policy){(kvl_hit_policy)9, 0}, 1, 0);
}
static int r_restorable_words(void)
{
	return restorable((kvl_policy){KVL_HIT_ALL_PAGES, 0}, 0, 0);
}
static int r_restorable_null(void)
{
	return restorable((kvl_policy){KVL_HIT_ALL_PAGES, 0}, 1, 1);
}

static int r_rank_group_zero(void)
{
	kvl_rank_group *g = NULL;
	int rc = kvl_rank_group_create(0, 100, &g);
	kvl_rank_group_free(g);
	return rc;
}

static int r_rank_words_zero(void)
{
	kvl_rank_group *g = NULL;
	ASSERT_CODE(kvl_rank_group_create(1, 100, &g), KVL_OK);
	uint64_t bits[1] = {1};
	int rc = kvl_rank_group_allreduce(bits, 0, g);
	kvl_rank_group_free(g);
	return rc;
}

typedef struct ar_arg {
	kvl_rank_group *g;
	size_t words;
	int rc;
} ar_arg;

static void *ar_main(void *p)
{
	ar_arg *a = p;
	uint64_t bits[2] = {1, 0};
	a->rc = kvl_rank_group_allreduce(bits, a->words, a->g);
	return NULL;
}

static int r_rank_words_differ(void)
{
	kvl_rank_group *g = NULL;
	ASSERT_CODE(kvl_rank_group_create(2, 5000, &g), KVL_OK);
	ar_arg a[2] = {{g, 1, -100}, {g, 2, -100}};
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, ar_main, &a[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	kvl_rank_group_free(g);
	return a[0].rc == a[1].rc ? a[0].rc : -999;
}

static int r_rank_timeout(void)
{
	kvl_rank_group *g = NULL;
	ASSERT_CODE(kvl_rank_group_create(2, 20, &g), KVL_OK);
	uint64_t bits[1] = {1};
	int rc = kvl_rank_group_allreduce(bits, 1, g);
	kvl_rank_group_free(g);
	return rc;
}

static int r_rank_broken(void)
{
	kvl_rank_group *g = NULL;
	ASSERT_CODE(kvl_rank_group_create(2, 20, &g), KVL_OK);
	uint64_t bits[1] = {1};
	kvl_rank_group_allreduce(bits, 1, g);
	int rc = kvl_rank_group_allreduce(bits, 1, g);
	kvl_rank_group_free(g);
	return rc;
}

/* ================================================================ URIs */

static int open_uri(const char *uri)
{
	kvl_store *s = NULL;
	char err[256] = "";
	int rc = kvl_store_open(uri, &s, err, sizeof err);
	kvl_store_close(s);
	return note(rc, err);
}

static int r_uri_no_scheme(void) { return open_uri("mem"); }
static int r_uri_scheme_char(void) { return open_uri("1mem:"); }
static int r_uri_space(void) { return open_uri("mem:?capacity= 1G"); }
static int r_uri_empty_name(void) { return open_uri("mem:?=1"); }
static int r_uri_no_value(void) { return open_uri("mem:?capacity"); }
static int r_uri_breaker(void) { return open_uri("mem:?breaker_ms=0"); }
static int r_uri_tenant(void) { return open_uri("fault+mem:?tenant=a:b"); }
static int r_uri_tenant_mem(void) { return open_uri("mem:?tenant=a"); }
static int r_uri_empty_value(void) { return open_uri("mem:?capacity="); }
static int r_uri_twice(void)
{
	return open_uri("mem:?capacity=1G&capacity=2G");
}
static int r_uri_many(void)
{
	char uri[1024] = "mem:?";
	for (int i = 0; i < 33; i++)
		snprintf(uri + strlen(uri), sizeof uri - strlen(uri), "%so%d=1",
		         i ? "&" : "", i);
	return open_uri(uri);
}
static int r_uri_unknown_option(void) { return open_uri("mem:?capasity=1G"); }

/* A secret file holding `len` bytes of `data`, in a new temporary path
 * (static; removed at exit by secret_cleanup). */
static char g_secret_dir[64];

static void secret_cleanup(void)
{
	char cmd[128];
	if (g_secret_dir[0]) {
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_secret_dir);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", g_secret_dir);
	}
}

static const char *secret_path(const char *name, const void *data,
                               size_t len)
{
	static char path[8][128];
	static unsigned next;
	if (!g_secret_dir[0]) {
		snprintf(g_secret_dir, sizeof g_secret_dir,
		         "/tmp/kvl-errors.XXXXXX");
		ASSERT_TRUE(mkdtemp(g_secret_dir) != NULL);
		atexit(secret_cleanup);
	}
	char *p = path[next++ % 8];
	snprintf(p, sizeof path[0], "%s/%s", g_secret_dir, name);
	if (data) {
		FILE *f = fopen(p, "wb");
		ASSERT_TRUE(f != NULL);
		ASSERT_EQ(fwrite(data, 1, len, f), len);
		ASSERT_EQ(fclose(f), 0);
	}
	return p;
}

#define SECRET_A "engine A's secret, 32 bytes long"
#define SECRET_B "engine B's secret, 32 bytes long"

static int open_secret(const char *scheme, const char *path)
{
	char uri[256];
	snprintf(uri, sizeof uri, "%s?secret_file=%s", scheme, path);
	return open_uri(uri);
}
static int r_secret_missing(void)
{
	return open_secret("fault+mem:", secret_path("missing", NULL, 0));
}
static int r_secret_directory(void)
{
	secret_path("x", NULL, 0); /* makes the directory */
	return open_secret("fault+mem:", g_secret_dir);
}
static int r_secret_empty(void)
{
	return open_secret("fault+mem:", secret_path("empty", "\n", 1));
}
static int r_secret_short(void)
{
	return open_secret("fault+mem:", secret_path("short", "tiny", 4));
}
static int r_secret_long(void)
{
	static char big[4097];
	memset(big, 's', sizeof big);
	return open_secret("mem:", secret_path("long", big, sizeof big));
}
static int r_secret_env_missing(void)
{
	setenv("KVL_SECRET_FILE", secret_path("missing", NULL, 0), 1);
	int rc = open_uri("fault+mem:");
	unsetenv("KVL_SECRET_FILE");
	return rc;
}
static int r_uri_unknown_scheme(void) { return open_uri("s3://bucket/kv"); }
static int r_uri_redis_missing(void)
{
	if (kvl_has_feature("redis"))
		return skip("this build has the redis:// store");
	return open_uri("redis://127.0.0.1:6379");
}
static int r_uri_redis_down(void)
{
	if (!kvl_has_feature("redis"))
		return skip("this build has no redis:// store");
	/* Port 1 on loopback: nothing listens there. */
	return open_uri("redis://127.0.0.1:1?connect_timeout_ms=500");
}
static int r_rediss_ca_missing(void)
{
	if (!kvl_has_feature("tls"))
		return skip("this build has no rediss:// store");
	return open_uri("rediss://127.0.0.1:1?tls_ca=/nonexistent/ca.pem");
}
static int r_rediss_cert_missing(void)
{
	if (!kvl_has_feature("tls"))
		return skip("this build has no rediss:// store");
	return open_uri("rediss://127.0.0.1:1?tls_cert=/nonexistent/c.pem");
}
static int r_rediss_key_alone(void)
{
	if (!kvl_has_feature("tls"))
		return skip("this build has no rediss:// store");
	return open_uri("rediss://127.0.0.1:1?tls_key=/k.pem");
}
static int r_redis_tls_option(void)
{
	if (!kvl_has_feature("redis"))
		return skip("this build has no redis:// store");
	return open_uri("redis://127.0.0.1:1?tls_ca=/ca.pem");
}
static int r_rediss_down(void)
{
	if (!kvl_has_feature("tls"))
		return skip("this build has no rediss:// store");
	return open_uri("rediss://127.0.0.1:1?connect_timeout_ms=500");
}
static int r_redact_small(void)
{
	char out[8];
	return kvl_uri_redact("redis://:pw@host:6379", out, sizeof out);
}
static int r_redact_null(void)
{
	char out[8];
	return kvl_uri_redact(NULL, out, sizeof out);
}
static int r_mc_no_library(void)
{
	return open_uri(
		"mooncake://127.0.0.1:1?lib=/nonexistent/libmooncake_store.so");
}
static int r_mc_not_mooncake(void)
{
	return open_uri("mooncake://127.0.0.1:1?lib=libcrypto.so.3");
}
static int r_mc_no_host(void) { return open_uri("mooncake://"); }
static int r_mc_path(void) { return open_uri("mooncake://h:1/db"); }
static int r_mc_replicas(void)
{
	return open_uri("mooncake://h:1?replicas=0");
}
static int r_mc_staging(void)
{
	return open_uri("mooncake://h:1?staging=1KiB");
}
static int r_mc_unknown(void)
{
	return open_uri("mooncake://h:1?segmnet=1GiB");
}
static int r_uri_out_null(void)
{
	char err[256] = "";
	return note(kvl_store_open("mem:", NULL, err, sizeof err), err);
}
static int r_mem_size(void) { return open_uri("mem:?capacity=8XB"); }
static int r_mem_size_overflow(void)
{
	return open_uri("mem:?capacity=16777216T");
}
static int r_mem_capacity_zero(void) { return open_uri("mem:?capacity=0"); }
static int r_mem_host(void) { return open_uri("mem://host"); }
static int r_mem_verify(void) { return open_uri("mem:?verify=2"); }
static int r_mem_policy(void) { return open_uri("mem:?policy=fifo"); }
static int r_mem_max_objects(void) { return open_uri("mem:?max_objects=0"); }
static int r_fault_no_inner(void) { return open_uri("fault+:"); }
static int r_fault_inner_unknown(void) { return open_uri("fault+nosuch:"); }
static int r_fault_prob(void) { return open_uri("fault+mem:?fault.error=1.5"); }
static int r_fault_prob_text(void)
{
	return open_uri("fault+mem:?fault.corrupt=often");
}
static int r_fault_unknown(void) { return open_uri("fault+mem:?fault.bogus=1"); }
static int r_fault_latency(void)
{
	return open_uri("fault+mem:?fault.latency_ms=3600001");
}
static int r_fault_bool(void) { return open_uri("fault+mem:?fault.down=maybe"); }
static int r_fault_inner_option(void)
{
	return open_uri("fault+mem:?capacity=none");
}

/* ========================================================= store calls */

static int r_store_keys_null(void)
{
	kvl_store *s = open_ok("mem:");
	int res[1];
	int rc = kvl_store_exists(s, NULL, 1, res);
	note(rc, kvl_store_errmsg(s));
	kvl_store_close(s);
	return rc;
}

static int r_store_results_null(void)
{
	kvl_store *s = open_ok("mem:");
	const char *k[1] = {"a"};
	int rc = kvl_store_exists(s, k, 1, NULL);
	note(rc, kvl_store_errmsg(s));
	kvl_store_close(s);
	return rc;
}

static int r_store_key_empty(void)
{
	kvl_store *s = open_ok("mem:");
	const char *k[2] = {"a", ""};
	int res[2] = {-100, -100};
	ASSERT_CODE(kvl_store_exists(s, k, 2, res), KVL_OK);
	ASSERT_EQ(res[0], 0);
	note(res[1], kvl_store_errmsg(s));
	kvl_store_close(s);
	return res[1];
}

static int r_store_key_long(void)
{
	kvl_store *s = open_ok("mem:");
	char key[KVL_KEY_MAX + 1];
	memset(key, 'k', KVL_KEY_MAX);
	key[KVL_KEY_MAX] = 0;
	const char *k[1] = {key};
	int res[1] = {-100};
	ASSERT_CODE(kvl_store_exists(s, k, 1, res), KVL_OK);
	note(res[0], kvl_store_errmsg(s));
	kvl_store_close(s);
	return res[0];
}

static int r_store_key_null(void)
{
	kvl_store *s = open_ok("mem:");
	const char *k[1] = {NULL};
	int res[1] = {-100};
	ASSERT_CODE(kvl_store_remove(s, k, 1, res), KVL_OK);
	note(res[0], kvl_store_errmsg(s));
	kvl_store_close(s);
	return res[0];
}

static int r_store_counts_null(void)
{
	kvl_store *s = open_ok("mem:");
	const char *k[1] = {"a"};
	char b[4];
	kvl_range r = {0, b, 4};
	int got[1];
	int rc = kvl_store_get(s, k, 1, &r, NULL, got);
	note(rc, kvl_store_errmsg(s));
	kvl_store_close(s);
	return rc;
}

static int r_store_items_null(void)
{
	kvl_store *s = open_ok("mem:");
	const char *k[1] = {"a"};
	size_t n[1] = {1};
	int res[1];
	int rc = kvl_store_put(s, k, 1, NULL, n, res);
	note(rc, kvl_store_errmsg(s));
	kvl_store_close(s);
	return rc;
}

static int r_store_range_addr(void)
{
	kvl_store *s = open_ok("mem:");
	const char *k[1] = {"a"};
	kvl_range r = {0, NULL, 4};
	size_t n[1] = {1};
	int got[1] = {-100};
	ASSERT_CODE(kvl_store_get(s, k, 1, &r, n, got), KVL_OK);
	note(got[0], kvl_store_errmsg(s));
	kvl_store_close(s);
	return got[0];
}

static int r_store_range_wraps(void)
{
	kvl_store *s = open_ok("mem:");
	const char *k[1] = {"a"};
	kvl_range r = {0, (void *)(UINTPTR_MAX - 3), 8};
	size_t n[1] = {1};
	int got[1] = {-100};
	ASSERT_CODE(kvl_store_get(s, k, 1, &r, n, got), KVL_OK);
	note(got[0], kvl_store_errmsg(s));
	kvl_store_close(s);
	return got[0];
}

/* Puts "a" = 16 bytes into s, then (after `then` changed s, when given)
 * runs one get of [off, off+len) of `key`. */
static int get_range_then(kvl_store *s, const char *key, uint64_t off,
                          size_t len, void (*then)(kvl__fault_cfg *))
{
	char v[16] = "0123456789abcdef", b[64];
	const char *k[1] = {"a"};
	kvl_iov pc = {v, 16};
	size_t one = 1;
	int res;
	ASSERT_CODE(kvl_store_put(s, k, 1, &pc, &one, &res), KVL_OK);
	ASSERT_TRUE(res >= 0);
	if (then)
		fault_set(s, then);
	const char *k2[1] = {key};
	kvl_range r = {off, b, len};
	int got[1] = {-100};
	int rc = kvl_store_get(s, k2, 1, &r, &one, got);
	if (rc)
		return note(rc, kvl_store_errmsg(s));
	return note(got[0], kvl_store_errmsg(s));
}

static int get_range(kvl_store *s, const char *key, uint64_t off, size_t len)
{
	return get_range_then(s, key, off, len, NULL);
}

static int r_store_get_beyond(void)
{
	kvl_store *s = open_ok("mem:");
	int rc = get_range(s, "a", 8, 16);
	kvl_store_close(s);
	return rc;
}

static int r_store_get_absent(void)
{
	kvl_store *s = open_ok("mem:");
	int rc = get_range(s, "b", 0, 4);
	kvl_store_close(s);
	g_msg_noted = 0; /* an absent key is an answer, not a failure */
	return rc;
}

static int r_store_put_too_big(void)
{
	kvl_store *s = open_ok("mem:?capacity=1KiB");
	static char v[2048];
	const char *k[1] = {"big"};
	kvl_iov pc = {v, sizeof v};
	size_t one = 1;
	int res = -100;
	ASSERT_CODE(kvl_store_put(s, k, 1, &pc, &one, &res), KVL_OK);
	note(res, kvl_store_errmsg(s));
	kvl_store_close(s);
	return res;
}

static int reg(void *addr, size_t len, kvl_mem_kind mem)
{
	kvl_store *s = open_ok("mem:");
	int rc = kvl_store_register(s, addr, len, mem);
	note(rc, kvl_store_errmsg(s));
	kvl_store_close(s);
	return rc;
}

static int r_store_register_null(void) { return reg(NULL, 8, KVL_MEM_HOST); }
static int r_store_register_zero(void) { return reg(g_arena, 0, KVL_MEM_HOST); }
static int r_store_register_wraps(void)
{
	return reg((void *)(UINTPTR_MAX - 7), 16, KVL_MEM_HOST);
}
static int r_store_register_kind(void)
{
	return reg(g_arena, 8, (kvl_mem_kind)9);
}

static int r_store_stats_null(void)
{
	kvl_store *s = open_ok("mem:");
	int rc = kvl_store_stats_get(s, NULL);
	note(rc, kvl_store_errmsg(s));
	kvl_store_close(s);
	return rc;
}

static int r_store_render_format(void)
{
	kvl_store *s = open_ok("mem:");
	char b[4096];
	int rc = kvl_store_stats_render(s, (kvl_stats_format)9, b, sizeof b,
	                                NULL);
	note(rc, kvl_store_errmsg(s));
	kvl_store_close(s);
	return rc;
}

static int r_store_render_small(void)
{
	kvl_store *s = open_ok("mem:");
	char b[8];
	size_t need = 0;
	int rc = kvl_store_stats_render(s, KVL_STATS_JSON, b, sizeof b, &need);
	note(rc, kvl_store_errmsg(s));
	kvl_store_close(s);
	return rc == KVL_ERANGE && need < 8 ? -999 : rc;
}

static int r_log_level(void)
{
	int before = kvl_log_get_level();
	int rc = kvl_log_set(NULL, NULL, KVL_LOG_DEBUG + 1);
	int low = kvl_log_set(NULL, NULL, KVL_LOG_OFF - 1);
	/* Both refused, and the threshold unchanged. */
	return low == rc && kvl_log_get_level() == before ? rc : -999;
}

/* ======================================================== store states */

static int r_state_down_exists(void)
{
	kvl_store *s = open_ok("fault+mem:?fault.down=1");
	const char *k[1] = {"a"};
	int res[1];
	int rc = kvl_store_exists(s, k, 1, res);
	note(rc, kvl_store_errmsg(s));
	kvl_store_close(s);
	return rc;
}

static int r_state_breaker(void)
{
	kvl_store *s = open_ok("fault+mem:?fault.down=1&breaker=1");
	const char *k[1] = {"a"};
	int res[1];
	kvl_store_exists(s, k, 1, res); /* fails: opens the breaker */
	uint8_t d[8];
	kvl_range r = {0, d, sizeof d};
	size_t one = 1;
	int rc = kvl_store_get(s, k, 1, &r, &one, res);
	note(rc, kvl_store_errmsg(s));
	if (!strstr(kvl_store_errmsg(s), "calls in a row failed"))
		rc = -999; /* refused by the store, not by the breaker */
	kvl_store_close(s);
	return rc;
}

static int r_state_down_put(void)
{
	kvl_store *s = open_ok("fault+mem:?fault.down=1");
	const char *k[1] = {"a"};
	char v[4] = "abc";
	kvl_iov pc = {v, 4};
	size_t one = 1;
	int res[1] = {-100};
	kvl_store_put(s, k, 1, &pc, &one, res);
	note(res[0], kvl_store_errmsg(s));
	kvl_store_close(s);
	return res[0];
}

static int r_state_key_error(void)
{
	kvl_store *s = open_ok("fault+mem:");
	int rc = get_range_then(s, "a", 0, 4, set_error);
	kvl_store_close(s);
	return rc;
}

static int r_state_register_down(void)
{
	kvl_store *s = open_ok("fault+mem:?fault.down=1");
	int rc = kvl_store_register(s, g_arena, 8, KVL_MEM_HOST);
	note(rc, kvl_store_errmsg(s));
	kvl_store_close(s);
	return rc;
}

/* ============================================================== pages */

/* kvl_pages_get of page 1 into slot 1 after `prep` set up store s. */
static int pages_get_after(const char *uri, void (*prep)(kvl_store *, eng *))
{
	eng e;
	eng_init(&e);
	kvl_store *s = open_ok(uri);
	prep(s, &e);
	kvl_hash h = page_n(1);
	size_t slot = 1;
	int res = -100;
	int rc = kvl_pages_get(s, e.l, e.kv, &h, &slot, 1, KVL_ALL_LAYERS,
	                       &res);
	if (rc)
		res = rc;
	note(res, kvl_store_errmsg(s));
	kvl_store_close(s);
	eng_free(&e);
	return res;
}

static void prep_nothing(kvl_store *s, eng *e)
{
	(void)s;
	(void)e;
}

static void prep_flip(kvl_store *s, eng *e)
{
	kvl_hash h = page_n(1);
	put_page(s, e, &h);
	fault_set(s, set_corrupt);
}

/* Object bytes of page 1 of e (stored from slot 0 in `from`) under the key
 * of page 2 in s, or truncated, or unsummed. */
static void copy_object(kvl_store *s, eng *e, int which_page, size_t cut,
                        const char *from_uri)
{
	kvl_store *from = open_ok(from_uri);
	kvl_hash h1 = page_n(1), h2 = page_n((unsigned)which_page);
	put_page(from, e, &h2);
	size_t size = 0;
	kvl_layout_object_size(e->l, e->kv, &size, NULL);
	uint8_t *obj = malloc(size);
	char key[KVL_KEY_MAX], key1[KVL_KEY_MAX];
	kvl_layout_key(e->l, e->kv, &h2, key, sizeof key);
	kvl_layout_key(e->l, e->kv, &h1, key1, sizeof key1);
	const char *k[1] = {key}, *k1[1] = {key1};
	kvl_range r = {0, obj, size};
	size_t one = 1;
	int got;
	ASSERT_TRUE(obj != NULL);
	ASSERT_CODE(kvl_store_get(from, k, 1, &r, &one, &got), KVL_OK);
	ASSERT_CODE(got, 0);
	kvl_iov pc = {obj, size - cut};
	int res;
	ASSERT_CODE(kvl_store_put(s, k1, 1, &pc, &one, &res), KVL_OK);
	ASSERT_TRUE(res >= 0);
	free(obj);
	kvl_store_close(from);
}

static void prep_other_page(kvl_store *s, eng *e)
{
	copy_object(s, e, 2, 0, "mem:?verify=1");
}

static void prep_truncated(kvl_store *s, eng *e)
{
	copy_object(s, e, 1, 8, "mem:?verify=1");
}

static void prep_unsummed(kvl_store *s, eng *e)
{
	copy_object(s, e, 1, 0, "mem:"); /* trusted: written without sums */
}

/* Page 1's object written through a fault store with `secret` (NULL:
 * none), planted in s; `forge` rewrites a payload byte and recomputes
 * every unkeyed checksum first. */
static void plant_sealed(kvl_store *s, eng *e, const char *secret,
                         int forge)
{
	char uri[256] = "fault+mem:";
	if (secret)
		snprintf(uri, sizeof uri, "fault+mem:?secret_file=%s",
		         secret_path(secret[7] == 'A' ? "a" : "b", secret,
		                     strlen(secret)));
	kvl_store *from = open_ok(uri);
	kvl_hash h1 = page_n(1);
	put_page(from, e, &h1);
	size_t size = 0, hdr = 0;
	kvl_layout_object_size(e->l, e->kv, &size, &hdr);
	uint8_t *obj = malloc(size);
	char key[KVL_KEY_MAX];
	kvl_layout_key(e->l, e->kv, &h1, key, sizeof key);
	const char *k[1] = {key};
	kvl_range r = {0, obj, size};
	size_t one = 1;
	int got;
	ASSERT_TRUE(obj != NULL);
	ASSERT_CODE(kvl_store_get(from, k, 1, &r, &one, &got), KVL_OK);
	ASSERT_CODE(got, 0);
	if (forge) {
		uint32_t layers[16];
		size_t n = 0;
		kvl_layout_pool_layers(e->l, e->kv, layers, 16, &n);
		obj[hdr] ^= 1;
		for (size_t i = 0; i < n; i++) {
			size_t off, len;
			kvl_layout_layer_range(e->l, e->kv, layers[i], &off,
			                       &len);
			kvl__checksum(obj + off, len, KVL__CHECKSUM_SEED,
			              obj + 88 + 16 * i);
		}
		kvl__checksum(obj, 88 + 16 * n, KVL__CHECKSUM_SEED,
		              obj + 88 + 16 * n);
	}
	kvl_iov pc = {obj, size};
	int res;
	ASSERT_CODE(kvl_store_put(s, k, 1, &pc, &one, &res), KVL_OK);
	ASSERT_TRUE(res >= 0);
	free(obj);
	kvl_store_close(from);
}

static void prep_secret_a(kvl_store *s, eng *e)
{
	plant_sealed(s, e, SECRET_A, 0);
}
static void prep_secret_a_forged(kvl_store *s, eng *e)
{
	plant_sealed(s, e, SECRET_A, 1);
}
static void prep_no_secret(kvl_store *s, eng *e)
{
	plant_sealed(s, e, NULL, 0);
}

static void prep_fail_get(kvl_store *s, eng *e)
{
	kvl_hash h = page_n(1);
	put_page(s, e, &h);
	fault_set(s, set_fail_get1);
}

static int r_pages_absent(void)
{
	int rc = pages_get_after("mem:", prep_nothing);
	g_msg_noted = 0; /* an absent page is an answer, not a failure */
	return rc;
}
static int r_pages_flip(void)
{
	return pages_get_after("fault+mem:", prep_flip);
}
static int r_pages_other_page(void)
{
	return pages_get_after("mem:?verify=1", prep_other_page);
}
static int r_pages_truncated(void)
{
	return pages_get_after("mem:?verify=1", prep_truncated);
}
static int r_pages_unsummed(void)
{
	return pages_get_after("mem:?verify=1", prep_unsummed);
}
static const char *uri_secret(const char *secret)
{
	static char uri[256];
	snprintf(uri, sizeof uri, "fault+mem:?secret_file=%s",
	         secret_path(secret[7] == 'A' ? "a" : "b", secret,
	                     strlen(secret)));
	return uri;
}
static int r_pages_other_secret(void)
{
	return pages_get_after(uri_secret(SECRET_B), prep_secret_a);
}
static int r_pages_keyed_no_secret(void)
{
	return pages_get_after("fault+mem:", prep_secret_a);
}
static int r_pages_unkeyed_secret(void)
{
	return pages_get_after(uri_secret(SECRET_A), prep_no_secret);
}
static int r_pages_forged(void)
{
	return pages_get_after(uri_secret(SECRET_A), prep_secret_a_forged);
}
static int r_pages_store_fails(void)
{
	return pages_get_after("fault+mem:", prep_fail_get);
}

static int r_pages_slot(void)
{
	eng e;
	eng_init(&e);
	kvl_store *s = open_ok("mem:");
	kvl_hash h = page_n(1);
	size_t slot = NP;
	int res = -100;
	ASSERT_CODE(kvl_pages_get(s, e.l, e.kv, &h, &slot, 1, KVL_ALL_LAYERS,
	                          &res),
	            KVL_OK);
	note(res, kvl_store_errmsg(s));
	kvl_store_close(s);
	eng_free(&e);
	return res;
}

static int r_pages_layer(void)
{
	eng e;
	eng_init(&e);
	kvl_store *s = open_ok("mem:");
	kvl_hash h = page_n(1);
	size_t slot = 0;
	int res = -100;
	int rc = kvl_pages_get(s, e.l, e.kv, &h, &slot, 1, 7, &res);
	note(rc, kvl_store_errmsg(s));
	kvl_store_close(s);
	eng_free(&e);
	return rc;
}

static int r_pages_pool(void)
{
	eng e;
	eng_init(&e);
	kvl_store *s = open_ok("mem:");
	kvl_hash h = page_n(1);
	int res = -100;
	int rc = kvl_pages_exists(s, e.l, 5, &h, 1, &res);
	note(rc, kvl_store_errmsg(s));
	kvl_store_close(s);
	eng_free(&e);
	return rc;
}

/* ============================================================= linker */

static int open_lk(eng *e, int finalize, const kvl_linker_opts *o)
{
	kvl_store *s = open_ok("mem:");
	kvl_linker *lk = NULL;
	char err[256] = "";
	kvl_layout *l = e ? e->l : NULL;
	kvl_layout *raw = NULL;
	if (e && !finalize) {
		raw = layout_new();
		int kv;
		kvl_layout_add_pool(raw, "kv", KVL_HIT_ALL_PAGES, 0, 0, &kv);
		l = raw;
	}
	int rc = kvl_linker_open(s, l, o, &lk, err, sizeof err);
	note(rc, err);
	kvl_linker_close(lk);
	kvl_layout_free(raw);
	kvl_store_close(s);
	return rc;
}

static int r_linker_layout_null(void) { return open_lk(NULL, 1, NULL); }
static int r_linker_unfinalized(void)
{
	eng e;
	eng_init(&e);
	int rc = open_lk(&e, 0, NULL);
	eng_free(&e);
	return rc;
}
static int r_linker_struct_size(void)
{
	eng e;
	eng_init(&e);
	kvl_linker_opts o = KVL_LINKER_OPTS_INIT;
	o.struct_size = 0;
	int rc = open_lk(&e, 1, &o);
	eng_free(&e);
	return rc;
}
static int r_linker_struct_big(void)
{
	eng e;
	eng_init(&e);
	kvl_linker_opts o[2];
	memset(o, 0, sizeof o);
	o[0].struct_size = sizeof o;
	int rc = open_lk(&e, 1, o);
	eng_free(&e);
	return rc;
}
/* Opens a linker with one option set past its limit. */
static int open_with(kvl_linker_opts o)
{
	eng e;
	eng_init(&e);
	int rc = open_lk(&e, 1, &o);
	eng_free(&e);
	return rc;
}
static int r_linker_max_requests(void)
{
	kvl_linker_opts o = KVL_LINKER_OPTS_INIT;
	o.max_requests = UINT32_MAX /* once a 128 GiB calloc */;
	return open_with(o);
}
static int r_linker_max_request_pages(void)
{
	kvl_linker_opts o = KVL_LINKER_OPTS_INIT;
	o.max_request_pages = KVL_LINKER_MAX_REQUEST_PAGES + 1u;
	return open_with(o);
}
static int r_linker_io_batch(void)
{
	kvl_linker_opts o = KVL_LINKER_OPTS_INIT;
	o.io_batch = KVL_LINKER_MAX_IO_BATCH + 1u;
	return open_with(o);
}
static int r_linker_gpu_copy(void)
{
	kvl_linker_opts o = KVL_LINKER_OPTS_INIT;
	o.gpu_copy = KVL_GPU_COPY_DMA + 1u;
	return open_with(o);
}
static int r_linker_gpu_staging(void)
{
	kvl_linker_opts o = KVL_LINKER_OPTS_INIT;
	o.gpu_staging = KVL_LINKER_MAX_GPU_STAGING + 1u;
	return open_with(o);
}
static int r_linker_cuda(void)
{
	if (kvl_has_feature("cuda"))
		return skip("this build has CUDA");
	kvl_layout *l = layout_new();
	int kv;
	kvl_buffer b = buf_at(g_arena, K_BYTES);
	b.mem = KVL_MEM_CUDA;
	ASSERT_CODE(kvl_layout_add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0, &kv),
	            KVL_OK);
	ASSERT_CODE(kvl_layout_add_buffer(l, kv, "k", 0, &b), KVL_OK);
	ASSERT_CODE(kvl_layout_finalize(l), KVL_OK);
	kvl_store *s = open_ok("mem:");
	kvl_linker *lk = NULL;
	char err[256] = "";
	int rc = kvl_linker_open(s, l, NULL, &lk, err, sizeof err);
	note(rc, err);
	kvl_linker_close(lk);
	kvl_store_close(s);
	kvl_layout_free(l);
	return rc;
}

/* A linker over a fresh engine and store `uri` (opts o), for one call. */
typedef struct lks {
	eng e;
	kvl_store *s;
	kvl_linker *lk;
	kvl_hash pages[4];
	size_t slots[4];
	const size_t *sp[1];
} lks;

static void lks_open(lks *x, const char *uri, const kvl_linker_opts *o)
{
	eng_init(&x->e);
	x->s = open_ok(uri);
	x->lk = linker(&x->e, x->s, o);
	for (unsigned i = 0; i < 4; i++) {
		x->pages[i] = page_n(i + 1);
		x->slots[i] = 4 + i;
	}
	x->sp[0] = x->slots;
}

static int lks_close(lks *x, int rc)
{
	note(rc, kvl_linker_errmsg(x->lk));
	kvl_linker_close(x->lk);
	kvl_store_close(x->s);
	eng_free(&x->e);
	return rc;
}

static int r_lookup_prefix_null(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	return lks_close(&x, kvl_linker_lookup(x.lk, x.pages, 4, NULL,
	                                       NULL));
}

static int r_lookup_too_many(void)
{
	kvl_linker_opts o = KVL_LINKER_OPTS_INIT;
	o.max_request_pages = 2;
	lks x;
	lks_open(&x, "mem:", &o);
	size_t p = 99;
	int rc = kvl_linker_lookup(x.lk, x.pages, 4, NULL, &p);
	return lks_close(&x, p == 0 ? rc : -999); /* 0 on every failure */
}

static int r_lookup_no_page(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	uint8_t none[4] = {0};
	const uint8_t *pp[1] = {none};
	size_t p;
	return lks_close(&x, kvl_linker_lookup(x.lk, x.pages, 4, pp,
	                                       &p));
}

static int r_lookup_down(void)
{
	lks x;
	lks_open(&x, "fault+mem:?fault.down=1", NULL);
	size_t p = 99;
	int rc = kvl_linker_lookup(x.lk, x.pages, 4, NULL, &p);
	return lks_close(&x, p == 0 ? rc : -999);
}

static int r_lookup_key_errors(void)
{
	lks x;
	lks_open(&x, "fault+mem:?fault.error=1", NULL);
	size_t p = 99;
	int rc = kvl_linker_lookup(x.lk, x.pages, 4, NULL, &p);
	return lks_close(&x, p == 0 ? rc : -999);
}

/* lookup_set into `words` words; -999 unless a failure left bits empty
 * (bit 0 only) or, for a short bitmap, untouched. */
static int lookup_set(const char *uri, const kvl_linker_opts *o,
                      size_t n_words)
{
	lks x;
	lks_open(&x, uri, o);
	uint64_t bits[2] = {42, 42};
	int rc = kvl_linker_lookup_set(x.lk, x.pages, 4, NULL, bits, n_words);
	uint64_t want = n_words ? 1 : 42;
	return lks_close(&x, rc && bits[0] != want ? -999 : rc);
}
static int r_lookup_set_short(void) { return lookup_set("mem:", NULL, 0); }
static int r_lookup_set_bits_null(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	return lks_close(&x, kvl_linker_lookup_set(x.lk, x.pages, 4, NULL,
	                                           NULL, 1));
}
static int r_lookup_set_too_many(void)
{
	kvl_linker_opts o = KVL_LINKER_OPTS_INIT;
	o.max_request_pages = 2;
	return lookup_set("mem:", &o, 1);
}
static int r_lookup_set_down(void)
{
	return lookup_set("fault+mem:?fault.down=1", NULL, 1);
}
static int r_lookup_set_key_errors(void)
{
	return lookup_set("fault+mem:?fault.error=1", NULL, 1);
}


/* A one-pool layout of sizes only (kvl_layout_add_shape), finalized
 * unless `open`; with `shard` for a tp rank of 2. */
static kvl_layout *shape_layout(int open, const kvl_shard *shard)
{
	kvl_layout *l = NULL;
	ASSERT_CODE(kvl_layout_create("errors/bf16", 16, shard, &l, NULL, 0),
	            KVL_OK);
	int id;
	ASSERT_CODE(kvl_layout_add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0, &id),
	            KVL_OK);
	for (uint32_t ly = 0; ly < N_LAYERS; ly++)
		ASSERT_CODE(kvl_layout_add_shape(l, id, "k", ly, K_BYTES),
		            KVL_OK);
	if (!open)
		ASSERT_CODE(kvl_layout_finalize(l), KVL_OK);
	return l;
}

static int r_shape_bytes_zero(void)
{
	kvl_layout *l = shape_layout(1, NULL);
	int rc = kvl_layout_add_shape(l, 0, "v", 0, 0);
	note(rc, kvl_layout_errmsg(l));
	kvl_layout_free(l);
	return rc;
}

static int r_shape_mixed(void)
{
	kvl_layout *l = shape_layout(1, NULL);
	static _Alignas(64) uint8_t mem[K_BYTES];
	kvl_buffer b = {.base = mem, .page_stride = K_BYTES,
	                .page_bytes = K_BYTES, .num_pages = 1};
	int rc = kvl_layout_add_buffer(l, 0, "v", 0, &b);
	if (rc == 0)
		rc = kvl_layout_finalize(l);
	note(rc, kvl_layout_errmsg(l));
	kvl_layout_free(l);
	return rc;
}

static int r_shape_linker(void)
{
	kvl_layout *l = shape_layout(0, NULL);
	kvl_store *s = NULL;
	ASSERT_CODE(kvl_store_open("mem:", &s, NULL, 0), KVL_OK);
	kvl_linker *lk = NULL;
	char err[256] = "";
	int rc = kvl_linker_open(s, l, NULL, &lk, err, sizeof err);
	note(rc, err);
	kvl_linker_close(lk);
	kvl_store_close(s);
	kvl_layout_free(l);
	return rc;
}

static int r_shape_pages_put(void)
{
	kvl_layout *l = shape_layout(0, NULL);
	kvl_store *s = NULL;
	ASSERT_CODE(kvl_store_open("mem:", &s, NULL, 0), KVL_OK);
	kvl_hash h = page_n(1);
	size_t slot = 0;
	int res = 0;
	int rc = kvl_pages_put(s, l, 0, &h, &slot, 1, &res);
	note(rc, kvl_store_errmsg(s));
	kvl_store_close(s);
	kvl_layout_free(l);
	return rc;
}

static int r_shard_key_sizes(void)
{
	kvl_layout *l = shape_layout(0, NULL);
	kvl_shard other = {0, 2, 0, 1, 0, 1};
	kvl_hash h = page_n(1);
	char key[KVL_KEY_MAX];
	int rc = kvl_layout_shard_key(l, 0, &other, &h, key, sizeof key);
	note(rc, kvl_layout_errmsg(l));
	kvl_layout_free(l);
	return rc;
}

/* kvl_prober_open over n layouts of sizes only, one per shard given (n 0:
 * a NULL list). */
static int prober_open(size_t n, const kvl_shard *shards)
{
	kvl_layout *l[2] = {NULL, NULL};
	for (size_t i = 0; i < n; i++)
		l[i] = shape_layout(0, &shards[i]);
	kvl_store *s = NULL;
	ASSERT_CODE(kvl_store_open("mem:", &s, NULL, 0), KVL_OK);
	kvl_prober *pr = NULL;
	char err[256] = "";
	int rc = kvl_prober_open(s, n ? (const kvl_layout *const *)l : NULL, n,
	                         &pr, err, sizeof err);
	note(rc, err);
	kvl_prober_close(pr);
	kvl_store_close(s);
	for (size_t i = 0; i < n; i++)
		kvl_layout_free(l[i]);
	return rc;
}

static int r_prober_none(void) { return prober_open(0, NULL); }
static int r_prober_stages(void)
{
	kvl_shard s[1] = {{0, 1, 0, 1, 0, 2}};
	return prober_open(1, s);
}
static int r_prober_twice(void)
{
	kvl_shard s[2] = {{0, 1, 0, 1, 1, 2}, {0, 1, 0, 1, 1, 2}};
	return prober_open(2, s);
}
static int r_prober_sizes(void)
{
	kvl_shard s[2] = {{0, 1, 0, 1, 0, 2}, {0, 2, 0, 1, 1, 2}};
	return prober_open(2, s);
}

/* kvl_prober_lookup_set on `uri` into `words` words; -999 unless a
 * failure left bits empty (or, for a short bitmap, untouched). */
static int prober_lookup(const char *uri, size_t words)
{
	kvl_layout *l = shape_layout(0, NULL);
	kvl_store *s = NULL;
	ASSERT_CODE(kvl_store_open(uri, &s, NULL, 0), KVL_OK);
	kvl_prober *pr = NULL;
	const kvl_layout *stages[1] = {l};
	ASSERT_CODE(kvl_prober_open(s, stages, 1, &pr, NULL, 0), KVL_OK);
	kvl_hash pages[4] = {page_n(1), page_n(2), page_n(3), page_n(4)};
	uint64_t bits[1] = {42};
	int rc = kvl_prober_lookup_set(pr, pages, 4, bits, words);
	note(rc, kvl_prober_errmsg(pr));
	uint64_t want = words ? 1 : 42;
	kvl_prober_close(pr);
	kvl_store_close(s);
	kvl_layout_free(l);
	return rc && bits[0] != want ? -999 : rc;
}

static int r_prober_short(void) { return prober_lookup("mem:", 0); }
static int r_prober_down(void)
{
	return prober_lookup("fault+mem:?fault.down=1", 1);
}
static int r_prober_key_errors(void)
{
	return prober_lookup("fault+mem:?fault.error=1", 1);
}

static int failing_allreduce(uint64_t *bits, size_t n, void *user)
{
	(void)bits;
	(void)n;
	(void)user;
	return KVL_ETIMEDOUT;
}

static int r_lookup_allreduce(void)
{
	kvl_linker_opts o = KVL_LINKER_OPTS_INIT;
	o.allreduce = failing_allreduce;
	lks x;
	lks_open(&x, "mem:", &o);
	size_t p = 99;
	int rc = kvl_linker_lookup(x.lk, x.pages, 4, NULL, &p);
	return lks_close(&x, p == 0 ? rc : -999);
}

static int r_load_no_pages(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	return lks_close(&x, kvl_linker_load(x.lk, 1, x.pages, 0, x.sp));
}

static int r_load_slots_null(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	return lks_close(&x, kvl_linker_load(x.lk, 1, x.pages, 4, NULL));
}

static int r_load_slot_range(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	x.slots[2] = NP;
	return lks_close(&x, kvl_linker_load(x.lk, 1, x.pages, 4, x.sp));
}

static int r_load_slot_twice(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	x.slots[3] = x.slots[1];
	return lks_close(&x, kvl_linker_load(x.lk, 1, x.pages, 4, x.sp));
}

static int r_load_slot_taken(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	int rc = kvl_linker_load(x.lk, 1, x.pages, 2, x.sp);
	if (rc == 0) /* pages 0, 1 of load 2 into load 1's slots */
		rc = kvl_linker_load(x.lk, 2, x.pages, 2, x.sp);
	return lks_close(&x, rc);
}

static int r_offload_slot_twice(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	x.slots[3] = x.slots[1];
	return lks_close(&x, kvl_linker_offload(x.lk, 1, x.pages, 4, x.sp,
	                                        NULL));
}

static int r_load_no_slot(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	for (int i = 0; i < 4; i++)
		x.slots[i] = KVL_NO_SLOT;
	return lks_close(&x, kvl_linker_load(x.lk, 1, x.pages, 4, x.sp));
}

static int r_load_too_many(void)
{
	kvl_linker_opts o = KVL_LINKER_OPTS_INIT;
	o.max_request_pages = 2;
	lks x;
	lks_open(&x, "mem:", &o);
	return lks_close(&x, kvl_linker_load(x.lk, 1, x.pages, 4, x.sp));
}

static int r_load_dup(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	ASSERT_CODE(kvl_linker_load(x.lk, 1, x.pages, 4, x.sp), KVL_OK);
	return lks_close(&x, kvl_linker_load(x.lk, 1, x.pages, 4, x.sp));
}

static int r_load_full(void)
{
	kvl_linker_opts o = KVL_LINKER_OPTS_INIT;
	o.max_requests = 1;
	lks x;
	lks_open(&x, "mem:", &o);
	ASSERT_CODE(kvl_linker_load(x.lk, 1, x.pages, 4, x.sp), KVL_OK);
	return lks_close(&x, kvl_linker_load(x.lk, 2, x.pages, 4, x.sp));
}

static int r_load_closed(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	kvl_linker_shutdown(x.lk);
	return lks_close(&x, kvl_linker_load(x.lk, 1, x.pages, 4, x.sp));
}

static int r_cancel_unknown(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	int co;
	return lks_close(&x, kvl_linker_cancel(x.lk, 42, &co));
}

static int r_cancel_out_null(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	return lks_close(&x, kvl_linker_cancel(x.lk, 42, NULL));
}

static int r_start_closed(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	kvl_linker_shutdown(x.lk);
	uint64_t b;
	return lks_close(&x, kvl_linker_start(x.lk, &b));
}

static int r_start_full(void)
{
	/* The loader is held by a slow store on the first batch's layer 0
	 * while the ring of batches fills. */
	lks x;
	lks_open(&x, "fault+mem:", NULL);
	put_page(x.s, &x.e, &x.pages[0]);
	fault_set(x.s, set_slow);
	ASSERT_CODE(kvl_linker_load(x.lk, 1, x.pages, 1, x.sp), KVL_OK);
	uint64_t b;
	int rc = 0;
	for (int i = 0; i <= KVL_LINKER_MAX_BATCHES && rc == 0; i++)
		rc = kvl_linker_start(x.lk, &b);
	return lks_close(&x, rc);
}

static int r_wait_layer(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	uint64_t b;
	ASSERT_CODE(kvl_linker_start(x.lk, &b), KVL_OK);
	return lks_close(&x, kvl_linker_wait(x.lk, b, N_LAYERS, 0));
}

static int r_wait_unknown(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	return lks_close(&x, kvl_linker_wait(x.lk, 5, 0, 0));
}

static int r_wait_old(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	uint64_t b0 = 0, b;
	ASSERT_CODE(kvl_linker_start(x.lk, &b0), KVL_OK);
	for (int i = 0; i < KVL_LINKER_MAX_BATCHES; i++) {
		ASSERT_CODE(kvl_linker_wait(x.lk, i ? b : b0, 0, 5000), KVL_OK);
		ASSERT_CODE(kvl_linker_start(x.lk, &b), KVL_OK);
	}
	return lks_close(&x, kvl_linker_wait(x.lk, b0, 0, 0));
}

static int r_wait_timeout(void)
{
	lks x;
	lks_open(&x, "fault+mem:", NULL);
	put_page(x.s, &x.e, &x.pages[0]);
	fault_set(x.s, set_slow);
	ASSERT_CODE(kvl_linker_load(x.lk, 1, x.pages, 1, x.sp), KVL_OK);
	uint64_t b;
	ASSERT_CODE(kvl_linker_start(x.lk, &b), KVL_OK);
	return lks_close(&x, kvl_linker_wait(x.lk, b, 0, 20));
}

/* A completion's status is no failure of a call: no message is asked. */
static int done(int status)
{
	g_msg_noted = 0;
	return status;
}

/* The wait and the completion of one load of page 1 from `uri` after
 * `prep`; which = 0: the wait's code, 1: the completion's status. */
static int load_after(const char *uri, void (*prep)(kvl_store *, eng *),
                      int which)
{
	lks x;
	lks_open(&x, uri, NULL);
	prep(x.s, &x.e);
	int status = -1000;
	int rc = load_one(x.lk, &x.pages[0], &status);
	rc = lks_close(&x, which ? status : rc);
	return which ? done(rc) : rc;
}

static void prep_absent(kvl_store *s, eng *e)
{
	(void)s;
	(void)e;
}

static void prep_down(kvl_store *s, eng *e)
{
	kvl_hash h = page_n(1);
	put_page(s, e, &h);
	fault_set(s, set_down);
}

static int r_wait_failed(void) { return load_after("fault+mem:", prep_fail_get, 0); }
static int r_wait_corrupt(void) { return load_after("fault+mem:", prep_flip, 0); }
static int r_wait_absent(void) { return load_after("mem:", prep_absent, 0); }
static int r_done_absent(void) { return load_after("mem:", prep_absent, 1); }
static int r_done_corrupt(void) { return load_after("fault+mem:", prep_flip, 1); }
static int r_done_down(void) { return load_after("fault+mem:", prep_down, 1); }
static int r_done_foreign(void)
{
	return load_after("mem:?verify=1", prep_other_page, 1);
}

static int r_wait_shutdown(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	ASSERT_CODE(kvl_linker_load(x.lk, 1, x.pages, 1, x.sp), KVL_OK);
	uint64_t b;
	ASSERT_CODE(kvl_linker_start(x.lk, &b), KVL_OK);
	kvl_linker_shutdown(x.lk);
	/* Either the batch finished before the shutdown (absent page) or it
	 * was canceled: ask a batch that surely was canceled. */
	(void)b;
	lks y;
	lks_open(&y, "fault+mem:", NULL);
	put_page(y.s, &y.e, &y.pages[0]);
	fault_set(y.s, set_slow);
	ASSERT_CODE(kvl_linker_load(y.lk, 1, y.pages, 1, y.sp), KVL_OK);
	ASSERT_CODE(kvl_linker_start(y.lk, &b), KVL_OK);
	kvl_linker_shutdown(y.lk);
	int rc = kvl_linker_wait(y.lk, b, N_LAYERS - 1, 5000);
	lks_close(&x, 0);
	return lks_close(&y, rc);
}

static int r_done_canceled(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	int co = -1;
	ASSERT_CODE(kvl_linker_load(x.lk, 3, x.pages, 4, x.sp), KVL_OK);
	ASSERT_CODE(kvl_linker_cancel(x.lk, 3, &co), KVL_OK);
	ASSERT_EQ(co, 1);
	return done(lks_close(&x, completion_of(x.lk, 3, NULL)));
}

static int r_done_shutdown(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	ASSERT_CODE(kvl_linker_load(x.lk, 3, x.pages, 4, x.sp), KVL_OK);
	kvl_linker_shutdown(x.lk);
	return done(lks_close(&x, completion_of(x.lk, 3, NULL)));
}

static int r_offload_dup(void)
{
	lks x;
	lks_open(&x, "fault+mem:", NULL);
	fault_set(x.s, set_slow);
	ASSERT_CODE(kvl_linker_offload(x.lk, 1, x.pages, 4, x.sp, NULL),
	            KVL_OK);
	return lks_close(&x, kvl_linker_offload(x.lk, 1, x.pages, 4,
	                                        x.sp, NULL));
}

static int r_offload_full(void)
{
	kvl_linker_opts o = KVL_LINKER_OPTS_INIT;
	o.max_requests = 1;
	lks x;
	lks_open(&x, "mem:", &o);
	ASSERT_CODE(kvl_linker_offload(x.lk, 1, x.pages, 4, x.sp, NULL),
	            KVL_OK);
	return lks_close(&x, kvl_linker_offload(x.lk, 2, x.pages, 4,
	                                        x.sp, NULL));
}

static int r_offload_closed(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	kvl_linker_shutdown(x.lk);
	return lks_close(&x, kvl_linker_offload(x.lk, 1, x.pages, 4,
	                                        x.sp, NULL));
}

static int r_offload_event(void)
{
	if (kvl_has_feature("cuda"))
		return skip("this build has CUDA (the event row is about "
		            "host-only linkers)");
	lks x;
	lks_open(&x, "mem:", NULL);
	int ev = 0;
	return lks_close(&x, kvl_linker_offload(x.lk, 1, x.pages, 4, x.sp, &ev));
}

static int r_start_event(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	ASSERT_CODE(kvl_linker_load(x.lk, 1, x.pages, 4, x.sp), KVL_OK);
	int ev = 0; /* never used: refused before CUDA sees it */
	uint64_t b = 0;
	int rc = kvl_linker_start_after(x.lk, &ev, &b);
	note(rc, kvl_linker_errmsg(x.lk));
	ASSERT_CODE(kvl_linker_start(x.lk, &b), KVL_OK); /* still queued */
	ASSERT_TRUE(completion_of(x.lk, 1, NULL) != -1000); /* it ran */
	return lks_close(&x, rc);
}

static int r_done_offload_down(void)
{
	lks x;
	lks_open(&x, "fault+mem:?fault.down=1", NULL);
	ASSERT_CODE(kvl_linker_offload(x.lk, 5, x.pages, 4, x.sp, NULL),
	            KVL_OK);
	return done(lks_close(&x, completion_of(x.lk, 5, NULL)));
}

static int r_done_offload_big(void)
{
	lks x;
	lks_open(&x, "mem:?capacity=200", NULL);
	ASSERT_CODE(kvl_linker_offload(x.lk, 5, x.pages, 4, x.sp, NULL),
	            KVL_OK);
	return done(lks_close(&x, completion_of(x.lk, 5, NULL)));
}

static int r_flush_timeout(void)
{
	lks x;
	lks_open(&x, "fault+mem:", NULL);
	fault_set(x.s, set_slow);
	ASSERT_CODE(kvl_linker_offload(x.lk, 1, x.pages, 4, x.sp, NULL),
	            KVL_OK);
	return lks_close(&x, kvl_linker_flush(x.lk, 20));
}

static int r_poll_null(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	return lks_close(&x, kvl_linker_poll(x.lk, NULL, 4, NULL, 0));
}

static int r_stats_format(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	char b[64];
	return lks_close(&x, kvl_linker_stats_render(x.lk, (kvl_stats_format)9, b,
	                                      sizeof b, NULL));
}

static int r_stats_small(void)
{
	lks x;
	lks_open(&x, "mem:", NULL);
	char b[8];
	return lks_close(&x, kvl_linker_stats_render(x.lk, KVL_STATS_JSON, b,
	                                      sizeof b, NULL));
}

/* ================================================ the command-line tool */

/* Runs "$KVL_TOOL args…" with `input` on standard input and its output
 * discarded; EXIT_BASE + its exit status. */
static int tool(const char *input, const char *const *args)
{
	const char *kvl = getenv("KVL_TOOL");
	if (!kvl || !*kvl)
		return skip("KVL_TOOL is not set (ctest sets it)");
	char tin[] = "/tmp/kvl-errors-XXXXXX";
	int fd = mkstemp(tin);
	ASSERT_TRUE(fd >= 0);
	ASSERT_EQ(write(fd, input, strlen(input)), (ssize_t)strlen(input));
	close(fd);
	pid_t pid = fork();
	if (pid == 0) {
		const char *argv[16] = {kvl};
		size_t n = 1;
		while (args[n - 1] && n < 15) {
			argv[n] = args[n - 1];
			n++;
		}
		argv[n] = NULL;
		if (!freopen(tin, "r", stdin) ||
		    !freopen("/dev/null", "w", stdout) ||
		    !freopen("/dev/null", "w", stderr))
			_exit(126);
		execv(kvl, (char *const *)argv);
		_exit(127);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	unlink(tin);
	note(0, "");
	g_msg_noted = 0;
	return WIFEXITED(st) ? EXIT_BASE + WEXITSTATUS(st) : -998;
}

#define TOOL(input, ...) tool(input, (const char *const[]){__VA_ARGS__, NULL})

static int r_cli_hash_no_page_size(void) { return TOOL("", "hash", "1"); }
static int r_cli_hash_negative(void)
{
	return TOOL("", "hash", "--page-size", "2", "1", "-5");
}
static int r_cli_hash_too_big(void)
{
	return TOOL("", "hash", "--page-size", "1", "18446744073709551616");
}
static int r_cli_hash_stdin(void)
{
	return TOOL("1 2\n3 12x\n", "hash", "--page-size", "2");
}
static int r_cli_hash_prior(void)
{
	return TOOL("", "hash", "--page-size", "2", "--prior", "abc", "1");
}
static int r_cli_unknown_command(void) { return TOOL("", "frobnicate"); }
static int r_cli_bench_gpu_copy(void)
{
	return TOOL("", "bench", "--gpu-copy", "fast");
}

/* Trace rows: the line is written to a file that `kvlink replay` reads. */
static int trace(const char *text)
{
	const char *kvl = getenv("KVL_TOOL");
	if (!kvl || !*kvl)
		return skip("KVL_TOOL is not set (ctest sets it)");
	char path[] = "/tmp/kvl-trace-XXXXXX";
	int fd = mkstemp(path);
	ASSERT_TRUE(fd >= 0);
	ASSERT_EQ(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	int rc = TOOL("", "replay", path);
	unlink(path);
	return rc;
}

#define GOOD_LINE \
	"{\"timestamp\": 0, \"input_length\": 1025, \"output_length\": 6, " \
	"\"hash_ids\": [0, 1, 2]}\n"

static int r_trace_negative(void)
{
	return trace("{\"timestamp\": 0, \"input_length\": -5, "
	             "\"output_length\": 6, \"hash_ids\": []}\n");
}
static int r_trace_count(void)
{
	return trace("{\"timestamp\": 0, \"input_length\": 1025, "
	             "\"output_length\": 6, \"hash_ids\": [0, 1]}\n");
}
static int r_trace_missing(void)
{
	return trace(GOOD_LINE "{\"timestamp\": 0, \"input_length\": 1, "
	                       "\"output_length\": 6}\n");
}
static int r_trace_other_bad(void)
{
	return trace("{\"timestamp\": 0, \"input_length\": 1, "
	             "\"model\": [1, }, \"output_length\": 6, "
	             "\"hash_ids\": [3]}\n");
}
static int r_trace_fraction(void)
{
	return trace("{\"timestamp\": 1.5, \"input_length\": 1.5, "
	             "\"output_length\": 6, \"hash_ids\": [3]}\n");
}
static int r_trace_trailing(void)
{
	return trace(GOOD_LINE "{\"timestamp\": 0, \"input_length\": 1, "
	                       "\"output_length\": 6, \"hash_ids\": [3]} x\n");
}
static int r_trace_not_object(void) { return trace("[1, 2, 3]\n"); }
static int r_trace_twice(void)
{
	return trace("{\"timestamp\": 0, \"timestamp\": 1, \"input_length\": "
	             "1, \"output_length\": 6, \"hash_ids\": [3]}\n");
}
static int r_trace_empty(void) { return trace("\n\n"); }
static int r_trace_no_file(void)
{
	return TOOL("", "replay", "/nonexistent/kvl-trace.jsonl");
}

/* =============================================================== rows */

typedef struct row {
	const char *id;
	int (*fn)(void);
} row;

#define R(id, fn) {id, fn}
static const row rows[] = {
	R("hash.page-size-zero", r_hash_page_size_zero),
	R("hash.tokens-null", r_hash_tokens_null),
	R("hash.out-small", r_hash_out_small),
	R("bigram.page-size-zero", r_bigram_page_size_zero),
	R("bigram.out-small", r_bigram_out_small),
	R("sglang-seed.out-null", r_sgseed_out_null),
	R("seed.no-salts", r_seed_no_salts),
	R("seed.null-salt", r_seed_null_salt),
	R("hex.short", r_hex_short),
	R("hex.bad-char", r_hex_bad_char),
	R("hex.null", r_hex_null),
	R("layout.tag-empty", r_layout_tag_empty),
	R("layout.tag-space", r_layout_tag_space),
	R("layout.tag-long", r_layout_tag_long),
	R("layout.page-size-zero", r_layout_page_size_zero),
	R("layout.shard-rank", r_layout_shard_rank),
	R("layout.shard-size-zero", r_layout_shard_size_zero),
	R("layout.out-null", r_layout_out_null),
	R("pool.name-empty", r_pool_name_empty),
	R("pool.name-colon", r_pool_name_colon),
	R("pool.duplicate", r_pool_dup),
	R("pool.policy", r_pool_policy),
	R("pool.window-all-pages", r_pool_window_all),
	R("pool.window-zero", r_pool_window_zero),
	R("pool.flags", r_pool_flags),
	R("pool.finalized", r_pool_finalized),
	R("format.dtype-null", r_format_dtype_null),
	R("format.dtype-bad", r_format_dtype_bad),
	R("format.layout-bad", r_format_layout_bad),
	R("format.unknown-pool", r_format_pool),
	R("format.finalized", r_format_finalized),
	R("buffer.misaligned", r_buffer_misaligned),
	R("buffer.stride", r_buffer_stride),
	R("buffer.bytes-zero", r_buffer_bytes_zero),
	R("buffer.bytes-over-stride", r_buffer_bytes_stride),
	R("buffer.pages-zero", r_buffer_pages_zero),
	R("buffer.pages-differ", r_buffer_pages_differ),
	R("buffer.base-null", r_buffer_base_null),
	R("buffer.null", r_buffer_null),
	R("buffer.mem-kind", r_buffer_mem_kind),
	R("buffer.component-name", r_buffer_comp_name),
	R("buffer.layer-all", r_buffer_layer_all),
	R("buffer.layer-max", r_buffer_layer_max),
	R("buffer.wraps", r_buffer_wraps),
	R("buffer.pool-unknown", r_buffer_pool_unknown),
	R("buffer.duplicate", r_buffer_dup),
	R("buffer.finalized", r_buffer_finalized),
	R("shape.bytes-zero", r_shape_bytes_zero),
	R("shape.mixed", r_shape_mixed),
	R("shape.linker", r_shape_linker),
	R("shape.pages-put", r_shape_pages_put),
	R("shard-key.sizes", r_shard_key_sizes),
	R("finalize.no-pools", r_finalize_no_pools),
	R("finalize.pool-empty", r_finalize_pool_empty),
	R("finalize.overlap", r_finalize_overlap),
	R("finalize.missing-component", r_finalize_missing_comp),
	R("finalize.twice", r_finalize_twice),
	R("query.unfinalized", r_query_unfinalized),
	R("query.pool-name", r_query_pool_name),
	R("query.pool-id", r_query_pool_id),
	R("query.layers-cap", r_query_layers_cap),
	R("query.layer-range", r_query_layer_range),
	R("query.pieces-slot", r_query_pieces_slot),
	R("query.pieces-cap", r_query_pieces_cap),
	R("query.key-buffer", r_query_key_buf),
	R("query.key-null", r_query_key_null),
	R("query.fingerprint", r_query_fingerprint),
	R("query.object-size", r_query_object_size),
	R("restorable.window-zero", r_restorable_window),
	R("restorable.kind", r_restorable_kind),
	R("restorable.words", r_restorable_words),
	R("restorable.present-null", r_restorable_null),
	R("rank.zero", r_rank_group_zero),
	R("rank.words-zero", r_rank_words_zero),
	R("rank.words-differ", r_rank_words_differ),
	R("rank.timeout", r_rank_timeout),
	R("rank.broken", r_rank_broken),
	R("uri.no-scheme", r_uri_no_scheme),
	R("uri.scheme-char", r_uri_scheme_char),
	R("uri.space", r_uri_space),
	R("uri.empty-name", r_uri_empty_name),
	R("uri.no-value", r_uri_no_value),
	R("uri.empty-value", r_uri_empty_value),
	R("uri.option-twice", r_uri_twice),
	R("uri.too-many-options", r_uri_many),
	R("uri.unknown-option", r_uri_unknown_option),
	R("uri.unknown-scheme", r_uri_unknown_scheme),
	R("uri.redis-not-built", r_uri_redis_missing),
	R("uri.redis-unreachable", r_uri_redis_down),
	R("uri.rediss-unreachable", r_rediss_down),
	R("redis.tls-ca-missing", r_rediss_ca_missing),
	R("redis.tls-cert-missing", r_rediss_cert_missing),
	R("redis.tls-key-alone", r_rediss_key_alone),
	R("redis.tls-option-plain", r_redis_tls_option),
	R("uri.redact-small", r_redact_small),
	R("uri.redact-null", r_redact_null),
	R("mooncake.no-library", r_mc_no_library),
	R("mooncake.not-mooncake", r_mc_not_mooncake),
	R("mooncake.no-host", r_mc_no_host),
	R("mooncake.path", r_mc_path),
	R("mooncake.replicas", r_mc_replicas),
	R("mooncake.staging", r_mc_staging),
	R("mooncake.unknown-option", r_mc_unknown),
	R("uri.breaker", r_uri_breaker),
	R("uri.tenant", r_uri_tenant),
	R("uri.tenant-mem", r_uri_tenant_mem),
	R("uri.out-null", r_uri_out_null),
	R("secret.missing", r_secret_missing),
	R("secret.directory", r_secret_directory),
	R("secret.empty", r_secret_empty),
	R("secret.short", r_secret_short),
	R("secret.long", r_secret_long),
	R("secret.env-missing", r_secret_env_missing),
	R("mem.size", r_mem_size),
	R("mem.size-overflow", r_mem_size_overflow),
	R("mem.capacity-zero", r_mem_capacity_zero),
	R("mem.host", r_mem_host),
	R("mem.verify", r_mem_verify),
	R("mem.policy", r_mem_policy),
	R("mem.max-objects-zero", r_mem_max_objects),
	R("fault.no-inner", r_fault_no_inner),
	R("fault.inner-unknown", r_fault_inner_unknown),
	R("fault.probability", r_fault_prob),
	R("fault.probability-text", r_fault_prob_text),
	R("fault.unknown-option", r_fault_unknown),
	R("fault.latency", r_fault_latency),
	R("fault.bool", r_fault_bool),
	R("fault.inner-option", r_fault_inner_option),
	R("store.keys-null", r_store_keys_null),
	R("store.results-null", r_store_results_null),
	R("store.key-empty", r_store_key_empty),
	R("store.key-long", r_store_key_long),
	R("store.key-null", r_store_key_null),
	R("store.counts-null", r_store_counts_null),
	R("store.pieces-null", r_store_items_null),
	R("store.range-addr-null", r_store_range_addr),
	R("store.range-wraps", r_store_range_wraps),
	R("store.get-beyond", r_store_get_beyond),
	R("store.get-absent", r_store_get_absent),
	R("store.put-too-big", r_store_put_too_big),
	R("store.register-null", r_store_register_null),
	R("store.register-zero", r_store_register_zero),
	R("store.register-wraps", r_store_register_wraps),
	R("store.register-kind", r_store_register_kind),
	R("store.stats-null", r_store_stats_null),
	R("store.render-format", r_store_render_format),
	R("store.render-small", r_store_render_small),
	R("state.down-call", r_state_down_exists),
	R("state.down-key", r_state_down_put),
	R("state.key-error", r_state_key_error),
	R("state.breaker-open", r_state_breaker),
	R("state.register-down", r_state_register_down),
	R("pages.absent", r_pages_absent),
	R("pages.bit-flip", r_pages_flip),
	R("pages.other-page", r_pages_other_page),
	R("pages.truncated", r_pages_truncated),
	R("pages.unsummed", r_pages_unsummed),
	R("pages.other-secret", r_pages_other_secret),
	R("pages.keyed-no-secret", r_pages_keyed_no_secret),
	R("pages.unkeyed-secret", r_pages_unkeyed_secret),
	R("pages.forged", r_pages_forged),
	R("pages.store-fails", r_pages_store_fails),
	R("pages.slot", r_pages_slot),
	R("pages.layer", r_pages_layer),
	R("pages.pool", r_pages_pool),
	R("linker.layout-null", r_linker_layout_null),
	R("linker.unfinalized", r_linker_unfinalized),
	R("linker.struct-size-zero", r_linker_struct_size),
	R("linker.struct-size-big", r_linker_struct_big),
	R("linker.max-requests", r_linker_max_requests),
	R("linker.max-request-pages", r_linker_max_request_pages),
	R("linker.io-batch", r_linker_io_batch),
	R("linker.gpu-copy", r_linker_gpu_copy),
	R("linker.gpu-staging", r_linker_gpu_staging),
	R("linker.cuda-pool", r_linker_cuda),
	R("lookup.prefix-null", r_lookup_prefix_null),
	R("lookup.too-many-pages", r_lookup_too_many),
	R("lookup.no-page-asked", r_lookup_no_page),
	R("lookup.store-down", r_lookup_down),
	R("lookup.key-errors", r_lookup_key_errors),
	R("lookup.allreduce", r_lookup_allreduce),
	R("lookup-set.bits-null", r_lookup_set_bits_null),
	R("lookup-set.bits-short", r_lookup_set_short),
	R("lookup-set.too-many-pages", r_lookup_set_too_many),
	R("lookup-set.store-down", r_lookup_set_down),
	R("lookup-set.key-errors", r_lookup_set_key_errors),
	R("prober.no-layouts", r_prober_none),
	R("prober.stages", r_prober_stages),
	R("prober.stage-twice", r_prober_twice),
	R("prober.sizes-differ", r_prober_sizes),
	R("prober.bits-short", r_prober_short),
	R("prober.store-down", r_prober_down),
	R("prober.key-errors", r_prober_key_errors),
	R("load.no-pages", r_load_no_pages),
	R("load.slots-null", r_load_slots_null),
	R("load.slot-range", r_load_slot_range),
	R("load.no-slot", r_load_no_slot),
	R("load.too-many-pages", r_load_too_many),
	R("load.slot-twice", r_load_slot_twice),
	R("load.slot-taken", r_load_slot_taken),
	R("load.duplicate", r_load_dup),
	R("load.full", r_load_full),
	R("load.closed", r_load_closed),
	R("cancel.unknown", r_cancel_unknown),
	R("cancel.out-null", r_cancel_out_null),
	R("start.closed", r_start_closed),
	R("start.event-no-cuda", r_start_event),
	R("start.full", r_start_full),
	R("wait.layer", r_wait_layer),
	R("wait.unknown-batch", r_wait_unknown),
	R("wait.old-batch", r_wait_old),
	R("wait.timeout", r_wait_timeout),
	R("wait.store-fails", r_wait_failed),
	R("wait.corrupt", r_wait_corrupt),
	R("wait.absent", r_wait_absent),
	R("wait.shutdown", r_wait_shutdown),
	R("offload.slot-twice", r_offload_slot_twice),
	R("offload.duplicate", r_offload_dup),
	R("offload.full", r_offload_full),
	R("offload.closed", r_offload_closed),
	R("offload.event-no-cuda", r_offload_event),
	R("flush.timeout", r_flush_timeout),
	R("poll.null", r_poll_null),
	R("stats.format", r_stats_format),
	R("stats.small", r_stats_small),
	R("log.level", r_log_level),
	R("done.load-absent", r_done_absent),
	R("done.load-corrupt", r_done_corrupt),
	R("done.load-foreign", r_done_foreign),
	R("done.load-store-down", r_done_down),
	R("done.load-canceled", r_done_canceled),
	R("done.load-shutdown", r_done_shutdown),
	R("done.offload-store-down", r_done_offload_down),
	R("done.offload-too-big", r_done_offload_big),
	R("cli.hash-no-page-size", r_cli_hash_no_page_size),
	R("cli.hash-negative", r_cli_hash_negative),
	R("cli.hash-too-big", r_cli_hash_too_big),
	R("cli.hash-stdin", r_cli_hash_stdin),
	R("cli.hash-prior", r_cli_hash_prior),
	R("cli.unknown-command", r_cli_unknown_command),
	R("cli.bench-gpu-copy", r_cli_bench_gpu_copy),
	R("trace.negative", r_trace_negative),
	R("trace.id-count", r_trace_count),
	R("trace.missing-field", r_trace_missing),
	R("trace.other-field-bad", r_trace_other_bad),
	R("trace.fraction", r_trace_fraction),
	R("trace.trailing", r_trace_trailing),
	R("trace.not-object", r_trace_not_object),
	R("trace.field-twice", r_trace_twice),
	R("trace.no-requests", r_trace_empty),
	R("trace.no-file", r_trace_no_file),
};
#define N_ROWS (sizeof rows / sizeof rows[0])

/* ============================================================ the table */

typedef struct doc_row {
	char id[64];
	char want[32]; /* "KVL_EINVAL" or "exit 2" */
	int line;
	int used;
} doc_row;

/* Reads the rows of the table: lines "| `id` | … | `result` |". */
static size_t read_table(FILE *f, doc_row *out, size_t cap)
{
	char line[1024];
	size_t n = 0;
	int ln = 0;
	while (fgets(line, sizeof line, f)) {
		ln++;
		if (strncmp(line, "| `", 3) != 0)
			continue;
		char *id = line + 3, *end = strchr(id, '`');
		if (!end || n == cap)
			continue;
		doc_row *r = &out[n];
		memset(r, 0, sizeof *r);
		snprintf(r->id, sizeof r->id, "%.*s", (int)(end - id), id);
		r->line = ln;
		/* The last cell: between the last two '|'. */
		char *last = strrchr(line, '|');
		if (!last)
			continue;
		*last = 0;
		char *cell = strrchr(line, '|');
		if (!cell)
			continue;
		cell++;
		while (*cell == ' ' || *cell == '`')
			cell++;
		size_t k = 0;
		while (cell[k] && cell[k] != '`' && cell[k] != ' ' &&
		       k + 1 < sizeof r->want)
			k++;
		if (strncmp(cell, "exit", 4) == 0) {
			k = 4;
			while (cell[k] == ' ')
				k++;
			while (cell[k] >= '0' && cell[k] <= '9')
				k++;
		}
		snprintf(r->want, sizeof r->want, "%.*s", (int)k, cell);
		n++;
	}
	return n;
}

static void got_name(int rc, char *buf, size_t len)
{
	if (rc >= EXIT_BASE && rc < EXIT_BASE + 256)
		snprintf(buf, len, "exit %d", rc - EXIT_BASE);
	else if (rc == -1000)
		snprintf(buf, len, "(no completion)");
	else if (rc <= 0 && rc > -100)
		snprintf(buf, len, "%s", kvl_err_name(rc));
	else
		snprintf(buf, len, "(%d)", rc);
}

int main(void)
{
	char path[4096];
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *env = getenv("KVL_ERRORS_MD");
	if (env && *env) {
		snprintf(path, sizeof path, "%s", env);
	} else {
		snprintf(path, sizeof path, "%s", __FILE__);
		char *slash = strrchr(path, '/');
		if (slash)
			slash[1] = 0;
		else
			path[0] = 0;
		strncat(path, "../docs/errors.md",
		        sizeof path - strlen(path) - 1);
	}
	FILE *f = fopen(path, "r");
	if (!f) {
		printf("SKIP: cannot read the table %s (set KVL_ERRORS_MD)\n",
		       path);
		return 77;
	}
	static doc_row doc[512];
	size_t n_doc = read_table(f, doc, 512);
	fclose(f);

	int fails = 0, skipped = 0, passed = 0;
	for (size_t i = 0; i < n_doc; i++) {
		const row *r = NULL;
		for (size_t j = 0; j < N_ROWS && !r; j++)
			if (strcmp(rows[j].id, doc[i].id) == 0)
				r = &rows[j];
		for (size_t j = 0; j < i; j++)
			if (strcmp(doc[j].id, doc[i].id) == 0) {
				printf("FAIL %s (errors.md:%d): the id is used "
				       "twice\n", doc[i].id, doc[i].line);
				fails++;
			}
		if (!r) {
			printf("FAIL %s (errors.md:%d): no check for this row\n",
			       doc[i].id, doc[i].line);
			fails++;
			continue;
		}
		g_msg[0] = 0;
		g_msg_noted = 0;
		g_skip_why = NULL;
		int rc = r->fn();
		if (rc == SKIP) {
			printf("skip %-30s %s\n", doc[i].id, g_skip_why);
			skipped++;
			continue;
		}
		char got[64];
		got_name(rc, got, sizeof got);
		if (strcmp(got, doc[i].want) != 0) {
			printf("FAIL %s (errors.md:%d): got %s, the table says "
			       "%s (%s)\n",
			       doc[i].id, doc[i].line, got, doc[i].want, g_msg);
			fails++;
		} else if (rc < 0 && g_msg_noted && !g_msg[0]) {
			printf("FAIL %s (errors.md:%d): %s without a message\n",
			       doc[i].id, doc[i].line, got);
			fails++;
		} else {
			passed++;
		}
	}
	for (size_t j = 0; j < N_ROWS; j++) {
		int found = 0;
		for (size_t i = 0; i < n_doc && !found; i++)
			found = strcmp(rows[j].id, doc[i].id) == 0;
		if (!found) {
			printf("FAIL %s: a check with no row in the table\n",
			       rows[j].id);
			fails++;
		}
	}
	printf("errors.md: %zu rows: %d agree, %d skipped, %d failed\n", n_doc,
	       passed, skipped, fails);
	return fails ? 1 : 0;
}
