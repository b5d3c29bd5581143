/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shell.c — shell commands for the tests (shell.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <sys/wait.h>

#include "kvl_assert.h"
#include "shell.h"

int shell(char *out, size_t cap, const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	FILE *f = popen(cmd, "r");
	ASSERT_TRUE_MSG(f != NULL, "popen(%s) failed", cmd);
	size_t n = 0;
	char tmp[4096];
	size_t r;
	while ((r = fread(tmp, 1, sizeof tmp, f)) > 0)
		for (size_t i = 0; i < r; i++)
			if (out && n + 1 < cap)
				out[n++] = tmp[i];
	int st = pclose(f);
	if (out) {
		while (n && (out[n - 1] == '\n' || out[n - 1] == ' '))
			n--;
		out[n] = '\0';
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
