/* SPDX-License-Identifier: MIT */
/*
 * nfa.c — a rule's expression as a nondeterministic automaton with empty edges (Thompson's
 * construction; automaton.h). Calls of rules that stay rules are edges labelled with the
 * callee (and an empty edge beside them when the callee may match nothing); calls of the
 * others are expanded in place. Every fragment only leaves its entry and enters its exit
 * (a loop gets a state of its own), so alternatives can share those two states.
 */
#include "automaton.h"
#include "regular.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NFA_MAX_DEPTH 2048 /* nested expressions and expanded calls, for the C stack */

static int new_state(struct gr_ctx *c, struct gr_nfa *n, uint32_t *s)
{
	if (n->n_states >= n->max_states)
		return gr_fail(c, -E2BIG, "the grammar needs more than %u automaton states (the "
			       "limit): a repetition or an expansion is too large", c->lim.max_states);
	*s = n->n_states++;
	return 0;
}

static int add_edge(struct gr_ctx *c, struct gr_nfa *n, uint32_t from, uint32_t to,
		    uint32_t label)
{
	if (n->n_edges == n->cap_edges) {
		uint32_t cap = n->cap_edges ? n->cap_edges * 2 : 256;
		struct nfa_edge *e = realloc(n->edges, cap * sizeof(*e));
		if (!e)
			return gr_fail(c, -ENOMEM, "out of memory compiling the grammar");
		n->edges = e;
		n->cap_edges = cap;
	}
	n->edges[n->n_edges++] = (struct nfa_edge){ from, to, label };
	return 0;
}

static int add_set(struct gr_ctx *c, struct gr_nfa *n, const struct ir_byteset *set,
		   uint32_t *index)
{
	/* Sets repeat (every '"', every digit class): the last few are checked first. */
	for (uint32_t i = n->n_sets, k = 0; i > 0 && k < 8; i--, k++)
		if (!memcmp(&n->sets[i - 1], set, sizeof(*set))) {
			*index = i - 1;
			return 0;
		}
	if (n->n_sets == n->cap_sets) {
		uint32_t cap = n->cap_sets ? n->cap_sets * 2 : 64;
		struct ir_byteset *s = realloc(n->sets, cap * sizeof(*s));
		if (!s)
			return gr_fail(c, -ENOMEM, "out of memory compiling the grammar");
		n->sets = s;
		n->cap_sets = cap;
	}
	n->sets[n->n_sets] = *set;
	*index = n->n_sets++;
	return 0;
}

static int build(struct gr_ctx *c, struct gr_nfa *n, const struct ir_node *x, uint32_t in,
		 uint32_t out, uint32_t depth);

/* x min..max times: min copies in a row, then either a loop or (max - min) nested optional
 * copies, each of which may leave for the exit (linear in max, and deterministic enough). */
static int build_repeat(struct gr_ctx *c, struct gr_nfa *n, const struct ir_node *x,
			uint32_t in, uint32_t out, uint32_t depth)
{
	const struct ir_node *kid = x->kids[0];
	uint32_t at = in, next = 0;
	if (kid->minlen == GR_INF) /* then min is 0: the empty string alone */
		return add_edge(c, n, in, out, NFA_EPS);
	for (uint32_t i = 0; i < x->min; i++) {
		if (new_state(c, n, &next) || build(c, n, kid, at, next, depth))
			return -1;
		at = next;
	}
	if (x->max == GR_INF) {
		uint32_t loop = 0;
		return new_state(c, n, &loop) || add_edge(c, n, at, loop, NFA_EPS) ||
		       build(c, n, kid, loop, loop, depth) || add_edge(c, n, loop, out, NFA_EPS);
	}
	for (uint32_t i = x->min; i < x->max; i++) {
		if (add_edge(c, n, at, out, NFA_EPS))
			return -1;
		if (i + 1 == x->max)
			return build(c, n, kid, at, out, depth);
		if (new_state(c, n, &next) || build(c, n, kid, at, next, depth))
			return -1;
		at = next;
	}
	return add_edge(c, n, at, out, NFA_EPS);
}

/* Members in order, optional ones skippable, sep between two present ones. Two states per
 * gap: `none` (nothing written yet; one state serves every gap up to the first required
 * member, since all members before it may be skipped) and `some`; each member is built once,
 * after an entry both reach. */
/* Counted members: a state per gap and counts (l present for the minimum, saturating at it;
 * u present for the maximum, or only whether any is when there is none), each kid built at
 * each. A repeated kid's later occurrences add to u alone. */
struct counted {
	uint32_t nl, nu;
	uint32_t *gap, *rep;     /* [kid][l][u]: the state before kid (gap), inside its repeats */
};

static uint32_t *at(const struct counted *k, uint32_t *v, uint32_t g, uint32_t l, uint32_t u)
{
	return &v[((size_t)g * k->nl + l) * k->nu + u];
}

static int member_step(struct gr_ctx *c, struct gr_nfa *n, const struct ir_node *x,
		       uint32_t kid, uint32_t from, uint32_t sep_needed, uint32_t to,
		       uint32_t depth)
{
	uint32_t entry = 0;
	return new_state(c, n, &entry) ||
	       (sep_needed ? build(c, n, x->sep, from, entry, depth)
			   : add_edge(c, n, from, entry, NFA_EPS)) ||
	       build(c, n, x->kids[kid], entry, to, depth);
}

static int build_members_counted(struct gr_ctx *c, struct gr_nfa *n, const struct ir_node *x,
				 uint32_t in, uint32_t out, uint32_t depth)
{
	uint32_t lo = x->min, hi = x->max, g_n = x->n_kids;
	struct counted k = { lo + 1, hi == GR_INF ? 2 : hi + 1, NULL, NULL };
	size_t cells = (size_t)(g_n + 1) * k.nl * k.nu;
	int rc = -1;
	k.gap = malloc(cells * sizeof(uint32_t));
	k.rep = malloc(cells * sizeof(uint32_t));
	if (!k.gap || !k.rep) {
		gr_fail(c, -ENOMEM, "out of memory compiling the grammar");
		goto out;
	}
	for (size_t i = 0; i < cells; i++)
		if (new_state(c, n, &k.gap[i]) || new_state(c, n, &k.rep[i]))
			goto out;
	if (add_edge(c, n, in, *at(&k, k.gap, 0, 0, 0), NFA_EPS))
		goto out;
	for (uint32_t g = 0; g < g_n; g++) {
		if (x->kids[g]->minlen == GR_INF && x->required[g])
			break; /* nothing gets past it */
		for (uint32_t l = 0; l < k.nl; l++)
			for (uint32_t u = 0; u < k.nu; u++) {
				uint32_t from = *at(&k, k.gap, g, l, u), l2 = l + 1 < lo ? l + 1 : lo;
				uint32_t u2 = hi == GR_INF ? 1 : u + 1;
				int room = hi == GR_INF || u + 1 <= hi, live = x->kids[g]->minlen != GR_INF;
				uint32_t *next = x->repeat[g] ? k.rep : k.gap;
				if (!x->required[g] &&
				    add_edge(c, n, from, *at(&k, k.gap, g + 1, l, u), NFA_EPS))
					goto out;
				if (room && live && member_step(c, n, x, g, from, u > 0,
								*at(&k, next, x->repeat[g] ? g : g + 1,
								    l2, u2), depth))
					goto out;
				if (!x->repeat[g])
					continue;
				uint32_t r = *at(&k, k.rep, g, l, u);
				if (add_edge(c, n, r, *at(&k, k.gap, g + 1, l, u), NFA_EPS) ||
				    (room && live &&
				     member_step(c, n, x, g, r, 1, *at(&k, k.rep, g, l, u2), depth)))
					goto out;
			}
	}
	for (uint32_t u = 0; u < k.nu; u++)
		if (add_edge(c, n, *at(&k, k.gap, g_n, lo, u), out, NFA_EPS))
			goto out;
	rc = 0;
out:
	free(k.gap);
	free(k.rep);
	return rc;
}

static int build_members(struct gr_ctx *c, struct gr_nfa *n, const struct ir_node *x,
			 uint32_t in, uint32_t out, uint32_t depth)
{
	if (x->repeat)
		return build_members_counted(c, n, x, in, out, depth);
	uint32_t none = in, some = GR_DEAD;
	for (uint32_t i = 0; i < x->n_kids; i++) {
		uint32_t entry = 0, after = 0;
		if (x->kids[i]->minlen == GR_INF)
			continue; /* optional (the members would have no sentence otherwise) */
		if (new_state(c, n, &entry) || new_state(c, n, &after) ||
		    (none != GR_DEAD && add_edge(c, n, none, entry, NFA_EPS)) ||
		    (some != GR_DEAD && build(c, n, x->sep, some, entry, depth)) ||
		    build(c, n, x->kids[i], entry, after, depth) ||
		    (!x->required[i] && some != GR_DEAD && add_edge(c, n, some, after, NFA_EPS)))
			return -1;
		if (x->required[i])
			none = GR_DEAD;
		some = after;
	}
	return (none != GR_DEAD && add_edge(c, n, none, out, NFA_EPS)) ||
	       (some != GR_DEAD && add_edge(c, n, some, out, NFA_EPS));
}

/* A fragment's states copied in: its start after in, its accepting states before out. */
static int build_frag(struct gr_ctx *c, struct gr_nfa *n, const struct gr_frag *f, uint32_t in,
		      uint32_t out)
{
	uint32_t base = n->n_states, s, label[256];
	for (uint32_t i = 0; i < f->n; i++)
		if (new_state(c, n, &s))
			return -1;
	if (f->n && add_edge(c, n, in, base, NFA_EPS))
		return -1;
	/* One set per class: the sets' count is what determinizing the rule costs per byte. */
	for (uint32_t k = 0; k < f->n_classes; k++)
		if (add_set(c, n, &f->class_set[k], &label[k]))
			return -1;
	for (uint32_t i = 0; i < f->n; i++) {
		for (uint32_t k = 0; k < f->n_classes; k++) {
			uint32_t t = f->delta[(size_t)i * f->n_classes + k];
			if (t != GR_DEAD && add_edge(c, n, base + i, base + t, label[k]))
				return -1;
		}
		if (f->accepting[i] && add_edge(c, n, base + i, out, NFA_EPS))
			return -1;
	}
	return 0;
}

static int build(struct gr_ctx *c, struct gr_nfa *n, const struct ir_node *x, uint32_t in,
		 uint32_t out, uint32_t depth)
{
	if (++depth > NFA_MAX_DEPTH)
		return gr_fail(c, -E2BIG, "the grammar nests deeper than %u (expressions within "
			       "expressions, rules expanded within rules)", NFA_MAX_DEPTH);
	if (gr_tick(c))
		return -1;
	if (x->minlen == GR_INF)
		return 0; /* no sentence: no state that could not reach the end */
	uint32_t label = 0, at, next = 0;
	switch (x->kind) {
	case IR_NOTHING:
		return 0; /* no edge: lower.c removes these before building */
	case IR_EMPTY:
		return add_edge(c, n, in, out, NFA_EPS);
	case IR_BYTES:
		return add_set(c, n, x->set, &label) || add_edge(c, n, in, out, label);
	case IR_SEQ:
		at = in;
		for (uint32_t i = 0; i + 1 < x->n_kids; i++) {
			if (new_state(c, n, &next) || build(c, n, x->kids[i], at, next, depth))
				return -1;
			at = next;
		}
		return build(c, n, x->kids[x->n_kids - 1], at, out, depth);
	case IR_ALT:
		/* Alternatives share the entry and the exit: no construction adds an edge into
		 * its entry or out of its exit (loops go through states of their own). */
		for (uint32_t i = 0; i < x->n_kids; i++)
			if (x->kids[i]->minlen != GR_INF && build(c, n, x->kids[i], in, out, depth))
				return -1;
		return 0;
	case IR_REPEAT:
		return build_repeat(c, n, x, in, out, depth);
	case IR_MEMBERS:
		return build_members(c, n, x, in, out, depth);
	case IR_FRAG:
		return build_frag(c, n, x->frag, in, out);
	case IR_CALL: {
		const struct ir_rule *r = &c->rules[x->rule];
		if (n->no_calls)
			return gr_fail(c, -EINVAL, "internal: rule \"%s\" called inside a regular "
				       "language", r->name);
		if (!r->automaton)
			return build(c, n, r->body, in, out, depth);
		if (r->minlen == 0 && add_edge(c, n, in, out, NFA_EPS))
			return -1;
		return add_edge(c, n, in, out, NFA_CALL | x->rule);
	}
	}
	return gr_fail(c, -EINVAL, "internal: unknown expression kind %u", x->kind);
}

/* Edges grouped by source, in construction order within a source (a counting sort). */
static int index_edges(struct gr_ctx *c, struct gr_nfa *n)
{
	n->first = calloc((size_t)n->n_states + 1, sizeof(uint32_t));
	struct nfa_edge *sorted = malloc((size_t)(n->n_edges ? n->n_edges : 1) * sizeof(*sorted));
	if (!n->first || !sorted) {
		free(sorted);
		return gr_fail(c, -ENOMEM, "out of memory compiling the grammar");
	}
	for (uint32_t i = 0; i < n->n_edges; i++)
		n->first[n->edges[i].from + 1]++;
	for (uint32_t s = 0; s < n->n_states; s++)
		n->first[s + 1] += n->first[s];
	for (uint32_t i = 0; i < n->n_edges; i++)
		sorted[n->first[n->edges[i].from]++] = n->edges[i];
	for (uint32_t s = n->n_states; s > 0; s--)
		n->first[s] = n->first[s - 1];
	n->first[0] = 0;
	free(n->edges);
	n->edges = sorted;
	n->cap_edges = n->n_edges;
	return 0;
}

struct gr_nfa *gr_nfa_new(struct gr_ctx *c)
{
	struct gr_nfa *n = calloc(1, sizeof(*n));
	if (!n) {
		gr_fail(c, -ENOMEM, "out of memory compiling the grammar");
		return NULL;
	}
	n->max_states = c->lim.max_states > UINT32_MAX / 8 ? UINT32_MAX : c->lim.max_states * 8;
	if (new_state(c, n, &n->start) || new_state(c, n, &n->final)) {
		gr_nfa_free(n);
		return NULL;
	}
	return n;
}

int gr_nfa_state(struct gr_ctx *c, struct gr_nfa *n, uint32_t *s)
{
	return new_state(c, n, s);
}

int gr_nfa_bytes(struct gr_ctx *c, struct gr_nfa *n, uint32_t from, uint32_t to,
		 const struct ir_byteset *set)
{
	uint32_t label;
	return add_set(c, n, set, &label) || add_edge(c, n, from, to, label);
}

int gr_nfa_empty_edge(struct gr_ctx *c, struct gr_nfa *n, uint32_t from, uint32_t to)
{
	return add_edge(c, n, from, to, NFA_EPS);
}

int gr_nfa_expr(struct gr_ctx *c, struct gr_nfa *n, const struct ir_node *x, uint32_t in,
		uint32_t out)
{
	n->no_calls = 1;
	return build(c, n, x, in, out, 0);
}

int gr_nfa_seal(struct gr_ctx *c, struct gr_nfa *n)
{
	return index_edges(c, n);
}

struct gr_nfa *gr_nfa_build(struct gr_ctx *c, uint32_t rule)
{
	struct gr_nfa *n = gr_nfa_new(c);
	if (!n)
		return NULL;
	if (build(c, n, c->rules[rule].body, n->start, n->final, 0) || index_edges(c, n)) {
		gr_nfa_free(n);
		return NULL;
	}
	return n;
}

void gr_nfa_free(struct gr_nfa *n)
{
	if (!n)
		return;
	free(n->edges);
	free(n->sets);
	free(n->first);
	free(n);
}

uint32_t gr_nfa_left_calls(struct gr_nfa *n, uint32_t *out, uint32_t cap)
{
	uint8_t *seen = calloc(n->n_states, 1);
	uint32_t *stack = malloc(n->n_states * sizeof(uint32_t));
	uint32_t sp = 0, found = 0;
	if (!seen || !stack) {
		free(seen);
		free(stack);
		return UINT32_MAX;
	}
	stack[sp++] = n->start;
	seen[n->start] = 1;
	while (sp) {
		uint32_t s = stack[--sp];
		for (uint32_t e = n->first[s]; e < n->first[s + 1]; e++) {
			uint32_t label = n->edges[e].label, to = n->edges[e].to;
			if (label == NFA_EPS) {
				if (!seen[to]) {
					seen[to] = 1;
					stack[sp++] = to;
				}
				continue;
			}
			if (!(label & NFA_CALL))
				continue;
			uint32_t callee = label & ~NFA_CALL, k = 0;
			while (k < found && out[k] != callee)
				k++;
			if (k == found && found < cap)
				out[found++] = callee;
		}
	}
	free(seen);
	free(stack);
	return found;
}
