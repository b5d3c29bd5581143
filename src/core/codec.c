/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec.c — the page codec: object headers, layer integrity fields (XXH3,
 * or keyed MACs from core/mac.h), read and write plans, and the one read
 * check (formats in codec.h).
 *
 * The header names exactly which page of which pool layout the bytes belong
 * to, so an object written by another layout, model or tenant, a truncated
 * object, or one whose header was damaged, never passes as valid. Layer
 * fields let a reader verify each layer as it arrives, before the whole
 * object is read. With a store secret the fields are MACs, so whoever can
 * write to the store but does not hold the secret cannot forge one: a
 * layer's tag is bound to its index and to the header's identity and
 * random nonce, and the header's own tag binds those to the layer tags. XXH3 comes from libxxhash; where the library carries its
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

#define HDR_FIXED 88 /* bytes before the layer fields */

/* Bytes of the covered part of a header (before its own field). */
static size_t header_body(uint32_t n_layers)
{
	return HDR_FIXED + KVL__OBJ_FIELD * (size_t)n_layers;
}

size_t kvl__obj_header_size(uint32_t n_layers)
{
	return kvl__round64(header_body(n_layers) + KVL__OBJ_FIELD);
}

static unsigned header_flags(const uint8_t *hdr)
{
	return (unsigned)(hdr[6] | hdr[7] << 8);
}

/* ------------------------------------------------------------- checksums */

static void put_xxh128(uint8_t *out, XXH128_hash_t h)
{
	kvl__put_u64le(out, h.low64);
	kvl__put_u64le(out + 8, h.high64);
}

void kvl__checksum(const void *data, size_t len, uint64_t seed, uint8_t *out)
{
	put_xxh128(out, XXH3_128bits_withSeed(data, len, seed));
}

/* The integrity field of `parts` under header hdr at index i: XXH3-128, or
 * the keyed tag. */
static int field_of(const uint8_t *hdr, const kvl__mac *key, uint32_t i,
                    const kvl_iov *parts, size_t n, uint8_t *out)
{
	if (header_flags(hdr) & KVL__OBJ_KEYED) {
		kvl__mac_stream st;
		if (!key || kvl__mac_begin(key, i, hdr + 72, &st)) {
			memset(out, 0, KVL__OBJ_FIELD);
			return KVL_ECORRUPT;
		}
		for (size_t k = 0; k < n; k++)
			kvl__mac_update(&st, parts[k].addr, parts[k].len);
		return kvl__mac_end(&st, out) ? KVL_ECORRUPT : 0;
	}
	if (n == 1) {
		kvl__checksum(parts[0].addr, parts[0].len, KVL__CHECKSUM_SEED,
		              out);
		return 0;
	}
	/* A state on the stack needs XXH3_INITSTATE before a seeded reset:
	 * libxxhash 0.8.1 skips deriving the secret when the garbage seed
	 * field already equals the seed (wrong sums, seen under ASan). */
	XXH3_state_t st;
	XXH3_INITSTATE(&st);
	XXH3_128bits_reset_withSeed(&st, KVL__CHECKSUM_SEED);
	for (size_t k = 0; k < n; k++)
		XXH3_128bits_update(&st, parts[k].addr, parts[k].len);
	put_xxh128(out, XXH3_128bits_digest(&st));
	return 0;
}

int kvl__layer_field_slot(const kvl__pool *p, const kvl__layer *ly,
                          size_t slot, const uint8_t *hdr,
                          const kvl__mac *key, uint8_t *out)
{
	kvl_iov parts[p->n_comps];
	for (uint32_t k = 0; k < p->n_comps; k++) {
		const kvl_buffer *b = &ly->bufs[k]->b;
		parts[k] = (kvl_iov){.addr = kvl__slot_at(b, slot),
		                     .len = b->page_bytes};
	}
	return field_of(hdr, key, (uint32_t)(ly - p->layers), parts,
	                p->n_comps, out);
}

/* The field of layer `ly` as contiguous bytes at `at`. */
static int layer_field_bytes(const kvl__pool *p, const kvl__layer *ly,
                             const uint8_t *hdr, const kvl__mac *key,
                             const uint8_t *at, uint8_t *out)
{
	kvl_iov part = {.addr = (void *)at, .len = ly->len};
	return field_of(hdr, key, (uint32_t)(ly - p->layers), &part, 1, out);
}

/* ---------------------------------------------------------------- header */

int kvl__obj_header_start(uint8_t *dst, const kvl__obj_id *id, int summed,
                          const kvl__mac *key)
{
	size_t size = kvl__obj_header_size(id->n_layers);
	memset(dst, 0, size);
	memcpy(dst, obj_magic, 4);
	dst[4] = (uint8_t)KVL__OBJ_VERSION;
	dst[5] = (uint8_t)(KVL__OBJ_VERSION >> 8);
	dst[6] = !summed ? KVL__OBJ_UNSUMMED : key ? KVL__OBJ_KEYED : 0;
	kvl__put_u32le(dst + 8, id->n_layers);
	kvl__put_u32le(dst + 12, (uint32_t)size);
	memcpy(dst + 16, id->fp, KVL__FP_BYTES);
	memcpy(dst + 32, id->page->bytes, KVL_HASH_BYTES);
	kvl__put_u64le(dst + 64, id->payload_len);
	if (summed && key && kvl__mac_nonce(dst + 72))
		return KVL_EIO;
	return 0;
}

void kvl__obj_layer_set(uint8_t *hdr, uint32_t i, const uint8_t *field)
{
	memcpy(hdr + HDR_FIXED + KVL__OBJ_FIELD * (size_t)i, field,
	       KVL__OBJ_FIELD);
}

int kvl__obj_header_seal(uint8_t *hdr, const kvl__mac *key)
{
	size_t body = header_body(kvl__get_u32le(hdr + 8));
	kvl_iov part = {.addr = hdr, .len = body};
	return field_of(hdr, key, KVL__HDR_INDEX, &part, 1, hdr + body)
	               ? KVL_EIO
	               : 0;
}

int kvl__obj_header_write(uint8_t *dst, const kvl__obj_id *id,
                          const uint8_t *fields, const kvl__mac *key)
{
	int rc = kvl__obj_header_start(dst, id, fields != NULL, key);
	for (uint32_t i = 0; !rc && fields && i < id->n_layers; i++)
		kvl__obj_layer_set(dst, i, fields + KVL__OBJ_FIELD * (size_t)i);
	return rc ? rc : kvl__obj_header_seal(dst, key);
}

/* Whether n bytes at p are all zero: the first is, and each equals the
 * next. memcmp runs in vector words, where a byte loop over an unsummed
 * header's 512 bytes of empty layer fields took half of the header check
 * that the first layer of every GPU load waits for. */
static int zeros(const uint8_t *p, size_t n)
{
	return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/* Whether the header's own field matches its body (read with `key`). */
static int header_field_ok(const uint8_t *src, size_t body,
                           const kvl__mac *key)
{
	uint8_t want[KVL__OBJ_FIELD];
	kvl_iov part = {.addr = (void *)src, .len = body};
	if (field_of(src, key, KVL__HDR_INDEX, &part, 1, want))
		return 0;
	return kvl__mac_equal(want, src + body);
}

int kvl__obj_header_check(const uint8_t *src, size_t len,
                          const kvl__obj_id *id, const kvl__mac *key,
                          const char **why)
{
	size_t size = kvl__obj_header_size(id->n_layers);
	size_t body = header_body(id->n_layers);
	unsigned flags = len >= 8 ? header_flags(src) : 0;
	const char *bad = NULL;
	if (len < size)
		bad = "header truncated";
	else if (memcmp(src, obj_magic, 4) != 0)
		bad = "bad magic";
	else if ((src[4] | src[5] << 8) != KVL__OBJ_VERSION)
		bad = "unknown format version";
	else if (flags & ~(KVL__OBJ_UNSUMMED | KVL__OBJ_KEYED) ||
	         flags == (KVL__OBJ_UNSUMMED | KVL__OBJ_KEYED))
		bad = "unknown flags";
	else if (key && !(flags & KVL__OBJ_KEYED))
		bad = "object carries no MAC and this store has a secret";
	else if (!key && (flags & KVL__OBJ_KEYED))
		bad = "object is sealed with a secret and this store has none";
	else if (kvl__get_u32le(src + 8) != id->n_layers ||
	         kvl__get_u32le(src + 12) != size)
		bad = "layer count differs from the layout";
	else if (!header_field_ok(src, body, key))
		bad = key ? "header MAC mismatch (another secret, or forged)"
		          : "header checksum mismatch";
	else if (!zeros(src + body + KVL__OBJ_FIELD,
	                size - body - KVL__OBJ_FIELD))
		bad = "header padding is not zero";
	else if ((flags & KVL__OBJ_UNSUMMED) &&
	         !zeros(src + 72, body - 72))
		bad = "unsummed header carries layer sums";
	else if (!(flags & KVL__OBJ_KEYED) && !zeros(src + 72, 16))
		bad = "unkeyed header carries a nonce";
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

int kvl__obj_layer_ok(const uint8_t *hdr, uint32_t i, const uint8_t *actual)
{
	if (header_flags(hdr) & KVL__OBJ_UNSUMMED)
		return KVL_ECORRUPT;
	const uint8_t *want = hdr + HDR_FIXED + KVL__OBJ_FIELD * (size_t)i;
	return kvl__mac_equal(want, actual) ? 0 : KVL_ECORRUPT;
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
                    const kvl__mac *key, const char **why)
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
		rc = kvl__obj_header_check(hdr, p->header_size, &id, key,
		                           &bad);
	}
	for (uint32_t i = rd->first; !rc && verify && i < rd->end; i++) {
		const kvl__layer *ly = &p->layers[i];
		uint8_t field[KVL__OBJ_FIELD];
		int e = bytes ? layer_field_bytes(p, ly, hdr, key,
		                                  bytes + (ly->offset -
		                                           rd->offset),
		                                  field)
		              : kvl__layer_field_slot(p, ly, slot, hdr, key,
		                                      field);
		if (e || (rc = kvl__obj_layer_ok(hdr, i, field))) {
			rc = KVL_ECORRUPT;
			bad = key ? "layer MAC mismatch (another secret, or "
			            "forged)"
			          : "layer checksum mismatch (or none)";
		}
	}
	if (rc && why)
		*why = bad;
	return rc;
}

/* ------------------------------------------------------------ write plan */

int kvl__write_header(const kvl__pool *p, const kvl_hash *page, size_t slot,
                      int summed, const kvl__mac *key, uint8_t *hdr)
{
	kvl__obj_id id = kvl__page_id(p, page);
	int rc = kvl__obj_header_start(hdr, &id, summed, key);
	for (uint32_t i = 0; !rc && summed && i < p->n_layers; i++) {
		uint8_t field[KVL__OBJ_FIELD];
		if (kvl__layer_field_slot(p, &p->layers[i], slot, hdr, key,
		                          field))
			rc = KVL_EIO;
		kvl__obj_layer_set(hdr, i, field);
	}
	return rc ? rc : kvl__obj_header_seal(hdr, key);
}

int kvl__write_seal(const kvl__pool *p, const kvl_hash *page, int summed,
                    const kvl__mac *key, uint8_t *obj)
{
	kvl__obj_id id = kvl__page_id(p, page);
	int rc = kvl__obj_header_start(obj, &id, summed, key);
	for (uint32_t i = 0; !rc && summed && i < p->n_layers; i++) {
		const kvl__layer *ly = &p->layers[i];
		uint8_t field[KVL__OBJ_FIELD];
		if (layer_field_bytes(p, ly, obj, key, obj + ly->offset, field))
			rc = KVL_EIO;
		kvl__obj_layer_set(obj, i, field);
	}
	return rc ? rc : kvl__obj_header_seal(obj, key);
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
