/* SPDX-License-Identifier: MIT */
/*
 * block.h — one thread block of a launch, run as fibers on the calling OS thread (block.c).
 */
#ifndef BN_CUDA_HOST_BLOCK_H
#define BN_CUDA_HOST_BLOCK_H

#include "cuda_host.h"

#include <stdint.h>

#define BN_CUDA_HOST_MAX_THREADS 1024

/* Where a failure message says the program was: the launch and its seed. */
struct bn_cuda_host_where {
	const char *kernel_name;
	uint64_t launch;          /* launches so far in this process, this one included */
	uint64_t seed;            /* BN_CUDA_HOST_SEED */
	int pass;                 /* the race check's second run: 1 */
};

/* Runs every thread of block `idx` to its end. Threads take turns at random, seeded by `seed`:
 * the first to run, and after each __syncthreads and warp collective, whichever waits. Fails
 * the program on a deadlock or a broken warp collective. */
void bn_cuda_host_run_block(const struct bn_cuda_host_launch *l, uint3 idx, uint64_t seed);

/* What bn_cuda_host_fail prints about the launch (NULL: outside one). */
void bn_cuda_host_set_where(const struct bn_cuda_host_where *w);

/* splitmix64: a seed for each block and pass from the launch's. */
uint64_t bn_cuda_host_mix(uint64_t a, uint64_t b);

#endif /* BN_CUDA_HOST_BLOCK_H */
