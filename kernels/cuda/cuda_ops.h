/* SPDX-License-Identifier: MIT */
/*
 * cuda_ops.h — the CUDA kernels of the request kinds beyond plain generation, callable from C:
 * a scored position's log-probability (score and classify requests) and a fork's copy of a
 * partial KV block (classify's labels, the prefix cache). Conventions as cuda_kernels.h: each
 * launches on `stream`, returns 0 or the launch's cudaError_t, and never synchronizes.
 */
#ifndef BITNET_CUDA_OPS_H
#define BITNET_CUDA_OPS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One scored position: the logits row it reads and the token whose log-probability it wants. */
struct bn_cuda_score_row {
	uint32_t logit_row;
	uint32_t target;
};

/* out[j] = the log-softmax at rows[j].target of logits row rows[j].logit_row (n_vocab values,
 * ld apart), as bn_score_token computes it (daemon/model/sample.h): logits clamped as
 * bn_cuda_sample clamps them (NaN -> -FLT_MAX, +-inf -> +-FLT_MAX; the logits are not
 * written), (double)l[target] - max - log(sum e^(l - max)). The maximum and the sum are
 * bn_cuda_sample's own, in its order (one block of 1024 threads a row), so a target that is
 * also among a ranking's alternatives has the same bits in both. */
int bn_cuda_score(const float *logits, uint32_t ld, uint32_t n_vocab,
		  const struct bn_cuda_score_row *rows, uint32_t n_rows, float *out,
		  cudaStream_t stream);

/* In each of n_layer layers (layer_floats apart) of the keys K and the values V: the n floats
 * at offset src copied to offset dst. The ranges must not overlap. */
int bn_cuda_kv_copy(float *K, float *V, size_t layer_floats, uint32_t n_layer, size_t dst,
		    size_t src, uint32_t n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* BITNET_CUDA_OPS_H */
