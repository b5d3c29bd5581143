/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.c — the kvl_store handle and the one door to every backend: backend
 * choice by URI scheme, argument checks, the batch call, capabilities and
 * the in-place reads and writes.
 *
 * The public kvl_store_* functions build one kvl__batch and validate it
 * here, once for every backend, so a backend gets only well-formed work:
 * non-NULL arrays, n > 0, and keys that are non-NULL, non-empty and shorter
 * than KVL_KEY_MAX. A key that fails these checks gets KVL_EINVAL as its
 * own result; the valid keys around it are passed to the backend in
 * contiguous runs (slices of the caller's arrays), so nothing is allocated.
 * Nothing outside src/store/ calls a backend's operations: the linker's
 * in-place loads and offloads go through kvl__store_peek and its siblings.
 *
 * The door also owns the store's key: the secret file named by the URI's
 * secret_file option (read here, before the backend opens, so no backend
 * sees the option), else by KVL_SECRET_FILE; kvl__store_mac hands it to the
 * codec's callers, NULL for trusted stores. A wrapper's inner store is
 * opened with kvl__store_open_wrapped and holds no key.
 *
 * Threads: a store handle is immutable after kvl_store_open apart from its
 * error message (guarded by its own mutex in kvl__err) and the backend's own
 * state (guarded by the backend). kvl_store_close must not race any call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/render.h"
#include "kvl_config.h"
#include "store/backend.h"
#include "core/log.h"
#include "store/breaker.h"

/* The door's circuit breaker (breaker.h): calls failed in a row that open
 * it on a remote store, and its first back-off. */
#define BREAKER_DEFAULT 3u
#define BREAKER_MS_DEFAULT 100u
#define BREAKER_MS_MAX 60000u
#define PROBE_KEY "kvl-probe"

/* -------------------------------------------------------------- backends */

/* Every backend this build has; kvl_store_open picks one by scheme. A
 * backend whose scheme ends in '+' wraps another store and takes every
 * scheme that starts with it ("fault+" takes "fault+mem"). A new backend
 * adds one line here (under its KVL_HAVE_* switch from kvl_config.h) and its
 * ops declaration in store.h. */
static const kvl__store_ops *const store_backends[] = {
	&kvl__store_mem_ops,
	&kvl__store_fault_ops,
	&kvl__store_file_ops,
	&kvl__store_tier_ops,
#if KVL_HAVE_REDIS
	&kvl__store_redis_ops,
	&kvl__store_rediss_ops,
#endif
	&kvl__store_mooncake_ops, /* loads its library at open */
};

/* Schemes kvlink knows but this build does not carry, with the reason. */
static const struct {
	const char *scheme;
	const char *why;
} store_missing[] = {
	{ "redis", "the redis:// store is not built into this kvlink" },
	{ "rediss", "the redis:// store (and its rediss:// over TLS) is not "
	            "built into this kvlink" },
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static const kvl__store_ops *store_backend(const char *scheme)
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

static int store_probe(void *ctx);

/* The store's key: from the URI's secret_file, else from the file
 * KVL_SECRET_FILE names (when set and not empty), else none. Every store
 * takes the option and checks the file; trusted ones never use the key
 * (kvl__store_mac). */
static int store_secret(kvl__uri *u, kvl__mac **out, char *errbuf,
                        size_t errlen)
{
	const char *path = NULL;
	*out = NULL;
	if (kvl__uri_str(u, "secret_file", &path) == 0) {
		path = getenv("KVL_SECRET_FILE");
		if (!path || !*path)
			return 0;
		int rc = kvl__mac_load(path, out, errbuf, errlen);
		if (rc < 0) {
			char m[KVL__ERRMSG_MAX];
			snprintf(m, sizeof m, "%s", errbuf);
			kvl__fail_buf(errbuf, errlen, rc, "KVL_SECRET_FILE: %s",
			              m);
		}
		return rc;
	}
	return kvl__mac_load(path, out, errbuf, errlen);
}

/* The breaker options of a store (the tenant and the key go straight into
 * the handle). */
typedef struct door_opts {
	unsigned breaker;    /* failed calls that open it; 0: off */
	int breaker_set;     /* given in the URI (else on for remote stores) */
	uint32_t breaker_ms; /* the prober's first back-off */
} door_opts;

/* The options every store takes, read before the backend's so that a
 * wrapping backend (fault+) does not pass them on: breaker, breaker_ms,
 * tenant and, unless the store is wrapped, secret_file. */
static int door_options(kvl__uri *u, kvl_store *s, int wrapped, door_opts *d,
                        char *msg, size_t len)
{
	uint64_t brk = BREAKER_DEFAULT, brk_ms = BREAKER_MS_DEFAULT;
	int set = kvl__uri_u64(u, "breaker", &brk, msg, len);
	int rc = set < 0 ? set : kvl__uri_u64(u, "breaker_ms", &brk_ms, msg, len);
	if (rc < 0)
		return rc;
	if (brk > 1000 || brk_ms == 0 || brk_ms > BREAKER_MS_MAX)
		return kvl__fail_buf(msg, len, KVL_EPARSE,
		                     "store option breaker=%llu or breaker_ms=%llu "
		                     "out of range (breaker: 0 (off) to 1000 "
		                     "failed calls; breaker_ms: 1 to %u)",
		                     (unsigned long long)brk,
		                     (unsigned long long)brk_ms, BREAKER_MS_MAX);
	*d = (door_opts){(unsigned)brk, set == 1, (uint32_t)brk_ms};
	const char *tenant = NULL;
	if (kvl__uri_str(u, "tenant", &tenant) == 1) {
		if (strlen(tenant) > KVL__TENANT_MAX ||
		    !kvl__name_ok(tenant, "._-"))
			return kvl__fail_buf(msg, len, KVL_EPARSE,
			                     "store option tenant='%s': 1 to %d "
			                     "characters from [A-Za-z0-9._-]",
			                     tenant, KVL__TENANT_MAX);
		s->tenant_len = (size_t)snprintf(s->tenant, sizeof s->tenant,
		                                 "kvl1:%s:", tenant);
	}
	return wrapped ? 0 : store_secret(u, &s->mac, msg, len);
}

/* Stores opened with an option they cannot honour (the log's rate limit). */
static kvl__log_limit note_limit;

/* kvl_store_open; `wrapped`: the store a wrapper wraps, which takes no
 * secret (the wrapper's door seals and checks). */
static int store_open(const char *uri, kvl_store **out, char *errbuf,
                      size_t errlen, int wrapped)
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

	const kvl__store_ops *ops = store_backend(u.scheme);
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
	door_opts d = {0};
	rc = door_options(&u, s, wrapped, &d, msg, sizeof msg);
	if (rc < 0)
		goto fail_store;
	rc = ops->open(s, &u, &s->impl, &s->caps, msg, sizeof msg);
	if (rc < 0)
		goto fail_store;
	rc = kvl__uri_check_unused(&u, msg, sizeof msg);
	if (rc == 0 && s->tenant_len && s->caps.in_place)
		rc = kvl__fail_buf(msg, sizeof msg, KVL_EINVAL,
		                   "store option tenant=: the %s: store lives "
		                   "in this process; tenants separate the keys "
		                   "of a shared remote store",
		                   ops->scheme);
	char shown[160];
	kvl__uri_redact(uri, shown, sizeof shown);
	if (rc == 0 && (d.breaker_set || s->caps.remote) && d.breaker &&
	    !(s->breaker = kvl__breaker_new(shown, d.breaker, d.breaker_ms,
	                                    store_probe, s)))
		rc = kvl__fail_buf(msg, sizeof msg, KVL_ENOMEM,
		                   "kvl_store_open: out of memory");
	if (rc < 0) {
		ops->close(s->impl);
		goto fail_store;
	}
	kvl__uri_free(&u);
	if (s->note[0]) { /* what the caller reads until a call fails */
		kvl__fail(&s->err, 0, "%s", s->note);
		kvl__log(&note_limit, KVL_LOG_WARNING, "store", "%s: %s",
		         shown, s->note);
	}
	*out = s;
	return 0;

fail_store:
	kvl__mac_free(s->mac);
	kvl__err_destroy(&s->err);
	free(s);
fail_uri:
	kvl__uri_free(&u);
fail_msg:
	if (!msg[0]) { /* a backend that forgot to say why */
		char shown[KVL__ERRMSG_MAX / 2];
		kvl__uri_redact(uri, shown, sizeof shown);
		snprintf(msg, sizeof msg, "store \"%s\": %s", shown,
		         kvl_strerror(rc));
	}
	return kvl__fail_buf(errbuf, errlen, rc, "%s", msg);
}

int kvl_store_open(const char *uri, kvl_store **out, char *errbuf,
                   size_t errlen)
{
	return store_open(uri, out, errbuf, errlen, 0);
}

int kvl__store_open_wrapped(const char *uri, kvl_store **out, char *errbuf,
                            size_t errlen)
{
	return store_open(uri, out, errbuf, errlen, 1);
}

void kvl_store_close(kvl_store *store)
{
	if (!store)
		return;
	kvl__breaker_free(store->breaker); /* its prober calls the backend */
	store->ops->close(store->impl);
	kvl__mac_free(store->mac);
	kvl__err_destroy(&store->err);
	free(store);
}

const char *kvl_store_errmsg(const kvl_store *store)
{
	return store ? kvl__err_get(&store->err) : "store is NULL";
}

/* ------------------------------------------------------- batch operations */

kvl__batch kvl__batch_slice(const kvl__batch *b, size_t i, size_t j,
                            size_t at)
{
	kvl__batch r = *b;
	r.n = j - i;
	r.keys = b->keys + i;
	r.results = b->results + i;
	if (b->counts)
		r.counts = b->counts + i;
	if (b->ranges)
		r.ranges = b->ranges + at;
	if (b->pieces)
		r.pieces = b->pieces + at;
	return r;
}

int kvl__batch_runs(const kvl__batch *b,
                    int (*skip)(void *ctx, const kvl__batch *b, size_t i),
                    int (*fn)(void *ctx, const kvl__batch *run), void *ctx)
{
	size_t i = 0, at = 0;
	while (i < b->n) {
		/* skip() is asked once per key: it may record why. */
		size_t j = i, run_at = at;
		while (j < b->n && !(skip && skip(ctx, b, j)))
			at += kvl__batch_count(b, j++);
		if (j > i) {
			kvl__batch run = kvl__batch_slice(b, i, j, run_at);
			int rc = fn(ctx, &run);
			if (rc < 0) {
				for (size_t k = 0; k < run.n; k++)
					run.results[k] = rc;
				if (i == 0 && j == b->n)
					return rc;
			}
		}
		if (j < b->n)
			at += kvl__batch_count(b, j++); /* the skipped key */
		i = j;
	}
	return 0;
}

/* Runs the backend on a batch of valid keys. */
static int backend_run(void *ctx, const kvl__batch *b)
{
	kvl_store *s = ctx;
	switch (b->op) {
	case KVL__OP_EXISTS:
		return s->ops->exists(s, s->impl, b);
	case KVL__OP_GET:
		return s->ops->get(s, s->impl, b);
	case KVL__OP_PUT:
		return s->ops->put(s, s->impl, b);
	case KVL__OP_REMOVE:
		return s->ops->remove(s, s->impl, b);
	case KVL__OP_HOLD:
	case KVL__OP_UNHOLD: {
		int (*fn)(kvl_store *, void *, const kvl__batch *) =
			b->op == KVL__OP_HOLD ? s->ops->hold : s->ops->unhold;
		if (fn)
			return fn(s, s->impl, b);
		memset(b->results, 0, b->n * sizeof *b->results);
		return 0;
	}
	}
	return KVL_EINVAL;
}

/* A key that failed the checks (its result is already negative). */
static int key_bad(void *ctx, const kvl__batch *b, size_t i)
{
	(void)ctx;
	return b->results[i] < 0;
}

/* 0 if key i and its items (the first is item `at`) are well-formed, else
 * KVL_EINVAL with the reason recorded in the handle. */
static int check_key(kvl_store *s, const kvl__batch *b, size_t i, size_t at)
{
	const char *k = b->keys[i];
	if (!k)
		return kvl__fail(&s->err, KVL_EINVAL, "%s: keys[%zu] is NULL",
		                 b->fn, i);
	size_t len = strnlen(k, KVL_KEY_MAX);
	if (len == 0)
		return kvl__fail(&s->err, KVL_EINVAL, "%s: keys[%zu] is empty",
		                 b->fn, i);
	if (len + s->tenant_len >= KVL_KEY_MAX)
		return kvl__fail(&s->err, KVL_EINVAL,
		                 "%s: keys[%zu] (\"%.32s...\") is longer than "
		                 "%zu bytes%s",
		                 b->fn, i, k, KVL_KEY_MAX - 1 - s->tenant_len,
		                 s->tenant_len ? " (with the tenant's prefix)"
		                               : "");
	for (size_t j = 0; j < kvl__batch_count(b, i); j++) {
		const void *addr = b->op == KVL__OP_PUT ? b->pieces[at + j].addr
		                                        : b->ranges[at + j].addr;
		size_t n = b->op == KVL__OP_PUT ? b->pieces[at + j].len
		                                : b->ranges[at + j].len;
		if (!addr && n)
			return kvl__fail(&s->err, KVL_EINVAL,
			                 "%s: keys[%zu] \"%s\": %s[%zu].addr is "
			                 "NULL with len %zu",
			                 b->fn, i, k,
			                 b->op == KVL__OP_PUT ? "pieces" : "ranges",
			                 at + j, n);
		if (n > UINTPTR_MAX - (uintptr_t)addr)
			return kvl__fail(&s->err, KVL_EINVAL,
			                 "%s: keys[%zu] \"%s\": %s[%zu] (%p, "
			                 "%zu bytes) wraps past the end of the "
			                 "address space",
			                 b->fn, i, k,
			                 b->op == KVL__OP_PUT ? "pieces" : "ranges",
			                 at + j, addr, n);
	}
	return 0;
}

/* The keys of b with the tenant's prefix: one allocation holding the key
 * pointers (returned; cast to the key array) and the keys. Keys that
 * failed the checks keep their place, unread. NULL: out of memory. */
static char *tenant_keys(const kvl_store *s, const kvl__batch *b)
{
	size_t bytes = b->n * sizeof(char *);
	for (size_t i = 0; i < b->n; i++)
		if (b->results[i] == 0)
			bytes += s->tenant_len + strlen(b->keys[i]) + 1;
	char *mem = malloc(bytes);
	if (!mem)
		return NULL;
	const char **keys = (const char **)(void *)mem;
	char *o = mem + b->n * sizeof(char *);
	for (size_t i = 0; i < b->n; i++) {
		keys[i] = b->keys[i];
		if (b->results[i] != 0)
			continue;
		size_t n = strlen(b->keys[i]);
		keys[i] = o;
		memcpy(o, s->tenant, s->tenant_len);
		memcpy(o + s->tenant_len, b->keys[i], n + 1);
		o += s->tenant_len + n + 1;
	}
	return mem;
}

static int io_failure(int rc)
{
	return rc == KVL_EIO || rc == KVL_ETIMEDOUT;
}

/* Tells the breaker whether call b, which returned rc, failed: whole, or
 * in every key it passed to the backend. */
static void record_call(kvl_store *s, const kvl__batch *b, int rc)
{
	int failed = io_failure(rc);
	if (rc == 0) {
		failed = 1;
		for (size_t i = 0; i < b->n && failed; i++)
			if (b->results[i] != KVL_EINVAL &&
			    !io_failure(b->results[i]))
				failed = 0;
	}
	kvl__breaker_record(s->breaker, failed,
	                    failed ? kvl__err_get(&s->err) : "");
}

/* The prober's call: the backend's existence query for one key, past the
 * breaker. 0 when the store answered. */
static int store_probe(void *ctx)
{
	kvl_store *s = ctx;
	char name[sizeof s->tenant + sizeof PROBE_KEY];
	snprintf(name, sizeof name, "%s%s", s->tenant, PROBE_KEY);
	const char *key = name;
	int res = 0;
	kvl__batch b = {.op = KVL__OP_EXISTS, .n = 1, .keys = &key,
	                .results = &res, .fn = "probe"};
	int rc = s->ops->exists(s, s->impl, &b);
	/* Any answer but an I/O failure (even a refusal) is the store's. */
	return rc < 0 ? rc : io_failure(res) ? res : 0;
}

int kvl__store_call(kvl_store *s, const kvl__batch *b)
{
	if (!s)
		return KVL_EINVAL;
	if (b->n == 0)
		return 0;
	int has_items = b->op == KVL__OP_GET || b->op == KVL__OP_PUT;
	const void *items = b->op == KVL__OP_PUT ? (const void *)b->pieces
	                                         : (const void *)b->ranges;
	const char *items_name = b->op == KVL__OP_PUT ? "pieces" : "ranges";
	const char *counts_name = b->op == KVL__OP_PUT ? "n_pieces" : "n_ranges";
	if (!b->keys)
		return kvl__fail(&s->err, KVL_EINVAL, "%s: keys is NULL (n=%zu)",
		                 b->fn, b->n);
	if (!b->results)
		return kvl__fail(&s->err, KVL_EINVAL,
		                 "%s: results is NULL (n=%zu)", b->fn, b->n);
	if (has_items && !b->counts)
		return kvl__fail(&s->err, KVL_EINVAL, "%s: %s is NULL (n=%zu)",
		                 b->fn, counts_name, b->n);
	for (size_t i = 0; has_items && !items && i < b->n; i++)
		if (b->counts[i])
			return kvl__fail(&s->err, KVL_EINVAL,
			                 "%s: %s is NULL but %s[%zu] is %zu",
			                 b->fn, items_name, counts_name, i,
			                 b->counts[i]);

	/* Bad keys get KVL_EINVAL; the backend sees each run of good ones. */
	size_t bad = 0, at = 0;
	for (size_t i = 0; i < b->n; i++) {
		int rc = check_key(s, b, i, at);
		b->results[i] = rc;
		bad += rc < 0;
		at += kvl__batch_count(b, i);
	}
	if (bad == b->n)
		return 0;
	/* An unhold always reaches the backend: what was held is let go
	 * even while the breaker refuses calls. */
	kvl__breaker *brk = b->op == KVL__OP_UNHOLD ? NULL : s->breaker;
	if (brk) {
		char why[KVL__ERRMSG_MAX];
		int rc = kvl__breaker_admit(brk, why, sizeof why);
		if (rc) {
			for (size_t i = 0; i < b->n; i++)
				if (b->results[i] == 0)
					b->results[i] = rc;
			return kvl__fail(&s->err, rc, "%s: %s", b->fn, why);
		}
	}
	const char *const *keys = b->keys; /* the caller's, for messages */
	kvl__batch tb = *b;
	char *tkeys = NULL;
	if (s->tenant_len) {
		tkeys = tenant_keys(s, b);
		if (!tkeys)
			return kvl__fail(&s->err, KVL_ENOMEM, "%s: out of memory",
			                 b->fn);
		tb.keys = (const char *const *)tkeys;
		b = &tb;
	}
	int rc = bad == 0 ? backend_run(s, b)
	                  : kvl__batch_runs(b, key_bad, backend_run, s);
	free(tkeys);
	for (size_t i = 0; b->op == KVL__OP_UNHOLD && i < b->n; i++)
		if (b->results[i] == KVL_ENOTFOUND) { /* the caller's mistake */
			kvl__fail(&s->err, KVL_ENOTFOUND,
			          "unhold: key \"%s\" is not held", keys[i]);
			break;
		}
	if (brk)
		record_call(s, b, rc);
	return rc;
}

int kvl_store_exists(kvl_store *store, const char *const *keys, size_t n,
                     int *results)
{
	kvl__batch b = {.op = KVL__OP_EXISTS, .n = n, .keys = keys,
	                .results = results, .fn = "kvl_store_exists"};
	return kvl__store_call(store, &b);
}

int kvl_store_get(kvl_store *store, const char *const *keys, size_t n,
                  const kvl_range *ranges, const size_t *n_ranges,
                  int *results)
{
	kvl__batch b = {.op = KVL__OP_GET, .n = n, .keys = keys,
	                .counts = n_ranges, .ranges = ranges,
	                .results = results, .fn = "kvl_store_get"};
	return kvl__store_call(store, &b);
}

int kvl_store_put(kvl_store *store, const char *const *keys, size_t n,
                  const kvl_iov *pieces, const size_t *n_pieces, int *results)
{
	kvl__batch b = {.op = KVL__OP_PUT, .n = n, .keys = keys,
	                .counts = n_pieces, .pieces = pieces,
	                .results = results, .fn = "kvl_store_put"};
	return kvl__store_call(store, &b);
}

int kvl_store_remove(kvl_store *store, const char *const *keys, size_t n,
                     int *results)
{
	kvl__batch b = {.op = KVL__OP_REMOVE, .n = n, .keys = keys,
	                .results = results, .fn = "kvl_store_remove"};
	return kvl__store_call(store, &b);
}

void kvl__store_unregister(kvl_store *store, void *addr)
{
	if (store && addr && store->ops->unreg)
		store->ops->unreg(store, store->impl, addr);
}

int kvl__store_hold(kvl_store *store, const char *const *keys, size_t n,
                    int *results)
{
	kvl__batch b = {.op = KVL__OP_HOLD, .n = n, .keys = keys,
	                .results = results, .fn = "hold"};
	return kvl__store_call(store, &b);
}

int kvl__store_unhold(kvl_store *store, const char *const *keys, size_t n,
                      int *results)
{
	kvl__batch b = {.op = KVL__OP_UNHOLD, .n = n, .keys = keys,
	                .results = results, .fn = "unhold"};
	return kvl__store_call(store, &b);
}

/* ------------------------------------------------------ in place, caps */

kvl__store_caps kvl__store_caps_of(const kvl_store *store)
{
	return store->caps;
}

const kvl__mac *kvl__store_mac(const kvl_store *store)
{
	return store->caps.trusted ? NULL : store->mac;
}

int kvl__store_peek(kvl_store *store, const char *const *keys, size_t n,
                    kvl__view *views, int *results)
{
	if (!store->caps.in_place)
		return kvl__fail(&store->err, KVL_ENOTSUP,
		                 "peek: the %s store does not lend its memory",
		                 store->ops->scheme);
	return n ? store->ops->peek(store, store->impl, keys, n, views,
	                            results)
	         : 0;
}

void kvl__store_release(kvl_store *store, kvl__view *views, size_t n)
{
	if (store->caps.in_place && n)
		store->ops->release(store, store->impl, views, n);
}

int kvl__store_reserve(kvl_store *store, uint64_t len, kvl__view *out)
{
	if (!store->caps.in_place)
		return kvl__fail(&store->err, KVL_ENOTSUP,
		                 "reserve: the %s store does not lend its memory",
		                 store->ops->scheme);
	return store->ops->reserve(store, store->impl, len, out);
}

int kvl__store_commit(kvl_store *store, const char *key, kvl__view *v)
{
	if (!store->caps.in_place)
		return KVL_ENOTSUP;
	return store->ops->commit(store, store->impl, key, v);
}

void kvl__store_abort(kvl_store *store, kvl__view *v)
{
	if (store->caps.in_place)
		store->ops->abort(store, store->impl, v);
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
	if (len > UINTPTR_MAX - (uintptr_t)addr)
		return kvl__fail(&store->err, KVL_EINVAL,
		                 "kvl_store_register: %p + %zu bytes wraps past "
		                 "the end of the address space",
		                 addr, len);
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
	if (store->breaker) {
		int open = 0;
		kvl__breaker_stats(store->breaker, &out->breaker_opens,
		                   &out->breaker_refused, &open);
		out->breaker_open = (uint64_t)open;
	}
	return 0;
}

int kvl_store_stats_render(kvl_store *store, kvl_stats_format format,
                           char *buf, size_t len, size_t *needed)
{
	if (!store)
		return KVL_EINVAL;
	int rc = kvl__render_check(&store->err, "stats_render", format, buf,
	                           len);
	kvl_store_stats s;
	if (rc || (rc = kvl_store_stats_get(store, &s)))
		return rc;
	kvl__cursor c = {buf, len, 0};
	if (format == KVL_STATS_PROMETHEUS) {
		kvl__render_store_prom(&c, &s, store->note);
		kvl__store_render_more(store, &c, format);
	} else {
		kvl__put(&c, "{");
		kvl__render_store_json(&c, &s, store->note);
		kvl__store_render_more(store, &c, format);
		kvl__put(&c, "}\n");
	}
	rc = kvl__cursor_finish(&c, needed);
	if (rc)
		kvl__fail(&store->err, rc, "stats_render: the text needs %zu "
		          "bytes and a NUL, len is %zu", c.used, len);
	return rc;
}

void kvl__store_render_more(kvl_store *store, struct kvl__cursor *c,
                            kvl_stats_format format)
{
	if (store->ops->render)
		store->ops->render(store->impl, c, format);
}

uint64_t kvl__evict_key_hash(const char *key)
{
	return kvl__evict_hash_of(XXH3_128bits(key, strlen(key)).low64);
}

int kvl__store_on_evict(kvl_store *store, const kvl__evict_hook *hook)
{
	if (!store->ops->on_evict)
		return kvl__fail(&store->err, KVL_ENOTSUP,
		                 "the %s store cannot hand over what it evicts",
		                 store->ops->scheme);
	return store->ops->on_evict(store, store->impl, hook);
}

int kvl__store_size(kvl_store *store, const char *key, uint64_t *len)
{
	if (!store->ops->size)
		return KVL_ENOTSUP;
	size_t n = strnlen(key, KVL_KEY_MAX);
	if (n == 0 || n + store->tenant_len >= KVL_KEY_MAX)
		return kvl__fail(&store->err, KVL_EINVAL,
		                 "size: key is empty or too long");
	char full[KVL_KEY_MAX];
	memcpy(full, store->tenant, store->tenant_len);
	memcpy(full + store->tenant_len, key, n + 1);
	return store->ops->size(store, store->impl, full, len);
}

kvl__err *kvl__store_errp(kvl_store *store)
{
	return &store->err;
}

const char *kvl__store_note(const kvl_store *store)
{
	return store->note;
}
