/* SPDX-License-Identifier: MIT */
/*
 * forward.c — the batched forward pass. The new tokens of all rows are flattened into one
 * [n_tok x dim] activation matrix (no padding), every weight matrix is applied to all of them
 * at once (one weight read per step, not per row: forward_gemm.c), and attention runs per
 * (row, head) over that row's own KV cache (forward_layer.c), so a row never sees another
 * row's data. This file: the KV cache, scratch, the pass, the LM head and its screen.
 */
#include "forward_internal.h"
#include "head_screen.h"
#include "quant.h"
#include "common/arith.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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
	/* No reservation: an arena that lends (serve/kvpool.h) may be sized for more than the
	 * memory its model is given; the scheduler bounds the blocks used. */
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
	void *k = mmap(NULL, f->kv_bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
	void *v = mmap(NULL, f->kv_bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
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

uint32_t bn_forward_kv_release_tokens(const struct bn_forward *f)
{
	long page = sysconf(_SC_PAGESIZE);
	uint64_t row = (uint64_t)f->kv_dim * sizeof(float);
	if (page <= 0 || row == 0)
		return 0;
	/* a block's tokens of one layer fill whole pages at multiples of this many */
	return (uint32_t)((uint64_t)page / bn_gcd_u64((uint64_t)page, row));
}

int bn_forward_kv_release(struct bn_forward *f, uint32_t first, uint32_t n)
{
	uint32_t granule = bn_forward_kv_release_tokens(f);
	if (!f->kv_k || !granule || f->kv_block_tokens % granule)
		return -EOPNOTSUPP;
	if (n == 0) {
		/* A huge page would hold 2 MiB around whatever block touched it. */
		madvise(f->kv_k, f->kv_bytes, MADV_NOHUGEPAGE);
		madvise(f->kv_v, f->kv_bytes, MADV_NOHUGEPAGE);
		return 0;
	}
	if (first >= f->kv_blocks || n > f->kv_blocks - first)
		return -EINVAL;
	size_t len = (size_t)n * f->kv_block_tokens * f->kv_dim * sizeof(float);
	for (uint32_t li = 0; li < f->m->cfg.n_layer; li++) {
		/* [n_layer][kv_blocks][...]: the run is contiguous within each layer */
		if (madvise(kv_at(f, f->kv_k, li, first, 0), len, MADV_DONTNEED) < 0 ||
		    madvise(kv_at(f, f->kv_v, li, first, 0), len, MADV_DONTNEED) < 0)
			return -errno;
	}
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
	free(f->rope_cs_swa);
	free(f->xin);
	free(f->xq.q);
	free(f->xq.inv_scale);
	free(f->xq.sum);
	free(f->xq.bsum);
	free(f->tok_row);
	free(f->tok_pos);
	memset(&f->xq, 0, sizeof(f->xq));
	f->x = f->xb = f->q = f->k = f->v = f->att = f->gate = f->up = f->rope_cs = NULL;
	f->rope_cs_swa = f->xin = NULL;
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
	if (c->n_swa)
		f->rope_cs_swa = scratch(n, c->rope_dim * sizeof(float));
	if (c->proj_norms)
		f->xin = scratch(n, 3 * c->n_embd * sizeof(float));
	f->xq.q = scratch(n, k_pad);
	f->xq.inv_scale = scratch(n, sizeof(float));
	f->xq.sum = scratch(n, sizeof(int32_t));
	f->xq.bsum = scratch(n, bn_q8_blocks(k_pad) * sizeof(int32_t));
	f->tok_row = scratch(n, sizeof(uint32_t));
	f->tok_pos = scratch(n, sizeof(uint32_t));
	if (!f->x || !f->xb || !f->q || !f->k || !f->v || !f->att || !f->gate || !f->up ||
	    !f->rope_cs || !f->xq.q || !f->xq.inv_scale || !f->xq.sum || !f->xq.bsum || !f->tok_row ||
	    !f->tok_pos || (c->n_swa && !f->rope_cs_swa) || (c->proj_norms && !f->xin)) {
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
			float *x = f->x + (size_t)t * c->n_embd;
			bn_model_embed(f->m, b->tokens[(size_t)r * b->width + i], x);
			for (uint32_t k = 0; c->embd_scale != 1.0f && k < c->n_embd; k++)
				x[k] *= c->embd_scale;
			bn_rope_cos_sin(f->rope_freq, half, f->tok_pos[t],
					f->rope_cs + (size_t)t * c->rope_dim);
			if (f->rope_cs_swa)
				bn_rope_cos_sin(f->rope_freq_swa, half, f->tok_pos[t],
						f->rope_cs_swa + (size_t)t * c->rope_dim);
		}
	}
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
	return bn_head_screen_logits(f->screen, f->kern, bn_fw_chunks_per_thread(n_out), f->xb, f->widest,
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
		bn_fw_linear1(f, &f->int8_head, logits, c->n_vocab, f->xb, f->widest, n_out);
		return;
	}
	if (n_out && (f->screened = screen_logits(f, b, n_out, logits, all_positions)))
		return;
	if (n_out)
		bn_fw_linear1(f, &f->m->output, logits, c->n_vocab, f->xb, f->widest, n_out);
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
	bn_fw_linear1(f, &f->m->output, logits, f->m->cfg.n_vocab, f->xb + (size_t)i * f->widest,
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
		bn_fw_layer(f, b, li, n_tok);
	output_logits(f, b, first_tok, n_tok, logits, all_positions);
	output_hidden(f, b, first_tok);
	bn_fw_read_ahead(f, &f->m->layers[0].wq, n_tok); /* the next step's first matrix, if alike */
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
	f->rope_freq_swa = c->n_swa ? malloc(c->rope_dim / 2 * sizeof(float)) : NULL;
	/* A position is below n_ctx (bn_batch_check), so a token's scores over every head of its
	 * KV group fit; allocated here so that no step can run out of memory halfway. */
	f->attn_scores = malloc((size_t)bn_pool_threads(pool) * (c->n_head / c->n_head_kv) *
				c->n_ctx * sizeof(float));
	int decode_head = m->output.kind == BN_LINEAR_DECODE; /* the one matrix that can be */
	if (decode_head)
		f->decode_rows = malloc((size_t)bn_pool_threads(pool) * DECODE_ROWS *
					m->output.n_in * sizeof(float));
	if (!f->seq_len || !f->rope_freq || !f->attn_scores || (decode_head && !f->decode_rows) ||
	    (c->n_swa && !f->rope_freq_swa)) {
		free(f->seq_len);
		free(f->rope_freq);
		free(f->rope_freq_swa);
		free(f->attn_scores);
		free(f->decode_rows);
		free(f);
		return NULL;
	}
	bn_rope_freqs(c, f->rope_freq);
	if (f->rope_freq_swa)
		bn_rope_freqs_swa(c, f->rope_freq_swa);
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
	free(f->rope_freq_swa);
	free(f->attn_scores);
	free(f->decode_rows);
	bn_head_screen_run_free(f->screen);
	free_scratch(f);
	free(f);
}

