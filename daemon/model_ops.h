/* SPDX-License-Identifier: MIT */
/*
 * model_ops.h — the control requests about models (shm/PROTOCOL.md §15): MODELS, and the
 * commands LOAD, UNLOAD and RELOAD, whose answers wait for the model. The loop receives a
 * request (and the model name that follows a command) and calls these.
 */
#ifndef BITNETD_MODEL_OPS_H
#define BITNETD_MODEL_OPS_H

#include "models.h"

#include <stdint.h>

/* The bytes a control request of `op` carries after its 16: a model name for the commands. */
uint32_t bn_model_op_extra(uint32_t op);

/* BN_CTL_MODELS or a command, the request q and its name record in s->rx. Returns 0 when it
 * was answered, 1 when the answer waits for the model (s->ctl_wait_op; bn_model_op_poll
 * answers it), -1 when the answer could not be sent, -2 for a name record that breaks the
 * rules (a protocol violation). */
int bn_model_op(struct bn_models *m, struct bn_session *s, const struct bn_ctl_request *q,
		uint64_t now);

/* A command s waits on: 0 not done yet, 1 answered, -1 the answer could not be sent. */
int bn_model_op_poll(struct bn_models *m, struct bn_session *s);

#endif /* BITNETD_MODEL_OPS_H */
