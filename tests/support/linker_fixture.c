/* SPDX-License-Identifier: Apache-2.0 */
/*
 * linker_fixture.c — engines, requests, stores and completions of the
 * linker's test programs (linker_fixture.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "linker_fixture.h"
#include "store/fault.h"

/* ============================================================= engines */

/* The number of the running test, for its key namespace on a shared
 * store. */
static unsigned test_number;

int next_test(void **state)
{
	(void)state;
	test_number++;
	return 0;
}

void host_init2(host *h, const hcfg *cfg, int unfinalized)
{
	char tag[64] = "test-model/bf16";
	if (env_store())
		snprintf(tag, sizeof tag, "test-%ld-%u/bf16", (long)getpid(),
		         test_number);
	pools_shape sh = {
		.tag = tag,
		.shard = cfg && cfg->shard.tp_size ? &cfg->shard : NULL,
		.slots = NP,
		.layers = N_LAYERS,
		.k_bytes = K_BYTES,
		.v_bytes = V_BYTES,
		.kv_stride = KV_STRIDE,
		.swa = cfg && cfg->swa,
		.swa_window = cfg && cfg->swa_window ? cfg->swa_window : 2,
		.w_bytes = W_BYTES,
		.w_stride = W_STRIDE,
		.mla = cfg && cfg->mla,
		.c_bytes = C_BYTES,
		.c_stride = C_STRIDE,
		.kv_mem = cfg && cfg->cuda ? KVL_MEM_CUDA : KVL_MEM_HOST,
		.fill = FILL,
		.unfinalized = unfinalized,
		.shapes = cfg && cfg->shapes,
	};
	pools_init(h, &sh);
}

void host_init(host *h, const hcfg *cfg)
{
	host_init2(h, cfg, 0);
}

void host_free(host *h)
{
	pools_free(h);
}

void make_pages(kvl_hash *out, size_t n, uint64_t seed)
{
	make_pages_in(out, n, seed, NULL);
}

void make_pages_in(kvl_hash *out, size_t n, uint64_t seed,
                   const kvl_hash *prior)
{
	ASSERT_TRUE(n <= MAXP);
	hash_chain(out, n, seed * 1000003, 16, prior);
}

kvl_hash make_seed(const char *salt)
{
	return ns_seed(salt);
}

/* ============================================================ requests */

void req_init(req *r, const kvl_hash *pages, size_t n)
{
	memset(r, 0, sizeof *r);
	ASSERT_TRUE(n <= MAXP);
	r->n = n;
	if (n)
		memcpy(r->pages, pages, n * sizeof *pages);
	for (int p = 0; p < MAX_POOLS; p++)
		for (size_t i = 0; i < MAXP; i++)
			r->slot[p][i] = KVL_NO_SLOT;
}

void req_pool(req *r, int pool, size_t first, size_t from)
{
	ASSERT_TRUE(pool >= 0 && pool < MAX_POOLS);
	r->sp[pool] = r->slot[pool];
	for (size_t i = from; i < r->n; i++)
		r->slot[pool][i] = first + (i - from);
}

void fill_req(host *h, const req *r)
{
	for (int p = 0; p < h->n_pools; p++)
		for (size_t i = 0; r->sp[p] && i < r->n; i++)
			if (r->slot[p][i] != KVL_NO_SLOT)
				slot_fill(h->bufs, h->n_bufs, p, r->slot[p][i],
				          &r->pages[i], FILL);
}

void check_req(const host *h, const req *r, size_t valid, uint32_t max_layer)
{
	char why[160];
	for (int p = 0; p < h->n_pools; p++)
		for (size_t i = 0; r->sp[p] && i < valid; i++)
			if (r->slot[p][i] != KVL_NO_SLOT &&
			    !slot_check(h->bufs, h->n_bufs, p, r->slot[p][i],
			                &r->pages[i], FILL, 0, max_layer, why,
			                sizeof why, NULL))
				ASSERT_FAIL("request page %zu, pool %d: wrong "
				            "bytes: %s",
				            i, p, why);
}

size_t req_good_prefix(const host *h, const req *r)
{
	for (size_t i = 0; i < r->n; i++)
		for (int p = 0; p < h->n_pools; p++)
			if (r->sp[p] && r->slot[p][i] != KVL_NO_SLOT &&
			    !slot_check(h->bufs, h->n_bufs, p, r->slot[p][i],
			                &r->pages[i], FILL, 0, N_LAYERS, NULL, 0,
			                NULL))
				return i;
	return r->n;
}

void reset_slots(host *h, const req *r)
{
	for (size_t i = 0; i < h->n_bufs; i++) {
		const page_buf *b = &h->bufs[i];
		const size_t *sl = r->sp[b->pool];
		for (size_t j = 0; sl && j < r->n; j++)
			if (sl[j] != KVL_NO_SLOT)
				memset(b->base + sl[j] * b->stride, FILL,
				       b->bytes);
	}
}

int slot_untouched(const host *h, int pool, size_t slot, uint32_t min_layer)
{
	char why[160];
	if (slot_check(h->bufs, h->n_bufs, pool, slot, NULL, FILL, min_layer,
	               UINT32_MAX, why, sizeof why, NULL))
		return 1;
	fprintf(stderr, "was written: %s\n", why);
	return 0;
}

/* ================================================== linkers and stores */

kvl_linker *open_lk(const host *h, kvl_store *s, const kvl_linker_opts *o)
{
	kvl_linker *lk = NULL;
	char err[256] = "";
	ASSERT_RC(err, kvl_linker_open(s, h->l, o, &lk, err, sizeof err),
	          KVL_OK);
	ASSERT_TRUE(lk != NULL);
	return lk;
}

void key_of(const host *h, int pool, const kvl_hash *page, char *key)
{
	ASSERT_RC(h->l, kvl_layout_key(h->l, pool, page, key, KVL_KEY_MAX),
	          KVL_OK);
}

void remove_page(kvl_store *s, const host *h, int pool, const kvl_hash *page)
{
	char key[KVL_KEY_MAX];
	key_of(h, pool, page, key);
	ASSERT_EQ_MSG(remove1(s, key), 1, "remove %s", key);
}

int page_present(kvl_store *s, const host *h, int pool, const kvl_hash *page)
{
	char key[KVL_KEY_MAX];
	key_of(h, pool, page, key);
	int res = exists1(s, key);
	ASSERT_TRUE_MSG(res == 0 || res == 1, "exists %s: %s", key,
	                kvl_err_name(res));
	return res;
}

uint32_t pages_held(kvl_store *s, const host *h, int pool,
                    const kvl_hash *pages, size_t n)
{
	char key[KVL_KEY_MAX];
	uint32_t sum = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t now = 0;
		key_of(h, pool, &pages[i], key);
		ASSERT_RC(s, kvl__fault_holds(s, key, &now, NULL), KVL_OK);
		sum += now;
	}
	return sum;
}

/* ========================================================= completions */

void collect(kvl_linker *lk, const uint64_t *ids, size_t n,
             kvl_completion *out)
{
	uint8_t *seen = calloc(n ? n : 1, 1);
	ASSERT_TRUE(seen != NULL);
	size_t got = 0;
	uint64_t deadline = now_ms() + COLLECT_MS;
	while (got < n) {
		kvl_completion c[16];
		size_t k = 0;
		ASSERT_RC(lk, kvl_linker_poll(lk, c, 16, &k, 50), KVL_OK);
		ASSERT_TRUE(k <= 16);
		for (size_t j = 0; j < k; j++) {
			size_t i = 0;
			while (i < n && ids[i] != c[j].id)
				i++;
			if (i == n)
				ASSERT_FAIL("unexpected completion of id %llu "
				            "(status %s)",
				            (unsigned long long)c[j].id,
				            kvl_err_name(c[j].status));
			if (seen[i])
				ASSERT_FAIL("id %llu completed twice",
				            (unsigned long long)c[j].id);
			seen[i] = 1;
			out[i] = c[j];
			got++;
		}
		if (got < n && now_ms() > deadline) {
			for (size_t i = 0; i < n; i++)
				if (!seen[i])
					fprintf(stderr,
					        "id %llu never completed\n",
					        (unsigned long long)ids[i]);
			ASSERT_FAIL("%zu of %zu ids completed within %d ms",
			            got, n, COLLECT_MS);
		}
	}
	free(seen);
}

kvl_completion collect1(kvl_linker *lk, uint64_t id)
{
	kvl_completion c;
	memset(&c, 0, sizeof c);
	collect(lk, &id, 1, &c);
	return c;
}

void expect_none(kvl_linker *lk, uint32_t ms)
{
	kvl_completion c[4];
	size_t k = 99;
	ASSERT_RC(lk, kvl_linker_poll(lk, c, 4, &k, ms), KVL_OK);
	ASSERT_EQ_MSG(k, 0, "unexpected completion of id %llu (status %s)",
	              (unsigned long long)c[0].id, kvl_err_name(c[0].status));
}

void expect_completion(const kvl_completion *c, kvl_req_kind kind, int status,
                       size_t valid, size_t n)
{
	unsigned long long id = c->id;
	ASSERT_EQ_MSG(c->kind, kind, "id %llu", id);
	ASSERT_CODE_MSG(c->status, status, "id %llu: valid %zu, want %zu", id,
	                c->valid_pages, valid);
	ASSERT_EQ_MSG(c->valid_pages, valid, "id %llu: status %s", id,
	              kvl_err_name(c->status));
	ASSERT_EQ_MSG(c->n_pages, n, "id %llu", id);
}

kvl_completion offload_sync(kvl_linker *lk, uint64_t id, const req *r)
{
	ASSERT_RC(lk, kvl_linker_offload(lk, id, r->pages, r->n,
	                                 (const size_t *const *)r->sp, NULL),
	          KVL_OK);
	ASSERT_RC(lk, kvl_linker_flush(lk, LONG_MS), KVL_OK);
	return collect1(lk, id);
}

kvl_completion load_sync(kvl_linker *lk, uint64_t id, const req *r,
                         int *waits)
{
	ASSERT_RC(lk, kvl_linker_load(lk, id, r->pages, r->n,
	                              (const size_t *const *)r->sp),
	          KVL_OK);
	uint64_t b = 0;
	ASSERT_RC(lk, kvl_linker_start(lk, &b), KVL_OK);
	for (uint32_t ly = 0; ly < kvl_linker_layers(lk); ly++) {
		int rc = kvl_linker_wait(lk, b, ly, LONG_MS);
		ASSERT_TRUE_MSG(rc != KVL_ETIMEDOUT,
		                "wait for layer %u of batch %llu: %s", ly,
		                (unsigned long long)b, kvl_linker_errmsg(lk));
		if (waits)
			waits[ly] = rc;
	}
	return collect1(lk, id);
}

size_t lookup(kvl_linker *lk, const kvl_hash *pages, size_t n,
              const uint8_t *const *pool_pages)
{
	size_t prefix = 12345;
	ASSERT_RC(lk, kvl_linker_lookup(lk, pages, n, pool_pages, &prefix),
	          KVL_OK);
	return prefix;
}
