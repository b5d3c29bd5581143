/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_store.c — throughput of the embedded store against memcpy.
 *
 * For each object size (16 KiB … 4 MiB) it fills a "mem:" store with a
 * working set well beyond the caches, then measures, interleaved and best of
 * a few repetitions:
 *   memcpy  single-thread memcpy of the same sizes from a contiguous arena of
 *           the same working-set size into the same destination buffers;
 *   get     kvl_store_get of batches of whole objects into those buffers;
 * and prints get/memcpy (the design target is >= 0.8). Then it measures
 * kvl_store_exists on 130-byte keys (hits in random order, hits in the
 * order they were stored as a prompt's pages would be, and misses), in
 * batches of 1024 whose key strings are hot in the cache, as the scheduler's
 * would be (target >= 10 M keys/s).
 *
 * Usage: bench_store [--json] [--mem MIB] [--bytes MIB] [--reps N]
 *                    [--keys N]
 *   --mem    working set per object size (default 256 MiB)
 *   --bytes  bytes copied per measurement (default 1024 MiB)
 *   --reps   repetitions, the best is kept (default 3)
 *   --keys   objects in the store for the exists test (default 1048576)
 * Not a test: nothing here fails on a slow machine.
 */
#define _POSIX_C_SOURCE 200809L /* posix_memalign, clock_gettime */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvlink.h"

#define KEY_LEN 130
#define EXISTS_BATCH 1024
#define DEST_MAX (64u << 20) /* destination bytes per batch, at most */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void die(const char *what, int rc, kvl_store *s)
{
	fprintf(stderr, "bench_store: %s: %s%s%s\n", what, kvl_err_name(rc),
	        s ? ": " : "", s ? kvl_store_errmsg(s) : "");
	exit(1);
}

static void *xmalloc(size_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, n ? n : 1) != 0) {
		fprintf(stderr, "bench_store: out of memory (%zu bytes)\n", n);
		exit(1);
	}
	return p;
}

/* A 130-byte key shaped like kvl_layout_key's: the page hash is derived
 * from (ns, i). */
static void make_key(char *out, uint64_t ns, uint64_t i)
{
	static const char hex[] = "0123456789abcdef";
	char h[65];
	uint64_t x = ns * 0x9e3779b97f4a7c15ull + i;
	for (int w = 0; w < 4; w++) {
		uint64_t v = splitmix(&x);
		for (int d = 0; d < 16; d++)
			h[w * 16 + d] = hex[(v >> (4 * d)) & 15];
	}
	h[64] = '\0';
	int n = snprintf(out, KEY_LEN + 1,
	                 "kvl1:meta-llama-3.1-8b-instr/bf16:%016llx:%s:kv:"
	                 "tp0_cp0_pp0",
	                 (unsigned long long)(ns * 0x100000001b3ull), h);
	while (n < KEY_LEN) /* pad if the shape above ever shrinks */
		out[n++] = '_';
	out[KEY_LEN] = '\0';
}

struct size_result {
	size_t size, batch, objects;
	double memcpy_gbs, get_gbs;
};

static void bench_size(kvl_store *s, size_t size, size_t work, size_t total,
                       int reps, uint8_t *arena, struct size_result *out)
{
	size_t n = work / size; /* >= 1: work >= the largest size */
	size_t batch = 64;
	if (batch > DEST_MAX / size)
		batch = DEST_MAX / size;
	if (batch > n)
		batch = n;
	n -= n % batch;

	char *keybuf = xmalloc(n * (KEY_LEN + 1));
	const char **keys = xmalloc(n * sizeof *keys);
	uint8_t *dest = xmalloc(batch * size);
	kvl_range *ranges = xmalloc(batch * sizeof *ranges);
	size_t *n_ranges = xmalloc(batch * sizeof *n_ranges);
	int *res = xmalloc(batch * sizeof *res);
	int *ires = xmalloc(n * sizeof *ires);
	kvl_iov *pieces = xmalloc(n * sizeof *pieces);
	size_t *n_pieces = xmalloc(n * sizeof *n_pieces);

	memset(dest, 0, batch * size); /* fault it in before timing */
	for (size_t i = 0; i < n; i++) {
		keys[i] = keybuf + i * (KEY_LEN + 1);
		make_key(keybuf + i * (KEY_LEN + 1), size, i);
		pieces[i] = (kvl_iov){ arena + i * size, size };
		n_pieces[i] = 1;
	}
	for (size_t k = 0; k < batch; k++) {
		ranges[k] = (kvl_range){ 0, dest + k * size, size };
		n_ranges[k] = 1;
	}
	int rc = kvl_store_put(s, keys, n, pieces, n_pieces, ires);
	if (rc)
		die("put", rc, s);
	for (size_t i = 0; i < n; i++)
		if (ires[i] != KVL_PUT_STORED)
			die("put of a benchmark object", ires[i], s);

	size_t per_rep = (total + batch * size - 1) / (batch * size);
	double best_mc = 0, best_get = 0;
	for (int r = 0; r < reps; r++) {
		size_t i = 0;
		double t0 = now_s();
		for (size_t b = 0; b < per_rep; b++) {
			for (size_t k = 0; k < batch; k++)
				memcpy(dest + k * size, arena + (i + k) * size,
				       size);
			i = (i + batch) % n;
		}
		double t1 = now_s();
		i = 0;
		for (size_t b = 0; b < per_rep; b++) {
			rc = kvl_store_get(s, keys + i, batch, ranges, n_ranges,
			                   res);
			if (rc)
				die("get", rc, s);
			for (size_t k = 0; k < batch; k++)
				if (res[k] != 0)
					die("get of a benchmark object",
					    res[k], s);
			i = (i + batch) % n;
		}
		double t2 = now_s();
		double bytes = (double)per_rep * (double)batch * (double)size;
		if (bytes / (t1 - t0) > best_mc)
			best_mc = bytes / (t1 - t0);
		if (bytes / (t2 - t1) > best_get)
			best_get = bytes / (t2 - t1);
	}
	/* Spot-check the bytes of the last batch. */
	size_t last = ((per_rep - 1) * batch) % n;
	if (memcmp(dest, arena + last * size, size) != 0) {
		fprintf(stderr, "bench_store: wrong bytes read\n");
		exit(1);
	}

	rc = kvl_store_remove(s, keys, n, ires);
	if (rc)
		die("remove", rc, s);
	out->size = size;
	out->batch = batch;
	out->objects = n;
	out->memcpy_gbs = best_mc / 1e9;
	out->get_gbs = best_get / 1e9;
	free(keybuf);
	free(keys);
	free(dest);
	free(ranges);
	free(n_ranges);
	free(res);
	free(ires);
	free(pieces);
	free(n_pieces);
}

struct exists_result {
	size_t keys;
	double hit_kps;     /* present keys in random order */
	double seq_hit_kps; /* present keys in the order they were stored */
	double miss_kps;    /* absent keys */
};

/* Times kvl_store_exists over `order` (indices into key namespace ns), in
 * batches whose strings are first copied into a small hot buffer. */
static double time_exists(kvl_store *s, uint64_t ns, const uint32_t *order,
                          size_t n, int want)
{
	static char buf[EXISTS_BATCH][KEY_LEN + 1];
	const char *keys[EXISTS_BATCH];
	int res[EXISTS_BATCH];
	double spent = 0;
	size_t done = 0;

	for (size_t k = 0; k < EXISTS_BATCH; k++)
		keys[k] = buf[k];
	while (done < n) {
		size_t m = n - done < EXISTS_BATCH ? n - done : EXISTS_BATCH;
		for (size_t k = 0; k < m; k++)
			make_key(buf[k], ns, order[done + k]);
		double t0 = now_s();
		int rc = kvl_store_exists(s, keys, m, res);
		spent += now_s() - t0;
		if (rc)
			die("exists", rc, s);
		for (size_t k = 0; k < m; k++)
			if (res[k] != want)
				die("exists result", res[k], s);
		done += m;
	}
	return (double)n / spent;
}

static void bench_exists(size_t n, int reps, struct exists_result *out)
{
	kvl_store *s = NULL;
	char eb[256];
	int rc = kvl_store_open("mem:?capacity=64GiB", &s, eb, sizeof eb);
	if (rc) {
		fprintf(stderr, "bench_store: open: %s\n", eb);
		exit(1);
	}
	static char buf[EXISTS_BATCH][KEY_LEN + 1];
	const char *keys[EXISTS_BATCH];
	int res[EXISTS_BATCH];
	size_t zero[EXISTS_BATCH] = { 0 };
	for (size_t k = 0; k < EXISTS_BATCH; k++)
		keys[k] = buf[k];
	for (size_t done = 0; done < n;) {
		size_t m = n - done < EXISTS_BATCH ? n - done : EXISTS_BATCH;
		for (size_t k = 0; k < m; k++)
			make_key(buf[k], 1, done + k);
		rc = kvl_store_put(s, keys, m, NULL, zero, res);
		if (rc)
			die("put", rc, s);
		done += m;
	}

	uint32_t *order = xmalloc(n * sizeof *order);
	uint32_t *seq = xmalloc(n * sizeof *seq);
	uint64_t x = 42;
	for (size_t i = 0; i < n; i++)
		order[i] = seq[i] = (uint32_t)i;
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = (size_t)(splitmix(&x) % (i + 1));
		uint32_t t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	out->keys = n;
	out->hit_kps = out->seq_hit_kps = out->miss_kps = 0;
	for (int r = 0; r < reps; r++) {
		double h = time_exists(s, 1, order, n, 1);
		double q = time_exists(s, 1, seq, n, 1);
		double m = time_exists(s, 2, order, n, 0);
		if (h > out->hit_kps)
			out->hit_kps = h;
		if (q > out->seq_hit_kps)
			out->seq_hit_kps = q;
		if (m > out->miss_kps)
			out->miss_kps = m;
	}
	free(order);
	free(seq);
	kvl_store_close(s);
}

static size_t arg_num(int argc, char **argv, int *i)
{
	if (*i + 1 >= argc) {
		fprintf(stderr, "bench_store: %s needs a number\n", argv[*i]);
		exit(2);
	}
	char *end;
	unsigned long long v = strtoull(argv[++*i], &end, 10);
	if (*end || v == 0) {
		fprintf(stderr, "bench_store: bad number '%s'\n", argv[*i]);
		exit(2);
	}
	return (size_t)v;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = { 16u << 10, 64u << 10, 256u << 10,
		                        1u << 20, 4u << 20 };
	enum { NSIZES = sizeof sizes / sizeof sizes[0] };
	size_t work = 256u << 20, total = 1024u << 20, nkeys = 1u << 20;
	int reps = 3, json = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			json = 1;
		else if (strcmp(argv[i], "--mem") == 0)
			work = arg_num(argc, argv, &i) << 20;
		else if (strcmp(argv[i], "--bytes") == 0)
			total = arg_num(argc, argv, &i) << 20;
		else if (strcmp(argv[i], "--reps") == 0)
			reps = (int)arg_num(argc, argv, &i);
		else if (strcmp(argv[i], "--keys") == 0)
			nkeys = arg_num(argc, argv, &i);
		else {
			fprintf(stderr,
			        "usage: bench_store [--json] [--mem MIB] "
			        "[--bytes MIB] [--reps N] [--keys N]\n");
			return 2;
		}
	}

	if (work < sizes[NSIZES - 1]) {
		fprintf(stderr, "bench_store: --mem must be at least %zu\n",
		        sizes[NSIZES - 1] >> 20);
		return 2;
	}
	uint8_t *arena = xmalloc(work);
	uint64_t x = 7;
	for (size_t i = 0; i + 8 <= work; i += 8) {
		uint64_t v = splitmix(&x);
		memcpy(arena + i, &v, 8);
	}

	kvl_store *s = NULL;
	char eb[256], uri[64];
	snprintf(uri, sizeof uri, "mem:?capacity=%zu",
	         2 * work + (64u << 20));
	int rc = kvl_store_open(uri, &s, eb, sizeof eb);
	if (rc) {
		fprintf(stderr, "bench_store: open %s: %s\n", uri, eb);
		return 1;
	}
	struct size_result sr[NSIZES];
	double t_start = now_s();
	for (int i = 0; i < NSIZES; i++) {
		bench_size(s, sizes[i], work, total, reps, arena, &sr[i]);
		if (!json) {
			if (i == 0)
				printf("embedded store (mem:) vs memcpy, "
				       "%zu MiB working set, %zu MiB per "
				       "measurement, best of %d\n"
				       "%10s %6s %12s %12s %10s\n",
				       work >> 20, total >> 20, reps, "size",
				       "batch", "memcpy GB/s", "get GB/s",
				       "get/memcpy");
			printf("%7zu KiB %6zu %12.2f %12.2f %10.3f\n",
			       sr[i].size >> 10, sr[i].batch, sr[i].memcpy_gbs,
			       sr[i].get_gbs, sr[i].get_gbs / sr[i].memcpy_gbs);
			fflush(stdout);
		}
	}
	kvl_store_close(s);
	free(arena);

	struct exists_result er;
	bench_exists(nkeys, reps, &er);
	double elapsed = now_s() - t_start;

	if (json) {
		printf("{\"bench\":\"store\",\"working_set_bytes\":%zu,"
		       "\"bytes_per_measurement\":%zu,\"reps\":%d,\"sizes\":[",
		       work, total, reps);
		for (int i = 0; i < NSIZES; i++)
			printf("%s{\"size\":%zu,\"batch\":%zu,\"objects\":%zu,"
			       "\"memcpy_gbps\":%.3f,\"get_gbps\":%.3f,"
			       "\"ratio\":%.4f}",
			       i ? "," : "", sr[i].size, sr[i].batch,
			       sr[i].objects, sr[i].memcpy_gbs, sr[i].get_gbs,
			       sr[i].get_gbs / sr[i].memcpy_gbs);
		printf("],\"exists\":{\"keys\":%zu,\"key_len\":%d,"
		       "\"batch\":%d,\"hit_keys_per_s\":%.0f,"
		       "\"stored_order_hit_keys_per_s\":%.0f,"
		       "\"miss_keys_per_s\":%.0f},\"seconds\":%.2f}\n",
		       er.keys, KEY_LEN, EXISTS_BATCH, er.hit_kps,
		       er.seq_hit_kps, er.miss_kps, elapsed);
	} else {
		printf("exists, %zu keys of %d bytes, batches of %d: "
		       "hits %.2f M keys/s (random order), %.2f M keys/s "
		       "(stored order), misses %.2f M keys/s\n",
		       er.keys, KEY_LEN, EXISTS_BATCH, er.hit_kps / 1e6,
		       er.seq_hit_kps / 1e6, er.miss_kps / 1e6);
		printf("(%.1f s)\n", elapsed);
	}
	return 0;
}
