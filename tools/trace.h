/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace.h — Mooncake request traces for `kvlink replay` (trace.c): one
 * request per line, parsed strictly.
 *
 * Trace format (JSON Lines, one request per line):
 *   {"timestamp": 0, "input_length": 40160, "output_length": 6,
 *    "hash_ids": [0, 1, 2, ...]}
 * hash_ids are ids of prefix-chained blocks of --block-tokens (512) tokens:
 * equal ids mean equal blocks with equal prefixes. The parser below accepts
 * an object with each of the four fields once, in any order, with JSON
 * whitespace between tokens; input_length, output_length and hash_ids'
 * entries non-negative integers (no fraction, no exponent, no leading
 * zeros, at most 2^64-1; "-0" is 0), timestamp any non-negative number
 * (fractional milliseconds too); hash_ids with exactly
 * ceil(input_length / block_tokens) entries. Other fields (session_id,
 * model, …) are skipped, their values checked to be JSON (nested at most
 * 64 deep). Field names must be plain (no escapes). Blank lines are
 * skipped. Anything else stops the replay with "FILE:LINE: what"
 * and exit status 1, or, with --skip-bad, is counted and skipped.
 *
 */
#ifndef KVL_TOOL_TRACE_H
#define KVL_TOOL_TRACE_H

#include <stddef.h>
#include <stdint.h>

#define RP_SHOW_SKIPPED 10 /* messages of skipped lines printed, at most */

typedef struct rp_req {
	uint64_t input_len;
	size_t first; /* index of its first id in trace.ids */
	size_t n;     /* ids */
} rp_req;

typedef struct rp_trace {
	const char *path;
	rp_req *reqs;
	size_t n_reqs, cap_reqs;
	uint64_t *ids;
	size_t n_ids, cap_ids;
	size_t max_blocks;    /* most ids of one request */
	uint64_t input_tokens;
	uint64_t bad_lines;   /* skipped with --skip-bad */
} rp_trace;

/* A cursor over one line, and the first error found in it. */
typedef struct rp_parser {
	const char *p, *start, *end;
	char msg[256];
} rp_parser;

/* Parses one line into a request whose ids are appended to t->ids (and
 * dropped again on failure). 1: a request; 0: a blank line; -1: malformed
 * (jp->msg says why); -2: out of memory. */
int rp_trace_parse(rp_trace *t, const char *line, size_t len,
                   uint64_t block_tokens, rp_parser *jp, rp_req *out);

/* Reads the whole trace at `path` ("-": standard input), skipping (and
 * counting) malformed lines when skip_bad. 0, or 1 after printing why (a
 * malformed line without skip_bad, an unreadable file, no requests). */
int rp_trace_load(rp_trace *t, const char *path, uint64_t block_tokens,
                  int skip_bad);
void rp_trace_free(rp_trace *t);

#endif
