/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handle.c — the engine's side of the linker: open and close, the load
 * queue, cancellation, batches, waits, offload queueing, flush and the
 * completions (see linker.h for the threads and the lock).
 *
 * Exactly once: `accounted` counts requests accepted and not yet polled and
 * never exceeds max_requests, the size of the completion ring, so posting a
 * completion always has room and cannot fail. A call that fails accepted
 * nothing, and reports nothing later.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "linker/path.h"

#define DEF_MAX_REQUESTS 4096u
#define DEF_MAX_REQUEST_PAGES (1u << 20)
#define DEF_IO_BATCH 4096u
#define DEF_GPU_STAGING (64u << 20)

/* ---------------------------------------------------------------- helpers */

/* Waits on cv until woken or the deadline (NULL: none). ETIMEDOUT or 0. */
static int cv_wait(pthread_cond_t *cv, pthread_mutex_t *mu,
                   const struct timespec *deadline)
{
	if (!deadline)
		return pthread_cond_wait(cv, mu);
	return pthread_cond_timedwait(cv, mu, deadline);
}

/* Chooses each pool's path (path.h) and opens the paths in use. */
static int open_paths(kvl_linker *lk, char *errbuf, size_t errlen)
{
	const kvl_layout *l = lk->layout;
	for (size_t i = 0; i < l->n_pools; i++) {
		const lk_path *path = &kvl__lk_path_host;
		if (l->pools[i].on_cuda) {
#if KVL_HAVE_CUDA
			path = lk->caps.in_place ? &kvl__lk_path_view
			                         : &kvl__lk_path_ring;
#else
			return kvl__fail_buf(errbuf, errlen, KVL_ENOTSUP,
			                     "pool '%s' lives on a CUDA device "
			                     "but this kvlink was built without "
			                     "CUDA",
			                     l->pools[i].name);
#endif
		}
		lk->pool_path[i] = path;
		size_t k = 0;
		while (k < lk->n_paths && lk->paths[k] != path)
			k++;
		if (k == lk->n_paths)
			lk->paths[lk->n_paths++] = path;
	}
	for (size_t k = 0; k < lk->n_paths; k++) {
		int rc = lk->paths[k]->open(lk, errbuf, errlen);
		if (rc) {
			lk->n_paths = k + 1; /* close those tried: each
			                      * frees what it got */
			return rc;
		}
		if (lk->paths[k]->finish_layer)
			lk->async = lk->paths[k];
	}
	return 0;
}

/* ------------------------------------------------------------ open/close */

int kvl_linker_open(kvl_store *store, const kvl_layout *layout,
                    const kvl_linker_opts *opts, kvl_linker **out,
                    char *errbuf, size_t errlen)
{
	if (!store || !layout || !out)
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "store, layout and out must not be NULL");
	if (!layout->finalized)
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "layout is not finalized");
	if (layout->n_shapes)
		return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
		                     "the layout describes sizes only "
		                     "(kvl_layout_add_shape): a linker needs the "
		                     "pools' memory; kvl_prober_open asks what "
		                     "exists without it");
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
	static const struct {
		const char *name;
		uint32_t max;
	} limits[] = {{"max_requests", KVL_LINKER_MAX_REQUESTS},
	              {"max_request_pages", KVL_LINKER_MAX_REQUEST_PAGES},
	              {"io_batch", KVL_LINKER_MAX_IO_BATCH},
	              {"gpu_copy", KVL_GPU_COPY_DMA},
	              {"gpu_staging", KVL_LINKER_MAX_GPU_STAGING}};
	const uint32_t given[] = {o.max_requests, o.max_request_pages,
	                          o.io_batch, o.gpu_copy, o.gpu_staging};
	for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++)
		if (given[i] > limits[i].max)
			return kvl__fail_buf(errbuf, errlen, KVL_EINVAL,
			                     "opts.%s %u is above its limit %u",
			                     limits[i].name, given[i],
			                     limits[i].max);
	if (!o.max_requests)
		o.max_requests = DEF_MAX_REQUESTS;
	if (!o.max_request_pages)
		o.max_request_pages = DEF_MAX_REQUEST_PAGES;
	if (!o.io_batch)
		o.io_batch = DEF_IO_BATCH;
	if (!o.gpu_staging)
		o.gpu_staging = DEF_GPU_STAGING;
	o.struct_size = sizeof o;

	kvl_linker *lk = calloc(1, sizeof *lk);
	if (!lk)
		return kvl__fail_buf(errbuf, errlen, KVL_ENOMEM,
		                     "out of memory");
	lk->layout = layout;
	lk->store = store;
	lk->caps = kvl__store_caps_of(store);
	lk->mac = kvl__store_mac(store);
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
		if (p->max_pieces > lk->max_pieces)
			lk->max_pieces = p->max_pieces;
	}
	kvl__err_init(&lk->err);
	pthread_mutex_init(&lk->mu, NULL);
	kvl__cond_init_monotonic(&lk->cv_loader);
	kvl__cond_init_monotonic(&lk->cv_offloader);
	kvl__cond_init_monotonic(&lk->cv_progress);
	for (size_t i = 0; i < KVL_LINKER_MAX_BATCHES; i++)
		lk->batches[i].finished = 1;
	pthread_mutex_init(&lk->lookup.mu, NULL);
	lk->lookup.bits = malloc(kvl_bitmap_words(o.max_request_pages) * 8);
	lk->policies = calloc(layout->n_pools, sizeof *lk->policies);
	for (size_t i = 0; lk->policies && i < layout->n_pools; i++)
		lk->policies[i] = (kvl_policy){layout->pools[i].policy,
		                               layout->pools[i].window};
	lk->comp = calloc(o.max_requests, sizeof *lk->comp);
	lk->pool_path = calloc(layout->n_pools, sizeof *lk->pool_path);
	lk->pool_whole = calloc(layout->n_pools, 1);
	for (size_t i = 0; lk->pool_whole && i < layout->n_pools; i++) {
		const kvl__pool *p = &layout->pools[i];
		int small = 0;
		for (uint32_t k = 0; k < p->n_layers; k++)
			small |= p->layers[k].len < lk->caps.layer_read_min;
		lk->pool_whole[i] = lk->caps.whole_reads || small;
		lk->any_whole |= lk->pool_whole[i];
	}
	lk->off_absent = calloc(o.io_batch, sizeof *lk->off_absent);
	int rc = KVL_ENOMEM;
	if (!lk->comp || !lk->lookup.bits || !lk->policies || !lk->pool_path ||
	    !lk->pool_whole ||
	    !lk->off_absent || kvl__lk_claims_alloc(lk) ||
	    kvl__lk_io_alloc(&lk->off_io, o.io_batch, 0, 0))
		goto fail;
	rc = open_paths(lk, errbuf, errlen);
	if (rc) {
		lk->threads_joined = 2;
		kvl_linker_close(lk);
		return rc;
	}
	kvl__lk_register_pools(lk);
	rc = KVL_ENOMEM;
	if (pthread_create(&lk->loader, NULL, kvl__lk_loader_main, lk))
		goto fail;
	if (pthread_create(&lk->offloader, NULL, kvl__lk_offloader_main, lk)) {
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

void kvl_linker_shutdown(kvl_linker *lk)
{
	if (!lk)
		return;
	pthread_mutex_lock(&lk->mu);
	lk->closing = 1;
	kvl__lk_cancel_list_locked(lk, lk->load_head);
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
	kvl__lk_unregister_all(lk); /* before the paths free their buffers */
	for (size_t i = 0; i < lk->n_paths; i++)
		lk->paths[i]->close(lk);
	free(lk->held);
	free(lk->held_res);
	kvl__lk_io_free(&lk->off_io);
	kvl__lk_claims_free(lk);
	free(lk->off_absent);
	free(lk->pool_path);
	free(lk->pool_whole);
	free(lk->comp);
	free(lk->lookup.bits);
	kvl__keyset_free(&lk->lookup.keys);
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

/* ------------------------------------------------------- accepting work */

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

/* Undoes accept_locked for a request refused after it. */
static void unaccept_locked(kvl_linker *lk, lk_req *r)
{
	lk->accounted--;
	kvl__lk_unlink_open_locked(lk, r);
}

int kvl_linker_load(kvl_linker *lk, uint64_t id, const kvl_hash *pages,
                    size_t n_pages, const size_t *const *slots)
{
	if (!lk)
		return KVL_EINVAL;
	lk_req *r;
	int rc = kvl__lk_req_build(lk, KVL_REQ_LOAD, id, pages, n_pages, slots, &r);
	if (rc)
		return rc;
	pthread_mutex_lock(&lk->mu);
	rc = accept_locked(lk, r);
	if (rc == 0 && (rc = kvl__lk_claim_locked(lk, r)))
		unaccept_locked(lk, r);
	if (rc == 0) {
		if (lk->load_tail)
			lk->load_tail->qnext = r;
		else
			lk->load_head = r;
		lk->load_tail = r;
	}
	pthread_mutex_unlock(&lk->mu);
	if (rc)
		kvl__lk_req_free(r);
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
		kvl__lk_unclaim_locked(lk, r);
		kvl__lk_cancel_list_locked(lk, r);
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
	return kvl_linker_start_after(lk, NULL, batch_out);
}

int kvl_linker_start_after(kvl_linker *lk, void *event, uint64_t *batch_out)
{
	if (!lk)
		return KVL_EINVAL;
	if (!batch_out)
		return kvl__fail(&lk->err, KVL_EINVAL,
		                 "start: batch_out is NULL");
	if (event && !(lk->async && lk->async->gate))
		return kvl__fail(&lk->err, KVL_ENOTSUP,
		                 "start: an event needs a pool on a CUDA device "
		                 "(and a kvlink built with CUDA)");
	pthread_mutex_lock(&lk->mu);
	int rc = 0;
	uint32_t slot = (uint32_t)(lk->next_batch % KVL_LINKER_MAX_BATCHES);
	lk_batch *b = &lk->batches[slot];
	if (lk->closing) {
		rc = kvl__fail(&lk->err, KVL_ECLOSED,
		               "start: the linker is shutting down");
	} else if (!b->finished) {
		rc = kvl__fail(&lk->err, KVL_EFULL,
		               "start: %d batches are still running",
		               KVL_LINKER_MAX_BATCHES);
	} else if (event && lk->load_head &&
	           (rc = lk->async->gate(lk, slot, event))) {
		/* nothing started: the loads stay queued */
	} else {
		*b = (lk_batch){.id = lk->next_batch, .reqs = lk->load_head,
		                .gated = event && lk->load_head,
		                .t_start_ns = kvl__now_ns()};
		for (lk_req *r = b->reqs; r; r = r->qnext)
			kvl__lk_unclaim_locked(lk, r);
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

static int wait_layer_locked(kvl_linker *lk, uint64_t batch, uint32_t layer,
                              uint32_t timeout_ms, int issued,
                              const char *what, lk_batch **b_out)
{
	struct timespec dl;
	if (timeout_ms && timeout_ms != UINT32_MAX)
		dl = kvl__deadline_after(timeout_ms);
	lk_batch *b = &lk->batches[batch % KVL_LINKER_MAX_BATCHES];
	*b_out = b;
	for (;;) {
		if (b->id != batch || batch >= lk->next_batch)
			return kvl__fail(&lk->err, KVL_ENOTFOUND,
			                 "%s: batch %llu is unknown or too old",
			                 what, (unsigned long long)batch);
		/* Also when the batch failed: until the layer has landed,
		 * the batch's other pages of it are still on their way. */
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
	int rc = wait_layer_locked(lk, batch, layer, timeout_ms, 0,
	                                   "wait", &b);
	if (rc == 0 && b->first_err && b->fail_layer <= layer)
		rc = kvl__fail(&lk->err, b->first_err,
		               "wait: batch %llu failed at layer %u: %s",
		               (unsigned long long)batch, b->fail_layer,
		               b->why[0] ? b->why : kvl_strerror(b->first_err));
	pthread_mutex_unlock(&lk->mu);
	return rc;
}

int kvl_linker_offload(kvl_linker *lk, uint64_t id, const kvl_hash *pages,
                       size_t n_pages, const size_t *const *slots,
                       void *event)
{
	if (!lk)
		return KVL_EINVAL;
	if (event && !lk->async)
		return kvl__fail(&lk->err, KVL_ENOTSUP,
		                 "offload %llu: an event needs a pool on a CUDA "
		                 "device (and a kvlink built with CUDA)",
		                 (unsigned long long)id);
	lk_req *r;
	int rc = kvl__lk_req_build(lk, KVL_REQ_OFFLOAD, id, pages, n_pages,
	                           slots, &r);
	if (rc)
		return rc;
	r->event = event;
	pthread_mutex_lock(&lk->mu);
	rc = accept_locked(lk, r);
	if (rc == 0 && (rc = kvl__lk_claim_locked(lk, r)))
		unaccept_locked(lk, r);
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
		kvl__lk_req_free(r);
	return rc;
}

int kvl_linker_flush(kvl_linker *lk, uint32_t timeout_ms)
{
	if (!lk)
		return KVL_EINVAL;
	struct timespec dl;
	if (timeout_ms != UINT32_MAX)
		dl = kvl__deadline_after(timeout_ms);
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
		dl = kvl__deadline_after(timeout_ms);
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

int kvl_linker_wait_stream(kvl_linker *lk, uint64_t batch, uint32_t layer,
                           void *stream, uint32_t timeout_ms)
{
	if (!lk)
		return KVL_EINVAL;
	if (!lk->async) /* no GPU pool: the data is there once the layer is */
		return kvl_linker_wait(lk, batch, layer, timeout_ms);
	if (layer >= lk->n_layers)
		return kvl__fail(&lk->err, KVL_ERANGE,
		                 "wait_stream: layer %u >= %u layers", layer,
		                 lk->n_layers);
	lk_batch *b;
	pthread_mutex_lock(&lk->mu);
	int rc = wait_layer_locked(lk, batch, layer, timeout_ms, 1,
	                           "wait_stream", &b);
	int failed = rc == 0 && b->first_err && b->fail_layer <= layer
	                     ? b->first_err
	                     : 0;
	if (failed)
		kvl__fail(&lk->err, failed,
		          "wait_stream: batch %llu failed at layer %u: %s",
		          (unsigned long long)batch, b->fail_layer,
		          b->why[0] ? b->why : kvl_strerror(failed));
	/* The copies of the layer issued so far are this batch's or a later
	 * one's; either way the wait ends after this batch's. */
	if (rc == 0)
		rc = lk->async->stream_wait(lk, layer, stream);
	pthread_mutex_unlock(&lk->mu);
	return rc ? rc : failed;
}
