/* SPDX-License-Identifier: Apache-2.0 */
/* tmpdir.c — throwaway directories for tests (tmpdir.h). */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvl_assert.h"
#include "tmpdir.h"

char *tmpdir_make(const char *tag)
{
	const char *base = getenv("TMPDIR");
	char *p = malloc(4096);
	if (!p)
		abort(); /* out of memory in a test */
	snprintf(p, 4096, "%s/kvl-%s-XXXXXX", base && *base ? base : "/tmp",
	         tag);
	ASSERT_TRUE_MSG(mkdtemp(p) != NULL, "mkdtemp(%s) failed", p);
	return p;
}

char *tmpdir_sub(const char *parent, const char *name)
{
	char *p = malloc(4096);
	if (!p)
		abort(); /* out of memory in a test */
	snprintf(p, 4096, "%s/%s", parent, name);
	ASSERT_TRUE_MSG(mkdir(p, 0755) == 0, "mkdir(%s) failed", p);
	return p;
}

static int tmpdir_rm1(const char *path, const struct stat *st, int flag,
                      struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void tmpdir_remove(char *path)
{
	if (!path)
		return;
	nftw(path, tmpdir_rm1, 16, FTW_DEPTH | FTW_PHYS);
	free(path);
}
