/* SPDX-License-Identifier: Apache-2.0 */
/*
 * internal.h — helpers shared by kvlink's sources; never installed.
 *
 * Holds the per-handle error message (kvl__err), the little-endian encoders
 * used by hashes, fingerprints and object headers, and the name checks that
 * layouts and stores share. Internal symbols carry the kvl__ prefix and are
 * hidden from the shared library (the build uses -fvisibility=hidden).
 */
#ifndef KVL_INTERNAL_H
#define KVL_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "kvlink.h"

#define KVL__ERRMSG_MAX 512

/* The last failure message of one handle. Writers and readers take `mu`, so a
 * reader always sees a whole message even while other threads fail. */
typedef struct kvl__err {
	pthread_mutex_t mu;
	char msg[KVL__ERRMSG_MAX];
} kvl__err;

void kvl__err_init(kvl__err *e);
void kvl__err_destroy(kvl__err *e);

/* Formats a message into `e` (NULL e: nothing is kept) and returns `code`,
 * so failures read: return kvl__fail(&h->err, KVL_EINVAL, "page_size is 0"); */
int kvl__fail(kvl__err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int kvl__vfail(kvl__err *e, int code, const char *fmt, va_list ap);

/* Copies the message into a thread-local buffer and returns it. */
const char *kvl__err_get(const kvl__err *e);

/* The message of this thread's most recent kvl__fail on any handle, since
 * its last kvl__err_here_clear ("" if none): what a worker thread (the
 * linker's loader) says about the failure it hands to another thread,
 * whatever other threads wrote into the handles meanwhile. */
const char *kvl__err_here(void);
void kvl__err_here_clear(void);

/* Formats "message" into a caller buffer (errbuf may be NULL) and returns
 * `code`: for open/create functions that fail before a handle exists. */
int kvl__fail_buf(char *errbuf, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Little-endian encoding independent of the host's byte order. */
/* Written out byte by byte so compilers merge them into one store. */
static inline void kvl__put_u32le(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static inline void kvl__put_u64le(uint8_t *p, uint64_t v)
{
	kvl__put_u32le(p, (uint32_t)v);
	kvl__put_u32le(p + 4, (uint32_t)(v >> 32));
}

static inline uint32_t kvl__get_u32le(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static inline uint64_t kvl__get_u64le(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* n rounded up to a multiple of 64 (a cache line). */
static inline size_t kvl__round64(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

/* Writes the 2*n lowercase hex digits of bytes[0..n) to out (no NUL). */
void kvl__hex(const uint8_t *bytes, size_t n, char *out);

/* 1 if `s` has 1..KVL_NAME_MAX characters, each a letter, digit or one of
 * `extra`; else 0. */
int kvl__name_ok(const char *s, const char *extra);

/* Monotonic clock in nanoseconds. */
uint64_t kvl__now_ns(void);

/* The CLOCK_MONOTONIC time ms milliseconds from now, for timed waits on
 * condition variables set to that clock. */
struct timespec kvl__deadline_after(uint32_t ms);

/* pthread_cond_init on the CLOCK_MONOTONIC clock, the clock of
 * kvl__deadline_after. 0, or pthread's error. */
int kvl__cond_init_monotonic(pthread_cond_t *cv);

/* Leaves only the empty prefix (bit 0) in a restorable set of `words`
 * words: what a lookup that failed offers. */
void kvl__set_empty(uint64_t *bits, size_t words);

/* The checks of a call that writes the restorable set of n_pages pages
 * into bits (n_words words): KVL_EINVAL for NULL bits, KVL_ERANGE when
 * n_words is too small (a message naming `op` in e; nothing written);
 * else 0, and bits hold the empty prefix until the call writes more. */
int kvl__set_out(kvl__err *e, const char *op, uint64_t *bits, size_t n_words,
                 size_t n_pages);

#endif /* KVL_INTERNAL_H */
