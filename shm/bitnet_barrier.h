/* SPDX-License-Identifier: MIT */
/*
 * bitnet_barrier.h — the five memory-ordering primitives both sides of the ring use.
 *
 * Every use in the code carries a comment naming what it orders. On x86-64 acquire and release
 * compile to plain moves; the full fence is the one that costs (a locked instruction), and it is
 * needed exactly where a store must be visible before a following load of a different word
 * (the lost-wakeup pattern: publish tail, then read NEED_WAKEUP).
 */
#ifndef BITNET_BARRIER_H
#define BITNET_BARRIER_H

#include <stdint.h>

/* One load or store the compiler may not split, merge, repeat or elide. Used for every access to
 * shared memory that has no ordering duty, so a hostile peer cannot make us read a field twice. */
#define bn_read_once(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define bn_write_once(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/* Publish: everything written before becomes visible before the new value of x. */
#define bn_store_release(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)

/* Consume a publication: everything read after sees at least what preceded the release. */
#define bn_load_acquire(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)

/* Full fence: orders earlier stores against later loads (store->load), which acquire/release
 * never do. */
#define bn_smp_mb() __atomic_thread_fence(__ATOMIC_SEQ_CST)

#endif /* BITNET_BARRIER_H */
