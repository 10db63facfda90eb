/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "sdnotify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define SD_LISTEN_FDS_START 3

int bn_sd_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	if (!path || !*path)
		return 0;
	size_t len = strlen(path);
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	if ((path[0] != '/' && path[0] != '@') || len >= sizeof(addr.sun_path))
		return -EINVAL;
	memcpy(addr.sun_path, path, len);
	if (path[0] == '@')
		addr.sun_path[0] = '\0'; /* abstract namespace */
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
	ssize_t n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&addr, alen);
	int rc = n < 0 ? -errno : 0;
	close(fd);
	return rc;
}

static int env_number(const char *name, unsigned long *out)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return -1;
	char *end;
	errno = 0;
	*out = strtoul(v, &end, 10);
	return (errno || *end) ? -1 : 0;
}

int bn_sd_listen_fd(void)
{
	unsigned long pid, n;
	if (env_number("LISTEN_PID", &pid) < 0 || pid != (unsigned long)getpid())
		return -1;
	if (env_number("LISTEN_FDS", &n) < 0 || n != 1)
		return -EINVAL;
	/* The variables are for us alone: children must not think they were activated. */
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	int fd = SD_LISTEN_FDS_START, type = 0, listening = 0;
	socklen_t len = sizeof(type);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM)
		return -EINVAL;
	len = sizeof(listening);
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0 || !listening)
		return -EINVAL;
	struct sockaddr_un addr;
	len = sizeof(addr);
	if (getsockname(fd, (struct sockaddr *)&addr, &len) < 0 || addr.sun_family != AF_UNIX)
		return -EINVAL;
	return fd;
}

uint64_t bn_sd_watchdog_ns(void)
{
	unsigned long usec, pid;
	if (env_number("WATCHDOG_USEC", &usec) < 0 || usec == 0)
		return 0;
	if (env_number("WATCHDOG_PID", &pid) == 0 && pid != (unsigned long)getpid())
		return 0;
	return (uint64_t)usec * 1000u;
}
