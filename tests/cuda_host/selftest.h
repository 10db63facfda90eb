/* SPDX-License-Identifier: MIT */
/*
 * selftest.h — the small kernels test_harness.c runs on the CUDA host harness
 * (selftest_kernels.cu, built into their own shared object like kernels/cuda). Pointers are
 * device pointers; each call launches on the default stream and returns cudaGetLastError() as
 * an int. A `mutant` argument selects the broken variant a test expects the harness to catch.
 */
#ifndef BN_CUDA_HOST_SELFTEST_H
#define BN_CUDA_HOST_SELFTEST_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[b][t] = in[b][n - 1 - t] through shared memory, n threads a block; mutant: no
 * __syncthreads between the writes and the reads. */
int st_reverse(const int *in, int *out, unsigned n, unsigned blocks, int mutant);

/* out[i] = the sum over i's warp of in (a __shfl_xor_sync butterfly) under `mask`; lane
 * `absent_lane` of each warp returns first (32: none). */
int st_warp_sum(const int *in, int *out, unsigned threads, unsigned blocks, uint32_t mask,
		unsigned absent_lane);

/* Per lane l of one warp: out[4 l + 0..3] = __shfl_sync(l, src, width), __shfl_up_sync(l,
 * delta, width), __shfl_down_sync(l, delta, width), __shfl_xor_sync(l, lane_mask, width);
 * ballot[0] = __ballot_sync of (l % 3 == 0). */
int st_shuffles(uint32_t *out, uint32_t *ballot, int src, unsigned delta, int lane_mask, int width);

/* Half the warp at __shfl_xor_sync, the other half at __shfl_sync. */
int st_divergent_shuffle(int *out);
/* 64 threads: 0-47 wait at __syncthreads, 48-63 at a shuffle that lanes 0-15 of their warp
 * never reach. */
int st_deadlock(int *out);
/* A shuffle in a block of 48 threads: its second warp has 16 lanes. */
int st_partial_warp(int *out);

/* out[b] (or out[0] for every block with `overlap`) = b + 1, from thread 0 of block b. */
int st_blocks_write(int *out, unsigned blocks, int overlap);

/* out[t] = in[t + offset], n threads in one block. */
int st_read(const int *in, int *out, unsigned n, unsigned offset);

/* hist[in[i] % 16] counted with atomicAdd over blocks x threads values; extremes[0] and [1]
 * the atomicMax and atomicMin of in; cas_winners[0] the number of threads of block 0 whose
 * atomicCAS on a fresh slot found it empty (exactly one), and atomicExch's total; */
int st_atomics(const uint32_t *in, unsigned threads, unsigned blocks, int *hist, uint32_t *extremes,
	       int *cas_winners);

/* Two blocks each read shared memory before anything wrote it (ints[b], floats[b]), then
 * write it. */
int st_shared_poison(int *ints, float *floats);

/* order1[t], order2[t]: the place of thread t among the block's threads in passing the first
 * and the second __syncthreads (one block of n). */
int st_barrier_order(uint32_t *order1, uint32_t *order2, unsigned n);

/* One warp: d = a b + c on 16x16x16 tiles (int8 and int, half and float); a in memory as
 * row-major (a_row_major) or column-major, b the other way round, d stored row-major. */
int st_wmma_s8(const int8_t *a, const int8_t *b, const int *c, int *d, int a_row_major);
int st_wmma_f16(const uint16_t *a, const uint16_t *b, const float *c, float *d, int a_row_major);
/* Mutants of a wmma load: 1 each lane passes its own pointer, 2 a pointer 2 bytes off. */
int st_wmma_bad_load(const int8_t *a, int *d, int mutant);

/* The kernel-side helpers, on the host: __float2half_rn and __half2float, __dp4a (both
 * signedness), __vsub4, __ffs, __clz. */
uint16_t st_float2half_rn(float f);
float st_half2float(uint16_t h);
int st_dp4a(int a, int b, int c);
unsigned st_dp4a_u(unsigned a, unsigned b, unsigned c);
unsigned st_vsub4(unsigned a, unsigned b);
int st_ffs(int x);
int st_clz(int x);

/* cub::DeviceSegmentedRadixSort::SortPairs of uint32 keys and values over n_segments
 * segments [offsets[s], offsets[s + 1]) by key bits [begin_bit, end_bit); scratch is taken
 * and freed inside. */
int st_sort_pairs(const uint32_t *keys_in, uint32_t *keys_out, const uint32_t *values_in,
		  uint32_t *values_out, int n, const int *offsets, int n_segments, int begin_bit,
		  int end_bit);

/* A launch with `threads` threads a block and `blocks` blocks (an empty kernel). */
int st_launch(unsigned threads, unsigned blocks);
/* A launch asking for `bytes` of dynamic shared memory. */
int st_launch_dynamic_shared(unsigned bytes);
/* An int pointer argument from the host heap, not device memory. */
int st_host_pointer_argument(int *host);

#ifdef __cplusplus
}
#endif

#endif /* BN_CUDA_HOST_SELFTEST_H */
