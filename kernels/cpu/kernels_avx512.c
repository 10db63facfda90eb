/* SPDX-License-Identifier: MIT */
/*
 * kernels_avx512.c — AVX-512 VNNI variants. Compiled with AVX-512 flags (Makefile), called
 * only when cpuid says the CPU and OS support them.
 *
 * Both kernels work on tiles of ROWS output rows x up to COLS batch rows, so each weight
 * vector is loaded (and unpacked) once per tile and each activation vector once per tile row
 * group. A tile's accumulators live in registers: 4 x 4 zmm. Each (output, batch row) pair
 * has its own accumulator, summed in the same order whatever the tile, so a result does not
 * depend on the batch it was computed in.
 */
#include "kernels.h"

#include <immintrin.h>

#define ROWS 4
#define COLS 4
#define ALWAYS_INLINE inline __attribute__((always_inline))

/* ------------------------------------------------------------------------------------------ */
/* Ternary x int8                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* Plane p of a 64-byte T2 chunk: the codes of weights [64p, 64p + 64), one per byte. The
 * 16-bit shift moves bits across byte borders; the mask throws those away. */
#define T2_PLANE(v, p) _mm512_and_si512(_mm512_srli_epi16((v), 2 * (p)), _mm512_set1_epi8(3))

static ALWAYS_INLINE void t2_tile(const struct bn_t2_matrix *w, uint32_t o, uint32_t n_rows,
				  const struct bn_q8_rows *x, uint32_t b0, const uint32_t n_cols,
				  float *y, uint32_t ldy)
{
	const uint8_t *row[ROWS];
	for (uint32_t r = 0; r < ROWS; r++) /* rows past the end repeat the first: discarded */
		row[r] = w->codes + (size_t)(o + (r < n_rows ? r : 0)) * w->row_bytes;
	const int8_t *xs[COLS];
	for (uint32_t b = 0; b < n_cols; b++)
		xs[b] = x->q + (size_t)(b0 + b) * x->k_pad;
	__m512i acc[ROWS][COLS];
	for (uint32_t r = 0; r < ROWS; r++)
		for (uint32_t b = 0; b < n_cols; b++)
			acc[r][b] = _mm512_setzero_si512();
	uint32_t n_chunks = w->row_bytes / BN_T2_CHUNK_BYTES;
	for (uint32_t c = 0; c < n_chunks; c++) {
		__m512i wv[ROWS];
		for (uint32_t r = 0; r < ROWS; r++)
			wv[r] = _mm512_loadu_si512(row[r] + (size_t)c * BN_T2_CHUNK_BYTES);
#define T2_DO_PLANE(p)                                                                          \
	do {                                                                                    \
		__m512i xv[COLS];                                                               \
		for (uint32_t b = 0; b < n_cols; b++)                                           \
			xv[b] = _mm512_loadu_si512(xs[b] + (size_t)c * BN_T2_CHUNK + 64 * (p)); \
		for (uint32_t r = 0; r < ROWS; r++) {                                           \
			__m512i pl = T2_PLANE(wv[r], p);                                        \
			for (uint32_t b = 0; b < n_cols; b++)                                   \
				acc[r][b] = _mm512_dpbusd_epi32(acc[r][b], pl, xv[b]);          \
		}                                                                               \
	} while (0)
		T2_DO_PLANE(0);
		T2_DO_PLANE(1);
		T2_DO_PLANE(2);
		T2_DO_PLANE(3);
#undef T2_DO_PLANE
	}
	for (uint32_t r = 0; r < n_rows; r++)
		for (uint32_t b = 0; b < n_cols; b++) {
			int32_t s = _mm512_reduce_add_epi32(acc[r][b]) - x->sum[b0 + b];
			y[(size_t)(b0 + b) * ldy + o + r] =
				((float)s * w->scale[o + r]) * x->inv_scale[b0 + b];
		}
}

static void t2_gemm_avx512(const struct bn_t2_matrix *w, uint32_t o0, uint32_t o1,
			   const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy)
{
	for (uint32_t o = o0; o < o1; o += ROWS) {
		uint32_t n_rows = o1 - o < ROWS ? o1 - o : ROWS;
		uint32_t b = 0;
		for (; b + COLS <= n_b; b += COLS)
			t2_tile(w, o, n_rows, x, b, COLS, y, ldy);
		switch (n_b - b) { /* constant column counts let the compiler keep tiles in registers */
		case 3: t2_tile(w, o, n_rows, x, b, 3, y, ldy); break;
		case 2: t2_tile(w, o, n_rows, x, b, 2, y, ldy); break;
		case 1: t2_tile(w, o, n_rows, x, b, 1, y, ldy); break;
		default: break;
		}
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Float weights (F32, F16, BF16) x float activations                                          */
/* ------------------------------------------------------------------------------------------ */

static ALWAYS_INLINE __m512 f_load(const void *row, uint32_t k, __mmask16 m, const uint32_t type)
{
	if (type == BN_TYPE_F16)
		return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k));
	if (type == BN_TYPE_BF16) {
		__m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k));
		return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
	}
	return _mm512_maskz_loadu_ps(m, (const float *)row + k);
}

static ALWAYS_INLINE void f_tile(const struct bn_f_matrix *w, uint32_t o, uint32_t n_rows,
				 const float *x, uint32_t ldx, uint32_t b0, const uint32_t n_cols,
				 float *y, uint32_t ldy, const uint32_t type)
{
	const uint8_t *row[ROWS];
	for (uint32_t r = 0; r < ROWS; r++)
		row[r] = (const uint8_t *)w->data + (size_t)(o + (r < n_rows ? r : 0)) * w->row_bytes;
	__m512 acc[ROWS][COLS];
	for (uint32_t r = 0; r < ROWS; r++)
		for (uint32_t b = 0; b < n_cols; b++)
			acc[r][b] = _mm512_setzero_ps();
	for (uint32_t k = 0; k < w->n_in; k += 16) {
		uint32_t left = w->n_in - k;
		__mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
		__m512 xv[COLS];
		for (uint32_t b = 0; b < n_cols; b++)
			xv[b] = _mm512_maskz_loadu_ps(m, x + (size_t)(b0 + b) * ldx + k);
		for (uint32_t r = 0; r < ROWS; r++) {
			__m512 wv = f_load(row[r], k, m, type);
			for (uint32_t b = 0; b < n_cols; b++)
				acc[r][b] = _mm512_fmadd_ps(wv, xv[b], acc[r][b]);
		}
	}
	for (uint32_t r = 0; r < n_rows; r++)
		for (uint32_t b = 0; b < n_cols; b++)
			y[(size_t)(b0 + b) * ldy + o + r] = _mm512_reduce_add_ps(acc[r][b]);
}

static ALWAYS_INLINE void f_gemm_typed(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1,
				       const float *x, uint32_t ldx, uint32_t n_b, float *y,
				       uint32_t ldy, const uint32_t type)
{
	for (uint32_t o = o0; o < o1; o += ROWS) {
		uint32_t n_rows = o1 - o < ROWS ? o1 - o : ROWS;
		uint32_t b = 0;
		for (; b + COLS <= n_b; b += COLS)
			f_tile(w, o, n_rows, x, ldx, b, COLS, y, ldy, type);
		switch (n_b - b) {
		case 3: f_tile(w, o, n_rows, x, ldx, b, 3, y, ldy, type); break;
		case 2: f_tile(w, o, n_rows, x, ldx, b, 2, y, ldy, type); break;
		case 1: f_tile(w, o, n_rows, x, ldx, b, 1, y, ldy, type); break;
		default: break;
		}
	}
}

static void f_gemm_avx512(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1, const float *x,
			  uint32_t ldx, uint32_t n_b, float *y, uint32_t ldy)
{
	switch (w->type) {
	case BN_TYPE_F16:
		f_gemm_typed(w, o0, o1, x, ldx, n_b, y, ldy, BN_TYPE_F16);
		break;
	case BN_TYPE_BF16:
		f_gemm_typed(w, o0, o1, x, ldx, n_b, y, ldy, BN_TYPE_BF16);
		break;
	default:
		f_gemm_typed(w, o0, o1, x, ldx, n_b, y, ldy, BN_TYPE_F32);
		break;
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Attention of one query over a cache                                                          */
/* ------------------------------------------------------------------------------------------ */

#define ATTEND_MAX_VECS 16 /* head dims up to 256 keep the output in registers */

static void attend_avx512(const float *q, const float *K, const float *V, uint32_t ld, uint32_t L,
			  uint32_t d, float scale, float *s, float *out)
{
	uint32_t n_vec = (d + 15) / 16;
	if (n_vec > ATTEND_MAX_VECS) {
		bn_kernels_scalar.attend(q, K, V, ld, L, d, scale, s, out);
		return;
	}
	__mmask16 tail = d % 16 ? (__mmask16)((1u << (d % 16)) - 1) : (__mmask16)0xffff;
	__m512 qv[ATTEND_MAX_VECS];
	for (uint32_t v = 0; v < n_vec; v++)
		qv[v] = _mm512_maskz_loadu_ps(v + 1 == n_vec ? tail : 0xffff, q + 16 * v);
	for (uint32_t t = 0; t < L; t++) {
		const float *k = K + (size_t)t * ld;
		__m512 acc = _mm512_setzero_ps();
		for (uint32_t v = 0; v < n_vec; v++)
			acc = _mm512_fmadd_ps(qv[v], _mm512_maskz_loadu_ps(v + 1 == n_vec ? tail : 0xffff,
									   k + 16 * v), acc);
		s[t] = _mm512_reduce_add_ps(acc) * scale;
	}
	bn_softmax(s, L);
	__m512 o[ATTEND_MAX_VECS];
	for (uint32_t v = 0; v < n_vec; v++)
		o[v] = _mm512_setzero_ps();
	for (uint32_t t = 0; t < L; t++) {
		const float *vt = V + (size_t)t * ld;
		__m512 p = _mm512_set1_ps(s[t]);
		for (uint32_t v = 0; v < n_vec; v++)
			o[v] = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(v + 1 == n_vec ? tail : 0xffff,
									 vt + 16 * v), o[v]);
	}
	for (uint32_t v = 0; v < n_vec; v++)
		_mm512_mask_storeu_ps(out + 16 * v, v + 1 == n_vec ? tail : 0xffff, o[v]);
}

const struct bn_kernels bn_kernels_avx512 = {
	.name = "avx512vnni",
	.t2_gemm = t2_gemm_avx512,
	.f_gemm = f_gemm_avx512,
	.attend = attend_avx512,
};
