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

/* Reachable at exit, as an engine's global store would be. */
static kvl_store *g_store;

int main(void)
{
	char err[256] = "";
	if (kvl_store_open("mem:?capacity=256MiB", &g_store, err, sizeof err)) {
		printf("FAIL open: %s\n", err);
		return 1;
	}
	/* Enough keys for an index mapped on its own. */
	enum { N = 200000 };
	static char payload[100];
	for (unsigned i = 0; i < N; i++) {
		char key[32];
		const char *kp = key;
		snprintf(key, sizeof key, "left-open/%u", i);
		memset(payload, (int)i, sizeof payload);
		kvl_iov iov = {payload, sizeof payload};
		size_t one = 1;
		int res;
		if (kvl_store_put(g_store, &kp, 1, &iov, &one, &res) ||
		    res != KVL_PUT_STORED) {
			printf("FAIL put %u: %s\n", i, kvl_err_name(res));
			return 1;
		}
	}
	kvl_store_stats st;
	kvl_store_stats_get(g_store, &st);
	if (st.objects != N) {
		printf("FAIL: %llu objects stored, want %d\n",
		       (unsigned long long)st.objects, N);
		return 1;
	}
	printf("PASS test_left_open: %d objects, store left open\n", N);
	return 0; /* no kvl_store_close */
}
