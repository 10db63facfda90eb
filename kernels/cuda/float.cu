// SPDX-License-Identifier: MIT
//
// float.cu — the float parts of the forward pass: float matrix products (the LM head, llama
// checkpoints), RMSNorm, residual adds, RoPE, the gated activation, the paged KV cache and
// attention. Each output has one reduction order fixed by the kernel's shape constants, never
// by the number of tokens in the launch: that is what keeps a sequence's logits independent
// of its batch.
#include "act.cuh"
#include "cuda_kernels.h"
#include "launch.cuh"
#include "reduce.cuh"

#include <cuda_fp16.h>
#include <mma.h>

namespace {

constexpr unsigned kRowThreads = 256;   // per-token kernels
constexpr unsigned kGemmWarps = 8;      // F32 gemm: rows per block
constexpr unsigned kGemmTokens = 8;     // F32 gemm: tokens per pass over a row
constexpr unsigned kHalfTile = 64;      // F16 gemm: rows and tokens per block
constexpr unsigned kAttnWarps = 4;

int launched()
{
	return (int)cudaGetLastError();
}

// ---- F32 weights: one warp per row, lane l owns k in [8l + 256i, +8), eight tokens a pass --

__device__ inline void load8(const float *p, float v[8])
{
	float4 a = __ldg(reinterpret_cast<const float4 *>(p));
	float4 b = __ldg(reinterpret_cast<const float4 *>(p) + 1);
	v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
	v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

__global__ void __launch_bounds__(kGemmWarps * 32)
f32_gemm_kernel(bn_cuda_fmat w, const float *x, uint32_t ldx, uint32_t n_tok, float *y,
		uint32_t ldy)
{
	unsigned lane = threadIdx.x % 32;
	uint32_t o = blockIdx.x * kGemmWarps + threadIdx.x / 32;
	if (o >= w.n_out)
		return;
	const float *wrow = static_cast<const float *>(w.data) + (size_t)o * w.ld;
	uint32_t k_end = (w.n_in + 7) / 8 * 8;
	for (uint32_t t0 = 0; t0 < n_tok; t0 += kGemmTokens) {
		float acc[kGemmTokens];
#pragma unroll
		for (unsigned t = 0; t < kGemmTokens; t++)
			acc[t] = 0.0f;
		for (uint32_t k = 8 * lane; k < k_end; k += 256) {
			float wv[8];
			load8(wrow + k, wv);
#pragma unroll
			for (unsigned t = 0; t < kGemmTokens; t++) {
				if (t0 + t >= n_tok)
					break;
				float xv[8];
				load8(x + (size_t)(t0 + t) * ldx + k, xv);
#pragma unroll
				for (unsigned j = 0; j < 8; j++)
					acc[t] = fmaf(wv[j], xv[j], acc[t]);
			}
		}
#pragma unroll
		for (unsigned t = 0; t < kGemmTokens; t++) {
			float v = warp_sum(acc[t]);
			uint32_t b = t0 + t;
			if (lane == t && b < n_tok)
				y[(size_t)b * ldy + o] = v;
		}
	}
}

// ---- F16 weights: half tensor cores, float accumulation ---------------------------------

// xh[t][k] = half(x[t][k]) for k < ld, t < n_pad (rows past n_tok and k past n_in are zero).
// The tensor-core kernel always computes whole 64-token tiles (constant fragment indices keep
// the accumulators in registers), so n_pad is n_tok rounded up to 64.
__global__ void to_half_kernel(const float *x, uint32_t ldx, uint32_t n_tok, uint32_t n_in,
			       __half *xh, uint32_t ld)
{
	uint32_t t = blockIdx.x;
	for (uint32_t k = threadIdx.x; k < ld; k += blockDim.x)
		xh[(size_t)t * ld + k] = __float2half_rn(t < n_tok && k < n_in ? x[(size_t)t * ldx + k] : 0.0f);
}

// Block (bx, by): rows [64 bx, +64) x tokens [64 by, +64); warp w owns rows 16 w and all 64
// tokens (four fragments). k runs 0, 16, 32, ... in order for every output.
__global__ void __launch_bounds__(128)
f16_gemm_kernel(bn_cuda_fmat w, const __half *xh, uint32_t n_tok, float *y, uint32_t ldy)
{
	using namespace nvcuda;
	__shared__ __align__(32) float stage[4][16 * 16];
	unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	uint32_t row0 = blockIdx.x * kHalfTile + 16 * warp, tok0 = blockIdx.y * kHalfTile;
	const __half *wbase = static_cast<const __half *>(w.data) + (size_t)row0 * w.ld;
	wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4];
	for (unsigned j = 0; j < 4; j++)
		wmma::fill_fragment(acc[j], 0.0f);
	for (uint32_t k = 0; k < w.ld; k += 16) {
		wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
		wmma::load_matrix_sync(fa, wbase + k, w.ld);
#pragma unroll
		for (unsigned j = 0; j < 4; j++) {
			wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
			wmma::load_matrix_sync(fb, xh + (size_t)(tok0 + 16 * j) * w.ld + k, w.ld);
			wmma::mma_sync(acc[j], fa, fb, acc[j]);
		}
	}
#pragma unroll
	for (unsigned j = 0; j < 4; j++) {
		wmma::store_matrix_sync(stage[warp], acc[j], 16, wmma::mem_col_major);
		__syncwarp();
		for (unsigned e = lane; e < 256; e += 32) {
			uint32_t o = row0 + e % 16, b = tok0 + 16 * j + e / 16;
			if (o < w.n_out && b < n_tok)
				y[(size_t)b * ldy + o] = stage[warp][e];
		}
		__syncwarp();
	}
}

// ---- element-wise -------------------------------------------------------------------------

__global__ void rmsnorm_kernel(float *out, uint32_t ldo, const float *x, uint32_t ldx,
			       const uint32_t *rows, const float *w, uint32_t n, float eps)
{
	__shared__ float partial[kRowThreads / 32];
	uint32_t t = blockIdx.x, src = rows ? rows[t] : t;
	const float *xr = x + (size_t)src * ldx;
	float *o = out + (size_t)t * ldo;
	float ss = 0.0f;
	for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
		ss = fmaf(xr[i], xr[i], ss);
	ss = block_reduce(ss, partial);
	float inv = 1.0f / sqrtf(ss / (float)n + eps);
	for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
		o[i] = xr[i] * inv * w[i];
}

__global__ void add_kernel(float *x, uint32_t ldx, const float *y, uint32_t ldy, uint32_t n)
{
	uint32_t t = blockIdx.x;
	for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
		x[(size_t)t * ldx + i] += y[(size_t)t * ldy + i];
}

__global__ void rope_kernel(float *v, uint32_t ldv, uint32_t n_heads, uint32_t head_dim,
			    uint32_t rope_dim, int neox, const float *cs)
{
	uint32_t t = blockIdx.x, half = rope_dim / 2;
	const float *c = cs + (size_t)t * rope_dim;
	for (uint32_t e = threadIdx.x; e < n_heads * half; e += blockDim.x) {
		uint32_t h = e / half, i = e % half;
		float *hv = v + (size_t)t * ldv + (size_t)h * head_dim;
		uint32_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
		float va = hv[a], vb = hv[b], cosv = c[2 * i], sinv = c[2 * i + 1];
		hv[a] = va * cosv - vb * sinv;
		hv[b] = va * sinv + vb * cosv;
	}
}

__global__ void gate_kernel(float *g, const float *u, uint32_t ld, uint32_t n, int act,
			    const float *sub_norm, float eps)
{
	__shared__ float partial[kRowThreads / 32];
	float *gr = g + (size_t)blockIdx.x * ld;
	const float *ur = u + (size_t)blockIdx.x * ld;
	float ss = 0.0f;
	for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
		float a = bn_act_mul(gr[i], ur[i], act);
		gr[i] = a;
		ss = fmaf(a, a, ss);
	}
	if (!sub_norm)
		return;
	ss = block_reduce(ss, partial);
	float inv = 1.0f / sqrtf(ss / (float)n + eps);
	for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
		gr[i] = gr[i] * inv * sub_norm[i];
}

// ---- KV cache and attention ---------------------------------------------------------------

__global__ void kv_store_kernel(bn_cuda_kv_layer kv, const float *k, const float *v, uint32_t ld,
				const uint32_t *slot)
{
	uint32_t t = blockIdx.x;
	if (slot[t] == UINT32_MAX)
		return;
	size_t dst = (size_t)slot[t] * kv.kv_dim;
	for (uint32_t i = threadIdx.x; i < kv.kv_dim; i += blockDim.x) {
		kv.K[dst + i] = k[(size_t)t * ld + i];
		kv.V[dst + i] = v[(size_t)t * ld + i];
	}
}

constexpr unsigned kDimPerLane = BN_CUDA_MAX_HEAD_DIM / 32;

// The running state of an online softmax over some positions: max score, sum of e^(s - m),
// and the weighted sum of values (element d = lane + 32 j in acc[j]).
struct SoftmaxState {
	float m, l, acc[kDimPerLane];
};

// Block (h, t): query head h of token t. Warp w takes positions w, w + 4, ... in order.
__global__ void __launch_bounds__(kAttnWarps * 32)
attend_kernel(bn_cuda_kv_layer kv, bn_cuda_attn a)
{
	__shared__ SoftmaxState states[kAttnWarps];
	unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	uint32_t h = blockIdx.x, t = blockIdx.y, hd = a.head_dim;
	uint32_t kvh = h / (a.n_head / a.n_head_kv), L = a.len[t];
	uint32_t first = a.window && L > a.window ? L - a.window : 0; // a sliding window's start
	const uint32_t *table = a.tables + a.table_off[t];
	const float *qh = a.q + (size_t)t * a.ldq + (size_t)h * hd;
	float q[kDimPerLane];
	SoftmaxState st;
	st.m = -INFINITY;
	st.l = 0.0f;
#pragma unroll
	for (unsigned j = 0; j < kDimPerLane; j++) {
		uint32_t d = lane + 32 * j;
		q[j] = d < hd ? qh[d] : 0.0f;
		st.acc[j] = 0.0f;
	}
	for (uint32_t pos = first + warp; pos < L; pos += kAttnWarps) {
		size_t row = (size_t)table[pos / kv.block_tokens] * kv.block_tokens + pos % kv.block_tokens;
		const float *kr = kv.K + row * kv.kv_dim + (size_t)kvh * hd;
		const float *vr = kv.V + row * kv.kv_dim + (size_t)kvh * hd;
		float s = 0.0f;
#pragma unroll
		for (unsigned j = 0; j < kDimPerLane; j++) {
			uint32_t d = lane + 32 * j;
			if (d < hd)
				s = fmaf(q[j], kr[d], s);
		}
		s = warp_sum(s) * a.scale;
		float m = fmaxf(st.m, s), corr = expf(st.m - m), p = expf(s - m);
		st.l = st.l * corr + p;
#pragma unroll
		for (unsigned j = 0; j < kDimPerLane; j++) {
			uint32_t d = lane + 32 * j;
			st.acc[j] = st.acc[j] * corr + (d < hd ? p * vr[d] : 0.0f);
		}
		st.m = m;
	}
	// Merge: lane values differ per lane (acc), m and l are warp-uniform.
	if (lane == 0) {
		states[warp].m = st.m;
		states[warp].l = st.l;
	}
	__syncthreads();
	float M = -INFINITY;
	for (unsigned w = 0; w < kAttnWarps; w++)
		if (states[w].l > 0.0f)
			M = fmaxf(M, states[w].m);
	float scale_own = st.l > 0.0f ? expf(st.m - M) : 0.0f;
	float total = 0.0f;
	for (unsigned w = 0; w < kAttnWarps; w++)
		if (states[w].l > 0.0f)
			total += states[w].l * expf(states[w].m - M);
	__syncthreads();
	// Values: each warp writes its scaled acc; warp 0 sums them in warp order.
	__shared__ float merged[kAttnWarps][BN_CUDA_MAX_HEAD_DIM];
#pragma unroll
	for (unsigned j = 0; j < kDimPerLane; j++)
		merged[warp][lane + 32 * j] = st.acc[j] * scale_own;
	__syncthreads();
	if (warp != 0)
		return;
	float *out = a.out + (size_t)t * a.ldo + (size_t)h * hd;
#pragma unroll
	for (unsigned j = 0; j < kDimPerLane; j++) {
		uint32_t d = lane + 32 * j;
		if (d >= hd)
			continue;
		float sum = 0.0f;
		for (unsigned w = 0; w < kAttnWarps; w++)
			sum += merged[w][d];
		out[d] = sum / total;
	}
}

} // namespace

extern "C" int bn_cuda_f_gemm(const bn_cuda_fmat *w, const float *x, uint32_t ldx, uint32_t n_tok,
			      float *y, uint32_t ldy, uint16_t *xh, cudaStream_t stream)
{
	if (n_tok == 0)
		return 0;
	if (w->type == BN_CUDA_F32) {
		unsigned blocks = (w->n_out + kGemmWarps - 1) / kGemmWarps;
		BN_LAUNCH(f32_gemm_kernel, blocks, kGemmWarps * 32, 0, stream)(*w, x, ldx, n_tok, y, ldy);
		return launched();
	}
	uint32_t n_pad = (n_tok + kHalfTile - 1) / kHalfTile * kHalfTile;
	__half *h = reinterpret_cast<__half *>(xh);
	BN_LAUNCH(to_half_kernel, n_pad, kRowThreads, 0, stream)(x, ldx, n_tok, w->n_in, h, w->ld);
	int rc = launched();
	if (rc)
		return rc;
	dim3 grid((w->n_out + kHalfTile - 1) / kHalfTile, (n_tok + kHalfTile - 1) / kHalfTile);
	BN_LAUNCH(f16_gemm_kernel, grid, 128, 0, stream)(*w, h, n_tok, y, ldy);
	return launched();
}

extern "C" int bn_cuda_rmsnorm(float *out, uint32_t ldo, const float *x, uint32_t ldx,
			       const uint32_t *rows, const float *w, uint32_t n, uint32_t n_tok,
			       float eps, cudaStream_t stream)
{
	if (n_tok == 0)
		return 0;
	BN_LAUNCH(rmsnorm_kernel, n_tok, kRowThreads, 0, stream)(out, ldo, x, ldx, rows, w, n, eps);
	return launched();
}

extern "C" int bn_cuda_add(float *x, uint32_t ldx, const float *y, uint32_t ldy, uint32_t n,
			   uint32_t n_tok, cudaStream_t stream)
{
	if (n_tok == 0)
		return 0;
	BN_LAUNCH(add_kernel, n_tok, kRowThreads, 0, stream)(x, ldx, y, ldy, n);
	return launched();
}

extern "C" int bn_cuda_rope(float *v, uint32_t ldv, uint32_t n_heads, uint32_t head_dim,
			    uint32_t rope_dim, int neox, const float *cs, uint32_t n_tok,
			    cudaStream_t stream)
{
	if (n_tok == 0 || rope_dim < 2)
		return 0;
	BN_LAUNCH(rope_kernel, n_tok, kRowThreads, 0, stream)(v, ldv, n_heads, head_dim, rope_dim, neox, cs);
	return launched();
}

extern "C" int bn_cuda_gate(float *g, const float *u, uint32_t ld, uint32_t n, uint32_t n_tok,
			    int act, const float *sub_norm, float eps, cudaStream_t stream)
{
	if (n_tok == 0)
		return 0;
	BN_LAUNCH(gate_kernel, n_tok, kRowThreads, 0, stream)(g, u, ld, n, act, sub_norm, eps);
	return launched();
}

extern "C" int bn_cuda_kv_store(const bn_cuda_kv_layer *kv, const float *k, const float *v,
				uint32_t ld, const uint32_t *slot, uint32_t n_tok, cudaStream_t stream)
{
	if (n_tok == 0)
		return 0;
	BN_LAUNCH(kv_store_kernel, n_tok, kRowThreads, 0, stream)(*kv, k, v, ld, slot);
	return launched();
}

extern "C" int bn_cuda_attend(const bn_cuda_kv_layer *kv, const bn_cuda_attn *a, uint32_t n_tok,
			      cudaStream_t stream)
{
	if (n_tok == 0)
		return 0;
	if (a->head_dim > BN_CUDA_MAX_HEAD_DIM || a->n_head_kv == 0 || a->n_head % a->n_head_kv)
		return (int)cudaErrorInvalidValue;
	dim3 grid(a->n_head, n_tok);
	BN_LAUNCH(attend_kernel, grid, kAttnWarps * 32, 0, stream)(*kv, *a);
	return launched();
}
