/*
 * object.c — object headers and layer checksums.
 *
 * A store object is a header (format in object.h) followed by the payload.
 * The header names exactly which page of which pool layout the bytes belong
 * to, so an object written by another layout, model or tenant, a truncated
 * object, or one whose header was damaged, never passes as valid. Layer
 * checksums let a reader verify each layer as it arrives, before the whole
 * object is read.
 */
#include "core/object.h"
#include "core/layout.h"

static const uint8_t obj_magic[4] = {'K', 'V', 'L', 'O'};

size_t kvl__obj_header_size(uint32_t n_layers)
{
	size_t raw = 72 + 8 * (size_t)n_layers + 8;
	return kvl__round64(raw);
}

static inline uint64_t rotl64(uint64_t x, int r)
{
	return (x << r) | (x >> (64 - r));
}

#define CK_P1 0x9e3779b185ebca87ull
#define CK_P2 0xc2b2ae3d27d4eb4full
#define CK_LANES 8

/* A little-endian 64-bit word, so every host computes the same sums. */
static inline uint64_t load64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	return v;
}

/* Eight independent multiply-rotate lanes over 64-byte blocks keep the
 * multiplier busy, so the sum runs near memory bandwidth. */
uint64_t kvl__checksum(const void *data, size_t len, uint64_t seed)
{
	const uint8_t *p = data;
	uint64_t v[CK_LANES];
	for (int i = 0; i < CK_LANES; i++)
		v[i] = seed + (uint64_t)(i + 1) * CK_P1;
	size_t n = len;
	while (n >= 8 * CK_LANES) {
		for (int i = 0; i < CK_LANES; i++) {
			v[i] = rotl64(v[i] + load64(p + 8 * i) * CK_P2, 31) *
			       CK_P1;
		}
		p += 8 * CK_LANES;
		n -= 8 * CK_LANES;
	}
	uint64_t h = (uint64_t)len * CK_P2;
	for (int i = 0; i < CK_LANES; i++)
		h = rotl64(h ^ v[i], 23 + i) * CK_P1;
	while (n >= 8) {
		h = rotl64(h ^ (load64(p) * CK_P2), 27) * CK_P1;
		p += 8;
		n -= 8;
	}
	while (n > 0) {
		h = rotl64(h ^ ((uint64_t)*p * CK_P1), 11) * CK_P2;
		p++;
		n--;
	}
	h ^= h >> 33;
	h *= CK_P2;
	h ^= h >> 29;
	h *= CK_P1;
	h ^= h >> 32;
	return h;
}

void kvl__obj_header_write(uint8_t *dst, const kvl__obj_id *id,
                           const uint64_t *layer_sums)
{
	size_t size = kvl__obj_header_size(id->n_layers);
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
	size_t body = 72 + 8 * (size_t)id->n_layers;
	kvl__put_u64le(dst + body, kvl__checksum(dst, body, KVL__CHECKSUM_SEED));
}

static int zeros(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

int kvl__obj_header_check(const uint8_t *src, size_t len,
                          const kvl__obj_id *id, const char **why)
{
	size_t size = kvl__obj_header_size(id->n_layers);
	size_t body = 72 + 8 * (size_t)id->n_layers;
	const char *bad = NULL;
	if (len < size)
		bad = "header truncated";
	else if (memcmp(src, obj_magic, 4) != 0)
		bad = "bad magic";
	else if ((src[4] | src[5] << 8) != KVL__OBJ_VERSION)
		bad = "unknown format version";
	else if ((src[6] | src[7] << 8) & ~KVL__OBJ_UNSUMMED)
		bad = "unknown flags";
	else if (kvl__get_u64le(src + body) !=
	         kvl__checksum(src, body, KVL__CHECKSUM_SEED))
		bad = "header checksum mismatch";
	else if (!zeros(src + body + 8, size - body - 8))
		bad = "header padding is not zero";
	else if (((src[6] | src[7] << 8) & KVL__OBJ_UNSUMMED) &&
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
