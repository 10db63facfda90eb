/* SPDX-License-Identifier: MIT */
/*
 * schema_cond.c — conditions as disjunctions (schema.h), each disjoint by construction, so
 * anyOf's alternatives say them exactly:
 *   - dependentRequired / dependentSchemas (draft 4-7 dependencies): per key, "absent, or
 *     present with the other keys / with the schema";
 *   - if/then/else: "(if and then) or (not if, and else)";
 *   - not S: the complement of S, keyword by keyword (not (a and b) is (not a) or (not b)):
 *     type, enum, const, required, pattern, the lengths, counts and bounds, properties (some
 *     declared key present with a value outside its schema), $ref, allOf, anyOf, not. The
 *     complement of anything else (format, items, additionalProperties...) is refused by name.
 * A keyword's complement is of its own kind only: {"required": ["a"]} holds for every value
 * that is not an object, so its complement is the objects without "a".
 */
#include "schema.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define NOT_DEPTH 16 /* nested complements (through $ref, properties, allOf) */

static struct sn *either_of(struct schema *s, uint8_t kind, struct sn_list *l)
{
	if (!l->n)
		return sc_node(s, kind == SN_ANY ? SN_FALSE : SN_TRUE);
	if (l->n == 1)
		return l->v[0];
	struct sn *x = sc_node(s, kind);
	if (x) {
		x->kids = l->v;
		x->n_kids = l->n;
	}
	return x;
}

static struct sn *pair(struct schema *s, uint8_t kind, struct sn *a, struct sn *b)
{
	struct sn_list l = { 0 };
	if (sc_list_push(s, &l, a) || sc_list_push(s, &l, b))
		return NULL;
	return either_of(s, kind, &l);
}

/* An object without key (every other value passes). */
static struct sn *absent(struct schema *s, const char *key, uint32_t len)
{
	struct sn *x = sc_node(s, SN_PLAIN);
	if (!x || sc_names_add(s, &x->forbidden, &x->forbidden_len, &x->n_forbidden, &key, &len, 1))
		return NULL;
	return x;
}

/* An object with the key and the names in `others` (every other value passes). */
static struct sn *present(struct schema *s, const char *key, uint32_t len,
			  const struct jv *others)
{
	struct sn *x = sc_node(s, SN_PLAIN);
	if (!x || sc_names_add(s, &x->required, &x->required_len, &x->n_required, &key, &len, 1))
		return NULL;
	for (uint32_t i = 0; others && i < others->n; i++) {
		if (others->v[i]->kind != JV_STRING) {
			sc_fail(s, "a dependency must name properties");
			return NULL;
		}
		if (sc_names_add(s, &x->required, &x->required_len, &x->n_required, &others->v[i]->s,
				 &others->v[i]->n, 1))
			return NULL;
	}
	return x;
}

/* ------------------------------------------------------------------------------------------ */
/* Dependencies                                                                               */
/* ------------------------------------------------------------------------------------------ */

/* want: 0 either form (draft 4-7 dependencies), 1 names (dependentRequired), 2 schemas. */
static int read_dependencies(struct schema *s, const struct jv *deps, const char *keyword,
			     int want, struct sn_list *out)
{
	if (deps->kind != JV_OBJECT)
		return sc_fail(s, "\"%s\" must be an object", keyword);
	for (uint32_t i = 0; i < deps->n; i++) {
		const struct jv *d = deps->v[i];
		size_t old = sc_push(s, keyword, deps->k[i]);
		struct sn *x;
		if (d->kind == JV_ARRAY && want != 2) {
			x = pair(s, SN_ANY, absent(s, deps->k[i], deps->klen[i]),
				 present(s, deps->k[i], deps->klen[i], d));
		} else if (want != 1 && (d->kind == JV_OBJECT || d->kind == JV_TRUE ||
					 d->kind == JV_FALSE)) {
			x = pair(s, SN_ANY, absent(s, deps->k[i], deps->klen[i]),
				 pair(s, SN_ALL, present(s, deps->k[i], deps->klen[i], NULL),
				      s->norm(s, d)));
		} else {
			sc_fail(s, "\"%s\" must map names to %s", keyword,
				want == 1 ? "arrays of names" : want == 2 ? "schemas"
				: "arrays of names or schemas");
			x = NULL;
		}
		sc_pop(s, old);
		if (sc_list_push(s, out, x))
			return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Complements                                                                                */
/* ------------------------------------------------------------------------------------------ */

static struct sn *negate(struct schema *s, const struct jv *n, uint32_t depth);

static int key_is(const struct jv *obj, uint32_t i, const char *name)
{
	return strlen(name) == obj->klen[i] && !memcmp(obj->k[i], name, obj->klen[i]);
}

/* A plain node of the given types (typed). */
static struct sn *of_types(struct schema *s, uint32_t types)
{
	struct sn *x = sc_node(s, SN_PLAIN);
	if (x) {
		x->types = types;
		x->typed = 1;
	}
	return x;
}

/* A count keyword's complement: below n (max n - 1) or above it (min n + 1). */
static struct sn *count_outside(struct schema *s, const struct jv *v, const char *name,
				uint32_t types, int was_min)
{
	uint32_t n;
	if (sc_count(s, v, name, &n))
		return NULL;
	if (was_min && n == 0)
		return sc_node(s, SN_FALSE); /* at least 0 holds always */
	struct sn *x = of_types(s, types);
	if (!x)
		return NULL;
	uint32_t lo = was_min ? 0 : n + 1, hi = was_min ? n - 1 : GR_INF;
	if (types == T_STR)
		x->min_len = lo, x->max_len = hi;
	else if (types == T_ARR)
		x->min_items = lo, x->max_items = hi;
	else
		x->min_props = lo, x->max_props = hi;
	return x;
}

/* minimum/maximum (and their exclusive forms): the numbers on the other side. */
static struct sn *bound_outside(struct schema *s, const struct jv *obj, uint32_t i)
{
	const struct jv *v = obj->v[i];
	int upper = key_is(obj, i, "maximum") || key_is(obj, i, "exclusiveMaximum");
	int excl = key_is(obj, i, "exclusiveMinimum") || key_is(obj, i, "exclusiveMaximum");
	if (excl && (v->kind == JV_TRUE || v->kind == JV_FALSE))
		return sc_node(s, SN_FALSE); /* draft 4's flag: read with its bound */
	if (v->kind != JV_NUMBER) {
		sc_fail(s, "\"%.40s\" must be a number", obj->k[i]);
		return NULL;
	}
	if (!excl) { /* draft 4: the flag beside it makes the bound exclusive */
		const struct jv *flag = jv_get(obj, upper ? "exclusiveMaximum" : "exclusiveMinimum");
		excl = flag && flag->kind == JV_TRUE;
	}
	struct sn *x = of_types(s, T_INT | T_FRAC);
	if (x)
		sc_tighten(upper ? &x->lo : &x->hi, v, !excl, !upper);
	return x;
}

/* properties: some declared key present, with a value its schema refuses. */
static struct sn *properties_outside(struct schema *s, const struct jv *props, uint32_t depth)
{
	struct sn_list alts = { 0 };
	if (props->kind != JV_OBJECT) {
		sc_fail(s, "\"properties\" must be an object");
		return NULL;
	}
	for (uint32_t k = 0; k < props->n; k++) {
		struct sn *val = negate(s, props->v[k], depth + 1), *x = of_types(s, T_OBJ);
		struct sn_clause cl = { 0 };
		if (!val || !x || !(cl.props = gr_alloc(s->c, sizeof(*cl.props))))
			return NULL;
		cl.n_props = 1;
		cl.props[0] = (struct sn_prop){ props->k[k], props->klen[k], { 0 } };
		if (sc_list_push(s, &cl.props[0].v, val) || sc_add_clause(s, x, &cl) ||
		    sc_names_add(s, &x->required, &x->required_len, &x->n_required, &props->k[k],
				 &props->klen[k], 1) ||
		    sc_list_push(s, &alts, x))
			return NULL;
	}
	return either_of(s, SN_ANY, &alts);
}

/* Each of a list's complements, joined by kind (allOf's by anyOf, anyOf's by allOf). */
static struct sn *each_outside(struct schema *s, const struct jv *list, uint8_t kind,
			       uint32_t depth)
{
	struct sn_list l = { 0 };
	if (list->kind != JV_ARRAY || !list->n) {
		sc_fail(s, "\"allOf\" and \"anyOf\" must be non-empty arrays");
		return NULL;
	}
	for (uint32_t k = 0; k < list->n; k++)
		if (sc_list_push(s, &l, negate(s, list->v[k], depth + 1)))
			return NULL;
	return either_of(s, kind, &l);
}

static struct sn *enum_outside(struct schema *s, const struct jv *v, int is_enum)
{
	struct sn *x = sc_node(s, SN_PLAIN);
	if (is_enum && v->kind != JV_ARRAY) {
		sc_fail(s, "\"enum\" must be an array");
		return NULL;
	}
	uint32_t n = is_enum ? v->n : 1;
	if (!x || !(x->nots = gr_alloc(s->c, (n ? n : 1) * sizeof(*x->nots))))
		return NULL;
	for (uint32_t k = 0; k < n; k++)
		x->nots[x->n_nots++] = is_enum ? v->v[k] : v;
	return x;
}

static struct sn *required_outside(struct schema *s, const struct jv *v)
{
	struct sn_list alts = { 0 };
	if (v->kind != JV_ARRAY) {
		sc_fail(s, "\"required\" must be an array of property names");
		return NULL;
	}
	if (!v->n)
		return sc_node(s, SN_FALSE); /* requiring nothing holds always */
	for (uint32_t k = 0; k < v->n; k++)
		if (v->v[k]->kind != JV_STRING ||
		    sc_list_push(s, &alts, absent(s, v->v[k]->s, v->v[k]->n)))
			return NULL;
	return pair(s, SN_ALL, of_types(s, T_OBJ), either_of(s, SN_ANY, &alts));
}

static struct sn *keyword_outside(struct schema *s, const struct jv *obj, uint32_t i,
				  uint32_t depth)
{
	static const struct {
		const char *name;
		uint32_t types;
		int was_min;
	} counts[] = {
		{ "minLength", T_STR, 1 }, { "maxLength", T_STR, 0 }, { "minItems", T_ARR, 1 },
		{ "maxItems", T_ARR, 0 }, { "minProperties", T_OBJ, 1 }, { "maxProperties", T_OBJ, 0 },
	};
	const struct jv *v = obj->v[i];
	for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
		if (key_is(obj, i, counts[k].name))
			return count_outside(s, v, counts[k].name, counts[k].types, counts[k].was_min);
	if (key_is(obj, i, "type")) {
		uint32_t t;
		return sc_read_types(s, v, &t) ? NULL : of_types(s, T_ALL & ~t);
	}
	if (key_is(obj, i, "enum") || key_is(obj, i, "const"))
		return enum_outside(s, v, key_is(obj, i, "enum"));
	if (key_is(obj, i, "required"))
		return required_outside(s, v);
	if (key_is(obj, i, "pattern") && v->kind == JV_STRING) {
		struct sn *x = of_types(s, T_STR);
		return x && !sc_add_text(s, x, SN_NOT_PATTERN, v) ? x : NULL;
	}
	if (key_is(obj, i, "minimum") || key_is(obj, i, "maximum") ||
	    key_is(obj, i, "exclusiveMinimum") || key_is(obj, i, "exclusiveMaximum"))
		return bound_outside(s, obj, i);
	if (key_is(obj, i, "properties"))
		return properties_outside(s, v, depth);
	if (key_is(obj, i, "allOf"))
		return each_outside(s, v, SN_ANY, depth);
	if (key_is(obj, i, "anyOf"))
		return each_outside(s, v, SN_ALL, depth);
	if (key_is(obj, i, "not"))
		return s->norm(s, v);
	if (key_is(obj, i, "$ref")) {
		const struct jv *res, *t = sc_resolve(s, v, &res);
		return t ? negate(s, t, depth + 1) : NULL;
	}
	sc_fail(s, "\"not\" (or if/then/else) of \"%.40s\" is not supported (only of type, enum, "
		"const, required, pattern, lengths, counts, bounds, properties, $ref, allOf, anyOf, "
		"not)", obj->k[i]);
	return NULL;
}

/* The values n refuses (n a schema). */
static struct sn *negate(struct schema *s, const struct jv *n, uint32_t depth)
{
	if (depth > NOT_DEPTH) {
		gr_fail(s->c, -E2BIG, "\"not\" nests deeper than %d (at %s)", NOT_DEPTH, s->path);
		return NULL;
	}
	if (n->kind == JV_TRUE || n->kind == JV_FALSE)
		return sc_node(s, n->kind == JV_TRUE ? SN_FALSE : SN_TRUE);
	if (n->kind != JV_OBJECT) {
		sc_fail(s, "a schema must be an object or a boolean");
		return NULL;
	}
	const struct jv *ref = sc_kw(s, n, "$ref");
	if (ref && (s->draft & (SC_DRAFT4 | SC_DRAFT6 | SC_DRAFT7))) {
		const struct jv *res, *t = sc_resolve(s, ref, &res);
		return t ? negate(s, t, depth + 1) : NULL; /* its siblings are ignored */
	}
	struct sn_list alts = { 0 };
	for (uint32_t i = 0; i < n->n; i++) {
		if (sc_keyword_role(s, n->k[i], n->klen[i]) != SC_KW_ASSERTS)
			continue;
		if (key_is(n, i, "exclusiveMinimum") || key_is(n, i, "exclusiveMaximum"))
			if (n->v[i]->kind == JV_TRUE || n->v[i]->kind == JV_FALSE)
				continue; /* read with minimum/maximum */
		if (sc_list_push(s, &alts, keyword_outside(s, n, i, depth)))
			return NULL;
	}
	return either_of(s, SN_ANY, &alts); /* nothing asserted: the complement of everything */
}

/* ------------------------------------------------------------------------------------------ */
/* The keywords                                                                               */
/* ------------------------------------------------------------------------------------------ */

static struct sn *if_then_else(struct schema *s, const struct jv *cond, const struct jv *then,
			       const struct jv *otherwise)
{
	size_t old = sc_push(s, "if", NULL);
	struct sn *yes = s->norm(s, cond), *no = yes ? negate(s, cond, 0) : NULL;
	sc_pop(s, old);
	struct sn *a = then ? s->norm(s, then) : sc_node(s, SN_TRUE);
	struct sn *b = otherwise ? s->norm(s, otherwise) : sc_node(s, SN_TRUE);
	return pair(s, SN_ANY, pair(s, SN_ALL, yes, a), pair(s, SN_ALL, no, b));
}

int sc_read_conditions(struct schema *s, const struct jv *obj, struct sn_list *kids)
{
	const struct jv *not = sc_kw(s, obj, "not"), *deps = sc_kw(s, obj, "dependencies");
	const struct jv *dreq = sc_kw(s, obj, "dependentRequired");
	const struct jv *dsch = sc_kw(s, obj, "dependentSchemas");
	const struct jv *cond = sc_kw(s, obj, "if"), *then = sc_kw(s, obj, "then");
	const struct jv *otherwise = sc_kw(s, obj, "else");
	if (not) {
		size_t old = sc_push(s, "not", NULL);
		struct sn *x = negate(s, not, 0);
		sc_pop(s, old);
		if (sc_list_push(s, kids, x))
			return -1;
	}
	/* then and else without if assert nothing, nor does if alone */
	if (cond && (then || otherwise) &&
	    sc_list_push(s, kids, if_then_else(s, cond, then, otherwise)))
		return -1;
	return (deps && read_dependencies(s, deps, "dependencies", 0, kids)) ||
	       (dreq && read_dependencies(s, dreq, "dependentRequired", 1, kids)) ||
	       (dsch && read_dependencies(s, dsch, "dependentSchemas", 2, kids));
}
