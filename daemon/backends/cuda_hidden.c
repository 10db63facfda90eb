/* SPDX-License-Identifier: MIT */
/*
 * cuda_hidden.c — the cuda backend's hidden rows on the host side (cuda_hidden.h).
 */
#include "cuda_hidden.h"

#include <string.h>

static const struct bn_hidden_row *hidden_of(const struct bn_batch *b, uint32_t r)
{
	return b->hidden && b->hidden[r] && b->hidden[r]->count ? b->hidden[r] : NULL;
}

uint32_t cuda_hidden_count(const struct bn_batch *b)
{
	uint32_t n = 0;
	for (uint32_t r = 0; r < b->n_rows; r++)
		n += hidden_of(b, r) ? b->hidden[r]->count : 0;
	return n;
}

void cuda_hidden_tokens(const struct bn_batch *b, uint32_t *tokens)
{
	uint32_t first = 0, k = 0;
	for (uint32_t r = 0; r < b->n_rows; first += b->lens[r++]) {
		const struct bn_hidden_row *h = hidden_of(b, r);
		for (uint32_t j = 0; h && j < h->count; j++)
			tokens[k++] = first + h->first + j;
	}
}

void cuda_hidden_scatter(const struct bn_batch *b, const float *rows, uint32_t ld, uint32_t n)
{
	uint32_t k = 0;
	for (uint32_t r = 0; r < b->n_rows; r++) {
		const struct bn_hidden_row *h = hidden_of(b, r);
		for (uint32_t j = 0; h && j < h->count; j++, k++)
			memcpy(h->out + (size_t)j * n, rows + (size_t)k * ld, n * sizeof(float));
	}
}
