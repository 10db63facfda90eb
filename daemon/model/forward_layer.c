/* SPDX-License-Identifier: MIT */
/*
 * forward_layer.c — one layer of the batched forward pass (forward_internal.h): its
 * element-wise parts per token, attention per (token, KV head) over the token's own row's
 * cache, and the order of its steps.
 */
#include "forward_internal.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Element-wise parts, per token                                                               */
/* ------------------------------------------------------------------------------------------ */

static void rope_apply(const struct bn_model_config *c, float *v, const float *cs)
{
	uint32_t half = c->rope_dim / 2;
	for (uint32_t i = 0; i < half; i++) {
		uint32_t a = c->rope_neox ? i : 2 * i;
		uint32_t b = c->rope_neox ? i + half : 2 * i + 1;
		float va = v[a], vb = v[b], cosv = cs[2 * i], sinv = cs[2 * i + 1];
		v[a] = va * cosv - vb * sinv;
		v[b] = va * sinv + vb * cosv;
	}
}

/* g[i] = act(g[i]) * u[i]. GELU as ggml's and PyTorch's tanh approximation (Gemma 3's
 * gelu_pytorch_tanh): 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). */
static void gate_activation(const struct bn_kernels *kern, enum bn_activation act, float *g,
			    const float *u, uint32_t n)
{
	if (act == BN_ACT_RELU2) {
		kern->relu2_mul(g, u, n);
		return;
	}
	if (act == BN_ACT_GELU) {
		for (uint32_t i = 0; i < n; i++) {
			float x = g[i];
			g[i] = 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x))) *
			       u[i];
		}
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

enum elem_op { ELEM_ATTN_NORM, ELEM_QKV_NORM_IN, ELEM_ROPE, ELEM_ATTN_SUB_NORM,
	       ELEM_RESIDUAL_FFN_NORM, ELEM_GU_NORM_IN, ELEM_GATE, ELEM_RESIDUAL };

struct elem_job {
	struct bn_forward *f;
	const struct bn_layer *L;
	enum elem_op op;
	uint32_t n_tok;
	uint32_t layer;
};

/* qk_norm: each head of q and k RMS-normed over head_dim by the layer's weights. */
static void qk_norm(struct bn_forward *f, const struct bn_layer *L, uint32_t t)
{
	const struct bn_model_config *c = &f->m->cfg;
	for (uint32_t h = 0; h < c->n_head; h++) {
		float *v = f->q + (size_t)t * f->q_dim + h * c->head_dim;
		f->kern->rmsnorm(v, v, L->attn_q_norm, c->head_dim, c->rms_eps);
	}
	for (uint32_t h = 0; h < c->n_head_kv; h++) {
		float *v = f->k + (size_t)t * f->kv_dim + h * c->head_dim;
		f->kern->rmsnorm(v, v, L->attn_k_norm, c->head_dim, c->rms_eps);
	}
}

/* proj_norms: projection k's input, xb RMS-normed by its own weight, into slot `slot`. */
static void norm_in(struct bn_forward *f, const struct bn_layer *L, uint32_t t, uint32_t k,
		    uint32_t slot)
{
	const struct bn_model_config *c = &f->m->cfg;
	f->kern->rmsnorm(f->xin + ((size_t)t * 3 + slot) * c->n_embd, f->xb + (size_t)t * f->widest,
			 L->norm_in[k], c->n_embd, c->rms_eps);
}

static void elem_token(const struct elem_job *j, uint32_t t)
{
	struct bn_forward *f = j->f;
	const struct bn_model_config *c = &f->m->cfg;
	const struct bn_layer *L = j->L;
	float *x = f->x + (size_t)t * c->n_embd, *xb = f->xb + (size_t)t * f->widest;
	switch (j->op) {
	case ELEM_ATTN_NORM:
		f->kern->rmsnorm(xb, x, L->attn_norm, c->n_embd, c->rms_eps);
		break;
	case ELEM_QKV_NORM_IN:
		for (uint32_t k = 0; k < 3; k++)
			norm_in(f, L, t, k, k);
		break;
	case ELEM_ROPE: {
		const float *cs = (bn_layer_is_swa(c, j->layer) ? f->rope_cs_swa : f->rope_cs) +
				  (size_t)t * c->rope_dim;
		if (L->attn_q_norm)
			qk_norm(f, L, t);
		for (uint32_t h = 0; h < c->n_head; h++)
			rope_apply(c, f->q + (size_t)t * f->q_dim + h * c->head_dim, cs);
		for (uint32_t h = 0; h < c->n_head_kv; h++)
			rope_apply(c, f->k + (size_t)t * f->kv_dim + h * c->head_dim, cs);
		break;
	}
	case ELEM_ATTN_SUB_NORM: { /* BitNet's sub-norm, then BitNet-embedding's o input norm */
		float *a = f->att + (size_t)t * f->q_dim;
		if (L->attn_sub_norm)
			f->kern->rmsnorm(a, a, L->attn_sub_norm, f->q_dim, c->rms_eps);
		if (L->norm_in[3])
			f->kern->rmsnorm(a, a, L->norm_in[3], f->q_dim, c->rms_eps);
		break;
	}
	case ELEM_RESIDUAL_FFN_NORM:
		if (L->post_attn_norm)
			f->kern->rmsnorm(xb, xb, L->post_attn_norm, c->n_embd, c->rms_eps);
		f->kern->add(x, xb, c->n_embd);
		f->kern->rmsnorm(xb, x, L->ffn_norm, c->n_embd, c->rms_eps);
		break;
	case ELEM_GU_NORM_IN:
		norm_in(f, L, t, 4, 0);
		norm_in(f, L, t, 5, 1);
		break;
	case ELEM_GATE: {
		float *g = f->gate + (size_t)t * c->n_ff, *u = f->up + (size_t)t * c->n_ff;
		gate_activation(f->kern, c->act, g, u, c->n_ff);
		if (L->ffn_sub_norm)
			f->kern->rmsnorm(g, g, L->ffn_sub_norm, c->n_ff, c->rms_eps);
		if (L->norm_in[6])
			f->kern->rmsnorm(g, g, L->norm_in[6], c->n_ff, c->rms_eps);
		break;
	}
	case ELEM_RESIDUAL:
		if (L->post_ffw_norm)
			f->kern->rmsnorm(xb, xb, L->post_ffw_norm, c->n_embd, c->rms_eps);
		f->kern->add(x, xb, c->n_embd);
		break;
	}
}

static void elem_task(void *ctx, uint32_t task)
{
	const struct elem_job *j = ctx;
	uint32_t t1 = (task + 1) * ELEM_BLOCK < j->n_tok ? (task + 1) * ELEM_BLOCK : j->n_tok;
	for (uint32_t t = task * ELEM_BLOCK; t < t1; t++)
		elem_token(j, t);
}

static void elementwise(struct bn_forward *f, uint32_t li, enum elem_op op, uint32_t n_tok)
{
	struct elem_job j = { .f = f, .L = &f->m->layers[li], .op = op, .n_tok = n_tok, .layer = li };
	bn_pool_run(f->pool, div_up(n_tok, ELEM_BLOCK), elem_task, &j);
}

/* ------------------------------------------------------------------------------------------ */
/* Attention: per (row, head), over the row's own cache                                        */
/* ------------------------------------------------------------------------------------------ */

struct attn_job {
	struct bn_forward *f;
	const struct bn_batch *b;
	uint32_t n_tok;
	uint32_t layer;
};

/* One task: one (token, KV head) pair, over the token's own row's cache [0, pos]: the same
 * calls whether the token arrived in a prompt of 500 tokens or alone in a decode step, so a
 * prompt's logits do not depend on how it was split into steps, nor a row's on its batch.
 * Tasks go out latest token first: the pool hands them out in order, so the longest ones
 * start first and a long prompt's attention splits evenly over the threads (one task per
 * (row, KV head) left one thread idle for a third of a single prompt's attention). */
static void attn_task(void *ctx, uint32_t task)
{
	const struct attn_job *j = ctx;
	struct bn_forward *f = j->f;
	const struct bn_model_config *c = &f->m->cfg;
	task = j->n_tok * c->n_head_kv - 1 - task;
	uint32_t t = task / c->n_head_kv, kvh = task % c->n_head_kv;
	uint32_t r = f->tok_row[t], pos = f->tok_pos[t], group = c->n_head / c->n_head_kv;
	/* a local layer's window: the last n_swa positions, this one included (llama.cpp's) */
	uint32_t first = bn_layer_is_swa(c, j->layer) && pos >= c->n_swa ? pos + 1 - c->n_swa : 0;
	size_t layer_off = (size_t)j->layer * f->kv_blocks * f->kv_block_tokens * f->kv_dim;
	struct bn_kv_view kv = {
		.K = f->kv_k + layer_off + (size_t)kvh * c->head_dim,
		.V = f->kv_v + layer_off + (size_t)kvh * c->head_dim,
		.blocks = row_blocks(f, j->b, r),
		.block_tokens = f->kv_block_tokens,
		.ld = f->kv_dim,
		.block_stride = (size_t)f->kv_block_tokens * f->kv_dim,
		.first = first,
	};
	float *S = f->attn_scores + (size_t)bn_pool_thread_index() * group * c->n_ctx;
	size_t off = (size_t)t * f->q_dim + (size_t)kvh * group * c->head_dim;
	f->kern->attend_heads(f->q + off, group, &kv, pos + 1 - first, c->head_dim, c->attn_scale,
			      S, f->att + off);
}

/* ------------------------------------------------------------------------------------------ */
/* The layer                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* The attention block's projections: q, k, v of one input (one job, one quantization), or
 * of each its own input norm (proj_norms: three jobs). */
static void qkv_projections(struct bn_forward *f, uint32_t li, uint32_t n_tok)
{
	const struct bn_layer *L = &f->m->layers[li];
	const struct bn_model_config *c = &f->m->cfg;
	const struct bn_linear *qkv[3] = { &L->wq, &L->wk, &L->wv };
	float *qkv_out[3] = { f->q, f->k, f->v };
	uint32_t qkv_ld[3] = { f->q_dim, f->kv_dim, f->kv_dim };
	if (!c->proj_norms) {
		bn_fw_linear_multi(f, 3, qkv, qkv_out, qkv_ld, f->xb, f->widest, n_tok);
		return;
	}
	elementwise(f, li, ELEM_QKV_NORM_IN, n_tok);
	for (uint32_t k = 0; k < 3; k++)
		bn_fw_linear1(f, qkv[k], qkv_out[k], qkv_ld[k], f->xin + (size_t)k * c->n_embd,
			      3 * c->n_embd, n_tok);
}

/* The FFN's gate and up projections, likewise. */
static void gate_up_projections(struct bn_forward *f, uint32_t li, uint32_t n_tok)
{
	const struct bn_layer *L = &f->m->layers[li];
	const struct bn_model_config *c = &f->m->cfg;
	const struct bn_linear *gu[2] = { &L->w_gate, &L->w_up };
	float *gu_out[2] = { f->gate, f->up };
	uint32_t gu_ld[2] = { c->n_ff, c->n_ff };
	if (!c->proj_norms) {
		bn_fw_linear_multi(f, 2, gu, gu_out, gu_ld, f->xb, f->widest, n_tok);
		return;
	}
	elementwise(f, li, ELEM_GU_NORM_IN, n_tok);
	for (uint32_t k = 0; k < 2; k++)
		bn_fw_linear1(f, gu[k], gu_out[k], c->n_ff, f->xin + (size_t)k * c->n_embd,
			      3 * c->n_embd, n_tok);
}

/* attn_norm; q, k, v (qkv_projections); per-head q/k norms and RoPE; the KV cache; attention;
 * the sub-norm and o's input norm; o; the post-attention norm and the residual; ffn_norm;
 * gate and up; the activation, the sub-norm and down's input norm; down; the post-FFN norm
 * and the residual. Each optional step where the model has it (model.h). */
void bn_fw_layer(struct bn_forward *f, const struct bn_batch *b, uint32_t li, uint32_t n_tok)
{
	const struct bn_model_config *c = &f->m->cfg;
	const struct bn_layer *L = &f->m->layers[li];
	elementwise(f, li, ELEM_ATTN_NORM, n_tok);
	bn_fw_read_ahead(f, &L->wo, n_tok);
	qkv_projections(f, li, n_tok);
	elementwise(f, li, ELEM_ROPE, n_tok);
	for (uint32_t t = 0; t < n_tok; t++) {
		uint32_t r = f->tok_row[t], pos = f->tok_pos[t];
		memcpy(kv_slot(f, f->kv_k, b, r, li, pos), f->k + (size_t)t * f->kv_dim,
		       f->kv_dim * sizeof(float));
		memcpy(kv_slot(f, f->kv_v, b, r, li, pos), f->v + (size_t)t * f->kv_dim,
		       f->kv_dim * sizeof(float));
	}
	struct attn_job aj = { .f = f, .b = b, .n_tok = n_tok, .layer = li };
	bn_pool_run(f->pool, n_tok * c->n_head_kv, attn_task, &aj);
	if (L->attn_sub_norm || L->norm_in[3])
		elementwise(f, li, ELEM_ATTN_SUB_NORM, n_tok);
	bn_fw_read_ahead(f, &L->w_gate, n_tok);
	bn_fw_linear1(f, &L->wo, f->xb, f->widest, f->att, f->q_dim, n_tok);
	elementwise(f, li, ELEM_RESIDUAL_FFN_NORM, n_tok);
	bn_fw_read_ahead(f, &L->w_down, n_tok);
	gate_up_projections(f, li, n_tok);
	elementwise(f, li, ELEM_GATE, n_tok);
	if (li + 1 < c->n_layer)
		bn_fw_read_ahead(f, &f->m->layers[li + 1].wq, n_tok);
	else
		bn_fw_read_ahead_head(f, n_tok);
	bn_fw_linear1(f, &L->w_down, f->xb, f->widest, f->gate, c->n_ff, n_tok);
	elementwise(f, li, ELEM_RESIDUAL, n_tok);
}
