/* SPDX-License-Identifier: MIT */
/*
 * test_cuda_fast_ops — the --cuda-kernels variants (issue 49) through every request kind of
 * the cuda backend (issue 45), against base's bits. test_cuda_ops checks base against the cpu
 * backend and its own plain decoding; here `fast` (graph, fused, gemv, mma) and `all` (with
 * split attention; its 256-position splits hold every context here whole, so it gives base's
 * bits too) must answer every step as base does, token, log-probability and alternatives:
 *
 *  - scored rows: a sequence scored in two chunks (the second starting inside a block), the
 *    first chunk in a step beside a sampled prompt (a row of 10 logits rows next to one of 1);
 *  - verify rows and seq_rewind: plain seeded decoding with penalties (one-row decode steps,
 *    graphs in the variants), then the same drafts verified in one row, the rejected one
 *    rewound and decoding continued; the verified answers are also the variant's own plain
 *    ones;
 *  - seq_fork: a sequence forked from another's 21-token prefix (a block shared, 5 positions
 *    copied), both continued in two-row decode steps (a graph);
 *  - grammar masks: five rows, three with masks (greedy, seeded, and seeded with a closing
 *    check that refuses all but two tokens, so the second draw runs), prefilled and decoded
 *    in steps of five rows (a graph bucket of six: a padding row, which must get no mask, no
 *    penalty and not be read), then a verify row with a different mask at each position and
 *    the check; every token allowed by its mask, the checked row's tokens the two it allows;
 *  - the packed-weight cache: `fast` writes it (the i2s preset: T2 planes and an F16 head
 *    image; the f16 preset: F16 linears, whose images the variant uploads itself), then
 *    `fast` and base start from it (hits) and without it, all with the same bits;
 *  - the daemon: `bitnetd --cuda-kernels fast` restarted onto its cache (weights_cache=hit)
 *    answers generate with log-probabilities, a speculative request (the plain one's bits,
 *    drafts accepted) and score as a base daemon on the same cache does.
 *
 * Built on a GPU (test_cuda_fast_ops; exits 77 without one) and on the CUDA host harness
 * (test_cuda_fast_ops_host, the race check on), where a tiny step costs about 0.3 s.
 */
#ifndef BN_HAVE_CUDA
#include <stdio.h>

int main(void)
{
	printf("SKIP: this build has no CUDA backend (no nvcc at build time, CUDA=0, or the sanitizer build)\n");
	return 77;
}
#else

#define _GNU_SOURCE
#include "testutil.h"
#include "cuda_testutil.h"
#include "bitnet_client.h"
#include "../daemon/backends/backend.h"
#include "../daemon/common/stats.h"
#include "../daemon/model/sample.h"

#include "ckassert.h"
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEC 1000000000LL
#define MAX_SEQS 8
#define BT 16           /* positions a KV block */
#define SEQ_BLOCKS 8
#define N_TOP 4
#define N_VARIANTS 2

static const char *const variants[N_VARIANTS] = { "fast", "all" };
static char work[] = "/tmp/bn-cuda-fast-ops-XXXXXX";

/* ------------------------------------------------------------------------------------------ */
/* A backend driven directly, and a record of everything it answered                           */
/* ------------------------------------------------------------------------------------------ */

struct engine {
	const struct bn_backend_ops *ops;
	void *self;
	struct bn_model_desc desc;
	uint32_t tables[MAX_SEQS][SEQ_BLOCKS];
	uint32_t len[MAX_SEQS];
};

static void engine_open(struct engine *e, const char *model, const char *kernels,
			const char *cache_dir)
{
	struct bn_backend_options opt = { .model_path = model, .cache_dir = cache_dir,
					  .max_seqs = MAX_SEQS, .cuda_kernels = kernels };
	e->ops = &bn_backend_cuda;
	ck_assert_msg(e->ops->open(&opt, &e->desc, &e->self) == 0, "cuda %s on %s", kernels, model);
	ck_assert_int_eq(e->ops->kv_init(e->self, MAX_SEQS * SEQ_BLOCKS, BT), 0);
	for (uint32_t s = 0; s < MAX_SEQS; s++) {
		for (uint32_t b = 0; b < SEQ_BLOCKS; b++) /* interleaved: neighbours share no block */
			e->tables[s][b] = b * MAX_SEQS + s;
		e->len[s] = 0;
		ck_assert_int_eq(e->ops->seq_open(e->self, s), 0);
	}
}

/* One row of a step: n tokens of sequence seq, and what it asks (at most one of them). */
struct row {
	uint32_t seq;
	const uint32_t *tokens;
	uint32_t n;
	const struct bn_sample_ctx *sample;   /* a token (the last one's), or with verify */
	const struct bn_score_row *score;
	struct bn_sample_out *verify;         /* [n] answers: every position sampled */
};

static void step(struct engine *e, const struct row *rows, uint32_t n_rows,
		 struct bn_sample_out *out)
{
	uint32_t width = 0, lens[MAX_SEQS], pos[MAX_SEQS], seqs[MAX_SEQS];
	for (uint32_t r = 0; r < n_rows; r++)
		width = rows[r].n > width ? rows[r].n : width;
	uint32_t *tokens = calloc((size_t)n_rows * width, 4);
	const uint32_t *blocks[MAX_SEQS];
	const struct bn_sample_ctx *sample[MAX_SEQS];
	const struct bn_score_row *score[MAX_SEQS];
	struct bn_sample_out *verify[MAX_SEQS];
	for (uint32_t r = 0; r < n_rows; r++) {
		memcpy(tokens + (size_t)r * width, rows[r].tokens, rows[r].n * 4);
		lens[r] = rows[r].n;
		seqs[r] = rows[r].seq;
		pos[r] = e->len[rows[r].seq];
		blocks[r] = e->tables[rows[r].seq];
		sample[r] = rows[r].sample;
		score[r] = rows[r].score;
		verify[r] = rows[r].verify;
	}
	struct bn_batch b = { .n_rows = n_rows, .width = width, .tokens = tokens, .lens = lens,
			      .pos = pos, .seq = seqs, .blocks = blocks, .sample = sample,
			      .score = score, .verify = verify };
	ck_assert_int_eq(e->ops->step(e->self, &b, out), 0);
	for (uint32_t r = 0; r < n_rows; r++)
		e->len[rows[r].seq] += rows[r].n;
	free(tokens);
}

/* Every answer of a run, as words: tokens, log-probabilities' bits, alternatives. */
#define REC_MAX 4096
struct rec {
	uint32_t n;
	uint32_t w[REC_MAX];
};

static void rec_u(struct rec *r, uint32_t v)
{
	ck_assert_uint_lt(r->n, REC_MAX);
	r->w[r->n++] = v;
}

static void rec_f(struct rec *r, float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	rec_u(r, u);
}

static void rec_out(struct rec *r, const struct bn_sample_out *o)
{
	rec_u(r, o->token);
	rec_f(r, o->logprob);
	rec_u(r, o->n_top);
	for (uint32_t k = 0; k < o->n_top; k++) {
		rec_u(r, o->top[k].token);
		rec_f(r, o->top[k].logprob);
	}
}

static void same_rec(const struct rec *want, const struct rec *got, const char *what,
		     const char *variant)
{
	ck_assert_msg(want->n == got->n, "%s with %s: %u words, base %u", what, variant, got->n,
		      want->n);
	for (uint32_t i = 0; i < want->n; i++)
		ck_assert_msg(want->w[i] == got->w[i], "%s with %s: word %u is %#x, base %#x", what,
			      variant, i, got->w[i], want->w[i]);
}

typedef void (*run_fn)(struct engine *e, struct rec *r);

/* run on base and on each variant (tiny preset, no weights cache): the same words. */
static void base_bits(run_fn run, const char *what)
{
	static struct rec want, got;
	struct engine e;
	memset(&want, 0, sizeof(want));
	engine_open(&e, tu_default_model(), "base", "none");
	run(&e, &want);
	e.ops->close(e.self);
	ck_assert_uint_gt(want.n, 0);
	for (int v = 0; v < N_VARIANTS; v++) {
		memset(&got, 0, sizeof(got));
		engine_open(&e, tu_default_model(), variants[v], "none");
		run(&e, &got);
		e.ops->close(e.self);
		same_rec(&want, &got, what, variants[v]);
	}
}

static const struct bn_sampling with_logprobs = { .want_logprobs = 1, .n_logprobs = N_TOP };

/* ------------------------------------------------------------------------------------------ */
/* Scored rows                                                                                 */
/* ------------------------------------------------------------------------------------------ */

#define SCORED 16
#define CHUNK 10

static void score_run(struct engine *e, struct rec *rec)
{
	uint32_t ids[SCORED], prompt[12];
	ctu_make_ids(ids, SCORED, 7, e->desc.vocab_size);
	ctu_make_ids(prompt, 12, 9, e->desc.vocab_size);
	static struct bn_sample_out out[SCORED];
	static struct bn_token_logprob top[SCORED + 2][N_TOP];
	for (uint32_t i = 0; i < SCORED; i++)
		out[i] = (struct bn_sample_out){ .top = top[i] };
	struct bn_sample_ctx ctx = { &with_logprobs, NULL, 0, NULL, 0, NULL, NULL };
	struct bn_sample_out gen[2] = { { .top = top[SCORED] }, { .top = top[SCORED + 1] } };
	/* a sampled prompt beside the first chunk, then a decode step beside the second */
	struct bn_score_row first = { ids + 1, CHUNK, N_TOP, out };
	struct bn_score_row second = { ids + CHUNK + 1, SCORED - CHUNK - 1, N_TOP, out + CHUNK };
	struct row rows[2] = { { .seq = 0, .tokens = prompt, .n = 12, .sample = &ctx },
			       { .seq = 1, .tokens = ids, .n = CHUNK, .score = &first } };
	step(e, rows, 2, gen);
	rec_out(rec, &gen[0]);
	uint32_t next = gen[0].token;
	rows[0] = (struct row){ .seq = 0, .tokens = &next, .n = 1, .sample = &ctx };
	rows[1] = (struct row){ .seq = 1, .tokens = ids + CHUNK, .n = SCORED - CHUNK,
				.score = &second };
	step(e, rows, 2, gen);
	rec_out(rec, &gen[0]);
	for (uint32_t i = 0; i < SCORED - 1; i++) {
		ck_assert_uint_eq(out[i].token, ids[i + 1]);
		rec_out(rec, &out[i]);
	}
}

START_TEST(score_rows_give_base_bits)
{
	base_bits(score_run, "scored rows");
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Verify rows and rewinds                                                                     */
/* ------------------------------------------------------------------------------------------ */

#define SPEC_PROMPT 10
#define SPEC_OUT 5

static const struct bn_sampling spec_ask = {
	.temperature = 4.0f, .top_k = 40, .top_p = 0.95f, .repetition_penalty = 1.3f,
	.frequency_penalty = 0.2f, .seed = 11, .want_logprobs = 1, .n_logprobs = N_TOP,
};

static void same_out(const struct bn_sample_out *x, const struct bn_sample_out *y, uint32_t i)
{
	ck_assert_msg(x->token == y->token && x->logprob == y->logprob && x->n_top == y->n_top &&
			      !memcmp(x->top, y->top, x->n_top * sizeof(*x->top)),
		      "output %u: verified %u %.9g, plain %u %.9g", i, x->token, (double)x->logprob,
		      y->token, (double)y->logprob);
}

static void verify_run(struct engine *e, struct rec *rec)
{
	uint32_t prompt[SPEC_PROMPT], plain_ids[SPEC_OUT], spec_ids[SPEC_OUT];
	for (uint32_t i = 0; i < SPEC_PROMPT; i++)
		prompt[i] = 3 + i * 43;
	struct bn_sample_out plain[SPEC_OUT], v[4], o;
	struct bn_token_logprob ptop[SPEC_OUT][N_TOP], vtop[4][N_TOP], otop[N_TOP];
	struct bn_sample_ctx ctx = { &spec_ask, prompt, SPEC_PROMPT, plain_ids, 0, NULL, NULL };
	struct row r = { .seq = 0, .tokens = prompt, .n = SPEC_PROMPT, .sample = &ctx };
	for (uint32_t i = 0; i < SPEC_OUT; i++) { /* plain decoding, one token a step */
		plain[i].top = ptop[i];
		step(e, &r, 1, &plain[i]);
		rec_out(rec, &plain[i]);
		plain_ids[i] = plain[i].token;
		ctx.n_output = i + 1;
		r = (struct row){ .seq = 0, .tokens = &plain_ids[i], .n = 1, .sample = &ctx };
	}
	/* sequence 1: the prompt, then output 0 and drafts (outputs 1, 2, then a wrong one) */
	struct bn_sample_ctx sctx = { &spec_ask, prompt, SPEC_PROMPT, spec_ids, 0, NULL, NULL };
	r = (struct row){ .seq = 1, .tokens = prompt, .n = SPEC_PROMPT, .sample = &sctx };
	o.top = otop;
	step(e, &r, 1, &o);
	memcpy(spec_ids, plain_ids, 3 * sizeof(uint32_t));
	spec_ids[3] = plain_ids[3] == 5 ? 6 : 5;
	for (uint32_t j = 0; j < 4; j++)
		v[j].top = vtop[j];
	sctx.n_output = 1;
	r = (struct row){ .seq = 1, .tokens = spec_ids, .n = 4, .sample = &sctx, .verify = v };
	step(e, &r, 1, NULL);
	for (uint32_t j = 0; j < 4; j++)
		rec_out(rec, &v[j]);
	for (uint32_t j = 0; j < 3; j++)
		same_out(&v[j], &plain[1 + j], 1 + j);
	ck_assert_int_eq(e->ops->seq_rewind(e->self, 1, SPEC_PROMPT + 3), 0);
	e->len[1] = SPEC_PROMPT + 3;
	spec_ids[3] = v[2].token;
	sctx.n_output = 4;
	r = (struct row){ .seq = 1, .tokens = &spec_ids[3], .n = 1, .sample = &sctx };
	step(e, &r, 1, &o);
	same_out(&o, &plain[4], 4);
	rec_out(rec, &o);
}

START_TEST(verify_rows_give_base_bits)
{
	base_bits(verify_run, "verify rows");
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Forks                                                                                       */
/* ------------------------------------------------------------------------------------------ */

#define FORK_PREFIX 21  /* a full block and 5 positions of the next */

static void fork_run(struct engine *e, struct rec *rec)
{
	uint32_t prefix[FORK_PREFIX], next[2];
	ctu_make_ids(prefix, FORK_PREFIX, 5, e->desc.vocab_size);
	struct bn_sample_ctx ctx = { &with_logprobs, NULL, 0, NULL, 0, NULL, NULL };
	struct bn_sample_out out[2];
	struct bn_token_logprob top[2][N_TOP];
	out[0].top = top[0], out[1].top = top[1];
	struct row rows[2] = { { .seq = 0, .tokens = prefix, .n = FORK_PREFIX, .sample = &ctx } };
	step(e, rows, 1, out);
	rec_out(rec, &out[0]);
	uint32_t full = FORK_PREFIX / BT, part = FORK_PREFIX % BT;
	e->tables[1][0] = e->tables[0][0];
	ck_assert_int_eq(e->ops->seq_fork(e->self, 1, FORK_PREFIX, e->tables[1][full],
					  e->tables[0][full], part), 0);
	e->len[1] = FORK_PREFIX;
	next[0] = out[0].token;
	next[1] = 3 + (out[0].token + 41) % (e->desc.vocab_size - 3);
	for (int s = 0; s < 3; s++) { /* both sequences in two-row decode steps */
		for (uint32_t q = 0; q < 2; q++)
			rows[q] = (struct row){ .seq = q, .tokens = &next[q], .n = 1, .sample = &ctx };
		step(e, rows, 2, out);
		for (uint32_t q = 0; q < 2; q++) {
			rec_out(rec, &out[q]);
			next[q] = out[q].token;
		}
	}
}

START_TEST(forks_give_base_bits)
{
	base_bits(fork_run, "a fork");
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Grammar masks and the closing check                                                         */
/* ------------------------------------------------------------------------------------------ */

#define MASK_ROWS 5
#define MASK_STEPS 3
#define VERIFY_LEN 3
#define MAX_WORDS 16    /* vocabularies up to 1,024 */

/* The tokens a checked row may end with (in every mask: make_mask). */
#define END_A 4
#define END_B 10

/* Refuses every token but END_A and END_B, as a check near max_tokens does: those two
 * instead (the tiny preset's own favourites are others, so the second draw runs). */
struct end_check {
	struct bn_sample_check c;
	uint64_t instead[MAX_WORDS];
	uint32_t refusals;
};

static int ends(uint32_t token)
{
	return token == END_A || token == END_B;
}

static const uint64_t *refuse_others(const struct bn_sample_check *c, uint32_t n_output,
				     uint32_t token)
{
	struct end_check *k = (struct end_check *)(void *)c;
	(void)n_output;
	if (ends(token))
		return NULL;
	k->refusals++;
	return k->instead;
}

/* A bitset of `words` words: a third of the vocabulary, shifted by `salt`, END_A and END_B
 * always in. */
static void make_mask(uint64_t *m, uint32_t words, uint32_t vocab, uint32_t salt)
{
	memset(m, 0, words * sizeof(uint64_t));
	for (uint32_t t = 0; t < vocab; t++)
		if ((t * 7 + salt) % 3 == 0 || ends(t))
			m[t / 64] |= 1ull << (t % 64);
}

static int allowed(const uint64_t *m, uint32_t t)
{
	return (m[t / 64] >> (t % 64)) & 1;
}

static void masked_run(struct engine *e, struct rec *rec)
{
	uint32_t vocab = e->desc.vocab_size, words = bn_sample_mask_words(vocab);
	ck_assert_uint_le(words, MAX_WORDS);
	/* a verify row's bitsets follow each other, `words` apart (bn_sample_ctx_next) */
	static uint64_t masks[MASK_ROWS][MAX_WORDS], vmasks[VERIFY_LEN * MAX_WORDS];
	static struct end_check check;
	memset(&check, 0, sizeof(check));
	check.c.redraw = refuse_others;
	check.instead[END_A / 64] |= 1ull << (END_A % 64);
	check.instead[END_B / 64] |= 1ull << (END_B % 64);
	struct bn_sampling greedy = { .want_logprobs = 1, .n_logprobs = N_TOP };
	struct bn_sampling seeded = { .temperature = 2.0f, .top_k = 50, .seed = 3,
				      .repetition_penalty = 1.2f, .want_logprobs = 1,
				      .n_logprobs = N_TOP };
	const struct bn_sampling *params[MASK_ROWS] = { &greedy, &greedy, &seeded, &seeded, &seeded };
	static uint32_t prompts[MASK_ROWS][8], outs[MASK_ROWS][MASK_STEPS + 1 + VERIFY_LEN];
	struct bn_sample_ctx ctx[MASK_ROWS];
	for (uint32_t r = 0; r < MASK_ROWS; r++) {
		ctu_make_ids(prompts[r], 3 + r, 11 + r, vocab);
		make_mask(masks[r], words, vocab, r);
		ctx[r] = (struct bn_sample_ctx){ params[r], prompts[r], 3 + r, outs[r], 0, NULL, NULL };
	}
	ctx[0].mask = masks[0];                        /* greedy, masked */
	ctx[2].mask = masks[2];                        /* seeded, masked */
	ctx[3].mask = masks[3], ctx[3].check = &check.c; /* and checked */
	struct bn_sample_out out[MASK_ROWS];
	struct bn_token_logprob top[MASK_ROWS][N_TOP];
	struct row rows[MASK_ROWS];
	for (uint32_t s = 0; s <= MASK_STEPS; s++) { /* the prompts, then five-row decode steps */
		for (uint32_t r = 0; r < MASK_ROWS; r++) {
			rows[r] = (struct row){ .seq = r, .tokens = s ? &outs[r][s - 1] : prompts[r],
						.n = s ? 1 : 3 + r, .sample = &ctx[r] };
			out[r].top = top[r];
		}
		step(e, rows, MASK_ROWS, out);
		for (uint32_t r = 0; r < MASK_ROWS; r++) {
			rec_out(rec, &out[r]);
			ck_assert(!ctx[r].mask || allowed(ctx[r].mask, out[r].token));
			ck_assert(r != 3 || ends(out[r].token));
			outs[r][s] = out[r].token;
			ctx[r].n_output = s + 1;
		}
	}
	/* Row 3 verifies three drafts, a mask of its own at each position, the check on. */
	for (uint32_t j = 0; j < VERIFY_LEN; j++)
		make_mask(vmasks + j * words, words, vocab, 5 + j);
	uint32_t drafts[VERIFY_LEN] = { outs[3][MASK_STEPS], END_A, END_B };
	struct bn_sample_out v[VERIFY_LEN];
	struct bn_token_logprob vtop[VERIFY_LEN][N_TOP];
	for (uint32_t j = 0; j < VERIFY_LEN; j++)
		v[j].top = vtop[j];
	ctx[3].mask = vmasks;
	rows[0] = (struct row){ .seq = 3, .tokens = drafts, .n = VERIFY_LEN, .sample = &ctx[3],
				.verify = v };
	step(e, rows, 1, NULL);
	for (uint32_t j = 0; j < VERIFY_LEN; j++) {
		rec_out(rec, &v[j]);
		ck_assert(allowed(vmasks + j * words, v[j].token));
		if (j == 0 || v[j - 1].token == drafts[j]) /* checked up to the first miss */
			ck_assert(ends(v[j].token));
	}
	ck_assert_uint_gt(check.refusals, 0);
	rec_u(rec, check.refusals);
}

START_TEST(masked_rows_give_base_bits)
{
	base_bits(masked_run, "grammar-masked rows");
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The packed-weight cache                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* A start in state `want` (a write waited for), and a prompt's answers. */
static void start_and_answer(const char *model, const char *kernels, const char *dir,
			     enum bn_weights_cache want, struct rec *rec)
{
	struct engine e;
	engine_open(&e, model, kernels, dir);
	enum bn_weights_cache now = ctu_weights_cache();
	ck_assert_msg(now == want || (want == BN_WEIGHTS_CACHE_WRITING && now == BN_WEIGHTS_CACHE_BUILT),
		      "%s: weights cache %s, want %s", kernels, bn_weights_cache_names[now],
		      bn_weights_cache_names[want]);
	memset(rec, 0, sizeof(*rec));
	fork_run(&e, rec);
	for (int i = 0, end = tu_scaled(1000); /* 10 s, scaled */
	     i < end && ctu_weights_cache() == BN_WEIGHTS_CACHE_WRITING; i++)
		usleep(10000);
	if (want == BN_WEIGHTS_CACHE_WRITING)
		ck_assert_str_eq(bn_weights_cache_names[ctu_weights_cache()], "built");
	e.ops->close(e.self);
}

START_TEST(cache_hit_gives_base_bits)
{
	/* the F16 one a llama file: float linears (a bitnet* file's would be packed ternary) */
	static const char *const preset[][3] = { { "i2s", "i2_s", "bitnet-b1.58" },
						 { "f16", "f16", "llama" } };
	char model[512], dir[128];
	snprintf(model, sizeof(model), "%s/%s.gguf", work, preset[_i][0]);
	snprintf(dir, sizeof(dir), "%s/cache-%s", work, preset[_i][0]);
	tu_write_tiny_model(model, (const char *const[]){ "--type", preset[_i][1], "--arch",
							  preset[_i][2], NULL });
	static struct rec written, hit, base_hit, base_none;
	start_and_answer(model, "fast", dir, BN_WEIGHTS_CACHE_WRITING, &written);
	start_and_answer(model, "fast", dir, BN_WEIGHTS_CACHE_HIT, &hit);
	start_and_answer(model, "base", dir, BN_WEIGHTS_CACHE_HIT, &base_hit);
	start_and_answer(model, "base", "none", BN_WEIGHTS_CACHE_OFF, &base_none);
	same_rec(&base_none, &base_hit, "base from the cache fast wrote", "base");
	same_rec(&base_none, &written, "the start that wrote the cache", "fast");
	same_rec(&base_none, &hit, "a start from the cache", "fast");
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The daemon from a cache hit                                                                 */
/* ------------------------------------------------------------------------------------------ */

static void start_daemon(struct tu_daemon *d, const char *kernels, const char *dir, int restart)
{
	const char *args[] = { "--backend", "cuda", "--model", tu_default_model(), "--kv-memory", "4M",
			       "--cache-dir", dir, "--cuda-kernels", kernels, NULL };
	ck_assert_msg(ctu_start_cuda_daemon(d, args, restart) == 0, "--cuda-kernels %s did not start",
		      kernels);
}

struct daemon_answers {
	uint32_t ids[2][8];
	struct bn_logprob lp[2][8], alt[2][8 * 3];
	struct bn_logprob scored[16], top[16 * 3];
	double sum;
};

static void daemon_generate(struct bn_client *c, const uint32_t *prompt, uint32_t n,
			    uint32_t flags, uint32_t *ids, struct bn_logprob *lp, struct bn_logprob *alt)
{
	struct bn_sampling_params sp = { .n_logprobs = 3 };
	struct bn_request req = { prompt, n, 6, flags | BN_REQ_LOGPROBS | BN_REQ_IGNORE_EOS, &sp };
	struct bn_handle *h;
	ck_assert_int_eq(bn_submit(c, &req, &h), 0);
	ck_assert_int_eq(tu_wait(h, 120 * SEC), 0);
	ck_assert_int_eq(bn_read_tokens(h, 0, ids, 8), 6);
	ck_assert_int_eq(bn_read_logprobs(h, 0, lp, alt, 8), 6);
	bn_release(h);
}

/* A prompt that quotes itself, plain and speculative; then a score of 12 ids. */
static void daemon_answers(const struct tu_daemon *d, struct daemon_answers *a)
{
	struct bn_client *c = NULL;
	ck_assert_int_eq(bn_connect(d->socket_path, 8, &c), 0);
	struct bn_model_info info;
	ck_assert_int_eq(bn_model_info(c, &info), 0);
	uint32_t prompt[22], ids[12];
	prompt[0] = 1;
	for (uint32_t r = 0; r < 3; r++)
		for (uint32_t i = 0; i < 7; i++)
			prompt[1 + r * 7 + i] = 3 + (41 + i * 37) % (info.vocab_size - 3);
	memset(a, 0, sizeof(*a));
	daemon_generate(c, prompt, 22, 0, a->ids[0], a->lp[0], a->alt[0]);
	daemon_generate(c, prompt, 22, BN_REQ_SPECULATE, a->ids[1], a->lp[1], a->alt[1]);
	ck_assert_msg(!memcmp(a->ids[0], a->ids[1], sizeof(a->ids[0])) &&
			      !memcmp(a->lp[0], a->lp[1], sizeof(a->lp[0])),
		      "speculative answers otherwise");
	ctu_make_ids(ids, 12, 17, info.vocab_size);
	struct bn_score_item it = { .ids = ids, .n_ids = 12, .n_top = 3, .cap = 16,
				    .logprobs = a->scored, .top = a->top };
	ck_assert_int_eq(bn_score(c, &it, tu_scaled_ns(120 * SEC)), 0);
	a->sum = it.sum;
	bn_disconnect(c);
}

START_TEST(daemon_variant_from_cache_hit)
{
	if (!ctu_have_cuda_daemon())
		return;
	char dir[128];
	snprintf(dir, sizeof(dir), "%s/daemon-cache", work);
	struct tu_daemon d;
	static struct daemon_answers base, fast;
	start_daemon(&d, "base", dir, 0);
	ck_assert_str_eq(ctu_weights_cache_of(&d), "built");
	daemon_answers(&d, &base);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	start_daemon(&d, "fast", dir, 1);
	ck_assert_str_eq(ctu_weights_cache_of(&d), "hit");
	daemon_answers(&d, &fast);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	ck_assert_msg(memcmp(&base, &fast, sizeof(base)) == 0,
		      "--cuda-kernels fast from the cache answers otherwise than base");
}
END_TEST

/* ------------------------------------------------------------------------------------------ */

static Suite *fast_ops_suite(void)
{
	Suite *s = suite_create("cuda_fast_ops");
	TCase *t = tcase_create("requests");
	tcase_set_timeout(t, 300);
	tcase_add_test(t, score_rows_give_base_bits);
	tcase_add_test(t, verify_rows_give_base_bits);
	tcase_add_test(t, forks_give_base_bits);
	tcase_add_test(t, masked_rows_give_base_bits);
	tcase_add_loop_test(t, cache_hit_gives_base_bits, 0, 2);
	tcase_add_test(t, daemon_variant_from_cache_hit);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
#if defined(BN_CUDA_HOST) && defined(__SANITIZE_THREAD__)
	/* The harness runs twenty times slower there (one case took 149 s of CI's 40 minutes);
	 * the cache writer's thread these starts share is test_cuda_ops_host's under it, and
	 * the kernels' races are the harness's race check's, in the plain pass. */
	printf("SKIP under ThreadSanitizer: the plain and AddressSanitizer passes run the variants' requests\n");
	return 77;
#endif
	char device[256];
	int rc = ctu_require_device(device, sizeof(device));
	if (rc)
		return rc;
	tu_models_dir(work);
	rc = ctu_run_suite(fast_ops_suite());
	tu_remove_dir(work);
	return rc;
}

#endif /* BN_HAVE_CUDA */
