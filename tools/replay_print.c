/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay_print.c — a replay's results as JSON lines, a table or text.
 */
#include <string.h>

#include "replay.h"

/* Writes s as a JSON string. */
static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

/* A tier: store's tiers as a JSON member. */
static void json_tiers(const rp_result *r)
{
	printf(",\"tiers\":[");
	for (size_t k = 0; k < r->n_tiers; k++) {
		const kvl_cli_tier *tr = &r->tiers[k];
		printf("%s{\"uri\":", k ? "," : "");
		json_str(stdout, tr->uri);
		printf(",\"hit_blocks\":%llu,\"block_hit_ratio\":%.6f,"
		       "\"promotions\":%llu,\"spills\":%llu,"
		       "\"spills_lost\":%llu,\"failures\":%llu}",
		       (unsigned long long)r->tier_hit_blocks[k],
		       rp_ratio(r->tier_hit_blocks[k], r->blocks),
		       (unsigned long long)tr->promotions,
		       (unsigned long long)tr->spills,
		       (unsigned long long)tr->spills_lost,
		       (unsigned long long)tr->failures);
	}
	printf("]");
}

void rp_print_json(const rp_opts *o, const rp_trace *t,
                       const rp_result *r)
{
	printf("{\"trace\":");
	json_str(stdout, t->path);
	printf(",\"policy\":");
	if (o->store)
		printf("null"); /* the store's own, as its URI says */
	else
		json_str(stdout, r->policy);
	if (r->capacity_blocks == RP_UNLIMITED)
		printf(",\"capacity_blocks\":null");
	else
		printf(",\"capacity_blocks\":%llu",
		       (unsigned long long)r->capacity_blocks);
	printf(",\"capacity_bytes\":");
	if (o->capacity_bytes)
		printf("%llu", (unsigned long long)o->capacity_bytes);
	else
		printf("null");
	printf(",\"block_bytes\":%llu,\"block_tokens\":%llu,"
	       "\"partial_blocks\":%s,\"requests\":%zu,\"bad_lines\":%llu,\"blocks\":%llu,"
	       "\"hit_blocks\":%llu,\"input_tokens\":%llu,"
	       "\"hit_tokens\":%llu,\"token_hit_ratio\":%.6f,"
	       "\"block_hit_ratio\":%.6f,\"stored_blocks\":%llu,"
	       "\"evictions\":%llu,\"wall_s\":%.3f,"
	       "\"requests_per_s\":%.1f",
	       (unsigned long long)o->block_bytes,
	       (unsigned long long)o->block_tokens,
	       o->partial_blocks ? "true" : "false", t->n_reqs,
	       (unsigned long long)t->bad_lines,
	       (unsigned long long)r->blocks,
	       (unsigned long long)r->hit_blocks,
	       (unsigned long long)t->input_tokens,
	       (unsigned long long)r->hit_tokens,
	       rp_ratio(r->hit_tokens, t->input_tokens),
	       rp_ratio(r->hit_blocks, r->blocks),
	       (unsigned long long)r->stored,
	       (unsigned long long)r->evictions, r->wall_s,
	       r->wall_s > 0 ? (double)t->n_reqs / r->wall_s : 0);
	if (o->store) {
		printf(",\"store\":");
		json_str(stdout, o->store_shown);
	}
	if (o->load)
		printf(",\"loaded_blocks\":%llu",
		       (unsigned long long)r->loaded_blocks);
	if (r->n_tiers)
		json_tiers(r);
	printf("}\n");
	fflush(stdout);
}

void rp_print_header(const rp_opts *o, const rp_trace *t)
{
	printf("kvlink replay: %s: %zu requests, %zu blocks of %llu tokens, "
	       "%llu input tokens",
	       t->path, t->n_reqs, t->n_ids,
	       (unsigned long long)o->block_tokens,
	       (unsigned long long)t->input_tokens);
	if (t->bad_lines)
		printf(", %llu malformed lines skipped",
		       (unsigned long long)t->bad_lines);
	printf("\n");
}

static void cap_text(char *buf, size_t len, const rp_opts *o,
                     uint64_t cap_blocks)
{
	if (cap_blocks != RP_UNLIMITED)
		snprintf(buf, len, "%llu", (unsigned long long)cap_blocks);
	else if (o->capacity_bytes)
		snprintf(buf, len, "%llu B",
		         (unsigned long long)o->capacity_bytes);
	else
		snprintf(buf, len, "unlimited");
}

void rp_print_text(const rp_opts *o, const rp_trace *t,
                       const rp_result *r)
{
	char cap[48];
	cap_text(cap, sizeof cap, o, r->capacity_blocks);
	if (o->store) {
		printf("  store          %s\n", o->store_shown);
	} else {
		printf("  policy         %s\n", r->policy);
		printf("  capacity       %s%s\n", cap,
		       r->capacity_blocks != RP_UNLIMITED ? " blocks" : "");
	}
	printf("  token hits     %.2f %%  (%llu of %llu input tokens)\n",
	       100 * rp_ratio(r->hit_tokens, t->input_tokens),
	       (unsigned long long)r->hit_tokens,
	       (unsigned long long)t->input_tokens);
	printf("  block hits     %.2f %%  (%llu of %llu blocks)\n",
	       100 * rp_ratio(r->hit_blocks, r->blocks),
	       (unsigned long long)r->hit_blocks,
	       (unsigned long long)r->blocks);
	for (size_t k = 0; k < r->n_tiers; k++)
		printf("  tier %zu         %.2f %%  (%llu blocks) in %s; %llu "
		       "promoted up, %llu spilled down (%llu lost), %llu "
		       "failures\n",
		       k, 100 * rp_ratio(r->tier_hit_blocks[k], r->blocks),
		       (unsigned long long)r->tier_hit_blocks[k],
		       r->tiers[k].uri,
		       (unsigned long long)r->tiers[k].promotions,
		       (unsigned long long)r->tiers[k].spills,
		       (unsigned long long)r->tiers[k].spills_lost,
		       (unsigned long long)r->tiers[k].failures);
	if (o->load)
		printf("  loaded         %llu blocks\n",
		       (unsigned long long)r->loaded_blocks);
	printf("  stored         %llu blocks, %llu evictions\n",
	       (unsigned long long)r->stored,
	       (unsigned long long)r->evictions);
	printf("  replay         %.2f s, %.0f requests/s\n", r->wall_s,
	       r->wall_s > 0 ? (double)t->n_reqs / r->wall_s : 0);
}

void rp_print_row(const rp_opts *o, const rp_trace *t,
                      const rp_result *r)
{
	char cap[48];
	cap_text(cap, sizeof cap, o, r->capacity_blocks);
	printf("  %10s  %-8s %9.2f %%  %9.2f %%  %10llu  %10.0f\n", cap,
	       r->policy, 100 * rp_ratio(r->hit_tokens, t->input_tokens),
	       100 * rp_ratio(r->hit_blocks, r->blocks),
	       (unsigned long long)r->evictions,
	       r->wall_s > 0 ? (double)t->n_reqs / r->wall_s : 0);
	fflush(stdout);
}

