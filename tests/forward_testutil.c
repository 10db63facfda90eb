/* SPDX-License-Identifier: MIT */
#include "forward_testutil.h"

#include "ckassert.h"
#include <stdio.h>
#include <stdlib.h>

void ftu_open(struct ftu_run *r, const char *path)
{
	char err[BN_MODEL_ERR_LEN];
	ck_assert_msg(bn_model_load(&r->m, path, err) == 0, "%s", err);
	r->pool = bn_pool_new(2);
	ck_assert_ptr_nonnull(r->pool);
	r->fwd = bn_forward_new(&r->m, 1, r->pool, bn_kernels_select(NULL));
	ck_assert_ptr_nonnull(r->fwd);
	ck_assert_int_eq(bn_forward_kv_init_simple(r->fwd, 64), 0);
}

void ftu_close(struct ftu_run *r)
{
	bn_forward_free(r->fwd);
	bn_pool_free(r->pool);
	bn_model_free(&r->m);
}

int ftu_step(struct ftu_run *r, const uint32_t *tokens, uint32_t n, uint32_t pos, float *logits,
	     int all)
{
	uint32_t seq = 0;
	struct bn_batch b = { .n_rows = 1, .width = n, .tokens = tokens, .lens = &n, .pos = &pos,
			      .seq = &seq };
	return bn_forward_run(r->fwd, &b, logits, all);
}

void ftu_write_model(const char *preset, const char *path, const char *const *extra)
{
	char cmd[1024];
	int at = snprintf(cmd, sizeof(cmd), "%s write --preset %s --out %s",
			  getenv("BITNET_MODEL_TOOL"), preset, path);
	for (int i = 0; extra && extra[i]; i++)
		at += snprintf(cmd + at, sizeof(cmd) - (size_t)at, " %s", extra[i]);
	snprintf(cmd + at, sizeof(cmd) - (size_t)at, " >/dev/null");
	if (system(cmd) != 0) {
		fprintf(stderr, "failed: %s\n", cmd);
		exit(EXIT_FAILURE);
	}
}
