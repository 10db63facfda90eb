/* SPDX-License-Identifier: MIT */
#ifndef BITNETD_ARITH_H
#define BITNETD_ARITH_H

#include <stdint.h>

/* The greatest common divisor (Euclid); gcd(a, 0) = a. Where KV rows meet a page or a
 * device mapping granule, granule / gcd(granule, row) rows are the fewest that fill whole
 * granules. */
static inline uint64_t bn_gcd_u64(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

#endif /* BITNETD_ARITH_H */
