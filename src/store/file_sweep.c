/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_sweep.c — the sweeper of a file store's leftovers: the files that
 * dead writers left (tmp/ files, data files no entry names; unnamed files
 * went with their writers).
 *
 * Only the first process to open the directory alone runs it, in a
 * background thread started at open and joined at close (which sets
 * `stop` to cut it short). It takes only files of generations below
 * the index's sweep_below, the generations given out before that lone
 * open: no live process writes those, so a file that no entry names is
 * garbage for good. It touches only the directory and the index (under
 * its lock, once, for the live generations).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "store/file.h"


/* A file name that is a generation (16 hex digits), or 0. */
static uint64_t file_name_gen(const char *name)
{
	uint64_t g = 0;
	size_t i = 0;
	for (; name[i] && i < 16; i++) {
		char c = name[i];
		int v = c >= '0' && c <= '9'   ? c - '0'
		        : c >= 'a' && c <= 'f' ? c - 'a' + 10
		                               : -1;
		if (v < 0)
			return 0;
		g = g << 4 | (uint64_t)v;
	}
	return i == 16 && !name[i] ? g : 0;
}

/* Unlinks the files of dir/sub of generations below `below` that are not
 * in live[] (n sorted; NULL: none is kept). */
static void file_sweep_dir(struct file_store *f, const char *sub,
                           uint64_t below, const uint64_t *live, size_t n)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/%s", f->dir, sub);
	DIR *d = opendir(p);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d)) && !atomic_load(&f->stop)) {
		uint64_t g = file_name_gen(de->d_name);
		if (!g || g >= below)
			continue;
		size_t lo = 0, hi = live ? n : 0;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (live[mid] < g)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (live && lo < n && live[lo] == g)
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) == 0)
			f->swept++;
	}
	closedir(d);
}

/* Removes what dead writers left: files no entry names, of generations
 * older than this process's lone open (no live process writes those). */
void *kvl__file_sweeper(void *arg)
{
	struct file_store *f = arg;
	uint64_t *live = NULL;
	size_t n = 0;
	if (kvl__fidx_lock(&f->ix) < 0)
		return NULL;
	int rc = kvl__fidx_live_gens(&f->ix, &live, &n);
	kvl__fidx_unlock(&f->ix);
	if (rc < 0)
		return NULL;
	file_sweep_dir(f, "tmp", f->ix.sweep_below, NULL, 0);
	for (int x = 0; x < 256 && !atomic_load(&f->stop); x++) {
		char sub[16];
		snprintf(sub, sizeof sub, "data/%02x", x);
		file_sweep_dir(f, sub, f->ix.sweep_below, live, n);
	}
	free(live);
	return NULL;
}
