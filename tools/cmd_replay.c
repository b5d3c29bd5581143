/*
 * cmd_replay.c — `kvlink replay`: drives a Mooncake request trace through the
 * real linker and embedded store, and reports how much prefill a store of a
 * given size and eviction policy would have saved.
 *
 * Trace format (JSON Lines, one request per line):
 *   {"timestamp": 0, "input_length": 40160, "output_length": 6,
 *    "hash_ids": [0, 1, 2, ...]}
 * hash_ids are ids of prefix-chained blocks of --block-tokens (512) tokens:
 * equal ids mean equal blocks with equal prefixes. The parser below accepts
 * exactly this: an object with each of the four fields once, in any order,
 * with JSON whitespace between tokens; non-negative integers (no fraction,
 * no exponent, no leading zeros, at most 2^64-1; "-0" is 0); hash_ids an
 * array of them with exactly ceil(input_length / block_tokens) entries.
 * Field names must be plain (no escapes); unknown fields are errors. Blank
 * lines are skipped. Anything else stops the replay with "FILE:LINE: what"
 * and exit status 1, or, with --skip-bad, is counted and skipped.
 *
 * What a replay does, per request in file order: hash_id i becomes the page
 * hash whose first 8 bytes are i (little-endian) and whose other bytes are
 * 0; kvl_linker_lookup over the request's blocks gives the longest present
 * prefix (the hit blocks); then kvl_linker_offload of every block of the
 * request (the offloader skips present ones, touching them) and
 * kvl_linker_flush, so the next lookup sees them. Blocks are objects of
 * --block-bytes bytes in one pool of host slots, so a trace replays in
 * seconds. Results: token hit ratio = sum min(hit blocks x block_tokens,
 * input_length) / sum input_length; block hit ratio = hit blocks / blocks;
 * requests per second of the replay loop; the store's evictions.
 *
 * Capacities: --capacity-blocks N is the store option max_objects=N (exact,
 * in objects); --capacity BYTES the store's byte capacity (objects cost
 * their size, key and 64 bytes); with neither, the capacity is room for
 * every block of the trace ("unlimited": nothing is ever evicted).
 * --sweep lists capacities in blocks and replays each with each policy;
 * --plot draws the token hit ratios as an SVG.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "store/evict.h"
#include "core/internal.h"
#include "kvlink.h"
#include "store/store.h"

#define RP_MAX_POLICIES 8
#define RP_MAX_SWEEP 64
#define RP_SHOW_SKIPPED 10 /* messages of skipped lines printed, at most */
#define RP_UNLIMITED UINT64_MAX

/* ------------------------------------------------------------------ trace */

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

/* A JSON number that must be a non-negative integer below 2^64. `what`
 * names it for messages. */
static int jp_u64(rp_parser *jp, const char *what, uint64_t *out)
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
			return jp_fail(jp, s, "%s: expected an integer, found "
			                      "%s",
			               what,
			               *q == '"' ? "a string" :
			               *q == '[' ? "an array" :
			               *q == '{' ? "an object" :
			                           "true, false or null");
		return jp_fail(jp, q, "%s: expected an integer, found %s",
		               what, jp_what(jp, q, b, sizeof b));
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
	if (frac)
		return jp_fail(jp, s, "%s: %.*s is not an integer", what, len,
		               s);
	if (neg && (v != 0 || overflow))
		return jp_fail(jp, s, "%s: %.*s is negative", what, len, s);
	if (overflow)
		return jp_fail(jp, s, "%s: %.*s is too large (above 2^64-1)",
		               what, len, s);
	jp->p = q;
	*out = v;
	return 0;
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
static int parse_line(rp_trace *t, const char *line, size_t len,
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
			if (f == F_COUNT) {
				jp_fail(jp, at, "unknown field \"%s\" (expected "
				                "timestamp, input_length, "
				                "output_length and hash_ids)",
				        name);
				goto bad;
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
				if (jp_u64(jp, field_names[f], &val[f]))
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
						if (jp_u64(jp, "hash_ids", &id))
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

static void trace_free(rp_trace *t)
{
	free(t->reqs);
	free(t->ids);
	memset(t, 0, sizeof *t);
}

/* Reads the whole trace. 0, or 1 after printing why (a malformed line
 * without --skip-bad, an unreadable file, no requests). */
static int trace_load(rp_trace *t, const char *path, uint64_t block_tokens,
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
		int pr = parse_line(t, line, (size_t)len, block_tokens, &jp,
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
		trace_free(t);
	return rc;
}

/* ----------------------------------------------------------------- replay */

typedef struct rp_opts {
	const char *trace;
	uint64_t block_bytes, block_tokens;
	uint64_t capacity_blocks; /* RP_UNLIMITED: none */
	uint64_t capacity_bytes;  /* 0: none */
	const char *policies[RP_MAX_POLICIES];
	size_t n_policies;        /* 0: the store's default */
	uint64_t sweep[RP_MAX_SWEEP];
	size_t n_sweep;
	const char *plot;
	int json, skip_bad, progress;
} rp_opts;

typedef struct rp_result {
	const char *policy;
	uint64_t capacity_blocks; /* RP_UNLIMITED: none */
	uint64_t hit_blocks, blocks, hit_tokens, evictions, stored;
	double wall_s;
} rp_result;

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

/* The engine's side of the replay: one pool of host slots, one layer. */
typedef struct rp_env {
	kvl_layout *layout;
	uint8_t *slots_mem;
	size_t *slots;       /* 0, 1, …: page i of a request uses slot i */
	kvl_hash *hashes;
	size_t object_size;  /* header + payload */
} rp_env;

static void env_free(rp_env *e)
{
	kvl_layout_free(e->layout);
	free(e->slots_mem);
	free(e->slots);
	free(e->hashes);
}

static int env_init(rp_env *e, const rp_opts *o, const rp_trace *t)
{
	char err[256];
	size_t pages = t->max_blocks ? t->max_blocks : 1;
	size_t bytes = (pages * o->block_bytes + 63) & ~(size_t)63;
	memset(e, 0, sizeof *e);
	e->slots_mem = aligned_alloc(64, bytes);
	e->slots = malloc(pages * sizeof *e->slots);
	e->hashes = calloc(pages, sizeof *e->hashes);
	if (!e->slots_mem || !e->slots || !e->hashes) {
		fprintf(stderr, "kvlink replay: out of memory for %zu slots\n",
		        pages);
		return 1;
	}
	memset(e->slots_mem, 0, bytes);
	for (size_t i = 0; i < pages; i++)
		e->slots[i] = i;
	int pool, rc = kvl_layout_create("kvlink-replay", (uint32_t)o->block_tokens,
	                                 NULL, &e->layout, err, sizeof err);
	if (rc) {
		fprintf(stderr, "kvlink replay: layout: %s\n", err);
		return 1;
	}
	kvl_buffer b = {.base = e->slots_mem, .page_stride = o->block_bytes,
	                .page_bytes = o->block_bytes, .num_pages = pages,
	                .mem = KVL_MEM_HOST};
	rc = kvl_layout_add_pool(e->layout, "kv", KVL_HIT_ALL_PAGES, 0, 0,
	                         &pool);
	if (rc == 0)
		rc = kvl_layout_add_buffer(e->layout, pool, "kv", 0, &b);
	if (rc == 0)
		rc = kvl_layout_finalize(e->layout);
	if (rc == 0)
		rc = kvl_layout_object_size(e->layout, pool, &e->object_size,
		                            NULL);
	if (rc) {
		fprintf(stderr, "kvlink replay: layout: %s\n",
		        kvl_layout_errmsg(e->layout));
		return 1;
	}
	return 0;
}

/* The store URI of one run into buf. */
static void store_uri(char *buf, size_t len, const rp_opts *o,
                      const rp_trace *t, const rp_env *e,
                      const char *policy, uint64_t cap_blocks)
{
	uint64_t bytes = o->capacity_bytes;
	if (!bytes) {
		/* Room for every block of the trace: only max_objects (if
		 * any) limits. Objects cost size + key + 64 bytes. */
		bytes = (uint64_t)t->n_ids *
		                (e->object_size + KVL_KEY_MAX + 64) +
		        (1u << 20);
	}
	int n = snprintf(buf, len, "mem:?capacity=%llu",
	                 (unsigned long long)bytes);
	if (cap_blocks != RP_UNLIMITED)
		n += snprintf(buf + n, len - (size_t)n, "&max_objects=%llu",
		              (unsigned long long)cap_blocks);
	if (policy)
		snprintf(buf + n, len - (size_t)n, "&policy=%s", policy);
}

static void progress(const rp_result *r, size_t done, size_t total,
                     int *last)
{
	int pct = (int)(done * 100 / total);
	if (pct == *last)
		return;
	*last = pct;
	char cap[32];
	if (r->capacity_blocks == RP_UNLIMITED)
		snprintf(cap, sizeof cap, "unlimited");
	else
		snprintf(cap, sizeof cap, "%llu blocks",
		         (unsigned long long)r->capacity_blocks);
	int bar = pct * 30 / 100;
	fprintf(stderr, "\r[%.*s%*s] %3d%% %zu/%zu requests (%s, %s)", bar,
	        "##############################", 30 - bar, "", pct, done,
	        total, r->policy, cap);
	if (done == total)
		fputs("\r\033[K", stderr);
	fflush(stderr);
}

/* One replay of the whole trace. 0, or 1 after printing why. */
static int replay_one(const rp_opts *o, const rp_trace *t, rp_env *e,
                      const char *policy, uint64_t cap_blocks,
                      rp_result *res)
{
	char uri[256], err[KVL__ERRMSG_MAX];
	kvl_store *st = NULL;
	kvl_linker *lk = NULL;
	int rc = 1;

	memset(res, 0, sizeof *res);
	res->policy = policy ? policy : kvl__mem_policy_name(0);
	res->capacity_blocks = cap_blocks;
	store_uri(uri, sizeof uri, o, t, e, policy, cap_blocks);
	if (kvl_store_open(uri, &st, err, sizeof err)) {
		fprintf(stderr, "kvlink replay: store '%s': %s\n", uri, err);
		return 1;
	}
	kvl_linker_opts lo = KVL_LINKER_OPTS_INIT;
	if (t->max_blocks > (1u << 20))
		lo.max_request_pages = (uint32_t)t->max_blocks;
	if (kvl_linker_open(e->layout, st, &lo, &lk, err, sizeof err)) {
		fprintf(stderr, "kvlink replay: linker: %s\n", err);
		goto out;
	}
	int last_pct = -1;
	uint64_t t0 = kvl__now_ns();
	for (size_t i = 0; i < t->n_reqs; i++) {
		const rp_req *r = &t->reqs[i];
		const uint64_t *ids = t->ids + r->first;
		for (size_t j = 0; j < r->n; j++) {
			for (int k = 0; k < 8; k++) /* little-endian */
				e->hashes[j].bytes[k] = (uint8_t)(ids[j] >> (8 * k));
			/* The payload starts with the id: each block's bytes
			 * are its own. */
			memcpy(e->slots_mem + j * o->block_bytes,
			       e->hashes[j].bytes, 8);
		}
		size_t hit = 0;
		/* A request without blocks has nothing to look up (and a
		 * lookup of 0 pages as a linker's first one would memset
		 * NULL). */
		if (r->n &&
		    kvl_linker_lookup(lk, e->hashes, r->n, NULL, NULL, &hit)) {
			fprintf(stderr, "kvlink replay: request %zu: lookup: "
			                "%s\n",
			        i + 1, kvl_linker_errmsg(lk));
			goto out;
		}
		res->hit_blocks += hit;
		res->blocks += r->n;
		uint64_t ht = (uint64_t)hit * o->block_tokens;
		res->hit_tokens += ht < r->input_len ? ht : r->input_len;
		if (r->n) {
			const size_t *sl[1] = {e->slots};
			kvl_completion c;
			size_t got = 0;
			int orc = kvl_linker_offload(lk, i, e->hashes, r->n, NULL,
			                             sl);
			if (orc == 0)
				orc = kvl_linker_flush(lk, 60000);
			if (orc == 0)
				orc = kvl_linker_poll(lk, &c, 1, &got, 60000);
			if (orc == 0 && got == 1 && c.status)
				orc = c.status;
			if (orc || got != 1) {
				fprintf(stderr, "kvlink replay: request %zu: "
				                "offload: %s (%s)\n",
				        i + 1,
				        orc ? kvl_strerror(orc) : "no completion",
				        kvl_linker_errmsg(lk));
				goto out;
			}
		}
		if (o->progress)
			progress(res, i + 1, t->n_reqs, &last_pct);
	}
	res->wall_s = (double)(kvl__now_ns() - t0) / 1e9;
	kvl_store_stats ss;
	kvl_store_stats_get(st, &ss);
	res->evictions = ss.evictions;
	res->stored = ss.puts;
	rc = 0;
out:
	kvl_linker_close(lk);
	kvl_store_close(st);
	return rc;
}

/* ----------------------------------------------------------------- output */

/* Writes s as a JSON string. */
static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void print_json(const rp_opts *o, const rp_trace *t,
                       const rp_result *r)
{
	printf("{\"trace\":");
	json_str(stdout, t->path);
	printf(",\"policy\":");
	json_str(stdout, r->policy);
	if (r->capacity_blocks == RP_UNLIMITED)
		printf(",\"capacity_blocks\":null");
	else
		printf(",\"capacity_blocks\":%llu",
		       (unsigned long long)r->capacity_blocks);
	printf(",\"capacity_bytes\":");
	if (o->capacity_bytes)
		printf("%llu", (unsigned long long)o->capacity_bytes);
	else
		printf("null");
	printf(",\"block_bytes\":%llu,\"block_tokens\":%llu,"
	       "\"requests\":%zu,\"bad_lines\":%llu,\"blocks\":%llu,"
	       "\"hit_blocks\":%llu,\"input_tokens\":%llu,"
	       "\"hit_tokens\":%llu,\"token_hit_ratio\":%.6f,"
	       "\"block_hit_ratio\":%.6f,\"stored_blocks\":%llu,"
	       "\"evictions\":%llu,\"wall_s\":%.3f,"
	       "\"requests_per_s\":%.1f}\n",
	       (unsigned long long)o->block_bytes,
	       (unsigned long long)o->block_tokens, t->n_reqs,
	       (unsigned long long)t->bad_lines,
	       (unsigned long long)r->blocks,
	       (unsigned long long)r->hit_blocks,
	       (unsigned long long)t->input_tokens,
	       (unsigned long long)r->hit_tokens,
	       ratio(r->hit_tokens, t->input_tokens),
	       ratio(r->hit_blocks, r->blocks),
	       (unsigned long long)r->stored,
	       (unsigned long long)r->evictions, r->wall_s,
	       r->wall_s > 0 ? (double)t->n_reqs / r->wall_s : 0);
	fflush(stdout);
}

static void print_header(const rp_opts *o, const rp_trace *t)
{
	printf("kvlink replay: %s: %zu requests, %zu blocks of %llu tokens, "
	       "%llu input tokens",
	       t->path, t->n_reqs, t->n_ids,
	       (unsigned long long)o->block_tokens,
	       (unsigned long long)t->input_tokens);
	if (t->bad_lines)
		printf(", %llu malformed lines skipped",
		       (unsigned long long)t->bad_lines);
	printf("\n");
}

static void cap_text(char *buf, size_t len, const rp_opts *o,
                     uint64_t cap_blocks)
{
	if (cap_blocks != RP_UNLIMITED)
		snprintf(buf, len, "%llu", (unsigned long long)cap_blocks);
	else if (o->capacity_bytes)
		snprintf(buf, len, "%llu B",
		         (unsigned long long)o->capacity_bytes);
	else
		snprintf(buf, len, "unlimited");
}

static void print_text(const rp_opts *o, const rp_trace *t,
                       const rp_result *r)
{
	char cap[48];
	cap_text(cap, sizeof cap, o, r->capacity_blocks);
	printf("  policy         %s\n", r->policy);
	printf("  capacity       %s%s\n", cap,
	       r->capacity_blocks != RP_UNLIMITED ? " blocks" : "");
	printf("  token hits     %.2f %%  (%llu of %llu input tokens)\n",
	       100 * ratio(r->hit_tokens, t->input_tokens),
	       (unsigned long long)r->hit_tokens,
	       (unsigned long long)t->input_tokens);
	printf("  block hits     %.2f %%  (%llu of %llu blocks)\n",
	       100 * ratio(r->hit_blocks, r->blocks),
	       (unsigned long long)r->hit_blocks,
	       (unsigned long long)r->blocks);
	printf("  stored         %llu blocks, %llu evictions\n",
	       (unsigned long long)r->stored,
	       (unsigned long long)r->evictions);
	printf("  replay         %.2f s, %.0f requests/s\n", r->wall_s,
	       r->wall_s > 0 ? (double)t->n_reqs / r->wall_s : 0);
}

static void print_row(const rp_opts *o, const rp_trace *t,
                      const rp_result *r)
{
	char cap[48];
	cap_text(cap, sizeof cap, o, r->capacity_blocks);
	printf("  %10s  %-8s %9.2f %%  %9.2f %%  %10llu  %10.0f\n", cap,
	       r->policy, 100 * ratio(r->hit_tokens, t->input_tokens),
	       100 * ratio(r->hit_blocks, r->blocks),
	       (unsigned long long)r->evictions,
	       r->wall_s > 0 ? (double)t->n_reqs / r->wall_s : 0);
	fflush(stdout);
}

/* ------------------------------------------------------------------- plot */

static const char *const plot_colors[] = {"#1f77b4", "#d62728", "#2ca02c",
                                          "#9467bd", "#ff7f0e", "#8c564b",
                                          "#e377c2", "#7f7f7f"};

/* Writes s with XML's special characters escaped. */
static void xml_str(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs("&quot;", f); break;
		default: fputc(*s, f);
		}
	}
}

/* "500", "2k", "10k", "1.5M" */
static void short_count(char *buf, size_t len, double v)
{
	if (v >= 1e6)
		snprintf(buf, len, "%gM", v / 1e6);
	else if (v >= 1e3)
		snprintf(buf, len, "%gk", v / 1e3);
	else
		snprintf(buf, len, "%g", v);
}

/* Hit ratio against capacity, one line per policy. results[p * n_caps + c]
 * is policy p at capacity o->sweep[c]. 0, or 1 after printing why. */
static int write_plot(const rp_opts *o, const rp_trace *t,
                      const rp_result *results, size_t n_pol)
{
	FILE *f = fopen(o->plot, "w");
	if (!f) {
		fprintf(stderr, "kvlink replay: cannot write %s: %s\n", o->plot,
		        strerror(errno));
		return 1;
	}
	const double W = 800, H = 500, L = 80, R = 190, T = 64, B = 70;
	const double pw = W - L - R, ph = H - T - B;
	size_t nc = o->n_sweep;
	/* Finite capacities on the x axis; unlimited gets its own column. */
	double lo = 0, hi = 0;
	int has_unl = 0;
	for (size_t c = 0; c < nc; c++) {
		if (o->sweep[c] == RP_UNLIMITED) {
			has_unl = 1;
			continue;
		}
		double v = (double)o->sweep[c];
		if (lo == 0 || v < lo)
			lo = v;
		if (v > hi)
			hi = v;
	}
	int finite = lo > 0;
	if (finite && hi == lo) {
		lo /= 2;
		hi *= 2;
	}
	int logx = finite && hi / lo >= 8;
	double xw = has_unl ? pw - 70 : pw; /* width of the finite part */
	double ymax = 0;
	for (size_t i = 0; i < n_pol * nc; i++) {
		double y = 100 * ratio(results[i].hit_tokens, t->input_tokens);
		if (y > ymax)
			ymax = y;
	}
	double ytop = ymax <= 0 ? 10 : (double)((int)(ymax / 10) + 1) * 10;
	if (ytop > 100)
		ytop = 100;
	double ystep = ytop <= 30 ? 5 : 10;
#define PX(v) (logx ? L + xw * (log10(v) - log10(lo)) / (log10(hi) - log10(lo)) \
                    : L + xw * ((v) - lo) / (hi - lo))
#define PY(v) (T + ph * (1 - (v) / ytop))
	double xunl = L + pw - 25;

	fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" "
	           "height=\"%g\" viewBox=\"0 0 %g %g\" "
	           "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
	        W, H, W, H);
	fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
	/* Title and subtitle. */
	const char *base = strrchr(t->path, '/');
	base = base ? base + 1 : t->path;
	fprintf(f, "<text x=\"%g\" y=\"26\" font-size=\"17\" "
	           "font-weight=\"bold\" text-anchor=\"middle\">"
	           "Token hit ratio vs. store capacity: ",
	        W / 2);
	xml_str(f, base);
	fprintf(f, "</text>\n");
	fprintf(f, "<text x=\"%g\" y=\"46\" font-size=\"12\" fill=\"#444\" "
	           "text-anchor=\"middle\">kvlink replay: %zu requests, "
	           "%zu blocks of %llu tokens, through the linker and the "
	           "embedded store</text>\n",
	        W / 2, t->n_reqs, t->n_ids,
	        (unsigned long long)o->block_tokens);
	/* Grid and y ticks. */
	for (double y = 0; y <= ytop + 1e-9; y += ystep) {
		fprintf(f, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" "
		           "stroke=\"#e3e3e3\"/>\n",
		        L, PY(y), L + pw, PY(y));
		fprintf(f, "<text x=\"%g\" y=\"%.1f\" font-size=\"12\" "
		           "text-anchor=\"end\">%g</text>\n",
		        L - 8, PY(y) + 4, y);
	}
	/* x ticks: 1-2-5 steps on a log axis, else about 6 even steps. */
	if (finite) {
		double ticks[64];
		size_t nt = 0;
		if (logx) {
			for (double d = pow(10, floor(log10(lo))); d <= hi * 1.0001;
			     d *= 10)
				for (int k = 0; k < 3 && nt < 64; k++) {
					double v = d * (k == 0 ? 1 : k == 1 ? 2 : 5);
					if (v >= lo * 0.9999 && v <= hi * 1.0001)
						ticks[nt++] = v;
				}
		} else {
			double raw = (hi - lo) / 6, mag = pow(10, floor(log10(raw)));
			double step = raw / mag < 1.5 ? mag :
			              raw / mag < 3.5 ? 2 * mag :
			              raw / mag < 7.5 ? 5 * mag : 10 * mag;
			for (double v = ceil(lo / step) * step;
			     v <= hi * 1.0001 && nt < 64; v += step)
				ticks[nt++] = v;
		}
		for (size_t i = 0; i < nt; i++) {
			char lb[32];
			short_count(lb, sizeof lb, ticks[i]);
			fprintf(f, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" "
			           "y2=\"%g\" stroke=\"#e3e3e3\"/>\n",
			        PX(ticks[i]), T, PX(ticks[i]), T + ph);
			fprintf(f, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" "
			           "y2=\"%g\" stroke=\"#333\"/>\n",
			        PX(ticks[i]), T + ph, PX(ticks[i]), T + ph + 5);
			fprintf(f, "<text x=\"%.1f\" y=\"%g\" font-size=\"12\" "
			           "text-anchor=\"middle\">%s</text>\n",
			        PX(ticks[i]), T + ph + 20, lb);
		}
	}
	if (has_unl) {
		fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" "
		           "stroke=\"#333\"/>\n",
		        xunl, T + ph, xunl, T + ph + 5);
		fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"12\" "
		           "text-anchor=\"middle\">unlimited</text>\n",
		        xunl, T + ph + 20);
	}
	/* Axes and their labels. */
	fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" "
	           "fill=\"none\" stroke=\"#333\"/>\n",
	        L, T, pw, ph);
	fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"13\" "
	           "text-anchor=\"middle\">store capacity (blocks of %llu "
	           "tokens%s)</text>\n",
	        L + pw / 2, H - 22, (unsigned long long)o->block_tokens,
	        logx ? ", log scale" : "");
	fprintf(f, "<text x=\"22\" y=\"%g\" font-size=\"13\" "
	           "text-anchor=\"middle\" transform=\"rotate(-90 22 %g)\">"
	           "token hit ratio (%%)</text>\n",
	        T + ph / 2, T + ph / 2);
	/* One line per policy; the segment to "unlimited" is dashed. */
	for (size_t p = 0; p < n_pol; p++) {
		const char *col = plot_colors[p % 8];
		const rp_result *rs = results + p * nc;
		double lx = -1, ly = 0;
		fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" "
		           "stroke-width=\"2.2\" points=\"",
		        col);
		for (size_t c = 0; c < nc; c++) {
			if (o->sweep[c] == RP_UNLIMITED)
				continue;
			lx = PX((double)o->sweep[c]);
			ly = PY(100 * ratio(rs[c].hit_tokens, t->input_tokens));
			fprintf(f, "%.1f,%.1f ", lx, ly);
		}
		fprintf(f, "\"/>\n");
		for (size_t c = 0; c < nc; c++) {
			double y = 100 * ratio(rs[c].hit_tokens, t->input_tokens);
			double x = o->sweep[c] == RP_UNLIMITED
			                   ? xunl
			                   : PX((double)o->sweep[c]);
			if (o->sweep[c] == RP_UNLIMITED && lx >= 0)
				fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" "
				           "x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
				           "stroke-width=\"1.5\" "
				           "stroke-dasharray=\"5,4\"/>\n",
				        lx, ly, x, PY(y), col);
			fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" "
			           "fill=\"%s\"><title>%s, %s: %.2f %%</title>"
			           "</circle>\n",
			        x, PY(y), col, rs[c].policy,
			        o->sweep[c] == RP_UNLIMITED ? "unlimited" : "",
			        y);
		}
	}
	/* Legend. */
	double lgx = L + pw + 20, lgy = T + 10;
	fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"13\" "
	           "font-weight=\"bold\">eviction policy</text>\n",
	        lgx, lgy);
	for (size_t p = 0; p < n_pol; p++) {
		double y = lgy + 24 + 22 * (double)p;
		fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" "
		           "stroke=\"%s\" stroke-width=\"2.2\"/>\n",
		        lgx, y - 4, lgx + 26, y - 4, plot_colors[p % 8]);
		fprintf(f, "<circle cx=\"%g\" cy=\"%g\" r=\"3.5\" fill=\"%s\"/>\n",
		        lgx + 13, y - 4, plot_colors[p % 8]);
		fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"13\">", lgx + 34,
		        y);
		xml_str(f, results[p * nc].policy);
		if (!strcmp(results[p * nc].policy, kvl__mem_policy_name(0)))
			fputs(" (default)", f);
		fputs("</text>\n", f);
	}
	/* The values at each capacity, under the legend. */
	double ty = lgy + 24 + 22 * (double)n_pol + 18;
	fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"12\" "
	           "font-weight=\"bold\">token hits (%%)</text>\n",
	        lgx, ty);
	for (size_t c = 0; c < nc && c < 14; c++) {
		char lb[32];
		if (o->sweep[c] == RP_UNLIMITED)
			snprintf(lb, sizeof lb, "\u221e"); /* infinity */
		else
			short_count(lb, sizeof lb, (double)o->sweep[c]);
		ty += 17;
		fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"11\">%s</text>\n",
		        lgx, ty, lb);
		for (size_t p = 0; p < n_pol && p < 2; p++)
			fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"11\" "
			           "fill=\"%s\" text-anchor=\"end\">%.2f</text>\n",
			        lgx + 95 + 55 * (double)p, ty, plot_colors[p % 8],
			        100 * ratio(results[p * nc + c].hit_tokens,
			                    t->input_tokens));
	}
	fprintf(f, "</svg>\n");
#undef PX
#undef PY
	if (fclose(f)) {
		fprintf(stderr, "kvlink replay: writing %s: %s\n", o->plot,
		        strerror(errno));
		return 1;
	}
	return 0;
}

/* ---------------------------------------------------------------- options */

static void replay_usage(FILE *f)
{
	fprintf(f,
	        "usage: kvlink replay [OPTIONS] TRACE.jsonl   (- reads stdin)\n"
	        "Replays a Mooncake trace (timestamp, input_length, "
	        "output_length, hash_ids)\nthrough the linker and the embedded "
	        "store; reports token and block hit ratios.\n"
	        "  --capacity-blocks N  store at most N blocks (store option "
	        "max_objects)\n"
	        "  --capacity BYTES     store byte capacity (K, M, G, T, KiB, "
	        "... suffixes)\n"
	        "                       (neither: unlimited)\n"
	        "  --policy NAME[,NAME] eviction policy: ");
	for (size_t i = 0; kvl__mem_policy_name(i); i++)
		fprintf(f, "%s%s%s", i ? ", " : "", kvl__mem_policy_name(i),
		        i ? "" : " (default)");
	fprintf(f,
	        "\n"
	        "  --sweep CAP,CAP,...  replay at each capacity in blocks "
	        "(\"unlimited\" too),\n"
	        "                       with each --policy (default: all)\n"
	        "  --plot FILE.svg      with --sweep: draw hit ratio against "
	        "capacity\n"
	        "  --block-bytes N      bytes of each stored block (64; a "
	        "multiple of 8)\n"
	        "  --block-tokens N     tokens per hash_id block (512)\n"
	        "  --json               one JSON object per replay\n"
	        "  --skip-bad           count and skip malformed lines "
	        "instead of stopping\n"
	        "  --no-progress        no progress bar (shown only on a "
	        "terminal)\n");
}

static int known_policy(const char *name)
{
	for (size_t i = 0; kvl__mem_policy_name(i); i++)
		if (!strcmp(name, kvl__mem_policy_name(i)))
			return 1;
	return 0;
}

/* Splits a comma-separated list in place into items (at most cap). -1 when
 * an item is empty or there are too many. */
static int split_list(char *s, const char **items, size_t cap, size_t *n)
{
	*n = 0;
	for (char *p = s;;) {
		char *c = strchr(p, ',');
		if (c)
			*c = 0;
		if (!*p || *n == cap)
			return -1;
		items[(*n)++] = p;
		if (!c)
			return 0;
		p = c + 1;
	}
}

int kvl_cmd_replay(int argc, char **argv)
{
	rp_opts o = {.block_bytes = 64, .block_tokens = 512,
	             .capacity_blocks = RP_UNLIMITED,
	             .progress = isatty(2)};
	int have_cap_blocks = 0;
	char *policy_arg = NULL, *sweep_arg = NULL;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			replay_usage(stdout);
			return 0;
		} else if (!strcmp(a, "--json")) {
			o.json = 1;
		} else if (!strcmp(a, "--skip-bad")) {
			o.skip_bad = 1;
		} else if (!strcmp(a, "--no-progress")) {
			o.progress = 0;
		} else if (!strcmp(a, "--capacity-blocks")) {
			if (!v || kvl_cli_parse_u64(v, &o.capacity_blocks) ||
			    o.capacity_blocks == 0 ||
			    o.capacity_blocks == RP_UNLIMITED)
				return kvl_cli_usage_error(
					"replay", "--capacity-blocks needs an "
					          "integer >= 1 (leave it out for "
					          "unlimited)");
			have_cap_blocks = 1;
			i++;
		} else if (!strcmp(a, "--capacity")) {
			if (!v || kvl__parse_size(v, &o.capacity_bytes) ||
			    o.capacity_bytes == 0)
				return kvl_cli_usage_error(
					"replay", "--capacity needs a byte size "
					          "> 0, e.g. 64MiB (got '%s')",
					v ? v : "");
			i++;
		} else if (!strcmp(a, "--block-bytes")) {
			if (!v || kvl_cli_parse_u64(v, &o.block_bytes) ||
			    o.block_bytes < 8 || o.block_bytes % 8 ||
			    o.block_bytes > (1u << 30))
				return kvl_cli_usage_error(
					"replay", "--block-bytes needs a multiple "
					          "of 8 from 8 to 1 GiB");
			i++;
		} else if (!strcmp(a, "--block-tokens")) {
			if (!v || kvl_cli_parse_u64(v, &o.block_tokens) ||
			    o.block_tokens == 0 || o.block_tokens > UINT32_MAX)
				return kvl_cli_usage_error(
					"replay", "--block-tokens needs an "
					          "integer from 1 to 2^32-1");
			i++;
		} else if (!strcmp(a, "--policy")) {
			if (!v)
				return kvl_cli_usage_error(
					"replay", "--policy needs a name");
			policy_arg = argv[++i];
		} else if (!strcmp(a, "--sweep")) {
			if (!v)
				return kvl_cli_usage_error(
					"replay", "--sweep needs capacities");
			sweep_arg = argv[++i];
		} else if (!strcmp(a, "--plot")) {
			if (!v)
				return kvl_cli_usage_error(
					"replay", "--plot needs a file name");
			o.plot = argv[++i];
		} else if (a[0] == '-' && a[1]) {
			return kvl_cli_usage_error("replay",
			                           "unknown option '%s'", a);
		} else if (o.trace) {
			return kvl_cli_usage_error(
				"replay", "one trace at a time ('%s' and '%s')",
				o.trace, a);
		} else {
			o.trace = a;
		}
	}
	if (!o.trace)
		return kvl_cli_usage_error("replay", "which trace? (kvlink "
		                                     "replay --help)");
	if (policy_arg) {
		if (split_list(policy_arg, o.policies, RP_MAX_POLICIES,
		               &o.n_policies))
			return kvl_cli_usage_error(
				"replay", "--policy: a comma-separated list of "
				          "at most %d names",
				RP_MAX_POLICIES);
		for (size_t p = 0; p < o.n_policies; p++)
			if (!known_policy(o.policies[p]))
				return kvl_cli_usage_error(
					"replay", "--policy: unknown policy '%s' "
					          "(replay --help lists them)",
					o.policies[p]);
	}
	if (sweep_arg) {
		const char *items[RP_MAX_SWEEP];
		size_t n;
		if (have_cap_blocks)
			return kvl_cli_usage_error(
				"replay", "--sweep and --capacity-blocks "
				          "exclude each other");
		if (split_list(sweep_arg, items, RP_MAX_SWEEP, &n))
			return kvl_cli_usage_error(
				"replay", "--sweep: a comma-separated list of at "
				          "most %d capacities",
				RP_MAX_SWEEP);
		for (size_t c = 0; c < n; c++) {
			uint64_t v;
			if (!strcmp(items[c], "unlimited")) {
				v = RP_UNLIMITED;
			} else if (kvl_cli_parse_u64(items[c], &v) || v == 0 ||
			           v == RP_UNLIMITED) {
				return kvl_cli_usage_error(
					"replay", "--sweep: '%s' is not a capacity "
					          "in blocks (an integer >= 1, or "
					          "unlimited)",
					items[c]);
			}
			o.sweep[o.n_sweep++] = v;
		}
		if (!o.n_policies)
			while (kvl__mem_policy_name(o.n_policies) &&
			       o.n_policies < RP_MAX_POLICIES) {
				o.policies[o.n_policies] =
					kvl__mem_policy_name(o.n_policies);
				o.n_policies++;
			}
	} else {
		if (o.plot)
			return kvl_cli_usage_error("replay",
			                           "--plot needs --sweep");
		o.sweep[o.n_sweep++] = o.capacity_blocks;
	}
	if (!o.n_policies)
		o.policies[o.n_policies++] = NULL; /* the store's default */

	rp_trace t;
	if (trace_load(&t, o.trace, o.block_tokens, o.skip_bad))
		return 1;
	rp_env env = {0};
	size_t n_runs = o.n_policies * o.n_sweep;
	rp_result *res = calloc(n_runs, sizeof *res);
	int rc = 1;
	if (!res || env_init(&env, &o, &t))
		goto out;
	if (!o.json)
		print_header(&o, &t);
	if (!o.json && n_runs > 1)
		printf("  %10s  %-8s %11s  %11s  %10s  %10s\n", "capacity",
		       "policy", "token hits", "block hits", "evictions",
		       "requests/s");
	for (size_t c = 0; c < o.n_sweep; c++)
		for (size_t p = 0; p < o.n_policies; p++) {
			rp_result *r = &res[p * o.n_sweep + c];
			if (replay_one(&o, &t, &env, o.policies[p], o.sweep[c],
			               r))
				goto out;
			if (o.json)
				print_json(&o, &t, r);
			else if (n_runs > 1)
				print_row(&o, &t, r);
			else
				print_text(&o, &t, r);
		}
	if (o.plot && write_plot(&o, &t, res, o.n_policies))
		goto out;
	rc = 0;
out:
	env_free(&env);
	free(res);
	trace_free(&t);
	return rc;
}
