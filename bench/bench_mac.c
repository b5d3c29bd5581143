/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_mac.c — OpenSSL's MACs that could seal kvlink's objects, measured
 * on this machine against the unkeyed checksum in the same run, then the
 * page codec's read check with the one chosen (codec_bench.h).
 *
 * Candidates, each through EVP_MAC as kvlink would call it, one message
 * per layer: HMAC-SHA-256, BLAKE2b-MAC, BLAKE2s-MAC, KMAC128, KMAC256
 * (one key for every message), Poly1305 and GMAC (AES-256-GCM): both
 * one-time, so each message gets a fresh key (and GMAC a fresh IV), as
 * they must when pages are rewritten under the same hash. The baseline is
 * the codec's unkeyed field, XXH3-128. Figures are GB/s on one core, best
 * of three runs of about --seconds / 3 each, for each --sizes layer size.
 *
 * Usage: bench_mac [--seconds S] [--sizes 16K,64K,…] [--json]. Not a test.
 */
#define _POSIX_C_SOURCE 200809L
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "bench_args.h"
#include "codec_bench.h"

typedef struct cand {
	const char *label;  /* as printed */
	const char *mac;    /* EVP_MAC name; NULL: the unkeyed baseline */
	const char *digest; /* HMAC's */
	const char *cipher; /* GMAC's */
	size_t key_len;
	int rekey;          /* a fresh key (and IV) for every message */
} cand;

static const cand cands[] = {
	{"XXH3-128 (unkeyed)", NULL, NULL, NULL, 0, 0},
	{"HMAC-SHA-256", "HMAC", "SHA256", NULL, 32, 0},
	{"BLAKE2b-MAC", "BLAKE2BMAC", NULL, NULL, 32, 0},
	{"BLAKE2s-MAC", "BLAKE2SMAC", NULL, NULL, 32, 0},
	{"KMAC128", "KMAC128", NULL, NULL, 32, 0},
	{"KMAC256", "KMAC256", NULL, NULL, 32, 0},
	{"Poly1305", "POLY1305", NULL, NULL, 32, 1},
	{"GMAC (AES-256)", "GMAC", NULL, "AES-256-GCM", 32, 1},
};
#define N_CANDS (sizeof cands / sizeof cands[0])

/* GB/s of candidate c over messages of len bytes; 0 when OpenSSL lacks
 * it. */
static double run_cand(const cand *c, const uint8_t *msg, size_t len,
                       double seconds)
{
	uint8_t key[32] = {1}, iv[12] = {2}, tag[64];
	double best = 0;
	EVP_MAC *m = c->mac ? EVP_MAC_fetch(NULL, c->mac, NULL) : NULL;
	EVP_MAC_CTX *ctx = m ? EVP_MAC_CTX_new(m) : NULL;
	if (c->mac && !ctx)
		goto out;
	if (ctx) {
		OSSL_PARAM prm[2] = {OSSL_PARAM_construct_end(),
		                     OSSL_PARAM_construct_end()};
		if (c->digest)
			prm[0] = OSSL_PARAM_construct_utf8_string(
				OSSL_MAC_PARAM_DIGEST, (char *)c->digest, 0);
		if (c->cipher)
			prm[0] = OSSL_PARAM_construct_utf8_string(
				OSSL_MAC_PARAM_CIPHER, (char *)c->cipher, 0);
		if (!EVP_MAC_CTX_set_params(ctx, prm))
			goto out;
	}
	OSSL_PARAM ivp[] = {
		OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, iv,
		                                  sizeof iv),
		OSSL_PARAM_construct_end()};
	for (int run = 0; run < 3; run++) {
		size_t n = 0;
		double t0 = codec_bench_now(), t;
		do {
			for (int j = 0; j < 8; j++, n++) {
				if (!ctx) {
					kvl__checksum(msg, len, n, tag);
					continue;
				}
				if (c->rekey || n == 0) {
					key[0] = (uint8_t)n;
					iv[0] = (uint8_t)n;
					if (!EVP_MAC_init(ctx, key, c->key_len,
					                  c->cipher ? ivp : NULL))
						goto out;
				} else if (!EVP_MAC_init(ctx, NULL, 0, NULL)) {
					goto out;
				}
				size_t got;
				if (!EVP_MAC_update(ctx, msg, len) ||
				    !EVP_MAC_final(ctx, tag, &got, sizeof tag))
					goto out;
			}
			t = codec_bench_now() - t0;
		} while (t < seconds / 3);
		double gbs = (double)len * (double)n / t / 1e9;
		if (gbs > best)
			best = gbs;
	}
out:
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(m);
	return best;
}

int main(int argc, char **argv)
{
	double seconds = 0.6;
	int json = 0;
	size_t sizes[8] = {16 << 10, 64 << 10, 256 << 10, 1 << 20};
	int n_sizes = 4;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
			seconds = atof(argv[++i]);
		} else if (!strcmp(argv[i], "--json")) {
			json = 1;
		} else if (!strcmp(argv[i], "--sizes") && i + 1 < argc &&
		           (n_sizes = bench_sizes(argv[++i], sizes, 8)) >= 0) {
			int k = 0; /* below 64 bytes there is nothing to time */
			for (int j = 0; j < n_sizes; j++)
				if (sizes[j] >= 64)
					sizes[k++] = sizes[j];
			n_sizes = k;
		} else {
			fprintf(stderr, "usage: bench_mac [--seconds S] "
			                "[--sizes 16K,64K,…] [--json]\n");
			return 2;
		}
	}
	size_t max = 0;
	for (int i = 0; i < n_sizes; i++)
		if (sizes[i] > max)
			max = sizes[i];
	uint8_t *msg = malloc(max);
	if (!msg)
		return 1;
	for (size_t i = 0; i < max; i++)
		msg[i] = (uint8_t)(i * 131 + 7);

	if (!json) {
		printf("bench_mac: GB/s on one core, one message per layer, "
		       "best of 3\n%-20s", "layer bytes");
		for (int i = 0; i < n_sizes; i++)
			printf(" %8zuK", sizes[i] >> 10);
		printf("\n");
	}
	for (size_t c = 0; c < N_CANDS; c++) {
		if (!json)
			printf("%-20s", cands[c].label);
		for (int i = 0; i < n_sizes; i++) {
			double g = run_cand(&cands[c], msg, sizes[i], seconds);
			if (json)
				printf("{\"mac\":\"%s\",\"layer_bytes\":%zu,"
				       "\"gbs\":%.3f}\n",
				       cands[c].label, sizes[i], g);
			else
				printf(" %9.2f", g);
			fflush(stdout);
		}
		if (!json)
			printf("\n");
	}
	/* The codec's own check: header and every layer of a 32-layer
	 * object, per-tag key derivation included. */
	if (!json)
		printf("\nkvl__read_check of a 32-layer object, GB/s of payload "
		       "(keyed: Poly1305, an AES-derived key per tag)\n"
		       "%-20s %9s %9s %7s\n",
		       "layer bytes", "unkeyed", "keyed", "ratio");
	for (int i = 0; i < n_sizes; i++) {
		codec_bench_result r = codec_bench_verify(sizes[i], 32, seconds);
		if (json)
			printf("{\"check\":\"kvl__read_check\",\"layer_bytes\":"
			       "%zu,\"unkeyed_gbs\":%.3f,\"keyed_gbs\":%.3f,"
			       "\"ratio\":%.3f}\n",
			       sizes[i], r.unkeyed_gbs, r.keyed_gbs,
			       r.unkeyed_gbs ? r.keyed_gbs / r.unkeyed_gbs : 0);
		else
			printf("%17zuKiB %9.2f %9.2f %7.2f\n", sizes[i] >> 10,
			       r.unkeyed_gbs, r.keyed_gbs,
			       r.unkeyed_gbs ? r.keyed_gbs / r.unkeyed_gbs : 0);
		fflush(stdout);
	}
	free(msg);
	return 0;
}
