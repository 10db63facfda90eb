/* SPDX-License-Identifier: MIT */
/*
 * sample_internal.h — what sample.c (the sampler's steps) gives sample_row.c (bn_sample, and
 * the rows a grammar restricts). Nothing outside these two files includes it.
 */
#ifndef BITNETD_SAMPLE_INTERNAL_H
#define BITNETD_SAMPLE_INTERNAL_H

#include "sample.h"

#include <stdbool.h>
#include <stdint.h>

/* Grows the sampler's scratch to n tokens, all or nothing: 0 or -ENOMEM. */
int sampler_reserve(struct bn_sampler *s, uint32_t n);
/* Step 1 applies to ctx (sample.h). */
bool sample_penalties_on(const struct bn_sample_ctx *ctx);
/* Step 1 on l[0..n) (the scratch reserved for n). */
void sample_apply_penalties(struct bn_sampler *s, const struct bn_sample_ctx *ctx, float *l,
			    uint32_t n);
/* The first index of the largest of l[0..n); NaN never wins, an all-NaN row gives 0. */
uint32_t sample_argmax(const float *l, uint32_t n);
/* Steps 2 to 5 on l[0..n) (penalized already; modified in place as bn_sample says), the draw
 * u of output index `step`: 0 or -ENOMEM. */
int sample_dense(struct bn_sampler *s, const struct bn_sampling *p, uint32_t step, float *l,
		 uint32_t n, struct bn_sample_out *out);

#endif /* BITNETD_SAMPLE_INTERNAL_H */
