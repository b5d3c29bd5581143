/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_left_open.c — a program may exit with an embedded store still open
 * (engines often do): in AddressSanitizer builds, LeakSanitizer must then
 * find every object the store holds reachable from the store, and report
 * nothing. The store keeps object records and its large index in memory
 * mapped apart from malloc, which LeakSanitizer scans only where told. In
 * other builds the program only checks that the objects were stored.
 */
#include <stdio.h>
#include <string.h>

#include "kvlink.h"

#include "support/kvl_assert.h"
#include "support/stores.h"

/* Reachable at exit, as an engine's global store would be. */
static kvl_store *g_store;

int main(void)
{
	g_store = open_ok("mem:?capacity=256MiB");
	/* Enough keys for an index mapped on its own. */
	enum { N = 200000 };
	static char payload[100];
	for (unsigned i = 0; i < N; i++) {
		char key[32];
		snprintf(key, sizeof key, "left-open/%u", i);
		memset(payload, (int)i, sizeof payload);
		ASSERT_CODE_MSG(put1(g_store, key, payload, sizeof payload),
		                KVL_PUT_STORED, "put %u", i);
	}
	ASSERT_U64(store_stats(g_store).objects, N);
	printf("PASS test_left_open: %d objects, store left open\n", N);
	return 0; /* no kvl_store_close */
}
