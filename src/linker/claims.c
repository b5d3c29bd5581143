/* SPDX-License-Identifier: Apache-2.0 */
/*
 * claims.c — no two pages write one slot: the destination slots of the
 * queued loads (the batch the next start takes), one bit per slot of each
 * pool, and the source slots of one offload.
 *
 * A load claims its slots when it is queued and gives them back when its
 * batch starts or it is canceled; a slot claimed twice — within one load or
 * by two loads of one batch — would end the batch with one page's bytes
 * reported valid for another, so the second claim is refused. An offload
 * whose two different pages read one slot would store one page's bytes
 * under the other's hash; its bits are set and cleared within the call.
 * Everything here runs under lk->mu; the conflict path (rare) searches the
 * queue for the other claimant, so the common path is one bit test per
 * item.
 */
#include <stdlib.h>

#include "linker/linker.h"

int kvl__lk_claims_alloc(kvl_linker *lk)
{
	const kvl_layout *l = lk->layout;
	size_t words = 0;
	lk->claim_at = calloc(l->n_pools, sizeof *lk->claim_at);
	if (!lk->claim_at)
		return KVL_ENOMEM;
	for (size_t i = 0; i < l->n_pools; i++) {
		lk->claim_at[i] = words;
		words += kvl_bitmap_words(l->pools[i].num_pages);
	}
	/* loads' bits, then one offload's */
	lk->claim_words = words;
	lk->claims = calloc(2 * words, sizeof *lk->claims);
	return lk->claims ? 0 : KVL_ENOMEM;
}

void kvl__lk_claims_free(kvl_linker *lk)
{
	free(lk->claims);
	free(lk->claim_at);
}

/* The word and bit of slot `slot` of pool `pool` in map `map` (0 loads, 1
 * the offload being checked). */
static uint64_t *claim_word(kvl_linker *lk, int map, const lk_item *it,
                            uint64_t *bit)
{
	*bit = 1ull << (it->slot % 64);
	return &lk->claims[(size_t)map * lk->claim_words +
	                   lk->claim_at[it->pool] + it->slot / 64];
}

/* Clears the bits of items [0, n) of r in map `map`. */
static void unclaim_n(kvl_linker *lk, int map, const lk_req *r, size_t n)
{
	uint64_t bit;
	for (size_t i = 0; i < n; i++)
		*claim_word(lk, map, &r->items[i], &bit) &= ~bit;
}

/* The item of r before index `before` with its pool and slot, or NULL. */
static const lk_item *same_slot(const lk_req *r, size_t before,
                                const lk_item *it)
{
	for (size_t i = 0; i < before; i++)
		if (r->items[i].pool == it->pool && r->items[i].slot == it->slot)
			return &r->items[i];
	return NULL;
}

/* A load's slot conflict: the message names the slot, the pool and both
 * claimants (a queued load, or an earlier page of r itself). */
static int load_conflict(kvl_linker *lk, const lk_req *r, size_t at)
{
	const lk_item *it = &r->items[at];
	const char *pool = kvl__lk_pool(lk, it->pool)->name;
	const lk_item *o = same_slot(r, at, it);
	if (o)
		return kvl__fail(&lk->err, KVL_EINVAL,
		                 "load %llu: pages %u and %u both go to slot "
		                 "%zu of pool '%s'",
		                 (unsigned long long)r->id, o->page, it->page,
		                 it->slot, pool);
	for (const lk_req *q = lk->load_head; q; q = q->qnext) {
		o = same_slot(q, q->n_items, it);
		if (o)
			return kvl__fail(&lk->err, KVL_EINVAL,
			                 "load %llu: page %u goes to slot %zu of "
			                 "pool '%s', the slot of page %u of load "
			                 "%llu in the same batch",
			                 (unsigned long long)r->id, it->page,
			                 it->slot, pool, o->page,
			                 (unsigned long long)q->id);
	}
	return kvl__fail(&lk->err, KVL_EINVAL,
	                 "load %llu: slot %zu of pool '%s' is claimed twice",
	                 (unsigned long long)r->id, it->slot, pool);
}

int kvl__lk_claim_locked(kvl_linker *lk, const lk_req *r)
{
	int map = r->kind == KVL_REQ_LOAD ? 0 : 1;
	for (size_t i = 0; i < r->n_items; i++) {
		const lk_item *it = &r->items[i];
		uint64_t bit, *w = claim_word(lk, map, it, &bit);
		if (!(*w & bit)) {
			*w |= bit;
			continue;
		}
		if (map == 1) {
			/* The same page twice from one slot stores it once. */
			const lk_item *o = same_slot(r, i, it);
			if (!memcmp(&r->pages[o->page], &r->pages[it->page],
			            sizeof(kvl_hash)))
				continue;
			unclaim_n(lk, map, r, i);
			return kvl__fail(&lk->err, KVL_EINVAL,
			                 "offload %llu: pages %u and %u both "
			                 "come from slot %zu of pool '%s'",
			                 (unsigned long long)r->id, o->page,
			                 it->page, it->slot,
			                 kvl__lk_pool(lk, it->pool)->name);
		}
		int rc = load_conflict(lk, r, i);
		unclaim_n(lk, map, r, i);
		return rc;
	}
	if (map == 1)
		unclaim_n(lk, map, r, r->n_items);
	return 0;
}

void kvl__lk_unclaim_locked(kvl_linker *lk, const lk_req *r)
{
	unclaim_n(lk, 0, r, r->n_items);
}
