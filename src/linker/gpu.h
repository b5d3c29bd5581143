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

/* The chunk list being filled for the next launch of the load copier. */
typedef struct lk_gather {
	kvl__chunk *ch;
	size_t n;
	int err; /* a launch failed */
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
/* Records layer `layer`'s event after what gt launched: the layer's first
 * failure, or 0. */
int kvl__lk_gather_end(kvl_linker *lk, lk_gather *gt, uint32_t layer);

/* finish_layer and stream_wait of both GPU paths (path.h). */
int kvl__lk_gpu_finish_layer(kvl_linker *lk, uint32_t layer);
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
