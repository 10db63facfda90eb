/* SPDX-License-Identifier: MIT */
/*
 * vocab_resolve.c — what a model file leaves unsaid, decided by its content.
 *
 * Microsoft's official BitNet 2B4T GGUF has no tokenizer.ggml.pre, no eot_token_id, and a
 * chat template written by its converter rather than the one the model was trained on. Each
 * decision here looks at what the file does carry: the vocabulary itself, the texts of its
 * special tokens, the markers in the template.
 */
#include "vocab.h"

#include "bitnet_shm.h"

#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* The LLaMA-3 vocabulary                                                                      */
/* ------------------------------------------------------------------------------------------ */

#define LLAMA3_REGULAR_TOKENS 128000u
#define LLAMA3_MERGES 280147u
/* FNV-1a 64 of every regular token's text and every merge's text, each followed by a NUL,
 * in id and rank order: computed from Meta's tokenizer.json (model.vocab, model.merges). */
#define LLAMA3_HASH 0x73c7812f4899727bULL

#define FNV64_OFFSET 0xcbf29ce484222325ULL
#define FNV64_PRIME 0x100000001b3ULL

/* The text's bytes, then the NUL that ends it (which leaves h as it is before the multiply). */
static uint64_t fnv64(uint64_t h, const char *p, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)p[i]) * FNV64_PRIME;
	return h * FNV64_PRIME;
}

static uint64_t hash_strings(uint64_t h, const struct bn_gguf_kv *arr, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		struct bn_gguf_str s;
		if (bn_gguf_arr_str(arr, i, &s) != 0)
			return 0;
		h = fnv64(h, s.ptr, s.len);
	}
	return h;
}

int bn_vocab_is_llama3(const struct bn_vocab_view *v)
{
	if (!v->merges || v->n_tokens < LLAMA3_REGULAR_TOKENS || v->merges->v.arr.n != LLAMA3_MERGES)
		return 0;
	uint64_t h = hash_strings(FNV64_OFFSET, v->tokens, LLAMA3_REGULAR_TOKENS);
	h = hash_strings(h, v->merges, LLAMA3_MERGES);
	return h == LLAMA3_HASH;
}

/* ------------------------------------------------------------------------------------------ */
/* Chat templates by their markers                                                             */
/* ------------------------------------------------------------------------------------------ */

static int contains(const char *text, size_t len, const char *needle)
{
	size_t n = strlen(needle);
	if (n > len)
		return 0;
	for (size_t i = 0; i + n <= len; i++)
		if (text[i] == needle[0] && memcmp(text + i, needle, n) == 0)
			return 1;
	return 0;
}

uint32_t bn_chat_template_detect(const char *text, size_t len, int *placeholder)
{
	*placeholder = 0;
	if (!text || len == 0)
		return BN_CHAT_NONE;
	/* The 2B4T converter's template: 'Human: ' ... '\n\nBITNETAssistant: ' + eos_token. */
	if (contains(text, len, "BITNETAssistant")) {
		*placeholder = 1;
		return BN_CHAT_BITNET;
	}
	if (contains(text, len, "<|start_header_id|>") && contains(text, len, "<|end_header_id|>"))
		return BN_CHAT_LLAMA3;
	if (contains(text, len, "<|im_start|>"))
		return BN_CHAT_CHATML;
	/* The trained 2B4T format: role | capitalize + ': ' ... '<|eot_id|>' ... 'Assistant: '. */
	if (contains(text, len, "<|eot_id|>") && contains(text, len, "Assistant: ") &&
	    contains(text, len, "capitalize"))
		return BN_CHAT_BITNET;
	if (contains(text, len, "[INST]"))
		return BN_CHAT_LLAMA2;
	/* Falcon3-Instruct's (and Tulu 3's): '<|user|>\n' ... and the assistant's eos_token, with
	 * '\n' after it "if not loop.last". Zephyr's has no such test, Phi-3's ends turns with
	 * '<|end|>'. */
	if (contains(text, len, "<|user|>") && contains(text, len, "<|assistant|>") &&
	    contains(text, len, "eos_token") && contains(text, len, "not loop.last") &&
	    !contains(text, len, "<|end|>"))
		return BN_CHAT_FALCON3;
	return BN_CHAT_UNKNOWN;
}

/* ------------------------------------------------------------------------------------------ */
/* End of generation                                                                           */
/* ------------------------------------------------------------------------------------------ */

/* Texts that end a turn in the vocabularies llama.cpp knows, when the file names no eot. */
static const char *const eot_texts[] = {
	"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
};

static uint32_t add_unique(uint32_t *out, uint32_t n, uint32_t id)
{
	if (id == UINT32_MAX || n == BN_VOCAB_MAX_EOG)
		return n;
	uint32_t i = n;
	for (uint32_t j = 0; j < n; j++)
		if (out[j] == id)
			return n;
	while (i > 0 && out[i - 1] > id) { /* insertion keeps the list ascending */
		out[i] = out[i - 1];
		i--;
	}
	out[i] = id;
	return n + 1;
}

static int is_eot_text(struct bn_gguf_str s)
{
	for (size_t k = 0; k < sizeof(eot_texts) / sizeof(eot_texts[0]); k++)
		if (bn_gguf_str_eq(s, eot_texts[k]))
			return 1;
	return 0;
}

uint32_t bn_vocab_find_eog(const struct bn_vocab_view *v, const uint32_t declared[3],
			   uint32_t out[BN_VOCAB_MAX_EOG])
{
	uint32_t n = 0;
	for (int k = 0; k < 3; k++)
		n = add_unique(out, n, declared[k]);
	for (uint32_t id = 0; id < v->n_tokens; id++) {
		struct bn_gguf_str s;
		/* Every marker starts with '<': one byte compared for most tokens. */
		if (bn_gguf_arr_str(v->tokens, id, &s) == 0 && s.len && s.ptr[0] == '<' &&
		    is_eot_text(s))
			n = add_unique(out, n, id);
	}
	return n;
}
