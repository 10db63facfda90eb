/* SPDX-License-Identifier: MIT */
/*
 * The cuda backend: the graph of forward.c on one GPU (kernels/cuda), with sampling on the
 * device. One CUDA context, one stream, one copy of the weights, uploaded at open:
 *
 *  - ternary matrices in the T2-plane layout the CPU kernels use (same bytes, same scales);
 *  - F16 matrices as F16 (rows padded to a multiple of 16 weights and of 64 rows, zeros),
 *    through the half tensor cores; every other float type (F32, BF16, and the Q8_0/Q6_K
 *    embeddings serving as LM head, decoded exactly) as F32, through the CUDA cores;
 *  - norms as F32. The embedding table stays on the host: a step looks up its new tokens there
 *    (n_tok rows, the bytes a step uploads anyway), so it costs no device memory unless it is
 *    also the LM head.
 * Those device layouts come from the packed-weight cache when it holds them (cuda_wcache.h).
 *
 * A step uploads one contiguous block of inputs (embeddings, RoPE cos/sin computed by the
 * host exactly as the CPU does, KV slots, block tables, which tokens need logits, penalties,
 * sampling rows, scored targets and the allowed tokens of constrained rows), runs every layer,
 * the LM head of the logits rows (the rows that want a token, every position of verify rows
 * and scored rows: cuda_rows.h) and the sampler, and copies back only token ids and
 * log-probabilities; a constrained draw that cannot end before max_tokens is drawn again
 * (cuda_rows_redraw). Forks and rewinds of
 * sequences are cuda_seq.h's.
 *
 * With a --cuda-kernels variant other than base (cuda_variant.h), the layers and the LM head
 * are cuda_fwd.h's: its own weights and kernels, the same inputs, the same logits rows, into
 * the same logits; everything before (the inputs) and after (cuda_rows.h) is this file's.
 *
 * Every CUDA call is checked; a failed one ends the step with -EIO (the scheduler fails that
 * batch's requests) after one log line naming the call and the CUDA error.
 */
#include "backend.h"
#include "bitnet_shm.h"
#include "common/clock.h"
#include "common/log.h"
#include "cuda_fwd.h"
#include "cuda_hidden.h"
#include "cuda_kernels.h"
#include "cuda_kv.h"
#include "cuda_mem.h"
#include "cuda_norms.h"
#include "cuda_rows.h"
#include "cuda_seq.h"
#include "cuda_wcache.h"
#include "model/forward.h"
#include "model/model.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN 256                    /* device and staging sub-buffers */
#define KV_HEADROOM_MIN (1ull << 30) /* device memory kept free of KV for step scratch */
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
	float *cs_swa;                /* [n_tok][rope_dim] the local layers' (n_swa), else unused */
	uint32_t *slot;               /* [n_tok] KV row of each token within a layer */
	uint32_t *len;                /* [n_tok] positions each token attends over */
	uint32_t *table_off;          /* [n_tok] where its row's block table starts */
	uint32_t *tables;             /* [n_rows][max blocks] */
	uint32_t *out_rows;           /* [n_out] token index of each logits row (cuda_rows.h) */
	uint32_t *hidden_rows;        /* [n_hidden] token index of each hidden row (cuda_hidden.h) */
	struct bn_cuda_penalty *pen;  /* [n_pen] */
	struct bn_cuda_sample_row *rank; /* [n_rank] */
	struct bn_cuda_score_row *score; /* [n_score] */
	uint32_t *row_mask;           /* [n_out] a logits row's bitset in masks, or BN_CUDA_NO_MASK */
	uint64_t *masks;              /* [n_masks][mask words] the constrained rows' allowed tokens */
	size_t bytes;
};

struct step_shape {
	uint32_t n_tok, n_rows, max_blocks;
	uint32_t n_logits;            /* rows the LM head makes: out.n_out, or a graph's bucket */
	uint32_t n_hidden;            /* final hidden states embedding rows ask (batch.h) */
	struct cuda_rows_shape out;   /* the logits rows asked for (sampled, scored) */
};

struct cuda_backend {
	struct bn_model model;
	struct cuda_wcache wcache;    /* where the weights came from */
	cudaStream_t stream;
	struct bn_cuda_kernels kernels; /* --cuda-kernels; not base: fwd runs the layers */
	struct bn_cuda_fwd *fwd;      /* cuda_fwd.h, or NULL for base */
	struct bn_cuda_buffers weights; /* device buffers of the weights (cuda_mem.h) */
	struct dev_layer *layers;
	struct cuda_norms_layer *norms; /* [n_layer] qwen3's and gemma3's norms (base) */
	float *output_norm;
	struct dev_linear output;
	float *rope_freq, *rope_freq_swa;
	uint32_t max_seqs;
	uint32_t *seq_len;
	struct cuda_vmm vmm;          /* the driver's virtual memory calls, where it has them */
	/* the KV arena, [n_layer][n_slots][block_tokens][kv_dim] keys and values: block tables
	 * and store slots name its slots (cuda_kv.h) */
	struct cuda_kv kv;
	uint32_t q_dim, kv_dim, ld_x, ld_q, ld_kv, ld_ff, ld_wide;
	/* activations for n_cap tokens (zeroed at allocation: pads stay zero); the residual
	 * stream x is the step's uploaded embeddings, updated in place */
	void *act;
	uint32_t n_cap;
	float *x, *xb, *xn, *q, *k, *v, *att, *gate, *up; /* xn: a projection's own norm */
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
	void *res_dev, *res_host;     /* struct cuda_answers of res_rows rows */
	uint32_t res_rows;
	float *hidden_dev, *hidden_host; /* [hidden_cap][ld_x] hidden rows (pinned on the host) */
	uint32_t hidden_cap;
	struct cuda_rows rows;        /* host scratch for the penalty lists */
};

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                      */
/* ------------------------------------------------------------------------------------------ */

#define CUDA_TRY(call)                                            \
	do {                                                      \
		int err_ = (int)(call);                           \
		if (err_ != 0)                                    \
			return bn_cuda_failed(#call, err_);       \
	} while (0)

/* ------------------------------------------------------------------------------------------ */
/* Device and weights                                                                          */
/* ------------------------------------------------------------------------------------------ */

static uint32_t round_up(uint32_t v, uint32_t m)
{
	return (v + m - 1) / m * m;
}

static int upload_vec(struct cuda_backend *cb, const float *v, uint32_t n, float **out)
{
	*out = NULL;
	size_t bytes = (size_t)n * sizeof(float);
	return v ? bn_cuda_buffers_upload(&cb->weights, v, bytes, (void **)out) : 0;
}

static int upload_linear(struct cuda_backend *cb, const struct bn_linear *w, struct dev_linear *d)
{
	memset(d, 0, sizeof(*d));
	if (w->kind == BN_LINEAR_T2) {
		d->kind = DEV_T2;
		d->t2 = (struct bn_cuda_t2){ .n_in = w->n_in, .n_out = w->n_out,
					     .row_bytes = w->t2.row_bytes, .group = w->t2.group };
		size_t code_bytes = (size_t)w->n_out * w->t2.row_bytes;
		/* one scale a row, or a row of them per group (gscale: bn_cuda_t2g_gemv) */
		uint32_t per_row = w->t2.group ? w->n_in / w->t2.group : 1;
		size_t scale_bytes = (size_t)w->n_out * per_row * sizeof(float);
		int rc = bn_cuda_buffers_upload(&cb->weights, w->t2.codes, code_bytes, (void **)&d->t2.codes);
		const float **scale = w->t2.group ? &d->t2.gscale : &d->t2.scale;
		return rc ? rc : bn_cuda_buffers_upload(&cb->weights,
							w->t2.group ? w->t2.gscale : w->t2.scale,
							scale_bytes, (void **)scale);
	}
	d->kind = DEV_FLOAT;
	size_t bytes;
	cuda_wcache_layout(w, &d->f, &bytes);
	void *dev;
	int rc = bn_cuda_buffers_alloc(&cb->weights, bytes, &dev);
	if (rc)
		return rc;
	d->f.data = dev;
	return cuda_wcache_upload(&cb->wcache, w, &d->f, dev, bytes);
}

static int upload_layer(struct cuda_backend *cb, const struct bn_layer *L, struct dev_layer *d)
{
	const struct bn_model_config *c = &cb->model.cfg;
	int rc = upload_vec(cb, L->attn_norm, c->n_embd, &d->attn_norm);
	rc = rc ? rc : upload_vec(cb, L->attn_sub_norm, cb->q_dim, &d->attn_sub_norm);
	rc = rc ? rc : upload_vec(cb, L->ffn_norm, c->n_embd, &d->ffn_norm);
	rc = rc ? rc : upload_vec(cb, L->ffn_sub_norm, c->n_ff, &d->ffn_sub_norm);
	const struct bn_linear *src[BN_LAYER_LINEARS];
	bn_layer_linears(L, src);
	struct dev_linear *dst[BN_LAYER_LINEARS] = { &d->wq, &d->wk, &d->wv, &d->wo, &d->w_gate,
						     &d->w_up, &d->w_down };
	for (int i = 0; i < BN_LAYER_LINEARS && rc == 0; i++)
		rc = upload_linear(cb, src[i], dst[i]);
	return rc;
}

static int upload_model(struct cuda_backend *cb)
{
	const struct bn_model_config *c = &cb->model.cfg;
	cb->layers = calloc(c->n_layer, sizeof(*cb->layers));
	if (!cb->layers)
		return -ENOMEM;
	int rc = upload_vec(cb, cb->model.output_norm, c->n_embd, &cb->output_norm);
	rc = rc ? rc : upload_linear(cb, &cb->model.output, &cb->output);
	for (uint32_t li = 0; li < c->n_layer && rc == 0 && !cb->kernels.flags; li++)
		rc = upload_layer(cb, &cb->model.layers[li], &cb->layers[li]);
	cb->norms = calloc(c->n_layer, sizeof(*cb->norms));
	rc = rc ? rc : cb->norms ? 0 : -ENOMEM;
	return rc || cb->kernels.flags ? rc : cuda_norms_upload(&cb->weights, &cb->model, cb->norms);
}

/* A variant other than base: its forward pass (cuda_fwd.h) uploads the layers itself, its
 * float matrices through the weights cache like upload_linear's (so a cache being written
 * gets their images). Before cuda_wcache_ready: the cache's images are freed there. */
static int open_fwd(struct cuda_backend *cb)
{
	struct bn_cuda_fwd_head head = { .norm = cb->output_norm, .ternary = cb->output.kind == DEV_T2,
					 .t2 = cb->output.t2, .f = cb->output.f };
	return cb->kernels.flags ? bn_cuda_fwd_open(&cb->fwd, &cb->model, &cb->kernels, &head,
						    &cb->wcache, cb->ld_x, cb->stream)
				 : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Scratch                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* Hands out ALIGN-aligned pieces of a block; with base NULL it only counts. */
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

static void carve_activations(struct cuda_backend *cb, struct carver *c, uint32_t n)
{
	uint32_t n64 = round_up(n, 64);
	uint32_t k_pad = round_up(cb->ld_wide, BN_T2_CHUNK);
	cb->xb = carve(c, (size_t)n64 * cb->ld_wide * 4);
	cb->xn = carve(c, cb->model.cfg.proj_norms ? (size_t)n * cb->ld_wide * 4 : 0);
	cb->q = carve(c, (size_t)n * cb->ld_q * 4);
	cb->k = carve(c, (size_t)n * cb->ld_kv * 4);
	cb->v = carve(c, (size_t)n * cb->ld_kv * 4);
	cb->att = carve(c, (size_t)n * cb->ld_q * 4);
	cb->gate = carve(c, (size_t)n * cb->ld_ff * 4);
	cb->up = carve(c, (size_t)n * cb->ld_ff * 4);
	cb->xq.q = carve(c, (size_t)n * k_pad);
	cb->xq.inv_scale = carve(c, (size_t)n * 4);
	cb->xq.sum = carve(c, (size_t)n * 4);
	cb->xh = carve(c, (size_t)n64 * cb->ld_wide * 2);
}

static int reserve_activations(struct cuda_backend *cb, uint32_t n)
{
	if (n <= cb->n_cap)
		return 0;
	n = round_up(n, 64);
	cudaFree(cb->act);
	cb->act = NULL;
	cb->n_cap = 0;
	struct carver c = { 0 };
	carve_activations(cb, &c, n);
	CUDA_TRY(cudaMalloc(&cb->act, c.at));
	CUDA_TRY(cudaMemset(cb->act, 0, c.at));
	c = (struct carver){ .base = cb->act };
	carve_activations(cb, &c, n);
	cb->n_cap = n;
	return 0;
}

static void carve_inputs(const struct cuda_backend *cb, struct carver *c, const struct step_shape *s,
			 struct step_inputs *in)
{
	const struct bn_model_config *m = &cb->model.cfg;
	in->x = carve(c, (size_t)s->n_tok * cb->ld_x * 4);
	in->cs = carve(c, (size_t)s->n_tok * (m->rope_dim ? m->rope_dim : 1) * 4);
	in->cs_swa = carve(c, m->n_swa ? (size_t)s->n_tok * m->rope_dim * 4 : 0);
	in->slot = carve(c, (size_t)s->n_tok * 4);
	in->len = carve(c, (size_t)s->n_tok * 4);
	in->table_off = carve(c, (size_t)s->n_tok * 4);
	in->tables = carve(c, (size_t)s->n_rows * s->max_blocks * 4);
	in->out_rows = carve(c, (size_t)s->n_logits * 4);
	in->hidden_rows = carve(c, (size_t)s->n_hidden * 4);
	in->pen = carve(c, (size_t)s->out.n_pen * sizeof(struct bn_cuda_penalty));
	in->rank = carve(c, (size_t)s->out.n_rank * sizeof(struct bn_cuda_sample_row));
	in->score = carve(c, (size_t)s->out.n_score * sizeof(struct bn_cuda_score_row));
	in->row_mask = carve(c, (size_t)s->out.n_out * 4);
	in->masks = carve(c, (size_t)s->out.n_masks * bn_sample_mask_words(cb->model.cfg.n_vocab) * 8);
	in->bytes = c->at;
}

/* Host and device blocks for the step's inputs, the same layout in both. */
static int reserve_inputs(struct cuda_backend *cb, const struct step_shape *s,
			  struct step_inputs *host, struct step_inputs *dev)
{
	struct carver c = { 0 };
	carve_inputs(cb, &c, s, host);
	if (c.at > cb->in_cap) {
		cudaFreeHost(cb->in_host);
		cudaFree(cb->in_dev);
		cb->in_host = cb->in_dev = NULL;
		cb->in_cap = 0;
		size_t cap = c.at * 2;
		CUDA_TRY(cudaMallocHost(&cb->in_host, cap));
		CUDA_TRY(cudaMalloc(&cb->in_dev, cap));
		cb->in_cap = cap;
	}
	c = (struct carver){ .base = cb->in_host };
	carve_inputs(cb, &c, s, host);
	memset(cb->in_host, 0, c.at); /* embedding pads must be zero */
	c = (struct carver){ .base = cb->in_dev };
	carve_inputs(cb, &c, s, dev);
	return 0;
}

static int reserve_outputs(struct cuda_backend *cb, uint32_t rows, uint32_t rank_rows)
{
	uint32_t n_vocab = cb->model.cfg.n_vocab;
	if (rows > cb->logits_rows) {
		cudaFree(cb->logits);
		cb->logits = NULL;
		cb->logits_rows = 0;
		CUDA_TRY(cudaMalloc((void **)&cb->logits, (size_t)rows * n_vocab * 4));
		cb->logits_rows = rows;
	}
	if (rows > cb->res_rows) {
		cudaFree(cb->res_dev);
		cudaFreeHost(cb->res_host);
		cb->res_dev = cb->res_host = NULL;
		cb->res_rows = 0;
		size_t bytes = cuda_answers_bytes(rows);
		CUDA_TRY(cudaMalloc(&cb->res_dev, bytes));
		CUDA_TRY(cudaMallocHost(&cb->res_host, bytes));
		cb->res_rows = rows;
	}
	uint32_t group = cuda_rows_rank_group(n_vocab); /* rows a sampler call ranks at most */
	rank_rows = rank_rows < group ? rank_rows : group;
	size_t need = rank_rows ? bn_cuda_sample_scratch_bytes(n_vocab, rank_rows) : 0;
	if (need > cb->sample_scratch_bytes) {
		cudaFree(cb->sample_scratch);
		cb->sample_scratch = NULL;
		cb->sample_scratch_bytes = 0;
		CUDA_TRY(cudaMalloc(&cb->sample_scratch, need));
		cb->sample_scratch_bytes = need;
	}
	return 0;
}

/* Room for n hidden rows on the device and, pinned, on the host. */
static int reserve_hidden(struct cuda_backend *cb, uint32_t n)
{
	if (n <= cb->hidden_cap)
		return 0;
	cudaFree(cb->hidden_dev);
	cudaFreeHost(cb->hidden_host);
	cb->hidden_dev = cb->hidden_host = NULL;
	cb->hidden_cap = 0;
	size_t bytes = (size_t)n * cb->ld_x * sizeof(float);
	CUDA_TRY(cudaMalloc((void **)&cb->hidden_dev, bytes));
	CUDA_TRY(cudaMallocHost((void **)&cb->hidden_host, bytes));
	cb->hidden_cap = n;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Open, close, KV                                                                             */
/* ------------------------------------------------------------------------------------------ */

static void cuda_close(void *self)
{
	struct cuda_backend *cb = self;
	if (!cb)
		return;
	if (cb->stream)
		cudaStreamSynchronize(cb->stream);
	bn_cuda_fwd_close(cb->fwd);
	bn_cuda_buffers_free(&cb->weights);
	cuda_kv_free(&cb->kv);
	cudaFree(cb->act);
	cudaFree(cb->in_dev);
	cudaFreeHost(cb->in_host);
	cudaFree(cb->logits);
	cudaFree(cb->sample_scratch);
	cudaFree(cb->res_dev);
	cudaFreeHost(cb->res_host);
	cudaFree(cb->hidden_dev);
	cudaFreeHost(cb->hidden_host);
	if (cb->stream)
		cudaStreamDestroy(cb->stream);
	free(cb->layers);
	free(cb->norms);
	free(cb->rope_freq);
	free(cb->rope_freq_swa);
	free(cb->seq_len);
	cuda_rows_free(&cb->rows);
	cuda_wcache_close(&cb->wcache); /* first: its writer reads the model's T2 planes */
	bn_model_free(&cb->model);
	free(cb);
}

static void set_dims(struct cuda_backend *cb)
{
	const struct bn_model_config *c = &cb->model.cfg;
	cb->q_dim = c->n_head * c->head_dim;
	cb->kv_dim = c->n_head_kv * c->head_dim;
	cb->ld_x = round_up(c->n_embd, 64);
	cb->ld_q = round_up(cb->q_dim, 64);
	cb->ld_kv = round_up(cb->kv_dim, 64);
	cb->ld_ff = round_up(c->n_ff, 64);
	uint32_t wide = cb->ld_x > cb->ld_q ? cb->ld_x : cb->ld_q;
	cb->ld_wide = wide > cb->ld_ff ? wide : cb->ld_ff;
}

static void describe(const struct cuda_backend *cb, struct bn_model_desc *desc)
{
	bn_model_describe(&cb->model.cfg, BN_BACKEND_CUDA, CUDA_ATTN_MAC_COST, desc);
	bn_model_describe_graph(&cb->model, desc);
	desc->lm_head = BN_HEAD_FILE;
	bn_cuda_kernels_name(&cb->kernels, desc->kernels, sizeof(desc->kernels));
	desc->decode_layout = bn_model_is_ternary(&cb->model) ? BN_DECODE_LAYOUT_2BIT
							      : BN_DECODE_LAYOUT_NONE;
	desc->can_score = 1;
	desc->can_classify = 1; /* score rows and seq_fork */
	desc->can_mask = 1;     /* masks on the device, the closing check's second draw */
	desc->can_embed = 1;    /* hidden rows: the final norm on the device, copied back */
	size_t free_b = 0, total = 0;
	if (cudaMemGetInfo(&free_b, &total) == cudaSuccess) {
		desc->kv_on_device = 1;
		desc->device_free = free_b;
		desc->device_headroom = total / 10 > KV_HEADROOM_MIN ? total / 10 : KV_HEADROOM_MIN;
	}
	if (desc->kv_on_device && cb->vmm.granule) {
		desc->kv_release_tokens = 1; /* a block's slot goes whole (cuda_kv.h) */
		desc->kv_map_granule = cb->vmm.granule;
		desc->kv_arrays = 2 * cb->model.cfg.n_layer;
	}
}

static int open_model(struct cuda_backend *cb, const struct bn_backend_options *opt)
{
	char err[BN_MODEL_ERR_LEN];
	if (bn_cuda_kernels_parse(opt->cuda_kernels, &cb->kernels) != 0) {
		bn_log_error("msg=\"unknown --cuda-kernels\" value=\"%s\"", opt->cuda_kernels);
		return -EINVAL;
	}
	/* the device gets the file's float rows (cuda_wcache_upload); no host panels */
	struct bn_activation_choice act;
	bn_backend_activation(opt, &act);
	if (cuda_wcache_load(&cb->wcache, opt->model_path, opt->cache_dir, &act, &cb->model,
			     err) != 0) {
		bn_log_error("msg=\"cannot load model\" error=\"%s\"", err);
		return -EINVAL;
	}
	const struct bn_model_config *c = &cb->model.cfg;
	const char *base_only = cuda_norms_base_only(&cb->model);
	if (base_only && cb->kernels.flags) {
		/* a warning when the option asked for the variant; the default's fallback is news */
		char asked[BN_CUDA_KERNELS_NAME_MAX];
		bn_cuda_kernels_name(&cb->kernels, asked, sizeof(asked));
		if (opt->cuda_kernels && *opt->cuda_kernels)
			bn_log_warn("msg=\"--cuda-kernels runs base for this model\" asked=\"%s\" arch=%s why=\"%s\"",
				    asked, c->arch_name, base_only);
		else
			bn_log_info("msg=\"the cuda backend runs base for this model\" default=\"%s\" arch=%s why=\"%s\"",
				    asked, c->arch_name, base_only);
		cb->kernels = (struct bn_cuda_kernels){ 0 };
	}
	if (c->head_dim > BN_CUDA_MAX_HEAD_DIM) {
		bn_log_error("msg=\"the cuda backend handles heads of at most %d dimensions\" head_dim=%u",
			     BN_CUDA_MAX_HEAD_DIM, c->head_dim);
		return -EINVAL;
	}
	set_dims(cb);
	cb->max_seqs = opt->max_seqs;
	cb->seq_len = calloc(opt->max_seqs, sizeof(*cb->seq_len));
	cb->rope_freq = malloc((c->rope_dim / 2 + 1) * sizeof(float));
	cb->rope_freq_swa = malloc((c->rope_dim / 2 + 1) * sizeof(float));
	if (!cb->seq_len || !cb->rope_freq || !cb->rope_freq_swa)
		return -ENOMEM;
	bn_rope_freqs(c, cb->rope_freq);
	if (c->n_swa)
		bn_rope_freqs_swa(c, cb->rope_freq_swa);
	return 0;
}

static int cuda_open(const struct bn_backend_options *opt, struct bn_model_desc *desc, void **self)
{
	if (!opt->model_path) {
		bn_log_error("msg=\"the cuda backend needs --model FILE\"");
		return -EINVAL;
	}
	int rc = bn_cuda_pick_device(opt->device_index, opt->probing);
	if (rc)
		return rc;
	struct cuda_backend *cb = calloc(1, sizeof(*cb));
	if (!cb)
		return -ENOMEM;
	uint64_t t0 = bn_now_ns();
	cuda_rows_init(&cb->rows);
	cudaError_t e = cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking);
	rc = e != cudaSuccess ? bn_cuda_failed("cudaStreamCreate", e) : open_model(cb, opt);
	rc = rc ? rc : upload_model(cb);
	rc = rc ? rc : open_fwd(cb);
	if (rc) {
		cuda_close(cb);
		return rc;
	}
	(void)cuda_vmm_probe(&cb->vmm); /* without it, pools keep their KV (said at info) */
	const struct bn_model_config *c = &cb->model.cfg;
	double load_ms = (double)(bn_now_ns() - t0) / 1e6;
	enum bn_weights_cache from = cuda_wcache_ready(&cb->wcache, &cb->model, load_ms * 1e-3,
						       opt->report);
	/* --lm-head and --decode-layout are the cpu backend's: the line says what runs here */
	bn_log_info("msg=\"cuda backend ready\" arch=%s layers=%u embd=%u heads=%u kv_heads=%u ffn=%u vocab=%u context=%u weights_mib=%.1f lm_head=\"full\" decode_layout=\"%s\" load_ms=%.0f weights_cache=%s cache=\"%s\"",
		    c->arch_name, c->n_layer, c->n_embd, c->n_head, c->n_head_kv, c->n_ff, c->n_vocab,
		    c->n_ctx, (double)cb->weights.bytes / (1 << 20),
		    bn_model_is_ternary(&cb->model) ? "2bit" : "none", load_ms,
		    bn_weights_cache_names[from], cb->wcache.path);
	describe(cb, desc);
	desc->weight_bytes = cb->weights.bytes + (cb->fwd ? bn_cuda_fwd_weight_bytes(cb->fwd) : 0);
	*self = cb;
	return 0;
}

/* A new arena (rc from cuda_kv_fixed or cuda_kv_elastic) for the variant's layers too. */
static int kv_arena_set(struct cuda_backend *cb, int rc)
{
	if (cb->fwd && rc == 0)
		bn_cuda_fwd_kv(cb->fwd, cb->kv.k, cb->kv.v, cb->kv.n_slots, cb->kv.shape.block_tokens);
	return rc;
}

static int cuda_kv_init(void *self, uint32_t n_blocks, uint32_t block_tokens)
{
	struct cuda_backend *cb = self;
	struct cuda_kv_shape shape = { cb->model.cfg.n_layer, cb->kv_dim, block_tokens };
	cuda_kv_free(&cb->kv);
	return kv_arena_set(cb, cuda_kv_fixed(&cb->kv, &shape, n_blocks));
}

/* -EINVAL where the device maps no memory in granules (desc kv_map_granule 0). */
static int cuda_kv_init_elastic(void *self, uint32_t n_blocks, uint32_t block_tokens)
{
	struct cuda_backend *cb = self;
	struct cuda_kv_shape shape = { cb->model.cfg.n_layer, cb->kv_dim, block_tokens };
	cuda_kv_free(&cb->kv);
	return kv_arena_set(cb, cuda_kv_elastic(&cb->kv, &cb->vmm, &shape, n_blocks, cb->stream));
}

/* n = 0 asks whether blocks can be given back: only an elastic arena's. */
static int cuda_kv_release(void *self, uint32_t first, uint32_t n)
{
	struct cuda_backend *cb = self;
	if (n == 0)
		return cb->kv.elastic ? 0 : -EOPNOTSUPP;
	return cuda_kv_give_back(&cb->kv, first, n);
}

static int cuda_seq_open(void *self, uint32_t seq)
{
	struct cuda_backend *cb = self;
	if (seq >= cb->max_seqs)
		return -EINVAL;
	cb->seq_len[seq] = 0;
	return 0;
}

static void cuda_seq_close(void *self, uint32_t seq)
{
	(void)self; /* the scheduler takes the blocks back; seq_open resets the length */
	(void)seq;
}

/* What forks and rewinds (cuda_seq.h) touch. */
static struct cuda_seqs seqs_of(struct cuda_backend *cb)
{
	return (struct cuda_seqs){ .len = cb->seq_len, .max_seqs = cb->max_seqs,
				   .n_ctx = cb->model.cfg.n_ctx, .kv = &cb->kv, .stream = cb->stream };
}

static int cuda_seq_fork(void *self, uint32_t seq, uint32_t start, uint32_t dst_block,
			 uint32_t src_block, uint32_t n_copy)
{
	struct cuda_seqs s = seqs_of(self);
	return cuda_seqs_fork(&s, seq, start, dst_block, src_block, n_copy);
}

static int cuda_seq_rewind(void *self, uint32_t seq, uint32_t length)
{
	struct cuda_seqs s = seqs_of(self);
	return cuda_seqs_rewind(&s, seq, length);
}

/* ------------------------------------------------------------------------------------------ */
/* The step: inputs                                                                            */
/* ------------------------------------------------------------------------------------------ */

static int blocks_valid(const struct cuda_backend *cb, const struct bn_batch *b)
{
	if (!b->blocks || !cb->kv.n_slots)
		return 0;
	for (uint32_t r = 0; r < b->n_rows; r++) {
		uint32_t bt = cb->kv.shape.block_tokens, n = (b->pos[r] + b->lens[r] + bt - 1) / bt;
		for (uint32_t i = 0; i < n; i++)
			if (b->blocks[r][i] >= cb->kv.n_blocks)
				return 0;
	}
	return 1;
}

static void step_shape(const struct cuda_backend *cb, const struct bn_batch *b, uint32_t n_tok,
		       struct step_shape *s)
{
	*s = (struct step_shape){ .n_tok = n_tok, .n_rows = b->n_rows };
	for (uint32_t r = 0; r < b->n_rows; r++) {
		uint32_t bt = cb->kv.shape.block_tokens, nb = (b->pos[r] + b->lens[r] + bt - 1) / bt;
		s->max_blocks = nb > s->max_blocks ? nb : s->max_blocks;
	}
	cuda_rows_count(b, &s->out);
	s->n_logits = s->out.n_out;
	s->n_hidden = cuda_hidden_count(b);
}

static int fill_tokens(struct cuda_backend *cb, const struct bn_batch *b, const struct step_inputs *in,
		       uint32_t max_blocks)
{
	const struct bn_model_config *c = &cb->model.cfg;
	uint32_t t = 0, bt = cb->kv.shape.block_tokens;
	for (uint32_t r = 0; r < b->n_rows; r++) {
		/* the row's block table as slots (a block the arena first sees gets one) */
		uint32_t *table = in->tables + (size_t)r * max_blocks;
		int rc = cuda_kv_table(&cb->kv, b->blocks[r], (b->pos[r] + b->lens[r] + bt - 1) / bt, table);
		if (rc)
			return rc;
		for (uint32_t i = 0; i < b->lens[r]; i++, t++) {
			uint32_t pos = b->pos[r] + i;
			float *x = in->x + (size_t)t * cb->ld_x;
			bn_model_embed(&cb->model, b->tokens[(size_t)r * b->width + i], x);
			for (uint32_t k = 0; c->embd_scale != 1.0f && k < c->n_embd; k++)
				x[k] *= c->embd_scale; /* gemma3's, as the cpu's forward.c */
			bn_rope_cos_sin(cb->rope_freq, c->rope_dim / 2, pos, in->cs + (size_t)t * c->rope_dim);
			if (c->n_swa)
				bn_rope_cos_sin(cb->rope_freq_swa, c->rope_dim / 2, pos,
						in->cs_swa + (size_t)t * c->rope_dim);
			in->slot[t] = table[pos / bt] * bt + pos % bt;
			in->len[t] = pos + 1;
			in->table_off[t] = r * max_blocks;
		}
	}
	cuda_rows_tokens(b, in->out_rows);
	cuda_hidden_tokens(b, in->hidden_rows);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The step: layers                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* y = W x for n tokens; x is quantized first when W is ternary (unless `quantized` says the
 * int8 rows of this x are already in cb->xq). */
static int linear(struct cuda_backend *cb, const struct dev_linear *w, const float *x, uint32_t ldx,
		  uint32_t n, float *y, uint32_t ldy, int quantized)
{
	if (w->kind == DEV_FLOAT)
		return bn_cuda_f_gemm(&w->f, x, ldx, n, y, ldy, cb->xh, cb->stream);
	if (!quantized) {
		cb->xq.k = w->t2.n_in;
		cb->xq.k_pad = round_up(w->t2.n_in, BN_T2_CHUNK);
		int rc = bn_cuda_quantize(x, ldx, n, &cb->xq, cb->stream);
		if (rc)
			return rc;
	}
	return bn_cuda_t2_gemm(&w->t2, &cb->xq, n, y, ldy, cb->stream);
}

/* Several matrices on one input: quantized once. */
static int linear_multi(struct cuda_backend *cb, uint32_t n_mats, const struct dev_linear *const *w,
			float *const *y, const uint32_t *ldy, const float *x, uint32_t ldx, uint32_t n)
{
	int quantized = 0, rc = 0;
	for (uint32_t i = 0; i < n_mats && rc == 0; i++) {
		rc = linear(cb, w[i], x, ldx, n, y[i], ldy[i], quantized);
		quantized |= w[i]->kind == DEV_T2;
	}
	return rc;
}

/* q/k norms (qwen3, gemma3), RoPE (a local layer's base), the cache, attention (a local
 * layer's window: the last n_swa positions, as the cpu's forward_layer.c). */
static int attention(struct cuda_backend *cb, uint32_t li, const struct step_inputs *in, uint32_t n)
{
	const struct bn_model_config *c = &cb->model.cfg;
	const struct cuda_norms_layer *N = &cb->norms[li];
	uint32_t bt = cb->kv.shape.block_tokens;
	size_t layer = (size_t)li * cb->kv.n_slots * bt * cb->kv_dim;
	struct bn_cuda_kv_layer kv = { .K = cb->kv.k + layer, .V = cb->kv.v + layer,
				       .kv_dim = cb->kv_dim, .block_tokens = bt };
	int swa = bn_layer_is_swa(c, li);
	const float *cs = swa ? in->cs_swa : in->cs;
	int rc = cuda_norms_heads(cb->q, cb->ld_q, c->n_head, c->head_dim, N->q_norm, n, c->rms_eps,
				  cb->stream);
	rc = rc ? rc : cuda_norms_heads(cb->k, cb->ld_kv, c->n_head_kv, c->head_dim, N->k_norm, n,
					c->rms_eps, cb->stream);
	rc = rc ? rc : bn_cuda_rope(cb->q, cb->ld_q, c->n_head, c->head_dim, c->rope_dim,
				    c->rope_neox, cs, n, cb->stream);
	rc = rc ? rc : bn_cuda_rope(cb->k, cb->ld_kv, c->n_head_kv, c->head_dim, c->rope_dim,
				    c->rope_neox, cs, n, cb->stream);
	rc = rc ? rc : bn_cuda_kv_store(&kv, cb->k, cb->v, cb->ld_kv, in->slot, n, cb->stream);
	struct bn_cuda_attn a = {
		.q = cb->q, .ldq = cb->ld_q, .out = cb->att, .ldo = cb->ld_q, .len = in->len,
		.table_off = in->table_off, .tables = in->tables, .n_head = c->n_head,
		.n_head_kv = c->n_head_kv, .head_dim = c->head_dim, .scale = c->attn_scale,
		.window = swa ? c->n_swa : 0,
	};
	return rc ? rc : bn_cuda_attend(&kv, &a, n, cb->stream);
}

/* Projections of one input xb: quantized once, or (proj_norms) each of its own norm (in[k],
 * bn_layer_linears' order from k0) into xn first, as the cpu's qkv_projections. */
static int projections(struct cuda_backend *cb, uint32_t li, uint32_t k0, uint32_t n_mats,
		       const struct dev_linear *const *w, float *const *y, const uint32_t *ldy,
		       uint32_t n)
{
	const struct bn_model_config *c = &cb->model.cfg;
	if (!c->proj_norms)
		return linear_multi(cb, n_mats, w, y, ldy, cb->xb, cb->ld_wide, n);
	int rc = 0;
	for (uint32_t i = 0; i < n_mats && rc == 0; i++) {
		rc = bn_cuda_rmsnorm(cb->xn, cb->ld_wide, cb->xb, cb->ld_wide, NULL,
				     cb->norms[li].in[k0 + i], c->n_embd, n, c->rms_eps, cb->stream);
		rc = rc ? rc : linear(cb, w[i], cb->xn, cb->ld_wide, n, y[i], ldy[i], 0);
	}
	return rc;
}

/* The layer as the cpu's bn_fw_layer orders it, each optional step where the model has it. */
static int layer_forward(struct cuda_backend *cb, uint32_t li, const struct step_inputs *in, uint32_t n)
{
	const struct bn_model_config *c = &cb->model.cfg;
	const struct dev_layer *L = &cb->layers[li];
	const struct cuda_norms_layer *N = &cb->norms[li];
	cudaStream_t st = cb->stream;
	float eps = c->rms_eps;
	int rc = bn_cuda_rmsnorm(cb->xb, cb->ld_wide, cb->x, cb->ld_x, NULL, L->attn_norm, c->n_embd,
				 n, eps, st);
	const struct dev_linear *qkv[3] = { &L->wq, &L->wk, &L->wv };
	float *qkv_out[3] = { cb->q, cb->k, cb->v };
	uint32_t qkv_ld[3] = { cb->ld_q, cb->ld_kv, cb->ld_kv };
	rc = rc ? rc : projections(cb, li, 0, 3, qkv, qkv_out, qkv_ld, n);
	rc = rc ? rc : attention(cb, li, in, n);
	rc = rc ? rc : cuda_norms_apply(L->attn_sub_norm, cb->att, cb->ld_q, cb->q_dim, n, eps, st);
	rc = rc ? rc : cuda_norms_apply(N->in[3], cb->att, cb->ld_q, cb->q_dim, n, eps, st);
	rc = rc ? rc : linear(cb, &L->wo, cb->att, cb->ld_q, n, cb->xb, cb->ld_wide, 0);
	rc = rc ? rc : cuda_norms_apply(N->post_attn, cb->xb, cb->ld_wide, c->n_embd, n, eps, st);
	rc = rc ? rc : bn_cuda_add(cb->x, cb->ld_x, cb->xb, cb->ld_wide, c->n_embd, n, st);
	rc = rc ? rc : bn_cuda_rmsnorm(cb->xb, cb->ld_wide, cb->x, cb->ld_x, NULL, L->ffn_norm,
				       c->n_embd, n, eps, st);
	const struct dev_linear *gu[2] = { &L->w_gate, &L->w_up };
	float *gu_out[2] = { cb->gate, cb->up };
	uint32_t gu_ld[2] = { cb->ld_ff, cb->ld_ff };
	rc = rc ? rc : projections(cb, li, 4, 2, gu, gu_out, gu_ld, n);
	rc = rc ? rc : bn_cuda_gate(cb->gate, cb->up, cb->ld_ff, c->n_ff, n, cuda_norms_act(c->act),
				    L->ffn_sub_norm, eps, st);
	rc = rc ? rc : cuda_norms_apply(N->in[6], cb->gate, cb->ld_ff, c->n_ff, n, eps, st);
	rc = rc ? rc : linear(cb, &L->w_down, cb->gate, cb->ld_ff, n, cb->xb, cb->ld_wide, 0);
	rc = rc ? rc : cuda_norms_apply(N->post_ffw, cb->xb, cb->ld_wide, c->n_embd, n, eps, st);
	rc = rc ? rc : bn_cuda_add(cb->x, cb->ld_x, cb->xb, cb->ld_wide, c->n_embd, n, st);
	return rc ? bn_cuda_failed("layer kernels", rc) : 0;
}

/* What the sampler's kernels read and write on the device (in: the step's device inputs). */
static struct cuda_rows_device rows_device(const struct cuda_backend *cb,
					   const struct step_inputs *in)
{
	return (struct cuda_rows_device){
		.logits = cb->logits, .n_vocab = cb->model.cfg.n_vocab, .pen = in->pen,
		.rank = in->rank, .score = in->score, .masks = in->masks,
		.row_mask = in->row_mask, .scratch = cb->sample_scratch,
		.scratch_bytes = cb->sample_scratch_bytes,
		.out = cuda_answers_at(cb->res_dev, cb->res_rows),
	};
}

/* Final norm of the tokens that want logits and the LM head (unless a variant's forward pass
 * made the logits), then the sampler and the scores (cuda_rows.h). */
static int output_and_sample(struct cuda_backend *cb, const struct step_inputs *in,
			     const struct step_shape *s)
{
	const struct bn_model_config *c = &cb->model.cfg;
	cudaStream_t st = cb->stream;
	struct cuda_rows_device d = rows_device(cb, in);
	int rc = 0;
	if (!cb->fwd) {
		rc = bn_cuda_rmsnorm(cb->xb, cb->ld_wide, cb->x, cb->ld_x, in->out_rows,
				     cb->output_norm, c->n_embd, s->out.n_out, c->rms_eps, st);
		rc = rc ? rc : linear(cb, &cb->output, cb->xb, cb->ld_wide, s->out.n_out, cb->logits,
				      c->n_vocab, 0);
	}
	rc = rc ? rc : cuda_rows_answer(&d, &s->out, st);
	return rc ? bn_cuda_failed("output kernels", rc) : 0;
}

/* The final norm of the tokens hidden rows ask for (as the LM head's input is made), copied
 * back to the host (read once the stream is synchronized). */
static int hidden_states(struct cuda_backend *cb, const struct step_inputs *in,
			 const struct step_shape *s)
{
	const struct bn_model_config *c = &cb->model.cfg;
	int rc = bn_cuda_rmsnorm(cb->hidden_dev, cb->ld_x, cb->x, cb->ld_x, in->hidden_rows,
				 cb->output_norm, c->n_embd, s->n_hidden, c->rms_eps, cb->stream);
	if (rc)
		return bn_cuda_failed("hidden rows", rc);
	CUDA_TRY(cudaMemcpyAsync(cb->hidden_host, cb->hidden_dev,
				 (size_t)s->n_hidden * cb->ld_x * sizeof(float), cudaMemcpyDeviceToHost,
				 cb->stream));
	return 0;
}

static struct bn_cuda_fwd_in fwd_view(const struct step_inputs *in)
{
	return (struct bn_cuda_fwd_in){ in->x, in->cs, in->slot, in->len, in->table_off, in->tables,
					in->out_rows };
}

/* The layers: this file's, or a variant's with its LM head (every logits row the step lists
 * in out_rows, and a graph step's padding rows). */
static int run_layers(struct cuda_backend *cb, const struct step_inputs *dev,
		      const struct step_shape *s, int graph)
{
	if (cb->fwd) {
		struct bn_cuda_fwd_in in = fwd_view(dev);
		struct bn_cuda_fwd_step fs = { s->n_tok, s->n_logits, s->max_blocks, (uint32_t)graph,
					       s->n_hidden > 0 };
		return bn_cuda_fwd_run(cb->fwd, &in, &fs, cb->logits);
	}
	int rc = 0;
	for (uint32_t li = 0; li < cb->model.cfg.n_layer && rc == 0; li++)
		rc = layer_forward(cb, li, dev, s->n_tok);
	return rc;
}

static int run_step(struct cuda_backend *cb, const struct bn_batch *b, struct step_shape *s,
		    struct bn_sample_out *out)
{
	struct step_inputs host, dev;
	/* A variant's decode step may be padded to its bucket (cuda_fwd.h): the padding rows get
	 * logits, but s->out leaves them out, so they are not sampled, masked, penalized or
	 * read back. */
	uint32_t n_real = s->n_tok;
	int graph = cb->fwd && bn_cuda_fwd_graph_shape(cb->fwd, b, &s->n_tok, &s->max_blocks);
	if (graph)
		s->n_rows = s->n_logits = s->n_tok;
	int rc = cb->fwd ? 0 : reserve_activations(cb, s->n_tok);
	/* a second draw ranks at most the constrained rows */
	uint32_t ranked = s->out.n_rank > s->out.n_masks ? s->out.n_rank : s->out.n_masks;
	rc = rc ? rc : reserve_outputs(cb, s->n_logits, ranked);
	rc = rc ? rc : reserve_hidden(cb, s->n_hidden);
	rc = rc ? rc : reserve_inputs(cb, s, &host, &dev);
	if (rc)
		return rc;
	if ((rc = fill_tokens(cb, b, &host, s->max_blocks)) != 0)
		return rc;
	struct bn_cuda_fwd_in pad = fwd_view(&host);
	if (graph)
		bn_cuda_fwd_pad(&pad, n_real, s->n_tok);
	struct cuda_rows_inputs fill = { .pen = host.pen, .rank = host.rank, .score = host.score,
					 .row_mask = host.row_mask, .masks = host.masks };
	rc = cuda_rows_fill(&cb->rows, b, cb->model.cfg.n_vocab, &fill, &s->out);
	if (rc)
		return rc;
	CUDA_TRY(cudaMemcpyAsync(cb->in_dev, cb->in_host, host.bytes, cudaMemcpyHostToDevice,
				 cb->stream));
	cb->x = dev.x;
	rc = run_layers(cb, &dev, s, graph);
	if (rc == 0 && s->n_hidden)
		rc = hidden_states(cb, &dev, s);
	if (rc == 0 && s->out.n_out)
		rc = output_and_sample(cb, &dev, s);
	if (rc)
		return rc;
	size_t back = cuda_answers_back(cb->res_rows, s->out.n_rank);
	if (s->out.n_out)
		CUDA_TRY(cudaMemcpyAsync(cb->res_host, cb->res_dev, back, cudaMemcpyDeviceToHost,
					 cb->stream));
	CUDA_TRY(cudaStreamSynchronize(cb->stream));
	if (s->n_hidden)
		cuda_hidden_scatter(b, cb->hidden_host, cb->ld_x, cb->model.cfg.n_embd);
	struct cuda_answers answers = cuda_answers_at(cb->res_host, cb->res_rows);
	cuda_rows_collect(b, &answers, out);
	struct cuda_rows_device d = rows_device(cb, &dev);
	rc = cuda_rows_redraw(&cb->rows, b, &d, &answers, out, cb->stream);
	return rc > 0 ? bn_cuda_failed("second draw", rc) : rc;
}

static int cuda_step(void *self, const struct bn_batch *b, struct bn_sample_out *out)
{
	struct cuda_backend *cb = self;
	const struct bn_model_config *c = &cb->model.cfg;
	struct bn_batch_limits lim = { .seq_len = cb->seq_len, .max_seqs = cb->max_seqs,
				       .n_ctx = c->n_ctx, .n_vocab = c->n_vocab };
	uint32_t n_tok;
	int rc = bn_batch_check(&lim, b, &n_tok);
	if (rc || !blocks_valid(cb, b) || !b->sample)
		return -EINVAL;
	struct step_shape s;
	step_shape(cb, b, n_tok, &s);
	if ((rc = run_step(cb, b, &s, out)) != 0)
		return rc;
	for (uint32_t r = 0; r < b->n_rows; r++)
		cb->seq_len[b->seq[r]] += b->lens[r];
	return 0;
}

const struct bn_backend_ops bn_backend_cuda = {
	.name = "cuda",
	.open = cuda_open,
	.close = cuda_close,
	.kv_init = cuda_kv_init,
	.kv_init_elastic = cuda_kv_init_elastic,
	.kv_release = cuda_kv_release,
	.seq_open = cuda_seq_open,
	.seq_close = cuda_seq_close,
	.seq_fork = cuda_seq_fork,
	.seq_rewind = cuda_seq_rewind,
	.step = cuda_step,
	.concurrent_steps = 1,
};
