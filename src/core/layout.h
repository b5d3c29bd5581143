/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layout.h — the finalized shape of a layout, for the page I/O and linker
 * code that needs it on hot paths (internal).
 *
 * After kvl_layout_finalize nothing here changes, so readers need no lock.
 */
#ifndef KVL_LAYOUT_H
#define KVL_LAYOUT_H

#include "core/internal.h"

#define KVL__FP_BYTES 16

/* One (component, layer) buffer of a pool. */
typedef struct kvl__buf {
	uint32_t comp;  /* index into the pool's component names */
	uint32_t layer; /* model layer */
	kvl_buffer b;
} kvl__buf;

/* One model layer of a pool, once finalized. */
typedef struct kvl__layer {
	uint32_t layer;    /* model layer number */
	size_t offset;     /* of the layer's bytes inside the object */
	size_t len;        /* bytes of this layer in one page */
	kvl__buf **bufs;   /* the layer's buffers in component order */
} kvl__layer;

typedef struct kvl__pool {
	char name[KVL_NAME_MAX + 1];
	kvl_hit_policy policy;
	uint32_t window;
	uint32_t flags;
	char dtype[KVL_NAME_MAX + 1];  /* kvl_layout_pool_format; "" unset */
	char mem_layout[KVL_NAME_MAX + 1];
	char (*comps)[KVL_NAME_MAX + 1]; /* component names, first-added order */
	uint32_t n_comps;
	kvl__buf *bufs; /* as added */
	size_t n_bufs, cap_bufs;
	/* Filled by finalize: */
	kvl__layer *layers;      /* ascending model layer */
	uint32_t n_layers;
	kvl__buf **ordered;      /* every buffer, layer-major (backs layers[]) */
	int32_t *layer_index;    /* model layer → index in layers[], or -1 */
	uint32_t layer_index_len;
	size_t num_pages;
	size_t header_size;      /* object header bytes */
	size_t object_size;      /* header + payload */
	uint8_t fp[KVL__FP_BYTES];
	/* What object headers carry: the pool fingerprint bound to this
	 * layout's rank shard (the key suffix), so an object of another shard
	 * never passes the header check even under this shard's key. */
	uint8_t obj_fp[KVL__FP_BYTES];
	char key_prefix[KVL_KEY_MAX]; /* "kvl1:<tag>:<fp>:" */
	size_t key_prefix_len;
	char key_suffix[KVL_KEY_MAX]; /* ":<pool>:<shard>" */
	size_t key_suffix_len;
	uint32_t max_pieces;     /* pieces of one page, all layers */
	int on_cuda;             /* some buffer lives on a CUDA device */
} kvl__pool;

struct kvl_layout {
	char tag[KVL_NAME_MAX + 1];
	uint32_t page_size;
	kvl_shard shard;
	kvl__pool *pools;
	size_t n_pools, cap_pools;
	int finalized;
	size_t n_shapes; /* components added by size only (kvl_layout_add_shape) */
	uint8_t fp[KVL__FP_BYTES]; /* of the whole layout */
	kvl__err err;
};

/* KVL_EINVAL, with the message of every call that needs a layout's memory,
 * when `layout` describes sizes only; else 0. */
int kvl__layout_needs_memory(const kvl_layout *layout, kvl__err *err,
                             const char *op);

/* The finalized pool `pool`, or NULL (with a message in layout->err) when
 * the layout is not finalized or the id is unknown; *code gets the error. */
const kvl__pool *kvl__layout_pool(const kvl_layout *layout, int pool,
                                  int *code);

/* Writes the key of `page` for pool `p` into buf (KVL_KEY_MAX bytes). */
size_t kvl__pool_key(const kvl__pool *p, const kvl_hash *page, char *buf);

/* The key suffix (":<pool>:<shard>") of pool p for shard s, into buf
 * (KVL_KEY_MAX bytes); its length. */
size_t kvl__pool_suffix(const kvl__pool *p, const kvl_shard *s, char *buf);

/* The name that a page's objects of every pool and rank shard share, from
 * one of their keys (kvl__pool_key, with any store prefix before it): the
 * key without its pool fingerprint, pool and shard, written into buf
 * (KVL_KEY_MAX bytes). Its length, or 0 when `key` is not a page's key.
 * Stores that group objects (Mooncake) keep a page's objects together. */
size_t kvl__page_group(const char *key, char *buf);

/* kvl__pool_key with another shard's suffix (kvl__pool_suffix). */
size_t kvl__pool_key_with(const kvl__pool *p, const char *suffix,
                          size_t suffix_len, const kvl_hash *page, char *buf);

/* 1 when shard s is one of layout l's ranks: the same sizes, ranks below
 * them. */
int kvl__shard_of_layout(const kvl_layout *l, const kvl_shard *s);

/* The address of slot `slot` of buffer `b`. */
static inline void *kvl__slot_at(const kvl_buffer *b, size_t slot)
{
	return (char *)b->base + slot * b->page_stride;
}

/* Layer `l` of pool `p` (model layer number), or NULL if it has none. */
static inline const kvl__layer *kvl__pool_layer(const kvl__pool *p, uint32_t l)
{
	if (l >= p->layer_index_len || p->layer_index[l] < 0)
		return NULL;
	return &p->layers[p->layer_index[l]];
}

#endif /* KVL_LAYOUT_H */
