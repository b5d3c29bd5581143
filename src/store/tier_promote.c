/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tier_promote.c — the tier: store's promoter (tier_promote.h): keys that a
 * lower tier served wait in a fixed ring, and one thread copies them up.
 *
 * Design: the ring is allocated at open (cap entries, each a whole key), so
 * an offer never allocates and never blocks on the thread: it takes the
 * lock only to scan the waiting keys (a key already waiting is not queued
 * twice: a layer-wise load reads one page once per layer) and to append.
 * A full ring drops the key and counts it; the page stays readable from
 * the lower tier, it just is not moved up this time.
 *
 * Threads: `mu` guards the ring, `stop` and the counters; the thread holds
 * it only to take the next key, never while it copies. Free sets `stop`,
 * drops the waiting keys and joins the thread, which finishes the copy it
 * is doing (the tiers' own timeouts bound it) and sees `stop` next.
 */
#include <stdlib.h>

#include "store/tier_promote.h"
#include "core/internal.h"

struct promote_entry {
	uint64_t hash;
	unsigned from;
	char key[KVL_KEY_MAX];
};

struct kvl__promoter {
	pthread_mutex_t mu;
	pthread_cond_t wake;
	pthread_t thread;
	kvl__promote_fn fn; /* immutable */
	void *ctx;          /* immutable */
	size_t cap;         /* immutable */
	struct promote_entry *ring; /* cap entries (mu) */
	size_t head, count; /* the oldest waiting entry, how many wait (mu) */
	int stop;           /* (mu) */
	uint64_t queued, dropped; /* (mu) */
};

/* FNV-1a: only to skip most key comparisons in the scan. */
static uint64_t promote_hash(const char *key)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (const unsigned char *p = (const unsigned char *)key; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	return h;
}

static void *promote_main(void *arg)
{
	kvl__promoter *p = arg;
	struct promote_entry e;

	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->stop && p->count == 0)
			pthread_cond_wait(&p->wake, &p->mu);
		if (p->stop)
			break;
		e = p->ring[p->head];
		p->head = (p->head + 1) % p->cap;
		p->count--;
		pthread_mutex_unlock(&p->mu);
		p->fn(p->ctx, e.key, e.from);
		pthread_mutex_lock(&p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

kvl__promoter *kvl__promoter_new(size_t cap, kvl__promote_fn fn, void *ctx)
{
	kvl__promoter *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->ring = calloc(cap, sizeof *p->ring);
	if (!p->ring) {
		free(p);
		return NULL;
	}
	p->fn = fn;
	p->ctx = ctx;
	p->cap = cap;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->wake, NULL);
	if (pthread_create(&p->thread, NULL, promote_main, p) != 0) {
		pthread_cond_destroy(&p->wake);
		pthread_mutex_destroy(&p->mu);
		free(p->ring);
		free(p);
		return NULL;
	}
	return p;
}

void kvl__promoter_free(kvl__promoter *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	p->dropped += p->count;
	p->count = 0;
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&p->mu);
	pthread_join(p->thread, NULL);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->mu);
	free(p->ring);
	free(p);
}

int kvl__promoter_offer(kvl__promoter *p, const char *key, unsigned from)
{
	uint64_t h = promote_hash(key);
	size_t len = strnlen(key, KVL_KEY_MAX);
	int rc = 1;

	if (len == KVL_KEY_MAX)
		return KVL_EINVAL;
	pthread_mutex_lock(&p->mu);
	for (size_t i = 0; i < p->count; i++) {
		const struct promote_entry *e =
			&p->ring[(p->head + i) % p->cap];
		if (e->hash == h && strcmp(e->key, key) == 0) {
			rc = 0;
			goto out;
		}
	}
	if (p->stop || p->count == p->cap) {
		p->dropped++;
		rc = KVL_EFULL;
		goto out;
	}
	struct promote_entry *e = &p->ring[(p->head + p->count) % p->cap];
	e->hash = h;
	e->from = from;
	memcpy(e->key, key, len + 1);
	p->count++;
	p->queued++;
	pthread_cond_signal(&p->wake);
out:
	pthread_mutex_unlock(&p->mu);
	return rc;
}

void kvl__promoter_counts(kvl__promoter *p, uint64_t *queued,
                          uint64_t *dropped, uint64_t *waiting)
{
	pthread_mutex_lock(&p->mu);
	*queued = p->queued;
	*dropped = p->dropped;
	*waiting = p->count;
	pthread_mutex_unlock(&p->mu);
}
