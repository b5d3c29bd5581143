/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.h — kvlink's own messages (internal; kvl_log_set in kvlink.h says
 * what is logged and where it goes).
 *
 * Call sites are cold: state changes, never a call's failure. Each call
 * site that could repeat keeps a kvl__log_limit, so a flapping store
 * cannot flood the sink: at most KVL__LOG_BURST messages per window, then
 * the next window's first message says how many were dropped. The log's
 * lock is a leaf: a sink never calls into kvlink (kvlink.h).
 */
#ifndef KVL_LOG_H
#define KVL_LOG_H

#include <stdint.h>

#include "kvlink.h"

#define KVL__LOG_BURST 5
#define KVL__LOG_WINDOW_MS 10000u

/* A call site's rate limit; zero-initialised it uses KVL__LOG_WINDOW_MS. */
typedef struct kvl__log_limit {
	uint32_t window_ms;   /* 0: KVL__LOG_WINDOW_MS */
	uint64_t window_start; /* monotonic ns (under the log's lock) */
	uint32_t sent;         /* in this window */
	uint64_t dropped;      /* since the last message that went out */
} kvl__log_limit;

/* 1 if a message at `level` would go out now (a cheap check before
 * formatting an expensive one). */
int kvl__log_on(kvl_log_level level);

/* Logs one message; lim may be NULL (no limit). */
void kvl__log(kvl__log_limit *lim, kvl_log_level level, const char *component,
              const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif /* KVL_LOG_H */
