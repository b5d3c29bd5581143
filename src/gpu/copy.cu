/* SPDX-License-Identifier: Apache-2.0 */
/*
 * copy.cu — the copier around the gather kernel (see cuda.h; the kernel
 * is in gather.cuh), and its batches for the copy engines.
 *
 * A copier owns a non-blocking stream, `n_events` events that the linker
 * records per layer, and a ring of KVL_COPIER_LISTS chunk lists in pinned
 * memory, each guarded by an event so a list is rewritten only after the
 * kernel that read it finished (a batch for the copy engines reads its
 * list during the call). All of a copier's calls come from one
 * thread; events may be waited on from others (cudaStreamWaitEvent on an
 * engine stream).
 */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gather.cuh"

#define KVL_COPIER_LISTS 8

/* cudaMemcpyBatchAsync (CUDA 12.8 and later) hands a list of copies to
 * the copy engines in one call, which takes no SM from the engine.
 * Measured on an H200 through the linker (bench_gpu, a 4 GiB, 32-layer
 * restore of objects not offloaded together, a batch per layer): 0.96-0.99
 * of the PCIe ceiling at 64 and 256 KiB copies against the gather
 * kernel's 0.92-0.96; at 32 KiB 0.70-0.75 against 0.85-0.88 (the call
 * blocks the loader while the engines take the copies), at 16 KiB 0.50 in
 * a probe. So lists of shorter copies stay on the kernel. */
#if CUDART_VERSION >= 12080
#define KVL_HAVE_BATCH 1
#else
#define KVL_HAVE_BATCH 0
#endif
#define KVL_BATCH_MIN_CHUNK (64u << 10)

struct kvl__copier {
	int device;
	int batch;        /* long chunks may go to the copy engines */
	const void **b_src; /* the batch's arrays (max_chunks each) */
	void **b_dst;
	size_t *b_len;
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

int kvl__cuda_ok(cudaError_t e)
{
	if (e == cudaSuccess)
		return 1;
	last_error = cudaGetErrorString(e);
	return 0;
}

static int ok(cudaError_t e)
{
	return kvl__cuda_ok(e);
}

cudaStream_t kvl__copier_stream(const kvl__copier *c)
{
	return c->stream;
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

extern "C" int kvl__copier_create(int device, uint32_t n_events,
                                  size_t max_chunks, int urgent, int batch,
                                  kvl__copier **out, const char **why)
{
	kvl__copier *c = (kvl__copier *)calloc(1, sizeof *c);
	if (!c) {
		*why = "out of memory";
		return -1;
	}
	c->device = device;
	c->n_events = n_events;
	c->max_chunks = max_chunks;
	c->batch = batch && KVL_HAVE_BATCH;
	if (c->batch) {
		c->b_src = (const void **)calloc(max_chunks, sizeof *c->b_src);
		c->b_dst = (void **)calloc(max_chunks, sizeof *c->b_dst);
		c->b_len = (size_t *)calloc(max_chunks, sizeof *c->b_len);
	}
	c->events = (cudaEvent_t *)calloc(n_events ? n_events : 1,
	                                  sizeof(cudaEvent_t));
	int least = 0, most = 0;
	int good = c->events &&
	           (!c->batch || (c->b_src && c->b_dst && c->b_len)) &&
	           ok(cudaSetDevice(device)) &&
	           ok(cudaDeviceGetStreamPriorityRange(&least, &most)) &&
	           ok(cudaStreamCreateWithPriority(&c->stream,
	                                           cudaStreamNonBlocking,
	                                           urgent ? most : least));
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
	free(c->b_src);
	free(c->b_dst);
	free(c->b_len);
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

/* Hands the n chunks of list to the copy engines as one batch, in stream
 * order. */
static int launch_batch(kvl__copier *c, const kvl__chunk *list, size_t n)
{
#if KVL_HAVE_BATCH
	for (size_t k = 0; k < n; k++) {
		c->b_src[k] = list[k].src;
		c->b_dst[k] = list[k].dst;
		c->b_len[k] = list[k].len;
	}
	cudaMemcpyAttributes at;
	memset(&at, 0, sizeof at);
	at.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
	at.flags = cudaMemcpyFlagPreferOverlapWithCompute;
	size_t first = 0;
#if CUDART_VERSION >= 13000
	return ok(cudaMemcpyBatchAsync((const void **)c->b_dst, c->b_src,
	                               c->b_len, n, &at, &first, 1,
	                               c->stream))
	               ? 0
	               : -1;
#else
	size_t fail = 0;
	return ok(cudaMemcpyBatchAsync(c->b_dst, (void **)c->b_src, c->b_len,
	                               n, &at, &first, 1, &fail, c->stream))
	               ? 0
	               : -1;
#endif
#else
	(void)c;
	(void)list;
	(void)n;
	return -1;
#endif
}

extern "C" int kvl__copier_launch(kvl__copier *c, size_t n,
                                  uint64_t *dma_bytes)
{
	unsigned i = c->next++ % KVL_COPIER_LISTS;
	*dma_bytes = 0;
	if (n == 0)
		return 0;
	uint64_t bytes, longest;
	kvl__chunks_measure(c->lists[i], n, &bytes, &longest);
	if (c->batch && bytes >= (uint64_t)n * KVL_BATCH_MIN_CHUNK) {
		/* The call reads the list itself: nothing on the GPU does. */
		if (launch_batch(c, c->lists[i], n))
			return -1;
		*dma_bytes = bytes;
		return 0;
	}
	kvl__gather_launch<false>(c->lists[i], n, bytes, longest, c->stream,
	                          KVL_WARP_BLOCKS, KVL_BLOCK_BLOCKS, 0);
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

extern "C" int kvl__copier_query(kvl__copier *c, uint32_t ev)
{
	cudaError_t e = cudaEventQuery(c->events[ev]);
	if (e == cudaErrorNotReady)
		return 0;
	return ok(e) ? 1 : -1;
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
