/* SPDX-License-Identifier: MIT */
/*
 * bench-embed — embeddings per second through a cpu daemon (shm/PROTOCOL.md §6.14), the way a
 * client gets them: bn_embed_batch of 1, 16 and 256 inputs of 128 tokens each (random ids,
 * BOS first), every batch in flight together. `make bench-embed` runs it on the built-in tiny
 * model and on the 2B4T-shape file bench-model makes; --model names another (the 0.6B
 * embedding shape: bitnet-model write --preset bitnet-embedding-0.6b). Every input is one
 * the daemon has not seen (see batch_seconds). Keys, per batch size B:
 *
 *   embed_per_s_bB       inputs per second (median of --rounds)
 *   embed_tps_bB         their tokens per second (inputs x tokens / seconds)
 *   embed_ms_bB          the batch's wall time, ms (median)
 *   pooling, tokens, threads, token_budget, max_batch   what the daemon ran with
 *
 * The daemon runs --pooling (default mean: every position's hidden state; last reads one, and
 * with --shared N the inputs share their first N tokens, which last pooling takes from the
 * prefix cache: the cache's gain), --slots 256, and the token budget given (default 512: an
 * embedding is all prefill, which a small budget cuts into many steps).
 */
#define _GNU_SOURCE
#include "bench_util.h"
#include "bitnet_client.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEC 1000000000LL
#define MAX_BATCH_INPUTS 256

struct opts {
	const char *model, *pooling, *budget, *threads;
	uint32_t tokens, rounds, shared;
};

static int die(const char *what)
{
	fprintf(stderr, "bench-embed: %s\n", what);
	return 1;
}

static pid_t start_daemon(const struct opts *o, const char *sock)
{
	const char *bin = getenv("BITNETD");
	pid_t pid = fork();
	if (pid == 0) {
		execl(bin && *bin ? bin : "build/bitnetd", "bitnetd", "--backend", "cpu", "--model",
		      o->model, "--socket", sock, "--pooling", o->pooling, "--token-budget", o->budget,
		      "--threads", o->threads, "--slots", "256", "--log-level", "warn", (char *)NULL);
		_exit(127);
	}
	return pid;
}

static struct bn_client *connect_daemon(const char *sock, pid_t pid)
{
	for (int i = 0; i < 6000; i++) { /* a 2B4T-shape repack can take a minute */
		struct bn_client *c;
		if (bn_connect(sock, 0, &c) == 0)
			return c;
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return NULL;
		usleep(20000);
	}
	return NULL;
}

/* n ids from seed, BOS (1) first; the first `shared` after it the same for every seed. */
static void ids_for(uint32_t seed, uint32_t vocab, uint32_t shared, uint32_t *out, uint32_t n)
{
	uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
	out[0] = 1;
	for (uint32_t i = 1; i < n; i++) {
		uint64_t s = i <= shared ? 0x2545F4914F6CDD1Dull * i : (x += 0x9E3779B97F4A7C15ull);
		s ^= s >> 31;
		out[i] = 3 + (uint32_t)(s % (vocab - 3));
	}
}

/* Seconds for one batch of n inputs, or -1. Every input is new to the daemon (its seed never
 * used before): with last pooling an input seen before would be a prefix-cache hit, one
 * position computed instead of all, and rounds after the first would time the cache. Only the
 * --shared prefix repeats, on purpose. */
static double batch_seconds(struct bn_client *c, struct bn_embed_item *items, uint32_t n,
			    uint32_t vocab, uint32_t shared)
{
	static uint32_t next_seed;
	for (uint32_t k = 0; k < n; k++)
		ids_for(next_seed++, vocab, shared, (uint32_t *)items[k].ids, items[k].n_ids);
	struct bn_batch_result br;
	int64_t t0 = bench_now_ns();
	int rc = bn_embed_batch(c, items, n, &br, 600 * SEC);
	return rc < 0 || br.n_failed ? -1 : (double)(bench_now_ns() - t0) * 1e-9;
}

static int run(struct bn_client *c, const struct opts *o)
{
	static const uint32_t sizes[] = { 1, 16, MAX_BATCH_INPUTS };
	struct bn_model_info mi;
	if (bn_model_info(c, &mi) < 0 || !(bn_model_features(c) & BN_FEAT_EMBED))
		return die("the daemon does not embed");
	if (o->tokens > mi.context_length)
		return die("--tokens is longer than the model's context");
	uint32_t *ids = malloc((size_t)MAX_BATCH_INPUTS * o->tokens * sizeof(uint32_t));
	float *vec = malloc((size_t)MAX_BATCH_INPUTS * mi.max_output_tokens * sizeof(float));
	struct bn_embed_item *items = calloc(MAX_BATCH_INPUTS, sizeof(*items));
	double *secs = calloc(o->rounds, sizeof(double));
	if (!ids || !vec || !items || !secs)
		return die("out of memory");
	for (uint32_t k = 0; k < MAX_BATCH_INPUTS; k++) {
		items[k] = (struct bn_embed_item){ .ids = ids + (size_t)k * o->tokens,
						   .n_ids = o->tokens,
						   .vector = vec + (size_t)k * mi.max_output_tokens,
						   .cap = mi.max_output_tokens };
	}
	/* warm: the first step touches the weights */
	if (batch_seconds(c, items, 1, mi.vocab_size, o->shared) < 0)
		return die("an embedding failed");
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		uint32_t b = sizes[s];
		for (uint32_t r = 0; r < o->rounds; r++)
			if ((secs[r] = batch_seconds(c, items, b, mi.vocab_size, o->shared)) < 0)
				return die("an embedding failed");
		double t = bench_median(secs, (int)o->rounds);
		printf("embed_per_s_b%u=%.1f\nembed_tps_b%u=%.0f\nembed_ms_b%u=%.1f\n", b, b / t, b,
		       (double)b * o->tokens / t, b, t * 1e3);
		fflush(stdout);
	}
	printf("pooling=%s\ntokens=%u\nshared=%u\nthreads=%s\ntoken_budget=%s\nmax_batch=64\n",
	       o->pooling, o->tokens, o->shared, o->threads, o->budget);
	free(ids);
	free(vec);
	free(items);
	free(secs);
	return 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){ .pooling = "mean", .budget = "512", .threads = "0", .tokens = 128,
			    .rounds = 5 };
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v)
			return -1;
		if (!strcmp(argv[i], "--model"))
			o->model = v;
		else if (!strcmp(argv[i], "--pooling"))
			o->pooling = v;
		else if (!strcmp(argv[i], "--token-budget"))
			o->budget = v;
		else if (!strcmp(argv[i], "--threads"))
			o->threads = v;
		else if (!strcmp(argv[i], "--tokens"))
			o->tokens = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(argv[i], "--rounds"))
			o->rounds = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(argv[i], "--shared"))
			o->shared = (uint32_t)strtoul(v, NULL, 10);
		else
			return -1;
		i++;
	}
	return o->model && o->tokens >= 2 && o->rounds >= 1 && o->shared < o->tokens ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct opts o;
	if (parse(argc, argv, &o) < 0) {
		fprintf(stderr, "usage: bench_embed --model FILE [--pooling mean|cls|last] "
				"[--tokens 128] [--rounds 5] [--token-budget 512] [--threads 0] "
				"[--shared N]\n");
		return 2;
	}
	char dir[] = "/tmp/bench-embed-XXXXXX", sock[128];
	if (!mkdtemp(dir))
		return die("no temporary directory");
	snprintf(sock, sizeof(sock), "%s/d.sock", dir);
	pid_t pid = start_daemon(&o, sock);
	struct bn_client *c = pid > 0 ? connect_daemon(sock, pid) : NULL;
	int rc = c ? run(c, &o) : die("the daemon did not start");
	if (c)
		bn_disconnect(c);
	if (pid > 0) {
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
	}
	unlink(sock);
	rmdir(dir);
	return rc;
}
