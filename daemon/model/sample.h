/* SPDX-License-Identifier: MIT */
/*
 * sample.h — choosing the next token from a row of logits, per request.
 *
 * The semantics are fixed here so every backend (the CPU one calls bn_sample; a GPU one
 * reimplements it) gives the same token for the same logits, parameters, history and seed:
 *
 *  1. Penalties, on the raw logits, each token once:
 *     - repetition (r != 0): a token that occurs in the prompt or the output so far has its
 *       logit divided by r when positive, multiplied by r when negative;
 *     - frequency f and presence p: a token with c > 0 occurrences in the output so far (not
 *       the prompt) has f * c + p subtracted.
 *  2. Log-probabilities, when asked, are the log-softmax of these penalized logits (before
 *     temperature and truncation): the chosen token's, and the n most likely tokens' (ties by
 *     lower id first).
 *  3. temperature == 0: the token is the argmax (lowest id on ties); steps 4-6 do not apply.
 *  4. Candidates are ranked by logit descending, lower id first on ties. top_k (k != 0) keeps
 *     the first k. Probabilities are the softmax of logit / temperature over the kept ones.
 *     top_p (p != 0) keeps the shortest prefix of the ranking whose probability sum reaches p
 *     (at least one token). min_p (m != 0) then drops tokens whose probability is below m times
 *     the first one's.
 *  5. The draw: u = bn_sample_uniform(seed, n_output) in [0, 1); walk the kept tokens in
 *     ranking order, summing probabilities (renormalized over what was kept); the token is the
 *     first where the running sum exceeds u x total (the last kept one if rounding leaves none).
 *
 * u depends only on the seed and the position in the output, so a request's tokens do not
 * depend on what else was in its batch, nor on the steps it waited.
 *
 * Structured output (a row with a mask, sample_row.c): step 1 on the whole row, then steps 2
 * to 5 on the tokens the mask allows as if they were the whole vocabulary: the log-softmax is
 * over them (the log-probabilities are those of the distribution the token is drawn from),
 * the ranking, top_k, top_p, min_p and the largest logit are theirs. With a check too (closing
 * an output before max_tokens), a drawn token the check refuses is drawn again, with the same
 * u, from the tokens the check gives instead, as if they were the mask; the second draw's
 * log-probabilities are reported.
 */
#ifndef BITNETD_SAMPLE_H
#define BITNETD_SAMPLE_H

#include <stdint.h>

/* The validated parameters of one request (zero values mean "off", as in the ABI). */
struct bn_sampling {
	float temperature;
	uint32_t top_k;
	float top_p;
	float min_p;
	float repetition_penalty;
	float presence_penalty;
	float frequency_penalty;
	uint64_t seed;
	uint32_t n_logprobs;      /* alternatives wanted */
	uint8_t want_logprobs;    /* BN_REQ_LOGPROBS */
};

/* A check of each drawn token (structured output: does it leave the output able to end within
 * max_tokens?). redraw gets the output index of the position (the context's n_output there)
 * and the token drawn: NULL when the token stands, else the tokens to draw from instead (a
 * subset of that position's mask with at least one set, valid until the next call). The
 * caller embeds it in its own state. */
struct bn_sample_check {
	const uint64_t *(*redraw)(const struct bn_sample_check *c, uint32_t n_output,
				  uint32_t token);
};

/* Everything the sampler needs about one row. */
struct bn_sample_ctx {
	const struct bn_sampling *params;
	const uint32_t *prompt;   /* [n_prompt]: for the repetition penalty */
	uint32_t n_prompt;
	const uint32_t *output;   /* [n_output]: the tokens generated so far */
	uint32_t n_output;
	/* NULL, or the tokens the row may take (structured output): a bitset of
	 * bn_sample_mask_words(n_vocab) words, bit id % 64 of word id / 64, at least one set. A
	 * verify row's position j reads the j-th bitset from here (bn_sample_ctx_next). */
	const uint64_t *mask;
	/* NULL, or (with mask) the check every drawn token passes or is drawn again. */
	const struct bn_sample_check *check;
};

static inline uint32_t bn_sample_mask_words(uint32_t n_vocab)
{
	return (n_vocab + 63) / 64;
}

/* The context of a verify row's next position: one more token of history, its own mask. */
static inline void bn_sample_ctx_next(struct bn_sample_ctx *ctx, uint32_t n_vocab)
{
	ctx->n_output++;
	if (ctx->mask)
		ctx->mask += bn_sample_mask_words(n_vocab);
}

struct bn_token_logprob {
	uint32_t token;
	float logprob;
};

/* The sampler's answer for one row. top[] holds min(n_logprobs, n_vocab) records when
 * logprobs were asked for (n_top says how many). */
struct bn_sample_out {
	uint32_t token;
	float logprob;            /* of token; 0 when not asked */
	uint32_t n_top;
	struct bn_token_logprob *top; /* caller-provided, room for params->n_logprobs records */
};

/* Step 1 for one token: the logit is divided/multiplied by `repeat` as the repetition
 * penalty does (0: no repetition penalty), then `subtract` is taken off. */
struct bn_penalty {
	uint32_t token;
	float repeat;
	float subtract;
};

/* Scratch reused across calls by one thread; grows to the vocabulary's size. */
struct bn_sampler {
	float *prob;
	uint32_t *order;
	uint32_t *counts;         /* per-token occurrence counts, kept zero between calls */
	uint8_t *in_prompt;       /* per-token flags, kept zero between calls */
	uint64_t *keys;           /* [2 * cap]: radix-sort buffers for long ranking prefixes */
	struct bn_penalty *pen;   /* [cap] */
	uint32_t cap;
	float *masked;            /* [mask_cap]: a masked row's allowed logits, gathered */
	uint32_t *masked_ids;     /* [mask_cap]: their ids, ascending */
	uint32_t mask_cap;
};

/* The log-probability of `target` under the logits (the log-softmax, as bn_sample reports a
 * chosen token's with no penalties: the same bits), and the n_top most likely tokens in
 * out->top (room for n_top). out->token = target. 0, -EINVAL or -ENOMEM. */
int bn_score_token(struct bn_sampler *s, float *logits, uint32_t n_vocab, uint32_t target,
		   uint32_t n_top, struct bn_sample_out *out);

void bn_sampler_init(struct bn_sampler *s);
void bn_sampler_free(struct bn_sampler *s);

/* Samples one token from logits[n_vocab] (modified in place: the penalties are applied to it,
 * and, on any path but plain greedy, NaN becomes -FLT_MAX and +-inf +-FLT_MAX; temperature
 * is not applied to it). Returns 0, -EINVAL when n_vocab is 0, or -ENOMEM when scratch
 * cannot grow. */
int bn_sample(struct bn_sampler *s, const struct bn_sample_ctx *ctx, float *logits,
	      uint32_t n_vocab, struct bn_sample_out *out);

/* 1 when bn_sample's answer for ctx is the argmax of the raw logits, lowest id on ties, and
 * nothing else (greedy, no penalty that applies, no log-probabilities, no mask): a backend may
 * then find that token without computing every logit (head_screen.h). */
int bn_sample_argmax_only(const struct bn_sample_ctx *ctx);
/* 1 when bn_sample's first draw for ctx is the argmax of the raw logits over the tokens the
 * mask allows (all of them without one), lowest id on ties: greedy, no penalty that applies,
 * no log-probabilities. With a check, a second draw (from the check's subset) needs more
 * logits than that argmax: the backend that screens gives the row its full logits first. */
int bn_sample_argmax_allowed(const struct bn_sample_ctx *ctx);

/* Step 1 as a list: each distinct token of ctx's prompt and output that a penalty touches,
 * once, in out[] (room for min(n_prompt + n_output, n_vocab) entries). Returns the count; 0
 * also when no penalty applies or scratch cannot grow (then bn_sample would fail too). A GPU
 * backend applies the list on the device. */
uint32_t bn_sample_penalties(struct bn_sampler *s, const struct bn_sample_ctx *ctx,
			     uint32_t n_vocab, struct bn_penalty *out);

/* SplitMix64's output for its (step + 1)-th state from `seed`: the state
 * seed + (step + 1) * 0x9E3779B97F4A7C15 through the output mix (shm/PROTOCOL.md §6.9). */
uint64_t bn_sample_bits(uint64_t seed, uint32_t step);
/* The uniform draw of step `step` of a request with `seed`: the top 24 bits of
 * bn_sample_bits(seed, step) times 2^-24. */
float bn_sample_uniform(uint64_t seed, uint32_t step);

/* Checks parameters as they came from the wire; returns 0 or -BN_E_INVALID. */
int bn_sampling_check(const struct bn_sampling *p, uint32_t logprob_capacity);

#endif /* BITNETD_SAMPLE_H */
