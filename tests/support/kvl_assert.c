/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvl_assert.c — where the assertions of kvl_assert.h report a failure.
 *
 * One copy serves programs with and without cmocka, so the choice is made
 * at run time: cmocka's _fail() is referenced weakly, and it is there
 * exactly when the program links cmocka (tests/CMakeLists.txt links it
 * into the programs that include <cmocka.h> and no other). With it, a
 * fatal failure prints its report and calls _fail(), which ends the
 * running cmocka test (or, outside one, the program); without it, the
 * report goes to stderr and the program exits with status 1.
 *
 * Non-fatal failures (EXPECT_*) are counted in an atomic counter read by
 * kvl_test_failures(); in a cmocka program they are fatal, since nothing
 * would read the counter.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "kvl_assert.h"

/* cmocka's, when the program links it (cmocka.h declares it so). */
extern void _fail(const char *const file, const int line)
	__attribute__((weak));

static atomic_int g_failures;

int kvl_test_failures(void)
{
	return atomic_load(&g_failures);
}

const char *kvl__test_str(const char *s)
{
	return s ? s : "(null)";
}

static void vreport(const char *file, int line, const char *head,
                    const char *fmt, va_list ap)
{
	char ctx[1024];
	vsnprintf(ctx, sizeof ctx, fmt, ap);
	flockfile(stderr);
	fprintf(stderr, "%s:%d: %s%s%s%s\n", file, line, head ? head : "",
	        head && ctx[0] ? " (" : "", ctx, head && ctx[0] ? ")" : "");
	funlockfile(stderr);
	fflush(stderr);
}

/* After a report: the end of the test or program (fatal, or any failure
 * under cmocka), or one more failure counted. */
static void after(const char *file, int line, int fatal)
{
	if (!fatal)
		atomic_fetch_add(&g_failures, 1);
	if (fatal || _fail) {
		if (_fail)
			_fail(file, line); /* longjmps out of the running test */
		exit(1);
	}
}

static void cmp_head(char *out, size_t n, int kind, const char *a_expr,
                     unsigned long long a, const char *e_expr,
                     unsigned long long e)
{
	switch (kind) {
	case KVL__CMP_U64:
		snprintf(out, n, "%s == %llu, expected %s == %llu", a_expr, a,
		         e_expr, e);
		break;
	case KVL__CMP_CODE:
		snprintf(out, n, "%s == %lld (%s), expected %s == %lld (%s)",
		         a_expr, (long long)a, kvl_err_name((int)(long long)a),
		         e_expr, (long long)e, kvl_err_name((int)(long long)e));
		break;
	default:
		snprintf(out, n, "%s == %lld, expected %s == %lld", a_expr,
		         (long long)a, e_expr, (long long)e);
		break;
	}
}

void kvl__test_cmp(const char *file, int line, int fatal, int kind,
                   const char *a_expr, unsigned long long a,
                   const char *e_expr, unsigned long long e, const char *fmt,
                   ...)
{
	char head[1024];
	cmp_head(head, sizeof head, kind, a_expr, a, e_expr, e);
	va_list ap;
	va_start(ap, fmt);
	vreport(file, line, head, fmt, ap);
	va_end(ap);
	after(file, line, fatal);
}

void kvl__test_fail(const char *file, int line, int fatal, const char *fmt,
                    ...)
{
	va_list ap;
	va_start(ap, fmt);
	vreport(file, line, NULL, fmt, ap);
	va_end(ap);
	after(file, line, fatal);
}
