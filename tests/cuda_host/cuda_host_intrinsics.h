// SPDX-License-Identifier: MIT
//
// cuda_host_intrinsics.h — CUDA's device intrinsics on the host, each with the GPU's result
// (integer ones exactly; float ones with IEEE round-to-nearest-even, as the _rn names say; the
// host objects are compiled with -ffp-contract=off so that a * b never fuses into an FMA), and
// CUDA's atomics.
#ifndef BN_CUDA_HOST_INTRINSICS_H
#define BN_CUDA_HOST_INTRINSICS_H

#ifndef __cplusplus
#error "cuda_host_intrinsics.h is for device code compiled as C++"
#endif

#include "vector_types.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <math.h>
#include <type_traits>

// ---- loads, bit casts ----------------------------------------------------------------------

template <typename T>
inline T __ldg(const T *p)
{
	return *p;
}

inline unsigned int __float_as_uint(float f)
{
	unsigned int u;
	std::memcpy(&u, &f, sizeof(u));
	return u;
}

inline float __uint_as_float(unsigned int u)
{
	float f;
	std::memcpy(&f, &u, sizeof(f));
	return f;
}

// ---- integer -------------------------------------------------------------------------------

// Position (1-based) of the least significant set bit; 0 for 0.
inline int __ffs(int x)
{
	return __builtin_ffs(x);
}

inline int __clz(int x)
{
	return x == 0 ? 32 : __builtin_clz((unsigned int)x);
}

inline int __popc(unsigned int x)
{
	return __builtin_popcount(x);
}

// Four byte products summed into c, with the 32-bit wrap-around of the hardware.
inline int __dp4a(int a, int b, int c)
{
	uint32_t sum = (uint32_t)c;
	for (int i = 0; i < 4; i++)
		sum += (uint32_t)((int)(int8_t)(a >> 8 * i) * (int)(int8_t)(b >> 8 * i));
	return (int)sum;
}

inline unsigned int __dp4a(unsigned int a, unsigned int b, unsigned int c)
{
	for (int i = 0; i < 4; i++)
		c += ((a >> 8 * i) & 0xffu) * ((b >> 8 * i) & 0xffu);
	return c;
}

// Per-byte a - b, each byte modulo 256.
inline unsigned int __vsub4(unsigned int a, unsigned int b)
{
	unsigned int r = 0;
	for (int i = 0; i < 4; i++)
		r |= (((a >> 8 * i) - (b >> 8 * i)) & 0xffu) << 8 * i;
	return r;
}

// ---- float, rounded to nearest even ------------------------------------------------------

inline float __fmul_rn(float a, float b)
{
	return a * b;
}

// ---- atomics: each returns the old value ---------------------------------------------------
// The compiler's atomic builtins, so that ThreadSanitizer sees atomics where the fibers race on
// purpose; float and double add go through a compare-and-swap of their bits.

namespace bn_cuda_host {

template <typename T, typename F>
T atomic_update(T *p, F f)
{
	static_assert(sizeof(T) == 4 || sizeof(T) == 8, "CUDA's atomics are 32- or 64-bit");
	using Bits = typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type;
	Bits *q = reinterpret_cast<Bits *>(p);
	Bits seen = __atomic_load_n(q, __ATOMIC_RELAXED), next;
	T old;
	do {
		std::memcpy(&old, &seen, sizeof(T));
		T v = f(old);
		std::memcpy(&next, &v, sizeof(T));
	} while (!__atomic_compare_exchange_n(q, &seen, next, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	return old;
}

} // namespace bn_cuda_host

template <typename T>
inline T atomicAdd(T *p, T v)
{
	if constexpr (std::is_integral<T>::value)
		return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
	else
		return bn_cuda_host::atomic_update(p, [v](T old) { return old + v; });
}

template <typename T>
inline T atomicExch(T *p, T v)
{
	return bn_cuda_host::atomic_update(p, [v](T) { return v; });
}

template <typename T>
inline T atomicMax(T *p, T v)
{
	return bn_cuda_host::atomic_update(p, [v](T old) { return old > v ? old : v; });
}

template <typename T>
inline T atomicMin(T *p, T v)
{
	return bn_cuda_host::atomic_update(p, [v](T old) { return old < v ? old : v; });
}

template <typename T>
inline T atomicCAS(T *p, T compare, T v)
{
	__atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	return compare; /* the old value, whether or not it was swapped */
}

#endif // BN_CUDA_HOST_INTRINSICS_H
