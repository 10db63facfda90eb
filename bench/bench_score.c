/* SPDX-License-Identifier: MIT */
/*
 * bench-score — score and classify requests through a daemon (the cpu backend on the 2B4T-shape model), the
 * way a client gets them, against a prompt's prefill in the same run. `make bench-score` makes
 * the model file (as bench-model does) and runs it. Keys:
 *
 *   prefill_tps_t512     a 512-token prompt read through one generate request of 1 token:
 *                        prompt tokens per second (median of PAIRS)
 *   score_tps_t512       the same 512 tokens scored (bn_score: every position through the LM
 *                        head and its log-softmax), tokens per second (median of PAIRS; the
 *                        two alternate, which goes first alternating too)
 *   score_over_prefill_t512   their ratio, pair by pair, median (target >= 0.6)
 *   score_batch16_tps    16 texts of 128 tokens in one bn_score_batch, tokens per second
 *   prefill_ms_t256      a 256-token prompt's prefill (a generate request of 1 token), ms
 *   classify_8labels_ms  bn_classify of that prompt as prefix with 8 labels of 4 tokens, ms
 *   classify_8labels_over_prefix   their ratio, pair by pair (alternating), median
 *                        (target <= 1.3: the prefix is read once)
 *   scores_8labels_over_classify   8 bn_score of prefix + label (what a client without
 *                        classify does) over the classify, median
 *   threads, token_budget    what the daemon ran with
 */
#define _GNU_SOURCE
#include "bitnet_client.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAIRS 5
#define LONG 512
#define BATCH 16
#define SHORT 128
#define PREFIX 256
#define LABELS 8
#define LABEL_TOKENS 4
#define SEC 1000000000LL

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return v[n / 2];
}

static int die(const char *what)
{
	fprintf(stderr, "bench-score: %s\n", what);
	return 1;
}

static pid_t start_daemon(const char *model, const char *sock, const char *budget)
{
	const char *bin = getenv("BITNETD");
	pid_t pid = fork();
	if (pid == 0) {
		execl(bin && *bin ? bin : "build/bitnetd", "bitnetd", "--backend", "cpu", "--model",
		      model, "--socket", sock, "--token-budget", budget, "--log-level", "warn",
		      (char *)NULL);
		_exit(127);
	}
	return pid;
}

static struct bn_client *connect_daemon(const char *sock, pid_t pid)
{
	for (int i = 0; i < 6000; i++) {
		struct bn_client *c;
		if (bn_connect(sock, BATCH, &c) == 0)
			return c;
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return NULL;
		usleep(10000);
	}
	return NULL;
}

static void ids_for(uint32_t seed, uint32_t vocab, uint32_t *out, uint32_t n)
{
	uint32_t x = seed * 2654435761u + 7u;
	for (uint32_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		out[i] = 3 + (x >> 8) % (vocab - 3);
	}
}

/* Seconds for the prompt's prefill: a generate request of one token. */
static double prefill_seconds(struct bn_client *c, const uint32_t *ids, uint32_t n)
{
	struct bn_request req = { .prompt = ids, .n_prompt = n, .max_tokens = 1,
				  .flags = BN_REQ_IGNORE_EOS };
	uint32_t out;
	struct bn_result res;
	double t0 = now_s();
	int rc = bn_generate(c, &req, &out, 1, &res, 600 * SEC);
	return rc < 0 ? -1 : now_s() - t0;
}

static double score_seconds(struct bn_client *c, struct bn_score_item *items, size_t n)
{
	struct bn_batch_result br;
	double t0 = now_s();
	int rc = bn_score_batch(c, items, n, &br, 600 * SEC);
	return rc < 0 || br.n_failed ? -1 : now_s() - t0;
}

static double classify_seconds(struct bn_client *c, struct bn_classify_item *it)
{
	double t0 = now_s();
	int rc = bn_classify(c, it, 600 * SEC);
	return rc < 0 ? -1 : now_s() - t0;
}

/* The 8 labels scored the way a client without classify would: prefix + label, each. */
static double label_scores_seconds(struct bn_client *c, const uint32_t *prefix,
				   const uint32_t (*labels)[LABEL_TOKENS])
{
	static uint32_t seq[LABELS][PREFIX + LABEL_TOKENS];
	static struct bn_logprob lp[LABELS][PREFIX + LABEL_TOKENS];
	struct bn_score_item items[LABELS];
	for (uint32_t k = 0; k < LABELS; k++) {
		memcpy(seq[k], prefix, PREFIX * sizeof(*prefix));
		memcpy(seq[k] + PREFIX, labels[k], sizeof(labels[k]));
		items[k] = (struct bn_score_item){ .ids = seq[k], .n_ids = PREFIX + LABEL_TOKENS,
						   .cap = PREFIX + LABEL_TOKENS, .logprobs = lp[k] };
	}
	return score_seconds(c, items, LABELS);
}

static int run_classify(struct bn_client *c, uint32_t vocab)
{
	static uint32_t prefix[PREFIX], labels[LABELS][LABEL_TOKENS];
	const uint32_t *label_ptr[LABELS];
	uint32_t label_n[LABELS];
	struct bn_label_score scores[LABELS];
	ids_for(100, vocab, prefix, PREFIX);
	for (uint32_t k = 0; k < LABELS; k++) {
		ids_for(200 + k, vocab, labels[k], LABEL_TOKENS);
		label_ptr[k] = labels[k];
		label_n[k] = LABEL_TOKENS;
	}
	struct bn_classify_item it = { .prefix_ids = prefix, .n_prefix_ids = PREFIX,
				       .label_ids = label_ptr, .label_n_ids = label_n,
				       .n_labels = LABELS, .scores = scores };
	double pre[PAIRS], cls[PAIRS], ratio[PAIRS], naive[PAIRS];
	for (int i = 0; i < PAIRS; i++) {
		int classify_first = i % 2;
		double k = classify_first ? classify_seconds(c, &it) : 0;
		double p = prefill_seconds(c, prefix, PREFIX);
		if (!classify_first)
			k = classify_seconds(c, &it);
		double n = label_scores_seconds(c, prefix, (const uint32_t(*)[LABEL_TOKENS])labels);
		if (p < 0 || k < 0 || n < 0)
			return die("a classify request failed");
		pre[i] = p * 1e3;
		cls[i] = k * 1e3;
		ratio[i] = k / p;
		naive[i] = n / k;
		fprintf(stderr, "pair %d: prefill %.0f ms, classify %.0f ms, 8 scores %.0f ms\n", i,
			pre[i], cls[i], n * 1e3);
	}
	printf("prefill_ms_t%u=%.0f\nclassify_%ulabels_ms=%.0f\nclassify_%ulabels_over_prefix=%.2f\n"
	       "scores_%ulabels_over_classify=%.2f\n",
	       PREFIX, median(pre, PAIRS), LABELS, median(cls, PAIRS), LABELS,
	       median(ratio, PAIRS), LABELS, median(naive, PAIRS));
	return 0;
}

static int run_score(struct bn_client *c)
{
	struct bn_model_info mi;
	if (bn_model_info(c, &mi) < 0)
		return die("no model info");
	static uint32_t ids[BATCH][LONG];
	static struct bn_logprob lp[BATCH][LONG];
	for (uint32_t k = 0; k < BATCH; k++)
		ids_for(k + 1, mi.vocab_size, ids[k], LONG);
	struct bn_score_item one = { .ids = ids[0], .n_ids = LONG, .cap = LONG, .logprobs = lp[0] };
	double pre[PAIRS], score[PAIRS], ratio[PAIRS];
	for (int i = 0; i < PAIRS; i++) {
		int score_first = i % 2;
		double s = score_first ? score_seconds(c, &one, 1) : 0;
		double p = prefill_seconds(c, ids[0], LONG);
		if (!score_first)
			s = score_seconds(c, &one, 1);
		if (p < 0 || s < 0)
			return die("a request failed");
		pre[i] = LONG / p;
		score[i] = LONG / s;
		ratio[i] = p / s;
		fprintf(stderr, "pair %d: prefill %.1f tok/s, score %.1f tok/s\n", i, pre[i], score[i]);
	}
	printf("prefill_tps_t%u=%.1f\nscore_tps_t%u=%.1f\nscore_over_prefill_t%u=%.2f\n", LONG,
	       median(pre, PAIRS), LONG, median(score, PAIRS), LONG, median(ratio, PAIRS));
	fflush(stdout);
	struct bn_score_item batch[BATCH];
	for (uint32_t k = 0; k < BATCH; k++)
		batch[k] = (struct bn_score_item){ .ids = ids[k], .n_ids = SHORT, .cap = SHORT,
						   .logprobs = lp[k] };
	double t = score_seconds(c, batch, BATCH);
	if (t < 0)
		return die("the batch failed");
	printf("score_batch%u_tps=%.1f\n", BATCH, BATCH * SHORT / t);
	fflush(stdout);
	return run_classify(c, mi.vocab_size);
}

int main(int argc, char **argv)
{
	const char *budget = "32";
	if (argc == 5 && strcmp(argv[3], "--token-budget") == 0)
		budget = argv[4];
	else if (argc != 3)
		return die("usage: bench-score --model FILE [--token-budget N]");
	if (strcmp(argv[1], "--model"))
		return die("usage: bench-score --model FILE [--token-budget N]");
	char sock[64];
	snprintf(sock, sizeof(sock), "/tmp/bn-bench-score-%d.sock", (int)getpid());
	pid_t pid = start_daemon(argv[2], sock, budget);
	struct bn_client *c = pid > 0 ? connect_daemon(sock, pid) : NULL;
	printf("token_budget=%s\n", budget);
	int rc = c ? run_score(c) : die("the daemon did not start");
	bn_disconnect(c);
	if (pid > 0) {
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
	}
	return rc;
}
