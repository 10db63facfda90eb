/* SPDX-License-Identifier: MIT */
/*
 * kernels_avx2.c — AVX2 + FMA + F16C variants, for CPUs without AVX-512 VNNI. The ideas of
 * the AVX-512 file with smaller tiles (AVX2 has 16 vector registers). Unsigned codes against
 * signed activations through maddubs (pairs of products fit in int16: 2 * 2 * 128), then madd
 * against ones to widen to int32.
 */
#include "kernels.h"
#include "quant.h"
#include "t2_blocking.h"

#include <immintrin.h>

#define ROWS 2 /* the float row-layout tile: weight rows x batch rows */
#define COLS 2
#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE __m256i dot_u8s8(__m256i acc, __m256i codes, __m256i x)
{
	__m256i pairs = _mm256_maddubs_epi16(codes, x);
	return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

static int32_t hsum_epi32(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
	return _mm_cvtsi128_si32(s);
}

/* Ternary x int8: one weight row streamed at a time against up to ROW_COLS batch rows, each
 * plane of a chunk unpacked once for all of them, with a software prefetch lead as in the
 * AVX-512 file; larger batches go through the cache blocking (t2_blocking.h) in tiles of one
 * row and ROW_COLS batch rows. 409600 x 2560 (262 MB), two threads, side by side with the
 * 2 x 2 tiles (two interleaved rows, hardware prefetch only) this replaced: batch 1 17.7-18.3
 * -> 35.7-36.1 GB/s, batch 2 15.8-16.0 -> 21.6-21.8, batch 3 11.1-11.5 -> 13.3-14.4, batch
 * 4 8.3-9.7 -> 10.5-11.0, batch 8 3.8 -> 5.0, batch 16 2.0-2.2 -> 2.3-2.4. */
#define WEIGHT_PREFETCH_BYTES 8192
#define ROW_COLS 4

static ALWAYS_INLINE void t2_row(const struct bn_t2_matrix *w, uint32_t o,
				 const struct bn_q8_rows *x, const uint32_t n_cols, float *y,
				 uint32_t ldy)
{
	const uint8_t *row = w->codes + (size_t)o * w->row_bytes;
	const uint8_t *end = w->codes + (size_t)w->n_out * w->row_bytes;
	__m256i acc[ROW_COLS];
	for (uint32_t b = 0; b < n_cols; b++)
		acc[b] = _mm256_setzero_si256();
	const __m256i m3 = _mm256_set1_epi8(3);
	uint32_t n_chunks = w->row_bytes / BN_T2_CHUNK_BYTES;
	for (uint32_t c = 0; c < n_chunks; c++) {
		const uint8_t *chunk = row + (size_t)c * BN_T2_CHUNK_BYTES;
		if (chunk + WEIGHT_PREFETCH_BYTES < end)
			_mm_prefetch((const char *)chunk + WEIGHT_PREFETCH_BYTES, _MM_HINT_T0);
		for (uint32_t h = 0; h < 2; h++) {
			__m256i wv = _mm256_loadu_si256((const __m256i *)(chunk + 32 * h));
			for (uint32_t p = 0; p < 4; p++) {
				__m256i pl = _mm256_and_si256(
					_mm256_srl_epi16(wv, _mm_cvtsi32_si128(2 * (int)p)), m3);
				for (uint32_t b = 0; b < n_cols; b++) {
					const int8_t *xp = x->q + (size_t)b * x->k_pad +
							   (size_t)c * BN_T2_CHUNK + 64 * p + 32 * h;
					acc[b] = dot_u8s8(acc[b], pl,
							  _mm256_loadu_si256((const __m256i *)xp));
				}
			}
		}
	}
	for (uint32_t b = 0; b < n_cols; b++) {
		int32_t s = hsum_epi32(acc[b]) - x->sum[b];
		y[(size_t)b * ldy + o] = ((float)s * w->scale[o]) * x->inv_scale[b];
	}
}

/* Rows [o, o + n_rows) against batch rows [b0, b0 + n_cols), n_cols <= ROW_COLS. */
static void t2_rows(const void *mat, uint32_t o, uint32_t n_rows, const struct bn_q8_rows *x,
		    uint32_t b0, uint32_t n_cols, float *y, uint32_t ldy)
{
	const struct bn_t2_matrix *w = mat;
	struct bn_q8_rows xs = *x;
	xs.q += (size_t)b0 * xs.k_pad;
	xs.inv_scale += b0;
	xs.sum += b0;
	y += (size_t)b0 * ldy;
	for (uint32_t r = o; r < o + n_rows; r++)
		switch (n_cols) { /* constant column counts keep the sums in registers */
		case 4: t2_row(w, r, &xs, 4, y, ldy); break;
		case 3: t2_row(w, r, &xs, 3, y, ldy); break;
		case 2: t2_row(w, r, &xs, 2, y, ldy); break;
		case 1: t2_row(w, r, &xs, 1, y, ldy); break;
		default: break; /* no batch rows */
		}
}

static void t2_gemm_avx2(const struct bn_t2_matrix *w, uint32_t o0, uint32_t o1,
			 const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy)
{
	if (n_b <= ROW_COLS) {
		t2_rows(w, o0, o1 - o0, x, 0, n_b, y, ldy);
		return;
	}
	bn_gemm_blocked(w, w->row_bytes, o0, o1, x, n_b, y, ldy, 1, ROW_COLS, t2_rows);
}

/* Eight weights of row `row` from k, as floats. */
static ALWAYS_INLINE __m256 f_load8(const void *row, uint32_t k, const uint32_t type)
{
	if (type == BN_TYPE_F16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + k)));
	if (type == BN_TYPE_BF16) {
		__m256i h = _mm256_cvtepu16_epi32(
			_mm_loadu_si128((const __m128i *)((const uint16_t *)row + k)));
		return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
	}
	return _mm256_loadu_ps((const float *)row + k);
}

static float f_one(const void *row, uint32_t k, uint32_t type)
{
	if (type == BN_TYPE_F16)
		return bn_half_to_float(((const uint16_t *)row)[k]);
	if (type == BN_TYPE_BF16)
		return bn_bf16_to_float(((const uint16_t *)row)[k]);
	return ((const float *)row)[k];
}

static float hsum_ps(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

static ALWAYS_INLINE void f_tile(const struct bn_f_matrix *w, uint32_t o, uint32_t n_rows,
				 const float *x, uint32_t ldx, uint32_t b0, const uint32_t n_cols,
				 float *y, uint32_t ldy, const uint32_t type)
{
	const uint8_t *row[ROWS];
	for (uint32_t r = 0; r < ROWS; r++)
		row[r] = (const uint8_t *)w->data + (size_t)(o + (r < n_rows ? r : 0)) * w->row_bytes;
	__m256 acc[ROWS][COLS];
	for (uint32_t r = 0; r < ROWS; r++)
		for (uint32_t b = 0; b < n_cols; b++)
			acc[r][b] = _mm256_setzero_ps();
	uint32_t k_vec = w->n_in / 8 * 8;
	for (uint32_t k = 0; k < k_vec; k += 8)
		for (uint32_t r = 0; r < ROWS; r++) {
			__m256 wv = f_load8(row[r], k, type);
			for (uint32_t b = 0; b < n_cols; b++)
				acc[r][b] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + (size_t)(b0 + b) * ldx + k),
							    acc[r][b]);
		}
	for (uint32_t r = 0; r < n_rows; r++)
		for (uint32_t b = 0; b < n_cols; b++) {
			float s = hsum_ps(acc[r][b]);
			for (uint32_t k = k_vec; k < w->n_in; k++) /* the tail, after, in order */
				s += f_one(row[r], k, type) * x[(size_t)(b0 + b) * ldx + k];
			y[(size_t)(b0 + b) * ldy + o + r] = s;
		}
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
		if (b < n_b)
			f_tile(w, o, n_rows, x, ldx, b, 1, y, ldy, type);
	}
}

/* The panel layout (kernels.h): n_vecs vectors of 8 rows from row `part` of a group against
 * n_cols batch rows, the sums in registers, each one fused multiply-add chain over k in
 * order, so the bits are the scalar variant's. Sixteen registers: two batch rows take half a
 * group (8 sums, 4 weight vectors); one batch row takes the whole group (8 sums, each weight
 * vector used once), which keeps 8 chains going where half a group had 4: one core, 65536 x
 * 2560 F16, batch 1, 7.5 G multiply-adds/s with halves, 14.7 whole (the row layout: 5.8).
 * Batch 16: 38.5 against 23.5 in the row layout. */
#define P_COLS 2

static ALWAYS_INLINE void p_tile(const void *group, uint32_t n_in, uint32_t part,
				 const uint32_t n_vecs, const float *x, uint32_t ldx,
				 const uint32_t n_cols, float *y, uint32_t ldy, uint32_t first,
				 uint32_t r0, uint32_t r1, const uint32_t type)
{
	__m256 acc[P_COLS][BN_F_PANEL_ROWS / 8];
	for (uint32_t b = 0; b < n_cols; b++)
		for (uint32_t v = 0; v < n_vecs; v++)
			acc[b][v] = _mm256_setzero_ps();
	for (uint32_t k = 0; k < n_in; k++) {
		__m256 wv[BN_F_PANEL_ROWS / 8];
		for (uint32_t v = 0; v < n_vecs; v++)
			wv[v] = f_load8(group, k * BN_F_PANEL_ROWS + part + 8 * v, type);
		for (uint32_t b = 0; b < n_cols; b++) {
			__m256 xb = _mm256_set1_ps(x[(size_t)b * ldx + k]);
			for (uint32_t v = 0; v < n_vecs; v++)
				acc[b][v] = _mm256_fmadd_ps(wv[v], xb, acc[b][v]);
		}
	}
	for (uint32_t b = 0; b < n_cols; b++)
		for (uint32_t v = 0; v < n_vecs; v++) {
			uint32_t o = first + part + 8 * v;
			float *out = y + (size_t)b * ldy;
			if (o >= r0 && o + 8 <= r1) {
				_mm256_storeu_ps(out + o, acc[b][v]);
				continue;
			}
			float lanes[8];
			_mm256_storeu_ps(lanes, acc[b][v]);
			for (uint32_t i = 0; i < 8; i++)
				if (o + i >= r0 && o + i < r1)
					out[o + i] = lanes[i];
		}
}

static ALWAYS_INLINE void f_gemm_panels(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1,
					const float *x, uint32_t ldx, uint32_t n_b, float *y,
					uint32_t ldy, const uint32_t type)
{
	const size_t group_values = (size_t)BN_F_PANEL_ROWS * w->n_in;
	const size_t value_bytes = type == BN_TYPE_F32 ? 4 : 2;
	const uint32_t half = BN_F_PANEL_ROWS / 2;
	for (uint32_t g = o0 / BN_F_PANEL_ROWS; g * BN_F_PANEL_ROWS < o1; g++) {
		const char *group = (const char *)w->data + g * group_values * value_bytes;
		uint32_t first = g * BN_F_PANEL_ROWS;
		uint32_t r0 = o0 > first ? o0 : first;
		uint32_t r1 = o1 < first + BN_F_PANEL_ROWS ? o1 : first + BN_F_PANEL_ROWS;
		uint32_t b = 0;
		for (; b + P_COLS <= n_b; b += P_COLS)
			for (uint32_t part = 0; part < BN_F_PANEL_ROWS; part += half)
				if (first + part < r1 && first + part + half > r0)
					p_tile(group, w->n_in, part, half / 8, x + (size_t)b * ldx,
					       ldx, P_COLS, y + (size_t)b * ldy, ldy, first, r0, r1,
					       type);
		if (b < n_b)
			p_tile(group, w->n_in, 0, BN_F_PANEL_ROWS / 8, x + (size_t)b * ldx, ldx, 1,
			       y + (size_t)b * ldy, ldy, first, r0, r1, type);
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
		f_gemm_typed(w, o0, o1, x, ldx, n_b, y, ldy, type);
}

static void f_gemm_avx2(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1, const float *x,
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

#define ATTEND_MAX_VECS 16 /* head dims up to 128 keep the output in registers */

static void attend_avx2(const float *q, const struct bn_kv_view *kv, uint32_t L, uint32_t d,
			float scale, float *s, float *out)
{
	if (d % 8 || d / 8 > ATTEND_MAX_VECS) {
		bn_kernels_scalar.attend(q, kv, L, d, scale, s, out);
		return;
	}
	uint32_t n_vec = d / 8, bt = kv->block_tokens;
	for (uint32_t t0 = 0, b = 0; t0 < L; t0 += bt, b++) {
		const float *K = bn_kv_block(kv, kv->K, b);
		for (uint32_t i = 0; i < bt && t0 + i < L; i++) {
			const float *k = K + (size_t)i * kv->ld;
			__m256 acc = _mm256_setzero_ps();
			for (uint32_t v = 0; v < n_vec; v++)
				acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * v), _mm256_loadu_ps(k + 8 * v),
						      acc);
			s[t0 + i] = hsum_ps(acc) * scale;
		}
	}
	bn_softmax(s, L);
	__m256 o[ATTEND_MAX_VECS];
	for (uint32_t v = 0; v < n_vec; v++)
		o[v] = _mm256_setzero_ps();
	for (uint32_t t0 = 0, b = 0; t0 < L; t0 += bt, b++) {
		const float *V = bn_kv_block(kv, kv->V, b);
		for (uint32_t i = 0; i < bt && t0 + i < L; i++) {
			const float *vt = V + (size_t)i * kv->ld;
			__m256 p = _mm256_set1_ps(s[t0 + i]);
			for (uint32_t v = 0; v < n_vec; v++)
				o[v] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vt + 8 * v), o[v]);
		}
	}
	for (uint32_t v = 0; v < n_vec; v++)
		_mm256_storeu_ps(out + 8 * v, o[v]);
}

static void attend_heads_avx2(const float *q, uint32_t n_heads, const struct bn_kv_view *kv,
			      uint32_t L, uint32_t d, float scale, float *s, float *out)
{
	bn_attend_each_head(attend_avx2, q, n_heads, kv, L, d, scale, s, out);
}

/* Int8 rows x int16 activations (the LM-head screen): 16 weights widened per step, one
 * vpmaddwd per batch row into 8 exact 32-bit lanes (bn_i8_dot_x_max), totalled in 64 bits. */
static int64_t lanes_total8(__m256i acc)
{
	__m256i lo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(acc));
	__m256i hi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(acc, 1));
	__m256i s = _mm256_add_epi64(lo, hi);
	__m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
	return _mm_cvtsi128_si64(t) + _mm_extract_epi64(t, 1);
}

static void i8_dots_avx2(const struct bn_i8_matrix *w, uint32_t o0, uint32_t o1,
			 const int16_t *x, uint32_t ldx, uint32_t n_b, int64_t *y, uint32_t ldy)
{
	for (uint32_t o = o0; o < o1; o++) {
		const int8_t *row = w->q + (size_t)o * w->row_bytes;
		for (uint32_t b = 0; b < n_b; b++) {
			const int16_t *xb = x + (size_t)b * ldx;
			__m256i acc = _mm256_setzero_si256();
			for (uint32_t k = 0; k < w->row_bytes; k += 16) {
				__m256i wv = _mm256_cvtepi8_epi16(_mm_load_si128((const __m128i *)(row + k)));
				__m256i xv = _mm256_loadu_si256((const __m256i *)(xb + k));
				acc = _mm256_add_epi32(acc, _mm256_madd_epi16(wv, xv));
			}
			y[(size_t)b * ldy + o - o0] = lanes_total8(acc);
		}
	}
}

/* The int8 head: 16 weights and 16 activations widened per step, one vpmaddwd per batch
 * row into 8 exact 32-bit lanes (a lane sums n_in / 8 products of at most 127 * 127). */
static void i8_gemm_avx2(const struct bn_i8_matrix *w, uint32_t o0, uint32_t o1,
			 const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy)
{
	for (uint32_t o = o0; o < o1; o++) {
		const int8_t *row = w->q + (size_t)o * w->row_bytes;
		for (uint32_t b = 0; b < n_b; b++) {
			const int8_t *xb = x->q + (size_t)b * x->k_pad;
			__m256i acc = _mm256_setzero_si256();
			for (uint32_t k = 0; k < w->row_bytes; k += 16) {
				__m256i wv = _mm256_cvtepi8_epi16(_mm_load_si128((const __m128i *)(row + k)));
				__m256i xv = _mm256_cvtepi8_epi16(_mm_load_si128((const __m128i *)(xb + k)));
				acc = _mm256_add_epi32(acc, _mm256_madd_epi16(wv, xv));
			}
			y[(size_t)b * ldy + o] =
				((float)lanes_total8(acc) * w->scale[o]) * x->inv_scale[b];
		}
	}
}

/* XXH3 inlined and compiled for AVX2 (xxhash.h picks the vector path from the flags). */
#define XXH_INLINE_ALL
#include <xxhash.h>

static uint64_t hash64_avx2(const void *p, size_t n)
{
	return XXH3_64bits(p, n);
}

const struct bn_kernels bn_kernels_avx2 = {
	.name = "avx2",
	.t2_gemm = t2_gemm_avx2,
	.f_gemm = f_gemm_avx2,
	.attend = attend_avx2,
	.attend_heads = attend_heads_avx2,
	.quantize_rows = bn_quantize_rows,
	.rmsnorm = bn_rmsnorm,
	.relu2_mul = bn_relu2_mul,
	.add = bn_add,
	.i8_dots = i8_dots_avx2,
	.i8_gemm = i8_gemm_avx2,
	.hash64 = hash64_avx2,
};
