/* SPDX-License-Identifier: MIT */
/*
 * cuda.h (CUDA host harness) — the subset of the CUDA driver API's types that
 * daemon/backends/cuda_kv.c names: virtual memory management (an address range reserved,
 * physical allocations created, mapped into it and made accessible, unmapped, released).
 * Names, types, fields and numbers are CUDA's; the calls themselves are reached as the backend
 * reaches the real driver's, through cudaGetDriverEntryPointByVersion (vmm.c).
 */
#ifndef BN_CUDA_HOST_CUDA_H
#define BN_CUDA_HOST_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError_enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_PERMITTED = 800,
	CUDA_ERROR_NOT_SUPPORTED = 801,
} CUresult;

typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;

typedef enum CUmemAllocationType_enum {
	CU_MEM_ALLOCATION_TYPE_INVALID = 0x0,
	CU_MEM_ALLOCATION_TYPE_PINNED = 0x1,
} CUmemAllocationType;

typedef enum CUmemAllocationHandleType_enum {
	CU_MEM_HANDLE_TYPE_NONE = 0x0,
} CUmemAllocationHandleType;

typedef enum CUmemLocationType_enum {
	CU_MEM_LOCATION_TYPE_INVALID = 0x0,
	CU_MEM_LOCATION_TYPE_DEVICE = 0x1,
} CUmemLocationType;

typedef enum CUmemAccess_flags_enum {
	CU_MEM_ACCESS_FLAGS_PROT_NONE = 0x0,
	CU_MEM_ACCESS_FLAGS_PROT_READ = 0x1,
	CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3,
} CUmemAccess_flags;

typedef enum CUmemAllocationGranularity_flags_enum {
	CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0,
	CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 0x1,
} CUmemAllocationGranularity_flags;

typedef struct CUmemLocation_st {
	CUmemLocationType type;
	int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
	CUmemAllocationType type;
	CUmemAllocationHandleType requestedHandleTypes;
	CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
	CUmemLocation location;
	CUmemAccess_flags flags;
} CUmemAccessDesc;

#ifdef __cplusplus
}
#endif

#endif /* BN_CUDA_HOST_CUDA_H */
