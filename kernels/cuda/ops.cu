// SPDX-License-Identifier: MIT
//
// ops.cu — the kernels of the request kinds beyond plain generation (cuda_ops.h):
//
//  - score: one block per scored position takes its logits row's maximum and log-normalizer in
//    exactly the order sample.cu's ranking does (same block shape, same per-thread strides, the
//    same block reduction), so a target's log-probability and the same token's among the
//    alternatives bn_cuda_sample reports are the same bits;
//  - a fork's KV copy: the positions of a partial block, every layer, keys and values, one
//    launch.
#include "cuda_ops.h"
#include "launch.cuh"
#include "reduce.cuh"

#include <cfloat>

namespace {

constexpr unsigned kRowThreads = 1024; // as sample.cu's ranking: the sum's order depends on it
constexpr unsigned kCopyThreads = 256;

int launched()
{
	return (int)cudaGetLastError();
}

// bn_cuda_sample's clamp: NaN to -FLT_MAX, infinities to +-FLT_MAX.
__device__ inline float clamped(float v)
{
	return !(v >= -FLT_MAX) ? -FLT_MAX : v > FLT_MAX ? FLT_MAX : v;
}

struct MaxOp {
	__device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

__global__ void __launch_bounds__(kRowThreads)
score_kernel(const float *logits, uint32_t ld, uint32_t n, const bn_cuda_score_row *rows,
	     float *out)
{
	__shared__ float fpartial[kRowThreads / 32];
	__shared__ double dpartial[kRowThreads / 32];
	bn_cuda_score_row row = rows[blockIdx.x];
	const float *l = logits + (size_t)row.logit_row * ld;
	// The maximum does not depend on the order; the sum below does, and follows sample.cu.
	float m = -FLT_MAX;
	for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
		m = fmaxf(m, clamped(l[i]));
	m = block_reduce(m, fpartial, MaxOp());
	double z = 0.0;
	for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
		z += (double)expf(clamped(l[i]) - m);
	z = block_reduce(z, dpartial);
	if (threadIdx.x == 0)
		out[blockIdx.x] = (float)((double)clamped(l[row.target]) - m - log(z));
}

// Layer blockIdx.y; the keys and the values of n floats.
__global__ void kv_copy_kernel(float *K, float *V, size_t layer_floats, size_t dst, size_t src,
			       uint32_t n)
{
	uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	size_t layer = (size_t)blockIdx.y * layer_floats;
	K[layer + dst + i] = K[layer + src + i];
	V[layer + dst + i] = V[layer + src + i];
}

} // namespace

extern "C" int bn_cuda_score(const float *logits, uint32_t ld, uint32_t n_vocab,
			     const bn_cuda_score_row *rows, uint32_t n_rows, float *out,
			     cudaStream_t stream)
{
	if (n_rows == 0)
		return 0;
	BN_LAUNCH(score_kernel, n_rows, kRowThreads, 0, stream)(logits, ld, n_vocab, rows, out);
	return launched();
}

extern "C" int bn_cuda_kv_copy(float *K, float *V, size_t layer_floats, uint32_t n_layer,
			       size_t dst, size_t src, uint32_t n, cudaStream_t stream)
{
	if (n == 0 || n_layer == 0)
		return 0;
	if ((dst < src ? src - dst : dst - src) < n)
		return (int)cudaErrorInvalidValue;
	dim3 grid((n + kCopyThreads - 1) / kCopyThreads, n_layer);
	BN_LAUNCH(kv_copy_kernel, grid, kCopyThreads, 0, stream)(K, V, layer_floats, dst, src, n);
	return launched();
}
