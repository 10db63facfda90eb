/* SPDX-License-Identifier: MIT */
/*
 * schema_norm.c — a schema object read as a node (schema.h) per its draft (schema_doc.c):
 * the keywords that assert become the node's fields; applicators become kids of an SN_ALL
 * (allOf, $ref where the draft applies its siblings), an SN_ANY (anyOf) or an SN_ONE (oneOf);
 * in drafts 4 to 7 a $ref's siblings are ignored, as the specification says. Conditions
 * become disjunctions that are disjoint by construction: dependentRequired and
 * dependentSchemas (draft 4-7 dependencies) are "the key is absent, or it is present and
 * ...", and `not` around type, enum, const, required or pattern is the complement of each.
 * What asserts and cannot be enforced (if/then/else, not around anything else,
 * unevaluatedItems, $dynamicRef, $recursiveRef, standard formats without an expression here)
 * is refused with its name and location, never ignored.
 */
#include "schema.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static struct sn *norm_object(struct schema *s, const struct jv *node);

static int key_is(const struct jv *obj, uint32_t i, const char *name)
{
	return strlen(name) == obj->klen[i] && !memcmp(obj->k[i], name, obj->klen[i]);
}

/* The member if the draft reads it as an asserting keyword, else NULL. */
static const struct jv *kw(const struct schema *s, const struct jv *obj, const char *name)
{
	if (sc_keyword_role(s, name, (uint32_t)strlen(name)) != SC_KW_ASSERTS)
		return NULL;
	return jv_get(obj, name);
}

static struct sn *child(struct schema *s, const struct jv *v, const char *a, const char *b)
{
	size_t old = sc_push(s, a, b);
	struct sn *x = sc_norm(s, v);
	sc_pop(s, old);
	return x;
}

static struct sn *child_index(struct schema *s, const struct jv *v, const char *a, size_t i)
{
	size_t old = sc_push_index(s, a, i);
	struct sn *x = sc_norm(s, v);
	sc_pop(s, old);
	return x;
}

static int one(struct schema *s, struct sn_list *l, struct sn *x)
{
	*l = (struct sn_list){ 0 };
	return sc_list_push(s, l, x);
}

/* ------------------------------------------------------------------------------------------ */
/* Types, literals, numbers                                                                   */
/* ------------------------------------------------------------------------------------------ */

static int type_bits(struct schema *s, const struct jv *t, uint32_t *out)
{
	static const struct {
		const char *name;
		uint32_t bits;
	} names[] = {
		{ "null", T_NULL }, { "boolean", T_BOOL }, { "integer", T_INT },
		{ "number", T_INT | T_FRAC }, { "string", T_STR }, { "array", T_ARR },
		{ "object", T_OBJ },
	};
	if (t->kind != JV_STRING)
		return sc_fail(s, "\"type\" must name types");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strlen(names[i].name) == t->n && !memcmp(names[i].name, t->s, t->n)) {
			*out |= names[i].bits;
			return 0;
		}
	return sc_fail(s, "\"type\" \"%.40s\" is not a JSON Schema type", t->s);
}

static int read_types(struct schema *s, const struct jv *type, uint32_t *out)
{
	*out = 0;
	if (type->kind == JV_STRING)
		return type_bits(s, type, out);
	if (type->kind != JV_ARRAY || type->n == 0)
		return sc_fail(s, "\"type\" must be a type or a non-empty array of types");
	for (uint32_t i = 0; i < type->n; i++)
		if (type_bits(s, type->v[i], out))
			return -1;
	return 0;
}

/* enum and const: the values both allow. */
static int read_literals(struct schema *s, const struct jv *obj, struct sn *p)
{
	const struct jv *e = kw(s, obj, "enum"), *k = kw(s, obj, "const");
	if (!e && !k)
		return 0;
	if (e && e->kind != JV_ARRAY)
		return sc_fail(s, "\"enum\" must be an array");
	uint32_t n = e ? e->n : 1;
	p->lits = gr_alloc(s->c, (n ? n : 1) * sizeof(*p->lits));
	if (!p->lits)
		return -1;
	p->has_lits = 1;
	for (uint32_t i = 0; i < n; i++) {
		const struct jv *v = e ? e->v[i] : k;
		if (!e || !k || jv_equal(v, k))
			p->lits[p->n_lits++] = v;
	}
	return 0;
}

const struct jv *sc_number_constant(struct schema *s, const char *text)
{
	return jv_parse(s->c, text, strlen(text));
}

static int read_bound(struct schema *s, const struct jv *obj, struct sn *p, int upper)
{
	const char *name = upper ? "maximum" : "minimum";
	const char *ex_name = upper ? "exclusiveMaximum" : "exclusiveMinimum";
	const struct jv *v = kw(s, obj, name), *ex = kw(s, obj, ex_name);
	struct sn_bound *b = upper ? &p->hi : &p->lo;
	if (v && v->kind != JV_NUMBER)
		return sc_fail(s, "\"%s\" must be a number", name);
	/* Draft 4's boolean form reads the same in every draft: it has no other meaning. */
	int old_style = ex && (ex->kind == JV_TRUE || ex->kind == JV_FALSE);
	if (ex && !old_style && ex->kind != JV_NUMBER)
		return sc_fail(s, "\"%s\" must be a number", ex_name);
	if (v)
		sc_tighten(b, v, old_style && ex->kind == JV_TRUE, upper);
	if (ex && !old_style)
		sc_tighten(b, ex, 1, upper);
	if (v || (ex && !old_style))
		p->families |= T_INT | T_FRAC;
	return 0;
}

static int read_numbers(struct schema *s, const struct jv *obj, struct sn *p)
{
	if (read_bound(s, obj, p, 0) || read_bound(s, obj, p, 1))
		return -1;
	const struct jv *m = kw(s, obj, "multipleOf");
	if (!m)
		return 0;
	if (m->kind != JV_NUMBER || m->dec.neg || m->dec.digits[0] == '0')
		return sc_fail(s, "\"multipleOf\" must be a number above 0");
	p->mult = gr_alloc(s->c, sizeof(*p->mult));
	if (!p->mult)
		return -1;
	p->mult[p->n_mult++] = m;
	p->families |= T_INT | T_FRAC;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Strings and formats                                                                        */
/* ------------------------------------------------------------------------------------------ */

static int add_text(struct schema *s, struct sn *p, int kind, const struct jv *v)
{
	struct sn_text *t = gr_alloc(s->c, ((size_t)p->n_texts + 1) * sizeof(*t));
	if (!t)
		return -1;
	if (p->n_texts)
		memcpy(t, p->texts, p->n_texts * sizeof(*t));
	t[p->n_texts++] = (struct sn_text){ (uint8_t)kind, v->s, v->n, sc_where(s) };
	p->texts = t;
	return 0;
}

/* The formats JSON Schema defines that no expression here enforces. */
static int standard_unsupported(const struct jv *f)
{
	static const char *const names[] = { "idn-hostname", "uri-template", "regex" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strlen(names[i]) == f->n && !memcmp(names[i], f->s, f->n))
			return 1;
	return 0;
}

static int read_format(struct schema *s, const struct jv *obj, struct sn *p)
{
	const struct jv *f = kw(s, obj, "format");
	if (!f)
		return 0;
	if (f->kind != JV_STRING)
		return sc_fail(s, "\"format\" must be a string");
	if (sc_format_numeric(f->s, f->n)) {
		int64_t bits = f->s[3] == '3' ? 31 : 63;
		const struct jv *lo = sc_number_constant(s, bits == 31 ? "-2147483648"
							 : "-9223372036854775808");
		const struct jv *hi = sc_number_constant(s, bits == 31 ? "2147483647"
							 : "9223372036854775807");
		if (!lo || !hi)
			return -1;
		sc_tighten(&p->lo, lo, 0, 0);
		sc_tighten(&p->hi, hi, 0, 1);
		return 0;
	}
	if (sc_format_known(f->s, f->n)) {
		p->families |= T_STR;
		return add_text(s, p, SN_FORMAT, f);
	}
	if (standard_unsupported(f))
		return sc_fail(s, "\"format\": \"%.40s\" is not supported", f->s);
	return 0; /* a format JSON Schema does not define asserts nothing */
}

static int read_strings(struct schema *s, const struct jv *obj, struct sn *p)
{
	const struct jv *lo = kw(s, obj, "minLength"), *hi = kw(s, obj, "maxLength");
	const struct jv *pat = kw(s, obj, "pattern");
	if ((lo && sc_count(s, lo, "minLength", &p->min_len)) ||
	    (hi && sc_count(s, hi, "maxLength", &p->max_len)))
		return -1;
	if (pat && pat->kind != JV_STRING)
		return sc_fail(s, "\"pattern\" must be a string");
	if (lo || hi || pat)
		p->families |= T_STR;
	if (pat && add_text(s, p, SN_PATTERN, pat))
		return -1;
	return read_format(s, obj, p);
}

/* ------------------------------------------------------------------------------------------ */
/* Arrays                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static int read_prefix(struct schema *s, const struct jv *list, const char *name, struct sn *p)
{
	p->n_prefix = list->n;
	p->prefix = gr_alloc(s->c, (list->n ? list->n : 1) * sizeof(*p->prefix));
	if (!p->prefix)
		return -1;
	for (uint32_t i = 0; i < list->n; i++)
		if (one(s, &p->prefix[i], child_index(s, list->v[i], name, i)))
			return -1;
	return 0;
}

static int read_contains(struct schema *s, const struct jv *obj, struct sn *p)
{
	const struct jv *c = kw(s, obj, "contains");
	if (!c)
		return 0;
	const struct jv *lo = kw(s, obj, "minContains"), *hi = kw(s, obj, "maxContains");
	struct sn_contains *x = gr_alloc(s->c, sizeof(*x));
	if (!x || one(s, &x->v, child(s, c, "contains", NULL)))
		return -1;
	x->min = 1;
	x->max = GR_INF;
	if ((lo && sc_count(s, lo, "minContains", &x->min)) ||
	    (hi && sc_count(s, hi, "maxContains", &x->max)))
		return -1;
	p->contains = x;
	p->n_contains = 1;
	return 0;
}

static int read_arrays(struct schema *s, const struct jv *obj, struct sn *p)
{
	const struct jv *items = kw(s, obj, "items"), *prefix = kw(s, obj, "prefixItems");
	const struct jv *extra = jv_get(obj, "additionalItems"), *u = kw(s, obj, "uniqueItems");
	const struct jv *lo = kw(s, obj, "minItems"), *hi = kw(s, obj, "maxItems");
	if ((lo && sc_count(s, lo, "minItems", &p->min_items)) ||
	    (hi && sc_count(s, hi, "maxItems", &p->max_items)))
		return -1;
	if (items && items->kind == JV_ARRAY) {
		/* The tuple form: 2020-12 has none, and reads it as 2019-09 did (with
		 * additionalItems), the only meaning it has. */
		if (prefix)
			return sc_fail(s, "\"items\" as an array together with \"prefixItems\"");
		if (read_prefix(s, items, "items", p))
			return -1;
		if (extra && one(s, &p->items, child(s, extra, "additionalItems", NULL)))
			return -1;
	} else {
		if (prefix && prefix->kind != JV_ARRAY)
			return sc_fail(s, "\"prefixItems\" must be an array");
		if (prefix && read_prefix(s, prefix, "prefixItems", p))
			return -1;
		if (items && one(s, &p->items, child(s, items, "items", NULL)))
			return -1;
	}
	if (kw(s, obj, "unevaluatedItems"))
		return sc_fail(s, "\"unevaluatedItems\" is not supported");
	if (u && u->kind != JV_TRUE && u->kind != JV_FALSE)
		return sc_fail(s, "\"uniqueItems\" must be a boolean");
	p->unique = u && u->kind == JV_TRUE;
	if (read_contains(s, obj, p))
		return -1;
	if (items || prefix || lo || hi || p->unique || p->n_contains)
		p->families |= T_ARR;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Objects                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static int read_props(struct schema *s, const struct jv *props, struct sn_clause *cl)
{
	if (props->kind != JV_OBJECT)
		return sc_fail(s, "\"properties\" must be an object");
	cl->n_props = props->n;
	cl->props = gr_alloc(s->c, (props->n ? props->n : 1) * sizeof(*cl->props));
	if (!cl->props)
		return -1;
	for (uint32_t i = 0; i < props->n; i++) {
		cl->props[i].name = props->k[i];
		cl->props[i].len = props->klen[i];
		if (one(s, &cl->props[i].v, child(s, props->v[i], "properties", props->k[i])))
			return -1;
	}
	return 0;
}

static int read_patterns(struct schema *s, const struct jv *pats, struct sn_clause *cl)
{
	if (pats->kind != JV_OBJECT)
		return sc_fail(s, "\"patternProperties\" must be an object");
	cl->n_pats = pats->n;
	cl->pats = gr_alloc(s->c, (pats->n ? pats->n : 1) * sizeof(*cl->pats));
	if (!cl->pats)
		return -1;
	for (uint32_t i = 0; i < pats->n; i++) {
		struct jv *re = gr_alloc(s->c, sizeof(*re));
		if (!re)
			return -1;
		*re = (struct jv){ .kind = JV_STRING, .s = pats->k[i], .n = pats->klen[i] };
		size_t old = sc_push(s, "patternProperties", pats->k[i]);
		cl->pats[i].re = re;
		cl->pats[i].where = sc_where(s);
		struct sn *x = sc_norm(s, pats->v[i]);
		sc_pop(s, old);
		if (one(s, &cl->pats[i].v, x))
			return -1;
	}
	return 0;
}

static int add_clause(struct schema *s, struct sn *p, const struct sn_clause *cl)
{
	struct sn_clause *v = gr_alloc(s->c, ((size_t)p->n_clauses + 1) * sizeof(*v));
	if (!v)
		return -1;
	if (p->n_clauses)
		memcpy(v, p->clauses, p->n_clauses * sizeof(*v));
	v[p->n_clauses++] = *cl;
	p->clauses = v;
	return 0;
}

static int read_clause(struct schema *s, const struct jv *obj, struct sn *p)
{
	const struct jv *props = kw(s, obj, "properties"), *pats = kw(s, obj, "patternProperties");
	const struct jv *ap = kw(s, obj, "additionalProperties");
	struct sn_clause cl = { 0 };
	if (!props && !pats && !ap)
		return 0;
	if ((props && read_props(s, props, &cl)) || (pats && read_patterns(s, pats, &cl)))
		return -1;
	if (ap) {
		if (ap->kind != JV_TRUE && ap->kind != JV_FALSE && ap->kind != JV_OBJECT)
			return sc_fail(s, "\"additionalProperties\" must be a boolean or a schema");
		cl.has_ap = 1;
		if (ap->kind != JV_TRUE &&
		    one(s, &cl.ap, child(s, ap, "additionalProperties", NULL)))
			return -1;
	}
	p->families |= T_OBJ;
	return add_clause(s, p, &cl);
}

static int read_names(struct schema *s, const struct jv *arr, const char *keyword,
		      const char ***names, uint32_t **lens, uint32_t *n)
{
	if (arr->kind != JV_ARRAY)
		return sc_fail(s, "\"%s\" must be an array of property names", keyword);
	*names = gr_alloc(s->c, (arr->n ? arr->n : 1) * sizeof(**names));
	*lens = gr_alloc(s->c, (arr->n ? arr->n : 1) * sizeof(**lens));
	if (!*names || !*lens)
		return -1;
	for (uint32_t i = 0; i < arr->n; i++) {
		if (arr->v[i]->kind != JV_STRING)
			return sc_fail(s, "\"%s\" must be an array of property names", keyword);
		(*names)[i] = arr->v[i]->s;
		(*lens)[i] = arr->v[i]->n;
	}
	*n = arr->n;
	return 0;
}

/* Keys evaluated by a schema itself and the schemas always applied with it (allOf, $ref),
 * for unevaluatedProperties. Branches of anyOf/oneOf are left out: a key they declare is
 * then not written, which narrows and never invalidates. */
static int evaluated(struct schema *s, const struct jv *obj, struct sn_clause *cl, int depth)
{
	if (!obj || obj->kind != JV_OBJECT || depth > 16)
		return 0;
	const struct jv *props = jv_get(obj, "properties"), *pats = jv_get(obj, "patternProperties");
	for (uint32_t i = 0; props && props->kind == JV_OBJECT && i < props->n; i++) {
		struct sn_prop *v = gr_alloc(s->c, ((size_t)cl->n_props + 1) * sizeof(*v));
		if (!v)
			return -1;
		if (cl->n_props)
			memcpy(v, cl->props, cl->n_props * sizeof(*v));
		v[cl->n_props++] = (struct sn_prop){ props->k[i], props->klen[i], { 0 } };
		cl->props = v;
	}
	for (uint32_t i = 0; pats && pats->kind == JV_OBJECT && i < pats->n; i++) {
		struct sn_pattern *v = gr_alloc(s->c, ((size_t)cl->n_pats + 1) * sizeof(*v));
		struct jv *re = gr_alloc(s->c, sizeof(*re));
		if (!v || !re)
			return -1;
		if (cl->n_pats)
			memcpy(v, cl->pats, cl->n_pats * sizeof(*v));
		*re = (struct jv){ .kind = JV_STRING, .s = pats->k[i], .n = pats->klen[i] };
		v[cl->n_pats++] = (struct sn_pattern){ re, sc_where(s), { 0 } };
		cl->pats = v;
	}
	const struct jv *all = jv_get(obj, "allOf"), *ref = jv_get(obj, "$ref");
	for (uint32_t i = 0; all && all->kind == JV_ARRAY && i < all->n; i++)
		if (evaluated(s, all->v[i], cl, depth + 1))
			return -1;
	if (ref) {
		const struct jv *res, *t = sc_resolve(s, ref, &res);
		if (!t || evaluated(s, t, cl, depth + 1))
			return -1;
	}
	return 0;
}

static int read_unevaluated(struct schema *s, const struct jv *obj, struct sn *p)
{
	const struct jv *u = kw(s, obj, "unevaluatedProperties");
	if (!u)
		return 0;
	if (u->kind != JV_TRUE && u->kind != JV_FALSE && u->kind != JV_OBJECT)
		return sc_fail(s, "\"unevaluatedProperties\" must be a boolean or a schema");
	if (u->kind == JV_TRUE)
		return 0;
	struct sn_clause cl = { .has_ap = 1 };
	if (evaluated(s, obj, &cl, 0) || one(s, &cl.ap, child(s, u, "unevaluatedProperties", NULL)))
		return -1;
	p->families |= T_OBJ;
	return add_clause(s, p, &cl);
}

static int read_objects(struct schema *s, const struct jv *obj, struct sn *p)
{
	const struct jv *req = kw(s, obj, "required"), *names = kw(s, obj, "propertyNames");
	const struct jv *lo = kw(s, obj, "minProperties"), *hi = kw(s, obj, "maxProperties");
	if (read_clause(s, obj, p) || read_unevaluated(s, obj, p))
		return -1;
	if (req && read_names(s, req, "required", &p->required, &p->required_len, &p->n_required))
		return -1;
	if ((lo && sc_count(s, lo, "minProperties", &p->min_props)) ||
	    (hi && sc_count(s, hi, "maxProperties", &p->max_props)))
		return -1;
	if (names && one(s, &p->names, child(s, names, "propertyNames", NULL)))
		return -1;
	if (req || names || lo || hi)
		p->families |= T_OBJ;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Conditions as disjunctions                                                                 */
/* ------------------------------------------------------------------------------------------ */

static struct sn *plain(struct schema *s)
{
	return sc_node(s, SN_PLAIN);
}

/* An object without key (every other value passes). */
static struct sn *absent(struct schema *s, const char *key, uint32_t len)
{
	struct sn *x = plain(s);
	if (!x || sc_names_add(s, &x->forbidden, &x->forbidden_len, &x->n_forbidden, &key, &len, 1))
		return NULL;
	return x;
}

/* An object with the keys (every other value passes). */
static struct sn *present(struct schema *s, const char *key, uint32_t len,
			  const struct jv *others)
{
	struct sn *x = plain(s);
	uint32_t n = 1 + (others ? others->n : 0);
	if (!x || !(x->required = gr_alloc(s->c, n * sizeof(*x->required))) ||
	    !(x->required_len = gr_alloc(s->c, n * sizeof(*x->required_len))))
		return NULL;
	x->required[0] = key;
	x->required_len[0] = len;
	x->n_required = 1;
	for (uint32_t i = 0; others && i < others->n; i++) {
		if (others->v[i]->kind != JV_STRING) {
			sc_fail(s, "a dependency must name properties");
			return NULL;
		}
		x->required[x->n_required] = others->v[i]->s;
		x->required_len[x->n_required++] = others->v[i]->n;
	}
	return x;
}

static struct sn *either(struct schema *s, struct sn *a, struct sn *b)
{
	struct sn *x = sc_node(s, SN_ANY);
	if (!x || !a || !b || !(x->kids = gr_alloc(s->c, 2 * sizeof(*x->kids))))
		return NULL;
	x->kids[0] = a;
	x->kids[1] = b;
	x->n_kids = 2;
	return x;
}

static struct sn *both(struct schema *s, struct sn *a, struct sn *b)
{
	struct sn *x = sc_node(s, SN_ALL);
	if (!x || !a || !b || !(x->kids = gr_alloc(s->c, 2 * sizeof(*x->kids))))
		return NULL;
	x->kids[0] = a;
	x->kids[1] = b;
	x->n_kids = 2;
	return x;
}

/* dependencies (draft 4-7), dependentRequired and dependentSchemas: per key, "absent, or
 * present with the others / with the schema". */
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
			x = either(s, absent(s, deps->k[i], deps->klen[i]),
				   present(s, deps->k[i], deps->klen[i], d));
		} else if (want != 1 && (d->kind == JV_OBJECT || d->kind == JV_TRUE ||
					 d->kind == JV_FALSE)) {
			x = either(s, absent(s, deps->k[i], deps->klen[i]),
				   both(s, present(s, deps->k[i], deps->klen[i], NULL),
					sc_norm(s, d)));
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

/* `not` of one keyword: its complement. */
static struct sn *not_keyword(struct schema *s, const struct jv *obj, uint32_t i)
{
	const struct jv *v = obj->v[i];
	struct sn *x = plain(s);
	if (!x)
		return NULL;
	if (key_is(obj, i, "type")) {
		uint32_t t;
		if (read_types(s, v, &t))
			return NULL;
		x->types = T_ALL & ~t;
		x->typed = 1;
		return x;
	}
	if (key_is(obj, i, "enum") || key_is(obj, i, "const")) {
		/* Every value but these. */
		int is_enum = key_is(obj, i, "enum");
		if (is_enum && v->kind != JV_ARRAY) {
			sc_fail(s, "\"enum\" must be an array");
			return NULL;
		}
		uint32_t n = is_enum ? v->n : 1;
		if (!(x->nots = gr_alloc(s->c, (n ? n : 1) * sizeof(*x->nots))))
			return NULL;
		for (uint32_t k = 0; k < n; k++)
			x->nots[x->n_nots++] = is_enum ? v->v[k] : v;
		return x;
	}
	if (key_is(obj, i, "required")) {
		struct sn_list alts = { 0 };
		if (v->kind != JV_ARRAY || v->n == 0) {
			sc_fail(s, "\"required\" must be an array of property names");
			return NULL;
		}
		for (uint32_t k = 0; k < v->n; k++)
			if (v->v[k]->kind != JV_STRING ||
			    sc_list_push(s, &alts, absent(s, v->v[k]->s, v->v[k]->n)))
				return NULL;
		struct sn *any = sc_node(s, SN_ANY);
		if (!any)
			return NULL;
		any->kids = alts.v;
		any->n_kids = alts.n;
		x->types = T_OBJ;
		x->typed = 1;
		return both(s, x, any);
	}
	if (key_is(obj, i, "pattern") && v->kind == JV_STRING) {
		x->types = T_STR;
		x->typed = 1;
		if (add_text(s, x, SN_NOT_PATTERN, v))
			return NULL;
		return x;
	}
	sc_fail(s, "\"not\" is supported only around \"type\", \"enum\", \"const\", "
		"\"required\" and \"pattern\", not \"%.40s\"", obj->k[i]);
	return NULL;
}

static struct sn *read_not(struct schema *s, const struct jv *n)
{
	if (n->kind == JV_TRUE || n->kind == JV_FALSE)
		return sc_node(s, n->kind == JV_TRUE ? SN_FALSE : SN_TRUE);
	if (n->kind != JV_OBJECT) {
		sc_fail(s, "\"not\" must be a schema");
		return NULL;
	}
	/* not (a and b) = (not a) or (not b) */
	struct sn_list alts = { 0 };
	for (uint32_t i = 0; i < n->n; i++)
		if (sc_keyword_role(s, n->k[i], n->klen[i]) == SC_KW_ASSERTS &&
		    sc_list_push(s, &alts, not_keyword(s, n, i)))
			return NULL;
	if (alts.n == 0)
		return sc_node(s, SN_FALSE); /* not of a schema that accepts everything */
	if (alts.n == 1)
		return alts.v[0];
	struct sn *any = sc_node(s, SN_ANY);
	if (any) {
		any->kids = alts.v;
		any->n_kids = alts.n;
	}
	return any;
}

/* ------------------------------------------------------------------------------------------ */
/* Schemas                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static int read_plain(struct schema *s, const struct jv *obj, struct sn *p)
{
	const struct jv *type = kw(s, obj, "type");
	if (type) {
		if (read_types(s, type, &p->types))
			return -1;
		p->typed = 1;
	}
	return read_literals(s, obj, p) || read_numbers(s, obj, p) || read_strings(s, obj, p) ||
	       read_arrays(s, obj, p) || read_objects(s, obj, p);
}

static int kids_of(struct schema *s, const struct jv *arr, const char *name, uint8_t kind,
		   struct sn_list *out)
{
	if (arr->kind != JV_ARRAY || arr->n == 0)
		return sc_fail(s, "\"%s\" must be a non-empty array", name);
	struct sn_list kids = { 0 };
	for (uint32_t i = 0; i < arr->n; i++)
		if (sc_list_push(s, &kids, child_index(s, arr->v[i], name, i)))
			return -1;
	if (kind == SN_ALL)
		return sc_list_cat(s, out, &kids);
	struct sn *x = sc_node(s, kind);
	if (!x)
		return -1;
	x->kids = kids.v;
	x->n_kids = kids.n;
	return sc_list_push(s, out, x);
}

static struct sn *ref_node(struct schema *s, const struct jv *ref)
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

static int read_applicators(struct schema *s, const struct jv *obj, struct sn_list *kids)
{
	const struct jv *all = kw(s, obj, "allOf"), *any = kw(s, obj, "anyOf");
	const struct jv *one_of = kw(s, obj, "oneOf"), *not = kw(s, obj, "not");
	const struct jv *ref = kw(s, obj, "$ref"), *deps = kw(s, obj, "dependencies");
	const struct jv *dreq = kw(s, obj, "dependentRequired");
	const struct jv *dsch = kw(s, obj, "dependentSchemas");
	static const char *const refused[] = { "if", "$dynamicRef", "$recursiveRef" };
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		if (kw(s, obj, refused[i]))
			return sc_fail(s, "\"%s\" is not supported", refused[i]);
	if (ref && sc_list_push(s, kids, ref_node(s, ref)))
		return -1;
	if ((all && kids_of(s, all, "allOf", SN_ALL, kids)) ||
	    (any && kids_of(s, any, "anyOf", SN_ANY, kids)) ||
	    (one_of && kids_of(s, one_of, "oneOf", SN_ONE, kids)))
		return -1;
	if (not) {
		size_t old = sc_push(s, "not", NULL);
		struct sn *x = read_not(s, not);
		sc_pop(s, old);
		if (sc_list_push(s, kids, x))
			return -1;
	}
	return (deps && read_dependencies(s, deps, "dependencies", 0, kids)) ||
	       (dreq && read_dependencies(s, dreq, "dependentRequired", 1, kids)) ||
	       (dsch && read_dependencies(s, dsch, "dependentSchemas", 2, kids));
}

static struct sn *norm_object(struct schema *s, const struct jv *obj)
{
	const struct jv *ref = kw(s, obj, "$ref");
	if (ref && (s->draft & (SC_DRAFT4 | SC_DRAFT6 | SC_DRAFT7)))
		return ref_node(s, ref); /* drafts 4 to 7 ignore a $ref's siblings */
	struct sn *p = plain(s);
	struct sn_list kids = { 0 };
	if (!p || read_plain(s, obj, p) || sc_list_push(s, &kids, p) ||
	    read_applicators(s, obj, &kids))
		return NULL;
	if (sc_plain_is_empty(p)) {
		/* Annotations only: nothing to merge with the applicators. */
		p->kind = SN_TRUE;
		if (kids.n > 1)
			kids.v++, kids.n--;
	}
	if (kids.n == 1)
		return kids.v[0];
	struct sn *all = sc_node(s, SN_ALL);
	if (!all)
		return NULL;
	all->kids = kids.v;
	all->n_kids = kids.n;
	return all;
}

struct sn *sc_norm(struct schema *s, const struct jv *node)
{
	void *key = (void *)node;
	int64_t had = sc_memo_get(s->norm, &key, 1);
	if (had >= 0)
		return (struct sn *)(uintptr_t)had;
	if (gr_tick(s->c))
		return NULL;
	if (++s->depth > s->c->lim.max_depth) {
		gr_fail(s->c, -E2BIG, "the schema nests deeper than %u (at %s)", s->c->lim.max_depth,
			s->path);
		return NULL;
	}
	const struct jv *saved = s->resource;
	if (sc_starts_resource(s, node))
		s->resource = node;
	struct sn *x = NULL;
	if (node->kind == JV_TRUE || node->kind == JV_FALSE)
		x = sc_node(s, node->kind == JV_TRUE ? SN_TRUE : SN_FALSE);
	else if (node->kind != JV_OBJECT)
		sc_fail(s, "a schema must be an object or a boolean");
	else
		x = norm_object(s, node);
	s->resource = saved;
	s->depth--;
	if (x && sc_memo_put(s, &s->norm, &key, 1, (int64_t)(uintptr_t)x))
		return NULL;
	return x;
}

struct sn *sc_ref_target(struct schema *s, struct sn *ref)
{
	if (ref->to)
		return ref->to;
	char saved[sizeof(s->path)];
	const struct jv *res = s->resource;
	uint32_t depth = s->depth;
	memcpy(saved, s->path, sizeof(saved));
	snprintf(s->path, sizeof(s->path), "%s", ref->ref);
	s->resource = ref->target_resource;
	s->depth = 0;
	ref->to = sc_norm(s, ref->target);
	memcpy(s->path, saved, sizeof(saved));
	s->resource = res;
	s->depth = depth;
	return ref->to;
}
