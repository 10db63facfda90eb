/* SPDX-License-Identifier: MIT */
/*
 * kernels_vbmi.c — the T3 (base-3, 1.6 bits a weight) ternary kernel, read in decode steps.
 * Compiled with AVX-512 VBMI flags (Makefile), called only when cpuid says the CPU has them
 * (bn_t3_kernel).
 *
 * A T3 byte is five base-3 digits, and no shift or mask takes a digit out of it. VBMI's
 * vpermi2b looks a byte up in a 128-entry table in one instruction, so two lookups (the low
 * and the high half of the byte values), a blend, and the digits are out: one table gives the
 * first four digits already laid out as a T2 byte (digit p in bits 2p, 2p + 1), whose planes
 * one AND each takes apart as in the T2 row kernel, and one table the fifth. Per 64-byte chunk
 * (320 weights): 4 permutes, 2 blends, a mask and 4 ANDs, then 5 vpdpbusd per batch row.
 */
#include "kernels.h"

#include <immintrin.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* As in kernels_avx512.c: an 8 KiB lead keeps one stream per thread at the read bandwidth,
 * and stops at the end of the matrix. */
#define WEIGHT_PREFETCH_BYTES 8192

/* The two tables, by byte value v < 243 (the rest are never looked up): the first four digits
 * as a T2 byte, and the fifth digit. */
#define FIRST4(v) ((v) % 3 | (v) / 3 % 3 << 2 | (v) / 9 % 3 << 4 | (v) / 27 % 3 << 6)
#define FIFTH(v) ((v) < 243 ? (v) / 81 : 0)
#define R4(f, v) f(v), f(v + 1), f(v + 2), f(v + 3)
#define R16(f, v) R4(f, v), R4(f, v + 4), R4(f, v + 8), R4(f, v + 12)
#define R64(f, v) R16(f, v), R16(f, v + 16), R16(f, v + 32), R16(f, v + 48)
#define R256(f) R64(f, 0), R64(f, 64), R64(f, 128), R64(f, 192)
static const uint8_t first4[256] __attribute__((aligned(64))) = { R256(FIRST4) };
static const uint8_t fifth[256] __attribute__((aligned(64))) = { R256(FIFTH) };

/* table[v] for each byte v of idx: the low seven bits index a 128-byte half, bit 7 picks it. */
static ALWAYS_INLINE __m512i lookup(const uint8_t *table, __m512i idx, __mmask64 high)
{
	__m512i lo = _mm512_permutex2var_epi8(_mm512_load_si512(table), idx,
					      _mm512_load_si512(table + 64));
	__m512i hi = _mm512_permutex2var_epi8(_mm512_load_si512(table + 128), idx,
					      _mm512_load_si512(table + 192));
	return _mm512_mask_blend_epi8(high, lo, hi);
}

/* acc += u8 x s8 in 4-byte groups (the s8 operand from memory: see kernels_avx512.c for why
 * it is written out). */
static ALWAYS_INLINE __m512i dpbusd(__m512i acc, __m512i u8, const int8_t *s8)
{
	__asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "m"(*(const __m512i *)s8));
	return acc;
}

/* The five code planes of a 64-byte T3 chunk: planes 0..3 left in place (digit p times 4^p,
 * at most 2 * 64 = 128, within vpdpbusd's unsigned range) and shifted back once per row, as
 * the T2 row kernel does; plane 4 from its own table. */
static ALWAYS_INLINE void t3_planes(const uint8_t *chunk, __m512i pl[5])
{
	__m512i v = _mm512_load_si512(chunk);
	__mmask64 high = _mm512_movepi8_mask(v);
	__m512i four = lookup(first4, v, high), last = lookup(fifth, v, high);
	for (uint32_t p = 0; p < 4; p++)
		pl[p] = _mm512_and_si512(four, _mm512_set1_epi8((char)(3 << (2 * p))));
	pl[4] = last;
}

/* COLS batch rows at most share each decoded chunk. */
#define COLS 4

/* One weight row against n_cols <= COLS batch rows starting at b0, the chunk decoded once for
 * all of them. A lane adds at most 4 x 128 x 128 per chunk, and a row of 2^20 weights has
 * 3,277 chunks: far below 2^31. Integer sums are exact, so the result is t2_gemm's for the
 * same weights, to the bit. */
static ALWAYS_INLINE void t3_row(const struct bn_t3_matrix *w, uint32_t o,
				 const struct bn_q8_rows *x, uint32_t b0, const uint32_t n_cols,
				 float *y, uint32_t ldy)
{
	const uint8_t *row = w->codes + (size_t)o * w->row_bytes;
	const uint8_t *end = w->codes + (size_t)w->n_out * w->row_bytes;
	__m512i acc[COLS][5];
	for (uint32_t b = 0; b < n_cols; b++)
		for (uint32_t p = 0; p < 5; p++)
			acc[b][p] = _mm512_setzero_si512();
	const uint32_t n_chunks = w->row_bytes / BN_T3_CHUNK_BYTES;
	for (uint32_t c = 0; c < n_chunks; c++) {
		const uint8_t *chunk = row + (size_t)c * BN_T3_CHUNK_BYTES;
		if (chunk + WEIGHT_PREFETCH_BYTES < end)
			_mm_prefetch((const char *)chunk + WEIGHT_PREFETCH_BYTES, _MM_HINT_T0);
		__m512i pl[5];
		t3_planes(chunk, pl);
		for (uint32_t b = 0; b < n_cols; b++) {
			const int8_t *xc = x->q + (size_t)(b0 + b) * x->k_pad + (size_t)c * BN_T3_CHUNK;
			for (uint32_t p = 0; p < 5; p++)
				acc[b][p] = dpbusd(acc[b][p], pl[p], xc + 64 * p);
		}
	}
	for (uint32_t b = 0; b < n_cols; b++) {
		__m512i t = acc[b][4];
		for (uint32_t p = 0; p < 4; p++)
			t = _mm512_add_epi32(t, _mm512_srai_epi32(acc[b][p], 2 * p));
		int32_t sum = _mm512_reduce_add_epi32(t) - x->sum[b0 + b];
		y[(size_t)(b0 + b) * ldy + o] = ((float)sum * w->scale[o]) * x->inv_scale[b0 + b];
	}
}

/* Rows [o0, o1) against batch rows [b0, b0 + n_cols), n_cols <= COLS. */
static void t3_rows(const struct bn_t3_matrix *w, uint32_t o0, uint32_t o1,
		    const struct bn_q8_rows *x, uint32_t b0, uint32_t n_cols, float *y, uint32_t ldy)
{
	switch (n_cols) { /* constant column counts keep the accumulators in registers */
	case 4: for (uint32_t o = o0; o < o1; o++) t3_row(w, o, x, b0, 4, y, ldy); break;
	case 3: for (uint32_t o = o0; o < o1; o++) t3_row(w, o, x, b0, 3, y, ldy); break;
	case 2: for (uint32_t o = o0; o < o1; o++) t3_row(w, o, x, b0, 2, y, ldy); break;
	case 1: for (uint32_t o = o0; o < o1; o++) t3_row(w, o, x, b0, 1, y, ldy); break;
	default: break; /* no batch rows */
	}
}

/* Batches of more than COLS rows stream the rows once per COLS of them: the forward pass
 * sends those steps to the T2 planes (kernels.h), so they need to be right, not fast. */
void bn_t3_gemm_vbmi(const struct bn_t3_matrix *w, uint32_t o0, uint32_t o1,
		     const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy)
{
	for (uint32_t b0 = 0; b0 < n_b; b0 += COLS)
		t3_rows(w, o0, o1, x, b0, n_b - b0 < COLS ? n_b - b0 : COLS, y, ldy);
}
