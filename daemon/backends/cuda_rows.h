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
 * targets), the device answers into one block (struct cuda_answers), and only the answers
 * the batch reads come back.
 */
#ifndef BITNETD_CUDA_ROWS_H
#define BITNETD_CUDA_ROWS_H

#include "cuda_kernels.h"
#include "cuda_ops.h"
#include "model/batch.h"
#include "model/sample.h"

#include <stddef.h>
#include <stdint.h>

/* Host scratch of one backend: the penalty lists (bn_sample_penalties). */
struct cuda_rows {
	struct bn_sampler sampler;
	struct bn_penalty *list;
	uint32_t cap;
};

void cuda_rows_init(struct cuda_rows *h);
void cuda_rows_free(struct cuda_rows *h);

/* A step's counts: logits rows, room for penalty entries (the exact count after
 * cuda_rows_fill), ranking rows, scored positions. */
struct cuda_rows_shape {
	uint32_t n_out, n_pen, n_rank, n_score;
};

void cuda_rows_count(const struct bn_batch *b, struct cuda_rows_shape *s);

/* The token (index among the step's new tokens, in batch order) of each logits row. */
void cuda_rows_tokens(const struct bn_batch *b, uint32_t *out_rows);

/* Penalty entries, ranking rows and scored targets of every logits row; s->n_pen is then the
 * count of entries. 0, or -EINVAL (a target outside the vocabulary, more alternatives than
 * BN_CUDA_MAX_TOP) or -ENOMEM. */
int cuda_rows_fill(struct cuda_rows *h, const struct bn_batch *b, uint32_t n_vocab,
		   struct bn_cuda_penalty *pen, struct bn_cuda_sample_row *rank,
		   struct bn_cuda_score_row *score, struct cuda_rows_shape *s);

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

#endif /* BITNETD_CUDA_ROWS_H */
