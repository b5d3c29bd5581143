/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_gpu.cu — kvlink's GPU path against the hardware, in one run.
 *
 * For a Llama-3-8B-shaped KV cache (32 layers, 8 KV heads x 128, bf16) of a
 * 32 K-token prefix (4 GiB) and per-layer page chunks (K or V of one page
 * in one layer) of 16 KiB, 32 KiB, 64 KiB, 256 KiB and 2 MiB, it measures:
 *   - the PCIe ceiling: one large pinned host-to-device (and device-to-host)
 *     cudaMemcpyAsync, best of 5;
 *   - the per-chunk baseline: one cudaMemcpyAsync per chunk;
 *   - kvlink's offload of every page from GPU slots into the embedded store,
 *     in runs of 1, 16 and all pages (the store puts the objects of one
 *     offload one after another; groups offloaded in reverse order break
 *     the runs where a group ends);
 *   - for each kind of run (and once more for runs of all pages loaded
 *     into slots in no order, where the copy engines go through the
 *     staging ring and a scatter), and each way of copying (gpu_copy AUTO: the
 *     copy engines for runs that pay, KERNEL: the gather kernel, DMA: the
 *     copy engines for every run): a restore from
 *     lookup to the last layer complete (the headline), the layer-wise load
 *     throughput from start to the last layer (best of 5), the share of
 *     bytes the copy engines moved, and a check of every restored byte;
 *   - overlap, for the runs of all pages: the restore while cuBLAS GEMMs
 *     that fill the GPU compute each layer (about one layer's load time)
 *     after a stream-ordered wait for it, against max(load, compute) plus
 *     the first layer; and the same with a one-block kernel as the
 *     compute, which leaves the other SMs free (a second figure).
 * Prints ratios to the same-run ceiling; --json for one object per chunk
 * size, kind of run and way of copying.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvlink.h"

#define LAYERS 32
#define TOKENS 32768
#define TOKEN_BYTES (8 * 128 * 2) /* one token's K (or V) in one layer */

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

#define CK(x)                                                                 \
	do {                                                                  \
		cudaError_t e_ = (x);                                         \
		if (e_ != cudaSuccess) {                                      \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__,      \
			        cudaGetErrorString(e_));                      \
			exit(1);                                              \
		}                                                             \
	} while (0)

__global__ void fill(uint64_t *p, size_t n, uint64_t seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
}

/* Counts the words of slot dst[p] that differ from slot p, for pages
 * p < pages of `words` words each. */
__global__ void compare(const uint64_t *base, const size_t *dst,
                        size_t pages, size_t words, unsigned long long *bad)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
	     i < pages * words; i += (size_t)gridDim.x * blockDim.x)
		if (base[i] != base[dst[i / words] * words + i % words])
			atomicAdd(bad, 1ull);
}

/* Busy for about `cycles` clock cycles: a layer's compute. */
__global__ void spin(long long cycles)
{
	long long t0 = clock64();
	while (clock64() - t0 < cycles) {
	}
}

/* One chunk size's pool, store and pages. */
typedef struct bench {
	size_t chunk, pages, comp_bytes;
	uint8_t *pool;
	kvl_layout *l;
	kvl_store *st;
	kvl_hash *h;
	size_t *src, *dst, *dst_scattered;
	char *keys;
	const char **keyp;
	cudaStream_t s, compute;
	cudaEvent_t filled;
	double ceiling_h2d, ceiling_d2h, per_chunk, ceiling_2d;
} bench;

/* --staging BYTES: kvl_linker_opts.gpu_staging (0: the default). */
static uint32_t staging_bytes;

/* One restore measurement: a kind of run and a way of copying. */
typedef struct result {
	size_t run;        /* pages per run (SIZE_MAX: all) */
	int scattered;     /* into slots in no order (else consecutive) */
	const char *copy;  /* "auto", "kernel" or "dma" */
	double offload, load, restore_ms, first_layer_ms, load_ms, dma_share;
	unsigned long long bad;
	/* runs of all pages only */
	double gemm_ms, gemm_overlap_ms, spin_ms, spin_overlap_ms;
} result;

/* Ends the run at once: the linkers' threads may still be using CUDA,
 * and exit()'s teardown of the runtime under them crashes. */
static void die(const char *what, const char *msg)
{
	fprintf(stderr, "bench_gpu: %s: %s\n", what, msg);
	fflush(NULL);
	_exit(1);
}

/* The best of 5 copies of len bytes, after one to warm up: the same
 * best-of rule as kvlink's loads below, so that a noisy host moves both. */
static double copy_gbps(void *dst, const void *src, size_t len,
                        cudaMemcpyKind kind, cudaStream_t s)
{
	CK(cudaMemcpyAsync(dst, src, len, kind, s)); /* warm */
	CK(cudaStreamSynchronize(s));
	double best = 0;
	for (int i = 0; i < 5; i++) {
		double t = now_s();
		CK(cudaMemcpyAsync(dst, src, len, kind, s));
		CK(cudaStreamSynchronize(s));
		double g = (double)len / (now_s() - t) / 1e9;
		best = g > best ? g : best;
	}
	return best;
}

static size_t data_bytes(const bench *b)
{
	return (size_t)LAYERS * 2 * b->pages * b->chunk; /* 4 GiB */
}

/* The copy engines' own figure for what kvlink's DMA path does: per
 * layer one cudaMemcpy2DAsync from pinned objects one after another
 * (rows = pages, pitch = an object, width = a layer of it) into packed
 * device memory; best of 3 restores' worth. */
static double copy_2d_gbps(bench *b)
{
	size_t span = 2 * b->chunk, pitch = LAYERS * span + 4096;
	uint8_t *objs, *dev;
	CK(cudaHostAlloc((void **)&objs, b->pages * pitch,
	                 cudaHostAllocDefault));
	memset(objs, 3, b->pages * pitch);
	CK(cudaMalloc((void **)&dev, (size_t)LAYERS * b->pages * span));
	double best = 0;
	for (int rep = 0; rep < 4; rep++) {
		double t = now_s();
		for (uint32_t layer = 0; layer < LAYERS; layer++)
			CK(cudaMemcpy2DAsync(dev + (size_t)layer * b->pages * span,
			                     span, objs + 4096 + layer * span,
			                     pitch, span, b->pages,
			                     cudaMemcpyHostToDevice, b->s));
		CK(cudaStreamSynchronize(b->s));
		double g = (double)data_bytes(b) / (now_s() - t) / 1e9;
		if (rep && g > best)
			best = g;
	}
	CK(cudaFreeHost(objs));
	CK(cudaFree(dev));
	return best;
}

static void bench_open(bench *b, size_t chunk)
{
	memset(b, 0, sizeof *b);
	b->chunk = chunk;
	size_t page_tokens = chunk / TOKEN_BYTES;
	b->pages = TOKENS / page_tokens;
	size_t slots = 2 * b->pages; /* source slots, then restore slots */
	b->comp_bytes = slots * chunk;
	size_t pool_bytes = (size_t)LAYERS * 2 * b->comp_bytes;
	CK(cudaMalloc((void **)&b->pool, pool_bytes));
	CK(cudaMemset(b->pool, 0, pool_bytes));
	CK(cudaStreamCreateWithFlags(&b->s, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&b->compute, cudaStreamNonBlocking));

	/* Ceiling and per-chunk baseline from pinned host memory. */
	size_t big = 1ull << 30;
	void *pinned;
	CK(cudaHostAlloc(&pinned, big, cudaHostAllocDefault));
	memset(pinned, 1, big);
	b->ceiling_h2d = copy_gbps(b->pool, pinned, big,
	                           cudaMemcpyHostToDevice, b->s);
	b->ceiling_d2h = copy_gbps(pinned, b->pool, big,
	                           cudaMemcpyDeviceToHost, b->s);
	size_t n_chunks = big / chunk;
	double t = now_s();
	for (size_t i = 0; i < n_chunks; i++)
		CK(cudaMemcpyAsync(b->pool + (i * 7919 % n_chunks) * chunk,
		                   (char *)pinned + i * chunk, chunk,
		                   cudaMemcpyHostToDevice, b->s));
	CK(cudaStreamSynchronize(b->s));
	b->per_chunk = (double)big / (now_s() - t) / 1e9;
	CK(cudaFreeHost(pinned));
	b->ceiling_2d = copy_2d_gbps(b);

	/* Layout: per layer and component one buffer of `slots` chunks. */
	char err[512];
	if (kvl_layout_create("llama3-8b/bf16", (uint32_t)page_tokens, NULL,
	                      &b->l, err, sizeof err))
		die("layout", err);
	int pool_id;
	kvl_layout_add_pool(b->l, "kv", KVL_HIT_ALL_PAGES, 0, 0, &pool_id);
	for (uint32_t layer = 0; layer < LAYERS; layer++)
		for (int c = 0; c < 2; c++) {
			kvl_buffer buf;
			memset(&buf, 0, sizeof buf);
			buf.base = b->pool +
			           ((size_t)layer * 2 + c) * b->comp_bytes;
			buf.page_stride = chunk;
			buf.page_bytes = chunk;
			buf.num_pages = slots;
			buf.mem = KVL_MEM_CUDA;
			buf.device = 0;
			kvl_layout_add_buffer(b->l, pool_id, c ? "v" : "k", layer,
			                      &buf);
		}
	if (kvl_layout_finalize(b->l))
		die("layout", kvl_layout_errmsg(b->l));
	/* prealloc=1 pins the store's memory at open, as a server would. */
	if (kvl_store_open("mem:?capacity=6GiB&prealloc=1", &b->st, err,
	                   sizeof err))
		die("store", err);

	/* Source pages in slots [0, pages), random bytes. */
	for (uint32_t layer = 0; layer < LAYERS; layer++)
		for (int c = 0; c < 2; c++)
			fill<<<1024, 256, 0, b->s>>>(
				(uint64_t *)(b->pool + ((size_t)layer * 2 + c) *
				                               b->comp_bytes),
				b->pages * chunk / 8, layer * 2 + c);
	CK(cudaEventCreate(&b->filled));
	CK(cudaEventRecord(b->filled, b->s));
	b->h = (kvl_hash *)calloc(b->pages, sizeof *b->h);
	b->src = (size_t *)calloc(b->pages, sizeof *b->src);
	b->dst = (size_t *)calloc(b->pages, sizeof *b->dst);
	b->dst_scattered = (size_t *)calloc(b->pages, sizeof *b->dst);
	b->keys = (char *)malloc(b->pages * KVL_KEY_MAX);
	b->keyp = (const char **)malloc(b->pages * sizeof *b->keyp);
	for (size_t i = 0; i < b->pages; i++) {
		memcpy(b->h[i].bytes, &i, sizeof i);
		b->h[i].bytes[31] = (uint8_t)(chunk >> 10);
		b->src[i] = i;
		b->dst[i] = b->pages + i;
		b->dst_scattered[i] = b->pages + i * 7919 % b->pages;
		b->keyp[i] = b->keys + i * KVL_KEY_MAX;
		kvl_layout_key(b->l, pool_id, &b->h[i], b->keys + i * KVL_KEY_MAX,
		               KVL_KEY_MAX);
	}
}

static void bench_close(bench *b)
{
	kvl_store_close(b->st);
	kvl_layout_free(b->l);
	free(b->h);
	free(b->src);
	free(b->dst);
	free(b->dst_scattered);
	free(b->keys);
	free(b->keyp);
	CK(cudaFree(b->pool));
	CK(cudaStreamDestroy(b->s));
	CK(cudaStreamDestroy(b->compute));
	CK(cudaEventDestroy(b->filled));
}

static kvl_linker *linker(const bench *b, uint32_t gpu_copy)
{
	kvl_linker_opts o = KVL_LINKER_OPTS_INIT;
	o.gpu_copy = gpu_copy;
	o.gpu_staging = staging_bytes;
	kvl_linker *lk;
	char err[512];
	if (kvl_linker_open(b->st, b->l, &o, &lk, err, sizeof err))
		die("linker", err);
	return lk;
}

static void expect_done(kvl_linker *lk, size_t pages, const char *what)
{
	kvl_completion c;
	size_t n;
	kvl_linker_poll(lk, &c, 1, &n, 10000);
	if (!n || c.status || c.valid_pages != pages)
		die(what, n ? kvl_strerror(c.status) : "no completion");
}

/* Drops every object, then offloads every page in groups of `run` pages,
 * the groups in reverse order, in one request: within a group the store
 * puts objects one after another, and a group lies before the previous
 * one. Returns GB/s. */
static double offload_runs(bench *b, kvl_linker *lk, size_t run)
{
	size_t n = b->pages;
	int *res = (int *)malloc(n * sizeof *res);
	kvl_store_remove(b->st, b->keyp, n, res);
	free(res);
	kvl_hash *h = (kvl_hash *)malloc(n * sizeof *h);
	size_t *src = (size_t *)malloc(n * sizeof *src);
	size_t groups = (n + run - 1) / run, k = 0;
	for (size_t g = groups; g-- > 0;)
		for (size_t i = g * run; i < n && i < (g + 1) * run; i++) {
			h[k] = b->h[i];
			src[k++] = b->src[i];
		}
	const size_t *sl[1] = {src};
	double t = now_s();
	if (kvl_linker_offload(lk, 1, h, n, sl, b->filled))
		die("offload", kvl_linker_errmsg(lk));
	kvl_linker_flush(lk, UINT32_MAX);
	double gbps = (double)data_bytes(b) / (now_s() - t) / 1e9;
	expect_done(lk, n, "offload");
	free(h);
	free(src);
	return gbps;
}

/* Counter `name` of the linker's stats. */
static uint64_t counter(kvl_linker *lk, const char *name)
{
	static char buf[16384];
	size_t need;
	if (kvl_linker_stats_render(lk, KVL_STATS_JSON, buf, sizeof buf,
	                            &need))
		die("stats", kvl_linker_errmsg(lk));
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\":", name);
	const char *at = strstr(buf, pat);
	return at ? strtoull(at + strlen(pat), NULL, 10) : 0;
}

/* Restores: lookup to the last layer complete, CPU waits. The best of 5
 * after one that warms the store's pinned objects' TLB entries. Then
 * every restored byte is compared with its source. */
static void restores(bench *b, kvl_linker *lk, result *r)
{
	size_t data = data_bytes(b);
	const size_t *dl[1] = {r->scattered ? b->dst_scattered : b->dst};
	for (uint32_t layer = 0; layer < LAYERS; layer++)
		for (int c = 0; c < 2; c++)
			CK(cudaMemsetAsync(b->pool + ((size_t)layer * 2 + c) *
			                                     b->comp_bytes +
			                           b->pages * b->chunk,
			                   0, b->pages * b->chunk, b->s));
	CK(cudaStreamSynchronize(b->s));
	uint64_t bytes0 = counter(lk, "loaded_bytes");
	uint64_t dma0 = counter(lk, "loaded_dma_bytes");
	for (int rep = 0; rep < 6; rep++) {
		double t = now_s();
		size_t hit;
		uint64_t batch;
		if (kvl_linker_lookup(lk, b->h, b->pages, NULL, &hit) ||
		    hit != b->pages)
			die("lookup", kvl_linker_errmsg(lk));
		if (kvl_linker_load(lk, 10 + rep, b->h, b->pages, dl) ||
		    kvl_linker_start(lk, &batch))
			die("load", kvl_linker_errmsg(lk));
		double t_start = now_s(), t_first = 0, t_layer[LAYERS];
		for (uint32_t layer = 0; layer < LAYERS; layer++) {
			if (kvl_linker_wait(lk, batch, layer, 60000))
				die("wait", kvl_linker_errmsg(lk));
			t_layer[layer] = now_s();
			if (layer == 0)
				t_first = now_s();
		}
		double t_end = now_s();
		if (getenv("BENCH_LAYERS") && rep == 5) {
			printf("    layers done at (ms):");
			for (uint32_t layer = 0; layer < LAYERS; layer++)
				printf(" %.2f", (t_layer[layer] - t_start) * 1e3);
			printf("\n");
		}
		/* Restore: lookup to last layer. Load: start to last layer. */
		double load = (double)data / (t_end - t_start) / 1e9;
		if (rep > 0 && load > r->load) {
			r->restore_ms = (t_end - t) * 1e3;
			r->first_layer_ms = (t_first - t_start) * 1e3;
			r->load_ms = (t_end - t_start) * 1e3;
			r->load = load;
		}
		expect_done(lk, b->pages, "load");
	}
	r->dma_share = (double)(counter(lk, "loaded_dma_bytes") - dma0) /
	               (double)(counter(lk, "loaded_bytes") - bytes0);
	unsigned long long *bad;
	size_t *dst;
	CK(cudaMallocManaged((void **)&bad, sizeof *bad));
	CK(cudaMalloc((void **)&dst, b->pages * sizeof *dst));
	CK(cudaMemcpy(dst, dl[0], b->pages * sizeof *dst,
	              cudaMemcpyHostToDevice));
	*bad = 0;
	for (uint32_t layer = 0; layer < LAYERS; layer++)
		for (int cc = 0; cc < 2; cc++)
			compare<<<1024, 256, 0, b->s>>>(
				(const uint64_t *)(b->pool +
				                   ((size_t)layer * 2 + cc) *
				                           b->comp_bytes),
				dst, b->pages, b->chunk / 8, bad);
	CK(cudaStreamSynchronize(b->s));
	r->bad = *bad;
	CK(cudaFree(bad));
	CK(cudaFree(dst));
}

/* A layer's compute on b->compute: `reps` GEMMs of n x n bf16 matrices
 * (cuBLAS, every SM), or, when gemm is NULL, one spin kernel of `reps`
 * cycles on one SM. */
typedef struct compute {
	cublasHandle_t gemm;
	__nv_bfloat16 *a, *bm, *c;
	int n;
	long long reps;
} compute;

static void layer_compute(const bench *b, const compute *cp)
{
	if (!cp->gemm) {
		spin<<<1, 1, 0, b->compute>>>(cp->reps);
		return;
	}
	const float one = 1.0f, zero = 0.0f;
	for (long long i = 0; i < cp->reps; i++)
		if (cublasGemmEx(cp->gemm, CUBLAS_OP_N, CUBLAS_OP_N, cp->n,
		                 cp->n, cp->n, &one, cp->a, CUDA_R_16BF, cp->n,
		                 cp->bm, CUDA_R_16BF, cp->n, &zero, cp->c,
		                 CUDA_R_16BF, cp->n, CUBLAS_COMPUTE_32F,
		                 CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
			die("cublasGemmEx", "failed");
}

/* Compute alone, then a restore with the compute of each layer waiting
 * for it on the GPU (ms, ms). */
static void overlap(bench *b, kvl_linker *lk, const compute *cp,
                    const size_t *dst, double *alone_ms, double *together_ms)
{
	const size_t *dl[1] = {dst};
	double t = now_s();
	for (uint32_t layer = 0; layer < LAYERS; layer++)
		layer_compute(b, cp);
	CK(cudaStreamSynchronize(b->compute));
	*alone_ms = (now_s() - t) * 1e3;
	uint64_t batch;
	t = now_s();
	if (kvl_linker_load(lk, 20, b->h, b->pages, dl) ||
	    kvl_linker_start(lk, &batch))
		die("load", kvl_linker_errmsg(lk));
	for (uint32_t layer = 0; layer < LAYERS; layer++) {
		if (kvl_linker_wait_stream(lk, batch, layer, b->compute, 60000))
			die("wait_stream", kvl_linker_errmsg(lk));
		layer_compute(b, cp);
	}
	CK(cudaStreamSynchronize(b->compute));
	*together_ms = (now_s() - t) * 1e3;
	expect_done(lk, b->pages, "overlap load");
}

/* GEMMs of 4096 x 4096, as many per layer as take about `layer_ms`. */
static compute gemm_for(bench *b, double layer_ms)
{
	compute cp;
	memset(&cp, 0, sizeof cp);
	cp.n = 4096;
	size_t bytes = (size_t)cp.n * cp.n * sizeof(__nv_bfloat16);
	if (cublasCreate(&cp.gemm) != CUBLAS_STATUS_SUCCESS)
		die("cublasCreate", "failed");
	cublasSetStream(cp.gemm, b->compute);
	CK(cudaMalloc((void **)&cp.a, bytes));
	CK(cudaMalloc((void **)&cp.bm, bytes));
	CK(cudaMalloc((void **)&cp.c, bytes));
	CK(cudaMemset(cp.a, 0, bytes));
	CK(cudaMemset(cp.bm, 0, bytes));
	cp.reps = 20;
	layer_compute(b, &cp); /* warm */
	CK(cudaStreamSynchronize(b->compute));
	double t = now_s();
	layer_compute(b, &cp);
	CK(cudaStreamSynchronize(b->compute));
	double one_ms = (now_s() - t) * 1e3 / (double)cp.reps;
	cp.reps = (long long)(layer_ms / one_ms + 0.5);
	if (cp.reps < 1)
		cp.reps = 1;
	return cp;
}

static void gemm_free(compute *cp)
{
	cublasDestroy(cp->gemm);
	CK(cudaFree(cp->a));
	CK(cudaFree(cp->bm));
	CK(cudaFree(cp->c));
}

static void print(const bench *b, const result *r, int json)
{
	double ideal_g = (r->load_ms > r->gemm_ms ? r->load_ms : r->gemm_ms) +
	                 r->first_layer_ms;
	double ideal_s = (r->load_ms > r->spin_ms ? r->load_ms : r->spin_ms) +
	                 r->first_layer_ms;
	char run[16];
	if (r->run == SIZE_MAX)
		snprintf(run, sizeof run, r->scattered ? "all*" : "all");
	else
		snprintf(run, sizeof run, "%zu", r->run);
	if (json) {
		printf("{\"chunk\":%zu,\"run\":\"%s\",\"slots\":\"%s\","
		       "\"copy\":\"%s\","
		       "\"ceiling_h2d_gbps\":%.2f,\"ceiling_d2h_gbps\":%.2f,"
		       "\"per_chunk_memcpy_gbps\":%.2f,\"copy_2d_gbps\":%.2f,"
		       "\"load_gbps\":%.2f,"
		       "\"load_vs_ceiling\":%.4f,\"dma_share\":%.3f,"
		       "\"offload_gbps\":%.2f,\"restore_ms\":%.2f,"
		       "\"first_layer_ms\":%.3f",
		       b->chunk, r->run == SIZE_MAX ? "all" : run,
		       r->scattered ? "scattered" : "consecutive", r->copy,
		       b->ceiling_h2d, b->ceiling_d2h,
		       b->per_chunk, b->ceiling_2d, r->load,
		       r->load / b->ceiling_h2d,
		       r->dma_share, r->offload, r->restore_ms,
		       r->first_layer_ms);
		if (r->gemm_ms > 0)
			printf(",\"gemm_ms\":%.2f,\"gemm_overlap_ms\":%.2f,"
			       "\"gemm_overlap_vs_ideal\":%.4f,\"spin_ms\":%.2f,"
			       "\"spin_overlap_ms\":%.2f,"
			       "\"spin_overlap_vs_ideal\":%.4f",
			       r->gemm_ms, r->gemm_overlap_ms,
			       r->gemm_overlap_ms / ideal_g, r->spin_ms,
			       r->spin_overlap_ms, r->spin_overlap_ms / ideal_s);
		printf(",\"bad_words\":%llu}\n", r->bad);
		return;
	}
	printf("  runs of %-4s %-6s: load %.1f GB/s (%.3f), %3.0f%% by DMA, "
	       "restore %.1f ms, first layer %.2f ms | offload %.1f GB/s "
	       "(%.2f) | %s\n",
	       run, r->copy, r->load, r->load / b->ceiling_h2d,
	       100 * r->dma_share, r->restore_ms, r->first_layer_ms,
	       r->offload, r->offload / b->ceiling_d2h,
	       r->bad ? "BYTES WRONG" : "bytes verified");
	if (r->gemm_ms > 0)
		printf("    overlap with GEMMs %.1f ms vs max(load %.1f, "
		       "compute %.1f) + first = %.3f | with a one-block kernel "
		       "%.1f ms vs compute %.1f = %.3f\n",
		       r->gemm_overlap_ms, r->load_ms, r->gemm_ms,
		       r->gemm_overlap_ms / ideal_g, r->spin_overlap_ms,
		       r->spin_ms, r->spin_overlap_ms / ideal_s);
}

static void run_chunk(size_t chunk, int json, long long spin_cycles)
{
	bench b;
	bench_open(&b, chunk);
	if (!json)
		printf("chunk %zu B: ceiling %.1f GB/s H2D, %.1f D2H | "
		       "per-chunk memcpy %.1f GB/s (%.2f) | a 2D copy per "
		       "layer %.1f GB/s (%.3f)\n",
		       chunk, b.ceiling_h2d, b.ceiling_d2h, b.per_chunk,
		       b.per_chunk / b.ceiling_h2d, b.ceiling_2d,
		       b.ceiling_2d / b.ceiling_h2d);
	/* Runs of 1, 16 and all pages into consecutive slots; runs of all
	 * into slots in no order (the ring and its scatter). */
	const size_t runs[] = {1, 16, SIZE_MAX, SIZE_MAX};
	const struct {
		uint32_t mode;
		const char *name;
	} copies[] = {{KVL_GPU_COPY_AUTO, "auto"},
	              {KVL_GPU_COPY_KERNEL, "kernel"},
	              {KVL_GPU_COPY_DMA, "dma"}};
	for (size_t ri = 0; ri < sizeof runs / sizeof runs[0]; ri++) {
		double offload = 0;
		for (size_t ci = 0; ci < sizeof copies / sizeof copies[0];
		     ci++) {
			kvl_linker *lk = linker(&b, copies[ci].mode);
			result r;
			memset(&r, 0, sizeof r);
			r.run = runs[ri];
			r.scattered = ri == 3;
			r.copy = copies[ci].name;
			const size_t *dl[1] = {r.scattered ? b.dst_scattered
			                                   : b.dst};
			if (ci == 0 && ri < 3)
				offload = offload_runs(
					&b, lk,
					runs[ri] == SIZE_MAX ? b.pages : runs[ri]);
			r.offload = offload;
			restores(&b, lk, &r);
			if (runs[ri] == SIZE_MAX) {
				compute g = gemm_for(&b, r.load_ms / LAYERS);
				overlap(&b, lk, &g, dl[0], &r.gemm_ms,
				        &r.gemm_overlap_ms);
				gemm_free(&g);
				compute sp;
				memset(&sp, 0, sizeof sp);
				sp.reps = spin_cycles;
				overlap(&b, lk, &sp, dl[0], &r.spin_ms,
				        &r.spin_overlap_ms);
			}
			kvl_linker_close(lk);
			print(&b, &r, json);
		}
	}
	bench_close(&b);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int json = 0;
	for (int i = 1; i < argc; i++)
		json |= !strcmp(argv[i], "--json");
	int n_dev = 0;
	if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
		printf("bench_gpu: no CUDA device\n");
		return 77;
	}
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	int khz = 0;
	CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
	/* The one-block kernel's layer: a bit longer than a layer's load at
	 * ~55 GB/s. */
	long long spin_cycles = (long long)(3.0e-3 * khz * 1e3);
	const size_t chunks[] = {16 << 10, 32 << 10, 64 << 10, 256 << 10,
	                         2 << 20};
	size_t first = 0, last = sizeof chunks / sizeof chunks[0];
	/* --chunk N: one size only. */
	for (int i = 1; i + 1 < argc; i++) {
		if (!strcmp(argv[i], "--staging"))
			staging_bytes = (uint32_t)strtoul(argv[i + 1], NULL, 0);
		if (!strcmp(argv[i], "--chunk"))
			for (size_t k = 0; k < last; k++)
				if (chunks[k] == strtoull(argv[i + 1], NULL, 0)) {
					first = k;
					last = k + 1;
					break;
				}
	}
	if (!json)
		printf("kvlink GPU bench on %s: 32 layers x 32K tokens (4 GiB), "
		       "ratios to the same-run PCIe ceiling; runs of all* "
		       "load into slots in no order, the others into "
		       "consecutive slots\n",
		       prop.name);
	for (size_t i = first; i < last; i++)
		run_chunk(chunks[i], json, spin_cycles);
	return 0;
}
