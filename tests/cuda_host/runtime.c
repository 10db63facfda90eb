/* SPDX-License-Identifier: MIT */
/*
 * runtime.c — the CUDA runtime calls of cuda_runtime_api.h on the host: a made-up device, its
 * memory as host allocations, copies and memsets checked against them, streams and events as
 * ordered host work, and CUDA's error reporting.
 *
 * Memory: every cudaMalloc and cudaMallocHost is its own 256-byte aligned allocation from the
 * C allocator, so AddressSanitizer sees an overrun of it, filled with 0xFF bytes first (the GPU
 * does not clear memory either: code that reads what it never wrote gets NaNs). A table sorted
 * by address says which allocation a pointer is in; copies and memsets must stay inside one,
 * and their host side must not be device memory. Freed memory is filled again before it goes.
 */
#define _GNU_SOURCE
#include "cuda_host.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEVICE_MEMORY_MIB 4096    /* the default: room for a tiny model's KV */
#define ALLOC_ALIGN 256            /* cudaMalloc's alignment */
#define POISON 0xff

static pthread_mutex_t lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

void bn_cuda_host_lock(void)
{
	pthread_mutex_lock(&lock);
}

void bn_cuda_host_unlock(void)
{
	pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static _Thread_local cudaError_t last_error;

cudaError_t bn_cuda_host_error(cudaError_t err)
{
	if (err != cudaSuccess)
		last_error = err;
	return err;
}

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;
	last_error = cudaSuccess;
	return e;
}

cudaError_t cudaPeekAtLastError(void)
{
	return last_error;
}

static const struct {
	cudaError_t code;
	const char *name, *text;
} errors[] = {
	{ cudaSuccess, "cudaSuccess", "no error" },
	{ cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument" },
	{ cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory" },
	{ cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error" },
	{ cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument" },
	{ cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer" },
	{ cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy" },
	{ cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version" },
	{ cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected" },
	{ cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal" },
	{ cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle" },
	{ cudaErrorIllegalState, "cudaErrorIllegalState", "the operation cannot be performed in the present state" },
	{ cudaErrorNotReady, "cudaErrorNotReady", "device not ready" },
	{ cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported" },
	{ cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing" },
	{ cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated", "operation failed due to a previous error during capture" },
	{ cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched", "capture was not ended in the same stream as it began" },
	{ cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit", "operation would make the legacy stream depend on a capturing blocking stream" },
};

const char *cudaGetErrorString(cudaError_t error)
{
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].code == error)
			return errors[i].text;
	return "unrecognized error code";
}

const char *cudaGetErrorName(cudaError_t error)
{
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].code == error)
			return errors[i].name;
	return "cudaErrorUnknown";
}

/* ------------------------------------------------------------------------------------------ */
/* The device                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* The made-up device's memory: BN_CUDA_HOST_DEVICE_MEMORY (bytes, suffix K, M or G), or
 * 4 GiB. A small one lets a test see what the daemon does on a device its weights or its KV
 * cache do not fit. An unreadable value is the harness's own failure, not a size. */
static size_t device_bytes;
static pthread_once_t device_once = PTHREAD_ONCE_INIT;

static void read_device_memory(void)
{
	device_bytes = (size_t)DEVICE_MEMORY_MIB << 20;
	const char *s = getenv("BN_CUDA_HOST_DEVICE_MEMORY");
	if (!s || !*s)
		return;
	char *end;
	unsigned long long n = strtoull(s, &end, 10);
	unsigned shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
	end += shift != 0;
	if (*end || n == 0 || n > (1ull << 44) >> shift)
		bn_cuda_host_fail("BN_CUDA_HOST_DEVICE_MEMORY=\"%s\" is not a size (bytes, suffix K, "
				  "M or G, at most 16T)", s);
	device_bytes = (size_t)(n << shift);
}

static size_t device_memory(void)
{
	pthread_once(&device_once, read_device_memory);
	return device_bytes;
}

cudaError_t cudaGetDeviceCount(int *count)
{
	if (!count)
		return bn_cuda_host_error(cudaErrorInvalidValue);
	*count = 1;
	return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	if (!prop)
		return bn_cuda_host_error(cudaErrorInvalidValue);
	if (device != 0)
		return bn_cuda_host_error(cudaErrorInvalidDevice);
	*prop = (struct cudaDeviceProp){
		.name = "bitnetd CUDA host harness (CPU, tests/cuda_host)",
		.totalGlobalMem = device_memory(),
		.sharedMemPerBlock = 48 << 10,
		.regsPerBlock = 65536,
		.warpSize = BN_CUDA_HOST_WARP,
		.maxThreadsPerBlock = 1024,
		.maxThreadsDim = { 1024, 1024, 64 },
		.maxGridSize = { 0x7fffffff, 65535, 65535 },
		.major = 9,
		.minor = 0,
		.multiProcessorCount = 1,
	};
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
	return device == 0 ? cudaSuccess : bn_cuda_host_error(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDevice(int *device)
{
	if (!device)
		return bn_cuda_host_error(cudaErrorInvalidValue);
	*device = 0;
	return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
	/* nothing is ever in flight; during a capture it would wait for the capturing stream */
	return bn_cuda_host_error(bn_cuda_host_capture_refuse(NULL, 1));
}

/* ------------------------------------------------------------------------------------------ */
/* Memory                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static struct {
	struct bn_cuda_host_alloc *a; /* sorted by base */
	size_t n, cap;
	size_t device_bytes;
} table;

/* The index of the last allocation whose base is <= p, or n when none. */
static size_t last_at_or_before(const void *p)
{
	size_t lo = 0, hi = table.n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if ((const char *)table.a[mid].base <= (const char *)p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? lo - 1 : table.n;
}

const struct bn_cuda_host_alloc *bn_cuda_host_find_alloc(const void *p)
{
	size_t i = last_at_or_before(p);
	if (i == table.n || (const char *)p >= table.a[i].base + table.a[i].size)
		return NULL;
	return &table.a[i];
}

const struct bn_cuda_host_alloc *bn_cuda_host_find_pointer(const void *p)
{
	const struct bn_cuda_host_alloc *a = bn_cuda_host_find_alloc(p);
	return a || !p ? a : bn_cuda_host_find_alloc((const char *)p - 1);
}

/* [p, p + size) into the table, sorted. 0 or -1 (no memory for the table). */
static int table_insert(void *p, size_t size, int pinned, int sparse)
{
	if (table.n == table.cap) {
		size_t cap = table.cap ? 2 * table.cap : 256;
		struct bn_cuda_host_alloc *a = realloc(table.a, cap * sizeof(*a));
		if (!a)
			return -1;
		table.a = a;
		table.cap = cap;
	}
	size_t i = last_at_or_before(p);
	i = i == table.n ? 0 : i + 1;
	memmove(&table.a[i + 1], &table.a[i], (table.n - i) * sizeof(table.a[0]));
	table.a[i] = (struct bn_cuda_host_alloc){ .base = p, .size = size, .pinned = pinned,
						  .sparse = sparse };
	table.n++;
	return 0;
}

static cudaError_t add_alloc(void **out, size_t size, int pinned)
{
	*out = NULL;
	if (!size)
		return cudaSuccess; /* CUDA hands out NULL for 0 bytes */
	if (!pinned && size > device_memory() - table.device_bytes)
		return bn_cuda_host_error(cudaErrorMemoryAllocation);
	void *p;
	if (posix_memalign(&p, ALLOC_ALIGN, size) != 0)
		return bn_cuda_host_error(cudaErrorMemoryAllocation);
	if (table_insert(p, size, pinned, 0) != 0) {
		free(p);
		return bn_cuda_host_error(cudaErrorMemoryAllocation);
	}
	memset(p, POISON, size);
	if (!pinned)
		table.device_bytes += size;
	*out = p;
	return cudaSuccess;
}

int bn_cuda_host_add_range(void *base, size_t size)
{
	return table_insert(base, size, 0, 1);
}

int bn_cuda_host_remove_range(void *base)
{
	size_t i = last_at_or_before(base);
	if (i == table.n || table.a[i].base != base)
		return -1;
	table.n--;
	memmove(&table.a[i], &table.a[i + 1], (table.n - i) * sizeof(table.a[0]));
	return 0;
}

int bn_cuda_host_device_take(size_t bytes)
{
	if (bytes > device_memory() - table.device_bytes)
		return -1;
	table.device_bytes += bytes;
	return 0;
}

void bn_cuda_host_device_give(size_t bytes)
{
	table.device_bytes -= bytes;
}

static cudaError_t remove_alloc(void *p, int pinned)
{
	if (!p)
		return cudaSuccess;
	size_t i = last_at_or_before(p);
	if (i == table.n || table.a[i].base != p || table.a[i].pinned != pinned)
		return bn_cuda_host_error(cudaErrorInvalidValue);
	memset(p, POISON, table.a[i].size);
	if (!pinned)
		table.device_bytes -= table.a[i].size;
	table.n--;
	memmove(&table.a[i], &table.a[i + 1], (table.n - i) * sizeof(table.a[0]));
	free(p);
	return cudaSuccess;
}

cudaError_t cudaMalloc(void **dev_ptr, size_t size)
{
	if (!dev_ptr)
		return bn_cuda_host_error(cudaErrorInvalidValue);
	cudaError_t refused = bn_cuda_host_capture_refuse(NULL, 1);
	if (refused != cudaSuccess)
		return bn_cuda_host_error(refused);
	bn_cuda_host_lock();
	cudaError_t e = add_alloc(dev_ptr, size, 0);
	bn_cuda_host_unlock();
	return e;
}

cudaError_t cudaFree(void *dev_ptr)
{
	cudaError_t refused = bn_cuda_host_capture_refuse(NULL, 1);
	if (refused != cudaSuccess)
		return bn_cuda_host_error(refused);
	bn_cuda_host_lock();
	cudaError_t e = remove_alloc(dev_ptr, 0);
	bn_cuda_host_unlock();
	return e;
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
	if (!ptr)
		return bn_cuda_host_error(cudaErrorInvalidValue);
	cudaError_t refused = bn_cuda_host_capture_refuse(NULL, 1);
	if (refused != cudaSuccess)
		return bn_cuda_host_error(refused);
	bn_cuda_host_lock();
	cudaError_t e = add_alloc(ptr, size, 1);
	bn_cuda_host_unlock();
	return e;
}

cudaError_t cudaFreeHost(void *ptr)
{
	cudaError_t refused = bn_cuda_host_capture_refuse(NULL, 1);
	if (refused != cudaSuccess)
		return bn_cuda_host_error(refused);
	bn_cuda_host_lock();
	cudaError_t e = remove_alloc(ptr, 1);
	bn_cuda_host_unlock();
	return e;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
	if (!free_bytes || !total_bytes)
		return bn_cuda_host_error(cudaErrorInvalidValue);
	bn_cuda_host_lock();
	*free_bytes = device_memory() - table.device_bytes;
	*total_bytes = device_memory();
	bn_cuda_host_unlock();
	return cudaSuccess;
}

void bn_cuda_host_check_pointer(const char *kernel_name, unsigned arg, const void *p)
{
	if (!p)
		return;
	bn_cuda_host_lock();
	const struct bn_cuda_host_alloc *a = bn_cuda_host_find_pointer(p);
	bn_cuda_host_unlock();
	if (!a)
		bn_cuda_host_fail("%s: argument %u is %p, which is neither device memory nor pinned host memory (the GPU would fault on it)",
				  kernel_name, arg, p);
}

/* [p, p + n) inside one device allocation (device side) or outside all of them (host side;
 * pinned host memory is host memory). */
static int device_range(const void *p, size_t n)
{
	const struct bn_cuda_host_alloc *a = bn_cuda_host_find_alloc(p);
	return a && !a->pinned && (const char *)p + n <= a->base + a->size;
}

static int host_range(const void *p)
{
	const struct bn_cuda_host_alloc *a = bn_cuda_host_find_alloc(p);
	return p && (!a || a->pinned);
}

static int is_device(const void *p)
{
	const struct bn_cuda_host_alloc *a = bn_cuda_host_find_alloc(p);
	return a && !a->pinned;
}

static cudaError_t check_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
	if (kind == cudaMemcpyDefault)
		kind = (enum cudaMemcpyKind)((is_device(src) ? 2 : 0) | (is_device(dst) ? 1 : 0));
	int dst_ok, src_ok;
	switch (kind) {
	case cudaMemcpyHostToHost:
		dst_ok = host_range(dst), src_ok = host_range(src);
		break;
	case cudaMemcpyHostToDevice:
		dst_ok = device_range(dst, n), src_ok = host_range(src);
		break;
	case cudaMemcpyDeviceToHost:
		dst_ok = host_range(dst), src_ok = device_range(src, n);
		break;
	case cudaMemcpyDeviceToDevice:
		dst_ok = device_range(dst, n), src_ok = device_range(src, n);
		break;
	default:
		return cudaErrorInvalidMemcpyDirection;
	}
	return dst_ok && src_ok ? cudaSuccess : cudaErrorInvalidValue;
}

static cudaError_t copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
	if (!n)
		return cudaSuccess;
	bn_cuda_host_lock();
	cudaError_t e = check_copy(dst, src, n, kind);
	if (e == cudaSuccess)
		memcpy(dst, src, n); /* AddressSanitizer reports overlapping ranges */
	bn_cuda_host_unlock();
	return bn_cuda_host_error(e);
}

cudaError_t bn_cuda_host_copy(void *dst, const void *src, size_t n, int kind)
{
	return copy(dst, src, n, (enum cudaMemcpyKind)kind);
}

cudaError_t bn_cuda_host_memset(void *dev_ptr, int value, size_t count)
{
	if (!count)
		return cudaSuccess;
	bn_cuda_host_lock();
	int ok = device_range(dev_ptr, count);
	if (ok)
		memset(dev_ptr, value, count);
	bn_cuda_host_unlock();
	return ok ? cudaSuccess : bn_cuda_host_error(cudaErrorInvalidValue);
}

/* The synchronous calls run on the legacy stream and wait for it: during a capture that is
 * what CUDA refuses. */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	cudaError_t refused = bn_cuda_host_capture_refuse(NULL, 1);
	return refused != cudaSuccess ? bn_cuda_host_error(refused) : copy(dst, src, count, kind);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
			    cudaStream_t stream)
{
	if (!bn_cuda_host_stream_ok(stream))
		return bn_cuda_host_error(cudaErrorInvalidResourceHandle);
	if (!stream) {
		cudaError_t refused = bn_cuda_host_capture_refuse(NULL, 1);
		if (refused != cudaSuccess)
			return bn_cuda_host_error(refused);
	}
	if (bn_cuda_host_capture_copy(dst, src, count, kind, -1, stream))
		return cudaSuccess;
	return copy(dst, src, count, kind);
}

cudaError_t cudaMemset(void *dev_ptr, int value, size_t count)
{
	cudaError_t refused = bn_cuda_host_capture_refuse(NULL, 1);
	return refused != cudaSuccess ? bn_cuda_host_error(refused)
				      : bn_cuda_host_memset(dev_ptr, value, count);
}

cudaError_t cudaMemsetAsync(void *dev_ptr, int value, size_t count, cudaStream_t stream)
{
	if (!bn_cuda_host_stream_ok(stream))
		return bn_cuda_host_error(cudaErrorInvalidResourceHandle);
	if (!stream) {
		cudaError_t refused = bn_cuda_host_capture_refuse(NULL, 1);
		if (refused != cudaSuccess)
			return bn_cuda_host_error(refused);
	}
	if (bn_cuda_host_capture_copy(dev_ptr, NULL, count, 0, value & 0xff, stream))
		return cudaSuccess;
	return bn_cuda_host_memset(dev_ptr, value, count);
}

/* ------------------------------------------------------------------------------------------ */
/* Streams and events                                                                          */
/* ------------------------------------------------------------------------------------------ */

struct CUstream_st {
	unsigned flags;
};

struct CUevent_st {
	unsigned flags;
	int recorded;
	struct timespec at;
};

/* Live handles, so a destroyed or made-up one is refused instead of read. */
static struct {
	void **h;
	size_t n, cap;
} handles;

int bn_cuda_host_handle_live(const void *h)
{
	for (size_t i = 0; i < handles.n; i++)
		if (handles.h[i] == h)
			return 1;
	return 0;
}

static cudaError_t handle_add(void *h)
{
	if (handles.n == handles.cap) {
		size_t cap = handles.cap ? 2 * handles.cap : 16;
		void **a = realloc(handles.h, cap * sizeof(*a));
		if (!a)
			return cudaErrorMemoryAllocation;
		handles.h = a;
		handles.cap = cap;
	}
	handles.h[handles.n++] = h;
	return cudaSuccess;
}

static int handle_remove(const void *h)
{
	for (size_t i = 0; i < handles.n; i++)
		if (handles.h[i] == h) {
			handles.h[i] = handles.h[--handles.n];
			return 1;
		}
	return 0;
}

int bn_cuda_host_stream_ok(cudaStream_t s)
{
	bn_cuda_host_lock();
	int ok = !s || bn_cuda_host_handle_live(s);
	bn_cuda_host_unlock();
	return ok;
}

static int event_ok(cudaEvent_t e)
{
	bn_cuda_host_lock();
	int ok = e && bn_cuda_host_handle_live(e);
	bn_cuda_host_unlock();
	return ok;
}

/* A new handle of `bytes`, zeroed, registered; NULL when out of memory. */
void *bn_cuda_host_handle_new(size_t bytes)
{
	void *h = calloc(1, bytes);
	if (!h)
		return NULL;
	bn_cuda_host_lock();
	cudaError_t e = handle_add(h);
	bn_cuda_host_unlock();
	if (e != cudaSuccess) {
		free(h);
		return NULL;
	}
	return h;
}

cudaError_t bn_cuda_host_handle_free(void *h)
{
	bn_cuda_host_lock();
	int was = h && handle_remove(h);
	bn_cuda_host_unlock();
	if (!was)
		return bn_cuda_host_error(cudaErrorInvalidResourceHandle);
	free(h);
	return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
	if (!stream || flags > cudaStreamNonBlocking)
		return bn_cuda_host_error(cudaErrorInvalidValue);
	*stream = bn_cuda_host_handle_new(sizeof(**stream));
	if (!*stream)
		return bn_cuda_host_error(cudaErrorMemoryAllocation);
	(*stream)->flags = flags;
	return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream)
{
	return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	if (stream && bn_cuda_host_captures(stream))
		return bn_cuda_host_error(cudaErrorIllegalState); /* end its capture first */
	return bn_cuda_host_handle_free(stream);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	if (!bn_cuda_host_stream_ok(stream))
		return bn_cuda_host_error(cudaErrorInvalidResourceHandle);
	return bn_cuda_host_error(bn_cuda_host_capture_refuse(stream, !stream));
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	return cudaStreamSynchronize(stream); /* idle: its work ran when it was issued */
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	if (!bn_cuda_host_stream_ok(stream) || !event_ok(event))
		return bn_cuda_host_error(cudaErrorInvalidResourceHandle);
	return flags ? bn_cuda_host_error(cudaErrorInvalidValue) : cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	if (!event || flags > (cudaEventBlockingSync | cudaEventDisableTiming))
		return bn_cuda_host_error(cudaErrorInvalidValue);
	*event = bn_cuda_host_handle_new(sizeof(**event));
	if (!*event)
		return bn_cuda_host_error(cudaErrorMemoryAllocation);
	(*event)->flags = flags;
	return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
	return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	return bn_cuda_host_handle_free(event);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	if (!event_ok(event) || !bn_cuda_host_stream_ok(stream))
		return bn_cuda_host_error(cudaErrorInvalidResourceHandle);
	if (bn_cuda_host_captures(stream) || !stream) /* graphs here hold no event nodes */
		if (bn_cuda_host_capture_refuse(stream, !stream) != cudaSuccess)
			return bn_cuda_host_error(cudaErrorStreamCaptureUnsupported);
	clock_gettime(CLOCK_MONOTONIC, &event->at);
	event->recorded = 1;
	return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	if (!event_ok(event))
		return bn_cuda_host_error(cudaErrorInvalidResourceHandle);
	return bn_cuda_host_error(bn_cuda_host_capture_refuse(NULL, 1));
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
	return cudaEventSynchronize(event);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	if (!ms)
		return bn_cuda_host_error(cudaErrorInvalidValue);
	if (!event_ok(start) || !event_ok(end) || ((start->flags | end->flags) & cudaEventDisableTiming))
		return bn_cuda_host_error(cudaErrorInvalidResourceHandle);
	if (!start->recorded || !end->recorded)
		return bn_cuda_host_error(cudaErrorInvalidResourceHandle);
	*ms = (float)((double)(end->at.tv_sec - start->at.tv_sec) * 1e3 +
		      (double)(end->at.tv_nsec - start->at.tv_nsec) / 1e6);
	return cudaSuccess;
}
