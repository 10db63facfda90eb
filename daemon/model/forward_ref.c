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
};

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

/* Rotates the pairs of one head vector by position-dependent angles. */
static void rope(const struct bn_model_config *c, float *v, uint32_t pos)
{
	uint32_t half = c->rope_dim / 2;
	for (uint32_t i = 0; i < half; i++) {
		float freq = bn_rope_freq(c, i);
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
	float scale = 1.0f / sqrtf((float)c->head_dim);
	for (uint32_t h = 0; h < c->n_head; h++) {
		const float *q = r->q + (size_t)h * c->head_dim;
		uint32_t kv_off = (h / group) * c->head_dim;
		float max = -INFINITY;
		for (uint32_t t = 0; t <= pos; t++) {
			const float *k = keys + (size_t)t * kv_dim + kv_off;
			float dot = 0.0f;
			for (uint32_t i = 0; i < c->head_dim; i++)
				dot += q[i] * k[i];
			r->scores[t] = dot * scale;
			max = fmaxf(max, r->scores[t]);
		}
		float sum = 0.0f;
		for (uint32_t t = 0; t <= pos; t++) {
			r->scores[t] = expf(r->scores[t] - max);
			sum += r->scores[t];
		}
		float *out = r->att_out + (size_t)h * c->head_dim;
		memset(out, 0, c->head_dim * sizeof(float));
		for (uint32_t t = 0; t <= pos; t++) {
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
	return g / (1.0f + expf(-g));
}

static void layer_forward(struct bn_ref *r, uint32_t li, uint32_t pos)
{
	const struct bn_model_config *c = &r->m->cfg;
	const struct bn_layer *L = &r->m->layers[li];
	uint32_t q_dim = c->n_head * c->head_dim, kv_dim = c->n_head_kv * c->head_dim;
	float *k = r->key_cache + ((size_t)li * r->max_len + pos) * kv_dim;
	float *v = r->value_cache + ((size_t)li * r->max_len + pos) * kv_dim;

	/* attention block */
	bn_rmsnorm(r->xb, r->x, L->attn_norm, c->n_embd, c->rms_eps);
	linear(r, &L->wq, r->xb, r->q);
	linear(r, &L->wk, r->xb, k);
	linear(r, &L->wv, r->xb, v);
	for (uint32_t h = 0; h < c->n_head; h++)
		rope(c, r->q + (size_t)h * c->head_dim, pos);
	for (uint32_t h = 0; h < c->n_head_kv; h++)
		rope(c, k + (size_t)h * c->head_dim, pos);
	attention(r, li, pos);
	if (L->attn_sub_norm)
		bn_rmsnorm(r->att_out, r->att_out, L->attn_sub_norm, q_dim, c->rms_eps);
	linear(r, &L->wo, r->att_out, r->xb);
	for (uint32_t i = 0; i < c->n_embd; i++)
		r->x[i] += r->xb[i];

	/* feed-forward block */
	bn_rmsnorm(r->xb, r->x, L->ffn_norm, c->n_embd, c->rms_eps);
	linear(r, &L->w_gate, r->xb, r->gate);
	linear(r, &L->w_up, r->xb, r->up);
	for (uint32_t i = 0; i < c->n_ff; i++)
		r->gate[i] = activation(c->act, r->gate[i]) * r->up[i];
	if (L->ffn_sub_norm)
		bn_rmsnorm(r->gate, r->gate, L->ffn_sub_norm, c->n_ff, c->rms_eps);
	linear(r, &L->w_down, r->gate, r->xb);
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
	if (!r->key_cache || !r->value_cache || !r->x || !r->xb || !r->q || !r->att_out ||
	    !r->gate || !r->up || !r->scores || !r->w_row || !r->codes || !r->xq) {
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
	free(r);
}
