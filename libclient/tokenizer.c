/* SPDX-License-Identifier: MIT */
/*
 * libbitnet-client: the model's vocabulary and text -> token ids.
 *
 * The vocabulary comes from the daemon as a BN_CTL_TOKENIZER (or, from older daemons,
 * BN_CTL_VOCAB) payload in a sealed memfd (shm/PROTOCOL.md §10.3); it is checked field by
 * field against its size, read once, and kept as a private copy with a hash map from token
 * text to id.
 *
 * Special tokens (control and user-defined) are matched in text only when the caller asks
 * (BN_TOK_PARSE_SPECIAL, as llama.cpp's parse_special), leftmost-longest, as Hugging Face
 * tokenizers match added tokens; each run of text between them is encoded on its own.
 *
 * SentencePiece vocabularies are encoded as its bpe_model and llama.cpp's llm_tokenizer_spm
 * do it: spaces become U+2581 and one is prepended; the text is split into UTF-8 characters;
 * then, again and again, the adjacent pair whose concatenation is a token with the highest
 * score is merged (equal scores: the leftmost pair), kept in a max-heap ordered by
 * (score, -position). Each final piece is its token, or else its bytes as byte tokens
 * <0xXX>, or else the unknown token. Byte-level BPE vocabularies are in bpe.c.
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "tokenizer_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SPACE_MARK "\xe2\x96\x81" /* U+2581, SentencePiece's word-start mark */
#define SPACE_MARK_LEN 3

/* ------------------------------------------------------------------------------------------ */
/* Accessors and names                                                                         */
/* ------------------------------------------------------------------------------------------ */

uint32_t bn_vocab_kind(const struct bn_vocab *v)
{
	return v->kind;
}

uint32_t bn_vocab_n_tokens(const struct bn_vocab *v)
{
	return v->n_tokens;
}

uint32_t bn_vocab_bos_id(const struct bn_vocab *v)
{
	return v->bos_id;
}

uint32_t bn_vocab_eos_id(const struct bn_vocab *v)
{
	return v->eos_id;
}

uint32_t bn_vocab_unk_id(const struct bn_vocab *v)
{
	return v->unk_id;
}

int bn_vocab_add_bos(const struct bn_vocab *v)
{
	return (int)v->add_bos;
}

int bn_vocab_add_eos(const struct bn_vocab *v)
{
	return (int)v->add_eos;
}

uint32_t bn_vocab_pre_tokenizer(const struct bn_vocab *v)
{
	return v->pre_tokenizer;
}

uint32_t bn_vocab_chat_template(const struct bn_vocab *v)
{
	return v->chat_template;
}

uint32_t bn_vocab_flags(const struct bn_vocab *v)
{
	return v->ext_flags;
}

uint32_t bn_vocab_eog_ids(const struct bn_vocab *v, const uint32_t **ids)
{
	*ids = v->eog;
	return v->n_eog;
}

int bn_vocab_is_eog(const struct bn_vocab *v, uint32_t id)
{
	for (uint32_t i = 0; i < v->n_eog; i++)
		if (v->eog[i] == id)
			return 1;
	return 0;
}

const char *bn_vocab_token_text(const struct bn_vocab *v, uint32_t id, size_t *len)
{
	if (id >= v->n_tokens)
		return NULL;
	*len = vocab_token_len(v, id);
	return v->text + v->offset[id];
}

static const char *const pre_names[] = {
	[BN_PRE_NONE] = "none",		[BN_PRE_LLAMA3] = "llama-bpe", [BN_PRE_GPT2] = "gpt2",
	[BN_PRE_FALCON3] = "falcon3", [BN_PRE_FALCON_E] = "falcon_e", [BN_PRE_QWEN2] = "qwen2",
	[BN_PRE_NO_PREFIX] = "no-prefix",
};

const char *bn_pre_tokenizer_name(uint32_t pre)
{
	return pre < sizeof(pre_names) / sizeof(pre_names[0]) ? pre_names[pre] : "unknown";
}

/* llama.cpp's names for the same splits are accepted too. */
int bn_pre_tokenizer_from_name(const char *name)
{
	static const struct { const char *name; int pre; } names[] = {
		{ "llama-bpe", BN_PRE_LLAMA3 }, { "llama3", BN_PRE_LLAMA3 },
		{ "llama-v3", BN_PRE_LLAMA3 },  { "gpt2", BN_PRE_GPT2 },
		{ "gpt-2", BN_PRE_GPT2 },	{ "falcon3", BN_PRE_FALCON3 },
		{ "falcon_e", BN_PRE_FALCON_E }, { "qwen2", BN_PRE_QWEN2 },
	};
	for (size_t i = 0; name && i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(name, names[i].name) == 0)
			return names[i].pre;
	return -1;
}

void bn_vocab_free(struct bn_vocab *v)
{
	if (!v)
		return;
	bpe_release(v);
	free(v->text);
	free(v->offset);
	free(v->score);
	free(v->type);
	free(v->map);
	free(v->special);
	free(v->eog);
	free(v->enc_text);
	free(v->enc_offset);
	free(v);
}

/* ------------------------------------------------------------------------------------------ */
/* Special tokens: bucketed by first byte, longest first                                       */
/* ------------------------------------------------------------------------------------------ */

/* A BPE user-defined token whose text differs from its byte-alphabet spelling is a decoded
 * added token (bpe_encoding_texts): the encoder produces it, and Hugging Face matches its own
 * text (the alphabet's), never the decoded one, in text. */
static int is_special(const struct bn_vocab *v, uint32_t id)
{
	uint32_t n = vocab_token_len(v, id), enc_len;
	if (n == 0 || (v->type[id] != TYPE_CONTROL && v->type[id] != TYPE_USER_DEFINED))
		return 0;
	const char *enc = vocab_enc_text(v, id, &enc_len);
	return v->type[id] == TYPE_CONTROL ||
	       (enc_len == n && memcmp(enc, v->text + v->offset[id], n) == 0);
}

/* Sort keys copied out of the vocabulary: qsort's comparator gets no context. */
struct special_key {
	uint32_t first, len, id;
};

static int longer_first(const void *a, const void *b)
{
	const struct special_key *x = a, *y = b;
	if (x->first != y->first)
		return x->first < y->first ? -1 : 1;
	if (x->len != y->len)
		return x->len > y->len ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static int index_specials(struct bn_vocab *v)
{
	uint32_t n = 0;
	for (uint32_t id = 0; id < v->n_tokens; id++)
		n += (uint32_t)is_special(v, id);
	struct special_key *keys = malloc((n ? n : 1) * sizeof(*keys));
	v->special = malloc((n ? n : 1) * sizeof(*v->special));
	if (!keys || !v->special) {
		free(keys);
		return -ENOMEM;
	}
	n = 0;
	for (uint32_t id = 0; id < v->n_tokens; id++)
		if (is_special(v, id))
			keys[n++] = (struct special_key){ (uint8_t)v->text[v->offset[id]],
							  vocab_token_len(v, id), id };
	qsort(keys, n, sizeof(*keys), longer_first);
	uint32_t k = 0;
	for (uint32_t byte = 0; byte < 256; byte++) {
		v->special_start[byte] = k;
		while (k < n && keys[k].first == byte)
			k++;
	}
	v->special_start[256] = n;
	for (k = 0; k < n; k++)
		v->special[k] = keys[k].id;
	free(keys);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The payload (§10.3): checked against its size, each field read once                         */
/* ------------------------------------------------------------------------------------------ */

static int id_ok(uint32_t id, uint32_t n)
{
	return id == NO_TOKEN || id < n;
}

static int parse_head(struct bn_vocab *v, const uint8_t *p, size_t size)
{
	struct bn_vocab_head h;
	if (size < sizeof(h))
		return -BN_E_PROTOCOL;
	memcpy(&h, p, sizeof(h));
	/* Every entry takes at least its 12-byte head: this bounds n_tokens by the size before
	 * anything is allocated for it. */
	uint64_t max_tokens = (size - sizeof(h)) / sizeof(struct bn_vocab_entry);
	if (h.magic != BN_VOCAB_MAGIC ||
	    (h.kind != BN_VOCAB_SPM && h.kind != BN_VOCAB_OTHER && h.kind != BN_VOCAB_BPE) ||
	    h.n_tokens == 0 || h.n_tokens == NO_TOKEN || h.n_tokens > max_tokens ||
	    !id_ok(h.bos_id, h.n_tokens) || !id_ok(h.eos_id, h.n_tokens) ||
	    !id_ok(h.unk_id, h.n_tokens) || h.add_bos > 1)
		return -BN_E_PROTOCOL;
	v->kind = h.kind;
	v->n_tokens = h.n_tokens;
	v->bos_id = h.bos_id;
	v->eos_id = h.eos_id;
	v->unk_id = h.unk_id;
	v->add_bos = h.add_bos;
	v->add_eos = (h.flags & BN_VOCAB_HEAD_ADD_EOS) ? 1 : 0; /* other bits: not ours to read */
	return 0;
}

/* The entries take the payload up to *pos; their texts total at most the rest minus the entry
 * heads, which is what the text buffer is sized to. */
static int parse_entries(struct bn_vocab *v, const uint8_t *p, size_t size, size_t *pos_out)
{
	size_t pos = sizeof(struct bn_vocab_head);
	size_t text_cap = size - pos - (size_t)v->n_tokens * sizeof(struct bn_vocab_entry);
	if (text_cap > UINT32_MAX)
		return -BN_E_PROTOCOL;
	v->text = malloc(text_cap ? text_cap : 1);
	v->offset = malloc(((size_t)v->n_tokens + 1) * sizeof(*v->offset));
	v->score = malloc((size_t)v->n_tokens * sizeof(*v->score));
	v->type = malloc(v->n_tokens);
	if (!v->text || !v->offset || !v->score || !v->type)
		return -ENOMEM;
	uint32_t used = 0;
	for (uint32_t id = 0; id < v->n_tokens; id++) {
		struct bn_vocab_entry e;
		if (size - pos < sizeof(e))
			return -BN_E_PROTOCOL;
		memcpy(&e, p + pos, sizeof(e));
		pos += sizeof(e);
		if (e.length > size - pos || e.length > text_cap - used || e.type > TYPE_BYTE ||
		    isnan(e.score))
			return -BN_E_PROTOCOL;
		memcpy(v->text + used, p + pos, e.length);
		pos += e.length;
		v->offset[id] = used;
		v->score[id] = e.score;
		v->type[id] = (uint8_t)e.type;
		used += e.length;
	}
	v->offset[v->n_tokens] = used;
	*pos_out = pos;
	return 0;
}

static int parse_eog(struct bn_vocab *v, const uint8_t *p, uint32_t n)
{
	v->eog = malloc((n ? n : 1) * sizeof(*v->eog));
	if (!v->eog)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		memcpy(&v->eog[i], p + 4 * (size_t)i, 4);
		if (v->eog[i] >= v->n_tokens || (i && v->eog[i] <= v->eog[i - 1]))
			return -BN_E_PROTOCOL;
	}
	v->n_eog = n;
	return 0;
}

/* What follows the entries in a BN_CTL_TOKENIZER payload: the extension, the merges, the
 * end-of-generation ids, to the payload's last byte. */
static int parse_ext(struct bn_vocab *v, const uint8_t *p, size_t left)
{
	struct bn_vocab_ext x;
	if (left < sizeof(x))
		return -BN_E_PROTOCOL;
	memcpy(&x, p, sizeof(x));
	p += sizeof(x);
	left -= sizeof(x);
	int bpe = v->kind == BN_VOCAB_BPE;
	uint64_t want = (uint64_t)x.n_merges * sizeof(struct bn_vocab_merge) + 4 * (uint64_t)x.n_eog;
	if (x.magic != BN_VOCAB_EXT_MAGIC || want != left ||
	    (bpe ? x.pre_tokenizer < BN_PRE_LLAMA3 || x.pre_tokenizer > BN_PRE_QWEN2
		 : (x.pre_tokenizer != BN_PRE_NONE && x.pre_tokenizer != BN_PRE_NO_PREFIX) ||
			   x.n_merges != 0) ||
	    x.chat_template > BN_CHAT_GEMMA)
		return -BN_E_PROTOCOL;
	v->pre_tokenizer = x.pre_tokenizer;
	v->chat_template = x.chat_template;
	v->ext_flags = x.flags;
	int rc = parse_eog(v, p + (size_t)x.n_merges * sizeof(struct bn_vocab_merge), x.n_eog);
	if (rc == 0 && bpe) {
		/* The merges are copied out once and checked as they are read. */
		struct bn_vocab_merge *m = malloc(((size_t)x.n_merges + 1) * sizeof(*m));
		if (!m)
			return -ENOMEM;
		memcpy(m, p, (size_t)x.n_merges * sizeof(*m));
		rc = bpe_prepare(v, m, x.n_merges);
		free(m);
	}
	return rc;
}

/* A payload without the extension (BN_CTL_VOCAB, or a daemon that predates it): eos is then
 * the one end-of-generation id. */
static int default_ext(struct bn_vocab *v)
{
	if (v->kind == BN_VOCAB_BPE)
		return -BN_E_PROTOCOL;
	uint8_t eos[4];
	memcpy(eos, &v->eos_id, sizeof(eos));
	return parse_eog(v, eos, v->eos_id == NO_TOKEN ? 0 : 1);
}

int bn_vocab_from_payload(const void *payload, size_t size, struct bn_vocab **out)
{
	if (!payload || !out)
		return -BN_E_INVALID;
	struct bn_vocab *v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	size_t pos = 0;
	int rc = parse_head(v, payload, size);
	if (rc == 0)
		rc = parse_entries(v, payload, size, &pos);
	if (rc == 0 && v->kind == BN_VOCAB_BPE)
		rc = bpe_encoding_texts(v);
	if (rc == 0)
		rc = vocab_map_build(v);
	if (rc == 0)
		vocab_index_bytes(v);
	if (rc == 0)
		rc = pos == size ? default_ext(v)
				 : parse_ext(v, (const uint8_t *)payload + pos, size - pos);
	if (rc == 0)
		rc = index_specials(v);
	if (rc < 0) {
		bn_vocab_free(v);
		return rc;
	}
	*out = v;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding: symbols, a heap of candidate merges                                               */
/* ------------------------------------------------------------------------------------------ */

/* A piece of the normalized text: [start, start + len); len 0 once merged into its left
 * neighbour. prev/next link the live pieces (-1: none). */
struct symbol {
	uint32_t start, len;
	int32_t prev, next;
};

/* A candidate merge of the adjacent pieces left and right, whose joined text (len bytes when
 * it was queued) is a token with this score. */
struct bigram {
	float score;
	uint32_t left, right, len;
};

struct encoder {
	const struct bn_vocab *v;
	const char *text;      /* normalized */
	struct symbol *sym;
	uint32_t n_sym;
	struct bigram *heap;   /* max-heap on (score, then smaller left) */
	uint32_t n_heap;
};

static int bigram_before(const struct bigram *a, const struct bigram *b)
{
	return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(struct encoder *e, struct bigram b)
{
	uint32_t i = e->n_heap++;
	while (i > 0 && bigram_before(&b, &e->heap[(i - 1) / 2])) {
		e->heap[i] = e->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	e->heap[i] = b;
}

static struct bigram heap_pop(struct encoder *e)
{
	struct bigram top = e->heap[0], last = e->heap[--e->n_heap];
	uint32_t i = 0;
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= e->n_heap)
			break;
		if (c + 1 < e->n_heap && bigram_before(&e->heap[c + 1], &e->heap[c]))
			c++;
		if (!bigram_before(&e->heap[c], &last))
			break;
		e->heap[i] = e->heap[c];
		i = c;
	}
	e->heap[i] = last;
	return top;
}

static void try_pair(struct encoder *e, int32_t left, int32_t right)
{
	if (left < 0 || right < 0)
		return;
	const struct symbol *l = &e->sym[left], *r = &e->sym[right];
	uint32_t id = vocab_map_find(e->v, e->text + l->start, (size_t)l->len + r->len);
	if (id != NO_TOKEN)
		heap_push(e, (struct bigram){ .score = e->v->score[id], .left = (uint32_t)left,
					      .right = (uint32_t)right, .len = l->len + r->len });
}

/* Bytes of the UTF-8 character at p (at most n): 2 to 4 for a lead byte followed by its
 * continuation bytes, else 1 (ASCII, or a byte that is not valid there). */
static uint32_t char_len(const uint8_t *p, size_t n)
{
	uint32_t want = p[0] >= 0xf0 && p[0] <= 0xf7 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc0 ? 2 : 1;
	if (p[0] >= 0xf8 || want > n)
		return 1;
	for (uint32_t i = 1; i < want; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 1;
	return want;
}

/* "▁" + text with every ' ' replaced by "▁" (SentencePiece's add_dummy_prefix and
 * whitespace escaping; llama.cpp does the same, without SentencePiece's whitespace folding).
 * Without the first "▁" for a vocabulary without the dummy prefix (BN_PRE_NO_PREFIX: Gemma
 * 3's add_space_prefix false). */
static char *normalize(const char *text, size_t len, int prefix, size_t *out_len)
{
	if (len > (SIZE_MAX - SPACE_MARK_LEN) / SPACE_MARK_LEN)
		return NULL;
	char *buf = malloc(SPACE_MARK_LEN * (len + 1));
	if (!buf)
		return NULL;
	size_t n = 0;
	if (prefix) {
		memcpy(buf, SPACE_MARK, SPACE_MARK_LEN);
		n += SPACE_MARK_LEN;
	}
	for (size_t i = 0; i < len; i++) {
		if (text[i] == ' ') {
			memcpy(buf + n, SPACE_MARK, SPACE_MARK_LEN);
			n += SPACE_MARK_LEN;
		} else {
			buf[n++] = text[i];
		}
	}
	*out_len = n;
	return buf;
}

static int split_chars(struct encoder *e, size_t len)
{
	/* Every symbol is at least one byte; the heap holds at most the first n - 1 pairs plus
	 * two per merge, and there are at most n - 1 merges. */
	if (len > UINT32_MAX / 3 || len > SIZE_MAX / (3 * sizeof(struct bigram)))
		return -BN_E_TOO_LONG;
	e->sym = malloc(len * sizeof(*e->sym));
	e->heap = malloc(3 * len * sizeof(*e->heap));
	if (!e->sym || !e->heap)
		return -ENOMEM;
	for (size_t pos = 0; pos < len;) {
		uint32_t n = char_len((const uint8_t *)e->text + pos, len - pos);
		int32_t i = (int32_t)e->n_sym++;
		e->sym[i] = (struct symbol){ .start = (uint32_t)pos, .len = n, .prev = i - 1,
					     .next = pos + n < len ? i + 1 : -1 };
		pos += n;
	}
	return 0;
}

static void merge_all(struct encoder *e)
{
	for (uint32_t i = 0; i + 1 < e->n_sym; i++)
		try_pair(e, (int32_t)i, (int32_t)i + 1);
	while (e->n_heap) {
		struct bigram b = heap_pop(e);
		struct symbol *l = &e->sym[b.left], *r = &e->sym[b.right];
		/* Stale: one side was merged away or grew since this pair was queued. */
		if (l->len == 0 || r->len == 0 || l->next != (int32_t)b.right || l->len + r->len != b.len)
			continue;
		l->len += r->len;
		r->len = 0;
		l->next = r->next;
		if (r->next >= 0)
			e->sym[r->next].prev = (int32_t)b.left;
		try_pair(e, l->prev, (int32_t)b.left);
		try_pair(e, (int32_t)b.left, l->next);
	}
}

/* A final piece: its token; else its bytes as byte tokens; else the unknown token. */
static int emit_piece(const struct encoder *e, const struct symbol *s, uint32_t *out,
		      uint32_t cap, size_t *n)
{
	const struct bn_vocab *v = e->v;
	const uint8_t *p = (const uint8_t *)e->text + s->start;
	uint32_t id = vocab_map_find(v, (const char *)p, s->len);
	if (id != NO_TOKEN) {
		vocab_emit(out, cap, n, id);
		return 0;
	}
	uint32_t bytes_known = 1;
	for (uint32_t i = 0; i < s->len; i++)
		bytes_known &= v->byte_id[p[i]] != NO_TOKEN;
	if (bytes_known) {
		for (uint32_t i = 0; i < s->len; i++)
			vocab_emit(out, cap, n, v->byte_id[p[i]]);
		return 0;
	}
	if (v->unk_id == NO_TOKEN)
		return -BN_E_TOKEN;
	vocab_emit(out, cap, n, v->unk_id);
	return 0;
}

/* One run of text, SentencePiece's way (normalize(), then merges by score). */
int spm_encode(const struct bn_vocab *v, const char *text, size_t len, uint32_t *out,
	       uint32_t cap, size_t *n)
{
	struct encoder e = { .v = v };
	size_t norm_len;
	char *norm = normalize(text, len, v->pre_tokenizer != BN_PRE_NO_PREFIX, &norm_len);
	int rc = norm ? 0 : -ENOMEM;
	e.text = norm;
	if (rc == 0)
		rc = split_chars(&e, norm_len);
	if (rc == 0) {
		merge_all(&e);
		for (int32_t i = 0; i >= 0 && rc == 0; i = e.sym[i].next)
			rc = emit_piece(&e, &e.sym[i], out, cap, n);
	}
	free(e.sym);
	free(e.heap);
	free(norm);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Text with special tokens                                                                    */
/* ------------------------------------------------------------------------------------------ */

static int encode_run(const struct bn_vocab *v, const char *text, size_t len, uint32_t *out,
		      uint32_t cap, size_t *n)
{
	if (len == 0)
		return 0;
	return v->kind == BN_VOCAB_BPE ? bpe_encode(v, text, len, out, cap, n)
				       : spm_encode(v, text, len, out, cap, n);
}

/* The longest special token at text[at] that ends before the next plain span; NO_TOKEN. */
static uint32_t special_at(const struct bn_vocab *v, const char *text, size_t len, size_t at,
			   size_t limit)
{
	uint8_t first = (uint8_t)text[at];
	for (uint32_t k = v->special_start[first]; k < v->special_start[first + 1]; k++) {
		uint32_t id = v->special[k], n = vocab_token_len(v, id);
		if (n <= len - at && at + n <= limit && memcmp(text + at, v->text + v->offset[id], n) == 0)
			return id;
	}
	return NO_TOKEN;
}

int vocab_tokenize(const struct bn_vocab *v, const char *text, size_t len, uint32_t flags,
		   const struct text_span *plain, size_t n_plain, uint32_t *out, uint32_t cap)
{
	size_t n = 0, run = 0, span = 0;
	int rc = 0;
	if ((flags & BN_TOK_ADD_BOS) && v->bos_id != NO_TOKEN)
		vocab_emit(out, cap, &n, v->bos_id);
	for (size_t at = 0; rc == 0 && at < len && (flags & BN_TOK_PARSE_SPECIAL);) {
		while (span < n_plain && plain[span].start + plain[span].len <= at)
			span++;
		size_t limit = span < n_plain ? plain[span].start : len;
		if (at >= limit) { /* inside a plain span: skip to its end */
			at = plain[span].start + plain[span].len;
			continue;
		}
		uint32_t id = special_at(v, text, len, at, limit);
		if (id == NO_TOKEN) {
			at++;
			continue;
		}
		rc = encode_run(v, text + run, at - run, out, cap, &n);
		vocab_emit(out, cap, &n, id);
		at += vocab_token_len(v, id);
		run = at;
	}
	if (rc == 0)
		rc = encode_run(v, text + run, len - run, out, cap, &n);
	if (rc == 0 && (flags & BN_TOK_ADD_EOS) && v->eos_id != NO_TOKEN)
		vocab_emit(out, cap, &n, v->eos_id);
	if (rc == 0 && n > INT_MAX)
		rc = -BN_E_TOO_LONG;
	return rc < 0 ? rc : (int)n;
}

int bn_tokenize_ex(const struct bn_vocab *v, const char *text, size_t len, uint32_t flags,
		   uint32_t *out, uint32_t cap)
{
	if (!v || (len && !text) || (cap && !out) ||
	    (flags & ~(uint32_t)(BN_TOK_ADD_BOS | BN_TOK_PARSE_SPECIAL | BN_TOK_ADD_EOS)))
		return -BN_E_INVALID;
	if (v->kind != BN_VOCAB_SPM && v->kind != BN_VOCAB_BPE)
		return -BN_E_INVALID;
	return vocab_tokenize(v, text, len, flags, NULL, 0, out, cap);
}

int bn_tokenize(const struct bn_vocab *v, const char *text, size_t len, int add_bos,
		uint32_t *out, uint32_t cap)
{
	return bn_tokenize_ex(v, text, len, add_bos ? BN_TOK_ADD_BOS : 0, out, cap);
}
