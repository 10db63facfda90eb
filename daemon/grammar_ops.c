/* SPDX-License-Identifier: MIT */
/*
 * grammar_ops.c — structured output at the ring edge (session.h, shm/PROTOCOL.md §6.13): the
 * ops BN_OP_GRAMMAR (its head and text copied out of the text region once and checked, then
 * compiled by the grammar service) and BN_OP_GRAMMAR_FREE, the table of a session's grammars
 * by id, and a generate request's BN_REQ_GRAMMAR resolved against it. Every refusal writes its
 * reason to the request's text region (n_text bytes of UTF-8): the engine's message for a
 * grammar it refused, which names what and where.
 */
#define _GNU_SOURCE
#include "session.h"

#include "bitnet_barrier.h"
#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The longest whitespace run between JSON tokens a grammar may ask for. */
#define MAX_WS_LIMIT 1000u

int bn_session_has_grammars(const struct bn_session *s)
{
	return s->grammar_svc && s->grammar_svc->vocab && s->seg.text_capacity;
}

/* ------------------------------------------------------------------------------------------ */
/* The table                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static struct bn_session_grammar *find(struct bn_session *s, uint32_t id)
{
	for (uint32_t i = 0; id && i < s->n_grammars; i++)
		if (s->grammars[i].id == id)
			return &s->grammars[i];
	return NULL;
}

/* Takes the reference; returns the new id, or 0 without memory (the reference dropped). */
static uint32_t table_add(struct bn_session *s, struct bn_grammar_bound *b)
{
	if (s->n_grammars == s->grammars_cap) {
		uint32_t cap = s->grammars_cap ? 2 * s->grammars_cap : 4;
		struct bn_session_grammar *t = realloc(s->grammars, cap * sizeof(*t));
		if (!t) {
			bn_grammar_bound_unref(b);
			return 0;
		}
		s->grammars = t;
		s->grammars_cap = cap;
	}
	/* Ids count from 1 (0 is the unused word) and never repeat in a session; past 2^32 - 1
	 * they would, which takes longer than any session lives. */
	if (++s->next_grammar_id == 0)
		s->next_grammar_id = 1;
	s->grammars[s->n_grammars++] = (struct bn_session_grammar){ s->next_grammar_id, b };
	return s->next_grammar_id;
}

void bn_session_grammars_free(struct bn_session *s)
{
	for (uint32_t i = 0; i < s->n_grammars; i++)
		bn_grammar_bound_unref(s->grammars[i].bound);
	free(s->grammars);
	s->grammars = NULL;
	s->n_grammars = s->grammars_cap = 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The ops                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* max_tokens and the 13 words from temperature to grammar_id (bytes 76..127): the ops use none
 * of them. */
static uint32_t unused_words(const struct bn_slot *sl)
{
	const uint32_t *words = (const uint32_t *)(const void *)&sl->temperature;
	uint32_t nonzero = bn_read_once(sl->max_tokens);
	for (uint32_t i = 0; i < 13; i++)
		nonzero |= bn_read_once(words[i]);
	return nonzero;
}

static uint32_t read_u32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

/* The head's words, checked; the options the engine takes. 0 or BN_E_INVALID (reason written). */
static uint32_t read_head(struct bn_session *s, struct bn_req *r, const uint8_t *head,
			  struct bn_grammar_options *o)
{
	uint32_t kind = read_u32(head + offsetof(struct bn_grammar_head, kind));
	uint32_t flags = read_u32(head + offsetof(struct bn_grammar_head, flags));
	uint32_t max_ws = read_u32(head + offsetof(struct bn_grammar_head, max_ws));
	uint32_t reserved = read_u32(head + offsetof(struct bn_grammar_head, reserved));
	int json = kind == BN_GRAMMAR_KIND_JSON_SCHEMA || kind == BN_GRAMMAR_KIND_JSON;
	const char *why = kind < BN_GRAMMAR_KIND_JSON_SCHEMA || kind > BN_GRAMMAR_KIND_GBNF
				  ? "kind is not 1 (JSON Schema), 2 (JSON), 3 (regular expression) or 4 (GBNF)"
			  : flags & ~(BN_GRAMMAR_JSON_OBJECT | BN_GRAMMAR_JSON_COMPACT)
				  ? "flags has bits other than JSON_OBJECT and JSON_COMPACT"
			  : (flags & BN_GRAMMAR_JSON_OBJECT) && kind != BN_GRAMMAR_KIND_JSON
				  ? "JSON_OBJECT is for kind 2 (JSON) only: a schema says its top itself"
			  : ((flags & BN_GRAMMAR_JSON_COMPACT) || max_ws) && !json
				  ? "JSON_COMPACT and max_ws are for JSON forms only"
			  : max_ws > MAX_WS_LIMIT ? "max_ws is over 1000"
			  : reserved		  ? "the head's reserved word is not 0"
						  : NULL;
	if (why) {
		bn_req_write_reason(s, r, "grammar head: %s", why);
		return BN_E_INVALID;
	}
	*o = (struct bn_grammar_options){
		.kind = kind, /* enum bn_grammar_text_kind has enum bn_grammar_kind's values */
		.json_top = flags & BN_GRAMMAR_JSON_OBJECT ? BN_GRAMMAR_TOP_OBJECT : BN_GRAMMAR_TOP_ANY,
		.flags = flags & BN_GRAMMAR_JSON_COMPACT ? BN_GRAMMAR_F_COMPACT_JSON : 0,
		.max_ws = max_ws,
		.limits = { .max_text_bytes = BN_GRAMMAR_TEXT_MAX,
			    .compile_ms = s->grammar_svc->cfg.compile_ms },
	};
	return 0;
}

/* A compile job from the op's text region (n_prompt bytes: the head, then the text), copied
 * once. 0 with *out, or the bn_error (reason written). */
static uint32_t make_job(struct bn_session *s, struct bn_req *r, uint32_t n,
			 struct bn_grammar_job **out)
{
	if (n < sizeof(struct bn_grammar_head)) {
		bn_req_write_reason(s, r, "n_prompt %u is shorter than the 16-byte grammar head", n);
		return BN_E_INVALID;
	}
	if (n > s->seg.text_capacity) {
		bn_req_write_reason(s, r, "the grammar is %u bytes, over the limit of %u bytes of grammar "
			     "text (n_prompt %u is over the text region's %u bytes)",
			     n - (uint32_t)sizeof(struct bn_grammar_head), BN_GRAMMAR_TEXT_MAX, n,
			     s->seg.text_capacity);
		return BN_E_TOO_LONG;
	}
	struct bn_grammar_job *job = calloc(1, sizeof(*job));
	uint8_t *copy = malloc(n);
	if (!job || !copy) {
		free(job);
		free(copy);
		bn_req_write_reason(s, r, "no memory for the grammar's text");
		return BN_E_BACKEND;
	}
	memcpy(copy, bn_slot_text(&s->seg, r->slot), n);
	uint32_t err = read_head(s, r, copy, &job->options);
	if (err) {
		free(copy);
		free(job);
		return err;
	}
	job->len = n - sizeof(struct bn_grammar_head);
	memmove(copy, copy + sizeof(struct bn_grammar_head), job->len);
	job->text = copy;
	job->owner = s;
	job->slot = r->slot;
	*out = job;
	return 0;
}

static uint32_t take_compile(struct bn_session *s, struct bn_req *r, int shutting_down,
			     uint32_t *status)
{
	struct bn_grammar_job *job;
	uint32_t err = make_job(s, r, r->n_prompt, &job);
	if (err)
		return err;
	if (s->n_grammars + s->grammar_jobs >= s->max_grammars) {
		bn_grammar_job_free(job);
		bn_req_write_reason(s, r, "the session holds %u grammars and compiles %u (bitnetd "
			     "--max-grammars %u): free one first (BN_OP_GRAMMAR_FREE)",
			     s->n_grammars, s->grammar_jobs, s->max_grammars);
		return BN_E_BUSY;
	}
	if (shutting_down) {
		bn_grammar_job_free(job);
		*status = BN_STATUS_SHUTDOWN;
		return 0;
	}
	r->job = job;
	s->grammar_jobs++;
	bn_grammar_service_submit(s->grammar_svc, job);
	*status = BN_STATUS_NONE;
	return 0;
}

static uint32_t take_free(struct bn_session *s, struct bn_req *r, int shutting_down,
			  uint32_t *status)
{
	if (r->n_prompt != 1) {
		bn_req_write_reason(s, r, "GRAMMAR_FREE takes one id (n_prompt 1), not %u", r->n_prompt);
		return BN_E_INVALID;
	}
	uint32_t id = bn_read_once(bn_slot_prompt(&s->seg, r->slot)[0]);
	struct bn_session_grammar *e = find(s, id);
	if (!e) {
		bn_req_write_reason(s, r, "grammar id %u is not one of this session's", id);
		return BN_E_INVALID;
	}
	if (shutting_down) {
		*status = BN_STATUS_SHUTDOWN;
		return 0;
	}
	/* Requests that use it hold references of their own. */
	bn_grammar_bound_unref(e->bound);
	*e = s->grammars[--s->n_grammars];
	*status = BN_STATUS_COMPLETE;
	return 0;
}

uint32_t bn_grammar_op_take(struct bn_session *s, struct bn_req *r, int shutting_down,
			    uint32_t *status)
{
	struct bn_slot *sl = bn_slot_at(&s->seg, r->slot);
	r->n_prompt = bn_read_once(sl->n_prompt);
	r->flags = bn_read_once(sl->flags);
	if (!bn_session_has_grammars(s)) {
		bn_req_write_reason(s, r, "this daemon constrains no outputs: %s", s->grammars_off);
		return BN_E_UNSUPPORTED;
	}
	if (r->flags || unused_words(sl)) {
		bn_req_write_reason(s, r, "grammar ops take no flags, and max_tokens and the words from "
			     "temperature to grammar_id must be 0");
		return BN_E_INVALID;
	}
	return r->op == BN_OP_GRAMMAR ? take_compile(s, r, shutting_down, status)
				      : take_free(s, r, shutting_down, status);
}

/* What a compile's failure is to the client. */
static uint32_t compile_error(int rc)
{
	switch (rc) {
	case -EINVAL: return BN_E_GRAMMAR;
	case -E2BIG:
	case -ETIME: return BN_E_GRAMMAR_LIMIT;
	default: return BN_E_BACKEND;
	}
}

void bn_session_grammar_done(struct bn_session *s, struct bn_grammar_job *job)
{
	struct bn_req *r = &s->reqs[job->slot];
	if (s->phase != BN_SESSION_ACTIVE || !r->in_flight || r->job != job) {
		bn_grammar_job_free(job); /* the op ended with its session */
		return;
	}
	r->job = NULL;
	if (bn_req_cancel_requested(r)) { /* a client that gave up waiting: nobody has the id */
		bn_req_finish(r, BN_STATUS_CANCELLED, 0);
		bn_grammar_job_free(job);
		return;
	}
	uint32_t id = 0;
	if (job->rc == 0) {
		id = table_add(s, job->bound);
		job->bound = NULL; /* the table's now, or dropped */
	}
	if (id) {
		bn_write_once(bn_slot_output(&s->seg, r->slot)[0], id);
		r->n_out = 1;
		bn_req_finish(r, BN_STATUS_COMPLETE, 0);
	} else {
		if (job->rc == 0 || job->rc == -ENOMEM)
			bn_req_write_reason(s, r, "no memory for the grammar");
		else
			bn_req_write_reason(s, r, "%s", job->err);
		bn_req_finish(r, BN_STATUS_ERROR, job->rc == 0 ? BN_E_BACKEND : compile_error(job->rc));
	}
	bn_grammar_job_free(job);
}

void bn_session_grammar_ops_end(struct bn_session *s, uint32_t status, uint32_t error)
{
	for (uint32_t i = 0; s->reqs && i < s->seg.slot_count; i++) {
		struct bn_req *r = &s->reqs[i];
		if (!r->job)
			continue;
		r->job = NULL; /* the service gives it back to the loop, which drops it */
		if (status && r->in_flight)
			bn_req_finish(r, status, error);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Generate requests                                                                           */
/* ------------------------------------------------------------------------------------------ */

uint32_t bn_grammar_attach(struct bn_session *s, struct bn_req *r, uint32_t id)
{
	struct bn_session_grammar *e = find(s, id);
	if (!e) {
		bn_req_write_reason(s, r, "grammar id %u is not one of this session's (compiled by "
			     "BN_OP_GRAMMAR and not freed)", id);
		return BN_E_INVALID;
	}
	bn_grammar_bound_ref(e->bound);
	r->grammar = e->bound;
	return 0;
}
