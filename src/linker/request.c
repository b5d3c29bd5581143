/* SPDX-License-Identifier: Apache-2.0 */
/*
 * request.c — a request's life inside the linker: built from the engine's
 * arguments (one allocation holding its pages, items, keys and headers),
 * failed page by page (the lowest failed page bounds what is valid),
 * completed exactly once into the completion ring; and the two helpers
 * every load path shares: the walk over a batch's live items and the
 * store-call scratch.
 */
#include <stdlib.h>
#include <string.h>

#include "linker/path.h"

/* ------------------------------------------------------------- building */

int kvl__lk_req_build(kvl_linker *lk, kvl_req_kind kind, uint64_t id,
                      const kvl_hash *pages, size_t n_pages,
                      const size_t *const *slots, lk_req **out)
{
	const char *what = kind == KVL_REQ_LOAD ? "load" : "offload";
	if (!pages || !slots || n_pages == 0)
		return kvl__fail(&lk->err, KVL_EINVAL,
		                 "%s %llu: pages and slots are required and "
		                 "n_pages > 0",
		                 what, (unsigned long long)id);
	if (n_pages > lk->opts.max_request_pages)
		return kvl__fail(&lk->err, KVL_ERANGE,
		                 "%s %llu: %zu pages > max_request_pages %u", what,
		                 (unsigned long long)id, n_pages,
		                 lk->opts.max_request_pages);
	const kvl_layout *l = lk->layout;
	size_t n_items = 0, key_bytes = 0, hdr_bytes = 0;
	for (size_t pi = 0; pi < l->n_pools; pi++) {
		if (!slots[pi])
			continue;
		const kvl__pool *p = kvl__lk_pool(lk, (uint32_t)pi);
		size_t klen = p->key_prefix_len + 2 * KVL_HASH_BYTES +
		              p->key_suffix_len + 1;
		for (size_t j = 0; j < n_pages; j++) {
			size_t s = slots[pi][j];
			if (s == KVL_NO_SLOT)
				continue;
			if (s >= p->num_pages)
				return kvl__fail(&lk->err, KVL_ERANGE,
				                 "%s %llu: page %zu: slot %zu "
				                 "out of range for pool '%s' "
				                 "(%zu slots)",
				                 what, (unsigned long long)id, j, s,
				                 p->name, p->num_pages);
			n_items++;
			key_bytes += klen;
			if (kind == KVL_REQ_LOAD)
				hdr_bytes += p->header_size;
		}
	}
	if (n_items == 0)
		return kvl__fail(&lk->err, KVL_EINVAL,
		                 "%s %llu: no page has a slot in any pool", what,
		                 (unsigned long long)id);
	size_t bytes = sizeof(lk_req) + n_pages * sizeof(kvl_hash) +
	               n_items * sizeof(lk_item) + hdr_bytes + key_bytes + 64;
	lk_req *r = calloc(1, bytes);
	if (!r)
		return kvl__fail(&lk->err, KVL_ENOMEM, "%s: out of memory",
		                 what);
	r->id = id;
	r->kind = kind;
	r->n_pages = n_pages;
	r->first_bad = n_pages;
	r->pages = (kvl_hash *)(r + 1);
	r->items = (lk_item *)(r->pages + n_pages);
	uint8_t *hdr = (uint8_t *)(r->items + n_items);
	hdr = (uint8_t *)(((uintptr_t)hdr + 63) & ~(uintptr_t)63);
	char *key = (char *)(hdr + hdr_bytes);
	memcpy(r->pages, pages, n_pages * sizeof *pages);
	for (size_t pi = 0; pi < l->n_pools; pi++) {
		if (!slots[pi])
			continue;
		const kvl__pool *p = kvl__lk_pool(lk, (uint32_t)pi);
		for (size_t j = 0; j < n_pages; j++) {
			if (slots[pi][j] == KVL_NO_SLOT)
				continue;
			lk_item *it = &r->items[r->n_items++];
			it->page = (uint32_t)j;
			it->pool = (uint32_t)pi;
			it->slot = slots[pi][j];
			it->key = key;
			key += kvl__pool_key(p, &r->pages[j], key) + 1;
			if (kind == KVL_REQ_LOAD) {
				it->hdr = hdr;
				hdr += p->header_size;
			}
		}
	}
	r->t_accept_ns = kvl__now_ns();
	*out = r;
	return 0;
}

void kvl__lk_req_free(lk_req *r)
{
	free(r);
}

void kvl__lk_req_fail(lk_req *r, size_t page, int code)
{
	if (page < r->first_bad) {
		r->first_bad = page;
		r->status = code;
	}
}

void kvl__lk_count_put(kvl_linker *lk, lk_req *r, const lk_item *it, int res)
{
	if (res < 0) {
		kvl__lk_req_fail(r, it->page, res);
	} else if (res == KVL_PUT_PRESENT) {
		KVL__COUNT(&lk->stats, present_pages, 1);
	} else {
		KVL__COUNT(&lk->stats, offloaded_pages, 1);
		KVL__COUNT(&lk->stats, offloaded_bytes,
		           kvl__lk_pool(lk, it->pool)->object_size);
	}
}

/* ------------------------------------------------------------ completing */

void kvl__lk_unlink_open_locked(kvl_linker *lk, lk_req *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		lk->open = r->next;
	if (r->next)
		r->next->prev = r->prev;
}

void kvl__lk_post_locked(kvl_linker *lk, lk_req *r)
{
	kvl__lk_unlink_open_locked(lk, r);
	size_t valid = r->first_bad;
	kvl_completion c = {.id = r->id, .kind = r->kind, .status = r->status,
	                    .valid_pages = valid, .n_pages = r->n_pages};
	lk->comp[(lk->comp_head + lk->comp_n) % lk->opts.max_requests] = c;
	lk->comp_n++;
	kvl__linker_stats *st = &lk->stats;
	if (r->status == KVL_ECANCELED)
		KVL__COUNT(st, canceled, 1);
	if (r->kind == KVL_REQ_LOAD) {
		KVL__COUNT(st, loads, 1);
		if (r->status)
			KVL__COUNT(st, load_failures, 1);
		KVL__COUNT(st, loaded_pages, valid);
	} else {
		KVL__COUNT(st, offloads, 1);
		if (r->status)
			KVL__COUNT(st, offload_failures, 1);
		kvl__hist_add(&st->offload_ns, kvl__now_ns() - r->t_accept_ns);
	}
	kvl__lk_req_free(r);
	pthread_cond_broadcast(&lk->cv_progress);
}

void kvl__lk_cancel_list_locked(kvl_linker *lk, lk_req *r)
{
	while (r) {
		lk_req *next = r->qnext;
		r->first_bad = 0;
		r->status = KVL_ECANCELED;
		kvl__lk_post_locked(lk, r);
		r = next;
	}
}

/* ------------------------------------------------------------- scratch */

int kvl__lk_io_alloc(lk_io *io, size_t cap, size_t per_item, size_t hdr)
{
	*io = (lk_io){.cap = cap};
	io->keyp = calloc(cap, sizeof *io->keyp);
	io->items = calloc(cap, sizeof *io->items);
	io->reqs = calloc(cap, sizeof *io->reqs);
	io->counts = calloc(cap, sizeof *io->counts);
	io->res = calloc(cap, sizeof *io->res);
	io->pieces = per_item ? calloc(cap, per_item) : NULL;
	io->hdrs = hdr ? aligned_alloc(64, kvl__round64(cap * hdr)) : NULL;
	if (!io->keyp || !io->items || !io->reqs || !io->counts || !io->res ||
	    (per_item && !io->pieces) || (hdr && !io->hdrs))
		return KVL_ENOMEM;
	return 0;
}

void kvl__lk_io_free(lk_io *io)
{
	free(io->keyp);
	free(io->items);
	free(io->reqs);
	free(io->counts);
	free(io->res);
	free(io->pieces);
	free(io->hdrs);
	*io = (lk_io){0};
}

/* ---------------------------------------------------------------- walks */

void kvl__lk_walk_start(lk_walk *w, const kvl_linker *lk, lk_batch *b,
                        uint32_t layer, const lk_path *path)
{
	*w = (lk_walk){.lk = lk, .path = path, .layer = layer, .r = b->reqs};
}

int kvl__lk_walk_next(lk_walk *w)
{
	for (; w->r; w->r = w->r->qnext, w->next = 0) {
		while (w->next < w->r->n_items) {
			lk_item *it = &w->r->items[w->next++];
			if (it->page >= w->r->first_bad)
				continue; /* a lower page failed: not valid */
			if (w->lk->pool_path[it->pool] != w->path)
				continue;
			const kvl__pool *p = kvl__lk_pool(w->lk, it->pool);
			const kvl__layer *ly = kvl__pool_layer(p, w->layer);
			if (!ly)
				continue;
			w->it = it;
			w->p = p;
			w->ly = ly;
			return 1;
		}
	}
	return 0;
}
