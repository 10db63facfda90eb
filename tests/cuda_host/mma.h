// SPDX-License-Identifier: MIT
//
// mma.h (CUDA host harness) — nvcuda::wmma's 16x16x16 fragments and calls, as the kernels use
// them: signed char operands with int accumulators, __half operands with float accumulators.
//
// How elements sit in a fragment is unspecified by CUDA, so any layout is legal; here lane l
// owns the accumulator elements of row l / 2, columns 8 (l % 2) .. + 7 (8 of the 256), and its
// matrix_a fragment holds row l / 2 of a (16 values), its matrix_b fragment columns
// 8 (l % 2) .. + 7 of b (8 x 16 values): what its slice of the product needs, no more. Code
// that depends on the hardware's layout reads other values here. Each call is a warp
// collective: all 32 lanes must make it together, with the same pointer and leading dimension
// (and fill value), under CUDA's alignment rules (a 256-bit aligned pointer, ldm a multiple of
// 16 bytes), or the program fails naming what differed.
#ifndef BN_CUDA_HOST_MMA_H
#define BN_CUDA_HOST_MMA_H

#ifndef __cplusplus
#error "mma.h is for device code compiled as C++"
#endif

#include "cuda_fp16.h"
#include "cuda_host.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

constexpr int kTile = 16;
constexpr int kSlice = kTile * kTile / BN_CUDA_HOST_WARP; // accumulator elements per lane

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment;

template <typename T, typename Layout>
class fragment<matrix_a, 16, 16, 16, T, Layout> {
public:
	enum { num_elements = kTile }; // x[k] = a(row, k)
	T x[num_elements];
};

template <typename T, typename Layout>
class fragment<matrix_b, 16, 16, 16, T, Layout> {
public:
	enum { num_elements = kTile * kSlice }; // x[8 k + j] = b(k, column0 + j)
	T x[num_elements];
};

template <typename T>
class fragment<accumulator, 16, 16, 16, T, void> {
public:
	enum { num_elements = kSlice }; // x[j] = c(row, column0 + j)
	T x[num_elements];
};

namespace detail {

// The row and first column of the calling lane's part of the tile.
inline int row()
{
	return (int)(bn_cuda_host_self->lane / 2);
}

inline int column0()
{
	return (int)(bn_cuda_host_self->lane % 2) * kSlice;
}

// The warp-collective check every call makes first.
inline void together(const char *name, const void *ptr, unsigned ldm, unsigned layout, uint64_t value)
{
	bn_cuda_host_collective c{};
	c.name = name;
	c.op = BN_CUDA_HOST_WMMA;
	c.mask = BN_CUDA_HOST_FULL_MASK;
	c.ptr = ptr;
	c.ldm = ldm;
	c.layout = layout;
	c.value = value;
	bn_cuda_host_warp_collective(&c);
}

// A load or store: CUDA's alignment rules, then the warp-collective check.
template <typename T>
void memory_op(const char *name, const T *ptr, unsigned ldm, unsigned layout)
{
	if ((uintptr_t)ptr % 32 != 0)
		bn_cuda_host_fail("%s: pointer %p is not 256-bit aligned", name, (const void *)ptr);
	if (ldm * sizeof(T) % 16 != 0)
		bn_cuda_host_fail("%s: ldm %u is not a multiple of 16 bytes (%zu-byte elements)", name,
				  ldm, sizeof(T));
	together(name, ptr, ldm, layout, 0);
}

// Element (r, c) of a matrix stored with rows (row_major) or columns contiguous.
template <typename T>
T at(const T *p, unsigned ldm, bool row_major, int r, int c)
{
	return row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}

// A product's input element as the accumulator type: int8 into int, half into float (normal
// numbers by a shift, the rest through the full conversion).
inline int widen(signed char v, int)
{
	return v;
}

inline float widen(__half v, float)
{
	uint32_t h = v.__x, e = h & 0x7c00u;
	if (e == 0 || e == 0x7c00u)
		return __half2float(v);
	uint32_t bits = (h & 0x8000u) << 16 | (((h & 0x7fffu) << 13) + 0x38000000u);
	float f;
	std::memcpy(&f, &bits, sizeof(f));
	return f;
}

template <typename Layout>
constexpr unsigned layout_code()
{
	return std::is_same<Layout, row_major>::value ? 1u : 2u;
}

} // namespace detail

template <typename Use, typename T, typename Layout, typename V>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, const V &v)
{
	T value = (T)v;
	uint64_t bits = 0;
	std::memcpy(&bits, &value, sizeof(T));
	detail::together("wmma::fill_fragment", nullptr, 0, 0, bits);
	for (int i = 0; i < f.num_elements; i++)
		f.x[i] = value;
}

// matrix_a is 16 rows x 16 k, matrix_b 16 k x 16 columns; either as stored with its Layout.
template <typename T, typename Layout>
void load_matrix_sync(fragment<matrix_a, 16, 16, 16, T, Layout> &f, const T *p, unsigned ldm)
{
	detail::memory_op("wmma::load_matrix_sync", p, ldm, detail::layout_code<Layout>());
	const bool rows = std::is_same<Layout, row_major>::value;
	const int r = detail::row();
	for (int k = 0; k < kTile; k++)
		f.x[k] = detail::at(p, ldm, rows, r, k);
}

template <typename T, typename Layout>
void load_matrix_sync(fragment<matrix_b, 16, 16, 16, T, Layout> &f, const T *p, unsigned ldm)
{
	detail::memory_op("wmma::load_matrix_sync", p, ldm, detail::layout_code<Layout>());
	const bool rows = std::is_same<Layout, row_major>::value;
	const int c0 = detail::column0();
	for (int k = 0; k < kTile; k++)
		for (int j = 0; j < kSlice; j++)
			f.x[k * kSlice + j] = detail::at(p, ldm, rows, k, c0 + j);
}

template <typename T>
void load_matrix_sync(fragment<accumulator, 16, 16, 16, T, void> &f, const T *p, unsigned ldm,
		      layout_t layout)
{
	detail::memory_op("wmma::load_matrix_sync", p, ldm, (unsigned)layout + 1);
	const int r = detail::row(), c0 = detail::column0();
	for (int j = 0; j < kSlice; j++)
		f.x[j] = detail::at(p, ldm, layout == mem_row_major, r, c0 + j);
}

template <typename T>
void store_matrix_sync(T *p, const fragment<accumulator, 16, 16, 16, T, void> &f, unsigned ldm,
		       layout_t layout)
{
	detail::memory_op("wmma::store_matrix_sync", p, ldm, (unsigned)layout + 1);
	const int r = detail::row(), c0 = detail::column0();
	for (int j = 0; j < kSlice; j++)
		p[layout == mem_row_major ? (size_t)r * ldm + c0 + j : (size_t)(c0 + j) * ldm + r] = f.x[j];
}

// d = a b + c over this lane's slice; k runs 0..15 in order. Products of int8 and of half
// values are exact in int and float, so only the float sums round.
template <typename Acc, typename Ta, typename La, typename Tb, typename Lb>
void mma_sync(fragment<accumulator, 16, 16, 16, Acc, void> &d,
	      const fragment<matrix_a, 16, 16, 16, Ta, La> &a,
	      const fragment<matrix_b, 16, 16, 16, Tb, Lb> &b,
	      const fragment<accumulator, 16, 16, 16, Acc, void> &c)
{
	detail::together("wmma::mma_sync", nullptr, 0, 0, 0);
	Acc sum[kSlice];
	for (int j = 0; j < kSlice; j++)
		sum[j] = c.x[j];
	for (int k = 0; k < kTile; k++) {
		Acc ak = detail::widen(a.x[k], Acc());
		for (int j = 0; j < kSlice; j++)
			sum[j] += ak * detail::widen(b.x[k * kSlice + j], Acc());
	}
	for (int j = 0; j < kSlice; j++)
		d.x[j] = sum[j];
}

} // namespace wmma
} // namespace nvcuda

#endif // BN_CUDA_HOST_MMA_H
