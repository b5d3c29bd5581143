/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu_reader.cu — an engine kernel that still reads the KV slots: it waits
 * `spin_ns` on the GPU, then copies `len` bytes from `src` to `dst`, on the
 * engine's stream. test_gpu uses it to check that a batch started after an
 * event writes nothing before the kernels the event follows have read.
 */
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

static __device__ uint64_t gpu_ns(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

static __global__ void slow_read(const uint8_t *src, uint8_t *dst, size_t len,
                                 uint64_t spin_ns)
{
	__shared__ int go;
	if (threadIdx.x == 0) {
		uint64_t end = gpu_ns() + spin_ns;
		while (gpu_ns() < end)
			__nanosleep(1000);
		go = 1;
	}
	__syncthreads();
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; go && i < len;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = src[i];
}

extern "C" int kvl_test_slow_read(const void *src, void *dst, size_t len,
                                  uint64_t spin_ns, void *stream)
{
	/* One block: the spin and the copy are one kernel, in order. */
	slow_read<<<1, 256, 0, (cudaStream_t)stream>>>(
		(const uint8_t *)src, (uint8_t *)dst, len, spin_ns);
	return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
