/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec.h — the page codec (internal): what one page of one pool looks like
 * as a store object, and the only code that reads, writes or checks one.
 *
 * An object is a header followed by the payload, layer-major: for each layer
 * of the pool in ascending order, each component in the pool's order (see
 * kvlink.h). Header, all integers little-endian:
 *   0   magic "KVLO"
 *   4   u16 format version (3)
 *   6   u16 flags: bit 0 = unsummed: the integrity fields are zero;
 *       bit 1 = keyed: the integrity fields are MACs under the store's
 *       secret (never both)
 *   8   u32 number of layers n
 *   12  u32 header size (this header, padded to 64 bytes)
 *   16  16 bytes object fingerprint: the pool fingerprint bound to the
 *       rank shard (kvl__pool.obj_fp in layout.h)
 *   32  32 bytes page hash
 *   64  u64 payload length
 *   72  16 bytes nonce: random for every keyed object written, else zero
 *   88  n × 16 bytes integrity of each layer's bytes, in layer order
 *   88+16n 16 bytes integrity of bytes [0, 88+16n) of the header
 *   zero padding up to the header size
 * Integrity fields: unkeyed, XXH3-128 (libxxhash) seeded with
 * KVL__CHECKSUM_SEED, its low then high 64 bits; keyed, a Poly1305 tag
 * under a one-time key derived from the secret, the field's index (the
 * layer's, or KVL__HDR_INDEX for the header's own) and the nonce
 * (core/mac.h); the header's own tag covers the identity, flags, nonce and
 * every layer tag, and is checked before any layer. A layer's field covers
 * its bytes as they sit in the object, however its components are split
 * in memory. The object's size does not depend on whether it is keyed.
 *
 * Who reads what: a reader with a key accepts only keyed objects and
 * checks every tag with it; a reader without one refuses keyed objects
 * (it cannot check them). Trusted stores write unsummed objects and pass
 * no key.
 *
 * Plans: a read plan says which layers one store read of a page carries at
 * a given model layer (that layer alone, or on stores that move whole
 * objects every layer at the first) and whether the header comes with it;
 * its ranges go straight into a slot or into one contiguous span. The write
 * plan is the header followed by the slot's pieces. kvl__read_check is the
 * one check of what a read brought, used by the linker's every load path,
 * by kvl_pages_get and by the fuzzer.
 *
 * Every function is thread-safe and allocates nothing.
 */
#ifndef KVL_CODEC_H
#define KVL_CODEC_H

#include "core/layout.h"
#include "core/mac.h"

#define KVL__OBJ_VERSION 3u
#define KVL__OBJ_UNSUMMED 0x1u
#define KVL__OBJ_KEYED 0x2u
#define KVL__OBJ_FIELD 16u           /* bytes of an integrity field */
#define KVL__HDR_INDEX 0xffffffffu   /* the header's own field, keyed */
#define KVL__CHECKSUM_SEED 0x6b766c6b6b766c32ull

/* ---------------------------------------------------------------- header */

/* Bytes of the header of an object with n_layers layers. */
size_t kvl__obj_header_size(uint32_t n_layers);

/* What a header says, or must say. */
typedef struct kvl__obj_id {
	const uint8_t *fp; /* KVL__FP_BYTES */
	const kvl_hash *page;
	uint64_t payload_len;
	uint32_t n_layers;
} kvl__obj_id;

/* The identity an object of pool `p` holding `page` must carry. */
static inline kvl__obj_id kvl__page_id(const kvl__pool *p, const kvl_hash *page)
{
	return (kvl__obj_id){.fp = p->obj_fp, .page = page,
	                     .payload_len = p->object_size - p->header_size,
	                     .n_layers = p->n_layers};
}

/* Starts the header of `id` in dst (kvl__obj_header_size(id->n_layers)
 * bytes): identity, flags, nonce, and zero integrity fields and padding.
 * Unsummed when !summed (trusted stores, where summing would only cost
 * time; every other reader refuses such objects); keyed when summed and
 * `key` is set, with a fresh random nonce. Returns 0, or KVL_EIO when no
 * random nonce could be drawn (nothing may then be sealed). */
int kvl__obj_header_start(uint8_t *dst, const kvl__obj_id *id, int summed,
                          const kvl__mac *key);

/* Stores layer i's field in a started header. */
void kvl__obj_layer_set(uint8_t *hdr, uint32_t i, const uint8_t *field);

/* Seals a started header whose layer fields are set: writes its own
 * integrity field (keyed with `key` when the header says keyed). Returns 0
 * or KVL_EIO (OpenSSL failed; the header must not be stored). */
int kvl__obj_header_seal(uint8_t *hdr, const kvl__mac *key);

/* start, each of the n layer fields from `fields` (n × KVL__OBJ_FIELD
 * bytes; NULL: unsummed), seal: for tests and the fuzzer. */
int kvl__obj_header_write(uint8_t *dst, const kvl__obj_id *id,
                          const uint8_t *fields, const kvl__mac *key);

/* Checks that src (len bytes) is an intact header of exactly `id`, read by
 * a reader holding `key` (NULL: none). Returns 0, or KVL_ECORRUPT with a
 * reason in *why (a static string; why may be NULL): among others a keyed
 * object without a key, an unkeyed one with a key, and a tag that another
 * secret made. */
int kvl__obj_header_check(const uint8_t *src, size_t len,
                          const kvl__obj_id *id, const kvl__mac *key,
                          const char **why);

/* Whether layer index i of an object whose header passed
 * kvl__obj_header_check has integrity field `actual` (as
 * kvl__layer_field_slot computes it): 0, or KVL_ECORRUPT when it differs or
 * the object is unsummed. Keyed fields compare in constant time. */
int kvl__obj_layer_ok(const uint8_t *hdr, uint32_t i, const uint8_t *actual);

/* ------------------------------------------------------------- checksums */

/* XXH3-128 of len bytes with `seed` into out (16 bytes: low, high 64 bits,
 * little-endian). */
void kvl__checksum(const void *data, size_t len, uint64_t seed,
                   uint8_t *out);

/* The integrity field of layer `ly` as it sits in host slot `slot` (its
 * components in order), of the object whose header `hdr` was started (or
 * checked), into out (KVL__OBJ_FIELD bytes): XXH3-128, or the keyed tag
 * when the header says keyed (with `key`). Returns 0, or KVL_ECORRUPT when
 * the header is keyed and key is NULL or OpenSSL failed (out is then
 * zeros, which a check must not accept: the caller fails the layer). */
int kvl__layer_field_slot(const kvl__pool *p, const kvl__layer *ly,
                          size_t slot, const uint8_t *hdr,
                          const kvl__mac *key, uint8_t *out);

/* ------------------------------------------------------------ read plans */

/* One read of a page's object: layers [first, end) of p->layers, at
 * `offset` in the object and `span` bytes long, and the header when
 * `header` is set. first == end: nothing to read (a whole-object store
 * brought this layer with the first one). */
typedef struct kvl__read {
	uint32_t first, end;
	int header;
	uint64_t offset;
	size_t span;
} kvl__read;

/* The read that model layer `ly` of pool p takes (ly NULL: every layer):
 * ly alone, or, on a store that moves whole objects (`whole`), every layer
 * at the pool's first layer and nothing at the others. The header comes
 * with the pool's first layer. */
kvl__read kvl__read_plan(const kvl__pool *p, const kvl__layer *ly, int whole);

/* The store ranges of read `rd` into slot `slot`: the header into `hdr`
 * (when rd->header and hdr is not NULL), then every component of every
 * layer read straight into the slot. Writes at most
 * 1 + (rd->end - rd->first) * p->n_comps ranges to out; returns how many.
 * With hdr NULL the ranges say where each byte of the read belongs in the
 * slot (offset in the object → slot address), for copies from elsewhere. */
size_t kvl__read_into_slot(const kvl__pool *p, const kvl__read *rd,
                           uint8_t *hdr, size_t slot, kvl_range *out);

/* The same read into one contiguous span of rd->span bytes: the header
 * range (as above), then one range for the layers. At most 2 ranges. */
size_t kvl__read_into_span(const kvl__pool *p, const kvl__read *rd,
                           uint8_t *hdr, void *span, kvl_range *out);

/* The one check of what read `rd` of page `page` brought:
 *  result  the store's result for the key (0: read; KVL_ERANGE, a shorter
 *          object than this pool's, becomes KVL_ECORRUPT; other codes are
 *          returned as they are);
 *  hdr     the object's header (read with the pool's first layer; checked
 *          when rd->header);
 *  bytes   the layers read, contiguous (rd->span bytes), or NULL when they
 *          were read into host slot `slot`;
 *  verify  check each layer read against its integrity field (stores
 *          that are not trusted);
 *  key     the store's key (kvl__store_mac), or NULL: a keyed reader
 *          accepts only objects keyed with the same secret.
 * Returns 0 (the read is valid) or the reason it is not, with a static
 * description in *why (why may be NULL). */
int kvl__read_check(const kvl__pool *p, const kvl_hash *page,
                    const kvl__read *rd, int result, const uint8_t *hdr,
                    const uint8_t *bytes, size_t slot, int verify,
                    const kvl__mac *key, const char **why);

/* ------------------------------------------------------------ write plan */

/* Writes the header of page `page` stored from host slot `slot` into hdr
 * (p->header_size bytes), with every layer's integrity field when `summed`
 * (keyed with `key` when set). 0, or KVL_EIO (no nonce, OpenSSL failed:
 * the page must not be stored). */
int kvl__write_header(const kvl__pool *p, const kvl_hash *page, size_t slot,
                      int summed, const kvl__mac *key, uint8_t *hdr);

/* Writes the header of an object whose payload is already in `obj` (header
 * first, p->object_size bytes), as kvl__write_header does. */
int kvl__write_seal(const kvl__pool *p, const kvl_hash *page, int summed,
                    const kvl__mac *key, uint8_t *obj);

/* The pieces that store slot `slot` as an object: the header `hdr` (left
 * out when NULL), then every layer's components in payload order. Writes
 * 1 + p->max_pieces entries at most to out; returns how many. */
size_t kvl__write_pieces(const kvl__pool *p, const uint8_t *hdr, size_t slot,
                         kvl_iov *out);

#endif /* KVL_CODEC_H */
