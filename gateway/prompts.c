/* SPDX-License-Identifier: MIT */
/*
 * prompts.c — a request's prompts as token ids: completions' `prompt` (a string, strings, ids,
 * or arrays of ids) and chat's `messages` (rendered by the model's template, as bn_chat does:
 * the messages' texts never become special tokens).
 */
#define _GNU_SOURCE
#include "job.h"
#include "ring.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MESSAGES 4096

/* Ids of text as the model's tokenizer makes them, BOS as the model wants; malloc'd. */
static int tokenize(const struct gw_model *m, const char *text, size_t len, uint32_t **ids,
		    uint32_t *n)
{
	uint32_t flags = bn_vocab_add_bos(m->vocab) ? BN_TOK_ADD_BOS : 0;
	int k = bn_tokenize_ex(m->vocab, text, len, flags, NULL, 0);
	if (k < 0)
		return k;
	*ids = malloc(((size_t)k + 1) * sizeof(**ids));
	if (!*ids)
		return -ENOMEM;
	k = bn_tokenize_ex(m->vocab, text, len, flags, *ids, (uint32_t)k);
	if (k < 0)
		return k;
	*n = (uint32_t)k;
	return 0;
}

/* The text ids stand for (echo), malloc'd. */
static int detokenize(const struct gw_model *m, const uint32_t *ids, uint32_t n, char **text,
		      size_t *len)
{
	*text = NULL;
	*len = 0;
	if (!m->vocab)
		return 0; /* ids only: echo has no text to give */
	int k = bn_detokenize_ex(m->vocab, ids, n, 0, NULL, 0);
	if (k < 0)
		return k;
	*text = malloc((size_t)k + 1);
	if (!*text)
		return -ENOMEM;
	bn_detokenize_ex(m->vocab, ids, n, 0, *text, (size_t)k + 1);
	*len = (size_t)k;
	return 0;
}

/* One prompt given as an array of ids. */
static int ids_prompt(struct gw_prompt *p, json_t *arr, const struct gw_model *m, int echo)
{
	size_t n = json_array_size(arr);
	p->ids = malloc((n ? n : 1) * sizeof(*p->ids));
	if (!p->ids) {
		gw_error_set(&p->error, 500, NULL, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(arr, i);
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) >= m->info.vocab_size) {
			gw_error_set(&p->error, 400, "prompt",
				     "prompt token ids must be integers from 0 to %u",
				     m->info.vocab_size - 1);
			return -1;
		}
		p->ids[i] = (uint32_t)json_integer_value(v);
	}
	p->n_ids = (uint32_t)n;
	int rc = echo ? detokenize(m, p->ids, p->n_ids, &p->text, &p->text_len) : 0;
	if (rc < 0)
		gw_error_from_bn(&p->error, rc, "the prompt");
	return rc < 0 ? -1 : 0;
}

static int text_prompt(struct gw_prompt *p, json_t *s, const struct gw_model *m)
{
	if (!m->vocab) {
		gw_error_set(&p->error, 400, "prompt",
			     "this model has no vocabulary: give the prompt as token ids");
		return -1;
	}
	p->text_len = json_string_length(s);
	p->text = malloc(p->text_len + 1);
	if (!p->text) {
		gw_error_set(&p->error, 500, NULL, "out of memory");
		return -1;
	}
	memcpy(p->text, json_string_value(s), p->text_len + 1);
	int rc = tokenize(m, p->text, p->text_len, &p->ids, &p->n_ids);
	if (rc < 0)
		gw_error_from_bn(&p->error, rc, "the prompt");
	return rc < 0 ? -1 : 0;
}

/* An empty prompt, or one that leaves no room for max_tokens, fails here (the daemon would
 * refuse it too, with less to say). */
static void check_room(struct gw_job *job, struct gw_prompt *p, const struct gw_model *m)
{
	uint32_t ctx = m->info.context_length;
	if (p->error.status)
		return;
	if (p->n_ids == 0)
		gw_error_set(&p->error, 400, job->kind == GW_CHAT ? "messages" : "prompt",
			     "the prompt is empty");
	else if ((uint64_t)p->n_ids + job->max_tokens > ctx || p->n_ids >= ctx)
		gw_error_set(&p->error, 400, job->max_tokens_given ? "max_tokens" : "messages",
			     "This model's maximum context length is %u tokens; the prompt has %u and max_tokens is %u",
			     ctx, p->n_ids, job->max_tokens);
	if (p->error.status == 400 && p->n_ids >= ctx)
		p->error.code = "context_length_exceeded";
}

static int completions_prompts(struct gw_job *job, json_t *root, const struct gw_model *m,
			       struct gw_error *err)
{
	json_t *prompt = json_object_get(root, "prompt");
	/* ["a", "b"] and [[1, 2], [3]] are several prompts; [1, 2] is one */
	int many = json_is_array(prompt) && json_array_size(prompt) > 0 &&
		   !json_is_integer(json_array_get(prompt, 0));
	size_t n = many ? json_array_size(prompt) : 1;
	if (!prompt || (!json_is_string(prompt) && !json_is_array(prompt)) ||
	    (json_is_array(prompt) && json_array_size(prompt) == 0)) {
		gw_error_set(err, 400, "prompt",
			     "prompt must be a string, an array of strings, an array of token ids or an array of such arrays");
		return -1;
	}
	job->prompts = calloc(n, sizeof(*job->prompts));
	if (!job->prompts) {
		gw_error_set(err, 500, NULL, "out of memory");
		return -1;
	}
	job->n_prompts = n;
	job->prompt_was_array = many;
	for (size_t i = 0; i < n; i++) {
		json_t *item = many ? json_array_get(prompt, i) : prompt;
		struct gw_prompt *p = &job->prompts[i];
		if (json_is_string(item))
			text_prompt(p, item, m);
		else if (json_is_array(item))
			ids_prompt(p, item, m, job->echo);
		else
			gw_error_set(&p->error, 400, "prompt",
				     "each prompt must be a string or an array of token ids");
		check_room(job, p, m);
	}
	if (!many && job->prompts[0].error.status) {
		*err = job->prompts[0].error;
		return -1;
	}
	return 0;
}

/* A message's content: a string, or an array of {"type": "text", "text": ...} parts (joined),
 * or null (an assistant's turn with nothing said). NULL when it is none of these. */
static char *message_text(json_t *content)
{
	if (!content || json_is_null(content))
		return strdup("");
	if (json_is_string(content))
		return strndup(json_string_value(content), json_string_length(content));
	if (!json_is_array(content))
		return NULL;
	size_t total = 0, i;
	json_t *part;
	json_array_foreach(content, i, part)
	{
		const char *type = json_string_value(json_object_get(part, "type"));
		if (!type || strcmp(type, "text") || !json_is_string(json_object_get(part, "text")))
			return NULL;
		total += json_string_length(json_object_get(part, "text"));
	}
	char *text = malloc(total + 1), *at = text;
	json_array_foreach(content, i, part)
	{
		json_t *t = json_object_get(part, "text");
		if (text) {
			memcpy(at, json_string_value(t), json_string_length(t));
			at += json_string_length(t);
		}
	}
	if (text)
		*at = '\0';
	return text;
}

static void free_messages(struct bn_chat_message *msgs, size_t n)
{
	for (size_t i = 0; msgs && i < n; i++)
		free((char *)msgs[i].content);
	free(msgs);
}

/* An assistant turn's tool calls, as the model answers tool_choice "required": after the
 * turn's text (if any), one line {"name":NAME,"arguments":ARGS} per call, ARGS the call's
 * arguments text as given. NULL when they are not OpenAI's shape. */
static char *with_tool_calls(char *text, json_t *calls)
{
	size_t cap = 0, i;
	char *out = NULL;
	FILE *f = open_memstream(&out, &cap);
	int ok = f && json_is_array(calls);
	json_t *call;
	if (ok)
		fputs(text, f);
	json_array_foreach(calls, i, call)
	{
		json_t *fn = json_object_get(call, "function");
		const char *name = json_string_value(json_object_get(fn, "name"));
		const char *args = json_string_value(json_object_get(fn, "arguments"));
		if (!name || !args) {
			ok = 0;
			break;
		}
		fprintf(f, "%s{\"name\":\"%s\",\"arguments\":%s}", ftell(f) ? "\n" : "", name, args);
	}
	if (f)
		fclose(f);
	free(text);
	if (!ok)
		free(out);
	return ok ? out : NULL;
}

/* Message i: its role (borrowed from the JSON) and its text (copied): the content, and an
 * assistant's tool calls after it. A tool message keeps its role ("tool") and its content, the
 * result: the template renders it as any other turn. 0 or -1 (err set). */
static int read_message(json_t *msg, size_t i, struct bn_chat_message *out, struct gw_error *err)
{
	json_t *calls = json_object_get(msg, "tool_calls");
	out->role = json_string_value(json_object_get(msg, "role"));
	out->content = message_text(json_object_get(msg, "content"));
	if (out->content && calls && !json_is_null(calls) && out->role &&
	    !strcmp(out->role, "assistant"))
		out->content = with_tool_calls((char *)out->content, calls);
	else if (calls && !json_is_null(calls))
		out->role = NULL;
	if (!out->role || !out->content) {
		gw_error_set(err, 400, "messages",
			     "messages[%zu] needs a role and a content that is a string or text parts (tool_calls: an assistant's, each with function.name and function.arguments)",
			     i);
		return -1;
	}
	return 0;
}

/* The messages as bn_chat_message; with tools (tool_prompt), the system message tells them
 * (a first system message gets the text after its own, else one is put first). */
static struct bn_chat_message *read_messages(json_t *arr, const char *tool_prompt, size_t *n,
					     struct gw_error *err)
{
	size_t given = json_array_size(arr);
	if (!json_is_array(arr) || given == 0 || given > MAX_MESSAGES) {
		gw_error_set(err, 400, "messages", "messages must be an array of 1 to %d messages",
			     MAX_MESSAGES);
		return NULL;
	}
	const char *first = json_string_value(json_object_get(json_array_get(arr, 0), "role"));
	size_t at = tool_prompt && !(first && !strcmp(first, "system")) ? 1 : 0;
	*n = given + at;
	struct bn_chat_message *msgs = calloc(*n, sizeof(*msgs));
	if (!msgs) {
		gw_error_set(err, 500, NULL, "out of memory");
		return NULL;
	}
	if (at) {
		msgs[0].role = "system";
		msgs[0].content = strdup("");
	}
	for (size_t i = 0; i < given; i++)
		if (read_message(json_array_get(arr, i), i, &msgs[at + i], err) < 0) {
			free_messages(msgs, *n);
			return NULL;
		}
	if (tool_prompt) {
		char *sys = NULL;
		if (asprintf(&sys, "%s%s%s", msgs[0].content, *msgs[0].content ? "\n\n" : "",
			     tool_prompt) < 0)
			sys = NULL;
		free((char *)msgs[0].content);
		msgs[0].content = sys;
	}
	if (!msgs[0].content) {
		gw_error_set(err, 500, NULL, "out of memory");
		free_messages(msgs, *n);
		return NULL;
	}
	return msgs;
}

static int chat_prompt(struct gw_job *job, json_t *root, const struct gw_model *m,
		       struct gw_error *err)
{
	if (!m->vocab) {
		gw_error_set(err, 400, "messages", "this model has no vocabulary: chat is not possible");
		return -1;
	}
	uint32_t tmpl = bn_vocab_chat_template(m->vocab);
	if (tmpl == BN_CHAT_NONE || tmpl == BN_CHAT_UNKNOWN) {
		gw_error_set(err, 400, "messages",
			     "this model has no chat template bitnetd knows (the daemon's --chat-template chooses one): use /v1/completions");
		return -1;
	}
	size_t n;
	struct bn_chat_message *msgs = read_messages(json_object_get(root, "messages"),
						     job->structured.prompt, &n, err);
	if (!msgs)
		return -1;
	job->prompts = calloc(1, sizeof(*job->prompts));
	job->n_prompts = job->prompts ? 1 : 0;
	int k = job->prompts ? bn_chat_tokenize(m->vocab, 0, msgs, n, NULL, 0) : -ENOMEM;
	struct gw_prompt *p = job->prompts;
	if (k > 0 && !(p->ids = malloc((size_t)k * sizeof(*p->ids))))
		k = -ENOMEM;
	if (k > 0)
		k = bn_chat_tokenize(m->vocab, 0, msgs, n, p->ids, (uint32_t)k);
	free_messages(msgs, n);
	if (k < 0) {
		if (k == -BN_E_INVALID)
			gw_error_set(err, 400, "messages",
				     "the model's chat template does not take these messages (roles of 1-32 characters of [A-Za-z0-9_-], in an order the template allows)");
		else
			gw_error_from_bn(err, k, "the messages");
		return -1;
	}
	p->n_ids = (uint32_t)k;
	if (!job->max_tokens_given) /* the rest of the context, as vLLM does */
		job->max_tokens = p->n_ids < m->info.context_length
					  ? m->info.context_length - p->n_ids : 0;
	check_room(job, p, m);
	if (p->error.status) {
		*err = p->error;
		return -1;
	}
	return 0;
}

int gw_prompts_parse(struct gw_job *job, json_t *root, const struct gw_model *m,
		     struct gw_error *err)
{
	return job->kind == GW_CHAT ? chat_prompt(job, root, m, err)
				    : completions_prompts(job, root, m, err);
}
