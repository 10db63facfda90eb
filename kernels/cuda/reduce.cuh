// SPDX-License-Identifier: MIT
//
// reduce.cuh — the warp and block reductions every kernel file uses. One butterfly order
// (xor 16, 8, 4, 2, 1), then the warps' results in warp order: a reduction's result depends on
// the block shape only, never on which kernel or launch it runs in.
#ifndef BITNET_CUDA_REDUCE_CUH
#define BITNET_CUDA_REDUCE_CUH

struct SumOp {
	template <typename T>
	__device__ T operator()(T a, T b) const { return a + b; }
};

// Every lane gets op over the warp's 32 values.
template <typename T, typename Op = SumOp>
__device__ T warp_reduce(T v, Op op = Op())
{
	for (unsigned off = 16; off > 0; off /= 2)
		v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
	return v;
}

template <typename T>
__device__ T warp_sum(T v)
{
	return warp_reduce(v, SumOp());
}

// Every thread gets op over the block's values; shared holds one T per warp.
template <typename T, typename Op = SumOp>
__device__ T block_reduce(T v, T *shared, Op op = Op())
{
	v = warp_reduce(v, op);
	if (threadIdx.x % 32 == 0)
		shared[threadIdx.x / 32] = v;
	__syncthreads();
	T r = shared[0];
	for (unsigned w = 1; w < blockDim.x / 32; w++)
		r = op(r, shared[w]);
	__syncthreads();
	return r;
}

#endif // BITNET_CUDA_REDUCE_CUH
