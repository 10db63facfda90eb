// SPDX-License-Identifier: MIT
//
// splitk.cuh — what the split-k ternary kernels (gemv.cu, mma.cu) share: the P16 layout's
// addresses, the two float multiplies of a ternary output, and the meeting of integer partial
// sums. Integer addition is exact and order-free, so however the k range is split and in
// whatever order the slices arrive, the sums, and the outputs, are the bits of an unsplit
// kernel.
#ifndef BITNET_CUDA_SPLITK_CUH
#define BITNET_CUDA_SPLITK_CUH

#include "cuda_fast.h"
#include "../bn_blocks.h"

namespace bn_fast {

constexpr unsigned kGroupRows = 16;                       // P16: rows per group
constexpr unsigned kGroupChunkBytes = kGroupRows * BN_T2_CHUNK_BYTES; // one chunk of a group

// The byte offset of chunk c of row r's 16-byte piece `piece` (0-3), in either layout.
__device__ __forceinline__ size_t code_offset(bool p16, uint32_t row_bytes, uint32_t r, uint32_t c,
					      unsigned piece)
{
	if (p16)
		return (size_t)(r / kGroupRows) * kGroupRows * row_bytes + (size_t)c * kGroupChunkBytes +
		       (r % kGroupRows) * BN_T2_CHUNK_BYTES + piece * 16;
	return (size_t)r * row_bytes + (size_t)c * BN_T2_CHUNK_BYTES + piece * 16;
}

// Codes of plane p (0-3) of a word: four consecutive weights + 1, as unsigned bytes.
__device__ __forceinline__ unsigned plane_codes(unsigned word, unsigned p)
{
	return (word >> (2 * p)) & 0x03030303u;
}

// The ternary output, as the first kernels compute it (ternary.cu's t2_output).
__device__ __forceinline__ float ternary_out(int dot, float wscale, float inv_scale)
{
	return __fmul_rn(__fmul_rn((float)dot, wscale), inv_scale);
}

// Called by a whole warp after each lane has added its partial sums to sk.acc with atomics:
// true, in every lane, for the warp whose arrival completes `slices` arrivals at `count`. That
// warp then takes the totals with atomicExch(..., 0), which also leaves the sums zero for the
// next launch, as this leaves the count. The fence before the count orders this warp's sums
// before its arrival (the last warp's atomic reads then see every slice's); the fence after
// orders the count before those reads.
__device__ __forceinline__ bool splitk_last(uint32_t *count, uint32_t slices)
{
	__threadfence();
	__syncwarp();
	uint32_t before = 0;
	if (threadIdx.x % 32 == 0)
		before = atomicAdd(count, 1u);
	before = __shfl_sync(0xffffffffu, before, 0);
	bool last = before == slices - 1;
	if (last) {
		__threadfence();
		if (threadIdx.x % 32 == 0)
			atomicExch(count, 0u);
	}
	return last;
}

} // namespace bn_fast

#endif // BITNET_CUDA_SPLITK_CUH
