/* SPDX-License-Identifier: MIT */
/*
 * t2g.h — the grouped ternary products (kernels.h: t2g_gemm) of the SIMD variants, each in a
 * file of its own compiled for its ISA (t2g_avx2.c, again as t2g_avxvnni.c, t2g_avx512.c), and
 * what they share: the group sums of the activations' block sums. A NEON variant adds its own
 * t2g_gemm beside its t2_gemm, to the same contract (kernels_neon.c: t2g_gemm_neon).
 */
#ifndef BITNET_T2G_H
#define BITNET_T2G_H

#include "kernels.h"

void bn_t2g_gemm_avx2(const struct bn_t2_matrix *w, uint32_t o0, uint32_t o1,
		      const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy);
void bn_t2g_gemm_avxvnni(const struct bn_t2_matrix *w, uint32_t o0, uint32_t o1,
			 const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy);
void bn_t2g_gemm_avx512(const struct bn_t2_matrix *w, uint32_t o0, uint32_t o1,
			const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy);

/* The activations' offset for group g of batch row b: the sum of its blocks' sums. */
static inline int32_t bn_t2g_group_xsum(const struct bn_q8_rows *x, uint32_t b, uint32_t g,
					uint32_t blocks)
{
	const int32_t *bs = x->bsum + (size_t)b * bn_q8_blocks(x->k_pad) + (size_t)g * blocks;
	int32_t s = 0;
	for (uint32_t j = 0; j < blocks; j++)
		s += bs[j];
	return s;
}

#endif /* BITNET_T2G_H */
