/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tier_promote.h — the tier: store's promoter (internal to tier*.c): a
 * bounded queue of keys to copy up into the top tier and the one thread
 * that copies them, so that a read served by a lower tier never waits for
 * its promotion.
 */
#ifndef KVL_TIER_PROMOTE_H
#define KVL_TIER_PROMOTE_H

#include <stdint.h>

#include "kvlink.h"

typedef struct kvl__promoter kvl__promoter;

/* Copies key up from tier `from`; called on the promoter's thread, one
 * key at a time. */
typedef void (*kvl__promote_fn)(void *ctx, const char *key, unsigned from);

/* A promoter of at most `cap` waiting keys (1 or more) whose thread calls
 * fn(ctx, …) for each. NULL: out of memory, or no thread could start. */
kvl__promoter *kvl__promoter_new(size_t cap, kvl__promote_fn fn, void *ctx);

/* Stops the thread and frees everything. Keys still waiting are dropped
 * (counted in dropped); a copy in progress is finished first, so this
 * waits at most for one promotion. NULL is a no-op. */
void kvl__promoter_free(kvl__promoter *p);

/* Queues key (shorter than KVL_KEY_MAX) to be copied up from tier
 * `from`, without blocking on the thread: 1 queued, 0 already waiting,
 * KVL_EFULL when the queue is full (the key is dropped and counted).
 * Thread-safe. */
int kvl__promoter_offer(kvl__promoter *p, const char *key, unsigned from);

/* [out] keys queued since the start, dropped (queue full, or waiting at
 * close), and waiting now. Thread-safe. */
void kvl__promoter_counts(kvl__promoter *p, uint64_t *queued,
                          uint64_t *dropped, uint64_t *waiting);

#endif /* KVL_TIER_PROMOTE_H */
