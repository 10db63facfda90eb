/* SPDX-License-Identifier: MIT */
/*
 * schema_number.c — integers and numbers (schema.h): bounds, multipleOf, excluded values; the
 * ranges themselves are schema_range.c's.
 *
 * A bound is the schema's decimal text, read exactly (schema_json.c). Validators compare an
 * output with it in three ways: exactly in decimal (JSON Schema's mathematical values), as two
 * doubles (JavaScript; Python when both are floats), or Python's integer against a float,
 * exactly. Every output is valid under all three:
 *   - an output written without a fraction is an integer: x >= b, and x >= double(b) when
 *     the schema wrote b as a float (with a point or an exponent), each exactly;
 *   - one written with a fraction is a double to most validators: x >= S(D), the shortest
 *     decimal that reads as D, and x >= b, where D is double(b) (so double(x) >= double(b)),
 *     or for a bound written as an integer the least double >= b (Python compares that bound
 *     with a float exactly); past 2^53 D's own digits instead of S(D) (an integer text is
 *     compared exactly by Python). An exclusive bound takes the least double above double(b).
 * Upper bounds mirror these. A number is the union of both; a bound of 100000000000000001
 * on an integer is exact. Bounded numbers are written without exponents, never as -0.
 *
 * multipleOf: an integer m, or a binary fraction (0.5, 0.25, 0.125...), whose multiples
 * divide exactly in floating point too; a multiple is an automaton over the digits that
 * keeps the remainder. Other steps (0.01) are refused: a floating-point validator judges
 * 0.07 / 0.01 = 7.000000000000001 not a multiple. Outputs of multipleOf stay within 2^53,
 * where doubles are exact.
 */
#include "schema.h"
#include "automaton.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bounds {
	int has_lo, has_hi;
	struct sc_dec lo, hi;    /* inclusive */
	int empty;               /* the bounds leave nothing */
};

static const struct sc_dec zero = { 0, "0", "" };

/* ------------------------------------------------------------------------------------------ */
/* Decimals                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* The schema's number exactly. */
static int exact_dec(struct schema *s, const struct jv *v, struct sc_dec *out)
{
	const struct jv_decimal *d = &v->dec;
	int64_t point = (int64_t)d->n + d->exp;
	int64_t digits = d->exp >= 0 ? point : point > 0 ? d->n : d->n - point;
	if (digits > SC_MAX_DIGITS)
		return gr_fail(s->c, -E2BIG, "the bound %.40s needs more than %d decimal digits (at "
			       "%s)", v->s, SC_MAX_DIGITS, s->path);
	return sc_dec_make(s->c, d->neg, d->digits, d->n, (long)point, out);
}

/* A double's exact decimal expansion (glibc prints every digit). */
static int exact_double(struct gr_ctx *c, double d, struct sc_dec *out)
{
	char buf[1200];
	snprintf(buf, sizeof(buf), "%.1080f", d);
	return sc_dec_printed(c, buf, out);
}

/* v + 1 or v - 1 for an integer decimal. */
static int add_one(struct gr_ctx *c, const struct sc_dec *v, int delta, struct sc_dec *out)
{
	int up = v->neg ? -delta : delta; /* on the magnitude */
	if (!strcmp(v->ip, "0") && up < 0) {
		*out = (struct sc_dec){ 1, "1", "" };
		return 0;
	}
	const char *ip = sc_digits_add(c, v->ip, up);
	if (!ip)
		return -1;
	*out = (struct sc_dec){ v->neg && strcmp(ip, "0"), ip, "" };
	return 0;
}

/* The integer just inside v: up (ceil) for a lower bound, down (floor) for an upper one;
 * strictly inside when exclusive. */
static int integer_inside(struct gr_ctx *c, const struct sc_dec *v, int upper, int excl,
			  struct sc_dec *out)
{
	struct sc_dec t = { v->neg, v->ip, "" }; /* toward zero */
	if (*v->fp) {
		/* A fraction: toward zero was already inside for one side, else one step. */
		int toward_zero_inside = upper ? !v->neg : v->neg;
		return toward_zero_inside ? (*out = t, 0) : add_one(c, &t, upper ? -1 : 1, out);
	}
	return excl ? add_one(c, v, upper ? -1 : 1, out) : (*out = *v, 0);
}

static int written_as_float(const struct jv *v)
{
	return memchr(v->s, '.', v->n) || memchr(v->s, 'e', v->n) || memchr(v->s, 'E', v->n);
}

/* ------------------------------------------------------------------------------------------ */
/* Bounds                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static void tighter(struct sc_dec *cur, int *has, const struct sc_dec *cand, int upper)
{
	if (!*has || (upper ? sc_dec_cmp(cand, cur) < 0 : sc_dec_cmp(cand, cur) > 0))
		*cur = *cand;
	*has = 1;
}

/* The integer bounds (for outputs without a fraction). */
static int integer_bounds(struct schema *s, const struct sn *p, struct bounds *b)
{
	*b = (struct bounds){ 0 };
	for (int upper = 0; upper < 2; upper++) {
		const struct sn_bound *sb = upper ? &p->hi : &p->lo;
		struct sc_dec x, r;
		if (!sb->v)
			continue;
		if (exact_dec(s, sb->v, &x) || integer_inside(s->c, &x, upper, sb->excl, &r))
			return -1;
		tighter(upper ? &b->hi : &b->lo, upper ? &b->has_hi : &b->has_lo, &r, upper);
		double d = strtod(sb->v->s, NULL);
		if (!written_as_float(sb->v))
			continue;
		if (isinf(d)) {
			if ((d > 0) != upper)
				b->empty = 1; /* at least +inf, or at most -inf, to a double */
			continue;
		}
		if (exact_double(s->c, upper ? floor(d) : ceil(d), &x) ||
		    integer_inside(s->c, &x, upper, sb->excl && (upper ? floor(d) : ceil(d)) == d, &r))
			return -1;
		tighter(upper ? &b->hi : &b->lo, upper ? &b->has_hi : &b->has_lo, &r, upper);
	}
	if (b->has_lo && b->has_hi && sc_dec_cmp(&b->lo, &b->hi) > 0)
		b->empty = 1;
	return 0;
}

/* The bounds for outputs with a fraction, safe for doubles (the top of the file). */
static int double_bounds(struct schema *s, const struct sn *p, struct bounds *b)
{
	*b = (struct bounds){ 0 };
	for (int upper = 0; upper < 2; upper++) {
		const struct sn_bound *sb = upper ? &p->hi : &p->lo;
		struct sc_dec x, dx, r;
		if (!sb->v)
			continue;
		double d = strtod(sb->v->s, NULL), toward = upper ? -INFINITY : INFINITY;
		if (exact_dec(s, sb->v, &x))
			return -1;
		if (isinf(d)) {
			if ((d > 0) != upper)
				b->empty = 1;
			tighter(upper ? &b->hi : &b->lo, upper ? &b->has_hi : &b->has_lo, &x, upper);
			continue;
		}
		if (exact_double(s->c, d, &dx))
			return -1;
		/* Python compares a float output with a bound written as an integer exactly: then
		 * the double must lie inside the bound itself, not only inside its double. */
		int outside = upper ? sc_dec_cmp(&dx, &x) > 0 : sc_dec_cmp(&dx, &x) < 0;
		double D = sb->excl || (outside && !written_as_float(sb->v)) ? nextafter(d, toward)
										: d;
		if (isinf(D)) {
			b->empty = 1;
			continue;
		}
		if ((fabs(D) >= 9007199254740992.0 ? exact_double(s->c, D, &r)
						   : sc_dec_shortest(s->c, D, &r)))
			return -1;
		tighter(upper ? &b->hi : &b->lo, upper ? &b->has_hi : &b->has_lo, &r, upper);
		if (!sb->excl)
			tighter(upper ? &b->hi : &b->lo, upper ? &b->has_hi : &b->has_lo, &x, upper);
	}
	if (b->has_lo && b->has_hi && sc_dec_cmp(&b->lo, &b->hi) > 0)
		b->empty = 1;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Ranges                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* Integers within b (integer decimals). */
static struct ir_node *integers(struct gr_ctx *c, const struct bounds *b)
{
	if (b->empty)
		return ir_nothing(c);
	struct ir_list alts = { 0 };
	/* x >= 0 */
	if (!b->has_hi || !b->hi.neg)
		ir_list_push(c, &alts, sc_int_range(c, b->has_lo && !b->lo.neg ? b->lo.ip : "0",
						    b->has_hi ? b->hi.ip : NULL));
	/* x < 0: a minus sign, then the magnitude */
	if (!b->has_lo || b->lo.neg) {
		const char *from = b->has_hi && b->hi.neg ? b->hi.ip : "1";
		ir_list_push(c, &alts, ir_seq2(c, ir_lit(c, "-"),
					       sc_int_range(c, from, b->has_lo ? b->lo.ip : NULL)));
	}
	return c->rc ? NULL : ir_alt(c, alts.n, alts.v);
}

/* Decimals within b, with or without a fraction. */
static struct ir_node *decimals(struct gr_ctx *c, const struct bounds *b)
{
	if (b->empty)
		return ir_nothing(c);
	struct ir_list alts = { 0 };
	if (!b->has_hi || !b->hi.neg)
		ir_list_push(c, &alts, sc_dec_nonneg(c, b->has_lo && !b->lo.neg ? &b->lo : &zero,
						     b->has_hi ? &b->hi : NULL));
	if (!b->has_lo || b->lo.neg) {
		struct sc_dec mag_lo = b->has_lo ? (struct sc_dec){ 0, b->lo.ip, b->lo.fp } : zero;
		struct ir_node *mag;
		if (b->has_hi && b->hi.neg) {
			struct sc_dec mag_hi = { 0, b->hi.ip, b->hi.fp };
			mag = sc_dec_nonneg(c, &mag_hi, b->has_lo ? &mag_lo : NULL);
		} else {
			mag = sc_dec_positive(c, b->has_lo ? &mag_lo : NULL);
		}
		ir_list_push(c, &alts, ir_seq2(c, ir_lit(c, "-"), mag));
	}
	return c->rc ? NULL : ir_alt(c, alts.n, alts.v);
}

/* ------------------------------------------------------------------------------------------ */
/* multipleOf                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* Decimal texts (no exponent; a minus only before a non-zero digit) with at most q fraction
 * digits whose value times 10^q is a multiple of m: an automaton over the digits that keeps
 * the remainder. States: start, after the minus, "0", the integer part's remainders, after the
 * point's remainders, the fraction's (remainder, digits) pairs. */
static const struct gr_frag *multiples(struct schema *s, uint64_t m, uint32_t q)
{
	struct gr_ctx *c = s->c;
	uint64_t n_states = 3 + m * (2 + (uint64_t)q);
	if (n_states > c->lim.max_states)
		return gr_fail(c, -E2BIG, "\"multipleOf\" needs %llu automaton states to check, over "
			       "the limit of %u (at %s)", (unsigned long long)n_states,
			       c->lim.max_states, s->path), NULL;
	struct gr_nfa *n = gr_nfa_new(c);
	if (!n)
		return NULL;
	uint32_t base = n->n_states, st;
	for (uint64_t i = 0; i < n_states; i++)
		if (gr_nfa_state(c, n, &st))
			goto fail;
	uint32_t start = base, minus = base + 1, zero_st = base + 2, ints = base + 3,
		 points = ints + (uint32_t)m, fracs = points + (uint32_t)m;
	struct ir_byteset one = { { 0 } }, point = { { 0 } }, digits_set[10];
	ir_set_add(&one, '-');
	ir_set_add(&point, '.');
	for (int d = 0; d < 10; d++) {
		memset(&digits_set[d], 0, sizeof(digits_set[d]));
		ir_set_add(&digits_set[d], (unsigned)('0' + d));
	}
	uint64_t pow_q = 1 % m; /* 10^q mod m, then 10^(q-k) as fractions end early */
	for (uint32_t k = 0; k < q; k++)
		pow_q = pow_q * 10 % m;
	if (gr_nfa_empty_edge(c, n, n->start, start) || gr_nfa_bytes(c, n, start, minus, &one) ||
	    gr_nfa_bytes(c, n, start, zero_st, &digits_set[0]) ||
	    gr_nfa_empty_edge(c, n, zero_st, n->final))
		goto fail;
	if (q && gr_nfa_bytes(c, n, zero_st, points, &point))
		goto fail;
	for (int d = 1; d < 10; d++)
		if (gr_nfa_bytes(c, n, start, ints + (uint32_t)(d % m), &digits_set[d]) ||
		    gr_nfa_bytes(c, n, minus, ints + (uint32_t)(d % m), &digits_set[d]))
			goto fail;
	for (uint64_t r = 0; r < m; r++) {
		if (gr_tick(c))
			goto fail;
		for (int d = 0; d < 10; d++) {
			uint32_t next = (uint32_t)((r * 10 + (uint64_t)d) % m);
			if (gr_nfa_bytes(c, n, ints + (uint32_t)r, ints + next, &digits_set[d]) ||
			    (q && gr_nfa_bytes(c, n, points + (uint32_t)r, fracs + next * q,
					       &digits_set[d])))
				goto fail;
			for (uint32_t k = 1; k < q; k++)
				if (gr_nfa_bytes(c, n, fracs + (uint32_t)r * q + k - 1,
						 fracs + next * q + k, &digits_set[d]))
					goto fail;
		}
		if ((r * pow_q) % m == 0 && gr_nfa_empty_edge(c, n, ints + (uint32_t)r, n->final))
			goto fail;
		if (q && gr_nfa_bytes(c, n, ints + (uint32_t)r, points + (uint32_t)r, &point))
			goto fail;
		uint64_t scale = 1 % m; /* 10^(q-k) for k = q..1 */
		for (uint32_t k = q; k >= 1; k--) {
			if ((r * scale) % m == 0 &&
			    gr_nfa_empty_edge(c, n, fracs + (uint32_t)r * q + k - 1, n->final))
				goto fail;
			scale = scale * 10 % m;
		}
	}
	return gr_frag_of_nfa(c, n);
fail:
	gr_nfa_free(n);
	return NULL;
}

/* The multiples' fragment for every multipleOf, or NULL with *none set when there is none. */
static const struct gr_frag *all_multiples(struct schema *s, const struct sn *p, int *none)
{
	const struct gr_frag *f = NULL;
	*none = !p->n_mult;
	for (uint32_t i = 0; i < p->n_mult; i++) {
		const struct jv *m = p->mult[i];
		const struct jv_decimal *d = &m->dec;
		uint64_t a = 0, q = d->exp < 0 ? (uint64_t)-d->exp : 0, five = 1;
		int64_t total = (int64_t)d->n + (d->exp > 0 ? d->exp : 0);
		if (total > 15)
			return gr_fail(s->c, -E2BIG, "\"multipleOf\" %.40s is too large to enforce (at "
				       "%s)", m->s, s->path), NULL;
		for (uint32_t k = 0; k < d->n; k++)
			a = a * 10 + (uint64_t)(d->digits[k] - '0');
		for (int64_t e = 0; e < d->exp; e++)
			a *= 10;
		for (uint64_t k = 0; k < q && five <= a; k++)
			five *= 5;
		if (q && (q > 22 || a % five)) {
			sc_fail(s, "\"multipleOf\" %.40s is not supported: only integers and binary "
				"fractions (0.5, 0.25...) divide exactly for floating-point validators "
				"too (0.07 / 0.01 is 7.000000000000001 in doubles)", m->s);
			return NULL;
		}
		const struct gr_frag *g = multiples(s, a, (uint32_t)q);
		if (!g || !(f = f ? gr_frag_and(s->c, f, g) : g))
			return NULL;
	}
	return f;
}

/* ------------------------------------------------------------------------------------------ */
/* Excluded values                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* Every spelling of the excluded numbers without an exponent (trailing zeros, -0). */
static struct ir_node *excluded_spellings(struct schema *s, const struct sn *p)
{
	struct gr_ctx *c = s->c;
	struct ir_list alts = { 0 };
	for (uint32_t i = 0; i < p->n_nots; i++) {
		const struct jv *v = p->nots[i];
		struct sc_dec x;
		if (v->kind != JV_NUMBER)
			continue;
		if (exact_dec(s, v, &x))
			return NULL;
		struct ir_node *zeros = ir_repeat(c, ir_lit(c, "0"), 0, GR_INF);
		struct ir_node *tail = *x.fp ? ir_seq3(c, ir_lit(c, "."), ir_lit(c, x.fp), zeros)
				       : ir_opt(c, ir_seq2(c, ir_lit(c, "."), ir_repeat(c, ir_lit(c, "0"),
										 1, GR_INF)));
		int is_zero = !strcmp(x.ip, "0") && !*x.fp;
		struct ir_node *sign = x.neg ? ir_lit(c, "-") : is_zero ? ir_opt(c, ir_lit(c, "-"))
				       : ir_empty(c);
		if (ir_list_push(c, &alts, ir_seq3(c, sign, ir_lit(c, x.ip), tail)))
			return NULL;
	}
	return alts.n ? ir_alt(c, alts.n, alts.v) : NULL;
}

static int excludes_numbers(const struct sn *p)
{
	for (uint32_t i = 0; i < p->n_nots; i++)
		if (p->nots[i]->kind == JV_NUMBER)
			return 1;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Integers and numbers                                                                       */
/* ------------------------------------------------------------------------------------------ */

/* 2^53: where multiples stay exact in doubles. */
static void clamp_exact(struct bounds *b)
{
	static const struct sc_dec lo = { 1, "9007199254740992", "" };
	static const struct sc_dec hi = { 0, "9007199254740992", "" };
	tighter(&b->lo, &b->has_lo, &lo, 0);
	tighter(&b->hi, &b->has_hi, &hi, 1);
	if (sc_dec_cmp(&b->lo, &b->hi) > 0)
		b->empty = 1;
}

/* The expression x, narrowed to the multiples and without the excluded values. */
static struct ir_node *finish(struct schema *s, const struct sn *p, struct ir_node *x,
			      const struct gr_frag *mult)
{
	if (!x || (!mult && !excludes_numbers(p)))
		return x;
	const struct gr_frag *f = gr_frag_of(s->c, x);
	if (f && mult)
		f = gr_frag_and(s->c, f, mult);
	struct ir_node *out = excludes_numbers(p) ? excluded_spellings(s, p) : NULL;
	if (f && out)
		f = gr_frag_minus(s->c, f, gr_frag_of(s->c, out));
	return ir_frag(s->c, f);
}

static void note_empty(struct schema *s, const struct bounds *b)
{
	if (b->empty)
		sc_note_why(s, "the bounds leave no number between them (at %s)", s->path);
}

struct ir_node *sc_integer(struct schema *s, const struct sn *p)
{
	struct bounds b;
	int no_mult;
	const struct gr_frag *mult = all_multiples(s, p, &no_mult);
	if ((!mult && !no_mult) || integer_bounds(s, p, &b))
		return NULL;
	if (mult)
		clamp_exact(&b);
	note_empty(s, &b);
	if (!b.has_lo && !b.has_hi && !mult && !excludes_numbers(p))
		return gr_json_integer(s->c);
	return finish(s, p, integers(s->c, &b), mult);
}

struct ir_node *sc_number(struct schema *s, const struct sn *p)
{
	struct gr_ctx *c = s->c;
	struct bounds bi, bd;
	int no_mult;
	const struct gr_frag *mult = all_multiples(s, p, &no_mult);
	if ((!mult && !no_mult) || integer_bounds(s, p, &bi) || double_bounds(s, p, &bd))
		return NULL;
	if (mult) {
		clamp_exact(&bi);
		clamp_exact(&bd);
	}
	if (bi.empty && bd.empty)
		note_empty(s, &bi);
	if (!p->lo.v && !p->hi.v && !mult && !excludes_numbers(p))
		return gr_json_number(c);
	/* Integer texts by the exact bounds, texts with a fraction by the doubles' bounds. */
	return finish(s, p, ir_alt2(c, integers(c, &bi), decimals(c, &bd)), mult);
}
