/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu.h — what the linker's two GPU paths share (internal; CUDA builds):
 * the device and its two copiers (one driven by the loader, one by the
 * offloader), the gathering of chunk lists into kernel launches, layer
 * events and stream waits, and the offloads' common steps. path_view.c
 * and path_ring.c build on it; path_gpu.c implements it.
 *
 * Copier events: one per model layer (recorded after the layer's copies),
 * then one per half of the ring path's load ring.
 */
#ifndef KVL_LINKER_GPU_H
#define KVL_LINKER_GPU_H

#include "gpu/cuda.h"
#include "linker/path.h"

typedef struct lk_gpu {
	int device;
	kvl__copier *load, *off;
	/* A stream of its own on which kvl_linker_start_after captures the
	 * engine's event into event `batch % KVL_LINKER_MAX_BATCHES`, so a
	 * later record of the engine's event does not move the batch's
	 * gate, and no copier waits before the batch's turn. */
	kvl__copier *gate;
	size_t max_chunks;    /* chunks of one launch */
	kvl_range *scatter;   /* one item's read, as slot ranges */
	kvl_iov *pieces;      /* one page's slot pieces */
	lk_io load_io;        /* the loader's items of one store call */
	lk_io off_io;         /* the offloader's put list (ring path) */
	/* view path */
	kvl__view *pin_views; /* io_batch views, for one peek or release */
	kvl__view *off_views; /* objects being written in place */
	/* view path, copy engines (stage.c); stager NULL: kernel only */
	kvl__stager *stager;
	kvl__chunk *stage_list; /* the open half's scatter list, or NULL */
	uint8_t *stage_mem;     /* the open half */
	size_t stage_at;        /* its bytes used */
	size_t stage_n;         /* its chunks used */
	const lk_item **run;    /* the items of the run being collected */
	/* ring path */
	uint8_t *ring;        /* two halves of ring_half bytes */
	size_t ring_half;
	unsigned half;        /* the half being filled */
	int half_busy[2];     /* copies out of that half may still run */
	uint8_t *staging;     /* offloads: objects gathered for a put */
	size_t staging_len;
} lk_gpu;

/* Opens the device part for `path` (ring: 1 for the ring path, with its
 * ring and staging; 0 for the view path). Checks that GPU pools live on
 * one device, in CUDA memory only, and that the device is usable. */
int kvl__lk_gpu_open(kvl_linker *lk, int ring, char *errbuf, size_t errlen);
void kvl__lk_gpu_close(kvl_linker *lk);

/* Reads of one layer that lie at a constant pitch in store memory: the
 * first at `first`, the k-th at first + k * pitch (items in lk_gpu.run). */
typedef struct lk_run {
	const kvl__pool *p;
	kvl__read rd;
	const uint8_t *first;
	uint64_t pitch;
	size_t n;
} lk_run;

/* The chunk list being filled for the next launch of the load copier, and
 * the run being collected. */
typedef struct lk_gather {
	kvl__chunk *ch;
	size_t n;
	int err; /* a launch or a copy failed */
	lk_run run;
} lk_gather;

void kvl__lk_gather_start(kvl_linker *lk, lk_gather *gt);
/* Launches the chunks gathered so far (if any). */
void kvl__lk_gather_launch(kvl_linker *lk, lk_gather *gt);
/* Adds the chunks that copy read `rd` of item it into its slot, from
 * `src`, where the read's bytes are (pinned or device memory, rd->span
 * bytes). Counts them as loaded. */
void kvl__lk_gather_read(kvl_linker *lk, lk_gather *gt, const kvl__pool *p,
                         const kvl__read *rd, const lk_item *it,
                         const uint8_t *src);
/* The view path's read of an item's layer from store memory `src`: joins
 * the run being collected (sent to the copy engines or the kernel as
 * gpu_copy says once it ends), or is gathered by kernel. */
void kvl__lk_stage_read(kvl_linker *lk, lk_gather *gt, const kvl__pool *p,
                        const kvl__read *rd, const lk_item *it,
                        const uint8_t *src);
/* Sends the run being collected on its way (its 2D copies start now) and
 * empties it. */
void kvl__lk_stage_send(kvl_linker *lk, lk_gather *gt);
/* Sends the run and scatters the open half: call before
 * kvl__lk_gather_end. */
void kvl__lk_stage_end(kvl_linker *lk, lk_gather *gt);
/* The view path's copy engines: the stager when gpu_copy allows; 0 or
 * the failure (message in errbuf). */
int kvl__lk_stage_open(kvl_linker *lk, char *errbuf, size_t errlen);
/* Frees what kvl__lk_stage_open made (nothing if it made nothing). */
void kvl__lk_stage_close(kvl_linker *lk);

/* Records layer `layer`'s event after what gt launched: the layer's first
 * failure, or 0. */
int kvl__lk_gather_end(kvl_linker *lk, lk_gather *gt, uint32_t layer);

/* finish_layer, landed and stream_wait of both GPU paths (path.h). */
int kvl__lk_gpu_finish_layer(kvl_linker *lk, uint32_t layer);
int kvl__lk_gpu_landed(kvl_linker *lk, uint32_t layer);
int kvl__lk_gpu_stream_wait(kvl_linker *lk, uint32_t layer, void *stream);

/* gate and gate_wait of both GPU paths (path.h). */
int kvl__lk_gpu_gate(kvl_linker *lk, uint32_t slot, void *event);
int kvl__lk_gpu_gate_wait(kvl_linker *lk, uint32_t slot, int host_too);

/* Offloads: makes the offload copier wait for the engine's event (NULL:
 * nothing to wait for); on failure fails the n items and returns it. */
int kvl__lk_gpu_after(kvl_linker *lk, lk_req *r, lk_item **items, size_t n,
                      void *event);
/* Adds the chunks that gather every layer of GPU slot `slot` of p into the
 * payload of object memory `obj` (header first); returns how many. */
size_t kvl__lk_gpu_page_chunks(kvl_linker *lk, const kvl__pool *p,
                               size_t slot, uint8_t *obj, kvl__chunk *ch);
/* Launches the first n chunks of the offload copier's list and records
 * event `ev` after them; 0 or KVL_EIO. */
int kvl__lk_gpu_off_launch(kvl_linker *lk, size_t n, uint32_t ev);
/* Waits for the offload copier's event `ev`; 0 or KVL_EIO. */
int kvl__lk_gpu_off_sync(kvl_linker *lk, uint32_t ev);
/* The end j of the group of items [i, j) that fit `room` bytes of
 * objects, one chunk list and max_items items. */
size_t kvl__lk_gpu_off_group(kvl_linker *lk, lk_item **items, size_t i,
                             size_t n, size_t room, size_t max_items);

#endif /* KVL_LINKER_GPU_H */
