/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_uri.c — libFuzzer target: the store URI parser (kvl__uri_parse) and
 * its option getters, on arbitrary strings.
 *
 * The input, cut at its first NUL, is one URI. Checked on every input:
 *  - a failure is KVL_EPARSE (or KVL_ENOMEM) with a non-empty message;
 *  - a success splits it into a lowercase scheme of valid characters,
 *    an authority and a path without '?', and at most KVL__URI_MAX_OPTS
 *    options with non-empty, distinct names and non-empty values;
 *  - printing the parts back and parsing that again gives the same parts;
 *  - every getter on every option returns 1 or KVL_EPARSE (with a message),
 *    the byte-size parser agrees with an independent one, and once every
 *    option was read kvl__uri_check_unused passes;
 *  - the redaction (kvl__uri_redact) of any input is redacted already
 *    (redacting again changes nothing), and cut short it is a prefix of
 *    the whole; what sits between "://" and the last '@' before the query
 *    is never shown but as "***" (after a user name and its ':').
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "store/uri.h"

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "fuzz_uri: check failed: %s (line %d)\n", \
			        #cond, __LINE__);                            \
			abort();                                             \
		}                                                            \
	} while (0)

static int scheme_char(char c, int first)
{
	if (c >= 'a' && c <= 'z')
		return 1;
	return !first && ((c >= '0' && c <= '9') || c == '+' || c == '-' ||
	                  c == '.');
}

/* An independent reading of a byte size: digits, then one of the
 * suffixes, case-insensitive; 0 or -1. */
static int ref_size(const char *s, uint64_t *out)
{
	static const char *const names[] = {"", "k", "m", "g", "t",
	                                    "kib", "mib", "gib", "tib"};
	static const unsigned shifts[] = {0, 10, 20, 30, 40, 10, 20, 30, 40};
	size_t nd = 0;
	unsigned __int128 v = 0;
	while (s[nd] >= '0' && s[nd] <= '9') {
		v = v * 10 + (unsigned)(s[nd] - '0');
		if (v > UINT64_MAX)
			return -1;
		nd++;
	}
	if (nd == 0)
		return -1;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (strlen(s + nd) != strlen(names[i]))
			continue;
		size_t j = 0;
		while (names[i][j] && (s[nd + j] | 0x20) == names[i][j])
			j++;
		if (names[i][j])
			continue;
		unsigned __int128 r = v << shifts[i];
		if (r > UINT64_MAX)
			return -1;
		*out = (uint64_t)r;
		return 0;
	}
	return -1;
}

/* Prints the parts of u back as a URI into buf. A tier: URI keeps its
 * tiers' queries in its path and takes its own options from a leading
 * "?…|", so it is printed that way (with an empty "?|" when it has none,
 * so that a path starting with '?' stays a path). */
static void unparse(const kvl__uri *u, int has_auth, char *buf, size_t cap)
{
	int tier = strcmp(u->scheme, "tier") == 0;
	size_t n = (size_t)snprintf(buf, cap, "%s:%s%s%s", u->scheme,
	                            has_auth ? "//" : "", u->authority,
	                            tier ? "?" : u->path);
	for (size_t i = 0; i < u->n_opts && n < cap; i++)
		n += (size_t)snprintf(buf + n, cap - n, "%s%s=%s",
		                      i ? "&" : tier ? "" : "?", u->keys[i],
		                      u->values[i]);
	if (tier && n < cap)
		n += (size_t)snprintf(buf + n, cap - n, "|%s", u->path);
	CHECK(n < cap);
}

static void same_parts(const kvl__uri *a, const kvl__uri *b)
{
	CHECK(strcmp(a->scheme, b->scheme) == 0);
	CHECK(strcmp(a->authority, b->authority) == 0);
	CHECK(strcmp(a->path, b->path) == 0);
	CHECK(a->n_opts == b->n_opts);
	for (size_t i = 0; i < a->n_opts; i++) {
		CHECK(strcmp(a->keys[i], b->keys[i]) == 0);
		CHECK(strcmp(a->values[i], b->values[i]) == 0);
	}
}

/* Redacted URI r (n bytes): credentials before the query ("://…@")
 * end in "***". */
static void check_redacted(const char *r, size_t n)
{
	const char *e = r + n, *a = NULL, *q = memchr(r, '?', n);
	for (const char *c = r; c + 3 <= e; c++)
		if (!memcmp(c, "://", 3)) {
			a = c;
			break;
		}
	if (!a || (q && q < a))
		return;
	const char *at = NULL;
	for (const char *c = a + 3; c < e && (!q || c < q); c++)
		if (*c == '@')
			at = c;
	if (at)
		CHECK(at - r >= 3 && !strncmp(at - 3, "***", 3));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	size_t len = strlen(s);

	/* Redaction. */
	{
		size_t cap = 3 * len + 16;
		char *r1 = malloc(cap), *r2 = malloc(cap), *r3 = malloc(cap);
		CHECK(r1 && r2 && r3);
		size_t n1 = kvl__uri_redact(s, r1, cap);
		CHECK(n1 < cap && strlen(r1) == n1);
		CHECK(kvl__uri_redact(r1, r2, cap) == n1 && !strcmp(r1, r2));
		size_t small = len / 2 + 1;
		CHECK(kvl__uri_redact(s, r3, small) == n1);
		CHECK(strlen(r3) == (n1 < small ? n1 : small - 1));
		CHECK(!strncmp(r1, r3, strlen(r3)));
		/* A tier: URI's parts are redacted one by one. */
		if (kvl__uri_is_tier(r1))
			for (char *p = r1, *bar;; p = bar + 1) {
				bar = strchr(p, '|');
				check_redacted(p, bar ? (size_t)(bar - p)
				                      : strlen(p));
				if (!bar)
					break;
			}
		else
			check_redacted(r1, n1);
		free(r1);
		free(r2);
		free(r3);
	}

	kvl__uri u;
	char err[KVL__ERRMSG_MAX] = "";
	int rc = kvl__uri_parse(s, &u, err, sizeof err);
	if (rc < 0) {
		CHECK(rc == KVL_EPARSE || rc == KVL_ENOMEM);
		CHECK(err[0] != '\0');
		CHECK(u.buf == NULL);
		free(s);
		return 0;
	}
	CHECK(rc == 0);

	/* The parts. */
	CHECK(u.scheme[0] != '\0');
	for (size_t i = 0; u.scheme[i]; i++)
		CHECK(scheme_char(u.scheme[i], i == 0));
	CHECK(strncasecmp(s, u.scheme, strlen(u.scheme)) == 0);
	CHECK(s[strlen(u.scheme)] == ':');
	/* (A tier: URI's path holds its tiers, queries and all.) */
	CHECK(!strchr(u.authority, '?') &&
	      (!strchr(u.path, '?') || strcmp(u.scheme, "tier") == 0));
	CHECK(!strchr(u.authority, '/'));
	CHECK(u.n_opts <= KVL__URI_MAX_OPTS);
	for (size_t i = 0; i < u.n_opts; i++) {
		CHECK(u.keys[i][0] != '\0' && u.values[i][0] != '\0');
		CHECK(!strchr(u.keys[i], '=') && !strchr(u.keys[i], '&'));
		CHECK(!strchr(u.values[i], '&'));
		for (size_t j = 0; j < i; j++)
			CHECK(strcmp(u.keys[i], u.keys[j]) != 0);
	}
	for (size_t i = 0; i < len; i++)
		CHECK((unsigned char)s[i] > ' ' && s[i] != 0x7f);

	/* Printed back and parsed again: the same parts. */
	const char *rest = s + strlen(u.scheme) + 1;
	int has_auth = strcmp(u.scheme, "tier") != 0 && rest[0] == '/' &&
	               rest[1] == '/';
	size_t cap = 2 * len + 16;
	char *again = malloc(cap);
	if (again) {
		unparse(&u, has_auth, again, cap);
		kvl__uri v;
		CHECK(kvl__uri_parse(again, &v, err, sizeof err) == 0);
		same_parts(&u, &v);
		kvl__uri_free(&v);
		free(again);
	}

	/* Every getter on every option. */
	for (size_t i = 0; i < u.n_opts; i++) {
		const char *k = u.keys[i], *str = NULL;
		uint64_t v64 = 0, ref = 0;
		int b = -1;
		double p = -1;
		err[0] = '\0';
		CHECK(kvl__uri_str(&u, k, &str) == 1 && str == u.values[i]);
		rc = kvl__uri_size(&u, k, &v64, err, sizeof err);
		CHECK(rc == 1 || (rc == KVL_EPARSE && err[0]));
		CHECK((rc == 1) == (ref_size(u.values[i], &ref) == 0));
		CHECK(rc != 1 || v64 == ref);
		rc = kvl_parse_size(u.values[i], &v64);
		CHECK(rc == 0 ? v64 == ref : rc == KVL_EPARSE);
		err[0] = '\0';
		rc = kvl__uri_u64(&u, k, &v64, err, sizeof err);
		CHECK(rc == 1 || (rc == KVL_EPARSE && err[0]));
		if (rc == 1) {
			char dec[32];
			snprintf(dec, sizeof dec, "%llu",
			         (unsigned long long)v64);
			/* Leading zeros are allowed; the value is the digits. */
			const char *d = u.values[i];
			while (d[0] == '0' && d[1])
				d++;
			CHECK(strcmp(dec, d) == 0);
		}
		err[0] = '\0';
		rc = kvl__uri_bool(&u, k, &b, err, sizeof err);
		CHECK((rc == 1 && (b == 0 || b == 1)) ||
		      (rc == KVL_EPARSE && err[0]));
		err[0] = '\0';
		rc = kvl__uri_prob(&u, k, &p, err, sizeof err);
		CHECK((rc == 1 && p >= 0.0 && p <= 1.0) ||
		      (rc == KVL_EPARSE && err[0]));
	}
	CHECK(kvl__uri_check_unused(&u, err, sizeof err) == 0);
	kvl__uri_free(&u);
	free(s);
	return 0;
}
