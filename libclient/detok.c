/* SPDX-License-Identifier: MIT */
/*
 * libbitnet-client: token ids -> text, whole (bn_detokenize_ex) or as a stream that never
 * emits a broken UTF-8 character (bn_text_stream_*).
 *
 * A token's bytes: SentencePiece — U+2581 becomes a space, a byte token its byte, the unknown
 * token " U+2047 " (SentencePiece's surface for it); byte-level BPE — the byte alphabet undone
 * (bpe.c computed each token's bytes once). Control tokens give nothing unless the caller
 * asks for their text (BN_DETOK_SPECIAL).
 *
 * A token may end inside a UTF-8 character (BPE splits characters into bytes; SentencePiece
 * spells rare ones in byte tokens), so a stream holds back a character's first bytes until
 * the rest arrive. Bytes that cannot become a valid character are replaced by U+FFFD, one per
 * maximal invalid subpart, as the WHATWG and Unicode decoders do.
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "tokenizer_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define SPACE_MARK "\xe2\x96\x81" /* U+2581, SentencePiece's word-start mark */
#define SPACE_MARK_LEN 3
#define UNK_SURFACE " \xe2\x81\x87 " /* " U+2047 ", SentencePiece's text for <unk> */
#define REPLACEMENT "\xef\xbf\xbd"   /* U+FFFD */

/* ------------------------------------------------------------------------------------------ */
/* Whole texts                                                                                 */
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

/* A SentencePiece text piece: the word-start mark becomes a space. */
static void put_spm_text(struct writer *w, const char *p, size_t n)
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

static void put_spm(struct writer *w, const struct bn_vocab *v, uint32_t id)
{
	int b;
	switch (v->type[id]) {
	case TYPE_UNKNOWN:
		put(w, UNK_SURFACE, sizeof(UNK_SURFACE) - 1);
		return;
	case TYPE_BYTE:
		b = vocab_byte_of(v, id);
		if (b >= 0) {
			char c = (char)b;
			put(w, &c, 1);
			return;
		}
		break; /* not of the form <0xXX>: its text */
	default:
		break;
	}
	put_spm_text(w, v->text + v->offset[id], vocab_token_len(v, id));
}

static void put_token(struct writer *w, const struct bn_vocab *v, uint32_t id, uint32_t flags)
{
	if (v->type[id] == TYPE_CONTROL) {
		if (flags & BN_DETOK_SPECIAL)
			put(w, v->text + v->offset[id], vocab_token_len(v, id));
		return;
	}
	if (v->kind == BN_VOCAB_BPE)
		put(w, v->bytes + v->bytes_offset[id], v->bytes_offset[id + 1] - v->bytes_offset[id]);
	else
		put_spm(w, v, id);
}

int bn_detokenize_ex(const struct bn_vocab *v, const uint32_t *ids, uint32_t n, uint32_t flags,
		     char *buf, size_t cap)
{
	if (!v || (n && !ids) || (cap && !buf) ||
	    (flags & ~(uint32_t)(BN_DETOK_STRIP_SPACE | BN_DETOK_SPECIAL)))
		return -BN_E_INVALID;
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] >= v->n_tokens) {
			if (cap)
				buf[0] = '\0';
			return -BN_E_TOKEN;
		}
	/* Room for the NUL is kept out of what put() may fill. */
	/* a vocabulary without the dummy prefix has no space of its own to drop */
	struct writer w = { .buf = buf, .cap = cap ? cap - 1 : 0,
			    .strip = (flags & BN_DETOK_STRIP_SPACE) &&
				     v->pre_tokenizer != BN_PRE_NO_PREFIX };
	for (uint32_t i = 0; i < n; i++)
		put_token(&w, v, ids[i], flags);
	if (cap)
		buf[w.len < w.cap ? w.len : w.cap] = '\0';
	return w.len > INT_MAX ? -BN_E_TOO_LONG : (int)w.len;
}

int bn_detokenize(const struct bn_vocab *v, const uint32_t *ids, uint32_t n,
		  int strip_leading_space, char *buf, size_t cap)
{
	return bn_detokenize_ex(v, ids, n, strip_leading_space ? BN_DETOK_STRIP_SPACE : 0, buf, cap);
}

/* ------------------------------------------------------------------------------------------ */
/* Streams                                                                                     */
/* ------------------------------------------------------------------------------------------ */

struct bn_text_stream {
	const struct bn_vocab *v;
	uint32_t flags;      /* BN_DETOK_*; STRIP_SPACE cleared once text was produced */
	uint8_t held[4];     /* the first bytes of a character whose rest has not come */
	size_t n_held;
	char *raw;           /* held bytes and this push's token bytes */
	size_t raw_cap;
	char *out;           /* valid UTF-8 handed to the caller */
	size_t out_cap, out_len;
};

int bn_text_stream_new(const struct bn_vocab *v, uint32_t flags, struct bn_text_stream **out)
{
	if (!v || !out || (flags & ~(uint32_t)(BN_DETOK_STRIP_SPACE | BN_DETOK_SPECIAL)))
		return -BN_E_INVALID;
	struct bn_text_stream *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->v = v;
	s->flags = flags;
	*out = s;
	return 0;
}

void bn_text_stream_free(struct bn_text_stream *s)
{
	if (!s)
		return;
	free(s->raw);
	free(s->out);
	free(s);
}

static int grow(char **buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : 256;
	while (c < need)
		c *= 2;
	char *p = realloc(*buf, c);
	if (!p)
		return -ENOMEM;
	*buf = p;
	*cap = c;
	return 0;
}

static void out_put(struct bn_text_stream *s, const void *p, size_t n)
{
	memcpy(s->out + s->out_len, p, n); /* sized by the caller: at most 3 bytes per input byte */
	s->out_len += n;
}

/* Moves the valid characters of p[0..n) to the output, U+FFFD for each invalid subpart, and
 * keeps a character that is valid so far but incomplete in held. */
static void validate(struct bn_text_stream *s, const uint8_t *p, size_t n)
{
	s->n_held = 0;
	for (size_t i = 0; i < n;) {
		uint8_t lo, hi;
		if (p[i] < 0x80) {
			out_put(s, p + i++, 1);
			continue;
		}
		size_t need = utf8_lead_info(p[i], &lo, &hi), k = 1;
		while (k <= need && i + k < n) {
			uint8_t c = p[i + k];
			if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xbf))
				break;
			k++;
		}
		if (need && k == need + 1) {
			out_put(s, p + i, k);
		} else if (need && i + k == n) {
			memcpy(s->held, p + i, k); /* the rest may come with the next token */
			s->n_held = k;
		} else {
			out_put(s, REPLACEMENT, 3);
		}
		i += k;
	}
}

/* One token's bytes appended to raw; the text's first space dropped if the stream asks. */
static int append_token(struct bn_text_stream *s, uint32_t id, size_t *raw_len)
{
	/* A token's text is never longer than its stored text, or the unknown token's surface:
	 * room for that, and one decode. */
	size_t room = vocab_token_len(s->v, id) + sizeof(UNK_SURFACE);
	if (grow(&s->raw, &s->raw_cap, *raw_len + room) < 0)
		return -ENOMEM;
	int k = bn_detokenize_ex(s->v, &id, 1, s->flags, s->raw + *raw_len, room);
	if (k < 0)
		return k;
	*raw_len += (size_t)k;
	/* The strip applies to the first token that has any text, as in bn_detokenize_ex. */
	if ((s->flags & BN_DETOK_STRIP_SPACE) &&
	    bn_detokenize_ex(s->v, &id, 1, s->flags & ~(uint32_t)BN_DETOK_STRIP_SPACE, NULL, 0) > 0)
		s->flags &= ~(uint32_t)BN_DETOK_STRIP_SPACE;
	return 0;
}

int bn_text_stream_push(struct bn_text_stream *s, const uint32_t *ids, uint32_t n,
			const char **text, size_t *len)
{
	if (!s || (n && !ids) || !text || !len)
		return -BN_E_INVALID;
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] >= s->v->n_tokens)
			return -BN_E_TOKEN; /* before anything is taken: the stream can go on */
	if (grow(&s->raw, &s->raw_cap, sizeof(s->held)) < 0)
		return -ENOMEM;
	memcpy(s->raw, s->held, s->n_held);
	size_t raw_len = s->n_held;
	for (uint32_t i = 0; i < n; i++) {
		int rc = append_token(s, ids[i], &raw_len);
		if (rc < 0)
			return rc;
	}
	if (grow(&s->out, &s->out_cap, 3 * raw_len + 1) < 0)
		return -ENOMEM;
	s->out_len = 0;
	validate(s, (const uint8_t *)s->raw, raw_len);
	*text = s->out;
	*len = s->out_len;
	return 0;
}

int bn_text_stream_finish(struct bn_text_stream *s, const char **text, size_t *len)
{
	if (!s || !text || !len)
		return -BN_E_INVALID;
	if (grow(&s->out, &s->out_cap, 4) < 0)
		return -ENOMEM;
	s->out_len = 0;
	if (s->n_held)
		out_put(s, REPLACEMENT, 3); /* a character that never got its end: once */
	s->n_held = 0;
	*text = s->out;
	*len = s->out_len;
	return 0;
}
