/* SPDX-License-Identifier: MIT */
/*
 * schema_range.c — decimal ranges as expressions (schema.h): the decimal strings whose values
 * lie between two bounds, built digit by digit (the classic integer-range expression,
 * extended to fractions by comparing digits left to right). Written without exponents and
 * without negative zero. schema_number.c decides the bounds.
 */
#include "schema.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIGITS SC_MAX_DIGITS

/* ------------------------------------------------------------------------------------------ */
/* Decimals                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* digits[0..n) with the decimal point after `point` digits (may be <= 0 or > n), normalized
 * into the arena. */
int sc_dec_make(struct gr_ctx *c, int neg, const char *digits, long n, long point,
		    struct sc_dec *out)
{
	long ip_len = point > 0 ? point : 0, fp_len = n - point > 0 ? n - point : 0;
	char *ip = gr_alloc(c, (size_t)ip_len + 2), *fp = gr_alloc(c, (size_t)fp_len - (point < 0 ? point : 0) + 2);
	if (!ip || !fp)
		return -1;
	long w = 0;
	for (long i = 0; i < ip_len; i++) {
		char d = i < n ? digits[i] : '0';
		if (w > 0 || d != '0')
			ip[w++] = d;
	}
	if (w == 0)
		ip[w++] = '0';
	ip[w] = 0;
	w = 0;
	for (long i = point < 0 ? point : 0; i < 0; i++)
		fp[w++] = '0';
	for (long i = point > 0 ? point : 0; i < n; i++)
		fp[w++] = digits[i];
	while (w > 0 && fp[w - 1] == '0')
		w--;
	fp[w] = 0;
	*out = (struct sc_dec){ neg && !(ip[0] == '0' && !ip[1] && w == 0), ip, fp };
	return 0;
}

/* The decimal printf wrote: "-ddd.ddd" or "-d.ddde+XX". */
int sc_dec_printed(struct gr_ctx *c, const char *s, struct sc_dec *out)
{
	int neg = *s == '-';
	s += neg;
	char digits[1200]; /* a double's exact expansion has at most 767 significant digits */
	long n = 0, point = -1, exp = 0;
	for (; *s && *s != 'e'; s++) {
		if (*s == '.')
			point = n;
		else if (n < (long)sizeof(digits))
			digits[n++] = *s;
	}
	if (*s == 'e')
		exp = strtol(s + 1, NULL, 10);
	if (point < 0)
		point = n;
	return sc_dec_make(c, neg, digits, n, point + exp, out);
}

/* The shortest decimal that reads back as d. */
int sc_dec_shortest(struct gr_ctx *c, double d, struct sc_dec *out)
{
	char buf[64];
	for (int p = 1; p <= 17; p++) {
		snprintf(buf, sizeof(buf), "%.*e", p - 1, d);
		if (strtod(buf, NULL) == d)
			break;
	}
	return sc_dec_printed(c, buf, out);
}

static int cmp_digits(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la != lb)
		return la < lb ? -1 : 1;
	int r = strcmp(a, b);
	return r < 0 ? -1 : r > 0;
}

/* Fractions compare as digit strings padded with zeros. */
static int cmp_frac(const char *a, const char *b)
{
	for (; *a || *b; a += !!*a, b += !!*b) {
		char x = *a ? *a : '0', y = *b ? *b : '0';
		if (x != y)
			return x < y ? -1 : 1;
	}
	return 0;
}

int sc_dec_cmp(const struct sc_dec *a, const struct sc_dec *b)
{
	if (a->neg != b->neg)
		return a->neg ? -1 : 1;
	int r = cmp_digits(a->ip, b->ip);
	if (!r)
		r = cmp_frac(a->fp, b->fp);
	return a->neg ? -r : r;
}

/* Non-negative integer digit strings plus or minus one. */
char *sc_digits_add(struct gr_ctx *c, const char *a, int delta)
{
	size_t n = strlen(a);
	char *r = gr_alloc(c, n + 2);
	if (!r)
		return NULL;
	memcpy(r + 1, a, n + 1);
	r[0] = '0';
	for (size_t i = n; i > 0; i--) {
		if (delta > 0 && r[i] < '9') {
			r[i]++;
			break;
		}
		if (delta < 0 && r[i] > '0') {
			r[i]--;
			break;
		}
		r[i] = delta > 0 ? '0' : '9';
		if (i == 1 && delta > 0)
			r[0] = '1';
	}
	char *p = r;
	while (p[0] == '0' && p[1])
		p++;
	return p;
}

/* ------------------------------------------------------------------------------------------ */
/* Integer ranges                                                                             */
/* ------------------------------------------------------------------------------------------ */

static struct ir_node *digit(struct gr_ctx *c, char lo, char hi)
{
	return ir_byte_range(c, (uint8_t)lo, (uint8_t)hi);
}

static struct ir_node *any_digits(struct gr_ctx *c, uint32_t n)
{
	return ir_repeat(c, digit(c, '0', '9'), n, n);
}

/* "999..." and "000..." as long as any bound (one copy per compile). */
struct fill {
	const char *nines, *zeros;
};

static int fills(struct gr_ctx *c, struct fill *f)
{
	char *n = gr_alloc(c, MAX_DIGITS + 2), *z = gr_alloc(c, MAX_DIGITS + 2);
	if (!n || !z)
		return -1;
	memset(n, '9', MAX_DIGITS + 1);
	memset(z, '0', MAX_DIGITS + 1);
	*f = (struct fill){ n, z };
	return 0;
}

/* Digit strings of length n between a and b (a <= b). */
static struct ir_node *same_length(struct gr_ctx *c, const struct fill *f, const char *a,
				   const char *b, size_t n)
{
	if (n == 0)
		return ir_empty(c);
	if (a[0] == b[0])
		return ir_seq2(c, digit(c, a[0], a[0]), same_length(c, f, a + 1, b + 1, n - 1));
	int low_all0 = 1, high_all9 = 1;
	for (size_t i = 1; i < n; i++) {
		low_all0 &= a[i] == '0';
		high_all9 &= b[i] == '9';
	}
	if (low_all0 && high_all9)
		return ir_seq2(c, digit(c, a[0], b[0]), any_digits(c, (uint32_t)n - 1));
	struct ir_list alts = { 0 };
	ir_list_push(c, &alts, ir_seq2(c, digit(c, a[0], a[0]),
				       same_length(c, f, a + 1, f->nines, n - 1)));
	if (a[0] + 1 <= b[0] - 1)
		ir_list_push(c, &alts, ir_seq2(c, digit(c, (char)(a[0] + 1), (char)(b[0] - 1)),
					       any_digits(c, (uint32_t)n - 1)));
	ir_list_push(c, &alts, ir_seq2(c, digit(c, b[0], b[0]),
				       same_length(c, f, f->zeros, b + 1, n - 1)));
	return c->rc ? NULL : ir_alt(c, alts.n, alts.v);
}

/* Integers a..b without leading zeros (b NULL: no upper end); a <= b. */
struct ir_node *sc_int_range(struct gr_ctx *c, const char *a, const char *b)
{
	struct fill f;
	if (fills(c, &f))
		return NULL;
	size_t la = strlen(a), lb = b ? strlen(b) : 0;
	if (b && la == lb)
		return same_length(c, &f, a, b, la);
	struct ir_list alts = { 0 };
	ir_list_push(c, &alts, same_length(c, &f, a, f.nines, la));
	if (!b) {
		ir_list_push(c, &alts, ir_seq3(c, digit(c, '1', '9'), any_digits(c, (uint32_t)la),
					       ir_repeat(c, digit(c, '0', '9'), 0, GR_INF)));
	} else {
		for (size_t len = la + 1; len < lb; len++)
			ir_list_push(c, &alts, ir_seq2(c, digit(c, '1', '9'),
						       any_digits(c, (uint32_t)len - 1)));
		char *low = gr_alloc(c, lb + 1);
		if (!low)
			return NULL;
		memset(low, '0', lb);
		low[0] = '1';
		ir_list_push(c, &alts, same_length(c, &f, low, b, lb));
	}
	return c->rc ? NULL : ir_alt(c, alts.n, alts.v);
}

/* ------------------------------------------------------------------------------------------ */
/* Fractions                                                                                  */
/* ------------------------------------------------------------------------------------------ */

static struct ir_node *digits_star(struct gr_ctx *c)
{
	return ir_repeat(c, digit(c, '0', '9'), 0, GR_INF);
}

/* A fraction's digits that are >= f from position i on (f padded with zeros). */
static struct ir_node *frac_ge(struct gr_ctx *c, const char *f, size_t i)
{
	if (!f[i])
		return digits_star(c);
	struct ir_node *eq = ir_seq2(c, digit(c, f[i], f[i]), frac_ge(c, f, i + 1));
	if (f[i] == '9')
		return eq;
	return ir_alt2(c, ir_seq2(c, digit(c, (char)(f[i] + 1), '9'), digits_star(c)), eq);
}

/* ... that are <= f: beyond f only zeros; a prefix of f may end early (after a digit). */
static struct ir_node *frac_le(struct gr_ctx *c, const char *f, size_t i)
{
	if (!f[i])
		return ir_repeat(c, digit(c, '0', '0'), 0, GR_INF);
	struct ir_list alts = { 0 };
	if (i > 0)
		ir_list_push(c, &alts, ir_empty(c));
	if (f[i] != '0')
		ir_list_push(c, &alts, ir_seq2(c, digit(c, '0', (char)(f[i] - 1)), digits_star(c)));
	ir_list_push(c, &alts, ir_seq2(c, digit(c, f[i], f[i]), frac_le(c, f, i + 1)));
	return c->rc ? NULL : ir_alt(c, alts.n, alts.v);
}

/* ... that are <= f and not all zeros. */
static struct ir_node *frac_le_nonzero(struct gr_ctx *c, const char *f, size_t i)
{
	if (!f[i])
		return ir_nothing(c);
	if (f[i] == '0')
		return ir_seq2(c, digit(c, '0', '0'), frac_le_nonzero(c, f, i + 1));
	struct ir_node *nonzero_after = ir_seq3(c, digits_star(c), digit(c, '1', '9'), digits_star(c));
	struct ir_list alts = { 0 };
	if (f[i] > '1')
		ir_list_push(c, &alts, ir_seq2(c, digit(c, '1', (char)(f[i] - 1)), digits_star(c)));
	ir_list_push(c, &alts, ir_seq2(c, digit(c, '0', '0'), nonzero_after));
	ir_list_push(c, &alts, ir_seq2(c, digit(c, f[i], f[i]), frac_le(c, f, i + 1)));
	return c->rc ? NULL : ir_alt(c, alts.n, alts.v);
}

/* ... between a and b (a <= b as fractions). */
static struct ir_node *frac_between(struct gr_ctx *c, const char *a, const char *b, size_t i)
{
	size_t la = strlen(a), lb = strlen(b);
	if (i >= la && i >= lb)
		return ir_repeat(c, digit(c, '0', '0'), 0, GR_INF);
	char x = i < la ? a[i] : '0', y = i < lb ? b[i] : '0';
	if (x == y) {
		/* Past a's digits, a prefix of b may end (after a digit). */
		struct ir_node *eq = ir_seq2(c, digit(c, x, x), frac_between(c, a, b, i + 1));
		return i > 0 && i >= la ? ir_alt2(c, ir_empty(c), eq) : eq;
	}
	struct ir_list alts = { 0 };
	ir_list_push(c, &alts, ir_seq2(c, digit(c, x, x), i + 1 < la ? frac_ge(c, a, i + 1)
							      : digits_star(c)));
	if (x + 1 <= y - 1)
		ir_list_push(c, &alts, ir_seq2(c, digit(c, (char)(x + 1), (char)(y - 1)), digits_star(c)));
	ir_list_push(c, &alts, ir_seq2(c, digit(c, y, y), i + 1 < lb ? frac_le(c, b, i + 1)
							      : ir_repeat(c, digit(c, '0', '0'), 0, GR_INF)));
	return c->rc ? NULL : ir_alt(c, alts.n, alts.v);
}

/* The three comparisons as whole fractions: at least one digit after the point. */
static struct ir_node *fraction_ge(struct gr_ctx *c, const char *f)
{
	return *f ? frac_ge(c, f, 0) : ir_repeat(c, digit(c, '0', '9'), 1, GR_INF);
}

static struct ir_node *fraction_le(struct gr_ctx *c, const char *f)
{
	return *f ? frac_le(c, f, 0) : ir_repeat(c, digit(c, '0', '0'), 1, GR_INF);
}

static struct ir_node *fraction_between(struct gr_ctx *c, const char *a, const char *b)
{
	return *a || *b ? frac_between(c, a, b, 0) : ir_repeat(c, digit(c, '0', '0'), 1, GR_INF);
}

static struct ir_node *dot_then(struct gr_ctx *c, struct ir_node *digits)
{
	return ir_seq2(c, ir_lit(c, "."), digits);
}

static struct ir_node *any_fraction(struct gr_ctx *c)
{
	return ir_opt(c, dot_then(c, ir_repeat(c, digit(c, '0', '9'), 1, GR_INF)));
}

/* An integer part lit, then a fraction: optional (when the bound allows none) or required. */
static struct ir_node *with_fraction(struct gr_ctx *c, const char *ip, struct ir_node *frac,
				     int bare_ok)
{
	struct ir_node *f = dot_then(c, frac);
	return ir_seq2(c, ir_lit(c, ip), bare_ok ? ir_opt(c, f) : f);
}

/* Non-negative decimals a <= x <= b (b NULL: unbounded). */
struct ir_node *sc_dec_nonneg(struct gr_ctx *c, const struct sc_dec *a, const struct sc_dec *b)
{
	struct ir_list alts = { 0 };
	if (b && !strcmp(a->ip, b->ip))
		return with_fraction(c, a->ip, fraction_between(c, a->fp, b->fp), !*a->fp);
	ir_list_push(c, &alts, with_fraction(c, a->ip, fraction_ge(c, a->fp), !*a->fp));
	const char *next = sc_digits_add(c, a->ip, +1);
	if (!next)
		return NULL;
	if (!b) {
		ir_list_push(c, &alts, ir_seq2(c, sc_int_range(c, next, NULL), any_fraction(c)));
	} else {
		const char *before = sc_digits_add(c, b->ip, -1);
		if (!before)
			return NULL;
		if (cmp_digits(next, before) <= 0)
			ir_list_push(c, &alts, ir_seq2(c, sc_int_range(c, next, before), any_fraction(c)));
		ir_list_push(c, &alts, with_fraction(c, b->ip, fraction_le(c, b->fp), 1));
	}
	return c->rc ? NULL : ir_alt(c, alts.n, alts.v);
}

/* Decimals 0 < y <= b (b NULL: unbounded): what follows a minus sign. */
struct ir_node *sc_dec_positive(struct gr_ctx *c, const struct sc_dec *b)
{
	struct ir_node *nonzero_frac = ir_seq3(c, digits_star(c), digit(c, '1', '9'), digits_star(c));
	struct ir_list alts = { 0 };
	if (!b) {
		ir_list_push(c, &alts, ir_seq2(c, sc_int_range(c, "1", NULL), any_fraction(c)));
		ir_list_push(c, &alts, ir_seq2(c, ir_lit(c, "0."), nonzero_frac));
		return c->rc ? NULL : ir_alt(c, alts.n, alts.v);
	}
	if (strcmp(b->ip, "0")) {
		const char *before = sc_digits_add(c, b->ip, -1);
		if (!before)
			return NULL;
		if (strcmp(before, "0"))
			ir_list_push(c, &alts, ir_seq2(c, sc_int_range(c, "1", before), any_fraction(c)));
		ir_list_push(c, &alts, with_fraction(c, b->ip, fraction_le(c, b->fp), 1));
		ir_list_push(c, &alts, ir_seq2(c, ir_lit(c, "0."), nonzero_frac));
	} else {
		ir_list_push(c, &alts, ir_seq2(c, ir_lit(c, "0."), frac_le_nonzero(c, b->fp, 0)));
	}
	return c->rc ? NULL : ir_alt(c, alts.n, alts.v);
}
