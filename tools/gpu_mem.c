/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu_mem.c — GPU memory for `kvlink bench --device cuda`, through CUDA's
 * runtime when the tool is built with it (KVL_TOOL_CUDA) and failing
 * plainly otherwise, so the rest of the tool needs no #if of its own.
 */
#include "cli.h"

int kvl_cli_gpu_usable(void)
{
	return kvl_has_feature("cuda-device");
}

#if KVL_TOOL_CUDA
#include <cuda_runtime.h>

void *kvl_cli_gpu_alloc(size_t len)
{
	void *p = NULL;
	return cudaMalloc(&p, len) == cudaSuccess ? p : NULL;
}

void kvl_cli_gpu_free(void *p)
{
	cudaFree(p);
}

void *kvl_cli_pinned_alloc(size_t len)
{
	void *p = NULL;
	return cudaHostAlloc(&p, len, cudaHostAllocDefault) == cudaSuccess ? p
	                                                                   : NULL;
}

void kvl_cli_pinned_free(void *p)
{
	cudaFreeHost(p);
}

int kvl_cli_gpu_copy(void *dst, const void *src, size_t len)
{
	return cudaMemcpy(dst, src, len, cudaMemcpyDefault) == cudaSuccess ? 0
	                                                                   : -1;
}
#else
void *kvl_cli_gpu_alloc(size_t len)
{
	(void)len;
	return NULL;
}

void kvl_cli_gpu_free(void *p)
{
	(void)p;
}

void *kvl_cli_pinned_alloc(size_t len)
{
	(void)len;
	return NULL;
}

void kvl_cli_pinned_free(void *p)
{
	(void)p;
}

int kvl_cli_gpu_copy(void *dst, const void *src, size_t len)
{
	(void)dst;
	(void)src;
	(void)len;
	return -1;
}
#endif
