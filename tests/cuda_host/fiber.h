/* SPDX-License-Identifier: MIT */
/*
 * fiber.h — cooperative user-space threads for the CUDA host harness: each GPU thread of a
 * block is one fiber, and the block's fibers take turns on one OS thread, switching only at
 * __syncthreads, warp collectives and exit.
 *
 * On x86-64 a switch is a hand-written save of the callee-saved registers and the stack pointer
 * (a few nanoseconds; warp shuffles switch once per lane, so this is the harness's inner loop);
 * elsewhere ucontext, whose swapcontext makes a system call per switch. Switches are announced
 * to AddressSanitizer (the stack it checks moves) and to ThreadSanitizer (each fiber is its own
 * thread there; a switch orders nothing, the caller announces what does).
 */
#ifndef BN_CUDA_HOST_FIBER_H
#define BN_CUDA_HOST_FIBER_H

#include <stddef.h>

#if !defined(__x86_64__) || defined(BN_FIBER_UCONTEXT)
#define BN_FIBER_USE_UCONTEXT 1
#include <ucontext.h>
#endif

struct bn_fiber {
#ifdef BN_FIBER_USE_UCONTEXT
	ucontext_t uc;
#else
	void *sp;                 /* saved stack pointer while switched out */
#endif
	void *stack;              /* lowest usable byte (a guard page lies below it) */
	size_t stack_size;        /* 0 for a thread's own stack */
	void (*entry)(void *);    /* what a started fiber runs; it must never return */
	void *arg;
	void *asan_fake_stack;    /* AddressSanitizer's bookkeeping across a switch */
	const void *asan_bottom;  /* the stack AddressSanitizer is told about when switching here */
	size_t asan_size;
	void *tsan_fiber;         /* ThreadSanitizer's context for this fiber */
};

/* The calling OS thread's own context, to switch from and back to. */
void bn_fiber_init_thread(struct bn_fiber *self);
/* A stack of `size` bytes (rounded up to pages) with a guard page under it, kept for the
 * life of the process (the harness reuses its fibers for every block). 0 or -1. */
int bn_fiber_create(struct bn_fiber *f, size_t size);
/* Makes the next switch to f start entry(arg) at the top of its stack. */
void bn_fiber_start(struct bn_fiber *f, void (*entry)(void *), void *arg);
/* Saves the running context in `from` and runs `to` until something switches back. */
void bn_fiber_switch(struct bn_fiber *from, struct bn_fiber *to);
/* As bn_fiber_switch, for a fiber that will not run again until bn_fiber_start restarts it. */
void bn_fiber_exit(struct bn_fiber *from, struct bn_fiber *to) __attribute__((noreturn));

#endif /* BN_CUDA_HOST_FIBER_H */
