/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_redis_reply.c — libFuzzer target: Redis replies as the redis://
 * store reads them — the data path's own RESP parser
 * (src/store/redis/pipeline.c, which scatters GETRANGE payloads straight
 * into destination memory) and the classification of error replies
 * (MOVED/ASK redirections, addresses: src/store/redis/spec.c).
 *
 * Each input is one pipeline over a real socket: the target listens on a
 * loopback port, opens a kvl__rconn to itself, accepts, writes the reply
 * bytes as the "server", shuts its sending side (so the client sees the end
 * of the stream after them), and runs a job of 1..12 operations (EXISTS,
 * GETRANGE with scattered segments, EXISTS+STRLEN, SET, UNLINK; some after
 * ASKING). The server never reads: the commands sit in its socket buffer.
 *
 * Input: byte 0 bit 0 picks how the replies are made: raw (the rest of the
 * input after the operations, as is) or generated (each operation's
 * replies from a few bytes: well-formed, or with one defect, including
 * payloads up to 96 KiB that take the in-place receive path). Then one
 * byte gives the operation count, and 6 bytes describe each operation.
 *
 * The outcome of every operation is compared with an independent reading
 * of the bytes written (the RESP rules kvlink implements): the same
 * outcome kind, the same integers, the same error messages in order, and
 * for a GETRANGE answered by a payload of exactly its length, every
 * destination segment holds exactly its bytes of the payload; guard bytes
 * around every destination stay untouched. Every error message also goes
 * through kvl__redis_classify (and a redirection's address through
 * kvl__redis_parse_addr), whose results must be in range.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "store/redis/spec.h"
#include "store/redis/pipeline.h"

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr,                                      \
			        "fuzz_redis_reply: check failed: %s (line %d)\n", \
			        #cond, __LINE__);                            \
			abort();                                             \
		}                                                            \
	} while (0)

#define MAX_OPS 12
#define MAX_SEGS 4
#define GUARD 16
#define GUARD_BYTE 0x5c
#define MAX_GEN (512u << 10) /* generated reply bytes, at most */

static int listen_fd = -1;
static int listen_port;

static void setup(void)
{
	if (listen_fd >= 0)
		return;
	listen_fd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(listen_fd >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(bind(listen_fd, (struct sockaddr *)&a, sizeof a) == 0);
	CHECK(listen(listen_fd, 4) == 0);
	socklen_t al = sizeof a;
	CHECK(getsockname(listen_fd, (struct sockaddr *)&a, &al) == 0);
	listen_port = ntohs(a.sin_port);
}

/* ------------------------------------------------------------ the job */

typedef struct fop {
	kvl__rop op;
	kvl__rseg seg[MAX_SEGS];
	char *dst[MAX_SEGS]; /* GUARD + len + GUARD bytes, or NULL */
	char key[16];
	kvl_iov piece;
	char value[8];
} fop;

/* What the independent reading expects of one operation. */
typedef struct expect {
	int out;
	int64_t ival[2];
	const char *payload; /* BULK: its bytes in the reply */
	size_t n_err;        /* error messages it produced */
} expect;

typedef struct errmsg {
	const char *s;
	size_t n;
} errmsg;

static errmsg got_err[64];
static size_t n_got_err;

static void on_error(void *ctx, kvl__rconn *c, kvl__rop *op, const char *msg,
                     size_t len)
{
	(void)ctx;
	(void)c;
	(void)op;
	/* The message is valid only now: keep a copy. */
	char *copy = malloc(len ? len : 1);
	CHECK(copy);
	memcpy(copy, msg, len);
	if (n_got_err < 64)
		got_err[n_got_err++] = (errmsg){copy, len};
	else
		free(copy);
	uint16_t slot = 0xffff;
	char host[KVL__REDIS_HOST_MAX];
	int port = -1;
	kvl__redis_err_kind k = kvl__redis_classify(msg, len, &slot, host,
	                                            &port);
	CHECK(k >= KVL__REDIS_ERR_OTHER && k <= KVL__REDIS_ERR_AUTH);
	if (k == KVL__REDIS_ERR_MOVED || k == KVL__REDIS_ERR_ASK) {
		CHECK(slot < KVL__REDIS_SLOTS);
		CHECK(memchr(host, '\0', sizeof host));
		CHECK(port >= 1 && port <= 65535);
	}
	char h2[KVL__REDIS_HOST_MAX];
	int p2 = -1;
	if (kvl__redis_parse_addr(msg, len, h2, &p2) == 0)
		CHECK(h2[0] && memchr(h2, '\0', sizeof h2) && p2 >= 1 &&
		      p2 <= 65535);
}

static const char *set_tail = "\r\n$2\r\nNX\r\n";

/* Builds n ops from 6 bytes each. */
static void build_ops(fop *ops, size_t n, const uint8_t *d)
{
	for (size_t i = 0; i < n; i++, d += 6) {
		fop *f = &ops[i];
		memset(f, 0, sizeof *f);
		snprintf(f->key, sizeof f->key, "k%zu", i);
		f->op.key = f->key;
		f->op.klen = (uint32_t)strlen(f->key);
		f->op.kind = d[0] % 5;
		f->op.asking = (d[0] >> 3) & 1;
		f->op.index = (uint32_t)i;
		if (f->op.kind == KVL__ROP_PUT) {
			memcpy(f->value, "v0123456", 8);
			f->piece = (kvl_iov){f->value, 1 + d[1] % 8};
			f->op.pieces = &f->piece;
			f->op.npieces = 1;
			f->op.vlen = f->piece.len;
		}
		if (f->op.kind != KVL__ROP_GET)
			continue;
		/* [lo, hi): up to 96 KiB; 1..4 segments inside it. */
		uint64_t lo = d[1];
		uint64_t span = 1 + (uint64_t)(d[2] | (d[3] & 0x7f) << 8) * 3;
		f->op.lo = lo;
		f->op.hi = lo + span;
		unsigned ns = 1 + (d[4] & 3);
		uint64_t pos = lo;
		for (unsigned s = 0; s < ns && pos < f->op.hi; s++) {
			uint64_t room = f->op.hi - pos;
			/* A gap before the segment, then its length. */
			uint64_t gap = (d[5] >> (2 * s)) & 1 ? room / 4 : 0;
			uint64_t len = s + 1 == ns ? room - gap
			                           : (room - gap) / 2 + 1;
			if (len > room - gap)
				len = room - gap;
			if (len == 0)
				break;
			kvl__rseg *g = &f->seg[f->op.nseg];
			g->off = pos + gap;
			g->len = (size_t)len;
			if ((d[5] >> (2 * s + 1)) & 1) {
				g->addr = NULL; /* dropped bytes */
			} else {
				f->dst[f->op.nseg] = malloc(g->len + 2 * GUARD);
				CHECK(f->dst[f->op.nseg]);
				memset(f->dst[f->op.nseg], GUARD_BYTE,
				       g->len + 2 * GUARD);
				g->addr = f->dst[f->op.nseg] + GUARD;
			}
			f->op.nseg++;
			pos = g->off + g->len;
		}
		f->op.seg = f->seg;
	}
}

/* ---------------------------------------------- generated replies */

typedef struct buf {
	char *p;
	size_t n, cap;
} buf;

static void put(buf *b, const void *s, size_t n)
{
	if (n == 0)
		return;
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->n + n)
			cap *= 2;
		b->p = realloc(b->p, cap);
		CHECK(b->p);
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
}

static void puts_(buf *b, const char *s)
{
	put(b, s, strlen(s));
}

/* One reply for an op from control byte c (and x for sizes): mostly what
 * Redis would send, sometimes not. */
static void gen_reply(buf *b, const fop *f, int asking_reply, uint8_t c,
                      uint8_t x)
{
	char line[64];
	switch (c % 16) {
	case 0: /* the expected kind */
	case 1:
	case 2:
	case 3:
		if (asking_reply) {
			puts_(b, "+OK\r\n");
		} else if (f->op.kind == KVL__ROP_GET) {
			uint64_t n = f->op.hi - f->op.lo;
			snprintf(line, sizeof line, "$%llu\r\n",
			         (unsigned long long)n);
			puts_(b, line);
			if (b->n + n + 2 > MAX_GEN)
				return; /* truncated: the stream ends here */
			for (uint64_t i = 0; i < n; i++)
				put(b, (char[1]){(char)(i * 7 + x)}, 1);
			puts_(b, "\r\n");
		} else if (f->op.kind == KVL__ROP_PUT) {
			puts_(b, x & 1 ? "+OK\r\n" : "$-1\r\n");
		} else {
			snprintf(line, sizeof line, ":%d\r\n", (int)x - 100);
			puts_(b, line);
		}
		return;
	case 4:
		puts_(b, "-ERR wrong type\r\n");
		return;
	case 5:
		snprintf(line, sizeof line, "-MOVED %u 127.0.0.%u:%u\r\n",
		         x * 61u, x % 3, 6379u + x);
		puts_(b, line);
		return;
	case 6:
		snprintf(line, sizeof line, "-ASK %u [::%u]:%u\r\n", x * 64u,
		         x, x * 300u);
		puts_(b, line);
		return;
	case 7: /* a bulk of another length */
		snprintf(line, sizeof line, "$%u\r\n", x % 20);
		puts_(b, line);
		for (unsigned i = 0; i < x % 20; i++)
			puts_(b, "z");
		puts_(b, "\r\n");
		return;
	case 8:
		puts_(b, "$-1\r\n");
		return;
	case 9:
		puts_(b, ":9223372036854775807\r\n");
		return;
	case 10: /* a bad integer */
		puts_(b, x & 1 ? ":12a\r\n" : ":99999999999999999999\r\n");
		return;
	case 11: /* an unknown type */
		puts_(b, x & 1 ? "*1\r\n" : "%2\r\n");
		return;
	case 12: /* a bare LF, an empty line */
		puts_(b, x & 1 ? "+OK\n" : "\r\n");
		return;
	case 13: /* a payload not followed by CRLF */
		if (f->op.kind == KVL__ROP_GET && !asking_reply) {
			uint64_t n = f->op.hi - f->op.lo;
			snprintf(line, sizeof line, "$%llu\r\n",
			         (unsigned long long)n);
			puts_(b, line);
			for (uint64_t i = 0; i < n && b->n < MAX_GEN; i++)
				puts_(b, "p");
			puts_(b, "xx");
		} else {
			puts_(b, "+QUEUED\r\n");
		}
		return;
	case 14: /* the stream stops inside this reply */
		puts_(b, x & 1 ? "$5\r\nab" : ":1");
		return;
	default:
		puts_(b, "-TRYAGAIN Multiple keys request during "
		         "rehashing of slot\r\n");
		return;
	}
}

/* ------------------------------------------ the independent reading */

static int ref_i64(const char *s, size_t n, int64_t *out)
{
	int neg = n && *s == '-';
	s += neg;
	n -= (size_t)neg;
	if (n == 0 || n > 19)
		return -1;
	unsigned __int128 v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v > INT64_MAX)
		return -1;
	*out = neg ? -(int64_t)v : (int64_t)v;
	return 0;
}

/* Reads replies r[0..n) for ops[0..k) as kvlink must; fills e[]. Returns
 * the messages of error replies in order through errs. */
static void reference(const char *r, size_t n, const fop *ops, size_t k,
                      expect *e, errmsg *errs, size_t *n_errs)
{
	size_t pos = 0, ne = 0;
	size_t i = 0;
	for (; i < k; i++) {
		const fop *f = &ops[i];
		unsigned nrep = (f->op.asking ? 1u : 0u) +
		                (f->op.kind == KVL__ROP_CHECK ? 2u : 1u);
		memset(&e[i], 0, sizeof e[i]);
		e[i].out = KVL__ROUT_NONE;
		for (unsigned j = 0; j < nrep; j++) {
			int asking = f->op.asking && j == 0;
			unsigned main = j - (f->op.asking ? 1u : 0u);
			const char *nl = memchr(r + pos, '\n', n - pos);
			if (!nl)
				goto lost; /* the stream ends inside the line */
			size_t ll = (size_t)(nl - (r + pos));
			if (ll < 2 || nl[-1] != '\r')
				goto lost; /* bad line end or empty line */
			const char *line = r + pos;
			size_t len = ll - 1; /* without "\r" */
			pos += ll + 1;
			char t = line[0];
			int64_t v;
			if (t == '+') {
				if (!asking && e[i].out == KVL__ROUT_NONE)
					e[i].out = f->op.kind == KVL__ROP_PUT
					                   ? KVL__ROUT_OK
					                   : KVL__ROUT_PROTO;
			} else if (t == '-') {
				if (e[i].out != KVL__ROUT_ERR) {
					e[i].out = KVL__ROUT_ERR;
					errs[ne++] = (errmsg){line + 1, len - 1};
					e[i].n_err++;
				}
			} else if (t == ':') {
				if (ref_i64(line + 1, len - 1, &v))
					goto lost;
				if (!asking) {
					e[i].ival[main & 1] = v;
					if (e[i].out == KVL__ROUT_NONE ||
					    e[i].out == KVL__ROUT_INT)
						e[i].out =
							f->op.kind == KVL__ROP_EXISTS ||
									f->op.kind == KVL__ROP_CHECK ||
									f->op.kind == KVL__ROP_DEL
								? KVL__ROUT_INT
								: KVL__ROUT_PROTO;
				}
			} else if (t == '$') {
				if (ref_i64(line + 1, len - 1, &v) || v < -1)
					goto lost;
				if (v < 0) {
					if (!asking && e[i].out == KVL__ROUT_NONE)
						e[i].out = f->op.kind == KVL__ROP_PUT
						                   ? KVL__ROUT_NIL
						                   : KVL__ROUT_PROTO;
					continue;
				}
				if (f->op.kind == KVL__ROP_GET && !asking &&
				    e[i].out == KVL__ROUT_NONE &&
				    (uint64_t)v == f->op.hi - f->op.lo) {
					if (n - pos < (uint64_t)v + 2)
						goto lost;
					if (r[pos + v] != '\r' ||
					    r[pos + v + 1] != '\n')
						goto lost;
					e[i].payload = r + pos;
					e[i].out = KVL__ROUT_BULK;
					pos += (size_t)v + 2;
					continue;
				}
				if (!asking && e[i].out == KVL__ROUT_NONE)
					e[i].out = f->op.kind == KVL__ROP_GET
					                   ? KVL__ROUT_SHORT
					                   : KVL__ROUT_PROTO;
				if (n - pos < (uint64_t)v + 2)
					goto lost;
				pos += (size_t)v + 2; /* skipped, CRLF unchecked */
			} else {
				goto lost;
			}
		}
	}
	*n_errs = ne;
	return;
lost:
	/* This op and every later one: the connection is lost. Errors of
	 * this op that were reported before stay reported. */
	for (size_t j = i; j < k; j++) {
		if (j > i)
			memset(&e[j], 0, sizeof e[j]);
		e[j].out = KVL__ROUT_LOST;
		e[j].payload = NULL;
	}
	*n_errs = ne;
}

/* ------------------------------------------------------------- a run */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	setup();
	int generated = data[0] & 1;
	size_t k = 1 + data[1] % MAX_OPS;
	if (size < 2 + 6 * k)
		return 0;
	fop ops[MAX_OPS];
	build_ops(ops, k, data + 2);
	const uint8_t *rest = data + 2 + 6 * k;
	size_t rest_n = size - 2 - 6 * k;

	/* The reply bytes. */
	buf b = {0};
	if (generated) {
		size_t at = 0;
		for (size_t i = 0; i < k; i++) {
			unsigned nrep = (ops[i].op.asking ? 1u : 0u) +
			                (ops[i].op.kind == KVL__ROP_CHECK ? 2u
			                                                  : 1u);
			for (unsigned j = 0; j < nrep; j++, at += 2) {
				uint8_t c = at < rest_n ? rest[at] : 0;
				uint8_t x = at + 1 < rest_n ? rest[at + 1] : 1;
				gen_reply(&b, &ops[i], ops[i].op.asking && j == 0,
				          c, x);
			}
		}
	} else {
		put(&b, rest, rest_n);
	}

	/* Connect, accept, write the replies, end the stream. */
	kvl__rconn_cfg cfg = {.connect_timeout_ms = 2000, .timeout_ms = 2000};
	kvl__rconn *c = NULL;
	char err[256];
	CHECK(kvl__rconn_open("127.0.0.1", listen_port, &cfg, NULL, &c, err,
	                      sizeof err) == 0);
	int srv = accept(listen_fd, NULL, NULL);
	CHECK(srv >= 0);
	int sz = 4 << 20;
	setsockopt(srv, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
	fcntl(srv, F_SETFL, O_NONBLOCK);
	size_t written = 0;
	while (written < b.n) {
		ssize_t w = send(srv, b.p + written, b.n - written,
		                 MSG_NOSIGNAL);
		if (w <= 0)
			break; /* full: the stream ends where it stopped */
		written += (size_t)w;
	}
	shutdown(srv, SHUT_WR);

	kvl__rop *opp[MAX_OPS];
	for (size_t i = 0; i < k; i++)
		opp[i] = &ops[i].op;
	kvl__rconn_job job = {
		.ops = opp, .n = k, .inflight = UINT64_MAX,
		.set_tail = set_tail, .set_tail_len = strlen(set_tail),
		.set_argc = 4, .on_error = on_error, .ctx = NULL,
	};
	n_got_err = 0;
	kvl__rconn_start(c, &job);
	kvl__rconn_run(&c, 1, 5000);

	/* Compare with the independent reading. */
	expect e[MAX_OPS];
	errmsg want_err[3 * MAX_OPS];
	size_t n_want_err = 0;
	reference(b.p ? b.p : "", written, ops, k, e, want_err, &n_want_err);
	for (size_t i = 0; i < k; i++) {
		const kvl__rop *op = &ops[i].op;
		if (op->out != e[i].out) {
			fprintf(stderr, "op %zu (kind %d, asking %d): outcome "
			        "%d, expected %d\n",
			        i, op->kind, op->asking, op->out, e[i].out);
			CHECK(op->out == e[i].out);
		}
		if (e[i].out == KVL__ROUT_INT) {
			if (op->kind == KVL__ROP_CHECK)
				CHECK(op->ival[0] == e[i].ival[0] &&
				      op->ival[1] == e[i].ival[1]);
			else
				CHECK(op->ival[0] == e[i].ival[0]);
		}
		for (uint32_t s = 0; s < op->nseg; s++) {
			const kvl__rseg *g = &op->seg[s];
			const char *d = ops[i].dst[s];
			if (!d)
				continue;
			for (size_t j = 0; j < GUARD; j++)
				CHECK(d[j] == GUARD_BYTE &&
				      d[GUARD + g->len + j] == GUARD_BYTE);
			if (e[i].out == KVL__ROUT_BULK)
				CHECK(memcmp(g->addr,
				             e[i].payload + (g->off - op->lo),
				             g->len) == 0);
		}
	}
	CHECK(n_got_err == n_want_err);
	for (size_t i = 0; i < n_got_err; i++) {
		CHECK(got_err[i].n == want_err[i].n &&
		      memcmp(got_err[i].s, want_err[i].s, got_err[i].n) == 0);
		free((void *)got_err[i].s);
	}
	kvl__rconn_close(c);
	close(srv);
	for (size_t i = 0; i < k; i++)
		for (uint32_t s = 0; s < ops[i].op.nseg; s++)
			free(ops[i].dst[s]);
	free(b.p);
	return 0;
}
