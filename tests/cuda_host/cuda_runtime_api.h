/* SPDX-License-Identifier: MIT */
/*
 * cuda_runtime_api.h (CUDA host harness) — the subset of the CUDA runtime API that
 * daemon/backends/cuda.c, kernels/cuda and tests/test_cuda.c call, done on the host
 * (tests/cuda_host/runtime.c). The host build puts tests/cuda_host first on the include path,
 * so this file stands in for the toolkit's; names, types and error numbers are CUDA's.
 *
 * One made-up device (cuda:0, compute capability 9.0, named as the host harness). Device
 * memory is host memory from the allocator, one allocation per cudaMalloc, so AddressSanitizer
 * sees an overrun of it; a copy or memset must stay inside one allocation. Streams and events
 * are ordered host work: a launch or an async copy runs at once on the calling thread, so
 * every stream is always idle. Errors are CUDA's: each call returns its error and records it
 * as the thread's last error (cudaGetLastError returns and clears it).
 */
#ifndef BN_CUDA_HOST_CUDA_RUNTIME_API_H
#define BN_CUDA_HOST_CUDA_RUNTIME_API_H

#include <stddef.h>

#include "vector_types.h"

/* The runtime version whose API this subset follows (CUDA 13.0). */
#define CUDART_VERSION 13000

#ifdef __cplusplus
extern "C" {
#endif

enum cudaError {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInitializationError = 3,
	cudaErrorInvalidConfiguration = 9,
	cudaErrorInvalidDevicePointer = 17,
	cudaErrorInvalidMemcpyDirection = 21,
	cudaErrorInsufficientDriver = 35,
	cudaErrorNoDevice = 100,
	cudaErrorInvalidDevice = 101,
	cudaErrorInvalidResourceHandle = 400,
	cudaErrorIllegalState = 401,
	cudaErrorNotReady = 600,
	cudaErrorNotSupported = 801,
	cudaErrorStreamCaptureUnsupported = 900,
	cudaErrorStreamCaptureInvalidated = 901,
	cudaErrorStreamCaptureUnmatched = 903,
	cudaErrorStreamCaptureImplicit = 906,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
	cudaMemcpyHostToHost = 0,
	cudaMemcpyHostToDevice = 1,
	cudaMemcpyDeviceToHost = 2,
	cudaMemcpyDeviceToDevice = 3,
	cudaMemcpyDefault = 4,
};

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;

enum cudaStreamCaptureMode {
	cudaStreamCaptureModeGlobal = 0,
	cudaStreamCaptureModeThreadLocal = 1,
	cudaStreamCaptureModeRelaxed = 2,
};

enum cudaStreamCaptureStatus {
	cudaStreamCaptureStatusNone = 0,
	cudaStreamCaptureStatusActive = 1,
	cudaStreamCaptureStatusInvalidated = 2,
};

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02

/* The fields of CUDA's cudaDeviceProp that code here reads, with CUDA's names and types. */
struct cudaDeviceProp {
	char name[256];
	size_t totalGlobalMem;
	size_t sharedMemPerBlock;
	int regsPerBlock;
	int warpSize;
	int maxThreadsPerBlock;
	int maxThreadsDim[3];
	int maxGridSize[3];
	int major;
	int minor;
	int multiProcessorCount;
};

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);

cudaError_t cudaMalloc(void **dev_ptr, size_t size);
cudaError_t cudaFree(void *dev_ptr);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
			    cudaStream_t stream);
cudaError_t cudaMemset(void *dev_ptr, int value, size_t count);
cudaError_t cudaMemsetAsync(void *dev_ptr, int value, size_t count, cudaStream_t stream);

cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);

cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

/* Stream capture and graphs (graph.c): work issued to a capturing stream is recorded, not
 * run; an instantiated graph replays it, in the order it was issued, on the stream it is
 * launched on. While a capture is active, calls that would synchronise with it (synchronous
 * copies and memsets, allocation and freeing, stream, event and device synchronisation, work
 * on the legacy stream) fail with a capture error and invalidate the capture, as CUDA's
 * global and thread-local modes do. */
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

/* The driver's entry points (vmm.c): the virtual-memory calls of cuda.h, by name. Any other
 * symbol is not found (cudaDriverEntryPointSymbolNotFound), as for a driver without it. */
enum cudaDriverEntryPointQueryResult {
	cudaDriverEntryPointSuccess = 0,
	cudaDriverEntryPointSymbolNotFound = 1,
	cudaDriverEntryPointVersionNotSufficent = 2,
};
#define cudaEnableDefault 0x0
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
					     unsigned int cudaVersion, unsigned long long flags,
					     enum cudaDriverEntryPointQueryResult *driverStatus);

cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);

#ifdef __cplusplus
}
#endif

#endif /* BN_CUDA_HOST_CUDA_RUNTIME_API_H */
