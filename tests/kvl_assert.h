/*
 * kvl_assert.h — assertions of the test programs that print both values
 * (cmocka's fail_msg), for codes also the kvl_errno names.
 */
#ifndef KVL_TEST_ASSERT_H
#define KVL_TEST_ASSERT_H

#include <string.h>

#include "kvlink.h"

#define ASSERT_EQ(actual, expected)                                         \
	do {                                                                \
		long long a_ = (long long)(actual);                         \
		long long e_ = (long long)(expected);                       \
		if (a_ != e_)                                               \
			fail_msg("%s == %lld, expected %s == %lld", #actual, \
			         a_, #expected, e_);                        \
	} while (0)

#define ASSERT_U64(actual, expected)                                        \
	do {                                                                \
		unsigned long long a_ = (actual), e_ = (expected);          \
		if (a_ != e_)                                               \
			fail_msg("%s == %llu, expected %llu", #actual, a_,  \
			         e_);                                       \
	} while (0)

/* A kvl_errno result, printed by name. */
#define ASSERT_CODE(actual, expected)                                       \
	do {                                                                \
		long long a_ = (long long)(actual);                         \
		long long e_ = (long long)(expected);                       \
		if (a_ != e_)                                               \
			fail_msg("%s == %lld (%s), expected %lld (%s)",     \
			         #actual, a_, kvl_err_name((int)a_), e_,    \
			         kvl_err_name((int)e_));                    \
	} while (0)

#define ASSERT_CONTAINS(hay, needle)                                        \
	do {                                                                \
		const char *h_ = (hay), *n_ = (needle);                     \
		if (!h_ || !strstr(h_, n_))                                 \
			fail_msg("%s == \"%s\" does not contain \"%s\"",    \
			         #hay, h_ ? h_ : "(null)", n_);             \
	} while (0)

#endif
