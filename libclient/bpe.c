/* SPDX-License-Identifier: MIT */
/*
 * libbitnet-client: byte-level BPE (GGUF tokenizer.ggml.model = "gpt2"), as GPT-2, LLaMA-3
 * and Hugging Face tokenizers do it.
 *
 * 1. Split: the pre-tokenizer's pattern cuts the text into words (LLaMA-3's, GPT-2's or
 *    Falcon's; PCRE2 with Unicode properties and its JIT; bytes that are not valid UTF-8
 *    match nothing and form words of their own).
 * 2. Bytes to symbols: GPT-2's byte alphabet gives every byte a character, and so a token.
 * 3. Merges by rank: the adjacent pair with the lowest merge rank is joined, the leftmost of
 *    equal pairs first, until no pair has a merge. A heap of candidates with stale ones
 *    skipped keeps this O(n log n) in the word's length. With LLaMA-3's pre-tokenizer a word
 *    that is itself a token is that token, merges or not (Hugging Face's ignore_merges).
 */
#define _GNU_SOURCE
#define PCRE2_CODE_UNIT_WIDTH 8
#include "bitnet_client.h"
#include "tokenizer_internal.h"

#include <errno.h>
#include <limits.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

/* The split patterns, as the tokenizers' own definitions give them. */
static const char llama3_pattern[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
	" ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char gpt2_pattern[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* Falcon3's and Falcon-E's, which bitnet.cpp's llama.cpp splits in three passes, as Hugging
 * Face's pre-tokenizer Sequence [Punctuation (contiguous), ByteLevel (GPT-2's pattern), Digits
 * (each digit alone)] does: runs of punctuation (Unicode P, and the ASCII punctuation that
 * Unicode calls symbols: $ + < = > ^ ` | ~) are pieces of their own; GPT-2's pattern splits
 * each other piece; every digit is a word. One pass here: the runs come first; the other
 * classes leave the punctuation out; GPT-2's (?!\S) also holds where punctuation ends the
 * piece; GPT-2's contractions cannot match (the apostrophe is a piece of its own); " ?\p{N}+"
 * becomes \p{N} (the space before a number is then a word of its own, as Digits leaves it). */
#define FALCON_PUNCT "\\p{P}$+<=>^`|~"
static const char falcon_pattern[] =
	"[" FALCON_PUNCT "]+| ?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}" FALCON_PUNCT "]+|"
	"\\s+(?![^\\s" FALCON_PUNCT "])|\\s+";

/* ------------------------------------------------------------------------------------------ */
/* GPT-2's byte alphabet                                                                       */
/* ------------------------------------------------------------------------------------------ */

/* Printable bytes stand for themselves; the other 68 for U+0100 onwards, in byte order. */
static int byte_printable(uint32_t b)
{
	return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
}

static uint32_t byte_char(uint32_t byte)
{
	if (byte_printable(byte))
		return byte;
	uint32_t n = 0;
	for (uint32_t b = 0; b < byte; b++)
		n += !byte_printable(b);
	return 256 + n;
}

/* The byte a character of the alphabet stands for, or -1. */
static int char_byte(uint32_t cp)
{
	if (cp < 256)
		return byte_printable(cp) ? (int)cp : -1;
	uint32_t n = 256;
	for (uint32_t b = 0; b < 256; b++)
		if (!byte_printable(b) && n++ == cp)
			return (int)b;
	return -1;
}

/* The alphabet's characters are below U+0800: one or two bytes of UTF-8. */
static size_t put_char(char *p, uint32_t cp)
{
	if (cp < 0x80) {
		p[0] = (char)cp;
		return 1;
	}
	p[0] = (char)(0xc0 | (cp >> 6));
	p[1] = (char)(0x80 | (cp & 0x3f));
	return 2;
}

size_t bpe_byte_utf8(uint32_t byte, char out[2])
{
	return put_char(out, byte_char(byte));
}

size_t bpe_alphabet_text(const char *raw, size_t n, char *out)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += put_char(out + k, byte_char((uint8_t)raw[i]));
	return k;
}

/* Decodes one UTF-8 character of at most n bytes: its code point and length, or 0. */
static size_t utf8_char(const uint8_t *p, size_t n, uint32_t *cp)
{
	if (p[0] < 0x80) {
		*cp = p[0];
		return 1;
	}
	size_t want = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc0 ? 2 : 0;
	if (want == 0 || want > n)
		return 0;
	uint32_t c = p[0] & (0x7f >> want);
	for (size_t i = 1; i < want; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (p[i] & 0x3f);
	}
	*cp = c;
	return want;
}

/* ------------------------------------------------------------------------------------------ */
/* Preparing the vocabulary                                                                    */
/* ------------------------------------------------------------------------------------------ */

static uint32_t pair_hash(uint64_t key)
{
	key *= 0x9e3779b97f4a7c15ULL; /* Fibonacci hashing: the high bits mix every input bit */
	return (uint32_t)(key >> 32);
}

static const struct bpe_merge_slot *merge_find(const struct bn_vocab *v, uint32_t l, uint32_t r)
{
	uint64_t key = (uint64_t)l << 32 | r;
	for (uint32_t i = pair_hash(key) & v->merge_mask;; i = (i + 1) & v->merge_mask) {
		const struct bpe_merge_slot *s = &v->merges[i];
		if (s->key == key)
			return s;
		if (s->key == UINT64_MAX)
			return NULL;
	}
}

/* A merge is a pair of tokens whose (encoding) texts joined are the result's; a pair named
 * twice keeps its first (lowest) rank. */
static int merge_ok(const struct bn_vocab *v, const struct bn_vocab_merge *m)
{
	if (m->left >= v->n_tokens || m->right >= v->n_tokens || m->result >= v->n_tokens)
		return 0;
	uint32_t l, r, n;
	const char *left = vocab_enc_text(v, m->left, &l), *right = vocab_enc_text(v, m->right, &r);
	const char *result = vocab_enc_text(v, m->result, &n);
	return n == l + r && memcmp(result, left, l) == 0 && memcmp(result + l, right, r) == 0;
}

#define MERGE_PREFETCH_AHEAD 16

static int merges_build(struct bn_vocab *v, const struct bn_vocab_merge *m, uint32_t n)
{
	uint64_t cap = 16;
	while (cap < 2 * (uint64_t)n)
		cap *= 2;
	v->merges = malloc((size_t)cap * sizeof(*v->merges));
	if (!v->merges)
		return -ENOMEM;
	memset(v->merges, 0xff, (size_t)cap * sizeof(*v->merges));
	v->merge_mask = (uint32_t)(cap - 1);
	for (uint32_t rank = 0; rank < n; rank++) {
		/* The table is far larger than the caches and each pair lands anywhere in it:
		 * its line is asked for some merges ahead, or every insert waits for memory. */
		if (rank + MERGE_PREFETCH_AHEAD < n) {
			const struct bn_vocab_merge *a = &m[rank + MERGE_PREFETCH_AHEAD];
			uint64_t ahead = (uint64_t)a->left << 32 | a->right;
			__builtin_prefetch(&v->merges[pair_hash(ahead) & v->merge_mask], 1);
		}
		if (!merge_ok(v, &m[rank]))
			return -BN_E_PROTOCOL;
		uint64_t key = (uint64_t)m[rank].left << 32 | m[rank].right;
		uint32_t i = pair_hash(key) & v->merge_mask;
		while (v->merges[i].key != UINT64_MAX && v->merges[i].key != key)
			i = (i + 1) & v->merge_mask;
		if (v->merges[i].key == key)
			continue;
		v->merges[i] = (struct bpe_merge_slot){ key, rank, m[rank].result };
	}
	return 0;
}

/* Every byte's character must be a token, or some text could not be encoded. */
static int alphabet_build(struct bn_vocab *v)
{
	for (uint32_t b = 0; b < 256; b++) {
		char c[2];
		size_t n = bpe_byte_utf8(b, c);
		v->alphabet[b][0] = (uint8_t)n;
		memcpy(&v->alphabet[b][1], c, n);
		v->byte_id[b] = vocab_map_find(v, c, n);
		if (v->byte_id[b] == NO_TOKEN)
			return -BN_E_PROTOCOL;
	}
	return 0;
}

/* A token's bytes: a regular token's characters mapped back through the alphabet (a
 * character outside it is kept as it is); other tokens' texts are literal. */
static size_t token_bytes(const struct bn_vocab *v, uint32_t id, char *out)
{
	const uint8_t *t = (const uint8_t *)v->text + v->offset[id];
	size_t len = vocab_token_len(v, id), n = 0;
	int literal = v->type[id] == TYPE_CONTROL || v->type[id] == TYPE_USER_DEFINED ||
		      v->type[id] == TYPE_UNKNOWN;
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		size_t k = literal ? 0 : utf8_char(t + i, len - i, &cp);
		int b = k ? char_byte(cp) : -1;
		if (b < 0) {
			k = k ? k : 1;
			memcpy(out + n, t + i, k);
			n += k;
		} else {
			out[n++] = (char)b;
		}
		i += k;
	}
	return n;
}

static int bytes_build(struct bn_vocab *v)
{
	/* Decoding never lengthens a text. */
	v->bytes = malloc(v->offset[v->n_tokens] + 1);
	v->bytes_offset = malloc(((size_t)v->n_tokens + 1) * sizeof(*v->bytes_offset));
	if (!v->bytes || !v->bytes_offset)
		return -ENOMEM;
	uint32_t at = 0;
	for (uint32_t id = 0; id < v->n_tokens; id++) {
		v->bytes_offset[id] = at;
		at += (uint32_t)token_bytes(v, id, v->bytes + at);
	}
	v->bytes_offset[v->n_tokens] = at;
	return 0;
}

int bpe_encoding_texts(struct bn_vocab *v)
{
	uint64_t size = 0;
	int needed = 0;
	for (uint32_t id = 0; id < v->n_tokens; id++) {
		uint32_t n = vocab_token_len(v, id);
		uint64_t k = n;
		for (uint32_t i = 0; bpe_raw_text_type(v->type[id]) && i < n; i++) {
			uint8_t b = (uint8_t)v->text[v->offset[id] + i];
			k += b >= 0x80 || !byte_printable(b); /* two bytes of UTF-8 in the alphabet */
		}
		needed |= k != n;
		size += k;
	}
	if (!needed)
		return 0;
	if (size > UINT32_MAX)
		return -BN_E_PROTOCOL;
	v->enc_text = malloc(size ? size : 1);
	v->enc_offset = malloc(((size_t)v->n_tokens + 1) * sizeof(*v->enc_offset));
	if (!v->enc_text || !v->enc_offset)
		return -ENOMEM;
	uint32_t at = 0;
	for (uint32_t id = 0; id < v->n_tokens; id++) {
		const char *t = v->text + v->offset[id];
		uint32_t n = vocab_token_len(v, id);
		v->enc_offset[id] = at;
		if (bpe_raw_text_type(v->type[id])) {
			at += (uint32_t)bpe_alphabet_text(t, n, v->enc_text + at);
		} else {
			memcpy(v->enc_text + at, t, n);
			at += n;
		}
	}
	v->enc_offset[v->n_tokens] = at;
	return 0;
}

static const char *split_pattern(uint32_t pre)
{
	switch (pre) {
	case BN_PRE_GPT2: return gpt2_pattern;
	case BN_PRE_FALCON3:
	case BN_PRE_FALCON_E: return falcon_pattern;
	default: return llama3_pattern;
	}
}

static int split_build(struct bn_vocab *v)
{
	const char *pattern = split_pattern(v->pre_tokenizer);
	int err;
	PCRE2_SIZE where;
	pcre2_code *code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
					 PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err,
					 &where, NULL);
	if (!code)
		return -ENOMEM; /* the patterns are fixed: only memory can fail */
	/* Without JIT (a kernel or policy that forbids executable memory) the interpreter
	 * matches the same; only slower. */
	pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
	v->split = code;
	return 0;
}

int bpe_prepare(struct bn_vocab *v, const struct bn_vocab_merge *merges, uint32_t n)
{
	int rc = alphabet_build(v);
	if (rc == 0)
		rc = merges_build(v, merges, n);
	if (rc == 0)
		rc = bytes_build(v);
	if (rc == 0)
		rc = split_build(v);
	return rc;
}

void bpe_release(struct bn_vocab *v)
{
	free(v->merges);
	free(v->bytes);
	free(v->bytes_offset);
	pcre2_code_free(v->split);
	v->merges = NULL;
	v->bytes = NULL;
	v->bytes_offset = NULL;
	v->split = NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding one word                                                                           */
/* ------------------------------------------------------------------------------------------ */

/* A possible merge of the symbols at positions left and right (its neighbour), valid while
 * both still hold the ids it was made from. */
struct candidate {
	uint32_t rank, left, right, left_id, right_id;
};

/* Scratch space for the words of one call, grown to the longest word seen. */
struct word_state {
	size_t cap;         /* symbols the arrays hold */
	uint32_t *id;       /* symbol id at each position; NO_TOKEN once merged away */
	uint32_t *next;     /* the next live position, or n */
	uint32_t *prev;     /* the previous live position, or UINT32_MAX */
	struct candidate *heap;
	uint32_t n_heap;
	char *text;         /* the word in the byte alphabet, for the whole-word lookup */
};

static int before(const struct candidate *a, const struct candidate *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(struct word_state *w, struct candidate c)
{
	uint32_t i = w->n_heap++;
	while (i > 0 && before(&c, &w->heap[(i - 1) / 2])) {
		w->heap[i] = w->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	w->heap[i] = c;
}

static struct candidate heap_pop(struct word_state *w)
{
	struct candidate top = w->heap[0], last = w->heap[--w->n_heap];
	uint32_t i = 0;
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= w->n_heap)
			break;
		if (c + 1 < w->n_heap && before(&w->heap[c + 1], &w->heap[c]))
			c++;
		if (!before(&w->heap[c], &last))
			break;
		w->heap[i] = w->heap[c];
		i = c;
	}
	w->heap[i] = last;
	return top;
}

static void try_pair(const struct bn_vocab *v, struct word_state *w, uint32_t left,
		     uint32_t right, uint32_t n)
{
	if (left == UINT32_MAX || right >= n)
		return;
	const struct bpe_merge_slot *m = merge_find(v, w->id[left], w->id[right]);
	if (m)
		heap_push(w, (struct candidate){ m->rank, left, right, w->id[left], w->id[right] });
}

/* The heap holds at most n - 1 first candidates and two per merge, of which there are at
 * most n - 1: 3n bounds it. */
static void merge_word(const struct bn_vocab *v, struct word_state *w, uint32_t n)
{
	w->n_heap = 0;
	for (uint32_t i = 0; i + 1 < n; i++)
		try_pair(v, w, i, i + 1, n);
	while (w->n_heap) {
		struct candidate c = heap_pop(w);
		if (w->id[c.left] != c.left_id || w->id[c.right] != c.right_id ||
		    w->next[c.left] != c.right)
			continue; /* stale: a side was merged since */
		w->id[c.left] = merge_find(v, c.left_id, c.right_id)->result;
		w->id[c.right] = NO_TOKEN;
		w->next[c.left] = w->next[c.right];
		if (w->next[c.right] < n)
			w->prev[w->next[c.right]] = c.left;
		try_pair(v, w, w->prev[c.left], c.left, n);
		try_pair(v, w, c.left, w->next[c.left], n);
	}
}

static int state_reserve(struct word_state *w, size_t n)
{
	if (n <= w->cap)
		return 0;
	if (n > UINT32_MAX / 4)
		return -BN_E_TOO_LONG;
	size_t cap = w->cap ? w->cap : 64;
	while (cap < n)
		cap *= 2;
	uint32_t *id = realloc(w->id, cap * sizeof(*id));
	if (id)
		w->id = id;
	uint32_t *next = realloc(w->next, cap * sizeof(*next));
	if (next)
		w->next = next;
	uint32_t *prev = realloc(w->prev, cap * sizeof(*prev));
	if (prev)
		w->prev = prev;
	struct candidate *heap = realloc(w->heap, 3 * cap * sizeof(*heap));
	if (heap)
		w->heap = heap;
	char *text = realloc(w->text, 2 * cap);
	if (text)
		w->text = text;
	if (!id || !next || !prev || !heap || !text)
		return -ENOMEM;
	w->cap = cap;
	return 0;
}

/* A word of the text, and its hash in the byte alphabet (LLaMA-3's whole-word lookup) where
 * the prefetches computed it. */
struct word_span {
	size_t start, len;
	uint32_t hash;
	uint32_t hashed;
};

/* The text map's hash of a word's text in the byte alphabet, without writing that text. */
static uint32_t alphabet_hash(const struct bn_vocab *v, const uint8_t *word, size_t n)
{
	uint32_t h = VOCAB_HASH_INIT;
	for (size_t i = 0; i < n; i++) {
		const uint8_t *a = v->alphabet[word[i]];
		for (uint8_t k = 1; k <= a[0]; k++)
			h = vocab_hash_step(h, a[k]);
	}
	return h;
}

/* One word's ids; span->hash is used by the LLaMA-3 whole-word lookup. */
static int encode_word(const struct bn_vocab *v, struct word_state *w, const uint8_t *text,
		       const struct word_span *span, uint32_t *out, uint32_t cap, size_t *count)
{
	const uint8_t *word = text + span->start;
	size_t len = span->len;
	int rc = state_reserve(w, len);
	if (rc < 0)
		return rc;
	uint32_t n = (uint32_t)len;
	if (v->pre_tokenizer == BN_PRE_LLAMA3) {
		size_t text_len = 0;
		for (uint32_t i = 0; i < n; i++) {
			const uint8_t *a = v->alphabet[word[i]];
			memcpy(w->text + text_len, a + 1, a[0]);
			text_len += a[0];
		}
		uint32_t id = span->hashed ? vocab_map_find_hashed(v, w->text, text_len, span->hash)
					   : vocab_map_find(v, w->text, text_len);
		if (id != NO_TOKEN) {
			vocab_emit(out, cap, count, id);
			return 0;
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		w->id[i] = v->byte_id[word[i]];
		w->next[i] = i + 1;
		w->prev[i] = i ? i - 1 : UINT32_MAX;
	}
	merge_word(v, w, n);
	for (uint32_t i = 0; i < n; i = w->next[i])
		vocab_emit(out, cap, count, w->id[i]);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Splitting the text                                                                          */
/* ------------------------------------------------------------------------------------------ */

static void state_free(struct word_state *w)
{
	free(w->id);
	free(w->next);
	free(w->prev);
	free(w->heap);
	free(w->text);
}

/* Words are split off in batches: their whole-word lookups' loads are started together
 * before any is used, so that their cache misses overlap instead of coming one after the
 * other. In a daemon, between forward steps that stream the weights, the text map is out of
 * the caches, and a 100-token text waited ~50 µs on ~100 such chains (docs/PERFORMANCE.md). */
#define WORD_BATCH 64
/* A longer text warms the tables itself; for it the hashing the prefetches need is only
 * extra work (hashing a word through the alphabet table is slower than hashing the word's
 * alphabet text, which the lookup writes anyway: 1 MiB encoded 16% slower with it). */
#define PREFETCH_TEXT_MAX (64u << 10)

/* Hashes each word of the batch, then three rounds over it, each loading what the previous
 * one's loads point to: the map slot, the token's text offsets, the token's text. Only
 * hashes and prefetches: nothing is decided here. */
static void prefetch_words(const struct bn_vocab *v, const uint8_t *t, struct word_span *w,
			   uint32_t n)
{
	uint32_t slot[WORD_BATCH];
	for (uint32_t i = 0; i < n; i++) {
		w[i].hash = alphabet_hash(v, t + w[i].start, w[i].len);
		w[i].hashed = 1;
		slot[i] = w[i].hash & v->map_mask;
		__builtin_prefetch(&v->map[slot[i]]);
	}
	const uint32_t *offset = v->enc_text ? v->enc_offset : v->offset;
	const char *text = v->enc_text ? v->enc_text : v->text;
	for (uint32_t i = 0; i < n; i++) {
		slot[i] = v->map[slot[i]]; /* id + 1, or 0 */
		if (slot[i])
			__builtin_prefetch(&offset[slot[i] - 1]);
	}
	for (uint32_t i = 0; i < n; i++)
		if (slot[i])
			__builtin_prefetch(text + offset[slot[i] - 1]);
}

/* Splits words off t[*at..len) until fewer than 2 places of max are left (at least one
 * split: 1 or 2 words); returns how many, or a negative error. */
static int split_words(const struct bn_vocab *v, pcre2_match_data *md, const uint8_t *t,
		       size_t len, size_t *at, struct word_span *w, int max)
{
	int n = 0;
	while (*at < len && n <= max - 2) {
		/* PCRE2_MATCH_INVALID_UTF (set at compile time) means no validity scan of the
		 * whole subject per call, which would make this loop quadratic. */
		int m = pcre2_match(v->split, t, len, *at, 0, md, NULL);
		if (m < 0 && m != PCRE2_ERROR_NOMATCH)
			return m == PCRE2_ERROR_NOMEMORY ? -ENOMEM : -BN_E_INVALID;
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
		size_t start = m < 0 ? len : ov[0], end = m < 0 ? len : ov[1];
		if (start > *at) /* bytes no alternative matches: invalid UTF-8 */
			w[n++] = (struct word_span){ *at, start - *at, 0, 0 };
		if (end > start)
			w[n++] = (struct word_span){ start, end - start, 0, 0 };
		if (end > *at) {
			*at = end;
		} else { /* an empty match, which no pattern makes: keep the byte */
			w[n++] = (struct word_span){ *at, 1, 0, 0 };
			(*at)++;
		}
	}
	return n;
}

int bpe_encode(const struct bn_vocab *v, const char *text, size_t len, uint32_t *out,
	       uint32_t cap, size_t *n)
{
	struct word_state w = { 0 };
	struct word_span words[WORD_BATCH];
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(v->split, NULL);
	int rc = md ? 0 : -ENOMEM;
	const uint8_t *t = (const uint8_t *)text;
	int prefetch = v->pre_tokenizer == BN_PRE_LLAMA3 && len <= PREFETCH_TEXT_MAX;
	for (size_t at = 0; rc == 0 && at < len;) {
		/* Without prefetches, word by word: batches only cost a long text locality. */
		int k = split_words(v, md, t, len, &at, words, prefetch ? WORD_BATCH : 2);
		rc = k < 0 ? k : 0;
		if (k > 0 && prefetch)
			prefetch_words(v, t, words, (uint32_t)k);
		for (int i = 0; rc == 0 && i < k; i++)
			rc = encode_word(v, &w, t, &words[i], out, cap, n);
	}
	pcre2_match_data_free(md);
	state_free(&w);
	return rc;
}

int bpe_split(const struct bn_vocab *v, const char *text, size_t len, size_t *ends, size_t cap)
{
	struct word_span words[2];
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(v->split, NULL);
	if (!md)
		return -ENOMEM;
	size_t n = 0;
	int rc = 0;
	for (size_t at = 0; rc >= 0 && at < len;) {
		rc = split_words(v, md, (const uint8_t *)text, len, &at, words, 2);
		for (int i = 0; rc > 0 && i < rc; i++, n++)
			if (n < cap)
				ends[n] = words[i].start + words[i].len;
	}
	pcre2_match_data_free(md);
	return rc < 0 ? rc : n > INT_MAX ? -BN_E_TOO_LONG : (int)n;
}
