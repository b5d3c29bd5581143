/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_trace.c — libFuzzer target: the trace-line parser of `kvlink replay`
 * (rp_trace_parse in tools/trace.c, a JSON-lines request parser), the
 * same code the command runs.
 *
 * Input: bytes 0-1 give the block size in tokens (1..65536); the rest is a
 * trace, split into lines at '\n' as the command splits its file. Checked
 * on every line:
 *  - the result is 1 (a request), 0 (blank: only JSON whitespace) or -1
 *    (malformed, with a message), never -2 here (no allocation failure);
 *  - a malformed line leaves the id array as it was;
 *  - a request has exactly ceil(input_length / block_tokens) ids, appended
 *    after the earlier requests' ids; and printing it back as a canonical
 *    line and parsing that gives the same request and ids.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "fuzz_trace: check failed: %s (line %d)\n", \
			        #cond, __LINE__);                            \
			abort();                                             \
		}                                                            \
	} while (0)

static int json_ws_only(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
			return 0;
	return 1;
}

/* Prints request q of t back as one canonical line. */
static char *canonical(const rp_trace *t, const rp_req *q, size_t *len)
{
	size_t cap = 128 + q->n * 22;
	char *s = malloc(cap);
	CHECK(s);
	size_t n = (size_t)snprintf(s, cap, "{\"hash_ids\": [");
	for (size_t i = 0; i < q->n; i++)
		n += (size_t)snprintf(s + n, cap - n, "%s%llu", i ? ", " : "",
		                      (unsigned long long)t->ids[q->first + i]);
	n += (size_t)snprintf(s + n, cap - n,
	                      "], \"output_length\": 0, \"input_length\": "
	                      "%llu, \"timestamp\": 7}",
	                      (unsigned long long)q->input_len);
	CHECK(n < cap);
	*len = n;
	return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	uint64_t block_tokens = 1 + (uint64_t)(data[0] | data[1] << 8);
	const char *text = (const char *)data + 2;
	size_t n = size - 2;

	rp_trace t;
	memset(&t, 0, sizeof t);
	for (size_t at = 0; at <= n;) {
		const char *nl = memchr(text + at, '\n', n - at);
		size_t len = nl ? (size_t)(nl - (text + at)) : n - at;
		/* An exact-size copy, so ASan sees any read past the line. */
		char *line = malloc(len ? len : 1);
		CHECK(line);
		memcpy(line, text + at, len);

		rp_parser jp;
		rp_req q;
		size_t before = t.n_ids;
		int rc = rp_trace_parse(&t, line, len, block_tokens, &jp, &q);
		CHECK(rc == 1 || rc == 0 || rc == -1);
		if (rc == 0)
			CHECK(json_ws_only(line, len) && t.n_ids == before);
		if (rc == -1)
			CHECK(jp.msg[0] && t.n_ids == before);
		if (rc == 1) {
			uint64_t in = q.input_len;
			CHECK(q.first == before && q.n == t.n_ids - before);
			CHECK(q.n == in / block_tokens + (in % block_tokens != 0));
			size_t clen;
			char *c = canonical(&t, &q, &clen);
			rp_req q2;
			rp_parser jp2;
			CHECK(rp_trace_parse(&t, c, clen, block_tokens, &jp2, &q2) ==
			      1);
			CHECK(q2.input_len == in && q2.n == q.n &&
			      q2.first == q.first + q.n);
			CHECK(q.n == 0 ||
			      memcmp(&t.ids[q.first], &t.ids[q2.first],
			             q.n * sizeof *t.ids) == 0);
			t.n_ids = q2.first; /* drop the copy */
			free(c);
		}
		free(line);
		if (!nl)
			break;
		at += len + 1;
	}
	rp_trace_free(&t);
	return 0;
}
