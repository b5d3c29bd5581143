/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keyset.c — the scratch of a batched existence query (keyset.h).
 */
#include <stdlib.h>

#include "linker/keyset.h"

int kvl__keyset_reserve(kvl__keyset *k, size_t n)
{
	if (n <= k->cap)
		return 0;
	size_t cap = k->cap ? k->cap : 1024;
	while (cap < n)
		cap *= 2;
	char *keys = realloc(k->keys, cap * KVL_KEY_MAX);
	if (keys)
		k->keys = keys;
	const char **keyp = realloc(k->keyp, cap * sizeof *keyp);
	if (keyp)
		k->keyp = keyp;
	int *res = realloc(k->res, cap * sizeof *res);
	if (res)
		k->res = res;
	uint8_t *flags = realloc(k->flags, cap);
	if (flags)
		k->flags = flags;
	if (!keys || !keyp || !res || !flags)
		return KVL_ENOMEM;
	k->cap = cap;
	return 0;
}

void kvl__keyset_free(kvl__keyset *k)
{
	free(k->keys);
	free(k->keyp);
	free(k->res);
	free(k->flags);
	*k = (kvl__keyset){0};
}
