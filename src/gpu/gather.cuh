/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gather.cuh — the gather kernel (internal to src/gpu/): copy.cu launches
 * it over host-mapped memory, stage.cu over the device staging ring.
 */
#ifndef KVL_GATHER_CUH
#define KVL_GATHER_CUH

#include <cuda_runtime.h>

#include "gpu/cuda.h"

/* copy.cu: 1 if e is cudaSuccess, else 0 with e kept for
 * kvl__cuda_last_error; a copier's stream. */
int kvl__cuda_ok(cudaError_t e);
cudaStream_t kvl__copier_stream(const kvl__copier *c);

/* A copy kernel keeps about 512 KiB of 16-byte loads in flight: enough to
 * fill PCIe (55 GB/s x a few microseconds of latency), and no more, since
 * deeper queues only delay everything else that crosses PCIe, the engine's
 * kernel launches included (measured on an H200: 2 MiB in flight made a
 * per-layer compute kernel 3-5 % slower, 512 KiB about 1 %). It occupies
 * few SMs, leaving the rest to the engine. Two shapes:
 *  - a warp per chunk, for chunks of up to 64 KiB: 16 blocks x 512 threads
 *    x 4 loads per thread before the stores (a block per 16 KiB chunk
 *    would wait on one chunk's latency with most threads idle);
 *  - a block per chunk, for larger ones: 64 blocks x 512 threads x 1 load
 *    (a warp per chunk would leave warps idle when a layer has few). */
#define KVL_COPY_THREADS 512
#define KVL_WARP_CHUNK (64u << 10)
#define KVL_WARP_BLOCKS 16
#define KVL_WARP_UNROLL 4
#define KVL_BLOCK_BLOCKS 64
#define KVL_BLOCK_UNROLL 1

/* 16-byte loads and stores; STREAM: evict-first in L2 (ld/st.global.cs).
 * The scatter streams: it moves a staging half through L2 once while the
 * copy engines write the next half into HBM through the same L2, and with
 * ordinary loads and stores it slowed those writes by 7 % on an H200
 * (0.92 of the PCIe ceiling at 32 KiB chunks; 0.97 streaming), whatever
 * its grid. */
template <bool STREAM>
__device__ __forceinline__ uint4 load16(const uint4 *p)
{
	return STREAM ? __ldcs(p) : *p;
}

template <bool STREAM>
__device__ __forceinline__ void store16(uint4 *p, uint4 v)
{
	if (STREAM)
		__stcs(p, v);
	else
		*p = v;
}

/* One team of TEAM threads copies chunk c, each thread issuing UNROLL
 * loads before its stores: 16-byte words when source, destination and
 * length allow, else bytes. */
template <unsigned TEAM, int UNROLL, bool STREAM>
__device__ __forceinline__ void copy_chunk(const kvl__chunk &c, unsigned lane)
{
	const char *s = (const char *)c.src;
	char *d = (char *)c.dst;
	uint64_t len = c.len;
	uint64_t words = 0;
	if ((((uintptr_t)s | (uintptr_t)d) & 15) == 0) {
		const uint4 *s4 = (const uint4 *)s;
		uint4 *d4 = (uint4 *)d;
		words = len / 16;
		for (uint64_t w = lane; w < words; w += UNROLL * TEAM) {
			uint4 r[UNROLL];
#pragma unroll
			for (int k = 0; k < UNROLL; k++)
				if (w + k * TEAM < words)
					r[k] = load16<STREAM>(s4 + w + k * TEAM);
#pragma unroll
			for (int k = 0; k < UNROLL; k++)
				if (w + k * TEAM < words)
					store16<STREAM>(d4 + w + k * TEAM, r[k]);
		}
	}
	for (uint64_t b = words * 16 + lane; b < len; b += TEAM)
		d[b] = s[b];
}

/* Teams of TEAM threads copy the chunks in slices of `slice` bytes, `per`
 * slices to a chunk (enough for the longest): team t takes slices t,
 * t + teams, … (with per 1 and no limit on slices: whole chunks). */
template <unsigned TEAM, int UNROLL, bool STREAM>
__global__ void kvl_gather(const kvl__chunk *chunks, size_t n,
                           uint64_t slice, uint64_t per)
{
	const unsigned lane = threadIdx.x % TEAM;
	const size_t teams = (size_t)gridDim.x * blockDim.x / TEAM;
	for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / TEAM;
	     i < n * per; i += teams) {
		kvl__chunk c = chunks[i / per];
		uint64_t at = (i % per) * slice;
		if (at >= c.len)
			continue;
		c.src = (const char *)c.src + at;
		c.dst = (char *)c.dst + at;
		c.len = c.len - at < slice ? c.len - at : slice;
		copy_chunk<TEAM, UNROLL, STREAM>(c, lane);
	}
}

/* Blocks for n chunks of `per_block` per block, at most `max`. */
static inline unsigned grid(size_t n, size_t per_block, unsigned max)
{
	size_t b = (n + per_block - 1) / per_block;
	return b < max ? (unsigned)b : max;
}

/* The total and the longest length of the n chunks of list: what a
 * launch's shape (and the copier's choice of the copy engines) needs. */
static inline void kvl__chunks_measure(const kvl__chunk *list, size_t n,
                                       uint64_t *bytes, uint64_t *longest)
{
	*bytes = *longest = 0;
	for (size_t k = 0; k < n; k++) {
		*bytes += list[k].len;
		if (list[k].len > *longest)
			*longest = list[k].len;
	}
}

/* Launches one gather of the n chunks of `list` (pinned or device
 * memory; `bytes` and `longest` from kvl__chunks_measure) on `stream`: a
 * warp per chunk when they average up to KVL_WARP_CHUNK, else a block per
 * chunk, or per slice of up to `slice` bytes of one (0: whole chunks); at
 * most warp_blocks or block_blocks blocks; STREAM: see load16. */
template <bool STREAM>
static inline void kvl__gather_launch(const kvl__chunk *list, size_t n,
                                      uint64_t bytes, uint64_t longest,
                                      cudaStream_t stream,
                                      unsigned warp_blocks,
                                      unsigned block_blocks, uint64_t slice)
{
	if (bytes <= (uint64_t)n * KVL_WARP_CHUNK) {
		kvl_gather<32, KVL_WARP_UNROLL, STREAM>
			<<<grid(n, KVL_COPY_THREADS / 32, warp_blocks),
			   KVL_COPY_THREADS, 0, stream>>>(list, n, UINT64_MAX,
		                                          1);
		return;
	}
	uint64_t per = slice ? (longest + slice - 1) / slice : 1;
	kvl_gather<KVL_COPY_THREADS, KVL_BLOCK_UNROLL, STREAM>
		<<<grid(n * per, 1, block_blocks), KVL_COPY_THREADS, 0,
		   stream>>>(list, n, slice ? slice : UINT64_MAX, per);
}

#endif /* KVL_GATHER_CUH */
