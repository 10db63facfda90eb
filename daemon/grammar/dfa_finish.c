/* SPDX-License-Identifier: MIT */
/*
 * dfa_finish.c — the automaton completed once every rule is in (automaton.h): calls resolved
 * to rules, each state's distance to its rule's end (Dijkstra over the reversed transitions,
 * a byte costing 1 and a call its callee's shortest sentence), each rule's follow set (the
 * bytes that may come right after it ends, over all its call sites), the push order.
 */
#include "dfa_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int oom(struct gr_ctx *c)
{
	return gr_fail(c, -ENOMEM, "out of memory compiling the grammar");
}

/* A binary heap of (distance, state). */
struct heap {
	uint64_t *v; /* distance << 32 | state */
	size_t n;
};

static void heap_push(struct heap *h, uint64_t x)
{
	size_t i = h->n++;
	while (i > 0 && h->v[(i - 1) / 2] > x) {
		h->v[i] = h->v[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h->v[i] = x;
}

static uint64_t heap_pop(struct heap *h)
{
	uint64_t top = h->v[0], last = h->v[--h->n];
	size_t i = 0;
	for (;;) {
		size_t k = 2 * i + 1;
		if (k >= h->n)
			break;
		if (k + 1 < h->n && h->v[k + 1] < h->v[k])
			k++;
		if (h->v[k] >= last)
			break;
		h->v[i] = h->v[k];
		i = k;
	}
	if (h->n)
		h->v[i] = last;
	return top;
}

static int distances(struct gr_ctx *c, struct gr_automaton *a)
{
	/* Reversed edges: to -> from with a weight, as CSR on `to`. */
	size_t n_edges = a->n_next + a->n_calls;
	uint32_t *first = calloc((size_t)a->n_states + 1, sizeof(uint32_t));
	uint32_t *from = malloc((n_edges + 1) * sizeof(uint32_t));
	uint32_t *weight = malloc((n_edges + 1) * sizeof(uint32_t));
	struct heap h = { .v = malloc((n_edges + a->n_states + 1) * sizeof(uint64_t)) };
	if (!first || !from || !weight || !h.v) {
		free(first), free(from), free(weight), free(h.v);
		return oom(c);
	}
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t s = 0; s < a->n_states; s++) {
			const struct gr_state *st = &a->states[s];
			uint32_t k = a->rules[st->rule].n_classes;
			for (uint32_t j = 0; j < k + st->n_calls; j++) {
				uint32_t t, w;
				if (j < k) {
					t = a->next[st->row + j];
					w = 1;
				} else {
					const struct gr_call *cl = &a->calls[st->calls + j - k];
					t = cl->ret;
					w = a->rules[cl->rule].minlen;
				}
				if (t == GR_DEAD)
					continue;
				if (pass == 0) {
					first[t + 1]++;
				} else {
					from[first[t]] = s;
					weight[first[t]++] = w;
				}
			}
		}
		if (pass == 0)
			for (uint32_t s = 0; s < a->n_states; s++)
				first[s + 1] += first[s];
		else
			for (uint32_t s = a->n_states; s > 0; s--)
				first[s] = first[s - 1];
	}
	first[0] = 0;
	for (uint32_t s = 0; s < a->n_states; s++) {
		a->states[s].dist = a->states[s].accepting ? 0 : GR_INF;
		if (a->states[s].accepting)
			heap_push(&h, s);
	}
	while (h.n) {
		uint64_t top = heap_pop(&h);
		uint32_t t = (uint32_t)top, d = (uint32_t)(top >> 32);
		if (d != a->states[t].dist)
			continue;
		for (uint32_t e = first[t]; e < first[t + 1]; e++) {
			uint64_t nd = (uint64_t)d + weight[e];
			if (nd < a->states[from[e]].dist && nd < GR_INF) {
				a->states[from[e]].dist = (uint32_t)nd;
				heap_push(&h, nd << 32 | from[e]);
			}
		}
	}
	free(first), free(from), free(weight), free(h.v);
	return 0;
}

static void set_union(struct ir_byteset *s, const struct ir_byteset *t, int *changed)
{
	for (int i = 0; i < 4; i++) {
		uint64_t w = s->w[i] | t->w[i];
		*changed |= w != s->w[i];
		s->w[i] = w;
	}
}

/* The bytes a state reads itself. */
static void own_bytes(const struct gr_automaton *a, uint32_t s, struct ir_byteset *out)
{
	*out = (struct ir_byteset){ { 0 } };
	for (unsigned b = 0; b < 256; b++)
		if (gr_next(a, s, (uint8_t)b) != GR_DEAD)
			ir_set_add(out, b);
}

/* The bytes that may come first from state s: its own and its callees' first ones. */
static void first_bytes(const struct gr_automaton *a, const struct ir_byteset *start_first,
			uint32_t s, struct ir_byteset *out)
{
	int changed = 0;
	own_bytes(a, s, out);
	const struct gr_state *st = &a->states[s];
	for (uint32_t j = 0; j < st->n_calls; j++)
		set_union(out, &start_first[a->calls[st->calls + j].rule], &changed);
}

static int follow_sets(struct gr_ctx *c, struct gr_automaton *a)
{
	struct ir_byteset *start_first = calloc(a->n_rules, sizeof(*start_first));
	uint32_t *by_topo = malloc(a->n_rules * sizeof(uint32_t));
	if (!start_first || !by_topo) {
		free(start_first), free(by_topo);
		return oom(c);
	}
	for (uint32_t r = 0; r < a->n_rules; r++)
		by_topo[a->rules[r].topo] = r;
	/* Callees come after their callers in topo order: fill from the back. */
	for (uint32_t i = a->n_rules; i > 0; i--) {
		uint32_t r = by_topo[i - 1];
		first_bytes(a, start_first, a->rules[r].start, &start_first[r]);
	}
	int changed = 1;
	while (changed) {
		changed = 0;
		if (gr_tick(c))
			break;
		for (uint32_t s = 0; s < a->n_states; s++) {
			const struct gr_state *st = &a->states[s];
			for (uint32_t j = 0; j < st->n_calls; j++) {
				const struct gr_call *cl = &a->calls[st->calls + j];
				struct ir_byteset f;
				first_bytes(a, start_first, cl->ret, &f);
				set_union(&a->rules[cl->rule].follow, &f, &changed);
				if (a->states[cl->ret].accepting)
					set_union(&a->rules[cl->rule].follow,
						  &a->rules[st->rule].follow, &changed);
			}
		}
	}
	free(start_first);
	free(by_topo);
	return c->rc ? -1 : 0;
}

struct gr_automaton *gr_dfa_finish(struct gr_ctx *c, struct gr_dfa_builder *b, uint32_t bottom,
				   const uint32_t *minlen, const uint32_t *topo)
{
	struct gr_automaton *a = calloc(1, sizeof(*a));
	if (!a) {
		oom(c);
		gr_dfa_builder_free(b);
		return NULL;
	}
	for (size_t k = 0; k < b->n_calls; k++)
		b->calls[k].rule = c->rules[b->calls[k].rule].index;
	for (uint32_t r = 0; r < b->n_rules; r++) {
		b->rules[r].minlen = minlen[r];
		b->rules[r].topo = topo[r];
	}
	*a = (struct gr_automaton){
		.n_states = (uint32_t)b->n_states, .n_rules = b->n_rules, .bottom = bottom,
		.states = b->states, .rules = b->rules, .classes = b->classes, .next = b->next,
		.n_next = b->n_next, .calls = b->calls, .n_calls = (uint32_t)b->n_calls,
		.names = b->names,
	};
	a->bytes = sizeof(*a) + b->n_states * sizeof(*a->states) +
		   b->n_rules * (sizeof(*a->rules) + 256) + b->n_next * sizeof(*a->next) +
		   b->n_calls * sizeof(*a->calls) + b->n_names;
	b->states = NULL, b->rules = NULL, b->classes = NULL, b->next = NULL, b->calls = NULL;
	b->names = NULL;
	gr_dfa_builder_free(b);
	if (distances(c, a) || follow_sets(c, a)) {
		gr_automaton_free(a);
		return NULL;
	}
	return a;
}

void gr_automaton_free(struct gr_automaton *a)
{
	if (!a)
		return;
	free(a->states);
	free(a->rules);
	free(a->classes);
	free(a->next);
	free(a->calls);
	free(a->names);
	free(a);
}
