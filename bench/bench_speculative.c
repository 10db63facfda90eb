/* SPDX-License-Identifier: MIT */
/*
 * bench-speculative — batch-1 decoding with and without speculative decoding (BN_REQ_SPECULATE)
 * on one model, in one run. `make bench-speculative` runs it on the 2B4T-shape model rigged to
 * repeat one token (every draft accepted: the mechanics' ceiling), on the random 2B4T-shape
 * model (greedy, which falls into loops; and sampled at temperature 100 among its 8 likeliest
 * tokens, where drafts are found but almost never right: the adaptive pause's worst case),
 * and on stories260K with prompts that quote themselves.
 *
 * One cpu daemon on --model; each prompt (--text, repeatable, or a built-in id prompt) is
 * generated with --tokens tokens (ignoring EOS), plain and speculative in turn, the order
 * swapped every round, --rounds rounds. Every speculative answer must equal the plain one
 * (ids), or the run fails. Keys, prefixed with --name:
 *   plain_tps, spec_tps      tokens/s over the round's prompts, medians over rounds
 *   speedup                  the median of the rounds' spec/plain ratios
 *   acceptance               accepted over drafted tokens (the daemon's STATS, spec runs)
 *   tokens_per_row           tokens per verifying row
 *   verify_rows_per_token    verifying rows over the speculative runs' tokens
 */
#define _GNU_SOURCE
#include "bench_util.h"
#include "bitnet_client.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROMPTS 8
#define MAX_ROUNDS 64
#define MAX_TOKENS 4096
#define SEC 1000000000LL

struct setup {
	const char *bitnetd, *model, *name;
	const char *texts[MAX_PROMPTS];
	int n_texts;
	int tokens, rounds;
	float temperature;
	uint32_t top_k;
	char dir[64];
};

static pid_t start_daemon(const struct setup *s, struct bn_client **c)
{
	char sock[128];
	snprintf(sock, sizeof(sock), "%s/d.sock", s->dir);
	pid_t pid = fork();
	if (pid == 0) {
		execl(s->bitnetd, s->bitnetd, "--backend", "cpu", "--model", s->model, "--socket",
		      sock, "--log-level", "warn", (char *)NULL);
		_exit(127);
	}
	*c = NULL;
	for (int i = 0; i < 6000 && bn_connect(sock, 0, c) < 0; i++) {
		*c = NULL;
		usleep(20000);
	}
	if (!*c) {
		fprintf(stderr, "bench-speculative: the daemon did not start on %s\n", s->model);
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
		return -1;
	}
	return pid;
}

/* One generation: its ids into out; returns its duration, or -1. */
static int64_t generate(const struct setup *s, struct bn_client *c, int p, uint32_t flags,
			uint32_t *out, uint32_t *n_out)
{
	static const uint32_t ids[] = { 128000, 791, 4062, 14198, 39935, 35308, 927, 279,
					16053, 5679, 13, 578, 4062, 14198, 39935, 35308 };
	struct bn_sampling_params sp = { .temperature = s->temperature, .top_k = s->top_k,
					 .seed = 42 };
	/* A text prompt goes to the text region; the prompt array then holds only stop ids. */
	struct bn_request req = { s->n_texts ? NULL : ids,
				  s->n_texts ? 0 : (uint32_t)(sizeof(ids) / sizeof(ids[0])),
				  (uint32_t)s->tokens, flags | BN_REQ_IGNORE_EOS | BN_REQ_SEED, &sp };
	struct bn_handle *h;
	int64_t t0 = bench_now_ns();
	int rc = s->n_texts ? bn_submit_text(c, &req, s->texts[p], strlen(s->texts[p]), &h)
			    : bn_submit(c, &req, &h);
	if (rc < 0 || bn_wait(h, 600 * SEC) < 0) {
		fprintf(stderr, "bench-speculative: a request failed: %s\n", bn_strerror(rc));
		return -1;
	}
	int64_t t = bench_now_ns() - t0;
	int n = bn_read_tokens(h, 0, out, MAX_TOKENS);
	bn_release(h);
	*n_out = n > 0 ? (uint32_t)n : 0;
	return t;
}

struct totals {
	double drafted, accepted, rows, tokens;
};

static void read_totals(struct bn_client *c, struct totals *t)
{
	t->drafted = bench_metric(c, "bitnetd_speculative_drafted_tokens_total");
	t->accepted = bench_metric(c, "bitnetd_speculative_accepted_tokens_total");
	t->rows = bench_metric(c, "bitnetd_speculative_rows_total");
	t->tokens = bench_metric(c, "bitnetd_speculative_tokens_total");
}

/* One round: every prompt plain and speculative (spec_first: speculative first), tokens/s of
 * each; the speculative answers checked against the plain ones. */
static int round_of(const struct setup *s, struct bn_client *c, int spec_first, double *plain_tps,
		    double *spec_tps, double *spec_tokens)
{
	static uint32_t a[MAX_TOKENS], b[MAX_TOKENS];
	int64_t t[2] = { 0, 0 };
	uint64_t n[2] = { 0, 0 };
	int prompts = s->n_texts ? s->n_texts : 1;
	for (int p = 0; p < prompts; p++) {
		uint32_t na = 0, nb = 0;
		for (int k = 0; k < 2; k++) {
			int spec = spec_first ? k == 0 : k == 1;
			int64_t d = generate(s, c, p, spec ? BN_REQ_SPECULATE : 0, spec ? b : a,
					     spec ? &nb : &na);
			if (d < 0)
				return -1;
			t[spec] += d;
			n[spec] += spec ? nb : na;
		}
		if (na != nb || memcmp(a, b, na * sizeof(uint32_t)) != 0) {
			fprintf(stderr, "bench-speculative: %s prompt %d: the speculative answer differs\n",
				s->name, p);
			return -1;
		}
	}
	*plain_tps = (double)n[0] * 1e9 / (double)t[0];
	*spec_tps = (double)n[1] * 1e9 / (double)t[1];
	*spec_tokens += (double)n[1];
	return 0;
}

static int run(const struct setup *s)
{
	struct bn_client *c;
	pid_t pid = start_daemon(s, &c);
	if (pid < 0)
		return -1;
	double plain[MAX_ROUNDS], spec[MAX_ROUNDS], ratio[MAX_ROUNDS], spec_tokens = 0, p = 0, q = 0;
	uint32_t scratch[MAX_TOKENS], n;
	int rc = generate(s, c, 0, 0, scratch, &n) < 0 ? -1 : 0; /* warm: pages, caches */
	struct totals before, after;
	read_totals(c, &before);
	for (int r = 0; r < s->rounds && rc == 0; r++) {
		rc = round_of(s, c, r % 2, &p, &q, &spec_tokens);
		plain[r] = p;
		spec[r] = q;
		ratio[r] = q / p;
	}
	read_totals(c, &after);
	bn_disconnect(c);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	if (rc < 0)
		return -1;
	double drafted = after.drafted - before.drafted, rows = after.rows - before.rows;
	printf("%s_plain_tps=%.2f\n%s_spec_tps=%.2f\n", s->name, bench_median(plain, s->rounds), s->name,
	       bench_median(spec, s->rounds));
	printf("%s_speedup=%.3f\n", s->name, bench_median(ratio, s->rounds));
	printf("%s_acceptance=%.3f\n", s->name,
	       drafted > 0 ? (after.accepted - before.accepted) / drafted : 0.0);
	printf("%s_tokens_per_row=%.2f\n", s->name,
	       rows > 0 ? (after.tokens - before.tokens) / rows : 0.0);
	printf("%s_verify_rows_per_token=%.3f\n", s->name, spec_tokens > 0 ? rows / spec_tokens : 0.0);
	fflush(stdout);
	return 0;
}

static int parse(int argc, char **argv, struct setup *s)
{
	for (int i = 1; i < argc; i += 2) {
		if (i + 1 >= argc)
			return -1;
		const char *v = argv[i + 1];
		if (!strcmp(argv[i], "--model"))
			s->model = v;
		else if (!strcmp(argv[i], "--name"))
			s->name = v;
		else if (!strcmp(argv[i], "--text") && s->n_texts < MAX_PROMPTS)
			s->texts[s->n_texts++] = v;
		else if (!strcmp(argv[i], "--tokens"))
			s->tokens = atoi(v);
		else if (!strcmp(argv[i], "--rounds"))
			s->rounds = atoi(v);
		else if (!strcmp(argv[i], "--temperature"))
			s->temperature = strtof(v, NULL);
		else if (!strcmp(argv[i], "--top-k"))
			s->top_k = (uint32_t)atoi(v);
		else
			return -1;
	}
	return s->model && s->tokens > 0 && s->tokens <= MAX_TOKENS && s->rounds > 0 &&
			       s->rounds <= MAX_ROUNDS
		       ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct setup s = { .bitnetd = getenv("BITNETD"), .name = "model", .tokens = 64, .rounds = 5 };
	if (!s.bitnetd)
		s.bitnetd = "build/bitnetd";
	if (parse(argc, argv, &s) < 0) {
		fprintf(stderr, "usage: BITNETD=... bench-speculative --model FILE [--name NAME] [--text PROMPT]... [--tokens N] [--rounds N] [--temperature T] [--top-k K]\n");
		return 2;
	}
	snprintf(s.dir, sizeof(s.dir), "/tmp/bn-bench-spec-XXXXXX");
	if (!mkdtemp(s.dir)) {
		perror("mkdtemp");
		return 1;
	}
	printf("model=%s\ntokens=%d\nrounds=%d\ntemperature=%g\ntop_k=%u\nprompts=%d\n", s.model,
	       s.tokens, s.rounds, s.temperature, s.top_k, s.n_texts ? s.n_texts : 1);
	int rc = run(&s);
	char sock[128];
	snprintf(sock, sizeof(sock), "%s/d.sock", s.dir);
	unlink(sock);
	rmdir(s.dir);
	return rc < 0 ? 1 : 0;
}
