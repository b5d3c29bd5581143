/*
 * pages.h — moving one page's layers between a layout's slots and store
 * objects (internal): the pieces that kvl_pages_* and the linker share.
 */
#ifndef KVL_PAGES_H
#define KVL_PAGES_H

#include "core/layout.h"
#include "core/object.h"

/* The store ranges that read layer `ly` of an object into slot `slot`: one
 * per component, n_comps of them, written to out. */
size_t kvl__layer_ranges(const kvl__pool *p, const kvl__layer *ly, size_t slot,
                         kvl_range *out);

/* The checksum of layer `ly` as it sits in slot `slot` (host memory). */
uint64_t kvl__layer_sum(const kvl__pool *p, const kvl__layer *ly, size_t slot);

/* The checksum of layer `ly` inside object bytes `obj` (header first):
 * equal to kvl__layer_sum of the slot the object was stored from. */
uint64_t kvl__object_layer_sum(const kvl__pool *p, const kvl__layer *ly,
                               const uint8_t *obj);

/* The same for the layer's bytes alone, at `at` (ly->len bytes). */
uint64_t kvl__layer_bytes_sum(const kvl__pool *p, const kvl__layer *ly,
                              const uint8_t *at);

/* Writes the header of page `page` stored from slot `slot` into hdr
 * (p->header_size bytes), summing every layer of the slot when `summed`
 * (stores that are not trusted; see kvl__obj_header_write). */
void kvl__page_header(const kvl__pool *p, const kvl_hash *page, size_t slot,
                      int summed, uint8_t *hdr);

/* The pieces that store page `slot` as an object: the header, then every
 * layer's components in payload order (1 + p->max_pieces entries). */
size_t kvl__page_pieces(const kvl__pool *p, const uint8_t *hdr, size_t slot,
                        kvl_iov *out);

/* The identity an object of pool `p` holding `page` must carry. */
static inline kvl__obj_id kvl__page_id(const kvl__pool *p, const kvl_hash *page)
{
	return (kvl__obj_id){.fp = p->obj_fp, .page = page,
	                     .payload_len = p->object_size - p->header_size,
	                     .n_layers = p->n_layers};
}

#endif /* KVL_PAGES_H */
