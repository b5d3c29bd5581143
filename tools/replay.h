/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay.h — `kvlink replay` (cmd_replay.c parses its options): a trace
 * replayed through the real linker and embedded store (replay.c), the
 * results printed (replay_print.c) and plotted (replay_plot.c).
 *
 * What a replay does, per request in file order: hash_id i becomes the page
 * hash whose first 8 bytes are i (little-endian) and whose other bytes are
 * 0; a request's blocks are its whole ones (input_length / block_tokens of
 * them, as engines store whole pages only), or every hash_id with
 * --partial-blocks; kvl_linker_lookup over them gives the longest present
 * prefix (the hit blocks); then kvl_linker_offload of every block of the
 * request (the offloader skips present ones, touching them) and
 * kvl_linker_flush, so the next lookup sees them. Blocks are objects of
 * --block-bytes bytes in one pool of host slots, so a trace replays in
 * seconds. Results: token hit ratio = sum min(hit blocks x block_tokens,
 * input_length) / sum input_length; block hit ratio = hit blocks / blocks;
 * requests per second of the replay loop; the store's evictions.
 *
 * Capacities: --capacity-blocks N is the store option max_objects=N (exact,
 * in objects); --capacity BYTES the store's byte capacity (objects cost
 * their size, key and 64 bytes); with neither, the capacity is room for
 * every block of the trace ("unlimited": nothing is ever evicted).
 * --sweep lists capacities in blocks and replays each with each policy;
 * --plot draws the token hit ratios as an SVG.
 *
 * --store URI replays once over that store instead (any scheme; its
 * capacities are the URI's). With --load, the hit blocks of each request
 * are loaded (kvl_linker_load, all layers) before its offload, as an
 * engine restores them, so a tier: store promotes them. Over a tier:
 * store the results add each tier's block hits: the keys its lookups
 * found first in that tier (the tier's hits counted around each lookup,
 * so the offloads' own existence checks are left out).
 */
#ifndef KVL_TOOL_REPLAY_H
#define KVL_TOOL_REPLAY_H

#include <stdio.h>

#include "cli.h"
#include "kvlink.h"
#include "trace.h"

#define RP_MAX_POLICIES 8
#define RP_MAX_SWEEP 64
#define RP_UNLIMITED UINT64_MAX

typedef struct rp_opts {
	const char *trace;
	uint64_t block_bytes, block_tokens;
	uint64_t capacity_blocks; /* RP_UNLIMITED: none */
	uint64_t capacity_bytes;  /* 0: none */
	const char *policies[RP_MAX_POLICIES];
	size_t n_policies;        /* 0: the store's default */
	uint64_t sweep[RP_MAX_SWEEP];
	size_t n_sweep;
	const char *plot;
	int json, skip_bad, progress;
	int partial_blocks; /* look up and store a partly filled last block */
	const char *store;  /* --store URI, or NULL: mem: built per run */
	char store_shown[512]; /* --store's URI redacted, for the output */
	int load;           /* --load: load the hit blocks before offloading */
} rp_opts;

typedef struct rp_result {
	const char *policy;
	uint64_t capacity_blocks; /* RP_UNLIMITED: none */
	uint64_t hit_blocks, blocks, hit_tokens, evictions, stored;
	uint64_t loaded_blocks; /* --load: blocks loaded valid */
	double wall_s;
	/* Over a tier: store: its tiers, and the blocks the lookups found
	 * first in each. */
	kvl_cli_tier tiers[KVL_CLI_TIERS_MAX];
	size_t n_tiers;
	uint64_t tier_hit_blocks[KVL_CLI_TIERS_MAX];
} rp_result;

static inline double rp_ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

/* The engine's side of the replay: one pool of host slots, one layer. */
typedef struct rp_env {
	kvl_layout *layout;
	uint8_t *slots_mem;
	size_t *slots;       /* 0, 1, …: page i of a request uses slot i */
	kvl_hash *hashes;
	size_t object_size;  /* header + payload */
} rp_env;

/* The engine's pool for the trace; free it with rp_env_free. 0, or 1 after
 * printing why. */
int rp_env_init(rp_env *e, const rp_opts *o, const rp_trace *t);
void rp_env_free(rp_env *e);

/* Replays the trace once with `policy` (NULL: the store's default) at
 * capacity `cap_blocks` into *res. 0, or 1 after printing why. */
int rp_replay_one(const rp_opts *o, const rp_trace *t, rp_env *e,
                  const char *policy, uint64_t cap_blocks, rp_result *res);

/* Results as JSON lines, a table (header and rows) or text. */
void rp_print_json(const rp_opts *o, const rp_trace *t, const rp_result *r);
void rp_print_header(const rp_opts *o, const rp_trace *t);
void rp_print_row(const rp_opts *o, const rp_trace *t, const rp_result *r);
void rp_print_text(const rp_opts *o, const rp_trace *t, const rp_result *r);

/* The token hit ratios of results[n_policies × o->n_sweep] as an SVG at
 * o->plot. 0, or 1 after printing why. */
int rp_write_plot(const rp_opts *o, const rp_trace *t,
                  const rp_result *results, size_t n_policies);

#endif
