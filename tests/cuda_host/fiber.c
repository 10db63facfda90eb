/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "fiber.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FIBER_ASAN 1
#endif
#endif
#ifdef __SANITIZE_ADDRESS__
#define FIBER_ASAN 1
#endif
/* Under ThreadSanitizer the harness's runtime itself is built without instrumentation (the
 * Makefile says why) and told so by this macro. */
#ifdef BN_CUDA_HOST_TSAN
#define FIBER_TSAN 1
#endif

#ifdef FIBER_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef FIBER_TSAN
#include <sanitizer/tsan_interface.h>
#endif

#if defined(FIBER_ASAN) || defined(BN_FIBER_USE_UCONTEXT)
/* The two ends of the switch in progress: the side that resumes reads them. */
static _Thread_local struct bn_fiber *switching_from, *switching_to;
#define SAY_SWITCH(from, to) (switching_from = (from), switching_to = (to))
#else
#define SAY_SWITCH(from, to) ((void)(from), (void)(to))
#endif

static void before_switch(struct bn_fiber *from, struct bn_fiber *to, int from_exits)
{
#ifdef FIBER_ASAN
	/* NULL: the leaving fiber's fake stack (use-after-return frames) can be dropped */
	__sanitizer_start_switch_fiber(from_exits ? NULL : &from->asan_fake_stack, to->asan_bottom,
				       to->asan_size);
#else
	(void)from_exits;
#endif
#ifdef FIBER_TSAN
	/* no order between the two sides: the fibers' owner says what synchronises them */
	__tsan_switch_to_fiber(to->tsan_fiber, __tsan_switch_to_fiber_no_sync);
#endif
	SAY_SWITCH(from, to);
}

/* On the resumed side: AddressSanitizer learns the stack we came from (a thread's own stack is
 * known only this way, at the first switch away from it). */
static void after_switch(struct bn_fiber *self)
{
#ifdef FIBER_ASAN
	struct bn_fiber *from = switching_from;
	const void *bottom;
	size_t size;
	__sanitizer_finish_switch_fiber(self->asan_fake_stack, &bottom, &size);
	if (from && !from->stack_size) {
		from->asan_bottom = bottom;
		from->asan_size = size;
	}
#else
	(void)self;
#endif
}

static void fiber_main(struct bn_fiber *f) __attribute__((noreturn, used));
static void fiber_main(struct bn_fiber *f)
{
	after_switch(f);
	f->entry(f->arg);
	fprintf(stderr, "cuda host harness: a fiber's entry returned (it must switch away)\n");
	abort();
}

#ifdef BN_FIBER_USE_UCONTEXT

static void ucontext_main(void)
{
	fiber_main(switching_to);
}

void bn_fiber_start(struct bn_fiber *f, void (*entry)(void *), void *arg)
{
	f->entry = entry;
	f->arg = arg;
	if (getcontext(&f->uc) != 0)
		abort();
	f->uc.uc_stack.ss_sp = f->stack;
	f->uc.uc_stack.ss_size = f->stack_size;
	f->uc.uc_link = NULL;
	makecontext(&f->uc, ucontext_main, 0);
}

static void swap_contexts(struct bn_fiber *from, struct bn_fiber *to)
{
	if (swapcontext(&from->uc, &to->uc) != 0)
		abort();
}

#else /* x86-64 */

/* bn_fiber_swap_sp(&from->sp, to->sp): pushes the callee-saved registers, saves the stack
 * pointer, loads the other one and pops its registers. The SSE and x87 control words, which the
 * ABI also has a callee preserve, are left alone: nothing that runs on a fiber changes the
 * rounding mode or the exception masks, and loading them costs more than the rest of a switch.
 * A fiber that has not run yet "returns" into bn_fiber_trampoline, which calls r13(r12) =
 * fiber_main(f). */
void bn_fiber_swap_sp(void **save_sp, void *load_sp);
void bn_fiber_trampoline(void);
__asm__(".text\n"
	".p2align 4\n"
	".globl bn_fiber_swap_sp\n"
	".hidden bn_fiber_swap_sp\n"
	".type bn_fiber_swap_sp, @function\n"
	"bn_fiber_swap_sp:\n"
	"	pushq %rbp\n"
	"	pushq %rbx\n"
	"	pushq %r12\n"
	"	pushq %r13\n"
	"	pushq %r14\n"
	"	pushq %r15\n"
	"	movq %rsp, (%rdi)\n"
	"	movq %rsi, %rsp\n"
	"	popq %r15\n"
	"	popq %r14\n"
	"	popq %r13\n"
	"	popq %r12\n"
	"	popq %rbx\n"
	"	popq %rbp\n"
	"	ret\n"
	".size bn_fiber_swap_sp, .-bn_fiber_swap_sp\n"
	".p2align 4\n"
	".globl bn_fiber_trampoline\n"
	".hidden bn_fiber_trampoline\n"
	".type bn_fiber_trampoline, @function\n"
	"bn_fiber_trampoline:\n"
	"	.cfi_startproc\n"
	"	.cfi_undefined rip\n" /* backtraces end here */
	"	movq %r12, %rdi\n"
	"	callq *%r13\n"
	"	ud2\n"
	"	.cfi_endproc\n"
	".size bn_fiber_trampoline, .-bn_fiber_trampoline\n");

/* The frame bn_fiber_swap_sp pops, lowest address first. */
enum { FRAME_R15, FRAME_R14, FRAME_R13, FRAME_R12, FRAME_RBX, FRAME_RBP,
       FRAME_RET, FRAME_WORDS };

void bn_fiber_start(struct bn_fiber *f, void (*entry)(void *), void *arg)
{
	f->entry = entry;
	f->arg = arg;
	/* the trampoline's call must find rsp 16-byte aligned: it starts where the frame ends, at
	 * the aligned top */
	uintptr_t top = ((uintptr_t)f->stack + f->stack_size) & ~(uintptr_t)15;
	uint64_t *sp = (uint64_t *)(top - FRAME_WORDS * sizeof(uint64_t));
	for (int i = 0; i < FRAME_WORDS; i++)
		sp[i] = 0; /* rbp 0 ends frame-pointer walks too */
	sp[FRAME_R13] = (uintptr_t)fiber_main;
	sp[FRAME_R12] = (uintptr_t)f;
	sp[FRAME_RET] = (uintptr_t)bn_fiber_trampoline;
	f->sp = sp;
}

static void swap_contexts(struct bn_fiber *from, struct bn_fiber *to)
{
	bn_fiber_swap_sp(&from->sp, to->sp);
}

#endif

void bn_fiber_init_thread(struct bn_fiber *self)
{
	*self = (struct bn_fiber){ 0 };
#ifdef FIBER_TSAN
	self->tsan_fiber = __tsan_get_current_fiber();
#endif
}

int bn_fiber_create(struct bn_fiber *f, size_t size)
{
	*f = (struct bn_fiber){ 0 };
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size = (size + page - 1) / page * page;
	char *m = mmap(NULL, size + page, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
	if (m == MAP_FAILED)
		return -1;
	if (mprotect(m, page, PROT_NONE) != 0) { /* an overflow faults instead of corrupting */
		munmap(m, size + page);
		return -1;
	}
	f->stack = m + page;
	f->stack_size = size;
	f->asan_bottom = f->stack;
	f->asan_size = size;
#ifdef FIBER_TSAN
	f->tsan_fiber = __tsan_create_fiber(0);
#endif
	return 0;
}

void bn_fiber_switch(struct bn_fiber *from, struct bn_fiber *to)
{
	before_switch(from, to, 0);
	swap_contexts(from, to);
	after_switch(from);
}

void bn_fiber_exit(struct bn_fiber *from, struct bn_fiber *to)
{
	before_switch(from, to, 1);
	swap_contexts(from, to);
	fprintf(stderr, "cuda host harness: a fiber that exited was resumed\n");
	abort();
}
