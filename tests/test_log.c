/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_log.c — kvlink's log (kvl_log_set): a store whose breaker opens
 * logs a warning naming the store and the cause, and one when it answers
 * again (info; test_redis's test_breaker checks a Redis node's messages
 * and that a password never shows); the threshold filters; a bad level
 * is refused; repeated messages are rate-limited and the next one says how
 * many were dropped; an option a store cannot honour is logged at open;
 * fn NULL goes back to standard error (a child's stderr is read).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/kvl_assert.h"

#include "core/log.h"
#include "kvlink.h"
#include "store/fault.h"

#define MAX_MSGS 64

/* Messages caught, written by whichever thread logs (a breaker's prober
 * among them): under mu. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	int n;
	kvl_log_level level[MAX_MSGS];
	char component[MAX_MSGS][32];
	char text[MAX_MSGS][700];
} got;

static void capture(void *user, kvl_log_level level, const char *component,
                    const char *message)
{
	(void)user;
	pthread_mutex_lock(&mu);
	if (got.n < MAX_MSGS) {
		got.level[got.n] = level;
		snprintf(got.component[got.n], sizeof got.component[0], "%s",
		         component);
		snprintf(got.text[got.n], sizeof got.text[0], "%s", message);
		got.n++;
	}
	pthread_mutex_unlock(&mu);
}

static int setup(void **state)
{
	(void)state;
	memset(&got, 0, sizeof got);
	return kvl_log_set(capture, NULL, KVL_LOG_DEBUG);
}

static int count(void)
{
	pthread_mutex_lock(&mu);
	int n = got.n;
	pthread_mutex_unlock(&mu);
	return n;
}

/* The index of the first message containing `needle`, or -1. Messages
 * before it stay as they are (only new ones are added). */
static int find(const char *needle)
{
	pthread_mutex_lock(&mu);
	int at = -1;
	for (int i = 0; at < 0 && i < got.n; i++)
		if (strstr(got.text[i], needle))
			at = i;
	pthread_mutex_unlock(&mu);
	return at;
}

static void call_exists(kvl_store *s)
{
	const char *k = "k";
	int r;
	kvl_store_exists(s, &k, 1, &r);
}


static void test_breaker_open_and_close(void **state)
{
	(void)state;
	kvl_store *s;
	char err[256];
	ASSERT_CODE(kvl_store_open("fault+mem:?breaker=2&breaker_ms=10&"
	                           "fault.down=1",
	                           &s, err, sizeof err),
	            KVL_OK);
	call_exists(s);
	ASSERT_EQ(find("is down"), -1); /* one failure: still closed */
	call_exists(s);
	int i = find("is down");
	ASSERT_TRUE(i >= 0);
	ASSERT_EQ(got.level[i], KVL_LOG_WARNING);
	ASSERT_CONTAINS(got.component[i], "store");
	ASSERT_CONTAINS(got.text[i], "fault+mem:");
	ASSERT_CONTAINS(got.text[i], "2 calls in a row failed");
	kvl__fault_cfg c;
	ASSERT_CODE(kvl__fault_get(s, &c), KVL_OK);
	c.down = 0;
	ASSERT_CODE(kvl__fault_set(s, &c), KVL_OK);
	/* The prober closes it within a few back-offs. */
	for (int t = 0; t < 200 && find("answers again") < 0; t++)
		usleep(10000);
	i = find("answers again");
	ASSERT_TRUE(i >= 0);
	ASSERT_EQ(got.level[i], KVL_LOG_INFO);
	kvl_store_close(s);
}

static void test_threshold_filters(void **state)
{
	(void)state;
	ASSERT_CODE(kvl_log_set(capture, NULL, KVL_LOG_ERROR), KVL_OK);
	ASSERT_EQ(kvl_log_get_level(), KVL_LOG_ERROR);
	kvl_store *s;
	ASSERT_CODE(kvl_store_open("fault+mem:?breaker=1&fault.down=1", &s,
	                           NULL, 0),
	            KVL_OK);
	call_exists(s);
	ASSERT_EQ(count(), 0);
	kvl_store_close(s);
	ASSERT_CODE(kvl_log_set(capture, NULL, KVL_LOG_OFF), KVL_OK);
	kvl__log(NULL, KVL_LOG_ERROR, "test", "never");
	ASSERT_EQ(count(), 0);
}

static void test_bad_level(void **state)
{
	(void)state;
	ASSERT_CODE(kvl_log_set(capture, NULL, KVL_LOG_DEBUG + 1),
	            KVL_EINVAL);
	ASSERT_CODE(kvl_log_set(capture, NULL, KVL_LOG_OFF - 1), KVL_EINVAL);
	ASSERT_EQ(kvl_log_get_level(), KVL_LOG_DEBUG); /* unchanged */
}

static void test_rate_limit(void **state)
{
	(void)state;
	kvl__log_limit lim = {.window_ms = 100};
	for (int i = 0; i < 50; i++)
		kvl__log(&lim, KVL_LOG_WARNING, "test", "flap %d", i);
	ASSERT_EQ(count(), KVL__LOG_BURST);
	usleep(150000);
	kvl__log(&lim, KVL_LOG_WARNING, "test", "flap again");
	ASSERT_EQ(count(), KVL__LOG_BURST + 1);
	ASSERT_CONTAINS(got.text[KVL__LOG_BURST],
	                "flap again (45 more like it were dropped)");
}

static void test_note_at_open(void **state)
{
	(void)state;
	if (kvl_has_feature("cuda"))
		skip(); /* pinned=1 may take effect here */
	kvl_store *s;
	ASSERT_CODE(kvl_store_open("mem:?pinned=1", &s, NULL, 0), KVL_OK);
	int i = find("pinned=1 has no effect");
	ASSERT_TRUE(i >= 0);
	ASSERT_EQ(got.level[i], KVL_LOG_WARNING);
	kvl_store_close(s);
}

/* A child with the default sink writes the breaker's warning to stderr;
 * the parent reads it through a pipe. */
static void test_stderr_sink(void **state)
{
	(void)state;
	int fd[2];
	ASSERT_EQ(pipe(fd), 0);
	pid_t pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		dup2(fd[1], 2);
		close(fd[0]);
		kvl_log_set(NULL, NULL, KVL_LOG_WARNING);
		kvl_store *s;
		if (kvl_store_open("fault+mem:?breaker=1&fault.down=1", &s,
		                   NULL, 0))
			_exit(2);
		call_exists(s);
		kvl_store_close(s);
		_exit(0);
	}
	close(fd[1]);
	char buf[2048] = "";
	size_t n = 0;
	ssize_t r;
	while (n < sizeof buf - 1 &&
	       (r = read(fd[0], buf + n, sizeof buf - 1 - n)) > 0)
		n += (size_t)r;
	close(fd[0]);
	int status;
	waitpid(pid, &status, 0);
	ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ASSERT_CONTAINS(buf, "kvlink: warning: [store] fault+mem:");
	ASSERT_CONTAINS(buf, "is down");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_breaker_open_and_close, setup),
		cmocka_unit_test_setup(test_threshold_filters, setup),
		cmocka_unit_test_setup(test_bad_level, setup),
		cmocka_unit_test_setup(test_rate_limit, setup),
		cmocka_unit_test_setup(test_note_at_open, setup),
		cmocka_unit_test_setup(test_stderr_sink, setup),
	};
	return cmocka_run_group_tests_name("log", tests, NULL, NULL);
}
