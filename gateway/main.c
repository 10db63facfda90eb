/* SPDX-License-Identifier: MIT */
/*
 * bitnet-gateway — the OpenAI-compatible HTTP API of a bitnetd daemon, as one of its ring
 * clients (DESIGN.md, "Edges"). Exit status: 0 after SIGTERM/SIGINT, 2 usage, 3 cannot
 * listen.
 */
#define _GNU_SOURCE
#include "config.h"
#include "log.h"
#include "server.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>

/* Seconds running requests get to finish after SIGTERM before they are ended. */
#define DRAIN_S 10

int main(int argc, char **argv)
{
	struct gw_config cfg;
	int rc = gw_config_parse(&cfg, argc, argv);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	gw_log_set_level(cfg.log_level);
	/* Signals are waited for here; every other thread (libmicrohttpd's included) blocks
	 * them, and a peer that closes its socket is an error return, not a SIGPIPE. */
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN);
	struct gw_server srv;
	if (gw_server_start(&srv, &cfg) < 0) {
		gw_server_stop(&srv, 0);
		gw_config_free(&cfg);
		return 3;
	}
	int sig = 0;
	sigwait(&stop, &sig);
	gw_log_info("msg=\"stopping\" signal=%s drain_s=%d", sig == SIGTERM ? "TERM" : "INT", DRAIN_S);
	gw_server_stop(&srv, DRAIN_S);
	gw_config_free(&cfg);
	gw_log_info("msg=\"stopped\"");
	return 0;
}
