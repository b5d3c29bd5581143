/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec_bench.h — the page codec's read check on one core, unkeyed
 * (XXH3-128 fields) against keyed (Poly1305 tags under a store secret), in
 * the same run: what a load from Redis or Mooncake costs the CPU on top of
 * moving the bytes. Included by the benchmarks that report it (bench_redis,
 * bench_mac); CPU only.
 *
 * An object of `layers` layers of `layer_bytes` each (two components, k
 * and v) is sealed once, then kvl__read_check verifies every layer of it
 * from contiguous memory (as the ring path checks a pinned ring and the
 * host path a slot) for about `seconds`; the figure is payload GB/s, the
 * best of three runs.
 */
#ifndef KVL_BENCH_CODEC_H
#define KVL_BENCH_CODEC_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/codec.h"
#include "core/layout.h"
#include "core/mac.h"
#include "kvlink.h"

static double codec_bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct codec_bench_result {
	double unkeyed_gbs, keyed_gbs;
} codec_bench_result;

/* Verification GB/s of one layout's objects, unkeyed and keyed; 0 and a
 * message on stderr when something failed. */
static codec_bench_result codec_bench_verify(size_t layer_bytes,
                                             uint32_t layers, double seconds)
{
	codec_bench_result out = {0, 0};
	kvl_layout *l = NULL;
	int pool = -1;
	size_t half = layer_bytes / 2;
	uint8_t *mem = malloc(2 * half * layers);
	static const char secret[] = "bench secret: 0123456789abcdef0123";
	kvl__mac *key = NULL;
	if (!mem || kvl_layout_create("bench/codec", 16, NULL, &l, NULL, 0) ||
	    kvl_layout_add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0, &pool) ||
	    kvl__mac_new(secret, sizeof secret - 1, &key, NULL, 0)) {
		fprintf(stderr, "codec bench: setup failed\n");
		goto done;
	}
	for (uint32_t ly = 0; ly < layers; ly++) {
		kvl_buffer k = {.base = mem + 2 * half * ly, .page_stride = half,
		                .page_bytes = half, .num_pages = 1};
		kvl_buffer v = k;
		v.base = (uint8_t *)k.base + half;
		if (kvl_layout_add_buffer(l, pool, "k", ly, &k) ||
		    kvl_layout_add_buffer(l, pool, "v", ly, &v)) {
			fprintf(stderr, "codec bench: %s\n",
			        kvl_layout_errmsg(l));
			goto done;
		}
	}
	if (kvl_layout_finalize(l)) {
		fprintf(stderr, "codec bench: %s\n", kvl_layout_errmsg(l));
		goto done;
	}
	int code;
	const kvl__pool *p = kvl__layout_pool(l, pool, &code);
	uint8_t *obj = malloc(p->object_size);
	if (!obj)
		goto done;
	for (size_t i = 0; i < p->object_size; i++)
		obj[i] = (uint8_t)(i * 131 + 7);
	kvl_hash page;
	memset(page.bytes, 0x5a, sizeof page.bytes);
	kvl__read rd = kvl__read_plan(p, NULL, 0);
	double payload = (double)(p->object_size - p->header_size);
	for (int keyed = 0; keyed < 2; keyed++) {
		const kvl__mac *k = keyed ? key : NULL;
		if (kvl__write_seal(p, &page, 1, k, obj) ||
		    kvl__read_check(p, &page, &rd, 0, obj, obj + rd.offset, 0,
		                    1, k, NULL)) {
			fprintf(stderr, "codec bench: the check failed\n");
			break;
		}
		double best = 0;
		for (int run = 0; run < 3; run++) {
			size_t n = 0;
			double t0 = codec_bench_now(), t;
			do {
				for (int j = 0; j < 16; j++, n++)
					if (kvl__read_check(p, &page, &rd, 0, obj,
					                    obj + rd.offset, 0, 1,
					                    k, NULL))
						abort();
				t = codec_bench_now() - t0;
			} while (t < seconds / 3);
			double gbs = payload * (double)n / t / 1e9;
			if (gbs > best)
				best = gbs;
		}
		*(keyed ? &out.keyed_gbs : &out.unkeyed_gbs) = best;
	}
	free(obj);
done:
	kvl__mac_free(key);
	kvl_layout_free(l);
	free(mem);
	return out;
}

#endif /* KVL_BENCH_CODEC_H */
