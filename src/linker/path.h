/* SPDX-License-Identifier: Apache-2.0 */
/*
 * path.h — how a pool's bytes move between its slots and the store
 * (internal): one static const table per way, chosen for each pool at
 * linker open, as backends are chosen for stores.
 *
 *  - host:  host slots; loads read straight into the slots, offloads put
 *           the slots' pieces (path_host.c).
 *  - view:  GPU slots over a store that lends its memory (mem:): loads copy
 *           from the store's pinned objects in place, offloads copy into
 *           memory the store reserved (path_view.c).
 *  - ring:  GPU slots over any other store: loads read into a pinned ring
 *           and copy from there, offloads gather into pinned staging and
 *           put it (path_ring.c).
 *
 * The GPU paths exist in builds with CUDA only; path_gpu.c holds what they
 * share (the device, its copy engines' queues, layer events, stream waits).
 * A path's functions run on the thread that drives them: open and close on
 * the engine's, load_layer, finish_layer and end_batch on the loader,
 * offload on the offloader, stream_wait on any thread. Each fails items
 * through kvl__lk_req_fail and returns the first failure it saw.
 */
#ifndef KVL_PATH_H
#define KVL_PATH_H

#include "kvl_config.h"
#include "linker/linker.h"

typedef struct lk_path {
	/* Allocates the path's state in lk (its pools are those whose
	 * pool_path is this path). The message goes to errbuf. */
	int (*open)(kvl_linker *lk, char *errbuf, size_t errlen);
	void (*close)(kvl_linker *lk);
	/* Reads (or issues the copies of) model layer `layer` of the batch's
	 * live items of this path. */
	int (*load_layer)(kvl_linker *lk, lk_batch *b, uint32_t layer);
	/* Waits until the copies issued for `layer` have landed. NULL: they
	 * have when load_layer returns. */
	int (*finish_layer)(kvl_linker *lk, uint32_t layer);
	/* Whether the copies issued for `layer` have landed, without
	 * waiting: 1 if so, else 0 (not yet, or an error finish_layer then
	 * reports). NULL with finish_layer. */
	int (*landed)(kvl_linker *lk, uint32_t layer);
	/* After the batch's last layer: lets go of what its loads held. NULL:
	 * nothing is held. */
	void (*end_batch)(kvl_linker *lk, lk_batch *b);
	/* Makes CUDA stream `stream` wait until the copies of `layer` issued
	 * so far have landed. NULL: nothing is copied on the GPU. */
	int (*stream_wait)(kvl_linker *lk, uint32_t layer, void *stream);
	/* kvl_linker_start_after (engine thread, under mu): captures the
	 * engine's CUDA event for batch ring slot `slot`. NULL: the path has
	 * no CUDA (start_after then needs another path that has). */
	int (*gate)(kvl_linker *lk, uint32_t slot, void *event);
	/* The loader, before a gated batch's first layer: makes the path's
	 * copies wait for the captured event, and when host_too, blocks until
	 * it completed (host slots are written by the loader itself). */
	int (*gate_wait)(kvl_linker *lk, uint32_t slot, int host_too);
	/* Stores the n items of offload r (absent from the store), after
	 * CUDA event `event` when not NULL. */
	void (*offload)(kvl_linker *lk, lk_req *r, lk_item **items, size_t n,
	                void *event);
} lk_path;

extern const lk_path kvl__lk_path_host;
#if KVL_HAVE_CUDA
extern const lk_path kvl__lk_path_view;
extern const lk_path kvl__lk_path_ring;
#endif

#endif /* KVL_PATH_H */
