/* SPDX-License-Identifier: MIT */
#include "stats.h"

#include "../shm/bitnet_shm.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

struct bn_stats bn_stats;

static const char *const status_names[BN_STATS_STATUSES] = {
	"none", "length", "eos", "cancelled", "error", "shutdown",
};

static const char *const error_names[] = {
	"invalid", "token", "too_long", "again", "shutdown", "disconnected", "timeout",
	"protocol", "version", "busy", "backend", "cancelled", "not_done", "empty",
};

void bn_stats_count_error(uint32_t error)
{
	if (error >= BN_E_INVALID && error < BN_E_INVALID + BN_STATS_ERRORS)
		bn_stats.request_errors[error - BN_E_INVALID]++;
}

struct text {
	char *buf;
	size_t cap, len;
};

__attribute__((format(printf, 2, 3))) static void put(struct text *t, const char *fmt, ...)
{
	if (t->len >= t->cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		t->len = t->len + (size_t)n < t->cap ? t->len + (size_t)n : t->cap - 1;
}

static void metric(struct text *t, const char *type, const char *name, const char *help,
		   uint64_t v)
{
	put(t, "# HELP bitnetd_%s %s\n# TYPE bitnetd_%s %s\nbitnetd_%s %" PRIu64 "\n", name, help,
	    name, type, name, v);
}

static void counter(struct text *t, const char *name, const char *help, uint64_t v)
{
	metric(t, "counter", name, help, v);
}

static void gauge(struct text *t, const char *name, const char *help, uint64_t v)
{
	metric(t, "gauge", name, help, v);
}

static void render_requests(struct text *t)
{
	put(t, "# HELP bitnetd_requests_finished_total Requests ended, by terminal status.\n"
	       "# TYPE bitnetd_requests_finished_total counter\n");
	for (int s = 1; s < BN_STATS_STATUSES; s++)
		put(t, "bitnetd_requests_finished_total{status=\"%s\"} %" PRIu64 "\n",
		    status_names[s], bn_stats.requests_finished[s]);
	put(t, "# HELP bitnetd_request_errors_total Requests ended in error, by reason.\n"
	       "# TYPE bitnetd_request_errors_total counter\n");
	for (size_t e = 0; e < sizeof(error_names) / sizeof(error_names[0]); e++)
		put(t, "bitnetd_request_errors_total{reason=\"%s\"} %" PRIu64 "\n", error_names[e],
		    bn_stats.request_errors[e]);
}

size_t bn_stats_render(char *buf, size_t cap, uint32_t sessions_open, uint32_t queued,
		       uint32_t running)
{
	struct text t = { buf, cap, 0 };
	if (cap)
		buf[0] = '\0';
	gauge(&t, "sessions", "Client sessions open.", sessions_open);
	gauge(&t, "queue_depth", "Requests accepted and waiting to join a batch.", queued);
	gauge(&t, "running_sequences", "Sequences in the running batch.", running);
	counter(&t, "sessions_opened_total", "Sessions opened.", bn_stats.sessions_opened);
	counter(&t, "sessions_closed_total", "Sessions closed.", bn_stats.sessions_closed);
	counter(&t, "sessions_refused_total", "Handshakes refused.", bn_stats.sessions_refused);
	counter(&t, "protocol_violations_total", "Sessions closed for breaking the protocol.",
		bn_stats.protocol_violations);
	counter(&t, "requests_submitted_total", "Requests taken from the rings.",
		bn_stats.requests_submitted);
	render_requests(&t);
	counter(&t, "tokens_generated_total", "Tokens written to response slots.",
		bn_stats.tokens_generated);
	counter(&t, "steps_total", "Batched forward steps.", bn_stats.steps);
	counter(&t, "batch_rows_total", "Rows over all steps.", bn_stats.batch_rows);
	counter(&t, "batch_cells_total", "Rows times padded width over all steps.",
		bn_stats.batch_cells);
	counter(&t, "batch_padding_cells_total", "Padded cells that held no token.",
		bn_stats.batch_padding);
	counter(&t, "futex_wakes_total", "FUTEX_WAKE system calls.", bn_stats.futex_wakes);
	counter(&t, "doorbells_total", "Doorbell eventfd wake-ups.", bn_stats.doorbells);
	counter(&t, "sleeps_total", "Times the loop slept in io_uring.", bn_stats.sleeps);
	counter(&t, "uring_submits_total", "io_uring_enter calls made only to submit.",
		bn_stats.uring_submits);
	return t.len;
}
