/* SPDX-License-Identifier: MIT */
/*
 * tokenizer_internal.h — the vocabulary as the tokenizer's files share it (tokenizer.c: the
 * payload, the text map, SentencePiece encoding and special tokens; bpe.c: byte-level BPE;
 * detok.c: ids to text; chat.c: templates). Nothing here is exported.
 */
#ifndef BITNET_TOKENIZER_INTERNAL_H
#define BITNET_TOKENIZER_INTERNAL_H

#include "bitnet_client.h"

#include <stddef.h>
#include <stdint.h>

/* bn_vocab_entry.type: llama.cpp's token types, as the GGUF file stores them. */
enum token_type {
	TYPE_UNDEFINED = 0,
	TYPE_NORMAL = 1,
	TYPE_UNKNOWN = 2,
	TYPE_CONTROL = 3,
	TYPE_USER_DEFINED = 4,
	TYPE_UNUSED = 5,
	TYPE_BYTE = 6,
};

#define NO_TOKEN UINT32_MAX

struct bpe_merge_slot {
	uint64_t key;          /* left << 32 | right; UINT64_MAX: empty */
	uint32_t rank, result;
};

struct bn_vocab {
	uint32_t kind;         /* enum bn_vocab_kind */
	uint32_t n_tokens;
	uint32_t bos_id, eos_id, unk_id;
	uint32_t add_bos;
	uint32_t add_eos;      /* the head's BN_VOCAB_HEAD_ADD_EOS */
	uint32_t pre_tokenizer; /* enum bn_pre_tokenizer */
	uint32_t chat_template; /* enum bn_chat_template */
	uint32_t ext_flags;    /* BN_VOCAB_PRE_DETECTED, ... */
	char *text;            /* every token's text, back to back */
	uint32_t *offset;      /* [n_tokens + 1]: token i is text[offset[i], offset[i + 1]) */
	float *score;          /* [n_tokens] */
	uint8_t *type;         /* [n_tokens] enum token_type */
	uint32_t max_len;      /* longest text among the tokens the map holds */
	uint32_t byte_id[256]; /* SPM: the token <0xXX>; BPE: the token of the byte's character */
	uint32_t *map;         /* open addressing, linear probing: id + 1, 0 = empty */
	uint32_t map_mask;
	/* Special tokens (control and user-defined), matched in text only on request: ids
	 * bucketed by first byte, each bucket longest first. */
	uint32_t *special;     /* [n_special] */
	uint32_t special_start[257];
	/* End-of-generation ids, ascending. */
	uint32_t *eog;
	uint32_t n_eog;
	/* BPE only. */
	struct bpe_merge_slot *merges; /* open addressing on the pair */
	uint32_t merge_mask;
	uint8_t alphabet[256][3]; /* each byte's character in GPT-2's alphabet: length, UTF-8 */
	char *bytes;           /* every token's decoded bytes (the byte alphabet undone) */
	/* Each token's text as the encoder looks it up, when it is not the token's text: a
	 * converter stores a user-defined (added) token decoded ("\n"), while merges and
	 * pre-tokenized words spell it in the byte alphabet ("Ċ"). NULL when every token's is
	 * its text. */
	char *enc_text;
	uint32_t *enc_offset;  /* [n_tokens + 1], like offset */
	uint32_t *bytes_offset; /* [n_tokens + 1] */
	void *split;           /* the pre-tokenizer's compiled pattern (pcre2_code_8 *) */
};

static inline uint32_t vocab_token_len(const struct bn_vocab *v, uint32_t id)
{
	return v->offset[id + 1] - v->offset[id];
}

/* The text the encoders match token id by (see enc_text); its length in *len. */
static inline const char *vocab_enc_text(const struct bn_vocab *v, uint32_t id, uint32_t *len)
{
	if (!v->enc_text) {
		*len = vocab_token_len(v, id);
		return v->text + v->offset[id];
	}
	*len = v->enc_offset[id + 1] - v->enc_offset[id];
	return v->enc_text + v->enc_offset[id];
}

/* The id whose text is exactly p[0..n), among normal, user-defined and undefined tokens (the
 * ones encoding may produce), or NO_TOKEN. */
uint32_t vocab_map_find(const struct bn_vocab *v, const char *p, size_t n);
/* The same with the text's hash already known (VOCAB_HASH_INIT, then vocab_hash_step). */
uint32_t vocab_map_find_hashed(const struct bn_vocab *v, const char *p, size_t n, uint32_t hash);

/* The byte a SentencePiece byte token stands for ("<0x0A>" -> 10), or -1. */
int vocab_byte_of(const struct bn_vocab *v, uint32_t id);

/* Builds the text map over v's tokens (vocab_map.c). 0 or -ENOMEM. */
int vocab_map_build(struct bn_vocab *v);
/* SentencePiece's byte tokens (byte_id); bpe_prepare() fills byte_id for its own alphabet. */
void vocab_index_bytes(struct bn_vocab *v);

/* The text map's hash (FNV-1a), byte by byte: vocab_map_find hashes a text with it, and bpe.c
 * hashes a word in the byte alphabet without writing the alphabet's text out. */
#define VOCAB_HASH_INIT 2166136261u
static inline uint32_t vocab_hash_step(uint32_t h, uint8_t byte)
{
	return (h ^ byte) * 16777619u;
}

/* The bytes a UTF-8 character led by b needs after it, and the range of the first of them;
 * 0 for a byte that cannot lead one (detok.c's stream decoder; the daemon's text bound). */
static inline size_t utf8_lead_info(uint8_t b, uint8_t *lo, uint8_t *hi)
{
	*lo = 0x80;
	*hi = 0xbf;
	if (b >= 0xc2 && b <= 0xdf)
		return 1;
	if (b >= 0xe0 && b <= 0xef) {
		*lo = b == 0xe0 ? 0xa0 : 0x80; /* no overlong forms */
		*hi = b == 0xed ? 0x9f : 0xbf; /* no surrogates */
		return 2;
	}
	if (b >= 0xf0 && b <= 0xf4) {
		*lo = b == 0xf0 ? 0x90 : 0x80;
		*hi = b == 0xf4 ? 0x8f : 0xbf; /* nothing past U+10FFFF */
		return 3;
	}
	return 0;
}

/* Appends id to out if there is room; counts it either way. */
static inline void vocab_emit(uint32_t *out, uint32_t cap, size_t *n, uint32_t id)
{
	if (*n < cap)
		out[*n] = id;
	(*n)++;
}

/* A part of a text where special tokens are never matched (a chat message's own text). */
struct text_span {
	size_t start, len;
};

/* Text to ids: BN_TOK_* flags; special tokens (with BN_TOK_PARSE_SPECIAL) matched leftmost-
 * longest outside the spans `plain` (ascending, not overlapping); each run of text between
 * them encoded by the vocabulary's kind. Returns the count (which may exceed cap) or -error. */
int vocab_tokenize(const struct bn_vocab *v, const char *text, size_t len, uint32_t flags,
		   const struct text_span *plain, size_t n_plain, uint32_t *out, uint32_t cap);

/* bpe.c */
/* The character GPT-2's byte alphabet gives byte (0..255), UTF-8 encoded: its length, 1 or 2.
 * The daemon's vocabulary builder checks the same alphabet with it. */
size_t bpe_byte_utf8(uint32_t byte, char out[2]);
/* raw[0..n) in the byte alphabet, written to out (room for 2n bytes): its length. */
size_t bpe_alphabet_text(const char *raw, size_t n, char *out);
/* A user-defined token of a byte-level BPE vocabulary is stored as its raw text; the encoder
 * knows it by that text in the byte alphabet. 1 for such a token type, else 0. */
static inline int bpe_raw_text_type(uint32_t type)
{
	return type == TYPE_USER_DEFINED;
}
/* The encoding texts (enc_text) of a BPE vocabulary, before its text map is built: 0, or
 * -ENOMEM. Leaves enc_text NULL when no token needs one. */
int bpe_encoding_texts(struct bn_vocab *v);
/* Sets up what byte-level BPE needs from a parsed payload: the byte alphabet's tokens, the
 * merge table (merges: n triples in rank order, checked against the tokens), each token's
 * bytes, the split pattern. 0, -BN_E_PROTOCOL for merges or tokens that do not fit, -ENOMEM. */
int bpe_prepare(struct bn_vocab *v, const struct bn_vocab_merge *merges, uint32_t n);
void bpe_release(struct bn_vocab *v);
/* The pre-tokenizer's words of text[0..len): the end of each in ends[0..cap); returns how
 * many (which may exceed cap) or -error. The tests compare them with reference splits. */
int bpe_split(const struct bn_vocab *v, const char *text, size_t len, size_t *ends, size_t cap);
/* Encodes text without special tokens; appends to out like vocab_emit. 0 or -errno. */
int bpe_encode(const struct bn_vocab *v, const char *text, size_t len, uint32_t *out,
	       uint32_t cap, size_t *n);

/* tokenizer.c */
int spm_encode(const struct bn_vocab *v, const char *text, size_t len, uint32_t *out,
	       uint32_t cap, size_t *n);

#endif /* BITNET_TOKENIZER_INTERNAL_H */
