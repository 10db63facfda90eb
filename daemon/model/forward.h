/* SPDX-License-Identifier: MIT */
/*
 * forward.h — two implementations of one graph (model.h):
 *
 *  - the reference: one sequence, one token at a time, scalar, reading the weights from the
 *    file's tensors through the reference decoders. Written to be read; the oracle of tests.
 *  - the batched forward: a padded batch of rows (struct bn_batch), every token of a row
 *    through each layer at once (prefill), ternary layers through the SIMD kernels on int8
 *    activations, work split over the thread pool. No work on padding.
 *
 * Both quantize a ternary layer's input per token the same way (bn_quantize_rows), so their
 * integer sums are equal whenever their float inputs are; float parts differ in summation
 * order only. A row's results never depend on the other rows of its batch.
 */
#ifndef BITNETD_FORWARD_H
#define BITNETD_FORWARD_H

#include "batch.h"
#include "head_screen.h"
#include "model.h"
#include "pool.h"

#include <stdint.h>

/* ---- reference --------------------------------------------------------------------------- */

struct bn_ref;
/* A sequence of up to max_len tokens (max_len <= n_ctx). NULL on no memory. */
struct bn_ref *bn_ref_new(const struct bn_model *m, uint32_t max_len);
void bn_ref_free(struct bn_ref *r);
/* Feeds `token` at the next position and writes the next-token logits [n_vocab].
 * Returns 0, or -EINVAL for a token out of range or a full sequence. */
int bn_ref_step(struct bn_ref *r, uint32_t token, float *logits);
/* bn_ref_step that also writes the position's final hidden state (the final norm's output,
 * the LM head's input: embed.h) to hidden [n_embd]; either output may be NULL. */
int bn_ref_step_hidden(struct bn_ref *r, uint32_t token, float *hidden, float *logits);

/* ---- batched ----------------------------------------------------------------------------- */

struct bn_forward;
/* max_seqs sequence ids; the pool and kernels are borrowed. NULL on no memory. */
struct bn_forward *bn_forward_new(const struct bn_model *m, uint32_t max_seqs,
				  struct bn_pool *pool, const struct bn_kernels *kernels);
void bn_forward_free(struct bn_forward *f);
/* The KV cache: n_blocks blocks of block_tokens positions for every layer (batch.h). Batches
 * then carry block tables. Replaces an earlier cache. Returns 0, -EINVAL or -ENOMEM. */
int bn_forward_kv_init(struct bn_forward *f, uint32_t n_blocks, uint32_t block_tokens);
/* Positions whose KV of one layer fills whole pages (block_tokens a multiple of it lets
 * bn_forward_kv_release give blocks back exactly); 0 when none do. */
uint32_t bn_forward_kv_release_tokens(const struct bn_forward *f);
/* Blocks [first, first + n) of the cache hold nothing to read again: their pages go back to
 * the system (a later write faults in zeroed ones). n = 0: blocks will be given back (the
 * arena takes no huge pages from now). 0, -EOPNOTSUPP (block_tokens not a multiple of
 * bn_forward_kv_release_tokens, or no cache), -EINVAL, -errno. */
int bn_forward_kv_release(struct bn_forward *f, uint32_t first, uint32_t n);
/* For callers without a scheduler (tests, benchmarks): a cache where sequence s owns fixed
 * blocks for max_len positions; batches then pass blocks = NULL. */
int bn_forward_kv_init_simple(struct bn_forward *f, uint32_t max_len);
/* Empties sequence `seq`: its next row starts at position 0. */
int bn_forward_seq_reset(struct bn_forward *f, uint32_t seq);
/* Sequence `seq` keeps positions [0, length) of those it holds: its next row starts at
 * `length` (speculative decoding's rejected drafts). 0 or -EINVAL. */
int bn_forward_seq_rewind(struct bn_forward *f, uint32_t seq, uint32_t length);
/* Sequence `seq` starts holding positions [0, start), after n_copy positions of KV block
 * src_block are copied to block dst_block (backends/backend.h, seq_fork). 0 or -EINVAL. */
int bn_forward_seq_fork(struct bn_forward *f, uint32_t seq, uint32_t start, uint32_t dst_block,
			uint32_t src_block, uint32_t n_copy);
/* Runs a batch; a row's hidden states go where its hidden row says (batch.h). logits: with all_positions, one row of n_vocab per new token, rows in batch
 * order; otherwise the rows bn_batch_logit_rows selects, in batch order: one for each batch
 * row that wants a token (b->sample NULL: every row; else the rows with b->sample[r] !=
 * NULL), for its last token, n_targets for each scored row (b->score[r]) and one per new
 * token of a verify row (b->verify[r]). Returns 0, or -EINVAL when a
 * row is inconsistent (token out of range, pos not the sequence's length, past the context,
 * a block outside the cache). Nothing is changed when it fails. */
int bn_forward_run(struct bn_forward *f, const struct bn_batch *b, float *logits,
		   int all_positions);
/* The logits rows batch row r gets from bn_forward_run without all_positions, for its new
 * tokens first .. first + count - 1: a scored row's first n_targets, the last token of a row
 * that wants a token, or none. Returns count. */
uint32_t bn_batch_logit_rows(const struct bn_batch *b, uint32_t r, uint32_t *first);

/* Rows that want a token only as the argmax of their logits (bn_sample_argmax_allowed:
 * among their mask's tokens, if they have one) take the LM head's screen from now on
 * (head_screen.h; NULL: none, the default): their logits rows then hold the exact logits of
 * the tokens that can win and -INFINITY elsewhere, when
 * every logits row of their batch is such a row and there are at most eight (forward.c says
 * why). The screen is borrowed. 0, -EINVAL (a copy without a float head:
 * bn_head_int8_build_rows) or -ENOMEM. */
int bn_forward_use_screen(struct bn_forward *f, const struct bn_head_screen *s);
/* Decode steps of one row (token blocks of one row: forward.c says why) read the ternary
 * matrices' T3 copies (bn_model_add_t3: 1.6 bits a weight instead of 2) from now on, on (1) or off
 * (0, the default). The same integer sums, so the same logits to the bit. A matrix without
 * a copy keeps its T2 planes. 0, or -ENOTSUP: this CPU has no T3 kernel (kernels.h). */
int bn_forward_use_t3(struct bn_forward *f, int on);
/* Whether the pool's threads prefetch the next matrix's first bytes while they wait between
 * two matrix jobs of a step of up to four tokens (forward.c: read-ahead). On by default; it
 * changes no result, only when the bytes arrive. Off for the benchmark's side by side. */
void bn_forward_set_read_ahead(struct bn_forward *f, int on);
/* The int8 LM head (--lm-head int8) from now on: every logits row, sampled and scored ones
 * included, is ((float)(q . xq) * scale) * inv_scale of the int8 copy and the row's int8
 * activations (kernels' i8_gemm), an approximation of the file's head that is not the same
 * bits; NULL goes back to the file's head. The matrix is borrowed (a screen's w, which
 * holds scale and row_sum). Takes precedence over the screen. */
void bn_forward_use_int8_head(struct bn_forward *f, const struct bn_i8_matrix *w);
/* What the screen did since bn_forward_new. */
void bn_forward_screen_stats(const struct bn_forward *f, struct bn_head_screen_stats *out);
/* 1 when the last bn_forward_run's logits rows came from the screen (every row of it, or
 * none). */
int bn_forward_screened(const struct bn_forward *f);
/* Logits row i of the last bn_forward_run (without all_positions), in full: the full head's
 * logits, the bits of a run without the screen, over a screened row's -INFINITY; nothing
 * when the run was not screened (its rows are full already). For a masked row's second
 * draw (head_screen.h). Call it before the next run. */
void bn_forward_full_logits(struct bn_forward *f, uint32_t i, float *logits);

/* What every row of a batch must respect, whatever the backend (backends/backend.h): a known sequence
 * at most once per batch, 1 <= lens <= width, pos = the sequence's length, within the context,
 * token ids in the vocabulary. Block tables are the backend's to check. */
struct bn_batch_limits {
	const uint32_t *seq_len;  /* [max_seqs] positions each sequence holds */
	uint32_t max_seqs, n_ctx, n_vocab;
};
/* 0 with *n_tok = the batch's new tokens, or -EINVAL. */
int bn_batch_check(const struct bn_batch_limits *lim, const struct bn_batch *b, uint32_t *n_tok);

/* RoPE: freq[p] = rope_base^(-2p / rope_dim) * rope_freq_scale / rope_factors[p] (where the
 * file has them), the angle per position of pair p < rope_dim / 2; cs[2p], cs[2p + 1] = cos,
 * sin of pos * freq[p]. Every backend and the reference rotate with these values. */
void bn_rope_freqs(const struct bn_model_config *c, float *freq);
/* The local (sliding-window) layers' angles: base rope_base_swa, no scaling, no factors. */
void bn_rope_freqs_swa(const struct bn_model_config *c, float *freq);
float bn_rope_freq(const struct bn_model_config *c, uint32_t p);
void bn_rope_cos_sin(const float *freq, uint32_t n_pairs, uint32_t pos, float *cs);

/* Index of the largest logit (the first one on ties). */
uint32_t bn_argmax(const float *logits, uint32_t n);

#endif /* BITNETD_FORWARD_H */
