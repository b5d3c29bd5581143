/*
 * object.h — the header every stored page object starts with, and the
 * checksum that guards its layers (internal).
 *
 * Header, all integers little-endian:
 *   0   magic "KVLO"
 *   4   u16 format version (1)
 *   6   u16 flags: bit 0 = the layers are not summed (sums are zero)
 *   8   u32 number of layers n
 *   12  u32 header size (this header, padded to 64 bytes)
 *   16  16 bytes object fingerprint: the pool fingerprint bound to the
 *       rank shard (kvl__pool.obj_fp in layout.h)
 *   32  32 bytes page hash
 *   64  u64 payload length
 *   72  n × u64 checksum of each layer's bytes, in layer order
 *   72+8n u64 checksum of bytes [0, 72+8n) of the header
 *   zero padding up to the header size
 */
#ifndef KVL_OBJECT_H
#define KVL_OBJECT_H

#include "core/internal.h"

#define KVL__OBJ_VERSION 1u

/* Bytes of the header of an object with n_layers layers. */
size_t kvl__obj_header_size(uint32_t n_layers);

/* Checksum of len bytes, chained from `seed` (a layer split in pieces is
 * summed piece after piece, each seeded with the previous result). Not
 * cryptographic: it catches corruption and truncation, fast. */
uint64_t kvl__checksum(const void *data, size_t len, uint64_t seed);
#define KVL__CHECKSUM_SEED 0x6b766c6b6b766c31ull

/* What a header says, or must say. */
typedef struct kvl__obj_id {
	const uint8_t *fp; /* KVL__FP_BYTES */
	const kvl_hash *page;
	uint64_t payload_len;
	uint32_t n_layers;
} kvl__obj_id;

#define KVL__OBJ_UNSUMMED 0x1u

/* Writes a header for `id` with the given per-layer checksums into dst
 * (kvl__obj_header_size(id->n_layers) bytes). layer_sums NULL writes an
 * unsummed object: for trusted stores (the process's own memory), where
 * summing would only cost time; an untrusted reader refuses such objects. */
void kvl__obj_header_write(uint8_t *dst, const kvl__obj_id *id,
                           const uint64_t *layer_sums);

/* Checks that src (len bytes) is an intact header of exactly `id`. Returns
 * 0, or KVL_ECORRUPT with a reason in *why (a static string). */
int kvl__obj_header_check(const uint8_t *src, size_t len,
                          const kvl__obj_id *id, const char **why);

/* Whether layer index i (0-based, in layer order) of an object whose header
 * passed kvl__obj_header_check has checksum `actual`: 0, or KVL_ECORRUPT
 * when it differs or the object carries no checksums. */
static inline int kvl__obj_layer_ok(const uint8_t *hdr, uint32_t i,
                                    uint64_t actual)
{
	if ((hdr[6] | hdr[7] << 8) & KVL__OBJ_UNSUMMED)
		return KVL_ECORRUPT;
	return kvl__get_u64le(hdr + 72 + 8 * (size_t)i) == actual
	               ? 0
	               : KVL_ECORRUPT;
}

#endif /* KVL_OBJECT_H */
