// SPDX-License-Identifier: MIT
//
// ternary.cu — int8 activation quantization and ternary x int8 products on the T2-plane layout
// (kernels/bn_blocks.h): byte m of a 64-byte chunk holds the codes of weights m, m+64, m+128,
// m+192 in bit pairs 0-1 .. 6-7, so (word >> 2p) & 0x03030303 is four consecutive codes of
// plane p, lined up with four consecutive activation bytes: one dp4a.
//
// Two kernels, same integers (and a third for grouped scales, below): warp-per-row dp4a, which reads each weight once per eight tokens
// (batch 1 is a pure stream of the weights), and int8 tensor-core tiles (WMMA 16x16x16), which
// decode each weight once per 64 tokens into shared memory as -1/0/+1 bytes.
#include "cuda_kernels.h"
#include "../bn_blocks.h"
#include "launch.cuh"
#include "reduce.cuh"

#include <mma.h>

namespace {

constexpr unsigned kQuantThreads = 256;
constexpr unsigned kGemvWarps = 8;   // rows per block
constexpr unsigned kGemvTokens = 8;  // tokens per pass over a row (registers)
constexpr unsigned kTile = 64;       // tensor-core tile: rows and tokens
constexpr unsigned kTcThreads = 128; // four warps, each 32 rows x 32 tokens
constexpr unsigned kTcMinTokens = 32; // below this the dp4a kernel reads less

struct MaxOp {
	__device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// One block per row, as bn_quantize_rows: absmax (order-free, NaN left out), 127/absmax, round
// half to even (rintf), NaN to 0, clamp, exact integer sum.
__global__ void quantize_kernel(const float *x, uint32_t ldx, bn_cuda_q8 xq)
{
	__shared__ float smax[kQuantThreads / 32];
	__shared__ int ssum[kQuantThreads / 32];
	const float *row = x + (size_t)blockIdx.x * ldx;
	int8_t *q = xq.q + (size_t)blockIdx.x * xq.k_pad;
	float amax = 0.0f;
	for (uint32_t k = threadIdx.x; k < xq.k; k += blockDim.x)
		amax = fmaxf(amax, fabsf(row[k]));
	amax = block_reduce(amax, smax, MaxOp());
	float s = amax > 0.0f ? 127.0f / amax : 0.0f;
	int sum = 0;
	for (uint32_t k = threadIdx.x; k < xq.k_pad; k += blockDim.x) {
		int8_t v = 0;
		if (k < xq.k) {
			float f = rintf(__fmul_rn(row[k], s));
			f = isnan(f) ? 0.0f : f > 127.0f ? 127.0f : f < -128.0f ? -128.0f : f;
			v = (int8_t)f;
		}
		q[k] = v;
		sum += v;
	}
	sum = block_reduce(sum, ssum);
	if (threadIdx.x == 0) {
		xq.inv_scale[blockIdx.x] = amax / 127.0f;
		xq.sum[blockIdx.x] = sum;
	}
}

__device__ inline int plane(uint32_t word, unsigned p)
{
	return (int)((word >> (2 * p)) & 0x03030303u);
}

__device__ inline float t2_output(int dot, float wscale, float inv_scale)
{
	return __fmul_rn(__fmul_rn((float)dot, wscale), inv_scale);
}

// Warp w of block b: row b * kGemvWarps + w. Lane l reads 16-byte pieces l, l + 32, ... of
// the row (piece i: chunk i / 4, byte offset 16 (i % 4) in it) and, per token, the four
// 16-byte activation runs that its four planes line up with.
__global__ void __launch_bounds__(kGemvWarps * 32)
gemv_dp4a_kernel(bn_cuda_t2 w, bn_cuda_q8 x, uint32_t n_tok, float *y, uint32_t ldy)
{
	unsigned lane = threadIdx.x % 32;
	uint32_t o = blockIdx.x * kGemvWarps + threadIdx.x / 32;
	if (o >= w.n_out)
		return;
	const uint4 *wrow = reinterpret_cast<const uint4 *>(w.codes + (size_t)o * w.row_bytes);
	uint32_t pieces = w.row_bytes / 16;
	float wscale = w.scale[o];
	for (uint32_t t0 = 0; t0 < n_tok; t0 += kGemvTokens) {
		int acc[kGemvTokens];
#pragma unroll
		for (unsigned t = 0; t < kGemvTokens; t++)
			acc[t] = 0;
		for (uint32_t i = lane; i < pieces; i += 32) {
			uint4 c = __ldg(wrow + i);
			uint32_t k0 = (i / 4) * BN_T2_CHUNK + (i % 4) * 16;
#pragma unroll
			for (unsigned t = 0; t < kGemvTokens; t++) {
				if (t0 + t >= n_tok)
					break;
				const int8_t *xr = x.q + (size_t)(t0 + t) * x.k_pad + k0;
#pragma unroll
				for (unsigned p = 0; p < 4; p++) {
					int4 a = __ldg(reinterpret_cast<const int4 *>(xr + 64 * p));
					acc[t] = __dp4a(plane(c.x, p), a.x, acc[t]);
					acc[t] = __dp4a(plane(c.y, p), a.y, acc[t]);
					acc[t] = __dp4a(plane(c.z, p), a.z, acc[t]);
					acc[t] = __dp4a(plane(c.w, p), a.w, acc[t]);
				}
			}
		}
#pragma unroll
		for (unsigned t = 0; t < kGemvTokens; t++) {
			int v = warp_sum(acc[t]);
			uint32_t b = t0 + t;
			if (lane == t && b < n_tok)
				y[(size_t)b * ldy + o] = t2_output(v - x.sum[b], wscale, x.inv_scale[b]);
		}
	}
}

// The grouped product (bn_cuda_t2g_gemv): warp w of block b, row b * kGemvWarps + w, in
// rounds of 32 chunks, lane l taking chunk 32 r + l whole. Per token it makes the exact
// integer sums of (code - 1) q over the chunk's two 128-weight blocks (planes 0-1, planes
// 2-3) and leaves them in shared memory; then lane t alone walks the round's blocks in order
// for token t, adding blocks into the group's integer and, at a group's last block, folding it
// into the float sum, s = fmaf((float)a_g, gscale[g], s): the CPU's order, so its bits.
constexpr unsigned kBlocksPerRound = 64; // 32 lanes x 2 blocks

__device__ inline int signed_plane(uint32_t word, unsigned p)
{
	return (int)__vsub4((unsigned)plane(word, p), 0x01010101u); // codes 0 1 2: -1 0 +1
}

__global__ void __launch_bounds__(kGemvWarps * 32)
gemv_group_kernel(bn_cuda_t2 w, bn_cuda_q8 x, uint32_t n_tok, float *y, uint32_t ldy)
{
	__shared__ int blk[kGemvWarps][kGemvTokens][kBlocksPerRound];
	unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	uint32_t o = blockIdx.x * kGemvWarps + warp;
	if (o >= w.n_out)
		return;
	const uint4 *wrow = reinterpret_cast<const uint4 *>(w.codes + (size_t)o * w.row_bytes);
	uint32_t chunks = w.row_bytes / BN_T2_CHUNK_BYTES, n_groups = w.n_in / w.group;
	uint32_t per_group = w.group / BN_T2_GROUP_BLOCK, n_blocks = n_groups * per_group;
	const float *gs = w.gscale + (size_t)o * n_groups;
	for (uint32_t t0 = 0; t0 < n_tok; t0 += kGemvTokens) {
		float s = 0.0f; // lane t: token t0 + t
		int cur = 0;
		for (uint32_t c0 = 0; c0 * 2 < n_blocks; c0 += 32) {
			uint32_t c = c0 + lane;
			if (c < chunks && 2 * c < n_blocks) {
				uint4 code[4];
#pragma unroll
				for (unsigned j = 0; j < 4; j++)
					code[j] = __ldg(wrow + 4 * c + j);
#pragma unroll
				for (unsigned t = 0; t < kGemvTokens; t++) {
					if (t0 + t >= n_tok)
						break;
					const int8_t *xr = x.q + (size_t)(t0 + t) * x.k_pad + c * BN_T2_CHUNK;
					int half[2] = { 0, 0 };
#pragma unroll
					for (unsigned p = 0; p < 4; p++) {
#pragma unroll
						for (unsigned j = 0; j < 4; j++) {
							int4 a = __ldg(reinterpret_cast<const int4 *>(xr + 64 * p + 16 * j));
							int v = half[p / 2];
							v = __dp4a(signed_plane(code[j].x, p), a.x, v);
							v = __dp4a(signed_plane(code[j].y, p), a.y, v);
							v = __dp4a(signed_plane(code[j].z, p), a.z, v);
							v = __dp4a(signed_plane(code[j].w, p), a.w, v);
							half[p / 2] = v;
						}
					}
					blk[warp][t][2 * lane] = half[0];
					blk[warp][t][2 * lane + 1] = half[1];
				}
			}
			__syncwarp();
			uint32_t b0 = 2 * c0, b1 = b0 + kBlocksPerRound < n_blocks ? b0 + kBlocksPerRound : n_blocks;
			if (lane < kGemvTokens && t0 + lane < n_tok) {
				for (uint32_t b = b0; b < b1; b++) {
					cur += blk[warp][lane][b - b0];
					if ((b + 1) % per_group == 0) {
						s = fmaf((float)cur, gs[b / per_group], s);
						cur = 0;
					}
				}
			}
			__syncwarp();
		}
		if (lane < kGemvTokens && t0 + lane < n_tok)
			y[(size_t)(t0 + lane) * ldy + o] = __fmul_rn(s, x.inv_scale[t0 + lane]);
	}
}

// Shared tiles, per 16-wide k step s: A[s][row][16] weights as int8 -1/0/+1, B[s][token][16]
// activations. Each 16x16 fragment is then one contiguous, 256-byte-aligned 256-byte block
// (ld 16), which WMMA's alignment rules want.
struct TcTiles {
	int8_t a[16][kTile][16];
	int8_t b[16][kTile][16];
};
static_assert(sizeof(TcTiles) >= kTile * kTile * sizeof(int), "accumulators fit the tiles");

// Loads chunk c (256 weights) of the block's 64 rows, decoded: piece `part` (16 bytes) of a
// row holds, per plane p, the codes of k = 64p + 16 part + [0, 16), i.e. k step 4p + part.
__device__ void tc_load_weights(TcTiles &s, const bn_cuda_t2 &w, uint32_t row0, uint32_t c)
{
	for (unsigned idx = threadIdx.x; idx < kTile * 4; idx += kTcThreads) {
		unsigned row = idx / 4, part = idx % 4;
		uint4 code = make_uint4(0x55555555u, 0x55555555u, 0x55555555u, 0x55555555u);
		if (row0 + row < w.n_out)
			code = __ldg(reinterpret_cast<const uint4 *>(
				w.codes + (size_t)(row0 + row) * w.row_bytes + c * BN_T2_CHUNK_BYTES + part * 16));
#pragma unroll
		for (unsigned p = 0; p < 4; p++) {
			uint4 v;
			v.x = __vsub4((unsigned)plane(code.x, p), 0x01010101u);
			v.y = __vsub4((unsigned)plane(code.y, p), 0x01010101u);
			v.z = __vsub4((unsigned)plane(code.z, p), 0x01010101u);
			v.w = __vsub4((unsigned)plane(code.w, p), 0x01010101u);
			*reinterpret_cast<uint4 *>(&s.a[4 * p + part][row][0]) = v;
		}
	}
}

__device__ void tc_load_acts(TcTiles &s, const bn_cuda_q8 &x, uint32_t n_tok, uint32_t tok0,
			     uint32_t c)
{
	for (unsigned idx = threadIdx.x; idx < kTile * 16; idx += kTcThreads) {
		unsigned tok = idx / 16, step = idx % 16;
		int4 a = make_int4(0, 0, 0, 0);
		if (tok0 + tok < n_tok)
			a = __ldg(reinterpret_cast<const int4 *>(
				x.q + (size_t)(tok0 + tok) * x.k_pad + c * BN_T2_CHUNK + step * 16));
		*reinterpret_cast<int4 *>(&s.b[step][tok][0]) = a;
	}
}

// Block (bx, by): rows [64 bx, +64) x tokens [64 by, +64). Warp w: rows 32 (w / 2), tokens
// 32 (w % 2), 2 x 2 fragments. The weights are -1/0/+1, so the int32 sums are the exact
// products without the +1 offset correction.
__global__ void __launch_bounds__(kTcThreads)
gemm_tc_kernel(bn_cuda_t2 w, bn_cuda_q8 x, uint32_t n_tok, float *y, uint32_t ldy)
{
	using namespace nvcuda;
	__shared__ __align__(256) TcTiles s;
	uint32_t row0 = blockIdx.x * kTile, tok0 = blockIdx.y * kTile;
	unsigned warp = threadIdx.x / 32, wr = (warp / 2) * 32, wt = (warp % 2) * 32;
	wmma::fragment<wmma::accumulator, 16, 16, 16, int> acc[2][2];
	for (unsigned i = 0; i < 2; i++)
		for (unsigned j = 0; j < 2; j++)
			wmma::fill_fragment(acc[i][j], 0);
	uint32_t chunks = w.row_bytes / BN_T2_CHUNK_BYTES;
	for (uint32_t c = 0; c < chunks; c++) {
		tc_load_weights(s, w, row0, c);
		tc_load_acts(s, x, n_tok, tok0, c);
		__syncthreads();
		for (unsigned step = 0; step < 16; step++) {
			wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> fa[2];
			wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> fb[2];
			for (unsigned i = 0; i < 2; i++)
				wmma::load_matrix_sync(fa[i], &s.a[step][wr + 16 * i][0], 16);
			for (unsigned j = 0; j < 2; j++)
				wmma::load_matrix_sync(fb[j], &s.b[step][wt + 16 * j][0], 16);
			for (unsigned i = 0; i < 2; i++)
				for (unsigned j = 0; j < 2; j++)
					wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
		}
		__syncthreads();
	}
	// Accumulators to shared memory as C[token][row] (ld 64), then out with the scales:
	// consecutive threads write consecutive rows of one token.
	int *cs = reinterpret_cast<int *>(&s);
	for (unsigned i = 0; i < 2; i++)
		for (unsigned j = 0; j < 2; j++)
			wmma::store_matrix_sync(cs + (wt + 16 * j) * kTile + wr + 16 * i, acc[i][j], kTile,
						wmma::mem_col_major);
	__syncthreads();
	for (unsigned idx = threadIdx.x; idx < kTile * kTile; idx += kTcThreads) {
		unsigned tok = idx / kTile, row = idx % kTile;
		uint32_t b = tok0 + tok, o = row0 + row;
		if (b < n_tok && o < w.n_out)
			y[(size_t)b * ldy + o] = t2_output(cs[tok * kTile + row], w.scale[o], x.inv_scale[b]);
	}
}

int launched()
{
	return (int)cudaGetLastError();
}

} // namespace

extern "C" int bn_cuda_quantize(const float *x, uint32_t ldx, uint32_t n, const bn_cuda_q8 *xq,
				cudaStream_t stream)
{
	if (n == 0)
		return 0;
	BN_LAUNCH(quantize_kernel, n, kQuantThreads, 0, stream)(x, ldx, *xq);
	return launched();
}

extern "C" int bn_cuda_t2_gemv_dp4a(const bn_cuda_t2 *w, const bn_cuda_q8 *x, uint32_t n_tok,
				    float *y, uint32_t ldy, cudaStream_t stream)
{
	if (n_tok == 0)
		return 0;
	unsigned blocks = (w->n_out + kGemvWarps - 1) / kGemvWarps;
	BN_LAUNCH(gemv_dp4a_kernel, blocks, kGemvWarps * 32, 0, stream)(*w, *x, n_tok, y, ldy);
	return launched();
}

extern "C" int bn_cuda_t2_gemm_tc(const bn_cuda_t2 *w, const bn_cuda_q8 *x, uint32_t n_tok,
				  float *y, uint32_t ldy, cudaStream_t stream)
{
	if (n_tok == 0)
		return 0;
	dim3 grid((w->n_out + kTile - 1) / kTile, (n_tok + kTile - 1) / kTile);
	BN_LAUNCH(gemm_tc_kernel, grid, kTcThreads, 0, stream)(*w, *x, n_tok, y, ldy);
	return launched();
}

extern "C" int bn_cuda_t2g_gemv(const bn_cuda_t2 *w, const bn_cuda_q8 *x, uint32_t n_tok,
				float *y, uint32_t ldy, cudaStream_t stream)
{
	if (n_tok == 0)
		return 0;
	if (!w->group || w->group % BN_T2_GROUP_BLOCK || w->n_in % w->group || !w->gscale ||
	    w->n_in / w->group * (w->group / BN_T2_GROUP_BLOCK) > 2 * (w->row_bytes / BN_T2_CHUNK_BYTES))
		return (int)cudaErrorInvalidValue;
	unsigned blocks = (w->n_out + kGemvWarps - 1) / kGemvWarps;
	BN_LAUNCH(gemv_group_kernel, blocks, kGemvWarps * 32, 0, stream)(*w, *x, n_tok, y, ldy);
	return launched();
}

extern "C" int bn_cuda_t2_gemm(const bn_cuda_t2 *w, const bn_cuda_q8 *x, uint32_t n_tok, float *y,
			       uint32_t ldy, cudaStream_t stream)
{
	if (w->group)
		return bn_cuda_t2g_gemv(w, x, n_tok, y, ldy, stream);
	if (n_tok < kTcMinTokens)
		return bn_cuda_t2_gemv_dp4a(w, x, n_tok, y, ldy, stream);
	return bn_cuda_t2_gemm_tc(w, x, n_tok, y, ldy, stream);
}
