// SPDX-License-Identifier: MIT
//
// ptx.cuh — the inline PTX the kernel files use, each instruction in one wrapper. Under the
// CUDA host harness (BN_CUDA_HOST) a wrapper calls the harness's emulation of the instruction
// (tests/cuda_host/cuda_host_ptx.h) instead of its asm statement; the device code around it
// is the same in both builds.
#ifndef BITNET_CUDA_PTX_CUH
#define BITNET_CUDA_PTX_CUH

// d += A B over one 16 x 8 x 32 tile on the int8 tensor cores, int32 sums (exact: they wrap
// only past 2^31), a warp collective. The fragments are the PTX ISA's for m16n8k32 with 8-bit
// operands: lane l (g = l / 4, t = l % 4) holds A(g + 8 (r & 1), 4 t + i + 16 (r >> 1)) in byte
// i of a[r], B(4 t + i + 16 r, g) in byte i of b[r], and C/D(g + 8 (r >> 1), 2 t + (r & 1)) in
// d[r]. A's bytes are unsigned (u8s8) or signed (s8s8); B's are signed.
__device__ __forceinline__ void mma_u8s8_m16n8k32(int d[4], const unsigned a[4], const unsigned b[2])
{
#ifdef BN_CUDA_HOST
	bn_cuda_host::mma_m16n8k32(d, a, b, true);
#else
	asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
	    "{%8, %9}, {%0, %1, %2, %3};"
	    : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

__device__ __forceinline__ void mma_s8s8_m16n8k32(int d[4], const unsigned a[4], const unsigned b[2])
{
#ifdef BN_CUDA_HOST
	bn_cuda_host::mma_m16n8k32(d, a, b, false);
#else
	asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
	    "{%8, %9}, {%0, %1, %2, %3};"
	    : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

#endif // BITNET_CUDA_PTX_CUH
