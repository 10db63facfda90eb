/* SPDX-License-Identifier: MIT */
/*
 * schema_valid.c — whether a value from the schema itself (an enum's or a const's) meets a
 * node (schema.h): what keeps enum and const beside other keywords exact (each literal is
 * written only if everything beside it holds), and what proves oneOf branches disjoint. A
 * string is matched by the narrowest reading of its patterns (what every engine agrees
 * matches), so a literal kept is valid everywhere; one that only some engines would accept
 * is left out, which narrows and never invalidates.
 */
#include "schema.h"

#include <errno.h>
#include <string.h>

#define VALID_MAX_DEPTH 512

static uint32_t type_of(const struct jv *v)
{
	switch (v->kind) {
	case JV_NULL: return T_NULL;
	case JV_TRUE: case JV_FALSE: return T_BOOL;
	case JV_NUMBER: return jv_is_integral(v) ? T_INT : T_FRAC;
	case JV_STRING: return T_STR;
	case JV_ARRAY: return T_ARR;
	}
	return T_OBJ;
}

static int member_of(const struct jv *const *set, uint32_t n, const struct jv *v)
{
	for (uint32_t i = 0; i < n; i++)
		if (jv_equal(set[i], v))
			return 1;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Numbers                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static int within(const struct jv *v, const struct sn_bound *b, int upper)
{
	if (!b->v)
		return 1;
	int cmp = jv_decimal_cmp(&v->dec, &b->v->dec);
	return upper ? cmp < 0 || (cmp == 0 && !b->excl) : cmp > 0 || (cmp == 0 && !b->excl);
}

/* (digits * 10^zeros) mod m, digit by digit. */
static uint64_t mod_of(const char *digits, uint32_t n, int64_t zeros, uint64_t m)
{
	unsigned __int128 r = 0;
	for (uint32_t i = 0; i < n; i++)
		r = (r * 10 + (unsigned)(digits[i] - '0')) % m;
	unsigned __int128 base = 10 % m, p = 1 % m;
	for (int64_t e = zeros; e > 0; e >>= 1) { /* r * 10^zeros by squaring */
		if (e & 1)
			p = p * base % m;
		base = base * base % m;
	}
	return (uint64_t)(r * p % m);
}

/* v / m an integer, exactly: v = A 10^a, m = B 10^b; then B divides A 10^(a-b) when a >= b;
 * when a < b, A would need trailing zeros, which a normalized A has not (unless v is 0). */
static int multiple(struct schema *s, const struct jv *v, const struct jv *m)
{
	if (v->dec.digits[0] == '0')
		return 1;
	if (m->dec.n > 18)
		return sc_fail(s, "\"multipleOf\" %.40s has more than 18 significant digits", m->s);
	if (v->dec.exp < m->dec.exp)
		return 0;
	uint64_t b = 0;
	for (uint32_t i = 0; i < m->dec.n; i++)
		b = b * 10 + (uint64_t)(m->dec.digits[i] - '0');
	return mod_of(v->dec.digits, v->dec.n, v->dec.exp - m->dec.exp, b) == 0;
}

static int valid_number(struct schema *s, const struct sn *p, const struct jv *v)
{
	if (!within(v, &p->lo, 0) || !within(v, &p->hi, 1))
		return 0;
	for (uint32_t i = 0; i < p->n_mult; i++) {
		int r = multiple(s, v, p->mult[i]);
		if (r <= 0)
			return r;
	}
	return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Keys and their values                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* 1 when every engine's pattern matches the key, 0 when none does, -1 when they disagree. */
static int key_matches(struct schema *s, const struct sn_pattern *p, const char *key,
		       uint32_t len)
{
	const struct gr_frag *narrow = sc_pattern_frag(s, p->re, p->where, GR_TEXT_RAW, 0);
	const struct gr_frag *wide = narrow ? sc_pattern_frag(s, p->re, p->where, GR_TEXT_RAW, 1)
				     : NULL;
	if (!wide)
		return -1;
	if (gr_frag_matches(narrow, key, len))
		return 1;
	return gr_frag_matches(wide, key, len) ? -1 : 0;
}

int sc_key_values(struct schema *s, const struct sn *f, const char *key, uint32_t len,
		  struct sn_list *out)
{
	if (sc_name_in(f->forbidden, f->forbidden_len, f->n_forbidden, key, len))
		return 1;
	for (uint32_t i = 0; i < f->n_clauses; i++) {
		const struct sn_clause *cl = &f->clauses[i];
		const struct sn_prop *prop = NULL;
		for (uint32_t k = 0; k < cl->n_props && !prop; k++)
			if (cl->props[k].len == len && !memcmp(cl->props[k].name, key, len))
				prop = &cl->props[k];
		if (prop) {
			if (sc_list_cat(s, out, &prop->v))
				return -1;
			continue;
		}
		int matched = 0;
		for (uint32_t k = 0; k < cl->n_pats; k++) {
			int m = key_matches(s, &cl->pats[k], key, len);
			if (m < 0)
				return -1;
			if (m && sc_list_cat(s, out, &cl->pats[k].v))
				return -1;
			matched |= m;
		}
		if (!matched && cl->has_ap && sc_list_cat(s, out, &cl->ap))
			return -1;
	}
	for (uint32_t i = 0; i < out->n; i++)
		if (out->v[i]->kind == SN_FALSE)
			return 1;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Arrays and objects                                                                         */
/* ------------------------------------------------------------------------------------------ */

static int valid_array(struct schema *s, const struct sn *p, const struct jv *v)
{
	if (v->n < p->min_items || v->n > p->max_items)
		return 0;
	for (uint32_t i = 0; i < v->n; i++) {
		int r = sc_valid_list(s, i < p->n_prefix ? &p->prefix[i] : &p->items, v->v[i]);
		if (r <= 0)
			return r;
	}
	for (uint32_t k = 0; k < p->n_contains; k++) {
		uint32_t hits = 0;
		for (uint32_t i = 0; i < v->n; i++) {
			int r = sc_valid_list(s, &p->contains[k].v, v->v[i]);
			if (r < 0)
				return r;
			hits += (uint32_t)r;
		}
		if (hits < p->contains[k].min || hits > p->contains[k].max)
			return 0;
	}
	for (uint32_t i = 0; p->unique && i < v->n; i++)
		for (uint32_t k = i + 1; k < v->n; k++)
			if (jv_equal(v->v[i], v->v[k]))
				return 0;
	return 1;
}

static int has_key(const struct jv *v, const char *k, uint32_t len)
{
	return jv_getn(v, k, len) != NULL;
}

static int valid_object(struct schema *s, const struct sn *p, const struct jv *v)
{
	if (v->n < p->min_props || v->n > p->max_props)
		return 0;
	for (uint32_t i = 0; i < p->n_required; i++)
		if (!has_key(v, p->required[i], p->required_len[i]))
			return 0;
	for (uint32_t i = 0; i < p->n_forbidden; i++)
		if (has_key(v, p->forbidden[i], p->forbidden_len[i]))
			return 0;
	for (uint32_t i = 0; i < v->n; i++) {
		struct jv key = { .kind = JV_STRING, .s = v->k[i], .n = v->klen[i] };
		int r = p->names.n ? sc_valid_list(s, &p->names, &key) : 1;
		if (r <= 0)
			return r;
		struct sn_list vals = { 0 };
		r = sc_key_values(s, p, v->k[i], v->klen[i], &vals);
		if (r == 1)
			return 0; /* forbidden */
		if (r < 0)
			return s->c->rc ? -1 : 0; /* an engine could read it either way: left out */
		if ((r = sc_valid_list(s, &vals, v->v[i])) <= 0)
			return r;
	}
	return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Nodes                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static int valid_plain(struct schema *s, const struct sn *p, const struct jv *v)
{
	uint32_t t = type_of(v);
	if (!(p->types & t))
		return 0;
	if ((p->has_lits && !member_of(p->lits, p->n_lits, v)) || member_of(p->nots, p->n_nots, v))
		return 0;
	switch (t) {
	case T_INT: case T_FRAC: return valid_number(s, p, v);
	case T_STR: return sc_valid_string(s, p, v->s, v->n);
	case T_ARR: return valid_array(s, p, v);
	case T_OBJ: return valid_object(s, p, v);
	}
	return 1;
}

int sc_valid(struct schema *s, const struct sn *n, const struct jv *v)
{
	if (!n)
		return -1;
	if (++s->valid_depth > VALID_MAX_DEPTH) {
		s->valid_depth--;
		return gr_fail(s->c, -E2BIG, "checking a value against the schema goes deeper than "
			       "%u (references in a loop?) (at %s)", VALID_MAX_DEPTH, n->where);
	}
	int r = 1;
	switch (n->kind) {
	case SN_TRUE:
		break;
	case SN_FALSE:
		r = 0;
		break;
	case SN_PLAIN:
		r = valid_plain(s, n, v);
		break;
	case SN_REF:
		r = sc_valid(s, sc_ref_target(s, (struct sn *)n), v);
		break;
	case SN_ALL:
		for (uint32_t i = 0; i < n->n_kids && r == 1; i++)
			r = sc_valid(s, n->kids[i], v);
		break;
	case SN_ANY:
		r = 0;
		for (uint32_t i = 0; i < n->n_kids && r == 0; i++)
			r = sc_valid(s, n->kids[i], v);
		break;
	case SN_ONE: {
		uint32_t hits = 0;
		for (uint32_t i = 0; i < n->n_kids && r >= 0; i++)
			if ((r = sc_valid(s, n->kids[i], v)) > 0)
				hits++;
		r = r < 0 ? r : hits == 1;
		break;
	}
	}
	s->valid_depth--;
	return r;
}

int sc_valid_list(struct schema *s, const struct sn_list *l, const struct jv *v)
{
	for (uint32_t i = 0; i < l->n; i++) {
		int r = sc_valid(s, l->v[i], v);
		if (r <= 0)
			return r;
	}
	return 1;
}
