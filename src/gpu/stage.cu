/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stage.cu — the staging ring of copy-engine loads (see cuda.h).
 *
 * Two halves of device memory. The loader fills one with 2D copies from
 * pinned host memory on the stager's own stream (cudaMemcpy2DAsync: the
 * DMA engines move the bytes, no SM is used), then hands it to the
 * copier: the copier's stream waits for those copies and runs one scatter
 * kernel from the half into the slots (HBM to HBM, short, with loads and
 * stores that do not keep the half in L2: gather.cuh). Meanwhile the
 * other half fills. A half, and its scatter list in pinned memory, is
 * written again only once the scatter that read it has finished. The
 * scatter's slots are written on the copier's stream only, after the
 * batch's gate; the stager's stream writes the ring alone.
 */
#include <stdlib.h>

#include "gpu/gather.cuh"

/* A scatter moves HBM to HBM: more blocks than a PCIe gather takes, so it
 * is over in a short time (a 32 MiB half in about 50 microseconds). */
#define KVL_SCATTER_WARP_BLOCKS 64
#define KVL_SCATTER_BLOCK_BLOCKS 128

/* Large chunks are scattered in slices of this many bytes, a block each:
 * a half of sixteen 2 MiB chunks would otherwise be sixteen blocks, each
 * copying 2 MiB alone, and under an engine's GEMMs (where blocks start
 * only as the GEMM's finish) the half's scatter took long enough to hold
 * up the copy engines. */
#define KVL_SCATTER_SLICE (256u << 10)

struct kvl__stager {
	kvl__copier *c;
	cudaStream_t dma;
	uint8_t *ring;              /* device memory: two halves */
	size_t half_bytes;
	kvl__chunk *lists[2];       /* pinned: each half's scatter list */
	cudaEvent_t copied[2];      /* after a half's 2D copies (dma) */
	cudaEvent_t scattered[2];   /* after its scatter (the copier's) */
	int busy[2];                /* a scatter of the half may still run */
	unsigned half;              /* the half being filled */
};

extern "C" int kvl__stager_create(kvl__copier *c, int device,
                                  size_t half_bytes, size_t max_chunks,
                                  kvl__stager **out, const char **why)
{
	kvl__stager *s = (kvl__stager *)calloc(1, sizeof *s);
	if (!s) {
		*why = "out of memory";
		return -1;
	}
	s->c = c;
	s->half_bytes = half_bytes;
	int good = kvl__cuda_ok(cudaSetDevice(device)) &&
	           kvl__cuda_ok(cudaStreamCreateWithFlags(
			   &s->dma, cudaStreamNonBlocking)) &&
	           kvl__cuda_ok(cudaMalloc((void **)&s->ring, 2 * half_bytes));
	for (int h = 0; good && h < 2; h++) {
		s->lists[h] = (kvl__chunk *)kvl__cuda_host_alloc(
			max_chunks * sizeof(kvl__chunk));
		good = s->lists[h] &&
		       kvl__cuda_ok(cudaEventCreateWithFlags(
			       &s->copied[h], cudaEventDisableTiming)) &&
		       kvl__cuda_ok(cudaEventCreateWithFlags(
			       &s->scattered[h], cudaEventDisableTiming));
	}
	if (!good) {
		*why = kvl__cuda_last_error();
		kvl__stager_destroy(s);
		return -1;
	}
	*out = s;
	return 0;
}

extern "C" void kvl__stager_destroy(kvl__stager *s)
{
	if (!s)
		return;
	if (s->dma)
		cudaStreamSynchronize(s->dma);
	for (int h = 0; h < 2; h++) {
		if (s->busy[h])
			cudaEventSynchronize(s->scattered[h]);
		kvl__cuda_host_free(s->lists[h]);
		if (s->copied[h])
			cudaEventDestroy(s->copied[h]);
		if (s->scattered[h])
			cudaEventDestroy(s->scattered[h]);
	}
	if (s->ring)
		cudaFree(s->ring);
	if (s->dma)
		cudaStreamDestroy(s->dma);
	free(s);
}

extern "C" size_t kvl__stager_half_bytes(const kvl__stager *s)
{
	return s->half_bytes;
}

extern "C" uint8_t *kvl__stager_half(kvl__stager *s, kvl__chunk **list)
{
	unsigned h = s->half;
	if (s->busy[h]) {
		cudaEventSynchronize(s->scattered[h]);
		s->busy[h] = 0;
	}
	*list = s->lists[h];
	return s->ring + h * s->half_bytes;
}

extern "C" int kvl__stager_copy(kvl__stager *s, size_t at, size_t dpitch,
                                const void *src, size_t spitch,
                                size_t width, size_t rows)
{
	uint8_t *dst = s->ring + s->half * s->half_bytes + at;
	return kvl__cuda_ok(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width,
	                                      rows, cudaMemcpyHostToDevice,
	                                      s->dma))
	               ? 0
	               : -1;
}

extern "C" int kvl__stager_scatter(kvl__stager *s, size_t n)
{
	unsigned h = s->half;
	s->half ^= 1;
	if (n == 0)
		return 0;
	cudaStream_t cs = kvl__copier_stream(s->c);
	if (!kvl__cuda_ok(cudaEventRecord(s->copied[h], s->dma)) ||
	    !kvl__cuda_ok(cudaStreamWaitEvent(cs, s->copied[h], 0)))
		return -1;
	uint64_t bytes, longest;
	kvl__chunks_measure(s->lists[h], n, &bytes, &longest);
	kvl__gather_launch<true>(s->lists[h], n, bytes, longest, cs,
	                         KVL_SCATTER_WARP_BLOCKS,
	                         KVL_SCATTER_BLOCK_BLOCKS, KVL_SCATTER_SLICE);
	s->busy[h] = 1;
	return kvl__cuda_ok(cudaGetLastError()) &&
	               kvl__cuda_ok(cudaEventRecord(s->scattered[h], cs))
	       ? 0
	       : -1;
}
