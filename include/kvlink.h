/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvlink.h — the whole public contract of kvlink.
 *
 * kvlink keeps an inference engine's KV-cache pages outside GPU memory, shares
 * them across processes and nodes through a store, and loads them back layer by
 * layer. Data flows one way: engine call → linker → page codec → store.
 *
 * What an engine uses, in this order:
 *   errors      codes, names and messages
 *   linker      lookups across ranks, layer-wise loads, offloads, completions
 *   hashes      the chained page hashes the linker takes
 *   layouts     the engine's page pools, as the linker sees them
 *   stores      where objects live, chosen by URI
 *   stats       counters as Prometheus text or JSON
 * and, under the "advanced" banner at the end, the building blocks the
 * linker is made of: store batch calls, synchronous page I/O, the object
 * format's queries, restorable sets and the in-process all-reduce.
 *
 * Conventions that hold for every function below unless its comment says
 * otherwise:
 *
 *  - Functions return 0 (KVL_OK) or a negative kvl_errno code. Outputs go
 *    through pointer parameters marked [out]. On failure outputs are left as
 *    they were, with two rules for every function alike: an output marked
 *    [needed] (the room a buffer needs) is also written on KVL_ERANGE; and
 *    kvl_linker_lookup's prefix is 0 on any failure, so an engine that
 *    ignored the code would restore nothing.
 *  - Arguments come in one order: the handle the call acts on, then the
 *    handle that owns the data (a store, then a layout), then each array
 *    followed by its length (arrays of one length share it, after the last),
 *    then outputs. Buffers that receive text take their size.
 *  - Handles are opaque. Each handle keeps the message of its most recent
 *    failure (kvl_<object>_errmsg), naming the bad argument, key or backend
 *    text; every failure of a call on a handle sets it. A NULL handle gets
 *    KVL_EINVAL and no message (there is nowhere to keep one). Functions that
 *    open a handle take an optional caller buffer for the message, since
 *    there is no handle to read it from when they fail.
 *  - Pointers passed in are borrowed for the duration of the call only, unless
 *    the comment says they are retained. Strings are NUL-terminated UTF-8.
 *  - Closing or freeing NULL is a harmless no-op.
 *  - Thread-safety is stated per object: a layout is immutable (and therefore
 *    safe to share) once finalized; stores and linkers are safe to call from any
 *    number of threads.
 */
#ifndef KVLINK_H
#define KVLINK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define KVL_API
#else
#define KVL_API __attribute__((visibility("default")))
#endif

/* The one source of kvlink's version (the build and the bindings read it). */
#define KVL_VERSION_MAJOR 0
#define KVL_VERSION_MINOR 6
#define KVL_VERSION_PATCH 0

/* ===================================================================== errors */

/* X(name, value, message): the one table of error codes. */
#define KVL_ERRNO_MAP(X)                                                      \
	X(EINVAL, -1, "invalid argument")                                     \
	X(ENOMEM, -2, "out of memory")                                        \
	X(ENOTFOUND, -3, "not found")                                         \
	X(ERANGE, -4, "out of range")                                         \
	X(EEXIST, -5, "already exists")                                       \
	X(EIO, -6, "store input/output error")                                \
	X(ECORRUPT, -7, "object failed its integrity checks")                 \
	X(ETIMEDOUT, -8, "timed out")                                         \
	X(ECANCELED, -9, "canceled")                                          \
	X(EFULL, -10, "queue or store is full")                               \
	X(ECLOSED, -11, "handle is closing")                                  \
	X(ENOTSUP, -12, "not supported by this build or store")               \
	X(EPARSE, -13, "malformed input")                                     \
	X(ESTATE, -14, "call not allowed in this state")                      \
	X(EPERM, -15, "denied by the store's access control")

typedef enum kvl_errno {
	KVL_OK = 0,
#define KVL_ERRNO_ENUM_(name, value, msg) KVL_##name = (value),
	KVL_ERRNO_MAP(KVL_ERRNO_ENUM_)
#undef KVL_ERRNO_ENUM_
} kvl_errno;

/* A static English description of code `err` ("unknown error" for codes not in
 * the table). Never NULL. Thread-safe. */
KVL_API const char *kvl_strerror(int err);

/* The short symbolic name of `err`, e.g. "KVL_EINVAL" ("KVL_OK" for 0,
 * "KVL_EUNKNOWN" otherwise). Never NULL. Thread-safe. Codes are -1, -2, …
 * without gaps, so bindings can read the whole table by asking until
 * "KVL_EUNKNOWN". */
KVL_API const char *kvl_err_name(int err);

/* The library version as "MAJOR.MINOR.PATCH". Static string. Thread-safe. */
KVL_API const char *kvl_version(void);

/* 1 if this build of kvlink has optional feature `name`, else 0. Names: "cuda"
 * (built with GPU copies), "cuda-device" (built with them and a CUDA device
 * is usable in this process now), "redis" (redis:// store), "tls"
 * (rediss://: the Redis store over TLS), "mac" (objects keyed with a store
 * secret: the secret_file option of kvl_store_open), "mooncake-ranges"
 * (the Mooncake library that mooncake:// opens without lib=, from
 * $KVL_MOONCAKE_LIB, carries kvlink's shim: such stores move byte ranges
 * and load layer by layer; docs/mooncake.md). Unknown names give 0.
 * Thread-safe. */
KVL_API int kvl_has_feature(const char *name);

/* The handles and the page hash, described in their sections below. */
typedef struct kvl_linker kvl_linker;
typedef struct kvl_layout kvl_layout;
typedef struct kvl_store kvl_store;
typedef struct kvl_hash kvl_hash;

/* ===================================================================== linker */

/* The linker is the engine-facing object: lookups across ranks, layer-wise
 * loads in batches, background offloads, cancellation and completions.
 *
 * Life of a load: kvl_linker_load queues a request; kvl_linker_start takes
 * every queued load as one batch; the loader thread reads layer 0 of every
 * page of the batch, then layer 1, … straight into the destination slots and
 * marks each layer complete; kvl_linker_wait returns once a layer is
 * complete; the request then completes (kvl_linker_poll) with its status and
 * the number of leading pages that are valid.
 *
 * Exactly once: every request that load or offload accepted (returned 0) is
 * reported by kvl_linker_poll exactly once: succeeded, failed, or canceled.
 * A call that returned an error accepted nothing and reports nothing.
 *
 * Tenants: pages are named by their hashes only. Engines that must not share
 * pages (tenants, cache salts, LoRA adapters) hash them in different
 * namespaces: kvl_namespace_seed's seed as kvl_hash_pages' prior.
 *
 * Memory: slots named in a load are written by the loader until the request
 * completes; slots named in an offload are read until it completes: the
 * engine must not reuse them before. The layout and store must outlive the
 * linker. All functions are thread-safe. */

/* The engine's all-reduce across ranks: replace bits[0..n_words) by the
 * bitwise AND of every rank's bits, in place, and return 0 (or a negative
 * kvl_errno, which kvlink passes on). Called from the thread that called
 * kvlink; every rank calls it once per lookup with the same n_words. */
typedef int (*kvl_allreduce_fn)(uint64_t *bits, size_t n_words, void *user);

/* Options of kvl_linker_open. Zero means "the default" for every field, so
 * `kvl_linker_opts o = KVL_LINKER_OPTS_INIT;` is a valid start. struct_size
 * lets later versions add fields without breaking callers built against
 * this one. */
typedef struct kvl_linker_opts {
	uint32_t struct_size;      /* sizeof(kvl_linker_opts) */
	/* All-reduce across ranks for lookups; NULL: this is the only rank. */
	kvl_allreduce_fn allreduce;
	void *allreduce_user;
	/* Requests (loads and offloads) accepted and not yet polled; beyond it
	 * load/offload return KVL_EFULL. Default 4096, at most
	 * KVL_LINKER_MAX_REQUESTS. */
	uint32_t max_requests;
	/* Pages of one request. Default 1 << 20, at most
	 * KVL_LINKER_MAX_REQUEST_PAGES. */
	uint32_t max_request_pages;
	/* Items (page × pool) one store call of the loader or offloader
	 * carries; larger batches are cut into calls of this size. Default
	 * 4096, at most KVL_LINKER_MAX_IO_BATCH. */
	uint32_t io_batch;
	/* How loads into GPU pools move the bytes of objects that the store
	 * lends (mem: in pinned mode), a kvl_gpu_copy. Default AUTO. */
	uint32_t gpu_copy;
	/* Bytes of GPU memory for the copy engines' staging ring (two
	 * halves), allocated at open when a pool is on a CUDA device over
	 * such a store and gpu_copy is not KERNEL. Default 64 MiB, at most
	 * KVL_LINKER_MAX_GPU_STAGING; a layer read larger than a half goes
	 * by kernel. */
	uint32_t gpu_staging;
} kvl_linker_opts;

/* kvl_linker_opts.gpu_copy. The embedded store places objects put one
 * after another (one offload) at a constant pitch in its pinned memory, so
 * a layer of such a run is one 2D copy. */
typedef enum kvl_gpu_copy {
	/* The copy engines for runs whose layer reads are 32 KiB or more per
	 * object and 4 MiB or more in all (2D copies through the staging
	 * ring), and, where the CUDA runtime has cudaMemcpyBatchAsync (12.8
	 * and later), for the other reads whose chunks average 64 KiB or
	 * more (one batch of copies straight into the slots per launch):
	 * there they load faster than the kernel and leave the SMs to the
	 * engine's compute. The kernel for the rest, where it is faster. */
	KVL_GPU_COPY_AUTO = 0,
	/* A gather kernel reads every byte over PCIe from mapped memory. */
	KVL_GPU_COPY_KERNEL = 1,
	/* The copy engines for every run, of any length (one object is a
	 * run of one): 2D copies into the GPU staging ring, then a short
	 * scatter kernel from there into the slots. */
	KVL_GPU_COPY_DMA = 2,
} kvl_gpu_copy;
#define KVL_LINKER_OPTS_INIT {.struct_size = sizeof(kvl_linker_opts)}

/* The largest values kvl_linker_open accepts for these options (larger ones
 * are KVL_EINVAL, not an allocation of their size): 2^20 requests (their
 * completion records, 40 MiB), 2^24 pages per request (the lookup bitmap,
 * 2 MiB), 2^16 items per store call (their key scratch, 20 MiB per
 * thread), a 1 GiB GPU staging ring. */
#define KVL_LINKER_MAX_REQUESTS 1048576
#define KVL_LINKER_MAX_REQUEST_PAGES 16777216
#define KVL_LINKER_MAX_IO_BATCH 65536
#define KVL_LINKER_MAX_GPU_STAGING 1073741824

/* Opens a linker over a store for a finalized layout (both borrowed: they
 * must outlive the linker) and starts its loader and offloader threads.
 * Rank information (tp/cp/pp rank and size, replicated pools) comes from the
 * layout's shard and pool flags. Each pool's bytes move one way, chosen here:
 * host pools straight between the store and their slots; pools on a CUDA
 * device from the store's memory in place where the store lends it (mem:;
 * runs of objects through the copy engines and a GPU staging ring of
 * gpu_staging bytes, the rest by a kernel: kvl_gpu_copy), and otherwise
 * through a pinned ring the linker allocates: two halves of up to 64 MiB
 * each (io_batch items' reads, or one item's if larger).
 * out     [out] the linker; close it with kvl_linker_close.
 * errbuf  optional buffer of errlen bytes for the reason of a failure.
 * Errors: KVL_EINVAL (NULL, unfinalized layout, bad option: a
 * struct_size this version does not know, or an option above its
 * KVL_LINKER_MAX_* limit), KVL_ENOTSUP
 * (a pool on a CUDA device in a build without CUDA or without a usable
 * device; GPU pools on two devices; a pool mixing host and CUDA buffers),
 * KVL_EIO (the GPU copies or the staging ring cannot be set up),
 * KVL_ENOMEM. */
KVL_API int kvl_linker_open(kvl_store *store, const kvl_layout *layout,
                            const kvl_linker_opts *opts, kvl_linker **out,
                            char *errbuf, size_t errlen);

/* Stops the linker: new loads and offloads fail with KVL_ECLOSED; queued
 * loads and offloads that have not started complete as KVL_ECANCELED; a
 * running batch stops at its next layer (its unfinished layers and requests
 * complete as KVL_ECANCELED, waiters are woken); an offload being written
 * finishes. Joins the threads. Completions stay pollable. Idempotent. */
KVL_API void kvl_linker_shutdown(kvl_linker *lk);

/* Shuts down (as kvl_linker_shutdown) and frees the linker; completions not
 * yet polled are dropped. NULL is a no-op. */
KVL_API void kvl_linker_close(kvl_linker *lk);

/* The message of the most recent failure on this linker (from any thread),
 * or "" if none; "linker is NULL" for NULL. The returned string belongs to
 * the calling thread and stays valid until its next *_errmsg call. */
KVL_API const char *kvl_linker_errmsg(const kvl_linker *lk);

/* A slot value meaning "this page is not loaded/offloaded for this pool". */
#define KVL_NO_SLOT SIZE_MAX

/* Looks up the longest prefix of `pages` restorable on all ranks: one
 * batched existence query for every (page, pool) asked, the pools' hit
 * policies (kvl_restorable_set), then the all-reduce across ranks.
 *
 * pages      n_pages page hashes, in prefix order.
 * pool_pages optional, one entry per pool: NULL entry (or NULL array) =
 *            check every page for that pool; else a flag per page, nonzero
 *            = check it (a page not checked counts as absent; a pool whose
 *            entry has no flag set does not constrain the result).
 * prefix_out [out] the largest p restorable on every rank (0: none); 0
 *            when the call fails (see the conventions at the top).
 * Side-effect free (stores may count hits). Lookups on one linker run one at
 * a time; their scratch grows to the largest lookup seen and is reused.
 * Ranks: once the arguments are valid, every call takes part in the
 * all-reduce exactly once, also when this rank's store query fails (it then
 * offers only the empty prefix), so other ranks never wait for it.
 * Errors: KVL_EINVAL (NULL, or pool_pages asking for no page), KVL_ERANGE
 * (n_pages > max_request_pages; returned before the all-reduce), KVL_EIO
 * (store down, or failing any key asked: a store that cannot answer is not
 * a miss), KVL_ENOMEM, or the all-reduce's error. */
KVL_API int kvl_linker_lookup(kvl_linker *lk, const kvl_hash *pages,
                              size_t n_pages,
                              const uint8_t *const *pool_pages,
                              size_t *prefix_out);

/* This rank's restorable set of `pages` (see kvl_restorable_set), without
 * the all-reduce, for engines that intersect the sets of their ranks
 * themselves (SGLang all-reduces them with MIN over its process groups).
 * The linker's allreduce option is not called.
 *
 * pages, pool_pages  as kvl_linker_lookup.
 * bits       [out] n_words words (at least kvl_bitmap_words(n_pages)): bit
 *            p set when a prefix of p pages is restorable here; the words
 *            beyond kvl_bitmap_words(n_pages) are left alone. On any
 *            failure but a NULL or short `bits` it holds the empty prefix
 *            only (bit 0), so a caller that intersects it anyway never
 *            restores through a failed store.
 * Errors: KVL_EINVAL (NULL lk, bits or pages, or pool_pages asking for no
 * page), KVL_ERANGE (n_words too small: nothing written; n_pages >
 * max_request_pages), KVL_EIO (store down or failing any key), KVL_ENOMEM.
 * Thread-safe (lookups on one linker run one at a time). */
KVL_API int kvl_linker_lookup_set(kvl_linker *lk, const kvl_hash *pages,
                                  size_t n_pages,
                                  const uint8_t *const *pool_pages,
                                  uint64_t *bits, size_t n_words);

/* Queues a load of n_pages pages for request `id`.
 * slots   one entry per pool: NULL = nothing of that pool; else n_pages
 *         destination slots, KVL_NO_SLOT for a page not loaded in that pool
 *         (e.g. only the trailing window of a sliding-window pool).
 * No two pages of one batch may go to one slot of a pool: a load naming a
 * slot twice, or a slot that a load already queued for the same batch
 * writes, is refused whole (the message names the slot, the pool and both
 * pages); a slot is free again once its batch started or its load was
 * canceled.
 * Errors: KVL_EEXIST (a load with this id is queued or running),
 * KVL_ERANGE (a slot beyond its pool), KVL_EINVAL (NULL arguments, no pages,
 * nothing to load, a slot taken twice), KVL_EFULL (max_requests reached),
 * KVL_ECLOSED. */
KVL_API int kvl_linker_load(kvl_linker *lk, uint64_t id, const kvl_hash *pages,
                            size_t n_pages, const size_t *const *slots);

/* Withdraws the queued load `id` if its batch has not started: it then
 * completes as KVL_ECANCELED with 0 valid pages. [out] canceled_out: 1 if
 * withdrawn, 0 if it had already started (it will complete normally).
 * Errors: KVL_ENOTFOUND (no load with this id is queued or running). */
KVL_API int kvl_linker_cancel(kvl_linker *lk, uint64_t id, int *canceled_out);

/* Takes every queued load as one batch and hands it to the loader; [out]
 * batch_out its id (an empty batch is valid: all its layers are complete).
 * Errors: KVL_EFULL (KVL_LINKER_MAX_BATCHES batches not yet finished),
 * KVL_ECLOSED. */
#define KVL_LINKER_MAX_BATCHES 64
KVL_API int kvl_linker_start(kvl_linker *lk, uint64_t *batch_out);

/* kvl_linker_start, ordered after the engine's kernels that still read the
 * destination slots (slots freed and reused in the same step, overlap
 * scheduling): no byte of the batch is written before CUDA event `event`
 * (a cudaEvent_t) completes. The event is taken as recorded when the call
 * is made (as cudaStreamWaitEvent does): the engine may record it again
 * right after, and need not keep it alive. kvlink's copies wait for it on
 * the GPU; host slots of the same linker are written only once the loader
 * has seen it complete. NULL: kvl_linker_start.
 * Errors: KVL_ENOTSUP (an event, but no pool lives on a CUDA device or
 * kvlink was built without CUDA), KVL_EIO (CUDA refused the wait; nothing
 * started), and kvl_linker_start's. Thread-safe. */
KVL_API int kvl_linker_start_after(kvl_linker *lk, void *event,
                                   uint64_t *batch_out);

/* Number of model layers a batch has: 1 + the highest layer of any pool
 * (0 for NULL). */
KVL_API uint32_t kvl_linker_layers(const kvl_linker *lk);

/* Blocks until layer `layer` of batch `batch` is complete (also when the
 * batch failed: the layer has then landed for every page that loads, so
 * the batch's other requests may be read) or timeout_ms passes (0: do not
 * block; UINT32_MAX: no limit). Returns 0 when that layer and every
 * earlier one loaded without error; else the first error of the batch (a
 * failure at layer l fails every later wait of the batch:
 * KVL_EIO, KVL_ECORRUPT, KVL_ENOTFOUND for a page evicted since lookup,
 * KVL_ECANCELED at shutdown), KVL_ETIMEDOUT, KVL_ERANGE (layer beyond
 * kvl_linker_layers), KVL_ENOTFOUND (unknown or too old batch). On a
 * failure of the batch, kvl_linker_errmsg names the batch and the layer
 * and gives what the loader was told of it (the store's or CUDA's
 * message). Which requests failed, and how many of their pages are still
 * valid, comes from the completions. */
KVL_API int kvl_linker_wait(kvl_linker *lk, uint64_t batch, uint32_t layer,
                            uint32_t timeout_ms);

/* Makes CUDA stream `stream` (a cudaStream_t; NULL: the legacy default
 * stream) wait on the GPU until layer `layer` of batch `batch` is in its
 * destination slots. Returns once the wait is enqueued: the CPU blocks at
 * most until the loader has issued that layer's copies, never for the
 * copies themselves. A layer whose load failed is still waited for (its
 * slots hold what was copied); the failure is reported as by
 * kvl_linker_wait: the return value (KVL_EIO, …) when it is known at
 * enqueue time, and always through the completions, which say which
 * requests' pages are valid. A linker without GPU pools (or a build without
 * CUDA) has nothing to copy on a stream: this then waits on the CPU exactly
 * as kvl_linker_wait. Errors as kvl_linker_wait, plus KVL_EIO (a CUDA call
 * failed: the message says which). */
KVL_API int kvl_linker_wait_stream(kvl_linker *lk, uint64_t batch,
                                   uint32_t layer, void *stream,
                                   uint32_t timeout_ms);

/* Queues an offload: copies every layer of pages[i] from slots[pool][i]
 * into store objects in the background. Pages already stored are skipped
 * and count as stored; a pool replicated across tensor ranks is written by
 * tp rank 0 only (other ranks count it as stored). The slots must not change
 * until the request completes.
 * event   optional CUDA event (a cudaEvent_t) recorded by the engine after
 *         the kernels that wrote those pages: the copies out of GPU slots
 *         start only after it has completed; it must stay valid until the
 *         request completes. NULL: the pages are written already.
 * Errors: KVL_EEXIST (an offload with this id is queued or running),
 * KVL_EFULL (max_requests reached: nothing queued; try after polling),
 * KVL_ENOTSUP (an event, but no pool lives on a CUDA device), KVL_ERANGE,
 * KVL_EINVAL (also two different pages from one slot of a pool),
 * KVL_ECLOSED. */
KVL_API int kvl_linker_offload(kvl_linker *lk, uint64_t id,
                               const kvl_hash *pages, size_t n_pages,
                               const size_t *const *slots, void *event);

/* Blocks until every offload queued before the call has completed, or
 * timeout_ms passes (KVL_ETIMEDOUT). */
KVL_API int kvl_linker_flush(kvl_linker *lk, uint32_t timeout_ms);

typedef enum kvl_req_kind { KVL_REQ_LOAD = 1, KVL_REQ_OFFLOAD = 2 } kvl_req_kind;

/* The outcome of one request. */
typedef struct kvl_completion {
	uint64_t id;
	kvl_req_kind kind;
	int status;         /* 0, or the first error (KVL_ECANCELED, …) */
	size_t valid_pages; /* leading pages fully loaded / stored */
	size_t n_pages;     /* pages in the request */
} kvl_completion;

/* Moves up to cap completions into [out] out, oldest first; [out] n_out
 * their number. With timeout_ms > 0 waits that long for at least one.
 * Never reports a request twice. */
KVL_API int kvl_linker_poll(kvl_linker *lk, kvl_completion *out, size_t cap,
                            size_t *n_out, uint32_t timeout_ms);

/* ===================================================================== hashes */

#define KVL_HASH_BYTES 32
#define KVL_HASH_HEX_LEN 64 /* printed length, without the NUL */

/* A 32-byte page hash. Equal hash means equal page and equal prefix. */
struct kvl_hash {
	uint8_t bytes[KVL_HASH_BYTES];
};

/* Hashes every whole page of `tokens`:
 *   h_i = SHA-256(h_{i-1} ‖ the page's tokens as u32 little-endian)
 * where h_{-1} is `prior` (NULL: nothing, the chain starts bare). A page that
 * holds a token id above 2^32-1 is instead hashed as
 *   SHA-256(h_{i-1} ‖ 0xFF ‖ the page's tokens as u64 little-endian).
 * For token ids below 2^32 this is byte-compatible with SGLang's HiCache
 * page hashes (SGLang cannot hash larger ids; the 0xFF form is kvlink's own).
 * Trailing tokens that do not fill a page are ignored.
 *
 * tokens      n_tokens ids (may be NULL when n_tokens is 0).
 * page_size   tokens per page, > 0.
 * prior       optional hash that precedes page 0: a namespace seed
 *             (kvl_namespace_seed) keeps tenants' pages apart.
 * out         [out] room for out_cap hashes.
 * n_out       [out] number of pages hashed: n_tokens / page_size.
 *
 * Errors: KVL_EINVAL (page_size 0, NULL tokens with n_tokens > 0, NULL out or
 * n_out), KVL_ERANGE (out_cap < n_tokens / page_size; nothing written),
 * KVL_ENOMEM (libcrypto failed; the contents of out are then unspecified).
 * Thread-safe. Allocates nothing itself (libcrypto allocates a digest
 * context per call, and on OpenSSL 3.0 one per page). */
KVL_API int kvl_hash_pages(const uint64_t *tokens, size_t n_tokens,
                           size_t page_size, const kvl_hash *prior,
                           kvl_hash *out, size_t out_cap, size_t *n_out);

/* Derives a namespace seed from salt strings (tenant id, cache salt, …), for
 * use as kvl_hash_pages' prior, so that tenants never share pages:
 *   SHA-256("kvlink-namespace-v1" ‖ for each salt: u64 LE byte length ‖ bytes)
 * Different salt lists (order included) give different seeds.
 * Errors: KVL_EINVAL (n_salts 0, a NULL salt, NULL out). Thread-safe. */
KVL_API int kvl_namespace_seed(const char *const *salts, size_t n_salts,
                               kvl_hash *out);

/* kvl_hash_pages for SGLang's EAGLE bigram keys: the pages of the n_tokens
 * - 1 overlapping pairs (t_j, t_j+1), page_size pairs to a page, each pair
 * hashed as two u32 LE words (t_j, then t_j+1), so the token at a page
 * boundary ends one page and starts the next:
 *   h_i = SHA-256(h_{i-1} ‖ t_s, t_s+1, t_s+1, t_s+2, … t_s+P-1, t_s+P)
 * with s = i * page_size. Hashing the tail from token d * page_size on
 * with page d - 1's hash as the prior continues the chain. A page with a
 * token id above 2^32-1 takes kvl_hash_pages' u64 form (SGLang refuses
 * such ids).
 * n_out [out] whole pages: (n_tokens - 1) / page_size, 0 for n_tokens < 2.
 * Errors and thread-safety: kvl_hash_pages'. */
KVL_API int kvl_hash_bigram_pages(const uint64_t *tokens, size_t n_tokens,
                                  size_t page_size, const kvl_hash *prior,
                                  kvl_hash *out, size_t out_cap,
                                  size_t *n_out);

/* SGLang's storage namespace seed (its HiCache and unified-cache page keys
 * since SGLang PR #38577), for use as page 0's prior so that kvlink names a
 * request's pages exactly as SGLang does:
 *   SHA-256("sglang-cache-namespace-v1" ‖ part(extra_key) ‖ part(cache_salt))
 * where part(NULL) is the byte 0x00 and part(s) is 0x01 ‖ strlen(s) as u64
 * LE ‖ the bytes of s (UTF-8), so an absent part differs from an empty one.
 * extra_key is SGLang's request extra key (a LoRA adapter's id appended);
 * cache_salt its cache salt. Both NULL: no namespace; [out] seeded_out is
 * then 0 and `out` is not written (hash the bare chain, prior NULL). Else
 * seeded_out is 1 and `out` holds the seed.
 * Errors: KVL_EINVAL (NULL out or seeded_out), KVL_ENOMEM. Thread-safe. */
KVL_API int kvl_sglang_namespace_seed(const char *extra_key,
                                      const char *cache_salt, kvl_hash *out,
                                      int *seeded_out);

/* Writes the 64 lowercase hex characters of `h` and a NUL into [out] `hex`
 * (len bytes: at least KVL_HASH_HEX_LEN + 1). Errors: KVL_EINVAL (NULL),
 * KVL_ERANGE (len too small; nothing written). Thread-safe. */
KVL_API int kvl_hash_to_hex(const kvl_hash *h, char *hex, size_t len);

/* Parses exactly 64 hex characters (either case) into [out] `h`.
 * Errors: KVL_EINVAL (NULL), KVL_EPARSE (wrong length or a non-hex character).
 * Thread-safe. */
KVL_API int kvl_hash_from_hex(const char *hex, kvl_hash *h);

/* ==================================================================== layouts */

/* A layout describes the engine's page pools: for each pool and layer, where
 * each component's pages live. Build it with kvl_layout_create, add pools and
 * buffers, then kvl_layout_finalize; after that it is immutable and may be
 * read by any number of threads, and the memory it describes must stay valid
 * until every linker that uses it is closed. How a page of a pool becomes
 * a store object is under "object format" in the advanced part. */

typedef enum kvl_mem_kind {
	KVL_MEM_HOST = 0, /* ordinary (or pinned) host memory */
	KVL_MEM_CUDA = 1  /* memory of CUDA device `device` */
} kvl_mem_kind;

typedef enum kvl_hit_policy {
	/* Every page of the prefix must be present (full attention). */
	KVL_HIT_ALL_PAGES = 0,
	/* Only the last `window` pages before the stop point must be present
	 * (sliding-window attention, recurrent state). */
	KVL_HIT_TRAILING_PAGES = 1
} kvl_hit_policy;

/* One rank's place in the model's parallelism. Sizes are >= 1 and each rank
 * is < its size. The all-zero struct is not valid; use KVL_SHARD_SINGLE. */
typedef struct kvl_shard {
	uint32_t tp_rank, tp_size; /* tensor parallel */
	uint32_t cp_rank, cp_size; /* context parallel */
	uint32_t pp_rank, pp_size; /* pipeline parallel */
} kvl_shard;
#define KVL_SHARD_SINGLE ((kvl_shard){0, 1, 0, 1, 0, 1})

/* Pool flag: the pool's pages are identical on every tensor-parallel rank (an
 * MLA latent). Its keys leave out "tp<t>_" and only tp rank 0 writes them. */
#define KVL_POOL_REPLICATED_TP 0x1u

/* Where one component of one layer of a pool keeps its pages: page slot s
 * lives at base + s * page_stride and is page_bytes long. The whole range,
 * from base to the end of the last slot, must end below 2^64 (not wrap past
 * the end of the address space). */
typedef struct kvl_buffer {
	void *base;          /* multiple of KVL_LAYOUT_ALIGN */
	size_t page_stride;  /* bytes between slots; multiple of KVL_LAYOUT_ALIGN */
	size_t page_bytes;   /* bytes of one slot, > 0, <= page_stride */
	size_t num_pages;    /* number of slots, > 0; equal for a pool's buffers */
	kvl_mem_kind mem;    /* where the memory is */
	int device;          /* CUDA device ordinal when mem is KVL_MEM_CUDA */
} kvl_buffer;
#define KVL_LAYOUT_ALIGN 8

/* A piece of memory: an address and a length. */
typedef struct kvl_iov {
	void *addr;
	size_t len;
} kvl_iov;

/* Limits on names. */
#define KVL_NAME_MAX 64  /* model tag, pool and component names, in bytes */
#define KVL_KEY_MAX 320  /* longest key, with its NUL */
#define KVL_ALL_LAYERS UINT32_MAX
/* The highest model layer number a buffer may have. Layers may be sparse
 * (hybrid models number only some layers of a pool); a layout indexes each
 * pool's layers by number, 4 bytes per number up to its highest. */
#define KVL_MAX_LAYER 1048575

/* Starts a new layout for model `model_tag` with `page_size` tokens per page
 * for the rank `shard` (NULL: a single rank).
 *
 * model_tag  1..KVL_NAME_MAX characters from [A-Za-z0-9._+/-]; it should
 *            name the model and the KV dtype, e.g. "llama3-8b/bf16".
 * out        [out] the new layout; free it with kvl_layout_free.
 * errbuf     optional buffer of errlen bytes that receives the reason when
 *            creation fails.
 * Errors: KVL_EINVAL (bad tag, page_size 0, bad shard, NULL out), KVL_ENOMEM.
 * Thread-safe. */
KVL_API int kvl_layout_create(const char *model_tag, uint32_t page_size,
                              const kvl_shard *shard, kvl_layout **out,
                              char *errbuf, size_t errlen);

/* Adds a pool. name: 1..KVL_NAME_MAX characters from [A-Za-z0-9._-], unique in
 * the layout. window: pages that must be present for KVL_HIT_TRAILING_PAGES
 * (>= 1); must be 0 for KVL_HIT_ALL_PAGES. flags: 0 or KVL_POOL_REPLICATED_TP.
 * pool_out [out] the pool's id (0, 1, … in order of addition).
 * Errors: KVL_EINVAL (bad name, unknown hit policy, bad window, unknown flag),
 * KVL_EEXIST (name taken), KVL_ESTATE (layout finalized), KVL_ENOMEM.
 * Not thread-safe: build a layout from one thread. */
KVL_API int kvl_layout_add_pool(kvl_layout *layout, const char *name,
                                kvl_hit_policy policy, uint32_t window,
                                uint32_t flags, int *pool_out);

/* Declares how pool `pool` keeps its elements, so that layouts that agree
 * in sizes but not in format never share objects, whatever their model tags
 * say: `dtype` names the element type (e.g. "bfloat16", "float8_e4m3fn")
 * and `memory_layout` the order of a page's bytes inside each component
 * (e.g. "NHD" or "HND"; NULL or "" when there is one order only). Both
 * join the pool's fingerprint and so its keys. A pool whose format is not
 * declared keeps the fingerprint (and keys) it had before this call
 * existed. Calling it again replaces the format.
 * dtype: 1..KVL_NAME_MAX characters from [A-Za-z0-9._-]; memory_layout: up
 * to KVL_NAME_MAX of them.
 * Errors: KVL_EINVAL (bad dtype or memory_layout), KVL_ENOTFOUND (unknown
 * pool id), KVL_ESTATE (layout finalized). Not thread-safe. */
KVL_API int kvl_layout_pool_format(kvl_layout *layout, int pool,
                                   const char *dtype,
                                   const char *memory_layout);

/* Describes where component `component` of model layer `layer` of pool `pool`
 * keeps its pages. A pool's layers may be sparse (e.g. only every fourth layer
 * has sliding-window state). `buf` is copied.
 * Errors: KVL_EINVAL (NULL or zero sizes, misalignment, page_bytes >
 * page_stride, a num_pages that differs from the pool's other buffers, bad
 * component name, layer above KVL_MAX_LAYER, an address range that wraps
 * past 2^64), KVL_ENOTFOUND (unknown pool id), KVL_EEXIST (that
 * component and layer already described), KVL_ESTATE (layout finalized),
 * KVL_ENOMEM. Not thread-safe. */
KVL_API int kvl_layout_add_buffer(kvl_layout *layout, int pool,
                                  const char *component, uint32_t layer,
                                  const kvl_buffer *buf);

/* Describes component `component` of model layer `layer` of pool `pool` by
 * its size only: page_bytes bytes per page, no memory. A layout of shapes
 * has the fingerprints and keys of a layout of the same sizes with memory,
 * whatever that one's addresses and slot counts, so a process that has none
 * of the engine's buffers (a scheduler, a router) can name pages and ask
 * what exists (kvl_layout_key, kvl_layout_shard_key, kvl_prober_open). A
 * linker, kvl_pages_put, kvl_pages_get and kvl_layout_page_pieces refuse
 * it (KVL_EINVAL). A layout is all shapes or all memory (finalize checks).
 * Errors: kvl_layout_add_buffer's (KVL_EINVAL for page_bytes 0). Not
 * thread-safe. */
KVL_API int kvl_layout_add_shape(kvl_layout *layout, int pool,
                                 const char *component, uint32_t layer,
                                 size_t page_bytes);

/* Checks the whole description and freezes it: every pool has buffers, no two
 * buffers overlap in memory, and each layer of a pool describes the same
 * components (a missing component at a layer is an error). Computes object
 * sizes, layer ranges and fingerprints.
 * Errors: KVL_EINVAL (no pools, a pool without buffers, overlapping buffers,
 * a layer missing a component), KVL_ESTATE (already finalized). On failure the
 * layout stays unfinalized and may be corrected or freed. Not thread-safe. */
KVL_API int kvl_layout_finalize(kvl_layout *layout);

/* Frees a layout. NULL is a no-op. Must not be in use by a linker. */
KVL_API void kvl_layout_free(kvl_layout *layout);

/* The message of the most recent failure on this layout (rules as
 * kvl_linker_errmsg; "layout is NULL" for NULL). */
KVL_API const char *kvl_layout_errmsg(const kvl_layout *layout);

/* The following queries need a finalized layout (else KVL_ESTATE), are
 * thread-safe and allocate nothing. Unknown pool ids give KVL_ENOTFOUND. */

/* Number of pools; the pool id of `name` (KVL_ENOTFOUND if none); a pool's
 * name, hit policy and window. */
KVL_API int kvl_layout_pool_count(const kvl_layout *layout, int *count_out);
KVL_API int kvl_layout_pool_id(const kvl_layout *layout, const char *name,
                               int *pool_out);
KVL_API int kvl_layout_pool_info(const kvl_layout *layout, int pool,
                                 const char **name_out,
                                 kvl_hit_policy *policy_out,
                                 uint32_t *window_out, uint32_t *flags_out);

/* page_size tokens per page (0 for NULL), and this layout's shard
 * (KVL_SHARD_SINGLE for NULL). */
KVL_API uint32_t kvl_layout_page_size(const kvl_layout *layout);
KVL_API kvl_shard kvl_layout_shard(const kvl_layout *layout);

/* The model layers pool `pool` has, ascending, into [out] `layers` (room for
 * cap) and their count into [needed] n_out. KVL_ERANGE if cap is too small
 * (n_out still says how many are needed). */
KVL_API int kvl_layout_pool_layers(const kvl_layout *layout, int pool,
                                   uint32_t *layers, size_t cap, size_t *n_out);

/* Number of page slots of the pool's buffers. */
KVL_API int kvl_layout_pool_pages(const kvl_layout *layout, int pool,
                                  size_t *pages_out);

/* ===================================================================== stores */

/* A store holds objects under string keys: immutable once stored, never
 * visible half-written, and possibly evicted at any time (a cache). Opened by
 * URI:
 *   mem:[?capacity=SIZE][&max_objects=N][&policy=adaptive|slru|lru]
 *       [&verify=0|1]
 *       [&pinned=0|1][&prealloc=0|1]     embedded, in this process (default)
 *       capacity: bytes (suffixes K, M, G, T, KiB, MiB, GiB, TiB; default 8GiB).
 *       max_objects: at most N objects, exactly (default: no limit).
 *       policy: eviction: adaptive (default; segmented LRU whose
 *       protected share follows the workload, pages in prefix order),
 *       slru (segmented LRU with a ghost list, 90 % protected) or lru
 *       (exact LRU).
 *       verify: check payload checksums on every read (default 0: the
 *       embedded store's own memory is trusted; headers are always checked;
 *       objects written to a trusted store carry no payload checksums).
 *       pinned: keep objects in pinned, mapped memory for GPU copies
 *       (default 1 in builds with CUDA when a device is usable).
 *       prealloc: pin the whole capacity at open (pinned mode).
 *       Without a usable CUDA device nothing is pinned: pinned=1 and
 *       prealloc=1 then open a store in ordinary memory (host copies
 *       need no pinning) and say so in a note (see kvl_store_open).
 *   redis://[user:password@]host:port[,host:port…][/db][?options]
 *       Redis, standalone or Cluster (found out at open; builds with
 *       kvl_has_feature("redis")). Options: connect_timeout_ms (1000),
 *       timeout_ms (2000: a node that moves no byte this long fails its
 *       keys with KVL_EIO), ttl seconds (0: none), db (standalone), inflight
 *       bytes per connection (2MiB), replicas=0|1 (read from replicas),
 *       pool (idle connections per node, 4). A server down at open, or a
 *       refused password, is KVL_EIO at open. See docs/redis.md.
 *   rediss://[user:password@]host:port[,host:port…][/db][?options]
 *       The same over TLS (kvl_has_feature("tls")), every node's
 *       connections verified against the CA and the server name. More
 *       options: tls_ca (PEM CA file; default: the system's CAs), tls_cert
 *       and tls_key (a client certificate and its key, PEM, unencrypted;
 *       the key may be in the cert's file), tls_server_name (the name sent
 *       and verified; default: each node's host). A file that cannot be
 *       loaded is KVL_EINVAL naming it; a certificate that fails
 *       verification, or a server without TLS, is KVL_EIO at open
 *       ("certificate verify failed: …"). See docs/redis.md.
 *   mooncake://MASTER_HOST[:PORT][?options]
 *       Mooncake Store (master port 50051 by default), through
 *       libmooncake_store.so loaded at open: KVL_ENOTSUP naming what is
 *       missing without it. Options: lib (the library's path; default
 *       $KVL_MOONCAKE_LIB, else the loader's search path), local (this
 *       client's address, 127.0.0.1), metadata (P2PHANDSHAKE), protocol
 *       (tcp), device (""), segment (memory this client gives the pool, 0),
 *       buffer (Mooncake's local buffer, 64MiB), staging (kvlink's
 *       registered staging, 256MiB: an object must fit half of it unless
 *       it moves in place from memory given to kvl_store_register),
 *       replicas (1), api (auto: byte ranges through kvlink's shim when
 *       the library carries it, else whole objects; ranges: the shim or
 *       KVL_ENOTSUP; whole: Mooncake's C API alone), groups (1: a page's
 *       objects of every pool share a Mooncake group; ranges only),
 *       layer_read_min (64KiB). On ranges the linker reads layer by layer
 *       the pools whose layers are at least layer_read_min per page, and
 *       the others, as every pool on whole objects, with their first
 *       layer. A master down at open is KVL_EIO.
 *       See docs/mooncake.md.
 *   file:/path/to/dir[?capacity=SIZE][&max_objects=N][&io=uring|pread]
 *       [&direct=0|1][&check_threads=N]
 *       Object files in an existing local directory, shared by every
 *       process of the node that opens it and kept across restarts.
 *       capacity: bytes of objects, each costing its length plus 4 KiB
 *       (required when the directory holds no store yet; later opens
 *       keep it, or change it for every process). max_objects: the
 *       index's size, fixed when it is made (default capacity / 16 KiB,
 *       1024 to 4 M). io: reads through io_uring (default, where the
 *       build and the kernel allow it) or preads. direct: O_DIRECT I/O
 *       (default 1; buffered where the file system refuses it).
 *       check_threads: threads that check what gets read, 0 to 4
 *       (default one fewer than the cores, 0 with two or fewer). Exact LRU
 *       across processes. A missing directory is KVL_EIO, a path that is
 *       not one KVL_EINVAL. A handle is its opener's: a forked child
 *       opens its own. See docs/stores.md.
 *   tier:[?options|]URI|URI[|URI...]    2 to 8 stores, top first
 *       Reads see the union (a get reads from the highest tier that has
 *       the key; a failing tier falls through to the next); a lower
 *       tier's hit is promoted into the top tier in the background; puts
 *       go to the top tier (falling back down when it fails) or, with
 *       write=through, to every tier; what an embedded tier evicts is put
 *       into the tiers below; remove removes from all. Options (before
 *       the first '|'): write=top|through, promote=0|1, promote_queue=N,
 *       promote_max=SIZE, spill=0|1, and breaker, tenant, secret_file for
 *       the whole. Each tier's URI keeps its own '?' options. The stats
 *       renders add per-tier figures. See docs/stores.md.
 *   fault+<URI>                         fault injection around any store
 *       (options prefixed fault.; see docs/stores.md)
 * Every store takes breaker=N (its circuit breaker: after N calls in a row
 * failed with KVL_EIO or KVL_ETIMEDOUT, calls fail at once with KVL_EIO
 * until a background probe reaches the store; default 3 on redis:// and
 * mooncake://, 0 (off) elsewhere) and breaker_ms (the first back-off, 100).
 * Every scheme takes secret_file=PATH: a file of 16 to 4096 secret bytes
 * (one trailing newline is not part of it), read once at open. Without the
 * option the file named by the environment variable KVL_SECRET_FILE is
 * used (when set and not empty); the option wins. With a secret, every
 * object written is sealed with MACs (one-time Poly1305 keys derived from
 * the secret and a random per-object nonce) and every read checks them: an object written
 * without this secret, with another one, or rewritten by whoever can write
 * the store but lacks the secret, reads as KVL_ECORRUPT, never as valid.
 * A store without a secret refuses keyed objects the same way. The trusted
 * embedded store (mem: without verify=1) reads the file but keeps using no
 * sums: its objects never leave the process. See docs/reliability.md.
 * Stores are thread-safe: any number of threads may call any function on one
 * store at once, except kvl_store_close. */

/* Per-key results of kvl_store_put. */
#define KVL_PUT_STORED 0  /* newly stored */
#define KVL_PUT_PRESENT 1 /* already there (not an error) */

/* Counters of a store. A remote store that cannot tell a count (a node is
 * unreachable) reports UINT64_MAX for it; the stats render writes such a
 * count as NaN (Prometheus) or null (JSON). */
typedef struct kvl_store_stats {
	uint64_t objects;   /* objects held now */
	uint64_t bytes;     /* bytes held now (as the backend accounts them) */
	uint64_t capacity;  /* byte capacity (0 when the backend has none) */
	uint64_t hits;      /* keys found by exists or get */
	uint64_t misses;    /* keys not found by exists or get */
	uint64_t puts;      /* objects newly stored */
	uint64_t evictions; /* objects dropped to make room */
	uint64_t errors;    /* per-key failures (I/O, full, range) */
	/* The circuit breaker of a remote store (breaker= option): */
	uint64_t breaker_opens;   /* times it opened */
	uint64_t breaker_refused; /* calls it failed at once, while open */
	uint64_t breaker_open;    /* 1 while it is open, else 0 */
} kvl_store_stats;

/* Opens a store from `uri` (NULL or "" means "mem:").
 * An option the store accepts but cannot honour here (mem:'s pinned=1 or
 * prealloc=1 without a usable CUDA device) does not fail the open: its note
 * is then kvl_store_errmsg's message until a call on the store fails, and
 * both stats renders carry it for the store's life (a "# kvlink_store
 * note: …" comment line; a "note" member in JSON).
 * out     [out] the store; close it with kvl_store_close.
 * errbuf  optional buffer of errlen bytes for the reason of a failure.
 * Errors: KVL_EPARSE (malformed URI or option), KVL_ENOTSUP (unknown scheme
 * or a backend this build lacks), KVL_EIO (backend unreachable; a secret
 * file that cannot be opened or read), KVL_EINVAL (a secret file that is
 * not a regular file, is empty, too short or too long: the message names
 * the path, never the secret), KVL_ENOMEM. Thread-safe. */
KVL_API int kvl_store_open(const char *uri, kvl_store **out, char *errbuf,
                           size_t errlen);

/* Writes `uri` as it may be shown (printed, logged, put in a repr) into
 * out (len bytes, always NUL-terminated when len > 0): the credentials'
 * password becomes "***" ("redis://user:***@host", "redis://:***@host";
 * credentials without ':' become "***@" whole), and so does the value of
 * any option named password, pass, passwd or ending in _password. Every
 * other byte is kept. kvlink's own messages show URIs this way. Returns 0;
 * KVL_ERANGE when out is too small (the result is cut short); KVL_EINVAL
 * when uri or out is NULL or len is 0 (out, when it has room, holds "").
 * Thread-safe; allocates nothing. */
KVL_API int kvl_uri_redact(const char *uri, char *out, size_t len);

/* The name of the embedded store's eviction policy number i ("adaptive",
 * the default, is 0; "slru" 1; "lru" 2), or NULL past the last: what
 * mem:'s policy=
 * option takes, for tools that list or sweep them. Static strings.
 * Thread-safe. */
KVL_API const char *kvl_mem_policy_name(size_t i);

/* Parses a byte size as store options take them: decimal digits and an
 * optional suffix K, M, G, T or KiB, MiB, GiB, TiB (powers of 1024; either
 * case), below 2^64, into [out] *out. Errors: KVL_EPARSE (NULL, empty, a
 * bad suffix, too large). Thread-safe. */
KVL_API int kvl_parse_size(const char *s, uint64_t *out);

/* Closes the store and frees everything it holds. No call on it may be in
 * progress or follow. NULL is a no-op. */
KVL_API void kvl_store_close(kvl_store *store);

/* The message of the most recent failure on this store (rules as
 * kvl_linker_errmsg; "store is NULL" for NULL). */
KVL_API const char *kvl_store_errmsg(const kvl_store *store);

/* Announces memory that transfers will touch (engine pools, staging), so
 * that backends that need it can register it (pinning, RDMA). Backends that
 * need nothing accept it. Errors: KVL_EINVAL (NULL, zero length, or a range
 * whose end addr + len is not below 2^64). */
KVL_API int kvl_store_register(kvl_store *store, void *addr, size_t len,
                               kvl_mem_kind mem);

/* [out] a snapshot of the store's counters. */
KVL_API int kvl_store_stats_get(kvl_store *store, kvl_store_stats *out);

/* ====================================================================== stats */

typedef enum kvl_stats_format {
	KVL_STATS_PROMETHEUS = 0, /* Prometheus text exposition format */
	KVL_STATS_JSON = 1        /* one JSON object */
} kvl_stats_format;

/* Renders the linker's counters (lookups, hit pages, loaded and offloaded
 * pages and bytes, failures, cancellations), its latency histograms (lookup,
 * load batch, offload; buckets of 2^i microseconds) and its store's stats
 * into [out] buf (len bytes, NUL-terminated). [needed] (optional) gets the
 * length the text needs, without the NUL. Counters are read one by one
 * while the linker runs: each is exact, the set is not one instant.
 * Errors: KVL_EINVAL (NULL linker, unknown format), KVL_ERANGE (len too
 * small: needed says how much). Thread-safe. */
KVL_API int kvl_linker_stats_render(kvl_linker *lk, kvl_stats_format format,
                                    char *buf, size_t len, size_t *needed);

/* The same for a store alone (objects, bytes, capacity, hits, misses, puts,
 * evictions, errors). */
KVL_API int kvl_store_stats_render(kvl_store *store, kvl_stats_format format,
                                   char *buf, size_t len, size_t *needed);

/* ==================================================================== logging */

/* What kvlink says on its own: a store whose circuit breaker opens or
 * closes, a Redis node that goes down or comes back, an option a store
 * accepted but cannot honour. Failures of calls are never logged (their
 * return codes and *_errmsg say them); repeated messages of one kind are
 * rate-limited (a few per 10 s, then one saying how many were dropped). */
typedef enum kvl_log_level {
	KVL_LOG_OFF = -1,    /* as a threshold: nothing */
	KVL_LOG_ERROR = 0,
	KVL_LOG_WARNING = 1, /* the default threshold */
	KVL_LOG_INFO = 2,
	KVL_LOG_DEBUG = 3
} kvl_log_level;

/* A log sink: `component` names the part ("store", "redis", ...),
 * `message` has no trailing newline; both are valid during the call only.
 * Called from whichever kvlink thread logs (the caller's, the loader's, a
 * prober's), one call at a time; it must return soon and must not call
 * into kvlink (a kvlink lock may be held). */
typedef void (*kvl_log_fn)(void *user, kvl_log_level level,
                           const char *component, const char *message);

/* Sends messages at `level` or more severe (KVL_LOG_OFF: none) to fn(user,
 * ...), or with fn NULL to standard error as "kvlink: LEVEL: [component]
 * message". Until the first call, the sink is standard error and the
 * threshold comes from the environment variable KVL_LOG_LEVEL (off, error,
 * warning, info or debug; default warning; another value is itself
 * reported, once). Thread-safe; takes effect for messages not yet begun.
 * Errors: KVL_EINVAL (level outside KVL_LOG_OFF..KVL_LOG_DEBUG; nothing
 * changes). */
KVL_API int kvl_log_set(kvl_log_fn fn, void *user, int level);

/* The threshold in effect. Thread-safe. */
KVL_API int kvl_log_get_level(void);

/* =================================================================== advanced */

/* The building blocks the linker is made of, for tools, tests and engines
 * that need one piece without the rest. An engine that restores pages uses
 * the linker, which adds queues, layer-wise waits, ranks and GPU copies on
 * top of these. */

/* ------------------------------------------------------ store batch calls */

/* A byte range of a stored object and where to copy it. */
typedef struct kvl_range {
	uint64_t offset; /* in the object */
	void *addr;      /* destination */
	size_t len;
} kvl_range;

/* Checks which of n keys are present: [out] results[i] is 1 (present), 0
 * (absent) or a negative code for that key. Returns 0 when the call was
 * carried out (per-key results say the rest) or a negative code when nothing
 * was (e.g. KVL_EINVAL for NULL arrays, KVL_EIO for a store that is down). */
KVL_API int kvl_store_exists(kvl_store *store, const char *const *keys,
                             size_t n, int *results);

/* Reads byte ranges of n objects straight into caller memory. Key i has
 * n_ranges[i] consecutive entries of `ranges` (key 0 first). [out]
 * results[i] is 0 when every range of key i was read, or a negative code:
 * KVL_ENOTFOUND (absent: nothing of it was written), KVL_ERANGE (a range
 * beyond the object), KVL_EIO (also a remote store's timeout), KVL_EINVAL
 * (a malformed key, or a range whose addr is NULL with a length or whose
 * addr + len is not below 2^64; the other keys are still served). A key's
 * ranges are all read or the key fails. Returns as kvl_store_exists. The
 * embedded store allocates nothing here and an object being read is never
 * freed under the reader. */
KVL_API int kvl_store_get(kvl_store *store, const char *const *keys, size_t n,
                          const kvl_range *ranges, const size_t *n_ranges,
                          int *results);

/* Stores n objects if absent. Object i is the concatenation of n_pieces[i]
 * consecutive entries of `pieces`. [out] results[i] is KVL_PUT_STORED,
 * KVL_PUT_PRESENT, or a negative code: KVL_EFULL (no room: everything
 * evictable is in use), KVL_ERANGE (larger than the capacity), KVL_EIO,
 * KVL_EINVAL (a malformed key, or a piece as kvl_store_get's ranges).
 * Returns as kvl_store_exists. */
KVL_API int kvl_store_put(kvl_store *store, const char *const *keys, size_t n,
                          const kvl_iov *pieces, const size_t *n_pieces,
                          int *results);

/* Removes n keys (absent keys are fine). Results as kvl_store_exists: 1
 * removed, 0 was absent, <0 error. */
KVL_API int kvl_store_remove(kvl_store *store, const char *const *keys,
                             size_t n, int *results);

/* --------------------------------------------------------------- page I/O */

/* Synchronous, batched page I/O between a layout's slots and a store, on the
 * same page codec (object header, checksums, read check) as the linker,
 * usable directly by simple engines and tools. Each call handles n pages of
 * one pool; [out] results[i] is the page's outcome; failures name the page
 * in the store's message. They are thread-safe for a finalized layout and allocate
 * one scratch array per call (never per page).
 *
 * Integrity: every object starts with a header that carries a magic, a format
 * version, the pool fingerprint bound to the rank shard (so an object of
 * another shard never passes, even under this shard's key), the page hash,
 * the payload length and one checksum per layer (objects written to a
 * trusted store say they carry none); with a store secret the checksums are
 * MACs and the header carries its own (see kvl_store_open). kvl_pages_get
 * checks the header always, and the checksums of the layers it reads when
 * the store is not trusted (see the store's verify option). A page that fails a check is
 * not valid: its result is KVL_ECORRUPT (the slot may have been written;
 * treat it as garbage). */

/* results[i]: 1 present, 0 absent, <0 error. One batched store query. */
KVL_API int kvl_pages_exists(kvl_store *store, const kvl_layout *layout,
                            int pool, const kvl_hash *pages, size_t n,
                            int *results);

/* Copies slots[i] of `pool` (all layers) into the store as page pages[i],
 * unless present. results[i]: KVL_PUT_STORED, KVL_PUT_PRESENT or <0. */
KVL_API int kvl_pages_put(kvl_store *store, const kvl_layout *layout, int pool,
                          const kvl_hash *pages, const size_t *slots, size_t n,
                          int *results);

/* Reads page pages[i] of `pool` into slots[i]: one model layer, or every
 * layer with KVL_ALL_LAYERS. results[i]: 0 valid, KVL_ENOTFOUND (absent),
 * KVL_ECORRUPT (a check failed), KVL_EIO, KVL_ERANGE (slot out of range). */
KVL_API int kvl_pages_get(kvl_store *store, const kvl_layout *layout, int pool,
                          const kvl_hash *pages, const size_t *slots, size_t n,
                          uint32_t layer, int *results);

/* --------------------------------------------------------- object format */

/* Object format. A store object holds one page of one pool on one rank shard:
 * a header (kvl_layout_object_size says how long) followed by the payload,
 * layer-major: for each layer of the pool in ascending order, for each
 * component in the order first added to the pool, that component's
 * page_bytes.
 *
 * Key format (what kvl_layout_key writes), fields separated by ':':
 *   kvl1:<model_tag>:<pool fingerprint, 32 hex>:<page hash, 64 hex>:<pool>:<shard>
 * where <shard> is "tp<t>_cp<c>_pp<p>" with this layout's ranks, or
 * "cp<c>_pp<p>" for a pool replicated across tensor-parallel ranks. The pool
 * fingerprint covers the model tag, page size, the shard sizes (tp, cp, pp;
 * not the rank indices) and the pool's definition (name, hit policy, window,
 * replication, and every component's name, layers and bytes per page), so
 * engines with a different model, shape or parallelism never share keys while
 * adding a new pool leaves the other pools' keys unchanged. */

/* The queries below need a finalized layout (else KVL_ESTATE), are
 * thread-safe and allocate nothing. Unknown pool ids give KVL_ENOTFOUND. */

/* [out] total object size of one page of `pool` in the store (header +
 * payload), and [out] header_out the header's share of it (either may be
 * NULL). */
KVL_API int kvl_layout_object_size(const kvl_layout *layout, int pool,
                                   size_t *size_out, size_t *header_out);

/* [out] offset (inside the object, header included) and length of model layer
 * `layer` of `pool`. KVL_ENOTFOUND if the pool has no buffers at that layer. */
KVL_API int kvl_layout_layer_range(const kvl_layout *layout, int pool,
                                   uint32_t layer, size_t *offset_out,
                                   size_t *len_out);

/* The ordered (address, length) pieces of page slot `slot` of `pool` for one
 * model layer, or for every layer with KVL_ALL_LAYERS, in object payload
 * order. Writes up to cap pieces to [out] `pieces` and their number to
 * [needed] n_out. Errors: KVL_ERANGE (slot >= the pool's pages, or cap too
 * small: n_out then says how many are needed), KVL_ENOTFOUND (unknown pool,
 * or no buffers at that layer). */
KVL_API int kvl_layout_page_pieces(const kvl_layout *layout, int pool,
                                   size_t slot, uint32_t layer, kvl_iov *pieces,
                                   size_t cap, size_t *n_out);

/* [out] hex: 32 lowercase hex chars and a NUL (len bytes: at least 33): the
 * fingerprint of pool `pool`, or of the whole layout (all pools) when pool
 * is -1. Stable across processes, machines and kvlink versions of the same
 * key format. KVL_ERANGE when len is too small (nothing written). */
KVL_API int kvl_layout_fingerprint(const kvl_layout *layout, int pool,
                                   char *hex, size_t len);

/* Writes the store key of page `page` of `pool` for this layout's shard into
 * [out] buf (buflen bytes; KVL_KEY_MAX always suffices), NUL-terminated.
 * Errors: KVL_ERANGE (buflen too small), KVL_ENOTFOUND, KVL_EINVAL (NULL). */
KVL_API int kvl_layout_key(const kvl_layout *layout, int pool,
                           const kvl_hash *page, char *buf, size_t buflen);

/* The key of page `page` of pool `pool` for rank `shard` of this layout's
 * model (a shard of the same tp, cp and pp sizes), as that rank's own
 * layout names it with kvl_layout_key (rank indices are in keys, not in
 * fingerprints). Errors: KVL_EINVAL (NULL, a shard of other sizes or with a
 * rank beyond its size), KVL_ERANGE (buflen too small), KVL_ENOTFOUND.
 * Thread-safe. */
KVL_API int kvl_layout_shard_key(const kvl_layout *layout, int pool,
                                 const kvl_shard *shard, const kvl_hash *page,
                                 char *buf, size_t buflen);

/* -------------------------------------------- restorable sets and ranks */

/* A restorable set is a bitmap over prefix lengths p = 0..n_pages (in pages):
 * bit p (word p / 64, bit p % 64) is set when a prefix of p pages can be
 * restored. Bit 0 is always set. kvl_bitmap_words gives the words needed. */
static inline size_t kvl_bitmap_words(size_t n_pages)
{
	return n_pages / 64 + 1;
}

/* One pool's hit policy, as given to kvl_restorable_set. */
typedef struct kvl_policy {
	kvl_hit_policy kind;
	uint32_t window; /* for KVL_HIT_TRAILING_PAGES, >= 1 */
} kvl_policy;

/* Computes the restorable set of `n_pages` requested pages from per-pool
 * existence: present[i][j] != 0 when page j exists for pool i. A NULL
 * present[i] leaves pool i out (it does not constrain the set).
 *   KVL_HIT_ALL_PAGES        keeps p in 1..m, m = index of the first missing
 *                            page (n_pages if none is missing)
 *   KVL_HIT_TRAILING_PAGES w keeps every p >= 1 whose pages
 *                            [max(0,p-w), p) all exist
 * and pools intersect. Writes kvl_bitmap_words(n_pages) words to [out] bits
 * (words beyond that are left alone). With n_pools 0, policies and present
 * may be NULL. Errors (nothing written): KVL_EINVAL (unknown policy kind,
 * window 0, NULL arrays), KVL_ERANGE (n_words too small). Thread-safe;
 * allocates nothing. */
KVL_API int kvl_restorable_set(const kvl_policy *policies,
                               const uint8_t *const *present, size_t n_pools,
                               size_t n_pages, uint64_t *bits,
                               size_t n_words);

/* The largest p whose bit is set in `bits` (0 if only bit 0). */
KVL_API size_t kvl_bitmap_max(const uint64_t *bits, size_t n_words);

/* In-process all-reduce (a kvl_allreduce_fn) for ranks that are threads of
 * one process. Create one
 * group for n_ranks threads and pass kvl_rank_group_allreduce with the group
 * as `user`. Each round waits for all n_ranks callers; a caller that waits
 * longer than timeout_ms (0: do not wait at all) gets KVL_ETIMEDOUT and the
 * group is then broken: callers already waiting in that round and every
 * later call fail with KVL_ESTATE (ranks have lost step). A round in which
 * callers pass different n_words, a NULL bitmap or n_words 0 fails for all
 * of its callers with KVL_EINVAL and writes no bitmap; the group stays
 * usable. kvl_rank_group_allreduce is thread-safe and blocks until the
 * round completes or times out.
 * Errors of create: KVL_EINVAL (n_ranks 0, NULL out), KVL_ENOMEM. */
typedef struct kvl_rank_group kvl_rank_group;
KVL_API int kvl_rank_group_create(unsigned n_ranks, unsigned timeout_ms,
                                  kvl_rank_group **out);
KVL_API int kvl_rank_group_allreduce(uint64_t *bits, size_t n_words,
                                     void *group);
/* Frees the group; no thread may be inside kvl_rank_group_allreduce. */
KVL_API void kvl_rank_group_free(kvl_rank_group *group);

/* ---------------------------------------------- lookups without memory */

/* A prober answers which prefixes of a model's pages every rank can restore,
 * from the store alone: for the scheduler of an engine whose workers are
 * other processes, a router, or a disaggregation proxy. It derives every
 * rank's keys from one layout per pipeline stage (of shapes, or with
 * memory: only sizes are read) and asks for all of them in one batched
 * existence query per lookup.
 *
 * stages    n_stages finalized layouts, one per pipeline stage (n_stages is
 *           their pp_size; each one's shard names its stage, its tp and cp
 *           ranks are ignored: every tp and cp rank is asked, tp rank 0 only
 *           for pools replicated across tp ranks). They stay owned by the
 *           caller and must outlive the prober; they must share page size
 *           and rank sizes.
 * Errors of open: KVL_EINVAL (NULL arguments, an unfinalized layout,
 * layouts of different page or rank sizes, not one layout per stage),
 * KVL_ENOMEM. The store must outlive the prober. */
typedef struct kvl_prober kvl_prober;
KVL_API int kvl_prober_open(kvl_store *store, const kvl_layout *const *stages,
                            size_t n_stages, kvl_prober **out, char *errbuf,
                            size_t errlen);

/* The set of prefix lengths of `pages` restorable on every rank (as
 * kvl_linker_lookup_set, intersected over the ranks), into [out] bits
 * (n_words >= kvl_bitmap_words(n_pages)). Side-effect free. On any failure
 * but a NULL or short `bits`, bits hold the empty prefix only.
 * Errors: KVL_EINVAL (NULL prober, bits or pages), KVL_ERANGE (n_words too
 * small: nothing written; more than KVL_LINKER_MAX_REQUEST_PAGES pages),
 * KVL_EIO (store down or failing any key: not a miss), KVL_ENOMEM.
 * Thread-safe (lookups on one prober run one at a time). */
KVL_API int kvl_prober_lookup_set(kvl_prober *prober, const kvl_hash *pages,
                                  size_t n_pages, uint64_t *bits,
                                  size_t n_words);

/* The longest prefix restorable on every rank: the largest member of
 * kvl_prober_lookup_set; [out] prefix_out (0 when the call fails).
 * Errors: kvl_prober_lookup_set's, KVL_EINVAL for a NULL prefix_out. */
KVL_API int kvl_prober_lookup(kvl_prober *prober, const kvl_hash *pages,
                              size_t n_pages, size_t *prefix_out);

/* The message of the most recent failure on this prober (rules as
 * kvl_linker_errmsg; "prober is NULL" for NULL). */
KVL_API const char *kvl_prober_errmsg(const kvl_prober *prober);

/* Frees a prober (NULL: no-op). No thread may be inside its calls. */
KVL_API void kvl_prober_close(kvl_prober *prober);

#ifdef __cplusplus
}
#endif
#endif /* KVLINK_H */
