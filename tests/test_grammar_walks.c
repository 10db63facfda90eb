/* SPDX-License-Identifier: MIT */
/*
 * The grammar engine (daemon/grammar/) over the real LLaMA-3 vocabulary, against independent
 * oracles. Seeded random walks through the allowed-token masks (what a model with random
 * weights would write, closed in time by the engine) produce outputs that must be:
 *   - JSON mode: json.loads (an object for the object form)      — Python's json
 *   - JSON Schema: valid under python3-jsonschema, with floats and with exact decimals, and
 *     the formats under checks written from their RFCs         — tests/grammar_oracle.py
 *   - regular expressions: a whole match                          — PCRE2
 *   - GBNF: arithmetic expressions, checked by a recursive-descent reader written here; the
 *     JSON grammar llama.cpp ships, checked by json.loads
 * and the SentencePiece side: stories260K's vocabulary (U+2581, <0xNN> byte tokens).
 * Without $BITNET_TEST_MODELS the suite says SKIP and exits 77.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "grammar_testutil.h"

#include "bitnet_client.h"

#include <pcre2.h>

static struct tvocab llama3;

#define WALK_TOKENS 160

/* Walks a case runs: under the sanitizers and the emulator (testutil.h: tu_reduced), which
 * look for memory errors and the other CPU's behaviour on each path rather than for rarer
 * outputs, a quarter (the walks took 104 s of check-arm64's 541 and 88 s under ASan) */
static int walks(int n)
{
	return tu_reduced() ? (n + 3) / 4 : n;
}

/* ------------------------------------------------------------------------------------------ */
/* JSON mode and JSON Schema                                                                  */
/* ------------------------------------------------------------------------------------------ */

static void walks_to_oracle(struct oracle *o, struct bn_grammar_bound *b, const char *kind,
			    const char *schema, int n, uint64_t seed)
{
	tu_rng_seed(seed);
	for (int i = 0; i < n; i++) {
		struct walk w;
		random_walk(&llama3, b, WALK_TOKENS, &w);
		ck_assert_msg(w.ended, "a walk did not end within %u tokens: %s", WALK_TOKENS, w.out);
		oracle_add(o, kind, schema, w.out, w.len);
		free(w.out);
	}
}

START_TEST(json_mode_outputs_parse)
{
	struct oracle o = { 0 };
	struct bn_grammar_bound *any = bind_text(&llama3, BN_GRAMMAR_JSON, "", BN_GRAMMAR_TOP_ANY);
	struct bn_grammar_bound *obj = bind_text(&llama3, BN_GRAMMAR_JSON, "",
						 BN_GRAMMAR_TOP_OBJECT);
	walks_to_oracle(&o, any, "json", NULL, walks(40), 1);
	walks_to_oracle(&o, obj, "json_object", NULL, walks(40), 2);
	bn_grammar_bound_unref(any);
	bn_grammar_bound_unref(obj);
	oracle_run(&o);
}
END_TEST

static const char *const schemas[] = {
	/* nested objects */
	"{\"type\":\"object\",\"properties\":{\"user\":{\"type\":\"object\",\"properties\":"
	"{\"name\":{\"type\":\"string\"},\"id\":{\"type\":\"integer\"}},\"required\":[\"name\","
	"\"id\"],\"additionalProperties\":false},\"active\":{\"type\":\"boolean\"}},"
	"\"required\":[\"user\"],\"additionalProperties\":false}",
	/* arrays of objects, item counts */
	"{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":"
	"\"number\"},\"y\":{\"type\":\"number\"}},\"required\":[\"x\",\"y\"]},\"minItems\":1,"
	"\"maxItems\":4}",
	/* enums and consts */
	"{\"type\":\"object\",\"properties\":{\"color\":{\"enum\":[\"red\",\"green\",\"blue\","
	"null,3,{\"a\":[1,\"é\"]}]},\"kind\":{\"const\":\"fixed\"},\"level\":{\"type\":\"string\","
	"\"enum\":[\"low\",\"high\",7]}},\"required\":[\"color\",\"kind\",\"level\"]}",
	/* recursion through $defs */
	"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"value\":{\"type\":"
	"\"integer\"},\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},"
	"\"maxItems\":3}},\"required\":[\"value\"],\"additionalProperties\":false}},"
	"\"$ref\":\"#/$defs/node\"}",
	/* recursion through the root, anyOf with null */
	"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
	"\"next\":{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}},\"required\":[\"name\","
	"\"next\"]}",
	/* number and integer bounds, inclusive and exclusive, across zero */
	"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-20,"
	"\"maximum\":1234},\"b\":{\"type\":\"number\",\"minimum\":0.5,\"exclusiveMaximum\":10.25},"
	"\"c\":{\"type\":\"number\",\"exclusiveMinimum\":-3.75,\"maximum\":-0.001},\"d\":{\"type\":"
	"\"integer\",\"exclusiveMinimum\":7,\"exclusiveMaximum\":100000},\"e\":{\"type\":"
	"\"number\",\"minimum\":-1e3},\"f\":{\"type\":\"number\",\"maximum\":0.1},\"g\":{\"type\":"
	"\"number\",\"exclusiveMinimum\":0.1,\"exclusiveMaximum\":0.3},\"h\":{\"type\":"
	"\"integer\",\"minimum\":2.5,\"maximum\":1e20}},\"required\":[\"a\",\"b\",\"c\",\"d\","
	"\"e\",\"f\",\"g\",\"h\"]}",
	/* strings: lengths, patterns, formats */
	"{\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\",\"pattern\":"
	"\"^[A-Z]{3}-[0-9]{2,4}$\"},\"tag\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":5},"
	"\"free\":{\"type\":\"string\",\"pattern\":\"ab+c|\\\\d\\\"\"},\"when\":{\"type\":\"string\","
	"\"format\":\"date-time\"},\"day\":{\"type\":\"string\",\"format\":\"date\"},\"t\":{\"type\":"
	"\"string\",\"format\":\"time\"},\"dur\":{\"type\":\"string\",\"format\":\"duration\"}},"
	"\"required\":[\"code\",\"tag\",\"free\",\"when\",\"day\",\"t\",\"dur\"]}",
	"{\"type\":\"object\",\"properties\":{\"mail\":{\"type\":\"string\",\"format\":\"email\"},"
	"\"host\":{\"type\":\"string\",\"format\":\"hostname\"},\"ip4\":{\"type\":\"string\","
	"\"format\":\"ipv4\"},\"ip6\":{\"type\":\"string\",\"format\":\"ipv6\"},\"id\":{\"type\":"
	"\"string\",\"format\":\"uuid\"},\"u\":{\"type\":\"string\",\"pattern\":\"^[A-Z]\\\\W\\\\s\"}},"
	"\"required\":[\"mail\",\"host\",\"ip4\",\"ip6\",\"id\",\"u\"]}",
	/* type arrays, anyOf, null and booleans */
	"{\"type\":\"object\",\"properties\":{\"v\":{\"type\":[\"string\",\"null\"],\"maxLength\":3},"
	"\"w\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"array\",\"items\":{\"type\":"
	"\"boolean\"},\"maxItems\":2}]},\"x\":{\"type\":\"null\"},\"y\":{\"type\":\"boolean\"}},"
	"\"required\":[\"v\",\"w\",\"x\",\"y\"]}",
	/* optional properties only, additional ones of a schema */
	"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
	"\"string\"}},\"additionalProperties\":{\"type\":\"integer\"}}",
	/* tuples */
	"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\",\"maxLength\":4},{\"type\":"
	"\"integer\"}],\"items\":false,\"minItems\":1}",
	/* issue 58: patternProperties beside properties and additionalProperties, propertyNames */
	"{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},\"patternProperties\":"
	"{\"^x-[a-z]+$\":{\"type\":\"string\",\"maxLength\":4},\"^n[0-9]$\":{\"type\":\"number\"}},"
	"\"additionalProperties\":{\"type\":\"boolean\"},\"propertyNames\":{\"maxLength\":6},"
	"\"required\":[\"id\"]}",
	/* oneOf told apart by const, type and item counts; literals valid in two branches */
	"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"circle\"},\"r\":"
	"{\"type\":\"number\",\"minimum\":0}},\"required\":[\"kind\",\"r\"]},{\"type\":\"object\","
	"\"properties\":{\"kind\":{\"const\":\"square\"},\"side\":{\"type\":\"integer\"}},"
	"\"required\":[\"kind\",\"side\"]},{\"type\":\"string\",\"maxLength\":3},{\"enum\":[\"ab\","
	"\"wxyz\",7]},{\"type\":\"array\",\"maxItems\":2,\"items\":{\"type\":\"integer\"}}]}",
	/* oneOf of objects told apart only by narrowing: a discriminator made required, a key
	 * the other requires left out */
	"{\"type\":\"object\",\"properties\":{\"v\":{\"oneOf\":[{\"properties\":{\"t\":{\"enum\":"
	"[\"a\"]},\"n\":{\"type\":\"integer\"}}},{\"properties\":{\"t\":{\"enum\":[\"b\",\"c\"]}}}]},"
	"\"w\":{\"oneOf\":[{\"type\":\"object\",\"required\":[\"a\"]},{\"type\":\"object\","
	"\"required\":[\"b\"]}]}},\"required\":[\"v\",\"w\"]}",
	/* oneOf where only strings overlap, each branch without the other's strings: a pattern
	 * and any string, lower and upper case, a format and a pattern, typeless branches */
	"{\"type\":\"object\",\"properties\":{\"id\":{\"oneOf\":[{\"type\":\"string\","
	"\"pattern\":\"^[A-Fa-f0-9]{6}$\"},{\"type\":\"string\",\"maxLength\":8}]},\"u\":"
	"{\"oneOf\":[{\"pattern\":\"^[0-9a-f]{3}$\"},{\"pattern\":\"^[0-9A-F]{3}$\"}]},\"h\":"
	"{\"oneOf\":[{\"type\":\"string\",\"format\":\"uri\",\"maxLength\":20},{\"type\":"
	"\"string\",\"pattern\":\"^\\\\./.{1,6}$\"}]},\"r\":{\"oneOf\":[{\"type\":\"string\","
	"\"pattern\":\"APP\",\"maxLength\":6},{\"type\":\"string\",\"pattern\":\"SIG\","
	"\"maxLength\":6}]}},\"required\":[\"id\",\"u\",\"h\",\"r\"]}",
	/* propertyNames of oneOf (an enum and a pattern both take "ab") and anyOf; format regex */
	"{\"type\":\"object\",\"properties\":{\"m\":{\"type\":\"object\",\"propertyNames\":"
	"{\"oneOf\":[{\"enum\":[\"ab\",\"x1\",\"y[2]\"]},{\"pattern\":\"^[a-z]{1,3}$\"}]},"
	"\"additionalProperties\":{\"type\":\"integer\"},\"maxProperties\":3},\"n\":{\"type\":"
	"\"object\",\"propertyNames\":{\"anyOf\":[{\"maxLength\":1},{\"pattern\":\"^x-\","
	"\"maxLength\":5}]},\"additionalProperties\":{\"type\":\"null\"},\"maxProperties\":2},"
	"\"re\":{\"type\":\"string\",\"format\":\"regex\",\"maxLength\":16}},\"required\":"
	"[\"m\",\"n\",\"re\"]}",
	/* allOf merged, $ref beside keywords (2020-12 applies them), anyOf beside keywords */
	"{\"$defs\":{\"base\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\","
	"\"minimum\":1,\"maximum\":1000}},\"required\":[\"id\"]},\"short\":{\"type\":\"string\","
	"\"maxLength\":6}},\"allOf\":[{\"$ref\":\"#/$defs/base\"},{\"properties\":{\"name\":"
	"{\"$ref\":\"#/$defs/short\",\"minLength\":2},\"v\":{\"anyOf\":[{\"type\":\"integer\"},"
	"{\"type\":\"string\"}],\"minimum\":5,\"maxLength\":2}},\"required\":[\"name\",\"v\"]}]}",
	/* draft 7: $ref's siblings ignored; draft 4: its own keywords only, boolean exclusives */
	"{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"definitions\":{\"s\":{\"type\":"
	"\"string\",\"maxLength\":3}},\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":"
	"\"#/definitions/s\",\"minLength\":100}},\"required\":[\"a\"]}",
	"{\"$schema\":\"http://json-schema.org/draft-04/schema#\",\"id\":\"http://example.com/s.json\","
	"\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\",\"minimum\":0,"
	"\"exclusiveMinimum\":true,\"maximum\":5,\"_format\":\"x\",\"readonly\":true},\"t\":{\"type\":"
	"\"string\",\"examples\":[\"x\"],\"links\":[],\"const\":\"draft 4 has no const\","
	"\"maxLength\":3}},\"required\":[\"n\",\"t\"],\"additionalProperties\":false}",
	/* counts and dependencies */
	"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\","
	"\"maxLength\":3},\"c\":{\"type\":\"boolean\"}},\"minProperties\":2,\"maxProperties\":2,"
	"\"dependentRequired\":{\"a\":[\"c\"]},\"additionalProperties\":false}",
	"{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"type\":\"object\",\"properties\":"
	"{\"card\":{\"type\":\"string\",\"maxLength\":4},\"billing\":{\"type\":\"string\","
	"\"maxLength\":4}},\"dependencies\":{\"card\":[\"billing\"],\"billing\":{\"properties\":"
	"{\"zip\":{\"type\":\"integer\"}},\"required\":[\"zip\"]}}}",
	/* arrays: uniqueItems over finite items, contains with minContains */
	"{\"type\":\"object\",\"properties\":{\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\","
	"\"b\",\"c\",1,1.0,true]},\"uniqueItems\":true,\"minItems\":1},\"nums\":{\"type\":\"array\","
	"\"items\":{\"type\":\"integer\"},\"contains\":{\"minimum\":10},\"minContains\":2,"
	"\"maxItems\":4},\"flags\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},"
	"\"uniqueItems\":true}},\"required\":[\"tags\",\"nums\",\"flags\"]}",
	/* strings: pattern with lengths, uri formats, json-pointer, not a pattern, an enum
	 * filtered by its pattern (\u0000 in it), anchors inside groups */
	"{\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\",\"pattern\":\"^[a-z]+$\","
	"\"minLength\":2,\"maxLength\":5},\"site\":{\"type\":\"string\",\"format\":\"uri\"},\"ref\":"
	"{\"type\":\"string\",\"format\":\"uri-reference\"},\"ptr\":{\"type\":\"string\",\"format\":"
	"\"json-pointer\"},\"free\":{\"type\":\"string\",\"not\":{\"pattern\":\"^a\"},\"maxLength\":4},"
	"\"pick\":{\"type\":\"string\",\"enum\":[\"ab\",\"a\\u0000b\",\"zzz\"],\"pattern\":\"b$\"},"
	"\"wrapped\":{\"type\":\"string\",\"pattern\":\"(^x[0-9]+$)|(^y$)\"}},\"required\":[\"code\","
	"\"site\",\"ref\",\"ptr\",\"free\",\"pick\",\"wrapped\"]}",
	/* numbers: bounds past 2^53 and past doubles, exactly; multipleOf; int32; not an enum */
	"{\"type\":\"object\",\"properties\":{\"big\":{\"type\":\"integer\",\"minimum\":"
	"100000000000000001,\"maximum\":100000000000000003},\"low\":{\"type\":\"integer\",\"minimum\":"
	"-9223372036854775808,\"maximum\":-9223372036854775800},\"huge\":{\"type\":\"number\","
	"\"minimum\":123456789012345678901234567890,\"maximum\":123456789012345678901234567899},"
	"\"tiny\":{\"type\":\"number\",\"exclusiveMinimum\":0.1000000000000000055511151231257828,"
	"\"maximum\":0.2},\"m16\":{\"type\":\"integer\",\"multipleOf\":16,\"minimum\":-100,"
	"\"maximum\":100},\"half\":{\"type\":\"number\",\"multipleOf\":0.25,\"minimum\":-2,"
	"\"maximum\":3},\"i32\":{\"type\":\"integer\",\"format\":\"int32\"},\"neq\":{\"type\":"
	"\"integer\",\"not\":{\"enum\":[0,1]},\"minimum\":0,\"maximum\":3}},\"required\":[\"big\","
	"\"low\",\"huge\",\"tiny\",\"m16\",\"half\",\"i32\",\"neq\"]}",
	/* if/then/else, not required */
	"{\"type\":\"object\",\"properties\":{\"kind\":{\"enum\":[\"a\",\"b\"]},\"x\":{\"type\":"
	"\"integer\"},\"y\":{\"type\":\"string\",\"maxLength\":3}},\"required\":[\"kind\"],"
	"\"additionalProperties\":false,\"if\":{\"properties\":{\"kind\":{\"const\":\"a\"}}},"
	"\"then\":{\"required\":[\"x\"]},\"else\":{\"required\":[\"y\"],\"not\":{\"required\":"
	"[\"x\"]}}}",
	/* a length past the old limit of 10,000 (cut into blocks) */
	"{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":100000},\"maxItems\":3}",
	/* anything, annotations, allOf of one, a pydantic-like optional field */
	"{\"title\":\"T\",\"description\":\"d\",\"$defs\":{\"Item\":{\"type\":\"object\","
	"\"properties\":{\"q\":{\"type\":\"integer\",\"default\":1}},\"required\":[\"q\"]}},"
	"\"type\":\"object\",\"properties\":{\"item\":{\"allOf\":[{\"$ref\":\"#/$defs/Item\"}]},"
	"\"extra\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}],\"default\":null},"
	"\"any\":{},\"obj\":{\"type\":\"object\"}},\"required\":[\"item\",\"extra\",\"any\","
	"\"obj\"],\"additionalProperties\":false}",
};

START_TEST(schema_outputs_validate)
{
	struct oracle o = { 0 };
	const char *schema = schemas[_i];
	struct bn_grammar_bound *b = bind_text(&llama3, BN_GRAMMAR_JSON_SCHEMA, schema, 0);
	walks_to_oracle(&o, b, "schema", schema, walks(24), 100 + (uint64_t)_i);
	bn_grammar_bound_unref(b);
	oracle_run(&o);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Regular expressions: PCRE2 is the oracle                                                   */
/* ------------------------------------------------------------------------------------------ */

static const char *const regexes[] = {
	"[a-z]+@[a-z]+\\.(com|org)",
	"\\d{3}-\\d{4}",
	"(ab|cd)*e?",
	"[^\\n]{0,40}\\n",
	"\\p{L}+( \\p{L}+){0,3}",
	"(0|[1-9][0-9]*)(\\.[0-9]+)?",
	"\\w+\\s\\W{1,3}",
	"[[:alpha:]][[:digit:]]{2}",
	"(?:foo|bar|baz){2,4}",
	".{5}",
	"[\\x{4e00}-\\x{9fff}]{1,5}",
	"a|b|",
	"^\\s*(yes|no)\\s*$",
	"(?<year>[0-9]{4})-(?<m>0[1-9]|1[0-2])",
	"[^a-z]*",
	"\\D\\S\\H",
	"x{0,3}?y+?",
};

START_TEST(regex_outputs_match_pcre2)
{
	const char *re = regexes[_i];
	int err;
	PCRE2_SIZE off;
	pcre2_code *code = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED,
					 PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &err, &off,
					 NULL);
	ck_assert_msg(code, "PCRE2 does not compile %s", re);
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
	struct bn_grammar_bound *b = bind_text(&llama3, BN_GRAMMAR_REGEX, re, 0);
	tu_rng_seed(200 + (uint64_t)_i);
	for (int k = 0; k < walks(24); k++) {
		struct walk w;
		random_walk(&llama3, b, WALK_TOKENS, &w);
		ck_assert_msg(w.ended, "%s: a walk did not end: %s", re, w.out);
		int rc = pcre2_match(code, (PCRE2_SPTR)w.out, w.len, 0, 0, md, NULL);
		ck_assert_msg(rc > 0, "%s: PCRE2 does not match \"%s\" (%d)", re, w.out, rc);
		free(w.out);
	}
	bn_grammar_bound_unref(b);
	pcre2_match_data_free(md);
	pcre2_code_free(code);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* GBNF                                                                                       */
/* ------------------------------------------------------------------------------------------ */

static const char arith_gbnf[] =
	"# arithmetic over integers, with spaces\n"
	"root   ::= expr\n"
	"expr   ::= term (ws [-+] ws term)*\n"
	"term   ::= factor (ws [*/] ws factor)*\n"
	"factor ::= number | \"(\" ws expr ws \")\" | \"-\" factor\n"
	"number ::= [0-9]+\n"
	"ws     ::= \" \"?\n";

/* An independent reader of the arithmetic language (not the grammar engine). */
struct reader {
	const char *s;
	size_t at;
	int depth;
};

static int read_expr(struct reader *r);

static void read_ws(struct reader *r)
{
	if (r->s[r->at] == ' ')
		r->at++;
}

static int read_factor(struct reader *r)
{
	if (++r->depth > 1000)
		return 0;
	if (r->s[r->at] >= '0' && r->s[r->at] <= '9') {
		while (r->s[r->at] >= '0' && r->s[r->at] <= '9')
			r->at++;
		return 1;
	}
	if (r->s[r->at] == '-') {
		r->at++;
		return read_factor(r);
	}
	if (r->s[r->at] != '(')
		return 0;
	r->at++;
	read_ws(r);
	if (!read_expr(r))
		return 0;
	read_ws(r);
	return r->s[r->at++] == ')';
}

/* One operand, then operators from ops between operands, each side with an optional space. */
static int read_list(struct reader *r, const char *ops, int (*operand)(struct reader *))
{
	if (!operand(r))
		return 0;
	for (;;) {
		size_t back = r->at;
		read_ws(r);
		if (!r->s[r->at] || !strchr(ops, r->s[r->at])) {
			r->at = back;
			return 1;
		}
		r->at++;
		read_ws(r);
		if (!operand(r))
			return 0;
	}
}

static int read_term(struct reader *r)
{
	return read_list(r, "*/", read_factor);
}

static int read_expr(struct reader *r)
{
	return read_list(r, "+-", read_term);
}

START_TEST(gbnf_arithmetic_outputs_read_back)
{
	struct bn_grammar_bound *b = bind_text(&llama3, BN_GRAMMAR_GBNF, arith_gbnf, 0);
	tu_rng_seed(300);
	for (int k = 0; k < walks(40); k++) {
		struct walk w;
		random_walk(&llama3, b, WALK_TOKENS, &w);
		ck_assert_msg(w.ended, "a walk did not end: %s", w.out);
		struct reader r = { w.out, 0, 0 };
		ck_assert_msg(read_expr(&r) && r.at == w.len, "not arithmetic: \"%s\"", w.out);
		free(w.out);
	}
	bn_grammar_bound_unref(b);
}
END_TEST

/* llama.cpp's grammars/json.gbnf, as its users write it. */
static const char json_gbnf[] =
	"root   ::= object\n"
	"value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
	"\n"
	"object ::=\n"
	"  \"{\" ws (\n"
	"            string \":\" ws value\n"
	"    (\",\" ws string \":\" ws value)*\n"
	"  )? \"}\" ws\n"
	"\n"
	"array  ::=\n"
	"  \"[\" ws (\n"
	"            value\n"
	"    (\",\" ws value)*\n"
	"  )? \"]\" ws\n"
	"\n"
	"string ::=\n"
	"  \"\\\"\" (\n"
	"    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
	"    \"\\\\\" ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
	"  )* \"\\\"\" ws\n"
	"\n"
	"number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
	"\n"
	"# Optional space: by convention, applied in this grammar after literal chars when allowed\n"
	"ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

START_TEST(gbnf_json_outputs_parse)
{
	struct oracle o = { 0 };
	struct bn_grammar_bound *b = bind_text(&llama3, BN_GRAMMAR_GBNF, json_gbnf, 0);
	walks_to_oracle(&o, b, "json_object", NULL, walks(30), 400);
	bn_grammar_bound_unref(b);
	oracle_run(&o);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* SentencePiece: stories260K's vocabulary                                                    */
/* ------------------------------------------------------------------------------------------ */

/* What a bound grammar holds at LLaMA-3's vocabulary once every token set is filled: a
 * 50-property schema's sets took about 11 MB when every large set was a 16 KiB bitset of its
 * own and equal lists were each a copy (issue 58); shared lists and near bitsets stored as
 * deltas keep them to a few (the masks they give are test_grammar's brute-force cases'). The
 * figure is the engine's own count, which is what the daemon's --grammar-memory adds up. */
START_TEST(token_sets_stay_small)
{
	static char text[16384];
	schema50(text, sizeof(text));
	int64_t t0 = tu_now_ns();
	struct bn_grammar_bound *b = bind_text(&llama3, BN_GRAMMAR_JSON_SCHEMA, text, 0);
	printf("schema50: compiled and bound in %.1f ms\n", (tu_now_ns() - t0) / 1e6);
	ck_assert_int_eq(bn_grammar_bound_warm(b, UINT64_MAX / 2), 1);
	struct bn_grammar_bound_info bi;
	bn_grammar_bound_get_info(b, &bi);
	size_t total = bn_grammar_bound_bytes(b);
	printf("schema50: %u states, token sets %zu bytes, %zu bytes in all\n", bi.n_states,
	       bi.set_bytes, total);
	ck_assert_msg(bi.set_bytes < 4u << 20, "token sets hold %zu bytes", bi.set_bytes);
	ck_assert_uint_ge(total, bi.set_bytes);
	bn_grammar_bound_unref(b);
}
END_TEST

START_TEST(sentencepiece_vocabulary)
{
	char path[512];
	if (!models_file("stories260K.gguf", path, sizeof(path)))
		return;
	struct bn_vocab *bv = tu_file_vocab(path);
	uint32_t n = bn_vocab_n_tokens(bv);
	struct tvocab t = { 0 };
	tvocab_alloc(&t, n);
	for (uint32_t id = 0; id < n; id++) {
		size_t len;
		const char *piece = bn_vocab_token_text(bv, id, &len);
		uint8_t buf[256];
		/* The file's control tokens: <unk> <s> </s>; </s> ends generation. */
		if (id < 3) {
			tvocab_set(&t, id, piece, (uint32_t)len, id == 2 ? BN_GRAMMAR_TOKEN_EOG
								 : BN_GRAMMAR_TOKEN_SPECIAL);
			continue;
		}
		int k = bn_grammar_piece_bytes(BN_GRAMMAR_PIECES_SENTENCEPIECE, piece, len, buf,
					       sizeof(buf));
		ck_assert_msg(k > 0, "piece %u", id);
		tvocab_set(&t, id, buf, (uint32_t)k, BN_GRAMMAR_TOKEN_TEXT);
	}
	ck_assert_int_eq(tvocab_make(&t), 0);
	/* <0x0A> is the byte 10, <0x41> 'A' (ids 3 + byte). */
	ck_assert_uint_eq(t.len[3 + 0x0A], 1);
	ck_assert_uint_eq(t.bytes[3 + 0x0A][0], 0x0A);
	ck_assert_uint_eq(t.bytes[3 + 0x41][0], 'A');
	struct oracle o = { 0 };
	struct bn_grammar_bound *b = bind_text(&t, BN_GRAMMAR_JSON, "", BN_GRAMMAR_TOP_OBJECT);
	tu_rng_seed(500);
	for (int k = 0; k < walks(30); k++) {
		struct walk w;
		random_walk(&t, b, WALK_TOKENS, &w);
		ck_assert_msg(w.ended, "a walk did not end: %s", w.out);
		oracle_add(&o, "json_object", NULL, w.out, w.len);
		free(w.out);
	}
	bn_grammar_bound_unref(b);
	tvocab_free(&t);
	bn_vocab_free(bv);
	oracle_run(&o);
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
	Suite *s = suite_create("grammar_walks");
	TCase *tc = tcase_create("oracles");
	tcase_add_unchecked_fixture(tc, load_vocab, NULL);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, json_mode_outputs_parse);
	tcase_add_loop_test(tc, schema_outputs_validate, 0, sizeof(schemas) / sizeof(schemas[0]));
	tcase_add_loop_test(tc, regex_outputs_match_pcre2, 0, sizeof(regexes) / sizeof(regexes[0]));
	tcase_add_test(tc, gbnf_arithmetic_outputs_read_back);
	tcase_add_test(tc, gbnf_json_outputs_parse);
	tcase_add_test(tc, sentencepiece_vocabulary);
	tcase_add_test(tc, token_sets_stay_small);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
