/* SPDX-License-Identifier: MIT */
/*
 * block.c — one thread block as fibers: the GPU threads take turns on the launching OS thread,
 * each running until it waits (at __syncthreads or a warp collective) or exits; then a thread
 * that may go on is picked at random: usually a lane of the same warp (so a warp runs ahead
 * through its shuffles while its 32 stacks stay in the cache), one time in eight any thread of
 * the block. So the order in which threads and warps pass a barrier changes at every barrier
 * and between runs, and a read of shared memory that a missing barrier leaves unordered sees
 * another value (often the poison grid.c left there).
 *
 * __syncthreads releases when every thread has arrived or exited (exited threads count as
 * arrived, as on the hardware since Volta). A warp collective completes when all 32 lanes of
 * the warp have arrived at the same operation; a partial mask, a warp with fewer than 32
 * threads, a lane that has exited or lanes at different operations fail the program with a
 * message, as does a block in which nobody can go on (a deadlock).
 *
 * Under ThreadSanitizer (BN_CUDA_HOST_TSAN) each GPU thread is a TSan fiber, a switch orders
 * nothing, and this file announces what CUDA orders: the launching thread's work before the
 * block, a barrier's arrivals before its departures (exited threads arrive at every barrier),
 * a warp collective's the same within the warp, the threads' ends before the launch returns.
 * Shared-memory accesses that no barrier orders are then reported as data races.
 */
#define _GNU_SOURCE
#include "block.h"

#include "fiber.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__) || defined(BN_CUDA_HOST_TSAN)
#define STACK_BYTES (256u << 10) /* sanitizer frames are several times larger */
#else
#define STACK_BYTES (64u << 10)
#endif

#ifdef BN_CUDA_HOST_TSAN
#include <sanitizer/tsan_interface.h>
#define HAPPENS_BEFORE(sync) __tsan_release(sync)
#define HAPPENS_AFTER(sync) __tsan_acquire(sync)
#else
#define HAPPENS_BEFORE(sync) ((void)(sync))
#define HAPPENS_AFTER(sync) ((void)(sync))
#endif

enum thread_state { RUNNABLE, AT_BARRIER, AT_WARP, EXITED };

struct gpu_thread {
	struct bn_cuda_host_thread pub;
	struct bn_fiber fiber;
	enum thread_state state;
	uint32_t round;          /* of the barrier or collective it waits at (ThreadSanitizer) */
};

struct warp {
	uint32_t lanes;          /* threads of the block in this warp */
	uint32_t n_runnable;     /* lanes that may go on, in runnable[] */
	uint8_t runnable[BN_CUDA_HOST_WARP];
	uint32_t ready_at;       /* its place in blk.ready while it has runnable lanes */
	uint32_t arrived, exited;
	uint32_t first;          /* the lane that arrived first at the collective being gathered */
	struct bn_cuda_host_collective at[BN_CUDA_HOST_WARP];
	uint64_t result[BN_CUDA_HOST_WARP];
	/* ThreadSanitizer's sync objects, by the parity of the collective's round: a lane that
	 * arrives at the next round must not be ordered before one still leaving this one */
	uint32_t round;
	char sync[2];
};

/* The block being run: one at a time in the process (launches are serialised). */
static struct {
	const struct bn_cuda_host_launch *launch;
	uint32_t n, exited, at_barrier;
	uint32_t n_ready, ready[BN_CUDA_HOST_MAX_THREADS / BN_CUDA_HOST_WARP]; /* warps with runnable lanes */
	uint64_t rng;
	struct gpu_thread threads[BN_CUDA_HOST_MAX_THREADS];
	uint32_t n_fibers;       /* threads whose fiber (stack) exists; kept for later blocks */
	struct warp warps[BN_CUDA_HOST_MAX_THREADS / BN_CUDA_HOST_WARP];
	struct bn_fiber scheduler;
	const struct bn_cuda_host_where *where;
	uint32_t barrier_round;
	char barrier_sync[2], start_sync, end_sync; /* ThreadSanitizer's, as warp.sync */
} blk;

struct bn_cuda_host_thread *bn_cuda_host_self;
uint3 bn_cuda_host_block_idx;
dim3 bn_cuda_host_block_dim, bn_cuda_host_grid_dim;

/* ------------------------------------------------------------------------------------------ */
/* Failing                                                                                     */
/* ------------------------------------------------------------------------------------------ */

void bn_cuda_host_set_where(const struct bn_cuda_host_where *w)
{
	blk.where = w;
}

void bn_cuda_host_fail(const char *fmt, ...)
{
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	const struct bn_cuda_host_where *w = blk.where;
	if (w && bn_cuda_host_self) {
		const uint3 b = bn_cuda_host_block_idx, t = bn_cuda_host_self->idx;
		fprintf(stderr, "cuda host harness: %s, block (%u,%u,%u) thread (%u,%u,%u): %s\n"
			"  (launch %llu of this process%s; BN_CUDA_HOST_SEED=%llu)\n",
			w->kernel_name, b.x, b.y, b.z, t.x, t.y, t.z, msg, (unsigned long long)w->launch,
			w->pass ? ", the race check's second run" : "", (unsigned long long)w->seed);
	} else if (w) {
		fprintf(stderr, "cuda host harness: %s: %s\n  (launch %llu of this process; BN_CUDA_HOST_SEED=%llu)\n",
			w->kernel_name, msg, (unsigned long long)w->launch, (unsigned long long)w->seed);
	} else {
		fprintf(stderr, "cuda host harness: %s\n", msg);
	}
	abort();
}

/* ------------------------------------------------------------------------------------------ */
/* Taking turns                                                                                */
/* ------------------------------------------------------------------------------------------ */

uint64_t bn_cuda_host_mix(uint64_t a, uint64_t b)
{
	uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static uint64_t random_bits(void)
{
	blk.rng ^= blk.rng >> 12; /* xorshift64* */
	blk.rng ^= blk.rng << 25;
	blk.rng ^= blk.rng >> 27;
	return blk.rng * 0x2545F4914F6CDD1Dull;
}

/* A number below n from 32 random bits. */
static uint32_t below(uint32_t bits, uint32_t n)
{
	return (uint32_t)((uint64_t)bits * n >> 32);
}

static void make_runnable(struct gpu_thread *t)
{
	struct warp *w = &blk.warps[t->pub.warp];
	t->state = RUNNABLE;
	if (!w->n_runnable) {
		w->ready_at = blk.n_ready;
		blk.ready[blk.n_ready++] = t->pub.warp;
	}
	w->runnable[w->n_runnable++] = (uint8_t)t->pub.lane;
}

/* A runnable thread, at random: of warp `near` (when it has one) seven times in eight. */
static struct gpu_thread *take_runnable(uint32_t near)
{
	if (!blk.n_ready)
		return NULL;
	uint64_t r = random_bits();
	uint32_t wi = near;
	if (wi >= BN_CUDA_HOST_MAX_THREADS / BN_CUDA_HOST_WARP || !blk.warps[wi].n_runnable ||
	    (r & 7) == 0)
		wi = blk.ready[below((uint32_t)random_bits(), blk.n_ready)];
	struct warp *w = &blk.warps[wi];
	uint32_t i = below((uint32_t)(r >> 32), w->n_runnable), lane = w->runnable[i];
	w->runnable[i] = w->runnable[--w->n_runnable];
	if (!w->n_runnable) { /* off the ready list: the last one takes its place */
		uint32_t moved = blk.ready[--blk.n_ready];
		blk.ready[w->ready_at] = moved;
		blk.warps[moved].ready_at = w->ready_at;
	}
	return &blk.threads[wi * BN_CUDA_HOST_WARP + lane];
}

/* t has stopped (waiting or released): some runnable thread goes on, t itself perhaps. With
 * none, the scheduler gets control back and reports the deadlock. */
static void wait_turn(struct gpu_thread *t)
{
	struct gpu_thread *next = take_runnable(t->pub.warp);
	if (next == t)
		return;
	if (next) {
		bn_cuda_host_self = &next->pub;
		bn_fiber_switch(&t->fiber, &next->fiber);
	} else {
		bn_fiber_switch(&t->fiber, &blk.scheduler);
	}
	/* resumed: whoever switched here set bn_cuda_host_self to t */
}

static struct gpu_thread *running(void)
{
	return (struct gpu_thread *)bn_cuda_host_self;
}

/* ------------------------------------------------------------------------------------------ */
/* __syncthreads                                                                               */
/* ------------------------------------------------------------------------------------------ */

static void release_barrier(void)
{
	for (uint32_t i = 0; i < blk.n; i++)
		if (blk.threads[i].state == AT_BARRIER)
			make_runnable(&blk.threads[i]);
	blk.at_barrier = 0;
	blk.barrier_round++;
}

void bn_cuda_host_syncthreads(void)
{
	struct gpu_thread *t = running();
	t->state = AT_BARRIER;
	t->round = blk.barrier_round;
	HAPPENS_BEFORE(&blk.barrier_sync[t->round & 1]);
	blk.at_barrier++;
	if (blk.at_barrier + blk.exited == blk.n)
		release_barrier();
	wait_turn(t);
	HAPPENS_AFTER(&blk.barrier_sync[t->round & 1]);
}

/* ------------------------------------------------------------------------------------------ */
/* Warp collectives                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* The lanes of a warp in a state, as "0-4,9" for messages. */
static const char *lanes_in(const struct warp *w, uint32_t warp, enum thread_state state, char *buf,
			    size_t cap)
{
	size_t at = 0;
	buf[0] = 0;
	for (uint32_t l = 0; l < w->lanes; l++) {
		if (blk.threads[warp * BN_CUDA_HOST_WARP + l].state != state)
			continue;
		uint32_t end = l;
		while (end + 1 < w->lanes &&
		       blk.threads[warp * BN_CUDA_HOST_WARP + end + 1].state == state)
			end++;
		int n = end > l ? snprintf(buf + at, cap - at, "%s%u-%u", at ? "," : "", l, end)
				: snprintf(buf + at, cap - at, "%s%u", at ? "," : "", l);
		if (n < 0 || (size_t)n >= cap - at)
			break;
		at += (size_t)n;
		l = end;
	}
	return buf;
}

/* The source lane of a shuffle, as PTX's shfl.sync defines it for CUDA's width segments: a
 * source outside the segment (or, for up, before it) leaves the lane its own value. */
static uint32_t shuffle_source(enum bn_cuda_host_op op, uint32_t lane, int32_t arg, uint32_t width)
{
	uint32_t segmask = (BN_CUDA_HOST_WARP - width) & 31, b = (uint32_t)arg & 31;
	int32_t max_lane = (int32_t)((lane & segmask) | (op == BN_CUDA_HOST_SHFL_UP ? 0 : 31 & ~segmask));
	int32_t j;
	switch (op) {
	case BN_CUDA_HOST_SHFL_UP:
		j = (int32_t)lane - (int32_t)b;
		return j >= max_lane ? (uint32_t)j : lane;
	case BN_CUDA_HOST_SHFL_DOWN:
		j = (int32_t)(lane + b);
		break;
	case BN_CUDA_HOST_SHFL_XOR:
		j = (int32_t)(lane ^ b);
		break;
	default: /* index */
		j = (int32_t)((lane & segmask) | (b & ~segmask));
		break;
	}
	return j <= max_lane ? (uint32_t)j : lane;
}

static void complete(struct warp *w)
{
	const struct bn_cuda_host_collective *first = &w->at[w->first];
	switch (first->op) {
	case BN_CUDA_HOST_SHFL_IDX:
	case BN_CUDA_HOST_SHFL_UP:
	case BN_CUDA_HOST_SHFL_DOWN:
	case BN_CUDA_HOST_SHFL_XOR:
		for (uint32_t l = 0; l < BN_CUDA_HOST_WARP; l++)
			w->result[l] = w->at[shuffle_source(first->op, l, w->at[l].arg, first->width)].value;
		break;
	case BN_CUDA_HOST_BALLOT: {
		uint64_t bits = 0;
		for (uint32_t l = 0; l < BN_CUDA_HOST_WARP; l++)
			bits |= (uint64_t)(w->at[l].value != 0) << l;
		for (uint32_t l = 0; l < BN_CUDA_HOST_WARP; l++)
			w->result[l] = bits;
		break;
	}
	default: /* __syncwarp, wmma: arriving together was the point */
		break;
	}
}

static int same_operation(const struct bn_cuda_host_collective *a, const struct bn_cuda_host_collective *b)
{
	if (a->op != b->op || (a->name != b->name && strcmp(a->name, b->name) != 0))
		return 0;
	if (a->op == BN_CUDA_HOST_WMMA)
		return a->ptr == b->ptr && a->ldm == b->ldm && a->layout == b->layout && a->value == b->value;
	return a->size == b->size && a->width == b->width;
}

static void check_collective(const struct gpu_thread *t, const struct warp *w,
			     const struct bn_cuda_host_collective *c)
{
	char buf[160];
	if (c->mask != BN_CUDA_HOST_FULL_MASK)
		bn_cuda_host_fail("%s under mask 0x%08x: the harness runs warp collectives under the full mask only (a partial mask leaves lanes out of an exchange the code may count them in)",
				  c->name, c->mask);
	if (w->lanes != BN_CUDA_HOST_WARP)
		bn_cuda_host_fail("%s in warp %u, which has only %u threads (a block of %u): the full mask names lanes that do not exist",
				  c->name, t->pub.warp, w->lanes, blk.n);
	if (w->exited)
		bn_cuda_host_fail("%s in warp %u: lane(s) %s have exited, and the full mask waits for them",
				  c->name, t->pub.warp, lanes_in(w, t->pub.warp, EXITED, buf, sizeof(buf)));
	if (c->op <= BN_CUDA_HOST_SHFL_XOR && (c->width == 0 || c->width > BN_CUDA_HOST_WARP ||
					       (c->width & (c->width - 1))))
		bn_cuda_host_fail("%s with width %u: the width must be a power of two up to 32", c->name, c->width);
	if (!w->arrived)
		return;
	const struct bn_cuda_host_collective *f = &w->at[w->first];
	if (!same_operation(f, c))
		bn_cuda_host_fail("lane %u is at %s (%u-byte operand, pointer %p, ldm %u) while lane %u of its warp waits at %s (%u-byte operand, pointer %p, ldm %u): a warp collective needs all 32 lanes at the same operation",
				  t->pub.lane, c->name, c->size, c->ptr, c->ldm, w->first, f->name, f->size,
				  f->ptr, f->ldm);
}

uint64_t bn_cuda_host_warp_collective(const struct bn_cuda_host_collective *c)
{
	struct gpu_thread *t = running();
	struct warp *w = &blk.warps[t->pub.warp];
	check_collective(t, w, c);
	if (!w->arrived)
		w->first = t->pub.lane;
	w->at[t->pub.lane] = *c;
	w->arrived++;
	t->state = AT_WARP;
	t->round = w->round;
	HAPPENS_BEFORE(&w->sync[t->round & 1]);
	if (w->arrived == BN_CUDA_HOST_WARP) {
		complete(w);
		w->arrived = 0;
		w->round++;
		for (uint32_t l = 0; l < BN_CUDA_HOST_WARP; l++)
			make_runnable(&blk.threads[t->pub.warp * BN_CUDA_HOST_WARP + l]);
	}
	wait_turn(t);
	HAPPENS_AFTER(&w->sync[t->round & 1]);
	return w->result[t->pub.lane];
}

/* ------------------------------------------------------------------------------------------ */
/* A block                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static void thread_exit(struct gpu_thread *t) __attribute__((noreturn));
static void thread_exit(struct gpu_thread *t)
{
	struct warp *w = &blk.warps[t->pub.warp];
	char buf[160];
	if (w->arrived)
		bn_cuda_host_fail("lane %u of warp %u returned while lanes %s wait at %s: a warp collective under the full mask waits for every lane",
				  t->pub.lane, t->pub.warp, lanes_in(w, t->pub.warp, AT_WARP, buf, sizeof(buf)),
				  w->at[w->first].name);
	t->state = EXITED;
	HAPPENS_BEFORE(&blk.end_sync);
	HAPPENS_BEFORE(&blk.barrier_sync[blk.barrier_round & 1]); /* and at every later barrier */
	HAPPENS_BEFORE(&blk.barrier_sync[(blk.barrier_round + 1) & 1]);
	blk.exited++;
	w->exited++;
	if (blk.at_barrier && blk.at_barrier + blk.exited == blk.n)
		release_barrier();
	struct gpu_thread *next = take_runnable(t->pub.warp);
	bn_cuda_host_self = next ? &next->pub : NULL;
	bn_fiber_exit(&t->fiber, next ? &next->fiber : &blk.scheduler);
}

static void thread_main(void *arg)
{
	struct gpu_thread *t = arg;
	HAPPENS_AFTER(&blk.start_sync);
	blk.launch->run_thread(blk.launch->args);
	thread_exit(t);
}

static void deadlock(void)
{
	char msg[1024], buf[160];
	size_t at = (size_t)snprintf(msg, sizeof(msg), "deadlock: %u of %u threads wait at __syncthreads, %u have exited",
				     blk.at_barrier, blk.n, blk.exited);
	for (uint32_t wi = 0; wi * BN_CUDA_HOST_WARP < blk.n && at < sizeof(msg); wi++) {
		const struct warp *w = &blk.warps[wi];
		if (w->arrived)
			at += (size_t)snprintf(msg + at, sizeof(msg) - at, "; warp %u: lanes %s wait at %s", wi,
					       lanes_in(w, wi, AT_WARP, buf, sizeof(buf)), w->at[w->first].name);
	}
	bn_cuda_host_self = NULL;
	bn_cuda_host_fail("%s", msg);
}

static void prepare_threads(const dim3 d)
{
	for (uint32_t i = 0; i < blk.n; i++) {
		struct gpu_thread *t = &blk.threads[i];
		if (i >= blk.n_fibers) {
			if (bn_fiber_create(&t->fiber, STACK_BYTES) != 0)
				bn_cuda_host_fail("no memory for the stack of GPU thread %u", i);
			blk.n_fibers = i + 1;
		}
		t->pub.idx = (uint3){ i % d.x, i / d.x % d.y, i / (d.x * d.y) };
		t->pub.lane = i % BN_CUDA_HOST_WARP;
		t->pub.warp = i / BN_CUDA_HOST_WARP;
		bn_fiber_start(&t->fiber, thread_main, t);
	}
	for (uint32_t wi = 0; wi * BN_CUDA_HOST_WARP < blk.n; wi++) {
		uint32_t left = blk.n - wi * BN_CUDA_HOST_WARP;
		blk.warps[wi] = (struct warp){ .lanes = left < BN_CUDA_HOST_WARP ? left : BN_CUDA_HOST_WARP };
	}
	for (uint32_t i = 0; i < blk.n; i++)
		make_runnable(&blk.threads[i]);
}

void bn_cuda_host_run_block(const struct bn_cuda_host_launch *l, uint3 idx, uint64_t seed)
{
	const dim3 d = l->block;
	blk.launch = l;
	blk.n = d.x * d.y * d.z;
	blk.exited = blk.at_barrier = blk.n_ready = 0;
	blk.rng = seed | 1;
	bn_cuda_host_block_idx = idx;
	bn_cuda_host_block_dim = l->block;
	bn_cuda_host_grid_dim = l->grid;
	prepare_threads(d);
	bn_fiber_init_thread(&blk.scheduler);
	struct gpu_thread *first = take_runnable(UINT32_MAX);
	bn_cuda_host_self = &first->pub;
	HAPPENS_BEFORE(&blk.start_sync);
	bn_fiber_switch(&blk.scheduler, &first->fiber);
	/* back when no thread can go on: all have exited, or they wait for each other */
	if (blk.exited != blk.n)
		deadlock();
	HAPPENS_AFTER(&blk.end_sync);
	bn_cuda_host_self = NULL;
}
