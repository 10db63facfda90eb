/* SPDX-License-Identifier: MIT */
/*
 * The model families people run (issue 57), each as a file with its family's metadata, scaled
 * down (the model tool's -test presets: bitnet.cpp's llama files of Falcon3 with head size 256
 * and GQA, Falcon-E and Llama3-8B-1.58 with I2_S weights and an F16 untied head;
 * bitnet_b1_58-large as bitnet-b1.58 with its 32002-token vocabulary; bitnet_b1_58-3B as its
 * F16 file, FFN 320 standing for 8640, head size 100):
 *  - twins: the same seed written as I2_S, TQ2_0 (a TQ2_0 llama file for the llama families),
 *    F16, BF16 and F32 where the family is BitLinear (bitnet*), give bit-identical logits
 *    at every position of a prefill and of greedy decoding; a llama family's F16 twin keeps
 *    the float graph (no matrix packed);
 *  - the batched forward against the scalar reference (within test_forward's tolerance):
 *    head size 256, GQA, adjacent RoPE pairs and the key_length path compute what they say;
 *  - the daemon serves each: a text prompt's greedy output equals the in-process greedy
 *    continuation of the ids the daemon made of it, a score of those ids equals the
 *    in-process log-probabilities, and bitnet-cli info says the activation, why, and (F16)
 *    which matrices were packed; the activation decided without a key (1bitLLM's vocabulary:
 *    SiLU), and --activation relu2 over it, change the outputs as the reference says.
 *  - Falcon3's chat: a conversation's reply is the in-process greedy continuation of the ids
 *    the client's tokenizer makes of it (the template's markers special, the message plain),
 *    up to its end-of-generation token.
 * Costs (2-vCPU VM, other builds running): 20 s plain (5 s of CPU: writing the 32002-token
 * models, the daemon starts), 56 s under AddressSanitizer.
 */
#define _GNU_SOURCE /* memmem */
#include "testutil.h"
#include "forward_testutil.h"
#include "../daemon/model/forward.h"
#include "../daemon/model/model.h"
#include "bitnet_client.h"
#include "quant.h"

#include "ckassert.h"
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROMPT 6
#define STEPS 8
#define TOLERANCE 2e-3f
#define SECOND 1000000000LL

static char work[] = "/tmp/bn-families-XXXXXX";

struct family {
	const char *preset;
	const char *twins[4];      /* --type of the files that must give the base file's bits */
	const char *float_twin;    /* a llama family's float file: the float graph, no packing */
	const char *why;           /* in bitnet-cli info's activation line */
	int from_float;            /* the base file is float: bitnet-cli info lists the packing */
};

static const struct family families[] = {
	{ "falcon3-test", { "tq2_0", NULL }, "f16", "(llama.hidden_activation)", 0 },
	{ "falcon-e-test", { "tq2_0", NULL }, "bf16", "(llama.hidden_activation)", 0 },
	{ "llama3-test", { "tq2_0", "tq1_0", NULL }, "f32", "(llama.hidden_activation)", 0 },
	{ "bitnet-large-test", { "tq2_0", "f16", "bf16", "f32" }, NULL,
	  "(bitnet-b1.58.hidden_activation)", 0 },
	{ "bitnet-3b-test", { "bf16", "f32", NULL }, NULL,
	  "(bitnet-b1.58.hidden_activation)", 1 },
};
#define N_FAMILIES ((int)(sizeof(families) / sizeof(families[0])))

static void family_path(const struct family *f, const char *type, char *out, size_t cap)
{
	snprintf(out, cap, "%s/%s-%s.gguf", work, f->preset, type ? type : "base");
}

static void setup(void)
{
	tu_models_dir(work);
	for (int i = 0; i < N_FAMILIES; i++) {
		const struct family *f = &families[i];
		char path[512];
		family_path(f, NULL, path, sizeof(path));
		ftu_write_model(f->preset, path, NULL);
		for (int t = 0; t < 4 && f->twins[t]; t++) {
			family_path(f, f->twins[t], path, sizeof(path));
			ftu_write_model(f->preset, path, (const char *const[]){ "--type", f->twins[t], NULL });
		}
		if (f->float_twin) {
			family_path(f, f->float_twin, path, sizeof(path));
			ftu_write_model(f->preset, path,
				    (const char *const[]){ "--type", f->float_twin, NULL });
		}
	}
}

/* ------------------------------------------------------------------------------------------ */
/* In process                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* The prompt's logits at every position, then greedy decoding: the logits of each step and
 * the ids chosen. logits: [(PROMPT + STEPS) x V]. */
static void greedy(const char *path, const uint32_t *prompt, uint32_t n_prompt, uint32_t steps,
		   float *logits, uint32_t *ids)
{
	struct ftu_run r;
	ftu_open(&r, path);
	uint32_t V = r.m.cfg.n_vocab;
	ck_assert_int_eq(bn_forward_seq_reset(r.fwd, 0), 0);
	ck_assert_int_eq(ftu_step(&r, prompt, n_prompt, 0, logits, 1), 0);
	uint32_t tok = bn_argmax(logits + (size_t)(n_prompt - 1) * V, V);
	for (uint32_t i = 0; i < steps; i++) {
		ids[i] = tok;
		float *row = logits + (size_t)(n_prompt + i) * V;
		ck_assert_int_eq(ftu_step(&r, &tok, 1, n_prompt + i, row, 0), 0);
		tok = bn_argmax(row, V);
	}
	ftu_close(&r);
}

static uint32_t vocab_of(const char *path)
{
	struct bn_model m;
	char err[BN_MODEL_ERR_LEN];
	ck_assert_msg(bn_model_open(&m, path, err) == 0, "%s", err);
	ck_assert_msg(bn_model_fill(&m, &(struct bn_model_source){ 0 }, err) == 0, "%s", err);
	uint32_t v = m.cfg.n_vocab;
	bn_model_free(&m);
	return v;
}

static void prompt_ids(uint32_t V, uint32_t *out)
{
	for (uint32_t i = 0; i < PROMPT; i++)
		out[i] = 300 + (i * 97 + 13) % (V - 600); /* past the leading specials */
}

START_TEST(twins_are_bit_identical)
{
	const struct family *f = &families[_i];
	char base[512], twin[512];
	family_path(f, NULL, base, sizeof(base));
	uint32_t V = vocab_of(base), prompt[PROMPT], ids[STEPS], twin_ids[STEPS];
	prompt_ids(V, prompt);
	size_t n = (size_t)(PROMPT + STEPS) * V;
	float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
	ck_assert(want && got);
	greedy(base, prompt, PROMPT, STEPS, want, ids);
	for (int t = 0; t < 4 && f->twins[t]; t++) {
		family_path(f, f->twins[t], twin, sizeof(twin));
		greedy(twin, prompt, PROMPT, STEPS, got, twin_ids);
		ck_assert_mem_eq(twin_ids, ids, sizeof(ids));
		for (uint32_t p = 0; p < PROMPT + STEPS; p++)
			ck_assert_msg(memcmp(got + (size_t)p * V, want + (size_t)p * V,
					     V * sizeof(float)) == 0,
				      "%s: the %s twin's logits differ at position %u", f->preset,
				      f->twins[t], p);
	}
	free(want);
	free(got);
}
END_TEST

/* Every layer matrix of the file as the loader made it: T2 everywhere for a ternary or a
 * bitnet* float file, float everywhere for a llama float file. */
START_TEST(packing_follows_the_architecture)
{
	const struct family *f = &families[_i];
	char path[512];
	family_path(f, f->float_twin, path, sizeof(path));
	struct ftu_run r;
	ftu_open(&r, path);
	int is_float = f->float_twin || f->from_float;
	int packs = r.m.cfg.arch != BN_ARCH_LLAMA;
	for (uint32_t li = 0; li < r.m.cfg.n_layer; li++) {
		const struct bn_linear *all[BN_LAYER_LINEARS];
		bn_layer_linears(&r.m.layers[li], all);
		for (int k = 0; k < BN_LAYER_LINEARS; k++) {
			ck_assert_int_eq(all[k]->kind,
					 !is_float || packs ? BN_LINEAR_T2 : BN_LINEAR_FLOAT);
			ck_assert_int_eq(all[k]->ternary_candidate, is_float && packs);
		}
	}
	ck_assert_uint_eq(r.m.n_from_float, is_float && packs ? 7 * r.m.cfg.n_layer : 0);
	ftu_close(&r);
}
END_TEST

START_TEST(forward_matches_reference)
{
	const struct family *f = &families[_i];
	char path[512];
	family_path(f, NULL, path, sizeof(path));
	struct ftu_run r;
	ftu_open(&r, path);
	uint32_t V = r.m.cfg.n_vocab, tokens[16];
	struct bn_ref *ref = bn_ref_new(&r.m, 16);
	float *want = malloc(V * sizeof(float)), *got = malloc(V * sizeof(float));
	ck_assert(ref && want && got);
	for (uint32_t i = 0; i < 16; i++)
		tokens[i] = 300 + (i * 131 + 7) % (V - 600);
	ck_assert_int_eq(bn_forward_seq_reset(r.fwd, 0), 0);
	for (uint32_t i = 0; i < 16; i++) {
		ck_assert_int_eq(bn_ref_step(ref, tokens[i], want), 0);
		ck_assert_int_eq(ftu_step(&r, &tokens[i], 1, i, got, 0), 0);
		float bound = 0.0f;
		for (uint32_t k = 0; k < V; k++)
			bound = fmaxf(bound, fabsf(want[k]));
		bound = TOLERANCE * (1.0f + bound);
		for (uint32_t k = 0; k < V; k++)
			ck_assert_msg(fabsf(want[k] - got[k]) <= bound,
				      "%s position %u logit %u: %g, reference %g", f->preset, i, k,
				      (double)got[k], (double)want[k]);
	}
	free(want);
	free(got);
	bn_ref_free(ref);
	ftu_close(&r);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Through the daemon                                                                          */
/* ------------------------------------------------------------------------------------------ */

static void start(struct tu_daemon *d, const char *path, const char *const *more)
{
	ck_assert_msg(tu_daemon_start_cpu(d, path, more) == 0, "daemon on %s", path);
}

/* log softmax(logits)[id], in double as the daemon scores. */
static double logprob(const float *logits, uint32_t V, uint32_t id)
{
	double mx = logits[0], z = 0.0;
	for (uint32_t k = 1; k < V; k++)
		mx = logits[k] > mx ? logits[k] : mx;
	for (uint32_t k = 0; k < V; k++)
		z += exp((double)logits[k] - mx);
	return (double)logits[id] - mx - log(z);
}

/* A text prompt generates the in-process greedy continuation of the ids the daemon made of
 * it; scoring those ids gives the in-process log-probabilities. */
static void serves_text_and_scores(const struct tu_daemon *d, const char *path, uint32_t V)
{
	struct bn_client *c;
	ck_assert_int_eq(bn_connect(d->socket_path, 0, &c), 0);
	static const char text[] = "bake a cake";
	struct bn_request req = { .max_tokens = STEPS, .flags = BN_REQ_IGNORE_EOS | BN_REQ_TEXT_OUT };
	struct bn_handle *h;
	ck_assert_int_eq(bn_submit_text(c, &req, text, sizeof(text) - 1, &h), 0);
	ck_assert_int_eq(tu_wait(h, tu_scaled_ns(60 * SECOND)), 0);
	struct bn_result res;
	ck_assert_int_eq(bn_result(h, &res), 0);
	ck_assert_uint_eq(res.n_tokens, STEPS);
	uint32_t prompt[64], out[STEPS], want[STEPS], n_prompt = 0;
	char buf[512];
	ck_assert_int_ge(bn_read_text(h, 0, buf, sizeof(buf), &n_prompt), 1);
	ck_assert_int_eq(bn_read_tokens(h, 0, out, STEPS), STEPS);
	bn_release(h);
	/* the ids the daemon made of the text: the client's tokenizer is the daemon's */
	const struct bn_vocab *v;
	ck_assert_int_eq(bn_client_vocab(c, &v), 0);
	int n = bn_tokenize(v, text, sizeof(text) - 1, bn_vocab_add_bos(v), prompt, 64);
	ck_assert_int_eq(n, (int)n_prompt);
	ck_assert_uint_ge(n_prompt, 2);
	ck_assert_uint_le(n_prompt, 64 - STEPS);
	float *logits = malloc((size_t)(n_prompt + STEPS) * V * sizeof(float));
	ck_assert_ptr_nonnull(logits);
	greedy(path, prompt, n_prompt, STEPS, logits, want);
	ck_assert_mem_eq(out, want, sizeof(out));
	/* score the prompt and the output: position i's log-probability of token i */
	uint32_t all[64];
	memcpy(all, prompt, n_prompt * sizeof(uint32_t));
	memcpy(all + n_prompt, out, STEPS * sizeof(uint32_t));
	struct bn_logprob lp[64];
	struct bn_score_item it = { .ids = all, .n_ids = n_prompt + STEPS, .cap = 64,
				    .logprobs = lp };
	ck_assert_int_eq(bn_score(c, &it, tu_scaled_ns(60 * SECOND)), 0);
	ck_assert_uint_eq(it.n_scored, n_prompt + STEPS - 1);
	for (uint32_t i = 1; i < n_prompt + STEPS; i++) {
		double want_lp = logprob(logits + (size_t)(i - 1) * V, V, all[i]);
		ck_assert_uint_eq(lp[i - 1].token, all[i]);
		ck_assert_msg(fabs(lp[i - 1].logprob - want_lp) <= 1e-4 * (1 + fabs(want_lp)),
			      "position %u: %g, in process %g", i, (double)lp[i - 1].logprob, want_lp);
	}
	free(logits);
	bn_disconnect(c);
}

static void info_says(const struct tu_daemon *d, const char *line)
{
	struct tu_run r;
	ck_assert_int_eq(tu_run_cli(d, (const char *const[]){ "info", NULL }, NULL, 0, &r), 0);
	ck_assert_msg(r.status == 0, "%s", r.err);
	ck_assert_msg(strstr(r.out, line) != NULL, "bitnet-cli info has no \"%s\":\n%s", line,
		      r.out);
}

START_TEST(daemon_serves_the_family)
{
	const struct family *f = &families[_i];
	char path[512], line[160];
	family_path(f, NULL, path, sizeof(path));
	uint32_t V = vocab_of(path);
	struct tu_daemon d;
	start(&d, path, NULL);
	serves_text_and_scores(&d, path, V);
	snprintf(line, sizeof(line), "\nactivation=silu %s\n", f->why);
	info_says(&d, line);
	if (f->from_float) {
		info_says(&d, "\nternary_from_float=attn_q 2/2,attn_k 2/2,attn_v 2/2,attn_output "
			      "2/2,ffn_gate 2/2,ffn_up 2/2,ffn_down 2/2\n");
		info_says(&d, "\nkept_float=none\n");
	}
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* Falcon3's chat: the daemon's reply is the in-process greedy continuation of the ids the
 * client's tokenizer makes of the conversation (the template's markers special, the
 * message's "<|user|>" plain text), cut at the first end-of-generation token. */
START_TEST(falcon3_chat)
{
	char path[512];
	family_path(&families[0], NULL, path, sizeof(path));
	uint32_t V = vocab_of(path);
	struct tu_daemon d;
	start(&d, path, NULL);
	struct bn_client *c;
	ck_assert_int_eq(bn_connect(d.socket_path, 0, &c), 0);
	const struct bn_vocab *v;
	ck_assert_int_eq(bn_client_vocab(c, &v), 0);
	ck_assert_uint_eq(bn_vocab_chat_template(v), BN_CHAT_FALCON3);
	ck_assert_str_eq(bn_pre_tokenizer_name(bn_vocab_pre_tokenizer(v)), "falcon3");
	const struct bn_chat_message msg = { "user", "bake a cake <|user|> now" };
	uint32_t ids[64], want[STEPS];
	int n = bn_chat_tokenize(v, 0, &msg, 1, ids, 64);
	ck_assert_int_gt(n, 4);
	ck_assert_int_le(n, 64 - STEPS);
	uint32_t markers = 0;
	for (int i = 0; i < n; i++)
		markers += ids[i] == ids[0]; /* <|user|>: the conversation's first id (no BOS) */
	ck_assert_uint_eq(markers, 1);
	float *logits = malloc((size_t)(n + STEPS) * V * sizeof(float));
	ck_assert_ptr_nonnull(logits);
	greedy(path, ids, (uint32_t)n, STEPS, logits, want);
	free(logits);
	uint32_t k = 0;
	while (k < STEPS && !bn_vocab_is_eog(v, want[k]))
		k++;
	/* the reply's text as bn_chat makes it: through a text stream (a random model's tokens
	 * split characters; the stream keeps the text valid UTF-8) */
	char want_text[512], reply[512];
	struct bn_text_stream *ts;
	const char *part[2];
	size_t len[2];
	ck_assert_int_eq(bn_text_stream_new(v, 0, &ts), 0);
	ck_assert_int_eq(bn_text_stream_push(ts, want, k, &part[0], &len[0]), 0);
	snprintf(want_text, sizeof(want_text), "%.*s", (int)len[0], part[0]);
	ck_assert_int_eq(bn_text_stream_finish(ts, &part[1], &len[1]), 0);
	snprintf(want_text + len[0], sizeof(want_text) - len[0], "%.*s", (int)len[1], part[1]);
	bn_text_stream_free(ts);
	struct bn_chat_item it = { .messages = &msg, .n_messages = 1, .max_tokens = STEPS,
				   .reply = reply, .reply_cap = sizeof(reply) };
	ck_assert_int_eq(bn_chat(c, &it, tu_scaled_ns(60 * SECOND)), 0);
	ck_assert_uint_eq(it.result.n_tokens, k);
	ck_assert_str_eq(reply, want_text);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* bitnet_b1_58-large as bitnet.cpp's converter writes it (bitnet-b1.58, no activation key):
 * SiLU by its 32002-token SentencePiece vocabulary, said so; --activation relu2 overrides it
 * and the outputs are the reference's with ReLU squared. */
START_TEST(activation_without_a_key)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/large-nokey.gguf", work);
	ftu_write_model("bitnet-large-test", path, (const char *const[]){ "--no-activation-key", NULL });
	uint32_t V = vocab_of(path);
	struct tu_daemon d;
	start(&d, path, NULL);
	serves_text_and_scores(&d, path, V);
	info_says(&d, "\nactivation=silu (bitnet-b1.58 without bitnet-b1.58.hidden_activation, and a "
		      "SentencePiece vocabulary of 32002 tokens: 1bitLLM's LLaMA-2 tokenizer, "
		      "trained with SiLU)\n");
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	start(&d, path, (const char *const[]){ "--activation", "relu2", NULL });
	info_says(&d, "\nactivation=relu2 (--activation relu2 (the file's: silu by bitnet-b1.58 "
		      "without");
	/* the daemon's greedy ids are the reference's with relu2 */
	struct bn_model m;
	char err[BN_MODEL_ERR_LEN];
	ck_assert_int_eq(bn_model_open(&m, path, err), 0);
	struct bn_model_source src = { .activation = { 1, BN_ACT_RELU2 } };
	ck_assert_msg(bn_model_fill(&m, &src, err) == 0, "%s", err);
	ck_assert_int_eq(m.cfg.act, BN_ACT_RELU2);
	struct bn_ref *ref = bn_ref_new(&m, 16);
	float *logits = malloc(V * sizeof(float));
	uint32_t prompt[3] = { 1, 500, 900 }, want[8], tok = 0;
	for (uint32_t i = 0; i < 3; i++)
		ck_assert_int_eq(bn_ref_step(ref, prompt[i], logits), 0);
	for (uint32_t i = 0; i < 8; i++) {
		want[i] = tok = bn_argmax(logits, V);
		ck_assert_int_eq(bn_ref_step(ref, tok, logits), 0);
	}
	bn_ref_free(ref);
	bn_model_free(&m);
	free(logits);
	struct bn_client *c;
	ck_assert_int_eq(bn_connect(d.socket_path, 0, &c), 0);
	uint32_t out[8];
	struct bn_request req = { .prompt = prompt, .n_prompt = 3, .max_tokens = 8,
				  .flags = BN_REQ_IGNORE_EOS };
	struct bn_result res;
	ck_assert_int_eq(bn_generate(c, &req, out, 8, &res, tu_scaled_ns(60 * SECOND)), 0);
	ck_assert_mem_eq(out, want, sizeof(out));
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	unlink(path);
}
END_TEST

/* A llama file that says type 36 without bitnet.cpp's file_type (upstream's IQ4_NL_4_4 id):
 * the daemon does not start, and says why. */
START_TEST(daemon_refuses_upstream_type_36)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/upstream36.gguf", work);
	ftu_write_model("falcon3-test", path, NULL);
	/* general.file_type 40 -> 38: the same bytes otherwise */
	FILE *fp = fopen(path, "r+b");
	ck_assert_ptr_nonnull(fp);
	static char head[4096];
	size_t n = fread(head, 1, sizeof(head), fp);
	const char key[] = "general.file_type";
	char *at = memmem(head, n, key, sizeof(key) - 1);
	ck_assert_ptr_nonnull(at);
	uint32_t type, v;
	memcpy(&type, at + sizeof(key) - 1, 4);
	memcpy(&v, at + sizeof(key) - 1 + 4, 4);
	ck_assert_uint_eq(type, 4); /* GGUF uint32 */
	ck_assert_uint_eq(v, 40);
	v = 38;
	ck_assert_int_eq(fseek(fp, (long)(at - head) + (long)sizeof(key) - 1 + 4, SEEK_SET), 0);
	ck_assert_uint_eq(fwrite(&v, 4, 1, fp), 1);
	fclose(fp);
	const char *argv[] = { getenv("BITNETD"), "--backend", "cpu", "--model", path,
			       "--socket", "/tmp/bn-families-never.sock", NULL };
	struct tu_run r;
	ck_assert_int_eq(tu_run(argv, NULL, 0, &r), 0);
	ck_assert_int_ne(r.status, 0);
	ck_assert_msg(strstr(r.err, "has type 36, which in a llama file is I2_S only when "
				    "general.file_type is 40 (bitnet.cpp's I2_S), and it is 38 here"),
		      "%s", r.err);
	unlink(path);
	/* an activation bitnetd does not know: a usage error */
	const char *bad[] = { getenv("BITNETD"), "--activation", "tanh", NULL };
	ck_assert_int_eq(tu_run(bad, NULL, 0, &r), 0);
	ck_assert_int_eq(r.status, 2);
	ck_assert_msg(strstr(r.err, "--activation: 'tanh' is not silu, relu2 or gelu"), "%s", r.err);
}
END_TEST

int main(void)
{
	setup();
	Suite *s = suite_create("families");
	TCase *dt = tcase_create("daemon");
	tcase_set_timeout(dt, 300);
	tcase_add_loop_test(dt, daemon_serves_the_family, 0, N_FAMILIES);
	if (TU_TSAN) {
		/* Under ThreadSanitizer (29 times the plain pass's time, 271 s on CI's 2-core
		 * machine) each family's graph runs in a daemon, on its pool's threads; the
		 * in-process checks against the scalar reference, on one thread, and the refusals
		 * are the plain and AddressSanitizer passes'. test_forward runs the pool in process. */
		printf("note: under ThreadSanitizer only daemon_serves_the_family runs\n");
		suite_add_tcase(s, dt);
	} else {
		TCase *t = tcase_create("in process");
		tcase_set_timeout(t, 300);
		tcase_add_loop_test(t, twins_are_bit_identical, 0, N_FAMILIES);
		tcase_add_loop_test(t, packing_follows_the_architecture, 0, N_FAMILIES);
		tcase_add_loop_test(t, forward_matches_reference, 0, N_FAMILIES);
		suite_add_tcase(s, t);
		tcase_add_test(dt, falcon3_chat);
		tcase_add_test(dt, activation_without_a_key);
		tcase_add_test(dt, daemon_refuses_upstream_type_36);
		suite_add_tcase(s, dt);
	}
	int rc = tu_run_suite(s);
	tu_remove_dir(work);
	return rc;
}
