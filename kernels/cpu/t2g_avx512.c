/* SPDX-License-Identifier: MIT */
/*
 * t2g_avx512.c — the grouped ternary product (kernels.h: t2g_gemm) with AVX-512 VNNI. The unit
 * is the 128-weight block (plane pair 0-1 or 2-3 of a T2 chunk): a group's blocks are summed
 * exactly by vpdpbusd in 32-bit lanes, the lanes added, the activations' block sums taken off,
 * and then one fused multiply-add per group in group order: the scalar variant's bits.
 *  - up to four batch rows: one weight row streamed at a time, a chain per batch row;
 *  - more: tiles of 4 weight rows x 4 batch rows (t2_blocking.h), the sixteen sums of a group
 *    reduced into one vector (sum_sixteen) whose lane 4b + r is output (r, b), so that the
 *    group's sixteen multiply-adds are one instruction, each lane its own chain.
 */
#include "kernels_avx512.h"
#include "t2_blocking.h"
#include "t2g.h"

#include <math.h>

#define T2G_TILE_ROWS 4
_Static_assert(T2G_TILE_ROWS * COLS == 16, "a tile's sums are one sum_sixteen");

/* One weight row against n_cols <= COLS batch rows from b0. */
static ALWAYS_INLINE void t2g_row(const struct bn_t2_matrix *w, uint32_t o,
				  const struct bn_q8_rows *x, uint32_t b0, const uint32_t n_cols,
				  float *y, uint32_t ldy)
{
	const uint8_t *row = w->codes + (size_t)o * w->row_bytes;
	const uint8_t *end = w->codes + (size_t)w->n_out * w->row_bytes;
	const uint32_t n_groups = w->n_in / w->group, blocks = w->group / BN_T2_GROUP_BLOCK;
	const float *gs = w->gscale + (size_t)o * n_groups;
	const int8_t *xs[COLS];
	float s[COLS];
	for (uint32_t b = 0; b < n_cols; b++) {
		xs[b] = x->q + (size_t)(b0 + b) * x->k_pad;
		s[b] = 0.0f;
	}
	for (uint32_t g = 0; g < n_groups; g++) {
		__m512i acc[COLS];
		for (uint32_t b = 0; b < n_cols; b++)
			acc[b] = _mm512_setzero_si512();
		for (uint32_t j = g * blocks; j < (g + 1) * blocks; j++) {
			const uint8_t *chunk = row + (size_t)(j / 2) * BN_T2_CHUNK_BYTES;
			if (j % 2 == 0 && chunk + WEIGHT_PREFETCH_BYTES < end)
				_mm_prefetch((const char *)chunk + WEIGHT_PREFETCH_BYTES, _MM_HINT_T0);
			__m512i wv = _mm512_loadu_si512(chunk);
			for (uint32_t p = 2 * (j % 2); p < 2 * (j % 2) + 2; p++) {
				__m512i codes = t2_plane_codes(wv, p);
				for (uint32_t b = 0; b < n_cols; b++)
					acc[b] = dpbusd(acc[b], codes,
							xs[b] + (size_t)(j / 2) * BN_T2_CHUNK + 64 * p);
			}
		}
		for (uint32_t b = 0; b < n_cols; b++) {
			int32_t a = _mm512_reduce_add_epi32(acc[b]) -
				    bn_t2g_group_xsum(x, b0 + b, g, blocks);
			s[b] = fmaf((float)a, gs[g], s[b]);
		}
	}
	for (uint32_t b = 0; b < n_cols; b++)
		y[(size_t)(b0 + b) * ldy + o] = s[b] * x->inv_scale[b0 + b];
}

static void t2g_rows(const struct bn_t2_matrix *w, uint32_t o, uint32_t o1,
		     const struct bn_q8_rows *x, uint32_t b0, uint32_t n_cols, float *y, uint32_t ldy)
{
	switch (n_cols) { /* constant column counts keep the sums in registers */
	case 4: for (; o < o1; o++) t2g_row(w, o, x, b0, 4, y, ldy); break;
	case 3: for (; o < o1; o++) t2g_row(w, o, x, b0, 3, y, ldy); break;
	case 2: for (; o < o1; o++) t2g_row(w, o, x, b0, 2, y, ldy); break;
	case 1: for (; o < o1; o++) t2g_row(w, o, x, b0, 1, y, ldy); break;
	default: break; /* no batch rows */
	}
}

/* Four weight rows against batch rows b0..b0 + 3. */
static void t2g_quad(const struct bn_t2_matrix *w, uint32_t o, const struct bn_q8_rows *x,
		     uint32_t b0, float *y, uint32_t ldy)
{
	const uint8_t *row = w->codes + (size_t)o * w->row_bytes;
	const uint8_t *end = w->codes + (size_t)w->n_out * w->row_bytes;
	const uint32_t n_groups = w->n_in / w->group, blocks = w->group / BN_T2_GROUP_BLOCK;
	const __m512i column = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
	const int8_t *xs[COLS];
	for (uint32_t b = 0; b < COLS; b++)
		xs[b] = x->q + (size_t)(b0 + b) * x->k_pad;
	__m512 s = _mm512_setzero_ps();
	for (uint32_t g = 0; g < n_groups; g++) {
		__m512i acc[COLS * T2G_TILE_ROWS]; /* [batch row][weight row] */
		for (uint32_t i = 0; i < COLS * T2G_TILE_ROWS; i++)
			acc[i] = _mm512_setzero_si512();
		for (uint32_t j = g * blocks; j < (g + 1) * blocks; j++) {
			__m512i wv[T2G_TILE_ROWS];
			for (uint32_t r = 0; r < T2G_TILE_ROWS; r++) {
				const uint8_t *chunk = row + (size_t)r * w->row_bytes +
						       (size_t)(j / 2) * BN_T2_CHUNK_BYTES;
				if (j % 2 == 0 && chunk + WEIGHT_PREFETCH_BYTES < end)
					_mm_prefetch((const char *)chunk + WEIGHT_PREFETCH_BYTES,
						     _MM_HINT_T0);
				wv[r] = _mm512_loadu_si512(chunk);
			}
			for (uint32_t p = 2 * (j % 2); p < 2 * (j % 2) + 2; p++) {
				__m512i codes[T2G_TILE_ROWS];
				for (uint32_t r = 0; r < T2G_TILE_ROWS; r++)
					codes[r] = t2_plane_codes(wv[r], p);
				for (uint32_t b = 0; b < COLS; b++) {
					__m512i xv = _mm512_load_si512(xs[b] + (size_t)(j / 2) * BN_T2_CHUNK +
								       64 * p);
					for (uint32_t r = 0; r < T2G_TILE_ROWS; r++)
						acc[b * T2G_TILE_ROWS + r] =
							dpbusd_reg(acc[b * T2G_TILE_ROWS + r], codes[r], xv);
				}
			}
		}
		int32_t xsum[COLS];
		float sc[T2G_TILE_ROWS];
		for (uint32_t b = 0; b < COLS; b++)
			xsum[b] = bn_t2g_group_xsum(x, b0 + b, g, blocks);
		for (uint32_t r = 0; r < T2G_TILE_ROWS; r++)
			sc[r] = w->gscale[(size_t)(o + r) * n_groups + g];
		__m512i xv = _mm512_permutexvar_epi32(
			column, _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)xsum)));
		__m512 scale = _mm512_broadcast_f32x4(_mm_loadu_ps(sc));
		__m512 a = _mm512_cvtepi32_ps(_mm512_sub_epi32(sum_sixteen(acc), xv));
		s = _mm512_fmadd_ps(a, scale, s);
	}
	__m512 inv = _mm512_permutexvar_ps(column,
					   _mm512_castps128_ps512(_mm_loadu_ps(x->inv_scale + b0)));
	__m512 v = _mm512_mul_ps(s, inv);
	_mm_storeu_ps(y + (size_t)b0 * ldy + o, _mm512_extractf32x4_ps(v, 0));
	_mm_storeu_ps(y + (size_t)(b0 + 1) * ldy + o, _mm512_extractf32x4_ps(v, 1));
	_mm_storeu_ps(y + (size_t)(b0 + 2) * ldy + o, _mm512_extractf32x4_ps(v, 2));
	_mm_storeu_ps(y + (size_t)(b0 + 3) * ldy + o, _mm512_extractf32x4_ps(v, 3));
}

static void t2g_tile(const void *mat, uint32_t o, uint32_t n_rows, const struct bn_q8_rows *x,
		     uint32_t b0, uint32_t n_cols, float *y, uint32_t ldy)
{
	const struct bn_t2_matrix *w = mat;
	if (n_rows == T2G_TILE_ROWS && n_cols == COLS)
		t2g_quad(w, o, x, b0, y, ldy);
	else
		t2g_rows(w, o, o + n_rows, x, b0, n_cols, y, ldy);
}

void bn_t2g_gemm_avx512(const struct bn_t2_matrix *w, uint32_t o0, uint32_t o1,
			const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy)
{
	if (n_b <= COLS) {
		t2g_rows(w, o0, o1, x, 0, n_b, y, ldy);
		return;
	}
	bn_gemm_blocked(w, w->row_bytes, o0, o1, x, n_b, y, ldy, T2G_TILE_ROWS, COLS, t2g_tile);
}
