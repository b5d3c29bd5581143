/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_args.h — the benchmarks' shared argument parsing (header only:
 * each bench_*.c is a program of its own).
 */
#ifndef KVL_BENCH_ARGS_H
#define KVL_BENCH_ARGS_H

#include <string.h>

#include "kvlink.h"

/* A comma-separated list of byte sizes, each as kvl_parse_size takes it
 * ("64K", "1MiB", "4096"), into sizes (at most max; more are ignored).
 * Returns how many, or -1 at the first malformed one. Modifies list. */
static inline int bench_sizes(char *list, size_t *sizes, int max)
{
	int n = 0;
	for (char *s = strtok(list, ","); s && n < max; s = strtok(NULL, ",")) {
		uint64_t v;
		if (kvl_parse_size(s, &v) != 0)
			return -1;
		sizes[n++] = (size_t)v;
	}
	return n;
}

#endif
