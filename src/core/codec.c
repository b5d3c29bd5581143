/*
 * codec.c — the page codec: object headers, XXH3 layer checksums, read and
 * write plans, and the one read check (formats in codec.h).
 *
 * The header names exactly which page of which pool layout the bytes belong
 * to, so an object written by another layout, model or tenant, a truncated
 * object, or one whose header was damaged, never passes as valid. Layer
 * checksums let a reader verify each layer as it arrives, before the whole
 * object is read. XXH3 comes from libxxhash; where the library carries its
 * x86 dispatcher it picks the widest vector unit of the machine at run time.
 */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "core/codec.h"
#include "kvl_config.h"
#if KVL_HAVE_XXH_DISPATCH
#include <xxh_x86dispatch.h>
#endif

static const uint8_t obj_magic[4] = {'K', 'V', 'L', 'O'};

/* Bytes of the summed part of a header (before its own checksum). */
static size_t header_body(uint32_t n_layers)
{
	return 72 + 8 * (size_t)n_layers;
}

size_t kvl__obj_header_size(uint32_t n_layers)
{
	return kvl__round64(header_body(n_layers) + 8);
}

/* ------------------------------------------------------------- checksums */

uint64_t kvl__checksum(const void *data, size_t len, uint64_t seed)
{
	return XXH3_64bits_withSeed(data, len, seed);
}

uint64_t kvl__layer_sum_slot(const kvl__pool *p, const kvl__layer *ly,
                             size_t slot)
{
	if (p->n_comps == 1) {
		const kvl_buffer *b = &ly->bufs[0]->b;
		return kvl__checksum(kvl__slot_at(b, slot), b->page_bytes,
		                     KVL__CHECKSUM_SEED);
	}
	/* A state on the stack needs XXH3_INITSTATE before a seeded reset:
	 * libxxhash 0.8.1 skips deriving the secret when the garbage seed
	 * field already equals the seed (wrong sums, seen under ASan). */
	XXH3_state_t st;
	XXH3_INITSTATE(&st);
	XXH3_64bits_reset_withSeed(&st, KVL__CHECKSUM_SEED);
	for (uint32_t k = 0; k < p->n_comps; k++) {
		const kvl_buffer *b = &ly->bufs[k]->b;
		XXH3_64bits_update(&st, kvl__slot_at(b, slot), b->page_bytes);
	}
	return XXH3_64bits_digest(&st);
}

/* The checksum of layer `ly` as contiguous bytes at `at`. */
static uint64_t layer_sum_bytes(const kvl__layer *ly, const uint8_t *at)
{
	return kvl__checksum(at, ly->len, KVL__CHECKSUM_SEED);
}

/* ---------------------------------------------------------------- header */

void kvl__obj_header_write(uint8_t *dst, const kvl__obj_id *id,
                           const uint64_t *layer_sums)
{
	size_t size = kvl__obj_header_size(id->n_layers);
	size_t body = header_body(id->n_layers);
	memset(dst, 0, size);
	memcpy(dst, obj_magic, 4);
	dst[4] = (uint8_t)KVL__OBJ_VERSION;
	dst[5] = (uint8_t)(KVL__OBJ_VERSION >> 8);
	dst[6] = layer_sums ? 0 : KVL__OBJ_UNSUMMED;
	kvl__put_u32le(dst + 8, id->n_layers);
	kvl__put_u32le(dst + 12, (uint32_t)size);
	memcpy(dst + 16, id->fp, KVL__FP_BYTES);
	memcpy(dst + 32, id->page->bytes, KVL_HASH_BYTES);
	kvl__put_u64le(dst + 64, id->payload_len);
	for (uint32_t i = 0; layer_sums && i < id->n_layers; i++)
		kvl__put_u64le(dst + 72 + 8 * (size_t)i, layer_sums[i]);
	kvl__put_u64le(dst + body, kvl__checksum(dst, body, KVL__CHECKSUM_SEED));
}

static int zeros(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

static unsigned header_flags(const uint8_t *hdr)
{
	return (unsigned)(hdr[6] | hdr[7] << 8);
}

int kvl__obj_header_check(const uint8_t *src, size_t len,
                          const kvl__obj_id *id, const char **why)
{
	size_t size = kvl__obj_header_size(id->n_layers);
	size_t body = header_body(id->n_layers);
	const char *bad = NULL;
	if (len < size)
		bad = "header truncated";
	else if (memcmp(src, obj_magic, 4) != 0)
		bad = "bad magic";
	else if ((src[4] | src[5] << 8) != KVL__OBJ_VERSION)
		bad = "unknown format version";
	else if (header_flags(src) & ~KVL__OBJ_UNSUMMED)
		bad = "unknown flags";
	else if (kvl__get_u64le(src + body) !=
	         kvl__checksum(src, body, KVL__CHECKSUM_SEED))
		bad = "header checksum mismatch";
	else if (!zeros(src + body + 8, size - body - 8))
		bad = "header padding is not zero";
	else if ((header_flags(src) & KVL__OBJ_UNSUMMED) &&
	         !zeros(src + 72, 8 * (size_t)id->n_layers))
		bad = "unsummed header carries layer sums";
	else if (kvl__get_u32le(src + 8) != id->n_layers ||
	         kvl__get_u32le(src + 12) != size)
		bad = "layer count differs from the layout";
	else if (memcmp(src + 16, id->fp, KVL__FP_BYTES) != 0)
		bad = "layout fingerprint differs";
	else if (memcmp(src + 32, id->page->bytes, KVL_HASH_BYTES) != 0)
		bad = "page hash differs";
	else if (kvl__get_u64le(src + 64) != id->payload_len)
		bad = "payload length differs";
	if (!bad)
		return 0;
	if (why)
		*why = bad;
	return KVL_ECORRUPT;
}

int kvl__obj_layer_ok(const uint8_t *hdr, uint32_t i, uint64_t actual)
{
	if (header_flags(hdr) & KVL__OBJ_UNSUMMED)
		return KVL_ECORRUPT;
	return kvl__get_u64le(hdr + 72 + 8 * (size_t)i) == actual
	               ? 0
	               : KVL_ECORRUPT;
}

/* ------------------------------------------------------------ read plans */

kvl__read kvl__read_plan(const kvl__pool *p, const kvl__layer *ly, int whole)
{
	uint32_t i = ly ? (uint32_t)(ly - p->layers) : 0;
	kvl__read rd = {.first = i, .end = i + 1, .header = i == 0};
	if (!ly || whole)
		rd.end = i == 0 ? p->n_layers : i; /* later layers: none */
	if (rd.end > rd.first) {
		const kvl__layer *last = &p->layers[rd.end - 1];
		rd.offset = p->layers[rd.first].offset;
		rd.span = last->offset + last->len - rd.offset;
	}
	return rd;
}

static size_t header_range(const kvl__pool *p, const kvl__read *rd,
                           uint8_t *hdr, kvl_range *out)
{
	if (!rd->header || !hdr)
		return 0;
	*out = (kvl_range){.offset = 0, .addr = hdr, .len = p->header_size};
	return 1;
}

size_t kvl__read_into_slot(const kvl__pool *p, const kvl__read *rd,
                           uint8_t *hdr, size_t slot, kvl_range *out)
{
	size_t n = header_range(p, rd, hdr, out);
	for (uint32_t i = rd->first; i < rd->end; i++) {
		const kvl__layer *ly = &p->layers[i];
		uint64_t off = ly->offset;
		for (uint32_t k = 0; k < p->n_comps; k++) {
			const kvl_buffer *b = &ly->bufs[k]->b;
			out[n++] = (kvl_range){.offset = off,
			                       .addr = kvl__slot_at(b, slot),
			                       .len = b->page_bytes};
			off += b->page_bytes;
		}
	}
	return n;
}

size_t kvl__read_into_span(const kvl__pool *p, const kvl__read *rd,
                           uint8_t *hdr, void *span, kvl_range *out)
{
	size_t n = header_range(p, rd, hdr, out);
	if (rd->end > rd->first)
		out[n++] = (kvl_range){.offset = rd->offset, .addr = span,
		                       .len = rd->span};
	return n;
}

int kvl__read_check(const kvl__pool *p, const kvl_hash *page,
                    const kvl__read *rd, int result, const uint8_t *hdr,
                    const uint8_t *bytes, size_t slot, int verify,
                    const char **why)
{
	const char *bad = NULL;
	int rc = result;
	if (rc == KVL_ERANGE) {
		rc = KVL_ECORRUPT;
		bad = "object shorter than the layout's";
	} else if (rc < 0) {
		bad = "the store could not read it";
	}
	if (!rc && rd->header) {
		kvl__obj_id id = kvl__page_id(p, page);
		rc = kvl__obj_header_check(hdr, p->header_size, &id, &bad);
	}
	for (uint32_t i = rd->first; !rc && verify && i < rd->end; i++) {
		const kvl__layer *ly = &p->layers[i];
		uint64_t sum = bytes ? layer_sum_bytes(ly, bytes + (ly->offset -
		                                                     rd->offset))
		                     : kvl__layer_sum_slot(p, ly, slot);
		if ((rc = kvl__obj_layer_ok(hdr, i, sum)))
			bad = "layer checksum mismatch (or none)";
	}
	if (rc && why)
		*why = bad;
	return rc;
}

/* ------------------------------------------------------------ write plan */

void kvl__write_header(const kvl__pool *p, const kvl_hash *page, size_t slot,
                       int summed, uint8_t *hdr)
{
	uint64_t sums[p->n_layers];
	for (uint32_t i = 0; summed && i < p->n_layers; i++)
		sums[i] = kvl__layer_sum_slot(p, &p->layers[i], slot);
	kvl__obj_id id = kvl__page_id(p, page);
	kvl__obj_header_write(hdr, &id, summed ? sums : NULL);
}

void kvl__write_seal(const kvl__pool *p, const kvl_hash *page, int summed,
                     uint8_t *obj)
{
	uint64_t sums[p->n_layers];
	for (uint32_t i = 0; summed && i < p->n_layers; i++)
		sums[i] = layer_sum_bytes(&p->layers[i],
		                          obj + p->layers[i].offset);
	kvl__obj_id id = kvl__page_id(p, page);
	kvl__obj_header_write(obj, &id, summed ? sums : NULL);
}

size_t kvl__write_pieces(const kvl__pool *p, const uint8_t *hdr, size_t slot,
                         kvl_iov *out)
{
	size_t n = 0;
	if (hdr)
		out[n++] = (kvl_iov){.addr = (void *)hdr, .len = p->header_size};
	for (uint32_t i = 0; i < p->max_pieces; i++) {
		const kvl_buffer *b = &p->ordered[i]->b;
		out[n++] = (kvl_iov){.addr = kvl__slot_at(b, slot),
		                     .len = b->page_bytes};
	}
	return n;
}
