/* SPDX-License-Identifier: MIT */
/* pull_progress.c — the download as a person watches it (pull_progress.h). */
#include "pull_progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define LINE_EVERY_S 5.0
#define NAME_MAX_SHOWN 32

void pull_progress_init(struct pull_progress *p, int quiet)
{
	const char *term = getenv("TERM");
	memset(p, 0, sizeof(*p));
	p->quiet = quiet;
	p->tty = isatty(STDERR_FILENO) && !(term && strcmp(term, "dumb") == 0);
	p->next_line_s = LINE_EVERY_S; /* a download over sooner says only that it is done */
}

static int columns(void)
{
	struct winsize ws;
	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
		return ws.ws_col;
	return 80;
}

/* "1:02:03", "2:05", or "-:--" before the rate is known. */
static void duration(double s, char *out, size_t cap)
{
	if (s < 0 || s > 360000) {
		snprintf(out, cap, "-:--");
		return;
	}
	unsigned t = (unsigned)(s + 0.5);
	if (t >= 3600)
		snprintf(out, cap, "%u:%02u:%02u", t / 3600, t / 60 % 60, t % 60);
	else
		snprintf(out, cap, "%u:%02u", t / 60, t % 60);
}

/* The file's name, its start cut with "..." when long: the end says which quantization. */
static void short_name(const char *name, char *out, size_t cap)
{
	size_t len = strlen(name);
	if (len <= NAME_MAX_SHOWN)
		snprintf(out, cap, "%s", name);
	else
		snprintf(out, cap, "...%s", name + len - (NAME_MAX_SHOWN - 3));
}

void pull_progress_bar(const struct bn_hub_progress *p, int cols, char *out, size_t cap)
{
	char name[NAME_MAX_SHOWN + 1], done[32], total[32], rate[32], time[32], tail[160];
	double frac = p->total ? (double)p->done / (double)p->total : 1.0;
	short_name(p->file, name, sizeof(name));
	bn_hub_size_text(p->done, done);
	bn_hub_size_text(p->total, total);
	char per_s[32];
	if (p->rate > 0)
		snprintf(rate, sizeof(rate), "%s/s", bn_hub_size_text((uint64_t)p->rate, per_s));
	else
		snprintf(rate, sizeof(rate), "-- B/s");
	duration(p->finished ? p->elapsed_s : p->eta_s, time, sizeof(time));
	snprintf(tail, sizeof(tail), " %s/%s  %s  %s %s", done, total, rate,
		 p->finished ? "in" : "ETA", time);
	char head[NAME_MAX_SHOWN + 16];
	snprintf(head, sizeof(head), "%s %3d%% ", name, (int)(frac * 100.0));
	int width = cols - 1 - (int)strlen(head) - (int)strlen(tail) - 2;
	if (width < 10) { /* too narrow for a bar: the numbers alone */
		snprintf(out, cap, "%s%s", head, tail + 1);
		return;
	}
	char bar[512];
	int fill = (int)(frac * width);
	width = width < (int)sizeof(bar) - 1 ? width : (int)sizeof(bar) - 1;
	for (int i = 0; i < width; i++)
		bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
	bar[width] = '\0';
	snprintf(out, cap, "%s[%s]%s", head, bar, tail);
}

static void clear_bar(struct pull_progress *pp)
{
	if (pp->bar_shown)
		fputs("\r\033[K", stderr);
	pp->bar_shown = 0;
}

static void on_note(void *ctx, const char *text)
{
	struct pull_progress *pp = ctx;
	if (pp->quiet)
		return;
	clear_bar(pp);
	fprintf(stderr, "bitnet-model: %s\n", text);
}

static void plain_line(const struct bn_hub_progress *p)
{
	char done[32], total[32], rate[32], time[32];
	bn_hub_size_text(p->done, done);
	bn_hub_size_text(p->total, total);
	bn_hub_size_text((uint64_t)p->rate, rate);
	duration(p->finished ? p->elapsed_s : p->eta_s, time, sizeof(time));
	if (p->finished)
		fprintf(stderr, "bitnet-model: %s: %s in %s (%s/s)\n", p->file, total, time, rate);
	else if (p->rate > 0)
		fprintf(stderr, "bitnet-model: %s: %d%% (%s of %s) at %s/s, %s left\n", p->file,
			(int)(p->total ? 100.0 * (double)p->done / (double)p->total : 100.0), done,
			total, rate, time);
	else /* stalled, or not yet measured */
		fprintf(stderr, "bitnet-model: %s: %d%% (%s of %s)\n", p->file,
			(int)(p->total ? 100.0 * (double)p->done / (double)p->total : 100.0), done,
			total);
}

static void on_progress(void *ctx, const struct bn_hub_progress *p)
{
	struct pull_progress *pp = ctx;
	if (pp->quiet)
		return;
	if (!pp->tty) {
		if (p->finished || p->elapsed_s >= pp->next_line_s) {
			pp->next_line_s = p->elapsed_s + LINE_EVERY_S;
			plain_line(p);
		}
		return;
	}
	char line[768];
	pull_progress_bar(p, columns(), line, sizeof(line));
	fprintf(stderr, "\r%s\033[K%s", line, p->finished ? "\n" : "");
	pp->bar_shown = !p->finished;
	fflush(stderr);
}

struct bn_hub_reporter pull_progress_reporter(struct pull_progress *p)
{
	return (struct bn_hub_reporter){ on_note, on_progress, p };
}
