/* SPDX-License-Identifier: MIT */
/*
 * ckassert.h — Check, with assertions that cost nothing while they hold. Every test program
 * includes Check through this header (make check-c fails on a direct <check.h>).
 *
 * Check's ck_assert_* macros call _mark_point for every assertion that holds: a write() to the
 * runner's message file each, so that a test that dies of a signal is reported "after" the
 * last one. Suites that compare masks, logits or ids one element at a time make millions of
 * them: test_grammar spent 28 of its 48 s in the kernel writing them (5 s without). Here an
 * assertion that holds only records where it stands, in a thread-local; a plain build's test
 * process prints that place when a signal kills it (ckassert.c), and a sanitizer's report
 * prints the whole stack. An assertion that fails is reported by Check as before.
 */
#ifndef BITNET_CKASSERT_H
#define BITNET_CKASSERT_H

#include <check.h>

/* The last assertion that held in this thread. */
extern _Thread_local const char *tu_ck_held_file;
extern _Thread_local int tu_ck_held_line;

#undef ck_assert_msg
#define ck_assert_msg(expr, ...)                                                             \
	((expr) ? (void)(tu_ck_held_file = __FILE__, tu_ck_held_line = __LINE__)             \
		: _ck_assert_failed(__FILE__, __LINE__, "Assertion '" #expr "' failed",      \
				    ##__VA_ARGS__))

#endif /* BITNET_CKASSERT_H */
