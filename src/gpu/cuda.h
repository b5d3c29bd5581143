/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda.h — kvlink's GPU copies (internal; built only with CUDA).
 *
 * C callers see no CUDA header: streams and events are opaque. One copier
 * belongs to one linker thread (the loader or the offloader) and moves lists
 * of (source, destination, length) chunks with one kernel launch per list:
 * a gather kernel in which a warp (small chunks) or a thread block (large
 * ones) copies each chunk with 16-byte loads and stores. Host memory it
 * touches must be pinned and mapped (kvl__cuda_host_alloc), so the kernel
 * reads or writes it over PCIe directly; one launch per layer reaches 0.9
 * of the PCIe ceiling at every chunk size, where one cudaMemcpyAsync per
 * chunk tops out near 5 GB/s at 16 KiB. A stager instead lets the copy
 * engines move runs of objects (2D copies) into device memory, from where
 * the copier scatters them.
 */
#ifndef KVL_CUDA_H
#define KVL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvl__chunk {
	const void *src;
	void *dst;
	uint64_t len;
} kvl__chunk;

/* 1 if a CUDA device is usable in this process. */
int kvl__cuda_usable(void);

/* Pinned, mapped host memory (usable by kernels through the same pointer),
 * or NULL. */
void *kvl__cuda_host_alloc(size_t len);
void kvl__cuda_host_free(void *p);
/* Device memory on device 0, for tests. */
void *kvl__cuda_dev_alloc(size_t len);
void kvl__cuda_dev_free(void *p);

typedef struct kvl__copier kvl__copier;

/* A copier on `device` with `n_events` reusable events (one per layer) and
 * room for `max_chunks` chunks per launch; `urgent`: its stream has the
 * device's highest priority, so its short kernels are scheduled ahead of
 * an engine's queued blocks; `batch`: lists of long chunks (64 KiB and
 * more on average) go to the copy engines in one cudaMemcpyBatchAsync
 * where the CUDA runtime has it (12.8 and later), the rest to the kernel.
 * *why gets a static message on failure. */
int kvl__copier_create(int device, uint32_t n_events, size_t max_chunks,
                       int urgent, int batch, kvl__copier **out,
                       const char **why);
void kvl__copier_destroy(kvl__copier *c);

/* The copier's chunk list for the next launch (max_chunks entries), in
 * pinned memory the kernel reads. Valid until the next launch's list is
 * asked for; kvl__copier_launch waits, if needed, until the kernel that
 * used it last has finished. */
kvl__chunk *kvl__copier_chunks(kvl__copier *c);

/* Enqueues the copies of the first n chunks of the list: one kernel, or
 * one batch for the copy engines (see batch above; the call may block
 * until the engines have taken most of it). *dma_bytes gets the bytes
 * handed to the copy engines (0 for a kernel). 0 or -1. */
int kvl__copier_launch(kvl__copier *c, size_t n, uint64_t *dma_bytes);

/* Records event `ev` after everything enqueued so far. */
int kvl__copier_record(kvl__copier *c, uint32_t ev);
/* Blocks until event `ev` has completed. */
int kvl__copier_sync(kvl__copier *c, uint32_t ev);
/* Whether event `ev` has completed, without waiting: 1 yes, 0 not yet,
 * -1 an error (kvl__copier_sync reports it). */
int kvl__copier_query(kvl__copier *c, uint32_t ev);
/* Makes `stream` (a cudaStream_t, NULL for the default stream) wait for
 * event `ev` on the GPU. */
int kvl__copier_stream_wait(kvl__copier *c, uint32_t ev, void *stream);
/* Makes the copier's stream wait for an engine's event (as recorded at
 * the time of the call). */
int kvl__copier_after(kvl__copier *c, void *event);
/* Makes c's stream wait for event `ev` of copier `other`. */
int kvl__copier_wait_copier(kvl__copier *c, kvl__copier *other, uint32_t ev);

/* A staging ring for copier c (stage.cu): two halves of half_bytes of
 * device memory that 2D copies on a stream of the stager's own fill from
 * pinned host memory (the copy engines), and scatters of up to max_chunks
 * chunks on c's stream empty into their destinations. One thread drives
 * it (c's). */
typedef struct kvl__stager kvl__stager;

int kvl__stager_create(kvl__copier *c, int device, size_t half_bytes,
                       size_t max_chunks, kvl__stager **out,
                       const char **why);
/* Waits for the ring's work, then frees it. NULL is a no-op. */
void kvl__stager_destroy(kvl__stager *s);
size_t kvl__stager_half_bytes(const kvl__stager *s);
/* Opens the next half for filling: blocks until the scatter that last
 * read it has finished; returns its device address and, in *list, its
 * scatter list (max_chunks entries, pinned). */
uint8_t *kvl__stager_half(kvl__stager *s, kvl__chunk **list);
/* Enqueues a copy of `rows` rows of `width` bytes from pinned `src`, one
 * every `spitch` bytes, into the open half at offset `at`, one every
 * `dpitch` bytes. 0 or -1. */
int kvl__stager_copy(kvl__stager *s, size_t at, size_t dpitch,
                     const void *src, size_t spitch, size_t width,
                     size_t rows);
/* Closes the open half: c's stream waits for its copies, then scatters
 * the first n chunks of its list (sources in the half). 0 or -1. */
int kvl__stager_scatter(kvl__stager *s, size_t n);
/* The text of the last CUDA error of this thread, for messages. */
const char *kvl__cuda_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* KVL_CUDA_H */
