/* SPDX-License-Identifier: MIT */
/*
 * model_vocab.h — the tokenizer keys of the model tool's files (bitnet-model write).
 */
#ifndef BITNET_MODEL_VOCAB_H
#define BITNET_MODEL_VOCAB_H

#include <stdint.h>

struct bn_gguf_writer;
struct hf_vocab;

/* A SentencePiece-like vocabulary of n tokens (n >= 260): <unk> <s> </s>, the 256 byte tokens,
 * then distinct word pieces of consonant-vowel syllables. 0 or -ENOMEM / the writer's error. */
int model_add_spm_tokenizer(struct bn_gguf_writer *w, uint32_t n);

/* A Hugging Face byte-level BPE vocabulary with the keys of one of the two kinds of published
 * file: Microsoft's BitNet 2B4T GGUF (no pre, no eot, scores of 0, padding = eos, the
 * converter's placeholder chat template), or with llama_cpp a llama.cpp conversion's
 * (pre = llama-bpe, the template the model was trained on). */
int model_add_bpe_tokenizer(struct bn_gguf_writer *w, const struct hf_vocab *hf, int llama_cpp);

/* The ids an SPM family's file names. */
struct spm_ids {
	uint32_t bos, eos, unk, pad, eot;
};

/* The keys of an SPM vocabulary without a space prefix (Gemma's): tokenizer.ggml.model llama,
 * pre default, the n tokens with their scores and llama.cpp types, the ids, and the chat
 * template when not NULL. 0 or the writer's error. */
int model_add_spm_keys(struct bn_gguf_writer *w, const char *const *tokens, const float *score,
		       const int32_t *type, uint32_t n, const struct spm_ids *ids,
		       const char *chat_template);

/* A Hugging Face BPE tokenizer.json whose pieces are SentencePiece's (Gemma 3's: U+2581 for a
 * space, byte fallback) as an SPM vocabulary, as bitnet.cpp's embedding converter writes it:
 * tokenizer.ggml.model llama, a piece's score minus the rank of the first merge that makes
 * it (0 for pieces no merge makes, -1000 for added tokens), byte tokens typed byte, no space
 * prefix. 0 or -ENOMEM / the writer's error. */
int model_add_spm_from_hf(struct bn_gguf_writer *w, const struct hf_vocab *hf,
			  const struct spm_ids *ids, const char *chat_template);

#endif /* BITNET_MODEL_VOCAB_H */
