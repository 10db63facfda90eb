/* SPDX-License-Identifier: MIT */
/*
 * forward_internal.h — what the batched forward pass's files share: forward.c (the pass, the
 * KV cache, scratch, the LM head), forward_gemm.c (matrix jobs and read-ahead) and
 * forward_layer.c (a layer: its element-wise parts, attention, the order of its steps). Not
 * for other rooms.
 */
#ifndef BITNETD_FORWARD_INTERNAL_H
#define BITNETD_FORWARD_INTERNAL_H

#include "forward.h"

#include <stdint.h>

#define TOKEN_BLOCK 64    /* tokens per gemm task: their int8 rows stay in L2 (64 x 7 KB) */
#define ROW_CHUNK_MIN 16  /* output rows per gemm task, at least */
#define ELEM_BLOCK 8      /* tokens per element-wise task */
#define SIMPLE_BLOCK_TOKENS 16 /* bn_forward_kv_init_simple */
/* LM-head rows a Q8_0 / Q6_K task decodes at a time: 160 KB of floats at 2560 inputs, in L2
 * while the float kernel reads them, and a fixed buffer per thread instead of an allocation
 * per task that grew with the vocabulary (a 128k head's task chunk was 160 MB). */
#define DECODE_ROWS 16
/* Token blocks of at most this many rows read the T3 copies (bn_forward_use_t3): one. From two
 * rows on a step is no longer bound by the bytes alone, and decoding base 3 costs more
 * instructions than the 2-bit planes (2B4T shape, screened greedy decode, alternating in one
 * process: batch 1 1.10-1.16x the 2-bit rate; 2 or 4 rows through the T3 kernel 0.79-0.80x in
 * every round). */
#define T3_ROWS 1


struct bn_forward {
	const struct bn_model *m;
	struct bn_pool *pool;
	const struct bn_kernels *kern;
	uint32_t max_seqs;
	uint32_t *seq_len;  /* [max_seqs] positions each sequence holds */
	/* KV arena: [n_layer][n_blocks][block_tokens][kv_dim] for keys, the same for values. */
	float *kv_k, *kv_v;
	size_t kv_bytes;    /* of each of the two mappings */
	uint32_t kv_blocks, kv_block_tokens;
	uint32_t *simple_tables; /* bn_forward_kv_init_simple: [max_seqs][simple_max_blocks] */
	uint32_t simple_max_blocks;
	uint32_t q_dim, kv_dim, widest;
	/* scratch for n_cap tokens */
	uint32_t n_cap;
	float *x;        /* [n][n_embd] residual stream */
	float *xb;       /* [n][widest] normed inputs, projections out */
	float *q;        /* [n][q_dim] */
	float *k, *v;    /* [n][kv_dim] new keys and values */
	float *att;      /* [n][q_dim] */
	float *gate, *up;/* [n][n_ff] */
	float *xin;      /* [n][3][n_embd] each projection's input (cfg proj_norms), or NULL */
	float *rope_cs;  /* [n][rope_dim] cos, sin of each pair at the token's position */
	float *rope_cs_swa; /* the same for the local layers (cfg n_swa), or NULL */
	float *rope_freq;/* [rope_dim / 2] angle per position of each pair, fixed by the model */
	float *rope_freq_swa; /* the local layers' (cfg n_swa), or NULL */
	float *attn_scores; /* [pool threads][group][n_ctx]: attention scratch of each thread */
	float *decode_rows; /* [pool threads][DECODE_ROWS][n_embd]: a Q8_0 / Q6_K LM head's rows */
	struct bn_q8_rows xq; /* [n][k_pad of widest] */
	uint32_t *tok_row, *tok_pos; /* [n] */
	struct bn_head_screen_run *screen; /* NULL: every row gets the full LM head */
	const struct bn_head_screen *screen_src; /* the screen's int8 copy, to read ahead */
	struct bn_head_screen_stats screen_stats;
	int screened;               /* the last run's logits came from the screen */
	struct bn_linear int8_head; /* kind BN_LINEAR_I8: every row's logits come from it */
	bn_t3_gemm_fn t3_gemm;      /* reads the model's T3 copies in decode steps; or NULL */
	int read_ahead;             /* bn_forward_set_read_ahead; on from the start */
};


static inline uint32_t div_up(uint32_t a, uint32_t b)
{
	return (a + b - 1) / b;
}

/* The block table of row r: the batch's, or the simple identity tables. */
static inline const uint32_t *row_blocks(const struct bn_forward *f, const struct bn_batch *b, uint32_t r)
{
	if (b->blocks)
		return b->blocks[r];
	return f->simple_tables + (size_t)b->seq[r] * f->simple_max_blocks;
}

/* The key (or value: base says which) of position `offset` of KV block `block` in layer li:
 * the arena is [n_layer][kv_blocks][kv_block_tokens][kv_dim]. */
static inline float *kv_at(const struct bn_forward *f, float *base, uint32_t li, uint32_t block,
		    uint32_t offset)
{
	size_t row = ((size_t)li * f->kv_blocks + block) * f->kv_block_tokens + offset;
	return base + row * f->kv_dim;
}

/* Where position pos of row r keeps its key (or value) in layer li. */
static inline float *kv_slot(const struct bn_forward *f, float *base, const struct bn_batch *b,
		      uint32_t r, uint32_t li, uint32_t pos)
{
	uint32_t block = row_blocks(f, b, r)[pos / f->kv_block_tokens];
	return kv_at(f, base, li, block, pos % f->kv_block_tokens);
}

/* ---- forward_gemm.c ---------------------------------------------------------------------- */

/* y_i = W_i x for up to three matrices with the same input x [n_tok][ldx]; one of them. */
void bn_fw_linear_multi(struct bn_forward *f, uint32_t n_mats, const struct bn_linear *const *w,
			float *const *y, const uint32_t *ldy, const float *x, uint32_t ldx,
			uint32_t n_tok);
void bn_fw_linear1(struct bn_forward *f, const struct bn_linear *w, float *y, uint32_t ldy,
		   const float *x, uint32_t ldx, uint32_t n_tok);
/* How many row chunks of each matrix a thread gets for a job of n_tok tokens. */
uint32_t bn_fw_chunks_per_thread(uint32_t n_tok);
/* The job after the one about to run will read w first; after the last layer, the LM head. */
void bn_fw_read_ahead(struct bn_forward *f, const struct bn_linear *w, uint32_t n_tok);
void bn_fw_read_ahead_head(struct bn_forward *f, uint32_t n_tok);

/* ---- forward_layer.c --------------------------------------------------------------------- */

/* Layer li for the batch's n_tok new tokens, in place on f->x. */
void bn_fw_layer(struct bn_forward *f, const struct bn_batch *b, uint32_t li, uint32_t n_tok);

#endif /* BITNETD_FORWARD_INTERNAL_H */
