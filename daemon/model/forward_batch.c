/* SPDX-License-Identifier: MIT */
/*
 * The forward pass's helpers that read a batch or a row and nothing of a forward pass's state
 * (forward.h declares them): a batch's checks against a backend's limits, which rows take
 * logits, RoPE's angles, the argmax. Backends other than the cpu's use them too.
 */
#include "forward.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>

int bn_batch_check(const struct bn_batch_limits *lim, const struct bn_batch *b, uint32_t *n_tok)
{
	uint64_t n = 0;
	for (uint32_t r = 0; r < b->n_rows; r++) {
		if (b->seq[r] >= lim->max_seqs || b->lens[r] == 0 || b->lens[r] > b->width ||
		    b->pos[r] != lim->seq_len[b->seq[r]] || (uint64_t)b->pos[r] + b->lens[r] > lim->n_ctx)
			return -EINVAL;
		for (uint32_t q = 0; q < r; q++)
			if (b->seq[q] == b->seq[r])
				return -EINVAL;
		for (uint32_t i = 0; i < b->lens[r]; i++)
			if (b->tokens[(size_t)r * b->width + i] >= lim->n_vocab)
				return -EINVAL;
		const struct bn_hidden_row *h = b->hidden ? b->hidden[r] : NULL;
		if (h && ((uint64_t)h->first + h->count > b->lens[r] || (h->count && !h->out)))
			return -EINVAL;
		n += b->lens[r];
	}
	if (n == 0 || n > UINT32_MAX / 2)
		return -EINVAL;
	*n_tok = (uint32_t)n;
	return 0;
}

/* Row r wants logits: every row, unless the batch says which rows need a token. */
static int wants_logits(const struct bn_batch *b, uint32_t r)
{
	return !b->sample || b->sample[r];
}

uint32_t bn_batch_logit_rows(const struct bn_batch *b, uint32_t r, uint32_t *first)
{
	if (b->score && b->score[r]) {
		*first = 0;
		return b->score[r]->n_targets;
	}
	if (bn_batch_verifies(b, r)) {
		*first = 0;
		return b->lens[r];
	}
	*first = b->lens[r] - 1;
	return wants_logits(b, r) ? 1 : 0;
}

void bn_rope_freqs(const struct bn_model_config *c, float *freq)
{
	for (uint32_t p = 0; p < c->rope_dim / 2; p++)
		freq[p] = bn_rope_freq(c, p);
}

float bn_rope_freq(const struct bn_model_config *c, uint32_t p)
{
	float f = powf(c->rope_base, -(float)(2 * p) / (float)c->rope_dim) * c->rope_freq_scale;
	return c->rope_factors ? f / c->rope_factors[p] : f;
}

void bn_rope_cos_sin(const float *freq, uint32_t n_pairs, uint32_t pos, float *cs)
{
	for (uint32_t p = 0; p < n_pairs; p++) {
		float angle = (float)pos * freq[p];
		cs[2 * p] = cosf(angle);
		cs[2 * p + 1] = sinf(angle);
	}
}

uint32_t bn_argmax(const float *logits, uint32_t n)
{
	uint32_t best = 0;
	for (uint32_t i = 1; i < n; i++)
		if (logits[i] > logits[best])
			best = i;
	return best;
}
