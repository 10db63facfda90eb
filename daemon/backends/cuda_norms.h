/* SPDX-License-Identifier: MIT */
/*
 * cuda_norms.h — the steps of issue 61's qwen3 and gemma3 graphs (model.h) that cuda.c's base
 * layer adds to a BitNet/llama layer: the per-head q/k RMS norms, BitNet-embedding's seven
 * per-projection input norms, Gemma 3's post-attention and post-FFN norms, and the gated
 * activation's code (GELU among them). The weights of these norms on the device, per layer,
 * and the kernels that apply them (cuda_kernels.h's rmsnorm, one launch for all heads where
 * the rows are contiguous).
 *
 * The --cuda-kernels variants (cuda_fwd.h) do not run these graphs: their fused kernels take
 * one norm into one quantization for q, k and v (proj_norms wants three), store k to the cache
 * before any q/k norm could run, and their P16 and tensor-core layouts and the split attention
 * know one scale a row and no window. A variant asked for such a model runs base instead
 * (cuda_norms_base_only says why; base's bits are the variants' contract anyway).
 */
#ifndef BITNETD_CUDA_NORMS_H
#define BITNETD_CUDA_NORMS_H

#include "cuda_mem.h"
#include "model/model.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

struct cuda_norms_layer {
	float *q_norm, *k_norm;      /* [head_dim], NULL without qk_norm */
	float *post_attn, *post_ffw; /* [n_embd], NULL without post_norms */
	float *in[7];                /* proj_norms: bn_layer_linears' order, NULLs without */
};

/* Every layer's norms into b (out: [n_layer], zeroed by the caller). 0, -ENOMEM or -EIO. */
int cuda_norms_upload(struct bn_cuda_buffers *b, const struct bn_model *m,
		      struct cuda_norms_layer *out);
/* n_tok rows of n_heads heads of head_dim floats, ld apart: each head RMS-normed by w in
 * place. 0 or a CUDA error. */
int cuda_norms_heads(float *v, uint32_t ld, uint32_t n_heads, uint32_t head_dim, const float *w,
		     uint32_t n_tok, float eps, cudaStream_t stream);
/* n_tok rows of n floats, ld apart, RMS-normed by w in place; nothing when w is NULL. */
int cuda_norms_apply(const float *w, float *v, uint32_t ld, uint32_t n, uint32_t n_tok,
		     float eps, cudaStream_t stream);
/* The gated activation's BN_CUDA_ACT_* code. */
int cuda_norms_act(enum bn_activation a);
/* What of m's graph only base runs (the header's reasons), or NULL. */
const char *cuda_norms_base_only(const struct bn_model *m);

#endif /* BITNETD_CUDA_NORMS_H */
