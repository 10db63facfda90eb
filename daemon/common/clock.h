/* SPDX-License-Identifier: MIT */
#ifndef BITNETD_CLOCK_H
#define BITNETD_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic nanoseconds (vDSO: no syscall). */
static inline uint64_t bn_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CPU time the calling thread has used (a system call, not the vDSO: read it sparingly). A
 * budget in it means the same work whatever else the machine runs. */
static inline uint64_t bn_thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Tell the core we are spinning (lets the sibling hyper-thread run, saves power). */
static inline void bn_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

#endif /* BITNETD_CLOCK_H */
