/* SPDX-License-Identifier: MIT */
/*
 * vector_types.h (CUDA host harness) — the CUDA vector types the project's device code uses,
 * with CUDA's sizes and alignments: a misaligned int4/uint4/float4 access is then undefined
 * behaviour on the host too, which UBSan reports (it faults on the GPU). C and C++.
 */
#ifndef BN_CUDA_HOST_VECTOR_TYPES_H
#define BN_CUDA_HOST_VECTOR_TYPES_H

struct uint3 {
	unsigned int x, y, z;
};
struct __attribute__((aligned(16))) int4 {
	int x, y, z, w;
};
struct __attribute__((aligned(16))) uint4 {
	unsigned int x, y, z, w;
};
struct __attribute__((aligned(16))) float4 {
	float x, y, z, w;
};

#ifdef __cplusplus
/* Launch dimensions: unnamed components default to 1, as in CUDA. */
struct dim3 {
	unsigned int x, y, z;
	constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
		: x(vx), y(vy), z(vz) {}
	constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
	constexpr operator uint3() const { return uint3{ x, y, z }; }
};
#else
struct dim3 {
	unsigned int x, y, z;
};
typedef struct uint3 uint3;
typedef struct int4 int4;
typedef struct uint4 uint4;
typedef struct float4 float4;
typedef struct dim3 dim3;
#endif

static inline struct int4 make_int4(int x, int y, int z, int w)
{
	struct int4 v = { x, y, z, w };
	return v;
}

static inline struct uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w)
{
	struct uint4 v = { x, y, z, w };
	return v;
}

static inline struct float4 make_float4(float x, float y, float z, float w)
{
	struct float4 v = { x, y, z, w };
	return v;
}

#endif /* BN_CUDA_HOST_VECTOR_TYPES_H */
