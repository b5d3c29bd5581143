/* SPDX-License-Identifier: Apache-2.0 */
/*
 * device.h — what the library asks of a GPU without knowing whether this
 * build has CUDA (internal): without CUDA, or without a usable device,
 * nothing is usable and pinned allocations fail, so callers (the embedded
 * store's payload memory, kvl_has_feature) need no #if of their own.
 */
#ifndef KVL_DEVICE_H
#define KVL_DEVICE_H

#include <stddef.h>

/* 1 if this build has CUDA and a device is usable. */
int kvl__dev_usable(void);
/* Pinned, mapped host memory, or NULL. */
void *kvl__dev_host_alloc(size_t len);
void kvl__dev_host_free(void *p);

#endif
