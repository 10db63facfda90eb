/* SPDX-License-Identifier: MIT */
/*
 * schema.c — JSON Schema (frontends.h; README.md lists what is supported): the document read
 * (schema_doc.c), its schemas as nodes (schema_norm.c), and nodes to expressions here.
 *
 * What must hold together — a list of nodes — is opened into atoms (schema_merge.c): plain
 * nodes, and the disjunctions (anyOf, oneOf) still to choose from. One disjunction at a time
 * becomes alternatives, each with the branch's atoms added; once none is left, the plain
 * atoms are merged into one node and that node becomes the expression of each type it allows
 * (schema_object.c, schema_array.c, schema_string.c, schema_number.c, which come back here
 * through s->gen for what they contain). A $ref used alone is a call of its target's rule; atoms reached through a
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

/* ------------------------------------------------------------------------------------------ */
/* Values                                                                                     */
/* ------------------------------------------------------------------------------------------ */

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
	struct sc_atoms *b = sc_branches(s, a, d);
	struct ir_list alts = { 0 };
	if (!b)
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
	sc_atoms_sort(a);
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
		if (sc_collect(s, &a, l->v[i]))
			return NULL;
	return gen_atoms(s, &a);
}

/* ------------------------------------------------------------------------------------------ */
/* The document                                                                               */
/* ------------------------------------------------------------------------------------------ */

int gr_schema(struct gr_ctx *c, const char *text, size_t len)
{
	struct schema s = { .c = c, .path = "#", .norm = sc_norm, .gen = sc_gen };
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
