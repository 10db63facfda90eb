/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "listen.h"

#include "common/log.h"
#include "config.h"
#include "sdnotify.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* A stale socket file from a dead daemon is replaced; a live daemon's is not. */
static int bind_socket(int fd, const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	strcpy(addr.sun_path, path);
	if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0)
		return 0;
	if (errno != EADDRINUSE)
		return -errno;
	int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int live = probe >= 0 && connect(probe, (struct sockaddr *)&addr, sizeof(addr)) == 0;
	if (probe >= 0)
		close(probe);
	if (live)
		return -EADDRINUSE;
	struct stat st;
	if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode))
		return -EEXIST;
	unlink(path);
	return bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 ? 0 : -errno;
}

int bn_listen_open(const struct bn_config *cfg, int *owned)
{
	int fd = bn_sd_listen_fd();
	*owned = 0;
	if (fd >= 0) {
		bn_log_info("msg=\"using the socket passed by systemd\" fd=%d", fd);
		return fd;
	}
	*owned = 1;
	if (fd == -EINVAL) {
		bn_log_error("msg=\"LISTEN_FDS must name exactly one listening unix stream socket\"");
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	int rc = bind_socket(fd, cfg->socket_path);
	if (rc == 0 && chmod(cfg->socket_path, cfg->socket_mode) < 0)
		rc = -errno;
	if (rc == 0 && listen(fd, 128) < 0)
		rc = -errno;
	if (rc < 0) {
		bn_log_error("msg=\"cannot listen\" socket=%s error=\"%s\"", cfg->socket_path,
			     rc == -EADDRINUSE ? "another daemon is serving it" : strerror(-rc));
		close(fd);
		return -1;
	}
	return fd;
}

static void loop_signals(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGHUP);
}

int bn_signals_block(void)
{
	sigset_t set;
	loop_signals(&set);
	return sigprocmask(SIG_BLOCK, &set, NULL) < 0 ? -1 : 0;
}

int bn_signals_open(void)
{
	sigset_t set;
	loop_signals(&set);
	if (bn_signals_block() < 0)
		return -1;
	signal(SIGPIPE, SIG_IGN);
	return signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
}
