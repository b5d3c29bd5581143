/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layout.c — pools, components and layers → object sizes, layer ranges,
 * page pieces, fingerprints and keys.
 *
 * A layout is built by one thread (create, add_pool, add_buffer) and frozen
 * by finalize, which checks the description as a whole and precomputes what
 * the hot paths need: each pool's layers in order with their byte range in
 * the object, its buffers in payload order, and the fixed parts of its keys.
 * Once finalized nothing changes, so any thread may read it without locks;
 * only the error message (kvl__err, with its own mutex) is written.
 */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/layout.h"
#include "core/codec.h"

#define TAG_CHARS "._+/-"
#define NAME_CHARS "._-"

int kvl_layout_create(const char *model_tag, uint32_t page_size,
                      const kvl_shard *shard, kvl_layout **out, char *errbuf,
                      size_t errlen)
{
	if (!out)
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL, "out is NULL");
	if (!kvl__name_ok(model_tag, TAG_CHARS))
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "model_tag must be 1..%d characters from "
		                     "[A-Za-z0-9._+/-]",
		                     KVL_NAME_MAX);
	if (page_size == 0)
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "page_size is 0");
	kvl_shard s = shard ? *shard : KVL_SHARD_SINGLE;
	if (s.tp_size == 0 || s.cp_size == 0 || s.pp_size == 0 ||
	    s.tp_rank >= s.tp_size || s.cp_rank >= s.cp_size ||
	    s.pp_rank >= s.pp_size)
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "shard: every size must be >= 1 and every "
		                     "rank below its size (tp %u/%u cp %u/%u "
		                     "pp %u/%u)",
		                     s.tp_rank, s.tp_size, s.cp_rank, s.cp_size,
		                     s.pp_rank, s.pp_size);
	kvl_layout *l = calloc(1, sizeof *l);
	if (!l)
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "out of memory");
	strcpy(l->tag, model_tag);
	l->page_size = page_size;
	l->shard = s;
	kvl__err_init(&l->err);
	*out = l;
	return 0;
}

static void pool_free_derived(kvl__pool *p)
{
	free(p->layers);
	free(p->ordered);
	free(p->layer_index);
	p->layers = NULL;
	p->ordered = NULL;
	p->layer_index = NULL;
	p->n_layers = 0;
	p->layer_index_len = 0;
}

void kvl_layout_free(kvl_layout *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n_pools; i++) {
		pool_free_derived(&l->pools[i]);
		free(l->pools[i].bufs);
		free(l->pools[i].comps);
	}
	free(l->pools);
	kvl__err_destroy(&l->err);
	free(l);
}

const char *kvl_layout_errmsg(const kvl_layout *l)
{
	return l ? kvl__err_get(&l->err) : "layout is NULL";
}

int kvl_layout_add_pool(kvl_layout *l, const char *name, kvl_hit_policy policy,
                        uint32_t window, uint32_t flags, int *pool_out)
{
	if (!l)
		return KVL_EINVAL;
	if (l->finalized)
		return kvl__fail(&l->err, KVL_ESTATE,
		                 "add_pool: layout is finalized");
	if (!kvl__name_ok(name, NAME_CHARS))
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "add_pool: name must be 1..%d characters from "
		                 "[A-Za-z0-9._-]",
		                 KVL_NAME_MAX);
	if (policy != KVL_HIT_ALL_PAGES && policy != KVL_HIT_TRAILING_PAGES)
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "add_pool '%s': unknown hit policy %d", name,
		                 (int)policy);
	if (policy == KVL_HIT_TRAILING_PAGES && window == 0)
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "add_pool '%s': TRAILING_PAGES needs window >= 1",
		                 name);
	if (policy == KVL_HIT_ALL_PAGES && window != 0)
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "add_pool '%s': ALL_PAGES takes window 0, not %u",
		                 name, window);
	if (flags & ~KVL_POOL_REPLICATED_TP)
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "add_pool '%s': unknown flags 0x%x", name,
		                 flags & ~KVL_POOL_REPLICATED_TP);
	for (size_t i = 0; i < l->n_pools; i++)
		if (!strcmp(l->pools[i].name, name))
			return kvl__fail(&l->err, KVL_EEXIST,
			                 "add_pool: pool '%s' already exists", name);
	if (l->n_pools == l->cap_pools) {
		size_t cap = l->cap_pools ? 2 * l->cap_pools : 4;
		kvl__pool *np = realloc(l->pools, cap * sizeof *np);
		if (!np)
			return kvl__fail(&l->err, KVL_ENOMEM, "out of memory");
		l->pools = np;
		l->cap_pools = cap;
	}
	kvl__pool *p = &l->pools[l->n_pools];
	memset(p, 0, sizeof *p);
	strcpy(p->name, name);
	p->policy = policy;
	p->window = window;
	p->flags = flags;
	if (pool_out)
		*pool_out = (int)l->n_pools;
	l->n_pools++;
	return 0;
}

static int comp_index(kvl__pool *p, const char *name, uint32_t *out)
{
	for (uint32_t i = 0; i < p->n_comps; i++)
		if (!strcmp(p->comps[i], name)) {
			*out = i;
			return 0;
		}
	void *nc = realloc(p->comps, (p->n_comps + 1) * sizeof *p->comps);
	if (!nc)
		return KVL_ENOMEM;
	p->comps = nc;
	strcpy(p->comps[p->n_comps], name);
	*out = p->n_comps++;
	return 0;
}

int kvl_layout_pool_format(kvl_layout *l, int pool, const char *dtype,
                           const char *memory_layout)
{
	if (!l)
		return KVL_EINVAL;
	if (l->finalized)
		return kvl__fail(&l->err, KVL_ESTATE,
		                 "pool_format: layout is finalized");
	if (pool < 0 || (size_t)pool >= l->n_pools)
		return kvl__fail(&l->err, KVL_ENOTFOUND,
		                 "pool_format: unknown pool id %d", pool);
	kvl__pool *p = &l->pools[pool];
	if (!kvl__name_ok(dtype, NAME_CHARS))
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "pool_format '%s': dtype must be 1..%d "
		                 "characters from [A-Za-z0-9._-]",
		                 p->name, KVL_NAME_MAX);
	if (memory_layout && *memory_layout &&
	    !kvl__name_ok(memory_layout, NAME_CHARS))
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "pool_format '%s': memory_layout must be at most "
		                 "%d characters from [A-Za-z0-9._-]",
		                 p->name, KVL_NAME_MAX);
	strcpy(p->dtype, dtype);
	strcpy(p->mem_layout, memory_layout ? memory_layout : "");
	return 0;
}

/* Checks the pool, component and layer of a buffer or shape about to be
 * added: 0, with *p_out the pool, or the error. */
static int check_target(kvl_layout *l, const char *op, int pool,
                        const char *component, uint32_t layer,
                        kvl__pool **p_out)
{
	if (l->finalized)
		return kvl__fail(&l->err, KVL_ESTATE, "%s: layout is finalized",
		                 op);
	if (pool < 0 || (size_t)pool >= l->n_pools)
		return kvl__fail(&l->err, KVL_ENOTFOUND,
		                 "%s: unknown pool id %d", op, pool);
	kvl__pool *p = &l->pools[pool];
	if (!kvl__name_ok(component, NAME_CHARS))
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "%s '%s': component name must be 1..%d "
		                 "characters from [A-Za-z0-9._-]",
		                 op, p->name, KVL_NAME_MAX);
	/* KVL_ALL_LAYERS names every layer in queries, so it cannot be one;
	 * finalize sizes its layer index by the largest layer + 1, so layer
	 * numbers are bounded (KVL_MAX_LAYER: a 4 MiB index at most). */
	if (layer == KVL_ALL_LAYERS)
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "%s %s/%s: layer %u is KVL_ALL_LAYERS, not a "
		                 "layer",
		                 op, p->name, component, layer);
	if (layer > KVL_MAX_LAYER)
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "%s %s/%s: layer %u is above KVL_MAX_LAYER (%u)",
		                 op, p->name, component, layer,
		                 (unsigned)KVL_MAX_LAYER);
	*p_out = p;
	return 0;
}

/* Appends a checked buffer to pool p. */
static int append_buf(kvl_layout *l, const char *op, kvl__pool *p,
                      const char *component, uint32_t layer,
                      const kvl_buffer *buf)
{
	uint32_t comp;
	if (comp_index(p, component, &comp))
		return kvl__fail(&l->err, KVL_ENOMEM, "out of memory");
	for (size_t i = 0; i < p->n_bufs; i++)
		if (p->bufs[i].comp == comp && p->bufs[i].layer == layer)
			return kvl__fail(&l->err, KVL_EEXIST,
			                 "%s %s/%s layer %u: already described", op,
			                 p->name, component, layer);
	if (p->n_bufs == p->cap_bufs) {
		size_t cap = p->cap_bufs ? 2 * p->cap_bufs : 16;
		kvl__buf *nb = realloc(p->bufs, cap * sizeof *nb);
		if (!nb)
			return kvl__fail(&l->err, KVL_ENOMEM, "out of memory");
		p->bufs = nb;
		p->cap_bufs = cap;
	}
	p->bufs[p->n_bufs++] = (kvl__buf){.comp = comp, .layer = layer,
	                                   .b = *buf};
	return 0;
}

int kvl_layout_add_buffer(kvl_layout *l, int pool, const char *component,
                          uint32_t layer, const kvl_buffer *buf)
{
	if (!l)
		return KVL_EINVAL;
	kvl__pool *p = NULL;
	int rc = check_target(l, "add_buffer", pool, component, layer, &p);
	if (rc)
		return rc;
	const char *where = component;
	if (!buf)
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "add_buffer %s/%s layer %u: buf is NULL", p->name,
		                 where, layer);
	if (!buf->base)
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "add_buffer %s/%s layer %u: base is NULL",
		                 p->name, where, layer);
	if (buf->page_bytes == 0 || buf->num_pages == 0 ||
	    buf->page_stride == 0)
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "add_buffer %s/%s layer %u: page_bytes, "
		                 "page_stride and num_pages must be > 0 "
		                 "(got %zu, %zu, %zu)",
		                 p->name, where, layer, buf->page_bytes,
		                 buf->page_stride, buf->num_pages);
	if ((uintptr_t)buf->base % KVL_LAYOUT_ALIGN ||
	    buf->page_stride % KVL_LAYOUT_ALIGN)
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "add_buffer %s/%s layer %u: base and page_stride "
		                 "must be multiples of %d",
		                 p->name, where, layer, KVL_LAYOUT_ALIGN);
	if (buf->page_bytes > buf->page_stride)
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "add_buffer %s/%s layer %u: page_bytes %zu > "
		                 "page_stride %zu (slots would overlap)",
		                 p->name, where, layer, buf->page_bytes,
		                 buf->page_stride);
	if (buf->mem != KVL_MEM_HOST && buf->mem != KVL_MEM_CUDA)
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "add_buffer %s/%s layer %u: unknown memory kind "
		                 "%d",
		                 p->name, where, layer, (int)buf->mem);
	if (buf->num_pages > SIZE_MAX / buf->page_stride)
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "add_buffer %s/%s layer %u: buffer size "
		                 "overflows",
		                 p->name, where, layer);
	/* From base to the end of the last slot; page_bytes <= page_stride
	 * keeps this within num_pages * page_stride, checked above. The end
	 * address must be representable (overlap checks compute it). */
	size_t span = (buf->num_pages - 1) * buf->page_stride + buf->page_bytes;
	if (span > UINTPTR_MAX - (uintptr_t)buf->base)
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "add_buffer %s/%s layer %u: base %p + %zu bytes "
		                 "wraps past the end of the address space",
		                 p->name, where, layer, buf->base, span);
	if (p->n_bufs > 0 && p->bufs[0].b.num_pages != buf->num_pages)
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "add_buffer %s/%s layer %u: num_pages %zu differs "
		                 "from the pool's other buffers (%zu)",
		                 p->name, where, layer, buf->num_pages,
		                 p->bufs[0].b.num_pages);
	return append_buf(l, "add_buffer", p, component, layer, buf);
}

int kvl_layout_add_shape(kvl_layout *l, int pool, const char *component,
                         uint32_t layer, size_t page_bytes)
{
	if (!l)
		return KVL_EINVAL;
	kvl__pool *p = NULL;
	int rc = check_target(l, "add_shape", pool, component, layer, &p);
	if (rc)
		return rc;
	if (page_bytes == 0)
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "add_shape %s/%s layer %u: page_bytes is 0",
		                 p->name, component, layer);
	/* One slot of no memory: only its size is ever read. */
	kvl_buffer b = {.base = NULL, .page_stride = page_bytes,
	                .page_bytes = page_bytes, .num_pages = 1,
	                .mem = KVL_MEM_HOST, .device = 0};
	rc = append_buf(l, "add_shape", p, component, layer, &b);
	if (rc == 0)
		l->n_shapes++;
	return rc;
}

int kvl__layout_needs_memory(const kvl_layout *l, kvl__err *err,
                             const char *op)
{
	if (!l->n_shapes)
		return 0;
	return kvl__fail(err, KVL_EINVAL,
	                 "%s: the layout describes sizes only "
	                 "(kvl_layout_add_shape), no memory",
	                 op);
}

/* Do the slots of two strided buffers share a byte? Exact when the strides
 * are equal (the common case of interleaved K/V); otherwise any overlap of
 * the two extents counts. */
static int buffers_overlap(const kvl_buffer *a, const kvl_buffer *b)
{
	if (!a->base || !b->base) /* shapes (kvl_layout_add_shape) */
		return 0;
	if (a->mem != b->mem || (a->mem == KVL_MEM_CUDA && a->device != b->device))
		return 0;
	uintptr_t a0 = (uintptr_t)a->base, b0 = (uintptr_t)b->base;
	uintptr_t a1 = a0 + (a->num_pages - 1) * a->page_stride + a->page_bytes;
	uintptr_t b1 = b0 + (b->num_pages - 1) * b->page_stride + b->page_bytes;
	if (a1 <= b0 || b1 <= a0)
		return 0;
	if (a->page_stride != b->page_stride || a->num_pages == 1 ||
	    b->num_pages == 1)
		return 1;
	uintptr_t s = a->page_stride;
	uintptr_t d = (b0 >= a0 ? b0 - a0 : s - (a0 - b0) % s) % s;
	/* b's slots start d bytes into a's period: disjoint iff a's slot ends
	 * before b's begins and b's ends before a's next one. */
	return !(a->page_bytes <= d && d + b->page_bytes <= s);
}

static int cmp_buf_order(const void *x, const void *y)
{
	const kvl__buf *a = *(kvl__buf *const *)x, *b = *(kvl__buf *const *)y;
	if (a->layer != b->layer)
		return a->layer < b->layer ? -1 : 1;
	return a->comp < b->comp ? -1 : a->comp > b->comp;
}

static void sha_update_u32(EVP_MD_CTX *c, uint32_t v)
{
	uint8_t b[4];
	kvl__put_u32le(b, v);
	EVP_DigestUpdate(c, b, 4);
}

static void sha_update_str(EVP_MD_CTX *c, const char *s)
{
	sha_update_u32(c, (uint32_t)strlen(s));
	EVP_DigestUpdate(c, s, strlen(s));
}

/* The pool fingerprint: SHA-256 over a canonical description, truncated. */
static int pool_fingerprint(const kvl_layout *l, kvl__pool *p)
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	uint8_t md[32];
	if (!c || !EVP_DigestInit_ex(c, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(c);
		return KVL_ENOMEM;
	}
	sha_update_str(c, "kvlink-pool-v1");
	sha_update_str(c, l->tag);
	sha_update_u32(c, l->page_size);
	sha_update_u32(c, l->shard.tp_size);
	sha_update_u32(c, l->shard.cp_size);
	sha_update_u32(c, l->shard.pp_size);
	sha_update_str(c, p->name);
	sha_update_u32(c, (uint32_t)p->policy);
	sha_update_u32(c, p->window);
	sha_update_u32(c, p->flags);
	sha_update_u32(c, p->n_comps);
	for (uint32_t i = 0; i < p->n_comps; i++)
		sha_update_str(c, p->comps[i]);
	/* Only a declared format joins the description, so that the objects
	 * of layouts that declare none keep their keys. */
	if (p->dtype[0]) {
		sha_update_str(c, "format");
		sha_update_str(c, p->dtype);
		sha_update_str(c, p->mem_layout);
	}
	sha_update_u32(c, p->n_layers);
	for (uint32_t i = 0; i < p->n_layers; i++) {
		const kvl__layer *ly = &p->layers[i];
		sha_update_u32(c, ly->layer);
		for (uint32_t k = 0; k < p->n_comps; k++) {
			uint8_t b[8];
			kvl__put_u64le(b, ly->bufs[k]->b.page_bytes);
			EVP_DigestUpdate(c, b, 8);
		}
	}
	EVP_DigestFinal_ex(c, md, NULL);
	EVP_MD_CTX_free(c);
	memcpy(p->fp, md, KVL__FP_BYTES);
	return 0;
}

static int layout_fingerprint(kvl_layout *l)
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	uint8_t md[32];
	if (!c || !EVP_DigestInit_ex(c, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(c);
		return KVL_ENOMEM;
	}
	sha_update_str(c, "kvlink-layout-v1");
	for (size_t i = 0; i < l->n_pools; i++)
		EVP_DigestUpdate(c, l->pools[i].fp, KVL__FP_BYTES);
	EVP_DigestFinal_ex(c, md, NULL);
	EVP_MD_CTX_free(c);
	memcpy(l->fp, md, KVL__FP_BYTES);
	return 0;
}

size_t kvl__pool_suffix(const kvl__pool *p, const kvl_shard *s, char *buf)
{
	if (p->flags & KVL_POOL_REPLICATED_TP)
		return (size_t)snprintf(buf, KVL_KEY_MAX, ":%s:cp%u_pp%u",
		                        p->name, s->cp_rank, s->pp_rank);
	return (size_t)snprintf(buf, KVL_KEY_MAX, ":%s:tp%u_cp%u_pp%u",
	                        p->name, s->tp_rank, s->cp_rank, s->pp_rank);
}

static void pool_keys(const kvl_layout *l, kvl__pool *p)
{
	char fp[2 * KVL__FP_BYTES + 1];
	kvl__hex(p->fp, KVL__FP_BYTES, fp);
	fp[2 * KVL__FP_BYTES] = '\0';
	p->key_prefix_len = (size_t)snprintf(p->key_prefix, KVL_KEY_MAX,
	                                     "kvl1:%s:%s:", l->tag, fp);
	p->key_suffix_len = kvl__pool_suffix(p, &l->shard, p->key_suffix);
}

/* The fingerprint object headers carry (see kvl__pool.obj_fp): the pool
 * fingerprint and the key suffix, which names the pool and the rank shard
 * (without the tp rank for a pool replicated across tp ranks, whose
 * objects those ranks share). */
static int pool_object_fingerprint(kvl__pool *p)
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	uint8_t md[32];
	if (!c || !EVP_DigestInit_ex(c, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(c);
		return KVL_ENOMEM;
	}
	sha_update_str(c, "kvlink-object-v1");
	EVP_DigestUpdate(c, p->fp, KVL__FP_BYTES);
	sha_update_str(c, p->key_suffix);
	EVP_DigestFinal_ex(c, md, NULL);
	EVP_MD_CTX_free(c);
	memcpy(p->obj_fp, md, KVL__FP_BYTES);
	return 0;
}

/* Orders a pool's buffers layer-major, builds its layer table and sizes. */
static int pool_derive(kvl_layout *l, kvl__pool *p)
{
	p->ordered = malloc(p->n_bufs * sizeof *p->ordered);
	if (!p->ordered)
		return kvl__fail(&l->err, KVL_ENOMEM, "out of memory");
	uint32_t max_layer = 0;
	for (size_t i = 0; i < p->n_bufs; i++) {
		p->ordered[i] = &p->bufs[i];
		if (p->bufs[i].layer > max_layer)
			max_layer = p->bufs[i].layer;
	}
	qsort(p->ordered, p->n_bufs, sizeof *p->ordered, cmp_buf_order);
	if (p->n_bufs % p->n_comps)
		goto missing;
	p->n_layers = (uint32_t)(p->n_bufs / p->n_comps);
	p->layers = calloc(p->n_layers, sizeof *p->layers);
	p->layer_index_len = max_layer + 1;
	p->layer_index = malloc(p->layer_index_len * sizeof *p->layer_index);
	if (!p->layers || !p->layer_index)
		return kvl__fail(&l->err, KVL_ENOMEM, "out of memory");
	for (uint32_t i = 0; i < p->layer_index_len; i++)
		p->layer_index[i] = -1;
	p->header_size = kvl__obj_header_size(p->n_layers);
	size_t off = p->header_size;
	for (uint32_t i = 0; i < p->n_layers; i++) {
		kvl__layer *ly = &p->layers[i];
		ly->bufs = &p->ordered[(size_t)i * p->n_comps];
		ly->layer = ly->bufs[0]->layer;
		for (uint32_t k = 0; k < p->n_comps; k++)
			if (ly->bufs[k]->layer != ly->layer ||
			    ly->bufs[k]->comp != k)
				goto missing;
		ly->offset = off;
		for (uint32_t k = 0; k < p->n_comps; k++) {
			ly->len += ly->bufs[k]->b.page_bytes;
			if (ly->bufs[k]->b.mem == KVL_MEM_CUDA)
				p->on_cuda = 1;
		}
		off += ly->len;
		p->layer_index[ly->layer] = (int32_t)i;
	}
	p->object_size = off;
	p->num_pages = p->bufs[0].b.num_pages;
	p->max_pieces = (uint32_t)p->n_bufs;
	return 0;
missing:
	/* Some layer lacks a component: find which, for the message. */
	for (size_t i = 0; i < p->n_bufs; i++) {
		uint32_t layer = p->bufs[i].layer;
		for (uint32_t k = 0; k < p->n_comps; k++) {
			int found = 0;
			for (size_t j = 0; j < p->n_bufs && !found; j++)
				found = p->bufs[j].layer == layer &&
				        p->bufs[j].comp == k;
			if (!found)
				return kvl__fail(&l->err, KVL_EINVAL,
				                 "finalize: pool '%s' layer %u has "
				                 "no buffer for component '%s'",
				                 p->name, layer, p->comps[k]);
		}
	}
	return kvl__fail(&l->err, KVL_EINVAL, "finalize: pool '%s' is "
	                 "inconsistent", p->name);
}

static int check_overlaps(kvl_layout *l)
{
	for (size_t pi = 0; pi < l->n_pools; pi++) {
		kvl__pool *p = &l->pools[pi];
		for (size_t i = 0; i < p->n_bufs; i++) {
			for (size_t qi = pi; qi < l->n_pools; qi++) {
				kvl__pool *q = &l->pools[qi];
				for (size_t j = qi == pi ? i + 1 : 0;
				     j < q->n_bufs; j++) {
					if (!buffers_overlap(&p->bufs[i].b,
					                     &q->bufs[j].b))
						continue;
					return kvl__fail(
						&l->err, KVL_EINVAL,
						"finalize: buffers overlap: "
						"%s/%s layer %u and %s/%s "
						"layer %u",
						p->name,
						p->comps[p->bufs[i].comp],
						p->bufs[i].layer, q->name,
						q->comps[q->bufs[j].comp],
						q->bufs[j].layer);
				}
			}
		}
	}
	return 0;
}

int kvl_layout_finalize(kvl_layout *l)
{
	if (!l)
		return KVL_EINVAL;
	if (l->finalized)
		return kvl__fail(&l->err, KVL_ESTATE,
		                 "finalize: layout is already finalized");
	if (l->n_pools == 0)
		return kvl__fail(&l->err, KVL_EINVAL, "finalize: no pools");
	for (size_t i = 0; i < l->n_pools; i++)
		if (l->pools[i].n_bufs == 0)
			return kvl__fail(&l->err, KVL_EINVAL,
			                 "finalize: pool '%s' has no buffers",
			                 l->pools[i].name);
	size_t n_bufs = 0;
	for (size_t i = 0; i < l->n_pools; i++)
		n_bufs += l->pools[i].n_bufs;
	if (l->n_shapes && l->n_shapes != n_bufs)
		return kvl__fail(&l->err, KVL_EINVAL,
		                 "finalize: %zu components described by size "
		                 "only and %zu with memory: a layout is one or "
		                 "the other",
		                 l->n_shapes, n_bufs - l->n_shapes);
	int rc = check_overlaps(l);
	for (size_t i = 0; i < l->n_pools && rc == 0; i++) {
		kvl__pool *p = &l->pools[i];
		rc = pool_derive(l, p);
		if (rc == 0 && pool_fingerprint(l, p))
			rc = kvl__fail(&l->err, KVL_ENOMEM, "SHA-256 failed");
		if (rc == 0)
			pool_keys(l, p);
		if (rc == 0 && pool_object_fingerprint(p))
			rc = kvl__fail(&l->err, KVL_ENOMEM, "SHA-256 failed");
	}
	if (rc == 0 && layout_fingerprint(l))
		rc = kvl__fail(&l->err, KVL_ENOMEM, "SHA-256 failed");
	if (rc) {
		for (size_t i = 0; i < l->n_pools; i++)
			pool_free_derived(&l->pools[i]);
		return rc;
	}
	l->finalized = 1;
	return 0;
}

const kvl__pool *kvl__layout_pool(const kvl_layout *l, int pool, int *code)
{
	kvl__err *err = (kvl__err *)&l->err; /* messages are not the value */
	if (!l->finalized) {
		*code = kvl__fail(err, KVL_ESTATE, "layout is not finalized");
		return NULL;
	}
	if (pool < 0 || (size_t)pool >= l->n_pools) {
		*code = kvl__fail(err, KVL_ENOTFOUND, "unknown pool id %d",
		                  pool);
		return NULL;
	}
	return &l->pools[pool];
}

#define GET_POOL(l, pool)                               \
	int rc_ = KVL_EINVAL;                           \
	if (!(l))                                       \
		return KVL_EINVAL;                      \
	const kvl__pool *p = kvl__layout_pool(l, pool, &rc_); \
	if (!p)                                         \
		return rc_

/* KVL_EINVAL for a NULL [out] argument, with the message every handle
 * gets. */
static int null_arg(const kvl_layout *l, const char *fn, const char *arg)
{
	return kvl__fail((kvl__err *)&l->err, KVL_EINVAL, "%s: %s is NULL", fn,
	                 arg);
}

int kvl_layout_pool_count(const kvl_layout *l, int *count_out)
{
	if (!l)
		return KVL_EINVAL;
	if (!count_out)
		return null_arg(l, "pool_count", "count_out");
	if (!l->finalized)
		return kvl__fail((kvl__err *)&l->err, KVL_ESTATE,
		                 "layout is not finalized");
	*count_out = (int)l->n_pools;
	return 0;
}

int kvl_layout_pool_id(const kvl_layout *l, const char *name, int *pool_out)
{
	if (!l)
		return KVL_EINVAL;
	if (!name || !pool_out)
		return null_arg(l, "pool_id", !name ? "name" : "pool_out");
	if (!l->finalized)
		return kvl__fail((kvl__err *)&l->err, KVL_ESTATE,
		                 "layout is not finalized");
	for (size_t i = 0; i < l->n_pools; i++)
		if (!strcmp(l->pools[i].name, name)) {
			*pool_out = (int)i;
			return 0;
		}
	return kvl__fail((kvl__err *)&l->err, KVL_ENOTFOUND,
	                 "unknown pool '%s'", name);
}

int kvl_layout_pool_info(const kvl_layout *l, int pool, const char **name_out,
                         kvl_hit_policy *policy_out, uint32_t *window_out,
                         uint32_t *flags_out)
{
	GET_POOL(l, pool);
	if (name_out)
		*name_out = p->name;
	if (policy_out)
		*policy_out = p->policy;
	if (window_out)
		*window_out = p->window;
	if (flags_out)
		*flags_out = p->flags;
	return 0;
}

uint32_t kvl_layout_page_size(const kvl_layout *l)
{
	return l ? l->page_size : 0;
}

kvl_shard kvl_layout_shard(const kvl_layout *l)
{
	return l ? l->shard : KVL_SHARD_SINGLE;
}

int kvl_layout_pool_layers(const kvl_layout *l, int pool, uint32_t *layers,
                           size_t cap, size_t *n_out)
{
	GET_POOL(l, pool);
	if (!n_out || (cap && !layers))
		return null_arg(l, "pool_layers", !n_out ? "n_out" : "layers");
	*n_out = p->n_layers;
	if (cap < p->n_layers)
		return kvl__fail((kvl__err *)&l->err, KVL_ERANGE,
		                 "pool_layers: cap %zu < %u layers", cap,
		                 p->n_layers);
	for (uint32_t i = 0; i < p->n_layers; i++)
		layers[i] = p->layers[i].layer;
	return 0;
}

int kvl_layout_pool_pages(const kvl_layout *l, int pool, size_t *pages_out)
{
	GET_POOL(l, pool);
	if (!pages_out)
		return null_arg(l, "pool_pages", "pages_out");
	*pages_out = p->num_pages;
	return 0;
}

int kvl_layout_object_size(const kvl_layout *l, int pool, size_t *size_out,
                           size_t *header_out)
{
	GET_POOL(l, pool);
	if (size_out)
		*size_out = p->object_size;
	if (header_out)
		*header_out = p->header_size;
	return 0;
}

int kvl_layout_layer_range(const kvl_layout *l, int pool, uint32_t layer,
                           size_t *offset_out, size_t *len_out)
{
	GET_POOL(l, pool);
	const kvl__layer *ly = kvl__pool_layer(p, layer);
	if (!ly)
		return kvl__fail((kvl__err *)&l->err, KVL_ENOTFOUND,
		                 "pool '%s' has no layer %u", p->name, layer);
	if (offset_out)
		*offset_out = ly->offset;
	if (len_out)
		*len_out = ly->len;
	return 0;
}

int kvl_layout_page_pieces(const kvl_layout *l, int pool, size_t slot,
                           uint32_t layer, kvl_iov *pieces, size_t cap,
                           size_t *n_out)
{
	GET_POOL(l, pool);
	if (!n_out || (cap && !pieces))
		return null_arg(l, "page_pieces", !n_out ? "n_out" : "pieces");
	int rc = kvl__layout_needs_memory(l, (kvl__err *)&l->err,
	                                  "page_pieces");
	if (rc)
		return rc;
	if (slot >= p->num_pages)
		return kvl__fail((kvl__err *)&l->err, KVL_ERANGE,
		                 "pool '%s': slot %zu out of range (%zu slots)",
		                 p->name, slot, p->num_pages);
	uint32_t first = 0, count = p->n_layers;
	if (layer != KVL_ALL_LAYERS) {
		const kvl__layer *ly = kvl__pool_layer(p, layer);
		if (!ly)
			return kvl__fail((kvl__err *)&l->err, KVL_ENOTFOUND,
			                 "pool '%s' has no layer %u", p->name,
			                 layer);
		first = (uint32_t)(ly - p->layers);
		count = 1;
	}
	size_t n = (size_t)count * p->n_comps;
	*n_out = n;
	if (cap < n)
		return kvl__fail((kvl__err *)&l->err, KVL_ERANGE,
		                 "page_pieces: cap %zu < %zu pieces", cap, n);
	kvl__buf *const *b = p->layers[first].bufs;
	for (size_t i = 0; i < n; i++)
		pieces[i] = (kvl_iov){
			.addr = (char *)b[i]->b.base + slot * b[i]->b.page_stride,
			.len = b[i]->b.page_bytes};
	return 0;
}

int kvl_layout_fingerprint(const kvl_layout *l, int pool, char *hex,
                           size_t len)
{
	if (!l)
		return KVL_EINVAL;
	if (!hex)
		return null_arg(l, "fingerprint", "hex");
	if (len < 2 * KVL__FP_BYTES + 1)
		return kvl__fail((kvl__err *)&l->err, KVL_ERANGE,
		                 "fingerprint: len %zu < %d", len,
		                 2 * KVL__FP_BYTES + 1);
	const uint8_t *fp = l->fp;
	if (pool != -1) {
		GET_POOL(l, pool);
		fp = p->fp;
	} else if (!l->finalized) {
		return kvl__fail((kvl__err *)&l->err, KVL_ESTATE,
		                 "layout is not finalized");
	}
	kvl__hex(fp, KVL__FP_BYTES, hex);
	hex[2 * KVL__FP_BYTES] = '\0';
	return 0;
}

size_t kvl__pool_key_with(const kvl__pool *p, const char *suffix,
                          size_t suffix_len, const kvl_hash *page, char *buf)
{
	char *o = buf;
	memcpy(o, p->key_prefix, p->key_prefix_len);
	o += p->key_prefix_len;
	kvl__hex(page->bytes, KVL_HASH_BYTES, o);
	o += 2 * KVL_HASH_BYTES;
	memcpy(o, suffix, suffix_len + 1);
	return p->key_prefix_len + 2 * KVL_HASH_BYTES + suffix_len;
}

/* 1 if s[0..n) is n lowercase hex digits. */
static int hex_run(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

size_t kvl__page_group(const char *key, char *buf)
{
	/* PREFIX FP ':' HASH ':' POOL ':' SHARD, read from the end: pool
	 * names and shards hold no ':', the prefix may (a store's tenant). */
	size_t n = strlen(key);
	const char *c[4];
	size_t found = 0;
	for (size_t i = n; i-- > 0 && found < 4;)
		if (key[i] == ':')
			c[found++] = key + i;
	if (found < 4 || n >= KVL_KEY_MAX)
		return 0;
	const char *hash = c[2] + 1, *fp = c[3] + 1;
	if ((size_t)(c[1] - hash) != 2 * KVL_HASH_BYTES ||
	    (size_t)(c[2] - fp) != 2 * KVL__FP_BYTES ||
	    !hex_run(hash, 2 * KVL_HASH_BYTES) || !hex_run(fp, 2 * KVL__FP_BYTES))
		return 0;
	size_t pre = (size_t)(fp - key);
	memcpy(buf, key, pre);
	memcpy(buf + pre, hash, 2 * KVL_HASH_BYTES);
	buf[pre + 2 * KVL_HASH_BYTES] = '\0';
	return pre + 2 * KVL_HASH_BYTES;
}

size_t kvl__pool_key(const kvl__pool *p, const kvl_hash *page, char *buf)
{
	return kvl__pool_key_with(p, p->key_suffix, p->key_suffix_len, page,
	                          buf);
}

int kvl__shard_of_layout(const kvl_layout *l, const kvl_shard *s)
{
	return s->tp_size == l->shard.tp_size && s->cp_size == l->shard.cp_size &&
	       s->pp_size == l->shard.pp_size && s->tp_rank < s->tp_size &&
	       s->cp_rank < s->cp_size && s->pp_rank < s->pp_size;
}

int kvl_layout_shard_key(const kvl_layout *l, int pool, const kvl_shard *shard,
                         const kvl_hash *page, char *buf, size_t buflen)
{
	GET_POOL(l, pool);
	if (!shard || !page || !buf)
		return kvl__fail((kvl__err *)&l->err, KVL_EINVAL,
		                 "shard_key: shard, page or buf is NULL");
	if (!kvl__shard_of_layout(l, shard))
		return kvl__fail((kvl__err *)&l->err, KVL_EINVAL,
		                 "shard_key: shard tp %u/%u cp %u/%u pp %u/%u is "
		                 "not one of this layout's (sizes tp %u, cp %u, "
		                 "pp %u)",
		                 shard->tp_rank, shard->tp_size, shard->cp_rank,
		                 shard->cp_size, shard->pp_rank, shard->pp_size,
		                 l->shard.tp_size, l->shard.cp_size,
		                 l->shard.pp_size);
	char suffix[KVL_KEY_MAX];
	size_t slen = kvl__pool_suffix(p, shard, suffix);
	size_t need = p->key_prefix_len + 2 * KVL_HASH_BYTES + slen + 1;
	if (buflen < need)
		return kvl__fail((kvl__err *)&l->err, KVL_ERANGE,
		                 "shard_key: buflen %zu < %zu", buflen, need);
	kvl__pool_key_with(p, suffix, slen, page, buf);
	return 0;
}

int kvl_layout_key(const kvl_layout *l, int pool, const kvl_hash *page,
                   char *buf, size_t buflen)
{
	GET_POOL(l, pool);
	if (!page || !buf)
		return kvl__fail((kvl__err *)&l->err, KVL_EINVAL,
		                 "key: page or buf is NULL");
	size_t need = p->key_prefix_len + 2 * KVL_HASH_BYTES +
	              p->key_suffix_len + 1;
	if (buflen < need)
		return kvl__fail((kvl__err *)&l->err, KVL_ERANGE,
		                 "key: buflen %zu < %zu", buflen, need);
	kvl__pool_key(p, page, buf);
	return 0;
}
