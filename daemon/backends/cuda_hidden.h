/* SPDX-License-Identifier: MIT */
/*
 * cuda_hidden.h — the cuda backend's hidden rows (model/batch.h): which of a step's tokens an
 * embedding row asks the final norm of, and the rows, back on the host, into each batch row's
 * out. cuda.c computes them on the device (the final norm of those tokens, as the LM head's
 * input is computed) and copies them back.
 */
#ifndef BITNETD_CUDA_HIDDEN_H
#define BITNETD_CUDA_HIDDEN_H

#include "model/batch.h"

#include <stdint.h>

/* The hidden states the batch asks for, over its rows. */
uint32_t cuda_hidden_count(const struct bn_batch *b);
/* The token (index among the step's new tokens, in batch order) of each, in batch order. */
void cuda_hidden_tokens(const struct bn_batch *b, uint32_t *tokens);
/* rows[k * ld ...], n floats each (the order above), into their batch rows' out. */
void cuda_hidden_scatter(const struct bn_batch *b, const float *rows, uint32_t ld, uint32_t n);

#endif /* BITNETD_CUDA_HIDDEN_H */
