/* SPDX-License-Identifier: MIT */
/*
 * model_config.c — what a model file says it is (model.h: bn_model_read_config): the
 * architecture, the hyper-parameters with their documented defaults, the head size, RoPE's
 * scaling, the FFN activation (read from the file, or decided by one stated rule and said so),
 * and whether type 36 in a llama file is bitnet.cpp's I2_S.
 */
#include "model.h"
#include "quant.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_RMS_EPS 1e-5f
#define DEFAULT_ROPE_BASE 10000.0f
#define DEFAULT_CONTEXT 2048u
#define DEFAULT_BOS 1u
#define DEFAULT_EOS 2u
#define MAX_HEAD_DIM 2048u
/* llama.cpp's LLAMA_FTYPE_MOSTLY_I2_S in bitnet.cpp's fork: what its llama-quantize and its
 * converter write as general.file_type for an I2_S model. */
#define FILE_TYPE_I2_S 40u

struct reader {
	const struct bn_gguf *g;
	const char *path;
	char *err;
	struct bn_model_config *c;
};

static int fail(struct reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct reader *r, const char *fmt, ...)
{
	int n = snprintf(r->err, BN_MODEL_ERR_LEN, "%s: ", r->path);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->err + n, BN_MODEL_ERR_LEN - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

/* A metadata string, NUL-terminated and cut to fit, for messages. */
static const char *show(struct bn_gguf_str s, char *buf, size_t cap)
{
	snprintf(buf, cap, "%.*s", (int)(s.len < cap - 1 ? s.len : cap - 1), s.ptr);
	return buf;
}

/* ------------------------------------------------------------------------------------------ */
/* Architecture and hyper-parameters                                                          */
/* ------------------------------------------------------------------------------------------ */

static const struct {
	const char *name;
	enum bn_arch arch;
} arch_table[] = {
	{ "llama", BN_ARCH_LLAMA },
	{ "bitnet", BN_ARCH_BITNET },
	{ "bitnet-b1.58", BN_ARCH_BITNET_B158 },
	{ "bitnet-25", BN_ARCH_BITNET_25 },
};

static int parse_arch(struct reader *r)
{
	struct bn_gguf_str s;
	char name[72];
	if (bn_gguf_get_str(r->g, "general.architecture", &s) != 0)
		return fail(r, "no general.architecture string in the metadata");
	for (size_t i = 0; i < sizeof(arch_table) / sizeof(arch_table[0]); i++)
		if (bn_gguf_str_eq(s, arch_table[i].name)) {
			r->c->arch = arch_table[i].arch;
			snprintf(r->c->arch_name, sizeof(r->c->arch_name), "%s", arch_table[i].name);
			return 0;
		}
	return fail(r, "architecture '%s' is not supported (llama, bitnet, bitnet-b1.58, bitnet-25)",
		    show(s, name, 65));
}

/* "<arch>.<suffix>" */
static const char *arch_key(const struct reader *r, const char *suffix, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s.%s", r->c->arch_name, suffix);
	return buf;
}

static int get_u32(struct reader *r, const char *suffix, uint32_t *out, int required,
		   uint32_t def)
{
	char key[128];
	arch_key(r, suffix, key, sizeof(key));
	int rc = bn_gguf_get_u32(r->g, key, out);
	if (rc == -ENOENT && !required) {
		*out = def;
		return 0;
	}
	if (rc == -ENOENT)
		return fail(r, "metadata key %s is missing", key);
	if (rc != 0)
		return fail(r, "metadata key %s is not an unsigned 32-bit integer", key);
	return 0;
}

/* *present (may be NULL) says whether the key was there. */
static int get_f32(struct reader *r, const char *suffix, float *out, float def, int *present)
{
	char key[128];
	arch_key(r, suffix, key, sizeof(key));
	int rc = bn_gguf_get_f32(r->g, key, out);
	if (present)
		*present = rc == 0;
	if (rc == -ENOENT) {
		*out = def;
		return 0;
	}
	if (rc != 0 || !isfinite(*out))
		return fail(r, "metadata key %s is not a finite float", key);
	return 0;
}

static int parse_tokens(struct reader *r)
{
	struct bn_model_config *c = r->c;
	int rc = bn_gguf_get_u32(r->g, "tokenizer.ggml.bos_token_id", &c->bos_id);
	if (rc == -ENOENT)
		c->bos_id = DEFAULT_BOS;
	else if (rc != 0)
		return fail(r, "tokenizer.ggml.bos_token_id is not an unsigned integer");
	rc = bn_gguf_get_u32(r->g, "tokenizer.ggml.eos_token_id", &c->eos_id);
	if (rc == -ENOENT)
		c->eos_id = DEFAULT_EOS;
	else if (rc != 0)
		return fail(r, "tokenizer.ggml.eos_token_id is not an unsigned integer");
	return 0;
}

/* The head size: attention.key_length where the file gives it (Falcon3's 256 is also
 * n_embd / n_head, but other models' is not), which value_length must then equal: bitnetd's
 * attention keeps keys and values of one size. Else n_embd / n_head, which must divide. */
static int parse_head_dim(struct reader *r)
{
	struct bn_model_config *c = r->c;
	uint32_t k_len, v_len;
	if (get_u32(r, "attention.key_length", &k_len, 0, 0) ||
	    get_u32(r, "attention.value_length", &v_len, 0, k_len))
		return -1;
	if (k_len == 0 && v_len != 0)
		return fail(r, "%s.attention.value_length is %u but there is no key_length",
			    c->arch_name, v_len);
	if (k_len != v_len)
		return fail(r, "%s.attention.key_length %u and value_length %u differ; bitnetd needs "
			       "keys and values of one size", c->arch_name, k_len, v_len);
	if (k_len > MAX_HEAD_DIM)
		return fail(r, "%s.attention.key_length %u is over %u", c->arch_name, k_len,
			    MAX_HEAD_DIM);
	if (k_len) {
		c->head_dim = k_len;
		return 0;
	}
	if (c->n_embd % c->n_head)
		return fail(r, "embedding length %u is not a multiple of the head count %u, and "
			       "there is no %s.attention.key_length", c->n_embd, c->n_head,
			    c->arch_name);
	c->head_dim = c->n_embd / c->n_head;
	return 0;
}

/* RoPE's scaling as llama.cpp reads it: rope.scaling.factor (or the older rope.scale_linear)
 * divides every pair's angle; the type must be linear (its default) or none. YaRN and
 * LongRoPE change more than the angles, and no model bitnetd serves uses them. */
static int parse_rope_scaling(struct reader *r)
{
	struct bn_model_config *c = r->c;
	char key[128], name[40];
	struct bn_gguf_str s;
	int rc = bn_gguf_get_str(r->g, arch_key(r, "rope.scaling.type", key, sizeof(key)), &s);
	if (rc == -EINVAL)
		return fail(r, "metadata key %s is not a string", key);
	if (rc == 0 && !bn_gguf_str_eq(s, "linear") && !bn_gguf_str_eq(s, "none"))
		return fail(r, "%s '%s' is not supported (none, linear)", key, show(s, name, 33));
	float factor;
	int present;
	if (get_f32(r, "rope.scaling.factor", &factor, 0.0f, &present))
		return -1;
	if (!present && get_f32(r, "rope.scale_linear", &factor, 0.0f, &present))
		return -1;
	if (present && factor != 0.0f && !(factor > 0.0f))
		return fail(r, "the RoPE scaling factor %g is not positive", (double)factor);
	c->rope_freq_scale = present && factor != 0.0f ? 1.0f / factor : 1.0f;
	return 0;
}

static int check_config(struct reader *r)
{
	const struct bn_model_config *c = r->c;
	if (!c->n_embd || !c->n_layer || !c->n_head || !c->n_ff || !c->n_ctx)
		return fail(r, "a hyper-parameter is zero (embedding %u, layers %u, heads %u, ffn %u, context %u)",
			    c->n_embd, c->n_layer, c->n_head, c->n_ff, c->n_ctx);
	if (c->n_layer > 4096 || c->n_embd > 65536 || c->n_ff > 1u << 20 || c->n_head > 4096)
		return fail(r, "hyper-parameters out of range (layers %u, embedding %u, ffn %u, heads %u)",
			    c->n_layer, c->n_embd, c->n_ff, c->n_head);
	if (!c->n_head_kv || c->n_head % c->n_head_kv)
		return fail(r, "head count %u is not a multiple of the KV head count %u", c->n_head,
			    c->n_head_kv);
	if (c->rope_dim == 0 || c->rope_dim > c->head_dim || c->rope_dim % 2)
		return fail(r, "rope.dimension_count %u must be even and at most the head dim %u",
			    c->rope_dim, c->head_dim);
	if (!(c->rms_eps > 0.0f) || !(c->rope_base > 0.0f))
		return fail(r, "rms epsilon and rope.freq_base must be positive");
	return 0;
}

static void default_name(struct reader *r)
{
	struct bn_model_config *c = r->c;
	struct bn_gguf_str s;
	if (bn_gguf_get_str(r->g, "general.name", &s) == 0 && s.len > 0) {
		snprintf(c->name, sizeof(c->name), "%.*s", (int)(s.len > 63 ? 63 : s.len), s.ptr);
		return;
	}
	const char *base = strrchr(r->path, '/');
	snprintf(c->name, sizeof(c->name), "%.63s", base ? base + 1 : r->path);
}

/* ------------------------------------------------------------------------------------------ */
/* The FFN activation                                                                          */
/* ------------------------------------------------------------------------------------------ */

static const char *const act_names[] = { [BN_ACT_SILU] = "silu", [BN_ACT_RELU2] = "relu2" };

const char *bn_activation_name(enum bn_activation a)
{
	return a == BN_ACT_RELU2 ? act_names[BN_ACT_RELU2] : act_names[BN_ACT_SILU];
}

int bn_activation_from_name(const char *name, enum bn_activation *out)
{
	if (!strcmp(name, "silu")) {
		*out = BN_ACT_SILU;
		return 0;
	}
	if (!strcmp(name, "relu2") || !strcmp(name, "relu_squared")) {
		*out = BN_ACT_RELU2;
		return 0;
	}
	return -1;
}

/* 1bitLLM's bitnet_b1_58 models (large, 3B) were trained with SiLU and use LLaMA-2's
 * SentencePiece vocabulary (32,000 tokens, 32,002 with their <pad> and </line>); bitnet.cpp's
 * current converter labels them bitnet-b1.58, the architecture of BitNet 2B4T (ReLU², a
 * LLaMA-3 byte-level vocabulary of 128,256), and writes no activation key. So a file without
 * the key is told apart by its vocabulary: the one stated rule. */
static void decide_activation(struct reader *r)
{
	struct bn_model_config *c = r->c;
	switch (c->arch) {
	case BN_ARCH_LLAMA:
		c->act = BN_ACT_SILU;
		snprintf(c->act_why, sizeof(c->act_why), "the llama architecture (SwiGLU)");
		return;
	case BN_ARCH_BITNET:
		c->act = BN_ACT_SILU;
		snprintf(c->act_why, sizeof(c->act_why),
			 "the bitnet architecture without bitnet.hidden_activation (1bitLLM's SiLU)");
		return;
	case BN_ARCH_BITNET_25:
		c->act = BN_ACT_RELU2;
		snprintf(c->act_why, sizeof(c->act_why),
			 "the bitnet-25 architecture (BitNet b1.58 2B4T's ReLU squared)");
		return;
	case BN_ARCH_BITNET_B158:
		break;
	}
	const struct bn_gguf_kv *tokens = bn_gguf_find_kv(r->g, "tokenizer.ggml.tokens");
	uint64_t n = tokens && tokens->type == BN_GGUF_ARRAY ? tokens->v.arr.n : 0;
	struct bn_gguf_str model = { NULL, 0 };
	char vocab[80] = "no vocabulary";
	if (bn_gguf_get_str(r->g, "tokenizer.ggml.model", &model) == 0)
		snprintf(vocab, sizeof(vocab), "a %s vocabulary of %llu tokens",
			 bn_gguf_str_eq(model, "llama") ? "SentencePiece" : "byte-level BPE",
			 (unsigned long long)n);
	if (bn_gguf_str_eq(model, "llama") && n >= 32000 && n <= 32002) {
		c->act = BN_ACT_SILU;
		snprintf(c->act_why, sizeof(c->act_why),
			 "bitnet-b1.58 without bitnet-b1.58.hidden_activation, and a SentencePiece "
			 "vocabulary of %llu tokens: 1bitLLM's LLaMA-2 tokenizer, trained with SiLU",
			 (unsigned long long)n);
		return;
	}
	c->act = BN_ACT_RELU2;
	snprintf(c->act_why, sizeof(c->act_why),
		 "bitnet-b1.58 without bitnet-b1.58.hidden_activation, and %s (not 1bitLLM's "
		 "SentencePiece 32000-32002): ReLU squared, as 2B4T", vocab);
}

/* <arch>.hidden_activation, in every architecture; an override wins and says what it
 * replaced. */
static int parse_activation(struct reader *r, const struct bn_activation_choice *force)
{
	struct bn_model_config *c = r->c;
	char key[128], val[40];
	struct bn_gguf_str s;
	int rc = bn_gguf_get_str(r->g, arch_key(r, "hidden_activation", key, sizeof(key)), &s);
	if (rc == -EINVAL)
		return fail(r, "%s is not a string (silu, relu2)", key);
	if (rc == 0) {
		show(s, val, 33);
		if (s.len > 32 || bn_activation_from_name(val, &c->act))
			return fail(r, "%s \"%s\" is not an activation bitnetd knows (silu, relu2)",
				    key, val);
		snprintf(c->act_why, sizeof(c->act_why), "%s", key);
	} else {
		decide_activation(r);
	}
	if (force && force->forced) {
		char was[sizeof(c->act_why)];
		snprintf(was, sizeof(was), "%s", c->act_why);
		snprintf(c->act_why, sizeof(c->act_why), "--activation %s (the file's: %s by %.180s)",
			 bn_activation_name(force->act), bn_activation_name(c->act), was);
		c->act = force->act;
	}
	return 0;
}

/* <arch>.pooling_type: llama.cpp's enum llama_pooling_type, written by its converter for
 * embedding models (sentence-transformers' Pooling module: mean, cls, last token). 4 is a
 * reranker's (a classification head on the pooled state), which bitnetd does not compute. */
static int parse_pooling(struct reader *r)
{
	char key[128];
	int rc = get_u32(r, "pooling_type", &r->c->pooling, 0, 0);
	if (rc == 0 && r->c->pooling > 3)
		return fail(r, "%s is %u: %s", arch_key(r, "pooling_type", key, sizeof(key)),
			    r->c->pooling,
			    r->c->pooling == 4 ? "rank (a reranker's classification head), which "
						 "bitnetd does not compute"
					       : "not a pooling bitnetd knows (0 none, 1 mean, 2 cls, 3 last)");
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* The configuration                                                                           */
/* ------------------------------------------------------------------------------------------ */

int bn_model_read_config(const struct bn_gguf *g, const struct bn_activation_choice *act,
			 struct bn_model_config *c, char err[BN_MODEL_ERR_LEN])
{
	struct reader r = { .g = g, .path = g->path, .err = err, .c = c };
	memset(c, 0, sizeof(*c));
	if (parse_arch(&r) || get_u32(&r, "embedding_length", &c->n_embd, 1, 0) ||
	    get_u32(&r, "block_count", &c->n_layer, 1, 0) ||
	    get_u32(&r, "feed_forward_length", &c->n_ff, 1, 0) ||
	    get_u32(&r, "attention.head_count", &c->n_head, 1, 0) ||
	    get_u32(&r, "attention.head_count_kv", &c->n_head_kv, 0, c->n_head) ||
	    get_u32(&r, "context_length", &c->n_ctx, 0, DEFAULT_CONTEXT) ||
	    get_f32(&r, "attention.layer_norm_rms_epsilon", &c->rms_eps, DEFAULT_RMS_EPS, NULL) ||
	    get_f32(&r, "rope.freq_base", &c->rope_base, DEFAULT_ROPE_BASE, NULL) ||
	    parse_rope_scaling(&r) || parse_activation(&r, act) || parse_tokens(&r) ||
	    parse_pooling(&r))
		return -1;
	if (!c->n_head)
		return check_config(&r);
	if (parse_head_dim(&r) || get_u32(&r, "rope.dimension_count", &c->rope_dim, 0, c->head_dim))
		return -1;
	c->rope_neox = c->arch != BN_ARCH_LLAMA;
	c->sub_norms = c->arch != BN_ARCH_LLAMA;
	default_name(&r);
	return check_config(&r);
}

/* ------------------------------------------------------------------------------------------ */
/* Type 36 in a llama file                                                                     */
/* ------------------------------------------------------------------------------------------ */

static int by_offset(const void *a, const void *b)
{
	uint64_t x = (*(const struct bn_gguf_tensor *const *)a)->offset;
	uint64_t y = (*(const struct bn_gguf_tensor *const *)b)->offset;
	return x < y ? -1 : x > y;
}

/* Bytes from tensor i of the sorted list to the next tensor's data, or to the end of the
 * file for the last: what the writer gave it, padding included. */
static uint64_t span_of(const struct bn_gguf *g, const struct bn_gguf_tensor **sorted,
			uint64_t i)
{
	uint64_t end = i + 1 < g->n_tensors ? sorted[i + 1]->offset : g->size - g->data_offset;
	return end - sorted[i]->offset;
}

/* Every type-36 tensor spans exactly its I2_S bytes (n/4 codes and the 32-byte scale block)
 * up to the writer's alignment: ggml writes a tensor's bytes, then pads to the alignment. */
static int check_i2_s_spans(struct reader *r)
{
	const struct bn_gguf *g = r->g;
	const struct bn_gguf_tensor **sorted = malloc(g->n_tensors * sizeof(*sorted));
	if (!sorted)
		return fail(r, "out of memory");
	for (uint64_t i = 0; i < g->n_tensors; i++)
		sorted[i] = &g->tensors[i];
	qsort(sorted, g->n_tensors, sizeof(*sorted), by_offset);
	int rc = 0;
	for (uint64_t i = 0; i < g->n_tensors && rc == 0; i++) {
		const struct bn_gguf_tensor *t = sorted[i];
		uint64_t span = span_of(g, sorted, i);
		if (t->type != BN_TYPE_I2_S || span - t->size < g->alignment)
			continue;
		char name[72];
		rc = fail(r, "tensor '%s' has type 36 and general.file_type is %u (I2_S), but its "
			     "data takes %llu bytes where I2_S takes %llu (n/4 + 32): this is not "
			     "bitnet.cpp's I2_S", show(t->name, name, 65), FILE_TYPE_I2_S,
			  (unsigned long long)span, (unsigned long long)t->size);
	}
	free(sorted);
	return rc;
}

int bn_model_check_i2_s(const struct bn_gguf *g, const struct bn_model_config *c,
			char err[BN_MODEL_ERR_LEN])
{
	struct reader r = { .g = g, .path = g->path, .err = err };
	const struct bn_gguf_tensor *first = NULL;
	for (uint64_t i = 0; i < g->n_tensors && !first; i++)
		if (g->tensors[i].type == BN_TYPE_I2_S)
			first = &g->tensors[i];
	if (!first || c->arch != BN_ARCH_LLAMA)
		return 0; /* in the bitnet* architectures type 36 is always bitnet.cpp's I2_S */
	uint32_t file_type;
	int rc = bn_gguf_get_u32(g, "general.file_type", &file_type);
	if (rc == 0 && file_type == FILE_TYPE_I2_S)
		return check_i2_s_spans(&r);
	char name[72], says[48];
	if (rc == 0)
		snprintf(says, sizeof(says), "%u", file_type);
	else
		snprintf(says, sizeof(says), "%s", rc == -ENOENT ? "missing" : "not an integer");
	return fail(&r, "tensor '%s' has type 36, which in a llama file is I2_S only when "
			"general.file_type is %u (bitnet.cpp's I2_S), and it is %s here; upstream "
			"llama.cpp gave type 36 to IQ4_NL_4_4, which bitnetd does not support",
		    show(first->name, name, 65), FILE_TYPE_I2_S, says);
}
