/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stores.c — the store under test, URIs around it, asserted opens and the
 * one-key calls of stores.h. Each one-key call is written once with a flag:
 * `whole` 1 asserts the batch call's own code, 0 hands it back instead of
 * the key's result.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvl_assert.h"
#include "stores.h"

#define ERRBUF 1024 /* more than any store's message (KVL__ERRMSG_MAX) */

const char *env_store(void)
{
	const char *e = getenv("KVL_TEST_STORE_URI");
	return e && *e ? e : NULL;
}

const char *store_uri(const char *prefix, const char *opts)
{
	static char ring[8][1024];
	static unsigned next;
	char *out = ring[next++ % 8];
	const char *base = env_store() ? env_store() : KVL_TEST_MEM_URI;
	int n = snprintf(out, sizeof ring[0], "%s%s%s%s", prefix, base,
	                 !opts ? "" : strchr(base, '?') ? "&" : "?",
	                 opts ? opts : "");
	ASSERT_TRUE(n > 0 && (size_t)n < sizeof ring[0]);
	return out;
}

kvl_store *open_ok(const char *uri)
{
	char eb[ERRBUF] = "";
	kvl_store *s = NULL;
	int rc = kvl_store_open(uri, &s, eb, sizeof eb);
	ASSERT_CODE_MSG(rc, KVL_OK, "kvl_store_open(\"%s\"): %s", uri, eb);
	ASSERT_TRUE(s != NULL);
	return s;
}

kvl_store *open_okf(const char *fmt, ...)
{
	char uri[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(uri, sizeof uri, fmt, ap);
	va_end(ap);
	ASSERT_TRUE(n >= 0 && (size_t)n < sizeof uri);
	return open_ok(uri);
}

void open_fails(const char *uri, int code, const char *needle)
{
	char eb[ERRBUF] = "";
	kvl_store *s = NULL;
	int rc = kvl_store_open(uri, &s, eb, sizeof eb);
	ASSERT_CODE_MSG(rc, code, "kvl_store_open(\"%s\"): %s", uri, eb);
	ASSERT_TRUE_MSG(s == NULL, "kvl_store_open(\"%s\") failed with a "
	                "handle", uri);
	ASSERT_TRUE_MSG(strstr(eb, needle) != NULL,
	                "kvl_store_open(\"%s\"): message \"%s\" does not "
	                "contain \"%s\"",
	                uri, eb, needle);
}

kvl_store_stats store_stats(kvl_store *s)
{
	kvl_store_stats st;
	memset(&st, 0xff, sizeof st);
	ASSERT_RC(s, kvl_store_stats_get(s, &st), KVL_OK);
	return st;
}

/* The call's rc asserted (whole) or returned when it failed. */
static int64_t one_result(int whole, int rc, int64_t res, const char *call,
                          kvl_store *s, const char *key)
{
	if (whole)
		ASSERT_CODE_MSG(rc, KVL_OK, "%s of \"%s\": %s", call, key,
		                kvl_store_errmsg(s));
	return rc < 0 ? rc : res;
}

static int put_one(int whole, kvl_store *s, const char *key,
                   const void *data, size_t len)
{
	kvl_iov iov = {(void *)data, len};
	size_t np = 1;
	int res = 12345;
	int rc = kvl_store_put(s, &key, 1, &iov, &np, &res);
	return (int)one_result(whole, rc, res, "kvl_store_put", s, key);
}

static int64_t get_one(int whole, kvl_store *s, const char *key, uint64_t off,
                       void *dst, size_t len)
{
	kvl_range r = {off, dst, len};
	size_t nr = 1;
	int res = 12345;
	int rc = kvl_store_get(s, &key, 1, &r, &nr, &res);
	/* A key read whole is every byte asked: say how many. */
	return one_result(whole, rc, res == 0 ? (int64_t)len : res,
	                  "kvl_store_get", s, key);
}

static int exists_one(int whole, kvl_store *s, const char *key)
{
	int res = 12345;
	int rc = kvl_store_exists(s, &key, 1, &res);
	return (int)one_result(whole, rc, res, "kvl_store_exists", s, key);
}

static int remove_one(int whole, kvl_store *s, const char *key)
{
	int res = 12345;
	int rc = kvl_store_remove(s, &key, 1, &res);
	return (int)one_result(whole, rc, res, "kvl_store_remove", s, key);
}

int put1(kvl_store *s, const char *key, const void *data, size_t len)
{
	return put_one(1, s, key, data, len);
}

int64_t get1(kvl_store *s, const char *key, uint64_t off, void *dst,
             size_t len)
{
	return get_one(1, s, key, off, dst, len);
}

int exists1(kvl_store *s, const char *key)
{
	return exists_one(1, s, key);
}

int remove1(kvl_store *s, const char *key)
{
	return remove_one(1, s, key);
}

int put1_rc(kvl_store *s, const char *key, const void *data, size_t len)
{
	return put_one(0, s, key, data, len);
}

int64_t get1_rc(kvl_store *s, const char *key, uint64_t off, void *dst,
                size_t len)
{
	return get_one(0, s, key, off, dst, len);
}

int exists1_rc(kvl_store *s, const char *key)
{
	return exists_one(0, s, key);
}

int remove1_rc(kvl_store *s, const char *key)
{
	return remove_one(0, s, key);
}
