/* SPDX-License-Identifier: MIT */
/*
 * job.c — an OpenAI request body to a gw_job: every field read once, checked, named in the
 * error when it is wrong.
 */
#define _GNU_SOURCE
#include "job.h"
#include "ring.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Completions' max_tokens when the request gives none (OpenAI's and vLLM's). */
#define COMPLETIONS_DEFAULT_MAX_TOKENS 16
/* OpenAI's ranges. */
#define MAX_TEMPERATURE 2.0
#define MAX_PENALTY 2.0
#define MAX_CHAT_TOP_LOGPROBS 20
/* The daemon's range (shm/PROTOCOL.md §4.4). */
#define MAX_REPETITION_PENALTY 100.0

/* ---- fields ------------------------------------------------------------------------------ */

/* A number field in [lo, hi] into *out; absent or null leaves *out. 0 or -1 (err set). */
static int get_real(json_t *root, const char *name, double lo, double hi, double *out,
		    struct gw_error *err)
{
	json_t *v = json_object_get(root, name);
	if (!v || json_is_null(v))
		return 0;
	double d = json_number_value(v);
	if (!json_is_number(v) || !isfinite(d) || d < lo || d > hi) {
		gw_error_set(err, 400, name, "%s must be a number from %g to %g", name, lo, hi);
		return -1;
	}
	*out = d;
	return 0;
}

/* An integer field in [lo, hi]; *given says whether it was there. */
static int get_int(json_t *root, const char *name, long long lo, long long hi, long long *out,
		   int *given, struct gw_error *err)
{
	json_t *v = json_object_get(root, name);
	if (given)
		*given = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
		gw_error_set(err, 400, name, "%s must be an integer from %lld to %lld", name, lo, hi);
		return -1;
	}
	*out = json_integer_value(v);
	if (given)
		*given = 1;
	return 0;
}

static int get_bool(json_t *root, const char *name, int *out, struct gw_error *err)
{
	json_t *v = json_object_get(root, name);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v)) {
		gw_error_set(err, 400, name, "%s must be true or false", name);
		return -1;
	}
	*out = json_is_true(v);
	return 0;
}

/* The top-level fields each endpoint takes: OpenAI's that the gateway honours (and vLLM's
 * top_k, min_p and repetition_penalty), and those whose value changes nothing here (user, an
 * identifier; metadata, kept only with store). Any other field is refused, named. */
static const char *const completions_fields[] = {
	"model", "prompt", "max_tokens", "temperature", "top_p", "n", "best_of", "stream",
	"stream_options", "stop", "presence_penalty", "frequency_penalty", "seed", "logprobs",
	"echo", "user", "response_format", "top_k", "min_p", "repetition_penalty", NULL
};
static const char *const chat_fields[] = {
	"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n",
	"stream", "stream_options", "stop", "presence_penalty", "frequency_penalty", "seed",
	"logprobs", "top_logprobs", "user", "safety_identifier", "prompt_cache_key", "metadata",
	"response_format", "tools", "tool_choice", "parallel_tool_calls", "top_k", "min_p",
	"repetition_penalty", NULL
};

/* Fields taken only with their neutral value (absent, null, empty, false, "none", text only):
 * any other is refused, so no request is answered as if it had been applied. */
static int neutral(const char *name, json_t *v, enum gw_endpoint kind)
{
	if (json_is_null(v) || (json_is_object(v) && json_object_size(v) == 0) ||
	    (json_is_array(v) && json_array_size(v) == 0))
		return !strcmp(name, "logit_bias") || (kind == GW_COMPLETIONS && !strcmp(name, "suffix")) ||
		       (kind == GW_CHAT && (!strcmp(name, "functions") || !strcmp(name, "audio") ||
					    !strcmp(name, "prediction") || !strcmp(name, "store") ||
					    !strcmp(name, "service_tier") || !strcmp(name, "modalities") ||
					    !strcmp(name, "function_call")));
	if (kind == GW_COMPLETIONS)
		return !strcmp(name, "suffix") && json_is_string(v) && json_string_length(v) == 0;
	if (!strcmp(name, "store"))
		return json_is_false(v);
	if (!strcmp(name, "function_call"))
		return json_is_string(v) && !strcmp(json_string_value(v), "none");
	if (!strcmp(name, "service_tier"))
		return json_is_string(v) && (!strcmp(json_string_value(v), "auto") ||
					     !strcmp(json_string_value(v), "default"));
	if (!strcmp(name, "modalities"))
		return json_is_array(v) && json_array_size(v) == 1 &&
		       json_is_string(json_array_get(v, 0)) &&
		       !strcmp(json_string_value(json_array_get(v, 0)), "text");
	return 0;
}

static int refuse_unsupported(json_t *root, enum gw_endpoint kind, struct gw_error *err)
{
	const char *const *fields = kind == GW_CHAT ? chat_fields : completions_fields;
	const char *name;
	json_t *v;
	json_object_foreach(root, name, v)
	{
		size_t i = 0;
		while (fields[i] && strcmp(fields[i], name))
			i++;
		if (!fields[i] && !neutral(name, v, kind)) {
			gw_error_set(err, 400, name, "%.64s is not supported on %s", name,
				     kind == GW_CHAT ? "/v1/chat/completions" : "/v1/completions");
			return -1;
		}
	}
	long long best_of = 1, n = 1;
	if (get_int(root, "best_of", 1, GW_MAX_N, &best_of, NULL, err) < 0 ||
	    get_int(root, "n", 1, GW_MAX_N, &n, NULL, err) < 0)
		return -1;
	if (best_of != 1 && best_of != n) {
		gw_error_set(err, 400, "best_of", "best_of must equal n (or 1)");
		return -1;
	}
	return 0;
}

static int parse_stop(struct gw_job *job, json_t *root, struct gw_error *err)
{
	json_t *v = json_object_get(root, "stop");
	if (!v || json_is_null(v))
		return 0;
	json_t *one[1] = { v };
	size_t n = json_is_array(v) ? json_array_size(v) : 1;
	if ((!json_is_array(v) && !json_is_string(v)) || n > GW_MAX_STOP) {
		gw_error_set(err, 400, "stop", "stop must be a string or an array of at most %d strings",
			     GW_MAX_STOP);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *s = json_is_array(v) ? json_array_get(v, i) : one[0];
		if (!json_is_string(s) || json_string_length(s) == 0) {
			gw_error_set(err, 400, "stop", "each stop must be a non-empty string");
			return -1;
		}
		job->stop[i] = strndup(json_string_value(s), json_string_length(s));
		job->stop_len[i] = json_string_length(s);
		if (!job->stop[i]) {
			gw_error_set(err, 500, NULL, "out of memory");
			return -1;
		}
		job->n_stop = i + 1;
	}
	return 0;
}

/* temperature, top_p, penalties, seed; vLLM's top_k (-1 or 0: off), min_p (0: off) and
 * repetition_penalty (1: none). */
static int parse_sampling(struct gw_job *job, json_t *root, struct gw_error *err)
{
	double temperature = 1.0, top_p = 1.0, presence = 0, frequency = 0, min_p = 0, rep = 1;
	long long seed = 0, top_k = 0;
	int seeded = 0;
	if (get_int(root, "top_k", -1, INT32_MAX, &top_k, NULL, err) < 0 ||
	    get_real(root, "min_p", 0, 1, &min_p, err) < 0 ||
	    get_real(root, "repetition_penalty", 0, MAX_REPETITION_PENALTY, &rep, err) < 0)
		return -1;
	if (rep == 0) {
		gw_error_set(err, 400, "repetition_penalty", "repetition_penalty must be above 0 (1: none)");
		return -1;
	}
	if (get_real(root, "temperature", 0, MAX_TEMPERATURE, &temperature, err) < 0 ||
	    get_real(root, "top_p", 0, 1, &top_p, err) < 0 ||
	    get_real(root, "presence_penalty", -MAX_PENALTY, MAX_PENALTY, &presence, err) < 0 ||
	    get_real(root, "frequency_penalty", -MAX_PENALTY, MAX_PENALTY, &frequency, err) < 0 ||
	    get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, &seeded, err) < 0)
		return -1;
	if (top_p == 0) {
		gw_error_set(err, 400, "top_p", "top_p must be above 0");
		return -1;
	}
	struct bn_sampling_params *sp = &job->sampling;
	sp->temperature = (float)temperature; /* 0: greedy */
	sp->top_p = top_p < 1 ? (float)top_p : 0;
	sp->presence_penalty = (float)presence;
	sp->frequency_penalty = (float)frequency;
	sp->top_k = top_k > 0 ? (uint32_t)top_k : 0;
	sp->min_p = (float)min_p;
	sp->repetition_penalty = rep != 1 ? (float)rep : 0;
	if (seeded) {
		sp->seed = (uint64_t)seed;
		job->flags |= BN_REQ_SEED;
	}
	return 0;
}

/* n, stream, stream_options, max_tokens (chat: or max_completion_tokens). */
static int parse_shape(struct gw_job *job, json_t *root, struct gw_error *err)
{
	long long n = 1, max_tokens = 0;
	int given = 0;
	if (get_int(root, "n", 1, GW_MAX_N, &n, NULL, err) < 0 ||
	    get_bool(root, "stream", &job->stream, err) < 0)
		return -1;
	job->n = (uint32_t)n;
	const char *max_name = "max_tokens";
	if (job->kind == GW_CHAT && json_object_get(root, "max_completion_tokens") &&
	    !json_is_null(json_object_get(root, "max_completion_tokens")))
		max_name = "max_completion_tokens";
	if (get_int(root, max_name, job->kind == GW_CHAT ? 1 : 0, UINT32_MAX, &max_tokens, &given,
		    err) < 0)
		return -1;
	job->max_tokens = given ? (uint32_t)max_tokens
				: job->kind == GW_COMPLETIONS ? COMPLETIONS_DEFAULT_MAX_TOKENS : 0;
	job->max_tokens_given = given;
	json_t *so = json_object_get(root, "stream_options");
	if (so && !json_is_null(so)) {
		if (!job->stream || !json_is_object(so)) {
			gw_error_set(err, 400, "stream_options",
				     "stream_options is an object, and only with stream: true");
			return -1;
		}
		if (get_bool(so, "include_usage", &job->include_usage, err) < 0)
			return -1;
	}
	return 0;
}

/* logprobs and top_logprobs (chat: a boolean and a count; completions: a count). */
static int parse_logprobs(struct gw_job *job, json_t *root, uint32_t max_logprobs,
			  struct gw_error *err)
{
	long long top = 0;
	int given = 0;
	if (job->kind == GW_CHAT) {
		if (get_bool(root, "logprobs", &job->logprobs, err) < 0 ||
		    get_int(root, "top_logprobs", 0, MAX_CHAT_TOP_LOGPROBS, &top, &given, err) < 0)
			return -1;
		if (given && !job->logprobs) {
			gw_error_set(err, 400, "top_logprobs", "top_logprobs needs logprobs: true");
			return -1;
		}
	} else {
		if (get_int(root, "logprobs", 0, MAX_CHAT_TOP_LOGPROBS, &top, &given, err) < 0)
			return -1;
		job->logprobs = given;
	}
	if ((uint32_t)top > max_logprobs) {
		gw_error_set(err, 400, job->kind == GW_CHAT ? "top_logprobs" : "logprobs",
			     "at most %u alternatives per token (the daemon's --max-logprobs)",
			     max_logprobs);
		return -1;
	}
	job->top_logprobs = (uint32_t)top;
	job->sampling.n_logprobs = (uint32_t)top;
	if (job->logprobs)
		job->flags |= BN_REQ_LOGPROBS;
	return 0;
}

/* response_format, tools, tool_choice; a tool call is not cut by stop strings. */
static int parse_structured(struct gw_job *job, json_t *root, const char *body, size_t len,
			    const struct gw_model *model, struct gw_error *err)
{
	uint32_t tmpl = model->vocab ? bn_vocab_chat_template(model->vocab) : BN_CHAT_NONE;
	if (gw_structured_parse(&job->structured, root, body, len, job->kind == GW_CHAT,
				bn_chat_template_name(tmpl), err) < 0)
		return -1;
	if (job->structured.tools && job->n_stop) {
		gw_error_set(err, 400, "stop", "stop strings would cut a tool call's arguments: leave stop out with tools");
		return -1;
	}
	return 0;
}

void gw_job_free(struct gw_job *job)
{
	for (size_t i = 0; i < job->n_stop; i++)
		free(job->stop[i]);
	for (size_t i = 0; job->prompts && i < job->n_prompts; i++) {
		free(job->prompts[i].ids);
		free(job->prompts[i].text);
	}
	free(job->prompts);
	gw_structured_free(&job->structured);
	memset(job, 0, sizeof(*job));
}

int gw_job_parse(struct gw_job *job, enum gw_endpoint kind, const char *body, size_t len,
		 const struct gw_model *model, uint32_t max_logprobs, struct gw_error *err)
{
	memset(job, 0, sizeof(*job));
	job->kind = kind;
	json_t *root = gw_structured_load(body, len, err);
	if (!root)
		return -1;
	if (!json_is_object(root)) {
		gw_error_set(err, 400, NULL, "the body must be a JSON object");
		json_decref(root);
		return -1;
	}
	json_t *name = json_object_get(root, "model");
	int rc = -1;
	if (name && !json_is_null(name) && !json_is_string(name))
		gw_error_set(err, 400, "model", "model must be a string");
	else if (name && json_is_string(name) && strcmp(json_string_value(name), model->id) != 0)
		gw_error_set(err, 404, "model", "The model `%.128s` does not exist; this server has `%s`",
			     json_string_value(name), model->id);
	else if (refuse_unsupported(root, kind, err) == 0 && parse_shape(job, root, err) == 0 &&
		 parse_sampling(job, root, err) == 0 && parse_stop(job, root, err) == 0 &&
		 parse_structured(job, root, body, len, model, err) == 0 &&
		 parse_logprobs(job, root, max_logprobs, err) == 0 &&
		 (kind == GW_CHAT || get_bool(root, "echo", &job->echo, err) == 0))
		rc = gw_prompts_parse(job, root, model, err);
	json_decref(root);
	if (rc < 0)
		gw_job_free(job);
	return rc;
}
