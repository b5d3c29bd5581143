/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ranges.c — the Mooncake store's byte-range moves, through kvlink's shim
 * (shim.h, mooncake.h):
 *  - get reads each key's ranges alone, straight into the caller's memory
 *    where it is registered (kvl_store_register; the linker registers its
 *    pools) and through staging otherwise, inside get sessions: a key that
 *    a batch holds (kvl__store_hold) costs no master call, only the
 *    transfer;
 *  - put writes each object's pieces to their offsets inside a put
 *    session, straight from registered memory and through staging
 *    otherwise (adjacent staged pieces move as one range); the object
 *    becomes visible when all of them are written, and one whose write
 *    failed is revoked. A key that exists is KVL_PUT_PRESENT. A page's objects of every pool share a Mooncake
 *    group (kvl__page_group), so that reading one leases them all and the
 *    master evicts them together.
 * A call moves its keys in groups of distinct keys whose staged bytes fit
 * a half of staging; a key whose staged bytes do not is KVL_ERANGE.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/layout.h"
#include "store/mooncake/mooncake.h"

/* The arrays of one shim call: key k's ranges follow key k-1's. */
typedef struct moves {
	const char *keys[MC_GROUP];
	size_t counts[MC_GROUP], idx[MC_GROUP];
	size_t n, at;   /* keys, ranges */
	size_t used;    /* staged bytes */
	void **bufs;    /* the shim's end: registered memory */
	void **dst;     /* the caller's end where staged, else NULL */
	size_t *lens;
	uint64_t *offs;
} moves;

static int moves_alloc(moves *mv, size_t ranges)
{
	size_t r = ranges ? ranges : 1;
	mv->bufs = malloc(r * (2 * sizeof(void *) + sizeof(size_t) +
	                       sizeof(uint64_t)));
	mv->dst = mv->bufs + r;
	mv->lens = (size_t *)(mv->dst + r);
	mv->offs = (uint64_t *)(mv->lens + r);
	return mv->bufs ? 0 : KVL_ENOMEM;
}

static void moves_reset(moves *mv)
{
	mv->n = mv->at = mv->used = 0;
}

/* Where an empty range's probe lands: not the caller's (see moves_add). */
static uint8_t discard;

/* The staged bytes of one key's items, each rounded up as staged. */
static uint64_t staged_need(struct mstore *m, const void *items,
                            size_t n_items, int is_put)
{
	uint64_t need = 0;
	for (size_t j = 0; j < n_items; j++) {
		const void *a;
		size_t len;
		uint64_t off = 0;
		if (is_put) {
			a = ((const kvl_iov *)items)[j].addr;
			len = ((const kvl_iov *)items)[j].len;
		} else {
			a = ((const kvl_range *)items)[j].addr;
			len = ((const kvl_range *)items)[j].len;
			off = ((const kvl_range *)items)[j].offset;
		}
		if (len ? !kvl__mc_registered(m, a, len) : !is_put && off)
			need += kvl__round64(len ? len : 1);
	}
	return need;
}

/* Adds one range of the current key: `p` its memory, `off` its place in
 * the object. A staged one takes staging at base + used; a put's staged
 * range right after the previous one of its key joins it. */
static void moves_add(moves *mv, struct mstore *m, uint8_t *base, void *p,
                      size_t len, uint64_t off, int is_put)
{
	if (len == 0 && (is_put || off == 0))
		return; /* nothing to move, nothing beyond the object */
	if (len == 0) {
		/* An empty range at off is within the object when byte
		 * off - 1 is: read that one byte into staging, and drop it. */
		mv->bufs[mv->at] = base + mv->used;
		mv->dst[mv->at] = &discard;
		mv->used += kvl__round64(1);
		mv->lens[mv->at] = 1;
		mv->offs[mv->at++] = off - 1;
		mv->counts[mv->n]++;
		return;
	}
	if (kvl__mc_registered(m, p, len)) {
		mv->bufs[mv->at] = p;
		mv->dst[mv->at] = NULL;
	} else {
		uint8_t *s = base + mv->used;
		if (is_put)
			memcpy(s, p, len);
		size_t k = mv->at - 1;
		if (is_put && mv->counts[mv->n] && mv->dst[k] &&
		    (uint8_t *)mv->bufs[k] + mv->lens[k] == s &&
		    mv->offs[k] + mv->lens[k] == off) {
			mv->lens[k] += len;
			mv->used += len; /* the join keeps staging contiguous */
			return;
		}
		mv->bufs[mv->at] = s;
		mv->dst[mv->at] = p;
		mv->used += is_put ? len : kvl__round64(len);
	}
	mv->lens[mv->at] = len;
	mv->offs[mv->at++] = off;
	mv->counts[mv->n]++;
}

static void moves_key(moves *mv, const char *key, size_t i)
{
	mv->keys[mv->n] = key;
	mv->idx[mv->n++] = i;
}

/* ------------------------------------------------------------------- get */

static int get_result(kvl_store *store, const char *key, int64_t got)
{
	if (got >= 0)
		return 0;
	if (kvl__mc_absent(got))
		return KVL_ENOTFOUND;
	if (got == MC_INVALID_PARAMS)
		return kvl__fail(&store->err, KVL_ERANGE,
		                 "mooncake: get %s: a range beyond the object",
		                 key);
	return kvl__mc_fail(store, "get", key, got);
}

/* Reads the moves' keys and copies their staged ranges out. */
static int get_moves(kvl_store *store, struct mstore *m, moves *mv,
                     int *results)
{
	int64_t got[MC_GROUP];
	if (m->shim.get_ranges(m->client, mv->keys, mv->n, mv->counts,
	                       mv->bufs, mv->lens, mv->offs, got) != 0)
		return kvl__fail(&store->err, KVL_EIO,
		                 "mooncake: get: the shim's call failed");
	size_t a = 0;
	for (size_t k = 0; k < mv->n; a += mv->counts[k++]) {
		results[mv->idx[k]] = get_result(store, mv->keys[k], got[k]);
		for (size_t j = a; got[k] >= 0 && j < a + mv->counts[k]; j++) {
			if (mv->dst[j] == &discard)
				continue;
			if (mv->dst[j])
				memcpy(mv->dst[j], mv->bufs[j], mv->lens[j]);
			atomic_fetch_add(mv->dst[j] ? &m->staged_bytes
			                            : &m->direct_bytes,
			                 mv->lens[j]);
		}
	}
	return 0;
}

int kvl__mc_get_ranges(kvl_store *store, struct mstore *m,
                       const kvl__batch *b)
{
	size_t total = 0;
	for (size_t i = 0; i < b->n; i++)
		total += b->counts[i];
	moves mv;
	if (moves_alloc(&mv, total))
		return kvl__fail(&store->err, KVL_ENOMEM,
		                 "mooncake: get: out of memory");
	unsigned h = kvl__mc_half_take(m);
	uint8_t *base = m->staging + h * m->half;
	const kvl_range *r = b->ranges;
	kvl__mc_keyset ks;
	size_t i = 0;
	int rc = 0;
	while (i < b->n && !rc) {
		moves_reset(&mv);
		kvl__mc_keyset_clear(&ks);
		for (; i < b->n && mv.n < MC_GROUP; r += b->counts[i], i++) {
			size_t c = b->counts[i];
			uint64_t need = staged_need(m, r, c, 0);
			if (need > m->half) {
				b->results[i] = kvl__fail(
					&store->err, KVL_ERANGE,
					"mooncake: get %s: %llu bytes do not "
					"fit half of staging (%zu); raise "
					"staging=, or register the memory",
					b->keys[i], (unsigned long long)need,
					m->half);
				continue;
			}
			if (mv.used + need > m->half)
				break;
			mv.keys[mv.n] = b->keys[i];
			if (kvl__mc_keyset_add(&ks, mv.keys, mv.n) >= 0)
				break; /* a repeat goes in the next call */
			mv.counts[mv.n] = 0;
			for (size_t j = 0; j < c; j++)
				moves_add(&mv, m, base, r[j].addr, r[j].len,
				          r[j].offset, 0);
			moves_key(&mv, b->keys[i], i);
		}
		if (mv.n)
			rc = get_moves(store, m, &mv, b->results);
	}
	if (!rc)
		kvl__mc_count_gets(m, b->results, b->n);
	kvl__mc_half_give(m, h);
	free(mv.bufs);
	return rc;
}

/* ------------------------------------------------------------------- put */

/* Puts the moves' keys, of sizes[k] bytes each; groups[k] or NULL. */
static int put_moves(kvl_store *store, struct mstore *m, moves *mv,
                     const uint64_t *sizes, const char *const *groups,
                     int *results)
{
	int res[MC_GROUP];
	if (m->shim.put_ranges(m->client, mv->keys, mv->n, sizes, groups,
	                       m->cfg.replica_num, mv->counts, mv->bufs,
	                       mv->lens, mv->offs, res) != 0)
		return kvl__fail(&store->err, KVL_EIO,
		                 "mooncake: put: the shim's call failed");
	for (size_t k = 0; k < mv->n; k++) {
		size_t i = mv->idx[k];
		if (res[k] == 0) {
			results[i] = KVL_PUT_STORED;
			atomic_fetch_add(&m->puts, 1);
		} else if (res[k] == MC_OBJECT_ALREADY_EXISTS) {
			/* The put session says so for free (unlike the C
			 * API: whole.c), so it is told. */
			results[i] = KVL_PUT_PRESENT;
		} else {
			results[i] = kvl__mc_fail(store, "put", mv->keys[k],
			                          res[k]);
		}
	}
	return 0;
}

int kvl__mc_put_ranges(kvl_store *store, struct mstore *m,
                       const kvl__batch *b)
{
	size_t total = 0;
	for (size_t i = 0; i < b->n; i++)
		total += b->counts[i];
	moves mv;
	uint64_t sizes[MC_GROUP];
	const char *gp[MC_GROUP];
	char *groups = m->groups ? malloc((size_t)MC_GROUP * KVL_KEY_MAX)
	                         : NULL;
	if (moves_alloc(&mv, total) || (m->groups && !groups)) {
		free(mv.bufs);
		free(groups);
		return kvl__fail(&store->err, KVL_ENOMEM,
		                 "mooncake: put: out of memory");
	}
	unsigned h = kvl__mc_half_take(m);
	uint8_t *base = m->staging + h * m->half;
	const kvl_iov *pc = b->pieces;
	kvl__mc_keyset ks;
	size_t i = 0;
	int rc = 0;
	while (i < b->n && !rc) {
		size_t rep[MC_GROUP][2], n_rep = 0; /* a repeat, its first */
		moves_reset(&mv);
		kvl__mc_keyset_clear(&ks);
		for (; i < b->n && mv.n < MC_GROUP; pc += b->counts[i], i++) {
			size_t c = b->counts[i];
			uint64_t len = 0;
			for (size_t j = 0; j < c; j++)
				len += pc[j].len;
			if (len == 0) {
				b->results[i] = kvl__fail(
					&store->err, KVL_ENOTSUP,
					"mooncake: put %s: Mooncake holds no "
					"empty objects",
					b->keys[i]);
				continue;
			}
			uint64_t need = staged_need(m, pc, c, 1);
			if (need > m->half) {
				b->results[i] = kvl__fail(
					&store->err, KVL_ERANGE,
					"mooncake: put %s: %llu bytes do not "
					"fit half of staging (%zu); raise "
					"staging=, or register the memory",
					b->keys[i], (unsigned long long)need,
					m->half);
				continue;
			}
			if (mv.used + need > m->half)
				break;
			mv.keys[mv.n] = b->keys[i];
			int first = kvl__mc_keyset_add(&ks, mv.keys, mv.n);
			if (first >= 0) {
				/* A repeat is resolved after its first. */
				rep[n_rep][0] = i;
				rep[n_rep++][1] = mv.idx[first];
				if (n_rep == MC_GROUP) {
					pc += c, i++;
					break;
				}
				continue;
			}
			char *g = groups ? groups + mv.n * KVL_KEY_MAX : NULL;
			gp[mv.n] = g;
			if (g && !kvl__page_group(b->keys[i], g))
				g[0] = '\0'; /* not a page's object: no group */
			sizes[mv.n] = len;
			mv.counts[mv.n] = 0;
			uint64_t off = 0;
			for (size_t j = 0; j < c; off += pc[j++].len)
				moves_add(&mv, m, base, (void *)pc[j].addr,
				          pc[j].len, off, 1);
			moves_key(&mv, b->keys[i], i);
		}
		if (mv.n)
			rc = put_moves(store, m, &mv, sizes,
			               groups ? gp : NULL, b->results);
		for (size_t k = 0; !rc && k < n_rep; k++) {
			int f = b->results[rep[k][1]];
			b->results[rep[k][0]] = f < 0 ? f : KVL_PUT_PRESENT;
		}
	}
	for (size_t k = 0; !rc && k < b->n; k++)
		if (b->results[k] < 0)
			atomic_fetch_add(&m->errors, 1);
	kvl__mc_half_give(m, h);
	free(mv.bufs);
	free(groups);
	return rc;
}
