/* SPDX-License-Identifier: MIT */
/*
 * test_structured_oracle — structured output through a real daemon, checked by oracles that
 * share nothing with daemon/grammar/: a random-weight model with LLaMA-3's 128,256 tokens
 * (tiny preset) answers constrained requests, and
 *  - for JSON Schemas (nested objects, arrays of objects, enums and consts, recursion through
 *    $ref, number bounds, oneOf, patternProperties, allOf, bounds past 2^53, a uri) and JSON
 *    mode, the greedy output and 200 seeded samples of each all
 *    parse and validate under python3-jsonschema (tests/grammar_oracle.py); an output cut by
 *    max_tokens (BN_STATUS_LENGTH) is the one exception, counted, reported and required rare;
 *  - regular expressions: every output matches the whole expression under PCRE2;
 *  - a GBNF grammar (arithmetic with nested parentheses): every output is a sentence for a
 *    recursive-descent reader written here.
 * The text checked is spelled from tokenizer.json's pieces (grammar_testutil.h), not by the
 * daemon. Every request of a form is in flight with the others, so batching is exercised too.
 */
#define _GNU_SOURCE
#define PCRE2_CODE_UNIT_WIDTH 8
#include "structured_testutil.h"

#include <pcre2.h>
#include <signal.h>

/* seeded samples per form; fewer under the sanitizers, which look for memory and thread
 * errors rather than rare outputs, and under an emulator (testutil.h) */
#define N_SAMPLES (tu_reduced() ? 12 : 200)
/* the same for the regular expressions' and the GBNF grammar's forms */
#define N_REGEX_SAMPLES (tu_reduced() ? 8 : 24)
#define N_GBNF_SAMPLES (tu_reduced() ? 12 : 40)
#define SLOTS 64

static struct tu_daemon daemon_;

/* Outcomes of one form's requests. */
struct tally {
	uint32_t total, ended, cut;
};

/* Runs the greedy request and N seeded samples (temperature 1, seeds 1..n), at most SLOTS in
 * flight, and hands each answer to check(). Every request must end with EOS or LENGTH. */
static void run_all(struct bn_client *c, const struct bn_grammar_handle *g, uint32_t n_samples,
		    uint32_t max_tokens, void (*check)(void *, const struct st_answer *),
		    void *ctx, struct tally *t)
{
	static const char *const prompts[] = { "Once upon a time", "The answer is", "Data:",
					       "Hello" };
	struct st_ask asks[SLOTS];
	struct bn_handle *h[SLOTS];
	static struct st_answer a;
	uint32_t total = 1 + n_samples, next = 0, done = 0;
	*t = (struct tally){ 0 };
	while (done < total) {
		while (next < total && next - done < SLOTS) {
			struct st_ask *k = &asks[next % SLOTS];
			*k = (struct st_ask){ .max_tokens = max_tokens };
			if (next) {
				k->flags = BN_REQ_SEED;
				k->sp = (struct bn_sampling_params){ .temperature = 1.0f, .seed = next };
			}
			h[next % SLOTS] = st_submit(c, prompts[next % 4], k, g);
			next++;
		}
		st_collect(h[done % SLOTS], &asks[done % SLOTS], &a);
		done++;
		t->total++;
		ck_assert_msg(a.res.status == BN_STATUS_EOS || a.res.status == BN_STATUS_LENGTH,
			      "status %s (%s)", bn_status_name(a.res.status), bn_strerror(a.res.error));
		if (a.res.status == BN_STATUS_LENGTH) {
			t->cut++;
			continue;
		}
		t->ended++;
		check(ctx, &a);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* JSON Schema and JSON mode                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* Each with max_tokens a little over what its shortest output takes at one token a byte: the
 * random model wanders until the budget runs short, so every output costs about that much. */
static const struct {
	const char *name, *schema;
	uint32_t max_tokens;
} schemas[] = {
	{ "nested objects",
	  "{\"type\":\"object\",\"properties\":{\"user\":{\"type\":\"object\",\"properties\":{"
	  "\"name\":{\"type\":\"string\",\"maxLength\":12},\"address\":{\"type\":\"object\","
	  "\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12},\"zip\":{\"type\":"
	  "\"string\",\"pattern\":\"^[0-9]{5}$\"}},\"required\":[\"city\",\"zip\"],"
	  "\"additionalProperties\":false}},\"required\":[\"name\",\"address\"],"
	  "\"additionalProperties\":false},\"active\":{\"type\":\"boolean\"}},"
	  "\"required\":[\"user\",\"active\"],\"additionalProperties\":false}", 96 },
	{ "arrays of objects",
	  "{\"type\":\"object\",\"properties\":{\"items\":{\"type\":\"array\",\"minItems\":1,"
	  "\"maxItems\":3,\"items\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":"
	  "\"integer\"},\"tag\":{\"type\":\"string\",\"maxLength\":8}},\"required\":[\"id\","
	  "\"tag\"],\"additionalProperties\":false}}},\"required\":[\"items\"],"
	  "\"additionalProperties\":false}", 48 },
	{ "enums",
	  "{\"type\":\"object\",\"properties\":{\"color\":{\"enum\":[\"red\",\"green\",\"blue\"]},"
	  "\"size\":{\"type\":\"string\",\"enum\":[\"S\",\"M\",\"L\",\"XL\"]},\"count\":{\"const\":3},"
	  "\"note\":{\"enum\":[null,true,1.5,\"x\"]}},\"required\":[\"color\",\"size\",\"count\"],"
	  "\"additionalProperties\":false}", 56 },
	{ "recursion through $ref",
	  "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"value\":{\"type\":"
	  "\"integer\"},\"children\":{\"type\":\"array\",\"maxItems\":2,\"items\":{\"$ref\":"
	  "\"#/$defs/node\"}}},\"required\":[\"value\"],\"additionalProperties\":false}},"
	  "\"$ref\":\"#/$defs/node\"}", 40 },
	{ "number bounds",
	  "{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\",\"minimum\":0,"
	  "\"maximum\":120},\"score\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1},"
	  "\"temp\":{\"type\":\"number\",\"minimum\":-40.5,\"maximum\":50.25},\"n\":{\"type\":"
	  "\"integer\",\"exclusiveMaximum\":-7}},\"required\":[\"age\",\"score\",\"temp\",\"n\"],"
	  "\"additionalProperties\":false}", 56 },
	{ "oneOf and patternProperties (issue 58)",
	  "{\"type\":\"object\",\"properties\":{\"shape\":{\"oneOf\":[{\"type\":\"object\","
	  "\"properties\":{\"kind\":{\"const\":\"circle\"},\"r\":{\"type\":\"integer\","
	  "\"minimum\":1,\"maximum\":9}},\"required\":[\"kind\",\"r\"],\"additionalProperties\":"
	  "false},{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"dot\"}},"
	  "\"required\":[\"kind\"],\"additionalProperties\":false}]},\"tags\":{\"type\":"
	  "\"object\",\"patternProperties\":{\"^t[0-9]$\":{\"type\":\"boolean\"}},"
	  "\"additionalProperties\":false,\"maxProperties\":2}},\"required\":[\"shape\","
	  "\"tags\"],\"additionalProperties\":false}", 56 },
	{ "allOf, bounds past 2^53, a uri (issue 58)",
	  "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\","
	  "\"minimum\":100000000000000001,\"maximum\":100000000000000009}},\"required\":"
	  "[\"id\"]},{\"properties\":{\"site\":{\"type\":\"string\",\"format\":\"uri\","
	  "\"maxLength\":24}},\"required\":[\"site\"]}]}", 64 },
};
#define N_SCHEMAS (sizeof(schemas) / sizeof(schemas[0]))

struct json_check {
	struct oracle *o;
	const char *kind, *schema;
};

static void add_json(void *ctx, const struct st_answer *a)
{
	struct json_check *j = ctx;
	oracle_add(j->o, j->kind, j->schema, a->text, a->len);
}

START_TEST(schema_outputs_validate)
{
	struct bn_client *c = st_connect(&daemon_, SLOTS);
	struct oracle o = { 0 };
	uint32_t all = 0, cut = 0;
	for (size_t i = 0; i < N_SCHEMAS; i++) {
		struct bn_grammar_handle *g = st_load(c, BN_GRAMMAR_KIND_JSON_SCHEMA, 0,
						      schemas[i].schema);
		struct json_check j = { &o, "schema", schemas[i].schema };
		struct tally t;
		run_all(c, g, N_SAMPLES, schemas[i].max_tokens, add_json, &j, &t);
		printf("schema \"%s\": %u outputs, %u validated, %u cut by max_tokens\n",
		       schemas[i].name, t.total, t.ended, t.cut);
		all += t.total;
		cut += t.cut;
		bn_grammar_release(g);
	}
	struct bn_grammar_handle *g = st_load(c, BN_GRAMMAR_KIND_JSON, BN_GRAMMAR_JSON_OBJECT, "");
	struct json_check j = { &o, "json_object", NULL };
	struct tally t;
	run_all(c, g, N_SAMPLES, 32, add_json, &j, &t);
	printf("JSON mode (an object): %u outputs, %u validated, %u cut by max_tokens\n", t.total,
	       t.ended, t.cut);
	all += t.total;
	cut += t.cut;
	bn_grammar_release(g);
	bn_disconnect(c);
	printf("schemas and JSON mode: %u outputs, %u cut by max_tokens\n", all, cut);
	/* Closing in time leaves an output unfinished only where no continuation fits. */
	ck_assert_msg(cut * 100 <= all, "%u of %u outputs were cut by max_tokens", cut, all);
	oracle_run(&o);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Regular expressions, under PCRE2                                                            */
/* ------------------------------------------------------------------------------------------ */

static const char *const regexes[] = {
	"[a-z]+ (cat|dog)s?",
	"\\d{3}-\\d{4}",
	"(yes|no|maybe), [A-Z][a-z]{2,8}\\.",
	"[a-z0-9._]{1,10}@[a-z]{2,8}\\.(com|org)",
	"\\p{L}+( \\p{L}+){0,3}",
	"(0|[1-9][0-9]*)(\\.[0-9]+)?",
};

static void check_pcre(void *ctx, const struct st_answer *a)
{
	pcre2_code *re = ctx;
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
	int rc = pcre2_match(re, (PCRE2_SPTR)a->text, a->len, 0, 0, md, NULL);
	pcre2_match_data_free(md);
	ck_assert_msg(rc >= 0, "PCRE2 does not match the whole output \"%s\" (%d)", a->text, rc);
}

START_TEST(regex_outputs_match)
{
	struct bn_client *c = st_connect(&daemon_, SLOTS);
	for (size_t i = 0; i < sizeof(regexes) / sizeof(regexes[0]); i++) {
		int err;
		PCRE2_SIZE off;
		pcre2_code *re = pcre2_compile((PCRE2_SPTR)regexes[i], PCRE2_ZERO_TERMINATED,
					       PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED,
					       &err, &off, NULL);
		ck_assert_msg(re, "PCRE2 refuses %s", regexes[i]);
		struct bn_grammar_handle *g = st_load(c, BN_GRAMMAR_KIND_REGEX, 0, regexes[i]);
		struct tally t;
		run_all(c, g, N_REGEX_SAMPLES, 32, check_pcre, re, &t);
		printf("regex %s: %u outputs, %u matched, %u cut by max_tokens\n", regexes[i],
		       t.total, t.ended, t.cut);
		ck_assert_uint_eq(t.cut, 0);
		bn_grammar_release(g);
		pcre2_code_free(re);
	}
	bn_disconnect(c);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* GBNF, against a reader of its own                                                           */
/* ------------------------------------------------------------------------------------------ */

static const char arith_gbnf[] =
	"root ::= expr\n"
	"expr ::= term ((\"+\" | \"-\") term)*\n"
	"term ::= factor ((\"*\" | \"/\") factor)*\n"
	"factor ::= [0-9] [0-9]? [0-9]? | \"(\" expr \")\"\n";

/* Recursive descent over the same language, written from the grammar's text. */
struct reader {
	const char *s;
	size_t at;
};

static int read_expr(struct reader *r);

static int read_factor(struct reader *r)
{
	if (r->s[r->at] == '(') {
		r->at++;
		if (!read_expr(r) || r->s[r->at] != ')')
			return 0;
		r->at++;
		return 1;
	}
	size_t n = 0;
	while (n < 3 && r->s[r->at] >= '0' && r->s[r->at] <= '9') {
		r->at++;
		n++;
	}
	return n > 0;
}

static int read_term(struct reader *r)
{
	if (!read_factor(r))
		return 0;
	while (r->s[r->at] == '*' || r->s[r->at] == '/') {
		r->at++;
		if (!read_factor(r))
			return 0;
	}
	return 1;
}

static int read_expr(struct reader *r)
{
	if (!read_term(r))
		return 0;
	while (r->s[r->at] == '+' || r->s[r->at] == '-') {
		r->at++;
		if (!read_term(r))
			return 0;
	}
	return 1;
}

static void check_arith(void *ctx, const struct st_answer *a)
{
	(void)ctx;
	struct reader r = { a->text, 0 };
	ck_assert_msg(read_expr(&r) && r.at == a->len, "not an expression: \"%s\"", a->text);
}

START_TEST(gbnf_outputs_parse)
{
	struct bn_client *c = st_connect(&daemon_, SLOTS);
	struct bn_grammar_handle *g = st_load(c, BN_GRAMMAR_KIND_GBNF, 0, arith_gbnf);
	struct tally t;
	run_all(c, g, N_GBNF_SAMPLES, 40, check_arith, NULL, &t);
	printf("GBNF arithmetic: %u outputs, %u parsed, %u cut by max_tokens\n", t.total, t.ended,
	       t.cut);
	ck_assert_uint_eq(t.cut, 0);
	bn_grammar_release(g);
	bn_disconnect(c);
}
END_TEST

static void start(void)
{
	const char *args[] = { "--max-batch", "64", NULL };
	st_start(&daemon_, args);
}

static void stop(void)
{
	tu_daemon_stop(&daemon_, SIGTERM);
}

int main(void)
{
	if (TU_TSAN) {
		/* An oracle suite: it checks what the outputs say (the plain and AddressSanitizer
		 * passes run it). Its daemon's threads run as in test_structured's batched cases,
		 * which the ThreadSanitizer pass runs; here its grammars' compiles alone took 25
		 * minutes of CI's 2-core machine. */
		puts("SKIP under ThreadSanitizer: an oracle suite (the plain and AddressSanitizer "
		     "passes run it; test_structured runs its daemon's threads)");
		return 77;
	}
	st_setup();
	Suite *s = suite_create("structured_oracle");
	TCase *tc = tcase_create("oracles");
	tcase_add_checked_fixture(tc, start, stop);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, schema_outputs_validate);
	tcase_add_test(tc, regex_outputs_match);
	tcase_add_test(tc, gbnf_outputs_parse);
	suite_add_tcase(s, tc);
	int rc = tu_run_suite(s);
	st_teardown();
	return rc;
}
