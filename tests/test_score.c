/* SPDX-License-Identifier: MIT */
/*
 * test_score — score requests (shm/PROTOCOL.md §6.11; bn_score, bn_score_batch, bitnet-cli
 * score) against oracles:
 *  - the model's own generation: a greedy generation's log-probabilities (BN_REQ_LOGPROBS),
 *    alternatives included, equal bit for bit the score of prompt + generated ids at those
 *    positions (prefill and stepwise decoding are bit-identical);
 *  - the reference forward (../shared/models/stories260K.gguf, through $BITNET_TEST_MODELS):
 *    each position's log-probability is the log-softmax of bn_ref_step's logits within 1e-5,
 *    and the known greedy ids from BOS are the most likely token at every position;
 *  - alone == batched: a batch with bad items in the middle gives those items their errors
 *    and the others the results they get alone, bit for bit;
 *  - the CLI prints what the library returns;
 *  - refusals: a backend that does not score (loopback), a text longer than the context.
 */
#define _GNU_SOURCE
#include "testutil.h"
#include "../daemon/model/forward.h"
#include "../daemon/model/model.h"
#include "bitnet_client.h"
#include "bitnet_shm.h"

#include "ckassert.h"
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEC 1000000000LL
#define GEN 12
#define MAX_SCORED 256
#define N_TOP 3

static char stories_path[512];

static struct bn_client *connect_or_die(const struct tu_daemon *d)
{
	struct bn_client *c = NULL;
	int rc = bn_connect(d->socket_path, 0, &c);
	ck_assert_msg(rc == 0, "connect: %s", bn_strerror(rc));
	return c;
}

static void start_cpu(struct tu_daemon *d, const char *model)
{
	const char *args[] = { "--backend", "cpu", "--model", model, "--threads", "1", NULL };
	ck_assert_int_eq(tu_daemon_start(d, args), 0);
}

/* Scores ids with N_TOP alternatives into item (its arrays static per call site's buffers). */
static void score_ids(struct bn_client *c, const uint32_t *ids, uint32_t n,
		      struct bn_score_item *it, struct bn_logprob *lp, struct bn_logprob *top)
{
	*it = (struct bn_score_item){ .ids = ids, .n_ids = n, .n_top = N_TOP, .cap = MAX_SCORED,
				      .logprobs = lp, .top = top };
	int rc = bn_score(c, it, tu_scaled_ns(30 * SEC));
	ck_assert_msg(rc == 0, "score: %s", bn_strerror(rc));
	ck_assert_uint_eq(it->result.status, BN_STATUS_COMPLETE);
	ck_assert_uint_eq(it->n_scored, n - 1);
}

/* ------------------------------------------------------------------------------------------ */
/* Score == the log-probabilities of the model's own generation                               */
/* ------------------------------------------------------------------------------------------ */

START_TEST(score_equals_stepwise_generation)
{
	struct tu_daemon d;
	start_cpu(&d, tu_default_model());
	struct bn_client *c = connect_or_die(&d);
	uint32_t seq[4 + GEN] = { 1, 5, 9, 13 };
	struct bn_sampling_params sp = { .n_logprobs = N_TOP };
	struct bn_request req = { .prompt = seq, .n_prompt = 4, .max_tokens = GEN,
				  .flags = BN_REQ_LOGPROBS | BN_REQ_IGNORE_EOS, .sampling = &sp };
	struct bn_handle *h;
	ck_assert_int_eq(bn_submit(c, &req, &h), 0);
	ck_assert_int_eq(tu_wait(h, 30 * SEC), 0);
	struct bn_logprob gen[GEN], gen_top[GEN * N_TOP];
	ck_assert_int_eq(bn_read_tokens(h, 0, seq + 4, GEN), GEN);
	ck_assert_int_eq(bn_read_logprobs(h, 0, gen, gen_top, GEN), GEN);
	bn_release(h);
	static struct bn_logprob lp[MAX_SCORED], top[MAX_SCORED * N_TOP];
	struct bn_score_item it;
	score_ids(c, seq, 4 + GEN, &it, lp, top);
	double sum = 0;
	for (uint32_t i = 0; i < 3 + GEN; i++) {
		ck_assert_uint_eq(lp[i].token, seq[i + 1]);
		sum += lp[i].logprob;
	}
	ck_assert(sum == it.sum);
	/* Position 4 + j scores generated token j, given exactly what the generation saw. */
	for (uint32_t j = 0; j < GEN; j++) {
		ck_assert_msg(memcmp(&lp[3 + j], &gen[j], sizeof(gen[j])) == 0,
			      "token %u: score %u %.9g, generation %u %.9g", j, lp[3 + j].token,
			      (double)lp[3 + j].logprob, gen[j].token, (double)gen[j].logprob);
		ck_assert_mem_eq(&top[(3 + j) * N_TOP], &gen_top[j * N_TOP],
				 N_TOP * sizeof(*gen_top));
	}
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Batches: one result per item, each equal to the item alone                                 */
/* ------------------------------------------------------------------------------------------ */

#define ITEMS 6

START_TEST(batch_items_fail_alone)
{
	struct tu_daemon d;
	start_cpu(&d, tu_default_model());
	struct bn_client *c = connect_or_die(&d);
	struct bn_model_info mi;
	ck_assert_int_eq(bn_model_info(c, &mi), 0);
	static uint32_t good[3][40], bad_token[5] = { 1, 2, 3, 0, 4 }, *too_long;
	too_long = calloc(mi.context_length + 1, sizeof(*too_long));
	for (uint32_t k = 0; k < 3; k++)
		for (uint32_t i = 0; i < 40; i++)
			good[k][i] = 1 + (i * 7 + k * 13) % (mi.vocab_size - 1);
	bad_token[3] = mi.vocab_size;
	static struct bn_logprob lp[ITEMS][MAX_SCORED], top[ITEMS][MAX_SCORED * N_TOP];
	struct bn_score_item items[ITEMS] = {
		{ .ids = good[0], .n_ids = 40 },
		{ .ids = bad_token, .n_ids = 5 },
		{ .ids = good[1], .n_ids = 17 },
		{ .ids = too_long, .n_ids = mi.context_length + 1 },
		{ .text = "Once upon a time", .text_len = 16 },
		{ .ids = good[2], .n_ids = 2 },
	};
	for (uint32_t k = 0; k < ITEMS; k++) {
		items[k].n_top = N_TOP;
		items[k].cap = MAX_SCORED;
		items[k].logprobs = lp[k];
		items[k].top = top[k];
	}
	struct bn_batch_result br;
	ck_assert_int_eq(bn_score_batch(c, items, ITEMS, &br, tu_scaled_ns(60 * SEC)), 0);
	ck_assert_uint_eq(br.n_ok, 4);
	ck_assert_uint_eq(br.n_failed, 2);
	ck_assert_int_eq(items[1].error, -BN_E_TOKEN);
	ck_assert_int_eq(items[3].error, -BN_E_TOO_LONG);
	for (uint32_t k = 0; k < ITEMS; k++) {
		if (items[k].error)
			continue;
		struct bn_logprob alone_lp[MAX_SCORED], alone_top[MAX_SCORED * N_TOP];
		struct bn_score_item alone = items[k];
		alone.logprobs = alone_lp;
		alone.top = alone_top;
		ck_assert_int_eq(bn_score(c, &alone, tu_scaled_ns(30 * SEC)), 0);
		ck_assert_uint_eq(alone.n_scored, items[k].n_scored);
		ck_assert_uint_eq(alone.n_tokens, items[k].n_tokens);
		ck_assert_mem_eq(alone_lp, lp[k], alone.n_scored * sizeof(*alone_lp));
		ck_assert_mem_eq(alone_top, top[k], alone.n_scored * N_TOP * sizeof(*alone_top));
		ck_assert(alone.sum == items[k].sum);
	}
	ck_assert_uint_eq(items[5].n_scored, 1);
	ck_assert_uint_gt(items[4].n_tokens, 1); /* the daemon encoded the text, BOS first */
	free(too_long);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The CLI and the refusals                                                                    */
/* ------------------------------------------------------------------------------------------ */

START_TEST(cli_prints_the_scores)
{
	struct tu_daemon d;
	start_cpu(&d, tu_default_model());
	struct bn_client *c = connect_or_die(&d);
	static const uint32_t ids[] = { 1, 50, 60, 70, 80 };
	static struct bn_logprob lp[MAX_SCORED], top[MAX_SCORED * N_TOP];
	struct bn_score_item it;
	score_ids(c, ids, 5, &it, lp, top);
	const char *args[] = { "score", "--ids", "1 50 60 70 80", NULL };
	static struct tu_run r;
	ck_assert_int_eq(tu_run_cli(&d, args, NULL, 0, &r), 0);
	ck_assert_msg(r.status == 0, "bitnet-cli score: %s", r.err);
	char *line = r.out;
	for (uint32_t i = 0; i < 4; i++) {
		unsigned pos, id;
		double logprob;
		ck_assert_int_eq(sscanf(line, "%u %u %lf", &pos, &id, &logprob), 3);
		ck_assert_uint_eq(pos, i + 1);
		ck_assert_uint_eq(id, ids[i + 1]);
		ck_assert((float)logprob == lp[i].logprob); /* 9 digits: the float, exactly */
		line = strchr(line, '\n') + 1;
	}
	double sum;
	unsigned tokens, scored;
	ck_assert_int_eq(sscanf(line, "sum=%lf tokens=%u scored=%u", &sum, &tokens, &scored), 3);
	ck_assert(sum == it.sum);
	ck_assert_uint_eq(tokens, 5);
	ck_assert_uint_eq(scored, 4);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

START_TEST(loopback_does_not_score)
{
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, NULL), 0);
	struct bn_client *c = connect_or_die(&d);
	static const uint32_t ids[] = { 1, 2, 3 };
	struct bn_logprob lp[2];
	struct bn_score_item it = { .ids = ids, .n_ids = 3, .cap = 2, .logprobs = lp };
	ck_assert_int_eq(bn_score(c, &it, tu_scaled_ns(10 * SEC)), -BN_E_UNSUPPORTED);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The real test model against the reference forward                                          */
/* ------------------------------------------------------------------------------------------ */

#define STORIES_SCORED 64

START_TEST(stories_score_vs_reference)
{
	struct bn_model m;
	char err[BN_MODEL_ERR_LEN];
	ck_assert_msg(bn_model_load(&m, stories_path, err) == 0, "load: %s", err);
	uint32_t V = m.cfg.n_vocab, seq[STORIES_SCORED + 1];
	seq[0] = m.cfg.bos_id;
	memcpy(seq + 1, tu_stories_known, STORIES_SCORED * sizeof(*seq));
	struct tu_daemon d;
	start_cpu(&d, stories_path);
	struct bn_client *c = connect_or_die(&d);
	static struct bn_logprob lp[MAX_SCORED], top[MAX_SCORED * N_TOP];
	struct bn_score_item it;
	score_ids(c, seq, STORIES_SCORED + 1, &it, lp, top);
	struct bn_ref *ref = bn_ref_new(&m, STORIES_SCORED + 1);
	float *logits = malloc(V * sizeof(float));
	for (uint32_t i = 0; i < STORIES_SCORED; i++) {
		ck_assert_int_eq(bn_ref_step(ref, seq[i], logits), 0);
		double max = logits[0], z = 0;
		for (uint32_t t = 1; t < V; t++)
			max = fmax(max, logits[t]);
		for (uint32_t t = 0; t < V; t++)
			z += exp(logits[t] - max);
		double want = logits[seq[i + 1]] - max - log(z);
		ck_assert_msg(fabs(want - lp[i].logprob) <= 1e-5, "position %u: %.9g, reference %.9g",
			      i + 1, (double)lp[i].logprob, want);
		/* The known greedy ids are the most likely at each position. */
		ck_assert_uint_eq(top[i * N_TOP].token, seq[i + 1]);
		ck_assert(top[i * N_TOP].logprob == lp[i].logprob);
	}
	free(logits);
	bn_ref_free(ref);
	bn_model_free(&m);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* bitnet-cli perplexity (llama-perplexity's chunks) against the same figure from the
 * reference forward: chunks of CTX tokens of the text tokenized with BOS, BOS first in each,
 * positions CTX/2 .. CTX-2 predicting the next token. */
#define PPL_CTX 32

static double reference_ppl(const struct bn_model *m, const uint32_t *ids, size_t n,
			    uint32_t *chunks)
{
	uint32_t V = m->cfg.n_vocab;
	float *logits = malloc(V * sizeof(float));
	double sum = 0;
	uint64_t count = 0;
	*chunks = (uint32_t)(n / PPL_CTX);
	for (uint32_t c = 0; c < *chunks; c++) {
		const uint32_t *chunk = ids + (size_t)c * PPL_CTX;
		struct bn_ref *ref = bn_ref_new(m, PPL_CTX);
		for (uint32_t j = 0; j + 1 < PPL_CTX; j++) {
			ck_assert_int_eq(bn_ref_step(ref, j ? chunk[j] : m->cfg.bos_id, logits), 0);
			if (j < PPL_CTX / 2)
				continue;
			double max = logits[0], z = 0;
			for (uint32_t t = 1; t < V; t++)
				max = fmax(max, logits[t]);
			for (uint32_t t = 0; t < V; t++)
				z += exp(logits[t] - max);
			sum -= logits[chunk[j + 1]] - max - log(z);
			count++;
		}
		bn_ref_free(ref);
	}
	free(logits);
	return exp(sum / (double)count);
}

START_TEST(stories_perplexity_vs_reference)
{
	static const char story[] =
		"Once upon a time, there was a little girl named Lily. She loved to play outside "
		"in the sunshine. One day, she saw a big, red ball in the park. She ran to get it, "
		"but a dog got there first. The dog was happy and wagged its tail. Lily smiled and "
		"they played together all day. When the sun went down, Lily went home to her mom. ";
	char path[] = "/tmp/bn-ppl-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	for (int k = 0; k < 3; k++)
		ck_assert_int_eq(write(fd, story, sizeof(story) - 1), (ssize_t)sizeof(story) - 1);
	close(fd);
	struct bn_vocab *v = tu_file_vocab(stories_path);
	size_t len = 3 * (sizeof(story) - 1);
	char *text = malloc(len);
	for (int k = 0; k < 3; k++)
		memcpy(text + k * (sizeof(story) - 1), story, sizeof(story) - 1);
	int n = bn_tokenize_ex(v, text, len, BN_TOK_ADD_BOS, NULL, 0);
	uint32_t *ids = malloc((size_t)n * sizeof(*ids));
	bn_tokenize_ex(v, text, len, BN_TOK_ADD_BOS, ids, (uint32_t)n);
	struct bn_model m;
	char err[BN_MODEL_ERR_LEN];
	ck_assert_msg(bn_model_load(&m, stories_path, err) == 0, "load: %s", err);
	uint32_t chunks;
	double want = reference_ppl(&m, ids, (size_t)n, &chunks);
	ck_assert_uint_ge(chunks, 4);
	struct tu_daemon d;
	start_cpu(&d, stories_path);
	const char *args[] = { "perplexity", path, "--ctx", "32", "--batch", "3", NULL };
	static struct tu_run r;
	ck_assert_int_eq(tu_run_cli(&d, args, NULL, 0, &r), 0);
	ck_assert_msg(r.status == 0, "bitnet-cli perplexity: %s", r.err);
	const char *fin = strstr(r.out, "Final estimate: PPL = ");
	ck_assert_ptr_nonnull(fin);
	double got = strtod(fin + strlen("Final estimate: PPL = "), NULL);
	ck_assert_msg(fabs(got - want) <= 1e-4 * want + 1e-4, "PPL %.6f, reference %.6f", got, want);
	char last[32];
	snprintf(last, sizeof(last), "[%u]", chunks);
	ck_assert_ptr_nonnull(strstr(r.out, last)); /* a running estimate per chunk */
	unlink(path);
	free(ids);
	free(text);
	bn_vocab_free(v);
	bn_model_free(&m);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("score");
	TCase *tc = tcase_create("daemon");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, score_equals_stepwise_generation);
	tcase_add_test(tc, batch_items_fail_alone);
	tcase_add_test(tc, cli_prints_the_scores);
	tcase_add_test(tc, loopback_does_not_score);
	suite_add_tcase(s, tc);
	const char *models = getenv("BITNET_TEST_MODELS");
	if (models && *models) {
		snprintf(stories_path, sizeof(stories_path), "%s/stories260K.gguf", models);
		TCase *real = tcase_create("test model");
		tcase_set_timeout(real, 120);
		tcase_add_test(real, stories_score_vs_reference);
		tcase_add_test(real, stories_perplexity_vs_reference);
		suite_add_tcase(s, real);
	} else {
		printf("SKIP: test-model tests (BITNET_TEST_MODELS is not set; .ci/run sets it to ../shared/models)\n");
	}
	return tu_run_suite(s);
}
