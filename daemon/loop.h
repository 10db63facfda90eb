/* SPDX-License-Identifier: MIT */
/*
 * loop.h — the daemon's event loop: one io_uring for the listening socket, every session's
 * socket (hang-up and control requests), every doorbell eventfd, the signalfd and timeouts.
 * While work is in flight the loop does not sleep: between steps it polls the rings.
 */
#ifndef BITNETD_LOOP_H
#define BITNETD_LOOP_H

#include "backends/backend.h"
#include "config.h"

struct bn_loop;
struct bn_text_prep;

/* Sets up io_uring, signals and the listening socket (inherited from systemd or created at
 * cfg->socket_path), with the text side `prep` built beside the backend (textprep.h; NULL:
 * built here). Returns NULL after logging why; *exit_code says which failure. */
struct bn_loop *bn_loop_new(const struct bn_config *cfg, const struct bn_backend_ops *ops,
			    void *backend, const struct bn_model_desc *model,
			    struct bn_text_prep *prep, int *exit_code);

/* Serves until SIGTERM/SIGINT, then drains. Returns 0. */
int bn_loop_run(struct bn_loop *l);

void bn_loop_free(struct bn_loop *l);

#endif /* BITNETD_LOOP_H */
