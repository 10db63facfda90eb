/* SPDX-License-Identifier: MIT */
/* model_rng.c — the model tool's deterministic values (model_rng.h). */
#include "model_rng.h"

struct rng rng_for(uint64_t seed, const char *name)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	struct rng r = { seed ^ h };
	r.s = rng_next(&r);
	return r;
}

void rng_trits(struct rng *r, int8_t *w, uint64_t n)
{
	uint64_t i = 0;
	while (i < n) {
		uint64_t x = rng_next(r);
		for (int k = 0; k < 8 && i < n; k++, i++) {
			unsigned __int128 p = (unsigned __int128)x * 3;
			w[i] = (int8_t)((int)(p >> 64) - 1);
			x = (uint64_t)p;
		}
	}
}
