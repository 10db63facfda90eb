/* SPDX-License-Identifier: MIT */
/*
 * The forward pass against its oracles:
 *  - the real test model (../shared/models/stories260K.gguf): 200 greedy ids from BOS equal
 *    the ids an independent implementation produced (llama2.c), through the reference, the
 *    batched forward, and the daemon with the client library;
 *  - the batched forward against the reference forward, for every architecture and tensor
 *    type of the model tool's tiny preset;
 *  - prefill (all prompt tokens in one pass) against step-by-step decoding: bit-identical;
 *  - batch invariance: a sequence's logits alone and inside a batch of 16 are bit-identical;
 *  - greedy ids through the LM head's screen equal the full head's, for every float head;
 *  - the int8 head (--lm-head int8) of every head type: its copy against the definition, and
 *    prefill against step-by-step through it;
 *  - the T3 decode copies (--decode-layout base3) against the T2 planes: bit-identical.
 *
 * Tolerance (fast vs reference): |a - b| <= 2e-3 * (1 + max|logit|); measured worst 5e-7.
 * Why it is not zero: the two sum floats in different orders (SIMD lanes, OpenBLAS), and a
 * ternary layer rounds its input to int8, so an input that differs in the last bit can land
 * on the other side of a rounding boundary and move that layer's output by one int8 step
 * (1/127 of the row's absmax). Both effects are far below the gap between the top logits of a
 * trained model, which the exact greedy-id tests check.
 */
#include "testutil.h"
#include "../daemon/model/forward.h"
#include "../daemon/model/forward_internal.h"
#include "../daemon/model/model.h"
#include "bitnet_client.h"
#include "bitnet_shm.h"
#include "quant.h"

#include "ckassert.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TOLERANCE 2e-3f
#define KNOWN_STEPS TU_STORIES_KNOWN

static char stories_path[512];
static char tiny_dir[] = "/tmp/bn-forward-XXXXXX";

/* ------------------------------------------------------------------------------------------ */
/* Helpers                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static void load(struct bn_model *m, const char *path)
{
	char err[BN_MODEL_ERR_LEN];
	int rc = bn_model_load(m, path, err);
	ck_assert_msg(rc == 0, "load %s: %s", path, err);
}

struct engine {
	struct bn_pool *pool;
	struct bn_forward *fwd;
};

static void engine_new(struct engine *e, const struct bn_model *m, uint32_t max_seqs,
		       uint32_t threads)
{
	e->pool = bn_pool_new(threads);
	ck_assert_ptr_nonnull(e->pool);
	e->fwd = bn_forward_new(m, max_seqs, e->pool, bn_kernels_select(NULL));
	ck_assert_ptr_nonnull(e->fwd);
	ck_assert_int_eq(bn_forward_kv_init_simple(e->fwd, m->cfg.n_ctx), 0);
}

static void engine_free(struct engine *e)
{
	bn_forward_free(e->fwd);
	bn_pool_free(e->pool);
}

/* One row of one sequence: tokens at positions [pos, pos + n). */
static int run_row(struct engine *e, uint32_t seq, const uint32_t *tokens, uint32_t n,
		   uint32_t pos, float *logits, int all)
{
	struct bn_batch b = { .n_rows = 1, .width = n, .tokens = tokens, .lens = &n, .pos = &pos,
			      .seq = &seq };
	return bn_forward_run(e->fwd, &b, logits, all);
}

static float max_abs(const float *a, uint32_t n)
{
	float m = 0.0f;
	for (uint32_t i = 0; i < n; i++)
		m = fmaxf(m, fabsf(a[i]));
	return m;
}

/* The fast path quantizes activations to int8 from floats its kernels sum in another order
 * than the reference does, so now and then one activation lies within an ulp of a rounding
 * boundary and the two round it apart: one quantum of one activation, which in the tiny
 * presets moves that position's logits by up to ~0.15 (seen: llama TQ2_0 with the AVX2
 * kernels, one position in 24). A position may therefore exceed TOLERANCE if it stays within
 * FLIP_TOLERANCE and no more than one position in FLIP_SHARE does; a kernel that is wrong
 * is wrong at most positions, and by more. */
#define FLIP_TOLERANCE 1e-2f
#define FLIP_SHARE 8

/* The largest difference as a share of the logits' scale. */
static float relative_error(const float *want, const float *got, uint32_t n, uint32_t *at)
{
	float worst = 0.0f, scale = 1.0f + max_abs(want, n);
	for (uint32_t i = 0; i < n; i++) {
		float e = fabsf(want[i] - got[i]) / scale;
		if (!(e <= worst)) { /* NaN counts as worst */
			worst = e;
			*at = i;
		}
	}
	return worst;
}

/* Every position within FLIP_TOLERANCE, all but one in FLIP_SHARE within TOLERANCE. */
static void assert_close_steps(const float *want, const float *got, uint32_t n, uint32_t step,
			       uint32_t *flips, uint32_t steps, const char *what)
{
	uint32_t at = 0;
	float e = relative_error(want, got, n, &at);
	ck_assert_msg(e <= FLIP_TOLERANCE, "%s at %u: logit %u is %g, want %g (%g of the scale, "
		      "past %g)", what, step, at, got[at], want[at], e, FLIP_TOLERANCE);
	if (e > TOLERANCE)
		(*flips)++;
	ck_assert_msg(*flips <= steps / FLIP_SHARE, "%s: %u positions up to %u past %g of the "
		      "scale (the last: logit %u is %g, want %g), at most %u may be", what, *flips,
		      step, TOLERANCE, at, got[at], want[at], steps / FLIP_SHARE);
}

static void test_tokens(uint32_t seed, uint32_t vocab, uint32_t *out, uint32_t n)
{
	uint32_t x = seed * 2654435761u + 12345u;
	for (uint32_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		out[i] = 3 + (x >> 8) % (vocab - 3);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* The real test model                                                                         */
/* ------------------------------------------------------------------------------------------ */

START_TEST(stories_reference_greedy)
{
	struct bn_model m;
	load(&m, stories_path);
	struct bn_ref *r = bn_ref_new(&m, KNOWN_STEPS + 1);
	float *logits = malloc(m.cfg.n_vocab * sizeof(float));
	uint32_t token = m.cfg.bos_id;
	for (uint32_t i = 0; i < KNOWN_STEPS; i++) {
		ck_assert_int_eq(bn_ref_step(r, token, logits), 0);
		token = bn_argmax(logits, m.cfg.n_vocab);
		ck_assert_msg(token == tu_stories_known[i], "step %u: %u, want %u", i, token,
			      tu_stories_known[i]);
	}
	free(logits);
	bn_ref_free(r);
	bn_model_free(&m);
}
END_TEST

START_TEST(stories_fast_greedy)
{
	struct bn_model m;
	load(&m, stories_path);
	struct engine e;
	engine_new(&e, &m, 1, 0);
	float *logits = malloc(m.cfg.n_vocab * sizeof(float));
	uint32_t token = m.cfg.bos_id;
	for (uint32_t i = 0; i < KNOWN_STEPS; i++) {
		ck_assert_int_eq(run_row(&e, 0, &token, 1, i, logits, 0), 0);
		token = bn_argmax(logits, m.cfg.n_vocab);
		ck_assert_msg(token == tu_stories_known[i], "step %u: %u, want %u", i, token,
			      tu_stories_known[i]);
	}
	free(logits);
	engine_free(&e);
	bn_model_free(&m);
}
END_TEST

START_TEST(stories_through_daemon)
{
	const char *args[] = { "--backend", "cpu", "--model", stories_path, NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *c;
	ck_assert_int_eq(bn_connect(d.socket_path, 0, &c), 0);
	struct bn_model_info info;
	ck_assert_int_eq(bn_model_info(c, &info), 0);
	ck_assert_str_eq(info.backend, "cpu");
	ck_assert_uint_eq(info.vocab_size, 512);
	uint32_t bos = info.bos_id, out[KNOWN_STEPS];
	struct bn_request req = { .prompt = &bos, .n_prompt = 1, .max_tokens = KNOWN_STEPS,
				  .flags = BN_REQ_IGNORE_EOS };
	struct bn_result res;
	ck_assert_int_eq(bn_generate(c, &req, out, KNOWN_STEPS, &res, tu_scaled_ns(60 * 1000000000LL)), 0);
	ck_assert_uint_eq(res.n_tokens, KNOWN_STEPS);
	for (uint32_t i = 0; i < KNOWN_STEPS; i++)
		ck_assert_msg(out[i] == tu_stories_known[i], "token %u: %u, want %u", i, out[i],
			      tu_stories_known[i]);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Properties checked on several models                                                        */
/* ------------------------------------------------------------------------------------------ */

/* The batched forward, one token at a time, against the reference. */
static void check_fast_vs_reference(const char *path, uint32_t steps)
{
	struct bn_model m;
	load(&m, path);
	struct bn_ref *r = bn_ref_new(&m, steps);
	struct engine e;
	engine_new(&e, &m, 1, 0);
	uint32_t V = m.cfg.n_vocab, *tokens = malloc(steps * sizeof(uint32_t));
	float *want = malloc(V * sizeof(float)), *got = malloc(V * sizeof(float));
	test_tokens(7, V, tokens, steps);
	uint32_t flips = 0;
	for (uint32_t i = 0; i < steps; i++) {
		ck_assert_int_eq(bn_ref_step(r, tokens[i], want), 0);
		ck_assert_int_eq(run_row(&e, 0, &tokens[i], 1, i, got, 0), 0);
		assert_close_steps(want, got, V, i, &flips, steps, path);
	}
	free(tokens);
	free(want);
	free(got);
	engine_free(&e);
	bn_ref_free(r);
	bn_model_free(&m);
}

/* All positions of a prompt in one pass against the same prompt one token at a time. */
/* Speculative decoding's rows (sched.h): from each position, a row of the true token and three
 * drafts, every position's logits; drafts that are wrong are rewound (bn_forward_seq_rewind)
 * and written again by the next row. Every logits row that follows only true tokens equals
 * the prefill's, bit for bit: what a rejected draft wrote is never read. Rows alternate
 * between all drafts right and the first two wrong. */
static void check_rewound_rows(struct engine *e, uint32_t V, const uint32_t *tokens, uint32_t n,
			       const float *pre, const char *path)
{
	uint32_t row[4];
	float *logits = malloc((size_t)4 * V * sizeof(float));
	ck_assert_int_eq(bn_forward_seq_reset(e->fwd, 1), 0);
	for (uint32_t pos = 0, r = 0; pos < n; r++) {
		uint32_t len = n - pos < 4 ? n - pos : 4, good = r % 2 ? 1 : len;
		for (uint32_t j = 0; j < len; j++)
			row[j] = j < good ? tokens[pos + j] : (tokens[pos + j] + 1 + j) % V;
		ck_assert_int_eq(run_row(e, 1, row, len, pos, logits, 1), 0);
		for (uint32_t j = 0; j < good; j++)
			ck_assert_msg(memcmp(logits + (size_t)j * V, pre + (size_t)(pos + j) * V,
					     V * sizeof(float)) == 0,
				      "%s: position %u differs after rewound drafts", path, pos + j);
		pos += good;
		ck_assert_int_eq(bn_forward_seq_rewind(e->fwd, 1, pos), 0);
	}
	ck_assert_int_eq(bn_forward_seq_rewind(e->fwd, 1, n + 1), -EINVAL);
	free(logits);
}

static void check_prefill_vs_stepwise(const char *path, uint32_t n)
{
	struct bn_model m;
	load(&m, path);
	struct engine e;
	engine_new(&e, &m, 2, 0);
	uint32_t V = m.cfg.n_vocab, *tokens = malloc(n * sizeof(uint32_t));
	float *pre = malloc((size_t)n * V * sizeof(float)), *step = malloc(V * sizeof(float));
	test_tokens(11, V, tokens, n);
	ck_assert_int_eq(run_row(&e, 0, tokens, n, 0, pre, 1), 0);
	for (uint32_t i = 0; i < n; i++) {
		ck_assert_int_eq(run_row(&e, 1, &tokens[i], 1, i, step, 0), 0);
		/* Bit-identical, not just close: each query token is computed on its own
		 * (forward.c, attention), so splitting a prompt into steps changes nothing. */
		ck_assert_msg(memcmp(step, pre + (size_t)i * V, V * sizeof(float)) == 0,
			      "%s: position %u differs between prefill and step-by-step", path, i);
	}
	check_rewound_rows(&e, V, tokens, n, pre, path);
	free(tokens);
	free(pre);
	free(step);
	engine_free(&e);
	bn_model_free(&m);
}

/* Greedy decoding with the LM head's screen (head_screen.h) against the full head: the same
 * ids, and the chosen token's logit the same bits. A Q8_0 / Q6_K head has no screen. */
static void check_screened_greedy(const char *path, uint32_t steps)
{
	struct bn_model m;
	load(&m, path);
	struct engine full, scr;
	engine_new(&full, &m, 1, 0);
	engine_new(&scr, &m, 1, 0);
	struct bn_head_screen screen;
	int rc = m.output.kind == BN_LINEAR_FLOAT
			 ? bn_head_screen_build(&screen, &m.output.f, scr.pool) : -EINVAL;
	ck_assert_int_eq(rc, m.output.kind == BN_LINEAR_FLOAT ? 0 : -EINVAL);
	if (rc == 0) {
		ck_assert_int_eq(bn_forward_use_screen(scr.fwd, &screen), 0);
		uint32_t V = m.cfg.n_vocab, a = 5, b = 5, one = 1, seq = 0;
		float *la = malloc(V * sizeof(float)), *lb = malloc(V * sizeof(float));
		const struct bn_sampling greedy = { .temperature = 0 };
		struct bn_sample_ctx ctx = { .params = &greedy };
		const struct bn_sample_ctx *cp = &ctx;
		for (uint32_t i = 0; i < steps; i++) {
			struct bn_batch bs = { .n_rows = 1, .width = 1, .tokens = &b, .lens = &one,
					       .pos = &i, .seq = &seq, .sample = &cp };
			ck_assert_int_eq(run_row(&full, 0, &a, 1, i, la, 0), 0);
			ck_assert_int_eq(bn_forward_run(scr.fwd, &bs, lb, 0), 0);
			a = bn_argmax(la, V);
			b = bn_argmax(lb, V);
			ck_assert_msg(a == b && memcmp(&la[a], &lb[b], sizeof(float)) == 0,
				      "%s step %u: screened %u (%a), full %u (%a)", path, i, b, lb[b], a,
				      la[a]);
		}
		struct bn_head_screen_stats st;
		bn_forward_screen_stats(scr.fwd, &st);
		ck_assert_uint_eq(st.rows, steps);
		free(la);
		free(lb);
		engine_free(&scr); /* before the screen it borrows */
		bn_head_screen_free(&screen);
	} else {
		engine_free(&scr);
	}
	engine_free(&full);
	bn_model_free(&m);
}

/* Row o of the LM head as floats, whatever its type. */
static void head_row(const struct bn_linear *h, uint32_t o, float *out)
{
	if (h->kind == BN_LINEAR_FLOAT)
		bn_f_row(&h->f, o, out);
	else
		ck_assert_int_eq(bn_dequant_row(h->src->type, h->src->data, h->src->size, o, h->n_in,
						out), 0);
}

/* What the daemon does with --lm-head int8 (bn_model_release_head_panels): the float head's
 * panels go, every embedding row stays the same floats (a tied one now read from the file),
 * and the int8 head's logits of the prompt (pre, n positions) stay the same bits. */
static void check_released_head(struct bn_model *m, struct engine *e, const uint32_t *tokens,
				uint32_t n, const float *pre)
{
	uint32_t V = m->cfg.n_vocab, d = m->cfg.n_embd;
	int panels = m->output.kind == BN_LINEAR_FLOAT && m->output.f.panel_rows;
	uint64_t want = panels ? bn_f_panel_bytes(m->output.f.type, d, V) : 0;
	uint64_t repacked = m->repacked_bytes;
	float *embed = malloc((size_t)V * d * sizeof(float)), *row = malloc(d * sizeof(float));
	float *again = malloc((size_t)n * V * sizeof(float));
	for (uint32_t t = 0; t < V; t++)
		bn_model_embed(m, t, embed + (size_t)t * d);
	ck_assert_uint_eq(bn_model_release_head_panels(m), want);
	ck_assert_uint_eq(m->repacked_bytes, repacked - want);
	ck_assert_int_eq(m->embed_from_output, 0);
	ck_assert_uint_eq(m->output.f.panel_rows, 0);
	ck_assert_uint_eq(bn_model_release_head_panels(m), 0); /* nothing left to release */
	float *file_row = malloc(d * sizeof(float));
	const struct bn_gguf_tensor *te = m->tok_embd;
	for (uint32_t t = 0; t < V; t++) {
		bn_model_embed(m, t, row); /* now read from the file (bn_gguf_read) */
		ck_assert_msg(memcmp(row, embed + (size_t)t * d, d * sizeof(float)) == 0,
			      "embedding row %u changed when the head's panels went", t);
		ck_assert_int_eq(bn_dequant_row(te->type, te->data, te->size, t, d, file_row), 0);
		ck_assert_msg(memcmp(row, file_row, d * sizeof(float)) == 0,
			      "embedding row %u is not the file's row", t);
	}
	free(file_row);
	bn_forward_seq_reset(e->fwd, 0);
	ck_assert_int_eq(run_row(e, 0, tokens, n, 0, again, 1), 0);
	ck_assert_msg(memcmp(again, pre, (size_t)n * V * sizeof(float)) == 0,
		      "int8 head logits changed when the float head's panels went");
	free(embed);
	free(row);
	free(again);
}

/* The int8 head (--lm-head int8) of a float, Q8_0 or Q6_K head: the copy is its definition's
 * (per row: scale = max|w| / 127, q = w / scale rounded to nearest even, row_sum = sum q,
 * zeros past n_in); through the forward pass its logits are the same as one prefill and step
 * by step, and they are not the file head's. */
static void check_int8_head(const char *path, uint32_t n)
{
	struct bn_model m;
	load(&m, path);
	const struct bn_linear *h = &m.output;
	struct engine e, full;
	engine_new(&e, &m, 2, 0);
	engine_new(&full, &m, 1, 0);
	struct bn_head_screen copy;
	int rc = h->kind == BN_LINEAR_FLOAT
			 ? bn_head_screen_build(&copy, &h->f, e.pool)
			 : bn_head_int8_build_rows(&copy, h->src->type, h->src->data, h->src->size,
						   h->n_in, h->n_out, e.pool);
	ck_assert_int_eq(rc, 0);
	float *row = malloc(h->n_in * sizeof(float));
	for (uint32_t o = 0; o < h->n_out; o++) {
		head_row(h, o, row);
		float amax = 0.0f;
		for (uint32_t k = 0; k < h->n_in; k++)
			amax = fmaxf(amax, fabsf(row[k]));
		float scale = amax / 127.0f;
		ck_assert_msg(copy.scale[o] == scale, "%s row %u: scale %a, want %a", path, o,
			      copy.scale[o], scale);
		const int8_t *q = copy.w.q + (size_t)o * copy.w.row_bytes;
		int32_t sum = 0;
		for (uint32_t k = 0; k < copy.w.row_bytes; k++) {
			float c = k < h->n_in && scale > 0 ? nearbyintf(row[k] / scale) : 0.0f;
			c = fminf(fmaxf(c, -127.0f), 127.0f);
			ck_assert_msg(q[k] == (int8_t)c, "%s row %u input %u: %d, want %d", path, o, k,
				      q[k], (int)c);
			sum += q[k];
		}
		ck_assert_int_eq(copy.row_sum[o], sum);
	}
	free(row);
	ck_assert_int_eq(bn_forward_use_screen(e.fwd, &copy), h->kind == BN_LINEAR_FLOAT ? 0 : -EINVAL);
	bn_forward_use_screen(e.fwd, NULL);
	bn_forward_use_int8_head(e.fwd, &copy.w);
	uint32_t V = m.cfg.n_vocab, *tokens = malloc(n * sizeof(uint32_t));
	float *pre = malloc((size_t)n * V * sizeof(float)), *step = malloc(V * sizeof(float));
	float *file = malloc(V * sizeof(float));
	test_tokens(12, V, tokens, n);
	ck_assert_int_eq(run_row(&e, 0, tokens, n, 0, pre, 1), 0);
	int differs = 0;
	for (uint32_t i = 0; i < n; i++) {
		ck_assert_int_eq(run_row(&e, 1, &tokens[i], 1, i, step, 0), 0);
		ck_assert_msg(memcmp(step, pre + (size_t)i * V, V * sizeof(float)) == 0,
			      "%s: int8 head, position %u differs between prefill and step-by-step",
			      path, i);
		ck_assert_int_eq(run_row(&full, 0, &tokens[i], 1, i, file, 0), 0);
		differs |= memcmp(step, file, V * sizeof(float)) != 0;
	}
	ck_assert_msg(differs, "%s: the int8 head gave the file head's logits", path);
	bn_head_screen_drop_head(&copy); /* as the daemon does before the panels go */
	check_released_head(&m, &e, tokens, n, pre);
	free(tokens);
	free(pre);
	free(step);
	free(file);
	engine_free(&e); /* before the copy it borrows */
	engine_free(&full);
	bn_head_screen_free(&copy);
	bn_model_free(&m);
}

/* The T3 decode copies (bn_model_add_t3) against the T2 planes: a 66-token prompt (token
 * blocks of 64 and 2: T2, then T3) and decode steps of 1 to 4 rows give the same logits, to
 * the bit. Skipped where this CPU has no T3 kernel. */
static void check_t3_decode(const char *path)
{
	struct bn_model m;
	load(&m, path);
	struct engine t3, t2;
	engine_new(&t3, &m, 4, 0);
	engine_new(&t2, &m, 4, 0);
	if (bn_forward_use_t3(t3.fwd, 1) == -ENOTSUP) {
		printf("SKIP: T3 decode copies (no T3 kernel beside the %s kernels: it needs "
		       BN_T3_NEEDS ")\n", bn_kernels_select(NULL)->name);
		engine_free(&t3);
		engine_free(&t2);
		bn_model_free(&m);
		return;
	}
	ck_assert_int_eq(bn_model_add_t3(&m, t3.pool), 0);
	int any_t2 = 0;
	for (uint32_t li = 0; li < m.cfg.n_layer; li++)
		any_t2 |= m.layers[li].wq.kind == BN_LINEAR_T2;
	ck_assert(!any_t2 || m.t3_bytes > 0);
	uint32_t V = m.cfg.n_vocab, prompt[66];
	float *a = malloc((size_t)4 * V * sizeof(float)), *b = malloc((size_t)4 * V * sizeof(float));
	test_tokens(13, V, prompt, 66);
	ck_assert_int_eq(run_row(&t3, 0, prompt, 66, 0, a, 0), 0);
	ck_assert_int_eq(run_row(&t2, 0, prompt, 66, 0, b, 0), 0);
	ck_assert_msg(memcmp(a, b, V * sizeof(float)) == 0, "%s: T3 prompt logits differ", path);
	uint32_t tok[4], lens[4] = { 1, 1, 1, 1 }, pos[4], seq[4] = { 0, 1, 2, 3 };
	for (uint32_t s = 1; s < 4; s++) {
		pos[s] = 0;
		bn_forward_seq_reset(t3.fwd, s);
		bn_forward_seq_reset(t2.fwd, s);
	}
	pos[0] = 66;
	for (uint32_t n = 1; n <= 4; n++)
		for (uint32_t step = 0; step < 3; step++) {
			for (uint32_t r = 0; r < n; r++)
				tok[r] = 3 + (7 * r + 11 * step + n) % (V - 3);
			struct bn_batch bt = { .n_rows = n, .width = 1, .tokens = tok, .lens = lens,
					       .pos = pos, .seq = seq };
			ck_assert_int_eq(bn_forward_run(t3.fwd, &bt, a, 0), 0);
			ck_assert_int_eq(bn_forward_run(t2.fwd, &bt, b, 0), 0);
			ck_assert_msg(memcmp(a, b, (size_t)n * V * sizeof(float)) == 0,
				      "%s: T3 decode logits differ at %u rows, step %u", path, n, step);
			for (uint32_t r = 0; r < n; r++)
				pos[r]++;
		}
	free(a);
	free(b);
	engine_free(&t3);
	engine_free(&t2);
	bn_model_free(&m);
}

#define INV_SEQS 16

/* Sequence 0's logits, prefill and then decode steps, alone and inside batches of 16 rows
 * of other lengths and positions: bit-identical. */
static void check_batch_invariance(const char *path)
{
	struct bn_model m;
	load(&m, path);
	uint32_t V = m.cfg.n_vocab;
	struct engine alone, crowd;
	engine_new(&alone, &m, 1, 0);
	engine_new(&crowd, &m, INV_SEQS, 0);
	uint32_t lens[INV_SEQS], pos[INV_SEQS] = { 0 }, seq[INV_SEQS], width = 0;
	for (uint32_t s = 0; s < INV_SEQS; s++) {
		lens[s] = 1 + (s * 7 + 5) % 23;
		seq[s] = s;
		width = lens[s] > width ? lens[s] : width;
	}
	uint32_t *tok = calloc((size_t)INV_SEQS * width, sizeof(uint32_t));
	for (uint32_t s = 0; s < INV_SEQS; s++)
		test_tokens(100 + s, V, tok + (size_t)s * width, lens[s]);
	float *a = malloc((size_t)V * sizeof(float)), *b = malloc((size_t)INV_SEQS * V * sizeof(float));
	for (uint32_t step = 0; step < 4; step++) {
		struct bn_batch batch = { .n_rows = INV_SEQS, .width = width, .tokens = tok,
					  .lens = lens, .pos = pos, .seq = seq };
		ck_assert_int_eq(run_row(&alone, 0, tok, lens[0], pos[0], a, 0), 0);
		ck_assert_int_eq(bn_forward_run(crowd.fwd, &batch, b, 0), 0);
		ck_assert_msg(memcmp(a, b, V * sizeof(float)) == 0,
			      "%s step %u: logits differ inside a batch", path, step);
		/* next step: every row decodes one greedy token (row 0 also checks the others
		 * keep going with their own lengths) */
		for (uint32_t s = 0; s < INV_SEQS; s++) {
			pos[s] += lens[s];
			tok[(size_t)s * width] = bn_argmax(b + (size_t)s * V, V);
			lens[s] = 1;
		}
	}
	free(tok);
	free(a);
	free(b);
	engine_free(&alone);
	engine_free(&crowd);
	bn_model_free(&m);
}

START_TEST(stories_fast_vs_reference)
{
	check_fast_vs_reference(stories_path, 48);
}
END_TEST

START_TEST(stories_prefill_vs_stepwise)
{
	check_prefill_vs_stepwise(stories_path, 96);
}
END_TEST

START_TEST(stories_batch_invariance)
{
	check_batch_invariance(stories_path);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Tiny presets of every architecture and weight type                                          */
/* ------------------------------------------------------------------------------------------ */

struct variant {
	const char *arch, *type, *embed, *extra;
};

static const struct variant variants[] = {
	{ "bitnet-b1.58", "i2_s", "f16", NULL },
	{ "bitnet-25", "i2_s", "f16", NULL },
	{ "bitnet-b1.58", "tq2_0", "f16", NULL },
	{ "bitnet-b1.58", "tq1_0", "f16", NULL },
	{ "bitnet", "tq2_0", "f16", NULL },
	{ "bitnet", "tq1_0", "q8_0", "--untied" },
	{ "bitnet", "i2_s", "q6_k", "--activation=relu2" },
	{ "llama", "f32", "f32", "--untied" },
	{ "llama", "f16", "f16", NULL },
	{ "llama", "bf16", "bf16", NULL },
	{ "llama", "tq2_0", "f16", NULL },
};
#define N_VARIANTS (sizeof(variants) / sizeof(variants[0]))

/* In a reduced run (testutil.h: tu_reduced) the variants that take every path of the fast
 * pass once: I2_S, TQ1_0 with a Q8_0 head and untied, I2_S with a Q6_K embedding and ReLU²,
 * F16 and TQ2_0 in the llama graph; natively all of them. */
static int variant_sampled(uint32_t i)
{
	return !tu_reduced() || i == 0 || i == 5 || i == 6 || i == 8 || i == 10;
}

/* The llama variant with F32 weights, whose daemon reports no decode layout
 * (daemon_reports_compute): written in a reduced run too, where it is not sampled. */
#define VARIANT_LLAMA_F32 7u

/* The variants make_variants writes: the sampled ones and those the daemon cases read. */
static int variant_written(uint32_t i)
{
	return variant_sampled(i) || i == VARIANT_LLAMA_F32;
}

static void variant_path(uint32_t i, char *out, size_t cap)
{
	snprintf(out, cap, "%s/v%u.gguf", tiny_dir, i);
}

static void make_variants(void)
{
	const char *tool = getenv("BITNET_MODEL_TOOL");
	if (!tool) {
		fprintf(stderr, "BITNET_MODEL_TOOL is not set (make check sets it)\n");
		exit(EXIT_FAILURE);
	}
	if (!mkdtemp(tiny_dir)) {
		perror("mkdtemp");
		exit(EXIT_FAILURE);
	}
	for (uint32_t i = 0; i < N_VARIANTS; i++) {
		if (!variant_written(i))
			continue;
		char path[256], cmd[1024];
		variant_path(i, path, sizeof(path));
		const struct variant *v = &variants[i];
		snprintf(cmd, sizeof(cmd),
			 "%s write --preset tiny --arch %s --type %s --embed-type %s %s --out %s >/dev/null",
			 tool, v->arch, v->type, v->embed, v->extra ? v->extra : "", path);
		if (system(cmd) != 0) {
			fprintf(stderr, "failed: %s\n", cmd);
			exit(EXIT_FAILURE);
		}
	}
}

static void remove_variants(void)
{
	for (uint32_t i = 0; i < N_VARIANTS; i++) {
		char path[256];
		variant_path(i, path, sizeof(path));
		unlink(path);
	}
	rmdir(tiny_dir);
}

START_TEST(tiny_fast_vs_reference)
{
	char path[256];
	if (!variant_sampled((uint32_t)_i))
		return;
	variant_path((uint32_t)_i, path, sizeof(path));
	check_fast_vs_reference(path, 24);
}
END_TEST

START_TEST(tiny_prefill_vs_stepwise)
{
	char path[256];
	if (!variant_sampled((uint32_t)_i))
		return;
	variant_path((uint32_t)_i, path, sizeof(path));
	check_prefill_vs_stepwise(path, 40);
}
END_TEST

START_TEST(tiny_t3_decode)
{
	char path[256];
	if (!variant_sampled((uint32_t)_i))
		return;
	variant_path((uint32_t)_i, path, sizeof(path));
	check_t3_decode(path);
}
END_TEST

/* The cache gives blocks back (bn_forward_kv_release, what a lending KV pool calls for a
 * block it frees): blocks 0-2 of sequence 0 read as zeros in every layer, keys and values,
 * once given back, while block 3 and sequence 1's blocks keep their bytes; a sequence
 * written again into them computes what it computed before. Block sizes whose rows do not
 * fill whole pages are refused. */
START_TEST(tiny_kv_release)
{
	char path[256];
	variant_path(0, path, sizeof(path));
	struct bn_model m;
	load(&m, path);
	struct engine e;
	engine_new(&e, &m, 2, 1);
	struct bn_forward *f = e.fwd;
	uint32_t granule = bn_forward_kv_release_tokens(f);
	ck_assert_uint_gt(granule, 1); /* 8: rows of 512 bytes */
	ck_assert_uint_eq(f->kv_block_tokens % granule, 0); /* 16 positions: whole pages */
	uint32_t prompt[70], per_seq = f->kv_blocks / 2;
	for (uint32_t i = 0; i < 70; i++)
		prompt[i] = 1 + (i * 7) % 200;
	uint32_t vocab = m.cfg.n_vocab;
	float *before = malloc(sizeof(float) * vocab), *after = malloc(sizeof(float) * vocab);
	ck_assert_int_eq(run_row(&e, 0, prompt, 70, 0, before, 0), 0);
	ck_assert_int_eq(run_row(&e, 1, prompt, 70, 0, after, 0), 0);
	size_t row = (size_t)f->kv_block_tokens * f->kv_dim, n_layer = m.cfg.n_layer;
	float *kept = malloc(sizeof(float) * row * 2 * n_layer * 2);
	for (size_t li = 0; li < n_layer; li++)
		for (int kv = 0; kv < 2; kv++) {
			float *base = kv ? f->kv_v : f->kv_k;
			memcpy(kept + ((li * 2 + kv) * 2 + 0) * row, kv_at(f, base, (uint32_t)li, 3, 0),
			       row * sizeof(float));
			memcpy(kept + ((li * 2 + kv) * 2 + 1) * row,
			       kv_at(f, base, (uint32_t)li, per_seq, 0), row * sizeof(float));
		}
	ck_assert_int_eq(bn_forward_kv_release(f, 0, 0), 0);
	ck_assert_int_eq(bn_forward_kv_release(f, 0, 3), 0);
	ck_assert_int_eq(bn_forward_kv_release(f, f->kv_blocks - 1, 2), -EINVAL);
	for (size_t li = 0; li < n_layer; li++)
		for (int kv = 0; kv < 2; kv++) {
			float *base = kv ? f->kv_v : f->kv_k;
			const float *gone = kv_at(f, base, (uint32_t)li, 0, 0);
			for (size_t i = 0; i < 3 * row; i++)
				ck_assert_msg(gone[i] == 0.0f, "layer %zu %s: a given-back block kept %g",
					      li, kv ? "V" : "K", (double)gone[i]);
			ck_assert_msg(!memcmp(kept + ((li * 2 + kv) * 2 + 0) * row,
					      kv_at(f, base, (uint32_t)li, 3, 0), row * sizeof(float)) &&
					      !memcmp(kept + ((li * 2 + kv) * 2 + 1) * row,
						      kv_at(f, base, (uint32_t)li, per_seq, 0),
						      row * sizeof(float)),
				      "layer %zu %s: a block not given back changed", li, kv ? "V" : "K");
		}
	ck_assert_int_eq(bn_forward_seq_reset(f, 0), 0);
	ck_assert_int_eq(run_row(&e, 0, prompt, 70, 0, after, 0), 0);
	ck_assert_msg(!memcmp(before, after, sizeof(float) * vocab),
		      "logits differ once the blocks were given back and written again");
	free(kept);
	free(before);
	free(after);
	ck_assert_int_eq(bn_forward_kv_init(f, 8, granule / 2), 0); /* rows of half a page */
	ck_assert_int_eq(bn_forward_kv_release(f, 0, 1), -EOPNOTSUPP);
	engine_free(&e);
	bn_model_free(&m);
}
END_TEST

/* Greedy ids from a daemon on a ternary tiny preset, with extra flags. */
static void daemon_greedy(const char *path, const char *const *extra, uint32_t out[32])
{
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start_cpu(&d, path, extra), 0);
	struct bn_client *c;
	ck_assert_int_eq(bn_connect(d.socket_path, 0, &c), 0);
	uint32_t prompt[3] = { 1, 5, 9 };
	struct bn_request req = { .prompt = prompt, .n_prompt = 3, .max_tokens = 32,
				  .flags = BN_REQ_IGNORE_EOS };
	struct bn_result res;
	ck_assert_int_eq(bn_generate(c, &req, out, 32, &res, tu_scaled_ns(60 * 1000000000LL)), 0);
	ck_assert_uint_eq(res.n_tokens, 32);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}

/* The daemon with --decode-layout base3 (one-row decode steps through the T3 copies) gives
 * the ids it gives without. */
START_TEST(daemon_base3_same_ids)
{
	if (!bn_t3_kernel(bn_kernels_select(NULL))) {
		printf("SKIP: --decode-layout base3 (no T3 kernel beside the %s kernels: it needs "
		       BN_T3_NEEDS ")\n", bn_kernels_select(NULL)->name);
		return;
	}
	char path[256];
	variant_path(0, path, sizeof(path)); /* bitnet-b1.58, I2_S */
	static const char *const base3[] = { "--decode-layout", "base3", NULL };
	static const char *const none[] = { NULL };
	uint32_t a[32], b[32];
	daemon_greedy(path, base3, a);
	daemon_greedy(path, none, b);
	for (int i = 0; i < 32; i++)
		ck_assert_msg(a[i] == b[i], "token %d: base3 %u, 2bit %u", i, a[i], b[i]);
}
END_TEST

/* What a daemon started with flags reports through bn_model_compute (the header's lm_head
 * and decode_layout words, shm/PROTOCOL.md §4.1). */
static void expect_compute(uint32_t variant, const char *const *flags, uint32_t head,
			   uint32_t layout)
{
	char path[256], said[128] = "";
	variant_path(variant, path, sizeof(path));
	for (int i = 0; flags[i]; i++)
		snprintf(said + strlen(said), sizeof(said) - strlen(said), " %s", flags[i]);
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start_cpu(&d, path, flags), 0);
	struct bn_client *c;
	ck_assert_int_eq(bn_connect(d.socket_path, 0, &c), 0);
	uint32_t got_head = 99, got_layout = 99;
	ck_assert_int_eq(bn_model_compute(c, &got_head, &got_layout), 0);
	ck_assert_msg(got_head == head && got_layout == layout,
		      "%s%s: lm_head %u decode_layout %u, want %u %u", path, said, got_head,
		      got_layout, head, layout);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}

START_TEST(daemon_reports_compute)
{
	static const char *const none[] = { NULL };
	static const char *const full[] = { "--lm-head", "full", NULL };
	static const char *const fast[] = { "--lm-head", "int8", "--decode-layout", "base3", NULL };
	uint32_t base3 = bn_t3_kernel(bn_kernels_select(NULL)) ? BN_DECODE_LAYOUT_BASE3
							       : BN_DECODE_LAYOUT_2BIT;
	expect_compute(0, none, BN_HEAD_SCREENED, BN_DECODE_LAYOUT_2BIT);
	expect_compute(0, full, BN_HEAD_FILE, BN_DECODE_LAYOUT_2BIT);
	expect_compute(0, fast, BN_HEAD_INT8, base3);
	expect_compute(VARIANT_LLAMA_F32, fast, BN_HEAD_INT8, BN_DECODE_LAYOUT_NONE);
	/* bitnet TQ1_0 with a Q8_0 head: no screen (screened needs a float head) */
	expect_compute(5, none, BN_HEAD_FILE, BN_DECODE_LAYOUT_2BIT);
}
END_TEST

START_TEST(tiny_int8_head)
{
	char path[256];
	if (!variant_sampled((uint32_t)_i))
		return;
	variant_path((uint32_t)_i, path, sizeof(path));
	check_int8_head(path, 16);
}
END_TEST

START_TEST(tiny_screened_greedy)
{
	char path[256];
	if (!variant_sampled((uint32_t)_i))
		return;
	variant_path((uint32_t)_i, path, sizeof(path));
	check_screened_greedy(path, 32);
}
END_TEST

START_TEST(tiny_batch_invariance)
{
	char path[256];
	if (!variant_sampled((uint32_t)_i))
		return;
	variant_path((uint32_t)_i, path, sizeof(path));
	check_batch_invariance(path);
}
END_TEST

int main(void)
{
	if (!tu_forced_kernels_runnable())
		return 77;
	make_variants();
	Suite *s = suite_create("forward");
	TCase *tiny = tcase_create("tiny presets");
	tcase_set_timeout(tiny, 120);
	tcase_add_loop_test(tiny, tiny_fast_vs_reference, 0, N_VARIANTS);
	tcase_add_loop_test(tiny, tiny_prefill_vs_stepwise, 0, N_VARIANTS);
	tcase_add_loop_test(tiny, tiny_batch_invariance, 0, N_VARIANTS);
	tcase_add_loop_test(tiny, tiny_screened_greedy, 0, N_VARIANTS);
	tcase_add_loop_test(tiny, tiny_int8_head, 0, N_VARIANTS);
	tcase_add_loop_test(tiny, tiny_t3_decode, 0, N_VARIANTS);
	tcase_add_test(tiny, tiny_kv_release);
	suite_add_tcase(s, tiny);
	TCase *daemons = tcase_create("tiny presets in a daemon");
	tcase_set_tags(daemons, TU_TAG_DAEMON);
	tcase_set_timeout(daemons, 120);
	tcase_add_test(daemons, daemon_base3_same_ids);
	tcase_add_test(daemons, daemon_reports_compute);
	suite_add_tcase(s, daemons);
	const char *models = getenv("BITNET_TEST_MODELS");
	if (models && *models) {
		snprintf(stories_path, sizeof(stories_path), "%s/stories260K.gguf", models);
		TCase *real = tcase_create("test model");
		tcase_set_timeout(real, 120);
		tcase_add_test(real, stories_reference_greedy);
		tcase_add_test(real, stories_fast_greedy);
		tcase_add_test(real, stories_fast_vs_reference);
		tcase_add_test(real, stories_prefill_vs_stepwise);
		tcase_add_test(real, stories_batch_invariance);
		suite_add_tcase(s, real);
		TCase *served = tcase_create("test model in a daemon");
		tcase_set_tags(served, TU_TAG_DAEMON);
		tcase_set_timeout(served, 120);
		tcase_add_test(served, stories_through_daemon);
		suite_add_tcase(s, served);
	} else {
		printf("SKIP: test-model tests (BITNET_TEST_MODELS is not set; .ci/run sets it to ../shared/models)\n");
	}
	int rc = tu_run_suite(s);
	remove_variants();
	return rc;
}
