/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_redis_slots.c — the parts of the redis:// store that need no server:
 * CRC16 key slots and hash tags (the Redis Cluster specification's
 * examples), redirection and retry errors, addresses, URI and option
 * errors (refused before any connection is made; TLS files read then),
 * credentials redacted from every message and by kvl_uri_redact, and a
 * server that is
 * down at open (a clear KVL_EIO at once). The server-backed tests are in
 * test_redis.c. Skips (77) in a build without hiredis.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/clock.h"
#include "support/kvl_assert.h"

#include "kvl_config.h"
#include "kvlink.h"

#if !KVL_HAVE_REDIS
int main(void)
{
	printf("skipped: this kvlink is built without hiredis (no redis://)\n");
	return 77;
}
#else

#include "store/redis/spec.h"

static uint16_t slot_of(const char *k)
{
	return kvl__redis_key_slot(k, strlen(k));
}

static void test_crc16_and_slots(void **state)
{
	(void)state;
	/* The specification's check value. */
	assert_int_equal(kvl__redis_crc16("123456789", 9), 0x31c3);
	assert_int_equal(kvl__redis_crc16("", 0), 0);
	/* CLUSTER KEYSLOT answers of a real server. */
	assert_int_equal(slot_of("foo"), 12182);
	assert_int_equal(slot_of("bar"), 5061);
	assert_int_equal(slot_of("hello"), 866);
	/* Hash tags, as in the specification. */
	assert_int_equal(slot_of("{user1000}.following"), slot_of("user1000"));
	assert_int_equal(slot_of("{user1000}.followers"), slot_of("user1000"));
	assert_int_equal(slot_of("foo{}{bar}"),
	                 kvl__redis_crc16("foo{}{bar}", 10) & 16383);
	assert_int_equal(slot_of("foo{{bar}}zap"), slot_of("{bar"));
	assert_int_equal(slot_of("foo{bar}{zap}"), slot_of("bar"));
	assert_int_equal(slot_of("{}"), kvl__redis_crc16("{}", 2) & 16383);
	assert_int_equal(slot_of("{"), kvl__redis_crc16("{", 1) & 16383);
	assert_int_equal(slot_of("a}b{c"), kvl__redis_crc16("a}b{c", 5) & 16383);
	/* A kvlink key has no braces: the whole key decides. */
	const char *k = "kvl1:m:0123456789abcdef0123456789abcdef:"
	                "ab:kv:tp0_cp0_pp0";
	assert_int_equal(slot_of(k), kvl__redis_crc16(k, strlen(k)) & 16383);
	/* Embedded NULs count (keys are length-delimited). */
	assert_int_not_equal(kvl__redis_key_slot("a\0b", 3),
	                     kvl__redis_key_slot("a", 1));
}

static void test_classify(void **state)
{
	char host[KVL__REDIS_HOST_MAX];
	uint16_t slot = 0;
	int port = 0;
	(void)state;

#define CLS(s) kvl__redis_classify(s, strlen(s), &slot, host, &port)
	assert_int_equal(CLS("MOVED 3999 127.0.0.1:6381"),
	                 KVL__REDIS_ERR_MOVED);
	assert_int_equal(slot, 3999);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 6381);
	assert_int_equal(CLS("ASK 16383 10.0.0.7:7002"), KVL__REDIS_ERR_ASK);
	assert_int_equal(slot, 16383);
	assert_string_equal(host, "10.0.0.7");
	assert_int_equal(port, 7002);
	/* An unknown endpoint: the host is empty, the caller fills it. */
	assert_int_equal(CLS("MOVED 0 :7000"), KVL__REDIS_ERR_MOVED);
	assert_string_equal(host, "");
	assert_int_equal(port, 7000);
	/* IPv6 endpoints are printed without brackets. */
	assert_int_equal(CLS("MOVED 12 ::1:7001"), KVL__REDIS_ERR_MOVED);
	assert_string_equal(host, "::1");
	assert_int_equal(port, 7001);
	/* Malformed redirections are plain errors. */
	assert_int_equal(CLS("MOVED 16384 h:1"), KVL__REDIS_ERR_OTHER);
	assert_int_equal(CLS("MOVED x h:1"), KVL__REDIS_ERR_OTHER);
	assert_int_equal(CLS("MOVED 1 h"), KVL__REDIS_ERR_OTHER);
	assert_int_equal(CLS("MOVED 1 h:0"), KVL__REDIS_ERR_OTHER);
	assert_int_equal(CLS("MOVED"), KVL__REDIS_ERR_OTHER);
	assert_int_equal(CLS("MOVEDX 1 h:1"), KVL__REDIS_ERR_OTHER);
	assert_int_equal(CLS("TRYAGAIN Multiple keys request during rehashing "
	                     "of slot"),
	                 KVL__REDIS_ERR_TRYAGAIN);
	assert_int_equal(CLS("CLUSTERDOWN The cluster is down"),
	                 KVL__REDIS_ERR_TRYAGAIN);
	assert_int_equal(CLS("LOADING Redis is loading the dataset in memory"),
	                 KVL__REDIS_ERR_TRYAGAIN);
	assert_int_equal(CLS("MASTERDOWN Link with MASTER is down"),
	                 KVL__REDIS_ERR_TRYAGAIN);
	assert_int_equal(CLS("READONLY You can't write against a read only "
	                     "replica."),
	                 KVL__REDIS_ERR_READONLY);
	assert_int_equal(CLS("OOM command not allowed when used memory > "
	                     "'maxmemory'."),
	                 KVL__REDIS_ERR_OOM);
	assert_int_equal(CLS("NOAUTH Authentication required."),
	                 KVL__REDIS_ERR_AUTH);
	assert_int_equal(CLS("WRONGPASS invalid username-password pair"),
	                 KVL__REDIS_ERR_AUTH);
	assert_int_equal(CLS("ERR unknown command"), KVL__REDIS_ERR_OTHER);
	assert_int_equal(CLS("WRONGTYPE Operation against a key"),
	                 KVL__REDIS_ERR_OTHER);
	assert_int_equal(CLS(""), KVL__REDIS_ERR_OTHER);
#undef CLS
}

static void test_parse_addr(void **state)
{
	char host[KVL__REDIS_HOST_MAX];
	int port = 0;
	(void)state;
#define ADDR(s) kvl__redis_parse_addr(s, strlen(s), host, &port)
	assert_int_equal(ADDR("127.0.0.1:7000"), 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 7000);
	assert_int_equal(ADDR("cache.example"), 0);
	assert_string_equal(host, "cache.example");
	assert_int_equal(port, 6379);
	assert_int_equal(ADDR("[::1]:7001"), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(port, 7001);
	assert_int_equal(ADDR("[fe80::1]"), 0);
	assert_string_equal(host, "fe80::1");
	assert_int_equal(port, 6379);
	assert_int_equal(ADDR("h:65535"), 0);
	assert_int_equal(ADDR("h:65536"), -1);
	assert_int_equal(ADDR("h:0"), -1);
	assert_int_equal(ADDR("h:"), -1);
	assert_int_equal(ADDR(":7000"), -1); /* no host */
	assert_int_equal(ADDR("[]:7000"), -1);
	assert_int_equal(ADDR(""), -1);
	assert_int_equal(kvl__redis_parse_addr("a\0b:1", 5, host, &port), -1);
	assert_int_equal(ADDR("a b:1"), -1);
	assert_int_equal(ADDR("h:12x"), -1);
	assert_int_equal(ADDR("[::1"), -1);
	assert_int_equal(ADDR("[::1]7000"), -1);
	char big[400];
	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	assert_int_equal(ADDR(big), -1);
#undef ADDR
}

/* A loopback port with nothing listening on it. */
static int closed_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof a;
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

static void test_uri_errors(void **state)
{
	static const struct {
		const char *uri;
		int code;
		const char *says;
	} cases[] = {
		{ "redis://", KVL_EPARSE, "no host" },
		{ "redis:", KVL_EPARSE, "no host" },
		{ "redis://127.0.0.1:0", KVL_EPARSE, "bad address" },
		{ "redis://127.0.0.1:99999", KVL_EPARSE, "bad address" },
		{ "redis://a:1,,b:2", KVL_EPARSE, "bad address" },
		{ "redis://[::1:7000", KVL_EPARSE, "bad address" },
		{ "redis://user@127.0.0.1:1", KVL_EPARSE, ":password" },
		{ "redis://:%zz@127.0.0.1:1", KVL_EPARSE, "escape" },
		{ "redis://127.0.0.1:1/x", KVL_EPARSE, "/DB" },
		{ "redis://127.0.0.1:1/2?db=3", KVL_EPARSE, "twice" },
		{ "redis://127.0.0.1:1?bogus=1", KVL_EPARSE, "'bogus'" },
		{ "redis://127.0.0.1:1?timeout_ms=0", KVL_EPARSE, "timeout" },
		{ "redis://127.0.0.1:1?connect_timeout_ms=x", KVL_EPARSE,
		  "connect_timeout_ms" },
		{ "redis://127.0.0.1:1?inflight=100", KVL_EPARSE, "inflight" },
		{ "redis://127.0.0.1:1?inflight=2XB", KVL_EPARSE, "inflight" },
		{ "redis://127.0.0.1:1?replicas=2", KVL_EPARSE, "replicas" },
		{ "redis://127.0.0.1:1?ttl=-1", KVL_EPARSE, "ttl" },
		{ "redis://127.0.0.1:1?pool=5000", KVL_EPARSE, "pool" },
		/* rediss:// is built in; its files are read before any
		 * connection. */
		{ "rediss://127.0.0.1:1?tls_ca=/nonexistent/ca.pem", KVL_EINVAL,
		  "tls_ca=/nonexistent/ca.pem: cannot read" },
		{ "rediss://127.0.0.1:1?tls_cert=/nonexistent/c.pem",
		  KVL_EINVAL, "tls_cert=/nonexistent/c.pem: cannot read" },
		{ "rediss://127.0.0.1:1?tls_key=/k.pem", KVL_EPARSE,
		  "without tls_cert" },
		{ "redis://127.0.0.1:1?tls_ca=/ca.pem", KVL_EPARSE,
		  "use rediss://" },
		{ "rediss://127.0.0.1:1?tls_bogus=1", KVL_EPARSE, "'tls_bogus'" },
		/* A '/' in a password cut the authority short: not shown. */
		{ "redis://:pa/ss@127.0.0.1:1", KVL_EPARSE, "%2F" },
	};
	(void)state;
	assert_int_equal(kvl_has_feature("redis"), 1);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char eb[512] = "";
		kvl_store *s = NULL;
		int rc = kvl_store_open(cases[i].uri, &s, eb, sizeof eb);
		if (rc != cases[i].code || !strstr(eb, cases[i].says))
			fail_msg("open(\"%s\") == %s \"%s\"; expected %s "
			         "saying \"%s\"",
			         cases[i].uri, kvl_err_name(rc), eb,
			         kvl_err_name(cases[i].code), cases[i].says);
		assert_null(s);
	}
}

/* kvl_uri_redact, and the messages of URIs that carry a password. */
static void test_redact(void **state)
{
	static const struct {
		const char *uri, *shown;
	} cases[] = {
		{ "redis://:s3cret@h:1", "redis://:***@h:1" },
		{ "redis://user:s3cret@h:1,h:2/3?ttl=5",
		  "redis://user:***@h:1,h:2/3?ttl=5" },
		{ "rediss://u:s3cret@h:1?tls_ca=/a@b/ca.pem",
		  "rediss://u:***@h:1?tls_ca=/a@b/ca.pem" },
		{ "redis://s3cret@h:1", "redis://***@h:1" },
		{ "redis://:pa/s3cret@h:1", "redis://:***@h:1" },
		{ "fault+redis://:s3cret@h:1?fault.seed=1",
		  "fault+redis://:***@h:1?fault.seed=1" },
		{ "redis://h:1?password=s3cret&ttl=1&tls_key_password=s3cret",
		  "redis://h:1?password=***&ttl=1&tls_key_password=***" },
		{ "redis://h:1", "redis://h:1" },
		{ "mem:?capacity=1G", "mem:?capacity=1G" },
		{ "", "" },
	};
	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char out[256];
		ASSERT_CODE(kvl_uri_redact(cases[i].uri, out, sizeof out), 0);
		if (strcmp(out, cases[i].shown))
			fail_msg("kvl_uri_redact(\"%s\") == \"%s\"; expected "
			         "\"%s\"",
			         cases[i].uri, out, cases[i].shown);
	}
	char small[8];
	ASSERT_CODE(kvl_uri_redact("redis://:s3cret@h:1", small, sizeof small),
	            KVL_ERANGE);
	ASSERT_EQ(strlen(small), 7);
	ASSERT_TRUE(!strstr(small, "s3c"));
	ASSERT_CODE(kvl_uri_redact(NULL, small, sizeof small), KVL_EINVAL);
	ASSERT_EQ(small[0], 0);
	ASSERT_CODE(kvl_uri_redact("mem:", NULL, 8), KVL_EINVAL);
	ASSERT_CODE(kvl_uri_redact("mem:", small, 0), KVL_EINVAL);

	/* Every message of a failed open shows the URI redacted. */
	static const char *const bad[] = {
		"redis://:s3cret@127.0.0.1:1?ttl",
		"redis://:s3cret@127.0.0.1:1?ttl=",
		"redis://:s3cret@127.0.0.1:1?ttl=1&ttl=2",
		"redis://:s3cret@127.0.0.1:1?=1",
		"redis://:s3cret@127.0.0.1:1?ttl=\x01",
		"redis://:s3cret@127.0.0.1:1/x",
		"redis://u:s3cret@127.0.0.1:1?bogus=1",
		"rediss://u:s3cret@127.0.0.1:1?tls_ca=/nonexistent",
		"redis://:s3/cret@127.0.0.1:1",
		"redis://u:s3cret@/",
		"redis://h:1?password=s3cret",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char eb[512] = "";
		kvl_store *s = NULL;
		int rc = kvl_store_open(bad[i], &s, eb, sizeof eb);
		assert_null(s);
		if (rc == 0 || !eb[0] || strstr(eb, "s3") || strstr(eb, "cret"))
			fail_msg("open(\"%s\") == %s \"%s\": expected a "
			         "failure whose message does not show the "
			         "password",
			         bad[i], kvl_err_name(rc), eb);
	}
	char eb[512] = "";
	kvl_store *s = NULL;
	kvl_store_open("redis://u:s3cret@127.0.0.1:1?ttl", &s, eb, sizeof eb);
	ASSERT_CONTAINS(eb, "redis://u:***@127.0.0.1:1?ttl");
}

static void test_down_at_open(void **state)
{
	(void)state;
	int port = closed_port();
	char uri[128], eb[512] = "", addr[64];
	kvl_store *s = NULL;
	snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", port);
	snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
	uint64_t t0 = now_ns();
	ASSERT_CODE(kvl_store_open(uri, &s, eb, sizeof eb), KVL_EIO);
	uint64_t t1 = now_ns();
	assert_null(s);
	ASSERT_CONTAINS(eb, "cannot");
	ASSERT_CONTAINS(eb, addr);
	ASSERT_CONTAINS(eb, "refused");
	/* How fast: bench_redis --failures; here only a hang fails. */
	double ms = (double)(t1 - t0) / 1e6;
	if (ms > HANG_MS)
		fail_msg("a refused connection took %.0f ms to report", ms);

	/* Every seed down: each is named. */
	int port2 = closed_port();
	snprintf(uri, sizeof uri, "redis://127.0.0.1:%d,127.0.0.1:%d", port,
	         port2);
	ASSERT_CODE(kvl_store_open(uri, &s, eb, sizeof eb), KVL_EIO);
	ASSERT_CONTAINS(eb, addr);
	snprintf(addr, sizeof addr, "127.0.0.1:%d", port2);
	ASSERT_CONTAINS(eb, addr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc16_and_slots),
		cmocka_unit_test(test_classify),
		cmocka_unit_test(test_parse_addr),
		cmocka_unit_test(test_uri_errors),
		cmocka_unit_test(test_redact),
		cmocka_unit_test(test_down_at_open),
	};
	return cmocka_run_group_tests_name("redis_slots", tests, NULL, NULL);
}
#endif
