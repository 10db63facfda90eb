/* SPDX-License-Identifier: MIT */
/*
 * schema_array.c — arrays (schema.h): the prefix items, then the rest, between minItems and
 * maxItems. contains: the first minContains items are made to meet it as well (so at least
 * that many do), and maxContains caps the items (so at most that many can). uniqueItems
 * holds by construction where the items come from a finite set of values (enum, const,
 * booleans, null): each value at most once, in the set's order; or where at most one item is
 * allowed. Anything else with uniqueItems is refused: a grammar cannot compare items.
 */
#include "schema.h"

#include <errno.h>
#include <string.h>

/* The elements from index j on (j written), as ", elem" pieces: prefix expressions first,
 * then `rest` (NULL: no more allowed), between lo and hi elements in all. */
static struct ir_node *array_tail(struct schema *s, struct ir_node **prefix, uint32_t k,
				  struct ir_node *rest, uint32_t j, uint32_t lo, uint32_t hi)
{
	struct gr_ctx *c = s->c;
	struct ir_node *ws = gr_json_ws(c), *sep = ir_seq3(c, ws, ir_lit(c, ","), ws);
	if (j >= hi)
		return ir_empty(c);
	if (j >= k) {
		if (!rest)
			return ir_empty(c);
		uint32_t need = lo > j ? lo - j : 0, most = hi == GR_INF ? GR_INF : hi - j;
		return ir_repeat(c, ir_seq2(c, sep, rest), need, most);
	}
	struct ir_node *next = ir_seq3(c, sep, prefix[j], array_tail(s, prefix, k, rest, j + 1, lo,
								     hi));
	return j < lo ? next : ir_opt(c, next);
}

static struct ir_node *brackets(struct schema *s, struct ir_node *body)
{
	struct gr_ctx *c = s->c;
	return ir_seq(c, 4, (struct ir_node *[]){ ir_lit(c, "["), gr_json_ws(c), body,
						   ir_lit(c, "]") });
}

/* ------------------------------------------------------------------------------------------ */
/* uniqueItems                                                                                */
/* ------------------------------------------------------------------------------------------ */

/* The values an item may take, when they are finitely many: the literals of its merged node
 * (or null and the booleans its types allow), each checked against the item's schemas; 0,
 * -1 with an error when they are not finite. */
static int finite_values(struct schema *s, const struct sn *f, const struct jv ***out,
			 uint32_t *n)
{
	static const struct jv words[] = { { .kind = JV_NULL }, { .kind = JV_TRUE },
					   { .kind = JV_FALSE } };
	struct sn *m;
	if (sc_flatten(s, &f->items, &m))
		return -1;
	uint32_t t = m->kind == SN_FALSE ? 0 : sc_written_types(m);
	const struct jv *const *cand;
	uint32_t n_cand;
	const struct jv *w[3] = { &words[0], &words[1], &words[2] };
	if (m->kind != SN_FALSE && m->has_lits) {
		cand = m->lits, n_cand = m->n_lits;
	} else if (!(t & ~(T_NULL | T_BOOL))) {
		cand = w, n_cand = 3;
	} else {
		return sc_fail(s, "\"uniqueItems\" is supported only where the items come from a "
			       "finite set (enum, const, booleans, null) or at most one item is "
			       "allowed");
	}
	*out = gr_alloc(s->c, (n_cand ? n_cand : 1) * sizeof(**out));
	if (!*out)
		return -1;
	*n = 0;
	for (uint32_t i = 0; i < n_cand; i++) {
		int dup = 0;
		for (uint32_t k = 0; k < *n && !dup; k++)
			dup = jv_equal((*out)[k], cand[i]);
		int ok = dup ? 0 : sc_valid_list(s, &f->items, cand[i]);
		if (ok < 0)
			return -1;
		if (ok)
			(*out)[(*n)++] = cand[i];
	}
	return 0;
}

static struct ir_node *unique_array(struct schema *s, const struct sn *f, uint32_t lo,
				    uint32_t hi)
{
	struct gr_ctx *c = s->c;
	const struct jv **v = NULL;
	uint32_t n = 0;
	if (f->n_prefix || f->n_contains) {
		sc_fail(s, "\"uniqueItems\" together with \"prefixItems\" or \"contains\" is not "
			"supported");
		return NULL;
	}
	if (finite_values(s, f, &v, &n))
		return NULL;
	if (lo > n) {
		sc_note_why(s, "uniqueItems leaves fewer distinct items than minItems asks (at %s)",
			    f->where);
		return ir_nothing(c);
	}
	struct ir_node **kids = gr_alloc(c, (n ? n : 1) * sizeof(*kids));
	uint8_t *req = gr_alloc(c, n + 1), *rep = gr_alloc(c, n + 1);
	if (!kids || !req || !rep)
		return NULL;
	for (uint32_t i = 0; i < n; i++)
		if (!(kids[i] = sc_literal(s, v[i])))
			return NULL;
	struct ir_node *ws = gr_json_ws(c), *sep = ir_seq3(c, ws, ir_lit(c, ","), ws);
	struct ir_node *body = ir_members_counted(c, n, kids, req, rep, sep, lo, hi);
	return brackets(s, ir_seq2(c, body, ws));
}

/* ------------------------------------------------------------------------------------------ */
/* Arrays                                                                                     */
/* ------------------------------------------------------------------------------------------ */

struct ir_node *sc_array(struct schema *s, const struct sn *f)
{
	struct gr_ctx *c = s->c;
	uint32_t lo = f->min_items, hi = f->max_items, n_pos = f->n_prefix;
	for (uint32_t k = 0; k < f->n_contains; k++) {
		if (f->contains[k].min > lo)
			lo = f->contains[k].min;
		if (f->contains[k].max < hi)
			hi = f->contains[k].max;
		if (f->contains[k].min > n_pos)
			n_pos = f->contains[k].min;
	}
	if (lo > hi) {
		sc_note_why(s, "the item counts leave no array (minItems or minContains above "
			    "maxItems or maxContains) (at %s)", f->where);
		return ir_nothing(c);
	}
	if (f->unique && hi > 1)
		return unique_array(s, f, lo, hi);
	struct ir_node **prefix = gr_alloc(c, (n_pos + 1) * sizeof(*prefix));
	if (!prefix)
		return NULL;
	for (uint32_t j = 0; j < n_pos && j < hi; j++) {
		struct sn_list l = { 0 };
		if (sc_list_cat(s, &l, j < f->n_prefix ? &f->prefix[j] : &f->items))
			return NULL;
		for (uint32_t k = 0; k < f->n_contains; k++)
			if (f->contains[k].min > j && sc_list_cat(s, &l, &f->contains[k].v))
				return NULL;
		size_t old = sc_push_index(s, "items", j);
		prefix[j] = s->gen(s, &l);
		sc_pop(s, old);
		if (!prefix[j])
			return NULL;
		if (prefix[j]->kind == IR_NOTHING && j < hi)
			hi = j; /* no item can stand here: the array ends before */
	}
	if (lo > hi) {
		sc_note_why(s, "an item the array needs allows no value (at %s)", f->where);
		return ir_nothing(c);
	}
	size_t old = sc_push(s, "items", NULL);
	struct ir_node *rest = s->gen(s, &f->items);
	sc_pop(s, old);
	if (!rest)
		return NULL;
	if (rest->kind == IR_NOTHING)
		rest = NULL;
	if (!rest && lo > n_pos) {
		sc_note_why(s, "minItems asks for more items than the tuple allows (at %s)", f->where);
		return ir_nothing(c);
	}
	struct ir_node *first = n_pos ? prefix[0] : rest;
	struct ir_node *body = first && hi > 0
		? ir_seq3(c, first, array_tail(s, prefix, n_pos, rest, 1, lo, hi), gr_json_ws(c))
		: ir_empty(c);
	if (lo == 0 && first && hi > 0)
		body = ir_opt(c, body);
	return brackets(s, body);
}
