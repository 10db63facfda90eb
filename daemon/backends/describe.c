/* SPDX-License-Identifier: MIT */
/*
 * describe.c — what a model backend reports at open (bn_model_describe, backend.h), shared by
 * the cpu and cuda backends.
 */
#include "backend.h"

#include "model/model.h"

#include <stdio.h>
#include <string.h>

/* Multiply-adds of one token through every layer's weight matrices (the LM head left out: a
 * prompt token skips it), over those of one token's attention to one earlier position (a key
 * dot product and a value update per head and layer), scaled by their relative cost. */
static uint32_t attention_positions_per_token(const struct bn_model_config *c, double attn_mac_cost)
{
	double q_width = (double)c->n_head * c->head_dim, kv_width = (double)c->n_head_kv * c->head_dim;
	double weights = (double)c->n_layer * c->n_embd * (2 * q_width + 2 * kv_width + 3.0 * c->n_ff);
	double attention = (double)c->n_layer * c->n_head * c->head_dim * 2 * attn_mac_cost;
	double ratio = weights / attention;
	return ratio < 1 ? 1 : ratio > UINT32_MAX ? UINT32_MAX : (uint32_t)ratio;
}

void bn_model_describe(const struct bn_model_config *c, uint32_t kind, double attn_mac_cost,
		       struct bn_model_desc *desc)
{
	memset(desc, 0, sizeof(*desc));
	snprintf(desc->name, sizeof(desc->name), "%s", c->name);
	desc->vocab_size = c->n_vocab;
	desc->context_length = c->n_ctx;
	desc->bos_id = c->bos_id;
	desc->eos_id = c->eos_id;
	desc->kind = kind;
	/* Keys and values of every layer, F32. */
	desc->kv_bytes_per_token = (uint64_t)c->n_layer * 2 * c->n_head_kv * c->head_dim * sizeof(float);
	desc->attn_positions_per_token = attention_positions_per_token(c, attn_mac_cost);
}

uint64_t bn_model_device_kv_room(const struct bn_model_desc *desc, uint64_t block_bytes)
{
	uint64_t room = desc->device_free > desc->device_headroom
				? desc->device_free - desc->device_headroom
				: 0;
	return room >= block_bytes ? room : 0;
}
