/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace.c — the parser of Mooncake request traces (format in trace.h): a
 * cursor over one line at a time, with the column of the first error.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

static int jp_fail(rp_parser *jp, const char *at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Records what is wrong and where (column, 1-based); returns -1. */
static int jp_fail(rp_parser *jp, const char *at, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(jp->msg, sizeof jp->msg, fmt, ap);
	va_end(ap);
	if (at && n >= 0 && (size_t)n < sizeof jp->msg)
		snprintf(jp->msg + n, sizeof jp->msg - (size_t)n,
		         " (column %zu)", (size_t)(at - jp->start) + 1);
	return -1;
}

static void jp_ws(rp_parser *jp)
{
	while (jp->p < jp->end && (*jp->p == ' ' || *jp->p == '\t' ||
	                           *jp->p == '\r' || *jp->p == '\n'))
		jp->p++;
}

/* A printable description of the character at p, for messages. */
static const char *jp_what(const rp_parser *jp, const char *p, char *buf,
                           size_t len)
{
	if (p >= jp->end)
		return "the end of the line";
	unsigned char c = (unsigned char)*p;
	if (c == 0)
		return "a NUL byte";
	if (c < 0x20 || c >= 0x7f)
		snprintf(buf, len, "byte 0x%02x", c);
	else
		snprintf(buf, len, "'%c'", c);
	return buf;
}

/* Expects character c (after whitespace). */
static int jp_expect(rp_parser *jp, char c, const char *why)
{
	char b[16];
	jp_ws(jp);
	if (jp->p < jp->end && *jp->p == c) {
		jp->p++;
		return 0;
	}
	return jp_fail(jp, jp->p, "expected '%c' %s, found %s", c, why,
	               jp_what(jp, jp->p, b, sizeof b));
}

/* A field name: a JSON string without escapes, copied into name. */
static int jp_name(rp_parser *jp, char *name, size_t cap)
{
	char b[16];
	jp_ws(jp);
	const char *q = jp->p;
	if (q >= jp->end || *q != '"')
		return jp_fail(jp, q, "expected a field name in double "
		                      "quotes, found %s",
		               jp_what(jp, q, b, sizeof b));
	const char *s = ++q;
	while (q < jp->end && *q != '"') {
		unsigned char c = (unsigned char)*q;
		if (c == '\\')
			return jp_fail(jp, q, "escapes in field names are not "
			                      "supported");
		if (c < 0x20)
			return jp_fail(jp, q, "%s inside a field name",
			               jp_what(jp, q, b, sizeof b));
		q++;
	}
	if (q >= jp->end)
		return jp_fail(jp, s - 1, "unterminated field name");
	size_t n = (size_t)(q - s);
	if (n >= cap)
		n = cap - 1; /* long names are unknown anyway */
	memcpy(name, s, n);
	name[n] = 0;
	jp->p = q + 1;
	return 0;
}

/* A non-negative JSON number: with `real` 0 an integer below 2^64 (its
 * value in *out), with `real` 1 any (a fraction, an exponent, any size;
 * *out gets its integer part, or UINT64_MAX beyond). `what` names it for
 * messages. */
static int jp_number(rp_parser *jp, const char *what, int real,
                     uint64_t *out)
{
	char b[16];
	jp_ws(jp);
	const char *s = jp->p, *q = s;
	int neg = 0;
	if (q < jp->end && *q == '-') {
		neg = 1;
		q++;
	}
	if (q >= jp->end || *q < '0' || *q > '9') {
		if (!neg && q < jp->end &&
		    (*q == '"' || *q == 't' || *q == 'f' || *q == 'n' ||
		     *q == '[' || *q == '{'))
			return jp_fail(jp, s, "%s: expected %s, found %s", what,
			               real ? "a number" : "an integer",
			               *q == '"' ? "a string" :
			               *q == '[' ? "an array" :
			               *q == '{' ? "an object" :
			                           "true, false or null");
		return jp_fail(jp, q, "%s: expected %s, found %s", what,
		               real ? "a number" : "an integer",
		               jp_what(jp, q, b, sizeof b));
	}
	const char *digits = q;
	uint64_t v = 0;
	int overflow = 0;
	while (q < jp->end && *q >= '0' && *q <= '9') {
		unsigned d = (unsigned)(*q - '0');
		if (v > (UINT64_MAX - d) / 10)
			overflow = 1;
		else
			v = v * 10 + d;
		q++;
	}
	int frac = 0;
	if (q < jp->end && *q == '.') {
		frac = 1;
		q++;
		if (q >= jp->end || *q < '0' || *q > '9')
			return jp_fail(jp, q, "%s: malformed number (a digit "
			                      "must follow '.')",
			               what);
		while (q < jp->end && *q >= '0' && *q <= '9')
			q++;
	}
	if (q < jp->end && (*q == 'e' || *q == 'E')) {
		frac = 1;
		q++;
		if (q < jp->end && (*q == '+' || *q == '-'))
			q++;
		if (q >= jp->end || *q < '0' || *q > '9')
			return jp_fail(jp, q, "%s: malformed number (a digit "
			                      "must follow the exponent)",
			               what);
		while (q < jp->end && *q >= '0' && *q <= '9')
			q++;
	}
	int len = (int)(q - s);
	if (digits[0] == '0' && q - digits > 1 && digits[1] >= '0' &&
	    digits[1] <= '9')
		return jp_fail(jp, s, "%s: %.*s has a leading zero (not JSON)",
		               what, len, s);
	if (frac && !real)
		return jp_fail(jp, s, "%s: %.*s is not an integer", what, len,
		               s);
	if (neg && (v != 0 || overflow || (frac && strtod(s, NULL) < 0)))
		return jp_fail(jp, s, "%s: %.*s is negative", what, len, s);
	if (overflow && !real)
		return jp_fail(jp, s, "%s: %.*s is too large (above 2^64-1)",
		               what, len, s);
	if (overflow)
		v = UINT64_MAX;
	jp->p = q;
	*out = v;
	return 0;
}

#define JP_MAX_DEPTH 64 /* arrays and objects nested in an ignored field */

/* Skips a JSON string (at its opening quote), checking its escapes. */
static int jp_skip_string(rp_parser *jp)
{
	char b[16];
	const char *s = jp->p++;
	while (jp->p < jp->end && *jp->p != '"') {
		unsigned char c = (unsigned char)*jp->p;
		if (c < 0x20)
			return jp_fail(jp, jp->p, "%s inside a string",
			               jp_what(jp, jp->p, b, sizeof b));
		if (c == '\\') {
			const char *e = ++jp->p;
			if (e >= jp->end || !*e || !strchr("\"\\/bfnrtu", *e))
				return jp_fail(jp, e, "bad escape in a string");
			if (*e == 'u') {
				for (int k = 1; k <= 4; k++)
					if (e + k >= jp->end || !e[k] ||
					    !strchr("0123456789abcdefABCDEF",
					            e[k]))
						return jp_fail(jp, e, "bad \\u "
						               "escape in a string");
				jp->p += 4;
			}
		}
		jp->p++;
	}
	if (jp->p >= jp->end)
		return jp_fail(jp, s, "unterminated string");
	jp->p++;
	return 0;
}

/* Skips one JSON value of a field the replay does not use, checking that
 * it is JSON. */
static int jp_skip_value(rp_parser *jp, const char *what, int depth)
{
	char b[16];
	uint64_t ignored;
	jp_ws(jp);
	const char *at = jp->p;
	if (at >= jp->end)
		return jp_fail(jp, at, "%s: expected a value, found the end of "
		                       "the line",
		               what);
	if (*at == '"')
		return jp_skip_string(jp);
	if (*at == '-' || (*at >= '0' && *at <= '9')) {
		/* Negative numbers are fine here: skip the sign. */
		if (*at == '-')
			jp->p++;
		return jp_number(jp, what, 1, &ignored);
	}
	static const char *const words[] = {"true", "false", "null"};
	for (int w = 0; w < 3; w++) {
		size_t n = strlen(words[w]);
		if ((size_t)(jp->end - at) >= n && !memcmp(at, words[w], n)) {
			jp->p += n;
			return 0;
		}
	}
	if (*at != '[' && *at != '{')
		return jp_fail(jp, at, "%s: expected a value, found %s", what,
		               jp_what(jp, at, b, sizeof b));
	if (depth >= JP_MAX_DEPTH)
		return jp_fail(jp, at, "%s: nested more than %d deep", what,
		               JP_MAX_DEPTH);
	char close = *at == '[' ? ']' : '}';
	jp->p++;
	jp_ws(jp);
	if (jp->p < jp->end && *jp->p == close) {
		jp->p++;
		return 0;
	}
	for (;;) {
		if (close == '}') {
			jp_ws(jp);
			if (jp->p >= jp->end || *jp->p != '"')
				return jp_fail(jp, jp->p, "%s: expected a "
				               "name in double quotes, found %s",
				               what, jp_what(jp, jp->p, b,
				                             sizeof b));
			if (jp_skip_string(jp) ||
			    jp_expect(jp, ':', "after a name"))
				return -1;
		}
		if (jp_skip_value(jp, what, depth + 1))
			return -1;
		jp_ws(jp);
		if (jp->p < jp->end && *jp->p == ',') {
			jp->p++;
			continue;
		}
		return jp_expect(jp, close, close == ']' ? "or ',' in an array"
		                                         : "or ',' in an object");
	}
}

/* Makes room for one more id; -1 when out of memory. */
static int trace_reserve_ids(rp_trace *t, size_t more)
{
	if (t->n_ids + more <= t->cap_ids)
		return 0;
	size_t cap = t->cap_ids ? t->cap_ids : 4096;
	while (cap < t->n_ids + more)
		cap *= 2;
	uint64_t *ids = realloc(t->ids, cap * sizeof *ids);
	if (!ids)
		return -1;
	t->ids = ids;
	t->cap_ids = cap;
	return 0;
}

enum { F_TIMESTAMP, F_INPUT, F_OUTPUT, F_HASH_IDS, F_COUNT };
static const char *const field_names[F_COUNT] = {
	"timestamp", "input_length", "output_length", "hash_ids"};

/* Parses one line into a request whose ids are appended to t->ids (and
 * dropped again on failure). 1: a request; 0: a blank line; -1: malformed
 * (jp->msg says why); -2: out of memory. */
int rp_trace_parse(rp_trace *t, const char *line, size_t len,
                      uint64_t block_tokens, rp_parser *jp, rp_req *out)
{
	jp->start = jp->p = line;
	jp->end = line + len;
	jp->msg[0] = 0;
	jp_ws(jp);
	if (jp->p == jp->end)
		return 0;
	size_t first = t->n_ids;
	const char *ids_at = NULL;
	uint64_t val[F_COUNT] = {0};
	int seen[F_COUNT] = {0};
	char b[16];

	if (*jp->p != '{')
		return jp_fail(jp, jp->p, "expected a JSON object ('{'), "
		                          "found %s",
		               jp_what(jp, jp->p, b, sizeof b));
	jp->p++;
	jp_ws(jp);
	if (jp->p < jp->end && *jp->p == '}') {
		jp->p++;
	} else {
		for (;;) {
			char name[64];
			const char *at;
			jp_ws(jp);
			at = jp->p;
			if (jp_name(jp, name, sizeof name))
				goto bad;
			int f = 0;
			while (f < F_COUNT && strcmp(name, field_names[f]))
				f++;
			if (f == F_COUNT) { /* session_id, model, …: not used */
				if (jp_expect(jp, ':', "after a field name") ||
				    jp_skip_value(jp, name, 0))
					goto bad;
				goto next;
			}
			if (seen[f]) {
				jp_fail(jp, at, "field \"%s\" appears twice",
				        name);
				goto bad;
			}
			seen[f] = 1;
			if (jp_expect(jp, ':', "after a field name"))
				goto bad;
			if (f != F_HASH_IDS) {
				/* Timestamps may be fractional milliseconds. */
				if (jp_number(jp, field_names[f],
				              f == F_TIMESTAMP, &val[f]))
					goto bad;
			} else {
				jp_ws(jp);
				ids_at = jp->p;
				if (jp->p >= jp->end || *jp->p != '[') {
					jp_fail(jp, jp->p,
					        "hash_ids: expected an array "
					        "('['), found %s",
					        jp_what(jp, jp->p, b, sizeof b));
					goto bad;
				}
				jp->p++;
				jp_ws(jp);
				if (jp->p < jp->end && *jp->p == ']') {
					jp->p++;
				} else {
					for (;;) {
						uint64_t id;
						if (jp_number(jp, "hash_ids", 0, &id))
							goto bad;
						if (trace_reserve_ids(t, 1))
							return -2;
						t->ids[t->n_ids++] = id;
						jp_ws(jp);
						if (jp->p < jp->end &&
						    *jp->p == ',') {
							jp->p++;
							continue;
						}
						if (jp_expect(jp, ']',
						              "or ',' in hash_ids"))
							goto bad;
						break;
					}
				}
			}
		next:
			jp_ws(jp);
			if (jp->p < jp->end && *jp->p == ',') {
				jp->p++;
				continue;
			}
			if (jp_expect(jp, '}', "or ',' after a field"))
				goto bad;
			break;
		}
	}
	jp_ws(jp);
	if (jp->p < jp->end) {
		jp_fail(jp, jp->p, "unexpected %s after the object",
		        jp_what(jp, jp->p, b, sizeof b));
		goto bad;
	}
	for (int f = 0; f < F_COUNT; f++)
		if (!seen[f]) {
			jp_fail(jp, NULL, "missing field \"%s\"",
			        field_names[f]);
			goto bad;
		}
	size_t n = t->n_ids - first;
	uint64_t in = val[F_INPUT];
	uint64_t need = in / block_tokens + (in % block_tokens != 0);
	if (n != need) {
		jp_fail(jp, ids_at,
		        "hash_ids has %zu ids but input_length %llu needs "
		        "ceil(%llu / %llu) = %llu",
		        n, (unsigned long long)in, (unsigned long long)in,
		        (unsigned long long)block_tokens,
		        (unsigned long long)need);
		goto bad;
	}
	*out = (rp_req){.input_len = in, .first = first, .n = n};
	return 1;
bad:
	t->n_ids = first;
	return -1;
}

void rp_trace_free(rp_trace *t)
{
	free(t->reqs);
	free(t->ids);
	memset(t, 0, sizeof *t);
}

/* Reads the whole trace. 0, or 1 after printing why (a malformed line
 * without --skip-bad, an unreadable file, no requests). */
int rp_trace_load(rp_trace *t, const char *path, uint64_t block_tokens,
                      int skip_bad)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
	if (!f) {
		fprintf(stderr, "kvlink replay: cannot open %s: %s\n", path,
		        strerror(errno));
		return 1;
	}
	memset(t, 0, sizeof *t);
	t->path = path;
	char *line = NULL;
	size_t cap = 0, lineno = 0;
	ssize_t len;
	int rc = 0;
	rp_parser jp;
	while ((len = getline(&line, &cap, f)) >= 0) {
		lineno++;
		if (len > 0 && line[len - 1] == '\n')
			len--;
		rp_req r;
		int pr = rp_trace_parse(t, line, (size_t)len, block_tokens, &jp,
		                    &r);
		if (pr == 0)
			continue;
		if (pr == -2) {
			fprintf(stderr, "kvlink replay: %s:%zu: out of memory\n",
			        path, lineno);
			rc = 1;
			break;
		}
		if (pr < 0) {
			if (!skip_bad) {
				fprintf(stderr, "%s:%zu: %s\n", path, lineno,
				        jp.msg);
				rc = 1;
				break;
			}
			if (t->bad_lines++ < RP_SHOW_SKIPPED)
				fprintf(stderr, "kvlink replay: skipped %s:%zu: "
				                "%s\n",
				        path, lineno, jp.msg);
			continue;
		}
		if (t->n_reqs == t->cap_reqs) {
			size_t nc = t->cap_reqs ? t->cap_reqs * 2 : 1024;
			rp_req *rs = realloc(t->reqs, nc * sizeof *rs);
			if (!rs) {
				fprintf(stderr, "kvlink replay: out of memory\n");
				rc = 1;
				break;
			}
			t->reqs = rs;
			t->cap_reqs = nc;
		}
		t->reqs[t->n_reqs++] = r;
		if (r.n > t->max_blocks)
			t->max_blocks = r.n;
		t->input_tokens += r.input_len;
	}
	if (rc == 0 && ferror(f)) {
		fprintf(stderr, "kvlink replay: reading %s: %s\n", path,
		        strerror(errno));
		rc = 1;
	}
	free(line);
	if (f != stdin)
		fclose(f);
	if (rc == 0 && t->bad_lines > RP_SHOW_SKIPPED)
		fprintf(stderr, "kvlink replay: skipped %llu malformed lines "
		                "in all\n",
		        (unsigned long long)t->bad_lines);
	if (rc == 0 && t->n_reqs == 0) {
		fprintf(stderr, "kvlink replay: %s holds no requests\n", path);
		rc = 1;
	}
	if (rc)
		rp_trace_free(t);
	return rc;
}

