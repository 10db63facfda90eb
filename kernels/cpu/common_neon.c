/* SPDX-License-Identifier: MIT */
/*
 * common_neon.c — the aarch64 kernels every table shares (kernels_neon.h): float weights in the
 * row and panel layouts, attention, quantization of activations, the element-wise parts of a
 * layer, the int16 dots of the head screen and the hash. ARMv8.0 Advanced SIMD has all they
 * need; dotprod and i8mm add only int8 products (kernels_neon.c).
 *
 * Where kernels.h defines the bits (the panel layout's fused chains, quantization, the norms'
 * lanes) these give the scalar definitions' bits: the build's -ffp-contract=off keeps every
 * product and sum that the definitions round apart from being fused, and the fused
 * multiply-adds here are written as such (vfmaq). Elsewhere (the row layout, attention) the
 * order of a sum is this file's own, fixed by the shapes alone, so that a row's result never
 * depends on the batch, the rows computed with it, or the blocks of the cache.
 */
#include "kernels.h"
#include "kernels_neon.h"
#include "quant.h"

#include <arm_neon.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Float weights                                                                               */
/* ------------------------------------------------------------------------------------------ */

/* Four weights of a row (or panel) from value k, as floats: F16 by fcvtl, BF16 by a shift. */
static ALWAYS_INLINE float32x4_t f_load4(const void *row, size_t k, const uint32_t type)
{
	if (type == BN_TYPE_F16)
		return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)row + k)));
	if (type == BN_TYPE_BF16)
		return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)row + k), 16));
	return vld1q_f32((const float *)row + k);
}

static float f_one(const void *row, uint32_t k, uint32_t type)
{
	if (type == BN_TYPE_F16)
		return bn_half_to_float(((const uint16_t *)row)[k]);
	if (type == BN_TYPE_BF16)
		return bn_bf16_to_float(((const uint16_t *)row)[k]);
	return ((const float *)row)[k];
}

/* The row layout: tiles of F_ROWS weight rows x F_COLS batch rows, each sum a chain of fused
 * multiply-adds over four lanes (k % 4), the lanes added pairwise (faddp), then the tail in
 * order. Each sum is its own chain: a tile's shape changes no bit of it. */
#define F_ROWS 4
#define F_COLS 4

static ALWAYS_INLINE void f_tile(const struct bn_f_matrix *w, uint32_t o, uint32_t n_rows,
				 const float *x, uint32_t ldx, uint32_t b0, const uint32_t n_cols,
				 float *y, uint32_t ldy, const uint32_t type)
{
	const uint8_t *row[F_ROWS];
	for (uint32_t r = 0; r < F_ROWS; r++) /* rows past the end compute row o again, unused */
		row[r] = (const uint8_t *)w->data + (size_t)(o + (r < n_rows ? r : 0)) * w->row_bytes;
	float32x4_t acc[F_ROWS][F_COLS];
	for (uint32_t r = 0; r < F_ROWS; r++)
		for (uint32_t b = 0; b < n_cols; b++)
			acc[r][b] = vdupq_n_f32(0.0f);
	uint32_t k_vec = w->n_in / 4 * 4;
	for (uint32_t k = 0; k < k_vec; k += 4)
		for (uint32_t r = 0; r < F_ROWS; r++) {
			float32x4_t wv = f_load4(row[r], k, type);
			for (uint32_t b = 0; b < n_cols; b++)
				acc[r][b] = vfmaq_f32(acc[r][b], wv,
						      vld1q_f32(x + (size_t)(b0 + b) * ldx + k));
		}
	for (uint32_t r = 0; r < n_rows; r++)
		for (uint32_t b = 0; b < n_cols; b++) {
			float s = vaddvq_f32(acc[r][b]);
			for (uint32_t k = k_vec; k < w->n_in; k++) /* the tail, after, in order */
				s += f_one(row[r], k, type) * x[(size_t)(b0 + b) * ldx + k];
			y[(size_t)(b0 + b) * ldy + o + r] = s;
		}
}

static ALWAYS_INLINE void f_gemm_rows(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1,
				      const float *x, uint32_t ldx, uint32_t n_b, float *y,
				      uint32_t ldy, const uint32_t type)
{
	for (uint32_t o = o0; o < o1; o += F_ROWS) {
		uint32_t n_rows = o1 - o < F_ROWS ? o1 - o : F_ROWS;
		uint32_t b = 0;
		for (; b + F_COLS <= n_b; b += F_COLS)
			f_tile(w, o, n_rows, x, ldx, b, F_COLS, y, ldy, type);
		for (; b < n_b; b++)
			f_tile(w, o, n_rows, x, ldx, b, 1, y, ldy, type);
	}
}

/* The panel layout (kernels.h): n_vecs vectors of 4 rows from row `part` of a group against
 * n_cols batch rows, each sum one fused multiply-add chain over k in order from 0, so the bits
 * are the scalar variant's (fmaf). Sixteen sums in registers: the whole group (16 vectors) for
 * one batch row, half of it for two, a quarter for four; each activation is loaded once for
 * four k and taken by lane (fmla by element), each weight vector once per tile. */
#define P_SUMS 16

/* acc[b][v] += group's vector v at input k times lane `lane` of xv[b]. */
#define P_STEP(lane)                                                                      \
	for (uint32_t v = 0; v < n_vecs; v++) {                                           \
		float32x4_t wv = f_load4(group, (size_t)(k + lane) * BN_F_PANEL_ROWS + part + 4 * v, \
					 type);                                           \
		for (uint32_t b = 0; b < n_cols; b++)                                     \
			acc[b][v] = vfmaq_laneq_f32(acc[b][v], wv, xv[b], lane);          \
	}

static ALWAYS_INLINE void p_tile(const void *group, uint32_t n_in, uint32_t part,
				 const uint32_t n_vecs, const float *x, uint32_t ldx,
				 const uint32_t n_cols, float *y, uint32_t ldy, uint32_t first,
				 uint32_t r0, uint32_t r1, const uint32_t type)
{
	float32x4_t acc[4][P_SUMS];
	for (uint32_t b = 0; b < n_cols; b++)
		for (uint32_t v = 0; v < n_vecs; v++)
			acc[b][v] = vdupq_n_f32(0.0f);
	uint32_t k = 0;
	for (; k + 4 <= n_in; k += 4) {
		float32x4_t xv[4];
		for (uint32_t b = 0; b < n_cols; b++)
			xv[b] = vld1q_f32(x + (size_t)b * ldx + k);
		P_STEP(0)
		P_STEP(1)
		P_STEP(2)
		P_STEP(3)
	}
	for (; k < n_in; k++)
		for (uint32_t v = 0; v < n_vecs; v++) {
			float32x4_t wv = f_load4(group, (size_t)k * BN_F_PANEL_ROWS + part + 4 * v, type);
			for (uint32_t b = 0; b < n_cols; b++)
				acc[b][v] = vfmaq_f32(acc[b][v], wv, vdupq_n_f32(x[(size_t)b * ldx + k]));
		}
	for (uint32_t b = 0; b < n_cols; b++)
		for (uint32_t v = 0; v < n_vecs; v++) {
			uint32_t o = first + part + 4 * v;
			float *out = y + (size_t)b * ldy;
			if (o >= r0 && o + 4 <= r1) {
				vst1q_f32(out + o, acc[b][v]);
				continue;
			}
			float lanes[4];
			vst1q_f32(lanes, acc[b][v]);
			for (uint32_t i = 0; i < 4; i++)
				if (o + i >= r0 && o + i < r1)
					out[o + i] = lanes[i];
		}
}
#undef P_STEP

/* The tiles of one group for batch rows [b, b + n_cols): parts of BN_F_PANEL_ROWS / n_parts
 * rows, those outside [r0, r1) skipped. */
static ALWAYS_INLINE void p_group(const void *group, uint32_t n_in, const float *x, uint32_t ldx,
				  const uint32_t n_cols, float *y, uint32_t ldy, uint32_t first,
				  uint32_t r0, uint32_t r1, const uint32_t type)
{
	const uint32_t rows = BN_F_PANEL_ROWS / n_cols, n_vecs = rows / 4;
	for (uint32_t part = 0; part < BN_F_PANEL_ROWS; part += rows)
		if (first + part < r1 && first + part + rows > r0)
			p_tile(group, n_in, part, n_vecs, x, ldx, n_cols, y, ldy, first, r0, r1, type);
}

static ALWAYS_INLINE void f_gemm_panels(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1,
					const float *x, uint32_t ldx, uint32_t n_b, float *y,
					uint32_t ldy, const uint32_t type)
{
	const size_t group_values = (size_t)BN_F_PANEL_ROWS * w->n_in;
	const size_t value_bytes = type == BN_TYPE_F32 ? 4 : 2;
	for (uint32_t g = o0 / BN_F_PANEL_ROWS; g * BN_F_PANEL_ROWS < o1; g++) {
		const char *group = (const char *)w->data + g * group_values * value_bytes;
		uint32_t first = g * BN_F_PANEL_ROWS;
		uint32_t r0 = o0 > first ? o0 : first;
		uint32_t r1 = o1 < first + BN_F_PANEL_ROWS ? o1 : first + BN_F_PANEL_ROWS;
		uint32_t b = 0;
		for (; b + 4 <= n_b; b += 4)
			p_group(group, w->n_in, x + (size_t)b * ldx, ldx, 4, y + (size_t)b * ldy, ldy,
				first, r0, r1, type);
		if (b + 2 <= n_b) {
			p_group(group, w->n_in, x + (size_t)b * ldx, ldx, 2, y + (size_t)b * ldy, ldy,
				first, r0, r1, type);
			b += 2;
		}
		if (b < n_b)
			p_group(group, w->n_in, x + (size_t)b * ldx, ldx, 1, y + (size_t)b * ldy, ldy,
				first, r0, r1, type);
	}
}

/* One float type in either layout (the type a constant, so each loop is compiled for it). */
static ALWAYS_INLINE void f_gemm_of_type(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1,
					 const float *x, uint32_t ldx, uint32_t n_b, float *y,
					 uint32_t ldy, const uint32_t type)
{
	if (w->panel_rows)
		f_gemm_panels(w, o0, o1, x, ldx, n_b, y, ldy, type);
	else
		f_gemm_rows(w, o0, o1, x, ldx, n_b, y, ldy, type);
}

void bn_neon_f_gemm(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1, const float *x,
		    uint32_t ldx, uint32_t n_b, float *y, uint32_t ldy)
{
	if (o0 >= o1 || n_b == 0)
		return;
	switch (w->type) {
	case BN_TYPE_F16:
		f_gemm_of_type(w, o0, o1, x, ldx, n_b, y, ldy, BN_TYPE_F16);
		break;
	case BN_TYPE_BF16:
		f_gemm_of_type(w, o0, o1, x, ldx, n_b, y, ldy, BN_TYPE_BF16);
		break;
	default:
		f_gemm_of_type(w, o0, o1, x, ldx, n_b, y, ldy, BN_TYPE_F32);
		break;
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Attention                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* Query heads that share one KV head (one head: attend), to the scalar attend's bits: each
 * score is its chain (for each input j in order, the product q[j] * K[t][j] rounded, then
 * added; then the scale), each output element its chain over the rows in order (p * V[t][j]
 * rounded, then added), and the softmax is bn_softmax. The lanes hold four cached rows' scores
 * side by side (each 4x4 block of K transposed: row t's input j in lane t), or four adjacent
 * output elements. Bit-identical to the scalar kernel rather than a fused order of its own:
 * a BitNet forward pass rounds activations to int8, and a score a few ulps off moves a
 * rounding now and then, which a small random model (tests/test_forward.c's tiny presets)
 * carries into logits that differ from the reference by more than float noise. Two groups of
 * four rows keep eight chains going for each head, each transposed block serving every head;
 * the output is made a few vectors at a time so that its sums stay in registers. */
#define ATTEND_GROUPS 2  /* groups of 4 cached rows whose scores are computed together */
#define ATTEND_SUMS 24   /* output sums kept in registers */

/* Input j's values of rows k, k + ld, k + 2 ld, k + 3 ld, for j = j0 .. j0 + 3: c[j - j0]. */
static ALWAYS_INLINE void k_columns(const float *k, uint32_t ld, uint32_t j0, float32x4_t c[4])
{
	float32x4_t r0 = vld1q_f32(k + j0), r1 = vld1q_f32(k + ld + j0);
	float32x4_t r2 = vld1q_f32(k + 2 * (size_t)ld + j0), r3 = vld1q_f32(k + 3 * (size_t)ld + j0);
	float64x2_t t0 = vreinterpretq_f64_f32(vtrn1q_f32(r0, r1));
	float64x2_t t1 = vreinterpretq_f64_f32(vtrn2q_f32(r0, r1));
	float64x2_t t2 = vreinterpretq_f64_f32(vtrn1q_f32(r2, r3));
	float64x2_t t3 = vreinterpretq_f64_f32(vtrn2q_f32(r2, r3));
	c[0] = vreinterpretq_f32_f64(vtrn1q_f64(t0, t2));
	c[1] = vreinterpretq_f32_f64(vtrn1q_f64(t1, t3));
	c[2] = vreinterpretq_f32_f64(vtrn2q_f64(t0, t2));
	c[3] = vreinterpretq_f32_f64(vtrn2q_f64(t1, t3));
}

/* acc += c[i] * q[j0 + i] for i = 0..3, each product rounded before it is added. */
static ALWAYS_INLINE float32x4_t chain4(float32x4_t acc, const float32x4_t c[4], float32x4_t qv)
{
	acc = vaddq_f32(acc, vmulq_laneq_f32(c[0], qv, 0));
	acc = vaddq_f32(acc, vmulq_laneq_f32(c[1], qv, 1));
	acc = vaddq_f32(acc, vmulq_laneq_f32(c[2], qv, 2));
	return vaddq_f32(acc, vmulq_laneq_f32(c[3], qv, 3));
}

/* Scores of n_g * 4 consecutive cached rows from k for every head. */
static ALWAYS_INLINE void rows_scores(const float *q, const uint32_t n_h, const uint32_t n_vec,
				      const float *k, uint32_t ld, const uint32_t n_g, float scale,
				      float *s, uint32_t L)
{
	float32x4_t acc[ATTEND_GROUPS][8];
	for (uint32_t g = 0; g < n_g; g++)
		for (uint32_t h = 0; h < n_h; h++)
			acc[g][h] = vdupq_n_f32(0.0f);
	for (uint32_t v = 0; v < n_vec; v++) {
		float32x4_t c[ATTEND_GROUPS][4];
		for (uint32_t g = 0; g < n_g; g++)
			k_columns(k + (size_t)4 * g * ld, ld, 4 * v, c[g]);
		for (uint32_t h = 0; h < n_h; h++) {
			float32x4_t qv = vld1q_f32(q + (size_t)h * n_vec * 4 + 4 * v);
			for (uint32_t g = 0; g < n_g; g++)
				acc[g][h] = chain4(acc[g][h], c[g], qv);
		}
	}
	for (uint32_t h = 0; h < n_h; h++)
		for (uint32_t g = 0; g < n_g; g++)
			vst1q_f32(s + (size_t)h * L + 4 * g, vmulq_n_f32(acc[g][h], scale));
}

/* One cached row's score for every head, as the scalar kernel writes it. */
static void row_score(const float *q, uint32_t n_h, uint32_t d, const float *k, float scale,
		      float *s, uint32_t L)
{
	for (uint32_t h = 0; h < n_h; h++) {
		float dot = 0.0f;
		for (uint32_t j = 0; j < d; j++)
			dot += q[(size_t)h * d + j] * k[j];
		s[(size_t)h * L] = dot * scale;
	}
}

static ALWAYS_INLINE void heads_scores(const float *q, const uint32_t n_h, const uint32_t n_vec,
				       const struct bn_kv_view *kv, uint32_t L, float scale, float *s)
{
	uint32_t rows;
	for (uint32_t t0 = 0; t0 < L; t0 += rows) {
		const float *K = bn_kv_rows(kv, kv->K, t0, L, &rows);
		uint32_t i = 0;
		for (; i + 4 * ATTEND_GROUPS <= rows; i += 4 * ATTEND_GROUPS)
			rows_scores(q, n_h, n_vec, K + (size_t)i * kv->ld, kv->ld, ATTEND_GROUPS,
				    scale, s + t0 + i, L);
		for (; i + 4 <= rows; i += 4)
			rows_scores(q, n_h, n_vec, K + (size_t)i * kv->ld, kv->ld, 1, scale,
				    s + t0 + i, L);
		for (; i < rows; i++)
			row_score(q, n_h, n_vec * 4, K + (size_t)i * kv->ld, scale, s + t0 + i, L);
	}
}

/* out for vectors [v0, v0 + n_cv) of every head: n_h * n_cv <= ATTEND_SUMS sums. */
static ALWAYS_INLINE void heads_values(const uint32_t n_h, const uint32_t n_vec, uint32_t v0,
				       const uint32_t n_cv, const struct bn_kv_view *kv, uint32_t L,
				       const float *s, float *out)
{
	float32x4_t o[ATTEND_SUMS];
	for (uint32_t a = 0; a < n_h * n_cv; a++)
		o[a] = vdupq_n_f32(0.0f);
	uint32_t rows;
	for (uint32_t t0 = 0; t0 < L; t0 += rows) {
		const float *V = bn_kv_rows(kv, kv->V, t0, L, &rows);
		for (uint32_t i = 0; i < rows; i++) {
			const float *vt = V + (size_t)i * kv->ld + 4 * v0;
			for (uint32_t h = 0; h < n_h; h++) {
				float p = s[(size_t)h * L + t0 + i];
				for (uint32_t c = 0; c < n_cv; c++)
					o[h * n_cv + c] = vaddq_f32(o[h * n_cv + c],
								    vmulq_n_f32(vld1q_f32(vt + 4 * c), p));
			}
		}
	}
	for (uint32_t h = 0; h < n_h; h++)
		for (uint32_t c = 0; c < n_cv; c++)
			vst1q_f32(out + (size_t)h * n_vec * 4 + 4 * (v0 + c), o[h * n_cv + c]);
}

static ALWAYS_INLINE void heads_fixed(const float *q, const uint32_t n_h, const uint32_t n_vec,
				      const struct bn_kv_view *kv, uint32_t L, float scale,
				      float *s, float *out)
{
	/* constants where n_h and n_vec are: the sums of a pass stay in registers */
	const uint32_t per_pass = ATTEND_SUMS / n_h < n_vec ? ATTEND_SUMS / n_h : n_vec;
	const uint32_t last = n_vec % per_pass;
	heads_scores(q, n_h, n_vec, kv, L, scale, s);
	for (uint32_t h = 0; h < n_h; h++)
		bn_softmax(s + (size_t)h * L, L);
	uint32_t v0 = 0;
	for (; v0 + per_pass <= n_vec; v0 += per_pass)
		heads_values(n_h, n_vec, v0, per_pass, kv, L, s, out);
	if (last)
		heads_values(n_h, n_vec, v0, last, kv, L, s, out);
}

/* Any head dim of whole vectors, one head: the loops' counts at run time. */
static void attend_any(const float *q, const struct bn_kv_view *kv, uint32_t L, uint32_t d,
		       float scale, float *s, float *out)
{
	heads_fixed(q, 1, d / 4, kv, L, scale, s, out);
}

void bn_neon_attend(const float *q, const struct bn_kv_view *kv, uint32_t L, uint32_t d,
		    float scale, float *s, float *out)
{
	if (d % 4) {
		bn_kernels_scalar.attend(q, kv, L, d, scale, s, out);
		return;
	}
	if (d == 128)
		heads_fixed(q, 1, 32, kv, L, scale, s, out);
	else if (d == 64)
		heads_fixed(q, 1, 16, kv, L, scale, s, out);
	else
		attend_any(q, kv, L, d, scale, s, out);
}

/* Head dims of 64 and 128 with groups of 1, 2, 4 or 8 heads (the shapes of the models we
 * serve) with their counts fixed at compile time; anything else one attend per head. */
void bn_neon_attend_heads(const float *q, uint32_t n_heads, const struct bn_kv_view *kv,
			  uint32_t L, uint32_t d, float scale, float *s, float *out)
{
#define HEADS_CASE(n_vec)                                                                     \
	switch (n_heads) {                                                                    \
	case 1: heads_fixed(q, 1, n_vec, kv, L, scale, s, out); return;                       \
	case 2: heads_fixed(q, 2, n_vec, kv, L, scale, s, out); return;                       \
	case 4: heads_fixed(q, 4, n_vec, kv, L, scale, s, out); return;                       \
	case 8: heads_fixed(q, 8, n_vec, kv, L, scale, s, out); return;                       \
	default: break;                                                                       \
	}
	if (d == 128)
		HEADS_CASE(32)
	if (d == 64)
		HEADS_CASE(16)
#undef HEADS_CASE
	bn_attend_each_head(bn_neon_attend, q, n_heads, kv, L, d, scale, s, out);
}

/* ------------------------------------------------------------------------------------------ */
/* The head screen's int8 rows x int16 activations                                             */
/* ------------------------------------------------------------------------------------------ */

/* 16 weights widened per step, smlal into two registers of four 32-bit lanes per batch row:
 * lane l of the first takes inputs k with k % 8 == l, of the second k % 8 == 4 + l, so each
 * of the 8 lanes sums row_bytes / 8 products, the count bn_i8_dot_x_max assumes (one register
 * would sum twice that). Totalled in 64 bits. */
#define I8_COLS 8

static ALWAYS_INLINE void i8_row(const int8_t *row, uint32_t row_bytes, const int16_t *x,
				 uint32_t ldx, const uint32_t n_cols, int64_t *y, uint32_t ldy)
{
	int32x4_t lo[I8_COLS], hi[I8_COLS];
	for (uint32_t b = 0; b < n_cols; b++)
		lo[b] = hi[b] = vdupq_n_s32(0);
	for (uint32_t k = 0; k < row_bytes; k += 16) {
		int8x16_t wv = vld1q_s8(row + k);
		int16x8_t w0 = vmovl_s8(vget_low_s8(wv)), w1 = vmovl_high_s8(wv);
		for (uint32_t b = 0; b < n_cols; b++) {
			const int16_t *xb = x + (size_t)b * ldx + k;
			int16x8_t x0 = vld1q_s16(xb), x1 = vld1q_s16(xb + 8);
			lo[b] = vmlal_s16(lo[b], vget_low_s16(w0), vget_low_s16(x0));
			hi[b] = vmlal_high_s16(hi[b], w0, x0);
			lo[b] = vmlal_s16(lo[b], vget_low_s16(w1), vget_low_s16(x1));
			hi[b] = vmlal_high_s16(hi[b], w1, x1);
		}
	}
	for (uint32_t b = 0; b < n_cols; b++)
		y[(size_t)b * ldy] = vaddlvq_s32(lo[b]) + vaddlvq_s32(hi[b]);
}

/* row_bytes is a multiple of 64 (struct bn_i8_matrix). */
void bn_neon_i8_dots(const struct bn_i8_matrix *w, uint32_t o0, uint32_t o1, const int16_t *x,
		     uint32_t ldx, uint32_t n_b, int64_t *y, uint32_t ldy)
{
	for (uint32_t o = o0; o < o1; o++) {
		const int8_t *row = w->q + (size_t)o * w->row_bytes;
		for (uint32_t b = 0; b < n_b; b += I8_COLS) {
			const int16_t *xb = x + (size_t)b * ldx;
			int64_t *yb = y + (size_t)b * ldy + o - o0;
			switch (n_b - b < I8_COLS ? n_b - b : I8_COLS) { /* constant tile widths */
			case 8: i8_row(row, w->row_bytes, xb, ldx, 8, yb, ldy); break;
			case 7: i8_row(row, w->row_bytes, xb, ldx, 7, yb, ldy); break;
			case 6: i8_row(row, w->row_bytes, xb, ldx, 6, yb, ldy); break;
			case 5: i8_row(row, w->row_bytes, xb, ldx, 5, yb, ldy); break;
			case 4: i8_row(row, w->row_bytes, xb, ldx, 4, yb, ldy); break;
			case 3: i8_row(row, w->row_bytes, xb, ldx, 3, yb, ldy); break;
			case 2: i8_row(row, w->row_bytes, xb, ldx, 2, yb, ldy); break;
			default: i8_row(row, w->row_bytes, xb, ldx, 1, yb, ldy); break;
			}
		}
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Int8 quantization and the element-wise parts, to the scalar definitions' bits               */
/* ------------------------------------------------------------------------------------------ */

/* fmaxnm is fmaxf: a quiet NaN is left out of the maximum. Lanes add nothing order-dependent
 * (a maximum of absolute values is exact in any order). */
static float absmax_neon(const float *row, uint32_t k)
{
	float32x4_t m = vdupq_n_f32(0.0f);
	uint32_t i = 0;
	for (; i + 4 <= k; i += 4)
		m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(row + i)));
	float amax = vmaxnmvq_f32(m);
	for (; i < k; i++)
		amax = fmaxf(amax, fabsf(row[i]));
	return amax;
}

/* Four activations quantized as bn_quantize_rows does each: fcvtns rounds the product to
 * nearest even (nearbyintf under the default mode), makes NaN 0 and saturates; the
 * saturating narrows then clamp to [-128, 127]. */
static ALWAYS_INLINE int32x4_t quantize4(const float *p, float32x4_t s)
{
	return vcvtnq_s32_f32(vmulq_f32(vld1q_f32(p), s));
}

void bn_neon_quantize_rows(const float *x, uint32_t ldx, uint32_t n, struct bn_q8_rows *out)
{
	for (uint32_t r = 0; r < n; r++) {
		const float *row = x + (size_t)r * ldx;
		int8_t *q = out->q + (size_t)r * out->k_pad;
		float amax = absmax_neon(row, out->k);
		float sc = amax > 0.0f ? 127.0f / amax : 0.0f;
		const float32x4_t s = vdupq_n_f32(sc);
		int32x4_t sum = vdupq_n_s32(0);
		uint32_t k = 0;
		for (; k + 16 <= out->k; k += 16) {
			int16x8_t lo = vqmovn_high_s32(vqmovn_s32(quantize4(row + k, s)),
						       quantize4(row + k + 4, s));
			int16x8_t hi = vqmovn_high_s32(vqmovn_s32(quantize4(row + k + 8, s)),
						       quantize4(row + k + 12, s));
			int8x16_t bytes = vqmovn_high_s16(vqmovn_s16(lo), hi);
			vst1q_s8(q + k, bytes);
			sum = vpadalq_s16(sum, vpaddlq_s8(bytes));
		}
		int32_t total = vaddvq_s32(sum);
		for (; k < out->k; k++) { /* the tail, element by element as the definition does */
			float v = nearbyintf(row[k] * sc);
			v = isnan(v) ? 0.0f : v > 127.0f ? 127.0f : v < -128.0f ? -128.0f : v;
			q[k] = (int8_t)v;
			total += q[k];
		}
		memset(q + out->k, 0, out->k_pad - out->k);
		out->inv_scale[r] = amax / 127.0f;
		out->sum[r] = total;
	}
}

/* The scalar definition's BN_RMSNORM_LANES (16) lanes are four registers: lane l takes x[i]
 * for i % 16 == l, in order, each square rounded before it is added; the tail adds into its
 * first lanes only; then the lanes are added in lane order. */
static float sum_squares_neon(const float *x, uint32_t n)
{
	float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
	uint32_t i = 0;
	for (; i + 16 <= n; i += 16) {
		float32x4_t v0 = vld1q_f32(x + i), v1 = vld1q_f32(x + i + 4);
		float32x4_t v2 = vld1q_f32(x + i + 8), v3 = vld1q_f32(x + i + 12);
		a0 = vaddq_f32(a0, vmulq_f32(v0, v0));
		a1 = vaddq_f32(a1, vmulq_f32(v1, v1));
		a2 = vaddq_f32(a2, vmulq_f32(v2, v2));
		a3 = vaddq_f32(a3, vmulq_f32(v3, v3));
	}
	float lane[BN_RMSNORM_LANES], ss = 0.0f;
	vst1q_f32(lane, a0);
	vst1q_f32(lane + 4, a1);
	vst1q_f32(lane + 8, a2);
	vst1q_f32(lane + 12, a3);
	for (uint32_t l = 0; i + l < n; l++)
		lane[l] += x[i + l] * x[i + l];
	for (uint32_t l = 0; l < BN_RMSNORM_LANES; l++)
		ss += lane[l];
	return ss;
}

void bn_neon_rmsnorm(float *out, const float *x, const float *w, uint32_t n, float eps)
{
	float inv_s = 1.0f / sqrtf(sum_squares_neon(x, n) / (float)n + eps);
	const float32x4_t inv = vdupq_n_f32(inv_s);
	uint32_t i = 0;
	for (; i + 4 <= n; i += 4)
		vst1q_f32(out + i, vmulq_f32(vmulq_f32(vld1q_f32(x + i), inv), vld1q_f32(w + i)));
	for (; i < n; i++)
		out[i] = x[i] * inv_s * w[i];
}

/* The ordered compare is false for NaN, so NaN gates become 0 as in the scalar mask. */
void bn_neon_relu2_mul(float *g, const float *u, uint32_t n)
{
	uint32_t i = 0;
	for (; i + 4 <= n; i += 4) {
		float32x4_t v = vld1q_f32(g + i);
		uint32x4_t keep = vcgtq_f32(v, vdupq_n_f32(0.0f));
		float32x4_t r = vreinterpretq_f32_u32(vandq_u32(keep, vreinterpretq_u32_f32(v)));
		vst1q_f32(g + i, vmulq_f32(vmulq_f32(r, r), vld1q_f32(u + i)));
	}
	if (i < n)
		bn_relu2_mul(g + i, u + i, n - i);
}

void bn_neon_add(float *x, const float *y, uint32_t n)
{
	uint32_t i = 0;
	for (; i + 4 <= n; i += 4)
		vst1q_f32(x + i, vaddq_f32(vld1q_f32(x + i), vld1q_f32(y + i)));
	if (i < n)
		bn_add(x + i, y + i, n - i);
}

/* XXH3 inlined: xxhash.h takes its NEON path on aarch64. */
#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t bn_neon_hash64(const void *p, size_t n)
{
	return XXH3_64bits(p, n);
}
