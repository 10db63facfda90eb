/* SPDX-License-Identifier: MIT */
#include "cuda_mem.h"

#include "common/log.h"
#include "cuda_kernels.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

int bn_cuda_failed(const char *what, int err)
{
	/* quoted: CUDA_TRY's `what` is the call's source text, spaces and all */
	bn_log_error("msg=\"CUDA call failed\" call=\"%s\" error=\"%s\" code=%d", what,
		     cudaGetErrorString((cudaError_t)err), err);
	return -EIO;
}

size_t bn_cuda_free_bytes(void)
{
	size_t free_b = 0, total = 0;
	if (cudaMemGetInfo(&free_b, &total) != cudaSuccess)
		return 0;
	return free_b;
}

int bn_cuda_buffers_alloc(struct bn_cuda_buffers *b, size_t bytes, void **out)
{
	if (b->n == b->cap) {
		uint32_t cap = b->cap ? 2 * b->cap : 64;
		void **p = realloc(b->ptr, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		b->ptr = p;
		b->cap = cap;
	}
	if (cudaMalloc(out, bytes ? bytes : 1) != cudaSuccess) {
		/* bytes, not MiB: on a nearly full device the buffer that fails can be small */
		bn_log_error("msg=\"out of device memory loading the weights\" need_bytes=%zu "
			     "free_bytes=%zu loaded_bytes=%llu",
			     bytes, bn_cuda_free_bytes(), (unsigned long long)b->bytes);
		return -ENOMEM;
	}
	b->ptr[b->n++] = *out;
	b->bytes += bytes;
	return 0;
}

int bn_cuda_buffers_upload(struct bn_cuda_buffers *b, const void *src, size_t bytes, void **out)
{
	int rc = bn_cuda_buffers_alloc(b, bytes, out);
	if (rc)
		return rc;
	cudaError_t e = cudaMemcpy(*out, src, bytes, cudaMemcpyHostToDevice);
	return e == cudaSuccess ? 0 : bn_cuda_failed("cudaMemcpy(weights)", e);
}

void bn_cuda_buffers_free(struct bn_cuda_buffers *b)
{
	for (uint32_t i = 0; i < b->n; i++)
		cudaFree(b->ptr[i]);
	free(b->ptr);
	memset(b, 0, sizeof(*b));
}

/* The runtime says "driver insufficient" both for an old driver and for none at all. */
static int driver_present(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
	if (h)
		dlclose(h);
	return h != NULL;
}

int bn_cuda_pick_device(int index, int probing)
{
	enum bn_log_level say_level = probing ? BN_LOG_INFO : BN_LOG_ERROR;
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e == cudaErrorInsufficientDriver && !driver_present()) {
		bn_log(say_level, "msg=\"no CUDA device: no NVIDIA driver is installed\" error=\"%s\"",
		       dlerror());
		return -ENODEV;
	}
	if (e == cudaErrorInsufficientDriver) {
		bn_log(say_level, "msg=\"the NVIDIA driver is older than the CUDA runtime this build uses\" runtime=%d error=\"%s\"",
			     CUDART_VERSION, cudaGetErrorString(e));
		return -ENODEV;
	}
	if (e != cudaSuccess || count == 0) {
		bn_log(say_level, "msg=\"no CUDA device\" error=\"%s\"",
			     e != cudaSuccess ? cudaGetErrorString(e) : "no device found");
		return -ENODEV;
	}
	if (index < 0 || index >= count) {
		bn_log_error("msg=\"no such CUDA device\" device=cuda:%d devices=%d", index, count);
		return -ENODEV;
	}
	struct cudaDeviceProp prop;
	if ((e = cudaGetDeviceProperties(&prop, index)) != cudaSuccess)
		return bn_cuda_failed("cudaGetDeviceProperties", e);
	if (!bn_cuda_arch_ok(prop.major, prop.minor)) {
		bn_log_error("msg=\"this build runs on compute capability %d.%d or newer (sm_%d and up, Makefile: CUDA_ARCHS)\" device=cuda:%d name=\"%s\" capability=%d.%d",
			     BN_CUDA_MIN_ARCH / 10, BN_CUDA_MIN_ARCH % 10, BN_CUDA_MIN_ARCH, index,
			     prop.name, prop.major, prop.minor);
		return -ENODEV;
	}
	if ((e = cudaSetDevice(index)) != cudaSuccess)
		return bn_cuda_failed("cudaSetDevice", e);
	bn_log_info("msg=\"cuda device\" device=cuda:%d name=\"%s\" capability=%d.%d sms=%d memory_mib=%zu",
		    index, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
		    prop.totalGlobalMem >> 20);
	return 0;
}
