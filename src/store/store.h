/*
 * store.h — the backend interface behind kvl_store (internal).
 *
 * A backend is a static const table of operations over keys and byte ranges;
 * it knows nothing of layouts, layers or ranks. store.c parses the URI,
 * picks the backend by scheme, validates arguments once for every backend,
 * and owns the handle's error message. Backends report failures through
 * kvl__fail(&store->err, …) so the message names the key and the cause.
 */
#ifndef KVL_STORE_H
#define KVL_STORE_H

#include "core/internal.h"

/* A parsed URI: "scheme:rest" or "scheme://authority/path?query". The
 * strings point into `buf`, a private copy of the URI. */
#define KVL__URI_MAX_OPTS 32
typedef struct kvl__uri {
	char *buf;
	const char *scheme;    /* "mem", "redis", … */
	const char *authority; /* after "//" up to '/' or '?', or "" */
	const char *path;      /* after the authority up to '?', or "" */
	size_t n_opts;
	const char *keys[KVL__URI_MAX_OPTS];
	const char *values[KVL__URI_MAX_OPTS];
	uint8_t used[KVL__URI_MAX_OPTS]; /* set by the getters below */
} kvl__uri;

/* Parses `uri` into `out` (free with kvl__uri_free). KVL_EPARSE with a
 * message in errbuf when malformed (no scheme, empty option name, too many
 * options, an option given twice). */
int kvl__uri_parse(const char *uri, kvl__uri *out, char *errbuf, size_t errlen);
void kvl__uri_free(kvl__uri *uri);

/* Option getters: 0 if absent (out keeps its default), 1 if found and valid,
 * KVL_EPARSE (message in errbuf) if the value is malformed. Sizes accept
 * K, M, G, T and KiB, MiB, GiB, TiB suffixes (all powers of 1024);
 * probabilities are reals in [0, 1]; durations are milliseconds. */
int kvl__uri_str(kvl__uri *uri, const char *key, const char **out);
int kvl__uri_size(kvl__uri *uri, const char *key, uint64_t *out, char *errbuf,
                  size_t errlen);
int kvl__uri_u64(kvl__uri *uri, const char *key, uint64_t *out, char *errbuf,
                 size_t errlen);
int kvl__uri_bool(kvl__uri *uri, const char *key, int *out, char *errbuf,
                  size_t errlen);
int kvl__uri_prob(kvl__uri *uri, const char *key, double *out, char *errbuf,
                  size_t errlen);
/* KVL_EPARSE naming the first option no getter asked for (typos must not
 * pass silently). Call after reading every option. */
int kvl__uri_check_unused(const kvl__uri *uri, char *errbuf, size_t errlen);

/* Parses a byte size with an optional suffix (see above). 0 or KVL_EPARSE. */
int kvl__parse_size(const char *s, uint64_t *out);

struct kvl__view;

typedef struct kvl_store_ops {
	const char *scheme;
	/* Opens the backend from a parsed URI into *impl. `store` is the handle
	 * being built (its err is ready; a backend that wraps another store may
	 * open it). Sets store->trusted. */
	int (*open)(kvl_store *store, kvl__uri *uri, void **impl, char *errbuf,
	            size_t errlen);
	void (*close)(void *impl);
	/* The operations of kvl_store_* with arguments already validated
	 * (non-NULL arrays, n > 0). Same return and per-key result rules. */
	int (*exists)(kvl_store *store, void *impl, const char *const *keys,
	              size_t n, int *results);
	int (*get)(kvl_store *store, void *impl, const char *const *keys,
	           size_t n, const kvl_range *ranges, const size_t *n_ranges,
	           int64_t *results);
	int (*put)(kvl_store *store, void *impl, const char *const *keys,
	           size_t n, const kvl_iov *pieces, const size_t *n_pieces,
	           int *results);
	int (*remove)(kvl_store *store, void *impl, const char *const *keys,
	              size_t n, int *results);
	int (*reg)(kvl_store *store, void *impl, void *addr, size_t len,
	           kvl_mem_kind mem); /* may be NULL: nothing to do */
	void (*stats)(void *impl, kvl_store_stats *out);
	/* Optional zero-copy reads: pins each present object and returns its
	 * bytes in views[i] (results[i]: 1 found, 0 absent, <0 error) until
	 * release unpins them. `pinned` says whether the bytes are in pinned,
	 * mapped memory that GPU copies may read in place. NULL when the
	 * backend cannot. */
	int (*peek)(kvl_store *store, void *impl, const char *const *keys,
	            size_t n, struct kvl__view *views, int *results);
	void (*release)(kvl_store *store, void *impl, struct kvl__view *views,
	                size_t n);
	/* Optional put in place: reserve hands out writable memory for a new,
	 * invisible object of len bytes (`pinned` as for peek); commit makes
	 * it visible under key and returns KVL_PUT_STORED, KVL_PUT_PRESENT
	 * (the key appeared meanwhile; the reservation is dropped) or <0
	 * (dropped too); abort drops it. NULL when the backend cannot. */
	int (*reserve)(kvl_store *store, void *impl, uint64_t len,
	               struct kvl__view *out);
	int (*commit)(kvl_store *store, void *impl, const char *key,
	              struct kvl__view *v);
	void (*abort)(kvl_store *store, void *impl, struct kvl__view *v);
} kvl_store_ops;

typedef struct kvl__view {
	const uint8_t *data;
	uint64_t len;
	void *handle; /* the backend's; NULL when nothing is pinned */
	int pinned;
} kvl__view;

struct kvl_store {
	const kvl_store_ops *ops;
	void *impl;
	int trusted; /* 1: payload checksums need not be verified on reads */
	/* 1: a read costs the whole object whatever its ranges (Mooncake):
	 * the linker reads all of a page's layers at once. */
	int whole_reads;
	kvl__err err;
};

extern const kvl_store_ops kvl__store_mem_ops;
extern const kvl_store_ops kvl__store_fault_ops;
extern const kvl_store_ops kvl__store_redis_ops; /* when KVL_HAVE_REDIS */
extern const kvl_store_ops kvl__store_mooncake_ops;

#endif /* KVL_STORE_H */
