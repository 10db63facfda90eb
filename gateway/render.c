/* SPDX-License-Identifier: MIT */
/*
 * render.c — OpenAI response objects from a run.
 */
#define _GNU_SOURCE
#include "render.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int gw_buf_add(struct gw_buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 1024;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->data, cap);
		if (!p)
			return -ENOMEM;
		b->data = p;
		b->cap = cap;
	}
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

void gw_buf_free(struct gw_buf *b)
{
	free(b->data);
	*b = (struct gw_buf){ 0 };
}

/* ---- log-probabilities ------------------------------------------------------------------- */

/* A token's text as a JSON string (its bytes; special tokens as their text), and its bytes
 * as an array when bytes is not NULL. */
static json_t *token_text(const struct gw_model *m, uint32_t id, json_t **bytes)
{
	char buf[256];
	int n = m->vocab ? bn_detokenize_ex(m->vocab, &id, 1, BN_DETOK_SPECIAL, buf, sizeof(buf)) : -1;
	if (n < 0) {
		n = snprintf(buf, sizeof(buf), "<id %u>", id); /* no vocabulary: the id */
	} else if ((size_t)n >= sizeof(buf)) {
		n = (int)sizeof(buf) - 1;
	}
	if (bytes) {
		*bytes = json_array();
		for (int i = 0; i < n; i++)
			json_array_append_new(*bytes, json_integer((unsigned char)buf[i]));
	}
	return gw_json_text(buf, (size_t)n);
}

/* Code points in a JSON string (text_offset counts characters, as Python's len does). */
static size_t chars_of(json_t *s)
{
	size_t n = 0, len = json_string_length(s);
	const unsigned char *p = (const unsigned char *)json_string_value(s);
	for (size_t i = 0; i < len; i++)
		n += (p[i] & 0xc0) != 0x80;
	return n;
}

/* Chat's logprobs.content entry of one token. */
static json_t *chat_entry(const struct gw_model *m, const struct bn_logprob *lp,
			  const struct bn_logprob *alt, uint32_t k)
{
	json_t *bytes, *top = json_array();
	json_t *tok = token_text(m, lp->token, &bytes);
	for (uint32_t j = 0; j < k; j++) {
		json_t *b, *t = token_text(m, alt[j].token, &b);
		json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", t, "logprob",
						     (double)alt[j].logprob, "bytes", b));
	}
	return json_pack("{s:o, s:f, s:o, s:o}", "token", tok, "logprob", (double)lp->logprob,
			 "bytes", bytes, "top_logprobs", top);
}

/* Completions' logprobs arrays, extended by tokens [from, to) of records lp/alt. */
struct legacy_lp {
	json_t *tokens, *token_logprobs, *top_logprobs, *text_offset;
	size_t offset;            /* characters so far */
};

static void legacy_add(struct legacy_lp *l, const struct gw_model *m,
		       const struct bn_logprob *lp, const struct bn_logprob *alt, uint32_t k,
		       int first_of_prompt)
{
	json_t *tok = token_text(m, lp->token, NULL);
	size_t chars = chars_of(tok);
	json_array_append_new(l->text_offset, json_integer((json_int_t)l->offset));
	l->offset += chars;
	json_array_append_new(l->tokens, tok);
	if (first_of_prompt) { /* the first prompt token has no log-probability */
		json_array_append_new(l->token_logprobs, json_null());
		json_array_append_new(l->top_logprobs, json_null());
		return;
	}
	json_array_append_new(l->token_logprobs, json_real(lp->logprob));
	json_t *top = json_object();
	for (uint32_t j = 0; j < k; j++) {
		json_t *t = token_text(m, alt[j].token, NULL);
		json_object_set_new(top, json_string_value(t), json_real(alt[j].logprob));
		json_decref(t);
	}
	json_object_set_new(top, json_string_value(tok), json_real(lp->logprob));
	json_array_append_new(l->top_logprobs, top);
}

static json_t *legacy_json(struct legacy_lp *l)
{
	return json_pack("{s:o, s:o, s:o, s:o}", "tokens", l->tokens, "token_logprobs",
			 l->token_logprobs, "top_logprobs", l->top_logprobs, "text_offset",
			 l->text_offset);
}

static struct legacy_lp legacy_new(size_t offset)
{
	return (struct legacy_lp){ json_array(), json_array(), json_array(), json_array(), offset };
}

/* The echoed prompt's tokens into l: the first without a log-probability (so any token the
 * scoring did not reach), the others with the prompt's scores. */
static void legacy_prompt(struct legacy_lp *l, const struct gw_run *r, const struct gw_prompt *p)
{
	const struct gw_prompt_scores *s = &r->scores[p - r->job->prompts];
	uint32_t k = r->job->top_logprobs;
	for (uint32_t i = 0; i < p->n_ids; i++) {
		int scored = i >= 1 && i - 1 < s->n;
		struct bn_logprob rec = scored ? s->lp[i - 1] : (struct bn_logprob){ .token = p->ids[i] };
		legacy_add(l, r->model, &rec, scored && k ? s->top + (size_t)(i - 1) * k : NULL,
			   scored ? k : 0, !scored);
	}
}

/* The log-probabilities of a choice's tokens [from, to). */
static json_t *choice_logprobs(const struct gw_run *r, const struct gw_choice *c, uint32_t from,
			       uint32_t to, int with_prompt, size_t *offset)
{
	uint32_t k = r->job->top_logprobs;
	if (r->job->kind == GW_CHAT) {
		json_t *content = json_array();
		for (uint32_t i = from; i < to; i++)
			json_array_append_new(content, chat_entry(r->model, &c->lp[i],
								  k ? c->alt + (size_t)i * k : NULL, k));
		return json_pack("{s:o}", "content", content);
	}
	struct legacy_lp l = legacy_new(*offset);
	if (with_prompt)
		legacy_prompt(&l, r, c->prompt);
	for (uint32_t i = from; i < to; i++)
		legacy_add(&l, r->model, &c->lp[i], k ? c->alt + (size_t)i * k : NULL, k, 0);
	*offset = l.offset;
	return legacy_json(&l);
}

/* ---- whole responses --------------------------------------------------------------------- */

static json_t *usage_json(const struct gw_run *r)
{
	uint32_t p = gw_run_prompt_tokens(r), c = gw_run_completion_tokens(r);
	return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)p, "completion_tokens",
			 (json_int_t)c, "total_tokens", (json_int_t)p + c);
}

/* The choice's whole text: with echo, the prompt's first. */
static json_t *choice_text(const struct gw_run *r, const struct gw_choice *c)
{
	if (!r->job->echo)
		return gw_json_text(c->text ? c->text : "", c->text_len);
	struct gw_buf b = { 0 };
	gw_buf_add(&b, c->prompt->text ? c->prompt->text : "", c->prompt->text_len);
	gw_buf_add(&b, c->text ? c->text : "", c->text_len);
	json_t *t = gw_json_text(b.data ? b.data : "", b.len);
	gw_buf_free(&b);
	return t;
}

/* ---- tool calls -------------------------------------------------------------------------- */

/* A choice's finish_reason: a tool call that ended with EOS is "tool_calls". */
static const char *finish_of(const struct gw_run *r, const struct gw_choice *c)
{
	if (!c->finish)
		return "error";
	return r->job->structured.tools && !strcmp(c->finish, "stop") ? "tool_calls" : c->finish;
}

/* One entry of tool_calls: its arguments [from, to) of the call's; with head, the index, id,
 * type and name (a stream's first delta of the call, or a whole message's). */
static json_t *tool_call_json(const struct gw_choice *c, const char *name, const char *args,
			      size_t len, int head, int with_index)
{
	json_t *fn = json_object(), *call = json_object();
	if (with_index)
		json_object_set_new(call, "index", json_integer(0));
	if (head) {
		json_object_set_new(call, "id", json_string(c->call_id));
		json_object_set_new(call, "type", json_string("function"));
		json_object_set_new(fn, "name", json_string(name));
	}
	json_object_set_new(fn, "arguments", gw_json_text(args, len));
	json_object_set_new(call, "function", fn);
	return call;
}

static int call_state(const struct gw_choice *c)
{
	if (!c->finish && !c->error.status)
		return GW_CALL_RUNNING;
	return c->finish && !strcmp(c->finish, "stop") ? GW_CALL_WHOLE : GW_CALL_CUT;
}

/* A whole answer's message: content null, the call in tool_calls (none when the output ended
 * before the function's name was whole). */
static json_t *tool_message(const struct gw_run *r, const struct gw_choice *c)
{
	char name[72];
	size_t at, len;
	json_t *calls = json_array();
	if (gw_tool_call_split(&r->job->structured, c->text ? c->text : "", c->text_len,
			       call_state(c), name, sizeof(name), &at, &len))
		json_array_append_new(calls, tool_call_json(c, name, c->text + at, len, 1, 0));
	return json_pack("{s:s, s:n, s:o}", "role", "assistant", "content", "tool_calls", calls);
}

/* A stream's delta of a tool call: the call's head once its name is known, then the
 * arguments as they come (emitted_text counts the arguments' bytes sent). NULL: nothing new. */
static json_t *tool_delta(struct gw_run *r, struct gw_choice *c, int first)
{
	char name[72];
	size_t at, len;
	json_t *delta = json_object(), *call = NULL;
	if (gw_tool_call_split(&r->job->structured, c->text ? c->text : "", c->text_len,
			       call_state(c), name, sizeof(name), &at, &len) &&
	    (!c->emitted_call || len > c->emitted_text)) {
		call = tool_call_json(c, name, c->text + at + c->emitted_text, len - c->emitted_text,
				      !c->emitted_call, 1);
		c->emitted_call = 1;
		c->emitted_text = len;
	}
	if (first) {
		json_object_set_new(delta, "role", json_string("assistant"));
		json_object_set_new(delta, "content", json_null());
	}
	if (call)
		json_object_set_new(delta, "tool_calls", json_pack("[o]", call));
	return delta;
}

static json_t *choice_json(const struct gw_run *r, const struct gw_choice *c)
{
	json_t *lp = json_null();
	size_t offset = 0;
	if (r->job->logprobs && !c->error.status)
		lp = choice_logprobs(r, c, 0, c->have, r->job->echo && r->scores, &offset);
	json_t *o;
	if (r->job->kind == GW_CHAT && r->job->structured.tools)
		o = json_pack("{s:I, s:o, s:o, s:s}", "index", (json_int_t)c->index, "message",
			      tool_message(r, c), "logprobs", lp, "finish_reason", finish_of(r, c));
	else if (r->job->kind == GW_CHAT)
		o = json_pack("{s:I, s:{s:s, s:o}, s:o, s:s}", "index", (json_int_t)c->index,
			      "message", "role", "assistant", "content", choice_text(r, c),
			      "logprobs", lp, "finish_reason", c->finish ? c->finish : "error");
	else
		o = json_pack("{s:I, s:o, s:o, s:s}", "index", (json_int_t)c->index, "text",
			      choice_text(r, c), "logprobs", lp, "finish_reason",
			      c->finish ? c->finish : "error");
	if (o && c->error.status) { /* one prompt of an array failed: its choices say why */
		json_t *e = gw_error_json(&c->error);
		json_object_set(o, "error", json_object_get(e, "error"));
		json_decref(e);
	}
	return o;
}

char *gw_render_response(const struct gw_run *r)
{
	json_t *choices = json_array();
	for (size_t i = 0; i < r->n_choices; i++)
		json_array_append_new(choices, choice_json(r, &r->choices[i]));
	json_t *root = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", r->id, "object",
				 r->job->kind == GW_CHAT ? "chat.completion" : "text_completion",
				 "created", (json_int_t)r->created, "model", r->model->id, "choices", choices,
				 "usage", usage_json(r));
	char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
	json_decref(root);
	return text;
}

/* ---- streams ----------------------------------------------------------------------------- */

static int add_event(struct gw_buf *out, json_t *chunk)
{
	char *text = chunk ? json_dumps(chunk, JSON_COMPACT) : NULL;
	json_decref(chunk);
	int rc = text ? gw_buf_add(out, "data: ", 6) : -ENOMEM;
	if (rc == 0)
		rc = gw_buf_add(out, text, strlen(text));
	if (rc == 0)
		rc = gw_buf_add(out, "\n\n", 2);
	free(text);
	return rc;
}

/* One chunk: the run's id, object, created and model around choices (and usage: null when
 * the usage chunk is to come, as OpenAI's streams carry it). */
static json_t *chunk_json(const struct gw_run *r, json_t *choices)
{
	json_t *c = json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", r->id, "object",
			      r->job->kind == GW_CHAT ? "chat.completion.chunk" : "text_completion",
			      "created", (json_int_t)r->created, "model", r->model->id, "choices", choices);
	if (c && r->job->include_usage)
		json_object_set_new(c, "usage", json_null());
	return c;
}

/* choice_delta of a tool call. */
static json_t *tool_choice_delta(struct gw_run *r, struct gw_choice *c, int first, int ended)
{
	uint32_t new_lp = r->job->logprobs ? c->have - c->emitted_lp : 0;
	size_t sent = c->emitted_text;
	int had_call = c->emitted_call;
	json_t *delta = tool_delta(r, c, first);
	if (!first && !ended && !new_lp && sent == c->emitted_text && had_call == c->emitted_call) {
		json_decref(delta);
		return NULL;
	}
	json_t *lp = new_lp ? choice_logprobs(r, c, c->emitted_lp, c->have, 0, &c->emitted_offset)
			    : json_null();
	c->emitted_role = 1;
	c->emitted_lp = c->have;
	c->emitted_finish |= ended;
	return json_pack("{s:I, s:o, s:o, s:o}", "index", (json_int_t)c->index, "delta", delta,
			 "logprobs", lp, "finish_reason",
			 ended ? json_string(finish_of(r, c)) : json_null());
}

/* What choice c released since its last chunk, as one choice object of a chunk; NULL when
 * there is nothing to send. */
static json_t *choice_delta(struct gw_run *r, struct gw_choice *c)
{
	int first = !c->emitted_role;
	int ended = !c->emitted_finish && (c->finish || c->error.status);
	if (r->job->structured.tools)
		return tool_choice_delta(r, c, first, ended);
	size_t new_text = c->text_len - c->emitted_text;
	uint32_t new_lp = r->job->logprobs ? c->have - c->emitted_lp : 0;
	int echo = first && r->job->echo;
	if (!first && !ended && !new_text && !new_lp)
		return NULL;
	struct gw_buf t = { 0 };
	if (echo)
		gw_buf_add(&t, c->prompt->text ? c->prompt->text : "", c->prompt->text_len);
	gw_buf_add(&t, c->text ? c->text + c->emitted_text : "", new_text);
	json_t *text = gw_json_text(t.data ? t.data : "", t.len);
	gw_buf_free(&t);
	json_t *lp = new_lp || (echo && r->scores)
			     ? choice_logprobs(r, c, c->emitted_lp, c->have, echo && r->scores,
					       &c->emitted_offset)
			     : json_null();
	json_t *finish = ended ? json_string(c->finish ? c->finish : "error") : json_null();
	json_t *o;
	if (r->job->kind == GW_CHAT) {
		json_t *delta = json_pack("{s:o}", "content", text);
		if (first)
			json_object_set_new(delta, "role", json_string("assistant"));
		o = json_pack("{s:I, s:o, s:o, s:o}", "index", (json_int_t)c->index, "delta", delta,
			      "logprobs", lp, "finish_reason", finish);
	} else {
		o = json_pack("{s:I, s:o, s:o, s:o}", "index", (json_int_t)c->index, "text", text,
			      "logprobs", lp, "finish_reason", finish);
	}
	c->emitted_role = 1;
	c->emitted_text = c->text_len;
	c->emitted_lp = c->have;
	c->emitted_finish |= ended;
	return o;
}

int gw_render_stream(struct gw_run *r, int final, struct gw_buf *out)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < r->n_choices; i++) {
		struct gw_choice *c = &r->choices[i];
		if (c->error.status && !c->emitted_finish) {
			/* a choice that failed mid-stream: its error, then its end */
			json_t *e = gw_error_json(&c->error);
			json_object_set_new(json_object_get(e, "error"), "index",
					    json_integer((json_int_t)c->index));
			rc = add_event(out, e);
		}
		json_t *delta = rc == 0 ? choice_delta(r, c) : NULL;
		if (delta)
			rc = add_event(out, chunk_json(r, json_pack("[o]", delta)));
	}
	if (rc == 0 && final && r->job->include_usage) {
		json_t *u = chunk_json(r, json_array());
		json_object_set_new(u, "usage", usage_json(r));
		rc = add_event(out, u);
	}
	if (rc == 0 && final)
		rc = gw_buf_add(out, "data: [DONE]\n\n", 14);
	return rc;
}

int gw_render_stream_error(const struct gw_error *e, struct gw_buf *out)
{
	int rc = add_event(out, gw_error_json(e));
	return rc == 0 ? gw_buf_add(out, "data: [DONE]\n\n", 14) : rc;
}
