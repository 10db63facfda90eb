/* SPDX-License-Identifier: MIT */
/*
 * pool.h — the project's thread pool: n - 1 worker threads plus the caller split the tasks
 * of one job, claimed one at a time from a shared counter. A forward pass runs hundreds of
 * short jobs per token, so workers spin between jobs and only sleep (futex) after a quiet
 * spell: waking a sleeping thread costs ~10 us on a VM (docs/PERFORMANCE.md), a job ~50 us.
 * A job ends when its tasks are done, whoever ran them: on a busy machine the caller takes
 * every task a worker did not start in time, and never waits for a worker that holds none.
 *
 * Which thread runs a task never changes a result: every task writes its own outputs.
 */
#ifndef BITNET_POOL_H
#define BITNET_POOL_H

#include <stddef.h>
#include <stdint.h>

struct bn_pool;

typedef void (*bn_pool_fn)(void *ctx, uint32_t task);

/* n_threads counts the caller; 0 means one per online CPU. NULL on failure. */
struct bn_pool *bn_pool_new(uint32_t n_threads);
void bn_pool_free(struct bn_pool *p);
uint32_t bn_pool_threads(const struct bn_pool *p);
/* Runs fn(ctx, t) for every t in [0, n_tasks) and returns when all are done. One job at a
 * time: the pool belongs to one calling thread. */
void bn_pool_run(struct bn_pool *p, uint32_t n_tasks, bn_pool_fn fn, void *ctx);
/* The calling thread's index in the pool whose task it is running, in [0, bn_pool_threads):
 * 0 for the thread that called bn_pool_run (even a worker of another pool) and for any thread
 * outside a job. For per-thread scratch in a task. */
uint32_t bn_pool_thread_index(void);

/* What the job after this one will read first, a span per thread index (thread i takes span
 * i, when there is one). A thread that has no task left in a job, and the workers while they
 * wait for the next job, prefetch their span into their caches meanwhile, so that memory keeps
 * streaming through the joins and through the caller's serial work between two jobs. Spans are
 * hints: prefetched, never loaded, so they change no result and a stale one costs only
 * bandwidth. */
#define BN_POOL_AHEAD_SPANS 8
struct bn_pool_ahead {
	const uint8_t *start[BN_POOL_AHEAD_SPANS];
	size_t bytes[BN_POOL_AHEAD_SPANS];
	uint32_t n;
};
/* From the next job on (NULL: nothing to read). Between jobs, by the pool's caller. */
void bn_pool_set_ahead(struct bn_pool *p, const struct bn_pool_ahead *ahead);

#endif /* BITNET_POOL_H */
