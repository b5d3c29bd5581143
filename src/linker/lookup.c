/*
 * lookup.c — kvl_linker_lookup: the longest prefix restorable on every
 * rank, from one batched existence query for every (page, pool) asked, the
 * pools' hit policies (kvl_restorable_set) and the engine's all-reduce.
 *
 * Lookups on one linker run one at a time under lookup.mu, which also
 * guards their scratch: grown to the largest lookup seen, reused after, so
 * lookups of a warm linker allocate nothing.
 */
#include <stdlib.h>

#include "linker/linker.h"

/* Makes the lookup scratch hold `items` keys (grows, never shrinks: after
 * warm-up lookups allocate nothing). Caller holds lookup_mu. */
static int lookup_reserve(kvl_linker *lk, size_t items)
{
	lk_lookup *s = &lk->lookup;
	if (items <= s->cap)
		return 0;
	size_t cap = s->cap ? s->cap : 1024;
	while (cap < items)
		cap *= 2;
	char *keys = realloc(s->keys, cap * KVL_KEY_MAX);
	if (keys)
		s->keys = keys;
	const char **keyp = realloc(s->keyp, cap * sizeof *keyp);
	if (keyp)
		s->keyp = keyp;
	int *res = realloc(s->res, cap * sizeof *res);
	if (res)
		s->res = res;
	uint8_t *flags = realloc(s->flags, cap);
	if (flags)
		s->flags = flags;
	if (!keys || !keyp || !res || !flags)
		return KVL_ENOMEM;
	s->cap = cap;
	return 0;
}

/* The restorable set of this rank, into lk->lookup.bits. Caller holds
 * lookup_mu. */
static int lookup_local(kvl_linker *lk, const kvl_hash *pages, size_t n_pages,
                        const uint8_t *const *pool_pages)
{
	lk_lookup *s = &lk->lookup;
	size_t np = lk->layout->n_pools;
	if (n_pages == 0) /* only the empty prefix; the scratch may not exist */
		return kvl_restorable_set(NULL, NULL, 0, 0, s->bits, 1);
	if (lookup_reserve(lk, n_pages * np))
		return kvl__fail(&lk->err, KVL_ENOMEM, "lookup: out of memory");
	size_t m = 0;
	for (size_t pi = 0; pi < np; pi++) {
		const kvl__pool *p = kvl__lk_pool(lk, (uint32_t)pi);
		const uint8_t *want = pool_pages ? pool_pages[pi] : NULL;
		for (size_t j = 0; j < n_pages; j++) {
			if (want && !want[j])
				continue;
			s->keyp[m] = s->keys + m * KVL_KEY_MAX;
			kvl__pool_key(p, &pages[j], s->keys + m * KVL_KEY_MAX);
			m++;
		}
	}
	if (m == 0 && n_pages)
		return kvl__fail(&lk->err, KVL_EINVAL,
		                 "lookup: pool_pages asks for no page");
	/* One batched existence query for every (page, pool) asked. */
	int rc = m ? kvl_store_exists(lk->store, s->keyp, m, s->res) : 0;
	if (rc)
		return kvl__fail(&lk->err, rc, "lookup: store: %s",
		                 kvl_store_errmsg(lk->store));
	const uint8_t *present[np ? np : 1];
	memset(s->flags, 0, n_pages * np);
	m = 0;
	for (size_t pi = 0; pi < np; pi++) {
		const uint8_t *want = pool_pages ? pool_pages[pi] : NULL;
		uint8_t *flags = s->flags + pi * n_pages;
		size_t asked = 0;
		for (size_t j = 0; j < n_pages; j++) {
			if (want && !want[j])
				continue;
			int res = s->res[m++];
			if (res < 0) /* a store that cannot tell is not a miss */
				return kvl__fail(&lk->err, res,
				                 "lookup: store: page %zu of pool "
				                 "'%s': %s",
				                 j, kvl__lk_pool(lk, (uint32_t)pi)->name,
				                 kvl_store_errmsg(lk->store));
			flags[j] = res == 1;
			asked++;
		}
		present[pi] = asked ? flags : NULL;
	}
	return kvl_restorable_set(lk->policies, present, np, n_pages, s->bits,
	                          kvl_bitmap_words(n_pages));
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
	if (n_pages && !pages)
		return kvl__fail(&lk->err, KVL_EINVAL, "lookup: pages is NULL");
	if (n_pages > lk->opts.max_request_pages)
		return kvl__fail(&lk->err, KVL_ERANGE,
		                 "lookup: %zu pages > max_request_pages %u",
		                 n_pages, lk->opts.max_request_pages);
	uint64_t t0 = kvl__now_ns();
	lk_lookup *s = &lk->lookup;
	size_t words = kvl_bitmap_words(n_pages);
	pthread_mutex_lock(&s->mu);
	int rc = lookup_local(lk, pages, n_pages, pool_pages);
	if (rc) {
		/* Still take part in the all-reduce, so other ranks never
		 * wait for this one: with nothing restorable. */
		memset(s->bits, 0, words * 8);
		s->bits[0] = 1;
	}
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
	kvl__linker_stats *st = &lk->stats;
	KVL__COUNT(st, lookups, 1);
	KVL__COUNT(st, lookup_pages, n_pages);
	KVL__COUNT(st, hit_pages, prefix);
	kvl__hist_add(&st->lookup_ns, kvl__now_ns() - t0);
	*prefix_out = prefix;
	return rc;
}
