/* SPDX-License-Identifier: MIT */
/*
 * vocab.h — the model's vocabulary as the BN_CTL_TOKENIZER payload (shm/bitnet_shm.h: struct
 * bn_vocab_head, one struct bn_vocab_entry and its text per token, then struct bn_vocab_ext,
 * the BPE merges as id triples and the end-of-generation ids), built once at start-up from the
 * GGUF tokenizer keys and served from a sealed memfd, so a reply of any size costs the loop
 * one sendmsg of 16 bytes and a descriptor. The BN_CTL_VOCAB payload of older clients is its
 * first part, with a BPE kind reported as OTHER.
 *
 * Keys read: tokenizer.ggml.model ("llama": SentencePiece-style; "gpt2": byte-level BPE; else
 * "other"), tokenizer.ggml.tokens (required for a vocabulary), tokenizer.ggml.scores (f32) and
 * tokenizer.ggml.token_type (i32, 0..6), both optional but then one per token,
 * tokenizer.ggml.merges (gpt2: required, "left right" in rank order), tokenizer.ggml.pre,
 * tokenizer.ggml.bos_token_id / eos_token_id / unknown_token_id / eot_token_id / eom_token_id
 * (optional, < n_tokens), tokenizer.ggml.add_bos_token (bool; default true, but false for
 * the falcon3 and falcon_e pre-tokenizers, whose tokenizers add no BOS),
 * tokenizer.ggml.add_eos_token (bool; default false, as llama.cpp's: BN_VOCAB_HEAD_ADD_EOS)
 * and tokenizer.chat_template (optional string).
 *
 * What published files leave out is resolved here, by content (vocab_resolve.c): the
 * pre-tokenizer of a gpt2 vocabulary without tokenizer.ggml.pre, the end-of-turn tokens of a
 * file without eot_token_id, the chat template behind the 2B4T converter's placeholder.
 */
#ifndef BITNETD_VOCAB_H
#define BITNETD_VOCAB_H

#include "gguf.h"

#include <stddef.h>
#include <stdint.h>

#define BN_VOCAB_ERR_LEN BN_GGUF_ERR_LEN /* it holds bn_gguf_open's errors */
/* The pre-tokenizers bitnetd has (bn_pre_tokenizer_from_name), for messages. */
#define BN_PRE_TOKENIZER_NAMES "llama-bpe, gpt2, falcon3, falcon_e, qwen2"
/* The chat templates (bn_chat_template_from_name), for messages. */
#define BN_CHAT_TEMPLATE_NAMES "bitnet, llama3, chatml, llama2, falcon3, gemma"
#define BN_VOCAB_MAX_EOG 16

/* The daemon's overrides (--pre-tokenizer, --chat-template); NULL: decide from the file. */
struct bn_vocab_options {
	const char *pre_tokenizer; /* a name bn_pre_tokenizer_from_name() knows */
	const char *chat_template; /* a name bn_chat_template_from_name() knows */
};

/* What was decided, for the log, `bitnet-cli info` (through the payload) and the scheduler. */
struct bn_vocab_choice {
	uint32_t kind;           /* enum bn_vocab_kind */
	uint32_t pre_tokenizer;  /* enum bn_pre_tokenizer */
	uint32_t chat_template;  /* enum bn_chat_template */
	uint32_t flags;          /* BN_VOCAB_PRE_DETECTED, ... */
	uint32_t n_eog;
	uint32_t eog[BN_VOCAB_MAX_EOG]; /* ascending */
};

struct bn_vocab_built {
	uint8_t *payload;        /* BN_CTL_TOKENIZER payload, malloc'd */
	size_t size;
	size_t vocab_size;       /* bytes of it that make the BN_CTL_VOCAB payload */
	struct bn_vocab_choice choice;
};

/* Builds the payload from a parsed file. Returns 1 when built (the caller frees
 * out->payload); 0 when the file has no tokenizer.ggml.tokens, i.e. no vocabulary; -1 with a
 * one-line reason, naming the file, in err. o may be NULL. */
int bn_vocab_payload_build(const struct bn_gguf *g, const struct bn_vocab_options *o,
			   struct bn_vocab_built *out, char err[BN_VOCAB_ERR_LEN]);

/* A copy of `size` bytes in a new memfd (close-on-exec) sealed against every change
 * (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL). Returns the fd or -errno. */
int bn_vocab_payload_seal(const void *payload, size_t size);

/* Both payloads of the file at path, sealed, and what was chosen. */
struct bn_vocab_served {
	int vocab_fd, tokenizer_fd;
	uint32_t vocab_bytes, tokenizer_bytes;
	struct bn_vocab_choice choice;
};

/* Opens, builds, seals. Returns 1 with *out set, 0 when the file has no vocabulary, -1 with a
 * reason in err. When n_vocab is non-zero, a vocabulary of another size is refused (its ids
 * would not be the model's). */
int bn_vocab_serve_open(const char *path, uint32_t n_vocab, const struct bn_vocab_options *o,
			struct bn_vocab_served *out, char err[BN_VOCAB_ERR_LEN]);
void bn_vocab_served_close(struct bn_vocab_served *s);

/* ------------------------------------------------------------------------------------------ */
/* vocab_resolve.c: decisions by content                                                       */
/* ------------------------------------------------------------------------------------------ */

/* The vocabulary as the resolver sees it: token texts and types, merges as strings. */
struct bn_vocab_view {
	const struct bn_gguf_kv *tokens;  /* array of strings */
	const struct bn_gguf_kv *types;   /* NULL: every token normal */
	const struct bn_gguf_kv *merges;  /* NULL unless gpt2 */
	uint32_t n_tokens;
};

/* 1 when the tokens and merges are LLaMA-3's (128,000 regular tokens and 280,147 merges,
 * compared by a 64-bit FNV-1a hash of their texts; the 256 special tokens' names may vary). */
int bn_vocab_is_llama3(const struct bn_vocab_view *v);

/* The enum bn_chat_template a tokenizer.chat_template text is, by its markers (as llama.cpp's
 * llm_chat_detect does); *placeholder is set when it is the 2B4T converter's placeholder
 * (then BN_CHAT_BITNET is returned). */
uint32_t bn_chat_template_detect(const char *text, size_t len, int *placeholder);

/* The end-of-generation ids: eos, eot and eom where declared, and the tokens whose text is a
 * known end-of-turn marker. Returns how many (at most BN_VOCAB_MAX_EOG), ascending, unique. */
uint32_t bn_vocab_find_eog(const struct bn_vocab_view *v, const uint32_t declared[3],
			   uint32_t out[BN_VOCAB_MAX_EOG]);

#endif /* BITNETD_VOCAB_H */
