/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lookup.c — kvl_linker_lookup: the longest prefix restorable on every
 * rank, from one batched existence query for every (page, pool) asked, the
 * pools' hit policies (kvl_restorable_set) and the engine's all-reduce;
 * kvl_linker_lookup_set: this rank's restorable set, for engines that
 * intersect the sets of their ranks themselves.
 *
 * Lookups on one linker run one at a time under lookup.mu, which also
 * guards their scratch: grown to the largest lookup seen, reused after, so
 * lookups of a warm linker allocate nothing.
 */
#include <stdlib.h>

#include "linker/linker.h"

/* The restorable set of this rank, into lk->lookup.bits. Caller holds
 * lookup_mu. */
static int lookup_local(kvl_linker *lk, const char *op, const kvl_hash *pages,
                        size_t n_pages, const uint8_t *const *pool_pages)
{
	lk_lookup *s = &lk->lookup;
	kvl__keyset *k = &s->keys;
	size_t np = lk->layout->n_pools;
	if (n_pages == 0) /* only the empty prefix; the scratch may not exist */
		return kvl_restorable_set(NULL, NULL, 0, 0, s->bits, 1);
	if (kvl__keyset_reserve(k, n_pages * np))
		return kvl__fail(&lk->err, KVL_ENOMEM, "%s: out of memory", op);
	size_t m = 0;
	for (size_t pi = 0; pi < np; pi++) {
		const kvl__pool *p = kvl__lk_pool(lk, (uint32_t)pi);
		const uint8_t *want = pool_pages ? pool_pages[pi] : NULL;
		for (size_t j = 0; j < n_pages; j++) {
			if (want && !want[j])
				continue;
			kvl__pool_key(p, &pages[j], kvl__keyset_key(k, m));
			m++;
		}
	}
	if (m == 0 && n_pages)
		return kvl__fail(&lk->err, KVL_EINVAL,
		                 "%s: pool_pages asks for no page", op);
	/* One batched existence query for every (page, pool) asked. */
	int rc = m ? kvl_store_exists(lk->store, k->keyp, m, k->res) : 0;
	if (rc)
		return kvl__fail(&lk->err, rc, "%s: store: %s", op,
		                 kvl_store_errmsg(lk->store));
	const uint8_t *present[np ? np : 1];
	memset(k->flags, 0, n_pages * np);
	m = 0;
	for (size_t pi = 0; pi < np; pi++) {
		const uint8_t *want = pool_pages ? pool_pages[pi] : NULL;
		uint8_t *flags = k->flags + pi * n_pages;
		size_t asked = 0;
		for (size_t j = 0; j < n_pages; j++) {
			if (want && !want[j])
				continue;
			int res = k->res[m++];
			if (res < 0) /* a store that cannot tell is not a miss */
				return kvl__fail(&lk->err, res,
				                 "%s: store: page %zu of pool "
				                 "'%s': %s",
				                 op, j, kvl__lk_pool(lk, (uint32_t)pi)->name,
				                 kvl_store_errmsg(lk->store));
			flags[j] = res == 1;
			asked++;
		}
		present[pi] = asked ? flags : NULL;
	}
	return kvl_restorable_set(lk->policies, present, np, n_pages, s->bits,
	                          kvl_bitmap_words(n_pages));
}

/* Checks a lookup's arguments and runs this rank's part under lookup.mu,
 * which the caller releases: 0 with lk->lookup.bits holding the set; an
 * argument error (lookup.mu not taken: *locked stays 0); or the store's
 * error with bits holding the empty prefix only. */
static int lookup_begin(kvl_linker *lk, const char *op, const kvl_hash *pages,
                        size_t n_pages, const uint8_t *const *pool_pages,
                        int *locked)
{
	*locked = 0;
	if (n_pages && !pages)
		return kvl__fail(&lk->err, KVL_EINVAL, "%s: pages is NULL", op);
	if (n_pages > lk->opts.max_request_pages)
		return kvl__fail(&lk->err, KVL_ERANGE,
		                 "%s: %zu pages > max_request_pages %u", op,
		                 n_pages, lk->opts.max_request_pages);
	lk_lookup *s = &lk->lookup;
	pthread_mutex_lock(&s->mu);
	*locked = 1;
	int rc = lookup_local(lk, op, pages, n_pages, pool_pages);
	if (rc) {
		/* Offer only the empty prefix, so that ranks which all-reduce
		 * what this call returns never restore through a failure. */
		kvl__set_empty(s->bits, kvl_bitmap_words(n_pages));
	}
	return rc;
}

/* Counts a finished lookup of n_pages pages that found `prefix`. */
static void lookup_count(kvl_linker *lk, size_t n_pages, size_t prefix,
                         uint64_t t0)
{
	kvl__linker_stats *st = &lk->stats;
	KVL__COUNT(st, lookups, 1);
	KVL__COUNT(st, lookup_pages, n_pages);
	KVL__COUNT(st, hit_pages, prefix);
	kvl__hist_add(&st->lookup_ns, kvl__now_ns() - t0);
}

int kvl_linker_lookup(kvl_linker *lk, const kvl_hash *pages, size_t n_pages,
                      const uint8_t *const *pool_pages, size_t *prefix_out)
{
	if (!lk)
		return KVL_EINVAL;
	if (!prefix_out)
		return kvl__fail(&lk->err, KVL_EINVAL,
		                 "lookup: prefix_out is NULL");
	*prefix_out = 0; /* whatever fails below */
	uint64_t t0 = kvl__now_ns();
	int locked;
	int rc = lookup_begin(lk, "lookup", pages, n_pages, pool_pages,
	                      &locked);
	if (!locked)
		return rc;
	/* A failed store query still takes part in the all-reduce (with the
	 * empty prefix), so other ranks never wait for this one. */
	lk_lookup *s = &lk->lookup;
	size_t words = kvl_bitmap_words(n_pages);
	if (lk->opts.allreduce) {
		int arc = lk->opts.allreduce(s->bits, words,
		                             lk->opts.allreduce_user);
		if (arc && !rc)
			rc = kvl__fail(&lk->err, arc,
			               "lookup: rank all-reduce failed: %s",
			               kvl_strerror(arc));
	}
	size_t prefix = rc ? 0 : kvl_bitmap_max(s->bits, words);
	pthread_mutex_unlock(&s->mu);
	lookup_count(lk, n_pages, prefix, t0);
	*prefix_out = prefix;
	return rc;
}

int kvl_linker_lookup_set(kvl_linker *lk, const kvl_hash *pages,
                          size_t n_pages, const uint8_t *const *pool_pages,
                          uint64_t *bits, size_t n_words)
{
	if (!lk)
		return KVL_EINVAL;
	/* Whatever fails after these checks leaves the empty prefix. */
	int rc = kvl__set_out(&lk->err, "lookup_set", bits, n_words, n_pages);
	if (rc)
		return rc;
	size_t words = kvl_bitmap_words(n_pages);
	uint64_t t0 = kvl__now_ns();
	int locked;
	rc = lookup_begin(lk, "lookup_set", pages, n_pages, pool_pages,
	                  &locked);
	if (!locked)
		return rc;
	memcpy(bits, lk->lookup.bits, words * 8);
	size_t prefix = kvl_bitmap_max(bits, words);
	pthread_mutex_unlock(&lk->lookup.mu);
	lookup_count(lk, n_pages, prefix, t0);
	return rc;
}
