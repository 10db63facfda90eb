/* SPDX-License-Identifier: MIT */
/*
 * schema.c — JSON Schema (frontends.h; README.md lists what is supported): the document read
 * (schema_doc.c), its schemas as nodes (schema_norm.c), and nodes to expressions here.
 *
 * What must hold together — a list of nodes — is opened into atoms: plain nodes, and the
 * disjunctions (anyOf, oneOf) still to choose from; $refs and allOf are looked through. One
 * disjunction at a time becomes alternatives, each with the branch's atoms added; once none
 * is left, the plain atoms are merged into one node (bounds tightened, string rules and
 * object clauses collected, items item by item) and that node becomes the expression of each
 * type it allows. A $ref used alone is a call of its target's rule; atoms reached through a
 * $ref are a rule too (keyed by the set of atoms), so recursion through allOf and siblings
 * ends in a call.
 *
 * Decisions where the standard leaves room, each keeping every output valid:
 *   - properties are written in the schema's order; an object whose schemas declare
 *     properties and say nothing of additional ones is closed (as OpenAI's strict mode and
 *     llama.cpp do), one that declares none is open;
 *   - without `type`, the kinds the schema's keywords describe (any value when none do);
 *   - JSON whitespace between tokens is bounded (bn_grammar_options.max_ws).
 */
#include "schema.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int grow(struct schema *s, struct sn ***v, uint32_t n, uint32_t *cap)
{
	if (n < *cap)
		return 0;
	uint32_t c = *cap ? *cap * 2 : 8;
	struct sn **w = gr_alloc(s->c, c * sizeof(*w));
	if (!w)
		return -1;
	if (n)
		memcpy(w, *v, n * sizeof(*w));
	*v = w;
	*cap = c;
	return 0;
}

int sc_atoms_add(struct schema *s, struct sc_atoms *a, struct sn *x)
{
	for (uint32_t i = 0; i < a->n; i++)
		if (a->v[i] == x)
			return 0;
	if (grow(s, &a->v, a->n, &a->cap))
		return -1;
	a->v[a->n++] = x;
	return 0;
}

static int collect(struct schema *s, struct sc_atoms *a, struct sn *x, uint32_t depth)
{
	if (!x)
		return -1;
	if (depth > 4 * s->c->lim.max_depth)
		return gr_fail(s->c, -E2BIG, "references and allOf nest deeper than %u (at %s)",
			       4 * s->c->lim.max_depth, x->where);
	switch (x->kind) {
	case SN_TRUE:
		return 0;
	case SN_FALSE:
		a->is_false = 1;
		return 0;
	case SN_PLAIN:
		return sc_atoms_add(s, a, x);
	case SN_REF: {
		struct sn *t = sc_ref_target(s, x);
		if (!t)
			return -1;
		for (uint32_t i = 0; i < a->n_seen; i++)
			if (a->seen[i] == t)
				return 0; /* X and X is X */
		if (grow(s, &a->seen, a->n_seen, &a->cap_seen))
			return -1;
		a->seen[a->n_seen++] = t;
		a->via_ref = 1;
		return collect(s, a, t, depth + 1);
	}
	case SN_ALL:
		for (uint32_t i = 0; i < x->n_kids; i++)
			if (collect(s, a, x->kids[i], depth + 1))
				return -1;
		return 0;
	}
	/* SN_ANY, SN_ONE */
	if (x->n_kids == 1)
		return collect(s, a, x->kids[0], depth + 1);
	return sc_atoms_add(s, a, x);
}

int sc_collect(struct schema *s, struct sc_atoms *a, struct sn *x)
{
	return collect(s, a, x, 0);
}

static int cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t) * (struct sn *const *)a, y = (uintptr_t) * (struct sn *const *)b;
	return x < y ? -1 : x > y;
}

/* ------------------------------------------------------------------------------------------ */
/* Merging plain nodes                                                                        */
/* ------------------------------------------------------------------------------------------ */

static int keep_common_literals(struct schema *s, struct sn *f, const struct sn *p)
{
	if (!f->has_lits) {
		f->lits = gr_alloc(s->c, (p->n_lits ? p->n_lits : 1) * sizeof(*f->lits));
		if (!f->lits)
			return -1;
		memcpy(f->lits, p->lits, p->n_lits * sizeof(*f->lits));
		f->n_lits = p->n_lits;
		f->has_lits = 1;
		return 0;
	}
	uint32_t w = 0;
	for (uint32_t i = 0; i < f->n_lits; i++)
		for (uint32_t k = 0; k < p->n_lits; k++)
			if (jv_equal(f->lits[i], p->lits[k])) {
				f->lits[w++] = f->lits[i];
				break;
			}
	f->n_lits = w;
	return 0;
}

/* dst = a followed by b (fresh storage: lists are shared between nodes). */
static int append_array(struct schema *s, void **dst, const void *a, uint32_t na, const void *b,
			uint32_t nb, size_t size)
{
	if (!nb)
		return 0;
	char *v = gr_alloc(s->c, (na + nb) * size);
	if (!v)
		return -1;
	memcpy(v, a, na * size);
	memcpy(v + na * size, b, nb * size);
	*dst = v;
	return 0;
}

static int merge_arrays(struct schema *s, struct sn *f, const struct sn *p)
{
	uint32_t n = f->n_prefix > p->n_prefix ? f->n_prefix : p->n_prefix;
	struct sn_list *prefix = gr_alloc(s->c, (n ? n : 1) * sizeof(*prefix));
	struct sn_list items = { 0 };
	if (!prefix)
		return -1;
	for (uint32_t i = 0; i < n; i++)
		if (sc_list_cat(s, &prefix[i], i < f->n_prefix ? &f->prefix[i] : &f->items) ||
		    sc_list_cat(s, &prefix[i], i < p->n_prefix ? &p->prefix[i] : &p->items))
			return -1;
	if (sc_list_cat(s, &items, &f->items) || sc_list_cat(s, &items, &p->items))
		return -1;
	f->prefix = prefix;
	f->n_prefix = n;
	f->items = items;
	if (p->min_items > f->min_items)
		f->min_items = p->min_items;
	if (p->max_items < f->max_items)
		f->max_items = p->max_items;
	f->unique |= p->unique;
	uint32_t nc = f->n_contains;
	if (append_array(s, (void **)&f->contains, f->contains, nc, p->contains, p->n_contains,
			 sizeof(*f->contains)))
		return -1;
	f->n_contains += p->n_contains;
	return 0;
}

static int merge_objects(struct schema *s, struct sn *f, const struct sn *p)
{
	uint32_t n = f->n_clauses;
	if (append_array(s, (void **)&f->clauses, f->clauses, n, p->clauses, p->n_clauses,
			 sizeof(*f->clauses)))
		return -1;
	f->n_clauses += p->n_clauses;
	if (sc_names_add(s, &f->required, &f->required_len, &f->n_required, p->required,
			 p->required_len, p->n_required) ||
	    sc_names_add(s, &f->forbidden, &f->forbidden_len, &f->n_forbidden, p->forbidden,
			 p->forbidden_len, p->n_forbidden))
		return -1;
	if (p->min_props > f->min_props)
		f->min_props = p->min_props;
	if (p->max_props < f->max_props)
		f->max_props = p->max_props;
	struct sn_list names = { 0 };
	if (sc_list_cat(s, &names, &f->names) || sc_list_cat(s, &names, &p->names))
		return -1;
	f->names = names;
	return 0;
}

static int merge_into(struct schema *s, struct sn *f, const struct sn *p)
{
	f->types &= p->types;
	f->typed |= p->typed;
	f->families |= p->families;
	if (p->has_lits && keep_common_literals(s, f, p))
		return -1;
	if (p->lo.v)
		sc_tighten(&f->lo, p->lo.v, p->lo.excl, 0);
	if (p->hi.v)
		sc_tighten(&f->hi, p->hi.v, p->hi.excl, 1);
	uint32_t n;
	n = f->n_nots;
	if (append_array(s, (void **)&f->nots, f->nots, n, p->nots, p->n_nots, sizeof(*f->nots)))
		return -1;
	f->n_nots += p->n_nots;
	n = f->n_mult;
	if (append_array(s, (void **)&f->mult, f->mult, n, p->mult, p->n_mult, sizeof(*f->mult)))
		return -1;
	f->n_mult += p->n_mult;
	n = f->n_texts;
	if (append_array(s, (void **)&f->texts, f->texts, n, p->texts, p->n_texts,
			 sizeof(*f->texts)))
		return -1;
	f->n_texts += p->n_texts;
	if (p->min_len > f->min_len)
		f->min_len = p->min_len;
	if (p->max_len < f->max_len)
		f->max_len = p->max_len;
	return merge_arrays(s, f, p) || merge_objects(s, f, p);
}

struct sn *sc_atoms_merge(struct schema *s, const struct sc_atoms *a)
{
	struct sn *f = sc_node(s, SN_PLAIN);
	int first = 1;
	if (!f)
		return NULL;
	for (uint32_t i = 0; i < a->n; i++) {
		if (a->v[i]->kind != SN_PLAIN)
			continue;
		if (first)
			f->where = a->v[i]->where, first = 0;
		if (merge_into(s, f, a->v[i]))
			return NULL;
	}
	return f;
}

int sc_flatten(struct schema *s, const struct sn_list *l, struct sn **out)
{
	struct sc_atoms a = { 0 };
	for (uint32_t i = 0; i < l->n; i++)
		if (collect(s, &a, l->v[i], 0))
			return -1;
	*out = a.is_false ? sc_node(s, SN_FALSE) : sc_atoms_merge(s, &a);
	return *out ? 0 : -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Values                                                                                     */
/* ------------------------------------------------------------------------------------------ */

struct ir_node *sc_literal(struct schema *s, const struct jv *v)
{
	size_t n;
	char *text = jv_write(s->c, v, &n);
	return text ? ir_literal(s->c, text, n) : NULL;
}

/* Any JSON value: the value rule's body, so its outermost level is expanded where used. */
static struct ir_node *any_value(struct schema *s)
{
	int64_t r = gr_json_value_rule(s->c);
	return r < 0 ? NULL : s->c->rules[r].body;
}

/* enum/const: the values that meet everything else. */
static struct ir_node *literals(struct schema *s, const struct sn *f)
{
	struct ir_list alts = { 0 };
	for (uint32_t i = 0; i < f->n_lits; i++) {
		int ok = sc_valid(s, f, f->lits[i]);
		if (ok < 0 || (ok && ir_list_push(s->c, &alts, sc_literal(s, f->lits[i]))))
			return NULL;
	}
	if (!alts.n)
		sc_note_why(s, "no value of \"enum\"/\"const\" meets the other constraints (at %s)",
			 f->where);
	return ir_alt(s->c, alts.n, alts.v);
}

uint32_t sc_written_types(const struct sn *f)
{
	uint32_t t = f->types;
	if (!f->typed && f->families)
		t &= f->families;
	return t;
}

static int excluded(const struct sn *f, const struct jv *v)
{
	for (uint32_t i = 0; i < f->n_nots; i++)
		if (jv_equal(f->nots[i], v))
			return 1;
	return 0;
}

static struct ir_node *of_types(struct schema *s, const struct sn *f)
{
	struct gr_ctx *c = s->c;
	struct ir_list alts = { 0 };
	uint32_t t = sc_written_types(f);
	struct jv null_v = { .kind = JV_NULL }, t_v = { .kind = JV_TRUE }, f_v = { .kind = JV_FALSE };
	if ((t & T_NULL) && !excluded(f, &null_v) && ir_list_push(c, &alts, ir_lit(c, "null")))
		return NULL;
	if ((t & T_BOOL) && !excluded(f, &t_v) && ir_list_push(c, &alts, ir_lit(c, "true")))
		return NULL;
	if ((t & T_BOOL) && !excluded(f, &f_v) && ir_list_push(c, &alts, ir_lit(c, "false")))
		return NULL;
	struct ir_node *x = NULL;
	if ((t & T_FRAC) && (t & T_INT))
		x = sc_number(s, f);
	else if (t & T_INT)
		x = sc_integer(s, f);
	else if (t & T_FRAC) {
		sc_fail(s, "numbers that are not integers (\"not\" {\"type\": \"integer\"}) are not "
			"supported");
		return NULL;
	}
	if ((t & (T_INT | T_FRAC)) && ir_list_push(c, &alts, x))
		return NULL;
	if ((t & T_STR) && ir_list_push(c, &alts, sc_string(s, f)))
		return NULL;
	if ((t & T_ARR) && ir_list_push(c, &alts, sc_array(s, f)))
		return NULL;
	if ((t & T_OBJ) && ir_list_push(c, &alts, sc_object(s, f)))
		return NULL;
	if (!alts.n)
		sc_note_why(s, "its constraints leave no type (at %s)", f->where);
	return ir_alt(c, alts.n, alts.v);
}

/* One merged node: its literals, or each type it is written as. */
static struct ir_node *gen_plain(struct schema *s, const struct sn *f)
{
	char saved[sizeof(s->path)];
	memcpy(saved, s->path, sizeof(saved));
	snprintf(s->path, sizeof(s->path), "%s", f->where);
	struct ir_node *x = f->has_lits ? literals(s, f) : of_types(s, f);
	memcpy(s->path, saved, sizeof(saved));
	return x;
}

/* ------------------------------------------------------------------------------------------ */
/* Atoms to expressions                                                                       */
/* ------------------------------------------------------------------------------------------ */

static struct ir_node *gen_atoms(struct schema *s, struct sc_atoms *a);

/* The alternatives of the first disjunction among the atoms, each branch with the rest. */
static struct ir_node *choose(struct schema *s, const struct sc_atoms *a, struct sn *d)
{
	struct sc_atoms *b = gr_alloc(s->c, d->n_kids * sizeof(*b));
	struct ir_list alts = { 0 };
	if (!b)
		return NULL;
	for (uint32_t i = 0; i < d->n_kids; i++) {
		b[i] = (struct sc_atoms){ .via_ref = a->via_ref };
		for (uint32_t k = 0; k < a->n; k++)
			if (a->v[k] != d && sc_atoms_add(s, &b[i], a->v[k]))
				return NULL;
		/* No $ref target counts as opened here: d, which one of them held, is gone, so a
		 * $ref back to it must bring it again (its memo turns the recursion into a call). */
		if (collect(s, &b[i], d->kids[i], 0))
			return NULL;
	}
	if (d->kind == SN_ONE && sc_one_of(s, d, b))
		return NULL;
	for (uint32_t i = 0; i < d->n_kids; i++)
		if (!b[i].is_false && ir_list_push(s->c, &alts, gen_atoms(s, &b[i])))
			return NULL;
	if (!alts.n)
		sc_note_why(s, "no branch of anyOf/oneOf can hold with the rest (at %s)", d->where);
	return ir_alt(s->c, alts.n, alts.v);
}

static struct ir_node *gen_body(struct schema *s, const struct sc_atoms *a)
{
	for (uint32_t i = 0; i < a->n; i++)
		if (a->v[i]->kind == SN_ANY || a->v[i]->kind == SN_ONE)
			return choose(s, a, a->v[i]);
	struct sn *f = sc_atoms_merge(s, a);
	return f ? gen_plain(s, f) : NULL;
}

static struct ir_node *gen_atoms(struct schema *s, struct sc_atoms *a)
{
	struct gr_ctx *c = s->c;
	if (gr_tick(c))
		return NULL;
	if (a->is_false)
		return ir_nothing(c);
	if (a->n == 0)
		return any_value(s);
	qsort(a->v, a->n, sizeof(*a->v), cmp_ptr);
	if (!a->via_ref)
		return gen_body(s, a);
	/* Reached through a $ref: the same atoms may come back below (recursion through allOf
	 * or siblings), so they are a rule, and a second visit is a call of it. */
	int64_t rule = sc_memo_get(s->rules, (void *const *)a->v, a->n);
	if (rule >= 0)
		return ir_call(c, (uint32_t)rule);
	if ((rule = gr_rule_new(c, a->v[0]->where)) < 0 ||
	    sc_memo_put(s, &s->rules, (void *const *)a->v, a->n, rule))
		return NULL;
	struct ir_node *body = gen_body(s, a);
	if (!body)
		return NULL;
	c->rules[rule].body = body;
	return ir_call(c, (uint32_t)rule);
}

/* A $ref alone: a call of its target's rule, made the first time. */
static struct ir_node *ref_call(struct schema *s, struct sn *ref)
{
	struct gr_ctx *c = s->c;
	struct sn *t = sc_ref_target(s, ref);
	if (!t)
		return NULL;
	if (t->rule >= 0)
		return ir_call(c, (uint32_t)t->rule);
	int64_t rule = gr_rule_new(c, ref->ref);
	if (rule < 0)
		return NULL;
	t->rule = rule;
	struct sn_list l = { &t, 1 };
	struct ir_node *body = sc_gen(s, &l);
	if (!body)
		return NULL;
	c->rules[rule].body = body;
	return ir_call(c, (uint32_t)rule);
}

struct ir_node *sc_gen(struct schema *s, const struct sn_list *l)
{
	struct sn *only = NULL;
	uint32_t n = 0;
	for (uint32_t i = 0; i < l->n; i++)
		if (l->v[i]->kind != SN_TRUE)
			only = l->v[i], n++;
	if (n == 0)
		return any_value(s);
	if (n == 1 && only->kind == SN_REF)
		return ref_call(s, only);
	if (n == 1 && only->kind == SN_PLAIN)
		return gen_plain(s, only);
	struct sc_atoms a = { 0 };
	for (uint32_t i = 0; i < l->n; i++)
		if (collect(s, &a, l->v[i], 0))
			return NULL;
	return gen_atoms(s, &a);
}

/* ------------------------------------------------------------------------------------------ */
/* The document                                                                               */
/* ------------------------------------------------------------------------------------------ */

int gr_schema(struct gr_ctx *c, const char *text, size_t len)
{
	struct schema s = { .c = c, .path = "#" };
	s.doc = jv_parse(c, text, len);
	if (!s.doc || sc_doc_open(&s))
		return -1;
	int64_t root = gr_rule_new(c, "root");
	struct sn *top = root < 0 ? NULL : sc_norm(&s, s.doc);
	struct sn_list l = { &top, 1 };
	struct ir_node *x = top ? sc_gen(&s, &l) : NULL;
	if (!x)
		return -1;
	if (x->kind == IR_NOTHING)
		return gr_fail(c, -EINVAL, "the schema allows no value%s%s", s.why[0] ? ": " : "",
			       s.why);
	struct ir_node *ws = gr_json_ws(c);
	c->rules[root].body = ir_seq3(c, ws, x, ws);
	c->root = (uint32_t)root;
	return c->rc ? -1 : 0;
}
