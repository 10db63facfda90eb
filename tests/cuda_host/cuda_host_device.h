// SPDX-License-Identifier: MIT
//
// cuda_host_device.h — the CUDA language on the host, for device code compiled by g++ (C++17)
// in the CUDA host harness: qualifiers, the built-in index variables, __syncthreads and the warp
// collectives. cuda_runtime.h (force-included in front of each .cu, as nvcc does) brings it in.
//
//  - __global__/__device__/__host__ vanish: a kernel is a plain function that every GPU thread
//    (a fiber, tests/cuda_host/block.c) calls;
//  - __shared__ is `static thread_local`: all fibers of a block run on the launching OS thread,
//    so they share one copy, and the kernels' shared object's thread-local block is then exactly
//    their shared memory, which grid.c fills with 0xFF bytes (NaN floats, -1 integers) before
//    each block;
//  - threadIdx/blockIdx/blockDim/gridDim read the harness's current thread and block;
//  - __syncthreads is a barrier of the block's fibers; shuffles, ballots and __syncwarp
//    exchange among the 32 fibers of a warp, and fail the program on a partial mask or a lane
//    that has exited or does not exist.
#ifndef BN_CUDA_HOST_DEVICE_H
#define BN_CUDA_HOST_DEVICE_H

#ifndef __cplusplus
#error "cuda_host_device.h is for device code compiled as C++"
#endif

#include "cuda_host.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static thread_local
#define __restrict__ __restrict

namespace bn_cuda_host {
inline const uint3 &thread_idx()
{
	return bn_cuda_host_self->idx;
}
} // namespace bn_cuda_host

#define threadIdx (::bn_cuda_host::thread_idx())
#define blockIdx (static_cast<const uint3 &>(bn_cuda_host_block_idx))
#define blockDim (static_cast<const dim3 &>(bn_cuda_host_block_dim))
#define gridDim (static_cast<const dim3 &>(bn_cuda_host_grid_dim))

static constexpr int warpSize = BN_CUDA_HOST_WARP;

inline void __syncthreads()
{
	bn_cuda_host_syncthreads();
}

namespace bn_cuda_host {

// A shuffle of any value of at most 8 bytes (CUDA's overloads: int, unsigned, long long, float,
// double, __half ...), moved as its bits.
template <typename T>
T shuffle(const char *name, bn_cuda_host_op op, unsigned mask, T var, int arg, int width)
{
	static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8,
		      "CUDA shuffles values of at most 8 bytes");
	bn_cuda_host_collective c{};
	c.name = name;
	c.op = op;
	c.mask = mask;
	c.size = sizeof(T);
	c.arg = arg;
	c.width = (uint32_t)width;
	std::memcpy(&c.value, &var, sizeof(T));
	uint64_t bits = bn_cuda_host_warp_collective(&c);
	T out;
	std::memcpy(&out, &bits, sizeof(T));
	return out;
}

} // namespace bn_cuda_host

template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize)
{
	return bn_cuda_host::shuffle("__shfl_sync", BN_CUDA_HOST_SHFL_IDX, mask, var, src_lane, width);
}

template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize)
{
	return bn_cuda_host::shuffle("__shfl_up_sync", BN_CUDA_HOST_SHFL_UP, mask, var, (int)delta, width);
}

template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize)
{
	return bn_cuda_host::shuffle("__shfl_down_sync", BN_CUDA_HOST_SHFL_DOWN, mask, var, (int)delta,
				     width);
}

template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize)
{
	return bn_cuda_host::shuffle("__shfl_xor_sync", BN_CUDA_HOST_SHFL_XOR, mask, var, lane_mask, width);
}

inline unsigned __ballot_sync(unsigned mask, int predicate)
{
	bn_cuda_host_collective c{};
	c.name = "__ballot_sync";
	c.op = BN_CUDA_HOST_BALLOT;
	c.mask = mask;
	c.value = predicate != 0;
	return (unsigned)bn_cuda_host_warp_collective(&c);
}

inline void __syncwarp(unsigned mask = BN_CUDA_HOST_FULL_MASK)
{
	bn_cuda_host_collective c{};
	c.name = "__syncwarp";
	c.op = BN_CUDA_HOST_SYNCWARP;
	c.mask = mask;
	bn_cuda_host_warp_collective(&c);
}

#endif // BN_CUDA_HOST_DEVICE_H
