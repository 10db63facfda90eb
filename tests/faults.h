/* SPDX-License-Identifier: MIT */
/*
 * faults.h — what bn-faults' files share (tests/faults.c, the campaigns; faults_models.c,
 * the model-swap campaign): jobs and their outcomes alone, the daemon's usage when idle, a
 * campaign's counts.
 */
#ifndef BITNET_FAULTS_H
#define BITNET_FAULTS_H

#include "bitnet_client.h"
#include "testutil.h"

#include <stdint.h>

#define MS 1000000LL
#define SEC 1000000000LL
#define N_JOBS 24
#define MAX_OUT 1024

struct job {
	uint32_t prompt[16], n_prompt, max_tokens, flags;
	struct bn_sampling_params sp;
	int sampled;
};

struct outcome {
	int rc;
	struct bn_result res;
	uint32_t out[MAX_OUT];
};

/* What the daemon holds when idle, measured while the asking session is its only one. */
struct usage {
	long long kv_blocks; /* used or reserved */
	long fds, rss_kib;
};

struct result {
	const char *name;
	long attempts;
	long crashes;        /* daemon exits that were not a clean 0 (or died on its own) */
	long lost;           /* requests or calls without their terminal answer */
	long leaked_fds, leaked_kib, leaked_blocks;
	long leaked_files;   /* temporary files a killed writer left that nothing removed */
	long wrong;          /* tokens not equal to alone */
	long long worst_ms;  /* the campaign's latency figure, where it has one; -1 otherwise */
	const char *skipped; /* why it did not run, or NULL */
};

struct bn_request request_of(const struct job *j);
void run_job(struct bn_client *c, const struct job *j, struct outcome *o);
/* Whether got's tokens are alone's (all of them, or a prefix when `prefix_ok`). */
int same_tokens(const struct outcome *alone, const struct bn_result *res, const uint32_t *out,
		int prefix_ok);
/* Waits (up to 5 s) until only the asking session is left and nothing runs or waits, then
 * measures. 0, or -1 without a daemon. */
int wait_idle(const struct tu_daemon *d, struct usage *u);
void stop_daemon(struct tu_daemon *d, struct result *r);
/* A metric of the daemon's STATS, or -1. */
long long tu_metric_of(struct bn_client *c, const char *name);

void campaign_model_swap(struct result *r, const struct job *jobs, int rounds);

#endif /* BITNET_FAULTS_H */
