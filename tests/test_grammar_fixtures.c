/* SPDX-License-Identifier: MIT */
/*
 * Real-world JSON Schemas through the grammar engine: tests/fixtures/jsonschemabench (from
 * JSONSchemaBench, a few dozen per keyword of issue 58; its README says how they were picked
 * and their licence). Each schema the manifest lists as accepted compiles, and seeded random
 * walks over LLaMA-3's vocabulary (what a model with random weights would write, closed in
 * time by the engine) give outputs that validate under python3-jsonschema with the schema's
 * own draft, with floats and with exact decimals, formats checked (tests/grammar_oracle.py);
 * each one listed as refused is refused with the words the manifest names. Without
 * $BITNET_TEST_MODELS the suite says SKIP and exits 77.
 */
#include "grammar_testutil.h"

#define FIXTURES "tests/fixtures/jsonschemabench"
#define WALKS (TU_SANITIZED ? 1 : 3) /* per schema; the sanitizers look for memory errors */
#define WALK_TOKENS 300

static struct tvocab llama3;

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f, "cannot open %s", path);
	ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
	long n = ftell(f);
	ck_assert_int_eq(fseek(f, 0, SEEK_SET), 0);
	char *text = malloc((size_t)n + 1);
	ck_assert(text && fread(text, 1, (size_t)n, f) == (size_t)n);
	fclose(f);
	text[n] = 0;
	*len = (size_t)n;
	return text;
}

/* The fixture of a manifest entry: its file (*file) and text. */
static char *fixture(json_t *e, const char **file, size_t *len)
{
	char path[512];
	*file = json_string_value(json_object_get(e, "file"));
	snprintf(path, sizeof(path), FIXTURES "/%s", *file);
	return read_file(path, len);
}

static json_t *manifest(void)
{
	json_error_t err;
	json_t *m = json_load_file(FIXTURES "/manifest.json", 0, &err);
	ck_assert_msg(json_is_array(m), "manifest: %s", err.text);
	return m;
}

static int compile(const char *text, size_t len, struct bn_grammar **g, char *err)
{
	/* A generous budget: sanitizer builds run several times slower. */
	struct bn_grammar_options o = { .kind = BN_GRAMMAR_JSON_SCHEMA,
					.limits = { .compile_ms = 60000 } };
	return bn_grammar_compile(text, len, &o, g, err);
}

/* Every accepted fixture: compiled, walked, and every output that ended validated. */
START_TEST(fixtures_outputs_validate)
{
	json_t *m = manifest();
	struct oracle o = { 0 };
	uint32_t schemas = 0, walks = 0, cut = 0;
	size_t i;
	json_t *e;
	json_array_foreach(m, i, e) {
		if (json_object_get(e, "refused"))
			continue;
		const char *file;
		char err[BN_GRAMMAR_ERR_LEN];
		size_t len;
		char *text = fixture(e, &file, &len);
		struct bn_grammar *g;
		int rc = compile(text, len, &g, err);
		ck_assert_msg(rc == 0, "%s is refused: %s", file, err);
		struct bn_grammar_bound *b;
		ck_assert_int_eq(bn_grammar_bind(g, llama3.v, &b), 0);
		bn_grammar_unref(g);
		tu_rng_seed(1000 + i);
		for (int k = 0; k < WALKS; k++) {
			struct walk w;
			random_walk_budget(&llama3, b, WALK_TOKENS, 1, &w);
			walks++;
			if (!w.ended)
				cut++; /* no end fits in the tokens left: nothing to validate */
			else
				oracle_add_named(&o, file, "schema", text, w.out, w.len);
			free(w.out);
		}
		bn_grammar_bound_unref(b);
		free(text);
		schemas++;
	}
	json_decref(m);
	printf("fixtures: %u schemas, %u walks, %u cut by the token budget\n", schemas, walks, cut);
	ck_assert_msg(cut * 10 <= walks, "%u of %u walks did not end", cut, walks);
	oracle_run(&o);
}
END_TEST

/* Every refused fixture: refused, saying what the manifest says. */
START_TEST(fixtures_refusals_name_the_keyword)
{
	json_t *m = manifest();
	size_t i;
	json_t *e;
	uint32_t n = 0;
	json_array_foreach(m, i, e) {
		const char *says = json_string_value(json_object_get(e, "refused"));
		if (!says)
			continue;
		const char *file;
		char err[BN_GRAMMAR_ERR_LEN];
		size_t len;
		char *text = fixture(e, &file, &len);
		struct bn_grammar *g = NULL;
		int rc = compile(text, len, &g, err);
		ck_assert_msg(rc == -EINVAL && strstr(err, says), "%s: %d \"%s\", not \"%s\"", file,
			      rc, err, says);
		ck_assert_ptr_null(g);
		free(text);
		n++;
	}
	json_decref(m);
	ck_assert_uint_gt(n, 0);
}
END_TEST

static void load_vocab(void)
{
	if (!llama3.v && tvocab_llama3(&llama3))
		exit(77);
}

int main(void)
{
	if (TU_TSAN) { /* testutil.h */
		puts(TU_TSAN_SKIP_MSG);
		return 77;
	}
	char path[512];
	if (!models_file("llama3/tokenizer.json", path, sizeof(path)))
		return 77;
	Suite *s = suite_create("grammar_fixtures");
	TCase *tc = tcase_create("jsonschemabench");
	tcase_add_unchecked_fixture(tc, load_vocab, NULL);
	tcase_set_timeout(tc, 900);
	tcase_add_test(tc, fixtures_outputs_validate);
	tcase_add_test(tc, fixtures_refusals_name_the_keyword);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
