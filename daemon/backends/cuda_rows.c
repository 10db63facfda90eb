/* SPDX-License-Identifier: MIT */
/*
 * The logits rows of a cuda step (cuda_rows.h): what each asks, the sampler's inputs, the
 * device's answers and their way back.
 */
#include "cuda_rows.h"
#include "model/forward.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The scratch one bn_cuda_sample call may use: four n_vocab words a ranking row (keys and
 * ids, in and out) and CUB's storage. 256 MiB is 128 rows of a 128,256-token vocabulary: a
 * decode batch's sampled rows in one or two calls, a long scored chunk's alternatives in
 * several, instead of gigabytes for one. */
#define RANK_SCRATCH_BYTES (256ull << 20)

void cuda_rows_init(struct cuda_rows *h)
{
	memset(h, 0, sizeof(*h));
	bn_sampler_init(&h->sampler);
}

void cuda_rows_free(struct cuda_rows *h)
{
	bn_sampler_free(&h->sampler);
	free(h->list);
	cudaFreeHost(h->redraw_host);
	cudaFree(h->redraw_dev);
	free(h->cursor);
	free(h->redraw_at);
	memset(h, 0, sizeof(*h));
}

/* The token is the argmax of the penalized logits, and nothing else is asked. */
static int plain_greedy(const struct bn_sample_ctx *s)
{
	const struct bn_sampling *p = s->params;
	return (p->temperature == 0 || p->top_k == 1) && !p->want_logprobs;
}

enum ask { ASK_NONE, ASK_TOKEN, ASK_VERIFY, ASK_SCORE };

/* What batch row r's logits rows ask, in bn_batch_logit_rows's order of precedence. */
static enum ask ask_of(const struct bn_batch *b, uint32_t r)
{
	if (b->score && b->score[r])
		return ASK_SCORE;
	if (bn_batch_verifies(b, r))
		return ASK_VERIFY;
	return b->sample[r] ? ASK_TOKEN : ASK_NONE;
}

/* Row r's sample context at its logits row j: j outputs further (a verify row's drafts), the
 * j-th mask. */
static struct bn_sample_ctx ctx_at(const struct bn_batch *b, uint32_t r, uint32_t j,
				   uint32_t n_vocab)
{
	struct bn_sample_ctx ctx = *b->sample[r];
	for (uint32_t i = 0; i < j; i++)
		bn_sample_ctx_next(&ctx, n_vocab);
	return ctx;
}

static struct bn_cuda_sample_row rank_row(const struct bn_sample_ctx *ctx, uint32_t logit_row,
					  uint32_t mask)
{
	const struct bn_sampling *p = ctx->params;
	return (struct bn_cuda_sample_row){
		.logit_row = logit_row, .temperature = p->temperature, .top_k = p->top_k,
		.top_p = p->top_p, .min_p = p->min_p, .u = bn_sample_uniform(p->seed, ctx->n_output),
		.n_top = p->want_logprobs ? p->n_logprobs : 0, .want_logprob = p->want_logprobs,
		.mask = mask,
	};
}

void cuda_rows_count(const struct bn_batch *b, struct cuda_rows_shape *s)
{
	*s = (struct cuda_rows_shape){ 0 };
	for (uint32_t r = 0; r < b->n_rows; r++) {
		uint32_t first, n = bn_batch_logit_rows(b, r, &first);
		enum ask a = ask_of(b, r);
		s->n_out += n;
		if (a == ASK_SCORE) {
			s->n_score += n;
			s->n_rank += b->score[r]->n_top ? n : 0;
		} else if (a != ASK_NONE) {
			const struct bn_sample_ctx *c = b->sample[r];
			for (uint32_t j = 0; j < n; j++)
				s->n_pen += c->n_prompt + c->n_output + j;
			s->n_rank += plain_greedy(c) ? 0 : n;
			s->n_masks += c->mask ? n : 0;
		}
	}
}

void cuda_rows_tokens(const struct bn_batch *b, uint32_t *out_rows)
{
	uint32_t t = 0, o = 0;
	for (uint32_t r = 0; r < b->n_rows; r++) {
		uint32_t first, n = bn_batch_logit_rows(b, r, &first);
		for (uint32_t j = 0; j < n; j++)
			out_rows[o++] = t + first + j;
		t += b->lens[r];
	}
}

/* Where cuda_rows_fill writes, and how far it got. */
struct fill {
	const struct cuda_rows_inputs *in;
	uint32_t n_pen, n_rank, n_score, n_masks;
};

/* A sampled logits row o: its penalty entries, its allowed tokens, and its ranking row unless
 * plain greedy. */
static int fill_sampled(struct cuda_rows *h, const struct bn_sample_ctx *ctx, uint32_t o,
			uint32_t n_vocab, struct fill *f)
{
	const struct bn_sampling *p = ctx->params;
	if (p->want_logprobs && p->n_logprobs > BN_CUDA_MAX_TOP)
		return -EINVAL;
	uint32_t room = ctx->n_prompt + ctx->n_output;
	if (room > h->cap) {
		struct bn_penalty *l = realloc(h->list, room * sizeof(*l));
		if (!l)
			return -ENOMEM;
		h->list = l;
		h->cap = room;
	}
	uint32_t n = bn_sample_penalties(&h->sampler, ctx, n_vocab, h->list);
	for (uint32_t i = 0; i < n; i++)
		f->in->pen[f->n_pen++] = (struct bn_cuda_penalty){ o, h->list[i].token,
								   h->list[i].repeat,
								   h->list[i].subtract };
	uint32_t mask = BN_CUDA_NO_MASK, words = bn_sample_mask_words(n_vocab);
	if (ctx->mask) {
		mask = f->n_masks++;
		memcpy(f->in->masks + (size_t)mask * words, ctx->mask, words * sizeof(uint64_t));
	}
	f->in->row_mask[o] = mask;
	if (!plain_greedy(ctx))
		f->in->rank[f->n_rank++] = rank_row(ctx, o, mask);
	return 0;
}

/* A scored row's logits rows o .. o + n - 1: their targets, and their alternatives as
 * ranking rows at temperature 0 (the token they pick is not read). */
static int fill_scored(const struct bn_score_row *sr, uint32_t o, uint32_t n, uint32_t n_vocab,
		       struct fill *f)
{
	if (sr->n_top > BN_CUDA_MAX_TOP)
		return -EINVAL;
	for (uint32_t j = 0; j < n; j++) {
		if (sr->targets[j] >= n_vocab)
			return -EINVAL;
		f->in->score[f->n_score++] = (struct bn_cuda_score_row){ o + j, sr->targets[j] };
		f->in->row_mask[o + j] = BN_CUDA_NO_MASK;
		if (sr->n_top)
			f->in->rank[f->n_rank++] = (struct bn_cuda_sample_row){
				.logit_row = o + j, .n_top = sr->n_top, .mask = BN_CUDA_NO_MASK };
	}
	return 0;
}

int cuda_rows_fill(struct cuda_rows *h, const struct bn_batch *b, uint32_t n_vocab,
		   const struct cuda_rows_inputs *in, struct cuda_rows_shape *s)
{
	struct fill f = { .in = in };
	uint32_t o = 0;
	int rc = 0;
	for (uint32_t r = 0; r < b->n_rows && rc == 0; r++) {
		uint32_t first, n = bn_batch_logit_rows(b, r, &first);
		enum ask a = ask_of(b, r);
		if (a == ASK_SCORE)
			rc = fill_scored(b->score[r], o, n, n_vocab, &f);
		for (uint32_t j = 0; j < n && rc == 0 && (a == ASK_TOKEN || a == ASK_VERIFY); j++) {
			struct bn_sample_ctx ctx = ctx_at(b, r, j, n_vocab);
			rc = fill_sampled(h, &ctx, o + j, n_vocab, &f);
		}
		o += n;
	}
	s->n_pen = f.n_pen;
	return rc;
}

/* ---- answers ------------------------------------------------------------------------------ */

size_t cuda_answers_bytes(uint32_t rows)
{
	return (size_t)rows * (sizeof(uint32_t) + sizeof(float) +
			       sizeof(struct bn_cuda_sample_result));
}

struct cuda_answers cuda_answers_at(void *base, uint32_t rows)
{
	struct cuda_answers a = { .tokens = base };
	a.score = (float *)(a.tokens + rows);
	a.ranked = (struct bn_cuda_sample_result *)(a.score + rows);
	return a;
}

size_t cuda_answers_back(uint32_t rows, uint32_t n_rank)
{
	return (size_t)rows * (sizeof(uint32_t) + sizeof(float)) +
	       (size_t)n_rank * sizeof(struct bn_cuda_sample_result);
}

uint32_t cuda_rows_rank_group(uint32_t n_vocab)
{
	size_t per_row = bn_cuda_sample_scratch_bytes(n_vocab, 1);
	uint64_t n = per_row ? RANK_SCRATCH_BYTES / per_row : 1;
	return n > 1 ? (n < UINT32_MAX ? (uint32_t)n : UINT32_MAX) : 1;
}

int cuda_rows_answer(const struct cuda_rows_device *d, const struct cuda_rows_shape *s,
		     cudaStream_t stream)
{
	uint32_t nv = d->n_vocab, group = cuda_rows_rank_group(nv);
	const uint64_t *masks = s->n_masks ? d->masks : NULL;
	int rc = bn_cuda_penalize(d->logits, nv, d->pen, s->n_pen, stream);
	rc = rc ? rc : bn_cuda_argmax(d->logits, nv, nv, s->n_out, masks, d->row_mask,
				      d->out.tokens, stream);
	for (uint32_t k = 0; k < s->n_rank && rc == 0; k += group) {
		uint32_t n = s->n_rank - k < group ? s->n_rank - k : group;
		rc = bn_cuda_sample(d->logits, nv, nv, d->rank + k, n, masks, d->scratch,
				    d->scratch_bytes, d->out.ranked + k, stream);
	}
	return rc ? rc : bn_cuda_score(d->logits, nv, nv, d->score, s->n_score, d->out.score, stream);
}

/* One answer: the token (the argmax, or the ranking's when the row was ranked) and, from the
 * ranking, the log-probabilities asked for. */
static void put(struct bn_sample_out *so, uint32_t token, float logprob,
		const struct bn_cuda_sample_result *x)
{
	*so = (struct bn_sample_out){ .top = so->top, .token = token, .logprob = logprob };
	if (!x)
		return;
	so->n_top = so->top ? x->n_top : 0;
	for (uint32_t i = 0; i < so->n_top; i++)
		so->top[i] = (struct bn_token_logprob){ x->top[i].token, x->top[i].logprob };
}

static void put_sampled(struct bn_sample_out *so, const struct bn_sample_ctx *ctx,
			const struct cuda_answers *a, uint32_t o, uint32_t *k)
{
	if (plain_greedy(ctx)) {
		put(so, a->tokens[o], 0.0f, NULL);
		return;
	}
	const struct bn_cuda_sample_result *x = &a->ranked[(*k)++];
	put(so, x->token, x->logprob, x);
}

void cuda_rows_collect(const struct bn_batch *b, const struct cuda_answers *a,
		       struct bn_sample_out *out)
{
	uint32_t o = 0, k = 0, q = 0;
	for (uint32_t r = 0; r < b->n_rows; r++) {
		uint32_t first, n = bn_batch_logit_rows(b, r, &first);
		enum ask ask = ask_of(b, r);
		for (uint32_t j = 0; j < n; j++) {
			if (ask == ASK_SCORE) {
				const struct bn_score_row *sr = b->score[r];
				put(&sr->out[j], sr->targets[j], a->score[q++],
				    sr->n_top ? &a->ranked[k++] : NULL);
			} else {
				struct bn_sample_out *so = ask == ASK_VERIFY ? &b->verify[r][j] : &out[r];
				put_sampled(so, b->sample[r], a, o + j, &k);
			}
		}
		o += n;
	}
}

/* ---- the second draw ----------------------------------------------------------------------- */

#define DONE UINT32_MAX

static struct bn_sample_out *answer_of(const struct bn_batch *b, uint32_t r, uint32_t j,
				       struct bn_sample_out *out)
{
	return ask_of(b, r) == ASK_VERIFY ? &b->verify[r][j] : &out[r];
}

/* Whether row r is sampled again at position j + 1: a verify row whose token at j is the
 * draft that follows it (as the cpu's verify_row goes on). */
static int goes_on(const struct bn_batch *b, uint32_t r, uint32_t j, uint32_t token)
{
	return ask_of(b, r) == ASK_VERIFY && j + 1 < b->lens[r] &&
	       token == b->tokens[(size_t)r * b->width + j + 1];
}

/* Room for one redrawn position a batch row: the cursors, and the ranking rows with their
 * bitsets, host and device alike. */
static int reserve_redraw(struct cuda_rows *h, uint32_t n_rows, size_t words, size_t *rows_bytes)
{
	if (n_rows > h->rows_cap) {
		uint32_t *c = realloc(h->cursor, n_rows * sizeof(*c));
		if (c)
			h->cursor = c;
		uint32_t *a = c ? realloc(h->redraw_at, 2 * (size_t)n_rows * sizeof(*a)) : NULL;
		if (!a)
			return -ENOMEM;
		h->redraw_at = a;
		h->rows_cap = n_rows;
	}
	*rows_bytes = (n_rows * sizeof(struct bn_cuda_sample_row) + 255) / 256 * 256;
	size_t bytes = *rows_bytes + (size_t)n_rows * words * sizeof(uint64_t);
	if (bytes <= h->redraw_cap)
		return 0;
	cudaFreeHost(h->redraw_host);
	cudaFree(h->redraw_dev);
	h->redraw_host = h->redraw_dev = NULL;
	h->redraw_cap = 0;
	cudaError_t e = cudaMallocHost(&h->redraw_host, bytes);
	e = e ? e : cudaMalloc(&h->redraw_dev, bytes);
	if (e)
		return (int)e;
	h->redraw_cap = bytes;
	return 0;
}

/* Row r's checks from its cursor on: the first position refused becomes ranking row n of the
 * second draw (its tokens' bitset copied at once: the check's is valid until its next call).
 * Returns 1 for a refused position, 0 when the row has none left. */
static int next_refused(struct cuda_rows *h, const struct bn_batch *b, uint32_t r,
			uint32_t first_logit, uint32_t n_vocab, struct bn_sample_out *out,
			size_t rows_bytes, uint32_t n)
{
	size_t words = bn_sample_mask_words(n_vocab);
	uint32_t n_pos = ask_of(b, r) == ASK_VERIFY ? b->lens[r] : 1;
	for (uint32_t j = h->cursor[r]; j < n_pos; j++) {
		struct bn_sample_ctx ctx = ctx_at(b, r, j, n_vocab);
		uint32_t token = answer_of(b, r, j, out)->token;
		const uint64_t *instead = ctx.check->redraw(ctx.check, ctx.n_output, token);
		if (instead) {
			struct bn_cuda_sample_row *rows = h->redraw_host;
			uint64_t *masks = (uint64_t *)(void *)((char *)h->redraw_host + rows_bytes);
			rows[n] = rank_row(&ctx, first_logit + j, n);
			memcpy(masks + (size_t)n * words, instead, words * sizeof(uint64_t));
			h->redraw_at[2 * n] = r;
			h->redraw_at[2 * n + 1] = j;
			return 1;
		}
		if (!goes_on(b, r, j, token))
			break;
	}
	h->cursor[r] = DONE;
	return 0;
}

/* One pass of the second draw: n ranking rows uploaded, ranked in groups, the results back
 * into the refused positions' answers; a verify row whose new token is its draft is checked
 * on from the next position. 0 or a CUDA error. */
static int redraw_pass(struct cuda_rows *h, const struct bn_batch *b,
		       const struct cuda_rows_device *d, const struct cuda_answers *host,
		       struct bn_sample_out *out, uint32_t n, size_t rows_bytes, cudaStream_t stream)
{
	size_t words = bn_sample_mask_words(d->n_vocab);
	size_t bytes = rows_bytes + (size_t)n * words * sizeof(uint64_t);
	const struct bn_cuda_sample_row *rows = h->redraw_dev;
	const uint64_t *masks = (const uint64_t *)(const void *)((char *)h->redraw_dev + rows_bytes);
	int rc = cudaMemcpyAsync(h->redraw_dev, h->redraw_host, bytes, cudaMemcpyHostToDevice,
				 stream);
	uint32_t group = cuda_rows_rank_group(d->n_vocab);
	/* The results go where the first pass's went: they have been read. */
	for (uint32_t k = 0; k < n && rc == 0; k += group) {
		uint32_t g = n - k < group ? n - k : group;
		rc = bn_cuda_sample(d->logits, d->n_vocab, d->n_vocab, rows + k, g, masks,
				    d->scratch, d->scratch_bytes, d->out.ranked + k, stream);
	}
	if (rc == 0)
		rc = cudaMemcpyAsync(host->ranked, d->out.ranked, n * sizeof(*host->ranked),
				     cudaMemcpyDeviceToHost, stream);
	if (rc == 0)
		rc = cudaStreamSynchronize(stream);
	for (uint32_t k = 0; k < n && rc == 0; k++) {
		uint32_t r = h->redraw_at[2 * k], j = h->redraw_at[2 * k + 1];
		const struct bn_cuda_sample_result *x = &host->ranked[k];
		put(answer_of(b, r, j, out), x->token, x->logprob, x);
		h->cursor[r] = goes_on(b, r, j, x->token) ? j + 1 : DONE;
	}
	return rc;
}

int cuda_rows_redraw(struct cuda_rows *h, const struct bn_batch *b,
		     const struct cuda_rows_device *d, const struct cuda_answers *host,
		     struct bn_sample_out *out, cudaStream_t stream)
{
	size_t rows_bytes;
	int checked = 0;
	for (uint32_t r = 0; r < b->n_rows && !checked; r++)
		checked = ask_of(b, r) != ASK_SCORE && b->sample[r] && b->sample[r]->check;
	if (!checked)
		return 0;
	int rc = reserve_redraw(h, b->n_rows, bn_sample_mask_words(d->n_vocab), &rows_bytes);
	if (rc)
		return rc;
	for (uint32_t r = 0; r < b->n_rows; r++) {
		enum ask a = ask_of(b, r);
		h->cursor[r] = (a == ASK_TOKEN || a == ASK_VERIFY) && b->sample[r]->check ? 0 : DONE;
	}
	for (;;) { /* a pass a refused position; a verify row may need one per draft */
		uint32_t n = 0;
		for (uint32_t r = 0, o = 0, first; r < b->n_rows; r++) {
			uint32_t rows = bn_batch_logit_rows(b, r, &first);
			if (h->cursor[r] != DONE)
				n += (uint32_t)next_refused(h, b, r, o, d->n_vocab, out, rows_bytes, n);
			o += rows;
		}
		if (n == 0)
			return 0;
		if ((rc = redraw_pass(h, b, d, host, out, n, rows_bytes, stream)) != 0)
			return rc;
	}
}
