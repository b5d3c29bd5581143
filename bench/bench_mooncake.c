/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_mooncake.c — kvlink's mooncake:// store against Mooncake's own C
 * API (store_c.h) on the same master, keys and object sizes, in one run.
 *
 * For each object size (64 KiB, 256 KiB, 1 MiB, 4 MiB by default) it writes
 * and reads a working set of --mib MiB in batches of --batch objects, best
 * of --reps repetitions, kvlink and raw interleaved:
 *   raw put      mooncake_store_batch_put_from from a registered buffer
 *   kvlink put   kvl_store_put of the same bytes, the buffer registered
 *                through kvl_store_register (so moved in place)
 *   raw get      mooncake_store_batch_get_into into a registered buffer
 *   kvlink get   kvl_store_get of whole objects into that buffer
 *   kvlink get, staged   the same into unregistered memory: through
 *                kvlink's staging and a copy (what the linker does, whose
 *                destinations are scattered slots)
 *   linker load  a layer-wise load of pages of that size (32 layers, one
 *                component) through kvl_linker, checksums verified, against
 *                raw get of the same bytes (layer by layer through the
 *                shim, api=ranges; every layer with the first on whole
 *                objects, api=whole)
 *   per-layer    the same load if each layer were read on its own: 32
 *                reads of one layer's range of every page (on whole
 *                objects each a whole-object read; measured for one layer,
 *                times 32)
 *   first ms     the median time until the load's layer 0 was complete,
 *                against its bound: the whole load's time / 32 plus one
 *                round trip (a 4 KiB raw get, the best of 20)
 * and prints the best GB/s of each and, per size, the median over the
 * repetitions of kvlink / raw measured in the same repetition (the target
 * is >= 0.9: overhead at most 10 %); raw and kvlink take turns going first. Both clients hold no memory of their own: objects live in
 * the deployment's holder (tests/mooncake/run.sh starts one). Before each
 * put measurement the working set is removed (untimed).
 *
 * Usage (Mooncake built apart, see docs/mooncake.md):
 *   KVL_MOONCAKE_LIB=… KVL_MOONCAKE_MASTER=… KVL_MOONCAKE_SEGMENT=2GiB \
 *     tests/mooncake/run.sh build/bench_mooncake [--mib N] [--batch N]
 *     [--reps N] [--sizes K,K,…]
 * It reads the store's URI from $KVL_TEST_STORE_URI (run.sh sets it) and
 * the library from $KVL_MOONCAKE_LIB. Not a test.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvlink.h"

typedef struct raw_api {
	void *(*create)(void);
	void (*destroy)(void *);
	int (*setup)(void *, const char *, const char *, uint64_t, uint64_t,
	             const char *, const char *, const char *);
	int (*put)(void *, const char **, void **, const size_t *, size_t,
	           const void *, int *);
	int (*get)(void *, const char **, void **, const size_t *, size_t,
	           int64_t *);
	int (*remove)(void *, const char *, int);
	int (*reg)(void *, void *, size_t);
} raw_api;

typedef struct replicate_config {
	size_t replica_num;
	int with_soft_pin;
	int with_hard_pin;
	const char **preferred_segments;
	size_t preferred_segments_count;
} replicate_config;

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void die(const char *what, const char *why)
{
	fprintf(stderr, "bench_mooncake: %s: %s\n", what, why);
	exit(1);
}

static void load_raw(raw_api *a, const char *lib)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		die("dlopen", dlerror());
	struct {
		const char *name;
		void **slot;
	} fns[] = {
		{"mooncake_store_create", (void **)&a->create},
		{"mooncake_store_destroy", (void **)&a->destroy},
		{"mooncake_store_setup", (void **)&a->setup},
		{"mooncake_store_batch_put_from", (void **)&a->put},
		{"mooncake_store_batch_get_into", (void **)&a->get},
		{"mooncake_store_remove", (void **)&a->remove},
		{"mooncake_store_register_buffer", (void **)&a->reg},
	};
	for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
		void *f = dlsym(h, fns[i].name);
		if (!f)
			die("dlsym", fns[i].name);
		memcpy(fns[i].slot, &f, sizeof f);
	}
}

/* The run's settings and buffers. */
typedef struct bench {
	raw_api api;
	void *raw;
	kvl_store *st;
	uint8_t *src, *dst, *plain; /* registered, registered, not */
	size_t mib, batch;
	int reps;
	char (*keys)[KVL_KEY_MAX];
	const char **kp;
} bench;

static void name_keys(bench *b, const char *who, size_t size, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		snprintf(b->keys[i], KVL_KEY_MAX, "bench:%s:%zu:%zu", who, size,
		         i);
		b->kp[i] = b->keys[i];
	}
}

static void raw_remove(bench *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		b->api.remove(b->raw, b->kp[i], 1);
}

static void kvl_remove(bench *b, size_t n)
{
	int *res = malloc(n * sizeof *res);
	kvl_store_remove(b->st, b->kp, n, res);
	free(res);
}

/* One measurement: every batch of the working set; GB/s. op: 0 raw put,
 * 1 raw get, 2 kvlink put, 3 kvlink get, 4 kvlink get into `plain`. */
static double run_op(bench *b, int op, size_t size, size_t n)
{
	void *bufs[1024];
	size_t sizes[1024];
	int res[1024];
	int64_t got[1024];
	kvl_iov iov[1024];
	kvl_range rg[1024];
	size_t ones[1024];
	replicate_config cfg = {.replica_num = 1};
	double t = now_s();
	for (size_t i = 0; i < n; i += b->batch) {
		size_t m = n - i < b->batch ? n - i : b->batch;
		for (size_t k = 0; k < m; k++) {
			uint8_t *at = (op == 0 || op == 2 ? b->src : op == 4
			                                     ? b->plain
			                                     : b->dst) +
			              (i + k) * size;
			bufs[k] = at;
			sizes[k] = size;
			iov[k] = (kvl_iov){at, size};
			rg[k] = (kvl_range){0, at, size};
			ones[k] = 1;
		}
		const char **kp = b->kp + i;
		long long bad = 0; /* the first failing result */
		switch (op) {
		case 0:
			b->api.put(b->raw, kp, bufs, sizes, m, &cfg, res);
			for (size_t k = 0; k < m && !bad; k++)
				bad = res[k] != 0 ? res[k] : 0;
			break;
		case 1:
			b->api.get(b->raw, kp, bufs, sizes, m, got);
			for (size_t k = 0; k < m && !bad; k++)
				bad = got[k] != (int64_t)size ? got[k] : 0;
			break;
		case 2:
			kvl_store_put(b->st, kp, m, iov, ones, res);
			for (size_t k = 0; k < m && !bad; k++)
				bad = res[k] != KVL_PUT_STORED ? res[k] : 0;
			break;
		default:
			kvl_store_get(b->st, kp, m, rg, ones, res);
			for (size_t k = 0; k < m && !bad; k++)
				bad = res[k];
		}
		if (bad) {
			char why[600];
			snprintf(why, sizeof why, "%s %s: result %lld (%s)",
			         op < 2 ? "raw" : "kvlink",
			         op == 0 || op == 2 ? "put" : "get", bad,
			         op < 2 ? "a Mooncake error code"
			                : kvl_store_errmsg(b->st));
			die("batch failed", why);
		}
	}
	return (double)n * (double)size / (now_s() - t) / 1e9;
}

/* A layer-wise load of n pages of `size` bytes (32 layers, one
 * component of size/32 each) through the linker, GB/s; the pages are
 * offloaded first (untimed). *per_layer: the GB/s of the same load if each
 * layer were read on its own (32 reads of one layer's range). *first_s and
 * *whole_s: the time until layer 0 was complete, and until the last. */
static double run_linker(bench *b, size_t size, size_t n, int rep,
                         double *per_layer, double *first_s, double *whole_s)
{
	enum { LAYERS = 32 };
	size_t per = size / LAYERS, slots = 2 * n;
	uint8_t *pool = malloc((size_t)LAYERS * slots * per);
	if (!pool)
		die("linker", "out of memory");
	for (size_t i = 0; i < (size_t)LAYERS * slots * per; i++)
		pool[i] = (uint8_t)(i * 7 + 1);
	kvl_layout *l;
	int pid;
	char tag[64];
	snprintf(tag, sizeof tag, "bench-%zu-%d", size, rep);
	kvl_layout_create(tag, 16, NULL, &l, NULL, 0);
	kvl_layout_add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0, &pid);
	for (uint32_t ly = 0; ly < LAYERS; ly++) {
		kvl_buffer buf = {.base = pool + (size_t)ly * slots * per,
		                  .page_stride = per,
		                  .page_bytes = per,
		                  .num_pages = slots,
		                  .mem = KVL_MEM_HOST};
		kvl_layout_add_buffer(l, pid, "kv", ly, &buf);
	}
	if (kvl_layout_finalize(l))
		die("layout", kvl_layout_errmsg(l));
	kvl_linker *lk;
	char err[512];
	if (kvl_linker_open(b->st, l, NULL, &lk, err, sizeof err))
		die("linker", err);
	kvl_hash *h = calloc(n, sizeof *h);
	size_t *src = calloc(n, sizeof *src), *dst = calloc(n, sizeof *dst);
	for (size_t i = 0; i < n; i++) {
		memcpy(h[i].bytes, &i, sizeof i);
		src[i] = i;
		dst[i] = n + i;
	}
	const size_t *sl[1] = {src}, *dl[1] = {dst};
	kvl_completion c;
	size_t got;
	if (kvl_linker_offload(lk, 1, h, n, sl, NULL))
		die("offload", kvl_linker_errmsg(lk));
	kvl_linker_flush(lk, UINT32_MAX);
	kvl_linker_poll(lk, &c, 1, &got, 60000);
	if (!got || c.status || c.valid_pages != n)
		die("offload", kvl_strerror(c.status));
	uint64_t batch;
	double t = now_s();
	if (kvl_linker_load(lk, 2, h, n, dl) ||
	    kvl_linker_start(lk, &batch) ||
	    kvl_linker_wait(lk, batch, 0, 600000))
		die("load", kvl_linker_errmsg(lk));
	*first_s = now_s() - t;
	if (kvl_linker_wait(lk, batch, LAYERS - 1, 600000))
		die("load", kvl_linker_errmsg(lk));
	*whole_s = now_s() - t;
	double gbps = (double)n * (double)size / *whole_s / 1e9;
	kvl_linker_poll(lk, &c, 1, &got, 60000);
	if (!got || c.status || c.valid_pages != n)
		die("load", kvl_strerror(c.status));
	for (uint32_t ly = 0; ly < LAYERS; ly++)
		for (size_t i = 0; i < n; i++)
			if (memcmp(pool + ((size_t)ly * slots + n + i) * per,
			           pool + ((size_t)ly * slots + i) * per, per))
				die("load", "wrong bytes");
	char (*keys)[KVL_KEY_MAX] = malloc(n * KVL_KEY_MAX);
	const char **kp = malloc(n * sizeof *kp);
	int *res = malloc(n * sizeof *res);
	for (size_t i = 0; i < n; i++) {
		kvl_layout_key(l, pid, &h[i], keys[i], KVL_KEY_MAX);
		kp[i] = keys[i];
	}
	/* The other mapping, a read per layer: every page's layer 1 alone
	 * costs a whole-object read (and a size query), once per layer. */
	kvl_range *rg = malloc(n * sizeof *rg);
	size_t *ones = malloc(n * sizeof *ones), off = 0, llen = 0;
	int *gres = malloc(n * sizeof *gres);
	kvl_layout_layer_range(l, pid, 1, &off, &llen);
	for (size_t i = 0; i < n; i++) {
		rg[i] = (kvl_range){off, pool + ((size_t)slots + i) * per, llen};
		ones[i] = 1;
	}
	t = now_s();
	for (size_t i = 0; i < n; i += 256)
		kvl_store_get(b->st, kp + i, n - i < 256 ? n - i : 256, rg + i,
		              ones + i, gres + i);
	*per_layer = (double)n * (double)size / ((now_s() - t) * LAYERS) / 1e9;
	free(rg);
	free(ones);
	free(gres);
	/* Drop the objects for the next measurement. */
	kvl_store_remove(b->st, kp, n, res);
	free(keys);
	free(kp);
	free(res);
	kvl_linker_close(lk);
	kvl_layout_free(l);
	free(pool);
	free(h);
	free(src);
	free(dst);
	return gbps;
}

/* The round trip of one small raw get (the best of 20), seconds. */
static double round_trip(bench *b)
{
	const char *key = "bench:rtt";
	void *buf = b->src;
	size_t len = 4096;
	int res;
	int64_t got;
	replicate_config cfg = {.replica_num = 1};
	b->api.remove(b->raw, key, 1);
	b->api.put(b->raw, &key, &buf, &len, 1, &cfg, &res);
	if (res)
		die("round trip", "the put failed");
	buf = b->dst;
	double best = 1e9;
	for (int i = 0; i < 20; i++) {
		double t = now_s();
		b->api.get(b->raw, &key, &buf, &len, 1, &got);
		t = now_s() - t;
		if (got != (int64_t)len)
			die("round trip", "the get failed");
		if (t < best)
			best = t;
	}
	b->api.remove(b->raw, key, 1);
	return best;
}

/* "ranges" or "whole", as the store's stats say. */
static const char *api_of(kvl_store *s)
{
	static char buf[8192];
	if (kvl_store_stats_render(s, KVL_STATS_JSON, buf, sizeof buf, NULL))
		return "?";
	return strstr(buf, "\"api\":\"ranges\"") ? "ranges" : "whole";
}

static double max2(double a, double b)
{
	return a > b ? a : b;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	bench b = {.mib = 256, .batch = 32, .reps = 5};
	size_t sizes[16] = {64 << 10, 256 << 10, 1 << 20, 4 << 20};
	size_t n_sizes = 4;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--mib") && i + 1 < argc)
			b.mib = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
			b.batch = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			b.reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
			n_sizes = 0;
			for (char *p = strtok(argv[++i], ","); p && n_sizes < 16;
			     p = strtok(NULL, ","))
				sizes[n_sizes++] = strtoull(p, NULL, 10) << 10;
		} else {
			fprintf(stderr, "usage: bench_mooncake [--mib N] "
			                "[--batch N] [--reps N] "
			                "[--sizes KiB,KiB,…]\n");
			return 2;
		}
	}
	if (b.batch < 1 || b.batch > 1024 || b.reps < 1 || b.reps > 16 ||
	    b.mib < 1)
		die("usage", "--batch 1..1024, --reps 1..16, --mib at least 1");
	const char *uri = getenv("KVL_TEST_STORE_URI");
	const char *lib = getenv("KVL_MOONCAKE_LIB");
	if (!uri || strncmp(uri, "mooncake://", 11) || !lib) {
		printf("bench_mooncake: run it through tests/mooncake/run.sh "
		       "(needs KVL_MOONCAKE_LIB)\n");
		return 77;
	}
	char master[256];
	snprintf(master, sizeof master, "%.*s", (int)strcspn(uri + 11, "?/"),
	         uri + 11);
	load_raw(&b.api, lib);
	b.raw = b.api.create();
	if (!b.raw || b.api.setup(b.raw, "127.0.0.1", "P2PHANDSHAKE", 0,
	                          64 << 20, "tcp", "", master))
		die("raw client", master);
	char err[512];
	if (kvl_store_open(uri, &b.st, err, sizeof err))
		die("kvlink store", err);

	size_t total = b.mib << 20;
	b.src = aligned_alloc(4096, total);
	b.dst = aligned_alloc(4096, total);
	b.plain = aligned_alloc(4096, total);
	if (!b.src || !b.dst || !b.plain)
		die("buffers", "out of memory");
	for (size_t i = 0; i < total; i++)
		b.src[i] = (uint8_t)(i * 131 + (i >> 12));
	memset(b.dst, 0, total);
	memset(b.plain, 0, total);
	/* The raw client and kvlink register the same buffers. */
	if (b.api.reg(b.raw, b.src, total) || b.api.reg(b.raw, b.dst, total))
		die("raw register", "failed");
	if (kvl_store_register(b.st, b.src, total, KVL_MEM_HOST) ||
	    kvl_store_register(b.st, b.dst, total, KVL_MEM_HOST))
		die("kvlink register", kvl_store_errmsg(b.st));

	double rtt = round_trip(&b);
	printf("bench_mooncake: %s, api=%s, %zu MiB per measurement, batches "
	       "of %zu objects, %d repetitions: best GB/s, median of the same "
	       "repetition's kvlink / raw; round trip %.0f us\n",
	       master, api_of(b.st), b.mib, b.batch, b.reps, rtt * 1e6);
	printf("%10s %9s %9s %6s %9s %9s %6s %9s %6s %9s %6s %9s %6s %9s "
	       "%9s\n",
	       "size", "raw put", "kvl put", "ratio", "raw get", "kvl get",
	       "ratio", "staged", "ratio", "linker", "ratio", "per-layer",
	       "ratio", "first ms", "bound ms");
	b.keys = malloc((total / (64 << 10) + 1) * KVL_KEY_MAX);
	b.kp = malloc((total / (64 << 10) + 1) * sizeof *b.kp);
	for (size_t s = 0; s < n_sizes; s++) {
		size_t size = sizes[s], n = total / size;
		if (n * size > total || n > total / (64 << 10) + 1 ||
		    size < 64 << 10)
			die("sizes", "each at least 64 KiB and at most --mib");
		/* Per repetition: GB/s of raw put, raw get, kvlink put, get,
		 * staged get, linker load; raw and kvlink take turns going
		 * first. */
		double g[16][7], first[16], bound[16];
		for (int r = 0; r < b.reps && r < 16; r++) {
			for (int turn = 0; turn < 2; turn++) {
				if ((turn == 0) == (r % 2 == 0)) {
					name_keys(&b, "raw", size, n);
					raw_remove(&b, n);
					memset(b.dst, 0, n * size);
					g[r][0] = run_op(&b, 0, size, n);
					g[r][1] = run_op(&b, 1, size, n);
					if (memcmp(b.dst, b.src, n * size))
						die("raw get", "wrong bytes");
					raw_remove(&b, n);
					continue;
				}
				name_keys(&b, "kvl", size, n);
				kvl_remove(&b, n);
				memset(b.dst, 0, n * size);
				memset(b.plain, 0, n * size);
				g[r][2] = run_op(&b, 2, size, n);
				g[r][3] = run_op(&b, 3, size, n);
				g[r][4] = run_op(&b, 4, size, n);
				if (memcmp(b.dst, b.src, n * size) ||
				    memcmp(b.plain, b.src, n * size))
					die("kvlink get", "wrong bytes");
				kvl_remove(&b, n);
			}
			double whole;
			g[r][5] = run_linker(&b, size, n, r, &g[r][6], &first[r],
			                     &whole);
			/* The first layer's target: its share of the whole
			 * load plus one round trip. */
			bound[r] = whole / 32 + rtt;
		}
		int reps = b.reps < 16 ? b.reps : 16;
		double best[7], ratio[5];
		for (int k = 0; k < 7; k++) {
			best[k] = 0;
			for (int r = 0; r < reps; r++)
				best[k] = max2(best[k], g[r][k]);
		}
		/* Median over repetitions of kvlink / raw in the same one. */
		static const int num[5] = {2, 3, 4, 5, 6},
		                 den[5] = {0, 1, 1, 1, 1};
		for (int k = 0; k < 5; k++) {
			double v[16];
			for (int r = 0; r < reps; r++)
				v[r] = g[r][num[k]] / g[r][den[k]];
			ratio[k] = median(v, reps);
		}
		printf("%7zu KiB %9.2f %9.2f %6.2f %9.2f %9.2f %6.2f %9.2f "
		       "%6.2f %9.2f %6.2f %9.3f %6.3f %9.2f %9.2f\n",
		       size >> 10, best[0], best[2], ratio[0], best[1], best[3],
		       ratio[1], best[4], ratio[2], best[5], ratio[3], best[6],
		       ratio[4], median(first, reps) * 1e3,
		       median(bound, reps) * 1e3);
	}
	kvl_store_close(b.st);
	b.api.destroy(b.raw);
	return 0;
}
