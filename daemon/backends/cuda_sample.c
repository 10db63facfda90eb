/* SPDX-License-Identifier: MIT */
/*
 * cuda_sample.c — the cuda backend's sampling (kernels/cuda/sample.cu does the work):
 * daemon/model/sample.h's semantics on the device, so only token ids and the asked-for
 * log-probabilities cross back.
 *
 *  - Penalties: the host lists each distinct (row, token) once (bn_sample_penalties), the
 *    device applies them.
 *  - Plain greedy rows take a block argmax; the others (sampled, or log-probabilities asked)
 *    the ranking.
 *  - Structured output: a constrained row's allowed tokens go up with the step's inputs, a
 *    bitset per row; its argmax reads only those and its ranking puts the others last, so
 *    every step of the sampler runs on the allowed tokens, as the CPU's masked rows do.
 *  - Closing before max_tokens: once the step's tokens are back, each constrained row's
 *    check (bn_sample_check) looks at its token on the host; the rows it gives other tokens
 *    to draw from are ranked again, on the device, from the same logits (penalized, and
 *    clamped by the first ranking: clamping twice changes nothing) with the same u. As on the
 *    CPU, only a draw that does not fit costs a second pass.
 */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>

int cuda_reserve_ranking(struct cuda_backend *cb, uint32_t rank_rows)
{
	size_t need = rank_rows ? bn_cuda_sample_scratch_bytes(cb->model.cfg.n_vocab, rank_rows) : 0;
	if (need <= cb->sample_scratch_bytes)
		return 0;
	cudaFree(cb->sample_scratch);
	cb->sample_scratch = NULL;
	cb->sample_scratch_bytes = 0;
	CUDA_TRY(cudaMalloc(&cb->sample_scratch, need));
	cb->sample_scratch_bytes = need;
	return 0;
}

static struct bn_cuda_sample_row rank_row(const struct bn_sample_ctx *ctx, uint32_t logit_row,
					  uint32_t mask)
{
	const struct bn_sampling *p = ctx->params;
	return (struct bn_cuda_sample_row){
		.logit_row = logit_row, .temperature = p->temperature, .top_k = p->top_k,
		.top_p = p->top_p, .min_p = p->min_p,
		.u = bn_sample_uniform(p->seed, ctx->n_output),
		.n_top = p->want_logprobs ? p->n_logprobs : 0,
		.want_logprob = p->want_logprobs, .mask = mask,
	};
}

/* Row o's penalty entries (bn_sample_penalties' list, in its row). 0 or -ENOMEM. */
static int add_penalties(struct cuda_backend *cb, const struct bn_sample_ctx *ctx, uint32_t o,
			 const struct step_inputs *in, struct step_shape *s)
{
	uint32_t room = ctx->n_prompt + ctx->n_output;
	if (room > cb->pen_cap) {
		struct bn_penalty *p = realloc(cb->pen_list, room * sizeof(*p));
		if (!p)
			return -ENOMEM;
		cb->pen_list = p;
		cb->pen_cap = room;
	}
	uint32_t n = bn_sample_penalties(&cb->sampler, ctx, cb->model.cfg.n_vocab, cb->pen_list);
	for (uint32_t i = 0; i < n; i++)
		in->pen[s->n_pen++] = (struct bn_cuda_penalty){
			o, cb->pen_list[i].token, cb->pen_list[i].repeat, cb->pen_list[i].subtract };
	return 0;
}

int cuda_fill_sampling(struct cuda_backend *cb, const struct bn_batch *b,
		       const struct step_inputs *in, struct step_shape *s)
{
	size_t mask_bytes = (size_t)cuda_mask_words(cb) * sizeof(uint64_t);
	uint32_t o = 0;
	s->n_pen = s->n_rank = s->n_masks = 0;
	for (uint32_t r = 0; r < b->n_rows; r++) {
		const struct bn_sample_ctx *ctx = b->sample[r];
		if (!ctx)
			continue;
		int rc = add_penalties(cb, ctx, o, in, s);
		if (rc)
			return rc;
		uint32_t mask = BN_CUDA_NO_MASK;
		if (ctx->mask) {
			mask = s->n_masks++;
			memcpy(in->masks + (size_t)mask * cuda_mask_words(cb), ctx->mask, mask_bytes);
		}
		in->row_mask[o] = mask;
		if (!cuda_plain_greedy(ctx))
			in->rank[s->n_rank++] = rank_row(ctx, o, mask);
		o++;
	}
	/* a graph step's padding rows (cuda_fwd.h): any token will do, nobody reads it */
	for (; o < s->n_out; o++)
		in->row_mask[o] = BN_CUDA_NO_MASK;
	return 0;
}

int cuda_sample_logits(struct cuda_backend *cb, const struct step_inputs *dev,
		       const struct step_shape *s)
{
	uint32_t n_vocab = cb->model.cfg.n_vocab;
	uint32_t *tokens = cb->res_dev;
	struct bn_cuda_sample_result *res = (void *)(tokens + cb->res_rows);
	const uint64_t *masks = s->n_masks ? dev->masks : NULL;
	int rc = bn_cuda_penalize(cb->logits, n_vocab, dev->pen, s->n_pen, cb->stream);
	rc = rc ? rc : bn_cuda_argmax(cb->logits, n_vocab, n_vocab, s->n_out, masks, dev->row_mask,
				      tokens, cb->stream);
	rc = rc ? rc : bn_cuda_sample(cb->logits, n_vocab, n_vocab, dev->rank, s->n_rank, masks,
				      cb->sample_scratch, cb->sample_scratch_bytes, res, cb->stream);
	return rc ? cuda_failed("sampling kernels", rc) : 0;
}

static void take_result(struct bn_sample_out *so, const struct bn_cuda_sample_result *x)
{
	so->token = x->token;
	so->logprob = x->logprob;
	so->n_top = so->top ? x->n_top : 0;
	for (uint32_t i = 0; i < so->n_top; i++)
		so->top[i] = (struct bn_token_logprob){ x->top[i].token, x->top[i].logprob };
}

/* Argmax for plain greedy rows, the ranking results in order for the others. */
void cuda_collect(const struct cuda_backend *cb, const struct bn_batch *b,
		  struct bn_sample_out *out)
{
	const uint32_t *tokens = cb->res_host;
	const struct bn_cuda_sample_result *res = (const void *)(tokens + cb->res_rows);
	uint32_t o = 0, k = 0;
	for (uint32_t r = 0; r < b->n_rows; r++) {
		if (!b->sample[r])
			continue;
		struct bn_sample_out *so = &out[r];
		*so = (struct bn_sample_out){ .top = so->top, .token = tokens[o++] };
		if (!cuda_plain_greedy(b->sample[r]))
			take_result(so, &res[k++]);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* The second draw                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* The batch rows whose check gives other tokens to draw from, as (batch row, out row) pairs
 * in cb->redraw_rows, their tokens' bitsets in masks[] order. Returns how many, or -ENOMEM. */
static int rows_to_redraw(struct cuda_backend *cb, const struct bn_batch *b,
			  const struct bn_sample_out *out, const uint64_t **masks)
{
	if (b->n_rows > cb->redraw_rows_cap) {
		uint32_t *p = realloc(cb->redraw_rows, 2 * (size_t)b->n_rows * sizeof(*p));
		if (!p)
			return -ENOMEM;
		cb->redraw_rows = p;
		cb->redraw_rows_cap = b->n_rows;
	}
	int n = 0;
	for (uint32_t r = 0, o = 0; r < b->n_rows; r++) {
		const struct bn_sample_ctx *ctx = b->sample[r];
		if (!ctx)
			continue;
		const uint64_t *instead = ctx->check
			? ctx->check->redraw(ctx->check, ctx->n_output, out[r].token) : NULL;
		if (instead) {
			cb->redraw_rows[2 * n] = r;
			cb->redraw_rows[2 * n + 1] = o;
			masks[n++] = instead;
		}
		o++;
	}
	return n;
}

/* Host and device blocks of n ranking rows and their bitsets, the same layout in both. */
static int reserve_redraw(struct cuda_backend *cb, uint32_t n, struct bn_cuda_sample_row **rows,
			  uint64_t **masks, struct bn_cuda_sample_row **dev_rows,
			  uint64_t **dev_masks, size_t *bytes)
{
	size_t rows_bytes = (n * sizeof(**rows) + ALIGN - 1) / ALIGN * ALIGN;
	*bytes = rows_bytes + (size_t)n * cuda_mask_words(cb) * sizeof(uint64_t);
	if (*bytes > cb->redraw_cap) {
		cudaFreeHost(cb->redraw_host);
		cudaFree(cb->redraw_dev);
		cb->redraw_host = cb->redraw_dev = NULL;
		cb->redraw_cap = 0;
		CUDA_TRY(cudaMallocHost(&cb->redraw_host, *bytes));
		CUDA_TRY(cudaMalloc(&cb->redraw_dev, *bytes));
		cb->redraw_cap = *bytes;
	}
	*rows = cb->redraw_host;
	*masks = (uint64_t *)(void *)((char *)cb->redraw_host + rows_bytes);
	*dev_rows = cb->redraw_dev;
	*dev_masks = (uint64_t *)(void *)((char *)cb->redraw_dev + rows_bytes);
	return cuda_reserve_ranking(cb, n);
}

int cuda_redraw(struct cuda_backend *cb, const struct bn_batch *b, struct bn_sample_out *out)
{
	const uint64_t *instead[b->n_rows ? b->n_rows : 1];
	int n = rows_to_redraw(cb, b, out, instead);
	if (n <= 0)
		return n;
	struct bn_cuda_sample_row *rows, *dev_rows;
	uint64_t *masks, *dev_masks;
	size_t bytes, mask_bytes = (size_t)cuda_mask_words(cb) * sizeof(uint64_t);
	int rc = reserve_redraw(cb, (uint32_t)n, &rows, &masks, &dev_rows, &dev_masks, &bytes);
	if (rc)
		return rc;
	for (int k = 0; k < n; k++) {
		const struct bn_sample_ctx *ctx = b->sample[cb->redraw_rows[2 * k]];
		rows[k] = rank_row(ctx, cb->redraw_rows[2 * k + 1], (uint32_t)k);
		memcpy(masks + (size_t)k * cuda_mask_words(cb), instead[k], mask_bytes);
	}
	/* The results go where the first pass's went: it has been read. */
	uint32_t n_vocab = cb->model.cfg.n_vocab;
	struct bn_cuda_sample_result *res = (void *)((uint32_t *)cb->res_dev + cb->res_rows);
	CUDA_TRY(cudaMemcpyAsync(cb->redraw_dev, cb->redraw_host, bytes, cudaMemcpyHostToDevice,
				 cb->stream));
	CUDA_TRY(bn_cuda_sample(cb->logits, n_vocab, n_vocab, dev_rows, (uint32_t)n, dev_masks,
				cb->sample_scratch, cb->sample_scratch_bytes, res, cb->stream));
	const struct bn_cuda_sample_result *host = (const void *)((uint32_t *)cb->res_host + cb->res_rows);
	CUDA_TRY(cudaMemcpyAsync((void *)host, res, (size_t)n * sizeof(*res), cudaMemcpyDeviceToHost,
				 cb->stream));
	CUDA_TRY(cudaStreamSynchronize(cb->stream));
	for (int k = 0; k < n; k++)
		take_result(&out[cb->redraw_rows[2 * k]], &host[k]);
	return 0;
}

void cuda_sample_free(struct cuda_backend *cb)
{
	cudaFree(cb->sample_scratch);
	cudaFreeHost(cb->redraw_host);
	cudaFree(cb->redraw_dev);
	free(cb->redraw_rows);
	free(cb->pen_list);
	bn_sampler_free(&cb->sampler);
}
