/* SPDX-License-Identifier: MIT */
/*
 * The cpu backend: a GGUF model (model.h) and the batched forward pass (forward.h) on the
 * project's thread pool; each row that wants a token is sampled by bn_sample (sample.h).
 */
#include "backend.h"
#include "bitnet_shm.h"
#include "cache_writer.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/stats.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/wcache.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
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
	struct bn_pool *pool;  /* the steps' pool: the daemon's (borrowed) or its own */
	int own_pool;
	struct bn_forward *fwd;
	float *logits;        /* [logits_rows][n_vocab] */
	uint32_t logits_rows;
	uint32_t max_seqs;
	struct bn_sampler sampler;
	struct bn_head_screen screen; /* the LM head's int8 copy, when one was made */
	uint32_t built;       /* BN_WCACHE_HAS_*: what the weights hold besides the matrices */
	struct bn_wcache cache; /* the mapped weights cache the weights lie in, or unmapped */
	struct bn_cache_writer *writer; /* writing the weights built at this start, or NULL */
	struct bn_head_screen_stats screen_seen; /* what the daemon's counters have of them */
};

static void free_weights(struct cpu_backend *cb)
{
	bn_cache_writer_stop(cb->writer);
	cb->writer = NULL;
	bn_head_screen_free(&cb->screen);
	bn_model_free(&cb->model);
	bn_wcache_close(&cb->cache);
	cb->built = 0;
}

static void cpu_close(void *self)
{
	struct cpu_backend *cb = self;
	if (!cb)
		return;
	bn_forward_free(cb->fwd);
	free_weights(cb);
	if (cb->own_pool)
		bn_pool_free(cb->pool);
	bn_sampler_free(&cb->sampler);
	free(cb->logits);
	free(cb);
}

/* ---- building the weights -------------------------------------------------------------- */

/* What --lm-head and --decode-layout ask for, as the weights cache keys it. */
static uint32_t wanted(const struct bn_backend_options *opt)
{
	return (opt->lm_head_mode == BN_LM_HEAD_MODE_SCREENED ? BN_WCACHE_OPT_SCREEN : 0) |
	       (opt->lm_head_mode == BN_LM_HEAD_MODE_INT8 ? BN_WCACHE_OPT_INT8_HEAD : 0) |
	       (opt->base3_decode ? BN_WCACHE_OPT_BASE3 : 0);
}

/* Why a head gets no int8 copy, as the log puts it; NULL when it can have one. */
static const char *int8_copy_refused(const struct bn_linear *head, int int8)
{
	if (head->kind == BN_LINEAR_FLOAT && head->f.panel_rows)
		return NULL;
	if (int8 && head->kind == BN_LINEAR_DECODE)
		return NULL;
	return int8 ? "full (int8 needs a float, Q4_0, Q8_0 or Q6_K head)"
		    : "full (screened needs a float head)";
}

/* The int8 copy of the LM head for --lm-head screened or int8; with int8 the float head's
 * panels go once it is made. NULL, or why not as the log puts it. */
static const char *build_int8_copy(struct cpu_backend *cb, int int8)
{
	const struct bn_linear *head = &cb->model.output;
	const char *refused = int8_copy_refused(head, int8);
	if (refused)
		return refused;
	int rc = head->kind == BN_LINEAR_FLOAT
			 ? bn_head_screen_build(&cb->screen, &head->f, cb->pool)
			 : bn_head_int8_build_rows(&cb->screen, head->src->type, head->src->data,
						   head->src->size, head->n_in, head->n_out,
						   cb->pool);
	if (rc)
		return rc == -EINVAL ? "full (the head has a non-finite weight)"
				     : "full (no memory for the int8 copy)";
	if (int8) {
		bn_head_screen_drop_head(&cb->screen);
		bn_model_release_head_panels(&cb->model);
	}
	cb->built |= int8 ? BN_WCACHE_HAS_INT8_HEAD : BN_WCACHE_HAS_SCREEN;
	return NULL;
}

/* Repacks the opened model file on the pool, then makes what the options ask for: the int8
 * copy of the head, the T3 copies. *head_said is why a wanted copy was not made (NULL: made,
 * or not wanted). 0, or -1 with err set (the model freed). */
static int build_weights(struct cpu_backend *cb, const struct bn_backend_options *opt,
			 const struct bn_kernels *kern, const char **head_said, char *err)
{
	struct bn_model_source src = { .float_layout = BN_FLOAT_PANELS, .pool = cb->pool };
	bn_backend_activation(opt, &src.activation);
	uint64_t t0 = bn_now_ns();
	if (bn_model_fill(&cb->model, &src, err) != 0)
		return -1;
	uint64_t t1 = bn_now_ns();
	*head_said = NULL;
	if (opt->lm_head_mode != BN_LM_HEAD_MODE_FULL)
		*head_said = build_int8_copy(cb, opt->lm_head_mode == BN_LM_HEAD_MODE_INT8);
	uint64_t t2 = bn_now_ns();
	if (opt->base3_decode && bn_t3_kernel(kern) && bn_model_is_ternary(&cb->model) &&
	    bn_model_add_t3(&cb->model, cb->pool) == 0)
		cb->built |= BN_WCACHE_HAS_T3;
	bn_log_debug("msg=\"weights built\" repack_ms=%.0f int8_copy_ms=%.0f base3_ms=%.0f",
		     (double)(t1 - t0) / 1e6, (double)(t2 - t1) / 1e6,
		     (double)(bn_now_ns() - t2) / 1e6);
	return 0;
}

/* The weights out of an open cache, in the order build_weights made them. 0, or -1 when the
 * cache does not hold this model as the file has it (err says which tensor; nothing kept). */
static int adopt_weights(struct cpu_backend *cb, const struct bn_backend_options *opt, char *err)
{
	uint32_t has = cb->cache.contents;
	struct bn_model_source src = { .float_layout = BN_FLOAT_PANELS, .pool = cb->pool,
				       .cache = &cb->cache,
				       .head_in_place = (has & BN_WCACHE_HAS_INT8_HEAD) != 0 };
	bn_backend_activation(opt, &src.activation);
	if (bn_model_fill(&cb->model, &src, err) != 0)
		return -1;
	const struct bn_linear *head = &cb->model.output;
	int rc = 0;
	if (has & (BN_WCACHE_HAS_SCREEN | BN_WCACHE_HAS_INT8_HEAD))
		rc = bn_head_screen_from_cache(&cb->screen,
					       has & BN_WCACHE_HAS_SCREEN ? &head->f : NULL,
					       head->n_in, head->n_out, &cb->cache);
	if (rc == 0 && (has & BN_WCACHE_HAS_T3))
		rc = bn_model_t3_from_cache(&cb->model, &cb->cache);
	if (rc == 0 && !bn_wcache_taken_all(&cb->cache))
		rc = -EINVAL;
	if (rc) {
		snprintf(err, BN_MODEL_ERR_LEN, "%s", "the int8 head or T3 copies differ");
		bn_head_screen_free(&cb->screen);
		bn_model_free(&cb->model);
		return -1;
	}
	cb->built = has;
	return 0;
}

/* Everything built_weights made, as cache blobs in the order adopt_weights takes them. */
static struct bn_wcache_blob *weight_blobs(const struct cpu_backend *cb, uint32_t *n)
{
	uint32_t with_copy = cb->built & (BN_WCACHE_HAS_SCREEN | BN_WCACHE_HAS_INT8_HEAD);
	*n = bn_model_cache_blobs(&cb->model, NULL) +
	     (with_copy ? bn_head_screen_blobs(&cb->screen, NULL) : 0) +
	     bn_model_t3_blobs(&cb->model, NULL);
	struct bn_wcache_blob *b = calloc(*n ? *n : 1, sizeof(*b));
	if (!b)
		return NULL;
	uint32_t at = bn_model_cache_blobs(&cb->model, b);
	if (with_copy)
		at += bn_head_screen_blobs(&cb->screen, b + at);
	bn_model_t3_blobs(&cb->model, b + at);
	return b;
}

/* The writer of what build_weights made, ready to start once the daemon's weights are final.
 * NULL when there is no memory for it. */
static struct bn_cache_writer *new_writer(const struct cpu_backend *cb, const char *path,
					  const struct bn_wcache_key *k)
{
	uint32_t n;
	struct bn_wcache_blob *blobs = weight_blobs(cb, &n);
	struct bn_cache_writer *w = blobs ? bn_cache_writer_new(path, k, cb->built, blobs, n, NULL, 0)
					  : NULL;
	if (!w)
		free(blobs);
	return w;
}

/* The model and its copies, from the weights cache when it holds them (*from: hit), else
 * built, with a writer made for the cache (*from: writing; failed without memory for one; off
 * without a cache). 0, or -1 with err set. */
static int load_weights(struct cpu_backend *cb, const struct bn_backend_options *opt,
			const struct bn_kernels *kern, enum bn_weights_cache *from,
			char cache_path[PATH_MAX], const char **head_said, char *err)
{
	char dir[PATH_MAX], why[BN_WCACHE_WHY_LEN];
	struct bn_wcache_key key;
	cache_path[0] = 0;
	*from = BN_WEIGHTS_CACHE_OFF;
	*head_said = NULL;
	if (bn_model_open(&cb->model, opt->model_path, err) != 0)
		return -1;
	int rc = bn_wcache_dir(opt->cache_dir, dir, sizeof(dir));
	if (rc == 0 && dir[0] &&
	    (rc = bn_wcache_key_of(&cb->model.file, opt->model_path, kern->name, wanted(opt),
				      &key)) == 0)
		rc = bn_wcache_path(dir, opt->model_path, &key, cache_path, PATH_MAX);
	if (rc < 0 || !dir[0]) {
		if (rc < 0)
			bn_log_warn("msg=\"no weights cache: no directory for it\" error=\"%s\" hint=\"--cache-dir DIR, $CACHE_DIRECTORY, $XDG_CACHE_HOME or $HOME\"",
				    strerror(-rc));
		cache_path[0] = 0;
		return build_weights(cb, opt, kern, head_said, err);
	}
	rc = bn_wcache_open(&cb->cache, cache_path, &key, cb->pool, kern->hash64, why);
	if (rc == 0 && adopt_weights(cb, opt, err) == 0) {
		*from = BN_WEIGHTS_CACHE_HIT;
		return 0;
	}
	if (rc == 0) { /* it opened, but does not hold this model: rebuilt */
		bn_log_warn("msg=\"weights cache does not match the model; rebuilding it\" cache=\"%s\" error=\"%s\"",
			    cache_path, err);
		bn_wcache_close(&cb->cache);
		if (bn_model_open(&cb->model, opt->model_path, err) != 0)
			return -1;
	} else if (rc != -ENOENT && rc != -ENOTDIR) { /* not there yet: no warning */
		bn_log_warn("msg=\"weights cache not used; rebuilding it\" cache=\"%s\" why=\"%s\"",
			    cache_path, why);
	}
	if (build_weights(cb, opt, kern, head_said, err) != 0)
		return -1;
	cb->writer = new_writer(cb, cache_path, &key);
	*from = cb->writer ? BN_WEIGHTS_CACHE_WRITING : BN_WEIGHTS_CACHE_FAILED;
	if (!cb->writer)
		bn_log_warn("msg=\"weights cache not written: no memory to list the weights\" cache=\"%s\"",
			    cache_path);
	return 0;
}

/* ---- opening ----------------------------------------------------------------------------- */

/* --lm-head: the int8 copy (built or from the cache) attached as the screen or as the head.
 * Returns the choice (enum bn_lm_head_kind); *said is what the log calls it. */
static enum bn_lm_head_kind attach_head(struct cpu_backend *cb, enum bn_lm_head_mode mode,
					const char *head_said, const char **said)
{
	*said = "full";
	if (mode == BN_LM_HEAD_MODE_FULL)
		return BN_HEAD_FILE;
	if (cb->built & BN_WCACHE_HAS_INT8_HEAD) {
		/* every logit from the copy: the float head's panels are not read again */
		bn_forward_use_int8_head(cb->fwd, &cb->screen.w);
		*said = "int8";
		return BN_HEAD_INT8;
	}
	if (!(cb->built & BN_WCACHE_HAS_SCREEN)) {
		const char *refused = int8_copy_refused(&cb->model.output,
							mode == BN_LM_HEAD_MODE_INT8);
		*said = head_said ? head_said
			: refused ? refused
				  : "full (no int8 copy could be made when the weights cache was built)";
		return BN_HEAD_FILE;
	}
	if (bn_forward_use_screen(cb->fwd, &cb->screen)) {
		*said = "full (no memory for the screen)";
		return BN_HEAD_FILE;
	}
	*said = "screened";
	return BN_HEAD_SCREENED;
}

/* --decode-layout base3: the T3 copies (built or from the cache), read by decode steps.
 * Returns the choice (enum bn_decode_layout_kind); *said is what the log calls it. */
static enum bn_decode_layout_kind attach_decode_layout(struct cpu_backend *cb, uint32_t base3,
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
		*said = "2bit (base3 needs " BN_T3_NEEDS ")";
		return BN_DECODE_LAYOUT_2BIT;
	}
	if (!(cb->built & BN_WCACHE_HAS_T3)) {
		bn_forward_use_t3(cb->fwd, 0);
		*said = "2bit (no memory for the base-3 copy)";
		return BN_DECODE_LAYOUT_2BIT;
	}
	*said = "base3";
	return BN_DECODE_LAYOUT_BASE3;
}

/* What the weights hold in memory: the repacked matrices (or their cache pages), the T3 and
 * int8 copies, and the token embedding where it is read from the file rather than from the
 * LM head's panels. */
static uint64_t weight_bytes(const struct cpu_backend *cb)
{
	const struct bn_model *m = &cb->model;
	return m->repacked_bytes + m->t3_bytes + bn_head_screen_bytes(&cb->screen) +
	       (m->embed_from_output || !m->tok_embd ? 0 : m->tok_embd->size);
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
	char err[BN_MODEL_ERR_LEN], cache_path[PATH_MAX];
	enum bn_weights_cache from;
	const char *head_said;
	bn_sampler_init(&cb->sampler);
	cb->max_seqs = opt->max_seqs;
	/* First: the repack runs on it. With the daemon's pool, on one of its own, which the
	 * loop's steps on the daemon's do not wait for. */
	cb->pool = bn_pool_new(opt->pool ? opt->load_threads : opt->n_threads);
	cb->own_pool = 1;
	if (!cb->pool) {
		cpu_close(cb);
		return -ENOMEM;
	}
	if (load_weights(cb, opt, kern, &from, cache_path, &head_said, err) != 0) {
		bn_log_error("msg=\"cannot load model\" error=\"%s\"", err);
		cpu_close(cb);
		return -EINVAL;
	}
	if (opt->pool) {
		bn_pool_free(cb->pool);
		cb->pool = opt->pool;
		cb->own_pool = 0;
	}
	cb->fwd = bn_forward_new(&cb->model, opt->max_seqs, cb->pool, kern);
	if (!cb->fwd) {
		cpu_close(cb);
		return -ENOMEM;
	}
	const char *lm_head, *decode_layout;
	enum bn_lm_head_kind head_kind = attach_head(cb, opt->lm_head_mode, head_said, &lm_head);
	enum bn_decode_layout_kind layout_kind =
		attach_decode_layout(cb, opt->base3_decode, &decode_layout);
	double load_ms = (double)(bn_now_ns() - t0) / 1e6;
	bn_load_report_set(opt->report, load_ms * 1e-3, from, cache_path);
	/* The weights are final (attach_* changed no byte); STATS says writing before the
	 * writer can say what came of it. */
	if (cb->writer)
		bn_cache_writer_report_to(cb->writer, opt->report);
	if (from == BN_WEIGHTS_CACHE_WRITING &&
	    (from = bn_cache_writer_start(cb->writer)) != BN_WEIGHTS_CACHE_WRITING) {
		bn_cache_writer_stop(cb->writer);
		cb->writer = NULL;
		bn_load_report_set_cache(opt->report, from);
	}
	const struct bn_model_config *c = &cb->model.cfg;
	bn_log_info("msg=\"cpu backend ready\" arch=%s layers=%u embd=%u heads=%u kv_heads=%u ffn=%u vocab=%u context=%u kernels=%s threads=%u repacked_mb=%.1f lm_head=\"%s\" screen_mb=%.1f decode_layout=\"%s\" base3_mb=%.1f load_ms=%.0f weights_cache=%s cache=\"%s\"",
		    c->arch_name, c->n_layer, c->n_embd, c->n_head, c->n_head_kv, c->n_ff, c->n_vocab,
		    c->n_ctx, kern->name, bn_pool_threads(cb->pool),
		    (double)cb->model.repacked_bytes / 1e6, lm_head,
		    (double)bn_head_screen_bytes(&cb->screen) / 1e6, /* 0 when not built */
		    decode_layout, (double)cb->model.t3_bytes / 1e6, load_ms,
		    bn_weights_cache_names[from], cache_path);
	bn_model_describe(c, BN_BACKEND_CPU, CPU_ATTN_MAC_COST, desc);
	bn_model_describe_graph(&cb->model, desc);
	desc->can_score = 1;
	desc->can_classify = 1;
	desc->can_mask = 1; /* bn_sample takes them */
	desc->can_embed = 1; /* the forward pass writes hidden rows */
	desc->lm_head = head_kind;
	desc->decode_layout = layout_kind;
	desc->weight_bytes = weight_bytes(cb);
	desc->kv_release_tokens = bn_forward_kv_release_tokens(cb->fwd);
	*self = cb;
	return 0;
}

static int cpu_kv_init(void *self, uint32_t n_blocks, uint32_t block_tokens)
{
	struct cpu_backend *cb = self;
	return bn_forward_kv_init(cb->fwd, n_blocks, block_tokens);
}

static int cpu_kv_release(void *self, uint32_t first, uint32_t n)
{
	struct cpu_backend *cb = self;
	return bn_forward_kv_release(cb->fwd, first, n);
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

static int cpu_seq_rewind(void *self, uint32_t seq, uint32_t length)
{
	struct cpu_backend *cb = self;
	return bn_forward_seq_rewind(cb->fwd, seq, length);
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

/* bn_sample for logits row i of the step. A screened row (head_screen.h) holds exact logits
 * only where its mask's argmax can be, which the first draw needs; the closing check's second
 * draw is the argmax of another set (sample.h), so the row gets its full logits before it:
 * the draw sample_row.c makes, in two calls, with the full head's bits. Second draws are
 * rare (an output about to run past max_tokens); their extra pass over the head too. */
static int sample_logits(struct cpu_backend *cb, const struct bn_sample_ctx *ctx, uint32_t i,
			 float *logits, struct bn_sample_out *o)
{
	uint32_t n_vocab = cb->model.cfg.n_vocab;
	if (!ctx->check || !bn_forward_screened(cb->fwd))
		return bn_sample(&cb->sampler, ctx, logits, n_vocab, o);
	struct bn_sample_ctx once = *ctx;
	once.check = NULL;
	int rc = bn_sample(&cb->sampler, &once, logits, n_vocab, o);
	const uint64_t *instead = rc == 0 ? ctx->check->redraw(ctx->check, ctx->n_output, o->token)
					  : NULL;
	if (!instead)
		return rc;
	bn_forward_full_logits(cb->fwd, i, logits);
	once.mask = instead;
	return bn_sample(&cb->sampler, &once, logits, n_vocab, o);
}

/* A verify row's positions in order, each as plain decoding would sample it at that output
 * index (batch.h); none after the first whose token is not the draft that follows it. */
static int verify_row(struct cpu_backend *cb, const struct bn_batch *b, uint32_t r,
		      uint32_t i, float *logits)
{
	uint32_t n_vocab = cb->model.cfg.n_vocab;
	const uint32_t *row = b->tokens + (size_t)r * b->width;
	struct bn_sample_ctx ctx = *b->sample[r];
	for (uint32_t j = 0; j < b->lens[r]; j++, bn_sample_ctx_next(&ctx, n_vocab)) {
		struct bn_sample_out *o = &b->verify[r][j];
		int rc = sample_logits(cb, &ctx, i + j, logits + (size_t)j * n_vocab, o);
		if (rc < 0)
			return rc;
		if (j + 1 < b->lens[r] && o->token != row[j + 1])
			break;
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
	/* Totals since open, into the daemon's counters as what they add since the last step:
	 * every loaded model's backend counts there. */
	struct bn_head_screen_stats st;
	bn_forward_screen_stats(cb->fwd, &st);
	bn_stats.lm_head_screened_rows += st.rows - cb->screen_seen.rows;
	bn_stats.lm_head_screen_groups += st.groups - cb->screen_seen.groups;
	bn_stats.lm_head_full_rows += st.full_rows - cb->screen_seen.full_rows;
	cb->screen_seen = st;
	/* Logits rows are packed in batch order: one per row that wants a token, n_targets per
	 * scored row, lens per verify row. */
	uint32_t i = 0; /* the logits row */
	for (uint32_t r = 0; r < batch->n_rows; r++) {
		const struct bn_score_row *sr = batch->score ? batch->score[r] : NULL;
		float *logits = cb->logits + (size_t)i * n_vocab;
		if (sr)
			rc = score_row(cb, sr, logits);
		else if (bn_batch_verifies(batch, r))
			rc = verify_row(cb, batch, r, i, logits);
		else if (batch->sample[r])
			rc = sample_logits(cb, batch->sample[r], i, logits, &out[r]);
		if (rc < 0)
			return rc;
		i += bn_batch_logit_rows(batch, r, &first);
	}
	return 0;
}

const struct bn_backend_ops bn_backend_cpu = {
	.name = "cpu",
	.open = cpu_open,
	.close = cpu_close,
	.kv_init = cpu_kv_init,
	.kv_release = cpu_kv_release,
	.seq_open = cpu_seq_open,
	.seq_close = cpu_seq_close,
	.seq_fork = cpu_seq_fork,
	.seq_rewind = cpu_seq_rewind,
	.step = cpu_step,
};
