// SPDX-License-Identifier: MIT
//
// cuda_fp16.h (CUDA host harness) — __half as CUDA has it (IEEE binary16 bits, trivially
// copyable), with its conversions in software: float to half rounds to nearest, ties to even,
// through subnormals to zero and infinity exactly as the GPU's cvt.rn.f16.f32 does (NaN becomes
// CUDA's canonical 0x7fff). test_harness checks the conversion against every rounding boundary.
#ifndef BN_CUDA_HOST_CUDA_FP16_H
#define BN_CUDA_HOST_CUDA_FP16_H

#ifndef __cplusplus
#error "cuda_fp16.h is for device code compiled as C++"
#endif

#include <cstdint>
#include <cstring>

namespace bn_cuda_host {

inline uint16_t float_to_half_rn(float f)
{
	uint32_t x;
	std::memcpy(&x, &f, sizeof(x));
	uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
	if (a > 0x7f800000u)
		return 0x7fffu; /* CUDART_NAN_FP16, whatever the sign */
	if (a >= 0x477ff000u) /* 65520 and up: past the midpoint above 65504 */
		return (uint16_t)(sign | 0x7c00u);
	uint32_t h, rem, halfway;
	if (a >= 0x38800000u) { /* normal: rebias the exponent, keep 10 mantissa bits */
		uint32_t m = a - 0x38000000u;
		h = m >> 13;
		rem = m & 0x1fffu;
		halfway = 0x1000u;
	} else if (a >= 0x33000000u) { /* subnormal: units of 2^-24 from the full mantissa */
		uint32_t shift = 126u - (a >> 23), mant = (a & 0x7fffffu) | 0x800000u;
		h = mant >> shift;
		rem = mant & ((1u << shift) - 1);
		halfway = 1u << (shift - 1);
	} else { /* under 2^-25: rounds to zero */
		return (uint16_t)sign;
	}
	if (rem > halfway || (rem == halfway && (h & 1u)))
		h++; /* a carry out of the mantissa moves to the next exponent, as it should */
	return (uint16_t)(sign | h);
}

inline float half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
	if (e == 0x1f) {
		x = sign | 0x7f800000u | m << 13;
	} else if (e != 0) {
		x = sign | (e + 112u) << 23 | m << 13;
	} else if (m == 0) {
		x = sign;
	} else { /* subnormal: normalise */
		e = 113;
		while (!(m & 0x400u)) {
			m <<= 1;
			e--;
		}
		x = sign | e << 23 | (m & 0x3ffu) << 13;
	}
	float f;
	std::memcpy(&f, &x, sizeof(f));
	return f;
}

} // namespace bn_cuda_host

struct __half {
	unsigned short __x;
	__half() = default;
	__half(float f) : __x(bn_cuda_host::float_to_half_rn(f)) {}
	operator float() const { return bn_cuda_host::half_to_float(__x); }
};

inline __half __float2half_rn(float f)
{
	__half h;
	h.__x = bn_cuda_host::float_to_half_rn(f);
	return h;
}

inline __half __float2half(float f)
{
	return __float2half_rn(f);
}

inline float __half2float(__half h)
{
	return bn_cuda_host::half_to_float(h.__x);
}

inline unsigned short __half_as_ushort(__half h)
{
	return h.__x;
}

inline __half __ushort_as_half(unsigned short u)
{
	__half h;
	h.__x = u;
	return h;
}

#endif // BN_CUDA_HOST_CUDA_FP16_H
