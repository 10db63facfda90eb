/* SPDX-License-Identifier: MIT */
/*
 * bitnet_futex.h — futex calls on a slot's events word.
 *
 * Shared (not FUTEX_PRIVATE_FLAG) futexes: the word lives in a memfd mapped by two processes, and
 * a private futex is keyed by the caller's address space, so the other process would never see it.
 */
#ifndef BITNET_FUTEX_H
#define BITNET_FUTEX_H

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Wake every thread sleeping on *word. Returns the number woken or -errno. */
static inline int bn_futex_wake_all(uint32_t *word)
{
	long r = syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	return r < 0 ? -errno : (int)r;
}

/* Sleep while *word == expected, at most timeout_ns (< 0: no limit). Returns 0 when woken,
 * -EAGAIN when *word already differed, -ETIMEDOUT, or -EINTR. */
static inline int bn_futex_wait(uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
	struct timespec ts, *tsp = NULL;
	if (timeout_ns >= 0) {
		ts.tv_sec = (time_t)(timeout_ns / 1000000000);
		ts.tv_nsec = (long)(timeout_ns % 1000000000);
		tsp = &ts;
	}
	long r = syscall(SYS_futex, word, FUTEX_WAIT, expected, tsp, NULL, 0);
	return r < 0 ? -errno : 0;
}

#endif /* BITNET_FUTEX_H */
