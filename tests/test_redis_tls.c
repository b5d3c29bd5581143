/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_redis_tls.c — rediss:// against real TLS servers: a TLS-only
 * redis-server and a TLS Redis Cluster of 3 masters (tls-cluster yes),
 * with a test CA, server and client certificates made by the openssl
 * command, all started on loopback ports by tests/redis/run.sh tls-both
 * (which this program runs itself under when started without it, and which
 * stops every server on exit). Servers with other settings (client
 * certificates required, a password, a plaintext server) are started by
 * tests/redis/servers.sh in the same directory.
 *
 * Covers: every operation over TLS, values far above 16 KiB (the in-place
 * receive path) and batches large enough that TLS writes and reads wait on
 * the socket; a cluster reached through one seed, so that the connections
 * to the other masters are opened from the slot map, over TLS; a slot
 * moved to another master (MOVED, then a new TLS connection); a server
 * restarted under an open store (reconnection, handshake again); a wrong
 * CA, a wrong server name, a plaintext client at a TLS port and a TLS
 * client at a plaintext port, each refused with KVL_EIO and a clear
 * message (none hangs: the ctest timeout catches that); client certificates
 * required by the server, with and without tls_cert/tls_key; a password
 * over TLS, which never appears in a message; option errors (missing
 * files, a key of another certificate, TLS options on redis://).
 *
 * Exits 77 (skipped) without redis-server or openssl, or in a build
 * without the Redis store.
 */
#include <errno.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/kvl_assert.h"
#include "support/shell.h"
#include "support/rand.h"
#include "support/stores.h"

#include "kvl_config.h"
#include "kvlink.h"

#if KVL_HAVE_REDIS
#include "store/redis/spec.h"
#endif

#if !KVL_HAVE_REDIS
int main(void)
{
	printf("skipped: this kvlink is built without hiredis (no redis://)\n");
	return 77;
}
#else

static const char *tls_dir;   /* the certificates */
static int tls_port;          /* the TLS standalone server */
static int cluster_ports[3];  /* the TLS cluster's masters */

/* ================================================================ helpers */

/* servers.sh CMD "$KVL_REDIS_DIR" ARGS: a port for the start commands. */
static int servers(const char *cmd, const char *args)
{
	char out[256];
	if (shell(out, sizeof out,
	          "bash \"$KVL_REDIS_SERVERS\" %s \"$KVL_REDIS_DIR\" %s", cmd,
	          args) != 0)
		fail_msg("servers.sh %s %s failed: %s", cmd, args, out);
	return atoi(out);
}

/* A TLS server's keys (redis-cli over TLS with the client certificate). */
static long long tls_dbsize(int port)
{
	char out[256];
	if (shell(out, sizeof out,
	          "redis-cli -h 127.0.0.1 -p %d --tls --cacert %s/ca.crt "
	          "--cert %s/client.crt --key %s/client.key dbsize",
	          port, tls_dir, tls_dir, tls_dir) != 0)
		fail_msg("redis-cli --tls -p %d dbsize failed: %s", port, out);
	return strtoll(out, NULL, 10);
}

/* redis-cli over TLS to port (the client certificate given): its output
 * into out; the exit status. */
static int tls_cli(char *out, size_t cap, int port, const char *args)
{
	return shell(out, cap,
	             "redis-cli -h 127.0.0.1 -p %d --tls --cacert %s/ca.crt "
	             "--cert %s/client.crt --key %s/client.key %s",
	             port, tls_dir, tls_dir, tls_dir, args);
}

/* The port (and node id into id, 64 bytes) of the master of `slot`, from
 * CLUSTER NODES on port; 0 when none serves it. */
static int slot_owner(int port, int slot, char *id)
{
	static char out[16384];
	if (tls_cli(out, sizeof out, port, "cluster nodes") != 0)
		fail_msg("cluster nodes on %d failed: %s", port, out);
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		char nid[64], addr[128];
		int at = 0;
		if (sscanf(line, "%63s %127s %*s %*s %*s %*s %*s %*s%n", nid,
		           addr, &at) != 2 || !at)
			continue;
		char *rest = line + at, *save = NULL;
		for (char *t = strtok_r(rest, " ", &save); t;
		     t = strtok_r(NULL, " ", &save)) {
			int lo, hi;
			int k = sscanf(t, "%d-%d", &lo, &hi);
			if (k == 1)
				hi = lo;
			if (k >= 1 && slot >= lo && slot <= hi) {
				if (id)
					snprintf(id, 64, "%s", nid);
				return atoi(strchr(addr, ':') + 1);
			}
		}
	}
	return 0;
}

/* rediss://[auth]127.0.0.1:port?tls_ca=<dir>/<ca>[&more] */
static const char *tls_uri(const char *auth, int port, const char *ca,
                           const char *more)
{
	static char buf[4][1024];
	static int at;
	char *b = buf[at++ % 4];
	snprintf(b, sizeof buf[0], "rediss://%s127.0.0.1:%d?tls_ca=%s/%s%s%s",
	         auth, port, tls_dir, ca, more[0] ? "&" : "", more);
	return b;
}

/* The client certificate options. */
static const char *client_cert(void)
{
	static char b[512];
	snprintf(b, sizeof b, "tls_cert=%s/client.crt&tls_key=%s/client.key",
	         tls_dir, tls_dir);
	return b;
}

/* Puts n keys "<tag>:<i>" of `len` bytes each in one batch, reads them
 * back whole and in two ranges, checks every byte, and removes them. */
static void round_trip(kvl_store *s, const char *tag, size_t n, size_t len)
{
	char (*names)[64] = calloc(n, sizeof *names);
	const char **keys = calloc(n, sizeof *keys);
	uint8_t *data = malloc(n * len), *back = malloc(n * len);
	kvl_iov *pc = calloc(n, sizeof *pc);
	kvl_range *rg = calloc(2 * n, sizeof *rg);
	size_t *cnt = calloc(n, sizeof *cnt);
	int *res = calloc(n, sizeof *res);
	assert_true(names && keys && data && back && pc && rg && cnt && res);
	for (size_t i = 0; i < n; i++) {
		snprintf(names[i], sizeof names[i], "kvl-tls-test:%s:%d:%zu",
		         tag, (int)getpid(), i);
		keys[i] = names[i];
		fill_pattern(data + i * len, len, 0x7157 + i * 31 + len);
		pc[i] = (kvl_iov){ data + i * len, len };
		cnt[i] = 1;
	}
	ASSERT_RC(s, kvl_store_put(s, keys, n, pc, cnt, res), 0);
	for (size_t i = 0; i < n; i++)
		ASSERT_EQ_MSG(res[i], KVL_PUT_STORED, "put %s: %s", keys[i],
		              kvl_store_errmsg(s));
	ASSERT_RC(s, kvl_store_exists(s, keys, n, res), 0);
	for (size_t i = 0; i < n; i++)
		ASSERT_EQ_MSG(res[i], 1, "exists %s", keys[i]);

	/* Whole objects. */
	memset(back, 0xee, n * len);
	for (size_t i = 0; i < n; i++)
		rg[i] = (kvl_range){ 0, back + i * len, len };
	ASSERT_RC(s, kvl_store_get(s, keys, n, rg, cnt, res), 0);
	for (size_t i = 0; i < n; i++)
		ASSERT_EQ_MSG(res[i], 0, "get %s: %s", keys[i],
		              kvl_store_errmsg(s));
	ASSERT_TRUE_MSG(memcmp(back, data, n * len) == 0,
	                "%zu objects of %zu bytes came back different", n,
	                len);

	/* Two ranges per key, a gap between them. */
	memset(back, 0xee, n * len);
	for (size_t i = 0; i < n; i++) {
		size_t a = len / 3, b = len / 2;
		rg[2 * i] = (kvl_range){ 0, back + i * len, a };
		rg[2 * i + 1] = (kvl_range){ b, back + i * len + b, len - b };
		cnt[i] = 2;
	}
	ASSERT_RC(s, kvl_store_get(s, keys, n, rg, cnt, res), 0);
	for (size_t i = 0; i < n; i++) {
		size_t a = len / 3, b = len / 2;
		ASSERT_EQ_MSG(res[i], 0, "get ranges %s", keys[i]);
		ASSERT_TRUE(memcmp(back + i * len, data + i * len, a) == 0);
		ASSERT_TRUE(memcmp(back + i * len + b, data + i * len + b,
		                   len - b) == 0);
	}
	ASSERT_RC(s, kvl_store_remove(s, keys, n, res), 0);
	for (size_t i = 0; i < n; i++)
		ASSERT_EQ(res[i], 1);
	ASSERT_RC(s, kvl_store_exists(s, keys, n, res), 0);
	for (size_t i = 0; i < n; i++)
		ASSERT_EQ(res[i], 0);
	free(names);
	free(keys);
	free(data);
	free(back);
	free(pc);
	free(rg);
	free(cnt);
	free(res);
}

/* ================================================================ tests */

static void test_tls_ops(void **state)
{
	(void)state;
	kvl_store *s = open_ok(tls_uri("", tls_port, "ca.crt", ""));
	uint8_t v[5] = "hello", b[5] = { 0 };
	ASSERT_EQ(put1(s, "kvl-tls-test:small", v, 5), KVL_PUT_STORED);
	ASSERT_EQ(put1(s, "kvl-tls-test:small", v, 5), KVL_PUT_PRESENT);
	ASSERT_EQ(get1(s, "kvl-tls-test:small", 0, b, 5), 5);
	ASSERT_TRUE(memcmp(b, v, 5) == 0);
	ASSERT_EQ(get1(s, "kvl-tls-test:absent", 0, b, 5), KVL_ENOTFOUND);
	ASSERT_EQ(remove1(s, "kvl-tls-test:small"), 1);
	round_trip(s, "small", 100, 300);
	round_trip(s, "big", 4, 3u << 20);      /* far above 16 KiB */
	round_trip(s, "many", 256, 64u << 10);  /* 16 MiB in one batch */
	kvl_store_stats st = store_stats(s);
	ASSERT_U64(st.errors, 0);
	kvl_store_close(s);
}

static void test_tls_cluster(void **state)
{
	(void)state;
	/* One seed: the other masters are reached from the slot map. */
	char more[600];
	snprintf(more, sizeof more, "%s", client_cert());
	kvl_store *s = open_ok(tls_uri("", cluster_ports[0], "ca.crt", more));
	long long before[3];
	for (int i = 0; i < 3; i++)
		before[i] = tls_dbsize(cluster_ports[i]);
	char (*names)[64] = calloc(300, sizeof *names);
	const char **keys = calloc(300, sizeof *keys);
	uint8_t *data = malloc(300 * 20000);
	kvl_iov *pc = calloc(300, sizeof *pc);
	size_t *cnt = calloc(300, sizeof *cnt);
	int res[300];
	assert_true(names && keys && data && pc && cnt);
	for (size_t i = 0; i < 300; i++) {
		snprintf(names[i], sizeof names[i], "kvl-tls-cl:%d:%zu",
		         (int)getpid(), i);
		keys[i] = names[i];
		fill_pattern(data + i * 20000, 20000, i + 99);
		pc[i] = (kvl_iov){ data + i * 20000, 20000 };
		cnt[i] = 1;
	}
	ASSERT_RC(s, kvl_store_put(s, keys, 300, pc, cnt, res), 0);
	for (size_t i = 0; i < 300; i++)
		ASSERT_EQ_MSG(res[i], KVL_PUT_STORED, "put %s: %s", keys[i],
		              kvl_store_errmsg(s));
	for (int i = 0; i < 3; i++)
		ASSERT_TRUE_MSG(tls_dbsize(cluster_ports[i]) > before[i],
		                "master %d got none of the keys",
		                cluster_ports[i]);
	round_trip(s, "cluster", 64, 100000);
	ASSERT_RC(s, kvl_store_remove(s, keys, 300, res), 0);
	free(names);
	free(keys);
	free(data);
	free(pc);
	free(cnt);
	kvl_store_close(s);
}

/* A slot moved to another master while a store knows only its old one:
 * MOVED, then a connection to the new owner, over TLS. */
static void test_tls_moved(void **state)
{
	(void)state;
	char key[64], out[512], dst_id[64];
	int slot = -1, src = 0;
	/* A key of a slot that master 0 serves. */
	for (int i = 0; i < 100000 && src != cluster_ports[0]; i++) {
		snprintf(key, sizeof key, "kvl-tls-moved:{%d}:%d", i,
		         (int)getpid());
		slot = kvl__redis_key_slot(key, strlen(key));
		src = slot_owner(cluster_ports[0], slot, NULL);
	}
	ASSERT_EQ(src, cluster_ports[0]);
	int dst = cluster_ports[1];
	ASSERT_EQ(tls_cli(dst_id, sizeof dst_id, dst, "cluster myid"), 0);

	/* One seed, one key: the store has talked to master 0 only. */
	kvl_store *s = open_ok(tls_uri("", src, "ca.crt", client_cert()));
	ASSERT_EQ(put1(s, key, "before", 6), KVL_PUT_STORED);
	ASSERT_EQ(remove1(s, key), 1); /* an empty slot can be reassigned */
	char cmd[160];
	snprintf(cmd, sizeof cmd, "cluster setslot %d node %s", slot, dst_id);
	int order[3] = { dst, src, cluster_ports[2] };
	for (int m = 0; m < 3; m++)
		ASSERT_EQ_MSG(tls_cli(out, sizeof out, order[m], cmd), 0, "%s",
		              out);
	ASSERT_EQ(slot_owner(src, slot, NULL), dst);

	/* The store's map still names master 0: MOVED to master 1. */
	uint8_t big[40000], back[40000];
	fill_pattern(big, sizeof big, 77);
	ASSERT_EQ(put1(s, key, big, sizeof big), KVL_PUT_STORED);
	snprintf(cmd, sizeof cmd, "exists '%s'", key);
	ASSERT_EQ(tls_cli(out, sizeof out, dst, cmd), 0);
	ASSERT_EQ(atoi(out), 1);
	ASSERT_EQ(get1(s, key, 0, back, sizeof back), (long long)sizeof back);
	ASSERT_TRUE(memcmp(back, big, sizeof big) == 0);
	ASSERT_EQ(remove1(s, key), 1);
	kvl_store_close(s);
}

static void test_tls_restart(void **state)
{
	(void)state;
	int port = servers("tls-standalone", "");
	kvl_store *s = open_ok(tls_uri("", port, "ca.crt", ""));
	ASSERT_EQ(put1(s, "kvl-tls-test:r", "x", 1), KVL_PUT_STORED);
	char p[16];
	snprintf(p, sizeof p, "%d", port);
	servers("kill", p);
	servers("restart", p);
	/* The pooled connection is dead: a fresh one, a new handshake. */
	int r = exists1_rc(s, "kvl-tls-test:r");
	if (r < 0) /* the retry may meet the restart still under way */
		r = exists1_rc(s, "kvl-tls-test:r");
	ASSERT_EQ_MSG(r, 0, "%s", kvl_store_errmsg(s));
	ASSERT_EQ(put1(s, "kvl-tls-test:r", "x", 1), KVL_PUT_STORED);
	ASSERT_EQ(exists1(s, "kvl-tls-test:r"), 1);
	kvl_store_close(s);
}

static void test_tls_refused(void **state)
{
	(void)state;
	char uri[1024];
	/* A CA that did not sign the server's certificate. */
	open_fails(tls_uri("", tls_port, "other-ca.crt", ""), KVL_EIO,
	           "certificate verify failed");
	/* The certificate is for 127.0.0.1 and localhost only. */
	open_fails(tls_uri("", tls_port, "ca.crt",
	                   "tls_server_name=redis.example.com"),
	           KVL_EIO, "certificate verify failed: hostname mismatch");
	kvl_store_close(open_ok(tls_uri("", tls_port, "ca.crt",
	                                "tls_server_name=localhost")));
	/* A plaintext client at the TLS port: dropped at its first command. */
	snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", tls_port);
	open_fails(uri, KVL_EIO, "a TLS port? use rediss://");
	/* A TLS client at a plaintext server: no handshake. */
	int plain = servers("standalone", "");
	snprintf(uri, sizeof uri,
	         "rediss://127.0.0.1:%d?tls_ca=%s/ca.crt&connect_timeout_ms=300",
	         plain, tls_dir);
	open_fails(uri, KVL_EIO, "TLS handshake");
}

static void test_tls_client_cert(void **state)
{
	(void)state;
	int port = servers("tls-standalone", "--tls-auth-clients yes");
	kvl_store *s = open_ok(tls_uri("", port, "ca.crt", client_cert()));
	round_trip(s, "client-cert", 8, 40000);
	kvl_store_close(s);
	/* Without a client certificate the server drops the connection. */
	open_fails(tls_uri("", port, "ca.crt", ""), KVL_EIO,
	           "require a client certificate");
}

static void test_tls_password(void **state)
{
	(void)state;
	int port = servers("tls-standalone", "--requirepass tls-s3cret");
	kvl_store *s = open_ok(tls_uri(":tls-s3cret@", port, "ca.crt", ""));
	ASSERT_EQ(put1(s, "kvl-tls-test:pw", "x", 1), KVL_PUT_STORED);
	kvl_store_close(s);
	char eb[1024] = "";
	s = NULL;
	const char *uri = tls_uri("u:wr0ng-s3cret@", port, "ca.crt", "");
	ASSERT_CODE(kvl_store_open(uri, &s, eb, sizeof eb), KVL_EIO);
	ASSERT_CONTAINS(eb, "authentication failed");
	ASSERT_TRUE_MSG(!strstr(eb, "wr0ng-s3cret"), "message \"%s\" shows "
	                "the password", eb);
	/* A parse error after the password. */
	uri = tls_uri(":wr0ng-s3cret@", port, "ca.crt", "pool=x");
	ASSERT_CODE(kvl_store_open(uri, &s, eb, sizeof eb), KVL_EPARSE);
	ASSERT_TRUE_MSG(!strstr(eb, "wr0ng-s3cret"), "message \"%s\" shows "
	                "the password", eb);
	uri = tls_uri(":wr0ng-s3cret@", port, "ca.crt", "tls_ca=x");
	ASSERT_CODE(kvl_store_open(uri, &s, eb, sizeof eb), KVL_EPARSE);
	ASSERT_CONTAINS(eb, "rediss://:***@127.0.0.1:");
	ASSERT_TRUE_MSG(!strstr(eb, "wr0ng-s3cret"), "message \"%s\" shows "
	                "the password", eb);
}

static void test_tls_options(void **state)
{
	(void)state;
	char uri[1024];
	snprintf(uri, sizeof uri, "rediss://127.0.0.1:%d?tls_ca=%s/none.crt",
	         tls_port, tls_dir);
	open_fails(uri, KVL_EINVAL, "none.crt: cannot read");
	snprintf(uri, sizeof uri,
	         "rediss://127.0.0.1:%d?tls_ca=%s/ca.crt&tls_cert=%s/gone.crt",
	         tls_port, tls_dir, tls_dir);
	open_fails(uri, KVL_EINVAL, "tls_cert=");
	/* A file that is not a certificate. */
	snprintf(uri, sizeof uri, "rediss://127.0.0.1:%d?tls_ca=%s/ca.key",
	         tls_port, tls_dir);
	open_fails(uri, KVL_EINVAL, "no PEM CA certificate");
	/* The server's key with the client's certificate. */
	snprintf(uri, sizeof uri,
	         "rediss://127.0.0.1:%d?tls_ca=%s/ca.crt&tls_cert=%s/client.crt"
	         "&tls_key=%s/server.key",
	         tls_port, tls_dir, tls_dir, tls_dir);
	open_fails(uri, KVL_EINVAL, "mismatch");
	snprintf(uri, sizeof uri, "rediss://127.0.0.1:%d?tls_key=%s/client.key",
	         tls_port, tls_dir);
	open_fails(uri, KVL_EPARSE, "without tls_cert");
	snprintf(uri, sizeof uri, "redis://127.0.0.1:%d?tls_ca=%s/ca.crt",
	         tls_port, tls_dir);
	open_fails(uri, KVL_EPARSE, "use rediss://");
	ASSERT_EQ(kvl_has_feature("tls"), 1);
}

/* ================================================================= main */

int main(int argc, char **argv)
{
	(void)argc;
	if (!getenv("KVL_REDIS_DIR")) {
		/* Run again under the script that starts the servers. */
		execlp("bash", "bash", KVL_REDIS_RUN, "tls-both", argv[0],
		       (char *)NULL);
		fprintf(stderr, "test_redis_tls: cannot run %s: %s\n",
		        KVL_REDIS_RUN, strerror(errno));
		return 1;
	}
	const char *sa = getenv("KVL_REDIS_TLS_STANDALONE");
	const char *cl = getenv("KVL_REDIS_TLS_CLUSTER");
	tls_dir = getenv("KVL_REDIS_TLS");
	if (!sa || !cl || !tls_dir ||
	    sscanf(cl, "%d %d %d", &cluster_ports[0], &cluster_ports[1],
	           &cluster_ports[2]) != 3) {
		fprintf(stderr, "test_redis_tls: run me under tests/redis/run.sh "
		                "tls-both\n");
		return 1;
	}
	tls_port = atoi(strchr(sa, ':') + 1);

	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tls_ops),
		cmocka_unit_test(test_tls_cluster),
		cmocka_unit_test(test_tls_moved),
		cmocka_unit_test(test_tls_restart),
		cmocka_unit_test(test_tls_refused),
		cmocka_unit_test(test_tls_client_cert),
		cmocka_unit_test(test_tls_password),
		cmocka_unit_test(test_tls_options),
	};
	return cmocka_run_group_tests_name("redis_tls", tests, NULL, NULL);
}
#endif
