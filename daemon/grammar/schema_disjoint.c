/* SPDX-License-Identifier: MIT */
/*
 * schema_disjoint.c — oneOf (schema.h): exactly one branch must hold, so its branches are
 * written as anyOf's alternatives only once no value can meet two of them. Each pair of
 * branches is proven disjoint (with their merged plain parts, which hold wherever a branch
 * does: a wider language, so a proof for them is a proof for the branches), type by type:
 *   - literals (enum, const): none of one side's values meets the other;
 *   - numbers: bounds that do not overlap;
 *   - strings: languages whose intersection is empty (patterns read widely, formats as any
 *     string, lengths exact);
 *   - arrays: item counts that do not overlap, or an item both must have whose schemas are
 *     disjoint;
 *   - objects: a property one requires and the other forbids, or both require with disjoint
 *     values (a discriminator: "type": {"const": "a"}), or counts that do not overlap.
 * Where no proof is found, a branch is narrowed so that one holds, each narrowing keeping its
 * outputs valid: literals valid in both branches are dropped from the one and excluded from
 * the other; when only strings overlap, each leaves out the strings the other accepts; when
 * only objects overlap, a property the other branch requires is left out of each. Otherwise the oneOf is refused, naming the two branches.
 */
#include "schema.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define DISJOINT_DEPTH 6 /* how deep into properties and items a proof is looked for */

static uint32_t overlap(struct schema *s, const struct sn *a, const struct sn *b,
			uint32_t depth);

/* 1 when the lists are disjoint, 0 when not shown, -1 on error. */
static int lists_disjoint(struct schema *s, const struct sn_list *la, const struct sn_list *lb,
			  uint32_t depth)
{
	struct sn *a, *b;
	if (depth > DISJOINT_DEPTH)
		return 0;
	if (sc_flatten(s, la, &a) || sc_flatten(s, lb, &b))
		return -1;
	uint32_t o = overlap(s, a, b, depth + 1);
	return s->c->rc ? -1 : o == 0;
}

static int below(const struct sn_bound *hi, const struct sn_bound *lo)
{
	if (!hi->v || !lo->v)
		return 0;
	int cmp = jv_decimal_cmp(&hi->v->dec, &lo->v->dec);
	return cmp < 0 || (cmp == 0 && (hi->excl || lo->excl));
}

static int strings_disjoint(struct schema *s, const struct sn *a, const struct sn *b)
{
	const struct gr_frag *fa = sc_string_frag(s, a, GR_TEXT_RAW, 1);
	const struct gr_frag *fb = fa ? sc_string_frag(s, b, GR_TEXT_RAW, 1) : NULL;
	const struct gr_frag *both = fb ? gr_frag_and(s->c, fa, fb) : NULL;
	return both ? both->n == 0 : -1;
}

static int arrays_disjoint(struct schema *s, const struct sn *a, const struct sn *b,
			   uint32_t depth)
{
	if (a->max_items < b->min_items || b->max_items < a->min_items)
		return 1;
	uint32_t both = a->min_items < b->min_items ? a->min_items : b->min_items;
	for (uint32_t j = 0; j < both && j < 4; j++) {
		int r = lists_disjoint(s, j < a->n_prefix ? &a->prefix[j] : &a->items,
				       j < b->n_prefix ? &b->prefix[j] : &b->items, depth);
		if (r)
			return r;
	}
	return 0;
}

static int required_in(const struct sn *f, const char *k, uint32_t len)
{
	for (uint32_t i = 0; i < f->n_required; i++)
		if (f->required_len[i] == len && !memcmp(f->required[i], k, len))
			return 1;
	return 0;
}

/* A property a requires that b forbids, or both require with disjoint values. */
static int key_tells_apart(struct schema *s, const struct sn *a, const struct sn *b,
			   uint32_t depth)
{
	for (uint32_t i = 0; i < a->n_required; i++) {
		const char *k = a->required[i];
		uint32_t len = a->required_len[i];
		struct sn_list va = { 0 }, vb = { 0 };
		int rb = sc_key_values(s, b, k, len, &vb);
		if (rb == 1)
			return 1;
		if (rb < 0 || !required_in(b, k, len) || sc_key_values(s, a, k, len, &va))
			continue;
		int r = lists_disjoint(s, &va, &vb, depth);
		if (r)
			return r;
	}
	return s->c->rc ? -1 : 0;
}

static int objects_disjoint(struct schema *s, const struct sn *a, const struct sn *b,
			    uint32_t depth)
{
	if (a->max_props < b->min_props || b->max_props < a->min_props)
		return 1;
	int r = key_tells_apart(s, a, b, depth);
	return r ? r : key_tells_apart(s, b, a, depth);
}

/* 1 when none of a's literals (those a allows) meets b. */
static int literals_outside(struct schema *s, const struct sn *a, const struct sn *b)
{
	for (uint32_t i = 0; i < a->n_lits; i++) {
		int in_a = sc_valid(s, a, a->lits[i]);
		int in_b = in_a > 0 ? sc_valid(s, b, a->lits[i]) : 0;
		if (in_a < 0 || in_b < 0)
			return -1;
		if (in_b)
			return 0;
	}
	return 1;
}

/* The types on which a and b may share a value (0: disjoint); errors are left in s. */
static uint32_t overlap(struct schema *s, const struct sn *a, const struct sn *b,
			uint32_t depth)
{
	if (a->kind == SN_FALSE || b->kind == SN_FALSE)
		return 0;
	/* What one writes against what the other accepts: a branch without "type" writes only
	 * the kinds its keywords describe (schema.c), though it accepts every value. */
	uint32_t t = (sc_written_types(a) & b->types) | (sc_written_types(b) & a->types), o = 0;
	if (!t)
		return 0;
	if (a->has_lits || b->has_lits) {
		int r = literals_outside(s, a->has_lits ? a : b, a->has_lits ? b : a);
		return r == 1 ? 0 : t;
	}
	o |= t & (T_NULL | T_BOOL);
	if ((t & (T_INT | T_FRAC)) && !below(&a->hi, &b->lo) && !below(&b->hi, &a->lo))
		o |= t & (T_INT | T_FRAC);
	if ((t & T_STR) && strings_disjoint(s, a, b) != 1)
		o |= T_STR;
	if ((t & T_ARR) && arrays_disjoint(s, a, b, depth) != 1)
		o |= T_ARR;
	if ((t & T_OBJ) && objects_disjoint(s, a, b, depth) != 1)
		o |= T_OBJ;
	return o;
}

/* ------------------------------------------------------------------------------------------ */
/* Narrowing                                                                                  */
/* ------------------------------------------------------------------------------------------ */

static struct sn *synthetic(struct schema *s, const char *where)
{
	struct sn *x = sc_node(s, SN_PLAIN);
	if (x)
		x->where = where;
	return x;
}

/* The literals of lit_side that meet both: dropped there, excluded on the other side. */
static int split_literals(struct schema *s, struct sc_atoms *lb, const struct sn *lf,
			  struct sc_atoms *ob, const struct sn *of)
{
	struct sn *keep = synthetic(s, lf->where), *excl = synthetic(s, of->where);
	if (!keep || !excl || !(keep->lits = gr_alloc(s->c, (lf->n_lits + 1) * sizeof(*keep->lits))) ||
	    !(excl->nots = gr_alloc(s->c, (lf->n_lits + 1) * sizeof(*excl->nots))))
		return -1;
	keep->has_lits = 1;
	for (uint32_t i = 0; i < lf->n_lits; i++) {
		int in_l = sc_valid(s, lf, lf->lits[i]);
		int in_o = in_l > 0 ? sc_valid(s, of, lf->lits[i]) : 0;
		if (in_l < 0 || in_o < 0)
			return -1;
		if (in_o)
			excl->nots[excl->n_nots++] = lf->lits[i];
		else if (in_l)
			keep->lits[keep->n_lits++] = lf->lits[i];
	}
	return sc_atoms_add(s, lb, keep) || sc_atoms_add(s, ob, excl);
}

/* A property `to` requires that `from` does not: left out of from. */
static int leave_out(struct schema *s, struct sc_atoms *from_b, const struct sn *from,
		     const struct sn *to)
{
	for (uint32_t i = 0; i < to->n_required; i++) {
		if (required_in(from, to->required[i], to->required_len[i]))
			continue;
		struct sn *x = synthetic(s, from->where);
		if (!x || sc_names_add(s, &x->forbidden, &x->forbidden_len, &x->n_forbidden,
				       &to->required[i], &to->required_len[i], 1))
			return -1;
		return sc_atoms_add(s, from_b, x) ? -1 : 1;
	}
	return 0;
}

/* A property both declare with disjoint values, not required by both (a discriminator the
 * schema forgot to require): required in both. */
static int require_discriminator(struct schema *s, struct sc_atoms *bi, const struct sn *fi,
				 struct sc_atoms *bj, const struct sn *fj)
{
	for (uint32_t c = 0; c < fi->n_clauses; c++)
		for (uint32_t k = 0; k < fi->clauses[c].n_props; k++) {
			const struct sn_prop *p = &fi->clauses[c].props[k];
			struct sn_list va = { 0 }, vb = { 0 };
			if (required_in(fi, p->name, p->len) && required_in(fj, p->name, p->len))
				continue;
			if (sc_key_values(s, fi, p->name, p->len, &va) ||
			    sc_key_values(s, fj, p->name, p->len, &vb) || !vb.n) {
				if (s->c->rc)
					return -1;
				continue;
			}
			int r = lists_disjoint(s, &va, &vb, 0);
			if (r <= 0) {
				if (r < 0)
					return -1;
				continue;
			}
			struct sn *x = synthetic(s, fi->where), *y = synthetic(s, fj->where);
			if (!x || !y ||
			    sc_names_add(s, &x->required, &x->required_len, &x->n_required, &p->name,
					 &p->len, 1) ||
			    sc_names_add(s, &y->required, &y->required_len, &y->n_required, &p->name,
					 &p->len, 1) ||
			    sc_atoms_add(s, bi, x) || sc_atoms_add(s, bj, y))
				return -1;
			return 1;
		}
	return 0;
}

/* Where only strings overlap: each branch leaves out the strings the other accepts (their
 * languages read widely, so that what is left out covers what any validator finds in the other;
 * formats count as any string). Each output then meets its own branch and not the other. A
 * branch without "type" still writes only what it wrote before: the rule adds no kind. */
static int split_strings(struct schema *s, struct sc_atoms *bi, const struct sn *fi,
			 struct sc_atoms *bj, const struct sn *fj)
{
	struct sn *x = synthetic(s, fi->where), *y = synthetic(s, fj->where);
	if (!x || !y || !(x->texts = gr_alloc(s->c, sizeof(*x->texts))) ||
	    !(y->texts = gr_alloc(s->c, sizeof(*y->texts))))
		return -1;
	x->texts[0] = (struct sn_text){ SN_NOT_STRINGS_OF, "", 0, fi->where, fj };
	y->texts[0] = (struct sn_text){ SN_NOT_STRINGS_OF, "", 0, fj->where, fi };
	x->n_texts = y->n_texts = 1;
	return sc_atoms_add(s, bi, x) || sc_atoms_add(s, bj, y) ? -1 : 1;
}

/* Branches bi (merged: fi) and bj made disjoint: 1 done, 0 not possible, -1 error. */
static int narrow(struct schema *s, struct sc_atoms *bi, struct sn *fi, struct sc_atoms *bj,
		  struct sn *fj, uint32_t o)
{
	if (fi->has_lits)
		return split_literals(s, bi, fi, bj, fj) ? -1 : 1;
	if (fj->has_lits)
		return split_literals(s, bj, fj, bi, fi) ? -1 : 1;
	if (o == T_STR)
		return split_strings(s, bi, fi, bj, fj);
	if (o != T_OBJ)
		return 0;
	int r = require_discriminator(s, bi, fi, bj, fj);
	if (r)
		return r;
	int a = leave_out(s, bi, fi, fj);
	int c = a > 0 ? leave_out(s, bj, fj, fi) : a;
	return a < 0 || c < 0 ? -1 : a > 0 && c > 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Branches with disjunctions of their own                                                    */
/* ------------------------------------------------------------------------------------------ */

#define MAX_FORMS 64

struct forms {
	struct sn *v[MAX_FORMS];
	uint32_t n;
	uint8_t too_many;
};

/* The merged plain forms a branch may take: one per choice in its own anyOf/oneOf (nested
 * ones too), up to MAX_FORMS. */
static int expand(struct schema *s, const struct sc_atoms *a, struct forms *out, uint32_t depth)
{
	if (a->is_false)
		return 0;
	for (uint32_t i = 0; i < a->n; i++) {
		const struct sn *d = a->v[i];
		if (d->kind != SN_ANY && d->kind != SN_ONE)
			continue;
		if (depth > 8) {
			out->too_many = 1;
			return 0;
		}
		for (uint32_t k = 0; k < d->n_kids && !out->too_many; k++) {
			struct sc_atoms b = { 0 };
			for (uint32_t m = 0; m < a->n; m++)
				if (a->v[m] != d && sc_atoms_add(s, &b, a->v[m]))
					return -1;
			if (sc_collect(s, &b, d->kids[k]) || expand(s, &b, out, depth + 1))
				return -1;
		}
		return 0;
	}
	if (out->n == MAX_FORMS) {
		out->too_many = 1;
		return 0;
	}
	return (out->v[out->n++] = sc_atoms_merge(s, a)) ? 0 : -1;
}

static uint32_t forms_overlap(struct schema *s, const struct forms *x, const struct forms *y)
{
	uint32_t o = 0;
	if (x->too_many || y->too_many)
		return T_ALL;
	for (uint32_t i = 0; i < x->n; i++)
		for (uint32_t j = 0; j < y->n; j++)
			o |= overlap(s, x->v[i], y->v[j], 0);
	return o;
}

static int forms_of(struct schema *s, const struct sc_atoms *b, struct forms *f)
{
	memset(f, 0, sizeof(*f));
	return expand(s, b, f, 0);
}

static int one_of(struct schema *s, const struct sn *d, struct sc_atoms *b)
{
	uint32_t n = d->n_kids;
	struct forms *f = gr_alloc(s->c, n * sizeof(*f));
	if (!f)
		return -1;
	for (uint32_t i = 0; i < n; i++)
		if (forms_of(s, &b[i], &f[i]))
			return -1;
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t j = i + 1; j < n; j++) {
			if (!f[i].n || !f[j].n)
				continue; /* a branch nothing meets */
			uint32_t o = forms_overlap(s, &f[i], &f[j]);
			if (s->c->rc)
				return -1;
			if (!o)
				continue;
			int r = f[i].n == 1 && f[j].n == 1 && !f[i].too_many && !f[j].too_many
				? narrow(s, &b[i], f[i].v[0], &b[j], f[j].v[0], o) : 0;
			if (r < 0)
				return -1;
			if (!r) {
				char saved[sizeof(s->path)];
				memcpy(saved, s->path, sizeof(saved));
				snprintf(s->path, sizeof(s->path), "%s", d->where);
				sc_fail(s, "\"oneOf\" branches %u and %u may both match one value, and "
					"nothing tells them apart", i, j);
				memcpy(s->path, saved, sizeof(saved));
				return -1;
			}
			if (forms_of(s, &b[i], &f[i]) || forms_of(s, &b[j], &f[j]))
				return -1;
		}
	return 0;
}

struct sc_atoms *sc_branches(struct schema *s, const struct sc_atoms *a, const struct sn *d)
{
	struct sc_atoms *b = gr_alloc(s->c, d->n_kids * sizeof(*b));
	if (!b)
		return NULL;
	for (uint32_t i = 0; i < d->n_kids; i++) {
		b[i] = (struct sc_atoms){ .via_ref = a->via_ref };
		for (uint32_t k = 0; k < a->n; k++)
			if (a->v[k] != d && sc_atoms_add(s, &b[i], a->v[k]))
				return NULL;
		/* No $ref target counts as opened here: d, which one of them held, is gone, so a
		 * $ref back to it must bring it again (its memo turns the recursion into a call). */
		if (sc_collect(s, &b[i], d->kids[i]))
			return NULL;
	}
	return d->kind == SN_ONE && one_of(s, d, b) ? NULL : b;
}
