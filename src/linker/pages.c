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

#include "linker/pages.h"
#include "store/store.h"

size_t kvl__layer_ranges(const kvl__pool *p, const kvl__layer *ly, size_t slot,
                         kvl_range *out)
{
	uint64_t off = ly->offset;
	for (uint32_t k = 0; k < p->n_comps; k++) {
		const kvl_buffer *b = &ly->bufs[k]->b;
		out[k] = (kvl_range){.offset = off,
		                     .addr = (char *)b->base + slot * b->page_stride,
		                     .len = b->page_bytes};
		off += b->page_bytes;
	}
	return p->n_comps;
}

uint64_t kvl__layer_sum(const kvl__pool *p, const kvl__layer *ly, size_t slot)
{
	uint64_t sum = KVL__CHECKSUM_SEED;
	for (uint32_t k = 0; k < p->n_comps; k++) {
		const kvl_buffer *b = &ly->bufs[k]->b;
		sum = kvl__checksum((const char *)b->base + slot * b->page_stride,
		                    b->page_bytes, sum);
	}
	return sum;
}

uint64_t kvl__object_layer_sum(const kvl__pool *p, const kvl__layer *ly,
                               const uint8_t *obj)
{
	return kvl__layer_bytes_sum(p, ly, obj + ly->offset);
}

uint64_t kvl__layer_bytes_sum(const kvl__pool *p, const kvl__layer *ly,
                              const uint8_t *at)
{
	uint64_t sum = KVL__CHECKSUM_SEED;
	for (uint32_t k = 0; k < p->n_comps; k++) {
		size_t len = ly->bufs[k]->b.page_bytes;
		sum = kvl__checksum(at, len, sum);
		at += len;
	}
	return sum;
}

void kvl__page_header(const kvl__pool *p, const kvl_hash *page, size_t slot,
                      int summed, uint8_t *hdr)
{
	uint64_t sums[p->n_layers > 0 ? p->n_layers : 1];
	for (uint32_t i = 0; summed && i < p->n_layers; i++)
		sums[i] = kvl__layer_sum(p, &p->layers[i], slot);
	kvl__obj_id id = kvl__page_id(p, page);
	kvl__obj_header_write(hdr, &id, summed ? sums : NULL);
}

size_t kvl__page_pieces(const kvl__pool *p, const uint8_t *hdr, size_t slot,
                        kvl_iov *out)
{
	out[0] = (kvl_iov){.addr = (void *)hdr, .len = p->header_size};
	for (uint32_t i = 0; i < p->max_pieces; i++) {
		const kvl_buffer *b = &p->ordered[i]->b;
		out[1 + i] = (kvl_iov){
			.addr = (char *)b->base + slot * b->page_stride,
			.len = b->page_bytes};
	}
	return 1 + p->max_pieces;
}

/* Shared checks of every kvl_pages_* call; yields the pool. */
static int pages_begin(kvl_store *store, const kvl_layout *layout, int pool,
                       const kvl_hash *pages, size_t n, const void *results,
                       const kvl__pool **out)
{
	if (!store || !layout)
		return KVL_EINVAL;
	if (n > 0 && (!pages || !results))
		return kvl__fail(&store->err, KVL_EINVAL,
		                 "pages: pages or results is NULL");
	int rc;
	const kvl__pool *p = kvl__layout_pool(layout, pool, &rc);
	if (!p)
		return kvl__fail(&store->err, rc, "pages: %s",
		                 kvl_layout_errmsg(layout));
	if (p->on_cuda)
		return kvl__fail(&store->err, KVL_ENOTSUP,
		                 "pages: pool '%s' lives on a CUDA device; use a "
		                 "linker of a CUDA build",
		                 p->name);
	*out = p;
	return 0;
}

int kvl_pages_exist(kvl_store *store, const kvl_layout *layout, int pool,
                    const kvl_hash *pages, size_t n, int *results)
{
	const kvl__pool *p;
	int rc = pages_begin(store, layout, pool, pages, n, results, &p);
	if (rc || n == 0)
		return rc;
	char *keys = malloc(n * (KVL_KEY_MAX + sizeof(char *)));
	if (!keys)
		return kvl__fail(&store->err, KVL_ENOMEM, "out of memory");
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
	int64_t *res;  /* per batch position: the store's result */
} scratch;

static int scratch_alloc(scratch *s, size_t n, size_t hdr, size_t per_item,
                         size_t items_per_page)
{
	size_t hdr_bytes = n * hdr;
	size_t items = n * items_per_page * per_item;
	size_t ptrs = n * (sizeof(int64_t) + sizeof(char *) + 2 * sizeof(size_t));
	s->mem = malloc(n * KVL_KEY_MAX + hdr_bytes + items + ptrs + 64);
	if (!s->mem)
		return KVL_ENOMEM;
	char *m = s->mem;
	s->hdrs = (uint8_t *)m; /* first: keeps 64-byte alignment of headers */
	m += hdr_bytes;
	s->items = m;
	m += items;
	s->res = (int64_t *)m;
	m += n * sizeof(int64_t);
	s->keyp = (const char **)m;
	m += n * sizeof(char *);
	s->counts = (size_t *)m;
	m += n * sizeof(size_t);
	s->index = (size_t *)m;
	m += n * sizeof(size_t);
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
		return kvl__fail(&store->err, KVL_EINVAL, "pages_put: slots is "
		                 "NULL");
	scratch s;
	size_t per_page = 1 + p->max_pieces;
	if (scratch_alloc(&s, n, p->header_size, sizeof(kvl_iov), per_page))
		return kvl__fail(&store->err, KVL_ENOMEM, "out of memory");
	kvl_iov *iov = s.items;
	size_t m = 0, n_iov = 0;
	for (size_t i = 0; i < n; i++) {
		if (slots[i] >= p->num_pages) {
			results[i] = kvl__fail(&store->err, KVL_ERANGE,
			                       "pages_put: slot %zu out of range "
			                       "(pool '%s' has %zu)",
			                       slots[i], p->name, p->num_pages);
			continue;
		}
		uint8_t *hdr = s.hdrs + m * p->header_size;
		kvl__page_header(p, &pages[i], slots[i], !store->trusted, hdr);
		s.counts[m] = kvl__page_pieces(p, hdr, slots[i], iov + n_iov);
		n_iov += s.counts[m];
		char *key = s.keys + m * KVL_KEY_MAX;
		kvl__pool_key(p, &pages[i], key);
		s.keyp[m] = key;
		s.index[m++] = i;
	}
	int *batch = (int *)s.res;
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
		return kvl__fail(&store->err, KVL_EINVAL, "pages_get: slots is "
		                 "NULL");
	uint32_t first = 0, count = p->n_layers;
	if (layer != KVL_ALL_LAYERS) {
		const kvl__layer *ly = kvl__pool_layer(p, layer);
		if (!ly)
			return kvl__fail(&store->err, KVL_ENOTFOUND,
			                 "pages_get: pool '%s' has no layer %u",
			                 p->name, layer);
		first = (uint32_t)(ly - p->layers);
		count = 1;
	}
	scratch s;
	size_t per_page = 1 + (size_t)count * p->n_comps;
	if (scratch_alloc(&s, n, p->header_size, sizeof(kvl_range), per_page))
		return kvl__fail(&store->err, KVL_ENOMEM, "out of memory");
	int64_t *got = s.res;
	kvl_range *rg = s.items;
	size_t m = 0, n_rg = 0;
	for (size_t i = 0; i < n; i++) {
		if (slots[i] >= p->num_pages) {
			results[i] = kvl__fail(&store->err, KVL_ERANGE,
			                       "pages_get: slot %zu out of range "
			                       "(pool '%s' has %zu)",
			                       slots[i], p->name, p->num_pages);
			continue;
		}
		size_t c = 0;
		rg[n_rg + c++] = (kvl_range){.offset = 0,
		                             .addr = s.hdrs + m * p->header_size,
		                             .len = p->header_size};
		for (uint32_t li = first; li < first + count; li++)
			c += kvl__layer_ranges(p, &p->layers[li], slots[i],
			                       rg + n_rg + c);
		s.counts[m] = c;
		n_rg += c;
		char *key = s.keys + m * KVL_KEY_MAX;
		kvl__pool_key(p, &pages[i], key);
		s.keyp[m] = key;
		s.index[m++] = i;
	}
	rc = m ? kvl_store_get(store, s.keyp, m, s.items, s.counts, got) : 0;
	for (size_t j = 0; j < m && rc == 0; j++) {
		size_t i = s.index[j];
		if (got[j] < 0) {
			/* A short object reads as out of range: it is not ours. */
			results[i] = got[j] == KVL_ERANGE ? KVL_ECORRUPT
			                                  : (int)got[j];
			continue;
		}
		const char *why = NULL;
		kvl__obj_id id = kvl__page_id(p, &pages[i]);
		const uint8_t *hdr = s.hdrs + j * p->header_size;
		results[i] = kvl__obj_header_check(hdr, p->header_size, &id,
		                                   &why);
		for (uint32_t li = first;
		     li < first + count && !results[i] && !store->trusted; li++)
			if (kvl__obj_layer_ok(hdr, li,
			                      kvl__layer_sum(p, &p->layers[li],
			                                     slots[i]))) {
				results[i] = KVL_ECORRUPT;
				why = "layer checksum mismatch (or none)";
			}
		if (results[i])
			kvl__fail(&store->err, results[i],
			          "pages_get: page %zu ('%s'): %s", i,
			          s.keyp[j], why);
	}
	for (size_t j = 0; j < m && rc; j++)
		results[s.index[j]] = rc;
	free(s.mem);
	return rc;
}
