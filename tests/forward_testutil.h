/* SPDX-License-Identifier: MIT */
/*
 * forward_testutil.h — what the graph suites (test_families, test_backbones) share: a model
 * file loaded and run in process, one sequence on the forward pass (daemon/model/forward.h),
 * under Check's assertions, and the model tool's presets written for it.
 */
#ifndef BITNET_FORWARD_TESTUTIL_H
#define BITNET_FORWARD_TESTUTIL_H

#include "../daemon/model/forward.h"
#include "../daemon/model/model.h"

#include <stdint.h>

/* $BITNET_MODEL_TOOL write --preset PRESET --out PATH EXTRA... (NULL-terminated, or NULL),
 * quietly; before a suite runs (a failure exits: no ck_assert). */
void ftu_write_model(const char *preset, const char *path, const char *const *extra);

struct ftu_run {
	struct bn_model m;
	struct bn_pool *pool;
	struct bn_forward *fwd;
};

/* The file at path loaded, a pool of two threads, the selected kernels, a KV pool of 64
 * blocks; a failure fails the test. */
void ftu_open(struct ftu_run *r, const char *path);
void ftu_close(struct ftu_run *r);
/* tokens [0, n) of sequence 0 at positions pos... in one batch row: bn_forward_run's result;
 * logits of every position when all, else of the last. */
int ftu_step(struct ftu_run *r, const uint32_t *tokens, uint32_t n, uint32_t pos, float *logits,
	     int all);

#endif
