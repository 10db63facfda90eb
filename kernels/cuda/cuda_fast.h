/* SPDX-License-Identifier: MIT */
/*
 * cuda_fast.h — the kernels of the cuda backend's faster paths (issue 49), beside the first
 * ones (cuda_kernels.h), whose structs and exactness contract they share:
 *
 *  - ternary products are exact integer sums with the same two float multiplies, so every
 *    kernel here gives the bits bn_cuda_t2_gemm gives, whatever the layout, the split of the
 *    k range or the number of tokens (tested against the scalar t2_gemm);
 *  - the fused element-wise kernels do the float operations of the kernels they replace, per
 *    element and in the same order (same block shape, same reductions), so they give the same
 *    bits as the unfused sequence;
 *  - split attention changes the float reduction order for contexts longer than its split,
 *    and only there; the split depends on a token's context length alone, never on its batch.
 *
 * As in cuda_kernels.h, every function launches on `stream` and returns 0 or the cudaError_t
 * of the launch; pointers are device pointers unless a comment says host.
 */
#ifndef BITNET_CUDA_FAST_H
#define BITNET_CUDA_FAST_H

#include "cuda_kernels.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- ternary products ------------------------------------------------------------------- */

/* The P16 layout of a T2 matrix: rows in groups of 16 (the last group padded with rows of
 * zero weights, code 0x55), each group chunk-major: byte b of chunk c (64 bytes, 256 weights)
 * of row r lies at (r / 16) 16 row_bytes + 1024 c + 64 (r % 16) + b. A warp's 16-byte loads
 * of one chunk of a group are then 512 contiguous bytes (rows 0-7, then 8-15), and each 4-byte
 * word of a lane feeds one dp4a, or one mma fragment register, after a shift and a mask. */
size_t bn_cuda_p16_bytes(uint32_t n_out, uint32_t row_bytes);
/* Host: codes (n_out rows of row_bytes, the T2 layout) into out (bn_cuda_p16_bytes). */
void bn_cuda_p16_pack(const uint8_t *codes, uint32_t n_out, uint32_t row_bytes, uint8_t *out);

/* Where split-k partial sums meet: int32 sums and per-tile arrival counts, all zero between
 * launches (a launch leaves them so). Sized by bn_cuda_splitk_bytes for the widest matrix; a
 * launch that would need more runs unsplit. */
struct bn_cuda_splitk {
	int32_t *acc;
	uint32_t *count;
	uint32_t acc_len, count_len;
};
size_t bn_cuda_splitk_bytes(uint32_t max_n_out);
/* Carves the scratch at base (bn_cuda_splitk_bytes of it; zero it before the first use). */
void bn_cuda_splitk_init(struct bn_cuda_splitk *sk, void *base, uint32_t max_n_out);

/* The batch-1 GEMV on the P16 layout (w->codes P16), any n_tok (passes of up to 8 tokens; it
 * is meant for fewer than 16): a warp per 16-row group and k slice, several 16-byte streaming
 * loads in flight per lane, the two rows a lane feeds sharing its activation loads. slices:
 * how many warps share a group's k range (0: picked from the shape so that a few thousand
 * warps read at once; 1: no split); their integer partial sums meet in sk. y as
 * bn_cuda_t2_gemm. */
int bn_cuda_t2_gemv16(const struct bn_cuda_t2 *w, const struct bn_cuda_q8 *x, uint32_t n_tok,
		      float *y, uint32_t ldy, uint32_t slices, const struct bn_cuda_splitk *sk,
		      cudaStream_t stream);

/* Ternary x int8 on the int8 tensor cores (PTX mma.sync m16n8k32, u8 codes x s8 activations,
 * the +1 offset taken off with the activation sums as in the dp4a kernels): the weights go
 * from memory straight into fragment registers (no shared memory), a warp computes 32 rows x
 * up to 64 tokens, a block 128 rows. p16: w->codes in the P16 layout (else T2 rows). For up
 * to 32 tokens the k range may be split over blocks (slices as above) to read the weights
 * with enough blocks. Meant for 16 tokens or more; exact for any n_tok. */
int bn_cuda_t2_mma(const struct bn_cuda_t2 *w, int p16, const struct bn_cuda_q8 *x,
		   uint32_t n_tok, float *y, uint32_t ldy, uint32_t slices,
		   const struct bn_cuda_splitk *sk, cudaStream_t stream);

/* ---- fused element-wise kernels (bit-identical to the sequences they replace) ----------- */

/* Per token t: x[t] += y[t] when y is not NULL (written back), then the int8 quantization
 * (bn_cuda_quantize into xq, k = n, k_pad set by the caller) of rmsnorm(x[t]) * w: what
 * bn_cuda_add, bn_cuda_rmsnorm and bn_cuda_quantize compute one after another, without the
 * float output. */
int bn_cuda_add_norm_quant(float *x, uint32_t ldx, const float *y, uint32_t ldy, const float *w,
			   uint32_t n, uint32_t n_tok, float eps, const struct bn_cuda_q8 *xq,
			   cudaStream_t stream);
/* out[t] = rmsnorm(x[r] + y[r]) * w with r = rows ? rows[t] : t (x[r] += y[r] written back
 * when y is not NULL): bn_cuda_add then bn_cuda_rmsnorm. */
int bn_cuda_add_rmsnorm(float *out, uint32_t ldo, float *x, uint32_t ldx, const float *y,
			uint32_t ldy, const uint32_t *rows, const float *w, uint32_t n,
			uint32_t n_tok, float eps, cudaStream_t stream);
/* The quantization of act(g) * u (then rmsnorm by sub_norm when not NULL) into xq, g and u
 * read, not written: bn_cuda_gate then bn_cuda_quantize (act as bn_cuda_gate's). */
int bn_cuda_gate_quant(const float *g, const float *u, uint32_t ld, uint32_t n, uint32_t n_tok,
		       int act, const float *sub_norm, float eps, const struct bn_cuda_q8 *xq,
		       cudaStream_t stream);
/* RoPE on the query heads (in place) and on the key heads, and the keys and values stored to
 * their cache rows: bn_cuda_rope twice and bn_cuda_kv_store (k itself is not written). */
int bn_cuda_rope_store(float *q, uint32_t ldq, const float *k, const float *v, uint32_t ldkv,
		       uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim, uint32_t rope_dim,
		       int neox, const float *cs, const struct bn_cuda_kv_layer *kv,
		       const uint32_t *slot, uint32_t n_tok, cudaStream_t stream);

/* ---- split attention (flash-decoding) -------------------------------------------------- */

/* bn_cuda_attend with a token's positions [0, len) cut into splits of `split` positions
 * (a power of two of at least 16), each split one block, merged in split order by a second
 * kernel. A token with len <= split is computed by the same operations as bn_cuda_attend (the
 * same bits); a longer one sums in another order (within 1e-5 of the scalar attend). The
 * split depends on len alone, so a token gives the same bits alone, in any batch, in prefill
 * or stepwise. max_splits: at least ceil(max len / split) over the launch's tokens; part:
 * scratch of bn_cuda_attend_split_bytes. A windowed a (a sliding-window layer) is refused:
 * its few positions are bn_cuda_attend's. */
size_t bn_cuda_attend_split_bytes(uint32_t n_tok, uint32_t n_head, uint32_t head_dim,
				  uint32_t max_splits);
int bn_cuda_attend_split(const struct bn_cuda_kv_layer *kv, const struct bn_cuda_attn *a,
			 uint32_t n_tok, uint32_t split, uint32_t max_splits, float *part,
			 cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* BITNET_CUDA_FAST_H */
