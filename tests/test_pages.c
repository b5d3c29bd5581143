/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pages.c — synchronous page I/O (kvl_pages_exist, kvl_pages_put,
 * kvl_pages_get) over the embedded store.
 *
 * Two host layouts of the same shape at different addresses (so the same
 * fingerprint), each with two pools: "kv" (components k and v interleaved
 * in one allocation per layer, layers 0..3) and "swa" (TRAILING_PAGES(2),
 * one component at layers 1 and 3). Pages are put from slots of the first,
 * filled with a per-page pattern, and read into other slots of the second;
 * after every get the *whole* destination memory is compared with an image
 * of what it must hold, so bytes outside the pages read (other slots, other
 * layers, stride gaps) are checked untouched too.
 *
 * Covers: existence before and after, put twice (present), whole-page and
 * per-layer gets, absent pages, slots out of range next to good pages in one
 * batch, CUDA pools (not supported here), another model tag (another
 * namespace), replicated pools across tp ranks, the stored object's format
 * (header, layer-major payload, chained layer checksums), and corrupt objects
 * planted under a page's key with kvl_store_put: garbage, another page's
 * object, a flipped payload byte (caught by a verifying store, passed by the
 * default trusted one, as documented), truncation. NULL arguments.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvlink.h"
#include "core/layout.h"
#include "core/codec.h"
#include "core/codec.h"

#include "support/kvl_assert.h"
#include "support/page_data.h"
#include "support/pools.h"
#include "support/stores.h"

#define NP 8           /* slots per pool */
#define KV_LAYERS 4
#define KV_STRIDE 512  /* one slot holds k then v, then a gap */
#define K_BYTES 256
#define V_BYTES 200
#define SWA_STRIDE 128
#define W_BYTES 120
#define KV_REGION ((size_t)KV_LAYERS * NP * KV_STRIDE)
#define HOST_BYTES (KV_REGION + 2 * (size_t)NP * SWA_STRIDE)
#define STORE_URI "mem:?capacity=64MiB"
#define FILL 0xEE      /* what a destination holds before any get */

/* ================================================================= helpers */

/* One engine's memory and its layout: pool kv (k, v over KV_LAYERS
 * layers) and pool swa (w at layers 1 and 3), NP slots each, FILL at
 * first. */
typedef pools host;

static void host_init_shard(host *h, const char *tag, const kvl_shard *shard)
{
	pools_shape sh = {.tag = tag, .shard = shard, .slots = NP,
	                  .layers = KV_LAYERS, .k_bytes = K_BYTES,
	                  .v_bytes = V_BYTES, .kv_stride = KV_STRIDE,
	                  .swa = 1, .swa_window = 2, .w_bytes = W_BYTES,
	                  .w_stride = SWA_STRIDE, .fill = FILL};
	pools_init(h, &sh);
	ASSERT_EQ(h->mem_bytes, HOST_BYTES);
}

static void host_init(host *h, const char *tag)
{
	host_init_shard(h, tag, NULL);
}

static void host_free(host *h)
{
	pools_free(h);
}

static uint8_t pattern(uint64_t seed, int pool, size_t slot, size_t piece,
                       size_t i)
{
	uint64_t z = seed * 0x9E3779B97F4A7C15ULL ^ (uint64_t)pool << 56 ^
	             (uint64_t)slot << 40 ^ (uint64_t)piece << 24 ^ i;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return (uint8_t)(z ^ (z >> 31));
}

/* Fills every page of every slot of `pool` (not the stride gaps). */
static void fill_pool(host *h, int pool, uint64_t seed)
{
	kvl_iov iov[16];
	size_t n;
	for (size_t slot = 0; slot < NP; slot++) {
		assert_int_equal(kvl_layout_page_pieces(h->l, pool, slot,
		                                        KVL_ALL_LAYERS, iov, 16,
		                                        &n),
		                 KVL_OK);
		for (size_t j = 0; j < n; j++)
			for (size_t i = 0; i < iov[j].len; i++)
				((uint8_t *)iov[j].addr)[i] =
					pattern(seed, pool, slot, j, i);
	}
}

/* A copy of dst's memory that expect_copy edits and expect_same compares. */
static uint8_t *image_of(const host *dst)
{
	uint8_t *img = malloc(HOST_BYTES);
	assert_non_null(img);
	memcpy(img, dst->mem, HOST_BYTES);
	return img;
}

/* Records in `img` that `layer` of src slot s must now be in dst slot d. */
static void expect_copy(uint8_t *img, const host *src, const host *dst,
                        int pool, size_t s, size_t d, uint32_t layer)
{
	kvl_iov a[16], b[16];
	size_t na, nb;
	assert_int_equal(kvl_layout_page_pieces(src->l, pool, s, layer, a, 16,
	                                        &na),
	                 KVL_OK);
	assert_int_equal(kvl_layout_page_pieces(dst->l, pool, d, layer, b, 16,
	                                        &nb),
	                 KVL_OK);
	assert_int_equal(na, nb);
	for (size_t j = 0; j < na; j++) {
		assert_int_equal(a[j].len, b[j].len);
		memcpy(img + ((uint8_t *)b[j].addr - dst->mem), a[j].addr,
		       a[j].len);
	}
}

/* The whole of dst's memory equals img; names the first differing byte. */
static void expect_same(const uint8_t *img, const host *dst)
{
	for (size_t i = 0; i < HOST_BYTES; i++) {
		if (img[i] != dst->mem[i]) {
			print_error("destination byte %zu (kv layer %zu slot "
			            "%zu offset %zu): expected 0x%02x, got "
			            "0x%02x\n",
			            i, i / (NP * KV_STRIDE),
			            i % (NP * KV_STRIDE) / KV_STRIDE,
			            i % KV_STRIDE, img[i], dst->mem[i]);
			assert_int_equal(dst->mem[i], img[i]);
		}
	}
}

/* n distinct page hashes, a chain over `seed`'s tokens. */
static void make_pages(kvl_hash *out, size_t n, uint64_t seed)
{
	assert_true(n <= 32);
	hash_chain(out, n, seed * 100000, 4, NULL);
}

/* Asserts rc 0 and every result equal to want[]. */
static void expect_results(int rc, const int *got, const int *want, size_t n,
                           kvl_store *st)
{
	ASSERT_RC(st, rc, KVL_OK);
	for (size_t i = 0; i < n; i++)
		ASSERT_CODE_MSG(got[i], want[i], "page %zu: %s", i,
		                kvl_store_errmsg(st));
}

#define EXPECT_RESULTS(rc, got, st, ...)                                   \
	do {                                                               \
		const int want_[] = {__VA_ARGS__};                         \
		expect_results((rc), (got), want_,                         \
		               sizeof want_ / sizeof want_[0], (st));      \
	} while (0)

static void put_pages(kvl_store *st, const host *h, int pool,
                      const kvl_hash *pages, const size_t *slots, size_t n)
{
	int res[32];
	assert_true(n <= 32);
	int rc = kvl_pages_put(st, h->l, pool, pages, slots, n, res);
	int want[32];
	for (size_t i = 0; i < n; i++)
		want[i] = KVL_PUT_STORED;
	expect_results(rc, res, want, n, st);
}

/* The stored object of `page` in full, into buf (size bytes). */
static void fetch_object(kvl_store *st, const host *h, int pool,
                         const kvl_hash *page, uint8_t *buf, size_t size)
{
	char key[KVL_KEY_MAX];
	assert_int_equal(kvl_layout_key(h->l, pool, page, key, sizeof key),
	                 KVL_OK);
	const char *keys[1] = {key};
	kvl_range r = {.offset = 0, .addr = buf, .len = size};
	size_t nr = 1;
	int got = -100;
	assert_int_equal(kvl_store_get(st, keys, 1, &r, &nr, &got), KVL_OK);
	assert_int_equal(got, 0);
}

/* Stores `len` raw bytes under the key of `page`. */
static void plant(kvl_store *st, const host *h, int pool,
                  const kvl_hash *page, const void *bytes, size_t len)
{
	char key[KVL_KEY_MAX];
	assert_int_equal(kvl_layout_key(h->l, pool, page, key, sizeof key),
	                 KVL_OK);
	const char *keys[1] = {key};
	kvl_iov piece = {.addr = (void *)bytes, .len = len};
	size_t np = 1;
	int res = -100;
	assert_int_equal(kvl_store_put(st, keys, 1, &piece, &np, &res), KVL_OK);
	assert_int_equal(res, KVL_PUT_STORED);
}

static size_t object_size(const host *h, int pool, size_t *hdr)
{
	size_t size = 0;
	assert_int_equal(kvl_layout_object_size(h->l, pool, &size, hdr),
	                 KVL_OK);
	return size;
}

/* ============================================================ round trips */

static void test_roundtrip(void **state)
{
	(void)state;
	kvl_store *st = open_ok(STORE_URI);
	host src, dst;
	host_init(&src, "t/bf16");
	host_init(&dst, "t/bf16");
	fill_pool(&src, src.kv, 1);
	fill_pool(&src, src.swa, 2);

	/* Same shape elsewhere in memory: same fingerprints. */
	char fa[33], fb[33];
	for (int p = -1; p < 2; p++) {
		assert_int_equal(kvl_layout_fingerprint(src.l, p, fa, sizeof fa), KVL_OK);
		assert_int_equal(kvl_layout_fingerprint(dst.l, p, fb, sizeof fb), KVL_OK);
		assert_string_equal(fa, fb);
	}

	kvl_hash pages[5];
	make_pages(pages, 5, 1);
	int res[5];
	EXPECT_RESULTS(kvl_pages_exists(st, src.l, src.kv, pages, 5, res), res,
	               st, 0, 0, 0, 0, 0);
	EXPECT_RESULTS(kvl_pages_exists(st, src.l, src.swa, pages, 5, res), res,
	               st, 0, 0, 0, 0, 0);

	const size_t kv_src[4] = {1, 3, 5, 7}, swa_src[4] = {0, 2, 4, 6};
	put_pages(st, &src, src.kv, pages, kv_src, 4);
	put_pages(st, &src, src.swa, pages, swa_src, 4);

	/* Present for both layouts; page 4 never was. */
	EXPECT_RESULTS(kvl_pages_exists(st, src.l, src.kv, pages, 5, res), res,
	               st, 1, 1, 1, 1, 0);
	EXPECT_RESULTS(kvl_pages_exists(st, dst.l, dst.swa, pages, 5, res), res,
	               st, 1, 1, 1, 1, 0);
	kvl_store_stats stats;
	assert_int_equal(kvl_store_stats_get(st, &stats), KVL_OK);
	assert_int_equal(stats.objects, 8);

	/* Put again: present, from other slots too; nothing new stored. */
	const size_t other[4] = {0, 0, 0, 0};
	EXPECT_RESULTS(kvl_pages_put(st, src.l, src.kv, pages, kv_src, 4, res),
	               res, st, KVL_PUT_PRESENT, KVL_PUT_PRESENT,
	               KVL_PUT_PRESENT, KVL_PUT_PRESENT);
	EXPECT_RESULTS(kvl_pages_put(st, dst.l, dst.swa, pages, other, 4, res),
	               res, st, KVL_PUT_PRESENT, KVL_PUT_PRESENT,
	               KVL_PUT_PRESENT, KVL_PUT_PRESENT);
	assert_int_equal(kvl_store_stats_get(st, &stats), KVL_OK);
	assert_int_equal(stats.objects, 8);

	/* Whole pages into other slots of the second layout. */
	uint8_t *img = image_of(&dst);
	const size_t kv_dst[4] = {0, 2, 4, 6}, swa_dst[4] = {7, 5, 3, 1};
	EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.kv, pages, kv_dst, 4,
	                             KVL_ALL_LAYERS, res),
	               res, st, 0, 0, 0, 0);
	for (int i = 0; i < 4; i++)
		expect_copy(img, &src, &dst, dst.kv, kv_src[i], kv_dst[i],
		            KVL_ALL_LAYERS);
	expect_same(img, &dst);
	EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.swa, pages, swa_dst, 4,
	                             KVL_ALL_LAYERS, res),
	               res, st, 0, 0, 0, 0);
	for (int i = 0; i < 4; i++)
		expect_copy(img, &src, &dst, dst.swa, swa_src[i], swa_dst[i],
		            KVL_ALL_LAYERS);
	expect_same(img, &dst);

	/* The source is unchanged by all this; a page read back into its
	 * own layout lands in yet another slot. */
	const size_t back[1] = {0};
	uint8_t *simg = image_of(&src);
	EXPECT_RESULTS(kvl_pages_get(st, src.l, src.kv, &pages[3], back, 1,
	                             KVL_ALL_LAYERS, res),
	               res, st, 0);
	expect_copy(simg, &src, &src, src.kv, 7, 0, KVL_ALL_LAYERS);
	expect_same(simg, &src);

	free(simg);
	free(img);
	host_free(&src);
	host_free(&dst);
	kvl_store_close(st);
}

static void test_per_layer_get(void **state)
{
	(void)state;
	kvl_store *st = open_ok(STORE_URI);
	host src, dst;
	host_init(&src, "t/bf16");
	host_init(&dst, "t/bf16");
	fill_pool(&src, src.kv, 3);
	fill_pool(&src, src.swa, 4);
	kvl_hash pages[3];
	make_pages(pages, 3, 2);
	const size_t slots[3] = {2, 4, 6};
	put_pages(st, &src, src.kv, pages, slots, 3);
	put_pages(st, &src, src.swa, pages, slots, 3);

	uint8_t *img = image_of(&dst);
	int res[3];
	/* One layer of one page: only that layer of that slot changes. */
	const size_t d3[1] = {3};
	EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.kv, &pages[1], d3, 1, 2,
	                             res),
	               res, st, 0);
	expect_copy(img, &src, &dst, dst.kv, 4, 3, 2);
	expect_same(img, &dst);
	/* Another layer of another page into the same slot. */
	EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.kv, &pages[0], d3, 1, 0,
	                             res),
	               res, st, 0);
	expect_copy(img, &src, &dst, dst.kv, 2, 3, 0);
	expect_same(img, &dst);
	/* A batch, one layer each. */
	const size_t d[3] = {7, 0, 5};
	EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.kv, pages, d, 3, 3, res),
	               res, st, 0, 0, 0);
	for (int i = 0; i < 3; i++)
		expect_copy(img, &src, &dst, dst.kv, slots[i], d[i], 3);
	expect_same(img, &dst);

	/* Layer by layer adds up to the whole page. */
	for (uint32_t ly = 0; ly < KV_LAYERS; ly++) {
		const size_t d1[1] = {1};
		EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.kv, &pages[2], d1,
		                             1, ly, res),
		               res, st, 0);
	}
	expect_copy(img, &src, &dst, dst.kv, 6, 1, KVL_ALL_LAYERS);
	expect_same(img, &dst);

	/* swa's sparse layers: 3 is there, 0 and 2 are not. */
	EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.swa, &pages[0], d3, 1, 3,
	                             res),
	               res, st, 0);
	expect_copy(img, &src, &dst, dst.swa, 2, 3, 3);
	expect_same(img, &dst);
	assert_int_equal(kvl_pages_get(st, dst.l, dst.swa, &pages[0], d3, 1, 0,
	                               res),
	                 KVL_ENOTFOUND);
	ASSERT_CONTAINS(kvl_store_errmsg(st), "layer 0");
	assert_int_equal(kvl_pages_get(st, dst.l, dst.swa, &pages[0], d3, 1, 2,
	                               res),
	                 KVL_ENOTFOUND);
	assert_int_equal(kvl_pages_get(st, dst.l, dst.kv, &pages[0], d3, 1,
	                               KV_LAYERS, res),
	                 KVL_ENOTFOUND);
	expect_same(img, &dst);

	free(img);
	host_free(&src);
	host_free(&dst);
	kvl_store_close(st);
}

static void test_absent_and_ranges(void **state)
{
	(void)state;
	kvl_store *st = open_ok(STORE_URI);
	host src, dst;
	host_init(&src, "t/bf16");
	host_init(&dst, "t/bf16");
	fill_pool(&src, src.kv, 5);
	kvl_hash pages[4];
	make_pages(pages, 4, 3);
	int res[4];

	/* A slot out of range fails that page only. */
	const size_t put_slots[3] = {0, NP, 2};
	EXPECT_RESULTS(kvl_pages_put(st, src.l, src.kv, pages, put_slots, 3,
	                             res),
	               res, st, KVL_PUT_STORED, KVL_ERANGE, KVL_PUT_STORED);
	EXPECT_RESULTS(kvl_pages_exists(st, src.l, src.kv, pages, 4, res), res,
	               st, 1, 0, 1, 0);
	const size_t bad_only[1] = {SIZE_MAX};
	EXPECT_RESULTS(kvl_pages_put(st, src.l, src.kv, &pages[3], bad_only, 1,
	                             res),
	               res, st, KVL_ERANGE);
	ASSERT_CONTAINS(kvl_store_errmsg(st), "slot");

	/* Get: out-of-range slots and absent pages beside good ones. */
	uint8_t *img = image_of(&dst);
	const kvl_hash batch[4] = {pages[0], pages[2], pages[1], pages[2]};
	const size_t get_slots[4] = {5, NP, 6, 1};
	EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.kv, batch, get_slots, 4,
	                             KVL_ALL_LAYERS, res),
	               res, st, 0, KVL_ERANGE, KVL_ENOTFOUND, 0);
	expect_copy(img, &src, &dst, dst.kv, 0, 5, KVL_ALL_LAYERS);
	expect_copy(img, &src, &dst, dst.kv, 2, 1, KVL_ALL_LAYERS);
	expect_same(img, &dst);

	/* Only absent pages: nothing written. */
	EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.kv, &pages[1], get_slots + 2,
	                             1, KVL_ALL_LAYERS, res),
	               res, st, KVL_ENOTFOUND);
	EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.kv, &pages[3],
	                             get_slots + 2, 1, 1, res),
	               res, st, KVL_ENOTFOUND);
	/* Only bad slots: no store call, each page says so. */
	const size_t bad2[2] = {NP, NP + 100};
	EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.kv, pages, bad2, 2, 0, res),
	               res, st, KVL_ERANGE, KVL_ERANGE);
	ASSERT_CONTAINS(kvl_store_errmsg(st), "slot");
	expect_same(img, &dst);

	/* n == 0 is a no-op. */
	assert_int_equal(kvl_pages_get(st, dst.l, dst.kv, pages, get_slots, 0,
	                               KVL_ALL_LAYERS, res),
	                 KVL_OK);
	assert_int_equal(kvl_pages_put(st, dst.l, dst.kv, pages, get_slots, 0,
	                               res),
	                 KVL_OK);
	assert_int_equal(kvl_pages_exists(st, dst.l, dst.kv, pages, 0, res),
	                 KVL_OK);

	free(img);
	host_free(&src);
	host_free(&dst);
	kvl_store_close(st);
}

/* ============================================================== namespaces */

static void test_other_tag_and_ranks(void **state)
{
	(void)state;
	kvl_store *st = open_ok(STORE_URI);
	host a, b;
	host_init(&a, "t/bf16");
	host_init(&b, "t/fp8");
	fill_pool(&a, a.kv, 6);
	kvl_hash pages[2];
	make_pages(pages, 2, 4);
	const size_t slots[2] = {0, 1};
	put_pages(st, &a, a.kv, pages, slots, 2);

	int res[2];
	EXPECT_RESULTS(kvl_pages_exists(st, a.l, a.kv, pages, 2, res), res, st,
	               1, 1);
	EXPECT_RESULTS(kvl_pages_exists(st, b.l, b.kv, pages, 2, res), res, st,
	               0, 0);
	uint8_t *img = image_of(&b);
	EXPECT_RESULTS(kvl_pages_get(st, b.l, b.kv, pages, slots, 2,
	                             KVL_ALL_LAYERS, res),
	               res, st, KVL_ENOTFOUND, KVL_ENOTFOUND);
	expect_same(img, &b);
	free(img);
	/* It may store its own copy: another namespace. */
	put_pages(st, &b, b.kv, pages, slots, 2);
	host_free(&b);

	/* Tensor-parallel ranks: "kv" is per rank, so rank 1 does not see
	 * rank 0's pages. */
	kvl_shard r0 = {0, 2, 0, 1, 0, 1}, r1 = {1, 2, 0, 1, 0, 1};
	host t0, t1;
	host_init_shard(&t0, "t/bf16", &r0);
	host_init_shard(&t1, "t/bf16", &r1);
	fill_pool(&t0, t0.kv, 7);
	put_pages(st, &t0, t0.kv, pages, slots, 2);
	EXPECT_RESULTS(kvl_pages_exists(st, t0.l, t0.kv, pages, 2, res), res,
	               st, 1, 1);
	EXPECT_RESULTS(kvl_pages_exists(st, t1.l, t1.kv, pages, 2, res), res,
	               st, 0, 0);
	/* The single-rank layout (tp_size 1) is another namespace too. */
	EXPECT_RESULTS(kvl_pages_exists(st, a.l, a.kv, pages, 2, res), res, st,
	               1, 1);
	host_free(&t0);
	host_free(&t1);
	host_free(&a);

	/* A replicated pool is shared by the tp ranks. */
	kvl_layout *lr[2];
	uint8_t *mem = aligned_alloc(64, 2 * NP * 64);
	assert_non_null(mem);
	for (int r = 0; r < 2; r++) {
		memset(mem + r * NP * 64, 0x10 * (r + 1), NP * 64);
		int p;
		assert_int_equal(kvl_layout_create("t/bf16", 16,
		                                   r ? &r1 : &r0, &lr[r], NULL,
		                                   0),
		                 KVL_OK);
		assert_int_equal(kvl_layout_add_pool(lr[r], "mla",
		                                     KVL_HIT_ALL_PAGES, 0,
		                                     KVL_POOL_REPLICATED_TP, &p),
		                 KVL_OK);
		kvl_buffer bf = {mem + r * NP * 64, 64, 64, NP, KVL_MEM_HOST, 0};
		assert_int_equal(kvl_layout_add_buffer(lr[r], p, "c", 0, &bf),
		                 KVL_OK);
		assert_int_equal(kvl_layout_finalize(lr[r]), KVL_OK);
	}
	EXPECT_RESULTS(kvl_pages_put(st, lr[0], 0, pages, slots, 1, res), res,
	               st, KVL_PUT_STORED);
	EXPECT_RESULTS(kvl_pages_exists(st, lr[1], 0, pages, 2, res), res, st,
	               1, 0);
	const size_t s3[1] = {3};
	EXPECT_RESULTS(kvl_pages_get(st, lr[1], 0, pages, s3, 1,
	                             KVL_ALL_LAYERS, res),
	               res, st, 0);
	assert_memory_equal(mem + NP * 64 + 3 * 64, mem, 64);
	kvl_layout_free(lr[0]);
	kvl_layout_free(lr[1]);
	free(mem);
	kvl_store_close(st);
}

static void test_cuda_pool(void **state)
{
	(void)state;
	kvl_store *st = open_ok(STORE_URI);
	static _Alignas(64) uint8_t fake[NP * 64];
	static _Alignas(64) uint8_t hostmem[NP * 64];
	kvl_layout *l;
	int gpu, cpu;
	assert_int_equal(kvl_layout_create("t/bf16", 16, NULL, &l, NULL, 0),
	                 KVL_OK);
	assert_int_equal(kvl_layout_add_pool(l, "gpu", KVL_HIT_ALL_PAGES, 0, 0,
	                                     &gpu),
	                 KVL_OK);
	/* One component on the host, one on a device (only the address is
	 * used, never dereferenced). */
	kvl_buffer g = {fake, 64, 64, NP, KVL_MEM_CUDA, 0};
	kvl_buffer h = {hostmem, 64, 64, NP, KVL_MEM_HOST, 0};
	assert_int_equal(kvl_layout_add_buffer(l, gpu, "k", 0, &h), KVL_OK);
	assert_int_equal(kvl_layout_add_buffer(l, gpu, "v", 0, &g), KVL_OK);
	assert_int_equal(kvl_layout_finalize(l), KVL_OK);

	kvl_hash pages[1];
	make_pages(pages, 1, 5);
	const size_t slots[1] = {0};
	int res[1] = {-100};
	assert_int_equal(kvl_pages_exists(st, l, gpu, pages, 1, res),
	                 KVL_ENOTSUP);
	ASSERT_CONTAINS(kvl_store_errmsg(st), "CUDA");
	ASSERT_CONTAINS(kvl_store_errmsg(st), "gpu");
	assert_int_equal(kvl_pages_put(st, l, gpu, pages, slots, 1, res),
	                 KVL_ENOTSUP);
	assert_int_equal(kvl_pages_get(st, l, gpu, pages, slots, 1,
	                               KVL_ALL_LAYERS, res),
	                 KVL_ENOTSUP);
	assert_int_equal(kvl_pages_get(st, l, gpu, pages, slots, 1, 0, res),
	                 KVL_ENOTSUP);
	assert_int_equal(res[0], -100);
	kvl_store_stats stats;
	assert_int_equal(kvl_store_stats_get(st, &stats), KVL_OK);
	assert_int_equal(stats.objects, 0);
	kvl_layout_free(l);

	/* A layout whose CUDA memory is in another pool: the host pool still
	 * works. */
	assert_int_equal(kvl_layout_create("t/bf16", 16, NULL, &l, NULL, 0),
	                 KVL_OK);
	assert_int_equal(kvl_layout_add_pool(l, "host", KVL_HIT_ALL_PAGES, 0, 0,
	                                     &cpu),
	                 KVL_OK);
	assert_int_equal(kvl_layout_add_pool(l, "dev", KVL_HIT_ALL_PAGES, 0, 0,
	                                     &gpu),
	                 KVL_OK);
	assert_int_equal(kvl_layout_add_buffer(l, cpu, "k", 0, &h), KVL_OK);
	assert_int_equal(kvl_layout_add_buffer(l, gpu, "k", 0, &g), KVL_OK);
	assert_int_equal(kvl_layout_finalize(l), KVL_OK);
	EXPECT_RESULTS(kvl_pages_put(st, l, cpu, pages, slots, 1, res), res,
	               st, KVL_PUT_STORED);
	EXPECT_RESULTS(kvl_pages_exists(st, l, cpu, pages, 1, res), res, st, 1);
	assert_int_equal(kvl_pages_exists(st, l, gpu, pages, 1, res),
	                 KVL_ENOTSUP);
	kvl_layout_free(l);
	kvl_store_close(st);
}

/* ========================================================== object format */

static void test_object_format(void **state)
{
	(void)state;
	/* An untrusted store, whose objects carry layer sums. */
	kvl_store *st = open_ok("mem:?verify=1&capacity=64MiB");
	host src;
	host_init(&src, "t/bf16");
	fill_pool(&src, src.kv, 8);
	fill_pool(&src, src.swa, 9);
	kvl_hash pages[1];
	make_pages(pages, 1, 6);
	const size_t slots[1] = {5};

	/* A trusted store's objects skip the sums, and say so. */
	{
		kvl_store *t = open_ok(STORE_URI);
		put_pages(t, &src, src.kv, pages, slots, 1);
		size_t hdr_size, size = object_size(&src, src.kv, &hdr_size);
		uint8_t *obj = malloc(size);
		assert_non_null(obj);
		fetch_object(t, &src, src.kv, &pages[0], obj, size);
		assert_int_equal(obj[6] & KVL__OBJ_UNSUMMED, KVL__OBJ_UNSUMMED);
		uint8_t zero[KVL__OBJ_FIELD] = {0};
		assert_int_equal(kvl__obj_layer_ok(obj, 0, zero), KVL_ECORRUPT);
		free(obj);
		kvl_store_close(t);
	}

	for (int pool = 0; pool < 2; pool++) {
		put_pages(st, &src, pool, pages, slots, 1);
		size_t hdr_size, size = object_size(&src, pool, &hdr_size);
		uint8_t *obj = malloc(size);
		assert_non_null(obj);
		fetch_object(st, &src, pool, &pages[0], obj, size);

		/* The header names this page of this pool. */
		int code;
		const kvl__pool *p = kvl__layout_pool(src.l, pool, &code);
		assert_non_null(p);
		kvl__obj_id id = kvl__page_id(p, &pages[0]);
		const char *why = NULL;
		assert_int_equal(kvl__obj_header_check(obj, hdr_size, &id, NULL,
		                                       &why),
		                 KVL_OK);
		assert_memory_equal(obj + 32, pages[0].bytes, KVL_HASH_BYTES);
		assert_int_equal(kvl__get_u64le(obj + 64), size - hdr_size);

		/* Layer-major payload at the documented ranges; each layer's
		 * checksum chains over its components in order. */
		uint32_t layers[8];
		size_t n_layers;
		assert_int_equal(kvl_layout_pool_layers(src.l, pool, layers, 8,
		                                        &n_layers),
		                 KVL_OK);
		assert_int_equal(kvl__get_u32le(obj + 8), n_layers);
		size_t expect_off = hdr_size;
		for (size_t i = 0; i < n_layers; i++) {
			size_t off, len, n;
			kvl_iov iov[4];
			assert_int_equal(kvl_layout_layer_range(src.l, pool,
			                                        layers[i], &off,
			                                        &len),
			                 KVL_OK);
			assert_int_equal(off, expect_off);
			assert_int_equal(kvl_layout_page_pieces(src.l, pool, 5,
			                                        layers[i], iov,
			                                        4, &n),
			                 KVL_OK);
			size_t at = off;
			for (size_t j = 0; j < n; j++) {
				assert_memory_equal(obj + at, iov[j].addr,
				                    iov[j].len);
				at += iov[j].len;
			}
			assert_int_equal(at, off + len);
			/* A layer's checksum is that of its bytes in the
			 * object, and the same streamed over the slot's
			 * pieces (what a reader of the slot recomputes). */
			uint8_t sum[KVL__OBJ_FIELD], slot_sum[KVL__OBJ_FIELD];
			kvl__checksum(obj + off, len, KVL__CHECKSUM_SEED, sum);
			assert_int_equal(kvl__obj_layer_ok(obj, (uint32_t)i,
			                                   sum),
			                 0);
			assert_int_equal(kvl__layer_field_slot(p, &p->layers[i],
			                                       5, obj, NULL,
			                                       slot_sum),
			                 0);
			assert_memory_equal(slot_sum, sum, KVL__OBJ_FIELD);
			expect_off += len;
		}
		assert_int_equal(expect_off, size);
		free(obj);
	}
	host_free(&src);
	kvl_store_close(st);
}

/* ================================================================ corrupt */

static void test_corrupt(void **state)
{
	(void)state;
	kvl_store *trusted = open_ok("mem:");
	kvl_store *verify = open_ok("mem:?verify=1&capacity=64MiB");
	/* Objects to plant come from an untrusted store: they carry sums. */
	kvl_store *scratch = open_ok("mem:?verify=1&capacity=64MiB");
	kvl_store *stores[2] = {trusted, verify};
	host src, dst;
	host_init(&src, "t/bf16");
	host_init(&dst, "t/bf16");
	fill_pool(&src, src.kv, 10);
	kvl_hash pages[6];
	make_pages(pages, 6, 7);
	size_t hdr, size = object_size(&src, src.kv, &hdr);
	uint8_t *obj = malloc(size), *bad = malloc(size);
	assert_non_null(obj);
	assert_non_null(bad);
	int res[2];
	const size_t s0[1] = {0}, s4[1] = {4};
	uint8_t *img = image_of(&dst);

	/* The genuine objects of pages 0 (slot 0) and 5 (slot 4). */
	put_pages(scratch, &src, src.kv, &pages[0], s0, 1);
	put_pages(scratch, &src, src.kv, &pages[5], s4, 1);
	fetch_object(scratch, &src, src.kv, &pages[0], obj, size);

	for (int k = 0; k < 2; k++) {
		kvl_store *st = stores[k];
		char key[KVL_KEY_MAX];

		/* (a) Garbage of the right length. */
		for (size_t i = 0; i < size; i++)
			bad[i] = (uint8_t)(i * 131 + 7);
		plant(st, &dst, dst.kv, &pages[1], bad, size);
		EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.kv, &pages[1], s0,
		                             1, KVL_ALL_LAYERS, res),
		               res, st, KVL_ECORRUPT);
		assert_int_equal(kvl_layout_key(dst.l, dst.kv, &pages[1], key,
		                                sizeof key),
		                 KVL_OK);
		ASSERT_CONTAINS(kvl_store_errmsg(st), key);
		ASSERT_CONTAINS(kvl_store_errmsg(st), "magic");
		/* ... which exists (existence does not read objects). */
		EXPECT_RESULTS(kvl_pages_exists(st, dst.l, dst.kv, &pages[1], 1,
		                               res),
		               res, st, 1);
		/* A single layer of it fails the same way. */
		EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.kv, &pages[1], s0,
		                             1, 1, res),
		               res, st, KVL_ECORRUPT);

		/* (b) A valid object, but of another page. */
		plant(st, &dst, dst.kv, &pages[2], obj, size);
		EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.kv, &pages[2], s0,
		                             1, KVL_ALL_LAYERS, res),
		               res, st, KVL_ECORRUPT);
		ASSERT_CONTAINS(kvl_store_errmsg(st), "page hash");
		EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.kv, &pages[2], s0,
		                             1, 3, res),
		               res, st, KVL_ECORRUPT);

		/* (d) Truncated: one byte short, the header only, less. */
		plant(st, &dst, dst.kv, &pages[3], obj, size - 1);
		EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.kv, &pages[3], s0,
		                             1, KVL_ALL_LAYERS, res),
		               res, st, KVL_ECORRUPT);
		EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.kv, &pages[3], s0,
		                             1, KV_LAYERS - 1, res),
		               res, st, KVL_ECORRUPT);
		plant(st, &dst, dst.kv, &pages[4], obj, hdr);
		EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.kv, &pages[4], s0,
		                             1, KVL_ALL_LAYERS, res),
		               res, st, KVL_ECORRUPT);
		EXPECT_RESULTS(kvl_pages_get(st, dst.l, dst.kv, &pages[4], s0,
		                             1, 0, res),
		               res, st, KVL_ECORRUPT);
	}
	/* Header-only and truncated objects were refused before any byte
	 * was copied; garbage and wrong pages may have written slot 0. */
	memcpy(img, dst.mem, HOST_BYTES);

	/* (c) A valid header with one payload byte flipped, in layer 2. */
	fetch_object(scratch, &src, src.kv, &pages[5], bad, size);
	size_t off, len;
	assert_int_equal(kvl_layout_layer_range(src.l, src.kv, 2, &off, &len),
	                 KVL_OK);
	bad[off + len / 2] ^= 0x20;
	for (int k = 0; k < 2; k++)
		plant(stores[k], &dst, dst.kv, &pages[5], bad, size);

	/* The verifying store catches it in the layers it reads... */
	const size_t s6[1] = {6};
	EXPECT_RESULTS(kvl_pages_get(verify, dst.l, dst.kv, &pages[5], s6, 1,
	                             KVL_ALL_LAYERS, res),
	               res, verify, KVL_ECORRUPT);
	ASSERT_CONTAINS(kvl_store_errmsg(verify), "checksum");
	EXPECT_RESULTS(kvl_pages_get(verify, dst.l, dst.kv, &pages[5], s6, 1,
	                             2, res),
	               res, verify, KVL_ECORRUPT);
	/* ... and layers it does not read are fine. */
	memcpy(img, dst.mem, HOST_BYTES);
	const size_t s7[1] = {7};
	for (uint32_t ly = 0; ly < KV_LAYERS; ly++) {
		if (ly == 2)
			continue;
		EXPECT_RESULTS(kvl_pages_get(verify, dst.l, dst.kv, &pages[5],
		                             s7, 1, ly, res),
		               res, verify, 0);
		expect_copy(img, &src, &dst, dst.kv, 4, 7, ly);
	}
	expect_same(img, &dst);

	/* The default store trusts its own memory (documented): the header
	 * passes, payload checksums are not checked, the flipped byte comes
	 * through. */
	EXPECT_RESULTS(kvl_pages_get(trusted, dst.l, dst.kv, &pages[5], s7, 1,
	                             KVL_ALL_LAYERS, res),
	               res, trusted, 0);
	expect_copy(img, &src, &dst, dst.kv, 4, 7, KVL_ALL_LAYERS);
	kvl_iov iov[2];
	size_t n;
	assert_int_equal(kvl_layout_page_pieces(dst.l, dst.kv, 7, 2, iov, 2,
	                                        &n),
	                 KVL_OK);
	/* Layer 2 is k (256 bytes) then v: the flipped byte is in k. */
	size_t in_layer = len / 2;
	assert_true(in_layer < iov[0].len);
	img[(uint8_t *)iov[0].addr + in_layer - dst.mem] ^= 0x20;
	expect_same(img, &dst);

	/* Genuine objects pass the verifying store. */
	put_pages(verify, &src, src.kv, &pages[0], s0, 1);
	EXPECT_RESULTS(kvl_pages_get(verify, dst.l, dst.kv, &pages[0], s4, 1,
	                             KVL_ALL_LAYERS, res),
	               res, verify, 0);
	expect_copy(img, &src, &dst, dst.kv, 0, 4, KVL_ALL_LAYERS);
	expect_same(img, &dst);

	/* A corrupt page does not spoil the good ones of its batch. */
	const kvl_hash mix[2] = {pages[0], pages[2]};
	const size_t s23[2] = {2, 3};
	EXPECT_RESULTS(kvl_pages_get(verify, dst.l, dst.kv, mix, s23, 2,
	                             KVL_ALL_LAYERS, res),
	               res, verify, 0, KVL_ECORRUPT);
	expect_copy(img, &src, &dst, dst.kv, 0, 2, KVL_ALL_LAYERS);
	for (uint32_t ly = 0; ly < KV_LAYERS; ly++) {
		/* Slot 3 may hold anything now; take it as it is. */
		assert_int_equal(kvl_layout_page_pieces(dst.l, dst.kv, 3, ly,
		                                        iov, 2, &n),
		                 KVL_OK);
		for (size_t j = 0; j < n; j++)
			memcpy(img + ((uint8_t *)iov[j].addr - dst.mem),
			       iov[j].addr, iov[j].len);
	}
	expect_same(img, &dst);

	free(img);
	free(obj);
	free(bad);
	host_free(&src);
	host_free(&dst);
	kvl_store_close(trusted);
	kvl_store_close(verify);
	kvl_store_close(scratch);
}

/* ============================================================== arguments */

static void test_null_args(void **state)
{
	(void)state;
	kvl_store *st = open_ok(STORE_URI);
	host h;
	host_init(&h, "t/bf16");
	kvl_hash pages[1];
	make_pages(pages, 1, 8);
	const size_t slots[1] = {0};
	int res[1] = {-100};

	assert_int_equal(kvl_pages_exists(NULL, h.l, 0, pages, 1, res),
	                 KVL_EINVAL);
	assert_int_equal(kvl_pages_exists(st, NULL, 0, pages, 1, res),
	                 KVL_EINVAL);
	assert_int_equal(kvl_pages_exists(st, h.l, 0, NULL, 1, res),
	                 KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(st), "NULL");
	assert_int_equal(kvl_pages_exists(st, h.l, 0, pages, 1, NULL),
	                 KVL_EINVAL);

	assert_int_equal(kvl_pages_put(NULL, h.l, 0, pages, slots, 1, res),
	                 KVL_EINVAL);
	assert_int_equal(kvl_pages_put(st, NULL, 0, pages, slots, 1, res),
	                 KVL_EINVAL);
	assert_int_equal(kvl_pages_put(st, h.l, 0, NULL, slots, 1, res),
	                 KVL_EINVAL);
	assert_int_equal(kvl_pages_put(st, h.l, 0, pages, NULL, 1, res),
	                 KVL_EINVAL);
	ASSERT_CONTAINS(kvl_store_errmsg(st), "slots");
	assert_int_equal(kvl_pages_put(st, h.l, 0, pages, slots, 1, NULL),
	                 KVL_EINVAL);

	assert_int_equal(kvl_pages_get(NULL, h.l, 0, pages, slots, 1, 0, res),
	                 KVL_EINVAL);
	assert_int_equal(kvl_pages_get(st, NULL, 0, pages, slots, 1, 0, res),
	                 KVL_EINVAL);
	assert_int_equal(kvl_pages_get(st, h.l, 0, NULL, slots, 1, 0, res),
	                 KVL_EINVAL);
	assert_int_equal(kvl_pages_get(st, h.l, 0, pages, NULL, 1, 0, res),
	                 KVL_EINVAL);
	assert_int_equal(kvl_pages_get(st, h.l, 0, pages, slots, 1, 0, NULL),
	                 KVL_EINVAL);
	assert_int_equal(res[0], -100);

	/* Unknown pools. */
	assert_int_equal(kvl_pages_exists(st, h.l, 2, pages, 1, res),
	                 KVL_ENOTFOUND);
	ASSERT_CONTAINS(kvl_store_errmsg(st), "pool");
	assert_int_equal(kvl_pages_put(st, h.l, -1, pages, slots, 1, res),
	                 KVL_ENOTFOUND);
	assert_int_equal(kvl_pages_get(st, h.l, 7, pages, slots, 1,
	                               KVL_ALL_LAYERS, res),
	                 KVL_ENOTFOUND);

	/* A layout that is not finalized. */
	kvl_layout *raw;
	int p;
	assert_int_equal(kvl_layout_create("t/bf16", 16, NULL, &raw, NULL, 0),
	                 KVL_OK);
	assert_int_equal(kvl_layout_add_pool(raw, "kv", KVL_HIT_ALL_PAGES, 0, 0,
	                                     &p),
	                 KVL_OK);
	assert_int_equal(kvl_pages_exists(st, raw, p, pages, 1, res),
	                 KVL_ESTATE);
	ASSERT_CONTAINS(kvl_store_errmsg(st), "finalized");
	assert_int_equal(kvl_pages_put(st, raw, p, pages, slots, 1, res),
	                 KVL_ESTATE);
	assert_int_equal(kvl_pages_get(st, raw, p, pages, slots, 1,
	                               KVL_ALL_LAYERS, res),
	                 KVL_ESTATE);
	assert_int_equal(res[0], -100);
	kvl_layout_free(raw);

	kvl_store_stats stats;
	assert_int_equal(kvl_store_stats_get(st, &stats), KVL_OK);
	assert_int_equal(stats.objects, 0);
	host_free(&h);
	kvl_store_close(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_per_layer_get),
		cmocka_unit_test(test_absent_and_ranges),
		cmocka_unit_test(test_other_tag_and_ranks),
		cmocka_unit_test(test_cuda_pool),
		cmocka_unit_test(test_object_format),
		cmocka_unit_test(test_corrupt),
		cmocka_unit_test(test_null_args),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
