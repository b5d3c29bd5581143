/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shell.h — running a shell command from a test (the Redis tests drive
 * redis-cli and tests/redis/servers.sh with it). Main thread only: it
 * asserts (kvl_assert.h).
 */
#ifndef KVL_TEST_SHELL_H
#define KVL_TEST_SHELL_H

#include <stddef.h>

/* Runs the command printf(fmt, …) makes (at most 2047 bytes) with
 * /bin/sh; its standard output, trailing newlines and spaces trimmed, goes
 * to out (cap bytes, NUL-terminated; out may be NULL). Returns the exit
 * status, or -1 when the command did not exit. */
int shell(char *out, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
