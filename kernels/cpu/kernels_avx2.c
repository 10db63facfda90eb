/* SPDX-License-Identifier: MIT */
/*
 * kernels_avx2.c — AVX2 + FMA + F16C variants, for CPUs without AVX-512 VNNI. The ideas of
 * the AVX-512 file with smaller tiles (AVX2 has 16 vector registers). Unsigned codes against
 * signed activations through maddubs (pairs of products fit in int16: 2 * 2 * 128), then madd
 * against ones to widen to int32. Compiled a second time with BN_AVXVNNI (kernels_avxvnni.c)
 * for CPUs with AVX-VNNI, where vpdpbusd and vpdpwssd do those steps in one instruction.
 */
#include "kernels.h"
#include "quant.h"
#include "t2_blocking.h"
#include "t2g.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define ROWS 2 /* the float row-layout tile: weight rows x batch rows */
#define COLS 2
#define ALWAYS_INLINE inline __attribute__((always_inline))

/* 32-bit sums of four products each: unsigned codes x signed activations. */
static ALWAYS_INLINE __m256i dot_u8s8(__m256i acc, __m256i codes, __m256i x)
{
#ifdef BN_AVXVNNI
	return _mm256_dpbusd_avx_epi32(acc, codes, x);
#else
	__m256i pairs = _mm256_maddubs_epi16(codes, x);
	return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
#endif
}

static int32_t hsum_epi32(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
	return _mm_cvtsi128_si32(s);
}

/* Ternary x int8 at batch 1: one weight row streamed at a time, with a software prefetch lead
 * as in the AVX-512 file. 409600 x 2560 (262 MB), two threads, side by side with the 2 x 2
 * tiles (two interleaved rows, hardware prefetch only) it replaced: 17.7-18.3 -> 35.7-36.1
 * GB/s. (The same row kernel served batches of 2 to 4 and, through the cache blocking, tiles of
 * one row and four batch rows, until the 16-bit tiles below.) */
#define WEIGHT_PREFETCH_BYTES 8192

static ALWAYS_INLINE void t2_row(const struct bn_t2_matrix *w, uint32_t o,
				 const struct bn_q8_rows *x, float *y)
{
	const uint8_t *row = w->codes + (size_t)o * w->row_bytes;
	const uint8_t *end = w->codes + (size_t)w->n_out * w->row_bytes;
	/* a sum per plane: vpdpbusd's latency (AVX-VNNI) would otherwise chain every step */
	__m256i acc[4] = { _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
			   _mm256_setzero_si256() };
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
				const int8_t *xp = x->q + (size_t)c * BN_T2_CHUNK + 64 * p + 32 * h;
				acc[p] = dot_u8s8(acc[p], pl, _mm256_loadu_si256((const __m256i *)xp));
			}
		}
	}
	__m256i sum = _mm256_add_epi32(_mm256_add_epi32(acc[0], acc[1]),
				       _mm256_add_epi32(acc[2], acc[3]));
	int32_t s = hsum_epi32(sum) - x->sum[0];
	y[o] = ((float)s * w->scale[o]) * x->inv_scale[0];
}

/* Batches of two rows or more: tiles of TILE_ROWS weight rows x TILE_COLS batch rows, each
 * activation vector loaded once for both weight rows and each unpacked plane used for all four
 * batch rows. The products go into 16-bit sums: vpmaddubsw's pairs of code x activation lie in
 * [-512, 508] (codes 0..2, activations -128..127), so 63 of them cannot overflow; a chunk adds 8
 * pairs to each sum, and every ACC16_CHUNKS (7: 56 pairs) chunks they are widened into 32-bit
 * sums by one vpmaddwd. That is one multiply per 32 multiply-adds where the row kernel above
 * (and the int8 peak of bench-model, which models it) spends two and an add. With AVX-VNNI
 * (kernels_avxvnni.c compiles this file again) vpdpbusd adds into 32 bits directly. The sums
 * are exact either way, so every output has the bits of the scalar t2_gemm. */
#define TILE_ROWS 2
#define TILE_COLS 4
#define ACC16_CHUNKS 7

#ifdef BN_AVXVNNI
#define TILE_ACC_CHUNKS UINT32_MAX /* 32-bit sums from the start: nothing to widen */
static ALWAYS_INLINE __m256i tile_dot(__m256i acc, __m256i codes, __m256i x)
{
	return _mm256_dpbusd_avx_epi32(acc, codes, x);
}
static ALWAYS_INLINE __m256i tile_widen(__m256i acc32, __m256i acc)
{
	return _mm256_add_epi32(acc32, acc);
}
#else
#define TILE_ACC_CHUNKS ACC16_CHUNKS
static ALWAYS_INLINE __m256i tile_dot(__m256i acc, __m256i codes, __m256i x)
{
	acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(codes, x));
	/* Keeps each sum a register updated in place: left alone, GCC regroups the integer adds
	 * into trees of the step's products and spills them (a 2 x 4 tile ran no faster than
	 * the 1 x 4 tile it replaced). */
	__asm__("" : "+x"(acc));
	return acc;
}
static ALWAYS_INLINE __m256i tile_widen(__m256i acc32, __m256i acc)
{
	return _mm256_add_epi32(acc32, _mm256_madd_epi16(acc, _mm256_set1_epi16(1)));
}
#endif

/* Chunks [c0, c1) of rows o.. (n_rows of them) against batch rows 0..n_cols of x, added into
 * acc (16-bit sums without VNNI: at most TILE_ACC_CHUNKS chunks). */
static ALWAYS_INLINE void tile_chunks(const struct bn_t2_matrix *w, uint32_t o,
				      const uint32_t n_rows, const struct bn_q8_rows *x,
				      const uint32_t n_cols, uint32_t c0, uint32_t c1,
				      __m256i acc[TILE_ROWS][TILE_COLS])
{
	const __m256i m3 = _mm256_set1_epi8(3);
	const uint8_t *row = w->codes + (size_t)o * w->row_bytes;
	const uint8_t *end = w->codes + (size_t)w->n_out * w->row_bytes;
	for (uint32_t c = c0; c < c1; c++) {
		const uint8_t *chunk = row + (size_t)c * BN_T2_CHUNK_BYTES;
		for (uint32_t r = 0; r < n_rows; r++)
			if (chunk + r * w->row_bytes + WEIGHT_PREFETCH_BYTES < end)
				_mm_prefetch((const char *)chunk + r * w->row_bytes +
						     WEIGHT_PREFETCH_BYTES,
					     _MM_HINT_T0);
		for (uint32_t h = 0; h < 2; h++) {
			__m256i wv[TILE_ROWS];
			for (uint32_t r = 0; r < n_rows; r++)
				wv[r] = _mm256_loadu_si256(
					(const __m256i *)(chunk + r * w->row_bytes + 32 * h));
			for (uint32_t p = 0; p < 4; p++) {
				__m256i pl[TILE_ROWS];
				for (uint32_t r = 0; r < n_rows; r++)
					pl[r] = _mm256_and_si256(
						_mm256_srl_epi16(wv[r], _mm_cvtsi32_si128(2 * (int)p)),
						m3);
				for (uint32_t b = 0; b < n_cols; b++) {
					__m256i xv = _mm256_loadu_si256(
						(const __m256i *)(x->q + (size_t)b * x->k_pad +
								  (size_t)c * BN_T2_CHUNK + 64 * p +
								  32 * h));
					for (uint32_t r = 0; r < n_rows; r++)
						acc[r][b] = tile_dot(acc[r][b], pl[r], xv);
				}
			}
		}
	}
}

static ALWAYS_INLINE void t2_tile(const struct bn_t2_matrix *w, uint32_t o, const uint32_t n_rows,
				  const struct bn_q8_rows *x, const uint32_t n_cols, float *y,
				  uint32_t ldy)
{
	__m256i acc32[TILE_ROWS][TILE_COLS];
	for (uint32_t r = 0; r < n_rows; r++)
		for (uint32_t b = 0; b < n_cols; b++)
			acc32[r][b] = _mm256_setzero_si256();
	uint32_t n_chunks = w->row_bytes / BN_T2_CHUNK_BYTES;
	for (uint32_t c0 = 0; c0 < n_chunks;) {
		uint32_t c1 = n_chunks - c0 < TILE_ACC_CHUNKS ? n_chunks : c0 + TILE_ACC_CHUNKS;
		__m256i acc[TILE_ROWS][TILE_COLS];
		for (uint32_t r = 0; r < n_rows; r++)
			for (uint32_t b = 0; b < n_cols; b++)
				acc[r][b] = _mm256_setzero_si256();
		tile_chunks(w, o, n_rows, x, n_cols, c0, c1, acc);
		for (uint32_t r = 0; r < n_rows; r++)
			for (uint32_t b = 0; b < n_cols; b++)
				acc32[r][b] = tile_widen(acc32[r][b], acc[r][b]);
		c0 = c1;
	}
	for (uint32_t r = 0; r < n_rows; r++)
		for (uint32_t b = 0; b < n_cols; b++) {
			int32_t s = hsum_epi32(acc32[r][b]) - x->sum[b];
			y[(size_t)b * ldy + o + r] = ((float)s * w->scale[o + r]) * x->inv_scale[b];
		}
}

/* Rows [o, o + n_rows) against batch rows [b0, b0 + n_cols): n_rows <= TILE_ROWS, n_cols <=
 * TILE_COLS, each count a constant in its own copy of the tile, so the sums stay in registers. */
static void t2_tile_at(const void *mat, uint32_t o, uint32_t n_rows, const struct bn_q8_rows *x,
		       uint32_t b0, uint32_t n_cols, float *y, uint32_t ldy)
{
	const struct bn_t2_matrix *w = mat;
	struct bn_q8_rows xs = *x;
	xs.q += (size_t)b0 * xs.k_pad;
	xs.inv_scale += b0;
	xs.sum += b0;
	y += (size_t)b0 * ldy;
#define TILE_CASE(r, c)                                          \
	case (r - 1) * TILE_COLS + (c - 1):                      \
		t2_tile(w, o, r, &xs, c, y, ldy);                \
		break
	switch ((n_rows - 1) * TILE_COLS + (n_cols - 1)) {
	TILE_CASE(2, 4); TILE_CASE(2, 3); TILE_CASE(2, 2); TILE_CASE(2, 1);
	TILE_CASE(1, 4); TILE_CASE(1, 3); TILE_CASE(1, 2); TILE_CASE(1, 1);
	default: break; /* no rows or no batch rows */
	}
#undef TILE_CASE
}

static void t2_gemm_avx2(const struct bn_t2_matrix *w, uint32_t o0, uint32_t o1,
			 const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy)
{
	if (n_b == 1) { /* a stream of the weights: the row kernel keeps up with memory */
		for (uint32_t o = o0; o < o1; o++)
			t2_row(w, o, x, y);
		return;
	}
	bn_gemm_blocked(w, w->row_bytes, o0, o1, x, n_b, y, ldy, TILE_ROWS, TILE_COLS, t2_tile_at);
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

/* Attention of query heads that share one KV head (one head: attend). Per head and cached row
 * the score is one fused multiply-add chain over the head's vectors in order, then hsum_ps and
 * the scale; per output element one chain over the rows in order: the same operations in the
 * same order however many heads share the rows and however the work is cut, so attend_heads
 * gives each head attend's bits. Eight rows' chains run side by side (a single chain waited on
 * the FMA latency at every step), each cached row is read once for all the heads, and the
 * output is made a few vectors at a time so that its sums stay in registers. */
#define ATTEND_KEYS 8    /* rows whose scores are computed together: 8 chains hide the FMA latency */
#define ATTEND_SUMS 12   /* output sums kept in registers */

/* Scores of n_k consecutive cached rows from k for every head. */
static ALWAYS_INLINE void rows_scores(const float *q, const uint32_t n_h, const uint32_t n_vec,
				      const float *k, uint32_t ld, const uint32_t n_k, float scale,
				      float *s, uint32_t L)
{
	for (uint32_t h = 0; h < n_h; h++) {
		const float *qh = q + (size_t)h * n_vec * 8;
		__m256 acc[ATTEND_KEYS];
		for (uint32_t j = 0; j < n_k; j++)
			acc[j] = _mm256_setzero_ps();
		for (uint32_t v = 0; v < n_vec; v++) {
			__m256 qv = _mm256_loadu_ps(qh + 8 * v);
			for (uint32_t j = 0; j < n_k; j++)
				acc[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + (size_t)j * ld + 8 * v),
							 acc[j]);
		}
		for (uint32_t j = 0; j < n_k; j++)
			s[(size_t)h * L + j] = hsum_ps(acc[j]) * scale;
	}
}

static ALWAYS_INLINE void heads_scores(const float *q, const uint32_t n_h, const uint32_t n_vec,
				       const struct bn_kv_view *kv, uint32_t L, float scale, float *s)
{
	uint32_t rows;
	for (uint32_t t0 = 0; t0 < L; t0 += rows) {
		const float *K = bn_kv_rows(kv, kv->K, t0, L, &rows);
		uint32_t i = 0;
		for (; i + ATTEND_KEYS <= rows; i += ATTEND_KEYS)
			rows_scores(q, n_h, n_vec, K + (size_t)i * kv->ld, kv->ld, ATTEND_KEYS, scale,
				    s + t0 + i, L);
		for (; i < rows; i++)
			rows_scores(q, n_h, n_vec, K + (size_t)i * kv->ld, kv->ld, 1, scale,
				    s + t0 + i, L);
	}
}

/* out for vectors [v0, v0 + n_cv) of every head: n_h * n_cv <= ATTEND_SUMS sums. */
static ALWAYS_INLINE void heads_values(const uint32_t n_h, const uint32_t n_vec, uint32_t v0,
				       const uint32_t n_cv, const struct bn_kv_view *kv, uint32_t L,
				       const float *s, float *out)
{
	__m256 o[ATTEND_SUMS];
	for (uint32_t a = 0; a < n_h * n_cv; a++)
		o[a] = _mm256_setzero_ps();
	uint32_t rows;
	for (uint32_t t0 = 0; t0 < L; t0 += rows) {
		const float *V = bn_kv_rows(kv, kv->V, t0, L, &rows);
		for (uint32_t i = 0; i < rows; i++) {
			const float *vt = V + (size_t)i * kv->ld + 8 * v0;
			for (uint32_t h = 0; h < n_h; h++) {
				__m256 p = _mm256_set1_ps(s[(size_t)h * L + t0 + i]);
				for (uint32_t c = 0; c < n_cv; c++)
					o[h * n_cv + c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vt + 8 * c),
									  o[h * n_cv + c]);
			}
		}
	}
	for (uint32_t h = 0; h < n_h; h++)
		for (uint32_t c = 0; c < n_cv; c++)
			_mm256_storeu_ps(out + (size_t)h * n_vec * 8 + 8 * (v0 + c), o[h * n_cv + c]);
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
	heads_fixed(q, 1, d / 8, kv, L, scale, s, out);
}

static void attend_avx2(const float *q, const struct bn_kv_view *kv, uint32_t L, uint32_t d,
			float scale, float *s, float *out)
{
	if (d % 8) {
		bn_kernels_scalar.attend(q, kv, L, d, scale, s, out);
		return;
	}
	if (d == 128)
		heads_fixed(q, 1, 16, kv, L, scale, s, out);
	else if (d == 64)
		heads_fixed(q, 1, 8, kv, L, scale, s, out);
	else
		attend_any(q, kv, L, d, scale, s, out);
}

/* Head dims of 64 and 128 with groups of 1, 2, 4 or 8 heads (the shapes of the models we
 * serve) with their counts fixed at compile time; anything else one attend per head. */
static void attend_heads_avx2(const float *q, uint32_t n_heads, const struct bn_kv_view *kv,
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
		HEADS_CASE(16)
	if (d == 64)
		HEADS_CASE(8)
#undef HEADS_CASE
	bn_attend_each_head(attend_avx2, q, n_heads, kv, L, d, scale, s, out);
}

/* 32-bit sums of two int16 products each (wrapping, as vpmaddwd + vpaddd do). */
static ALWAYS_INLINE __m256i dot_i16(__m256i acc, __m256i w, __m256i x)
{
#ifdef BN_AVXVNNI
	return _mm256_dpwssd_avx_epi32(acc, w, x);
#else
	return _mm256_add_epi32(acc, _mm256_madd_epi16(w, x));
#endif
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

#define I8_COLS 6 /* batch rows per tile: one accumulator each, 2 for a row's weights */

/* One weight row against n_cols batch rows: each 32-byte step is widened to 16 bits once and
 * meets every batch row's activations (from L1: a 2560-input row is 5 KB of them). */
static ALWAYS_INLINE void i8_row(const int8_t *row, uint32_t row_bytes, const int16_t *x,
				 uint32_t ldx, const uint32_t n_cols, int64_t *y, uint32_t ldy,
				 const char *end)
{
	__m256i acc[I8_COLS];
	for (uint32_t b = 0; b < n_cols; b++)
		acc[b] = _mm256_setzero_si256();
	for (uint32_t k = 0; k < row_bytes; k += 32) {
		const char *ahead = (const char *)row + k + WEIGHT_PREFETCH_BYTES;
		if (ahead < end)
			_mm_prefetch(ahead, _MM_HINT_T0);
		__m256i w0 = _mm256_cvtepi8_epi16(_mm_load_si128((const __m128i *)(row + k)));
		__m256i w1 = _mm256_cvtepi8_epi16(_mm_load_si128((const __m128i *)(row + k + 16)));
		for (uint32_t b = 0; b < n_cols; b++) {
			const int16_t *xb = x + (size_t)b * ldx + k;
			acc[b] = dot_i16(acc[b], w0, _mm256_loadu_si256((const __m256i *)xb));
			acc[b] = dot_i16(acc[b], w1, _mm256_loadu_si256((const __m256i *)(xb + 16)));
		}
	}
	for (uint32_t b = 0; b < n_cols; b++)
		y[(size_t)b * ldy] = lanes_total8(acc[b]);
}

/* row_bytes is a multiple of 64 (struct bn_i8_matrix). */
static void i8_dots_avx2(const struct bn_i8_matrix *w, uint32_t o0, uint32_t o1,
			 const int16_t *x, uint32_t ldx, uint32_t n_b, int64_t *y, uint32_t ldy)
{
	const char *end = (const char *)(w->q + (size_t)w->n_out * w->row_bytes);
	for (uint32_t o = o0; o < o1; o++) {
		const int8_t *row = w->q + (size_t)o * w->row_bytes;
		for (uint32_t b = 0; b < n_b; b += I8_COLS) {
			const int16_t *xb = x + (size_t)b * ldx;
			int64_t *yb = y + (size_t)b * ldy + o - o0;
			switch (n_b - b < I8_COLS ? n_b - b : I8_COLS) { /* constant tile widths */
			case 6: i8_row(row, w->row_bytes, xb, ldx, 6, yb, ldy, end); break;
			case 5: i8_row(row, w->row_bytes, xb, ldx, 5, yb, ldy, end); break;
			case 4: i8_row(row, w->row_bytes, xb, ldx, 4, yb, ldy, end); break;
			case 3: i8_row(row, w->row_bytes, xb, ldx, 3, yb, ldy, end); break;
			case 2: i8_row(row, w->row_bytes, xb, ldx, 2, yb, ldy, end); break;
			default: i8_row(row, w->row_bytes, xb, ldx, 1, yb, ldy, end); break;
			}
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
				acc = dot_i16(acc, wv, xv);
			}
			y[(size_t)b * ldy + o] =
				((float)lanes_total8(acc) * w->scale[o]) * x->inv_scale[b];
		}
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Int8 quantization and the element-wise parts, to the scalar definitions' bits               */
/* ------------------------------------------------------------------------------------------ */

/* Lanes [0, n) of 8 set (all bits), the others clear: the mask of vmaskmovps. */
static ALWAYS_INLINE __m256i first_lanes(uint32_t n)
{
	const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx);
}

/* v, which the compiler may no longer fold into a neighbouring operation: this file is built
 * with FMA and GNU C's fp-contract=fast, and a product and a sum fused into one rounding would
 * not be the scalar definitions' two. */
static ALWAYS_INLINE __m256 unfused(__m256 v)
{
	__asm__("" : "+x"(v));
	return v;
}

/* vmaxps returns its second operand when the first is NaN, as fmaxf(amax, NaN) keeps amax;
 * lanes past k read 0, which changes no maximum of absolute values. */
static float absmax_avx2(const float *row, uint32_t k)
{
	const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	__m256 amax = _mm256_setzero_ps();
	for (uint32_t i = 0; i < k; i += 8) {
		__m256 v = k - i >= 8 ? _mm256_loadu_ps(row + i)
				      : _mm256_maskload_ps(row + i, first_lanes(k - i));
		amax = _mm256_max_ps(_mm256_and_ps(v, abs_mask), amax);
	}
	__m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
	m = _mm_max_ps(m, _mm_movehl_ps(m, m));
	m = _mm_max_ss(m, _mm_movehdup_ps(m));
	return _mm_cvtss_f32(m);
}

/* Eight activations quantized as bn_quantize_rows does each: the product rounded to nearest
 * even (nearbyintf under the default mode), NaN to 0, clamped to [-128, 127]. */
static ALWAYS_INLINE __m256i quantize8(const float *p, __m256 s)
{
	__m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(p), s),
				   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	v = _mm256_andnot_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), v);
	v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-128.0f)), _mm256_set1_ps(127.0f));
	return _mm256_cvtps_epi32(v);
}

static void quantize_rows_avx2(const float *x, uint32_t ldx, uint32_t n, struct bn_q8_rows *out)
{
	/* packs interleave the 128-bit halves: this puts 32 bytes back in order */
	const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	for (uint32_t r = 0; r < n; r++) {
		const float *row = x + (size_t)r * ldx;
		int8_t *q = out->q + (size_t)r * out->k_pad;
		float amax = absmax_avx2(row, out->k);
		float sc = amax > 0.0f ? 127.0f / amax : 0.0f;
		const __m256 s = _mm256_set1_ps(sc);
		__m256i sum = _mm256_setzero_si256();
		uint32_t k = 0;
		for (; k + 32 <= out->k; k += 32) {
			__m256i a = quantize8(row + k, s), b = quantize8(row + k + 8, s);
			__m256i c = quantize8(row + k + 16, s), d = quantize8(row + k + 24, s);
			sum = _mm256_add_epi32(sum, _mm256_add_epi32(_mm256_add_epi32(a, b),
								     _mm256_add_epi32(c, d)));
			__m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(a, b),
							   _mm256_packs_epi32(c, d));
			_mm256_storeu_si256((__m256i *)(q + k),
					    _mm256_permutevar8x32_epi32(bytes, order));
		}
		int32_t total = hsum_epi32(sum);
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

/* The scalar definition's BN_RMSNORM_LANES (16) lanes are two registers: lane l takes x[i]
 * for i % 16 == l, in order; the tail adds into its first lanes only (the others add the 0
 * squares of masked-out lanes, which leaves them as they were: a lane is never -0); then the
 * lanes are added in lane order. */
static float sum_squares_avx2(const float *x, uint32_t n)
{
	__m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
	uint32_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
		lo = _mm256_add_ps(lo, unfused(_mm256_mul_ps(a, a)));
		hi = _mm256_add_ps(hi, unfused(_mm256_mul_ps(b, b)));
	}
	if (i < n) {
		uint32_t left = n - i;
		__m256 a = _mm256_maskload_ps(x + i, first_lanes(left));
		__m256 b = _mm256_maskload_ps(x + i + 8, first_lanes(left > 8 ? left - 8 : 0));
		lo = _mm256_add_ps(lo, unfused(_mm256_mul_ps(a, a)));
		hi = _mm256_add_ps(hi, unfused(_mm256_mul_ps(b, b)));
	}
	float lane[BN_RMSNORM_LANES], ss = 0.0f;
	_mm256_storeu_ps(lane, lo);
	_mm256_storeu_ps(lane + 8, hi);
	for (uint32_t l = 0; l < BN_RMSNORM_LANES; l++)
		ss += lane[l];
	return ss;
}

static void rmsnorm_avx2(float *out, const float *x, const float *w, uint32_t n, float eps)
{
	float inv_s = 1.0f / sqrtf(sum_squares_avx2(x, n) / (float)n + eps);
	const __m256 inv = _mm256_set1_ps(inv_s);
	uint32_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), inv);
		_mm256_storeu_ps(out + i, _mm256_mul_ps(v, _mm256_loadu_ps(w + i)));
	}
	for (; i < n; i++)
		out[i] = x[i] * inv_s * w[i];
}

/* The ordered compare is false for NaN, so NaN gates become 0 as in the scalar mask. */
static void relu2_mul_avx2(float *g, const float *u, uint32_t n)
{
	uint32_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(g + i);
		__m256 r = _mm256_and_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ), v);
		__m256 rr = unfused(_mm256_mul_ps(r, r));
		_mm256_storeu_ps(g + i, _mm256_mul_ps(rr, _mm256_loadu_ps(u + i)));
	}
	if (i < n)
		bn_relu2_mul(g + i, u + i, n - i);
}

static void add_avx2(float *x, const float *y, uint32_t n)
{
	uint32_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
	if (i < n)
		bn_add(x + i, y + i, n - i);
}

/* XXH3 inlined and compiled for AVX2 (xxhash.h picks the vector path from the flags). */
#define XXH_INLINE_ALL
#include <xxhash.h>

static uint64_t hash64_avx2(const void *p, size_t n)
{
	return XXH3_64bits(p, n);
}

#ifdef BN_AVXVNNI
const struct bn_kernels bn_kernels_avxvnni = {
	.name = "avxvnni",
#else
const struct bn_kernels bn_kernels_avx2 = {
	.name = "avx2",
#endif
	.t2_gemm = t2_gemm_avx2,
#ifdef BN_AVXVNNI
	.t2g_gemm = bn_t2g_gemm_avxvnni,
#else
	.t2g_gemm = bn_t2g_gemm_avx2,
#endif
	.f_gemm = f_gemm_avx2,
	.attend = attend_avx2,
	.attend_heads = attend_heads_avx2,
	.quantize_rows = quantize_rows_avx2,
	.rmsnorm = rmsnorm_avx2,
	.relu2_mul = relu2_mul_avx2,
	.add = add_avx2,
	.i8_dots = i8_dots_avx2,
	.i8_gemm = i8_gemm_avx2,
	.hash64 = hash64_avx2,
};
