/* SPDX-License-Identifier: Apache-2.0 */
/*
 * clock.h — time for the tests: the monotonic clock in milliseconds, in
 * nanoseconds and in seconds, and sleeping a number of milliseconds. Safe
 * on any thread.
 */
#ifndef KVL_TEST_CLOCK_H
#define KVL_TEST_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC, in ms, in ns and in s. */
uint64_t now_ms(void);
uint64_t now_ns(void);
double now_s(void);

/* The bound a pass/fail test may put on how long something takes: long
 * enough that only a hang exceeds it on a loaded machine (sanitizer builds,
 * a CI runner's 2 cores shared by parallel tests). How fast something is
 * belongs in a benchmark (bench/), not in a test. */
#define HANG_MS 60000

/* Sleeps at least ms milliseconds (a signal may cut it short). */
void sleep_ms(unsigned ms);

#endif
