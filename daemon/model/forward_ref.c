/* SPDX-License-Identifier: MIT */
/*
 * forward_ref.c — the reference forward pass, after llama2.c: one token of one sequence,
 * top to bottom like the paper, scalar. It reads the weights straight from the file's
 * tensors through the reference decoders, so it checks the loader's repacking too.
 */
#include "forward.h"
#include "quant.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct bn_ref {
	const struct bn_model *m;
	uint32_t max_len, len;
	float *key_cache;   /* [n_layer][max_len][kv_dim] */
	float *value_cache; /* [n_layer][max_len][kv_dim] */
	float *x;           /* [n_embd] residual stream */
	float *xb;          /* [max(n_embd, q_dim)] normed input of a layer */
	float *q;           /* [q_dim] */
	float *att_out;     /* [q_dim] */
	float *gate, *up;   /* [n_ff] */
	float *scores;      /* [max_len] */
	float *w_row;       /* [max(n_in)] one decoded weight row */
	uint8_t *codes;     /* [max(n_in)] one ternary row */
	int8_t *xq;         /* [max(n_in)] quantized input */
	float *block_scale; /* [max(n_in) / 128] a grouped row's block scales */
	float *xn;          /* [max(n_in)] a projection's normed input (proj_norms) */
};

/* BitLinear with one scale per group of G weights (kernels.h: t2g_gemm): each group's exact
 * integer dot, times the scale of its blocks as the file gives them (read per 128-weight
 * block: the blocks of a group agree, or the loader would not have grouped them so), chained
 * by fused multiply-adds in group order. r->xq holds the quantized input. */
static void linear_grouped(struct bn_ref *r, const struct bn_linear *l, float inv_s, float *y)
{
	const struct bn_gguf_tensor *t = l->src;
	uint32_t per = l->t2.group / 128;
	for (uint32_t o = 0; o < l->n_out; o++) {
		bn_ternary_row_blocks(t->type, t->data, t->size, o, l->n_in, r->codes, r->block_scale);
		float s = 0.0f;
		for (uint32_t g = 0; g < l->n_in / l->t2.group; g++) {
			int32_t acc = 0;
			float scale = 0.0f;
			for (uint32_t k = g * l->t2.group; k < (g + 1) * l->t2.group; k++)
				acc += ((int32_t)r->codes[k] - 1) * r->xq[k];
			for (uint32_t b = g * per; b < (g + 1) * per; b++)
				scale = scale != 0.0f ? scale : r->block_scale[b];
			s = fmaf((float)acc, scale, s);
		}
		y[o] = s * inv_s;
	}
}

/* BitLinear: x quantized to int8 per token, exact integer dot with the ternary codes. */
static void linear_ternary(struct bn_ref *r, const struct bn_linear *l, const float *x, float *y)
{
	float amax = 0.0f;
	for (uint32_t k = 0; k < l->n_in; k++)
		amax = fmaxf(amax, fabsf(x[k]));
	float s = amax > 0.0f ? 127.0f / amax : 0.0f;
	for (uint32_t k = 0; k < l->n_in; k++) {
		float v = nearbyintf(x[k] * s);
		r->xq[k] = (int8_t)(isnan(v) ? 0.0f : v > 127.0f ? 127.0f : v < -128.0f ? -128.0f : v);
	}
	float inv_s = amax / 127.0f;
	const struct bn_gguf_tensor *t = l->src;
	if (l->t2.gscale) {
		linear_grouped(r, l, inv_s, y);
		return;
	}
	for (uint32_t o = 0; o < l->n_out; o++) {
		float w_scale;
		if (bn_type_is_ternary(t->type))
			bn_ternary_row(t->type, t->data, t->size, o, l->n_in, r->codes, &w_scale);
		else /* a float file's ternary rows (model.h), read from the file too */
			bn_ternary_from_float_row(t->type, t->data, t->size, o, l->n_in, r->codes,
						  &w_scale);
		int32_t acc = 0;
		for (uint32_t k = 0; k < l->n_in; k++)
			acc += ((int32_t)r->codes[k] - 1) * r->xq[k];
		y[o] = ((float)acc * w_scale) * inv_s;
	}
}

static void linear_float(struct bn_ref *r, const struct bn_linear *l, const float *x, float *y)
{
	const struct bn_gguf_tensor *t = l->src;
	for (uint32_t o = 0; o < l->n_out; o++) {
		bn_dequant_row(t->type, t->data, t->size, o, l->n_in, r->w_row);
		float acc = 0.0f;
		for (uint32_t k = 0; k < l->n_in; k++)
			acc += r->w_row[k] * x[k];
		y[o] = acc;
	}
}

static void linear(struct bn_ref *r, const struct bn_linear *l, const float *x, float *y)
{
	if (l->kind == BN_LINEAR_T2)
		linear_ternary(r, l, x, y);
	else
		linear_float(r, l, x, y);
}

/* Rotates the pairs of one head vector by position-dependent angles (a local layer's: base
 * rope_base_swa, unscaled). */
static void rope(const struct bn_model_config *c, float *v, uint32_t pos, int swa)
{
	uint32_t half = c->rope_dim / 2;
	for (uint32_t i = 0; i < half; i++) {
		float freq = swa ? powf(c->rope_base_swa, -(float)(2 * i) / (float)c->rope_dim)
				 : bn_rope_freq(c, i);
		float angle = (float)pos * freq;
		float cs = cosf(angle), sn = sinf(angle);
		uint32_t a = c->rope_neox ? i : 2 * i;
		uint32_t b = c->rope_neox ? i + half : 2 * i + 1;
		float va = v[a], vb = v[b];
		v[a] = va * cs - vb * sn;
		v[b] = va * sn + vb * cs;
	}
}

static void attention(struct bn_ref *r, uint32_t layer, uint32_t pos)
{
	const struct bn_model_config *c = &r->m->cfg;
	uint32_t kv_dim = c->n_head_kv * c->head_dim, group = c->n_head / c->n_head_kv;
	const float *keys = r->key_cache + (size_t)layer * r->max_len * kv_dim;
	const float *values = r->value_cache + (size_t)layer * r->max_len * kv_dim;
	/* a local layer sees the last n_swa positions, this one included */
	uint32_t t0 = bn_layer_is_swa(c, layer) && pos >= c->n_swa ? pos + 1 - c->n_swa : 0;
	for (uint32_t h = 0; h < c->n_head; h++) {
		const float *q = r->q + (size_t)h * c->head_dim;
		uint32_t kv_off = (h / group) * c->head_dim;
		float max = -INFINITY;
		for (uint32_t t = t0; t <= pos; t++) {
			const float *k = keys + (size_t)t * kv_dim + kv_off;
			float dot = 0.0f;
			for (uint32_t i = 0; i < c->head_dim; i++)
				dot += q[i] * k[i];
			r->scores[t] = dot * c->attn_scale;
			max = fmaxf(max, r->scores[t]);
		}
		float sum = 0.0f;
		for (uint32_t t = t0; t <= pos; t++) {
			r->scores[t] = expf(r->scores[t] - max);
			sum += r->scores[t];
		}
		float *out = r->att_out + (size_t)h * c->head_dim;
		memset(out, 0, c->head_dim * sizeof(float));
		for (uint32_t t = t0; t <= pos; t++) {
			const float *v = values + (size_t)t * kv_dim + kv_off;
			float p = r->scores[t] / sum;
			for (uint32_t i = 0; i < c->head_dim; i++)
				out[i] += p * v[i];
		}
	}
}

static float activation(enum bn_activation act, float g)
{
	if (act == BN_ACT_RELU2)
		return g > 0.0f ? g * g : 0.0f;
	if (act == BN_ACT_GELU) /* the tanh approximation */
		return 0.5f * g * (1.0f + tanhf(0.7978845608f * (g + 0.044715f * g * g * g)));
	return g / (1.0f + expf(-g));
}

/* A projection's input: x, or x RMS-normed by the projection's own weight (proj_norms). */
static const float *proj_input(struct bn_ref *r, const float *norm, const float *x, uint32_t n)
{
	if (!norm)
		return x;
	bn_rmsnorm(r->xn, x, norm, n, r->m->cfg.rms_eps);
	return r->xn;
}

/* RMS norm of each head_dim slice (qk_norm). */
static void head_norms(const struct bn_model_config *c, float *v, uint32_t n_heads,
		       const float *w)
{
	for (uint32_t h = 0; w && h < n_heads; h++)
		bn_rmsnorm(v + (size_t)h * c->head_dim, v + (size_t)h * c->head_dim, w, c->head_dim,
			   c->rms_eps);
}

static void layer_forward(struct bn_ref *r, uint32_t li, uint32_t pos)
{
	const struct bn_model_config *c = &r->m->cfg;
	const struct bn_layer *L = &r->m->layers[li];
	uint32_t q_dim = c->n_head * c->head_dim, kv_dim = c->n_head_kv * c->head_dim;
	float *k = r->key_cache + ((size_t)li * r->max_len + pos) * kv_dim;
	float *v = r->value_cache + ((size_t)li * r->max_len + pos) * kv_dim;

	/* attention block */
	int swa = bn_layer_is_swa(c, li);
	bn_rmsnorm(r->xb, r->x, L->attn_norm, c->n_embd, c->rms_eps);
	linear(r, &L->wq, proj_input(r, L->norm_in[0], r->xb, c->n_embd), r->q);
	linear(r, &L->wk, proj_input(r, L->norm_in[1], r->xb, c->n_embd), k);
	linear(r, &L->wv, proj_input(r, L->norm_in[2], r->xb, c->n_embd), v);
	head_norms(c, r->q, c->n_head, L->attn_q_norm);
	head_norms(c, k, c->n_head_kv, L->attn_k_norm);
	for (uint32_t h = 0; h < c->n_head; h++)
		rope(c, r->q + (size_t)h * c->head_dim, pos, swa);
	for (uint32_t h = 0; h < c->n_head_kv; h++)
		rope(c, k + (size_t)h * c->head_dim, pos, swa);
	attention(r, li, pos);
	if (L->attn_sub_norm)
		bn_rmsnorm(r->att_out, r->att_out, L->attn_sub_norm, q_dim, c->rms_eps);
	linear(r, &L->wo, proj_input(r, L->norm_in[3], r->att_out, q_dim), r->xb);
	if (L->post_attn_norm)
		bn_rmsnorm(r->xb, r->xb, L->post_attn_norm, c->n_embd, c->rms_eps);
	for (uint32_t i = 0; i < c->n_embd; i++)
		r->x[i] += r->xb[i];

	/* feed-forward block */
	bn_rmsnorm(r->xb, r->x, L->ffn_norm, c->n_embd, c->rms_eps);
	linear(r, &L->w_gate, proj_input(r, L->norm_in[4], r->xb, c->n_embd), r->gate);
	linear(r, &L->w_up, proj_input(r, L->norm_in[5], r->xb, c->n_embd), r->up);
	for (uint32_t i = 0; i < c->n_ff; i++)
		r->gate[i] = activation(c->act, r->gate[i]) * r->up[i];
	if (L->ffn_sub_norm)
		bn_rmsnorm(r->gate, r->gate, L->ffn_sub_norm, c->n_ff, c->rms_eps);
	linear(r, &L->w_down, proj_input(r, L->norm_in[6], r->gate, c->n_ff), r->xb);
	if (L->post_ffw_norm)
		bn_rmsnorm(r->xb, r->xb, L->post_ffw_norm, c->n_embd, c->rms_eps);
	for (uint32_t i = 0; i < c->n_embd; i++)
		r->x[i] += r->xb[i];
}

int bn_ref_step_hidden(struct bn_ref *r, uint32_t token, float *hidden, float *logits)
{
	const struct bn_model_config *c = &r->m->cfg;
	if (token >= c->n_vocab || r->len >= r->max_len)
		return -EINVAL;
	uint32_t pos = r->len++;
	bn_model_embed(r->m, token, r->x);
	for (uint32_t i = 0; c->embd_scale != 1.0f && i < c->n_embd; i++)
		r->x[i] *= c->embd_scale;
	for (uint32_t li = 0; li < c->n_layer; li++)
		layer_forward(r, li, pos);
	bn_rmsnorm(r->xb, r->x, r->m->output_norm, c->n_embd, c->rms_eps);
	if (hidden)
		memcpy(hidden, r->xb, c->n_embd * sizeof(float));
	if (logits)
		linear(r, &r->m->output, r->xb, logits);
	return 0;
}

int bn_ref_step(struct bn_ref *r, uint32_t token, float *logits)
{
	return bn_ref_step_hidden(r, token, NULL, logits);
}

struct bn_ref *bn_ref_new(const struct bn_model *m, uint32_t max_len)
{
	const struct bn_model_config *c = &m->cfg;
	if (max_len == 0 || max_len > c->n_ctx)
		return NULL;
	struct bn_ref *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	uint32_t q_dim = c->n_head * c->head_dim, kv_dim = c->n_head_kv * c->head_dim;
	uint32_t widest = c->n_ff > q_dim ? c->n_ff : q_dim;
	widest = widest > c->n_embd ? widest : c->n_embd;
	size_t cache = (size_t)c->n_layer * max_len * kv_dim;
	r->m = m;
	r->max_len = max_len;
	r->key_cache = calloc(cache, sizeof(float));
	r->value_cache = calloc(cache, sizeof(float));
	r->x = calloc(c->n_embd, sizeof(float));
	r->xb = calloc(widest, sizeof(float));
	r->q = calloc(q_dim, sizeof(float));
	r->att_out = calloc(q_dim, sizeof(float));
	r->gate = calloc(c->n_ff, sizeof(float));
	r->up = calloc(c->n_ff, sizeof(float));
	r->scores = calloc(max_len, sizeof(float));
	r->w_row = calloc(widest, sizeof(float));
	r->codes = calloc(widest, 1);
	r->xq = calloc(widest, 1);
	r->block_scale = calloc(widest / 128 + 1, sizeof(float));
	r->xn = calloc(widest, sizeof(float));
	if (!r->key_cache || !r->value_cache || !r->x || !r->xb || !r->q || !r->att_out ||
	    !r->gate || !r->up || !r->scores || !r->w_row || !r->codes || !r->xq ||
	    !r->block_scale || !r->xn) {
		bn_ref_free(r);
		return NULL;
	}
	return r;
}

void bn_ref_free(struct bn_ref *r)
{
	if (!r)
		return;
	free(r->key_cache);
	free(r->value_cache);
	free(r->x);
	free(r->xb);
	free(r->q);
	free(r->att_out);
	free(r->gate);
	free(r->up);
	free(r->scores);
	free(r->w_row);
	free(r->codes);
	free(r->xq);
	free(r->block_scale);
	free(r->xn);
	free(r);
}
