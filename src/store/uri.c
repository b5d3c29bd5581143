/* SPDX-License-Identifier: Apache-2.0 */
/*
 * uri.c — store URIs: one parse into a private copy, typed option getters
 * that mark what they read, the check that every option was read, and the
 * one redaction of credentials that every printer of a URI uses (uri.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "store/uri.h"

/* ------------------------------------------------------------ redaction */

/* 1 when option `name` (n bytes) holds a secret: password, pass, passwd,
 * or a name ending in _password. */
static int uri_secret_option(const char *name, size_t n)
{
	static const char *const exact[] = { "password", "pass", "passwd" };
	for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
		if (strlen(exact[i]) == n && memcmp(name, exact[i], n) == 0)
			return 1;
	return n > 9 && memcmp(name + n - 9, "_password", 9) == 0;
}

/* Appends n bytes of s to out (cap bytes), counting at *at. */
static void red_put(char *out, size_t cap, size_t *at, const char *s,
                    size_t n)
{
	for (size_t i = 0; i < n; i++, (*at)++)
		if (*at + 1 < cap)
			out[*at] = s[i];
}

/* Redacts the one store URI uri[0..n) (not NUL-terminated) into out. */
static void red_one(const char *uri, size_t n, char *out, size_t cap,
                    size_t *at)
{
	const char *p = uri, *stop_all = uri + n;
	const char *q = memchr(uri, '?', n);
	const char *end = q ? q : stop_all;
	const char *auth = NULL;
	for (const char *c = uri; c + 3 <= end; c++)
		if (memcmp(c, "://", 3) == 0) {
			auth = c;
			break;
		}
	if (auth) {
		auth += 3;
		/* The credentials end at the last '@' before the query (a
		 * password may hold an unescaped '/'). */
		const char *atp = NULL;
		for (const char *c = auth; c < end; c++)
			if (*c == '@')
				atp = c;
		if (atp) {
			const char *colon = memchr(auth, ':',
			                           (size_t)(atp - auth));
			red_put(out, cap, at, uri, (size_t)(auth - uri));
			if (colon)
				red_put(out, cap, at, auth,
				        (size_t)(colon - auth) + 1);
			red_put(out, cap, at, "***", 3);
			p = atp;
		}
	}
	red_put(out, cap, at, p, (size_t)(end - p));
	/* The query, option by option. */
	for (p = end; p < stop_all;) {
		const char *amp = memchr(p + 1, '&',
		                         (size_t)(stop_all - p - 1));
		const char *stop = amp ? amp : stop_all;
		const char *eq = memchr(p + 1, '=', (size_t)(stop - p - 1));
		if (eq && uri_secret_option(p + 1, (size_t)(eq - p - 1))) {
			red_put(out, cap, at, p, (size_t)(eq - p) + 1);
			red_put(out, cap, at, "***", 3);
		} else {
			red_put(out, cap, at, p, (size_t)(stop - p));
		}
		p = stop;
	}
}

int kvl__uri_is_tier(const char *uri)
{
	static const char name[] = "tier:";
	for (size_t i = 0; i < sizeof name - 1; i++)
		if (!uri[i] || (uri[i] | 0x20) != name[i])
			return 0;
	return 1;
}

size_t kvl__uri_redact(const char *uri, char *out, size_t cap)
{
	size_t at = 0, n = strlen(uri);
	if (!kvl__uri_is_tier(uri)) {
		red_one(uri, n, out, cap, &at);
	} else {
		/* tier:[?options|]URI|URI…: each part on its own, so that one
		 * tier's query does not swallow the next tier's credentials
		 * (the first with "tier:" before it: "tier://user:pass@…",
		 * malformed as it is, still loses its password). */
		for (const char *p = uri, *e = uri + n;;) {
			const char *bar = memchr(p, '|', (size_t)(e - p));
			const char *stop = bar ? bar : e;
			red_one(p, (size_t)(stop - p), out, cap, &at);
			if (!bar)
				break;
			red_put(out, cap, &at, "|", 1);
			p = bar + 1;
		}
	}
	if (cap)
		out[at < cap ? at : cap - 1] = '\0';
	return at;
}

int kvl_uri_redact(const char *uri, char *out, size_t len)
{
	if (!out || !len)
		return KVL_EINVAL;
	if (!uri) {
		out[0] = '\0';
		return KVL_EINVAL;
	}
	return kvl__uri_redact(uri, out, len) < len ? 0 : KVL_ERANGE;
}

/* ---------------------------------------------------------------- parse */

static int uri_scheme_char(char c, int first)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
		return 1;
	return !first && ((c >= '0' && c <= '9') || c == '+' || c == '-' ||
	                  c == '.');
}

/* Splits the query (NUL-terminated, modified in place) into options. */
static int uri_parse_query(kvl__uri *u, char *q, const char *uri,
                           char *errbuf, size_t errlen)
{
	if (*q == '\0')
		return 0; /* "scheme:?" : an empty query holds no options */
	for (;;) {
		char *amp = strchr(q, '&');
		if (amp)
			*amp = '\0';
		char *eq = strchr(q, '=');
		if (eq == q || *q == '\0')
			return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
			                     "store URI \"%s\": empty option name "
			                     "in the query",
			                     uri);
		if (!eq)
			return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
			                     "store URI \"%s\": option '%s' has no "
			                     "value (expected %s=VALUE)",
			                     uri, q, q);
		*eq = '\0';
		if (eq[1] == '\0')
			return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
			                     "store URI \"%s\": option '%s' has an "
			                     "empty value",
			                     uri, q);
		for (size_t i = 0; i < u->n_opts; i++)
			if (strcmp(u->keys[i], q) == 0)
				return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
				                     "store URI \"%s\": option '%s' "
				                     "given twice",
				                     uri, q);
		if (u->n_opts == KVL__URI_MAX_OPTS)
			return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
			                     "store URI \"%s\": more than %d "
			                     "options",
			                     uri, KVL__URI_MAX_OPTS);
		u->keys[u->n_opts] = q;
		u->values[u->n_opts] = eq + 1;
		u->used[u->n_opts] = 0;
		u->n_opts++;
		if (!amp)
			return 0;
		q = amp + 1;
	}
}

int kvl__uri_parse(const char *uri, kvl__uri *out, char *errbuf, size_t errlen)
{
	if (!uri || !out)
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "store URI: %s is NULL", uri ? "out" : "uri");
	memset(out, 0, sizeof *out);
	/* Messages show the URI without its credentials. */
	char shown[KVL__URI_SHOWN];
	kvl__uri_redact(uri, shown, sizeof shown);

	size_t n = 0;
	while (uri_scheme_char(uri[n], n == 0))
		n++;
	if (n == 0 || uri[n] != ':') {
		const char *why = uri[n] == ':' ? "empty scheme" :
		                  uri[n] == '\0' ? "missing scheme (no ':')" :
		                                   "bad character in scheme";
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "store URI \"%s\": %s; expected e.g. "
		                     "\"mem:\" or \"redis://host:port\"",
		                     shown, why);
	}
	for (const char *p = uri; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == 0x7f)
			return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
			                     "store URI \"%s\": contains a space "
			                     "or control character at offset %zu",
			                     shown, (size_t)(p - uri));

	/* One allocation holds the URI split in place and, after it, a copy
	 * of the path (which must keep its leading '/' while the authority
	 * before it gets its NUL). */
	size_t len = strlen(uri);
	char *buf = malloc(2 * len + 2);
	if (!buf)
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "store URI: out of memory");
	memcpy(buf, uri, len + 1);
	out->buf = buf;
	buf[n] = '\0';
	for (size_t i = 0; i < n; i++) /* schemes are case-insensitive */
		if (buf[i] >= 'A' && buf[i] <= 'Z')
			buf[i] = (char)(buf[i] - 'A' + 'a');
	out->scheme = buf;

	char *rest = buf + n + 1;
	char *q;
	int tier = strcmp(out->scheme, "tier") == 0;
	out->authority = "";
	out->path = rest;
	if (tier) {
		/* tier:[?options|]URI|URI…: the tiers' own queries stay in
		 * the path; only a leading '?' part is this URI's. */
		q = rest[0] == '?' ? rest + 1 : NULL;
		char *bar = q ? strchr(q, '|') : NULL;
		if (bar)
			*bar = '\0';
		if (q)
			out->path = bar ? bar + 1 : q + strlen(q);
	} else if ((q = strchr(rest, '?')) != NULL) {
		*q++ = '\0';
	}
	if (!tier && rest[0] == '/' && rest[1] == '/') {
		char *auth = rest + 2;
		out->has_authority = 1;
		char *slash = strchr(auth, '/');
		out->authority = auth;
		out->path = "";
		if (slash) {
			char *path = buf + len + 1;
			strcpy(path, slash);
			*slash = '\0';
			out->path = path;
		}
	}
	if (q) {
		int rc = uri_parse_query(out, q, shown, errbuf, errlen);
		if (rc < 0) {
			kvl__uri_free(out);
			return rc;
		}
	}
	return 0;
}

void kvl__uri_free(kvl__uri *uri)
{
	if (!uri)
		return;
	free(uri->buf);
	memset(uri, 0, sizeof *uri);
}

/* The index of option `key`, marked used, or -1. */
static int uri_find(kvl__uri *uri, const char *key)
{
	for (size_t i = 0; i < uri->n_opts; i++) {
		if (strcmp(uri->keys[i], key) == 0) {
			uri->used[i] = 1;
			return (int)i;
		}
	}
	return -1;
}

int kvl__uri_str(kvl__uri *uri, const char *key, const char **out)
{
	int i = uri_find(uri, key);
	if (i < 0)
		return 0;
	*out = uri->values[i];
	return 1;
}

int kvl_parse_size(const char *s, uint64_t *out)
{
	static const struct {
		const char *name;
		unsigned shift;
	} suffixes[] = {
		{ "", 0 },     { "k", 10 },   { "m", 20 },   { "g", 30 },
		{ "t", 40 },   { "kib", 10 }, { "mib", 20 }, { "gib", 30 },
		{ "tib", 40 },
	};
	if (!s || !out || *s < '0' || *s > '9')
		return KVL_EPARSE;
	uint64_t v = 0;
	for (; *s >= '0' && *s <= '9'; s++) {
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return KVL_EPARSE;
		v = v * 10 + d;
	}
	for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
		const char *a = s, *b = suffixes[i].name;
		while (*a && *b && (*a | 0x20) == *b)
			a++, b++;
		if (*a || *b)
			continue;
		unsigned sh = suffixes[i].shift;
		if (sh && v > (UINT64_MAX >> sh))
			return KVL_EPARSE;
		*out = v << sh;
		return 0;
	}
	return KVL_EPARSE;
}

int kvl__uri_size(kvl__uri *uri, const char *key, uint64_t *out, char *errbuf,
                  size_t errlen)
{
	int i = uri_find(uri, key);
	if (i < 0)
		return 0;
	if (kvl_parse_size(uri->values[i], out) < 0)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "store option %s=%s: not a byte size "
		                     "(expected digits and an optional K, M, G, "
		                     "T, KiB, MiB, GiB or TiB suffix, below 16 EiB)",
		                     key, uri->values[i]);
	return 1;
}

int kvl__uri_u64(kvl__uri *uri, const char *key, uint64_t *out, char *errbuf,
                 size_t errlen)
{
	int i = uri_find(uri, key);
	if (i < 0)
		return 0;
	const char *s = uri->values[i];
	uint64_t v = 0;
	const char *p = s;
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			break;
		v = v * 10 + d;
	}
	if (p == s || *p)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "store option %s=%s: not an unsigned "
		                     "decimal integer below 2^64",
		                     key, s);
	*out = v;
	return 1;
}

int kvl__uri_bool(kvl__uri *uri, const char *key, int *out, char *errbuf,
                  size_t errlen)
{
	int i = uri_find(uri, key);
	if (i < 0)
		return 0;
	const char *s = uri->values[i];
	if (strcmp(s, "1") == 0 || strcmp(s, "true") == 0 ||
	    strcmp(s, "yes") == 0 || strcmp(s, "on") == 0)
		*out = 1;
	else if (strcmp(s, "0") == 0 || strcmp(s, "false") == 0 ||
	         strcmp(s, "no") == 0 || strcmp(s, "off") == 0)
		*out = 0;
	else
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "store option %s=%s: expected 0 or 1", key,
		                     s);
	return 1;
}

int kvl__uri_prob(kvl__uri *uri, const char *key, double *out, char *errbuf,
                  size_t errlen)
{
	int i = uri_find(uri, key);
	if (i < 0)
		return 0;
	const char *s = uri->values[i];
	char *end = NULL;
	errno = 0;
	double v = (*s == '+' || *s == '-' || *s == ' ') ? NAN : strtod(s, &end);
	if (!end || end == s || *end || errno || !(v >= 0.0 && v <= 1.0))
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "store option %s=%s: expected a number in "
		                     "[0, 1]",
		                     key, s);
	*out = v;
	return 1;
}

int kvl__uri_check_unused(const kvl__uri *uri, char *errbuf, size_t errlen)
{
	for (size_t i = 0; i < uri->n_opts; i++)
		if (!uri->used[i])
			return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
			                     "store URI: unknown option '%s' for "
			                     "scheme %s:",
			                     uri->keys[i], uri->scheme);
	return 0;
}

