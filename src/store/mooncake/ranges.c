/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ranges.c — the Mooncake store's byte-range moves, through kvlink's shim
 * (shim.h, mooncake.h):
 *  - get reads each key's ranges alone, straight into the caller's memory
 *    where it is registered (kvl_store_register; the linker registers its
 *    pools) and through staging otherwise, inside get sessions: a key that
 *    a batch holds (kvl__store_hold) costs no master call, only the
 *    transfer. Small ranges that follow each other in the object move as
 *    one staged read (MC_SMALL_RANGE);
 *  - put writes each object's pieces to their offsets inside a put
 *    session, straight from registered memory and through staging
 *    otherwise (adjacent staged pieces move as one range); the object
 *    becomes visible when all of them are written, and one whose write
 *    failed is revoked. A key that exists is KVL_PUT_PRESENT. A page's
 *    objects of every pool share a Mooncake group (kvl__page_group), so
 *    that reading one leases them all and the master evicts them
 *    together.
 * A call moves its keys in groups of distinct keys whose staged bytes fit
 * a half of staging; a key whose staged bytes do not is KVL_ERANGE.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/layout.h"
#include "store/mooncake/mooncake.h"

/* A run of a key's get ranges that follow each other in the object and
 * are each smaller than this moves as one staged read, copied out:
 * each range costs Mooncake's transfer a fixed cost (tens of µs over TCP,
 * docs/benchmarks.md), which a run pays once. */
#define MC_SMALL_RANGE (64u << 10)

/* A staged get range's way out, once its key was read. */
typedef struct copy_out {
	void *to;
	const void *from;
	size_t len;
} copy_out;

/* The arrays of one shim call: key k's ranges follow key k-1's. */
typedef struct moves {
	const char *keys[MC_GROUP];
	size_t counts[MC_GROUP], idx[MC_GROUP];
	size_t copies_end[MC_GROUP];  /* gets: key k's copies end there */
	uint64_t direct[MC_GROUP];    /* gets: key k's bytes read in place */
	size_t n, at, n_copies; /* keys, ranges, copies */
	size_t used;            /* staged bytes */
	void **bufs;            /* the shim's end: registered memory */
	uint8_t *staged;        /* puts: the range is in staging */
	size_t *lens;
	uint64_t *offs;
	copy_out *copies;
} moves;

static void moves_free(moves *mv)
{
	free(mv->bufs);
	free(mv->staged);
	free(mv->lens);
	free(mv->offs);
	free(mv->copies);
}

static int moves_alloc(moves *mv, size_t ranges)
{
	size_t r = ranges ? ranges : 1;
	mv->bufs = malloc(r * sizeof *mv->bufs);
	mv->staged = malloc(r);
	mv->lens = malloc(r * sizeof *mv->lens);
	mv->offs = malloc(r * sizeof *mv->offs);
	mv->copies = malloc(r * sizeof *mv->copies);
	if (mv->bufs && mv->staged && mv->lens && mv->offs && mv->copies)
		return 0;
	moves_free(mv);
	return KVL_ENOMEM;
}

static void moves_reset(moves *mv)
{
	mv->n = mv->at = mv->used = mv->n_copies = 0;
}

/* Adds a range to the current key: `buf` registered memory, `off` its
 * place in the object. */
static void moves_range(moves *mv, void *buf, size_t len, uint64_t off,
                        int staged)
{
	mv->bufs[mv->at] = buf;
	mv->staged[mv->at] = (uint8_t)staged;
	mv->lens[mv->at] = len;
	mv->offs[mv->at++] = off;
	mv->counts[mv->n]++;
}

/* Starts key i: its ranges follow. */
static void moves_begin(moves *mv, const char *key)
{
	mv->keys[mv->n] = key;
	mv->counts[mv->n] = 0;
	mv->direct[mv->n] = 0;
}

static void moves_end(moves *mv, size_t i)
{
	mv->copies_end[mv->n] = mv->n_copies;
	mv->idx[mv->n++] = i;
}

/* Plans a get of ranges r[0..c) of one key: returns the bytes of staging
 * it takes, and adds its ranges and copies to mv when mv is not NULL (the
 * staging from base + mv->used). */
static uint64_t get_plan(struct mstore *m, const kvl_range *r, size_t c,
                         moves *mv, uint8_t *base)
{
	uint64_t staged = 0;
	for (size_t j = 0; j < c;) {
		/* The run from j: small ranges that follow each other. */
		size_t e = j + 1;
		uint64_t end = r[j].offset + r[j].len;
		while (r[j].len < MC_SMALL_RANGE && e < c &&
		       r[e].offset == end && r[e].len < MC_SMALL_RANGE)
			end += r[e++].len;
		uint64_t span = end - r[j].offset;
		if (e - j > 1 && span) {
			if (mv) {
				uint8_t *s = base + mv->used + staged;
				moves_range(mv, s, (size_t)span, r[j].offset, 1);
				for (size_t k = j; k < e; k++)
					if (r[k].len)
						mv->copies[mv->n_copies++] = (copy_out){
							r[k].addr,
							s + (r[k].offset - r[j].offset),
							r[k].len};
			}
			staged += kvl__round64((size_t)span);
			j = e;
			continue;
		}
		for (; j < e; j++) {
			if (r[j].len == 0 && r[j].offset == 0)
				continue; /* nothing to move, nothing beyond */
			uint8_t *s = mv ? base + mv->used + staged : NULL;
			if (r[j].len == 0) {
				/* Within the object when byte offset - 1 is:
				 * that one byte is read, and dropped. */
				if (mv)
					moves_range(mv, s, 1, r[j].offset - 1, 1);
				staged += kvl__round64(1);
			} else if (kvl__mc_registered(m, r[j].addr, r[j].len)) {
				if (mv) {
					moves_range(mv, r[j].addr, r[j].len,
					            r[j].offset, 0);
					mv->direct[mv->n] += r[j].len;
				}
			} else {
				if (mv) {
					moves_range(mv, s, r[j].len, r[j].offset,
					            1);
					mv->copies[mv->n_copies++] =
						(copy_out){r[j].addr, s, r[j].len};
				}
				staged += kvl__round64(r[j].len);
			}
		}
	}
	if (mv)
		mv->used += staged;
	return staged;
}

/* Adds piece p of `len` bytes at `off` of the current key's object: in
 * place from registered memory, else copied into staging, where it joins
 * the key's previous staged range when it follows it. */
static void put_add(moves *mv, struct mstore *m, uint8_t *base,
                    const void *p, size_t len, uint64_t off)
{
	if (len == 0)
		return;
	if (kvl__mc_registered(m, p, len)) {
		moves_range(mv, (void *)p, len, off, 0);
		return;
	}
	uint8_t *s = base + mv->used;
	memcpy(s, p, len);
	mv->used += len; /* staging stays contiguous for the joins */
	size_t k = mv->at - 1;
	if (mv->counts[mv->n] && mv->staged[k] &&
	    (uint8_t *)mv->bufs[k] + mv->lens[k] == s &&
	    mv->offs[k] + mv->lens[k] == off) {
		mv->lens[k] += len;
		return;
	}
	moves_range(mv, s, len, off, 1);
}

/* The staged bytes of one key's put pieces. */
static uint64_t put_need(struct mstore *m, const kvl_iov *pc, size_t c)
{
	uint64_t need = 0;
	for (size_t j = 0; j < c; j++)
		if (pc[j].len && !kvl__mc_registered(m, pc[j].addr, pc[j].len))
			need += pc[j].len;
	return need;
}

/* KVL_ERANGE for a key whose staged bytes do not fit half of staging. */
static int too_big(kvl_store *store, const struct mstore *m, const char *op,
                   const char *key, uint64_t need)
{
	return kvl__fail(&store->err, KVL_ERANGE,
	                 "mooncake: %s %s: %llu bytes do not fit half of "
	                 "staging (%zu); raise staging=, or register the "
	                 "memory",
	                 op, key, (unsigned long long)need, m->half);
}

/* Every key's items of a call. */
static size_t items_of(const kvl__batch *b)
{
	size_t total = 0;
	for (size_t i = 0; i < b->n; i++)
		total += b->counts[i];
	return total;
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
	size_t c = 0;
	for (size_t k = 0; k < mv->n; c = mv->copies_end[k++]) {
		results[mv->idx[k]] = get_result(store, mv->keys[k], got[k]);
		if (got[k] < 0)
			continue;
		uint64_t staged = 0;
		for (size_t j = c; j < mv->copies_end[k]; j++) {
			memcpy(mv->copies[j].to, mv->copies[j].from,
			       mv->copies[j].len);
			staged += mv->copies[j].len;
		}
		atomic_fetch_add(&m->staged_bytes, staged);
		atomic_fetch_add(&m->direct_bytes, mv->direct[k]);
	}
	return 0;
}

int kvl__mc_get_ranges(kvl_store *store, struct mstore *m,
                       const kvl__batch *b)
{
	moves mv;
	if (moves_alloc(&mv, items_of(b)))
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
			uint64_t need = get_plan(m, r, c, NULL, NULL);
			if (need > m->half) {
				b->results[i] = too_big(store, m, "get",
				                        b->keys[i], need);
				continue;
			}
			if (mv.used + need > m->half)
				break;
			moves_begin(&mv, b->keys[i]);
			if (kvl__mc_keyset_add(&ks, mv.keys, mv.n) >= 0)
				break; /* a repeat goes in the next call */
			get_plan(m, r, c, &mv, base);
			moves_end(&mv, i);
		}
		if (mv.n)
			rc = get_moves(store, m, &mv, b->results);
	}
	if (!rc)
		kvl__mc_count_gets(m, b->results, b->n);
	kvl__mc_half_give(m, h);
	moves_free(&mv);
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
	moves mv;
	uint64_t sizes[MC_GROUP];
	const char *gp[MC_GROUP];
	char *groups = m->groups ? malloc((size_t)MC_GROUP * KVL_KEY_MAX)
	                         : NULL;
	if (!groups && m->groups)
		return kvl__fail(&store->err, KVL_ENOMEM,
		                 "mooncake: put: out of memory");
	if (moves_alloc(&mv, items_of(b))) {
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
			uint64_t need = put_need(m, pc, c);
			if (need > m->half) {
				b->results[i] = too_big(store, m, "put",
				                        b->keys[i], need);
				continue;
			}
			if (mv.used + need > m->half)
				break;
			moves_begin(&mv, b->keys[i]);
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
			uint64_t off = 0;
			for (size_t j = 0; j < c; off += pc[j++].len)
				put_add(&mv, m, base, pc[j].addr, pc[j].len, off);
			moves_end(&mv, i);
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
	moves_free(&mv);
	free(groups);
	return rc;
}
