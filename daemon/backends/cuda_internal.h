/* SPDX-License-Identifier: MIT */
/*
 * cuda_internal.h — what the cuda backend's two files share: cuda.c (the device, the weights,
 * the step's forward pass, or cuda_fwd.c's for a --cuda-kernels variant) and cuda_sample.c (the step's sampling: penalties, ranking rows,
 * grammar masks, the results, and the second draw that closes a constrained output before
 * max_tokens). Nothing outside backends/cuda*.c includes it.
 */
#ifndef BITNETD_CUDA_INTERNAL_H
#define BITNETD_CUDA_INTERNAL_H

#include "backend.h"
#include "common/log.h"
#include "cuda_kernels.h"
#include "cuda_variant.h"
#include "model/model.h"
#include "model/sample.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#define ALIGN 256                    /* device and staging sub-buffers */
#define KV_HEADROOM_MIN (1ull << 30) /* device memory kept free of KV for step scratch */
#define UPLOAD_CHUNK (64u << 20)     /* host staging for converting weights */
/* Relative cost of an attention multiply-add to a weight multiply-add, for the scheduler's token
 * budget: not measured on a GPU yet, so multiply-adds are counted as equal. */
#define CUDA_ATTN_MAC_COST 1.0

enum dev_kind { DEV_T2, DEV_FLOAT };

struct dev_linear {
	enum dev_kind kind;
	struct bn_cuda_t2 t2;
	struct bn_cuda_fmat f;
};

struct dev_layer {
	float *attn_norm, *attn_sub_norm, *ffn_norm, *ffn_sub_norm;
	struct dev_linear wq, wk, wv, wo, w_gate, w_up, w_down;
};

/* Per-step inputs, laid out identically in the pinned host block and the device block so
 * that one copy moves them all. */
struct step_inputs {
	float *x;                     /* [n_tok][ld_x] embeddings */
	float *cs;                    /* [n_tok][rope_dim] */
	uint32_t *slot;               /* [n_tok] KV row of each token within a layer */
	uint32_t *len;                /* [n_tok] positions each token attends over */
	uint32_t *table_off;          /* [n_tok] where its row's block table starts */
	uint32_t *tables;             /* [n_rows][max blocks] */
	uint32_t *out_rows;           /* [n_out] token index of each row that wants a token */
	struct bn_cuda_penalty *pen;  /* [n_pen] */
	struct bn_cuda_sample_row *rank; /* [n_rank] */
	uint32_t *row_mask;           /* [n_out] the row's bitset in masks, or BN_CUDA_NO_MASK */
	uint64_t *masks;              /* [n_masks][mask words] the constrained rows' allowed tokens */
	size_t bytes;
};

struct step_shape {
	uint32_t n_tok, n_rows, n_out, max_blocks, n_pen, n_rank, n_masks;
};

struct bn_cuda_fwd;

struct cuda_backend {
	struct bn_model model;
	cudaStream_t stream;
	struct bn_cuda_kernels kernels; /* --cuda-kernels; not base: fwd runs the layers */
	struct bn_cuda_fwd *fwd;      /* cuda_fwd.h, or NULL for base */
	void **allocs;                /* device buffers of the weights */
	uint32_t n_allocs, cap_allocs;
	struct dev_layer *layers;
	float *output_norm;
	struct dev_linear output;
	uint64_t weight_bytes;
	float *rope_freq;
	uint32_t max_seqs;
	uint32_t *seq_len;
	float *kv_k, *kv_v;           /* [n_layer][n_blocks][block_tokens][kv_dim] */
	uint32_t kv_blocks, kv_block_tokens;
	uint32_t q_dim, kv_dim, ld_x, ld_q, ld_kv, ld_ff, ld_wide;
	/* activations for n_cap tokens (zeroed at allocation: pads stay zero); the residual
	 * stream x is the step's uploaded embeddings, updated in place */
	void *act;
	uint32_t n_cap;
	float *x, *xb, *q, *k, *v, *att, *gate, *up;
	struct bn_cuda_q8 xq;
	uint16_t *xh;
	/* step inputs */
	void *in_host, *in_dev;
	size_t in_cap;
	/* outputs */
	float *logits;
	uint32_t logits_rows;
	void *sample_scratch;
	size_t sample_scratch_bytes;
	void *res_dev, *res_host;     /* tokens [rows] then results [rows] */
	uint32_t res_rows;
	struct bn_sampler sampler;    /* host scratch for the penalty lists */
	struct bn_penalty *pen_list;
	uint32_t pen_cap;
	/* the second draw (cuda_sample.c): its inputs, and which batch rows it redraws */
	void *redraw_host, *redraw_dev;
	size_t redraw_cap;
	uint32_t *redraw_rows;        /* [n] (batch row, out row) pairs */
	uint32_t redraw_rows_cap;
};

static inline int cuda_failed(const char *what, int err)
{
	bn_log_error("msg=\"CUDA call failed\" call=%s error=\"%s\" code=%d", what,
		     cudaGetErrorString((cudaError_t)err), err);
	return -EIO;
}

#define CUDA_TRY(call)                                            \
	do {                                                      \
		int err_ = (int)(call);                           \
		if (err_ != 0)                                    \
			return cuda_failed(#call, err_);          \
	} while (0)

/* Hands out ALIGN-aligned pieces of a block; with base NULL it only counts. */
struct carver {
	char *base;
	size_t at;
};

static inline void *carve(struct carver *c, size_t bytes)
{
	void *p = c->base ? c->base + c->at : NULL;
	c->at += (bytes + ALIGN - 1) / ALIGN * ALIGN;
	return p;
}

/* A row whose token is the plain argmax: no ranking, no log-probabilities. */
static inline int cuda_plain_greedy(const struct bn_sample_ctx *s)
{
	const struct bn_sampling *p = s->params;
	return (p->temperature == 0 || p->top_k == 1) && !p->want_logprobs;
}

static inline uint32_t cuda_mask_words(const struct cuda_backend *cb)
{
	return bn_sample_mask_words(cb->model.cfg.n_vocab);
}

/* ---- cuda_sample.c ----------------------------------------------------------------------- */

/* The sampler's scratch for rank_rows ranked rows. 0 or -EIO. */
int cuda_reserve_ranking(struct cuda_backend *cb, uint32_t rank_rows);
/* Penalty entries, ranking rows and the constrained rows' masks of the rows that want tokens
 * (out-row numbering), into the step's host inputs. 0 or -ENOMEM. */
int cuda_fill_sampling(struct cuda_backend *cb, const struct bn_batch *b,
		       const struct step_inputs *in, struct step_shape *s);
/* The sampler's kernels on the step's logits (dev: the inputs on the device). 0 or -EIO. */
int cuda_sample_logits(struct cuda_backend *cb, const struct step_inputs *dev,
		       const struct step_shape *s);
/* Tokens and log-probabilities back into out[] (from cb->res_host, copied back). */
void cuda_collect(const struct cuda_backend *cb, const struct bn_batch *b,
		  struct bn_sample_out *out);
/* The constrained rows' checks (sample.h, bn_sample_check) on their drawn tokens, and a
 * second draw, on the device, of those that must draw again, from the same logits with the
 * same u. 0, -ENOMEM or -EIO. */
int cuda_redraw(struct cuda_backend *cb, const struct bn_batch *b, struct bn_sample_out *out);
/* Frees what the sampling holds (cuda_close). */
void cuda_sample_free(struct cuda_backend *cb);

#endif /* BITNETD_CUDA_INTERNAL_H */
