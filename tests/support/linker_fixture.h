/* SPDX-License-Identifier: Apache-2.0 */
/*
 * linker_fixture.h — what the linker's test programs (tests/test_linker_*.c)
 * share: two engines of one shape, requests over their slots, the store
 * under test, and completions collected exactly once.
 *
 * An engine ("host") is pools.h's memory and layout: pool "kv" (ALL_PAGES,
 * k and v over layers 0..3), optionally "swa" (TRAILING_PAGES(w), one
 * component at layers 1 and 3) and "mla" (KVL_POOL_REPLICATED_TP, layers
 * 0..3), NP slots each, FILL everywhere before a load. Tests build a source
 * and a destination engine of the same shape at different addresses, fill
 * source slots with their pages' bytes (page_data.h), offload, flush, load
 * into other slots of the destination and compare layer by layer (and check
 * that slots not loaded are untouched).
 *
 * The store is the embedded "mem:" store or, with $KVL_TEST_STORE_URI set
 * (tests/mooncake/run.sh, tests/redis/run.sh), that store; each test keys
 * its objects in a namespace of its own (the layout's model tag carries the
 * process id and the test's number, advanced by next_test), since a shared
 * server keeps earlier tests' objects.
 *
 * collect() polls until every expected id arrived (COLLECT_MS at most) and
 * fails on an id seen twice, an id not expected, or one missing.
 *
 * For cmocka programs (NEED_FAULT_STORE skips the test); every function
 * asserts (kvl_assert.h), so main thread only.
 */
#ifndef KVL_TEST_LINKER_FIXTURE_H
#define KVL_TEST_LINKER_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "clock.h"
#include "faults.h"
#include "kvl_assert.h"
#include "kvlink.h"
#include "page_data.h"
#include "pools.h"
#include "stores.h"

#define NP 16          /* slots per pool */
#define N_LAYERS 4
#define K_BYTES 64
#define V_BYTES 48
#define KV_STRIDE 128  /* k then v in one slot, then a gap */
#define W_BYTES 40
#define W_STRIDE 64
#define C_BYTES 32
#define C_STRIDE 32
#define MAXP 32        /* pages of one request in these tests */
#define MAX_POOLS 3
#define FILL 0xEE      /* what destination memory holds before a load */
#define STORE_URI store_uri("", NULL)
#define COLLECT_MS HANG_MS /* waits for completions: only a hang runs out */
#define LONG_MS HANG_MS    /* timeout of waits and flushes that must succeed */

/* ------------------------------------------------------------- engines */

typedef struct hcfg {
	int swa;             /* add pool "swa" */
	uint32_t swa_window; /* its TRAILING_PAGES window (default 2) */
	int mla;             /* add replicated pool "mla" */
	int cuda;            /* describe "kv" as CUDA memory */
	kvl_shard shard;     /* all zero: a single rank */
	int shapes;          /* the layout describes sizes only (a prober's) */
} hcfg;

/* One engine's memory, its layout and its buffers (pools.h). */
typedef pools host;

/* cmocka setup of every test: the next test's key namespace. */
int next_test(void **state);

/* Builds (and unless `unfinalized`, finalizes) a host of shape cfg (NULL:
 * pool kv only, one rank). */
void host_init2(host *h, const hcfg *cfg, int unfinalized);
void host_init(host *h, const hcfg *cfg);
void host_free(host *h);

/* n (<= MAXP) distinct page hashes, a chain over `seed`'s tokens. */
void make_pages(kvl_hash *out, size_t n, uint64_t seed);
/* The same pages in the namespace of `prior` (a seed, or NULL). */
void make_pages_in(kvl_hash *out, size_t n, uint64_t seed,
                   const kvl_hash *prior);

/* The namespace seed of `salt`. */
kvl_hash make_seed(const char *salt);

/* ------------------------------------------------------------ requests */

/* A request: pages, and per pool a slot array (or none). */
typedef struct req {
	size_t n;
	kvl_hash pages[MAXP];
	size_t slot[MAX_POOLS][MAXP];
	const size_t *sp[MAX_POOLS];
} req;

void req_init(req *r, const kvl_hash *pages, size_t n);

/* Pages [from, n) of pool `pool` use slots first + (i - from). */
void req_pool(req *r, int pool, size_t first, size_t from);

/* Writes every page of r into its slots of h. */
void fill_req(host *h, const req *r);

/* Asserts that pages < valid of r hold their pattern in h's slots at every
 * layer < max_layer. */
void check_req(const host *h, const req *r, size_t valid, uint32_t max_layer);

/* Leading pages of r whose bytes are right in every pool (all layers). */
size_t req_good_prefix(const host *h, const req *r);

/* Puts FILL back into every slot r names. */
void reset_slots(host *h, const req *r);

/* 1 when every byte of `slot` of `pool`, at layers >= min_layer, is FILL;
 * else prints the first byte written and is 0. */
int slot_untouched(const host *h, int pool, size_t slot, uint32_t min_layer);

/* --------------------------------------------------- linkers and stores */

kvl_linker *open_lk(const host *h, kvl_store *s, const kvl_linker_opts *o);

/* The store key of `page` in pool `pool` of h. */
void key_of(const host *h, int pool, const kvl_hash *page, char *key);

/* Removes `page`'s object of `pool` (asserting it was there). */
void remove_page(kvl_store *s, const host *h, int pool, const kvl_hash *page);

/* 1 when `page`'s object of `pool` is in the store, else 0. */
int page_present(kvl_store *s, const host *h, int pool, const kvl_hash *page);

/* The holds that fault store s (fault.holds=1) counts now on the objects
 * of pool `pool` of pages[0..n), all together. */
uint32_t pages_held(kvl_store *s, const host *h, int pool,
                    const kvl_hash *pages, size_t n);

/* --------------------------------------------------------- completions */

/* Polls until every id of ids[n] completed once; out[i] gets ids[i]'s
 * completion. Fails on a duplicate, an unexpected id or a missing one. */
void collect(kvl_linker *lk, const uint64_t *ids, size_t n,
             kvl_completion *out);
kvl_completion collect1(kvl_linker *lk, uint64_t id);

/* Asserts that nothing is reported within ms. */
void expect_none(kvl_linker *lk, uint32_t ms);

void expect_completion(const kvl_completion *c, kvl_req_kind kind, int status,
                       size_t valid, size_t n);

/* Offloads r from lk, flushes and returns its completion. */
kvl_completion offload_sync(kvl_linker *lk, uint64_t id, const req *r);

/* Loads r as the only request of a batch; waits every layer in order into
 * waits[] (may be NULL) and returns the completion. */
kvl_completion load_sync(kvl_linker *lk, uint64_t id, const req *r,
                         int *waits);

/* kvl_linker_lookup, asserted to succeed: the prefix. */
size_t lookup(kvl_linker *lk, const kvl_hash *pages, size_t n,
              const uint8_t *const *pool_pages);

/* Skips the running cmocka test when this build has no fault store. */
#define NEED_FAULT_STORE()                                                 \
	do {                                                               \
		if (!fault_store_ok()) {                                   \
			skip();                                            \
			return;                                            \
		}                                                          \
	} while (0)

#endif
