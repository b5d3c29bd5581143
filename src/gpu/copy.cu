/* SPDX-License-Identifier: Apache-2.0 */
/*
 * copy.cu — the gather kernel and the copier around it (see cuda.h).
 *
 * A copier owns a non-blocking stream, `n_events` events that the linker
 * records per layer, and a ring of KVL_COPIER_LISTS chunk lists in pinned
 * memory, each guarded by an event so a list is rewritten only after the
 * kernel that read it finished. All of a copier's calls come from one
 * thread; events may be waited on from others (cudaStreamWaitEvent on an
 * engine stream).
 */
#include <cuda_runtime.h>
#include <stdlib.h>

#include "gpu/cuda.h"

#define KVL_COPIER_LISTS 8
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

struct kvl__copier {
	int device;
	cudaStream_t stream;
	uint32_t n_events;
	cudaEvent_t *events;
	size_t max_chunks;
	kvl__chunk *lists[KVL_COPIER_LISTS];
	cudaEvent_t list_done[KVL_COPIER_LISTS];
	int list_used[KVL_COPIER_LISTS];
	unsigned next;    /* the list kvl__copier_chunks hands out next */
};

static __thread const char *last_error = "no error";

static int ok(cudaError_t e)
{
	if (e == cudaSuccess)
		return 1;
	last_error = cudaGetErrorString(e);
	return 0;
}

extern "C" const char *kvl__cuda_last_error(void)
{
	return last_error;
}

extern "C" int kvl__cuda_usable(void)
{
	int n = 0;
	return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

extern "C" void *kvl__cuda_host_alloc(size_t len)
{
	void *p = NULL;
	if (!ok(cudaHostAlloc(&p, len,
	                      cudaHostAllocMapped | cudaHostAllocPortable)))
		return NULL;
	return p;
}

extern "C" void kvl__cuda_host_free(void *p)
{
	if (p)
		cudaFreeHost(p);
}

extern "C" void *kvl__cuda_dev_alloc(size_t len)
{
	void *p = NULL;
	return ok(cudaMalloc(&p, len)) ? p : NULL;
}

extern "C" void kvl__cuda_dev_free(void *p)
{
	if (p)
		cudaFree(p);
}

/* One team of TEAM threads copies chunk c, each thread issuing UNROLL
 * loads before its stores: 16-byte words when source, destination and
 * length allow, else bytes. */
template <unsigned TEAM, int UNROLL>
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
					r[k] = s4[w + k * TEAM];
#pragma unroll
			for (int k = 0; k < UNROLL; k++)
				if (w + k * TEAM < words)
					d4[w + k * TEAM] = r[k];
		}
	}
	for (uint64_t b = words * 16 + lane; b < len; b += TEAM)
		d[b] = s[b];
}

/* Teams of TEAM threads copy whole chunks: team t takes chunks t,
 * t + teams, …. */
template <unsigned TEAM, int UNROLL>
__global__ void kvl_gather(const kvl__chunk *chunks, size_t n)
{
	const unsigned lane = threadIdx.x % TEAM;
	const size_t teams = (size_t)gridDim.x * blockDim.x / TEAM;
	for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / TEAM;
	     i < n; i += teams)
		copy_chunk<TEAM, UNROLL>(chunks[i], lane);
}

/* Blocks for n chunks of `per_block` per block, at most `max`. */
static unsigned grid(size_t n, size_t per_block, unsigned max)
{
	size_t b = (n + per_block - 1) / per_block;
	return b < max ? (unsigned)b : max;
}

extern "C" int kvl__copier_create(int device, uint32_t n_events,
                                  size_t max_chunks, kvl__copier **out,
                                  const char **why)
{
	kvl__copier *c = (kvl__copier *)calloc(1, sizeof *c);
	if (!c) {
		*why = "out of memory";
		return -1;
	}
	c->device = device;
	c->n_events = n_events;
	c->max_chunks = max_chunks;
	c->events = (cudaEvent_t *)calloc(n_events ? n_events : 1,
	                                  sizeof(cudaEvent_t));
	int good = c->events && ok(cudaSetDevice(device)) &&
	           ok(cudaStreamCreateWithFlags(&c->stream,
	                                        cudaStreamNonBlocking));
	for (uint32_t i = 0; good && i < n_events; i++)
		good = ok(cudaEventCreateWithFlags(&c->events[i],
		                                   cudaEventDisableTiming));
	for (int i = 0; good && i < KVL_COPIER_LISTS; i++) {
		c->lists[i] = (kvl__chunk *)kvl__cuda_host_alloc(
			max_chunks * sizeof(kvl__chunk));
		good = c->lists[i] &&
		       ok(cudaEventCreateWithFlags(&c->list_done[i],
		                                   cudaEventDisableTiming));
	}
	if (!good) {
		*why = last_error;
		kvl__copier_destroy(c);
		return -1;
	}
	*out = c;
	return 0;
}

extern "C" void kvl__copier_destroy(kvl__copier *c)
{
	if (!c)
		return;
	if (c->stream)
		cudaStreamSynchronize(c->stream);
	for (uint32_t i = 0; c->events && i < c->n_events; i++)
		if (c->events[i])
			cudaEventDestroy(c->events[i]);
	for (int i = 0; i < KVL_COPIER_LISTS; i++) {
		kvl__cuda_host_free(c->lists[i]);
		if (c->list_done[i])
			cudaEventDestroy(c->list_done[i]);
	}
	if (c->stream)
		cudaStreamDestroy(c->stream);
	free(c->events);
	free(c);
}

extern "C" kvl__chunk *kvl__copier_chunks(kvl__copier *c)
{
	unsigned i = c->next % KVL_COPIER_LISTS;
	if (c->list_used[i]) {
		cudaEventSynchronize(c->list_done[i]);
		c->list_used[i] = 0;
	}
	return c->lists[i];
}

extern "C" int kvl__copier_launch(kvl__copier *c, size_t n)
{
	unsigned i = c->next++ % KVL_COPIER_LISTS;
	if (n == 0)
		return 0;
	const kvl__chunk *list = c->lists[i];
	uint64_t bytes = 0;
	for (size_t k = 0; k < n; k++)
		bytes += list[k].len;
	if (bytes <= (uint64_t)n * KVL_WARP_CHUNK)
		kvl_gather<32, KVL_WARP_UNROLL>
			<<<grid(n, KVL_COPY_THREADS / 32, KVL_WARP_BLOCKS),
			   KVL_COPY_THREADS, 0, c->stream>>>(list, n);
	else
		kvl_gather<KVL_COPY_THREADS, KVL_BLOCK_UNROLL>
			<<<grid(n, 1, KVL_BLOCK_BLOCKS), KVL_COPY_THREADS, 0,
			   c->stream>>>(list, n);
	c->list_used[i] = 1;
	return ok(cudaGetLastError()) &&
	               ok(cudaEventRecord(c->list_done[i], c->stream))
	       ? 0
	       : -1;
}

extern "C" int kvl__copier_record(kvl__copier *c, uint32_t ev)
{
	return ok(cudaEventRecord(c->events[ev], c->stream)) ? 0 : -1;
}

extern "C" int kvl__copier_sync(kvl__copier *c, uint32_t ev)
{
	return ok(cudaEventSynchronize(c->events[ev])) ? 0 : -1;
}

extern "C" int kvl__copier_stream_wait(kvl__copier *c, uint32_t ev,
                                       void *stream)
{
	return ok(cudaStreamWaitEvent((cudaStream_t)stream, c->events[ev], 0))
	               ? 0
	               : -1;
}

extern "C" int kvl__copier_wait_copier(kvl__copier *c, kvl__copier *other,
                                       uint32_t ev)
{
	return ok(cudaStreamWaitEvent(c->stream, other->events[ev], 0)) ? 0
	                                                                : -1;
}

extern "C" int kvl__copier_after(kvl__copier *c, void *event)
{
	return ok(cudaStreamWaitEvent(c->stream, (cudaEvent_t)event, 0)) ? 0
	                                                                  : -1;
}
