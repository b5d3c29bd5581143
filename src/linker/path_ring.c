/* SPDX-License-Identifier: Apache-2.0 */
/*
 * path_ring.c — the path of GPU pools over a store that cannot lend its
 * memory (path.h; Redis, Mooncake, the fault wrapper).
 *
 * Loads: the loader reads a store call's items (each layer's bytes; every
 * layer at the first on whole-object stores) into one half of a pinned,
 * mapped ring, checks them there, and gathers them into the GPU slots
 * from it. A half is refilled only after the copies out of it finished
 * (its own event), so the store's reads into one half overlap the GPU's
 * copies out of the other.
 *
 * Offloads: the GPU gathers the pages' layers from their slots into a
 * pinned staging area laid out as objects; the CPU seals each header and
 * puts the objects like any other.
 */
#include "linker/gpu.h"

/* The copier's event of ring half `half`: after the layers' events. */
static uint32_t half_event(const kvl_linker *lk, unsigned half)
{
	return lk->n_layers + half;
}

/* Reads the io's gathered items into the ring's current half (an item's
 * last range is its span there), checks them, launches their copies and
 * moves to the other half. Returns the first failure. */
static int ring_flush(kvl_linker *lk, uint32_t layer, lk_gather *gt)
{
	lk_gpu *g = lk->gpu;
	lk_io *io = &g->load_io;
	if (io->m == 0)
		return 0;
	const kvl_range *rg = io->pieces;
	int rc = kvl_store_get(lk->store, io->keyp, io->m, rg, io->counts,
	                       io->res);
	int first = 0;
	for (size_t k = 0; k < io->m; rg += io->counts[k], k++) {
		lk_item *it = io->items[k];
		lk_req *r = io->reqs[k];
		const kvl__pool *p = kvl__lk_pool(lk, it->pool);
		kvl__read rd = kvl__read_plan(p, kvl__pool_layer(p, layer),
		                              kvl__lk_pool_whole(lk, it->pool));
		const uint8_t *span = rg[io->counts[k] - 1].addr;
		int err = kvl__read_check(p, &r->pages[it->page], &rd,
		                          rc ? rc : io->res[k], it->hdr, span, 0,
		                          !lk->caps.trusted, lk->mac, NULL);
		if (err) {
			kvl__lk_req_fail(r, it->page, err);
			if (!first)
				first = err;
			continue;
		}
		kvl__lk_gather_read(lk, gt, p, &rd, it, span);
	}
	kvl__lk_gather_launch(lk, gt);
	if (kvl__copier_record(g->load, half_event(lk, g->half)) && !first)
		first = kvl__fail(&lk->err, KVL_EIO, "load: CUDA event: %s",
		                  kvl__cuda_last_error());
	g->half_busy[g->half] = 1;
	g->half ^= 1;
	io->m = io->used = 0;
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

static int ring_load_layer(kvl_linker *lk, lk_batch *b, uint32_t layer)
{
	lk_gpu *g = lk->gpu;
	lk_io *io = &g->load_io;
	kvl_range *rg = io->pieces;
	size_t filled = 0; /* bytes of the current half taken */
	int err = 0, e;
	lk_gather gt;
	kvl__lk_gather_start(lk, &gt);
	uint8_t *half = ring_take(lk, &err);
	lk_walk w;
	for (kvl__lk_walk_start(&w, lk, b, layer, &kvl__lk_path_ring);
	     kvl__lk_walk_next(&w);) {
		kvl__read rd = kvl__read_plan(w.p, w.ly,
		                              kvl__lk_pool_whole(lk, w.it->pool));
		if (rd.end == rd.first)
			continue; /* read with the first layer */
		if (filled + rd.span > g->ring_half || io->m == io->cap) {
			if ((e = ring_flush(lk, layer, &gt)) && !err)
				err = e;
			half = ring_take(lk, &err);
			filled = 0;
		}
		size_t c = kvl__read_into_span(w.p, &rd, w.it->hdr,
		                               half + filled, rg + io->used);
		kvl__lk_io_add(io, w.r, w.it, c);
		filled += kvl__round64(rd.span);
	}
	if ((e = ring_flush(lk, layer, &gt)) && !err)
		err = e;
	if ((e = kvl__lk_gather_end(lk, &gt, layer)) && !err)
		err = e;
	return err;
}

/* ------------------------------------------------------------- offloads */

static void ring_offload(kvl_linker *lk, lk_req *r, lk_item **items,
                         size_t n, void *event)
{
	lk_gpu *g = lk->gpu;
	lk_io *io = &g->off_io;
	if (kvl__lk_gpu_after(lk, r, items, n, event))
		return;
	for (size_t i = 0, j; i < n; i = j) {
		j = kvl__lk_gpu_off_group(lk, items, i, n, g->staging_len,
		                          lk->opts.io_batch);
		kvl__chunk *ch = kvl__copier_chunks(g->off);
		size_t n_ch = 0, off = 0;
		for (size_t k = i; k < j; k++) {
			const kvl__pool *p = kvl__lk_pool(lk, items[k]->pool);
			n_ch += kvl__lk_gpu_page_chunks(lk, p, items[k]->slot,
			                                g->staging + off,
			                                ch + n_ch);
			off += kvl__round64(p->object_size);
		}
		int err = kvl__lk_gpu_off_launch(lk, n_ch, 0);
		if (!err)
			err = kvl__lk_gpu_off_sync(lk, 0);
		kvl_iov *iov = io->pieces;
		off = 0;
		for (size_t k = i; k < j; k++) {
			const kvl__pool *p = kvl__lk_pool(lk, items[k]->pool);
			uint8_t *obj = g->staging + off;
			off += kvl__round64(p->object_size);
			if (err) {
				kvl__lk_req_fail(r, items[k]->page, err);
				continue;
			}
			if (kvl__write_seal(p, &r->pages[items[k]->page],
			                    !lk->caps.trusted, lk->mac, obj)) {
				kvl__lk_req_fail(r, items[k]->page, KVL_EIO);
				continue;
			}
			iov[io->used] = (kvl_iov){.addr = obj,
			                          .len = p->object_size};
			kvl__lk_io_add(io, r, items[k], 1);
		}
		int rc = io->m ? kvl_store_put(lk->store, io->keyp, io->m,
		                               io->pieces, io->counts, io->res)
		               : 0;
		for (size_t k = 0; k < io->m; k++)
			kvl__lk_count_put(lk, r, io->items[k],
			                  rc ? rc : io->res[k]);
		io->m = io->used = 0;
	}
}

static int ring_open(kvl_linker *lk, char *errbuf, size_t errlen)
{
	return kvl__lk_gpu_open(lk, 1, errbuf, errlen);
}

const lk_path kvl__lk_path_ring = {
	.open = ring_open,
	.close = kvl__lk_gpu_close,
	.load_layer = ring_load_layer,
	.finish_layer = kvl__lk_gpu_finish_layer,
	.landed = kvl__lk_gpu_landed,
	.stream_wait = kvl__lk_gpu_stream_wait,
	.gate = kvl__lk_gpu_gate,
	.gate_wait = kvl__lk_gpu_gate_wait,
	.offload = ring_offload,
};
