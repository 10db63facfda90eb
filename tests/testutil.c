/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "testutil.h"

#include "../daemon/model/vocab.h"
#include "kernels.h"
#include "bitnet_client.h"
#include "../libclient/client_internal.h" /* a handle's client, for tu_wait */

#include "ckassert.h"
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int64_t tu_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t tu_thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Tokens of h published so far: `have`, and those after it. */
static uint32_t tokens_now(struct bn_handle *h, uint32_t have)
{
	uint32_t buf[256];
	int k;
	while ((k = bn_read_tokens(h, have, buf, 256)) > 0)
		have += (uint32_t)k;
	return have;
}

/* The CPU time the daemon at the other end of c's socket has used (its threads' user and
 * system clock ticks, /proc/PID/stat), or -1. Read from outside: a daemon that no longer
 * answers (stopped, deadlocked) cannot hold a wait that asks it nothing. */
static long long daemon_cpu_ticks(const struct bn_client *c)
{
	struct ucred peer;
	socklen_t len = sizeof(peer);
	if (getsockopt(c->sock, SOL_SOCKET, SO_PEERCRED, &peer, &len) < 0)
		return -1;
	char path[64], stat[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)peer.pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(stat, 1, sizeof(stat) - 1, f);
	fclose(f);
	stat[n] = '\0';
	const char *after_name = strrchr(stat, ')'); /* the name may hold spaces and parentheses */
	unsigned long long user, sys;
	/* fields 3-13 (state, ppid, pgrp, session, tty, tpgid, flags, four fault counts), then
	 * utime and stime (proc(5)) */
	static const char fields[] = " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu";
	if (!after_name || sscanf(after_name + 1, fields, &user, &sys) != 2)
		return -1;
	return (long long)(user + sys);
}

int tu_wait(struct bn_handle *h, int64_t quiet_ns)
{
	if (quiet_ns < 0)
		return bn_wait(h, -1);
	const int64_t quiet = tu_scaled_ns(quiet_ns);
	const int64_t slice = quiet < 1000000000 ? quiet : 1000000000;
	uint32_t have = 0;
	long long busy = -1;
	int64_t moved = tu_now_ns();
	for (;;) {
		/* A completion wait, as bn_wait's: woken once, at the end, not at every token (which
		 * would load a busy machine and the daemon's wake-ups more than the test means to). */
		int rc = bn_wait(h, slice);
		if (rc != -BN_E_TIMEOUT)
			return rc;
		/* A slice without the end: the request's own tokens, or else the daemon's CPU time
		 * (its prompt being read, the requests queued before it), say whether it works. */
		uint32_t n = tokens_now(h, have);
		long long cpu = n == have ? daemon_cpu_ticks(h->c) : busy;
		if (n != have || cpu != busy) {
			have = n;
			busy = cpu;
			moved = tu_now_ns();
		} else if (tu_now_ns() - moved >= quiet) {
			return -BN_E_TIMEOUT;
		}
	}
}

int tu_dial(const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(addr.sun_path))
		return -1;
	strcpy(addr.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

int tu_welcome_error(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	if (poll(&p, 1, timeout_ms) <= 0)
		return -1;
	struct bn_welcome w;
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { &w, sizeof(w) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
	if (n != (ssize_t)sizeof(w) || w.magic != BN_WELCOME_MAGIC)
		return -1;
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	if (cm && cm->cmsg_type == SCM_RIGHTS) {
		int fds[2];
		memcpy(fds, CMSG_DATA(cm), sizeof(fds));
		close(fds[0]);
		close(fds[1]);
	}
	return (int)w.error;
}

int tu_become_other_user(void)
{
	if (geteuid() != 0)
		return -1;
	if (setgroups(0, NULL) < 0 || setgid(TU_OTHER_UID) < 0 || setuid(TU_OTHER_UID) < 0)
		return -1;
	return 0;
}

static uint64_t rng_state;

void tu_rng_seed(uint64_t seed)
{
	rng_state = seed * 0x9e3779b97f4a7c15ull + 1;
}

uint32_t tu_rng_next(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

float tu_rng_float(float lo, float hi)
{
	return lo + (hi - lo) * (float)(tu_rng_next() >> 8) / (float)(1u << 24);
}

const char *tu_cache_home(void)
{
	const char *dir = getenv("BN_TEST_CACHE_HOME");
	return dir && *dir ? dir : TU_CACHE_HOME;
}

int tu_daemon_start(struct tu_daemon *d, const char *const *extra_args)
{
	static unsigned counter;
	snprintf(d->socket_path, sizeof(d->socket_path), "/tmp/bn-test-%d-%u.sock", (int)getpid(),
		 counter++);
	return tu_daemon_restart(d, extra_args);
}

int tu_daemon_start_cpu(struct tu_daemon *d, const char *model, const char *const *extra_args)
{
	const char *args[13] = { "--backend", "cpu", "--model", model };
	for (int i = 0; extra_args && extra_args[i]; i++) {
		if (i == 8)
			return -1;
		args[4 + i] = extra_args[i];
	}
	return tu_daemon_start(d, args);
}

int tu_daemon_restart(struct tu_daemon *d, const char *const *extra_args)
{
	const char *bin = getenv("BITNETD");
	if (!bin || !*bin)
		bin = "build/bitnetd";
	const char *argv[64] = { bin, "--socket", d->socket_path, "--backend", "loopback",
				 "--log-level", "warn" };
	int argc = 7;
	for (int i = 0; extra_args && extra_args[i] && argc < 63; i++)
		argv[argc++] = extra_args[i];
	argv[argc] = NULL;
	d->pid = fork();
	if (d->pid < 0)
		return -1;
	if (d->pid == 0) {
		/* The tests' daemons keep their weights caches out of the user's home: in one
		 * directory of their own, which every test shares (a hit after the first start). */
		setenv("XDG_CACHE_HOME", tu_cache_home(), 1);
		unsetenv("CACHE_DIRECTORY");
		execv(bin, (char *const *)argv);
		fprintf(stderr, "cannot run %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	/* Up to 60 s, scaled: a daemon that dies is noticed at once, so only a slow start waits.
	 * One with the LLaMA-3 vocabulary under ThreadSanitizer took over 10 s on a loaded 2-core
	 * machine. */
	for (int i = 0, end = tu_scaled(6000); i < end; i++) {
		struct bn_client *c;
		if (bn_connect(d->socket_path, 1, &c) == 0) {
			bn_disconnect(c);
			return tu_daemon_wait_no_sessions(d);
		}
		if (waitpid(d->pid, NULL, WNOHANG) == d->pid)
			return -1;
		usleep(10000);
	}
	return -1;
}

/* The inodes of the Unix sockets bound to path: the daemon's listener and every connection it
 * accepted (an accepted socket carries its listener's address in /proc/net/unix). Up to cap;
 * returns how many, or -1. */
static int sockets_bound_to(const char *path, unsigned long *inodes, int cap)
{
	FILE *f = fopen("/proc/net/unix", "r");
	if (!f)
		return -1;
	char line[512];
	int n = 0;
	size_t plen = strlen(path);
	while (fgets(line, sizeof(line), f) && n < cap) {
		/* Num RefCount Protocol Flags Type St Inode Path */
		unsigned long inode;
		int at = 0;
		if (sscanf(line, "%*s %*s %*s %*s %*s %*s %lu %n", &inode, &at) != 1 || !at)
			continue;
		const char *p = line + at;
		if (strncmp(p, path, plen) == 0 && (p[plen] == '\n' || p[plen] == 0))
			inodes[n++] = inode;
	}
	fclose(f);
	return n;
}

/* The daemon's sockets on its own socket path: its listener, and one per connection in its
 * table. Only those count: the CUDA driver holds sockets of its own in a cuda daemon. */
static int count_sockets(pid_t pid, const char *socket_path)
{
	static unsigned long inodes[4096];
	int bound = sockets_bound_to(socket_path, inodes, 4096);
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	DIR *dp = bound < 0 ? NULL : opendir(dir);
	if (!dp)
		return -1;
	int n = 0;
	for (struct dirent *e; (e = readdir(dp)) != NULL;) {
		char path[320], target[64];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		ssize_t len = readlink(path, target, sizeof(target) - 1);
		unsigned long inode;
		if (len <= 0)
			continue;
		target[len] = 0;
		if (sscanf(target, "socket:[%lu]", &inode) != 1)
			continue;
		for (int i = 0; i < bound; i++)
			if (inodes[i] == inode) {
				n++;
				break;
			}
	}
	closedir(dp);
	return n;
}

int tu_daemon_wait_no_sessions(const struct tu_daemon *d)
{
	for (int i = 0, end = tu_scaled(500); i < end; i++) { /* up to 5 s, scaled */
		int n = count_sockets(d->pid, d->socket_path);
		if (n == 1)
			return 0;
		if (n < 0)
			return -1;
		usleep(10000);
	}
	return -1;
}

int tu_daemon_stop(struct tu_daemon *d, int sig)
{
	int status;
	kill(d->pid, sig);
	if (waitpid(d->pid, &status, 0) != d->pid)
		return -1;
	unlink(d->socket_path);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

static uint32_t fmix32(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x85ebca6bU;
	x ^= x >> 13;
	x *= 0xc2b2ae35U;
	x ^= x >> 16;
	return x;
}

uint32_t tu_loopback(const uint32_t *prompt, uint32_t n_prompt, uint32_t max_tokens,
		     uint32_t flags, uint32_t vocab, uint32_t eos, uint32_t *out, uint32_t *status)
{
	uint32_t h = 2166136261U;
	for (uint32_t i = 0; i < n_prompt; i++)
		h = (h ^ prompt[i]) * 16777619U;
	for (uint32_t i = 0; i < max_tokens; i++) {
		uint32_t tok = fmix32(h) % vocab;
		if (tok == eos && !(flags & BN_REQ_IGNORE_EOS)) {
			*status = BN_STATUS_EOS;
			return i;
		}
		out[i] = tok;
		h = (h ^ tok) * 16777619U;
	}
	*status = BN_STATUS_LENGTH;
	return max_tokens;
}

uint32_t tu_prompt(uint32_t client, uint32_t request, uint32_t *out, uint32_t cap)
{
	uint32_t n = 1 + (client * 7 + request * 13) % (cap < 24 ? cap : 24);
	for (uint32_t i = 0; i < n; i++)
		out[i] = 3 + (client * 100003u + request * 7919u + i * 31u) % 31000u;
	return n;
}

long long tu_metric(const char *text, const char *name)
{
	size_t len = strlen(name);
	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		if (strncmp(p, name, len) == 0 && p[len] == ' ')
			return strtoll(p + len + 1, NULL, 10);
	}
	return -1;
}

void tu_models_dir(char *tmpl)
{
	if (!getenv("BITNET_MODEL_TOOL")) {
		fprintf(stderr, "BITNET_MODEL_TOOL is not set (make check sets it)\n");
		exit(EXIT_FAILURE);
	}
	if (!mkdtemp(tmpl)) {
		perror("mkdtemp");
		exit(EXIT_FAILURE);
	}
}

void tu_write_tiny_model(const char *path, const char *const *args)
{
	char cmd[1024];
	int at = snprintf(cmd, sizeof(cmd), "%s write --preset tiny --out %s",
			  getenv("BITNET_MODEL_TOOL"), path);
	for (int i = 0; args[i]; i++)
		at += snprintf(cmd + at, sizeof(cmd) - (size_t)at, " %s", args[i]);
	snprintf(cmd + at, sizeof(cmd) - (size_t)at, " >/dev/null");
	if (system(cmd) != 0) {
		fprintf(stderr, "failed: %s\n", cmd);
		exit(EXIT_FAILURE);
	}
}

void tu_remove_dir(const char *dir)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

int tu_emulated(void)
{
	const char *e = getenv("BITNET_TEST_EMULATED");
	return e && *e && strcmp(e, "0") != 0;
}

int tu_reduced(void)
{
	return tu_emulated() || TU_SANITIZED;
}

int tu_forced_kernels_runnable(void)
{
	const char *forced = getenv("BITNET_KERNELS");
	if (!forced || !*forced)
		return 1;
	const struct bn_kernels *k = bn_kernels_select(NULL);
	if (!k) {
		printf("SKIP: BITNET_KERNELS=%s: this CPU cannot run those kernels\n", forced);
		return 0;
	}
	unsetenv("BITNET_KERNELS");
	const struct bn_kernels *best = bn_kernels_select(NULL);
	setenv("BITNET_KERNELS", forced, 1);
	if (k == best) {
		printf("SKIP: BITNET_KERNELS=%s: this CPU's default, which the plain run tests\n",
		       forced);
		return 0;
	}
	return 1;
}

int tu_run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* From ../shared/models/README.md: llama2.c, temperature 0, from BOS = 1. */
const uint32_t tu_stories_known[TU_STORIES_KNOWN] = {
	403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337,
	410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352,
	266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432, 398, 312, 286, 267, 414, 270, 333, 415,
	426, 13, 438, 310, 439, 419, 357, 336, 432, 313, 438, 310, 432, 278, 316, 439, 419, 298, 414, 267,
	265, 282, 295, 433, 426, 436, 317, 286, 296, 418, 269, 279, 292, 416, 439, 413, 409, 416, 327, 263,
	415, 294, 267, 400, 426, 338, 336, 432, 313, 442, 391, 267, 337, 335, 364, 420, 268, 388, 432, 398,
	359, 280, 303, 439, 413, 272, 417, 264, 312, 426, 436, 13, 438, 310, 286, 296, 418, 269, 279, 292,
	416, 439, 413, 409, 416, 327, 263, 415, 294, 267, 400, 426, 338, 336, 432, 313, 442, 439, 423, 262,
	304, 420, 422, 432, 317, 426, 359, 279, 292, 416, 439, 413, 409, 416, 327, 263, 415, 294, 267, 400,
	426, 436, 13, 438, 310, 279, 292, 416, 439, 413, 391, 267, 281, 421, 427, 311, 357, 432, 384, 358,
};

const char *tu_default_model(void)
{
	const char *m = getenv("BITNET_DEFAULT_MODEL");
	return m && *m ? m : "build/models/tiny.gguf";
}

/* ------------------------------------------------------------------------------------------ */
/* Running programs                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* A temporary file holding data (for stdin), or an empty one to collect output; unlinked. */
static int temp_file(const void *data, size_t len)
{
	char path[] = "/tmp/bn-run-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		return -1;
	unlink(path);
	if (len && write(fd, data, len) != (ssize_t)len) {
		close(fd);
		return -1;
	}
	lseek(fd, 0, SEEK_SET);
	return fd;
}

static size_t slurp(int fd, char *buf, size_t cap)
{
	lseek(fd, 0, SEEK_SET);
	size_t n = 0;
	ssize_t k;
	while (n + 1 < cap && (k = read(fd, buf + n, cap - 1 - n)) > 0)
		n += (size_t)k;
	buf[n] = '\0';
	close(fd);
	return n;
}

int tu_run(const char *const *argv, const void *input, size_t len, struct tu_run *r)
{
	int in = temp_file(input, len), out = temp_file(NULL, 0), err = temp_file(NULL, 0);
	if (in < 0 || out < 0 || err < 0)
		return -1;
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(in, 0);
		dup2(out, 1);
		dup2(err, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(in);
	int st;
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	r->out_len = slurp(out, r->out, sizeof(r->out));
	slurp(err, r->err, sizeof(r->err));
	return 0;
}

int tu_run_cli(const struct tu_daemon *d, const char *const *args, const void *input,
	       size_t len, struct tu_run *r)
{
	const char *bin = getenv("BITNET_CLI");
	if (!bin || !*bin)
		bin = "build/bitnet-cli";
	const char *argv[64] = { bin, "--socket", d->socket_path };
	int argc = 3;
	for (int i = 0; args[i] && argc < 63; i++)
		argv[argc++] = args[i];
	argv[argc] = NULL;
	return tu_run(argv, input, len, r);
}

struct bn_vocab *tu_file_vocab(const char *path)
{
	struct bn_vocab_served sv;
	char err[BN_VOCAB_ERR_LEN];
	ck_assert_msg(bn_vocab_serve_open(path, 0, NULL, &sv, err) == 1, "%s", err);
	void *p = mmap(NULL, sv.tokenizer_bytes, PROT_READ, MAP_PRIVATE, sv.tokenizer_fd, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	struct bn_vocab *v;
	ck_assert_int_eq(bn_vocab_from_payload(p, sv.tokenizer_bytes, &v), 0);
	munmap(p, sv.tokenizer_bytes);
	bn_vocab_served_close(&sv);
	return v;
}
