/* SPDX-License-Identifier: MIT */
/*
 * schema_doc.c — a schema document (schema.h): its draft, the keywords that draft defines,
 * its resources and anchors, and $ref resolved.
 *
 * The draft is the root's $schema (drafts 4, 6, 7, 2019-09, 2020-12); without one, or with
 * one this engine does not know (a custom meta-schema), 2020-12's rules apply, as in
 * llguidance and Python's jsonschema. A keyword the draft does not define is ignored, as the
 * specification says; so are the annotations of every draft.
 *
 * An $id (draft 4: id) that is not a bare fragment starts a resource: "#/..." inside it points
 * into it, and a $ref naming its URI (absolute, or relative to the base it is in) reaches it.
 * A fragment id (draft 4-7 "#name") or $anchor names a node of its resource. Any other URI is
 * a document this engine does not have, refused by name.
 */
#include "schema.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define D4 SC_DRAFT4
#define D6 SC_DRAFT6
#define D7 SC_DRAFT7
#define D19 SC_DRAFT2019
#define D20 SC_DRAFT2020
#define D_ALL (D4 | D6 | D7 | D19 | D20)
#define D6UP (D6 | D7 | D19 | D20)
#define D7UP (D7 | D19 | D20)
#define D19UP (D19 | D20)

/* Every keyword of drafts 4 to 2020-12, the drafts that define it, and whether it asserts
 * (the annotations and the identifiers, containers and comments do not). */
static const struct {
	const char *name;
	uint8_t drafts;
	uint8_t asserts;
} keywords[] = {
	{ "$schema", D_ALL, 0 }, { "id", D4, 0 }, { "$id", D6UP, 0 }, { "$anchor", D19UP, 0 },
	{ "$dynamicAnchor", D20, 0 }, { "$recursiveAnchor", D19, 0 }, { "$vocabulary", D19UP, 0 },
	{ "$comment", D7UP, 0 }, { "$defs", D19UP, 0 }, { "definitions", D_ALL, 0 },
	{ "title", D_ALL, 0 }, { "description", D_ALL, 0 }, { "default", D_ALL, 0 },
	{ "examples", D6UP, 0 }, { "readOnly", D7UP, 0 }, { "writeOnly", D7UP, 0 },
	{ "deprecated", D19UP, 0 }, { "contentMediaType", D7UP, 0 },
	{ "contentEncoding", D7UP, 0 }, { "contentSchema", D19UP, 0 },
	{ "type", D_ALL, 1 }, { "enum", D_ALL, 1 }, { "const", D6UP, 1 }, { "$ref", D_ALL, 1 },
	{ "allOf", D_ALL, 1 }, { "anyOf", D_ALL, 1 }, { "oneOf", D_ALL, 1 }, { "not", D_ALL, 1 },
	{ "if", D7UP, 1 }, { "then", D7UP, 1 }, { "else", D7UP, 1 },
	{ "$recursiveRef", D19, 1 }, { "$dynamicRef", D20, 1 },
	{ "multipleOf", D_ALL, 1 }, { "maximum", D_ALL, 1 }, { "minimum", D_ALL, 1 },
	{ "exclusiveMaximum", D_ALL, 1 }, { "exclusiveMinimum", D_ALL, 1 },
	{ "maxLength", D_ALL, 1 }, { "minLength", D_ALL, 1 }, { "pattern", D_ALL, 1 },
	{ "format", D_ALL, 1 },
	{ "items", D_ALL, 1 }, { "additionalItems", D4 | D6 | D7 | D19, 1 },
	{ "prefixItems", D20, 1 }, { "maxItems", D_ALL, 1 }, { "minItems", D_ALL, 1 },
	{ "uniqueItems", D_ALL, 1 }, { "contains", D6UP, 1 }, { "minContains", D19UP, 1 },
	{ "maxContains", D19UP, 1 }, { "unevaluatedItems", D19UP, 1 },
	{ "properties", D_ALL, 1 }, { "patternProperties", D_ALL, 1 },
	{ "additionalProperties", D_ALL, 1 }, { "required", D_ALL, 1 },
	{ "maxProperties", D_ALL, 1 }, { "minProperties", D_ALL, 1 },
	/* dependencies in every draft: 2019-09 split it in two, but schemas written for draft 7
	 * seldom say $schema, and validators such as ajv still apply it; enforcing it can only
	 * narrow the outputs, so they validate under either reading */
	{ "dependencies", D_ALL, 1 }, { "dependentRequired", D19UP, 1 },
	{ "dependentSchemas", D19UP, 1 }, { "propertyNames", D6UP, 1 },
	{ "unevaluatedProperties", D19UP, 1 },
};

int sc_keyword_role(const struct schema *s, const char *key, uint32_t len)
{
	for (size_t i = 0; i < sizeof(keywords) / sizeof(keywords[0]); i++)
		if (strlen(keywords[i].name) == len && !memcmp(keywords[i].name, key, len))
			return (keywords[i].drafts & s->draft) && keywords[i].asserts ? SC_KW_ASSERTS
											: SC_KW_IGNORED;
	return SC_KW_IGNORED;
}

/* The member if the draft reads it as an asserting keyword, else NULL. */
const struct jv *sc_kw(const struct schema *s, const struct jv *obj, const char *name)
{
	if (sc_keyword_role(s, name, (uint32_t)strlen(name)) != SC_KW_ASSERTS)
		return NULL;
	return jv_get(obj, name);
}

/* ------------------------------------------------------------------------------------------ */
/* Drafts                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static uint32_t draft_of(const struct jv *uri)
{
	static const struct {
		const char *tail;
		uint32_t draft;
	} known[] = {
		{ "json-schema.org/draft-04/schema", SC_DRAFT4 },
		{ "json-schema.org/draft-06/schema", SC_DRAFT6 },
		{ "json-schema.org/draft-07/schema", SC_DRAFT7 },
		{ "json-schema.org/draft/2019-09/schema", SC_DRAFT2019 },
		{ "json-schema.org/draft/2020-12/schema", SC_DRAFT2020 },
	};
	if (!uri || uri->kind != JV_STRING)
		return SC_DRAFT2020;
	size_t n = uri->n;
	if (n && uri->s[n - 1] == '#')
		n--;
	const char *p = uri->s;
	if (n > 7 && !memcmp(p, "http://", 7))
		p += 7, n -= 7;
	else if (n > 8 && !memcmp(p, "https://", 8))
		p += 8, n -= 8;
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (strlen(known[i].tail) == n && !memcmp(known[i].tail, p, n))
			return known[i].draft;
	return SC_DRAFT2020;
}

/* ------------------------------------------------------------------------------------------ */
/* URIs                                                                                       */
/* ------------------------------------------------------------------------------------------ */

static size_t scheme_len(const char *u, size_t n)
{
	size_t i = 0;
	if (!n || !((u[0] >= 'a' && u[0] <= 'z') || (u[0] >= 'A' && u[0] <= 'Z')))
		return 0;
	while (i < n && u[i] != ':' && u[i] != '/' && u[i] != '?' && u[i] != '#')
		i++;
	return i < n && u[i] == ':' ? i : 0;
}

/* ref[0..n) against base (RFC 3986 section 5.2, dot segments removed in the simple cases
 * schemas use), in the arena. */
static char *resolve_uri(struct schema *s, const char *base, const char *ref, size_t n)
{
	size_t bn = strlen(base), keep = 0;
	if (scheme_len(ref, n) || !bn) {
		keep = 0;
	} else if (n >= 2 && ref[0] == '/' && ref[1] == '/') {
		keep = scheme_len(base, bn) + 1;
	} else if (n >= 1 && ref[0] == '/') {
		size_t sl = scheme_len(base, bn);
		keep = sl ? sl + 1 : 0;
		if (keep + 2 <= bn && base[keep] == '/' && base[keep + 1] == '/') {
			keep += 2;
			while (keep < bn && base[keep] != '/')
				keep++;
		}
	} else if (n == 0) {
		keep = bn;
	} else {
		size_t end = bn;
		for (size_t i = 0; i < bn; i++)
			if (base[i] == '?' || base[i] == '#') {
				end = i;
				break;
			}
		keep = end;
		while (keep > 0 && base[keep - 1] != '/')
			keep--;
	}
	char *out = gr_alloc(s->c, keep + n + 1);
	if (!out)
		return NULL;
	memcpy(out, base, keep);
	memcpy(out + keep, ref, n);
	/* "/./" and "/x/../" removed */
	for (char *p; (p = strstr(out, "/./"));)
		memmove(p, p + 2, strlen(p + 2) + 1);
	for (char *p; (p = strstr(out, "/../"));) {
		char *q = p;
		while (q > out && q[-1] != '/')
			q--;
		if (q == out)
			break;
		memmove(q, p + 4, strlen(p + 4) + 1);
	}
	return out;
}

/* ------------------------------------------------------------------------------------------ */
/* Resources                                                                                  */
/* ------------------------------------------------------------------------------------------ */

struct sc_resource {
	const struct jv *node;
	const char *uri;         /* absolute (or relative to nothing), without a fragment */
	const struct jv *anchor_of; /* for an anchor: its resource (node is the named schema) */
	const char *anchor;
};

static int add_resource(struct schema *s, const struct jv *node, const char *uri,
			const struct jv *anchor_of, const char *anchor)
{
	if (s->n_res == s->cap_res) {
		uint32_t cap = s->cap_res ? s->cap_res * 2 : 16;
		struct sc_resource *r = gr_alloc(s->c, cap * sizeof(*r));
		if (!r)
			return -1;
		if (s->n_res)
			memcpy(r, s->res, s->n_res * sizeof(*r));
		s->res = r;
		s->cap_res = cap;
	}
	s->res[s->n_res++] = (struct sc_resource){ node, uri, anchor_of, anchor };
	return 0;
}

static const char *id_keyword(const struct schema *s)
{
	return s->draft == SC_DRAFT4 ? "id" : "$id";
}

static int skips(const char *key)
{
	/* Values that are data, not schemas: an "id" inside them is not an identifier. */
	static const char *const data[] = { "enum", "const", "default", "examples", "example" };
	for (size_t i = 0; i < sizeof(data) / sizeof(data[0]); i++)
		if (!strcmp(key, data[i]))
			return 1;
	return 0;
}

/* Every identifier below node: resources with their URIs, anchors with their resource. */
static int scan(struct schema *s, const struct jv *node, const char *base,
		const struct jv *resource, uint32_t depth)
{
	if (depth > 4 * s->c->lim.max_depth || gr_tick(s->c))
		return s->c->rc ? -1 : 0;
	if (node->kind == JV_ARRAY) {
		for (uint32_t i = 0; i < node->n; i++)
			if (scan(s, node->v[i], base, resource, depth + 1))
				return -1;
		return 0;
	}
	if (node->kind != JV_OBJECT)
		return 0;
	const struct jv *id = jv_get(node, id_keyword(s));
	const struct jv *anchor = s->draft & (SC_DRAFT2019 | SC_DRAFT2020)
				  ? jv_get(node, "$anchor") : NULL;
	if (id && id->kind == JV_STRING && id->n && id->s[0] == '#' && !(s->draft & (SC_DRAFT2019 |
									       SC_DRAFT2020))) {
		if (add_resource(s, node, NULL, resource, id->s + 1))
			return -1;
	} else if (id && id->kind == JV_STRING && depth > 0) {
		size_t n = id->n;
		const char *hash = memchr(id->s, '#', n);
		if (hash)
			n = (size_t)(hash - id->s);
		char *uri = resolve_uri(s, base, id->s, n);
		if (!uri || add_resource(s, node, uri, NULL, NULL))
			return -1;
		base = uri;
		resource = node;
	}
	if (anchor && anchor->kind == JV_STRING && add_resource(s, node, NULL, resource, anchor->s))
		return -1;
	for (uint32_t i = 0; i < node->n; i++)
		if (!skips(node->k[i]) && scan(s, node->v[i], base, resource, depth + 1))
			return -1;
	return 0;
}

int sc_starts_resource(const struct schema *s, const struct jv *node)
{
	for (uint32_t i = 0; i < s->n_res; i++)
		if (s->res[i].node == node && s->res[i].uri)
			return 1;
	return 0;
}

static const char *uri_of(const struct schema *s, const struct jv *resource)
{
	for (uint32_t i = 0; i < s->n_res; i++)
		if (s->res[i].node == resource && s->res[i].uri)
			return s->res[i].uri;
	return "";
}

int sc_doc_open(struct schema *s)
{
	const struct jv *root = s->doc;
	s->draft = draft_of(jv_get(root, "$schema"));
	s->resource = root;
	const char *base = "";
	const struct jv *id = jv_get(root, id_keyword(s));
	if (id && id->kind == JV_STRING && id->n && id->s[0] != '#') {
		const char *hash = memchr(id->s, '#', id->n);
		base = resolve_uri(s, "", id->s, hash ? (size_t)(hash - id->s) : id->n);
	}
	if (!base || add_resource(s, root, base, NULL, NULL))
		return -1;
	return scan(s, root, base, root, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* References                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* One JSON pointer token, ~0 ~1 and %XX undone. */
static int pointer_token(const char *p, size_t n, char *out, size_t cap, size_t *len)
{
	size_t w = 0;
	for (size_t i = 0; i < n; i++) {
		char ch = p[i];
		if (ch == '~' && i + 1 < n && (p[i + 1] == '0' || p[i + 1] == '1')) {
			ch = p[++i] == '0' ? '~' : '/';
		} else if (ch == '%' && i + 2 < n) {
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
	*len = w;
	return 0;
}

/* The JSON pointer p[0..n) from node; *resource follows the resources the path enters. */
static const struct jv *walk_pointer(const struct schema *s, const struct jv *at, const char *p,
				     size_t n, const struct jv **resource)
{
	size_t i = 0;
	while (i < n && at) {
		if (p[i] != '/')
			return NULL;
		size_t j = i + 1;
		while (j < n && p[j] != '/')
			j++;
		char token[256];
		size_t len;
		if (pointer_token(p + i + 1, j - i - 1, token, sizeof(token), &len))
			return NULL;
		if (at->kind == JV_OBJECT) {
			at = jv_getn(at, token, len);
		} else if (at->kind == JV_ARRAY) {
			char *e;
			unsigned long k = strtoul(token, &e, 10);
			at = *e || !len || k >= at->n ? NULL : at->v[k];
		} else {
			at = NULL;
		}
		if (at && sc_starts_resource(s, at))
			*resource = at;
		i = j;
	}
	return at;
}

const struct jv *sc_resolve(struct schema *s, const struct jv *ref, const struct jv **resource)
{
	if (ref->kind != JV_STRING) {
		sc_fail(s, "\"$ref\" must be a string");
		return NULL;
	}
	const char *hash = memchr(ref->s, '#', ref->n);
	size_t un = hash ? (size_t)(hash - ref->s) : ref->n;
	const char *frag = hash ? hash + 1 : "";
	size_t fn = hash ? ref->n - un - 1 : 0;
	const struct jv *res = s->resource;
	if (un) {
		const char *uri = resolve_uri(s, uri_of(s, s->resource), ref->s, un);
		if (!uri)
			return NULL;
		res = NULL;
		for (uint32_t i = 0; i < s->n_res && !res; i++)
			if (s->res[i].uri && !strcmp(s->res[i].uri, uri))
				res = s->res[i].node;
		if (!res) {
			sc_fail(s, "\"$ref\" \"%.80s\" names another document, which this engine does "
				"not have (only references inside the schema are supported)", ref->s);
			return NULL;
		}
	}
	*resource = res;
	const struct jv *target = NULL;
	if (fn == 0 || frag[0] == '/') {
		target = walk_pointer(s, res, frag, fn, resource);
	} else {
		for (uint32_t i = 0; i < s->n_res && !target; i++)
			if (s->res[i].anchor && s->res[i].anchor_of == res &&
			    strlen(s->res[i].anchor) == fn && !memcmp(s->res[i].anchor, frag, fn))
				target = s->res[i].node;
		if (target && sc_starts_resource(s, target))
			*resource = target;
	}
	if (!target)
		sc_fail(s, "\"$ref\" \"%.80s\" does not resolve", ref->s);
	return target;
}

struct sn *sc_ref_node(struct schema *s, const struct jv *ref)
{
	struct sn *x = sc_node(s, SN_REF);
	if (!x)
		return NULL;
	const struct jv *res;
	x->target = sc_resolve(s, ref, &res);
	if (!x->target)
		return NULL;
	x->target_resource = res;
	x->ref = gr_strndup(s->c, ref->s, ref->n);
	return x->ref ? x : NULL;
}
