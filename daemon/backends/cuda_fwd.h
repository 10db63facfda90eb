/* SPDX-License-Identifier: MIT */
/*
 * cuda_fwd.h — the cuda backend's forward pass with the kernel paths of --cuda-kernels
 * (cuda_variant.h) other than `base`: every layer, the final norm of the rows that want logits
 * and the LM head, into cuda.c's logits; cuda.c keeps the device, the KV cache, the step's
 * inputs and the sampler, and calls this in place of its own layers when a variant is chosen.
 *
 * It owns the layers' weights in the layouts its kernels want (QKV and gate+up concatenated
 * with `fused`, P16 with `gemv`), its activations, split-k and split-attention scratch, and
 * the decode steps' CUDA graphs (`graph`): a step whose rows are all one sampled token is
 * padded to a batch-size bucket and its table stride to a power of two, so that one graph
 * per (bucket, stride) serves every such step; padding rows store nothing in the KV cache
 * (slot UINT32_MAX), attend to position 0 of row 0's first block and get logits that cuda.c
 * does not sample (no mask, no penalties) and does not read back. The graph holds the layers
 * and the LM head only: sampling, masks and the second draw are cuda_rows.h's, as for base.
 *
 * Every other step (prefill chunks, verify rows, scored rows) runs the same kernels launched
 * one by one, with logits for exactly the rows cuda.c lists in out_rows (cuda_rows_tokens:
 * several a batch row for verify and scored rows).
 */
#ifndef BITNETD_CUDA_FWD_H
#define BITNETD_CUDA_FWD_H

#include "cuda_kernels.h"
#include "cuda_variant.h"
#include "model/batch.h"

#include <stdint.h>

struct bn_model;
struct bn_cuda_fwd;
struct cuda_wcache;

/* A step's inputs as cuda.c lays them out, on the device or in their host staging. */
struct bn_cuda_fwd_in {
	float *x;                /* [n_tok][ld_x] embeddings, then the residual stream */
	float *cs;               /* [n_tok][rope_dim] RoPE cos, sin */
	uint32_t *slot;          /* [n_tok] KV row within a layer (UINT32_MAX: not stored) */
	uint32_t *len;           /* [n_tok] positions attended over */
	uint32_t *table_off;     /* [n_tok] start of the token's block table in tables */
	uint32_t *tables;        /* [rows][max_blocks] */
	uint32_t *out_rows;      /* [n_out] tokens that want logits */
};

/* What cuda.c uploaded for the output: the final norm and the LM head. */
struct bn_cuda_fwd_head {
	const float *norm;       /* [n_embd] */
	int ternary;             /* 1: t2, else f */
	struct bn_cuda_t2 t2;
	struct bn_cuda_fmat f;
};

/* One step: n_tok tokens, n_out of them (out_rows) want logits; max_blocks bounds every
 * row's block count (the table stride); graph: run as the bucket's CUDA graph (the inputs
 * were padded by bn_cuda_fwd_pad); settle: x must hold every token's final residual stream
 * at the end (cuda.c reads hidden rows from it: the last product's output added in, which a
 * fused final norm otherwise adds only for the logits rows). */
struct bn_cuda_fwd_step {
	uint32_t n_tok, n_out, max_blocks, graph, settle;
};

/* Uploads the layers of m for the variant k (flags not 0); ld_x is cuda.c's embedding row
 * stride. The ternary layouts are built from m's T2 planes (the repack's, or the packed-weight
 * cache's mapping after a hit); the float matrices go through wcache (cuda_wcache_upload), as
 * cuda.c's do, before cuda_wcache_ready. Returns 0 or a negative errno (logged). */
int bn_cuda_fwd_open(struct bn_cuda_fwd **out, const struct bn_model *m,
		     const struct bn_cuda_kernels *k, const struct bn_cuda_fwd_head *head,
		     struct cuda_wcache *wcache, uint32_t ld_x, cudaStream_t stream);
void bn_cuda_fwd_close(struct bn_cuda_fwd *f);
/* The KV cache: [n_layer][n_blocks][block_tokens][kv_dim] keys and values. */
void bn_cuda_fwd_kv(struct bn_cuda_fwd *f, float *K, float *V, uint32_t n_blocks,
		    uint32_t block_tokens);

/* Whether batch b (n_tok tokens) runs as a graph; if so its padded shape: *n_tok becomes the
 * bucket (the rows too), *max_blocks the table stride. */
int bn_cuda_fwd_graph_shape(const struct bn_cuda_fwd *f, const struct bn_batch *b,
			    uint32_t *n_tok, uint32_t *max_blocks);
/* Rows [n_real, bucket) of the host staging (zeroed) as padding rows. */
void bn_cuda_fwd_pad(const struct bn_cuda_fwd_in *host, uint32_t n_real, uint32_t bucket);

/* The forward pass of one step into logits [n_out][n_vocab]. 0 or -EIO / -ENOMEM (logged). */
int bn_cuda_fwd_run(struct bn_cuda_fwd *f, const struct bn_cuda_fwd_in *dev,
		    const struct bn_cuda_fwd_step *s, float *logits);

#endif /* BITNETD_CUDA_FWD_H */
