/* SPDX-License-Identifier: MIT */
/*
 * cuda_variant.h — which kernel paths the cuda backend runs (--cuda-kernels). The first paths
 * are `base` (cuda.c's step, kernels/cuda/ternary.cu and float.cu); each later path is a
 * feature of its own, so that a GPU run can tell what each one gives (bench_cuda runs them
 * side by side in one process):
 *
 *   graph  decode steps captured once per batch-size bucket as CUDA graphs and replayed
 *   fused  QKV and gate+up as one product each (rows concatenated at load); RMSNorm with the
 *          int8 quantization of its output, the gated activation with the down product's
 *          quantization, residual adds inside the next norm, RoPE with the KV store
 *   gemv   the P16 weight layout and its GEMV for steps of fewer than 16 tokens
 *   mma    int8 tensor cores (mma.sync) for steps of 16 tokens or more
 *   split  attention split along the context, split=N positions a block (default 256)
 *
 * graph, fused, gemv and mma give the base path's bits (integer sums are exact; fused
 * kernels repeat the same float operations); split changes the float reduction order of
 * tokens with more than N positions, so it is in `all` but not in `fast`. The default is `fast`:
 * on an H200 it was faster than `base` at every batch size and context bench_cuda measures
 * (docs/PERFORMANCE.md, "CUDA kernel variants") with the same bits; `all` stays opt-in since
 * its long-context logits differ. Built without CUDA too: the daemon checks the name.
 */
#ifndef BITNETD_CUDA_VARIANT_H
#define BITNETD_CUDA_VARIANT_H

#include <stddef.h>
#include <stdint.h>

#define BN_CUDA_KERNELS_DEFAULT "fast" /* what --cuda-kernels is without the option */

#define BN_CUDA_K_GRAPH (1U << 0)
#define BN_CUDA_K_FUSED (1U << 1)
#define BN_CUDA_K_GEMV  (1U << 2)
#define BN_CUDA_K_MMA   (1U << 3)
#define BN_CUDA_K_SPLIT (1U << 4)
#define BN_CUDA_K_FAST  (BN_CUDA_K_GRAPH | BN_CUDA_K_FUSED | BN_CUDA_K_GEMV | BN_CUDA_K_MMA)
#define BN_CUDA_K_ALL   (BN_CUDA_K_FAST | BN_CUDA_K_SPLIT)

#define BN_CUDA_SPLIT_DEFAULT 256 /* positions a split attention block takes */
#define BN_CUDA_KERNELS_NAME_MAX 64

struct bn_cuda_kernels {
	uint32_t flags;          /* BN_CUDA_K_*; 0: base */
	uint32_t split;          /* split's positions a block (a power of two, 16 .. 65536) */
};

/* "base", "fast", "all", or features joined by ',' or '+' (fast and all may be among them;
 * split=N sets the split). NULL or "": BN_CUDA_KERNELS_DEFAULT. Returns 0 or -EINVAL. */
int bn_cuda_kernels_parse(const char *text, struct bn_cuda_kernels *k);
/* The canonical name: "base", or the features in the order above ("split=N" when N is not
 * the default). */
void bn_cuda_kernels_name(const struct bn_cuda_kernels *k, char *buf, size_t cap);

#endif /* BITNETD_CUDA_VARIANT_H */
