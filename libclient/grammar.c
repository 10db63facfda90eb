/* SPDX-License-Identifier: MIT */
/*
 * grammar.c — structured output (shm/PROTOCOL.md §6.13): grammars compiled in the daemon
 * (BN_OP_GRAMMAR), freed there (BN_OP_GRAMMAR_FREE), and requests constrained by them
 * (BN_REQ_GRAMMAR with the grammar's id).
 */
#define _GNU_SOURCE
#include "client_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bn_grammar_handle {
	struct bn_client *c;
	uint32_t id;
};

/* What a grammar op writes: the head and text, or the id to free. */
struct grammar_op {
	const struct bn_grammar_spec *spec;
	uint32_t id;
};

static void fill_compile(struct bn_client *c, uint32_t slot, const void *arg)
{
	const struct bn_grammar_spec *spec = ((const struct grammar_op *)arg)->spec;
	const struct bn_grammar_head head = { .kind = spec->kind, .flags = spec->flags,
					      .max_ws = spec->max_ws };
	uint8_t *text = text_of(c, slot);
	memcpy(text, &head, sizeof(head));
	if (spec->len)
		memcpy(text + sizeof(head), spec->text, spec->len);
	slot_of(c, slot)->n_prompt = (uint32_t)(sizeof(head) + spec->len);
}

static void fill_free(struct bn_client *c, uint32_t slot, const void *arg)
{
	prompt_of(c, slot)[0] = ((const struct grammar_op *)arg)->id;
	slot_of(c, slot)->n_prompt = 1;
}

/* Runs one grammar op to its end, waiting for a slot when all are busy: 0 with *result, the
 * handle's output[0] in *id and its text (the daemon's reason on failure) in err; or as
 * bn_submit and bn_wait. */
static int run_op(struct bn_client *c, uint32_t op, const struct grammar_op *arg,
		  int64_t deadline, struct bn_result *result, uint32_t *id, char *err,
		  size_t err_cap)
{
	struct bn_handle *h;
	int rc;
	while ((rc = bn_submit_op(c, op, op == BN_OP_GRAMMAR ? fill_compile : fill_free, arg,
				  &h)) == -BN_E_AGAIN)
		if ((rc = bn_wait_for_slot(c, deadline)) < 0)
			return rc;
	if (rc < 0)
		return rc;
	rc = bn_wait(h, bn_time_left(deadline));
	if (rc == 0)
		rc = bn_result(h, result);
	if (rc == 0 && result->n_tokens == 1)
		bn_read_tokens(h, 0, id, 1);
	if (rc == 0 && err && err_cap) {
		int n = bn_read_text(h, 0, err, err_cap - 1, NULL);
		err[n < 0 ? 0 : (size_t)n < err_cap - 1 ? (size_t)n : err_cap - 1] = '\0';
	}
	/* A compile still running when the wait gave up is cancelled: the daemon drops it. */
	if (rc == -BN_E_TIMEOUT)
		bn_cancel(h);
	bn_release(h);
	return rc;
}

/* The spec checked before a round trip; a size refused says the grammar's and the limit, as
 * the daemon's own refusal would. */
static int check_spec(const struct bn_client *c, const struct bn_grammar_spec *spec, char *err,
		      size_t err_cap)
{
	if (!spec || (!spec->text && spec->len) || spec->kind < BN_GRAMMAR_KIND_JSON_SCHEMA ||
	    spec->kind > BN_GRAMMAR_KIND_GBNF)
		return -BN_E_INVALID;
	if (!(c->layout.features & BN_FEAT_GRAMMAR))
		return -BN_E_UNSUPPORTED;
	if (spec->len > BN_GRAMMAR_TEXT_MAX) {
		if (err && err_cap)
			snprintf(err, err_cap, "the grammar is %zu bytes, over the limit of %u bytes "
				 "of grammar text", spec->len, BN_GRAMMAR_TEXT_MAX);
		return -BN_E_GRAMMAR_LIMIT;
	}
	/* A daemon before the limit's region takes less (its regions hold the context's text). */
	uint32_t room = c->layout.slot_text_capacity;
	room = room > sizeof(struct bn_grammar_head) ? room - sizeof(struct bn_grammar_head) : 0;
	if (spec->len > room) {
		if (err && err_cap)
			snprintf(err, err_cap, "the grammar is %zu bytes, over the %u bytes of grammar "
				 "text this daemon's slots hold", spec->len, room);
		return -BN_E_TOO_LONG;
	}
	return 0;
}

int bn_grammar_load(struct bn_client *c, const struct bn_grammar_spec *spec,
		    struct bn_grammar_handle **out, char *err, size_t err_cap, int64_t timeout_ns)
{
	if (err && err_cap)
		err[0] = '\0';
	if (!c || !out)
		return -BN_E_INVALID;
	int rc = check_spec(c, spec, err, err_cap);
	if (rc < 0)
		return rc;
	struct bn_grammar_handle *g = malloc(sizeof(*g));
	if (!g)
		return -ENOMEM;
	const struct grammar_op op = { .spec = spec };
	struct bn_result r = { 0 };
	uint32_t id = 0;
	rc = run_op(c, BN_OP_GRAMMAR, &op, bn_deadline_of(timeout_ns), &r, &id, err, err_cap);
	if (rc == 0)
		rc = bn_status_error(&r);
	if (rc == 0 && !id)
		rc = -BN_E_PROTOCOL; /* COMPLETE carries the id */
	if (rc < 0) {
		free(g);
		return rc;
	}
	*g = (struct bn_grammar_handle){ .c = c, .id = id };
	*out = g;
	return 0;
}

int bn_grammar_release(struct bn_grammar_handle *g)
{
	if (!g)
		return 0;
	const struct grammar_op op = { .id = g->id };
	struct bn_result r;
	uint32_t unused;
	int rc = run_op(g->c, BN_OP_GRAMMAR_FREE, &op, INT64_MAX, &r, &unused, NULL, 0);
	free(g);
	/* A daemon shutting down or gone has forgotten it anyway. */
	return rc == -BN_E_DISCONNECTED ? rc : 0;
}

int bn_submit_grammar(struct bn_client *c, const struct bn_request *req, const char *text,
		      size_t len, const struct bn_grammar_handle *g, struct bn_handle **out)
{
	if (!c || !req || (!text && len) || (g && g->c != c))
		return -BN_E_INVALID;
	if (g && !(c->layout.features & BN_FEAT_GRAMMAR))
		return -BN_E_UNSUPPORTED;
	if (g && (req->flags & BN_REQ_IGNORE_EOS))
		return -BN_E_INVALID; /* the grammar's end is the output's end */
	const struct bn_submission sub = { .req = req, .text = text, .len = len,
					   .op = BN_OP_GENERATE, .grammar_id = g ? g->id : 0 };
	return bn_submit_as(c, &sub, out);
}
