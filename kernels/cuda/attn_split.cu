// SPDX-License-Identifier: MIT
//
// attn_split.cu — attention over a paged cache split along the context (flash-decoding,
// cuda_fast.h). attend_kernel (float.cu) gives each (token, head) one block of four warps over
// all its positions: a decode step at batch 1 is then n_head blocks, on a GPU of 132
// multiprocessors, however long the context. Here each split of `split` positions is a block
// of its own (the same four interleaved warps, the same online softmax and warp-order merge),
// and a second kernel merges the splits in split order.
//
// Exactness: the split of a token's positions depends on its context length alone, never on
// the launch (the grid's extra blocks return at once), so a token's output is the same alone,
// in any batch, in prefill or one step at a time. A token with at most `split` positions is
// computed by attend_kernel's own operations and gives its bits; a longer one sums in another
// order (per split, then over splits), so its bits differ from attend_kernel's by rounding.
#include "cuda_fast.h"
#include "launch.cuh"
#include "reduce.cuh"

namespace {

constexpr unsigned kWarps = 4;
constexpr unsigned kDimPerLane = BN_CUDA_MAX_HEAD_DIM / 32;

struct SoftmaxState {
	float m, l, acc[kDimPerLane];
};

// A split's record in part: its max score, its sum of e^(s - m) and its weighted values.
__host__ __device__ constexpr uint32_t record_floats(uint32_t head_dim)
{
	return (head_dim + 2 + 3) / 4 * 4;
}

// Block (h, t, s): query head h of token t over split s, positions [s split, (s + 1) split)
// of [0, len). attend_kernel's body on that range.
__global__ void __launch_bounds__(kWarps * 32)
attend_split_kernel(bn_cuda_kv_layer kv, bn_cuda_attn a, uint32_t split, uint32_t max_splits,
		    float *part)
{
	__shared__ SoftmaxState states[kWarps];
	__shared__ float merged[kWarps][BN_CUDA_MAX_HEAD_DIM];
	unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	uint32_t h = blockIdx.x, t = blockIdx.y, s = blockIdx.z, hd = a.head_dim;
	uint32_t L = a.len[t], n_splits = (L + split - 1) / split;
	if (s >= n_splits)
		return;
	uint32_t p0 = s * split, p1 = L - p0 < split ? L : p0 + split;
	uint32_t kvh = h / (a.n_head / a.n_head_kv);
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
	for (uint32_t pos = p0 + warp; pos < p1; pos += kWarps) {
		size_t row = (size_t)table[pos / kv.block_tokens] * kv.block_tokens + pos % kv.block_tokens;
		const float *kr = kv.K + row * kv.kv_dim + (size_t)kvh * hd;
		const float *vr = kv.V + row * kv.kv_dim + (size_t)kvh * hd;
		float sc = 0.0f;
#pragma unroll
		for (unsigned j = 0; j < kDimPerLane; j++) {
			uint32_t d = lane + 32 * j;
			if (d < hd)
				sc = fmaf(q[j], kr[d], sc);
		}
		sc = warp_sum(sc) * a.scale;
		float m = fmaxf(st.m, sc), corr = expf(st.m - m), p = expf(sc - m);
		st.l = st.l * corr + p;
#pragma unroll
		for (unsigned j = 0; j < kDimPerLane; j++) {
			uint32_t d = lane + 32 * j;
			st.acc[j] = st.acc[j] * corr + (d < hd ? p * vr[d] : 0.0f);
		}
		st.m = m;
	}
	if (lane == 0) {
		states[warp].m = st.m;
		states[warp].l = st.l;
	}
	__syncthreads();
	float M = -INFINITY;
	for (unsigned w = 0; w < kWarps; w++)
		if (states[w].l > 0.0f)
			M = fmaxf(M, states[w].m);
	float scale_own = st.l > 0.0f ? expf(st.m - M) : 0.0f;
	float total = 0.0f;
	for (unsigned w = 0; w < kWarps; w++)
		if (states[w].l > 0.0f)
			total += states[w].l * expf(states[w].m - M);
	__syncthreads();
#pragma unroll
	for (unsigned j = 0; j < kDimPerLane; j++)
		merged[warp][lane + 32 * j] = st.acc[j] * scale_own;
	__syncthreads();
	if (warp != 0)
		return;
	// One split: attend_kernel's output. Several: this split's record, unnormalised.
	float *rec = part + (((size_t)t * a.n_head + h) * max_splits + s) * record_floats(hd);
	float *out = a.out + (size_t)t * a.ldo + (size_t)h * hd;
	if (n_splits > 1 && lane == 0) {
		rec[0] = M;
		rec[1] = total;
	}
#pragma unroll
	for (unsigned j = 0; j < kDimPerLane; j++) {
		uint32_t d = lane + 32 * j;
		if (d >= hd)
			continue;
		float sum = 0.0f;
		for (unsigned w = 0; w < kWarps; w++)
			sum += merged[w][d];
		if (n_splits == 1)
			out[d] = sum / total;
		else
			rec[2 + d] = sum;
	}
}

// Block (h, t), one warp: the splits' records merged in split order.
__global__ void merge_splits_kernel(bn_cuda_attn a, uint32_t split, uint32_t max_splits,
				    const float *part)
{
	unsigned lane = threadIdx.x;
	uint32_t h = blockIdx.x, t = blockIdx.y, hd = a.head_dim;
	uint32_t n_splits = (a.len[t] + split - 1) / split;
	if (n_splits <= 1)
		return;
	const float *rec = part + ((size_t)t * a.n_head + h) * max_splits * record_floats(hd);
	float M = -INFINITY;
	for (uint32_t s = 0; s < n_splits; s++)
		M = fmaxf(M, rec[s * record_floats(hd)]);
	float total = 0.0f;
	for (uint32_t s = 0; s < n_splits; s++)
		total += rec[s * record_floats(hd) + 1] * expf(rec[s * record_floats(hd)] - M);
	float *out = a.out + (size_t)t * a.ldo + (size_t)h * hd;
	for (uint32_t d = lane; d < hd; d += 32) {
		float sum = 0.0f;
		for (uint32_t s = 0; s < n_splits; s++)
			sum += rec[s * record_floats(hd) + 2 + d] * expf(rec[s * record_floats(hd)] - M);
		out[d] = sum / total;
	}
}

int launched()
{
	return (int)cudaGetLastError();
}

} // namespace

extern "C" size_t bn_cuda_attend_split_bytes(uint32_t n_tok, uint32_t n_head, uint32_t head_dim,
					     uint32_t max_splits)
{
	return (size_t)n_tok * n_head * max_splits * record_floats(head_dim) * sizeof(float);
}

extern "C" int bn_cuda_attend_split(const bn_cuda_kv_layer *kv, const bn_cuda_attn *a, uint32_t n_tok,
				    uint32_t split, uint32_t max_splits, float *part,
				    cudaStream_t stream)
{
	if (n_tok == 0)
		return 0;
	if (a->head_dim > BN_CUDA_MAX_HEAD_DIM || a->n_head_kv == 0 || a->n_head % a->n_head_kv ||
	    split < 16 || (split & (split - 1)) || max_splits == 0 || a->window)
		return (int)cudaErrorInvalidValue; /* a window's few positions: bn_cuda_attend */
	dim3 grid(a->n_head, n_tok, max_splits);
	BN_LAUNCH(attend_split_kernel, grid, kWarps * 32, 0, stream)(*kv, *a, split, max_splits, part);
	int rc = launched();
	if (rc || max_splits == 1)
		return rc;
	dim3 merge(a->n_head, n_tok);
	BN_LAUNCH(merge_splits_kernel, merge, 32, 0, stream)(*a, split, max_splits, part);
	return launched();
}
