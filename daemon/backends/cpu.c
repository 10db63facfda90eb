/* SPDX-License-Identifier: MIT */
/*
 * The cpu backend: a GGUF model (model.h) and the batched forward pass (forward.h) on the
 * project's thread pool; each row that wants a token is sampled by bn_sample (sample.h).
 */
#include "backend.h"
#include "bitnet_shm.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/stats.h"
#include "model/forward.h"
#include "model/model.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* One float multiply-add of attention costs about eight ternary int8 multiply-adds of the
 * weight kernels here (attention reads the cached keys and values from L2/L3, the ternary
 * kernels run from L1): measured on the 2B4T shape (2-core AVX-512 VM, make bench-model, two
 * runs), a 256-token prompt took 6.2-6.5 ms a token and a 1024-token one 7.4-7.7, i.e. about
 * 5.9 ms a token plus 3.1 us per earlier position. Used to weigh long-context tokens in the
 * scheduler's budget. */
#define CPU_ATTN_MAC_COST 8.0

struct cpu_backend {
	struct bn_model model;
	struct bn_pool *pool;
	struct bn_forward *fwd;
	float *logits;        /* [logits_rows][n_vocab] */
	uint32_t logits_rows;
	uint32_t max_seqs;
	struct bn_sampler sampler;
	struct bn_head_screen screen; /* --lm-head screened: built at open when the head allows */
};

static void cpu_close(void *self)
{
	struct cpu_backend *cb = self;
	if (!cb)
		return;
	bn_forward_free(cb->fwd);
	bn_head_screen_free(&cb->screen);
	bn_pool_free(cb->pool);
	bn_model_free(&cb->model);
	bn_sampler_free(&cb->sampler);
	free(cb->logits);
	free(cb);
}

/* The int8 copy of the LM head for --lm-head screened (a float head in panels) or int8 (a
 * float head, or a Q8_0 / Q6_K one decoded row by row). 0, or why not as the log puts it. */
static const char *build_int8_copy(struct cpu_backend *cb, int int8)
{
	const struct bn_linear *head = &cb->model.output;
	int rc;
	if (head->kind == BN_LINEAR_FLOAT && head->f.panel_rows)
		rc = bn_head_screen_build(&cb->screen, &head->f, cb->pool);
	else if (int8 && head->kind == BN_LINEAR_DECODE)
		rc = bn_head_int8_build_rows(&cb->screen, head->src->type, head->src->data,
					     head->src->size, head->n_in, head->n_out, cb->pool);
	else
		return int8 ? "full (int8 needs a float, Q8_0 or Q6_K head)"
			    : "full (screened needs a float head)";
	return rc == -EINVAL ? "full (the head has a non-finite weight)"
	       : rc          ? "full (no memory for the int8 copy)"
			     : NULL;
}

/* --lm-head: the int8 copy used as the screen or as the head (a head it cannot be made of
 * keeps the full head). Returns the choice (enum bn_lm_head_kind); *said is what the log
 * calls it. */
static enum bn_lm_head_kind open_screen(struct cpu_backend *cb, enum bn_lm_head_mode mode,
					const char **said)
{
	int int8 = mode == BN_LM_HEAD_MODE_INT8;
	*said = "full";
	if (mode == BN_LM_HEAD_MODE_FULL)
		return BN_HEAD_FILE;
	const char *why_not = build_int8_copy(cb, int8);
	if (why_not) {
		*said = why_not;
		return BN_HEAD_FILE;
	}
	if (int8) {
		/* every logit from the copy: the float head's panels are not read again */
		bn_forward_use_int8_head(cb->fwd, &cb->screen.w);
		bn_head_screen_drop_head(&cb->screen);
		bn_model_release_head_panels(&cb->model);
		*said = "int8";
		return BN_HEAD_INT8;
	}
	if (bn_forward_use_screen(cb->fwd, &cb->screen)) {
		bn_head_screen_free(&cb->screen);
		*said = "full (no memory for the int8 copy)";
		return BN_HEAD_FILE;
	}
	*said = "screened";
	return BN_HEAD_SCREENED;
}

/* --decode-layout base3: the T3 copies of the ternary weights, read by decode steps. Returns
 * the choice (enum bn_decode_layout_kind); *said is what the log calls it. */
static enum bn_decode_layout_kind open_decode_layout(struct cpu_backend *cb, uint32_t base3,
						     const char **said)
{
	*said = "2bit";
	if (!bn_model_is_ternary(&cb->model)) {
		*said = "none (no ternary weights)";
		return BN_DECODE_LAYOUT_NONE;
	}
	if (!base3)
		return BN_DECODE_LAYOUT_2BIT;
	if (bn_forward_use_t3(cb->fwd, 1) == -ENOTSUP) {
		*said = "2bit (base3 needs AVX-512 VBMI)";
		return BN_DECODE_LAYOUT_2BIT;
	}
	if (bn_model_add_t3(&cb->model, cb->pool) != 0) {
		bn_forward_use_t3(cb->fwd, 0);
		*said = "2bit (no memory for the base-3 copy)";
		return BN_DECODE_LAYOUT_2BIT;
	}
	*said = "base3";
	return BN_DECODE_LAYOUT_BASE3;
}

static int cpu_open(const struct bn_backend_options *opt, struct bn_model_desc *desc, void **self)
{
	if (!opt->model_path) {
		bn_log_error("msg=\"the cpu backend needs --model FILE\"");
		return -EINVAL;
	}
	const struct bn_kernels *kern = bn_kernels_select(NULL);
	if (!kern) {
		bn_log_error("msg=\"BITNET_KERNELS names kernels this CPU cannot run\" value=\"%s\"",
			     getenv("BITNET_KERNELS"));
		return -EINVAL;
	}
	struct cpu_backend *cb = calloc(1, sizeof(*cb));
	if (!cb)
		return -ENOMEM;
	uint64_t t0 = bn_now_ns();
	char err[BN_MODEL_ERR_LEN];
	if (bn_model_load(&cb->model, opt->model_path, err) != 0) {
		bn_log_error("msg=\"cannot load model\" error=\"%s\"", err);
		free(cb);
		return -EINVAL;
	}
	cb->max_seqs = opt->max_seqs;
	bn_sampler_init(&cb->sampler);
	cb->pool = bn_pool_new(opt->n_threads);
	cb->fwd = cb->pool ? bn_forward_new(&cb->model, opt->max_seqs, cb->pool, kern) : NULL;
	if (!cb->fwd) {
		cpu_close(cb);
		return -ENOMEM;
	}
	const char *lm_head, *decode_layout;
	enum bn_lm_head_kind head_kind = open_screen(cb, opt->lm_head_mode, &lm_head);
	enum bn_decode_layout_kind layout_kind =
		open_decode_layout(cb, opt->base3_decode, &decode_layout);
	const struct bn_model_config *c = &cb->model.cfg;
	bn_log_info("msg=\"cpu backend ready\" arch=%s layers=%u embd=%u heads=%u kv_heads=%u ffn=%u vocab=%u context=%u kernels=%s threads=%u repacked_mb=%.1f lm_head=\"%s\" screen_mb=%.1f decode_layout=\"%s\" base3_mb=%.1f load_ms=%.0f",
		    c->arch_name, c->n_layer, c->n_embd, c->n_head, c->n_head_kv, c->n_ff, c->n_vocab,
		    c->n_ctx, kern->name, bn_pool_threads(cb->pool),
		    (double)cb->model.repacked_bytes / 1e6, lm_head,
		    (double)bn_head_screen_bytes(&cb->screen) / 1e6, /* 0 when not built */
		    decode_layout, (double)cb->model.t3_bytes / 1e6,
		    (double)(bn_now_ns() - t0) / 1e6);
	bn_model_describe(c, BN_BACKEND_CPU, CPU_ATTN_MAC_COST, desc);
	desc->can_score = 1;
	desc->can_classify = 1;
	desc->lm_head = head_kind;
	desc->decode_layout = layout_kind;
	*self = cb;
	return 0;
}

static int cpu_kv_init(void *self, uint32_t n_blocks, uint32_t block_tokens)
{
	struct cpu_backend *cb = self;
	return bn_forward_kv_init(cb->fwd, n_blocks, block_tokens);
}

static int cpu_seq_open(void *self, uint32_t seq)
{
	struct cpu_backend *cb = self;
	return bn_forward_seq_reset(cb->fwd, seq);
}

static int cpu_seq_fork(void *self, uint32_t seq, uint32_t start, uint32_t dst_block,
			uint32_t src_block, uint32_t n_copy)
{
	struct cpu_backend *cb = self;
	return bn_forward_seq_fork(cb->fwd, seq, start, dst_block, src_block, n_copy);
}

static void cpu_seq_close(void *self, uint32_t seq)
{
	(void)self; /* the scheduler takes the blocks back; seq_open resets the length */
	(void)seq;
}

/* Each scored position of row r: its target's log-probability and alternatives. */
static int score_row(struct cpu_backend *cb, const struct bn_score_row *sr, float *logits)
{
	uint32_t n_vocab = cb->model.cfg.n_vocab;
	for (uint32_t j = 0; j < sr->n_targets; j++) {
		int rc = bn_score_token(&cb->sampler, logits + (size_t)j * n_vocab, n_vocab,
					sr->targets[j], sr->n_top, &sr->out[j]);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int cpu_step(void *self, const struct bn_batch *batch, struct bn_sample_out *out)
{
	struct cpu_backend *cb = self;
	uint32_t n_vocab = cb->model.cfg.n_vocab, n_logits = 0, first;
	for (uint32_t r = 0; r < batch->n_rows; r++)
		n_logits += bn_batch_logit_rows(batch, r, &first);
	if (n_logits > cb->logits_rows) {
		float *l = realloc(cb->logits, (size_t)n_logits * n_vocab * sizeof(float));
		if (!l)
			return -ENOMEM;
		cb->logits = l;
		cb->logits_rows = n_logits;
	}
	int rc = bn_forward_run(cb->fwd, batch, cb->logits, 0);
	if (rc)
		return rc;
	struct bn_head_screen_stats st;
	bn_forward_screen_stats(cb->fwd, &st); /* totals since open: the daemon has one backend */
	bn_stats.lm_head_screened_rows = st.rows;
	bn_stats.lm_head_screen_groups = st.groups;
	bn_stats.lm_head_full_rows = st.full_rows;
	/* Logits rows are packed in batch order: one per row that wants a token, n_targets per
	 * scored row. */
	float *logits = cb->logits;
	for (uint32_t r = 0; r < batch->n_rows; r++) {
		const struct bn_score_row *sr = batch->score ? batch->score[r] : NULL;
		if (sr)
			rc = score_row(cb, sr, logits);
		else if (batch->sample[r])
			rc = bn_sample(&cb->sampler, batch->sample[r], logits, n_vocab, &out[r]);
		if (rc < 0)
			return rc;
		logits += (size_t)bn_batch_logit_rows(batch, r, &first) * n_vocab;
	}
	return 0;
}

const struct bn_backend_ops bn_backend_cpu = {
	.name = "cpu",
	.open = cpu_open,
	.close = cpu_close,
	.kv_init = cpu_kv_init,
	.seq_open = cpu_seq_open,
	.seq_close = cpu_seq_close,
	.seq_fork = cpu_seq_fork,
	.step = cpu_step,
};
