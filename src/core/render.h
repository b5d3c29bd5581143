/* SPDX-License-Identifier: Apache-2.0 */
/*
 * render.h — counters as text (internal): a cursor that appends into a
 * caller buffer and keeps counting past its end, so one pass both fills the
 * buffer and learns the length the caller needs; and a store's counters in
 * Prometheus text and JSON, shared by the store's and the linker's stats.
 */
#ifndef KVL_RENDER_H
#define KVL_RENDER_H

#include <stdatomic.h>

#include "core/internal.h"

typedef struct kvl__cursor {
	char *buf;
	size_t len, used; /* used may exceed len: the length needed */
} kvl__cursor;

void kvl__put(kvl__cursor *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* NUL-terminates; [out] needed (optional) gets the length without the NUL.
 * 0, or KVL_ERANGE when the text did not fit (the buffer then holds a
 * NUL-terminated prefix). */
int kvl__cursor_finish(kvl__cursor *c, size_t *needed);

/* A count; one the store cannot tell (UINT64_MAX) as `unknown` (NaN in
 * Prometheus text, null in JSON). */
void kvl__put_count(kvl__cursor *c, uint64_t v, const char *unknown);

/* A store's counters: Prometheus lines, or JSON members without braces;
 * a non-empty `note` (an option the store could not honour) follows as a
 * comment line, or as the member "note". */
void kvl__render_store_prom(kvl__cursor *c, const kvl_store_stats *s,
                            const char *note);
void kvl__render_store_json(kvl__cursor *c, const kvl_store_stats *s,
                            const char *note);

/* Checks a render call's arguments: 0, or KVL_EINVAL with the reason in
 * e. */
int kvl__render_check(kvl__err *e, const char *fn, kvl_stats_format format,
                      const char *buf, size_t len);

#endif /* KVL_RENDER_H */
