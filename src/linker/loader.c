/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loader.c — the loader thread: runs batches in id order, layer by layer,
 * each layer through every path in use (path.h), and completes the
 * batch's requests.
 *
 * A layer is complete when every path's bytes of it have landed: at once
 * for paths that read synchronously (host slots), and for the GPU paths
 * when the copies issued for it have finished, which the loader waits for
 * only after the next layer's copies are issued, so the GPU never idles
 * while the loader prepares the next layer. A path whose issue itself
 * waits (the GPU staging ring: stage.c) polls meanwhile
 * (kvl__lk_loader_poll), so a layer is marked complete once it has
 * landed, not once the next one is issued. A failure at layer l fails
 * every later wait of the batch; the completions say which requests failed
 * and how many of their pages are valid. A batch started after an engine's
 * CUDA event (kvl_linker_start_after) first waits for it: the GPU copies
 * on the GPU, host slots on this thread.
 */
#include <stdio.h>

#include "linker/path.h"

/* Marks layer `layer` of b complete with `err` (0: good), `why` being what
 * the loader was told of the failure ("" if nothing). */
static void layer_done(kvl_linker *lk, lk_batch *b, uint32_t layer, int err,
                       const char *why)
{
	pthread_mutex_lock(&lk->mu);
	if (err && !b->first_err) {
		b->first_err = err;
		b->fail_layer = layer;
		snprintf(b->why, sizeof b->why, "%s", why);
	}
	b->done = layer + 1;
	pthread_cond_broadcast(&lk->cv_progress);
	pthread_mutex_unlock(&lk->mu);
}

/* Layer `layer` of b through every path; the first failure, or 0 (its
 * message, if any, in kvl__err_here). */
static int load_layer(kvl_linker *lk, lk_batch *b, uint32_t layer)
{
	int err = 0;
	kvl__err_here_clear();
	for (size_t i = 0; i < lk->n_paths; i++) {
		int e = lk->paths[i]->load_layer(lk, b, layer);
		if (!err)
			err = e;
	}
	return err;
}

/* Waits for the async path's copies of the unfinished layer, if any, and
 * marks it complete, failed by the failure met while issuing it if not by
 * the wait. */
static void finish_unfinished(kvl_linker *lk)
{
	lk_batch *b = lk->unfinished.b;
	if (!b)
		return;
	uint32_t layer = lk->unfinished.layer;
	int err = lk->unfinished.err;
	lk->unfinished.b = NULL;
	kvl__err_here_clear();
	int ferr = lk->async->finish_layer(lk, layer);
	layer_done(lk, b, layer, err ? err : ferr,
	           err ? lk->unfinished.why : kvl__err_here());
}

void kvl__lk_loader_poll(kvl_linker *lk)
{
	if (lk->unfinished.b && lk->async->landed(lk, lk->unfinished.layer))
		finish_unfinished(lk);
}

/* Completes the batch's requests: all of them canceled when the linker
 * closed before its last layer (not every layer was read: nothing is
 * valid). */
static void complete_batch(kvl_linker *lk, lk_batch *b, int canceled)
{
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
			r->first_bad = 0;
			if (!r->status)
				r->status = KVL_ECANCELED;
		}
		kvl__lk_post_locked(lk, r);
		r = next;
	}
	b->finished = 1;
	pthread_cond_broadcast(&lk->cv_progress);
	pthread_mutex_unlock(&lk->mu);
}

/* A gated batch waits for the engine's event: the GPU copies on the GPU,
 * the host slots here. On failure no page of the batch is read. */
static int wait_gate(kvl_linker *lk, lk_batch *b)
{
	int err = lk->async->gate_wait(
		lk, (uint32_t)(b->id % KVL_LINKER_MAX_BATCHES), lk->n_paths > 1);
	for (lk_req *r = b->reqs; err && r; r = r->qnext)
		kvl__lk_req_fail(r, 0, err);
	return err;
}

static void run_batch(kvl_linker *lk, lk_batch *b)
{
	int canceled = 0;
	int gate_err = b->gated ? wait_gate(lk, b) : 0;
	uint32_t layer;
	kvl__lk_hold_batch(lk, b);
	for (layer = 0; layer < lk->n_layers; layer++) {
		pthread_mutex_lock(&lk->mu);
		canceled = lk->closing;
		pthread_mutex_unlock(&lk->mu);
		if (canceled)
			break;
		int err = load_layer(lk, b, layer);
		if (layer == 0 && gate_err)
			err = gate_err;
		if (!lk->async) {
			layer_done(lk, b, layer, err, kvl__err_here());
			continue;
		}
		pthread_mutex_lock(&lk->mu);
		b->enqueued = layer + 1;
		pthread_cond_broadcast(&lk->cv_progress);
		pthread_mutex_unlock(&lk->mu);
		finish_unfinished(lk); /* layer - 1, unless polled already */
		lk->unfinished.b = b;
		lk->unfinished.layer = layer;
		lk->unfinished.err = err;
		snprintf(lk->unfinished.why, sizeof lk->unfinished.why, "%s",
		         err ? kvl__err_here() : "");
	}
	finish_unfinished(lk); /* the last layer (none without async) */
	for (size_t i = 0; i < lk->n_paths; i++)
		if (lk->paths[i]->end_batch)
			lk->paths[i]->end_batch(lk, b);
	kvl__lk_unhold_batch(lk);
	complete_batch(lk, b, canceled);
}

void *kvl__lk_loader_main(void *arg)
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
