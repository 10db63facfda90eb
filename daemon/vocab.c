/* SPDX-License-Identifier: MIT */
/* vocab.c — GGUF tokenizer keys → the BN_CTL_VOCAB payload, checked, in a sealed memfd. */
#define _GNU_SOURCE
#include "vocab.h"

#include "../shm/bitnet_shm.h"

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
	char *err;
	const struct bn_gguf_kv *tokens, *scores, *types;
	struct bn_vocab_head head;
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
	b->head.kind = rc == 0 && bn_gguf_str_eq(s, "llama") ? BN_VOCAB_SPM : BN_VOCAB_OTHER;
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
	if (read_kind(b) || token_id(b, "tokenizer.ggml.bos_token_id", &b->head.bos_id) ||
	    token_id(b, "tokenizer.ggml.eos_token_id", &b->head.eos_id) ||
	    token_id(b, "tokenizer.ggml.unknown_token_id", &b->head.unk_id) ||
	    per_token_array(b, "tokenizer.ggml.scores", 0, &b->scores) ||
	    per_token_array(b, "tokenizer.ggml.token_type", 1, &b->types))
		return -1;
	return 0;
}

/* Payload bytes: the head, then per token an entry and its text. It must fit the u32
 * length of a control reply. */
static int payload_size(struct builder *b, size_t *out)
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
	*out = (size_t)size;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Writing the payload                                                                         */
/* ------------------------------------------------------------------------------------------ */

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

static int write_entries(struct builder *b, uint8_t *p)
{
	memcpy(p, &b->head, sizeof(b->head));
	p += sizeof(b->head);
	for (uint32_t i = 0; i < b->head.n_tokens; i++) {
		struct bn_gguf_str s;
		struct bn_vocab_entry e;
		bn_gguf_arr_str(b->tokens, i, &s); /* checked by payload_size() */
		if (entry_of(b, i, &e))
			return -1;
		e.length = (uint32_t)s.len;
		memcpy(p, &e, sizeof(e)); /* entries follow texts: not aligned */
		memcpy(p + sizeof(e), s.ptr, s.len);
		p += sizeof(e) + s.len;
	}
	return 0;
}

int bn_vocab_payload_build(const struct bn_gguf *g, uint8_t **out, size_t *size,
			   char err[BN_VOCAB_ERR_LEN])
{
	struct builder b = { .g = g, .err = err };
	*out = NULL;
	*size = 0;
	b.tokens = bn_gguf_find_kv(g, "tokenizer.ggml.tokens");
	if (!b.tokens)
		return 0;
	size_t bytes = 0;
	if (read_head(&b) || payload_size(&b, &bytes))
		return -1;
	uint8_t *buf = malloc(bytes);
	if (!buf)
		return fail(&b, "no memory for a %zu-byte vocabulary", bytes);
	if (write_entries(&b, buf)) {
		free(buf);
		return -1;
	}
	*out = buf;
	*size = bytes;
	return 1;
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

int bn_vocab_payload_open(const char *path, uint32_t n_vocab, int *fd, size_t *size,
			  char err[BN_VOCAB_ERR_LEN])
{
	struct bn_gguf g;
	if (bn_gguf_open(&g, path, err) < 0)
		return -1;
	struct builder b = { .g = &g, .err = err };
	uint8_t *buf;
	int rc = bn_vocab_payload_build(&g, &buf, size, err);
	if (rc == 1 && n_vocab) {
		struct bn_vocab_head head;
		memcpy(&head, buf, sizeof(head));
		if (head.n_tokens != n_vocab)
			rc = fail(&b, "the vocabulary has %u tokens, the model %u", head.n_tokens,
				  n_vocab);
	}
	if (rc == 1) {
		*fd = bn_vocab_payload_seal(buf, *size);
		if (*fd < 0)
			rc = fail(&b, "cannot put the vocabulary in a memfd: %s", strerror(-*fd));
	}
	free(buf);
	bn_gguf_close(&g);
	return rc;
}
