/* SPDX-License-Identifier: MIT */
/*
 * thread.h — a helper thread of the daemon starts with every signal blocked: signals are the
 * loop's (its signalfd), and a thread's mask is inherited from the one that creates it.
 */
#ifndef BITNETD_COMMON_THREAD_H
#define BITNETD_COMMON_THREAD_H

#include <pthread.h>
#include <signal.h>

/* pthread_create with every signal blocked in the new thread: 0 or its error number. */
static inline int bn_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(thread, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

#endif
