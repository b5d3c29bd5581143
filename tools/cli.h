/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli.h — the subcommands of the kvlink tool and the helpers they share.
 * Each subcommand lives in its own cmd_<name>.c and returns the process exit
 * status: 0 success, 1 failure of the work, 2 bad usage.
 */
#ifndef KVL_CLI_H
#define KVL_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvlink.h"

int kvl_cmd_hash(int argc, char **argv);
int kvl_cmd_bench(int argc, char **argv);
int kvl_cmd_stat(int argc, char **argv);
int kvl_cmd_replay(int argc, char **argv);

/* Prints the stats of a linker (or, when lk is NULL, of a store) in `fmt`. */
int kvl_cli_print_stats(kvl_linker *lk, kvl_store *st, kvl_stats_format fmt);
/* The same text, malloc'ed (the caller frees it), or NULL with *rc. */
char *kvl_cli_render_stats(kvl_linker *lk, kvl_store *st,
                           kvl_stats_format fmt, int *rc);
/* "json" or "prometheus"/"prom" → *out; -1 for anything else. */
int kvl_cli_stats_format(const char *s, kvl_stats_format *out);

/* Prints "kvlink <cmd>: message" to stderr and returns 2 (usage) . */
int kvl_cli_usage_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Command-line options, the same way in every command (getopt_long: long
 * options, "--opt value" or "--opt=value", operands anywhere, "--" ends the
 * options): the next option's val ('h' for -h; *arg its value, or NULL),
 * -1 when none is left (operands from optind on), or KVL_CLI_BAD after
 * saying on stderr that an option is unknown or lacks its value (the
 * command then exits 2). Set optind = 1 before the first call. */
struct option;
#define KVL_CLI_BAD (-2)
int kvl_cli_next_opt(const char *cmd, int argc, char **argv,
                     const struct option *opts, const char **arg);

/* The store a command uses without --store: $KVL_STORE when set and not
 * empty (the environment over the default), else `fallback`. */
const char *kvl_cli_default_store(const char *fallback);

/* `uri` as the tool prints it: credentials redacted (kvl_uri_redact),
 * into buf (cap bytes); returns buf. */
const char *kvl_cli_uri(const char *uri, char *buf, size_t cap);

/* Parses an unsigned decimal integer that must fit in uint64_t; 0 or -1. */
int kvl_cli_parse_u64(const char *s, uint64_t *out);

/* A progress bar on stderr (progress.c): start, show after each step
 * (done of total `unit`s, an optional label such as the policy), end to
 * clear the line. Nothing when `on` is 0 (the tool turns it on for a
 * terminal, or when --progress asks). */
typedef struct kvl_cli_progress {
	int on;
	const char *unit;
	uint64_t t0_ns, shown_ns;
} kvl_cli_progress;
void kvl_cli_progress_start(kvl_cli_progress *p, int on, const char *unit);
void kvl_cli_progress_show(kvl_cli_progress *p, size_t done, size_t total,
                           const char *label);
void kvl_cli_progress_end(kvl_cli_progress *p);

/* One tier of a tier: store, as its stats render tells (tiers.c). */
typedef struct kvl_cli_tier {
	char uri[256]; /* redacted */
	uint64_t hits, failures, promotions, spills, spills_lost, objects,
	         evictions; /* UINT64_MAX: unknown */
	uint64_t read_bytes, read_ns; /* what its gets served, and took */
} kvl_cli_tier;
#define KVL_CLI_TIERS_MAX 8
/* The tiers of st into out (max at most): how many; 0 when st is not a
 * tier: store. */
size_t kvl_cli_tiers(kvl_store *st, kvl_cli_tier *out, size_t max);

/* Monotonic clock in nanoseconds. */
uint64_t kvl_cli_now_ns(void);

/* GPU memory for the benchmark (gpu_mem.c): allocations give NULL and
 * copies -1 without CUDA or a usable device. */
int kvl_cli_gpu_usable(void);
void *kvl_cli_gpu_alloc(size_t len);
void kvl_cli_gpu_free(void *p);
void *kvl_cli_pinned_alloc(size_t len);
void kvl_cli_pinned_free(void *p);
int kvl_cli_gpu_copy(void *dst, const void *src, size_t len);

#endif
