/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd_replay.c — `kvlink replay`: options, then the trace replayed once per
 * policy and capacity (replay.h says what a replay does).
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "replay.h"

static void replay_usage(FILE *f)
{
	fprintf(f,
	        "usage: kvlink replay [OPTIONS] TRACE.jsonl   (- reads stdin)\n"
	        "Replays a Mooncake trace (timestamp, input_length, "
	        "output_length, hash_ids)\nthrough the linker and the embedded "
	        "store; reports token and block hit ratios.\n"
	        "  --capacity-blocks N  store at most N blocks (store option "
	        "max_objects)\n"
	        "  --capacity BYTES     store byte capacity (K, M, G, T, KiB, "
	        "... suffixes)\n"
	        "                       (neither: unlimited)\n"
	        "  --policy NAME[,NAME] eviction policy: ");
	for (size_t i = 0; kvl_mem_policy_name(i); i++)
		fprintf(f, "%s%s%s", i ? ", " : "", kvl_mem_policy_name(i),
		        i ? "" : " (default)");
	fprintf(f,
	        "\n"
	        "  --sweep CAP,CAP,...  replay at each capacity in blocks "
	        "(\"unlimited\" too),\n"
	        "                       with each --policy (default: all)\n"
	        "  --plot FILE.svg      with --sweep: draw hit ratio against "
	        "capacity\n"
	        "  --block-bytes N      bytes of each stored block (64; a "
	        "multiple of 8)\n"
	        "  --block-tokens N     tokens per hash_id block (512)\n"
	        "  --partial-blocks     look up and store a request's last, "
	        "partly filled\n"
	        "                       block too (engines store whole "
	        "blocks only)\n"
	        "  --store URI          replay once over this store instead "
	        "(capacities in\n"
	        "                       the URI; a tier: store reports block "
	        "hits per tier)\n"
	        "  --load               load each request's hit blocks before "
	        "offloading it,\n"
	        "                       as an engine does (a tier: store then "
	        "promotes them)\n"
	        "  --json               one JSON object per replay\n"
	        "  --skip-bad           count and skip malformed lines "
	        "instead of stopping\n"
	        "  --progress           a progress bar even when stderr is no "
	        "terminal\n"
	        "  --no-progress        no progress bar (shown only on a "
	        "terminal)\n");
}

static int known_policy(const char *name)
{
	for (size_t i = 0; kvl_mem_policy_name(i); i++)
		if (!strcmp(name, kvl_mem_policy_name(i)))
			return 1;
	return 0;
}

/* Splits a comma-separated list in place into items (at most cap). -1 when
 * an item is empty or there are too many. */
static int split_list(char *s, const char **items, size_t cap, size_t *n)
{
	*n = 0;
	for (char *p = s;;) {
		char *c = strchr(p, ',');
		if (c)
			*c = 0;
		if (!*p || *n == cap)
			return -1;
		items[(*n)++] = p;
		if (!c)
			return 0;
		p = c + 1;
	}
}

int kvl_cmd_replay(int argc, char **argv)
{
	rp_opts o = {.block_bytes = 64, .block_tokens = 512,
	             .capacity_blocks = RP_UNLIMITED,
	             .progress = isatty(2)};
	int have_cap_blocks = 0;
	char *policy_arg = NULL, *sweep_arg = NULL;

	enum { O_JSON = 256, O_SKIP_BAD, O_PROGRESS, O_NO_PROGRESS,
	       O_PARTIAL,
	       O_CAP_BLOCKS, O_CAPACITY, O_BLOCK_BYTES, O_BLOCK_TOKENS, O_POLICY, O_SWEEP,
	       O_PLOT, O_STORE, O_LOAD };
	static const struct option opts[] = {
		{"help", no_argument, NULL, 'h'},
		{"json", no_argument, NULL, O_JSON},
		{"skip-bad", no_argument, NULL, O_SKIP_BAD},
		{"progress", no_argument, NULL, O_PROGRESS},
		{"no-progress", no_argument, NULL, O_NO_PROGRESS},
		{"partial-blocks", no_argument, NULL, O_PARTIAL},
		{"capacity-blocks", required_argument, NULL, O_CAP_BLOCKS},
		{"capacity", required_argument, NULL, O_CAPACITY},
		{"block-bytes", required_argument, NULL, O_BLOCK_BYTES},
		{"block-tokens", required_argument, NULL, O_BLOCK_TOKENS},
		{"policy", required_argument, NULL, O_POLICY},
		{"sweep", required_argument, NULL, O_SWEEP},
		{"plot", required_argument, NULL, O_PLOT},
		{"store", required_argument, NULL, O_STORE},
		{"load", no_argument, NULL, O_LOAD},
		{NULL, 0, NULL, 0}};
	const char *v;
	optind = 1;
	for (int c; (c = kvl_cli_next_opt("replay", argc, argv, opts, &v)) != -1;)
		switch (c) {
		case 'h':
			replay_usage(stdout);
			return 0;
		case O_JSON:
			o.json = 1;
			break;
		case O_SKIP_BAD:
			o.skip_bad = 1;
			break;
		case O_PROGRESS:
			o.progress = 1;
			break;
		case O_NO_PROGRESS:
			o.progress = 0;
			break;
		case O_PARTIAL:
			o.partial_blocks = 1;
			break;
		case O_STORE:
			o.store = v;
			break;
		case O_LOAD:
			o.load = 1;
			break;
		case O_CAP_BLOCKS:
			if (kvl_cli_parse_u64(v, &o.capacity_blocks) ||
			    o.capacity_blocks == 0 ||
			    o.capacity_blocks == RP_UNLIMITED)
				return kvl_cli_usage_error(
					"replay", "--capacity-blocks needs an "
					          "integer >= 1 (leave it out for "
					          "unlimited)");
			have_cap_blocks = 1;
			break;
		case O_CAPACITY:
			if (kvl_parse_size(v, &o.capacity_bytes) ||
			    o.capacity_bytes == 0)
				return kvl_cli_usage_error(
					"replay", "--capacity needs a byte size "
					          "> 0, e.g. 64MiB (got '%s')",
					v);
			break;
		case O_BLOCK_BYTES:
			if (kvl_cli_parse_u64(v, &o.block_bytes) ||
			    o.block_bytes < 8 || o.block_bytes % 8 ||
			    o.block_bytes > (1u << 30))
				return kvl_cli_usage_error(
					"replay", "--block-bytes needs a multiple "
					          "of 8 from 8 to 1 GiB");
			break;
		case O_BLOCK_TOKENS:
			if (kvl_cli_parse_u64(v, &o.block_tokens) ||
			    o.block_tokens == 0 || o.block_tokens > UINT32_MAX)
				return kvl_cli_usage_error(
					"replay", "--block-tokens needs an "
					          "integer from 1 to 2^32-1");
			break;
		case O_POLICY:
			policy_arg = optarg; /* split in place */
			break;
		case O_SWEEP:
			sweep_arg = optarg;
			break;
		case O_PLOT:
			o.plot = v;
			break;
		default:
			return 2;
		}
	for (int i = optind; i < argc; i++) {
		if (o.trace)
			return kvl_cli_usage_error(
				"replay", "one trace at a time ('%s' and '%s')",
				o.trace, argv[i]);
		o.trace = argv[i];
	}
	if (!o.trace)
		return kvl_cli_usage_error("replay", "which trace? (kvlink "
		                                     "replay --help)");
	if (o.store && (have_cap_blocks || o.capacity_bytes || policy_arg ||
	                sweep_arg))
		return kvl_cli_usage_error(
			"replay", "--store replays one store as its URI says: "
			          "give its capacities and policy there, not with "
			          "--capacity, --capacity-blocks, --policy or "
			          "--sweep");
	if (o.store)
		kvl_cli_uri(o.store, o.store_shown, sizeof o.store_shown);
	if (policy_arg) {
		if (split_list(policy_arg, o.policies, RP_MAX_POLICIES,
		               &o.n_policies))
			return kvl_cli_usage_error(
				"replay", "--policy: a comma-separated list of "
				          "at most %d names",
				RP_MAX_POLICIES);
		for (size_t p = 0; p < o.n_policies; p++)
			if (!known_policy(o.policies[p]))
				return kvl_cli_usage_error(
					"replay", "--policy: unknown policy '%s' "
					          "(replay --help lists them)",
					o.policies[p]);
	}
	if (sweep_arg) {
		const char *items[RP_MAX_SWEEP];
		size_t n;
		if (have_cap_blocks)
			return kvl_cli_usage_error(
				"replay", "--sweep and --capacity-blocks "
				          "exclude each other");
		if (split_list(sweep_arg, items, RP_MAX_SWEEP, &n))
			return kvl_cli_usage_error(
				"replay", "--sweep: a comma-separated list of at "
				          "most %d capacities",
				RP_MAX_SWEEP);
		for (size_t c = 0; c < n; c++) {
			uint64_t v;
			if (!strcmp(items[c], "unlimited")) {
				v = RP_UNLIMITED;
			} else if (kvl_cli_parse_u64(items[c], &v) || v == 0 ||
			           v == RP_UNLIMITED) {
				return kvl_cli_usage_error(
					"replay", "--sweep: '%s' is not a capacity "
					          "in blocks (an integer >= 1, or "
					          "unlimited)",
					items[c]);
			}
			o.sweep[o.n_sweep++] = v;
		}
		if (!o.n_policies)
			while (kvl_mem_policy_name(o.n_policies) &&
			       o.n_policies < RP_MAX_POLICIES) {
				o.policies[o.n_policies] =
					kvl_mem_policy_name(o.n_policies);
				o.n_policies++;
			}
	} else {
		if (o.plot)
			return kvl_cli_usage_error("replay",
			                           "--plot needs --sweep");
		o.sweep[o.n_sweep++] = o.capacity_blocks;
	}
	if (!o.n_policies)
		o.policies[o.n_policies++] = NULL; /* the store's default */

	rp_trace t;
	if (rp_trace_load(&t, o.trace, o.block_tokens, o.skip_bad))
		return 1;
	rp_env env = {0};
	size_t n_runs = o.n_policies * o.n_sweep;
	rp_result *res = calloc(n_runs, sizeof *res);
	int rc = 1;
	if (!res || rp_env_init(&env, &o, &t))
		goto out;
	if (!o.json)
		rp_print_header(&o, &t);
	if (!o.json && n_runs > 1)
		printf("  %10s  %-8s %11s  %11s  %10s  %10s\n", "capacity",
		       "policy", "token hits", "block hits", "evictions",
		       "requests/s");
	for (size_t c = 0; c < o.n_sweep; c++)
		for (size_t p = 0; p < o.n_policies; p++) {
			rp_result *r = &res[p * o.n_sweep + c];
			if (rp_replay_one(&o, &t, &env, o.policies[p], o.sweep[c],
			               r))
				goto out;
			if (o.json)
				rp_print_json(&o, &t, r);
			else if (n_runs > 1)
				rp_print_row(&o, &t, r);
			else
				rp_print_text(&o, &t, r);
		}
	if (o.plot && rp_write_plot(&o, &t, res, o.n_policies))
		goto out;
	rc = 0;
out:
	rp_env_free(&env);
	free(res);
	rp_trace_free(&t);
	return rc;
}
