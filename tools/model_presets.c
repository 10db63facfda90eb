/* SPDX-License-Identifier: MIT */
/*
 * model_presets.c — the model tool's presets (model_presets.h) and the synthetic byte-level
 * BPE vocabularies of their families.
 *
 * Where each number comes from (the published config.json of the checkpoint a GGUF file was
 * converted from, and the converter: microsoft/BitNet utils/convert-hf-to-gguf-bitnet.py, then
 * its llama-quantize for I2_S, which keeps token_embd and output F16):
 *  - Falcon3-{1,3,7,10}B 1.58bit (tiiuae): LlamaForCausalLM, head_dim 256, 4 KV heads,
 *    rope_theta 1000042, rms_norm_eps 1e-6, vocab 131072, tie_word_embeddings false, BitNet
 *    linears but lm_head; context from max_position_embeddings (1B 8192; 3B, 7B, 10B as their
 *    1.58bit Base repos say: 4096, 8192, 32768); tokenizer.ggml.pre "falcon3"; EOS 11; its
 *    chat template (the no-tools branch) and markers.
 *  - Llama3-8B-1.58-100B-tokens (HF1BitLLM): LLaMA-3 8B's shape (32 heads, 8 KV, FFN 14336,
 *    rope_theta 500000, rms 1e-5, vocab 128256, untied), BOS 128000, EOS 128009 (<|eot_id|>);
 *    its I2_S file has 291 tensors (no rope_freqs) and 22 keys.
 *  - 1bitLLM bitnet_b1_58-large and -3B: BitnetForCausalLM (sub-norms), tied embeddings,
 *    rms 1e-5, rope 10000, context 2048, LLaMA-2's SentencePiece vocabulary with <pad> and
 *    </line> (32002); large 1536 x 24 layers, 16 heads, FFN 4096; 3B 3200 x 26 layers, 32
 *    heads (head size 100), FFN 8640 (not a multiple of 128 or 256, so bitnet.cpp publishes it
 *    as F16, TL1 or TL2, never I2_S). bitnet.cpp's converter labels both bitnet-b1.58.
 *  - Falcon-E: the published files are llama, I2_S with F16 token_embd and output.weight
 *    (bitnet.cpp PR 268's loader log: 168 I2_S, 49 F32, 2 F16 tensors for 1B, 24 layers) and
 *    pre "falcon_e"; its widths, heads and vocabulary size could not be read from a published
 *    config.json here, so there is a scaled-down falcon-e-test preset and no full-size one.
 */
#include "model_presets.h"

#include "gguf_write.h"
#include "hf_vocab.h"
#include "quant.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------------------------------ */
/* Tokenizer families                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* Falcon's tokenizers open with these specials; <|endoftext|> (11) is Falcon3's EOS. */
static const char *const falcon_lead[] = {
	">>TITLE<<",  ">>ABSTRACT<<", ">>INTRODUCTION<<", ">>SUMMARY<<",
	">>COMMENT<<", ">>ANSWER<<",   ">>QUESTION<<",     ">>DOMAIN<<",
	">>PREFIX<<", ">>SUFFIX<<",   ">>MIDDLE<<",       "<|endoftext|>",
	NULL,
};

/* LLaMA-3's 256 specials at 128000..128255; the rest are <|reserved_special_token_N|>. */
static const char *const llama3_tail[] = {
	"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
	"<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
	"<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", NULL,
};

static const char *const falcon_e_tail[] = { "<|begin_of_text|>", "<|end_of_text|>", NULL };

/* Falcon3-Instruct's chat markers (its template's; their ids here are this vocabulary's). */
static const char *const falcon3_tail[] = { "<|system|>", "<|user|>", "<|assistant|>", NULL };

/* Falcon3-Instruct's template without tools, which is Tulu 3's (the format it was
 * post-trained on): the published file's whole text, with its tools branch, could not be read
 * where this was written (shm/PROTOCOL.md §10.7 says how the daemon recognises either). */
static const char falcon3_template[] =
	"{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\n' + "
	"message['content'] + '\n' }}{% elif message['role'] == 'user' %}{{ '<|user|>\n' + "
	"message['content'] + '\n' }}{% elif message['role'] == 'assistant' %}{% if not "
	"loop.last %}{{ '<|assistant|>\n'  + message['content'] + eos_token + '\n' }}{% else %}"
	"{{ '<|assistant|>\n'  + message['content'] + eos_token }}{% endif %}{% endif %}{% if "
	"loop.last and add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}{% endfor %}";

static const struct bpe_family falcon3 = {
	.pre = "falcon3", .lead = falcon_lead, .tail = falcon3_tail, .n_tail = 3,
	.bos = "<|endoftext|>", .eos = "<|endoftext|>", .chat_template = falcon3_template,
};
static const struct bpe_family falcon_e = {
	.pre = "falcon_e", .tail = falcon_e_tail, .n_tail = 2, .bos = "<|begin_of_text|>",
	.eos = "<|end_of_text|>",
};
static const struct bpe_family llama3_instruct = {
	.pre = "llama-bpe", .tail = llama3_tail, .n_tail = 256, .bos = "<|begin_of_text|>",
	.eos = "<|eot_id|>",
};

/* ------------------------------------------------------------------------------------------ */
/* Presets                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static const struct preset presets[] = {
	{ "tiny", "bitnet-tiny", "bitnet-b1.58", 256, 2, 4, 2, 64, 768, 512, 1024, 10000.0f, 1e-5f,
	  ACT_RELU2, BN_TYPE_I2_S, BN_TYPE_F16, 0, NULL, "the built-in test model" },
	{ "large", "bitnet-large", "bitnet", 1536, 24, 16, 16, 96, 4096, 32002, 2048, 10000.0f,
	  1e-5f, ACT_SILU, BN_TYPE_TQ2_0, BN_TYPE_F16, 1, NULL,
	  "1bitLLM bitnet_b1_58-large, as upstream llama.cpp converts it (bitnet, TQ2_0)" },
	{ "2b4t", "bitnet-2b4t", "bitnet-b1.58", 2560, 30, 20, 5, 128, 6912, 128256, 4096,
	  500000.0f, 1e-5f, ACT_RELU2, BN_TYPE_I2_S, BN_TYPE_F16, 0, NULL,
	  "microsoft/bitnet-b1.58-2B-4T (the vocabulary: --vocab-from)" },
	{ "bitnet-large", "bitnet_b1_58-large", "bitnet-b1.58", 1536, 24, 16, 16, 96, 4096, 32002,
	  2048, 10000.0f, 1e-5f, ACT_SILU, BN_TYPE_I2_S, BN_TYPE_F16, 0, NULL,
	  "1bitLLM bitnet_b1_58-large, as bitnet.cpp converts it (bitnet-b1.58, I2_S)" },
	{ "bitnet-3b", "bitnet_b1_58-3B", "bitnet-b1.58", 3200, 26, 32, 32, 100, 8640, 32002, 2048,
	  10000.0f, 1e-5f, ACT_SILU, BN_TYPE_F16, BN_TYPE_F16, 0, NULL,
	  "1bitLLM bitnet_b1_58-3B, bitnet.cpp's F16 file (FFN 8640)" },
	{ "falcon3-1b", "Falcon3-1B-Instruct-1.58bit", "llama", 2048, 18, 8, 4, 256, 8192, 131072,
	  8192, 1000042.0f, 1e-6f, ACT_SILU, BN_TYPE_I2_S, BN_TYPE_F16, 1, &falcon3,
	  "tiiuae/Falcon3-1B-Instruct-1.58bit-GGUF" },
	{ "falcon3-3b", "Falcon3-3B-Instruct-1.58bit", "llama", 3072, 22, 12, 4, 256, 9216, 131072,
	  4096, 1000042.0f, 1e-6f, ACT_SILU, BN_TYPE_I2_S, BN_TYPE_F16, 1, &falcon3,
	  "tiiuae/Falcon3-3B-Instruct-1.58bit-GGUF" },
	{ "falcon3-7b", "Falcon3-7B-Instruct-1.58bit", "llama", 3072, 28, 12, 4, 256, 23040,
	  131072, 8192, 1000042.0f, 1e-6f, ACT_SILU, BN_TYPE_I2_S, BN_TYPE_F16, 1, &falcon3,
	  "tiiuae/Falcon3-7B-Instruct-1.58bit-GGUF" },
	{ "falcon3-10b", "Falcon3-10B-Instruct-1.58bit", "llama", 3072, 40, 12, 4, 256, 23040,
	  131072, 32768, 1000042.0f, 1e-6f, ACT_SILU, BN_TYPE_I2_S, BN_TYPE_F16, 1, &falcon3,
	  "tiiuae/Falcon3-10B-Instruct-1.58bit-GGUF" },
	{ "llama3-8b-1.58", "Llama3-8B-1.58-100B-tokens", "llama", 4096, 32, 32, 8, 128, 14336,
	  128256, 8192, 500000.0f, 1e-5f, ACT_SILU, BN_TYPE_I2_S, BN_TYPE_F16, 1,
	  &llama3_instruct, "HF1BitLLM/Llama3-8B-1.58-100B-tokens, as bitnet.cpp converts it" },
	/* Scaled down for tests: each family's architecture, head size, GQA, types and keys. */
	{ "falcon3-test", "Falcon3-test-1.58bit", "llama", 512, 2, 2, 1, 256, 768, 1024, 8192,
	  1000042.0f, 1e-6f, ACT_SILU, BN_TYPE_I2_S, BN_TYPE_F16, 1, &falcon3,
	  "Falcon3 1.58bit, scaled down (head size 256, 2 heads, 1 KV head)" },
	{ "falcon-e-test", "Falcon-E-test", "llama", 512, 2, 4, 2, 128, 768, 1024, 2048, 10000.0f,
	  1e-5f, ACT_SILU, BN_TYPE_I2_S, BN_TYPE_F16, 1, &falcon_e,
	  "Falcon-E's file structure, scaled down (its widths are not published here)" },
	{ "llama3-test", "Llama3-test-1.58", "llama", 512, 2, 4, 1, 128, 1024, 1024, 8192,
	  500000.0f, 1e-5f, ACT_SILU, BN_TYPE_I2_S, BN_TYPE_F16, 1, &llama3_instruct,
	  "Llama3-8B-1.58, scaled down (4 heads to 1 KV head)" },
	{ "bitnet-large-test", "bitnet_b1_58-large-test", "bitnet-b1.58", 256, 2, 4, 4, 64, 512,
	  32002, 2048, 10000.0f, 1e-5f, ACT_SILU, BN_TYPE_I2_S, BN_TYPE_F16, 0, NULL,
	  "bitnet_b1_58-large, scaled down (its 32002-token vocabulary)" },
	{ "bitnet-3b-test", "bitnet_b1_58-3B-test", "bitnet-b1.58", 400, 2, 4, 4, 100, 320, 32002,
	  2048, 10000.0f, 1e-5f, ACT_SILU, BN_TYPE_F16, BN_TYPE_F16, 0, NULL,
	  "bitnet_b1_58-3B, scaled down (F16, head size 100, FFN 320)" },
};

const struct preset *preset_find(const char *name)
{
	for (size_t i = 0; i < ARRAY_LEN(presets); i++)
		if (!strcmp(presets[i].name, name))
			return &presets[i];
	return NULL;
}

void preset_list(char *out, size_t cap)
{
	size_t at = 0;
	out[0] = 0;
	for (size_t i = 0; i < ARRAY_LEN(presets) && at < cap; i++)
		at += (size_t)snprintf(out + at, cap - at, "  %-22s %s\n", presets[i].name,
				       presets[i].about);
}

uint32_t preset_file_type(uint32_t type)
{
	switch (type) {
	case BN_TYPE_F32: return 0;
	case BN_TYPE_F16: return 1;
	case BN_TYPE_BF16: return 32;
	case BN_TYPE_TQ1_0: return 36;
	case BN_TYPE_TQ2_0: return 37;
	default: return 40; /* I2_S */
	}
}

void preset_print_all(FILE *out)
{
	for (size_t i = 0; i < ARRAY_LEN(presets); i++) {
		const struct preset *p = &presets[i];
		fprintf(out,
			"preset=%s general.name=%s arch=%s embedding_length=%u block_count=%u "
			"head_count=%u head_count_kv=%u head_dim=%u feed_forward_length=%u "
			"vocab_size=%u context_length=%u rope.freq_base=%.9g rms_epsilon=%.9g "
			"activation=%s type=%s embed_type=%s untied=%d file_type=%u pre=%s\n",
			p->name, p->model_name, p->arch, p->n_embd, p->n_layer, p->n_head,
			p->n_head_kv, p->head_dim, p->n_ff, p->vocab, p->n_ctx, (double)p->rope_base,
			(double)p->rms_eps, p->act == ACT_RELU2 ? "relu2" : "silu",
			bn_type_name(p->type), bn_type_name(p->embed_type), p->untied,
			preset_file_type(p->type), p->bpe ? p->bpe->pre : "none");
	}
}

/* ------------------------------------------------------------------------------------------ */
/* The synthetic byte-level BPE vocabulary                                                     */
/* ------------------------------------------------------------------------------------------ */

/* GPT-2's byte-to-character map: printable Latin-1 bytes stand for themselves, the others for
 * U+0100 onwards in byte order. */
static uint32_t byte_char(uint32_t b)
{
	int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
	if (printable)
		return b;
	uint32_t n = 0;
	for (uint32_t x = 0; x < b; x++)
		n += !((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
	return 0x100 + n;
}

static char *utf8_of(uint32_t cp)
{
	char *s = malloc(4);
	if (!s)
		return NULL;
	if (cp < 0x80) {
		s[0] = (char)cp;
		s[1] = 0;
	} else {
		s[0] = (char)(0xC0 | (cp >> 6));
		s[1] = (char)(0x80 | (cp & 0x3F));
		s[2] = 0;
	}
	return s;
}

static char *join(const char *a, const char *b, const char *sep)
{
	size_t n = strlen(a) + strlen(sep) + strlen(b) + 1;
	char *s = malloc(n);
	if (s)
		snprintf(s, n, "%s%s%s", a, sep, b);
	return s;
}

static uint32_t count(const char *const *list)
{
	uint32_t n = 0;
	while (list && list[n])
		n++;
	return n;
}

/* Special token i of the tail: its name, or a reserved one past the named list. */
static char *tail_name(const struct bpe_family *f, uint32_t i, uint32_t named)
{
	char buf[48];
	if (i < named)
		return strdup(f->tail[i]);
	snprintf(buf, sizeof(buf), "<|reserved_special_token_%u|>", i - named + 3);
	return strdup(buf);
}

struct builder {
	struct hf_vocab *v;
	uint32_t next;       /* the next token id to fill */
};

static int put_token(struct builder *b, char *text, int32_t type)
{
	if (!text)
		return -ENOMEM;
	b->v->tokens[b->next] = text;
	b->v->types[b->next++] = type;
	return 0;
}

/* Merged tokens, breadth first: the word-start mark then a letter, two letters, then every
 * merged token so far followed by a letter: "left right" merges of existing tokens only. */
static int put_merged(struct builder *b, uint32_t first_merged, uint32_t end)
{
	static const char mark[] = "\xc4\xa0"; /* U+0120: the space byte's character */
	char letter[2] = { 0, 0 };
	for (uint32_t c = 0; c < 26 && b->next < end; c++) {
		letter[0] = (char)('a' + c);
		b->v->merges[b->v->n_merges++] = join(mark, letter, " ");
		if (put_token(b, join(mark, letter, ""), 1))
			return -ENOMEM;
	}
	for (uint32_t c = 0; c < 26 * 26 && b->next < end; c++) {
		char l[2] = { (char)('a' + c / 26), 0 }, r[2] = { (char)('a' + c % 26), 0 };
		b->v->merges[b->v->n_merges++] = join(l, r, " ");
		if (put_token(b, join(l, r, ""), 1))
			return -ENOMEM;
	}
	for (uint32_t base = first_merged; b->next < end; base++)
		for (uint32_t c = 0; c < 26 && b->next < end; c++) {
			letter[0] = (char)('a' + c);
			const char *left = b->v->tokens[base];
			b->v->merges[b->v->n_merges++] = join(left, letter, " ");
			if (put_token(b, join(left, letter, ""), 1))
				return -ENOMEM;
		}
	for (uint32_t i = 0; i < b->v->n_merges; i++)
		if (!b->v->merges[i])
			return -ENOMEM;
	return 0;
}

int bpe_vocab_make(const struct bpe_family *f, uint32_t n, struct hf_vocab *v)
{
	uint32_t n_lead = count(f->lead), n_tail = f->n_tail, named = count(f->tail);
	memset(v, 0, sizeof(*v));
	if (n < n_lead + 256 + n_tail)
		return -EINVAL;
	v->n_tokens = n;
	v->tokens = calloc(n, sizeof(*v->tokens));
	v->types = calloc(n, sizeof(*v->types));
	v->merges = calloc(n, sizeof(*v->merges));
	struct builder b = { .v = v };
	int rc = v->tokens && v->types && v->merges ? 0 : -ENOMEM;
	for (uint32_t i = 0; i < n_lead && !rc; i++)
		rc = put_token(&b, strdup(f->lead[i]), 3);
	for (uint32_t byte = 0; byte < 256 && !rc; byte++)
		rc = put_token(&b, utf8_of(byte_char(byte)), 1);
	if (!rc)
		rc = put_merged(&b, n_lead + 256, n - n_tail);
	for (uint32_t i = 0; i < n_tail && !rc; i++)
		rc = put_token(&b, tail_name(f, i, named), 3);
	if (rc)
		hf_vocab_free(v);
	return rc;
}

static uint32_t id_of(const struct hf_vocab *v, const char *text)
{
	for (uint32_t i = 0; i < v->n_tokens; i++)
		if (!strcmp(v->tokens[i], text))
			return i;
	return UINT32_MAX;
}

int bpe_family_add_keys(struct bn_gguf_writer *w, const struct bpe_family *f,
			const struct hf_vocab *v)
{
	uint32_t bos = id_of(v, f->bos), eos = id_of(v, f->eos);
	if (bos == UINT32_MAX || eos == UINT32_MAX)
		return -EINVAL;
	int rc = bn_gguf_add_str(w, "tokenizer.ggml.model", "gpt2");
	if (!rc)
		rc = bn_gguf_add_str(w, "tokenizer.ggml.pre", f->pre);
	if (!rc)
		rc = bn_gguf_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens,
					 v->n_tokens);
	if (!rc)
		rc = bn_gguf_add_arr_i32(w, "tokenizer.ggml.token_type", v->types, v->n_tokens);
	if (!rc)
		rc = bn_gguf_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges,
					 v->n_merges);
	if (!rc)
		rc = bn_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", bos);
	if (!rc)
		rc = bn_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", eos);
	if (!rc && f->chat_template)
		rc = bn_gguf_add_str(w, "tokenizer.chat_template", f->chat_template);
	return rc;
}
