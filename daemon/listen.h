/* SPDX-License-Identifier: MIT */
/*
 * listen.h — the daemon's listening socket and its signals, set up before the loop runs.
 */
#ifndef BITNETD_LISTEN_H
#define BITNETD_LISTEN_H

struct bn_config;

/* The listening socket: the one systemd passed (socket activation), else a Unix stream socket
 * made at cfg->socket_path with cfg->socket_mode (a stale socket file of a dead daemon is
 * replaced; a live daemon's is not). *owned says whether bitnetd made it. Returns the fd, or
 * -1 after logging why. */
int bn_listen_open(const struct bn_config *cfg, int *owned);

/* TERM, INT and HUP blocked: from the start, before the model loads, so that one sent during
 * the load waits for the loop's signalfd rather than killing the daemon half-way (a cache
 * writer's temporary file left behind). 0, or -1. */
int bn_signals_block(void);

/* TERM, INT and HUP blocked and delivered through a signalfd; SIGPIPE ignored. The fd, or -1. */
int bn_signals_open(void);

#endif /* BITNETD_LISTEN_H */
