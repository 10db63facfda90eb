/* SPDX-License-Identifier: MIT */
/*
 * bitnet-cli bench — the transport benchmark. Prints key=value lines:
 *   rtt_hot_*      round trips back to back (the daemon is polling its rings)
 *   rtt_idle_*     round trips after the daemon has gone to sleep in io_uring
 *   uds_rtt_*      the same payload echoed over a Unix stream socket between two processes
 *   idle_over_uds_p50  rtt_idle_p50 / uds_rtt_p50: a sleeping daemon against a socket round trip
 *   rps_Nt         requests/s with N client threads, each keeping 64 requests in flight
 *   *_wakeups_per_req  wake-up system calls per request at 4 threads, each side
 *   daemon_idle_cpu_share, daemon_idle_wakeups_per_s  with --start-daemon: the daemon's CPU
 *                  time over --idle-cpu-s seconds of silence (one session open) over that time,
 *                  and how often its loop woke up meanwhile
 * Every figure comes from this one run, so ratios between them are meaningful.
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROMPT_TOKENS 16
#define IN_FLIGHT 64

struct bench_opts {
	const char *socket_path;
	const char *daemon_path;  /* start our own daemon when set */
	uint32_t hot_samples;
	uint32_t idle_samples;
	uint32_t idle_gap_us;
	uint32_t rps_ms;
	uint32_t spin_ns;
	uint32_t idle_cpu_s;      /* seconds of silence to measure the daemon's idle CPU over */
	pid_t daemon_pid;         /* our own daemon's, else 0 */
};

static const char bench_usage[] =
	"Usage: bitnet-cli [--socket PATH] bench [OPTIONS]\n"
	"Transport benchmark with a 16-token prompt and 1 generated token per request.\n"
	"\n"
	"Against a running daemon: give its socket (--socket, or $BITNETD_SOCKET). It must\n"
	"have --slots >= 1024 for the 16-thread figure (64 in flight per thread) and an\n"
	"--idle-spin-us below --idle-gap-us for the idle figures to mean 'asleep'.\n"
	"With its own daemon: --start-daemon PATH runs PATH (bitnetd) on a private socket\n"
	"with the loopback backend, --slots 1024, --max-batch 1024, and stops it at the end.\n"
	"\n"
	"  --start-daemon PATH   start and stop our own bitnetd\n"
	"  --hot-samples N       back-to-back round trips (default 20000)\n"
	"  --idle-samples N      round trips after the daemon slept (default 300)\n"
	"  --idle-gap-us N       pause before each idle round trip (default 2000)\n"
	"  --rps-ms N            duration of each throughput run (default 1000)\n"
	"  --spin-ns N           client spin before sleeping on the futex (default 100000)\n"
	"  --idle-cpu-s N        with --start-daemon: seconds of silence over which to measure\n"
	"                        the daemon's idle CPU (default 10; 0 skips it)\n";

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static int64_t percentile(int64_t *v, uint32_t n, double p)
{
	qsort(v, n, sizeof(*v), cmp_i64);
	uint32_t i = (uint32_t)(p * (n - 1) + 0.5);
	return v[i];
}

static void fill_prompt(uint32_t *p, uint32_t seed)
{
	for (uint32_t i = 0; i < PROMPT_TOKENS; i++)
		p[i] = (seed * 31u + i * 7u + 3u) % 30000u;
}

/* ------------------------------------------------------------------------------------------ */
/* Round-trip latency                                                                          */
/* ------------------------------------------------------------------------------------------ */

static int one_round_trip(struct bn_client *c, const uint32_t *prompt, int64_t *ns)
{
	struct bn_request req = { .prompt = prompt, .n_prompt = PROMPT_TOKENS, .max_tokens = 1,
				  .flags = BN_REQ_IGNORE_EOS };
	struct bn_handle *h;
	int64_t t0 = now_ns();
	int rc = bn_submit(c, &req, &h);
	if (rc < 0)
		return rc;
	rc = bn_wait(h, 5000000000);
	*ns = now_ns() - t0;
	bn_release(h);
	return rc;
}

/* Prints p50 and p99 of `samples` round trips; *p50 gets the median. */
static int measure_rtt(struct bn_client *c, const char *prefix, uint32_t samples, uint32_t gap_us,
		       int64_t *p50)
{
	int64_t *v = calloc(samples, sizeof(*v));
	uint32_t prompt[PROMPT_TOKENS];
	if (!v)
		return -ENOMEM;
	for (uint32_t i = 0; i < samples + samples / 10; i++) { /* the first tenth warms up */
		fill_prompt(prompt, i);
		if (gap_us)
			usleep(gap_us);
		int64_t ns;
		int rc = one_round_trip(c, prompt, &ns);
		if (rc < 0) {
			free(v);
			return rc;
		}
		if (i >= samples / 10)
			v[i - samples / 10] = ns;
	}
	*p50 = percentile(v, samples, 0.50);
	printf("%s_p50_ns=%" PRId64 "\n", prefix, *p50);
	printf("%s_p99_ns=%" PRId64 "\n", prefix, percentile(v, samples, 0.99));
	free(v);
	return 0;
}

/* The baseline: a 64-byte message echoed by another process over a Unix stream socket. */
static int64_t measure_uds(uint32_t samples)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return -errno;
	pid_t pid = fork();
	if (pid == 0) {
		char buf[64];
		close(sv[0]);
		while (read(sv[1], buf, sizeof(buf)) == (ssize_t)sizeof(buf))
			if (write(sv[1], buf, sizeof(buf)) != (ssize_t)sizeof(buf))
				break;
		_exit(0);
	}
	close(sv[1]);
	int64_t *v = calloc(samples, sizeof(*v));
	char buf[64] = { 0 };
	for (uint32_t i = 0; v && i < samples; i++) {
		int64_t t0 = now_ns();
		if (write(sv[0], buf, sizeof(buf)) != (ssize_t)sizeof(buf) ||
		    read(sv[0], buf, sizeof(buf)) != (ssize_t)sizeof(buf))
			break;
		v[i] = now_ns() - t0;
	}
	close(sv[0]);
	waitpid(pid, NULL, 0);
	if (!v)
		return -ENOMEM;
	int64_t p50 = percentile(v, samples, 0.50);
	printf("uds_rtt_p50_ns=%" PRId64 "\nuds_rtt_p99_ns=%" PRId64 "\n", p50,
	       percentile(v, samples, 0.99));
	free(v);
	return p50;
}

/* ------------------------------------------------------------------------------------------ */
/* Throughput                                                                                  */
/* ------------------------------------------------------------------------------------------ */

struct rps_worker {
	pthread_t thread;
	struct bn_client *c;
	int64_t until;
	uint64_t done;
	uint32_t seed;
	int error;
};

static void *rps_thread(void *arg)
{
	struct rps_worker *w = arg;
	struct bn_handle *ring[IN_FLIGHT];
	uint32_t prompt[PROMPT_TOKENS];
	struct bn_request req = { .prompt = prompt, .n_prompt = PROMPT_TOKENS, .max_tokens = 1,
				  .flags = BN_REQ_IGNORE_EOS };
	uint32_t head = 0, count = 0;
	int stop = 0;
	while (!stop || count) {
		while (!stop && count < IN_FLIGHT) {
			fill_prompt(prompt, w->seed++);
			int rc = bn_submit(w->c, &req, &ring[(head + count) % IN_FLIGHT]);
			if (rc < 0) {
				w->error = rc;
				stop = 1;
				break;
			}
			count++;
		}
		if (!count)
			break;
		struct bn_handle *h = ring[head];
		int rc = bn_wait(h, 5000000000);
		struct bn_result r;
		if (rc < 0 || bn_result(h, &r) < 0 || r.status != BN_STATUS_LENGTH) {
			w->error = rc < 0 ? rc : -BN_E_PROTOCOL;
			stop = 1;
		}
		bn_release(h);
		head = (head + 1) % IN_FLIGHT;
		count--;
		w->done++;
		if ((w->done & 255) == 0 && now_ns() >= w->until)
			stop = 1;
	}
	return NULL;
}

/* Counts of wake-up system calls taken from the daemon's stats text. */
struct daemon_counts {
	uint64_t futex_wakes, sleeps, submits, doorbells;
};

static uint64_t metric(const char *text, const char *name)
{
	char key[96];
	snprintf(key, sizeof(key), "\n%s ", name);
	const char *p = strstr(text, key);
	return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

static int daemon_counts(struct bn_client *c, struct daemon_counts *out)
{
	static char text[1 << 16];
	int rc = bn_daemon_stats(c, text, sizeof(text));
	if (rc < 0)
		return rc;
	out->futex_wakes = metric(text, "bitnetd_futex_wakes_total");
	out->sleeps = metric(text, "bitnetd_sleeps_total");
	out->submits = metric(text, "bitnetd_uring_submits_total");
	out->doorbells = metric(text, "bitnetd_doorbells_total");
	return 0;
}

static int measure_rps(struct bn_client *c, uint32_t threads, uint32_t ms, int report_wakeups)
{
	struct rps_worker *w = calloc(threads, sizeof(*w));
	struct bn_client_stats cs0, cs1;
	struct daemon_counts d0, d1;
	if (!w)
		return -ENOMEM;
	bn_client_stats(c, &cs0);
	int rc = daemon_counts(c, &d0);
	int64_t start = now_ns();
	for (uint32_t i = 0; i < threads; i++) {
		w[i] = (struct rps_worker){ .c = c, .until = start + (int64_t)ms * 1000000,
					    .seed = i * 1000003u };
		pthread_create(&w[i].thread, NULL, rps_thread, &w[i]);
	}
	uint64_t total = 0;
	for (uint32_t i = 0; i < threads; i++) {
		pthread_join(w[i].thread, NULL);
		total += w[i].done;
		if (w[i].error)
			rc = w[i].error;
	}
	double secs = (double)(now_ns() - start) / 1e9;
	bn_client_stats(c, &cs1);
	if (rc == 0)
		rc = daemon_counts(c, &d1);
	free(w);
	if (rc < 0)
		return rc;
	printf("rps_%ut=%.0f\n", threads, (double)total / secs);
	if (report_wakeups && total) {
		uint64_t client = (cs1.doorbells - cs0.doorbells) + (cs1.futex_waits - cs0.futex_waits);
		uint64_t daemon = (d1.futex_wakes - d0.futex_wakes) + (d1.sleeps - d0.sleeps) +
				  (d1.submits - d0.submits);
		printf("client_wakeups_per_req=%.4f\n", (double)client / (double)total);
		printf("daemon_wakeups_per_req=%.4f\n", (double)daemon / (double)total);
		printf("daemon_doorbells_per_req=%.4f\n",
		       (double)(d1.doorbells - d0.doorbells) / (double)total);
	}
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Our own daemon                                                                              */
/* ------------------------------------------------------------------------------------------ */

static pid_t start_daemon(const char *path, const char *socket_path)
{
	pid_t pid = fork();
	if (pid == 0) {
		execl(path, path, "--socket", socket_path, "--backend", "loopback", "--slots", "1024",
		      "--max-batch", "1024", "--log-level", "warn", (char *)NULL);
		fprintf(stderr, "bitnet-cli bench: cannot run %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	return pid;
}

static int connect_retrying(const char *socket_path, struct bn_client **c)
{
	int rc = -1;
	for (int i = 0; i < 500; i++) { /* up to 5 s for the daemon to come up */
		rc = bn_connect(socket_path, 1024, c);
		if (rc == 0)
			return 0;
		usleep(10000);
	}
	return rc;
}

static int parse_bench_opts(int argc, char **argv, struct bench_opts *o)
{
	static const struct option opts[] = {
		{ "start-daemon", required_argument, NULL, 'd' },
		{ "hot-samples", required_argument, NULL, 'h' },
		{ "idle-samples", required_argument, NULL, 'i' },
		{ "idle-gap-us", required_argument, NULL, 'g' },
		{ "rps-ms", required_argument, NULL, 'r' },
		{ "spin-ns", required_argument, NULL, 's' },
		{ "idle-cpu-s", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, '?' + 256 },
		{ NULL, 0, NULL, 0 },
	};
	int opt;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		uint32_t *dst = opt == 'h' ? &o->hot_samples : opt == 'i' ? &o->idle_samples :
				opt == 'g' ? &o->idle_gap_us : opt == 'r' ? &o->rps_ms :
				opt == 's' ? &o->spin_ns : opt == 'c' ? &o->idle_cpu_s : NULL;
		if (opt == 'd')
			o->daemon_path = optarg;
		else if (opt == '?' + 256)
			return fputs(bench_usage, stdout), 1;
		else if (!dst || cli_parse_u32(optarg, dst) < 0 || (*dst == 0 && opt != 's' && opt != 'c'))
			return fputs(bench_usage, stderr), -1;
	}
	return 0;
}

/* User plus system CPU time of a process, in seconds (/proc/PID/stat fields 14 and 15); < 0
 * when it cannot be read. */
static double process_cpu_s(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* The command name (field 2) is in parentheses and may hold spaces: count from its end. */
	const char *p = strrchr(buf, ')');
	unsigned long long utime, stime;
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
			 &stime) != 2)
		return -1;
	return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* The daemon left alone with one open session: its CPU share and loop wake-ups. */
static int measure_idle_cpu(struct bn_client *c, const struct bench_opts *o)
{
	struct daemon_counts d0, d1;
	double cpu0 = process_cpu_s(o->daemon_pid);
	int64_t t0 = now_ns();
	int rc = daemon_counts(c, &d0);
	if (rc < 0 || cpu0 < 0)
		return rc < 0 ? rc : -EIO;
	sleep(o->idle_cpu_s);
	double cpu1 = process_cpu_s(o->daemon_pid);
	double wall = (double)(now_ns() - t0) * 1e-9;
	rc = daemon_counts(c, &d1);
	if (rc < 0 || cpu1 < 0)
		return rc < 0 ? rc : -EIO;
	printf("daemon_idle_cpu_share=%.4f\n", (cpu1 - cpu0) / wall);
	printf("daemon_idle_wakeups_per_s=%.2f\n", (double)(d1.sleeps - d0.sleeps) / wall);
	return 0;
}

static int run_all(struct bn_client *c, const struct bench_opts *o)
{
	int64_t hot, idle;
	bn_client_set_spin_ns(c, o->spin_ns);
	int rc = measure_rtt(c, "rtt_hot", o->hot_samples, 0, &hot);
	if (rc == 0)
		rc = measure_rtt(c, "rtt_idle", o->idle_samples, o->idle_gap_us, &idle);
	if (rc < 0)
		return rc;
	int64_t uds = measure_uds(o->hot_samples);
	if (uds > 0 && hot > 0 && idle > 0) {
		printf("uds_over_hot_p50=%.1f\n", (double)uds / (double)hot);
		printf("uds_over_idle_p50=%.2f\n", (double)uds / (double)idle);
		printf("idle_over_uds_p50=%.2f\n", (double)idle / (double)uds);
	}
	static const uint32_t threads[] = { 1, 4, 16 };
	for (size_t i = 0; rc == 0 && i < 3; i++)
		rc = measure_rps(c, threads[i], o->rps_ms, threads[i] == 4);
	if (rc == 0 && o->daemon_pid > 0 && o->idle_cpu_s)
		rc = measure_idle_cpu(c, o);
	return rc;
}

int cli_bench(const char *socket_path, int argc, char **argv)
{
	struct bench_opts o = { .socket_path = socket_path, .hot_samples = 20000,
				.idle_samples = 300, .idle_gap_us = 2000, .rps_ms = 1000,
				.spin_ns = 100000, .idle_cpu_s = 10 };
	int prc = parse_bench_opts(argc, argv, &o);
	if (prc)
		return prc > 0 ? 0 : 2;
	char own_socket[108];
	pid_t daemon = 0;
	if (o.daemon_path) {
		snprintf(own_socket, sizeof(own_socket), "/tmp/bitnet-bench-%d.sock", (int)getpid());
		o.socket_path = own_socket;
		daemon = start_daemon(o.daemon_path, own_socket);
		o.daemon_pid = daemon;
	}
	struct bn_client *c;
	int rc = o.daemon_path ? connect_retrying(o.socket_path, &c) : bn_connect(o.socket_path, 1024, &c);
	if (rc == 0) {
		rc = run_all(c, &o);
		bn_disconnect(c);
	}
	if (daemon > 0) {
		kill(daemon, SIGTERM);
		waitpid(daemon, NULL, 0);
	}
	if (rc < 0) {
		fprintf(stderr, "bitnet-cli bench: %s\n", bn_strerror(rc));
		return 1;
	}
	return 0;
}
