/* SPDX-License-Identifier: MIT */
/* vocab.c — GGUF tokenizer keys → the BN_CTL_TOKENIZER and BN_CTL_VOCAB payloads, checked,
 * in sealed memfds. */
#define _GNU_SOURCE
#include "vocab.h"

#include "bitnet_client.h"
#include "bitnet_shm.h"
#include "tokenizer_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* GGUF token types are llama.cpp's: 0 undefined, 1 normal, 2 unknown, 3 control,
 * 4 user-defined, 5 unused, 6 byte. */
#define MAX_TOKEN_TYPE 6
#define DEFAULT_TOKEN_TYPE 1

struct builder {
	const struct bn_gguf *g;
	const struct bn_vocab_options *opt;
	char *err;
	const struct bn_gguf_kv *tokens, *scores, *types, *merges;
	struct bn_vocab_head head;
	struct bn_vocab_ext ext;
	struct bn_vocab_merge *merge_ids; /* [ext.n_merges] */
	uint64_t *map;                    /* text -> hash << 32 | (id + 1) (0: empty), for the merges */
	uint32_t map_mask;
	/* gpt2: every token's text as the merges spell it, user-defined tokens in the byte
	 * alphabet (libclient's enc_text): enc_offset[id]..[id + 1] in enc. One copy, in id
	 * order, that the 3 lookups of each of 280,000 merges read instead of the file's
	 * scattered strings and their offsets (which cost several cache misses a lookup). */
	char *enc;
	uint32_t *enc_offset;
	struct bn_vocab_choice *choice;
	int add_bos_declared;             /* the file has tokenizer.ggml.add_bos_token */
};

static int fail(struct builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct builder *b, const char *fmt, ...)
{
	int n = snprintf(b->err, BN_VOCAB_ERR_LEN, "%s: ", b->g->path);
	if (n < 0 || n >= BN_VOCAB_ERR_LEN)
		return -1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(b->err + n, BN_VOCAB_ERR_LEN - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Reading and checking the keys                                                               */
/* ------------------------------------------------------------------------------------------ */

static int is_integer_type(uint32_t t)
{
	return t <= BN_GGUF_INT32 || t == BN_GGUF_UINT64 || t == BN_GGUF_INT64;
}

/* An optional per-token array: absent, or an array of n elements of an accepted type. */
static int per_token_array(struct builder *b, const char *key, int integer,
			   const struct bn_gguf_kv **out)
{
	const struct bn_gguf_kv *kv = bn_gguf_find_kv(b->g, key);
	*out = NULL;
	if (!kv)
		return 0;
	int type_ok = kv->type == BN_GGUF_ARRAY &&
		      (integer ? is_integer_type(kv->v.arr.type) : kv->v.arr.type == BN_GGUF_FLOAT32);
	if (!type_ok)
		return fail(b, "%s is not an array of %s", key, integer ? "integers" : "f32");
	if (kv->v.arr.n != b->head.n_tokens)
		return fail(b, "%s has %llu elements for %u tokens", key,
			    (unsigned long long)kv->v.arr.n, b->head.n_tokens);
	*out = kv;
	return 0;
}

/* A token id key: absent (or UINT32_MAX, GGUF's "none") gives UINT32_MAX; else < n_tokens. */
static int token_id(struct builder *b, const char *key, uint32_t *out)
{
	int rc = bn_gguf_get_u32(b->g, key, out);
	if (rc == -ENOENT) {
		*out = UINT32_MAX;
		return 0;
	}
	if (rc != 0)
		return fail(b, "%s is not an unsigned 32-bit integer", key);
	if (*out != UINT32_MAX && *out >= b->head.n_tokens)
		return fail(b, "%s %u is not below the token count %u", key, *out,
			    b->head.n_tokens);
	return 0;
}

static int read_kind(struct builder *b)
{
	struct bn_gguf_str s;
	int rc = bn_gguf_get_str(b->g, "tokenizer.ggml.model", &s);
	if (rc == -EINVAL)
		return fail(b, "tokenizer.ggml.model is not a string");
	b->head.kind = BN_VOCAB_OTHER;
	if (rc == 0 && bn_gguf_str_eq(s, "llama"))
		b->head.kind = BN_VOCAB_SPM;
	else if (rc == 0 && bn_gguf_str_eq(s, "gpt2"))
		b->head.kind = BN_VOCAB_BPE;
	return 0;
}

/* tokenizer.ggml.add_eos_token: absent is false, as llama.cpp reads it for SentencePiece and
 * byte-level BPE vocabularies of every pre-tokenizer (only its T5-style "ugm" kind, which
 * bitnetd does not encode, defaults to true). Qwen3-Embedding-style files say true: they are
 * trained on inputs that end with <|endoftext|> and pool the last position. */
static int read_add_eos(struct builder *b)
{
	int add_eos = 0;
	int rc = bn_gguf_get_bool(b->g, "tokenizer.ggml.add_eos_token", &add_eos);
	if (rc != 0 && rc != -ENOENT)
		return fail(b, "tokenizer.ggml.add_eos_token is not a bool");
	b->head.flags = add_eos ? BN_VOCAB_HEAD_ADD_EOS : 0;
	return 0;
}

static int read_head(struct builder *b)
{
	const struct bn_gguf_kv *t = b->tokens;
	if (t->type != BN_GGUF_ARRAY || t->v.arr.type != BN_GGUF_STRING)
		return fail(b, "tokenizer.ggml.tokens is not an array of strings");
	if (t->v.arr.n == 0 || t->v.arr.n >= UINT32_MAX)
		return fail(b, "tokenizer.ggml.tokens has %llu elements (1 to %u allowed)",
			    (unsigned long long)t->v.arr.n, UINT32_MAX - 1);
	b->head.magic = BN_VOCAB_MAGIC;
	b->head.n_tokens = (uint32_t)t->v.arr.n;
	int add_bos = 1;
	int rc = bn_gguf_get_bool(b->g, "tokenizer.ggml.add_bos_token", &add_bos);
	if (rc != 0 && rc != -ENOENT)
		return fail(b, "tokenizer.ggml.add_bos_token is not a bool");
	b->head.add_bos = add_bos ? 1 : 0;
	b->add_bos_declared = rc == 0;
	if (read_add_eos(b) || read_kind(b) ||
	    token_id(b, "tokenizer.ggml.bos_token_id", &b->head.bos_id) ||
	    token_id(b, "tokenizer.ggml.eos_token_id", &b->head.eos_id) ||
	    token_id(b, "tokenizer.ggml.unknown_token_id", &b->head.unk_id) ||
	    per_token_array(b, "tokenizer.ggml.scores", 0, &b->scores) ||
	    per_token_array(b, "tokenizer.ggml.token_type", 1, &b->types))
		return -1;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Byte-level BPE: the merges as id triples                                                    */
/* ------------------------------------------------------------------------------------------ */

static uint32_t hash_text(const char *p, uint64_t n)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (uint64_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)p[i]) * 16777619u;
	return h;
}

static struct bn_gguf_str token_text(const struct builder *b, uint32_t id)
{
	struct bn_gguf_str s = { "", 0 };
	bn_gguf_arr_str(b->tokens, id, &s); /* every element was read by entries_size() */
	return s;
}

static uint32_t token_type(const struct builder *b, uint32_t id)
{
	double t = DEFAULT_TOKEN_TYPE;
	if (b->types)
		bn_gguf_arr_num(b->types, id, &t);
	return t >= 0 && t <= MAX_TOKEN_TYPE ? (uint32_t)t : DEFAULT_TOKEN_TYPE;
}

/* The text a gpt2 vocabulary's merges and encoder know the token by (bpe_raw_text_type). */
static struct bn_gguf_str match_text(const struct builder *b, uint32_t id)
{
	return (struct bn_gguf_str){ b->enc + b->enc_offset[id],
				     b->enc_offset[id + 1] - b->enc_offset[id] };
}

/* Converters store a user-defined (added) token decoded: Falcon3's newline token is "\n"
 * where its merges say "Ċ". Each such token gets its byte-alphabet text, as the client's
 * bpe_encoding_texts() gives it; the others are copied as they are. */
static int encoding_texts(struct builder *b)
{
	uint64_t size = 0;
	for (uint32_t id = 0; id < b->head.n_tokens; id++) {
		uint64_t n = token_text(b, id).len;
		size += bpe_raw_text_type(token_type(b, id)) ? 2 * n : n;
	}
	if (size > UINT32_MAX)
		return fail(b, "the vocabulary's texts need more than %u bytes", UINT32_MAX);
	b->enc = malloc(size ? (size_t)size : 1);
	b->enc_offset = malloc(((size_t)b->head.n_tokens + 1) * sizeof(*b->enc_offset));
	if (!b->enc || !b->enc_offset)
		return fail(b, "no memory for the encoding texts");
	uint32_t at = 0;
	for (uint32_t id = 0; id < b->head.n_tokens; id++) {
		struct bn_gguf_str s = token_text(b, id);
		b->enc_offset[id] = at;
		if (bpe_raw_text_type(token_type(b, id))) {
			at += (uint32_t)bpe_alphabet_text(s.ptr, (size_t)s.len, b->enc + at);
		} else {
			memcpy(b->enc + at, s.ptr, (size_t)s.len);
			at += (uint32_t)s.len;
		}
	}
	b->enc_offset[b->head.n_tokens] = at;
	return 0;
}

/* The map compares the stored hash first: a probe that lands on another text costs no
 * read of that text. */
static uint32_t map_find_hashed(const struct builder *b, const char *p, uint64_t n,
				uint32_t h)
{
	for (uint32_t i = h & b->map_mask;; i = (i + 1) & b->map_mask) {
		uint64_t e = b->map[i];
		if (e == 0)
			return UINT32_MAX;
		if ((uint32_t)(e >> 32) != h)
			continue;
		uint32_t id = (uint32_t)e - 1;
		struct bn_gguf_str s = match_text(b, id);
		if (s.len == n && memcmp(s.ptr, p, n) == 0)
			return id;
	}
}

static uint32_t map_find(const struct builder *b, const char *p, uint64_t n)
{
	return map_find_hashed(b, p, n, hash_text(p, n));
}

/* Texts that occur twice keep their first id, as llama.cpp's token_to_id does. */
static int map_build(struct builder *b)
{
	uint64_t cap = 16;
	while (cap < 2 * (uint64_t)b->head.n_tokens)
		cap *= 2;
	b->map = calloc((size_t)cap, sizeof(*b->map));
	if (!b->map)
		return fail(b, "no memory for the token map");
	b->map_mask = (uint32_t)(cap - 1);
	for (uint32_t id = 0; id < b->head.n_tokens; id++) {
		struct bn_gguf_str s = match_text(b, id);
		uint32_t h = hash_text(s.ptr, s.len);
		if (map_find_hashed(b, s.ptr, s.len, h) != UINT32_MAX)
			continue;
		uint32_t i = h & b->map_mask;
		while (b->map[i])
			i = (i + 1) & b->map_mask;
		b->map[i] = (uint64_t)h << 32 | (id + 1);
	}
	return 0;
}

/* A merge "left right" as its three texts: the first space after the first byte splits it
 * (a token of the byte-level alphabet holds no space; U+0120 stands for one). */
struct merge_texts {
	const char *p[3];         /* left, right, joined */
	uint64_t n[3];
	uint32_t h[3];
	char joined[512];
};

static int split_merge(struct builder *b, uint32_t rank, struct merge_texts *t)
{
	struct bn_gguf_str s;
	if (bn_gguf_arr_str(b->merges, rank, &s) != 0)
		return fail(b, "tokenizer.ggml.merges[%u] cannot be read", rank);
	const char *space = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
	if (!space || space + 1 == s.ptr + s.len)
		return fail(b, "tokenizer.ggml.merges[%u] \"%.*s\" is not two tokens", rank,
			    (int)(s.len > 64 ? 64 : s.len), s.ptr);
	uint64_t left_len = (uint64_t)(space - s.ptr), right_len = s.len - left_len - 1;
	if (s.len - 1 > sizeof(t->joined))
		return fail(b, "tokenizer.ggml.merges[%u] is %llu bytes long", rank,
			    (unsigned long long)s.len);
	memcpy(t->joined, s.ptr, left_len);
	memcpy(t->joined + left_len, space + 1, right_len);
	t->p[0] = s.ptr;
	t->n[0] = left_len;
	t->p[1] = space + 1;
	t->n[1] = right_len;
	t->p[2] = t->joined;
	t->n[2] = left_len + right_len;
	for (int k = 0; k < 3; k++)
		t->h[k] = hash_text(t->p[k], t->n[k]);
	return 0;
}

static int resolve_merge(struct builder *b, uint32_t rank, const struct merge_texts *t,
			 struct bn_vocab_merge *m)
{
	m->left = map_find_hashed(b, t->p[0], t->n[0], t->h[0]);
	m->right = map_find_hashed(b, t->p[1], t->n[1], t->h[1]);
	m->result = map_find_hashed(b, t->p[2], t->n[2], t->h[2]);
	if (m->left == UINT32_MAX || m->right == UINT32_MAX || m->result == UINT32_MAX)
		return fail(b, "tokenizer.ggml.merges[%u] \"%.*s %.*s\" names a token the vocabulary "
			       "lacks (%s)", rank, (int)(t->n[0] > 32 ? 32 : t->n[0]), t->p[0],
			    (int)(t->n[1] > 32 ? 32 : t->n[1]), t->p[1],
			    m->left == UINT32_MAX ? "left" : m->right == UINT32_MAX ? "right" : "joined");
	return 0;
}

static int parse_merges(struct builder *b)
{
	struct merge_texts t;
	for (uint32_t r = 0; r < b->ext.n_merges; r++)
		if (split_merge(b, r, &t) || resolve_merge(b, r, &t, &b->merge_ids[r]))
			return -1;
	return 0;
}

/* Token types encoding may produce, as the client's map holds them (libclient/vocab_map.c):
 * normal, user-defined, undefined. */
static int text_type(const struct builder *b, uint32_t id)
{
	uint32_t t = token_type(b, id);
	return t == 0 || t == 1 || t == 4;
}

/* A token of such a type with exactly this text. The map gives the first id of any type;
 * only a vocabulary that repeats a text looks further. */
static int has_text_token(const struct builder *b, const char *p, size_t n)
{
	uint32_t id = map_find(b, p, n);
	if (id == UINT32_MAX || text_type(b, id))
		return id != UINT32_MAX;
	for (id = id + 1; id < b->head.n_tokens; id++) {
		struct bn_gguf_str s = match_text(b, id);
		if (s.len == n && memcmp(s.ptr, p, n) == 0 && text_type(b, id))
			return 1;
	}
	return 0;
}

/* Every byte needs its token in GPT-2's byte alphabet (libclient/bpe.c), or some text could
 * not be encoded. */
static int check_byte_tokens(struct builder *b)
{
	for (uint32_t byte = 0; byte < 256; byte++) {
		char utf8[2];
		size_t n = bpe_byte_utf8(byte, utf8);
		if (!has_text_token(b, utf8, n))
			return fail(b, "the gpt2 vocabulary has no token for byte 0x%02x (a normal, "
				       "user-defined or undefined token whose text is its character)",
				    byte);
	}
	return 0;
}

static int read_merges(struct builder *b)
{
	b->merges = bn_gguf_find_kv(b->g, "tokenizer.ggml.merges");
	if (!b->merges)
		return fail(b, "tokenizer.ggml.merges is missing (a gpt2 vocabulary needs it)");
	if (b->merges->type != BN_GGUF_ARRAY || b->merges->v.arr.type != BN_GGUF_STRING)
		return fail(b, "tokenizer.ggml.merges is not an array of strings");
	if (b->merges->v.arr.n >= UINT32_MAX / sizeof(struct bn_vocab_merge))
		return fail(b, "tokenizer.ggml.merges has %llu elements",
			    (unsigned long long)b->merges->v.arr.n);
	b->ext.n_merges = (uint32_t)b->merges->v.arr.n;
	if (encoding_texts(b) || map_build(b) || check_byte_tokens(b))
		return -1;
	b->merge_ids = malloc(((size_t)b->ext.n_merges + 1) * sizeof(*b->merge_ids));
	if (!b->merge_ids)
		return fail(b, "no memory for %u merges", b->ext.n_merges);
	return parse_merges(b);
}

/* ------------------------------------------------------------------------------------------ */
/* Decisions: pre-tokenizer, chat template, end of generation                                  */
/* ------------------------------------------------------------------------------------------ */

static struct bn_vocab_view view_of(const struct builder *b)
{
	return (struct bn_vocab_view){ .tokens = b->tokens, .types = b->types,
				       .merges = b->merges, .n_tokens = b->head.n_tokens };
}

/* Falcon3's and Falcon-E's tokenizers add no BOS (their templates start with the first
 * turn), and bitnet.cpp, which wrote and runs their published files, adds none unless the
 * file says so; the other pre-tokenizers' files add one unless they say otherwise. */
static void default_add_bos(struct builder *b)
{
	if (!b->add_bos_declared && (b->ext.pre_tokenizer == BN_PRE_FALCON3 ||
				     b->ext.pre_tokenizer == BN_PRE_FALCON_E))
		b->head.add_bos = 0;
}

/* A SentencePiece vocabulary without the dummy space prefix: tokenizer.ggml.add_space_prefix
 * false, as Gemma 3's converters write (llama.cpp's reading of the key). */
static int resolve_spm_prefix(struct builder *b)
{
	int prefix = 1;
	int rc = bn_gguf_get_bool(b->g, "tokenizer.ggml.add_space_prefix", &prefix);
	if (rc != 0 && rc != -ENOENT)
		return fail(b, "tokenizer.ggml.add_space_prefix is not a bool");
	b->ext.pre_tokenizer = prefix ? BN_PRE_NONE : BN_PRE_NO_PREFIX;
	return 0;
}

static int resolve_pre(struct builder *b)
{
	if (b->head.kind != BN_VOCAB_BPE)
		return b->head.kind == BN_VOCAB_SPM ? resolve_spm_prefix(b) : 0;
	if (b->opt && b->opt->pre_tokenizer) {
		b->ext.pre_tokenizer = (uint32_t)bn_pre_tokenizer_from_name(b->opt->pre_tokenizer);
		b->ext.flags |= BN_VOCAB_PRE_OVERRIDE;
		return 0;
	}
	struct bn_gguf_str s;
	int rc = bn_gguf_get_str(b->g, "tokenizer.ggml.pre", &s);
	if (rc == -EINVAL)
		return fail(b, "tokenizer.ggml.pre is not a string");
	if (rc == 0) {
		char name[64];
		snprintf(name, sizeof(name), "%.*s", (int)(s.len < 63 ? s.len : 63), s.ptr);
		int pre = s.len < 63 ? bn_pre_tokenizer_from_name(name) : -1;
		if (pre <= 0)
			return fail(b, "tokenizer.ggml.pre \"%s\" is not a pre-tokenizer bitnetd knows "
				       "(" BN_PRE_TOKENIZER_NAMES "); choose one with --pre-tokenizer",
				    name);
		b->ext.pre_tokenizer = (uint32_t)pre;
		return 0;
	}
	struct bn_vocab_view v = view_of(b);
	if (!bn_vocab_is_llama3(&v))
		return fail(b, "tokenizer.ggml.pre is missing and the gpt2 vocabulary is not one "
			       "bitnetd recognises; name its pre-tokenizer with --pre-tokenizer "
			       "(" BN_PRE_TOKENIZER_NAMES ")");
	b->ext.pre_tokenizer = BN_PRE_LLAMA3;
	b->ext.flags |= BN_VOCAB_PRE_DETECTED;
	return 0;
}

static int resolve_template(struct builder *b)
{
	if (b->opt && b->opt->chat_template) {
		b->ext.chat_template = (uint32_t)bn_chat_template_from_name(b->opt->chat_template);
		b->ext.flags |= BN_VOCAB_CHAT_OVERRIDE;
		return 0;
	}
	struct bn_gguf_str s = { NULL, 0 };
	int rc = bn_gguf_get_str(b->g, "tokenizer.chat_template", &s);
	if (rc == -EINVAL)
		return fail(b, "tokenizer.chat_template is not a string");
	int placeholder;
	b->ext.chat_template = bn_chat_template_detect(s.ptr, (size_t)s.len, &placeholder);
	if (placeholder)
		b->ext.flags |= BN_VOCAB_CHAT_PLACEHOLDER;
	return 0;
}

static int resolve_eog(struct builder *b)
{
	uint32_t declared[3] = { b->head.eos_id, UINT32_MAX, UINT32_MAX };
	if (token_id(b, "tokenizer.ggml.eot_token_id", &declared[1]) ||
	    token_id(b, "tokenizer.ggml.eom_token_id", &declared[2]))
		return -1;
	if (declared[1] != UINT32_MAX)
		b->ext.flags |= BN_VOCAB_EOT_DECLARED;
	struct bn_vocab_view v = view_of(b);
	b->ext.n_eog = bn_vocab_find_eog(&v, declared, b->choice->eog);
	b->choice->n_eog = b->ext.n_eog;
	return 0;
}

static int resolve(struct builder *b)
{
	b->ext.magic = BN_VOCAB_EXT_MAGIC;
	if (b->head.kind == BN_VOCAB_BPE && read_merges(b))
		return -1;
	if (resolve_pre(b) || resolve_template(b) || resolve_eog(b))
		return -1;
	default_add_bos(b);
	b->choice->kind = b->head.kind;
	b->choice->pre_tokenizer = b->ext.pre_tokenizer;
	b->choice->chat_template = b->ext.chat_template;
	b->choice->flags = b->ext.flags;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Writing the payload                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* Bytes of the head and the entries, which must fit the u32 length of a control reply with
 * the extension after them. */
static int entries_size(struct builder *b, uint64_t *out)
{
	uint64_t size = sizeof(struct bn_vocab_head);
	for (uint32_t i = 0; i < b->head.n_tokens; i++) {
		struct bn_gguf_str s;
		if (bn_gguf_arr_str(b->tokens, i, &s) != 0)
			return fail(b, "tokenizer.ggml.tokens[%u] cannot be read", i);
		size += sizeof(struct bn_vocab_entry) + s.len;
		if (size > UINT32_MAX)
			return fail(b, "the vocabulary needs more than %u bytes", UINT32_MAX);
	}
	*out = size;
	return 0;
}

static int entry_of(struct builder *b, uint32_t i, struct bn_vocab_entry *e)
{
	double v;
	e->score = 0.0f;
	e->type = DEFAULT_TOKEN_TYPE;
	if (b->scores) {
		bn_gguf_arr_num(b->scores, i, &v);
		if (isnan(v))
			return fail(b, "tokenizer.ggml.scores[%u] is NaN", i);
		e->score = (float)v;
	}
	if (b->types) {
		bn_gguf_arr_num(b->types, i, &v);
		if (!(v >= 0 && v <= MAX_TOKEN_TYPE))
			return fail(b, "tokenizer.ggml.token_type[%u] is %.0f (0 to %d allowed)", i, v,
				    MAX_TOKEN_TYPE);
		e->type = (uint32_t)v;
	}
	return 0;
}

static uint8_t *write_entries(struct builder *b, uint8_t *p)
{
	memcpy(p, &b->head, sizeof(b->head));
	p += sizeof(b->head);
	for (uint32_t i = 0; i < b->head.n_tokens; i++) {
		struct bn_gguf_str s = token_text(b, i);
		struct bn_vocab_entry e;
		if (entry_of(b, i, &e))
			return NULL;
		e.length = (uint32_t)s.len;
		memcpy(p, &e, sizeof(e)); /* entries follow texts: not aligned */
		memcpy(p + sizeof(e), s.ptr, s.len);
		p += sizeof(e) + s.len;
	}
	return p;
}

static void write_ext(const struct builder *b, uint8_t *p)
{
	memcpy(p, &b->ext, sizeof(b->ext));
	p += sizeof(b->ext);
	if (b->ext.n_merges) /* merge_ids is NULL without merges, which memcpy may not see */
		memcpy(p, b->merge_ids, (size_t)b->ext.n_merges * sizeof(*b->merge_ids));
	p += (size_t)b->ext.n_merges * sizeof(*b->merge_ids);
	memcpy(p, b->choice->eog, (size_t)b->ext.n_eog * sizeof(uint32_t));
}

static int build(struct builder *b, struct bn_vocab_built *out)
{
	uint64_t head_bytes = 0;
	if (read_head(b) || entries_size(b, &head_bytes) || resolve(b))
		return -1;
	uint64_t size = head_bytes + sizeof(b->ext) +
			(uint64_t)b->ext.n_merges * sizeof(struct bn_vocab_merge) +
			(uint64_t)b->ext.n_eog * sizeof(uint32_t);
	if (size > UINT32_MAX)
		return fail(b, "the vocabulary needs more than %u bytes", UINT32_MAX);
	uint8_t *buf = malloc((size_t)size);
	if (!buf)
		return fail(b, "no memory for a %llu-byte vocabulary", (unsigned long long)size);
	uint8_t *end = write_entries(b, buf);
	if (!end) {
		free(buf);
		return -1;
	}
	write_ext(b, end);
	out->payload = buf;
	out->size = (size_t)size;
	out->vocab_size = (size_t)head_bytes;
	return 1;
}

int bn_vocab_payload_build(const struct bn_gguf *g, const struct bn_vocab_options *o,
			   struct bn_vocab_built *out, char err[BN_VOCAB_ERR_LEN])
{
	memset(out, 0, sizeof(*out));
	struct builder b = { .g = g, .opt = o, .err = err, .choice = &out->choice };
	b.tokens = bn_gguf_find_kv(g, "tokenizer.ggml.tokens");
	if (!b.tokens)
		return 0;
	int rc = build(&b, out);
	free(b.map);
	free(b.merge_ids);
	free(b.enc);
	free(b.enc_offset);
	return rc;
}

int bn_vocab_payload_seal(const void *payload, size_t size)
{
	int fd = memfd_create("bitnetd-vocab", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	const uint8_t *p = payload;
	size_t left = size;
	while (left) {
		ssize_t n = write(fd, p, left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = n < 0 ? -errno : -EIO;
			close(fd);
			return e;
		}
		p += n;
		left -= (size_t)n;
	}
	/* With F_SEAL_WRITE no one, the daemon included, can change what clients map. */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

/* The BN_CTL_VOCAB payload: the tokenizer payload's head and entries, a BPE kind reported
 * as OTHER, which is all a client older than BN_CTL_TOKENIZER knows of it. */
static int seal_legacy(struct bn_vocab_built *v)
{
	struct bn_vocab_head head;
	memcpy(&head, v->payload, sizeof(head));
	uint32_t kind = head.kind;
	if (kind == BN_VOCAB_BPE) {
		head.kind = BN_VOCAB_OTHER;
		memcpy(v->payload, &head, sizeof(head));
	}
	int fd = bn_vocab_payload_seal(v->payload, v->vocab_size);
	head.kind = kind;
	memcpy(v->payload, &head, sizeof(head));
	return fd;
}

static int seal_both(struct builder *b, struct bn_vocab_built *v, struct bn_vocab_served *out)
{
	out->vocab_fd = seal_legacy(v);
	if (out->vocab_fd >= 0)
		out->tokenizer_fd = bn_vocab_payload_seal(v->payload, v->size);
	int e = out->vocab_fd < 0 ? out->vocab_fd : out->tokenizer_fd;
	if (e < 0) {
		bn_vocab_served_close(out);
		return fail(b, "cannot put the vocabulary in a memfd: %s", strerror(-e));
	}
	out->vocab_bytes = (uint32_t)v->vocab_size;
	out->tokenizer_bytes = (uint32_t)v->size;
	out->choice = v->choice;
	return 1;
}

int bn_vocab_serve_open(const char *path, uint32_t n_vocab, const struct bn_vocab_options *o,
			struct bn_vocab_served *out, char err[BN_VOCAB_ERR_LEN])
{
	memset(out, 0, sizeof(*out));
	out->vocab_fd = out->tokenizer_fd = -1;
	struct bn_gguf g;
	if (bn_gguf_open(&g, path, err) < 0)
		return -1;
	struct builder b = { .g = &g, .err = err };
	struct bn_vocab_built v;
	int rc = bn_vocab_payload_build(&g, o, &v, err);
	if (rc == 1 && n_vocab) {
		struct bn_vocab_head head;
		memcpy(&head, v.payload, sizeof(head));
		if (head.n_tokens != n_vocab)
			rc = fail(&b, "the vocabulary has %u tokens, the model %u", head.n_tokens,
				  n_vocab);
	}
	if (rc == 1)
		rc = seal_both(&b, &v, out);
	free(v.payload);
	bn_gguf_close(&g);
	return rc;
}

void bn_vocab_served_close(struct bn_vocab_served *s)
{
	if (s->vocab_fd >= 0)
		close(s->vocab_fd);
	if (s->tokenizer_fd >= 0)
		close(s->tokenizer_fd);
	s->vocab_fd = s->tokenizer_fd = -1;
}
