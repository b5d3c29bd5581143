/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fault.h — control of the fault-injection store (internal).
 *
 * A store opened as "fault+<inner URI>" (see fault.c) wraps another
 * store and injects failures into its calls. Tests and tools read and change
 * its configuration at run time and read what it injected through the
 * functions below. They are not part of the public API: they link only from
 * the static library (tests, the command-line tool).
 *
 * Every function here is thread-safe and may run while other threads call
 * the store; a change applies to the store calls that begin after it
 * returns. Each returns 0 or KVL_EINVAL (s is NULL or not a fault store, an
 * out pointer is NULL, or a value out of range; the reason goes into s's
 * message when s is a store).
 */
#ifndef KVL_STORE_FAULT_H
#define KVL_STORE_FAULT_H

#include <stdint.h>

#include "kvlink.h"

/* What the fault store injects. Probabilities are in [0, 1] and drawn per
 * key and per call, independently of each other. */
typedef struct kvl__fault_cfg {
	double error;     /* a key fails with KVL_EIO; nothing of it is read or
	                   * written (exists, get, put, remove) */
	double corrupt;   /* get: one random bit of the bytes just read for a
	                   * key is flipped; the key still reports success */
	double evict;     /* exists, get: the key is removed from the inner
	                   * store first, so it reads as absent */
	double latency_p; /* a call sleeps latency_ms first */
	uint32_t latency_ms;      /* at most 3600000 (one hour) */
	int down;                 /* 1: every call fails whole with KVL_EIO */
	uint64_t fail_get_call;   /* the get call with this 1-based number,
	                           * counted from open, fails whole with
	                           * KVL_EIO; 0: none */
	uint64_t fail_put_call;   /* the same for put calls */
} kvl__fault_cfg;

/* [out] the configuration in force now. */
int kvl__fault_get(kvl_store *s, kvl__fault_cfg *out);

/* Replaces the whole configuration (start from kvl__fault_get to change one
 * field). Nothing changes when it fails. The random stream and the call
 * counters go on from where they are. */
int kvl__fault_set(kvl_store *s, const kvl__fault_cfg *cfg);

/* [out] what was injected since open; any pointer may be NULL. errors counts
 * keys (a call failed whole counts each of its keys), corruptions the bits
 * flipped, evictions the objects the inner store really removed, delays the
 * calls that slept. */
int kvl__fault_counts(kvl_store *s, uint64_t *errors, uint64_t *corruptions,
                      uint64_t *evictions, uint64_t *delays);

/* [out] the get and put calls the store has received since open (the
 * numbers that fail_get_call and fail_put_call are compared with); either
 * pointer may be NULL. One kvl_store_get is one get call unless some of its
 * keys are invalid: store.c then passes each run of valid keys as a call of
 * its own. */
int kvl__fault_calls(kvl_store *s, uint64_t *gets, uint64_t *puts);

/* [out] *now: the holds of key (with the store's tenant prefix, if it has
 * one) that a fault.holds=1 store counts now; *taken: the holds it took
 * since open, of every key. Either pointer may be NULL (key too, with now
 * NULL). Both 0 for a store without fault.holds. */
int kvl__fault_holds(kvl_store *s, const char *key, uint32_t *now,
                     uint64_t *taken);

/* [out] *live: registrations (kvl_store_register calls that succeeded)
 * less the kvl__store_unregister calls since (never below 0). */
int kvl__fault_regs(kvl_store *s, uint64_t *live);

#endif /* KVL_STORE_FAULT_H */
