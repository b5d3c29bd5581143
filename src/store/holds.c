/* SPDX-License-Identifier: Apache-2.0 */
/*
 * holds.c — counted holds per key (holds.h): a chained hash table of the
 * keys held now, entries freed when their last hold goes, the table
 * doubled when it holds more keys than slots.
 */
#include <stdlib.h>
#include <xxhash.h>

#include "store/holds.h"

#define HOLDS_SLOTS_MIN 64

struct kvl__hold_entry {
	struct kvl__hold_entry *next;
	XXH128_hash_t id;
	uint32_t n;                      /* holds */
	uint32_t c[KVL__HOLDS_PARTS];    /* holds taken by each part */
};

void kvl__holds_init(kvl__holds *h)
{
	memset(h, 0, sizeof *h);
	pthread_mutex_init(&h->mu, NULL);
}

void kvl__holds_destroy(kvl__holds *h)
{
	for (size_t i = 0; i < h->n_slots; i++)
		for (struct kvl__hold_entry *e = h->slot[i], *next; e; e = next) {
			next = e->next;
			free(e);
		}
	free(h->slot);
	pthread_mutex_destroy(&h->mu);
}

static size_t holds_slot_of(XXH128_hash_t id, size_t n_slots)
{
	return (size_t)id.low64 & (n_slots - 1);
}

/* The link that points at key id's entry, or at the NULL ending its chain
 * (mu held, table not empty). */
static struct kvl__hold_entry **holds_find(kvl__holds *h, XXH128_hash_t id)
{
	struct kvl__hold_entry **p = &h->slot[holds_slot_of(id, h->n_slots)];
	while (*p && !XXH128_isEqual((*p)->id, id))
		p = &(*p)->next;
	return p;
}

/* Room for one more key (mu held). 0 or KVL_ENOMEM. */
static int holds_grow(kvl__holds *h)
{
	if (h->n_keys < h->n_slots)
		return 0;
	size_t n = h->n_slots ? h->n_slots * 2 : HOLDS_SLOTS_MIN;
	struct kvl__hold_entry **slot = calloc(n, sizeof *slot);
	if (!slot)
		return h->n_slots ? 0 : KVL_ENOMEM; /* longer chains will do */
	for (size_t i = 0; i < h->n_slots; i++)
		for (struct kvl__hold_entry *e = h->slot[i], *next; e; e = next) {
			next = e->next;
			size_t s = holds_slot_of(e->id, n);
			e->next = slot[s];
			slot[s] = e;
		}
	free(h->slot);
	h->slot = slot;
	h->n_slots = n;
	return 0;
}

int kvl__holds_add(kvl__holds *h, const char *key, unsigned mask)
{
	XXH128_hash_t id = XXH3_128bits(key, strlen(key));
	int rc = 0;
	pthread_mutex_lock(&h->mu);
	struct kvl__hold_entry **p = h->n_slots ? holds_find(h, id) : NULL;
	if (!p || !*p) {
		struct kvl__hold_entry *e = calloc(1, sizeof *e);
		if (!e || holds_grow(h) < 0) {
			free(e);
			rc = KVL_ENOMEM;
			goto out;
		}
		e->id = id;
		p = holds_find(h, id); /* the table may have grown */
		*p = e;
		h->n_keys++;
	}
	(*p)->n++;
	for (unsigned i = 0; i < KVL__HOLDS_PARTS; i++)
		(*p)->c[i] += (mask >> i) & 1u;
out:
	pthread_mutex_unlock(&h->mu);
	return rc;
}

int kvl__holds_take(kvl__holds *h, const char *key, unsigned *mask)
{
	XXH128_hash_t id = XXH3_128bits(key, strlen(key));
	int rc = KVL_ENOTFOUND;
	*mask = 0;
	pthread_mutex_lock(&h->mu);
	struct kvl__hold_entry **p = h->n_slots ? holds_find(h, id) : NULL;
	struct kvl__hold_entry *e = p ? *p : NULL;
	if (e) {
		for (unsigned i = 0; i < KVL__HOLDS_PARTS; i++)
			if (e->c[i] == e->n) {
				e->c[i]--;
				*mask |= 1u << i;
			}
		if (--e->n == 0) {
			*p = e->next;
			free(e);
			h->n_keys--;
		}
		rc = 0;
	}
	pthread_mutex_unlock(&h->mu);
	return rc;
}

uint32_t kvl__holds_count(kvl__holds *h, const char *key)
{
	XXH128_hash_t id = XXH3_128bits(key, strlen(key));
	pthread_mutex_lock(&h->mu);
	struct kvl__hold_entry **p = h->n_slots ? holds_find(h, id) : NULL;
	uint32_t n = p && *p ? (*p)->n : 0;
	pthread_mutex_unlock(&h->mu);
	return n;
}
