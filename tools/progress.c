/* SPDX-License-Identifier: Apache-2.0 */
/*
 * progress.c — the progress bar of the tool's long commands (cli.h): one
 * line on standard error, redrawn in place, as wide as the terminal
 * ($COLUMNS, else the terminal's width, else 80), with the rate and the
 * time left. Redrawn at most ten times a second.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli.h"

#define REDRAW_NS 100000000ull

static int width(void)
{
	const char *c = getenv("COLUMNS");
	int w = c ? atoi(c) : 0;
	struct winsize ws;
	if (w <= 0 && ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		w = ws.ws_col;
	if (w <= 0)
		w = 80;
	return w < 20 ? 20 : w > 400 ? 400 : w;
}

void kvl_cli_progress_start(kvl_cli_progress *p, int on, const char *unit)
{
	*p = (kvl_cli_progress){.on = on, .unit = unit,
	                        .t0_ns = kvl_cli_now_ns()};
}

/* "3 s", "4 min 5 s", "2 h 3 min". */
static void duration(char *out, size_t len, double s)
{
	unsigned long long t = (unsigned long long)(s + 0.5);
	if (t < 60)
		snprintf(out, len, "%llu s", t);
	else if (t < 3600)
		snprintf(out, len, "%llu min %llu s", t / 60, t % 60);
	else
		snprintf(out, len, "%llu h %llu min", t / 3600, t / 60 % 60);
}

void kvl_cli_progress_show(kvl_cli_progress *p, size_t done, size_t total,
                           const char *label)
{
	if (!p->on || total == 0)
		return;
	uint64_t now = kvl_cli_now_ns();
	if (done < total && now - p->shown_ns < REDRAW_NS)
		return;
	p->shown_ns = now;
	double el = (double)(now - p->t0_ns) / 1e9;
	double rate = el > 0 ? (double)done / el : 0;
	char eta[32] = "?";
	if (rate > 0)
		duration(eta, sizeof eta, (double)(total - done) / rate);
	char text[256];
	int n = snprintf(text, sizeof text, " %3d%% %zu/%zu %s, %.0f/s, "
	                 "ETA %s%s%s",
	                 (int)(done * 100 / total), done, total, p->unit, rate,
	                 eta, label ? " " : "", label ? label : "");
	int w = width() - 1; /* the cursor's column stays free */
	int bar = w - n - 2;
	if (bar < 10) { /* a narrow terminal: the text is cut instead */
		bar = 10;
		n = w - bar - 2 > 0 ? w - bar - 2 : 0;
	}
	int fill = (int)((double)bar * (double)done / (double)total);
	char line[512];
	int at = 0;
	line[at++] = '[';
	for (int i = 0; i < bar; i++)
		line[at++] = i < fill ? '#' : ' ';
	line[at++] = ']';
	memcpy(line + at, text, (size_t)n);
	at += n;
	line[at] = '\0';
	fprintf(stderr, "\r%s\033[K", line);
	fflush(stderr);
}

void kvl_cli_progress_end(kvl_cli_progress *p)
{
	if (!p->on)
		return;
	fputs("\r\033[K", stderr);
	fflush(stderr);
}
