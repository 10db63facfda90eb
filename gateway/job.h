/* SPDX-License-Identifier: MIT */
/*
 * job.h — one OpenAI request, parsed and checked: what to run, and how to answer. The request's
 * fields follow OpenAI's API reference for /v1/completions and /v1/chat/completions (where it
 * leaves a default open, vLLM's); a field the gateway cannot honour is refused with a 400
 * naming it, never silently ignored.
 */
#ifndef BITNET_GATEWAY_JOB_H
#define BITNET_GATEWAY_JOB_H

#include "bitnet_client.h"
#include "error.h"
#include "json_text.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct gw_model;

enum gw_endpoint { GW_COMPLETIONS, GW_CHAT };

/* One prompt of a completions request (a chat request has one). */
struct gw_prompt {
	uint32_t *ids;
	uint32_t n_ids;
	char *text;               /* the prompt's text for echo (decoded from ids if given so) */
	size_t text_len;
	struct gw_error error;    /* this prompt alone failed (an array's other prompts run) */
};

#define GW_MAX_STOP 16
#define GW_MAX_TOOLS 128
#define GW_MAX_N 128

/* What constrains the output (structured.c): response_format, or a tool call. */
enum gw_tool_mode { GW_TOOLS_OFF, GW_TOOLS_NAMED, GW_TOOLS_REQUIRED };

struct gw_structured {
	uint32_t kind;            /* 0: not constrained; else BN_GRAMMAR_KIND_JSON_SCHEMA or _JSON */
	uint32_t flags;           /* BN_GRAMMAR_JSON_* */
	char *text;               /* the schema: the user's text less whitespace between tokens,
				   * malloc'd; NULL for kind JSON */
	size_t len;
	const char *param;        /* what a refusal of the grammar names: response_format, tools */
	enum gw_tool_mode tools;
	char tool_name[65];       /* GW_TOOLS_NAMED: the function */
	char *prompt;             /* tools: the text the system message gains, malloc'd */
};

struct gw_job {
	enum gw_endpoint kind;
	uint32_t max_tokens;
	int max_tokens_given;
	struct bn_sampling_params sampling;
	uint32_t flags;           /* BN_REQ_SEED, BN_REQ_LOGPROBS */
	char *stop[GW_MAX_STOP];  /* stop strings, matched on the output's text */
	size_t stop_len[GW_MAX_STOP];
	size_t n_stop;
	uint32_t n;               /* choices per prompt */
	int stream, include_usage;
	int logprobs;             /* chat: logprobs: true; completions: logprobs given */
	uint32_t top_logprobs;    /* alternatives per token */
	int echo;                 /* completions */
	struct gw_prompt *prompts;
	size_t n_prompts;
	int prompt_was_array;     /* an array of prompts: one prompt's failure is its choices' */
	struct gw_structured structured;
};

/* Parses body as a request of kind for the model. 0, or -1 with *err set (a 400 or 404). */
int gw_job_parse(struct gw_job *job, enum gw_endpoint kind, const char *body, size_t len,
		 const struct gw_model *model, uint32_t max_logprobs, struct gw_error *err);
void gw_job_free(struct gw_job *job);
/* prompts.c: job->prompts from `prompt` (completions) or `messages` (chat). 0 or -1. */
int gw_prompts_parse(struct gw_job *job, json_t *root, const struct gw_model *m,
		     struct gw_error *err);

/* structured.c: response_format, and on chat tools, tool_choice and parallel_tool_calls, into
 * s (template_name: the chat template's, for the refusal of tool_choice "auto"); root is
 * Jansson's parse of body[0..len), whose text the schemas are taken from. 0 or -1. */
int gw_structured_parse(struct gw_structured *s, json_t *root, const char *body, size_t len,
			int chat, const char *template_name, struct gw_error *err);
/* The body parsed by Jansson, the schemas' numbers as Jansson can hold them (json_text.h: the
 * schemas go to the daemon as their text), U+0000 taken in their strings only. NULL with err
 * set (a 400). */
json_t *gw_structured_load(const char *body, size_t len, struct gw_error *err);
/* Where the schemas are in a body (response_format's, then each tool's parameters, len 0 where
 * absent), at most cap of them: the values json_text.h's masked copy writes over. */
size_t gw_structured_spans(const char *body, size_t len, struct gw_span *out, size_t cap);
void gw_structured_free(struct gw_structured *s);

/* A tool call in an output so far: 1 with the function's name and where its arguments are in
 * text (tool_choice "required": once the name is whole), else 0. state: GW_CALL_RUNNING (the
 * wrapper's closing brace may be the last byte: held back), _WHOLE (ended with EOS), _CUT. */
enum { GW_CALL_RUNNING, GW_CALL_WHOLE, GW_CALL_CUT };
int gw_tool_call_split(const struct gw_structured *s, const char *text, size_t len, int state,
		       char *name, size_t name_cap, size_t *args_at, size_t *args_len);

#endif /* BITNET_GATEWAY_JOB_H */
