/* SPDX-License-Identifier: Apache-2.0 */
/*
 * whole.c — the Mooncake store's whole-object moves, through Mooncake's C
 * API (store_c.h), which has no byte ranges (mooncake.h):
 *  - put gathers each object's pieces into a staging buffer registered
 *    with Mooncake and puts from there (batch_put_from); Mooncake keeps an
 *    object that exists and reports it stored, and so does kvlink;
 *  - get reads whole objects into staging (batch_get_into) and copies the
 *    asked ranges out; a buffer too small for the object (the ranges end
 *    before it does) is answered by asking the object's size and reading
 *    again;
 *  - an object that is one piece (put) or one range from offset 0 (get) in
 *    memory registered through kvl_store_register moves straight between
 *    that memory and the pool, with no staging copy.
 * A call moves its keys in groups that fit a half of staging; an object
 * larger than a half fails with KVL_ERANGE unless it moves in place.
 */
#include <stdio.h>
#include <string.h>

#include "store/mooncake/mooncake.h"

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
		return kvl__mc_absent(size) ? KVL_ENOTFOUND
		                    : kvl__mc_fail(store, "get", key, size);
	void *buf = stage;
	if (n == 1 && r[0].offset == 0 && r[0].len == (uint64_t)size &&
	    kvl__mc_registered(m, r[0].addr, r[0].len))
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
		return kvl__mc_absent(got) ? KVL_ENOTFOUND
		                   : kvl__mc_fail(store, "get", key, got);
	return scatter(store, key, buf, got, r, n);
}

int kvl__mc_get_whole(kvl_store *store, struct mstore *m, const kvl__batch *b)
{
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
	kvl__mc_keyset ks;
	unsigned h = kvl__mc_half_take(m);
	uint8_t *base = m->staging + h * m->half;
	const kvl_range *r = ranges;
	size_t i = 0;
	int rc = 0;
	while (i < n && !rc) {
		/* A group: distinct keys that fit this half, MC_GROUP at
		 * most. */
		size_t g = 0, used = 0;
		kvl__mc_keyset_clear(&ks);
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
			             kvl__mc_registered(m, r[0].addr, r[0].len);
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
			if (kvl__mc_keyset_add(&ks, kp, g) >= 0)
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
				: kvl__mc_absent(got[k]) ? KVL_ENOTFOUND
				                 : kvl__mc_fail(store, "get", kp[k],
				                           got[k]);
		}
		for (size_t k = 0; k < n_big; k++)
			results[idx[k]] = get_alone(store, m, kp[k], base,
			                            m->half, rp[k],
			                            n_ranges[idx[k]]);
	}
	if (!rc)
		kvl__mc_count_gets(m, results, n);
	kvl__mc_half_give(m, h);
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
	kvl__mc_keyset ks;
	kvl__mc_keyset_clear(&ks);
	for (size_t i = 0; i < n; i++) {
		int f = kvl__mc_keyset_add(&ks, keys, i);
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
			             kvl__mc_registered(m, pc[0].addr, pc[0].len);
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
					kvl__mc_fail(store, "put", kp[k], res[k]);
			}
		}
	}
	/* A key repeated in the call is present if its first was stored. */
	for (i = 0; i < n; i++)
		if (first[i] != (short)i && results[first[i]] < 0)
			results[i] = results[first[i]];
	return 0;
}

int kvl__mc_put_whole(kvl_store *store, struct mstore *m, const kvl__batch *b)
{
	const char *const *keys = b->keys;
	size_t n = b->n;
	const kvl_iov *pieces = b->pieces;
	const size_t *n_pieces = b->counts;
	int *results = b->results;
	unsigned h = kvl__mc_half_take(m);
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
	kvl__mc_half_give(m, h);
	return rc;
}

