/* SPDX-License-Identifier: MIT */
/*
 * vocab.c — the vocabulary for the grammar engine (tokens.h): every token's bytes and kind, the
 * end-of-generation ids, and the byte trie of text tokens; stored pieces turned into bytes
 * (GPT-2's byte alphabet, SentencePiece's U+2581 and <0xNN> byte tokens).
 */
#include "tokens.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Pieces                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* GPT-2's byte alphabet: the printable bytes ! .. ~, ¡ .. ¬ and ® .. ÿ stand for themselves;
 * the other 68 bytes, in order, are U+0100 onwards. Returns the byte, or -1. */
static int byte_level_byte(uint32_t cp)
{
	if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
		return (int)cp;
	if (cp < 0x100 || cp >= 0x100 + 68)
		return -1;
	uint32_t k = cp - 0x100;
	for (int b = 0; b < 256; b++) {
		int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
				(b >= 0xAE && b <= 0xFF);
		if (!printable && k-- == 0)
			return b;
	}
	return -1;
}

static int hex_digit(char ch)
{
	return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
	       : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

int bn_grammar_piece_bytes(uint32_t style, const char *piece, size_t len, uint8_t *out,
			   size_t cap)
{
	const uint8_t *p = (const uint8_t *)piece;
	size_t n = 0;
	if (style == BN_GRAMMAR_PIECES_SENTENCEPIECE && len == 6 && !memcmp(piece, "<0x", 3) &&
	    piece[5] == '>' && hex_digit(piece[3]) >= 0 && hex_digit(piece[4]) >= 0) {
		if (cap < 1)
			return -ENOSPC;
		out[0] = (uint8_t)(hex_digit(piece[3]) << 4 | hex_digit(piece[4]));
		return 1;
	}
	if (style != BN_GRAMMAR_PIECES_SENTENCEPIECE && style != BN_GRAMMAR_PIECES_BYTE_LEVEL)
		return -EINVAL;
	for (size_t i = 0; i < len;) {
		uint32_t l;
		int32_t cp = gr_utf8_decode(p + i, len - i, &l);
		if (cp < 0)
			return -EINVAL;
		if (style == BN_GRAMMAR_PIECES_BYTE_LEVEL) {
			int b = byte_level_byte((uint32_t)cp);
			if (b < 0)
				return -EINVAL;
			if (n + 1 > cap)
				return -ENOSPC;
			out[n++] = (uint8_t)b;
		} else if (cp == 0x2581) {
			if (n + 1 > cap)
				return -ENOSPC;
			out[n++] = ' ';
		} else {
			if (n + l > cap)
				return -ENOSPC;
			memcpy(out + n, p + i, l);
			n += l;
		}
		i += l;
	}
	return (int)n;
}

/* ------------------------------------------------------------------------------------------ */
/* The trie                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static const struct bn_grammar_vocab *sort_vocab;

static int cmp_token_bytes(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y, la, lb;
	const uint8_t *pa = vocab_bytes(sort_vocab, a, &la), *pb = vocab_bytes(sort_vocab, b, &lb);
	int c = memcmp(pa, pb, la < lb ? la : lb);
	if (c)
		return c;
	if (la != lb)
		return la < lb ? -1 : 1;
	return a < b ? -1 : a > b;
}

static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;

/* The text tokens sorted by their bytes: depth-first order of their trie. */
static uint32_t *sorted_text_tokens(const struct bn_grammar_vocab *v, uint32_t *n_out)
{
	uint32_t *ids = malloc((size_t)v->n_tokens * sizeof(uint32_t)), n = 0;
	if (!ids)
		return NULL;
	for (uint32_t id = 0; id < v->n_tokens; id++)
		if (v->kind[id] == BN_GRAMMAR_TOKEN_TEXT && v->off[id + 1] > v->off[id])
			ids[n++] = id;
	pthread_mutex_lock(&sort_lock); /* qsort has no context argument in C11 */
	sort_vocab = v;
	qsort(ids, n, sizeof(uint32_t), cmp_token_bytes);
	pthread_mutex_unlock(&sort_lock);
	*n_out = n;
	return ids;
}

static int build_trie(struct bn_grammar_vocab *v)
{
	uint32_t n;
	uint32_t *ids = sorted_text_tokens(v, &n);
	if (!ids)
		return -ENOMEM;
	/* At most one node per byte of every token, plus the root. */
	size_t cap = 1;
	for (uint32_t i = 0; i < n; i++)
		cap += v->off[ids[i] + 1] - v->off[ids[i]];
	v->nodes = calloc(cap, sizeof(*v->nodes));
	v->node_tok = calloc(cap + 1, sizeof(uint32_t));
	uint32_t *open = malloc(((size_t)v->max_len + 1) * sizeof(uint32_t));
	if (!v->nodes || !v->node_tok || !open) {
		free(ids);
		free(open);
		return -ENOMEM;
	}
	v->trie_tok = ids;
	uint32_t nodes = 1;
	open[0] = 0;
	uint32_t prev_len = 0;
	const uint8_t *prev = NULL;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t len, lcp = 0;
		const uint8_t *b = vocab_bytes(v, ids[i], &len);
		while (prev && lcp < len && lcp < prev_len && b[lcp] == prev[lcp])
			lcp++;
		/* Nodes deeper than the common prefix are complete. */
		for (uint32_t d = lcp + 1; d <= prev_len; d++)
			v->nodes[open[d]].end = nodes;
		for (uint32_t d = lcp + 1; d <= len; d++) {
			v->nodes[nodes].byte = b[d - 1];
			v->nodes[nodes].depth = (uint16_t)d;
			open[d] = nodes++;
		}
		v->nodes[open[len]].has_tokens = 1;
		v->node_tok[open[len] + 1]++; /* counts for now */
		prev = b;
		prev_len = len;
	}
	for (uint32_t d = 0; d <= prev_len; d++)
		v->nodes[open[d]].end = nodes;
	v->nodes[0].end = nodes;
	for (uint32_t i = 0; i < nodes; i++)
		v->node_tok[i + 1] += v->node_tok[i];
	v->n_nodes = nodes;
	v->bytes_held += (size_t)nodes * (sizeof(*v->nodes) + 4) + (size_t)n * 4;
	free(open);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The vocabulary                                                                             */
/* ------------------------------------------------------------------------------------------ */

static void vocab_free(struct bn_grammar_vocab *v)
{
	free(v->bytes);
	free(v->off);
	free(v->kind);
	free(v->eog);
	free(v->nodes);
	free(v->node_tok);
	free(v->trie_tok);
	free(v);
}

static int copy_tokens(struct bn_grammar_vocab *v, const uint8_t *const *bytes,
		       const uint32_t *lens, const uint8_t *kinds)
{
	size_t total = 0, n_eog = 0;
	for (uint32_t i = 0; i < v->n_tokens; i++) {
		uint8_t k = kinds ? kinds[i] : BN_GRAMMAR_TOKEN_TEXT;
		if (k > BN_GRAMMAR_TOKEN_EOG)
			return -EINVAL;
		if (k == BN_GRAMMAR_TOKEN_TEXT && lens[i] > GR_MAX_TOKEN_BYTES)
			return -EINVAL;
		total += lens[i];
		n_eog += k == BN_GRAMMAR_TOKEN_EOG;
	}
	v->bytes = malloc(total ? total : 1);
	v->off = malloc(((size_t)v->n_tokens + 1) * sizeof(uint32_t));
	v->kind = malloc(v->n_tokens);
	v->eog = malloc((n_eog ? n_eog : 1) * sizeof(uint32_t));
	if (!v->bytes || !v->off || !v->kind || !v->eog || total > UINT32_MAX)
		return -ENOMEM;
	size_t at = 0;
	for (uint32_t i = 0; i < v->n_tokens; i++) {
		v->off[i] = (uint32_t)at;
		if (lens[i])
			memcpy(v->bytes + at, bytes[i], lens[i]);
		at += lens[i];
		v->kind[i] = kinds ? kinds[i] : BN_GRAMMAR_TOKEN_TEXT;
		if (v->kind[i] == BN_GRAMMAR_TOKEN_EOG)
			v->eog[v->n_eog++] = i;
		if (v->kind[i] == BN_GRAMMAR_TOKEN_TEXT && lens[i] > v->max_len)
			v->max_len = lens[i];
	}
	v->off[v->n_tokens] = (uint32_t)at;
	v->bytes_held = sizeof(*v) + total + (size_t)v->n_tokens * 9;
	return 0;
}

int bn_grammar_vocab_new(uint32_t n_tokens, const uint8_t *const *bytes, const uint32_t *lens,
			 const uint8_t *kinds, struct bn_grammar_vocab **out)
{
	*out = NULL;
	if (n_tokens == 0 || n_tokens > (1u << 24))
		return -EINVAL;
	struct bn_grammar_vocab *v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	atomic_init(&v->refs, 1);
	v->n_tokens = n_tokens;
	v->words = (n_tokens + 63) / 64;
	int rc = copy_tokens(v, bytes, lens, kinds);
	if (rc == 0)
		rc = build_trie(v);
	if (rc) {
		vocab_free(v);
		return rc;
	}
	*out = v;
	return 0;
}

void bn_grammar_vocab_ref(struct bn_grammar_vocab *v)
{
	atomic_fetch_add_explicit(&v->refs, 1, memory_order_relaxed);
}

void bn_grammar_vocab_unref(struct bn_grammar_vocab *v)
{
	if (v && atomic_fetch_sub_explicit(&v->refs, 1, memory_order_acq_rel) == 1)
		vocab_free(v);
}

uint32_t bn_grammar_vocab_size(const struct bn_grammar_vocab *v)
{
	return v->n_tokens;
}
