/* SPDX-License-Identifier: MIT */
/*
 * segment.h — where a session's slots and their arrays lie in its shared segment, as the
 * daemon laid them out (bn_segment_layout) and keeps them: private copies, never read back
 * from the segment, which the client can write at any moment. The ring edge (session*.c) and
 * text requests (textreq.c) address slots through this view only.
 */
#ifndef BITNETD_SEGMENT_H
#define BITNETD_SEGMENT_H

#include "bitnet_shm.h"

#include <stddef.h>
#include <stdint.h>

struct bn_model_desc;
struct bn_text_service;

struct bn_segment {
	uint8_t *slots;            /* the first slot, in the daemon's mapping */
	uint32_t slot_count, slot_size;
	uint32_t prompt_offset, prompt_capacity, output_offset, output_capacity;
	uint32_t logprob_offset, logprob_capacity;
	uint32_t text_offset, text_capacity, piece_offset; /* text_capacity 0: no text */
	const struct bn_model_desc *model;
	const struct bn_text_service *text;
};

/* A slot's fixed part and its arrays. */
static inline struct bn_slot *bn_slot_at(const struct bn_segment *g, uint32_t slot)
{
	return (struct bn_slot *)(void *)(g->slots + (size_t)slot * g->slot_size);
}

static inline uint32_t *bn_slot_prompt(const struct bn_segment *g, uint32_t slot)
{
	return (uint32_t *)(void *)((uint8_t *)bn_slot_at(g, slot) + g->prompt_offset);
}

static inline uint32_t *bn_slot_output(const struct bn_segment *g, uint32_t slot)
{
	return (uint32_t *)(void *)((uint8_t *)bn_slot_at(g, slot) + g->output_offset);
}

static inline struct bn_logprob *bn_slot_logprobs(const struct bn_segment *g, uint32_t slot)
{
	return (struct bn_logprob *)(void *)((uint8_t *)bn_slot_at(g, slot) + g->logprob_offset);
}

static inline uint8_t *bn_slot_text(const struct bn_segment *g, uint32_t slot)
{
	return (uint8_t *)bn_slot_at(g, slot) + g->text_offset;
}

static inline uint32_t *bn_slot_piece_ends(const struct bn_segment *g, uint32_t slot)
{
	return (uint32_t *)(void *)((uint8_t *)bn_slot_at(g, slot) + g->piece_offset);
}

#endif /* BITNETD_SEGMENT_H */
