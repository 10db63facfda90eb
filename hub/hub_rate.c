/* SPDX-License-Identifier: MIT */
/*
 * hub_rate.c — how fast a download goes, and so how long it has left. The rate is measured
 * over the last five seconds, not since the start: a connection that slowed down (or a
 * resumed download, whose first bytes were already there) would otherwise promise an end
 * that never comes.
 */
#include "hub_internal.h"

#include <string.h>

#define SAMPLE_GAP_S 0.1
#define WINDOW_S 5.0

void hub_rate_start(struct hub_rate *r, uint64_t done, double now)
{
	memset(r, 0, sizeof(*r));
	r->t0 = now;
	r->last_report = now;
	r->start = done;
	r->t[0] = now;
	r->bytes[0] = done;
	r->n = 1;
}

static unsigned newest(const struct hub_rate *r)
{
	return (r->head + r->n - 1) % HUB_RATE_SAMPLES;
}

int hub_rate_sample(struct hub_rate *r, uint64_t done, double now)
{
	if (now - r->t[newest(r)] >= SAMPLE_GAP_S) {
		if (r->n == HUB_RATE_SAMPLES) {
			r->head = (r->head + 1) % HUB_RATE_SAMPLES;
			r->n--;
		}
		unsigned at = (r->head + r->n) % HUB_RATE_SAMPLES;
		r->t[at] = now;
		r->bytes[at] = done;
		r->n++;
	}
	return now - r->last_report >= SAMPLE_GAP_S;
}

/* Bytes per second between the oldest sample of the window and now; 0 before 0.5 s of it. */
static double window_rate(const struct hub_rate *r, uint64_t done, double now)
{
	for (unsigned k = 0; k < r->n; k++) {
		unsigned i = (r->head + k) % HUB_RATE_SAMPLES;
		if (now - r->t[i] > WINDOW_S)
			continue;
		double dt = now - r->t[i];
		return dt >= 0.5 && done >= r->bytes[i] ? (double)(done - r->bytes[i]) / dt : 0.0;
	}
	return 0.0;
}

void hub_rate_report(struct hub_rate *r, const char *file, uint64_t done, uint64_t total,
		     double now, struct bn_hub_progress *p)
{
	r->last_report = now;
	double rate = window_rate(r, done, now);
	double elapsed = now - r->t0;
	/* At the end, the mean over the whole download is the figure worth reporting. */
	if (done >= total && elapsed > 0)
		rate = (double)(done - r->start) / elapsed;
	*p = (struct bn_hub_progress){
		.file = file,
		.done = done,
		.total = total,
		.start = r->start,
		.rate = rate,
		.eta_s = rate > 0 && total >= done ? (double)(total - done) / rate : -1.0,
		.elapsed_s = elapsed,
		.finished = done >= total,
	};
}
