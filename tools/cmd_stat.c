/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd_stat.c — `kvlink stat`: a store's counters as text, JSON or
 * Prometheus exposition. (A running engine's linker counters come from
 * kvl_linker_stats; `kvlink bench --stats FORMAT` shows them for a bench.)
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kvlink.h"

char *kvl_cli_render_stats(kvl_linker *lk, kvl_store *st,
                           kvl_stats_format fmt, int *rc)
{
	size_t len = 4096, needed = 0;
	for (int tries = 0; tries < 4; tries++) {
		char *buf = malloc(len);
		if (!buf) {
			*rc = KVL_ENOMEM;
			return NULL;
		}
		*rc = lk ? kvl_linker_stats_render(lk, fmt, buf, len, &needed)
		         : kvl_store_stats_render(st, fmt, buf, len, &needed);
		if (*rc == 0)
			return buf;
		free(buf);
		if (*rc != KVL_ERANGE)
			return NULL;
		len = needed + 1;
	}
	return NULL;
}

int kvl_cli_print_stats(kvl_linker *lk, kvl_store *st, kvl_stats_format fmt)
{
	int rc;
	char *text = kvl_cli_render_stats(lk, st, fmt, &rc);
	if (text)
		fputs(text, stdout);
	free(text);
	return rc;
}

int kvl_cli_stats_format(const char *s, kvl_stats_format *out)
{
	if (!strcmp(s, "json"))
		*out = KVL_STATS_JSON;
	else if (!strcmp(s, "prometheus") || !strcmp(s, "prom"))
		*out = KVL_STATS_PROMETHEUS;
	else
		return -1;
	return 0;
}

/* A mooncake:// store's way of moving bytes, from its stats' "mooncake"
 * member: byte ranges through kvlink's shim, or whole objects. */
static void mooncake_way(kvl_store *st)
{
	int rc;
	char *json = kvl_cli_render_stats(NULL, st, KVL_STATS_JSON, &rc);
	const char *at = json ? strstr(json, "\"mooncake\":{\"api\":\"") : NULL;
	if (at) {
		int ranges = strncmp(at + 19, "ranges", 6) == 0;
		printf("  api       %s\n",
		       ranges ? "byte ranges (kvlink's shim)"
		              : "whole objects (Mooncake's C API)");
	}
	free(json);
}

int kvl_cmd_stat(int argc, char **argv)
{
	const char *uri = kvl_cli_default_store("mem:");
	kvl_stats_format fmt = KVL_STATS_PROMETHEUS;
	int text = 1;
	enum { O_STORE = 256, O_FORMAT };
	static const struct option opts[] = {
		{"help", no_argument, NULL, 'h'},
		{"store", required_argument, NULL, O_STORE},
		{"format", required_argument, NULL, O_FORMAT},
		{NULL, 0, NULL, 0}};
	const char *v;
	optind = 1;
	for (int c; (c = kvl_cli_next_opt("stat", argc, argv, opts, &v)) != -1;)
		switch (c) {
		case 'h':
			printf("usage: kvlink stat [--store URI] "
			       "[--format text|json|prometheus]\n"
			       "Prints the counters of the store at URI "
			       "(default mem:).\n"
			       "  --store URI      the store (default $KVL_STORE, "
			       "else mem:)\n"
			       "  --format FORMAT  text (default), json or "
			       "prometheus\n");
			return 0;
		case O_STORE:
			uri = v;
			break;
		case O_FORMAT:
			text = !strcmp(v, "text");
			if (!text && kvl_cli_stats_format(v, &fmt))
				return kvl_cli_usage_error(
					"stat", "unknown format '%s'", v);
			break;
		default:
			return 2;
		}
	if (optind < argc)
		return kvl_cli_usage_error("stat", "unexpected argument '%s'",
		                           argv[optind]);
	kvl_store *st;
	char err[512], shown[512];
	kvl_cli_uri(uri, shown, sizeof shown);
	if (kvl_store_open(uri, &st, err, sizeof err)) {
		fprintf(stderr, "kvlink stat: store '%s': %s\n", shown, err);
		return 1;
	}
	int rc = 0;
	if (text) {
		kvl_store_stats s;
		rc = kvl_store_stats_get(st, &s);
		if (rc == 0) {
			const struct {
				const char *name;
				uint64_t v;
			} rows[] = {{"objects", s.objects},
			            {"bytes", s.bytes},
			            {"capacity", s.capacity},
			            {"hits", s.hits},
			            {"misses", s.misses},
			            {"puts", s.puts},
			            {"evictions", s.evictions},
			            {"errors", s.errors}};
			printf("store %s\n", shown);
			for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
				if (rows[i].v == UINT64_MAX) /* cannot tell */
					printf("  %-9s unknown\n", rows[i].name);
				else
					printf("  %-9s %llu\n", rows[i].name,
					       (unsigned long long)rows[i].v);
			printf("  breaker   %s, opened %llu times, refused "
			       "%llu calls\n",
			       s.breaker_open ? "open" : "closed",
			       (unsigned long long)s.breaker_opens,
			       (unsigned long long)s.breaker_refused);
			kvl_cli_tier tr[KVL_CLI_TIERS_MAX];
			size_t nt = kvl_cli_tiers(st, tr, KVL_CLI_TIERS_MAX);
			for (size_t i = 0; i < nt; i++) {
				printf("  tier %zu    %s: ", i, tr[i].uri);
				if (tr[i].objects == UINT64_MAX)
					printf("unknown objects");
				else
					printf("%llu objects",
					       (unsigned long long)tr[i].objects);
				printf(", %llu hits, %llu promoted up, %llu "
				       "spilled down (%llu lost), %llu "
				       "failures\n",
				       (unsigned long long)tr[i].hits,
				       (unsigned long long)tr[i].promotions,
				       (unsigned long long)tr[i].spills,
				       (unsigned long long)tr[i].spills_lost,
				       (unsigned long long)tr[i].failures);
			}
			mooncake_way(st);
			/* No call failed: the message is the open's note. */
			if (kvl_store_errmsg(st)[0])
				printf("  note      %s\n", kvl_store_errmsg(st));
			/* A shared store's servers know its objects; calls are
			 * counted by each client, and this one made none. */
			if (strstr(uri, "://"))
				printf("  (objects, bytes, capacity and evictions "
				       "are the servers'; hits, misses, puts and "
				       "errors count this process's calls only: "
				       "an engine's are in its linker's stats)\n");
		}
	} else {
		rc = kvl_cli_print_stats(NULL, st, fmt);
	}
	if (rc)
		fprintf(stderr, "kvlink stat: %s\n", kvl_strerror(rc));
	kvl_store_close(st);
	return rc ? 1 : 0;
}
