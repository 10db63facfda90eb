/* SPDX-License-Identifier: MIT */
/*
 * sample_row.c — bn_sample: a row of logits to its token (sample.h), by the sampler of
 * sample.c. A row whose tokens a grammar restricts ("Structured output") takes the penalties
 * on the whole row, then the allowed tokens' logits are gathered in id order and sampled by
 * the same code as an unrestricted row, as if they were the whole vocabulary, and the
 * answer's ids mapped back. Gathering keeps id order, so the ranking's ties (lower id first)
 * and the greedy token's (lowest id) are those of the whole row restricted.
 *
 * Costs: greedy without log-probabilities scans the allowed logits in place (a word of 64
 * allowed ids takes the same blocks of 16 as an unrestricted argmax); every other path copies
 * the allowed logits once (one pass over the mask's words) and then costs what an
 * unrestricted row of that many tokens costs. A row without a mask pays nothing here.
 */
#include "sample_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

static int masked_reserve(struct bn_sampler *s, uint32_t n)
{
	if (n <= s->mask_cap)
		return 0;
	float *l = malloc((size_t)n * sizeof(*l));
	uint32_t *ids = malloc((size_t)n * sizeof(*ids));
	if (!l || !ids) {
		free(l);
		free(ids);
		return -ENOMEM;
	}
	free(s->masked);
	free(s->masked_ids);
	s->masked = l;
	s->masked_ids = ids;
	s->mask_cap = n;
	return 0;
}

/* The allowed logits into l_out[0..n) and their ids, ascending, into ids[0..n); returns n. */
static uint32_t gather(const uint64_t *mask, const float *l, uint32_t n_vocab, float *l_out,
		       uint32_t *ids)
{
	uint32_t n = 0;
	for (uint32_t w = 0; w < bn_sample_mask_words(n_vocab); w++) {
		for (uint64_t bits = mask[w]; bits; bits &= bits - 1) {
			uint32_t id = w * 64 + (uint32_t)__builtin_ctzll(bits);
			if (id >= n_vocab)
				return n; /* bits past the vocabulary are not tokens */
			l_out[n] = l[id];
			ids[n++] = id;
		}
	}
	return n;
}

/* The first allowed id with the largest logit (NaN never wins; the first allowed id when every
 * allowed logit is NaN): sample_argmax of the gathered row, without gathering. A full word is
 * scanned as sample_argmax scans, the others bit by bit. UINT32_MAX when nothing is allowed. */
static uint32_t masked_argmax(const uint64_t *mask, const float *l, uint32_t n_vocab)
{
	uint32_t best_id = UINT32_MAX;
	float best = -INFINITY;
	for (uint32_t w = 0; w < bn_sample_mask_words(n_vocab); w++) {
		uint64_t bits = mask[w];
		if (!bits)
			continue;
		uint32_t base = w * 64;
		if (bits == ~0ull && base + 64 <= n_vocab) {
			uint32_t i = base + sample_argmax(l + base, 64);
			if (best_id == UINT32_MAX)
				best_id = base; /* as gathered: the first allowed id by default */
			if (l[i] > best) {
				best = l[i];
				best_id = i;
			}
			continue;
		}
		for (; bits; bits &= bits - 1) {
			uint32_t id = base + (uint32_t)__builtin_ctzll(bits);
			if (id >= n_vocab)
				break;
			if (best_id == UINT32_MAX)
				best_id = id;
			if (l[id] > best) {
				best = l[id];
				best_id = id;
			}
		}
	}
	return best_id;
}

/* One draw from the tokens mask allows (the row penalized already). */
static int draw(struct bn_sampler *s, const struct bn_sample_ctx *ctx, const uint64_t *mask,
		const float *logits, uint32_t n_vocab, struct bn_sample_out *out)
{
	const struct bn_sampling *p = ctx->params;
	if ((p->temperature == 0 || p->top_k == 1) && !p->want_logprobs) {
		*out = (struct bn_sample_out){ .top = out->top };
		out->token = masked_argmax(mask, logits, n_vocab);
		return out->token == UINT32_MAX ? -EINVAL : 0;
	}
	uint32_t n = gather(mask, logits, n_vocab, s->masked, s->masked_ids);
	if (!n)
		return -EINVAL;
	int rc = sample_dense(s, p, ctx->n_output, s->masked, n, out);
	if (rc < 0)
		return rc;
	out->token = s->masked_ids[out->token];
	for (uint32_t i = 0; i < out->n_top; i++)
		out->top[i].token = s->masked_ids[out->top[i].token];
	return 0;
}

static int sample_masked(struct bn_sampler *s, const struct bn_sample_ctx *ctx, float *logits,
			 uint32_t n_vocab, struct bn_sample_out *out)
{
	if (sampler_reserve(s, n_vocab) || masked_reserve(s, n_vocab))
		return -ENOMEM;
	if (sample_penalties_on(ctx))
		sample_apply_penalties(s, ctx, logits, n_vocab);
	int rc = draw(s, ctx, ctx->mask, logits, n_vocab, out);
	const uint64_t *instead = rc == 0 && ctx->check
					  ? ctx->check->redraw(ctx->check, ctx->n_output, out->token)
					  : NULL;
	return instead ? draw(s, ctx, instead, logits, n_vocab, out) : rc;
}

int bn_sample(struct bn_sampler *s, const struct bn_sample_ctx *ctx, float *logits,
	      uint32_t n_vocab, struct bn_sample_out *out)
{
	if (!n_vocab)
		return -EINVAL;
	if (ctx->mask)
		return sample_masked(s, ctx, logits, n_vocab, out);
	if (sample_penalties_on(ctx)) {
		if (sampler_reserve(s, n_vocab))
			return -ENOMEM;
		sample_apply_penalties(s, ctx, logits, n_vocab);
	}
	return sample_dense(s, ctx->params, ctx->n_output, logits, n_vocab, out);
}
