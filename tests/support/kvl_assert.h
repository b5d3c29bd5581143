/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvl_assert.h — the assertions of every test program: on failure they
 * print where (file:line), both expressions and both values (kvl_errno
 * codes also by name, kvl_err_name) and, for ASSERT_RC, the handle's last
 * message.
 *
 * The same macros serve cmocka programs and programs without cmocka, and
 * the support library's own helpers (tests/support/) use them too; which
 * one a failure talks to is decided when it happens (kvl_assert.c):
 *  - in a program linked with cmocka, ASSERT_* fail the running cmocka test
 *    (as fail_msg does) and the program's other tests still run;
 *  - in a program without cmocka, ASSERT_* end the program with exit
 *    status 1 (77 stays the programs' own "skipped").
 * EXPECT_* report the same way but let the program go on: a program
 * without cmocka counts them and must end with kvl_test_failures() != 0 as
 * a failure (e.g. return kvl_test_failures() ? 1 : 0). In a cmocka
 * program an EXPECT_* is an ASSERT_*.
 *
 * Fatal assertions are for the main thread of a cmocka program (cmocka
 * cannot fail a test from another thread); without cmocka any thread may
 * use them.
 *
 *   ASSERT_EQ(actual, expected)       integers, compared as long long
 *   ASSERT_U64(actual, expected)      compared as unsigned long long
 *   ASSERT_CODE(actual, expected)     kvl_errno codes, printed by name
 *   ASSERT_RC(h, actual, expected)    ASSERT_CODE, printing h's message:
 *                                     h a kvl_linker, kvl_store or
 *                                     kvl_layout handle, or a message
 *                                     buffer (char *)
 *   ASSERT_CONTAINS(hay, needle)      hay is a string containing needle
 *   ASSERT_TRUE(cond)                 cond holds
 *   ASSERT_FAIL(fmt, ...)             fails unconditionally
 * and for each comparison a _MSG form that adds a printf-style context,
 * e.g. ASSERT_EQ_MSG(prefix, 0, "%s's lookup", name).
 */
#ifndef KVL_TEST_ASSERT_H
#define KVL_TEST_ASSERT_H

#include <string.h>

#include "kvlink.h"

enum { KVL__CMP_INT, KVL__CMP_U64, KVL__CMP_CODE };

/* Report a failed comparison, or a failure described by fmt alone; then,
 * when fatal, end the running test or the program, else count it (see
 * above). fmt adds context to a comparison ("%s", "" when there is none). */
void kvl__test_cmp(const char *file, int line, int fatal, int kind,
                   const char *a_expr, unsigned long long a,
                   const char *e_expr, unsigned long long e, const char *fmt,
                   ...) __attribute__((format(printf, 9, 10)));
void kvl__test_fail(const char *file, int line, int fatal, const char *fmt,
                    ...) __attribute__((format(printf, 4, 5)));

/* How many EXPECT_* failed so far in this program (any thread). */
int kvl_test_failures(void);

/* The last message of a handle, or the text of a message buffer. */
const char *kvl__test_str(const char *s);
#define KVL_TEST_ERRMSG(h)                                                 \
	_Generic((h),                                                      \
		kvl_linker *: kvl_linker_errmsg,                           \
		const kvl_linker *: kvl_linker_errmsg,                     \
		kvl_store *: kvl_store_errmsg,                             \
		const kvl_store *: kvl_store_errmsg,                       \
		kvl_layout *: kvl_layout_errmsg,                           \
		const kvl_layout *: kvl_layout_errmsg,                     \
		kvl_prober *: kvl_prober_errmsg,                           \
		const kvl_prober *: kvl_prober_errmsg,                     \
		char *: kvl__test_str,                                     \
		const char *: kvl__test_str)(h)

/* ------------------------------------------------------------ internals */

#define KVL__CMP(fatal, kind, T, actual, expected, ...)                    \
	do {                                                               \
		T a_ = (T)(actual);                                        \
		T e_ = (T)(expected);                                      \
		if (a_ != e_)                                              \
			kvl__test_cmp(__FILE__, __LINE__, fatal, kind,     \
			              #actual, (unsigned long long)a_,     \
			              #expected, (unsigned long long)e_,   \
			              __VA_ARGS__);                        \
	} while (0)

#define KVL__TRUE(fatal, cond, ...)                                        \
	do {                                                               \
		if (!(cond))                                               \
			kvl__test_fail(__FILE__, __LINE__, fatal,          \
			               __VA_ARGS__);                       \
	} while (0)

#define KVL__CONTAINS(fatal, hay, needle)                                  \
	do {                                                               \
		const char *h_ = (hay), *n_ = (needle);                    \
		if (!h_ || !strstr(h_, n_))                                \
			kvl__test_fail(__FILE__, __LINE__, fatal,          \
			               "%s == \"%s\" does not contain "    \
			               "\"%s\"",                           \
			               #hay, h_ ? h_ : "(null)", n_);      \
	} while (0)

/* ---------------------------------------------------- fatal: ASSERT_* */

#define ASSERT_EQ(actual, expected)                                        \
	KVL__CMP(1, KVL__CMP_INT, long long, actual,      \
	         expected, "%s", "")
#define ASSERT_EQ_MSG(actual, expected, ...)                               \
	KVL__CMP(1, KVL__CMP_INT, long long, actual,      \
	         expected, __VA_ARGS__)
#define ASSERT_U64(actual, expected)                                       \
	KVL__CMP(1, KVL__CMP_U64, unsigned long long,     \
	         actual, expected, "%s", "")
#define ASSERT_U64_MSG(actual, expected, ...)                              \
	KVL__CMP(1, KVL__CMP_U64, unsigned long long,     \
	         actual, expected, __VA_ARGS__)
/* A kvl_errno result, printed by name. */
#define ASSERT_CODE(actual, expected)                                      \
	KVL__CMP(1, KVL__CMP_CODE, long long, actual,     \
	         expected, "%s", "")
#define ASSERT_CODE_MSG(actual, expected, ...)                             \
	KVL__CMP(1, KVL__CMP_CODE, long long, actual,     \
	         expected, __VA_ARGS__)
/* ASSERT_CODE that also prints h's message (evaluated after actual). */
#define ASSERT_RC(h, actual, expected)                                     \
	KVL__CMP(1, KVL__CMP_CODE, long long, actual,     \
	         expected, "%s", KVL_TEST_ERRMSG(h))
#define ASSERT_CONTAINS(hay, needle)                                       \
	KVL__CONTAINS(1, hay, needle)
/* ASSERT_RC, and h's message names `needle`. */
#define ASSERT_FAILS(h, actual, expected, needle)                          \
	do {                                                               \
		ASSERT_RC(h, actual, expected);                            \
		ASSERT_CONTAINS(KVL_TEST_ERRMSG(h), needle);               \
	} while (0)
#define ASSERT_TRUE(cond)                                                  \
	KVL__TRUE(1, cond, "%s is false", #cond)
#define ASSERT_TRUE_MSG(cond, ...) KVL__TRUE(1, cond, __VA_ARGS__)
#define ASSERT_FAIL(...) kvl__test_fail(__FILE__, __LINE__, 1, __VA_ARGS__)

/* ------------------------------------------------ non-fatal: EXPECT_* */

#define EXPECT_EQ(actual, expected)                                        \
	KVL__CMP(0, KVL__CMP_INT, long long, actual,      \
	         expected, "%s", "")
#define EXPECT_EQ_MSG(actual, expected, ...)                               \
	KVL__CMP(0, KVL__CMP_INT, long long, actual,      \
	         expected, __VA_ARGS__)
#define EXPECT_U64(actual, expected)                                       \
	KVL__CMP(0, KVL__CMP_U64, unsigned long long,     \
	         actual, expected, "%s", "")
#define EXPECT_U64_MSG(actual, expected, ...)                              \
	KVL__CMP(0, KVL__CMP_U64, unsigned long long,     \
	         actual, expected, __VA_ARGS__)
#define EXPECT_CODE(actual, expected)                                      \
	KVL__CMP(0, KVL__CMP_CODE, long long, actual,     \
	         expected, "%s", "")
#define EXPECT_CODE_MSG(actual, expected, ...)                             \
	KVL__CMP(0, KVL__CMP_CODE, long long, actual,     \
	         expected, __VA_ARGS__)
#define EXPECT_RC(h, actual, expected)                                     \
	KVL__CMP(0, KVL__CMP_CODE, long long, actual,     \
	         expected, "%s", KVL_TEST_ERRMSG(h))
#define EXPECT_CONTAINS(hay, needle)                                       \
	KVL__CONTAINS(0, hay, needle)
#define EXPECT_TRUE(cond)                                                  \
	KVL__TRUE(0, cond, "%s is false", #cond)
#define EXPECT_TRUE_MSG(cond, ...) KVL__TRUE(0, cond, __VA_ARGS__)
#define EXPECT_FAIL(...) kvl__test_fail(__FILE__, __LINE__, 0, __VA_ARGS__)

#endif
