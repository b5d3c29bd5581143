/* SPDX-License-Identifier: Apache-2.0 */
/*
 * engine_stream.c — the engine around the README's GPU fragment (offload
 * after the engine's event; the compute stream waits for each layer).
 * tests/doc_snippets.py pastes the fragment at the SNIPPET line below.
 *
 * The pools here are in host memory, so the calls take their CPU path:
 * no event (NULL: the pages are written already) and the stream waits
 * wait on the CPU (kvl_linker_wait_stream without GPU pools). Before the
 * fragment a load of earlier pages is queued, so that its batch has work;
 * afterwards the offload and the load must both have completed with every
 * page, and the load's slots hold the stored bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvlink.h>

enum { N_LAYERS = 4, N_SLOTS = 16, PAGE_BYTES = 4096, N_PAGES = 4 };

static uint8_t *pool[N_LAYERS];
static unsigned launched;

static void launch_layer(uint32_t l, void *stream)
{
	(void)stream;
	if (l == launched)
		launched++;
}

static void die(const char *what, const char *msg)
{
	fprintf(stderr, "engine_stream: %s: %s\n", what, msg);
	exit(1);
}

/* Completions polled so far, by request id (10-12). */
static kvl_completion done[3];
static int have[3];

/* Request `want`'s completion, polled (60 s at most). */
static kvl_completion completion_of(kvl_linker *lk, uint64_t want)
{
	for (int tries = 0; !have[want - 10] && tries < 60; tries++) {
		kvl_completion c[4];
		size_t n = 0;
		if (kvl_linker_poll(lk, c, 4, &n, 1000) != 0)
			die("poll", kvl_linker_errmsg(lk));
		for (size_t i = 0; i < n; i++)
			if (c[i].id >= 10 && c[i].id <= 12) {
				done[c[i].id - 10] = c[i];
				have[c[i].id - 10] = 1;
			}
	}
	if (!have[want - 10])
		die("poll", "no completion");
	return done[want - 10];
}

int main(void)
{
	char err[256];
	kvl_layout *layout;
	int kv;
	if (kvl_layout_create("snippet/u8", 16, NULL, &layout, err, sizeof err) ||
	    kvl_layout_add_pool(layout, "kv", KVL_HIT_ALL_PAGES, 0, 0, &kv))
		die("layout", err);
	for (uint32_t l = 0; l < N_LAYERS; l++) {
		pool[l] = malloc(N_SLOTS * PAGE_BYTES);
		if (!pool[l])
			die("pool", "out of memory");
		for (size_t b = 0; b < N_SLOTS * PAGE_BYTES; b++)
			pool[l][b] = (uint8_t)(b * 13 + l);
		kvl_buffer buf = {.base = pool[l], .page_stride = PAGE_BYTES,
		                  .page_bytes = PAGE_BYTES, .num_pages = N_SLOTS};
		if (kvl_layout_add_buffer(layout, kv, "kv", l, &buf))
			die("layout", kvl_layout_errmsg(layout));
	}
	if (kvl_layout_finalize(layout))
		die("layout", kvl_layout_errmsg(layout));
	kvl_store *store;
	kvl_linker *lk;
	if (kvl_store_open("mem:?capacity=64MiB", &store, err, sizeof err) ||
	    kvl_linker_open(store, layout, NULL, &lk, err, sizeof err))
		die("open", err);

	/* Earlier pages (slots 0-3), stored, then queued for slots 8-11. */
	uint64_t tokens[2 * N_PAGES * 16];
	for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++)
		tokens[i] = 5 + i;
	kvl_hash earlier[N_PAGES], pages[N_PAGES];
	size_t n;
	kvl_hash_pages(tokens, N_PAGES * 16, 16, NULL, earlier, N_PAGES, &n);
	kvl_hash_pages(tokens + N_PAGES * 16, N_PAGES * 16, 16, earlier + 3,
	               pages, N_PAGES, &n);
	size_t s_earlier[N_PAGES] = {0, 1, 2, 3}, s_load[N_PAGES] = {8, 9, 10, 11};
	size_t s_new[N_PAGES] = {4, 5, 6, 7};
	const size_t *se[1] = {s_earlier}, *sl[1] = {s_load};
	if (kvl_linker_offload(lk, 10, earlier, N_PAGES, se, NULL) ||
	    kvl_linker_flush(lk, 60000))
		die("offload", kvl_linker_errmsg(lk));
	kvl_completion c = completion_of(lk, 10);
	if (c.status || c.valid_pages != N_PAGES)
		die("offload", kvl_err_name(c.status));
	if (kvl_linker_load(lk, 11, earlier, N_PAGES, sl))
		die("load", kvl_linker_errmsg(lk));

	/* What the fragment names. */
	uint64_t id = 12, batch = 0;
	const size_t *const slots[1] = {s_new};
	void *written_event = NULL, *compute_stream = NULL;
	const uint32_t n_layers = kvl_linker_layers(lk);
	{
		/* @SNIPPET@ */
	}

	int failed = 0;
	if (launched != N_LAYERS) {
		fprintf(stderr, "engine_stream: %u layers launched\n", launched);
		failed = 1;
	}
	c = completion_of(lk, 11);
	printf("load: %s, %zu of %zu pages\n", kvl_err_name(c.status),
	       c.valid_pages, c.n_pages);
	failed |= c.status != 0 || c.valid_pages != N_PAGES;
	kvl_linker_flush(lk, 60000);
	c = completion_of(lk, 12);
	printf("offload: %s, %zu of %zu pages\n", kvl_err_name(c.status),
	       c.valid_pages, c.n_pages);
	failed |= c.status != 0 || c.valid_pages != N_PAGES;
	for (uint32_t l = 0; l < N_LAYERS; l++)
		if (memcmp(pool[l], pool[l] + 8 * PAGE_BYTES,
		           N_PAGES * PAGE_BYTES) != 0) {
			fprintf(stderr, "engine_stream: layer %u restored "
			                "wrong\n", l);
			failed = 1;
		}
	kvl_linker_close(lk);
	kvl_store_close(store);
	kvl_layout_free(layout);
	for (uint32_t l = 0; l < N_LAYERS; l++)
		free(pool[l]);
	return failed;
}
