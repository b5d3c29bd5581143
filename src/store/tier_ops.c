/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tier_ops.c — the tier: store's operations (tier.c gives the semantics):
 * the union read of exists and get, put to the top with fall-back or
 * through every tier, remove from all, the spill-down of an evicted object
 * and the promoter's copy of one object into the top tier.
 *
 * A call is cut into chunks of TIER_CHUNK keys, so that what each key has
 * seen so far (answered yet, its first failure, each tier's result) lives
 * on the stack: nothing is allocated per call or per key. Within a chunk,
 * each tier is asked only the keys still open, in runs of consecutive
 * keys (kvl__batch_runs over the caller's own arrays).
 *
 * Honesty: a key's result is that of the highest tier that answered it
 * (found, or a final answer: a range beyond the object, a malformed key);
 * a key no tier answered gets the first failure seen, else absent. So a
 * key reads as present only if some tier read all its ranges, and a failed
 * tier never hides a copy that another tier has.
 *
 * Objects on their way down: a spilled object is invisible in its tier from
 * its eviction until the spill's put below returns, so a concurrent read
 * can miss it everywhere. Evictions and spills tell tier_transit.h; a read
 * that missed keys asks it whether one of them was moving meanwhile, waits
 * for that one, and looks again (TIER_LOOKS at most). Reads that find
 * everything pay one lock per chunk; misses while nothing moves, two.
 */
#include <stdlib.h>
#include <time.h>

#include "store/tier_impl.h"

#define TIER_CHUNK 256
#define TIER_TRANSIT_MS 1000 /* a read waits this long at most for a
                              * spill in progress elsewhere */
#define TIER_LOOKS 8         /* looks of a read that keeps missing objects
                              * on their way down, at most */

/* A chunk's state across the tiers it is asked of. */
struct tier_pass {
	struct tier_store *t;
	kvl_store *store;        /* the tier store, for messages */
	unsigned k;              /* the tier being asked */
	uint8_t done[TIER_CHUNK];
	int err[TIER_CHUNK];     /* the first failure, or 0 */
	int err_msg;             /* a failure's message is in store->err */
};

static int pass_skip(void *ctx, const kvl__batch *b, size_t i)
{
	(void)b;
	return ((struct tier_pass *)ctx)->done[i];
}

static int pass_run(void *ctx, const kvl__batch *run)
{
	struct tier_pass *p = ctx;
	return kvl__store_call(p->t->tier[p->k], run);
}

/* Key i's result from tier p->k was a failure: counted, kept if it is the
 * first, and its message passed on once. */
static void pass_failed(struct tier_pass *p, size_t i, int r)
{
	atomic_fetch_add(&p->t->c[p->k].failures, 1);
	if (!p->err[i])
		p->err[i] = r;
	if (!p->err_msg++)
		kvl__fail(&p->store->err, r, "tier %u (\"%s\"): %s", p->k,
		          p->t->shown[p->k],
		          kvl_store_errmsg(p->t->tier[p->k]));
}

/* Runs fn on each chunk of b. */
static void tier_chunks(struct tier_store *t, kvl_store *store,
                        const kvl__batch *b,
                        void (*fn)(struct tier_store *t, kvl_store *store,
                                   const kvl__batch *chunk))
{
	size_t at = 0;
	for (size_t i = 0; i < b->n; i += TIER_CHUNK) {
		size_t j = i + TIER_CHUNK < b->n ? i + TIER_CHUNK : b->n;
		kvl__batch c = kvl__batch_slice(b, i, j, at);
		for (size_t k = i; k < j; k++)
			at += kvl__batch_count(b, k);
		fn(t, store, &c);
	}
}

/* --------------------------------------------------- exists, get: union */

static uint64_t tier_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* After a look (begun at mark m) that missed keys: 1 when one of them was
 * on its way down meanwhile, and then it has waited (TIER_TRANSIT_MS at
 * most) until none of them is, so that the next look can find them. */
static int transit_wait(struct tier_store *t, const struct tier_pass *p,
                        const kvl__batch *c, kvl__transit_mark m)
{
	uint64_t h[TIER_CHUNK];
	size_t n = 0;
	for (size_t i = 0; i < c->n; i++)
		if (!p->done[i])
			h[n++] = kvl__evict_key_hash(c->keys[i]);
	if (!kvl__transit_since(&t->transit, m, h, n))
		return 0;
	struct timespec t0, now, nap = {0, 20000};
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (size_t i = 0; i < n; i++) {
		while (kvl__transit_moving(&t->transit, h[i])) {
			nanosleep(&nap, NULL);
			clock_gettime(CLOCK_MONOTONIC, &now);
			if ((now.tv_sec - t0.tv_sec) * 1000 +
			            (now.tv_nsec - t0.tv_nsec) / 1000000 >=
			    TIER_TRANSIT_MS)
				return 1;
		}
	}
	return 1;
}

/* Asks tier k for the keys of c still open; returns how many it answered
 * (found, or a final answer). */
static size_t union_ask(struct tier_pass *p, const kvl__batch *c, unsigned k)
{
	struct tier_store *t = p->t;
	int is_get = c->op == KVL__OP_GET;
	size_t answered = 0;

	p->k = k;
	uint64_t t0 = is_get ? tier_now_ns() : 0, bytes = 0;
	kvl__batch_runs(c, pass_skip, pass_run, p);
	for (size_t i = 0, at = 0; i < c->n; at += c->counts ? c->counts[i] : 0,
	                                     i++) {
		if (p->done[i])
			continue;
		int r = c->results[i];
		if (is_get ? r == 0 : r == 1) {
			atomic_fetch_add(&t->c[k].hits, 1);
			for (size_t j = 0; is_get && j < c->counts[i]; j++)
				bytes += c->ranges[at + j].len;
			if (is_get && k > 0 && t->promoter)
				kvl__promoter_offer(t->promoter, c->keys[i], k);
		} else if (r == KVL_ERANGE || r == KVL_EINVAL) {
			/* the same answer anywhere: final */
		} else if (is_get ? r == KVL_ENOTFOUND : r == 0) {
			continue; /* absent here: ask the next tier */
		} else {
			pass_failed(p, i, r);
			continue;
		}
		p->done[i] = 1;
		answered++;
	}
	if (is_get) { /* the tier's read rate, its misses' cost included */
		atomic_fetch_add(&t->c[k].read_bytes, bytes);
		atomic_fetch_add(&t->c[k].read_ns, tier_now_ns() - t0);
	}
	return answered;
}

/* Asks each tier in turn for the keys of c that no tier above answered;
 * again (TIER_LOOKS at most) for the keys still missing when an object was
 * on its way down meanwhile: it was then in no tier for a moment. */
static void union_chunk(struct tier_store *t, kvl_store *store,
                        const kvl__batch *c)
{
	struct tier_pass p = {.t = t, .store = store};
	int is_get = c->op == KVL__OP_GET;
	size_t open = c->n;

	memset(p.done, 0, c->n);
	memset(p.err, 0, c->n * sizeof p.err[0]);
	for (int look = 1; open; look++) {
		kvl__transit_mark m = kvl__transit_mark_now(&t->transit);
		for (unsigned k = 0; k < t->n && open; k++)
			open -= union_ask(&p, c, k);
		if (!open || look == TIER_LOOKS || !transit_wait(t, &p, c, m))
			break;
	}
	uint64_t hits = 0, misses = 0, errors = 0;
	for (size_t i = 0; i < c->n; i++) {
		int r = c->results[i];
		if (!p.done[i])
			c->results[i] = r = p.err[i] ? p.err[i]
			                  : is_get  ? KVL_ENOTFOUND
			                            : 0;
		if (is_get ? r == 0 : r == 1)
			hits++;
		else if (r == 0 || r == KVL_ENOTFOUND)
			misses++;
		else
			errors++;
	}
	atomic_fetch_add(&t->hits, hits);
	atomic_fetch_add(&t->misses, misses);
	atomic_fetch_add(&t->errors, errors);
}

int kvl__tier_exists(kvl_store *store, void *impl, const kvl__batch *b)
{
	tier_chunks(impl, store, b, union_chunk);
	return 0;
}

int kvl__tier_get(kvl_store *store, void *impl, const kvl__batch *b)
{
	tier_chunks(impl, store, b, union_chunk);
	return 0;
}

/* ------------------------------------------------------------------- put */

/* Write to the top: each key the top fails (an I/O error, full, too
 * large) falls back to the next tier down. */
static void put_top_chunk(struct tier_store *t, kvl_store *store,
                          const kvl__batch *c)
{
	struct tier_pass p = {.t = t, .store = store};
	size_t open = c->n;

	memset(p.done, 0, c->n);
	memset(p.err, 0, c->n * sizeof p.err[0]);
	for (unsigned k = 0; k < t->n && open; k++) {
		p.k = k;
		kvl__batch_runs(c, pass_skip, pass_run, &p);
		for (size_t i = 0; i < c->n; i++) {
			if (p.done[i])
				continue;
			int r = c->results[i];
			if (r < 0 && r != KVL_EINVAL) {
				pass_failed(&p, i, r);
				continue;
			}
			p.done[i] = 1;
			open--;
		}
	}
	uint64_t stored = 0, errors = 0;
	for (size_t i = 0; i < c->n; i++) {
		if (!p.done[i])
			c->results[i] = p.err[i];
		stored += c->results[i] == KVL_PUT_STORED;
		errors += c->results[i] < 0;
	}
	atomic_fetch_add(&t->puts, stored);
	atomic_fetch_add(&t->errors, errors);
}

/* Every tier gets every key of c: each tier's result for key i that is no
 * failure is folded into best[i]; failures go to p. */
static void every_tier(struct tier_pass *p, const kvl__batch *c, int *best,
                       int (*fold)(int best, int r))
{
	int res[TIER_CHUNK];
	kvl__batch tb = *c;
	tb.results = res;

	memset(p->err, 0, c->n * sizeof p->err[0]);
	for (unsigned k = 0; k < p->t->n; k++) {
		p->k = k;
		int rc = kvl__store_call(p->t->tier[k], &tb);
		for (size_t i = 0; i < c->n; i++) {
			int r = rc < 0 ? rc : res[i];
			if (r < 0)
				pass_failed(p, i, r);
			else
				best[i] = fold(best[i], r);
		}
	}
}

/* Stored anywhere is stored; else present anywhere is present. */
static int fold_put(int best, int r)
{
	return best < 0 || r == KVL_PUT_STORED ? r : best;
}

/* Write through: every tier gets every key; a key stored by any tier is
 * stored, present in all that answered is present, else the first
 * failure. */
static void put_through_chunk(struct tier_store *t, kvl_store *store,
                              const kvl__batch *c)
{
	struct tier_pass p = {.t = t, .store = store};
	int best[TIER_CHUNK];
	for (size_t i = 0; i < c->n; i++)
		best[i] = -1; /* no tier took it yet */
	every_tier(&p, c, best, fold_put);
	uint64_t stored = 0, errors = 0;
	for (size_t i = 0; i < c->n; i++) {
		c->results[i] = best[i] >= 0 ? best[i] : p.err[i];
		stored += c->results[i] == KVL_PUT_STORED;
		errors += c->results[i] < 0;
	}
	atomic_fetch_add(&t->puts, stored);
	atomic_fetch_add(&t->errors, errors);
}

int kvl__tier_put(kvl_store *store, void *impl, const kvl__batch *b)
{
	struct tier_store *t = impl;
	tier_chunks(t, store, b,
	            t->write_through ? put_through_chunk : put_top_chunk);
	return 0;
}

/* ---------------------------------------------------------------- remove */

static int fold_removed(int any, int r)
{
	return any | (r == 1);
}

/* Every tier: removed from any is removed, unless some tier failed (the
 * key may then remain there: its failure is the result). */
static void remove_chunk(struct tier_store *t, kvl_store *store,
                         const kvl__batch *c)
{
	struct tier_pass p = {.t = t, .store = store};
	int any[TIER_CHUNK];
	memset(any, 0, c->n * sizeof any[0]);
	every_tier(&p, c, any, fold_removed);
	uint64_t errors = 0;
	for (size_t i = 0; i < c->n; i++) {
		c->results[i] = p.err[i] ? p.err[i] : any[i];
		errors += p.err[i] != 0;
	}
	atomic_fetch_add(&t->errors, errors);
}

int kvl__tier_remove(kvl_store *store, void *impl, const kvl__batch *b)
{
	tier_chunks(impl, store, b, remove_chunk);
	return 0;
}

/* ------------------------------------------------------------ spill-down */

/* Puts one object into tier k; 1 when it holds it now. */
static int put_one(struct tier_store *t, unsigned k, const char *key,
                   const void *data, size_t len)
{
	kvl_iov piece = {.addr = (void *)data, .len = len};
	size_t count = 1;
	int res = 0;
	kvl__batch b = {.op = KVL__OP_PUT, .n = 1, .keys = &key,
	                .counts = &count, .pieces = &piece, .results = &res,
	                .fn = "tier: spill"};
	int rc = kvl__store_call(t->tier[k], &b);
	return rc == 0 && (res == KVL_PUT_STORED || res == KVL_PUT_PRESENT);
}

/* An object that tier slot->index evicted: into the first tier below it
 * that takes it. Runs on the evicting thread, outside the tier's lock; a
 * put into a mem: tier below may evict there in turn and spill further. */
void kvl__tier_spill(void *ctx, uint64_t key_hash, const char *key,
                     const void *data, size_t len)
{
	const struct tier_slot *s = ctx;
	struct tier_store *t = s->t;
	/* no key: the victim could not be read back, nothing goes down */
	unsigned k = key ? s->index + 1 : t->n;
	for (; k < t->n; k++) {
		if (put_one(t, k, key, data, len))
			break;
		atomic_fetch_add(&t->c[k].failures, 1);
	}
	atomic_fetch_add(k < t->n ? &t->c[s->index].spills
	                          : &t->c[s->index].spills_lost,
	                 1);
	/* after the put: a read that missed it looks again */
	kvl__transit_end(&t->transit, key_hash);
}

/* An object that tier slot->index evicted is invisible there from now:
 * under that tier's lock. */
void kvl__tier_unlinked(void *ctx, uint64_t key_hash)
{
	const struct tier_slot *s = ctx;
	kvl__transit_begin(&s->t->transit, key_hash);
}

/* ------------------------------------------------------------- promotion */

/* On the promoter's thread: the object `key` from tier `from` into the top
 * tier, unless the top has it already or it is gone below. */
void kvl__tier_promote_one(void *ctx, const char *key, unsigned from)
{
	struct tier_store *t = ctx;
	kvl_store *top = t->tier[0], *src = t->tier[from];
	int present = 0;
	kvl__batch eb = {.op = KVL__OP_EXISTS, .n = 1, .keys = &key,
	                 .results = &present, .fn = "tier: promote"};
	if (kvl__store_call(top, &eb) == 0 && present == 1)
		return;

	uint64_t len = 0;
	int rc = kvl__store_size(src, key, &len);
	if (rc == 0)
		return; /* gone below meanwhile */
	if (rc < 0 || len > t->promote_max || len > SIZE_MAX) {
		atomic_fetch_add(&t->promote_failed, 1);
		return;
	}
	void *buf = malloc(len ? (size_t)len : 1);
	if (!buf) {
		atomic_fetch_add(&t->promote_failed, 1);
		return;
	}
	kvl_range range = {.offset = 0, .addr = buf, .len = (size_t)len};
	size_t count = 1;
	int res = 0;
	kvl__batch gb = {.op = KVL__OP_GET, .n = 1, .keys = &key,
	                 .counts = &count, .ranges = &range, .results = &res,
	                 .fn = "tier: promote"};
	rc = kvl__store_call(src, &gb);
	if (rc == 0 && res == 0) {
		kvl_iov piece = {.addr = buf, .len = (size_t)len};
		kvl__batch pb = {.op = KVL__OP_PUT, .n = 1, .keys = &key,
		                 .counts = &count, .pieces = &piece,
		                 .results = &res, .fn = "tier: promote"};
		rc = kvl__store_call(top, &pb);
		if (rc == 0 && res == KVL_PUT_STORED)
			atomic_fetch_add(&t->c[from].promotions, 1);
		else if (rc < 0 || res < 0)
			atomic_fetch_add(&t->promote_failed, 1);
	} else if (!(rc == 0 && res == KVL_ENOTFOUND)) {
		atomic_fetch_add(&t->promote_failed, 1);
	}
	free(buf);
}
