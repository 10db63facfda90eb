/* SPDX-License-Identifier: MIT */
/*
 * t2g_avx2.c — the grouped ternary product (kernels.h: t2g_gemm) with AVX2, compiled again as
 * t2g_avxvnni.c with AVX-VNNI's vpdpbusd for the integer products. The unit is the 128-weight
 * block (plane pair 0-1 or 2-3 of a T2 chunk): a group's blocks are summed exactly in 32-bit
 * lanes, the lanes added, the activations' block sums taken off, and then one fused
 * multiply-add per group in group order, so each output has the scalar variant's bits.
 *  - one batch row: one weight row streamed at a time, its fused multiply-adds one chain;
 *  - more: tiles of 2 weight rows x 4 batch rows (t2_blocking.h's blocking), the eight sums
 *    of a group reduced together into one vector whose lane r * 4 + b is output (r, b), so
 *    the group's eight multiply-adds are one vector instruction, each lane its own chain.
 * Without VNNI the products go through vpmaddubsw into 16-bit sums for one block (4 steps of
 * pairs of at most 512 in magnitude: no overflow) and are widened once per block.
 */
#include "t2_blocking.h"
#include "t2g.h"

#include <immintrin.h>
#include <math.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))
#define TILE_ROWS 2
#define TILE_COLS 4
#define WEIGHT_PREFETCH_BYTES 8192 /* as the ungrouped kernels (kernels_avx2.c) */

#ifdef BN_AVXVNNI
#define T2G_GEMM bn_t2g_gemm_avxvnni
static ALWAYS_INLINE __m256i dot32(__m256i acc, __m256i codes, __m256i x)
{
	return _mm256_dpbusd_avx_epi32(acc, codes, x);
}
static ALWAYS_INLINE __m256i block_dot(__m256i acc, __m256i codes, __m256i x)
{
	return _mm256_dpbusd_avx_epi32(acc, codes, x);
}
static ALWAYS_INLINE __m256i block_widen(__m256i acc32, __m256i acc)
{
	return _mm256_add_epi32(acc32, acc);
}
#else
#define T2G_GEMM bn_t2g_gemm_avx2
static ALWAYS_INLINE __m256i dot32(__m256i acc, __m256i codes, __m256i x)
{
	__m256i pairs = _mm256_maddubs_epi16(codes, x);
	return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}
static ALWAYS_INLINE __m256i block_dot(__m256i acc, __m256i codes, __m256i x)
{
	return _mm256_add_epi16(acc, _mm256_maddubs_epi16(codes, x));
}
static ALWAYS_INLINE __m256i block_widen(__m256i acc32, __m256i acc)
{
	return _mm256_add_epi32(acc32, _mm256_madd_epi16(acc, _mm256_set1_epi16(1)));
}
#endif

static int32_t hsum_epi32(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
	return _mm_cvtsi128_si32(s);
}

/* Codes of plane p of a 32-byte half of a chunk. */
static ALWAYS_INLINE __m256i plane_codes(__m256i half, uint32_t p)
{
	return _mm256_and_si256(_mm256_srl_epi16(half, _mm_cvtsi32_si128(2 * (int)p)),
				_mm256_set1_epi8(3));
}

/* One weight row against one batch row. */
static void t2g_row(const struct bn_t2_matrix *w, uint32_t o, const struct bn_q8_rows *x,
		    float *y)
{
	const uint8_t *row = w->codes + (size_t)o * w->row_bytes;
	const uint8_t *end = w->codes + (size_t)w->n_out * w->row_bytes;
	const uint32_t n_groups = w->n_in / w->group, blocks = w->group / BN_T2_GROUP_BLOCK;
	const float *gs = w->gscale + (size_t)o * n_groups;
	float s = 0.0f;
	for (uint32_t g = 0; g < n_groups; g++) {
		__m256i acc[2] = { _mm256_setzero_si256(), _mm256_setzero_si256() };
		for (uint32_t j = g * blocks; j < (g + 1) * blocks; j++) {
			const uint8_t *chunk = row + (size_t)(j / 2) * BN_T2_CHUNK_BYTES;
			if (j % 2 == 0 && chunk + WEIGHT_PREFETCH_BYTES < end)
				_mm_prefetch((const char *)chunk + WEIGHT_PREFETCH_BYTES, _MM_HINT_T0);
			const int8_t *xq = x->q + (size_t)(j / 2) * BN_T2_CHUNK;
			for (uint32_t h = 0; h < 2; h++) {
				__m256i wv = _mm256_loadu_si256((const __m256i *)(chunk + 32 * h));
				for (uint32_t p = 2 * (j % 2); p < 2 * (j % 2) + 2; p++)
					acc[p % 2] = dot32(acc[p % 2], plane_codes(wv, p),
							   _mm256_loadu_si256((const __m256i *)(xq + 64 * p +
												32 * h)));
			}
		}
		int32_t a = hsum_epi32(_mm256_add_epi32(acc[0], acc[1])) -
			    bn_t2g_group_xsum(x, 0, g, blocks);
		s = fmaf((float)a, gs[g], s);
	}
	y[o] = s * x->inv_scale[0];
}

/* Eight vectors of 32-bit sums to one whose lane i is the sum of v[i]'s lanes. */
static ALWAYS_INLINE __m256i sum_eight(const __m256i v[8])
{
	__m256i t01 = _mm256_hadd_epi32(v[0], v[1]), t23 = _mm256_hadd_epi32(v[2], v[3]);
	__m256i t45 = _mm256_hadd_epi32(v[4], v[5]), t67 = _mm256_hadd_epi32(v[6], v[7]);
	__m256i lo = _mm256_hadd_epi32(t01, t23), hi = _mm256_hadd_epi32(t45, t67);
	return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20),
				_mm256_permute2x128_si256(lo, hi, 0x31));
}

/* Block j of rows o.. (n_rows) against batch rows 0..n_cols of x, added into acc32. */
static ALWAYS_INLINE void tile_block(const struct bn_t2_matrix *w, uint32_t o,
				     const uint32_t n_rows, const struct bn_q8_rows *x,
				     const uint32_t n_cols, uint32_t j,
				     __m256i acc32[TILE_ROWS * TILE_COLS])
{
	const uint8_t *end = w->codes + (size_t)w->n_out * w->row_bytes;
	const uint8_t *chunk = w->codes + (size_t)o * w->row_bytes +
			       (size_t)(j / 2) * BN_T2_CHUNK_BYTES;
	__m256i acc[TILE_ROWS * TILE_COLS];
	for (uint32_t i = 0; i < TILE_ROWS * TILE_COLS; i++)
		acc[i] = _mm256_setzero_si256();
	for (uint32_t r = 0; r < n_rows && j % 2 == 0; r++)
		if (chunk + r * w->row_bytes + WEIGHT_PREFETCH_BYTES < end)
			_mm_prefetch((const char *)chunk + r * w->row_bytes + WEIGHT_PREFETCH_BYTES,
				     _MM_HINT_T0);
	for (uint32_t h = 0; h < 2; h++) {
		__m256i wv[TILE_ROWS];
		for (uint32_t r = 0; r < n_rows; r++)
			wv[r] = _mm256_loadu_si256((const __m256i *)(chunk + r * w->row_bytes + 32 * h));
		for (uint32_t p = 2 * (j % 2); p < 2 * (j % 2) + 2; p++) {
			__m256i pl[TILE_ROWS];
			for (uint32_t r = 0; r < n_rows; r++)
				pl[r] = plane_codes(wv[r], p);
			for (uint32_t b = 0; b < n_cols; b++) {
				__m256i xv = _mm256_loadu_si256(
					(const __m256i *)(x->q + (size_t)b * x->k_pad +
							  (size_t)(j / 2) * BN_T2_CHUNK + 64 * p + 32 * h));
				for (uint32_t r = 0; r < n_rows; r++)
					acc[r * TILE_COLS + b] = block_dot(acc[r * TILE_COLS + b], pl[r], xv);
			}
		}
	}
	for (uint32_t i = 0; i < TILE_ROWS * TILE_COLS; i++)
		acc32[i] = block_widen(acc32[i], acc[i]);
}

/* Rows [o, o + n_rows) against batch rows 0..n_cols of x (already offset), lane r * 4 + b of
 * the vectors standing for output (r, b); lanes past the tile compute zeros and are not
 * stored. */
static ALWAYS_INLINE void t2g_tile(const struct bn_t2_matrix *w, uint32_t o,
				   const uint32_t n_rows, const struct bn_q8_rows *x,
				   const uint32_t n_cols, float *y, uint32_t ldy)
{
	const uint32_t n_groups = w->n_in / w->group, blocks = w->group / BN_T2_GROUP_BLOCK;
	__m256 s = _mm256_setzero_ps();
	for (uint32_t g = 0; g < n_groups; g++) {
		__m256i acc32[TILE_ROWS * TILE_COLS];
		for (uint32_t i = 0; i < TILE_ROWS * TILE_COLS; i++)
			acc32[i] = _mm256_setzero_si256();
		for (uint32_t j = g * blocks; j < (g + 1) * blocks; j++)
			tile_block(w, o, n_rows, x, n_cols, j, acc32);
		int32_t xs[TILE_COLS] = { 0 };
		float sc[TILE_ROWS] = { 0 };
		for (uint32_t b = 0; b < n_cols; b++)
			xs[b] = bn_t2g_group_xsum(x, b, g, blocks);
		for (uint32_t r = 0; r < n_rows; r++)
			sc[r] = w->gscale[(size_t)(o + r) * n_groups + g];
		__m256i xv = _mm256_setr_epi32(xs[0], xs[1], xs[2], xs[3], xs[0], xs[1], xs[2], xs[3]);
		__m256 scale = _mm256_setr_ps(sc[0], sc[0], sc[0], sc[0], sc[1], sc[1], sc[1], sc[1]);
		__m256 a = _mm256_cvtepi32_ps(_mm256_sub_epi32(sum_eight(acc32), xv));
		s = _mm256_fmadd_ps(a, scale, s);
	}
	float inv[TILE_COLS] = { 0 }, out[TILE_ROWS * TILE_COLS];
	for (uint32_t b = 0; b < n_cols; b++)
		inv[b] = x->inv_scale[b];
	_mm256_storeu_ps(out, _mm256_mul_ps(s, _mm256_setr_ps(inv[0], inv[1], inv[2], inv[3],
							       inv[0], inv[1], inv[2], inv[3])));
	for (uint32_t r = 0; r < n_rows; r++)
		for (uint32_t b = 0; b < n_cols; b++)
			y[(size_t)b * ldy + o + r] = out[r * TILE_COLS + b];
}

/* A tile of bn_gemm_blocked, each shape its own copy so that the counts are constants. */
static void t2g_tile_at(const void *mat, uint32_t o, uint32_t n_rows, const struct bn_q8_rows *x,
			uint32_t b0, uint32_t n_cols, float *y, uint32_t ldy)
{
	const struct bn_t2_matrix *w = mat;
	struct bn_q8_rows xs = *x;
	xs.q += (size_t)b0 * xs.k_pad;
	xs.inv_scale += b0;
	xs.bsum += (size_t)b0 * bn_q8_blocks(xs.k_pad);
	y += (size_t)b0 * ldy;
#define TILE_CASE(r, c)                                     \
	case (r - 1) * TILE_COLS + (c - 1):                 \
		t2g_tile(w, o, r, &xs, c, y, ldy);          \
		break
	switch ((n_rows - 1) * TILE_COLS + (n_cols - 1)) {
	TILE_CASE(2, 4); TILE_CASE(2, 3); TILE_CASE(2, 2); TILE_CASE(2, 1);
	TILE_CASE(1, 4); TILE_CASE(1, 3); TILE_CASE(1, 2); TILE_CASE(1, 1);
	default: break; /* no rows or no batch rows */
	}
#undef TILE_CASE
}

void T2G_GEMM(const struct bn_t2_matrix *w, uint32_t o0, uint32_t o1, const struct bn_q8_rows *x,
	      uint32_t n_b, float *y, uint32_t ldy)
{
	if (n_b == 1) {
		for (uint32_t o = o0; o < o1; o++)
			t2g_row(w, o, x, y);
		return;
	}
	bn_gemm_blocked(w, w->row_bytes, o0, o1, x, n_b, y, ldy, TILE_ROWS, TILE_COLS, t2g_tile_at);
}
