/* SPDX-License-Identifier: Apache-2.0 */
/*
 * breaker.h — a store's circuit breaker (internal; the store door owns
 * one per store that has it).
 *
 * A store that is down must not cost every call its full timeout: after
 * `threshold` calls in a row failed with KVL_EIO or KVL_ETIMEDOUT (the
 * whole call, or every key of it), the breaker opens and every call fails
 * at once with KVL_EIO, without reaching the backend. A prober thread then
 * calls `probe` after a back-off (backoff_ms, doubling up to 16 times that)
 * until it succeeds, and closes the breaker: engines' calls never pay for
 * finding out whether the store is back.
 *
 * Threads: every function is thread-safe. The hot path (a closed breaker
 * and a call that succeeds) reads two atomics; failures take the mutex.
 */
#ifndef KVL_BREAKER_H
#define KVL_BREAKER_H

#include "core/internal.h"

typedef struct kvl__breaker kvl__breaker;

/* A breaker of the store `name` (a redacted URI, for the log: opening is
 * a warning, closing again is info) opening after `threshold` (> 0) failed
 * calls in a row, whose prober calls probe(ctx) (0: the store answers)
 * every backoff_ms at first. NULL: out of memory. The prober thread starts
 * when the breaker first opens. */
kvl__breaker *kvl__breaker_new(const char *name, unsigned threshold,
                               uint32_t backoff_ms, int (*probe)(void *ctx),
                               void *ctx);

/* Stops the prober (waiting for a probe in flight) and frees b (NULL is
 * fine). */
void kvl__breaker_free(kvl__breaker *b);

/* Before a call: 0 to go ahead, or KVL_EIO while the breaker is open,
 * with the reason in msg (len bytes). Counts the call refused. */
int kvl__breaker_admit(kvl__breaker *b, char *msg, size_t len);

/* After a call that went ahead: failed (it failed whole or in every key
 * with KVL_EIO or KVL_ETIMEDOUT), and why (for the message while open). */
void kvl__breaker_record(kvl__breaker *b, int failed, const char *why);

/* Adds the breaker's counters to *out. */
void kvl__breaker_stats(kvl__breaker *b, uint64_t *opens, uint64_t *refused,
                        int *open);

#endif /* KVL_BREAKER_H */
