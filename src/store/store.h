/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.h — the store's one door for the rest of kvlink (internal).
 *
 * The linker and the page I/O reach a store only through kvlink.h's
 * kvl_store_* calls and the functions below: what the store can do (one
 * capability record, fixed at open) and its in-place reads and writes,
 * which only stores that lend their memory offer. Backends and their
 * operation tables are behind store/backend.h, which nothing above the
 * store includes.
 */
#ifndef KVL_STORE_H
#define KVL_STORE_H

#include "core/internal.h"

/* What a store can do; fixed at open. */
typedef struct kvl__store_caps {
	/* Payload checksums need not be verified on reads (the process's own
	 * memory): objects written to it carry none. */
	int trusted;
	/* A read costs the whole object whatever its ranges (Mooncake's C
	 * API): the linker reads all of a page's layers at once. */
	int whole_reads;
	/* A read of fewer bytes than this costs about as much as one of this
	 * many (its fixed cost: Mooncake's transfer per range), 0 if reads
	 * cost their bytes: the linker reads a pool whose layers are smaller
	 * per page with its first layer, as on whole_reads. */
	uint64_t layer_read_min;
	/* The store lends its memory: kvl__store_peek/release and
	 * kvl__store_reserve/commit/abort work. */
	int in_place;
	/* Reached over a network, where calls fail and time out: the door's
	 * circuit breaker is on unless the URI says breaker=0. */
	int remote;
} kvl__store_caps;

kvl__store_caps kvl__store_caps_of(const kvl_store *store);

/* The key objects in this store are sealed and checked with: the one from
 * the store's secret_file (or KVL_SECRET_FILE), or NULL when it has none or
 * is trusted (its objects never leave the process and carry no sums). */
typedef struct kvl__mac kvl__mac;
const kvl__mac *kvl__store_mac(const kvl_store *store);

/* The store's message, for callers that fail on its behalf (the page
 * I/O of kvl_pages_*, whose errors the store handle reports). */
kvl__err *kvl__store_errp(kvl_store *store);

/* The note of an option the store accepted but cannot honour ("" if
 * none); fixed at open, so any thread may read it. */
const char *kvl__store_note(const kvl_store *store);

/* Forgets memory that kvl_store_register announced at `addr`, before the
 * memory is freed: a store that moves bytes to and from registered memory
 * by itself (Mooncake's transfer engine) must not touch it afterwards. No
 * call of the store may be using it. */
void kvl__store_unregister(kvl_store *store, void *addr);

/* 1 when the Mooncake library a mooncake:// store opens by default
 * ($KVL_MOONCAKE_LIB, else libmooncake_store.so) carries kvlink's shim, so
 * that such stores move byte ranges (kvl_has_feature("mooncake-ranges")). */
int kvl__mc_shim_available(void);

/* Batch holds: keeps each present object of keys[0..n) from eviction and
 * removal until kvl__store_unhold lets it go, so that the reads of a
 * batch find what its lookup promised. [out] results[i]: 1 held, 0
 * nothing held (absent: its reads will miss; or a store that holds
 * nothing), <0 error. Unhold exactly the keys that got 1 (a store that
 * counts holds answers KVL_ENOTFOUND for a key it does not hold, and the
 * message names it). Holds are
 * counted: a key held twice is let go twice. A hold lasts as long as the
 * store grants it (Mooncake: the master's lease, which the reads renew
 * where it ran out). Returns as kvl_store_get; unhold always reaches the
 * backend, even while the breaker is open. */
int kvl__store_hold(kvl_store *store, const char *const *keys, size_t n,
                    int *results);
int kvl__store_unhold(kvl_store *store, const char *const *keys, size_t n,
                      int *results);

/* An object's bytes lent by the store, or memory reserved for a new one. */
typedef struct kvl__view {
	const uint8_t *data;
	uint64_t len;
	void *handle; /* the backend's; NULL when nothing is held */
	int pinned;   /* the bytes are pinned, mapped host memory (GPU copies
	               * may read and write them in place) */
} kvl__view;

/* In-place reads: holds each present object of keys[0..n) and lends its
 * bytes in views[i] (results[i]: 1 found, 0 absent, <0 error) until
 * kvl__store_release gives them back. An object held may be evicted or
 * removed meanwhile (it is then invisible), but its bytes stay until the
 * release. KVL_ENOTSUP when the store does not lend its memory. */
int kvl__store_peek(kvl_store *store, const char *const *keys, size_t n,
                    kvl__view *views, int *results);
void kvl__store_release(kvl_store *store, kvl__view *views, size_t n);

/* In-place writes: reserve hands out writable memory for a new, invisible
 * object of len bytes; commit makes it visible under `key` and returns
 * KVL_PUT_STORED, KVL_PUT_PRESENT (the key appeared meanwhile: the
 * reservation is dropped) or <0 (dropped too); abort drops it.
 * KVL_ENOTSUP (reserve, commit) when the store does not lend its memory. */
int kvl__store_reserve(kvl_store *store, uint64_t len, kvl__view *out);
int kvl__store_commit(kvl_store *store, const char *key, kvl__view *v);
void kvl__store_abort(kvl_store *store, kvl__view *v);

/* Counters a backend adds to the store's own in a stats render (the tier:
 * store's per-tier figures): Prometheus lines, or JSON members each
 * preceded by a comma; nothing for most stores. */
struct kvl__cursor;
void kvl__store_render_more(kvl_store *store, struct kvl__cursor *c,
                            kvl_stats_format format);

#endif /* KVL_STORE_H */
