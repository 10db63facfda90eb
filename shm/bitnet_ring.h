/* SPDX-License-Identifier: MIT */
/*
 * bitnet_ring.h — submission-ring arithmetic on free-running u32 counters (PROTOCOL.md §5).
 * Unsigned subtraction is exact across the 2^32 wrap, so head and tail are never reset.
 */
#ifndef BITNET_RING_H
#define BITNET_RING_H

#include <stdint.h>

/* Entries queued and not yet taken. */
static inline uint32_t bn_ring_count(uint32_t head, uint32_t tail)
{
	return tail - head;
}

/* Whether a snapshot is possible at all: more than `entries` queued means a corrupt tail. */
static inline int bn_ring_sane(uint32_t head, uint32_t tail, uint32_t entries)
{
	return bn_ring_count(head, tail) <= entries;
}

static inline int bn_ring_full(uint32_t head, uint32_t tail, uint32_t entries)
{
	return bn_ring_count(head, tail) >= entries;
}

/* Array index of a counter; entries is a power of two. */
static inline uint32_t bn_ring_index(uint32_t counter, uint32_t entries)
{
	return counter & (entries - 1);
}

#endif /* BITNET_RING_H */
