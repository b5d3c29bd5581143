/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd_bench.c — `kvlink bench`: the main job.
 *
 * Synthesizes multi-turn conversations that share a system prompt, and for
 * every turn does what an engine does through the linker: hashes the
 * prompt's pages, looks up the longest restorable prefix, loads it layer by
 * layer while a simulated forward pass waits for each layer and "computes"
 * it, checks every byte of every page reported valid, then "prefills" the
 * missing pages and offloads them. Reports pages, hit ratio, load and
 * offload GB/s against single-thread memcpy measured in the same run, and
 * the overlap of loading with compute. Works over any store URI, including
 * the fault-injection store, where failures are counted and wrong bytes
 * reported as valid make the run fail.
 */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kvlink.h"

typedef struct bench_opts {
	uint64_t layers, kv_heads, head_dim, dtype_bytes, page_size;
	uint64_t conversations, turns, system_tokens, turn_tokens;
	uint64_t slots, seed, compute_us;
	const char *store_uri;
	int cuda;                   /* --device cuda: the pool is on GPU 0 */
	int json;
	int stats;                  /* print the linker's stats at the end */
	int progress;               /* a progress bar on stderr */
	uint32_t gpu_copy;          /* --gpu-copy: kvl_linker_opts.gpu_copy */
	kvl_stats_format stats_fmt;
} bench_opts;

/* The engine's KV pool: [slots][layers][K,V][page bytes], in host memory
 * or on the GPU (then `scratch` stages one slot for filling and checks). */
typedef struct bench_pool {
	uint8_t *mem;
	int cuda;
	uint8_t *scratch;
	size_t comp_bytes;
	size_t slot_bytes;
} bench_pool;

typedef struct bench_totals {
	uint64_t pages, hit_pages, loaded_pages, offloaded_pages;
	uint64_t bad_pages, failed_loads, failed_offloads, lost_pages;
	uint64_t load_bytes, load_ns, offload_bytes, offload_ns;
	uint64_t lookup_ns, lookups, batches;
	uint64_t fwd_ns, compute_ns, first_layer_ns;
} bench_totals;

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The bytes a page must hold are a function of its hash, so any slot can be
 * checked without remembering what was written. */
static void fill_page(uint8_t *dst, size_t len, const kvl_hash *h)
{
	uint64_t s;
	memcpy(&s, h->bytes, 8);
	for (size_t i = 0; i + 8 <= len; i += 8) {
		uint64_t v = splitmix(&s);
		memcpy(dst + i, &v, 8);
	}
}

static int page_ok(const uint8_t *src, size_t len, const kvl_hash *h)
{
	uint64_t s;
	memcpy(&s, h->bytes, 8);
	for (size_t i = 0; i + 8 <= len; i += 8) {
		uint64_t v = splitmix(&s);
		if (memcmp(src + i, &v, 8))
			return 0;
	}
	return 1;
}

/* Writes page h's bytes into a slot of the pool, wherever it lives. */
static int slot_fill(bench_pool *bp, size_t slot, const kvl_hash *h)
{
	uint8_t *at = bp->mem + slot * bp->slot_bytes;
	if (!bp->cuda) {
		fill_page(at, bp->slot_bytes, h);
		return 0;
	}
	fill_page(bp->scratch, bp->slot_bytes, h);
	return kvl_cli_gpu_copy(at, bp->scratch, bp->slot_bytes);
}

/* 1 if a slot of the pool holds page h's bytes. */
static int slot_ok(bench_pool *bp, size_t slot, const kvl_hash *h)
{
	const uint8_t *at = bp->mem + slot * bp->slot_bytes;
	if (bp->cuda) {
		if (kvl_cli_gpu_copy(bp->scratch, at, bp->slot_bytes))
			return 0;
		at = bp->scratch;
	}
	return page_ok(at, bp->slot_bytes, h);
}

static int build_layout(const bench_opts *o, bench_pool *bp, kvl_layout **out)
{
	char err[256];
	kvl_layout *l;
	int rc = kvl_layout_create("bench-model/bf16", (uint32_t)o->page_size,
	                           NULL, &l, err, sizeof err);
	if (rc) {
		fprintf(stderr, "kvlink bench: layout: %s\n", err);
		return rc;
	}
	int pool;
	rc = kvl_layout_add_pool(l, "kv", KVL_HIT_ALL_PAGES, 0, 0, &pool);
	for (uint64_t layer = 0; layer < o->layers && rc == 0; layer++)
		for (int c = 0; c < 2 && rc == 0; c++) {
			kvl_buffer b = {
				.base = bp->mem + (layer * 2 + (uint64_t)c) *
				                          bp->comp_bytes,
				.page_stride = bp->slot_bytes,
				.page_bytes = bp->comp_bytes,
				.num_pages = o->slots,
				.mem = bp->cuda ? KVL_MEM_CUDA : KVL_MEM_HOST};
			rc = kvl_layout_add_buffer(l, pool, c ? "v" : "k",
			                           (uint32_t)layer, &b);
		}
	if (rc == 0)
		rc = kvl_layout_finalize(l);
	if (rc) {
		fprintf(stderr, "kvlink bench: layout: %s\n",
		        kvl_layout_errmsg(l));
		kvl_layout_free(l);
		return rc;
	}
	*out = l;
	return 0;
}

/* The same-run baseline: single-thread memcpy of whole page-sized pieces
 * into host pools; one large pinned host-to-device copy (the PCIe ceiling)
 * into GPU pools. */
static double memcpy_gbps(const bench_pool *pool, const uint8_t *src,
                          const bench_opts *o)
{
	if (pool->cuda) {
		size_t len = o->slots * pool->slot_bytes;
		kvl_cli_gpu_copy(pool->mem, src, len); /* warm */
		uint64_t t0 = kvl_cli_now_ns();
		for (int pass = 0; pass < 3; pass++)
			kvl_cli_gpu_copy(pool->mem, src, len);
		return 3.0 * (double)len / (double)(kvl_cli_now_ns() - t0);
	}
	uint64_t bytes = 0, t0 = kvl_cli_now_ns();
	for (int pass = 0; pass < 3; pass++)
		for (uint64_t s = 0; s < o->slots; s++) {
			memcpy(pool->mem + s * pool->slot_bytes,
			       src + ((s * 7 + 3) % o->slots) * pool->slot_bytes,
			       pool->slot_bytes);
			bytes += pool->slot_bytes;
		}
	return (double)bytes / (double)(kvl_cli_now_ns() - t0);
}

/* Simulated compute of one layer: the CPU sleeps, as it would while the
 * GPU runs the layer's kernels. */
static void compute_layer(uint64_t us)
{
	if (!us)
		return;
	struct timespec ts = {.tv_sec = (time_t)(us / 1000000),
	                      .tv_nsec = (long)(us % 1000000) * 1000};
	nanosleep(&ts, NULL);
}

/* Watches a batch from a second thread and notes when each layer became
 * complete: the loader's own timeline, for the overlap figures. */
typedef struct watcher {
	kvl_linker *lk;
	uint64_t batch, t0;
	uint32_t layers;
	uint64_t last_ns;
	pthread_t th;
} watcher;

static void *watch_main(void *arg)
{
	watcher *w = arg;
	for (uint32_t l = 0; l < w->layers; l++) {
		kvl_linker_wait(w->lk, w->batch, l, 60000);
		w->last_ns = kvl_cli_now_ns() - w->t0;
	}
	return NULL;
}

/* Collects the completions of one load and one offload id. */
static int collect(kvl_linker *lk, uint64_t want, kvl_completion *got)
{
	size_t n;
	for (int tries = 0; tries < 600; tries++) {
		kvl_completion c;
		kvl_linker_poll(lk, &c, 1, &n, 100);
		if (n && c.id == want) {
			*got = c;
			return 0;
		}
	}
	return KVL_ETIMEDOUT;
}

typedef struct bench_ctx {
	const bench_opts *o;
	kvl_linker *lk;
	bench_pool *pool;
	uint64_t next_slot, next_id;
	bench_totals t;
} bench_ctx;

static int load_and_forward(bench_ctx *c, const kvl_hash *h, size_t hit,
                            size_t *slots)
{
	bench_totals *t = &c->t;
	uint64_t id = c->next_id++;
	const size_t *sl[1] = {slots};
	int rc = hit ? kvl_linker_load(c->lk, id, h, hit, sl) : 0;
	if (rc) {
		fprintf(stderr, "kvlink bench: load: %s\n",
		        kvl_linker_errmsg(c->lk));
		return rc;
	}
	uint64_t batch;
	watcher w = {.lk = c->lk, .layers = kvl_linker_layers(c->lk)};
	w.t0 = kvl_cli_now_ns();
	if ((rc = kvl_linker_start(c->lk, &batch)))
		return rc;
	w.batch = batch;
	pthread_create(&w.th, NULL, watch_main, &w);
	/* The forward pass: wait for layer l, then compute it. */
	uint64_t compute = 0, first = 0;
	for (uint32_t l = 0; l < w.layers; l++) {
		kvl_linker_wait(c->lk, batch, l, 60000);
		uint64_t c0 = kvl_cli_now_ns();
		if (l == 0)
			first = c0 - w.t0;
		compute_layer(c->o->compute_us);
		compute += kvl_cli_now_ns() - c0;
	}
	uint64_t fwd = kvl_cli_now_ns() - w.t0;
	pthread_join(w.th, NULL);
	if (!hit)
		return 0;
	t->batches++;
	t->fwd_ns += fwd;
	t->compute_ns += compute;
	t->first_layer_ns += first; /* what the forward pass waited for */
	t->load_ns += w.last_ns;
	kvl_completion done;
	if ((rc = collect(c->lk, id, &done)))
		return rc;
	if (done.status)
		t->failed_loads++;
	/* Every page reported valid must hold exactly its bytes. */
	for (size_t i = 0; i < done.valid_pages; i++)
		if (!slot_ok(c->pool, slots[i], &h[i]))
			t->bad_pages++;
	t->lost_pages += hit - done.valid_pages;
	t->loaded_pages += done.valid_pages;
	t->hit_pages += done.valid_pages;
	t->load_bytes += done.valid_pages * c->pool->slot_bytes;
	return 0;
}

/* One turn: lookup, layer-wise load with compute, verify, prefill the rest
 * and offload it. */
static int run_turn(bench_ctx *c, const kvl_hash *h, size_t n)
{
	const bench_opts *o = c->o;
	bench_totals *t = &c->t;
	size_t *slots = malloc(n * sizeof *slots);
	if (!slots)
		return KVL_ENOMEM;
	uint64_t t0 = kvl_cli_now_ns();
	size_t hit = 0;
	int rc = kvl_linker_lookup(c->lk, h, n, NULL, &hit);
	t->lookup_ns += kvl_cli_now_ns() - t0;
	t->lookups++;
	t->pages += n;
	if (rc) {
		fprintf(stderr, "kvlink bench: lookup: %s\n",
		        kvl_linker_errmsg(c->lk));
		hit = 0; /* a failed lookup means recompute everything */
	}
	for (size_t i = 0; i < n; i++)
		slots[i] = (c->next_slot + i) % o->slots;
	c->next_slot += n;
	size_t valid_before = t->hit_pages;
	rc = load_and_forward(c, h, hit, slots);
	size_t valid = t->hit_pages - valid_before;
	/* Prefill what was not restored, then offload it. */
	for (size_t i = valid; i < n && rc == 0; i++)
		rc = slot_fill(c->pool, slots[i], &h[i]);
	if (rc == 0 && valid < n) {
		uint64_t id = c->next_id++;
		const size_t *sl[1] = {slots + valid};
		t0 = kvl_cli_now_ns();
		rc = kvl_linker_offload(c->lk, id, h + valid, n - valid,
		                        sl, NULL);
		if (rc == 0)
			rc = kvl_linker_flush(c->lk, 60000);
		t->offload_ns += kvl_cli_now_ns() - t0;
		kvl_completion done;
		if (rc == 0)
			rc = collect(c->lk, id, &done);
		if (rc == 0) {
			if (done.status)
				t->failed_offloads++;
			t->offloaded_pages += done.valid_pages;
			t->offload_bytes +=
				done.valid_pages * c->pool->slot_bytes;
		} else {
			fprintf(stderr, "kvlink bench: offload: %s\n",
			        kvl_linker_errmsg(c->lk));
		}
	}
	free(slots);
	return rc;
}

static double gbps(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns : 0;
}

static double ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

/* s as a JSON string, quotes included, into out (cap bytes). */
static void json_str(const char *s, char *out, size_t cap)
{
	size_t n = 0;
	out[n++] = '"';
	for (; *s && n + 8 < cap; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\') {
			out[n++] = '\\';
			out[n++] = (char)ch;
		} else if (ch < 0x20) {
			n += (size_t)snprintf(out + n, cap - n, "\\u%04x", ch);
		} else {
			out[n++] = (char)ch;
		}
	}
	out[n++] = '"';
	out[n] = '\0';
}

/* A tier: store's tiers: each one's share of the hits (keys found by a
 * lookup or a load, counted in the highest tier that had them), the rate
 * of its reads (bytes its gets served over the time of the get calls it
 * was asked, misses included), its promotions up, spills down and
 * failures. */
static void report_tiers(const bench_opts *o, const kvl_cli_tier *tr,
                         size_t n)
{
	uint64_t all = 0;
	for (size_t i = 0; i < n; i++)
		all += tr[i].hits;
	if (o->json) {
		printf(",\"tiers\":[");
		for (size_t i = 0; i < n; i++) {
			char js[512];
			json_str(tr[i].uri, js, sizeof js);
			printf("%s{\"uri\":%s,\"hits\":%llu,\"hit_share\":%.4f,"
			       "\"read_gbps\":%.3f,"
			       "\"promotions\":%llu,\"spills\":%llu,"
			       "\"spills_lost\":%llu,\"failures\":%llu}",
			       i ? "," : "", js, (unsigned long long)tr[i].hits,
			       all ? (double)tr[i].hits / (double)all : 0,
			       gbps(tr[i].read_bytes, tr[i].read_ns),
			       (unsigned long long)tr[i].promotions,
			       (unsigned long long)tr[i].spills,
			       (unsigned long long)tr[i].spills_lost,
			       (unsigned long long)tr[i].failures);
		}
		printf("]");
		return;
	}
	for (size_t i = 0; i < n; i++)
		printf("  tier %zu         %s: %.1f %% of hits (%llu), reads "
		       "%.2f GB/s, %llu promoted up, %llu spilled down (%llu "
		       "lost), %llu failures\n",
		       i, tr[i].uri,
		       all ? 100.0 * (double)tr[i].hits / (double)all : 0,
		       (unsigned long long)tr[i].hits,
		       gbps(tr[i].read_bytes, tr[i].read_ns),
		       (unsigned long long)tr[i].promotions,
		       (unsigned long long)tr[i].spills,
		       (unsigned long long)tr[i].spills_lost,
		       (unsigned long long)tr[i].failures);
}

static void report(const bench_opts *o, const bench_ctx *c, double base,
                   const kvl_store_stats *ss, double wall_s,
                   size_t slot_bytes, const kvl_cli_tier *tiers,
                   size_t n_tiers)
{
	const bench_totals *t = &c->t;
	double hit_ratio = t->pages ? (double)t->hit_pages / (double)t->pages
	                            : 0;
	double load = gbps(t->load_bytes, t->load_ns);
	double off = gbps(t->offload_bytes, t->offload_ns);
	/* Overlap: the forward passes against the ideal of fully hidden loads:
	 * max(Σload, Σcompute) plus the first layer's load, which nothing can
	 * hide. */
	uint64_t ideal = (t->load_ns > t->compute_ns ? t->load_ns
	                                             : t->compute_ns) +
	                 t->first_layer_ns;
	double overlap = ideal ? (double)t->fwd_ns / (double)ideal : 0;
	char shown[512];
	kvl_cli_uri(o->store_uri, shown, sizeof shown);
	if (o->json) {
		char js[1024];
		json_str(shown, js, sizeof js);
		printf("{\"store\":%s,\"device\":\"%s\","
		       "\"page_bytes\":%zu,\"pages\":%llu,"
		       "\"hit_pages\":%llu,\"hit_ratio\":%.4f,"
		       "\"loaded_pages\":%llu,\"offloaded_pages\":%llu,"
		       "\"failed_loads\":%llu,\"failed_offloads\":%llu,"
		       "\"lost_pages\":%llu,\"bad_pages\":%llu,"
		       "\"load_gbps\":%.3f,\"offload_gbps\":%.3f,"
		       "\"memcpy_gbps\":%.3f,\"load_vs_memcpy\":%.3f,"
		       "\"compute_us_per_layer\":%llu,\"sum_load_ms\":%.3f,"
		       "\"sum_compute_ms\":%.3f,\"first_layer_ms\":%.3f,"
		       "\"forward_ms\":%.3f,\"forward_vs_ideal\":%.4f,"
		       "\"lookup_us\":%.2f,\"evictions\":%llu,"
		       "\"wall_s\":%.3f,\"verified\":%s",
		       js, o->cuda ? "cuda" : "host", slot_bytes,
		       (unsigned long long)t->pages,
		       (unsigned long long)t->hit_pages, hit_ratio,
		       (unsigned long long)t->loaded_pages,
		       (unsigned long long)t->offloaded_pages,
		       (unsigned long long)t->failed_loads,
		       (unsigned long long)t->failed_offloads,
		       (unsigned long long)t->lost_pages,
		       (unsigned long long)t->bad_pages, load, off, base,
		       base > 0 ? load / base : 0,
		       (unsigned long long)o->compute_us, ms(t->load_ns),
		       ms(t->compute_ns), ms(t->first_layer_ns), ms(t->fwd_ns),
		       overlap,
		       t->lookups ? (double)t->lookup_ns / 1e3 /
		                            (double)t->lookups
		                  : 0,
		       (unsigned long long)ss->evictions, wall_s,
		       t->bad_pages ? "false" : "true");
		if (n_tiers)
			report_tiers(o, tiers, n_tiers);
		/* --stats json: the linker's stats as a member, so that the
		 * output is one JSON document. */
		int rc = 0;
		char *stats = o->stats ? kvl_cli_render_stats(c->lk, NULL,
		                                              KVL_STATS_JSON,
		                                              &rc)
		                       : NULL;
		if (stats) {
			stats[strcspn(stats, "\n")] = '\0';
			printf(",\"stats\":%s", stats);
		}
		free(stats);
		printf("}\n");
		return;
	}
	printf("kvlink bench: %llu conversations x %llu turns on %s, pool in "
	       "%s memory\n",
	       (unsigned long long)o->conversations,
	       (unsigned long long)o->turns, shown,
	       o->cuda ? "GPU" : "host");
	printf("  model          %llu layers, %llu KV heads x %llu, %llu-byte "
	       "dtype, page %llu tokens = %.2f MiB\n",
	       (unsigned long long)o->layers, (unsigned long long)o->kv_heads,
	       (unsigned long long)o->head_dim,
	       (unsigned long long)o->dtype_bytes,
	       (unsigned long long)o->page_size,
	       (double)slot_bytes / 1048576.0);
	printf("  pages          %llu requested, %llu restored (hit ratio "
	       "%.1f %%)\n",
	       (unsigned long long)t->pages, (unsigned long long)t->hit_pages,
	       100 * hit_ratio);
	printf("  load           %.2f GB/s layer-wise = %.2f x %s "
	       "(%.2f GB/s, same run)\n",
	       load, base > 0 ? load / base : 0,
	       o->cuda ? "the PCIe ceiling" : "single-thread memcpy", base);
	printf("  offload        %llu pages stored, %.2f GB/s\n",
	       (unsigned long long)t->offloaded_pages, off);
	printf("  overlap        forward %.1f ms vs max(load %.1f, compute "
	       "%.1f) + first layer %.1f ms = %.3f x ideal\n",
	       ms(t->fwd_ns), ms(t->load_ns), ms(t->compute_ns),
	       ms(t->first_layer_ns), overlap);
	printf("  lookup         %.1f us per request\n",
	       t->lookups ? (double)t->lookup_ns / 1e3 / (double)t->lookups
	                  : 0);
	printf("  failures       %llu loads, %llu offloads, %llu pages "
	       "lost after lookup\n",
	       (unsigned long long)t->failed_loads,
	       (unsigned long long)t->failed_offloads,
	       (unsigned long long)t->lost_pages);
	if (ss->objects == UINT64_MAX) /* a store that cannot tell */
		printf("  store          unknown objects, %llu evictions\n",
		       (unsigned long long)ss->evictions);
	else
		printf("  store          %llu objects, %llu evictions\n",
		       (unsigned long long)ss->objects,
		       (unsigned long long)ss->evictions);
	report_tiers(o, tiers, n_tiers);
	printf("  verified       %s\n",
	       t->bad_pages ? "NO: pages reported valid hold wrong bytes"
	                    : "every byte of every page reported valid");
	printf("  wall           %.2f s\n", wall_s);
}

static int run_bench(const bench_opts *o)
{
	bench_pool pool = {0};
	pool.comp_bytes = o->page_size * o->kv_heads * o->head_dim *
	                  o->dtype_bytes;
	pool.slot_bytes = pool.comp_bytes * 2 * o->layers;
	size_t pool_bytes = pool.slot_bytes * o->slots;
	pool.cuda = o->cuda;
	pool.mem = o->cuda ? kvl_cli_gpu_alloc(pool_bytes)
	                   : aligned_alloc(64, pool_bytes);
	pool.scratch = o->cuda ? malloc(pool.slot_bytes) : NULL;
	uint8_t *copy_src = o->cuda ? kvl_cli_pinned_alloc(pool_bytes)
	                            : aligned_alloc(64, pool_bytes);
	kvl_layout *layout = NULL;
	kvl_store *st = NULL;
	uint64_t *tokens = NULL;
	kvl_hash *h = NULL;
	bench_ctx c = {.o = o, .pool = &pool};
	int rc = 1;
	char err[512];
	if (!pool.mem || !copy_src || (o->cuda && !pool.scratch)) {
		fprintf(stderr, "kvlink bench: cannot allocate 2 x %zu bytes%s\n",
		        pool_bytes, o->cuda ? " (GPU and pinned host)" : "");
		goto out;
	}
	if (!o->cuda)
		memset(pool.mem, 0, pool_bytes);
	memset(copy_src, 1, pool_bytes);
	if (build_layout(o, &pool, &layout))
		goto out;
	if (kvl_store_open(o->store_uri, &st, err, sizeof err)) {
		char shown[512];
		fprintf(stderr, "kvlink bench: store '%s': %s\n",
		        kvl_cli_uri(o->store_uri, shown, sizeof shown), err);
		goto out;
	}
	kvl_linker_opts lo = KVL_LINKER_OPTS_INIT;
	lo.gpu_copy = o->gpu_copy;
	if (kvl_linker_open(st, layout, &lo, &c.lk, err, sizeof err)) {
		fprintf(stderr, "kvlink bench: linker: %s\n", err);
		goto out;
	}
	double base = memcpy_gbps(&pool, copy_src, o);

	size_t max_tokens = o->system_tokens + o->turns * o->turn_tokens;
	size_t max_pages = max_tokens / o->page_size;
	tokens = malloc(max_tokens * sizeof *tokens);
	h = malloc((max_pages + 1) * sizeof *h);
	if (!tokens || !h)
		goto out;
	uint64_t seed = o->seed;
	kvl_cli_progress bar;
	kvl_cli_progress_start(&bar, o->progress, "turns");
	uint64_t t_start = kvl_cli_now_ns();
	for (size_t i = 0; i < o->system_tokens; i++)
		tokens[i] = splitmix(&seed) % 128000;
	for (uint64_t conv = 0; conv < o->conversations; conv++) {
		size_t len = o->system_tokens;
		for (uint64_t turn = 0; turn < o->turns; turn++) {
			for (uint64_t i = 0; i < o->turn_tokens; i++)
				tokens[len++] = splitmix(&seed) % 128000;
			size_t n;
			kvl_hash_pages(tokens, len, o->page_size, NULL, h,
			               max_pages + 1, &n);
			if (run_turn(&c, h, n)) {
				kvl_cli_progress_end(&bar);
				goto out;
			}
			kvl_cli_progress_show(&bar, conv * o->turns + turn + 1,
			                      o->conversations * o->turns, NULL);
		}
	}
	kvl_cli_progress_end(&bar);
	double wall_s = (double)(kvl_cli_now_ns() - t_start) / 1e9;
	kvl_store_stats ss;
	kvl_store_stats_get(st, &ss);
	kvl_cli_tier tiers[KVL_CLI_TIERS_MAX];
	size_t n_tiers = kvl_cli_tiers(st, tiers, KVL_CLI_TIERS_MAX);
	report(o, &c, base, &ss, wall_s, pool.slot_bytes, tiers, n_tiers);
	if (o->stats && !o->json)
		kvl_cli_print_stats(c.lk, NULL, o->stats_fmt);
	rc = c.t.bad_pages ? 1 : 0;
out:
	free(tokens);
	free(h);
	kvl_linker_close(c.lk);
	kvl_store_close(st);
	kvl_layout_free(layout);
	if (o->cuda) {
		kvl_cli_gpu_free(pool.mem);
		kvl_cli_pinned_free(copy_src);
	} else {
		free(pool.mem);
		free(copy_src);
	}
	free(pool.scratch);
	return rc;
}

static void bench_usage(FILE *f)
{
	fprintf(f,
	        "usage: kvlink bench [OPTIONS]\n"
	        "  --store URI          store to use (default $KVL_STORE, else\n"
	        "                       mem:?capacity=2GiB)\n"
	        "  --device host|cuda   where the engine's pool lives (host)\n"
	        "  --gpu-copy MODE      GPU loads: auto, kernel or dma (auto)\n"
	        "  --layers N           model layers (32)\n"
	        "  --kv-heads N         KV heads (8)\n"
	        "  --head-dim N         head dimension (128)\n"
	        "  --dtype-bytes N      bytes per element (2)\n"
	        "  --page-size N        tokens per page (16)\n"
	        "  --conversations N    conversations (8)\n"
	        "  --turns N            turns per conversation (4)\n"
	        "  --system-tokens N    shared system prompt tokens (1024)\n"
	        "  --turn-tokens N      new tokens per turn (512)\n"
	        "  --slots N            page slots of each pool (256)\n"
	        "  --seed N             token seed (1)\n"
	        "  --compute-us N       simulated compute per layer, us (2000)\n"
	        "  --progress           a progress bar even when stderr is no terminal\n"
	        "  --no-progress        no progress bar (shown only on a terminal)\n"
	        "  --json               one JSON object instead of text\n"
	        "  --stats FORMAT       then the linker's stats: json or prometheus\n"
	        "                       (with --json: json, as its member \"stats\")\n"
	        "Options take their value as --opt VALUE or --opt=VALUE.\n");
}

int kvl_cmd_bench(int argc, char **argv)
{
	bench_opts o = {.layers = 32, .kv_heads = 8, .head_dim = 128,
	                .dtype_bytes = 2, .page_size = 16, .conversations = 8,
	                .turns = 4, .system_tokens = 1024, .turn_tokens = 512,
	                .slots = 256, .seed = 1, .compute_us = 2000,
	                .store_uri = kvl_cli_default_store("mem:?capacity=2GiB"),
	                .progress = isatty(2)};
	static const struct {
		const char *name;
		size_t off;
	} num[] = {
		{"--layers", offsetof(bench_opts, layers)},
		{"--kv-heads", offsetof(bench_opts, kv_heads)},
		{"--head-dim", offsetof(bench_opts, head_dim)},
		{"--dtype-bytes", offsetof(bench_opts, dtype_bytes)},
		{"--page-size", offsetof(bench_opts, page_size)},
		{"--conversations", offsetof(bench_opts, conversations)},
		{"--turns", offsetof(bench_opts, turns)},
		{"--system-tokens", offsetof(bench_opts, system_tokens)},
		{"--turn-tokens", offsetof(bench_opts, turn_tokens)},
		{"--slots", offsetof(bench_opts, slots)},
		{"--seed", offsetof(bench_opts, seed)},
		{"--compute-us", offsetof(bench_opts, compute_us)},
	};
	enum { O_JSON = 256, O_STATS, O_DEVICE, O_GPU_COPY, O_STORE,
	       O_PROGRESS, O_NO_PROGRESS, O_NUM = 512 };
	size_t n_num = sizeof num / sizeof num[0];
	struct option opts[sizeof num / sizeof num[0] + 9] = {
		{"help", no_argument, NULL, 'h'},
		{"json", no_argument, NULL, O_JSON},
		{"stats", required_argument, NULL, O_STATS},
		{"device", required_argument, NULL, O_DEVICE},
		{"gpu-copy", required_argument, NULL, O_GPU_COPY},
		{"store", required_argument, NULL, O_STORE},
		{"progress", no_argument, NULL, O_PROGRESS},
		{"no-progress", no_argument, NULL, O_NO_PROGRESS}};
	for (size_t k = 0; k < n_num; k++)
		opts[8 + k] = (struct option){num[k].name + 2, required_argument,
		                              NULL, O_NUM + (int)k};
	const char *v;
	optind = 1;
	for (int c; (c = kvl_cli_next_opt("bench", argc, argv, opts, &v)) != -1;) {
		if (c == 'h') {
			bench_usage(stdout);
			return 0;
		} else if (c == O_JSON) {
			o.json = 1;
		} else if (c == O_STATS) {
			if (kvl_cli_stats_format(v, &o.stats_fmt))
				return kvl_cli_usage_error(
					"bench", "--stats takes json or prometheus");
			o.stats = 1;
		} else if (c == O_DEVICE) {
			if (strcmp(v, "cuda") && strcmp(v, "host"))
				return kvl_cli_usage_error(
					"bench", "--device takes host or cuda");
			o.cuda = !strcmp(v, "cuda");
			if (o.cuda && !kvl_cli_gpu_usable()) {
				fprintf(stderr, "kvlink bench: --device cuda: %s\n",
				        kvl_has_feature("cuda")
				                ? "no usable CUDA device"
				                : "this kvlink has no CUDA");
				return 1;
			}
		} else if (c == O_GPU_COPY) {
			static const char *modes[] = {"auto", "kernel", "dma"};
			uint32_t m = 0;
			while (m < 3 && strcmp(v, modes[m]))
				m++;
			if (m == 3)
				return kvl_cli_usage_error(
					"bench",
					"--gpu-copy takes auto, kernel or dma");
			o.gpu_copy = m;
		} else if (c == O_STORE) {
			o.store_uri = v;
		} else if (c == O_PROGRESS || c == O_NO_PROGRESS) {
			o.progress = c == O_PROGRESS;
		} else if (c >= O_NUM && c < O_NUM + (int)n_num) {
			const char *a = num[c - O_NUM].name;
			uint64_t *field =
				(uint64_t *)((char *)&o + num[c - O_NUM].off);
			if (kvl_cli_parse_u64(v, field))
				return kvl_cli_usage_error(
					"bench", "%s needs a non-negative integer",
					a);
			if (*field == 0 && strcmp(a, "--seed") &&
			    strcmp(a, "--compute-us"))
				return kvl_cli_usage_error("bench", "%s must be > 0",
				                           a);
		} else {
			return 2;
		}
	}
	if (optind < argc)
		return kvl_cli_usage_error("bench", "unexpected argument '%s'",
		                           argv[optind]);
	if (o.json && o.stats && o.stats_fmt != KVL_STATS_JSON)
		return kvl_cli_usage_error(
			"bench", "--json prints one JSON document: --stats "
			         "prometheus goes without --json");
	if (o.slots < (o.system_tokens + o.turns * o.turn_tokens) / o.page_size)
		return kvl_cli_usage_error(
			"bench",
			"--slots %llu is smaller than the longest prompt's pages",
			(unsigned long long)o.slots);
	return run_bench(&o);
}
