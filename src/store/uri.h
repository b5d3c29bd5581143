/* SPDX-License-Identifier: Apache-2.0 */
/*
 * uri.h — store URIs (internal): "scheme:rest" or
 * "scheme://authority[/path]", then an optional "?name=value&…" query.
 *
 * kvl__uri_parse splits a URI once into a private copy; backends read their
 * options through the getters, which mark each option used, and
 * kvl_store_open then refuses any option nobody asked for, so a typo never
 * passes silently.
 */
#ifndef KVL_URI_H
#define KVL_URI_H

#include "core/internal.h"

#define KVL__URI_MAX_OPTS 32
#define KVL__URI_SHOWN 512 /* bytes of a URI that a message shows */

/* A parsed URI. The strings point into `buf`, a private copy. */
typedef struct kvl__uri {
	char *buf;
	const char *scheme;    /* "mem", "redis", …, lowercase */
	const char *authority; /* after "//" up to '/' or '?', or "" */
	const char *path;      /* after the authority up to '?', or "" */
	int has_authority;     /* "//" followed the scheme (even if empty) */
	size_t n_opts;
	const char *keys[KVL__URI_MAX_OPTS];
	const char *values[KVL__URI_MAX_OPTS];
	uint8_t used[KVL__URI_MAX_OPTS]; /* set by the getters below */
} kvl__uri;

/* The tier: store's URIs (see tier.c) are parsed apart: "tier:" then an
 * optional "?name=value&…|" of its own options, then the tiers' URIs
 * separated by '|', which become `path` untouched (each keeps its own
 * query). kvl__uri_is_tier: 1 when uri starts with "tier:" (any case). */
int kvl__uri_is_tier(const char *uri);

/* Parses `uri` into `out` (free with kvl__uri_free). KVL_EPARSE with a
 * message in errbuf when malformed (no scheme, a space or control
 * character, an empty option name or value, an option given twice, more
 * than KVL__URI_MAX_OPTS options); KVL_EINVAL for NULL; KVL_ENOMEM. */
int kvl__uri_parse(const char *uri, kvl__uri *out, char *errbuf, size_t errlen);
void kvl__uri_free(kvl__uri *uri);

/* The URI as messages may show it, into out (cap bytes, NUL-terminated,
 * cut short when it does not fit): the password of "scheme://user:pass@"
 * becomes "***" ("user:***@", ":***@"; credentials without ':' become
 * "***@" whole), and so do the values of the options password, pass,
 * passwd and *_password. Returns the length of the whole result (as
 * snprintf). Every printer of a URI uses this (kvl_uri_redact too). */
size_t kvl__uri_redact(const char *uri, char *out, size_t cap);

/* Option getters: 0 if absent (out keeps its default), 1 if found and valid,
 * KVL_EPARSE (message in errbuf) if the value is malformed. Sizes are
 * kvl_parse_size's; probabilities are reals in [0, 1]. */
int kvl__uri_str(kvl__uri *uri, const char *key, const char **out);
int kvl__uri_size(kvl__uri *uri, const char *key, uint64_t *out, char *errbuf,
                  size_t errlen);
int kvl__uri_u64(kvl__uri *uri, const char *key, uint64_t *out, char *errbuf,
                 size_t errlen);
int kvl__uri_bool(kvl__uri *uri, const char *key, int *out, char *errbuf,
                  size_t errlen);
int kvl__uri_prob(kvl__uri *uri, const char *key, double *out, char *errbuf,
                  size_t errlen);

/* KVL_EPARSE naming the first option no getter asked for. Call after
 * reading every option. */
int kvl__uri_check_unused(const kvl__uri *uri, char *errbuf, size_t errlen);

#endif /* KVL_URI_H */
