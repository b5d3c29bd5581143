/*
 * linker_cuda.c — the linker's GPU path (CUDA builds only).
 *
 * Loads: for each layer, the loader pins the objects of every GPU-pool item
 * in the store (zero-copy views of pinned, mapped store memory), checks
 * them, and issues gather kernels that copy the layer's bytes straight from
 * store memory into the GPU slots (per group of objects pinned in the first
 * layer, per io_batch items after); then it records the layer's event. The
 * views stay pinned until the layer's copies finish
 * (kvl__lk_gpu_finish_layer, called after the next layer is issued), so an
 * object can be evicted meanwhile but its memory is not reused under the
 * copy. Engines wait for a layer on the CPU (kvl_linker_wait) or on a
 * stream (kvl_linker_wait_stream: cudaStreamWaitEvent on the layer's event).
 *
 * Stores that cannot lend their memory (no peek: Redis, Mooncake, the
 * fault wrapper) are staged instead: the loader reads a store call's items
 * (each layer's bytes; every layer at the first on whole_reads stores) into
 * one half of a pinned ring, checks them there, and gathers them into the
 * GPU slots from it. A half is refilled only after the copies out of it
 * finished, so the store's reads into one half overlap the GPU's copies
 * out of the other.
 *
 * Offloads: the offloader waits on the engine's event on its own stream,
 * gathers the pages' layers from the GPU slots into a pinned staging area
 * laid out as objects, sums each layer on the CPU, writes the headers and
 * puts the objects (or, on stores that lend memory, writes the objects in
 * place).
 *
 * Threads: `load`, the view sets and the ring belong to the loader thread;
 * `off` and the staging area to the offloader. Engine threads only enqueue
 * waits on the load copier's events, which CUDA allows from any thread.
 */
#include <stdio.h>
#include <stdlib.h>

#include "gpu/cuda.h"
#include "linker/linker.h"
#include "linker/pages.h"
#include "store/store.h"

#define GPU_STAGING (256ull << 20)
/* The most one half of the load ring holds, unless one item needs more. */
#define GPU_RING_HALF (64ull << 20)


typedef struct lk_gpu {
	int device;
	kvl__copier *load, *off;
	size_t max_chunks;
	kvl__view *pin_views; /* io_batch views, for one peek or release */
	lk_io load_io;        /* the loader's gathered items of one flush */
	lk_io off_io;         /* the offloader's put list */
	uint8_t *staging;     /* offloads: objects gathered for a put */
	size_t staging_len;
	kvl__view *off_views; /* objects being written in place */
	/* Staged loads (stores without peek): */
	uint8_t *ring;        /* two halves of ring_half bytes */
	size_t ring_half;
	unsigned half;        /* the half being filled */
	int half_busy[2];     /* copies out of that half may still run */
} lk_gpu;

/* The copier's events: one per layer, then one per ring half. */
static uint32_t half_event(const kvl_linker *lk, unsigned half)
{
	return lk->n_layers + half;
}

static const kvl__pool *gpu_pool(const kvl_linker *lk, uint32_t pool)
{
	return &lk->layout->pools[pool];
}

/* The layer of item `it` to load at model layer `layer`, or NULL: its pool
 * is not on the GPU or has no such layer, or a lower page of its request
 * failed. */
static const kvl__layer *gpu_item_layer(const kvl_linker *lk,
                                        const lk_req *r, const lk_item *it,
                                        uint32_t layer)
{
	const kvl__pool *p = gpu_pool(lk, it->pool);
	if (!p->on_cuda || it->page >= r->first_bad)
		return NULL;
	return kvl__pool_layer(p, layer);
}

/* The bytes read with layer ly of p: it and the layers read along
 * (kvl__lk_read_end), contiguous in the object. */
static size_t read_span(const kvl_linker *lk, const kvl__pool *p,
                        const kvl__layer *ly)
{
	const kvl__layer *end = kvl__lk_read_end(lk, p, ly);
	return end[-1].offset + end[-1].len - ly->offset;
}

int kvl__lk_gpu_open(kvl_linker *lk, char *errbuf, size_t errlen)
{
	const kvl_layout *l = lk->layout;
	int device = -1;
	size_t max_obj = 0, max_span = 0; /* bytes of one item's read */
	size_t max_pieces = 0;            /* chunks of one page's offload */
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
			if (device >= 0 && b->device != device)
				return kvl__fail_buf(errbuf, errlen, KVL_ENOTSUP,
				                     "GPU pools span devices %d "
				                     "and %d; one linker serves "
				                     "one device",
				                     device, b->device);
			device = b->device;
		}
		if (p->object_size > max_obj)
			max_obj = p->object_size;
		if (p->max_pieces > max_pieces)
			max_pieces = p->max_pieces;
		for (uint32_t k = 0; k < p->n_layers; k++) {
			size_t span = kvl__round64(read_span(lk, p, &p->layers[k]));
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
	if (g->max_chunks < max_pieces)
		g->max_chunks = max_pieces;
	int io_rc = kvl__lk_io_alloc(&g->load_io, n, 2 * sizeof(kvl_range),
	                             0) |
	            kvl__lk_io_alloc(&g->off_io, n, sizeof(kvl_iov), 0);
	g->off_views = calloc(n, sizeof *g->off_views);
	g->pin_views = calloc(n, sizeof *g->pin_views);
	g->staging_len = max_obj > GPU_STAGING ? max_obj : GPU_STAGING;
	g->staging = kvl__cuda_host_alloc(g->staging_len);
	if (!lk->store->ops->peek) {
		/* A half holds a store call's items where it can. */
		g->ring_half = n * max_span < GPU_RING_HALF ? n * max_span
		                                            : GPU_RING_HALF;
		if (g->ring_half < max_span)
			g->ring_half = max_span;
		g->ring = kvl__cuda_host_alloc(2 * g->ring_half);
	}
	const char *why = "out of memory";
	if (io_rc || !g->staging || !g->off_views || !g->pin_views ||
	    (g->ring_half && !g->ring) ||
	    kvl__copier_create(device, lk->n_layers + 2, g->max_chunks,
	                       &g->load, &why) ||
	    kvl__copier_create(device, 2, g->max_chunks, &g->off, &why))
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
	kvl__copier_destroy(g->load);
	kvl__copier_destroy(g->off);
	free(g->pin_views);
	kvl__cuda_host_free(g->staging);
	kvl__cuda_host_free(g->ring);
	kvl__lk_io_free(&g->load_io);
	kvl__lk_io_free(&g->off_io);
	free(g->off_views);
	free(g);
	lk->gpu = NULL;
}

/* Checks a pinned object for layer ly (the header at the pool's first
 * layer; the layer's checksum on untrusted stores); 0 or the reason it is
 * not valid. */
static int view_check(kvl_linker *lk, const kvl__pool *p, const kvl__layer *ly,
                      const lk_req *r, const lk_item *it, const kvl__view *v)
{
	if (v->len != p->object_size)
		return KVL_ECORRUPT;
	if (!v->pinned)
		return kvl__fail(&lk->err, KVL_ENOTSUP,
		                 "load: store memory is not pinned: GPU loads "
		                 "need mem:?pinned=1");
	if (ly == &p->layers[0]) {
		kvl__obj_id id = kvl__page_id(p, &r->pages[it->page]);
		if (kvl__obj_header_check(v->data, p->header_size, &id, NULL))
			return KVL_ECORRUPT;
	}
	if (!lk->store->trusted)
		return kvl__obj_layer_ok(v->data, (uint32_t)(ly - p->layers),
		                         kvl__object_layer_sum(p, ly, v->data));
	return 0;
}

/* The chunk list being filled for the next launch. */
typedef struct gather {
	kvl__chunk *ch;
	size_t n;
	int err;
} gather;

static void gather_launch(kvl_linker *lk, gather *gt)
{
	if (gt->n && kvl__copier_launch(lk->gpu->load, gt->n) && !gt->err)
		gt->err = kvl__fail(&lk->err, KVL_EIO,
		                    "load: GPU copy failed: %s",
		                    kvl__cuda_last_error());
	if (gt->n)
		gt->ch = kvl__copier_chunks(lk->gpu->load);
	gt->n = 0;
}

/* Adds the chunks copying layer ly of an item, whose bytes are at src
 * (pinned), into its slot. */
static void gather_add(kvl_linker *lk, gather *gt, const kvl__pool *p,
                       const kvl__layer *ly, const lk_item *it,
                       const uint8_t *src)
{
	if (gt->n + p->n_comps > lk->gpu->max_chunks)
		gather_launch(lk, gt);
	for (uint32_t c = 0; c < p->n_comps; c++) {
		const kvl_buffer *b = &ly->bufs[c]->b;
		gt->ch[gt->n++] = (kvl__chunk){
			.src = src,
			.dst = (char *)b->base + it->slot * b->page_stride,
			.len = b->page_bytes};
		src += b->page_bytes;
	}
	KVL__COUNT(&lk->stats, loaded_bytes, ly->len);
}

/* Fails an item of layer `layer`; returns the code. */
static int item_fail(lk_req *r, const lk_item *it, int code)
{
	kvl__lk_req_fail(r, it->page, code);
	return code;
}

/* Objects pinned per store call in a batch's first layer, whose chunks are
 * then launched at once: the first copy starts after this many objects
 * are pinned, not after all of them. Later layers launch a full chunk list
 * at a time (fewer kernel boundaries: 0.91 of the ceiling at 16 KiB chunks
 * where a launch per 512 pages gave 0.90). */
#define GPU_PIN_GROUP 512

/* Pins the m gathered items (their first layer of this batch), checks
 * them, adds the good ones' chunks and launches them. Returns the first
 * failure. */
static int pin_gathered(kvl_linker *lk, size_t m, uint32_t layer, gather *gt)
{
	lk_gpu *g = lk->gpu;
	lk_io *io = &g->load_io;
	kvl_store *st = lk->store;
	if (m == 0)
		return 0;
	int rc = st->ops->peek(st, st->impl, io->keyp, m, g->pin_views,
	                       io->res);
	int first = rc;
	size_t n_bad = 0; /* pinned but unusable: unpinned below */
	for (size_t k = 0; k < m; k++) {
		lk_item *it = io->items[k];
		lk_req *r = io->reqs[k];
		const kvl__pool *p = gpu_pool(lk, it->pool);
		const kvl__layer *ly = kvl__pool_layer(p, layer);
		kvl__view *v = &g->pin_views[k];
		int bad = rc ? rc
		          : io->res[k] < 0 ? io->res[k]
		          : !io->res[k]    ? KVL_ENOTFOUND
		                           : view_check(lk, p, ly, r, it, v);
		if (!bad) {
			it->view = *v;
			gather_add(lk, gt, p, ly, it,
			           (const uint8_t *)v->data + ly->offset);
			continue;
		}
		item_fail(r, it, bad);
		if (!first)
			first = bad;
		if (!rc && v->handle)
			g->pin_views[n_bad++] = *v; /* n_bad <= k: read already */
	}
	if (n_bad)
		st->ops->release(st, st->impl, g->pin_views, n_bad);
	gather_launch(lk, gt);
	return first;
}

/* ------------------------------------------------------- staged loads */

/* Reads the m gathered items' bytes of this layer into the ring's current
 * half (an item's last range is its span there), checks them, launches
 * their copies and moves to the other half. Returns the first failure. */
static int staged_flush(kvl_linker *lk, size_t m, uint32_t layer, gather *gt)
{
	lk_gpu *g = lk->gpu;
	lk_io *io = &g->load_io;
	if (m == 0)
		return 0;
	const kvl_range *rg = io->pieces;
	int rc = kvl_store_get(lk->store, io->keyp, m, rg, io->counts,
	                       io->got);
	int first = 0;
	for (size_t k = 0; k < m; rg += io->counts[k], k++) {
		lk_item *it = io->items[k];
		lk_req *r = io->reqs[k];
		const kvl__pool *p = gpu_pool(lk, it->pool);
		const kvl__layer *ly = kvl__pool_layer(p, layer);
		const kvl__layer *end = kvl__lk_read_end(lk, p, ly), *l;
		const uint8_t *span = rg[io->counts[k] - 1].addr;
		int err = kvl__lk_read_check(
			lk, r, it, ly,
			rc ? rc : io->got[k] < 0 ? (int)io->got[k] : 0, span);
		if (err) {
			item_fail(r, it, err);
			if (!first)
				first = err;
			continue;
		}
		for (l = ly; l < end; l++)
			gather_add(lk, gt, p, l, it,
			           span + (l->offset - ly->offset));
	}
	gather_launch(lk, gt);
	if (kvl__copier_record(g->load, half_event(lk, g->half)) && !first)
		first = kvl__fail(&lk->err, KVL_EIO, "load: CUDA event: %s",
		                  kvl__cuda_last_error());
	g->half_busy[g->half] = 1;
	g->half ^= 1;
	return first;
}

/* The current half of the ring, once the copies out of it finished. */
static uint8_t *ring_take(kvl_linker *lk, int *err)
{
	lk_gpu *g = lk->gpu;
	if (g->half_busy[g->half]) {
		if (kvl__copier_sync(g->load, half_event(lk, g->half)) && !*err)
			*err = kvl__fail(&lk->err, KVL_EIO,
			                 "load: GPU copy failed: %s",
			                 kvl__cuda_last_error());
		g->half_busy[g->half] = 0;
	}
	return g->ring + g->half * g->ring_half;
}

/* Layer `layer` of the batch's GPU items, from a store without peek. */
static int staged_load_layer(kvl_linker *lk, lk_batch *b, uint32_t layer,
                             gather *gt)
{
	lk_gpu *g = lk->gpu;
	lk_io *io = &g->load_io;
	kvl_range *rg = io->pieces;
	size_t m = 0, n_rg = 0, used = 0;
	int err = 0, e;
	uint8_t *half = ring_take(lk, &err);
	for (lk_req *r = b->reqs; r; r = r->qnext) {
		for (size_t i = 0; i < r->n_items; i++) {
			lk_item *it = &r->items[i];
			const kvl__layer *ly = gpu_item_layer(lk, r, it, layer);
			if (!ly)
				continue;
			const kvl__pool *p = gpu_pool(lk, it->pool);
			int first_layer = ly == &p->layers[0];
			if (lk->store->whole_reads && !first_layer)
				continue; /* read with the first layer */
			size_t len = read_span(lk, p, ly);
			if (used + len > g->ring_half || m == io->n) {
				if ((e = staged_flush(lk, m, layer, gt)) && !err)
					err = e;
				half = ring_take(lk, &err);
				m = n_rg = used = 0;
			}
			size_t c = 0;
			if (first_layer)
				rg[n_rg + c++] = (kvl_range){
					.offset = 0, .addr = it->hdr,
					.len = p->header_size};
			rg[n_rg + c++] = (kvl_range){.offset = ly->offset,
			                             .addr = half + used,
			                             .len = len};
			n_rg += c;
			used += kvl__round64(len);
			io->keyp[m] = it->key;
			io->items[m] = it;
			io->reqs[m] = r;
			io->counts[m++] = c;
		}
	}
	if ((e = staged_flush(lk, m, layer, gt)) && !err)
		err = e;
	return err;
}

/* Layer `layer` of the batch's GPU items, from a store that lends its
 * memory: objects pinned in the batch's first layer stay pinned for the
 * rest. */
static int pinned_load_layer(kvl_linker *lk, lk_batch *b, uint32_t layer,
                             gather *gt)
{
	lk_gpu *g = lk->gpu;
	lk_io *io = &g->load_io;
	size_t m = 0, group = lk->opts.io_batch < GPU_PIN_GROUP
	                              ? lk->opts.io_batch
	                              : GPU_PIN_GROUP;
	int err = 0, e;
	for (lk_req *r = b->reqs; r; r = r->qnext) {
		for (size_t i = 0; i < r->n_items; i++) {
			lk_item *it = &r->items[i];
			const kvl__layer *ly = gpu_item_layer(lk, r, it, layer);
			if (!ly)
				continue;
			const kvl__pool *p = gpu_pool(lk, it->pool);
			if (it->view.data) { /* pinned by an earlier layer */
				e = lk->store->trusted
				            ? 0
				            : view_check(lk, p, ly, r, it,
				                         &it->view);
				if (e) {
					item_fail(r, it, e);
					if (!err)
						err = e;
				} else {
					gather_add(lk, gt, p, ly, it,
					           (const uint8_t *)it->view.data +
					                   ly->offset);
				}
				continue;
			}
			io->keyp[m] = it->key;
			io->items[m] = it;
			io->reqs[m] = r;
			if (++m == group) {
				if ((e = pin_gathered(lk, m, layer, gt)) && !err)
					err = e;
				m = 0;
			}
		}
	}
	if ((e = pin_gathered(lk, m, layer, gt)) && !err)
		err = e;
	return err;
}

int kvl__lk_gpu_load_layer(kvl_linker *lk, lk_batch *b, uint32_t layer)
{
	lk_gpu *g = lk->gpu;
	gather gt = {.ch = kvl__copier_chunks(g->load)};
	int err = g->ring ? staged_load_layer(lk, b, layer, &gt)
	                  : pinned_load_layer(lk, b, layer, &gt);
	gather_launch(lk, &gt);
	if (gt.err && !err)
		err = gt.err;
	if (kvl__copier_record(g->load, layer) && !err)
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

void kvl__lk_gpu_end_batch(kvl_linker *lk, lk_batch *b)
{
	lk_gpu *g = lk->gpu;
	kvl_store *st = lk->store;
	size_t m = 0;
	for (lk_req *r = b->reqs; r; r = r->qnext)
		for (size_t i = 0; i < r->n_items; i++) {
			lk_item *it = &r->items[i];
			if (!it->view.handle)
				continue;
			g->pin_views[m++] = it->view;
			it->view = (kvl__view){0};
			if (m == lk->opts.io_batch) {
				st->ops->release(st, st->impl, g->pin_views, m);
				m = 0;
			}
		}
	if (m)
		st->ops->release(st, st->impl, g->pin_views, m);
}

int kvl_linker_wait_stream(kvl_linker *lk, uint64_t batch, uint32_t layer,
                           void *stream, uint32_t timeout_ms)
{
	if (!lk)
		return KVL_EINVAL;
	if (!lk->gpu) /* no GPU pool: the data is there once the layer is */
		return kvl_linker_wait(lk, batch, layer, timeout_ms);
	if (layer >= lk->n_layers)
		return kvl__fail(&lk->err, KVL_ERANGE,
		                 "wait_stream: layer %u >= %u layers", layer,
		                 lk->n_layers);
	lk_batch *b;
	pthread_mutex_lock(&lk->mu);
	int rc = kvl__lk_wait_layer_locked(lk, batch, layer, timeout_ms, 1,
	                                   "wait_stream", &b);
	int failed = rc == 0 && b->first_err && b->fail_layer <= layer
	                     ? b->first_err
	                     : 0;
	/* The event is the layer's in this batch or a later one; either way
	 * it completes only after this batch's copies of the layer. */
	if (rc == 0 && kvl__copier_stream_wait(lk->gpu->load, layer, stream))
		rc = kvl__fail(&lk->err, KVL_EIO,
		               "wait_stream: cudaStreamWaitEvent: %s",
		               kvl__cuda_last_error());
	pthread_mutex_unlock(&lk->mu);
	return rc ? rc : failed;
}

/* Chunks that gather every layer of GPU slot `slot` of p into the payload
 * of object memory `obj`; returns how many were written. */
static size_t page_chunks(const kvl__pool *p, size_t slot, uint8_t *obj,
                          kvl__chunk *ch)
{
	uint8_t *at = obj + p->header_size;
	for (uint32_t k = 0; k < p->max_pieces; k++) {
		const kvl_buffer *b = &p->ordered[k]->b;
		ch[k] = (kvl__chunk){.src = (char *)b->base + slot * b->page_stride,
		                     .dst = at,
		                     .len = b->page_bytes};
		at += b->page_bytes;
	}
	return p->max_pieces;
}

/* Writes the header of an object whose payload arrived in `obj`: layer
 * sums only for untrusted stores (kvl__obj_header_write). */
static void seal(kvl_linker *lk, const kvl__pool *p, const kvl_hash *page,
                 uint8_t *obj)
{
	uint64_t sums[p->n_layers];
	int summed = !lk->store->trusted;
	for (uint32_t li = 0; summed && li < p->n_layers; li++)
		sums[li] = kvl__object_layer_sum(p, &p->layers[li], obj);
	kvl__obj_id id = kvl__page_id(p, page);
	kvl__obj_header_write(obj, &id, summed ? sums : NULL);
}

static void count_put(kvl_linker *lk, lk_req *r, const lk_item *it, int res)
{
	if (res < 0) {
		kvl__lk_req_fail(r, it->page, res);
	} else if (res == KVL_PUT_PRESENT) {
		KVL__COUNT(&lk->stats, present_pages, 1);
	} else {
		KVL__COUNT(&lk->stats, offloaded_pages, 1);
		KVL__COUNT(&lk->stats, offloaded_bytes,
		           gpu_pool(lk, it->pool)->object_size);
	}
}

/* Launches the gathered chunks and records event `ev` after them; 0 or
 * KVL_EIO. */
static int off_launch(kvl_linker *lk, size_t n_ch, uint32_t ev)
{
	kvl__copier *c = lk->gpu->off;
	if (kvl__copier_launch(c, n_ch) || kvl__copier_record(c, ev))
		return kvl__fail(&lk->err, KVL_EIO,
		                 "offload: GPU copy failed: %s",
		                 kvl__cuda_last_error());
	return 0;
}

static int off_sync(kvl_linker *lk, uint32_t ev)
{
	if (kvl__copier_sync(lk->gpu->off, ev))
		return kvl__fail(&lk->err, KVL_EIO,
		                 "offload: GPU copy failed: %s",
		                 kvl__cuda_last_error());
	return 0;
}

/* Items [i, j) that fit `room` bytes, one chunk list and max_items. */
static size_t off_group(kvl_linker *lk, lk_item **items, size_t i, size_t n,
                        size_t room, size_t max_items)
{
	size_t used = 0, n_ch = 0, j = i;
	while (j < n && j - i < max_items) {
		const kvl__pool *p = gpu_pool(lk, items[j]->pool);
		size_t size = kvl__round64(p->object_size);
		if (used + size > room || n_ch + p->max_pieces > lk->gpu->max_chunks)
			break;
		used += size;
		n_ch += p->max_pieces;
		j++;
	}
	return j;
}

/* Pages per in-place copy launch: small, so that sealing and committing
 * one group on the CPU hides behind the GPU's copy of the next. */
#define GPU_OFF_GROUP 512

/* A group of in-place offloads: items [i, j), their views, the event
 * recorded after their copy (its parity), and a failure to launch. */
typedef struct off_grp {
	size_t i, j;
	kvl__view *v;
	uint32_t ev;
	int err;
} off_grp;

/* Reserves store memory for the group's pages and launches their copy. */
static void grp_start(kvl_linker *lk, lk_req *r, lk_item **items, off_grp *g)
{
	kvl_store *st = lk->store;
	kvl__chunk *ch = kvl__copier_chunks(lk->gpu->off);
	size_t n_ch = 0;
	for (size_t k = g->i; k < g->j; k++) {
		const kvl__pool *p = gpu_pool(lk, items[k]->pool);
		kvl__view *vk = &g->v[k - g->i];
		int rc = st->ops->reserve(st, st->impl, p->object_size, vk);
		if (rc == 0 && !vk->pinned) {
			st->ops->abort(st, st->impl, vk);
			rc = kvl__fail(&lk->err, KVL_ENOTSUP,
			               "offload: store memory is not pinned: "
			               "GPU offloads need mem:?pinned=1");
		}
		if (rc) {
			vk->data = NULL;
			kvl__lk_req_fail(r, items[k]->page, rc);
			continue;
		}
		n_ch += page_chunks(p, items[k]->slot, (uint8_t *)vk->data,
		                    ch + n_ch);
	}
	g->err = off_launch(lk, n_ch, g->ev);
}

/* Waits for the group's copy, then seals and commits its objects. */
static void grp_finish(kvl_linker *lk, lk_req *r, lk_item **items, off_grp *g)
{
	kvl_store *st = lk->store;
	int err = g->err ? g->err : off_sync(lk, g->ev);
	for (size_t k = g->i; k < g->j; k++) {
		kvl__view *vk = &g->v[k - g->i];
		if (!vk->data)
			continue;
		if (err) {
			st->ops->abort(st, st->impl, vk);
			kvl__lk_req_fail(r, items[k]->page, err);
			continue;
		}
		const kvl__pool *p = gpu_pool(lk, items[k]->pool);
		seal(lk, p, &r->pages[items[k]->page], (uint8_t *)vk->data);
		count_put(lk, r, items[k],
		          st->ops->commit(st, st->impl, items[k]->key, vk));
	}
}

/* Objects written in place: reserve store memory, let the GPU fill it,
 * seal and commit — no staging copy. Two groups are in flight: the GPU
 * copies one while the CPU finishes the other. */
static void offload_in_place(kvl_linker *lk, lk_req *r, lk_item **items,
                             size_t n)
{
	size_t half = lk->opts.io_batch / 2 ? lk->opts.io_batch / 2 : 1;
	size_t max = half < GPU_OFF_GROUP ? half : GPU_OFF_GROUP;
	off_grp grp[2];
	int live[2] = {0, 0};
	size_t i = 0;
	for (unsigned t = 0; i < n || live[0] || live[1]; t++) {
		off_grp *cur = &grp[t % 2], *prev = &grp[(t + 1) % 2];
		if (i < n) {
			*cur = (off_grp){.i = i, .v = lk->gpu->off_views +
			                               (t % 2) * half,
			                 .ev = t % 2};
			cur->j = off_group(lk, items, i, n, SIZE_MAX, max);
			grp_start(lk, r, items, cur);
			live[t % 2] = 1;
			i = cur->j;
		}
		if (live[(t + 1) % 2]) {
			grp_finish(lk, r, items, prev);
			live[(t + 1) % 2] = 0;
		}
	}
}

/* Objects gathered into pinned staging, then put like any other. */
static void offload_staged(kvl_linker *lk, lk_req *r, lk_item **items,
                           size_t n)
{
	lk_gpu *g = lk->gpu;
	lk_io *io = &g->off_io;
	for (size_t i = 0, j; i < n; i = j) {
		j = off_group(lk, items, i, n, g->staging_len,
		              lk->opts.io_batch);
		kvl__chunk *ch = kvl__copier_chunks(g->off);
		size_t n_ch = 0, off = 0;
		for (size_t k = i; k < j; k++) {
			const kvl__pool *p = gpu_pool(lk, items[k]->pool);
			n_ch += page_chunks(p, items[k]->slot, g->staging + off,
			                    ch + n_ch);
			off += kvl__round64(p->object_size);
		}
		int err = off_launch(lk, n_ch, 0);
		if (!err)
			err = off_sync(lk, 0);
		size_t w = 0;
		off = 0;
		for (size_t k = i; k < j; k++) {
			const kvl__pool *p = gpu_pool(lk, items[k]->pool);
			uint8_t *obj = g->staging + off;
			off += kvl__round64(p->object_size);
			if (err) {
				kvl__lk_req_fail(r, items[k]->page, err);
				continue;
			}
			seal(lk, p, &r->pages[items[k]->page], obj);
			kvl_iov *iov = io->pieces;
			iov[w] = (kvl_iov){.addr = obj, .len = p->object_size};
			io->counts[w] = 1;
			io->keyp[w] = items[k]->key;
			io->items[w++] = items[k];
		}
		int rc = w ? kvl_store_put(lk->store, io->keyp, w, io->pieces,
		                           io->counts, io->res)
		           : 0;
		for (size_t k = 0; k < w; k++)
			count_put(lk, r, io->items[k], rc ? rc : io->res[k]);
	}
}

/* Copies n offload items (absent from the store) of GPU pools, after the
 * engine's event. */
void kvl__lk_gpu_offload(kvl_linker *lk, lk_req *r, lk_item **items,
                         size_t n, void *event)
{
	lk_gpu *g = lk->gpu;
	if (event && kvl__copier_after(g->off, event)) {
		kvl__fail(&lk->err, KVL_EIO, "offload: waiting for the event: %s",
		          kvl__cuda_last_error());
		for (size_t i = 0; i < n; i++)
			kvl__lk_req_fail(r, items[i]->page, KVL_EIO);
		return;
	}
	if (lk->store->ops->reserve)
		offload_in_place(lk, r, items, n);
	else
		offload_staged(lk, r, items, n);
}
