/* SPDX-License-Identifier: MIT */
/*
 * bench-gateway — what HTTP through bitnet-gateway costs against the ring, in one run.
 * `make bench-gateway` makes the 2B4T-shape model and runs it. Keys:
 *
 *   latency, on the small model (--small-model, default the built-in one): the same greedy
 *   8-token request (a 16-token prompt) through bn_generate, through HTTP on a kept-alive
 *   connection and through HTTP on a new connection each time, --samples rounds, the three
 *   interleaved (round-robin, so a drift of the machine hits each):
 *     ring_p50_us, ring_p99_us, http_keepalive_p50_us, http_keepalive_p99_us,
 *     http_new_conn_p50_us, http_new_conn_p99_us
 *     http_keepalive_added_p50_us, http_new_conn_added_p50_us   over the ring's (target <= 150)
 *     ring_ttft_p50_us, http_stream_ttft_p50_us   submit to the first token; request written
 *                                                 to the first content event read
 *   throughput, on --model: --streams streams of --tokens tokens each (a 16-token prompt,
 *   greedy, ignoring EOS), all at once, through the ring (threads of one client process
 *   sharing a session, each reading its tokens as they come) and through HTTP (a connection
 *   each, stream: true), --rounds rounds alternating:
 *     ring_streams_tps, http_streams_tps   aggregate tokens/s, medians
 *     http_over_ring_streams              (target >= 0.90)
 *     ring_rows_per_step, http_rows_per_step   the daemon's mean batch over those runs
 *
 * The HTTP client is a plain socket with TCP_NODELAY, one write per request.
 */
#define _GNU_SOURCE
#include "bench_util.h"
#include "bitnet_client.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SAMPLES 20000
#define MAX_STREAMS 1024
#define PROMPT_TOKENS 16

struct setup {
	const char *bitnetd, *gateway, *model, *small_model;
	int samples, streams, tokens, rounds;
	char dir[96];
};

/* Nearest-rank percentile q (0..1) of n samples, sorted in place. */
static double pct_us(int64_t *v, int n, double q)
{
	qsort(v, (size_t)n, sizeof(*v), bench_cmp_i64);
	int k = (int)(q * n + 0.999999) - 1;
	return (double)v[k < 0 ? 0 : k >= n ? n - 1 : k] / 1e3;
}

/* ---- the processes ----------------------------------------------------------------------- */

static pid_t spawn(const char *const *argv)
{
	pid_t pid = fork();
	if (pid == 0) {
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

static void stop(pid_t pid)
{
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
}

static int dial(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1;
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* A TCP port nothing listens on now. */
static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* bitnetd on model (cpu) and bitnet-gateway in front; waits until both answer (else stops
 * what it started). */
static int start_pair(const struct setup *s, const char *model, int port, pid_t *daemon,
		      pid_t *gateway, struct bn_client **c)
{
	char sock[160], listen[32], slots[16];
	snprintf(sock, sizeof(sock), "%s/d.sock", s->dir);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(slots, sizeof(slots), "%d", s->streams > 64 ? s->streams : 64);
	unlink(sock);
	const char *dargv[] = { s->bitnetd, "--backend", "cpu", "--model", model, "--socket", sock,
				"--slots", slots, "--log-level", "warn", NULL };
	*daemon = spawn(dargv);
	*gateway = -1;
	*c = NULL;
	for (int i = 0; i < 3000 && bn_connect(sock, 0, c) < 0; i++) {
		*c = NULL;
		usleep(20000);
	}
	if (!*c) {
		fprintf(stderr, "bench-gateway: the daemon did not start\n");
		stop(*daemon);
		return -1;
	}
	char per_key[16];
	snprintf(per_key, sizeof(per_key), "%d", s->streams * 2);
	const char *gargv[] = { s->gateway, "--socket", sock, "--listen", listen,
				"--max-requests-per-key", per_key, "--log-level", "warn", NULL };
	*gateway = spawn(gargv);
	for (int i = 0; i < 500; i++) {
		int fd = dial(port);
		if (fd >= 0) {
			close(fd);
			return 0;
		}
		usleep(10000);
	}
	fprintf(stderr, "bench-gateway: the gateway did not listen on %d\n", port);
	bn_disconnect(*c);
	stop(*gateway);
	stop(*daemon);
	return -1;
}

/* ---- HTTP, by hand ----------------------------------------------------------------------- */

static int body_of(char *req, size_t cap, int stream)
{
	char body[512];
	int n = snprintf(body, sizeof(body), "{\"prompt\":[1");
	for (int i = 1; i < PROMPT_TOKENS; i++)
		n += snprintf(body + n, sizeof(body) - (size_t)n, ",%d", 100 + 7 * i);
	n += snprintf(body + n, sizeof(body) - (size_t)n,
		      "],\"max_tokens\":8,\"temperature\":0%s}", stream ? ",\"stream\":true" : "");
	return snprintf(req, cap, "POST /v1/completions HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			n, body);
}

/* Reads one response with a Content-Length off fd. 0, or -1. */
static int read_response(int fd)
{
	static __thread char buf[65536];
	size_t got = 0;
	for (;;) {
		ssize_t k = read(fd, buf + got, sizeof(buf) - 1 - got);
		if (k <= 0)
			return -1;
		got += (size_t)k;
		buf[got] = '\0';
		char *end = strstr(buf, "\r\n\r\n");
		char *cl = end ? strcasestr(buf, "content-length:") : NULL;
		if (cl && got >= (size_t)(end + 4 - buf) + strtoul(cl + 15, NULL, 10))
			return strncmp(buf, "HTTP/1.1 200", 12) == 0 ? 0 : -1;
	}
}

static int64_t http_once(int *fd, int port, int keep)
{
	char req[1024];
	int n = body_of(req, sizeof(req), 0);
	int64_t t0 = bench_now_ns();
	if (*fd < 0 && (*fd = dial(port)) < 0)
		return -1;
	if (write(*fd, req, (size_t)n) != n || read_response(*fd) < 0)
		return -1;
	int64_t t = bench_now_ns() - t0;
	if (!keep) {
		close(*fd);
		*fd = -1;
	}
	return t;
}

/* Some event in buf carries text (a token whose bytes do not end a character yet sends ""). */
static int has_text(const char *buf)
{
	for (const char *p = buf; (p = strstr(p, "\"text\":\"")) != NULL; p += 8)
		if (p[8] != '"')
			return 1;
	return 0;
}

/* Request written to the first event that carries text. */
static int64_t http_stream_ttft(int port)
{
	char req[1024], buf[8192];
	int n = body_of(req, sizeof(req), 1);
	int fd = dial(port);
	int64_t t0 = bench_now_ns(), t = -1;
	size_t got = 0;
	if (fd >= 0 && write(fd, req, (size_t)n) == n) {
		while (got < sizeof(buf) - 1) {
			ssize_t k = read(fd, buf + got, sizeof(buf) - 1 - got);
			if (k <= 0)
				break;
			got += (size_t)k;
			buf[got] = '\0';
			if (has_text(buf)) {
				t = bench_now_ns() - t0;
				break;
			}
		}
	}
	if (fd >= 0)
		close(fd);
	return t;
}

/* ---- latency ----------------------------------------------------------------------------- */

static int64_t ring_once(struct bn_client *c, int64_t *ttft)
{
	uint32_t prompt[PROMPT_TOKENS], out[8];
	prompt[0] = 1;
	for (int i = 1; i < PROMPT_TOKENS; i++)
		prompt[i] = (uint32_t)(100 + 7 * i);
	struct bn_request req = { prompt, PROMPT_TOKENS, 8, 0, NULL };
	struct bn_handle *h;
	int64_t t0 = bench_now_ns();
	if (bn_submit(c, &req, &h) < 0)
		return -1;
	if (ttft) {
		bn_wait_tokens(h, 0, -1);
		*ttft = bench_now_ns() - t0;
	}
	int rc = bn_wait(h, -1);
	int64_t t = bench_now_ns() - t0;
	bn_read_tokens(h, 0, out, 8);
	bn_release(h);
	return rc == 0 ? t : -1;
}

static int latency(const struct setup *s)
{
	static int64_t ring[MAX_SAMPLES], keep[MAX_SAMPLES], fresh[MAX_SAMPLES], rt[MAX_SAMPLES],
		ht[MAX_SAMPLES];
	pid_t d, g;
	struct bn_client *c = NULL;
	int port = free_port();
	if (start_pair(s, s->small_model, port, &d, &g, &c) < 0)
		return -1;
	int fd = -1, n = s->samples, nt = n / 4 > 0 ? n / 4 : 1, bad = 0;
	for (int i = 0; i < 20; i++) { /* warm: sessions, vocabulary, caches */
		int tmp = -1;
		ring_once(c, NULL);
		http_once(&fd, port, 1);
		http_once(&tmp, port, 0);
	}
	for (int i = 0; i < n; i++) {
		int tmp = -1;
		int64_t a = ring_once(c, NULL), b = http_once(&fd, port, 1), f = http_once(&tmp, port, 0);
		if (a < 0 || b < 0 || f < 0)
			fprintf(stderr, "bench-gateway: a request failed (ring %lld, kept-alive %lld, new %lld)\n",
				(long long)a, (long long)b, (long long)f);
		bad |= a < 0 || b < 0 || f < 0;
		ring[i] = a;
		keep[i] = b;
		fresh[i] = f;
	}
	for (int i = 0; i < nt; i++) {
		ring_once(c, &rt[i]);
		ht[i] = http_stream_ttft(port);
		if (ht[i] < 0)
			fprintf(stderr, "bench-gateway: a stream brought no text\n");
		bad |= ht[i] < 0;
	}
	if (fd >= 0)
		close(fd);
	bn_disconnect(c);
	stop(g);
	stop(d);
	if (bad)
		return -1;
	double r50 = pct_us(ring, n, 0.5), k50 = pct_us(keep, n, 0.5), f50 = pct_us(fresh, n, 0.5);
	printf("samples=%d\nring_p50_us=%.1f\nring_p99_us=%.1f\n", n, r50, pct_us(ring, n, 0.99));
	printf("http_keepalive_p50_us=%.1f\nhttp_keepalive_p99_us=%.1f\n", k50, pct_us(keep, n, 0.99));
	printf("http_new_conn_p50_us=%.1f\nhttp_new_conn_p99_us=%.1f\n", f50, pct_us(fresh, n, 0.99));
	printf("http_keepalive_added_p50_us=%.1f\nhttp_new_conn_added_p50_us=%.1f\n", k50 - r50,
	       f50 - r50);
	printf("ring_ttft_p50_us=%.1f\nhttp_stream_ttft_p50_us=%.1f\n", pct_us(rt, nt, 0.5),
	       pct_us(ht, nt, 0.5));
	return 0;
}

/* ---- throughput -------------------------------------------------------------------------- */

struct streamer {
	const struct setup *s;
	struct bn_client *c;      /* ring */
	int port;                 /* http */
	int64_t tokens;
	pthread_barrier_t *go;
};

/* A stream through the ring: its tokens read as they come, as a streaming client reads them
 * (one wake-up per token when it sleeps), like the HTTP streams beside it. */
static void *ring_stream(void *arg)
{
	struct streamer *w = arg;
	uint32_t prompt[PROMPT_TOKENS], out[256];
	for (int i = 0; i < PROMPT_TOKENS; i++)
		prompt[i] = (uint32_t)(1 + 13 * i);
	struct bn_request req = { prompt, PROMPT_TOKENS, (uint32_t)w->s->tokens, BN_REQ_IGNORE_EOS,
				  NULL };
	struct bn_handle *h;
	pthread_barrier_wait(w->go);
	while (bn_submit(w->c, &req, &h) == -BN_E_AGAIN)
		usleep(1000);
	uint32_t have = 0;
	struct bn_result r;
	for (;;) {
		if (bn_wait_tokens(h, have, -1) < 0)
			break;
		int n;
		while ((n = bn_read_tokens(h, have, out, 256)) > 0)
			have += (uint32_t)n;
		if (bn_result(h, &r) == 0 && bn_read_tokens(h, have, out, 256) == 0)
			break;
	}
	w->tokens = have;
	bn_release(h);
	return NULL;
}

static void *http_stream(void *arg)
{
	struct streamer *w = arg;
	char body[512], req[1024];
	int n = snprintf(body, sizeof(body), "{\"prompt\":[");
	for (int i = 0; i < PROMPT_TOKENS; i++)
		n += snprintf(body + n, sizeof(body) - (size_t)n, "%s%d", i ? "," : "", 1 + 13 * i);
	n += snprintf(body + n, sizeof(body) - (size_t)n,
		      "],\"max_tokens\":%d,\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
		      w->s->tokens);
	int len = snprintf(req, sizeof(req), "POST /v1/completions HTTP/1.1\r\nHost: b\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
			   n, body);
	int fd = dial(w->port);
	pthread_barrier_wait(w->go);
	if (fd < 0 || write(fd, req, (size_t)len) != len) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	/* the whole stream, read to its end; the usage chunk's completion_tokens is the count */
	size_t cap = 1 << 16, got = 0;
	char *all = malloc(cap);
	for (;;) {
		if (got + 16384 + 1 > cap)
			all = realloc(all, cap *= 2);
		ssize_t k = read(fd, all + got, cap - got - 1);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	all[got] = '\0';
	char *u = strstr(all, "\"completion_tokens\":");
	if (u)
		w->tokens = strtol(u + 20, NULL, 10);
	free(all);
	close(fd);
	return NULL;
}

/* All streams at once through the ring or HTTP: aggregate tokens/s; *rows gets the daemon's
 * mean rows per step over the run. */
static double run_streams(const struct setup *s, struct bn_client *c, int port, int http,
			  double *rows)
{
	double rows0 = bench_metric(c, "bitnetd_batch_rows_total"),
	       steps0 = bench_metric(c, "bitnetd_steps_total");
	static pthread_t t[MAX_STREAMS];
	static struct streamer w[MAX_STREAMS];
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, (unsigned)s->streams + 1);
	for (int i = 0; i < s->streams; i++) {
		w[i] = (struct streamer){ .s = s, .c = c, .port = port, .go = &go };
		pthread_create(&t[i], NULL, http ? http_stream : ring_stream, &w[i]);
	}
	pthread_barrier_wait(&go);
	int64_t t0 = bench_now_ns(), total = 0;
	for (int i = 0; i < s->streams; i++) {
		pthread_join(t[i], NULL);
		total += w[i].tokens;
	}
	double secs = (double)(bench_now_ns() - t0) * 1e-9;
	pthread_barrier_destroy(&go);
	*rows = (bench_metric(c, "bitnetd_batch_rows_total") - rows0) /
		(bench_metric(c, "bitnetd_steps_total") - steps0);
	if (total != (int64_t)s->streams * s->tokens)
		fprintf(stderr, "bench-gateway: %s streams made %lld of %lld tokens\n",
			http ? "http" : "ring", (long long)total, (long long)s->streams * s->tokens);
	return (double)total / secs;
}

static int throughput(const struct setup *s)
{
	pid_t d, g;
	struct bn_client *c = NULL;
	int port = free_port();
	if (start_pair(s, s->model, port, &d, &g, &c) < 0)
		return -1;
	double ring[16], http[16], ring_rows[16], http_rows[16];
	for (int r = 0; r < s->rounds; r++) {
		int first_http = r % 2; /* the order alternates */
		double ra, rb;
		double a = run_streams(s, c, port, first_http, &ra),
		       b = run_streams(s, c, port, !first_http, &rb);
		ring[r] = first_http ? b : a;
		http[r] = first_http ? a : b;
		ring_rows[r] = first_http ? rb : ra;
		http_rows[r] = first_http ? ra : rb;
		fprintf(stderr, "round %d: ring %.1f tok/s (%.1f rows a step), http %.1f tok/s (%.1f)\n",
			r, ring[r], ring_rows[r], http[r], http_rows[r]);
	}
	bn_disconnect(c);
	stop(g);
	stop(d);
	double rm = bench_median(ring, s->rounds), hm = bench_median(http, s->rounds);
	printf("streams=%d\ntokens_per_stream=%d\nrounds=%d\n", s->streams, s->tokens, s->rounds);
	printf("ring_streams_tps=%.1f\nhttp_streams_tps=%.1f\nhttp_over_ring_streams=%.3f\n", rm, hm,
	       hm / rm);
	printf("ring_rows_per_step=%.1f\nhttp_rows_per_step=%.1f\n", bench_median(ring_rows, s->rounds),
	       bench_median(http_rows, s->rounds));
	return 0;
}

static int parse(int argc, char **argv, struct setup *s)
{
	*s = (struct setup){ .bitnetd = getenv("BITNETD"), .gateway = getenv("BITNET_GATEWAY"),
			     .small_model = getenv("BITNET_DEFAULT_MODEL"), .samples = 500,
			     .streams = 256, .tokens = 16, .rounds = 2 };
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--model"))
			s->model = argv[i + 1];
		else if (!strcmp(argv[i], "--small-model"))
			s->small_model = argv[i + 1];
		else if (!strcmp(argv[i], "--samples"))
			s->samples = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--streams"))
			s->streams = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--tokens"))
			s->tokens = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--rounds"))
			s->rounds = atoi(argv[i + 1]);
		else
			return -1;
	}
	if (argc % 2 == 0)
		return -1;
	return s->bitnetd && s->gateway && s->model && s->small_model && s->samples > 0 &&
			       s->samples <= MAX_SAMPLES && s->streams > 0 &&
			       s->streams <= MAX_STREAMS && s->tokens > 0 && s->tokens <= 4096 &&
			       s->rounds > 0 && s->rounds <= 16
		       ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct setup s;
	signal(SIGPIPE, SIG_IGN);
	if (parse(argc, argv, &s) < 0) {
		fprintf(stderr, "usage: BITNETD=... BITNET_GATEWAY=... BITNET_DEFAULT_MODEL=... bench-gateway --model FILE [--small-model FILE] [--samples N] [--streams N] [--tokens N] [--rounds N]\n");
		return 2;
	}
	snprintf(s.dir, sizeof(s.dir), "/tmp/bitnet-bench-gateway-%d", (int)getpid());
	if (mkdir(s.dir, 0700) < 0)
		return 1;
	int rc = latency(&s);
	if (rc == 0)
		rc = throughput(&s);
	char cmd[160];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s.dir);
	if (system(cmd) != 0)
		fprintf(stderr, "bench-gateway: could not remove %s\n", s.dir);
	if (rc < 0)
		fprintf(stderr, "bench-gateway: a run failed\n");
	return rc < 0 ? 1 : 0;
}
