/* SPDX-License-Identifier: MIT */
/*
 * hf_vocab.c — tokenizer.json (model.vocab, model.merges, added_tokens) through Jansson, which
 * checks the JSON and its UTF-8 and undoes the \u escapes (surrogate pairs included).
 */
#define _GNU_SOURCE
#include "hf_vocab.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS (1u << 24)

enum { TYPE_NORMAL = 1, TYPE_CONTROL = 3, TYPE_USER_DEFINED = 4, TYPE_UNUSED = 5 };

struct loader {
	const char *path;
	char *err;
	size_t err_len;
	struct hf_vocab *v;
};

__attribute__((format(printf, 2, 3))) static int fail(struct loader *l, const char *fmt, ...)
{
	int n = snprintf(l->err, l->err_len, "%s: ", l->path);
	va_list ap;
	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < l->err_len)
		vsnprintf(l->err + n, l->err_len - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

/* The largest id any entry names, so the table can be sized before it is filled. */
static int max_id(struct loader *l, json_t *vocab, json_t *added, uint32_t *out)
{
	json_int_t top = -1;
	const char *key;
	json_t *val;
	json_object_foreach(vocab, key, val) {
		if (!json_is_integer(val) || json_integer_value(val) < 0 ||
		    json_integer_value(val) >= MAX_TOKENS)
			return fail(l, "model.vocab[\"%s\"] is not an id below %u", key, MAX_TOKENS);
		if (json_integer_value(val) > top)
			top = json_integer_value(val);
	}
	size_t i;
	json_array_foreach(added, i, val) {
		json_t *id = json_object_get(val, "id");
		if (!json_is_integer(id) || json_integer_value(id) < 0 ||
		    json_integer_value(id) >= MAX_TOKENS ||
		    !json_is_string(json_object_get(val, "content")))
			return fail(l, "added_tokens[%zu] has no id below %u or no content", i,
				    MAX_TOKENS);
		if (json_integer_value(id) > top)
			top = json_integer_value(id);
	}
	if (top < 0)
		return fail(l, "model.vocab is empty");
	*out = (uint32_t)top + 1;
	return 0;
}

static int set_token(struct loader *l, uint32_t id, const char *text, int32_t type)
{
	struct hf_vocab *v = l->v;
	if (v->tokens[id] && type == TYPE_NORMAL)
		return fail(l, "id %u is named twice in model.vocab", id);
	free(v->tokens[id]); /* an added token replaces the vocabulary's entry for its id */
	v->tokens[id] = strdup(text);
	v->types[id] = type;
	return v->tokens[id] ? 0 : fail(l, "out of memory");
}

static int read_tokens(struct loader *l, json_t *vocab, json_t *added)
{
	struct hf_vocab *v = l->v;
	if (max_id(l, vocab, added, &v->n_tokens))
		return -1;
	v->tokens = calloc(v->n_tokens, sizeof(*v->tokens));
	v->types = calloc(v->n_tokens, sizeof(*v->types));
	if (!v->tokens || !v->types)
		return fail(l, "out of memory");
	const char *key;
	json_t *val;
	json_object_foreach(vocab, key, val)
		if (set_token(l, (uint32_t)json_integer_value(val), key, TYPE_NORMAL))
			return -1;
	size_t i;
	json_array_foreach(added, i, val) {
		int32_t type = json_is_true(json_object_get(val, "special")) ? TYPE_CONTROL
									      : TYPE_USER_DEFINED;
		if (set_token(l, (uint32_t)json_integer_value(json_object_get(val, "id")),
			      json_string_value(json_object_get(val, "content")), type))
			return -1;
	}
	/* Ids no entry names: placeholders, as llama.cpp's converter writes them. */
	for (uint32_t id = 0; id < v->n_tokens; id++) {
		if (v->tokens[id])
			continue;
		char pad[32];
		snprintf(pad, sizeof(pad), "[PAD%u]", id);
		if (set_token(l, id, pad, TYPE_UNUSED))
			return -1;
	}
	return 0;
}

/* A merge is "left right", or ["left", "right"] in newer files; stored as the former. */
static char *merge_text(json_t *m)
{
	if (json_is_string(m))
		return strchr(json_string_value(m), ' ') ? strdup(json_string_value(m)) : NULL;
	if (!json_is_array(m) || json_array_size(m) != 2 ||
	    !json_is_string(json_array_get(m, 0)) || !json_is_string(json_array_get(m, 1)))
		return NULL;
	char *s = NULL;
	if (asprintf(&s, "%s %s", json_string_value(json_array_get(m, 0)),
		     json_string_value(json_array_get(m, 1))) < 0)
		return NULL;
	return s;
}

static int read_merges(struct loader *l, json_t *merges)
{
	struct hf_vocab *v = l->v;
	v->n_merges = (uint32_t)json_array_size(merges);
	v->merges = calloc(v->n_merges ? v->n_merges : 1, sizeof(*v->merges));
	if (!v->merges)
		return fail(l, "out of memory");
	size_t i;
	json_t *m;
	json_array_foreach(merges, i, m) {
		v->merges[i] = merge_text(m);
		if (!v->merges[i])
			return fail(l, "model.merges[%zu] is not two tokens", i);
	}
	return 0;
}

int hf_vocab_load(const char *path, struct hf_vocab *v, char *err, size_t err_len)
{
	struct loader l = { path, err, err_len, v };
	memset(v, 0, sizeof(*v));
	json_error_t je;
	json_t *root = json_load_file(path, 0, &je);
	if (!root)
		return fail(&l, "line %d: %s", je.line, je.text);
	json_t *model = json_object_get(root, "model");
	json_t *vocab = json_object_get(model, "vocab");
	json_t *merges = json_object_get(model, "merges");
	json_t *added = json_object_get(root, "added_tokens");
	int rc;
	if (!json_is_string(json_object_get(model, "type")) ||
	    strcmp(json_string_value(json_object_get(model, "type")), "BPE") != 0)
		rc = fail(&l, "model.type is not \"BPE\"");
	else if (!json_is_object(vocab) || !json_is_array(merges))
		rc = fail(&l, "model.vocab is not an object or model.merges not an array");
	else if (added && !json_is_array(added))
		rc = fail(&l, "added_tokens is not an array");
	else
		rc = read_tokens(&l, vocab, added) || /* a NULL array has no elements */
		     read_merges(&l, merges) ? -1 : 0;
	json_decref(root);
	if (rc)
		hf_vocab_free(v);
	return rc;
}

void hf_vocab_free(struct hf_vocab *v)
{
	for (uint32_t i = 0; v->tokens && i < v->n_tokens; i++)
		free(v->tokens[i]);
	for (uint32_t i = 0; v->merges && i < v->n_merges; i++)
		free(v->merges[i]);
	free(v->tokens);
	free(v->types);
	free(v->merges);
	memset(v, 0, sizeof(*v));
}
