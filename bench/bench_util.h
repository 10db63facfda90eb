/* SPDX-License-Identifier: MIT */
/*
 * bench_stats.h — what the benchmarks read of a daemon's STATS (shm/PROTOCOL.md §10.2).
 */
#ifndef BITNET_BENCH_STATS_H
#define BITNET_BENCH_STATS_H

#include "bitnet_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#endif /* BITNET_BENCH_STATS_H */
