/* SPDX-License-Identifier: MIT */
/*
 * Several models' steps at once. When more than one model has a step due and the registry's
 * backend lets steps overlap (bn_backend_ops.concurrent_steps: cuda), the loop plans each step
 * on its own thread as always (bn_sched_step_begin), then runs the first model's backend step
 * itself and hands each other one to a stepper thread of its own, waits for all
 * of them, and delivers each in turn (bn_sched_step_end). A step's work is its model's alone
 * (its scheduler, backend instance and requests), and the loop thread touches none of it
 * until the stepper has posted `done`, so nothing is shared while they run. A GPU runs the
 * models' kernels side by side on their streams, where one small batch leaves most of it idle.
 *
 * Each stepper waits on its `go` semaphore, runs the step it was given and posts `done`; the
 * semaphores order its reads and writes against the loop thread's. Steppers start at the
 * first overlapped step and stop when the registry closes. A stepper that cannot start leaves
 * its step to the loop thread: the steps then run one after another, as before.
 */
#include "models_internal.h"

#include "common/log.h"
#include "common/thread.h"
#include "serve/sched.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>

struct models_stepper {
	pthread_t thread;
	sem_t go, done;
	struct bn_sched *sched; /* the step to run; NULL with `go`: stop */
	int started;
};

static void wait_sem(sem_t *sem)
{
	while (sem_wait(sem) != 0 && errno == EINTR)
		;
}

static void *stepper_main(void *arg)
{
	struct models_stepper *st = arg;
	for (;;) {
		wait_sem(&st->go);
		if (!st->sched)
			return NULL;
		bn_sched_step_run(st->sched);
		sem_post(&st->done);
	}
}

/* Stepper k, started if it was not: 0, or -1 when it cannot be. */
static int stepper_ready(struct bn_models *m, uint32_t k)
{
	if (!m->steppers) {
		m->steppers = calloc(m->n, sizeof(*m->steppers));
		if (!m->steppers)
			return -1;
	}
	struct models_stepper *st = &m->steppers[k];
	if (st->started)
		return 0;
	if (sem_init(&st->go, 0, 0) != 0)
		return -1;
	if (sem_init(&st->done, 0, 0) != 0) {
		sem_destroy(&st->go);
		return -1;
	}
	int rc = bn_thread_start(&st->thread, stepper_main, st);
	if (rc != 0) {
		sem_destroy(&st->go);
		sem_destroy(&st->done);
		bn_log_warn("msg=\"no thread to overlap model steps; they run in turn\" rc=%d", rc);
		return -1;
	}
	st->started = 1;
	return 0;
}

uint32_t models_overlap_run(struct bn_models *m, struct bn_sched *const *s, uint32_t n)
{
	uint32_t handed = 0; /* s[1 .. 1 + handed) went to steppers 0 .. handed */
	for (uint32_t k = 1; k < n && stepper_ready(m, k - 1) == 0; k++) {
		m->steppers[k - 1].sched = s[k];
		sem_post(&m->steppers[k - 1].go);
		handed++;
	}
	bn_sched_step_run(s[0]);
	for (uint32_t k = 1 + handed; k < n; k++) /* those no stepper took */
		bn_sched_step_run(s[k]);
	for (uint32_t k = 0; k < handed; k++)
		wait_sem(&m->steppers[k].done);
	return handed;
}

void models_overlap_close(struct bn_models *m)
{
	if (!m->steppers)
		return;
	for (uint32_t k = 0; k < m->n; k++) {
		struct models_stepper *st = &m->steppers[k];
		if (!st->started)
			continue;
		st->sched = NULL;
		sem_post(&st->go);
		pthread_join(st->thread, NULL);
		sem_destroy(&st->go);
		sem_destroy(&st->done);
	}
	free(m->steppers);
	m->steppers = NULL;
}
