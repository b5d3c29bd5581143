/*
 * store.c — the kvl_store handle: URI parsing, backend choice, argument checks.
 *
 * A store URI is "scheme:rest" or "scheme://authority[/path]" followed by an
 * optional "?name=value&name=value" query. kvl__uri_parse splits it once
 * into a private copy; backends read their options through the kvl__uri_*
 * getters, which mark each option used, and kvl_store_open then rejects any
 * option nobody asked for, so a typo never passes silently.
 *
 * The public kvl_store_* functions validate their arguments here, once for
 * every backend, and hand the backend only well-formed work: non-NULL
 * arrays, n > 0, and keys that are non-NULL, non-empty and shorter than
 * KVL_KEY_MAX. A key that fails these checks gets KVL_EINVAL as its own
 * result; the valid keys around it are passed to the backend in contiguous
 * runs (sub-arrays of the caller's arrays), so nothing is allocated.
 *
 * Threads: a store handle is immutable after kvl_store_open apart from its
 * error message (guarded by its own mutex in kvl__err) and the backend's own
 * state (guarded by the backend). kvl_store_close must not race any call.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kvl_config.h"
#include "store/store.h"

/* ------------------------------------------------------------------ URIs */

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

int kvl__parse_size(const char *s, uint64_t *out)
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
	if (kvl__parse_size(uri->values[i], out) < 0)
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

/* -------------------------------------------------------------- backends */

/* Every backend this build has; kvl_store_open picks one by scheme. A
 * backend whose scheme ends in '+' wraps another store and takes every
 * scheme that starts with it ("fault+" takes "fault+mem"). A new backend
 * adds one line here (under its KVL_HAVE_* switch from kvl_config.h) and its
 * ops declaration in store.h. */
static const kvl_store_ops *const store_backends[] = {
	&kvl__store_mem_ops,
	&kvl__store_fault_ops,
#if KVL_HAVE_REDIS
	&kvl__store_redis_ops,
#endif
	&kvl__store_mooncake_ops, /* loads its library at open */
};

/* Schemes kvlink knows but this build does not carry, with the reason. */
static const struct {
	const char *scheme;
	const char *why;
} store_missing[] = {
	{ "redis", "the redis:// store is not built into this kvlink" },
	{ "rediss", "the redis:// store is not built into this kvlink" },
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static const kvl_store_ops *store_backend(const char *scheme)
{
	for (size_t i = 0; i < ARRAY_LEN(store_backends); i++) {
		const char *b = store_backends[i]->scheme;
		size_t n = strlen(b);
		if (strcmp(b, scheme) == 0 ||
		    (n && b[n - 1] == '+' && strncmp(b, scheme, n) == 0))
			return store_backends[i];
	}
	return NULL;
}

static int store_unknown_scheme(const char *scheme, char *errbuf,
                                size_t errlen)
{
	for (size_t i = 0; i < ARRAY_LEN(store_missing); i++)
		if (strcmp(store_missing[i].scheme, scheme) == 0)
			return kvl__fail_buf(errbuf, errlen, KVL_ENOTSUP,
			                     "store scheme '%s': %s", scheme,
			                     store_missing[i].why);
	char have[128] = "";
	size_t used = 0;
	for (size_t i = 0; i < ARRAY_LEN(store_backends); i++) {
		const char *b = store_backends[i]->scheme;
		size_t n = strlen(b);
		int w = snprintf(have + used, sizeof have - used, "%s%s%s:",
		                 i ? ", " : "", b,
		                 n && b[n - 1] == '+' ? "<scheme>" : "");
		if (w < 0 || (size_t)w >= sizeof have - used)
			break;
		used += (size_t)w;
	}
	return kvl__fail_buf(errbuf, errlen, KVL_ENOTSUP,
	                     "unknown store scheme '%s' (this build has: %s)",
	                     scheme, have);
}

/* ----------------------------------------------------------- open, close */

int kvl_store_open(const char *uri, kvl_store **out, char *errbuf,
                   size_t errlen)
{
	char msg[KVL__ERRMSG_MAX] = "";
	kvl__uri u;
	kvl_store *s = NULL;
	int rc;

	if (errbuf && errlen)
		errbuf[0] = '\0';
	if (!out)
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "kvl_store_open: out is NULL");
	if (!uri || !*uri)
		uri = "mem:";

	rc = kvl__uri_parse(uri, &u, msg, sizeof msg);
	if (rc < 0)
		goto fail_msg;

	const kvl_store_ops *ops = store_backend(u.scheme);
	if (!ops) {
		rc = store_unknown_scheme(u.scheme, msg, sizeof msg);
		goto fail_uri;
	}
	s = calloc(1, sizeof *s);
	if (!s) {
		rc = kvl__fail_buf(msg, sizeof msg, KVL_ENOMEM,
		                   "kvl_store_open: out of memory");
		goto fail_uri;
	}
	kvl__err_init(&s->err);
	s->ops = ops;
	s->trusted = 0;
	rc = ops->open(s, &u, &s->impl, msg, sizeof msg);
	if (rc < 0)
		goto fail_store;
	rc = kvl__uri_check_unused(&u, msg, sizeof msg);
	if (rc < 0) {
		ops->close(s->impl);
		goto fail_store;
	}
	kvl__uri_free(&u);
	*out = s;
	return 0;

fail_store:
	kvl__err_destroy(&s->err);
	free(s);
fail_uri:
	kvl__uri_free(&u);
fail_msg:
	if (!msg[0]) /* a backend that forgot to say why */
		snprintf(msg, sizeof msg, "store \"%s\": %s", uri,
		         kvl_strerror(rc));
	return kvl__fail_buf(errbuf, errlen, rc, "%s", msg);
}

void kvl_store_close(kvl_store *store)
{
	if (!store)
		return;
	store->ops->close(store->impl);
	kvl__err_destroy(&store->err);
	free(store);
}

const char *kvl_store_errmsg(const kvl_store *store)
{
	return store ? kvl__err_get(&store->err) : "";
}

/* ------------------------------------------------------- batch operations */

/* The four per-key operations as one shape, so that argument checks and the
 * split into runs of valid keys are written once. `items` is ranges (get) or
 * pieces (put), `counts` n_ranges or n_pieces; both NULL for exists and
 * remove. */
enum store_op { OP_EXISTS, OP_GET, OP_PUT, OP_REMOVE };

struct store_call {
	kvl_store *s;
	enum store_op op;
	const char *fn;         /* public function name, for messages */
	const char *items_name; /* "ranges" or "pieces" */
	const char *counts_name;
	const char *const *keys;
	const char *items; /* kvl_range or kvl_iov array, as bytes */
	size_t item_size;
	const size_t *counts;
	void *results; /* int or int64_t array */
};

static void call_set(const struct store_call *c, size_t i, int v)
{
	if (c->op == OP_GET)
		((int64_t *)c->results)[i] = v;
	else
		((int *)c->results)[i] = v;
}

static int64_t call_result(const struct store_call *c, size_t i)
{
	if (c->op == OP_GET)
		return ((int64_t *)c->results)[i];
	return ((int *)c->results)[i];
}

/* Runs the backend on keys [i, j), whose first item is items[at]. */
static int call_backend(const struct store_call *c, size_t i, size_t j,
                        size_t at)
{
	kvl_store *s = c->s;
	const kvl_store_ops *o = s->ops;
	const char *const *keys = c->keys + i;
	const void *items = c->items ? c->items + at * c->item_size : NULL;
	const size_t *counts = c->counts ? c->counts + i : NULL;

	switch (c->op) {
	case OP_EXISTS:
		return o->exists(s, s->impl, keys, j - i,
		                 (int *)c->results + i);
	case OP_GET:
		return o->get(s, s->impl, keys, j - i, items, counts,
		              (int64_t *)c->results + i);
	case OP_PUT:
		return o->put(s, s->impl, keys, j - i, items, counts,
		              (int *)c->results + i);
	case OP_REMOVE:
		return o->remove(s, s->impl, keys, j - i,
		                 (int *)c->results + i);
	}
	return KVL_EINVAL;
}

/* 0 if key i and its items (the first is items[at]) are well-formed, else
 * KVL_EINVAL with the reason recorded in the handle. */
static int call_check_key(const struct store_call *c, size_t i, size_t at)
{
	kvl_store *s = c->s;
	const char *k = c->keys[i];

	if (!k)
		return kvl__fail(&s->err, KVL_EINVAL, "%s: keys[%zu] is NULL",
		                 c->fn, i);
	size_t len = strnlen(k, KVL_KEY_MAX);
	if (len == 0)
		return kvl__fail(&s->err, KVL_EINVAL, "%s: keys[%zu] is empty",
		                 c->fn, i);
	if (len >= KVL_KEY_MAX)
		return kvl__fail(&s->err, KVL_EINVAL,
		                 "%s: keys[%zu] (\"%.32s...\") is longer than "
		                 "%d bytes",
		                 c->fn, i, k, KVL_KEY_MAX - 1);
	for (size_t j = 0; c->counts && j < c->counts[i]; j++) {
		const char *it = c->items + (at + j) * c->item_size;
		const void *addr;
		size_t n;
		if (c->op == OP_PUT) {
			addr = ((const kvl_iov *)(const void *)it)->addr;
			n = ((const kvl_iov *)(const void *)it)->len;
		} else {
			addr = ((const kvl_range *)(const void *)it)->addr;
			n = ((const kvl_range *)(const void *)it)->len;
		}
		if (!addr && n)
			return kvl__fail(&s->err, KVL_EINVAL,
			                 "%s: keys[%zu] \"%s\": %s[%zu].addr is "
			                 "NULL with len %zu",
			                 c->fn, i, k, c->items_name, at + j, n);
	}
	return 0;
}

/* Checks the arrays and every key, marks bad keys KVL_EINVAL, and runs the
 * backend once over all keys, or over each run of consecutive good keys. */
static int store_batch(struct store_call *c, size_t n)
{
	kvl_store *s = c->s;

	if (!s)
		return KVL_EINVAL;
	if (n == 0)
		return 0;
	if (!c->keys)
		return kvl__fail(&s->err, KVL_EINVAL, "%s: keys is NULL (n=%zu)",
		                 c->fn, n);
	if (!c->results)
		return kvl__fail(&s->err, KVL_EINVAL,
		                 "%s: results is NULL (n=%zu)", c->fn, n);
	if (c->counts_name && !c->counts)
		return kvl__fail(&s->err, KVL_EINVAL, "%s: %s is NULL (n=%zu)",
		                 c->fn, c->counts_name, n);
	if (c->counts_name && !c->items) {
		for (size_t i = 0; i < n; i++)
			if (c->counts[i])
				return kvl__fail(&s->err, KVL_EINVAL,
				                 "%s: %s is NULL but %s[%zu] is "
				                 "%zu",
				                 c->fn, c->items_name,
				                 c->counts_name, i, c->counts[i]);
	}

	/* First pass: bad keys get KVL_EINVAL, good ones a placeholder the
	 * backend overwrites. */
	size_t bad = 0, at = 0;
	for (size_t i = 0; i < n; i++) {
		int rc = call_check_key(c, i, at);
		call_set(c, i, rc < 0 ? rc : 0);
		bad += rc < 0;
		at += c->counts ? c->counts[i] : 0;
	}
	if (bad == 0)
		return call_backend(c, 0, n, 0);

	/* Second pass: the backend sees each run of good keys. A run the
	 * backend refuses as a whole gets its code as every key's result. */
	size_t i = 0;
	at = 0;
	while (i < n) {
		if (call_result(c, i) < 0) {
			at += c->counts ? c->counts[i] : 0;
			i++;
			continue;
		}
		size_t j = i, run_at = at;
		while (j < n && call_result(c, j) >= 0) {
			at += c->counts ? c->counts[j] : 0;
			j++;
		}
		int rc = call_backend(c, i, j, run_at);
		if (rc < 0)
			for (size_t k = i; k < j; k++)
				call_set(c, k, rc);
		i = j;
	}
	return 0;
}

int kvl_store_exists(kvl_store *store, const char *const *keys, size_t n,
                     int *results)
{
	struct store_call c = {
		.s = store, .op = OP_EXISTS, .fn = "kvl_store_exists",
		.keys = keys, .results = results,
	};
	return store_batch(&c, n);
}

int kvl_store_get(kvl_store *store, const char *const *keys, size_t n,
                  const kvl_range *ranges, const size_t *n_ranges,
                  int64_t *results)
{
	struct store_call c = {
		.s = store, .op = OP_GET, .fn = "kvl_store_get",
		.items_name = "ranges", .counts_name = "n_ranges",
		.keys = keys, .items = (const char *)ranges,
		.item_size = sizeof *ranges, .counts = n_ranges,
		.results = results,
	};
	return store_batch(&c, n);
}

int kvl_store_put(kvl_store *store, const char *const *keys, size_t n,
                  const kvl_iov *pieces, const size_t *n_pieces, int *results)
{
	struct store_call c = {
		.s = store, .op = OP_PUT, .fn = "kvl_store_put",
		.items_name = "pieces", .counts_name = "n_pieces",
		.keys = keys, .items = (const char *)pieces,
		.item_size = sizeof *pieces, .counts = n_pieces,
		.results = results,
	};
	return store_batch(&c, n);
}

int kvl_store_remove(kvl_store *store, const char *const *keys, size_t n,
                     int *results)
{
	struct store_call c = {
		.s = store, .op = OP_REMOVE, .fn = "kvl_store_remove",
		.keys = keys, .results = results,
	};
	return store_batch(&c, n);
}

int kvl_store_register(kvl_store *store, void *addr, size_t len,
                       kvl_mem_kind mem)
{
	if (!store)
		return KVL_EINVAL;
	if (!addr)
		return kvl__fail(&store->err, KVL_EINVAL,
		                 "kvl_store_register: addr is NULL");
	if (len == 0)
		return kvl__fail(&store->err, KVL_EINVAL,
		                 "kvl_store_register: len is 0");
	if (mem != KVL_MEM_HOST && mem != KVL_MEM_CUDA)
		return kvl__fail(&store->err, KVL_EINVAL,
		                 "kvl_store_register: unknown memory kind %d",
		                 (int)mem);
	if (!store->ops->reg)
		return 0;
	return store->ops->reg(store, store->impl, addr, len, mem);
}

int kvl_store_stats_get(kvl_store *store, kvl_store_stats *out)
{
	if (!store)
		return KVL_EINVAL;
	if (!out)
		return kvl__fail(&store->err, KVL_EINVAL,
		                 "kvl_store_stats_get: out is NULL");
	memset(out, 0, sizeof *out);
	store->ops->stats(store->impl, out);
	return 0;
}
