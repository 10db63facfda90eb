/* SPDX-License-Identifier: MIT */
/*
 * schema_object.c — objects (schema.h). A merged node holds clauses, one per schema that said
 * properties, patternProperties or additionalProperties; a key's value must meet, in every
 * clause, the clause's property of that name, else the clause's patterns that match the key,
 * else its additionalProperties.
 *
 * Declared keys (properties of any clause, and required names) are written in the schemas'
 * order, each with the values every clause allows; a key some clause forbids (false, or a
 * dependency's "absent") is left out, and if required the object allows nothing. Other keys
 * come as repeated members from key languages (regular.h): for each pattern, the keys it
 * matches and no other pattern may, with the value its clauses ask; and, where the object is
 * open, the keys no pattern may match, with every clause's additionalProperties. "May match"
 * is the widest reading of the pattern, "matches" the narrowest (regex.c), so a key written
 * meets the same schemas under every engine; keys are written without escapes.
 * propertyNames narrows every key. minProperties and maxProperties count the members, a
 * repeated additional member once toward the minimum (two of them could share a key).
 */
#include "schema.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define MAX_PATTERNS 16 /* patterns of one object whose key languages are told apart */

/* ------------------------------------------------------------------------------------------ */
/* Declared members                                                                           */
/* ------------------------------------------------------------------------------------------ */

struct members {
	struct ir_list kids;
	uint8_t *required, *repeat;
	uint32_t cap;
	const char **names;      /* the declared keys, written or not */
	uint32_t *lens, n_names;
};

static int add_member(struct schema *s, struct members *m, struct ir_node *x, int required,
		      int repeat)
{
	if (m->kids.n == m->cap) {
		uint32_t cap = m->cap ? m->cap * 2 : 16;
		uint8_t *r = gr_alloc(s->c, cap), *p = gr_alloc(s->c, cap);
		if (!r || !p)
			return -1;
		if (m->kids.n) {
			memcpy(r, m->required, m->kids.n);
			memcpy(p, m->repeat, m->kids.n);
		}
		m->required = r, m->repeat = p, m->cap = cap;
	}
	m->required[m->kids.n] = (uint8_t)required;
	m->repeat[m->kids.n] = (uint8_t)repeat;
	return ir_list_push(s->c, &m->kids, x);
}

static struct ir_node *member(struct schema *s, struct ir_node *key, struct ir_node *val)
{
	struct ir_node *ws = gr_json_ws(s->c);
	return ir_seq(s->c, 5, (struct ir_node *[]){ key, ws, ir_lit(s->c, ":"), ws, val });
}

/* Every declared name once, in order: clause properties, then required names. */
static int declared_names(struct schema *s, const struct sn *f, struct members *m)
{
	for (uint32_t i = 0; i < f->n_clauses; i++)
		for (uint32_t k = 0; k < f->clauses[i].n_props; k++) {
			const struct sn_prop *p = &f->clauses[i].props[k];
			if (!sc_name_in(m->names, m->lens, m->n_names, p->name, p->len) &&
			    sc_names_add(s, &m->names, &m->lens, &m->n_names, &p->name, &p->len, 1))
				return -1;
		}
	for (uint32_t i = 0; i < f->n_required; i++)
		if (!sc_name_in(m->names, m->lens, m->n_names, f->required[i], f->required_len[i]) &&
		    sc_names_add(s, &m->names, &m->lens, &m->n_names, &f->required[i],
				 &f->required_len[i], 1))
			return -1;
	return 0;
}

/* A declared key's member: NULL with *absent set when it cannot be written (forbidden, a
 * value no schema allows, a name propertyNames refuses). */
static struct ir_node *declared(struct schema *s, const struct sn *f, const char *name,
				uint32_t len, int *absent)
{
	struct jv key = { .kind = JV_STRING, .s = name, .n = len };
	struct sn_list vals = { 0 };
	*absent = 1;
	int r = sc_key_values(s, f, name, len, &vals);
	if (r < 0) {
		if (!s->c->rc)
			sc_note_why(s, "whether a patternProperties pattern matches a key depends on "
				    "the regular-expression engine (at %s)", f->where);
		return NULL;
	}
	if (r == 1)
		return NULL;
	if (f->names.n && (r = sc_valid_list(s, &f->names, &key)) <= 0)
		return NULL;
	size_t old = sc_push(s, "properties", name);
	struct ir_node *val = s->gen(s, &vals);
	sc_pop(s, old);
	if (!val || val->kind == IR_NOTHING)
		return NULL;
	*absent = 0;
	return member(s, sc_literal(s, &key), val);
}

/* ------------------------------------------------------------------------------------------ */
/* Additional members                                                                         */
/* ------------------------------------------------------------------------------------------ */

struct pattern_ref {
	const struct sn_pattern *p;
	uint32_t clause;
};

/* Keys written without escapes: any character but controls, '"' and '\'. */
static const struct gr_frag *plain_keys(struct schema *s)
{
	uint32_t excl[34];
	for (uint32_t cp = 0; cp < 0x20; cp++)
		excl[cp] = cp;
	excl[32] = '"';
	excl[33] = '\\';
	return gr_frag_of(s->c, ir_repeat(s->c, ir_any_char_except(s->c, excl, 34, GR_TEXT_RAW), 0,
					  GR_INF));
}

/* The keys a merged plain node of propertyNames allows (narrowly), within base; literals
 * are checked against the whole of propertyNames (names). */
static const struct gr_frag *plain_names(struct schema *s, const struct sn_list *names,
					 const struct sn *n, const struct gr_frag *base)
{
	if (n->kind == SN_FALSE || !(n->types & T_STR))
		return gr_frag_of(s->c, ir_nothing(s->c));
	if (n->has_lits) {
		struct ir_list alts = { 0 };
		for (uint32_t i = 0; i < n->n_lits; i++) {
			int ok = n->lits[i]->kind == JV_STRING ? sc_valid_list(s, names, n->lits[i])
				 : 0;
			if (ok < 0 || (ok && ir_list_push(s->c, &alts, ir_literal(s->c, n->lits[i]->s,
										   n->lits[i]->n))))
				return NULL;
		}
		return gr_frag_and(s->c, base, gr_frag_of(s->c, ir_alt(s->c, alts.n, alts.v)));
	}
	const struct gr_frag *g = sc_string_frag(s, n, GR_TEXT_RAW, 0);
	for (uint32_t i = 0; g && i < n->n_nots; i++)
		if (n->nots[i]->kind == JV_STRING)
			g = gr_frag_minus(s->c, g, gr_frag_of(s->c, ir_literal(s->c, n->nots[i]->s,
									       n->nots[i]->n)));
	return g ? gr_frag_and(s->c, base, g) : NULL;
}

#define NAMES_CHOICES 8 /* anyOf/oneOf nested in propertyNames */

/* The keys the atoms allow: their first anyOf/oneOf opened into branches, each with the rest
 * (oneOf's branches made disjoint as for values, schema_disjoint.c), the union of what each
 * allows; plain atoms merged. */
static const struct gr_frag *atoms_names(struct schema *s, const struct sn_list *names,
					 const struct sc_atoms *a, const struct gr_frag *base,
					 uint32_t depth)
{
	struct sn *d = NULL;
	for (uint32_t i = 0; i < a->n && !d; i++)
		if (a->v[i]->kind == SN_ANY || a->v[i]->kind == SN_ONE)
			d = a->v[i];
	if (a->is_false)
		return gr_frag_of(s->c, ir_nothing(s->c));
	if (!d) {
		struct sn *n = sc_atoms_merge(s, a);
		return n ? plain_names(s, names, n, base) : NULL;
	}
	if (depth >= NAMES_CHOICES) {
		sc_fail(s, "\"propertyNames\" nests anyOf/oneOf deeper than %u", NAMES_CHOICES);
		return NULL;
	}
	struct sc_atoms *b = sc_branches(s, a, d);
	struct ir_list alts = { 0 };
	if (!b)
		return NULL;
	for (uint32_t i = 0; i < d->n_kids; i++) {
		const struct gr_frag *g = atoms_names(s, names, &b[i], base, depth + 1);
		if (!g || ir_list_push(s->c, &alts, ir_frag(s->c, g)))
			return NULL;
	}
	return gr_frag_of(s->c, ir_alt(s->c, alts.n, alts.v));
}

/* The keys propertyNames allows (narrowly), within base. */
static const struct gr_frag *allowed_names(struct schema *s, const struct sn *f,
					   const struct gr_frag *base)
{
	struct sc_atoms a = { 0 };
	if (!f->names.n)
		return base;
	for (uint32_t i = 0; i < f->names.n; i++)
		if (sc_collect(s, &a, f->names.v[i]))
			return NULL;
	return atoms_names(s, &f->names, &a, base, 0);
}

/* The values of a key that matches pattern `only` (or none, when only is NULL). */
static int group_values(struct schema *s, const struct sn *f, const struct pattern_ref *only,
			struct sn_list *out)
{
	for (uint32_t i = 0; i < f->n_clauses; i++) {
		const struct sn_clause *cl = &f->clauses[i];
		if (only && only->clause == i) {
			if (sc_list_cat(s, out, &only->p->v))
				return -1;
		} else if (cl->has_ap && sc_list_cat(s, out, &cl->ap)) {
			return -1;
		}
	}
	return 0;
}

/* The keys of a group: those `only` matches (or every key, for NULL) that no other pattern
 * may match and that are not declared. */
static const struct gr_frag *group_keys(struct schema *s, const struct pattern_ref *pats,
					uint32_t n_pats, const struct pattern_ref *only,
					const struct gr_frag *keys)
{
	if (only) {
		const struct gr_frag *g = sc_pattern_frag(s, only->p->re, only->p->where, GR_TEXT_RAW, 0);
		keys = g ? gr_frag_and(s->c, keys, g) : NULL;
	}
	for (uint32_t i = 0; i < n_pats && keys; i++) {
		if (only && pats[i].p == only->p)
			continue;
		const struct gr_frag *g = sc_pattern_frag(s, pats[i].p->re, pats[i].p->where,
							  GR_TEXT_RAW, 1);
		keys = g ? gr_frag_minus(s->c, keys, g) : NULL;
	}
	return keys;
}

/* 1 when the object takes keys beyond those declared and matched by patterns: some clause
 * says additionalProperties, or none declares anything (OpenAI's strict reading closes an
 * object that lists properties and says nothing more). */
static int open_object(const struct sn *f)
{
	int declares = 0;
	for (uint32_t i = 0; i < f->n_clauses; i++) {
		if (f->clauses[i].has_ap)
			return 1;
		declares |= f->clauses[i].n_props || f->clauses[i].n_pats;
	}
	return !declares;
}

static int additional(struct schema *s, const struct sn *f, struct members *m,
		      struct ir_list *groups)
{
	struct pattern_ref pats[MAX_PATTERNS];
	uint32_t n_pats = 0;
	for (uint32_t i = 0; i < f->n_clauses; i++)
		for (uint32_t k = 0; k < f->clauses[i].n_pats; k++) {
			if (n_pats == MAX_PATTERNS)
				return sc_fail(s, "more than %d patternProperties in one object",
					       MAX_PATTERNS);
			pats[n_pats++] = (struct pattern_ref){ &f->clauses[i].pats[k], i };
		}
	if (!n_pats && !open_object(f))
		return 0;
	/* Keys: plain, allowed by propertyNames, not declared, not forbidden. */
	struct ir_list names = { 0 };
	for (uint32_t i = 0; i < m->n_names; i++)
		if (ir_list_push(s->c, &names, ir_literal(s->c, m->names[i], m->lens[i])))
			return -1;
	for (uint32_t i = 0; i < f->n_forbidden; i++)
		if (ir_list_push(s->c, &names, ir_literal(s->c, f->forbidden[i], f->forbidden_len[i])))
			return -1;
	const struct gr_frag *keys = allowed_names(s, f, plain_keys(s));
	if (keys && names.n)
		keys = gr_frag_minus(s->c, keys, gr_frag_of(s->c, ir_alt(s->c, names.n, names.v)));
	if (!keys)
		return -1;
	for (uint32_t g = 0; g <= n_pats; g++) {
		const struct pattern_ref *only = g < n_pats ? &pats[g] : NULL;
		if (!only && !open_object(f))
			continue;
		struct sn_list vals = { 0 };
		const struct gr_frag *k = group_keys(s, pats, n_pats, only, keys);
		if (!k || group_values(s, f, only, &vals))
			return -1;
		if (!k->n)
			continue;
		size_t old = only ? sc_push(s, "patternProperties", only->p->re->s)
			     : sc_push(s, "additionalProperties", NULL);
		struct ir_node *val = s->gen(s, &vals);
		sc_pop(s, old);
		if (!val)
			return -1;
		if (val->kind == IR_NOTHING)
			continue;
		struct ir_node *key = ir_seq3(s->c, ir_lit(s->c, "\""), ir_frag(s->c, k),
					      ir_lit(s->c, "\""));
		if (ir_list_push(s->c, groups, member(s, key, val)))
			return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Objects                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static int asserts_nothing(const struct sn *f)
{
	return !f->n_clauses && !f->n_required && !f->n_forbidden && !f->min_props &&
	       f->max_props == GR_INF && !f->names.n;
}

static struct ir_node *nothing_because(struct schema *s, const char *why, const char *name,
				       uint32_t len)
{
	char buf[160];
	snprintf(buf, sizeof(buf), why, (int)(len > 60 ? 60 : len), name);
	sc_note_why(s, "%s", buf);
	return ir_nothing(s->c);
}

struct ir_node *sc_object(struct schema *s, const struct sn *f)
{
	struct gr_ctx *c = s->c;
	if (asserts_nothing(f))
		return gr_json_any_object(c);
	struct members m = { 0 };
	if (declared_names(s, f, &m))
		return NULL;
	uint32_t max_present = 0;
	for (uint32_t i = 0; i < m.n_names; i++) {
		int req = sc_name_in(f->required, f->required_len, f->n_required, m.names[i], m.lens[i]);
		int absent;
		struct ir_node *x = declared(s, f, m.names[i], m.lens[i], &absent);
		if (c->rc)
			return NULL;
		if (absent && req)
			return nothing_because(s, "required property \"%.*s\" allows no value",
					       m.names[i], m.lens[i]);
		if (!absent && add_member(s, &m, x, req, 0))
			return NULL;
		max_present += !absent;
	}
	struct ir_list groups = { 0 };
	if (additional(s, f, &m, &groups))
		return NULL;
	if (groups.n && add_member(s, &m, ir_alt(c, groups.n, groups.v), 0, 1))
		return NULL;
	/* A repeated member counts once toward the minimum. */
	if (f->min_props > max_present + (groups.n ? 1 : 0)) {
		sc_note_why(s, "minProperties asks for more properties than can be written with "
			    "distinct keys (at %s)", f->where);
		return ir_nothing(c);
	}
	struct ir_node *ws = gr_json_ws(c), *sep = ir_seq3(c, ws, ir_lit(c, ","), ws), *body;
	if (f->min_props || f->max_props != GR_INF) {
		body = ir_members_counted(c, m.kids.n, m.kids.v, m.required, m.repeat, sep,
					  f->min_props, f->max_props);
	} else {
		if (groups.n) { /* the additional members: "x (sep x)*" */
			struct ir_node *extra = m.kids.v[m.kids.n - 1];
			m.kids.v[m.kids.n - 1] = ir_seq2(c, extra, ir_repeat(c, ir_seq2(c, sep, extra),
									     0, GR_INF));
		}
		body = m.kids.n ? ir_members(c, m.kids.n, m.kids.v, m.required, sep) : ir_empty(c);
	}
	return ir_seq(c, 5, (struct ir_node *[]){ ir_lit(c, "{"), ws, body, ws, ir_lit(c, "}") });
}
