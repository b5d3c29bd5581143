/* SPDX-License-Identifier: Apache-2.0 */
/*
 * error.c — error codes and per-handle messages.
 *
 * The code table is KVL_ERRNO_MAP in kvlink.h; everything here is generated
 * from it. A handle's message lives in a kvl__err guarded by its own mutex;
 * readers get a copy in a thread-local buffer so a message never changes
 * under them.
 */
#include <stdio.h>

#include "core/internal.h"

const char *kvl_strerror(int err)
{
	switch (err) {
	case KVL_OK:
		return "success";
#define KVL_STRERROR_CASE_(name, value, msg) \
	case KVL_##name:                     \
		return msg;
		KVL_ERRNO_MAP(KVL_STRERROR_CASE_)
#undef KVL_STRERROR_CASE_
	}
	return "unknown error";
}

const char *kvl_err_name(int err)
{
	switch (err) {
	case KVL_OK:
		return "KVL_OK";
#define KVL_ERR_NAME_CASE_(name, value, msg) \
	case KVL_##name:                     \
		return "KVL_" #name;
		KVL_ERRNO_MAP(KVL_ERR_NAME_CASE_)
#undef KVL_ERR_NAME_CASE_
	}
	return "KVL_EUNKNOWN";
}

void kvl__err_init(kvl__err *e)
{
	pthread_mutex_init(&e->mu, NULL);
	e->msg[0] = '\0';
}

void kvl__err_destroy(kvl__err *e)
{
	pthread_mutex_destroy(&e->mu);
}

/* This thread's most recent message (kvl__err_here). */
static _Thread_local char here[KVL__ERRMSG_MAX];

int kvl__vfail(kvl__err *e, int code, const char *fmt, va_list ap)
{
	if (!e)
		return code;
	char tmp[KVL__ERRMSG_MAX];
	vsnprintf(tmp, sizeof tmp, fmt, ap);
	memcpy(here, tmp, sizeof tmp);
	pthread_mutex_lock(&e->mu);
	memcpy(e->msg, tmp, sizeof tmp);
	pthread_mutex_unlock(&e->mu);
	return code;
}

int kvl__fail(kvl__err *e, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	kvl__vfail(e, code, fmt, ap);
	va_end(ap);
	return code;
}

const char *kvl__err_here(void)
{
	return here;
}

void kvl__err_here_clear(void)
{
	here[0] = '\0';
}

const char *kvl__err_get(const kvl__err *e)
{
	static _Thread_local char copy[KVL__ERRMSG_MAX];
	if (!e)
		return "";
	kvl__err *m = (kvl__err *)e; /* the mutex is not part of the value */
	pthread_mutex_lock(&m->mu);
	memcpy(copy, m->msg, sizeof copy);
	pthread_mutex_unlock(&m->mu);
	return copy;
}

int kvl__fail_buf(char *errbuf, size_t errlen, int code, const char *fmt, ...)
{
	if (errbuf && errlen > 0) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(errbuf, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}
