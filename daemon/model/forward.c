/* SPDX-License-Identifier: MIT */
/*
 * forward.c — the batched forward pass. The new tokens of all rows are flattened into one
 * [n_tok x dim] activation matrix (no padding), every weight matrix is applied to all of them
 * at once (one weight read per step, not per row), and attention runs per (row, head) over
 * that row's own KV cache, so a row never sees another row's data. Work is split over the
 * pool by output-row chunks x token blocks; each task writes its own outputs.
 */
#include "forward.h"
#include "head_screen.h"
#include "quant.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define TOKEN_BLOCK 64    /* tokens per gemm task: their int8 rows stay in L2 (64 x 7 KB) */
#define ROW_CHUNK_MIN 16  /* output rows per gemm task, at least */
#define ELEM_BLOCK 8      /* tokens per element-wise task */
#define SIMPLE_BLOCK_TOKENS 16 /* bn_forward_kv_init_simple */
/* LM-head rows a Q8_0 / Q6_K task decodes at a time: 160 KB of floats at 2560 inputs, in L2
 * while the float kernel reads them, and a fixed buffer per thread instead of an allocation
 * per task that grew with the vocabulary (a 128k head's task chunk was 160 MB). */
#define DECODE_ROWS 16
/* Token blocks of at most this many rows read the T3 copies (bn_forward_use_t3): one. From two
 * rows on a step is no longer bound by the bytes alone, and decoding base 3 costs more
 * instructions than the 2-bit planes (2B4T shape, screened greedy decode, alternating in one
 * process: batch 1 1.10-1.16x the 2-bit rate; 2 or 4 rows through the T3 kernel 0.79-0.80x in
 * every round). */
#define T3_ROWS 1

struct bn_forward {
	const struct bn_model *m;
	struct bn_pool *pool;
	const struct bn_kernels *kern;
	uint32_t max_seqs;
	uint32_t *seq_len;  /* [max_seqs] positions each sequence holds */
	/* KV arena: [n_layer][n_blocks][block_tokens][kv_dim] for keys, the same for values. */
	float *kv_k, *kv_v;
	size_t kv_bytes;    /* of each of the two mappings */
	uint32_t kv_blocks, kv_block_tokens;
	uint32_t *simple_tables; /* bn_forward_kv_init_simple: [max_seqs][simple_max_blocks] */
	uint32_t simple_max_blocks;
	uint32_t q_dim, kv_dim, widest;
	/* scratch for n_cap tokens */
	uint32_t n_cap;
	float *x;        /* [n][n_embd] residual stream */
	float *xb;       /* [n][widest] normed inputs, projections out */
	float *q;        /* [n][q_dim] */
	float *k, *v;    /* [n][kv_dim] new keys and values */
	float *att;      /* [n][q_dim] */
	float *gate, *up;/* [n][n_ff] */
	float *rope_cs;  /* [n][rope_dim] cos, sin of each pair at the token's position */
	float *rope_freq;/* [rope_dim / 2] angle per position of each pair, fixed by the model */
	float *attn_scores; /* [pool threads][group][n_ctx]: attention scratch of each thread */
	float *decode_rows; /* [pool threads][DECODE_ROWS][n_embd]: a Q8_0 / Q6_K LM head's rows */
	struct bn_q8_rows xq; /* [n][k_pad of widest] */
	uint32_t *tok_row, *tok_pos; /* [n] */
	struct bn_head_screen_run *screen; /* NULL: every row gets the full LM head */
	const struct bn_head_screen *screen_src; /* the screen's int8 copy, to read ahead */
	struct bn_head_screen_stats screen_stats;
	int screened;               /* the last run's logits came from the screen */
	struct bn_linear int8_head; /* kind BN_LINEAR_I8: every row's logits come from it */
	bn_t3_gemm_fn t3_gemm;      /* reads the model's T3 copies in decode steps; or NULL */
	int read_ahead;             /* bn_forward_set_read_ahead; on from the start */
};

/* ------------------------------------------------------------------------------------------ */
/* Matrix jobs: up to three matrices sharing one input, tasks = row chunks x token blocks      */
/* ------------------------------------------------------------------------------------------ */

struct gemm_job {
	const struct bn_kernels *kern;
	uint32_t n_mats;
	const struct bn_linear *w[3];
	float *y[3];
	uint32_t ldy[3];
	uint32_t chunk[3], n_chunks[3];
	const float *x;            /* float input (FLOAT, DECODE) */
	uint32_t ldx;
	const struct bn_q8_rows *xq; /* int8 input (T2, I8) */
	uint32_t n_tok, n_blocks;
	float *decode_rows;        /* bn_forward's, for DECODE matrices */
	bn_t3_gemm_fn t3_gemm;     /* NULL: no T3 decode copies in use */
};

/* Q8_0 / Q6_K rows: DECODE_ROWS at a time decoded to F32 into this thread's buffer, then
 * through the float kernel. A row's result does not depend on which rows share its slice
 * (kernels.h), so it is the same alone and in a batch. */
static void gemm_decode(const struct gemm_job *j, const struct bn_linear *w, uint32_t o0,
			uint32_t o1, const float *x, uint32_t n_b, float *y, uint32_t ldy)
{
	float *rows = j->decode_rows + (size_t)bn_pool_thread_index() * DECODE_ROWS * w->n_in;
	const struct bn_gguf_tensor *t = w->src;
	for (uint32_t s0 = o0; s0 < o1; s0 += DECODE_ROWS) {
		uint32_t s1 = o1 - s0 < DECODE_ROWS ? o1 : s0 + DECODE_ROWS;
		for (uint32_t o = s0; o < s1; o++)
			bn_dequant_row(t->type, t->data, t->size, o, w->n_in,
				       rows + (size_t)(o - s0) * w->n_in);
		struct bn_f_matrix f = { .data = rows, .type = BN_TYPE_F32, .n_in = w->n_in,
					 .n_out = s1 - s0,
					 .row_bytes = (uint64_t)w->n_in * sizeof(float) };
		j->kern->f_gemm(&f, 0, s1 - s0, x, j->ldx, n_b, y + s0, ldy);
	}
}

/* Whether a token block of n_b rows reads w's T3 copy (t3: the forward's T3 kernel or NULL). */
static int reads_t3(const struct bn_linear *w, bn_t3_gemm_fn t3, uint32_t n_b)
{
	return w->kind == BN_LINEAR_T2 && w->t3.codes && t3 && n_b <= T3_ROWS;
}

static void gemm_task(void *ctx, uint32_t task)
{
	const struct gemm_job *j = ctx;
	uint32_t m = 0;
	while (task >= j->n_chunks[m] * j->n_blocks)
		task -= j->n_chunks[m++] * j->n_blocks;
	const struct bn_linear *w = j->w[m];
	uint32_t c = task / j->n_blocks, blk = task % j->n_blocks;
	uint32_t o0 = c * j->chunk[m], o1 = o0 + j->chunk[m] < w->n_out ? o0 + j->chunk[m] : w->n_out;
	uint32_t b0 = blk * TOKEN_BLOCK;
	uint32_t n_b = j->n_tok - b0 < TOKEN_BLOCK ? j->n_tok - b0 : TOKEN_BLOCK;
	float *y = j->y[m] + (size_t)b0 * j->ldy[m];
	if (w->kind == BN_LINEAR_T2 || w->kind == BN_LINEAR_I8) {
		struct bn_q8_rows xs = *j->xq;
		xs.q += (size_t)b0 * xs.k_pad;
		xs.inv_scale += b0;
		xs.sum += b0;
		if (reads_t3(w, j->t3_gemm, n_b))
			j->t3_gemm(&w->t3, o0, o1, &xs, n_b, y, j->ldy[m]);
		else if (w->kind == BN_LINEAR_T2)
			j->kern->t2_gemm(&w->t2, o0, o1, &xs, n_b, y, j->ldy[m]);
		else
			j->kern->i8_gemm(&w->i8, o0, o1, &xs, n_b, y, j->ldy[m]);
	} else if (w->kind == BN_LINEAR_FLOAT) {
		j->kern->f_gemm(&w->f, o0, o1, j->x + (size_t)b0 * j->ldx, j->ldx, n_b, y, j->ldy[m]);
	} else {
		gemm_decode(j, w, o0, o1, j->x + (size_t)b0 * j->ldx, n_b, y, j->ldy[m]);
	}
}

struct quant_job {
	const struct bn_kernels *kern;
	const float *x;
	uint32_t ldx, n;
	struct bn_q8_rows *out;
};

static void quant_task(void *ctx, uint32_t task)
{
	const struct quant_job *j = ctx;
	uint32_t r0 = task * ELEM_BLOCK, n = j->n - r0 < ELEM_BLOCK ? j->n - r0 : ELEM_BLOCK;
	struct bn_q8_rows part = *j->out;
	part.q += (size_t)r0 * part.k_pad;
	part.inv_scale += r0;
	part.sum += r0;
	j->kern->quantize_rows(j->x + (size_t)r0 * j->ldx, j->ldx, n, &part);
}

static uint32_t div_up(uint32_t a, uint32_t b)
{
	return (a + b - 1) / b;
}

/* How many row chunks of each matrix a thread gets. Up to four tokens the matrices are read
 * from memory once per step and the time is the time of the stream: one chunk per thread
 * keeps each thread on one sequential stream, where four restarted the prefetch four times
 * per matrix. 2B4T shape, batch 1, the two alternating in one process (three runs of
 * 120-150 rounds of 6 steps): 0.969-0.986 of the time with four, in the fast and the slow
 * memory state alike. Larger batches are compute-bound and keep four, so that a thread that
 * finishes early can take work from one that is slowed down. With a busy loop on one of the
 * two cores, one chunk per thread costs ~5 % more at batch 1 than four. */
static uint32_t chunks_per_thread(uint32_t n_tok)
{
	return n_tok <= 4 ? 1 : 4;
}

/* Row chunks start on whole tiles: 4 rows, or a whole group of the panel layout, which a
 * kernel computes whole even when asked for part of it. */
static uint32_t row_alignment(const struct bn_linear *w)
{
	return w->kind == BN_LINEAR_FLOAT && w->f.panel_rows ? w->f.panel_rows : 4;
}

/* Output rows per task when n_out rows go to `parts` tasks: at least ROW_CHUNK_MIN, whole
 * multiples of align. */
static uint32_t row_chunk(uint32_t n_out, uint32_t parts, uint32_t align)
{
	uint32_t chunk = div_up(n_out, parts);
	chunk = chunk < ROW_CHUNK_MIN ? ROW_CHUNK_MIN : chunk;
	return div_up(chunk, align) * align;
}

/* y_i = W_i x for up to three matrices with the same input x [n_tok][ldx]. */
static void linear_multi(struct bn_forward *f, uint32_t n_mats, const struct bn_linear *const *w,
			 float *const *y, const uint32_t *ldy, const float *x, uint32_t ldx,
			 uint32_t n_tok)
{
	struct gemm_job j = { .kern = f->kern, .n_mats = n_mats, .x = x, .ldx = ldx,
			      .xq = &f->xq, .n_tok = n_tok, .n_blocks = div_up(n_tok, TOKEN_BLOCK),
			      .decode_rows = f->decode_rows, .t3_gemm = f->t3_gemm };
	int int8_input = 0;
	uint32_t n_tasks = 0, threads = bn_pool_threads(f->pool);
	for (uint32_t i = 0; i < n_mats; i++) {
		j.w[i] = w[i];
		j.y[i] = y[i];
		j.ldy[i] = ldy[i];
		uint32_t chunk = row_chunk(w[i]->n_out, chunks_per_thread(n_tok) * threads,
					   row_alignment(w[i]));
		j.chunk[i] = chunk;
		j.n_chunks[i] = div_up(w[i]->n_out, chunk);
		n_tasks += j.n_chunks[i] * j.n_blocks;
		int8_input |= w[i]->kind == BN_LINEAR_T2 || w[i]->kind == BN_LINEAR_I8;
	}
	if (int8_input) {
		f->xq.k = w[0]->n_in;
		f->xq.k_pad = bn_q8_k_pad(w[0]->n_in);
		struct quant_job qj = { .kern = f->kern, .x = x, .ldx = ldx, .n = n_tok, .out = &f->xq };
		bn_pool_run(f->pool, div_up(n_tok, ELEM_BLOCK), quant_task, &qj);
	}
	bn_pool_run(f->pool, n_tasks, gemm_task, &j);
}

static void linear1(struct bn_forward *f, const struct bn_linear *w, float *y, uint32_t ldy,
		    const float *x, uint32_t ldx, uint32_t n_tok)
{
	linear_multi(f, 1, &w, &y, &ldy, x, ldx, n_tok);
}

/* ------------------------------------------------------------------------------------------ */
/* Read-ahead: what the next matrix job reads first, prefetched while the pool waits           */
/* ------------------------------------------------------------------------------------------ */

/* A decode step of a few tokens is bound by the bytes of its matrices, but between two matrix
 * jobs memory sits idle: the joins, and the norms, RoPE, attention and quantizing the caller
 * does meanwhile (about 1 ms of a 13-17 ms 2B4T step). Each thread prefetches the first
 * READ_AHEAD_BYTES of its chunk of the next matrix then (bn_pool_set_ahead), a quarter of a
 * 1 MB L2. 2B4T shape, base3 + int8 head, alternating in one process (bench-model
 * --serial-only), roofline medians per memory state: +0.1-1.6 % (PERFORMANCE.md). */
#define READ_AHEAD_BYTES (256u << 10)

/* Read-ahead spans of a matrix of rows: the first bytes of each thread's chunk as
 * linear_multi splits it for steps of up to four tokens (one chunk per thread). */
static void ahead_rows(struct bn_forward *f, const uint8_t *base, uint32_t row_bytes,
		       uint32_t n_out, uint32_t n_tok)
{
	uint32_t threads = bn_pool_threads(f->pool);
	if (!f->read_ahead || !base || chunks_per_thread(n_tok) != 1 ||
	    threads > BN_POOL_AHEAD_SPANS) {
		bn_pool_set_ahead(f->pool, NULL);
		return;
	}
	uint32_t chunk = row_chunk(n_out, threads, 4); /* rows, not float panels */
	struct bn_pool_ahead a = { .n = threads };
	for (uint32_t i = 0; i < threads; i++) {
		uint32_t o0 = i * chunk < n_out ? i * chunk : n_out;
		uint32_t o1 = o0 + chunk < n_out ? o0 + chunk : n_out;
		size_t bytes = (size_t)(o1 - o0) * row_bytes;
		a.start[i] = base + (size_t)o0 * row_bytes;
		a.bytes[i] = bytes < READ_AHEAD_BYTES ? bytes : READ_AHEAD_BYTES;
	}
	bn_pool_set_ahead(f->pool, &a);
}

/* The job after the one about to run will read w first. */
static void read_ahead(struct bn_forward *f, const struct bn_linear *w, uint32_t n_tok)
{
	if (reads_t3(w, f->t3_gemm, n_tok))
		ahead_rows(f, w->t3.codes, w->t3.row_bytes, w->n_out, n_tok);
	else if (w->kind == BN_LINEAR_T2)
		ahead_rows(f, w->t2.codes, w->t2.row_bytes, w->n_out, n_tok);
	else if (w->kind == BN_LINEAR_I8)
		ahead_rows(f, (const uint8_t *)w->i8.q, w->i8.row_bytes, w->n_out, n_tok);
	else
		bn_pool_set_ahead(f->pool, NULL);
}

/* After the last layer: the LM head's int8 rows, where the step reads them. */
static void read_ahead_head(struct bn_forward *f, uint32_t n_tok)
{
	if (f->int8_head.kind == BN_LINEAR_I8)
		read_ahead(f, &f->int8_head, n_tok);
	else if (f->screen_src)
		ahead_rows(f, (const uint8_t *)f->screen_src->w.q, f->screen_src->w.row_bytes,
			   f->screen_src->w.n_out, n_tok);
	else
		bn_pool_set_ahead(f->pool, NULL);
}

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

/* g[i] = act(g[i]) * u[i]. */
static void gate_activation(const struct bn_kernels *kern, enum bn_activation act, float *g,
			    const float *u, uint32_t n)
{
	if (act == BN_ACT_RELU2) {
		kern->relu2_mul(g, u, n);
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

enum elem_op { ELEM_ATTN_NORM, ELEM_ROPE, ELEM_ATTN_SUB_NORM, ELEM_RESIDUAL_FFN_NORM,
	       ELEM_GATE, ELEM_RESIDUAL };

struct elem_job {
	struct bn_forward *f;
	const struct bn_layer *L;
	enum elem_op op;
	uint32_t n_tok;
};

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
	case ELEM_ROPE:
		for (uint32_t h = 0; h < c->n_head; h++)
			rope_apply(c, f->q + (size_t)t * f->q_dim + h * c->head_dim,
				   f->rope_cs + (size_t)t * c->rope_dim);
		for (uint32_t h = 0; h < c->n_head_kv; h++)
			rope_apply(c, f->k + (size_t)t * f->kv_dim + h * c->head_dim,
				   f->rope_cs + (size_t)t * c->rope_dim);
		break;
	case ELEM_ATTN_SUB_NORM: {
		float *a = f->att + (size_t)t * f->q_dim;
		f->kern->rmsnorm(a, a, L->attn_sub_norm, f->q_dim, c->rms_eps);
		break;
	}
	case ELEM_RESIDUAL_FFN_NORM:
		f->kern->add(x, xb, c->n_embd);
		f->kern->rmsnorm(xb, x, L->ffn_norm, c->n_embd, c->rms_eps);
		break;
	case ELEM_GATE: {
		float *g = f->gate + (size_t)t * c->n_ff, *u = f->up + (size_t)t * c->n_ff;
		gate_activation(f->kern, c->act, g, u, c->n_ff);
		if (L->ffn_sub_norm)
			f->kern->rmsnorm(g, g, L->ffn_sub_norm, c->n_ff, c->rms_eps);
		break;
	}
	case ELEM_RESIDUAL:
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

static void elementwise(struct bn_forward *f, const struct bn_layer *L, enum elem_op op,
			uint32_t n_tok)
{
	struct elem_job j = { .f = f, .L = L, .op = op, .n_tok = n_tok };
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

static const uint32_t *row_blocks(const struct bn_forward *f, const struct bn_batch *b,
				  uint32_t r);

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
	size_t layer_off = (size_t)j->layer * f->kv_blocks * f->kv_block_tokens * f->kv_dim;
	struct bn_kv_view kv = {
		.K = f->kv_k + layer_off + (size_t)kvh * c->head_dim,
		.V = f->kv_v + layer_off + (size_t)kvh * c->head_dim,
		.blocks = row_blocks(f, j->b, r),
		.block_tokens = f->kv_block_tokens,
		.ld = f->kv_dim,
		.block_stride = (size_t)f->kv_block_tokens * f->kv_dim,
	};
	float *S = f->attn_scores + (size_t)bn_pool_thread_index() * group * c->n_ctx;
	size_t off = (size_t)t * f->q_dim + (size_t)kvh * group * c->head_dim;
	f->kern->attend_heads(f->q + off, group, &kv, pos + 1, c->head_dim,
			      1.0f / sqrtf((float)c->head_dim), S, f->att + off);
}

/* ------------------------------------------------------------------------------------------ */
/* KV cache and scratch                                                                        */
/* ------------------------------------------------------------------------------------------ */

static void unmap_kv(struct bn_forward *f)
{
	if (f->kv_k)
		munmap(f->kv_k, f->kv_bytes);
	if (f->kv_v)
		munmap(f->kv_v, f->kv_bytes);
	f->kv_k = f->kv_v = NULL;
	f->kv_blocks = 0;
}

/* Anonymous mappings: pages cost memory only once a block is first written, so a pool
 * sized for the worst case costs what is used. */
int bn_forward_kv_init(struct bn_forward *f, uint32_t n_blocks, uint32_t block_tokens)
{
	unmap_kv(f);
	const struct bn_model_config *c = &f->m->cfg;
	if (n_blocks == 0 || block_tokens == 0)
		return -EINVAL;
	f->kv_bytes = (size_t)c->n_layer * n_blocks * block_tokens * f->kv_dim * sizeof(float);
	void *k = mmap(NULL, f->kv_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *v = mmap(NULL, f->kv_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	f->kv_k = k == MAP_FAILED ? NULL : k;
	f->kv_v = v == MAP_FAILED ? NULL : v;
	if (!f->kv_k || !f->kv_v) {
		unmap_kv(f);
		return -ENOMEM;
	}
	f->kv_blocks = n_blocks;
	f->kv_block_tokens = block_tokens;
	return 0;
}

int bn_forward_kv_init_simple(struct bn_forward *f, uint32_t max_len)
{
	uint32_t per_seq = (max_len + SIMPLE_BLOCK_TOKENS - 1) / SIMPLE_BLOCK_TOKENS;
	free(f->simple_tables);
	f->simple_tables = malloc((size_t)f->max_seqs * per_seq * sizeof(uint32_t));
	if (!f->simple_tables)
		return -ENOMEM;
	f->simple_max_blocks = per_seq;
	for (uint32_t i = 0; i < f->max_seqs * per_seq; i++)
		f->simple_tables[i] = i;
	return bn_forward_kv_init(f, f->max_seqs * per_seq, SIMPLE_BLOCK_TOKENS);
}

/* The block table of row r: the batch's, or the simple identity tables. */
static const uint32_t *row_blocks(const struct bn_forward *f, const struct bn_batch *b, uint32_t r)
{
	if (b->blocks)
		return b->blocks[r];
	return f->simple_tables + (size_t)b->seq[r] * f->simple_max_blocks;
}

/* The key (or value: base says which) of position `offset` of KV block `block` in layer li:
 * the arena is [n_layer][kv_blocks][kv_block_tokens][kv_dim]. */
static float *kv_at(const struct bn_forward *f, float *base, uint32_t li, uint32_t block,
		    uint32_t offset)
{
	size_t row = ((size_t)li * f->kv_blocks + block) * f->kv_block_tokens + offset;
	return base + row * f->kv_dim;
}

/* Where position pos of row r keeps its key (or value) in layer li. */
static float *kv_slot(const struct bn_forward *f, float *base, const struct bn_batch *b,
		      uint32_t r, uint32_t li, uint32_t pos)
{
	uint32_t block = row_blocks(f, b, r)[pos / f->kv_block_tokens];
	return kv_at(f, base, li, block, pos % f->kv_block_tokens);
}

static void *scratch(size_t n, size_t size)
{
	return aligned_alloc(64, (n * size + 63) / 64 * 64);
}

static void free_scratch(struct bn_forward *f)
{
	free(f->x);
	free(f->xb);
	free(f->q);
	free(f->k);
	free(f->v);
	free(f->att);
	free(f->gate);
	free(f->up);
	free(f->rope_cs);
	free(f->xq.q);
	free(f->xq.inv_scale);
	free(f->xq.sum);
	free(f->tok_row);
	free(f->tok_pos);
	memset(&f->xq, 0, sizeof(f->xq));
	f->x = f->xb = f->q = f->k = f->v = f->att = f->gate = f->up = f->rope_cs = NULL;
	f->tok_row = f->tok_pos = NULL;
	f->n_cap = 0;
}

static int scratch_reserve(struct bn_forward *f, uint32_t n)
{
	if (n <= f->n_cap)
		return 0;
	free_scratch(f);
	const struct bn_model_config *c = &f->m->cfg;
	uint32_t k_pad = bn_q8_k_pad(f->widest);
	f->x = scratch(n, c->n_embd * sizeof(float));
	f->xb = scratch(n, f->widest * sizeof(float));
	f->q = scratch(n, f->q_dim * sizeof(float));
	f->k = scratch(n, f->kv_dim * sizeof(float));
	f->v = scratch(n, f->kv_dim * sizeof(float));
	f->att = scratch(n, f->q_dim * sizeof(float));
	f->gate = scratch(n, c->n_ff * sizeof(float));
	f->up = scratch(n, c->n_ff * sizeof(float));
	f->rope_cs = scratch(n, c->rope_dim * sizeof(float));
	f->xq.q = scratch(n, k_pad);
	f->xq.inv_scale = scratch(n, sizeof(float));
	f->xq.sum = scratch(n, sizeof(int32_t));
	f->tok_row = scratch(n, sizeof(uint32_t));
	f->tok_pos = scratch(n, sizeof(uint32_t));
	if (!f->x || !f->xb || !f->q || !f->k || !f->v || !f->att || !f->gate || !f->up ||
	    !f->rope_cs || !f->xq.q || !f->xq.inv_scale || !f->xq.sum || !f->tok_row || !f->tok_pos) {
		free_scratch(f);
		return -ENOMEM;
	}
	f->n_cap = n;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The pass                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Every block the row touches exists (the tables come from the scheduler, or the simple
 * tables sized for max_len). */
static int blocks_valid(const struct bn_forward *f, const struct bn_batch *b, uint32_t r)
{
	if (!f->kv_blocks)
		return 0;
	uint32_t end = b->pos[r] + b->lens[r];
	uint32_t n = (end + f->kv_block_tokens - 1) / f->kv_block_tokens;
	if (!b->blocks && n > f->simple_max_blocks)
		return 0;
	const uint32_t *t = row_blocks(f, b, r);
	for (uint32_t i = 0; i < n; i++)
		if (t[i] >= f->kv_blocks)
			return 0;
	return 1;
}

static int check_batch(const struct bn_forward *f, const struct bn_batch *b, uint32_t *n_tok)
{
	const struct bn_model_config *c = &f->m->cfg;
	struct bn_batch_limits lim = { .seq_len = f->seq_len, .max_seqs = f->max_seqs,
				       .n_ctx = c->n_ctx, .n_vocab = c->n_vocab };
	int rc = bn_batch_check(&lim, b, n_tok);
	for (uint32_t r = 0; rc == 0 && r < b->n_rows; r++)
		if (!blocks_valid(f, b, r))
			rc = -EINVAL;
	return rc;
}

static void embed_tokens(struct bn_forward *f, const struct bn_batch *b, uint32_t *first_tok)
{
	const struct bn_model_config *c = &f->m->cfg;
	uint32_t t = 0, half = c->rope_dim / 2;
	for (uint32_t r = 0; r < b->n_rows; r++) {
		first_tok[r] = t;
		for (uint32_t i = 0; i < b->lens[r]; i++, t++) {
			f->tok_row[t] = r;
			f->tok_pos[t] = b->pos[r] + i;
			bn_model_embed(f->m, b->tokens[(size_t)r * b->width + i],
				       f->x + (size_t)t * c->n_embd);
			bn_rope_cos_sin(f->rope_freq, half, f->tok_pos[t],
					f->rope_cs + (size_t)t * c->rope_dim);
		}
	}
}

static void layer_forward(struct bn_forward *f, const struct bn_batch *b, uint32_t li,
			  uint32_t n_tok)
{
	const struct bn_model_config *c = &f->m->cfg;
	const struct bn_layer *L = &f->m->layers[li];
	elementwise(f, L, ELEM_ATTN_NORM, n_tok);
	const struct bn_linear *qkv[3] = { &L->wq, &L->wk, &L->wv };
	float *qkv_out[3] = { f->q, f->k, f->v };
	uint32_t qkv_ld[3] = { f->q_dim, f->kv_dim, f->kv_dim };
	read_ahead(f, &L->wo, n_tok);
	linear_multi(f, 3, qkv, qkv_out, qkv_ld, f->xb, f->widest, n_tok);
	elementwise(f, L, ELEM_ROPE, n_tok);
	for (uint32_t t = 0; t < n_tok; t++) {
		uint32_t r = f->tok_row[t], pos = f->tok_pos[t];
		memcpy(kv_slot(f, f->kv_k, b, r, li, pos), f->k + (size_t)t * f->kv_dim,
		       f->kv_dim * sizeof(float));
		memcpy(kv_slot(f, f->kv_v, b, r, li, pos), f->v + (size_t)t * f->kv_dim,
		       f->kv_dim * sizeof(float));
	}
	struct attn_job aj = { .f = f, .b = b, .n_tok = n_tok, .layer = li };
	bn_pool_run(f->pool, n_tok * c->n_head_kv, attn_task, &aj);
	if (L->attn_sub_norm)
		elementwise(f, L, ELEM_ATTN_SUB_NORM, n_tok);
	read_ahead(f, &L->w_gate, n_tok);
	linear1(f, &L->wo, f->xb, f->widest, f->att, f->q_dim, n_tok);
	elementwise(f, L, ELEM_RESIDUAL_FFN_NORM, n_tok);
	const struct bn_linear *gu[2] = { &L->w_gate, &L->w_up };
	float *gu_out[2] = { f->gate, f->up };
	uint32_t gu_ld[2] = { c->n_ff, c->n_ff };
	read_ahead(f, &L->w_down, n_tok);
	linear_multi(f, 2, gu, gu_out, gu_ld, f->xb, f->widest, n_tok);
	elementwise(f, L, ELEM_GATE, n_tok);
	if (li + 1 < c->n_layer)
		read_ahead(f, &f->m->layers[li + 1].wq, n_tok);
	else
		read_ahead_head(f, n_tok);
	linear1(f, &L->w_down, f->xb, f->widest, f->gate, c->n_ff, n_tok);
	elementwise(f, L, ELEM_RESIDUAL, n_tok);
}

/* The screen (head_screen.h) serves a batch of at most SCREEN_MAX_ROWS logits rows, each
 * for a token wanted only as the argmax. A batch with any other row (scored, sampled,
 * log-probabilities) takes the full head for all its rows: one pass over the head serves
 * them all, where the screen would be a second. Past eight rows the float head is
 * compute-bound and its panel kernel does more per instruction than the screen's int16 dot
 * products: 2B4T shape, screened over full decode rate, alternating in one process (make
 * bench-model): batch 1 1.42, batch 4 1.08, batch 8 1.14, batch 16 0.74. */
#define SCREEN_MAX_ROWS 8

static int screen_serves(const struct bn_forward *f, const struct bn_batch *b, uint32_t n_rows,
			 int all_positions)
{
	if (!f->screen || all_positions || !b->sample || n_rows > SCREEN_MAX_ROWS)
		return 0;
	for (uint32_t r = 0; r < b->n_rows; r++) {
		if (b->score && b->score[r])
			return 0;
		if (b->sample[r] && !bn_sample_argmax_allowed(b->sample[r]))
			return 0;
	}
	return 1;
}

/* Each logits row's mask, in output_logits' order: its row's, and a verify row's position j
 * the j-th of its row (bn_sample_ctx_next); NULL for an unconstrained row. */
static void screen_masks(const struct bn_forward *f, const struct bn_batch *b,
			 const uint64_t **masks)
{
	uint32_t n = 0, words = bn_sample_mask_words(f->m->cfg.n_vocab), first;
	for (uint32_t r = 0; r < b->n_rows; r++) {
		uint32_t count = bn_batch_logit_rows(b, r, &first);
		const uint64_t *m = b->sample[r] ? b->sample[r]->mask : NULL;
		for (uint32_t j = 0; j < count; j++)
			masks[n++] = m ? m + (size_t)j * words : NULL;
	}
}

/* The screen for the batch's n_out logits rows, when it serves them: 1 if it did. */
static int screen_logits(struct bn_forward *f, const struct bn_batch *b, uint32_t n_out,
			 float *logits, int all_positions)
{
	const uint64_t *masks[SCREEN_MAX_ROWS];
	if (!screen_serves(f, b, n_out, all_positions))
		return 0;
	screen_masks(f, b, masks);
	return bn_head_screen_logits(f->screen, f->kern, chunks_per_thread(n_out), f->xb, f->widest,
				     n_out, masks, logits, f->m->cfg.n_vocab, &f->screen_stats) == 0;
}

/* Final norm and LM head for the selected tokens: all of them, or those bn_batch_logit_rows
 * selects (rows that only feed a prompt chunk skip the LM head). */
static void output_logits(struct bn_forward *f, const struct bn_batch *b, const uint32_t *first_tok,
			  uint32_t n_tok, float *logits, int all_positions)
{
	const struct bn_model_config *c = &f->m->cfg;
	uint32_t n_out = 0;
	f->screened = 0;
	for (uint32_t i = 0; i < (all_positions ? n_tok : b->n_rows); i++) {
		uint32_t first = 0, count = all_positions ? 1 : bn_batch_logit_rows(b, i, &first);
		for (uint32_t j = first; j < first + count; j++) {
			uint32_t t = all_positions ? i : first_tok[i] + j;
			f->kern->rmsnorm(f->xb + (size_t)n_out++ * f->widest, f->x + (size_t)t * c->n_embd,
				   f->m->output_norm, c->n_embd, c->rms_eps);
		}
	}
	if (n_out && f->int8_head.kind == BN_LINEAR_I8) {
		linear1(f, &f->int8_head, logits, c->n_vocab, f->xb, f->widest, n_out);
		return;
	}
	if (n_out && (f->screened = screen_logits(f, b, n_out, logits, all_positions)))
		return;
	if (n_out)
		linear1(f, &f->m->output, logits, c->n_vocab, f->xb, f->widest, n_out);
}

/* The final norm of the tokens the batch's hidden rows ask for, into their out (batch.h): the
 * rmsnorm output_logits gives the LM head, so an embedding reads what the head reads. */
static void output_hidden(struct bn_forward *f, const struct bn_batch *b, const uint32_t *first_tok)
{
	const struct bn_model_config *c = &f->m->cfg;
	for (uint32_t r = 0; b->hidden && r < b->n_rows; r++) {
		const struct bn_hidden_row *h = b->hidden[r];
		for (uint32_t j = 0; h && j < h->count; j++)
			f->kern->rmsnorm(h->out + (size_t)j * c->n_embd,
					 f->x + (size_t)(first_tok[r] + h->first + j) * c->n_embd,
					 f->m->output_norm, c->n_embd, c->rms_eps);
	}
}

int bn_forward_use_screen(struct bn_forward *f, const struct bn_head_screen *s)
{
	if (s && !s->head)
		return -EINVAL;
	bn_head_screen_run_free(f->screen);
	f->screen = s ? bn_head_screen_run_new(s, f->pool) : NULL;
	f->screen_src = f->screen ? s : NULL;
	return s && !f->screen ? -ENOMEM : 0;
}

void bn_forward_set_read_ahead(struct bn_forward *f, int on)
{
	f->read_ahead = on;
	if (!on)
		bn_pool_set_ahead(f->pool, NULL);
}

int bn_forward_use_t3(struct bn_forward *f, int on)
{
	bn_t3_gemm_fn t3 = bn_t3_kernel(f->kern);
	if (on && !t3)
		return -ENOTSUP;
	f->t3_gemm = on ? t3 : NULL;
	return 0;
}

void bn_forward_use_int8_head(struct bn_forward *f, const struct bn_i8_matrix *w)
{
	/* output_logits takes this head when its kind is I8; off, the kind is anything else */
	f->int8_head = w ? (struct bn_linear){ .kind = BN_LINEAR_I8, .n_in = w->n_in,
					       .n_out = w->n_out, .i8 = *w }
			 : (struct bn_linear){ .kind = BN_LINEAR_FLOAT };
}

void bn_forward_screen_stats(const struct bn_forward *f, struct bn_head_screen_stats *out)
{
	*out = f->screen_stats;
}

int bn_forward_screened(const struct bn_forward *f)
{
	return f->screened;
}

/* The normed input of each logits row is still in xb (output_logits wrote it; nothing since
 * has), so the full head's row is one more pass over the head for that row alone. */
void bn_forward_full_logits(struct bn_forward *f, uint32_t i, float *logits)
{
	if (!f->screened)
		return;
	linear1(f, &f->m->output, logits, f->m->cfg.n_vocab, f->xb + (size_t)i * f->widest,
		f->widest, 1);
}

int bn_forward_run(struct bn_forward *f, const struct bn_batch *b, float *logits,
		   int all_positions)
{
	uint32_t n_tok;
	int rc = check_batch(f, b, &n_tok);
	if (rc)
		return rc;
	if ((rc = scratch_reserve(f, n_tok)) != 0)
		return rc;
	uint32_t *first_tok = malloc(b->n_rows * sizeof(uint32_t));
	if (!first_tok)
		return -ENOMEM;
	embed_tokens(f, b, first_tok);
	for (uint32_t li = 0; li < f->m->cfg.n_layer; li++)
		layer_forward(f, b, li, n_tok);
	output_logits(f, b, first_tok, n_tok, logits, all_positions);
	output_hidden(f, b, first_tok);
	read_ahead(f, &f->m->layers[0].wq, n_tok); /* the next step's first matrix, if alike */
	for (uint32_t r = 0; r < b->n_rows; r++)
		f->seq_len[b->seq[r]] += b->lens[r];
	free(first_tok);
	return 0;
}

int bn_forward_seq_reset(struct bn_forward *f, uint32_t seq)
{
	if (seq >= f->max_seqs)
		return -EINVAL;
	f->seq_len[seq] = 0;
	return 0;
}

int bn_forward_seq_rewind(struct bn_forward *f, uint32_t seq, uint32_t length)
{
	if (seq >= f->max_seqs || length > f->seq_len[seq])
		return -EINVAL;
	f->seq_len[seq] = length; /* the positions past it are written again before any read */
	return 0;
}

int bn_forward_seq_fork(struct bn_forward *f, uint32_t seq, uint32_t start, uint32_t dst_block,
			uint32_t src_block, uint32_t n_copy)
{
	if (seq >= f->max_seqs || start > f->m->cfg.n_ctx || n_copy >= f->kv_block_tokens ||
	    (n_copy && (dst_block >= f->kv_blocks || src_block >= f->kv_blocks)))
		return -EINVAL;
	size_t bytes = (size_t)n_copy * f->kv_dim * sizeof(float);
	for (uint32_t li = 0; n_copy && li < f->m->cfg.n_layer; li++) {
		memcpy(kv_at(f, f->kv_k, li, dst_block, 0), kv_at(f, f->kv_k, li, src_block, 0), bytes);
		memcpy(kv_at(f, f->kv_v, li, dst_block, 0), kv_at(f, f->kv_v, li, src_block, 0), bytes);
	}
	f->seq_len[seq] = start;
	return 0;
}

struct bn_forward *bn_forward_new(const struct bn_model *m, uint32_t max_seqs,
				  struct bn_pool *pool, const struct bn_kernels *kernels)
{
	struct bn_forward *f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	const struct bn_model_config *c = &m->cfg;
	f->m = m;
	f->pool = pool;
	f->read_ahead = 1;
	f->kern = kernels;
	f->max_seqs = max_seqs;
	f->q_dim = c->n_head * c->head_dim;
	f->kv_dim = c->n_head_kv * c->head_dim;
	f->widest = c->n_embd > f->q_dim ? c->n_embd : f->q_dim;
	f->widest = f->widest > c->n_ff ? f->widest : c->n_ff;
	f->seq_len = calloc(max_seqs, sizeof(*f->seq_len));
	f->rope_freq = malloc(c->rope_dim / 2 * sizeof(float));
	/* A position is below n_ctx (bn_batch_check), so a token's scores over every head of its
	 * KV group fit; allocated here so that no step can run out of memory halfway. */
	f->attn_scores = malloc((size_t)bn_pool_threads(pool) * (c->n_head / c->n_head_kv) *
				c->n_ctx * sizeof(float));
	int decode_head = m->output.kind == BN_LINEAR_DECODE; /* the one matrix that can be */
	if (decode_head)
		f->decode_rows = malloc((size_t)bn_pool_threads(pool) * DECODE_ROWS *
					m->output.n_in * sizeof(float));
	if (!f->seq_len || !f->rope_freq || !f->attn_scores || (decode_head && !f->decode_rows)) {
		free(f->seq_len);
		free(f->rope_freq);
		free(f->attn_scores);
		free(f->decode_rows);
		free(f);
		return NULL;
	}
	bn_rope_freqs(c, f->rope_freq);
	return f;
}

void bn_forward_free(struct bn_forward *f)
{
	if (!f)
		return;
	bn_pool_set_ahead(f->pool, NULL); /* the pool may outlive the model its spans are in */
	unmap_kv(f);
	free(f->simple_tables);
	free(f->seq_len);
	free(f->rope_freq);
	free(f->attn_scores);
	free(f->decode_rows);
	bn_head_screen_run_free(f->screen);
	free_scratch(f);
	free(f);
}
