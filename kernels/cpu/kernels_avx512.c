/* SPDX-License-Identifier: MIT */
/*
 * kernels_avx512.c — AVX-512 VNNI variants of the integer products (ternary and int8
 * weights, activation quantization) and the variant's kernel table; the float parts are in
 * float_avx512.c (kernels_avx512.h). Compiled with AVX-512 flags (Makefile), called only when
 * cpuid says the CPU and OS support them.
 *
 * The matrix kernels, here and in float_avx512.c, stream one weight row at a time against a
 * tile of up to COLS batch rows: each weight vector is loaded (and unpacked or converted) once
 * per tile, and the tile's accumulators live in registers.
 */
#include "kernels_avx512.h"

#include "t2_blocking.h"
#include "t2g.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Ternary x int8                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* Plane p of a 64-byte T2 chunk, left where it lies: byte j holds the code of weight
 * 64p + j times 4^p. One AND per plane and no shift: vpdpbusd multiplies unsigned bytes up
 * to 192 without saturating, so plane p's accumulator sums 4^p times the plane's dot product
 * and an exact arithmetic shift by 2p takes the factor out at the end of the row. (No lane
 * can overflow: |lane| <= 4 * 192 * 128 per chunk, and model.c caps rows at 2^20 weights, 4096
 * chunks, far below 2^31 / 98304.) At batch 1 this is 9 instructions per chunk against 16
 * with shifts, which is what decides whether the row loop keeps up with memory. */
#define T2_PLANE(v, p) _mm512_and_si512((v), _mm512_set1_epi8((char)(3 << (2 * (p)))))

/* Chunk cc of one weight row into one set of accumulators, against n_cols batch rows. */
static ALWAYS_INLINE void t2_chunk(const uint8_t *row, const uint8_t *end,
				   const int8_t *const *xs, size_t cc, const uint32_t n_cols,
				   __m512i acc[4][COLS])
{
	const uint8_t *ahead = row + cc * BN_T2_CHUNK_BYTES + WEIGHT_PREFETCH_BYTES;
	if (ahead < end)
		_mm_prefetch((const char *)ahead, _MM_HINT_T0);
	__m512i wv = _mm512_loadu_si512(row + cc * BN_T2_CHUNK_BYTES);
	__m512i pl[4] = { T2_PLANE(wv, 0), T2_PLANE(wv, 1), T2_PLANE(wv, 2), T2_PLANE(wv, 3) };
	for (uint32_t b = 0; b < n_cols; b++)
		for (uint32_t p = 0; p < 4; p++)
			acc[p][b] = dpbusd(acc[p][b], pl[p], xs[b] + cc * BN_T2_CHUNK + 64 * p);
}

/* One weight row against n_cols batch rows. The row streams through once (one sequential
 * stream is what the prefetchers serve best: measured 31 GB/s against 20 for four rows
 * interleaved); each chunk's four planes are unpacked once and used by every batch row.
 * Integer sums are exact, so the accumulator split (by plane, and for one or two batch rows
 * also by chunk parity, to hide the vpdpbusd latency) cannot change a result. The chunk loop
 * has no conditions inside (the odd chunk is a tail): with them the compiler kept the
 * accumulators in memory. */
static ALWAYS_INLINE void t2_row(const struct bn_t2_matrix *w, uint32_t o,
				 const struct bn_q8_rows *x, uint32_t b0, const uint32_t n_cols,
				 float *y, uint32_t ldy)
{
	const uint32_t sets = n_cols <= 2 ? 2 : 1;
	const uint8_t *row = w->codes + (size_t)o * w->row_bytes;
	const uint8_t *end = w->codes + (size_t)w->n_out * w->row_bytes;
	const int8_t *xs[COLS];
	for (uint32_t b = 0; b < n_cols; b++)
		xs[b] = x->q + (size_t)(b0 + b) * x->k_pad;
	__m512i acc[2][4][COLS];
	for (uint32_t s = 0; s < sets; s++)
		for (uint32_t p = 0; p < 4; p++)
			for (uint32_t b = 0; b < n_cols; b++)
				acc[s][p][b] = _mm512_setzero_si512();
	const uint32_t n_chunks = w->row_bytes / BN_T2_CHUNK_BYTES;
	uint32_t c = 0;
	for (; c + sets <= n_chunks; c += sets)
		for (uint32_t s = 0; s < sets; s++)
			t2_chunk(row, end, xs, c + s, n_cols, acc[s]);
	for (; c < n_chunks; c++)
		t2_chunk(row, end, xs, c, n_cols, acc[0]);
	for (uint32_t b = 0; b < n_cols; b++) {
		__m512i t = _mm512_setzero_si512();
		for (uint32_t p = 0; p < 4; p++) {
			__m512i plane = acc[0][p][b];
			for (uint32_t s = 1; s < sets; s++)
				plane = _mm512_add_epi32(plane, acc[s][p][b]);
			t = _mm512_add_epi32(t, _mm512_srai_epi32(plane, 2 * p));
		}
		int32_t sum = _mm512_reduce_add_epi32(t) - x->sum[b0 + b];
		y[(size_t)(b0 + b) * ldy + o] = ((float)sum * w->scale[o]) * x->inv_scale[b0 + b];
	}
}

/* T2_TILE_ROWS weight rows against COLS batch rows, for batches of more than COLS rows: one
 * accumulator per (weight row, batch row) pair, the planes shifted down to their codes so
 * that all four can add into it. Each activation vector is then loaded once and used by four
 * rows, and each unpacked plane by four batch rows: per chunk of four rows, 20 loads and 28
 * unpacking instructions for 64 vpdpbusd, against 68 loads and 16 for t2_row (one row, four
 * batch rows, an accumulator per plane, activations read from memory by each vpdpbusd),
 * whose loads were what kept it from the vpdpbusd peak. One core, 2B4T shapes, batch 16, side
 * by side with identical outputs: 6912 x 2560, 287-295 against 358-370 G multiply-adds/s;
 * 65536 x 2560 (from memory), 277-281 against 324-340. Integer sums are exact, so the result
 * is t2_row's to the bit; a lane adds at most 4 x 2 x 128 per plane and chunk, 4096 per
 * chunk, so the 4096 chunks of the longest row (model.c) stay far below 2^31.
 * Tried against it (two cores, the 2B4T layers from memory, batch 16, alternating in one
 * process; docs/PERFORMANCE.md): 2 rows x 8 batch rows, half the unpacking per vpdpbusd and
 * twice the activation loads, 0.85-0.87 x its speed; GFNI's affine instruction unpacking a
 * plane in one instruction instead of two, 0.98-1.01 x; no unpacking at all (wrong sums, a
 * bound) only 1.05-1.07 x. */
#define T2_TILE_ROWS 4
_Static_assert(T2_TILE_ROWS * COLS == 16, "t2_quad_store sums sixteen accumulators");

/* A whole tile's outputs from its accumulators acc[b * T2_TILE_ROWS + r]: lane 4b + r is
 * ((float)(sum - x sum) * row scale) * column inverse scale, t2_row's operations in its
 * order (two roundings, no FMA), so the same bits; then four rows of four outputs. Against
 * sixteen reductions and scalar stores: batch-16 decode 1.015 x, a 256-token prefill 1.029 x
 * (medians of ten alternating pairs in one process, 2B4T shape). */
static ALWAYS_INLINE void t2_quad_store(const __m512i acc[16], const struct bn_t2_matrix *w,
					uint32_t o, const struct bn_q8_rows *x, uint32_t b0,
					float *y, uint32_t ldy)
{
	const __m512i column = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
	__m512i xsum = _mm512_permutexvar_epi32(
		column, _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(x->sum + b0))));
	__m512 inv = _mm512_permutexvar_ps(column,
					   _mm512_castps128_ps512(_mm_loadu_ps(x->inv_scale + b0)));
	__m512 scale = _mm512_broadcast_f32x4(_mm_loadu_ps(w->scale + o));
	__m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(sum_sixteen(acc), xsum));
	v = _mm512_mul_ps(_mm512_mul_ps(v, scale), inv);
	_mm_storeu_ps(y + (size_t)b0 * ldy + o, _mm512_extractf32x4_ps(v, 0));
	_mm_storeu_ps(y + (size_t)(b0 + 1) * ldy + o, _mm512_extractf32x4_ps(v, 1));
	_mm_storeu_ps(y + (size_t)(b0 + 2) * ldy + o, _mm512_extractf32x4_ps(v, 2));
	_mm_storeu_ps(y + (size_t)(b0 + 3) * ldy + o, _mm512_extractf32x4_ps(v, 3));
}

static void t2_quad(const struct bn_t2_matrix *w, uint32_t o, const struct bn_q8_rows *x,
		    uint32_t b0, float *y, uint32_t ldy)
{
	const uint8_t *row = w->codes + (size_t)o * w->row_bytes;
	const uint8_t *end = w->codes + (size_t)w->n_out * w->row_bytes;
	const int8_t *xs[COLS];
	for (uint32_t b = 0; b < COLS; b++)
		xs[b] = x->q + (size_t)(b0 + b) * x->k_pad;
	__m512i acc[COLS * T2_TILE_ROWS]; /* [batch row][weight row] */
	for (uint32_t i = 0; i < COLS * T2_TILE_ROWS; i++)
		acc[i] = _mm512_setzero_si512();
	const uint32_t n_chunks = w->row_bytes / BN_T2_CHUNK_BYTES;
	for (uint32_t c = 0; c < n_chunks; c++) {
		__m512i wv[T2_TILE_ROWS];
		for (uint32_t r = 0; r < T2_TILE_ROWS; r++) {
			const uint8_t *chunk = row + (size_t)r * w->row_bytes + c * BN_T2_CHUNK_BYTES;
			if (chunk + WEIGHT_PREFETCH_BYTES < end)
				_mm_prefetch((const char *)chunk + WEIGHT_PREFETCH_BYTES, _MM_HINT_T0);
			wv[r] = _mm512_loadu_si512(chunk);
		}
		for (uint32_t p = 0; p < 4; p++) {
			__m512i codes[T2_TILE_ROWS];
			for (uint32_t r = 0; r < T2_TILE_ROWS; r++)
				codes[r] = t2_plane_codes(wv[r], p);
			for (uint32_t b = 0; b < COLS; b++) {
				__m512i xv = _mm512_load_si512(xs[b] + c * BN_T2_CHUNK + 64 * p);
				for (uint32_t r = 0; r < T2_TILE_ROWS; r++)
					acc[b * T2_TILE_ROWS + r] =
						dpbusd_reg(acc[b * T2_TILE_ROWS + r], codes[r], xv);
			}
		}
	}
	t2_quad_store(acc, w, o, x, b0, y, ldy);
}

/* Rows [o, o1), each streamed once, against n_cols <= COLS batch rows. */
static void t2_rows(const struct bn_t2_matrix *w, uint32_t o, uint32_t o1,
		    const struct bn_q8_rows *x, uint32_t b0, uint32_t n_cols, float *y, uint32_t ldy)
{
	switch (n_cols) { /* constant column counts keep the tile in registers */
	case 4: for (; o < o1; o++) t2_row(w, o, x, b0, 4, y, ldy); break;
	case 3: for (; o < o1; o++) t2_row(w, o, x, b0, 3, y, ldy); break;
	case 2: for (; o < o1; o++) t2_row(w, o, x, b0, 2, y, ldy); break;
	case 1: for (; o < o1; o++) t2_row(w, o, x, b0, 1, y, ldy); break;
	default: break; /* no batch rows */
	}
}

/* A tile of bn_gemm_blocked: through t2_quad when it is whole, else row by row. */
static void t2_tile(const void *mat, uint32_t o, uint32_t n_rows, const struct bn_q8_rows *x,
		    uint32_t b0, uint32_t n_cols, float *y, uint32_t ldy)
{
	const struct bn_t2_matrix *w = mat;
	if (n_rows == T2_TILE_ROWS && n_cols == COLS)
		t2_quad(w, o, x, b0, y, ldy);
	else
		t2_rows(w, o, o + n_rows, x, b0, n_cols, y, ldy);
}

static void t2_gemm_avx512(const struct bn_t2_matrix *w, uint32_t o0, uint32_t o1,
			   const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy)
{
	/* One batch tile: nothing to block, and one sequential weight stream, which is what
	 * keeps a memory-bound batch this small at the read bandwidth (t2_row). */
	if (n_b <= COLS) {
		t2_rows(w, o0, o1, x, 0, n_b, y, ldy);
		return;
	}
	bn_gemm_blocked(w, w->row_bytes, o0, o1, x, n_b, y, ldy, T2_TILE_ROWS, COLS, t2_tile);
}

/* ------------------------------------------------------------------------------------------ */
/* Int8 quantization of activations                                                            */
/* ------------------------------------------------------------------------------------------ */

/* bn_quantize_rows 16 lanes at a time, the same operations per element: vmaxps returns its
 * second operand when the first is NaN, as fmaxf(amax, NaN) keeps amax; roundscale to nearest
 * is nearbyintf under the default rounding mode; NaN products become 0 before the clamp. */
static float absmax_avx512(const float *row, uint32_t k)
{
	__m512 amax = _mm512_setzero_ps();
	for (uint32_t i = 0; i < k; i += 16) {
		__m512 v = _mm512_maskz_loadu_ps(lanes_from(i, k), row + i);
		amax = _mm512_max_ps(_mm512_abs_ps(v), amax);
	}
	return _mm512_reduce_max_ps(amax);
}

static void quantize_rows_avx512(const float *x, uint32_t ldx, uint32_t n, struct bn_q8_rows *out)
{
	const __m512 lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
	for (uint32_t r = 0; r < n; r++) {
		const float *row = x + (size_t)r * ldx;
		int8_t *q = out->q + (size_t)r * out->k_pad;
		float amax = absmax_avx512(row, out->k);
		const __m512 s = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
		__m512i sum = _mm512_setzero_si512();
		for (uint32_t i = 0; i < out->k; i += 16) {
			__mmask16 m = lanes_from(i, out->k);
			__m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + i), s),
							_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
			v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_setzero_ps());
			__m512i qi = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, lo), hi));
			sum = _mm512_add_epi32(sum, qi);
			_mm512_mask_cvtepi32_storeu_epi8(q + i, m, qi);
		}
		memset(q + out->k, 0, out->k_pad - out->k);
		out->inv_scale[r] = amax / 127.0f;
		out->sum[r] = _mm512_reduce_add_epi32(sum);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Int8 rows x int16 activations (the LM-head screen)                                          */
/* ------------------------------------------------------------------------------------------ */

#define I8_COLS 8 /* batch rows per tile: one accumulator each */

static ALWAYS_INLINE __m512i dpwssd(__m512i acc, __m512i a, const int16_t *b)
{
	__asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "m"(*(const __m512i *)b));
	return acc;
}

/* The 16 lanes of a sum in 64 bits: each lane is exact in 32 (bn_i8_dot_x_max), their total
 * may not be. */
static ALWAYS_INLINE int64_t lanes_total(__m512i acc)
{
	__m512i lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(acc));
	__m512i hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(acc, 1));
	return _mm512_reduce_add_epi64(_mm512_add_epi64(lo, hi));
}

/* One weight row against n_cols batch rows: each 64-byte chunk is widened to 16 bits once
 * and meets every batch row's activations (from L1: a 2560-input row is 5 KB). */
static ALWAYS_INLINE void i8_row(const int8_t *row, uint32_t row_bytes, const int16_t *x,
				 uint32_t ldx, const uint32_t n_cols, int64_t *y, uint32_t ldy,
				 const char *end)
{
	__m512i acc[I8_COLS];
	for (uint32_t b = 0; b < n_cols; b++)
		acc[b] = _mm512_setzero_si512();
	for (uint32_t k = 0; k < row_bytes; k += 64) {
		const char *ahead = (const char *)row + k + WEIGHT_PREFETCH_BYTES;
		if (ahead < end)
			_mm_prefetch(ahead, _MM_HINT_T0);
		__m512i w0 = _mm512_cvtepi8_epi16(_mm256_load_si256((const __m256i *)(row + k)));
		__m512i w1 = _mm512_cvtepi8_epi16(_mm256_load_si256((const __m256i *)(row + k + 32)));
		for (uint32_t b = 0; b < n_cols; b++) {
			acc[b] = dpwssd(acc[b], w0, x + (size_t)b * ldx + k);
			acc[b] = dpwssd(acc[b], w1, x + (size_t)b * ldx + k + 32);
		}
	}
	for (uint32_t b = 0; b < n_cols; b++)
		y[(size_t)b * ldy] = lanes_total(acc[b]);
}

static void i8_dots_avx512(const struct bn_i8_matrix *w, uint32_t o0, uint32_t o1,
			   const int16_t *x, uint32_t ldx, uint32_t n_b, int64_t *y, uint32_t ldy)
{
	const char *end = (const char *)(w->q + (size_t)w->n_out * w->row_bytes);
	for (uint32_t o = o0; o < o1; o++) {
		const int8_t *row = w->q + (size_t)o * w->row_bytes;
		for (uint32_t b = 0; b < n_b; b += I8_COLS) {
			const int16_t *xb = x + (size_t)b * ldx;
			int64_t *yb = y + (size_t)b * ldy + o - o0;
			switch (n_b - b < I8_COLS ? n_b - b : I8_COLS) { /* constant tile widths */
			case 8: i8_row(row, w->row_bytes, xb, ldx, 8, yb, ldy, end); break;
			case 7: i8_row(row, w->row_bytes, xb, ldx, 7, yb, ldy, end); break;
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

/* ------------------------------------------------------------------------------------------ */
/* Int8 rows x int8 activations (the int8 LM head)                                             */
/* ------------------------------------------------------------------------------------------ */

/* vpdpbusd multiplies unsigned by signed bytes, and both operands here are signed: the
 * activations go in as x + 128 (x ^ 0x80 read as unsigned) and 128 * row_sum comes back out
 * of the total. A lane adds 4 products of at most 255 * 127 per instruction, 16 lanes share
 * a row: rows of up to 2^20 inputs stay below 2^31 (kernels.h). */
static ALWAYS_INLINE __m512i i8_x_unsigned(const int8_t *x)
{
	return _mm512_xor_si512(_mm512_load_si512(x), _mm512_set1_epi8((char)0x80));
}

static ALWAYS_INLINE void i8_store(const struct bn_i8_matrix *w, uint32_t o,
				   const struct bn_q8_rows *x, uint32_t b, __m512i acc, float *y,
				   uint32_t ldy)
{
	int64_t sum = lanes_total(acc) - 128 * (int64_t)w->row_sum[o];
	y[(size_t)b * ldy + o] = ((float)sum * w->scale[o]) * x->inv_scale[b];
}

/* Bytes [k, k + 64) of one weight row into one set of sums, against n_cols batch rows. */
static ALWAYS_INLINE void i8_chunk(const int8_t *row, const char *end, uint32_t k,
				   const struct bn_q8_rows *x, uint32_t b0, const uint32_t n_cols,
				   __m512i acc[COLS])
{
	const char *ahead = (const char *)row + k + WEIGHT_PREFETCH_BYTES;
	if (ahead < end)
		_mm_prefetch(ahead, _MM_HINT_T0);
	__m512i wv = _mm512_load_si512(row + k);
	for (uint32_t b = 0; b < n_cols; b++)
		acc[b] = dpbusd_reg(acc[b], i8_x_unsigned(x->q + (size_t)(b0 + b) * x->k_pad + k), wv);
}

/* One weight row against n_cols batch rows, streamed once (batches of at most COLS rows,
 * where the head is read from memory): two sets of sums, even and odd chunks, to hide the
 * vpdpbusd latency at batch 1; the odd chunk is a tail, outside the loop (t2_row). */
static ALWAYS_INLINE void i8_gemm_row(const struct bn_i8_matrix *w, uint32_t o,
				      const struct bn_q8_rows *x, uint32_t b0,
				      const uint32_t n_cols, float *y, uint32_t ldy)
{
	const int8_t *row = w->q + (size_t)o * w->row_bytes;
	const char *end = (const char *)(w->q + (size_t)w->n_out * w->row_bytes);
	__m512i even[COLS], odd[COLS];
	for (uint32_t b = 0; b < n_cols; b++)
		even[b] = odd[b] = _mm512_setzero_si512();
	uint32_t k = 0;
	for (; k + 128 <= w->row_bytes; k += 128) {
		i8_chunk(row, end, k, x, b0, n_cols, even);
		i8_chunk(row, end, k + 64, x, b0, n_cols, odd);
	}
	if (k < w->row_bytes)
		i8_chunk(row, end, k, x, b0, n_cols, even);
	for (uint32_t b = 0; b < n_cols; b++)
		i8_store(w, o, x, b0 + b, _mm512_add_epi32(even[b], odd[b]), y, ldy);
}

static void i8_gemm_rows(const struct bn_i8_matrix *w, uint32_t o, uint32_t o1,
			 const struct bn_q8_rows *x, uint32_t b0, uint32_t n_cols, float *y,
			 uint32_t ldy)
{
	switch (n_cols) { /* constant column counts keep the sums in registers */
	case 4: for (; o < o1; o++) i8_gemm_row(w, o, x, b0, 4, y, ldy); break;
	case 3: for (; o < o1; o++) i8_gemm_row(w, o, x, b0, 3, y, ldy); break;
	case 2: for (; o < o1; o++) i8_gemm_row(w, o, x, b0, 2, y, ldy); break;
	case 1: for (; o < o1; o++) i8_gemm_row(w, o, x, b0, 1, y, ldy); break;
	default: break; /* no batch rows */
	}
}

/* I8_TILE_ROWS weight rows against I8_TILE_COLS batch rows, for larger batches: each
 * activation vector is loaded and offset once for all the tile's rows, each weight vector
 * used by all its batch rows (24 sums, 3 weight vectors and an activation vector in 28 of
 * the 32 registers). The tile is wide because a weight vector feeds one vpdpbusd per batch
 * row where a T2 chunk feeds four: one core, 64,128 x 2,560 rows from memory, batch 16,
 * 3 x 8 ran at 297-304 G multiply-adds/s against 218-220 for 4 x 4, 227-235 for 4 x 6,
 * 201-216 for 5 x 5 and 305-307 for 2 x 12 (which leaves 4 of 16 rows to the row loop). */
#define I8_TILE_ROWS 3
#define I8_TILE_COLS 8

static void i8_gemm_tile_full(const struct bn_i8_matrix *w, uint32_t o, const struct bn_q8_rows *x,
			      uint32_t b0, float *y, uint32_t ldy)
{
	const int8_t *row = w->q + (size_t)o * w->row_bytes;
	const char *end = (const char *)(w->q + (size_t)w->n_out * w->row_bytes);
	__m512i acc[I8_TILE_ROWS][I8_TILE_COLS];
	for (uint32_t r = 0; r < I8_TILE_ROWS; r++)
		for (uint32_t b = 0; b < I8_TILE_COLS; b++)
			acc[r][b] = _mm512_setzero_si512();
	for (uint32_t k = 0; k < w->row_bytes; k += 64) {
		__m512i wv[I8_TILE_ROWS];
		for (uint32_t r = 0; r < I8_TILE_ROWS; r++) {
			const char *p = (const char *)(row + (size_t)r * w->row_bytes + k);
			if (p + WEIGHT_PREFETCH_BYTES < end)
				_mm_prefetch(p + WEIGHT_PREFETCH_BYTES, _MM_HINT_T0);
			wv[r] = _mm512_load_si512(p);
		}
		for (uint32_t b = 0; b < I8_TILE_COLS; b++) {
			__m512i xv = i8_x_unsigned(x->q + (size_t)(b0 + b) * x->k_pad + k);
			for (uint32_t r = 0; r < I8_TILE_ROWS; r++)
				acc[r][b] = dpbusd_reg(acc[r][b], xv, wv[r]);
		}
	}
	for (uint32_t r = 0; r < I8_TILE_ROWS; r++)
		for (uint32_t b = 0; b < I8_TILE_COLS; b++)
			i8_store(w, o + r, x, b0 + b, acc[r][b], y, ldy);
}

/* A tile of bn_gemm_blocked: whole, or its rows one by one against up to COLS batch rows
 * at a time. */
static void i8_gemm_tile(const void *mat, uint32_t o, uint32_t n_rows, const struct bn_q8_rows *x,
			 uint32_t b0, uint32_t n_cols, float *y, uint32_t ldy)
{
	const struct bn_i8_matrix *w = mat;
	if (n_rows == I8_TILE_ROWS && n_cols == I8_TILE_COLS) {
		i8_gemm_tile_full(w, o, x, b0, y, ldy);
		return;
	}
	for (uint32_t b = b0; b < b0 + n_cols; b += COLS)
		i8_gemm_rows(w, o, o + n_rows, x, b, b0 + n_cols - b < COLS ? b0 + n_cols - b : COLS,
			     y, ldy);
}

static void i8_gemm_avx512(const struct bn_i8_matrix *w, uint32_t o0, uint32_t o1,
			   const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy)
{
	if (n_b <= COLS) {
		i8_gemm_rows(w, o0, o1, x, 0, n_b, y, ldy);
		return;
	}
	bn_gemm_blocked(w, w->row_bytes, o0, o1, x, n_b, y, ldy, I8_TILE_ROWS, I8_TILE_COLS,
			i8_gemm_tile);
}

/* XXH3 inlined and compiled for AVX-512 (xxhash.h picks the vector path from the flags). */
#define XXH_INLINE_ALL
#include <xxhash.h>

static uint64_t hash64_avx512(const void *p, size_t n)
{
	return XXH3_64bits(p, n);
}

const struct bn_kernels bn_kernels_avx512 = {
	.name = "avx512vnni",
	.t2_gemm = t2_gemm_avx512,
	.t2g_gemm = bn_t2g_gemm_avx512,
	.f_gemm = f_gemm_avx512,
	.attend = attend_avx512,
	.attend_heads = attend_heads_avx512,
	.quantize_rows = quantize_rows_avx512,
	.rmsnorm = rmsnorm_avx512,
	.relu2_mul = relu2_mul_avx512,
	.add = add_avx512,
	.i8_dots = i8_dots_avx512,
	.i8_gemm = i8_gemm_avx512,
	.hash64 = hash64_avx512,
};
