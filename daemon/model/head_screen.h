/* SPDX-License-Identifier: MIT */
/*
 * head_screen.h — the exact greedy token at half the LM head's bytes.
 *
 * At batch 1 a token costs what its bytes cost, and a tied F16 head is more than half of them
 * (0.66 of 1.18 GB on the 2B4T shape). A row that only wants the argmax (bn_sample_argmax_only,
 * or among a mask's tokens: bn_sample_argmax_allowed) does not need every logit, only the ones that can win. The screen keeps an int8 copy of the
 * head, one scale per row, and reads it instead:
 *
 *  1. The row's input x is quantized to int16 (x ≈ sx * m, |m| <= bn_i8_dot_x_max), and every
 *     head row's exact integer dot I_r = sum_k q_rk m_k is taken (kernels' i8_dots).
 *  2. A_r = s_r * sx * I_r approximates the float head's logit F_r (the panel kernel's fused
 *     multiply-add chain), and B_r bounds |F_r - A_r| from above, proven, not estimated:
 *        |F_r - E_r|  <= gamma * l1_r * max|x| + tiny (the chain's rounding; E_r the exact
 *                                                      sum, gamma = (n_in + 1) * 2^-24, tiny
 *                                                      covers underflow)
 *        |E_r - A_r|  <= eps_x * l1_r + err_r * sx * sum|m_k|
 *     with l1_r >= sum_k |w_rk|, err_r >= max_k |w_rk - s_r q_rk| (both measured at build
 *     time in double and rounded up), eps_x >= max_k |x_k - sx m_k| (measured per token).
 *  3. L = max_r (A_r - B_r) is a value some row's logit reaches, so a row with A_r + B_r < L
 *     cannot be the argmax, nor tie with it. Every other row is a candidate: its panel group
 *     (64 rows) goes through the float kernel, the very computation of the full head, so the
 *     candidates' logits are bit-identical to it, and the argmax over them (first on ties) is
 *     the full head's.
 *
 * The logits row a screened row gets holds those exact logits and -INFINITY elsewhere, so
 * bn_sample and bn_argmax need no change. A non-finite input leaves the row to the full head.
 *
 * A row with a grammar's mask (structured output, sample.h) wants the argmax among the tokens
 * the mask allows (bn_sample_argmax_allowed). Step 3 then runs over the allowed rows only:
 * L = max (A_r - B_r) over them is a value an allowed row's logit reaches, so an allowed row
 * with A_r + B_r < L is not the allowed argmax; candidates are the allowed rows with
 * A_r + B_r >= L (a group with none is not computed), and the argmax over the allowed
 * candidates is the full head's argmax over the allowed tokens, to the bit. Rows the mask
 * refuses may hold anything (their group's exact logits, or -INFINITY): the sampler never
 * reads them. What a screened masked row does not give is the argmax of another set: the
 * closing check's second draw (sample.h) draws from a subset the screen did not know, so the
 * backend gives the row its full logits first (bn_forward_full_logits, cpu.c). Before masks
 * took the screen a constrained greedy step cost the full head: 26 ms against 19 ms
 * unconstrained at batch 1 (docs/PERFORMANCE.md, issue 46).
 */
#ifndef BITNETD_HEAD_SCREEN_H
#define BITNETD_HEAD_SCREEN_H

#include "kernels.h"
#include "pool.h"

#include <stdint.h>

struct bn_head_screen {
	struct bn_i8_matrix w;   /* q[r][k] = round(w_rk / s_r), |q| <= 127 */
	const struct bn_f_matrix *head; /* the float head (panels) the exact logits come from;
					 * NULL for bn_head_int8_build_rows */
	float *scale;            /* [n_out] s_r = max_k |w_rk| / 127 */
	float *err;              /* [n_out] >= max_k |w_rk - s_r q_rk| */
	float *l1;               /* [n_out] >= sum_k |w_rk| */
	int32_t *row_sum;        /* [n_out] sum_k q_rk (w.row_sum: the int8 head's kernel) */
	int8_t *q_mem;           /* owns w.q */
	int borrowed;            /* the arrays lie in a weights cache's mapping: not freed */
};

/* Builds the screen of a float head in the panel layout (kept borrowed: it must outlive the
 * screen), on the pool's threads. 0, -EINVAL (not panels, or a non-finite weight: the full
 * head then stays the only path) or -ENOMEM. */
int bn_head_screen_build(struct bn_head_screen *s, const struct bn_f_matrix *head,
			 struct bn_pool *pool);
/* The int8 copy alone of a head stored as rows of a quantized type (Q8_0, Q6_K:
 * bn_dequant_row decodes them), for the int8 head (forward.h: bn_forward_use_int8_head). It
 * has no float head to compute exact logits from (head NULL), so it is not a screen. 0,
 * -EINVAL (a row that does not decode, or a non-finite weight) or -ENOMEM. */
int bn_head_int8_build_rows(struct bn_head_screen *s, uint32_t type, const void *data,
			    uint64_t size, uint32_t n_in, uint32_t n_out, struct bn_pool *pool);
void bn_head_screen_free(struct bn_head_screen *s);
/* The copy alone from now on, as bn_head_int8_build_rows makes it: the float head it borrowed
 * may go (--lm-head int8 frees it), and the copy is no longer a screen. */
void bn_head_screen_drop_head(struct bn_head_screen *s);
/* Memory the screen holds. */
uint64_t bn_head_screen_bytes(const struct bn_head_screen *s);

/* The copy's arrays as weights-cache blobs (wcache.h; out NULL: only the count, 5), and the
 * copy taken back from a cache in the same order, borrowing its mapping: `head` is the float
 * head it screens (NULL for an int8 head), n_in x n_out its shape. 0, or -EINVAL when the
 * cache holds something else. */
struct bn_wcache_blob;
struct bn_wcache;
uint32_t bn_head_screen_blobs(const struct bn_head_screen *s, struct bn_wcache_blob *out);
int bn_head_screen_from_cache(struct bn_head_screen *s, const struct bn_f_matrix *head,
			      uint32_t n_in, uint32_t n_out, struct bn_wcache *c);

/* What the screen did, summed over rows (bn_forward_screen_stats). */
struct bn_head_screen_stats {
	uint64_t rows;           /* rows that took the screen */
	uint64_t groups;         /* panel groups computed exactly for them */
	uint64_t full_rows;      /* rows left to the full head (non-finite input) */
	uint32_t n_groups;       /* groups of the whole head, for the share */
};

/* The scratch of one forward pass's screened rows. */
struct bn_head_screen_run;
struct bn_head_screen_run *bn_head_screen_run_new(const struct bn_head_screen *s,
						  struct bn_pool *pool);
void bn_head_screen_run_free(struct bn_head_screen_run *run);

/* For each of n rows of x (the head's inputs, row stride ldx), its logits row (stride
 * ldl): the exact float logits of every token that can be the argmax and the rest of their
 * panel groups, -INFINITY elsewhere; a row with a non-finite input gets the full head. masks
 * NULL, or masks[b] NULL: every token may be row b's; else the bitset of the tokens it may
 * take (sample.h's layout, at least one set), and the argmax is theirs (above). The
 * int8 pass is split into tasks_per_thread stretches of groups per pool thread (the caller's
 * policy for matrices, forward.c; at most BN_HEAD_SCREEN_MAX_TASKS_PER_THREAD). Counts into
 * *stats. 0 or -ENOMEM (nothing written). */
#define BN_HEAD_SCREEN_MAX_TASKS_PER_THREAD 4
int bn_head_screen_logits(struct bn_head_screen_run *run, const struct bn_kernels *kern,
			  uint32_t tasks_per_thread, const float *x, uint32_t ldx, uint32_t n,
			  const uint64_t *const *masks, float *logits, uint32_t ldl,
			  struct bn_head_screen_stats *stats);

#endif /* BITNETD_HEAD_SCREEN_H */
