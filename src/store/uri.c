/*
 * uri.c — store URIs: one parse into a private copy, typed option getters
 * that mark what they read, and the check that every option was read
 * (uri.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "store/uri.h"

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
		                     uri, why);
	}
	for (const char *p = uri; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == 0x7f)
			return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
			                     "store URI \"%s\": contains a space "
			                     "or control character at offset %zu",
			                     uri, (size_t)(p - uri));

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
	char *q = strchr(rest, '?');
	if (q)
		*q++ = '\0';
	out->authority = "";
	out->path = rest;
	if (rest[0] == '/' && rest[1] == '/') {
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
		int rc = uri_parse_query(out, q, uri, errbuf, errlen);
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

