/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tiers.c — a tier: store's per-tier figures for the tool's reports, read
 * from the store's JSON stats render (its "tiers" member), so that the
 * tool stays a client of kvlink.h alone.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The value of member `name` within [p, end) as a count (null: unknown,
 * UINT64_MAX), or 0 when it is not there. */
static uint64_t member_u64(const char *p, const char *end, const char *name)
{
	char pat[48];
	snprintf(pat, sizeof pat, "\"%s\":", name);
	const char *m = strstr(p, pat);
	if (!m || m >= end)
		return 0;
	m += strlen(pat);
	if (!strncmp(m, "null", 4))
		return UINT64_MAX;
	return strtoull(m, NULL, 10);
}

size_t kvl_cli_tiers(kvl_store *st, kvl_cli_tier *out, size_t max)
{
	int rc;
	char *text = kvl_cli_render_stats(NULL, st, KVL_STATS_JSON, &rc);
	if (!text)
		return 0;
	size_t n = 0;
	const char *p = strstr(text, "\"tiers\":[");
	while (p && n < max && (p = strstr(p, "{\"uri\":\"")) != NULL) {
		kvl_cli_tier *t = &out[n];
		size_t u = 0;
		p += 8;
		for (; *p && *p != '"'; p++) {
			if (*p == '\\' && p[1])
				p++;
			if (u + 1 < sizeof t->uri)
				t->uri[u++] = *p;
		}
		t->uri[u] = '\0';
		const char *end = strchr(p, '}');
		if (!end)
			break;
		t->hits = member_u64(p, end, "hits");
		t->failures = member_u64(p, end, "failures");
		t->promotions = member_u64(p, end, "promotions");
		t->spills = member_u64(p, end, "spills");
		t->spills_lost = member_u64(p, end, "spills_lost");
		t->objects = member_u64(p, end, "objects");
		t->evictions = member_u64(p, end, "evictions");
		t->read_bytes = member_u64(p, end, "read_bytes");
		t->read_ns = member_u64(p, end, "read_ns");
		n++;
		p = end;
		if (end[1] == ']')
			break;
	}
	free(text);
	return n;
}
