/* SPDX-License-Identifier: MIT */
/*
 * The qwen3 and gemma3 graphs' norms on the device (cuda_norms.h).
 */
#include "cuda_norms.h"
#include "cuda_kernels.h"

static int upload(struct bn_cuda_buffers *b, const float *v, uint32_t n, float **out)
{
	*out = NULL;
	return v ? bn_cuda_buffers_upload(b, v, (size_t)n * sizeof(float), (void **)out) : 0;
}

int cuda_norms_upload(struct bn_cuda_buffers *b, const struct bn_model *m,
		      struct cuda_norms_layer *out)
{
	const struct bn_model_config *c = &m->cfg;
	uint32_t q_dim = c->n_head * c->head_dim;
	/* each input norm's width: the projection's input (o: the attention's, down: the FFN's) */
	uint32_t in_dim[7] = { c->n_embd, c->n_embd, c->n_embd, q_dim, c->n_embd, c->n_embd, c->n_ff };
	int rc = 0;
	for (uint32_t li = 0; li < c->n_layer && rc == 0; li++) {
		const struct bn_layer *L = &m->layers[li];
		struct cuda_norms_layer *d = &out[li];
		rc = upload(b, L->attn_q_norm, c->head_dim, &d->q_norm);
		rc = rc ? rc : upload(b, L->attn_k_norm, c->head_dim, &d->k_norm);
		rc = rc ? rc : upload(b, L->post_attn_norm, c->n_embd, &d->post_attn);
		rc = rc ? rc : upload(b, L->post_ffw_norm, c->n_embd, &d->post_ffw);
		for (int k = 0; k < 7 && rc == 0; k++)
			rc = upload(b, L->norm_in[k], in_dim[k], &d->in[k]);
	}
	return rc;
}

int cuda_norms_heads(float *v, uint32_t ld, uint32_t n_heads, uint32_t head_dim, const float *w,
		     uint32_t n_tok, float eps, cudaStream_t stream)
{
	if (!w)
		return 0;
	if (ld == n_heads * head_dim) /* the heads of every token back to back: one launch */
		return bn_cuda_rmsnorm(v, head_dim, v, head_dim, NULL, w, head_dim, n_tok * n_heads,
				       eps, stream);
	int rc = 0;
	for (uint32_t h = 0; h < n_heads && rc == 0; h++)
		rc = bn_cuda_rmsnorm(v + (size_t)h * head_dim, ld, v + (size_t)h * head_dim, ld, NULL,
				     w, head_dim, n_tok, eps, stream);
	return rc;
}

int cuda_norms_apply(const float *w, float *v, uint32_t ld, uint32_t n, uint32_t n_tok,
		     float eps, cudaStream_t stream)
{
	return w ? bn_cuda_rmsnorm(v, ld, v, ld, NULL, w, n, n_tok, eps, stream) : 0;
}

int cuda_norms_act(enum bn_activation a)
{
	switch (a) {
	case BN_ACT_RELU2: return BN_CUDA_ACT_RELU2;
	case BN_ACT_GELU: return BN_CUDA_ACT_GELU;
	case BN_ACT_SILU: break;
	}
	return BN_CUDA_ACT_SILU;
}

const char *cuda_norms_base_only(const struct bn_model *m)
{
	const struct bn_model_config *c = &m->cfg;
	if (m->n_grouped)
		return "ternary matrices with one scale per group (the variants' layouts have one a row)";
	if (c->proj_norms)
		return "per-projection input norms (the fused kernels quantize one norm for q, k and v)";
	if (c->qk_norm)
		return "per-head q/k norms (the fused kernel stores k before they could run)";
	if (c->post_norms)
		return "post-attention and post-FFN norms (the fused kernels add the output in)";
	if (c->n_swa)
		return "sliding-window layers (the split attention has no window)";
	return NULL;
}
