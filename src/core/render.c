/* SPDX-License-Identifier: Apache-2.0 */
/*
 * render.c — counters as text: the append cursor and a store's counters in
 * Prometheus text or JSON (render.h).
 */
#include <stdarg.h>
#include <stdio.h>

#include "core/render.h"

void kvl__put(kvl__cursor *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	size_t room = c->used < c->len ? c->len - c->used : 0;
	int n = vsnprintf(room ? c->buf + c->used : NULL, room, fmt, ap);
	va_end(ap);
	if (n > 0)
		c->used += (size_t)n;
}

int kvl__cursor_finish(kvl__cursor *c, size_t *needed)
{
	if (needed)
		*needed = c->used;
	if (c->used >= c->len) {
		if (c->len)
			c->buf[c->len - 1] = '\0';
		return KVL_ERANGE;
	}
	return 0;
}

#define STORE_FIELDS(X)                                          \
	X(objects, "gauge", "objects held by the store")         \
	X(bytes, "gauge", "bytes held by the store")             \
	X(capacity, "gauge", "byte capacity of the store")       \
	X(hits, "counter", "keys found by exists or get")        \
	X(misses, "counter", "keys not found by exists or get")  \
	X(puts, "counter", "objects newly stored")               \
	X(evictions, "counter", "objects evicted to make room")  \
	X(errors, "counter", "per-key store failures")           \
	X(breaker_opens, "counter", "times the circuit breaker opened") \
	X(breaker_refused, "counter",                            \
	  "calls failed at once by the open circuit breaker")    \
	X(breaker_open, "gauge", "1 while the circuit breaker is open")

/* A count the store cannot tell (UINT64_MAX, kvlink.h) is written as
 * Prometheus' NaN and JSON's null, never as 18446744073709551615. */
void kvl__put_count(kvl__cursor *c, uint64_t v, const char *unknown)
{
	if (v == UINT64_MAX)
		kvl__put(c, "%s", unknown);
	else
		kvl__put(c, "%llu", (unsigned long long)v);
}

void kvl__render_store_prom(kvl__cursor *c, const kvl_store_stats *s,
                            const char *note)
{
	/* Prometheus names counters *_total; JSON keeps the field names. */
#define STORE_PROM_(name, type, help)                                   \
	{                                                                \
		const char *sfx = strcmp(type, "counter") ? "" : "_total"; \
		kvl__put(c, "# HELP kvlink_store_" #name "%s %s\n# TYPE " \
		            "kvlink_store_" #name "%s %s\nkvlink_store_"  \
		            #name "%s ",                                  \
		         sfx, help, sfx, type, sfx);                      \
		kvl__put_count(c, s->name, "NaN");                            \
		kvl__put(c, "\n");                                       \
	}
	STORE_FIELDS(STORE_PROM_)
#undef STORE_PROM_
	if (note && note[0]) /* a comment: scrapers skip it */
		kvl__put(c, "# kvlink_store note: %s\n", note);
}

void kvl__render_store_json(kvl__cursor *c, const kvl_store_stats *s,
                            const char *note)
{
	const char *sep = "";
#define STORE_JSON_(name, type, help)                              \
	kvl__put(c, "%s\"" #name "\":", sep);                      \
	kvl__put_count(c, s->name, "null");                             \
	sep = ",";
	STORE_FIELDS(STORE_JSON_)
#undef STORE_JSON_
	if (note && note[0]) {
		kvl__put(c, ",\"note\":\"");
		for (const char *p = note; *p; p++) /* kvlink's own text */
			if (*p == '"' || *p == '\\')
				kvl__put(c, "\\%c", *p);
			else if ((unsigned char)*p >= 0x20)
				kvl__put(c, "%c", *p);
		kvl__put(c, "\"");
	}
}

int kvl__render_check(kvl__err *e, const char *fn, kvl_stats_format format,
                      const char *buf, size_t len)
{
	if (len && !buf)
		return kvl__fail(e, KVL_EINVAL, "%s: buf is NULL with len %zu",
		                 fn, len);
	if (format != KVL_STATS_PROMETHEUS && format != KVL_STATS_JSON)
		return kvl__fail(e, KVL_EINVAL, "%s: unknown format %d", fn,
		                 (int)format);
	return 0;
}
