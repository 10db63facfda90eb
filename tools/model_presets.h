/* SPDX-License-Identifier: MIT */
/*
 * model_presets.h — the shapes and metadata the model tool writes (bitnet-model write
 * --preset): each published model's hyper-parameters, tensor types, tying and tokenizer keys
 * as its GGUF file has them, and scaled-down variants of each family for tests (the family's
 * architecture, head size, GQA ratio, types and keys, small widths).
 */
#ifndef BITNET_MODEL_PRESETS_H
#define BITNET_MODEL_PRESETS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct bn_gguf_writer;
struct hf_vocab;

enum act { ACT_SILU, ACT_RELU2 };

/* A family's byte-level BPE tokenizer keys (NULL in a preset: a synthetic SentencePiece
 * vocabulary, model_vocab.h). */
struct bpe_family {
	const char *pre;          /* tokenizer.ggml.pre */
	const char *const *lead;  /* special tokens at ids 0, 1, ... (NULL-terminated) */
	const char *const *tail;  /* special tokens at the vocabulary's end, in order */
	uint32_t n_tail;          /* the tail's length (names past the list: reserved tokens) */
	const char *bos, *eos;    /* which specials are BOS and EOS */
	const char *chat_template; /* tokenizer.chat_template, or NULL */
};

struct preset {
	const char *name;          /* --preset */
	const char *model_name;    /* general.name */
	const char *arch;
	uint32_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, vocab, n_ctx;
	float rope_base, rms_eps;
	enum act act;              /* what the model was trained with */
	uint32_t type;             /* linear weights */
	uint32_t embed_type;       /* token embedding and the LM head */
	int untied;                /* a separate output.weight */
	const struct bpe_family *bpe;
	const char *about;         /* --help */
};

const struct preset *preset_find(const char *name);
/* Every preset's name and line for --help, into out. */
void preset_list(char *out, size_t cap);
/* Every preset as one line of key=value pairs (bitnet-model presets). */
void preset_print_all(FILE *out);
/* general.file_type as llama.cpp's converters and llama-quantize write it for linear weights
 * of this type (llama.h's LLAMA_FTYPE_*; 40 is bitnet.cpp's MOSTLY_I2_S). */
uint32_t preset_file_type(uint32_t type);

/* The synthetic byte-level BPE vocabulary of n tokens of a family: its leading specials, the
 * 256 byte tokens (GPT-2's byte-to-character map), merged tokens of lowercase letters with and
 * without the word-start mark, each one merge of two earlier tokens, then its trailing
 * specials. 0, -EINVAL (n too small for the specials and bytes), -ENOMEM. */
int bpe_vocab_make(const struct bpe_family *f, uint32_t n, struct hf_vocab *v);
/* The family's tokenizer keys for v (made by bpe_vocab_make): model gpt2, pre, tokens, types,
 * merges, BOS, EOS. 0 or the writer's error. */
int bpe_family_add_keys(struct bn_gguf_writer *w, const struct bpe_family *f,
			const struct hf_vocab *v);

#endif /* BITNET_MODEL_PRESETS_H */
