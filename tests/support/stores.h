/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stores.h — stores for the tests: the store under test (the URI in
 * $KVL_TEST_STORE_URI, which tests/redis/run.sh and tests/mooncake/run.sh
 * set, or the embedded store), URIs built around it, opening a store that
 * must open or must not, and one-key calls over kvl_store_* for tests that
 * look at one object at a time.
 *
 * Every function asserts (kvl_assert.h): for the main thread of a cmocka
 * program, or any thread of one without cmocka.
 */
#ifndef KVL_TEST_STORES_H
#define KVL_TEST_STORES_H

#include <stddef.h>
#include <stdint.h>

#include "kvlink.h"

/* The store under test when $KVL_TEST_STORE_URI does not name one. */
#define KVL_TEST_MEM_URI "mem:?capacity=16MiB"

/* $KVL_TEST_STORE_URI, or NULL when it is unset or empty. */
const char *env_store(void);

/* `prefix` + the store under test + `opts` (NULL: none) as more query
 * options, e.g. store_uri("fault+", "fault.seed=3"). The result is one of
 * 8 static buffers used in turn (not for several threads). */
const char *store_uri(const char *prefix, const char *opts);

/* Opens `uri` (or the URI printf-formatted from fmt), asserting that it
 * opens; the message of a failure names the code and the open's text. */
kvl_store *open_ok(const char *uri);
kvl_store *open_okf(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

/* Asserts that opening `uri` fails with `code`, leaves the handle NULL and
 * says something containing `needle`. */
void open_fails(const char *uri, int code, const char *needle);

/* kvl_store_stats_get, asserted to succeed. */
kvl_store_stats store_stats(kvl_store *s);

/* One-key calls: each asserts that the call itself returned 0 and returns
 * the key's result (put: a KVL_PUT_* or a code; get: `len`, the bytes
 * read, when kvl_store_get read the key, or a code; exists: 1, 0 or a
 * code; remove: 1, 0 or a code). get1 reads `len`
 * bytes from offset `off` into dst. */
int put1(kvl_store *s, const char *key, const void *data, size_t len);
int64_t get1(kvl_store *s, const char *key, uint64_t off, void *dst,
             size_t len);
int exists1(kvl_store *s, const char *key);
int remove1(kvl_store *s, const char *key);

/* The same calls for stores whose calls may fail as a whole: the call's
 * code when it failed, else the key's result. */
int put1_rc(kvl_store *s, const char *key, const void *data, size_t len);
int64_t get1_rc(kvl_store *s, const char *key, uint64_t off, void *dst,
                size_t len);
int exists1_rc(kvl_store *s, const char *key);
int remove1_rc(kvl_store *s, const char *key);

#endif
