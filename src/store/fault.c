/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fault.c — the fault-injection store (scheme "fault+<inner>"): a
 * wrapper around any other store that makes its calls fail, corrupt, vanish
 * or stall on demand, so that every failure path of kvlink can be exercised.
 *
 * URI: the inner store's URI with "fault+" before its scheme and the fault
 * options in the same query, named "fault.*":
 *   fault+mem:?capacity=1GiB&fault.error=0.05&fault.seed=7
 *   fault+redis://127.0.0.1:7000?fault.latency_ms=5
 * Open rebuilds the inner URI (scheme without "fault+", "//authority" if
 * there was one, the path, and every option not starting with "fault."
 * but secret_file) and opens it with kvl__store_open_wrapped (no secret:
 * this store's handle holds the key and seals and checks), so
 * "fault+fault+mem:" nests; all fault.* options belong to the outermost
 * fault store. Options (probabilities are
 * reals in [0, 1]):
 *   fault.error=P        per key: KVL_EIO, nothing of the key read/written
 *   fault.corrupt=P      per key, get: flip one random bit of the bytes just
 *                        read for it; the key still reports success
 *   fault.evict=P        per key, exists and get: remove it from the inner
 *                        store first, so it reads as absent
 *   fault.latency_ms=N   sleep N ms (at most 3600000) before a call ...
 *   fault.latency_p=P    ... with probability P (default 1)
 *   fault.seed=N         the random stream's seed (default 1)
 *   fault.down=0|1       every call fails whole: KVL_EIO, "store is down"
 *                        (register too; stats still answer)
 *   fault.fail_get_call=K  the K-th get call (1-based, from open) fails
 *                        whole with KVL_EIO; 0 (default): none
 *   fault.fail_put_call=K  the same for puts
 *   fault.whole_reads=0|1  say that reads move whole objects, as Mooncake's
 *                        do (caps.whole_reads), so the linker reads all
 *                        of a page's layers at once; inherited from the
 *                        inner store
 *   fault.layer_read_min=SIZE  say that a read costs at least SIZE bytes
 *                        worth (caps.layer_read_min, as Mooncake's ranges
 *                        do), so the linker reads a pool whose layers are
 *                        smaller with its first; 0: every read costs its
 *                        bytes; not given: the inner store's
 *   fault.stats_unknown=0|1  stats report objects and bytes as UINT64_MAX,
 *                        as a remote store that cannot count them does
 *   fault.holds=0|1      the store keeps batch holds itself, counted per
 *                        key (kvl__fault_holds), as Mooncake's sessions
 *                        do, so that tests of what calls hold see them
 *                        without Mooncake; they count, nothing more (the
 *                        inner store may still evict). 0: holds go to
 *                        the inner store
 * Unknown fault.* options are KVL_EPARSE. The store is never trusted
 * (store->trusted = 0), so kvlink verifies payload checksums on reads.
 *
 * One call, in order: the call is numbered (get, put); the configuration is
 * read once; the latency draw may sleep; a down store, or the get/put call
 * numbered fail_*_call, fails whole (every result and the return value are
 * KVL_EIO); exists and get evict the keys drawn for it; keys drawn for an
 * error get KVL_EIO and the others go to the inner store in runs of
 * consecutive keys (sub-arrays of the caller's arrays: nothing is
 * allocated); get then corrupts the keys drawn for it that read > 0 bytes.
 * A whole-call failure of the inner store is the whole call's failure when
 * the run was every key, else the result of each key of the run.
 *
 * Randomness: draw number i of the stream is splitmix64's i-th output for
 * the seed, computed directly from i. A call reserves 1 + 4n numbers with
 * one atomic add on `next_draw`: the first for latency, then four per key
 * (error, evict, corrupt, which bit), whether or not those faults are on.
 * The same seed and the same sequence of calls therefore give the same
 * faults, key by key, and turning one fault on does not move the others.
 *
 * Threads: `cfg` is guarded by `mu` and copied once per call; the draw
 * position, call numbers and counters are atomics; the inner store is
 * thread-safe itself. Nothing else changes after open.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "store/backend.h"
#include "store/fault.h"
#include "store/holds.h"

#define FAULT_PREFIX "fault+"
#define FAULT_PREFIX_LEN 6
#define FAULT_OPT_PREFIX "fault."
#define FAULT_OPT_PREFIX_LEN 6
#define FAULT_LATENCY_MAX_MS 3600000u
#define FAULT_EVICT_CHUNK 64 /* keys per inner remove when evicting */

/* Draws reserved per key, after the call's one latency draw. */
enum { DRAW_ERROR, DRAW_EVICT, DRAW_CORRUPT, DRAW_BIT, DRAWS_PER_KEY };

struct fault_store {
	kvl_store *inner;      /* owned; immutable */
	uint64_t seed;         /* immutable */
	int stats_unknown;     /* immutable: objects and bytes read unknown */
	int holds_self;        /* immutable: fault.holds=1 */
	kvl__holds holds;      /* fault.holds=1: the holds (own lock) */
	atomic_uint_fast64_t n_regs; /* registrations not yet forgotten */
	atomic_uint_fast64_t n_holds; /* fault.holds=1: holds taken, ever */
	pthread_mutex_t mu;
	kvl__fault_cfg cfg;    /* (mu) */
	atomic_uint_fast64_t next_draw;
	atomic_uint_fast64_t get_calls, put_calls;
	atomic_uint_fast64_t n_errors, n_corruptions, n_evictions, n_delays;
};

static const char *const fault_options[] = {
	"fault.error",     "fault.corrupt",      "fault.evict",
	"fault.latency_ms", "fault.latency_p",   "fault.seed",
	"fault.down",      "fault.fail_get_call", "fault.fail_put_call",
	"fault.whole_reads", "fault.stats_unknown", "fault.layer_read_min",
	"fault.holds",
};

#define FAULT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---------------------------------------------------------------- random */

/* Output number `i` (0-based) of splitmix64 seeded with `seed`. */
static uint64_t fault_mix(uint64_t seed, uint64_t i)
{
	uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* 1 with probability p for a uniform x: its top 53 bits as a real in
 * [0, 1) compared with p (so p = 0 never hits, p = 1 always does). */
static int fault_hit(uint64_t x, double p)
{
	return (double)(x >> 11) * 0x1.0p-53 < p;
}

/* --------------------------------------------------------------- a call */

/* One call as the fault store sees it: the batch, the configuration read
 * at its start and its first draw number. */
struct fault_call {
	kvl_store *store;
	struct fault_store *f;
	const kvl__batch *b;
	kvl__fault_cfg cfg;
	uint64_t base;   /* the call's first draw number */
	uint64_t errors; /* keys failed by an injected error */
};

/* The draw `what` of key i of this call. */
static uint64_t call_draw(const struct fault_call *c, size_t i, unsigned what)
{
	return fault_mix(c->f->seed,
	                 c->base + 1 + (uint64_t)i * DRAWS_PER_KEY + what);
}

static int call_hits(const struct fault_call *c, size_t i, unsigned what,
                     double p)
{
	return p > 0.0 && fault_hit(call_draw(c, i, what), p);
}

static void fault_sleep_ms(uint32_t ms)
{
	struct timespec ts = { .tv_sec = ms / 1000,
		               .tv_nsec = (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Every key's result and the return value: `code`, for a call that fails
 * whole. The message is already in the handle. */
static int call_fail_whole(const struct fault_call *c, int code)
{
	for (size_t i = 0; i < c->b->n; i++)
		c->b->results[i] = code;
	atomic_fetch_add(&c->f->n_errors, c->b->n);
	return code;
}

/* Copies the inner store's last message into ours, with `code`. */
static void call_pass_msg(const struct fault_call *c, int code)
{
	kvl__fail(&c->store->err, code, "%s", kvl_store_errmsg(c->f->inner));
}

/* Removes from the inner store every key drawn for eviction, in runs of
 * consecutive keys (at most FAULT_EVICT_CHUNK per call). Best effort: a
 * failed remove leaves the key where it was. */
static void call_evict(const struct fault_call *c)
{
	int removed[FAULT_EVICT_CHUNK];
	uint64_t evicted = 0;
	size_t i = 0, n = c->b->n;

	while (i < n) {
		if (!call_hits(c, i, DRAW_EVICT, c->cfg.evict)) {
			i++;
			continue;
		}
		size_t j = i + 1;
		while (j < n && j - i < FAULT_EVICT_CHUNK &&
		       call_hits(c, j, DRAW_EVICT, c->cfg.evict))
			j++;
		if (kvl_store_remove(c->f->inner, c->b->keys + i, j - i,
		                     removed) == 0)
			for (size_t k = 0; k < j - i; k++)
				evicted += removed[k] == 1;
		i = j;
	}
	if (evicted)
		atomic_fetch_add(&c->f->n_evictions, evicted);
}

/* Flips one bit of the bytes that key i (whose ranges start at the
 * batch's range `at`) just read. */
static void call_corrupt_key(const struct fault_call *c, size_t i, size_t at)
{
	const kvl_range *r = c->b->ranges + at;
	uint64_t total = 0;
	for (size_t j = 0; j < c->b->counts[i]; j++)
		total += r[j].len;
	if (total == 0)
		return;
	uint64_t x = call_draw(c, i, DRAW_BIT);
	uint64_t byte = (x >> 3) % total;
	unsigned bit = (unsigned)(x & 7);

	for (size_t j = 0; j < c->b->counts[i]; j++) {
		if (byte < r[j].len) {
			unsigned char *p = r[j].addr;
			p[byte] ^= (unsigned char)(1u << bit);
			atomic_fetch_add(&c->f->n_corruptions, 1);
			return;
		}
		byte -= r[j].len;
	}
}

/* Reads the configuration, sleeps, and fails the call whole when the store
 * is down or when `number` (the get or put call's number; 0 for exists and
 * remove) is the one configured to fail. 0: go on. */
static int call_begin(struct fault_call *c, uint64_t number)
{
	int is_put = c->b->op == KVL__OP_PUT;
	struct fault_store *f = c->f;

	pthread_mutex_lock(&f->mu);
	c->cfg = f->cfg;
	pthread_mutex_unlock(&f->mu);
	c->base = atomic_fetch_add(&f->next_draw,
	                           1 + (uint64_t)c->b->n * DRAWS_PER_KEY);

	if (c->cfg.latency_ms && c->cfg.latency_p > 0.0 &&
	    fault_hit(fault_mix(f->seed, c->base), c->cfg.latency_p)) {
		fault_sleep_ms(c->cfg.latency_ms);
		atomic_fetch_add(&f->n_delays, 1);
	}
	if (c->cfg.down) {
		kvl__fail(&c->store->err, KVL_EIO,
		          "%s: store is down (fault.down=1)", c->b->fn);
		return call_fail_whole(c, KVL_EIO);
	}
	uint64_t fail_at = is_put ? c->cfg.fail_put_call :
	                   c->b->op == KVL__OP_GET ? c->cfg.fail_get_call : 0;
	if (fail_at && number == fail_at) {
		kvl__fail(&c->store->err, KVL_EIO,
		          "%s: injected failure of %s call %llu "
		          "(fault.fail_%s_call)",
		          c->b->fn, is_put ? "put" : "get",
		          (unsigned long long)number, is_put ? "put" : "get");
		return call_fail_whole(c, KVL_EIO);
	}
	return 0;
}

/* A key drawn for an injected error: KVL_EIO, never sent on. */
static int call_skip(void *ctx, const kvl__batch *b, size_t i)
{
	struct fault_call *c = ctx;
	if (!call_hits(c, i, DRAW_ERROR, c->cfg.error))
		return 0;
	if (c->errors++ == 0)
		kvl__fail(&c->store->err, KVL_EIO,
		          "%s: key \"%s\": injected I/O error (fault.error=%g)",
		          b->fn, b->keys[i], c->cfg.error);
	b->results[i] = KVL_EIO;
	return 1;
}

/* A run of keys to the inner store, its message passed on when it failed
 * whole or a key of it failed (absence is no failure). */
static int call_inner(void *ctx, const kvl__batch *run)
{
	struct fault_call *c = ctx;
	int rc = kvl__store_call(c->f->inner, run);
	if (rc < 0) {
		call_pass_msg(c, rc);
		return rc;
	}
	for (size_t k = 0; k < run->n; k++)
		if (run->results[k] < 0 && run->results[k] != KVL_ENOTFOUND) {
			call_pass_msg(c, run->results[k]);
			break;
		}
	return 0;
}

/* Everything after call_begin: evictions, per-key errors, the inner store
 * in runs, corruptions. Returns 0 or the code of a whole failure. */
static int call_run(struct fault_call *c)
{
	const kvl__batch *b = c->b;
	if (c->cfg.evict > 0.0 &&
	    (b->op == KVL__OP_EXISTS || b->op == KVL__OP_GET))
		call_evict(c);
	int rc = kvl__batch_runs(b, call_skip, call_inner, c);
	if (c->errors)
		atomic_fetch_add(&c->f->n_errors, c->errors);
	if (rc < 0)
		return rc;
	if (b->op == KVL__OP_GET && c->cfg.corrupt > 0.0) {
		size_t at = 0;
		for (size_t i = 0; i < b->n; i++) {
			if (b->results[i] == 0 &&
			    call_hits(c, i, DRAW_CORRUPT, c->cfg.corrupt))
				call_corrupt_key(c, i, at);
			at += b->counts[i];
		}
	}
	return 0;
}

/* ------------------------------------------------------------ operations */

/* One call of any operation; `number` counts get or put calls (0 for the
 * others). */
static int fault_call(kvl_store *store, struct fault_store *f,
                      const kvl__batch *b, uint64_t number)
{
	struct fault_call c = {.store = store, .f = f, .b = b};
	int rc = call_begin(&c, number);
	return rc < 0 ? rc : call_run(&c);
}

static int fault_exists(kvl_store *store, void *impl, const kvl__batch *b)
{
	return fault_call(store, impl, b, 0);
}

static int fault_get(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct fault_store *f = impl;
	return fault_call(store, f, b, atomic_fetch_add(&f->get_calls, 1) + 1);
}

static int fault_put(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct fault_store *f = impl;
	return fault_call(store, f, b, atomic_fetch_add(&f->put_calls, 1) + 1);
}

static int fault_remove(kvl_store *store, void *impl, const kvl__batch *b)
{
	return fault_call(store, impl, b, 0);
}

/* 1 while the store is down (fault.down=1). */
static int fault_down(struct fault_store *f)
{
	pthread_mutex_lock(&f->mu);
	int down = f->cfg.down;
	pthread_mutex_unlock(&f->mu);
	return down;
}

/* fault.holds=1: a hold counts a present key (as the inner store's exists
 * says) and fails whole while the store is down; an unhold lets one go
 * (KVL_ENOTFOUND for a key not held: the caller let go of more than it
 * held). */
static int fault_hold_self(kvl_store *store, struct fault_store *f,
                           const kvl__batch *b)
{
	if (b->op == KVL__OP_UNHOLD) {
		for (size_t i = 0; i < b->n; i++) {
			unsigned mask;
			b->results[i] = kvl__holds_take(&f->holds, b->keys[i],
			                                &mask);
		}
		return 0;
	}
	if (fault_down(f)) {
		for (size_t i = 0; i < b->n; i++)
			b->results[i] = KVL_EIO;
		return kvl__fail(&store->err, KVL_EIO,
		                 "hold: store is down (fault.down=1)");
	}
	int rc = kvl_store_exists(f->inner, b->keys, b->n, b->results);
	if (rc < 0)
		return kvl__fail(&store->err, rc, "%s",
		                 kvl_store_errmsg(f->inner));
	for (size_t i = 0; i < b->n; i++)
		if (b->results[i] != 1)
			continue;
		else if (kvl__holds_add(&f->holds, b->keys[i], 0) < 0)
			b->results[i] = kvl__fail(&store->err, KVL_ENOMEM,
			                          "hold: out of memory");
		else
			atomic_fetch_add(&f->n_holds, 1);
	return 0;
}

/* Holds go to the inner store as they are (fault.holds=0): faults are
 * injected into the reads they precede, which is where a lost hold
 * shows. */
static int fault_hold(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct fault_store *f = impl;
	if (f->holds_self)
		return fault_hold_self(store, f, b);
	int rc = b->op == KVL__OP_HOLD
	                 ? kvl__store_hold(f->inner, b->keys, b->n, b->results)
	                 : kvl__store_unhold(f->inner, b->keys, b->n,
	                                     b->results);
	if (rc < 0)
		kvl__fail(&store->err, rc, "%s", kvl_store_errmsg(f->inner));
	return rc;
}

/* Passed on to the inner store; fails while the store is down. */
static int fault_reg(kvl_store *store, void *impl, void *addr, size_t len,
                     kvl_mem_kind mem)
{
	struct fault_store *f = impl;
	if (fault_down(f))
		return kvl__fail(&store->err, KVL_EIO,
		                 "kvl_store_register: store is down "
		                 "(fault.down=1)");
	int rc = kvl_store_register(f->inner, addr, len, mem);
	if (rc < 0)
		kvl__fail(&store->err, rc, "%s", kvl_store_errmsg(f->inner));
	else
		atomic_fetch_add(&f->n_regs, 1);
	return rc;
}

static void fault_unreg(kvl_store *store, void *impl, void *addr)
{
	struct fault_store *f = impl;
	(void)store;
	kvl__store_unregister(f->inner, addr);
	uint_fast64_t n = atomic_load(&f->n_regs);
	while (n && !atomic_compare_exchange_weak(&f->n_regs, &n, n - 1))
		;
}

/* The inner store's answer; an error while the store is down. */
static int fault_size(kvl_store *store, void *impl, const char *key,
                      uint64_t *len)
{
	struct fault_store *f = impl;
	if (fault_down(f))
		return kvl__fail(&store->err, KVL_EIO,
		                 "size: store is down (fault.down=1)");
	return kvl__store_size(f->inner, key, len);
}

/* The inner store's victims, as the inner store names them (the inner
 * store takes no tenant of its own here: it gets this store's keys). */
static int fault_on_evict(kvl_store *store, void *impl,
                          const kvl__evict_hook *hook)
{
	struct fault_store *f = impl;
	int rc = kvl__store_on_evict(f->inner, hook);
	if (rc < 0)
		kvl__fail(&store->err, rc, "%s", kvl_store_errmsg(f->inner));
	return rc;
}

static void fault_stats(void *impl, kvl_store_stats *out)
{
	struct fault_store *f = impl;
	kvl_store_stats in;

	memset(&in, 0, sizeof in);
	kvl_store_stats_get(f->inner, &in);
	*out = in;
	out->errors += atomic_load(&f->n_errors);
	if (f->stats_unknown) /* as a remote store with a node down */
		out->objects = out->bytes = UINT64_MAX;
}

/* ----------------------------------------------------------- open, close */

static void fault_close(void *impl)
{
	struct fault_store *f = impl;
	if (!f)
		return;
	kvl_store_close(f->inner);
	kvl__holds_destroy(&f->holds);
	pthread_mutex_destroy(&f->mu);
	free(f);
}

/* Reads the fault.* options into cfg and seed. */
static int fault_read_options(kvl__uri *uri, kvl__fault_cfg *cfg,
                              uint64_t *seed, int *whole, uint64_t *lrm,
                              int *unknown, int *holds, char *errbuf,
                              size_t errlen)
{
	uint64_t latency_ms = 0;
	int rc;

	for (size_t i = 0; i < uri->n_opts; i++) {
		const char *k = uri->keys[i];
		size_t o;
		if (strncmp(k, FAULT_OPT_PREFIX, FAULT_OPT_PREFIX_LEN) != 0)
			continue;
		for (o = 0; o < FAULT_ARRAY_LEN(fault_options); o++)
			if (strcmp(k, fault_options[o]) == 0)
				break;
		if (o == FAULT_ARRAY_LEN(fault_options))
			return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
			                     "fault store: unknown option '%s' "
			                     "(known: fault.error, "
			                     "fault.corrupt, fault.evict, "
			                     "fault.latency_ms, "
			                     "fault.latency_p, fault.seed, "
			                     "fault.down, "
			                     "fault.fail_get_call, "
			                     "fault.fail_put_call, "
			                     "fault.whole_reads, "
			                     "fault.layer_read_min, "
			                     "fault.stats_unknown, fault.holds)",
			                     k);
	}

	if ((rc = kvl__uri_prob(uri, "fault.error", &cfg->error, errbuf,
	                        errlen)) < 0 ||
	    (rc = kvl__uri_prob(uri, "fault.corrupt", &cfg->corrupt, errbuf,
	                        errlen)) < 0 ||
	    (rc = kvl__uri_prob(uri, "fault.evict", &cfg->evict, errbuf,
	                        errlen)) < 0 ||
	    (rc = kvl__uri_prob(uri, "fault.latency_p", &cfg->latency_p,
	                        errbuf, errlen)) < 0 ||
	    (rc = kvl__uri_u64(uri, "fault.latency_ms", &latency_ms, errbuf,
	                       errlen)) < 0 ||
	    (rc = kvl__uri_u64(uri, "fault.seed", seed, errbuf, errlen)) < 0 ||
	    (rc = kvl__uri_bool(uri, "fault.down", &cfg->down, errbuf,
	                        errlen)) < 0 ||
	    (rc = kvl__uri_u64(uri, "fault.fail_get_call", &cfg->fail_get_call,
	                       errbuf, errlen)) < 0 ||
	    (rc = kvl__uri_u64(uri, "fault.fail_put_call", &cfg->fail_put_call,
	                       errbuf, errlen)) < 0 ||
	    (rc = kvl__uri_bool(uri, "fault.whole_reads", whole, errbuf,
	                        errlen)) < 0 ||
	    (rc = kvl__uri_size(uri, "fault.layer_read_min", lrm, errbuf,
	                        errlen)) < 0 ||
	    (rc = kvl__uri_bool(uri, "fault.stats_unknown", unknown, errbuf,
	                        errlen)) < 0 ||
	    (rc = kvl__uri_bool(uri, "fault.holds", holds, errbuf, errlen)) < 0)
		return rc;
	if (latency_ms > FAULT_LATENCY_MAX_MS)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "store option fault.latency_ms=%llu: at "
		                     "most %u (one hour)",
		                     (unsigned long long)latency_ms,
		                     FAULT_LATENCY_MAX_MS);
	cfg->latency_ms = (uint32_t)latency_ms;
	return 0;
}

/* The inner store's URI, in a new string (free it), or NULL when out of
 * memory. Marks the options it carries as used. */
static char *fault_inner_uri(kvl__uri *uri)
{
	const char *scheme = uri->scheme + FAULT_PREFIX_LEN;
	/* The parser leaves "//" in place after "scheme:" when the URI had
	 * an authority (even an empty one). */
	int has_auth = uri->has_authority;
	size_t len = strlen(scheme) + 4 + strlen(uri->authority) +
	             strlen(uri->path) + 2;

	for (size_t i = 0; i < uri->n_opts; i++)
		len += strlen(uri->keys[i]) + strlen(uri->values[i]) + 2;
	char *s = malloc(len);
	if (!s)
		return NULL;

	char *p = s;
	p += sprintf(p, "%s:%s%s%s", scheme, has_auth ? "//" : "",
	             uri->authority, uri->path);
	char sep = '?';
	for (size_t i = 0; i < uri->n_opts; i++) {
		const char *k = uri->keys[i], *v = NULL;
		if (strncmp(k, FAULT_OPT_PREFIX, FAULT_OPT_PREFIX_LEN) == 0 ||
		    uri->used[i]) /* fault.*, or the door's (breaker=, secret_file=) */
			continue;
		kvl__uri_str(uri, k, &v); /* marks it used */
		p += sprintf(p, "%c%s=%s", sep, k, v);
		sep = '&';
	}
	return s;
}

static int fault_open(kvl_store *store, kvl__uri *uri, void **impl,
                      kvl__store_caps *caps, char *errbuf, size_t errlen)
{
	kvl__fault_cfg cfg = { .latency_p = 1.0 };
	uint64_t seed = 1;
	kvl_store *inner = NULL;
	int rc, whole = 0, unknown = 0, holds = 0;
	uint64_t lrm = UINT64_MAX; /* not given: the inner store's */

	if (strncmp(uri->scheme, FAULT_PREFIX, FAULT_PREFIX_LEN) != 0 ||
	    uri->scheme[FAULT_PREFIX_LEN] == '\0')
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "fault store: scheme '%s' names no inner "
		                     "store; expected fault+<scheme>, e.g. "
		                     "\"fault+mem:?fault.error=0.1\"",
		                     uri->scheme);
	if (strcmp(uri->scheme + FAULT_PREFIX_LEN, "tier") == 0)
		return kvl__fail_buf(errbuf, errlen, KVL_EPARSE,
		                     "fault store: cannot wrap a tier: store "
		                     "(its '|' and '?' would mix with fault's "
		                     "options); wrap its tiers instead, e.g. "
		                     "\"tier:fault+mem:?fault.error=0.1|mem:\"");
	rc = fault_read_options(uri, &cfg, &seed, &whole, &lrm, &unknown,
	                        &holds, errbuf, errlen);
	if (rc < 0)
		return rc;

	char *inner_uri = fault_inner_uri(uri);
	if (!inner_uri)
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "fault store: out of memory");
	rc = kvl__store_open_wrapped(inner_uri, &inner, errbuf, errlen);
	free(inner_uri);
	if (rc < 0)
		return rc;

	struct fault_store *f = calloc(1, sizeof *f);
	if (!f) {
		kvl_store_close(inner);
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "fault store: out of memory");
	}
	pthread_mutex_init(&f->mu, NULL);
	f->inner = inner;
	f->seed = seed;
	f->stats_unknown = unknown;
	f->holds_self = holds;
	kvl__holds_init(&f->holds);
	atomic_init(&f->n_regs, 0);
	atomic_init(&f->n_holds, 0);
	memcpy(store->note, inner->note, sizeof store->note);
	f->cfg = cfg;
	atomic_init(&f->next_draw, 0);
	atomic_init(&f->get_calls, 0);
	atomic_init(&f->put_calls, 0);
	atomic_init(&f->n_errors, 0);
	atomic_init(&f->n_corruptions, 0);
	atomic_init(&f->n_evictions, 0);
	atomic_init(&f->n_delays, 0);
	(void)store;
	caps->trusted = 0; /* whatever the inner store says */
	caps->whole_reads = whole || kvl__store_caps_of(inner).whole_reads;
	caps->layer_read_min = lrm != UINT64_MAX
	                               ? lrm
	                               : kvl__store_caps_of(inner).layer_read_min;
	*impl = f;
	return 0;
}

const kvl__store_ops kvl__store_fault_ops = {
	.scheme = FAULT_PREFIX,
	.open = fault_open,
	.close = fault_close,
	.exists = fault_exists,
	.get = fault_get,
	.put = fault_put,
	.remove = fault_remove,
	.reg = fault_reg,
	.unreg = fault_unreg,
	.hold = fault_hold,
	.unhold = fault_hold,
	.stats = fault_stats,
	.on_evict = fault_on_evict,
	.size = fault_size,
};

/* --------------------------------------------------------------- control */

/* The fault store behind s, or NULL (KVL_EINVAL recorded in s). */
static struct fault_store *fault_of(kvl_store *s, const char *fn)
{
	if (!s)
		return NULL;
	if (s->ops != &kvl__store_fault_ops) {
		kvl__fail(&s->err, KVL_EINVAL,
		          "%s: not a fault store (scheme %s:)", fn,
		          s->ops->scheme);
		return NULL;
	}
	return s->impl;
}

int kvl__fault_get(kvl_store *s, kvl__fault_cfg *out)
{
	struct fault_store *f = fault_of(s, "kvl__fault_get");
	if (!f)
		return KVL_EINVAL;
	if (!out)
		return kvl__fail(&s->err, KVL_EINVAL,
		                 "kvl__fault_get: out is NULL");
	pthread_mutex_lock(&f->mu);
	*out = f->cfg;
	pthread_mutex_unlock(&f->mu);
	return 0;
}

int kvl__fault_set(kvl_store *s, const kvl__fault_cfg *cfg)
{
	struct fault_store *f = fault_of(s, "kvl__fault_set");
	if (!f)
		return KVL_EINVAL;
	if (!cfg)
		return kvl__fail(&s->err, KVL_EINVAL,
		                 "kvl__fault_set: cfg is NULL");
	const struct {
		const char *name;
		double v;
	} probs[] = {
		{ "error", cfg->error },
		{ "corrupt", cfg->corrupt },
		{ "evict", cfg->evict },
		{ "latency_p", cfg->latency_p },
	};
	for (size_t i = 0; i < FAULT_ARRAY_LEN(probs); i++)
		if (!(probs[i].v >= 0.0 && probs[i].v <= 1.0))
			return kvl__fail(&s->err, KVL_EINVAL,
			                 "kvl__fault_set: %s=%g is not a "
			                 "probability in [0, 1]",
			                 probs[i].name, probs[i].v);
	if (cfg->latency_ms > FAULT_LATENCY_MAX_MS)
		return kvl__fail(&s->err, KVL_EINVAL,
		                 "kvl__fault_set: latency_ms=%u is above %u "
		                 "(one hour)",
		                 (unsigned)cfg->latency_ms,
		                 FAULT_LATENCY_MAX_MS);
	kvl__fault_cfg c = *cfg;
	c.down = c.down != 0;
	pthread_mutex_lock(&f->mu);
	f->cfg = c;
	pthread_mutex_unlock(&f->mu);
	return 0;
}

int kvl__fault_counts(kvl_store *s, uint64_t *errors, uint64_t *corruptions,
                      uint64_t *evictions, uint64_t *delays)
{
	struct fault_store *f = fault_of(s, "kvl__fault_counts");
	if (!f)
		return KVL_EINVAL;
	if (errors)
		*errors = atomic_load(&f->n_errors);
	if (corruptions)
		*corruptions = atomic_load(&f->n_corruptions);
	if (evictions)
		*evictions = atomic_load(&f->n_evictions);
	if (delays)
		*delays = atomic_load(&f->n_delays);
	return 0;
}

int kvl__fault_calls(kvl_store *s, uint64_t *gets, uint64_t *puts)
{
	struct fault_store *f = fault_of(s, "kvl__fault_calls");
	if (!f)
		return KVL_EINVAL;
	if (gets)
		*gets = atomic_load(&f->get_calls);
	if (puts)
		*puts = atomic_load(&f->put_calls);
	return 0;
}

int kvl__fault_holds(kvl_store *s, const char *key, uint32_t *now,
                     uint64_t *taken)
{
	struct fault_store *f = fault_of(s, "kvl__fault_holds");
	if (!f)
		return KVL_EINVAL;
	if (now && !key)
		return kvl__fail(&s->err, KVL_EINVAL,
		                 "kvl__fault_holds: key is NULL");
	if (now)
		*now = kvl__holds_count(&f->holds, key);
	if (taken)
		*taken = atomic_load(&f->n_holds);
	return 0;
}

int kvl__fault_regs(kvl_store *s, uint64_t *live)
{
	struct fault_store *f = fault_of(s, "kvl__fault_regs");
	if (!f)
		return KVL_EINVAL;
	if (!live)
		return kvl__fail(&s->err, KVL_EINVAL,
		                 "kvl__fault_regs: live is NULL");
	*live = atomic_load(&f->n_regs);
	return 0;
}
