/* SPDX-License-Identifier: MIT */
/*
 * testutil.h — what the integration tests share: starting and stopping a real bitnetd, and
 * the loopback oracle, written here from shm/PROTOCOL.md §13 (not taken from the daemon).
 */
#ifndef BITNET_TESTUTIL_H
#define BITNET_TESTUTIL_H

#include "timescale.h"

#include <stdint.h>
#include <sys/types.h>

struct tu_daemon {
	pid_t pid;
	char socket_path[108];
};

/* The XDG_CACHE_HOME the tests' daemons get: their weights caches (--cache-dir's default)
 * go to its bitnetd/, not to the user's home. $BN_TEST_CACHE_HOME where set (make check: one
 * directory a build, emptied when its check-c starts, so that the caches of the tests'
 * temporary models do not pile up run after run), else TU_CACHE_HOME. */
#define TU_CACHE_HOME "/tmp/bitnet-test-cache"
const char *tu_cache_home(void);

/* Starts $BITNETD (default build/bitnetd) on a fresh socket with the loopback backend and
 * the extra arguments (NULL-terminated list, may be NULL); waits until it accepts (up to 60 s,
 * scaled: timescale.h), or until it dies. 0 or -1. */
int tu_daemon_start(struct tu_daemon *d, const char *const *extra_args);
/* tu_daemon_start with --backend cpu --model MODEL, then up to 8 extra arguments
 * (NULL-terminated). 0 or -1. */
int tu_daemon_start_cpu(struct tu_daemon *d, const char *model, const char *const *extra_args);
/* Waits (up to 5 s, scaled) until the daemon holds no connection: its only socket is the listener
 * (read from /proc, so the waiting itself opens none). 0, or -1. tu_daemon_start returns
 * only then: its own probe connection is gone from the table. */
int tu_daemon_wait_no_sessions(const struct tu_daemon *d);
/* tu_daemon_start on d->socket_path as it is (a daemon that died left it behind). */
int tu_daemon_restart(struct tu_daemon *d, const char *const *extra_args);
/* Sends `sig` and waits for exit; returns the exit status, or 128 + signal if killed. */
int tu_daemon_stop(struct tu_daemon *d, int sig);

/* The loopback function: fills out[0..max_tokens) and returns the count; *status gets
 * BN_STATUS_LENGTH or BN_STATUS_EOS. */
uint32_t tu_loopback(const uint32_t *prompt, uint32_t n_prompt, uint32_t max_tokens,
		     uint32_t flags, uint32_t vocab, uint32_t eos, uint32_t *out, uint32_t *status);

/* A deterministic prompt for (client, request) that avoids the EOS id as a token. */
uint32_t tu_prompt(uint32_t client, uint32_t request, uint32_t *out, uint32_t cap);

int64_t tu_now_ns(void);
/* The calling thread's CPU time: what a bound on an algorithm's cost measures, since a loaded
 * machine's preemptions (or a sanitizer's own threads) do not add to it. */
int64_t tu_thread_cpu_ns(void);

struct bn_handle;
/* Waits for h's terminal status, as bn_wait, but on progress rather than on a total: it gives
 * up (-BN_E_TIMEOUT) only once tu_scaled_ns(quiet_ns) has passed with neither a new token of
 * h nor more CPU time used by the daemon (checked once a second, from /proc, asking the daemon
 * nothing), so a request that a sanitizer or a loaded machine slows down, its prompt being
 * read or its turn in the queue coming, is waited for as long as the daemon works, and a
 * stalled daemon (stopped, deadlocked, asleep on a lost wake-up) still fails it. Not for a
 * request whose test is that others do not hold it back (fairness): the daemon's work for
 * them counts as progress here. quiet_ns < 0 waits without limit. 0, -BN_E_TIMEOUT or
 * -BN_E_DISCONNECTED. */
int tu_wait(struct bn_handle *h, int64_t quiet_ns);

/* A Unix stream socket connected to path (close-on-exec), or -1. */
int tu_dial(const char *path);
/* The error of the welcome that arrives on fd within timeout_ms (0: the session was opened;
 * its descriptors are closed), or -1 when none arrived in time or the connection closed. */
int tu_welcome_error(int fd, int timeout_ms);

/* The unprivileged user ("nobody") tests switch to for a second peer uid. */
#define TU_OTHER_UID 65534
/* In a forked child: drops to TU_OTHER_UID. 0, or -1 when not root (then nothing changed). */
int tu_become_other_user(void);

/* The unit tests' reproducible random numbers: xorshift64*, one stream per process, restarted
 * by tu_rng_seed. tu_rng_float is uniform in [lo, hi) on a grid of 2^-24 of the range. */
void tu_rng_seed(uint64_t seed);
uint32_t tu_rng_next(void);
float tu_rng_float(float lo, float hi);

/* The value of a metric line "name value" in Prometheus text, or -1. */
long long tu_metric(const char *text, const char *name);

/* The test model's known output (../shared/models/README.md): the 200 greedy ids after BOS. */
#define TU_STORIES_KNOWN 200
extern const uint32_t tu_stories_known[TU_STORIES_KNOWN];

/* The built-in default model: $BITNET_DEFAULT_MODEL, else build/models/tiny.gguf. */
const char *tu_default_model(void);

/* A program's exit and output: stdout (up to 64 KiB) and stderr (up to 8 KiB), NUL-terminated. */
struct tu_run {
	int status;              /* exit status, or 128 + signal */
	size_t out_len;
	char out[1 << 16];
	char err[1 << 13];
};
/* Runs argv[0] (a path) with argv, `input` (len bytes, may be NULL) as its standard input,
 * and waits for it. Returns 0, or -1 when it could not be started. */
int tu_run(const char *const *argv, const void *input, size_t len, struct tu_run *r);
/* $BITNET_CLI (default build/bitnet-cli) --socket d's socket args... with input as above. */
int tu_run_cli(const struct tu_daemon *d, const char *const *args, const void *input,
	       size_t len, struct tu_run *r);

/* The vocabulary a daemon would serve for the model file at path: the BN_CTL_TOKENIZER
 * payload the daemon's code builds, parsed by the client's. Fails the test if either fails. */
struct bn_vocab *tu_file_vocab(const char *path);

/* Before a suite runs (a failure exits; no ck_assert): makes the work directory from tmpl
 * (mkdtemp) for models that $BITNET_MODEL_TOOL writes, which must be set. */
void tu_models_dir(char *tmpl);
/* $BITNET_MODEL_TOOL write --preset tiny --out PATH ARGS... (NULL-terminated), quietly;
 * before a suite runs, like tu_models_dir. */
void tu_write_tiny_model(const char *path, const char *const *args);

/* Removes a test's work directory and what it holds (a message when it cannot). */
void tu_remove_dir(const char *dir);

/* 1 when $BITNET_KERNELS is unset or empty, or names kernels this CPU can run other than its
 * default; otherwise prints a SKIP line and returns 0 (the program then exits 77). make
 * check-kernel-variants forces each variant through the environment: not every CPU runs every
 * one, and the default one the plain run has tested already. */
int tu_forced_kernels_runnable(void);

/* What a suite that runs on one thread prints under ThreadSanitizer (timescale.h: TU_TSAN). */
#define TU_TSAN_SKIP_MSG "SKIP under ThreadSanitizer: this suite runs on one thread (the plain and AddressSanitizer passes run it)"

/* 1 when the suite runs under an emulator: make check-arm64 sets BITNET_TEST_EMULATED for its
 * runs under qemu-user, where SIMD code runs 30-60x slower than natively. The oracle suites
 * then check fewer shapes and batch sizes (each says which), as under the sanitizers: every
 * code path once, not every sample; the aarch64 hardware they stand in for runs them all. */
int tu_emulated(void);

/* 1 when an oracle suite checks its reduced sample of shapes, sizes and seeds (each suite
 * says which) rather than all of them: under an emulator (tu_emulated), and under the
 * sanitizers (timescale.h: TU_SANITIZED), which look for memory and thread errors on each
 * code path, not for the rarer outputs that the plain pass's full sweep checks. */
int tu_reduced(void);

/* The tag (Check's tcase_set_tags) of the test cases that start a daemon or run a client
 * against one: make check-arm64 runs the suites under qemu-user, which has no io_uring for the
 * daemon's loop, with CK_EXCLUDE_TAGS=daemon (make check-arm64-vm runs them in a VM). */
#define TU_TAG_DAEMON "daemon"

struct Suite;
/* Runs the suite with Check's normal output (its summary line included) and returns the
 * process exit status: EXIT_SUCCESS iff nothing failed. */
int tu_run_suite(struct Suite *s);

#endif /* BITNET_TESTUTIL_H */
