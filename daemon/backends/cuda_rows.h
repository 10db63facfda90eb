/* SPDX-License-Identifier: MIT */
/*
 * cuda_rows.h — the logits rows of a cuda step (cuda.c) and what each asks, answered on the
 * device as the cpu backend answers them on the host (cpu.c):
 *
 *  - a row that wants a token: its last token, sampled (model/sample.h);
 *  - a verify row (model/batch.h): each of its tokens, sampled as plain decoding samples that
 *    output index: the drafts before it are its history (its penalties), the index's seeded
 *    draw is its draw;
 *  - a scored row: each of its first n_targets tokens, the log-probability of its target
 *    (bn_cuda_score) and its n_top most likely tokens (a ranking row of bn_cuda_sample at
 *    temperature 0).
 *
 * Logits rows are numbered in batch order as bn_batch_logit_rows counts them. The host fills
 * the sampler's inputs into the step's input block (penalty entries, ranking rows, scored
 * targets, constrained rows' allowed tokens), the device answers into one block (struct
 * cuda_answers), and only the answers the batch reads come back.
 *
 * Structured output (a sampled position with a mask, model/sample.h): the position's bitset
 * goes up with the inputs; its argmax reads only the allowed tokens and its ranking puts the
 * others last, so every step of the sampler runs on the allowed tokens as the cpu's masked
 * rows do. Closing before max_tokens: once the tokens are back, each constrained position's
 * check (bn_sample_check) looks at its token on the host, in order along a verify row; the
 * positions it gives other tokens to draw from are ranked again on the device, from the same
 * logits (penalized, and clamped by the first ranking: clamping twice changes nothing) with
 * the same u (cuda_rows_redraw). As on the cpu, only a draw that does not fit costs a second
 * pass.
 */
#ifndef BITNETD_CUDA_ROWS_H
#define BITNETD_CUDA_ROWS_H

#include "cuda_kernels.h"
#include "cuda_ops.h"
#include "model/batch.h"
#include "model/sample.h"

#include <stddef.h>
#include <stdint.h>

/* Host scratch of one backend: the penalty lists (bn_sample_penalties), and the second draw's
 * inputs (pinned on the host, and on the device) with the positions it redraws. */
struct cuda_rows {
	struct bn_sampler sampler;
	struct bn_penalty *list;
	uint32_t cap;
	void *redraw_host, *redraw_dev;
	size_t redraw_cap;
	uint32_t *cursor;             /* [n_rows] a row's next position to check */
	uint32_t *redraw_at;          /* [n_rows] (batch row, position) of each redrawn one */
	uint32_t rows_cap;
};

void cuda_rows_init(struct cuda_rows *h);
void cuda_rows_free(struct cuda_rows *h);

/* A step's counts: logits rows, room for penalty entries (the exact count after
 * cuda_rows_fill), ranking rows, scored positions, constrained positions (their bitsets). */
struct cuda_rows_shape {
	uint32_t n_out, n_pen, n_rank, n_score, n_masks;
};

void cuda_rows_count(const struct bn_batch *b, struct cuda_rows_shape *s);

/* The token (index among the step's new tokens, in batch order) of each logits row. */
void cuda_rows_tokens(const struct bn_batch *b, uint32_t *out_rows);

/* Where cuda_rows_fill writes: the step's host inputs, sized by cuda_rows_count's shape. */
struct cuda_rows_inputs {
	struct bn_cuda_penalty *pen;     /* [n_pen] */
	struct bn_cuda_sample_row *rank; /* [n_rank] */
	struct bn_cuda_score_row *score; /* [n_score] */
	uint32_t *row_mask;              /* [n_out] index into masks, or BN_CUDA_NO_MASK */
	uint64_t *masks;                 /* [n_masks][bn_sample_mask_words(n_vocab)] */
};

/* Penalty entries, ranking rows, scored targets and allowed tokens of every logits row;
 * s->n_pen is then the count of entries. 0, or -EINVAL (a target outside the vocabulary, more
 * alternatives than BN_CUDA_MAX_TOP) or -ENOMEM. */
int cuda_rows_fill(struct cuda_rows *h, const struct bn_batch *b, uint32_t n_vocab,
		   const struct cuda_rows_inputs *in, struct cuda_rows_shape *s);

/* The answers' block, the same layout on the device and (pinned) on the host, for `rows`
 * logits rows: the argmax of each, the scored log-probabilities, then the ranking results
 * (at most one a row). A step copies back cuda_answers_back of it. */
struct cuda_answers {
	uint32_t *tokens;                    /* [rows] */
	float *score;                        /* [rows] */
	struct bn_cuda_sample_result *ranked; /* [rows] */
};
size_t cuda_answers_bytes(uint32_t rows);
struct cuda_answers cuda_answers_at(void *base, uint32_t rows);
size_t cuda_answers_back(uint32_t rows, uint32_t n_rank);

/* Ranking rows one bn_cuda_sample call takes, so that its scratch stays under a bound however
 * many positions a step scores; the step's scratch is sized for min(n_rank, this). */
uint32_t cuda_rows_rank_group(uint32_t n_vocab);

/* The device's answers for a step whose logits [n_out][n_vocab] are computed: penalties, the
 * argmax of every row, the rankings (in groups), the scored targets. 0 or a CUDA error. */
struct cuda_rows_device {
	float *logits;
	uint32_t n_vocab;
	const struct bn_cuda_penalty *pen;
	const struct bn_cuda_sample_row *rank;
	const struct bn_cuda_score_row *score;
	const uint64_t *masks;
	const uint32_t *row_mask;
	void *scratch;
	size_t scratch_bytes;
	struct cuda_answers out;
};
int cuda_rows_answer(const struct cuda_rows_device *d, const struct cuda_rows_shape *s,
		     cudaStream_t stream);

/* The answers, back on the host, into out[] (rows that want a token), the verify rows'
 * answers and the scored rows' outputs. */
void cuda_rows_collect(const struct bn_batch *b, const struct cuda_answers *a,
		       struct bn_sample_out *out);

/* After cuda_rows_collect: every constrained position's check on its token (a verify row's up
 * to the first that is not its draft), and a second draw on the device of those it refuses,
 * among the tokens it gives, answers updated in out[] and the verify rows. host is the
 * answers' pinned block, its ranked results overwritten. 0, -ENOMEM, or a CUDA error
 * (positive). The step's scratch must hold a ranking of n_masks rows (up to the group). */
int cuda_rows_redraw(struct cuda_rows *h, const struct bn_batch *b,
		     const struct cuda_rows_device *d, const struct cuda_answers *host,
		     struct bn_sample_out *out, cudaStream_t stream);

#endif /* BITNETD_CUDA_ROWS_H */
