/* SPDX-License-Identifier: MIT */
/*
 * cuda_kernels.h — the CUDA kernels of the forward pass and the sampler, callable from C.
 *
 * Every function launches on `stream` and returns 0 or the cudaError_t of the launch (as an
 * int); none of them synchronizes. Pointers are device pointers. They compute what the CPU
 * kernels of kernels/cpu/kernels.h compute, on the same layouts (bn_blocks.h):
 *
 *  - integer parts are exact: int8 quantization equals bn_quantize_rows, and a ternary product
 *    equals the scalar t2_gemm bit for bit (same integer sum, same two float multiplies);
 *  - float parts differ from the CPU only by summation order; within the GPU a result never
 *    depends on how many tokens are computed together, so a sequence's logits do not depend
 *    on its batch (each output has one fixed reduction order, whatever the launch shape).
 *
 * Activation rows handed to the matrix kernels must be 16-byte aligned with a stride that is a
 * multiple of 8 floats, and be zero (not garbage) between n_in and the next multiple of 16:
 * the kernels read whole vectors there and multiply them by zero weights.
 */
#ifndef BITNET_CUDA_KERNELS_H
#define BITNET_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The lowest compute capability this build has machine code for, major * 10 + minor: the first
 * of the Makefile's CUDA_ARCHS (9.0 unless the build says otherwise: 8.7 on aarch64, for Jetson
 * Orin). A device below it has neither that code nor PTX it could run. */
#ifndef BN_CUDA_MIN_ARCH
#define BN_CUDA_MIN_ARCH 90
#endif
static inline int bn_cuda_arch_ok(int major, int minor)
{
	return major * 10 + minor >= BN_CUDA_MIN_ARCH;
}

#define BN_CUDA_MAX_HEAD_DIM 256 /* attention keeps a query in registers: 8 per lane */
#define BN_CUDA_MAX_TOP 64       /* log-probability alternatives per token (--max-logprobs) */

/* A ternary matrix in the T2-plane layout, as on the CPU: n_out rows of row_bytes codes, one
 * scale a row, or (group != 0) one a group of `group` weights as struct bn_t2_matrix's
 * (kernels/cpu/kernels.h): gscale [n_out][n_in / group], scale NULL. */
struct bn_cuda_t2 {
	const uint8_t *codes;
	const float *scale;      /* [n_out], or NULL (grouped) */
	uint32_t n_in, n_out, row_bytes;
	const float *gscale;     /* [n_out][n_in / group], or NULL */
	uint32_t group;          /* weights per scale, a multiple of 128; 0: one scale a row */
};

/* A float matrix on the device: rows of n_in weights, ld elements apart (ld a multiple of
 * 16, zero past n_in). F16 matrices also hold zero rows up to a multiple of 64. */
enum bn_cuda_ftype { BN_CUDA_F32, BN_CUDA_F16 };
struct bn_cuda_fmat {
	const void *data;
	enum bn_cuda_ftype type;
	uint32_t n_in, n_out, ld;
};

/* Int8 activation rows, as struct bn_q8_rows on the CPU. */
struct bn_cuda_q8 {
	int8_t *q;               /* [n][k_pad] */
	float *inv_scale;        /* [n] */
	int32_t *sum;            /* [n] */
	uint32_t k, k_pad;
};

/* ---- ternary layers ---------------------------------------------------------------------- */

/* bn_quantize_rows: n rows of x (stride ldx) into xq (k and k_pad set by the caller). */
int bn_cuda_quantize(const float *x, uint32_t ldx, uint32_t n, const struct bn_cuda_q8 *xq,
		     cudaStream_t stream);
/* y[b*ldy + o] = ((float)(sum_k w(o,k) q[b][k]) * scale[o]) * inv_scale[b], all o, b < n_tok.
 * Picks the kernel by n_tok (results are identical: the sums are exact). A grouped matrix
 * goes to bn_cuda_t2g_gemv whatever n_tok. */
int bn_cuda_t2_gemm(const struct bn_cuda_t2 *w, const struct bn_cuda_q8 *x, uint32_t n_tok,
		    float *y, uint32_t ldy, cudaStream_t stream);
/* The grouped product (w->group != 0), bit for bit the CPU's t2g_gemm: per group the exact
 * integer sum of (code - 1) q, then s = fmaf((float)sum, gscale[o][g], s) in group order,
 * y = s * inv_scale[b]. Warp per row as the dp4a kernel; x.sum is not read. */
int bn_cuda_t2g_gemv(const struct bn_cuda_t2 *w, const struct bn_cuda_q8 *x, uint32_t n_tok,
		     float *y, uint32_t ldy, cudaStream_t stream);
/* The two kernels behind it, for tests: warp-per-row dp4a (any n_tok; the batch-1 path) and
 * int8 tensor-core tiles of 64 rows x 64 tokens (large batches and prefill). */
int bn_cuda_t2_gemv_dp4a(const struct bn_cuda_t2 *w, const struct bn_cuda_q8 *x, uint32_t n_tok,
			 float *y, uint32_t ldy, cudaStream_t stream);
int bn_cuda_t2_gemm_tc(const struct bn_cuda_t2 *w, const struct bn_cuda_q8 *x, uint32_t n_tok,
		       float *y, uint32_t ldy, cudaStream_t stream);

/* ---- float layers ------------------------------------------------------------------------ */

/* y[b*ldy + o] = sum_k w[o][k] x[b*ldx + k]. F32 weights: CUDA cores, one warp per output row,
 * fixed lane order. F16 weights: half tensor cores on x rounded to half (xh: scratch of
 * round64(n_tok) x w->ld halves), float accumulation, one fixed k order. */
int bn_cuda_f_gemm(const struct bn_cuda_fmat *w, const float *x, uint32_t ldx, uint32_t n_tok,
		   float *y, uint32_t ldy, uint16_t *xh, cudaStream_t stream);

/* ---- element-wise ------------------------------------------------------------------------ */

/* out[t] = rmsnorm(x[rows ? rows[t] : t]) * w, n elements, n_tok rows; out may equal x. */
int bn_cuda_rmsnorm(float *out, uint32_t ldo, const float *x, uint32_t ldx, const uint32_t *rows,
		    const float *w, uint32_t n, uint32_t n_tok, float eps, cudaStream_t stream);
/* x[t][i] += y[t][i]. */
int bn_cuda_add(float *x, uint32_t ldx, const float *y, uint32_t ldy, uint32_t n, uint32_t n_tok,
		cudaStream_t stream);
/* RoPE on n_heads heads of head_dim in each row of v; cs[t][2i], cs[t][2i+1] = cos, sin of
 * pair i at token t's position (computed on the host exactly as the CPU does). */
int bn_cuda_rope(float *v, uint32_t ldv, uint32_t n_heads, uint32_t head_dim, uint32_t rope_dim,
		 int neox, const float *cs, uint32_t n_tok, cudaStream_t stream);
/* g = act(g) * u, then rmsnorm by sub_norm when not NULL. act: BN_CUDA_ACT_SILU (0),
 * BN_CUDA_ACT_RELU2 (1: relu(g)^2), BN_CUDA_ACT_GELU (2: the tanh approximation, as the CPU's
 * forward_layer.c). */
enum { BN_CUDA_ACT_SILU, BN_CUDA_ACT_RELU2, BN_CUDA_ACT_GELU };
int bn_cuda_gate(float *g, const float *u, uint32_t ld, uint32_t n, uint32_t n_tok, int act,
		 const float *sub_norm, float eps, cudaStream_t stream);

/* ---- KV cache and attention -------------------------------------------------------------- */

/* A layer's paged cache: row (block * block_tokens + position % block_tokens) of kv_dim
 * floats, keys and values apart. */
struct bn_cuda_kv_layer {
	float *K, *V;
	uint32_t kv_dim, block_tokens;
};

/* Writes token t's key and value rows to cache row slot[t] (none for slot UINT32_MAX: a
 * padding row of a graph step, daemon/backends/cuda_fwd.h). */
int bn_cuda_kv_store(const struct bn_cuda_kv_layer *kv, const float *k, const float *v,
		     uint32_t ld, const uint32_t *slot, uint32_t n_tok, cudaStream_t stream);

/* Per token t: its query heads attend over positions [0, len[t]) of its sequence, whose block
 * table starts at tables + table_off[t]; with a window, over the last `window` of them only
 * (a sliding-window layer: [len[t] - window, len[t]) when len[t] > window). Keys/values of
 * head h are KV head h / (n_head / n_head_kv). out[t] gets the heads' outputs. One fixed order
 * per (token, head): positions interleaved over four warps in order, each an online softmax,
 * merged in warp order. */
struct bn_cuda_attn {
	const float *q;
	uint32_t ldq;
	float *out;
	uint32_t ldo;
	const uint32_t *len, *table_off, *tables;
	uint32_t n_head, n_head_kv, head_dim;
	float scale;
	uint32_t window;         /* 0: every position */
};
int bn_cuda_attend(const struct bn_cuda_kv_layer *kv, const struct bn_cuda_attn *a, uint32_t n_tok,
		   cudaStream_t stream);

/* ---- sampling (daemon/model/sample.h semantics) ------------------------------------------------ */

/* One penalty to apply: logits[row * ld + token] is divided/multiplied by `repeat` (when not
 * 0) as the repetition penalty does, then `subtract` is taken off. One entry per distinct
 * (row, token). */
struct bn_cuda_penalty {
	uint32_t row, token;
	float repeat, subtract;
};
int bn_cuda_penalize(float *logits, uint32_t ld, const struct bn_cuda_penalty *p, uint32_t n,
		     cudaStream_t stream);

/* Structured output: a row's allowed tokens are a bitset of (n_vocab + 63) / 64 words (bit
 * id % 64 of word id / 64, daemon/model/sample.h); masks holds them back to back, and a row
 * names its own by index (BN_CUDA_NO_MASK: every token). */
#define BN_CUDA_NO_MASK UINT32_MAX

/* Argmax of each of n_rows rows (first on ties; NaN never wins; all-NaN gives 0), over the
 * tokens masks[row_mask[r]] allows (row_mask NULL, or an entry BN_CUDA_NO_MASK: all; a row
 * whose allowed logits are all NaN or -inf gives its first allowed id). */
int bn_cuda_argmax(const float *logits, uint32_t ld, uint32_t n_vocab, uint32_t n_rows,
		   const uint64_t *masks, const uint32_t *row_mask, uint32_t *token,
		   cudaStream_t stream);

/* A row that needs the ranking: sampled, or log-probabilities asked. */
struct bn_cuda_sample_row {
	uint32_t logit_row;       /* row of the logits matrix */
	float temperature;        /* 0: greedy (the first ranked token) */
	uint32_t top_k;
	float top_p, min_p;
	float u;                  /* bn_sample_uniform(seed, n_output) */
	uint32_t n_top;           /* alternatives wanted (<= BN_CUDA_MAX_TOP) */
	uint32_t want_logprob;
	uint32_t mask;            /* its allowed tokens' bitset in masks, or BN_CUDA_NO_MASK: the
				   * ranking, top_k, top_p, min_p, the max and the log-softmax are
				   * then over those tokens alone, as bn_sample's */
};
struct bn_cuda_token_logprob {
	uint32_t token;
	float logprob;
};
struct bn_cuda_sample_result {
	uint32_t token;
	float logprob;
	uint32_t n_top;
	uint32_t pad;
	struct bn_cuda_token_logprob top[BN_CUDA_MAX_TOP];
};

/* Scratch for bn_cuda_sample: sized by bn_cuda_sample_scratch_bytes. */
size_t bn_cuda_sample_scratch_bytes(uint32_t n_vocab, uint32_t n_rows);
/* Clamps the rows (NaN -> -FLT_MAX, +-inf -> +-FLT_MAX) in place, ranks them (logit
 * descending, lower id first; the tokens a row's mask leaves out after all others) and picks
 * each row's token as bn_sample does. masks may be NULL when no row has one. */
int bn_cuda_sample(float *logits, uint32_t ld, uint32_t n_vocab, const struct bn_cuda_sample_row *rows,
		   uint32_t n_rows, const uint64_t *masks, void *scratch, size_t scratch_bytes,
		   struct bn_cuda_sample_result *out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* BITNET_CUDA_KERNELS_H */
