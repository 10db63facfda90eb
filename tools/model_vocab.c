/* SPDX-License-Identifier: MIT */
/*
 * model_vocab.c — the tokenizer keys the model tool writes (model_vocab.h).
 */
#include "model_vocab.h"

#include "gguf_write.h"
#include "hf_vocab.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A SentencePiece-like vocabulary: <unk> <s> </s>, the 256 byte tokens, then word pieces made
 * of consonant-vowel syllables, with and without the word-start mark. The pieces are distinct
 * because piece k spells k/2 in bijective base 100 (one syllable per digit, every syllable
 * two letters), and k's parity says whether the mark is there. */
#define TOKEN_SLOT 32 /* "▁" (3 bytes) + 4 syllables of 2 + NUL, with room to spare */
#define N_SPECIAL 259u

struct vocab {
	char *arena;            /* TOKEN_SLOT bytes per token */
	const char **tokens;
	float *scores;
	int32_t *types;
	uint32_t n;
};

static void word_piece(uint64_t k, char *out)
{
	static const char consonants[] = "tnsrlmdkpbgvfhzjcwxy";
	static const char vowels[] = "aeiou";
	uint64_t m = k / 2 + 1;
	if (k % 2 == 0)
		out += sprintf(out, "\xe2\x96\x81"); /* U+2581, SentencePiece's word start */
	while (m > 0) {
		uint64_t d = (m - 1) % 100;
		*out++ = consonants[d / 5];
		*out++ = vowels[d % 5];
		m = (m - 1) / 100;
	}
	*out = 0;
}

static void vocab_free(struct vocab *v)
{
	free(v->arena);
	free(v->tokens);
	free(v->scores);
	free(v->types);
}

static int vocab_init(struct vocab *v, uint32_t n)
{
	static const char *const specials[] = { "<unk>", "<s>", "</s>" };
	v->n = n;
	v->arena = malloc((size_t)n * TOKEN_SLOT);
	v->tokens = malloc(n * sizeof(*v->tokens));
	v->scores = malloc(n * sizeof(*v->scores));
	v->types = malloc(n * sizeof(*v->types));
	if (!v->arena || !v->tokens || !v->scores || !v->types) {
		vocab_free(v);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		char *s = v->arena + (size_t)i * TOKEN_SLOT;
		if (i < 3)
			strcpy(s, specials[i]);
		else if (i < N_SPECIAL)
			sprintf(s, "<0x%02X>", i - 3);
		else
			word_piece(i - N_SPECIAL, s);
		v->tokens[i] = s;
		v->scores[i] = -(float)i;
		/* llama.cpp token types: 1 normal, 2 unknown, 3 control, 6 byte */
		v->types[i] = i == 0 ? 2 : i < 3 ? 3 : i < N_SPECIAL ? 6 : 1;
	}
	return 0;
}

/* The 2B4T converter's chat template, as Microsoft's GGUF carries it. */
static const char placeholder_template[] =
	"{% for message in messages %}{% if loop.first %}{{ bos_token }}{% endif %}"
	"{% if message['role'] == 'user' %}{{ 'Human: ' + message['content'] + "
	"'\\n\\nBITNETAssistant: ' + eos_token }}{% elif message['role'] == 'assistant' %}"
	"{{ message['content'] + eos_token }}{% endif %}{% endfor %}";
/* The format BitNet 2B4T was trained on (its tokenizer_config.json). */
static const char trained_template[] =
	"{% set loop_messages = messages %}{% for message in loop_messages %}"
	"{% set content = message['role'] | capitalize + ': '+ message['content'] | trim + "
	"'<|eot_id|>' %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
	"{{ 'Assistant: ' }}{% endif %}";

#define LLAMA3_BOS 128000u
#define LLAMA3_EOS 128001u

int model_add_bpe_tokenizer(struct bn_gguf_writer *w, const struct hf_vocab *hf, int llama_cpp)
{
	int rc = bn_gguf_add_bool(w, "tokenizer.ggml.add_bos_token", 1);
	if (!rc)
		rc = bn_gguf_add_str(w, "tokenizer.ggml.model", "gpt2");
	if (!rc && llama_cpp)
		rc = bn_gguf_add_str(w, "tokenizer.ggml.pre", "llama-bpe");
	if (!rc)
		rc = bn_gguf_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)hf->tokens,
					 hf->n_tokens);
	if (!rc && !llama_cpp) {
		float *zero = calloc(hf->n_tokens, sizeof(*zero));
		rc = zero ? bn_gguf_add_arr_f32(w, "tokenizer.ggml.scores", zero, hf->n_tokens)
			  : -ENOMEM;
		free(zero);
	}
	if (!rc)
		rc = bn_gguf_add_arr_i32(w, "tokenizer.ggml.token_type", hf->types, hf->n_tokens);
	if (!rc)
		rc = bn_gguf_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)hf->merges,
					 hf->n_merges);
	if (!rc)
		rc = bn_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", LLAMA3_BOS);
	if (!rc)
		rc = bn_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", LLAMA3_EOS);
	if (!rc)
		rc = bn_gguf_add_u32(w, "tokenizer.ggml.padding_token_id", LLAMA3_EOS);
	if (!rc)
		rc = bn_gguf_add_str(w, "tokenizer.chat_template",
				     !llama_cpp ? placeholder_template : trained_template);
	return rc;
}

int model_add_spm_tokenizer(struct bn_gguf_writer *w, uint32_t n)
{
	struct vocab v;
	int rc = vocab_init(&v, n);
	if (rc)
		return rc;
	rc = bn_gguf_add_str(w, "tokenizer.ggml.model", "llama");
	if (!rc)
		rc = bn_gguf_add_arr_str(w, "tokenizer.ggml.tokens", v.tokens, n);
	if (!rc)
		rc = bn_gguf_add_arr_f32(w, "tokenizer.ggml.scores", v.scores, n);
	if (!rc)
		rc = bn_gguf_add_arr_i32(w, "tokenizer.ggml.token_type", v.types, n);
	if (!rc)
		rc = bn_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
	if (!rc)
		rc = bn_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
	vocab_free(&v);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* A Hugging Face BPE tokenizer.json of SentencePiece pieces (Gemma 3's) as an SPM vocabulary   */
/* ------------------------------------------------------------------------------------------ */

struct text_map {
	uint32_t *slot;      /* token id + 1, 0 empty */
	uint32_t cap;
	const struct hf_vocab *hf;
};

static uint64_t text_hash(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
	return h;
}

static int map_build(struct text_map *m, const struct hf_vocab *hf)
{
	m->hf = hf;
	m->cap = 1;
	while (m->cap < 2 * hf->n_tokens)
		m->cap *= 2;
	m->slot = calloc(m->cap, sizeof(*m->slot));
	if (!m->slot)
		return -ENOMEM;
	for (uint32_t id = 0; id < hf->n_tokens; id++) {
		const char *t = hf->tokens[id];
		uint32_t i = (uint32_t)text_hash(t, strlen(t)) & (m->cap - 1);
		while (m->slot[i] && strcmp(hf->tokens[m->slot[i] - 1], t) != 0)
			i = (i + 1) & (m->cap - 1);
		if (!m->slot[i]) /* the lowest id of a text */
			m->slot[i] = id + 1;
	}
	return 0;
}

static uint32_t map_find(const struct text_map *m, const char *t, size_t n)
{
	uint32_t i = (uint32_t)text_hash(t, n) & (m->cap - 1);
	for (; m->slot[i]; i = (i + 1) & (m->cap - 1)) {
		const char *s = m->hf->tokens[m->slot[i] - 1];
		if (strlen(s) == n && memcmp(s, t, n) == 0)
			return m->slot[i] - 1;
	}
	return UINT32_MAX;
}

/* A byte token's text: <0xXX>, two upper-case hex digits. */
static int byte_token(const char *t)
{
	return strlen(t) == 6 && !strncmp(t, "<0x", 3) && t[5] == '>';
}

int model_add_spm_keys(struct bn_gguf_writer *w, const char *const *tokens, const float *score,
		       const int32_t *type, uint32_t n, const struct spm_ids *ids,
		       const char *chat_template)
{
	int rc = bn_gguf_add_str(w, "tokenizer.ggml.model", "llama");
	if (!rc)
		rc = bn_gguf_add_str(w, "tokenizer.ggml.pre", "default");
	if (!rc)
		rc = bn_gguf_add_arr_str(w, "tokenizer.ggml.tokens", tokens, n);
	if (!rc)
		rc = bn_gguf_add_arr_f32(w, "tokenizer.ggml.scores", score, n);
	if (!rc)
		rc = bn_gguf_add_arr_i32(w, "tokenizer.ggml.token_type", type, n);
	if (!rc)
		rc = bn_gguf_add_bool(w, "tokenizer.ggml.add_space_prefix", 0);
	const struct { const char *key; uint32_t id; } keys[] = {
		{ "tokenizer.ggml.bos_token_id", ids->bos }, { "tokenizer.ggml.eos_token_id", ids->eos },
		{ "tokenizer.ggml.unknown_token_id", ids->unk },
		{ "tokenizer.ggml.padding_token_id", ids->pad },
		{ "tokenizer.ggml.eot_token_id", ids->eot },
	};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]) && !rc; i++)
		rc = bn_gguf_add_u32(w, keys[i].key, keys[i].id);
	if (!rc && chat_template)
		rc = bn_gguf_add_str(w, "tokenizer.chat_template", chat_template);
	return rc;
}

int model_add_spm_from_hf(struct bn_gguf_writer *w, const struct hf_vocab *hf,
			  const struct spm_ids *ids, const char *chat_template)
{
	struct text_map m;
	uint32_t n = hf->n_tokens;
	float *score = malloc(n * sizeof(*score));
	int32_t *type = malloc(n * sizeof(*type));
	int rc = score && type ? map_build(&m, hf) : -ENOMEM;
	if (rc) {
		free(score);
		free(type);
		return rc;
	}
	/* bitnet.cpp's embedding converter's scores and types: a merge's result scores minus its
	 * first rank, other pieces 0, added tokens -1000 (control when special), byte tokens
	 * byte, <unk> unknown */
	for (uint32_t id = 0; id < n; id++) {
		const char *t = hf->tokens[id];
		int added = hf->types[id] == 3 || hf->types[id] == 4;
		score[id] = added ? -1000.0f : 0.0f;
		type[id] = id == ids->unk ? 2 : added ? hf->types[id] : byte_token(t) ? 6
			   : hf->types[id] == 5 ? 5 : 1;
	}
	int *seen = calloc(n, sizeof(*seen));
	for (uint32_t r = 0; seen && r < hf->n_merges; r++) {
		const char *mg = hf->merges[r], *sp = strchr(mg, ' ');
		char joined[512];
		size_t a = (size_t)(sp - mg), b = strlen(sp + 1);
		if (a + b >= sizeof(joined))
			continue;
		memcpy(joined, mg, a);
		memcpy(joined + a, sp + 1, b);
		uint32_t id = map_find(&m, joined, a + b);
		if (id != UINT32_MAX && !seen[id] && type[id] == 1) {
			seen[id] = 1;
			score[id] = -(float)r;
		}
	}
	rc = seen ? model_add_spm_keys(w, (const char *const *)hf->tokens, score, type, n, ids,
				       chat_template)
		  : -ENOMEM;
	free(seen);
	free(m.slot);
	free(score);
	free(type);
	return rc;
}
