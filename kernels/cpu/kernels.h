/* SPDX-License-Identifier: MIT */
/*
 * kernels.h — the CPU kernels the forward pass calls, as a table of function pointers filled
 * once at start-up from what the CPU reports: cpuid on x86-64 (scalar, AVX2, AVX-VNNI, AVX-512
 * VNNI), the kernel's hardware capabilities on aarch64 (scalar, NEON, dotprod, i8mm; the
 * variants of one architecture only are built). Every variant computes the same
 * thing; the integer parts are bit-exact across variants, the float parts differ only in
 * summation order. Within one variant a result never depends on how many rows are computed
 * together, which is what makes a sequence's logits independent of its batch.
 */
#ifndef BITNET_KERNELS_H
#define BITNET_KERNELS_H

#include "../bn_blocks.h"

#include <stddef.h>
#include <stdint.h>

/* A ternary matrix in the T2-plane layout (bn_blocks.h): n_out rows of n_in weights, with
 * one scale per row (BitNet's one scale per tensor, repeated), or one per group of `group`
 * consecutive weights of a row (Ternary-Bonsai's 128, a TQ1_0/TQ2_0 block's 256): then
 * gscale holds n_out rows of n_in / group scales, t2g_gemm computes it, and scale is NULL.
 * A group is whole 128-weight blocks (BN_T2_GROUP_BLOCK): plane pair 0-1 or 2-3 of a chunk. */
struct bn_t2_matrix {
	const uint8_t *codes;    /* [n_out][row_bytes] */
	const float *scale;      /* [n_out] weight scale of each row, or NULL (grouped) */
	const float *gscale;     /* [n_out][n_in / group] scale of each group, or NULL */
	uint32_t group;          /* weights per group (a multiple of 128), 0: one scale a row */
	uint32_t n_in, n_out;
	uint32_t row_bytes;      /* bn_t2_row_bytes(n_in) */
};

/* The same weights in the T3 layout (bn_blocks.h), a second copy for decode steps. */
struct bn_t3_matrix {
	const uint8_t *codes;    /* [n_out][row_bytes] */
	const float *scale;      /* [n_out], the T2 matrix's */
	uint32_t n_in, n_out;
	uint32_t row_bytes;      /* bn_t3_row_bytes(n_in) */
};

/* Int8 activations, one row per token: x ≈ xq * inv_scale. */
struct bn_q8_rows {
	int8_t *q;               /* [n][k_pad], zero past k; 64-byte aligned rows */
	float *inv_scale;        /* [n] absmax / 127 (0 for an all-zero row) */
	int32_t *sum;            /* [n] sum of q over the row */
	int32_t *bsum;           /* [n][bn_q8_blocks(k_pad)] sum of q over each 128-weight
				  * block (bn_q8_block_sums), for t2g_gemm; NULL where no
				  * grouped matrix reads these rows */
	uint32_t k, k_pad;       /* k_pad: bn_q8_k_pad(k), whole T2 and T3 chunks */
};

/* Blocks of a row of k_pad activations: x->bsum's row stride. */
static inline uint32_t bn_q8_blocks(uint32_t k_pad)
{
	return (k_pad + BN_T2_GROUP_BLOCK - 1) / BN_T2_GROUP_BLOCK;
}
/* x->bsum of rows [0, n) from their q (exact integer sums: any variant may call it). */
void bn_q8_block_sums(struct bn_q8_rows *x, uint32_t n);

/* Where attention finds the cached keys and values of one KV head: position t is row
 * t % block_tokens of block blocks[t / block_tokens], and a block starts block_stride floats
 * after the previous id's. Without a table (blocks NULL) the blocks are consecutive:
 * position t is at t * ld. K and V point at this head's first row of block id 0. Attention
 * over L positions reads positions first .. first + L - 1 (first > 0: a sliding window). */
struct bn_kv_view {
	const float *K, *V;
	const uint32_t *blocks;  /* NULL: contiguous */
	uint32_t block_tokens;
	uint32_t ld;             /* floats between consecutive positions within a block */
	size_t block_stride;     /* floats between block ids */
	uint32_t first;          /* the first position attended */
};

/* First row of the view's b-th block (of K or V: base says which). */
static inline const float *bn_kv_block(const struct bn_kv_view *v, const float *base, uint32_t b)
{
	if (!v->blocks)
		return base + (size_t)b * v->block_tokens * v->ld;
	return base + (size_t)v->blocks[b] * v->block_stride;
}

/* The view's positions from index t of an attention over L (position first + t): the address
 * of the first (of K or V: base says which) and, in *n, how many follow it in the same
 * block, at most L - t. Kernels walk a view so, whatever its first position. */
static inline const float *bn_kv_rows(const struct bn_kv_view *v, const float *base, uint32_t t,
				      uint32_t L, uint32_t *n)
{
	uint32_t p = v->first + t, r = p % v->block_tokens;
	*n = v->block_tokens - r < L - t ? v->block_tokens - r : L - t;
	return bn_kv_block(v, base, p / v->block_tokens) + (size_t)r * v->ld;
}

/* A float-typed matrix (F32, F16 or BF16 values) in one of two layouts:
 *  - rows (panel_rows 0): row-major, row o's n_in values at data + o * row_bytes;
 *  - panels (panel_rows BN_F_PANEL_ROWS): the rows in groups of 64, each group stored
 *    input-major as [n_in][64] values, groups back to back, the last one padded with zero
 *    rows (bn_f_panel_bytes). The 64 weights one input meets are then one contiguous vector,
 *    so a kernel can keep a tile of (rows x batch rows) sums in registers and read each weight
 *    once per batch tile and each activation as a broadcast: the model's float matrices are
 *    repacked this way at load (model.c). row_bytes is unused there. */
#define BN_F_PANEL_ROWS 64
struct bn_f_matrix {
	const void *data;
	uint32_t type;           /* BN_TYPE_F32, BN_TYPE_F16 or BN_TYPE_BF16 */
	uint32_t n_in, n_out;
	uint64_t row_bytes;
	uint32_t panel_rows;     /* 0 or BN_F_PANEL_ROWS */
};

/* Bytes of a matrix in the panel layout (whole groups of BN_F_PANEL_ROWS rows). */
uint64_t bn_f_panel_bytes(uint32_t type, uint32_t n_in, uint32_t n_out);
/* Packs n_rows <= BN_F_PANEL_ROWS row-major rows (row_bytes apart) into one group of the
 * panel layout at `panel`, zero rows after them. */
void bn_f_pack_panel(uint32_t type, const void *rows, uint64_t row_bytes, uint32_t n_in,
		     uint32_t n_rows, void *panel);
/* Weight (o, k) of a float matrix in either layout, and row o as floats [n_in]. */
float bn_f_weight(const struct bn_f_matrix *w, uint32_t o, uint32_t k);
void bn_f_row(const struct bn_f_matrix *w, uint32_t o, float *out);

/* An int8 copy of a float matrix (daemon/model/head_screen.h): n_out rows of row_bytes int8 values
 * (n_in of them, then zeros up to a multiple of BN_I8_ROW_ALIGN), row o standing for
 * scale[o] * q[o]. row_sum[o] = sum_k q[o][k], which lets a kernel feed the activations to
 * an unsigned-times-signed instruction as x + 128 and take 128 * row_sum back out. */
#define BN_I8_ROW_ALIGN 64
struct bn_i8_matrix {
	const int8_t *q;         /* [n_out][row_bytes], 64-byte aligned rows */
	const float *scale;      /* [n_out] */
	const int32_t *row_sum;  /* [n_out] */
	uint32_t n_in, n_out;
	uint32_t row_bytes;
};

/* The largest |x| an i8_dots activation may hold for rows of row_bytes: each 32-bit lane of
 * the widest variant (AVX2: 8 lanes; NEON's sums are two registers of 4 lanes) then sums at
 * most row_bytes / 8 products of |w| <= 127 and |x| <= this without overflow, so the sums are
 * exact in every variant. 16383 for rows of up to 8448 inputs. */
static inline int32_t bn_i8_dot_x_max(uint32_t row_bytes)
{
	int64_t per_lane = (row_bytes + 7) / 8;
	int64_t limit = (int64_t)INT32_MAX / (127 * (per_lane ? per_lane : 1));
	return limit < 16383 ? (int32_t)limit : 16383;
}

struct bn_kernels {
	const char *name;        /* one of bn_kernel_variant_names */
	/* y[b*ldy + o] for o in [o0, o1), b in [0, n_b):
	 *     ((float)(sum_k code(o,k) * q[b][k] - sum[b]) * scale[o]) * inv_scale[b]
	 * (code(o,k) - 1 is the weight: subtracting sum[b] once undoes the +1 offset). */
	void (*t2_gemm)(const struct bn_t2_matrix *w, uint32_t o0, uint32_t o1,
			const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy);
	/* The grouped ternary product (w->gscale, w->group G; x->bsum filled): for each output,
	 * with n_groups = n_in / G and group g the weights [gG, gG + G),
	 *     a_g = sum_{k in g} code(o,k) * q[b][k] - sum of x->bsum[b] over g's blocks
	 *     s = 0.0f; for g = 0, 1, ... n_groups - 1: s = fmaf((float)a_g, gscale[o][g], s)
	 *     y[b*ldy + o] = s * inv_scale[b]
	 * Each a_g is an exact integer (|a_g| <= 128 G, exact as a float), the chain of fused
	 * multiply-adds runs in g order and the last product is one rounding, so every variant
	 * gives the same bits, whatever the batch or the row range. */
	void (*t2g_gemm)(const struct bn_t2_matrix *w, uint32_t o0, uint32_t o1,
			 const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy);
	/* y[b*ldy + o] = sum_k w[o][k] * x[b*ldx + k], for o in [o0, o1), b in [0, n_b). In the
	 * panel layout every variant computes each sum as one chain of fused multiply-adds over
	 * k = 0, 1, ... n_in - 1 from 0 (fmaf in the scalar variant), so all variants give the
	 * same bits, whatever the batch or the row range. */
	void (*f_gemm)(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1, const float *x,
		       uint32_t ldx, uint32_t n_b, float *y, uint32_t ldy);
	/* Attention of one query vector q[d] over L positions of kv from kv->first:
	 * s[t] = scale * q.K[t]; then out[d] = sum_t p[t] V[t] with p = softmax(s), t in order.
	 * s is scratch of L floats. Summation order depends on d and L only (not on the blocks
	 * or the first position); on aarch64 every variant's is the scalar kernel's (common_neon.c
	 * says why). */
	void (*attend)(const float *q, const struct bn_kv_view *kv, uint32_t L, uint32_t d,
		       float scale, float *s, float *out);
	/* attend for n_heads query vectors that share one KV head (grouped-query attention):
	 * q and out hold n_heads vectors of d floats back to back, s is scratch of n_heads * L.
	 * Each head's output is attend's for that head alone, to the bit; a variant may read
	 * each cached row once for all the heads. */
	void (*attend_heads)(const float *q, uint32_t n_heads, const struct bn_kv_view *kv,
			     uint32_t L, uint32_t d, float scale, float *s, float *out);
	/* y[b*ldy + o - o0] = sum_k w.q[o][k] * x[b*ldx + k] exactly, for o in [o0, o1), b in
	 * [0, n_b): int16 activations with |x| <= bn_i8_dot_x_max(w->row_bytes), zero past
	 * n_in up to row_bytes. Integer sums: every variant gives the same values. */
	void (*i8_dots)(const struct bn_i8_matrix *w, uint32_t o0, uint32_t o1, const int16_t *x,
			uint32_t ldx, uint32_t n_b, int64_t *y, uint32_t ldy);
	/* The int8 LM head (--lm-head int8): y[b*ldy + o] for o in [o0, o1), b in [0, n_b):
	 *     ((float)(sum_k w.q[o][k] * x.q[b][k]) * w.scale[o]) * x.inv_scale[b]
	 * with the integer sum exact (64-bit; in the variants' 32-bit lanes it cannot overflow
	 * for rows of up to 2^20 inputs) and converted to float once, so every variant gives the
	 * same bits whatever the batch or the row range. x.k_pad >= w.row_bytes. */
	void (*i8_gemm)(const struct bn_i8_matrix *w, uint32_t o0, uint32_t o1,
			const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy);
	/* bn_quantize_rows (below), to the bit: the same float operations on every element, and
	 * absmax and the integer sum do not depend on their order. */
	void (*quantize_rows)(const float *x, uint32_t ldx, uint32_t n, struct bn_q8_rows *out);
	/* bn_rmsnorm, bn_relu2_mul and bn_add (below), to the bit: the same float operations on
	 * every element, and the sum of squares in the same lanes, added in the same order. */
	void (*rmsnorm)(float *out, const float *x, const float *w, uint32_t n, float eps);
	void (*relu2_mul)(float *g, const float *u, uint32_t n);
	void (*add)(float *x, const float *y, uint32_t n);
	/* XXH3-64 (xxHash's, seed 0) of n bytes: the weights cache's checksums. Every variant
	 * gives the library's value (the algorithm fixes it); the wider ones hash at the speed of
	 * memory, where the library as Debian builds it (SSE2) does about a third of that. */
	uint64_t (*hash64)(const void *p, size_t n);
};

/* t2_gemm's result for the same weights in the T3 layout, to the bit (the same integer sum,
 * the same two float products), for any batch. x->k_pad must hold whole T3 chunks (>=
 * row_bytes / 64 * 320), zero past k. Decoding base 3 costs more instructions than the 2-bit
 * planes, so the layout pays only where a step's time is the time of reading the weights:
 * the forward pass reads it in one-row decode steps (forward.c says what was measured). */
typedef void (*bn_t3_gemm_fn)(const struct bn_t3_matrix *w, uint32_t o0, uint32_t o1,
			      const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy);
/* The T3 kernel for a kernel table on this CPU, or NULL. On x86-64 it needs AVX-512 VBMI, whose byte
 * permutes decode five base-3 digits at the speed of memory (kernels_vbmi.c). Without them
 * the decoding costs more than the bytes it saves: AVX2 has no byte permute across 256
 * entries, and digit arithmetic (per digit a byte multiply by 3 and a high part; about 48
 * instructions per 160 weights against 20 per 128 for the 2-bit planes, by our count) would
 * make a kernel compute-bound where the 2-bit AVX2 kernel already is: on the 2-core test VM
 * it read 42.7 GB/s at batch 1 with the bandwidth probe at 48, and 42.8 with it at 85,
 * where the AVX-512 kernel read 66 (bench-model's t2_gemv_gbs, 2026-11-26). On aarch64 the
 * dotprod and i8mm tables have one (below): a Raspberry Pi 5's four cores share about 9 GB/s,
 * where the bytes saved may pay for the digits' arithmetic. */
bn_t3_gemm_fn bn_t3_kernel(const struct bn_kernels *k);
/* What a T3 kernel needs on this architecture, for messages. */
#if defined(__aarch64__)
#define BN_T3_NEEDS "dotprod"
#else
#define BN_T3_NEEDS "AVX-512 VBMI"
#endif
#if defined(__aarch64__)
/* The T3 kernel of the dotprod and i8mm tables (kernels_neon.c): the digits taken apart by
 * arithmetic (a multiply-high divides by 3; about 20 instructions per 80 weights against 7 per
 * 64 for the 2-bit planes), then sdot. Whether the bytes saved pay for that depends on the
 * machine's bandwidth per core: bench-model's t3 figures measure it (docs/PERFORMANCE.md). */
void bn_t3_gemm_dotprod(const struct bn_t3_matrix *w, uint32_t o0, uint32_t o1,
			const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy);
#else
void bn_t3_gemm_vbmi(const struct bn_t3_matrix *w, uint32_t o0, uint32_t o1,
		     const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy);
#endif
/* The readable twin every T3 kernel is tested against (never picked by bn_t3_kernel: it
 * decodes digit by digit). */
void bn_t3_gemm_scalar(const struct bn_t3_matrix *w, uint32_t o0, uint32_t o1,
		       const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy);

/* What this CPU can run. */
struct bn_cpu_features {
#if defined(__aarch64__)
	int neon;                /* Advanced SIMD (HWCAP_ASIMD): every AArch64 CPU Linux runs on */
	int dotprod;             /* neon and sdot/udot (ARMv8.2 FEAT_DotProd, HWCAP_ASIMDDP) */
	int i8mm;                /* dotprod and smmla/usmmla (ARMv8.6 FEAT_I8MM, HWCAP2_I8MM) */
#else
	int avx2_fma_f16c;
	int avx512_vnni;         /* avx512f + bw + vl + dq + vnni */
	int avx512_vbmi;         /* avx512_vnni and vbmi */
	int avx_vnni;            /* avx2_fma_f16c and AVX-VNNI (vpdpbusd in VEX form) */
#endif
};
void bn_cpu_detect(struct bn_cpu_features *f);

/* The variants bn_kernels_select knows on this architecture, the scalar one first, then each
 * SIMD one in the order of the CPUs that have it ("scalar", "avx2", "avxvnni", "avx512vnni" on
 * x86-64; "scalar", "neon", "dotprod", "i8mm" on aarch64). */
#define BN_KERNEL_VARIANTS 4
extern const char *const bn_kernel_variant_names[BN_KERNEL_VARIANTS];

/* The best table for this CPU; `force` = one of bn_kernel_variant_names picks one (NULL if this
 * CPU cannot run it), NULL picks the best. $BITNET_KERNELS overrides when force is NULL. */
const struct bn_kernels *bn_kernels_select(const char *force);

extern const struct bn_kernels bn_kernels_scalar;
#if defined(__aarch64__)
/* Advanced SIMD of ARMv8.0 (Raspberry Pi 4, Cortex-A72): products by smull/smlal. */
extern const struct bn_kernels bn_kernels_neon;
/* The same source with sdot for the int8 products (Raspberry Pi 5, Jetson Orin, Graviton 2,
 * Ampere Altra): the same bits, fewer instructions. */
extern const struct bn_kernels bn_kernels_dotprod;
/* dotprod's, with smmla (2x2 blocks of 8-long products) for batches of two rows or more
 * (Graviton 3 and 4, Grace, Cobalt 100). */
extern const struct bn_kernels bn_kernels_i8mm;
#else
extern const struct bn_kernels bn_kernels_avx2;
/* The AVX2 kernels with AVX-VNNI's vpdpbusd/vpdpwssd for their integer products (the same
 * source, kernels_avxvnni.c): the same bits, fewer instructions. */
extern const struct bn_kernels bn_kernels_avxvnni;
extern const struct bn_kernels bn_kernels_avx512;
#endif

/* Per-token int8 quantization of n rows of k floats (x row stride ldx): absmax scaling to
 * 127, round half to even, as BitNet b1.58 quantizes activations. NaN elements are left out of
 * the absmax and become 0. The scalar definition; each kernel variant's quantize_rows gives
 * the same bytes. */
void bn_quantize_rows(const float *x, uint32_t ldx, uint32_t n, struct bn_q8_rows *out);

/* Lanes of bn_rmsnorm's sum of squares. */
#define BN_RMSNORM_LANES 16
/* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i] (out may be x), as (x[i] * inv) * w[i] with
 * inv = 1 / sqrtf(ss / n + eps). The sum of squares ss runs over 16 interleaved lanes (x[i]
 * into lane i % 16) that are then added in lane order: that order is part of the definition,
 * shared by the fast forward pass and the reference, and fixed by n alone, so a token's norm
 * does not depend on its batch. The scalar definition. */
void bn_rmsnorm(float *out, const float *x, const float *w, uint32_t n, float eps);
/* g[i] = (r * r) * u[i] with r = g[i] where g[i] > 0, else 0 (NaN too): ReLU² gating. */
void bn_relu2_mul(float *g, const float *u, uint32_t n);
/* x[i] += y[i]. */
void bn_add(float *x, const float *y, uint32_t n);

/* attend_heads as one attend call per head. */
static inline void bn_attend_each_head(void (*attend)(const float *, const struct bn_kv_view *,
						      uint32_t, uint32_t, float, float *, float *),
				       const float *q, uint32_t n_heads, const struct bn_kv_view *kv,
				       uint32_t L, uint32_t d, float scale, float *s, float *out)
{
	for (uint32_t h = 0; h < n_heads; h++)
		attend(q + (size_t)h * d, kv, L, d, scale, s + (size_t)h * L, out + (size_t)h * d);
}

/* In-place softmax of n scores (shared by every variant: expf is the costly part). */
void bn_softmax(float *s, uint32_t n);

#endif /* BITNET_KERNELS_H */
