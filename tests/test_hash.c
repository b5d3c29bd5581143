/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_hash.c — page hashes, namespace seeds and hex conversion
 * (kvl_hash_pages, kvl_namespace_seed, kvl_hash_to_hex, kvl_hash_from_hex),
 * and SGLang's variants (kvl_hash_bigram_pages, kvl_sglang_namespace_seed).
 *
 * Every expected hash was computed by an independent implementation, Python's
 * hashlib (python3), with the expression in the comment above it. Those
 * expressions use these definitions:
 *
 *   import hashlib, struct
 *   H = lambda b: hashlib.sha256(b).digest()
 *   u32 = lambda *t: struct.pack('<%dI' % len(t), *t)
 *   u64 = lambda *t: struct.pack('<%dQ' % len(t), *t)
 *   def page(prev, toks):           # one page after prev (b'' for none)
 *       if any(t > 0xFFFFFFFF for t in toks):
 *           return H(prev + b'\xff' + u64(*toks))
 *       return H(prev + u32(*toks))
 *   def chain(toks, ps, prior=b''): # hex of every whole page
 *       out, prev = [], prior
 *       for i in range(len(toks) // ps):
 *           prev = page(prev, toks[i*ps:(i+1)*ps]); out.append(prev.hex())
 *       return out
 *   def seed(*salts):
 *       b = b'kvlink-namespace-v1'
 *       for s in salts:
 *           e = s.encode(); b += struct.pack('<Q', len(e)) + e
 *       return H(b).hex()
 *   def bichain(toks, ps, prior=b''): # EAGLE bigram pages
 *       out, prev = [], prior
 *       for i in range((len(toks) - 1) // ps if len(toks) > 1 else 0):
 *           w = [t for j in range(i*ps, (i+1)*ps) for t in toks[j:j+2]]
 *           prev = page(prev, w); out.append(prev.hex())
 *       return out
 *   def sgseed(extra_key, cache_salt): # SGLang's storage namespace
 *       b = b'sglang-cache-namespace-v1'
 *       for p in (extra_key, cache_salt):
 *           if p is None: b += b'\x00'
 *           else: e = p.encode(); b += b'\x01' + struct.pack('<Q', len(e)) + e
 *       return H(b).hex()
 *
 * The SGLang vectors (bigrams, seeds) were also checked against SGLang's
 * own native hash module and the 64-bit prefixes its router tests publish.
 *
 * The ENOMEM tests make libcrypto's allocator fail through
 * CRYPTO_set_mem_functions; they are skipped (with a message) if libcrypto
 * allocated before main could install it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/crypto.h>
#include <pthread.h>

#include "kvlink.h"

/* ----------------------------------------------------------------- helpers */

/* Asserts that `h` prints as `want`; cmocka shows both strings on failure. */
static void check_hex(const kvl_hash *h, const char *want)
{
	char got[KVL_HASH_HEX_LEN + 1];
	kvl_hash_to_hex(h, got, KVL_HASH_HEX_LEN + 1);
	assert_string_equal(got, want);
}

/* A hash whose every byte is `b`, to see whether outputs were touched. */
static kvl_hash filled(uint8_t b)
{
	kvl_hash h;
	memset(h.bytes, b, sizeof h.bytes);
	return h;
}

static void check_filled(const kvl_hash *h, size_t n, uint8_t b)
{
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < KVL_HASH_BYTES; j++)
			assert_int_equal(h[i].bytes[j], b);
}

/* tokens[i] = (i * 2654435761) mod 2^32, as in the Python vectors. */
static void golden_tokens(uint64_t *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		t[i] = (uint64_t)i * 2654435761u % ((uint64_t)1 << 32);
}

/* ------------------------------------------------------------------ vectors */

/* H(u32(1,2,3,4)).hex() */
#define HEX_1234 "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72"
/* chain([1,2,3,4,5,6,7,8], 4)[1] */
#define HEX_1234_5678 \
	"4ebfa8a1f3c341517621838c6e1b9aa350307e3f00b3cbd1a07ef740f54396d6"

static void test_single_page(void **state)
{
	(void)state;
	const uint64_t tok[] = {1, 2, 3, 4};
	kvl_hash out[2] = {filled(0xAB), filled(0xAB)};
	size_t n = 99;
	assert_int_equal(kvl_hash_pages(tok, 4, 4, NULL, out, 2, &n), KVL_OK);
	assert_int_equal(n, 1);
	check_hex(&out[0], HEX_1234);
	check_filled(&out[1], 1, 0xAB); /* only n_out hashes are written */
}

static void test_chained_pages(void **state)
{
	(void)state;
	const uint64_t tok[] = {1, 2, 3, 4, 5, 6, 7, 8};
	kvl_hash out[2];
	size_t n = 0;
	assert_int_equal(kvl_hash_pages(tok, 8, 4, NULL, out, 2, &n), KVL_OK);
	assert_int_equal(n, 2);
	check_hex(&out[0], HEX_1234);
	check_hex(&out[1], HEX_1234_5678);

	/* Hashing page 1 alone after page 0's hash gives the same chain. */
	kvl_hash one;
	assert_int_equal(kvl_hash_pages(tok + 4, 4, 4, &out[0], &one, 1, &n),
	                 KVL_OK);
	assert_int_equal(n, 1);
	check_hex(&one, HEX_1234_5678);

	/* A prior may alias the output it precedes. */
	kvl_hash inplace = out[0];
	assert_int_equal(kvl_hash_pages(tok + 4, 4, 4, &inplace, &inplace, 1,
	                                &n), KVL_OK);
	check_hex(&inplace, HEX_1234_5678);
}

static void test_page_size_one(void **state)
{
	(void)state;
	const uint64_t tok[] = {7, 8, 9};
	kvl_hash out[3];
	size_t n = 0;
	assert_int_equal(kvl_hash_pages(tok, 3, 1, NULL, out, 3, &n), KVL_OK);
	assert_int_equal(n, 3);
	/* chain([7,8,9], 1) */
	check_hex(&out[0], "e8613f5a5bc9f9feeda32a8e7c80b69dd4878e47b6a91723fb15eb84236b6a2b");
	check_hex(&out[1], "0c893b2cd59dcf5db48e79a347ca07eef12583df82a3859b2635ff458b5ec300");
	check_hex(&out[2], "8d49a607da81dfefbbea1d40b6a8a94407e4f2657558a565111cf3b2a3e481d0");
}

static void test_prior(void **state)
{
	(void)state;
	const uint64_t tok[] = {1, 2, 3, 4};
	kvl_hash prior, out;
	size_t n = 0;
	/* H(b'prior').hex() */
	assert_int_equal(kvl_hash_from_hex("e5bade0e979cb8cf6e53303dae696c66"
	                                   "31a5c82ce60386d7a602f85fb249fcc0",
	                                   &prior), KVL_OK);
	assert_int_equal(kvl_hash_pages(tok, 4, 4, &prior, &out, 1, &n),
	                 KVL_OK);
	assert_int_equal(n, 1);
	/* chain([1,2,3,4], 4, prior=H(b'prior'))[0] */
	check_hex(&out, "f3f01037b7d7c6b2ad570811b378ec5f6dab8e0f942ebd2b41259a2865d80516");
}

static void test_partial_page_ignored(void **state)
{
	(void)state;
	const uint64_t tok[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
	kvl_hash out[3] = {filled(0xAB), filled(0xAB), filled(0xAB)};
	size_t n = 0;
	/* out_cap is exactly the whole pages: the partial page needs none. */
	assert_int_equal(kvl_hash_pages(tok, 10, 4, NULL, out, 2, &n), KVL_OK);
	assert_int_equal(n, 2);
	check_hex(&out[0], HEX_1234);
	check_hex(&out[1], HEX_1234_5678);
	check_filled(&out[2], 1, 0xAB);

	/* Fewer tokens than a page: no page, nothing written. */
	n = 99;
	assert_int_equal(kvl_hash_pages(tok, 3, 4, NULL, out, 0, &n), KVL_OK);
	assert_int_equal(n, 0);
	/* No tokens at all, NULL tokens allowed. */
	n = 99;
	assert_int_equal(kvl_hash_pages(NULL, 0, 4, NULL, out, 0, &n), KVL_OK);
	assert_int_equal(n, 0);
	check_filled(&out[2], 1, 0xAB);
}

static void test_wide_token(void **state)
{
	(void)state;
	/* Only page 1 holds a token above 2^32-1; pages 0 and 2 stay u32. */
	const uint64_t tok[] = {1, 2, 3, 4, 5, (uint64_t)1 << 32, 7, 8,
	                        9, 10, 11, 12};
	kvl_hash out[3];
	size_t n = 0;
	assert_int_equal(kvl_hash_pages(tok, 12, 4, NULL, out, 3, &n), KVL_OK);
	assert_int_equal(n, 3);
	check_hex(&out[0], HEX_1234);
	/* H(H(u32(1,2,3,4)) + b'\xff' + u64(5,2**32,7,8)).hex() */
	check_hex(&out[1], "0cd29dd050cb8f82ce7c4266656445d203fcc706f9f386abd5e132e8cb6ce09b");
	/* chain([1,2,3,4,5,2**32,7,8,9,10,11,12], 4)[2]: u32 form again */
	check_hex(&out[2], "d1a5468d360a467c42cb463f6d39b6d5951847296bae54369fd65a9656ee9b11");
}

static void test_token_limits(void **state)
{
	(void)state;
	kvl_hash out;
	size_t n = 0;
	/* 2^32-1 still fits u32: H(u32(0xFFFFFFFF,0,1,2)).hex() */
	const uint64_t edge[] = {UINT32_MAX, 0, 1, 2};
	assert_int_equal(kvl_hash_pages(edge, 4, 4, NULL, &out, 1, &n), KVL_OK);
	check_hex(&out, "2f63719df76283c009fc71cbe1ed655f2913379dc1b6d9f4ac17930ecb0f7535");
	/* H(b'\xff' + u64(2**64-1,0,1,2)).hex() */
	const uint64_t top[] = {UINT64_MAX, 0, 1, 2};
	assert_int_equal(kvl_hash_pages(top, 4, 4, NULL, &out, 1, &n), KVL_OK);
	check_hex(&out, "d6afe4f0afbde401ba404c6c3f538aa8eac1829b8e85bf85d5fe1725c38f0c0d");
}

/* Pages of 1500 tokens span several internal staging buffers in both forms. */
static void test_long_pages(void **state)
{
	(void)state;
	uint64_t *tok = malloc(3100 * sizeof *tok);
	assert_non_null(tok);
	golden_tokens(tok, 3100);
	kvl_hash out[2];
	size_t n = 0;

	/* toks = [(i * 2654435761) % 2**32 for i in range(3100)]
	 * chain(toks, 1500) */
	assert_int_equal(kvl_hash_pages(tok, 3100, 1500, NULL, out, 2, &n),
	                 KVL_OK);
	assert_int_equal(n, 2);
	check_hex(&out[0], "80df53c0e167e969a270d8b3a595ece96acba9e9bf4698e9cb9b3254b4e4c98a");
	check_hex(&out[1], "723a52dbcae6b3946959eadb60fab49d1eec03988ad3d3f45977080d2ea84561");

	/* toks[2999] = 2**40 + 2999; chain(toks, 1500): page 1 goes u64 */
	tok[2999] = ((uint64_t)1 << 40) + 2999;
	assert_int_equal(kvl_hash_pages(tok, 3100, 1500, NULL, out, 2, &n),
	                 KVL_OK);
	check_hex(&out[0], "80df53c0e167e969a270d8b3a595ece96acba9e9bf4698e9cb9b3254b4e4c98a");
	check_hex(&out[1], "c1ab551e8b5ac8d42b8f68f9be92c38221c332cacc72d441f90b852ccfc153eb");
	free(tok);
}

/* kvl_hash_pages and kvl_hash_bigram_pages take the same arguments. */
typedef int hash_fn(const uint64_t *, size_t, size_t, const kvl_hash *,
                    kvl_hash *, size_t, size_t *);

/* The argument errors of fn over tok[0..n_tok), which makes exactly two
 * pages of page_size: KVL_EINVAL for page_size 0 and NULL arguments,
 * KVL_ERANGE for room for 1 or 0 of the 2 pages; nothing written. */
static void expect_hash_arg_errors(hash_fn *fn, const uint64_t *tok,
                                   size_t n_tok, size_t ps)
{
	kvl_hash out[2] = {filled(0xAB), filled(0xAB)};
	size_t n = 99;
	assert_int_equal(fn(tok, n_tok, 0, NULL, out, 2, &n), KVL_EINVAL);
	assert_int_equal(fn(NULL, n_tok, ps, NULL, out, 2, &n), KVL_EINVAL);
	assert_int_equal(fn(tok, n_tok, ps, NULL, NULL, 2, &n), KVL_EINVAL);
	assert_int_equal(fn(tok, n_tok, ps, NULL, out, 2, NULL), KVL_EINVAL);
	assert_int_equal(fn(tok, n_tok, ps, NULL, out, 1, &n), KVL_ERANGE);
	assert_int_equal(fn(tok, n_tok, ps, NULL, out, 0, &n), KVL_ERANGE);
	assert_int_equal(n, 99);
	check_filled(out, 2, 0xAB);
}

static void test_hash_pages_errors(void **state)
{
	(void)state;
	const uint64_t tok[] = {1, 2, 3, 4, 5, 6, 7, 8};
	expect_hash_arg_errors(kvl_hash_pages, tok, 8, 4);
	/* NULL out is invalid even when there is no whole page. */
	size_t n = 99;
	assert_int_equal(kvl_hash_pages(tok, 3, 4, NULL, NULL, 0, &n),
	                 KVL_EINVAL);
	assert_int_equal(n, 99);
}

/* ---------------------------------------------------------- namespace seed */

static void seed_hex(const char *const *salts, size_t n, char *hex)
{
	kvl_hash h;
	assert_int_equal(kvl_namespace_seed(salts, n, &h), KVL_OK);
	kvl_hash_to_hex(&h, hex, KVL_HASH_HEX_LEN + 1);
}

static void test_namespace_seed(void **state)
{
	(void)state;
	char a[65], b[65];
	const char *ta[] = {"tenant-a"}, *tb[] = {"tenant-b"};
	const char *ab[] = {"a", "b"}, *ba[] = {"b", "a"};
	const char *a_bc[] = {"a", "bc"}, *ab_c[] = {"ab", "c"};
	const char *empty[] = {""};

	/* seed('tenant-a') */
	seed_hex(ta, 1, a);
	assert_string_equal(a, "754a9fef242ac8344b71f62c54585cbe87785c5e815baf581c62340accd6123e");
	/* seed('tenant-b') */
	seed_hex(tb, 1, b);
	assert_string_equal(b, "f1d477d986011520b3a7f1fda55dd1454e2a21fbbe2a3255508540ce27c49e2e");
	assert_string_not_equal(a, b);

	/* Order matters. seed('a', 'b') and seed('b', 'a') */
	seed_hex(ab, 2, a);
	seed_hex(ba, 2, b);
	assert_string_equal(a, "9936177713dfb3abf11370b9760f83d2ff1a28454deea005f754f4eda2c691c7");
	assert_string_equal(b, "37b1a48a81197b0f41f139a6ead7b0751ac6c42d11c4fa6aa03da2b8dcd7a93c");
	assert_string_not_equal(a, b);

	/* Boundaries matter. seed('a', 'bc') and seed('ab', 'c') */
	seed_hex(a_bc, 2, a);
	seed_hex(ab_c, 2, b);
	assert_string_equal(a, "6456f524167a56b95cbebe936e4b10be651ca09eda67ea2674a73c91f9519914");
	assert_string_equal(b, "4290bf786f15c4ed35af6d4a8e8aed365db3932e3ceb71d018c61dc76d34c24e");
	assert_string_not_equal(a, b);

	/* An empty salt is a salt. seed('') */
	seed_hex(empty, 1, a);
	assert_string_equal(a, "5f5924d7f52c2842937f9c6812ac26146ba3a17f20f033b28f5685a4ac55b029");
}

static void test_namespace_seed_as_prior(void **state)
{
	(void)state;
	const char *salts[] = {"tenant-a"};
	const uint64_t tok[] = {1, 2, 3, 4};
	kvl_hash seed, out;
	size_t n = 0;
	assert_int_equal(kvl_namespace_seed(salts, 1, &seed), KVL_OK);
	assert_int_equal(kvl_hash_pages(tok, 4, 4, &seed, &out, 1, &n),
	                 KVL_OK);
	/* chain([1,2,3,4], 4, prior=bytes.fromhex(seed('tenant-a')))[0] */
	check_hex(&out, "8677eaeecea0a5dece423efb310ebf4fd2882b9b713f101cb9f09a14c86770f1");
}

static void test_namespace_seed_errors(void **state)
{
	(void)state;
	const char *ok[] = {"a"}, *with_null[] = {"a", NULL};
	kvl_hash h = filled(0xAB);
	assert_int_equal(kvl_namespace_seed(ok, 0, &h), KVL_EINVAL);
	assert_int_equal(kvl_namespace_seed(NULL, 1, &h), KVL_EINVAL);
	assert_int_equal(kvl_namespace_seed(with_null, 2, &h), KVL_EINVAL);
	assert_int_equal(kvl_namespace_seed(ok, 1, NULL), KVL_EINVAL);
	check_filled(&h, 1, 0xAB);
}

/* --------------------------------------------------------------------- hex */


/* ----------------------------------------------------- SGLang's variants */

static void check_bigram(const uint64_t *tok, size_t n_tok, size_t ps,
                         const kvl_hash *prior, const char *const *want,
                         size_t n_want)
{
	kvl_hash out[4] = {filled(0xAB), filled(0xAB), filled(0xAB),
	                   filled(0xAB)};
	size_t n = 99;
	assert_int_equal(kvl_hash_bigram_pages(tok, n_tok, ps, prior, out, 4,
	                                       &n),
	                 KVL_OK);
	assert_int_equal(n, n_want);
	for (size_t i = 0; i < n_want; i++)
		check_hex(&out[i], want[i]);
	check_filled(&out[n_want], 4 - n_want, 0xAB);
}

static void test_bigram_pages(void **state)
{
	(void)state;
	/* bichain([10, 20, 30, 40, 50], 2) */
	const uint64_t t5[] = {10, 20, 30, 40, 50};
	const char *w5[] = {
		"853648b30722d555352864b57f1953aa2508b1f3d25013f4221eb394fdfd0e13",
		"453f4cce8becb03a18ae6afca746893db8ebe101f05db3e015ce4780acef5111"};
	check_bigram(t5, 5, 2, NULL, w5, 2);
	/* bichain(list(range(1, 14)), 4): 12 pairs, 3 pages */
	uint64_t t13[13];
	for (size_t i = 0; i < 13; i++)
		t13[i] = i + 1;
	const char *w13[] = {
		"f721fe42aac11dcbfd1a17f24cc5765a0d5b6bc264d1c0b6581d775a7344c11f",
		"c35ad698917936a474f7e55f3a4855eaee20585cd0bf156b1ae3a62666ba7220",
		"ea6d4c7ad93c2c1038a99235516af7acd54fe4751cad0916b7d27abf64d6fc4e"};
	check_bigram(t13, 13, 4, NULL, w13, 3);
	/* The tail from token 4 on, after page 0, continues the chain. */
	kvl_hash p0;
	assert_int_equal(kvl_hash_from_hex(w13[0], &p0), KVL_OK);
	check_bigram(t13 + 4, 9, 4, &p0, w13 + 1, 2);
	/* 12 tokens are 11 pairs: two whole pages; 1 token, or none: none. */
	check_bigram(t13, 12, 4, NULL, w13, 2);
	check_bigram(t13, 1, 4, NULL, NULL, 0);
	check_bigram(NULL, 0, 4, NULL, NULL, 0);
	/* One pair per page hashes like the plain page of its two tokens:
	 * chain([10, 20], 2)[0] */
	check_bigram(t5, 2, 1, NULL,
	             (const char *[]){"0d9330506fd1d6da3fbc3a5b83eb6dd05f86bdad7ce710c0fae1d68955f03fb4"},
	             1);
}

static void test_bigram_long_and_wide(void **state)
{
	(void)state;
	uint64_t *tok = malloc(3100 * sizeof *tok);
	assert_non_null(tok);
	golden_tokens(tok, 3100);
	/* bichain(toks, 1500): pages far larger than the stage */
	check_bigram(tok, 3100, 1500, NULL,
	             (const char *[]){"3fb67421565eca4a4f5b7d6269dd455ae3fb1f4fc29606cc451312a51f49741f",
	                              "ccb3cff455da728395dc071e6bb8a770648c2d6444ea31dd3ebe111a70c84660"},
	             2);
	/* toks[1500] = 2**40 + 1500: the boundary token is in both pages,
	 * so both take the u64 form */
	tok[1500] = ((uint64_t)1 << 40) + 1500;
	check_bigram(tok, 3100, 1500, NULL,
	             (const char *[]){"3870433fe2f1925c64214cd856d634da411f71f35d13badcd78e270bd5cd2823",
	                              "8408afe71105d15b815faa6a58bc47a241acabf5ce08d0332ab2c22c33a4923b"},
	             2);
	free(tok);

	/* Errors: kvl_hash_pages'. 3 tokens are 2 pairs: 2 pages of 1. */
	const uint64_t t[] = {1, 2, 3};
	expect_hash_arg_errors(kvl_hash_bigram_pages, t, 3, 1);
}

static void check_sgseed(const char *extra_key, const char *cache_salt,
                         const char *want)
{
	kvl_hash h = filled(0xAB);
	int seeded = 7;
	assert_int_equal(kvl_sglang_namespace_seed(extra_key, cache_salt, &h,
	                                           &seeded),
	                 KVL_OK);
	if (!want) {
		assert_int_equal(seeded, 0);
		check_filled(&h, 1, 0xAB);
		return;
	}
	assert_int_equal(seeded, 1);
	check_hex(&h, want);
}

static void test_sglang_namespace_seed(void **state)
{
	(void)state;
	/* sgseed(extra_key, cache_salt) */
	check_sgseed(NULL, NULL, NULL);
	check_sgseed("lora-1", NULL,
	             "502757a4b3684cc558b10cfebee955436e393e760c90c2adf970429f6f25cd50");
	check_sgseed(NULL, "tenant-a",
	             "9d303df3761a7561353e2ae7459eb4ab12a08abb37951b696aa4f0c059c7caaa");
	check_sgseed("lora-1", "tenant-a",
	             "f0b3cb914ac096e548f62bd0afddd91b3d0013e436b850b1d1674f0cb60b03eb");
	/* Absent and empty differ; so do the splits of one string. */
	check_sgseed("", NULL,
	             "fd649dd130277fa0773e23e84ddfa4ec779d9df77087968a60d7cefb9050ab1d");
	check_sgseed(NULL, "",
	             "906782eeabf820a68eef4455ab98e5e86e311f658f7d7721723a97a90b81427e");
	check_sgseed("", "",
	             "bea08aaebe976c9c4f8ebade6674ba3fe15783c47020e10c4721ad211aae36e4");
	check_sgseed("a", "bc",
	             "b8080ec8e713ddb4b5469eaf5874a021a72286a24e6c55d2046f0acfb48a938b");
	check_sgseed("ab", "c",
	             "3d6b02ff0d7a0ce42a5ac4a58251ee0e63490c7de5eb46aa2eeaa3a0fdff5364");
	/* UTF-8: the byte length counts. */
	check_sgseed("\xc3\xa9lan", NULL,
	             "5d2f3ecd3e56c1b2eda7a8500bd242ba3820eb30db61a7c624e6783621a50e20");

	/* As page 0's prior: chain(u32 1..8, 4, sgseed('lora-1', 'tenant-a')) */
	kvl_hash seed, out[2];
	int seeded = 0;
	size_t n = 0;
	assert_int_equal(kvl_sglang_namespace_seed("lora-1", "tenant-a", &seed,
	                                           &seeded),
	                 KVL_OK);
	const uint64_t tok[] = {1, 2, 3, 4, 5, 6, 7, 8};
	assert_int_equal(kvl_hash_pages(tok, 8, 4, &seed, out, 2, &n), KVL_OK);
	check_hex(&out[0], "2a72504ed2593dd51c93384b5adfbdd9bda13d7170787542f3490277ff49ee69");
	check_hex(&out[1], "d3427329cb5dc53eb062f68b8e6d21355dca8df91d6b95cda845382fcae3d632");

	assert_int_equal(kvl_sglang_namespace_seed("a", NULL, NULL, &seeded),
	                 KVL_EINVAL);
	assert_int_equal(kvl_sglang_namespace_seed("a", NULL, &seed, NULL),
	                 KVL_EINVAL);
}

static void test_hex_round_trip(void **state)
{
	(void)state;
	kvl_hash h, back;
	char hex[KVL_HASH_HEX_LEN + 1];
	for (int i = 0; i < KVL_HASH_BYTES; i++)
		h.bytes[i] = (uint8_t)(i * 17 + 3);
	memset(hex, 'x', sizeof hex);
	kvl_hash_to_hex(&h, hex, KVL_HASH_HEX_LEN + 1);
	/* bytes((i * 17 + 3) % 256 for i in range(32)).hex() */
	assert_string_equal(hex, "031425364758697a8b9cadbecfe0f102"
	                         "132435465768798a9bacbdcedff00112");
	assert_int_equal(kvl_hash_from_hex(hex, &back), KVL_OK);
	assert_memory_equal(back.bytes, h.bytes, KVL_HASH_BYTES);

	/* Upper case is accepted and gives the same bytes. */
	char upper[KVL_HASH_HEX_LEN + 1];
	for (int i = 0; i <= KVL_HASH_HEX_LEN; i++)
		upper[i] = (char)(hex[i] >= 'a' && hex[i] <= 'f' ?
		                  hex[i] - 'a' + 'A' : hex[i]);
	back = filled(0);
	assert_int_equal(kvl_hash_from_hex(upper, &back), KVL_OK);
	assert_memory_equal(back.bytes, h.bytes, KVL_HASH_BYTES);
}

static void test_hex_errors(void **state)
{
	(void)state;
	const char *good =
		"cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72";
	char buf[80];
	kvl_hash h = filled(0xAB);

	/* 63 characters */
	memcpy(buf, good, 63);
	buf[63] = '\0';
	assert_int_equal(kvl_hash_from_hex(buf, &h), KVL_EPARSE);
	/* 65 characters */
	snprintf(buf, sizeof buf, "%s0", good);
	assert_int_equal(kvl_hash_from_hex(buf, &h), KVL_EPARSE);
	/* empty */
	assert_int_equal(kvl_hash_from_hex("", &h), KVL_EPARSE);
	/* a non-hex character, first and last */
	snprintf(buf, sizeof buf, "%s", good);
	buf[0] = 'g';
	assert_int_equal(kvl_hash_from_hex(buf, &h), KVL_EPARSE);
	snprintf(buf, sizeof buf, "%s", good);
	buf[63] = 'z';
	assert_int_equal(kvl_hash_from_hex(buf, &h), KVL_EPARSE);
	buf[63] = ' ';
	assert_int_equal(kvl_hash_from_hex(buf, &h), KVL_EPARSE);
	/* NULL */
	assert_int_equal(kvl_hash_from_hex(NULL, &h), KVL_EINVAL);
	assert_int_equal(kvl_hash_from_hex(good, NULL), KVL_EINVAL);
	/* A failed parse leaves the output alone. */
	check_filled(&h, 1, 0xAB);
}

/* ----------------------------------------------------------------- threads */

#define N_THREADS 4

static void *hash_many(void *arg)
{
	uint64_t *tok = arg;
	for (int round = 0; round < 50; round++) {
		kvl_hash out[2];
		size_t n = 0;
		if (kvl_hash_pages(tok, 3100, 1500, NULL, out, 2, &n) || n != 2)
			return (void *)"kvl_hash_pages failed";
		char hex[KVL_HASH_HEX_LEN + 1];
		kvl_hash_to_hex(&out[1], hex, KVL_HASH_HEX_LEN + 1);
		if (strcmp(hex, "723a52dbcae6b3946959eadb60fab49d1eec03988ad3d3f45977080d2ea84561"))
			return (void *)"wrong hash";
	}
	return NULL;
}

static void test_threads(void **state)
{
	(void)state;
	uint64_t *tok = malloc(3100 * sizeof *tok);
	assert_non_null(tok);
	golden_tokens(tok, 3100);
	pthread_t th[N_THREADS];
	for (int i = 0; i < N_THREADS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, hash_many, tok), 0);
	for (int i = 0; i < N_THREADS; i++) {
		void *err = NULL;
		assert_int_equal(pthread_join(th[i], &err), 0);
		assert_null(err);
	}
	free(tok);
}

/* ------------------------------------------------------------ out of memory */

static int mem_hooked; /* CRYPTO_set_mem_functions succeeded */
static int mem_fail;   /* fail every libcrypto allocation while set */

static void *test_malloc_fn(size_t n, const char *file, int line)
{
	(void)file;
	(void)line;
	return mem_fail ? NULL : malloc(n);
}

static void *test_realloc_fn(void *p, size_t n, const char *file, int line)
{
	(void)file;
	(void)line;
	return mem_fail ? NULL : realloc(p, n);
}

static void test_free_fn(void *p, const char *file, int line)
{
	(void)file;
	(void)line;
	free(p);
}

static void test_out_of_memory(void **state)
{
	(void)state;
	if (!mem_hooked) {
		print_message("libcrypto allocated before main: "
		              "cannot inject allocation failures\n");
		skip();
	}
	const uint64_t tok[] = {1, 2, 3, 4, 5, 6, 7, 8};
	const char *salts[] = {"a"};
	kvl_hash out[2] = {filled(0xAB), filled(0xAB)};
	size_t n = 99;

	mem_fail = 1;
	int rc_pages = kvl_hash_pages(tok, 8, 4, NULL, out, 2, &n);
	int rc_seed = kvl_namespace_seed(salts, 1, &out[1]);
	mem_fail = 0;
	assert_int_equal(rc_pages, KVL_ENOMEM);
	assert_int_equal(rc_seed, KVL_ENOMEM);
	assert_int_equal(n, 99);
	check_filled(&out[1], 1, 0xAB);

	/* And everything works again once memory is back. */
	assert_int_equal(kvl_hash_pages(tok, 8, 4, NULL, out, 2, &n), KVL_OK);
	check_hex(&out[1], HEX_1234_5678);
}

int main(void)
{
	/* Must come before anything makes libcrypto allocate. */
	mem_hooked = CRYPTO_set_mem_functions(test_malloc_fn, test_realloc_fn,
	                                      test_free_fn);

	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_single_page),
		cmocka_unit_test(test_chained_pages),
		cmocka_unit_test(test_page_size_one),
		cmocka_unit_test(test_prior),
		cmocka_unit_test(test_partial_page_ignored),
		cmocka_unit_test(test_wide_token),
		cmocka_unit_test(test_token_limits),
		cmocka_unit_test(test_long_pages),
		cmocka_unit_test(test_hash_pages_errors),
		cmocka_unit_test(test_namespace_seed),
		cmocka_unit_test(test_namespace_seed_as_prior),
		cmocka_unit_test(test_namespace_seed_errors),
		cmocka_unit_test(test_bigram_pages),
		cmocka_unit_test(test_bigram_long_and_wide),
		cmocka_unit_test(test_sglang_namespace_seed),
		cmocka_unit_test(test_hex_round_trip),
		cmocka_unit_test(test_hex_errors),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_out_of_memory),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
