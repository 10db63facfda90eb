/* SPDX-License-Identifier: MIT */
/*
 * vocab_map.c — the vocabulary's text -> id map, which both encoders look tokens up in
 * (tokenizer.c for SentencePiece, bpe.c for byte-level BPE), and SentencePiece's byte tokens.
 */
#include "tokenizer_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint32_t hash_bytes(const char *p, size_t n)
{
	uint32_t h = VOCAB_HASH_INIT;
	for (size_t i = 0; i < n; i++)
		h = vocab_hash_step(h, (uint8_t)p[i]);
	return h;
}

/* Only pieces the encoders produce from text: control, unknown and byte tokens stand for
 * something else, and unused ones are never output. */
static int mergeable(uint8_t type)
{
	return type == TYPE_NORMAL || type == TYPE_USER_DEFINED || type == TYPE_UNDEFINED;
}

uint32_t vocab_map_find(const struct bn_vocab *v, const char *p, size_t n)
{
	return vocab_map_find_hashed(v, p, n, hash_bytes(p, n));
}

uint32_t vocab_map_find_hashed(const struct bn_vocab *v, const char *p, size_t n, uint32_t hash)
{
	if (n == 0 || n > v->max_len)
		return NO_TOKEN;
	for (uint32_t i = hash & v->map_mask;; i = (i + 1) & v->map_mask) {
		uint32_t e = v->map[i];
		if (e == 0)
			return NO_TOKEN;
		uint32_t id = e - 1, len;
		const char *t = vocab_enc_text(v, id, &len);
		if (len == n && memcmp(t, p, n) == 0)
			return id;
	}
}

/* Texts that occur twice map to the first id (SentencePiece refuses such models). A BPE
 * vocabulary's tokens are keyed by their encoding texts (bpe_encoding_texts). */
int vocab_map_build(struct bn_vocab *v)
{
	uint64_t cap = 16;
	while (cap < 2 * (uint64_t)v->n_tokens)
		cap *= 2;
	if (cap > (uint64_t)UINT32_MAX + 1)
		return -ENOMEM;
	v->map = calloc((size_t)cap, sizeof(*v->map));
	if (!v->map)
		return -ENOMEM;
	v->map_mask = (uint32_t)(cap - 1);
	for (uint32_t id = 0; id < v->n_tokens; id++) {
		uint32_t n;
		const char *t = vocab_enc_text(v, id, &n);
		if (!mergeable(v->type[id]) || n == 0)
			continue;
		if (n > v->max_len)
			v->max_len = n;
		if (vocab_map_find(v, t, n) != NO_TOKEN)
			continue;
		uint32_t i = hash_bytes(t, n) & v->map_mask;
		while (v->map[i])
			i = (i + 1) & v->map_mask;
		v->map[i] = id + 1;
	}
	return 0;
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* The byte a byte token stands for ("<0x0A>" -> 10), or -1 when its text is not of that form. */
int vocab_byte_of(const struct bn_vocab *v, uint32_t id)
{
	const char *t = v->text + v->offset[id];
	if (v->type[id] != TYPE_BYTE || vocab_token_len(v, id) != 6 || memcmp(t, "<0x", 3) ||
	    t[5] != '>')
		return -1;
	int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
	return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* SentencePiece's byte tokens; bpe_prepare() fills byte_id for its own alphabet. */
void vocab_index_bytes(struct bn_vocab *v)
{
	for (int b = 0; b < 256; b++)
		v->byte_id[b] = NO_TOKEN;
	for (uint32_t id = 0; v->kind == BN_VOCAB_SPM && id < v->n_tokens; id++) {
		int b = vocab_byte_of(v, id);
		if (b >= 0 && v->byte_id[b] == NO_TOKEN)
			v->byte_id[b] = id;
	}
}
