/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_mooncake.c — the Mooncake Store (scheme "mooncake"), through the C
 * API of its client library (mooncake-store/include/store_c.h), loaded at
 * open with dlopen: kvlink builds and runs without Mooncake, and only
 * opening a mooncake:// store needs libmooncake_store.so.
 *
 * URI: mooncake://MASTER_HOST[:PORT][?options] (see docs/mooncake.md).
 *
 * Objects: one kvlink object is one Mooncake object under the same key.
 * Mooncake's C API moves whole objects only (no byte ranges), so:
 *  - put gathers each object's pieces into a staging buffer registered
 *    with Mooncake and puts from there (batch_put_from); Mooncake keeps an
 *    object that exists and reports it stored, and so does kvlink;
 *  - get reads whole objects into staging (batch_get_into) and copies the
 *    asked ranges out; a buffer too small for the object (the ranges end
 *    before it does) is answered by asking the object's size and reading
 *    again;
 *  - an object that is one piece (put) or one range from offset 0 (get) in
 *    memory registered through kvl_store_register moves straight between
 *    that memory and the pool, with no staging copy;
 *  - the store sets store->whole_reads, and the linker then reads every
 *    layer of a page with its first layer: each object crosses the network
 *    once per load instead of once per layer (docs/mooncake.md measures
 *    the choice).
 * The store is never trusted: kvlink verifies payload checksums on reads.
 *
 * Staging: `staging` bytes in two halves, each used by one call at a time,
 * so the loader and the offloader (and engine threads) run concurrently. A
 * call moves its keys in groups that fit a half; an object larger than a
 * half fails with KVL_ERANGE unless it moves in place. Mooncake's client is thread-safe; counters are
 * atomics.
 */
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "store/backend.h"

/* Mooncake's ErrorCode values that kvlink tells apart (types.h). */
#define MC_BUFFER_OVERFLOW (-10)
#define MC_SEGMENT_NOT_FOUND (-101)
#define MC_NO_AVAILABLE_HANDLE (-200)
#define MC_INVALID_PARAMS (-600)
#define MC_REPLICA_IS_NOT_READY (-703)
#define MC_OBJECT_NOT_FOUND (-704)
#define MC_OBJECT_ALREADY_EXISTS (-705)
#define MC_OBJECT_HAS_LEASE (-706)
#define MC_LEASE_EXPIRED (-707)

/* Keys per Mooncake call (stack arrays, no allocation per call). */
#define MC_GROUP 256
/* Registered regions remembered for zero-copy moves; more are registered
 * with Mooncake but moved through staging. */
#define MC_REGIONS 64

typedef struct mc_replicate_config {
	size_t replica_num;
	int with_soft_pin;
	int with_hard_pin;
	const char **preferred_segments;
	size_t preferred_segments_count;
} mc_replicate_config;

/* The functions of store_c.h that kvlink calls. */
struct mc_api {
	void *(*create)(void);
	void (*destroy)(void *);
	int (*setup)(void *, const char *, const char *, uint64_t, uint64_t,
	             const char *, const char *, const char *);
	int (*batch_put_from)(void *, const char **, void **, const size_t *,
	                      size_t, const mc_replicate_config *, int *);
	int (*batch_get_into)(void *, const char **, void **, const size_t *,
	                      size_t, int64_t *);
	int (*batch_is_exist)(void *, const char **, size_t, int *);
	int64_t (*get_size)(void *, const char *);
	int (*remove)(void *, const char *, int);
	int (*register_buffer)(void *, void *, size_t);
};

struct mstore {
	struct mc_api api;
	void *client;
	mc_replicate_config cfg;
	uint8_t *staging;
	size_t half; /* bytes in each half of staging */
	pthread_mutex_t half_mu[2];
	atomic_uint next_half;
	uint64_t remove_wait_ms;
	pthread_rwlock_t reg_mu;
	struct {
		uintptr_t lo, hi;
	} regions[MC_REGIONS]; /* (reg_mu) */
	size_t n_regions;      /* (reg_mu) */
	atomic_uint_fast64_t hits, misses, puts, errors;
};

/* ------------------------------------------------------------ staging */

/* Takes a free half of staging (or waits for one); returns its index. */
static unsigned half_take(struct mstore *m)
{
	for (unsigned i = 0; i < 2; i++)
		if (pthread_mutex_trylock(&m->half_mu[i]) == 0)
			return i;
	unsigned i = atomic_fetch_add(&m->next_half, 1) & 1;
	pthread_mutex_lock(&m->half_mu[i]);
	return i;
}

static void half_give(struct mstore *m, unsigned i)
{
	pthread_mutex_unlock(&m->half_mu[i]);
}

/* 1 if [p, p + len) lies in memory registered through kvl_store_register. */
static int registered(struct mstore *m, const void *p, size_t len)
{
	uintptr_t lo = (uintptr_t)p, hi = lo + len;
	int found = 0;
	pthread_rwlock_rdlock(&m->reg_mu);
	for (size_t i = 0; i < m->n_regions && !found; i++)
		found = lo >= m->regions[i].lo && hi <= m->regions[i].hi;
	pthread_rwlock_unlock(&m->reg_mu);
	return found;
}

/* A set of up to MC_GROUP keys of one Mooncake call, by index into the
 * caller's array. Mooncake's batch calls key their work by name, so a key
 * may appear once per call: a repeat would leave its buffer unwritten yet
 * reported read. */
typedef struct keyset {
	short slot[2 * MC_GROUP]; /* open addressing, -1: empty */
} keyset;

static void keyset_clear(keyset *ks)
{
	memset(ks->slot, 0xff, sizeof ks->slot);
}

/* Adds keys[i]; returns the index of an equal key already there, or -1. */
static int keyset_add(keyset *ks, const char *const *keys, size_t i)
{
	uint32_t h = 2166136261u;
	for (const char *c = keys[i]; *c; c++)
		h = (h ^ (uint8_t)*c) * 16777619u;
	size_t at = h % (2 * MC_GROUP);
	while (ks->slot[at] >= 0 && strcmp(keys[ks->slot[at]], keys[i]) != 0)
		at = (at + 1) % (2 * MC_GROUP);
	if (ks->slot[at] >= 0)
		return ks->slot[at];
	ks->slot[at] = (short)i;
	return -1;
}

/* ------------------------------------------------------------- results */

/* A per-key failure of Mooncake as a kvlink code, with a message. Each
 * operation counts its failed keys from its results at the end. */
static int mc_fail(kvl_store *store, const char *op, const char *key,
                   int64_t code)
{
	if (code == MC_NO_AVAILABLE_HANDLE || code == MC_SEGMENT_NOT_FOUND)
		return kvl__fail(&store->err, KVL_EFULL,
		                 "mooncake: %s %s: no segment has room (Mooncake "
		                 "error %lld); add memory with segment= here or "
		                 "in another client",
		                 op, key, (long long)code);
	if (code == MC_LEASE_EXPIRED)
		return kvl__fail(&store->err, KVL_EIO,
		                 "mooncake: %s %s: the read lease expired before "
		                 "the transfer finished, read alone too (raise "
		                 "the master's default_kv_lease_ttl)",
		                 op, key);
	return kvl__fail(&store->err, KVL_EIO,
	                 "mooncake: %s %s: Mooncake error %lld", op, key,
	                 (long long)code);
}

static int absent(int64_t code)
{
	return code == MC_OBJECT_NOT_FOUND || code == MC_REPLICA_IS_NOT_READY;
}

/* ---------------------------------------------------------------- exists */

static int mc_exists(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct mstore *m = impl;
	const char *const *keys = b->keys;
	size_t n = b->n;
	int *results = b->results;
	for (size_t i = 0; i < n; i += MC_GROUP) {
		size_t g = n - i < MC_GROUP ? n - i : MC_GROUP;
		if (m->api.batch_is_exist(m->client, (const char **)keys + i, g,
		                          results + i) != 0)
			return kvl__fail(&store->err, KVL_EIO,
			                 "mooncake: exists: the call failed");
		size_t failed = 0;
		for (size_t k = i; k < i + g; k++) {
			if (results[k] == 1) {
				atomic_fetch_add(&m->hits, 1);
			} else if (results[k] == 0 || absent(results[k])) {
				results[k] = 0;
				atomic_fetch_add(&m->misses, 1);
			} else {
				results[k] = mc_fail(store, "exists",
				                     keys[k], results[k]);
				failed++;
			}
		}
		atomic_fetch_add(&m->errors, failed);
		/* Every key failed: the master is unreachable, and the call
		 * says so rather than each key. */
		if (failed == g) {
			char last[KVL__ERRMSG_MAX];
			snprintf(last, sizeof last, "%s",
			         kvl_store_errmsg(store));
			return kvl__fail(&store->err, KVL_EIO,
			                 "mooncake: exists: no key answered; "
			                 "last: %s",
			                 last);
		}
	}
	return 0;
}

/* ------------------------------------------------------------------- get */

/* The bytes a key's ranges need: the end of the furthest one. */
static uint64_t ranges_end(const kvl_range *r, size_t n)
{
	uint64_t end = 0;
	for (size_t i = 0; i < n; i++) {
		if (r[i].len > UINT64_MAX - r[i].offset)
			return UINT64_MAX; /* beyond any object */
		if (r[i].offset + r[i].len > end)
			end = r[i].offset + r[i].len;
	}
	return end;
}

/* Copies key k's ranges out of the object at obj of `len` bytes (unless
 * it was read in place); 0, or KVL_ERANGE. */
static int scatter(kvl_store *store, const char *key, const uint8_t *obj,
                   int64_t len, const kvl_range *r, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (r[i].offset > (uint64_t)len ||
		    r[i].len > (uint64_t)len - r[i].offset)
			return kvl__fail(&store->err, KVL_ERANGE,
			                 "mooncake: get %s: range %llu+%llu beyond "
			                 "the object's %lld bytes",
			                 key, (unsigned long long)r[i].offset,
			                 (unsigned long long)r[i].len,
			                 (long long)len);
	for (size_t i = 0; i < n; i++)
		if ((const uint8_t *)r[i].addr != obj + r[i].offset)
			memcpy(r[i].addr, obj + r[i].offset, r[i].len);
	return 0;
}

/* Reads one key alone, its size asked first: into the caller's memory
 * when its one range is the whole object in registered memory, else into
 * staging at `stage` (room: `room` bytes) and copied out. For keys whose
 * object is larger than their ranges, and for reads whose lease ran out
 * in a larger call. */
static int get_alone(kvl_store *store, struct mstore *m, const char *key,
                         uint8_t *stage, size_t room, const kvl_range *r,
                         size_t n)
{
	int64_t size = m->api.get_size(m->client, key);
	if (size < 0)
		return absent(size) ? KVL_ENOTFOUND
		                    : mc_fail(store, "get", key, size);
	void *buf = stage;
	if (n == 1 && r[0].offset == 0 && r[0].len == (uint64_t)size &&
	    registered(m, r[0].addr, r[0].len))
		buf = r[0].addr;
	else if ((uint64_t)size > room)
		return kvl__fail(&store->err, KVL_ERANGE,
		                 "mooncake: get %s: object of %lld bytes is "
		                 "larger than half of staging (%zu); raise "
		                 "staging=",
		                 key, (long long)size, room);
	const char *kp[1] = {key};
	void *bp[1] = {buf};
	size_t sz[1] = {(size_t)size};
	int64_t got;
	if (m->api.batch_get_into(m->client, kp, bp, sz, 1, &got) != 0)
		return kvl__fail(&store->err, KVL_EIO,
		                 "mooncake: get %s: the call failed", key);
	if (got < 0)
		return absent(got) ? KVL_ENOTFOUND
		                   : mc_fail(store, "get", key, got);
	return scatter(store, key, buf, got, r, n);
}

static int mc_get(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct mstore *m = impl;
	const char *const *keys = b->keys;
	size_t n = b->n;
	const kvl_range *ranges = b->ranges;
	const size_t *n_ranges = b->counts;
	int *results = b->results;
	const char *kp[MC_GROUP];
	void *bp[MC_GROUP];
	size_t sz[MC_GROUP], idx[MC_GROUP];
	const kvl_range *rp[MC_GROUP];
	int64_t got[MC_GROUP];
	keyset ks;
	unsigned h = half_take(m);
	uint8_t *base = m->staging + h * m->half;
	const kvl_range *r = ranges;
	size_t i = 0;
	int rc = 0;
	while (i < n && !rc) {
		/* A group: distinct keys that fit this half, MC_GROUP at
		 * most. */
		size_t g = 0, used = 0;
		keyset_clear(&ks);
		for (; i < n && g < MC_GROUP; r += n_ranges[i], i++) {
			uint64_t need = ranges_end(r, n_ranges[i]);
			if (need == UINT64_MAX) {
				results[i] = kvl__fail(
					&store->err, KVL_ERANGE,
					"mooncake: get %s: a range ends past "
					"2^64 bytes",
					keys[i]);
				continue;
			}
			int direct = n_ranges[i] == 1 && r[0].offset == 0 &&
			             registered(m, r[0].addr, r[0].len);
			if (!direct && need > m->half) {
				results[i] = kvl__fail(
					&store->err, KVL_ERANGE,
					"mooncake: get %s: %llu bytes do not "
					"fit half of staging (%zu); raise "
					"staging=",
					keys[i], (unsigned long long)need,
					m->half);
				continue;
			}
			if (!direct && used + need > m->half)
				break;
			kp[g] = keys[i];
			if (keyset_add(&ks, kp, g) >= 0)
				break; /* a repeat goes in the next call */
			bp[g] = direct ? r[0].addr : base + used;
			sz[g] = (size_t)need;
			rp[g] = r;
			idx[g++] = i;
			used += direct ? 0 : kvl__round64((size_t)need);
		}
		if (g == 0)
			continue;
		if (m->api.batch_get_into(m->client, kp, bp, sz, g, got) != 0) {
			rc = kvl__fail(&store->err, KVL_EIO,
			               "mooncake: get: the call failed");
			break;
		}
		/* Scatter first: a key read again alone reuses the half, so
		 * those wait until the group is out. */
		size_t n_big = 0;
		for (size_t k = 0; k < g; k++) {
			if (got[k] == MC_INVALID_PARAMS ||
			    got[k] == MC_BUFFER_OVERFLOW ||
			    got[k] == MC_LEASE_EXPIRED) {
				kp[n_big] = kp[k];
				rp[n_big] = rp[k];
				idx[n_big++] = idx[k];
				continue;
			}
			results[idx[k]] =
				got[k] >= 0 ? scatter(store, kp[k], bp[k], got[k],
				                      rp[k], n_ranges[idx[k]])
				: absent(got[k]) ? KVL_ENOTFOUND
				                 : mc_fail(store, "get", kp[k],
				                           got[k]);
		}
		for (size_t k = 0; k < n_big; k++)
			results[idx[k]] = get_alone(store, m, kp[k], base,
			                            m->half, rp[k],
			                            n_ranges[idx[k]]);
	}
	for (size_t j = 0; !rc && j < n; j++) {
		if (results[j] == KVL_ENOTFOUND)
			atomic_fetch_add(&m->misses, 1);
		else if (results[j] >= 0)
			atomic_fetch_add(&m->hits, 1);
		else
			atomic_fetch_add(&m->errors, 1);
	}
	half_give(m, h);
	return rc;
}

/* ------------------------------------------------------------------- put */


/* Puts up to MC_GROUP keys through staging at `base`. Mooncake keeps an
 * object that exists and reports the put as done, so such a key is
 * KVL_PUT_STORED too ("already exists" counts as stored): telling the two
 * apart would cost a lookup per call, which measured 20 % of the put
 * throughput at 64 KiB. A key repeated within the call is
 * KVL_PUT_PRESENT after its first. */
static int put_group(kvl_store *store, struct mstore *m, uint8_t *base,
                     const char *const *keys, size_t n,
                     const kvl_iov *pieces, const size_t *n_pieces,
                     int *results)
{
	const char *kp[MC_GROUP];
	void *bp[MC_GROUP];
	size_t sz[MC_GROUP], idx[MC_GROUP];
	int res[MC_GROUP];
	/* first[i]: the index of the first key equal to keys[i]. */
	short first[MC_GROUP];
	keyset ks;
	keyset_clear(&ks);
	for (size_t i = 0; i < n; i++) {
		int f = keyset_add(&ks, keys, i);
		first[i] = (short)(f >= 0 ? f : (int)i);
	}
	const kvl_iov *pc = pieces;
	size_t i = 0;
	while (i < n) {
		size_t g = 0, used = 0;
		for (; i < n; pc += n_pieces[i], i++) {
			uint64_t len = 0;
			for (size_t p = 0; p < n_pieces[i]; p++)
				len += pc[p].len;
			if (first[i] != (short)i) {
				/* A repeat is resolved after its first. */
				results[i] = KVL_PUT_PRESENT;
				continue;
			}
			if (len == 0) {
				results[i] = kvl__fail(
					&store->err, KVL_ENOTSUP,
					"mooncake: put %s: Mooncake holds no "
					"empty objects",
					keys[i]);
				continue;
			}
			int direct = n_pieces[i] == 1 &&
			             registered(m, pc[0].addr, pc[0].len);
			if (!direct && len > m->half) {
				results[i] = kvl__fail(
					&store->err, KVL_ERANGE,
					"mooncake: put %s: object of %llu bytes "
					"is larger than half of staging (%zu); "
					"raise staging=",
					keys[i], (unsigned long long)len,
					m->half);
				continue;
			}
			if (!direct && used + len > m->half)
				break;
			kp[g] = keys[i];
			bp[g] = direct ? (void *)pc[0].addr : base + used;
			sz[g] = (size_t)len;
			idx[g++] = i;
			if (direct)
				continue;
			uint8_t *at = base + used;
			for (size_t p = 0; p < n_pieces[i]; p++) {
				memcpy(at, pc[p].addr, pc[p].len);
				at += pc[p].len;
			}
			used += kvl__round64((size_t)len);
		}
		if (g == 0)
			continue;
		if (m->api.batch_put_from(m->client, kp, bp, sz, g, &m->cfg,
		                          res) != 0)
			return kvl__fail(&store->err, KVL_EIO,
			                 "mooncake: put: the call failed");
		for (size_t k = 0; k < g; k++) {
			if (res[k] == 0) {
				results[idx[k]] = KVL_PUT_STORED;
				atomic_fetch_add(&m->puts, 1);
			} else if (res[k] == MC_OBJECT_ALREADY_EXISTS) {
				results[idx[k]] = KVL_PUT_STORED;
			} else {
				results[idx[k]] =
					mc_fail(store, "put", kp[k], res[k]);
			}
		}
	}
	/* A key repeated in the call is present if its first was stored. */
	for (i = 0; i < n; i++)
		if (first[i] != (short)i && results[first[i]] < 0)
			results[i] = results[first[i]];
	return 0;
}

static int mc_put(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct mstore *m = impl;
	const char *const *keys = b->keys;
	size_t n = b->n;
	const kvl_iov *pieces = b->pieces;
	const size_t *n_pieces = b->counts;
	int *results = b->results;
	unsigned h = half_take(m);
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i += MC_GROUP) {
		size_t g = n - i < MC_GROUP ? n - i : MC_GROUP;
		rc = put_group(store, m, m->staging + h * m->half, keys + i, g,
		               pieces, n_pieces + i, results + i);
		for (size_t k = i; k < i + g; k++) {
			pieces += n_pieces[k];
			if (!rc && results[k] < 0)
				atomic_fetch_add(&m->errors, 1);
		}
	}
	half_give(m, h);
	return rc;
}

/* ---------------------------------------------------------------- remove */

static int mc_remove(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct mstore *m = impl;
	const char *const *keys = b->keys;
	size_t n = b->n;
	int *results = b->results;
	for (size_t i = 0; i < n; i++) {
		/* Not forced: a reader's lease keeps the object's memory from
		 * reuse under its transfer, so wait for the lease to end
		 * (the master's default_kv_lease_ttl) up to remove_wait_ms. */
		int r;
		uint64_t waited = 0;
		while ((r = m->api.remove(m->client, keys[i], 0)) ==
		               MC_OBJECT_HAS_LEASE &&
		       waited < m->remove_wait_ms) {
			struct timespec ts = {0, 20 * 1000000};
			nanosleep(&ts, NULL);
			waited += 20;
		}
		if (r == MC_OBJECT_HAS_LEASE)
			results[i] = kvl__fail(&store->err, KVL_EIO,
			                       "mooncake: remove %s: still read "
			                       "under a lease after %llu ms",
			                       keys[i],
			                       (unsigned long long)waited);
		else
			results[i] = r == 0       ? 1
			             : absent(r) ? 0
			                         : mc_fail(store, "remove",
			                                   keys[i], r);
		if (results[i] < 0)
			atomic_fetch_add(&m->errors, 1);
	}
	return 0;
}

/* --------------------------------------------------------- the rest */

static int mc_reg(kvl_store *store, void *impl, void *addr, size_t len,
                  kvl_mem_kind mem)
{
	struct mstore *m = impl;
	if (mem != KVL_MEM_HOST)
		return 0; /* moved through host staging: nothing to do */
	int r = m->api.register_buffer(m->client, addr, len);
	if (r != 0)
		return kvl__fail(&store->err, KVL_EIO,
		                 "mooncake: register %zu bytes at %p: Mooncake "
		                 "error %d",
		                 len, addr, r);
	pthread_rwlock_wrlock(&m->reg_mu);
	if (m->n_regions < MC_REGIONS) {
		m->regions[m->n_regions].lo = (uintptr_t)addr;
		m->regions[m->n_regions++].hi = (uintptr_t)addr + len;
	}
	pthread_rwlock_unlock(&m->reg_mu);
	return 0;
}

static void mc_stats(void *impl, kvl_store_stats *out)
{
	struct mstore *m = impl;
	/* Objects, bytes and capacity live in the master: not reported. */
	out->hits = atomic_load(&m->hits);
	out->misses = atomic_load(&m->misses);
	out->puts = atomic_load(&m->puts);
	out->errors = atomic_load(&m->errors);
}

static void mc_close(void *impl)
{
	struct mstore *m = impl;
	if (!m)
		return;
	if (m->client)
		m->api.destroy(m->client);
	free(m->staging);
	pthread_mutex_destroy(&m->half_mu[0]);
	pthread_mutex_destroy(&m->half_mu[1]);
	pthread_rwlock_destroy(&m->reg_mu);
	/* The library stays loaded: its threads and static destructors may
	 * outlive the client, and dlclose under them is not safe. */
	free(m);
}

/* ------------------------------------------------------------------ open */

/* Loads the library and its functions; 0 or KVL_ENOTSUP naming what is
 * missing. */
static int mc_load(struct mstore *m, const char *lib, char *errbuf,
                   size_t errlen)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return kvl__fail_buf(
			errbuf, errlen, KVL_ENOTSUP,
			"mooncake: cannot load Mooncake Store's C library "
			"(libmooncake_store.so, built with "
			"WITH_STORE_C_SHARED=ON): %s; give its path with "
			"?lib= or KVL_MOONCAKE_LIB",
			dlerror());
	static const struct {
		const char *name;
		size_t at;
	} fns[] = {
#define MC_FN(f) {"mooncake_store_" #f, offsetof(struct mc_api, f)}
		MC_FN(create),         MC_FN(destroy),
		MC_FN(setup),          MC_FN(batch_put_from),
		MC_FN(batch_get_into), MC_FN(batch_is_exist),
		MC_FN(get_size),       MC_FN(remove),
		MC_FN(register_buffer),
#undef MC_FN
	};
	for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
		void *f = dlsym(h, fns[i].name);
		if (!f)
			return kvl__fail_buf(errbuf, errlen, KVL_ENOTSUP,
			                     "mooncake: %s has no %s: not a "
			                     "Mooncake Store C library kvlink "
			                     "can use",
			                     lib, fns[i].name);
		memcpy((char *)&m->api + fns[i].at, &f, sizeof f);
	}
	return 0;
}

/* Connects to the master's address ("host:port") within `ms`: Mooncake's
 * setup keeps retrying an absent master for about 90 s, so kvlink asks
 * first. 0, or -1 with the reason in why. */
static int probe_master(const char *master, uint64_t ms, char *why,
                        size_t why_len)
{
	char host[256];
	const char *colon = strrchr(master, ':');
	size_t hl = (size_t)(colon - master);
	if (hl >= sizeof host)
		hl = sizeof host - 1;
	memcpy(host, master, hl);
	host[hl] = '\0';
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	int e = getaddrinfo(host, colon + 1, &hints, &ai);
	if (e) {
		snprintf(why, why_len, "%s", gai_strerror(e));
		return -1;
	}
	snprintf(why, why_len, "no address");
	int ok = 0;
	for (struct addrinfo *a = ai; a && !ok; a = a->ai_next) {
		int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK,
		                a->ai_protocol);
		if (fd < 0)
			continue;
		int rc = connect(fd, a->ai_addr, a->ai_addrlen);
		if (rc < 0 && errno == EINPROGRESS) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			int err = ETIMEDOUT;
			socklen_t el = sizeof err;
			if (poll(&p, 1, (int)ms) == 1)
				getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
			rc = err ? -1 : 0;
			errno = err;
		}
		if (rc == 0)
			ok = 1;
		else
			snprintf(why, why_len, "%s", strerror(errno));
		close(fd);
	}
	freeaddrinfo(ai);
	return ok ? 0 : -1;
}

static int mc_open(kvl_store *store, kvl__uri *uri, void **impl,
                   kvl__store_caps *caps, char *errbuf, size_t errlen)
{
	const char *local = "127.0.0.1", *metadata = "P2PHANDSHAKE";
	const char *protocol = "tcp", *device = "";
	const char *lib = getenv("KVL_MOONCAKE_LIB");
	uint64_t segment = 0, buffer = 64ull << 20, staging = 256ull << 20;
	uint64_t replicas = 1, connect_ms = 3000, remove_wait_ms = 15000;
	int rc;
	if (!lib || !*lib)
		lib = "libmooncake_store.so";
	kvl__uri_str(uri, "local", &local);
	kvl__uri_str(uri, "metadata", &metadata);
	kvl__uri_str(uri, "protocol", &protocol);
	kvl__uri_str(uri, "device", &device);
	kvl__uri_str(uri, "lib", &lib);
	if ((rc = kvl__uri_size(uri, "segment", &segment, errbuf, errlen)) < 0 ||
	    (rc = kvl__uri_size(uri, "buffer", &buffer, errbuf, errlen)) < 0 ||
	    (rc = kvl__uri_size(uri, "staging", &staging, errbuf, errlen)) < 0 ||
	    (rc = kvl__uri_u64(uri, "replicas", &replicas, errbuf, errlen)) < 0 ||
	    (rc = kvl__uri_u64(uri, "connect_timeout_ms", &connect_ms, errbuf,
	                       errlen)) < 0 ||
	    (rc = kvl__uri_u64(uri, "remove_wait_ms", &remove_wait_ms, errbuf,
	                       errlen)) < 0 ||
	    (rc = kvl__uri_check_unused(uri, errbuf, errlen)) < 0)
		return rc;
	if (connect_ms < 1 || connect_ms > 600000)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "mooncake: connect_timeout_ms=%llu: "
		                     "1..600000",
		                     (unsigned long long)connect_ms);
	if (replicas < 1 || replicas > 16)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "mooncake: replicas=%llu: 1..16",
		                     (unsigned long long)replicas);
	if (staging < (2u << 20) || staging > (1ull << 40))
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "mooncake: staging=%llu: 2 MiB..1 TiB",
		                     (unsigned long long)staging);
	const char *auth = uri->authority;
	if (!*auth || uri->path[0])
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "mooncake: expected mooncake://MASTER_HOST"
		                     "[:PORT][?options], got host \"%s\" and "
		                     "path \"%s\"",
		                     auth, uri->path);
	char master[256];
	int len = snprintf(master, sizeof master,
	                   strchr(auth, ':') ? "%s" : "%s:50051", auth);
	if (len < 0 || (size_t)len >= sizeof master)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "mooncake: master address too long");

	struct mstore *m = calloc(1, sizeof *m);
	if (!m)
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "mooncake: out of memory");
	pthread_mutex_init(&m->half_mu[0], NULL);
	pthread_mutex_init(&m->half_mu[1], NULL);
	pthread_rwlock_init(&m->reg_mu, NULL);
	m->cfg.replica_num = (size_t)replicas;
	m->remove_wait_ms = remove_wait_ms;
	m->half = (size_t)(staging / 2) & ~(size_t)4095;
	if ((rc = mc_load(m, lib, errbuf, errlen)) < 0)
		goto fail;
	rc = KVL_ENOMEM;
	if (posix_memalign((void **)&m->staging, 4096, 2 * m->half) ||
	    !(m->client = m->api.create())) {
		kvl__fail_buf(errbuf, errlen, rc, "mooncake: out of memory");
		goto fail;
	}
	rc = KVL_EIO;
	char why[128];
	if (probe_master(master, connect_ms, why, sizeof why)) {
		kvl__fail_buf(errbuf, errlen, rc,
		              "mooncake: no master answers at %s: %s; is "
		              "mooncake_master running there?",
		              master, why);
		goto fail;
	}
	int r = m->api.setup(m->client, local, metadata, segment, buffer,
	                     protocol, device, master);
	if (r != 0) {
		kvl__fail_buf(errbuf, errlen, rc,
		              "mooncake: setup with master %s (local %s, "
		              "metadata %s, protocol %s) failed: Mooncake error "
		              "%d; is mooncake_master running there?",
		              master, local, metadata, protocol, r);
		goto fail;
	}
	r = m->api.register_buffer(m->client, m->staging, 2 * m->half);
	if (r != 0) {
		kvl__fail_buf(errbuf, errlen, rc,
		              "mooncake: registering %zu bytes of staging "
		              "failed: Mooncake error %d",
		              2 * m->half, r);
		goto fail;
	}
	(void)store;
	caps->whole_reads = 1; /* never trusted: kvlink verifies reads */
	caps->remote = 1;
	*impl = m;
	return 0;
fail:
	mc_close(m);
	return rc;
}

const kvl__store_ops kvl__store_mooncake_ops = {
	.scheme = "mooncake",
	.open = mc_open,
	.close = mc_close,
	.exists = mc_exists,
	.get = mc_get,
	.put = mc_put,
	.remove = mc_remove,
	.reg = mc_reg,
	.stats = mc_stats,
};
