/* SPDX-License-Identifier: MIT */
/*
 * embed.c — pooling and normalising a sequence's final hidden states into its embedding
 * (embed.h).
 */
#include "embed.h"

#include "bitnet_shm.h"

#include <math.h>
#include <string.h>

static const char *const names[] = { [BN_POOLING_NONE] = "none", [BN_POOLING_MEAN] = "mean",
				     [BN_POOLING_CLS] = "cls", [BN_POOLING_LAST] = "last" };

const char *bn_pooling_name(uint32_t pooling)
{
	return pooling <= BN_POOLING_LAST ? names[pooling] : names[BN_POOLING_NONE];
}

int bn_pooling_from_name(const char *name)
{
	for (uint32_t p = BN_POOLING_MEAN; p <= BN_POOLING_LAST; p++)
		if (strcmp(name, names[p]) == 0)
			return (int)p;
	return -1;
}

uint32_t bn_embed_rows(uint32_t pooling, uint32_t pos, uint32_t len, uint32_t n, uint32_t *first)
{
	*first = 0;
	if (len == 0)
		return 0;
	switch (pooling) {
	case BN_POOLING_MEAN:
		return len;
	case BN_POOLING_CLS:
		return pos == 0 ? 1 : 0;
	case BN_POOLING_LAST:
		*first = len - 1;
		return pos + len == n ? 1 : 0;
	default:
		return 0;
	}
}

void bn_embed_clear(double *acc, uint32_t dim)
{
	for (uint32_t i = 0; i < dim; i++)
		acc[i] = 0.0;
}

void bn_embed_take(uint32_t pooling, double *acc, const float *rows, uint32_t count, uint32_t dim)
{
	for (uint32_t j = 0; j < count; j++) {
		const float *h = rows + (size_t)j * dim;
		for (uint32_t i = 0; i < dim; i++)
			acc[i] = pooling == BN_POOLING_MEAN ? acc[i] + (double)h[i] : (double)h[i];
	}
}

void bn_embed_finish(uint32_t pooling, const double *acc, uint32_t dim, uint32_t n, float *out)
{
	double div = pooling == BN_POOLING_MEAN && n ? (double)n : 1.0, norm = 0.0;
	for (uint32_t i = 0; i < dim; i++) {
		double p = acc[i] / div;
		norm += p * p;
	}
	norm = sqrt(norm);
	for (uint32_t i = 0; i < dim; i++)
		out[i] = norm > 0.0 ? (float)(acc[i] / div / norm) : 0.0f;
}
