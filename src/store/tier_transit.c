/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tier_transit.c — the tier: store's record of objects on their way down
 * (tier_transit.h).
 *
 * Design: `moving` holds the key hashes of transits in progress, packed (a
 * few: each thread that evicts has its victims in flight), scanned
 * linearly;
 * `done` is a ring of the last TRANSIT_DONE transits that ended, numbered
 * by `n_done`. A read marks n_done before it looks at the tiers; a key it
 * missed everywhere was in transit meanwhile exactly when its hash is in
 * `moving` now or among the ring's entries numbered from the mark on. When
 * the ring has turned since the mark, or a transit that found no free slot
 * is in progress or began since, the record cannot tell and says so (1): the read looks again, which costs
 * time, never a wrong answer. Hash collisions also only cost a look.
 *
 * Threads: `mu` guards everything; it is taken under an evicting tier's
 * lock (begin) and alone (the rest), never while a store is called.
 */
#include "store/tier_transit.h"

void kvl__transit_init(kvl__transit *tr)
{
	memset(tr, 0, sizeof *tr);
	pthread_mutex_init(&tr->mu, NULL);
}

void kvl__transit_destroy(kvl__transit *tr)
{
	pthread_mutex_destroy(&tr->mu);
}

void kvl__transit_begin(kvl__transit *tr, uint64_t h)
{
	pthread_mutex_lock(&tr->mu);
	if (tr->n_moving < TRANSIT_MOVING)
		tr->moving[tr->n_moving++] = h;
	else
		tr->untracked_live++, tr->untracked_seq++;
	pthread_mutex_unlock(&tr->mu);
}

void kvl__transit_end(kvl__transit *tr, uint64_t h)
{
	pthread_mutex_lock(&tr->mu);
	size_t i = 0;
	while (i < tr->n_moving && tr->moving[i] != h)
		i++;
	if (i < tr->n_moving)
		tr->moving[i] = tr->moving[--tr->n_moving];
	else if (tr->untracked_live) /* it found no slot */
		tr->untracked_live--;
	tr->done[tr->n_done % TRANSIT_DONE] = h;
	tr->n_done++;
	pthread_mutex_unlock(&tr->mu);
}

kvl__transit_mark kvl__transit_mark_now(kvl__transit *tr)
{
	pthread_mutex_lock(&tr->mu);
	kvl__transit_mark m = {tr->n_done, tr->untracked_seq};
	pthread_mutex_unlock(&tr->mu);
	return m;
}

/* (mu held) */
static int transit_moving_locked(const kvl__transit *tr, uint64_t h)
{
	for (size_t i = 0; i < tr->n_moving; i++)
		if (tr->moving[i] == h)
			return 1;
	return 0;
}

int kvl__transit_since(kvl__transit *tr, kvl__transit_mark m,
                       const uint64_t *h, size_t n)
{
	int r = 0;
	pthread_mutex_lock(&tr->mu);
	if (tr->untracked_live || tr->untracked_seq != m.untracked_seq ||
	    tr->n_done - m.n_done > TRANSIT_DONE)
		r = 1;
	for (size_t i = 0; !r && i < n; i++) {
		for (uint64_t d = m.n_done; !r && d < tr->n_done; d++)
			r = tr->done[d % TRANSIT_DONE] == h[i];
		if (!r)
			r = transit_moving_locked(tr, h[i]);
	}
	pthread_mutex_unlock(&tr->mu);
	return r;
}

int kvl__transit_moving(kvl__transit *tr, uint64_t h)
{
	pthread_mutex_lock(&tr->mu);
	int r = transit_moving_locked(tr, h);
	pthread_mutex_unlock(&tr->mu);
	return r;
}
