/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.c — the log sink, its threshold and rate limits (log.h).
 *
 * One mutex serializes the sink, so messages never interleave and a sink
 * need not be thread-safe; the threshold is an atomic, so a message below
 * it costs one load. KVL_LOG_LEVEL is read once, before the first message
 * or the first kvl_log_set.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/internal.h"
#include "core/log.h"

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static atomic_int log_threshold = KVL_LOG_WARNING;
static kvl_log_fn log_fn;   /* NULL: stderr (log_mu) */
static void *log_user;      /* (log_mu) */
static char log_bad_env[64]; /* a KVL_LOG_LEVEL that is no level (once) */
static atomic_int log_bad_pending; /* not reported yet */

static const char *const level_names[] = {"error", "warning", "info",
                                          "debug"};

static void read_env(void)
{
	const char *v = getenv("KVL_LOG_LEVEL");
	if (!v || !*v)
		return;
	if (!strcasecmp(v, "off") || !strcasecmp(v, "none")) {
		atomic_store(&log_threshold, KVL_LOG_OFF);
		return;
	}
	if (!strcasecmp(v, "warn")) {
		atomic_store(&log_threshold, KVL_LOG_WARNING);
		return;
	}
	for (int i = 0; i <= KVL_LOG_DEBUG; i++)
		if (!strcasecmp(v, level_names[i])) {
			atomic_store(&log_threshold, i);
			return;
		}
	snprintf(log_bad_env, sizeof log_bad_env, "%s", v);
	atomic_store(&log_bad_pending, 1);
}

/* Reports a bad KVL_LOG_LEVEL once, on the first message or setting. */
static void init(void)
{
	pthread_once(&log_once, read_env);
	/* log_bad_env is written once, by read_env, before any reader. */
	if (atomic_exchange(&log_bad_pending, 0))
		kvl__log(NULL, KVL_LOG_WARNING, "log",
		         "KVL_LOG_LEVEL=%s is not a level (off, error, warning, "
		         "info, debug); logging at warning",
		         log_bad_env);
}

KVL_API int kvl_log_set(kvl_log_fn fn, void *user, int level)
{
	if (level < KVL_LOG_OFF || level > KVL_LOG_DEBUG)
		return KVL_EINVAL;
	pthread_once(&log_once, read_env);
	pthread_mutex_lock(&log_mu);
	log_fn = fn;
	log_user = fn ? user : NULL;
	atomic_store(&log_bad_pending, 0); /* the caller chose */
	atomic_store(&log_threshold, level);
	pthread_mutex_unlock(&log_mu);
	return 0;
}

KVL_API int kvl_log_get_level(void)
{
	pthread_once(&log_once, read_env);
	return atomic_load(&log_threshold);
}

int kvl__log_on(kvl_log_level level)
{
	return (int)level <= kvl_log_get_level();
}

/* Whether lim lets one more message out now; the count of dropped ones
 * the message should mention goes to *dropped. Under log_mu. */
static int admit(kvl__log_limit *lim, uint64_t *dropped)
{
	*dropped = 0;
	if (!lim)
		return 1;
	uint64_t now = kvl__now_ns();
	uint64_t win = (uint64_t)(lim->window_ms ? lim->window_ms
	                                         : KVL__LOG_WINDOW_MS) *
	               1000000u;
	if (lim->sent == 0 || now - lim->window_start >= win) {
		lim->window_start = now;
		lim->sent = 0;
	}
	if (lim->sent >= KVL__LOG_BURST) {
		lim->dropped++;
		return 0;
	}
	lim->sent++;
	*dropped = lim->dropped;
	lim->dropped = 0;
	return 1;
}

void kvl__log(kvl__log_limit *lim, kvl_log_level level, const char *component,
              const char *fmt, ...)
{
	init();
	if (!kvl__log_on(level))
		return;
	char msg[KVL__ERRMSG_MAX + 96];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&log_mu);
	uint64_t dropped;
	if (admit(lim, &dropped)) {
		size_t used = n < 0 ? 0 : (size_t)n;
		if (dropped && used < sizeof msg)
			snprintf(msg + used, sizeof msg - used,
			         " (%llu more like it were dropped)",
			         (unsigned long long)dropped);
		if (log_fn)
			log_fn(log_user, level, component, msg);
		else
			fprintf(stderr, "kvlink: %s: [%s] %s\n",
			        level_names[level], component, msg);
	}
	pthread_mutex_unlock(&log_mu);
}
