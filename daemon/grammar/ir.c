/* SPDX-License-Identifier: MIT */
/*
 * ir.c — the compile context (arena, limits, clock, first error), the expression builders,
 * and code-point sets spelled as UTF-8 (ir.h).
 */
#include "ir.h"

#include "common/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Context                                                                                    */
/* ------------------------------------------------------------------------------------------ */

struct gr_arena_block {
	struct gr_arena_block *next;
	max_align_t data[];
};

int gr_fail(struct gr_ctx *c, int code, const char *fmt, ...)
{
	if (c->rc == 0) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(c->err, BN_GRAMMAR_ERR_LEN, fmt, ap);
		va_end(ap);
		c->rc = code;
	}
	return -1;
}

int gr_tick(struct gr_ctx *c)
{
	if (c->rc)
		return -1;
	if (++c->ticks < 256)
		return 0;
	c->ticks = 0;
	if (bn_thread_cpu_ns() > c->deadline_ns)
		return gr_fail(c, -ETIME, "the grammar did not compile within %u ms of CPU time (the "
			       "compile budget)", c->lim.compile_ms);
	return 0;
}

void *gr_alloc(struct gr_ctx *c, size_t size)
{
	struct gr_arena *a = &c->arena;
	size = (size + 15) & ~(size_t)15;
	if (!a->head || a->used + size > a->cap) {
		size_t cap = size > (1u << 16) ? size : (1u << 16);
		struct gr_arena_block *b = malloc(sizeof(*b) + cap);
		if (!b) {
			gr_fail(c, -ENOMEM, "out of memory compiling the grammar");
			return NULL;
		}
		b->next = a->head;
		a->head = b;
		a->used = 0;
		a->cap = cap;
		a->total += cap;
	}
	void *p = (char *)a->head->data + a->used;
	a->used += size;
	memset(p, 0, size);
	return p;
}

char *gr_strndup(struct gr_ctx *c, const char *s, size_t n)
{
	char *p = gr_alloc(c, n + 1);
	if (p)
		memcpy(p, s, n);
	return p;
}

void gr_arena_free(struct gr_arena *a)
{
	while (a->head) {
		struct gr_arena_block *next = a->head->next;
		free(a->head);
		a->head = next;
	}
	*a = (struct gr_arena){ 0 };
}

int64_t gr_rule_new(struct gr_ctx *c, const char *name)
{
	if (c->n_rules >= c->lim.max_rules) {
		gr_fail(c, -E2BIG, "the grammar needs more than %u rules (the limit)", c->lim.max_rules);
		return -1;
	}
	if (c->n_rules == c->cap_rules) {
		uint32_t cap = c->cap_rules ? c->cap_rules * 2 : 64;
		struct ir_rule *r = gr_alloc(c, cap * sizeof(*r));
		if (!r)
			return -1;
		if (c->n_rules)
			memcpy(r, c->rules, c->n_rules * sizeof(*r));
		c->rules = r;
		c->cap_rules = cap;
	}
	struct ir_rule *r = &c->rules[c->n_rules];
	*r = (struct ir_rule){ .name = gr_strndup(c, name, strlen(name)), .minlen = GR_INF };
	return r->name ? (int64_t)c->n_rules++ : -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Builders                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static struct ir_node *node(struct gr_ctx *c, enum ir_kind kind)
{
	if (c->rc)
		return NULL;
	struct ir_node *x = gr_alloc(c, sizeof(*x));
	if (x)
		x->kind = (uint8_t)kind;
	return x;
}

struct ir_node *ir_nothing(struct gr_ctx *c)
{
	return node(c, IR_NOTHING);
}

struct ir_node *ir_empty(struct gr_ctx *c)
{
	return node(c, IR_EMPTY);
}

struct ir_node *ir_bytes(struct gr_ctx *c, const struct ir_byteset *set)
{
	if ((set->w[0] | set->w[1] | set->w[2] | set->w[3]) == 0)
		return ir_nothing(c);
	struct ir_node *x = node(c, IR_BYTES);
	struct ir_byteset *copy = x ? gr_alloc(c, sizeof(*copy)) : NULL;
	if (!copy)
		return NULL;
	*copy = *set;
	x->set = copy;
	return x;
}

struct ir_node *ir_byte_range(struct gr_ctx *c, unsigned lo, unsigned hi)
{
	struct ir_byteset s = { { 0 } };
	for (unsigned b = lo; b <= hi && b < 256; b++)
		ir_set_add(&s, b);
	return ir_bytes(c, &s);
}

struct ir_node *ir_literal(struct gr_ctx *c, const void *bytes, size_t n)
{
	if (n == 0)
		return ir_empty(c);
	if (n == 1)
		return ir_byte_range(c, *(const uint8_t *)bytes, *(const uint8_t *)bytes);
	struct ir_node *x = node(c, IR_SEQ);
	struct ir_node **kids = x ? gr_alloc(c, n * sizeof(*kids)) : NULL;
	if (!kids)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		uint8_t b = ((const uint8_t *)bytes)[i];
		if (!(kids[i] = ir_byte_range(c, b, b)))
			return NULL;
	}
	x->kids = kids;
	x->n_kids = (uint32_t)n;
	return x;
}

struct ir_node *ir_lit(struct gr_ctx *c, const char *s)
{
	return ir_literal(c, s, strlen(s));
}

static struct ir_node *list_node(struct gr_ctx *c, enum ir_kind kind, uint32_t n,
				 struct ir_node *const *kids)
{
	for (uint32_t i = 0; i < n; i++)
		if (!kids[i])
			return NULL;
	if (n == 1)
		return kids[0];
	if (n == 0)
		return kind == IR_SEQ ? ir_empty(c) : ir_nothing(c);
	struct ir_node *x = node(c, kind);
	struct ir_node **copy = x ? gr_alloc(c, n * sizeof(*copy)) : NULL;
	if (!copy)
		return NULL;
	memcpy(copy, kids, n * sizeof(*copy));
	x->kids = copy;
	x->n_kids = n;
	return x;
}

struct ir_node *ir_seq(struct gr_ctx *c, uint32_t n, struct ir_node *const *kids)
{
	return list_node(c, IR_SEQ, n, kids);
}

struct ir_node *ir_alt(struct gr_ctx *c, uint32_t n, struct ir_node *const *kids)
{
	return list_node(c, IR_ALT, n, kids);
}

struct ir_node *ir_seq2(struct gr_ctx *c, struct ir_node *a, struct ir_node *b)
{
	struct ir_node *k[] = { a, b };
	return ir_seq(c, 2, k);
}

struct ir_node *ir_seq3(struct gr_ctx *c, struct ir_node *a, struct ir_node *b,
			struct ir_node *d)
{
	struct ir_node *k[] = { a, b, d };
	return ir_seq(c, 3, k);
}

struct ir_node *ir_alt2(struct gr_ctx *c, struct ir_node *a, struct ir_node *b)
{
	struct ir_node *k[] = { a, b };
	return ir_alt(c, 2, k);
}

struct ir_node *ir_repeat(struct gr_ctx *c, struct ir_node *x, uint32_t min, uint32_t max)
{
	if (!x)
		return NULL;
	if (max != GR_INF && max > c->lim.max_repeat) {
		gr_fail(c, -E2BIG, "a repetition of up to %u exceeds the limit of %u", max,
			c->lim.max_repeat);
		return NULL;
	}
	if (min > c->lim.max_repeat) {
		gr_fail(c, -E2BIG, "a repetition of at least %u exceeds the limit of %u", min,
			c->lim.max_repeat);
		return NULL;
	}
	if (max == 0)
		return ir_empty(c);
	if (min == 1 && max == 1)
		return x;
	struct ir_node *r = node(c, IR_REPEAT);
	struct ir_node **kids = r ? gr_alloc(c, sizeof(*kids)) : NULL;
	if (!kids)
		return NULL;
	kids[0] = x;
	r->kids = kids;
	r->n_kids = 1;
	r->min = min;
	r->max = max;
	return r;
}

struct ir_node *ir_opt(struct gr_ctx *c, struct ir_node *x)
{
	return ir_repeat(c, x, 0, 1);
}

struct ir_node *ir_call(struct gr_ctx *c, uint32_t rule)
{
	struct ir_node *x = node(c, IR_CALL);
	if (x) {
		x->rule = rule;
		c->rules[rule].refs++;
	}
	return x;
}

struct ir_node *ir_members(struct gr_ctx *c, uint32_t n, struct ir_node *const *kids,
			   const uint8_t *required, struct ir_node *sep)
{
	if (!sep)
		return NULL;
	if (n == 0)
		return ir_empty(c);
	struct ir_node *x = list_node(c, IR_MEMBERS, n, kids);
	if (!x)
		return NULL;
	if (n == 1) /* list_node returned the kid itself */
		return required[0] ? x : ir_opt(c, x);
	uint8_t *req = gr_alloc(c, n);
	if (!req)
		return NULL;
	memcpy(req, required, n);
	x->required = req;
	x->sep = sep;
	return x;
}

int ir_list_push(struct gr_ctx *c, struct ir_list *l, struct ir_node *x)
{
	if (!x)
		return -1;
	if (l->n == l->cap) {
		uint32_t cap = l->cap ? l->cap * 2 : 8;
		struct ir_node **v = gr_alloc(c, cap * sizeof(*v));
		if (!v)
			return -1;
		if (l->n)
			memcpy(v, l->v, l->n * sizeof(*v));
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = x;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Code-point sets                                                                            */
/* ------------------------------------------------------------------------------------------ */

int gr_cpset_add(struct gr_ctx *c, struct gr_cpset *s, uint32_t lo, uint32_t hi)
{
	if (lo > hi || hi > GR_MAX_CP)
		return gr_fail(c, -EINVAL, "a character range U+%04X..U+%04X is out of order or "
			       "beyond U+10FFFF", lo, hi);
	if (s->n == s->cap) {
		uint32_t cap = s->cap ? s->cap * 2 : 8;
		uint32_t (*r)[2] = gr_alloc(c, cap * sizeof(*r));
		if (!r)
			return -1;
		if (s->n)
			memcpy(r, s->r, s->n * sizeof(*r));
		s->r = r;
		s->cap = cap;
	}
	s->r[s->n][0] = lo;
	s->r[s->n][1] = hi;
	s->n++;
	return 0;
}

int gr_cpset_add_set(struct gr_ctx *c, struct gr_cpset *s, const struct gr_cpset *t)
{
	for (uint32_t i = 0; i < t->n; i++)
		if (gr_cpset_add(c, s, t->r[i][0], t->r[i][1]))
			return -1;
	return 0;
}

static int cmp_range(const void *a, const void *b)
{
	const uint32_t *x = a, *y = b;
	return x[0] < y[0] ? -1 : x[0] > y[0];
}

void gr_cpset_normalize(struct gr_cpset *s)
{
	if (s->n < 2)
		return;
	qsort(s->r, s->n, sizeof(*s->r), cmp_range);
	uint32_t w = 0;
	for (uint32_t i = 1; i < s->n; i++) {
		if (s->r[i][0] <= s->r[w][1] + 1) {
			if (s->r[i][1] > s->r[w][1])
				s->r[w][1] = s->r[i][1];
		} else {
			w++;
			s->r[w][0] = s->r[i][0];
			s->r[w][1] = s->r[i][1];
		}
	}
	s->n = w + 1;
}

int gr_cpset_negate(struct gr_ctx *c, struct gr_cpset *s)
{
	struct gr_cpset out = { 0 };
	uint32_t next = 0;
	for (uint32_t i = 0; i < s->n; i++) {
		if (s->r[i][0] > next && gr_cpset_add(c, &out, next, s->r[i][0] - 1))
			return -1;
		next = s->r[i][1] + 1;
	}
	if (next <= GR_MAX_CP && gr_cpset_add(c, &out, next, GR_MAX_CP))
		return -1;
	*s = out;
	return 0;
}

int gr_cpset_subtract(struct gr_ctx *c, struct gr_cpset *s, const struct gr_cpset *t)
{
	struct gr_cpset neg = { 0 };
	if (gr_cpset_add_set(c, &neg, t))
		return -1;
	gr_cpset_normalize(&neg);
	if (gr_cpset_negate(c, &neg))
		return -1;
	/* s ∩ ¬t, both sorted: a merge of the two range lists. */
	struct gr_cpset out = { 0 };
	uint32_t i = 0, j = 0;
	while (i < s->n && j < neg.n) {
		uint32_t lo = s->r[i][0] > neg.r[j][0] ? s->r[i][0] : neg.r[j][0];
		uint32_t hi = s->r[i][1] < neg.r[j][1] ? s->r[i][1] : neg.r[j][1];
		if (lo <= hi && gr_cpset_add(c, &out, lo, hi))
			return -1;
		if (s->r[i][1] < neg.r[j][1])
			i++;
		else
			j++;
	}
	*s = out;
	return 0;
}

int gr_cpset_contains(const struct gr_cpset *s, uint32_t cp)
{
	for (uint32_t i = 0; i < s->n; i++)
		if (cp >= s->r[i][0] && cp <= s->r[i][1])
			return 1;
	return 0;
}

int gr_utf8_encode(uint32_t cp, uint8_t out[4])
{
	if (cp < 0x80) {
		out[0] = (uint8_t)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (uint8_t)(0xC0 | cp >> 6);
		out[1] = (uint8_t)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (uint8_t)(0xE0 | cp >> 12);
		out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (uint8_t)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (uint8_t)(0xF0 | cp >> 18);
	out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (uint8_t)(0x80 | (cp & 0x3F));
	return 4;
}

int32_t gr_utf8_decode(const uint8_t *s, size_t n, uint32_t *len)
{
	uint8_t b = s[0];
	uint32_t need, cp, min;
	if (b < 0x80) {
		*len = 1;
		return b;
	} else if (b >= 0xC2 && b < 0xE0) {
		need = 1, cp = b & 0x1F, min = 0x80;
	} else if (b >= 0xE0 && b < 0xF0) {
		need = 2, cp = b & 0x0F, min = 0x800;
	} else if (b >= 0xF0 && b < 0xF5) {
		need = 3, cp = b & 0x07, min = 0x10000;
	} else {
		return -1;
	}
	if (n < need + 1)
		return -1;
	for (uint32_t i = 1; i <= need; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return -1;
		cp = cp << 6 | (s[i] & 0x3F);
	}
	if (cp < min || cp > GR_MAX_CP || (cp >= 0xD800 && cp <= 0xDFFF))
		return -1;
	*len = need + 1;
	return (int32_t)cp;
}

/* A UTF-8 byte-range sequence: the code points whose encodings have a byte of lo[i]..hi[i]
 * at each position i. */
struct utf8_seq {
	uint8_t n, lo[4], hi[4];
};

struct utf8_seqs {
	struct utf8_seq *v;
	uint32_t n, cap;
};

/* The scalar values lo..hi of one encoded length, as byte-range sequences (the way a UTF-8
 * decoder's automaton reads them): split until every byte position is a plain range. */
static int utf8_ranges(struct gr_ctx *c, uint32_t lo, uint32_t hi, struct utf8_seqs *out)
{
	uint8_t a[4], b[4];
	int n = gr_utf8_encode(lo, a);
	if (gr_utf8_encode(hi, b) != n)
		return gr_fail(c, -EINVAL, "internal: UTF-8 range of mixed lengths");
	for (int i = 1; i < n; i++) {
		uint32_t m = (1u << (6 * i)) - 1;
		if ((lo & ~m) != (hi & ~m)) {
			if ((lo & m) != 0)
				return utf8_ranges(c, lo, lo | m, out) ||
				       utf8_ranges(c, (lo | m) + 1, hi, out);
			if ((hi & m) != m)
				return utf8_ranges(c, lo, (hi & ~m) - 1, out) ||
				       utf8_ranges(c, hi & ~m, hi, out);
		}
	}
	if (out->n == out->cap) {
		uint32_t cap = out->cap ? out->cap * 2 : 16;
		struct utf8_seq *v = gr_alloc(c, cap * sizeof(*v));
		if (!v)
			return -1;
		if (out->n)
			memcpy(v, out->v, out->n * sizeof(*v));
		out->v = v;
		out->cap = cap;
	}
	struct utf8_seq *q = &out->v[out->n++];
	q->n = (uint8_t)n;
	memcpy(q->lo, a, 4);
	memcpy(q->hi, b, 4);
	return 0;
}

/* lo..hi split at the encoded-length boundaries, surrogates left out. */
static int raw_range(struct gr_ctx *c, uint32_t lo, uint32_t hi, struct utf8_seqs *out)
{
	static const uint32_t bounds[][2] = {
		{ 0, 0x7F }, { 0x80, 0x7FF }, { 0x800, 0xD7FF }, { 0xE000, 0xFFFF },
		{ 0x10000, GR_MAX_CP },
	};
	for (size_t i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++) {
		uint32_t l = lo > bounds[i][0] ? lo : bounds[i][0];
		uint32_t h = hi < bounds[i][1] ? hi : bounds[i][1];
		if (l <= h && utf8_ranges(c, l, h, out))
			return -1;
	}
	return 0;
}

/* Sequences in code-point order as a tree of shared prefixes: those with the same range at
 * position d (adjacent, and then of one length) share it once. A class like \p{L} becomes a
 * few hundred states instead of a flat alternation of a thousand sequences. */
static struct ir_node *seq_tree(struct gr_ctx *c, const struct utf8_seq *s, uint32_t n,
				uint32_t d)
{
	struct ir_list alts = { 0 };
	for (uint32_t i = 0; i < n;) {
		uint32_t j = i + 1;
		while (j < n && s[j].lo[d] == s[i].lo[d] && s[j].hi[d] == s[i].hi[d])
			j++;
		struct ir_node *head = ir_byte_range(c, s[i].lo[d], s[i].hi[d]);
		struct ir_node *x = s[i].n == d + 1 ? head : ir_seq2(c, head, seq_tree(c, s + i, j - i,
											   d + 1));
		if (ir_list_push(c, &alts, x))
			return NULL;
		i = j;
	}
	return ir_alt(c, alts.n, alts.v);
}

/* JSON's escape of a code point that must not appear raw in a string. */
static struct ir_node *json_escape(struct gr_ctx *c, uint32_t cp)
{
	char buf[8];
	switch (cp) {
	case '"':  return ir_lit(c, "\\\"");
	case '\\': return ir_lit(c, "\\\\");
	case '\b': return ir_lit(c, "\\b");
	case '\f': return ir_lit(c, "\\f");
	case '\n': return ir_lit(c, "\\n");
	case '\r': return ir_lit(c, "\\r");
	case '\t': return ir_lit(c, "\\t");
	default:
		snprintf(buf, sizeof(buf), "\\u%04x", cp);
		return ir_lit(c, buf);
	}
}

static int json_needs_escape(uint32_t cp)
{
	return cp < 0x20 || cp == '"' || cp == '\\';
}

struct ir_node *ir_cpset(struct gr_ctx *c, const struct gr_cpset *s, enum gr_text_mode mode)
{
	struct ir_list alts = { 0 };
	struct gr_cpset raw = { 0 };
	if (gr_cpset_add_set(c, &raw, s))
		return NULL;
	if (mode == GR_TEXT_JSON) {
		/* What a JSON string must escape (34 code points) one by one, the rest raw. */
		struct gr_cpset special = { 0 };
		for (uint32_t cp = 0; cp <= '\\'; cp++) {
			if (!json_needs_escape(cp) || !gr_cpset_contains(s, cp))
				continue;
			if (ir_list_push(c, &alts, json_escape(c, cp)) ||
			    gr_cpset_add(c, &special, cp, cp))
				return NULL;
		}
		gr_cpset_normalize(&special);
		if (special.n && gr_cpset_subtract(c, &raw, &special))
			return NULL;
	}
	struct utf8_seqs seqs = { 0 };
	for (uint32_t i = 0; i < raw.n; i++)
		if (raw_range(c, raw.r[i][0], raw.r[i][1], &seqs) || gr_tick(c))
			return NULL;
	if (seqs.n && ir_list_push(c, &alts, seq_tree(c, seqs.v, seqs.n, 0)))
		return NULL;
	return c->rc ? NULL : ir_alt(c, alts.n, alts.v);
}

struct ir_node *ir_codepoint(struct gr_ctx *c, uint32_t cp, enum gr_text_mode mode)
{
	if (mode == GR_TEXT_JSON && json_needs_escape(cp))
		return json_escape(c, cp);
	uint8_t b[4];
	return ir_literal(c, b, (size_t)gr_utf8_encode(cp, b));
}

struct ir_node *ir_any_char_except(struct gr_ctx *c, const uint32_t *excl, uint32_t n,
				   enum gr_text_mode mode)
{
	struct gr_cpset s = { 0 };
	for (uint32_t i = 0; i < n; i++)
		if (gr_cpset_add(c, &s, excl[i], excl[i]))
			return NULL;
	gr_cpset_normalize(&s);
	if (gr_cpset_negate(c, &s))
		return NULL;
	return ir_cpset(c, &s, mode);
}
