/* SPDX-License-Identifier: MIT */
#ifndef BITNET_PULL_PROGRESS_H
#define BITNET_PULL_PROGRESS_H

#include "hub.h"

#include <stddef.h>

/* How `bitnet-model pull` shows a download on stderr: a bar redrawn in place on a terminal
 * (bytes, rate, time left), a plain line every few seconds otherwise (a log, a pipe). */
struct pull_progress {
	int tty;             /* stderr is a terminal */
	int quiet;           /* --quiet: errors only */
	int bar_shown;       /* a bar is on the terminal's last line, without its newline */
	double next_line_s;  /* not a terminal: the elapsed time of the next line */
};

void pull_progress_init(struct pull_progress *p, int quiet);
/* A bn_hub_reporter on p (ctx = p). */
struct bn_hub_reporter pull_progress_reporter(struct pull_progress *p);
/* The bar's line for a terminal `columns` wide, into out: the file, the percentage, the
 * bar, bytes done of the total, the rate and the time left (or taken, when finished). */
void pull_progress_bar(const struct bn_hub_progress *p, int columns, char *out, size_t cap);

#endif /* BITNET_PULL_PROGRESS_H */
