/* SPDX-License-Identifier: MIT */
/*
 * vec4.h — the sampler's four-lane helpers (sample.c) in GNU vector extensions (SSE2 on
 * x86-64, NEON on arm64), in a header of their own so that tests/test_sample.c holds its
 * exponential to what sample.c's comments claim. Every operation is one IEEE operation per
 * lane, and sample.c is built without -mfma, so GCC cannot fuse a multiply and an add.
 */
#ifndef BITNETD_VEC4_H
#define BITNETD_VEC4_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

/* The helpers of hot loops, which must not become calls. */
#define V4_INLINE static inline __attribute__((always_inline))

/* Lanes [0, m) of src, the others `pad`: the tails of rows whose length is not a multiple
 * of four go through the same code as the body. */
V4_INLINE v4f load4(const float *src, uint32_t m, float pad)
{
	v4f v = { pad, pad, pad, pad };
	if (m >= 4)
		memcpy(&v, src, sizeof(v));
	else
		for (uint32_t j = 0; j < m; j++)
			v[j] = src[j];
	return v;
}

V4_INLINE v4f select4(v4i mask, v4f a, v4f b)
{
	return (v4f)(((v4i)a & mask) | ((v4i)b & ~mask));
}

V4_INLINE bool any4(v4i mask)
{
	typedef uint64_t v2u __attribute__((vector_size(16)));
	v2u q = (v2u)mask;
	return (q[0] | q[1]) != 0;
}

/* e^x for x <= 0 (Cephes' expf: n = round(x / ln 2), a degree-6 polynomial on the rest),
 * flushed to 0 below -87 where expf turns subnormal: within 1 ulp of expf and monotone on
 * [-87, 0] (tests/test_sample.c: exp_neg_within_one_ulp); -inf gives 0. */
V4_INLINE v4f exp_neg(v4f x)
{
	const v4f lo = { -87.0f, -87.0f, -87.0f, -87.0f };
	v4i under = x < lo;
	x = select4(under, lo, x);
	v4i n = __builtin_convertvector(x * 1.44269504f - 0.5f, v4i); /* x <= 0: rounds */
	v4f nf = __builtin_convertvector(n, v4f);
	v4f r = x - nf * 0.693359375f + nf * 2.12194440e-4f; /* ln 2 in two parts */
	v4f y = r * 1.9875691500e-4f + 1.3981999507e-3f;
	y = y * r + 8.3334519073e-3f;
	y = y * r + 4.1665795894e-2f;
	y = y * r + 1.6666665459e-1f;
	y = y * r + 5.0000001201e-1f;
	y = y * r * r + r + 1.0f;
	v4f scale = (v4f)((n + 127) << 23);
	return (v4f)((v4i)(y * scale) & ~under);
}

#endif /* BITNETD_VEC4_H */
