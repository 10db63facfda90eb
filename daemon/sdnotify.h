/* SPDX-License-Identifier: MIT */
/*
 * sdnotify.h — the two systemd protocols the daemon speaks, written out rather than linked
 * (libsystemd is a large dependency for two datagrams and two environment variables):
 *   - sd_notify: "READY=1", "WATCHDOG=1", "STOPPING=1" datagrams to $NOTIFY_SOCKET;
 *   - socket activation: $LISTEN_PID / $LISTEN_FDS hand us listening sockets from fd 3.
 */
#ifndef BITNETD_SDNOTIFY_H
#define BITNETD_SDNOTIFY_H

#include <stdint.h>

/* Sends `state` if the service manager asked for notifications. Returns 0 (also when not
 * asked) or -errno. */
int bn_sd_notify(const char *state);

/* The inherited listening socket: fd >= 3, -1 when not socket-activated, or -EINVAL when the
 * environment names fds that are not one listening Unix stream socket. */
int bn_sd_listen_fd(void);

/* Watchdog period requested by the service manager in ns, 0 if none. */
uint64_t bn_sd_watchdog_ns(void);

#endif /* BITNETD_SDNOTIFY_H */
