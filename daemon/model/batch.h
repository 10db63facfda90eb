/* SPDX-License-Identifier: MIT */
/*
 * batch.h — one step's work, as the scheduler hands it to a backend (backends/backend.h) and a
 * backend to the forward pass (forward.h).
 *
 * The batch is a [n_rows x width] token matrix, row-major. Row r holds lens[r] new tokens in
 * columns [0, lens[r]); the rest of the row is padding that no one may spend work on. The new
 * tokens of row r sit at positions [pos[r], pos[r] + lens[r]) of sequence seq[r]; everything
 * before pos[r] is already in that sequence's KV cache, whose positions [0, pos[r] + lens[r])
 * live in the blocks blocks[r][0], blocks[r][1], ... (block_tokens positions each).
 *
 * Sampling: sample[r] describes row r's request (sample.h). NULL means the row needs no token
 * (a prompt chunk that is not the prompt's last): no LM head for it. A constrained request's
 * context carries the allowed tokens as a bitset (structured output): a backend that takes
 * such rows says so (backend.h, can_mask).
 *
 * Scoring: score[r] (when the batch has a score array and the entry is not NULL; sample[r] is
 * then NULL) asks for the log-probability of a given next token at each of the row's first
 * n_targets new tokens: out[j] of its bn_score_row for the token at position pos[r] + j is
 * the log-probability of targets[j] there (as bn_score_token computes it), with n_top
 * alternatives.
 *
 * Embedding: hidden[r] (when the batch has a hidden array and the entry is not NULL; sample[r]
 * and score[r] are then NULL) asks for the final norm's output (the LM head's input, embed.h)
 * of the row's new tokens first .. first + count - 1, into out[count][n_embd].
 *
 * Verifying (speculative decoding): verify[r] (when the batch has a verify array and the entry
 * is not NULL; sample[r] is then set) makes every new token of row r sampled, not only its
 * last. The row is its request's last token followed by drafted tokens, which its sample
 * context's output array already holds after n_output; position j is sampled with that
 * context as if j more tokens had been generated (n_output + j: the drafts before it are its
 * history, and its seeded draw is the one plain decoding makes for that output index; its
 * mask, if any, the j-th: bn_sample_ctx_next), its answer in verify[r][j]. Positions are sampled in order, and a backend may stop after the
 * first whose token differs from the row's next new token (the draft it checks): the answers
 * after it are not read.
 */
#ifndef BITNETD_BATCH_H
#define BITNETD_BATCH_H

#include "sample.h"

#include <stdint.h>

/* What a scoring row asks: targets[j] is the token that follows the row's new token j. */
struct bn_score_row {
	const uint32_t *targets;  /* [n_targets] */
	uint32_t n_targets;       /* <= the row's lens: the row's last tokens may have none */
	uint32_t n_top;           /* alternatives per position */
	struct bn_sample_out *out; /* [n_targets], each with room for n_top in its top */
};

/* What an embedding row asks: the final hidden states of its new tokens [first, first + count). */
struct bn_hidden_row {
	uint32_t first, count;    /* first + count <= the row's lens */
	float *out;               /* [count][n_embd] */
};

struct bn_batch {
	uint32_t n_rows;
	uint32_t width;          /* padded row width: max over rows of lens[r] */
	const uint32_t *tokens;  /* [n_rows x width] */
	const uint32_t *lens;    /* [n_rows] new tokens per row, >= 1 */
	const uint32_t *pos;     /* [n_rows] position of the row's first new token */
	const uint32_t *seq;     /* [n_rows] backend sequence id of the row */
	const uint32_t *const *blocks;              /* [n_rows] KV block table of the row */
	const struct bn_sample_ctx *const *sample;  /* [n_rows] NULL: no token wanted */
	const struct bn_score_row *const *score;    /* NULL, or [n_rows] NULL: not scored */
	struct bn_sample_out *const *verify;        /* NULL, or [n_rows] NULL: not verified;
						     * else [lens[r]] answers */
	const struct bn_hidden_row *const *hidden;  /* NULL, or [n_rows] NULL: no hidden states */
};

/* Row r samples every new token (a verify row, above). */
static inline int bn_batch_verifies(const struct bn_batch *b, uint32_t r)
{
	return b->verify && b->verify[r];
}

#endif /* BITNETD_BATCH_H */
