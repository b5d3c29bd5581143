/* SPDX-License-Identifier: Apache-2.0 */
/*
 * regions.c — what the linker tells its store about memory and objects
 * (linker.h): the pool memory and its own pinned buffers, registered at
 * open and forgotten at close, and the holds a batch keeps on its objects
 * while the loader reads them layer by layer.
 */
#include <stdlib.h>

#include "core/log.h"
#include "linker/linker.h"

typedef struct region {
	uintptr_t lo, hi;
	kvl_mem_kind mem;
	int device;
} region;

static int region_cmp(const void *a, const void *b)
{
	const region *x = a, *y = b;
	if (x->mem != y->mem)
		return x->mem < y->mem ? -1 : 1;
	if (x->device != y->device)
		return x->device < y->device ? -1 : 1;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static kvl__log_limit refused_limit;

/* Registers `len` bytes at addr with the store and remembers them, to
 * forget at close; a refusal is logged: those bytes then move through the
 * store's staging. */
static void announce(kvl_linker *lk, void *addr, size_t len,
                     kvl_mem_kind mem, const char *what)
{
	void **grown = realloc(lk->registered,
	                       (lk->n_registered + 1) * sizeof *grown);
	if (!grown)
		return; /* registering only saves copies */
	lk->registered = grown;
	if (kvl_store_register(lk->store, addr, len, mem) != 0) {
		kvl__log(&refused_limit, KVL_LOG_WARNING, "linker",
		         "the store did not register %s %zu bytes at %p (%s); "
		         "they move through staging",
		         what, len, addr, kvl_store_errmsg(lk->store));
		return;
	}
	lk->registered[lk->n_registered++] = addr;
}

void kvl__lk_register(kvl_linker *lk, void *addr, size_t len)
{
	announce(lk, addr, len, KVL_MEM_HOST, "the linker's pinned");
}

void kvl__lk_register_pools(kvl_linker *lk)
{
	const kvl_layout *l = lk->layout;
	size_t n = 0;
	for (size_t i = 0; i < l->n_pools; i++)
		n += l->pools[i].n_bufs;
	region *r = calloc(n ? n : 1, sizeof *r);
	if (!r)
		return;
	n = 0;
	for (size_t i = 0; i < l->n_pools; i++)
		for (size_t k = 0; k < l->pools[i].n_bufs; k++) {
			const kvl_buffer *b = &l->pools[i].bufs[k].b;
			if (!b->base)
				continue; /* sizes only */
			uintptr_t lo = (uintptr_t)b->base;
			r[n++] = (region){lo,
			                  lo + b->page_stride * (b->num_pages - 1) +
			                          b->page_bytes,
			                  b->mem, b->device};
		}
	qsort(r, n, sizeof *r, region_cmp);
	for (size_t i = 0; i < n;) {
		region u = r[i++];
		while (i < n && r[i].mem == u.mem && r[i].device == u.device &&
		       r[i].lo <= u.hi) {
			if (r[i].hi > u.hi)
				u.hi = r[i].hi;
			i++;
		}
		announce(lk, (void *)u.lo, u.hi - u.lo, u.mem, "a pool's");
	}
	free(r);
}

void kvl__lk_unregister_all(kvl_linker *lk)
{
	for (size_t i = 0; i < lk->n_registered; i++)
		kvl__store_unregister(lk->store, lk->registered[i]);
	free(lk->registered);
	lk->registered = NULL;
	lk->n_registered = 0;
}

void kvl__lk_hold_batch(kvl_linker *lk, lk_batch *b)
{
	size_t n = 0;
	for (lk_req *r = b->reqs; r; r = r->qnext)
		n += r->n_items;
	if (n > lk->cap_held) {
		const char **k = realloc(lk->held, n * sizeof *k);
		int *res = k ? realloc(lk->held_res, n * sizeof *res) : NULL;
		if (k)
			lk->held = k;
		if (res)
			lk->held_res = res;
		if (!k || !res)
			return; /* held nothing: the reads still say what they find */
		lk->cap_held = n;
	}
	lk->n_held = 0;
	for (lk_req *r = b->reqs; r; r = r->qnext)
		for (size_t i = 0; i < r->n_items; i++)
			lk->held[lk->n_held++] = r->items[i].key;
	if (lk->n_held &&
	    kvl__store_hold(lk->store, lk->held, lk->n_held, lk->held_res) < 0)
		lk->n_held = 0; /* nothing was held */
	size_t m = 0; /* keep those held, to let go of them alone */
	for (size_t i = 0; i < lk->n_held; i++)
		if (lk->held_res[i] == 1)
			lk->held[m++] = lk->held[i];
	lk->n_held = m;
}

void kvl__lk_unhold_batch(kvl_linker *lk)
{
	if (lk->n_held)
		kvl__store_unhold(lk->store, lk->held, lk->n_held, lk->held_res);
	lk->n_held = 0;
}
