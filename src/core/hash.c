/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hash.c — page hashes: the chained SHA-256 names of token pages.
 *
 * A prompt is cut into whole pages of page_size tokens. Page i is named by
 *   h_i = SHA-256(h_{i-1} ‖ tokens of page i as u32 little-endian)
 * with h_{-1} absent unless the caller gives a prior (a namespace seed):
 * SGLang's page hashes, byte for byte. With EAGLE speculative decoding
 * SGLang pages bigrams instead, the overlapping pairs (t_j, t_j+1), each
 * two u32 words. A page that holds a token id above 2^32-1 (which SGLang
 * refuses) is hashed in kvlink's own form instead,
 *   SHA-256(h_{i-1} ‖ 0xFF ‖ the page's words as u64 little-endian).
 * Because each hash covers the one before it, equal hashes mean equal
 * pages and equal prefixes.
 *
 * Invariants: the byte encoding never depends on the host's byte order or
 * word size; every digest goes through libcrypto's EVP interface (the
 * SHA256_* calls are deprecated in OpenSSL 3). One EVP_MD_CTX serves a whole
 * call and is re-initialized per page; the bytes of a page are staged in a
 * fixed stack buffer, so the page count never drives our own allocations.
 * (OpenSSL 3.0 itself re-creates its provider context on every
 * EVP_DigestInit, i.e. once per page, inside libcrypto.)
 *
 * No state outside the call: every function here is thread-safe.
 */
#include <openssl/evp.h>

#include "core/internal.h"

/* Bytes staged before each EVP_DigestUpdate: a page of up to 1016 u32
 * tokens (507 u64) after a prior is a single update. */
#define KVL__HASH_STAGE 4096

static const char kvl__ns_tag[] = "kvlink-namespace-v1";
static const char kvl__sglang_ns_tag[] = "sglang-cache-namespace-v1";

/* The digest and the context that one call reuses for all its hashes. */
typedef struct kvl__sha {
	EVP_MD *md;
	EVP_MD_CTX *ctx;
} kvl__sha;

static int sha_open(kvl__sha *s)
{
	s->md = EVP_MD_fetch(NULL, "SHA256", NULL);
	s->ctx = EVP_MD_CTX_new();
	return s->md && s->ctx ? KVL_OK : KVL_ENOMEM;
}

/* Starts a new digest. Naming the fetched digest again (rather than NULL)
 * spares OpenSSL 3.0 a second allocation per init. */
static int sha_init(kvl__sha *s)
{
	return EVP_DigestInit_ex2(s->ctx, s->md, NULL) ? KVL_OK : KVL_ENOMEM;
}

static void sha_close(kvl__sha *s)
{
	EVP_MD_CTX_free(s->ctx);
	EVP_MD_free(s->md);
}

static int sha_update(kvl__sha *s, const void *p, size_t n)
{
	return EVP_DigestUpdate(s->ctx, p, n) ? KVL_OK : KVL_ENOMEM;
}

static int sha_final(kvl__sha *s, kvl_hash *out)
{
	unsigned int len = 0;
	if (!EVP_DigestFinal_ex(s->ctx, out->bytes, &len) ||
	    len != KVL_HASH_BYTES)
		return KVL_ENOMEM;
	return KVL_OK;
}

/* Hashes one page after `prev` (NULL: none) into `out`: n > 0 tokens, or
 * with `bigram` the n pairs of the n + 1 tokens at tok. `prev` is consumed
 * before `out` is written, so they may be the same. */
static int hash_page(kvl__sha *s, const kvl_hash *prev, const uint64_t *tok,
                     size_t n, int bigram, kvl_hash *out)
{
	uint8_t stage[KVL__HASH_STAGE];
	size_t len = 0;
	uint64_t high = 0;
	int rc;

	/* Branch-free so that the compiler can vectorize the scan. */
	for (size_t i = 0; i < n + (bigram ? 1 : 0); i++)
		high |= tok[i] >> 32;

	if ((rc = sha_init(s)))
		return rc;
	if (prev) {
		memcpy(stage, prev->bytes, KVL_HASH_BYTES);
		len = KVL_HASH_BYTES;
	}
	if (high)
		stage[len++] = 0xFF;
	size_t width = high ? 8 : 4;
	/* Word k of the page is tok[k], or for bigrams tok[(k + 1) / 2]:
	 * pair j is words 2j and 2j + 1, tokens j and j + 1. */
	size_t words = bigram ? 2 * n : n;
	for (size_t k = 0; k < words;) {
		/* Fill the stage with as many whole words as fit, in loops
		 * simple enough for the compiler to vectorize. */
		size_t m = (sizeof stage - len) / width;
		if (m > words - k)
			m = words - k;
		uint8_t *dst = stage + len;
		if (bigram && high)
			for (size_t j = 0; j < m; j++)
				kvl__put_u64le(dst + 8 * j, tok[(k + j + 1) / 2]);
		else if (bigram)
			for (size_t j = 0; j < m; j++)
				kvl__put_u32le(dst + 4 * j,
				               (uint32_t)tok[(k + j + 1) / 2]);
		else if (high)
			for (size_t j = 0; j < m; j++)
				kvl__put_u64le(dst + 8 * j, tok[k + j]);
		else
			for (size_t j = 0; j < m; j++)
				kvl__put_u32le(dst + 4 * j, (uint32_t)tok[k + j]);
		len += m * width;
		k += m;
		if (k < words) {
			if ((rc = sha_update(s, stage, len)))
				return rc;
			len = 0;
		}
	}
	if ((rc = sha_update(s, stage, len)))
		return rc;
	return sha_final(s, out);
}

/* n_pages pages of page_size tokens (or bigrams) from `tokens`, chained
 * after `prior`. */
static int hash_chain(const uint64_t *tokens, size_t n_pages,
                      size_t page_size, int bigram, const kvl_hash *prior,
                      kvl_hash *out, size_t *n_out)
{
	if (n_pages == 0) {
		*n_out = 0;
		return KVL_OK;
	}
	kvl__sha s;
	int rc = sha_open(&s);
	const kvl_hash *prev = prior;
	for (size_t i = 0; rc == KVL_OK && i < n_pages; i++) {
		rc = hash_page(&s, prev, tokens + i * page_size, page_size,
		               bigram, &out[i]);
		prev = &out[i];
	}
	sha_close(&s);
	if (rc == KVL_OK)
		*n_out = n_pages;
	return rc;
}

int kvl_hash_pages(const uint64_t *tokens, size_t n_tokens, size_t page_size,
                   const kvl_hash *prior, kvl_hash *out, size_t out_cap,
                   size_t *n_out)
{
	if (page_size == 0 || !out || !n_out || (!tokens && n_tokens > 0))
		return KVL_EINVAL;
	size_t n_pages = n_tokens / page_size;
	if (out_cap < n_pages)
		return KVL_ERANGE;
	return hash_chain(tokens, n_pages, page_size, 0, prior, out, n_out);
}

int kvl_hash_bigram_pages(const uint64_t *tokens, size_t n_tokens,
                          size_t page_size, const kvl_hash *prior,
                          kvl_hash *out, size_t out_cap, size_t *n_out)
{
	if (page_size == 0 || !out || !n_out || (!tokens && n_tokens > 0))
		return KVL_EINVAL;
	size_t n_pages = n_tokens > 1 ? (n_tokens - 1) / page_size : 0;
	if (out_cap < n_pages)
		return KVL_ERANGE;
	return hash_chain(tokens, n_pages, page_size, 1, prior, out, n_out);
}

/* A namespace seed's digest: opened, started with its tag; seed_end
 * finishes it (when rc is KVL_OK), closes it, and writes *out only when
 * every step succeeded. */
static int seed_begin(kvl__sha *s, const char *tag, size_t len)
{
	int rc = sha_open(s);
	if (rc == KVL_OK)
		rc = sha_init(s);
	return rc == KVL_OK ? sha_update(s, tag, len) : rc;
}

static int seed_end(kvl__sha *s, int rc, kvl_hash *out)
{
	kvl_hash seed;
	if (rc == KVL_OK)
		rc = sha_final(s, &seed);
	sha_close(s);
	if (rc == KVL_OK)
		*out = seed;
	return rc;
}

/* Feeds one part of SGLang's namespace: 0x00 when absent, else 0x01, its
 * byte length as u64 LE and its bytes. */
static int sglang_ns_part(kvl__sha *s, const char *part)
{
	uint8_t head[9] = {0};
	if (!part)
		return sha_update(s, head, 1);
	size_t len = strlen(part);
	head[0] = 1;
	kvl__put_u64le(head + 1, (uint64_t)len);
	int rc = sha_update(s, head, sizeof head);
	return rc ? rc : sha_update(s, part, len);
}

int kvl_sglang_namespace_seed(const char *extra_key, const char *cache_salt,
                              kvl_hash *out, int *seeded_out)
{
	if (!out || !seeded_out)
		return KVL_EINVAL;
	*seeded_out = 0;
	if (!extra_key && !cache_salt) /* no namespace: the bare chain */
		return KVL_OK;
	kvl__sha s;
	int rc = seed_begin(&s, kvl__sglang_ns_tag,
	                    sizeof kvl__sglang_ns_tag - 1);
	if (rc == KVL_OK)
		rc = sglang_ns_part(&s, extra_key);
	if (rc == KVL_OK)
		rc = sglang_ns_part(&s, cache_salt);
	rc = seed_end(&s, rc, out);
	*seeded_out = rc == KVL_OK;
	return rc;
}

int kvl_namespace_seed(const char *const *salts, size_t n_salts, kvl_hash *out)
{
	if (!salts || n_salts == 0 || !out)
		return KVL_EINVAL;
	for (size_t i = 0; i < n_salts; i++)
		if (!salts[i])
			return KVL_EINVAL;

	kvl__sha s;
	int rc = seed_begin(&s, kvl__ns_tag, sizeof kvl__ns_tag - 1);
	for (size_t i = 0; rc == KVL_OK && i < n_salts; i++) {
		size_t len = strlen(salts[i]);
		uint8_t len_le[8];
		kvl__put_u64le(len_le, (uint64_t)len);
		rc = sha_update(&s, len_le, sizeof len_le);
		if (rc == KVL_OK)
			rc = sha_update(&s, salts[i], len);
	}
	return seed_end(&s, rc, out);
}

int kvl_hash_to_hex(const kvl_hash *h, char *hex, size_t len)
{
	if (!h || !hex)
		return KVL_EINVAL;
	if (len < KVL_HASH_HEX_LEN + 1)
		return KVL_ERANGE;
	kvl__hex(h->bytes, KVL_HASH_BYTES, hex);
	hex[KVL_HASH_HEX_LEN] = '\0';
	return KVL_OK;
}

/* The value of hex digit c (either case), or -1. */
static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int kvl_hash_from_hex(const char *hex, kvl_hash *h)
{
	if (!hex || !h)
		return KVL_EINVAL;
	kvl_hash v;
	for (size_t i = 0; i < KVL_HASH_BYTES; i++) {
		/* A NUL fails hex_digit, so a short string stops here. */
		int hi = hex_digit(hex[2 * i]);
		int lo = hi < 0 ? -1 : hex_digit(hex[2 * i + 1]);
		if (lo < 0)
			return KVL_EPARSE;
		v.bytes[i] = (uint8_t)(hi << 4 | lo);
	}
	if (hex[KVL_HASH_HEX_LEN] != '\0')
		return KVL_EPARSE;
	*h = v;
	return KVL_OK;
}
