/* SPDX-License-Identifier: MIT */
/*
 * describe.c — what a model backend reports at open (bn_model_describe, backend.h), shared by
 * the cpu and cuda backends: the model's shape, and the graph its weights run (the activation
 * and why, the float matrices packed to the ternary kernels).
 */
#include "backend.h"

#include "common/arith.h"
#include "common/log.h"
#include "model/embed.h"
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
	desc->embed_dim = c->n_embd;
	desc->file_pooling = c->pooling;
}

void bn_model_describe_embedding(struct bn_model_desc *desc, uint32_t flag)
{
	uint32_t file = desc->file_pooling;
	desc->pooling = flag ? flag : file;
	desc->embed_off[0] = 0;
	if (!desc->embed_dim)
		snprintf(desc->embed_off, sizeof(desc->embed_off), "no model (the loopback backend)");
	else if (!desc->pooling)
		snprintf(desc->embed_off, sizeof(desc->embed_off),
			 "a generative model (its file names no pooling_type) embeds only with "
			 "bitnetd --pooling mean, cls or last");
	else if (!desc->can_embed)
		snprintf(desc->embed_off, sizeof(desc->embed_off),
			 "the %s backend does not give hidden states",
			 desc->kind == BN_BACKEND_CUDA ? "cuda" : "loopback");
	if (desc->embed_off[0]) {
		desc->pooling = 0;
		bn_log_info("msg=\"no embeddings\" reason=\"%s\"", desc->embed_off);
		return;
	}
	bn_log_info("msg=\"embeddings\" pooling=%s from=%s file_pooling=%s dim=%u embedding_model=%s",
		    bn_pooling_name(desc->pooling), flag ? "--pooling" : "file",
		    bn_pooling_name(file), desc->embed_dim, file ? "yes (generation refused)" : "no");
}

uint64_t bn_model_device_kv_room(const struct bn_model_desc *desc, uint64_t block_bytes)
{
	uint64_t room = desc->device_free > desc->device_headroom
				? desc->device_free - desc->device_headroom
				: 0;
	return room >= block_bytes ? room : 0;
}

uint64_t bn_model_kv_slack(const struct bn_model_desc *desc, uint32_t block_tokens)
{
	if (!desc->kv_map_granule || !desc->kv_arrays)
		return 0;
	uint64_t row = desc->kv_bytes_per_token / desc->kv_arrays * block_tokens;
	if (!row)
		return 0;
	return desc->kv_map_granule / bn_gcd_u64(desc->kv_map_granule, row) * row * desc->kv_arrays;
}

/* ---- the graph: activation, ternary packing --------------------------------------------- */

void bn_backend_activation(const struct bn_backend_options *opt, struct bn_activation_choice *out)
{
	out->forced = opt->activation != BN_ACTIVATION_FILE;
	out->act = opt->activation == BN_ACTIVATION_RELU2   ? BN_ACT_RELU2
		   : opt->activation == BN_ACTIVATION_GELU ? BN_ACT_GELU
							   : BN_ACT_SILU;
}

_Static_assert(BN_LAYER_LINEARS == sizeof(((struct bn_model_desc *)0)->float_candidates) /
					   sizeof(uint32_t),
	       "one count per layer matrix");

static const char *const roles[BN_LAYER_LINEARS] = { "attn_q", "attn_k", "attn_v",
						     "attn_output", "ffn_gate", "ffn_up",
						     "ffn_down" };

/* A name onto the comma-separated list, or counted past it once the list is full. */
static void list_add(char *list, size_t cap, const char *name, uint32_t *left_out)
{
	size_t at = strlen(list), need = strlen(name) + (at ? 1 : 0);
	if (*left_out || at + need + sizeof(", ...and 4294967295 more") > cap) {
		(*left_out)++;
		return;
	}
	snprintf(list + at, cap - at, "%s%s", at ? "," : "", name);
}

void bn_model_describe_graph(const struct bn_model *m, struct bn_model_desc *desc)
{
	const struct bn_model_config *c = &m->cfg;
	snprintf(desc->activation, sizeof(desc->activation), "%s", bn_activation_name(c->act));
	snprintf(desc->activation_why, sizeof(desc->activation_why), "%s", c->act_why);
	uint32_t left_out = 0;
	for (uint32_t li = 0; li < c->n_layer; li++) {
		const struct bn_linear *all[BN_LAYER_LINEARS];
		bn_layer_linears(&m->layers[li], all);
		for (uint32_t i = 0; i < BN_LAYER_LINEARS; i++) {
			if (!all[i]->ternary_candidate)
				continue;
			desc->float_candidates[i]++;
			if (all[i]->kind == BN_LINEAR_T2) {
				desc->ternary_from_float[i]++;
				continue;
			}
			char name[64];
			snprintf(name, sizeof(name), "blk.%u.%s.weight", li, roles[i]);
			list_add(desc->kept_float, sizeof(desc->kept_float), name, &left_out);
		}
	}
	if (left_out) {
		size_t at = strlen(desc->kept_float);
		snprintf(desc->kept_float + at, sizeof(desc->kept_float) - at, ", ...and %u more",
			 left_out);
	}
	bn_log_info("msg=\"model graph\" arch=%s activation=%s why=\"%s\" head_dim=%u "
		    "ternary_from_float=%u/%u kept_float=\"%s\"",
		    c->arch_name, desc->activation, desc->activation_why, c->head_dim,
		    m->n_from_float, m->n_candidates, desc->kept_float);
}
