/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_chaos.c — the fault campaign: seeded random runs of concurrent
 * lookups, loads, offloads, cancels, waits, flushes, polls, shutdowns and
 * closes over the fault-injection store, with the linker's promises checked
 * on every run.
 *
 * One run (seed s) draws a configuration from s: the faults of the store
 * (per-key I/O errors, bit flips on reads, evictions, latency, a failing
 * n-th get or put, the store going down and up while the run goes on), the
 * store's capacity (small: the store evicts too), one or two linkers on it,
 * their io_batch and max_requests, the pools (kv, and maybe a sliding-
 * window and a replicated pool), namespace seeds, and how the run ends.
 * Three engine threads then issue random calls on the linkers while one
 * poller per linker collects completions, and the main thread may shut a
 * linker down in the middle (sometimes from two threads at once).
 *
 * Invariants checked on every run:
 *  - no hang: every wait, flush and poll returns within its timeout (plus a
 *    scheduling slack); after the end of the run every accepted request has
 *    completed within a deadline; a watchdog aborts a run that takes longer
 *    than its limit, printing where it was;
 *  - exactly once: every request that load/offload accepted completes
 *    exactly once, on its linker, with its kind and page count; nothing that
 *    was refused or never issued ever completes;
 *  - completions are consistent: status 0 iff every page is valid; a
 *    canceled request has no valid page; statuses are among the documented
 *    ones;
 *  - no byte reported valid is wrong: for every valid page of a completed
 *    load, every slot it named holds exactly that page's bytes in every
 *    layer; and slots not named by an open load are never written (every
 *    free slot keeps its fill pattern);
 *  - no leak: the ASan build checks it at exit (every linker and store of
 *    every run is closed).
 *
 * Environment:
 *   KVL_CHAOS_RUNS   number of runs (default 100: what ctest runs)
 *   KVL_CHAOS_SEED   seed of the first run (default 1); run i uses seed+i
 *   KVL_CHAOS_STORE  the store under the fault store (default
 *                    "mem:?capacity=…"; e.g. "redis://127.0.0.1:6379")
 *   KVL_CHAOS_LIMIT_S  watchdog limit of one run, seconds (default 120)
 *   KVL_CHAOS_VERBOSE  1: one line per run
 *   KVL_CHAOS_MIN_RUNS runs that must not skip as unreachable (default 0;
 *                    tests/chaos_redis.sh asks for half): fewer fail
 * Exit status: 0 when every run kept every invariant, 1 otherwise (the
 * failing seeds are printed; rerun one with KVL_CHAOS_SEED=s
 * KVL_CHAOS_RUNS=1).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvlink.h"
#include "store/fault.h"

#include "support/clock.h"
#include "support/page_data.h"
#include "support/pools.h"
#include "support/rand.h"

/* ------------------------------------------------------------- the shape */

#define N_LAYERS 4
#define K_BYTES 64
#define V_BYTES 48
#define KV_STRIDE 128
#define W_BYTES 40
#define W_STRIDE 64
#define C_BYTES 32
#define C_STRIDE 32
#define CHAINS 4
#define CHAIN_PAGES 8
#define SRC_SLOTS (CHAINS * CHAIN_PAGES) /* slots [0, 32): source pages */
#define DST_SLOTS 64                     /* slots [32, 96): load targets */
#define SLOTS (SRC_SLOTS + DST_SLOTS)
#define MAX_POOLS 3
#define MAX_LINKERS 2
#define ENGINES 3
#define MAX_OPS 100
#define MAX_REQS (ENGINES * MAX_OPS + 8)
#define FILL 0xEE
/* Slack on every timed call: a call may overrun its timeout by this much
 * before it counts as a hang (only a hang: loaded CI machines, sanitizers). */
#define SLACK_MS 30000
#define END_DEADLINE_MS 20000

static const double *pick_d(uint64_t *s, const double *v, unsigned n)
{
	return &v[rand_below(s, n)];
}

/* ------------------------------------------------------------- one run */

enum rec_state {
	R_FREE = 0,
	R_CALLING,   /* load/offload in progress */
	R_EARLY,     /* completed before its call returned */
	R_ACCEPTED,
	R_REFUSED,
	R_DONE,
};

typedef struct rec {
	int state;
	int lk;
	kvl_req_kind kind;
	unsigned chain, n;
	size_t slot[MAX_POOLS][CHAIN_PAGES]; /* KVL_NO_SLOT or a slot */
	unsigned dst_base;                   /* loads: first dst slot - 32 */
	kvl_completion c;
} rec;

typedef struct run {
	uint64_t seed;
	/* configuration */
	int swa, mla, n_linkers, use_ns, end_mode;
	uint32_t io_batch, max_requests;
	kvl__fault_cfg fault;
	char uri[512];
	/* memory and handles */
	pools eng; /* the engine: pools kv, maybe swa and mla, SLOTS slots */
	kvl_store *st;
	kvl_linker *lk[MAX_LINKERS];
	kvl_hash pages[CHAINS][CHAIN_PAGES];
	kvl_hash ns[CHAINS];
	/* bookkeeping, under mu */
	pthread_mutex_t mu;
	rec recs[MAX_REQS];
	uint64_t next_id;
	uint8_t dst_used[DST_SLOTS];
	int shut[MAX_LINKERS];
	int stop_pollers;
	/* results */
	atomic_int failures;
	atomic_ullong loads, offloads, valid_pages, bytes_checked, waits,
		canceled, lookups;
	uint64_t load_outcome[16]; /* (mu) completed loads by -status */
} run;

static atomic_int g_verbose;

static void fail(run *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void fail(run *r, const char *fmt, ...)
{
	va_list ap;
	if (atomic_fetch_add(&r->failures, 1) >= 20)
		return;
	fprintf(stderr, "chaos seed %" PRIu64 ": FAIL: ", r->seed);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ------------------------------------------------------------ memory */

/* Builds the run's engine (pools.h): the shape of the linker's tests, with
 * SLOTS slots and the pools the configuration drew. */
static void engine_build(run *r)
{
	pools_shape sh = {.tag = "chaos/bf16", .slots = SLOTS,
	                  .layers = N_LAYERS, .k_bytes = K_BYTES,
	                  .v_bytes = V_BYTES, .kv_stride = KV_STRIDE,
	                  .swa = r->swa, .swa_window = 2, .w_bytes = W_BYTES,
	                  .w_stride = W_STRIDE, .mla = r->mla,
	                  .c_bytes = C_BYTES, .c_stride = C_STRIDE,
	                  .fill = FILL};
	pools_init(&r->eng, &sh);
}

/* Writes `page` (NULL: the fill) into every layer of `slot` of `pool`. */
static void fill_slot(run *r, int pool, size_t slot, const kvl_hash *page)
{
	slot_fill(r->eng.bufs, r->eng.n_bufs, pool, slot, page, FILL);
}

/* 1 when slot `slot` of `pool` holds `page` (NULL: the fill) at every
 * layer; else 0, describing the first difference into why. Counts the bytes
 * it checked. */
static int slot_is(run *r, int pool, size_t slot, const kvl_hash *page,
                   char *why, size_t whylen)
{
	size_t checked = 0;
	int ok = slot_check(r->eng.bufs, r->eng.n_bufs, pool, slot, page, FILL,
	                    0, UINT32_MAX, why, whylen, &checked);
	atomic_fetch_add(&r->bytes_checked, checked);
	return ok;
}

/* ------------------------------------------------------- bookkeeping */

static int load_status_ok(int s)
{
	return s == 0 || s == KVL_EIO || s == KVL_ECORRUPT ||
	       s == KVL_ENOTFOUND || s == KVL_ECANCELED;
}

static int offload_status_ok(int s)
{
	return s == 0 || s == KVL_EIO || s == KVL_EFULL || s == KVL_ERANGE ||
	       s == KVL_ECANCELED;
}

/* Checks a completed load's slots and frees them (the fill goes back).
 * Caller holds mu. */
static void check_load(run *r, rec *q)
{
	char why[160];
	for (unsigned i = 0; i < q->n; i++)
		for (int p = 0; p < r->eng.n_pools; p++) {
			size_t s = q->slot[p][i];
			if (s == KVL_NO_SLOT)
				continue;
			if (i < q->c.valid_pages &&
			    !slot_is(r, p, s, &r->pages[q->chain][i], why,
			             sizeof why))
				fail(r,
				     "load %" PRIu64 " (chain %u, %u pages, %zu "
				     "valid, status %s): page %u has wrong "
				     "bytes: %s",
				     q->c.id, q->chain, q->n, q->c.valid_pages,
				     kvl_err_name(q->c.status), i, why);
			fill_slot(r, p, s, NULL);
		}
	atomic_fetch_add(&r->valid_pages, q->c.valid_pages);
	for (unsigned i = 0; i < q->n; i++)
		r->dst_used[q->dst_base + i] = 0;
}

/* One completion from linker li. Caller holds mu. */
static void on_completion(run *r, int li, const kvl_completion *c)
{
	if (c->id == 0 || c->id > r->next_id || c->id > MAX_REQS) {
		fail(r, "linker %d: completion for id %" PRIu64
		        " that was never issued", li, c->id);
		return;
	}
	rec *q = &r->recs[c->id - 1];
	if (q->state != R_CALLING && q->state != R_ACCEPTED) {
		fail(r, "linker %d: id %" PRIu64 " completed again or after "
		        "being refused (state %d, status %s)",
		     li, c->id, q->state, kvl_err_name(c->status));
		return;
	}
	if (q->lk != li || q->kind != c->kind || q->n != c->n_pages)
		fail(r, "id %" PRIu64 ": completion (linker %d, kind %d, %zu "
		        "pages) does not match the request (linker %d, kind "
		        "%d, %u pages)",
		     c->id, li, (int)c->kind, c->n_pages, q->lk, (int)q->kind,
		     q->n);
	if (c->valid_pages > c->n_pages ||
	    (c->status == 0) != (c->valid_pages == c->n_pages) ||
	    (c->status == KVL_ECANCELED && c->valid_pages != 0))
		fail(r, "id %" PRIu64 ": inconsistent completion: status %s, "
		        "%zu of %zu pages valid",
		     c->id, kvl_err_name(c->status), c->valid_pages,
		     c->n_pages);
	if (!(c->kind == KVL_REQ_LOAD ? load_status_ok(c->status)
	                              : offload_status_ok(c->status)))
		fail(r, "id %" PRIu64 ": undocumented status %s (%d)", c->id,
		     kvl_err_name(c->status), c->status);
	if (c->status == KVL_ECANCELED)
		atomic_fetch_add(&r->canceled, 1);
	if (c->kind == KVL_REQ_LOAD && c->status <= 0 && c->status > -16)
		r->load_outcome[-c->status]++;
	q->c = *c;
	if (q->kind == KVL_REQ_LOAD)
		check_load(r, q);
	q->state = q->state == R_CALLING ? R_EARLY : R_DONE;
}

/* Polls linker li once with timeout_ms; checks the time it took. */
static void poll_once(run *r, int li, uint32_t timeout_ms)
{
	kvl_completion c[16];
	size_t n = 0;
	uint64_t t0 = now_ms();
	int rc = kvl_linker_poll(r->lk[li], c, 16, &n, timeout_ms);
	uint64_t dt = now_ms() - t0;
	if (rc)
		fail(r, "poll: %s", kvl_err_name(rc));
	if (dt > timeout_ms + SLACK_MS)
		fail(r, "poll(%u ms) took %" PRIu64 " ms", timeout_ms, dt);
	pthread_mutex_lock(&r->mu);
	for (size_t i = 0; i < n; i++)
		on_completion(r, li, &c[i]);
	pthread_mutex_unlock(&r->mu);
}

typedef struct poller_arg {
	run *r;
	int li;
} poller_arg;

static void *poller_main(void *p)
{
	poller_arg *a = p;
	for (;;) {
		pthread_mutex_lock(&a->r->mu);
		int stop = a->r->stop_pollers;
		pthread_mutex_unlock(&a->r->mu);
		if (stop)
			return NULL;
		poll_once(a->r, a->li, 5);
	}
}

/* Reserves a record for a new request; NULL when the table is full. */
static rec *rec_new(run *r, int li, kvl_req_kind kind, unsigned chain,
                    unsigned n, uint64_t *id)
{
	pthread_mutex_lock(&r->mu);
	rec *q = NULL;
	if (r->next_id < MAX_REQS) {
		*id = ++r->next_id;
		q = &r->recs[*id - 1];
		memset(q, 0, sizeof *q);
		q->state = R_CALLING;
		q->lk = li;
		q->kind = kind;
		q->chain = chain;
		q->n = n;
		for (int p = 0; p < MAX_POOLS; p++)
			for (unsigned i = 0; i < CHAIN_PAGES; i++)
				q->slot[p][i] = KVL_NO_SLOT;
	}
	pthread_mutex_unlock(&r->mu);
	return q;
}

/* Records what load/offload returned for q. */
static void rec_called(run *r, rec *q, uint64_t id, int rc)
{
	pthread_mutex_lock(&r->mu);
	if (rc == 0) {
		q->state = q->state == R_EARLY ? R_DONE : R_ACCEPTED;
	} else {
		if (q->state == R_EARLY)
			fail(r, "id %" PRIu64 " was refused (%s) but completed",
			     id, kvl_err_name(rc));
		q->state = R_REFUSED;
		if (q->kind == KVL_REQ_LOAD)
			for (unsigned i = 0; i < q->n; i++) {
				/* A refused load must not have written. */
				char why[160];
				for (int p = 0; p < r->eng.n_pools; p++)
					if (q->slot[p][i] != KVL_NO_SLOT &&
					    !slot_is(r, p, q->slot[p][i], NULL,
					             why, sizeof why))
						fail(r, "refused load %" PRIu64
						        " wrote a slot: %s",
						     id, why);
				r->dst_used[q->dst_base + i] = 0;
			}
	}
	pthread_mutex_unlock(&r->mu);
}

/* Finds n free destination slots in a row; their first index (0-based in
 * the destination range) or -1. Checks they still hold the fill. */
static int dst_alloc(run *r, unsigned n, uint64_t *rs)
{
	pthread_mutex_lock(&r->mu);
	int found = -1;
	unsigned start = rand_below(rs, DST_SLOTS);
	for (unsigned k = 0; k < DST_SLOTS && found < 0; k++) {
		unsigned b = (start + k) % DST_SLOTS;
		if (b + n > DST_SLOTS)
			continue;
		unsigned i = 0;
		while (i < n && !r->dst_used[b + i])
			i++;
		if (i == n)
			found = (int)b;
	}
	if (found >= 0) {
		char why[160];
		for (unsigned i = 0; i < n; i++) {
			r->dst_used[found + i] = 1;
			for (int p = 0; p < r->eng.n_pools; p++)
				if (!slot_is(r, p, SRC_SLOTS + found + i, NULL,
				             why, sizeof why))
					fail(r, "a free slot was written "
					        "(after its load completed, or "
					        "by no load): %s",
					     why);
		}
	}
	pthread_mutex_unlock(&r->mu);
	return found;
}

/* ----------------------------------------------------------- engines */

typedef struct engine_arg {
	run *r;
	unsigned t;
	unsigned ops;
} engine_arg;

static int allowed(int rc, const int *ok, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (rc == ok[i])
			return 1;
	return 0;
}

#define EXPECT_ONE_OF(r, what, rc, ...)                                      \
	do {                                                                 \
		static const int ok_[] = {__VA_ARGS__};                      \
		if (!allowed((rc), ok_, sizeof ok_ / sizeof ok_[0]))         \
			fail((r), "%s returned %s (%d)", (what),             \
			     kvl_err_name(rc), (rc));                        \
	} while (0)

static void timed(run *r, const char *what, uint32_t timeout_ms,
                  uint64_t t0)
{
	uint64_t dt = now_ms() - t0;
	if (dt > (uint64_t)timeout_ms + SLACK_MS)
		fail(r, "%s(timeout %u ms) returned after %" PRIu64 " ms: a "
		        "hang", what, timeout_ms, dt);
}

/* 1 once the main thread decided to shut linker li down. */
static int is_shut(run *r, int li)
{
	pthread_mutex_lock(&r->mu);
	int s = r->shut[li];
	pthread_mutex_unlock(&r->mu);
	return s;
}

static void op_offload(run *r, uint64_t *rs)
{
	int li = (int)rand_below(rs, (unsigned)r->n_linkers);
	unsigned chain = rand_below(rs, CHAINS);
	unsigned n = 1 + rand_below(rs, CHAIN_PAGES);
	uint64_t id;
	rec *q = rec_new(r, li, KVL_REQ_OFFLOAD, chain, n, &id);
	if (!q)
		return;
	const size_t *sp[MAX_POOLS] = {NULL};
	for (int p = 0; p < r->eng.n_pools; p++) {
		/* Sometimes a pool is left out, or a page of it. */
		if (p > 0 && rand_below(rs, 4) == 0)
			continue;
		for (unsigned i = 0; i < n; i++)
			q->slot[p][i] = rand_below(rs, 8) == 0 && p > 0
			                        ? KVL_NO_SLOT
			                        : chain * CHAIN_PAGES + i;
		sp[p] = q->slot[p];
	}
	int rc = kvl_linker_offload(r->lk[li], id, r->pages[chain], n, sp,
	                            NULL);
	EXPECT_ONE_OF(r, "offload", rc, 0, KVL_EFULL, KVL_ECLOSED);
	if (rc == KVL_ECLOSED && !is_shut(r, li))
		fail(r, "offload: ECLOSED on a linker not shut down");
	if (rc == 0)
		atomic_fetch_add(&r->offloads, 1);
	rec_called(r, q, id, rc);
}

static void op_load(run *r, uint64_t *rs, int start_too)
{
	int li = (int)rand_below(rs, (unsigned)r->n_linkers);
	unsigned chain = rand_below(rs, CHAINS);
	unsigned n = 1 + rand_below(rs, CHAIN_PAGES);
	int base = dst_alloc(r, n, rs);
	if (base < 0)
		return;
	uint64_t id;
	rec *q = rec_new(r, li, KVL_REQ_LOAD, chain, n, &id);
	if (!q) {
		pthread_mutex_lock(&r->mu);
		for (unsigned i = 0; i < n; i++)
			r->dst_used[base + i] = 0;
		pthread_mutex_unlock(&r->mu);
		return;
	}
	q->dst_base = (unsigned)base;
	const size_t *sp[MAX_POOLS] = {NULL};
	for (int p = 0; p < r->eng.n_pools; p++) {
		if (p > 0 && rand_below(rs, 4) == 0)
			continue;
		for (unsigned i = 0; i < n; i++)
			q->slot[p][i] = p > 0 && rand_below(rs, 6) == 0
			                        ? KVL_NO_SLOT
			                        : SRC_SLOTS + base + i;
		sp[p] = q->slot[p];
	}
	int rc = kvl_linker_load(r->lk[li], id, r->pages[chain], n, sp);
	EXPECT_ONE_OF(r, "load", rc, 0, KVL_EFULL, KVL_ECLOSED);
	if (rc == KVL_ECLOSED && !is_shut(r, li))
		fail(r, "load: ECLOSED on a linker not shut down");
	if (rc == 0)
		atomic_fetch_add(&r->loads, 1);
	rec_called(r, q, id, rc);
	if (rc == 0 && rand_below(rs, 5) == 0) {
		int co = -1;
		rc = kvl_linker_cancel(r->lk[li], id, &co);
		EXPECT_ONE_OF(r, "cancel", rc, 0, KVL_ENOTFOUND);
		if (rc == 0 && co != 0 && co != 1)
			fail(r, "cancel: canceled_out %d", co);
	}
	if (!start_too)
		return;
	uint64_t b = 0;
	rc = kvl_linker_start(r->lk[li], &b);
	EXPECT_ONE_OF(r, "start", rc, 0, KVL_EFULL, KVL_ECLOSED);
	if (rc)
		return;
	uint32_t layers = kvl_linker_layers(r->lk[li]);
	for (uint32_t ly = 0; ly < layers; ly++) {
		uint32_t to = rand_below(rs, 3) == 0 ? 0 : 1 + rand_below(rs, 400);
		uint64_t t0 = now_ms();
		rc = kvl_linker_wait(r->lk[li], b, ly, to);
		timed(r, "wait", to, t0);
		atomic_fetch_add(&r->waits, 1);
		EXPECT_ONE_OF(r, "wait", rc, 0, KVL_EIO, KVL_ECORRUPT,
		              KVL_ENOTFOUND, KVL_ECANCELED, KVL_ETIMEDOUT);
		if (rc && rc != KVL_ETIMEDOUT)
			break; /* the batch failed: later layers fail too */
	}
}

static void op_lookup(run *r, uint64_t *rs)
{
	int li = (int)rand_below(rs, (unsigned)r->n_linkers);
	unsigned chain = rand_below(rs, CHAINS);
	unsigned n = 1 + rand_below(rs, CHAIN_PAGES);
	size_t prefix = 999;
	int rc = kvl_linker_lookup(r->lk[li], r->pages[chain], n, NULL,
	                           &prefix);
	atomic_fetch_add(&r->lookups, 1);
	EXPECT_ONE_OF(r, "lookup", rc, 0, KVL_EIO);
	if (prefix > n || (rc && prefix != 0))
		fail(r, "lookup of %u pages: prefix %zu (rc %s)", n, prefix,
		     kvl_err_name(rc));
}

static void op_flush(run *r, uint64_t *rs)
{
	int li = (int)rand_below(rs, (unsigned)r->n_linkers);
	uint32_t to = rand_below(rs, 200);
	uint64_t t0 = now_ms();
	int rc = kvl_linker_flush(r->lk[li], to);
	timed(r, "flush", to, t0);
	EXPECT_ONE_OF(r, "flush", rc, 0, KVL_ETIMEDOUT);
}

static void op_store_flip(run *r, uint64_t *rs)
{
	/* The store goes down or comes back; one get/put call may fail. */
	kvl__fault_cfg c;
	if (kvl__fault_get(r->st, &c)) {
		fail(r, "fault_get: %s", kvl_store_errmsg(r->st));
		return;
	}
	c.down = !c.down && rand_below(rs, 2) == 0;
	uint64_t gets = 0, puts = 0;
	kvl__fault_calls(r->st, &gets, &puts);
	c.fail_get_call = rand_below(rs, 2) ? gets + 1 + rand_below(rs, 8) : 0;
	c.fail_put_call = rand_below(rs, 2) ? puts + 1 + rand_below(rs, 4) : 0;
	if (kvl__fault_set(r->st, &c))
		fail(r, "fault_set: %s", kvl_store_errmsg(r->st));
}

static void op_stats(run *r, uint64_t *rs)
{
	int li = (int)rand_below(rs, (unsigned)r->n_linkers);
	char buf[8192];
	size_t need = 0;
	int rc = kvl_linker_stats_render(r->lk[li], rand_below(rs, 2) ? KVL_STATS_JSON
	                                                     : KVL_STATS_PROMETHEUS,
	                          buf, sizeof buf, &need);
	EXPECT_ONE_OF(r, "stats", rc, 0, KVL_ERANGE);
}

static void *engine_main(void *p)
{
	engine_arg *a = p;
	run *r = a->r;
	uint64_t rs = r->seed * 1000003u + a->t * 7919u + 17;
	for (unsigned i = 0; i < a->ops; i++) {
		unsigned op = rand_below(&rs, 100);
		if (op < 30)
			op_offload(r, &rs);
		else if (op < 55)
			op_load(r, &rs, 0);
		else if (op < 75)
			op_load(r, &rs, 1);
		else if (op < 85)
			op_lookup(r, &rs);
		else if (op < 90)
			op_flush(r, &rs);
		else if (op < 91)
			op_store_flip(r, &rs);
		else if (op < 95)
			op_stats(r, &rs);
		else
			poll_once(r, (int)rand_below(&rs, (unsigned)r->n_linkers),
			          rand_below(&rs, 20));
	}
	return NULL;
}

typedef struct shut_arg {
	run *r;
	int li;
	unsigned delay_ms;
} shut_arg;

static void *shut_main(void *p)
{
	shut_arg *a = p;
	sleep_ms(a->delay_ms);
	kvl_linker_shutdown(a->r->lk[a->li]);
	return NULL;
}

/* ----------------------------------------------------------- a run */

static void run_config(run *r, const char *inner)
{
	uint64_t s = r->seed * 0x2545f4914f6cdd1dull + 1;
	static const double err[] = {0, 0, 0, 0.01, 0.05, 0.2};
	static const double cor[] = {0, 0, 0.01, 0.05, 0.2};
	static const double evi[] = {0, 0, 0.02, 0.1};
	static const double latp[] = {0, 0.02, 0.1};
	r->fault = (kvl__fault_cfg){
		.error = *pick_d(&s, err, 6),
		.corrupt = *pick_d(&s, cor, 5),
		.evict = *pick_d(&s, evi, 4),
		.latency_p = *pick_d(&s, latp, 3),
		.latency_ms = 1 + rand_below(&s, 3),
	};
	r->swa = rand_below(&s, 2);
	r->mla = rand_below(&s, 2);
	r->n_linkers = 1 + (rand_below(&s, 3) == 0);
	r->use_ns = rand_below(&s, 2);
	r->io_batch = rand_below(&s, 2) ? 1 + rand_below(&s, 8) : 0;
	r->max_requests = rand_below(&s, 3) == 0 ? 2 + rand_below(&s, 8) : 0;
	/* 0: shutdown at the end, collect, close; 1: shutdown in the middle;
	 * 2: two shutdowns at once in the middle; 3: close with work in
	 * flight (no final collection). */
	r->end_mode = (int)rand_below(&s, 4);
	/* A small capacity makes the store evict (objects are ~0.5-1 KiB). */
	unsigned cap_kib = rand_below(&s, 2) ? 8 + rand_below(&s, 24) : 1024;
	if (strncmp(inner, "mem:", 4) == 0)
		snprintf(r->uri, sizeof r->uri,
		         "fault+mem:?capacity=%uKiB&fault.seed=%" PRIu64,
		         cap_kib, r->seed);
	else
		snprintf(r->uri, sizeof r->uri, "fault+%s%sfault.seed=%" PRIu64,
		         inner, strchr(inner, '?') ? "&" : "?", r->seed);
}

static int g_limit_s = 120;
/* For the watchdog: the run going on (its seed + 1; 0: none) and where. */
static atomic_ullong g_run;
static _Atomic(const char *) g_phase;

static void *watchdog_main(void *p)
{
	(void)p;
	uint64_t seen = 0, since = now_ms();
	for (;;) {
		sleep_ms(500);
		uint64_t cur = atomic_load(&g_run);
		if (cur != seen) {
			seen = cur;
			since = now_ms();
			continue;
		}
		if (cur && now_ms() - since > (uint64_t)g_limit_s * 1000) {
			const char *phase = atomic_load(&g_phase);
			fprintf(stderr,
			        "chaos seed %" PRIu64 ": HANG: the run is still "
			        "going after %d s (phase: %s)\n",
			        (uint64_t)(cur - 1), g_limit_s,
			        phase ? phase : "?");
			abort();
		}
	}
	return NULL;
}

enum { T_REQ, T_LOADS, T_OFFLOADS, T_VALID, T_FERR, T_FCOR, T_FEV, T_WAITS,
       T_CANCELED, T_BYTES, T_LOOKUPS, T_UNREACHABLE, T_OUTCOME,
       T_N = T_OUTCOME + 16 };

static int run_one(uint64_t seed, const char *inner, uint64_t *totals)
{
	run *r = calloc(1, sizeof *r);
	if (!r)
		return 1;
	r->seed = seed;
	pthread_mutex_init(&r->mu, NULL);
	atomic_store(&g_phase, "setup");
	atomic_store(&g_run, seed + 1);
	run_config(r, inner);
	uint64_t t_start = now_ms();

	engine_build(r);
	int rc = 0;
	/* Pages: four chains of eight, each chain its own prompt, hashed in
	 * a tenant's namespace of its own when the run uses them. */
	for (unsigned c = 0; c < CHAINS; c++) {
		char salt[32];
		snprintf(salt, sizeof salt, "tenant-%u", c);
		r->ns[c] = ns_seed(salt);
		hash_chain(r->pages[c], CHAIN_PAGES, seed * 7 + c * 1000003, 16,
		           r->use_ns ? &r->ns[c] : NULL);
		for (unsigned i = 0; i < CHAIN_PAGES; i++)
			for (int p = 0; p < r->eng.n_pools; p++)
				fill_slot(r, p, c * CHAIN_PAGES + i,
				          &r->pages[c][i]);
	}
	char err[256] = "";
	/* A networked store may be briefly unreachable (tests/chaos_redis.sh
	 * kills and pauses its servers): opening is retried, and a store that
	 * stays unreachable for 5 s skips the run (it is not an invariant). */
	for (int tries = 0;; tries++) {
		rc = kvl_store_open(r->uri, &r->st, err, sizeof err);
		if (rc != KVL_EIO || tries == 50)
			break;
		sleep_ms(100);
	}
	if (rc == KVL_EIO) {
		printf("chaos seed %" PRIu64 ": skipped: the store stayed "
		       "unreachable: %s\n", seed, err);
		totals[T_UNREACHABLE]++;
		rc = 0;
		goto out;
	}
	if (rc) {
		fail(r, "store_open %s: %s", r->uri, err);
		goto out;
	}
	kvl__fault_cfg fc;
	kvl__fault_get(r->st, &fc);
	r->fault.fail_get_call = fc.fail_get_call;
	r->fault.fail_put_call = fc.fail_put_call;
	if ((rc = kvl__fault_set(r->st, &r->fault))) {
		fail(r, "fault_set: %s", kvl_store_errmsg(r->st));
		goto out;
	}
	for (int i = 0; i < r->n_linkers; i++) {
		kvl_linker_opts o = KVL_LINKER_OPTS_INIT;
		o.io_batch = r->io_batch;
		o.max_requests = r->max_requests;
		if ((rc = kvl_linker_open(r->st, r->eng.l, &o, &r->lk[i], err,
		                          sizeof err))) {
			fail(r, "linker_open: %s", err);
			goto out;
		}
	}

	/* Most runs start with some chains offloaded (faults on), so that
	 * loads find pages; the engines offload more as they go. */
	atomic_store(&g_phase, "warm-up");
	uint64_t rs = seed ^ 0xabcdef;
	if (rand_below(&rs, 4)) {
		uint64_t ws = rs;
		for (unsigned i = 0; i < 2 * CHAINS; i++)
			op_offload(r, &ws);
		for (int i = 0; i < r->n_linkers; i++) {
			uint64_t t0 = now_ms();
			int frc = kvl_linker_flush(r->lk[i], 5000);
			timed(r, "flush", 5000, t0);
			EXPECT_ONE_OF(r, "flush", frc, 0, KVL_ETIMEDOUT);
		}
	}

	/* The run. */
	atomic_store(&g_phase, "engines");
	pthread_t et[ENGINES], pt[MAX_LINKERS], st[2];
	engine_arg ea[ENGINES];
	poller_arg pa[MAX_LINKERS];
	for (int i = 0; i < r->n_linkers; i++) {
		pa[i] = (poller_arg){r, i};
		pthread_create(&pt[i], NULL, poller_main, &pa[i]);
	}
	for (unsigned t = 0; t < ENGINES; t++) {
		ea[t] = (engine_arg){r, t, 20 + rand_below(&rs, MAX_OPS - 20)};
		pthread_create(&et[t], NULL, engine_main, &ea[t]);
	}
	int n_shut = 0;
	int victim = (int)rand_below(&rs, (unsigned)r->n_linkers);
	shut_arg sa[2];
	if (r->end_mode == 1 || r->end_mode == 2) {
		unsigned delay = rand_below(&rs, 60);
		n_shut = r->end_mode;
		pthread_mutex_lock(&r->mu);
		r->shut[victim] = 1; /* from now on ECLOSED is expected */
		pthread_mutex_unlock(&r->mu);
		for (int i = 0; i < n_shut; i++) {
			sa[i] = (shut_arg){r, victim,
			                   delay + (unsigned)i * rand_below(&rs, 3)};
			pthread_create(&st[i], NULL, shut_main, &sa[i]);
		}
	}
	for (unsigned t = 0; t < ENGINES; t++)
		pthread_join(et[t], NULL);
	for (int i = 0; i < n_shut; i++)
		pthread_join(st[i], NULL);

	/* The end. */
	if (r->end_mode == 3) {
		/* Close with work queued and running: no collection. */
		atomic_store(&g_phase, "close with work in flight");
		pthread_mutex_lock(&r->mu);
		r->stop_pollers = 1;
		pthread_mutex_unlock(&r->mu);
		for (int i = 0; i < r->n_linkers; i++)
			pthread_join(pt[i], NULL);
		for (int i = 0; i < r->n_linkers; i++) {
			kvl_linker_close(r->lk[i]);
			r->lk[i] = NULL;
		}
	} else {
		atomic_store(&g_phase, "shutdown and collect");
		/* The store comes back so the end is not all errors. */
		kvl__fault_cfg c;
		kvl__fault_get(r->st, &c);
		c.down = 0;
		kvl__fault_set(r->st, &c);
		for (int i = 0; i < r->n_linkers; i++) {
			uint64_t t0 = now_ms();
			kvl_linker_shutdown(r->lk[i]);
			timed(r, "shutdown", 0, t0);
		}
		uint64_t deadline = now_ms() + END_DEADLINE_MS;
		for (;;) {
			size_t open = 0;
			pthread_mutex_lock(&r->mu);
			for (uint64_t i = 0; i < r->next_id; i++)
				open += r->recs[i].state == R_ACCEPTED;
			pthread_mutex_unlock(&r->mu);
			if (open == 0)
				break;
			if (now_ms() > deadline) {
				fail(r, "%zu accepted requests never completed "
				        "(%d ms after shutdown)",
				     open, END_DEADLINE_MS);
				break;
			}
			sleep_ms(2);
		}
		pthread_mutex_lock(&r->mu);
		r->stop_pollers = 1;
		pthread_mutex_unlock(&r->mu);
		for (int i = 0; i < r->n_linkers; i++)
			pthread_join(pt[i], NULL);
		/* Anything more would be a second completion. */
		for (int i = 0; i < r->n_linkers; i++)
			poll_once(r, i, 0);
		pthread_mutex_lock(&r->mu);
		for (uint64_t i = 0; i < r->next_id; i++)
			if (r->recs[i].state == R_CALLING ||
			    r->recs[i].state == R_EARLY)
				fail(r, "id %" PRIu64 " in state %d at the end",
				     i + 1, r->recs[i].state);
		pthread_mutex_unlock(&r->mu);
		for (int i = 0; i < r->n_linkers; i++) {
			kvl_linker_close(r->lk[i]);
			r->lk[i] = NULL;
		}
		/* Every slot not holding a source page is back to the fill:
		 * nothing wrote after its request completed. */
		char why[160];
		for (unsigned s = 0; s < DST_SLOTS; s++)
			for (int p = 0; p < r->eng.n_pools; p++)
				if (!r->dst_used[s] &&
				    !slot_is(r, p, SRC_SLOTS + s, NULL, why,
				             sizeof why))
					fail(r, "slot written after its load "
					        "completed: %s", why);
	}

	uint64_t ferr = 0, fcor = 0, fev = 0, fdel = 0;
	kvl__fault_counts(r->st, &ferr, &fcor, &fev, &fdel);
	totals[T_REQ] += r->next_id;
	totals[T_LOADS] += r->loads;
	totals[T_OFFLOADS] += r->offloads;
	totals[T_VALID] += r->valid_pages;
	totals[T_FERR] += ferr;
	totals[T_FCOR] += fcor;
	totals[T_FEV] += fev;
	totals[T_WAITS] += r->waits;
	totals[T_CANCELED] += r->canceled;
	totals[T_BYTES] += r->bytes_checked;
	totals[T_LOOKUPS] += r->lookups;
	for (int i = 0; i < 16; i++)
		totals[T_OUTCOME + i] += r->load_outcome[i];
	if (atomic_load(&g_verbose))
		printf("seed %" PRIu64 ": %3" PRIu64 " requests (%llu loads, "
		       "%llu offloads, %llu canceled), %llu valid pages, "
		       "faults: %" PRIu64 " errors %" PRIu64 " flips %" PRIu64
		       " evictions; linkers %d, end %d, %s, %" PRIu64 " ms\n",
		       seed, r->next_id, (unsigned long long)r->loads,
		       (unsigned long long)r->offloads,
		       (unsigned long long)r->canceled,
		       (unsigned long long)r->valid_pages, ferr, fcor, fev,
		       r->n_linkers, r->end_mode, r->uri, now_ms() - t_start);
out:
	for (int i = 0; i < MAX_LINKERS; i++)
		kvl_linker_close(r->lk[i]);
	kvl_store_close(r->st);
	pools_free(&r->eng);
	int failed = atomic_load(&r->failures) != 0;
	atomic_store(&g_run, 0);
	pthread_mutex_destroy(&r->mu);
	free(r);
	return failed;
}

static uint64_t env_u64(const char *name, uint64_t def)
{
	const char *s = getenv(name);
	return s && *s ? strtoull(s, NULL, 10) : def;
}

int main(void)
{
	uint64_t runs = env_u64("KVL_CHAOS_RUNS", 100);
	uint64_t seed0 = env_u64("KVL_CHAOS_SEED", 1);
	/* Runs that must not be skipped as unreachable (tests/chaos_redis.sh:
	 * half of them), so that a store down all along cannot pass. */
	uint64_t min_runs = env_u64("KVL_CHAOS_MIN_RUNS", 0);
	g_limit_s = (int)env_u64("KVL_CHAOS_LIMIT_S", 120);
	atomic_store(&g_verbose, (int)env_u64("KVL_CHAOS_VERBOSE", 0));
	const char *inner = getenv("KVL_CHAOS_STORE");
	if (!inner || !*inner)
		inner = "mem:";
	pthread_t wd;
	pthread_create(&wd, NULL, watchdog_main, NULL);
	pthread_detach(wd);

	uint64_t totals[T_N] = {0}, failed = 0, t0 = now_ms();
	char bad[256] = "";
	size_t bad_len = 0;
	for (uint64_t i = 0; i < runs; i++) {
		if (run_one(seed0 + i, inner, totals)) {
			failed++;
			if (bad_len < sizeof bad - 24)
				bad_len += (size_t)snprintf(
					bad + bad_len, sizeof bad - bad_len,
					" %" PRIu64, seed0 + i);
		}
	}
	printf("chaos: %" PRIu64 " runs (seeds %" PRIu64 "..%" PRIu64
	       ") over fault+%s in %.1f s: %" PRIu64 " requests (%" PRIu64
	       " loads, %" PRIu64 " offloads, %" PRIu64 " canceled), %" PRIu64
	       " lookups, %" PRIu64 " waits; %" PRIu64
	       " valid pages checked (%" PRIu64 " bytes); injected: %" PRIu64
	       " I/O errors, %" PRIu64 " bit flips, %" PRIu64
	       " evictions; %" PRIu64 " runs failed%s%s\n",
	       runs, seed0, seed0 + runs - 1, inner,
	       (double)(now_ms() - t0) / 1000.0, totals[T_REQ],
	       totals[T_LOADS], totals[T_OFFLOADS], totals[T_CANCELED],
	       totals[T_LOOKUPS], totals[T_WAITS], totals[T_VALID],
	       totals[T_BYTES], totals[T_FERR], totals[T_FCOR], totals[T_FEV],
	       failed, failed ? ":" : "", bad);
	uint64_t ran = runs - totals[T_UNREACHABLE];
	printf("chaos: %" PRIu64 " of %" PRIu64 " runs exercised, %" PRIu64
	       " skipped as the store was unreachable (at least %" PRIu64
	       " needed)\n", ran, runs, totals[T_UNREACHABLE], min_runs);
	printf("chaos: completed loads: %" PRIu64 " ok, %" PRIu64
	       " KVL_EIO, %" PRIu64 " KVL_ECORRUPT, %" PRIu64
	       " KVL_ENOTFOUND, %" PRIu64 " KVL_ECANCELED\n",
	       totals[T_OUTCOME], totals[T_OUTCOME - KVL_EIO],
	       totals[T_OUTCOME - KVL_ECORRUPT],
	       totals[T_OUTCOME - KVL_ENOTFOUND],
	       totals[T_OUTCOME - KVL_ECANCELED]);
	if (ran < min_runs) {
		printf("chaos: FAIL: only %" PRIu64 " runs exercised\n", ran);
		return 1;
	}
	return failed ? 1 : 0;
}
