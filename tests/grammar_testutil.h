/* SPDX-License-Identifier: MIT */
/*
 * grammar_testutil.h — what the grammar engine's tests share (test_grammar.c,
 * test_grammar_walks.c): vocabularies (LLaMA-3's from tokenizer.json through tools/hf_vocab.c,
 * small made-up ones), constrained random walks, and the independent Python oracle.
 */
#ifndef BITNET_GRAMMAR_TESTUTIL_H
#define BITNET_GRAMMAR_TESTUTIL_H

#include "../daemon/grammar/grammar.h"
#include "../tools/hf_vocab.h"
#include "testutil.h"

#include "ckassert.h"
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A vocabulary with each token's bytes kept for the test's own use. */
struct tvocab {
	struct bn_grammar_vocab *v;
	uint32_t n;
	uint8_t **bytes;
	uint32_t *len;
	uint8_t *kind;
};

static inline void tvocab_free(struct tvocab *t)
{
	for (uint32_t i = 0; t->bytes && i < t->n; i++)
		free(t->bytes[i]);
	free(t->bytes);
	free(t->len);
	free(t->kind);
	bn_grammar_vocab_unref(t->v);
	*t = (struct tvocab){ 0 };
}

static inline int tvocab_make(struct tvocab *t)
{
	return bn_grammar_vocab_new(t->n, (const uint8_t *const *)t->bytes, t->len, t->kind, &t->v);
}

static inline void tvocab_alloc(struct tvocab *t, uint32_t n)
{
	t->n = n;
	t->bytes = calloc(n, sizeof(*t->bytes));
	t->len = calloc(n, sizeof(*t->len));
	t->kind = calloc(n, 1);
	if (!t->bytes || !t->len || !t->kind)
		abort();
}

static inline void tvocab_set(struct tvocab *t, uint32_t id, const void *b, uint32_t len,
			      uint8_t kind)
{
	t->bytes[id] = malloc(len + 1);
	if (!t->bytes[id])
		abort();
	memcpy(t->bytes[id], b, len);
	t->len[id] = len;
	t->kind[id] = kind;
}

/* $BITNET_TEST_MODELS/<rel>, or NULL (with a SKIP line) when the folder or file is not there. */
static inline const char *models_file(const char *rel, char *buf, size_t cap)
{
	const char *dir = getenv("BITNET_TEST_MODELS");
	if (!dir || !*dir) {
		printf("SKIP: LLaMA-3 vocabulary tests (BITNET_TEST_MODELS is not set; .ci/run sets "
		       "it to ../shared/models)\n");
		return NULL;
	}
	snprintf(buf, cap, "%s/%s", dir, rel);
	FILE *f = fopen(buf, "rb");
	if (!f) {
		printf("SKIP: %s is not there\n", buf);
		return NULL;
	}
	fclose(f);
	return buf;
}

/* LLaMA-3's vocabulary (128,256 tokens): byte-level pieces to bytes, control tokens special,
 * <|eot_id|>, <|end_of_text|> and <|eom_id|> ending generation. 0, or -1 with a SKIP line. */
static inline int tvocab_llama3(struct tvocab *t)
{
	char path[512], err[256];
	if (!models_file("llama3/tokenizer.json", path, sizeof(path)))
		return -1;
	struct hf_vocab hv;
	if (hf_vocab_load(path, &hv, err, sizeof(err))) {
		printf("FAIL: %s\n", err);
		exit(1);
	}
	tvocab_alloc(t, hv.n_tokens);
	for (uint32_t i = 0; i < hv.n_tokens; i++) {
		const char *text = hv.tokens[i] ? hv.tokens[i] : "";
		size_t n = strlen(text);
		uint8_t buf[1024];
		if (hv.types[i] != 1) {
			int eog = !strcmp(text, "<|eot_id|>") || !strcmp(text, "<|end_of_text|>") ||
				  !strcmp(text, "<|eom_id|>");
			tvocab_set(t, i, text, (uint32_t)n, eog ? BN_GRAMMAR_TOKEN_EOG
							      : BN_GRAMMAR_TOKEN_SPECIAL);
			continue;
		}
		int len = bn_grammar_piece_bytes(BN_GRAMMAR_PIECES_BYTE_LEVEL, text, n, buf,
						 sizeof(buf));
		if (len < 0) {
			printf("FAIL: token %u %s: %d\n", i, text, len);
			exit(1);
		}
		tvocab_set(t, i, buf, (uint32_t)len, BN_GRAMMAR_TOKEN_TEXT);
	}
	hf_vocab_free(&hv);
	if (tvocab_make(t)) {
		printf("FAIL: bn_grammar_vocab_new on LLaMA-3\n");
		exit(1);
	}
	return 0;
}

static inline struct bn_grammar_bound *bind_text(const struct tvocab *t, uint32_t kind,
						 const char *text, uint32_t json_top)
{
	/* A generous budget: sanitizer builds run several times slower. */
	struct bn_grammar_options o = { .kind = kind, .json_top = json_top,
					.limits = { .compile_ms = 30000 } };
	char err[BN_GRAMMAR_ERR_LEN];
	struct bn_grammar *g;
	int rc = bn_grammar_compile(text, strlen(text), &o, &g, err);
	ck_assert_msg(rc == 0, "compile %.80s: %d %s", text, rc, err);
	struct bn_grammar_bound *b;
	ck_assert_int_eq(bn_grammar_bind(g, t->v, &b), 0);
	bn_grammar_unref(g);
	return b;
}

/* The k-th set bit of mask (k < its count). */
static inline uint32_t nth_set_bit(const uint64_t *mask, uint32_t words, uint32_t k)
{
	for (uint32_t w = 0; w < words; w++) {
		uint32_t c = (uint32_t)__builtin_popcountll(mask[w]);
		if (k >= c) {
			k -= c;
			continue;
		}
		uint64_t x = mask[w];
		while (k--)
			x &= x - 1;
		return w * 64 + (uint32_t)__builtin_ctzll(x);
	}
	return UINT32_MAX;
}

static inline int mask_has(const uint64_t *mask, uint32_t id)
{
	return (int)((mask[id / 64] >> (id % 64)) & 1);
}

struct walk {
	char *out;
	size_t len;
	int ended;            /* an end-of-generation token came */
	uint32_t n_tokens;
};

/* A random walk as a model with random weights would take it: uniform among the allowed
 * tokens, at most max_tokens in all with the end-of-generation token. Closing in time is the
 * engine's: a drawn token after which the output could not end within the tokens left is
 * redrawn from bn_grammar_matcher_fill_mask_within (every byte has a one-byte token here, so
 * a completion of n bytes needs at most n tokens). */
static inline void random_walk_budget(const struct tvocab *t, struct bn_grammar_bound *b,
				      uint32_t max_tokens, int may_cut, struct walk *w);

static inline void random_walk(const struct tvocab *t, struct bn_grammar_bound *b,
			       uint32_t max_tokens, struct walk *w)
{
	random_walk_budget(t, b, max_tokens, 0, w);
}

/* random_walk where the shortest output may not fit in max_tokens (may_cut): then the draw
 * stands and the walk ends cut (w->ended 0) rather than failing. */
static inline void random_walk_budget(const struct tvocab *t, struct bn_grammar_bound *b,
				      uint32_t max_tokens, int may_cut, struct walk *w)
{
	uint32_t words = (t->n + 63) / 64;
	uint64_t *mask = malloc(words * sizeof(uint64_t));
	struct bn_grammar_matcher *m;
	ck_assert_int_eq(bn_grammar_matcher_new(b, 0, &m), 0);
	*w = (struct walk){ .out = malloc(1) };
	for (uint32_t i = 0; i < max_tokens; i++) {
		uint32_t left = max_tokens - i - 1; /* tokens after this one */
		int n = bn_grammar_matcher_fill_mask(m, mask);
		ck_assert_msg(n > 0, "no token allowed after %zu bytes: %.*s", w->len,
			      (int)w->len, w->out);
		uint32_t id = nth_set_bit(mask, words, tu_rng_next() % (uint32_t)n);
		ck_assert_int_eq(bn_grammar_matcher_accept(m, id), 0);
		if (t->kind[id] != BN_GRAMMAR_TOKEN_EOG &&
		    (left == 0 || bn_grammar_matcher_tokens_to_accept(m) > left - 1)) {
			ck_assert_int_eq(bn_grammar_matcher_rollback(m, 1), 0);
			n = bn_grammar_matcher_fill_mask_within(m, mask, left);
			ck_assert_msg(n > 0 || may_cut, "no token closes in time after %zu bytes",
				      w->len);
			if (n > 0)
				id = nth_set_bit(mask, words, tu_rng_next() % (uint32_t)n);
			ck_assert_int_eq(bn_grammar_matcher_accept(m, id), 0);
		}
		w->n_tokens++;
		if (t->kind[id] == BN_GRAMMAR_TOKEN_EOG) {
			ck_assert(bn_grammar_matcher_is_finished(m));
			w->ended = 1;
			break;
		}
		w->out = realloc(w->out, w->len + t->len[id] + 1);
		memcpy(w->out + w->len, t->bytes[id], t->len[id]);
		w->len += t->len[id];
	}
	w->out[w->len] = 0;
	bn_grammar_matcher_free(m);
	free(mask);
}

/* JSON lines for the oracle (tests/grammar_oracle.py). */
struct oracle {
	char *text;
	size_t len;
	uint32_t cases;
};

/* name (may be NULL) says which case a failure is of (a fixture's file). */
static inline void oracle_add_named(struct oracle *o, const char *name, const char *kind,
				    const char *schema, const char *out, size_t len)
{
	json_t *line = json_pack("{s:s, s:s%}", "kind", kind, "output", out, len);
	ck_assert_msg(line, "output is not UTF-8: %.*s", (int)len, out);
	if (name)
		json_object_set_new(line, "name", json_string(name));
	if (schema)
		json_object_set_new(line, "schema", json_string(schema));
	char *s = json_dumps(line, JSON_COMPACT);
	size_t n = strlen(s);
	o->text = realloc(o->text, o->len + n + 2);
	memcpy(o->text + o->len, s, n);
	o->len += n;
	o->text[o->len++] = '\n';
	o->cases++;
	free(s);
	json_decref(line);
}

static inline void oracle_add(struct oracle *o, const char *kind, const char *schema,
			      const char *out, size_t len)
{
	oracle_add_named(o, NULL, kind, schema, out, len);
}

/* A python3 that has jsonschema: Debian's (tools/install-deps.sh), else the one on PATH. */
static inline const char *oracle_python(void)
{
	static const char *const candidates[] = { "/usr/bin/python3", "python3" };
	for (size_t i = 0; i < 2; i++) {
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "%s -c 'import jsonschema' 2>/dev/null", candidates[i]);
		if (system(cmd) == 0)
			return candidates[i];
	}
	return NULL;
}

/* Runs the oracle over every line; fails the test on any invalid output. Returns 0, or 77
 * when no python3 with jsonschema is there (it says SKIP). With $GRAMMAR_KEEP set, the lines
 * are also appended to /tmp/grammar-oracle-all.jsonl. */
static inline int oracle_run(struct oracle *o)
{
	const char *py = oracle_python();
	if (!py) {
		printf("SKIP: no python3 with jsonschema (tools/install-deps.sh installs it)\n");
		return 77;
	}
	char path[] = "/tmp/bitnet-grammar-oracle-XXXXXX";
	int fd = mkstemp(path);
	ck_assert(fd >= 0);
	ck_assert(write(fd, o->text, o->len) == (ssize_t)o->len);
	close(fd);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "%s tests/grammar_oracle.py < %s", py, path);
	if (getenv("GRAMMAR_KEEP")) { /* to look at the outputs: appended to one file */
		char keep[300];
		snprintf(keep, sizeof(keep), "cat %s >> /tmp/grammar-oracle-all.jsonl", path);
		ck_assert_int_eq(system(keep), 0);
	}
	int rc = system(cmd);
	unlink(path);
	ck_assert_msg(rc == 0, "the oracle found invalid outputs among %u (above)", o->cases);
	free(o->text);
	*o = (struct oracle){ 0 };
	return 0;
}

/* A 50-property object schema of the kinds real ones have (bounded strings, integers with
 * bounds, enums, dates, e-mail addresses, booleans), into out (cap bytes). */
static inline void schema50(char *out, size_t cap)
{
	size_t at = (size_t)snprintf(out, cap, "{\"type\":\"object\",\"properties\":{");
	for (int i = 0; i < 50 && at < cap; i++) {
		static const char *const kinds[] = {
			"{\"type\":\"string\",\"maxLength\":%d}",
			"{\"type\":\"integer\",\"minimum\":0,\"maximum\":%d}",
			"{\"enum\":[\"red%d\",\"green\",\"blue\"]}",
			"{\"type\":\"string\",\"format\":\"date\",\"$comment\":\"%d\"}",
			"{\"type\":\"boolean\",\"$comment\":\"%d\"}",
		};
		at += (size_t)snprintf(out + at, cap - at, "%s\"p%d\":", i ? "," : "", i);
		at += (size_t)snprintf(out + at, cap - at, kinds[i % 5], 20 + 40 * (i % 7));
	}
	at += (size_t)snprintf(out + at, cap - at, "},\"required\":[");
	for (int i = 0; i < 50 && at < cap; i++)
		at += (size_t)snprintf(out + at, cap - at, "%s\"p%d\"", i ? "," : "", i);
	snprintf(out + at, cap - at, "],\"additionalProperties\":false}");
}

#endif /* BITNET_GRAMMAR_TESTUTIL_H */
