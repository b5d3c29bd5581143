/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pools.c — builds an engine's memory and layout to a pools_shape
 * (pools.h). Buffers are added pool by pool, layer by layer, k before v,
 * which is the order a layout's objects follow.
 */
#include <stdlib.h>
#include <string.h>

#include "kvl_assert.h"
#include "pools.h"

static void add_buf(pools *p, const pools_shape *sh, int pool,
                    const char *comp, uint32_t comp_i, uint32_t layer,
                    uint8_t *base, size_t stride, size_t bytes)
{
	kvl_buffer b = {.base = base, .page_stride = stride,
	                .page_bytes = bytes, .num_pages = sh->slots,
	                .mem = pool == p->kv ? sh->kv_mem : KVL_MEM_HOST,
	                .device = 0};
	if (sh->shapes)
		ASSERT_RC(p->l, kvl_layout_add_shape(p->l, pool, comp, layer,
		                                     bytes),
		          KVL_OK);
	else
		ASSERT_RC(p->l, kvl_layout_add_buffer(p->l, pool, comp, layer,
		                                      &b),
		          KVL_OK);
	ASSERT_TRUE(p->n_bufs < POOLS_MAX_BUFS);
	p->bufs[p->n_bufs++] = (page_buf){.pool = pool, .layer = layer,
	                                  .comp = comp_i, .base = base,
	                                  .stride = stride, .bytes = bytes};
}

void pools_init(pools *p, const pools_shape *sh)
{
	memset(p, 0, sizeof *p);
	size_t kv = (size_t)sh->layers * sh->slots * sh->kv_stride;
	size_t swa = sh->swa ? 2 * sh->slots * sh->w_stride : 0;
	size_t mla = sh->mla ? (size_t)sh->layers * sh->slots * sh->c_stride
	                     : 0;
	p->mem_bytes = kv + swa + mla;
	/* aligned_alloc wants a multiple of the alignment. */
	p->mem = aligned_alloc(64, (p->mem_bytes + 63) / 64 * 64);
	ASSERT_TRUE(p->mem != NULL);
	memset(p->mem, sh->fill, p->mem_bytes);
	kvl_shard single = KVL_SHARD_SINGLE;
	char err[256] = "";
	ASSERT_RC(err,
	          kvl_layout_create(sh->tag, 16, sh->shard ? sh->shard : &single,
	                            &p->l, err, sizeof err),
	          KVL_OK);
	p->kv = p->swa = p->mla = -1;
	ASSERT_RC(p->l, kvl_layout_add_pool(p->l, "kv", KVL_HIT_ALL_PAGES, 0, 0,
	                                    &p->kv),
	          KVL_OK);
	p->n_pools = 1;
	if (sh->swa) {
		ASSERT_RC(p->l, kvl_layout_add_pool(p->l, "swa",
		                                    KVL_HIT_TRAILING_PAGES,
		                                    sh->swa_window, 0, &p->swa),
		          KVL_OK);
		p->n_pools++;
	}
	if (sh->mla) {
		ASSERT_RC(p->l, kvl_layout_add_pool(p->l, "mla",
		                                    KVL_HIT_ALL_PAGES, 0,
		                                    KVL_POOL_REPLICATED_TP,
		                                    &p->mla),
		          KVL_OK);
		p->n_pools++;
	}
	for (uint32_t ly = 0; ly < sh->layers; ly++) {
		uint8_t *base = p->mem + (size_t)ly * sh->slots * sh->kv_stride;
		add_buf(p, sh, p->kv, "k", 0, ly, base, sh->kv_stride,
		        sh->k_bytes);
		add_buf(p, sh, p->kv, "v", 1, ly, base + sh->k_bytes,
		        sh->kv_stride, sh->v_bytes);
	}
	if (p->swa >= 0) {
		add_buf(p, sh, p->swa, "w", 0, 1, p->mem + kv, sh->w_stride,
		        sh->w_bytes);
		add_buf(p, sh, p->swa, "w", 0, 3,
		        p->mem + kv + sh->slots * sh->w_stride, sh->w_stride,
		        sh->w_bytes);
	}
	for (uint32_t ly = 0; p->mla >= 0 && ly < sh->layers; ly++)
		add_buf(p, sh, p->mla, "c", 0, ly,
		        p->mem + kv + swa + (size_t)ly * sh->slots * sh->c_stride,
		        sh->c_stride, sh->c_bytes);
	if (!sh->unfinalized)
		ASSERT_RC(p->l, kvl_layout_finalize(p->l), KVL_OK);
}

void pools_free(pools *p)
{
	kvl_layout_free(p->l);
	free(p->mem);
}
