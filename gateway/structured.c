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
 */
#define _GNU_SOURCE
#include "job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOOLS 128
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

static int set_text(struct gw_structured *s, json_t *schema, size_t flags, struct gw_error *err)
{
	s->text = json_dumps(schema, JSON_COMPACT | flags);
	if (!s->text) {
		gw_error_set(err, 500, NULL, "out of memory");
		return -1;
	}
	s->len = strlen(s->text);
	return 0;
}

/* ---- response_format --------------------------------------------------------------------- */

static int parse_response_format(struct gw_structured *s, json_t *rf, struct gw_error *err)
{
	static const char *const rf_keys[] = { "type", "json_schema", NULL };
	static const char *const js_keys[] = { "name", "description", "schema", "strict", NULL };
	const char *type = json_string_value(json_object_get(rf, "type"));
	if (!json_is_object(rf) || !type) {
		gw_error_set(err, 400, "response_format",
			     "response_format must be an object with a type: text, json_object or json_schema");
		return -1;
	}
	if (only_keys(rf, "response_format", "response_format", rf_keys, err) < 0)
		return -1;
	if (!strcmp(type, "text"))
		return 0;
	s->param = "response_format";
	if (!strcmp(type, "json_object")) {
		s->kind = BN_GRAMMAR_KIND_JSON;
		s->flags = BN_GRAMMAR_JSON_OBJECT;
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
	return set_text(s, schema, 0, err);
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

/* tools: each {"type": "function", "function": {name, description, parameters, strict}}. */
static int check_tools(json_t *tools, struct gw_error *err)
{
	static const char *const tool_keys[] = { "type", "function", NULL };
	static const char *const fn_keys[] = { "name", "description", "parameters", "strict", NULL };
	if (!json_is_array(tools) || json_array_size(tools) > MAX_TOOLS) {
		gw_error_set(err, 400, "tools", "tools must be an array of at most %d tools", MAX_TOOLS);
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

static json_t *tool_params(json_t *tool)
{
	json_t *p = json_object_get(json_object_get(tool, "function"), "parameters");
	/* none: a function without arguments, OpenAI's {} */
	return p ? json_deep_copy(p) : json_pack("{s:s, s:{}}", "type", "object", "properties");
}

/* params' $defs and definitions moved into top (the same name twice must be the same). */
static int hoist_defs(json_t *top, json_t *params, struct gw_error *err)
{
	static const char *const keys[] = { "$defs", "definitions" };
	for (size_t k = 0; k < 2; k++) {
		json_t *defs = json_object_get(params, keys[k]);
		if (!defs)
			continue;
		json_t *into = json_object_get(top, keys[k]);
		if (!into)
			json_object_set_new(top, keys[k], into = json_object());
		const char *name;
		json_t *d;
		json_object_foreach(defs, name, d)
		{
			json_t *have = json_object_get(into, name);
			if (have && !json_equal(have, d)) {
				gw_error_set(err, 400, "tools",
					     "two tools define %s/%.64s differently: with tool_choice \"required\" their definitions share one schema",
					     keys[k], name);
				return -1;
			}
			json_object_set(into, name, d);
		}
		json_object_del(params, keys[k]);
	}
	return 0;
}

/* The schema of tool_choice "required": one {"name", "arguments"} object per tool. */
static int required_schema(struct gw_structured *s, json_t *tools, struct gw_error *err)
{
	json_t *top = json_object(), *any = json_array();
	json_object_set_new(top, "anyOf", any);
	size_t i;
	json_t *t;
	int rc = 0;
	json_array_foreach(tools, i, t)
	{
		json_t *params = tool_params(t);
		if (!params || hoist_defs(top, params, err) < 0) {
			json_decref(params);
			rc = -1;
			break;
		}
		json_array_append_new(any, json_pack("{s:s, s:{s:{s:O}, s:o}, s:[s, s]}", "type",
						     "object", "properties", "name", "const",
						     json_object_get(json_object_get(t, "function"), "name"),
						     "arguments", params, "required", "name", "arguments"));
	}
	if (rc == 0)
		rc = set_text(s, top, 0, err);
	json_decref(top);
	return rc;
}

static json_t *find_tool(json_t *tools, const char *name)
{
	size_t i;
	json_t *t;
	json_array_foreach(tools, i, t)
		if (!strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")),
			    name))
			return t;
	return NULL;
}

/* The system text that tells the model the tools and how to answer. */
static int tools_prompt(struct gw_structured *s, json_t *tools)
{
	size_t cap = 0, i;
	FILE *f = open_memstream(&s->prompt, &cap);
	if (!f)
		return -1;
	fputs("You can call these functions (each with its parameters as a JSON Schema):", f);
	json_t *t;
	json_array_foreach(tools, i, t)
	{
		char *fn = json_dumps(json_object_get(t, "function"), JSON_COMPACT);
		fprintf(f, "\n%s", fn ? fn : "");
		free(fn);
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
		if (!have || !find_tool(tools, name)) {
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

static int parse_tools(struct gw_structured *s, json_t *root, const char *template_name,
		       struct gw_error *err)
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
		json_t *params = tool_params(find_tool(tools, s->tool_name));
		rc = params ? set_text(s, params, 0, err) : -1;
		json_decref(params);
	} else {
		rc = required_schema(s, tools, err);
	}
	if (rc == 0 && tools_prompt(s, tools) < 0) {
		gw_error_set(err, 500, NULL, "out of memory");
		rc = -1;
	}
	return rc;
}

/* ---- the job's side ---------------------------------------------------------------------- */

int gw_structured_parse(struct gw_structured *s, json_t *root, int chat,
			const char *template_name, struct gw_error *err)
{
	memset(s, 0, sizeof(*s));
	json_t *rf = json_object_get(root, "response_format");
	if (rf && !json_is_null(rf) && parse_response_format(s, rf, err) < 0)
		return -1;
	return chat ? parse_tools(s, root, template_name, err) : 0;
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
