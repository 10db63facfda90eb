/* SPDX-License-Identifier: MIT */
/*
 * hf_vocab.h — a Hugging Face tokenizer.json's byte-level BPE vocabulary, as a GGUF
 * converter would store it: token texts by id, llama.cpp token types, merges as "left right".
 */
#ifndef BITNET_HF_VOCAB_H
#define BITNET_HF_VOCAB_H

#include <stddef.h>
#include <stdint.h>

struct hf_vocab {
	uint32_t n_tokens;
	char **tokens;        /* [n_tokens], NUL-terminated */
	int32_t *types;       /* [n_tokens]: 1 normal, 3 control (special added tokens),
	                       * 4 user-defined (other added tokens), 5 unused (ids no one names) */
	uint32_t n_merges;
	char **merges;        /* [n_merges], "left right" in rank order */
};

/* Reads path. Returns 0, or -1 with a one-line reason in err (naming the file and the field). */
int hf_vocab_load(const char *path, struct hf_vocab *v, char *err, size_t err_len);
void hf_vocab_free(struct hf_vocab *v);

#endif /* BITNET_HF_VOCAB_H */
