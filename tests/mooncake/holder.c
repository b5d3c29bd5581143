/* SPDX-License-Identifier: Apache-2.0 */
/*
 * holder.c — a Mooncake client that only contributes memory to the pool:
 * opens URI (a mooncake:// store with segment=SIZE), prints "ready", and
 * holds it until SIGTERM or SIGINT. tests/mooncake/run.sh starts it, so
 * that stored objects live in another process than the tests' own, which
 * can then lose their holder (kill it) as a real deployment can.
 */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "kvlink.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: holder mooncake://HOST:PORT?segment=SIZE\n");
		return 2;
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	kvl_store *s;
	char err[512];
	int rc = kvl_store_open(argv[1], &s, err, sizeof err);
	if (rc) {
		fprintf(stderr, "holder: %s: %s\n", kvl_err_name(rc), err);
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	while (!stop)
		pause();
	kvl_store_close(s);
	return 0;
}
