/* SPDX-License-Identifier: MIT */
/*
 * test_gateway_embed — bitnet-gateway's POST /v1/embeddings over raw HTTP, with the ring as the
 * oracle: each vector (floats at 9 digits, and base64 of its binary32 bytes) is the one
 * bn_embed gives for the same input, bit for bit, for text, token ids and arrays of them, in
 * order past the slots one request holds; usage counts the inputs' tokens; `dimensions` cuts
 * an embedding model's vector and normalises it again (checked against this file's own
 * arithmetic), and is refused for a generative model pooled by --pooling; bad requests are
 * 400s naming their parameter; a daemon that does not embed, and completions asked of an
 * embedding model, are refused by name; a daemon of two models picks its model by name; a
 * string to an embedding model whose file says add_eos_token (as BitNet-embedding-0.6B's)
 * ends with EOS: its vector is that of BOS + its ids + EOS sent as ids, and usage counts it.
 * Cost: 4 daemons and gateways on the tiny model; about 2.5 s plain.
 */
#define _GNU_SOURCE
#include "gateway_testutil.h"
#include "testutil.h"
#include "bitnet_client.h"

#include <math.h>

#define SEC 1000000000LL
#define DIM 256 /* the tiny preset's width */

static char models_dir[] = "/tmp/bn-gw-embed-XXXXXX";
static char embedding_model[256]; /* the tiny preset, pooling last, add_eos_token true */

struct stack {
	struct tu_daemon d;
	struct gateway g;
	struct bn_client *c;
};

static void up(struct stack *s, const char *model, const char *pooling)
{
	/* 16 slots a session: fewer than a request's 32, which it then takes 16 at a time */
	const char *args[] = { "--slots", "16", "--pooling", pooling, NULL };
	if (!pooling)
		args[2] = NULL;
	ck_assert_int_eq(tu_daemon_start_cpu(&s->d, model, args), 0);
	gateway_start(&s->g, s->d.socket_path, NULL);
	ck_assert_int_eq(bn_connect(s->d.socket_path, 0, &s->c), 0);
}

static void down(struct stack *s)
{
	bn_disconnect(s->c);
	gateway_stop(&s->g);
	ck_assert_int_eq(tu_daemon_stop(&s->d, SIGTERM), 0);
}

static struct reply post(const struct stack *s, const char *body)
{
	return http(s->g.port, "POST", "/v1/embeddings", NULL, body);
}

/* The ring's vector for text (ids NULL) or ids. */
static void ring_vector(struct bn_client *c, const char *text, const uint32_t *ids, uint32_t n,
			float *v, uint32_t *tokens)
{
	struct bn_embed_item it = { .text = text, .text_len = text ? strlen(text) : 0, .ids = ids,
				    .n_ids = n, .vector = v, .cap = DIM };
	int rc = bn_embed(c, &it, tu_scaled_ns(30 * SEC));
	ck_assert_msg(rc == 0, "embed: %s", bn_strerror(rc));
	ck_assert_uint_eq(it.dim, DIM);
	*tokens = it.n_tokens;
}

/* data[i].embedding of a float answer, as binary32. */
static void float_vector(json_t *j, size_t i, float *v, uint32_t n)
{
	json_t *item = json_array_get(json_object_get(j, "data"), i);
	ck_assert_str_eq(json_string_value(json_object_get(item, "object")), "embedding");
	ck_assert_int_eq(json_integer_value(json_object_get(item, "index")), (json_int_t)i);
	json_t *e = json_object_get(item, "embedding");
	ck_assert_uint_eq(json_array_size(e), n);
	for (uint32_t k = 0; k < n; k++)
		v[k] = (float)json_number_value(json_array_get(e, k)); /* 9 digits: the float */
}

static int b64(char ch)
{
	const char *abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const char *p = strchr(abc, ch);
	return ch && p ? (int)(p - abc) : -1;
}

/* data[i].embedding of a base64 answer: the little-endian binary32 bytes. */
static void base64_vector(json_t *j, size_t i, float *v, uint32_t n)
{
	json_t *item = json_array_get(json_object_get(j, "data"), i);
	const char *s = json_string_value(json_object_get(item, "embedding"));
	ck_assert_ptr_nonnull(s);
	ck_assert_uint_eq(strlen(s), (n * 4 + 2) / 3 * 4);
	uint8_t *out = (uint8_t *)v;
	size_t at = 0;
	for (const char *p = s; *p; p += 4) {
		uint32_t w = 0;
		for (int k = 0; k < 4; k++)
			w = w << 6 | (uint32_t)(p[k] == '=' ? 0 : b64(p[k]));
		for (int k = 0; k < 3 && at < n * 4u; k++)
			out[at++] = (uint8_t)(w >> (16 - 8 * k));
	}
}

START_TEST(embeddings_are_the_rings)
{
	struct stack s;
	up(&s, tu_default_model(), "mean");
	static const char *texts[] = { "Once upon a time", "a b", "The weights are ternary." };
	static float want[3][DIM], got[DIM];
	uint32_t tokens = 0, t;
	for (int i = 0; i < 3; i++) {
		ring_vector(s.c, texts[i], NULL, 0, want[i], &t);
		tokens += t;
	}
	struct reply r = post(&s, "{\"model\":\"bitnet-tiny\",\"input\":[\"Once upon a time\",\"a b\","
				  "\"The weights are ternary.\"],\"encoding_format\":\"float\"}");
	ck_assert_msg(r.status == 200, "%s", r.body);
	json_t *j = json_of(&r);
	ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "list");
	ck_assert_str_eq(json_string_value(json_object_get(j, "model")), "bitnet-tiny");
	for (size_t i = 0; i < 3; i++) {
		float_vector(j, i, got, DIM);
		ck_assert_mem_eq(got, want[i], sizeof(got));
	}
	json_t *usage = json_object_get(j, "usage");
	ck_assert_int_eq(json_integer_value(json_object_get(usage, "prompt_tokens")), tokens);
	ck_assert_int_eq(json_integer_value(json_object_get(usage, "total_tokens")), tokens);
	json_decref(j);
	reply_free(&r);
	/* token ids: one input, and an array of them, in base64 */
	static const uint32_t a[] = { 1, 40, 41, 42 }, b[] = { 1, 7 };
	ring_vector(s.c, NULL, a, 4, want[0], &t);
	ring_vector(s.c, NULL, b, 2, want[1], &t);
	r = post(&s, "{\"input\":[1,40,41,42]}");
	j = json_of(&r);
	float_vector(j, 0, got, DIM);
	ck_assert_mem_eq(got, want[0], sizeof(got));
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "usage"),
							    "prompt_tokens")), 4);
	json_decref(j);
	reply_free(&r);
	r = post(&s, "{\"input\":[[1,40,41,42],[1,7]],\"encoding_format\":\"base64\"}");
	ck_assert_msg(r.status == 200, "%s", r.body);
	j = json_of(&r);
	for (size_t i = 0; i < 2; i++) {
		base64_vector(j, i, got, DIM);
		ck_assert_mem_eq(got, want[i], sizeof(got));
	}
	json_decref(j);
	reply_free(&r);
	down(&s);
}
END_TEST

/* More inputs than the slots one request holds (the daemon's 16): all of them, in order. */
#define MANY 70

START_TEST(more_inputs_than_one_lease)
{
	struct stack s;
	up(&s, tu_default_model(), "last");
	char body[MANY * 32] = "{\"input\":[";
	static float want[MANY][DIM], got[DIM];
	for (int i = 0; i < MANY; i++) {
		uint32_t ids[3] = { 1, 3 + (uint32_t)i, 200 + (uint32_t)i }, t;
		ring_vector(s.c, NULL, ids, 3, want[i], &t);
		char one[48];
		snprintf(one, sizeof(one), "%s[1,%d,%d]", i ? "," : "", 3 + i, 200 + i);
		strcat(body, one);
	}
	strcat(body, "]}");
	struct reply r = post(&s, body);
	ck_assert_msg(r.status == 200, "%s", r.body);
	json_t *j = json_of(&r);
	ck_assert_uint_eq(json_array_size(json_object_get(j, "data")), MANY);
	for (size_t i = 0; i < MANY; i++) {
		float_vector(j, i, got, DIM);
		ck_assert_mem_eq(got, want[i], sizeof(got));
	}
	json_decref(j);
	reply_free(&r);
	down(&s);
}
END_TEST

START_TEST(dimensions_cut_an_embedding_model)
{
	struct stack s;
	up(&s, embedding_model, NULL);
	static float full[DIM], got[DIM], by_ids[DIM];
	uint32_t t, t_ids;
	ring_vector(s.c, "hello world", NULL, 0, full, &t);
	/* the oracle: <s> (1), the text's ids, </s> (2), from the tiny vocabulary */
	const struct bn_vocab *v;
	ck_assert_int_eq(bn_client_vocab(s.c, &v), 0);
	uint32_t ids[16] = { 1 };
	int n = bn_tokenize_ex(v, "hello world", 11, 0, ids + 1, 14);
	ck_assert(n > 0 && n <= 14);
	ids[n + 1] = 2;
	ring_vector(s.c, NULL, ids, (uint32_t)n + 2, by_ids, &t_ids);
	ck_assert_uint_eq(t, (uint32_t)n + 2);
	ck_assert_mem_eq(full, by_ids, sizeof(full));
	struct reply r = post(&s, "{\"input\":\"hello world\",\"dimensions\":100}");
	ck_assert_msg(r.status == 200, "%s", r.body);
	json_t *j = json_of(&r);
	float_vector(j, 0, got, 100);
	double norm = 0;
	for (int i = 0; i < 100; i++)
		norm += (double)full[i] * full[i];
	for (int i = 0; i < 100; i++)
		ck_assert(got[i] == (float)(full[i] / sqrt(norm)));
	json_decref(j);
	reply_free(&r);
	r = post(&s, "{\"input\":\"hello world\",\"dimensions\":256}");
	j = json_of(&r);
	float_vector(j, 0, got, DIM);
	ck_assert_mem_eq(got, full, sizeof(got));
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "usage"),
							    "prompt_tokens")), n + 2);
	json_decref(j);
	reply_free(&r);
	r = post(&s, "{\"input\":\"hello\",\"dimensions\":257}");
	assert_error(&r, 400, "dimensions");
	reply_free(&r);
	/* an embedding model does not generate */
	r = http(s.g.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"hi\",\"max_tokens\":2}");
	assert_error(&r, 400, "model");
	ck_assert_ptr_nonnull(strstr(r.body, "embedding model"));
	reply_free(&r);
	down(&s);
}
END_TEST

START_TEST(bad_requests_name_their_parameter)
{
	struct stack s;
	up(&s, tu_default_model(), "mean");
	static const struct {
		const char *body, *param;
		int status;
	} cases[] = {
		{ "{\"input\":\"\"}", "input", 400 },
		{ "{\"input\":[]}", "input", 400 },
		{ "{\"input\":[\"a\",\"\"]}", "input", 400 },
		{ "{\"input\":[\"a\",[1,2]]}", "input", 400 },
		{ "{\"input\":[[1,2],[]]}", "input", 400 },
		{ "{\"input\":[1,99999]}", "input", 400 },
		{ "{\"input\":[1,-1]}", "input", 400 },
		{ "{\"input\":7}", "input", 400 },
		{ "{}", "input", 400 },
		{ "{\"input\":\"a\",\"encoding_format\":\"int8\"}", "encoding_format", 400 },
		{ "{\"input\":\"a\",\"dimensions\":0}", "dimensions", 400 },
		{ "{\"input\":\"a\",\"dimensions\":64}", "dimensions", 400 }, /* not trained */
		{ "{\"input\":\"a\",\"temperature\":1}", "temperature", 400 },
		{ "{\"input\":\"a\",\"model\":\"text-embedding-3-small\"}", "model", 404 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct reply r = post(&s, cases[i].body);
		assert_error(&r, cases[i].status, cases[i].param);
		reply_free(&r);
	}
	/* an input over the context: named, with OpenAI's code */
	size_t n = 6 * 1024 * 3;
	char *body = malloc(n + 32);
	strcpy(body, "{\"input\":[\"a\",\"");
	for (size_t i = strlen(body); i < n; i++)
		body[i] = "ab cd "[i % 6];
	strcpy(body + n, "\"]}");
	struct reply r = post(&s, body);
	assert_error(&r, 400, "input");
	ck_assert_ptr_nonnull(strstr(r.body, "input[1]"));
	ck_assert_ptr_nonnull(strstr(r.body, "context_length_exceeded"));
	reply_free(&r);
	free(body);
	down(&s);
	/* a daemon that does not embed */
	up(&s, tu_default_model(), NULL);
	r = post(&s, "{\"input\":\"a\"}");
	assert_error(&r, 400, "model");
	ck_assert_ptr_nonnull(strstr(r.body, "--pooling"));
	reply_free(&r);
	down(&s);
}
END_TEST

/* A daemon of two models (issue 60) behind the gateway: the `model` field picks the one that
 * embeds, its vectors are what a ring session bound to it gives; no field is the default
 * model; a model that does not embed, completions of the embedding model, and a name the
 * daemon does not serve are refused by name. */
START_TEST(models_by_name)
{
	char emb[300], gen[300];
	snprintf(emb, sizeof(emb), "emb=%s", embedding_model);
	snprintf(gen, sizeof(gen), "gen=%s", tu_default_model());
	const char *args[] = { "--backend", "cpu", "--threads", "2", "--slots", "16",
			       "--model", emb, "--model", gen, NULL };
	struct stack s;
	ck_assert_int_eq(tu_daemon_start(&s.d, args), 0);
	gateway_start(&s.g, s.d.socket_path, NULL);
	ck_assert_int_eq(bn_connect_model(s.d.socket_path, "emb", 0, 0, &s.c), 0);
	static float want[DIM], got[DIM];
	uint32_t t;
	ring_vector(s.c, "Once upon a time", NULL, 0, want, &t);
	static const char *bodies[] = { "{\"model\":\"emb\",\"input\":\"Once upon a time\"}",
					"{\"input\":\"Once upon a time\"}" };
	for (int i = 0; i < 2; i++) {
		struct reply r = post(&s, bodies[i]);
		ck_assert_msg(r.status == 200, "%s", r.body);
		json_t *j = json_of(&r);
		ck_assert_str_eq(json_string_value(json_object_get(j, "model")), "emb");
		float_vector(j, 0, got, DIM);
		ck_assert_mem_eq(got, want, sizeof(got));
		json_decref(j);
		reply_free(&r);
	}
	struct reply r = post(&s, "{\"model\":\"gen\",\"input\":\"a\"}");
	assert_error(&r, 400, "model");
	ck_assert_ptr_nonnull(strstr(r.body, "--pooling"));
	reply_free(&r);
	r = post(&s, "{\"model\":\"nope\",\"input\":\"a\"}");
	assert_error(&r, 404, "model");
	ck_assert_ptr_nonnull(strstr(r.body, "model_not_found"));
	reply_free(&r);
	r = http(s.g.port, "POST", "/v1/completions", NULL,
		 "{\"model\":\"emb\",\"prompt\":\"a\",\"max_tokens\":2}");
	assert_error(&r, 400, "model");
	reply_free(&r);
	r = http(s.g.port, "POST", "/v1/completions", NULL,
		 "{\"model\":\"gen\",\"prompt\":\"a\",\"max_tokens\":2}");
	ck_assert_msg(r.status == 200, "%s", r.body);
	reply_free(&r);
	down(&s);
}
END_TEST

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	tu_models_dir(models_dir);
	snprintf(embedding_model, sizeof(embedding_model), "%s/embed-last.gguf", models_dir);
	const char *args[] = { "--pooling", "last", "--add-eos", "true", NULL };
	tu_write_tiny_model(embedding_model, args);
	Suite *s = suite_create("gateway_embed");
	TCase *tc = tcase_create("built-in model");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, embeddings_are_the_rings);
	tcase_add_test(tc, more_inputs_than_one_lease);
	tcase_add_test(tc, dimensions_cut_an_embedding_model);
	tcase_add_test(tc, bad_requests_name_their_parameter);
	tcase_add_test(tc, models_by_name);
	suite_add_tcase(s, tc);
	int rc = tu_run_suite(s);
	tu_remove_dir(models_dir);
	return rc;
}
