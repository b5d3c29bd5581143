/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prober.c — kvl_prober: which prefixes of a model's pages every rank can
 * restore, asked of the store alone, by a process that has none of the
 * ranks' memory (a scheduler, a router, a disaggregation proxy).
 *
 * At open the prober lists its targets: every (pipeline stage, pool, tp
 * rank, cp rank) whose objects a restore needs, with the key suffix that
 * rank's layout would give them (a pool replicated across tp ranks: tp rank
 * 0's only, which every rank reads). A lookup names every page of every
 * target in one batched existence query, computes each target's
 * restorable set with its pool's hit policy (kvl_restorable_set) and
 * intersects them: a prefix is restorable when it is on every rank.
 *
 * Lookups run one at a time under `mu`, which guards the scratch: grown to
 * the largest lookup seen, reused after.
 */
#include <stdlib.h>

#include "core/layout.h"
#include "linker/keyset.h"

typedef struct target {
	const kvl__pool *pool;
	kvl_policy policy;
	char suffix[KVL_KEY_MAX];
	size_t suffix_len;
} target;

struct kvl_prober {
	kvl_store *store;
	target *targets;
	size_t n_targets;
	pthread_mutex_t mu;
	kvl__keyset keys; /* one key per (target, page); flags: present */
	uint64_t *one;    /* one target's set */
	uint64_t *all;    /* the intersection, for kvl_prober_lookup */
	size_t words;     /* of one and all */
	kvl__err err;
};

/* The stages' layouts must describe one model: finalized, one page size,
 * one set of rank sizes, one layout per pipeline stage. */
static int check_stages(const kvl_layout *const *stages, size_t n,
                        char *errbuf, size_t errlen)
{
	if (!stages || n == 0)
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "prober: no layouts (one per pipeline "
		                     "stage)");
	const kvl_layout *first = stages[0];
	uint64_t seen = 0;
	for (size_t i = 0; i < n; i++) {
		const kvl_layout *l = stages[i];
		if (!l || !l->finalized)
			return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
			                     "prober: layout %zu is %s", i,
			                     l ? "not finalized" : "NULL");
		if (l->page_size != first->page_size ||
		    l->shard.tp_size != first->shard.tp_size ||
		    l->shard.cp_size != first->shard.cp_size ||
		    l->shard.pp_size != first->shard.pp_size)
			return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
			                     "prober: layout %zu differs from "
			                     "layout 0 in page size or rank sizes",
			                     i);
		uint32_t pp = l->shard.pp_rank;
		if (pp < 64 && (seen >> pp & 1))
			return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
			                     "prober: two layouts of pipeline "
			                     "stage %u",
			                     pp);
		if (pp < 64)
			seen |= 1ull << pp;
	}
	if (n != first->shard.pp_size)
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "prober: %zu layouts for %u pipeline stages "
		                     "(one per stage)",
		                     n, first->shard.pp_size);
	return 0;
}

int kvl_prober_open(kvl_store *store, const kvl_layout *const *stages,
                    size_t n_stages, kvl_prober **out, char *errbuf,
                    size_t errlen)
{
	if (!store || !out)
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "prober: store and out must not be NULL");
	int rc = check_stages(stages, n_stages, errbuf, errlen);
	if (rc)
		return rc;
	const kvl_shard *sizes = &stages[0]->shard;
	size_t n = 0;
	for (size_t i = 0; i < n_stages; i++)
		for (size_t p = 0; p < stages[i]->n_pools; p++)
			n += stages[i]->pools[p].flags & KVL_POOL_REPLICATED_TP
			             ? sizes->cp_size
			             : (size_t)sizes->tp_size * sizes->cp_size;
	kvl_prober *pr = calloc(1, sizeof *pr);
	target *t = calloc(n, sizeof *t);
	if (!pr || !t) {
		free(pr);
		free(t);
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "out of memory");
	}
	size_t k = 0;
	for (size_t i = 0; i < n_stages; i++) {
		const kvl_layout *l = stages[i];
		for (size_t p = 0; p < l->n_pools; p++) {
			const kvl__pool *pool = &l->pools[p];
			uint32_t tps = pool->flags & KVL_POOL_REPLICATED_TP
			                       ? 1
			                       : sizes->tp_size;
			for (uint32_t tp = 0; tp < tps; tp++)
				for (uint32_t cp = 0; cp < sizes->cp_size; cp++) {
					kvl_shard s = l->shard;
					s.tp_rank = tp;
					s.cp_rank = cp;
					t[k].pool = pool;
					t[k].policy = (kvl_policy){pool->policy,
					                           pool->window};
					t[k].suffix_len = kvl__pool_suffix(
						pool, &s, t[k].suffix);
					k++;
				}
		}
	}
	pr->store = store;
	pr->targets = t;
	pr->n_targets = n;
	pthread_mutex_init(&pr->mu, NULL);
	kvl__err_init(&pr->err);
	*out = pr;
	return 0;
}

void kvl_prober_close(kvl_prober *pr)
{
	if (!pr)
		return;
	pthread_mutex_destroy(&pr->mu);
	kvl__err_destroy(&pr->err);
	kvl__keyset_free(&pr->keys);
	free(pr->one);
	free(pr->all);
	free(pr->targets);
	free(pr);
}

const char *kvl_prober_errmsg(const kvl_prober *pr)
{
	return pr ? kvl__err_get(&pr->err) : "prober is NULL";
}

/* Makes the scratch hold `keys` keys and the sets of n_pages pages.
 * Caller holds mu. */
static int reserve(kvl_prober *pr, size_t keys, size_t n_pages)
{
	size_t words = kvl_bitmap_words(n_pages);
	if (words > pr->words) {
		uint64_t *one = realloc(pr->one, words * 8);
		if (one)
			pr->one = one;
		uint64_t *all = realloc(pr->all, words * 8);
		if (all)
			pr->all = all;
		if (!one || !all)
			return KVL_ENOMEM;
		pr->words = words;
	}
	return kvl__keyset_reserve(&pr->keys, keys);
}

/* The intersection of every target's set of pages[0..n_pages), into bits
 * (kvl_bitmap_words(n_pages) words). Caller holds mu. */
static int probe(kvl_prober *pr, const kvl_hash *pages, size_t n_pages,
                 uint64_t *bits)
{
	size_t words = kvl_bitmap_words(n_pages);
	if (n_pages && !pages)
		return kvl__fail(&pr->err, KVL_EINVAL,
		                 "prober lookup: pages is NULL");
	if (n_pages > KVL_LINKER_MAX_REQUEST_PAGES)
		return kvl__fail(&pr->err, KVL_ERANGE,
		                 "prober lookup: %zu pages > %u", n_pages,
		                 (unsigned)KVL_LINKER_MAX_REQUEST_PAGES);
	if (n_pages == 0) {
		kvl__set_empty(bits, words);
		return 0;
	}
	if (pr->n_targets > SIZE_MAX / KVL_KEY_MAX / n_pages)
		return kvl__fail(&pr->err, KVL_ERANGE,
		                 "prober: %zu pages are too many", n_pages);
	size_t n_keys = pr->n_targets * n_pages;
	kvl__keyset *k = &pr->keys;
	if (reserve(pr, n_keys, n_pages))
		return kvl__fail(&pr->err, KVL_ENOMEM,
		                 "prober: out of memory");
	for (size_t t = 0; t < pr->n_targets; t++)
		for (size_t j = 0; j < n_pages; j++)
			kvl__pool_key_with(pr->targets[t].pool,
			                   pr->targets[t].suffix,
			                   pr->targets[t].suffix_len, &pages[j],
			                   kvl__keyset_key(k, t * n_pages + j));
	int rc = kvl_store_exists(pr->store, k->keyp, n_keys, k->res);
	if (rc)
		return kvl__fail(&pr->err, rc, "prober: store: %s",
		                 kvl_store_errmsg(pr->store));
	for (size_t m = 0; m < n_keys; m++) {
		if (k->res[m] < 0) /* a store that cannot tell is not a miss */
			return kvl__fail(&pr->err, k->res[m],
			                 "prober: store: key %s: %s", k->keyp[m],
			                 kvl_store_errmsg(pr->store));
		k->flags[m] = k->res[m] == 1;
	}
	for (size_t w = 0; w < words; w++)
		bits[w] = ~0ull;
	for (size_t t = 0; t < pr->n_targets; t++) {
		const uint8_t *present = k->flags + t * n_pages;
		rc = kvl_restorable_set(&pr->targets[t].policy, &present, 1,
		                        n_pages, pr->one, words);
		if (rc)
			return kvl__fail(&pr->err, rc, "prober: restorable set");
		for (size_t w = 0; w < words; w++)
			bits[w] &= pr->one[w];
	}
	return 0;
}

int kvl_prober_lookup_set(kvl_prober *pr, const kvl_hash *pages,
                          size_t n_pages, uint64_t *bits, size_t n_words)
{
	if (!pr)
		return KVL_EINVAL;
	/* Whatever fails after these checks leaves the empty prefix. */
	int rc = kvl__set_out(&pr->err, "prober lookup", bits, n_words,
	                      n_pages);
	if (rc)
		return rc;
	pthread_mutex_lock(&pr->mu);
	rc = probe(pr, pages, n_pages, bits);
	pthread_mutex_unlock(&pr->mu);
	if (rc)
		kvl__set_empty(bits, kvl_bitmap_words(n_pages));
	return rc;
}

int kvl_prober_lookup(kvl_prober *pr, const kvl_hash *pages, size_t n_pages,
                      size_t *prefix_out)
{
	if (!pr)
		return KVL_EINVAL;
	if (!prefix_out)
		return kvl__fail(&pr->err, KVL_EINVAL,
		                 "prober lookup: prefix_out is NULL");
	*prefix_out = 0;
	/* Into the prober's own set: a warm prober allocates nothing (probe
	 * refuses too many pages before it writes the set). */
	pthread_mutex_lock(&pr->mu);
	int rc = n_pages <= KVL_LINKER_MAX_REQUEST_PAGES &&
	                 reserve(pr, 0, n_pages)
	                 ? kvl__fail(&pr->err, KVL_ENOMEM,
	                             "prober lookup: out of memory")
	                 : probe(pr, pages, n_pages, pr->all);
	if (rc == 0)
		*prefix_out = kvl_bitmap_max(pr->all, kvl_bitmap_words(n_pages));
	pthread_mutex_unlock(&pr->mu);
	return rc;
}
