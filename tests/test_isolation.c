/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_isolation.c — engines that differ in model tag, layout, rank shard or
 * tenant (namespace seed) never read each other's objects, on every store
 * this build has: the embedded store ("mem:"), the fault-injection store
 * around it ("fault+mem:"), and Redis when $KVL_TEST_REDIS_URI (or the
 * $KVL_TEST_STORE_URI that tests/redis/run.sh exports, when it is a
 * redis:// URI) names a server; ctest runs it so against a throwaway cluster
 * (test redis_isolation). Without one the Redis part is skipped, and says
 * so. Any other $KVL_TEST_STORE_URI is tested too (mooncake_isolation).
 *
 * An engine A offloads pages through a linker. Then, for each engine B that
 * differs from A in one respect, and for the same pages:
 *  - B's lookup finds no prefix, and B's existence check finds no page;
 *  - B's load completes with KVL_ENOTFOUND and no valid page, and B's
 *    destination slots are not written;
 *  - even when A's objects are copied under B's keys (as if keys collided
 *    or a store mixed them up), B's load refuses them (KVL_ECORRUPT, no
 *    valid page): the header names the layout fingerprint and the page
 *    hash (after the namespace seed), so isolation does not rest on keys
 *    alone.
 * And an engine identical to A but for its memory (a second process of the
 * same model) does find and load them byte for byte: the checks above are
 * not passing for want of data. A pool replicated across tensor-parallel
 * ranks is shared by the tp ranks of one cp/pp shard, by design, and by no
 * other shard.
 *
 * Exit status: 0 pass, 1 fail. Prints one line per store and respect.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvlink.h"

#include "support/kvl_assert.h"
#include "support/page_data.h"
#include "support/stores.h"

#define NP 8       /* slots per pool */
#define PAGES 4    /* pages offloaded: slots 0..3; loads go to 4..7 */
#define FILL 0xEE
#define MAX_LAYERS 4

/* What an engine looks like. */
typedef struct shape {
	const char *name;    /* for messages */
	const char *tag;     /* model tag */
	uint32_t page_size;
	size_t k_bytes;      /* bytes per page of component k (v: 32) */
	uint32_t n_layers;
	const char *k_name;  /* name of the first component */
	kvl_hit_policy policy;
	kvl_shard shard;
	int mla;             /* a replicated pool "mla" too */
	const char *tenant;  /* NULL: no namespace seed */
} shape;

typedef struct eng {
	shape sh;
	uint8_t *mem;
	size_t bytes;
	kvl_layout *l;
	int kv, mla;
	kvl_hash ns;
	const kvl_hash *nsp; /* the tenant's seed: the prior of its hashes */
	kvl_linker *lk;
} eng;

/* The page hashes of prompt `prompt` (the first of its tokens) as engine e
 * names them: chained after e's tenant seed, if it has one. */
static void eng_pages(const eng *e, uint64_t prompt, kvl_hash *out);

#define STRIDE 128
#define V_BYTES 32
#define C_BYTES 48

static size_t kv_off(const eng *e, uint32_t layer, int comp, size_t slot)
{
	return (size_t)layer * NP * STRIDE + slot * STRIDE +
	       (comp ? e->sh.k_bytes : 0);
}

static size_t mla_off(const eng *e, uint32_t layer, size_t slot)
{
	return (size_t)e->sh.n_layers * NP * STRIDE +
	       (size_t)layer * NP * 64 + slot * 64;
}

static int eng_init(eng *e, const shape *sh, kvl_store *st)
{
	memset(e, 0, sizeof *e);
	e->sh = *sh;
	e->bytes = (size_t)sh->n_layers * NP * (STRIDE + 64);
	e->mem = aligned_alloc(64, e->bytes);
	if (!e->mem)
		return -1;
	memset(e->mem, FILL, e->bytes);
	char err[256] = "";
	kvl_shard shard = sh->shard.tp_size ? sh->shard : KVL_SHARD_SINGLE;
	int rc = kvl_layout_create(sh->tag, sh->page_size, &shard, &e->l, err,
	                           sizeof err);
	EXPECT_CODE_MSG(rc, 0, "%s: layout: %s", sh->name, err);
	if (rc)
		return rc;
	e->mla = -1;
	rc = kvl_layout_add_pool(e->l, "kv", sh->policy,
	                         sh->policy == KVL_HIT_ALL_PAGES ? 0 : 2, 0,
	                         &e->kv);
	if (!rc && sh->mla)
		rc = kvl_layout_add_pool(e->l, "mla", KVL_HIT_ALL_PAGES, 0,
		                         KVL_POOL_REPLICATED_TP, &e->mla);
	for (uint32_t ly = 0; !rc && ly < sh->n_layers; ly++) {
		kvl_buffer k = {.base = e->mem + kv_off(e, ly, 0, 0),
		                .page_stride = STRIDE,
		                .page_bytes = sh->k_bytes, .num_pages = NP};
		kvl_buffer v = k;
		v.base = e->mem + kv_off(e, ly, 1, 0);
		v.page_bytes = V_BYTES;
		rc = kvl_layout_add_buffer(e->l, e->kv, sh->k_name, ly, &k);
		if (!rc)
			rc = kvl_layout_add_buffer(e->l, e->kv, "v", ly, &v);
		if (!rc && sh->mla) {
			kvl_buffer c = {.base = e->mem + mla_off(e, ly, 0),
			                .page_stride = 64, .page_bytes = C_BYTES,
			                .num_pages = NP};
			rc = kvl_layout_add_buffer(e->l, e->mla, "c", ly, &c);
		}
	}
	if (!rc)
		rc = kvl_layout_finalize(e->l);
	EXPECT_CODE_MSG(rc, 0, "%s: layout: %s", sh->name,
	                kvl_layout_errmsg(e->l));
	if (rc)
		return rc;
	if (sh->tenant) {
		e->ns = ns_seed(sh->tenant);
		e->nsp = &e->ns;
	}
	rc = kvl_linker_open(st, e->l, NULL, &e->lk, err, sizeof err);
	EXPECT_CODE_MSG(rc, 0, "%s: linker: %s", sh->name, err);
	return rc;
}

static void eng_free(eng *e)
{
	kvl_linker_close(e->lk);
	kvl_layout_free(e->l);
	free(e->mem);
}

static uint8_t pat(size_t page, uint32_t layer, int comp, size_t off)
{
	return (uint8_t)(page * 37 + layer * 11 + (size_t)comp * 5 + off * 3 +
	                 1);
}

/* Fills source slots 0..PAGES-1 with their pages' bytes. */
static void fill_sources(eng *e)
{
	for (size_t p = 0; p < PAGES; p++)
		for (uint32_t ly = 0; ly < e->sh.n_layers; ly++) {
			uint8_t *k = e->mem + kv_off(e, ly, 0, p);
			uint8_t *v = e->mem + kv_off(e, ly, 1, p);
			for (size_t o = 0; o < e->sh.k_bytes; o++)
				k[o] = pat(p, ly, 0, o);
			for (size_t o = 0; o < V_BYTES; o++)
				v[o] = pat(p, ly, 1, o);
			if (e->mla >= 0) {
				uint8_t *c = e->mem + mla_off(e, ly, p);
				for (size_t o = 0; o < C_BYTES; o++)
					c[o] = pat(p, ly, 2, o);
			}
		}
}

/* Leading destination pages (slots PAGES + i) holding page i's bytes in
 * the pools of e that were loaded (pools: bit 0 kv, bit 1 mla). */
static size_t good_dest(const eng *e, unsigned pools)
{
	for (size_t p = 0; p < PAGES; p++)
		for (uint32_t ly = 0; ly < e->sh.n_layers; ly++) {
			const uint8_t *k = e->mem + kv_off(e, ly, 0, PAGES + p);
			const uint8_t *v = e->mem + kv_off(e, ly, 1, PAGES + p);
			for (size_t o = 0; (pools & 1) && o < e->sh.k_bytes; o++)
				if (k[o] != pat(p, ly, 0, o))
					return p;
			for (size_t o = 0; (pools & 1) && o < V_BYTES; o++)
				if (v[o] != pat(p, ly, 1, o))
					return p;
			if ((pools & 2) && e->mla >= 0) {
				const uint8_t *c =
					e->mem + mla_off(e, ly, PAGES + p);
				for (size_t o = 0; o < C_BYTES; o++)
					if (c[o] != pat(p, ly, 2, o))
						return p;
			}
		}
	return PAGES;
}

/* 1 when no destination byte of e was written. */
static int dest_untouched(const eng *e)
{
	for (size_t p = PAGES; p < NP; p++)
		for (uint32_t ly = 0; ly < e->sh.n_layers; ly++) {
			const uint8_t *k = e->mem + kv_off(e, ly, 0, p);
			for (size_t o = 0; o < e->sh.k_bytes + V_BYTES; o++)
				if (k[o] != FILL)
					return 0;
			if (e->mla >= 0) {
				const uint8_t *c = e->mem + mla_off(e, ly, p);
				for (size_t o = 0; o < C_BYTES; o++)
					if (c[o] != FILL)
						return 0;
			}
		}
	return 1;
}

static void reset_dest(eng *e)
{
	for (size_t p = PAGES; p < NP; p++)
		for (uint32_t ly = 0; ly < e->sh.n_layers; ly++) {
			memset(e->mem + kv_off(e, ly, 0, p), FILL, STRIDE);
			if (e->mla >= 0)
				memset(e->mem + mla_off(e, ly, p), FILL, 64);
		}
}

static kvl_completion wait_for(kvl_linker *lk, uint64_t id)
{
	kvl_completion c = {.id = id, .status = -1000};
	for (int i = 0; i < 1000; i++) {
		size_t n = 0;
		kvl_completion got;
		kvl_linker_poll(lk, &got, 1, &n, 10);
		if (n && got.id == id)
			return got;
	}
	return c;
}

static uint64_t g_id = 1;

/* Offloads the pages of `prompt` from slots 0..PAGES-1 of every pool of e. */
static void offload(eng *e, uint64_t prompt)
{
	kvl_hash pages[PAGES];
	eng_pages(e, prompt, pages);
	size_t slots[PAGES];
	for (size_t i = 0; i < PAGES; i++)
		slots[i] = i;
	const size_t *sp[2] = {slots, slots};
	uint64_t id = g_id++;
	int rc = kvl_linker_offload(e->lk, id, pages, PAGES, sp, NULL);
	EXPECT_CODE_MSG(rc, 0, "%s: offload: %s", e->sh.name,
	                kvl_linker_errmsg(e->lk));
	kvl_completion c = wait_for(e->lk, id);
	EXPECT_CODE_MSG(c.status, 0, "%s: offload completed with %zu pages",
	                e->sh.name, c.valid_pages);
	EXPECT_EQ_MSG(c.valid_pages, PAGES, "%s: offload completed %s",
	              e->sh.name, kvl_err_name(c.status));
}

/* Loads the pages of `prompt` into slots PAGES.. of the pools of e
 * (`pools`: bit 0 kv, bit 1 mla); returns the completion. */
static kvl_completion load(eng *e, uint64_t prompt, unsigned pools)
{
	kvl_hash pages[PAGES];
	eng_pages(e, prompt, pages);
	size_t slots[PAGES];
	for (size_t i = 0; i < PAGES; i++)
		slots[i] = PAGES + i;
	const size_t *sp[2] = {pools & 1 ? slots : NULL,
	                       pools & 2 && e->mla >= 0 ? slots : NULL};
	uint64_t id = g_id++;
	kvl_completion none = {.id = id, .status = -1001};
	int rc = kvl_linker_load(e->lk, id, pages, PAGES, sp);
	EXPECT_CODE_MSG(rc, 0, "%s: load: %s", e->sh.name,
	                kvl_linker_errmsg(e->lk));
	if (rc)
		return none;
	uint64_t b;
	rc = kvl_linker_start(e->lk, &b);
	EXPECT_CODE_MSG(rc, 0, "%s: start: %s", e->sh.name,
	                kvl_linker_errmsg(e->lk));
	return wait_for(e->lk, id);
}

static size_t lookup(eng *e, uint64_t prompt, unsigned pools)
{
	kvl_hash pages[PAGES];
	eng_pages(e, prompt, pages);
	/* A pool with no page flagged does not constrain the prefix. */
	uint8_t all[PAGES] = {1, 1, 1, 1}, none[PAGES] = {0};
	const uint8_t *pp[2] = {pools & 1 ? all : none,
	                        pools & 2 ? all : none};
	size_t prefix = 99;
	int rc = kvl_linker_lookup(e->lk, pages, PAGES, pools == 3 ? NULL : pp,
	                           &prefix);
	EXPECT_CODE_MSG(rc, 0, "%s: lookup: %s", e->sh.name,
	                kvl_linker_errmsg(e->lk));
	return prefix;
}

static size_t exists(kvl_store *st, eng *e, int pool, uint64_t prompt)
{
	kvl_hash pages[PAGES];
	eng_pages(e, prompt, pages);
	int res[PAGES];
	int rc = kvl_pages_exists(st, e->l, pool, pages, PAGES, res);
	EXPECT_CODE_MSG(rc, 0, "%s: pages_exist: %s", e->sh.name,
	                kvl_store_errmsg(st));
	size_t n = 0;
	for (size_t i = 0; i < PAGES; i++)
		n += res[i] == 1;
	return n;
}

static void eng_pages(const eng *e, uint64_t prompt, kvl_hash *out)
{
	hash_chain(out, PAGES, prompt, 16, e->nsp);
}

/* The store key of page `i` of `prompt` in e's pool. */
static void key_of(eng *e, int pool, uint64_t prompt, size_t i, char *key)
{
	kvl_hash pages[PAGES];
	eng_pages(e, prompt, pages);
	ASSERT_RC(e->l, kvl_layout_key(e->l, pool, &pages[i], key, KVL_KEY_MAX),
	          KVL_OK);
}

/* Copies a's objects of pool `pa` under b's keys of pool `pb` (or removes
 * those copies again when `undo`). */
static void copy_objects(kvl_store *st, eng *a, int pa, eng *b, int pb,
                         uint64_t prompt, int undo)
{
	size_t size = 0;
	kvl_layout_object_size(a->l, pa, &size, NULL);
	uint8_t *obj = malloc(size);
	ASSERT_TRUE(obj != NULL);
	for (size_t i = 0; i < PAGES; i++) {
		char ka[KVL_KEY_MAX], kb[KVL_KEY_MAX];
		key_of(a, pa, prompt, i, ka);
		key_of(b, pb, prompt, i, kb);
		const char *kbp[1] = {kb}, *kap[1] = {ka};
		size_t one = 1;
		int res;
		if (undo) {
			kvl_store_remove(st, kbp, 1, &res);
			continue;
		}
		EXPECT_TRUE_MSG(strcmp(ka, kb) != 0, "%s and %s share key %s",
		                a->sh.name, b->sh.name, ka);
		kvl_range r = {0, obj, size};
		int got = -1;
		int rc = kvl_store_get(st, kap, 1, &r, &one, &got);
		EXPECT_CODE_MSG(rc, 0, "reading %s's object", a->sh.name);
		EXPECT_CODE_MSG(got, 0, "reading %s's object", a->sh.name);
		kvl_store_remove(st, kbp, 1, &res);
		kvl_iov pc = {obj, size};
		rc = kvl_store_put(st, kbp, 1, &pc, &one, &res);
		EXPECT_CODE_MSG(rc, 0, "copying %s's object", a->sh.name);
		EXPECT_TRUE_MSG(res >= 0, "copying %s's object: %s",
		                a->sh.name, kvl_err_name(res));
	}
	free(obj);
}

/* Removes a's objects (a test run leaves nothing behind in a shared
 * store). */
static void remove_objects(kvl_store *st, eng *a, uint64_t prompt)
{
	for (int pool = 0; pool < (a->mla >= 0 ? 2 : 1); pool++)
		for (size_t i = 0; i < PAGES; i++) {
			char k[KVL_KEY_MAX];
			key_of(a, pool, prompt, i, k);
			const char *kp[1] = {k};
			int res;
			kvl_store_remove(st, kp, 1, &res);
		}
}

/* B differs from A: it must see none of A's pages in pool kv. */
static void expect_isolated(kvl_store *st, eng *a, eng *b, uint64_t prompt,
                            const char *uri)
{
	size_t p = lookup(b, prompt, 1);
	EXPECT_EQ_MSG(p, 0, "%s found a prefix of %s's pages", b->sh.name,
	              a->sh.name);
	size_t n = exists(st, b, b->kv, prompt);
	EXPECT_EQ_MSG(n, 0, "%s sees %s's pages", b->sh.name, a->sh.name);
	reset_dest(b);
	kvl_completion c = load(b, prompt, 1);
	EXPECT_CODE_MSG(c.status, KVL_ENOTFOUND,
	                "%s loading %s's pages: %zu valid", b->sh.name,
	                a->sh.name, c.valid_pages);
	EXPECT_EQ_MSG(c.valid_pages, 0, "%s loading %s's pages: %s",
	              b->sh.name, a->sh.name, kvl_err_name(c.status));
	EXPECT_TRUE_MSG(dest_untouched(b), "%s's slots were written",
	                b->sh.name);

	/* A's objects under B's keys are still refused. */
	copy_objects(st, a, a->kv, b, b->kv, prompt, 0);
	reset_dest(b);
	c = load(b, prompt, 1);
	EXPECT_CODE_MSG(c.status, KVL_ECORRUPT,
	                "%s loading %s's objects under its own keys: %zu "
	                "valid",
	                b->sh.name, a->sh.name, c.valid_pages);
	EXPECT_EQ_MSG(c.valid_pages, 0,
	              "%s loading %s's objects under its own keys: %s",
	              b->sh.name, a->sh.name, kvl_err_name(c.status));
	copy_objects(st, a, a->kv, b, b->kv, prompt, 1);
	printf("  %-28s isolated from %s on %s\n", b->sh.name, a->sh.name,
	       uri);
}

/* B is A again (other memory): it must load A's pages byte for byte. */
static void expect_shared(kvl_store *st, eng *a, eng *b, uint64_t prompt,
                          unsigned pools, const char *uri)
{
	size_t p = lookup(b, prompt, pools);
	EXPECT_EQ_MSG(p, PAGES, "%s's prefix of %s's pages", b->sh.name,
	              a->sh.name);
	reset_dest(b);
	kvl_completion c = load(b, prompt, pools);
	EXPECT_CODE_MSG(c.status, 0, "%s loading %s's pages: %zu valid",
	                b->sh.name, a->sh.name, c.valid_pages);
	EXPECT_EQ_MSG(c.valid_pages, PAGES, "%s loading %s's pages: %s",
	              b->sh.name, a->sh.name, kvl_err_name(c.status));
	size_t good = good_dest(b, pools);
	EXPECT_EQ_MSG(good, PAGES, "%s: the pages from the first wrong one",
	              b->sh.name);
	(void)st;
	printf("  %-28s shares %s's pages on %s\n", b->sh.name, a->sh.name,
	       uri);
}

static void run_store(const char *uri, const char *label)
{
	kvl_store *st = NULL;
	char err[256] = "";
	int rc = kvl_store_open(uri, &st, err, sizeof err);
	EXPECT_CODE_MSG(rc, 0, "store %s: %s", uri, err);
	if (rc)
		return;
	printf("%s (%s):\n", label, uri);

	/* A tag unique to this run keeps a shared Redis clean of clashes. */
	char tag_a[64], tag_b[64];
	snprintf(tag_a, sizeof tag_a, "iso-%ld-%ld/a", (long)getpid(),
	         (long)time(NULL));
	snprintf(tag_b, sizeof tag_b, "iso-%ld-%ld/b", (long)getpid(),
	         (long)time(NULL));
	const kvl_shard single = KVL_SHARD_SINGLE;
	const shape base = {"A", tag_a, 16, 64, 2, "k", KVL_HIT_ALL_PAGES,
	                    single, 0, NULL};

	/* A prompt, named by its first token; each engine hashes it. */
	const uint64_t prompt = 1000;

	/* --- model tag, layout, tenant: against a single-rank A. */
	struct variant {
		const char *name;
		shape sh;
	} vars[] = {
		{"model tag", base},
		{"page size", base},
		{"bytes per page", base},
		{"layer count", base},
		{"component name", base},
		{"hit policy", base},
		{"tensor-parallel size", base},
		{"tenant salt", base},
	};
	vars[0].sh.tag = tag_b;
	vars[1].sh.page_size = 32;
	vars[2].sh.k_bytes = 56;
	vars[3].sh.n_layers = 3;
	vars[4].sh.k_name = "key";
	vars[5].sh.policy = KVL_HIT_TRAILING_PAGES;
	vars[6].sh.shard = (kvl_shard){0, 2, 0, 1, 0, 1};
	vars[7].sh.tenant = "tenant-b";

	eng a = {0};
	if (eng_init(&a, &base, st) == 0) {
		fill_sources(&a);
		offload(&a, prompt);
		for (size_t v = 0; v < sizeof vars / sizeof vars[0]; v++) {
			eng b = {0};
			vars[v].sh.name = vars[v].name;
			if (eng_init(&b, &vars[v].sh, st) == 0)
				expect_isolated(st, &a, &b, prompt, label);
			eng_free(&b);
		}
		/* Tenants among themselves: seeded A vs seeded B, and vs the
		 * unseeded A, over prompts of their own (A's are stored). */
		const uint64_t tp = 5000;
		shape ta = base, tb = base;
		ta.name = "tenant a";
		ta.tenant = "tenant-a";
		tb.name = "tenant b";
		tb.tenant = "tenant-b";
		eng ea = {0}, eb = {0};
		if (eng_init(&ea, &ta, st) == 0 && eng_init(&eb, &tb, st) == 0) {
			fill_sources(&ea);
			offload(&ea, tp);
			expect_isolated(st, &ea, &eb, tp, label);
			expect_isolated(st, &ea, &a, tp, label);
			eng again = {0};
			if (eng_init(&again, &ta, st) == 0) {
				again.sh.name = "tenant a again";
				expect_shared(st, &ea, &again, tp, 1, label);
			}
			eng_free(&again);
			remove_objects(st, &ea, tp);
		}
		eng_free(&ea);
		eng_free(&eb);
		/* The control: A again, other memory. */
		eng a2 = {0};
		shape s2 = base;
		s2.name = "A again";
		if (eng_init(&a2, &s2, st) == 0)
			expect_shared(st, &a, &a2, prompt, 1, label);
		eng_free(&a2);
		remove_objects(st, &a, prompt);
	}
	eng_free(&a);

	/* --- rank shards: tp 0 and tp 1 of 2, cp 0 and cp 1 of 2, with a
	 * replicated pool. */
	shape r0 = base;
	r0.name = "tp rank 0";
	r0.mla = 1;
	r0.shard = (kvl_shard){0, 2, 0, 2, 0, 1};
	shape r1 = r0, c1 = r0, r0b = r0;
	r1.name = "tp rank 1";
	r1.shard.tp_rank = 1;
	c1.name = "cp rank 1";
	c1.shard.cp_rank = 1;
	r0b.name = "tp rank 0 again";
	eng e0 = {0}, e1 = {0}, ec = {0}, e0b = {0};
	if (eng_init(&e0, &r0, st) == 0 && eng_init(&e1, &r1, st) == 0 &&
	    eng_init(&ec, &c1, st) == 0 && eng_init(&e0b, &r0b, st) == 0) {
		fill_sources(&e0);
		offload(&e0, prompt);
		expect_isolated(st, &e0, &e1, prompt, label);
		expect_isolated(st, &e0, &ec, prompt, label);
		/* The replicated pool: shared with tp rank 1 of the same cp
		 * shard, by design; not with cp rank 1. */
		size_t n = exists(st, &e1, e1.mla, prompt);
		EXPECT_EQ_MSG(n, PAGES, "tp rank 1 sees tp rank 0's replicated "
		              "prompt");
		n = exists(st, &ec, ec.mla, prompt);
		EXPECT_EQ_MSG(n, 0, "cp rank 1 sees cp rank 0's replicated "
		              "prompt");
		e1.sh.name = "tp rank 1 (replicated pool)";
		expect_shared(st, &e0, &e1, prompt, 2, label);
		expect_shared(st, &e0, &e0b, prompt, 3, label);
		remove_objects(st, &e0, prompt);
	}
	eng_free(&e0);
	eng_free(&e1);
	eng_free(&ec);
	eng_free(&e0b);
	kvl_store_close(st);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	run_store("mem:?capacity=64MiB", "embedded store");
	run_store("mem:?capacity=64MiB&verify=1", "embedded store, verifying");
	run_store("fault+mem:?capacity=64MiB", "fault-injection store");
	const char *redis = getenv("KVL_TEST_REDIS_URI");
	const char *any = env_store();
	if ((!redis || !*redis) && any && strncmp(any, "redis", 5) == 0)
		redis = any;
	if (!kvl_has_feature("redis"))
		printf("SKIP redis: this build has no redis:// store\n");
	else if (!redis || !*redis)
		printf("SKIP redis: KVL_TEST_REDIS_URI is not set (e.g. "
		       "redis://127.0.0.1:6379; tests/redis/ start servers)\n");
	else
		run_store(redis, "redis");
	/* Any other store under test, e.g. from tests/mooncake/run.sh. */
	if (any && strncmp(any, "redis", 5) != 0)
		run_store(any, any);
	if (kvl_test_failures()) {
		printf("test_isolation: %d failures\n", kvl_test_failures());
		return 1;
	}
	printf("test_isolation: passed\n");
	return 0;
}
