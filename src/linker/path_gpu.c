/* SPDX-License-Identifier: Apache-2.0 */
/*
 * path_gpu.c — what the two GPU paths share (gpu.h): opening the device
 * and its copiers, gathering chunk lists into launches, layer events,
 * stream waits and the common steps of offloads.
 *
 * Threads: `load`, the load scratch and the ring belong to the loader;
 * `off` and the offload scratch to the offloader. Engine threads only
 * enqueue waits on the load copier's events, which CUDA allows from any
 * thread.
 */
#include <stdlib.h>

#include "linker/gpu.h"

#define GPU_STAGING (256ull << 20)
/* The most one half of the load ring holds, unless one item needs more. */
#define GPU_RING_HALF (64ull << 20)

/* The CUDA device of the GPU pools (-1 if none), after checking that each
 * lives in CUDA memory only and all on one device. */
static int gpu_device(const kvl_linker *lk, char *errbuf, size_t errlen,
                      int *device)
{
	const kvl_layout *l = lk->layout;
	*device = -1;
	for (size_t i = 0; i < l->n_pools; i++) {
		const kvl__pool *p = &l->pools[i];
		if (!p->on_cuda)
			continue;
		for (size_t k = 0; k < p->n_bufs; k++) {
			const kvl_buffer *b = &p->bufs[k].b;
			if (b->mem != KVL_MEM_CUDA)
				return kvl__fail_buf(errbuf, errlen, KVL_ENOTSUP,
				                     "pool '%s' mixes host and "
				                     "CUDA buffers",
				                     p->name);
			if (*device >= 0 && b->device != *device)
				return kvl__fail_buf(errbuf, errlen, KVL_ENOTSUP,
				                     "GPU pools span devices %d "
				                     "and %d; one linker serves "
				                     "one device",
				                     *device, b->device);
			*device = b->device;
		}
	}
	return 0;
}

int kvl__lk_gpu_open(kvl_linker *lk, int ring, char *errbuf, size_t errlen)
{
	const kvl_layout *l = lk->layout;
	int device;
	int rc = gpu_device(lk, errbuf, errlen, &device);
	if (rc)
		return rc;
	size_t max_obj = 0, max_span = 0; /* bytes of one item's read */
	for (size_t i = 0; i < l->n_pools; i++) {
		const kvl__pool *p = &l->pools[i];
		if (!p->on_cuda)
			continue;
		if (p->object_size > max_obj)
			max_obj = p->object_size;
		for (uint32_t k = 0; k < p->n_layers; k++) {
			kvl__read rd = kvl__read_plan(p, &p->layers[k],
			                              kvl__lk_pool_whole(lk, i));
			size_t span = kvl__round64(rd.span);
			if (span > max_span)
				max_span = span;
		}
	}
	if (!kvl__cuda_usable())
		return kvl__fail_buf(errbuf, errlen, KVL_ENOTSUP,
		                     "a pool lives on CUDA device %d but no "
		                     "CUDA device is usable here",
		                     device);
	lk_gpu *g = calloc(1, sizeof *g);
	if (!g)
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "out of memory");
	lk->gpu = g;
	g->device = device;
	size_t n = lk->opts.io_batch;
	/* A layer of io_batch items per launch, and at least a whole page:
	 * an offload group must always take one. */
	g->max_chunks = n * (lk->max_comps ? lk->max_comps : 1);
	if (g->max_chunks < lk->max_pieces)
		g->max_chunks = lk->max_pieces;
	int ok = !kvl__lk_io_alloc(&g->load_io, n, 2 * sizeof(kvl_range), 0);
	g->scatter = calloc(lk->max_pieces, sizeof *g->scatter);
	g->pieces = calloc(lk->max_pieces, sizeof *g->pieces);
	ok = ok && g->scatter && g->pieces;
	if (ring) {
		ok = ok && !kvl__lk_io_alloc(&g->off_io, n, sizeof(kvl_iov), 0);
		g->staging_len = max_obj > GPU_STAGING ? max_obj : GPU_STAGING;
		g->staging = kvl__cuda_host_alloc(g->staging_len);
		/* A half holds a store call's items where it can. */
		g->ring_half = n * max_span < GPU_RING_HALF ? n * max_span
		                                            : GPU_RING_HALF;
		if (g->ring_half < max_span)
			g->ring_half = max_span;
		g->ring = kvl__cuda_host_alloc(2 * g->ring_half);
		ok = ok && g->staging && g->ring;
		if (ok) { /* reads land in the ring, puts leave staging */
			kvl__lk_register(lk, g->ring, 2 * g->ring_half);
			kvl__lk_register(lk, g->staging, g->staging_len);
		}
	} else {
		g->pin_views = calloc(n, sizeof *g->pin_views);
		g->off_views = calloc(n, sizeof *g->off_views);
		ok = ok && g->pin_views && g->off_views;
	}
	const char *why = "out of memory";
	if (!ok ||
	    kvl__copier_create(device, lk->n_layers + 2, g->max_chunks, 1,
	                       lk->opts.gpu_copy != KVL_GPU_COPY_KERNEL,
	                       &g->load, &why) ||
	    kvl__copier_create(device, 2, g->max_chunks, 0, 0, &g->off,
	                       &why) ||
	    kvl__copier_create(device, KVL_LINKER_MAX_BATCHES, 1, 0, 0,
	                       &g->gate, &why))
		return kvl__fail_buf(errbuf, errlen, KVL_EIO,
		                     "cannot set up GPU copies on device %d: %s",
		                     device, why);
	return 0;
}

void kvl__lk_gpu_close(kvl_linker *lk)
{
	lk_gpu *g = lk->gpu;
	if (!g)
		return;
	kvl__lk_stage_close(lk); /* before the copier its scatters run on */
	kvl__copier_destroy(g->load);
	kvl__copier_destroy(g->off);
	kvl__copier_destroy(g->gate);
	kvl__lk_io_free(&g->load_io);
	kvl__lk_io_free(&g->off_io);
	free(g->scatter);
	free(g->pieces);
	free(g->pin_views);
	free(g->off_views);
	kvl__cuda_host_free(g->staging);
	kvl__cuda_host_free(g->ring);
	free(g);
	lk->gpu = NULL;
}

/* ---------------------------------------------------------------- loads */

void kvl__lk_gather_start(kvl_linker *lk, lk_gather *gt)
{
	*gt = (lk_gather){.ch = kvl__copier_chunks(lk->gpu->load)};
}

void kvl__lk_gather_launch(kvl_linker *lk, lk_gather *gt)
{
	if (gt->n == 0)
		return;
	uint64_t dma = 0;
	if (kvl__copier_launch(lk->gpu->load, gt->n, &dma) && !gt->err)
		gt->err = kvl__fail(&lk->err, KVL_EIO,
		                    "load: GPU copy failed: %s",
		                    kvl__cuda_last_error());
	KVL__COUNT(&lk->stats, loaded_dma_bytes, dma);
	gt->ch = kvl__copier_chunks(lk->gpu->load);
	gt->n = 0;
}

void kvl__lk_gather_read(kvl_linker *lk, lk_gather *gt, const kvl__pool *p,
                         const kvl__read *rd, const lk_item *it,
                         const uint8_t *src)
{
	lk_gpu *g = lk->gpu;
	size_t n = kvl__read_into_slot(p, rd, NULL, it->slot, g->scatter);
	if (gt->n + n > g->max_chunks)
		kvl__lk_gather_launch(lk, gt);
	for (size_t k = 0; k < n; k++)
		gt->ch[gt->n++] = (kvl__chunk){
			.src = src + (g->scatter[k].offset - rd->offset),
			.dst = g->scatter[k].addr,
			.len = g->scatter[k].len};
	KVL__COUNT(&lk->stats, loaded_bytes, rd->span);
}

int kvl__lk_gather_end(kvl_linker *lk, lk_gather *gt, uint32_t layer)
{
	kvl__lk_gather_launch(lk, gt);
	int err = gt->err;
	if (kvl__copier_record(lk->gpu->load, layer) && !err)
		err = kvl__fail(&lk->err, KVL_EIO, "load: CUDA event: %s",
		                kvl__cuda_last_error());
	return err;
}

int kvl__lk_gpu_finish_layer(kvl_linker *lk, uint32_t layer)
{
	if (kvl__copier_sync(lk->gpu->load, layer))
		return kvl__fail(&lk->err, KVL_EIO,
		                 "load: GPU copy failed: %s",
		                 kvl__cuda_last_error());
	return 0;
}

int kvl__lk_gpu_landed(kvl_linker *lk, uint32_t layer)
{
	return kvl__copier_query(lk->gpu->load, layer) == 1;
}

int kvl__lk_gpu_stream_wait(kvl_linker *lk, uint32_t layer, void *stream)
{
	if (kvl__copier_stream_wait(lk->gpu->load, layer, stream))
		return kvl__fail(&lk->err, KVL_EIO,
		                 "wait_stream: cudaStreamWaitEvent: %s",
		                 kvl__cuda_last_error());
	return 0;
}

/* ---------------------------------------------------------------- gates */

int kvl__lk_gpu_gate(kvl_linker *lk, uint32_t slot, void *event)
{
	lk_gpu *g = lk->gpu;
	if (kvl__copier_after(g->gate, event) ||
	    kvl__copier_record(g->gate, slot))
		return kvl__fail(&lk->err, KVL_EIO,
		                 "start: waiting for the event: %s",
		                 kvl__cuda_last_error());
	return 0;
}

int kvl__lk_gpu_gate_wait(kvl_linker *lk, uint32_t slot, int host_too)
{
	lk_gpu *g = lk->gpu;
	if (kvl__copier_wait_copier(g->load, g->gate, slot) ||
	    (host_too && kvl__copier_sync(g->gate, slot)))
		return kvl__fail(&lk->err, KVL_EIO,
		                 "load: waiting for the start event: %s",
		                 kvl__cuda_last_error());
	return 0;
}

/* ------------------------------------------------------------- offloads */

int kvl__lk_gpu_after(kvl_linker *lk, lk_req *r, lk_item **items, size_t n,
                      void *event)
{
	if (!event || !kvl__copier_after(lk->gpu->off, event))
		return 0;
	kvl__fail(&lk->err, KVL_EIO, "offload: waiting for the event: %s",
	          kvl__cuda_last_error());
	for (size_t i = 0; i < n; i++)
		kvl__lk_req_fail(r, items[i]->page, KVL_EIO);
	return KVL_EIO;
}

size_t kvl__lk_gpu_page_chunks(kvl_linker *lk, const kvl__pool *p,
                               size_t slot, uint8_t *obj, kvl__chunk *ch)
{
	kvl_iov *pc = lk->gpu->pieces;
	size_t n = kvl__write_pieces(p, NULL, slot, pc);
	uint8_t *at = obj + p->header_size;
	for (size_t k = 0; k < n; k++) {
		ch[k] = (kvl__chunk){.src = pc[k].addr, .dst = at,
		                     .len = pc[k].len};
		at += pc[k].len;
	}
	return n;
}

int kvl__lk_gpu_off_launch(kvl_linker *lk, size_t n, uint32_t ev)
{
	kvl__copier *c = lk->gpu->off;
	uint64_t dma;
	if (kvl__copier_launch(c, n, &dma) || kvl__copier_record(c, ev))
		return kvl__fail(&lk->err, KVL_EIO,
		                 "offload: GPU copy failed: %s",
		                 kvl__cuda_last_error());
	return 0;
}

int kvl__lk_gpu_off_sync(kvl_linker *lk, uint32_t ev)
{
	if (kvl__copier_sync(lk->gpu->off, ev))
		return kvl__fail(&lk->err, KVL_EIO,
		                 "offload: GPU copy failed: %s",
		                 kvl__cuda_last_error());
	return 0;
}

size_t kvl__lk_gpu_off_group(kvl_linker *lk, lk_item **items, size_t i,
                             size_t n, size_t room, size_t max_items)
{
	size_t used = 0, n_ch = 0, j = i;
	while (j < n && j - i < max_items) {
		const kvl__pool *p = kvl__lk_pool(lk, items[j]->pool);
		size_t size = kvl__round64(p->object_size);
		if (used + size > room ||
		    n_ch + p->max_pieces > lk->gpu->max_chunks)
			break;
		used += size;
		n_ch += p->max_pieces;
		j++;
	}
	return j;
}
