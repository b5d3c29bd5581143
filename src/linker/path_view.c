/* SPDX-License-Identifier: Apache-2.0 */
/*
 * path_view.c — the path of GPU pools over a store that lends its memory
 * (path.h; the embedded store in pinned mode).
 *
 * Loads: in the batch's first layer that an item has, the loader holds its
 * object in the store (kvl__store_peek: a view of pinned, mapped store
 * memory), launches the copy of the layer's bytes from it into the GPU
 * slot (through the copy engines where objects form runs, else by the
 * gather kernel: stage.c), and checks the object's header while the copy
 * runs; later layers copy from the same view, checked layer by layer on
 * stores that are not trusted. Objects are held in groups of GPU_PIN_GROUP
 * in the first layer, whose copies then start at once; later layers launch
 * a full chunk list at a time. A check that fails marks its page failed
 * before the layer is published, so no wait or completion ever reports
 * those bytes valid; the slot holds them as kvl_linker_wait_stream says.
 * Views are let go after the batch's last layer, so an object can be
 * evicted meanwhile but its memory is not reused under the copy.
 *
 * Offloads: reserve store memory for each object, let the GPU gather the
 * slots into it, seal the header and commit: no staging copy. Two groups
 * are in flight, so the CPU seals and commits one while the GPU fills the
 * other.
 */
#include "linker/gpu.h"

/* Objects held per store call in a batch's first layer (see above; 0.91 of
 * the PCIe ceiling at 16 KiB chunks where a launch per 512 pages of every
 * layer gave 0.90). */
#define GPU_PIN_GROUP 512

/* Pages per in-place copy launch: small, so that sealing and committing
 * one group on the CPU hides behind the GPU's copy of the next. */
#define GPU_OFF_GROUP 512

/* Whether a held object can be copied from at all: its length (no copy
 * may read past it) and that the GPU can read it. 0 or the reason. */
static int view_usable(kvl_linker *lk, const kvl__pool *p, const kvl__view *v)
{
	if (v->len != p->object_size)
		return KVL_ECORRUPT;
	if (!v->pinned)
		return kvl__fail(&lk->err, KVL_ENOTSUP,
		                 "load: store memory is not pinned: GPU loads "
		                 "need mem:?pinned=1");
	return 0;
}

/* The read check of a held object for layer ly: its header at the pool's
 * first layer, the layer's checksum on untrusted stores. 0 or the reason
 * it is not valid. */
static int view_valid(kvl_linker *lk, const kvl__pool *p, const kvl__layer *ly,
                      const lk_req *r, const lk_item *it, const kvl__view *v)
{
	kvl__read rd = kvl__read_plan(p, ly, 0);
	return kvl__read_check(p, &r->pages[it->page], &rd, 0, v->data,
	                       v->data + rd.offset, 0, !lk->caps.trusted,
	                       lk->mac, NULL);
}

/* Copies layer ly of an item whose object is held in it->view (by the
 * copy engines or the kernel: stage.c). */
static void gather_view(kvl_linker *lk, lk_gather *gt, const kvl__pool *p,
                        const kvl__layer *ly, const lk_item *it)
{
	kvl__read rd = kvl__read_plan(p, ly, 0);
	kvl__lk_stage_read(lk, gt, p, &rd, it, it->view.data + rd.offset);
}

/* Holds the io's gathered items (at their first layer of this batch),
 * launches the copies of the usable ones, then checks those while the
 * copies run. Returns the first failure. */
static int hold_gathered(kvl_linker *lk, uint32_t layer, lk_gather *gt)
{
	lk_gpu *g = lk->gpu;
	lk_io *io = &g->load_io;
	if (io->m == 0)
		return 0;
	int rc = kvl__store_peek(lk->store, io->keyp, io->m, g->pin_views,
	                         io->res);
	int first = rc;
	size_t n_bad = 0; /* held but unusable: let go below */
	for (size_t k = 0; k < io->m; k++) {
		lk_item *it = io->items[k];
		const kvl__pool *p = kvl__lk_pool(lk, it->pool);
		kvl__view *v = &g->pin_views[k];
		int bad = rc ? rc
		          : io->res[k] < 0 ? io->res[k]
		          : !io->res[k]    ? KVL_ENOTFOUND
		                           : view_usable(lk, p, v);
		if (!bad) {
			it->view = *v; /* held to the batch's end, copied or not */
			gather_view(lk, gt, p, kvl__pool_layer(p, layer), it);
			continue;
		}
		kvl__lk_req_fail(io->reqs[k], it->page, bad);
		if (!first)
			first = bad;
		if (!rc && v->handle)
			g->pin_views[n_bad++] = *v; /* n_bad <= k: read already */
	}
	kvl__store_release(lk->store, g->pin_views, n_bad);
	kvl__lk_stage_send(lk, gt);
	kvl__lk_gather_launch(lk, gt);
	for (size_t k = 0; k < io->m; k++) {
		lk_item *it = io->items[k];
		if (!it->view.data)
			continue;
		const kvl__pool *p = kvl__lk_pool(lk, it->pool);
		int bad = view_valid(lk, p, kvl__pool_layer(p, layer),
		                     io->reqs[k], it, &it->view);
		if (bad) {
			kvl__lk_req_fail(io->reqs[k], it->page, bad);
			if (!first)
				first = bad;
		}
	}
	io->m = io->used = 0;
	return first;
}

static int view_load_layer(kvl_linker *lk, lk_batch *b, uint32_t layer)
{
	lk_io *io = &lk->gpu->load_io;
	size_t group = lk->opts.io_batch < GPU_PIN_GROUP ? lk->opts.io_batch
	                                                 : GPU_PIN_GROUP;
	int err = 0, e;
	lk_gather gt;
	kvl__lk_gather_start(lk, &gt);
	lk_walk w;
	for (kvl__lk_walk_start(&w, lk, b, layer, &kvl__lk_path_view);
	     kvl__lk_walk_next(&w);) {
		if (!w.it->view.data) { /* first held in this layer */
			kvl__lk_io_add(io, w.r, w.it, 0);
			if (io->m == group &&
			    (e = hold_gathered(lk, layer, &gt)) && !err)
				err = e;
			continue;
		}
		e = lk->caps.trusted ? 0
		                     : view_valid(lk, w.p, w.ly, w.r, w.it,
		                                  &w.it->view);
		if (e) {
			kvl__lk_req_fail(w.r, w.it->page, e);
			if (!err)
				err = e;
			continue;
		}
		gather_view(lk, &gt, w.p, w.ly, w.it);
	}
	if ((e = hold_gathered(lk, layer, &gt)) && !err)
		err = e;
	kvl__lk_stage_end(lk, &gt);
	if ((e = kvl__lk_gather_end(lk, &gt, layer)) && !err)
		err = e;
	return err;
}

/* Lets go of the objects the batch's loads held. */
static void view_end_batch(kvl_linker *lk, lk_batch *b)
{
	lk_gpu *g = lk->gpu;
	size_t m = 0;
	for (lk_req *r = b->reqs; r; r = r->qnext)
		for (size_t i = 0; i < r->n_items; i++) {
			lk_item *it = &r->items[i];
			if (!it->view.handle)
				continue;
			g->pin_views[m++] = it->view;
			it->view = (kvl__view){0};
			if (m == lk->opts.io_batch) {
				kvl__store_release(lk->store, g->pin_views, m);
				m = 0;
			}
		}
	kvl__store_release(lk->store, g->pin_views, m);
}

/* ------------------------------------------------------------- offloads */

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
	kvl__chunk *ch = kvl__copier_chunks(lk->gpu->off);
	size_t n_ch = 0;
	for (size_t k = g->i; k < g->j; k++) {
		const kvl__pool *p = kvl__lk_pool(lk, items[k]->pool);
		kvl__view *vk = &g->v[k - g->i];
		int rc = kvl__store_reserve(lk->store, p->object_size, vk);
		if (rc == 0 && !vk->pinned) {
			kvl__store_abort(lk->store, vk);
			rc = kvl__fail(&lk->err, KVL_ENOTSUP,
			               "offload: store memory is not pinned: "
			               "GPU offloads need mem:?pinned=1");
		}
		if (rc) {
			vk->data = NULL;
			kvl__lk_req_fail(r, items[k]->page, rc);
			continue;
		}
		n_ch += kvl__lk_gpu_page_chunks(lk, p, items[k]->slot,
		                                (uint8_t *)vk->data, ch + n_ch);
	}
	g->err = kvl__lk_gpu_off_launch(lk, n_ch, g->ev);
}

/* Waits for the group's copy, then seals and commits its objects. */
static void grp_finish(kvl_linker *lk, lk_req *r, lk_item **items, off_grp *g)
{
	int err = g->err ? g->err : kvl__lk_gpu_off_sync(lk, g->ev);
	for (size_t k = g->i; k < g->j; k++) {
		kvl__view *vk = &g->v[k - g->i];
		if (!vk->data)
			continue;
		if (err) {
			kvl__store_abort(lk->store, vk);
			kvl__lk_req_fail(r, items[k]->page, err);
			continue;
		}
		const kvl__pool *p = kvl__lk_pool(lk, items[k]->pool);
		if (kvl__write_seal(p, &r->pages[items[k]->page],
		                    !lk->caps.trusted, lk->mac,
		                    (uint8_t *)vk->data)) {
			kvl__store_abort(lk->store, vk);
			kvl__lk_req_fail(r, items[k]->page, KVL_EIO);
			continue;
		}
		kvl__lk_count_put(lk, r, items[k],
		                  kvl__store_commit(lk->store, items[k]->key, vk));
	}
}

static void view_offload(kvl_linker *lk, lk_req *r, lk_item **items,
                         size_t n, void *event)
{
	if (kvl__lk_gpu_after(lk, r, items, n, event))
		return;
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
			cur->j = kvl__lk_gpu_off_group(lk, items, i, n, SIZE_MAX,
			                               max);
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

static int view_open(kvl_linker *lk, char *errbuf, size_t errlen)
{
	int rc = kvl__lk_gpu_open(lk, 0, errbuf, errlen);
	return rc ? rc : kvl__lk_stage_open(lk, errbuf, errlen);
}

const lk_path kvl__lk_path_view = {
	.open = view_open,
	.close = kvl__lk_gpu_close,
	.load_layer = view_load_layer,
	.finish_layer = kvl__lk_gpu_finish_layer,
	.landed = kvl__lk_gpu_landed,
	.end_batch = view_end_batch,
	.stream_wait = kvl__lk_gpu_stream_wait,
	.gate = kvl__lk_gpu_gate,
	.gate_wait = kvl__lk_gpu_gate_wait,
	.offload = view_offload,
};
