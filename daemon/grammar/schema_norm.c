/* SPDX-License-Identifier: MIT */
/*
 * schema_norm.c — a schema object read as a node (schema.h) per its draft (schema_doc.c):
 * the keywords that assert become the node's fields; applicators become kids of an SN_ALL
 * (allOf, $ref where the draft applies its siblings), an SN_ANY (anyOf) or an SN_ONE (oneOf);
 * in drafts 4 to 7 a $ref's siblings are ignored, as the specification says. Conditions
 * (dependencies, not, if/then/else) are schema_cond.c's. What asserts and cannot be enforced
 * (unevaluatedItems, $dynamicRef, $recursiveRef, standard formats without an expression here)
 * is refused with its name and location, never ignored.
 */
#include "schema.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static struct sn *norm_object(struct schema *s, const struct jv *node);

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

/* enum and const: the values both allow. */
static int read_literals(struct schema *s, const struct jv *obj, struct sn *p)
{
	const struct jv *e = sc_kw(s, obj, "enum"), *k = sc_kw(s, obj, "const");
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
	const struct jv *v = sc_kw(s, obj, name), *ex = sc_kw(s, obj, ex_name);
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
	const struct jv *m = sc_kw(s, obj, "multipleOf");
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

/* The formats JSON Schema defines that no expression here enforces. */
static int standard_unsupported(const struct jv *f)
{
	static const char *const names[] = { "idn-hostname", "uri-template" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strlen(names[i]) == f->n && !memcmp(names[i], f->s, f->n))
			return 1;
	return 0;
}

static int read_format(struct schema *s, const struct jv *obj, struct sn *p)
{
	const struct jv *f = sc_kw(s, obj, "format");
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
		return sc_add_text(s, p, SN_FORMAT, f);
	}
	if (standard_unsupported(f))
		return sc_fail(s, "\"format\": \"%.40s\" is not supported", f->s);
	return 0; /* a format JSON Schema does not define asserts nothing */
}

static int read_strings(struct schema *s, const struct jv *obj, struct sn *p)
{
	const struct jv *lo = sc_kw(s, obj, "minLength"), *hi = sc_kw(s, obj, "maxLength");
	const struct jv *pat = sc_kw(s, obj, "pattern");
	if ((lo && sc_count(s, lo, "minLength", &p->min_len)) ||
	    (hi && sc_count(s, hi, "maxLength", &p->max_len)))
		return -1;
	if (pat && pat->kind != JV_STRING)
		return sc_fail(s, "\"pattern\" must be a string");
	if (lo || hi || pat)
		p->families |= T_STR;
	if (pat && sc_add_text(s, p, SN_PATTERN, pat))
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
	const struct jv *c = sc_kw(s, obj, "contains");
	if (!c)
		return 0;
	const struct jv *lo = sc_kw(s, obj, "minContains"), *hi = sc_kw(s, obj, "maxContains");
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
	const struct jv *items = sc_kw(s, obj, "items"), *prefix = sc_kw(s, obj, "prefixItems");
	const struct jv *extra = jv_get(obj, "additionalItems"), *u = sc_kw(s, obj, "uniqueItems");
	const struct jv *lo = sc_kw(s, obj, "minItems"), *hi = sc_kw(s, obj, "maxItems");
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
	if (sc_kw(s, obj, "unevaluatedItems"))
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

static int read_clause(struct schema *s, const struct jv *obj, struct sn *p)
{
	const struct jv *props = sc_kw(s, obj, "properties"), *pats = sc_kw(s, obj, "patternProperties");
	const struct jv *ap = sc_kw(s, obj, "additionalProperties");
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
	return sc_add_clause(s, p, &cl);
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
	const struct jv *u = sc_kw(s, obj, "unevaluatedProperties");
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
	return sc_add_clause(s, p, &cl);
}

static int read_objects(struct schema *s, const struct jv *obj, struct sn *p)
{
	const struct jv *req = sc_kw(s, obj, "required"), *names = sc_kw(s, obj, "propertyNames");
	const struct jv *lo = sc_kw(s, obj, "minProperties"), *hi = sc_kw(s, obj, "maxProperties");
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
/* Schemas                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static int read_plain(struct schema *s, const struct jv *obj, struct sn *p)
{
	const struct jv *type = sc_kw(s, obj, "type");
	if (type) {
		if (sc_read_types(s, type, &p->types))
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

static int read_applicators(struct schema *s, const struct jv *obj, struct sn_list *kids)
{
	const struct jv *all = sc_kw(s, obj, "allOf"), *any = sc_kw(s, obj, "anyOf");
	const struct jv *one_of = sc_kw(s, obj, "oneOf"), *ref = sc_kw(s, obj, "$ref");
	static const char *const refused[] = { "$dynamicRef", "$recursiveRef" };
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		if (sc_kw(s, obj, refused[i]))
			return sc_fail(s, "\"%s\" is not supported", refused[i]);
	if (ref && sc_list_push(s, kids, sc_ref_node(s, ref)))
		return -1;
	if ((all && kids_of(s, all, "allOf", SN_ALL, kids)) ||
	    (any && kids_of(s, any, "anyOf", SN_ANY, kids)) ||
	    (one_of && kids_of(s, one_of, "oneOf", SN_ONE, kids)))
		return -1;
	return sc_read_conditions(s, obj, kids);
}

static struct sn *norm_object(struct schema *s, const struct jv *obj)
{
	const struct jv *ref = sc_kw(s, obj, "$ref");
	if (ref && (s->draft & (SC_DRAFT4 | SC_DRAFT6 | SC_DRAFT7)))
		return sc_ref_node(s, ref); /* drafts 4 to 7 ignore a $ref's siblings */
	struct sn *p = sc_node(s, SN_PLAIN);
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
	int64_t had = sc_memo_get(s->nodes, &key, 1);
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
	if (x && sc_memo_put(s, &s->nodes, &key, 1, (int64_t)(uintptr_t)x))
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
