/* SPDX-License-Identifier: MIT */
/*
 * bench_util.h — what the benchmarks share: the clock, sorting and medians, and what they read
 * of a daemon's STATS (shm/PROTOCOL.md §10.2).
 */
#ifndef BITNET_BENCH_UTIL_H
#define BITNET_BENCH_UTIL_H

#include "bitnet_client.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline int64_t bench_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* qsort's order for int64_t and double values, ascending. */
static inline int bench_cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The median of n > 0 values (the mean of the middle two when n is even); sorts v. */
static inline double bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), bench_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The value of an unlabelled sample `name` in the daemon's STATS now, or -1. */
static inline double bench_metric(struct bn_client *c, const char *name)
{
	static char text[1 << 20];
	if (bn_daemon_stats(c, text, sizeof(text)) < 0)
		return -1;
	char key[128];
	snprintf(key, sizeof(key), "\n%s ", name); /* the sample, not its # HELP line */
	const char *at = strstr(text, key);
	return at ? strtod(at + strlen(key), NULL) : -1;
}

#endif /* BITNET_BENCH_UTIL_H */
