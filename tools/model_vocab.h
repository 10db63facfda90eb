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

#endif /* BITNET_MODEL_VOCAB_H */
