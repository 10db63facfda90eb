/* SPDX-License-Identifier: MIT */
/*
 * test_hostile — one hostile session must hurt nobody but itself.
 *
 * For every bn-hostile mode: a fresh daemon, two honest clients (child processes, every token
 * checked against the loopback oracle) working while bn-hostile misbehaves, then the checks:
 * the hostile tool saw what the protocol promises (result=closed or open, the slot's status),
 * both honest clients got every token right, the daemon still serves a new client, its
 * protocol-violation counter moved exactly when the session broke the protocol, and it stops
 * cleanly on SIGTERM.
 *
 * Environment: BITNETD (daemon, default build/bitnetd), BN_HOSTILE (default
 * build/tests/bn-hostile). Runs in Check's fork mode: when a test fails or times out, Check
 * kills the test's process group, which holds the daemon and the clients it started.
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "testutil.h"

#include "ckassert.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define HONEST_CLIENTS 2
#define HONEST_REQUESTS 300
#define HONEST_WARMUP 10     /* requests an honest client completes before the attack */
#define HONEST_PROMPT_CAP 64
#define HONEST_OUT_CAP 64
#define SEC 1000000000LL
/* Waits, scaled (tests/timescale.h) */
#define REQUEST_TIMEOUT_NS tu_scaled_ns(20 * SEC)
#define HOSTILE_TIMEOUT_NS tu_scaled_ns(30 * SEC) /* bn-hostile ends itself within ~15 s, scaled */
#define CHILD_TIMEOUT_NS tu_scaled_ns(40 * SEC)
#define TEST_TIMEOUT_S 60
#define OUTPUT_BYTES 8192
#define STATS_BYTES (64 * 1024)

/* What one mode must produce. */
struct hostile_case {
	const char *mode;
	const char *const *daemon_args;
	const char *result;        /* "closed", "open", or NULL: either, see violations */
	int violations;            /* protocol_violations_total after; -1: 1 if closed, else 0 */
	const char *facts[6];      /* "key=value" lines bn-hostile must print */
	const char *metric;        /* a counter that must reach metric_min, or NULL */
	long long metric_min;
};

/* Long enough that a 4000-token request is still running when it is queued again. */
static const char *const slow_steps[] = { "--step-delay-us", "200", NULL };

#define CLOSES(m) { .mode = (m), .result = "closed", .violations = 1 }

static const struct hostile_case cases[] = {
	CLOSES("tail-ahead"),
	CLOSES("tail-wild"),
	CLOSES("bad-slot"),
	CLOSES("sqe-reserved"),
	{ .mode = "double-submit", .daemon_args = slow_steps, .result = "closed", .violations = 1,
	  .facts = { "slot0_running=1", "slot0_state=2", "slot0_status=4", "slot0_error=1008" },
	  .metric = "bitnetd_request_errors_total{reason=\"protocol\"}", .metric_min = 1 },
	{ .mode = "double-queue", .result = "closed", .violations = 1,
	  .facts = { "slot0_state=2", "slot0_status=4", "slot0_error=1008", "slot0_tokens=0" },
	  .metric = "bitnetd_request_errors_total{reason=\"protocol\"}", .metric_min = 1 },
	{ .mode = "huge-lengths", .result = "open", .violations = 0,
	  .facts = { "slot0_state=2", "slot0_status=4", "slot0_error=1003", "slot0_tokens=0" },
	  .metric = "bitnetd_request_errors_total{reason=\"too_long\"}", .metric_min = 1 },
	{ .mode = "bad-tokens", .result = "open", .violations = 0,
	  .facts = { "slot0_state=2", "slot0_status=4", "slot0_error=1002", "slot0_tokens=0" },
	  .metric = "bitnetd_request_errors_total{reason=\"token\"}", .metric_min = 1 },
	{ .mode = "bad-op", .result = "open", .violations = 0,
	  .facts = { "slot0_state=2", "slot0_status=4", "slot0_error=1016", "slot0_tokens=0" },
	  .metric = "bitnetd_request_errors_total{reason=\"unsupported\"}", .metric_min = 1 },
	{ .mode = "reserved-request", .result = "open", .violations = 0,
	  .facts = { "slot0_state=2", "slot0_status=4", "slot0_error=1001", "slot0_tokens=0" },
	  .metric = "bitnetd_request_errors_total{reason=\"invalid\"}", .metric_min = 1 },
	{ .mode = "flip", .result = "open", .violations = 0, .facts = { "bad=0", "timeouts=0" } },
	{ .mode = "garbage", .result = NULL, .violations = -1 },
	{ .mode = "bad-hello", .result = "closed", .violations = 0,
	  .facts = { "welcome_error=1008", "version_error=1009", "flags_error=1008",
		     "reserved_error=1008" },
	  .metric = "bitnetd_sessions_refused_total", .metric_min = 4 },
	{ .mode = "no-hello", .result = "closed", .violations = 0, .facts = { "welcome_error=1007" },
	  .metric = "bitnetd_connections_refused_total{reason=\"hello_timeout\"}", .metric_min = 1 },
	{ .mode = "ctl-garbage", .result = "closed", .violations = 1,
	  .facts = { "stats_reply=ok", "unknown_op_error=1001", "after_unknown_op=open" } },
};

#define N_CASES (sizeof(cases) / sizeof(cases[0]))

/* ------------------------------------------------------------------------------------------ */
/* Honest clients                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* One request through the library, every token compared with the oracle. */
static int honest_one(struct bn_client *c, const struct bn_model_info *mi, uint32_t id,
		      uint32_t i)
{
	uint32_t prompt[HONEST_PROMPT_CAP], out[HONEST_OUT_CAP], want[HONEST_OUT_CAP], status;
	struct bn_request req = { .prompt = prompt,
				  .n_prompt = tu_prompt(id, i, prompt, HONEST_PROMPT_CAP),
				  .max_tokens = 1 + i % 32,
				  .flags = i % 5 == 0 ? BN_REQ_IGNORE_EOS : 0 };
	struct bn_result res;
	int rc = bn_generate(c, &req, out, HONEST_OUT_CAP, &res, REQUEST_TIMEOUT_NS);
	uint32_t n = tu_loopback(prompt, req.n_prompt, req.max_tokens, req.flags, mi->vocab_size,
				 mi->eos_id, want, &status);
	if (rc == 0 && res.status == status && res.n_tokens == n &&
	    memcmp(out, want, n * sizeof(uint32_t)) == 0)
		return 0;
	fprintf(stderr, "honest client %u request %u: rc=%s status=%u/%u tokens=%u/%u\n", id, i,
		bn_strerror(rc), res.status, status, res.n_tokens, n);
	return -1;
}

/* The body of an honest child process: exit status 0 iff every token was right. It writes
 * one byte to ready_fd once its session works, so the attack meets a busy daemon. */
static int honest_run(const char *path, uint32_t id, int ready_fd)
{
	struct bn_client *c;
	struct bn_model_info mi;
	if (bn_connect(path, 4, &c) < 0)
		return 1;
	int rc = bn_model_info(c, &mi) < 0;
	for (uint32_t i = 0; !rc && i < HONEST_REQUESTS; i++) {
		rc = honest_one(c, &mi, id, i) < 0;
		if (i == HONEST_WARMUP)
			(void)!write(ready_fd, "r", 1);
	}
	bn_disconnect(c);
	return rc;
}

static pid_t honest_start(const char *path, uint32_t id, int ready_fd)
{
	pid_t pid = fork();
	if (pid == 0)
		_exit(honest_run(path, id, ready_fd));
	return pid;
}

/* Until every honest client is past its warm-up (or failed: then its end closes the pipe). */
static void honest_wait_ready(int ready_fd, int64_t deadline)
{
	char b[HONEST_CLIENTS];
	size_t got = 0;
	while (got < sizeof(b)) {
		int64_t left_ms = (deadline - tu_now_ns()) / 1000000;
		struct pollfd p = { .fd = ready_fd, .events = POLLIN };
		if (left_ms <= 0 || poll(&p, 1, (int)left_ms) <= 0)
			return;
		ssize_t n = read(ready_fd, b + got, sizeof(b) - got);
		if (n <= 0)
			return;
		got += (size_t)n;
	}
}

/* Waits for a child until the deadline, then kills it. Returns its exit status, or -1. */
static int child_wait(pid_t pid, int64_t deadline)
{
	int status;
	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
		if (r < 0 || tu_now_ns() >= deadline)
			break;
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* bn-hostile                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* Reads the child's stdout until EOF or the deadline; keeps at most cap - 1 bytes and
 * drains the rest, so the child never blocks on a full pipe. */
static void read_all(int fd, char *out, size_t cap, int64_t deadline)
{
	size_t len = 0;
	for (;;) {
		int64_t left_ms = (deadline - tu_now_ns()) / 1000000;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (left_ms <= 0 || poll(&p, 1, (int)left_ms) <= 0)
			break;
		char junk[256];
		int full = len + 1 >= cap;
		ssize_t n = full ? read(fd, junk, sizeof(junk)) : read(fd, out + len, cap - 1 - len);
		if (n == 0 || (n < 0 && errno != EINTR))
			break;
		if (n > 0 && !full)
			len += (size_t)n;
	}
	out[len] = '\0';
}

/* Runs bn-hostile in one mode; its stdout goes to out. Returns its exit status, or -1. */
static int hostile_run(const char *socket_path, const char *mode, char *out, size_t cap)
{
	const char *bin = getenv("BN_HOSTILE");
	if (!bin || !*bin)
		bin = "build/tests/bn-hostile";
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(p[1], STDOUT_FILENO);
		execl(bin, bin, "--socket", socket_path, "--mode", mode, (char *)NULL);
		fprintf(stderr, "cannot run %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	close(p[1]);
	int64_t deadline = tu_now_ns() + HOSTILE_TIMEOUT_NS;
	if (pid > 0)
		read_all(p[0], out, cap, deadline);
	close(p[0]);
	return pid > 0 ? child_wait(pid, deadline) : -1;
}

/* Whether the output holds the line exactly. */
static int has_line(const char *out, const char *line)
{
	size_t len = strlen(line);
	for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, line, len) == 0 && (p[len] == '\n' || p[len] == '\0'))
			return 1;
	return 0;
}

/* The value of "key=value" as a number, or -1. */
static long long fact_num(const char *out, const char *key)
{
	size_t len = strlen(key);
	for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, key, len) == 0 && p[len] == '=')
			return strtoll(p + len + 1, NULL, 10);
	return -1;
}

/* One line for the log: the facts separated by spaces. */
static void log_output(const char *out)
{
	printf("  ");
	for (const char *p = out; *p; p++)
		putchar(*p == '\n' ? ' ' : *p);
	putchar('\n');
	fflush(stdout);
}

/* ------------------------------------------------------------------------------------------ */
/* The daemon afterwards                                                                       */
/* ------------------------------------------------------------------------------------------ */

/* Alive (not a zombie), serves a new client correctly, and hands out its metrics. */
static void check_daemon_serves(const struct tu_daemon *d, char *stats, size_t cap)
{
	struct bn_client *c;
	struct bn_model_info mi;
	ck_assert_msg(kill(d->pid, 0) == 0 && waitpid(d->pid, NULL, WNOHANG) == 0,
		      "the daemon died");
	ck_assert_int_eq(bn_connect(d->socket_path, 1, &c), 0);
	ck_assert_int_eq(bn_model_info(c, &mi), 0);
	ck_assert_msg(honest_one(c, &mi, 99, 7) == 0, "a new client after the attack failed");
	ck_assert_int_gt(bn_daemon_stats(c, stats, cap), 0);
	bn_disconnect(c);
}

static void check_output(const struct hostile_case *k, const char *out)
{
	ck_assert_msg(has_line(out, "result=open") || has_line(out, "result=closed"),
		      "%s: no result line in: %s", k->mode, out);
	if (k->result) {
		char want[32];
		snprintf(want, sizeof(want), "result=%s", k->result);
		ck_assert_msg(has_line(out, want), "%s: expected %s, got: %s", k->mode, want, out);
	}
	for (size_t i = 0; i < sizeof(k->facts) / sizeof(k->facts[0]) && k->facts[i]; i++)
		ck_assert_msg(has_line(out, k->facts[i]), "%s: expected %s, got: %s", k->mode,
			      k->facts[i], out);
}

/* Mode facts that are not fixed lines. */
static void check_mode_specifics(const struct hostile_case *k, const char *out)
{
	if (strcmp(k->mode, "flip") == 0) {
		long long done = fact_num(out, "completions");
		ck_assert_msg(done > 0 && done == fact_num(out, "iterations"),
			      "flip: every round must complete: %s", out);
		ck_assert_msg(fact_num(out, "ok") > 0 && fact_num(out, "errors") > 0,
			      "flip: both valid and invalid snapshots expected: %s", out);
	}
	if (strcmp(k->mode, "garbage") == 0) {
		ck_assert_msg(fact_num(out, "request_rounds") > 0, "garbage: no request ran: %s", out);
		/* Only terminal statuses 1..4 may appear; status0 would be DONE without one. */
		ck_assert_msg(fact_num(out, "status0") == -1 && fact_num(out, "status5") == -1 &&
				      fact_num(out, "status6") == -1 && fact_num(out, "status7") == -1,
			      "garbage: a completion without a valid terminal status: %s", out);
	}
}

static void check_metrics(const struct hostile_case *k, const char *out, const char *stats)
{
	long long want = k->violations;
	if (want < 0)
		want = has_line(out, "result=closed") ? 1 : 0;
	long long got = tu_metric(stats, "bitnetd_protocol_violations_total");
	ck_assert_msg(got == want, "%s: protocol_violations_total %lld, expected %lld", k->mode,
		      got, want);
	if (k->metric)
		ck_assert_msg(tu_metric(stats, k->metric) >= k->metric_min, "%s: %s is %lld",
			      k->mode, k->metric, tu_metric(stats, k->metric));
}

/* ------------------------------------------------------------------------------------------ */
/* The test                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* What the running test started. In fork mode Check kills the test's process group when an
 * assertion fails; without fork (CK_FORK=no) this teardown is what stops them. */
static struct tu_daemon bitnetd;
static pid_t honest_pids[HONEST_CLIENTS];

static void teardown(void)
{
	for (uint32_t i = 0; i < HONEST_CLIENTS; i++) {
		if (honest_pids[i] > 0) {
			kill(honest_pids[i], SIGKILL);
			waitpid(honest_pids[i], NULL, 0);
		}
		honest_pids[i] = 0;
	}
	if (bitnetd.pid > 0) {
		kill(bitnetd.pid, SIGKILL);
		waitpid(bitnetd.pid, NULL, 0);
		unlink(bitnetd.socket_path);
	}
	bitnetd.pid = 0;
}

/* A fresh daemon and honest clients that are past their warm-up. */
static void start_daemon_and_clients(const struct hostile_case *k)
{
	int ready[2];
	ck_assert_msg(tu_daemon_start(&bitnetd, k->daemon_args) == 0, "%s: daemon did not start",
		      k->mode);
	ck_assert_int_eq(pipe2(ready, O_CLOEXEC), 0);
	for (uint32_t i = 0; i < HONEST_CLIENTS; i++) {
		honest_pids[i] = honest_start(bitnetd.socket_path, i + 1, ready[1]);
		ck_assert_int_gt(honest_pids[i], 0);
	}
	close(ready[1]);
	honest_wait_ready(ready[0], tu_now_ns() + CHILD_TIMEOUT_NS);
	close(ready[0]);
}

static void check_honest_clients(const struct hostile_case *k)
{
	int64_t deadline = tu_now_ns() + CHILD_TIMEOUT_NS;
	for (uint32_t i = 0; i < HONEST_CLIENTS; i++) {
		int status = child_wait(honest_pids[i], deadline);
		honest_pids[i] = 0; /* reaped */
		ck_assert_msg(status == 0, "%s: honest client %u got a wrong answer or failed",
			      k->mode, i + 1);
	}
}

START_TEST(test_mode)
{
	const struct hostile_case *k = &cases[_i];
	static char out[OUTPUT_BYTES], stats[STATS_BYTES];
	start_daemon_and_clients(k);
	int rc = hostile_run(bitnetd.socket_path, k->mode, out, sizeof(out));
	log_output(out);
	ck_assert_msg(rc == 0, "%s: bn-hostile exited %d: %s", k->mode, rc, out);
	check_output(k, out);
	check_mode_specifics(k, out);
	check_honest_clients(k);
	check_daemon_serves(&bitnetd, stats, sizeof(stats));
	check_metrics(k, out, stats);
	int status = tu_daemon_stop(&bitnetd, SIGTERM);
	bitnetd.pid = 0; /* reaped */
	ck_assert_msg(status == 0, "%s: daemon exited %d on SIGTERM", k->mode, status);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("hostile");
	/* One TCase per mode, so a failure (or a crash) is reported under the mode's name. */
	for (size_t i = 0; i < N_CASES; i++) {
		TCase *tc = tcase_create(cases[i].mode);
		tcase_set_timeout(tc, TEST_TIMEOUT_S);
		tcase_add_checked_fixture(tc, NULL, teardown);
		tcase_add_loop_test(tc, test_mode, (int)i, (int)i + 1);
		suite_add_tcase(s, tc);
	}
	return tu_run_suite(s);
}
