/* SPDX-License-Identifier: Apache-2.0 */
/*
 * device.c — the one place that turns "no CUDA in this build" into plain
 * failures (device.h).
 */
#include "gpu/device.h"
#include "kvl_config.h"
#include "kvlink.h"
#if KVL_HAVE_CUDA
#include "gpu/cuda.h"
#endif

int kvl__dev_usable(void)
{
#if KVL_HAVE_CUDA
	return kvl__cuda_usable();
#else
	return 0;
#endif
}

void *kvl__dev_host_alloc(size_t len)
{
#if KVL_HAVE_CUDA
	return kvl__cuda_usable() ? kvl__cuda_host_alloc(len) : NULL;
#else
	(void)len;
	return NULL;
#endif
}

void kvl__dev_host_free(void *p)
{
#if KVL_HAVE_CUDA
	kvl__cuda_host_free(p);
#else
	(void)p;
#endif
}
