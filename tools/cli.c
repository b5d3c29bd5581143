/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli.c — helpers every subcommand of the kvlink tool shares (cli.h).
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cli.h"

int kvl_cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "kvlink %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 2;
}

const char *kvl_cli_uri(const char *uri, char *buf, size_t cap)
{
	kvl_uri_redact(uri, buf, cap); /* cut short when too long: fine */
	return buf;
}

int kvl_cli_parse_u64(const char *s, uint64_t *out)
{
	if (!s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}

uint64_t kvl_cli_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const char *kvl_cli_default_store(const char *fallback)
{
	const char *env = getenv("KVL_STORE");
	return env && *env ? env : fallback;
}

int kvl_cli_next_opt(const char *cmd, int argc, char **argv,
                     const struct option *opts, const char **arg)
{
	opterr = 0; /* the messages below name the command */
	int c = getopt_long(argc, argv, ":h", opts, NULL);
	*arg = optarg;
	if (c == ':')
		kvl_cli_usage_error(cmd, "%s needs a value", argv[optind - 1]);
	else if (c == '?')
		kvl_cli_usage_error(cmd, "unknown option '%s' (kvlink %s --help)",
		                    argv[optind - 1], cmd);
	return c == ':' || c == '?' ? KVL_CLI_BAD : c;
}
