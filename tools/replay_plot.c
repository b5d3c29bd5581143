/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay_plot.c — the token hit ratios of a sweep as an SVG line plot:
 * capacity (log scale when it spans a decade) against hit ratio, one line
 * per policy.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "replay.h"

static const char *const plot_colors[] = {"#1f77b4", "#d62728", "#2ca02c",
                                          "#9467bd", "#ff7f0e", "#8c564b",
                                          "#e377c2", "#7f7f7f"};

/* Writes s with XML's special characters escaped. */
static void xml_str(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs("&quot;", f); break;
		default: fputc(*s, f);
		}
	}
}

/* "500", "2k", "10k", "1.5M" */
static void short_count(char *buf, size_t len, double v)
{
	if (v >= 1e6)
		snprintf(buf, len, "%gM", v / 1e6);
	else if (v >= 1e3)
		snprintf(buf, len, "%gk", v / 1e3);
	else
		snprintf(buf, len, "%g", v);
}

/* Hit ratio against capacity, one line per policy. results[p * n_caps + c]
 * is policy p at capacity o->sweep[c]. 0, or 1 after printing why. */
int rp_write_plot(const rp_opts *o, const rp_trace *t,
                      const rp_result *results, size_t n_pol)
{
	FILE *f = fopen(o->plot, "w");
	if (!f) {
		fprintf(stderr, "kvlink replay: cannot write %s: %s\n", o->plot,
		        strerror(errno));
		return 1;
	}
	const double W = 800, H = 500, L = 80, R = 190, T = 64, B = 70;
	const double pw = W - L - R, ph = H - T - B;
	size_t nc = o->n_sweep;
	/* Finite capacities on the x axis; unlimited gets its own column. */
	double lo = 0, hi = 0;
	int has_unl = 0;
	for (size_t c = 0; c < nc; c++) {
		if (o->sweep[c] == RP_UNLIMITED) {
			has_unl = 1;
			continue;
		}
		double v = (double)o->sweep[c];
		if (lo == 0 || v < lo)
			lo = v;
		if (v > hi)
			hi = v;
	}
	int finite = lo > 0;
	if (finite && hi == lo) {
		lo /= 2;
		hi *= 2;
	}
	int logx = finite && hi / lo >= 8;
	double xw = has_unl ? pw - 70 : pw; /* width of the finite part */
	double ymax = 0;
	for (size_t i = 0; i < n_pol * nc; i++) {
		double y = 100 * rp_ratio(results[i].hit_tokens, t->input_tokens);
		if (y > ymax)
			ymax = y;
	}
	double ytop = ymax <= 0 ? 10 : (double)((int)(ymax / 10) + 1) * 10;
	if (ytop > 100)
		ytop = 100;
	double ystep = ytop <= 30 ? 5 : 10;
#define PX(v) (logx ? L + xw * (log10(v) - log10(lo)) / (log10(hi) - log10(lo)) \
                    : L + xw * ((v) - lo) / (hi - lo))
#define PY(v) (T + ph * (1 - (v) / ytop))
	double xunl = L + pw - 25;

	fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" "
	           "height=\"%g\" viewBox=\"0 0 %g %g\" "
	           "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
	        W, H, W, H);
	fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
	/* Title and subtitle. */
	const char *base = strrchr(t->path, '/');
	base = base ? base + 1 : t->path;
	fprintf(f, "<text x=\"%g\" y=\"26\" font-size=\"17\" "
	           "font-weight=\"bold\" text-anchor=\"middle\">"
	           "Token hit ratio vs. store capacity: ",
	        W / 2);
	xml_str(f, base);
	fprintf(f, "</text>\n");
	fprintf(f, "<text x=\"%g\" y=\"46\" font-size=\"12\" fill=\"#444\" "
	           "text-anchor=\"middle\">kvlink replay: %zu requests, "
	           "%zu blocks of %llu tokens, through the linker and the "
	           "embedded store</text>\n",
	        W / 2, t->n_reqs, t->n_ids,
	        (unsigned long long)o->block_tokens);
	/* Grid and y ticks. */
	for (double y = 0; y <= ytop + 1e-9; y += ystep) {
		fprintf(f, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" "
		           "stroke=\"#e3e3e3\"/>\n",
		        L, PY(y), L + pw, PY(y));
		fprintf(f, "<text x=\"%g\" y=\"%.1f\" font-size=\"12\" "
		           "text-anchor=\"end\">%g</text>\n",
		        L - 8, PY(y) + 4, y);
	}
	/* x ticks: 1-2-5 steps on a log axis, else about 6 even steps. */
	if (finite) {
		double ticks[64];
		size_t nt = 0;
		if (logx) {
			for (double d = pow(10, floor(log10(lo))); d <= hi * 1.0001;
			     d *= 10)
				for (int k = 0; k < 3 && nt < 64; k++) {
					double v = d * (k == 0 ? 1 : k == 1 ? 2 : 5);
					if (v >= lo * 0.9999 && v <= hi * 1.0001)
						ticks[nt++] = v;
				}
		} else {
			double raw = (hi - lo) / 6, mag = pow(10, floor(log10(raw)));
			double step = raw / mag < 1.5 ? mag :
			              raw / mag < 3.5 ? 2 * mag :
			              raw / mag < 7.5 ? 5 * mag : 10 * mag;
			for (double v = ceil(lo / step) * step;
			     v <= hi * 1.0001 && nt < 64; v += step)
				ticks[nt++] = v;
		}
		for (size_t i = 0; i < nt; i++) {
			char lb[32];
			short_count(lb, sizeof lb, ticks[i]);
			fprintf(f, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" "
			           "y2=\"%g\" stroke=\"#e3e3e3\"/>\n",
			        PX(ticks[i]), T, PX(ticks[i]), T + ph);
			fprintf(f, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" "
			           "y2=\"%g\" stroke=\"#333\"/>\n",
			        PX(ticks[i]), T + ph, PX(ticks[i]), T + ph + 5);
			fprintf(f, "<text x=\"%.1f\" y=\"%g\" font-size=\"12\" "
			           "text-anchor=\"middle\">%s</text>\n",
			        PX(ticks[i]), T + ph + 20, lb);
		}
	}
	if (has_unl) {
		fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" "
		           "stroke=\"#333\"/>\n",
		        xunl, T + ph, xunl, T + ph + 5);
		fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"12\" "
		           "text-anchor=\"middle\">unlimited</text>\n",
		        xunl, T + ph + 20);
	}
	/* Axes and their labels. */
	fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" "
	           "fill=\"none\" stroke=\"#333\"/>\n",
	        L, T, pw, ph);
	fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"13\" "
	           "text-anchor=\"middle\">store capacity (blocks of %llu "
	           "tokens%s)</text>\n",
	        L + pw / 2, H - 22, (unsigned long long)o->block_tokens,
	        logx ? ", log scale" : "");
	fprintf(f, "<text x=\"22\" y=\"%g\" font-size=\"13\" "
	           "text-anchor=\"middle\" transform=\"rotate(-90 22 %g)\">"
	           "token hit ratio (%%)</text>\n",
	        T + ph / 2, T + ph / 2);
	/* One line per policy; the segment to "unlimited" is dashed. */
	for (size_t p = 0; p < n_pol; p++) {
		const char *col = plot_colors[p % 8];
		const rp_result *rs = results + p * nc;
		double lx = -1, ly = 0;
		fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" "
		           "stroke-width=\"2.2\" points=\"",
		        col);
		for (size_t c = 0; c < nc; c++) {
			if (o->sweep[c] == RP_UNLIMITED)
				continue;
			lx = PX((double)o->sweep[c]);
			ly = PY(100 * rp_ratio(rs[c].hit_tokens, t->input_tokens));
			fprintf(f, "%.1f,%.1f ", lx, ly);
		}
		fprintf(f, "\"/>\n");
		for (size_t c = 0; c < nc; c++) {
			double y = 100 * rp_ratio(rs[c].hit_tokens, t->input_tokens);
			double x = o->sweep[c] == RP_UNLIMITED
			                   ? xunl
			                   : PX((double)o->sweep[c]);
			if (o->sweep[c] == RP_UNLIMITED && lx >= 0)
				fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" "
				           "x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
				           "stroke-width=\"1.5\" "
				           "stroke-dasharray=\"5,4\"/>\n",
				        lx, ly, x, PY(y), col);
			fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" "
			           "fill=\"%s\"><title>%s, %s: %.2f %%</title>"
			           "</circle>\n",
			        x, PY(y), col, rs[c].policy,
			        o->sweep[c] == RP_UNLIMITED ? "unlimited" : "",
			        y);
		}
	}
	/* Legend. */
	double lgx = L + pw + 20, lgy = T + 10;
	fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"13\" "
	           "font-weight=\"bold\">eviction policy</text>\n",
	        lgx, lgy);
	for (size_t p = 0; p < n_pol; p++) {
		double y = lgy + 24 + 22 * (double)p;
		fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" "
		           "stroke=\"%s\" stroke-width=\"2.2\"/>\n",
		        lgx, y - 4, lgx + 26, y - 4, plot_colors[p % 8]);
		fprintf(f, "<circle cx=\"%g\" cy=\"%g\" r=\"3.5\" fill=\"%s\"/>\n",
		        lgx + 13, y - 4, plot_colors[p % 8]);
		fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"13\">", lgx + 34,
		        y);
		xml_str(f, results[p * nc].policy);
		if (!strcmp(results[p * nc].policy, kvl_mem_policy_name(0)))
			fputs(" (default)", f);
		fputs("</text>\n", f);
	}
	/* The values at each capacity, under the legend. */
	double ty = lgy + 24 + 22 * (double)n_pol + 18;
	fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"12\" "
	           "font-weight=\"bold\">token hits (%%)</text>\n",
	        lgx, ty);
	for (size_t c = 0; c < nc && c < 14; c++) {
		char lb[32];
		if (o->sweep[c] == RP_UNLIMITED)
			snprintf(lb, sizeof lb, "\u221e"); /* infinity */
		else
			short_count(lb, sizeof lb, (double)o->sweep[c]);
		ty += 17;
		fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"11\">%s</text>\n",
		        lgx, ty, lb);
		for (size_t p = 0; p < n_pol && p < 2; p++)
			fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"11\" "
			           "fill=\"%s\" text-anchor=\"end\">%.2f</text>\n",
			        lgx + 95 + 55 * (double)p, ty, plot_colors[p % 8],
			        100 * rp_ratio(results[p * nc + c].hit_tokens,
			                    t->input_tokens));
	}
	fprintf(f, "</svg>\n");
#undef PX
#undef PY
	if (fclose(f)) {
		fprintf(stderr, "kvlink replay: writing %s: %s\n", o->plot,
		        strerror(errno));
		return 1;
	}
	return 0;
}

