/* SPDX-License-Identifier: MIT */
/*
 * test_speculative — exact speculative decoding (BN_REQ_SPECULATE, bitnetd --speculative):
 * the oracle is the same request without it. On the tiny presets (random weights: drafts
 * mostly rejected), a model rigged to always prefer one token (every draft accepted) and the
 * shared stories260K model (real text, some drafts accepted):
 *  - greedy, seeded sampling and penalties, with log-probabilities and alternatives: the same
 *    ids, statuses and log-probability records, bit for bit;
 *  - speculating and plain requests in one batch: each as it is alone;
 *  - max_tokens and stop ids landing inside a run of accepted drafts: the same tokens, the
 *    same status, nothing after the stop;
 *  - the prefix cache after speculation: a prompt that continues a speculated answer reuses
 *    its blocks (only accepted positions are named) and gets the plain answer;
 *  - the rigged model accepts every draft; tokens without a pattern almost none, and then
 *    the request drafts rarely (the adaptive pause);
 *  - --speculative ngram on loopback (which rewinds too) against the protocol's oracle; an
 *    unknown mode refused.
 */
#define _GNU_SOURCE
#include "testutil.h"
#include "bitnet_client.h"
#include "bitnet_shm.h"

#include "ckassert.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEC 1000000000LL
#define MAX_OUT 96
#define N_ALT 3
#define RIG_TOKEN 77

static char work[] = "/tmp/bn-spec-XXXXXX";
static char stories_path[512];

struct answer {
	struct bn_result result;
	uint32_t n;
	uint32_t ids[MAX_OUT];
	struct bn_logprob lp[MAX_OUT], alt[MAX_OUT * N_ALT];
};

/* One way to ask: sampling parameters and flags, before BN_REQ_SPECULATE. */
struct ask {
	const char *name;
	uint32_t flags;
	struct bn_sampling_params sp;
};

static const struct ask asks[] = {
	{ "greedy", BN_REQ_LOGPROBS, { .n_logprobs = N_ALT } },
	{ "seeded", BN_REQ_LOGPROBS | BN_REQ_SEED,
	  { .temperature = 0.9f, .top_p = 0.95f, .seed = 1234, .n_logprobs = N_ALT } },
	{ "penalties", BN_REQ_SEED,
	  { .temperature = 0.7f, .top_k = 40, .repetition_penalty = 1.2f,
	    .frequency_penalty = 0.3f, .presence_penalty = 0.1f, .seed = 99 } },
};
#define N_ASKS (sizeof(asks) / sizeof(asks[0]))

static struct bn_client *connect_to(const struct tu_daemon *d)
{
	struct bn_client *c = NULL;
	int rc = bn_connect(d->socket_path, 8, &c);
	ck_assert_msg(rc == 0, "connect: %s", bn_strerror(rc));
	return c;
}

static struct bn_handle *submit(struct bn_client *c, const uint32_t *prompt, uint32_t n_prompt,
				uint32_t max_tokens, const struct ask *a, uint32_t extra_flags)
{
	struct bn_request req = { prompt, n_prompt, max_tokens,
				  a->flags | extra_flags | BN_REQ_IGNORE_EOS, &a->sp };
	struct bn_handle *h;
	int rc = bn_submit(c, &req, &h);
	ck_assert_msg(rc == 0, "submit: %s", bn_strerror(rc));
	return h;
}

static void collect(struct bn_handle *h, const struct ask *a, struct answer *out)
{
	memset(out, 0, sizeof(*out));
	ck_assert_int_eq(tu_wait(h, 60 * SEC), 0);
	ck_assert_int_eq(bn_result(h, &out->result), 0);
	out->result.queue_ns = out->result.first_token_ns = out->result.total_ns = 0;
	out->n = (uint32_t)bn_read_tokens(h, 0, out->ids, MAX_OUT);
	if (a->flags & BN_REQ_LOGPROBS)
		ck_assert_int_eq(bn_read_logprobs(h, 0, out->lp, out->alt, MAX_OUT), (int)out->n);
	bn_release(h);
}

static void answer(struct bn_client *c, const uint32_t *prompt, uint32_t n_prompt,
		   uint32_t max_tokens, const struct ask *a, uint32_t extra_flags, struct answer *out)
{
	collect(submit(c, prompt, n_prompt, max_tokens, a, extra_flags), a, out);
}

static void assert_same(const struct answer *plain, const struct answer *spec, const char *what)
{
	ck_assert_msg(plain->result.status == spec->result.status && plain->n == spec->n,
		      "%s: plain ended %u after %u tokens, speculative %u after %u", what,
		      plain->result.status, plain->n, spec->result.status, spec->n);
	for (uint32_t i = 0; i < plain->n; i++)
		ck_assert_msg(plain->ids[i] == spec->ids[i], "%s: token %u: plain %u, speculative %u",
			      what, i, plain->ids[i], spec->ids[i]);
	ck_assert_msg(memcmp(plain, spec, sizeof(*plain)) == 0,
		      "%s: log-probabilities differ", what);
}

/* A prompt that quotes itself: a phrase three times, so drafts have something to copy. */
static uint32_t quoting_prompt(uint32_t seed, uint32_t vocab, uint32_t *out)
{
	uint32_t n = 0, phrase[7];
	for (uint32_t i = 0; i < 7; i++)
		phrase[i] = 3 + (seed * 131 + i * 37) % (vocab - 3);
	out[n++] = 1;
	for (uint32_t r = 0; r < 3; r++)
		for (uint32_t i = 0; i < 7; i++)
			out[n++] = phrase[i];
	return n;
}

static uint32_t vocab_of(struct bn_client *c)
{
	struct bn_model_info info;
	ck_assert_int_eq(bn_model_info(c, &info), 0);
	return info.vocab_size;
}

static long long stat_of(const struct tu_daemon *d, const char *name)
{
	static char text[1 << 16];
	struct bn_client *c = connect_to(d);
	ck_assert_int_ge(bn_daemon_stats(c, text, sizeof(text)), 0);
	bn_disconnect(c);
	return tu_metric(text, name);
}

/* Alone: every ask on a few prompts, plain then speculative. */
static void alone_equals_plain(const struct tu_daemon *d, uint32_t vocab, const char *model)
{
	struct bn_client *c = connect_to(d);
	uint32_t prompt[32];
	for (uint32_t p = 0; p < 3; p++) {
		uint32_t n = quoting_prompt(p, vocab, prompt);
		for (size_t a = 0; a < N_ASKS; a++) {
			struct answer plain, spec;
			char what[128];
			snprintf(what, sizeof(what), "%s prompt %u %s", model, p, asks[a].name);
			answer(c, prompt, n, 64, &asks[a], 0, &plain);
			answer(c, prompt, n, 64, &asks[a], BN_REQ_SPECULATE, &spec);
			assert_same(&plain, &spec, what);
		}
	}
	bn_disconnect(c);
}

/* Batched: speculating and plain requests at once, each equal to its plain answer alone. */
static void batched_equals_alone(const struct tu_daemon *d, uint32_t vocab, const char *model)
{
	enum { N = 6 };
	struct bn_client *c = connect_to(d);
	uint32_t prompt[N][32], n[N];
	struct answer alone[N], batched[N];
	struct bn_handle *h[N];
	for (uint32_t i = 0; i < N; i++) {
		n[i] = quoting_prompt(10 + i, vocab, prompt[i]);
		answer(c, prompt[i], n[i], 48, &asks[i % N_ASKS], 0, &alone[i]);
	}
	for (uint32_t i = 0; i < N; i++)
		h[i] = submit(c, prompt[i], n[i], 48, &asks[i % N_ASKS], i % 2 ? BN_REQ_SPECULATE : 0);
	for (uint32_t i = 0; i < N; i++) {
		char what[128];
		collect(h[i], &asks[i % N_ASKS], &batched[i]);
		snprintf(what, sizeof(what), "%s batched request %u", model, i);
		assert_same(&alone[i], &batched[i], what);
	}
	bn_disconnect(c);
}

static void model_path(const char *name, char *out, size_t cap)
{
	snprintf(out, cap, "%s/%s.gguf", work, name);
}

/* The float one is a llama file: in a bitnet* file ternary-valued F16 linears are packed to
 * the ternary kernels (model.h), and this one is here for the float kernels. */
static const struct {
	const char *name, *type, *embed, *arch;
} presets[] = {
	{ "i2s", "i2_s", "f16", "bitnet-b1.58" },  { "tq2", "tq2_0", "f16", "bitnet-b1.58" },
	{ "tq1", "tq1_0", "bf16", "bitnet-b1.58" }, { "f16", "f16", "f32", "llama" },
	{ "q8head", "i2_s", "q8_0", "bitnet-b1.58" },
};
#define N_PRESETS (sizeof(presets) / sizeof(presets[0]))

static void start(struct tu_daemon *d, const char *model)
{
	const char *args[] = { "--threads", "1", "--cache-dir", "none", NULL };
	ck_assert_msg(tu_daemon_start_cpu(d, model, args) == 0, "daemon on %s", model);
}

START_TEST(tiny_presets_speculative_equals_plain)
{
	char model[256];
	model_path(presets[_i].name, model, sizeof(model));
	struct tu_daemon d;
	start(&d, model);
	struct bn_client *c = connect_to(&d);
	uint32_t vocab = vocab_of(c);
	bn_disconnect(c);
	alone_equals_plain(&d, vocab, presets[_i].name);
	batched_equals_alone(&d, vocab, presets[_i].name);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* Tokens that follow no pattern (loopback's hash over a 300-token vocabulary: short n-grams
 * recur, so drafts are found, but they are almost never the next token): after a few misses
 * the request drafts only now and then, and its answer is the protocol's oracle. (The tiny
 * presets' random weights are no such model: greedy and sampled alike, they fall into loops
 * that drafts catch.) */
START_TEST(patternless_tokens_back_off)
{
	struct tu_daemon d;
	const char *args[] = { "--vocab-size", "300", NULL };
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *c = connect_to(&d);
	enum { LONG = 600 };
	uint32_t prompt[32], n = quoting_prompt(2, 300, prompt), status;
	static uint32_t expect[LONG], got[LONG];
	uint32_t want = tu_loopback(prompt, n, LONG, BN_REQ_IGNORE_EOS, 300, 2, expect, &status);
	ck_assert_uint_eq(want, LONG);
	struct bn_request req = { prompt, n, LONG, BN_REQ_IGNORE_EOS | BN_REQ_SPECULATE, NULL };
	struct bn_handle *h;
	ck_assert_int_eq(bn_submit(c, &req, &h), 0);
	ck_assert_int_eq(tu_wait(h, 60 * SEC), 0);
	struct bn_result res;
	ck_assert_int_eq(bn_result(h, &res), 0);
	ck_assert_msg(res.status == BN_STATUS_LENGTH, "status %u error %d", res.status, res.error);
	ck_assert_int_eq(bn_read_tokens(h, 0, got, LONG), LONG);
	ck_assert_mem_eq(got, expect, sizeof(expect));
	bn_release(h);
	bn_disconnect(c);
	long long rows = stat_of(&d, "bitnetd_speculative_rows_total");
	long long drafted = stat_of(&d, "bitnetd_speculative_drafted_tokens_total");
	long long accepted = stat_of(&d, "bitnetd_speculative_accepted_tokens_total");
	ck_assert_msg(rows > 0 && accepted * 5 <= drafted, "accepted %lld of %lld drafts in %lld rows",
		      accepted, drafted, rows);
	ck_assert_msg(rows <= LONG / 16, "%lld of %d steps verified drafts", rows, LONG);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* The rigged model's greedy output is one token over and over: once the output holds it,
 * every draft is the model's token. max_tokens from 1 to 14 ends inside such runs. */
START_TEST(rigged_model_accepts_every_draft)
{
	char model[256];
	model_path("rigged", model, sizeof(model));
	struct tu_daemon d;
	start(&d, model);
	struct bn_client *c = connect_to(&d);
	uint32_t prompt[32], n = quoting_prompt(3, vocab_of(c), prompt);
	for (uint32_t max = 1; max <= 14; max++) {
		struct answer plain, spec;
		char what[64];
		snprintf(what, sizeof(what), "rigged, max_tokens %u", max);
		answer(c, prompt, n, max, &asks[0], 0, &plain);
		answer(c, prompt, n, max, &asks[0], BN_REQ_SPECULATE, &spec);
		assert_same(&plain, &spec, what);
		ck_assert_uint_eq(spec.result.status, BN_STATUS_LENGTH);
		ck_assert_uint_eq(spec.ids[max - 1], RIG_TOKEN);
	}
	/* One long greedy answer: once the output holds the token twice, every draft is it. */
	long long drafted = stat_of(&d, "bitnetd_speculative_drafted_tokens_total");
	long long accepted = stat_of(&d, "bitnetd_speculative_accepted_tokens_total");
	long long rows = stat_of(&d, "bitnetd_speculative_rows_total");
	long long tokens = stat_of(&d, "bitnetd_speculative_tokens_total");
	struct answer plain, spec;
	answer(c, prompt, n, MAX_OUT, &asks[0], 0, &plain);
	answer(c, prompt, n, MAX_OUT, &asks[0], BN_REQ_SPECULATE, &spec);
	assert_same(&plain, &spec, "rigged, 96 tokens");
	drafted = stat_of(&d, "bitnetd_speculative_drafted_tokens_total") - drafted;
	accepted = stat_of(&d, "bitnetd_speculative_accepted_tokens_total") - accepted;
	rows = stat_of(&d, "bitnetd_speculative_rows_total") - rows;
	tokens = stat_of(&d, "bitnetd_speculative_tokens_total") - tokens;
	ck_assert_msg(drafted >= 60 && accepted * 10 >= drafted * 9,
		      "accepted %lld of %lld drafts", accepted, drafted);
	ck_assert_msg(tokens >= 4 * rows, "%lld tokens in %lld verify rows", tokens, rows);
	alone_equals_plain(&d, vocab_of(c), "rigged");
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* stories260K: real text, drafts partly accepted. Stop ids at tokens of the plain answer
 * (the first occurrence of each): the speculative answer stops at the same token, nothing
 * after it. Then the prefix cache: prompt + a speculated answer's tokens reuse its blocks and
 * give the plain answer. */
START_TEST(stories_stops_and_prefix_cache)
{
	if (!stories_path[0])
		return;
	struct tu_daemon d;
	start(&d, stories_path);
	struct bn_client *c = connect_to(&d);
	/* "Lily and Tom went to the park." twice, then "Lily and" */
	uint32_t prompt[64], n = 0;
	const char *text = "Lily and Tom went to the park. Lily and Tom went to the park. Lily and";
	struct bn_vocab *v;
	ck_assert_int_eq(bn_vocab_fetch(c, &v), 0);
	int k = bn_tokenize(v, text, strlen(text), 1, prompt, 64);
	bn_vocab_free(v);
	ck_assert_int_gt(k, 0);
	n = (uint32_t)k;
	/* First on this daemon, so the blocks the cache names are the speculated answer's. */
	struct answer spec, cont_spec;
	answer(c, prompt, n, MAX_OUT, &asks[0], BN_REQ_SPECULATE, &spec);
	ck_assert_uint_eq(spec.n, MAX_OUT);
	uint32_t longer[64 + MAX_OUT], n_longer = n + 64;
	memcpy(longer, prompt, n * sizeof(uint32_t));
	memcpy(longer + n, spec.ids, 64 * sizeof(uint32_t));
	long long hits = stat_of(&d, "bitnetd_prefix_cache_hit_tokens_total");
	answer(c, longer, n_longer, 24, &asks[0], BN_REQ_SPECULATE, &cont_spec);
	/* Every full block before the prompt's last token (16 positions each, the default). */
	ck_assert_int_eq(stat_of(&d, "bitnetd_prefix_cache_hit_tokens_total") - hits,
			 (n_longer - 1) / 16 * 16);
	ck_assert_int_gt(stat_of(&d, "bitnetd_speculative_accepted_tokens_total"), 0);
	alone_equals_plain(&d, vocab_of(c), "stories260K");
	struct answer plain;
	for (uint32_t j = 4; j < 60; j += 5) {
		uint32_t stop = spec.ids[j], first = 0;
		while (spec.ids[first] != stop)
			first++;
		struct ask a = asks[0];
		a.sp.stop_ids = &stop;
		a.sp.n_stop = 1;
		struct answer ps, ss;
		char what[64];
		snprintf(what, sizeof(what), "stories260K, stop id %u", stop);
		answer(c, prompt, n, MAX_OUT, &a, 0, &ps);
		answer(c, prompt, n, MAX_OUT, &a, BN_REQ_SPECULATE, &ss);
		assert_same(&ps, &ss, what);
		ck_assert_uint_eq(ss.result.status, BN_STATUS_STOP);
		ck_assert_uint_eq(ss.n, first);
	}
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	/* Plain, from nothing, on a daemon without a prefix cache. */
	const char *args[] = { "--threads", "1", "--cache-dir", "none", "--prefix-cache", "off",
			       NULL };
	ck_assert_int_eq(tu_daemon_start_cpu(&d, stories_path, args), 0);
	c = connect_to(&d);
	struct answer cont_plain;
	answer(c, prompt, n, MAX_OUT, &asks[0], 0, &plain);
	assert_same(&plain, &spec, "stories260K quoting");
	answer(c, longer, n_longer, 24, &asks[0], 0, &cont_plain);
	assert_same(&cont_plain, &cont_spec, "stories260K continuation from cached blocks");
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* --speculative ngram drafts for requests that do not ask (loopback rewinds, and keeps to the
 * protocol's oracle); bitnet-cli info says the mode; an unknown mode is refused. */
START_TEST(daemon_modes_and_loopback)
{
	struct tu_daemon d;
	const char *ngram[] = { "--speculative", "ngram", NULL };
	ck_assert_int_eq(tu_daemon_start(&d, ngram), 0);
	struct bn_client *c = connect_to(&d);
	uint32_t vocab = vocab_of(c), prompt[64], expect[MAX_OUT], status;
	for (uint32_t p = 0; p < 8; p++) {
		uint32_t n = tu_prompt(1, p, prompt, 64);
		uint32_t want = tu_loopback(prompt, n, 40, 0, vocab, 2, expect, &status);
		struct answer got;
		struct ask plain = { .name = "loopback" };
		struct bn_request req = { prompt, n, 40, 0, NULL };
		struct bn_handle *h;
		ck_assert_int_eq(bn_submit(c, &req, &h), 0);
		collect(h, &plain, &got);
		ck_assert_uint_eq(got.n, want);
		ck_assert_uint_eq(got.result.status, status);
		ck_assert_mem_eq(got.ids, expect, want * sizeof(uint32_t));
	}
	bn_disconnect(c);
	const char *info[] = { "info", NULL };
	struct tu_run r;
	ck_assert_int_eq(tu_run_cli(&d, info, NULL, 0, &r), 0);
	ck_assert_msg(strstr(r.out, "\nspeculative=ngram\ndraft_tokens=4\n"), "%s", r.out);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	const char *off[] = { "--speculative", "off", "--draft-tokens", "7", NULL };
	ck_assert_int_eq(tu_daemon_start(&d, off), 0);
	ck_assert_int_eq(tu_run_cli(&d, info, NULL, 0, &r), 0);
	ck_assert_msg(strstr(r.out, "\nspeculative=off\ndraft_tokens=7\n"), "%s", r.out);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	const char *bad[] = { "--speculative", "maybe", NULL };
	ck_assert_int_ne(tu_daemon_start(&d, bad), 0);
}
END_TEST

static void make_model(const char *name, const char *const *args)
{
	char path[256];
	model_path(name, path, sizeof(path));
	tu_write_tiny_model(path, args);
}

static void setup(void)
{
	tu_models_dir(work);
	for (size_t i = 0; i < N_PRESETS; i++)
		make_model(presets[i].name, (const char *const[]){ "--type", presets[i].type,
								   "--embed-type", presets[i].embed,
								   "--arch", presets[i].arch, NULL });
	make_model("rigged", (const char *const[]){ "--untied", "--embed-type", "f32",
						    "--rig-argmax", "77", NULL });
	const char *dir = getenv("BITNET_TEST_MODELS");
	if (dir && *dir)
		snprintf(stories_path, sizeof(stories_path), "%s/stories260K.gguf", dir);
	else
		fprintf(stderr, "SKIP: stories260K cases: BITNET_TEST_MODELS is not set\n");
}

int main(void)
{
	setup();
	Suite *s = suite_create("speculative");
	TCase *t = tcase_create("exact");
	tcase_set_timeout(t, 300);
	tcase_add_loop_test(t, tiny_presets_speculative_equals_plain, 0, (int)N_PRESETS);
	tcase_add_test(t, patternless_tokens_back_off);
	tcase_add_test(t, rigged_model_accepts_every_draft);
	tcase_add_test(t, stories_stops_and_prefix_cache);
	tcase_add_test(t, daemon_modes_and_loopback);
	suite_add_tcase(s, t);
	int rc = tu_run_suite(s);
	tu_remove_dir(work);
	return rc;
}
