/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "textreq.h"

#include "backends/backend.h"
#include "bitnet_barrier.h"
#include "bitnet_client.h"
#include "segment.h"
#include "serve/request.h"
#include "tokenizer_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define REPLACEMENT_BYTES 3u /* U+FFFD in UTF-8 */

/* ------------------------------------------------------------------------------------------ */
/* The service                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* Bytes of a whole UTF-8 character starting at p[0] within n, or 0 when none does. */
static size_t valid_char_len(const uint8_t *p, size_t n)
{
	uint8_t lo, hi;
	if (p[0] < 0x80)
		return 1;
	size_t need = utf8_lead_info(p[0], &lo, &hi);
	if (need == 0 || need >= n)
		return 0;
	for (size_t k = 1; k <= need; k++)
		if (p[k] < (k == 1 ? lo : 0x80) || p[k] > (k == 1 ? hi : 0xbf))
			return 0;
	return need + 1;
}

/* What a stream decoder can emit for one token, at most: the bytes of the token's whole
 * characters as they are, 3 (U+FFFD) for each of its other bytes (each may be an invalid
 * subpart of its own, or a held lead completed later: never more), and 3 for the character
 * held back from the tokens before (emitted whole, or as one U+FFFD). */
static uint32_t token_piece_bound(const uint8_t *p, size_t n)
{
	size_t bound = REPLACEMENT_BYTES;
	for (size_t i = 0; i < n;) {
		size_t k = valid_char_len(p + i, n - i);
		bound += k ? k : REPLACEMENT_BYTES;
		i += k ? k : 1;
	}
	return bound > UINT32_MAX ? UINT32_MAX : (uint32_t)bound;
}

/* The largest token_piece_bound over the vocabulary, control tokens' texts included (a
 * request may ask for them). */
static uint32_t vocab_piece_bound(const struct bn_vocab *v)
{
	uint32_t bound = REPLACEMENT_BYTES, cap = 0;
	uint8_t *buf = NULL;
	for (uint32_t id = 0; id < bn_vocab_n_tokens(v); id++) {
		int n = bn_detokenize_ex(v, &id, 1, BN_DETOK_SPECIAL, NULL, 0);
		if (n < 0)
			continue;
		if ((uint32_t)n + 1 > cap) {
			uint8_t *p = realloc(buf, (size_t)n + 1);
			if (!p) {
				free(buf);
				return 0;
			}
			buf = p;
			cap = (uint32_t)n + 1;
		}
		bn_detokenize_ex(v, &id, 1, BN_DETOK_SPECIAL, (char *)buf, cap);
		uint32_t b = token_piece_bound(buf, (size_t)n);
		bound = b > bound ? b : bound;
	}
	free(buf);
	return bound;
}

/* A vocabulary encodes text when it is SentencePiece-style, or byte-level BPE with a split. */
static int can_encode(const struct bn_vocab *v)
{
	uint32_t kind = bn_vocab_kind(v);
	return kind == BN_VOCAB_SPM || (kind == BN_VOCAB_BPE && bn_vocab_pre_tokenizer(v) != BN_PRE_NONE);
}

int bn_text_service_open(struct bn_text_service *t, const void *payload, size_t size)
{
	memset(t, 0, sizeof(*t));
	struct bn_vocab *v;
	int rc = bn_vocab_from_payload(payload, size, &v);
	if (rc < 0)
		return rc;
	if (!can_encode(v)) {
		bn_vocab_free(v);
		return 0;
	}
	t->piece_bound = vocab_piece_bound(v);
	if (!t->piece_bound) {
		bn_vocab_free(v);
		return -ENOMEM;
	}
	t->vocab = v;
	return 0;
}

void bn_text_service_close(struct bn_text_service *t)
{
	bn_vocab_free(t->vocab);
	memset(t, 0, sizeof(*t));
}

uint32_t bn_text_capacity(const struct bn_text_service *t, uint32_t tokens)
{
	if (!t || !t->vocab)
		return 0;
	/* One held-back character may still come out as U+FFFD at the end. */
	uint64_t bytes = (uint64_t)tokens * t->piece_bound + REPLACEMENT_BYTES;
	bytes = (bytes + 63) & ~(uint64_t)63;
	return bytes > UINT32_MAX - 64 ? UINT32_MAX : (uint32_t)bytes;
}

/* ------------------------------------------------------------------------------------------ */
/* Prompts                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* The one copy of the client's bytes; NULL when out of memory. */
static uint8_t *copy_text(const struct bn_segment *g, uint32_t slot, uint32_t n)
{
	uint8_t *copy = malloc(n ? n : 1);
	if (copy)
		memcpy(copy, bn_slot_text(g, slot), n);
	return copy;
}

/* A conversation's messages, with NUL-terminated role and content in one block. */
struct conversation {
	uint32_t chat_template;
	size_t n;
	struct bn_chat_message *msgs;
	char *strings;
};

static void conversation_free(struct conversation *c)
{
	free(c->msgs);
	free(c->strings);
}

static uint32_t read_u32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

/* Parses bn_chat_head and the records from the private copy; the lengths must add up to
 * exactly len, and neither role nor content may hold a NUL. Returns 0, BN_E_INVALID or
 * BN_E_BACKEND (no memory). */
static uint32_t conversation_parse(const uint8_t *blob, uint32_t len, struct conversation *c)
{
	memset(c, 0, sizeof(*c));
	if (len < sizeof(struct bn_chat_head))
		return BN_E_INVALID;
	c->chat_template = read_u32(blob + offsetof(struct bn_chat_head, chat_template));
	uint32_t n = read_u32(blob + offsetof(struct bn_chat_head, n_messages));
	if (n == 0 || n > (len - sizeof(struct bn_chat_head)) / sizeof(struct bn_chat_record))
		return BN_E_INVALID;
	c->msgs = calloc(n, sizeof(*c->msgs));
	c->strings = malloc((size_t)len + 2u * n);
	if (!c->msgs || !c->strings)
		return BN_E_BACKEND;
	size_t at = sizeof(struct bn_chat_head), out = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (len - at < sizeof(struct bn_chat_record))
			return BN_E_INVALID;
		uint64_t role_len = read_u32(blob + at), content_len = read_u32(blob + at + 4);
		at += sizeof(struct bn_chat_record);
		if (role_len + content_len > len - at)
			return BN_E_INVALID;
		const uint8_t *role = blob + at, *content = role + role_len;
		if (memchr(role, 0, role_len) || memchr(content, 0, content_len))
			return BN_E_INVALID;
		c->msgs[i].role = memcpy(c->strings + out, role, role_len);
		out += role_len;
		c->strings[out++] = '\0';
		c->msgs[i].content = memcpy(c->strings + out, content, content_len);
		out += content_len;
		c->strings[out++] = '\0';
		at += role_len + content_len;
	}
	c->n = n;
	return at == len ? 0 : BN_E_INVALID;
}

/* Whether a text request's ids end with EOS when the model's add_eos says so: an embedding's
 * input is a whole text, read as the model was trained to read one (Qwen3-Embedding-style
 * models pool the last position, their <|endoftext|>), and the TOKENIZE op gives what
 * llama.cpp's tokenizer gives with its special tokens. A prompt to be continued (GENERATE),
 * scored as it stands (SCORE) or extended by labels (CLASSIFY) ends with its own text, as
 * llama.cpp's generation and perplexity tools, which refuse a decoder with add_eos, require. */
static int op_ends_with_eos(uint32_t op)
{
	return op == BN_OP_EMBED || op == BN_OP_TOKENIZE;
}

/* The ids of a text or a conversation: writes at most cap of them and returns how many there
 * are (which may exceed cap), or the negative bn_error. With eos_last, EOS ends a text where
 * the model wants it and BOS-style special tokens apply (not with NO_BOS, not for a
 * conversation, whose template says how it ends). */
static int64_t encode(const struct bn_segment *g, uint32_t flags, int eos_last,
		      const uint8_t *text, uint32_t len, uint32_t *out, uint32_t cap)
{
	const struct bn_vocab *v = g->text->vocab;
	if (flags & BN_REQ_CHAT) {
		struct conversation c;
		uint32_t err = conversation_parse(text, len, &c);
		int rc = err ? -(int)err
			     : bn_chat_tokenize(v, c.chat_template, c.msgs, c.n, out, cap);
		conversation_free(&c);
		return rc == -ENOMEM ? -BN_E_BACKEND : rc;
	}
	uint32_t tok = flags & BN_REQ_PARSE_SPECIAL ? BN_TOK_PARSE_SPECIAL : 0;
	if (!(flags & BN_REQ_NO_BOS) && bn_vocab_add_bos(v))
		tok |= BN_TOK_ADD_BOS;
	if (!(flags & BN_REQ_NO_BOS) && eos_last && bn_vocab_add_eos(v))
		tok |= BN_TOK_ADD_EOS;
	int rc = bn_tokenize_ex(v, (const char *)text, len, tok, out, cap);
	return rc == -ENOMEM ? -BN_E_BACKEND : rc;
}

/* Encodes the slot's text region (n bytes) into out[0..cap); returns the count or -error and
 * writes it to the slot's prompt_tokens when known. */
static int64_t encode_slot(const struct bn_segment *g, struct bn_req *r, uint32_t n, uint32_t *out,
			   uint32_t cap)
{
	if (n > g->text_capacity)
		return -BN_E_TOO_LONG;
	uint8_t *text = copy_text(g, r->slot, n);
	if (!text)
		return -BN_E_BACKEND;
	int64_t count = encode(g, r->flags, op_ends_with_eos(r->op), text, n, out, cap);
	free(text);
	if (count >= 0)
		bn_write_once(bn_slot_at(g, r->slot)->prompt_tokens, (uint32_t)count);
	return count;
}

uint32_t bn_text_prompt_take(const struct bn_segment *g, struct bn_req *r)
{
	if (r->n_stop > g->prompt_capacity)
		return BN_E_TOO_LONG;
	uint32_t cap = g->prompt_capacity - r->n_stop;
	int64_t count = encode_slot(g, r, r->n_prompt, r->prompt, cap);
	if (count < 0)
		return (uint32_t)-count;
	if (count == 0)
		return BN_E_EMPTY; /* text that encodes to nothing, e.g. whitespace with NO_BOS */
	if (count > cap)
		return BN_E_TOO_LONG;
	r->n_prompt = (uint32_t)count;
	/* Stop ids sit at the start of the prompt array when the prompt is text. */
	const uint32_t *src = bn_slot_prompt(g, r->slot);
	for (uint32_t i = 0; i < r->n_stop; i++)
		r->prompt[r->n_prompt + i] = bn_read_once(src[i]);
	return 0;
}

/* A classify request's text parts: the prefix, then each label, as (start, length) in the
 * private copy. Returns 0 or BN_E_INVALID when the lengths do not add up to exactly len. */
static uint32_t classify_parse(const uint8_t *blob, uint32_t len, uint32_t n_labels,
			       uint32_t *start, uint32_t *part_len)
{
	uint64_t at = sizeof(struct bn_classify_head);
	for (uint32_t i = 0; i <= n_labels; i++) {
		uint64_t n = i == 0 ? read_u32(blob + offsetof(struct bn_classify_head, prefix_len))
				    : (len - at < 4 ? UINT64_MAX : read_u32(blob + at));
		at += i == 0 ? 0 : 4;
		if (n > len - at)
			return BN_E_INVALID;
		start[i] = (uint32_t)at;
		part_len[i] = (uint32_t)n;
		at += n;
	}
	return at == len ? 0 : BN_E_INVALID;
}

/* The ids of prefix + label past the prefix's n_prefix ids (how the label's text continues
 * the prefix: a label alone would get SentencePiece's leading space, and a BPE merge may
 * cross the boundary) into out[0..cap). `joined` holds the prefix's prefix_len bytes and room
 * for the label after them; scratch takes the whole encoding. Returns the count (which may
 * exceed cap), 0 when the label adds no token, or the negative bn_error. */
static int64_t encode_continuation(const struct bn_segment *g, const struct bn_req *r, uint8_t *joined,
				   uint32_t prefix_len, const uint8_t *label, uint32_t label_len,
				   uint32_t *scratch, uint32_t *out, uint32_t cap)
{
	memcpy(joined + prefix_len, label, label_len);
	int64_t count = encode(g, r->flags, 0, joined, prefix_len + label_len, scratch,
			       g->prompt_capacity);
	if (count < 0 || count <= r->n_prompt)
		return count < 0 ? count : 0;
	if (count > g->prompt_capacity)
		return UINT32_MAX; /* more than the arena holds: too long either way */
	uint32_t n = (uint32_t)count - r->n_prompt;
	memcpy(out, scratch + r->n_prompt, (size_t)(n < cap ? n : cap) * sizeof(*out));
	return n;
}

/* The longest of parts 1 .. n_labels (the labels). */
static uint32_t longest_part(const uint32_t *part_len, uint32_t n_labels)
{
	uint32_t most = 0;
	for (uint32_t i = 1; i <= n_labels; i++)
		most = part_len[i] > most ? part_len[i] : most;
	return most;
}

/* Encodes the parts into r->prompt: the prefix with the request's flags, then each label as
 * it continues the prefix (encode_continuation), their token counts kept at the end of the
 * arena. */
static uint32_t classify_encode(const struct bn_segment *g, struct bn_req *r, const uint8_t *blob,
				const uint32_t *start, const uint32_t *part_len)
{
	uint32_t n_labels = r->n_labels, cap = g->prompt_capacity - n_labels;
	uint32_t *label_len = r->prompt + cap;
	int64_t count = encode(g, r->flags, 0, blob + start[0], part_len[0], r->prompt, cap);
	if (count < 0)
		return (uint32_t)-count;
	if (count > cap)
		return BN_E_TOO_LONG;
	r->n_prompt = (uint32_t)count;
	uint32_t *scratch = malloc((size_t)g->prompt_capacity * sizeof(*scratch));
	uint8_t *joined = malloc((size_t)part_len[0] + longest_part(part_len, n_labels) + 1);
	uint32_t at = r->n_prompt, err = scratch && joined ? 0 : BN_E_BACKEND;
	if (joined)
		memcpy(joined, blob + start[0], part_len[0]);
	for (uint32_t i = 1; err == 0 && i <= n_labels; i++) {
		count = encode_continuation(g, r, joined, part_len[0], blob + start[i], part_len[i],
					    scratch, r->prompt + at, cap - at);
		if (count < 0)
			err = (uint32_t)-count;
		else if (count > cap - at)
			err = BN_E_TOO_LONG;
		else
			label_len[i - 1] = (uint32_t)count;
		at += err ? 0 : (uint32_t)count;
	}
	free(scratch);
	free(joined);
	r->labels = r->prompt + r->n_prompt;
	r->label_len = label_len;
	return err;
}

/* The label token counts go to the text region, the prefix's to prompt_tokens: the client
 * needs them to split the records. */
static void classify_publish_counts(const struct bn_segment *g, const struct bn_req *r)
{
	uint32_t *out = (uint32_t *)(void *)bn_slot_text(g, r->slot);
	for (uint32_t i = 0; i < r->n_labels; i++)
		bn_write_once(out[i], r->label_len[i]);
	bn_write_once(bn_slot_at(g, r->slot)->prompt_tokens, r->n_prompt);
	bn_store_release(bn_slot_at(g, r->slot)->n_text, r->n_labels * 4u);
}

/* The request from its private copy of the body (len bytes, at least the head). */
static uint32_t classify_take_body(const struct bn_segment *g, struct bn_req *r, const uint8_t *blob,
				   uint32_t len)
{
	r->n_labels = read_u32(blob + offsetof(struct bn_classify_head, n_labels));
	if (r->n_labels == 0)
		return BN_E_EMPTY;
	if (r->n_labels > (len - sizeof(struct bn_classify_head)) / 4)
		return BN_E_INVALID;
	uint32_t *parts = calloc(2 * ((size_t)r->n_labels + 1), sizeof(*parts)); /* start, len */
	if (!parts)
		return BN_E_BACKEND;
	uint32_t *start = parts, *part_len = parts + r->n_labels + 1;
	uint32_t err = classify_parse(blob, len, r->n_labels, start, part_len);
	if (err == 0)
		err = r->n_labels >= g->prompt_capacity ? BN_E_TOO_LONG
			: classify_encode(g, r, blob, start, part_len);
	if (err == 0)
		classify_publish_counts(g, r);
	free(parts);
	return err;
}

uint32_t bn_text_classify_take(const struct bn_segment *g, struct bn_req *r)
{
	uint32_t len = r->n_prompt;
	if (len > g->text_capacity)
		return BN_E_TOO_LONG;
	if (len < sizeof(struct bn_classify_head))
		return BN_E_INVALID;
	uint8_t *blob = copy_text(g, r->slot, len);
	if (!blob)
		return BN_E_BACKEND;
	uint32_t err = classify_take_body(g, r, blob, len);
	free(blob);
	return err;
}

/* ------------------------------------------------------------------------------------------ */
/* Text out                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static uint32_t detok_flags(uint32_t req_flags)
{
	return (req_flags & BN_REQ_SPECIAL_TEXT ? BN_DETOK_SPECIAL : 0) |
	       (req_flags & BN_REQ_STRIP_SPACE ? BN_DETOK_STRIP_SPACE : 0);
}

uint32_t bn_text_out_begin(const struct bn_segment *g, struct bn_req *r)
{
	r->n_text = 0;
	if (bn_text_stream_new(g->text->vocab, detok_flags(r->flags), &r->stream) < 0)
		return BN_E_BACKEND;
	return 0;
}

/* Appends bytes to the slot's text; the capacity covers every token's worst case, so the
 * check is a guard, not a limit a request can reach. */
static void put_text(const struct bn_segment *g, struct bn_req *r, const char *p, size_t n)
{
	if (n > g->text_capacity - r->n_text)
		n = g->text_capacity - r->n_text;
	memcpy(bn_slot_text(g, r->slot) + r->n_text, p, n);
	r->n_text += (uint32_t)n;
}

int bn_text_out_token(const struct bn_segment *g, struct bn_req *r, uint32_t token)
{
	const char *text;
	size_t len;
	int rc = bn_text_stream_push(r->stream, &token, 1, &text, &len);
	if (rc < 0)
		return rc;
	put_text(g, r, text, len);
	bn_write_once(bn_slot_piece_ends(g, r->slot)[r->n_out], r->n_text);
	/* Release: the text bytes and the piece end are visible before the count that covers
	 * them (and n_tokens, stored after this, covers the piece end). */
	bn_store_release(bn_slot_at(g, r->slot)->n_text, r->n_text);
	return 0;
}

void bn_text_out_end(const struct bn_segment *g, struct bn_req *r)
{
	if (!r->stream)
		return;
	const char *text;
	size_t len;
	if (bn_text_stream_finish(r->stream, &text, &len) == 0)
		put_text(g, r, text, len);
	bn_write_once(bn_slot_at(g, r->slot)->n_text, r->n_text);
	bn_text_stream_free(r->stream);
	r->stream = NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Ops                                                                                         */
/* ------------------------------------------------------------------------------------------ */

uint32_t bn_text_tokenize_op(const struct bn_segment *g, struct bn_req *r)
{
	int64_t count = encode_slot(g, r, r->n_prompt, r->output, g->output_capacity);
	if (count < 0)
		return (uint32_t)-count;
	if (count > g->output_capacity)
		return BN_E_TOO_LONG;
	uint32_t *dst = bn_slot_output(g, r->slot);
	for (uint32_t i = 0; i < (uint32_t)count; i++)
		bn_write_once(dst[i], r->output[i]);
	r->n_out = (uint32_t)count;
	return 0;
}

uint32_t bn_text_detokenize_op(const struct bn_segment *g, struct bn_req *r)
{
	if (r->n_prompt > g->prompt_capacity)
		return BN_E_TOO_LONG;
	const uint32_t *src = bn_slot_prompt(g, r->slot);
	uint32_t bad = 0;
	for (uint32_t i = 0; i < r->n_prompt; i++) {
		r->prompt[i] = bn_read_once(src[i]);
		bad |= r->prompt[i] >= g->model->vocab_size;
	}
	if (bad)
		return BN_E_TOKEN;
	/* Written straight into the slot: the capacity holds prompt_capacity tokens' text. */
	int n = bn_detokenize_ex(g->text->vocab, r->prompt, r->n_prompt, detok_flags(r->flags),
				 (char *)bn_slot_text(g, r->slot), g->text_capacity);
	if (n < 0)
		return n == -BN_E_TOKEN ? BN_E_TOKEN : BN_E_BACKEND;
	r->n_text = (uint32_t)n < g->text_capacity ? (uint32_t)n : g->text_capacity;
	bn_write_once(bn_slot_at(g, r->slot)->n_text, r->n_text);
	return 0;
}
