/* SPDX-License-Identifier: MIT */
#include "pool.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How long an idle worker spins before it sleeps: longer than the gap between two jobs of a
 * forward pass and between two decode steps, short enough not to burn a core when idle. */
#define POOL_SPIN_NS 2000000LL

struct bn_pool;

/* What a worker thread is started with. */
struct pool_worker {
	struct bn_pool *pool;
	uint32_t index;
};

static _Thread_local uint32_t thread_index; /* 0 unless this thread is a pool's worker */

/* A job's claim word: its generation in the high half, the next unclaimed task in the low
 * half. A task is claimed by a compare-and-swap of the whole word, so a worker that wakes
 * late, after the job it saw has ended, can never take a task of the next one. Between jobs
 * the word is closed (its task half CLAIM_CLOSED) before the next job's fields are written. */
#define CLAIM(gen, task) ((uint64_t)(gen) << 32 | (task))
#define CLAIM_GEN(w) ((uint32_t)((w) >> 32))
#define CLAIM_TASK(w) ((uint32_t)(w))
#define CLAIM_CLOSED UINT32_MAX

struct bn_pool {
	uint32_t n_threads;
	pthread_t *threads;
	struct pool_worker *workers; /* [n_threads]; entry 0 unused (the caller) */
	/* The job; written by the caller while no task of any job is claimable (every task of the
	 * last one done), published by the release store of `claim`. Read by a worker only while
	 * it holds a task of the job, which keeps the job from ending. */
	bn_pool_fn fn;
	void *ctx;
	uint32_t n_tasks;
	struct bn_pool_ahead job_ahead; /* the spans the caller set for this job */
	uint64_t claim;       /* atomic: CLAIM(generation, next task) */
	uint32_t done;        /* atomic: tasks of the current job finished */
	uint32_t generation;  /* atomic; the futex workers sleep on, bumped after `claim` */
	uint32_t sleepers;    /* atomic: workers in (or entering) FUTEX_WAIT */
	uint32_t stop;        /* atomic */
	struct bn_pool_ahead ahead; /* set by bn_pool_set_ahead, copied into job_ahead per job */
};

/* A span still to read: [at, end). */
struct ahead_span {
	const uint8_t *at, *end;
};

#define AHEAD_LINE 64
#define AHEAD_BURST 8 /* lines between two looks at whether to stop */

static struct ahead_span ahead_span_of(const struct bn_pool_ahead *a, uint32_t index)
{
	struct ahead_span s = { 0 };
	if (index < a->n) {
		s.at = a->start[index];
		s.end = s.at + a->bytes[index];
	}
	return s;
}

/* Prefetches the next AHEAD_BURST lines of s; 0 when it is done. A prefetch never faults,
 * so a span is only ever a hint. */
static int ahead_burst(struct ahead_span *s)
{
	if (s->at >= s->end)
		return 0;
	const uint8_t *stop = s->at + AHEAD_BURST * AHEAD_LINE;
	stop = stop < s->end ? stop : s->end;
	for (const uint8_t *q = s->at; q < stop; q += AHEAD_LINE)
		__builtin_prefetch(q, 0, 3);
	s->at = stop;
	return 1;
}

static long futex(uint32_t *word, int op, uint32_t val)
{
	return syscall(SYS_futex, word, op, val, NULL, NULL, 0);
}

/* Tells the core we are spinning: lets the sibling hyper-thread run, saves power. */
static inline void spin_pause(void)
{
#if defined(__x86_64__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	/* isb, not yield: yield does nothing on most ARM cores, so a loop paced by it would
	 * poll many times faster than one paced by x86's pause (Rust's spin hint takes isb for
	 * the same reason) */
	__asm__ volatile("isb" ::: "memory");
#endif
}

static int64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Claims the next task of the current job: 1 with *task set, 0 when none is left.
 *
 * n_tasks must be the count of the job whose word we saw. Acquiring the word makes its job's
 * count visible; a count of a later job is visible only after that job's release store of
 * n_tasks, which follows the closing of our word: the compare-and-swap then sees the word
 * moved and fails. Acquire on success makes the job's fields ours; the job cannot end while
 * we hold one of its tasks, so they stay as they are until we mark it done. */
static int claim_task(struct bn_pool *p, uint32_t *task)
{
	uint64_t w = __atomic_load_n(&p->claim, __ATOMIC_ACQUIRE);
	for (;;) {
		uint32_t n = __atomic_load_n(&p->n_tasks, __ATOMIC_ACQUIRE);
		if (CLAIM_TASK(w) >= n) /* CLAIM_CLOSED too */
			return 0;
		if (__atomic_compare_exchange_n(&p->claim, &w, w + 1, 0, __ATOMIC_ACQUIRE,
						__ATOMIC_ACQUIRE)) {
			*task = CLAIM_TASK(w);
			return 1;
		}
	}
}

/* Runs tasks until none is left to claim. Release on `done`: the task's outputs are visible to
 * the caller that sees the count complete. Returns how many tasks this thread ran; `ahead`
 * (workers only) gets this thread's span of the job's read-ahead, copied while a task is held. */
static uint32_t run_tasks(struct bn_pool *p, uint32_t index, struct ahead_span *ahead)
{
	uint32_t ran = 0, t;
	while (claim_task(p, &t)) {
		if (ran++ == 0 && ahead)
			*ahead = ahead_span_of(&p->job_ahead, index);
		p->fn(p->ctx, t);
		__atomic_fetch_add(&p->done, 1, __ATOMIC_RELEASE);
	}
	return ran;
}

/* Waits until `generation` differs from `seen`: read ahead, spin, then sleep. */
static uint32_t wait_for_job(struct bn_pool *p, uint32_t seen, struct ahead_span *ahead)
{
	int64_t until = mono_ns() + POOL_SPIN_NS;
	for (uint32_t spins = 0;; spins++) {
		uint32_t g = __atomic_load_n(&p->generation, __ATOMIC_ACQUIRE);
		if (g != seen)
			return g;
		if (ahead_burst(ahead))
			continue;
		if ((spins & 1023) == 1023) {
			if (mono_ns() > until)
				break;
			sched_yield(); /* a caller waiting for us, or anyone else, may need this CPU */
		}
		spin_pause();
	}
	for (;;) {
		/* seq_cst on both sides: either the caller sees sleepers != 0 and wakes us, or we
		 * see its new generation here (and FUTEX_WAIT re-checks it in the kernel). */
		__atomic_fetch_add(&p->sleepers, 1, __ATOMIC_SEQ_CST);
		uint32_t g = __atomic_load_n(&p->generation, __ATOMIC_SEQ_CST);
		if (g == seen)
			futex(&p->generation, FUTEX_WAIT_PRIVATE, seen);
		__atomic_fetch_sub(&p->sleepers, 1, __ATOMIC_SEQ_CST);
		g = __atomic_load_n(&p->generation, __ATOMIC_ACQUIRE);
		if (g != seen)
			return g;
	}
}

static void *worker_main(void *arg)
{
	const struct pool_worker *w = arg;
	struct bn_pool *p = w->pool;
	thread_index = w->index;
	uint32_t seen = 0;
	struct ahead_span ahead = { 0 };
	for (;;) {
		seen = wait_for_job(p, seen, &ahead);
		if (__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
			return NULL;
		/* Nobody waits for a worker that claims nothing: one the kernel did not run in time
		 * (a busy machine) finds the job taken and goes back to waiting. */
		run_tasks(p, w->index, &ahead);
	}
}

static void wake_workers(struct bn_pool *p)
{
	__atomic_fetch_add(&p->generation, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&p->sleepers, __ATOMIC_SEQ_CST))
		futex(&p->generation, FUTEX_WAKE_PRIVATE, INT32_MAX);
}

static void run_job(struct bn_pool *p, uint32_t n_tasks, bn_pool_fn fn, void *ctx)
{
	if (p->n_threads == 1 || n_tasks == 1) {
		for (uint32_t t = 0; t < n_tasks; t++)
			fn(ctx, t);
		return;
	}
	struct ahead_span ahead = ahead_span_of(&p->ahead, 0);
	/* The last job's word is closed and its tasks done, so no worker reads these now. */
	p->fn = fn;
	p->ctx = ctx;
	p->job_ahead = p->ahead;
	__atomic_store_n(&p->done, 0, __ATOMIC_RELAXED);
	/* Release: whoever sees this count also sees the last word closed (claim_task). */
	__atomic_store_n(&p->n_tasks, n_tasks, __ATOMIC_RELEASE);
	uint32_t gen = CLAIM_GEN(__atomic_load_n(&p->claim, __ATOMIC_RELAXED)) + 1;
	__atomic_store_n(&p->claim, CLAIM(gen, 0), __ATOMIC_RELEASE); /* publishes the job */
	wake_workers(p);
	run_tasks(p, 0, NULL);
	/* The job ends when its tasks are done, not when the workers have looked at it: a worker
	 * the kernel has not scheduled costs nothing unless it holds a task. Acquire pairs with
	 * each task's release. While one is held by a thread waiting for a CPU (more threads than
	 * free cores), yield ours now and then so it can run. */
	for (uint32_t spins = 1; __atomic_load_n(&p->done, __ATOMIC_ACQUIRE) != n_tasks; spins++) {
		if (ahead_burst(&ahead))
			continue;
		spin_pause();
		if ((spins & 255) == 0)
			sched_yield();
	}
	/* Every task is claimed, so only failing claims can still look at the word: closed, it
	 * tells them so whatever n_tasks they read next. */
	__atomic_store_n(&p->claim, CLAIM(gen, CLAIM_CLOSED), __ATOMIC_RELAXED);
}

void bn_pool_set_ahead(struct bn_pool *p, const struct bn_pool_ahead *ahead)
{
	p->ahead.n = 0; /* the caller's copy: workers read the job's, job_ahead */
	if (ahead)
		p->ahead = *ahead;
}

void bn_pool_run(struct bn_pool *p, uint32_t n_tasks, bn_pool_fn fn, void *ctx)
{
	if (n_tasks == 0)
		return;
	/* The caller is thread 0 of this job even if it is another pool's worker. */
	uint32_t own_index = thread_index;
	thread_index = 0;
	run_job(p, n_tasks, fn, ctx);
	thread_index = own_index;
}

uint32_t bn_pool_threads(const struct bn_pool *p)
{
	return p->n_threads;
}

uint32_t bn_pool_thread_index(void)
{
	return thread_index;
}

struct bn_pool *bn_pool_new(uint32_t n_threads)
{
	if (n_threads == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		n_threads = n > 0 ? (uint32_t)n : 1;
	}
	struct bn_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->n_threads = n_threads;
	p->threads = calloc(n_threads, sizeof(pthread_t));
	p->workers = calloc(n_threads, sizeof(*p->workers));
	if (!p->threads || !p->workers) {
		free(p->threads);
		free(p->workers);
		free(p);
		return NULL;
	}
	/* Workers start with every signal blocked: signals are the caller's business (bitnetd
	 * reads them from a signalfd, which only works if no thread takes them the old way). */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	uint32_t started = 1;
	for (; started < n_threads; started++) {
		p->workers[started] = (struct pool_worker){ .pool = p, .index = started };
		if (pthread_create(&p->threads[started], NULL, worker_main, &p->workers[started]) != 0)
			break;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (started < n_threads) {
		p->n_threads = started; /* stop the ones that started */
		bn_pool_free(p);
		return NULL;
	}
	return p;
}

void bn_pool_free(struct bn_pool *p)
{
	if (!p)
		return;
	__atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
	wake_workers(p);
	for (uint32_t i = 1; i < p->n_threads; i++)
		pthread_join(p->threads[i], NULL);
	free(p->threads);
	free(p->workers);
	free(p);
}
