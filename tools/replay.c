/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay.c — one replay of a trace (replay.h): the engine's pool of host
 * slots, lookups and offloads through a real linker over the embedded
 * store, and the counts that the hit ratios come from.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "replay.h"

void rp_env_free(rp_env *e)
{
	kvl_layout_free(e->layout);
	free(e->slots_mem);
	free(e->slots);
	free(e->hashes);
}

int rp_env_init(rp_env *e, const rp_opts *o, const rp_trace *t)
{
	char err[256];
	size_t pages = t->max_blocks ? t->max_blocks : 1;
	size_t bytes = (pages * o->block_bytes + 63) & ~(size_t)63;
	memset(e, 0, sizeof *e);
	e->slots_mem = aligned_alloc(64, bytes);
	e->slots = malloc(pages * sizeof *e->slots);
	e->hashes = calloc(pages, sizeof *e->hashes);
	if (!e->slots_mem || !e->slots || !e->hashes) {
		fprintf(stderr, "kvlink replay: out of memory for %zu slots\n",
		        pages);
		return 1;
	}
	memset(e->slots_mem, 0, bytes);
	for (size_t i = 0; i < pages; i++)
		e->slots[i] = i;
	int pool, rc = kvl_layout_create("kvlink-replay", (uint32_t)o->block_tokens,
	                                 NULL, &e->layout, err, sizeof err);
	if (rc) {
		fprintf(stderr, "kvlink replay: layout: %s\n", err);
		return 1;
	}
	kvl_buffer b = {.base = e->slots_mem, .page_stride = o->block_bytes,
	                .page_bytes = o->block_bytes, .num_pages = pages,
	                .mem = KVL_MEM_HOST};
	rc = kvl_layout_add_pool(e->layout, "kv", KVL_HIT_ALL_PAGES, 0, 0,
	                         &pool);
	if (rc == 0)
		rc = kvl_layout_add_buffer(e->layout, pool, "kv", 0, &b);
	if (rc == 0)
		rc = kvl_layout_finalize(e->layout);
	if (rc == 0)
		rc = kvl_layout_object_size(e->layout, pool, &e->object_size,
		                            NULL);
	if (rc) {
		fprintf(stderr, "kvlink replay: layout: %s\n",
		        kvl_layout_errmsg(e->layout));
		return 1;
	}
	return 0;
}

/* The store URI of one run into buf. */
static void store_uri(char *buf, size_t len, const rp_opts *o,
                      const rp_trace *t, const rp_env *e,
                      const char *policy, uint64_t cap_blocks)
{
	uint64_t bytes = o->capacity_bytes;
	if (o->store) {
		snprintf(buf, len, "%s", o->store);
		return;
	}
	if (!bytes) {
		/* Room for every block of the trace: only max_objects (if
		 * any) limits. Objects cost size + key + 64 bytes. */
		bytes = (uint64_t)t->n_ids *
		                (e->object_size + KVL_KEY_MAX + 64) +
		        (1u << 20);
	}
	int n = snprintf(buf, len, "mem:?capacity=%llu",
	                 (unsigned long long)bytes);
	if (cap_blocks != RP_UNLIMITED)
		n += snprintf(buf + n, len - (size_t)n, "&max_objects=%llu",
		              (unsigned long long)cap_blocks);
	if (policy)
		snprintf(buf + n, len - (size_t)n, "&policy=%s", policy);
}

/* Loads the first n blocks of request i (whose hashes are in e) into the
 * slots they came from, every layer: 0, or 1 after printing why. */
static int load_hits(kvl_linker *lk, rp_env *e, size_t i, size_t n,
                     rp_result *res)
{
	const size_t *sl[1] = {e->slots};
	uint64_t id = (uint64_t)i | (1ull << 63), b = 0;
	kvl_completion c;
	size_t got = 0;
	int rc = kvl_linker_load(lk, id, e->hashes, n, sl);
	if (rc == 0)
		rc = kvl_linker_start(lk, &b);
	if (rc == 0 && kvl_linker_wait(lk, b, kvl_linker_layers(lk) - 1,
	                               60000) == KVL_ETIMEDOUT)
		rc = KVL_ETIMEDOUT;
	if (rc == 0) /* a failed page shows in the completion */
		rc = kvl_linker_poll(lk, &c, 1, &got, 60000);
	if (rc || got != 1) {
		fprintf(stderr, "kvlink replay: request %zu: load: %s (%s)\n",
		        i + 1, rc ? kvl_strerror(rc) : "no completion",
		        kvl_linker_errmsg(lk));
		return 1;
	}
	res->loaded_blocks += c.valid_pages;
	return 0;
}

/* Adds to res the blocks that tier k's hits grew by since `before`. */
static void count_tier_hits(kvl_store *st, const kvl_cli_tier *before,
                            rp_result *res)
{
	kvl_cli_tier now[KVL_CLI_TIERS_MAX];
	size_t n = kvl_cli_tiers(st, now, KVL_CLI_TIERS_MAX);
	for (size_t k = 0; k < n && k < res->n_tiers; k++)
		res->tier_hit_blocks[k] += now[k].hits - before[k].hits;
}

/* One replay of the whole trace. 0, or 1 after printing why. */
int rp_replay_one(const rp_opts *o, const rp_trace *t, rp_env *e,
                      const char *policy, uint64_t cap_blocks,
                      rp_result *res)
{
	char uri[1024], err[512];
	kvl_store *st = NULL;
	kvl_linker *lk = NULL;
	int rc = 1;

	memset(res, 0, sizeof *res);
	res->policy = policy     ? policy
	              : o->store ? "store"
	                         : kvl_mem_policy_name(0);
	res->capacity_blocks = cap_blocks;
	store_uri(uri, sizeof uri, o, t, e, policy, cap_blocks);
	if (kvl_store_open(uri, &st, err, sizeof err)) {
		char shown[1024];
		fprintf(stderr, "kvlink replay: store '%s': %s\n",
		        kvl_cli_uri(uri, shown, sizeof shown), err);
		return 1;
	}
	res->n_tiers = kvl_cli_tiers(st, res->tiers, KVL_CLI_TIERS_MAX);
	kvl_linker_opts lo = KVL_LINKER_OPTS_INIT;
	if (t->max_blocks > (1u << 20))
		lo.max_request_pages = (uint32_t)t->max_blocks;
	if (kvl_linker_open(st, e->layout, &lo, &lk, err, sizeof err)) {
		fprintf(stderr, "kvlink replay: linker: %s\n", err);
		goto out;
	}
	char label[64];
	if (cap_blocks == RP_UNLIMITED)
		snprintf(label, sizeof label, "(%s, unlimited)", res->policy);
	else
		snprintf(label, sizeof label, "(%s, %llu blocks)", res->policy,
		         (unsigned long long)cap_blocks);
	kvl_cli_progress bar;
	kvl_cli_progress_start(&bar, o->progress, "requests");
	uint64_t t0 = kvl_cli_now_ns();
	for (size_t i = 0; i < t->n_reqs; i++) {
		const rp_req *r = &t->reqs[i];
		const uint64_t *ids = t->ids + r->first;
		size_t n = r->n;
		if (!o->partial_blocks && r->input_len / o->block_tokens < n)
			n = (size_t)(r->input_len / o->block_tokens);
		for (size_t j = 0; j < n; j++) {
			for (int k = 0; k < 8; k++) /* little-endian */
				e->hashes[j].bytes[k] = (uint8_t)(ids[j] >> (8 * k));
			/* The payload starts with the id: each block's bytes
			 * are its own. */
			memcpy(e->slots_mem + j * o->block_bytes,
			       e->hashes[j].bytes, 8);
		}
		size_t hit = 0;
		/* A request without blocks has nothing to look up (and a
		 * lookup of 0 pages as a linker's first one would memset
		 * NULL). */
		kvl_cli_tier before[KVL_CLI_TIERS_MAX];
		if (n && res->n_tiers)
			kvl_cli_tiers(st, before, KVL_CLI_TIERS_MAX);
		if (n && kvl_linker_lookup(lk, e->hashes, n, NULL, &hit)) {
			fprintf(stderr, "kvlink replay: request %zu: lookup: "
			                "%s\n",
			        i + 1, kvl_linker_errmsg(lk));
			goto out;
		}
		if (n && res->n_tiers)
			count_tier_hits(st, before, res);
		if (hit && o->load && load_hits(lk, e, i, hit, res))
			goto out;
		res->hit_blocks += hit;
		res->blocks += n;
		uint64_t ht = (uint64_t)hit * o->block_tokens;
		res->hit_tokens += ht < r->input_len ? ht : r->input_len;
		if (n) {
			const size_t *sl[1] = {e->slots};
			kvl_completion c;
			size_t got = 0;
			int orc = kvl_linker_offload(lk, i, e->hashes, n, sl,
			                             NULL);
			if (orc == 0)
				orc = kvl_linker_flush(lk, 60000);
			if (orc == 0)
				orc = kvl_linker_poll(lk, &c, 1, &got, 60000);
			if (orc == 0 && got == 1 && c.status)
				orc = c.status;
			if (orc || got != 1) {
				fprintf(stderr, "kvlink replay: request %zu: "
				                "offload: %s (%s)\n",
				        i + 1,
				        orc ? kvl_strerror(orc) : "no completion",
				        kvl_linker_errmsg(lk));
				goto out;
			}
		}
		kvl_cli_progress_show(&bar, i + 1, t->n_reqs, label);
	}
	kvl_cli_progress_end(&bar);
	res->wall_s = (double)(kvl_cli_now_ns() - t0) / 1e9;
	kvl_store_stats ss;
	kvl_store_stats_get(st, &ss);
	res->evictions = ss.evictions;
	res->stored = ss.puts;
	if (res->n_tiers) /* the figures at the end */
		res->n_tiers = kvl_cli_tiers(st, res->tiers, KVL_CLI_TIERS_MAX);
	rc = 0;
out:
	kvl_linker_close(lk);
	kvl_store_close(st);
	return rc;
}

