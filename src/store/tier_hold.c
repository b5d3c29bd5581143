/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tier_hold.c — holds and registrations across the tier: store's tiers.
 *
 * A hold goes to every tier (a key held in one tier may be read from
 * another after a promotion or a spill; each tier's hold keeps its own
 * copy). A key is held when any tier held it; the table (holds.h)
 * remembers which tiers took each hold, so that an unhold lets go exactly
 * where holds were taken, however the key moved between the calls. A key
 * no tier held gets the first tier's error, else 0. The call fails whole
 * only when every tier's call did (nothing was held).
 */
#include <stdlib.h>

#include "store/tier_impl.h"

/* Per-call scratch, one allocation: the keys to let go at each tier, then
 * each tier's results. */
struct hold_scratch {
	int *res;          /* [tier * n + i] */
	const char **keys; /* [tier * n + j], j < count[tier] */
	size_t count[KVL__TIER_MAX];
};

static int scratch_new(struct hold_scratch *s, size_t tiers, size_t n)
{
	memset(s, 0, sizeof *s);
	s->keys = malloc(tiers * n * (sizeof *s->keys + sizeof *s->res));
	s->res = s->keys ? (int *)(void *)(s->keys + tiers * n) : NULL;
	return s->keys ? 0 : KVL_ENOMEM;
}

/* Lets go, at each tier, of the keys gathered in s (best effort: an unhold
 * that fails leaves a hold that its lease ends). */
static void scratch_release(struct tier_store *t, struct hold_scratch *s,
                            size_t n)
{
	for (size_t k = 0; k < t->n; k++)
		if (s->count[k])
			kvl__store_unhold(t->tier[k], s->keys + k * n, s->count[k],
			                  s->res + k * n);
}

static void scratch_add(struct hold_scratch *s, unsigned mask, size_t n,
                        const char *key)
{
	for (unsigned k = 0; k < KVL__TIER_MAX; k++)
		if ((mask >> k) & 1u)
			s->keys[k * n + s->count[k]++] = key;
}

int kvl__tier_hold(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct tier_store *t = impl;
	size_t n = b->n;
	struct hold_scratch s;
	int whole[KVL__TIER_MAX], failed = 0;

	if (scratch_new(&s, t->n, n) < 0)
		return kvl__fail(&store->err, KVL_ENOMEM, "hold: out of memory");
	for (size_t k = 0; k < t->n; k++) {
		int *res = s.res + k * n;
		whole[k] = kvl__store_hold(t->tier[k], b->keys, n, res);
		for (size_t i = 0; whole[k] < 0 && i < n; i++)
			res[i] = whole[k]; /* nothing of it was held */
		failed += whole[k] < 0;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned mask = 0;
		int err = 0;
		for (size_t k = 0; k < t->n; k++) {
			int r = s.res[k * n + i];
			if (r == 1)
				mask |= 1u << k;
			else if (r < 0 && !err) {
				err = r;
				kvl__fail(&store->err, r, "hold: tier %zu (\"%s\"): %s",
				          k, t->shown[k],
				          kvl_store_errmsg(t->tier[k]));
			}
		}
		if (mask && kvl__holds_add(&t->holds, b->keys[i], mask) < 0) {
			scratch_add(&s, mask, n, b->keys[i]); /* undone below */
			mask = 0;
			err = kvl__fail(&store->err, KVL_ENOMEM,
			                "hold: out of memory");
		}
		b->results[i] = mask ? 1 : err;
	}
	scratch_release(t, &s, n);
	free(s.keys);
	return failed == (int)t->n ? whole[0] : 0;
}

int kvl__tier_unhold(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct tier_store *t = impl;
	size_t n = b->n;
	struct hold_scratch s;

	if (scratch_new(&s, t->n, n) < 0)
		return kvl__fail(&store->err, KVL_ENOMEM,
		                 "unhold: out of memory");
	for (size_t i = 0; i < n; i++) {
		unsigned mask;
		b->results[i] = kvl__holds_take(&t->holds, b->keys[i], &mask);
		scratch_add(&s, mask, n, b->keys[i]);
	}
	scratch_release(t, &s, n);
	free(s.keys);
	return 0;
}

/* Memory that transfers may touch, given to every tier. A tier that
 * refuses it still works through its copies (Mooncake's staging), so only
 * a refusal by every tier fails. */
int kvl__tier_reg(kvl_store *store, void *impl, void *addr, size_t len,
                  kvl_mem_kind mem)
{
	struct tier_store *t = impl;
	int first = 0;
	size_t ok = 0;
	for (size_t i = 0; i < t->n; i++) {
		int rc = kvl_store_register(t->tier[i], addr, len, mem);
		if (rc == 0) {
			ok++;
			continue;
		}
		if (!first)
			first = kvl__fail(&store->err, rc,
			                  "kvl_store_register: tier %zu (\"%s\"): "
			                  "%s",
			                  i, t->shown[i],
			                  kvl_store_errmsg(t->tier[i]));
	}
	return ok ? 0 : first;
}

void kvl__tier_unreg(kvl_store *store, void *impl, void *addr)
{
	struct tier_store *t = impl;
	(void)store;
	for (size_t i = 0; i < t->n; i++)
		kvl__store_unregister(t->tier[i], addr);
}
