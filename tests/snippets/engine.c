/* SPDX-License-Identifier: Apache-2.0 */
/*
 * engine.c — the engine around the README's minimal engine loop (a
 * fragment: tests/doc_snippets.py pastes it at the SNIPPET line below).
 *
 * It declares what the loop assumes (32 layers of K and V pools in host
 * memory, a prompt's tokens, the slots of the request that was prefilled
 * and free slots for the next one, a forward pass) and checks that the loop
 * did what it says: the prompt's pages were offloaded, the lookup found all
 * of them, the load restored them into the free slots byte for byte, and
 * both requests completed once with status 0.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvlink.h>

#define UNUSED __attribute__((unused))

enum { N_LAYERS = 32, N_SLOTS = 16, PAGE_BYTES = 4096, N_TOKENS = 100 };

static uint8_t *k_pool[N_LAYERS], *v_pool[N_LAYERS];
static const size_t page_bytes = PAGE_BYTES, n_slots = N_SLOTS;
static uint64_t tokens[N_TOKENS];
static const size_t n_tokens = N_TOKENS;
static size_t slots_of_request[8] = {0, 1, 2, 3, 4, 5, 6, 7};
static size_t free_slots[8] = {8, 9, 10, 11, 12, 13, 14, 15};
static const uint64_t request_id = 1, other_id = 2;
static unsigned layers_run;
static int failed;

static UNUSED void die(const char *msg)
{
	fprintf(stderr, "engine: %s\n", msg);
	exit(1);
}

static UNUSED void run_layer(uint32_t l)
{
	if (l != layers_run)
		die("layers out of order");
	layers_run++;
}

#define CHECK(cond, ...)                                                   \
	do {                                                                \
		if (!(cond)) {                                              \
			fprintf(stderr, "engine: " __VA_ARGS__);           \
			fprintf(stderr, " (%s)\n", #cond);                 \
			failed = 1;                                         \
		}                                                           \
	} while (0)

/* What the loop asked for, and what came back. */
static size_t offloaded = SIZE_MAX, loaded = SIZE_MAX;
static kvl_completion seen[8];
static size_t n_seen;

static int snip_offload(kvl_linker *lk, uint64_t id, const kvl_hash *pages,
                        size_t n, const size_t *const *slots, void *event)
{
	int rc = kvl_linker_offload(lk, id, pages, n, slots, event);
	CHECK(rc == 0, "offload: %s", kvl_linker_errmsg(lk));
	offloaded = n;
	return rc;
}

static int snip_load(kvl_linker *lk, uint64_t id, const kvl_hash *pages,
                     size_t n, const size_t *const *slots)
{
	int rc = kvl_linker_load(lk, id, pages, n, slots);
	CHECK(rc == 0, "load: %s", kvl_linker_errmsg(lk));
	loaded = n;
	return rc;
}

static int snip_poll(kvl_linker *lk, kvl_completion *out, size_t cap,
                     size_t *n_out, uint32_t timeout_ms)
{
	int rc = kvl_linker_poll(lk, out, cap, n_out, timeout_ms);
	for (size_t i = 0; rc == 0 && i < *n_out && n_seen < 8; i++)
		seen[n_seen++] = out[i];
	return rc;
}

/* Before closing: the completions the loop has not polled yet (a load
 * completes just after its last layer), then every check. */
static void snip_close(kvl_linker *lk)
{
	kvl_completion c[8];
	size_t n = 0;
	for (int tries = 0; n_seen < 2 && tries < 60; tries++)
		snip_poll(lk, c, 8, &n, 1000);
	CHECK(offloaded == 6, "offloaded %zu pages, not 6", offloaded);
	CHECK(loaded == offloaded, "lookup found %zu of %zu pages", loaded,
	      offloaded);
	CHECK(layers_run == N_LAYERS, "ran %u layers", layers_run);
	CHECK(n_seen == 2, "%zu completions", n_seen);
	for (size_t i = 0; i < n_seen; i++) {
		printf("completion: id %llu, status %s, %zu of %zu pages valid\n",
		       (unsigned long long)seen[i].id,
		       kvl_err_name(seen[i].status), seen[i].valid_pages,
		       seen[i].n_pages);
		CHECK(seen[i].status == 0 && seen[i].valid_pages == 6 &&
		              seen[i].n_pages == 6,
		      "request %llu", (unsigned long long)seen[i].id);
	}
	size_t wrong = 0;
	for (uint32_t l = 0; l < N_LAYERS; l++)
		for (size_t i = 0; i < 6; i++) {
			size_t a = slots_of_request[i] * PAGE_BYTES,
			       b = free_slots[i] * PAGE_BYTES;
			wrong += memcmp(k_pool[l] + a, k_pool[l] + b,
			                PAGE_BYTES) != 0;
			wrong += memcmp(v_pool[l] + a, v_pool[l] + b,
			                PAGE_BYTES) != 0;
		}
	CHECK(wrong == 0, "%zu of %d restored layer pages differ", wrong,
	      2 * N_LAYERS * 6);
	kvl_linker_close(lk);
}

#define kvl_linker_offload snip_offload
#define kvl_linker_load snip_load
#define kvl_linker_poll snip_poll
#define kvl_linker_close snip_close

int main(void)
{
	for (size_t i = 0; i < N_TOKENS; i++)
		tokens[i] = 1000 + i * 7;
	for (uint32_t l = 0; l < N_LAYERS; l++) {
		k_pool[l] = calloc(N_SLOTS, PAGE_BYTES);
		v_pool[l] = calloc(N_SLOTS, PAGE_BYTES);
		if (!k_pool[l] || !v_pool[l])
			die("out of memory");
		for (size_t b = 0; b < 8 * PAGE_BYTES; b++) {
			k_pool[l][b] = (uint8_t)(b * 31 + l);
			v_pool[l][b] = (uint8_t)(b * 17 + l + 1);
		}
	}
	{
		/* @SNIPPET@ */
	}
	for (uint32_t l = 0; l < N_LAYERS; l++) {
		free(k_pool[l]);
		free(v_pool[l]);
	}
	if (failed)
		return 1;
	printf("engine: the loop offloaded, found and restored 6 pages\n");
	return 0;
}
