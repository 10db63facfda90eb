// SPDX-License-Identifier: MIT
//
// gemv.cu — the batch-1 ternary GEMV on the P16 layout (cuda_fast.h), and that layout's
// packing on the host.
//
// Why it should read the weights faster than gemv_dp4a_kernel (ternary.cu), which has one warp
// per row and reads a 2560-weight row as 40 16-byte pieces: there a lane has one or two loads
// in flight, then spends eight warp reductions on eight token slots even at batch 1, so the
// weights arrive at about an eighth of the copy rate (H100, 2026-11-26). Here a warp owns 16
// rows and a slice of their k range; each lane issues the loads of up to four chunks (128
// bytes) before it uses any, marked evict-first (the weights are read once a step, the
// activations many times); its two rows share each activation load; a warp reduces over four
// lanes only, for its T tokens alone; and a shape with few rows splits its k range over more
// warps, their integer sums meeting in split-k scratch (exact, so the same bits).
#include "cuda_fast.h"
#include "../bn_blocks.h"
#include "launch.cuh"
#include "splitk.cuh"

#include <string.h>

namespace {

using namespace bn_fast;

constexpr unsigned kWarps = 4;            // warps a block
constexpr unsigned kMaxTokens = 8;        // tokens a launch (pass)
constexpr unsigned kUnroll = 4;           // chunks a lane has in flight
constexpr uint32_t kTargetWarps = 4096;   // for the split: ~31 warps a multiprocessor on an H100
constexpr uint32_t kMaxSlices = 32;

// Warp (group g, slice s): chunks [c0, c1) of rows 16 g .. 16 g + 15. Lane l takes piece l % 4
// of rows l / 4 and 8 + l / 4: in P16 its two loads of a chunk are bytes 16 l and 512 + 16 l of
// the group's chunk, so the warp's are 1024 contiguous bytes. T: tokens compiled for
// (n_tok <= T; the others' activation rows are never read).
// Jetson Orin's code (sm_87, nvcc 13.0): left to its own occupancy guess, ptxas held
// gemv16_kernel<2> to 96 registers and spilled one; told the occupancy (4 blocks of kWarps
// warps: a cap of 128 registers) it takes 98 and spills none. sm_90's code is as it was.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 870
#define GEMV16_BOUNDS __launch_bounds__(kWarps * 32, 4)
#else
#define GEMV16_BOUNDS __launch_bounds__(kWarps * 32)
#endif

template <unsigned T>
__global__ void GEMV16_BOUNDS
gemv16_kernel(bn_cuda_t2 w, bn_cuda_q8 x, uint32_t n_tok, float *y, uint32_t ldy, uint32_t slices,
	      bn_cuda_splitk sk)
{
	unsigned lane = threadIdx.x % 32, piece = lane % 4;
	uint32_t wi = blockIdx.x * kWarps + threadIdx.x / 32;
	uint32_t n_groups = (w.n_out + kGroupRows - 1) / kGroupRows;
	if (wi >= n_groups * slices)
		return;
	uint32_t g = wi / slices, s = wi % slices, chunks = w.row_bytes / BN_T2_CHUNK_BYTES;
	uint32_t c0 = chunks * s / slices, c1 = chunks * (s + 1) / slices;
	const uint4 *group = reinterpret_cast<const uint4 *>(w.codes + (size_t)g * kGroupRows * w.row_bytes) + lane;
	int lo[T], hi[T];
#pragma unroll
	for (unsigned t = 0; t < T; t++)
		lo[t] = hi[t] = 0;
	for (uint32_t c = c0; c < c1; c += kUnroll) {
		uint4 wl[kUnroll], wh[kUnroll];
#pragma unroll
		for (unsigned u = 0; u < kUnroll; u++)
			if (c + u < c1) {
				wl[u] = __ldcs(group + (size_t)(c + u) * (kGroupChunkBytes / 16));
				wh[u] = __ldcs(group + (size_t)(c + u) * (kGroupChunkBytes / 16) + 32);
			}
#pragma unroll
		for (unsigned u = 0; u < kUnroll; u++) {
			if (c + u >= c1)
				break;
#pragma unroll
			for (unsigned t = 0; t < T; t++) {
				if (t >= n_tok)
					break;
				const int8_t *xr = x.q + (size_t)t * x.k_pad + (size_t)(c + u) * BN_T2_CHUNK + 16 * piece;
#pragma unroll
				for (unsigned p = 0; p < 4; p++) {
					int4 a = __ldg(reinterpret_cast<const int4 *>(xr + 64 * p));
					lo[t] = __dp4a((int)plane_codes(wl[u].x, p), a.x, lo[t]);
					lo[t] = __dp4a((int)plane_codes(wl[u].y, p), a.y, lo[t]);
					lo[t] = __dp4a((int)plane_codes(wl[u].z, p), a.z, lo[t]);
					lo[t] = __dp4a((int)plane_codes(wl[u].w, p), a.w, lo[t]);
					hi[t] = __dp4a((int)plane_codes(wh[u].x, p), a.x, hi[t]);
					hi[t] = __dp4a((int)plane_codes(wh[u].y, p), a.y, hi[t]);
					hi[t] = __dp4a((int)plane_codes(wh[u].z, p), a.z, hi[t]);
					hi[t] = __dp4a((int)plane_codes(wh[u].w, p), a.w, hi[t]);
				}
			}
		}
	}
	// The four lanes of a row hold its four pieces' sums.
#pragma unroll
	for (unsigned t = 0; t < T; t++) {
		lo[t] += __shfl_xor_sync(0xffffffffu, lo[t], 1);
		lo[t] += __shfl_xor_sync(0xffffffffu, lo[t], 2);
		hi[t] += __shfl_xor_sync(0xffffffffu, hi[t], 1);
		hi[t] += __shfl_xor_sync(0xffffffffu, hi[t], 2);
	}
	uint32_t row_lo = g * kGroupRows + lane / 4, row_hi = row_lo + 8;
	uint32_t n_pad = (w.n_out + 31) / 32 * 32;
	if (slices > 1) {
		if (piece == 0)
#pragma unroll
			for (unsigned t = 0; t < T; t++)
				if (t < n_tok) {
					atomicAdd(&sk.acc[t * n_pad + row_lo], lo[t]);
					atomicAdd(&sk.acc[t * n_pad + row_hi], hi[t]);
				}
		if (!splitk_last(&sk.count[g], slices))
			return;
		if (piece == 0)
#pragma unroll
			for (unsigned t = 0; t < T; t++)
				if (t < n_tok) {
					lo[t] = atomicExch(&sk.acc[t * n_pad + row_lo], 0);
					hi[t] = atomicExch(&sk.acc[t * n_pad + row_hi], 0);
				}
	}
	if (piece != 0)
		return;
#pragma unroll
	for (unsigned t = 0; t < T; t++) {
		if (t >= n_tok)
			break;
		if (row_lo < w.n_out)
			y[(size_t)t * ldy + row_lo] = ternary_out(lo[t] - x.sum[t], w.scale[row_lo], x.inv_scale[t]);
		if (row_hi < w.n_out)
			y[(size_t)t * ldy + row_hi] = ternary_out(hi[t] - x.sum[t], w.scale[row_hi], x.inv_scale[t]);
	}
}

int launched()
{
	return (int)cudaGetLastError();
}

uint32_t pick_slices(uint32_t slices, uint32_t n_groups, uint32_t chunks)
{
	if (slices == 0)
		slices = (kTargetWarps + n_groups - 1) / n_groups;
	slices = slices < kMaxSlices ? slices : kMaxSlices;
	return slices < chunks ? slices : chunks;
}

} // namespace

extern "C" size_t bn_cuda_p16_bytes(uint32_t n_out, uint32_t row_bytes)
{
	return (size_t)(n_out + kGroupRows - 1) / kGroupRows * kGroupRows * row_bytes;
}

extern "C" void bn_cuda_p16_pack(const uint8_t *codes, uint32_t n_out, uint32_t row_bytes, uint8_t *out)
{
	uint32_t chunks = row_bytes / BN_T2_CHUNK_BYTES, rows = (n_out + kGroupRows - 1) / kGroupRows * kGroupRows;
	for (uint32_t r = 0; r < rows; r++)
		for (uint32_t c = 0; c < chunks; c++) {
			uint8_t *dst = out + (size_t)(r / kGroupRows) * kGroupRows * row_bytes +
				       (size_t)c * kGroupChunkBytes + (r % kGroupRows) * BN_T2_CHUNK_BYTES;
			if (r < n_out)
				memcpy(dst, codes + (size_t)r * row_bytes + (size_t)c * BN_T2_CHUNK_BYTES,
				       BN_T2_CHUNK_BYTES);
			else
				memset(dst, 0x55, BN_T2_CHUNK_BYTES); /* code 1: weight 0 */
		}
}

extern "C" size_t bn_cuda_splitk_bytes(uint32_t max_n_out)
{
	uint32_t n_pad = (max_n_out + 31) / 32 * 32;
	return (size_t)32 * n_pad * sizeof(int32_t) + (size_t)(n_pad / kGroupRows) * 4 * sizeof(uint32_t);
}

extern "C" void bn_cuda_splitk_init(bn_cuda_splitk *sk, void *base, uint32_t max_n_out)
{
	uint32_t n_pad = (max_n_out + 31) / 32 * 32;
	sk->acc = static_cast<int32_t *>(base);
	sk->acc_len = 32 * n_pad;
	sk->count = reinterpret_cast<uint32_t *>(sk->acc + sk->acc_len);
	sk->count_len = n_pad / kGroupRows * 4;
}

extern "C" int bn_cuda_t2_gemv16(const bn_cuda_t2 *w, const bn_cuda_q8 *x, uint32_t n_tok, float *y,
				 uint32_t ldy, uint32_t slices, const bn_cuda_splitk *sk,
				 cudaStream_t stream)
{
	uint32_t n_groups = (w->n_out + kGroupRows - 1) / kGroupRows;
	uint32_t n_pad = (w->n_out + 31) / 32 * 32;
	slices = pick_slices(slices, n_groups, w->row_bytes / BN_T2_CHUNK_BYTES);
	if (slices > 1 && (!sk || sk->acc_len < kMaxTokens * n_pad || sk->count_len < n_groups))
		slices = 1;
	bn_cuda_splitk none = {};
	const bn_cuda_splitk &s = slices > 1 ? *sk : none;
	unsigned blocks = (n_groups * slices + kWarps - 1) / kWarps;
	for (uint32_t t0 = 0; t0 < n_tok; t0 += kMaxTokens) {
		uint32_t n = n_tok - t0 < kMaxTokens ? n_tok - t0 : kMaxTokens;
		bn_cuda_q8 xs = *x;
		xs.q += (size_t)t0 * x->k_pad;
		xs.inv_scale += t0;
		xs.sum += t0;
		float *ys = y + (size_t)t0 * ldy;
		if (n == 1)
			BN_LAUNCH(gemv16_kernel<1>, blocks, kWarps * 32, 0, stream)(*w, xs, n, ys, ldy, slices, s);
		else if (n == 2)
			BN_LAUNCH(gemv16_kernel<2>, blocks, kWarps * 32, 0, stream)(*w, xs, n, ys, ldy, slices, s);
		else if (n <= 4)
			BN_LAUNCH(gemv16_kernel<4>, blocks, kWarps * 32, 0, stream)(*w, xs, n, ys, ldy, slices, s);
		else
			BN_LAUNCH(gemv16_kernel<8>, blocks, kWarps * 32, 0, stream)(*w, xs, n, ys, ldy, slices, s);
		int rc = launched();
		if (rc)
			return rc;
	}
	return 0;
}
