/* SPDX-License-Identifier: MIT */
/*
 * hub_errors.c — the Hub's refusals as messages that say what to do. The Hub tells its cases
 * apart in the X-Error-Code header (huggingface_hub reads the same one): a repository that
 * does not exist and a private one both answer 401 to a request without a token, so that
 * message names both; a gated repository answers 401 without a token and 403 with one that
 * has not been granted access.
 */
#include "hub_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

/* The Hub's own words, when it gave any: " (the Hub: ...)". */
static void hub_words(const struct hub_reply *rep, char *out, size_t cap)
{
	const char *words = rep->error_message[0] ? rep->error_message : NULL;
	/* A JSON error body ({"error":"..."}) carries the words when no header does. */
	char body[256];
	if (!words && rep->body_len) {
		const char *e = strstr(rep->body, "\"error\"");
		const char *q = e ? strchr(e + 7, '"') : NULL;
		const char *end = q ? strchr(q + 1, '"') : NULL;
		if (end) {
			snprintf(body, sizeof(body), "%.*s", (int)(end - q - 1), q + 1);
			words = body;
		}
	}
	if (words)
		snprintf(out, cap, " (%s said: %s)", rep->host, words);
	else
		out[0] = '\0';
}

static int token_advice(const struct bn_hub_options *o, char *out, size_t cap)
{
	if (o->token[0])
		return snprintf(out, cap, "the token from %s", o->token_source);
	return snprintf(out, cap,
			"no token was given (set HF_TOKEN=hf_..., or save one with "
			"`huggingface-cli login`, which writes $HF_HOME/token, by default "
			"~/.cache/huggingface/token)");
}

int hub_status_error(const struct bn_hub_options *o, const struct hub_reply *rep,
		     const char *repo, const char *rev, const char *file, char *err,
		     size_t err_cap)
{
	char words[600], token[PATH_MAX + 200];
	hub_words(rep, words, sizeof(words));
	token_advice(o, token, sizeof(token));
	const char *code = rep->error_code;
	if (!strcmp(code, "GatedRepo"))
		return hub_fail(err, err_cap, -EACCES,
				"%s is gated: accept its conditions at %s/%s with your account, and "
				"give a token of that account; %s%s",
				repo, o->endpoint, repo, token, words);
	if (!strcmp(code, "RevisionNotFound"))
		return hub_fail(err, err_cap, -ENOENT, "%s has no revision '%s'%s", repo, rev,
				words);
	if (!strcmp(code, "EntryNotFound"))
		return hub_fail(err, err_cap, -ENOENT, "%s has no file '%s' at revision %s%s",
				repo, file ? file : "", rev, words);
	if (rep->status == 401 && o->token[0] && strstr(rep->error_message, "Invalid credentials"))
		return hub_fail(err, err_cap, -EACCES, "%s refused %s: invalid credentials%s",
				rep->host, token, words);
	if (!strcmp(code, "RepoNotFound") || rep->status == 401 || rep->status == 404)
		return hub_fail(err, err_cap, -ENOENT,
				"no repository %s at %s, or it is private and %s%s", repo,
				o->endpoint, o->token[0] ? "the token has no access to it" : token,
				words);
	if (rep->status == 403)
		return hub_fail(err, err_cap, -EACCES, "%s refused access to %s (403) with %s%s",
				rep->host, repo, token, words);
	if (rep->status == 429)
		return hub_fail(err, err_cap, -EIO, "%s asks to slow down (429): try again later%s",
				rep->host, words);
	return hub_fail(err, err_cap, -EIO, "%s answered HTTP %ld%s%s", rep->host, rep->status,
			rep->status >= 500 ? ": the server failed, try again later" : "", words);
}
