/* SPDX-License-Identifier: MIT */
/*
 * bench-busy — the daemon on a busy machine: what a short request and a batch-1 decode cost
 * when other programs keep every core busy, against the same daemon with one compute thread
 * (which never waits for a worker) and against an idle machine, in one run.
 *
 * Daemons: bitnetd with its default thread count ("pool") and with --threads 1 ("one"), both
 * on --model (default stories260K from $BITNET_TEST_MODELS); with --old BIN the same two of
 * another build ("old_pool", "old_one"), so old and new are measured side by side. The busy
 * load is --busy N child processes (default: one per online CPU), each an endless loop, started
 * for the loaded half of every round and stopped for the idle half.
 *
 * Each round, idle then loaded, every daemon in a rotating order answers --requests requests
 * of one token (a 4-token prompt, greedy); a request's time is submit to result. Keys (medians
 * over --rounds rounds of each round's p50, in microseconds):
 *   idle_<daemon>_p50_us, busy_<daemon>_p50_us
 *   busy_pool_over_one          the loaded pool daemon over the loaded one-thread daemon (the
 *                               issue's target: <= 1.3), the median of the rounds' ratios
 *   idle_pool_over_one          the same, idle
 * With --decode-model FILE (the 2B4T shape), a default-thread daemon on it decodes
 * --decode-tokens tokens at batch 1, idle and loaded, every round:
 *   decode_idle_tps, decode_busy_tps, decode_busy_over_idle (target >= 0.4, the fair share of
 *   the cores when one busy loop runs per core beside two compute threads: 2 of 4 runnable)
 * and with --old, old_decode_* likewise.
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
#include <unistd.h>

#define SEC 1000000000LL
#define MAX_ROUNDS 64
#define MAX_BUSY 256
#define MAX_REQUESTS 100000

struct daemon {
	const char *name;        /* key prefix */
	const char *bin, *model;
	int one_thread;
	char sock[128];
	pid_t pid;
	struct bn_client *c;
	double p50[2][MAX_ROUNDS]; /* [idle, busy][round] */
	double tps[2][MAX_ROUNDS];
};

struct setup {
	const char *bitnetd, *old, *model, *decode_model;
	int requests, rounds, busy, decode_tokens;
	char dir[64];
};

static int start_daemon(struct daemon *d, const char *dir)
{
	snprintf(d->sock, sizeof(d->sock), "%s/%s.sock", dir, d->name);
	d->pid = fork();
	if (d->pid == 0) {
		if (d->one_thread)
			execl(d->bin, d->bin, "--backend", "cpu", "--model", d->model, "--socket",
			      d->sock, "--threads", "1", "--log-level", "warn", (char *)NULL);
		else
			execl(d->bin, d->bin, "--backend", "cpu", "--model", d->model, "--socket",
			      d->sock, "--log-level", "warn", (char *)NULL);
		_exit(127);
	}
	d->c = NULL;
	for (int i = 0; i < 6000 && bn_connect(d->sock, 0, &d->c) < 0; i++) {
		d->c = NULL;
		usleep(20000);
	}
	if (d->c)
		return 0;
	fprintf(stderr, "bench-busy: %s did not start on %s\n", d->bin, d->model);
	return -1;
}

static void stop_daemon(struct daemon *d)
{
	if (d->c)
		bn_disconnect(d->c);
	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		waitpid(d->pid, NULL, 0);
	}
	d->c = NULL;
	d->pid = 0;
}

/* The load: n children spinning until killed. */
static int start_busy(pid_t *kids, int n)
{
	for (int i = 0; i < n; i++) {
		kids[i] = fork();
		if (kids[i] == 0)
			for (volatile uint64_t x = 0;; x++)
				;
		if (kids[i] < 0)
			return -1;
	}
	usleep(200000); /* let the scheduler spread them */
	return 0;
}

static void stop_busy(pid_t *kids, int n)
{
	for (int i = 0; i < n; i++)
		if (kids[i] > 0) {
			kill(kids[i], SIGKILL);
			waitpid(kids[i], NULL, 0);
			kids[i] = 0;
		}
}

/* p50 of `n` one-token requests, in microseconds; -1 when one failed. */
static double short_requests(struct bn_client *c, int n)
{
	static const uint32_t prompt[] = { 1, 403, 407, 261 };
	static int64_t t[MAX_REQUESTS];
	struct bn_request req = { prompt, 4, 1, BN_REQ_IGNORE_EOS, NULL };
	for (int i = 0; i < n; i++) {
		uint32_t out[1];
		struct bn_result res;
		int64_t t0 = bench_now_ns();
		int rc = bn_generate(c, &req, out, 1, &res, 60 * SEC);
		t[i] = bench_now_ns() - t0;
		if (rc < 0) {
			fprintf(stderr, "bench-busy: a request failed: %s\n", bn_strerror(rc));
			return -1;
		}
	}
	qsort(t, (size_t)n, sizeof(t[0]), bench_cmp_i64);
	return (double)t[n / 2] / 1e3;
}

/* Tokens/s of one batch-1 generation of `tokens` tokens; -1 on failure. */
static double decode_tps(struct bn_client *c, int tokens)
{
	static const uint32_t prompt[] = { 128000, 791, 4062, 14198 };
	static uint32_t out[4096];
	struct bn_request req = { prompt, 4, (uint32_t)tokens, BN_REQ_IGNORE_EOS, NULL };
	struct bn_result res;
	int64_t t0 = bench_now_ns();
	int rc = bn_generate(c, &req, out, 4096, &res, 600 * SEC);
	int64_t t = bench_now_ns() - t0;
	if (rc < 0) {
		fprintf(stderr, "bench-busy: a decode failed: %s\n", bn_strerror(rc));
		return -1;
	}
	return (double)tokens * 1e9 / (double)t;
}

static void usage(void)
{
	fprintf(stderr, "usage: bench-busy [--model FILE] [--decode-model FILE] [--old BITNETD]\n"
			"  [--requests N] [--rounds N] [--busy N] [--decode-tokens N]\n"
			"  (BITNETD: the new daemon; default build/bitnetd)\n");
}

static int parse(int argc, char **argv, struct setup *s)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v) {
			usage();
			return -1;
		}
		if (!strcmp(a, "--model"))
			s->model = v;
		else if (!strcmp(a, "--decode-model"))
			s->decode_model = v;
		else if (!strcmp(a, "--old"))
			s->old = v;
		else if (!strcmp(a, "--requests"))
			s->requests = atoi(v);
		else if (!strcmp(a, "--rounds"))
			s->rounds = atoi(v);
		else if (!strcmp(a, "--busy"))
			s->busy = atoi(v);
		else if (!strcmp(a, "--decode-tokens"))
			s->decode_tokens = atoi(v);
		else {
			usage();
			return -1;
		}
		i++;
	}
	if (s->requests < 1 || s->requests > MAX_REQUESTS || s->rounds < 1 ||
	    s->rounds > MAX_ROUNDS || s->busy < 0 || s->busy > MAX_BUSY || s->decode_tokens < 1 ||
	    s->decode_tokens > 4096) {
		usage();
		return -1;
	}
	return 0;
}

/* The daemons: new pool, new one thread, then the old build's two; decoders likewise. */
static int make_daemons(const struct setup *s, struct daemon *d, int *n, struct daemon *dec,
			int *n_dec)
{
	static const char *const names[] = { "pool", "one", "old_pool", "old_one" };
	*n = s->old ? 4 : 2;
	for (int i = 0; i < *n; i++)
		d[i] = (struct daemon){ .name = names[i], .bin = i < 2 ? s->bitnetd : s->old,
					.model = s->model, .one_thread = i % 2 };
	*n_dec = !s->decode_model ? 0 : s->old ? 2 : 1;
	static const char *const dec_names[] = { "decode", "old_decode" };
	for (int i = 0; i < *n_dec; i++)
		dec[i] = (struct daemon){ .name = dec_names[i], .bin = i ? s->old : s->bitnetd,
					  .model = s->decode_model };
	return 0;
}

/* One half-round (loaded or not): each daemon's p50, in an order that rotates with the round;
 * then each decoder's rate. */
static int measure(const struct setup *s, struct daemon *d, int n, struct daemon *dec, int n_dec,
		   int round, int loaded)
{
	for (int k = 0; k < n; k++) {
		struct daemon *x = &d[(k + round) % n];
		x->p50[loaded][round] = short_requests(x->c, s->requests);
		if (x->p50[loaded][round] < 0)
			return -1;
	}
	for (int k = 0; k < n_dec; k++) {
		struct daemon *x = &dec[(k + round) % n_dec];
		x->tps[loaded][round] = decode_tps(x->c, s->decode_tokens);
		if (x->tps[loaded][round] < 0)
			return -1;
	}
	return 0;
}

static double median_of(const double *v, int n)
{
	double tmp[MAX_ROUNDS];
	memcpy(tmp, v, (size_t)n * sizeof(double));
	return bench_median(tmp, n);
}

static double median_ratio(const double *a, const double *b, int n)
{
	double r[MAX_ROUNDS];
	for (int i = 0; i < n; i++)
		r[i] = a[i] / b[i];
	return bench_median(r, n);
}

static void report(const struct setup *s, const struct daemon *d, int n, const struct daemon *dec,
		   int n_dec)
{
	static const char *const half[] = { "idle", "busy" };
	for (int l = 0; l < 2; l++)
		for (int i = 0; i < n; i++)
			printf("%s_%s_p50_us=%.1f\n", half[l], d[i].name, median_of(d[i].p50[l], s->rounds));
	for (int l = 0; l < 2; l++)
		for (int i = 0; i + 1 < n; i += 2)
			printf("%s_%s_over_%s=%.3f\n", half[l], d[i].name, d[i + 1].name,
			       median_ratio(d[i].p50[l], d[i + 1].p50[l], s->rounds));
	for (int i = 0; i < n_dec; i++) {
		printf("%s_idle_tps=%.2f\n%s_busy_tps=%.2f\n", dec[i].name,
		       median_of(dec[i].tps[0], s->rounds), dec[i].name,
		       median_of(dec[i].tps[1], s->rounds));
		printf("%s_busy_over_idle=%.3f\n", dec[i].name,
		       median_ratio(dec[i].tps[1], dec[i].tps[0], s->rounds));
	}
}

int main(int argc, char **argv)
{
	struct setup s = { .requests = 200, .rounds = 5, .decode_tokens = 48 };
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	s.busy = cpus > 0 ? (int)cpus : 1;
	static char stories[512];
	const char *models = getenv("BITNET_TEST_MODELS");
	snprintf(stories, sizeof(stories), "%s/stories260K.gguf", models ? models : "../shared/models");
	s.model = stories;
	s.bitnetd = getenv("BITNETD") ? getenv("BITNETD") : "build/bitnetd";
	if (parse(argc, argv, &s) < 0)
		return 2;
	snprintf(s.dir, sizeof(s.dir), "/tmp/bench-busy-XXXXXX");
	if (!mkdtemp(s.dir)) {
		perror("mkdtemp");
		return 1;
	}
	printf("cpus=%ld\nbusy_loops=%d\nrequests=%d\nrounds=%d\nmodel=%s\n", cpus, s.busy,
	       s.requests, s.rounds, s.model);
	struct daemon d[4], dec[2];
	int n, n_dec, rc = 0;
	make_daemons(&s, d, &n, dec, &n_dec);
	for (int i = 0; i < n && rc == 0; i++)
		rc = start_daemon(&d[i], s.dir);
	for (int i = 0; i < n_dec && rc == 0; i++)
		rc = start_daemon(&dec[i], s.dir);
	pid_t kids[MAX_BUSY] = { 0 };
	for (int r = 0; r < s.rounds && rc == 0; r++) {
		rc = measure(&s, d, n, dec, n_dec, r, 0);
		if (rc == 0)
			rc = start_busy(kids, s.busy);
		if (rc == 0)
			rc = measure(&s, d, n, dec, n_dec, r, 1);
		stop_busy(kids, s.busy);
	}
	if (rc == 0)
		report(&s, d, n, dec, n_dec);
	for (int i = 0; i < n; i++)
		stop_daemon(&d[i]);
	for (int i = 0; i < n_dec; i++)
		stop_daemon(&dec[i]);
	rmdir(s.dir);
	return rc == 0 ? 0 : 1;
}
