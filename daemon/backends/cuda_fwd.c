/* SPDX-License-Identifier: MIT */
/*
 * The cuda backend's forward pass for the --cuda-kernels variants (cuda_fwd.h). One layer, with
 * every feature on (names as in cuda_variant.h), for a ternary BitNet model:
 *
 *   x += y (the previous product's output), rmsnorm, int8      add_norm_quant    (fused)
 *   QKV                                                        one product       (fused; gemv/mma)
 *   RoPE on q and k, k and v into the cache                    rope_store        (fused)
 *   attention                                                  attend / split    (split)
 *   sub-norm, int8                                             add_norm_quant    (fused)
 *   output projection into y                                   product           (gemv/mma)
 *   x += y, rmsnorm, int8                                      add_norm_quant    (fused)
 *   gate and up                                                one product       (fused; gemv/mma)
 *   relu(g)^2 u, sub-norm, int8                                gate_quant        (fused)
 *   down into y                                                product           (gemv/mma)
 *
 * Ten launches a layer instead of cuda.c's twenty-one; the last layer's y is added inside the
 * final norm. Without `fused` each fused kernel is the sequence of cuda.c's kernels it stands
 * for, in cuda.c's order, so the variant without it computes what cuda.c computes. Float
 * matrices (F16/F32 checkpoints) are never concatenated and take float inputs: their norms
 * write floats (add_rmsnorm) instead of int8.
 */
#include "cuda_fwd.h"

#include "common/log.h"
#include "cuda_fast.h"
#include "cuda_graph.h"
#include "cuda_mem.h"
#include "cuda_norms.h"
#include "cuda_wcache.h"
#include "model/model.h"
#include "quant.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN 256
#define GRAPHS 32                /* graphs kept: buckets x table strides in use */
#define MMA_MIN_TOKENS 16        /* steps this long go to the tensor cores with `mma` */
#define GRAPH_MAX_TOKENS 512     /* decode batches beyond this are not captured */

struct fwd_linear {
	int ternary, p16;        /* p16: t2.codes in the P16 layout (`gemv`), else T2 rows */
	struct bn_cuda_t2 t2;
	struct bn_cuda_fmat f;
};

struct fwd_layer {
	const float *attn_norm, *attn_sub_norm, *ffn_norm, *ffn_sub_norm;
	/* qkv: q, k, v rows concatenated (fused), else the three apart; the same for gate_up,
	 * whose up rows start at row ld_ff (zero rows between) */
	struct fwd_linear qkv, q, k, v, gate_up, gate, up, down, o;
	int fused_qkv, fused_gu;
};

struct bn_cuda_fwd {
	const struct bn_model *model;
	struct cuda_wcache *wcache;  /* at open only: the float matrices' images */
	struct bn_cuda_kernels k;
	cudaStream_t stream;
	struct bn_cuda_buffers weights; /* cuda_mem.h */
	struct fwd_layer *layers;
	struct bn_cuda_fwd_head head;
	uint32_t q_dim, kv_dim, ld_x, ld_q, ld_qkv, ld_ff, ld_gu, ld_wide, k_pad_max, max_rows;
	float *kv_k, *kv_v;
	uint32_t kv_blocks, block_tokens;
	/* activations for n_cap tokens, zeroed when made (float pads stay zero) */
	void *act;
	uint32_t n_cap, splits_cap;
	uint64_t act_gen;
	float *xb, *qkv, *att, *y, *gu, *part;
	struct bn_cuda_q8 xq;
	uint16_t *xh;
	struct bn_cuda_splitk sk;
	struct bn_cuda_graphs *graphs;
};

static uint32_t round_up(uint32_t v, uint32_t m)
{
	return (v + m - 1) / m * m;
}

/* ------------------------------------------------------------------------------------------ */
/* Weights                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static int upload_vec(struct bn_cuda_fwd *f, const float *v, uint32_t n, const float **out)
{
	*out = NULL;
	size_t bytes = (size_t)n * sizeof(float);
	return v ? bn_cuda_buffers_upload(&f->weights, v, bytes, (void **)out) : 0;
}

/* Ternary matrices stacked: parts[i]'s rows at row at[i] (rows between them zero weights,
 * scale 0), n_out rows in all; packed to P16 with `gemv`. */
static int upload_t2(struct bn_cuda_fwd *f, const struct bn_linear *const *parts, const uint32_t *at,
		     uint32_t n_parts, uint32_t n_out, struct fwd_linear *d)
{
	uint32_t rb = parts[0]->t2.row_bytes;
	size_t code_bytes = (size_t)n_out * rb;
	uint8_t *codes = malloc(code_bytes), *packed = NULL;
	float *scale = calloc(n_out, sizeof(float));
	int rc = codes && scale ? 0 : -ENOMEM;
	if (rc == 0) {
		memset(codes, 0x55, code_bytes); /* code 1: weight 0 */
		for (uint32_t i = 0; i < n_parts; i++) {
			memcpy(codes + (size_t)at[i] * rb, parts[i]->t2.codes, (size_t)parts[i]->n_out * rb);
			memcpy(scale + at[i], parts[i]->t2.scale, parts[i]->n_out * sizeof(float));
		}
	}
	const uint8_t *src = codes;
	if (rc == 0 && (f->k.flags & BN_CUDA_K_GEMV)) {
		code_bytes = bn_cuda_p16_bytes(n_out, rb);
		if (!(packed = malloc(code_bytes)))
			rc = -ENOMEM;
		else
			bn_cuda_p16_pack(codes, n_out, rb, packed);
		src = packed;
	}
	*d = (struct fwd_linear){ .ternary = 1, .p16 = packed != NULL,
				  .t2 = { .n_in = parts[0]->n_in, .n_out = n_out, .row_bytes = rb } };
	rc = rc ? rc : bn_cuda_buffers_upload(&f->weights, src, code_bytes, (void **)&d->t2.codes);
	size_t scale_bytes = (size_t)n_out * sizeof(float);
	rc = rc ? rc : bn_cuda_buffers_upload(&f->weights, scale, scale_bytes, (void **)&d->t2.scale);
	free(codes);
	free(packed);
	free(scale);
	f->max_rows = n_out > f->max_rows ? n_out : f->max_rows;
	return rc;
}

/* A float matrix as cuda.c keeps one (cuda_wcache_layout), through the weights cache as
 * cuda.c uploads one: copied up from the cache on a hit, and its image kept for a cache being
 * written, which needs every float matrix's. */
static int upload_float(struct bn_cuda_fwd *f, const struct bn_linear *w, struct fwd_linear *d)
{
	size_t bytes;
	void *dev;
	*d = (struct fwd_linear){ 0 };
	cuda_wcache_layout(w, &d->f, &bytes);
	int rc = bn_cuda_buffers_alloc(&f->weights, bytes, &dev);
	d->f.data = dev;
	return rc ? rc : cuda_wcache_upload(f->wcache, w, &d->f, dev, bytes);
}

static int upload_one(struct bn_cuda_fwd *f, const struct bn_linear *w, struct fwd_linear *d)
{
	uint32_t zero = 0;
	return w->kind == BN_LINEAR_T2 ? upload_t2(f, &w, &zero, 1, w->n_out, d) : upload_float(f, w, d);
}

static int upload_layer(struct bn_cuda_fwd *f, const struct bn_layer *L, struct fwd_layer *d)
{
	const struct bn_model_config *c = &f->model->cfg;
	int fused = (f->k.flags & BN_CUDA_K_FUSED) != 0;
	int rc = upload_vec(f, L->attn_norm, c->n_embd, &d->attn_norm);
	rc = rc ? rc : upload_vec(f, L->attn_sub_norm, f->q_dim, &d->attn_sub_norm);
	rc = rc ? rc : upload_vec(f, L->ffn_norm, c->n_embd, &d->ffn_norm);
	rc = rc ? rc : upload_vec(f, L->ffn_sub_norm, c->n_ff, &d->ffn_sub_norm);
	d->fused_qkv = fused && L->wq.kind == BN_LINEAR_T2 && L->wk.kind == BN_LINEAR_T2 &&
		       L->wv.kind == BN_LINEAR_T2;
	d->fused_gu = fused && L->w_gate.kind == BN_LINEAR_T2 && L->w_up.kind == BN_LINEAR_T2;
	if (rc == 0 && d->fused_qkv) {
		const struct bn_linear *p[3] = { &L->wq, &L->wk, &L->wv };
		uint32_t at[3] = { 0, f->q_dim, f->q_dim + f->kv_dim };
		rc = upload_t2(f, p, at, 3, f->q_dim + 2 * f->kv_dim, &d->qkv);
	} else if (rc == 0) {
		rc = upload_one(f, &L->wq, &d->q);
		rc = rc ? rc : upload_one(f, &L->wk, &d->k);
		rc = rc ? rc : upload_one(f, &L->wv, &d->v);
	}
	if (rc == 0 && d->fused_gu) {
		const struct bn_linear *p[2] = { &L->w_gate, &L->w_up };
		uint32_t at[2] = { 0, f->ld_ff };
		rc = upload_t2(f, p, at, 2, f->ld_ff + c->n_ff, &d->gate_up);
	} else if (rc == 0) {
		rc = upload_one(f, &L->w_gate, &d->gate);
		rc = rc ? rc : upload_one(f, &L->w_up, &d->up);
	}
	rc = rc ? rc : upload_one(f, &L->wo, &d->o);
	return rc ? rc : upload_one(f, &L->w_down, &d->down);
}

int bn_cuda_fwd_open(struct bn_cuda_fwd **out, const struct bn_model *m,
		     const struct bn_cuda_kernels *k, const struct bn_cuda_fwd_head *head,
		     struct cuda_wcache *wcache, uint32_t ld_x, cudaStream_t stream)
{
	const struct bn_model_config *c = &m->cfg;
	struct bn_cuda_fwd *f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	*f = (struct bn_cuda_fwd){ .model = m, .wcache = wcache, .k = *k, .stream = stream,
				   .head = *head, .ld_x = ld_x };
	f->q_dim = c->n_head * c->head_dim;
	f->kv_dim = c->n_head_kv * c->head_dim;
	f->ld_q = round_up(f->q_dim, 64);
	f->ld_qkv = round_up(f->q_dim + 2 * f->kv_dim, 64);
	f->ld_ff = round_up(c->n_ff, 64);
	f->ld_gu = 2 * f->ld_ff;
	f->ld_wide = ld_x > f->ld_q ? ld_x : f->ld_q;
	f->ld_wide = f->ld_wide > f->ld_ff ? f->ld_wide : f->ld_ff;
	f->k_pad_max = round_up(f->ld_wide, BN_T2_CHUNK);
	f->layers = calloc(c->n_layer, sizeof(*f->layers));
	f->graphs = bn_cuda_graphs_new(GRAPHS);
	int rc = f->layers && f->graphs ? 0 : -ENOMEM;
	for (uint32_t li = 0; li < c->n_layer && rc == 0; li++)
		rc = upload_layer(f, &m->layers[li], &f->layers[li]);
	if (head->ternary)
		f->max_rows = head->t2.n_out > f->max_rows ? head->t2.n_out : f->max_rows;
	f->wcache = NULL;
	if (rc) {
		bn_cuda_fwd_close(f);
		return rc;
	}
	char name[BN_CUDA_KERNELS_NAME_MAX];
	bn_cuda_kernels_name(k, name, sizeof(name));
	bn_log_info("msg=\"cuda kernels\" variant=\"%s\" layer_weights_mib=%.1f",
		    name, (double)f->weights.bytes / (1 << 20));
	*out = f;
	return 0;
}

uint64_t bn_cuda_fwd_weight_bytes(const struct bn_cuda_fwd *f)
{
	return f->weights.bytes;
}

void bn_cuda_fwd_close(struct bn_cuda_fwd *f)
{
	if (!f)
		return;
	uint64_t captured, launched;
	bn_cuda_graphs_counts(f->graphs, &captured, &launched);
	if (launched)
		bn_log_info("msg=\"cuda graphs\" captured=%llu launched=%llu",
			    (unsigned long long)captured, (unsigned long long)launched);
	bn_cuda_graphs_free(f->graphs);
	bn_cuda_buffers_free(&f->weights);
	cudaFree(f->act);
	free(f->layers);
	free(f);
}

void bn_cuda_fwd_kv(struct bn_cuda_fwd *f, float *K, float *V, uint32_t n_blocks,
		    uint32_t block_tokens)
{
	f->kv_k = K;
	f->kv_v = V;
	f->kv_blocks = n_blocks;
	f->block_tokens = block_tokens;
	bn_cuda_graphs_clear(f->graphs);
}

/* ------------------------------------------------------------------------------------------ */
/* Activations                                                                                 */
/* ------------------------------------------------------------------------------------------ */

struct carver {
	char *base;
	size_t at;
};

static void *carve(struct carver *c, size_t bytes)
{
	void *p = c->base ? c->base + c->at : NULL;
	c->at += (bytes + ALIGN - 1) / ALIGN * ALIGN;
	return p;
}

static void carve_activations(struct bn_cuda_fwd *f, struct carver *c, uint32_t n, uint32_t splits)
{
	const struct bn_model_config *m = &f->model->cfg;
	uint32_t n64 = round_up(n, 64);
	f->xb = carve(c, (size_t)n64 * f->ld_wide * 4);
	f->qkv = carve(c, (size_t)n * f->ld_qkv * 4);
	f->att = carve(c, (size_t)n * f->ld_q * 4);
	f->y = carve(c, (size_t)n * f->ld_x * 4);
	f->gu = carve(c, (size_t)n * f->ld_gu * 4);
	f->xq.q = carve(c, (size_t)n * f->k_pad_max);
	f->xq.inv_scale = carve(c, (size_t)n * 4);
	f->xq.sum = carve(c, (size_t)n * 4);
	f->xh = carve(c, (size_t)n64 * f->ld_wide * 2);
	f->part = splits ? carve(c, bn_cuda_attend_split_bytes(n, m->n_head, m->head_dim, splits)) : NULL;
	int split_k = (f->k.flags & (BN_CUDA_K_GEMV | BN_CUDA_K_MMA)) != 0;
	void *sk = split_k ? carve(c, bn_cuda_splitk_bytes(f->max_rows)) : NULL;
	if (sk)
		bn_cuda_splitk_init(&f->sk, sk, f->max_rows);
	else
		f->sk = (struct bn_cuda_splitk){ 0 };
}

/* Room for n tokens attending over up to `splits` splits; a new block (zeroed: pads and
 * split-k sums start at zero) drops the graphs, which name the old one. */
static int reserve(struct bn_cuda_fwd *f, uint32_t n, uint32_t splits)
{
	if (n <= f->n_cap && splits <= f->splits_cap)
		return 0;
	n = round_up(n > f->n_cap ? n : f->n_cap, 64);
	splits = splits > f->splits_cap ? splits : f->splits_cap;
	bn_cuda_graphs_clear(f->graphs);
	cudaFree(f->act);
	f->act = NULL;
	f->n_cap = f->splits_cap = 0;
	f->act_gen++;
	struct carver c = { 0 };
	carve_activations(f, &c, n, splits);
	cudaError_t e = cudaMalloc(&f->act, c.at);
	if (e != cudaSuccess) {
		bn_log_error("msg=\"out of device memory for activations\" need_mib=%zu", c.at >> 20);
		return -ENOMEM;
	}
	if ((e = cudaMemset(f->act, 0, c.at)) != cudaSuccess)
		return bn_cuda_failed("cudaMemset(activations)", e);
	c = (struct carver){ .base = f->act };
	carve_activations(f, &c, n, splits);
	f->n_cap = n;
	f->splits_cap = splits;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Products and norms                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* The int8 rows in f->xq are for inputs of n_in. */
static void set_k(struct bn_cuda_fwd *f, uint32_t n_in)
{
	f->xq.k = n_in;
	f->xq.k_pad = round_up(n_in, BN_T2_CHUNK);
}

/* y = W x for n tokens, the ternary kernel picked by the variant, the layout and n: the
 * tensor cores from MMA_MIN_TOKENS with `mma`, below that the P16 GEMV for P16 matrices, else
 * cuda.c's choice (bn_cuda_t2_gemm). */
static int product(struct bn_cuda_fwd *f, const struct fwd_linear *w, const float *x, uint32_t ldx,
		   uint32_t n, float *y, uint32_t ldy, int quantized)
{
	cudaStream_t st = f->stream;
	if (!w->ternary)
		return bn_cuda_f_gemm(&w->f, x, ldx, n, y, ldy, f->xh, st);
	if (!quantized) {
		set_k(f, w->t2.n_in);
		int rc = bn_cuda_quantize(x, ldx, n, &f->xq, st);
		if (rc)
			return rc;
	}
	if ((f->k.flags & BN_CUDA_K_MMA) && n >= MMA_MIN_TOKENS)
		return bn_cuda_t2_mma(&w->t2, w->p16, &f->xq, n, y, ldy, 0, &f->sk, st);
	if (w->p16)
		return bn_cuda_t2_gemv16(&w->t2, &f->xq, n, y, ldy, 0, &f->sk, st);
	return bn_cuda_t2_gemm(&w->t2, &f->xq, n, y, ldy, st);
}

/* x += pending (when not NULL), then rmsnorm by w into the next product's input: its int8 rows
 * when `quant` (fused) or xb. Without `fused`: cuda.c's add, rmsnorm (and the product's own
 * quantization). */
static int norm_into(struct bn_cuda_fwd *f, float *x, const float *pending, const float *w,
		     uint32_t n, int quant)
{
	const struct bn_model_config *c = &f->model->cfg;
	if (f->k.flags & BN_CUDA_K_FUSED) {
		if (quant) {
			set_k(f, c->n_embd);
			return bn_cuda_add_norm_quant(x, f->ld_x, pending, f->ld_x, w, c->n_embd, n,
						      c->rms_eps, &f->xq, f->stream);
		}
		return bn_cuda_add_rmsnorm(f->xb, f->ld_wide, x, f->ld_x, pending, f->ld_x, NULL, w,
					   c->n_embd, n, c->rms_eps, f->stream);
	}
	int rc = pending ? bn_cuda_add(x, f->ld_x, pending, f->ld_x, c->n_embd, n, f->stream) : 0;
	return rc ? rc : bn_cuda_rmsnorm(f->xb, f->ld_wide, x, f->ld_x, NULL, w, c->n_embd, n,
					 c->rms_eps, f->stream);
}

/* ------------------------------------------------------------------------------------------ */
/* A layer                                                                                     */
/* ------------------------------------------------------------------------------------------ */

struct run {
	struct bn_cuda_fwd *f;
	const struct bn_cuda_fwd_in *in;
	const struct bn_cuda_fwd_step *s;
	float *logits;
};

static int attention(struct bn_cuda_fwd *f, uint32_t li, const struct run *r, uint32_t n)
{
	const struct bn_model_config *c = &f->model->cfg;
	const struct bn_cuda_fwd_in *in = r->in;
	size_t layer = (size_t)li * f->kv_blocks * f->block_tokens * f->kv_dim;
	struct bn_cuda_kv_layer kv = { .K = f->kv_k + layer, .V = f->kv_v + layer,
				       .kv_dim = f->kv_dim, .block_tokens = f->block_tokens };
	float *q = f->qkv, *k = f->qkv + f->q_dim, *v = f->qkv + f->q_dim + f->kv_dim;
	int rc;
	if (f->k.flags & BN_CUDA_K_FUSED) {
		rc = bn_cuda_rope_store(q, f->ld_qkv, k, v, f->ld_qkv, c->n_head, c->n_head_kv, c->head_dim,
					c->rope_dim, c->rope_neox, in->cs, &kv, in->slot, n, f->stream);
	} else {
		rc = bn_cuda_rope(q, f->ld_qkv, c->n_head, c->head_dim, c->rope_dim, c->rope_neox, in->cs, n,
				  f->stream);
		rc = rc ? rc : bn_cuda_rope(k, f->ld_qkv, c->n_head_kv, c->head_dim, c->rope_dim,
					    c->rope_neox, in->cs, n, f->stream);
		rc = rc ? rc : bn_cuda_kv_store(&kv, k, v, f->ld_qkv, in->slot, n, f->stream);
	}
	struct bn_cuda_attn a = {
		.q = q, .ldq = f->ld_qkv, .out = f->att, .ldo = f->ld_q, .len = in->len,
		.table_off = in->table_off, .tables = in->tables, .n_head = c->n_head,
		.n_head_kv = c->n_head_kv, .head_dim = c->head_dim,
		.scale = c->attn_scale,
	};
	if (rc || !(f->k.flags & BN_CUDA_K_SPLIT))
		return rc ? rc : bn_cuda_attend(&kv, &a, n, f->stream);
	uint32_t splits = (r->s->max_blocks * f->block_tokens + f->k.split - 1) / f->k.split;
	return bn_cuda_attend_split(&kv, &a, n, f->k.split, splits, f->part, f->stream);
}

static int attention_block(struct bn_cuda_fwd *f, uint32_t li, const struct run *r, uint32_t n,
			   const float **pending)
{
	const struct bn_model_config *c = &f->model->cfg;
	const struct fwd_layer *L = &f->layers[li];
	int fused = (f->k.flags & BN_CUDA_K_FUSED) != 0;
	int rc = norm_into(f, r->in->x, *pending, L->attn_norm, n, L->fused_qkv);
	*pending = NULL;
	if (rc == 0 && L->fused_qkv) {
		rc = product(f, &L->qkv, NULL, 0, n, f->qkv, f->ld_qkv, 1);
	} else if (rc == 0) {
		const struct fwd_linear *w[3] = { &L->q, &L->k, &L->v };
		uint32_t col[3] = { 0, f->q_dim, f->q_dim + f->kv_dim };
		for (int i = 0, quantized = 0; i < 3 && rc == 0; i++) { /* quantized once, as cuda.c */
			rc = product(f, w[i], f->xb, f->ld_wide, n, f->qkv + col[i], f->ld_qkv, quantized);
			quantized |= w[i]->ternary;
		}
	}
	rc = rc ? rc : attention(f, li, r, n);
	int quantized = 0;
	if (rc == 0 && L->attn_sub_norm && fused && L->o.ternary) {
		set_k(f, f->q_dim);
		rc = bn_cuda_add_norm_quant(f->att, f->ld_q, NULL, 0, L->attn_sub_norm, f->q_dim, n,
					    c->rms_eps, &f->xq, f->stream);
		quantized = 1;
	} else if (rc == 0 && L->attn_sub_norm) {
		rc = bn_cuda_rmsnorm(f->att, f->ld_q, f->att, f->ld_q, NULL, L->attn_sub_norm, f->q_dim, n,
				     c->rms_eps, f->stream);
	}
	rc = rc ? rc : product(f, &L->o, f->att, f->ld_q, n, f->y, f->ld_x, quantized);
	*pending = f->y;
	return rc;
}

static int ffn_block(struct bn_cuda_fwd *f, uint32_t li, const struct run *r, uint32_t n,
		     const float **pending)
{
	const struct bn_model_config *c = &f->model->cfg;
	const struct fwd_layer *L = &f->layers[li];
	int act = cuda_norms_act(c->act), fused = (f->k.flags & BN_CUDA_K_FUSED) != 0;
	float *g = f->gu, *u = f->gu + f->ld_ff;
	int rc = norm_into(f, r->in->x, *pending, L->ffn_norm, n, L->fused_gu);
	*pending = NULL;
	if (rc == 0 && L->fused_gu) {
		rc = product(f, &L->gate_up, NULL, 0, n, g, f->ld_gu, 1);
	} else if (rc == 0) {
		rc = product(f, &L->gate, f->xb, f->ld_wide, n, g, f->ld_gu, 0);
		rc = rc ? rc : product(f, &L->up, f->xb, f->ld_wide, n, u, f->ld_gu, L->gate.ternary);
	}
	int quantized = 0;
	if (rc == 0 && fused && L->down.ternary) {
		set_k(f, c->n_ff);
		rc = bn_cuda_gate_quant(g, u, f->ld_gu, c->n_ff, n, act, L->ffn_sub_norm, c->rms_eps,
					&f->xq, f->stream);
		quantized = 1;
	} else if (rc == 0) {
		rc = bn_cuda_gate(g, u, f->ld_gu, c->n_ff, n, act, L->ffn_sub_norm, c->rms_eps,
				  f->stream);
	}
	rc = rc ? rc : product(f, &L->down, g, f->ld_gu, n, f->y, f->ld_x, quantized);
	*pending = f->y;
	return rc;
}

/* Every layer, the final norm of the rows that want logits, the LM head. */
static int forward(void *ctx)
{
	const struct run *r = ctx;
	struct bn_cuda_fwd *f = r->f;
	const struct bn_model_config *c = &f->model->cfg;
	uint32_t n = r->s->n_tok;
	const float *pending = NULL;
	int rc = 0;
	for (uint32_t li = 0; li < c->n_layer && rc == 0; li++) {
		rc = attention_block(f, li, r, n, &pending);
		rc = rc ? rc : ffn_block(f, li, r, n, &pending);
	}
	int fused = (f->k.flags & BN_CUDA_K_FUSED) != 0;
	if (rc == 0 && pending && (r->s->settle || (!fused && r->s->n_out))) {
		/* x += the last product: every token's (add then norm: the fused kernel's bits) */
		rc = bn_cuda_add(r->in->x, f->ld_x, pending, f->ld_x, c->n_embd, n, f->stream);
		pending = NULL;
	}
	if (rc || r->s->n_out == 0)
		return rc ? bn_cuda_failed("layer kernels", rc) : 0;
	if (fused)
		rc = bn_cuda_add_rmsnorm(f->xb, f->ld_wide, r->in->x, f->ld_x, pending, f->ld_x,
					 r->in->out_rows, f->head.norm, c->n_embd, r->s->n_out,
					 c->rms_eps, f->stream);
	else
		rc = bn_cuda_rmsnorm(f->xb, f->ld_wide, r->in->x, f->ld_x, r->in->out_rows,
				     f->head.norm, c->n_embd, r->s->n_out, c->rms_eps, f->stream);
	/* cuda.c's LM head: T2 rows when ternary */
	struct fwd_linear head = { .ternary = f->head.ternary, .t2 = f->head.t2, .f = f->head.f };
	rc = rc ? rc : product(f, &head, f->xb, f->ld_wide, r->s->n_out, r->logits, c->n_vocab, 0);
	return rc ? bn_cuda_failed("output kernels", rc) : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Steps, and graphs of decode steps                                                           */
/* ------------------------------------------------------------------------------------------ */

/* Batch sizes with a graph: every size up to 4, then steps of about a quarter. */
static uint32_t bucket_of(uint32_t n)
{
	static const uint32_t sizes[] = { 1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80,
					  96, 128, 160, 192, 256, 320, 384, 448, 512 };
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		if (n <= sizes[i])
			return sizes[i];
	return 0;
}

/* Only plain decode steps: one token a row, that row's token sampled. A prefill chunk, a
 * verify row or a scored row has several tokens or logits rows a batch row, which the bucket
 * padding does not describe; such steps run without a graph (correct first: a graph for them
 * would be a speed-up to measure, not a need). */
int bn_cuda_fwd_graph_shape(const struct bn_cuda_fwd *f, const struct bn_batch *b,
			    uint32_t *n_tok, uint32_t *max_blocks)
{
	if (!(f->k.flags & BN_CUDA_K_GRAPH) || *n_tok != b->n_rows || *n_tok > GRAPH_MAX_TOKENS)
		return 0;
	for (uint32_t r = 0; r < b->n_rows; r++)
		if (b->lens[r] != 1 || !b->sample[r] || (b->score && b->score[r]) ||
		    bn_batch_verifies(b, r))
			return 0;
	uint32_t mb = 1;
	while (mb < *max_blocks)
		mb *= 2;
	*n_tok = bucket_of(*n_tok);
	*max_blocks = mb;
	return 1;
}

void bn_cuda_fwd_pad(const struct bn_cuda_fwd_in *host, uint32_t n_real, uint32_t bucket)
{
	for (uint32_t t = n_real; t < bucket; t++) {
		host->slot[t] = UINT32_MAX; /* stores nothing */
		host->len[t] = 1;           /* position 0 of row 0's first block: real, and stored */
		host->table_off[t] = 0;
		host->out_rows[t] = t;
	}
}

/* A graph's key: its shape and every buffer its launches name. */
struct graph_key {
	uint32_t n_tok, n_out, max_blocks, pad;
	struct bn_cuda_fwd_in in;
	float *logits;
	uint64_t act_gen;
};

int bn_cuda_fwd_run(struct bn_cuda_fwd *f, const struct bn_cuda_fwd_in *dev,
		    const struct bn_cuda_fwd_step *s, float *logits)
{
	uint32_t splits = 0;
	if (f->k.flags & BN_CUDA_K_SPLIT)
		splits = (s->max_blocks * f->block_tokens + f->k.split - 1) / f->k.split;
	int rc = reserve(f, s->n_tok, splits);
	if (rc)
		return rc;
	struct run r = { .f = f, .in = dev, .s = s, .logits = logits };
	if (!s->graph)
		return forward(&r);
	struct graph_key key;
	memset(&key, 0, sizeof(key)); /* padding bytes are compared too */
	key.n_tok = s->n_tok;
	key.n_out = s->n_out;
	key.max_blocks = s->max_blocks;
	key.in = *dev;
	key.logits = logits;
	key.act_gen = f->act_gen;
	return bn_cuda_graphs_launch(f->graphs, &key, sizeof(key), f->stream, forward, &r);
}
