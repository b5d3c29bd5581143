/*
 * linker.c — the engine-facing linker: lookups, layer-wise load batches, a
 * background offloader, cancellation and exactly-once completions.
 *
 * Threads and state:
 *  - Engine threads call lookup/load/cancel/start/wait/offload/flush/poll.
 *  - One loader thread runs batches in id order, layer by layer.
 *  - One offloader thread writes offload requests in FIFO order.
 * `mu` guards the queues, the batch ring, the completion ring and the list
 * of open requests. A request is owned by exactly one place at a time: the
 * load queue, a batch, the offload queue, or the thread working on it; the
 * worker reads and writes its items without the lock, and only the
 * completion (under `mu`) hands it back and frees it. Each I/O thread has
 * its own preallocated scratch (lk_io), so the loader and offloader do not
 * allocate.
 *
 * Exactly once: `accounted` counts requests accepted and not yet polled and
 * never exceeds max_requests, the size of the completion ring, so posting a
 * completion always has room and cannot fail.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kvl_config.h"
#include "linker/linker.h"
#include "linker/pages.h"
#include "store/store.h"

#define DEF_MAX_REQUESTS 4096u
#define DEF_MAX_REQUEST_PAGES (1u << 20)
#define DEF_IO_BATCH 4096u

static void *loader_main(void *arg);
static void *offloader_main(void *arg);

/* ---------------------------------------------------------------- helpers */

static void deadline_after(struct timespec *ts, uint32_t ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* Waits on cv until woken or the deadline (NULL: none). ETIMEDOUT or 0. */
static int cv_wait(pthread_cond_t *cv, pthread_mutex_t *mu,
                   const struct timespec *deadline)
{
	if (!deadline)
		return pthread_cond_wait(cv, mu);
	return pthread_cond_timedwait(cv, mu, deadline);
}

int kvl__lk_io_alloc(lk_io *io, size_t n, size_t per_item, size_t hdr)
{
	io->n = n;
	io->keyp = calloc(n, sizeof *io->keyp);
	io->items = calloc(n, sizeof *io->items);
	io->reqs = calloc(n, sizeof *io->reqs);
	io->counts = calloc(n, sizeof *io->counts);
	io->got = calloc(n, sizeof *io->got);
	io->res = calloc(n, sizeof *io->res);
	io->pieces = calloc(n, per_item);
	io->hdrs = hdr ? aligned_alloc(64, n * hdr) : NULL;
	if (!io->keyp || !io->items || !io->reqs || !io->counts || !io->got ||
	    !io->res || !io->pieces || (hdr && !io->hdrs))
		return KVL_ENOMEM;
	return 0;
}

void kvl__lk_io_free(lk_io *io)
{
	free(io->keyp);
	free(io->items);
	free(io->reqs);
	free(io->counts);
	free(io->got);
	free(io->res);
	free(io->pieces);
	free(io->hdrs);
}

static const kvl__pool *lk_pool(const kvl_linker *lk, uint32_t pool)
{
	return &lk->layout->pools[pool];
}

/* Records that page `page` of `r` failed with `code`; keeps the lowest. */
void kvl__lk_req_fail(lk_req *r, size_t page, int code)
{
	if (page < r->first_bad) {
		r->first_bad = page;
		r->status = code;
	}
}

/* ------------------------------------------------------------ open/close */

int kvl_linker_open(const kvl_layout *layout, kvl_store *store,
                    const kvl_linker_opts *opts, kvl_linker **out,
                    char *errbuf, size_t errlen)
{
	if (!layout || !store || !out)
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "layout, store and out must not be NULL");
	if (!layout->finalized)
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "layout is not finalized");
	kvl_linker_opts o = {0};
	if (opts) {
		if (opts->struct_size == 0 || opts->struct_size > sizeof o)
			return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
			                     "opts.struct_size %u is not "
			                     "sizeof(kvl_linker_opts) (%zu) or "
			                     "an earlier size",
			                     opts->struct_size, sizeof o);
		memcpy(&o, opts, opts->struct_size);
	}
	if (!o.max_requests)
		o.max_requests = DEF_MAX_REQUESTS;
	if (!o.max_request_pages)
		o.max_request_pages = DEF_MAX_REQUEST_PAGES;
	if (!o.io_batch)
		o.io_batch = DEF_IO_BATCH;
	o.struct_size = sizeof o;

	kvl_linker *lk = calloc(1, sizeof *lk);
	if (!lk)
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "out of memory");
	lk->layout = layout;
	lk->store = store;
	lk->opts = o;
	for (size_t i = 0; i < layout->n_pools; i++) {
		const kvl__pool *p = &layout->pools[i];
		uint32_t top = p->layers[p->n_layers - 1].layer + 1;
		if (top > lk->n_layers)
			lk->n_layers = top;
		if (p->n_comps > lk->max_comps)
			lk->max_comps = p->n_comps;
		if (p->header_size > lk->max_header)
			lk->max_header = p->header_size;
	}
	size_t max_pieces = 0;
	for (size_t i = 0; i < layout->n_pools; i++)
		if (layout->pools[i].max_pieces > max_pieces)
			max_pieces = layout->pools[i].max_pieces;
	kvl__err_init(&lk->err);
	pthread_mutex_init(&lk->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&lk->cv_loader, &ca);
	pthread_cond_init(&lk->cv_offloader, &ca);
	pthread_cond_init(&lk->cv_progress, &ca);
	pthread_condattr_destroy(&ca);
	for (size_t i = 0; i < KVL_LINKER_MAX_BATCHES; i++)
		lk->batches[i].finished = 1;
	pthread_mutex_init(&lk->lookup.mu, NULL);
	lk->lookup.bits = malloc(kvl_bitmap_words(o.max_request_pages) * 8);
	lk->policies = calloc(layout->n_pools, sizeof *lk->policies);
	for (size_t i = 0; lk->policies && i < layout->n_pools; i++)
		lk->policies[i] = (kvl_policy){layout->pools[i].policy,
		                               layout->pools[i].window};
	lk->comp = calloc(o.max_requests, sizeof *lk->comp);
	int rc = KVL_ENOMEM;
	if (!lk->comp || !lk->lookup.bits || !lk->policies ||
	    kvl__lk_io_alloc(&lk->load_io, o.io_batch,
	                     (1 + (store->whole_reads ? max_pieces
	                                              : lk->max_comps)) *
	                             sizeof(kvl_range),
	                     0) ||
	    kvl__lk_io_alloc(&lk->off_io, o.io_batch,
	                     (1 + max_pieces) * sizeof(kvl_iov), lk->max_header))
		goto fail;
	for (size_t i = 0; i < layout->n_pools; i++)
		if (layout->pools[i].on_cuda) {
			rc = kvl__lk_gpu_open(lk, errbuf, errlen);
			if (rc) {
				lk->threads_joined = 2;
				kvl_linker_close(lk);
				return rc;
			}
			break;
		}
	rc = KVL_ENOMEM;
	if (pthread_create(&lk->loader, NULL, loader_main, lk))
		goto fail;
	if (pthread_create(&lk->offloader, NULL, offloader_main, lk)) {
		pthread_mutex_lock(&lk->mu);
		lk->closing = 1;
		pthread_cond_broadcast(&lk->cv_loader);
		pthread_mutex_unlock(&lk->mu);
		pthread_join(lk->loader, NULL);
		goto fail;
	}
	*out = lk;
	return 0;
fail:
	lk->threads_joined = 2; /* nothing to join */
	kvl_linker_close(lk);
	return kvl__fail_buf(errbuf, errlen, rc,
	                     "cannot allocate the linker's queues or threads");
}

static void req_free(lk_req *r)
{
	free(r);
}

/* Moves r from the open list into the completion ring. Caller holds mu. */
static void post_locked(kvl_linker *lk, lk_req *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		lk->open = r->next;
	if (r->next)
		r->next->prev = r->prev;
	size_t valid = r->first_bad;
	kvl_completion c = {.id = r->id, .kind = r->kind, .status = r->status,
	                    .valid_pages = valid, .n_pages = r->n_pages};
	lk->comp[(lk->comp_head + lk->comp_n) % lk->opts.max_requests] = c;
	lk->comp_n++;
	kvl__linker_stats *st = &lk->stats;
	if (r->status == KVL_ECANCELED)
		KVL__COUNT(st, canceled, 1);
	if (r->kind == KVL_REQ_LOAD) {
		KVL__COUNT(st, loads, 1);
		if (r->status)
			KVL__COUNT(st, load_failures, 1);
		KVL__COUNT(st, loaded_pages, valid);
	} else {
		KVL__COUNT(st, offloads, 1);
		if (r->status)
			KVL__COUNT(st, offload_failures, 1);
		kvl__hist_add(&st->offload_ns, kvl__now_ns() - r->t_accept_ns);
	}
	req_free(r);
	pthread_cond_broadcast(&lk->cv_progress);
}

static void cancel_list_locked(kvl_linker *lk, lk_req *r)
{
	while (r) {
		lk_req *next = r->qnext;
		r->first_bad = 0;
		r->status = KVL_ECANCELED;
		post_locked(lk, r);
		r = next;
	}
}

void kvl_linker_shutdown(kvl_linker *lk)
{
	if (!lk)
		return;
	pthread_mutex_lock(&lk->mu);
	lk->closing = 1;
	cancel_list_locked(lk, lk->load_head);
	lk->load_head = lk->load_tail = NULL;
	pthread_cond_broadcast(&lk->cv_loader);
	pthread_cond_broadcast(&lk->cv_offloader);
	pthread_cond_broadcast(&lk->cv_progress);
	/* threads_joined: 0 running, 1 a shutdown is joining them, 2
	 * joined. A concurrent shutdown returns only once they are joined,
	 * so that every queued request has completed when any returns. */
	int join = lk->threads_joined == 0;
	if (join)
		lk->threads_joined = 1;
	while (!join && lk->threads_joined != 2)
		pthread_cond_wait(&lk->cv_progress, &lk->mu);
	pthread_mutex_unlock(&lk->mu);
	if (join) {
		pthread_join(lk->loader, NULL);
		pthread_join(lk->offloader, NULL);
		pthread_mutex_lock(&lk->mu);
		lk->threads_joined = 2;
		pthread_cond_broadcast(&lk->cv_progress);
		pthread_mutex_unlock(&lk->mu);
	}
}

void kvl_linker_close(kvl_linker *lk)
{
	if (!lk)
		return;
	kvl_linker_shutdown(lk);
	kvl__lk_gpu_close(lk);
	kvl__lk_io_free(&lk->load_io);
	kvl__lk_io_free(&lk->off_io);
	free(lk->comp);
	free(lk->lookup.bits);
	free(lk->lookup.keys);
	free(lk->lookup.keyp);
	free(lk->lookup.res);
	free(lk->lookup.flags);
	free(lk->policies);
	pthread_mutex_destroy(&lk->lookup.mu);
	pthread_cond_destroy(&lk->cv_loader);
	pthread_cond_destroy(&lk->cv_offloader);
	pthread_cond_destroy(&lk->cv_progress);
	pthread_mutex_destroy(&lk->mu);
	kvl__err_destroy(&lk->err);
	free(lk);
}

const char *kvl_linker_errmsg(const kvl_linker *lk)
{
	return lk ? kvl__err_get(&lk->err) : "linker is NULL";
}

uint32_t kvl_linker_layers(const kvl_linker *lk)
{
	return lk ? lk->n_layers : 0;
}

static void xor_ns(kvl_hash *dst, const kvl_hash *page, const kvl_hash *ns)
{
	*dst = *page;
	if (ns)
		for (int i = 0; i < KVL_HASH_BYTES; i++)
			dst->bytes[i] ^= ns->bytes[i];
}

/* ---------------------------------------------------------------- lookup */

/* Makes the lookup scratch hold `items` keys (grows, never shrinks: after
 * warm-up lookups allocate nothing). Caller holds lookup_mu. */
static int lookup_reserve(kvl_linker *lk, size_t items)
{
	lk_lookup *s = &lk->lookup;
	if (items <= s->cap)
		return 0;
	size_t cap = s->cap ? s->cap : 1024;
	while (cap < items)
		cap *= 2;
	char *keys = realloc(s->keys, cap * KVL_KEY_MAX);
	if (keys)
		s->keys = keys;
	const char **keyp = realloc(s->keyp, cap * sizeof *keyp);
	if (keyp)
		s->keyp = keyp;
	int *res = realloc(s->res, cap * sizeof *res);
	if (res)
		s->res = res;
	uint8_t *flags = realloc(s->flags, cap);
	if (flags)
		s->flags = flags;
	if (!keys || !keyp || !res || !flags)
		return KVL_ENOMEM;
	s->cap = cap;
	return 0;
}

/* The restorable set of this rank, into lk->lookup.bits. Caller holds
 * lookup_mu. */
static int lookup_local(kvl_linker *lk, const kvl_hash *pages, size_t n_pages,
                        const kvl_hash *ns, const uint8_t *const *pool_pages)
{
	lk_lookup *s = &lk->lookup;
	size_t np = lk->layout->n_pools;
	if (n_pages == 0) /* only the empty prefix; the scratch may not exist */
		return kvl_restorable_set(0, 0, NULL, NULL, s->bits, 1);
	if (lookup_reserve(lk, n_pages * np))
		return kvl__fail(&lk->err, KVL_ENOMEM, "lookup: out of memory");
	size_t m = 0;
	for (size_t pi = 0; pi < np; pi++) {
		const kvl__pool *p = lk_pool(lk, (uint32_t)pi);
		const uint8_t *want = pool_pages ? pool_pages[pi] : NULL;
		for (size_t j = 0; j < n_pages; j++) {
			if (want && !want[j])
				continue;
			kvl_hash h;
			xor_ns(&h, &pages[j], ns);
			s->keyp[m] = s->keys + m * KVL_KEY_MAX;
			kvl__pool_key(p, &h, s->keys + m * KVL_KEY_MAX);
			m++;
		}
	}
	if (m == 0 && n_pages)
		return kvl__fail(&lk->err, KVL_EINVAL,
		                 "lookup: pool_pages asks for no page");
	/* One batched existence query for every (page, pool) asked. */
	int rc = m ? kvl_store_exists(lk->store, s->keyp, m, s->res) : 0;
	if (rc)
		return kvl__fail(&lk->err, rc, "lookup: store: %s",
		                 kvl_store_errmsg(lk->store));
	const uint8_t *present[np ? np : 1];
	memset(s->flags, 0, n_pages * np);
	m = 0;
	for (size_t pi = 0; pi < np; pi++) {
		const uint8_t *want = pool_pages ? pool_pages[pi] : NULL;
		uint8_t *flags = s->flags + pi * n_pages;
		size_t asked = 0;
		for (size_t j = 0; j < n_pages; j++) {
			if (want && !want[j])
				continue;
			flags[j] = s->res[m++] == 1;
			asked++;
		}
		present[pi] = asked ? flags : NULL;
	}
	return kvl_restorable_set(n_pages, np, lk->policies, present, s->bits,
	                          kvl_bitmap_words(n_pages));
}

int kvl_linker_lookup(kvl_linker *lk, const kvl_hash *pages, size_t n_pages,
                      const kvl_hash *ns, const uint8_t *const *pool_pages,
                      size_t *prefix_out)
{
	if (!lk)
		return KVL_EINVAL;
	if (!prefix_out || (n_pages && !pages))
		return kvl__fail(&lk->err, KVL_EINVAL,
		                 "lookup: pages or prefix_out is NULL");
	if (n_pages > lk->opts.max_request_pages)
		return kvl__fail(&lk->err, KVL_ERANGE,
		                 "lookup: %zu pages > max_request_pages %u",
		                 n_pages, lk->opts.max_request_pages);
	uint64_t t0 = kvl__now_ns();
	lk_lookup *s = &lk->lookup;
	size_t words = kvl_bitmap_words(n_pages);
	pthread_mutex_lock(&s->mu);
	int rc = lookup_local(lk, pages, n_pages, ns, pool_pages);
	if (rc) {
		/* Still take part in the all-reduce, so other ranks never
		 * wait for this one: with nothing restorable. */
		memset(s->bits, 0, words * 8);
		s->bits[0] = 1;
	}
	if (lk->opts.allreduce) {
		int arc = lk->opts.allreduce(s->bits, words,
		                             lk->opts.allreduce_user);
		if (arc && !rc)
			rc = kvl__fail(&lk->err, arc,
			               "lookup: rank all-reduce failed: %s",
			               kvl_strerror(arc));
	}
	size_t prefix = rc ? 0 : kvl_bitmap_max(s->bits, words);
	pthread_mutex_unlock(&s->mu);
	kvl__linker_stats *st = &lk->stats;
	KVL__COUNT(st, lookups, 1);
	KVL__COUNT(st, lookup_pages, n_pages);
	KVL__COUNT(st, hit_pages, prefix);
	kvl__hist_add(&st->lookup_ns, kvl__now_ns() - t0);
	*prefix_out = prefix;
	return rc;
}

/* ------------------------------------------------------- accepting work */

/* Builds a request (one allocation) from the engine's arguments. */
static int req_build(kvl_linker *lk, kvl_req_kind kind, uint64_t id,
                     const kvl_hash *pages, size_t n_pages, const kvl_hash *ns,
                     const size_t *const *slots, lk_req **out)
{
	const char *what = kind == KVL_REQ_LOAD ? "load" : "offload";
	if (!pages || !slots || n_pages == 0)
		return kvl__fail(&lk->err, KVL_EINVAL,
		                 "%s %llu: pages and slots are required and "
		                 "n_pages > 0",
		                 what, (unsigned long long)id);
	if (n_pages > lk->opts.max_request_pages)
		return kvl__fail(&lk->err, KVL_ERANGE,
		                 "%s %llu: %zu pages > max_request_pages %u", what,
		                 (unsigned long long)id, n_pages,
		                 lk->opts.max_request_pages);
	const kvl_layout *l = lk->layout;
	size_t n_items = 0, key_bytes = 0, hdr_bytes = 0;
	for (size_t pi = 0; pi < l->n_pools; pi++) {
		if (!slots[pi])
			continue;
		const kvl__pool *p = lk_pool(lk, (uint32_t)pi);
		size_t klen = p->key_prefix_len + 2 * KVL_HASH_BYTES +
		              p->key_suffix_len + 1;
		for (size_t j = 0; j < n_pages; j++) {
			size_t s = slots[pi][j];
			if (s == KVL_NO_SLOT)
				continue;
			if (s >= p->num_pages)
				return kvl__fail(&lk->err, KVL_ERANGE,
				                 "%s %llu: page %zu: slot %zu "
				                 "out of range for pool '%s' "
				                 "(%zu slots)",
				                 what, (unsigned long long)id, j, s,
				                 p->name, p->num_pages);
			n_items++;
			key_bytes += klen;
			if (kind == KVL_REQ_LOAD)
				hdr_bytes += p->header_size;
		}
	}
	if (n_items == 0)
		return kvl__fail(&lk->err, KVL_EINVAL,
		                 "%s %llu: no page has a slot in any pool", what,
		                 (unsigned long long)id);
	size_t bytes = sizeof(lk_req) + n_pages * sizeof(kvl_hash) +
	               n_items * sizeof(lk_item) + hdr_bytes + key_bytes + 64;
	lk_req *r = calloc(1, bytes);
	if (!r)
		return kvl__fail(&lk->err, KVL_ENOMEM, "%s: out of memory",
		                 what);
	r->id = id;
	r->kind = kind;
	r->n_pages = n_pages;
	r->first_bad = n_pages;
	r->pages = (kvl_hash *)(r + 1);
	r->items = (lk_item *)(r->pages + n_pages);
	uint8_t *hdr = (uint8_t *)(r->items + n_items);
	hdr = (uint8_t *)(((uintptr_t)hdr + 63) & ~(uintptr_t)63);
	char *key = (char *)(hdr + hdr_bytes);
	for (size_t j = 0; j < n_pages; j++)
		xor_ns(&r->pages[j], &pages[j], ns);
	for (size_t pi = 0; pi < l->n_pools; pi++) {
		if (!slots[pi])
			continue;
		const kvl__pool *p = lk_pool(lk, (uint32_t)pi);
		for (size_t j = 0; j < n_pages; j++) {
			if (slots[pi][j] == KVL_NO_SLOT)
				continue;
			lk_item *it = &r->items[r->n_items++];
			it->page = (uint32_t)j;
			it->pool = (uint32_t)pi;
			it->slot = slots[pi][j];
			it->key = key;
			key += kvl__pool_key(p, &r->pages[j], key) + 1;
			if (kind == KVL_REQ_LOAD) {
				it->hdr = hdr;
				hdr += p->header_size;
			}
		}
	}
	r->t_accept_ns = kvl__now_ns();
	*out = r;
	return 0;
}

static lk_req *find_open_locked(kvl_linker *lk, kvl_req_kind kind, uint64_t id)
{
	for (lk_req *r = lk->open; r; r = r->next)
		if (r->id == id && r->kind == kind)
			return r;
	return NULL;
}

/* Accepts r (EEXIST/EFULL/ECLOSED otherwise) and links it into `open`. */
static int accept_locked(kvl_linker *lk, lk_req *r)
{
	const char *what = r->kind == KVL_REQ_LOAD ? "load" : "offload";
	if (lk->closing)
		return kvl__fail(&lk->err, KVL_ECLOSED,
		                 "%s %llu: the linker is shutting down", what,
		                 (unsigned long long)r->id);
	if (find_open_locked(lk, r->kind, r->id))
		return kvl__fail(&lk->err, KVL_EEXIST,
		                 "%s %llu: a request with this id is still "
		                 "open",
		                 what, (unsigned long long)r->id);
	if (lk->accounted >= lk->opts.max_requests)
		return kvl__fail(&lk->err, KVL_EFULL,
		                 "%s %llu: %u requests are open or unpolled "
		                 "(max_requests); poll completions first",
		                 what, (unsigned long long)r->id,
		                 lk->opts.max_requests);
	lk->accounted++;
	r->next = lk->open;
	if (lk->open)
		lk->open->prev = r;
	lk->open = r;
	return 0;
}

int kvl_linker_load(kvl_linker *lk, uint64_t id, const kvl_hash *pages,
                    size_t n_pages, const kvl_hash *ns,
                    const size_t *const *slots)
{
	if (!lk)
		return KVL_EINVAL;
	lk_req *r;
	int rc = req_build(lk, KVL_REQ_LOAD, id, pages, n_pages, ns, slots, &r);
	if (rc)
		return rc;
	pthread_mutex_lock(&lk->mu);
	rc = accept_locked(lk, r);
	if (rc == 0) {
		if (lk->load_tail)
			lk->load_tail->qnext = r;
		else
			lk->load_head = r;
		lk->load_tail = r;
	}
	pthread_mutex_unlock(&lk->mu);
	if (rc)
		req_free(r);
	return rc;
}

int kvl_linker_cancel(kvl_linker *lk, uint64_t id, int *canceled_out)
{
	if (!lk)
		return KVL_EINVAL;
	if (!canceled_out)
		return kvl__fail(&lk->err, KVL_EINVAL,
		                 "cancel %llu: canceled_out is NULL",
		                 (unsigned long long)id);
	pthread_mutex_lock(&lk->mu);
	int rc = 0;
	lk_req *prev = NULL, *r = lk->load_head;
	while (r && r->id != id) {
		prev = r;
		r = r->qnext;
	}
	if (r) {
		if (prev)
			prev->qnext = r->qnext;
		else
			lk->load_head = r->qnext;
		if (lk->load_tail == r)
			lk->load_tail = prev;
		r->qnext = NULL;
		cancel_list_locked(lk, r);
		*canceled_out = 1;
	} else if (find_open_locked(lk, KVL_REQ_LOAD, id)) {
		*canceled_out = 0;
	} else {
		rc = kvl__fail(&lk->err, KVL_ENOTFOUND,
		               "cancel: no load %llu is queued or running",
		               (unsigned long long)id);
	}
	pthread_mutex_unlock(&lk->mu);
	return rc;
}

int kvl_linker_start(kvl_linker *lk, uint64_t *batch_out)
{
	if (!lk)
		return KVL_EINVAL;
	if (!batch_out)
		return kvl__fail(&lk->err, KVL_EINVAL,
		                 "start: batch_out is NULL");
	pthread_mutex_lock(&lk->mu);
	int rc = 0;
	lk_batch *b = &lk->batches[lk->next_batch % KVL_LINKER_MAX_BATCHES];
	if (lk->closing) {
		rc = kvl__fail(&lk->err, KVL_ECLOSED,
		               "start: the linker is shutting down");
	} else if (!b->finished) {
		rc = kvl__fail(&lk->err, KVL_EFULL,
		               "start: %d batches are still running",
		               KVL_LINKER_MAX_BATCHES);
	} else {
		*b = (lk_batch){.id = lk->next_batch, .reqs = lk->load_head,
		                .t_start_ns = kvl__now_ns()};
		if (!b->reqs) {
			/* Nothing to load: complete now; the loader skips it. */
			b->done = b->enqueued = lk->n_layers;
			b->finished = 1;
		}
		lk->load_head = lk->load_tail = NULL;
		*batch_out = lk->next_batch++;
		pthread_cond_signal(&lk->cv_loader);
	}
	pthread_mutex_unlock(&lk->mu);
	return rc;
}

int kvl__lk_wait_layer_locked(kvl_linker *lk, uint64_t batch, uint32_t layer,
                              uint32_t timeout_ms, int issued,
                              const char *what, lk_batch **b_out)
{
	struct timespec dl;
	if (timeout_ms && timeout_ms != UINT32_MAX)
		deadline_after(&dl, timeout_ms);
	lk_batch *b = &lk->batches[batch % KVL_LINKER_MAX_BATCHES];
	*b_out = b;
	for (;;) {
		if (b->id != batch || batch >= lk->next_batch)
			return kvl__fail(&lk->err, KVL_ENOTFOUND,
			                 "%s: batch %llu is unknown or too old",
			                 what, (unsigned long long)batch);
		if (!issued && b->first_err && b->fail_layer <= layer)
			return 0; /* known to have failed: the caller says so */
		if (b->done > layer || (issued && b->enqueued > layer))
			return 0;
		if (timeout_ms == 0 ||
		    cv_wait(&lk->cv_progress, &lk->mu,
		            timeout_ms == UINT32_MAX ? NULL : &dl) == ETIMEDOUT)
			return kvl__fail(&lk->err, KVL_ETIMEDOUT,
			                 "%s: batch %llu layer %u not %s after "
			                 "%u ms",
			                 what, (unsigned long long)batch, layer,
			                 issued ? "issued" : "complete",
			                 timeout_ms);
	}
}

int kvl_linker_wait(kvl_linker *lk, uint64_t batch, uint32_t layer,
                    uint32_t timeout_ms)
{
	if (!lk)
		return KVL_EINVAL;
	if (layer >= lk->n_layers)
		return kvl__fail(&lk->err, KVL_ERANGE,
		                 "wait: layer %u >= %u layers", layer,
		                 lk->n_layers);
	lk_batch *b;
	pthread_mutex_lock(&lk->mu);
	int rc = kvl__lk_wait_layer_locked(lk, batch, layer, timeout_ms, 0,
	                                   "wait", &b);
	if (rc == 0 && b->first_err && b->fail_layer <= layer)
		rc = kvl__fail(&lk->err, b->first_err,
		               "wait: batch %llu failed at layer %u: %s",
		               (unsigned long long)batch, b->fail_layer,
		               kvl_strerror(b->first_err));
	pthread_mutex_unlock(&lk->mu);
	return rc;
}

int kvl_linker_offload_after(kvl_linker *lk, uint64_t id,
                             const kvl_hash *pages, size_t n_pages,
                             const kvl_hash *ns, const size_t *const *slots,
                             void *event)
{
	if (!lk)
		return KVL_EINVAL;
	if (event && !lk->gpu)
		return kvl__fail(&lk->err, KVL_ENOTSUP,
		                 "offload %llu: an event needs a pool on a CUDA "
		                 "device (and a kvlink built with CUDA)",
		                 (unsigned long long)id);
	lk_req *r;
	int rc = req_build(lk, KVL_REQ_OFFLOAD, id, pages, n_pages, ns, slots,
	                   &r);
	if (rc)
		return rc;
	r->event = event;
	pthread_mutex_lock(&lk->mu);
	rc = accept_locked(lk, r);
	if (rc == 0) {
		if (lk->off_tail)
			lk->off_tail->qnext = r;
		else
			lk->off_head = r;
		lk->off_tail = r;
		lk->off_queued++;
		pthread_cond_signal(&lk->cv_offloader);
	}
	pthread_mutex_unlock(&lk->mu);
	if (rc)
		req_free(r);
	return rc;
}

int kvl_linker_offload(kvl_linker *lk, uint64_t id, const kvl_hash *pages,
                       size_t n_pages, const kvl_hash *ns,
                       const size_t *const *slots)
{
	return kvl_linker_offload_after(lk, id, pages, n_pages, ns, slots,
	                                NULL);
}

int kvl_linker_flush(kvl_linker *lk, uint32_t timeout_ms)
{
	if (!lk)
		return KVL_EINVAL;
	struct timespec dl;
	if (timeout_ms != UINT32_MAX)
		deadline_after(&dl, timeout_ms);
	pthread_mutex_lock(&lk->mu);
	uint64_t target = lk->off_queued;
	int rc = 0;
	while (lk->off_completed < target) {
		if (timeout_ms == 0 ||
		    cv_wait(&lk->cv_progress, &lk->mu,
		            timeout_ms == UINT32_MAX ? NULL : &dl) == ETIMEDOUT) {
			rc = kvl__fail(&lk->err, KVL_ETIMEDOUT,
			               "flush: %llu offloads still pending after "
			               "%u ms",
			               (unsigned long long)(target -
			                                    lk->off_completed),
			               timeout_ms);
			break;
		}
	}
	pthread_mutex_unlock(&lk->mu);
	return rc;
}

int kvl_linker_poll(kvl_linker *lk, kvl_completion *out, size_t cap,
                    size_t *n_out, uint32_t timeout_ms)
{
	if (!lk)
		return KVL_EINVAL;
	if (!n_out || (cap && !out))
		return kvl__fail(&lk->err, KVL_EINVAL,
		                 "poll: %s is NULL", !n_out ? "n_out" : "out");
	struct timespec dl;
	if (timeout_ms && timeout_ms != UINT32_MAX)
		deadline_after(&dl, timeout_ms);
	pthread_mutex_lock(&lk->mu);
	while (lk->comp_n == 0 && timeout_ms && cap) {
		/* Nothing can arrive once shut down with nothing open. */
		if (lk->closing && !lk->open)
			break;
		if (cv_wait(&lk->cv_progress, &lk->mu,
		            timeout_ms == UINT32_MAX ? NULL : &dl) == ETIMEDOUT)
			break;
	}
	size_t n = lk->comp_n < cap ? lk->comp_n : cap;
	for (size_t i = 0; i < n; i++)
		out[i] = lk->comp[(lk->comp_head + i) % lk->opts.max_requests];
	lk->comp_head = (lk->comp_head + n) % lk->opts.max_requests;
	lk->comp_n -= n;
	lk->accounted -= (uint32_t)n;
	pthread_mutex_unlock(&lk->mu);
	*n_out = n;
	return 0;
}

/* ---------------------------------------------------------------- loader */

int kvl__lk_read_check(const kvl_linker *lk, const lk_req *r,
                       const lk_item *it, const kvl__layer *ly, int err,
                       const uint8_t *bytes)
{
	const kvl__pool *p = lk_pool(lk, it->pool);
	if (err == KVL_ERANGE)
		err = KVL_ECORRUPT; /* shorter than our object */
	if (!err && ly == &p->layers[0]) {
		kvl__obj_id id = kvl__page_id(p, &r->pages[it->page]);
		err = kvl__obj_header_check(it->hdr, p->header_size, &id, NULL);
	}
	const kvl__layer *end = kvl__lk_read_end(lk, p, ly);
	for (const kvl__layer *l = ly; !err && l < end && !lk->store->trusted;
	     l++) {
		uint64_t sum =
			bytes ? kvl__layer_bytes_sum(p, l,
			                             bytes + (l->offset - ly->offset))
			      : kvl__layer_sum(p, l, it->slot);
		err = kvl__obj_layer_ok(it->hdr, (uint32_t)(l - p->layers), sum);
	}
	return err;
}

/* Reads the io's gathered items and checks each one. */
static void load_flush(kvl_linker *lk, lk_io *io, size_t m, uint32_t layer,
                       int *layer_err)
{
	if (m == 0)
		return;
	int rc = kvl_store_get(lk->store, io->keyp, m, io->pieces, io->counts,
	                       io->got);
	for (size_t k = 0; k < m; k++) {
		lk_item *it = io->items[k];
		lk_req *r = io->reqs[k];
		const kvl__pool *p = lk_pool(lk, it->pool);
		const kvl__layer *ly = kvl__pool_layer(p, layer);
		const kvl__layer *end = kvl__lk_read_end(lk, p, ly), *l;
		int err = kvl__lk_read_check(
			lk, r, it, ly,
			rc ? rc : io->got[k] < 0 ? (int)io->got[k] : 0, NULL);
		if (err) {
			kvl__lk_req_fail(r, it->page, err);
			if (!*layer_err)
				*layer_err = err;
			continue;
		}
		for (l = ly; l < end; l++)
			KVL__COUNT(&lk->stats, loaded_bytes, l->len);
	}
}

/* Loads one layer of every live item of the batch, io_batch items per
 * store call. Returns the first failure seen in this layer, or 0. */
static int load_layer(kvl_linker *lk, lk_batch *b, uint32_t layer)
{
	lk_io *io = &lk->load_io;
	kvl_range *rg = io->pieces; /* key k's ranges follow key k-1's */
	size_t m = 0, n_rg = 0;
	int layer_err = 0;
	for (lk_req *r = b->reqs; r; r = r->qnext) {
		for (size_t i = 0; i < r->n_items; i++) {
			lk_item *it = &r->items[i];
			if (it->page >= r->first_bad)
				continue; /* a lower page failed: not valid */
			const kvl__pool *p = lk_pool(lk, it->pool);
			const kvl__layer *ly = kvl__pool_layer(p, layer);
			if (!ly || p->on_cuda)
				continue; /* GPU pools: kvl__lk_gpu_load_layer */
			size_t c = 0;
			if (ly == &p->layers[0])
				rg[n_rg + c++] = (kvl_range){
					.offset = 0, .addr = it->hdr,
					.len = p->header_size};
			else if (lk->store->whole_reads)
				continue; /* read with the first layer */
			const kvl__layer *end = kvl__lk_read_end(lk, p, ly);
			for (const kvl__layer *l = ly; l < end; l++)
				c += kvl__layer_ranges(p, l, it->slot,
				                       rg + n_rg + c);
			n_rg += c;
			io->keyp[m] = it->key;
			io->items[m] = it;
			io->reqs[m] = r;
			io->counts[m] = c;
			if (++m == io->n) {
				load_flush(lk, io, m, layer, &layer_err);
				m = n_rg = 0;
			}
		}
	}
	load_flush(lk, io, m, layer, &layer_err);
	return layer_err;
}

/* Marks layer `layer` of b complete with `err` (0: good). */
static void layer_done(kvl_linker *lk, lk_batch *b, uint32_t layer, int err)
{
	pthread_mutex_lock(&lk->mu);
	if (err && !b->first_err) {
		b->first_err = err;
		b->fail_layer = layer;
	}
	b->done = layer + 1;
	pthread_cond_broadcast(&lk->cv_progress);
	pthread_mutex_unlock(&lk->mu);
}

/* Runs a batch layer by layer. Host pools complete a layer when their
 * store reads return; GPU pools when the copies issued for it finish, which
 * is waited for only after the next layer's copies are issued, so the GPU
 * never idles while the loader prepares the next layer. */
static void run_batch(kvl_linker *lk, lk_batch *b)
{
	int canceled = 0, pending_err = 0;
	uint32_t layer;
	for (layer = 0; layer < lk->n_layers; layer++) {
		pthread_mutex_lock(&lk->mu);
		canceled = lk->closing;
		pthread_mutex_unlock(&lk->mu);
		if (canceled)
			break;
		int err = load_layer(lk, b, layer);
		if (!lk->gpu) {
			layer_done(lk, b, layer, err);
			continue;
		}
		int gerr = kvl__lk_gpu_load_layer(lk, b, layer);
		if (!err)
			err = gerr;
		pthread_mutex_lock(&lk->mu);
		b->enqueued = layer + 1;
		pthread_cond_broadcast(&lk->cv_progress);
		pthread_mutex_unlock(&lk->mu);
		if (layer > 0) {
			int ferr = kvl__lk_gpu_finish_layer(lk, layer - 1);
			layer_done(lk, b, layer - 1, pending_err ? pending_err : ferr);
		}
		pending_err = err;
	}
	if (lk->gpu && layer > 0) {
		int ferr = kvl__lk_gpu_finish_layer(lk, layer - 1);
		layer_done(lk, b, layer - 1, pending_err ? pending_err : ferr);
	}
	if (lk->gpu)
		kvl__lk_gpu_end_batch(lk, b);
	pthread_mutex_lock(&lk->mu);
	b->enqueued = lk->n_layers;
	if (canceled && b->done < lk->n_layers) {
		if (!b->first_err) {
			b->first_err = KVL_ECANCELED;
			b->fail_layer = b->done;
		}
		b->done = lk->n_layers;
	}
	kvl__hist_add(&lk->stats.batch_ns, kvl__now_ns() - b->t_start_ns);
	KVL__COUNT(&lk->stats, batches, 1);
	lk_req *r = b->reqs;
	b->reqs = NULL;
	while (r) {
		lk_req *next = r->qnext;
		if (canceled) {
			/* Not every layer was read: nothing is valid. */
			r->first_bad = 0;
			if (!r->status)
				r->status = KVL_ECANCELED;
		}
		post_locked(lk, r);
		r = next;
	}
	b->finished = 1;
	pthread_cond_broadcast(&lk->cv_progress);
	pthread_mutex_unlock(&lk->mu);
}

static void *loader_main(void *arg)
{
	kvl_linker *lk = arg;
	pthread_mutex_lock(&lk->mu);
	for (;;) {
		while (!lk->closing && lk->loader_next == lk->next_batch)
			pthread_cond_wait(&lk->cv_loader, &lk->mu);
		if (lk->loader_next == lk->next_batch)
			break; /* closing with nothing left to take */
		uint64_t id = lk->loader_next++;
		lk_batch *b = &lk->batches[id % KVL_LINKER_MAX_BATCHES];
		/* An empty batch completed at start, and its slot may already
		 * hold a later batch, which the loader reaches by its own id. */
		if (b->id != id || b->finished)
			continue;
		pthread_mutex_unlock(&lk->mu);
		run_batch(lk, b); /* cancels itself when closing */
		pthread_mutex_lock(&lk->mu);
	}
	pthread_mutex_unlock(&lk->mu);
	return NULL;
}

/* ------------------------------------------------------------- offloader */

/* Offloads the items [i, j) of r that are absent from the store. */
static void offload_chunk(kvl_linker *lk, lk_req *r, size_t i, size_t j)
{
	lk_io *io = &lk->off_io;
	int shard_owner = lk->layout->shard.tp_rank == 0;
	size_t m = 0;
	for (size_t k = i; k < j; k++) {
		lk_item *it = &r->items[k];
		if (it->page >= r->first_bad)
			continue;
		const kvl__pool *p = lk_pool(lk, it->pool);
		if ((p->flags & KVL_POOL_REPLICATED_TP) && !shard_owner)
			continue; /* tp rank 0 writes it */
		io->keyp[m] = it->key;
		io->items[m++] = it;
	}
	if (m == 0)
		return;
	int rc = kvl_store_exists(lk->store, io->keyp, m, io->res);
	size_t w = 0, n_gpu = 0;
	kvl_iov *iov = io->pieces;
	size_t n_iov = 0;
	for (size_t k = 0; k < m; k++) {
		lk_item *it = io->items[k];
		if (rc || io->res[k] < 0) {
			kvl__lk_req_fail(r, it->page, rc ? rc : io->res[k]);
			continue;
		}
		if (io->res[k] == 1) {
			KVL__COUNT(&lk->stats, present_pages, 1);
			continue;
		}
		const kvl__pool *p = lk_pool(lk, it->pool);
		if (p->on_cuda) {
			io->reqs[n_gpu++] = (lk_req *)it; /* GPU items, below */
			continue;
		}
		uint8_t *hdr = io->hdrs + w * lk->max_header;
		kvl__page_header(p, &r->pages[it->page], it->slot,
		                 !lk->store->trusted, hdr);
		io->counts[w] = kvl__page_pieces(p, hdr, it->slot, iov + n_iov);
		n_iov += io->counts[w];
		io->keyp[w] = it->key;
		io->items[w++] = it;
	}
	if (n_gpu)
		kvl__lk_gpu_offload(lk, r, (lk_item **)io->reqs, n_gpu, r->event);
	if (w == 0)
		return;
	rc = kvl_store_put(lk->store, io->keyp, w, io->pieces, io->counts,
	                   io->res);
	for (size_t k = 0; k < w; k++) {
		lk_item *it = io->items[k];
		int res = rc ? rc : io->res[k];
		if (res < 0) {
			kvl__lk_req_fail(r, it->page, res);
		} else if (res == KVL_PUT_PRESENT) {
			KVL__COUNT(&lk->stats, present_pages, 1);
		} else {
			const kvl__pool *p = lk_pool(lk, it->pool);
			KVL__COUNT(&lk->stats, offloaded_pages, 1);
			KVL__COUNT(&lk->stats, offloaded_bytes,
			           p->object_size);
		}
	}
}

static void *offloader_main(void *arg)
{
	kvl_linker *lk = arg;
	pthread_mutex_lock(&lk->mu);
	for (;;) {
		while (!lk->closing && !lk->off_head)
			pthread_cond_wait(&lk->cv_offloader, &lk->mu);
		if (lk->closing) {
			lk_req *q = lk->off_head;
			lk->off_head = lk->off_tail = NULL;
			for (lk_req *r = q; r; r = r->qnext)
				lk->off_completed++;
			cancel_list_locked(lk, q);
			break;
		}
		lk_req *r = lk->off_head;
		lk->off_head = r->qnext;
		if (!lk->off_head)
			lk->off_tail = NULL;
		pthread_mutex_unlock(&lk->mu);
		/* The offload io's pieces hold at most io_batch whole pages. */
		for (size_t i = 0; i < r->n_items; i += lk->off_io.n) {
			size_t j = i + lk->off_io.n;
			offload_chunk(lk, r, i, j < r->n_items ? j : r->n_items);
		}
		pthread_mutex_lock(&lk->mu);
		lk->off_completed++;
		post_locked(lk, r);
	}
	pthread_mutex_unlock(&lk->mu);
	return NULL;
}

/* ------------------------------------------------------------------ CUDA */

#if !KVL_HAVE_CUDA
/* Without CUDA no linker has GPU pools: these are never reached but for
 * open, which refuses, and the stream wait, which says why it cannot. */
int kvl__lk_gpu_open(kvl_linker *lk, char *errbuf, size_t errlen)
{
	(void)lk;
	return kvl__fail_buf(errbuf, errlen, KVL_ENOTSUP,
	                     "a pool lives on a CUDA device but this kvlink "
	                     "was built without CUDA");
}

void kvl__lk_gpu_close(kvl_linker *lk)
{
	(void)lk;
}

int kvl__lk_gpu_load_layer(kvl_linker *lk, lk_batch *b, uint32_t layer)
{
	(void)lk;
	(void)b;
	(void)layer;
	return KVL_ENOTSUP;
}

int kvl__lk_gpu_finish_layer(kvl_linker *lk, uint32_t layer)
{
	(void)lk;
	(void)layer;
	return KVL_ENOTSUP;
}

void kvl__lk_gpu_end_batch(kvl_linker *lk, lk_batch *b)
{
	(void)lk;
	(void)b;
}

void kvl__lk_gpu_offload(kvl_linker *lk, lk_req *r, lk_item **items,
                         size_t n, void *event)
{
	(void)lk;
	(void)event;
	for (size_t i = 0; i < n; i++)
		kvl__lk_req_fail(r, items[i]->page, KVL_ENOTSUP);
}

int kvl_linker_wait_stream(kvl_linker *lk, uint64_t batch, uint32_t layer,
                           void *stream, uint32_t timeout_ms)
{
	(void)stream; /* host pools only: once the layer is there, it is */
	return kvl_linker_wait(lk, batch, layer, timeout_ms);
}
#endif
