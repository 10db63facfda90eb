/* SPDX-License-Identifier: MIT */
/*
 * embed.h — a sequence's embedding (shm/PROTOCOL.md §6.14): the final norm's output at its
 * positions (the hidden state llama.cpp's embeddings read, its graph's "result_norm", before
 * the LM head), pooled over the positions as the model says (enum bn_pooling: the mean of
 * every position, the first position's, the last position's), then divided by its L2 norm.
 *
 * The pooled vector is kept in binary64 while the positions arrive (a sequence is read in
 * chunks over several steps): a mean adds the positions in their order, so it is the same
 * bits however the sequence was cut into chunks, and the same alone or in any batch.
 */
#ifndef BITNETD_EMBED_H
#define BITNETD_EMBED_H

#include <stdint.h>

/* "mean", "cls", "last"; "none" for 0 and anything else. */
const char *bn_pooling_name(uint32_t pooling);
/* The enum bn_pooling of a name above other than "none"; -1 for another. */
int bn_pooling_from_name(const char *name);

/* Of a chunk of `len` new tokens at positions [pos, pos + len) of a sequence of n, the ones
 * whose final hidden state the pooling reads: *first (from the chunk's start) and the count
 * returned (0: none). mean: all of them; cls: position 0; last: position n - 1. */
uint32_t bn_embed_rows(uint32_t pooling, uint32_t pos, uint32_t len, uint32_t n, uint32_t *first);

/* acc[0 .. dim) before a sequence's first row. */
void bn_embed_clear(double *acc, uint32_t dim);
/* Takes `count` hidden states rows[j * dim ...] (the rows bn_embed_rows chose, in position
 * order) into acc: summed for mean, kept for cls and last. */
void bn_embed_take(uint32_t pooling, double *acc, const float *rows, uint32_t count, uint32_t dim);
/* The embedding of a sequence of n positions: p = acc / n for mean (acc itself for cls and
 * last), then out[i] = (float)(p[i] / sqrt(sum of p[i]^2)), the sum in index order in
 * binary64; a zero vector stays zero. */
void bn_embed_finish(uint32_t pooling, const double *acc, uint32_t dim, uint32_t n, float *out);

#endif /* BITNETD_EMBED_H */
