/* SPDX-License-Identifier: Apache-2.0 */
/*
 * breaker.c — a store's circuit breaker (see breaker.h).
 *
 * States: closed (open == 0; `fails` counts failed calls in a row) and open
 * (every call refused; the prober probes after each back-off). Only the
 * prober, or a call that was already in flight and succeeded, closes it.
 * `open`, `fails` and the counters are atomics so that the hot path takes
 * no lock; `mu` guards why, the back-off and the prober's life, and is
 * what the prober sleeps on.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"
#include "store/breaker.h"

#define BACKOFF_GROWTH 16u /* the longest back-off, in first back-offs */

struct kvl__breaker {
	char name[160]; /* the store, for the log */
	unsigned threshold;
	uint64_t backoff_min_ms;
	int (*probe)(void *ctx);
	void *ctx;
	atomic_int open;
	atomic_uint fails;
	atomic_uint_fast64_t opens, refused;

	pthread_mutex_t mu;
	pthread_cond_t cv;   /* the prober's sleep; broadcast to stop it */
	char why[200];       /* (mu) the last failure */
	unsigned fails_seen; /* (mu) failures in a row when it opened */
	uint64_t backoff_ms; /* (mu) the next probe's wait */
	int started, stopping; /* (mu) */
	pthread_t prober;
};

/* Rate limits of the two messages (every breaker of the process). */
static kvl__log_limit opened_limit, closed_limit;

kvl__breaker *kvl__breaker_new(const char *name, unsigned threshold,
                               uint32_t backoff_ms, int (*probe)(void *ctx),
                               void *ctx)
{
	kvl__breaker *b = calloc(1, sizeof *b);
	if (!b)
		return NULL;
	snprintf(b->name, sizeof b->name, "%s", name);
	b->threshold = threshold;
	b->backoff_min_ms = backoff_ms ? backoff_ms : 1;
	b->probe = probe;
	b->ctx = ctx;
	atomic_init(&b->open, 0);
	atomic_init(&b->fails, 0);
	atomic_init(&b->opens, 0);
	atomic_init(&b->refused, 0);
	pthread_mutex_init(&b->mu, NULL);
	kvl__cond_init_monotonic(&b->cv);
	return b;
}

void kvl__breaker_free(kvl__breaker *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&b->mu);
	b->stopping = 1;
	pthread_cond_broadcast(&b->cv);
	int started = b->started;
	pthread_mutex_unlock(&b->mu);
	if (started)
		pthread_join(b->prober, NULL);
	pthread_cond_destroy(&b->cv);
	pthread_mutex_destroy(&b->mu);
	free(b);
}

/* Closes the breaker if it is open: the store answered. (The log's lock
 * is a leaf: callers may hold mu.) */
static void close_breaker(kvl__breaker *b)
{
	if (atomic_exchange(&b->open, 0))
		kvl__log(&closed_limit, KVL_LOG_INFO, "store",
		         "%s answers again: calls go through", b->name);
}

/* The prober: sleeps until the breaker opens, then probes after each
 * back-off until a probe succeeds. */
static void *prober_main(void *arg)
{
	kvl__breaker *b = arg;
	pthread_mutex_lock(&b->mu);
	while (!b->stopping) {
		if (!atomic_load(&b->open)) {
			pthread_cond_wait(&b->cv, &b->mu);
			continue;
		}
		struct timespec dl = kvl__deadline_after((uint32_t)b->backoff_ms);
		int w = 0;
		while (!b->stopping && w != ETIMEDOUT)
			w = pthread_cond_timedwait(&b->cv, &b->mu, &dl);
		if (b->stopping)
			break;
		pthread_mutex_unlock(&b->mu);
		int rc = b->probe(b->ctx);
		pthread_mutex_lock(&b->mu);
		if (rc == 0) {
			atomic_store(&b->fails, 0);
			close_breaker(b);
		} else if (b->backoff_ms < b->backoff_min_ms * BACKOFF_GROWTH) {
			b->backoff_ms *= 2;
		}
	}
	pthread_mutex_unlock(&b->mu);
	return NULL;
}

int kvl__breaker_admit(kvl__breaker *b, char *msg, size_t len)
{
	if (!atomic_load_explicit(&b->open, memory_order_relaxed))
		return 0;
	atomic_fetch_add(&b->refused, 1);
	pthread_mutex_lock(&b->mu);
	snprintf(msg, len,
	         "store is down: %u calls in a row failed (last: %s); calls "
	         "fail at once until a probe (every %llu ms now) reaches it",
	         b->fails_seen, b->why, (unsigned long long)b->backoff_ms);
	pthread_mutex_unlock(&b->mu);
	return KVL_EIO;
}

void kvl__breaker_record(kvl__breaker *b, int failed, const char *why)
{
	if (!failed) {
		if (atomic_load_explicit(&b->fails, memory_order_relaxed))
			atomic_store(&b->fails, 0);
		if (atomic_load_explicit(&b->open, memory_order_relaxed))
			close_breaker(b); /* it answered after all */
		return;
	}
	unsigned f = atomic_fetch_add(&b->fails, 1) + 1;
	pthread_mutex_lock(&b->mu);
	snprintf(b->why, sizeof b->why, "%s", why);
	if (f >= b->threshold && !atomic_load(&b->open) && !b->stopping) {
		if (!b->started &&
		    pthread_create(&b->prober, NULL, prober_main, b) == 0)
			b->started = 1;
		if (b->started) { /* without a prober it could never close */
			b->fails_seen = f;
			b->backoff_ms = b->backoff_min_ms;
			atomic_fetch_add(&b->opens, 1);
			atomic_store(&b->open, 1);
			pthread_cond_broadcast(&b->cv);
			kvl__log(&opened_limit, KVL_LOG_WARNING, "store",
			         "%s is down: %u calls in a row failed (last: "
			         "%s); calls fail at once until a probe (every "
			         "%llu ms at first) reaches it",
			         b->name, f, why,
			         (unsigned long long)b->backoff_ms);
		}
	}
	pthread_mutex_unlock(&b->mu);
}

void kvl__breaker_stats(kvl__breaker *b, uint64_t *opens, uint64_t *refused,
                        int *open)
{
	*opens += atomic_load(&b->opens);
	*refused += atomic_load(&b->refused);
	*open |= atomic_load(&b->open);
}
