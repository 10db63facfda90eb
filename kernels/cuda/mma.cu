// SPDX-License-Identifier: MIT
//
// mma.cu — ternary x int8 on the int8 tensor cores with PTX mma.sync m16n8k32 (cuda_fast.h).
//
// Why it should beat gemm_tc_kernel (ternary.cu), which decodes each 64-row tile into shared
// memory as -1/0/+1 bytes, loads it back through WMMA fragments and synchronises the block
// twice a chunk: the T2 planes already hold, in each 4-byte word, four consecutive weights of
// a plane (plus one), so a lane can load the codes of its A fragments straight from memory and
// have each register after one shift and one mask. The unsigned codes go into the u8 x s8
// form of mma.sync and the +1 offset comes off with the activation sums, as in the dp4a
// kernels. No shared memory and no barrier; the activations come through the cache as 16-byte
// loads that are each a B fragment's two registers for both halves of a plane.
//
// The k order inside a fragment: lane (g = l / 4, t = l % 4) loads piece t (16 bytes) of its
// rows' chunk; word j of it holds, for plane p, weights 64 p + 16 t + 4 j + [0, 4). One mma
// step (plane p, half h) takes words 2h and 2h + 1 as A's columns [4t, 4t + 4) and
// [16 + 4t, 16 + 4t + 4), and B's registers are the activations at the same k: bytes
// 64 p + 16 t + 8 h + [0, 8) of the token's row, the int2 at half h of one int4 load. Any such
// bijection of k gives the same integer sum.
#include "cuda_fast.h"
#include "../bn_blocks.h"
#include "launch.cuh"
#include "ptx.cuh"
#include "splitk.cuh"

namespace {

using namespace bn_fast;

constexpr unsigned kWarps = 4;          // a block: 4 warps x 32 rows
constexpr unsigned kWarpRows = 32;      // two 16-row groups
constexpr unsigned kBlockRows = kWarps * kWarpRows;
constexpr uint32_t kSplitMaxTokens = 32; // split k only while the weights dominate
constexpr uint32_t kTargetBlocks = 1024;
constexpr uint32_t kMaxSlices = 32;

// Block (token tile bx, row tile by, slice bz); warp w: rows by 128 + 32 w + [0, 32), tokens
// bx 8 NJ + [0, 8 NJ). acc[i][j]: group i (16 rows) x token tile j (8 tokens).
template <unsigned NJ>
__global__ void __launch_bounds__(kWarps * 32)
mma_kernel(bn_cuda_t2 w, int p16, bn_cuda_q8 x, uint32_t n_tok, float *y, uint32_t ldy,
	   uint32_t slices, bn_cuda_splitk sk)
{
	unsigned lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
	uint32_t row0 = blockIdx.y * kBlockRows + threadIdx.x / 32 * kWarpRows;
	if (row0 >= w.n_out)
		return;
	uint32_t tok0 = blockIdx.x * 8 * NJ, chunks = w.row_bytes / BN_T2_CHUNK_BYTES;
	uint32_t c0 = chunks * blockIdx.z / slices, c1 = chunks * (blockIdx.z + 1) / slices;
	// The rows this lane loads: g and g + 8 of each group; rows past the matrix (its padded
	// groups in P16) read its last row instead, and their sums are never written.
	uint32_t last_row = p16 ? (w.n_out + kGroupRows - 1) / kGroupRows * kGroupRows - 1 : w.n_out - 1;
	const uint8_t *rows[2][2];
#pragma unroll
	for (unsigned i = 0; i < 2; i++)
#pragma unroll
		for (unsigned half = 0; half < 2; half++) {
			uint32_t r = row0 + 16 * i + g + 8 * half;
			r = r < last_row ? r : last_row;
			rows[i][half] = w.codes + code_offset(p16, w.row_bytes, r, 0, t);
		}
	size_t chunk_step = p16 ? kGroupChunkBytes : BN_T2_CHUNK_BYTES;
	const int8_t *xrow[NJ];
#pragma unroll
	for (unsigned j = 0; j < NJ; j++) {
		uint32_t b = tok0 + 8 * j + g;
		xrow[j] = b < n_tok ? x.q + (size_t)b * x.k_pad + 16 * t : nullptr;
	}
	int acc[2][NJ][4];
#pragma unroll
	for (unsigned i = 0; i < 2; i++)
#pragma unroll
		for (unsigned j = 0; j < NJ; j++)
#pragma unroll
			for (unsigned r = 0; r < 4; r++)
				acc[i][j][r] = 0;
	uint4 next[2][2];
	if (c0 < c1)
#pragma unroll
		for (unsigned i = 0; i < 2; i++)
#pragma unroll
			for (unsigned half = 0; half < 2; half++)
				next[i][half] = __ldcs(reinterpret_cast<const uint4 *>(rows[i][half] + c0 * chunk_step));
	for (uint32_t c = c0; c < c1; c++) {
		uint4 cur[2][2];
#pragma unroll
		for (unsigned i = 0; i < 2; i++)
#pragma unroll
			for (unsigned half = 0; half < 2; half++) {
				cur[i][half] = next[i][half];
				if (c + 1 < c1) // the next chunk's weights in flight while this one computes
					next[i][half] = __ldcs(reinterpret_cast<const uint4 *>(rows[i][half] + (c + 1) * chunk_step));
			}
#pragma unroll
		for (unsigned p = 0; p < 4; p++) {
			unsigned a[2][4][2]; // [group][word][row half]
#pragma unroll
			for (unsigned i = 0; i < 2; i++)
#pragma unroll
				for (unsigned half = 0; half < 2; half++) {
					a[i][0][half] = plane_codes(cur[i][half].x, p);
					a[i][1][half] = plane_codes(cur[i][half].y, p);
					a[i][2][half] = plane_codes(cur[i][half].z, p);
					a[i][3][half] = plane_codes(cur[i][half].w, p);
				}
#pragma unroll
			for (unsigned j = 0; j < NJ; j++) {
				int4 bv = make_int4(0, 0, 0, 0);
				if (xrow[j])
					bv = __ldg(reinterpret_cast<const int4 *>(xrow[j] + (size_t)c * BN_T2_CHUNK + 64 * p));
				unsigned b0[2] = { (unsigned)bv.x, (unsigned)bv.y }, b1[2] = { (unsigned)bv.z, (unsigned)bv.w };
#pragma unroll
				for (unsigned i = 0; i < 2; i++) {
					unsigned f0[4] = { a[i][0][0], a[i][0][1], a[i][1][0], a[i][1][1] };
					unsigned f1[4] = { a[i][2][0], a[i][2][1], a[i][3][0], a[i][3][1] };
					mma_u8s8_m16n8k32(acc[i][j], f0, b0);
					mma_u8s8_m16n8k32(acc[i][j], f1, b1);
				}
			}
		}
	}
	// acc[i][j][r]: row row0 + 16 i + g + 8 (r >> 1), token tok0 + 8 j + 2 t + (r & 1).
	uint32_t n_pad = (w.n_out + 31) / 32 * 32;
	if (slices > 1) {
#pragma unroll
		for (unsigned i = 0; i < 2; i++)
#pragma unroll
			for (unsigned j = 0; j < NJ; j++)
#pragma unroll
				for (unsigned r = 0; r < 4; r++) {
					uint32_t o = row0 + 16 * i + g + 8 * (r >> 1), b = tok0 + 8 * j + 2 * t + (r & 1);
					if (b < n_tok)
						atomicAdd(&sk.acc[b * n_pad + o], acc[i][j][r]);
				}
		uint32_t tile = row0 / kWarpRows * gridDim.x + blockIdx.x;
		if (!splitk_last(&sk.count[tile], slices))
			return;
#pragma unroll
		for (unsigned i = 0; i < 2; i++)
#pragma unroll
			for (unsigned j = 0; j < NJ; j++)
#pragma unroll
				for (unsigned r = 0; r < 4; r++) {
					uint32_t o = row0 + 16 * i + g + 8 * (r >> 1), b = tok0 + 8 * j + 2 * t + (r & 1);
					if (b < n_tok)
						acc[i][j][r] = atomicExch(&sk.acc[b * n_pad + o], 0);
				}
	}
#pragma unroll
	for (unsigned i = 0; i < 2; i++)
#pragma unroll
		for (unsigned j = 0; j < NJ; j++)
#pragma unroll
			for (unsigned r = 0; r < 4; r++) {
				uint32_t o = row0 + 16 * i + g + 8 * (r >> 1), b = tok0 + 8 * j + 2 * t + (r & 1);
				if (o < w.n_out && b < n_tok)
					y[(size_t)b * ldy + o] = ternary_out(acc[i][j][r] - x.sum[b], w.scale[o], x.inv_scale[b]);
			}
}

int launched()
{
	return (int)cudaGetLastError();
}

} // namespace

extern "C" int bn_cuda_t2_mma(const bn_cuda_t2 *w, int p16, const bn_cuda_q8 *x, uint32_t n_tok,
			      float *y, uint32_t ldy, uint32_t slices, const bn_cuda_splitk *sk,
			      cudaStream_t stream)
{
	if (n_tok == 0)
		return 0;
	unsigned nj = n_tok <= 16 ? 2 : n_tok <= 32 ? 4 : 8;
	uint32_t tiles = (n_tok + 8 * nj - 1) / (8 * nj), row_tiles = (w->n_out + kBlockRows - 1) / kBlockRows;
	uint32_t chunks = w->row_bytes / BN_T2_CHUNK_BYTES, n_pad = (w->n_out + 31) / 32 * 32;
	if (n_tok > kSplitMaxTokens)
		slices = 1;
	else if (slices == 0)
		slices = (kTargetBlocks + row_tiles * tiles - 1) / (row_tiles * tiles);
	slices = slices < kMaxSlices ? slices : kMaxSlices;
	slices = slices < chunks ? slices : chunks;
	if (slices > 1 && (!sk || sk->acc_len < kSplitMaxTokens * n_pad || sk->count_len < n_pad / kWarpRows * tiles))
		slices = 1;
	bn_cuda_splitk none = {};
	const bn_cuda_splitk &s = slices > 1 ? *sk : none;
	dim3 grid(tiles, row_tiles, slices);
	if (nj == 2)
		BN_LAUNCH(mma_kernel<2>, grid, kWarps * 32, 0, stream)(*w, p16, *x, n_tok, y, ldy, slices, s);
	else if (nj == 4)
		BN_LAUNCH(mma_kernel<4>, grid, kWarps * 32, 0, stream)(*w, p16, *x, n_tok, y, ldy, slices, s);
	else
		BN_LAUNCH(mma_kernel<8>, grid, kWarps * 32, 0, stream)(*w, p16, *x, n_tok, y, ldy, slices, s);
	return launched();
}
