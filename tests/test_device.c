/* SPDX-License-Identifier: MIT */
/*
 * --device and --backend: bad values and contradictions are usage errors (exit 2); cuda:N
 * either runs on that GPU or exits 3 naming why; auto runs on the GPU only where cuda:0 would,
 * and otherwise on the CPU, saying so. Runs on every machine: where cuda:0 cannot be used
 * (no CUDA build, no driver, no GPU) this checks the refusal and the fallback.
 */
#include "testutil.h"

#include "ckassert.h"
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct run {
	int status;         /* exit status, or -1 when it was still serving (then stopped) */
	char log[8192];     /* its stderr */
};

static void read_log(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
	buf[n] = 0;
	if (f)
		fclose(f);
}

/* Runs bitnetd with args; stops it with SIGTERM once it logs "ready" (status -1 then). */
static void run_daemon(const char *const *args, struct run *r)
{
	char log_path[] = "/tmp/bn-device-log-XXXXXX", sock[64];
	int fd = mkstemp(log_path);
	ck_assert_int_ge(fd, 0);
	snprintf(sock, sizeof(sock), "/tmp/bn-device-%d.sock", (int)getpid());
	const char *argv[16] = { getenv("BITNETD"), "--socket", sock };
	int n = 3;
	for (int i = 0; args[i]; i++)
		argv[n++] = args[i];
	pid_t pid = fork();
	if (pid == 0) {
		dup2(fd, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	r->status = -2;
	for (int i = 0, end = tu_scaled(600); i < end && r->status == -2; i++) {
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid) {
			r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			break;
		}
		read_log(log_path, r->log, sizeof(r->log));
		if (strstr(r->log, "msg=\"ready\"")) {
			kill(pid, SIGTERM);
			waitpid(pid, &st, 0);
			r->status = -1;
		}
		usleep(20000);
	}
	ck_assert_msg(r->status != -2, "bitnetd neither exited nor became ready in %d s",
		      tu_scaled(12));
	read_log(log_path, r->log, sizeof(r->log));
	close(fd);
	unlink(log_path);
	unlink(sock);
}

START_TEST(bad_device_values_are_usage_errors)
{
	static const char *const cases[][5] = {
		{ "--device", "gpu", NULL },
		{ "--device", "cuda:x", NULL },
		{ "--backend", "cpu", "--device", "cuda:0", NULL },
		{ "--backend", "loopback", "--device", "cpu", NULL },
	};
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct run r;
		run_daemon(cases[i], &r);
		ck_assert_msg(r.status == 2, "case %u: status %d, log: %s", i, r.status, r.log);
		ck_assert_msg(strstr(r.log, "--device") || strstr(r.log, "contradicts"),
			      "case %u does not say why: %s", i, r.log);
	}
}
END_TEST

/* Whether one line of the log holds both what and also (the "model loaded" line names the
 * model between its message and its backend since several models can be served). */
static int log_line_has(const char *log, const char *what, const char *also)
{
	for (const char *line = log; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t n = end ? (size_t)(end - line) : strlen(line);
		char copy[2048];
		snprintf(copy, sizeof(copy), "%.*s", (int)n, line);
		if (strstr(copy, what) && strstr(copy, also))
			return 1;
		line = end ? end + 1 : NULL;
	}
	return 0;
}

START_TEST(cuda_refused_with_reason_or_used_and_auto_follows)
{
	const char *model = tu_default_model();
	const char *explicit_gpu[] = { "--model", model, "--device", "cuda:0", NULL };
	const char *automatic[] = { "--model", model, NULL };
	struct run gpu, autorun;
	run_daemon(explicit_gpu, &gpu);
	run_daemon(automatic, &autorun);
	ck_assert_msg(autorun.status == -1, "auto did not serve: %d %s", autorun.status, autorun.log);
	if (gpu.status == -1) {
		ck_assert_msg(strstr(gpu.log, "backend=cuda"), "cuda:0 served, but not on cuda: %s", gpu.log);
		ck_assert_msg(log_line_has(autorun.log, "msg=\"model loaded\"", " backend=cuda "), "auto: %s", autorun.log);
		return;
	}
	ck_assert_msg(gpu.status == 3, "cuda:0 without a usable GPU: status %d", gpu.status);
	ck_assert_msg(strstr(gpu.log, "unknown backend or not in this build") ||
			      strstr(gpu.log, "CUDA") || strstr(gpu.log, "compute capability"),
		      "cuda:0 refused without a reason: %s", gpu.log);
	ck_assert_msg(strstr(autorun.log, "--device auto"), "auto does not say why not the GPU: %s",
		      autorun.log);
	ck_assert_msg(log_line_has(autorun.log, "msg=\"model loaded\"", " backend=cpu "), "auto: %s", autorun.log);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("device");
	TCase *t = tcase_create("selection");
	tcase_set_timeout(t, 60);
	tcase_add_test(t, bad_device_values_are_usage_errors);
	tcase_add_test(t, cuda_refused_with_reason_or_used_and_auto_follows);
	suite_add_tcase(s, t);
	return tu_run_suite(s);
}
