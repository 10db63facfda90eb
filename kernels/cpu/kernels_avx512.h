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
