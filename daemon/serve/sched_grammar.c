/* SPDX-License-Identifier: MIT */
/*
 * sched_grammar.c — structured output in the scheduler (sched.h, shm/PROTOCOL.md §6.13): a
 * constrained request's matcher from its start to its end, the allowed-token bitsets its rows
 * sample from, drafts cut where the grammar refuses them, and the check that closes an output
 * before max_tokens.
 *
 * Between steps a matcher stands after the request's published tokens. Drafts are accepted
 * into it only while their positions' masks are computed (sched_grammar_plan), then rolled
 * back; during the step the sampler's check may take it past drafts again (below), which
 * delivery undoes (sched_grammar_settle) before it accepts each token it publishes; the next
 * position's mask is computed as soon as a row's tokens are published (sched_grammar_next),
 * so a request the grammar cannot continue ends there, before any row of it is planned.
 *
 * Closing before max_tokens (daemon/grammar/grammar.h, "budget running out"): a token drawn
 * from the mask stands when the output after it can still end within the tokens left (the
 * tokens that bring it to an accepting end, then an end-of-generation id); the
 * sampler asks the request's check (bn_sample_check) after each draw, which accepts the token,
 * looks, and rolls it back. Only a draw that does not fit costs more: the tokens that do fit
 * are computed then (bn_grammar_matcher_fill_mask_within, milliseconds in a string of a 128k
 * vocabulary) and the sampler draws again among them with the same u. So every output whose
 * draws all fit is the one the mask alone gives, the others end in time wherever the grammar
 * lets them, and an output that cannot (no token fits) keeps its draw and ends by max_tokens.
 * The check runs where the backend samples: the cpu backend samples on the loop's thread.
 */
#include "sched_internal.h"

#include "common/log.h"
#include "grammar/grammar.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

static uint64_t *mask_at(const struct bn_sched *s, const struct bn_req *r, uint32_t j)
{
	return r->masks + (size_t)j * s->mask_words;
}

/* Positions one row of a request may sample: its decode row and drafts. */
static uint32_t sampled_positions(const struct bn_sched *s)
{
	return s->verify_out ? s->cfg.draft_tokens + 1 : 1;
}

static int allowed(const uint64_t *mask, uint32_t token)
{
	return (int)(mask[token / 64] >> (token % 64) & 1);
}

/* ------------------------------------------------------------------------------------------ */
/* The sampler's check: closing before max_tokens                                              */
/* ------------------------------------------------------------------------------------------ */

static struct bn_req *req_of_check(const struct bn_sample_check *c)
{
	return (struct bn_req *)(void *)((char *)c - offsetof(struct bn_req, check));
}

/* The matcher past the row's first j drafts (they follow the published tokens in output). */
static int past_drafts(struct bn_req *r, uint32_t j)
{
	if (r->check_drafts > j) {
		if (bn_grammar_matcher_rollback(r->matcher, r->check_drafts - j) < 0)
			return -1;
		r->check_drafts = j;
	}
	for (; r->check_drafts < j; r->check_drafts++)
		if (bn_grammar_matcher_accept(r->matcher, r->output[r->n_out + r->check_drafts]) < 0)
			return -1;
	return 0;
}

/* After token at output index i, the output can still end within max_tokens: the token ended
 * it, or the tokens that bring it to an end and an end-of-generation id fit in what is left.
 * The matcher stands where it stood. */
static int fits(struct bn_req *r, uint32_t i, uint32_t token)
{
	if (bn_grammar_matcher_accept(r->matcher, token) < 0)
		return 1; /* not the grammar's: delivery fails the request */
	uint32_t left = r->max_tokens - i - 1;
	int ok = bn_grammar_matcher_is_finished(r->matcher) ||
		 (left > 0 && bn_grammar_matcher_tokens_to_accept(r->matcher) <= left - 1);
	(void)bn_grammar_matcher_rollback(r->matcher, 1);
	return ok;
}

static const uint64_t *redraw(const struct bn_sample_check *c, uint32_t n_output,
			      uint32_t token)
{
	struct bn_req *r = req_of_check(c);
	if (past_drafts(r, n_output - r->n_out) < 0 || fits(r, n_output, token))
		return NULL;
	int n = bn_grammar_matcher_fill_mask_within(r->matcher, r->close_mask,
						    r->max_tokens - n_output - 1);
	if (n < 0)
		bn_log_warn("msg=\"no memory to close a constrained output in time\" rc=%d", n);
	return n > 0 ? r->close_mask : NULL; /* none fits: the draw stands, max_tokens cuts it */
}

/* ------------------------------------------------------------------------------------------ */
/* A request's life                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* The mask of the position after r's published tokens. 0, or the bn_error that ends r. */
static uint32_t fill_next(const struct bn_sched *s, struct bn_req *r)
{
	int n = bn_grammar_matcher_fill_mask(r->matcher, mask_at(s, r, 0));
	return n > 0 ? 0 : n == 0 ? BN_E_GRAMMAR_STUCK : BN_E_BACKEND;
}

uint32_t sched_grammar_start(struct bn_sched *s, struct bn_req *r)
{
	if (!r->grammar)
		return 0;
	/* The positions' masks, then the close mask. */
	size_t bytes = (size_t)(sampled_positions(s) + 1) * s->mask_words * sizeof(uint64_t);
	r->masks = malloc(bytes);
	if (!r->masks || bn_grammar_matcher_new(r->grammar, 0, &r->matcher) < 0)
		return BN_E_BACKEND;
	r->close_mask = mask_at(s, r, sampled_positions(s));
	r->check = (struct bn_sample_check){ .redraw = redraw };
	r->check_drafts = 0;
	r->sample_ctx.mask = r->masks;
	r->sample_ctx.check = &r->check;
	return fill_next(s, r);
}

void sched_grammar_stop(struct bn_req *r)
{
	bn_grammar_matcher_free(r->matcher);
	free(r->masks);
	r->matcher = NULL;
	r->masks = r->close_mask = NULL;
	r->sample_ctx.mask = NULL;
	r->sample_ctx.check = NULL;
}

/* Row k's drafts, each accepted into the matcher to give the position after it its mask, up
 * to the first the grammar does not allow there, or that ends generation, or that leaves no
 * token to follow: the row keeps the drafts before it (none: a plain decode row). The
 * matcher is rolled back after. */
static void plan_drafts(struct bn_sched *s, uint32_t k, struct bn_req *r)
{
	uint32_t n = s->lens[k] - 1, kept = 0;
	const uint32_t *drafts = r->output + r->n_out;
	for (; kept < n; kept++) {
		uint32_t d = drafts[kept];
		if (!allowed(mask_at(s, r, kept), d) || sched_is_eog(s, d) ||
		    bn_grammar_matcher_accept(r->matcher, d) < 0)
			break;
		if (bn_grammar_matcher_fill_mask(r->matcher, mask_at(s, r, kept + 1)) <= 0) {
			(void)bn_grammar_matcher_rollback(r->matcher, 1);
			break;
		}
	}
	if (kept)
		(void)bn_grammar_matcher_rollback(r->matcher, kept); /* within its window */
	s->lens[k] = 1 + kept;
	if (!kept)
		s->verify[k] = NULL;
}

void sched_grammar_plan(struct bn_sched *s, uint32_t n_rows)
{
	for (uint32_t k = 0; k < n_rows; k++) {
		struct bn_req *r = s->rows[k];
		if (!s->row_fork[k] && s->verify[k] && r->matcher)
			plan_drafts(s, k, r);
	}
}

void sched_grammar_settle(struct bn_req *r)
{
	if (r->check_drafts)
		(void)bn_grammar_matcher_rollback(r->matcher, r->check_drafts);
	r->check_drafts = 0;
}

int sched_grammar_accept(struct bn_req *r, uint32_t token)
{
	int rc = bn_grammar_matcher_accept(r->matcher, token);
	if (rc < 0)
		bn_log_error("msg=\"a sampled token is not one the grammar allows\" token=%u rc=%d",
			     token, rc);
	return rc;
}

uint32_t sched_grammar_next(struct bn_sched *s, struct bn_req *r)
{
	return fill_next(s, r);
}
