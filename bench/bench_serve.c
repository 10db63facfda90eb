/* SPDX-License-Identifier: MIT */
/*
 * bench-serve — the serving benchmark: starts bitnetd (cpu backend, the 2B4T-shape model) with
 * each scenario's scheduler flags, drives it from separate client processes and prints
 * key=value lines. `make bench-serve` makes the model file and runs it.
 *
 * Timing is on the client side, per token: a client takes CLOCK_MONOTONIC (one clock for all
 * processes) before bn_submit, then loops on bn_wait_tokens and stamps every token that
 * became visible with the time its wait returned. Tokens seen in the same wake-up share one
 * time; an inter-token latency (ITL) sample is the gap between two consecutive distinct
 * arrival times, and a token that shared its predecessor's time is counted in
 * coalesced_tokens_* instead of giving a zero gap (the daemon makes one token per row per
 * step, so this count is normally 0). Every request is greedy with BN_REQ_IGNORE_EOS, so it
 * makes exactly its max_tokens. Percentiles are nearest-rank. Keys:
 *
 *   sweep (--max-batch 32): N = 1, 2, 4, 8, 16, 32 client processes, one request each
 *   (128-token prompt, 64 tokens), released together
 *     serve_tps_cN           N * 64 / (last client done - first submit)
 *     serve_total_tps_cN     the same with the prompt tokens counted
 *     ttft_p50_ms_cN, ttft_p99_ms_cN, itl_p50_ms_cN, itl_p99_ms_cN
 *     serve_tps_c16_over_c1  the batching gain seen by clients (target >= 3)
 *   longprompt (daemon defaults): 16 decoders (16-token prompts, 400 tokens); once each has
 *   10 tokens, a 17th client sends a 2048-token prompt for 1 token
 *     longprompt_itl_median_ms_before, longprompt_itl_p99_ms_before  decoders' gaps from
 *         their 5th token until the long prompt's submission
 *     longprompt_itl_p99_ms_during   gaps that end while the long prompt is read
 *     longprompt_itl_median_ms_during_q1, _q4  those of the first and last quarter of it
 *     longprompt_itl_p99_during_over_median_before  (target <= 3)
 *     longprompt_prefill_s           the long prompt's submission to its token
 *   flood (--max-running-per-session 1; again with 2, keys suffixed _cap2, and with daemon
 *   defaults, keys suffixed _nocap):
 *   a light client's 9 sequential requests (16-token prompt, 16 tokens) alone, then while
 *   another client process keeps 64 such requests in flight
 *     flood_light_solo_median_ms, flood_light_median_ms  submit to done, median
 *     flood_light_over_solo          (target <= 2)
 *     flood_light_solo_ttft_median_ms, flood_light_ttft_median_ms  submit to first token
 *     flood_requests_done            flood requests ended by the time the light client is done
 *   chat (--prefix-cache uid, then off): 8 client processes, each a 6-turn conversation that
 *   starts with the same 512-token system prompt; each turn adds 64 user tokens, sends the
 *   whole conversation and appends the 32-token reply
 *     chat_ttft_p50_ms_MODE          submit to first token over every turn
 *     chat_ttft_p50_ms_turn6_MODE    the same over the last turns
 *     chat_total_s_MODE              first submit to last reply
 *     prefix_cache_hit_ratio_MODE    the daemon's hit tokens over lookup tokens
 *     prefix_cache_ttft_speedup, prefix_cache_ttft_speedup_last_turn (target >= 5),
 *     prefix_cache_total_speedup (target >= 2)   off over on
 */
#define _GNU_SOURCE
#include "bitnet_client.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WAIT_NS (300LL * 1000000000LL) /* no token for this long: the run has failed */
#define MAX_KIDS 64
#define LIGHT_SHAPE 16                 /* light and flood requests: prompt and output tokens */
#define FLOOD_IN_FLIGHT 64

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Distinct deterministic prompts: ids in [3, vocab), as bench-model makes them. */
static void tokens_for(uint32_t seed, uint32_t vocab, uint32_t *out, uint32_t n)
{
	uint32_t x = seed * 2654435761u + 7u;
	for (uint32_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		out[i] = 3 + (x >> 8) % (vocab - 3);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Samples and percentiles                                                                     */
/* ------------------------------------------------------------------------------------------ */

struct samples {
	int64_t *v;
	size_t n, cap;
};

static void samples_add(struct samples *s, int64_t x)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 256;
		s->v = realloc(s->v, s->cap * sizeof(int64_t));
		if (!s->v) {
			fprintf(stderr, "bench-serve: out of memory\n");
			exit(1);
		}
	}
	s->v[s->n++] = x;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Nearest rank, in milliseconds; -1 when there are no samples. */
static double pct_ms(struct samples *s, double p)
{
	if (s->n == 0)
		return -1;
	qsort(s->v, s->n, sizeof(int64_t), cmp_i64);
	size_t rank = (size_t)(p / 100.0 * (double)s->n + 0.999999);
	rank = rank < 1 ? 1 : rank > s->n ? s->n : rank;
	return (double)s->v[rank - 1] / 1e6;
}

static void samples_free(struct samples *s)
{
	free(s->v);
	*s = (struct samples){ 0 };
}

/* ------------------------------------------------------------------------------------------ */
/* Memory shared with the client processes                                                     */
/* ------------------------------------------------------------------------------------------ */

/* One request as its client saw it. Written by the client; n_tokens is also read by other
 * processes while the request runs. */
struct trace {
	int64_t submit_ns;  /* just before bn_submit */
	int64_t done_ns;    /* when the client saw the terminal status */
	uint32_t n_tokens;  /* tokens seen so far (store-release after t_ns is written) */
	uint32_t status;    /* enum bn_status */
	int64_t *t_ns;      /* [max_tokens] when each token became visible */
};

/* Coordination words, one set per scenario run. */
struct board {
	uint32_t ready;     /* clients connected and waiting for the start */
	uint32_t stop;      /* set: clients cancel what runs and leave */
	uint32_t flood_done; /* requests the flooding client has seen end */
};

static uint8_t *arena;       /* MAP_SHARED | MAP_ANONYMOUS: children inherit the same pages */
static size_t arena_used, arena_size = (size_t)16 << 20;

static void *shared_alloc(size_t bytes)
{
	bytes = (bytes + 63) & ~(size_t)63;
	if (arena_used + bytes > arena_size) {
		fprintf(stderr, "bench-serve: shared arena too small\n");
		exit(1);
	}
	void *p = arena + arena_used;
	arena_used += bytes;
	memset(p, 0, bytes);
	return p;
}

static struct trace *traces_new(uint32_t n, uint32_t max_tokens)
{
	struct trace *t = shared_alloc(n * sizeof(struct trace));
	for (uint32_t i = 0; i < n; i++)
		t[i].t_ns = shared_alloc(max_tokens * sizeof(int64_t));
	return t;
}

/* ------------------------------------------------------------------------------------------ */
/* Process bookkeeping and failure                                                             */
/* ------------------------------------------------------------------------------------------ */

static pid_t parent_pid, daemon_pid;
static char sock_path[108], log_path[64];
static pid_t kids[MAX_KIDS];
static int n_kids;
static int go_r = -1, go_w = -1; /* the start barrier: closing go_w releases every client */
static int client_id = -1;        /* in a client process: its index, for messages */

static void dump_daemon_log(void)
{
	FILE *f = log_path[0] ? fopen(log_path, "r") : NULL;
	if (!f)
		return;
	char line[512];
	fprintf(stderr, "---- bitnetd stderr (%s) ----\n", log_path);
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fprintf(stderr, "---- end of bitnetd stderr ----\n");
	fclose(f);
}

static void kill_kids(void)
{
	for (int i = 0; i < n_kids; i++)
		if (kids[i] > 0)
			kill(kids[i], SIGKILL);
	for (int i = 0; i < n_kids; i++)
		if (kids[i] > 0)
			waitpid(kids[i], NULL, 0);
	n_kids = 0;
}

/* SIGTERM, then SIGKILL after 10 s. Returns the daemon's wait status, or -1 when it had to
 * be killed. */
static int stop_daemon(void)
{
	if (daemon_pid <= 0)
		return 0;
	kill(daemon_pid, SIGTERM);
	int st = 0;
	for (int i = 0; i < 1000; i++) {
		pid_t r = waitpid(daemon_pid, &st, WNOHANG);
		if (r == daemon_pid || (r < 0 && errno == ECHILD)) {
			daemon_pid = 0;
			return st;
		}
		sleep_ms(10);
	}
	kill(daemon_pid, SIGKILL);
	waitpid(daemon_pid, NULL, 0);
	daemon_pid = 0;
	return -1;
}

static void cleanup(void)
{
	if (getpid() != parent_pid)
		return;
	kill_kids();
	stop_daemon();
	if (sock_path[0])
		unlink(sock_path);
	if (log_path[0])
		unlink(log_path);
}

/* The parent's fatal error: kills the clients and the daemon, shows the daemon's stderr. */
__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
	va_list ap;
	fflush(stdout);
	fprintf(stderr, "bench-serve: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	kill_kids();
	if (daemon_pid > 0) {
		int st = 0;
		if (waitpid(daemon_pid, &st, WNOHANG) == daemon_pid) {
			fprintf(stderr, "bench-serve: bitnetd had exited (%s %d)\n",
				WIFEXITED(st) ? "status" : "signal",
				WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
			daemon_pid = 0;
		}
	}
	stop_daemon();
	dump_daemon_log();
	exit(1); /* atexit: cleanup removes the socket and the log */
}

/* A client process's fatal error: the parent sees its exit status and fails the run. */
__attribute__((format(printf, 1, 2), noreturn)) static void client_fail(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "bench-serve: client %d: ", client_id);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	_exit(1);
}

static void on_signal(int sig)
{
	/* Only async-signal-safe calls: kill the processes we started and leave. */
	for (int i = 0; i < n_kids; i++)
		if (kids[i] > 0)
			kill(kids[i], SIGKILL);
	if (daemon_pid > 0)
		kill(daemon_pid, SIGKILL);
	if (sock_path[0])
		unlink(sock_path);
	if (log_path[0])
		unlink(log_path);
	_exit(128 + sig);
}

/* fork() for a child that must not outlive this process: output flushed first (so the child
 * does not repeat it), and in the child the default SIGINT/SIGTERM/SIGHUP and a SIGKILL when
 * the parent dies. Returns the pid in the parent, 0 in the child. */
static pid_t fork_tied(void)
{
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent_pid)
			_exit(1);
	}
	return pid;
}

/* Forks a client process running fn(arg); it dies with the parent. */
static pid_t spawn(void (*fn)(void *), void *arg, int id)
{
	if (n_kids == MAX_KIDS)
		die("too many client processes");
	pid_t pid = fork_tied();
	if (pid == 0) {
		client_id = id;
		n_kids = 0;
		daemon_pid = 0;
		if (go_w >= 0)
			close(go_w);
		fn(arg);
		_exit(0);
	}
	kids[n_kids++] = pid;
	return pid;
}

/* Reaps client processes until `want` has exited (-1: until all have). Any client that
 * failed fails the run. */
static void reap(pid_t want)
{
	while (n_kids > 0) {
		int st;
		pid_t pid = waitpid(-1, &st, 0);
		if (pid < 0) {
			if (errno == EINTR)
				continue;
			die("waitpid: %s", strerror(errno));
		}
		if (pid == daemon_pid) {
			daemon_pid = 0;
			die("bitnetd exited during the run (%s %d)", WIFEXITED(st) ? "status" : "signal",
			    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
		}
		int i = 0;
		while (i < n_kids && kids[i] != pid)
			i++;
		if (i == n_kids)
			continue;
		kids[i] = kids[--n_kids];
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			die("a client process failed (%s %d)", WIFEXITED(st) ? "status" : "signal",
			    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
		if (pid == want)
			return;
	}
}

/* Opens the start barrier for the clients about to be spawned. */
static void barrier_open(void)
{
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) < 0)
		die("pipe: %s", strerror(errno));
	go_r = fds[0];
	go_w = fds[1];
}

/* Waits until `n` clients are connected, then releases them all at once. */
static void barrier_release(struct board *b, uint32_t n)
{
	int64_t t0 = now_ns();
	while (__atomic_load_n(&b->ready, __ATOMIC_ACQUIRE) < n) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG);
		if (pid > 0 && pid == daemon_pid) {
			daemon_pid = 0;
			die("bitnetd exited before the clients started (%s %d)",
			    WIFEXITED(st) ? "status" : "signal",
			    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
		}
		if (pid > 0)
			die("a client process exited before the start (%s %d)",
			    WIFEXITED(st) ? "status" : "signal",
			    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
		if (now_ns() - t0 > 60LL * 1000000000LL)
			die("clients did not connect within 60 s");
		sleep_ms(1);
	}
	close(go_w); /* every client's read() returns 0 now */
	close(go_r);
	go_w = go_r = -1;
}

/* In a client: connect, say ready, wait for the start. */
static struct bn_client *client_start(struct board *b, uint32_t slots)
{
	struct bn_client *c;
	int rc = bn_connect(sock_path, slots, &c);
	if (rc < 0)
		client_fail("bn_connect: %s", bn_strerror(rc));
	/* Release: the parent's acquire load of ready sees a connected client. */
	__atomic_fetch_add(&b->ready, 1, __ATOMIC_RELEASE);
	char byte;
	while (read(go_r, &byte, 1) < 0 && errno == EINTR)
		;
	close(go_r);
	return c;
}

/* ------------------------------------------------------------------------------------------ */
/* One traced request                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* Submits one request and stamps each of its tokens as it becomes visible. With `stop`, the
 * request is cancelled once *stop is set (checked after each wake-up). A request must end
 * with LENGTH and exactly max_tokens tokens, or CANCELLED when we cancelled it. */
static void trace_request_into(struct bn_client *c, const uint32_t *prompt, uint32_t n_prompt,
			       uint32_t max_tokens, struct trace *tr, const uint32_t *stop,
			       uint32_t *out)
{
	struct bn_request req = { .prompt = prompt, .n_prompt = n_prompt,
				  .max_tokens = max_tokens, .flags = BN_REQ_IGNORE_EOS };
	uint32_t *scratch = out ? out : malloc(max_tokens * sizeof(uint32_t));
	struct bn_handle *h;
	if (!scratch)
		client_fail("out of memory");
	tr->submit_ns = now_ns();
	int rc = bn_submit(c, &req, &h);
	if (rc < 0)
		client_fail("bn_submit: %s", bn_strerror(rc));
	uint32_t have = 0;
	int cancelled = 0;
	struct bn_result res = { 0 };
	for (;;) {
		rc = bn_wait_tokens(h, have, WAIT_NS);
		int64_t t = now_ns();
		if (rc < 0)
			client_fail("bn_wait_tokens after %u tokens: %s", have, bn_strerror(rc));
		int got = bn_read_tokens(h, have, scratch + have, max_tokens - have);
		for (int i = 0; i < got; i++)
			tr->t_ns[have + i] = t;
		have += (uint32_t)got;
		/* Release: a reader that sees n_tokens sees the times below it. */
		__atomic_store_n(&tr->n_tokens, have, __ATOMIC_RELEASE);
		if (got == 0 && bn_result(h, &res) == 0) {
			tr->done_ns = t;
			break;
		}
		/* Acquire pairs with the store that set stop (nothing else rides on it). */
		if (stop && !cancelled && __atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
			bn_cancel(h);
			cancelled = 1;
		}
	}
	tr->status = res.status;
	bn_release(h);
	if (!out)
		free(scratch);
	if (res.status == BN_STATUS_CANCELLED && cancelled)
		return;
	if (res.status != BN_STATUS_LENGTH || have != max_tokens)
		client_fail("request ended with %s (%s) after %u of %u tokens",
			    bn_status_name(res.status), bn_strerror(res.error), have, max_tokens);
}

static void trace_request(struct bn_client *c, const uint32_t *prompt, uint32_t n_prompt,
			  uint32_t max_tokens, struct trace *tr, const uint32_t *stop)
{
	trace_request_into(c, prompt, n_prompt, max_tokens, tr, stop, NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* The daemon                                                                                  */
/* ------------------------------------------------------------------------------------------ */

struct setup {
	const char *daemon;     /* path to bitnetd */
	const char *model;      /* path to the 2B4T-shape GGUF */
	const char *lm_head;    /* --lm-head for every scenario, NULL: the daemon's default */
	const char *backend;    /* --backend for every scenario (default cpu) */
	const char *device;     /* --device for every scenario, NULL: the daemon's default */
	struct bn_model_info info;
	int quick;
	int model_printed;
};

/* Starts bitnetd with the scenario's flags (NULL-terminated), waits until it accepts a
 * session, reads the model info and runs one short request so that the weights are resident
 * before anything is timed. */
static void start_daemon(struct setup *su, const char *const *flags)
{
	const char *argv[32];
	int n = 0;
	argv[n++] = su->daemon;
	const char *common[] = { "--backend", su->backend, "--model", su->model, "--socket", sock_path,
				 "--log-level", "warn" };
	for (size_t i = 0; i < sizeof(common) / sizeof(common[0]); i++)
		argv[n++] = common[i];
	if (su->device) {
		argv[n++] = "--device";
		argv[n++] = su->device;
	}
	if (su->lm_head) {
		argv[n++] = "--lm-head";
		argv[n++] = su->lm_head;
	}
	for (int i = 0; flags[i] && n < 31; i++)
		argv[n++] = flags[i];
	argv[n] = NULL;
	unlink(sock_path);
	int log_fd = open(log_path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (log_fd < 0)
		die("%s: %s", log_path, strerror(errno));
	pid_t pid = fork_tied();
	if (pid == 0) {
		signal(SIGPIPE, SIG_DFL);
		dup2(log_fd, STDOUT_FILENO);
		dup2(log_fd, STDERR_FILENO);
		execv(su->daemon, (char *const *)argv);
		fprintf(stderr, "bench-serve: cannot run %s: %s\n", su->daemon, strerror(errno));
		_exit(127);
	}
	close(log_fd);
	daemon_pid = pid;

	struct bn_client *c = NULL;
	int64_t t0 = now_ns();
	for (;;) {
		int st;
		if (waitpid(daemon_pid, &st, WNOHANG) == daemon_pid) {
			daemon_pid = 0;
			die("bitnetd did not start (%s %d)", WIFEXITED(st) ? "exit status" : "signal",
			    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
		}
		int rc = bn_connect(sock_path, 1, &c);
		if (rc == 0)
			break;
		if (now_ns() - t0 > 180LL * 1000000000LL)
			die("bitnetd did not accept a session within 180 s (last: %s)", bn_strerror(rc));
		sleep_ms(50);
	}
	int rc = bn_model_info(c, &su->info);
	if (rc < 0)
		die("bn_model_info: %s", bn_strerror(rc));
	uint32_t prompt[16], out[4];
	tokens_for(1, su->info.vocab_size, prompt, 16);
	struct bn_request req = { .prompt = prompt, .n_prompt = 16, .max_tokens = 4,
				  .flags = BN_REQ_IGNORE_EOS };
	rc = bn_generate(c, &req, out, 4, NULL, WAIT_NS);
	if (rc < 0)
		die("warm-up request: %s", bn_strerror(rc));
	bn_disconnect(c); /* no session of ours crosses a fork */
	if (!su->model_printed) {
		printf("model=%s\nvocab_size=%u\ncontext_length=%u\n", su->info.name,
		       su->info.vocab_size, su->info.context_length);
		su->model_printed = 1;
	}
}

static void finish_daemon(void)
{
	int st = stop_daemon();
	if (st < 0)
		die("bitnetd did not exit within 10 s of SIGTERM (killed)");
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		die("bitnetd ended with %s %d after SIGTERM", WIFEXITED(st) ? "status" : "signal",
		    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

static void print_flags(const char *scenario, const char *const *flags)
{
	printf("scenario_flags_%s=\"", scenario);
	if (!flags[0])
		printf("(daemon defaults)");
	for (int i = 0; flags[i]; i++)
		printf("%s%s", i ? " " : "", flags[i]);
	printf("\"\n");
}

/* Fails the run when the served model cannot take a request of this shape. */
static void check_capacity(const struct setup *su, uint32_t n_prompt, uint32_t max_tokens)
{
	if (n_prompt > su->info.max_prompt_tokens || max_tokens > su->info.max_output_tokens ||
	    n_prompt + max_tokens > su->info.context_length)
		die("the model serves prompts of %u and outputs of %u tokens in a context of %u; "
		    "this scenario needs %u + %u", su->info.max_prompt_tokens,
		    su->info.max_output_tokens, su->info.context_length, n_prompt, max_tokens);
}

/* ITL samples of one trace over tokens [from, n) whose arrival lies in (t_lo, t_hi]. Returns
 * the tokens that shared their predecessor's arrival time. */
static uint32_t add_itls(const struct trace *t, uint32_t from, int64_t t_lo, int64_t t_hi,
			 struct samples *s)
{
	uint32_t coalesced = 0;
	for (uint32_t i = from > 1 ? from : 1; i < t->n_tokens; i++) {
		if (t->t_ns[i] <= t_lo || t->t_ns[i] > t_hi)
			continue;
		if (t->t_ns[i] == t->t_ns[i - 1])
			coalesced++;
		else
			samples_add(s, t->t_ns[i] - t->t_ns[i - 1]);
	}
	return coalesced;
}

/* ------------------------------------------------------------------------------------------ */
/* Scenario 1: concurrency sweep                                                               */
/* ------------------------------------------------------------------------------------------ */

#define SWEEP_PROMPT 128
#define SWEEP_TOKENS 64

struct sweep_arg {
	struct board *b;
	struct trace *tr;
	uint32_t n, vocab;
};

static void sweep_client(void *p)
{
	struct sweep_arg *a = p;
	uint32_t prompt[SWEEP_PROMPT];
	tokens_for(1000 * a->n + (uint32_t)client_id, a->vocab, prompt, SWEEP_PROMPT);
	struct bn_client *c = client_start(a->b, 1);
	trace_request(c, prompt, SWEEP_PROMPT, SWEEP_TOKENS, &a->tr[client_id], NULL);
	bn_disconnect(c);
}

/* One sweep point: returns serve_tps. */
static double sweep_point(const struct setup *su, uint32_t n)
{
	arena_used = 0;
	struct board *b = shared_alloc(sizeof(*b));
	struct sweep_arg a = { .b = b, .tr = traces_new(n, SWEEP_TOKENS), .n = n,
			       .vocab = su->info.vocab_size };
	barrier_open();
	for (uint32_t i = 0; i < n; i++)
		spawn(sweep_client, &a, (int)i);
	barrier_release(b, n);
	reap(-1);

	int64_t first = INT64_MAX, last = 0;
	struct samples ttft = { 0 }, itl = { 0 };
	uint32_t coalesced = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct trace *t = &a.tr[i];
		first = t->submit_ns < first ? t->submit_ns : first;
		last = t->done_ns > last ? t->done_ns : last;
		samples_add(&ttft, t->t_ns[0] - t->submit_ns);
		coalesced += add_itls(t, 1, INT64_MIN, INT64_MAX, &itl);
	}
	double secs = (double)(last - first) / 1e9;
	double tps = n * SWEEP_TOKENS / secs;
	printf("serve_tps_c%u=%.2f\n", n, tps);
	printf("serve_total_tps_c%u=%.2f\n", n, n * (SWEEP_PROMPT + SWEEP_TOKENS) / secs);
	printf("ttft_p50_ms_c%u=%.1f\nttft_p99_ms_c%u=%.1f\n", n, pct_ms(&ttft, 50), n,
	       pct_ms(&ttft, 99));
	printf("itl_p50_ms_c%u=%.1f\nitl_p99_ms_c%u=%.1f\n", n, pct_ms(&itl, 50), n,
	       pct_ms(&itl, 99));
	printf("coalesced_tokens_c%u=%u\n", n, coalesced);
	fflush(stdout);
	samples_free(&ttft);
	samples_free(&itl);
	return tps;
}

static void run_sweep(struct setup *su)
{
	static const char *const flags[] = { "--max-batch", "32", NULL };
	static const uint32_t ns[] = { 1, 2, 4, 8, 16, 32 };
	print_flags("sweep", flags);
	start_daemon(su, flags);
	check_capacity(su, SWEEP_PROMPT, SWEEP_TOKENS);
	double tps1 = 0, tps_top = 0;
	uint32_t top = 0;
	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		if (su->quick && ns[i] > 8)
			break;
		double tps = sweep_point(su, ns[i]);
		if (ns[i] == 1)
			tps1 = tps;
		if (ns[i] <= 16) {
			tps_top = tps;
			top = ns[i];
		}
	}
	finish_daemon();
	printf("serve_tps_c%u_over_c1=%.2f\n", top, tps_top / tps1);
	fflush(stdout);
}

/* ------------------------------------------------------------------------------------------ */
/* Scenario 2: a long prompt arrives while 16 sequences decode                                 */
/* ------------------------------------------------------------------------------------------ */

#define LP_DECODERS 16
#define LP_SHORT_PROMPT 16
#define LP_DECODE_TOKENS 400
#define LP_STEADY_TOKENS 10 /* every decoder has this many: the long prompt goes in */
#define LP_FIRST_ITL_TOKEN 5 /* "before" gaps start at the 5th token (index 4) */

struct lp_arg {
	struct board *b;
	struct trace *tr; /* [LP_DECODERS] decoders, then the long prompt */
	uint32_t vocab, long_prompt;
};

static void lp_decoder(void *p)
{
	struct lp_arg *a = p;
	uint32_t prompt[LP_SHORT_PROMPT];
	tokens_for(5000 + (uint32_t)client_id, a->vocab, prompt, LP_SHORT_PROMPT);
	struct bn_client *c = client_start(a->b, 1);
	trace_request(c, prompt, LP_SHORT_PROMPT, LP_DECODE_TOKENS, &a->tr[client_id], &a->b->stop);
	bn_disconnect(c);
}

static void lp_long(void *p)
{
	struct lp_arg *a = p;
	uint32_t *prompt = malloc(a->long_prompt * sizeof(uint32_t));
	if (!prompt)
		client_fail("out of memory");
	tokens_for(6000, a->vocab, prompt, a->long_prompt);
	struct bn_client *c = client_start(a->b, 1);
	int64_t t0 = now_ns();
	for (int steady = 0; !steady;) {
		steady = 1;
		for (uint32_t i = 0; i < LP_DECODERS; i++)
			/* Acquire pairs with the decoder's release of n_tokens. */
			if (__atomic_load_n(&a->tr[i].n_tokens, __ATOMIC_ACQUIRE) < LP_STEADY_TOKENS)
				steady = 0;
		if (!steady && now_ns() - t0 > WAIT_NS)
			client_fail("decoders did not reach %d tokens", LP_STEADY_TOKENS);
		if (!steady)
			sleep_ms(1);
	}
	trace_request(c, prompt, a->long_prompt, 1, &a->tr[LP_DECODERS], NULL);
	/* Release: decoders that see stop cancel; their traces are complete either way. */
	__atomic_store_n(&a->b->stop, 1, __ATOMIC_RELEASE);
	bn_disconnect(c);
	free(prompt);
}

static void run_longprompt(struct setup *su)
{
	static const char *const flags[] = { NULL };
	uint32_t long_prompt = su->quick ? 512 : 2048;
	print_flags("longprompt", flags);
	start_daemon(su, flags);
	check_capacity(su, long_prompt, 1);
	check_capacity(su, LP_SHORT_PROMPT, LP_DECODE_TOKENS);
	arena_used = 0;
	struct board *b = shared_alloc(sizeof(*b));
	struct lp_arg a = { .b = b, .tr = traces_new(LP_DECODERS + 1, LP_DECODE_TOKENS),
			    .vocab = su->info.vocab_size, .long_prompt = long_prompt };
	barrier_open();
	for (uint32_t i = 0; i < LP_DECODERS; i++)
		spawn(lp_decoder, &a, (int)i);
	spawn(lp_long, &a, LP_DECODERS);
	barrier_release(b, LP_DECODERS + 1);
	reap(-1);
	finish_daemon();

	const struct trace *lt = &a.tr[LP_DECODERS];
	int64_t t_submit = lt->submit_ns, t_token = lt->t_ns[0];
	struct samples before = { 0 }, during = { 0 };
	uint32_t coalesced = 0;
	for (uint32_t i = 0; i < LP_DECODERS; i++) {
		coalesced += add_itls(&a.tr[i], LP_FIRST_ITL_TOKEN, INT64_MIN, t_submit, &before);
		coalesced += add_itls(&a.tr[i], 1, t_submit, t_token, &during);
	}
	printf("longprompt_prompt_tokens=%u\n", long_prompt);
	printf("longprompt_prefill_s=%.2f\n", (double)(t_token - t_submit) / 1e9);
	double med = pct_ms(&before, 50), p99_during = pct_ms(&during, 99);
	printf("longprompt_itl_samples_before=%zu\nlongprompt_itl_samples_during=%zu\n", before.n,
	       during.n);
	printf("longprompt_itl_median_ms_before=%.1f\n", med);
	printf("longprompt_itl_p99_ms_before=%.1f\n", pct_ms(&before, 99));
	printf("longprompt_itl_median_ms_during=%.1f\n", pct_ms(&during, 50));
	printf("longprompt_itl_p99_ms_during=%.1f\n", p99_during);
	/* The same gaps in the first and the last quarter of the window: a chunk's attention
	 * reads the whole prompt before it, so later chunks cost more. */
	struct samples q1 = { 0 }, q4 = { 0 };
	int64_t quarter = (t_token - t_submit) / 4;
	for (uint32_t i = 0; i < LP_DECODERS; i++) {
		add_itls(&a.tr[i], 1, t_submit, t_submit + quarter, &q1);
		add_itls(&a.tr[i], 1, t_token - quarter, t_token, &q4);
	}
	printf("longprompt_itl_median_ms_during_q1=%.1f\n", pct_ms(&q1, 50));
	printf("longprompt_itl_median_ms_during_q4=%.1f\n", pct_ms(&q4, 50));
	samples_free(&q1);
	samples_free(&q4);
	printf("longprompt_itl_p99_during_over_median_before=%.2f\n", p99_during / med);
	printf("coalesced_tokens_longprompt=%u\n", coalesced);
	fflush(stdout);
	int empty = before.n == 0 || during.n == 0;
	samples_free(&before);
	samples_free(&during);
	if (empty)
		die("a long-prompt window holds no ITL samples");
}

/* ------------------------------------------------------------------------------------------ */
/* Scenario 3: a flooding client and a light one                                               */
/* ------------------------------------------------------------------------------------------ */

struct flood_arg {
	struct board *b;
	struct trace *light; /* [n_light] */
	uint32_t n_light, vocab;
	int after_flood;     /* light: start once the flood has finished a request */
};

static void light_client(void *p)
{
	struct flood_arg *a = p;
	uint32_t prompt[LIGHT_SHAPE];
	struct bn_client *c = client_start(a->b, 1);
	int64_t t0 = now_ns();
	/* Acquire pairs with the flooding client's release of flood_done. */
	while (a->after_flood && __atomic_load_n(&a->b->flood_done, __ATOMIC_ACQUIRE) == 0) {
		if (now_ns() - t0 > WAIT_NS)
			client_fail("the flood finished no request in 300 s");
		sleep_ms(1);
	}
	for (uint32_t r = 0; r < a->n_light; r++) {
		tokens_for(7000 + r + (a->after_flood ? 100 : 0), a->vocab, prompt, LIGHT_SHAPE);
		trace_request(c, prompt, LIGHT_SHAPE, LIGHT_SHAPE, &a->light[r], NULL);
	}
	bn_disconnect(c);
}

/* Keeps FLOOD_IN_FLIGHT requests in flight until stop: waits on the oldest (same shapes,
 * admitted in order, so it normally ends first) and resubmits in its slot. */
static void flood_client(void *p)
{
	struct flood_arg *a = p;
	struct bn_handle *h[FLOOD_IN_FLIGHT];
	uint32_t prompts[FLOOD_IN_FLIGHT][LIGHT_SHAPE], seed = 8000000;
	struct bn_client *c = client_start(a->b, FLOOD_IN_FLIGHT);
	struct bn_request req = { .n_prompt = LIGHT_SHAPE, .max_tokens = LIGHT_SHAPE,
				  .flags = BN_REQ_IGNORE_EOS };
	for (uint32_t i = 0; i < FLOOD_IN_FLIGHT; i++) {
		tokens_for(seed++, a->vocab, prompts[i], LIGHT_SHAPE);
		req.prompt = prompts[i];
		int rc = bn_submit(c, &req, &h[i]);
		if (rc < 0)
			client_fail("flood bn_submit: %s", bn_strerror(rc));
	}
	int64_t last_end = now_ns();
	for (uint32_t i = 0;; i = (i + 1) % FLOOD_IN_FLIGHT) {
		int rc;
		/* Acquire pairs with the parent's release of stop. */
		while ((rc = bn_wait(h[i], 100000000)) == -BN_E_TIMEOUT) {
			if (__atomic_load_n(&a->b->stop, __ATOMIC_ACQUIRE))
				goto out;
			if (now_ns() - last_end > WAIT_NS)
				client_fail("flood: no request ended in 300 s");
		}
		if (rc < 0)
			client_fail("flood bn_wait: %s", bn_strerror(rc));
		struct bn_result res;
		bn_result(h[i], &res);
		if (res.status != BN_STATUS_LENGTH || res.n_tokens != LIGHT_SHAPE)
			client_fail("flood request ended with %s (%s) after %u tokens",
				    bn_status_name(res.status), bn_strerror(res.error), res.n_tokens);
		bn_release(h[i]);
		last_end = now_ns();
		__atomic_fetch_add(&a->b->flood_done, 1, __ATOMIC_RELEASE);
		if (__atomic_load_n(&a->b->stop, __ATOMIC_ACQUIRE)) {
			h[i] = NULL;
			goto out;
		}
		tokens_for(seed++, a->vocab, prompts[i], LIGHT_SHAPE);
		req.prompt = prompts[i];
		rc = bn_submit(c, &req, &h[i]);
		if (rc < 0)
			client_fail("flood bn_submit: %s", bn_strerror(rc));
	}
out:
	for (uint32_t i = 0; i < FLOOD_IN_FLIGHT; i++)
		if (h[i])
			bn_release(h[i]); /* cancels what still runs */
	bn_disconnect(c);
}

/* Median of submit to done (ttft 0) or submit to first token (ttft 1). */
static double light_median_ms(const struct trace *t, uint32_t n, int ttft)
{
	struct samples s = { 0 };
	for (uint32_t i = 0; i < n; i++)
		samples_add(&s, (ttft ? t[i].t_ns[0] : t[i].done_ns) - t[i].submit_ns);
	double m = pct_ms(&s, 50);
	samples_free(&s);
	return m;
}

static void run_flood(struct setup *su, const char *suffix, const char *const *flags)
{
	char name[32];
	snprintf(name, sizeof(name), "flood%s", suffix);
	print_flags(name, flags);
	start_daemon(su, flags);
	check_capacity(su, LIGHT_SHAPE, LIGHT_SHAPE);
	uint32_t n_light = su->quick ? 3 : 9;
	arena_used = 0;
	struct board *b = shared_alloc(sizeof(*b));
	struct flood_arg a = { .b = b, .light = traces_new(n_light, LIGHT_SHAPE),
			       .n_light = n_light, .vocab = su->info.vocab_size };
	barrier_open();
	spawn(light_client, &a, 0);
	barrier_release(b, 1);
	reap(-1);
	double solo = light_median_ms(a.light, n_light, 0);
	double solo_ttft = light_median_ms(a.light, n_light, 1);

	b = shared_alloc(sizeof(*b));
	a.b = b;
	a.light = traces_new(n_light, LIGHT_SHAPE);
	a.after_flood = 1;
	barrier_open();
	pid_t light = spawn(light_client, &a, 0);
	spawn(flood_client, &a, 1);
	barrier_release(b, 2);
	reap(light);
	/* Release: the flooding client sees stop on its next wake-up and cancels the rest. */
	__atomic_store_n(&b->stop, 1, __ATOMIC_RELEASE);
	uint32_t flood_done = __atomic_load_n(&b->flood_done, __ATOMIC_ACQUIRE);
	reap(-1);
	finish_daemon();
	double loaded = light_median_ms(a.light, n_light, 0);
	printf("flood_light_requests%s=%u\n", suffix, n_light);
	printf("flood_light_solo_median_ms%s=%.1f\n", suffix, solo);
	printf("flood_light_median_ms%s=%.1f\n", suffix, loaded);
	printf("flood_light_over_solo%s=%.2f\n", suffix, loaded / solo);
	printf("flood_light_solo_ttft_median_ms%s=%.1f\n", suffix, solo_ttft);
	printf("flood_light_ttft_median_ms%s=%.1f\n", suffix, light_median_ms(a.light, n_light, 1));
	printf("flood_requests_done%s=%u\n", suffix, flood_done);
	fflush(stdout);
}

/* ------------------------------------------------------------------------------------------ */
/* Scenario 4: multi-turn chats sharing a system prompt, prefix cache on and off               */
/* ------------------------------------------------------------------------------------------ */

#define CHAT_CLIENTS 8
#define CHAT_TURNS 6
#define CHAT_SYSTEM 512
#define CHAT_USER 64
#define CHAT_REPLY 32
#define CHAT_MAX (CHAT_SYSTEM + CHAT_TURNS * (CHAT_USER + CHAT_REPLY))

struct chat_arg {
	struct board *b;
	struct trace *tr; /* [clients][turns] */
	uint32_t vocab, clients, turns;
};

/* One conversation: the shared system prompt, then per turn the user's tokens and the reply,
 * the whole conversation sent again each turn (as chat clients do). */
static void chat_client(void *p)
{
	struct chat_arg *a = p;
	static uint32_t conv[CHAT_MAX];
	tokens_for(4242, a->vocab, conv, CHAT_SYSTEM);
	uint32_t n = CHAT_SYSTEM;
	struct bn_client *c = client_start(a->b, 1);
	for (uint32_t t = 0; t < a->turns; t++) {
		tokens_for(5000 + 100 * (uint32_t)client_id + t, a->vocab, conv + n, CHAT_USER);
		n += CHAT_USER;
		trace_request_into(c, conv, n, CHAT_REPLY, &a->tr[(uint32_t)client_id * a->turns + t],
				   NULL, conv + n);
		n += CHAT_REPLY;
	}
	bn_disconnect(c);
}

struct chat_result {
	double ttft_p50_ms, last_turn_ttft_p50_ms, total_s, hit_ratio;
};

static double daemon_metric(const char *name)
{
	struct bn_client *c;
	static char text[1 << 20];
	if (bn_connect(sock_path, 1, &c) < 0)
		die("cannot read the daemon's stats");
	long len = bn_daemon_stats(c, text, sizeof(text));
	bn_disconnect(c);
	char line[128];
	snprintf(line, sizeof(line), "\n%s ", name); /* the sample, not its # HELP line */
	const char *at = len > 0 ? strstr(text, line) : NULL;
	return at ? strtod(at + strlen(line), NULL) : -1;
}

static struct chat_result chat_run(struct setup *su, const char *mode)
{
	const char *flags[] = { "--prefix-cache", mode, NULL };
	char name[32];
	snprintf(name, sizeof(name), "chat_%s", mode);
	print_flags(name, flags);
	start_daemon(su, flags);
	uint32_t clients = su->quick ? 2 : CHAT_CLIENTS, turns = su->quick ? 3 : CHAT_TURNS;
	check_capacity(su, CHAT_MAX, CHAT_REPLY);
	arena_used = 0;
	struct board *b = shared_alloc(sizeof(*b));
	struct chat_arg a = { .b = b, .tr = traces_new(clients * turns, CHAT_REPLY),
			      .vocab = su->info.vocab_size, .clients = clients, .turns = turns };
	barrier_open();
	for (uint32_t i = 0; i < clients; i++)
		spawn(chat_client, &a, (int)i);
	barrier_release(b, clients);
	reap(-1);
	struct chat_result r = { .hit_ratio = daemon_metric("bitnetd_prefix_cache_hit_ratio") };
	finish_daemon();
	struct samples all = { 0 }, last = { 0 };
	int64_t first = INT64_MAX, end = 0;
	for (uint32_t i = 0; i < clients * turns; i++) {
		const struct trace *t = &a.tr[i];
		samples_add(&all, t->t_ns[0] - t->submit_ns);
		if (i % turns == turns - 1)
			samples_add(&last, t->t_ns[0] - t->submit_ns);
		first = t->submit_ns < first ? t->submit_ns : first;
		end = t->done_ns > end ? t->done_ns : end;
	}
	r.ttft_p50_ms = pct_ms(&all, 50);
	r.last_turn_ttft_p50_ms = pct_ms(&last, 50);
	r.total_s = (double)(end - first) / 1e9;
	samples_free(&all);
	samples_free(&last);
	printf("chat_ttft_p50_ms_%s=%.0f\nchat_ttft_p50_ms_turn%u_%s=%.0f\nchat_total_s_%s=%.1f\n"
	       "prefix_cache_hit_ratio_%s=%.3f\n",
	       mode, r.ttft_p50_ms, turns, mode, r.last_turn_ttft_p50_ms, mode, r.total_s, mode,
	       r.hit_ratio);
	fflush(stdout);
	return r;
}

static void run_chat(struct setup *su)
{
	struct chat_result on = chat_run(su, "uid"), off = chat_run(su, "off");
	printf("prefix_cache_ttft_speedup=%.2f\nprefix_cache_ttft_speedup_last_turn=%.2f\n"
	       "prefix_cache_total_speedup=%.2f\n",
	       off.ttft_p50_ms / on.ttft_p50_ms, off.last_turn_ttft_p50_ms / on.last_turn_ttft_p50_ms,
	       off.total_s / on.total_s);
	fflush(stdout);
}

/* ------------------------------------------------------------------------------------------ */

static const char usage[] =
	"usage: bench-serve [--model FILE.gguf] [--quick] [--only sweep|longprompt|flood|chat]\n"
	"                   [--lm-head MODE] [--backend cpu|cuda] [--device DEV]\n"
	"  starts $BITNETD (default build/bitnetd) for each scenario\n"
	"  --model    the 2B4T-shape model (default build/models/2b4t-i2_s.gguf)\n"
	"  --lm-head  passed to every daemon (bitnetd(8); default: the daemon's)\n"
	"  --backend  the daemons' backend (default cpu)\n"
	"  --device   the daemons' --device (e.g. cuda:0; default: the daemon's)\n"
	"  --quick    a smoke run: N up to 8, a 512-token long prompt, 3 light requests\n"
	"  --only     run one scenario\n";

int main(int argc, char **argv)
{
	struct setup su = { .daemon = getenv("BITNETD"), .model = "build/models/2b4t-i2_s.gguf",
			    .backend = "cpu" };
	const char *only = NULL;
	if (!su.daemon || !su.daemon[0])
		su.daemon = "build/bitnetd";
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
			su.model = argv[++i];
		else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
			only = argv[++i];
		else if (strcmp(argv[i], "--quick") == 0)
			su.quick = 1;
		else if (strcmp(argv[i], "--lm-head") == 0 && i + 1 < argc)
			su.lm_head = argv[++i];
		else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc)
			su.backend = argv[++i];
		else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
			su.device = argv[++i];
		else
			return fputs(usage, stderr), 2;
	}
	if (only && strcmp(only, "sweep") && strcmp(only, "longprompt") && strcmp(only, "flood") &&
	    strcmp(only, "chat"))
		return fputs(usage, stderr), 2;
	if (access(su.daemon, X_OK) != 0)
		return fprintf(stderr, "bench-serve: %s: %s (set BITNETD)\n", su.daemon,
			       strerror(errno)), 1;
	if (access(su.model, R_OK) != 0)
		return fprintf(stderr, "bench-serve: %s: %s (make bench-serve makes it)\n", su.model,
			       strerror(errno)), 1;

	parent_pid = getpid();
	arena = mmap(NULL, arena_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (arena == MAP_FAILED)
		return fprintf(stderr, "bench-serve: mmap: %s\n", strerror(errno)), 1;
	snprintf(sock_path, sizeof(sock_path), "/tmp/bench-serve-%d.sock", (int)parent_pid);
	snprintf(log_path, sizeof(log_path), "/tmp/bench-serve-%d-XXXXXX", (int)parent_pid);
	int log_fd = mkstemp(log_path);
	if (log_fd < 0) {
		log_path[0] = 0;
		return fprintf(stderr, "bench-serve: mkstemp: %s\n", strerror(errno)), 1;
	}
	close(log_fd);
	atexit(cleanup);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	signal(SIGPIPE, SIG_IGN);

	printf("threads=%ld\n", sysconf(_SC_NPROCESSORS_ONLN)); /* bitnetd's default: one per CPU */
	printf("model_file=%s\n", su.model);
	printf("daemon_common_flags=\"--backend %s --model %s --log-level warn%s%s%s%s\"\n",
	       su.backend, su.model, su.lm_head ? " --lm-head " : "", su.lm_head ? su.lm_head : "",
	       su.device ? " --device " : "", su.device ? su.device : "");
	printf("quick=%d\n", su.quick);
	fflush(stdout);
	int64_t t0 = now_ns();
	if (!only || strcmp(only, "sweep") == 0)
		run_sweep(&su);
	if (!only || strcmp(only, "longprompt") == 0)
		run_longprompt(&su);
	if (!only || strcmp(only, "flood") == 0) {
		static const char *const cap1[] = { "--max-running-per-session", "1", NULL };
		static const char *const cap2[] = { "--max-running-per-session", "2", NULL };
		static const char *const none[] = { NULL };
		run_flood(&su, "", cap1);
		run_flood(&su, "_cap2", cap2);
		run_flood(&su, "_nocap", none);
	}
	if (!only || strcmp(only, "chat") == 0)
		run_chat(&su);
	printf("bench_wall_s=%.0f\n", (double)(now_ns() - t0) / 1e9);
	return 0;
}
