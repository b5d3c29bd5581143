/* SPDX-License-Identifier: Apache-2.0 */
/*
 * path_host.c — the path of pools in host memory (path.h): loads read
 * each layer's bytes straight from the store into the slots, io_batch
 * items per store call, and check them there; offloads put the header and
 * the slot's pieces as one object, without copying them first.
 *
 * State: the loader's scratch for one store call (`load`) and the
 * offloader's (`put`), allocated at open.
 */
#include <stdlib.h>

#include "linker/path.h"

typedef struct lk_host {
	lk_io load;
	lk_io put;
} lk_host;

static int host_open(kvl_linker *lk, char *errbuf, size_t errlen)
{
	lk_host *h = calloc(1, sizeof *h);
	lk->host = h;
	/* An item's read: its header and a layer's components, or on a
	 * whole-object store every layer's. */
	size_t ranges = 1 + (lk->any_whole ? lk->max_pieces
	                                          : lk->max_comps);
	if (!h ||
	    kvl__lk_io_alloc(&h->load, lk->opts.io_batch,
	                     ranges * sizeof(kvl_range), 0) ||
	    kvl__lk_io_alloc(&h->put, lk->opts.io_batch,
	                     (1 + lk->max_pieces) * sizeof(kvl_iov),
	                     lk->max_header))
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "cannot allocate the linker's I/O scratch");
	return 0;
}

static void host_close(kvl_linker *lk)
{
	lk_host *h = lk->host;
	if (!h)
		return;
	kvl__lk_io_free(&h->load);
	kvl__lk_io_free(&h->put);
	free(h);
	lk->host = NULL;
}

/* Reads the io's gathered items' layer `layer` and checks each one. */
static int load_flush(kvl_linker *lk, lk_io *io, uint32_t layer)
{
	int first = 0;
	if (io->m == 0)
		return 0;
	int rc = kvl_store_get(lk->store, io->keyp, io->m, io->pieces,
	                       io->counts, io->res);
	for (size_t k = 0; k < io->m; k++) {
		lk_item *it = io->items[k];
		lk_req *r = io->reqs[k];
		const kvl__pool *p = kvl__lk_pool(lk, it->pool);
		kvl__read rd = kvl__read_plan(p, kvl__pool_layer(p, layer),
		                              kvl__lk_pool_whole(lk, it->pool));
		int err = kvl__read_check(p, &r->pages[it->page], &rd,
		                          rc ? rc : io->res[k], it->hdr, NULL,
		                          it->slot, !lk->caps.trusted, lk->mac,
		                          NULL);
		if (err) {
			kvl__lk_req_fail(r, it->page, err);
			if (!first)
				first = err;
			continue;
		}
		KVL__COUNT(&lk->stats, loaded_bytes, rd.span);
	}
	io->m = io->used = 0;
	return first;
}

static int host_load_layer(kvl_linker *lk, lk_batch *b, uint32_t layer)
{
	lk_io *io = &lk->host->load;
	kvl_range *rg = io->pieces; /* key k's ranges follow key k-1's */
	int first = 0, e;
	lk_walk w;
	for (kvl__lk_walk_start(&w, lk, b, layer, &kvl__lk_path_host);
	     kvl__lk_walk_next(&w);) {
		kvl__read rd = kvl__read_plan(w.p, w.ly,
		                              kvl__lk_pool_whole(lk, w.it->pool));
		if (rd.end == rd.first)
			continue; /* read with the first layer */
		size_t c = kvl__read_into_slot(w.p, &rd, w.it->hdr, w.it->slot,
		                               rg + io->used);
		kvl__lk_io_add(io, w.r, w.it, c);
		if (io->m == io->cap && (e = load_flush(lk, io, layer)) && !first)
			first = e;
	}
	if ((e = load_flush(lk, io, layer)) && !first)
		first = e;
	return first;
}

static void host_offload(kvl_linker *lk, lk_req *r, lk_item **items,
                         size_t n, void *event)
{
	(void)event; /* host memory: the engine's writes are done */
	lk_io *io = &lk->host->put;
	kvl_iov *iov = io->pieces;
	for (size_t k = 0; k < n; k++) {
		lk_item *it = items[k];
		const kvl__pool *p = kvl__lk_pool(lk, it->pool);
		uint8_t *hdr = io->hdrs + io->m * lk->max_header;
		int err = kvl__write_header(p, &r->pages[it->page], it->slot,
		                            !lk->caps.trusted, lk->mac, hdr);
		if (err) {
			kvl__fail(&lk->err, err, "offload: cannot seal page %u "
			          "(no random nonce, or OpenSSL failed)",
			          it->page);
			kvl__lk_req_fail(r, it->page, err);
			continue;
		}
		size_t c = kvl__write_pieces(p, hdr, it->slot, iov + io->used);
		kvl__lk_io_add(io, r, it, c);
	}
	int rc = kvl_store_put(lk->store, io->keyp, io->m, io->pieces,
	                       io->counts, io->res);
	for (size_t k = 0; k < io->m; k++)
		kvl__lk_count_put(lk, r, io->items[k], rc ? rc : io->res[k]);
	io->m = io->used = 0;
}

const lk_path kvl__lk_path_host = {
	.open = host_open,
	.close = host_close,
	.load_layer = host_load_layer,
	.offload = host_offload,
};
