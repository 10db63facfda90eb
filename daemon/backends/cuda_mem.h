/* SPDX-License-Identifier: MIT */
/*
 * cuda_mem.h — what cuda.c and cuda_fwd.c both need from the CUDA runtime: the device picked
 * and checked, a failed call logged the one way, and the registry of device buffers that live as long as the weights
 * (allocated one by one while loading, counted for the load's log line and the messages
 * about running out of memory, freed together at close).
 */
#ifndef BITNETD_CUDA_MEM_H
#define BITNETD_CUDA_MEM_H

#include <stddef.h>
#include <stdint.h>

/* Makes device `index` current after checking that it exists and that this build runs on it
 * (each refusal logged, at info level when probing: --backend auto goes on with the cpu).
 * 0 or -ENODEV / -EIO. */
int bn_cuda_pick_device(int index, int probing);
/* Logs the failed call (its text and the runtime's error string) and returns -EIO. */
int bn_cuda_failed(const char *what, int err);
/* What the device can still give, in bytes (0 when the runtime cannot say). */
size_t bn_cuda_free_bytes(void);

struct bn_cuda_buffers {
	void **ptr;
	uint32_t n, cap;
	uint64_t bytes;          /* their sizes summed: the weights on the device */
};

/* A device buffer of `bytes` (at least 1) in b. 0, or -ENOMEM (logged with what the device
 * still has and what b holds already). */
int bn_cuda_buffers_alloc(struct bn_cuda_buffers *b, size_t bytes, void **out);
/* bn_cuda_buffers_alloc, then src copied into it. 0, -ENOMEM or -EIO. */
int bn_cuda_buffers_upload(struct bn_cuda_buffers *b, const void *src, size_t bytes, void **out);
/* Frees every buffer of b and its list; b is empty afterwards. */
void bn_cuda_buffers_free(struct bn_cuda_buffers *b);

#endif
