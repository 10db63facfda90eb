/* SPDX-License-Identifier: MIT */
/*
 * structured.c — response_format, tools and tool_choice: the grammar a job's outputs are
 * constrained by (compiled by the daemon, shm/PROTOCOL.md §6.13), the tools' text the prompt
 * carries, and a tool call read back out of an output.
 *
 * A tool call is generated as compact JSON. For a named function (tool_choice {"type":
 * "function", ...}) the output is the function's arguments, an object of its parameters'
 * schema. For tool_choice "required" it is {"name":NAME,"arguments":ARGS}, the schema an anyOf
 * of one such object per tool (name a const, arguments the tool's parameters); the tools'
 * $defs (and definitions) move to the top of it, where their "#/$defs/..." references find
 * them. Compact, the name and the arguments are found by position, and ARGS is the model's
 * own text.
 *
 * The schemas are the user's text (json_text.h): the daemon reads the numbers as written, where
 * a re-dump through Jansson's values would change integers beyond 2^53 and decimals, and refuse
 * integers beyond 64 bits. Only whitespace between tokens is left out.
 *
 * response_format's outputs are compact JSON unless the request's response_format says
 * "whitespace": "flexible" (bitnet-gateway(1)): a model that may put whitespace between tokens
 * can spend its budget there (a random-weight model's outputs were mostly tabs and newlines),
 * and OpenAI's strict outputs are compact.
 */
#define _GNU_SOURCE
#include "job.h"
#include "json_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOOL_PREFIX "{\"name\":\""
#define TOOL_INFIX "\",\"arguments\":"

/* Keys of an object that may be there; any other is refused, named. */
static int only_keys(json_t *o, const char *where, const char *param, const char *const *keys,
		     struct gw_error *err)
{
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v)
	{
		size_t i = 0;
		while (keys[i] && strcmp(keys[i], k))
			i++;
		if (!keys[i]) {
			gw_error_set(err, 400, param, "%s.%.64s is not supported", where, k);
			return -1;
		}
	}
	return 0;
}

/* What the schema texts are made from: the body's text, and where each value is. */
struct body_text {
	const char *text;
	struct gw_span root;
};

static struct gw_span at_path(const struct body_text *b, const char *const *keys, size_t n)
{
	struct gw_span v = b->root;
	for (size_t i = 0; i < n && v.len; i++)
		v = gw_json_member(b->text, v, keys[i]);
	return v;
}

static struct gw_span tool_span(const struct body_text *b, size_t i, const char *what)
{
	struct gw_span t = gw_json_element(b->text, gw_json_member(b->text, b->root, "tools"), i);
	struct gw_span fn = gw_json_member(b->text, t, "function");
	return what ? gw_json_member(b->text, fn, what) : fn;
}

/* s->text from a stream the caller filled (f was opened on it with open_memstream). */
static int close_text(struct gw_structured *s, FILE *f, size_t *size, struct gw_error *err)
{
	if (fclose(f) != 0 || !s->text) {
		free(s->text);
		s->text = NULL;
		gw_error_set(err, 500, NULL, "out of memory");
		return -1;
	}
	s->len = *size;
	return 0;
}

/* A stream that writes s->text (its size into *size at close_text), or NULL with err set. */
static FILE *open_text(struct gw_structured *s, size_t *size, struct gw_error *err)
{
	FILE *f = open_memstream(&s->text, size);
	if (!f)
		gw_error_set(err, 500, NULL, "out of memory");
	return f;
}

static int span_text(struct gw_structured *s, const char *text, struct gw_span v,
		     struct gw_error *err)
{
	size_t size = 0;
	FILE *f = open_text(s, &size, err);
	if (!f)
		return -1;
	gw_json_write_compact(f, text, v);
	return close_text(s, f, &size, err);
}

/* ---- response_format --------------------------------------------------------------------- */

/* response_format's "whitespace" (an extension): "compact" (the default) or "flexible". */
static int parse_whitespace(struct gw_structured *s, json_t *rf, struct gw_error *err)
{
	json_t *ws = json_object_get(rf, "whitespace");
	const char *mode = json_string_value(ws);
	if (!ws || (mode && !strcmp(mode, "compact"))) {
		s->flags |= BN_GRAMMAR_JSON_COMPACT;
		return 0;
	}
	if (mode && !strcmp(mode, "flexible"))
		return 0; /* the daemon's default: runs of up to 20 between tokens */
	gw_error_set(err, 400, "response_format",
		     "response_format.whitespace must be \"compact\" (the default) or \"flexible\"");
	return -1;
}

static int parse_response_format(struct gw_structured *s, json_t *rf, const struct body_text *b,
				 struct gw_error *err)
{
	static const char *const rf_keys[] = { "type", "json_schema", "whitespace", NULL };
	static const char *const js_keys[] = { "name", "description", "schema", "strict", NULL };
	static const char *const path[] = { "response_format", "json_schema", "schema" };
	const char *type = json_string_value(json_object_get(rf, "type"));
	if (!json_is_object(rf) || !type) {
		gw_error_set(err, 400, "response_format",
			     "response_format must be an object with a type: text, json_object or json_schema");
		return -1;
	}
	if (only_keys(rf, "response_format", "response_format", rf_keys, err) < 0)
		return -1;
	if (!strcmp(type, "text")) {
		if (!json_object_get(rf, "whitespace"))
			return 0;
		gw_error_set(err, 400, "response_format",
			     "response_format.whitespace is for json_object and json_schema");
		return -1;
	}
	s->param = "response_format";
	if (parse_whitespace(s, rf, err) < 0)
		return -1;
	if (!strcmp(type, "json_object")) {
		s->kind = BN_GRAMMAR_KIND_JSON;
		s->flags |= BN_GRAMMAR_JSON_OBJECT;
		return 0;
	}
	if (strcmp(type, "json_schema")) {
		gw_error_set(err, 400, "response_format",
			     "response_format type \"%.64s\" is not supported (text, json_object, json_schema)",
			     type);
		return -1;
	}
	json_t *js = json_object_get(rf, "json_schema"), *schema = json_object_get(js, "schema");
	json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict");
	if (!json_is_object(js) || only_keys(js, "response_format.json_schema", "response_format",
					     js_keys, err) < 0 ||
	    !json_is_object(schema) || (name && !json_is_string(name)) ||
	    (strict && !json_is_boolean(strict) && !json_is_null(strict))) {
		if (!err->status)
			gw_error_set(err, 400, "response_format",
				     "response_format.json_schema needs a schema (an object), a name (a string) and strict (true or false)");
		return -1;
	}
	/* strict: false is taken as true: the daemon enforces the schema either way */
	s->kind = BN_GRAMMAR_KIND_JSON_SCHEMA;
	return span_text(s, b->text, at_path(b, path, 3), err);
}

/* ---- tools ------------------------------------------------------------------------------- */

/* OpenAI's function names: 1-64 of [A-Za-z0-9_-] (so a name is its own JSON text). */
static int good_name(const char *n)
{
	size_t len = n ? strlen(n) : 0;
	if (len == 0 || len > 64)
		return 0;
	return strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == len;
}

/* Why parameters do not describe an object, or NULL when they do: "type": "object" (or
 * ["object"]) at the top, or {} (no parameters, as when left out). A $ref at the top is
 * refused: before draft 2019-09 the type beside it is ignored, and what it names may be
 * anything. */
static const char *params_not_object(json_t *params)
{
	json_t *type = json_object_get(params, "type");
	if (json_object_size(params) == 0)
		return NULL;
	if (json_object_get(params, "$ref"))
		return "a $ref at its top";
	if (json_is_array(type) && json_array_size(type) == 1)
		type = json_array_get(type, 0);
	if (!type)
		return "no type";
	if (!json_is_string(type) || strcmp(json_string_value(type), "object"))
		return "another type";
	return NULL;
}

/* tools: each {"type": "function", "function": {name, description, parameters, strict}}. */
static int check_tools(json_t *tools, struct gw_error *err)
{
	static const char *const tool_keys[] = { "type", "function", NULL };
	static const char *const fn_keys[] = { "name", "description", "parameters", "strict", NULL };
	if (!json_is_array(tools) || json_array_size(tools) > GW_MAX_TOOLS) {
		gw_error_set(err, 400, "tools", "tools must be an array of at most %d tools", GW_MAX_TOOLS);
		return -1;
	}
	size_t i;
	json_t *t;
	json_array_foreach(tools, i, t)
	{
		json_t *fn = json_object_get(t, "function");
		const char *type = json_string_value(json_object_get(t, "type"));
		json_t *params = json_object_get(fn, "parameters");
		json_t *desc = json_object_get(fn, "description");
		if (!type || strcmp(type, "function") || !json_is_object(fn)) {
			gw_error_set(err, 400, "tools", "tools[%zu]: only tools of type \"function\" are supported",
				     i);
			return -1;
		}
		if (only_keys(t, "tools[]", "tools", tool_keys, err) < 0 ||
		    only_keys(fn, "tools[].function", "tools", fn_keys, err) < 0)
			return -1;
		if (!good_name(json_string_value(json_object_get(fn, "name"))) ||
		    (params && !json_is_object(params)) || (desc && !json_is_string(desc))) {
			gw_error_set(err, 400, "tools",
				     "tools[%zu].function needs a name of 1-64 characters of [A-Za-z0-9_-], parameters a JSON Schema object, a description a string",
				     i);
			return -1;
		}
		const char *not_object = params ? params_not_object(params) : NULL;
		if (not_object) {
			gw_error_set(err, 400, "tools",
				     "tools[%zu].function.parameters must describe an object, \"type\": \"object\" at its top (a call's arguments are a JSON object); it has %s",
				     i, not_object);
			return -1;
		}
		for (size_t j = 0; j < i; j++)
			if (json_equal(json_object_get(json_object_get(json_array_get(tools, j), "function"), "name"),
				       json_object_get(fn, "name"))) {
				gw_error_set(err, 400, "tools", "tools[%zu]: two tools are named %s", i,
					     json_string_value(json_object_get(fn, "name")));
				return -1;
			}
	}
	return 0;
}

/* A function without parameters (left out, or {}): OpenAI's empty parameter list. */
#define NO_PARAMS "{\"type\":\"object\",\"properties\":{}}"

/* Tool i's parameters span, len 0 when it has none. */
static struct gw_span params_of(const struct body_text *b, size_t i)
{
	struct gw_span p = tool_span(b, i, "parameters");
	struct gw_span k, v;
	size_t pos = 0;
	return gw_json_next_member(b->text, p, &pos, &k, &v) ? p : (struct gw_span){ 0, 0 };
}

static int is_defs_key(const char *text, struct gw_span key)
{
	return gw_json_key_is(text, key, "$defs") || gw_json_key_is(text, key, "definitions");
}

/* The tools' definitions moved to the top of "required"'s schema: name and value spans per
 * keyword (the same name twice must be the same text). */
struct defs {
	struct gw_span (*kv)[2];
	size_t n, cap;
};

static int defs_add(struct defs *d, const char *text, struct gw_span name, struct gw_span value,
		    const char *keyword, struct gw_error *err)
{
	for (size_t i = 0; i < d->n; i++)
		if (gw_json_same_text(text, d->kv[i][0], name)) {
			if (gw_json_same_text(text, d->kv[i][1], value))
				return 0;
			gw_error_set(err, 400, "tools",
				     "two tools define %s/%.*s differently: with tool_choice \"required\" their definitions share one schema",
				     keyword, (int)(name.len > 66 ? 64 : name.len - 2), text + name.at + 1);
			return -1;
		}
	if (d->n == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 16;
		struct gw_span (*kv)[2] = realloc(d->kv, cap * sizeof(*kv));
		if (!kv) {
			gw_error_set(err, 500, NULL, "out of memory");
			return -1;
		}
		d->kv = kv;
		d->cap = cap;
	}
	d->kv[d->n][0] = name;
	d->kv[d->n][1] = value;
	d->n++;
	return 0;
}

/* Tool i's arguments schema into f, less its definitions, which go into defs[2]. */
static int write_arguments(FILE *f, const struct body_text *b, size_t i, struct defs *defs,
			   struct gw_error *err)
{
	struct gw_span p = params_of(b, i), k, v;
	if (!p.len) {
		fputs(NO_PARAMS, f);
		return 0;
	}
	fputc('{', f);
	int first = 1;
	for (size_t pos = 0; gw_json_next_member(b->text, p, &pos, &k, &v);) {
		if (is_defs_key(b->text, k)) {
			int which = gw_json_key_is(b->text, k, "definitions");
			struct gw_span dk, dv;
			for (size_t dp = 0; gw_json_next_member(b->text, v, &dp, &dk, &dv);)
				if (defs_add(&defs[which], b->text, dk, dv,
					     which ? "definitions" : "$defs", err) < 0)
					return -1;
			continue;
		}
		if (!first)
			fputc(',', f);
		first = 0;
		gw_json_write_compact(f, b->text, k);
		fputc(':', f);
		gw_json_write_compact(f, b->text, v);
	}
	fputc('}', f);
	return 0;
}

static void write_defs(FILE *f, const char *text, const struct defs *d, const char *keyword)
{
	if (!d->n)
		return;
	fprintf(f, ",\"%s\":{", keyword);
	for (size_t i = 0; i < d->n; i++) {
		if (i)
			fputc(',', f);
		gw_json_write_compact(f, text, d->kv[i][0]);
		fputc(':', f);
		gw_json_write_compact(f, text, d->kv[i][1]);
	}
	fputc('}', f);
}

/* The schema of tool_choice "required": one {"name", "arguments"} object per tool, the tools'
 * $defs and definitions at its top, where their "#/$defs/..." references find them. */
static int required_schema(struct gw_structured *s, json_t *tools, const struct body_text *b,
			   struct gw_error *err)
{
	size_t size = 0;
	FILE *f = open_text(s, &size, err);
	if (!f)
		return -1;
	struct defs defs[2] = { { 0 } };
	int rc = 0;
	fputs("{\"anyOf\":[", f);
	for (size_t i = 0; i < json_array_size(tools) && rc == 0; i++) {
		const char *name = json_string_value(
			json_object_get(json_object_get(json_array_get(tools, i), "function"), "name"));
		/* names are [A-Za-z0-9_-] (good_name): their own JSON text */
		fprintf(f, "%s{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"%s\"},"
			"\"arguments\":", i ? "," : "", name);
		rc = write_arguments(f, b, i, defs, err);
		fputs("},\"required\":[\"name\",\"arguments\"]}", f);
	}
	fputc(']', f);
	write_defs(f, b->text, &defs[0], "$defs");
	write_defs(f, b->text, &defs[1], "definitions");
	fputc('}', f);
	free(defs[0].kv);
	free(defs[1].kv);
	if (rc < 0) {
		fclose(f);
		free(s->text);
		s->text = NULL;
		return -1;
	}
	return close_text(s, f, &size, err);
}

/* The index of the tool named name, or -1. */
static long find_tool(json_t *tools, const char *name)
{
	size_t i;
	json_t *t;
	json_array_foreach(tools, i, t)
		if (!strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")),
			    name))
			return (long)i;
	return -1;
}

/* The system text that tells the model the tools (each function object as the user wrote it,
 * compact) and how to answer. */
static int tools_prompt(struct gw_structured *s, json_t *tools, const struct body_text *b)
{
	size_t cap = 0;
	FILE *f = open_memstream(&s->prompt, &cap);
	if (!f)
		return -1;
	fputs("You can call these functions (each with its parameters as a JSON Schema):", f);
	for (size_t i = 0; i < json_array_size(tools); i++) {
		fputc('\n', f);
		gw_json_write_compact(f, b->text, tool_span(b, i, NULL));
	}
	if (s->tools == GW_TOOLS_NAMED)
		fprintf(f, "\nCall %s now: answer with its arguments as one JSON object.", s->tool_name);
	else
		fputs("\nCall one of them now: answer with one JSON object {\"name\": the function's name, \"arguments\": its arguments}.",
		      f);
	return fclose(f) == 0 && s->prompt ? 0 : -1;
}

/* tool_choice: "none", "auto", "required" or {"type": "function", "function": {"name"}}. */
static int parse_tool_choice(struct gw_structured *s, json_t *tc, json_t *tools,
			     const char *template_name, struct gw_error *err)
{
	const char *mode = json_string_value(tc);
	int have = tools && json_array_size(tools) > 0;
	if (json_is_object(tc)) {
		const char *type = json_string_value(json_object_get(tc, "type"));
		const char *name = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
		if (!type || strcmp(type, "function") || !name) {
			gw_error_set(err, 400, "tool_choice",
				     "tool_choice must be \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
			return -1;
		}
		if (!have || find_tool(tools, name) < 0) {
			gw_error_set(err, 400, "tool_choice", "tool_choice names %.64s, which is not one of the tools",
				     name);
			return -1;
		}
		s->tools = GW_TOOLS_NAMED;
		snprintf(s->tool_name, sizeof(s->tool_name), "%s", name);
		return 0;
	}
	if (!tc || json_is_null(tc))
		mode = have ? "auto" : "none";
	if (mode && !strcmp(mode, "none"))
		return 0;
	if (mode && !strcmp(mode, "auto") && !have)
		return 0;
	if (mode && !strcmp(mode, "auto")) {
		gw_error_set(err, 400, "tool_choice",
			     "tool_choice \"auto\" (the default when tools are given) needs a chat template that renders tools, and this model's (%s) does not: pass tool_choice \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}, which the gateway enforces with a grammar",
			     template_name);
		return -1;
	}
	if (!mode || strcmp(mode, "required")) {
		gw_error_set(err, 400, "tool_choice",
			     "tool_choice must be \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
		return -1;
	}
	if (!have) {
		gw_error_set(err, 400, "tool_choice", "tool_choice \"required\" needs tools");
		return -1;
	}
	s->tools = GW_TOOLS_REQUIRED;
	return 0;
}

static int parse_tools(struct gw_structured *s, json_t *root, const struct body_text *b,
		       const char *template_name, struct gw_error *err)
{
	json_t *tools = json_object_get(root, "tools");
	json_t *ptc = json_object_get(root, "parallel_tool_calls");
	if (json_is_null(tools))
		tools = NULL;
	if ((tools && check_tools(tools, err) < 0) ||
	    parse_tool_choice(s, json_object_get(root, "tool_choice"), tools, template_name, err) < 0)
		return -1;
	if (ptc && !json_is_null(ptc) && !json_is_boolean(ptc)) {
		gw_error_set(err, 400, "parallel_tool_calls", "parallel_tool_calls must be true or false");
		return -1;
	}
	if (s->tools == GW_TOOLS_OFF)
		return 0;
	if (s->kind) {
		gw_error_set(err, 400, "response_format",
			     "response_format and a tool call cannot both shape the answer: the answer is the tool call");
		return -1;
	}
	s->param = "tools";
	s->kind = BN_GRAMMAR_KIND_JSON_SCHEMA;
	s->flags = BN_GRAMMAR_JSON_COMPACT;
	int rc;
	if (s->tools == GW_TOOLS_NAMED) {
		struct gw_span p = params_of(b, (size_t)find_tool(tools, s->tool_name));
		if (p.len) {
			rc = span_text(s, b->text, p, err);
		} else {
			s->text = strdup(NO_PARAMS);
			s->len = sizeof(NO_PARAMS) - 1;
			rc = s->text ? 0 : -1;
			if (rc)
				gw_error_set(err, 500, NULL, "out of memory");
		}
	} else {
		rc = required_schema(s, tools, b, err);
	}
	if (rc == 0 && tools_prompt(s, tools, b) < 0) {
		gw_error_set(err, 500, NULL, "out of memory");
		rc = -1;
	}
	return rc;
}

/* ---- the job's side ---------------------------------------------------------------------- */

json_t *gw_structured_load(const char *body, size_t len, struct gw_error *err)
{
	struct gw_span spans[1 + GW_MAX_TOOLS];
	size_t n = gw_structured_spans(body, len, spans, 1 + GW_MAX_TOOLS);
	char *copy = gw_json_masked_copy(body, len, spans, n);
	if (!copy) {
		gw_error_set(err, 500, NULL, "out of memory");
		return NULL;
	}
	json_error_t jerr;
	json_t *root = json_loadb(copy, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
	free(copy);
	if (!root) {
		gw_error_set(err, 400, NULL, "the body is not valid JSON: %s (line %d, column %d)",
			     jerr.text, jerr.line, jerr.column);
		return NULL;
	}
	if (gw_json_nul_outside(body, len, spans, n)) {
		gw_error_set(err, 400, NULL, "a string holds \\u0000 outside a schema: only a schema's strings may");
		json_decref(root);
		return NULL;
	}
	return root;
}


size_t gw_structured_spans(const char *body, size_t len, struct gw_span *out, size_t cap)
{
	static const char *const path[] = { "response_format", "json_schema", "schema" };
	const struct body_text b = { body, gw_json_root(body, len) };
	size_t n = 0;
	if (cap)
		out[n++] = at_path(&b, path, 3);
	for (size_t i = 0; n < cap; i++) {
		struct gw_span fn = tool_span(&b, i, NULL);
		if (!fn.len)
			break;
		out[n++] = gw_json_member(body, fn, "parameters");
	}
	return n;
}

int gw_structured_parse(struct gw_structured *s, json_t *root, const char *body, size_t len,
			int chat, const char *template_name, struct gw_error *err)
{
	memset(s, 0, sizeof(*s));
	const struct body_text b = { body, gw_json_root(body, len) };
	json_t *rf = json_object_get(root, "response_format");
	if (rf && !json_is_null(rf) && parse_response_format(s, rf, &b, err) < 0)
		return -1;
	return chat ? parse_tools(s, root, &b, template_name, err) : 0;
}

void gw_structured_free(struct gw_structured *s)
{
	free(s->text);
	free(s->prompt);
	memset(s, 0, sizeof(*s));
}

int gw_tool_call_split(const struct gw_structured *s, const char *text, size_t len, int state,
		       char *name, size_t name_cap, size_t *args_at, size_t *args_len)
{
	if (s->tools == GW_TOOLS_NAMED) {
		snprintf(name, name_cap, "%s", s->tool_name);
		*args_at = 0;
		*args_len = len;
		return 1;
	}
	size_t p = sizeof(TOOL_PREFIX) - 1, i = p, q = sizeof(TOOL_INFIX) - 1;
	if (len < p || memcmp(text, TOOL_PREFIX, p))
		return 0;
	while (i < len && text[i] != '"')
		i++;
	if (i - p >= name_cap || len < i + q || memcmp(text + i, TOOL_INFIX, q))
		return 0;
	memcpy(name, text + p, i - p);
	name[i - p] = '\0';
	*args_at = i + q;
	/* the wrapper's closing brace: the last byte of a whole output, held back before */
	size_t hold = state == GW_CALL_CUT ? 0 : 1;
	*args_len = len - *args_at >= hold ? len - *args_at - hold : 0;
	/* and a character is not split by it */
	while (state == GW_CALL_RUNNING && *args_len &&
	       ((unsigned char)text[*args_at + *args_len] & 0xc0) == 0x80)
		(*args_len)--;
	return 1;
}
