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

/* Pairs of states to the product's states: open addressing on (i << 32 | j) + 1. */
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

/* The state of pair key in *state, made (and queued) when new: 1 new, 0 found, -1 error. */
static int map_get(struct gr_ctx *c, struct pair_map *m, struct gr_nfa *n, uint64_t key,
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
	if (gr_nfa_state(c, n, state))
		return -1;
	m->key[at] = key + 1;
	m->val[at] = *state;
	m->n++;
	return 1;
}

/* Classes of the product: the bytes neither a nor b tells apart. */
static uint32_t product_classes(const struct gr_frag *a, const struct gr_frag *b, uint8_t *ca,
				uint8_t *cb, struct ir_byteset *sets)
{
	uint32_t n = 0;
	for (unsigned byte = 0; byte < 256; byte++) {
		uint32_t k = 0;
		while (k < n && !(ca[k] == a->cls[byte] && cb[k] == b->cls[byte]))
			k++;
		if (k == n) {
			ca[n] = a->cls[byte], cb[n] = b->cls[byte];
			memset(&sets[n], 0, sizeof(sets[n]));
			n++;
		}
		ir_set_add(&sets[k], byte);
	}
	return n;
}

static int queue_push(struct gr_ctx *c, uint64_t **q, size_t *tail, size_t *cap, uint64_t x)
{
	if (*tail == *cap) {
		size_t n = *cap ? *cap * 2 : 1024;
		uint64_t *p = realloc(*q, n * sizeof(uint64_t));
		if (!p)
			return oom(c);
		*q = p;
		*cap = n;
	}
	(*q)[(*tail)++] = x;
	return 0;
}

/* a ∩ b, or a minus b: pairs (i, j), j == b->n the sink of a difference. */
static const struct gr_frag *product(struct gr_ctx *c, const struct gr_frag *a,
				     const struct gr_frag *b, int minus)
{
	if (!a->n || (!minus && !b->n))
		return a->n ? b : a;
	uint8_t ca[256], cb[256];
	struct ir_byteset *sets = malloc(256 * sizeof(*sets));
	uint64_t *queue = NULL;
	struct pair_map m = { 0 };
	struct gr_nfa *n = gr_nfa_new(c);
	size_t head = 0, tail = 0, cap = 0;
	uint32_t sink = b->n, first;
	if (!sets || !n)
		goto fail;
	uint32_t k_n = product_classes(a, b, ca, cb, sets);
	uint64_t start = b->n ? 0 : sink;
	if (map_get(c, &m, n, start, &first) < 0 || gr_nfa_empty_edge(c, n, n->start, first) ||
	    queue_push(c, &queue, &tail, &cap, start))
		goto fail;
	while (head < tail) {
		uint64_t pair = queue[head++];
		uint32_t i = (uint32_t)(pair >> 32), j = (uint32_t)pair, from;
		if (map_get(c, &m, n, pair, &from) < 0 || gr_tick(c))
			goto fail;
		int acc = a->accepting[i] && (j == sink ? minus : minus != b->accepting[j]);
		if (acc && gr_nfa_empty_edge(c, n, from, n->final))
			goto fail;
		for (uint32_t k = 0; k < k_n; k++) {
			uint32_t ti = a->delta[(size_t)i * a->n_classes + ca[k]], tj = sink, to;
			if (ti == GR_DEAD)
				continue;
			if (j != sink)
				tj = b->delta[(size_t)j * b->n_classes + cb[k]];
			if (tj == GR_DEAD && !minus)
				continue;
			if (tj == GR_DEAD)
				tj = sink;
			uint64_t next = (uint64_t)ti << 32 | tj;
			int made = map_get(c, &m, n, next, &to);
			if (made < 0 || gr_nfa_bytes(c, n, from, to, &sets[k]) ||
			    (made && queue_push(c, &queue, &tail, &cap, next)))
				goto fail;
		}
	}
	free(queue), free(sets), free(m.key), free(m.val);
	return gr_frag_of_nfa(c, n);
fail:
	free(queue), free(sets), free(m.key), free(m.val);
	gr_nfa_free(n);
	return NULL;
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

/* From the state after `open`, f's states and transitions but those on open and close, a
 * state accepting where `close` leads to an accepting one. */
const struct gr_frag *gr_frag_between(struct gr_ctx *c, const struct gr_frag *f, uint8_t open,
				      uint8_t close)
{
	uint32_t start = f->n ? f->delta[f->cls[open]] : GR_DEAD;
	struct gr_nfa *n = gr_nfa_new(c);
	if (!n)
		return NULL;
	uint32_t base = n->n_states, s;
	for (uint32_t i = 0; i < f->n; i++)
		if (gr_nfa_state(c, n, &s))
			goto fail;
	if (start != GR_DEAD && gr_nfa_empty_edge(c, n, n->start, base + start))
		goto fail;
	for (uint32_t i = 0; i < f->n && start != GR_DEAD; i++) {
		uint32_t after = f->delta[(size_t)i * f->n_classes + f->cls[close]];
		if (after != GR_DEAD && f->accepting[after] &&
		    gr_nfa_empty_edge(c, n, base + i, n->final))
			goto fail;
		for (uint32_t k = 0; k < f->n_classes; k++) {
			uint32_t t = f->delta[(size_t)i * f->n_classes + k];
			struct ir_byteset set = f->class_set[k];
			set.w[open >> 6] &= ~(1ull << (open & 63));
			set.w[close >> 6] &= ~(1ull << (close & 63));
			if (t != GR_DEAD && (set.w[0] | set.w[1] | set.w[2] | set.w[3]) &&
			    gr_nfa_bytes(c, n, base + i, base + t, &set))
				goto fail;
		}
	}
	return gr_frag_of_nfa(c, n);
fail:
	gr_nfa_free(n);
	return NULL;
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
