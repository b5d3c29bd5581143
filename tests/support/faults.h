/* SPDX-License-Identifier: Apache-2.0 */
/*
 * faults.h — the fault-injection store ("fault+<URI>", src/store_fault.h)
 * from the tests: whether this build opens one around the store under test,
 * its configuration read and replaced in one step, its common changes
 * (latency, down, a failing n-th get) and its call counters, including
 * waiting until a linker's thread is inside its n-th call.
 *
 * Every function asserts (kvl_assert.h): main thread of a cmocka program.
 */
#ifndef KVL_TEST_FAULTS_H
#define KVL_TEST_FAULTS_H

#include <stdint.h>

#include "kvlink.h"

/* The configuration's type, complete in src/store_fault.h (which only the
 * callers that look inside it include). */
typedef struct kvl__fault_cfg kvl__fault_cfg;

/* 1 when this build opens "fault+" around the store under test
 * (stores.h); else prints why (once, as a cmocka skip line) and is 0. */
int fault_store_ok(void);

/* The configuration in force (asserted), and replacing it. */
kvl__fault_cfg fault_cfg(kvl_store *s);
void fault_set_cfg(kvl_store *s, const kvl__fault_cfg *cfg);

/* Every call sleeps ms first (latency_p 1). */
void fault_latency(kvl_store *s, uint32_t ms);

/* The store goes down (every call fails with KVL_EIO) or comes back. */
void fault_down(kvl_store *s, int down);

/* The get call k calls from now (1: the next one) fails whole. */
void fault_fail_get_in(kvl_store *s, uint64_t k);

/* The get and put calls the store received since open. */
uint64_t fault_gets(kvl_store *s);
uint64_t fault_puts(kvl_store *s);

/* Waits (10 s at most, then fails) until the store has received n get (or,
 * with puts, put) calls: a caller's thread is then inside the n-th one,
 * sleeping its latency. */
void fault_await_calls(kvl_store *s, int puts, uint64_t n);

#endif
