/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats.h — the linker's counters and latency histograms (internal).
 *
 * Counters are atomics bumped by whichever thread does the work (engine
 * threads for lookups, the loader, the offloader) with relaxed ordering: a
 * snapshot is a set of individually exact counts, not one instant.
 */
#ifndef KVL_STATS_H
#define KVL_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#include "kvlink.h"

/* Bucket i counts latencies <= 2^i microseconds; the last one is +Inf. */
#define KVL__HIST_BUCKETS 24

typedef struct kvl__hist {
	_Atomic uint64_t bucket[KVL__HIST_BUCKETS + 1];
	_Atomic uint64_t count;
	_Atomic uint64_t sum_ns;
} kvl__hist;

void kvl__hist_add(kvl__hist *h, uint64_t ns);

#define KVL__LINKER_COUNTERS(X)                                            \
	X(lookups, "lookups made")                                         \
	X(lookup_pages, "pages asked by lookups")                          \
	X(hit_pages, "pages of restorable prefixes found by lookups")      \
	X(loads, "load requests completed")                                \
	X(load_failures, "load requests that failed")                      \
	X(loaded_pages, "pages loaded and valid")                          \
	X(loaded_bytes, "bytes read into destination slots")               \
	X(loaded_dma_bytes, "of loaded_bytes, those the GPU copy engines "  \
	  "moved")                                                         \
	X(canceled, "requests canceled")                                   \
	X(batches, "load batches finished")                                \
	X(offloads, "offload requests completed")                          \
	X(offload_failures, "offload requests that failed")                \
	X(offloaded_pages, "pages newly written to the store")             \
	X(offloaded_bytes, "bytes written to the store")                   \
	X(present_pages, "pages skipped by offloads: already stored")

typedef struct kvl__linker_stats {
#define KVL__COUNTER_FIELD_(name, help) _Atomic uint64_t name;
	KVL__LINKER_COUNTERS(KVL__COUNTER_FIELD_)
#undef KVL__COUNTER_FIELD_
	kvl__hist lookup_ns;  /* kvl_linker_lookup, whole call */
	kvl__hist batch_ns;   /* kvl_linker_start to the batch's last layer */
	kvl__hist offload_ns; /* offload accepted to completed */
} kvl__linker_stats;

#define KVL__COUNT(st, name, v) \
	atomic_fetch_add_explicit(&(st)->name, (v), memory_order_relaxed)

#endif /* KVL_STATS_H */
