/* SPDX-License-Identifier: MIT */
/*
 * test_gateway_schema — what bitnet-gateway sends the daemon for a request's schemas
 * (gateway/structured.c, json_text.c), in process, without a daemon: the user's own text less
 * whitespace between tokens, numbers as written (integers beyond 64 bits, decimals that a
 * double would change, one beyond a double's range), U+0000 in a schema's strings; the same
 * out-of-range numbers and U+0000 elsewhere in the body refused as before; "required"'s schema
 * built from the tools' texts; tools whose parameters do not describe an object refused;
 * response_format compact unless it asks for flexible whitespace. Oracles: the expected texts,
 * written out, and Jansson parsing what is sent (it must be one JSON document).
 */
#define _GNU_SOURCE
#include "../gateway/job.h"
#include "testutil.h"

#include "ckassert.h"
#include <jansson.h>
#include <string.h>

struct parsed {
	int rc;
	struct gw_structured s;
	struct gw_error err;
};

static struct parsed parse(const char *body, int chat)
{
	struct parsed p = { 0 };
	json_t *root = gw_structured_load(body, strlen(body), &p.err);
	p.rc = -1;
	if (root)
		p.rc = gw_structured_parse(&p.s, root, body, strlen(body), chat, "llama3", &p.err);
	json_decref(root);
	return p;
}

/* body parses; its grammar text is want, and is one JSON document (Jansson, with what it can
 * hold: here the texts' numbers are within its range where the check parses them). */
static void sends(const char *body, int chat, const char *want)
{
	struct parsed p = parse(body, chat);
	ck_assert_msg(p.rc == 0, "%s: refused: %s", body, p.err.message);
	ck_assert_msg(p.s.text && p.s.len == strlen(want) && !memcmp(p.s.text, want, p.s.len),
		      "sent %.*s\nwant %s", (int)p.s.len, p.s.text ? p.s.text : "", want);
	gw_structured_free(&p.s);
}

static void refuses(const char *body, int chat, const char *param, const char *says)
{
	struct parsed p = parse(body, chat);
	ck_assert_msg(p.rc < 0 && p.err.status == 400, "%s: not refused", body);
	ck_assert_msg(!strcmp(p.err.param, param), "%s: param %s", body, p.err.param);
	ck_assert_msg(strstr(p.err.message, says), "%s: %s lacks %s", body, p.err.message, says);
	gw_structured_free(&p.s);
}

#define RF(schema)                                                                           \
	"{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"     \
	"{\"name\":\"n\",\"schema\":" schema "}}}"

/* Numbers reach the daemon as written. Before: json_dumps of Jansson's values sent 0.1 as
 * 0.10000000000000001, and a body with an integer beyond 64 bits or 1e400 anywhere was "not
 * valid JSON". */
START_TEST(schema_numbers_are_sent_as_written)
{
	sends(RF("{ \"type\" : \"integer\",\n\t\"minimum\": 100000000000000001, \"maximum\":"
		 " 100000000000000003 }"),
	      0, "{\"type\":\"integer\",\"minimum\":100000000000000001,\"maximum\":100000000000000003}");
	sends(RF("{\"type\":\"number\",\"minimum\":0.1,\"multipleOf\":0.01,\"maximum\":1E2}"), 0,
	      "{\"type\":\"number\",\"minimum\":0.1,\"multipleOf\":0.01,\"maximum\":1E2}");
	sends(RF("{\"type\":\"integer\",\"minimum\":-9223372036854775809,\"maximum\":"
		 "123456789012345678901234567890}"),
	      0, "{\"type\":\"integer\",\"minimum\":-9223372036854775809,\"maximum\":"
		 "123456789012345678901234567890}");
	sends(RF("{\"enum\":[1e400, -1.5e999, 0.30000000000000004441]}"), 0,
	      "{\"enum\":[1e400,-1.5e999,0.30000000000000004441]}");
	/* Strings as written, escapes and all; spaces inside them kept. */
	sends(RF("{\"const\": \"a \\u0000 b\\n\\\"c\\\"\"}"), 0,
	      "{\"const\":\"a \\u0000 b\\n\\\"c\\\"\"}");
	sends(RF("{\"properties\":{\"k\\u0000\":{\"const\":1}}}"), 0,
	      "{\"properties\":{\"k\\u0000\":{\"const\":1}}}");
}
END_TEST

/* Outside the schemas nothing changed: Jansson's refusals stand, and U+0000 is refused. */
START_TEST(the_rest_of_the_body_is_as_before)
{
	refuses("{\"prompt\":\"x\",\"max_tokens\":123456789012345678901234567890}", 0, "",
		"not valid JSON");
	refuses("{\"prompt\":\"x\",\"temperature\":1e400}", 0, "", "not valid JSON");
	refuses("{\"prompt\":\"a\\u0000b\"}", 0, "", "\\u0000");
	refuses("{\"messages\":[{\"role\":\"user\",\"content\":\"\\u0000\"}],\"response_format\":"
		"{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{\"const\":"
		"\"\\u0000\"}}}}", 1, "", "\\u0000");
	refuses("{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
		"{\"name\":\"n\\u0000\",\"schema\":{}}}}", 0, "", "\\u0000");
	/* Escaped backslashes before "u0000" are no NUL. */
	struct parsed p = parse("{\"prompt\":\"a\\\\u0000b\"}", 0);
	ck_assert_msg(p.rc == 0, "%s", p.err.message);
	refuses("{\"prompt\":\"x\",", 0, "", "not valid JSON");
	refuses(RF("{\"a\":1,\"a\":2}"), 0, "", "duplicate");
}
END_TEST

#define TOOL(name, params)                                                                   \
	"{\"type\":\"function\",\"function\":{\"name\":\"" name "\",\"parameters\":" params "}}"
#define CHAT "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

/* A named tool's parameters as written; "required"'s anyOf built from the tools' texts, their
 * definitions hoisted, numbers as written; the tools' prompt shows them as written. */
START_TEST(tool_schemas_are_the_tools_text)
{
	sends("{" CHAT ",\"tools\":[" TOOL("f", "{\"type\": \"object\", \"properties\": {\"a\": "
					      "{\"type\":\"integer\",\"maximum\":18446744073709551616}}}")
	      "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}}",
	      1, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"maximum\":"
		 "18446744073709551616}}}");
	sends("{" CHAT ",\"tools\":[" TOOL("f", "{\"type\":\"object\",\"$defs\":{\"d\":{\"const\":0.1}},"
					      "\"properties\":{\"a\":{\"$ref\":\"#/$defs/d\"}}}")
	      "," TOOL("g", "{\"type\":\"object\",\"definitions\":{\"e\":{\"type\":\"string\"}},"
			    "\"$defs\":{\"d\":{ \"const\" : 0.1 }}}")
	      "," TOOL("h", "{}") "],\"tool_choice\":\"required\"}",
	      1, "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"f\"},"
		 "\"arguments\":{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/d\"}}}},"
		 "\"required\":[\"name\",\"arguments\"]},{\"type\":\"object\",\"properties\":{\"name\":"
		 "{\"const\":\"g\"},\"arguments\":{\"type\":\"object\"}},\"required\":[\"name\","
		 "\"arguments\"]},{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"h\"},"
		 "\"arguments\":{\"type\":\"object\",\"properties\":{}}},\"required\":[\"name\","
		 "\"arguments\"]}],\"$defs\":{\"d\":{\"const\":0.1}},\"definitions\":{\"e\":{\"type\":"
		 "\"string\"}}}");
	refuses("{" CHAT ",\"tools\":[" TOOL("f", "{\"type\":\"object\",\"$defs\":{\"d\":{\"const\":1}}}")
		"," TOOL("g", "{\"type\":\"object\",\"$defs\":{\"d\":{\"const\":2}}}")
		"],\"tool_choice\":\"required\"}",
		1, "tools", "define $defs/d differently");
	struct parsed p = parse("{" CHAT ",\"tools\":[" TOOL("f", "{\"type\":\"object\",\"properties\""
								":{\"n\":{\"const\":1.10}}}")
				"],\"tool_choice\":\"required\"}", 1);
	ck_assert_msg(p.rc == 0, "%s", p.err.message);
	ck_assert_msg(strstr(p.s.prompt, "\n{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
				 "\"properties\":{\"n\":{\"const\":1.10}}}}\n"), "%s", p.s.prompt);
	json_t *sent = json_loadb(p.s.text, p.s.len, 0, NULL);
	ck_assert_msg(json_is_object(sent), "%.*s", (int)p.s.len, p.s.text);
	json_decref(sent);
	gw_structured_free(&p.s);
}
END_TEST

/* A call's arguments are an object: parameters that say otherwise are refused. Before, a tool
 * of {"type":"string"} answered arguments that were a string. */
START_TEST(tool_parameters_must_describe_an_object)
{
	static const char *const bad[][2] = {
		{ "{\"type\":\"string\"}", "another type" },
		{ "{\"type\":[\"object\",\"null\"]}", "another type" },
		{ "{\"properties\":{\"a\":{}}}", "no type" },
		{ "{\"type\":\"object\",\"$ref\":\"#/$defs/x\",\"$defs\":{\"x\":{}}}", "$ref" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char body[512];
		snprintf(body, sizeof(body),
			 "{" CHAT ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
			 "\"parameters\":%s}}],\"tool_choice\":\"required\"}", bad[i][0]);
		refuses(body, 1, "tools", "must describe an object");
		refuses(body, 1, "tools", bad[i][1]);
	}
	sends("{" CHAT ",\"tools\":[" TOOL("f", "{\"type\":[\"object\"]}")
	      "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}}",
	      1, "{\"type\":[\"object\"]}");
	sends("{" CHAT ",\"tools\":[" TOOL("f", "{ }")
	      "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}}",
	      1, "{\"type\":\"object\",\"properties\":{}}");
}
END_TEST

/* response_format: compact unless "whitespace": "flexible"; tool calls always compact. */
START_TEST(compact_unless_asked)
{
	struct parsed p = parse(RF("{\"type\":\"object\"}"), 0);
	ck_assert_int_eq(p.rc, 0);
	ck_assert_uint_eq(p.s.flags, BN_GRAMMAR_JSON_COMPACT);
	gw_structured_free(&p.s);
	p = parse("{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_object\"}}", 0);
	ck_assert_int_eq(p.rc, 0);
	ck_assert_uint_eq(p.s.flags, BN_GRAMMAR_JSON_COMPACT | BN_GRAMMAR_JSON_OBJECT);
	gw_structured_free(&p.s);
	p = parse("{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_object\","
		  "\"whitespace\":\"flexible\"}}", 0);
	ck_assert_int_eq(p.rc, 0);
	ck_assert_uint_eq(p.s.flags, BN_GRAMMAR_JSON_OBJECT);
	gw_structured_free(&p.s);
	p = parse("{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
		  "{\"name\":\"n\",\"schema\":{}},\"whitespace\":\"compact\"}}", 0);
	ck_assert_int_eq(p.rc, 0);
	ck_assert_uint_eq(p.s.flags, BN_GRAMMAR_JSON_COMPACT);
	gw_structured_free(&p.s);
	refuses("{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_object\",\"whitespace\":"
		"\"some\"}}", 0, "response_format", "flexible");
	refuses("{\"prompt\":\"x\",\"response_format\":{\"type\":\"text\",\"whitespace\":"
		"\"flexible\"}}", 0, "response_format", "json_object and json_schema");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("gateway schema text");
	TCase *tc = tcase_create("in process");
	tcase_add_test(tc, schema_numbers_are_sent_as_written);
	tcase_add_test(tc, the_rest_of_the_body_is_as_before);
	tcase_add_test(tc, tool_schemas_are_the_tools_text);
	tcase_add_test(tc, tool_parameters_must_describe_an_object);
	tcase_add_test(tc, compact_unless_asked);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
