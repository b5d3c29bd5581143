/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_gpu.c — the linker with pools in GPU memory: offload after an engine
 * event, lookup, layer-wise load with CPU and stream-ordered waits, bytes
 * checked on the host; a load started after an engine event while a kernel
 * still reads the slots, GPU ones and, in a linker with a host pool too,
 * host ones; a page evicted between lookup and load; stores
 * without peek, read through the pinned ring; stores with a secret
 * (secret_file): keyed objects through the ring (layer by layer and whole)
 * and in place, and never valid to a linker whose store has another
 * secret or none; loads through the copy engines and the staging ring
 * (runs of objects, broken runs, a ring that wraps); the copy kernel on
 * chunks of every shape. Skips (exit
 * 77) in builds without CUDA or on machines without a usable GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvl_config.h"
#include "kvlink.h"

#if !KVL_HAVE_CUDA
int main(void)
{
	printf("SKIP test_gpu: this kvlink was built without CUDA\n");
	return 77;
}
#else
#include <cuda_runtime.h>

#include "gpu/cuda.h"
#include "store/store.h"

#include "support/kvl_assert.h"

/* tests/support/gpu_reader.cu */
int kvl_test_slow_read(const void *src, void *dst, size_t len,
                       uint64_t spin_ns, void *stream);

#define LAYERS 4
#define PAGES 16
#define PAGE_BYTES 4096
#define SLOTS 64

/* Pool [layer][k|v][slot][PAGE_BYTES] on the GPU. */
static uint8_t *dev_pool;

static kvl_layout *make_layout(void)
{
	kvl_layout *l;
	int pool;
	kvl_layout_create("gpu-test", 16, NULL, &l, NULL, 0);
	kvl_layout_add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0, &pool);
	for (uint32_t layer = 0; layer < LAYERS; layer++)
		for (int c = 0; c < 2; c++) {
			kvl_buffer b = {
				.base = dev_pool + ((size_t)layer * 2 + c) *
				                           SLOTS * PAGE_BYTES,
				.page_stride = PAGE_BYTES,
				.page_bytes = PAGE_BYTES,
				.num_pages = SLOTS,
				.mem = KVL_MEM_CUDA,
				.device = 0};
			kvl_layout_add_buffer(l, pool, c ? "v" : "k", layer, &b);
		}
	int rc = kvl_layout_finalize(l);
	EXPECT_RC(l, rc, 0);
	return l;
}

static uint8_t pattern(size_t page, size_t layer, int c, size_t i)
{
	return (uint8_t)(page * 131 + layer * 31 + (size_t)c * 7 + i * 13);
}

/* Host image of the pool, for filling and checking slots. */
static uint8_t *host;
static const size_t pool_bytes = (size_t)LAYERS * 2 * SLOTS * PAGE_BYTES;

static uint8_t *at(uint8_t *base, size_t layer, int c, size_t slot)
{
	return base + (((size_t)layer * 2 + c) * SLOTS + slot) * PAGE_BYTES;
}

static void fill_slot(size_t page, size_t slot)
{
	for (size_t layer = 0; layer < LAYERS; layer++)
		for (int c = 0; c < 2; c++)
			for (size_t i = 0; i < PAGE_BYTES; i++)
				at(host, layer, c, slot)[i] =
					pattern(page, layer, c, i);
}

static int slot_ok(size_t page, size_t slot, size_t layers)
{
	for (size_t layer = 0; layer < layers; layer++)
		for (int c = 0; c < 2; c++)
			for (size_t i = 0; i < PAGE_BYTES; i++)
				if (at(host, layer, c, slot)[i] !=
				    pattern(page, layer, c, i))
					return 0;
	return 1;
}

static void collect(kvl_linker *lk, uint64_t id, kvl_completion *out)
{
	for (int tries = 0; tries < 100; tries++) {
		size_t n;
		kvl_linker_poll(lk, out, 1, &n, 100);
		if (n && out->id == id)
			return;
	}
	EXPECT_FAIL("request %llu never completed", (unsigned long long)id);
	memset(out, 0, sizeof *out);
	out->status = KVL_ETIMEDOUT;
}

/* PAGES page hashes (`tag` tells sets apart), their source slots 0.. with
 * their patterns written into the host image, and destination slots from
 * the top. */
static void make_pages(kvl_hash *pages, size_t *src, size_t *dst,
                       uint8_t tag)
{
	for (size_t i = 0; i < PAGES; i++) {
		memset(&pages[i], 0, sizeof pages[i]);
		pages[i].bytes[0] = (uint8_t)i;
		pages[i].bytes[1] = tag;
		src[i] = i;
		dst[i] = SLOTS - 1 - i;
		fill_slot(i, src[i]);
	}
}

/* Copies host -> device -> host through the copier with chunks of one
 * shape: `n` chunks of `len` bytes (plus k % 3 for odd tails), at offsets
 * shifted by `skew` bytes (unaligned when skew % 16), and compares. Small
 * chunks go a warp each, large ones a block each. */
/* A gather of n chunks of about len bytes to the device and back, by the
 * kernel or, with `batch`, by the copy engines where the chunks are long
 * enough (then every byte must have gone that way). */
static void copier_roundtrip(size_t n, size_t len, size_t skew, int batch)
{
	size_t slot = len + 64, total = n * slot;
	uint8_t *src = kvl__cuda_host_alloc(total);
	uint8_t *back = kvl__cuda_host_alloc(total);
	uint8_t *dev = kvl__cuda_dev_alloc(total);
	kvl__copier *cp = NULL;
	const char *why = "";
	EXPECT_TRUE_MSG(src && back && dev &&
	                        !kvl__copier_create(0, 2, n, 0, batch, &cp, &why),
	                "copier setup: %s", why);
	if (!cp)
		goto out;
	for (size_t i = 0; i < total; i++)
		src[i] = (uint8_t)(i * 7 + i / 251);
	memset(back, 0, total);
	cudaMemset(dev, 0, total);
	for (int dir = 0; dir < 2; dir++) {
		kvl__chunk *ch = kvl__copier_chunks(cp);
		for (size_t k = 0; k < n; k++) {
			/* Reverse order on the device side: a gather. */
			uint8_t *h = (dir ? back : src) + k * slot + skew;
			uint8_t *d = dev + (n - 1 - k) * slot + skew;
			ch[k] = (kvl__chunk){.src = dir ? d : h,
			                     .dst = dir ? h : d,
			                     .len = len + k % 3};
		}
		uint64_t dma = 0, want = 0;
		for (size_t k = 0; k < n; k++)
			want += ch[k].len;
		EXPECT_TRUE_MSG(!kvl__copier_launch(cp, n, &dma) &&
		                        !kvl__copier_record(cp, dir) &&
		                        !kvl__copier_sync(cp, dir),
		                "copy: %s", kvl__cuda_last_error());
		int engines = batch && CUDART_VERSION >= 12080 &&
		              len >= (64u << 10);
		EXPECT_TRUE_MSG(dma == (engines ? want : 0),
		                "copier (batch %d, %zu x %zu B): %llu bytes by "
		                "the copy engines, expected %llu", batch, n, len,
		                (unsigned long long)dma,
		                (unsigned long long)(engines ? want : 0));
	}
	size_t bad = 0;
	for (size_t k = 0; k < n; k++) {
		size_t at = k * slot + skew, l = len + k % 3;
		bad += memcmp(src + at, back + at, l) != 0;
		bad += back[at + l] != 0 || (at && back[at - 1] != 0);
	}
	EXPECT_EQ_MSG(bad, 0, "wrong of %zu chunks of %zu bytes (skew %zu)", n,
	              len, skew);
out:
	kvl__copier_destroy(cp);
	kvl__cuda_host_free(src);
	kvl__cuda_host_free(back);
	kvl__cuda_dev_free(dev);
}

/* A batch started after an engine event: a kernel still reading the
 * slots (for 300 ms) sees none of the batch's bytes, and the batch's
 * pages are all in slots dst once it is done. */
static void gated_load(kvl_linker *lk, const kvl_hash *pages,
                       const size_t *dst)
{
	uint8_t *snap = kvl__cuda_dev_alloc(pool_bytes);
	EXPECT_TRUE_MSG(snap != NULL, "cudaMalloc of the snapshot");
	cudaStream_t s;
	cudaEvent_t ev;
	cudaStreamCreate(&s);
	cudaEventCreate(&ev);
	const size_t *dl[1] = {dst};
	kvl_completion c;
	uint64_t batch;
	cudaMemset(dev_pool, 0, pool_bytes);
	cudaMemset(snap, 0xff, pool_bytes);
	cudaDeviceSynchronize();
	EXPECT_CODE_MSG(kvl_test_slow_read(dev_pool, snap, pool_bytes,
	                                   300000000ull, s),
	                0, "the reader kernel: %s",
	                cudaGetErrorString(cudaGetLastError()));
	cudaEventRecord(ev, s);
	int rc = kvl_linker_load(lk, 3, pages, PAGES, dl);
	EXPECT_RC(lk, rc, 0);
	rc = kvl_linker_start_after(lk, ev, &batch);
	EXPECT_RC(lk, rc, 0);
	cudaEventRecord(ev, 0); /* a later record does not count */
	for (uint32_t layer = 0; layer < LAYERS; layer++) {
		rc = kvl_linker_wait(lk, batch, layer, 10000);
		EXPECT_RC(lk, rc, 0);
	}
	collect(lk, 3, &c);
	EXPECT_CODE_MSG(c.status, 0, "gated load: %zu valid", c.valid_pages);
	cudaStreamSynchronize(s);
	cudaMemcpy(host, snap, pool_bytes, cudaMemcpyDeviceToHost);
	size_t written = 0;
	for (size_t i = 0; i < pool_bytes; i++)
		written += host[i] != 0;
	EXPECT_EQ_MSG(written, 0, "the reader saw %zu bytes of the batch",
	              written);
	cudaMemcpy(host, dev_pool, pool_bytes, cudaMemcpyDeviceToHost);
	for (size_t i = 0; i < PAGES; i++)
		EXPECT_TRUE_MSG(slot_ok(i, dst[i], LAYERS),
		                "gated load: page %zu in slot %zu", i, dst[i]);
	kvl__cuda_dev_free(snap);
	cudaEventDestroy(ev);
	cudaStreamDestroy(s);
}

/* Loads `pages` into slots `dst` and returns the completion; layer 0
 * through a stream wait, the rest on the CPU. */
static kvl_completion load_all(kvl_linker *lk, uint64_t id,
                               const kvl_hash *pages, const size_t *dst,
                               cudaStream_t s)
{
	cudaMemset(dev_pool, 0, pool_bytes);
	cudaDeviceSynchronize();
	const size_t *dl[1] = {dst};
	kvl_completion c;
	int rc = kvl_linker_load(lk, id, pages, PAGES, dl);
	EXPECT_RC(lk, rc, 0);
	uint64_t batch;
	rc = kvl_linker_start(lk, &batch);
	EXPECT_RC(lk, rc, 0);
	kvl_linker_wait_stream(lk, batch, 0, s, 10000);
	kvl_linker_wait(lk, batch, LAYERS - 1, 10000);
	collect(lk, id, &c);
	cudaStreamSynchronize(s);
	cudaMemcpy(host, dev_pool, pool_bytes, cudaMemcpyDeviceToHost);
	return c;
}

/* Makes PAGES pages (tag), puts their patterns in their source slots on
 * the GPU and offloads them in one request, which must store them all. */
static void offload_pages(kvl_linker *lk, kvl_hash *pages, size_t *src,
                          size_t *dst, uint8_t tag, const char *what)
{
	make_pages(pages, src, dst, tag);
	cudaMemcpy(dev_pool, host, pool_bytes, cudaMemcpyHostToDevice);
	const size_t *sl[1] = {src};
	kvl_completion c;
	EXPECT_RC(lk, kvl_linker_offload(lk, 1, pages, PAGES, sl, NULL), 0);
	collect(lk, 1, &c);
	EXPECT_CODE_MSG(c.status, 0, "%s: offload: %zu valid", what,
	                c.valid_pages);
	EXPECT_EQ_MSG(c.valid_pages, PAGES, "%s: offload: %s", what,
	              kvl_err_name(c.status));
}

/* Offload and load through store `uri` with io_batch items per call:
 * bytes right, a missing page fails cleanly; on fault stores (no peek: the
 * staged path) corrupted reads too. */
static void through_store(kvl_layout *l, const char *uri, uint32_t io_batch)
{
	printf("store %s, io_batch %u\n", uri, io_batch);
	char err[256] = "", curi[256];
	kvl_store *st = NULL;
	kvl_linker *lk = NULL;
	kvl_linker_opts o = {.struct_size = sizeof o, .io_batch = io_batch};
	int rc = kvl_store_open(uri, &st, err, sizeof err);
	EXPECT_CODE_MSG(rc, 0, "%s: %s", uri, err);
	rc = kvl_linker_open(st, l, &o, &lk, err, sizeof err);
	EXPECT_CODE_MSG(rc, 0, "%s, io_batch %u: linker: %s", uri, io_batch,
	                err);
	if (!lk) {
		kvl_store_close(st);
		return;
	}
	kvl_hash pages[PAGES];
	size_t src[PAGES], dst[PAGES];
	offload_pages(lk, pages, src, dst, 0x77, uri);
	cudaStream_t s;
	cudaStreamCreate(&s);
	const size_t *sl[1] = {src};
	kvl_completion c;

	c = load_all(lk, 2, pages, dst, s);
	EXPECT_CODE_MSG(c.status, 0, "%s, io_batch %u: load: %zu valid", uri,
	                io_batch, c.valid_pages);
	EXPECT_EQ_MSG(c.valid_pages, PAGES, "%s, io_batch %u: load: %s", uri,
	              io_batch, kvl_err_name(c.status));
	for (size_t i = 0; i < PAGES; i++)
		EXPECT_TRUE_MSG(slot_ok(i, dst[i], LAYERS),
		                "%s, io_batch %u: page %zu", uri, io_batch, i);

	/* Page 6 gone: pages 0..5 stay valid. */
	char key[KVL_KEY_MAX];
	kvl_layout_key(l, 0, &pages[6], key, sizeof key);
	const char *kp = key;
	int res;
	kvl_store_remove(st, &kp, 1, &res);
	c = load_all(lk, 3, pages, dst, s);
	EXPECT_CODE_MSG(c.status, KVL_ENOTFOUND, "%s: missing page: %zu valid",
	                uri, c.valid_pages);
	EXPECT_EQ_MSG(c.valid_pages, 6, "%s: missing page: %s", uri,
	              kvl_err_name(c.status));
	for (size_t i = 0; i < 6; i++)
		EXPECT_TRUE_MSG(slot_ok(i, dst[i], LAYERS),
		                "%s: page %zu before the missing one", uri, i);
	kvl_linker_close(lk);
	kvl_store_close(st);
	if (strncmp(uri, "fault+", 6) != 0) {
		cudaStreamDestroy(s);
		return;
	}

	/* Reads with flipped bits: the checksums catch them, and every page
	 * reported valid is right. */
	snprintf(curi, sizeof curi, "%s&fault.corrupt=0.5&fault.seed=3", uri);
	rc = kvl_store_open(curi, &st, err, sizeof err);
	EXPECT_CODE_MSG(rc, 0, "%s: %s", curi, err);
	rc = kvl_linker_open(st, l, &o, &lk, err, sizeof err);
	EXPECT_CODE_MSG(rc, 0, "%s: linker: %s", curi, err);
	if (lk) {
		for (size_t i = 0; i < PAGES; i++)
			fill_slot(i, src[i]);
		cudaMemcpy(dev_pool, host, pool_bytes,
		           cudaMemcpyHostToDevice);
		EXPECT_RC(lk, kvl_linker_offload(lk, 4, pages, PAGES, sl, NULL),
		          0);
		collect(lk, 4, &c);
		c = load_all(lk, 5, pages, dst, s);
		EXPECT_CODE_MSG(c.status, KVL_ECORRUPT,
		                "%s: corrupted reads: %zu valid", curi,
		                c.valid_pages);
		EXPECT_TRUE_MSG(c.valid_pages < PAGES,
		                "%s: corrupted reads: %s, %zu valid", curi,
		                kvl_err_name(c.status), c.valid_pages);
		for (size_t i = 0; i < c.valid_pages; i++)
			EXPECT_TRUE_MSG(slot_ok(i, dst[i], LAYERS),
			                "%s: valid page %zu", curi, i);
		kvl_linker_close(lk);
	}
	kvl_store_close(st);
	cudaStreamDestroy(s);
}

/* Load c brought every page, each into its slot of `slots`. */
static void expect_all_loaded(kvl_completion c, const size_t *slots,
                              const char *what)
{
	EXPECT_EQ_MSG(c.valid_pages, PAGES, "%s: %s", what,
	              kvl_err_name(c.status));
	for (size_t i = 0; i < PAGES; i++)
		EXPECT_TRUE_MSG(slot_ok(i, slots[i], LAYERS), "%s: page %zu",
		                what, i);
}

/* A counter of the linker's stats (UINT64_MAX if not found). */
static uint64_t counter(kvl_linker *lk, const char *name)
{
	static char buf[16384];
	size_t need;
	if (kvl_linker_stats_render(lk, KVL_STATS_JSON, buf, sizeof buf,
	                            &need))
		return UINT64_MAX;
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\":", name);
	const char *at = strstr(buf, pat);
	return at ? strtoull(at + strlen(pat), NULL, 10) : UINT64_MAX;
}

/* Loads every page into dst (one request) and pages bad+1.. into their
 * source slots (a second request of the batch) while page `bad` of the
 * run fails with `code`: the wait for layer 0 says so, the first request
 * keeps pages 0..bad-1, the second completes, and their bytes are right. */
static void fail_in_run(kvl_linker *lk, const kvl_hash *pages,
                        const size_t *dst, const size_t *src, size_t bad,
                        int code, const char *what)
{
	cudaMemset(dev_pool, 0, pool_bytes);
	cudaDeviceSynchronize();
	const size_t *dl[1] = {dst}, *tl[1] = {&src[bad + 1]};
	size_t tail = PAGES - bad - 1;
	EXPECT_RC(lk, kvl_linker_load(lk, 5, pages, PAGES, dl), 0);
	EXPECT_RC(lk, kvl_linker_load(lk, 6, &pages[bad + 1], tail, tl), 0);
	uint64_t batch;
	EXPECT_RC(lk, kvl_linker_start(lk, &batch), 0);
	EXPECT_CODE_MSG(kvl_linker_wait(lk, batch, 0, 10000), code,
	                "%s: layer 0", what);
	kvl_linker_wait(lk, batch, LAYERS - 1, 10000);
	kvl_completion cs[2];
	collect(lk, 5, &cs[0]);
	collect(lk, 6, &cs[1]);
	EXPECT_CODE_MSG(cs[0].status, code, "%s: %zu valid", what,
	                cs[0].valid_pages);
	EXPECT_EQ_MSG(cs[0].valid_pages, bad, "%s", what);
	EXPECT_CODE_MSG(cs[1].status, 0, "%s: tail: %zu valid", what,
	                cs[1].valid_pages);
	EXPECT_EQ_MSG(cs[1].valid_pages, tail, "%s: tail", what);
	cudaMemcpy(host, dev_pool, pool_bytes, cudaMemcpyDeviceToHost);
	for (size_t i = 0; i < bad; i++)
		EXPECT_TRUE_MSG(slot_ok(i, dst[i], LAYERS), "%s: page %zu",
		                what, i);
	for (size_t i = bad + 1; i < PAGES; i++)
		EXPECT_TRUE_MSG(slot_ok(i, src[i], LAYERS), "%s: tail page %zu",
		                what, i);
}

/* Loads through the copy engines (gpu_copy, a staging ring of `staging`
 * bytes): the objects of one offload lie at one pitch in the store (one
 * run); loads move `want_dma` of their bytes by DMA (1: all, 0: none) and
 * land right, into slots in reverse order and into slots that follow one
 * another, also after an engine event while a kernel reads the slots; a
 * run broken by an object stored again elsewhere (three
 * runs) still lands right; an object forged or gone in the middle of a
 * run fails its request from there, and a second request of the same
 * batch reading the run's tail completes. A small ring wraps many times per layer. */
static void dma_loads(kvl_layout *l, uint32_t gpu_copy, uint32_t staging,
                      int want_dma)
{
	printf("gpu_copy %u, staging %u bytes\n", gpu_copy, staging);
	char err[256] = "";
	kvl_store *st = NULL;
	kvl_linker *lk = NULL;
	kvl_linker_opts o = {.struct_size = sizeof o, .gpu_copy = gpu_copy,
	                     .gpu_staging = staging};
	int rc = kvl_store_open("mem:?capacity=256MiB", &st, err, sizeof err);
	EXPECT_CODE_MSG(rc, 0, "store: %s", err);
	rc = kvl_linker_open(st, l, &o, &lk, err, sizeof err);
	EXPECT_CODE_MSG(rc, 0, "linker: %s", err);
	if (!lk) {
		kvl_store_close(st);
		return;
	}
	kvl_hash pages[PAGES];
	size_t src[PAGES], dst[PAGES];
	offload_pages(lk, pages, src, dst, (uint8_t)(0x30 + gpu_copy),
	              "gpu_copy");
	cudaStream_t s;
	cudaStreamCreate(&s);
	kvl_completion c;

	/* One run: object i at the first + i * its 64-byte rounded size. */
	char keys[PAGES][KVL_KEY_MAX];
	const char *kp[PAGES];
	kvl__view views[PAGES];
	int res[PAGES];
	for (size_t i = 0; i < PAGES; i++) {
		kvl_layout_key(l, 0, &pages[i], keys[i], sizeof keys[i]);
		kp[i] = keys[i];
	}
	size_t size, hdr;
	kvl_layout_object_size(l, 0, &size, &hdr);
	EXPECT_CODE(kvl__store_peek(st, kp, PAGES, views, res), 0);
	for (size_t i = 0; i < PAGES; i++)
		EXPECT_TRUE_MSG(res[i] == 1 && views[i].pinned &&
		                        views[i].data == views[0].data +
		                                i * ((size + 63) & ~(size_t)63),
		                "object %zu is not where the run goes on", i);
	kvl__store_release(st, views, PAGES);

	uint64_t bytes0 = counter(lk, "loaded_bytes");
	uint64_t dma0 = counter(lk, "loaded_dma_bytes");
	expect_all_loaded(load_all(lk, 2, pages, dst, s), dst, "load");
	uint64_t bytes = counter(lk, "loaded_bytes") - bytes0;
	uint64_t dma = counter(lk, "loaded_dma_bytes") - dma0;
	EXPECT_TRUE_MSG(bytes > 0 && dma == (want_dma ? bytes : 0),
	                "%llu of %llu loaded bytes went by DMA",
	                (unsigned long long)dma, (unsigned long long)bytes);

	/* Slots that follow one another, also after an engine event. */
	size_t up[PAGES];
	for (size_t i = 0; i < PAGES; i++)
		up[i] = 2 * PAGES + i;
	expect_all_loaded(load_all(lk, 7, pages, up, s), up,
	                  "slots that follow");
	gated_load(lk, pages, up);

	/* Page 6 stored again lands after the run: runs 0-5, 6, 7-15. */
	int one;
	kvl_store_remove(st, &kp[6], 1, &one);
	fill_slot(6, src[6]);
	cudaMemcpy(dev_pool, host, pool_bytes, cudaMemcpyHostToDevice);
	const size_t *sl6[1] = {&src[6]};
	EXPECT_RC(lk, kvl_linker_offload(lk, 3, &pages[6], 1, sl6, NULL), 0);
	collect(lk, 3, &c);
	EXPECT_EQ_MSG(c.valid_pages, 1, "offload of page 6: %s",
	              kvl_err_name(c.status));
	expect_all_loaded(load_all(lk, 4, pages, dst, s), dst, "broken run");

	/* Page 3's header forged in store memory (its page hash): the run's
	 * copy goes ahead, the check that fails page 3 lands before layer 0
	 * is published. Then page 11 gone. */
	kvl__view v3;
	int r3 = 0;
	EXPECT_CODE(kvl__store_peek(st, &kp[3], 1, &v3, &r3), 0);
	EXPECT_EQ_MSG(r3, 1, "page 3 to forge is not in the store");
	if (r3 == 1) {
		((uint8_t *)v3.data)[32] ^= 1;
		fail_in_run(lk, pages, dst, src, 3, KVL_ECORRUPT, "forged");
		((uint8_t *)v3.data)[32] ^= 1;
		kvl__store_release(st, &v3, 1);
	}
	kvl_store_remove(st, &kp[11], 1, &one);
	fail_in_run(lk, pages, dst, src, 11, KVL_ENOTFOUND, "gone");
	kvl_linker_close(lk);
	kvl_store_close(st);
	cudaStreamDestroy(s);
}

/* Secret files A and B, made once. */
static char secret_a[64], secret_b[64];

static void make_secrets(void)
{
	const char *v[2] = {"GPU test secret A, 0123456789abcdef",
	                    "GPU test secret B, 0123456789abcdef"};
	char *p[2] = {secret_a, secret_b};
	for (int i = 0; i < 2; i++) {
		snprintf(p[i], sizeof secret_a, "/tmp/kvl-gpu-secret.XXXXXX");
		int fd = mkstemp(p[i]);
		EXPECT_TRUE(fd >= 0);
		if (fd < 0)
			continue;
		FILE *f = fdopen(fd, "w");
		fputs(v[i], f);
		fclose(f);
	}
}

/* Offloads through a store with secret A (`wuri`), copies the objects raw
 * into store `ruri` (secret B, or none) and loads there: no page is valid
 * (KVL_ECORRUPT); with A again every page is. */
static void other_secret(kvl_layout *l, const char *wuri, const char *ruri)
{
	printf("keyed %s, read by %s\n", wuri, ruri);
	char err[256] = "";
	kvl_store *w = NULL, *r = NULL;
	kvl_linker *wl = NULL, *rl = NULL;
	EXPECT_CODE_MSG(kvl_store_open(wuri, &w, err, sizeof err), 0, "%s: %s",
	                wuri, err);
	EXPECT_CODE_MSG(kvl_store_open(ruri, &r, err, sizeof err), 0, "%s: %s",
	                ruri, err);
	if (!w || !r)
		goto out;
	EXPECT_CODE_MSG(kvl_linker_open(w, l, NULL, &wl, err, sizeof err), 0,
	                "%s", err);
	EXPECT_CODE_MSG(kvl_linker_open(r, l, NULL, &rl, err, sizeof err), 0,
	                "%s", err);
	if (!wl || !rl)
		goto out;
	kvl_hash pages[PAGES];
	size_t src[PAGES], dst[PAGES];
	make_pages(pages, src, dst, 0x99);
	cudaStream_t s;
	cudaStreamCreate(&s);
	cudaMemcpy(dev_pool, host, pool_bytes, cudaMemcpyHostToDevice);
	const size_t *sl[1] = {src};
	kvl_completion c;
	EXPECT_RC(wl, kvl_linker_offload(wl, 1, pages, PAGES, sl, NULL), 0);
	collect(wl, 1, &c);
	EXPECT_EQ_MSG(c.valid_pages, PAGES, "%s: offload: %s", wuri,
	              kvl_err_name(c.status));
	size_t size;
	kvl_layout_object_size(l, 0, &size, NULL);
	uint8_t *obj = malloc(size);
	for (size_t i = 0; obj && i < PAGES; i++) {
		char key[KVL_KEY_MAX];
		kvl_layout_key(l, 0, &pages[i], key, sizeof key);
		const char *kp = key;
		kvl_range whole = {0, obj, size};
		kvl_iov piece = {obj, size};
		size_t one = 1;
		int got = -100, res = -100;
		kvl_store_get(w, &kp, 1, &whole, &one, &got);
		EXPECT_CODE(got, 0);
		kvl_store_put(r, &kp, 1, &piece, &one, &res);
		EXPECT_CODE(res, KVL_PUT_STORED);
	}
	free(obj);
	c = load_all(rl, 2, pages, dst, s);
	EXPECT_CODE_MSG(c.status, KVL_ECORRUPT, "%s: %zu valid", ruri,
	                c.valid_pages);
	EXPECT_EQ_MSG(c.valid_pages, 0, "%s: %s", ruri,
	              kvl_err_name(c.status));
	c = load_all(wl, 3, pages, dst, s);
	EXPECT_EQ_MSG(c.valid_pages, PAGES, "%s: load: %s", wuri,
	              kvl_err_name(c.status));
	for (size_t i = 0; i < PAGES; i++)
		EXPECT_TRUE_MSG(slot_ok(i, dst[i], LAYERS), "%s: page %zu",
		                wuri, i);
	cudaStreamDestroy(s);
out:
	kvl_linker_close(wl);
	kvl_linker_close(rl);
	kvl_store_close(w);
	kvl_store_close(r);
}

/* A linker with a GPU pool and a host pool: a batch started after an event
 * writes the host slots only once the event completed, too (the loader
 * waits for it), while a kernel still reads them (the host pool lives in
 * pinned, mapped memory that kernels read in place). */
static void gated_host_pool(void)
{
	const size_t hb = (size_t)LAYERS * SLOTS * PAGE_BYTES;
	uint8_t *hp = kvl__cuda_host_alloc(hb);
	uint8_t *snap = kvl__cuda_dev_alloc(hb);
	EXPECT_TRUE_MSG(hp && snap, "pinned host pool and snapshot");
	if (!hp || !snap)
		return;
	kvl_layout *l;
	int kv, hpool;
	kvl_layout_create("gpu-mixed", 16, NULL, &l, NULL, 0);
	kvl_layout_add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0, &kv);
	kvl_layout_add_pool(l, "h", KVL_HIT_ALL_PAGES, 0, 0, &hpool);
	for (uint32_t layer = 0; layer < LAYERS; layer++) {
		kvl_buffer b = {.base = at(dev_pool, layer, 0, 0),
		                .page_stride = PAGE_BYTES,
		                .page_bytes = PAGE_BYTES, .num_pages = SLOTS,
		                .mem = KVL_MEM_CUDA, .device = 0};
		kvl_layout_add_buffer(l, kv, "k", layer, &b);
		kvl_buffer h = {.base = hp + (size_t)layer * SLOTS * PAGE_BYTES,
		                .page_stride = PAGE_BYTES,
		                .page_bytes = PAGE_BYTES, .num_pages = SLOTS,
		                .mem = KVL_MEM_HOST};
		kvl_layout_add_buffer(l, hpool, "c", layer, &h);
	}
	int rc = kvl_layout_finalize(l);
	EXPECT_RC(l, rc, 0);
	kvl_store *st;
	char err[256];
	rc = kvl_store_open("mem:?capacity=256MiB", &st, err, sizeof err);
	EXPECT_RC(err, rc, 0);
	kvl_linker *lk = NULL;
	rc = kvl_linker_open(st, l, NULL, &lk, err, sizeof err);
	EXPECT_RC(err, rc, 0);
	if (!lk)
		return;

	kvl_hash pages[PAGES];
	size_t src[PAGES], dst[PAGES];
	make_pages(pages, src, dst, 0x6c);
	cudaMemcpy(dev_pool, host, pool_bytes, cudaMemcpyHostToDevice);
	for (size_t i = 0; i < PAGES; i++)
		for (size_t layer = 0; layer < LAYERS; layer++)
			for (size_t k = 0; k < PAGE_BYTES; k++)
				hp[(layer * SLOTS + src[i]) * PAGE_BYTES + k] =
					pattern(i, layer, 9, k);
	const size_t *sl[2] = {src, src};
	rc = kvl_linker_offload(lk, 1, pages, PAGES, sl, NULL);
	EXPECT_RC(lk, rc, 0);
	kvl_completion c;
	collect(lk, 1, &c);
	EXPECT_CODE_MSG(c.status, 0, "mixed offload: %zu valid",
	                c.valid_pages);

	memset(hp, 0, hb);
	cudaMemset(snap, 0xff, hb);
	cudaDeviceSynchronize();
	cudaStream_t s;
	cudaEvent_t ev;
	cudaStreamCreate(&s);
	cudaEventCreate(&ev);
	EXPECT_CODE_MSG(kvl_test_slow_read(hp, snap, hb, 300000000ull, s), 0,
	                "the reader kernel on host slots");
	cudaEventRecord(ev, s);
	const size_t *dl[2] = {dst, dst};
	rc = kvl_linker_load(lk, 2, pages, PAGES, dl);
	EXPECT_RC(lk, rc, 0);
	uint64_t batch;
	rc = kvl_linker_start_after(lk, ev, &batch);
	EXPECT_RC(lk, rc, 0);
	for (uint32_t layer = 0; layer < LAYERS; layer++) {
		rc = kvl_linker_wait(lk, batch, layer, 10000);
		EXPECT_RC(lk, rc, 0);
	}
	collect(lk, 2, &c);
	EXPECT_CODE_MSG(c.status, 0, "mixed gated load: %zu valid",
	                c.valid_pages);
	cudaStreamSynchronize(s);
	uint8_t *seen = malloc(hb);
	cudaMemcpy(seen, snap, hb, cudaMemcpyDeviceToHost);
	size_t written = 0;
	for (size_t i = 0; i < hb; i++)
		written += seen[i] != 0;
	EXPECT_EQ_MSG(written, 0,
	              "the reader of host slots saw %zu bytes of the batch",
	              written);
	size_t bad = 0;
	for (size_t i = 0; i < PAGES; i++)
		for (size_t layer = 0; layer < LAYERS; layer++)
			for (size_t k = 0; k < PAGE_BYTES; k++)
				bad += hp[(layer * SLOTS + dst[i]) * PAGE_BYTES +
				          k] != pattern(i, layer, 9, k);
	EXPECT_EQ_MSG(bad, 0, "mixed gated load: %zu wrong host bytes", bad);
	free(seen);
	cudaEventDestroy(ev);
	cudaStreamDestroy(s);
	kvl_linker_close(lk);
	kvl_store_close(st);
	kvl_layout_free(l);
	kvl__cuda_dev_free(snap);
	kvl__cuda_host_free(hp);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int n_dev = 0;
	if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
		printf("SKIP test_gpu: no usable CUDA device\n");
		return 77;
	}
	if (cudaMalloc((void **)&dev_pool, pool_bytes) != cudaSuccess) {
		printf("FAIL: cudaMalloc\n");
		return 1;
	}
	for (int batch = 0; batch < 2; batch++) {
		copier_roundtrip(3000, 16 << 10, 0, batch);   /* warp per chunk */
		copier_roundtrip(1000, 4093, 5, batch);       /* warp, unaligned */
		copier_roundtrip(16, 2 << 20, 0, batch);      /* block per chunk */
		copier_roundtrip(5, (1 << 20) + 3, 9, batch); /* block, unaligned */
		copier_roundtrip(1, 7, 1, batch);             /* a few bytes */
		copier_roundtrip(700, 32 << 10, 3, batch);    /* kernel still */
		copier_roundtrip(300, 64 << 10, 3, batch);    /* engines' least */
	}

	host = calloc(1, pool_bytes);
	kvl_layout *l = make_layout();
	kvl_store *st;
	char err[256];
	int rc = kvl_store_open("mem:?capacity=256MiB", &st, err, sizeof err);
	EXPECT_RC(err, rc, 0);
	kvl_linker *lk = NULL;
	rc = kvl_linker_open(st, l, NULL, &lk, err, sizeof err);
	EXPECT_RC(err, rc, 0);
	if (!lk)
		return 1;

	/* Offload pages 0..PAGES-1 from slots 0.. after an engine event. */
	kvl_hash pages[PAGES];
	size_t src[PAGES], dst[PAGES];
	make_pages(pages, src, dst, 0x5a);
	cudaStream_t s;
	cudaEvent_t ev;
	cudaStreamCreate(&s);
	cudaEventCreate(&ev);
	cudaMemcpyAsync(dev_pool, host, pool_bytes, cudaMemcpyHostToDevice, s);
	cudaEventRecord(ev, s);
	const size_t *sl[1] = {src};
	rc = kvl_linker_offload(lk, 1, pages, PAGES, sl, ev);
	EXPECT_RC(lk, rc, 0);
	kvl_completion c;
	collect(lk, 1, &c);
	EXPECT_CODE_MSG(c.status, 0, "offload: %zu valid", c.valid_pages);
	EXPECT_EQ_MSG(c.valid_pages, PAGES, "offload: status %s",
	              kvl_err_name(c.status));

	size_t hit = 0;
	rc = kvl_linker_lookup(lk, pages, PAGES, NULL, &hit);
	EXPECT_RC(lk, rc, 0);
	EXPECT_EQ_MSG(hit, PAGES, "lookup: %s", kvl_err_name(rc));

	/* Load into other slots; layer 0 through a stream wait, the rest on
	 * the CPU. */
	cudaMemset(dev_pool, 0, pool_bytes);
	cudaDeviceSynchronize();
	const size_t *dl[1] = {dst};
	rc = kvl_linker_load(lk, 2, pages, PAGES, dl);
	EXPECT_RC(lk, rc, 0);
	uint64_t batch;
	rc = kvl_linker_start(lk, &batch);
	EXPECT_RC(lk, rc, 0);
	rc = kvl_linker_wait_stream(lk, batch, 0, s, 10000);
	EXPECT_RC(lk, rc, 0);
	cudaMemcpyAsync(host, dev_pool, pool_bytes, cudaMemcpyDeviceToHost, s);
	cudaStreamSynchronize(s);
	for (size_t i = 0; i < PAGES; i++)
		EXPECT_TRUE_MSG(slot_ok(i, dst[i], 1),
		                "layer 0 of page %zu after the stream wait", i);
	for (uint32_t layer = 0; layer < LAYERS; layer++) {
		rc = kvl_linker_wait(lk, batch, layer, 10000);
		EXPECT_RC(lk, rc, 0);
	}
	collect(lk, 2, &c);
	EXPECT_CODE_MSG(c.status, 0, "load: %zu valid", c.valid_pages);
	EXPECT_EQ_MSG(c.valid_pages, PAGES, "load: %s", kvl_err_name(c.status));
	cudaMemcpy(host, dev_pool, pool_bytes, cudaMemcpyDeviceToHost);
	for (size_t i = 0; i < PAGES; i++)
		EXPECT_TRUE_MSG(slot_ok(i, dst[i], LAYERS),
		                "page %zu in slot %zu", i, dst[i]);

	gated_load(lk, pages, dst);

	/* Page 5 evicted after the lookup: pages 0..4 stay valid. */
	char key[KVL_KEY_MAX];
	kvl_layout_key(l, 0, &pages[5], key, sizeof key);
	const char *kp = key;
	int res;
	kvl_store_remove(st, &kp, 1, &res);
	rc = kvl_linker_load(lk, 3, pages, PAGES, dl);
	EXPECT_RC(lk, rc, 0);
	kvl_linker_start(lk, &batch);
	rc = kvl_linker_wait(lk, batch, LAYERS - 1, 10000);
	EXPECT_RC(lk, rc, KVL_ENOTFOUND);
	collect(lk, 3, &c);
	EXPECT_CODE_MSG(c.status, KVL_ENOTFOUND, "evicted: %zu valid",
	                c.valid_pages);
	EXPECT_EQ_MSG(c.valid_pages, 5, "evicted: %s", kvl_err_name(c.status));

	/* An untrusted store (verify=1): offloads sum every layer, loads check
	 * each layer's sum; a flipped payload byte fails its page. */
	{
		kvl_store *vst;
		kvl_linker *vlk = NULL;
		rc = kvl_store_open("mem:?capacity=256MiB&verify=1", &vst, err,
		                    sizeof err);
		EXPECT_CODE_MSG(rc, 0, "verify store: %s", err);
		rc = kvl_linker_open(vst, l, NULL, &vlk, err, sizeof err);
		EXPECT_CODE_MSG(rc, 0, "verify linker: %s", err);
		for (size_t i = 0; i < PAGES; i++)
			fill_slot(i, src[i]);
		cudaMemcpy(dev_pool, host, pool_bytes, cudaMemcpyHostToDevice);
		rc = kvl_linker_offload(vlk, 4, pages, PAGES, sl, NULL);
		EXPECT_RC(vlk, rc, 0);
		collect(vlk, 4, &c);
		EXPECT_CODE_MSG(c.status, 0, "verify offload: %zu valid",
		                c.valid_pages);
		EXPECT_EQ_MSG(c.valid_pages, PAGES, "verify offload: %s",
		              kvl_err_name(c.status));
		/* Flip one byte of page 3's last layer, in store memory. */
		char k3[KVL_KEY_MAX];
		kvl_layout_key(l, 0, &pages[3], k3, sizeof k3);
		size_t size, hdr;
		kvl_layout_object_size(l, 0, &size, &hdr);
		uint8_t *obj = malloc(size);
		const char *kp3 = k3;
		kvl_range whole = {0, obj, size};
		size_t one = 1;
		int got;
		kvl_store_get(vst, &kp3, 1, &whole, &one, &got);
		obj[size - 1] ^= 1;
		kvl_store_remove(vst, &kp3, 1, &res);
		kvl_iov piece = {obj, size};
		kvl_store_put(vst, &kp3, 1, &piece, &one, &res);
		free(obj);
		cudaMemset(dev_pool, 0, pool_bytes);
		cudaDeviceSynchronize();
		/* Two requests in one batch read page 3: each fails it, not
		 * only the first. */
		rc = kvl_linker_load(vlk, 5, pages, PAGES, dl);
		EXPECT_RC(vlk, rc, 0);
		rc = kvl_linker_load(vlk, 6, pages, 4, sl);
		EXPECT_RC(vlk, rc, 0);
		kvl_linker_start(vlk, &batch);
		rc = kvl_linker_wait(vlk, batch, LAYERS - 1, 10000);
		EXPECT_RC(vlk, rc, KVL_ECORRUPT);
		kvl_completion cs[2];
		size_t n_done = 0;
		for (int tries = 0; n_done < 2 && tries < 100; tries++) {
			size_t n = 0;
			kvl_linker_poll(vlk, cs + n_done, 2 - n_done, &n, 100);
			n_done += n;
		}
		EXPECT_EQ_MSG(n_done, 2, "verify load: completions");
		for (size_t k = 0; k < n_done; k++) {
			EXPECT_CODE_MSG(cs[k].status, KVL_ECORRUPT,
			                "verify load %llu: %zu valid",
			                (unsigned long long)cs[k].id,
			                cs[k].valid_pages);
			EXPECT_EQ_MSG(cs[k].valid_pages, 3,
			              "verify load %llu: %s",
			              (unsigned long long)cs[k].id,
			              kvl_err_name(cs[k].status));
		}
		cudaMemcpy(host, dev_pool, pool_bytes, cudaMemcpyDeviceToHost);
		for (size_t i = 0; i < 3; i++)
			EXPECT_TRUE_MSG(slot_ok(i, dst[i], LAYERS) &&
			                        slot_ok(i, src[i], LAYERS),
			                "verified page %zu", i);
		kvl_linker_close(vlk);
		kvl_store_close(vst);
	}

	/* Stores that cannot lend their memory load through the pinned
	 * ring: layer by layer, and whole objects at the first layer; io_batch
	 * 3 refills each half many times per layer. With io_batch 3 a launch
	 * holds less than a page's chunks of all layers: offloads still
	 * go a page at a time. */
	gated_host_pool();
	through_store(l, "mem:?capacity=256MiB", 3);

	/* The copy engines: forced, with the default ring and with one of
	 * three rows a half (wrapping 6 times a layer); a ring too small for
	 * a row, AUTO (8 KiB reads: the kernel) and KERNEL go by kernel. */
	size_t row = 2 * PAGE_BYTES;
	dma_loads(l, KVL_GPU_COPY_DMA, 0, 1);
	dma_loads(l, KVL_GPU_COPY_DMA, (uint32_t)(6 * row), 1);
	dma_loads(l, KVL_GPU_COPY_DMA, (uint32_t)row, 0);
	dma_loads(l, KVL_GPU_COPY_AUTO, 0, 0);
	dma_loads(l, KVL_GPU_COPY_KERNEL, 0, 0);
	through_store(l, "fault+mem:?capacity=256MiB", 0);
	through_store(l, "fault+mem:?capacity=256MiB", 3);
	through_store(l, "fault+mem:?capacity=256MiB&fault.whole_reads=1", 0);
	through_store(l, "fault+mem:?capacity=256MiB&fault.whole_reads=1", 3);

	/* With a secret: the ring path (layer by layer, whole objects) and
	 * the in-place path check MACs; another secret, or none, loads
	 * nothing. */
	make_secrets();
	char ua[160], ub[160], uw[200], un[160];
	snprintf(ua, sizeof ua, "fault+mem:?capacity=256MiB&secret_file=%s",
	         secret_a);
	snprintf(ub, sizeof ub, "fault+mem:?capacity=256MiB&secret_file=%s",
	         secret_b);
	snprintf(uw, sizeof uw, "%s&fault.whole_reads=1", ua);
	snprintf(un, sizeof un, "fault+mem:?capacity=256MiB");
	through_store(l, ua, 0);
	through_store(l, ua, 3);
	through_store(l, uw, 3);
	other_secret(l, ua, ub);
	other_secret(l, ua, un);
	other_secret(l, uw, ub);
	snprintf(uw, sizeof uw,
	         "mem:?capacity=256MiB&verify=1&secret_file=%s", secret_a);
	through_store(l, uw, 3);
	snprintf(ub, sizeof ub,
	         "mem:?capacity=256MiB&verify=1&secret_file=%s", secret_b);
	other_secret(l, uw, ub);
	unlink(secret_a);
	unlink(secret_b);

	kvl_linker_close(lk);
	kvl_store_close(st);
	kvl_layout_free(l);
	cudaFree(dev_pool);
	free(host);
	int failures = kvl_test_failures();
	printf("%s test_gpu: %d failures\n", failures ? "FAIL" : "PASS",
	       failures);
	return failures ? 1 : 0;
}
#endif
