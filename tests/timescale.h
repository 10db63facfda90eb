/* SPDX-License-Identifier: MIT */
/*
 * timescale.h — how long the tests wait: one rule for every suite, the C ones here, the
 * Python and shell ones through tests/timescale.py (which reads its factors from this file).
 *
 * A wait in a test bounds how long a hang takes to fail; what the test checks is elsewhere.
 * Each is written as what a plain build on an idle 2-core machine needs, with room, and is
 * multiplied at run time by tu_time_scale():
 *
 *   TU_SCALE_SANITIZED under AddressSanitizer (with UBSan), TU_SCALE_TSAN under
 *   ThreadSanitizer, 1 in a plain build; times $BITNET_TEST_TIME_SCALE, a positive number
 *   (default 1), for a slow or loaded machine.
 *
 * Check's per-case timeouts take the same factor: every program that links timescale.o sets
 * CK_TIMEOUT_MULTIPLIER to it before main, unless the environment sets that itself (then it
 * is the caller's). A wait on a request in flight waits on progress rather than on a total
 * (tu_wait, testutil.h). Bounds that test the daemon's own latency do not scale: each says
 * why where it stands.
 */
#ifndef BITNET_TIMESCALE_H
#define BITNET_TIMESCALE_H

#include <stdint.h>

/* The sanitizer passes of make check (check-san, check-tsan) look for memory and thread
 * errors, which need each code path once, not the case counts the plain pass uses to check
 * outputs: under ThreadSanitizer a suite whose code runs on one thread skips (77, with
 * TU_TSAN_SKIP_MSG) or runs only its threaded cases; under either sanitizer an oracle suite
 * may run fewer samples or tokens (TU_SANITIZED). */
#if defined(__SANITIZE_THREAD__)
#define TU_TSAN 1
#else
#define TU_TSAN 0
#endif
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define TU_SANITIZED 1
#else
#define TU_SANITIZED 0
#endif

/* How much slower each sanitizer runs the suites than the plain pass, rounded up: under
 * AddressSanitizer and UBSan 2-3 times (the CUDA host harness the most: about 0.6 s a token
 * of stories260K on a busy 2-core machine, against 0.25 s in the plain pass with its race
 * check), under ThreadSanitizer 5-20 times, where the suites that still run there are cut to
 * their threaded cases and fewer samples. */
#define TU_SCALE_SANITIZED 3
#define TU_SCALE_TSAN 6

/* The factor: the build's sanitizer's times $BITNET_TEST_TIME_SCALE. A value that is not a
 * positive number ends the program with a message (exit 2): a typo must not pass unseen. */
double tu_time_scale(void);
/* ns times the factor; ns <= 0 (no limit, or only a check) as it is. */
int64_t tu_scaled_ns(int64_t ns);
/* A count of seconds, milliseconds or sleeps of a wait loop times the factor, rounded up;
 * n <= 0 as it is. */
int tu_scaled(int n);

#endif /* BITNET_TIMESCALE_H */
