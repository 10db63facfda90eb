/* SPDX-License-Identifier: MIT */
/*
 * sched.h — iteration-level batching. Every step is one batch: each running sequence decodes one
 * token, and waiting requests join (their whole prompt as one row) up to the max batch, taken
 * round-robin across sessions so one client cannot starve another. Finished requests leave at
 * once and their slot is handed back before the next step.
 */
#ifndef BITNETD_SCHED_H
#define BITNETD_SCHED_H

#include "backend.h"
#include "session.h"

#include <stdint.h>

struct bn_sched;

struct bn_sched *bn_sched_new(const struct bn_backend_ops *ops, void *backend, uint32_t max_batch,
			      uint32_t eos_id);
void bn_sched_free(struct bn_sched *s);

/* A validated request joins its session's waiting FIFO. */
void bn_sched_enqueue(struct bn_sched *s, struct bn_req *r);

/* Admits waiting requests round-robin over sessions[0..n), runs one batched step and delivers
 * its tokens. Returns the number of rows run (0: nothing to do). */
uint32_t bn_sched_step(struct bn_sched *s, struct bn_session **sessions, uint32_t n_sessions);

/* Ends every request of session `sess`. status 0 means the client is gone: the requests are
 * dropped without touching its memory; otherwise each gets that terminal status and error. */
void bn_sched_drop_session(struct bn_sched *s, struct bn_session *sess, uint32_t status,
			   uint32_t error);

/* Ends all waiting (not yet running) requests of the sessions with `status`. */
void bn_sched_end_waiting(struct bn_sched *s, struct bn_session **sessions, uint32_t n_sessions,
			  uint32_t status);
/* Ends all running requests with `status`. */
void bn_sched_end_running(struct bn_sched *s, uint32_t status);

uint32_t bn_sched_running(const struct bn_sched *s);
uint32_t bn_sched_waiting(const struct bn_sched *s);
uint32_t bn_sched_max_batch(const struct bn_sched *s);

#endif /* BITNETD_SCHED_H */
