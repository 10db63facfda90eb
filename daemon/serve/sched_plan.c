/* SPDX-License-Identifier: MIT */
/*
 * sched_plan.c — what one step runs (sched.h): decode rows first (with their drafts when they
 * speculate), then prompt chunks and classify forks within the step's budget, the padded
 * batch built from them, and the prefix cache's identities for the blocks the step filled.
 */
#include "sched_internal.h"

#include "common/log.h"
#include "model/embed.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A session's decode rows in the step being planned (marked like planned(), so no session
 * needs resetting before a step). */
static void count_decode_row(const struct bn_sched *s, struct bn_tenant *t)
{
	if (t->decode_rows_in != s->plans) {
		t->decode_rows_in = s->plans;
		t->step_decode_rows = 0;
	}
	t->step_decode_rows++;
}

static uint32_t decode_rows(const struct bn_sched *s, const struct bn_tenant *t)
{
	return t->decode_rows_in == s->plans ? t->step_decode_rows : 0;
}

static int planned(const struct bn_sched *s, const struct bn_req *r)
{
	return r->planned_in == s->plans;
}

/* The next prompt to read from: among running requests still reading their prompt and not
 * in the batch yet, the one whose session decodes the fewest sequences in this step
 * (step_decode_rows), the earliest admitted on a tie; NULL when none. So a session with many
 * decoding sequences cannot keep another's prompt waiting behind its own, while prompts of
 * equally served sessions (one request each, say) are still read oldest first, each to its
 * end, rather than all a little at a time. */
static struct bn_req *next_prefill(struct bn_sched *s)
{
	struct bn_req *best = NULL;
	uint32_t best_rows = 0;
	for (uint32_t i = 0; i < s->n_running; i++) {
		struct bn_req *r = s->running[i];
		if (decoding(r) || planned(s, r))
			continue;
		uint32_t rows = decode_rows(s, r->tenant);
		if (!best || rows < best_rows || (rows == best_rows && r->admitted < best->admitted)) {
			best = r;
			best_rows = rows;
		}
	}
	return best;
}

static void set_score_row(struct bn_sched *s, uint32_t k, const uint32_t *targets,
			  uint32_t n_targets, uint32_t n_top)
{
	s->score_rows[k] = (struct bn_score_row){ .targets = targets, .n_targets = n_targets,
						  .n_top = n_top };
	s->score[k] = &s->score_rows[k];
	s->sample[k] = NULL;
	s->n_score_rows++;
}

/* A score request's chunk: each new token's next token is its target; the text's last token
 * has none. */
static void plan_score_row(struct bn_sched *s, uint32_t k, struct bn_req *r, uint32_t len)
{
	uint32_t end = r->n_prefilled + len;
	set_score_row(s, k, r->prompt + r->n_prefilled + 1, end == r->n_prompt ? len - 1 : len,
		      r->sampling.n_logprobs);
}

/* An embedding's chunk: the hidden states its pooling reads among the chunk's tokens (their
 * room is given in sched_build_batch). */
static void plan_embed_row(struct bn_sched *s, uint32_t k, struct bn_req *r, uint32_t len)
{
	struct bn_hidden_row *h = &s->hidden_rows[k];
	s->sample[k] = NULL;
	h->count = bn_embed_rows(s->cfg.pooling, r->n_prefilled, len, r->n_prompt, &h->first);
	h->out = NULL;
	if (h->count) {
		s->hidden[k] = h;
		s->n_hidden_rows++;
	}
}

static void plan_row(struct bn_sched *s, uint32_t k, struct bn_req *r, uint32_t len)
{
	r->planned_in = s->plans;
	s->rows[k] = r;
	s->row_fork[k] = NULL;
	s->lens[k] = len;
	s->seq[k] = r->seq;
	s->blocks[k] = r->kv.table;
	s->score[k] = NULL;
	s->verify[k] = NULL;
	s->hidden[k] = NULL;
	if (r->op == BN_OP_EMBED) {
		s->pos[k] = r->n_prefilled;
		plan_embed_row(s, k, r, len);
	} else if (r->op == BN_OP_SCORE) {
		s->pos[k] = r->n_prefilled;
		plan_score_row(s, k, r, len);
	} else if (decoding(r)) {
		s->pos[k] = r->n_prompt + r->n_out - 1;
		s->sample[k] = &r->sample_ctx;
	} else {
		s->pos[k] = r->n_prefilled;
		s->sample[k] = r->op == BN_OP_GENERATE && r->n_prefilled + len == r->n_prompt
				       ? &r->sample_ctx : NULL;
	}
}

/* Budget units: with attention weighed (attn_positions A > 0) a token at position p costs
 * A + p units and a step may spend token_budget x A; otherwise every token costs 1. */
static uint64_t token_cost(uint32_t attn_positions, uint64_t pos)
{
	return attn_positions ? attn_positions + pos : 1;
}

/* The most tokens from position pos (at most max_tokens) whose costs fit in *units, which
 * they are taken from. */
static uint32_t take_chunk(uint32_t attn_positions, uint32_t pos, uint32_t max_tokens,
			   uint64_t *units)
{
	uint32_t n = 0;
	while (n < max_tokens) {
		uint64_t cost = token_cost(attn_positions, (uint64_t)pos + n);
		if (cost > *units)
			break;
		*units -= cost;
		n++;
	}
	return n;
}

uint32_t bn_sched_chunk_tokens(uint32_t attn_positions, uint32_t pos, uint32_t max_tokens,
			       uint64_t units)
{
	return take_chunk(attn_positions, pos, max_tokens, &units);
}

/* r's n-gram table, at its first decode step: sized for its prompt and max_tokens. Without
 * the memory it decodes without drafts. */
static int start_drafting(struct bn_sched *s, struct bn_req *r)
{
	if (bn_drafter_init(&r->drafter, r->n_prompt + r->max_tokens, s->cfg.draft_tokens) == 0)
		return 0;
	bn_log_warn("msg=\"no memory for a request's draft table; it decodes without drafts\" tokens=%u",
		    r->n_prompt + r->max_tokens);
	r->speculate = 0;
	return -1;
}

uint64_t sched_plan_drafts(struct bn_sched *s, uint32_t n_decode, uint64_t spare)
{
	uint64_t spent = 0;
	for (uint32_t k = 0; k < n_decode && spare; k++) {
		struct bn_req *r = s->rows[k];
		/* Room: every draft accepted still leaves the token after them within max_tokens. */
		uint32_t room = r->max_tokens - r->n_out - 1, first = s->pos[k] + 1;
		if (!r->speculate || room == 0 || (!r->drafter.cap && start_drafting(s, r) < 0))
			continue;
		uint32_t fit = bn_sched_chunk_tokens(s->attn_positions, first, room, spare);
		struct bn_draft_tokens t = { r->prompt, r->n_prompt, r->output, r->n_out };
		/* The drafts go where their tokens will be published: the sampler reads them there
		 * as the history of the positions after them (batch.h). */
		uint32_t n = fit ? bn_drafter_propose(&r->drafter, &t, fit, r->output + r->n_out) : 0;
		if (!n)
			continue;
		uint64_t before = spare;
		take_chunk(s->attn_positions, first, n, &spare);
		spent += before - spare;
		s->lens[k] = 1 + n;
		s->verify[k] = s->verify_out + (size_t)k * (s->cfg.draft_tokens + 1);
	}
	return spent;
}

/* A fork's chunk: its tokens at positions fork_start + done, each scored against the label
 * token that follows it. */
static void plan_fork_row(struct bn_sched *s, uint32_t k, struct fork *f, uint32_t len)
{
	struct bn_req *r = f->owner;
	s->rows[k] = r;
	s->row_fork[k] = f;
	s->lens[k] = len;
	s->pos[k] = fork_start(r) + f->done;
	s->seq[k] = f->seq;
	s->blocks[k] = f->kv.table;
	s->verify[k] = NULL;
	s->hidden[k] = NULL;
	set_score_row(s, k, r->labels + f->at + f->done, len, 0);
}

/* The next label of r starts in a fork: the prefix's full blocks shared, its partial block
 * copied, the label's own blocks lent from r's reservation. 0 or the backend's error. */
static int start_fork(struct bn_sched *s, struct bn_req *r)
{
	struct fork *f = &s->forks[s->free_forks[--s->n_free_forks]];
	uint32_t len = r->label_len[r->next_label], start = fork_start(r);
	uint32_t full = start / s->kv.block_tokens, part = start % s->kv.block_tokens;
	f->owner = r;
	r->n_forks++;
	bn_kvpool_share(&s->kv, &f->kv, &r->kv, full);
	bn_kvpool_lend(&r->kv, &f->kv, sched_fork_own_blocks(s, r, len));
	uint32_t dst = 0, src = 0;
	if (part) {
		(void)bn_kvpool_grow(&s->kv, &f->kv, start); /* within what was just lent */
		dst = f->kv.table[full];
		src = r->kv.table[full];
	}
	int rc = s->ops->seq_fork(s->backend, f->seq, start, dst, src, part);
	if (rc < 0) {
		sched_end_fork(s, f);
		return rc;
	}
	f->label = r->next_label++;
	f->at = r->next_label_at;
	f->done = 0;
	r->next_label_at += len;
	return 0;
}

/* Chunks of r's forks within the budget, starting labels while it may run more; the first
 * gets a token even past the budget when `force`. A fork the backend cannot start ends r
 * (BN_E_BACKEND) before any row of it is planned. */
static void plan_forks(struct bn_sched *s, struct bn_req *r, uint32_t *n, uint64_t *left,
		       int force)
{
	r->planned_in = s->plans;
	while (r->next_label < r->n_labels && r->n_forks < r->max_forks && s->n_free_forks) {
		if (start_fork(s, r) < 0) {
			sched_finish_running(s, sched_running_index(s, r), BN_STATUS_ERROR, BN_E_BACKEND);
			return;
		}
	}
	for (uint32_t i = 0; i < s->cfg.fork_seqs; i++) {
		struct fork *f = &s->forks[i];
		if (f->owner != r)
			continue;
		uint32_t rest = r->label_len[f->label] - f->done;
		uint32_t chunk = take_chunk(s->attn_positions, fork_start(r) + f->done, rest, left);
		if (chunk == 0 && force) {
			chunk = 1;
			*left = 0;
		}
		if (chunk == 0)
			break;
		force = 0;
		plan_fork_row(s, (*n)++, f, chunk);
	}
}

/* Decode rows first, then prompt chunks (next_prefill: the session decoding the fewest
 * sequences first, then oldest) within the step's budget (counted in work, see token_cost).
 * When decoding leaves less than a quarter of the budget, prompts still get that quarter, and
 * the first prompt at least one token. The oldest prompt reads at least one token every step
 * even when others took the budget (a session that never decodes, sending prompt after
 * prompt, would otherwise always go first), so every admitted prompt progresses. Returns the
 * number of rows. */
uint32_t sched_plan(struct bn_sched *s)
{
	s->n_score_rows = s->n_hidden_rows = 0;
	uint32_t n = 0, a = s->attn_positions;
	uint64_t budget = (uint64_t)s->cfg.token_budget * (a ? a : 1), used = 0;
	s->plans++; /* planned() is true from here for the requests plan_row marks */
	struct bn_req *r, *oldest = NULL; /* the earliest admitted prompt still being read */
	for (uint32_t i = 0; i < s->n_running; i++) {
		r = s->running[i];
		if (decoding(r)) {
			plan_row(s, n++, r, 1);
			used += token_cost(a, r->n_prompt + r->n_out - 1);
			count_decode_row(s, r->tenant);
		} else if (!oldest || r->admitted < oldest->admitted) {
			oldest = r;
		}
	}
	if (s->verify_out && n && budget > used + budget / 4)
		used += sched_plan_drafts(s, n, budget - used - budget / 4);
	uint64_t left = budget > used ? budget - used : 0;
	if (left < budget / 4)
		left = budget / 4;
	uint32_t n_decode = n;
	/* Past the budget only the first prompt may still come in (see above): no search then. */
	while ((left > 0 || n == n_decode) && (r = next_prefill(s)) != NULL) {
		if (reading_labels(r)) {
			plan_forks(s, r, &n, &left, n == n_decode);
			continue;
		}
		uint32_t rest = prefill_end(r) - r->n_prefilled;
		uint32_t chunk = take_chunk(a, r->n_prefilled, rest, &left);
		if (chunk == 0 && n == n_decode) {
			chunk = 1; /* it costs more than is left: nothing is left after it */
			left = 0;
		}
		if (chunk == 0)
			break;
		plan_row(s, n++, r, chunk);
	}
	if (oldest && !planned(s, oldest)) {
		if (reading_labels(oldest))
			plan_forks(s, oldest, &n, &left, 1);
		else
			plan_row(s, n++, oldest, 1);
	}
	return n;
}

static int reserve_tokens(struct bn_sched *s, size_t cells)
{
	if (cells <= s->tokens_cap)
		return 0;
	uint32_t *t = realloc(s->tokens, cells * sizeof(uint32_t));
	if (!t)
		return -ENOMEM;
	s->tokens = t;
	s->tokens_cap = cells;
	return 0;
}

/* Room for every scored position of the step's score rows, and each row's share of it.       */
static int score_outputs(struct bn_sched *s, uint32_t n_rows)
{
	size_t need = 0;
	for (uint32_t k = 0; k < n_rows; k++)
		need += s->score[k] ? s->score[k]->n_targets : 0;
	uint32_t per = s->cfg.logprob_capacity ? s->cfg.logprob_capacity : 1;
	if (need > s->score_cap) {
		struct bn_sample_out *o = realloc(s->score_out, need * sizeof(*o));
		if (o)
			s->score_out = o;
		struct bn_token_logprob *t = realloc(s->score_top, need * per * sizeof(*t));
		if (t)
			s->score_top = t;
		if (!o || !t)
			return -ENOMEM;
		s->score_cap = need;
	}
	size_t at = 0;
	for (uint32_t k = 0; k < n_rows; k++) {
		if (!s->score[k])
			continue;
		s->score_rows[k].out = s->score_out + at;
		for (uint32_t j = 0; j < s->score_rows[k].n_targets; j++)
			s->score_out[at + j].top = s->score_top + (at + j) * per;
		at += s->score_rows[k].n_targets;
	}
	return 0;
}

/* Room for every hidden state the step's embedding rows ask, and each row's share of it. */
static int hidden_outputs(struct bn_sched *s, uint32_t n_rows)
{
	size_t need = 0, dim = s->cfg.embed_dim;
	for (uint32_t k = 0; k < n_rows; k++)
		need += s->hidden[k] ? s->hidden[k]->count : 0;
	if (need > s->hidden_cap) {
		float *o = realloc(s->hidden_out, need * dim * sizeof(*o));
		if (!o)
			return -ENOMEM;
		s->hidden_out = o;
		s->hidden_cap = need;
	}
	size_t at = 0;
	for (uint32_t k = 0; k < n_rows; k++) {
		if (!s->hidden[k])
			continue;
		s->hidden_rows[k].out = s->hidden_out + at * dim;
		at += s->hidden_rows[k].count;
	}
	return 0;
}

/* Token i of a fork's row sequence: the prefix's last token, then the label's. */
static void fill_fork_row(const struct fork *f, uint32_t len, uint32_t *row)
{
	const struct bn_req *r = f->owner;
	for (uint32_t i = 0; i < len; i++) {
		uint32_t at = f->done + i;
		row[i] = at == 0 ? r->prompt[fork_start(r)] : r->labels[f->at + at - 1];
	}
}

int sched_build_batch(struct bn_sched *s, uint32_t n_rows, struct bn_batch *b)
{
	uint32_t width = 1;
	for (uint32_t k = 0; k < n_rows; k++) {
		struct bn_kv_seq *kv = s->row_fork[k] ? &s->row_fork[k]->kv : &s->rows[k]->kv;
		int rc = bn_kvpool_grow(&s->kv, kv, s->pos[k] + s->lens[k]);
		if (rc < 0)
			return rc; /* the reservation covers every position: a bug, reported */
		if (s->lens[k] > width)
			width = s->lens[k];
	}
	if (reserve_tokens(s, (size_t)n_rows * width) < 0 || score_outputs(s, n_rows) < 0 ||
	    hidden_outputs(s, n_rows) < 0)
		return -ENOMEM;
	for (uint32_t k = 0; k < n_rows; k++) {
		struct bn_req *r = s->rows[k];
		uint32_t *row = s->tokens + (size_t)k * width;
		if (s->row_fork[k])
			fill_fork_row(s->row_fork[k], s->lens[k], row);
		else if (decoding(r)) /* its last token, then its drafts when it has them */
			memcpy(row, r->output + r->n_out - 1, (size_t)s->lens[k] * sizeof(uint32_t));
		else
			memcpy(row, r->prompt + r->n_prefilled, (size_t)s->lens[k] * sizeof(uint32_t));
	}
	*b = (struct bn_batch){ .n_rows = n_rows, .width = width, .tokens = s->tokens,
				.lens = s->lens, .pos = s->pos, .seq = s->seq,
				.blocks = s->blocks, .sample = s->sample,
				.score = s->n_score_rows ? s->score : NULL,
				.verify = s->verify_out ? s->verify : NULL,
				.hidden = s->n_hidden_rows ? s->hidden : NULL };
	return 0;
}

/* The token at position p of r's sequence: its prompt, then its output. */
static uint32_t token_at(const struct bn_req *r, uint32_t p)
{
	return p < r->n_prompt ? r->prompt[p] : r->output[p - r->n_prompt];
}

/* Every block of r the step filled gets its identity, so later prompts can find it. A block
 * whose parent has none (an equal block was cached first by another sequence) ends the
 * chain: nothing after it could be found. */
static void identify_blocks(struct bn_sched *s, struct bn_req *r, uint32_t end)
{
	/* --kv-block-tokens is at most 4096 (config.c). */
	uint32_t bt = s->kv.block_tokens, full = end / bt, tokens[4096];
	for (; r->n_identified < full; r->n_identified++) {
		uint32_t i = r->n_identified, block = r->kv.table[i];
		for (uint32_t k = 0; k < bt; k++)
			tokens[k] = token_at(r, i * bt + k);
		uint32_t parent = i ? r->kv.table[i - 1] : BN_NO_BLOCK;
		bn_prefix_cache_insert(s->kv.cache, block, parent, sched_share_scope(s, r), tokens);
	}
}

void sched_identify_step(struct bn_sched *s, uint32_t n_rows)
{
	if (!s->kv.cache)
		return;
	for (uint32_t k = 0; k < n_rows; k++) {
		if (s->row_fork[k])
			continue;
		/* A verify row's positions count up to its last confirmed draft: the ones after it
		 * are written again next step. */
		uint32_t end = s->verify[k] ? s->pos[k] + 1 + sched_verified_drafts(s, k)
					    : s->pos[k] + s->lens[k];
		identify_blocks(s, s->rows[k], end);
	}
}
