/* SPDX-License-Identifier: MIT */
#include "cuda_mem.h"

#include "common/log.h"

#include <cuda_runtime_api.h>
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
