/* SPDX-License-Identifier: MIT */
/*
 * schema.c — JSON Schema (frontends.h; README.md lists what is supported): the document read
 * by Jansson (duplicate keys refused), every keyword checked against what this engine enforces
 * (annotations are ignored, anything else unknown is refused with its name and location),
 * local $refs (JSON pointers, recursion through rules), anyOf, enum and const, objects and
 * arrays here; strings and numbers in schema_string.c and schema_number.c.
 *
 * Decisions where the standard leaves room, each keeping every output valid:
 *   - properties are written in the schema's order; a required one always, an optional one
 *     maybe; an object with `properties` and no `additionalProperties` is closed (as OpenAI's
 *     strict mode requires and llama.cpp does), one without `properties` is open;
 *   - without `type`, the kinds the schema's keywords describe (any value when none do);
 *   - JSON whitespace between tokens is bounded (bn_grammar_options.max_ws).
 */
#include "schema.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum family {
	F_ANNOTATION = 1,
	F_CONTAINER = 2,  /* $defs, definitions: read through $ref only */
	F_GENERIC = 4,    /* type, enum, const, anyOf, allOf, $ref */
	F_OBJECT = 8,
	F_ARRAY = 16,
	F_STRING = 32,
	F_NUMBER = 64,
};

static const struct {
	const char *name;
	uint8_t family;
} keywords[] = {
	{ "title", F_ANNOTATION }, { "description", F_ANNOTATION }, { "default", F_ANNOTATION },
	{ "examples", F_ANNOTATION }, { "$comment", F_ANNOTATION }, { "deprecated", F_ANNOTATION },
	{ "readOnly", F_ANNOTATION }, { "writeOnly", F_ANNOTATION }, { "$schema", F_ANNOTATION },
	{ "$id", F_ANNOTATION }, { "contentEncoding", F_ANNOTATION },
	{ "contentMediaType", F_ANNOTATION }, { "contentSchema", F_ANNOTATION },
	{ "$defs", F_CONTAINER }, { "definitions", F_CONTAINER },
	{ "type", F_GENERIC }, { "enum", F_GENERIC }, { "const", F_GENERIC },
	{ "anyOf", F_GENERIC }, { "allOf", F_GENERIC }, { "$ref", F_GENERIC },
	{ "properties", F_OBJECT }, { "required", F_OBJECT }, { "additionalProperties", F_OBJECT },
	{ "unevaluatedProperties", F_OBJECT },
	{ "items", F_ARRAY }, { "prefixItems", F_ARRAY }, { "minItems", F_ARRAY },
	{ "maxItems", F_ARRAY }, { "additionalItems", F_ARRAY }, { "uniqueItems", F_ARRAY },
	{ "minLength", F_STRING }, { "maxLength", F_STRING }, { "pattern", F_STRING },
	{ "format", F_STRING },
	{ "minimum", F_NUMBER }, { "maximum", F_NUMBER }, { "exclusiveMinimum", F_NUMBER },
	{ "exclusiveMaximum", F_NUMBER }, { "multipleOf", F_NUMBER },
};

/* ------------------------------------------------------------------------------------------ */
/* Locations                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* Appends "/a/b" (JSON pointer escapes) to the path; returns the old length for sc_pop. */
static size_t push(struct schema *s, const char *a, const char *b)
{
	size_t old = strlen(s->path), at = old;
	const char *parts[] = { a, b };
	for (int i = 0; i < 2 && parts[i]; i++) {
		if (at + 2 < sizeof(s->path))
			s->path[at++] = '/';
		for (const char *p = parts[i]; *p && at + 3 < sizeof(s->path); p++) {
			if (*p == '~' || *p == '/') {
				s->path[at++] = '~';
				s->path[at++] = *p == '~' ? '0' : '1';
			} else {
				s->path[at++] = *p;
			}
		}
	}
	s->path[at] = 0;
	return old;
}

static size_t push_index(struct schema *s, const char *a, size_t i)
{
	char num[24];
	snprintf(num, sizeof(num), "%zu", i);
	return push(s, a, num);
}

static void pop(struct schema *s, size_t old)
{
	s->path[old] = 0;
}

/* ------------------------------------------------------------------------------------------ */
/* References                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* One JSON pointer token, ~0 ~1 and %XX undone. */
static int pointer_token(const char *p, size_t n, char *out, size_t cap)
{
	size_t w = 0;
	for (size_t i = 0; i < n; i++) {
		char ch = p[i];
		if (ch == '~' && i + 1 < n && (p[i + 1] == '0' || p[i + 1] == '1'))
			ch = p[++i] == '0' ? '~' : '/';
		else if (ch == '%' && i + 2 < n) {
			char hex[3] = { p[i + 1], p[i + 2], 0 };
			char *end;
			long v = strtol(hex, &end, 16);
			if (*end)
				return -1;
			ch = (char)v;
			i += 2;
		}
		if (w + 1 >= cap)
			return -1;
		out[w++] = ch;
	}
	out[w] = 0;
	return 0;
}

static json_t *resolve(struct schema *s, const char *ref)
{
	const char *p = ref + 1; /* past '#' */
	json_t *at = s->doc;
	while (*p == '/' && at) {
		const char *end = strchr(p + 1, '/');
		size_t n = end ? (size_t)(end - p - 1) : strlen(p + 1);
		char token[256];
		if (pointer_token(p + 1, n, token, sizeof(token)))
			return NULL;
		if (json_is_object(at)) {
			at = json_object_get(at, token);
		} else if (json_is_array(at)) {
			char *e;
			unsigned long i = strtoul(token, &e, 10);
			at = *e || !*token ? NULL : json_array_get(at, i);
		} else {
			at = NULL;
		}
		p += 1 + n;
	}
	return *p ? NULL : at;
}

static struct ir_node *value(struct schema *s, json_t *node);

/* Any JSON value: the value rule's body, so its outermost level is expanded where used. */
static struct ir_node *any_value(struct schema *s)
{
	int64_t r = gr_json_value_rule(s->c);
	return r < 0 ? NULL : s->c->rules[r].body;
}

/* A call of the rule for the $ref's target, made (and compiled, at the target's location)
 * the first time; a cycle of $refs is then a cycle of calls. */
static struct ir_node *ref_call(struct schema *s, json_t *ref)
{
	if (!json_is_string(ref)) {
		sc_fail(s, "\"$ref\" must be a string");
		return NULL;
	}
	const char *text = json_string_value(ref);
	if (text[0] != '#' || (text[1] && text[1] != '/')) {
		sc_fail(s, "\"$ref\" \"%.60s\" is not supported: only local JSON pointers (\"#...\")",
			text);
		return NULL;
	}
	json_t *target = resolve(s, text);
	if (!target) {
		sc_fail(s, "\"$ref\" \"%.60s\" does not resolve", text);
		return NULL;
	}
	for (uint32_t i = 0; i < s->n_refs; i++)
		if (s->refs[i].target == target)
			return ir_call(s->c, s->refs[i].rule);
	if (s->n_refs == s->cap_refs) {
		uint32_t cap = s->cap_refs ? s->cap_refs * 2 : 16;
		struct schema_ref *r = gr_alloc(s->c, cap * sizeof(*r));
		if (!r)
			return NULL;
		if (s->n_refs)
			memcpy(r, s->refs, s->n_refs * sizeof(*r));
		s->refs = r;
		s->cap_refs = cap;
	}
	int64_t rule = gr_rule_new(s->c, text);
	if (rule < 0)
		return NULL;
	s->refs[s->n_refs++] = (struct schema_ref){ target, (uint32_t)rule };
	char saved[sizeof(s->path)];
	memcpy(saved, s->path, sizeof(saved));
	snprintf(s->path, sizeof(s->path), "%s", text);
	struct ir_node *body = value(s, target);
	memcpy(s->path, saved, sizeof(saved));
	if (!body)
		return NULL;
	s->c->rules[rule].body = body;
	return ir_call(s->c, (uint32_t)rule);
}

/* ------------------------------------------------------------------------------------------ */
/* Literals: enum and const                                                                   */
/* ------------------------------------------------------------------------------------------ */

static int is_integral(json_t *v)
{
	return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
}

static int type_matches(const char *type, json_t *v)
{
	if (!strcmp(type, "null")) return json_is_null(v);
	if (!strcmp(type, "boolean")) return json_is_boolean(v);
	if (!strcmp(type, "string")) return json_is_string(v);
	if (!strcmp(type, "integer")) return is_integral(v);
	if (!strcmp(type, "number")) return json_is_number(v);
	if (!strcmp(type, "array")) return json_is_array(v);
	if (!strcmp(type, "object")) return json_is_object(v);
	return 0;
}

static int types_match(json_t *type, json_t *v)
{
	if (!type)
		return 1;
	if (json_is_string(type))
		return type_matches(json_string_value(type), v);
	size_t i;
	json_t *t;
	json_array_foreach(type, i, t)
		if (json_is_string(t) && type_matches(json_string_value(t), v))
			return 1;
	return 0;
}

static struct ir_node *literal(struct schema *s, json_t *v)
{
	char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
	if (!text) {
		gr_fail(s->c, -ENOMEM, "out of memory writing an enum value");
		return NULL;
	}
	struct ir_node *x = ir_literal(s->c, text, strlen(text));
	free(text);
	return x;
}

static struct ir_node *literals(struct schema *s, json_t *node, uint8_t families)
{
	if (families & (F_OBJECT | F_ARRAY | F_STRING | F_NUMBER)) {
		sc_fail(s, "\"enum\"/\"const\" together with other constraints is not supported");
		return NULL;
	}
	json_t *type = sc_get(node, "type"), *values = sc_get(node, "enum"), *one = sc_get(node, "const");
	if (values && one) {
		sc_fail(s, "\"enum\" together with \"const\" is not supported");
		return NULL;
	}
	if (values && !json_is_array(values)) {
		sc_fail(s, "\"enum\" must be an array");
		return NULL;
	}
	struct ir_list alts = { 0 };
	size_t n = one ? 1 : json_array_size(values);
	for (size_t i = 0; i < n; i++) {
		json_t *v = one ? one : json_array_get(values, i);
		if (types_match(type, v) && ir_list_push(s->c, &alts, literal(s, v)))
			return NULL;
	}
	if (alts.n == 0) {
		sc_fail(s, "no value of \"%s\" is of the schema's \"type\"", one ? "const" : "enum");
		return NULL;
	}
	return ir_alt(s->c, alts.n, alts.v);
}

/* ------------------------------------------------------------------------------------------ */
/* Objects                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Characters a key of an additional property is written with: no escapes needed. */
static int plain_key_char(uint32_t cp)
{
	return cp >= 0x20 && cp != '"' && cp != '\\';
}

static struct ir_node *plain_chars_except(struct gr_ctx *c, const uint32_t *except, uint32_t n)
{
	uint32_t excl[34 + 64];
	uint32_t k = 0;
	for (uint32_t cp = 0; cp < 0x20; cp++)
		excl[k++] = cp;
	excl[k++] = '"';
	excl[k++] = '\\';
	for (uint32_t i = 0; i < n && k < sizeof(excl) / sizeof(excl[0]); i++)
		excl[k++] = except[i];
	return ir_any_char_except(c, excl, k, GR_TEXT_RAW);
}

/* Key strings (without quotes) other than keys[0..n) that are at depth `at` and share their
 * first `at` code points; a trie walked as the expression is built. Keys with characters that
 * need escapes cannot be written by this expression anyway and are left out. */
static struct ir_node *key_not_in(struct schema *s, const char **keys, uint32_t n, size_t at,
				  uint32_t depth)
{
	struct gr_ctx *c = s->c;
	if (depth > 256) {
		sc_fail(s, "property names too long to exclude");
		return NULL;
	}
	struct ir_list alts = { 0 };
	uint32_t children[64], n_children = 0;
	int ends_here = 0;
	for (uint32_t i = 0; i < n; i++) {
		size_t len = strlen(keys[i]);
		if (len == at) {
			ends_here = 1;
			continue;
		}
		uint32_t l;
		int32_t cp = gr_utf8_decode((const uint8_t *)keys[i] + at, len - at, &l);
		if (cp < 0 || !plain_key_char((uint32_t)cp))
			continue;
		uint32_t k = 0;
		while (k < n_children && children[k] != (uint32_t)cp)
			k++;
		if (k == n_children && n_children < 64)
			children[n_children++] = (uint32_t)cp;
	}
	if (!ends_here && ir_list_push(c, &alts, ir_empty(c)))
		return NULL;
	struct ir_node *any = plain_chars_except(c, NULL, 0);
	if (ir_list_push(c, &alts, ir_seq2(c, plain_chars_except(c, children, n_children),
					   ir_repeat(c, any, 0, GR_INF))))
		return NULL;
	for (uint32_t k = 0; k < n_children; k++) {
		const char *sub[64];
		uint32_t m = 0;
		uint8_t enc[4];
		int len = gr_utf8_encode(children[k], enc);
		for (uint32_t i = 0; i < n && m < 64; i++)
			if (strlen(keys[i]) >= at + (size_t)len && !memcmp(keys[i] + at, enc, (size_t)len))
				sub[m++] = keys[i];
		struct ir_node *rest = key_not_in(s, sub, m, at + (size_t)len, depth + 1);
		if (ir_list_push(c, &alts, ir_seq2(c, ir_literal(c, enc, (size_t)len), rest)))
			return NULL;
	}
	return ir_alt(c, alts.n, alts.v);
}

static struct ir_node *member(struct schema *s, struct ir_node *key, struct ir_node *val)
{
	struct ir_node *ws = gr_json_ws(s->c);
	return ir_seq(s->c, 5, (struct ir_node *[]){ key, ws, ir_lit(s->c, ":"), ws, val });
}

/* additionalProperties' members: any key not declared, its value as the keyword says. */
static struct ir_node *additional(struct schema *s, json_t *ap, const char **keys, uint32_t n)
{
	if (n > 64) {
		sc_fail(s, "\"additionalProperties\" beside more than 64 properties is not supported");
		return NULL;
	}
	size_t old = push(s, "additionalProperties", NULL);
	struct ir_node *val = json_is_object(ap) ? value(s, ap) : any_value(s);
	pop(s, old);
	struct ir_node *key = ir_seq3(s->c, ir_lit(s->c, "\""), key_not_in(s, keys, n, 0, 0),
				      ir_lit(s->c, "\""));
	return member(s, key, val);
}

static struct ir_node *object(struct schema *s, json_t *node)
{
	struct gr_ctx *c = s->c;
	json_t *props = sc_get(node, "properties"), *req = sc_get(node, "required");
	json_t *ap = sc_get(node, "additionalProperties"), *up = sc_get(node, "unevaluatedProperties");
	if ((props && !json_is_object(props)) || (req && !json_is_array(req))) {
		sc_fail(s, "\"properties\" must be an object and \"required\" an array");
		return NULL;
	}
	if (up && !json_is_false(up)) {
		sc_fail(s, "\"unevaluatedProperties\" other than false is not supported");
		return NULL;
	}
	if (ap && !json_is_boolean(ap) && !json_is_object(ap)) {
		sc_fail(s, "\"additionalProperties\" must be a boolean or a schema");
		return NULL;
	}
	int open = ap ? !json_is_false(ap) : !props && !up;
	if (!props && open && (!ap || json_is_true(ap)) && !req)
		return gr_json_any_object(c); /* any object */
	size_t i;
	json_t *name;
	json_array_foreach(req, i, name)
		if (!json_is_string(name) || !json_object_get(props, json_string_value(name))) {
			sc_fail(s, "\"required\" names \"%.60s\", which is not in \"properties\"",
				json_is_string(name) ? json_string_value(name) : "(not a string)");
			return NULL;
		}
	uint32_t n = (uint32_t)json_object_size(props), k = 0, n_keys = 0;
	struct ir_node **kids = gr_alloc(c, (n + 1) * sizeof(*kids));
	uint8_t *required = gr_alloc(c, n + 1);
	const char **keys = gr_alloc(c, (n + 1) * sizeof(*keys));
	if (!kids || !required || !keys)
		return NULL;
	const char *key;
	json_t *sub;
	json_object_foreach(props, key, sub) {
		int is_required = 0;
		json_array_foreach(req, i, name)
			is_required |= !strcmp(json_string_value(name), key);
		size_t old = push(s, "properties", key);
		struct ir_node *val = value(s, sub);
		if (val && val->kind == IR_NOTHING && is_required) {
			sc_fail(s, "required property \"%.60s\" allows no value", key);
			val = NULL;
		}
		pop(s, old);
		if (!val)
			return NULL;
		keys[n_keys++] = key;
		if (val->kind == IR_NOTHING)
			continue; /* optional and unsatisfiable: never written */
		json_t *key_json = json_string(key);
		struct ir_node *key_lit = key_json ? literal(s, key_json) : NULL;
		json_decref(key_json);
		required[k] = (uint8_t)is_required;
		if (!(kids[k++] = member(s, key_lit, val)))
			return NULL;
	}
	if (open) {
		required[k] = 0;
		struct ir_node *extra = additional(s, ap, keys, n_keys);
		struct ir_node *sep = ir_seq3(c, gr_json_ws(c), ir_lit(c, ","), gr_json_ws(c));
		kids[k++] = ir_seq2(c, extra, ir_repeat(c, ir_seq2(c, sep, extra), 0, GR_INF));
	}
	struct ir_node *ws = gr_json_ws(c);
	struct ir_node *body = ir_members(c, k, kids, required,
					  ir_seq3(c, ws, ir_lit(c, ","), ws));
	return ir_seq(c, 5, (struct ir_node *[]){ ir_lit(c, "{"), ws, body, ws, ir_lit(c, "}") });
}

/* ------------------------------------------------------------------------------------------ */
/* Arrays                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* The elements from index j on (j elements written), as ", elem" pieces: prefix schemas
 * first, then `rest` (NULL: no more allowed), between lo and hi elements in all. */
static struct ir_node *array_tail(struct schema *s, struct ir_node **prefix, uint32_t k,
				  struct ir_node *rest, uint32_t j, uint32_t lo, uint32_t hi)
{
	struct gr_ctx *c = s->c;
	struct ir_node *ws = gr_json_ws(c), *sep = ir_seq3(c, ws, ir_lit(c, ","), ws);
	if (j >= hi)
		return ir_empty(c);
	if (j >= k) {
		if (!rest)
			return ir_empty(c);
		uint32_t need = lo > j ? lo - j : 0, most = hi == GR_INF ? GR_INF : hi - j;
		return ir_repeat(c, ir_seq2(c, sep, rest), need, most);
	}
	struct ir_node *next = ir_seq3(c, sep, prefix[j], array_tail(s, prefix, k, rest, j + 1, lo, hi));
	return j < lo ? next : ir_opt(c, next);
}

static struct ir_node *array(struct schema *s, json_t *node)
{
	struct gr_ctx *c = s->c;
	json_t *items = sc_get(node, "items"), *prefix_items = sc_get(node, "prefixItems");
	json_t *extra = sc_get(node, "additionalItems"), *unique = sc_get(node, "uniqueItems");
	uint32_t lo = 0, hi = GR_INF;
	if (sc_count(s, node, "minItems", &lo) || sc_count(s, node, "maxItems", &hi))
		return NULL;
	if (unique && !json_is_false(unique)) {
		sc_fail(s, "\"uniqueItems\": true is not supported");
		return NULL;
	}
	if (json_is_array(items)) { /* draft 7 tuples: items [..], additionalItems */
		if (prefix_items) {
			sc_fail(s, "\"items\" as an array together with \"prefixItems\"");
			return NULL;
		}
		prefix_items = items;
		items = extra;
	} else if (extra) {
		sc_fail(s, "\"additionalItems\" without \"items\" as an array is not supported");
		return NULL;
	}
	if (prefix_items && !json_is_array(prefix_items)) {
		sc_fail(s, "\"prefixItems\" must be an array");
		return NULL;
	}
	if (lo > hi) {
		sc_fail(s, "\"minItems\" is above \"maxItems\": no array satisfies them");
		return NULL;
	}
	uint32_t k = (uint32_t)json_array_size(prefix_items);
	struct ir_node **prefix = gr_alloc(c, (k + 1) * sizeof(*prefix));
	if (!prefix)
		return NULL;
	for (uint32_t j = 0; j < k; j++) {
		size_t old = push_index(s, json_is_array(sc_get(node, "prefixItems")) ? "prefixItems"
					: "items", j);
		prefix[j] = value(s, json_array_get(prefix_items, j));
		pop(s, old);
		if (!prefix[j])
			return NULL;
	}
	struct ir_node *rest = NULL;
	if (!items || !json_is_false(items)) {
		size_t old = push(s, "items", NULL);
		rest = items ? value(s, items) : any_value(s);
		pop(s, old);
		if (!rest)
			return NULL;
	}
	if (!rest && lo > k) {
		sc_fail(s, "\"minItems\" asks for more items than the tuple allows");
		return NULL;
	}
	struct ir_node *ws = gr_json_ws(c);
	struct ir_node *first = k ? prefix[0] : rest;
	struct ir_node *body = first && hi > 0
		? ir_seq3(c, first, array_tail(s, prefix, k, rest, 1, lo, hi), ws) : ir_empty(c);
	if (lo == 0 && first && hi > 0)
		body = ir_opt(c, body);
	return ir_seq(c, 4, (struct ir_node *[]){ ir_lit(c, "["), ws, body, ir_lit(c, "]") });
}

/* ------------------------------------------------------------------------------------------ */
/* Schemas                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static int family_of(const char *key)
{
	for (size_t i = 0; i < sizeof(keywords) / sizeof(keywords[0]); i++)
		if (!strcmp(keywords[i].name, key))
			return keywords[i].family;
	return strncmp(key, "x-", 2) == 0 ? F_ANNOTATION : 0;
}

/* The families of node's keywords; an unsupported keyword is an error naming it. */
static int families(struct schema *s, json_t *node, uint8_t *out)
{
	const char *key;
	json_t *v;
	*out = 0;
	json_object_foreach(node, key, v) {
		int f = family_of(key);
		if (!f) {
			const char *hint = !strcmp(key, "oneOf") ? " (anyOf is)" : "";
			return sc_fail(s, "\"%.60s\" is not supported%s", key, hint);
		}
		*out |= (uint8_t)f;
	}
	return 0;
}

static struct ir_node *any_of(struct schema *s, json_t *list, const char *keyword)
{
	if (!json_is_array(list) || json_array_size(list) == 0) {
		sc_fail(s, "\"%s\" must be a non-empty array", keyword);
		return NULL;
	}
	struct ir_list alts = { 0 };
	size_t i;
	json_t *sub;
	json_array_foreach(list, i, sub) {
		size_t old = push_index(s, keyword, i);
		struct ir_node *x = value(s, sub);
		pop(s, old);
		if (ir_list_push(s->c, &alts, x))
			return NULL;
	}
	return ir_alt(s->c, alts.n, alts.v);
}

static struct ir_node *of_type(struct schema *s, json_t *node, const char *type)
{
	struct gr_ctx *c = s->c;
	if (!strcmp(type, "null"))
		return ir_lit(c, "null");
	if (!strcmp(type, "boolean"))
		return ir_alt2(c, ir_lit(c, "true"), ir_lit(c, "false"));
	if (!strcmp(type, "string"))
		return sc_string(s, node);
	if (!strcmp(type, "integer"))
		return sc_integer(s, node);
	if (!strcmp(type, "number"))
		return sc_number(s, node);
	if (!strcmp(type, "array"))
		return array(s, node);
	if (!strcmp(type, "object"))
		return object(s, node);
	sc_fail(s, "\"type\" \"%.40s\" is not a JSON Schema type", type);
	return NULL;
}

/* The types to build: "type" as given, else those the keywords describe, else all. */
static struct ir_node *typed(struct schema *s, json_t *node, uint8_t fam)
{
	static const char *const all[] = { "object", "array", "string", "number", "boolean",
					   "null" };
	const char *types[8];
	size_t n = 0;
	json_t *type = sc_get(node, "type");
	if (json_is_string(type)) {
		types[n++] = json_string_value(type);
	} else if (json_is_array(type) && json_array_size(type) > 0 && json_array_size(type) < 8) {
		size_t i;
		json_t *t;
		json_array_foreach(type, i, t) {
			if (!json_is_string(t)) {
				sc_fail(s, "\"type\" must name types");
				return NULL;
			}
			types[n++] = json_string_value(t);
		}
	} else if (type) {
		sc_fail(s, "\"type\" must be a type or a non-empty array of types");
		return NULL;
	} else {
		static const uint8_t fam_of[] = { F_OBJECT, F_ARRAY, F_STRING, F_NUMBER, 0, 0 };
		int described = fam & (F_OBJECT | F_ARRAY | F_STRING | F_NUMBER);
		for (size_t i = 0; i < 6; i++)
			if (!described || (fam & fam_of[i]))
				types[n++] = all[i];
	}
	int has_number = 0;
	for (size_t i = 0; i < n; i++)
		has_number |= !strcmp(types[i], "number");
	struct ir_list alts = { 0 };
	for (size_t i = 0; i < n; i++) {
		if (has_number && !strcmp(types[i], "integer"))
			continue; /* every integer is a number already */
		if (ir_list_push(s->c, &alts, of_type(s, node, types[i])))
			return NULL;
	}
	return ir_alt(s->c, alts.n, alts.v);
}

static struct ir_node *value(struct schema *s, json_t *node)
{
	struct gr_ctx *c = s->c;
	if (gr_tick(c))
		return NULL;
	if (++s->depth > c->lim.max_depth) {
		gr_fail(c, -E2BIG, "the schema nests deeper than %u (at %s)", c->lim.max_depth,
			s->path);
		return NULL;
	}
	struct ir_node *x = NULL;
	uint8_t fam;
	if (json_is_true(node)) {
		x = any_value(s);
	} else if (json_is_false(node)) {
		x = ir_nothing(c);
	} else if (!json_is_object(node)) {
		sc_fail(s, "a schema must be an object or a boolean");
	} else if (families(s, node, &fam) == 0) {
		uint8_t others = fam & ~(F_ANNOTATION | F_CONTAINER);
		json_t *ref = sc_get(node, "$ref"), *any = sc_get(node, "anyOf");
		json_t *all = sc_get(node, "allOf");
		size_t n_generic = !!ref + !!any + !!all + !!sc_get(node, "type") +
				   !!sc_get(node, "enum") + !!sc_get(node, "const");
		if ((ref || any || all) && (n_generic > 1 || (others & ~F_GENERIC)))
			sc_fail(s, "\"%s\" together with other constraints is not supported",
				ref ? "$ref" : any ? "anyOf" : "allOf");
		else if (ref)
			x = ref_call(s, ref);
		else if (any)
			x = any_of(s, any, "anyOf");
		else if (all && (!json_is_array(all) || json_array_size(all) != 1))
			sc_fail(s, "\"allOf\" of more than one schema is not supported");
		else if (all)
			x = any_of(s, all, "allOf");
		else if (sc_get(node, "enum") || sc_get(node, "const"))
			x = literals(s, node, fam);
		else
			x = typed(s, node, fam);
	}
	s->depth--;
	return x;
}

int gr_schema(struct gr_ctx *c, const char *text, size_t len)
{
	json_error_t jerr;
	json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
	if (!doc)
		return gr_fail(c, -EINVAL, "the schema is not valid JSON: %s (line %d, column %d)",
			       jerr.text, jerr.line, jerr.column);
	struct schema s = { .c = c, .doc = doc, .path = "#" };
	int64_t root = gr_rule_new(c, "root");
	struct ir_node *x = root < 0 ? NULL : value(&s, doc);
	if (x) {
		struct ir_node *ws = gr_json_ws(c);
		c->rules[root].body = ir_seq3(c, ws, x, ws);
		c->root = (uint32_t)root;
	}
	json_decref(doc);
	return c->rc ? -1 : 0;
}
