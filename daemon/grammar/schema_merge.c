/* SPDX-License-Identifier: MIT */
/*
 * schema_merge.c — atoms and their merge (schema.h). What must hold together (a list of
 * nodes) is opened into atoms: plain nodes, and the disjunctions still to choose from; $refs
 * and allOf are looked through, each $ref target once. Plain atoms merge into one node: types
 * and literal sets intersected, bounds tightened, string rules, object clauses, required and
 * forbidden names collected, items joined position by position (a prefix item beyond one
 * schema's prefix meets that schema's items).
 */
#include "schema.h"

#include <errno.h>
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

void sc_atoms_sort(struct sc_atoms *a)
{
	qsort(a->v, a->n, sizeof(*a->v), cmp_ptr);
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
	if (na)
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

uint32_t sc_written_types(const struct sn *f)
{
	uint32_t t = f->types;
	if (!f->typed && f->families)
		t &= f->families;
	return t;
}
