/* SPDX-License-Identifier: MIT */
/*
 * regular.c — fragments: regular languages as minimal deterministic automata (regular.h).
 * Intersection and difference are the product construction over the reachable pairs of
 * states (for a difference, b's missing transitions lead to a sink that stays out of b);
 * the product goes through dfa.c once more to be minimal, which also drops the pairs that
 * cannot reach an accepting one.
 */
#include "regular.h"
#include "automaton.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int oom(struct gr_ctx *c)
{
	return gr_fail(c, -ENOMEM, "out of memory compiling the grammar");
}

const struct gr_frag *gr_frag_of_nfa(struct gr_ctx *c, struct gr_nfa *n)
{
	struct gr_frag *f = gr_alloc(c, sizeof(*f));
	int rc = !f || gr_nfa_seal(c, n) || gr_dfa_fragment(c, n, f);
	gr_nfa_free(n);
	return rc ? NULL : f;
}

const struct gr_frag *gr_frag_of(struct gr_ctx *c, const struct ir_node *x)
{
	if (!x)
		return NULL;
	struct gr_nfa *n = gr_nfa_new(c);
	if (!n)
		return NULL;
	if (gr_nfa_expr(c, n, x, n->start, n->final)) {
		gr_nfa_free(n);
		return NULL;
	}
	return gr_frag_of_nfa(c, n);
}

/* ------------------------------------------------------------------------------------------ */
/* Products                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* An automaton being made as a table (regular.h's form before minimizing). */
struct table {
	uint32_t n, cap, k;          /* states, room, classes */
	uint32_t *delta;             /* [cap][k] */
	uint8_t *acc;
	uint64_t *pair;              /* what each state stands for (a product's pair) */
};

static void table_free(struct table *t)
{
	free(t->delta), free(t->acc), free(t->pair);
}

/* A new state for pair p, every transition GR_DEAD. */
static int table_state(struct gr_ctx *c, struct table *t, uint64_t p, uint32_t *id)
{
	/* The product's reachable pairs bound its minimal automaton's states from above, but a
	 * product past the state limit would take long to minimize: refused as the limit. */
	if (t->n >= c->lim.max_states)
		return gr_fail(c, -E2BIG, "the grammar needs more than %u automaton states (the "
			       "limit): an intersection of languages (a pattern with lengths) is too "
			       "large", c->lim.max_states);
	if (t->n == t->cap) {
		uint32_t cap = t->cap ? t->cap * 2 : 256;
		uint32_t *d = realloc(t->delta, (size_t)cap * t->k * sizeof(uint32_t));
		if (d)
			t->delta = d;
		uint8_t *a = realloc(t->acc, cap);
		if (a)
			t->acc = a;
		uint64_t *q = realloc(t->pair, cap * sizeof(uint64_t));
		if (q)
			t->pair = q;
		if (!d || !a || !q)
			return oom(c);
		t->cap = cap;
	}
	for (uint32_t k = 0; k < t->k; k++)
		t->delta[(size_t)t->n * t->k + k] = GR_DEAD;
	t->acc[t->n] = 0;
	t->pair[t->n] = p;
	*id = t->n++;
	return 0;
}

/* Pairs of states to the table's states: open addressing on (i << 32 | j) + 1. */
struct pair_map {
	uint64_t *key;
	uint32_t *val;
	uint32_t mask, n;
};

static int map_grow(struct gr_ctx *c, struct pair_map *m)
{
	uint32_t size = m->mask ? (m->mask + 1) * 2 : 1024;
	uint64_t *k = calloc(size, sizeof(uint64_t));
	uint32_t *v = malloc(size * sizeof(uint32_t));
	if (!k || !v) {
		free(k), free(v);
		return oom(c);
	}
	for (uint32_t i = 0; m->mask && i <= m->mask; i++) {
		if (!m->key[i])
			continue;
		uint32_t at = (uint32_t)(m->key[i] * 0x9E3779B97F4A7C15ull >> 32) & (size - 1);
		while (k[at])
			at = (at + 1) & (size - 1);
		k[at] = m->key[i];
		v[at] = m->val[i];
	}
	free(m->key), free(m->val);
	m->key = k, m->val = v, m->mask = size - 1;
	return 0;
}

/* The table state of pair key, made when new. */
static int map_get(struct gr_ctx *c, struct pair_map *m, struct table *t, uint64_t key,
		   uint32_t *state)
{
	if ((m->n + 1) * 2 > m->mask && map_grow(c, m))
		return -1;
	uint32_t at = (uint32_t)((key + 1) * 0x9E3779B97F4A7C15ull >> 32) & m->mask;
	for (; m->key[at]; at = (at + 1) & m->mask)
		if (m->key[at] == key + 1) {
			*state = m->val[at];
			return 0;
		}
	if (table_state(c, t, key, state))
		return -1;
	m->key[at] = key + 1;
	m->val[at] = *state;
	m->n++;
	return 0;
}

/* Classes of the product: the bytes neither a nor b tells apart. */
static uint32_t product_classes(const struct gr_frag *a, const struct gr_frag *b, uint8_t *ca,
				uint8_t *cb, uint8_t *cls)
{
	uint32_t n = 0;
	for (unsigned byte = 0; byte < 256; byte++) {
		uint32_t k = 0;
		while (k < n && !(ca[k] == a->cls[byte] && cb[k] == b->cls[byte]))
			k++;
		if (k == n)
			ca[n] = a->cls[byte], cb[n] = b->cls[byte], n++;
		cls[byte] = (uint8_t)k;
	}
	return n;
}

/* The table, once done (ok), minimized into a fragment; in any case it and the map freed. */
static const struct gr_frag *table_end(struct gr_ctx *c, struct table *t, struct pair_map *m,
				       const uint8_t *cls, int ok)
{
	struct gr_frag *f = ok ? gr_alloc(c, sizeof(*f)) : NULL;
	int rc = !f || gr_dfa_fragment_of_table(c, t->n, t->k, cls, t->delta, t->acc, f);
	free(m->key), free(m->val);
	table_free(t);
	return rc ? NULL : f;
}

/* a ∩ b, or a minus b: the reachable pairs (i, j), j == b->n the sink of a difference, made
 * and filled in the order they are found (a breadth-first walk of the table itself). */
static const struct gr_frag *product(struct gr_ctx *c, const struct gr_frag *a,
				     const struct gr_frag *b, int minus)
{
	if (!a->n || (!minus && !b->n))
		return a->n ? b : a;
	uint8_t ca[256], cb[256], cls[256];
	struct table t = { 0 };
	struct pair_map m = { 0 };
	uint32_t sink = b->n, first;
	t.k = product_classes(a, b, ca, cb, cls);
	if (map_get(c, &m, &t, b->n ? 0 : sink, &first))
		goto fail;
	for (uint32_t s = 0; s < t.n; s++) {
		uint32_t i = (uint32_t)(t.pair[s] >> 32), j = (uint32_t)t.pair[s];
		if (gr_tick(c))
			goto fail;
		t.acc[s] = a->accepting[i] && (j == sink ? minus : minus != b->accepting[j]);
		for (uint32_t k = 0; k < t.k; k++) {
			uint32_t ti = a->delta[(size_t)i * a->n_classes + ca[k]], tj = sink, to;
			if (ti == GR_DEAD)
				continue;
			if (j != sink)
				tj = b->delta[(size_t)j * b->n_classes + cb[k]];
			if (tj == GR_DEAD && !minus)
				continue;
			if (tj == GR_DEAD)
				tj = sink;
			if (map_get(c, &m, &t, (uint64_t)ti << 32 | tj, &to))
				goto fail;
			t.delta[(size_t)s * t.k + k] = to;
		}
	}
	return table_end(c, &t, &m, cls, 1);
fail:
	return table_end(c, &t, &m, cls, 0);
}

const struct gr_frag *gr_frag_and(struct gr_ctx *c, const struct gr_frag *a,
				  const struct gr_frag *b)
{
	return a && b ? product(c, a, b, 0) : NULL;
}

const struct gr_frag *gr_frag_minus(struct gr_ctx *c, const struct gr_frag *a,
				    const struct gr_frag *b)
{
	return a && b ? product(c, a, b, 1) : NULL;
}

/* From the state after `open`, f's states and transitions but those on open and close (their
 * bytes get a class of their own, dead), a state accepting where `close` leads to an
 * accepting one. */
const struct gr_frag *gr_frag_between(struct gr_ctx *c, const struct gr_frag *f, uint8_t open,
				      uint8_t close)
{
	uint32_t start = f->n ? f->delta[f->cls[open]] : GR_DEAD;
	uint8_t cls[256];
	/* With 256 classes every byte is its own: open's and close's columns are just skipped. */
	int singletons = f->n_classes == 256;
	struct table t = { .k = f->n_classes + !singletons };
	struct pair_map m = { 0 };
	uint32_t first;
	memcpy(cls, f->cls, sizeof(cls));
	if (!singletons)
		cls[open] = cls[close] = (uint8_t)f->n_classes;
	if (start == GR_DEAD)
		return gr_frag_of(c, ir_nothing(c));
	if (map_get(c, &m, &t, start, &first))
		goto fail;
	for (uint32_t s = 0; s < t.n; s++) {
		uint32_t i = (uint32_t)t.pair[s], after;
		after = f->delta[(size_t)i * f->n_classes + f->cls[close]];
		t.acc[s] = after != GR_DEAD && f->accepting[after];
		for (uint32_t k = 0; k < f->n_classes; k++) {
			uint32_t to, next = f->delta[(size_t)i * f->n_classes + k];
			if (next == GR_DEAD || (singletons && (k == f->cls[open] || k == f->cls[close])))
				continue;
			if (map_get(c, &m, &t, next, &to))
				goto fail;
			t.delta[(size_t)s * t.k + k] = to;
		}
	}
	return table_end(c, &t, &m, cls, 1);
fail:
	return table_end(c, &t, &m, cls, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Questions                                                                                  */
/* ------------------------------------------------------------------------------------------ */

int gr_frag_matches(const struct gr_frag *f, const void *bytes, size_t n)
{
	const uint8_t *p = bytes;
	uint32_t s = 0;
	if (!f->n)
		return 0;
	for (size_t i = 0; i < n; i++) {
		s = f->delta[(size_t)s * f->n_classes + f->cls[p[i]]];
		if (s == GR_DEAD)
			return 0;
	}
	return f->accepting[s];
}

/* 1 when the transitions out of s read UTF-8 continuation bytes (s is inside a character):
 * in a language of valid UTF-8, a state's live transitions are all of one kind. */
static int inside_char(const struct gr_frag *f, uint32_t s)
{
	for (uint32_t k = 0; k < f->n_classes; k++) {
		if (f->delta[(size_t)s * f->n_classes + k] == GR_DEAD)
			continue;
		for (unsigned b = 0x80; b < 0xC0; b++)
			if (ir_set_has(&f->class_set[k], b))
				return 1;
		return 0;
	}
	return 0;
}

/* The most code points on a path from the start to an accepting state, GR_INF when a cycle
 * makes it unbounded: a depth-first search in post order, iterative (a fragment of a long
 * string is a long chain of states). */
static uint32_t longest(const struct gr_frag *f, uint32_t *memo, uint8_t *state, uint32_t *stack,
			uint32_t *next_class)
{
	uint32_t sp = 0;
	stack[sp++] = 0;
	state[0] = 1;
	next_class[0] = 0;
	while (sp) {
		uint32_t s = stack[sp - 1];
		if (next_class[s] < f->n_classes) {
			uint32_t t = f->delta[(size_t)s * f->n_classes + next_class[s]++];
			if (t == GR_DEAD || state[t] == 2)
				continue;
			if (state[t] == 1)
				return GR_INF; /* a cycle */
			state[t] = 1;
			next_class[t] = 0;
			stack[sp++] = t;
			continue;
		}
		uint32_t best = 0, step = !inside_char(f, s);
		for (uint32_t k = 0; k < f->n_classes; k++) {
			uint32_t t = f->delta[(size_t)s * f->n_classes + k];
			if (t != GR_DEAD && memo[t] + step > best)
				best = memo[t] + step;
		}
		memo[s] = best;
		state[s] = 2;
		sp--;
	}
	return memo[0];
}

void gr_frag_code_points(const struct gr_frag *f, uint32_t *min, uint32_t *max)
{
	*min = *max = GR_INF;
	if (!f->n)
		return;
	uint32_t *dist = malloc(f->n * sizeof(uint32_t)), *deque = malloc(2 * f->n * sizeof(uint32_t));
	uint32_t *memo = malloc(f->n * sizeof(uint32_t)), *stack = malloc(f->n * sizeof(uint32_t));
	uint32_t *next_class = malloc(f->n * sizeof(uint32_t));
	uint8_t *state = calloc(f->n, 1);
	if (dist && deque && memo && stack && next_class && state) {
		/* 0-1 breadth-first search: a byte that starts a code point costs 1. */
		for (uint32_t s = 0; s < f->n; s++)
			dist[s] = GR_INF;
		uint32_t head = f->n, tail = f->n;
		dist[0] = 0;
		deque[tail++] = 0;
		while (head < tail) {
			uint32_t s = deque[head++], w = !inside_char(f, s);
			for (uint32_t k = 0; k < f->n_classes; k++) {
				uint32_t t = f->delta[(size_t)s * f->n_classes + k];
				if (t == GR_DEAD || dist[s] + w >= dist[t])
					continue;
				dist[t] = dist[s] + w;
				if (w)
					deque[tail++] = t;
				else
					deque[--head] = t;
			}
		}
		for (uint32_t s = 0; s < f->n; s++)
			if (f->accepting[s] && dist[s] < *min)
				*min = dist[s];
		*max = longest(f, memo, state, stack, next_class);
	}
	free(dist), free(deque), free(memo), free(stack), free(next_class), free(state);
}

struct ir_node *ir_frag(struct gr_ctx *c, const struct gr_frag *f)
{
	if (!f)
		return NULL;
	if (!f->n)
		return ir_nothing(c);
	struct ir_node *x = gr_alloc(c, sizeof(*x));
	if (x) {
		x->kind = IR_FRAG;
		x->frag = f;
	}
	return x;
}
