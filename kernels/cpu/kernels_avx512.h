/* SPDX-License-Identifier: MIT */
/*
 * kernels_avx512.h — what the AVX-512 variants' two files share: kernels_avx512.c (the integer
 * products: ternary and int8 weights, activation quantization, and the kernel table) and
 * float_avx512.c (float weights, attention, element-wise parts), whose entries the table
 * names. Included only by files compiled with the AVX-512 flags.
 */
#ifndef BITNET_KERNELS_AVX512_H
#define BITNET_KERNELS_AVX512_H

#include "kernels.h"

#include <immintrin.h>
#include <stdint.h>

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

/* Lanes [k, n) of the 16 from k, as a mask (all when n - k >= 16, none when k >= n). */
static ALWAYS_INLINE __mmask16 lanes_from(uint32_t k, uint32_t n)
{
	return k >= n ? 0 : n - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - k)) - 1);
}

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

/* The codes of plane p of a chunk (0, 1 or 2 in each byte), shifted down to their place. */
static ALWAYS_INLINE __m512i t2_plane_codes(__m512i wv, uint32_t p)
{
	const __m512i three = _mm512_set1_epi8(3);
	return _mm512_and_si512(p ? _mm512_srli_epi16(wv, 2 * p) : wv, three);
}

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

/* float_avx512.c: the bn_kernels entries of the same names (kernels.h says what each does). */
void f_gemm_avx512(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1, const float *x,
		   uint32_t ldx, uint32_t n_b, float *y, uint32_t ldy);
void attend_avx512(const float *q, const struct bn_kv_view *kv, uint32_t L, uint32_t d,
		   float scale, float *s, float *out);
void attend_heads_avx512(const float *q, uint32_t n_heads, const struct bn_kv_view *kv,
			 uint32_t L, uint32_t d, float scale, float *s, float *out);
void rmsnorm_avx512(float *out, const float *x, const float *w, uint32_t n, float eps);
void relu2_mul_avx512(float *g, const float *u, uint32_t n);
void add_avx512(float *x, const float *y, uint32_t n);

#endif /* BITNET_KERNELS_AVX512_H */
