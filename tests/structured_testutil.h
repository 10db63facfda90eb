/* SPDX-License-Identifier: MIT */
/*
 * structured_testutil.h — what the structured-output tests through a real daemon share
 * (test_structured.c, test_structured_oracle.c): a random-weight model with LLaMA-3's
 * vocabulary, grammars compiled over the ring, constrained requests and their answers, and the
 * output's text spelled from tokenizer.json by the grammar tests' own vocabulary (not by the
 * daemon's).
 */
#ifndef BITNET_STRUCTURED_TESTUTIL_H
#define BITNET_STRUCTURED_TESTUTIL_H

#include "grammar_testutil.h"

#include "bitnet_client.h"
#include "bitnet_shm.h"

#define SEC 1000000000LL
#define ST_MAX_OUT 768
#define ST_N_ALT 4

static char st_work[] = "/tmp/bn-structured-XXXXXX";
static char st_model[600];
static struct tvocab st_llama3; /* the oracle's vocabulary: tokenizer.json's pieces as bytes */

/* The work directory, the model (the tiny preset's random weights, LLaMA-3's vocabulary) and
 * the oracle's vocabulary; exits 77 when $BITNET_TEST_MODELS lacks the tokenizer. */
static inline void st_setup(void)
{
	char tok[512];
	if (!models_file("llama3/tokenizer.json", tok, sizeof(tok)))
		exit(77);
	tu_models_dir(st_work);
	snprintf(st_model, sizeof(st_model), "%s/tiny-llama3.gguf", st_work);
	const char *args[] = { "--vocab-from", tok, "--metadata", "microsoft", NULL };
	tu_write_tiny_model(st_model, args);
	if (tvocab_llama3(&st_llama3))
		exit(77);
}

static inline void st_teardown(void)
{
	tvocab_free(&st_llama3);
	tu_remove_dir(st_work);
}

/* A cpu daemon on the model with the extra arguments (NULL-terminated, up to 6). */
static inline void st_start(struct tu_daemon *d, const char *const *extra)
{
	const char *args[9] = { "--threads", "2" };
	for (int i = 0; extra && extra[i]; i++)
		args[2 + i] = extra[i];
	ck_assert_int_eq(tu_daemon_start_cpu(d, st_model, args), 0);
}

static inline struct bn_client *st_connect(const struct tu_daemon *d, uint32_t slots)
{
	struct bn_client *c = NULL;
	int rc = bn_connect(d->socket_path, slots, &c);
	ck_assert_msg(rc == 0, "connect: %s", bn_strerror(rc));
	return c;
}

/* Compiles a grammar; rc is returned, the daemon's reason in err (may be NULL). */
static inline int st_try_load(struct bn_client *c, uint32_t kind, uint32_t flags,
			      const char *text, struct bn_grammar_handle **g, char *err, size_t cap)
{
	struct bn_grammar_spec spec = { .kind = kind, .flags = flags, .text = text,
					.len = text ? strlen(text) : 0 };
	return bn_grammar_load(c, &spec, g, err, cap, tu_scaled_ns(60 * SEC));
}

static inline struct bn_grammar_handle *st_load(struct bn_client *c, uint32_t kind,
						uint32_t flags, const char *text)
{
	struct bn_grammar_handle *g = NULL;
	char err[512];
	int rc = st_try_load(c, kind, flags, text, &g, err, sizeof(err));
	ck_assert_msg(rc == 0, "load %.60s: %s: %s", text ? text : "", bn_strerror(rc), err);
	return g;
}

/* One request's answer: ids, terminal result, log-probability records, the output's bytes. */
struct st_answer {
	struct bn_result res;
	uint32_t n;
	uint32_t ids[ST_MAX_OUT];
	struct bn_logprob lp[ST_MAX_OUT], alt[ST_MAX_OUT * ST_N_ALT];
	char text[ST_MAX_OUT * 160];
	size_t len;
};

/* How to ask. */
struct st_ask {
	uint32_t flags;           /* BN_REQ_SEED, BN_REQ_LOGPROBS, BN_REQ_SPECULATE */
	struct bn_sampling_params sp;
	uint32_t max_tokens;
};

static inline struct bn_handle *st_submit(struct bn_client *c, const char *prompt,
					  const struct st_ask *a,
					  const struct bn_grammar_handle *g)
{
	struct bn_request req = { .max_tokens = a->max_tokens, .flags = a->flags,
				  .sampling = &a->sp };
	struct bn_handle *h = NULL;
	int rc = bn_submit_grammar(c, &req, prompt, strlen(prompt), g, &h);
	ck_assert_msg(rc == 0, "submit: %s", bn_strerror(rc));
	return h;
}

/* The output's bytes from the oracle's vocabulary (an end-of-generation id is not output). */
static inline void st_spell(struct st_answer *out)
{
	out->len = 0;
	for (uint32_t i = 0; i < out->n; i++) {
		uint32_t id = out->ids[i];
		ck_assert_uint_lt(id, st_llama3.n);
		ck_assert_uint_le(out->len + st_llama3.len[id], sizeof(out->text) - 1);
		memcpy(out->text + out->len, st_llama3.bytes[id], st_llama3.len[id]);
		out->len += st_llama3.len[id];
	}
	out->text[out->len] = 0;
}

static inline void st_collect(struct bn_handle *h, const struct st_ask *a, struct st_answer *out)
{
	memset(out, 0, sizeof(*out));
	ck_assert_int_eq(tu_wait(h, 120 * SEC), 0);
	ck_assert_int_eq(bn_result(h, &out->res), 0);
	out->res.queue_ns = out->res.first_token_ns = out->res.total_ns = 0;
	out->n = (uint32_t)bn_read_tokens(h, 0, out->ids, ST_MAX_OUT);
	if (a->flags & BN_REQ_LOGPROBS)
		ck_assert_int_eq(bn_read_logprobs(h, 0, out->lp, out->alt, ST_MAX_OUT), (int)out->n);
	bn_release(h);
	st_spell(out);
}

static inline void st_run(struct bn_client *c, const char *prompt, const struct st_ask *a,
			  const struct bn_grammar_handle *g, struct st_answer *out)
{
	st_collect(st_submit(c, prompt, a, g), a, out);
}

#endif /* BITNET_STRUCTURED_TESTUTIL_H */
