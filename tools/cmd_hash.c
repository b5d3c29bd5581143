/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd_hash.c — `kvlink hash`: prints the page hashes of a token list.
 *
 * Tokens come from the arguments or, when there are none, from standard
 * input, separated by any mix of whitespace and commas. Input is streamed:
 * tokens are gathered into batches of whole pages (at most max(page_size,
 * HASH_BATCH_TOKENS) tokens are held) and each batch is hashed with the last
 * hash of the one before as its prior, so the output does not depend on the
 * batching and memory does not grow with the input.
 *
 * Argument tokens are all checked before anything is printed. On standard
 * input a bad token stops the run after the hashes of the pages before it.
 * The standard-input reader is a kvl_hash_input (cmd_hash.h): text goes in
 * in chunks of any size, hashes come out on a stream, so the fuzz target
 * fuzz/fuzz_hash_tokens.c drives exactly the code the command runs.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmd_hash.h"
#include "kvlink.h"

#define CMD "hash"

/* Tokens hashed per library call (rounded down to whole pages). */
#define HASH_BATCH_TOKENS 16384

/* Characters of a bad token quoted back in an error message. */
#define TOKEN_QUOTE_MAX 40

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvlink hash --page-size N [--prior HEX64] [TOKEN...]\n"
		"\n"
		"Prints the hash of every whole page of the token list, one\n"
		"64-hex-character hash per line; a trailing partial page is\n"
		"ignored. Without TOKEN arguments the tokens are read from\n"
		"standard input, separated by spaces, commas or newlines.\n"
		"\n"
		"  --page-size N   tokens per page (> 0)\n"
		"  --prior HEX64   hash before page 0 (a namespace seed)\n"
		"  -h, --help      print this help\n"
		"\n"
		"Token ids are decimal integers from 0 to 2^64-1.\n"
		"Exit status: 0 success, 1 failure, 2 bad usage or input.\n");
}

/* ------------------------------------------------------------------ tokens */

/* One token being read, a character at a time. */
typedef struct token {
	uint64_t value;
	size_t len;       /* characters seen */
	size_t digits;    /* decimal digits seen */
	int minus;        /* first character was '-' */
	int bad;          /* a non-digit other than that leading '-' */
	int overflow;     /* the digits exceed 2^64-1 */
	char quote[TOKEN_QUOTE_MAX + 4]; /* its start, quoted in messages */
} token;

static void token_reset(token *t)
{
	memset(t, 0, sizeof *t);
}

static void token_add(token *t, char c)
{
	if (t->len < TOKEN_QUOTE_MAX) {
		unsigned char u = (unsigned char)c;
		t->quote[t->len] = (u >= 0x20 && u < 0x7f) ? c : '?';
	} else if (t->len == TOKEN_QUOTE_MAX) {
		memcpy(t->quote + TOKEN_QUOTE_MAX, "...", 3);
	}
	t->len++;
	if (c >= '0' && c <= '9') {
		unsigned d = (unsigned)(c - '0');
		if (t->value > (UINT64_MAX - d) / 10)
			t->overflow = 1;
		else
			t->value = t->value * 10 + d;
		t->digits++;
	} else if (c == '-' && t->len == 1) {
		t->minus = 1;
	} else {
		t->bad = 1;
	}
}

/* Prints "kvlink hash: message" to `err` and returns 2 (bad input), as
 * kvl_cli_usage_error does for stderr. */
static int input_error(FILE *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int input_error(FILE *err, const char *fmt, ...)
{
	va_list ap;
	fprintf(err, "kvlink " CMD ": ");
	va_start(ap, fmt);
	vfprintf(err, fmt, ap);
	va_end(ap);
	fputc('\n', err);
	return 2;
}

/* Checks a finished token; on error prints why to `err`, naming `where`,
 * and returns 2 (bad input). */
static int token_check(const token *t, const char *where, FILE *err)
{
	const char *why = NULL;
	if (t->len == 0)
		why = "is empty, not a number";
	else if (t->minus && !t->bad && t->digits > 0)
		why = "is negative; token ids are 0 to 2^64-1";
	else if (t->minus || t->bad || t->digits == 0)
		why = "is not a decimal integer";
	else if (t->overflow)
		why = "is above 2^64-1";
	if (!why)
		return 0;
	return input_error(err, "%s '%s' %s", where, t->quote, why);
}

/* ------------------------------------------------------------------- pages */

/* Gathers tokens into batches of whole pages, hashes and prints them to
 * `sink`; messages go to `err`. */
typedef struct pager {
	size_t page_size;
	size_t batch;     /* tokens per full batch: a multiple of page_size */
	uint64_t *buf;    /* cap tokens, n of them held */
	size_t n, cap;
	kvl_hash *out;    /* batch / page_size hashes */
	kvl_hash prior;
	int have_prior;
	FILE *sink, *err;
} pager;

/* batch_tokens: tokens per hashing batch (rounded down to whole pages, at
 * least one page); 0 means HASH_BATCH_TOKENS. */
static int pager_init(pager *p, size_t page_size, const kvl_hash *prior,
                      size_t batch_tokens, FILE *sink, FILE *err)
{
	memset(p, 0, sizeof *p);
	p->page_size = page_size;
	p->sink = sink;
	p->err = err;
	if (batch_tokens == 0)
		batch_tokens = HASH_BATCH_TOKENS;
	size_t pages = 1;
	if (page_size < batch_tokens)
		pages = batch_tokens / page_size;
	p->batch = pages * page_size;
	p->out = malloc(pages * sizeof *p->out);
	if (!p->out) {
		fprintf(err, "kvlink " CMD ": out of memory\n");
		return 1;
	}
	if (prior) {
		p->prior = *prior;
		p->have_prior = 1;
	}
	return 0;
}

static void pager_free(pager *p)
{
	free(p->buf);
	free(p->out);
}

/* Hashes and prints the whole pages held; keeps the rest. */
static int pager_flush(pager *p)
{
	size_t n_out = 0, used = p->n / p->page_size * p->page_size;
	if (used == 0)
		return 0;
	int rc = kvl_hash_pages(p->buf, used, p->page_size,
	                        p->have_prior ? &p->prior : NULL, p->out,
	                        p->batch / p->page_size, &n_out);
	if (rc) {
		fprintf(p->err, "kvlink " CMD ": hashing failed: %s (%s)\n",
		        kvl_strerror(rc), kvl_err_name(rc));
		return 1;
	}
	for (size_t i = 0; i < n_out; i++) {
		char hex[KVL_HASH_HEX_LEN + 2];
		kvl_hash_to_hex(&p->out[i], hex, KVL_HASH_HEX_LEN + 1);
		hex[KVL_HASH_HEX_LEN] = '\n';
		fwrite(hex, 1, KVL_HASH_HEX_LEN + 1, p->sink);
	}
	if (ferror(p->sink)) {
		fprintf(p->err, "kvlink " CMD ": writing standard output: %s\n",
		        strerror(errno));
		return 1;
	}
	p->prior = p->out[n_out - 1];
	p->have_prior = 1;
	memmove(p->buf, p->buf + used, (p->n - used) * sizeof *p->buf);
	p->n -= used;
	return 0;
}

static int pager_push(pager *p, uint64_t tok)
{
	if (p->n == p->cap) {
		/* The buffer grows up to one batch, so a huge page size costs
		 * memory only for tokens actually given. */
		size_t cap = p->cap ? p->cap * 2 : 1024;
		if (cap > p->batch)
			cap = p->batch;
		void *nb = NULL;
		if (cap <= SIZE_MAX / sizeof *p->buf)
			nb = realloc(p->buf, cap * sizeof *p->buf);
		if (!nb) {
			fprintf(p->err,
			        "kvlink " CMD ": out of memory holding %zu "
			        "tokens of a page\n", cap);
			return 1;
		}
		p->buf = nb;
		p->cap = cap;
	}
	p->buf[p->n++] = tok;
	return p->n == p->batch ? pager_flush(p) : 0;
}

/* ------------------------------------------------------------------- input */

static int from_args(pager *p, int n, char **args)
{
	token t;
	char where[48];
	/* Check every token before printing anything. */
	for (int i = 0; i < n; i++) {
		token_reset(&t);
		for (const char *c = args[i]; *c; c++)
			token_add(&t, *c);
		snprintf(where, sizeof where, "token %d", i + 1);
		int rc = token_check(&t, where, stderr);
		if (rc)
			return rc;
	}
	for (int i = 0; i < n; i++) {
		token_reset(&t);
		for (const char *c = args[i]; *c; c++)
			token_add(&t, *c);
		int rc = pager_push(p, t.value);
		if (rc)
			return rc;
	}
	return 0;
}

static int is_separator(int c)
{
	return c == ' ' || c == ',' || c == '\n' || c == '\t' || c == '\r' ||
	       c == '\v' || c == '\f';
}

/* The standard-input reader (cmd_hash.h): a token list arriving in chunks. */
struct kvl_hash_input {
	pager p;
	token t;
	size_t count;    /* tokens finished */
	size_t line;     /* current line, from 1 */
	size_t tok_line; /* line where t started */
	int rc;          /* 0, or the status that stopped the input */
};

/* Checks and hands on the token just ended, if any. */
static int reader_end_token(kvl_hash_input *r)
{
	if (r->t.len == 0)
		return 0;
	char where[96];
	r->count++;
	snprintf(where, sizeof where, "token %zu (line %zu of standard input)",
	         r->count, r->tok_line);
	int rc = token_check(&r->t, where, r->p.err);
	if (rc) {
		/* Print the pages before the bad token, whatever the batch. */
		pager_flush(&r->p);
		return rc;
	}
	uint64_t value = r->t.value;
	token_reset(&r->t);
	return pager_push(&r->p, value);
}

int kvl_hash_input_open(size_t page_size, const kvl_hash *prior,
                        size_t batch_tokens, FILE *out, FILE *err,
                        kvl_hash_input **in)
{
	kvl_hash_input *r = calloc(1, sizeof *r);
	if (!r) {
		fprintf(err, "kvlink " CMD ": out of memory\n");
		return 1;
	}
	if (pager_init(&r->p, page_size, prior, batch_tokens, out, err)) {
		pager_free(&r->p);
		free(r);
		return 1;
	}
	r->line = r->tok_line = 1;
	token_reset(&r->t);
	*in = r;
	return 0;
}

int kvl_hash_input_feed(kvl_hash_input *r, const char *text, size_t len)
{
	if (r->rc)
		return r->rc;
	for (size_t i = 0; i < len; i++) {
		char c = text[i];
		if (!is_separator((unsigned char)c)) {
			if (r->t.len == 0)
				r->tok_line = r->line;
			token_add(&r->t, c);
			continue;
		}
		if ((r->rc = reader_end_token(r)))
			return r->rc;
		if (c == '\n')
			r->line++;
	}
	return 0;
}

int kvl_hash_input_finish(kvl_hash_input *r)
{
	if (r->rc)
		return r->rc;
	if (!(r->rc = reader_end_token(r)))
		r->rc = pager_flush(&r->p);
	return r->rc;
}

void kvl_hash_input_free(kvl_hash_input *r)
{
	if (!r)
		return;
	pager_free(&r->p);
	free(r);
}

static int from_stdin(size_t page_size, const kvl_hash *prior)
{
	char chunk[16384];
	kvl_hash_input *in;
	size_t got;
	int rc;

	if ((rc = kvl_hash_input_open(page_size, prior, 0, stdout, stderr,
	                              &in)))
		return rc;
	while ((got = fread(chunk, 1, sizeof chunk, stdin)) > 0)
		if ((rc = kvl_hash_input_feed(in, chunk, got)))
			break;
	if (!rc && ferror(stdin)) {
		fprintf(stderr, "kvlink " CMD ": reading standard input: %s\n",
		        strerror(errno));
		rc = 1;
	}
	if (!rc)
		rc = kvl_hash_input_finish(in);
	kvl_hash_input_free(in);
	return rc;
}

/* ----------------------------------------------------------------- command */

/* The value of option `name` at argv[*i]: after '=' in "--name=value", else
 * the next argument. NULL (and a message) when missing. */
static const char *option_value(int argc, char **argv, int *i,
                                const char *name)
{
	size_t len = strlen(name);
	if (argv[*i][len] == '=')
		return argv[*i] + len + 1;
	if (*i + 1 >= argc) {
		kvl_cli_usage_error(CMD, "%s needs a value", name);
		return NULL;
	}
	return argv[++*i];
}

static int is_option(const char *arg, const char *name)
{
	size_t len = strlen(name);
	return strncmp(arg, name, len) == 0 &&
	       (arg[len] == '\0' || arg[len] == '=');
}

int kvl_cmd_hash(int argc, char **argv)
{
	const char *page_arg = NULL, *prior_arg = NULL;
	char **tokens = malloc((size_t)argc * sizeof *tokens);
	int n_tokens = 0, only_tokens = 0;

	if (!tokens) {
		fprintf(stderr, "kvlink " CMD ": out of memory\n");
		return 1;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int is_number = a[0] == '-' && a[1] >= '0' && a[1] <= '9';
		if (only_tokens || a[0] != '-' || a[1] == '\0' || is_number) {
			tokens[n_tokens++] = argv[i];
		} else if (!strcmp(a, "--")) {
			only_tokens = 1;
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			free(tokens);
			return 0;
		} else if (is_option(a, "--page-size")) {
			if (!(page_arg = option_value(argc, argv, &i,
			                              "--page-size")))
				goto usage_failed;
		} else if (is_option(a, "--prior")) {
			if (!(prior_arg = option_value(argc, argv, &i,
			                               "--prior")))
				goto usage_failed;
		} else {
			kvl_cli_usage_error(CMD, "unknown option '%s' "
			                    "(argument %d; see kvlink hash "
			                    "--help)", a, i);
			goto usage_failed;
		}
	}

	uint64_t page_size;
	if (!page_arg) {
		kvl_cli_usage_error(CMD, "--page-size is required "
		                    "(see kvlink hash --help)");
		goto usage_failed;
	}
	if (kvl_cli_parse_u64(page_arg, &page_size) || page_size == 0
#if SIZE_MAX < UINT64_MAX
	    || page_size > SIZE_MAX
#endif
	) {
		kvl_cli_usage_error(CMD, "--page-size '%s' is not a whole "
		                    "number from 1 to %zu", page_arg,
		                    (size_t)SIZE_MAX);
		goto usage_failed;
	}

	kvl_hash prior;
	if (prior_arg && kvl_hash_from_hex(prior_arg, &prior)) {
		size_t len = strlen(prior_arg);
		size_t bad = strspn(prior_arg, "0123456789abcdefABCDEF");
		if (len != KVL_HASH_HEX_LEN)
			kvl_cli_usage_error(CMD, "--prior '%s' has %zu "
			                    "characters, not exactly %d hex "
			                    "characters", prior_arg, len,
			                    KVL_HASH_HEX_LEN);
		else
			kvl_cli_usage_error(CMD, "--prior '%s' is not hex: "
			                    "character %zu is '%c'", prior_arg,
			                    bad + 1, prior_arg[bad]);
		goto usage_failed;
	}

	int rc;
	if (n_tokens) {
		pager p;
		rc = pager_init(&p, (size_t)page_size,
		                prior_arg ? &prior : NULL, 0, stdout, stderr);
		if (!rc)
			rc = from_args(&p, n_tokens, tokens);
		if (!rc)
			rc = pager_flush(&p);
		pager_free(&p);
	} else {
		rc = from_stdin((size_t)page_size, prior_arg ? &prior : NULL);
	}
	free(tokens);
	if (fflush(stdout) && !rc) {
		fprintf(stderr, "kvlink " CMD ": writing standard output: %s\n",
		        strerror(errno));
		rc = 1;
	}
	return rc;

usage_failed:
	free(tokens);
	return 2;
}
