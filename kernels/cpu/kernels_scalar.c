/* SPDX-License-Identifier: MIT */
/* kernels_scalar.c — the portable variants: the readable twins of the SIMD kernels. */
#include "kernels.h"
#include "quant.h"

#include <math.h>
#include <string.h>
#include <xxhash.h>

/* Weights [k0, k0 + n) of a row against q (t2_gemm: over the row's whole chunks, padding
 * included: code 1 against zero activations). */
static int32_t t2_dot_from(const uint8_t *row, const int8_t *q, uint32_t k0, uint32_t n)
{
	int32_t acc = 0;
	for (uint32_t k = k0; k < k0 + n; k++)
		acc += (int32_t)bn_t2_code(row, k) * q[k];
	return acc;
}

static void t2_gemm_scalar(const struct bn_t2_matrix *w, uint32_t o0, uint32_t o1,
			   const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy)
{
	for (uint32_t o = o0; o < o1; o++) {
		const uint8_t *row = w->codes + (size_t)o * w->row_bytes;
		for (uint32_t b = 0; b < n_b; b++) {
			int32_t acc = t2_dot_from(row, x->q + (size_t)b * x->k_pad, 0,
						  w->row_bytes / BN_T2_CHUNK_BYTES * BN_T2_CHUNK) -
				      x->sum[b];
			y[(size_t)b * ldy + o] = ((float)acc * w->scale[o]) * x->inv_scale[b];
		}
	}
}

/* The grouped product (kernels.h): per group the exact integer sum of its 128-weight blocks,
 * less the activations' block sums for the +1 offset, then one fused multiply-add per group,
 * groups in order. */
static void t2g_gemm_scalar(const struct bn_t2_matrix *w, uint32_t o0, uint32_t o1,
			    const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy)
{
	uint32_t n_groups = w->n_in / w->group, blocks = w->group / BN_T2_GROUP_BLOCK;
	for (uint32_t o = o0; o < o1; o++) {
		const uint8_t *row = w->codes + (size_t)o * w->row_bytes;
		const float *gs = w->gscale + (size_t)o * n_groups;
		for (uint32_t b = 0; b < n_b; b++) {
			const int8_t *q = x->q + (size_t)b * x->k_pad;
			const int32_t *bsum = x->bsum + (size_t)b * bn_q8_blocks(x->k_pad);
			float s = 0.0f;
			for (uint32_t g = 0; g < n_groups; g++) {
				uint32_t k0 = g * w->group;
				int32_t acc = t2_dot_from(row, q, k0, w->group);
				for (uint32_t j = 0; j < blocks; j++)
					acc -= bsum[g * blocks + j];
				s = fmaf((float)acc, gs[g], s);
			}
			y[(size_t)b * ldy + o] = s * x->inv_scale[b];
		}
	}
}

void bn_q8_block_sums(struct bn_q8_rows *x, uint32_t n)
{
	uint32_t blocks = bn_q8_blocks(x->k_pad);
	for (uint32_t r = 0; r < n; r++) {
		const int8_t *q = x->q + (size_t)r * x->k_pad;
		int32_t *bsum = x->bsum + (size_t)r * blocks;
		for (uint32_t j = 0; j < blocks; j++) {
			int32_t s = 0;
			for (uint32_t k = j * BN_T2_GROUP_BLOCK;
			     k < (j + 1) * BN_T2_GROUP_BLOCK && k < x->k_pad; k++)
				s += q[k];
			bsum[j] = s;
		}
	}
}

/* The T3 layout's readable twin (kernels.h): the same integer sum over the row's whole
 * chunks, the same two float products. */
void bn_t3_gemm_scalar(const struct bn_t3_matrix *w, uint32_t o0, uint32_t o1,
		       const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy)
{
	uint32_t n = w->row_bytes / BN_T3_CHUNK_BYTES * BN_T3_CHUNK;
	for (uint32_t o = o0; o < o1; o++) {
		const uint8_t *row = w->codes + (size_t)o * w->row_bytes;
		for (uint32_t b = 0; b < n_b; b++) {
			const int8_t *q = x->q + (size_t)b * x->k_pad;
			int32_t acc = 0;
			for (uint32_t k = 0; k < n; k++)
				acc += (int32_t)bn_t3_code(row, k) * q[k];
			acc -= x->sum[b];
			y[(size_t)b * ldy + o] = ((float)acc * w->scale[o]) * x->inv_scale[b];
		}
	}
}

/* The panel layout's order (kernels.h): one fused multiply-add chain per sum, k in order. */
static void f_gemm_panels_scalar(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1,
				 const float *x, uint32_t ldx, uint32_t n_b, float *y, uint32_t ldy)
{
	for (uint32_t o = o0; o < o1; o++)
		for (uint32_t b = 0; b < n_b; b++) {
			const float *xb = x + (size_t)b * ldx;
			float acc = 0.0f;
			for (uint32_t k = 0; k < w->n_in; k++)
				acc = fmaf(bn_f_weight(w, o, k), xb[k], acc);
			y[(size_t)b * ldy + o] = acc;
		}
}

static void f_gemm_scalar(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1, const float *x,
			  uint32_t ldx, uint32_t n_b, float *y, uint32_t ldy)
{
	if (w->panel_rows) {
		f_gemm_panels_scalar(w, o0, o1, x, ldx, n_b, y, ldy);
		return;
	}
	for (uint32_t o = o0; o < o1; o++)
		for (uint32_t b = 0; b < n_b; b++) {
			const float *xb = x + (size_t)b * ldx;
			float acc = 0.0f;
			for (uint32_t k = 0; k < w->n_in; k++)
				acc += bn_f_weight(w, o, k) * xb[k];
			y[(size_t)b * ldy + o] = acc;
		}
}

static void attend_scalar(const float *q, const struct bn_kv_view *kv, uint32_t L, uint32_t d,
			  float scale, float *s, float *out)
{
	uint32_t n;
	for (uint32_t t0 = 0; t0 < L; t0 += n) {
		const float *K = bn_kv_rows(kv, kv->K, t0, L, &n);
		for (uint32_t i = 0; i < n; i++) {
			float dot = 0.0f;
			for (uint32_t j = 0; j < d; j++)
				dot += q[j] * K[(size_t)i * kv->ld + j];
			s[t0 + i] = dot * scale;
		}
	}
	bn_softmax(s, L);
	for (uint32_t j = 0; j < d; j++)
		out[j] = 0.0f;
	for (uint32_t t0 = 0; t0 < L; t0 += n) {
		const float *V = bn_kv_rows(kv, kv->V, t0, L, &n);
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t j = 0; j < d; j++)
				out[j] += s[t0 + i] * V[(size_t)i * kv->ld + j];
	}
}

static void attend_heads_scalar(const float *q, uint32_t n_heads, const struct bn_kv_view *kv,
				uint32_t L, uint32_t d, float scale, float *s, float *out)
{
	bn_attend_each_head(attend_scalar, q, n_heads, kv, L, d, scale, s, out);
}

static void i8_dots_scalar(const struct bn_i8_matrix *w, uint32_t o0, uint32_t o1,
			   const int16_t *x, uint32_t ldx, uint32_t n_b, int64_t *y, uint32_t ldy)
{
	for (uint32_t o = o0; o < o1; o++) {
		const int8_t *row = w->q + (size_t)o * w->row_bytes;
		for (uint32_t b = 0; b < n_b; b++) {
			const int16_t *xb = x + (size_t)b * ldx;
			int64_t acc = 0;
			for (uint32_t k = 0; k < w->row_bytes; k++)
				acc += (int32_t)row[k] * xb[k];
			y[(size_t)b * ldy + o - o0] = acc;
		}
	}
}

static void i8_gemm_scalar(const struct bn_i8_matrix *w, uint32_t o0, uint32_t o1,
			   const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy)
{
	for (uint32_t o = o0; o < o1; o++) {
		const int8_t *row = w->q + (size_t)o * w->row_bytes;
		for (uint32_t b = 0; b < n_b; b++) {
			const int8_t *xb = x->q + (size_t)b * x->k_pad;
			int64_t acc = 0;
			for (uint32_t k = 0; k < w->row_bytes; k++)
				acc += (int32_t)row[k] * xb[k];
			y[(size_t)b * ldy + o] = ((float)acc * w->scale[o]) * x->inv_scale[b];
		}
	}
}

/* The library's XXH3, the definition the other variants match. */
static uint64_t hash64_scalar(const void *p, size_t n)
{
	return XXH3_64bits(p, n);
}

const struct bn_kernels bn_kernels_scalar = {
	.name = "scalar",
	.t2_gemm = t2_gemm_scalar,
	.t2g_gemm = t2g_gemm_scalar,
	.f_gemm = f_gemm_scalar,
	.attend = attend_scalar,
	.attend_heads = attend_heads_scalar,
	.quantize_rows = bn_quantize_rows,
	.rmsnorm = bn_rmsnorm,
	.relu2_mul = bn_relu2_mul,
	.add = bn_add,
	.i8_dots = i8_dots_scalar,
	.i8_gemm = i8_gemm_scalar,
	.hash64 = hash64_scalar,
};

/* The scalar definitions every variant matches (kernels.h). */

void bn_quantize_rows(const float *x, uint32_t ldx, uint32_t n, struct bn_q8_rows *out)
{
	for (uint32_t r = 0; r < n; r++) {
		const float *row = x + (size_t)r * ldx;
		int8_t *q = out->q + (size_t)r * out->k_pad;
		float amax = 0.0f;
		for (uint32_t k = 0; k < out->k; k++)
			amax = fmaxf(amax, fabsf(row[k]));
		float s = amax > 0.0f ? 127.0f / amax : 0.0f;
		int32_t sum = 0;
		for (uint32_t k = 0; k < out->k; k++) {
			/* |row[k] * s| <= 127 up to rounding; the clamp keeps it an int8 anyway. */
			float v = nearbyintf(row[k] * s);
			v = isnan(v) ? 0.0f : v > 127.0f ? 127.0f : v < -128.0f ? -128.0f : v;
			q[k] = (int8_t)v;
			sum += q[k];
		}
		memset(q + out->k, 0, out->k_pad - out->k);
		out->inv_scale[r] = amax / 127.0f;
		out->sum[r] = sum;
	}
}

void bn_softmax(float *s, uint32_t n)
{
	/* fmaxf(max, s[t]), written out: without -ffinite-math GCC calls libm for it, which cost
	 * 1.7% of a 1024-token prefill. max is never NaN, a NaN s[t] leaves it, and the sign a
	 * zero maximum keeps changes no s[t] - max. */
	float max = -INFINITY;
	for (uint32_t t = 0; t < n; t++)
		max = max > s[t] || s[t] != s[t] ? max : s[t];
	float sum = 0.0f;
	for (uint32_t t = 0; t < n; t++) {
		s[t] = expf(s[t] - max);
		sum += s[t];
	}
	float inv = 1.0f / sum;
	for (uint32_t t = 0; t < n; t++)
		s[t] *= inv;
}
