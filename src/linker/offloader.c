/* SPDX-License-Identifier: Apache-2.0 */
/*
 * offloader.c — the offloader thread: takes offload requests in FIFO
 * order and writes each one's pages that the store lacks, io_batch items
 * at a time: one existence query, then each path's items (path.h) to that
 * path. Pages already stored are skipped and count as stored; a pool
 * replicated across tensor ranks is written by tp rank 0 only.
 *
 * Shutdown cancels the offloads still queued; the one being written
 * finishes.
 */
#include "linker/path.h"

/* Offloads the items [i, j) of r that are absent from the store. */
static void offload_chunk(kvl_linker *lk, lk_req *r, size_t i, size_t j)
{
	lk_io *io = &lk->off_io;
	int shard_owner = lk->layout->shard.tp_rank == 0;
	size_t m = 0;
	for (size_t k = i; k < j; k++) {
		lk_item *it = &r->items[k];
		if (it->page >= r->first_bad)
			continue;
		const kvl__pool *p = kvl__lk_pool(lk, it->pool);
		if ((p->flags & KVL_POOL_REPLICATED_TP) && !shard_owner)
			continue; /* tp rank 0 writes it */
		io->keyp[m] = it->key;
		io->items[m++] = it;
	}
	if (m == 0)
		return;
	int rc = kvl_store_exists(lk->store, io->keyp, m, io->res);
	for (size_t k = 0; k < m; k++) {
		int res = rc ? rc : io->res[k];
		if (res < 0)
			kvl__lk_req_fail(r, io->items[k]->page, res);
		else if (res == 1)
			KVL__COUNT(&lk->stats, present_pages, 1);
	}
	for (size_t pi = 0; !rc && pi < lk->n_paths; pi++) {
		const lk_path *path = lk->paths[pi];
		size_t n = 0;
		for (size_t k = 0; k < m; k++)
			if (io->res[k] == 0 &&
			    lk->pool_path[io->items[k]->pool] == path)
				lk->off_absent[n++] = io->items[k];
		if (n)
			path->offload(lk, r, lk->off_absent, n, r->event);
	}
}

void *kvl__lk_offloader_main(void *arg)
{
	kvl_linker *lk = arg;
	pthread_mutex_lock(&lk->mu);
	for (;;) {
		while (!lk->closing && !lk->off_head)
			pthread_cond_wait(&lk->cv_offloader, &lk->mu);
		if (lk->closing) {
			lk_req *q = lk->off_head;
			lk->off_head = lk->off_tail = NULL;
			for (lk_req *r = q; r; r = r->qnext)
				lk->off_completed++;
			kvl__lk_cancel_list_locked(lk, q);
			break;
		}
		lk_req *r = lk->off_head;
		lk->off_head = r->qnext;
		if (!lk->off_head)
			lk->off_tail = NULL;
		pthread_mutex_unlock(&lk->mu);
		for (size_t i = 0; i < r->n_items; i += lk->off_io.cap) {
			size_t j = i + lk->off_io.cap;
			offload_chunk(lk, r, i, j < r->n_items ? j : r->n_items);
		}
		pthread_mutex_lock(&lk->mu);
		lk->off_completed++;
		kvl__lk_post_locked(lk, r);
	}
	pthread_mutex_unlock(&lk->mu);
	return NULL;
}
