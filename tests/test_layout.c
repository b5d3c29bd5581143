/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_layout.c — layouts (kvl_layout_*) and the object header and checksum
 * underneath them (object.c).
 *
 * Covers every documented error of create, add_pool, add_buffer and finalize,
 * each checked for its code *and* for a message that names the problem; the
 * overlap rule (interleaved K/V with one stride is fine, half a page off is
 * not; within a pool and across pools; host vs device memory); the queries
 * (refused before finalize, exact after: pool ids and info, sparse layers,
 * object sizes, layer-major ranges in first-added component order, page
 * pieces); fingerprints (stable across builds and addresses, sensitive to
 * every field they cover, blind to rank indices and to other pools); the key
 * format, byte for byte; and, directly, the object header (round trip, each
 * field and every byte guarded) and kvl__checksum (single-bit flips at the
 * start, middle and end of every length 0..200 and 4096; a layer streamed
 * over its components sums as its bytes in the object).
 *
 * The layouts here only describe memory; nothing is copied, so buffers point
 * into static arenas.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/kvl_assert.h"
#include "support/rand.h"

#include "kvlink.h"
#include "core/layout.h"
#include "core/codec.h"

#define ARENA_BYTES (1u << 20)

static _Alignas(64) uint8_t arena[ARENA_BYTES];
static _Alignas(64) uint8_t arena2[ARENA_BYTES];

/* ================================================================= helpers */

static kvl_buffer hbuf(void *base, size_t stride, size_t bytes, size_t pages)
{
	return (kvl_buffer){.base = base, .page_stride = stride,
	                    .page_bytes = bytes, .num_pages = pages,
	                    .mem = KVL_MEM_HOST, .device = 0};
}

static kvl_layout *new_layout(const char *tag, uint32_t page_size,
                              const kvl_shard *shard)
{
	kvl_layout *l = NULL;
	char err[256] = "";
	ASSERT_RC(err, kvl_layout_create(tag, page_size, shard, &l, err,
	                                 sizeof err),
	          KVL_OK);
	assert_non_null(l);
	return l;
}

static int add_pool(kvl_layout *l, const char *name, kvl_hit_policy pol,
                    uint32_t window, uint32_t flags)
{
	int id = -1;
	int rc = kvl_layout_add_pool(l, name, pol, window, flags, &id);
	ASSERT_CODE_MSG(rc, KVL_OK, "add_pool %s: %s", name,
	                kvl_layout_errmsg(l));
	return id;
}

static void add_buf(kvl_layout *l, int pool, const char *comp, uint32_t layer,
                    kvl_buffer b)
{
	int rc = kvl_layout_add_buffer(l, pool, comp, layer, &b);
	ASSERT_CODE_MSG(rc, KVL_OK, "add_buffer %s %u: %s", comp, layer,
	                kvl_layout_errmsg(l));
}

static void finalize(kvl_layout *l)
{
	ASSERT_RC(l, kvl_layout_finalize(l), KVL_OK);
}

/* Everything a fingerprint may depend on, for building variants. One pool
 * with components k and v (or one component when pb_v is 0). */
typedef struct spec {
	const char *tag;
	uint32_t page_size;
	kvl_shard shard;
	const char *pool;
	kvl_hit_policy policy;
	uint32_t window;
	uint32_t flags;
	const char *comp_k;
	size_t pb_k, pb_v;
	uint32_t layers[8];
	size_t n_layers;
	uint8_t *mem;      /* where the buffers go */
	size_t stride;     /* bytes between slots */
	size_t pages;      /* slots */
	int second_pool;   /* also add pool "swa" */
	const char *dtype, *mem_layout; /* kvl_layout_pool_format when dtype */
} spec;

/* base_spec's pool fingerprint, as kvlink 0.3 computed it. */
#define BASE_FP "97cb29a38577dbcc3b41632ed5ad3c32"

static spec base_spec(void)
{
	return (spec){.tag = "llama3-8b/bf16", .page_size = 16,
	              .shard = KVL_SHARD_SINGLE, .pool = "kv",
	              .policy = KVL_HIT_ALL_PAGES, .window = 0, .flags = 0,
	              .comp_k = "k", .pb_k = 256, .pb_v = 256,
	              .layers = {0, 1, 2, 3}, .n_layers = 4, .mem = arena,
	              .stride = 512, .pages = 8, .second_pool = 0};
}

/* Builds and finalizes the layout that `s` describes. */
static kvl_layout *build(const spec *s)
{
	kvl_layout *l = new_layout(s->tag, s->page_size, &s->shard);
	int p = add_pool(l, s->pool, s->policy, s->window, s->flags);
	if (s->dtype)
		ASSERT_RC(l, kvl_layout_pool_format(l, p, s->dtype,
		                                    s->mem_layout),
		          KVL_OK);
	uint8_t *m = s->mem;
	for (size_t i = 0; i < s->n_layers; i++) {
		add_buf(l, p, s->comp_k, s->layers[i],
		        hbuf(m, s->stride, s->pb_k, s->pages));
		m += s->stride * s->pages;
		if (s->pb_v) {
			add_buf(l, p, "v", s->layers[i],
			        hbuf(m, s->stride, s->pb_v, s->pages));
			m += s->stride * s->pages;
		}
	}
	if (s->second_pool) {
		int q = add_pool(l, "swa", KVL_HIT_TRAILING_PAGES, 2, 0);
		add_buf(l, q, "w", 1, hbuf(m, 64, 64, s->pages));
	}
	assert_true((size_t)(m - s->mem) + 64 * s->pages <= ARENA_BYTES);
	finalize(l);
	return l;
}

/* The 32-hex fingerprint of pool `pool` (-1: the layout) into out. */
static void fp_of(const kvl_layout *l, int pool, char out[33])
{
	memset(out, 'X', 33);
	assert_int_equal(kvl_layout_fingerprint(l, pool, out, 33), KVL_OK);
	assert_int_equal(strlen(out), 32);
	for (int i = 0; i < 32; i++)
		assert_non_null(strchr("0123456789abcdef", out[i]));
}

static kvl_hash some_hash(uint8_t seed)
{
	kvl_hash h;
	for (int i = 0; i < KVL_HASH_BYTES; i++)
		h.bytes[i] = (uint8_t)(seed * 31 + i * 7 + 1);
	return h;
}

/* ================================================================== create */

static void test_create_errors(void **state)
{
	(void)state;
	char err[256];
	/* A sentinel that failures must leave alone; never dereferenced. */
	kvl_layout *const sentinel = (kvl_layout *)(uintptr_t)0x1000;
	kvl_layout *l = sentinel;

	strcpy(err, "untouched");
	assert_int_equal(kvl_layout_create("m", 16, NULL, NULL, err,
	                                   sizeof err),
	                 KVL_EINVAL);
	ASSERT_CONTAINS(err, "out");

	static const char *bad_tags[] = {"a:b", "x y", "", "tab\there",
	                                 "semi;colon", "q?", "é"};
	for (size_t i = 0; i < sizeof bad_tags / sizeof *bad_tags; i++) {
		strcpy(err, "untouched");
		assert_int_equal(kvl_layout_create(bad_tags[i], 16, NULL, &l,
		                                   err, sizeof err),
		                 KVL_EINVAL);
		ASSERT_CONTAINS(err, "model_tag");
		assert_ptr_equal(l, sentinel);
	}
	strcpy(err, "untouched");
	assert_int_equal(kvl_layout_create(NULL, 16, NULL, &l, err, sizeof err),
	                 KVL_EINVAL);
	ASSERT_CONTAINS(err, "model_tag");

	char long_tag[KVL_NAME_MAX + 2];
	memset(long_tag, 'a', KVL_NAME_MAX + 1);
	long_tag[KVL_NAME_MAX + 1] = '\0';
	strcpy(err, "untouched");
	assert_int_equal(kvl_layout_create(long_tag, 16, NULL, &l, err,
	                                   sizeof err),
	                 KVL_EINVAL);
	ASSERT_CONTAINS(err, "model_tag");
	assert_ptr_equal(l, sentinel);

	strcpy(err, "untouched");
	assert_int_equal(kvl_layout_create("m", 0, NULL, &l, err, sizeof err),
	                 KVL_EINVAL);
	ASSERT_CONTAINS(err, "page_size");
	assert_ptr_equal(l, sentinel);

	const kvl_shard bad_shards[] = {
		{0, 0, 0, 1, 0, 1}, /* tp size 0 */
		{0, 1, 0, 0, 0, 1}, /* cp size 0 */
		{0, 1, 0, 1, 0, 0}, /* pp size 0 */
		{2, 2, 0, 1, 0, 1}, /* tp rank == size */
		{5, 2, 0, 1, 0, 1}, /* tp rank > size */
		{0, 1, 1, 1, 0, 1}, /* cp rank == size */
		{0, 1, 0, 1, 3, 2}, /* pp rank > size */
		{0, 0, 0, 0, 0, 0}, /* the all-zero struct */
	};
	for (size_t i = 0; i < sizeof bad_shards / sizeof *bad_shards; i++) {
		strcpy(err, "untouched");
		assert_int_equal(kvl_layout_create("m", 16, &bad_shards[i], &l,
		                                   err, sizeof err),
		                 KVL_EINVAL);
		ASSERT_CONTAINS(err, "shard");
		assert_ptr_equal(l, sentinel);
	}

	/* errbuf is optional, and a short one is truncated, terminated. */
	assert_int_equal(kvl_layout_create("a:b", 16, NULL, &l, NULL, 0),
	                 KVL_EINVAL);
	assert_int_equal(kvl_layout_create("a:b", 16, NULL, &l, err, 0),
	                 KVL_EINVAL);
	memset(err, 'Z', sizeof err);
	assert_int_equal(kvl_layout_create("a:b", 16, NULL, &l, err, 6),
	                 KVL_EINVAL);
	assert_int_equal(strlen(err), 5);
	assert_int_equal(err[6], 'Z');
	assert_ptr_equal(l, sentinel);
}

static void test_create_ok(void **state)
{
	(void)state;
	/* Every allowed character, and the longest tag. */
	kvl_layout *l = new_layout("Az09._+/-", 1, NULL);
	assert_int_equal(kvl_layout_page_size(l), 1);
	kvl_shard s = kvl_layout_shard(l);
	assert_int_equal(s.tp_rank, 0);
	assert_int_equal(s.tp_size, 1);
	assert_int_equal(s.cp_size, 1);
	assert_int_equal(s.pp_size, 1);
	ASSERT_CONTAINS(kvl_layout_errmsg(l), ""); /* fresh: empty */
	assert_string_equal(kvl_layout_errmsg(l), "");
	kvl_layout_free(l);

	char tag[KVL_NAME_MAX + 1];
	memset(tag, 'x', KVL_NAME_MAX);
	tag[KVL_NAME_MAX] = '\0';
	kvl_shard sh = {3, 4, 1, 2, 0, 8};
	l = new_layout(tag, 512, &sh);
	assert_int_equal(kvl_layout_page_size(l), 512);
	s = kvl_layout_shard(l);
	assert_int_equal(s.tp_rank, 3);
	assert_int_equal(s.tp_size, 4);
	assert_int_equal(s.cp_rank, 1);
	assert_int_equal(s.cp_size, 2);
	assert_int_equal(s.pp_rank, 0);
	assert_int_equal(s.pp_size, 8);
	kvl_layout_free(l);

	kvl_layout_free(NULL);
	assert_non_null(kvl_layout_errmsg(NULL));
	assert_int_equal(kvl_layout_page_size(NULL), 0);
}

/* ================================================================ add_pool */

static void test_add_pool_errors(void **state)
{
	(void)state;
	kvl_layout *l = new_layout("m", 16, NULL);
	int id = 42;

	static const char *bad_names[] = {"", "a:b", "x y", "a/b", "a+b",
	                                  "pool?"};
	for (size_t i = 0; i < sizeof bad_names / sizeof *bad_names; i++) {
		ASSERT_FAILS(l, kvl_layout_add_pool(l, bad_names[i],
		                                    KVL_HIT_ALL_PAGES, 0, 0, &id),
		             KVL_EINVAL, "name");
		assert_int_equal(id, 42);
	}
	ASSERT_FAILS(l, kvl_layout_add_pool(l, NULL, KVL_HIT_ALL_PAGES, 0, 0,
	                                    &id),
	             KVL_EINVAL, "name");
	char long_name[KVL_NAME_MAX + 2];
	memset(long_name, 'p', KVL_NAME_MAX + 1);
	long_name[KVL_NAME_MAX + 1] = '\0';
	ASSERT_FAILS(l, kvl_layout_add_pool(l, long_name, KVL_HIT_ALL_PAGES, 0,
	                                    0, &id),
	             KVL_EINVAL, "name");
	long_name[KVL_NAME_MAX] = '\0'; /* the longest allowed */
	assert_int_equal(add_pool(l, long_name, KVL_HIT_ALL_PAGES, 0, 0), 0);

	assert_int_equal(add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0), 1);
	ASSERT_FAILS(l, kvl_layout_add_pool(l, "kv", KVL_HIT_TRAILING_PAGES, 1,
	                                    0, &id),
	             KVL_EEXIST, "kv");
	ASSERT_CONTAINS(kvl_layout_errmsg(l), "exists");
	assert_int_equal(id, 42);

	ASSERT_FAILS(l, kvl_layout_add_pool(l, "p7", (kvl_hit_policy)7, 0, 0,
	                                    &id),
	             KVL_EINVAL, "policy");
	ASSERT_CONTAINS(kvl_layout_errmsg(l), "p7");
	ASSERT_FAILS(l, kvl_layout_add_pool(l, "pm", (kvl_hit_policy)-1, 0, 0,
	                                    &id),
	             KVL_EINVAL, "policy");
	ASSERT_FAILS(l, kvl_layout_add_pool(l, "swa", KVL_HIT_TRAILING_PAGES, 0,
	                                    0, &id),
	             KVL_EINVAL, "window");
	ASSERT_CONTAINS(kvl_layout_errmsg(l), "swa");
	ASSERT_FAILS(l, kvl_layout_add_pool(l, "full", KVL_HIT_ALL_PAGES, 3, 0,
	                                    &id),
	             KVL_EINVAL, "window");
	ASSERT_CONTAINS(kvl_layout_errmsg(l), "full");
	ASSERT_FAILS(l, kvl_layout_add_pool(l, "fl", KVL_HIT_ALL_PAGES, 0, 0x2,
	                                    &id),
	             KVL_EINVAL, "flag");
	ASSERT_FAILS(l, kvl_layout_add_pool(l, "fl", KVL_HIT_ALL_PAGES, 0,
	                                    0x80000001u, &id),
	             KVL_EINVAL, "flag");
	assert_int_equal(id, 42);
	assert_int_equal(kvl_layout_add_pool(NULL, "x", KVL_HIT_ALL_PAGES, 0, 0,
	                                     &id),
	                 KVL_EINVAL);

	/* Failures added nothing: the next pool gets id 2; pool_out may be
	 * NULL. */
	assert_int_equal(add_pool(l, "swa", KVL_HIT_TRAILING_PAGES, 4,
	                          KVL_POOL_REPLICATED_TP),
	                 2);
	assert_int_equal(kvl_layout_add_pool(l, "nullout", KVL_HIT_ALL_PAGES, 0,
	                                     0, NULL),
	                 KVL_OK);
	for (int p = 0; p < 4; p++)
		add_buf(l, p, "c", 0, hbuf(arena + p * 4096, 64, 64, 4));
	finalize(l);
	int n = 0;
	assert_int_equal(kvl_layout_pool_count(l, &n), KVL_OK);
	assert_int_equal(n, 4);
	ASSERT_FAILS(l, kvl_layout_add_pool(l, "late", KVL_HIT_ALL_PAGES, 0, 0,
	                                    &id),
	             KVL_ESTATE, "finalized");
	kvl_layout_free(l);
}

/* ============================================================== add_buffer */

static void test_add_buffer_errors(void **state)
{
	(void)state;
	kvl_layout *l = new_layout("m", 16, NULL);
	int p = add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0);
	kvl_buffer b = hbuf(arena, 512, 256, 8);

	ASSERT_FAILS(l, kvl_layout_add_buffer(l, 5, "k", 0, &b), KVL_ENOTFOUND,
	             "5");
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, -1, "k", 0, &b), KVL_ENOTFOUND,
	             "pool");
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "k:1", 0, &b), KVL_EINVAL,
	             "component");
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "", 0, &b), KVL_EINVAL,
	             "component");
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, NULL, 0, &b), KVL_EINVAL,
	             "component");
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "k", 0, NULL), KVL_EINVAL,
	             "NULL");
	assert_int_equal(kvl_layout_add_buffer(NULL, p, "k", 0, &b),
	                 KVL_EINVAL);

	kvl_buffer x = b;
	x.base = NULL;
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "k", 0, &x), KVL_EINVAL,
	             "base");
	x = b;
	x.page_bytes = 0;
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "k", 0, &x), KVL_EINVAL,
	             "page_bytes");
	x = b;
	x.num_pages = 0;
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "k", 0, &x), KVL_EINVAL,
	             "num_pages");
	x = b;
	x.page_stride = 0;
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "k", 0, &x), KVL_EINVAL,
	             "page_stride");
	/* Misaligned base or stride: each offset that is not a multiple of
	 * KVL_LAYOUT_ALIGN. */
	for (size_t off = 1; off < KVL_LAYOUT_ALIGN; off++) {
		x = b;
		x.base = arena + off;
		ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "k", 0, &x),
		             KVL_EINVAL, "multiple");
		x = b;
		x.page_stride = 512 + off;
		ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "k", 0, &x),
		             KVL_EINVAL, "multiple");
	}
	x = b;
	x.page_bytes = 513;
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "k", 0, &x), KVL_EINVAL,
	             "page_bytes");
	x = b;
	x.mem = (kvl_mem_kind)5;
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "k", 0, &x), KVL_EINVAL,
	             "memory");
	/* KVL_ALL_LAYERS is not a layer (it once overflowed the layer index
	 * that finalize builds). */
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "k", KVL_ALL_LAYERS, &b),
	             KVL_EINVAL, "KVL_ALL_LAYERS");
	x = b;
	x.num_pages = SIZE_MAX / 8;
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "k", 0, &x), KVL_EINVAL,
	             "overflow");

	/* page_bytes == page_stride and an unaligned page_bytes are fine. */
	add_buf(l, p, "k", 0, b);
	x = hbuf(arena + 8 * 512, 512, 512, 8);
	add_buf(l, p, "k", 1, x);
	x = hbuf(arena + 16 * 512, 512, 13, 8);
	add_buf(l, p, "v", 0, x);

	x = hbuf(arena + 32 * 512, 512, 256, 9);
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "v", 1, &x), KVL_EINVAL,
	             "num_pages");
	ASSERT_CONTAINS(kvl_layout_errmsg(l), "9");
	x = hbuf(arena + 32 * 512, 512, 256, 8);
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "k", 1, &x), KVL_EEXIST,
	             "already");
	ASSERT_CONTAINS(kvl_layout_errmsg(l), "layer 1");
	add_buf(l, p, "v", 1, x);

	/* Another pool may use its own num_pages. */
	int q = add_pool(l, "swa", KVL_HIT_TRAILING_PAGES, 1, 0);
	add_buf(l, q, "k", 0, hbuf(arena + 64 * 512, 64, 64, 3));

	finalize(l);
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "v", 2, &x), KVL_ESTATE,
	             "finalized");
	/* None of the rejected buffers made it in. */
	size_t size = 0, hdr = 0, pages = 0;
	assert_int_equal(kvl_layout_object_size(l, p, &size, &hdr), KVL_OK);
	assert_int_equal(size, hdr + 256 + 13 + 512 + 256);
	assert_int_equal(kvl_layout_pool_pages(l, p, &pages), KVL_OK);
	assert_int_equal(pages, 8);
	assert_int_equal(kvl_layout_pool_pages(l, q, &pages), KVL_OK);
	assert_int_equal(pages, 3);
	kvl_layout_free(l);
}

/* ================================================================ finalize */

static void test_finalize_errors(void **state)
{
	(void)state;
	kvl_layout *l = new_layout("m", 16, NULL);
	ASSERT_FAILS(l, kvl_layout_finalize(l), KVL_EINVAL, "no pools");
	assert_int_equal(kvl_layout_finalize(NULL), KVL_EINVAL);

	int p = add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0);
	int q = add_pool(l, "swa", KVL_HIT_TRAILING_PAGES, 2, 0);
	add_buf(l, p, "k", 0, hbuf(arena, 512, 256, 8));
	ASSERT_FAILS(l, kvl_layout_finalize(l), KVL_EINVAL, "swa");
	ASSERT_CONTAINS(kvl_layout_errmsg(l), "no buffers");

	/* Layer 1 has k but not v. */
	add_buf(l, p, "v", 0, hbuf(arena + 4096, 512, 256, 8));
	add_buf(l, p, "k", 1, hbuf(arena + 8192, 512, 256, 8));
	add_buf(l, q, "w", 1, hbuf(arena + 16384, 64, 64, 4));
	ASSERT_FAILS(l, kvl_layout_finalize(l), KVL_EINVAL, "layer 1");
	ASSERT_CONTAINS(kvl_layout_errmsg(l), "'v'");
	ASSERT_CONTAINS(kvl_layout_errmsg(l), "kv");
	/* Still unfinalized: queries refuse, more buffers are accepted. */
	int n;
	assert_int_equal(kvl_layout_pool_count(l, &n), KVL_ESTATE);

	/* Layer 2 has v but not k: the buffer count is even again. */
	add_buf(l, p, "v", 2, hbuf(arena + 12288, 512, 256, 8));
	ASSERT_FAILS(l, kvl_layout_finalize(l), KVL_EINVAL, "no buffer for");
	add_buf(l, p, "v", 1, hbuf(arena + 20480, 512, 256, 8));
	ASSERT_FAILS(l, kvl_layout_finalize(l), KVL_EINVAL, "layer 2");
	ASSERT_CONTAINS(kvl_layout_errmsg(l), "'k'");
	add_buf(l, p, "k", 2, hbuf(arena + 24576, 512, 256, 8));

	/* Now complete: it finalizes, once. */
	finalize(l);
	assert_int_equal(kvl_layout_pool_count(l, &n), KVL_OK);
	assert_int_equal(n, 2);
	size_t cnt = 0;
	uint32_t layers[4];
	assert_int_equal(kvl_layout_pool_layers(l, p, layers, 4, &cnt), KVL_OK);
	assert_int_equal(cnt, 3);
	ASSERT_FAILS(l, kvl_layout_finalize(l), KVL_ESTATE, "already");
	kvl_layout_free(l);
}

/* Finalizes a one- or two-pool layout with the two given buffers and returns
 * the result (the message is left in *msg). */
static int try_pair(kvl_buffer a, kvl_buffer b, int same_pool, char *msg,
                    size_t msglen)
{
	kvl_layout *l = new_layout("m", 16, NULL);
	int p = add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0);
	int q = same_pool ? p : add_pool(l, "swa", KVL_HIT_TRAILING_PAGES, 1, 0);
	add_buf(l, p, "k", 0, a);
	add_buf(l, q, same_pool ? "v" : "w", 0, b);
	int rc = kvl_layout_finalize(l);
	snprintf(msg, msglen, "%s", kvl_layout_errmsg(l));
	kvl_layout_free(l);
	return rc;
}

static void test_overlap(void **state)
{
	(void)state;
	char msg[512];
	const size_t pb = 256, np = 8;
	uint8_t *r = arena + 4096;

	/* Interleaved K/V in one allocation, one stride: not an overlap, in
	 * either order of addition. */
	assert_int_equal(try_pair(hbuf(r, 2 * pb, pb, np),
	                          hbuf(r + pb, 2 * pb, pb, np), 1, msg,
	                          sizeof msg),
	                 KVL_OK);
	assert_int_equal(try_pair(hbuf(r + pb, 2 * pb, pb, np),
	                          hbuf(r, 2 * pb, pb, np), 1, msg, sizeof msg),
	                 KVL_OK);
	/* Three-way interleave with unequal parts, across pools. */
	assert_int_equal(try_pair(hbuf(r, 512, 128, np),
	                          hbuf(r + 128, 512, 384, np), 0, msg,
	                          sizeof msg),
	                 KVL_OK);
	/* Back to back: no shared byte. */
	assert_int_equal(try_pair(hbuf(r, pb, pb, np),
	                          hbuf(r + np * pb, pb, pb, np), 1, msg,
	                          sizeof msg),
	                 KVL_OK);
	assert_int_equal(try_pair(hbuf(r + np * pb, pb, pb, np),
	                          hbuf(r, pb, pb, np), 0, msg, sizeof msg),
	                 KVL_OK);

	/* V half a page into K's slots: overlap, named. */
	assert_int_equal(try_pair(hbuf(r, 2 * pb, pb, np),
	                          hbuf(r + pb / 2, 2 * pb, pb, np), 1, msg,
	                          sizeof msg),
	                 KVL_EINVAL);
	ASSERT_CONTAINS(msg, "overlap");
	ASSERT_CONTAINS(msg, "kv/k");
	ASSERT_CONTAINS(msg, "kv/v");
	/* ... and the other way round (V starts before K). */
	assert_int_equal(try_pair(hbuf(r + pb / 2, 2 * pb, pb, np),
	                          hbuf(r, 2 * pb, pb, np), 1, msg, sizeof msg),
	                 KVL_EINVAL);
	ASSERT_CONTAINS(msg, "overlap");
	/* One byte too long to fit the gap. */
	assert_int_equal(try_pair(hbuf(r, 2 * pb, pb + 8, np),
	                          hbuf(r + pb + 8, 2 * pb, pb - 7, np), 1, msg,
	                          sizeof msg),
	                 KVL_EINVAL);
	ASSERT_CONTAINS(msg, "overlap");
	/* The same buffer twice. */
	assert_int_equal(try_pair(hbuf(r, pb, pb, np), hbuf(r, pb, pb, np), 1,
	                          msg, sizeof msg),
	                 KVL_EINVAL);
	ASSERT_CONTAINS(msg, "overlap");
	/* The last slot of one runs into the first of the other. */
	assert_int_equal(try_pair(hbuf(r, pb, pb, np),
	                          hbuf(r + np * pb - 8, pb, pb, np), 1, msg,
	                          sizeof msg),
	                 KVL_EINVAL);
	ASSERT_CONTAINS(msg, "overlap");
	/* Across pools, different strides, shared bytes. */
	assert_int_equal(try_pair(hbuf(r, 2 * pb, pb, np),
	                          hbuf(r + 2 * pb + 64, 64, 64, 4), 0, msg,
	                          sizeof msg),
	                 KVL_EINVAL);
	ASSERT_CONTAINS(msg, "overlap");
	ASSERT_CONTAINS(msg, "kv/k");
	ASSERT_CONTAINS(msg, "swa/w");

	/* Host and device memory at the same numeric address do not overlap;
	 * two devices don't either; one device does. */
	kvl_buffer h = hbuf(r, pb, pb, np), d0 = h, d1 = h;
	d0.mem = d1.mem = KVL_MEM_CUDA;
	d1.device = 1;
	assert_int_equal(try_pair(h, d0, 0, msg, sizeof msg), KVL_OK);
	assert_int_equal(try_pair(d0, d1, 0, msg, sizeof msg), KVL_OK);
	assert_int_equal(try_pair(d1, d1, 0, msg, sizeof msg), KVL_EINVAL);
	ASSERT_CONTAINS(msg, "overlap");

	/* An overlap three layers in. */
	kvl_layout *l = new_layout("m", 16, NULL);
	int p = add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0);
	for (uint32_t layer = 0; layer < 4; layer++) {
		uint8_t *base = r + layer * 2 * np * pb;
		add_buf(l, p, "k", layer, hbuf(base, 2 * pb, pb, np));
		add_buf(l, p, "v", layer,
		        hbuf(base + (layer == 3 ? 8 : pb), 2 * pb, pb, np));
	}
	ASSERT_FAILS(l, kvl_layout_finalize(l), KVL_EINVAL, "overlap");
	ASSERT_CONTAINS(kvl_layout_errmsg(l), "layer 3");
	int n;
	assert_int_equal(kvl_layout_pool_count(l, &n), KVL_ESTATE);
	kvl_layout_free(l);
}

/* ================================================================= queries */

static void test_queries_before_finalize(void **state)
{
	(void)state;
	kvl_layout *l = new_layout("m", 16, NULL);
	int p = add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0);
	add_buf(l, p, "k", 0, hbuf(arena, 64, 64, 4));

	int n = 7;
	const char *name;
	uint32_t layers[4];
	size_t cnt, sz;
	kvl_iov iov[4];
	char hex[33];
	char key[KVL_KEY_MAX];
	kvl_hash h = some_hash(1);

	ASSERT_FAILS(l, kvl_layout_pool_count(l, &n), KVL_ESTATE, "finalized");
	assert_int_equal(n, 7);
	ASSERT_FAILS(l, kvl_layout_pool_id(l, "kv", &n), KVL_ESTATE,
	             "finalized");
	assert_int_equal(n, 7);
	ASSERT_FAILS(l, kvl_layout_pool_info(l, p, &name, NULL, NULL, NULL),
	             KVL_ESTATE, "finalized");
	ASSERT_FAILS(l, kvl_layout_pool_layers(l, p, layers, 4, &cnt),
	             KVL_ESTATE, "finalized");
	ASSERT_FAILS(l, kvl_layout_pool_pages(l, p, &cnt), KVL_ESTATE,
	             "finalized");
	ASSERT_FAILS(l, kvl_layout_object_size(l, p, &sz, NULL), KVL_ESTATE,
	             "finalized");
	ASSERT_FAILS(l, kvl_layout_layer_range(l, p, 0, &sz, &cnt), KVL_ESTATE,
	             "finalized");
	ASSERT_FAILS(l, kvl_layout_page_pieces(l, p, 0, 0, iov, 4, &cnt),
	             KVL_ESTATE, "finalized");
	ASSERT_FAILS(l, kvl_layout_fingerprint(l, p, hex, sizeof hex), KVL_ESTATE,
	             "finalized");
	ASSERT_FAILS(l, kvl_layout_fingerprint(l, -1, hex, sizeof hex), KVL_ESTATE,
	             "finalized");
	ASSERT_FAILS(l, kvl_layout_key(l, p, &h, key, sizeof key), KVL_ESTATE,
	             "finalized");
	kvl_layout_free(l);
}

/* Three pools:
 *   kv   ALL_PAGES, components v then k (v added first), sparse layers
 *        0, 4, 8; v 128 bytes, k 256 bytes, 6 slots, separate buffers.
 *   swa  TRAILING_PAGES(3), component w 64 bytes at layers 1 and 3.
 *   mla  ALL_PAGES, replicated, component c 96 bytes at layer 0. */
#define Q_SLOTS 6
#define Q_STRIDE 512
static uint8_t *q_base(int pool, int comp, uint32_t layer)
{
	return arena + ((size_t)(pool * 64 + comp * 16 + layer)) * Q_SLOTS *
	                       Q_STRIDE;
}

static kvl_layout *build_queries(void)
{
	kvl_layout *l = new_layout("q/bf16", 64, NULL);
	int kv = add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0);
	int swa = add_pool(l, "swa", KVL_HIT_TRAILING_PAGES, 3, 0);
	int mla = add_pool(l, "mla", KVL_HIT_ALL_PAGES, 0,
	                   KVL_POOL_REPLICATED_TP);
	assert_int_equal(kv, 0);
	assert_int_equal(swa, 1);
	assert_int_equal(mla, 2);
	/* Out of layer order on purpose. */
	add_buf(l, kv, "v", 4, hbuf(q_base(0, 0, 4), Q_STRIDE, 128, Q_SLOTS));
	add_buf(l, kv, "k", 8, hbuf(q_base(0, 1, 8), Q_STRIDE, 256, Q_SLOTS));
	add_buf(l, kv, "k", 0, hbuf(q_base(0, 1, 0), Q_STRIDE, 256, Q_SLOTS));
	add_buf(l, kv, "v", 0, hbuf(q_base(0, 0, 0), Q_STRIDE, 128, Q_SLOTS));
	add_buf(l, kv, "k", 4, hbuf(q_base(0, 1, 4), Q_STRIDE, 256, Q_SLOTS));
	add_buf(l, kv, "v", 8, hbuf(q_base(0, 0, 8), Q_STRIDE, 128, Q_SLOTS));
	add_buf(l, swa, "w", 3, hbuf(q_base(1, 0, 3), Q_STRIDE, 64, Q_SLOTS));
	add_buf(l, swa, "w", 1, hbuf(q_base(1, 0, 1), Q_STRIDE, 64, Q_SLOTS));
	add_buf(l, mla, "c", 0, hbuf(q_base(2, 0, 0), Q_STRIDE, 96, Q_SLOTS));
	finalize(l);
	return l;
}

static void test_pool_queries(void **state)
{
	(void)state;
	kvl_layout *l = build_queries();
	int n = -1;
	assert_int_equal(kvl_layout_pool_count(l, &n), KVL_OK);
	assert_int_equal(n, 3);
	assert_int_equal(kvl_layout_pool_count(l, NULL), KVL_EINVAL);
	assert_int_equal(kvl_layout_pool_count(NULL, &n), KVL_EINVAL);

	assert_int_equal(kvl_layout_pool_id(l, "kv", &n), KVL_OK);
	assert_int_equal(n, 0);
	assert_int_equal(kvl_layout_pool_id(l, "swa", &n), KVL_OK);
	assert_int_equal(n, 1);
	assert_int_equal(kvl_layout_pool_id(l, "mla", &n), KVL_OK);
	assert_int_equal(n, 2);
	n = 9;
	ASSERT_FAILS(l, kvl_layout_pool_id(l, "nope", &n), KVL_ENOTFOUND,
	             "nope");
	assert_int_equal(n, 9);
	ASSERT_FAILS(l, kvl_layout_pool_id(l, "", &n), KVL_ENOTFOUND, "''");
	assert_int_equal(kvl_layout_pool_id(l, NULL, &n), KVL_EINVAL);

	const char *name = NULL;
	kvl_hit_policy pol = (kvl_hit_policy)9;
	uint32_t window = 9, flags = 9;
	assert_int_equal(kvl_layout_pool_info(l, 1, &name, &pol, &window,
	                                      &flags),
	                 KVL_OK);
	assert_string_equal(name, "swa");
	assert_int_equal(pol, KVL_HIT_TRAILING_PAGES);
	assert_int_equal(window, 3);
	assert_int_equal(flags, 0);
	assert_int_equal(kvl_layout_pool_info(l, 2, &name, &pol, &window,
	                                      &flags),
	                 KVL_OK);
	assert_string_equal(name, "mla");
	assert_int_equal(pol, KVL_HIT_ALL_PAGES);
	assert_int_equal(window, 0);
	assert_int_equal(flags, KVL_POOL_REPLICATED_TP);
	assert_int_equal(kvl_layout_pool_info(l, 0, NULL, NULL, NULL, NULL),
	                 KVL_OK);
	ASSERT_FAILS(l, kvl_layout_pool_info(l, 3, &name, &pol, &window,
	                                     &flags),
	             KVL_ENOTFOUND, "3");
	ASSERT_FAILS(l, kvl_layout_pool_info(l, -1, &name, NULL, NULL, NULL),
	             KVL_ENOTFOUND, "-1");
	assert_string_equal(name, "mla");

	/* Sparse layers, ascending. */
	uint32_t layers[4] = {99, 99, 99, 99};
	size_t cnt = 0;
	assert_int_equal(kvl_layout_pool_layers(l, 0, layers, 4, &cnt), KVL_OK);
	assert_int_equal(cnt, 3);
	assert_int_equal(layers[0], 0);
	assert_int_equal(layers[1], 4);
	assert_int_equal(layers[2], 8);
	assert_int_equal(layers[3], 99);
	assert_int_equal(kvl_layout_pool_layers(l, 0, layers, 3, &cnt), KVL_OK);
	assert_int_equal(cnt, 3);
	cnt = 0;
	ASSERT_FAILS(l, kvl_layout_pool_layers(l, 0, layers, 2, &cnt),
	             KVL_ERANGE, "cap");
	assert_int_equal(cnt, 3);
	cnt = 0;
	assert_int_equal(kvl_layout_pool_layers(l, 0, NULL, 0, &cnt),
	                 KVL_ERANGE);
	assert_int_equal(cnt, 3);
	assert_int_equal(kvl_layout_pool_layers(l, 1, layers, 4, &cnt), KVL_OK);
	assert_int_equal(cnt, 2);
	assert_int_equal(layers[0], 1);
	assert_int_equal(layers[1], 3);
	assert_int_equal(kvl_layout_pool_layers(l, 0, layers, 4, NULL),
	                 KVL_EINVAL);
	assert_int_equal(kvl_layout_pool_layers(l, 7, layers, 4, &cnt),
	                 KVL_ENOTFOUND);

	size_t pages = 0;
	assert_int_equal(kvl_layout_pool_pages(l, 1, &pages), KVL_OK);
	assert_int_equal(pages, Q_SLOTS);
	assert_int_equal(kvl_layout_pool_pages(l, 3, &pages), KVL_ENOTFOUND);
	kvl_layout_free(l);
}

static void test_object_size_and_ranges(void **state)
{
	(void)state;
	kvl_layout *l = build_queries();
	size_t size = 0, hdr = 0;

	/* kv: 3 layers of v (128) + k (256). */
	assert_int_equal(kvl_layout_object_size(l, 0, &size, &hdr), KVL_OK);
	assert_int_equal(hdr, kvl__obj_header_size(3));
	assert_int_equal(hdr % 64, 0);
	assert_true(hdr >= 88 + 16 * 3 + 16);
	assert_int_equal(size, hdr + 3 * (128 + 256));
	assert_int_equal(kvl_layout_object_size(l, 0, NULL, NULL), KVL_OK);
	size_t only = 0;
	assert_int_equal(kvl_layout_object_size(l, 0, &only, NULL), KVL_OK);
	assert_int_equal(only, size);

	/* Layer-major, v before k (first added), header first. */
	size_t off = 0, len = 0;
	const uint32_t kv_layers[3] = {0, 4, 8};
	for (int i = 0; i < 3; i++) {
		assert_int_equal(kvl_layout_layer_range(l, 0, kv_layers[i], &off,
		                                        &len),
		                 KVL_OK);
		assert_int_equal(off, hdr + (size_t)i * 384);
		assert_int_equal(len, 384);
	}
	static const uint32_t missing[] = {1, 2, 3, 5, 7, 9, 100, UINT32_MAX};
	for (size_t i = 0; i < sizeof missing / sizeof *missing; i++) {
		char want[32];
		snprintf(want, sizeof want, "no layer %u", missing[i]);
		ASSERT_FAILS(l, kvl_layout_layer_range(l, 0, missing[i], &off,
		                                       &len),
		             KVL_ENOTFOUND, want);
	}
	ASSERT_FAILS(l, kvl_layout_layer_range(l, 5, 0, &off, &len),
	             KVL_ENOTFOUND, "5");

	/* swa: 2 layers of 64; mla: 1 layer of 96. */
	assert_int_equal(kvl_layout_object_size(l, 1, &size, &hdr), KVL_OK);
	assert_int_equal(hdr, kvl__obj_header_size(2));
	assert_int_equal(size, hdr + 2 * 64);
	assert_int_equal(kvl_layout_layer_range(l, 1, 1, &off, &len), KVL_OK);
	assert_int_equal(off, hdr);
	assert_int_equal(len, 64);
	assert_int_equal(kvl_layout_layer_range(l, 1, 3, &off, &len), KVL_OK);
	assert_int_equal(off, hdr + 64);
	assert_int_equal(len, 64);
	assert_int_equal(kvl_layout_layer_range(l, 1, 0, &off, &len),
	                 KVL_ENOTFOUND);
	assert_int_equal(kvl_layout_layer_range(l, 1, 2, &off, &len),
	                 KVL_ENOTFOUND);
	assert_int_equal(kvl_layout_object_size(l, 2, &size, &hdr), KVL_OK);
	assert_int_equal(size, hdr + 96);
	ASSERT_FAILS(l, kvl_layout_object_size(l, 3, &size, &hdr),
	             KVL_ENOTFOUND, "3");
	kvl_layout_free(l);
}

static void test_page_pieces(void **state)
{
	(void)state;
	kvl_layout *l = build_queries();
	kvl_iov iov[8];
	size_t n = 0;

	/* One layer: v then k of slot 2 of layer 4. */
	memset(iov, 0, sizeof iov);
	assert_int_equal(kvl_layout_page_pieces(l, 0, 2, 4, iov, 8, &n), KVL_OK);
	assert_int_equal(n, 2);
	assert_ptr_equal(iov[0].addr, q_base(0, 0, 4) + 2 * Q_STRIDE);
	assert_int_equal(iov[0].len, 128);
	assert_ptr_equal(iov[1].addr, q_base(0, 1, 4) + 2 * Q_STRIDE);
	assert_int_equal(iov[1].len, 256);
	assert_null(iov[2].addr);

	/* Every layer, for every slot: payload order, total = payload. */
	size_t size, hdr;
	assert_int_equal(kvl_layout_object_size(l, 0, &size, &hdr), KVL_OK);
	for (size_t slot = 0; slot < Q_SLOTS; slot++) {
		assert_int_equal(kvl_layout_page_pieces(l, 0, slot,
		                                        KVL_ALL_LAYERS, iov, 8,
		                                        &n),
		                 KVL_OK);
		assert_int_equal(n, 6);
		const uint32_t ly[3] = {0, 4, 8};
		size_t total = 0;
		for (int i = 0; i < 3; i++) {
			assert_ptr_equal(iov[2 * i].addr,
			                 q_base(0, 0, ly[i]) + slot * Q_STRIDE);
			assert_int_equal(iov[2 * i].len, 128);
			assert_ptr_equal(iov[2 * i + 1].addr,
			                 q_base(0, 1, ly[i]) + slot * Q_STRIDE);
			assert_int_equal(iov[2 * i + 1].len, 256);
			total += iov[2 * i].len + iov[2 * i + 1].len;
		}
		assert_int_equal(total, size - hdr);
	}

	/* Exactly enough room is enough; one less is ERANGE with n. */
	assert_int_equal(kvl_layout_page_pieces(l, 0, 0, KVL_ALL_LAYERS, iov, 6,
	                                        &n),
	                 KVL_OK);
	n = 0;
	ASSERT_FAILS(l, kvl_layout_page_pieces(l, 0, 0, KVL_ALL_LAYERS, iov, 5,
	                                       &n),
	             KVL_ERANGE, "cap");
	assert_int_equal(n, 6);
	n = 0;
	assert_int_equal(kvl_layout_page_pieces(l, 0, 0, KVL_ALL_LAYERS, NULL,
	                                        0, &n),
	                 KVL_ERANGE);
	assert_int_equal(n, 6);
	n = 0;
	assert_int_equal(kvl_layout_page_pieces(l, 0, 0, 8, iov, 1, &n),
	                 KVL_ERANGE);
	assert_int_equal(n, 2);

	/* Slots out of range, missing layers, unknown pools. */
	ASSERT_FAILS(l, kvl_layout_page_pieces(l, 0, Q_SLOTS, 0, iov, 8, &n),
	             KVL_ERANGE, "slot");
	ASSERT_FAILS(l, kvl_layout_page_pieces(l, 0, SIZE_MAX, KVL_ALL_LAYERS,
	                                       iov, 8, &n),
	             KVL_ERANGE, "slot");
	ASSERT_FAILS(l, kvl_layout_page_pieces(l, 0, 0, 1, iov, 8, &n),
	             KVL_ENOTFOUND, "layer 1");
	ASSERT_FAILS(l, kvl_layout_page_pieces(l, 9, 0, 0, iov, 8, &n),
	             KVL_ENOTFOUND, "9");
	assert_int_equal(kvl_layout_page_pieces(l, 0, 0, 0, iov, 8, NULL),
	                 KVL_EINVAL);
	assert_int_equal(kvl_layout_page_pieces(NULL, 0, 0, 0, iov, 8, &n),
	                 KVL_EINVAL);

	/* The last slot of swa layer 3. */
	assert_int_equal(kvl_layout_page_pieces(l, 1, Q_SLOTS - 1, 3, iov, 8,
	                                        &n),
	                 KVL_OK);
	assert_int_equal(n, 1);
	assert_ptr_equal(iov[0].addr,
	                 q_base(1, 0, 3) + (Q_SLOTS - 1) * Q_STRIDE);
	assert_int_equal(iov[0].len, 64);
	kvl_layout_free(l);
}

/* A pool with one far-away layer: ranges and pieces find it, and the layers
 * below and above it are absent. */
static void test_high_layer(void **state)
{
	(void)state;
	kvl_layout *l = new_layout("m", 16, NULL);
	int p = add_pool(l, "swa", KVL_HIT_TRAILING_PAGES, 1, 0);
	add_buf(l, p, "w", 100000, hbuf(arena, 64, 64, 4));
	add_buf(l, p, "w", 7, hbuf(arena + 256, 64, 64, 4));
	finalize(l);
	size_t off, len, hdr, n;
	assert_int_equal(kvl_layout_object_size(l, p, NULL, &hdr), KVL_OK);
	assert_int_equal(kvl_layout_layer_range(l, p, 100000, &off, &len),
	                 KVL_OK);
	assert_int_equal(off, hdr + 64);
	assert_int_equal(kvl_layout_layer_range(l, p, 7, &off, &len), KVL_OK);
	assert_int_equal(off, hdr);
	assert_int_equal(kvl_layout_layer_range(l, p, 99999, &off, &len),
	                 KVL_ENOTFOUND);
	assert_int_equal(kvl_layout_layer_range(l, p, 100001, &off, &len),
	                 KVL_ENOTFOUND);
	kvl_iov iov[2];
	assert_int_equal(kvl_layout_page_pieces(l, p, 3, 100000, iov, 2, &n),
	                 KVL_OK);
	assert_int_equal(n, 1);
	assert_ptr_equal(iov[0].addr, arena + 3 * 64);
	uint32_t layers[2];
	assert_int_equal(kvl_layout_pool_layers(l, p, layers, 2, &n), KVL_OK);
	assert_int_equal(layers[0], 7);
	assert_int_equal(layers[1], 100000);
	kvl_layout_free(l);
}

/* Layer numbers are bounded by KVL_MAX_LAYER (finalize indexes a pool's
 * layers by number: 6e8 once asked for a 2.4 GB index), and a buffer's
 * address range may not wrap past the end of the address space. */
static void test_layer_limit_and_wrap(void **state)
{
	(void)state;
	kvl_layout *l = new_layout("m", 16, NULL);
	int p = add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0);
	kvl_buffer b = hbuf(arena, 64, 64, 4);
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "k", KVL_MAX_LAYER + 1u,
	                                      &b),
	             KVL_EINVAL, "KVL_MAX_LAYER");
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "k", 600000000u, &b),
	             KVL_EINVAL, "600000000");
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "k", UINT32_MAX - 1, &b),
	             KVL_EINVAL, "KVL_MAX_LAYER");
	add_buf(l, p, "k", KVL_MAX_LAYER, b);

	/* Ends 8 bytes below 2^64: fine. 8 bytes higher it would end at 2^64,
	 * which no pointer holds; a stride that carries it past 2^64 wraps:
	 * refused. */
	uintptr_t top = UINTPTR_MAX - 4 * 64 - 7;
	kvl_buffer e = hbuf((void *)top, 64, 64, 4);
	add_buf(l, p, "k", 1, e);
	e.base = (void *)(top + 8);
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "k", 2, &e), KVL_EINVAL,
	             "wraps");
	kvl_buffer w = hbuf(arena, (size_t)1 << 61, 64, 4);
	w.base = (void *)((uintptr_t)3 << 62);
	ASSERT_FAILS(l, kvl_layout_add_buffer(l, p, "k", 2, &w), KVL_EINVAL,
	             "wraps");
	kvl_layout_free(l);

	/* The highest layer finalizes (its index is bounded). */
	l = new_layout("m", 16, NULL);
	p = add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0);
	add_buf(l, p, "k", KVL_MAX_LAYER, hbuf(arena, 64, 64, 4));
	finalize(l);
	size_t off, len;
	assert_int_equal(kvl_layout_layer_range(l, p, KVL_MAX_LAYER, &off,
	                                        &len),
	                 KVL_OK);
	kvl_layout_free(l);
}

/* Every failure of kvl_layout_key and kvl_layout_page_pieces on a layout
 * leaves a message that says why. */
static void test_query_messages(void **state)
{
	(void)state;
	kvl_layout *l = new_layout("m", 16, NULL);
	int p = add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0);
	add_buf(l, p, "k", 0, hbuf(arena, 64, 64, 4));
	kvl_hash h = {{0}};
	char key[KVL_KEY_MAX];
	kvl_iov iov[2];
	size_t n;
	ASSERT_FAILS(l, kvl_layout_key(l, p, &h, key, sizeof key), KVL_ESTATE,
	             "not finalized");
	ASSERT_FAILS(l, kvl_layout_page_pieces(l, p, 0, 0, iov, 2, &n),
	             KVL_ESTATE, "not finalized");
	finalize(l);
	ASSERT_FAILS(l, kvl_layout_key(l, 7, &h, key, sizeof key),
	             KVL_ENOTFOUND, "pool id 7");
	ASSERT_FAILS(l, kvl_layout_key(l, p, NULL, key, sizeof key),
	             KVL_EINVAL, "NULL");
	ASSERT_FAILS(l, kvl_layout_key(l, p, &h, NULL, sizeof key),
	             KVL_EINVAL, "NULL");
	ASSERT_FAILS(l, kvl_layout_key(l, p, &h, key, 10), KVL_ERANGE,
	             "buflen 10");
	ASSERT_FAILS(l, kvl_layout_page_pieces(l, 7, 0, 0, iov, 2, &n),
	             KVL_ENOTFOUND, "pool id 7");
	ASSERT_FAILS(l, kvl_layout_page_pieces(l, p, 0, 0, iov, 2, NULL),
	             KVL_EINVAL, "n_out");
	ASSERT_FAILS(l, kvl_layout_page_pieces(l, p, 0, 0, NULL, 2, &n),
	             KVL_EINVAL, "pieces");
	ASSERT_FAILS(l, kvl_layout_page_pieces(l, p, 9, 0, iov, 2, &n),
	             KVL_ERANGE, "slot 9");
	ASSERT_FAILS(l, kvl_layout_page_pieces(l, p, 0, 5, iov, 2, &n),
	             KVL_ENOTFOUND, "layer 5");
	ASSERT_FAILS(l, kvl_layout_page_pieces(l, p, 0, 0, iov, 0, &n),
	             KVL_ERANGE, "cap 0");
	kvl_layout_free(l);
}

/* ============================================================ fingerprints */

/* Asserts that specs a and b (or the base spec and its variant v) give
 * different fingerprints, the pool's and the whole layout's. */
static void expect_fp_pair_differs(const spec *a, const spec *b,
                                   const char *what)
{
	kvl_layout *la = build(a), *lb = build(b);
	char fa[33], fb[33], wa[33], wb[33];
	fp_of(la, 0, fa);
	fp_of(lb, 0, fb);
	fp_of(la, -1, wa);
	fp_of(lb, -1, wb);
	if (!strcmp(fa, fb) || !strcmp(wa, wb))
		print_error("fingerprint ignores %s\n", what);
	assert_string_not_equal(fa, fb);
	assert_string_not_equal(wa, wb);
	kvl_layout_free(la);
	kvl_layout_free(lb);
}

static void expect_fp_differs(const spec *v, const char *what)
{
	spec b = base_spec();
	expect_fp_pair_differs(&b, v, what);
}

static void test_fingerprint_stable(void **state)
{
	(void)state;
	spec a = base_spec(), b = base_spec();
	/* Other addresses, strides and slot counts: the same pages. */
	b.mem = arena2;
	b.stride = 1024;
	b.pages = 3;
	kvl_layout *la = build(&a), *lb = build(&b), *la2 = build(&a);
	char fa[33], fb[33], fa2[33], wa[33], wb[33];
	fp_of(la, 0, fa);
	fp_of(lb, 0, fb);
	fp_of(la2, 0, fa2);
	assert_string_equal(fa, fb);
	assert_string_equal(fa, fa2);
	fp_of(la, -1, wa);
	fp_of(lb, -1, wb);
	assert_string_equal(wa, wb);
	/* The layout's and the pool's fingerprints are different things. */
	assert_string_not_equal(wa, fa);

	/* Argument errors. */
	char hex[40];
	memset(hex, 'Z', sizeof hex);
	ASSERT_FAILS(la, kvl_layout_fingerprint(la, 1, hex, sizeof hex), KVL_ENOTFOUND,
	             "1");
	ASSERT_FAILS(la, kvl_layout_fingerprint(la, -2, hex, sizeof hex), KVL_ENOTFOUND,
	             "-2");
	assert_int_equal(hex[0], 'Z');
	assert_int_equal(kvl_layout_fingerprint(la, 0, NULL, 33), KVL_EINVAL);
	assert_int_equal(kvl_layout_fingerprint(NULL, 0, hex, sizeof hex), KVL_EINVAL);
	/* Exactly 33 bytes written. */
	assert_int_equal(kvl_layout_fingerprint(la, 0, hex, sizeof hex), KVL_OK);
	assert_int_equal(hex[32], '\0');
	assert_int_equal(hex[33], 'Z');
	kvl_layout_free(la);
	kvl_layout_free(lb);
	kvl_layout_free(la2);
}

static void test_fingerprint_covers(void **state)
{
	(void)state;
	spec v;

	v = base_spec();
	v.tag = "llama3-8b/fp8";
	expect_fp_differs(&v, "the model tag");
	v = base_spec();
	v.page_size = 32;
	expect_fp_differs(&v, "the page size");
	v = base_spec();
	v.shard.tp_size = 2;
	expect_fp_differs(&v, "tp_size");
	v = base_spec();
	v.shard.cp_size = 2;
	expect_fp_differs(&v, "cp_size");
	v = base_spec();
	v.shard.pp_size = 4;
	expect_fp_differs(&v, "pp_size");
	v = base_spec();
	v.pool = "kv2";
	expect_fp_differs(&v, "the pool name");
	v = base_spec();
	v.policy = KVL_HIT_TRAILING_PAGES;
	v.window = 1;
	expect_fp_differs(&v, "the hit policy");
	spec w2 = base_spec();
	w2.policy = KVL_HIT_TRAILING_PAGES;
	w2.window = 2;
	expect_fp_pair_differs(&v, &w2, "the window");
	v = base_spec();
	v.flags = KVL_POOL_REPLICATED_TP;
	expect_fp_differs(&v, "the replication flag");
	v = base_spec();
	v.pb_k = 248;
	expect_fp_differs(&v, "a component's page_bytes");
	v = base_spec();
	v.pb_v = 264;
	expect_fp_differs(&v, "the second component's page_bytes");
	v = base_spec();
	v.pb_v = 0;
	v.pb_k = 512;
	expect_fp_differs(&v, "the component count");
	v = base_spec();
	v.comp_k = "kk";
	expect_fp_differs(&v, "a component name");
	v = base_spec();
	v.layers[3] = 4;
	expect_fp_differs(&v, "the layer set");
	v = base_spec();
	v.n_layers = 3;
	expect_fp_differs(&v, "the layer count");
	v = base_spec();
	v.layers[0] = 1;
	v.layers[1] = 2;
	v.layers[2] = 3;
	v.layers[3] = 4;
	expect_fp_differs(&v, "shifted layers");
	/* Moving bytes between k and v (same total) is a different shape. */
	v = base_spec();
	v.pb_k = 128;
	v.pb_v = 384;
	expect_fp_differs(&v, "the split between components");
}

/* kvl_layout_pool_format: the dtype and the memory layout are in the
 * fingerprint; a layout that declares none keeps the fingerprint of the
 * versions before it (so its stored objects keep their keys). */
static void test_fingerprint_format(void **state)
{
	(void)state;
	spec b = base_spec();
	kvl_layout *lb = build(&b);
	char fb[33];
	fp_of(lb, 0, fb);
	/* The fingerprint kvlink 0.3 gave this pool. */
	assert_string_equal(fb, BASE_FP);
	kvl_layout_free(lb);

	spec bf = base_spec(), f16 = base_spec(), nhd = base_spec(),
	     hnd = base_spec();
	bf.dtype = "bfloat16";
	f16.dtype = "float16";
	nhd.dtype = hnd.dtype = "bfloat16";
	nhd.mem_layout = "NHD";
	hnd.mem_layout = "HND";
	expect_fp_differs(&bf, "a declared dtype");
	expect_fp_pair_differs(&bf, &f16, "the dtype");
	expect_fp_pair_differs(&nhd, &hnd, "the memory layout");
	expect_fp_pair_differs(&bf, &nhd, "a declared memory layout");
	/* "" and NULL both mean one order only. */
	spec empty = base_spec();
	empty.dtype = "bfloat16";
	empty.mem_layout = "";
	kvl_layout *l1 = build(&bf), *l2 = build(&empty);
	char f1[33], f2[33];
	fp_of(l1, 0, f1);
	fp_of(l2, 0, f2);
	assert_string_equal(f1, f2);
	kvl_layout_free(l1);
	kvl_layout_free(l2);

	/* Errors. */
	kvl_layout *l = new_layout("m", 16, NULL);
	int p = add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0);
	ASSERT_FAILS(l, kvl_layout_pool_format(l, p, NULL, NULL), KVL_EINVAL,
	             "dtype");
	ASSERT_FAILS(l, kvl_layout_pool_format(l, p, "", NULL), KVL_EINVAL,
	             "dtype");
	ASSERT_FAILS(l, kvl_layout_pool_format(l, p, "bf 16", NULL),
	             KVL_EINVAL, "dtype");
	ASSERT_FAILS(l, kvl_layout_pool_format(l, p, "bf16", "N/HD"),
	             KVL_EINVAL, "memory_layout");
	ASSERT_FAILS(l, kvl_layout_pool_format(l, p + 1, "bf16", NULL),
	             KVL_ENOTFOUND, "unknown pool");
	ASSERT_FAILS(l, kvl_layout_pool_format(l, -1, "bf16", NULL),
	             KVL_ENOTFOUND, "unknown pool");
	assert_int_equal(kvl_layout_pool_format(NULL, 0, "bf16", NULL),
	                 KVL_EINVAL);
	add_buf(l, p, "k", 0, hbuf(arena, 64, 64, 4));
	finalize(l);
	ASSERT_FAILS(l, kvl_layout_pool_format(l, p, "bf16", NULL), KVL_ESTATE,
	             "finalized");
	kvl_layout_free(l);
}

/* kvl_layout_add_shape: a layout of sizes only has the fingerprints and
 * keys of the same layout with memory; it cannot be mixed with memory, and
 * calls that need memory refuse it. */
static void test_shapes(void **state)
{
	(void)state;
	spec b = base_spec();
	kvl_layout *mem = build(&b);
	kvl_layout *l = new_layout(b.tag, b.page_size, &b.shard);
	int p = add_pool(l, b.pool, b.policy, b.window, b.flags);
	for (size_t i = 0; i < b.n_layers; i++) {
		ASSERT_RC(l, kvl_layout_add_shape(l, p, "k", b.layers[i], b.pb_k),
		          KVL_OK);
		ASSERT_RC(l, kvl_layout_add_shape(l, p, "v", b.layers[i], b.pb_v),
		          KVL_OK);
	}
	finalize(l);
	char f1[33], f2[33];
	fp_of(mem, 0, f1);
	fp_of(l, 0, f2);
	assert_string_equal(f1, f2);
	fp_of(mem, -1, f1);
	fp_of(l, -1, f2);
	assert_string_equal(f1, f2);
	kvl_hash h = some_hash(5);
	char k1[KVL_KEY_MAX], k2[KVL_KEY_MAX];
	assert_int_equal(kvl_layout_key(mem, 0, &h, k1, sizeof k1), KVL_OK);
	assert_int_equal(kvl_layout_key(l, 0, &h, k2, sizeof k2), KVL_OK);
	assert_string_equal(k1, k2);
	size_t size1, size2;
	assert_int_equal(kvl_layout_object_size(mem, 0, &size1, NULL), KVL_OK);
	assert_int_equal(kvl_layout_object_size(l, 0, &size2, NULL), KVL_OK);
	assert_int_equal(size1, size2);
	kvl_iov pieces[16];
	size_t n;
	ASSERT_FAILS(l, kvl_layout_page_pieces(l, 0, 0, KVL_ALL_LAYERS, pieces,
	                                       16, &n),
	             KVL_EINVAL, "sizes only");
	kvl_layout_free(l);
	kvl_layout_free(mem);

	/* Errors. */
	l = new_layout("m", 16, NULL);
	p = add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0);
	ASSERT_FAILS(l, kvl_layout_add_shape(l, p, "k", 0, 0), KVL_EINVAL,
	             "page_bytes is 0");
	ASSERT_FAILS(l, kvl_layout_add_shape(l, p + 1, "k", 0, 64),
	             KVL_ENOTFOUND, "unknown pool");
	ASSERT_FAILS(l, kvl_layout_add_shape(l, p, "k:x", 0, 64), KVL_EINVAL,
	             "component name");
	ASSERT_FAILS(l, kvl_layout_add_shape(l, p, "k", KVL_ALL_LAYERS, 64),
	             KVL_EINVAL, "KVL_ALL_LAYERS");
	ASSERT_RC(l, kvl_layout_add_shape(l, p, "k", 0, 64), KVL_OK);
	ASSERT_FAILS(l, kvl_layout_add_shape(l, p, "k", 0, 64), KVL_EEXIST,
	             "already described");
	assert_int_equal(kvl_layout_add_shape(NULL, 0, "k", 0, 64), KVL_EINVAL);
	/* Sizes and memory in one layout. */
	add_buf(l, p, "k", 1, hbuf(arena, 64, 64, 1));
	ASSERT_FAILS(l, kvl_layout_finalize(l), KVL_EINVAL,
	             "a layout is one or the other");
	kvl_layout_free(l);
	l = new_layout("m", 16, NULL);
	p = add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0);
	ASSERT_RC(l, kvl_layout_add_shape(l, p, "k", 0, 64), KVL_OK);
	finalize(l);
	ASSERT_FAILS(l, kvl_layout_add_shape(l, p, "k", 1, 64), KVL_ESTATE,
	             "finalized");
	kvl_layout_free(l);
}

static void test_fingerprint_ranks_and_pools(void **state)
{
	(void)state;
	/* Rank indices are not in the fingerprint, but they are in the key. */
	spec r0 = base_spec(), r1 = base_spec();
	r0.shard = (kvl_shard){0, 2, 0, 1, 0, 1};
	r1.shard = (kvl_shard){1, 2, 0, 1, 0, 1};
	r1.mem = arena2;
	kvl_layout *l0 = build(&r0), *l1 = build(&r1);
	char f0[33], f1[33];
	fp_of(l0, 0, f0);
	fp_of(l1, 0, f1);
	assert_string_equal(f0, f1);
	fp_of(l0, -1, f0);
	fp_of(l1, -1, f1);
	assert_string_equal(f0, f1);
	kvl_hash h = some_hash(3);
	char k0[KVL_KEY_MAX], k1[KVL_KEY_MAX];
	assert_int_equal(kvl_layout_key(l0, 0, &h, k0, sizeof k0), KVL_OK);
	assert_int_equal(kvl_layout_key(l1, 0, &h, k1, sizeof k1), KVL_OK);
	assert_string_not_equal(k0, k1);
	ASSERT_CONTAINS(k0, ":tp0_cp0_pp0");
	ASSERT_CONTAINS(k1, ":tp1_cp0_pp0");
	kvl_layout_free(l0);
	kvl_layout_free(l1);

	/* Same for cp and pp ranks. */
	r0.shard = (kvl_shard){0, 1, 0, 2, 1, 3};
	r1.shard = (kvl_shard){0, 1, 1, 2, 2, 3};
	l0 = build(&r0);
	l1 = build(&r1);
	fp_of(l0, 0, f0);
	fp_of(l1, 0, f1);
	assert_string_equal(f0, f1);
	assert_int_equal(kvl_layout_key(l0, 0, &h, k0, sizeof k0), KVL_OK);
	assert_int_equal(kvl_layout_key(l1, 0, &h, k1, sizeof k1), KVL_OK);
	assert_string_not_equal(k0, k1);
	kvl_layout_free(l0);
	kvl_layout_free(l1);

	/* A second pool leaves the first pool's fingerprint (and keys) alone
	 * but changes the layout's. */
	spec one = base_spec(), two = base_spec();
	two.second_pool = 1;
	two.mem = arena2;
	kvl_layout *lo = build(&one), *lt = build(&two);
	fp_of(lo, 0, f0);
	fp_of(lt, 0, f1);
	assert_string_equal(f0, f1);
	assert_int_equal(kvl_layout_key(lo, 0, &h, k0, sizeof k0), KVL_OK);
	assert_int_equal(kvl_layout_key(lt, 0, &h, k1, sizeof k1), KVL_OK);
	assert_string_equal(k0, k1);
	fp_of(lo, -1, f0);
	fp_of(lt, -1, f1);
	assert_string_not_equal(f0, f1);
	char fs[33];
	fp_of(lt, 1, fs);
	assert_string_not_equal(fs, f1);
	fp_of(lt, 0, f1);
	assert_string_not_equal(fs, f1);
	kvl_layout_free(lo);
	kvl_layout_free(lt);
}

/* ==================================================================== keys */

static void test_key_format(void **state)
{
	(void)state;
	spec s = base_spec();
	s.shard = (kvl_shard){1, 2, 2, 3, 1, 4};
	kvl_layout *l = build(&s);
	kvl_hash h = some_hash(7);
	char fp[33], hhex[KVL_HASH_HEX_LEN + 1], want[KVL_KEY_MAX];
	char key[KVL_KEY_MAX];
	fp_of(l, 0, fp);
	kvl_hash_to_hex(&h, hhex, KVL_HASH_HEX_LEN + 1);
	assert_int_equal(strlen(hhex), KVL_HASH_HEX_LEN);
	/* Our own hex, so the test does not lean on hash.c alone. */
	for (int i = 0; i < KVL_HASH_BYTES; i++) {
		char two[3];
		snprintf(two, sizeof two, "%02x", h.bytes[i]);
		assert_memory_equal(hhex + 2 * i, two, 2);
	}
	snprintf(want, sizeof want, "kvl1:llama3-8b/bf16:%s:%s:kv:tp1_cp2_pp1",
	         fp, hhex);

	memset(key, 'Z', sizeof key);
	assert_int_equal(kvl_layout_key(l, 0, &h, key, sizeof key), KVL_OK);
	assert_string_equal(key, want);

	/* buflen: exactly strlen + 1 is enough; one less is ERANGE. */
	size_t need = strlen(want) + 1;
	memset(key, 'Z', sizeof key);
	assert_int_equal(kvl_layout_key(l, 0, &h, key, need), KVL_OK);
	assert_string_equal(key, want);
	memset(key, 'Z', sizeof key);
	ASSERT_FAILS(l, kvl_layout_key(l, 0, &h, key, need - 1), KVL_ERANGE,
	             "buflen");
	assert_int_equal(key[0], 'Z');
	assert_int_equal(kvl_layout_key(l, 0, &h, key, 0), KVL_ERANGE);

	/* Another page, another key; only the hash part differs. */
	kvl_hash h2 = some_hash(8);
	char key2[KVL_KEY_MAX];
	assert_int_equal(kvl_layout_key(l, 0, &h2, key2, sizeof key2), KVL_OK);
	assert_string_not_equal(key, key2);
	assert_int_equal(strlen(key2), strlen(want));

	ASSERT_FAILS(l, kvl_layout_key(l, 0, NULL, key, sizeof key), KVL_EINVAL,
	             "NULL");
	ASSERT_FAILS(l, kvl_layout_key(l, 0, &h, NULL, sizeof key), KVL_EINVAL,
	             "NULL");
	ASSERT_FAILS(l, kvl_layout_key(l, 1, &h, key, sizeof key),
	             KVL_ENOTFOUND, "1");
	assert_int_equal(kvl_layout_key(NULL, 0, &h, key, sizeof key),
	                 KVL_EINVAL);
	kvl_layout_free(l);

	/* A replicated pool leaves out the tp part. */
	s.flags = KVL_POOL_REPLICATED_TP;
	s.pool = "mla";
	l = build(&s);
	fp_of(l, 0, fp);
	snprintf(want, sizeof want, "kvl1:llama3-8b/bf16:%s:%s:mla:cp2_pp1",
	         fp, hhex);
	assert_int_equal(kvl_layout_key(l, 0, &h, key, sizeof key), KVL_OK);
	assert_string_equal(key, want);
	kvl_layout_free(l);

	/* The longest names and ranks still fit KVL_KEY_MAX. */
	char tag[KVL_NAME_MAX + 1], pool[KVL_NAME_MAX + 1];
	memset(tag, 't', KVL_NAME_MAX);
	tag[KVL_NAME_MAX] = '\0';
	memset(pool, 'p', KVL_NAME_MAX);
	pool[KVL_NAME_MAX] = '\0';
	s = base_spec();
	s.tag = tag;
	s.pool = pool;
	s.shard = (kvl_shard){UINT32_MAX - 1, UINT32_MAX, UINT32_MAX - 1,
	                      UINT32_MAX, UINT32_MAX - 1, UINT32_MAX};
	l = build(&s);
	fp_of(l, 0, fp);
	snprintf(want, sizeof want, "kvl1:%s:%s:%s:%s:tp%u_cp%u_pp%u", tag, fp,
	         hhex, pool, UINT32_MAX - 1, UINT32_MAX - 1, UINT32_MAX - 1);
	assert_true(strlen(want) < KVL_KEY_MAX);
	assert_int_equal(kvl_layout_key(l, 0, &h, key, KVL_KEY_MAX), KVL_OK);
	assert_string_equal(key, want);
	kvl_layout_free(l);
}

/* ========================================================= object headers */

static const uint8_t FP_A[KVL__FP_BYTES] = {1, 2, 3, 4, 5, 6, 7, 8,
                                            9, 10, 11, 12, 13, 14, 15, 16};

/* Recomputes the header checksum after a deliberate edit, so that the edit
 * is caught by the check of its own field. */
static void reseal(uint8_t *hdr, uint32_t n_layers)
{
	size_t body = 88 + 16 * (size_t)n_layers;
	kvl__checksum(hdr, body, KVL__CHECKSUM_SEED, hdr + body);
}

/* Layer i's made-up integrity field. */
static void field_of(uint32_t i, uint8_t *out)
{
	memset(out, (int)(0x11 * (i + 1)), KVL__OBJ_FIELD);
}

static void write_header(uint8_t *hdr, const kvl__obj_id *id)
{
	uint8_t fields[16 * KVL__OBJ_FIELD];
	for (uint32_t i = 0; i < id->n_layers; i++)
		field_of(i, fields + KVL__OBJ_FIELD * i);
	assert_int_equal(kvl__obj_header_write(hdr, id, fields, NULL), 0);
}

static void expect_corrupt(const uint8_t *hdr, size_t len,
                           const kvl__obj_id *id, const char *needle)
{
	const char *why = NULL;
	assert_int_equal(kvl__obj_header_check(hdr, len, id, NULL, &why),
	                 KVL_ECORRUPT);
	assert_non_null(why);
	assert_true(why[0] != '\0');
	if (needle)
		ASSERT_CONTAINS(why, needle);
	/* why is optional. */
	assert_int_equal(kvl__obj_header_check(hdr, len, id, NULL, NULL),
	                 KVL_ECORRUPT);
}

static void test_header_size(void **state)
{
	(void)state;
	for (uint32_t n = 0; n < 200; n++) {
		size_t s = kvl__obj_header_size(n);
		assert_int_equal(s % 64, 0);
		assert_true(s >= 88 + 16 * (size_t)n + 16);
		assert_true(s < 88 + 16 * (size_t)n + 16 + 64);
	}
	assert_int_equal(kvl__obj_header_size(0), 128);
	assert_int_equal(kvl__obj_header_size(1), 128);
	assert_int_equal(kvl__obj_header_size(2), 192);
	assert_int_equal(kvl__obj_header_size(5), 192);
	assert_int_equal(kvl__obj_header_size(6), 256);
}

static void test_header_roundtrip(void **state)
{
	(void)state;
	_Alignas(64) uint8_t hdr[1024];
	kvl_hash page = some_hash(9);
	for (uint32_t n = 0; n <= 16; n++) {
		kvl__obj_id id = {.fp = FP_A, .page = &page,
		                  .payload_len = 1000 + n, .n_layers = n};
		size_t size = kvl__obj_header_size(n);
		memset(hdr, 0xCC, sizeof hdr);
		write_header(hdr, &id);
		assert_int_equal(hdr[size], 0xCC); /* wrote exactly size */
		assert_memory_equal(hdr, "KVLO", 4);
		assert_int_equal(kvl__get_u32le(hdr + 4), KVL__OBJ_VERSION);
		assert_int_equal(kvl__get_u32le(hdr + 8), n);
		assert_int_equal(kvl__get_u32le(hdr + 12), size);
		assert_memory_equal(hdr + 16, FP_A, KVL__FP_BYTES);
		assert_memory_equal(hdr + 32, page.bytes, KVL_HASH_BYTES);
		assert_int_equal(kvl__get_u64le(hdr + 64), 1000 + n);
		/* No key: the nonce is zero. */
		for (size_t i = 72; i < 88; i++)
			assert_int_equal(hdr[i], 0);
		for (size_t i = 88 + 16 * (size_t)n + 16; i < size; i++)
			assert_int_equal(hdr[i], 0);
		const char *why = "untouched";
		assert_int_equal(kvl__obj_header_check(hdr, size, &id, NULL,
		                                       &why),
		                 KVL_OK);
		/* A longer buffer (the payload follows) is fine too. */
		assert_int_equal(kvl__obj_header_check(hdr, sizeof hdr, &id,
		                                       NULL, &why),
		                 KVL_OK);
		for (uint32_t i = 0; i < n; i++) {
			uint8_t f[KVL__OBJ_FIELD];
			field_of(i, f);
			assert_int_equal(kvl__obj_layer_ok(hdr, i, f), 0);
			field_of(i + 1, f);
			assert_int_equal(kvl__obj_layer_ok(hdr, i, f),
			                 KVL_ECORRUPT);
		}
		/* Unsummed (trusted stores): a valid header whose layers no
		 * untrusted reader accepts. */
		assert_int_equal(kvl__obj_header_write(hdr, &id, NULL, NULL), 0);
		assert_int_equal(kvl__obj_header_check(hdr, size, &id, NULL,
		                                       &why),
		                 KVL_OK);
		uint8_t zero[KVL__OBJ_FIELD] = {0};
		for (uint32_t i = 0; i < n; i++)
			assert_int_equal(kvl__obj_layer_ok(hdr, i, zero),
			                 KVL_ECORRUPT);
	}
}

static void test_header_corrupt(void **state)
{
	(void)state;
	const uint32_t n = 4;
	_Alignas(64) uint8_t hdr[256], bad[256];
	kvl_hash page = some_hash(10), other = some_hash(11);
	kvl__obj_id id = {.fp = FP_A, .page = &page, .payload_len = 4096,
	                  .n_layers = n};
	size_t size = kvl__obj_header_size(n), body = 88 + 16 * n;
	write_header(hdr, &id);
	assert_int_equal(kvl__obj_header_check(hdr, size, &id, NULL, NULL),
	                 KVL_OK);

	/* The id it is checked against differs. */
	uint8_t fp_b[KVL__FP_BYTES];
	memcpy(fp_b, FP_A, sizeof fp_b);
	fp_b[15] ^= 0x80;
	kvl__obj_id x = id;
	x.fp = fp_b;
	expect_corrupt(hdr, size, &x, "fingerprint");
	x = id;
	x.page = &other;
	expect_corrupt(hdr, size, &x, "page hash");
	x = id;
	x.payload_len = 4095;
	expect_corrupt(hdr, size, &x, "payload length");
	x = id;
	x.n_layers = n + 1;
	expect_corrupt(hdr, size, &x, NULL);
	x = id;
	x.n_layers = n - 1;
	expect_corrupt(hdr, size, &x, NULL);
	x = id;
	x.n_layers = 64; /* a bigger header than the buffer holds */
	expect_corrupt(hdr, size, &x, "truncated");

	/* Each field edited and the header resealed: the field's own check. */
	memcpy(bad, hdr, size);
	bad[0] = 'X';
	reseal(bad, n);
	expect_corrupt(bad, size, &id, "magic");
	memcpy(bad, hdr, size);
	kvl__put_u32le(bad + 4, KVL__OBJ_VERSION + 1);
	reseal(bad, n);
	expect_corrupt(bad, size, &id, "version");
	memcpy(bad, hdr, size);
	bad[6] = 0x4; /* a flag this version does not know */
	reseal(bad, n);
	expect_corrupt(bad, size, &id, "flags");
	memcpy(bad, hdr, size);
	kvl__put_u32le(bad + 8, n + 1);
	reseal(bad, n);
	expect_corrupt(bad, size, &id, "layer count");
	memcpy(bad, hdr, size);
	kvl__put_u32le(bad + 12, (uint32_t)size + 64);
	reseal(bad, n);
	expect_corrupt(bad, size, &id, NULL);
	memcpy(bad, hdr, size);
	bad[16] ^= 1;
	reseal(bad, n);
	expect_corrupt(bad, size, &id, "fingerprint");
	memcpy(bad, hdr, size);
	bad[63] ^= 1;
	reseal(bad, n);
	expect_corrupt(bad, size, &id, "page hash");
	memcpy(bad, hdr, size);
	kvl__put_u64le(bad + 64, 4097);
	reseal(bad, n);
	expect_corrupt(bad, size, &id, "payload length");

	memcpy(bad, hdr, size);
	bad[6] = 0x3; /* unsummed and keyed at once */
	reseal(bad, n);
	expect_corrupt(bad, size, &id, "flags");
	memcpy(bad, hdr, size);
	bad[6] = KVL__OBJ_KEYED; /* keyed, read without a key */
	reseal(bad, n);
	expect_corrupt(bad, size, &id, "secret");
	memcpy(bad, hdr, size);
	bad[80] = 1; /* a nonce in an unkeyed header */
	reseal(bad, n);
	expect_corrupt(bad, size, &id, "nonce");

	/* A layer field edited without resealing: the header checksum. */
	memcpy(bad, hdr, size);
	bad[88 + 16 * 2 + 3] ^= 0x10;
	expect_corrupt(bad, size, &id, "checksum");
	memcpy(bad, hdr, size);
	bad[body] ^= 1; /* the header checksum itself */
	expect_corrupt(bad, size, &id, "checksum");

	/* Any single flipped bit of the header, padding included. */
	for (size_t i = 0; i < size; i++) {
		for (int b = 0; b < 8; b += 7) {
			memcpy(bad, hdr, size);
			bad[i] ^= (uint8_t)(1u << b);
			const char *why = NULL;
			int rc = kvl__obj_header_check(bad, size, &id, NULL,
			                               &why);
			if (rc != KVL_ECORRUPT)
				print_error("flip of byte %zu bit %d passed\n",
				            i, b);
			assert_int_equal(rc, KVL_ECORRUPT);
			assert_non_null(why);
		}
	}

	/* Truncated: every length short of the header. */
	for (size_t len = 0; len < size; len++)
		expect_corrupt(hdr, len, &id, "truncated");
}

/* ================================================================ checksum */

/* The low 64 bits of the codec's XXH3-128 checksum. */
static uint64_t sum64(const void *data, size_t len, uint64_t seed)
{
	uint8_t out[16];
	kvl__checksum(data, len, seed, out);
	return kvl__get_u64le(out);
}

static void check_flips(uint8_t *buf, size_t len)
{
	const uint64_t seed = KVL__CHECKSUM_SEED;
	uint64_t base = sum64(buf, len, seed);
	assert_int_equal(sum64(buf, len, seed), base);
	if (len == 0)
		return;
	const size_t pos[3] = {0, len / 2, len - 1};
	for (int i = 0; i < 3; i++) {
		for (int b = 0; b < 8; b++) {
			buf[pos[i]] ^= (uint8_t)(1u << b);
			uint64_t got = sum64(buf, len, seed);
			buf[pos[i]] ^= (uint8_t)(1u << b);
			if (got == base)
				print_error("len %zu: flip at %zu bit %d not "
				            "seen\n",
				            len, pos[i], b);
			assert_int_not_equal(got, base);
		}
	}
	assert_int_equal(sum64(buf, len, seed), base);
	/* The seed and the length count. */
	assert_int_not_equal(sum64(buf, len, seed + 1), base);
	assert_int_not_equal(sum64(buf, len - 1, seed), base);
}

static void test_checksum_flips(void **state)
{
	(void)state;
	uint64_t rng = 12345;
	/* Offset by 1 too: the sum must not depend on alignment. */
	uint8_t *mem = malloc(4096 + 8);
	assert_non_null(mem);
	for (size_t i = 0; i < 4096 + 8; i++)
		mem[i] = (uint8_t)splitmix64(&rng);
	for (size_t len = 0; len <= 200; len++) {
		check_flips(mem, len);
		check_flips(mem + 1, len);
		assert_int_equal(sum64(mem + 1, len, 7),
		                 sum64(memcpy(mem + 4096 - 256,
		                                      mem + 1, len),
		                               len, 7));
	}
	for (size_t i = 0; i < 4096 + 8; i++)
		mem[i] = (uint8_t)splitmix64(&rng);
	check_flips(mem, 4096);
	check_flips(mem + 3, 4096);
	/* All zeros, too: a zero word must still move the sum. */
	memset(mem, 0, 4096 + 8);
	check_flips(mem, 4096);
	for (size_t len = 0; len <= 200; len++)
		check_flips(mem, len);
	/* Zeros of different lengths differ. */
	assert_int_not_equal(sum64(mem, 64, 1),
	                     sum64(mem, 128, 1));
	free(mem);
}

/* The checksum of two pieces, the second seeded with the first's sum: how a
 * layer of several components is summed. */
/* The checksum of one layer whose two components are x (lx bytes) and y
 * (ly bytes), streamed over a slot of a one-layer layout as the codec sums
 * a host slot. */
static uint64_t slot_sum2(uint8_t *x, size_t lx, uint8_t *y, size_t ly)
{
	kvl_layout *l = NULL;
	int pool = -1;
	assert_int_equal(kvl_layout_create("sum/x", 16, NULL, &l, NULL, 0), 0);
	assert_int_equal(kvl_layout_add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0,
	                                     &pool),
	                 0);
	kvl_buffer bx = {.base = x, .page_stride = (lx + 7) & ~(size_t)7,
	                 .page_bytes = lx, .num_pages = 1};
	kvl_buffer by = {.base = y, .page_stride = (ly + 7) & ~(size_t)7,
	                 .page_bytes = ly, .num_pages = 1};
	assert_int_equal(kvl_layout_add_buffer(l, pool, "x", 0, &bx), 0);
	assert_int_equal(kvl_layout_add_buffer(l, pool, "y", 0, &by), 0);
	assert_int_equal(kvl_layout_finalize(l), 0);
	const kvl__pool *p = &l->pools[0];
	uint8_t hdr[128] = {0}, field[KVL__OBJ_FIELD]; /* unkeyed */
	assert_int_equal(kvl__layer_field_slot(p, &p->layers[0], 0, hdr, NULL,
	                                       field),
	                 0);
	uint64_t sum = kvl__get_u64le(field);
	kvl_layout_free(l);
	return sum;
}

/* A layer's checksum is that of its bytes as the object holds them, the
 * components one after the other, however they are split in memory; a
 * flip in either component changes it, and so does their order. */
static void test_checksum_pieces(void **state)
{
	(void)state;
	uint64_t rng = 99;
	/* 8-aligned, and apart: the layout refuses overlapping buffers. */
	_Alignas(8) uint8_t a[304], b[304], ab[608];
	for (size_t i = 0; i < sizeof a; i++) {
		a[i] = (uint8_t)splitmix64(&rng);
		b[i] = (uint8_t)splitmix64(&rng);
	}
	const size_t lens[] = {1, 7, 8, 63, 64, 65, 128, 200, 300};
	const size_t n_lens = sizeof lens / sizeof *lens;
	for (size_t i = 0; i < n_lens; i++) {
		for (size_t j = 0; j < n_lens; j++) {
			size_t la = lens[i], lb = lens[j];
			memcpy(ab, a, la);
			memcpy(ab + la, b, lb);
			uint64_t whole = sum64(ab, la + lb,
			                               KVL__CHECKSUM_SEED);
			assert_int_equal(slot_sum2(a, la, b, lb), whole);
			/* A flip in the first piece reaches the end. */
			a[la - 1] ^= 4;
			assert_int_not_equal(slot_sum2(a, la, b, lb), whole);
			a[la - 1] ^= 4;
			/* A flip in the second piece, too. */
			b[0] ^= 1;
			assert_int_not_equal(slot_sum2(a, la, b, lb), whole);
			b[0] ^= 1;
			/* The order of the pieces counts. */
			if (la != lb || memcmp(a, b, la))
				assert_int_not_equal(slot_sum2(b, lb, a, la),
				                     whole);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_errors),
		cmocka_unit_test(test_create_ok),
		cmocka_unit_test(test_add_pool_errors),
		cmocka_unit_test(test_add_buffer_errors),
		cmocka_unit_test(test_finalize_errors),
		cmocka_unit_test(test_overlap),
		cmocka_unit_test(test_queries_before_finalize),
		cmocka_unit_test(test_pool_queries),
		cmocka_unit_test(test_object_size_and_ranges),
		cmocka_unit_test(test_page_pieces),
		cmocka_unit_test(test_high_layer),
		cmocka_unit_test(test_layer_limit_and_wrap),
		cmocka_unit_test(test_query_messages),
		cmocka_unit_test(test_fingerprint_stable),
		cmocka_unit_test(test_fingerprint_covers),
		cmocka_unit_test(test_fingerprint_format),
		cmocka_unit_test(test_shapes),
		cmocka_unit_test(test_fingerprint_ranks_and_pools),
		cmocka_unit_test(test_key_format),
		cmocka_unit_test(test_header_size),
		cmocka_unit_test(test_header_roundtrip),
		cmocka_unit_test(test_header_corrupt),
		cmocka_unit_test(test_checksum_flips),
		cmocka_unit_test(test_checksum_pieces),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
