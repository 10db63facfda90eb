/* SPDX-License-Identifier: MIT */
/*
 * hf_model.c — model names for the daemon: hub/'s pull with its reports as log lines. The
 * daemon is not on a terminal (and under systemd writes to the journal), so progress is a
 * line every few seconds, not a bar.
 */
#include "hf_model.h"

#include "common/log.h"
#include "hub.h"

#include <stdio.h>
#include <string.h>

#define PROGRESS_EVERY_S 5.0

struct log_ctx {
	double next_report_s; /* elapsed time of the next progress line */
};

/* A person's sentence as a msg field: a quote in it would end the field early. */
static void unquote(const char *text, char *out, size_t cap)
{
	size_t i = 0;
	for (; text[i] && i + 1 < cap; i++)
		out[i] = text[i] == '"' ? '\'' : text[i];
	out[i] = '\0';
}

static void log_note(void *ctx, const char *text)
{
	(void)ctx;
	char line[2048];
	unquote(text, line, sizeof(line));
	bn_log_info("msg=\"%s\"", line);
}

static void log_progress(void *ctx, const struct bn_hub_progress *p)
{
	struct log_ctx *c = ctx;
	if (!p->finished && p->elapsed_s < c->next_report_s)
		return;
	c->next_report_s = p->elapsed_s + PROGRESS_EVERY_S;
	bn_log_info("msg=\"%s\" file=\"%s\" bytes=%llu total=%llu rate_bytes_per_s=%.0f eta_s=%.0f",
		    p->finished ? "downloaded" : "downloading", p->file,
		    (unsigned long long)p->done, (unsigned long long)p->total, p->rate, p->eta_s);
}

int bn_hf_model_resolve(const char **model, char *buf, size_t cap)
{
	const char *name = *model;
	if (!name || !bn_hub_is_name(name))
		return 0;
	struct bn_hub_options o;
	struct bn_hub_result r;
	struct log_ctx ctx = { 0 };
	struct bn_hub_reporter report = { log_note, log_progress, &ctx };
	char err[2048];
	int rc = bn_hub_options_from_env(&o, err, sizeof(err));
	if (rc == 0) {
		o.prefer_cache = 1;
		o.report = &report;
		rc = bn_hub_pull(&o, name, NULL, &r, err, sizeof(err));
		bn_hub_options_clear(&o);
	}
	if (rc == 0 && strlen(r.path) < cap) {
		strcpy(buf, r.path);
		*model = buf;
		bn_log_info("msg=\"model by name\" name=\"%s\" file=\"%s\" commit=%s bytes=%llu "
			    "fetched=%llu", name, r.path, r.commit, (unsigned long long)r.size,
			    (unsigned long long)r.fetched);
		return 0;
	}
	if (rc == 0)
		snprintf(err, sizeof(err), "the path of its file is over %zu bytes", cap);
	char line[2048];
	unquote(err, line, sizeof(line));
	bn_log_error("msg=\"--model %s: %s\"", name, line);
	return -1;
}
