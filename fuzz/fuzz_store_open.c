/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_store_open.c — libFuzzer target: kvl_store_open on arbitrary URIs of
 * the embedded and fault-injection stores, then one small round trip
 * through the store it opened.
 *
 * Input: byte 0 picks a prefix (none, "mem:", "mem:?", "fault+mem:?",
 * "fault+fault+mem:?", "fault+mem:?fault.", …); the rest, cut at its first
 * NUL, follows it. URIs whose innermost scheme (after every "fault+") is a
 * networked store (redis…), the file store (it writes into directories)
 * or a tier store (whose tiers may be either) are skipped: this target
 * touches nothing outside the process.
 *
 * Checked on every input:
 *  - a failure is one of the documented codes of kvl_store_open (EPARSE,
 *    ENOTSUP, EIO, EINVAL — a secret_file that is no secret —, ENOMEM)
 *    with a non-empty message, and *out untouched;
 *  - a success gives a store that answers put, exists, get, remove and
 *    stats without crashing: results in their documented ranges, and the
 *    bytes of a successful get are the bytes put unless the fault store
 *    corrupts reads (fault.corrupt) — which the per-key result never tells,
 *    so that case is only checked for range.
 * A fault store's latency is set to 0 first (fault.latency_ms may ask for an
 * hour), and the store is closed at the end (ASan: no leak).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/uri.h"
#include "store/fault.h"

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr,                                      \
			        "fuzz_store_open: check failed: %s (line %d)\n", \
			        #cond, __LINE__);                            \
			abort();                                             \
		}                                                            \
	} while (0)

static const char *const prefixes[] = {
	"",
	"mem:",
	"mem:?",
	"mem:?capacity=",
	"fault+mem:?",
	"fault+mem:?fault.",
	"fault+fault+mem:?",
	"fault+",
	"MEM:?",
	"mem:?policy=",
};

/* 1 when the innermost scheme (after any number of "fault+") names a store
 * that would reach outside the process. */
static int reaches_out(const char *uri)
{
	kvl__uri u;
	if (kvl__uri_parse(uri, &u, NULL, 0) < 0)
		return 0;
	const char *sch = u.scheme;
	while (strncmp(sch, "fault+", 6) == 0)
		sch += 6;
	int net = strncmp(sch, "redis", 5) == 0 || strcmp(sch, "file") == 0 ||
	          strcmp(sch, "tier") == 0;
	kvl__uri_free(&u);
	return net;
}

static int open_code_ok(int rc)
{
	return rc == KVL_EPARSE || rc == KVL_ENOTSUP || rc == KVL_EIO ||
	       rc == KVL_EINVAL || rc == KVL_ENOMEM;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	const char *pre = prefixes[data[0] % (sizeof prefixes /
	                                       sizeof prefixes[0])];
	size_t plen = strlen(pre);
	char *uri = malloc(plen + size);
	if (!uri)
		return 0;
	memcpy(uri, pre, plen);
	memcpy(uri + plen, data + 1, size - 1);
	uri[plen + size - 1] = '\0';
	if (reaches_out(uri)) {
		free(uri);
		return 0;
	}

	kvl_store *st = (kvl_store *)(uintptr_t)0x1;
	char err[KVL__ERRMSG_MAX];
	memset(err, 'x', sizeof err);
	int rc = kvl_store_open(uri, &st, err, sizeof err);
	CHECK(memchr(err, '\0', sizeof err) != NULL);
	if (rc < 0) {
		CHECK(open_code_ok(rc));
		CHECK(err[0] != '\0');
		CHECK(st == (kvl_store *)(uintptr_t)0x1);
		free(uri);
		return 0;
	}
	CHECK(rc == 0 && st && err[0] == '\0');

	/* A fault store never sleeps here; corruption is noted. */
	int corrupting = 0;
	kvl__fault_cfg cfg;
	if (kvl__fault_get(st, &cfg) == 0) { /* a fault store */
		corrupting = cfg.corrupt > 0.0;
		cfg.latency_ms = 0;
		CHECK(kvl__fault_set(st, &cfg) == 0);
	}

	/* One round trip. */
	uint8_t obj[96], back[96];
	for (size_t i = 0; i < sizeof obj; i++)
		obj[i] = (uint8_t)(i * 7 + size);
	const char *keys[2] = {"fuzz:key:0", "fuzz:key:1"};
	kvl_iov pieces[3] = {{obj, 40}, {obj + 40, 56}, {obj, 0}};
	size_t n_pieces[2] = {2, 1};
	int res[2] = {-100, -100};
	rc = kvl_store_put(st, keys, 2, pieces, n_pieces, res);
	CHECK(rc <= 0);
	for (int i = 0; i < 2; i++)
		CHECK(res[i] == KVL_PUT_STORED || res[i] == KVL_PUT_PRESENT ||
		      res[i] < 0);
	rc = kvl_store_exists(st, keys, 2, res);
	CHECK(rc <= 0);
	for (int i = 0; rc == 0 && i < 2; i++)
		CHECK(res[i] == 0 || res[i] == 1 || res[i] < 0);
	memset(back, 0, sizeof back);
	kvl_range rg[2] = {{.offset = 0, .addr = back, .len = 96},
	                   {.offset = 0, .addr = back, .len = 0}};
	size_t n_rg[2] = {1, 1};
	int got[2] = {-100, -100};
	rc = kvl_store_get(st, keys, 2, rg, n_rg, got);
	CHECK(rc <= 0);
	if (rc == 0) {
		CHECK(got[0] == 0 || got[0] < 0);
		CHECK(got[1] == 0 || got[1] < 0);
		if (got[0] == 0 && !corrupting)
			CHECK(memcmp(obj, back, 96) == 0);
	}
	kvl_store_stats stats;
	CHECK(kvl_store_stats_get(st, &stats) == 0);
	char text[4096];
	size_t need = 0;
	rc = kvl_store_stats_render(st, KVL_STATS_JSON, text, sizeof text,
	                            &need);
	CHECK(rc == 0 || rc == KVL_ERANGE);
	rc = kvl_store_remove(st, keys, 2, res);
	CHECK(rc <= 0);
	kvl_store_close(st);
	free(uri);
	return 0;
}
