/* SPDX-License-Identifier: MIT */
/*
 * forward_gemm.c — the forward pass's matrix jobs (forward_internal.h): up to three matrices
 * that share an input, split over the pool into row chunks x token blocks, each task writing
 * its own outputs; and the read-ahead of the next job's first bytes.
 */
#include "forward_internal.h"
#include "quant.h"

#include <stdlib.h>

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
		xs.bsum += (size_t)b0 * bn_q8_blocks(xs.k_pad);
		if (reads_t3(w, j->t3_gemm, n_b))
			j->t3_gemm(&w->t3, o0, o1, &xs, n_b, y, j->ldy[m]);
		else if (w->kind == BN_LINEAR_T2 && w->t2.gscale)
			j->kern->t2g_gemm(&w->t2, o0, o1, &xs, n_b, y, j->ldy[m]);
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
	int block_sums;            /* a grouped matrix reads them (kernels.h: t2g_gemm) */
};

static void quant_task(void *ctx, uint32_t task)
{
	const struct quant_job *j = ctx;
	uint32_t r0 = task * ELEM_BLOCK, n = j->n - r0 < ELEM_BLOCK ? j->n - r0 : ELEM_BLOCK;
	struct bn_q8_rows part = *j->out;
	part.q += (size_t)r0 * part.k_pad;
	part.inv_scale += r0;
	part.sum += r0;
	part.bsum += (size_t)r0 * bn_q8_blocks(part.k_pad);
	j->kern->quantize_rows(j->x + (size_t)r0 * j->ldx, j->ldx, n, &part);
	if (j->block_sums)
		bn_q8_block_sums(&part, n);
}

/* How many row chunks of each matrix a thread gets. Up to four tokens the matrices are read
 * from memory once per step and the time is the time of the stream: one chunk per thread
 * keeps each thread on one sequential stream, where four restarted the prefetch four times
 * per matrix. 2B4T shape, batch 1, the two alternating in one process (three runs of
 * 120-150 rounds of 6 steps): 0.969-0.986 of the time with four, in the fast and the slow
 * memory state alike. Larger batches are compute-bound and keep four, so that a thread that
 * finishes early can take work from one that is slowed down. With a busy loop on one of the
 * two cores, one chunk per thread costs ~5 % more at batch 1 than four. */
uint32_t bn_fw_chunks_per_thread(uint32_t n_tok)
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
void bn_fw_linear_multi(struct bn_forward *f, uint32_t n_mats, const struct bn_linear *const *w,
			float *const *y, const uint32_t *ldy, const float *x, uint32_t ldx,
			uint32_t n_tok)
{
	struct gemm_job j = { .kern = f->kern, .n_mats = n_mats, .x = x, .ldx = ldx,
			      .xq = &f->xq, .n_tok = n_tok, .n_blocks = div_up(n_tok, TOKEN_BLOCK),
			      .decode_rows = f->decode_rows, .t3_gemm = f->t3_gemm };
	int int8_input = 0, block_sums = 0;
	uint32_t n_tasks = 0, threads = bn_pool_threads(f->pool);
	for (uint32_t i = 0; i < n_mats; i++) {
		j.w[i] = w[i];
		j.y[i] = y[i];
		j.ldy[i] = ldy[i];
		uint32_t chunk = row_chunk(w[i]->n_out, bn_fw_chunks_per_thread(n_tok) * threads,
					   row_alignment(w[i]));
		j.chunk[i] = chunk;
		j.n_chunks[i] = div_up(w[i]->n_out, chunk);
		n_tasks += j.n_chunks[i] * j.n_blocks;
		int8_input |= w[i]->kind == BN_LINEAR_T2 || w[i]->kind == BN_LINEAR_I8;
		block_sums |= w[i]->kind == BN_LINEAR_T2 && w[i]->t2.gscale;
	}
	if (int8_input) {
		f->xq.k = w[0]->n_in;
		f->xq.k_pad = bn_q8_k_pad(w[0]->n_in);
		struct quant_job qj = { .kern = f->kern, .x = x, .ldx = ldx, .n = n_tok, .out = &f->xq,
					.block_sums = block_sums };
		bn_pool_run(f->pool, div_up(n_tok, ELEM_BLOCK), quant_task, &qj);
	}
	bn_pool_run(f->pool, n_tasks, gemm_task, &j);
}

void bn_fw_linear1(struct bn_forward *f, const struct bn_linear *w, float *y, uint32_t ldy,
		   const float *x, uint32_t ldx, uint32_t n_tok)
{
	bn_fw_linear_multi(f, 1, &w, &y, &ldy, x, ldx, n_tok);
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
	if (!f->read_ahead || !base || bn_fw_chunks_per_thread(n_tok) != 1 ||
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
void bn_fw_read_ahead(struct bn_forward *f, const struct bn_linear *w, uint32_t n_tok)
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
void bn_fw_read_ahead_head(struct bn_forward *f, uint32_t n_tok)
{
	if (f->int8_head.kind == BN_LINEAR_I8)
		bn_fw_read_ahead(f, &f->int8_head, n_tok);
	else if (f->screen_src)
		ahead_rows(f, (const uint8_t *)f->screen_src->w.q, f->screen_src->w.row_bytes,
			   f->screen_src->w.n_out, n_tok);
	else
		bn_pool_set_ahead(f->pool, NULL);
}

