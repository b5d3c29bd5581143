/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_hash_tokens.c — libFuzzer target: the token-list reader of
 * `kvlink hash` (tools/cmd_hash.c, through cmd_hash.h), which reads
 * standard input.
 *
 * Input: byte 0 gives the page size (1..8, or 16384 + a little when its top
 * bit is set), byte 1 the hashing batch (tokens; 0 = the command's
 * default), byte 2 the size of the chunks the text is fed in (1..64, 0 =
 * all at once), byte 3 bit 0 whether a prior hash is given; the rest is the
 * text.
 *
 * The reader's output is compared with an independent reading of the same
 * text: split at separators (space , \t \n \r \v \f), every token must be
 * 1..20 decimal digits of value <= 2^64-1; the expected hashes are those of
 * kvl_hash_pages over all the good tokens before the first bad one, at once.
 * Checked: the status is 2 exactly when there is a bad token, else 0; the
 * output is exactly the expected lines whatever the batch and chunk sizes;
 * and a bad token's message names it (its number and line).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmd_hash.h"

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr,                                      \
			        "fuzz_hash_tokens: check failed: %s (line %d)\n", \
			        #cond, __LINE__);                            \
			abort();                                             \
		}                                                            \
	} while (0)

static int sep(unsigned char c)
{
	return c == ' ' || c == ',' || c == '\n' || c == '\t' || c == '\r' ||
	       c == '\v' || c == '\f';
}

/* Parses the token text[0..n): 0 and *v, or -1. */
static int ref_token(const uint8_t *t, size_t n, uint64_t *v)
{
	unsigned __int128 x = 0;
	if (n == 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (t[i] < '0' || t[i] > '9')
			return -1;
		x = x * 10 + (unsigned)(t[i] - '0');
		if (x > UINT64_MAX)
			return -1;
	}
	*v = (uint64_t)x;
	return 0;
}

static FILE *dev_null(void)
{
	static FILE *f;
	if (!f)
		f = fopen("/dev/null", "w");
	CHECK(f);
	return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 4)
		return 0;
	size_t page_size = data[0] & 0x80 ? 16384 + (data[0] & 0x7f)
	                                  : 1 + (data[0] & 7);
	size_t batch = data[1];
	size_t chunk = data[2] % 65;
	kvl_hash prior, *pp = NULL;
	if (data[3] & 1) {
		for (int i = 0; i < KVL_HASH_BYTES; i++)
			prior.bytes[i] = (uint8_t)(i ^ data[3]);
		pp = &prior;
	}
	const uint8_t *text = data + 4;
	size_t n = size - 4;

	/* The reference reading. */
	uint64_t *toks = malloc((n / 2 + 1) * sizeof *toks);
	CHECK(toks);
	size_t nt = 0, line = 1, bad_line = 0, bad_no = 0;
	int bad = 0;
	for (size_t i = 0; i < n && !bad;) {
		if (sep(text[i])) {
			line += text[i] == '\n';
			i++;
			continue;
		}
		size_t j = i;
		while (j < n && !sep(text[j]))
			j++;
		if (ref_token(text + i, j - i, &toks[nt]) == 0) {
			nt++;
		} else {
			bad = 1;
			bad_no = nt + 1;
			bad_line = line;
		}
		i = j;
	}
	size_t pages = nt / page_size;
	char *want = malloc(pages * (KVL_HASH_HEX_LEN + 1) + 1);
	kvl_hash *h = malloc((pages ? pages : 1) * sizeof *h);
	CHECK(want && h);
	size_t got_pages = 0;
	CHECK(kvl_hash_pages(toks, pages * page_size, page_size, pp, h,
	                     pages ? pages : 1, &got_pages) == 0);
	CHECK(got_pages == pages);
	for (size_t i = 0; i < pages; i++) {
		kvl_hash_to_hex(&h[i], want + i * (KVL_HASH_HEX_LEN + 1), KVL_HASH_HEX_LEN + 1);
		want[i * (KVL_HASH_HEX_LEN + 1) + KVL_HASH_HEX_LEN] = '\n';
	}

	/* The reader. */
	char *out = NULL, *msg = NULL;
	size_t out_len = 0, msg_len = 0;
	FILE *fo = open_memstream(&out, &out_len);
	FILE *fe = bad ? open_memstream(&msg, &msg_len) : dev_null();
	CHECK(fo && fe);
	kvl_hash_input *in = NULL;
	int rc = kvl_hash_input_open(page_size, pp, batch, fo, fe, &in);
	CHECK(rc == 0 && in);
	size_t step = chunk ? chunk : (n ? n : 1);
	for (size_t i = 0; i < n && rc == 0; i += step)
		rc = kvl_hash_input_feed(in, (const char *)text + i,
		                         n - i < step ? n - i : step);
	if (rc == 0)
		rc = kvl_hash_input_finish(in);
	CHECK(kvl_hash_input_finish(in) == rc); /* stays stopped */
	kvl_hash_input_free(in);
	fclose(fo);
	if (bad)
		fclose(fe);

	CHECK(rc == (bad ? 2 : 0));
	CHECK(out_len == pages * (KVL_HASH_HEX_LEN + 1));
	CHECK(memcmp(out, want, out_len) == 0);
	if (bad) {
		char needle[96];
		snprintf(needle, sizeof needle,
		         "token %zu (line %zu of standard input)", bad_no,
		         bad_line);
		CHECK(msg && strstr(msg, needle));
	}
	free(out);
	free(msg);
	free(want);
	free(h);
	free(toks);
	return 0;
}
