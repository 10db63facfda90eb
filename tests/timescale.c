/* SPDX-License-Identifier: MIT */
#include "timescale.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static double sanitizer_scale(void)
{
	if (TU_TSAN)
		return TU_SCALE_TSAN;
	return TU_SANITIZED ? TU_SCALE_SANITIZED : 1;
}

/* $BITNET_TEST_TIME_SCALE: unset or empty is 1. */
static double machine_scale(void)
{
	const char *v = getenv("BITNET_TEST_TIME_SCALE");
	if (!v || !*v)
		return 1;
	char *end;
	double x = strtod(v, &end);
	if (*end || !isfinite(x) || x <= 0) {
		fprintf(stderr, "BITNET_TEST_TIME_SCALE=%s: not a positive number\n", v);
		exit(2);
	}
	return x;
}

double tu_time_scale(void)
{
	static double scale; /* set before main (below), read-only afterwards */
	if (scale == 0)
		scale = sanitizer_scale() * machine_scale();
	return scale;
}

int64_t tu_scaled_ns(int64_t ns)
{
	return ns <= 0 ? ns : (int64_t)ceil((double)ns * tu_time_scale());
}

int tu_scaled(int n)
{
	return n <= 0 ? n : (int)ceil(n * tu_time_scale());
}

/* Check reads CK_TIMEOUT_MULTIPLIER when a test case is made and when its timeout is set, so
 * it must be in the environment before main builds the suite. */
__attribute__((constructor)) static void scale_check_timeouts(void)
{
	char factor[32];
	snprintf(factor, sizeof(factor), "%g", tu_time_scale());
	setenv("CK_TIMEOUT_MULTIPLIER", factor, 0);
}
