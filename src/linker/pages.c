/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pages.c — synchronous, batched page I/O between a layout's slots and a
 * store: one store call per kvl_pages_* call, whatever the number of pages.
 *
 * A page of a pool is one object: header + every layer of the slot,
 * layer-major. Writers sum each layer into the header; readers check the
 * header always and the layers they read when the store is untrusted. Each
 * call allocates one scratch block for keys, headers and range lists, and
 * nothing per page.
 */
#include <stdlib.h>

#include "core/codec.h"
#include "store/store.h"

/* Shared checks of every kvl_pages_* call; yields the pool. */
static int pages_begin(kvl_store *store, const kvl_layout *layout, int pool,
                       const kvl_hash *pages, size_t n, const void *results,
                       const kvl__pool **out)
{
	if (!store || !layout)
		return KVL_EINVAL;
	if (n > 0 && (!pages || !results))
		return kvl__fail(kvl__store_errp(store), KVL_EINVAL,
		                 "pages: pages or results is NULL");
	int rc;
	const kvl__pool *p = kvl__layout_pool(layout, pool, &rc);
	if (!p)
		return kvl__fail(kvl__store_errp(store), rc, "pages: %s",
		                 kvl_layout_errmsg(layout));
	if (p->on_cuda)
		return kvl__fail(kvl__store_errp(store), KVL_ENOTSUP,
		                 "pages: pool '%s' lives on a CUDA device; use a "
		                 "linker of a CUDA build",
		                 p->name);
	*out = p;
	return 0;
}

int kvl_pages_exists(kvl_store *store, const kvl_layout *layout, int pool,
                    const kvl_hash *pages, size_t n, int *results)
{
	const kvl__pool *p;
	int rc = pages_begin(store, layout, pool, pages, n, results, &p);
	if (rc || n == 0)
		return rc;
	char *keys = malloc(n * (KVL_KEY_MAX + sizeof(char *)));
	if (!keys)
		return kvl__fail(kvl__store_errp(store), KVL_ENOMEM, "out of memory");
	const char **keyp = (const char **)(keys + n * KVL_KEY_MAX);
	for (size_t i = 0; i < n; i++) {
		keyp[i] = keys + i * KVL_KEY_MAX;
		kvl__pool_key(p, &pages[i], keys + i * KVL_KEY_MAX);
	}
	rc = kvl_store_exists(store, keyp, n, results);
	free(keys);
	return rc;
}

/* One scratch block per call: keys, key pointers, headers, piece lists. */
typedef struct scratch {
	void *mem;
	char *keys;
	const char **keyp;
	uint8_t *hdrs;
	void *items;   /* kvl_iov or kvl_range lists */
	size_t *counts;
	size_t *index; /* batch position → page position */
	int *res;      /* per batch position: the store's result */
} scratch;

static int scratch_alloc(scratch *s, size_t n, size_t hdr, size_t per_item,
                         size_t items_per_page)
{
	size_t hdr_bytes = n * hdr;
	size_t items = n * items_per_page * per_item;
	size_t ptrs = n * (sizeof(int) + sizeof(char *) + 2 * sizeof(size_t));
	s->mem = malloc(n * KVL_KEY_MAX + hdr_bytes + items + ptrs + 64);
	if (!s->mem)
		return KVL_ENOMEM;
	char *m = s->mem;
	s->hdrs = (uint8_t *)m; /* first: keeps 64-byte alignment of headers */
	m += hdr_bytes;
	s->items = m;
	m += items;
	s->keyp = (const char **)m;
	m += n * sizeof(char *);
	s->counts = (size_t *)m;
	m += n * sizeof(size_t);
	s->index = (size_t *)m;
	m += n * sizeof(size_t);
	s->res = (int *)m;
	m += n * sizeof(int);
	s->keys = m;
	return 0;
}

int kvl_pages_put(kvl_store *store, const kvl_layout *layout, int pool,
                  const kvl_hash *pages, const size_t *slots, size_t n,
                  int *results)
{
	const kvl__pool *p;
	int rc = pages_begin(store, layout, pool, pages, n, results, &p);
	if (rc || n == 0)
		return rc;
	if (!slots)
		return kvl__fail(kvl__store_errp(store), KVL_EINVAL, "pages_put: slots is "
		                 "NULL");
	if ((rc = kvl__layout_needs_memory(layout, kvl__store_errp(store),
	                                   "pages_put")))
		return rc;
	scratch s;
	size_t per_page = 1 + p->max_pieces;
	if (scratch_alloc(&s, n, p->header_size, sizeof(kvl_iov), per_page))
		return kvl__fail(kvl__store_errp(store), KVL_ENOMEM, "out of memory");
	kvl_iov *iov = s.items;
	size_t m = 0, n_iov = 0;
	for (size_t i = 0; i < n; i++) {
		if (slots[i] >= p->num_pages) {
			results[i] = kvl__fail(kvl__store_errp(store), KVL_ERANGE,
			                       "pages_put: slot %zu out of range "
			                       "(pool '%s' has %zu)",
			                       slots[i], p->name, p->num_pages);
			continue;
		}
		uint8_t *hdr = s.hdrs + m * p->header_size;
		if ((results[i] = kvl__write_header(
			     p, &pages[i], slots[i],
			     !kvl__store_caps_of(store).trusted,
			     kvl__store_mac(store), hdr))) {
			kvl__fail(kvl__store_errp(store), results[i],
			          "pages_put: cannot seal page %zu (no random "
			          "nonce, or OpenSSL failed)", i);
			continue;
		}
		s.counts[m] = kvl__write_pieces(p, hdr, slots[i], iov + n_iov);
		n_iov += s.counts[m];
		char *key = s.keys + m * KVL_KEY_MAX;
		kvl__pool_key(p, &pages[i], key);
		s.keyp[m] = key;
		s.index[m++] = i;
	}
	int *batch = s.res;
	rc = m ? kvl_store_put(store, s.keyp, m, iov, s.counts, batch) : 0;
	for (size_t j = 0; j < m; j++)
		results[s.index[j]] = rc ? rc : batch[j];
	free(s.mem);
	return rc;
}

int kvl_pages_get(kvl_store *store, const kvl_layout *layout, int pool,
                  const kvl_hash *pages, const size_t *slots, size_t n,
                  uint32_t layer, int *results)
{
	const kvl__pool *p;
	int rc = pages_begin(store, layout, pool, pages, n, results, &p);
	if (rc || n == 0)
		return rc;
	if (!slots)
		return kvl__fail(kvl__store_errp(store), KVL_EINVAL, "pages_get: slots is "
		                 "NULL");
	if ((rc = kvl__layout_needs_memory(layout, kvl__store_errp(store),
	                                   "pages_get")))
		return rc;
	const kvl__layer *ly = NULL;
	if (layer != KVL_ALL_LAYERS && !(ly = kvl__pool_layer(p, layer)))
		return kvl__fail(kvl__store_errp(store), KVL_ENOTFOUND,
		                 "pages_get: pool '%s' has no layer %u", p->name,
		                 layer);
	/* A read on its own always brings the header to check. */
	kvl__read rd = kvl__read_plan(p, ly, 0);
	rd.header = 1;
	scratch s;
	size_t per_page = 1 + (size_t)(rd.end - rd.first) * p->n_comps;
	if (scratch_alloc(&s, n, p->header_size, sizeof(kvl_range), per_page))
		return kvl__fail(kvl__store_errp(store), KVL_ENOMEM, "out of memory");
	int *got = s.res;
	kvl_range *rg = s.items;
	size_t m = 0, n_rg = 0;
	for (size_t i = 0; i < n; i++) {
		if (slots[i] >= p->num_pages) {
			results[i] = kvl__fail(kvl__store_errp(store), KVL_ERANGE,
			                       "pages_get: slot %zu out of range "
			                       "(pool '%s' has %zu)",
			                       slots[i], p->name, p->num_pages);
			continue;
		}
		s.counts[m] = kvl__read_into_slot(
			p, &rd, s.hdrs + m * p->header_size, slots[i], rg + n_rg);
		n_rg += s.counts[m];
		char *key = s.keys + m * KVL_KEY_MAX;
		kvl__pool_key(p, &pages[i], key);
		s.keyp[m] = key;
		s.index[m++] = i;
	}
	rc = m ? kvl_store_get(store, s.keyp, m, s.items, s.counts, got) : 0;
	for (size_t j = 0; j < m && rc == 0; j++) {
		size_t i = s.index[j];
		const char *why = NULL;
		int res = got[j];
		if (res < 0 && res != KVL_ERANGE) {
			results[i] = res; /* the store's message says why */
			continue;
		}
		results[i] = kvl__read_check(p, &pages[i], &rd, res,
		                             s.hdrs + j * p->header_size, NULL,
		                             slots[i],
		                             !kvl__store_caps_of(store).trusted,
		                             kvl__store_mac(store), &why);
		if (results[i])
			kvl__fail(kvl__store_errp(store), results[i],
			          "pages_get: page %zu ('%s'): %s", i,
			          s.keyp[j], why);
	}
	for (size_t j = 0; j < m && rc; j++)
		results[s.index[j]] = rc;
	free(s.mem);
	return rc;
}
