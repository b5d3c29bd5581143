/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_redis.c — kvlink's redis:// store against a plain pipelined hiredis
 * client, on the same servers, keys and object sizes.
 *
 * For each object size (64 KiB, 256 KiB, 1 MiB, 4 MiB by default) it
 * writes and reads a working set of --mib MiB in batches of about
 * --batch-mib MiB, best of --reps repetitions, interleaved:
 *   kvlink put   kvl_store_put of a batch (SET key value NX, the value sent
 *                from the caller's memory)
 *   plain put    per node: redisAppendCommandArgv("SET key value NX") for
 *                the node's keys of the batch, then redisGetReply for each
 *                (hiredis copies the value into its output buffer)
 *   kvlink get   kvl_store_get of whole objects into destination buffers
 *   plain get    per node: redisAppendCommandArgv("GET key"), then
 *                redisGetReply; "+copy" also copies each value to the same
 *                destination buffers (what a caller that needs the bytes in
 *                its own memory must do)
 * and prints GB/s and the ratios kvlink / plain (the target is >= 0.9).
 * Then, CPU only, the page codec's check of objects of each size (32
 * layers) on one core, unkeyed (XXH3-128) and keyed (a store secret:
 * Poly1305), measured in the same run (codec_bench.h), as ratios against
 * the kvlink get rate: above 1, verifying never limits a load.
 * With --tls-uri (default $KVL_TEST_TLS_STORE_URI, which tests/redis/run.sh
 * standalone+tls sets) it also runs kvlink's put and get over rediss://
 * against a TLS server of the same kind, in the same repetitions:
 *   tls put, tls get   as kvlink put / get, over TLS (keys removed first,
 *                      untimed)
 * and prints them with the ratios TLS / plaintext.
 * The plain client is what hiredis users write: one blocking context per
 * node, nodes served one after another; on a cluster it routes keys by
 * CRC16 slot like kvlink does (with the map read from CLUSTER SLOTS once).
 * Before each put measurement every key is deleted (untimed).
 *
 * Usage: bench_redis --uri redis://HOST:PORT[,HOST:PORT…] [--mib N]
 *                    [--batch-mib N] [--reps N] [--sizes K,K,…] [--json]
 *                    [--tls-uri rediss://HOST:PORT…?tls_ca=…]
 * The URI may carry kvlink options (?inflight=4MiB…); the plain client uses
 * its hosts only (no password support). Not a test.
 *
 * bench_redis --failures [--reps N] [--json], under tests/redis/run.sh
 * standalone (which starts a throwaway server and says how to kill, pause
 * and restart it), measures instead how long failures take to report and
 * to heal, in ms, best and worst of N rounds (the tests only check that
 * none of them hangs):
 *   refused     open of a port nobody listens on, to KVL_EIO
 *   killed      get from a killed server, to KVL_EIO; then the next call
 *               (the node is marked down); restarted: until a put succeeds
 *   paused      get from a paused server (timeout_ms=300), to KVL_EIO;
 *               the next call; resumed: until a get succeeds
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvl_config.h"
#include "kvlink.h"

#if !KVL_HAVE_REDIS
int main(void)
{
	fprintf(stderr, "bench_redis: this kvlink is built without hiredis "
	                "(no redis:// store)\n");
	return 77;
}
#else

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "store/redis/spec.h"

#include "bench_args.h"
#include "codec_bench.h"

#define MAX_NODES 64
#define KEY_MAX 64

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *fmt, const char *a, const char *b)
{
	fprintf(stderr, "bench_redis: ");
	fprintf(stderr, fmt, a, b);
	fprintf(stderr, "\n");
	exit(1);
}

/* ------------------------------------------------------ the plain client */

typedef struct plain {
	int n;
	redisContext *ctx[MAX_NODES];
	char host[MAX_NODES][KVL__REDIS_HOST_MAX];
	int port[MAX_NODES];
	int cluster;
	uint8_t slot_node[KVL__REDIS_SLOTS];
} plain;

static int plain_node(plain *p, const char *host, int port)
{
	for (int i = 0; i < p->n; i++)
		if (p->port[i] == port && strcmp(p->host[i], host) == 0)
			return i;
	if (p->n == MAX_NODES)
		die("more than %s%s nodes", "64", "");
	struct timeval tv = { 5, 0 };
	redisContext *c = redisConnectWithTimeout(host, port, tv);
	if (!c || c->err)
		die("cannot connect to %s: %s", host, c ? c->errstr : "");
	snprintf(p->host[p->n], KVL__REDIS_HOST_MAX, "%s", host);
	p->port[p->n] = port;
	p->ctx[p->n] = c;
	return p->n++;
}

static void plain_open(plain *p, const char *uri)
{
	memset(p, 0, sizeof *p);
	const char *h = strstr(uri, "://");
	h = h ? h + 3 : uri;
	const char *at = strchr(h, '@');
	if (at)
		h = at + 1;
	size_t len = strcspn(h, ",/?");
	char host[KVL__REDIS_HOST_MAX];
	int port;
	if (kvl__redis_parse_addr(h, len, host, &port) < 0)
		die("bad address in %s%s", uri, "");
	int seed = plain_node(p, host, port);
	redisReply *r = redisCommand(p->ctx[seed], "INFO cluster");
	p->cluster = r && r->type == REDIS_REPLY_STRING &&
	             strstr(r->str, "cluster_enabled:1");
	freeReplyObject(r);
	if (!p->cluster)
		return;
	r = redisCommand(p->ctx[seed], "CLUSTER SLOTS");
	if (!r || r->type != REDIS_REPLY_ARRAY)
		die("CLUSTER SLOTS failed on %s%s", host, "");
	for (size_t i = 0; i < r->elements; i++) {
		redisReply *e = r->element[i];
		redisReply *m = e->element[2];
		const char *mh = m->element[0]->str[0] ? m->element[0]->str : host;
		int id = plain_node(p, mh, (int)m->element[1]->integer);
		for (long long s = e->element[0]->integer;
		     s <= e->element[1]->integer; s++)
			p->slot_node[s] = (uint8_t)id;
	}
	freeReplyObject(r);
}

static int plain_route(const plain *p, const char *key)
{
	return p->cluster ? p->slot_node[kvl__redis_key_slot(key, strlen(key))]
	                  : 0;
}

static void plain_close(plain *p)
{
	for (int i = 0; i < p->n; i++)
		redisFree(p->ctx[i]);
}

/* One pipelined batch: SET NX (put), GET (get, copy: values copied to
 * dst + i * size), or DEL; nodes one after another. */
enum { P_PUT, P_GET, P_DEL };
static void plain_batch(plain *p, int what, char (*keys)[KEY_MAX], size_t n,
                        const char *val, size_t size, char *dst, int copy)
{
	for (int nd = 0; nd < p->n; nd++) {
		redisContext *c = p->ctx[nd];
		size_t sent = 0;
		for (size_t i = 0; i < n; i++) {
			if (plain_route(p, keys[i]) != nd)
				continue;
			const char *argv[4];
			size_t lens[4];
			int argc;
			if (what == P_PUT) {
				argv[0] = "SET"; lens[0] = 3;
				argv[1] = keys[i]; lens[1] = strlen(keys[i]);
				argv[2] = val; lens[2] = size;
				argv[3] = "NX"; lens[3] = 2;
				argc = 4;
			} else {
				argv[0] = what == P_GET ? "GET" : "DEL";
				lens[0] = 3;
				argv[1] = keys[i]; lens[1] = strlen(keys[i]);
				argc = 2;
			}
			redisAppendCommandArgv(c, argc, argv, lens);
			sent++;
		}
		size_t got = 0;
		for (size_t i = 0; i < n && got < sent; i++) {
			if (plain_route(p, keys[i]) != nd)
				continue;
			redisReply *r = NULL;
			if (redisGetReply(c, (void **)&r) != REDIS_OK || !r)
				die("plain client: %s%s", c->errstr, "");
			if (r->type == REDIS_REPLY_ERROR)
				die("plain client: %s%s", r->str, "");
			if (what == P_GET && copy && r->type == REDIS_REPLY_STRING)
				memcpy(dst + i * size, r->str, r->len);
			freeReplyObject(r);
			got++;
		}
	}
}

/* ------------------------------------------------------------ failures */

enum { F_REFUSED, F_KILLED, F_KILLED_NEXT, F_RESTARTED, F_PAUSED,
       F_PAUSED_NEXT, F_RESUMED, F_N };
static const char *const f_names[F_N] = {
	"refused", "killed", "killed_next", "restarted", "paused",
	"paused_next", "resumed"};

static double ms_since(double t)
{
	return (now_s() - t) * 1e3;
}

/* Runs tests/redis/servers.sh ACTION on the standalone server. */
static void server(const char *action, int port)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "bash '%s' %s '%s' %d >/dev/null 2>&1",
	         getenv("KVL_REDIS_SERVERS"), action, getenv("KVL_REDIS_DIR"),
	         port);
	if (system(cmd) != 0)
		die("%s failed%s", cmd, "");
}

/* A loopback port nobody listens on (bound, then closed). */
static int closed_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET,
		                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) ||
	    getsockname(fd, (struct sockaddr *)&a, &len))
		die("cannot find a closed port%s%s", "", "");
	close(fd);
	return ntohs(a.sin_port);
}

static int get_one(kvl_store *s, const char *key, char *buf, size_t len)
{
	kvl_range r = { 0, buf, len };
	size_t one = 1;
	int res = -1000;
	if (kvl_store_get(s, &key, 1, &r, &one, &res) != 0)
		return -1000;
	return res;
}

static int put_one(kvl_store *s, const char *key, const char *val, size_t len)
{
	kvl_iov v = { (void *)val, len };
	size_t one = 1;
	int res = -1000;
	if (kvl_store_put(s, &key, 1, &v, &one, &res) != 0)
		return -1000;
	return res;
}

/* One round: F_N times in ms. */
static void failure_round(int port, double *ms)
{
	char uri[256], err[512], buf[64] = { 0 };
	kvl_store *s;
	double t;

	snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", closed_port());
	t = now_s();
	if (kvl_store_open(uri, &s, err, sizeof err) != KVL_EIO)
		die("open of a closed port: not KVL_EIO: %s%s", err, "");
	ms[F_REFUSED] = ms_since(t);

	snprintf(uri, sizeof uri, "redis://127.0.0.1:%d?timeout_ms=300", port);
	if (kvl_store_open(uri, &s, err, sizeof err))
		die("kvl_store_open: %s%s", err, "");
	put_one(s, "bench_redis:f", buf, sizeof buf);
	server("kill", port);
	t = now_s();
	if (get_one(s, "bench_redis:f", buf, sizeof buf) != KVL_EIO)
		die("get from a killed server: not KVL_EIO: %s%s",
		    kvl_store_errmsg(s), "");
	ms[F_KILLED] = ms_since(t);
	t = now_s();
	get_one(s, "bench_redis:f", buf, sizeof buf);
	ms[F_KILLED_NEXT] = ms_since(t);
	server("restart", port);
	t = now_s();
	while (put_one(s, "bench_redis:f", buf, sizeof buf) < 0) {
		if (ms_since(t) > 60000)
			die("not served 60 s after the restart%s%s", "", "");
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	ms[F_RESTARTED] = ms_since(t);

	server("pause", port);
	t = now_s();
	if (get_one(s, "bench_redis:f", buf, sizeof buf) != KVL_EIO)
		die("get from a paused server: not KVL_EIO: %s%s",
		    kvl_store_errmsg(s), "");
	ms[F_PAUSED] = ms_since(t);
	t = now_s();
	get_one(s, "bench_redis:f", buf, sizeof buf);
	ms[F_PAUSED_NEXT] = ms_since(t);
	server("resume", port);
	t = now_s();
	while (get_one(s, "bench_redis:f", buf, sizeof buf) != 0) {
		if (ms_since(t) > 60000)
			die("not served 60 s after the resume%s%s", "", "");
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	ms[F_RESUMED] = ms_since(t);
	kvl_store_close(s);
}

static int failures(int reps, int json)
{
	const char *sa = getenv("KVL_REDIS_STANDALONE");
	const char *colon = sa ? strrchr(sa, ':') : NULL;
	if (!colon || !getenv("KVL_REDIS_SERVERS") || !getenv("KVL_REDIS_DIR"))
		die("--failures runs under tests/redis/run.sh standalone%s%s",
		    "", "");
	int port = atoi(colon + 1);
	double lo[F_N], hi[F_N];
	for (int i = 0; i < F_N; i++) {
		lo[i] = 1e300;
		hi[i] = 0;
	}
	for (int r = 0; r < reps; r++) {
		double ms[F_N];
		failure_round(port, ms);
		for (int i = 0; i < F_N; i++) {
			if (ms[i] < lo[i])
				lo[i] = ms[i];
			if (ms[i] > hi[i])
				hi[i] = ms[i];
		}
	}
	if (json) {
		printf("{\"rounds\":%d", reps);
		for (int i = 0; i < F_N; i++)
			printf(",\"%s_ms\":[%.1f,%.1f]", f_names[i], lo[i],
			       hi[i]);
		printf("}\n");
		return 0;
	}
	printf("bench_redis --failures: standalone server 127.0.0.1:%d, "
	       "timeout_ms=300, %d round%s; ms, best-worst\n",
	       port, reps, reps == 1 ? "" : "s");
	for (int i = 0; i < F_N; i++)
		printf("  %-12s %8.1f - %8.1f\n", f_names[i], lo[i], hi[i]);
	return 0;
}

/* ---------------------------------------------------------------- main */

typedef struct result {
	double put_k, put_p, get_k, get_p, get_pc; /* GB/s, best */
	double put_t, get_t;                       /* over TLS */
} result;

int main(int argc, char **argv)
{
	const char *uri = NULL, *tls_uri = NULL;
	size_t mib = 256, batch_mib = 32;
	int reps = 3, json = 0;
	size_t sizes[16] = { 64 << 10, 256 << 10, 1 << 20, 4 << 20 };
	int n_sizes = 4, fail_mode = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--failures"))
			fail_mode = 1;
		else if (!strcmp(argv[i], "--uri") && i + 1 < argc)
			uri = argv[++i];
		else if (!strcmp(argv[i], "--tls-uri") && i + 1 < argc)
			tls_uri = argv[++i];
		else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
			mib = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--batch-mib") && i + 1 < argc)
			batch_mib = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--sizes") && i + 1 < argc &&
		         (n_sizes = bench_sizes(argv[++i], sizes, 16)) >= 0)
			continue; /* a malformed list falls to the usage */
		else {
			fprintf(stderr,
			        "usage: bench_redis --uri redis://HOST:PORT[,…] "
			        "[--mib N] [--batch-mib N] [--reps N] "
			        "[--sizes 64K,1M,…] [--json] "
			        "[--tls-uri rediss://…]\n"
			        "       bench_redis --failures [--reps N] "
			        "[--json]   (under tests/redis/run.sh "
			        "standalone)\n");
			return 2;
		}
	}
	if (fail_mode)
		return failures(reps < 1 ? 1 : reps, json);
	if (!uri)
		uri = getenv("KVL_TEST_STORE_URI");
	if (!uri)
		die("give --uri redis://HOST:PORT%s%s", "", "");
	if (reps < 1)
		reps = 1;

	char err[512];
	kvl_store *s;
	int rc = kvl_store_open(uri, &s, err, sizeof err);
	if (rc)
		die("kvl_store_open: %s%s", err, "");
	if (!tls_uri)
		tls_uri = getenv("KVL_TEST_TLS_STORE_URI");
	kvl_store *ts = NULL;
	if (tls_uri && kvl_store_open(tls_uri, &ts, err, sizeof err))
		die("kvl_store_open(--tls-uri): %s%s", err, "");
	plain p;
	plain_open(&p, uri);
	char shown[512], tshown[512];
	kvl_uri_redact(uri, shown, sizeof shown);
	kvl_uri_redact(tls_uri ? tls_uri : "", tshown, sizeof tshown);
	if (!json)
		printf("bench_redis: %s (%s, %d node%s for the plain client), "
		       "%zu MiB per size, batches of ~%zu MiB, best of %d\n",
		       shown, p.cluster ? "cluster" : "standalone", p.n,
		       p.n == 1 ? "" : "s", mib, batch_mib, reps);
	if (!json && ts)
		printf("over TLS: %s\n", tshown);
	if (!json)
		printf("GB/s; kvl = kvlink, hir = plain hiredis, ratio = "
		       "kvl / hir%s\n%8s %6s | %7s %7s %6s | %7s %7s %8s %6s "
		       "%6s",
		       ts ? "; tls = kvlink over TLS, t/k = tls / kvl" : "",
		       "size", "objs", "put kvl", "put hir", "ratio", "get kvl",
		       "get hir", "hir+copy", "ratio", "r+copy");
	if (!json)
		printf(ts ? " | %7s %5s %7s %5s\n" : "\n", "put tls", "t/k",
		       "get tls", "t/k");

	double get_gbs[16] = {0};
	for (int si = 0; si < n_sizes; si++) {
		size_t size = sizes[si];
		size_t n = (mib << 20) / size;
		if (n < 8)
			n = 8;
		size_t batch = (batch_mib << 20) / size;
		if (batch < 1)
			batch = 1;
		if (batch > n)
			batch = n;
		char (*keys)[KEY_MAX] = malloc(n * sizeof *keys);
		const char **kp = malloc(n * sizeof *kp);
		char *val = malloc(size);
		char *dst = malloc(batch * size);
		kvl_iov *iov = malloc(batch * sizeof *iov);
		kvl_range *rg = malloc(batch * sizeof *rg);
		size_t *cnt = malloc(batch * sizeof *cnt);
		int *res = malloc(batch * sizeof *res);
		int *res64 = malloc(batch * sizeof *res64);
		if (!keys || !kp || !val || !dst || !iov || !rg || !cnt ||
		    !res || !res64)
			die("out of memory%s%s", "", "");
		for (size_t i = 0; i < size; i++)
			val[i] = (char)(i * 131 + size);
		memset(dst, 1, batch * size);
		for (size_t i = 0; i < n; i++) {
			snprintf(keys[i], KEY_MAX, "bench_redis:%zu:%zu", size,
			         i);
			kp[i] = keys[i];
		}
		for (size_t i = 0; i < batch; i++) {
			iov[i] = (kvl_iov){ val, size };
			rg[i] = (kvl_range){ 0, dst + i * size, size };
			cnt[i] = 1;
		}
		result best = { 0 };
		double bytes = (double)n * (double)size;
		for (int rep = 0; rep < reps; rep++) {
			double t;
			/* put, kvlink */
			for (size_t b = 0; b < n; b += batch)
				plain_batch(&p, P_DEL, keys + b,
				            n - b < batch ? n - b : batch, NULL, 0,
				            NULL, 0);
			t = now_s();
			for (size_t b = 0; b < n; b += batch) {
				size_t m = n - b < batch ? n - b : batch;
				if (kvl_store_put(s, kp + b, m, iov, cnt, res))
					die("put: %s%s", kvl_store_errmsg(s), "");
				for (size_t i = 0; i < m; i++)
					if (res[i] != KVL_PUT_STORED)
						die("put: %s (%s)",
						    kvl_err_name(res[i]),
						    kvl_store_errmsg(s));
			}
			t = bytes / (now_s() - t) / 1e9;
			if (t > best.put_k)
				best.put_k = t;
			/* put, plain */
			for (size_t b = 0; b < n; b += batch)
				plain_batch(&p, P_DEL, keys + b,
				            n - b < batch ? n - b : batch, NULL, 0,
				            NULL, 0);
			t = now_s();
			for (size_t b = 0; b < n; b += batch)
				plain_batch(&p, P_PUT, keys + b,
				            n - b < batch ? n - b : batch, val,
				            size, NULL, 0);
			t = bytes / (now_s() - t) / 1e9;
			if (t > best.put_p)
				best.put_p = t;
			/* get, kvlink */
			t = now_s();
			for (size_t b = 0; b < n; b += batch) {
				size_t m = n - b < batch ? n - b : batch;
				if (kvl_store_get(s, kp + b, m, rg, cnt, res64))
					die("get: %s%s", kvl_store_errmsg(s), "");
				for (size_t i = 0; i < m; i++)
					if (res64[i] != 0)
						die("get: %s (%s)",
						    kvl_err_name(res64[i]),
						    kvl_store_errmsg(s));
			}
			t = bytes / (now_s() - t) / 1e9;
			if (t > best.get_k)
				best.get_k = t;
			if (memcmp(dst, val, size) != 0)
				die("get: wrong bytes%s%s", "", "");
			/* put and get, kvlink over TLS */
			if (ts) {
				for (size_t b = 0; b < n; b += batch)
					kvl_store_remove(ts, kp + b,
					                 n - b < batch ? n - b :
					                                 batch,
					                 res);
				t = now_s();
				for (size_t b = 0; b < n; b += batch) {
					size_t m = n - b < batch ? n - b : batch;
					if (kvl_store_put(ts, kp + b, m, iov, cnt,
					                  res))
						die("tls put: %s%s",
						    kvl_store_errmsg(ts), "");
					for (size_t i = 0; i < m; i++)
						if (res[i] != KVL_PUT_STORED)
							die("tls put: %s (%s)",
							    kvl_err_name(res[i]),
							    kvl_store_errmsg(ts));
				}
				t = bytes / (now_s() - t) / 1e9;
				if (t > best.put_t)
					best.put_t = t;
				memset(dst, 1, batch * size);
				t = now_s();
				for (size_t b = 0; b < n; b += batch) {
					size_t m = n - b < batch ? n - b : batch;
					if (kvl_store_get(ts, kp + b, m, rg, cnt,
					                  res64))
						die("tls get: %s%s",
						    kvl_store_errmsg(ts), "");
					for (size_t i = 0; i < m; i++)
						if (res64[i] != 0)
							die("tls get: %s (%s)",
							    kvl_err_name(res64[i]),
							    kvl_store_errmsg(ts));
				}
				t = bytes / (now_s() - t) / 1e9;
				if (t > best.get_t)
					best.get_t = t;
				if (memcmp(dst, val, size) != 0)
					die("tls get: wrong bytes%s%s", "", "");
			}
			/* get, plain, without and with the copy */
			for (int copy = 0; copy < 2; copy++) {
				t = now_s();
				for (size_t b = 0; b < n; b += batch)
					plain_batch(&p, P_GET, keys + b,
					            n - b < batch ? n - b : batch,
					            NULL, size, dst, copy);
				t = bytes / (now_s() - t) / 1e9;
				double *slot = copy ? &best.get_pc : &best.get_p;
				if (t > *slot)
					*slot = t;
			}
		}
		for (size_t b = 0; b < n; b += batch) {
			size_t m = n - b < batch ? n - b : batch;
			plain_batch(&p, P_DEL, keys + b, m, NULL, 0, NULL, 0);
			if (ts)
				kvl_store_remove(ts, kp + b, m, res);
		}
		get_gbs[si] = best.get_k;
		if (json) {
			printf("{\"size\":%zu,\"objects\":%zu,\"put_kvlink_gbs\":"
			       "%.3f,\"put_plain_gbs\":%.3f,\"get_kvlink_gbs\":"
			       "%.3f,\"get_plain_gbs\":%.3f,"
			       "\"get_plain_copy_gbs\":%.3f,\"put_ratio\":%.3f,"
			       "\"get_ratio\":%.3f,\"get_ratio_copy\":%.3f",
			       size, n, best.put_k, best.put_p, best.get_k,
			       best.get_p, best.get_pc, best.put_k / best.put_p,
			       best.get_k / best.get_p, best.get_k / best.get_pc);
			if (ts)
				printf(",\"put_tls_gbs\":%.3f,\"get_tls_gbs\":"
				       "%.3f,\"put_tls_ratio\":%.3f,"
				       "\"get_tls_ratio\":%.3f",
				       best.put_t, best.get_t,
				       best.put_t / best.put_k,
				       best.get_t / best.get_k);
			printf("}\n");
		} else {
			printf("%5zuKiB %6zu | %7.2f %7.2f %6.2f | %7.2f %7.2f "
			       "%8.2f %6.2f %6.2f",
			       size >> 10, n, best.put_k, best.put_p,
			       best.put_k / best.put_p, best.get_k, best.get_p,
			       best.get_pc, best.get_k / best.get_p,
			       best.get_k / best.get_pc);
			if (ts)
				printf(" | %7.2f %5.2f %7.2f %5.2f", best.put_t,
				       best.put_t / best.put_k, best.get_t,
				       best.get_t / best.get_k);
			printf("\n");
		}
		fflush(stdout);
		free(keys);
		free(kp);
		free(val);
		free(dst);
		free(iov);
		free(rg);
		free(cnt);
		free(res);
		free(res64);
	}
	/* Verification on one core against the get rates above. */
	if (!json)
		printf("\nverify (one core, 32-layer objects): GB/s; ratio = "
		       "verify / get kvl\n%8s | %7s %7s | %7s %7s\n", "size",
		       "unkeyed", "keyed", "r unkey", "r keyed");
	for (int si = 0; si < n_sizes; si++) {
		size_t size = sizes[si];
		codec_bench_result r = codec_bench_verify(size / 32, 32, 0.6);
		double g = get_gbs[si] > 0 ? get_gbs[si] : 1e-9;
		if (json)
			printf("{\"size\":%zu,\"verify_unkeyed_gbs\":%.3f,"
			       "\"verify_keyed_gbs\":%.3f,"
			       "\"verify_keyed_vs_unkeyed\":%.3f,"
			       "\"verify_unkeyed_vs_get\":%.3f,"
			       "\"verify_keyed_vs_get\":%.3f}\n",
			       size, r.unkeyed_gbs, r.keyed_gbs,
			       r.unkeyed_gbs ? r.keyed_gbs / r.unkeyed_gbs : 0,
			       r.unkeyed_gbs / g, r.keyed_gbs / g);
		else
			printf("%5zuKiB | %7.2f %7.2f | %7.2f %7.2f\n",
			       size >> 10, r.unkeyed_gbs, r.keyed_gbs,
			       r.unkeyed_gbs / g, r.keyed_gbs / g);
		fflush(stdout);
	}
	plain_close(&p);
	kvl_store_close(s);
	kvl_store_close(ts);
	return 0;
}
#endif
