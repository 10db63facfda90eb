// SPDX-License-Identifier: MIT
//
// cuda_host_ptx.h — the inline PTX that kernels/cuda uses, on the host. A kernel file reaches
// PTX through one small wrapper each (kernels/cuda/ptx.cuh), which calls these under
// BN_CUDA_HOST instead of its asm statement.
//
//  - mma.sync.aligned.m16n8k32.row.col.s32.{u8,s8}.s8.s32: a warp collective (every lane at it,
//    under the full mask, with the same A signedness); the warp's fragments are gathered and
//    multiplied with the PTX ISA's fragment layouts for m16n8k32 (block.c), so a kernel that
//    puts an element in the wrong register gets a wrong product here as on the GPU.
#ifndef BN_CUDA_HOST_PTX_H
#define BN_CUDA_HOST_PTX_H

#ifndef __cplusplus
#error "cuda_host_ptx.h is for device code compiled as C++"
#endif

#include "cuda_host.h"

#include <cstdint>

namespace bn_cuda_host {

// d = A B + d over one 16x8x32 tile; a_unsigned: A's bytes are u8 (else s8), B's are s8.
inline void mma_m16n8k32(int d[4], const unsigned a[4], const unsigned b[2], bool a_unsigned)
{
	bn_cuda_host_collective c{};
	c.name = a_unsigned ? "mma.sync.m16n8k32.s32.u8.s8.s32" : "mma.sync.m16n8k32.s32.s8.s8.s32";
	c.op = BN_CUDA_HOST_MMA_M16N8K32;
	c.mask = BN_CUDA_HOST_FULL_MASK;
	c.layout = a_unsigned ? 1u : 0u;
	for (int i = 0; i < 4; i++)
		c.in[i] = a[i];
	c.in[4] = b[0];
	c.in[5] = b[1];
	for (int i = 0; i < 4; i++)
		c.in[6 + i] = (uint32_t)d[i];
	uint32_t out[4];
	c.out = out;
	bn_cuda_host_warp_collective(&c);
	for (int i = 0; i < 4; i++)
		d[i] = (int)out[i];
}

} // namespace bn_cuda_host

#endif // BN_CUDA_HOST_PTX_H
