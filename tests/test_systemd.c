/* SPDX-License-Identifier: MIT */
/*
 * The daemon's two systemd protocols, played by this test as the service manager:
 * socket activation (LISTEN_PID/LISTEN_FDS, listening socket on fd 3) and sd_notify
 * (READY=1 once serving, WATCHDOG=1 every WATCHDOG_USEC/2, STOPPING=1 on SIGTERM).
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "testutil.h"

#include "ckassert.h"
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static int unix_socket(int type, const char *path, struct sockaddr_un *addr)
{
	int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
	*addr = (struct sockaddr_un){ .sun_family = AF_UNIX };
	snprintf(addr->sun_path, sizeof(addr->sun_path), "%s", path);
	unlink(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)addr, sizeof(*addr)), 0);
	return fd;
}

/* Starts the daemon as systemd would: the listener on fd 3, the notify socket in the env. */
static pid_t spawn_activated(int listener, const char *notify_path)
{
	pid_t pid = fork();
	if (pid == 0) {
		const char *bin = getenv("BITNETD") ? getenv("BITNETD") : "build/bitnetd";
		char pidbuf[32];
		dup2(listener, 3); /* dup2 clears close-on-exec on the copy */
		snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
		setenv("LISTEN_PID", pidbuf, 1);
		setenv("LISTEN_FDS", "1", 1);
		setenv("NOTIFY_SOCKET", notify_path, 1);
		setenv("WATCHDOG_USEC", "100000", 1); /* pings every 50 ms */
		execl(bin, bin, "--backend", "loopback", "--socket", "/nonexistent/never-used.sock",
		      "--log-level", "warn", (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* Receives one notify datagram within timeout_ms; "" when none came. */
static void next_notification(int fd, char *buf, size_t cap, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	buf[0] = '\0';
	if (poll(&p, 1, timeout_ms) == 1) {
		ssize_t n = recv(fd, buf, cap - 1, 0);
		buf[n > 0 ? n : 0] = '\0';
	}
}

/* Waits for a datagram containing `want`, skipping others; returns how many it skipped or
 * -1 when it did not come within about 5 s, scaled. */
static int wait_for(int fd, const char *want)
{
	char buf[256];
	for (int skipped = 0; skipped < 200; skipped++) {
		next_notification(fd, buf, sizeof(buf), tu_scaled(5000));
		if (!buf[0])
			return -1;
		if (strstr(buf, want))
			return skipped;
	}
	return -1;
}

START_TEST(socket_activation_and_notify)
{
	char lpath[108], npath[108];
	snprintf(lpath, sizeof(lpath), "/tmp/bn-act-%d.sock", (int)getpid());
	snprintf(npath, sizeof(npath), "/tmp/bn-notify-%d.sock", (int)getpid());
	struct sockaddr_un la, na;
	int listener = unix_socket(SOCK_STREAM, lpath, &la);
	ck_assert_int_eq(listen(listener, 16), 0);
	int notify = unix_socket(SOCK_DGRAM, npath, &na);

	pid_t pid = spawn_activated(listener, npath);
	ck_assert_int_ge(wait_for(notify, "READY=1"), 0);
	/* READY means serving: a client gets through the inherited socket at once. */
	struct bn_client *c;
	ck_assert_int_eq(bn_connect(lpath, 1, &c), 0);
	uint32_t prompt[3] = { 1, 2, 3 }, out[4];
	struct bn_request req = { prompt, 3, 4, 0, NULL };
	ck_assert_int_eq(bn_generate(c, &req, out, 4, NULL, tu_scaled_ns(5000000000LL)), 0);
	ck_assert_uint_eq(out[0], 17499); /* PROTOCOL.md §13 */
	/* Idle, the loop still pings the watchdog (it wakes for it). */
	ck_assert_int_ge(wait_for(notify, "WATCHDOG=1"), 0);
	ck_assert_int_ge(wait_for(notify, "WATCHDOG=1"), 0);
	kill(pid, SIGTERM);
	ck_assert_int_ge(wait_for(notify, "STOPPING=1"), 0);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	bn_disconnect(c);
	close(listener);
	close(notify);
	unlink(lpath);
	unlink(npath);
}
END_TEST

START_TEST(bad_listen_fds_is_a_startup_error)
{
	pid_t pid = fork();
	if (pid == 0) {
		const char *bin = getenv("BITNETD") ? getenv("BITNETD") : "build/bitnetd";
		char pidbuf[32];
		int fd = open("/dev/null", O_RDONLY);
		dup2(fd, 3); /* fd 3 is not a socket */
		snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
		setenv("LISTEN_PID", pidbuf, 1);
		setenv("LISTEN_FDS", "1", 1);
		execl(bin, bin, "--backend", "loopback", "--log-level", "error", (char *)NULL);
		_exit(127);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 4); /* documented: cannot listen on the socket */
}
END_TEST

int main(void)
{
	Suite *s = suite_create("systemd");
	TCase *tc = tcase_create("protocols");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, socket_activation_and_notify);
	tcase_add_test(tc, bad_listen_fds_is_a_startup_error);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
