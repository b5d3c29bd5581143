/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keyset.h — the scratch of a batched existence query (internal): keys of
 * KVL_KEY_MAX bytes, the pointers kvl_store_exists takes, its answers and
 * one flag per key. It grows to the largest query seen and never shrinks,
 * so that a warm caller allocates nothing. Its owner serializes its use
 * (the linker's lookups, a prober's).
 */
#ifndef KVL_LINKER_KEYSET_H
#define KVL_LINKER_KEYSET_H

#include "core/internal.h"

typedef struct kvl__keyset {
	size_t cap;         /* keys the arrays hold */
	char *keys;         /* cap × KVL_KEY_MAX */
	const char **keyp;
	int *res;
	uint8_t *flags;
} kvl__keyset;

/* Makes k hold n keys: 0 or KVL_ENOMEM (k keeps what it had). */
int kvl__keyset_reserve(kvl__keyset *k, size_t n);

/* Points keyp[i] at key i's storage and returns it. */
static inline char *kvl__keyset_key(kvl__keyset *k, size_t i)
{
	k->keyp[i] = k->keys + i * KVL_KEY_MAX;
	return k->keys + i * KVL_KEY_MAX;
}

void kvl__keyset_free(kvl__keyset *k);

#endif
