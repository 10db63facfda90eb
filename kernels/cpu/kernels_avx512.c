/* SPDX-License-Identifier: MIT */
/*
 * kernels_avx512.c — AVX-512 VNNI variants. Compiled with AVX-512 flags (Makefile), called
 * only when cpuid says the CPU and OS support them.
 *
 * Both matrix kernels stream one weight row at a time against a tile of up to COLS batch
 * rows: each weight vector is loaded (and unpacked or converted) once per tile, and the
 * tile's accumulators live in registers.
 */
#include "kernels.h"
#include "t2_blocking.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define COLS 4 /* batch rows per tile */
#define ALWAYS_INLINE inline __attribute__((always_inline))

/* How far ahead of the row loops the weights are prefetched. The hardware prefetchers alone
 * left a batch-1 row loop (two threads) at 0.8-0.9 of the read bandwidth a plain load loop
 * reaches: measured side by side over 500 MB of 640- and 1728-byte ternary rows, 0.63-0.82
 * of the probe without and 0.89-0.98 with an 8 KiB lead; F16 LM-head rows 37 against 41-42
 * GB/s (probe 41-42). The
 * lead stops at the end of the matrix: a prefetch never faults, but one into an unmapped page
 * still costs a page walk, and a loop over a cache-resident matrix paid that at every pass
 * (22 against 35 GB/s). */
#define WEIGHT_PREFETCH_BYTES 8192

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

/* acc += the dot products of 4-byte groups, u8 unsigned times the 64 signed bytes at s8.
 * Written out because GCC 12 compiles _mm512_dpbusd_epi32 with a register copy of the
 * accumulator around every instruction: the batch-4 chunk loop had ~30 vmovdqa for 16
 * vpdpbusd and spilled, and ran at 75-85 % of the speed it has with this (one core, 2B4T
 * shapes, side by side: 6912 x 2560 at batch 16, 164-232 against 210-261 G multiply-adds/s;
 * at batch 1 from cache, 140-151 against 155-169). */
static ALWAYS_INLINE __m512i dpbusd(__m512i acc, __m512i u8, const int8_t *s8)
{
	__asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "m"(*(const __m512i *)s8));
	return acc;
}

/* The same with both operands in registers, for an activation vector shared by several rows. */
static ALWAYS_INLINE __m512i dpbusd_reg(__m512i acc, __m512i u8, __m512i s8)
{
	__asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
	return acc;
}

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

/* The codes of plane p of a chunk (0, 1 or 2 in each byte), shifted down to their place. */
static ALWAYS_INLINE __m512i t2_plane_codes(__m512i wv, uint32_t p)
{
	const __m512i three = _mm512_set1_epi8(3);
	return _mm512_and_si512(p ? _mm512_srli_epi16(wv, 2 * p) : wv, three);
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

/* Sixteen accumulators to one vector whose lane i holds the sum of acc[i]'s lanes: a
 * transposing tree of 45 instructions, against ~8 for each of sixteen separate reductions
 * and the scalar moves after them. Integer sums: any order gives the same sum. */
static ALWAYS_INLINE __m512i sum_sixteen(const __m512i acc[16])
{
	__m512i pairs[8], quads[4], halves[2];
	for (int i = 0; i < 8; i++) /* per 128-bit lane: a0+a2, b0+b2, a1+a3, b1+b3 */
		pairs[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(acc[2 * i], acc[2 * i + 1]),
					    _mm512_unpackhi_epi32(acc[2 * i], acc[2 * i + 1]));
	for (int i = 0; i < 4; i++) /* per 128-bit lane: a, b, c, d of that lane */
		quads[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(pairs[2 * i], pairs[2 * i + 1]),
					    _mm512_unpackhi_epi64(pairs[2 * i], pairs[2 * i + 1]));
	for (int i = 0; i < 2; i++) /* 128-bit lanes 0+1 and 2+3 of two quads */
		halves[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(quads[2 * i], quads[2 * i + 1], 0x88),
					     _mm512_shuffle_i32x4(quads[2 * i], quads[2 * i + 1], 0xdd));
	return _mm512_add_epi32(_mm512_shuffle_i32x4(halves[0], halves[1], 0x88),
				_mm512_shuffle_i32x4(halves[0], halves[1], 0xdd));
}

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

static ALWAYS_INLINE __mmask16 lanes_from(uint32_t k, uint32_t n)
{
	return k >= n ? 0 : n - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - k)) - 1);
}

/* The order of a float dot product, shared by the row kernel and the tile kernel so that a
 * row's result does not depend on its batch. The inputs go in blocks of F_K_BLOCK (the last
 * block shorter, each a multiple of 64); lane accumulator j sums the j-th quarter of every
 * block, 16 lanes at a time from its start; the inputs past the last multiple of 64 are added
 * masked, 16 per accumulator. The four are combined as (a0 + a1) + (a2 + a3) and reduced.
 * Contiguous quarters, rather than the 16-lane slices of every 64 inputs, are what let the
 * tile kernel's four passes each read whole cache lines: its passes over interleaved slices
 * touched a quarter of every activation line: one core, 65536 x 2560 F16 rows, batch 16, side
 * by side, 43-47 G multiply-adds/s with slices against 66-71 with quarters. Blocks of 640 to
 * 2048 inputs measured alike; quarters of whole 2560-input rows, 59-62. */
#define F_K_BLOCK 1024

static ALWAYS_INLINE uint32_t f_block_end(uint32_t kb, uint32_t k_full)
{
	return kb + F_K_BLOCK < k_full ? kb + F_K_BLOCK : k_full;
}

/* One step of one weight row against n_cols batch rows: 16 inputs at each of k[0..3]. The
 * weights a lead ahead of a cursor that advances by the step's bytes are prefetched. */
static ALWAYS_INLINE void f_step(const void *row, const char *ahead, const char *end,
				 const float *const *xs, const uint32_t k[4], const __mmask16 *m,
				 const uint32_t n_cols, __m512 acc[4][COLS], const uint32_t type)
{
	const uint32_t step_bytes = type == BN_TYPE_F32 ? 256 : 128;
	for (uint32_t off = 0; off < step_bytes; off += 64)
		if (ahead + off < end)
			_mm_prefetch(ahead + off, _MM_HINT_T0);
	__m512 wv[4];
	for (uint32_t j = 0; j < 4; j++)
		wv[j] = f_load(row, k[j], m[j], type);
	for (uint32_t b = 0; b < n_cols; b++)
		for (uint32_t j = 0; j < 4; j++)
			acc[j][b] = _mm512_fmadd_ps(wv[j], _mm512_maskz_loadu_ps(m[j], xs[b] + k[j]),
						    acc[j][b]);
}

/* One weight row, streamed once, against n_cols batch rows, in the order described above. */
static ALWAYS_INLINE void f_row(const struct bn_f_matrix *w, uint32_t o, const float *x,
				uint32_t ldx, uint32_t b0, const uint32_t n_cols, float *y,
				uint32_t ldy, const uint32_t type)
{
	const uint32_t step_bytes = type == BN_TYPE_F32 ? 256 : 128;
	const void *row = (const uint8_t *)w->data + (size_t)o * w->row_bytes;
	const char *end = (const char *)w->data + (size_t)w->n_out * w->row_bytes;
	const char *ahead = (const char *)row + WEIGHT_PREFETCH_BYTES;
	const float *xs[COLS];
	for (uint32_t b = 0; b < n_cols; b++)
		xs[b] = x + (size_t)(b0 + b) * ldx;
	__m512 acc[4][COLS];
	for (uint32_t j = 0; j < 4; j++)
		for (uint32_t b = 0; b < n_cols; b++)
			acc[j][b] = _mm512_setzero_ps();
	const __mmask16 full[4] = { 0xffff, 0xffff, 0xffff, 0xffff };
	const uint32_t k_full = w->n_in / 64 * 64;
	for (uint32_t kb = 0; kb < k_full; kb += F_K_BLOCK) {
		const uint32_t q = (f_block_end(kb, k_full) - kb) / 4;
		for (uint32_t i = kb; i < kb + q; i += 16, ahead += step_bytes) {
			const uint32_t k[4] = { i, i + q, i + 2 * q, i + 3 * q };
			f_step(row, ahead, end, xs, k, full, n_cols, acc, type);
		}
	}
	if (k_full < w->n_in) {
		uint32_t k[4];
		__mmask16 m[4];
		for (uint32_t j = 0; j < 4; j++) {
			k[j] = k_full + 16 * j;
			m[j] = lanes_from(k[j], w->n_in);
		}
		f_step(row, ahead, end, xs, k, m, n_cols, acc, type);
	}
	for (uint32_t b = 0; b < n_cols; b++) {
		__m512 t = _mm512_add_ps(_mm512_add_ps(acc[0][b], acc[1][b]),
					 _mm512_add_ps(acc[2][b], acc[3][b]));
		y[(size_t)(b0 + b) * ldy + o] = _mm512_reduce_add_ps(t);
	}
}

/* TILE_ROWS weight rows x COLS batch rows, for batches: four passes over each block, pass j
 * summing the block's j-th quarter of every (row, batch row) pair into one register each;
 * the four partial vectors are combined at the end exactly as f_row combines its four
 * accumulators. Every lane sees the same multiply-adds in the same order as in f_row, so the
 * results are bit-identical to it (a row's logits do not depend on its batch), while each
 * converted weight vector serves four batch rows and each activation vector four weight
 * rows. Each pass reads its quarter of the block (F16: 4 x 512 bytes of weights, 4 x 1 KiB
 * of activations) as whole, consecutive cache lines, and pass j + 1 starts where pass j
 * ended. (Why blocks beat quarters of whole rows, above, is measured, not understood.) The
 * tile that meets batch rows 0-3 prefetches the next tile's weights, which every later tile
 * of the row group then finds in cache: 44-46 against 52-55 G multiply-adds/s on one core
 * without and with. */
#define TILE_ROWS 4

static ALWAYS_INLINE void f_tile_pass(const void *const *row, const float *const *xs,
				      uint32_t k0, uint32_t k1, size_t next_tile, const char *end,
				      __m512 part[TILE_ROWS][COLS], const uint32_t type)
{
	const uint32_t elem_bytes = type == BN_TYPE_F32 ? 4 : 2;
	__m512 acc[TILE_ROWS][COLS];
	for (uint32_t r = 0; r < TILE_ROWS; r++)
		for (uint32_t b = 0; b < COLS; b++)
			acc[r][b] = part[r][b];
	for (uint32_t k = k0; k < k1; k += 16) {
		if (next_tile)
			for (uint32_t r = 0; r < TILE_ROWS; r++) {
				const char *p = (const char *)row[r] + (size_t)k * elem_bytes + next_tile;
				if (p < end)
					_mm_prefetch(p, _MM_HINT_T0);
			}
		__m512 wv[TILE_ROWS];
		for (uint32_t r = 0; r < TILE_ROWS; r++)
			wv[r] = f_load(row[r], k, 0xffff, type);
		for (uint32_t b = 0; b < COLS; b++) {
			__m512 xv = _mm512_loadu_ps(xs[b] + k);
			for (uint32_t r = 0; r < TILE_ROWS; r++)
				acc[r][b] = _mm512_fmadd_ps(wv[r], xv, acc[r][b]);
		}
	}
	for (uint32_t r = 0; r < TILE_ROWS; r++)
		for (uint32_t b = 0; b < COLS; b++)
			part[r][b] = acc[r][b];
}

static ALWAYS_INLINE void f_tile(const struct bn_f_matrix *w, uint32_t o, const float *x,
				 uint32_t ldx, uint32_t b0, float *y, uint32_t ldy,
				 const uint32_t type)
{
	const void *row[TILE_ROWS];
	for (uint32_t r = 0; r < TILE_ROWS; r++)
		row[r] = (const uint8_t *)w->data + (size_t)(o + r) * w->row_bytes;
	const char *end = (const char *)w->data + (size_t)w->n_out * w->row_bytes;
	const size_t next_tile = b0 == 0 ? (size_t)TILE_ROWS * w->row_bytes : 0;
	const float *xs[COLS];
	for (uint32_t b = 0; b < COLS; b++)
		xs[b] = x + (size_t)(b0 + b) * ldx;
	__m512 part[4][TILE_ROWS][COLS];
	for (uint32_t j = 0; j < 4; j++)
		for (uint32_t r = 0; r < TILE_ROWS; r++)
			for (uint32_t b = 0; b < COLS; b++)
				part[j][r][b] = _mm512_setzero_ps();
	const uint32_t k_full = w->n_in / 64 * 64;
	for (uint32_t kb = 0; kb < k_full; kb += F_K_BLOCK) {
		const uint32_t q = (f_block_end(kb, k_full) - kb) / 4;
		for (uint32_t j = 0; j < 4; j++)
			f_tile_pass(row, xs, kb + j * q, kb + (j + 1) * q, next_tile, end, part[j],
				    type);
	}
	if (k_full < w->n_in) /* the tail, masked as in f_row */
		for (uint32_t j = 0; j < 4; j++) {
			uint32_t k = k_full + 16 * j;
			__mmask16 m = lanes_from(k, w->n_in);
			for (uint32_t r = 0; r < TILE_ROWS; r++) {
				__m512 wv = f_load(row[r], k, m, type);
				for (uint32_t b = 0; b < COLS; b++)
					part[j][r][b] = _mm512_fmadd_ps(
						wv, _mm512_maskz_loadu_ps(m, xs[b] + k), part[j][r][b]);
			}
		}
	for (uint32_t r = 0; r < TILE_ROWS; r++)
		for (uint32_t b = 0; b < COLS; b++) {
			__m512 t = _mm512_add_ps(_mm512_add_ps(part[0][r][b], part[1][r][b]),
						 _mm512_add_ps(part[2][r][b], part[3][r][b]));
			y[(size_t)(b0 + b) * ldy + o + r] = _mm512_reduce_add_ps(t);
		}
}

static ALWAYS_INLINE void f_gemm_typed(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1,
				       const float *x, uint32_t ldx, uint32_t n_b, float *y,
				       uint32_t ldy, const uint32_t type)
{
	uint32_t o = o0;
	/* Batches of at least COLS rows: whole tiles first, the edges row by row. */
	uint32_t b_tiles = n_b / COLS * COLS;
	if (b_tiles) {
		for (; o + TILE_ROWS <= o1; o += TILE_ROWS) {
			for (uint32_t b = 0; b < b_tiles; b += COLS)
				f_tile(w, o, x, ldx, b, y, ldy, type);
			for (uint32_t r = 0; r < TILE_ROWS; r++)
				switch (n_b - b_tiles) {
				case 3: f_row(w, o + r, x, ldx, b_tiles, 3, y, ldy, type); break;
				case 2: f_row(w, o + r, x, ldx, b_tiles, 2, y, ldy, type); break;
				case 1: f_row(w, o + r, x, ldx, b_tiles, 1, y, ldy, type); break;
				default: break;
				}
		}
	}
	for (; o < o1; o++) {
		uint32_t b = 0;
		for (; b + COLS <= n_b; b += COLS)
			f_row(w, o, x, ldx, b, COLS, y, ldy, type);
		switch (n_b - b) {
		case 3: f_row(w, o, x, ldx, b, 3, y, ldy, type); break;
		case 2: f_row(w, o, x, ldx, b, 2, y, ldy, type); break;
		case 1: f_row(w, o, x, ldx, b, 1, y, ldy, type); break;
		default: break;
		}
	}
}

/* The panel layout (kernels.h): a tile is one group of 64 rows (four vectors of 16) against
 * up to P_COLS batch rows, 4 x P_COLS sums in registers. Per input k: four weight vectors
 * loaded (and converted) once, one broadcast per batch row, 4 x P_COLS fused multiply-adds,
 * each sum one chain over k in order: the same bits as the scalar variant's fmaf chain, for
 * any batch and row range. Against the 4 x 4 row-layout tile, which must load every
 * activation vector for each group of four weight rows, this reads ~6 bytes per
 * multiply-add vector instead of ~24. One core, 65536 x 2560 F16 (from memory), side by side:
 * batch 16 68.7 -> 100.8 G multiply-adds/s, batch 8 59.7 -> 101.3, batch 4 43.5 -> 68.5,
 * batch 1 15.9 -> 17.0 (31.8 -> 33.9 GB/s). */
#define P_COLS 6
#define P_VECS (BN_F_PANEL_ROWS / 16)

/* Lanes [lo, hi) of 16 (either bound may lie past 16). */
static ALWAYS_INLINE __mmask16 lanes_between(uint32_t lo, uint32_t hi)
{
	uint32_t below_hi = hi >= 16 ? 0xffffu : (1u << hi) - 1;
	uint32_t below_lo = lo >= 16 ? 0xffffu : (1u << lo) - 1;
	return (__mmask16)(below_hi & ~below_lo);
}

/* Rows [r0, r1) of one group (first row `first`) against n_cols batch rows. `ahead`, when not
 * NULL, is the weight stream's prefetch cursor: the tile meeting batch rows 0.. streams the
 * group from memory, the others find it in cache. */
static ALWAYS_INLINE void p_tile(const void *group, uint32_t n_in, const float *x, uint32_t ldx,
				 const uint32_t n_cols, float *y, uint32_t ldy, uint32_t first,
				 uint32_t r0, uint32_t r1, const char *ahead, const char *end,
				 const uint32_t type)
{
	const size_t step_bytes = (size_t)BN_F_PANEL_ROWS * (type == BN_TYPE_F32 ? 4 : 2);
	__m512 acc[P_COLS][P_VECS];
	for (uint32_t b = 0; b < n_cols; b++)
		for (uint32_t v = 0; v < P_VECS; v++)
			acc[b][v] = _mm512_setzero_ps();
	for (uint32_t k = 0; k < n_in; k++) {
		if (ahead)
			for (size_t off = 0; off < step_bytes; off += 64)
				if (ahead + k * step_bytes + off < end)
					_mm_prefetch(ahead + k * step_bytes + off, _MM_HINT_T0);
		__m512 wv[P_VECS];
		for (uint32_t v = 0; v < P_VECS; v++)
			wv[v] = f_load(group, k * BN_F_PANEL_ROWS + 16 * v, 0xffff, type);
		for (uint32_t b = 0; b < n_cols; b++) {
			__m512 xb = _mm512_set1_ps(x[(size_t)b * ldx + k]);
			for (uint32_t v = 0; v < P_VECS; v++)
				acc[b][v] = _mm512_fmadd_ps(wv[v], xb, acc[b][v]);
		}
	}
	for (uint32_t v = 0; v < P_VECS; v++) {
		uint32_t o = first + 16 * v; /* rows o .. o + 15 of this vector; store those in range */
		__mmask16 m = lanes_between(r0 > o ? r0 - o : 0, r1 > o ? r1 - o : 0);
		for (uint32_t b = 0; b < n_cols; b++)
			_mm512_mask_storeu_ps(y + (size_t)b * ldy + o, m, acc[b][v]);
	}
}

static ALWAYS_INLINE void f_gemm_panels(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1,
					const float *x, uint32_t ldx, uint32_t n_b, float *y,
					uint32_t ldy, const uint32_t type)
{
	const size_t group_bytes = (size_t)BN_F_PANEL_ROWS * w->n_in * (type == BN_TYPE_F32 ? 4 : 2);
	const char *end = (const char *)w->data + bn_f_panel_bytes(type, w->n_in, w->n_out);
	for (uint32_t g = o0 / BN_F_PANEL_ROWS; g * BN_F_PANEL_ROWS < o1; g++) {
		const char *group = (const char *)w->data + g * group_bytes;
		uint32_t first = g * BN_F_PANEL_ROWS;
		uint32_t r0 = o0 > first ? o0 : first;
		uint32_t r1 = o1 < first + BN_F_PANEL_ROWS ? o1 : first + BN_F_PANEL_ROWS;
		for (uint32_t b = 0; b < n_b; b += P_COLS) {
			const char *ahead = b == 0 ? group + WEIGHT_PREFETCH_BYTES : NULL;
			const float *xb = x + (size_t)b * ldx;
			float *yb = y + (size_t)b * ldy;
			switch (n_b - b < P_COLS ? n_b - b : P_COLS) { /* constant tile widths */
			case 6: p_tile(group, w->n_in, xb, ldx, 6, yb, ldy, first, r0, r1, ahead, end, type); break;
			case 5: p_tile(group, w->n_in, xb, ldx, 5, yb, ldy, first, r0, r1, ahead, end, type); break;
			case 4: p_tile(group, w->n_in, xb, ldx, 4, yb, ldy, first, r0, r1, ahead, end, type); break;
			case 3: p_tile(group, w->n_in, xb, ldx, 3, yb, ldy, first, r0, r1, ahead, end, type); break;
			case 2: p_tile(group, w->n_in, xb, ldx, 2, yb, ldy, first, r0, r1, ahead, end, type); break;
			default: p_tile(group, w->n_in, xb, ldx, 1, yb, ldy, first, r0, r1, ahead, end, type); break;
			}
		}
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

static void f_gemm_avx512(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1, const float *x,
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
/* Attention of one query over a cache                                                          */
/* ------------------------------------------------------------------------------------------ */

#define ATTEND_MAX_VECS 16 /* head dims up to 256 keep the output in registers */

static void attend_avx512(const float *q, const struct bn_kv_view *kv, uint32_t L, uint32_t d,
			  float scale, float *s, float *out)
{
	uint32_t n_vec = (d + 15) / 16, bt = kv->block_tokens;
	if (n_vec > ATTEND_MAX_VECS) {
		bn_kernels_scalar.attend(q, kv, L, d, scale, s, out);
		return;
	}
	__mmask16 tail = d % 16 ? (__mmask16)((1u << (d % 16)) - 1) : (__mmask16)0xffff;
	__m512 qv[ATTEND_MAX_VECS];
	for (uint32_t v = 0; v < n_vec; v++)
		qv[v] = _mm512_maskz_loadu_ps(v + 1 == n_vec ? tail : 0xffff, q + 16 * v);
	for (uint32_t t0 = 0, b = 0; t0 < L; t0 += bt, b++) {
		const float *K = bn_kv_block(kv, kv->K, b);
		for (uint32_t i = 0; i < bt && t0 + i < L; i++) {
			const float *k = K + (size_t)i * kv->ld;
			__m512 acc = _mm512_setzero_ps();
			for (uint32_t v = 0; v < n_vec; v++)
				acc = _mm512_fmadd_ps(qv[v], _mm512_maskz_loadu_ps(v + 1 == n_vec ? tail
												   : 0xffff,
										   k + 16 * v),
						      acc);
			s[t0 + i] = _mm512_reduce_add_ps(acc) * scale;
		}
	}
	bn_softmax(s, L);
	__m512 o[ATTEND_MAX_VECS];
	for (uint32_t v = 0; v < n_vec; v++)
		o[v] = _mm512_setzero_ps();
	for (uint32_t t0 = 0, b = 0; t0 < L; t0 += bt, b++) {
		const float *V = bn_kv_block(kv, kv->V, b);
		for (uint32_t i = 0; i < bt && t0 + i < L; i++) {
			const float *vt = V + (size_t)i * kv->ld;
			__m512 p = _mm512_set1_ps(s[t0 + i]);
			for (uint32_t v = 0; v < n_vec; v++)
				o[v] = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(v + 1 == n_vec ? tail
												 : 0xffff,
										 vt + 16 * v),
						       o[v]);
		}
	}
	for (uint32_t v = 0; v < n_vec; v++)
		_mm512_mask_storeu_ps(out + 16 * v, v + 1 == n_vec ? tail : 0xffff, o[v]);
}

/* Grouped-query attention: the heads that share a KV head read each cached row once. Per head
 * the arithmetic is attend_avx512's, operation for operation (the same fused multiply-adds
 * in the same order, the same reductions, bn_softmax), so each head's output is the one it
 * gets alone. n_h and n_vec are compile-time constants in every call, which keeps the
 * accumulators in registers; head dims are whole vectors, so no load needs a mask. */
static ALWAYS_INLINE void heads_scores(const float *q, const uint32_t n_h, const uint32_t n_vec,
				       const struct bn_kv_view *kv, uint32_t L, float scale, float *s)
{
	for (uint32_t t0 = 0, b = 0; t0 < L; t0 += kv->block_tokens, b++) {
		const float *K = bn_kv_block(kv, kv->K, b);
		for (uint32_t i = 0; i < kv->block_tokens && t0 + i < L; i++) {
			const float *k = K + (size_t)i * kv->ld;
			__m512 kr[ATTEND_MAX_VECS];
			for (uint32_t v = 0; v < n_vec; v++)
				kr[v] = _mm512_loadu_ps(k + 16 * v);
			for (uint32_t h = 0; h < n_h; h++) {
				const float *qh = q + (size_t)h * n_vec * 16;
				__m512 acc = _mm512_setzero_ps();
				for (uint32_t v = 0; v < n_vec; v++)
					acc = _mm512_fmadd_ps(_mm512_loadu_ps(qh + 16 * v), kr[v], acc);
				s[(size_t)h * L + t0 + i] = _mm512_reduce_add_ps(acc) * scale;
			}
		}
	}
}

/* out for vectors [v0, v0 + n_cv) of every head: n_h * n_cv accumulators. */
static ALWAYS_INLINE void heads_values(const uint32_t n_h, const uint32_t n_vec, uint32_t v0,
				       const uint32_t n_cv, const struct bn_kv_view *kv, uint32_t L,
				       const float *s, float *out)
{
	__m512 o[ATTEND_MAX_VECS];
	for (uint32_t a = 0; a < n_h * n_cv; a++)
		o[a] = _mm512_setzero_ps();
	for (uint32_t t0 = 0, b = 0; t0 < L; t0 += kv->block_tokens, b++) {
		const float *V = bn_kv_block(kv, kv->V, b);
		for (uint32_t i = 0; i < kv->block_tokens && t0 + i < L; i++) {
			const float *vt = V + (size_t)i * kv->ld;
			for (uint32_t h = 0; h < n_h; h++) {
				__m512 p = _mm512_set1_ps(s[(size_t)h * L + t0 + i]);
				for (uint32_t c = 0; c < n_cv; c++) {
					__m512 x = _mm512_loadu_ps(vt + 16 * (v0 + c));
					o[h * n_cv + c] = _mm512_fmadd_ps(p, x, o[h * n_cv + c]);
				}
			}
		}
	}
	for (uint32_t h = 0; h < n_h; h++)
		for (uint32_t c = 0; c < n_cv; c++)
			_mm512_storeu_ps(out + (size_t)h * n_vec * 16 + 16 * (v0 + c), o[h * n_cv + c]);
}

static ALWAYS_INLINE void heads_fixed(const float *q, const uint32_t n_h, const uint32_t n_vec,
				      const struct bn_kv_view *kv, uint32_t L, float scale,
				      float *s, float *out)
{
	const uint32_t n_cv = ATTEND_MAX_VECS / n_h < n_vec ? ATTEND_MAX_VECS / n_h : n_vec;
	heads_scores(q, n_h, n_vec, kv, L, scale, s);
	for (uint32_t h = 0; h < n_h; h++)
		bn_softmax(s + (size_t)h * L, L);
	for (uint32_t v0 = 0; v0 < n_vec; v0 += n_cv)
		heads_values(n_h, n_vec, v0, n_cv, kv, L, s, out);
}

/* Head dims of 64 and 128 with groups of 1, 2, 4 or 8 heads (the shapes of the models we
 * serve); anything else is one attend_avx512 per head. */
static void attend_heads_avx512(const float *q, uint32_t n_heads, const struct bn_kv_view *kv,
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
		HEADS_CASE(8)
	if (d == 64)
		HEADS_CASE(4)
#undef HEADS_CASE
	bn_attend_each_head(attend_avx512, q, n_heads, kv, L, d, scale, s, out);
}

/* ------------------------------------------------------------------------------------------ */
/* Element-wise parts of a layer: bn_rmsnorm, bn_relu2_mul, bn_add to the bit                  */
/* ------------------------------------------------------------------------------------------ */

/* v, which the compiler may no longer fold into a neighbouring operation: this file is built
 * with FMA and GNU C's fp-contract=fast, and x * x + lane fused into one rounding would not be
 * bn_rmsnorm's two. */
static ALWAYS_INLINE __m512 unfused(__m512 v)
{
	__asm__("" : "+v"(v));
	return v;
}

/* The scalar definition's 16 lanes are one register: lane l takes x[i] for i % 16 == l, in
 * order; the tail adds into its first lanes only; then the lanes are added in lane order. */
static float sum_squares_avx512(const float *x, uint32_t n)
{
	__m512 lanes = _mm512_setzero_ps();
	for (uint32_t i = 0; i < n; i += 16) {
		__mmask16 m = lanes_from(i, n);
		__m512 v = _mm512_maskz_loadu_ps(m, x + i);
		lanes = _mm512_mask_add_ps(lanes, m, lanes, unfused(_mm512_mul_ps(v, v)));
	}
	float lane[BN_RMSNORM_LANES], ss = 0.0f;
	_mm512_storeu_ps(lane, lanes);
	for (uint32_t l = 0; l < BN_RMSNORM_LANES; l++)
		ss += lane[l];
	return ss;
}

static void rmsnorm_avx512(float *out, const float *x, const float *w, uint32_t n, float eps)
{
	const __m512 inv = _mm512_set1_ps(1.0f / sqrtf(sum_squares_avx512(x, n) / (float)n + eps));
	for (uint32_t i = 0; i < n; i += 16) {
		__mmask16 m = lanes_from(i, n);
		__m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv);
		_mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)));
	}
}

/* The ordered compare is false for NaN, so NaN gates become 0 as in the scalar mask. */
static void relu2_mul_avx512(float *g, const float *u, uint32_t n)
{
	for (uint32_t i = 0; i < n; i += 16) {
		__mmask16 m = lanes_from(i, n);
		__m512 v = _mm512_maskz_loadu_ps(m, g + i);
		__m512 r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), v);
		__m512 rr = _mm512_mul_ps(r, r);
		_mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(rr, _mm512_maskz_loadu_ps(m, u + i)));
	}
}

static void add_avx512(float *x, const float *y, uint32_t n)
{
	for (uint32_t i = 0; i < n; i += 16) {
		__mmask16 m = lanes_from(i, n);
		__m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
		_mm512_mask_storeu_ps(x + i, m, v);
	}
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

const struct bn_kernels bn_kernels_avx512 = {
	.name = "avx512vnni",
	.t2_gemm = t2_gemm_avx512,
	.f_gemm = f_gemm_avx512,
	.attend = attend_avx512,
	.attend_heads = attend_heads_avx512,
	.quantize_rows = quantize_rows_avx512,
	.rmsnorm = rmsnorm_avx512,
	.relu2_mul = relu2_mul_avx512,
	.add = add_avx512,
	.i8_dots = i8_dots_avx512,
	.i8_gemm = i8_gemm_avx512,
};
