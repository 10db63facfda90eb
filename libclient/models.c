/* SPDX-License-Identifier: MIT */
/*
 * models.c — the daemon's models (shm/PROTOCOL.md §15): the MODELS lines read into
 * struct bn_model_status, and the LOAD, UNLOAD and RELOAD commands.
 */
#define _GNU_SOURCE
#include "client_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const state_names[] = { "unloaded", "loading", "loaded", "unloading",
					   "failed" };

const char *bn_model_state_name(uint32_t state)
{
	return state < sizeof(state_names) / sizeof(state_names[0]) ? state_names[state] : "unknown";
}

static uint32_t state_of(const char *v, size_t n)
{
	for (uint32_t i = 0; i < sizeof(state_names) / sizeof(state_names[0]); i++)
		if (strlen(state_names[i]) == n && !memcmp(state_names[i], v, n))
			return i;
	return BN_MODEL_STATE_UNKNOWN;
}

static void copy_text(char *dst, size_t cap, const char *v, size_t n)
{
	if (n >= cap)
		n = cap - 1;
	memcpy(dst, v, n);
	dst[n] = 0;
}

/* One key=value of a line into o; keys this library does not know are skipped (§15.3). */
static void take_field(struct bn_model_status *o, const char *key, size_t klen, const char *v,
		       size_t n)
{
	char num[32];
	copy_text(num, sizeof(num), v, n);
	unsigned long long u = strtoull(num, NULL, 10);
	long long i = strtoll(num, NULL, 10);
#define KEY(k) (klen == sizeof(k) - 1 && !memcmp(key, k, klen))
	if (KEY("name"))
		copy_text(o->name, sizeof(o->name), v, n);
	else if (KEY("state"))
		o->state = state_of(v, n);
	else if (KEY("default"))
		o->is_default = u != 0;
	else if (KEY("pinned"))
		o->pinned = u != 0;
	else if (KEY("bytes"))
		o->bytes = u;
	else if (KEY("weight_bytes"))
		o->weight_bytes = u;
	else if (KEY("kv_bytes"))
		o->kv_bytes = u;
	else if (KEY("idle_since_ms"))
		o->idle_since_ms = i;
	else if (KEY("waiting"))
		o->waiting = (uint32_t)u;
	else if (KEY("running"))
		o->running = (uint32_t)u;
	else if (KEY("context"))
		o->context_length = (uint32_t)u;
	else if (KEY("vocab_size"))
		o->vocab_size = (uint32_t)u;
	else if (KEY("loads"))
		o->loads = u;
	else if (KEY("keep_alive_ms"))
		o->keep_alive_ms = i;
#undef KEY
}

/* A line: space-separated key=value fields, `error=` last and to the line's end. */
static void parse_line(const char *line, size_t len, struct bn_model_status *o)
{
	memset(o, 0, sizeof(*o));
	o->keep_alive_ms = -1;
	const char *p = line, *end = line + len;
	while (p < end) {
		const char *eq = memchr(p, '=', (size_t)(end - p));
		if (!eq)
			break;
		size_t klen = (size_t)(eq - p);
		const char *v = eq + 1;
		int rest = klen == 5 && !memcmp(p, "error", 5);
		const char *stop = rest ? end : memchr(v, ' ', (size_t)(end - v));
		if (!stop)
			stop = end;
		if (rest)
			copy_text(o->error, sizeof(o->error), v, (size_t)(stop - v));
		else
			take_field(o, p, klen, v, (size_t)(stop - v));
		p = stop + 1;
	}
}

/* Every line of text into out (up to cap); the number of lines. */
static int parse_lines(const char *text, uint32_t len, struct bn_model_status *out, size_t cap)
{
	int n = 0;
	const char *p = text, *end = text + len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *stop = nl ? nl : end;
		if (stop > p) {
			if ((size_t)n < cap)
				parse_line(p, (size_t)(stop - p), &out[n]);
			n++;
		}
		p = stop + 1;
	}
	return n;
}

static int has_models(const struct bn_client *c)
{
	return (c->layout.features & BN_FEAT_MODELS) != 0;
}

int bn_models_list(struct bn_client *c, struct bn_model_status *out, size_t cap)
{
	if (!c || (!out && cap))
		return -BN_E_INVALID;
	if (!has_models(c))
		return -BN_E_UNSUPPORTED;
	char *text;
	uint32_t len, error;
	int rc = bn_client_ctl_text(c, BN_CTL_MODELS, NULL, 0, &text, &len, &error);
	if (rc < 0)
		return rc;
	rc = error ? -(int)error : parse_lines(text, len, out, cap);
	free(text);
	return rc;
}

/* A command and its answer: the model's line into *out (when given). */
static int command(struct bn_client *c, uint32_t op, const char *name, struct bn_model_status *out)
{
	if (!c || (name && *name && !bn_client_model_name_ok(name)))
		return -BN_E_INVALID;
	if (!has_models(c))
		return -BN_E_UNSUPPORTED;
	struct bn_model_name record = { { 0 } };
	if (name)
		memcpy(record.name, name, strlen(name));
	char *text;
	uint32_t len, error;
	int rc = bn_client_ctl_text(c, op, &record, sizeof(record), &text, &len, &error);
	if (rc < 0)
		return rc;
	if (out && parse_lines(text, len, out, 1) < 1)
		memset(out, 0, sizeof(*out));
	free(text);
	return error ? -(int)error : 0;
}

int bn_models_load(struct bn_client *c, const char *name, struct bn_model_status *out)
{
	if (!name || !*name)
		return -BN_E_INVALID;
	return command(c, BN_CTL_MODEL_LOAD, name, out);
}

int bn_models_unload(struct bn_client *c, const char *name, struct bn_model_status *out)
{
	if (!name || !*name)
		return -BN_E_INVALID;
	return command(c, BN_CTL_MODEL_UNLOAD, name, out);
}

int bn_models_reload(struct bn_client *c, const char *name)
{
	return command(c, BN_CTL_MODEL_RELOAD, name, NULL);
}
