/*
 * linker.h — the linker's state (internal), shared by linker.c (queues,
 * threads, completions) and stats.c (rendering of its counters).
 */
#ifndef KVL_LINKER_H
#define KVL_LINKER_H

#include <stdatomic.h>

#include "core/layout.h"
#include "linker/stats.h"
#include "store/store.h"

/* One (page, pool) of a request. */
typedef struct lk_item {
	uint32_t page;  /* index in the request */
	uint32_t pool;
	size_t slot;
	const char *key;
	uint8_t *hdr;   /* loads: the object's header, read with its first layer */
	kvl__view view; /* GPU loads: the object, pinned in the store for the
	                 * batch (linker_cuda.c) */
} lk_item;

typedef struct lk_req {
	uint64_t id;
	kvl_req_kind kind;
	size_t n_pages;
	kvl_hash *pages;      /* page ⊕ ns */
	size_t n_items;
	lk_item *items;       /* grouped by pool, pages ascending */
	size_t first_bad;     /* lowest page that failed (n_pages: none) */
	int status;           /* error of that page, or 0 */
	uint64_t t_accept_ns;
	void *event;          /* offloads: CUDA event to wait for, or NULL */
	struct lk_req *prev, *next; /* the linker's list of open requests */
	struct lk_req *qnext;       /* load queue, batch or offload queue */
} lk_req;

typedef struct lk_batch {
	uint64_t id;
	lk_req *reqs;
	uint32_t done;       /* layers complete */
	uint32_t enqueued;   /* layers whose GPU copies are issued */
	int first_err;       /* 0, or the first failure */
	uint32_t fail_layer; /* layer of that failure */
	int finished;        /* every request completed */
	uint64_t t_start_ns;
} lk_batch;

/* Scratch of one I/O thread for one store call of up to io_batch items. */
typedef struct lk_io {
	const char **keyp;
	lk_item **items;
	lk_req **reqs;
	size_t *counts;
	int64_t *got;
	int *res;
	void *pieces; /* kvl_range or kvl_iov lists */
	uint8_t *hdrs; /* offloads: headers being written */
	size_t n;
} lk_io;

/* Scratch of lookups: grown to the largest lookup seen, reused after. */
typedef struct lk_lookup {
	pthread_mutex_t mu; /* one lookup at a time uses the scratch */
	size_t cap;         /* items (page × pool) the arrays hold */
	char *keys;         /* cap × KVL_KEY_MAX */
	const char **keyp;
	int *res;
	uint8_t *flags;
	uint64_t *bits;     /* words for max_request_pages, from open */
} lk_lookup;

struct kvl_linker {
	const kvl_layout *layout;
	kvl_store *store;
	kvl_linker_opts opts;
	uint32_t n_layers;
	size_t max_comps;      /* most components of any pool */
	size_t max_header;     /* largest object header of any pool */
	kvl_policy *policies;  /* hit policy of each pool */
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

	pthread_t loader, offloader;
	int threads_joined;
	lk_io load_io, off_io; /* owned by the loader / offloader thread */
	kvl__linker_stats stats;
	struct lk_gpu *gpu;    /* GPU copies; NULL when no pool is on a GPU */
	kvl__err err;
};

/* GPU part of the linker (linker_cuda.c; stubs without CUDA). Open checks
 * and prepares the copiers when some pool lives on a CUDA device. Load
 * issues the copies of one layer for the GPU pools' items (and records the
 * layer's event); finish waits for a layer's copies and releases what they
 * read; both return the first failure (and fail items via their requests).
 * Offload copies items of GPU pools to host memory and stores them. */
int kvl__lk_gpu_open(kvl_linker *lk, char *errbuf, size_t errlen);
void kvl__lk_gpu_close(kvl_linker *lk);
int kvl__lk_gpu_load_layer(kvl_linker *lk, lk_batch *b, uint32_t layer);
int kvl__lk_gpu_finish_layer(kvl_linker *lk, uint32_t layer);
/* Waits, holding mu, until layer `layer` of `batch` is complete (with
 * `issued`: until its GPU copies are issued) or, without `issued`, known to
 * have failed. 0, or KVL_ENOTFOUND / KVL_ETIMEDOUT with a message starting
 * with `what`. *b_out gets the batch's slot. */
int kvl__lk_wait_layer_locked(kvl_linker *lk, uint64_t batch, uint32_t layer,
                              uint32_t timeout_ms, int issued,
                              const char *what, lk_batch **b_out);
/* Unpins the objects a batch's GPU loads held; after its last layer. */
void kvl__lk_gpu_end_batch(kvl_linker *lk, lk_batch *b);
void kvl__lk_gpu_offload(kvl_linker *lk, lk_req *r, lk_item **items,
                         size_t n, void *event);
void kvl__lk_req_fail(lk_req *r, size_t page, int code);
/* Scratch for io_batch items: per_item bytes of pieces each, and hdr bytes
 * of headers each (0: none). Free with kvl__lk_io_free. */
int kvl__lk_io_alloc(lk_io *io, size_t n, size_t per_item, size_t hdr);
void kvl__lk_io_free(lk_io *io);

/* Checks an item's read of layer ly (and the layers read with it): `err`
 * (the store's result for it, 0: read), its header at the pool's first
 * layer, and on untrusted stores each layer's checksum, over `bytes` (the
 * layers as read, contiguous) or, when NULL, over the item's host slot.
 * Returns 0 or the reason it is not valid (a short object is
 * KVL_ECORRUPT). */
int kvl__lk_read_check(const kvl_linker *lk, const lk_req *r,
                       const lk_item *it, const kvl__layer *ly, int err,
                       const uint8_t *bytes);

/* The end of the layers read together with layer ly of p: ly alone, or
 * every layer at the first one when the store reads whole objects anyway
 * (store->whole_reads). */
static inline const kvl__layer *kvl__lk_read_end(const kvl_linker *lk,
                                                 const kvl__pool *p,
                                                 const kvl__layer *ly)
{
	return lk->store->whole_reads && ly == &p->layers[0]
	               ? p->layers + p->n_layers
	               : ly + 1;
}

#endif /* KVL_LINKER_H */
