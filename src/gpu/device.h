/*
 * device.h — GPU memory for the tool and tests, in every build (internal):
 * without CUDA, or without a usable device, allocation fails and copies
 * return KVL_ENOTSUP, so callers need no #if of their own.
 */
#ifndef KVL_DEVICE_H
#define KVL_DEVICE_H

#include <stddef.h>

/* 1 if this build has CUDA and a device is usable. */
int kvl__dev_usable(void);
/* Device memory (device 0), or NULL. */
void *kvl__dev_alloc(size_t len);
void kvl__dev_free(void *p);
/* Pinned host memory, or NULL. */
void *kvl__dev_host_alloc(size_t len);
void kvl__dev_host_free(void *p);
/* A synchronous copy between any host and device memory: 0, KVL_EIO, or
 * KVL_ENOTSUP without CUDA. */
int kvl__dev_copy(void *dst, const void *src, size_t len);

#endif
