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

struct bn_pool {
	uint32_t n_threads;
	pthread_t *threads;
	struct pool_worker *workers; /* [n_threads]; entry 0 unused (the caller) */
	/* The job; written by the caller before it bumps `generation`. */
	bn_pool_fn fn;
	void *ctx;
	uint32_t n_tasks;
	uint32_t next_task;   /* atomic: next unclaimed task */
	uint32_t busy;        /* atomic: workers still inside the current job */
	uint32_t generation;  /* atomic; also the futex workers sleep on */
	uint32_t sleepers;    /* atomic: workers in (or entering) FUTEX_WAIT */
	uint32_t stop;        /* atomic */
	struct bn_pool_ahead ahead; /* the current job's; n = 0 for none */
};

/* A span still to read: [at, end). */
struct ahead_span {
	const uint8_t *at, *end;
};

#define AHEAD_LINE 64
#define AHEAD_BURST 8 /* lines between two looks at whether to stop */

static struct ahead_span ahead_span_of(const struct bn_pool *p, uint32_t index)
{
	struct ahead_span s = { 0 };
	if (index < p->ahead.n) {
		s.at = p->ahead.start[index];
		s.end = s.at + p->ahead.bytes[index];
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

static int64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void run_tasks(struct bn_pool *p)
{
	for (;;) {
		uint32_t t = __atomic_fetch_add(&p->next_task, 1, __ATOMIC_RELAXED);
		if (t >= p->n_tasks)
			return;
		p->fn(p->ctx, t);
	}
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
		__builtin_ia32_pause();
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
		if (__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
			return NULL;
		}
		run_tasks(p);
		/* Copied before busy drops: the caller rewrites the job's fields after that. */
		ahead = ahead_span_of(p, w->index);
		/* Release: our task outputs are visible to the caller that sees busy drop. */
		__atomic_fetch_sub(&p->busy, 1, __ATOMIC_RELEASE);
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
	struct ahead_span ahead = ahead_span_of(p, 0);
	p->fn = fn;
	p->ctx = ctx;
	p->n_tasks = n_tasks;
	__atomic_store_n(&p->next_task, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&p->busy, p->n_threads - 1, __ATOMIC_RELAXED);
	wake_workers(p); /* publishes the job fields above */
	run_tasks(p);
	/* Acquire pairs with each worker's release: their outputs are ours to read. A worker we
	 * wait for may be waiting for a CPU (more threads than free cores): after a short spin,
	 * yield ours now and then so it can run. */
	for (uint32_t spins = 1; __atomic_load_n(&p->busy, __ATOMIC_ACQUIRE) != 0; spins++) {
		if (ahead_burst(&ahead))
			continue;
		__builtin_ia32_pause();
		if ((spins & 255) == 0)
			sched_yield();
	}
}

void bn_pool_set_ahead(struct bn_pool *p, const struct bn_pool_ahead *ahead)
{
	p->ahead.n = 0;
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
