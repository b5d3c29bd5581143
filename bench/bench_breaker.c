/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_breaker.c — what a store that is down costs the engine's calls,
 * with and without the store's circuit breaker.
 *
 * A down store that times out is modelled by the fault store
 * (fault.down=1 with fault.latency_ms=T: every call waits T ms, then
 * fails with KVL_EIO), or given with --uri (e.g. a paused redis-server
 * with ?timeout_ms=T). For breaker=0 (off) and the default breaker=3 it
 * runs --calls existence queries of 64 keys and prints the mean latency
 * of a call after the first three (which open the breaker) and the worst,
 * and the ratio of the means: off / on. Not a test.
 *
 * With --uri, --down CMD and --up CMD are shell commands run after the
 * store opened and answered once (e.g. "kill -STOP PID") and before it is
 * closed (e.g. "kill -CONT PID").
 *
 * --gap-ms G sleeps G ms (below 1000) between calls, as an engine's steps
 * would.
 *
 * Usage: bench_breaker [--latency-ms T] [--calls N] [--gap-ms G]
 *                      [--uri URI --down CMD --up CMD]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvlink.h"

#define KEYS 64

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *down_cmd, *up_cmd;
static int gap_ms; /* between calls: an engine's steps */

static void shell(const char *cmd)
{
	if (cmd && system(cmd) != 0)
		fprintf(stderr, "bench_breaker: '%s' failed\n", cmd);
}

/* Mean (after the first 3 calls) and worst seconds of `calls` existence
 * queries on `uri`, taken down (down_cmd) after one answered call. */
static void run(const char *uri, int calls, double *mean, double *worst)
{
	kvl_store *s;
	char err[512];
	if (kvl_store_open(uri, &s, err, sizeof err)) {
		fprintf(stderr, "bench_breaker: %s: %s\n", uri, err);
		exit(1);
	}
	char names[KEYS][16];
	const char *keys[KEYS];
	int res[KEYS];
	for (int i = 0; i < KEYS; i++) {
		snprintf(names[i], sizeof names[i], "bb/%d", i);
		keys[i] = names[i];
	}
	kvl_store_exists(s, keys, KEYS, res);
	shell(down_cmd);
	double sum = 0;
	*worst = 0;
	for (int c = 0; c < calls; c++) {
		double t0 = now_s();
		kvl_store_exists(s, keys, KEYS, res);
		double dt = now_s() - t0;
		if (c >= 3)
			sum += dt;
		if (gap_ms)
			nanosleep(&(struct timespec){0, gap_ms * 1000000L},
			          NULL);
		if (dt > *worst)
			*worst = dt;
	}
	*mean = calls > 3 ? sum / (calls - 3) : 0;
	shell(up_cmd);
	kvl_store_close(s);
}

int main(int argc, char **argv)
{
	int latency_ms = 50, calls = 200;
	const char *base = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--latency-ms") && i + 1 < argc)
			latency_ms = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--calls") && i + 1 < argc)
			calls = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--uri") && i + 1 < argc)
			base = argv[++i];
		else if (!strcmp(argv[i], "--gap-ms") && i + 1 < argc)
			gap_ms = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--down") && i + 1 < argc)
			down_cmd = argv[++i];
		else if (!strcmp(argv[i], "--up") && i + 1 < argc)
			up_cmd = argv[++i];
		else {
			fprintf(stderr, "usage: bench_breaker [--latency-ms T] "
			                "[--calls N] [--gap-ms G] [--uri URI "
			                "--down CMD "
			                "--up CMD]\n");
			return 2;
		}
	}
	if (calls < 4 || latency_ms < 0 || gap_ms < 0 || gap_ms >= 1000) {
		fprintf(stderr, "bench_breaker: --calls >= 4, --latency-ms "
		                ">= 0, 0 <= --gap-ms < 1000\n");
		return 2;
	}
	char model[128];
	snprintf(model, sizeof model,
	         "fault+mem:?fault.down=1&fault.latency_ms=%d", latency_ms);
	if (!base)
		base = model;
	const char *sep = strchr(base, '?') ? "&" : "?";
	double m[2], w[2];
	for (int on = 0; on < 2; on++) {
		char uri[1024];
		snprintf(uri, sizeof uri, "%s%sbreaker=%d", base, sep,
		         on ? 3 : 0);
		run(uri, calls, &m[on], &w[on]);
		printf("breaker=%d  %d calls of %d keys: mean after the "
		       "third %.4f ms, worst "
		       "%.3f ms\n",
		       on ? 3 : 0, calls, KEYS, m[on] * 1e3, w[on] * 1e3);
	}
	printf("store down (%s): a call costs %.0fx less with the breaker "
	       "(mean, off / on)\n",
	       base, m[0] / (m[1] > 0 ? m[1] : 1e-9));
	return 0;
}
