/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend.h — the interface every store backend implements (internal:
 * store.c and the backends include it, nothing else does).
 *
 * A backend is a static const table of operations over keys and byte
 * ranges; it knows nothing of layouts, layers or ranks. store.c parses the
 * URI, picks the backend by scheme, validates every call's arguments once
 * for all backends and hands the backend only well-formed batches. Backends
 * report failures through kvl__fail(&store->err, …) so that the message
 * names the key and the cause.
 */
#ifndef KVL_BACKEND_H
#define KVL_BACKEND_H

#include "core/mac.h"
#include "core/render.h"
#include "store/store.h"
#include "store/uri.h"

#define KVL__TENANT_MAX 32 /* bytes of a tenant name (option tenant=) */

typedef enum kvl__op {
	KVL__OP_EXISTS,
	KVL__OP_GET,
	KVL__OP_PUT,
	KVL__OP_REMOVE,
	KVL__OP_HOLD,   /* kvl__store_hold */
	KVL__OP_UNHOLD, /* kvl__store_unhold */
} kvl__op;

/* One batched call: n keys, and for a get or put each key's items
 * (counts[i] consecutive ranges or pieces, key 0's first); one result per
 * key, with the meaning kvlink.h gives it for the operation. */
typedef struct kvl__batch {
	kvl__op op;
	size_t n;
	const char *const *keys;
	const size_t *counts;      /* get, put; NULL otherwise */
	const kvl_range *ranges;   /* get */
	const kvl_iov *pieces;     /* put */
	int *results;
	const char *fn;            /* the public function, for messages */
} kvl__batch;

/* Keys [i, j) of b, whose first item is b's item number `at`. */
kvl__batch kvl__batch_slice(const kvl__batch *b, size_t i, size_t j,
                            size_t at);

/* Items of key i. */
static inline size_t kvl__batch_count(const kvl__batch *b, size_t i)
{
	return b->counts ? b->counts[i] : 0;
}

/* Runs fn on each run of consecutive keys of b that skip() leaves in
 * (skip NULL: one run of every key). A run whose fn call fails whole gets
 * the code as the result of each of its keys; when that run was every key,
 * the code is returned too. Else 0. */
int kvl__batch_runs(const kvl__batch *b,
                    int (*skip)(void *ctx, const kvl__batch *b, size_t i),
                    int (*fn)(void *ctx, const kvl__batch *run), void *ctx);

/* Opens the store that a wrapping backend wraps: kvl_store_open, but the
 * store takes no secret (neither secret_file nor KVL_SECRET_FILE: the
 * wrapper's own handle holds the key and does the checks). */
int kvl__store_open_wrapped(const char *uri, kvl_store **out, char *errbuf,
                            size_t errlen);

/* The door's own batch call: checks b's arrays and keys as kvl_store_*
 * do, then runs the backend. For backends that wrap another store. */
int kvl__store_call(kvl_store *store, const kvl__batch *b);

/* An object a store drops to make room, handed to whoever asked for its
 * victims (kvl__store_on_evict) before its bytes are freed: its key as the
 * backend holds it (with the store's tenant prefix, if any), that key's
 * hash (kvl__evict_key_hash) and its bytes, valid only during the call.
 * key is NULL when the store could not read the victim back (a damaged
 * file): nothing to hand over, but its `unlinked` is over. Called on the
 * thread whose call evicted it, with no lock of the store held, so it may
 * call other stores. */
typedef void (*kvl__evict_fn)(void *ctx, uint64_t key_hash, const char *key,
                              const void *data, size_t len);

typedef struct kvl__evict_hook {
	kvl__evict_fn fn;
	void *ctx;
	/* Called once per victim, with its key's hash, at the moment it
	 * becomes invisible (under the store's lock: it must be quick and
	 * call no store), before fn runs for it, so that a reader that
	 * missed the key meanwhile can tell it was on its way down and look
	 * again. A hash, not the key: the file: store's index knows its
	 * objects by hash only (it reads the key from the file afterwards). */
	void (*unlinked)(void *ctx, uint64_t key_hash);
} kvl__evict_hook;

/* The hash that names a key to an eviction hook: the low half of the
 * key's XXH3-128 (what the file: store's index keeps), never 0. */
uint64_t kvl__evict_key_hash(const char *key);
static inline uint64_t kvl__evict_hash_of(uint64_t xxh3_128_low)
{
	return xxh3_128_low ? xxh3_128_low : 1;
}

/* Asks `store` to hand over every object it evicts through hook (which
 * must outlive the store; NULL: stop). For a wrapper (tier:) that spills
 * victims into a lower store. Set it once, before other threads use the
 * store. 0, or KVL_ENOTSUP when the backend cannot tell its evictions
 * (redis://, mooncake://: the server drops objects on its own). */
int kvl__store_on_evict(kvl_store *store, const kvl__evict_hook *hook);

/* [out] *len: the byte length of object `key` (the tenant's prefix is
 * added as for the batch calls). 1 found, 0 absent, <0 error; KVL_ENOTSUP
 * when the backend cannot tell (the tier: store then does not promote from
 * it). */
int kvl__store_size(kvl_store *store, const char *key, uint64_t *len);

typedef struct kvl__store_ops {
	const char *scheme;
	/* Opens the backend from a parsed URI into *impl and says what it can
	 * do in *caps (zeroed before). `store` is the handle being built (its
	 * err is ready; a backend that wraps another store may open it). */
	int (*open)(kvl_store *store, kvl__uri *uri, void **impl,
	            kvl__store_caps *caps, char *errbuf, size_t errlen);
	void (*close)(void *impl);
	/* The four operations, each given a validated batch (n > 0, non-NULL
	 * arrays, keys non-empty and shorter than KVL_KEY_MAX, no NULL item
	 * address with a length). Return 0 when the call was carried out (the
	 * results say the rest) or a negative code when nothing was. */
	int (*exists)(kvl_store *store, void *impl, const kvl__batch *b);
	int (*get)(kvl_store *store, void *impl, const kvl__batch *b);
	int (*put)(kvl_store *store, void *impl, const kvl__batch *b);
	int (*remove)(kvl_store *store, void *impl, const kvl__batch *b);
	int (*reg)(kvl_store *store, void *impl, void *addr, size_t len,
	           kvl_mem_kind mem); /* may be NULL: nothing to do */
	/* Forgets memory that reg registered (addr as given there). NULL:
	 * nothing to do. */
	void (*unreg)(kvl_store *store, void *impl, void *addr);
	/* As kvl__store_hold and _unhold, given a validated batch; NULL:
	 * nothing to hold (every result 0). */
	int (*hold)(kvl_store *store, void *impl, const kvl__batch *b);
	int (*unhold)(kvl_store *store, void *impl, const kvl__batch *b);
	void (*stats)(void *impl, kvl_store_stats *out);
	/* In place (caps.in_place; NULL otherwise): as kvl__store_peek,
	 * _release, _reserve, _commit and _abort in store.h. */
	int (*peek)(kvl_store *store, void *impl, const char *const *keys,
	            size_t n, kvl__view *views, int *results);
	void (*release)(kvl_store *store, void *impl, kvl__view *views,
	                size_t n);
	int (*reserve)(kvl_store *store, void *impl, uint64_t len,
	               kvl__view *out);
	int (*commit)(kvl_store *store, void *impl, const char *key,
	              kvl__view *v);
	void (*abort)(kvl_store *store, void *impl, kvl__view *v);
	/* Optional (NULL: KVL_ENOTSUP): as kvl__store_on_evict and
	 * kvl__store_size above; size gets a valid key. */
	int (*on_evict)(kvl_store *store, void *impl,
	                const kvl__evict_hook *hook);
	int (*size)(kvl_store *store, void *impl, const char *key,
	            uint64_t *len);
	/* Optional: more counters after the store's own in both stats
	 * renders (kvl__store_render_more). */
	void (*render)(void *impl, kvl__cursor *c, kvl_stats_format format);
} kvl__store_ops;

struct kvl_store {
	const kvl__store_ops *ops;
	void *impl;
	kvl__store_caps caps;
	struct kvl__breaker *breaker; /* NULL: off (breaker=0) */
	char tenant[KVL__TENANT_MAX + 8]; /* "kvl1:<tenant>:", or "" */
	size_t tenant_len;
	kvl__mac *mac; /* the secret_file's key, or NULL; loaded at open */
	kvl__err err;
	/* Written by the backend's open, then immutable: an option it
	 * accepted but cannot honour here ("" if none), which
	 * kvl_store_errmsg says after the open and the stats render. */
	char note[KVL__ERRMSG_MAX];
};

extern const kvl__store_ops kvl__store_mem_ops;
extern const kvl__store_ops kvl__store_fault_ops;
extern const kvl__store_ops kvl__store_file_ops;
extern const kvl__store_ops kvl__store_tier_ops;
extern const kvl__store_ops kvl__store_redis_ops; /* when KVL_HAVE_REDIS */
extern const kvl__store_ops kvl__store_rediss_ops; /* the same, over TLS */
extern const kvl__store_ops kvl__store_mooncake_ops;

#endif /* KVL_BACKEND_H */
