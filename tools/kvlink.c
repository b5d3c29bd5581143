/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvlink.c — entry point of the kvlink command-line tool: dispatches the
 * first argument to a subcommand.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kvlink.h"

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} commands[] = {
	{"hash", kvl_cmd_hash, "print the page hashes of a token list"},
	{"bench", kvl_cmd_bench, "offload, look up and load pages; report GB/s"},
	{"stat", kvl_cmd_stat, "print a store's counters"},
	{"replay", kvl_cmd_replay, "replay a request trace; report cache hit ratios"},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: kvlink COMMAND [OPTIONS]   (kvlink COMMAND --help)\n\n");
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\nkvlink %s\n", kvl_version());
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
	    !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("kvlink %s\n", kvl_version());
		return 0;
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "kvlink: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return 2;
}
