/* SPDX-License-Identifier: MIT */
/*
 * libbitnet-client: the model's vocabulary and text <-> token ids.
 *
 * The vocabulary comes from the daemon as a BN_CTL_VOCAB payload in a sealed memfd
 * (shm/PROTOCOL.md §10.3); it is checked field by field against its size, read once, and kept
 * as a private copy with a hash map from token text to id.
 *
 * Encoding is SentencePiece's BPE as its bpe_model and llama.cpp's llm_tokenizer_spm do it:
 * spaces become U+2581 and one is prepended; the text is split into UTF-8 characters; then,
 * again and again, the adjacent pair whose concatenation is a token with the highest score is
 * merged (equal scores: the leftmost pair), kept in a max-heap ordered by (score, -position).
 * Each final piece is its token, or else its bytes as byte tokens <0xXX>, or else the unknown
 * token.
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "client_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
#define SPACE_MARK "\xe2\x96\x81" /* U+2581, SentencePiece's word-start mark */
#define SPACE_MARK_LEN 3
#define UNK_SURFACE " \xe2\x81\x87 " /* " U+2047 ", SentencePiece's text for <unk> */

struct bn_vocab {
	uint32_t kind;        /* enum bn_vocab_kind */
	uint32_t n_tokens;
	uint32_t bos_id, eos_id, unk_id;
	uint32_t add_bos;
	char *text;           /* every token's text, back to back */
	uint32_t *offset;     /* [n_tokens + 1]: token i is text[offset[i], offset[i + 1]) */
	float *score;         /* [n_tokens] */
	uint8_t *type;        /* [n_tokens] enum token_type */
	uint32_t max_len;     /* longest text among the tokens merges may produce */
	uint32_t byte_id[256]; /* the token <0xXX> of each byte, or NO_TOKEN */
	uint32_t *map;        /* open addressing, linear probing: id + 1, 0 = empty */
	uint32_t map_mask;
};

/* ------------------------------------------------------------------------------------------ */
/* Accessors                                                                                   */
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

const char *bn_vocab_token_text(const struct bn_vocab *v, uint32_t id, size_t *len)
{
	if (id >= v->n_tokens)
		return NULL;
	*len = v->offset[id + 1] - v->offset[id];
	return v->text + v->offset[id];
}

static uint32_t token_len(const struct bn_vocab *v, uint32_t id)
{
	return v->offset[id + 1] - v->offset[id];
}

void bn_vocab_free(struct bn_vocab *v)
{
	if (!v)
		return;
	free(v->text);
	free(v->offset);
	free(v->score);
	free(v->type);
	free(v->map);
	free(v);
}

/* ------------------------------------------------------------------------------------------ */
/* Text -> id map                                                                              */
/* ------------------------------------------------------------------------------------------ */

static uint32_t hash_bytes(const char *p, size_t n)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)p[i]) * 16777619u;
	return h;
}

/* Only pieces SentencePiece matches in text: control, unknown and byte tokens stand for
 * something else, and unused ones it never outputs. */
static int mergeable(uint8_t type)
{
	return type == TYPE_NORMAL || type == TYPE_USER_DEFINED || type == TYPE_UNDEFINED;
}

static uint32_t map_find(const struct bn_vocab *v, const char *p, size_t n)
{
	if (n == 0 || n > v->max_len)
		return NO_TOKEN;
	for (uint32_t i = hash_bytes(p, n) & v->map_mask;; i = (i + 1) & v->map_mask) {
		uint32_t e = v->map[i];
		if (e == 0)
			return NO_TOKEN;
		uint32_t id = e - 1;
		if (token_len(v, id) == n && memcmp(v->text + v->offset[id], p, n) == 0)
			return id;
	}
}

/* Texts that occur twice map to the first id (SentencePiece refuses such models). */
static int map_build(struct bn_vocab *v)
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
		uint32_t n = token_len(v, id);
		if (!mergeable(v->type[id]) || n == 0)
			continue;
		if (n > v->max_len)
			v->max_len = n;
		if (map_find(v, v->text + v->offset[id], n) != NO_TOKEN)
			continue;
		uint32_t i = hash_bytes(v->text + v->offset[id], n) & v->map_mask;
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
static int byte_of(const struct bn_vocab *v, uint32_t id)
{
	const char *t = v->text + v->offset[id];
	if (v->type[id] != TYPE_BYTE || token_len(v, id) != 6 || memcmp(t, "<0x", 3) || t[5] != '>')
		return -1;
	int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
	return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static void index_bytes(struct bn_vocab *v)
{
	for (int b = 0; b < 256; b++)
		v->byte_id[b] = NO_TOKEN;
	for (uint32_t id = 0; id < v->n_tokens; id++) {
		int b = byte_of(v, id);
		if (b >= 0 && v->byte_id[b] == NO_TOKEN)
			v->byte_id[b] = id;
	}
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
	if (h.magic != BN_VOCAB_MAGIC || (h.kind != BN_VOCAB_SPM && h.kind != BN_VOCAB_OTHER) ||
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
	return 0;
}

/* The entries fill the rest of the payload exactly: their texts total that rest minus the
 * entry heads, which is what the text buffer is sized to. */
static int parse_entries(struct bn_vocab *v, const uint8_t *p, size_t size)
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
	return pos == size ? 0 : -BN_E_PROTOCOL;
}

int bn_vocab_from_payload(const void *payload, size_t size, struct bn_vocab **out)
{
	if (!payload || !out)
		return -BN_E_INVALID;
	struct bn_vocab *v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	int rc = parse_head(v, payload, size);
	if (rc == 0)
		rc = parse_entries(v, payload, size);
	if (rc == 0)
		rc = map_build(v);
	if (rc < 0) {
		bn_vocab_free(v);
		return rc;
	}
	index_bytes(v);
	*out = v;
	return 0;
}

/* The memfd must be sealed against shrinking (a mapping past its end would fault) and writing
 * (its bytes could change between the checks and their use). */
static int map_payload(int fd, uint32_t length, struct bn_vocab **out)
{
	const int need = F_SEAL_SHRINK | F_SEAL_WRITE;
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & need) != need || fstat(fd, &st) < 0 ||
	    (uint64_t)st.st_size < length || length < sizeof(struct bn_vocab_head))
		return -BN_E_PROTOCOL;
	/* MAP_PRIVATE: kernels before 6.7 refuse shared mappings of a write-sealed memfd. */
	void *p = mmap(NULL, length, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	int rc = bn_vocab_from_payload(p, length, out);
	munmap(p, length);
	return rc;
}

int bn_vocab_fetch(struct bn_client *c, struct bn_vocab **out)
{
	if (!c || !out)
		return -BN_E_INVALID;
	struct bn_ctl_reply r;
	int fd = -1;
	int rc = bn_client_ctl(c, BN_CTL_VOCAB, &r, &fd);
	if (rc == 0 && r.error)
		rc = -(int)r.error;
	else if (rc == 0 && fd < 0)
		rc = -BN_E_PROTOCOL;
	if (rc == 0)
		rc = map_payload(fd, r.length, out);
	if (fd >= 0)
		close(fd);
	return rc;
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
	uint32_t id = map_find(e->v, e->text + l->start, (size_t)l->len + r->len);
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
 * whitespace escaping; llama.cpp does the same, without SentencePiece's whitespace folding). */
static char *normalize(const char *text, size_t len, size_t *out_len)
{
	if (len > (SIZE_MAX - SPACE_MARK_LEN) / SPACE_MARK_LEN)
		return NULL;
	char *buf = malloc(SPACE_MARK_LEN * (len + 1));
	if (!buf)
		return NULL;
	size_t n = 0;
	memcpy(buf, SPACE_MARK, SPACE_MARK_LEN);
	n += SPACE_MARK_LEN;
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

/* Appends id to out if there is room; counts it either way. */
static void emit(uint32_t *out, uint32_t cap, size_t *n, uint32_t id)
{
	if (*n < cap)
		out[*n] = id;
	(*n)++;
}

/* A final piece: its token; else its bytes as byte tokens; else the unknown token. */
static int emit_piece(const struct encoder *e, const struct symbol *s, uint32_t *out,
		      uint32_t cap, size_t *n)
{
	const struct bn_vocab *v = e->v;
	const uint8_t *p = (const uint8_t *)e->text + s->start;
	uint32_t id = map_find(v, (const char *)p, s->len);
	if (id != NO_TOKEN) {
		emit(out, cap, n, id);
		return 0;
	}
	uint32_t bytes_known = 1;
	for (uint32_t i = 0; i < s->len; i++)
		bytes_known &= v->byte_id[p[i]] != NO_TOKEN;
	if (bytes_known) {
		for (uint32_t i = 0; i < s->len; i++)
			emit(out, cap, n, v->byte_id[p[i]]);
		return 0;
	}
	if (v->unk_id == NO_TOKEN)
		return -BN_E_TOKEN;
	emit(out, cap, n, v->unk_id);
	return 0;
}

int bn_tokenize(const struct bn_vocab *v, const char *text, size_t len, int add_bos,
		uint32_t *out, uint32_t cap)
{
	if (!v || (len && !text) || (cap && !out))
		return -BN_E_INVALID;
	if (v->kind != BN_VOCAB_SPM)
		return -BN_E_INVALID;
	size_t n = 0;
	if (add_bos && v->bos_id != NO_TOKEN)
		emit(out, cap, &n, v->bos_id);
	if (len == 0)
		return (int)n;
	struct encoder e = { .v = v };
	size_t norm_len;
	char *norm = normalize(text, len, &norm_len);
	int rc = norm ? 0 : -ENOMEM;
	e.text = norm;
	if (rc == 0)
		rc = split_chars(&e, norm_len);
	if (rc == 0) {
		merge_all(&e);
		for (int32_t i = 0; i >= 0 && rc == 0; i = e.sym[i].next)
			rc = emit_piece(&e, &e.sym[i], out, cap, &n);
	}
	free(e.sym);
	free(e.heap);
	free(norm);
	if (rc == 0 && n > INT_MAX)
		rc = -BN_E_TOO_LONG;
	return rc < 0 ? rc : (int)n;
}

/* ------------------------------------------------------------------------------------------ */
/* Decoding                                                                                    */
/* ------------------------------------------------------------------------------------------ */

struct writer {
	char *buf;
	size_t cap, len;
	int strip; /* a leading space is still to be dropped */
};

static void put(struct writer *w, const char *p, size_t n)
{
	if (n && w->strip) {
		w->strip = 0;
		if (p[0] == ' ') {
			p++;
			n--;
		}
	}
	if (w->len < w->cap) {
		size_t k = w->cap - w->len < n ? w->cap - w->len : n;
		memcpy(w->buf + w->len, p, k);
	}
	w->len += n;
}

/* A text piece: the word-start mark becomes a space. */
static void put_text(struct writer *w, const char *p, size_t n)
{
	size_t run = 0;
	for (size_t i = 0; i < n;) {
		if (n - i >= SPACE_MARK_LEN && memcmp(p + i, SPACE_MARK, SPACE_MARK_LEN) == 0) {
			put(w, p + run, i - run);
			put(w, " ", 1);
			i += SPACE_MARK_LEN;
			run = i;
		} else {
			i++;
		}
	}
	put(w, p + run, n - run);
}

static void put_token(struct writer *w, const struct bn_vocab *v, uint32_t id)
{
	const char *t = v->text + v->offset[id];
	int b;
	switch (v->type[id]) {
	case TYPE_CONTROL:
		return;
	case TYPE_UNKNOWN:
		put(w, UNK_SURFACE, sizeof(UNK_SURFACE) - 1);
		return;
	case TYPE_BYTE:
		b = byte_of(v, id);
		if (b >= 0) {
			char c = (char)b;
			put(w, &c, 1);
			return;
		}
		break; /* not of the form <0xXX>: its text */
	default:
		break;
	}
	put_text(w, t, token_len(v, id));
}

int bn_detokenize(const struct bn_vocab *v, const uint32_t *ids, uint32_t n,
		  int strip_leading_space, char *buf, size_t cap)
{
	if (!v || (n && !ids) || (cap && !buf))
		return -BN_E_INVALID;
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] >= v->n_tokens) {
			if (cap)
				buf[0] = '\0';
			return -BN_E_TOKEN;
		}
	/* Room for the NUL is kept out of what put() may fill. */
	struct writer w = { .buf = buf, .cap = cap ? cap - 1 : 0, .strip = strip_leading_space };
	for (uint32_t i = 0; i < n; i++)
		put_token(&w, v, ids[i]);
	if (cap)
		buf[w.len < w.cap ? w.len : w.cap] = '\0';
	return w.len > INT_MAX ? -BN_E_TOO_LONG : (int)w.len;
}
