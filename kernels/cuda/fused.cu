// SPDX-License-Identifier: MIT
//
// fused.cu — element-wise kernels that each do what two or three of float.cu's and ternary.cu's
// do one after another, in one launch and one pass over the row (cuda_fast.h).
//
// Bit-identical by construction: a fused kernel has the block shape of the kernels it replaces
// (256 threads, one token a block), so every thread owns the same elements and every reduction
// (reduce.cuh) runs in the same order; each element gets the same float operations, written as
// the same expressions (nvcc contracts a * b + c into an FMA the same way in both, and divides
// and square roots are IEEE without fast-math). Where the unfused sequence wrote a float and
// read it back, the fused kernel recomputes it from the same inputs instead: same operands,
// same bits. The tests compare them bit for bit.
#include "act.cuh"
#include "cuda_fast.h"
#include "launch.cuh"
#include "reduce.cuh"

namespace {

constexpr unsigned kThreads = 256; // float.cu's kRowThreads, ternary.cu's kQuantThreads

struct MaxOp {
	__device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// 1 / rms of the row, as rmsnorm_kernel computes it from its sum of squares.
__device__ __forceinline__ float inv_rms(float ss, uint32_t n, float eps)
{
	return 1.0f / sqrtf(ss / (float)n + eps);
}

// quantize_kernel's second half, on values val(k) for k < n (the absmax already reduced): the
// row's int8 codes, padding zeros, the exact sum and the inverse scale.
template <typename Val>
__device__ void quantize_row(Val val, float amax, uint32_t n, const bn_cuda_q8 &xq, uint32_t t)
{
	__shared__ int ssum[kThreads / 32];
	int8_t *q = xq.q + (size_t)t * xq.k_pad;
	float s = amax > 0.0f ? 127.0f / amax : 0.0f;
	int sum = 0;
	for (uint32_t k = threadIdx.x; k < xq.k_pad; k += blockDim.x) {
		int8_t v = 0;
		if (k < n) {
			float f = rintf(__fmul_rn(val(k), s));
			f = isnan(f) ? 0.0f : f > 127.0f ? 127.0f : f < -128.0f ? -128.0f : f;
			v = (int8_t)f;
		}
		q[k] = v;
		sum += v;
	}
	sum = block_reduce(sum, ssum);
	if (threadIdx.x == 0) {
		xq.inv_scale[t] = amax / 127.0f;
		xq.sum[t] = sum;
	}
}

// The absmax of val(k), k < n, as quantize_kernel reduces it.
template <typename Val>
__device__ float absmax(Val val, uint32_t n)
{
	__shared__ float smax[kThreads / 32];
	float amax = 0.0f;
	for (uint32_t k = threadIdx.x; k < n; k += blockDim.x)
		amax = fmaxf(amax, fabsf(val(k)));
	return block_reduce(amax, smax, MaxOp());
}

// add_kernel, then rmsnorm_kernel's sum of squares: x[i] + y[i] written back, squares summed.
__device__ float add_sum_squares(float *xr, const float *yr, uint32_t n)
{
	__shared__ float partial[kThreads / 32];
	float ss = 0.0f;
	for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
		if (yr)
			xr[i] += yr[i];
		ss = fmaf(xr[i], xr[i], ss);
	}
	return block_reduce(ss, partial);
}

__global__ void add_norm_quant_kernel(float *x, uint32_t ldx, const float *y, uint32_t ldy,
				      const float *w, uint32_t n, float eps, bn_cuda_q8 xq)
{
	uint32_t t = blockIdx.x;
	float *xr = x + (size_t)t * ldx;
	float inv = inv_rms(add_sum_squares(xr, y ? y + (size_t)t * ldy : nullptr, n), n, eps);
	auto normed = [=](uint32_t i) { return xr[i] * inv * w[i]; };
	quantize_row(normed, absmax(normed, n), n, xq, t);
}

__global__ void add_rmsnorm_kernel(float *out, uint32_t ldo, float *x, uint32_t ldx, const float *y,
				   uint32_t ldy, const uint32_t *rows, const float *w, uint32_t n,
				   float eps)
{
	uint32_t t = blockIdx.x, src = rows ? rows[t] : t;
	float *xr = x + (size_t)src * ldx, *o = out + (size_t)t * ldo;
	float inv = inv_rms(add_sum_squares(xr, y ? y + (size_t)src * ldy : nullptr, n), n, eps);
	for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
		o[i] = xr[i] * inv * w[i];
}

// gate_kernel's activation of element i: act(g) * u (act.cuh).
__device__ __forceinline__ float gated(const float *gr, const float *ur, uint32_t i, int act)
{
	return bn_act_mul(gr[i], ur[i], act);
}

__global__ void gate_quant_kernel(const float *g, const float *u, uint32_t ld, uint32_t n, int act,
				  const float *sub_norm, float eps, bn_cuda_q8 xq)
{
	__shared__ float partial[kThreads / 32];
	uint32_t t = blockIdx.x;
	const float *gr = g + (size_t)t * ld, *ur = u + (size_t)t * ld;
	if (!sub_norm) {
		auto gu = [=](uint32_t i) { return gated(gr, ur, i, act); };
		quantize_row(gu, absmax(gu, n), n, xq, t);
		return;
	}
	float ss = 0.0f;
	for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
		float a = gated(gr, ur, i, act);
		ss = fmaf(a, a, ss);
	}
	float inv = inv_rms(block_reduce(ss, partial), n, eps);
	auto normed = [=](uint32_t i) { return gated(gr, ur, i, act) * inv * sub_norm[i]; };
	quantize_row(normed, absmax(normed, n), n, xq, t);
}

// rope_kernel's rotation of one pair (float.cu), the same expressions.
__device__ __forceinline__ void rotate(float va, float vb, float cosv, float sinv, float *ra, float *rb)
{
	*ra = va * cosv - vb * sinv;
	*rb = va * sinv + vb * cosv;
}

__global__ void rope_store_kernel(float *q, uint32_t ldq, const float *k, const float *v,
				  uint32_t ldkv, uint32_t n_head, uint32_t n_head_kv,
				  uint32_t head_dim, uint32_t rope_dim, int neox, const float *cs,
				  bn_cuda_kv_layer kv, const uint32_t *slot)
{
	uint32_t t = blockIdx.x, half = rope_dim / 2;
	const float *c = cs + (size_t)t * rope_dim;
	if (half) {
		for (uint32_t e = threadIdx.x; e < n_head * half; e += blockDim.x) {
			uint32_t h = e / half, i = e % half;
			float *hv = q + (size_t)t * ldq + (size_t)h * head_dim;
			uint32_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
			rotate(hv[a], hv[b], c[2 * i], c[2 * i + 1], &hv[a], &hv[b]);
		}
	}
	// Keys: element d of a head is rotated with its pair when d < rope_dim, else copied.
	if (slot[t] == UINT32_MAX) // a padding row of a graph step (kv_store_kernel skips it too)
		return;
	size_t dst = (size_t)slot[t] * kv.kv_dim;
	const float *kr = k + (size_t)t * ldkv, *vr = v + (size_t)t * ldkv;
	for (uint32_t d = threadIdx.x; d < kv.kv_dim; d += blockDim.x) {
		uint32_t h = d / head_dim, j = d % head_dim;
		kv.V[dst + d] = vr[d];
		if (j >= (half ? rope_dim : 0)) {
			kv.K[dst + d] = kr[d];
			continue;
		}
		uint32_t i = neox ? j % half : j / 2, a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
		const float *hk = kr + (size_t)h * head_dim;
		float ra, rb;
		rotate(hk[a], hk[b], c[2 * i], c[2 * i + 1], &ra, &rb);
		kv.K[dst + d] = j == a ? ra : rb;
	}
	(void)n_head_kv;
}

int launched()
{
	return (int)cudaGetLastError();
}

} // namespace

extern "C" int bn_cuda_add_norm_quant(float *x, uint32_t ldx, const float *y, uint32_t ldy,
				      const float *w, uint32_t n, uint32_t n_tok, float eps,
				      const bn_cuda_q8 *xq, cudaStream_t stream)
{
	if (n_tok == 0)
		return 0;
	BN_LAUNCH(add_norm_quant_kernel, n_tok, kThreads, 0, stream)(x, ldx, y, ldy, w, n, eps, *xq);
	return launched();
}

extern "C" int bn_cuda_add_rmsnorm(float *out, uint32_t ldo, float *x, uint32_t ldx, const float *y,
				   uint32_t ldy, const uint32_t *rows, const float *w, uint32_t n,
				   uint32_t n_tok, float eps, cudaStream_t stream)
{
	if (n_tok == 0)
		return 0;
	BN_LAUNCH(add_rmsnorm_kernel, n_tok, kThreads, 0, stream)(out, ldo, x, ldx, y, ldy, rows, w, n, eps);
	return launched();
}

extern "C" int bn_cuda_gate_quant(const float *g, const float *u, uint32_t ld, uint32_t n,
				  uint32_t n_tok, int act, const float *sub_norm, float eps,
				  const bn_cuda_q8 *xq, cudaStream_t stream)
{
	if (n_tok == 0)
		return 0;
	BN_LAUNCH(gate_quant_kernel, n_tok, kThreads, 0, stream)(g, u, ld, n, act, sub_norm, eps, *xq);
	return launched();
}

extern "C" int bn_cuda_rope_store(float *q, uint32_t ldq, const float *k, const float *v,
				  uint32_t ldkv, uint32_t n_head, uint32_t n_head_kv,
				  uint32_t head_dim, uint32_t rope_dim, int neox, const float *cs,
				  const bn_cuda_kv_layer *kv, const uint32_t *slot, uint32_t n_tok,
				  cudaStream_t stream)
{
	if (n_tok == 0)
		return 0;
	BN_LAUNCH(rope_store_kernel, n_tok, kThreads, 0, stream)(q, ldq, k, v, ldkv, n_head, n_head_kv,
								 head_dim, rope_dim < 2 ? 0 : rope_dim,
								 neox, cs, *kv, slot);
	return launched();
}
