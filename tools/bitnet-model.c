/* SPDX-License-Identifier: MIT */
/*
 * bitnet-model — writes synthetic BitNet b1.58 models as GGUF files, prints what a GGUF file
 * holds, pulls models by name from the Hugging Face Hub (model_pull.c), and lists and prunes
 * bitnetd's packed-weight cache (model_cache.c).
 *
 * The models have the real shapes (tiny for tests and the built-in default, the b1_58-large
 * and 2B4T shapes for benchmarks) and random weights: they exercise the loader, the kernels
 * and the forward pass at full size without downloading anything. Every value is a pure
 * function of (--seed, tensor name), so a tensor does not depend on what else is written, and
 * the same ternary weights are written whatever the file type: a float file is the ternary
 * file's weights times their scale, which is what the kernel tests compare against.
 *
 * Output is meant for scripts: `info` prints key=value lines. Exit status: 0, 1 for I/O
 * errors, 2 for bad usage.
 */
#include "../daemon/model/gguf.h"
#include "gguf_info.h"
#include "gguf_write.h"
#include "hf_vocab.h"
#include "model_cache.h"
#include "model_presets.h"
#include "model_pull.h"
#include "model_rng.h"
#include "model_vocab.h"
#include "quant.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_IO 1
#define EXIT_USAGE 2

#define VOCAB_MIN 260u              /* the 259 special and byte tokens, and one word piece */
#define VOCAB_MAX (1u << 24)
#define LAYERS_MAX 1024u
#define GGUF_ALIGNMENT 32u

static const char usage_text[] =
	"Usage: bitnet-model write --preset NAME --out FILE [OPTIONS]\n"
	"       bitnet-model info FILE\n"
	"       bitnet-model presets\n"
	"       bitnet-model pull REPO[:FILE] [--revision REV] [--cache-dir DIR] [--dry-run]\n"
	"       bitnet-model cache [--cache-dir DIR] [--prune]\n"
	"       bitnet-model --help\n"
	"\n"
	"write: a model of the preset's shape and metadata with random ternary weights\n"
	"       (deterministic in --seed: the I2_S, TQ2_0, TQ1_0, F16, BF16 and F32 files of\n"
	"       one seed hold the same weights, each scale exact in half and bfloat16)\n"
	"  --type i2_s|tq2_0|tq1_0|f16|f32|bf16     linear weights (default: the preset's)\n"
	"  --arch bitnet-b1.58|bitnet-25|bitnet|llama|qwen3|gemma3\n"
	"                                           general.architecture (default: the preset's)\n"
	"  --embed-type f16|f32|bf16|q8_0|q6_k|q4_0  token embedding and LM head (default: the\n"
	"                                           preset's)\n"
	"  --group 0|128|256                        ternary weights per scale (default: the\n"
	"                                           preset's; 0: one scale a tensor): each group\n"
	"                                           its own power-of-two multiple of it\n"
	"  --untied                                 write a separate output.weight (LM head)\n"
	"  --activation silu|relu2|gelu             <arch>.hidden_activation (default: the\n"
	"                                           preset's; written for every architecture)\n"
	"  --pooling mean|cls|last                  <arch>.pooling_type (1, 2, 3), as llama.cpp's\n"
	"                                           converter writes it for an embedding model\n"
	"                                           (bitnetd then embeds and does not generate;\n"
	"                                           default: the preset's)\n"
	"  --add-eos true|false                     tokenizer.ggml.add_eos_token (default: the\n"
	"                                           preset's, else none): inputs to embed end\n"
	"                                           with EOS, as BitNet-embedding-0.6B's file says\n"
	"  --no-activation-key                      no <arch>.hidden_activation, as bitnet.cpp's\n"
	"                                           converter writes (the loader decides)\n"
	"  --no-input-norms                         without BitNet-embedding's seven per-projection\n"
	"                                           input norms: the plain qwen3/gemma3 graph,\n"
	"                                           which llama.cpp runs\n"
	"  --vocab N                                vocabulary size (>= 260)\n"
	"  --layers N                               number of blocks\n"
	"  --seed N                                 weights seed (default 1)\n"
	"  --gguf-version 2|3                       file format version (default 3)\n"
	"  --vocab-from FILE                        the vocabulary of a Hugging Face tokenizer.json\n"
	"                                           (byte-level BPE); sets --vocab to its size\n"
	"  --metadata microsoft|llama.cpp           with --vocab-from: the tokenizer keys as\n"
	"                                           Microsoft's BitNet 2B4T GGUF has them (no pre,\n"
	"                                           no eot, the converter's placeholder template)\n"
	"                                           or as a llama.cpp conversion (pre = llama-bpe,\n"
	"                                           the template the model was trained on)\n"
	"  --rig-argmax ID                          (tests) every position's most likely next\n"
	"                                           token is ID; needs --untied and a float\n"
	"                                           --embed-type\n"
	"\n"
	"Presets (the published model each mirrors; -test ones scaled down for tests):\n"
	"%s"
	"\n"
	"info: the architecture, every metadata value and every tensor (name type dims bytes),\n"
	"      as key=value lines.\n"
	"\n"
	"presets: every preset's shape and keys, one line of key=value pairs each.\n"
	"\n"
	"pull: a GGUF file from the Hugging Face Hub into huggingface_hub's cache; prints its\n"
	"      path (bitnet-model pull --help).\n"
	"\n"
	"cache: bitnetd's packed-weight cache files, each with its model, size and whether it can\n"
	"       still be used; --prune removes those that cannot (bitnet-model cache --help).\n";

static void print_usage(void)
{
	static char list[4096];
	preset_list(list, sizeof(list));
	printf(usage_text, list);
}

/* ------------------------------------------------------------------------------------------ */
/* Presets, architectures, type names                                                          */
/* ------------------------------------------------------------------------------------------ */

/* What the loader reads differently per architecture (DESIGN.md, Model). */
struct arch_info {
	const char *name;
	int sub_norms;       /* attn_sub_norm and ffn_sub_norm tensors */
	int act_key;         /* the preset's activation carries over to it (bitnet) */
	enum act act;        /* the activation it gets from a preset of another architecture */
	int qk_norm;         /* attn_q_norm, attn_k_norm [head_dim] (qwen3, gemma3) */
	int post_norms;      /* post_attention_norm, post_ffw_norm (gemma3) */
};

static const struct arch_info archs[] = {
	{ "bitnet-b1.58", 1, 0, ACT_RELU2, 0, 0 },
	{ "bitnet-25", 1, 0, ACT_RELU2, 0, 0 },
	{ "bitnet", 1, 1, ACT_SILU, 0, 0 },
	{ "llama", 0, 0, ACT_SILU, 0, 0 },
	{ "qwen3", 0, 0, ACT_SILU, 1, 0 },
	{ "gemma3", 0, 0, ACT_GELU, 1, 1 },
};

struct type_opt {
	const char *name;
	uint32_t type;
};

static const struct type_opt weight_types[] = {
	{ "i2_s", BN_TYPE_I2_S }, { "tq2_0", BN_TYPE_TQ2_0 }, { "tq1_0", BN_TYPE_TQ1_0 },
	{ "f16", BN_TYPE_F16 },   { "f32", BN_TYPE_F32 },     { "bf16", BN_TYPE_BF16 },
};

static const struct type_opt embed_types[] = {
	{ "f16", BN_TYPE_F16 }, { "f32", BN_TYPE_F32 }, { "bf16", BN_TYPE_BF16 },
	{ "q8_0", BN_TYPE_Q8_0 }, { "q6_k", BN_TYPE_Q6_K }, { "q4_0", BN_TYPE_Q4_0 },
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static const struct arch_info *find_arch(const char *name)
{
	for (size_t i = 0; i < ARRAY_LEN(archs); i++)
		if (!strcmp(archs[i].name, name))
			return &archs[i];
	return NULL;
}

static int find_type(const struct type_opt *t, size_t n, const char *name, uint32_t *out)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(t[i].name, name)) {
			*out = t[i].type;
			return 0;
		}
	return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* The model: options resolved against the preset, and the list of tensors                    */
/* ------------------------------------------------------------------------------------------ */

enum metadata { META_MICROSOFT, META_LLAMA_CPP };

#define NO_RIG UINT32_MAX

struct model_cfg {
	const struct preset *p;
	const struct arch_info *arch;
	uint32_t n_layer, vocab;
	const struct hf_vocab *hf;    /* --vocab-from, or the family's synthetic BPE vocabulary;
				       * NULL: a synthetic SentencePiece one */
	const struct bpe_family *bpe; /* hf is the family's (its keys), not --vocab-from's */
	enum metadata metadata;
	uint32_t rig;                 /* --rig-argmax, or NO_RIG */
	uint32_t type, embed_type;
	int untied;
	enum act act;
	int act_key;                  /* write <arch>.hidden_activation */
	uint32_t group;               /* ternary weights per scale (0: one scale a tensor) */
	uint32_t pooling;             /* <arch>.pooling_type when not 0 (--pooling, the preset) */
	int add_eos;                  /* tokenizer.ggml.add_eos_token 0 or 1 (--add-eos, the
				       * preset's true); -1: not written */
	int proj_norms;               /* the preset's per-projection input norms, unless
				       * --no-input-norms */
	uint64_t seed;
	uint32_t version;
	const char *out;
};

/* rig_argmax_note: how --rig-argmax makes one token the most likely everywhere, whatever the
 * weights do elsewhere. Every embedding row gets +4 in dimension 0, and no layer writes to it
 * (row 0 of attn_output and ffn_down is zero), so dimension 0 of the residual stream stays 4.
 * The final norm keeps only dimension 0 (its weight is 1 there, 0 elsewhere), so the head's
 * input is (4 / rms, 0, 0, ...), with 4 / rms > 0. The head's row for the rigged id has 1 in
 * dimension 0 and every other row 0: that logit is positive, every other one exactly 0. */
static int rigged(const struct model_cfg *c)
{
	return c->rig != NO_RIG;
}

enum tensor_kind { T_EMBED, T_NORM, T_LINEAR };

struct tensor_spec {
	char name[64];
	enum tensor_kind kind;
	uint64_t n_in, n_out;        /* GGUF ne[0], ne[1]; n_out = 1 for a vector */
};

static uint32_t spec_type(const struct model_cfg *c, const struct tensor_spec *t)
{
	switch (t->kind) {
	case T_EMBED: return c->embed_type;
	case T_LINEAR: return c->type;
	default: return BN_TYPE_F32;
	}
}

static void spec_add(struct tensor_spec *t, size_t *n, enum tensor_kind kind, uint64_t n_in,
		     uint64_t n_out, const char *fmt, int layer)
{
	snprintf(t[*n].name, sizeof(t[*n].name), fmt, layer);
	t[*n].kind = kind;
	t[*n].n_in = n_in;
	t[*n].n_out = n_out;
	(*n)++;
}

#define TENSORS_PER_LAYER 22 /* 9 matrices and norms, sub-norms, q/k norms, post-norms, 7 in */

/* The per-projection input norms (BitNet-embedding), in the loader's order. */
static const char *const norm_in_fmt[7] = {
	"blk.%d.attn_q_norm_in.weight", "blk.%d.attn_k_norm_in.weight",
	"blk.%d.attn_v_norm_in.weight", "blk.%d.attn_output_norm_in.weight",
	"blk.%d.ffn_gate_norm_in.weight", "blk.%d.ffn_up_norm_in.weight",
	"blk.%d.ffn_down_norm_in.weight",
};

/* What an architecture and a preset add to a layer: norms. */
static void layer_extras(const struct model_cfg *c, struct tensor_spec *t, size_t *n, int i)
{
	const struct preset *p = c->p;
	uint64_t e = p->n_embd, q = (uint64_t)p->n_head * p->head_dim, ff = p->n_ff;
	if (c->arch->sub_norms) {
		spec_add(t, n, T_NORM, q, 1, "blk.%d.attn_sub_norm.weight", i);
		spec_add(t, n, T_NORM, ff, 1, "blk.%d.ffn_sub_norm.weight", i);
	}
	if (c->arch->qk_norm) {
		spec_add(t, n, T_NORM, p->head_dim, 1, "blk.%d.attn_q_norm.weight", i);
		spec_add(t, n, T_NORM, p->head_dim, 1, "blk.%d.attn_k_norm.weight", i);
	}
	if (c->arch->post_norms) {
		spec_add(t, n, T_NORM, e, 1, "blk.%d.post_attention_norm.weight", i);
		spec_add(t, n, T_NORM, e, 1, "blk.%d.post_ffw_norm.weight", i);
	}
	const uint64_t in[7] = { e, e, e, q, e, e, ff };
	for (int k = 0; c->proj_norms && k < 7; k++)
		spec_add(t, n, T_NORM, in[k], 1, norm_in_fmt[k], i);
}

/* The tensors in file order, llama.cpp's names and shapes. Returns the count; t must hold
 * 3 + TENSORS_PER_LAYER per layer. */
static size_t model_tensors(const struct model_cfg *c, struct tensor_spec *t)
{
	const struct preset *p = c->p;
	uint64_t e = p->n_embd, q = (uint64_t)p->n_head * p->head_dim;
	uint64_t kv = (uint64_t)p->n_head_kv * p->head_dim, ff = p->n_ff;
	size_t n = 0;
	spec_add(t, &n, T_EMBED, e, c->vocab, "token_embd.weight", 0);
	spec_add(t, &n, T_NORM, e, 1, "output_norm.weight", 0);
	if (c->untied)
		spec_add(t, &n, T_EMBED, e, c->vocab, "output.weight", 0);
	for (int i = 0; i < (int)c->n_layer; i++) {
		spec_add(t, &n, T_NORM, e, 1, "blk.%d.attn_norm.weight", i);
		spec_add(t, &n, T_LINEAR, e, q, "blk.%d.attn_q.weight", i);
		spec_add(t, &n, T_LINEAR, e, kv, "blk.%d.attn_k.weight", i);
		spec_add(t, &n, T_LINEAR, e, kv, "blk.%d.attn_v.weight", i);
		spec_add(t, &n, T_LINEAR, q, e, "blk.%d.attn_output.weight", i);
		spec_add(t, &n, T_NORM, e, 1, "blk.%d.ffn_norm.weight", i);
		spec_add(t, &n, T_LINEAR, e, ff, "blk.%d.ffn_gate.weight", i);
		spec_add(t, &n, T_LINEAR, e, ff, "blk.%d.ffn_up.weight", i);
		spec_add(t, &n, T_LINEAR, ff, e, "blk.%d.ffn_down.weight", i);
		layer_extras(c, t, &n, i);
	}
	return n;
}

/* Block formats need whole blocks per row (the kernels work row by row, and I2_S's 128-weight
 * blocks must not straddle rows either). */
static int check_shapes(const struct model_cfg *c, const struct tensor_spec *t, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t type = spec_type(c, &t[i]), bw = bn_type_block_weights(type);
		if (bw && t[i].n_in % bw == 0)
			continue;
		fprintf(stderr,
			"bitnet-model: type %s needs rows of a multiple of %u weights, but %s has "
			"rows of %llu\n",
			bn_type_name(type) ? bn_type_name(type) : "?", bw, t[i].name,
			(unsigned long long)t[i].n_in);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Tensor data                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* One scale per tensor that keeps a layer's outputs at the scale of its inputs: a ternary
 * weight has variance 2/3, so the sum over n_in products has variance n_in * 2/3. Rounded to
 * bfloat16 (8 significant bits), and within half's normal range, so that half, bfloat16 and
 * float hold it exactly: the TQ files' half scale, I2_S's float one and every float file's
 * +-s are the same number, and each file type of one seed computes the same logits. */
static float ternary_scale(uint64_t n_in)
{
	return bn_bf16_to_float(bn_float_to_bf16((float)(1.0 / sqrt((double)n_in * 2.0 / 3.0))));
}

/* With --group G: each group of G weights of a row gets the tensor's scale times 1/2, 1 or 2
 * (a draw of its own stream): a power of two, so every type holding the scale holds each
 * group's exactly, and the files of one seed stay twins. NULL (no groups): the one scale. */
static float *group_scales(const struct model_cfg *c, const struct tensor_spec *t, float scale)
{
	if (!c->group)
		return NULL;
	char name[80];
	snprintf(name, sizeof(name), "%s/scales", t->name);
	struct rng r = rng_for(c->seed, name);
	uint64_t n = t->n_out * (t->n_in / c->group);
	float *s = malloc(n * sizeof(*s));
	for (uint64_t i = 0; s && i < n; i++) {
		uint64_t d = rng_next(&r) % 4;
		s[i] = scale * (d == 0 ? 0.5f : d == 1 ? 2.0f : 1.0f);
	}
	return s;
}

/* The scale of weight k of row r: its group's, or the tensor's. */
static float scale_at(const struct model_cfg *c, const struct tensor_spec *t, const float *gs,
		      float scale, uint64_t r, uint64_t k)
{
	return gs ? gs[r * (t->n_in / c->group) + k / c->group] : scale;
}

/* Float weight types get the ternary values times their scale, row by row. */
static int encode_float_rows(const struct model_cfg *c, const struct tensor_spec *t,
			     uint32_t type, const int8_t *w, float scale, const float *gs,
			     uint8_t *out)
{
	uint64_t n_in = t->n_in, n_out = t->n_out;
	float *row = malloc(n_in * sizeof(*row));
	if (!row)
		return -ENOMEM;
	for (uint64_t r = 0; r < n_out; r++) {
		for (uint64_t k = 0; k < n_in; k++)
			row[k] = (float)w[r * n_in + k] * scale_at(c, t, gs, scale, r, k);
		uint64_t b = bn_quant_row(type, row, n_in, out);
		if (!b) {
			free(row);
			return -EINVAL;
		}
		out += b;
	}
	free(row);
	return 0;
}

static int encode_linear(const struct model_cfg *c, const struct tensor_spec *t, uint32_t type,
			 struct rng *r, uint8_t *out)
{
	uint64_t n = t->n_in * t->n_out, rb = bn_row_bytes(type, t->n_in);
	float scale = ternary_scale(t->n_in), *gs = group_scales(c, t, scale);
	int8_t *w = malloc(n);
	int rc = 0;
	if (!w || (c->group && !gs)) {
		free(w);
		free(gs);
		return -ENOMEM;
	}
	rng_trits(r, w, n);
	if (rigged(c) && (strstr(t->name, "attn_output") || strstr(t->name, "ffn_down")))
		memset(w, 0, t->n_in); /* see rig_argmax_note */
	if (type == BN_TYPE_I2_S) {
		rc = bn_encode_i2_s(w, n, scale, out) ? 0 : -EINVAL;
	} else if (bn_type_is_ternary(type)) { /* a TQ block per group (resolve_group) */
		uint64_t blk = bn_row_bytes(type, BN_QK_K);
		for (uint64_t row = 0; row < t->n_out && !rc; row++)
			for (uint64_t k = 0; k < t->n_in && !rc; k += BN_QK_K)
				if (!bn_encode_ternary_row(type, w + row * t->n_in + k, BN_QK_K,
							   scale_at(c, t, gs, scale, row, k),
							   out + row * rb + k / BN_QK_K * blk))
					rc = -EINVAL;
	} else {
		rc = encode_float_rows(c, t, type, w, scale, gs, out);
	}
	free(w);
	free(gs);
	return rc;
}

/* Embedding rows: uniform in [-1, 1), quantized row by row (no whole float copy: the 2B4T
 * embedding is 328 M values). */
static int encode_embed(const struct model_cfg *c, const struct tensor_spec *t, uint32_t type,
			struct rng *r, uint8_t *out)
{
	float *row = malloc(t->n_in * sizeof(*row));
	if (!row)
		return -ENOMEM;
	int head = strcmp(t->name, "output.weight") == 0;
	for (uint64_t i = 0; i < t->n_out; i++) {
		for (uint64_t k = 0; k < t->n_in; k++)
			row[k] = rng_sym(r);
		if (rigged(c)) /* see rig_argmax_note */
			row[0] = head ? (i == c->rig ? 1.0f : 0.0f) : 4.0f;
		uint64_t b = bn_quant_row(type, row, t->n_in, out);
		if (!b) {
			free(row);
			return -EINVAL;
		}
		out += b;
	}
	free(row);
	return 0;
}

/* Norm weights near 1, so they are visible in the output but harmless. */
static void encode_norm(const struct model_cfg *c, const struct tensor_spec *t, struct rng *r,
			uint8_t *out)
{
	int keep_first = rigged(c) && strcmp(t->name, "output_norm.weight") == 0;
	for (uint64_t k = 0; k < t->n_in; k++) {
		float v = 1.0f + 0.1f * rng_sym(r);
		if (keep_first) /* see rig_argmax_note */
			v = k == 0 ? 1.0f : 0.0f;
		memcpy(out + 4 * k, &v, sizeof(v));
	}
}

/* Encodes one tensor into a temporary buffer and hands it to the writer (which copies it). */
static int add_tensor(struct bn_gguf_writer *w, const struct model_cfg *c,
		      const struct tensor_spec *t)
{
	uint32_t type = spec_type(c, t);
	uint64_t size = bn_tensor_bytes(type, t->n_in * t->n_out);
	uint8_t *data = malloc(size ? size : 1);
	struct rng r = rng_for(c->seed, t->name);
	int rc = 0;
	if (!data)
		return -ENOMEM;
	if (t->kind == T_NORM)
		encode_norm(c, t, &r, data);
	else if (t->kind == T_EMBED)
		rc = encode_embed(c, t, type, &r, data);
	else
		rc = encode_linear(c, t, type, &r, data);
	if (!rc) {
		uint64_t ne[2] = { t->n_in, t->n_out };
		rc = bn_gguf_add_tensor(w, t->name, type, t->n_out > 1 ? 2 : 1, ne, data, size);
	}
	free(data);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Metadata and the tokenizer                                                                  */
/* ------------------------------------------------------------------------------------------ */

static int add_tokenizer(struct bn_gguf_writer *w, const struct model_cfg *c)
{
	int rc = c->add_eos >= 0 ? bn_gguf_add_bool(w, "tokenizer.ggml.add_eos_token", c->add_eos)
				 : 0;
	if (rc)
		return rc;
	if (c->bpe)
		return bpe_family_add_keys(w, c->bpe, c->hf, c->p->eos);
	const struct spm_family *f = c->p->spm;
	if (c->hf && f) { /* Gemma 3's tokenizer.json, as bitnet.cpp's converter writes it */
		const struct spm_ids ids = { f->bos, f->eos, f->unk, f->pad, f->eot };
		return model_add_spm_from_hf(w, c->hf, &ids, f->chat_template);
	}
	if (c->hf)
		return model_add_bpe_tokenizer(w, c->hf, c->metadata == META_LLAMA_CPP);
	if (f)
		return spm_family_add_keys(w, f, c->vocab);
	return model_add_spm_tokenizer(w, c->vocab);
}

struct u32_key {
	const char *suffix;
	uint32_t value;
};

/* The keys the newer families' converters write: the head size (both converters of qwen3 and
 * gemma3 write key_length and value_length; a head size that is not n_embd / n_head needs
 * them) and the sliding window. */
static int add_shape_keys(struct bn_gguf_writer *w, const struct model_cfg *c)
{
	const struct preset *p = c->p;
	const char *a = c->arch->name;
	int explicit_head = c->arch->qk_norm || p->head_dim * p->n_head != p->n_embd;
	const struct u32_key keys[] = {
		{ "attention.key_length", explicit_head ? p->head_dim : 0 },
		{ "attention.value_length", explicit_head ? p->head_dim : 0 },
		{ "attention.sliding_window", p->n_swa },
	};
	char key[128];
	int rc = 0;
	for (size_t i = 0; i < ARRAY_LEN(keys) && !rc; i++) {
		if (!keys[i].value)
			continue;
		snprintf(key, sizeof(key), "%s.%s", a, keys[i].suffix);
		rc = bn_gguf_add_u32(w, key, keys[i].value);
	}
	return rc;
}

static int add_hparams(struct bn_gguf_writer *w, const struct model_cfg *c)
{
	const struct preset *p = c->p;
	const char *a = c->arch->name;
	const struct u32_key keys[] = {
		{ "context_length", p->n_ctx },       { "embedding_length", p->n_embd },
		{ "block_count", c->n_layer },        { "feed_forward_length", p->n_ff },
		{ "attention.head_count", p->n_head }, { "attention.head_count_kv", p->n_head_kv },
		{ "rope.dimension_count", p->head_dim }, { "vocab_size", c->vocab },
	};
	char key[128];
	int rc;
	rc = bn_gguf_add_str(w, "general.architecture", a);
	if (!rc)
		rc = bn_gguf_add_str(w, "general.name", p->model_name);
	if (!rc)
		rc = bn_gguf_add_u32(w, "general.file_type", preset_file_type(c->type));
	if (!rc && bn_type_is_ternary(c->type)) /* llama-quantize's mark */
		rc = bn_gguf_add_u32(w, "general.quantization_version", 2);
	for (size_t i = 0; i < ARRAY_LEN(keys) && !rc; i++) {
		snprintf(key, sizeof(key), "%s.%s", a, keys[i].suffix);
		rc = bn_gguf_add_u32(w, key, keys[i].value);
	}
	snprintf(key, sizeof(key), "%s.attention.layer_norm_rms_epsilon", a);
	if (!rc)
		rc = bn_gguf_add_f32(w, key, p->rms_eps);
	snprintf(key, sizeof(key), "%s.rope.freq_base", a);
	if (!rc)
		rc = bn_gguf_add_f32(w, key, p->rope_base);
	snprintf(key, sizeof(key), "%s.hidden_activation", a);
	if (!rc && c->act_key)
		rc = bn_gguf_add_str(w, key, act_name(c->act));
	snprintf(key, sizeof(key), "%s.pooling_type", a);
	if (!rc && c->pooling)
		rc = bn_gguf_add_u32(w, key, c->pooling);
	return rc ? rc : add_shape_keys(w, c);
}

/* ------------------------------------------------------------------------------------------ */
/* write                                                                                       */
/* ------------------------------------------------------------------------------------------ */

/* One line on stderr; returns the usage exit status. */
__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
	va_list ap;
	fputs("bitnet-model: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (see bitnet-model --help)\n", stderr);
	return EXIT_USAGE;
}

/* Plain decimal only: strtoull alone would take " -1" as 2^64 - 1. */
static int parse_u64(const char *text, uint64_t max, uint64_t *out)
{
	char *end;
	if (text[0] < '0' || text[0] > '9')
		return -1;
	errno = 0;
	unsigned long long v = strtoull(text, &end, 10);
	if (errno || *end || v > max)
		return -1;
	*out = v;
	return 0;
}

/* Command-line values before they are checked against each other. */
struct write_args {
	const char *preset, *out, *type, *arch, *embed_type, *act;
	const char *vocab, *layers, *seed, *version;
	const char *vocab_from, *metadata, *rig, *group, *pooling, *add_eos;
	int untied, no_act_key, no_input_norms, help;
};

static int get_write_args(int argc, char **argv, struct write_args *a)
{
	enum { O_PRESET = 256, O_OUT, O_TYPE, O_ARCH, O_EMBED, O_UNTIED, O_ACT, O_VOCAB,
	       O_LAYERS, O_SEED, O_VERSION, O_VOCAB_FROM, O_METADATA, O_RIG, O_NO_ACT_KEY, O_POOLING,
	       O_HELP, O_GROUP, O_ADD_EOS, O_NO_INPUT_NORMS };
	static const struct option opts[] = {
		{ "preset", required_argument, NULL, O_PRESET },
		{ "out", required_argument, NULL, O_OUT },
		{ "type", required_argument, NULL, O_TYPE },
		{ "arch", required_argument, NULL, O_ARCH },
		{ "embed-type", required_argument, NULL, O_EMBED },
		{ "untied", no_argument, NULL, O_UNTIED },
		{ "activation", required_argument, NULL, O_ACT },
		{ "vocab", required_argument, NULL, O_VOCAB },
		{ "layers", required_argument, NULL, O_LAYERS },
		{ "seed", required_argument, NULL, O_SEED },
		{ "gguf-version", required_argument, NULL, O_VERSION },
		{ "vocab-from", required_argument, NULL, O_VOCAB_FROM },
		{ "metadata", required_argument, NULL, O_METADATA },
		{ "rig-argmax", required_argument, NULL, O_RIG },
		{ "no-activation-key", no_argument, NULL, O_NO_ACT_KEY },
		{ "no-input-norms", no_argument, NULL, O_NO_INPUT_NORMS },
		{ "group", required_argument, NULL, O_GROUP },
		{ "pooling", required_argument, NULL, O_POOLING },
		{ "add-eos", required_argument, NULL, O_ADD_EOS },
		{ "help", no_argument, NULL, O_HELP },
		{ NULL, 0, NULL, 0 },
	};
	int opt;
	opterr = 0; /* our own messages, one line each */
	while ((opt = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		switch (opt) {
		case O_PRESET: a->preset = optarg; break;
		case O_OUT: a->out = optarg; break;
		case O_TYPE: a->type = optarg; break;
		case O_ARCH: a->arch = optarg; break;
		case O_EMBED: a->embed_type = optarg; break;
		case O_UNTIED: a->untied = 1; break;
		case O_ACT: a->act = optarg; break;
		case O_VOCAB: a->vocab = optarg; break;
		case O_LAYERS: a->layers = optarg; break;
		case O_SEED: a->seed = optarg; break;
		case O_VERSION: a->version = optarg; break;
		case O_VOCAB_FROM: a->vocab_from = optarg; break;
		case O_METADATA: a->metadata = optarg; break;
		case O_RIG: a->rig = optarg; break;
		case O_NO_ACT_KEY: a->no_act_key = 1; break;
		case O_NO_INPUT_NORMS: a->no_input_norms = 1; break;
		case O_GROUP: a->group = optarg; break;
		case O_POOLING: a->pooling = optarg; break;
		case O_ADD_EOS: a->add_eos = optarg; break;
		case O_HELP: a->help = 1; break;
		case ':': return usage_error("option %s needs a value", argv[optind - 1]);
		default: return usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	return 0;
}

/* The activation: the option, else the preset's (what the model was trained with) when the
 * architecture is the preset's or carries it over (bitnet), else the architecture's own. */
static int resolve_act(struct model_cfg *c, const char *opt)
{
	int own = c->arch->act_key || !strcmp(c->arch->name, c->p->arch);
	if (!opt) {
		c->act = own ? c->p->act : c->arch->act;
		return 0;
	}
	if (!strcmp(opt, "silu"))
		c->act = ACT_SILU;
	else if (!strcmp(opt, "relu2"))
		c->act = ACT_RELU2;
	else if (!strcmp(opt, "gelu"))
		c->act = ACT_GELU;
	else
		return usage_error("unknown activation '%s' (silu, relu2, gelu)", opt);
	return 0;
}

static int resolve_numbers(struct model_cfg *c, const struct write_args *a)
{
	uint64_t v;
	c->vocab = c->p->vocab;
	c->n_layer = c->p->n_layer;
	c->seed = 1;
	c->version = 3;
	if (a->vocab) {
		if (parse_u64(a->vocab, VOCAB_MAX, &v) || v < VOCAB_MIN)
			return usage_error("--vocab must be %u .. %u, not '%s'", VOCAB_MIN, VOCAB_MAX,
					   a->vocab);
		c->vocab = (uint32_t)v;
	}
	if (a->layers) {
		if (parse_u64(a->layers, LAYERS_MAX, &v) || v == 0)
			return usage_error("--layers must be 1 .. %u, not '%s'", LAYERS_MAX, a->layers);
		c->n_layer = (uint32_t)v;
	}
	if (a->seed && parse_u64(a->seed, UINT64_MAX, &c->seed))
		return usage_error("--seed must be an unsigned integer, not '%s'", a->seed);
	if (a->version) {
		if (parse_u64(a->version, 3, &v) || v < 2)
			return usage_error("--gguf-version must be 2 or 3, not '%s'", a->version);
		c->version = (uint32_t)v;
	}
	return 0;
}

/* After the vocabulary is known: the id must be in it. */
static int resolve_rig(struct model_cfg *c, const char *rig)
{
	uint64_t v;
	int float_embed = c->embed_type == BN_TYPE_F16 || c->embed_type == BN_TYPE_F32 ||
			  c->embed_type == BN_TYPE_BF16;
	c->rig = NO_RIG;
	if (!rig)
		return 0;
	if (parse_u64(rig, UINT32_MAX - 1, &v) || v >= c->vocab)
		return usage_error("--rig-argmax must be a token id below %u, not '%s'", c->vocab,
				   rig);
	if (!c->untied || !float_embed)
		return usage_error("--rig-argmax needs --untied and a float --embed-type");
	c->rig = (uint32_t)v;
	return 0;
}

/* A preset of a byte-level BPE family without --vocab-from: the family's synthetic
 * vocabulary of the model's size, and the family's keys. */
static int family_vocab(struct model_cfg *c, struct hf_vocab *hf)
{
	int rc = bpe_vocab_make(c->p->bpe, c->vocab, hf);
	if (rc == -EINVAL)
		return usage_error("--vocab %u is too small for the %s vocabulary's specials and "
				   "byte tokens", c->vocab, c->p->bpe->pre);
	if (rc) {
		fprintf(stderr, "bitnet-model: out of memory for the vocabulary\n");
		return EXIT_IO;
	}
	c->hf = hf;
	c->bpe = c->p->bpe;
	return 0;
}

/* --vocab-from and --metadata: the vocabulary's size becomes the model's. */
static int resolve_vocab(struct model_cfg *c, const struct write_args *a, struct hf_vocab *hf)
{
	if (a->metadata && !a->vocab_from)
		return usage_error("--metadata needs --vocab-from");
	if (!a->vocab_from)
		return c->p->bpe ? family_vocab(c, hf) : 0;
	if (!a->metadata || !strcmp(a->metadata, "llama.cpp"))
		c->metadata = META_LLAMA_CPP;
	else if (!strcmp(a->metadata, "microsoft"))
		c->metadata = META_MICROSOFT;
	else
		return usage_error("unknown --metadata '%s' (microsoft, llama.cpp)", a->metadata);
	if (a->vocab)
		return usage_error("--vocab and --vocab-from exclude each other");
	char err[512];
	if (hf_vocab_load(a->vocab_from, hf, err, sizeof(err))) {
		fprintf(stderr, "bitnet-model: %s\n", err);
		return EXIT_IO;
	}
	c->hf = hf;
	c->vocab = hf->n_tokens;
	c->bpe = c->p->bpe; /* a family's file: its keys over the vocabulary read */
	return 0;
}

/* --group, else the preset's: 0, 128 or 256, and a file type that holds it (I2_S has one
 * scale a tensor, a TQ block one per 256 weights). */
static int resolve_group(struct model_cfg *c, const char *opt)
{
	uint64_t v = c->p->group;
	if (opt && (parse_u64(opt, 256, &v) || (v != 0 && v != 128 && v != 256)))
		return usage_error("--group must be 0, 128 or 256, not '%s'", opt);
	c->group = (uint32_t)v;
	if (c->group && c->type == BN_TYPE_I2_S)
		return usage_error("I2_S holds one scale per tensor: --group %u needs another --type",
				   c->group);
	if (c->group == 128 && bn_type_is_ternary(c->type))
		return usage_error("%s holds one scale per 256 weights: --group 128 needs a float "
				   "--type", bn_type_name(c->type));
	return 0;
}

/* What an embedding model's file says: <arch>.pooling_type and tokenizer.ggml.add_eos_token,
 * each the option, else the preset's. */
static int resolve_embedding_keys(struct model_cfg *c, const struct write_args *a)
{
	static const char *const poolings[] = { "mean", "cls", "last" }; /* 1, 2, 3 */
	c->pooling = a->pooling ? 0 : c->p->pooling;
	for (uint32_t i = 0; a->pooling && i < ARRAY_LEN(poolings); i++)
		if (!strcmp(a->pooling, poolings[i]))
			c->pooling = i + 1;
	if (a->pooling && !c->pooling)
		return usage_error("unknown pooling '%s' (mean, cls, last)", a->pooling);
	c->add_eos = c->p->add_eos ? 1 : -1;
	if (a->add_eos && strcmp(a->add_eos, "true") && strcmp(a->add_eos, "false"))
		return usage_error("--add-eos takes true or false, not '%s'", a->add_eos);
	if (a->add_eos)
		c->add_eos = !strcmp(a->add_eos, "true");
	return 0;
}

static int resolve_cfg(struct model_cfg *c, const struct write_args *a)
{
	if (!a->preset)
		return usage_error("write needs --preset (bitnet-model --help lists them)");
	if (!a->out)
		return usage_error("write needs --out FILE");
	c->out = a->out;
	c->p = preset_find(a->preset);
	if (!c->p)
		return usage_error("unknown preset '%s' (bitnet-model --help lists them)", a->preset);
	c->arch = find_arch(a->arch ? a->arch : c->p->arch);
	if (!c->arch)
		return usage_error("unknown architecture '%s' (bitnet-b1.58, bitnet-25, bitnet, "
				   "llama, qwen3, gemma3)", a->arch);
	c->type = c->p->type;
	if (a->type && find_type(weight_types, ARRAY_LEN(weight_types), a->type, &c->type))
		return usage_error("unknown --type '%s' (i2_s, tq2_0, tq1_0, f16, f32, bf16)",
				   a->type);
	c->embed_type = c->p->embed_type;
	if (a->embed_type &&
	    find_type(embed_types, ARRAY_LEN(embed_types), a->embed_type, &c->embed_type))
		return usage_error("unknown --embed-type '%s' (f16, f32, bf16, q8_0, q6_k, q4_0)",
				   a->embed_type);
	c->untied = c->p->untied || a->untied;
	c->act_key = !a->no_act_key;
	if (resolve_embedding_keys(c, a))
		return EXIT_USAGE;
	if (a->no_act_key && a->act)
		return usage_error("--activation writes the key --no-activation-key leaves out");
	if (a->no_input_norms && !c->p->proj_norms)
		return usage_error("preset %s has no per-projection input norms to leave out",
				   c->p->name);
	c->proj_norms = c->p->proj_norms && !a->no_input_norms;
	int rc = resolve_act(c, a->act);
	if (!rc)
		rc = resolve_numbers(c, a);
	return rc ? rc : resolve_group(c, a->group);
}

static int write_tensors(struct bn_gguf_writer *w, const struct model_cfg *c,
			 const struct tensor_spec *t, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int rc = add_tensor(w, c, &t[i]);
		if (rc) {
			fprintf(stderr, "bitnet-model: %s: %s\n", t[i].name, strerror(-rc));
			return rc;
		}
	}
	return 0;
}

static int write_model(const struct model_cfg *c, const struct tensor_spec *t, size_t n)
{
	struct bn_gguf_writer *w = bn_gguf_writer_new(c->version, GGUF_ALIGNMENT);
	int rc;
	if (!w) {
		fprintf(stderr, "bitnet-model: cannot start a GGUF writer: out of memory\n");
		return EXIT_IO;
	}
	rc = add_hparams(w, c);
	if (!rc)
		rc = add_tokenizer(w, c);
	if (rc)
		fprintf(stderr, "bitnet-model: metadata: %s\n", strerror(-rc));
	if (!rc)
		rc = write_tensors(w, c, t, n);
	if (!rc) {
		rc = bn_gguf_write_file(w, c->out);
		if (rc)
			fprintf(stderr, "bitnet-model: %s: %s\n", c->out, strerror(-rc));
	}
	bn_gguf_writer_free(w);
	return rc ? EXIT_IO : 0;
}

static int cmd_write(int argc, char **argv)
{
	struct write_args a = { 0 };
	struct model_cfg c = { 0 };
	int rc = get_write_args(argc, argv, &a);
	if (rc || a.help) {
		if (a.help)
			print_usage();
		return rc;
	}
	struct hf_vocab hf = { 0 };
	rc = resolve_cfg(&c, &a);
	if (!rc)
		rc = resolve_vocab(&c, &a, &hf);
	if (!rc)
		rc = resolve_rig(&c, a.rig);
	if (rc) {
		hf_vocab_free(&hf);
		return rc;
	}
	struct tensor_spec *t = calloc(3 + TENSORS_PER_LAYER * (size_t)c.n_layer, sizeof(*t));
	if (!t) {
		fprintf(stderr, "bitnet-model: out of memory\n");
		return EXIT_IO;
	}
	size_t n = model_tensors(&c, t);
	rc = check_shapes(&c, t, n) ? EXIT_USAGE : write_model(&c, t, n);
	if (!rc)
		printf("wrote %s: preset %s, arch %s, %s weights, %zu tensors\n", c.out,
		       c.p->name, c.arch->name, bn_type_name(c.type), n);
	free(t);
	hf_vocab_free(&hf);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage_error("no command (write, info, pull, cache)");
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		print_usage();
		return 0;
	}
	if (!strcmp(argv[1], "write"))
		return cmd_write(argc - 1, argv + 1);
	if (!strcmp(argv[1], "info"))
		return argc == 3 ? gguf_info_print(argv[2]) : usage_error("info needs exactly one FILE");
	if (!strcmp(argv[1], "pull"))
		return model_pull_main(argc - 1, argv + 1);
	if (!strcmp(argv[1], "cache"))
		return model_cache_main(argc - 1, argv + 1);
	if (!strcmp(argv[1], "presets")) {
		if (argc != 2)
			return usage_error("presets takes no arguments");
		preset_print_all(stdout);
		return 0;
	}
	return usage_error("unknown command '%s' (write, info, pull, cache)", argv[1]);
}
