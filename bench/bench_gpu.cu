/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_gpu.cu — kvlink's GPU path against the hardware, in one run.
 *
 * For a Llama-3-8B-shaped KV cache (32 layers, 8 KV heads x 128, bf16) of a
 * 32 K-token prefix (4 GiB) and per-layer page chunks of 16 KiB, 64 KiB,
 * 256 KiB and 2 MiB, it measures:
 *   - the PCIe ceiling: one large pinned host-to-device (and device-to-host)
 *     cudaMemcpyAsync, best of 5;
 *   - the per-chunk baseline: one cudaMemcpyAsync per chunk;
 *   - kvlink: offload of every page from GPU slots into the embedded store;
 *     a restore from lookup to the last layer complete (the headline), and
 *     the layer-wise load throughput from start to the last layer, the
 *     best of 5 restores;
 *   - overlap: the restore while a synthetic kernel "computes" each layer
 *     after a stream-ordered wait for it, against max(load, compute) plus
 *     the first layer;
 * and checks every restored byte on the GPU. Prints ratios to the same-run
 * ceiling; --json for one object per chunk size.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Counts words of b that differ from a. */
__global__ void compare(const uint64_t *a, const uint64_t *b, size_t n,
                        unsigned long long *bad)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		if (a[i] != b[i])
			atomicAdd(bad, 1ull);
}

/* Busy for about `cycles` clock cycles: a layer's compute. */
__global__ void spin(long long cycles)
{
	long long t0 = clock64();
	while (clock64() - t0 < cycles) {
	}
}

typedef struct result {
	size_t chunk;
	double ceiling_h2d, ceiling_d2h, per_chunk, load, offload, offload_cold;
	double restore_ms, first_layer_ms, overlap_ms, compute_ms, load_ms;
	unsigned long long bad;
} result;

static void die(const char *what, const char *msg)
{
	fprintf(stderr, "bench_gpu: %s: %s\n", what, msg);
	exit(1);
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

static result run(size_t chunk, long long spin_cycles)
{
	result r;
	memset(&r, 0, sizeof r);
	r.chunk = chunk;
	size_t page_tokens = chunk / TOKEN_BYTES;
	size_t pages = TOKENS / page_tokens;
	size_t slots = 2 * pages; /* source slots, then restore slots */
	size_t comp_bytes = slots * chunk;
	size_t pool_bytes = (size_t)LAYERS * 2 * comp_bytes;
	size_t data = (size_t)LAYERS * 2 * pages * chunk; /* 4 GiB */
	uint8_t *pool;
	CK(cudaMalloc((void **)&pool, pool_bytes));
	CK(cudaMemset(pool, 0, pool_bytes));
	cudaStream_t s, compute;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));

	/* Ceiling and per-chunk baseline from pinned host memory. */
	size_t big = 1ull << 30;
	void *pinned;
	CK(cudaHostAlloc(&pinned, big, cudaHostAllocDefault));
	memset(pinned, 1, big);
	r.ceiling_h2d = copy_gbps(pool, pinned, big, cudaMemcpyHostToDevice, s);
	r.ceiling_d2h = copy_gbps(pinned, pool, big, cudaMemcpyDeviceToHost, s);
	size_t n_chunks = big / chunk;
	double t = now_s();
	for (size_t i = 0; i < n_chunks; i++)
		CK(cudaMemcpyAsync(pool + (i * 7919 % n_chunks) * chunk,
		                   (char *)pinned + i * chunk, chunk,
		                   cudaMemcpyHostToDevice, s));
	CK(cudaStreamSynchronize(s));
	r.per_chunk = (double)big / (now_s() - t) / 1e9;
	CK(cudaFreeHost(pinned));

	/* Layout: per layer and component one buffer of `slots` chunks. */
	kvl_layout *l;
	char err[512];
	if (kvl_layout_create("llama3-8b/bf16", (uint32_t)page_tokens, NULL, &l,
	                      err, sizeof err))
		die("layout", err);
	int pool_id;
	kvl_layout_add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0, &pool_id);
	for (uint32_t layer = 0; layer < LAYERS; layer++)
		for (int c = 0; c < 2; c++) {
			kvl_buffer b;
			memset(&b, 0, sizeof b);
			b.base = pool + ((size_t)layer * 2 + c) * comp_bytes;
			b.page_stride = chunk;
			b.page_bytes = chunk;
			b.num_pages = slots;
			b.mem = KVL_MEM_CUDA;
			b.device = 0;
			kvl_layout_add_buffer(l, pool_id, c ? "v" : "k", layer, &b);
		}
	if (kvl_layout_finalize(l))
		die("layout", kvl_layout_errmsg(l));
	kvl_store *st;
	/* prealloc=1 pins the store's memory at open, as a server would. */
	if (kvl_store_open("mem:?capacity=6GiB&prealloc=1", &st, err,
	                   sizeof err))
		die("store", err);
	kvl_linker *lk;
	if (kvl_linker_open(st, l, NULL, &lk, err, sizeof err))
		die("linker", err);

	/* Source pages in slots [0, pages), random bytes. */
	for (uint32_t layer = 0; layer < LAYERS; layer++)
		for (int c = 0; c < 2; c++)
			fill<<<1024, 256, 0, s>>>(
				(uint64_t *)(pool + ((size_t)layer * 2 + c) *
				                            comp_bytes),
				pages * chunk / 8, layer * 2 + c);
	cudaEvent_t filled;
	CK(cudaEventCreate(&filled));
	CK(cudaEventRecord(filled, s));
	kvl_hash *h = (kvl_hash *)calloc(pages, sizeof *h);
	size_t *src = (size_t *)calloc(pages, sizeof *src);
	size_t *dst = (size_t *)calloc(pages, sizeof *dst);
	for (size_t i = 0; i < pages; i++) {
		memcpy(h[i].bytes, &i, sizeof i);
		h[i].bytes[31] = (uint8_t)chunk;
		src[i] = i;
		dst[i] = pages + i;
	}
	const size_t *sl[1] = {src}, *dl[1] = {dst};
	kvl_completion c;
	size_t n;
	/* Offload twice: into the store's fresh (pinned ahead) memory, then,
	 * after dropping every object, into memory it reuses. */
	char *keys = (char *)malloc(pages * KVL_KEY_MAX);
	const char **keyp = (const char **)malloc(pages * sizeof *keyp);
	int *res = (int *)malloc(pages * sizeof *res);
	for (size_t i = 0; i < pages; i++) {
		keyp[i] = keys + i * KVL_KEY_MAX;
		kvl_layout_key(l, pool_id, &h[i], keys + i * KVL_KEY_MAX,
		               KVL_KEY_MAX);
	}
	for (int rep = 0; rep < 2; rep++) {
		if (rep)
			kvl_store_remove(st, keyp, pages, res);
		t = now_s();
		if (kvl_linker_offload(lk, 1 + rep, h, pages, sl,
		                             filled))
			die("offload", kvl_linker_errmsg(lk));
		kvl_linker_flush(lk, UINT32_MAX);
		double gbps = (double)data / (now_s() - t) / 1e9;
		if (rep)
			r.offload = gbps;
		else
			r.offload_cold = gbps;
		kvl_linker_poll(lk, &c, 1, &n, 1000);
		if (!n || c.status || c.valid_pages != pages)
			die("offload", kvl_strerror(c.status));
	}
	free(keys);
	free(keyp);
	free(res);

	/* Restore: lookup to the last layer complete, CPU waits. The best of
	 * 5 after one that warms the store's pinned objects' TLB entries. */
	uint64_t batch;
	for (int rep = 0; rep < 6; rep++) {
		t = now_s();
		size_t hit;
		if (kvl_linker_lookup(lk, h, pages, NULL, &hit) ||
		    hit != pages)
			die("lookup", kvl_linker_errmsg(lk));
		if (kvl_linker_load(lk, 10 + rep, h, pages, dl) ||
		    kvl_linker_start(lk, &batch))
			die("load", kvl_linker_errmsg(lk));
		double t_start = now_s(), t_first = 0;
		for (uint32_t layer = 0; layer < LAYERS; layer++) {
			if (kvl_linker_wait(lk, batch, layer, 60000))
				die("wait", kvl_linker_errmsg(lk));
			if (layer == 0)
				t_first = now_s();
		}
		double t_end = now_s();
		/* Restore: lookup to last layer. Load: start to last layer. */
		double load = (double)data / (t_end - t_start) / 1e9;
		if (rep > 0 && load > r.load) {
			r.restore_ms = (t_end - t) * 1e3;
			r.first_layer_ms = (t_first - t_start) * 1e3;
			r.load_ms = (t_end - t_start) * 1e3;
			r.load = load;
		}
		kvl_linker_poll(lk, &c, 1, &n, 1000);
		if (!n || c.status || c.valid_pages != pages)
			die("load", kvl_strerror(c.status));
	}
	/* Every restored byte equals its source. */
	unsigned long long *bad;
	CK(cudaMallocManaged((void **)&bad, sizeof *bad));
	*bad = 0;
	for (uint32_t layer = 0; layer < LAYERS; layer++)
		for (int cc = 0; cc < 2; cc++) {
			uint8_t *base = pool + ((size_t)layer * 2 + cc) * comp_bytes;
			compare<<<1024, 256, 0, s>>>(
				(const uint64_t *)base,
				(const uint64_t *)(base + pages * chunk),
				pages * chunk / 8, bad);
		}
	CK(cudaStreamSynchronize(s));
	r.bad = *bad;

	/* Compute alone, then the restore with compute waiting per layer. */
	t = now_s();
	for (uint32_t layer = 0; layer < LAYERS; layer++)
		spin<<<1, 1, 0, compute>>>(spin_cycles);
	CK(cudaStreamSynchronize(compute));
	r.compute_ms = (now_s() - t) * 1e3;
	t = now_s();
	if (kvl_linker_load(lk, 20, h, pages, dl) ||
	    kvl_linker_start(lk, &batch))
		die("load", kvl_linker_errmsg(lk));
	for (uint32_t layer = 0; layer < LAYERS; layer++) {
		if (kvl_linker_wait_stream(lk, batch, layer, compute, 60000))
			die("wait_stream", kvl_linker_errmsg(lk));
		spin<<<1, 1, 0, compute>>>(spin_cycles);
	}
	CK(cudaStreamSynchronize(compute));
	r.overlap_ms = (now_s() - t) * 1e3;
	kvl_linker_poll(lk, &c, 1, &n, 1000);

	kvl_linker_close(lk);
	kvl_store_close(st);
	kvl_layout_free(l);
	free(h);
	free(src);
	free(dst);
	CK(cudaFree(bad));
	CK(cudaFree(pool));
	CK(cudaStreamDestroy(s));
	CK(cudaStreamDestroy(compute));
	return r;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int json = argc > 1 && !strcmp(argv[1], "--json");
	int n_dev = 0;
	if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
		printf("bench_gpu: no CUDA device\n");
		return 77;
	}
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	int khz = 0;
	CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
	/* Per-layer compute a bit longer than a layer's load at ~55 GB/s. */
	long long spin_cycles = (long long)(3.0e-3 * khz * 1e3);
	const size_t chunks[] = {16 << 10, 64 << 10, 256 << 10, 2 << 20};
	if (!json)
		printf("kvlink GPU bench on %s: 32 layers x 32K tokens (4 GiB), "
		       "ratios to the same-run PCIe ceiling\n",
		       prop.name);
	for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
		result r = run(chunks[i], spin_cycles);
		double ideal = (r.load_ms > r.compute_ms ? r.load_ms
		                                         : r.compute_ms) +
		               r.first_layer_ms;
		if (json) {
			printf("{\"chunk\":%zu,\"ceiling_h2d_gbps\":%.2f,"
			       "\"ceiling_d2h_gbps\":%.2f,"
			       "\"per_chunk_memcpy_gbps\":%.2f,"
			       "\"load_gbps\":%.2f,\"offload_gbps\":%.2f,"
			       "\"offload_cold_gbps\":%.2f,"
			       "\"restore_ms\":%.2f,\"first_layer_ms\":%.3f,"
			       "\"compute_ms\":%.2f,\"overlap_ms\":%.2f,"
			       "\"overlap_vs_ideal\":%.4f,\"bad_words\":%llu}\n",
			       r.chunk, r.ceiling_h2d, r.ceiling_d2h, r.per_chunk,
			       r.load, r.offload, r.offload_cold, r.restore_ms,
			       r.first_layer_ms, r.compute_ms, r.overlap_ms,
			       r.overlap_ms / ideal, r.bad);
			continue;
		}
		printf("chunk %7zu B: ceiling %.1f GB/s H2D, %.1f D2H | "
		       "per-chunk memcpy %.1f GB/s (%.2f) | load %.1f GB/s "
		       "(%.2f) restore %.1f ms | offload %.1f GB/s (%.2f), "
		       "first %.1f | "
		       "overlap %.1f ms vs max(load %.1f, compute %.1f) + "
		       "first %.2f = %.3f | %s\n",
		       r.chunk, r.ceiling_h2d, r.ceiling_d2h, r.per_chunk,
		       r.per_chunk / r.ceiling_h2d, r.load,
		       r.load / r.ceiling_h2d, r.restore_ms, r.offload,
		       r.offload / r.ceiling_d2h, r.offload_cold, r.overlap_ms,
		       r.load_ms,
		       r.compute_ms, r.first_layer_ms, r.overlap_ms / ideal,
		       r.bad ? "BYTES WRONG" : "bytes verified");
	}
	return 0;
}
