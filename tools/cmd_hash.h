/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd_hash.h — the token-list reader of `kvlink hash` (cmd_hash.c), callable
 * on its own: the command feeds it standard input, and the fuzz target
 * fuzz/fuzz_hash_tokens.c feeds it arbitrary bytes in arbitrary chunks.
 *
 * A token list is decimal token ids (0 to 2^64-1) separated by any mix of
 * spaces, commas, tabs, CR, LF, VT and FF. The reader hashes every whole page
 * (kvl_hash_pages, chained across batches) and writes one line of 64
 * lowercase hex characters per page to `out`; a trailing partial page is
 * ignored. A bad token (empty, negative, not decimal, above 2^64-1) stops
 * the input: the pages before it are written, a message naming the token,
 * its number and its line goes to `err`, and the status is 2.
 *
 * Status codes, as the command's exit status: 0 success, 1 failure (out of
 * memory, writing `out`), 2 bad input. Not thread-safe: one reader per
 * thread.
 */
#ifndef KVL_CMD_HASH_H
#define KVL_CMD_HASH_H

#include <stddef.h>
#include <stdio.h>

#include "kvlink.h"

typedef struct kvl_hash_input kvl_hash_input;

/* Starts a reader for pages of page_size (> 0) tokens, chained from `prior`
 * (NULL: none). batch_tokens: tokens held per hashing batch (rounded down to
 * whole pages, at least one page); 0 = the command's default (16384). The
 * output does not depend on it. out and err are borrowed until free.
 * [out] in: the reader (free with kvl_hash_input_free). Returns 0 or 1. */
int kvl_hash_input_open(size_t page_size, const kvl_hash *prior,
                        size_t batch_tokens, FILE *out, FILE *err,
                        kvl_hash_input **in);

/* Reads len bytes of the list (a token may span chunks). Returns 0 to go
 * on, or the status that stopped the input (1 or 2); once stopped, every
 * later feed and finish returns that status and reads nothing. */
int kvl_hash_input_feed(kvl_hash_input *in, const char *text, size_t len);

/* Ends the list: checks the last token and writes the remaining whole
 * pages. Returns the final status. */
int kvl_hash_input_finish(kvl_hash_input *in);

/* Frees the reader. NULL is a no-op. */
void kvl_hash_input_free(kvl_hash_input *in);

#endif /* KVL_CMD_HASH_H */
