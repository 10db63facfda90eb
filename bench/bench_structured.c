/* SPDX-License-Identifier: MIT */
/*
 * bench_structured — structured output's costs in the daemon (issue 46's targets), on one
 * model with LLaMA-3's vocabulary (`make bench-structured`: the 2B4T-shape model):
 *
 *  in this process, with the daemon's own code (the grammar service's vocabulary and cache,
 *  the sampler):
 *   compile_schema20_ms_p50   a 20-property schema, text to bound grammar (median of 7)
 *                             (target <= 50 ms)
 *   mask_us_p50, mask_us_p99  the grammar's work a constrained row adds to a step per token:
 *                             the next position's mask, the check of the drawn token (accept,
 *                             its fewest bytes to an end, roll back) and the published token's
 *                             accept, over seeded random walks through the schema (target p50
 *                             <= 50 us)
 *   sample_extra_us_p50, _p99 the masked sampler's time over a plain one's on the same row
 *                             (greedy and seeded rows alike; below 0 where few tokens are
 *                             allowed: a masked greedy row reads only theirs)
 *   row_extra_us_p50          the two together, per token
 *  through a cpu daemon (one per run, --model):
 *   compile_op_ms, compile_op_hit_ms   the GRAMMAR op's round trip, a cache miss and a hit
 *   step_ms_b1                a batch-1 decode step, unconstrained (per token after the first)
 *   step_ms_b1_constrained    the same with the schema
 *   mask_share_b1             row_extra_us_p50 over step_ms_b1 (target <= 5 %)
 *   tps_b{N}, tps_b{N}_constrained   --batch requests of --batch-tokens tokens in one batch,
 *                             unconstrained (EOS ignored) and constrained: tokens per second
 *   slowdown_b{N}             1 - constrained over unconstrained tokens per second (target
 *                             <= 10 %); constrained requests may end before --batch-tokens,
 *                             and the tail where fewer rows share a step counts in it
 *   step_ms_b{N}, step_ms_b{N}_constrained, step_slowdown_b{N}   the median over the requests
 *                             of their time per decoded token (a step's time while they run),
 *                             and 1 - unconstrained over constrained
 *   step_slowdown_b1          the same at batch 1 (step_ms_b1 over step_ms_b1_constrained)
 * Each daemon figure is the median over --rounds rounds, the two kinds alternating.
 *
 *   bench_structured --model FILE [--walks N] [--tokens N] [--batch N] [--batch-tokens N]
 *                    [--rounds N]          (BITNETD names the daemon; default build/bitnetd)
 */
#define _GNU_SOURCE
#include "../daemon/grammars.h"
#include "../daemon/model/sample.h"
#include "../daemon/model/vocab.h"
#include "bench_util.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ROUNDS 32
#define SEC 1000000000LL

/* 20 properties of the kinds real schemas have (bench_grammar's). */
static const char schema20[] =
	"{\"type\":\"object\",\"properties\":{"
	"\"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
	"\"name\":{\"type\":\"string\",\"maxLength\":64},"
	"\"email\":{\"type\":\"string\",\"format\":\"email\"},"
	"\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
	"\"score\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1},"
	"\"active\":{\"type\":\"boolean\"},"
	"\"role\":{\"enum\":[\"admin\",\"editor\",\"viewer\"]},"
	"\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},"
	"\"created\":{\"type\":\"string\",\"format\":\"date-time\"},"
	"\"birthday\":{\"type\":\"string\",\"format\":\"date\"},"
	"\"country\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}$\"},"
	"\"phone\":{\"type\":[\"string\",\"null\"]},"
	"\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},"
	"\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},"
	"\"required\":[\"street\",\"city\"],\"additionalProperties\":false},"
	"\"balance\":{\"type\":\"number\"},"
	"\"visits\":{\"type\":\"integer\",\"minimum\":0},"
	"\"notes\":{\"type\":\"string\"},"
	"\"level\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":10},"
	"\"website\":{\"type\":\"string\",\"format\":\"hostname\"},"
	"\"ip\":{\"type\":\"string\",\"format\":\"ipv4\"},"
	"\"verified\":{\"type\":\"boolean\"}},"
	"\"required\":[\"id\",\"name\",\"email\",\"age\",\"score\",\"active\",\"role\",\"tags\","
	"\"created\",\"country\",\"address\",\"level\"],\"additionalProperties\":false}";

struct setup {
	const char *bitnetd, *model;
	int walks, tokens, batch, batch_tokens, rounds;
	char dir[64];
};

static int cmp_double(const void *a, const void *b)
{
	return bench_cmp_double(a, b);
}

static double percentile(double *v, size_t n, double q)
{
	qsort(v, n, sizeof(*v), cmp_double);
	size_t k = (size_t)(q * (double)(n - 1) + 0.5);
	return v[k < n ? k : n - 1];
}

/* ------------------------------------------------------------------------------------------ */
/* In this process: the daemon's grammar service and sampler                                  */
/* ------------------------------------------------------------------------------------------ */

/* The model's vocabulary as the daemon serves it, parsed by the client's code. */
static struct bn_vocab *model_vocab(const char *path)
{
	char err[BN_VOCAB_ERR_LEN];
	struct bn_vocab_served served;
	if (bn_vocab_serve_open(path, 0, NULL, &served, err) != 1) {
		fprintf(stderr, "bench-structured: %s: %s\n", path, err);
		return NULL;
	}
	size_t size = served.tokenizer_bytes;
	void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, served.tokenizer_fd, 0);
	struct bn_vocab *v = NULL;
	if (p == MAP_FAILED || bn_vocab_from_payload(p, size, &v) < 0)
		v = NULL;
	if (p != MAP_FAILED)
		munmap(p, size);
	bn_vocab_served_close(&served);
	return v;
}

static void compile_in_process(void)
{
	double ms[7];
	struct bn_grammar_options o = { .kind = BN_GRAMMAR_JSON_SCHEMA };
	char err[BN_GRAMMAR_ERR_LEN];
	for (int r = 0; r < 7; r++) {
		struct bn_grammar *g;
		int64_t t0 = bench_now_ns();
		if (bn_grammar_compile(schema20, sizeof(schema20) - 1, &o, &g, err)) {
			printf("compile_error=%s\n", err);
			return;
		}
		ms[r] = (double)(bench_now_ns() - t0) / 1e6;
		bn_grammar_unref(g);
	}
	printf("compile_schema20_ms_p50=%.2f\n", bench_median(ms, 7));
}

/* A random logits row: what the sampler's cost depends on is the row's length. */
static void fill_logits(float *l, uint32_t n, uint64_t *state)
{
	for (uint32_t i = 0; i < n; i++) {
		*state = *state * 6364136223846793005ull + 1442695040888963407ull;
		l[i] = (float)(*state >> 40) * 0x1p-24f * 8.0f;
	}
}

/* The k-th set bit of a mask with n set (k < n). */
static uint32_t nth_bit(const uint64_t *mask, uint32_t words, uint32_t k)
{
	for (uint32_t w = 0; w < words; w++) {
		uint32_t c = (uint32_t)__builtin_popcountll(mask[w]);
		if (k < c) {
			uint64_t x = mask[w];
			while (k--)
				x &= x - 1;
			return w * 64 + (uint32_t)__builtin_ctzll(x);
		}
		k -= c;
	}
	return 0;
}

struct walk_timing {
	double *mask_us, *sample_us, *row_us;
	size_t n;
};

/* One step of a constrained row, as the scheduler and the sampler take it: the mask, the
 * masked draw (its extra over a plain draw of the same row timed apart), the check of the
 * drawn token, the accept of the published one. */
static int walk_step(struct bn_grammar_matcher *m, struct bn_sampler *smp,
		     const struct bn_sample_ctx *plain_ctx, struct bn_sample_ctx *ctx, float *logits,
		     float *scratch, uint32_t n_vocab, uint64_t *mask, struct walk_timing *t,
		     uint64_t *rng)
{
	struct bn_sample_out out = { 0 };
	int64_t t0 = bench_now_ns();
	int n = bn_grammar_matcher_fill_mask(m, mask);
	int64_t t1 = bench_now_ns();
	if (n <= 0)
		return -1;
	memcpy(scratch, logits, n_vocab * sizeof(float));
	int64_t t2 = bench_now_ns();
	bn_sample(smp, plain_ctx, scratch, n_vocab, &out);
	int64_t t3 = bench_now_ns();
	memcpy(scratch, logits, n_vocab * sizeof(float));
	int64_t t4 = bench_now_ns();
	bn_sample(smp, ctx, scratch, n_vocab, &out);
	int64_t t5 = bench_now_ns();
	/* A uniform draw among the allowed tokens walks the grammar more than a model would. */
	*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
	uint32_t id = nth_bit(mask, bn_sample_mask_words(n_vocab), (uint32_t)(*rng >> 33) % (uint32_t)n);
	int64_t t6 = bench_now_ns();
	bn_grammar_matcher_accept(m, id); /* the check: accept, look, roll back */
	volatile uint64_t cost = bn_grammar_matcher_tokens_to_accept(m);
	(void)cost;
	bn_grammar_matcher_rollback(m, 1);
	bn_grammar_matcher_accept(m, id); /* delivery's */
	int64_t t7 = bench_now_ns();
	double extra = (double)((t5 - t4) - (t3 - t2)) / 1e3;
	t->sample_us[t->n] = extra;
	t->mask_us[t->n] = (double)((t1 - t0) + (t7 - t6)) / 1e3;
	t->row_us[t->n] = t->mask_us[t->n] + extra;
	t->n++;
	return bn_grammar_matcher_is_finished(m);
}

static int masks_in_process(const struct setup *s, struct bn_vocab *v)
{
	struct bn_grammar_service svc;
	struct bn_grammar_service_config cfg = { .threads = 1, .compile_ms = 10000,
						 .cache_bytes = 256u << 20 };
	int64_t t0 = bench_now_ns();
	if (bn_grammar_service_open(&svc, v, NULL, &cfg) < 0 || !svc.vocab)
		return -1;
	printf("vocab_tokens=%u\nvocab_build_ms=%.1f\n", bn_grammar_vocab_size(svc.vocab),
	       (double)(bench_now_ns() - t0) / 1e6);
	struct bn_grammar_options o = { .kind = BN_GRAMMAR_JSON_SCHEMA };
	struct bn_grammar_bound *b;
	char err[BN_GRAMMAR_ERR_LEN];
	if (bn_grammar_cache_get(svc.cache, schema20, sizeof(schema20) - 1, &o, &b, err) < 0) {
		fprintf(stderr, "bench-structured: %s\n", err);
		return -1;
	}
	t0 = bench_now_ns();
	bn_grammar_bound_warm(b, 60 * SEC); /* as the service warms after a compile */
	printf("warm_schema20_ms=%.1f\n", (double)(bench_now_ns() - t0) / 1e6);
	uint32_t n_vocab = bn_grammar_vocab_size(svc.vocab);
	size_t cap = (size_t)s->walks * (size_t)s->tokens;
	struct walk_timing t = { calloc(cap, sizeof(double)), calloc(cap, sizeof(double)),
				 calloc(cap, sizeof(double)), 0 };
	float *logits = malloc(n_vocab * sizeof(float)), *scratch = malloc(n_vocab * sizeof(float));
	uint64_t *mask = malloc(bn_sample_mask_words(n_vocab) * sizeof(uint64_t)), rng = 7;
	struct bn_sampler smp;
	bn_sampler_init(&smp);
	uint32_t history[1];
	for (int w = 0; w < s->walks; w++) {
		/* Half greedy, half seeded: the masked sampler's two paths. */
		struct bn_sampling p = { .temperature = w % 2 ? 0.8f : 0, .seed = (uint64_t)w };
		struct bn_sample_ctx plain = { .params = &p, .output = history };
		struct bn_sample_ctx ctx = plain;
		ctx.mask = mask;
		struct bn_grammar_matcher *m;
		if (bn_grammar_matcher_new(b, 0, &m))
			return -1;
		for (int i = 0; i < s->tokens && t.n < cap; i++) {
			fill_logits(logits, n_vocab, &rng);
			if (walk_step(m, &smp, &plain, &ctx, logits, scratch, n_vocab, mask, &t, &rng))
				break;
		}
		bn_grammar_matcher_free(m);
	}
	printf("mask_tokens=%zu\n", t.n);
	printf("mask_us_p50=%.2f\nmask_us_p99=%.2f\n", percentile(t.mask_us, t.n, 0.5),
	       percentile(t.mask_us, t.n, 0.99));
	printf("sample_extra_us_p50=%.2f\nsample_extra_us_p99=%.2f\n",
	       percentile(t.sample_us, t.n, 0.5), percentile(t.sample_us, t.n, 0.99));
	double p50 = percentile(t.row_us, t.n, 0.5);
	printf("row_extra_us_p50=%.2f\n", p50);
	bn_sampler_free(&smp);
	free(logits);
	free(scratch);
	free(mask);
	free(t.mask_us);
	free(t.sample_us);
	free(t.row_us);
	bn_grammar_bound_unref(b);
	bn_grammar_service_close(&svc);
	return p50 > 0 ? (int)(p50 * 1000) : 0; /* ns, for the share */
}

/* ------------------------------------------------------------------------------------------ */
/* Through a daemon                                                                             */
/* ------------------------------------------------------------------------------------------ */

static pid_t start_daemon(const struct setup *s, int max_batch, struct bn_client **c)
{
	char sock[128], batch[16];
	snprintf(sock, sizeof(sock), "%s/d.sock", s->dir);
	snprintf(batch, sizeof(batch), "%d", max_batch);
	pid_t pid = fork();
	if (pid == 0) {
		execl(s->bitnetd, s->bitnetd, "--backend", "cpu", "--model", s->model, "--socket", sock,
		      "--max-batch", batch, "--log-level", "warn", (char *)NULL);
		_exit(127);
	}
	*c = NULL;
	for (int i = 0; i < 6000 && bn_connect(sock, 0, c) < 0; i++) {
		*c = NULL;
		usleep(20000);
	}
	if (!*c) {
		fprintf(stderr, "bench-structured: the daemon did not start on %s\n", s->model);
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
		return -1;
	}
	return pid;
}

static void stop_daemon(pid_t pid, struct bn_client *c)
{
	bn_disconnect(c);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
}

static struct bn_grammar_handle *load(struct bn_client *c, const char *text, double *ms)
{
	struct bn_grammar_spec spec = { .kind = BN_GRAMMAR_KIND_JSON_SCHEMA, .text = text,
					.len = strlen(text) };
	struct bn_grammar_handle *g = NULL;
	char err[256];
	int64_t t0 = bench_now_ns();
	int rc = bn_grammar_load(c, &spec, &g, err, sizeof(err), 120 * SEC);
	*ms = (double)(bench_now_ns() - t0) / 1e6;
	if (rc < 0)
		fprintf(stderr, "bench-structured: %s: %s\n", bn_strerror(rc), err);
	return g;
}

/* n requests at once (constrained by g, or not, EOS ignored), max_tokens each: the tokens per
 * second over the wall time, and the median over the requests of their decode time per token
 * (a step's time while they run: constrained requests may end early, and the tokens per second
 * then count the batch's tail, where fewer rows share each step). */
static int run_batch(struct bn_client *c, int n, int tokens, const struct bn_grammar_handle *g,
		     double *tps, double *per_token_ms)
{
	double *each = calloc((size_t)n, sizeof(*each));
	int n_each = 0;
	struct bn_handle **h = calloc((size_t)n, sizeof(*h));
	struct bn_request req = { .max_tokens = (uint32_t)tokens,
				  .flags = g ? 0 : BN_REQ_IGNORE_EOS };
	int64_t t0 = bench_now_ns();
	for (int i = 0; i < n; i++) {
		char prompt[64];
		snprintf(prompt, sizeof(prompt), "Record %d of the user table:", i);
		if (bn_submit_grammar(c, &req, prompt, strlen(prompt), g, &h[i]) < 0)
			return -1;
	}
	uint64_t total = 0;
	for (int i = 0; i < n; i++) {
		struct bn_result r;
		if (bn_wait(h[i], -1) < 0 || bn_result(h[i], &r) < 0)
			return -1;
		total += r.n_tokens;
		if (r.n_tokens > 1)
			each[n_each++] = (double)(r.total_ns - r.first_token_ns) / 1e6 / (r.n_tokens - 1);
		bn_release(h[i]);
	}
	*tps = (double)total * 1e9 / (double)(bench_now_ns() - t0);
	*per_token_ms = n_each ? bench_median(each, n_each) : 0;
	free(each);
	free(h);
	return 0;
}

static int through_daemon(const struct setup *s, double mask_ns)
{
	struct bn_client *c;
	pid_t pid = start_daemon(s, s->batch, &c);
	if (pid < 0)
		return -1;
	double miss_ms, hit_ms;
	char *spaced = malloc(sizeof(schema20) + 2);
	snprintf(spaced, sizeof(schema20) + 2, "%s ", schema20); /* other bytes: a miss */
	struct bn_grammar_handle *g = load(c, spaced, &miss_ms);
	bn_grammar_release(load(c, spaced, &hit_ms));
	free(spaced);
	if (!g) {
		stop_daemon(pid, c);
		return -1;
	}
	printf("compile_op_ms=%.2f\ncompile_op_hit_ms=%.3f\n", miss_ms, hit_ms);
	double b1[2][MAX_ROUNDS], tps[2][MAX_ROUNDS], bn[2][MAX_ROUNDS];
	for (int r = 0; r < s->rounds; r++) {
		for (int k = 0; k < 2; k++) {
			int constrained = (r + k) % 2; /* the order alternates */
			const struct bn_grammar_handle *use = constrained ? g : NULL;
			double ignore;
			if (run_batch(c, 1, s->tokens, use, &ignore, &b1[constrained][r]) < 0 ||
			    run_batch(c, s->batch, s->batch_tokens, use, &tps[constrained][r],
				      &bn[constrained][r]) < 0) {
				stop_daemon(pid, c);
				return -1;
			}
		}
	}
	double step = bench_median(b1[0], s->rounds), step_c = bench_median(b1[1], s->rounds);
	double plain = bench_median(tps[0], s->rounds), cons = bench_median(tps[1], s->rounds);
	printf("step_ms_b1=%.3f\nstep_ms_b1_constrained=%.3f\n", step, step_c);
	printf("mask_share_b1=%.4f\n", mask_ns / 1e6 / step);
	printf("step_slowdown_b1=%.4f\n", 1 - step / step_c);
	printf("tps_b%d=%.1f\ntps_b%d_constrained=%.1f\nslowdown_b%d=%.4f\n", s->batch, plain,
	       s->batch, cons, s->batch, 1 - cons / plain);
	double stepn = bench_median(bn[0], s->rounds), stepn_c = bench_median(bn[1], s->rounds);
	printf("step_ms_b%d=%.3f\nstep_ms_b%d_constrained=%.3f\nstep_slowdown_b%d=%.4f\n", s->batch,
	       stepn, s->batch, stepn_c, s->batch, 1 - stepn / stepn_c);
	bn_grammar_release(g);
	stop_daemon(pid, c);
	return 0;
}

static int parse(int argc, char **argv, struct setup *s)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' }, { "walks", required_argument, NULL, 'w' },
		{ "tokens", required_argument, NULL, 't' }, { "batch", required_argument, NULL, 'b' },
		{ "batch-tokens", required_argument, NULL, 'k' },
		{ "rounds", required_argument, NULL, 'r' }, { NULL, 0, NULL, 0 },
	};
	*s = (struct setup){ .walks = 40, .tokens = 128, .batch = 64, .batch_tokens = 64,
			     .rounds = 3 };
	s->bitnetd = getenv("BITNETD") ? getenv("BITNETD") : "build/bitnetd";
	for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
		switch (o) {
		case 'm': s->model = optarg; break;
		case 'w': s->walks = atoi(optarg); break;
		case 't': s->tokens = atoi(optarg); break;
		case 'b': s->batch = atoi(optarg); break;
		case 'k': s->batch_tokens = atoi(optarg); break;
		case 'r': s->rounds = atoi(optarg); break;
		default: return -1;
		}
	}
	if (!s->model || s->walks < 1 || s->tokens < 2 || s->batch < 1 || s->batch_tokens < 1 ||
	    s->rounds < 1 || s->rounds > MAX_ROUNDS) {
		fprintf(stderr, "usage: bench_structured --model FILE [--walks N] [--tokens N] "
				"[--batch N] [--batch-tokens N] [--rounds 1..%d]\n", MAX_ROUNDS);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct setup s;
	if (parse(argc, argv, &s) < 0)
		return 2;
	struct bn_vocab *v = model_vocab(s.model);
	if (!v)
		return 1;
	printf("model=%s\n", s.model);
	compile_in_process();
	int mask_ns = masks_in_process(&s, v);
	bn_vocab_free(v);
	if (mask_ns < 0)
		return 1;
	snprintf(s.dir, sizeof(s.dir), "/tmp/bn-bench-structured-XXXXXX");
	if (!mkdtemp(s.dir))
		return 1;
	int rc = through_daemon(&s, mask_ns);
	char sock[128];
	snprintf(sock, sizeof(sock), "%s/d.sock", s.dir);
	unlink(sock);
	rmdir(s.dir);
	return rc < 0 ? 1 : 0;
}
