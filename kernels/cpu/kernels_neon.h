/* SPDX-License-Identifier: MIT */
/*
 * kernels_neon.h — what the three aarch64 tables share: common_neon.c's entries (float weights,
 * attention, the element-wise parts, quantization, the int16 screen dots, the hash), which
 * need nothing past ARMv8.0's Advanced SIMD and are the same in every table; kernels_neon.c
 * (compiled once per variant) names them in its table. Included only by aarch64 files.
 */
#ifndef BITNET_KERNELS_NEON_H
#define BITNET_KERNELS_NEON_H

#include "kernels.h"

#include <stddef.h>
#include <stdint.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* The bn_kernels entries of the same names (kernels.h says what each does). */
void bn_neon_f_gemm(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1, const float *x,
		    uint32_t ldx, uint32_t n_b, float *y, uint32_t ldy);
void bn_neon_attend(const float *q, const struct bn_kv_view *kv, uint32_t L, uint32_t d,
		    float scale, float *s, float *out);
void bn_neon_attend_heads(const float *q, uint32_t n_heads, const struct bn_kv_view *kv,
			  uint32_t L, uint32_t d, float scale, float *s, float *out);
void bn_neon_i8_dots(const struct bn_i8_matrix *w, uint32_t o0, uint32_t o1, const int16_t *x,
		     uint32_t ldx, uint32_t n_b, int64_t *y, uint32_t ldy);
void bn_neon_quantize_rows(const float *x, uint32_t ldx, uint32_t n, struct bn_q8_rows *out);
void bn_neon_rmsnorm(float *out, const float *x, const float *w, uint32_t n, float eps);
void bn_neon_relu2_mul(float *g, const float *u, uint32_t n);
void bn_neon_add(float *x, const float *y, uint32_t n);
uint64_t bn_neon_hash64(const void *p, size_t n);

#endif /* BITNET_KERNELS_NEON_H */
