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

/* Sleeps at least ms milliseconds (a signal may cut it short). */
void sleep_ms(unsigned ms);

#endif
