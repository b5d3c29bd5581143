/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rank_group.c — the in-process all-reduce of restorable sets, for ranks
 * that are threads of one process (and for tests).
 *
 * It is a reusable barrier that moves no data through buffers of its own:
 * each caller of a round registers its bits pointer in `slots` and waits;
 * the caller that completes the round (the n_ranks-th to arrive) ANDs every
 * registered bitmap into its own, copies the result out to every other
 * caller's bitmap, bumps `gen` and wakes the waiters. A waiter's bitmap is only written while that
 * waiter is blocked inside the call, under the lock.
 *
 * Locking: one mutex, `mu`, guards every mutable field of the group (gen,
 * arrived, slots, round_words, round_err, done_err, broken). `cv` (on
 * CLOCK_MONOTONIC) is signalled when a round completes or the group breaks.
 * n_ranks and timeout_ms never change after create. A round's result code
 * lives in done_err until the next round completes, which cannot happen
 * before every waiter of this round has read it, since the next round needs
 * all of them to arrive again.
 *
 * Failure: a round whose callers disagree on n_words (or pass no bitmap)
 * completes for everyone with KVL_EINVAL and writes no bitmap. A caller that
 * waits past its deadline breaks the group and returns KVL_ETIMEDOUT; the
 * other callers of that round are woken and, like every later call, get
 * KVL_ESTATE. No thread is left waiting on a broken group. The deadline is
 * taken on entry, so with timeout_ms 0 a caller that has to wait times out at
 * once (a group of one never waits).
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "core/internal.h"

struct kvl_rank_group {
	unsigned n_ranks;    /* fixed at create */
	unsigned timeout_ms; /* fixed at create */

	pthread_mutex_t mu;
	pthread_cond_t cv; /* round completed or group broken */

	/* Guarded by mu. */
	uint64_t gen;       /* rounds completed so far */
	unsigned arrived;   /* callers registered in the current round */
	uint64_t **slots;   /* [n_ranks]: their bitmaps, [0, arrived) valid */
	size_t round_words; /* n_words of the round's first caller */
	int round_err;      /* KVL_OK, or KVL_EINVAL once a caller disagreed */
	int done_err;       /* result of round gen - 1 */
	int broken;         /* a caller timed out: every call fails */
};

int kvl_rank_group_create(unsigned n_ranks, unsigned timeout_ms,
                          kvl_rank_group **out)
{
	if (n_ranks == 0 || !out)
		return KVL_EINVAL;
	kvl_rank_group *g = calloc(1, sizeof *g);
	if (!g)
		return KVL_ENOMEM;
	g->slots = calloc(n_ranks, sizeof *g->slots);
	if (!g->slots)
		goto fail_group;
	g->n_ranks = n_ranks;
	g->timeout_ms = timeout_ms;

	if (kvl__cond_init_monotonic(&g->cv) != 0)
		goto fail_slots;
	if (pthread_mutex_init(&g->mu, NULL) != 0)
		goto fail_cv;
	*out = g;
	return KVL_OK;

fail_cv:
	pthread_cond_destroy(&g->cv);
fail_slots:
	free(g->slots);
fail_group:
	free(g);
	return KVL_ENOMEM;
}

void kvl_rank_group_free(kvl_rank_group *group)
{
	if (!group)
		return;
	pthread_mutex_destroy(&group->mu);
	pthread_cond_destroy(&group->cv);
	free(group->slots);
	free(group);
}

/* Called with mu held by the caller that completes the round: ANDs every
 * registered bitmap into `mine` and hands the result to the others. */
static void complete_round(kvl_rank_group *g, uint64_t *mine)
{
	int err = g->round_err;

	if (err == KVL_OK) {
		size_t n = g->round_words;
		for (unsigned r = 0; r < g->arrived; r++) {
			const uint64_t *b = g->slots[r];
			if (b == mine)
				continue;
			for (size_t w = 0; w < n; w++)
				mine[w] &= b[w];
		}
		for (unsigned r = 0; r < g->arrived; r++)
			if (g->slots[r] != mine)
				memcpy(g->slots[r], mine, n * sizeof *mine);
	}
	g->done_err = err;
	g->arrived = 0;
	g->round_err = KVL_OK;
	g->gen++;
	pthread_cond_broadcast(&g->cv);
}

int kvl_rank_group_allreduce(uint64_t *bits, size_t n_words, void *group)
{
	kvl_rank_group *g = group;
	if (!g)
		return KVL_EINVAL;
	/* Deadline taken before the lock: time spent waiting for it counts. */
	struct timespec deadline = kvl__deadline_after(g->timeout_ms);

	pthread_mutex_lock(&g->mu);
	if (g->broken) {
		pthread_mutex_unlock(&g->mu);
		return KVL_ESTATE;
	}
	/* A bad bitmap still takes part, so that the ranks stay in step, but
	 * fails the round for everyone, as disagreeing on n_words does. */
	if (g->arrived == 0)
		g->round_words = n_words;
	if (!bits || n_words == 0 || n_words != g->round_words)
		g->round_err = KVL_EINVAL;
	g->slots[g->arrived++] = bits;

	if (g->arrived == g->n_ranks) {
		complete_round(g, bits);
		int err = g->done_err;
		pthread_mutex_unlock(&g->mu);
		return err;
	}

	uint64_t my_gen = g->gen;
	int err;
	for (;;) {
		if (g->gen != my_gen) {
			err = g->done_err;
			break;
		}
		if (g->broken) {
			err = KVL_ESTATE;
			break;
		}
		int rc = pthread_cond_timedwait(&g->cv, &g->mu, &deadline);
		if (rc == ETIMEDOUT && g->gen == my_gen && !g->broken) {
			/* The round can no longer complete: nobody may
			 * write to the bitmaps registered in it. */
			g->broken = 1;
			pthread_cond_broadcast(&g->cv);
			err = KVL_ETIMEDOUT;
			break;
		}
	}
	pthread_mutex_unlock(&g->mu);
	return err;
}
