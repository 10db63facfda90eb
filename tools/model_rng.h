/* SPDX-License-Identifier: MIT */
/*
 * model_rng.h — the model tool's deterministic values: one splitmix64 stream per tensor,
 * seeded by (seed, the tensor's name), so a file's weights depend on its seed and names
 * alone, not on the order the tensors are written in.
 */
#ifndef BITNET_MODEL_RNG_H
#define BITNET_MODEL_RNG_H

#include <stdint.h>

struct rng {
	uint64_t s;
};

static inline uint64_t rng_next(struct rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [-1, 1): a multiple of 2^-23, so exact in float. */
static inline float rng_sym(struct rng *r)
{
	return (float)(rng_next(r) >> 40) * 0x1p-23f - 1.0f;
}

/* FNV-1a of the name, mixed with the seed: the stream depends on the tensor, not the order. */
struct rng rng_for(uint64_t seed, const char *name);

/* Weights in {-1, 0, +1}, uniform. Each 64-bit draw is read as a fraction in [0, 1) and
 * multiplied by 3 eight times, the integer part giving one trit each time: 8 trits use 13 of
 * the 64 bits, so the bias is below 2^-50, and 2 G weights take a few seconds. */
void rng_trits(struct rng *r, int8_t *w, uint64_t n);

#endif /* BITNET_MODEL_RNG_H */
