/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shadow.c — the eviction model of the adaptive policy (shadow.h).
 */
#include <stdlib.h>

#include "kvlink.h"
#include "store/shadow.h"

static uint64_t one(const kvl__evict_node *n)
{
	(void)n;
	return 1;
}

static size_t home(const kvl__shadow *s, uint64_t h)
{
	return (size_t)((h * 0x9e3779b97f4a7c15ull) >> 32) & s->mask;
}

/* The slot holding h, or the empty slot ending its probe. */
static size_t find(const kvl__shadow *s, uint64_t h)
{
	size_t i = home(s, h);
	while (s->table[i] && s->table[i]->hash != h)
		i = (i + 1) & s->mask;
	return i;
}

/* Empties slot i, moving later entries of its probe run back. */
static void delete_slot(kvl__shadow *s, size_t i)
{
	for (size_t j = i;;) {
		j = (j + 1) & s->mask;
		if (!s->table[j])
			break;
		size_t k = home(s, s->table[j]->hash);
		/* Move j to i unless its home lies cyclically in (i, j]. */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		s->table[i] = s->table[j];
		i = j;
	}
	s->table[i] = NULL;
}

int kvl__shadow_init(kvl__shadow *s, size_t cap, uint8_t share,
                     uint8_t fmax)
{
	size_t slots = 4;
	while (slots < 2 * cap)
		slots *= 2;
	*s = (kvl__shadow){.cap = cap, .mask = slots - 1};
	s->nodes = calloc(cap, sizeof *s->nodes);
	s->table = calloc(slots, sizeof *s->table);
	if (!s->nodes || !s->table) {
		free(s->nodes);
		free(s->table);
		*s = (kvl__shadow){0};
		return KVL_ENOMEM;
	}
	for (size_t i = cap; i-- > 0;) {
		s->nodes[i].older = s->unused;
		s->unused = &s->nodes[i];
	}
	kvl__evict_init_model(&s->ev, cap, share, fmax, one);
	return 0;
}

void kvl__shadow_free(kvl__shadow *s)
{
	kvl__evict_free(&s->ev);
	free(s->nodes);
	free(s->table);
	*s = (kvl__shadow){0};
}

int kvl__shadow_access(kvl__shadow *s, uint64_t hash, const uint64_t *behind)
{
	size_t i = find(s, hash);
	if (s->table[i]) {
		kvl__evict_touch(&s->ev, s->table[i]);
		return 0;
	}
	if (s->count == s->cap) {
		kvl__evict_node *v = kvl__evict_victim(&s->ev);
		kvl__evict_unlink(&s->ev, v, 1, s->count);
		delete_slot(s, find(s, v->hash));
		v->older = s->unused;
		s->unused = v;
		s->count--;
		i = find(s, hash); /* the deletion may have moved slots */
	}
	kvl__evict_node *n = s->unused;
	s->unused = n->older;
	*n = (kvl__evict_node){.hash = hash};
	s->table[i] = n;
	kvl__evict_link(&s->ev, n, behind ? s->table[find(s, *behind)] : NULL);
	s->count++;
	return 1;
}

void kvl__shadow_remove(kvl__shadow *s, uint64_t hash)
{
	size_t i = find(s, hash);
	kvl__evict_node *n = s->table[i];
	if (!n)
		return;
	kvl__evict_unlink(&s->ev, n, 0, s->count);
	delete_slot(s, i);
	n->older = s->unused;
	s->unused = n;
	s->count--;
}
