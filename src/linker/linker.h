/* SPDX-License-Identifier: Apache-2.0 */
/*
 * linker.h — the linker's state and the seams between its parts
 * (internal).
 *
 * The parts, each in a file of its own, called in one direction only:
 *
 *   handle.c    the engine's calls: open/close, queues, start, wait, poll,
 *               flush, cancel                 → loader, offloader, request
 *   lookup.c    restorable prefixes across ranks            → store
 *   loader.c    the loader thread: batches layer by layer   → path, request
 *   offloader.c the offloader thread                        → path, request
 *   path_*.c    how a pool's bytes move between its slots and the store
 *               (path.h): host slots, GPU slots from store memory in place,
 *               GPU slots through a pinned ring             → codec, store
 *   request.c   requests: building, failing pages, completing, the walk
 *               over a batch's items, store-call scratch
 *   stats.c     rendering of the counters below
 *
 * Threads: engine threads call handle.c and lookup.c; one loader thread
 * runs batches in id order; one offloader thread writes offloads in FIFO
 * order. `mu` guards the queues, the batch ring, the completion ring and
 * the list of open requests. A request is owned by one place at a time:
 * the load queue, a batch, the offload queue, or the thread working on it;
 * the worker reads and writes its items without the lock, and only the
 * completion (under `mu`) hands it back and frees it. Each path's state
 * belongs to the thread that drives it (its loads to the loader, its
 * offloads to the offloader) and is allocated at open, so neither thread
 * allocates.
 */
#ifndef KVL_LINKER_H
#define KVL_LINKER_H

#include <stdatomic.h>

#include "core/codec.h"
#include "linker/keyset.h"
#include "linker/stats.h"
#include "store/store.h"

struct lk_path;

/* One (page, pool) of a request. */
typedef struct lk_item {
	uint32_t page;  /* index in the request */
	uint32_t pool;
	size_t slot;
	const char *key;
	uint8_t *hdr;   /* loads: the object's header, read with its first layer */
	kvl__view view; /* in-place GPU loads: the object, held in the store for
	                 * the batch */
} lk_item;

typedef struct lk_req {
	uint64_t id;
	kvl_req_kind kind;
	size_t n_pages;
	kvl_hash *pages;
	size_t n_items;
	lk_item *items;       /* grouped by pool, pages ascending */
	size_t first_bad;     /* lowest page that failed (n_pages: none) */
	int status;           /* error of that page, or 0 */
	uint64_t t_accept_ns;
	void *event;          /* offloads: CUDA event to wait for, or NULL */
	struct lk_req *prev, *next; /* the linker's list of open requests */
	struct lk_req *qnext;       /* load queue, batch or offload queue */
} lk_req;

/* What a batch keeps of the message of its first failure. */
#define KVL__LK_WHY 256

typedef struct lk_batch {
	uint64_t id;
	lk_req *reqs;
	uint32_t done;       /* layers complete */
	uint32_t enqueued;   /* layers whose GPU copies are issued */
	int first_err;       /* 0, or the first failure */
	uint32_t fail_layer; /* layer of that failure */
	char why[KVL__LK_WHY]; /* its message from the loader, or "" */
	int finished;        /* every request completed */
	int gated;           /* started after an engine's event (the async
	                      * path's gate of this ring slot) */
	uint64_t t_start_ns;
} lk_batch;

/* Scratch for one store call of up to `cap` items: the items gathered so
 * far (`m`), their keys, requests, range or piece counts and results, and
 * `pieces`, their kvl_range or kvl_iov lists back to back (`used` entries
 * taken). */
typedef struct lk_io {
	size_t cap, m, used;
	const char **keyp;
	lk_item **items;
	lk_req **reqs;
	size_t *counts;
	int *res;
	void *pieces;
	uint8_t *hdrs; /* offloads: headers being written (hdr bytes each) */
} lk_io;

/* Scratch of lookups: grown to the largest lookup seen, reused after. */
typedef struct lk_lookup {
	pthread_mutex_t mu; /* one lookup at a time uses the scratch */
	kvl__keyset keys;   /* one key per (page, pool) asked */
	uint64_t *bits;     /* words for max_request_pages, from open */
} lk_lookup;

#define LK_MAX_PATHS 2 /* host slots, and one kind of GPU slots */

struct kvl_linker {
	const kvl_layout *layout;
	kvl_store *store;
	kvl__store_caps caps;
	const kvl__mac *mac; /* the store's key (kvl__store_mac), or NULL */
	kvl_linker_opts opts;
	uint32_t n_layers;
	size_t max_comps;      /* most components of any pool */
	size_t max_header;     /* largest object header of any pool */
	size_t max_pieces;     /* most pieces of one page of any pool */
	kvl_policy *policies;  /* hit policy of each pool */
	const struct lk_path **pool_path; /* each pool's path */
	uint8_t *pool_whole;   /* each pool's loads read all layers with the
	                        * first (kvl__lk_pool_whole) */
	int any_whole;         /* some pool's do */
	const struct lk_path *paths[LK_MAX_PATHS]; /* the paths in use */
	void **registered;     /* what regions.c registered with the store */
	size_t n_registered;
	const char **held;     /* the loader's batch holds (regions.c) */
	size_t n_held, cap_held;
	int *held_res;
	size_t n_paths;
	/* The path whose copies complete after load_layer returns (GPU), or
	 * NULL: the loader then finishes each layer once the next is issued,
	 * and stream waits go to it. */
	const struct lk_path *async;
	/* The async path's last layer issued and not yet marked complete (b
	 * NULL: none). The loader's own. */
	struct {
		lk_batch *b;
		uint32_t layer;
		int err; /* a failure met while issuing it */
		char why[KVL__LK_WHY]; /* and what the loader said of it */
	} unfinished;
	struct lk_host *host;  /* host path state, or NULL */
	struct lk_gpu *gpu;    /* GPU path state, or NULL */
	lk_lookup lookup;

	pthread_mutex_t mu;    /* guards everything below up to `err` */
	pthread_cond_t cv_loader, cv_offloader, cv_progress;
	int closing;
	lk_req *open;          /* accepted requests not yet completed */
	uint32_t accounted;    /* accepted and not yet polled */
	lk_req *load_head, *load_tail;
	lk_batch batches[KVL_LINKER_MAX_BATCHES];
	uint64_t next_batch;   /* id the next start gets */
	uint64_t loader_next;  /* next batch id the loader takes */
	lk_req *off_head, *off_tail;
	uint64_t off_queued, off_completed;
	kvl_completion *comp;  /* ring of max_requests */
	size_t comp_head, comp_n;
	uint64_t *claims;      /* claims.c: slot bits, loads' then an offload's */
	size_t *claim_at;      /* each pool's first word in a map */
	size_t claim_words;    /* words of one map */

	pthread_t loader, offloader;
	int threads_joined;
	lk_io off_io;          /* the offloader's existence queries */
	lk_item **off_absent;  /* the offloader's items of one path to write */
	kvl__linker_stats stats;
	kvl__err err;
};

static inline const kvl__pool *kvl__lk_pool(const kvl_linker *lk,
                                            uint32_t pool)
{
	return &lk->layout->pools[pool];
}

/* ------------------------------------------------------------ request.c */

/* Builds a request (one allocation) from the engine's arguments, checking
 * them; the message names what is wrong. */
int kvl__lk_req_build(kvl_linker *lk, kvl_req_kind kind, uint64_t id,
                      const kvl_hash *pages, size_t n_pages,
                      const size_t *const *slots, lk_req **out);
void kvl__lk_req_free(lk_req *r);

/* Records that page `page` of r failed with `code`; keeps the lowest. */
void kvl__lk_req_fail(lk_req *r, size_t page, int code);

/* Counts the outcome `res` of a put of offload item it: stored, already
 * present, or its page failed. */
void kvl__lk_count_put(kvl_linker *lk, lk_req *r, const lk_item *it, int res);

/* Takes r out of the linker's list of open requests. Caller holds mu. */
void kvl__lk_unlink_open_locked(kvl_linker *lk, lk_req *r);

/* Moves r from the open list into the completion ring and frees it. Caller
 * holds mu. */
void kvl__lk_post_locked(kvl_linker *lk, lk_req *r);

/* Completes every request of the list (linked by qnext) as canceled with
 * no valid page. Caller holds mu. */
void kvl__lk_cancel_list_locked(kvl_linker *lk, lk_req *r);

/* Scratch for `cap` items: per_item bytes of pieces each and hdr bytes of
 * headers each (0: none of them). 0 or KVL_ENOMEM; free with kvl__lk_io_free (also
 * after a failure). */
int kvl__lk_io_alloc(lk_io *io, size_t cap, size_t per_item, size_t hdr);
void kvl__lk_io_free(lk_io *io);

/* Adds item it of r, with `count` ranges or pieces just written at the
 * io's `used` position, to the io's next store call. */
static inline void kvl__lk_io_add(lk_io *io, lk_req *r, lk_item *it,
                                  size_t count)
{
	io->keyp[io->m] = it->key;
	io->items[io->m] = it;
	io->reqs[io->m] = r;
	io->counts[io->m++] = count;
	io->used += count;
}

/* The walk over the live items of a batch at one model layer whose pool
 * moves through one path: every item of every request of the batch, in
 * order, whose pool has that layer and whose request has no failure at a
 * lower page. The one iteration every load path uses. */
typedef struct lk_walk {
	const kvl_linker *lk;
	const struct lk_path *path;
	uint32_t layer;
	lk_req *r;     /* the current item's request */
	size_t next;   /* index of the next item in r */
	lk_item *it;   /* the current item, its pool and layer */
	const kvl__pool *p;
	const kvl__layer *ly;
} lk_walk;

void kvl__lk_walk_start(lk_walk *w, const kvl_linker *lk, lk_batch *b,
                        uint32_t layer, const struct lk_path *path);
/* 1 with w->it (and r, p, ly) set to the next item, or 0 at the end. */
int kvl__lk_walk_next(lk_walk *w);

/* Whether pool `pool`'s loads read every layer with the first: on a store
 * whose reads move whole objects, and where a layer's bytes per page are
 * below what a read costs anyway (caps.layer_read_min). */
static inline int kvl__lk_pool_whole(const kvl_linker *lk, uint32_t pool)
{
	return lk->pool_whole[pool];
}

/* ------------------------------------------------------------ regions.c */

/* Announces the layout's pool memory to the store (kvl_store_register),
 * regions that overlap or touch as one, so that stores that move bytes
 * themselves (Mooncake) read into the slots and write from them with no
 * staging copy. A store that refuses a region only costs that copy: the
 * refusal is logged, and open goes on. */
void kvl__lk_register_pools(kvl_linker *lk);
/* The same for one piece of the linker's own memory (the GPU paths'
 * pinned ring and staging). */
void kvl__lk_register(kvl_linker *lk, void *addr, size_t len);
/* Forgets all of it, before the memory is freed (close). */
void kvl__lk_unregister_all(kvl_linker *lk);

/* The loader: holds the objects of batch b in the store for the batch
 * (kvl__store_hold), and lets them go at its end. A hold that fails costs
 * nothing but the hold: the reads report what they find. */
void kvl__lk_hold_batch(kvl_linker *lk, lk_batch *b);
void kvl__lk_unhold_batch(kvl_linker *lk);

/* ------------------------------------------------------------- claims.c */

/* The slot bitmaps of every pool; 0 or KVL_ENOMEM. */
int kvl__lk_claims_alloc(kvl_linker *lk);
void kvl__lk_claims_free(kvl_linker *lk);
/* A load claims its destination slots until its batch starts; an offload's
 * source slots are checked against each other. KVL_EINVAL (nothing
 * claimed) when a slot would receive two pages, or give two different
 * pages. Caller holds mu. */
int kvl__lk_claim_locked(kvl_linker *lk, const lk_req *r);
/* Gives back the slots of queued load r (its batch started, or it was
 * canceled). Caller holds mu. */
void kvl__lk_unclaim_locked(kvl_linker *lk, const lk_req *r);

/* ---------------------------------------------- loader.c, offloader.c */

void *kvl__lk_loader_main(void *arg);
/* The loader, from inside a path's load_layer, after a wait of its own:
 * marks the previously issued layer complete if its copies have landed
 * already, so that waits for it do not also wait for the issue of this
 * layer. */
void kvl__lk_loader_poll(kvl_linker *lk);
void *kvl__lk_offloader_main(void *arg);

#endif /* KVL_LINKER_H */
