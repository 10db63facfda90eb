/* SPDX-License-Identifier: MIT */
/*
 * gss.c — one byte through the graph-structured stack (gss.h): every top moves on by the byte;
 * a parse at an accepting state also returns to each of its parents (the bottom rule's end
 * means the output may end; the unknown context is only noted); parses at the same state merge
 * into one node; then calls are pushed, rules called before a byte is read in the automaton's
 * push order so that each callee's node gets all its parents at once. Tops are the nodes that
 * read a byte next.
 */
#include "gss.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void gss_init(struct gss *g)
{
	*g = (struct gss){ 0 };
}

struct gss_cfg gss_dead(const struct gss *g)
{
	return (struct gss_cfg){ .tops = g->n_tops, .cost = GR_INF, .tcost = GR_INF };
}

void gss_free(struct gss *g)
{
	free(g->nodes);
	free(g->plist);
	free(g->tops);
	free(g->cands);
	free(g->seen);
	free(g->tmp);
	free(g->emit);
	*g = (struct gss){ 0 };
}

static int grow(void **p, uint32_t *cap, uint64_t need, size_t size)
{
	if (need <= *cap)
		return 0;
	if (need > UINT32_MAX / 2)
		return -ENOMEM;
	uint32_t n = *cap ? *cap : 64;
	while (n < need)
		n *= 2;
	void *q = realloc(*p, (size_t)n * size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = n;
	return 0;
}

static uint32_t sat_add(uint32_t a, uint32_t b)
{
	uint64_t s = (uint64_t)a + b;
	return s >= GR_INF ? GR_INF - 1 : (uint32_t)s;
}

/* The fewest bytes (tokens: tcost) to the end through any of a list of parents (0: none, or
 * the unknown). */
static void parents_cost(const struct gss *g, uint32_t parents, uint32_t n, uint32_t *cost,
			 uint32_t *tcost)
{
	*cost = *tcost = n ? GR_INF : 0;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t p = g->plist[parents + i];
		uint32_t c = p == GSS_UNKNOWN ? 0 : g->nodes[p].cost;
		uint32_t t = p == GSS_UNKNOWN ? 0 : g->nodes[p].tcost;
		*cost = c < *cost ? c : *cost;
		*tcost = t < *tcost ? t : *tcost;
	}
}

static int64_t new_node(struct gss *g, const struct gr_automaton *a, uint32_t state,
			uint32_t parents, uint32_t n)
{
	if (grow((void **)&g->nodes, &g->cap_nodes, (uint64_t)g->n_nodes + 1, sizeof(*g->nodes)))
		return -ENOMEM;
	uint32_t cost, tcost;
	parents_cost(g, parents, n, &cost, &tcost);
	g->nodes[g->n_nodes] = (struct gss_node){
		.state = state, .parents = parents, .n_parents = n,
		.cost = sat_add(a->states[state].dist, cost),
		.tcost = g->tdist ? sat_add(g->tdist[state], tcost) : 0,
	};
	return g->n_nodes++;
}

/* A new parent list holding ids[0..n). Returns its offset, or -ENOMEM. */
static int64_t new_list(struct gss *g, const uint32_t *ids, uint32_t n)
{
	if (grow((void **)&g->plist, &g->cap_plist, (uint64_t)g->n_plist + n, sizeof(uint32_t)))
		return -ENOMEM;
	memcpy(g->plist + g->n_plist, ids, n * sizeof(uint32_t));
	g->n_plist += n;
	return g->n_plist - n;
}

static int add_cand(struct gss *g, uint32_t state, uint32_t parents, uint32_t n, uint32_t node)
{
	if (grow((void **)&g->cands, &g->cap_cands, (uint64_t)g->n_cands + 1, sizeof(*g->cands)))
		return -ENOMEM;
	g->cands[g->n_cands++] = (struct gss_cand){ state, parents, n, node };
	return 0;
}

static int add_emit(struct gss *g, uint32_t node)
{
	if (grow((void **)&g->emit, &g->cap_emit, (uint64_t)g->n_emit + 1, sizeof(uint32_t)))
		return -ENOMEM;
	g->emit[g->n_emit++] = node;
	return 0;
}

static int seen_resize(struct gss *g, uint32_t size)
{
	uint32_t *old = g->seen, old_size = old ? g->seen_mask + 1 : 0;
	uint32_t *s = calloc(size, sizeof(uint32_t));
	if (!s)
		return -ENOMEM;
	g->seen = s;
	g->seen_mask = size - 1;
	for (uint32_t i = 0; i < old_size; i++)
		if (old[i]) {
			uint32_t at = ((old[i] - 1) * 2654435761u) & g->seen_mask;
			while (g->seen[at])
				at = (at + 1) & g->seen_mask;
			g->seen[at] = old[i];
		}
	free(old);
	return 0;
}

/* 1 the first time node is seen this step, 0 after, -ENOMEM (an open-addressing set kept
 * under half full). */
static int first_sight(struct gss *g, uint32_t node)
{
	if ((g->n_seen + 1) * 2 > g->seen_mask + 1 && seen_resize(g, (g->seen_mask + 1) * 2))
		return -ENOMEM;
	uint32_t at = (node * 2654435761u) & g->seen_mask;
	for (; g->seen[at]; at = (at + 1) & g->seen_mask)
		if (g->seen[at] == node + 1)
			return 0;
	g->seen[at] = node + 1;
	g->n_seen++;
	return 1;
}

static int seen_reset(struct gss *g)
{
	g->n_seen = 0;
	if (!g->seen)
		return seen_resize(g, 64);
	memset(g->seen, 0, (g->seen_mask + 1) * sizeof(uint32_t));
	return 0;
}

/* Candidates at accepting states return to their parents (which become candidates in turn). */
static int pop_all(struct gss *g, const struct gr_automaton *a, uint32_t *flags)
{
	int popped = 0;
	for (uint32_t i = 0; i < g->n_cands; i++) {
		struct gss_cand c = g->cands[i];
		if (!a->states[c.state].accepting)
			continue;
		if (c.n_parents == 0) {
			*flags |= GSS_ACCEPT;
			continue;
		}
		if (!popped++ && seen_reset(g))
			return -ENOMEM;
		for (uint32_t k = 0; k < c.n_parents; k++) {
			uint32_t p = g->plist[c.parents + k];
			if (p == GSS_UNKNOWN) {
				*flags |= GSS_CTX;
				continue;
			}
			int first = first_sight(g, p);
			if (first < 0 || (first && add_cand(g, g->nodes[p].state, g->nodes[p].parents,
							    g->nodes[p].n_parents, p)))
				return -ENOMEM;
		}
	}
	return 0;
}

static int cmp_cand(const void *x, const void *y)
{
	const struct gss_cand *a = x, *b = y;
	if (a->state != b->state)
		return a->state < b->state ? -1 : 1;
	return a->parents < b->parents ? -1 : a->parents > b->parents;
}

static int cmp_u32(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
	return a < b ? -1 : a > b;
}

/* The parents of cands[from..to) (one state), merged without repeats, as a new list. */
static int64_t merged_list(struct gss *g, uint32_t from, uint32_t to, uint32_t *n_out)
{
	uint64_t total = 0;
	for (uint32_t i = from; i < to; i++)
		total += g->cands[i].n_parents;
	if (grow((void **)&g->tmp, &g->cap_tmp, total + 1, sizeof(uint32_t)))
		return -ENOMEM;
	uint32_t n = 0;
	for (uint32_t i = from; i < to; i++)
		for (uint32_t k = 0; k < g->cands[i].n_parents; k++)
			g->tmp[n++] = g->plist[g->cands[i].parents + k];
	qsort(g->tmp, n, sizeof(uint32_t), cmp_u32);
	uint32_t w = 0;
	for (uint32_t i = 0; i < n; i++)
		if (w == 0 || g->tmp[w - 1] != g->tmp[i])
			g->tmp[w++] = g->tmp[i];
	*n_out = w;
	return new_list(g, g->tmp, w);
}

/* One node per state among the candidates: an existing node when it is alone, a new one
 * otherwise (the union of their parents). The nodes go to g->emit. */
static int merge_by_state(struct gss *g, const struct gr_automaton *a)
{
	if (g->n_cands > 1)
		qsort(g->cands, g->n_cands, sizeof(*g->cands), cmp_cand);
	for (uint32_t i = 0; i < g->n_cands;) {
		uint32_t j = i + 1, same = 1;
		while (j < g->n_cands && g->cands[j].state == g->cands[i].state) {
			same &= g->cands[j].parents == g->cands[i].parents &&
				g->cands[j].n_parents == g->cands[i].n_parents;
			j++;
		}
		int64_t node;
		if (same && g->cands[i].node != GR_DEAD) {
			node = g->cands[i].node;
		} else if (same) {
			node = new_node(g, a, g->cands[i].state, g->cands[i].parents,
					g->cands[i].n_parents);
		} else {
			uint32_t n;
			int64_t list = merged_list(g, i, j, &n);
			node = list < 0 ? list : new_node(g, a, g->cands[i].state, (uint32_t)list, n);
		}
		if (node < 0 || add_emit(g, (uint32_t)node))
			return -ENOMEM;
		i = j;
	}
	return 0;
}

/* Pending pushes are (callee, return node) pairs in g->tmp, done by the callee's push rank so
 * that a callee's node is made once with every return node as a parent. */
static int push_pending(struct gss *g, uint32_t *n_pending, uint32_t rule, uint32_t ret)
{
	if (grow((void **)&g->tmp, &g->cap_tmp, (uint64_t)(*n_pending + 1) * 2, sizeof(uint32_t)))
		return -ENOMEM;
	g->tmp[*n_pending * 2] = rule;
	g->tmp[*n_pending * 2 + 1] = ret;
	++*n_pending;
	return 0;
}

/* The calls of node's state, as return nodes waiting for their callee. */
static int calls_of(struct gss *g, const struct gr_automaton *a, uint32_t node,
		    uint32_t *n_pending)
{
	const struct gr_state *st = &a->states[g->nodes[node].state];
	for (uint32_t j = 0; j < st->n_calls; j++) {
		const struct gr_call *cl = &a->calls[st->calls + j];
		const struct gss_node *n = &g->nodes[node];
		int64_t ret = new_node(g, a, cl->ret, n->parents, n->n_parents);
		if (ret < 0 || push_pending(g, n_pending, cl->rule, (uint32_t)ret))
			return -ENOMEM;
	}
	return 0;
}

static int push_calls(struct gss *g, const struct gr_automaton *a)
{
	uint32_t n_pending = 0, emitted = g->n_emit;
	for (uint32_t i = 0; i < emitted; i++)
		if (a->states[g->nodes[g->emit[i]].state].n_calls &&
		    calls_of(g, a, g->emit[i], &n_pending))
			return -ENOMEM;
	while (n_pending) {
		/* The pending callee of lowest rank, with all its return nodes. */
		uint32_t best = 0;
		for (uint32_t k = 1; k < n_pending; k++)
			if (a->rules[g->tmp[k * 2]].topo < a->rules[g->tmp[best * 2]].topo)
				best = k;
		uint32_t rule = g->tmp[best * 2], n = 0, base = g->n_plist;
		if (grow((void **)&g->plist, &g->cap_plist, (uint64_t)g->n_plist + n_pending,
			 sizeof(uint32_t)))
			return -ENOMEM;
		for (uint32_t k = 0; k < n_pending;) {
			if (g->tmp[k * 2] != rule) {
				k++;
				continue;
			}
			g->plist[base + n++] = g->tmp[k * 2 + 1];
			g->tmp[k * 2] = g->tmp[(n_pending - 1) * 2];
			g->tmp[k * 2 + 1] = g->tmp[(n_pending - 1) * 2 + 1];
			n_pending--;
		}
		g->n_plist += n;
		int64_t node = new_node(g, a, a->rules[rule].start, base, n);
		if (node < 0 || calls_of(g, a, (uint32_t)node, &n_pending) ||
		    add_emit(g, (uint32_t)node))
			return -ENOMEM;
	}
	return 0;
}

/* The emitted nodes that read a byte become the configuration's tops. */
static int finish(struct gss *g, const struct gr_automaton *a, uint32_t flags,
		  struct gss_cfg *to)
{
	if (grow((void **)&g->tops, &g->cap_tops, (uint64_t)g->n_tops + g->n_emit,
		 sizeof(uint32_t)))
		return -ENOMEM;
	*to = (struct gss_cfg){ .tops = g->n_tops, .flags = flags,
				.cost = flags & GSS_ACCEPT ? 0 : GR_INF,
				.tcost = flags & GSS_ACCEPT ? 0 : GR_INF };
	for (uint32_t i = 0; i < g->n_emit; i++) {
		const struct gss_node *n = &g->nodes[g->emit[i]];
		if (!a->states[n->state].has_bytes)
			continue;
		g->tops[g->n_tops++] = g->emit[i];
		to->n_tops++;
		if (n->cost < to->cost)
			to->cost = n->cost;
		if (n->tcost < to->tcost)
			to->tcost = n->tcost;
	}
	return 0;
}

/* Closes the candidates into a configuration: pops, merges, pushes. */
static int close_cands(struct gss *g, const struct gr_automaton *a, uint32_t flags,
		       struct gss_cfg *to)
{
	g->n_emit = 0;
	if (pop_all(g, a, &flags) || merge_by_state(g, a) || push_calls(g, a))
		return -ENOMEM;
	return finish(g, a, flags, to);
}

int gss_start(struct gss *g, const struct gr_automaton *a, struct gss_cfg *out)
{
	uint32_t start = a->rules[a->bottom].start;
	int64_t node = new_node(g, a, start, g->n_plist, 0);
	if (node < 0)
		return -ENOMEM;
	g->n_cands = 0;
	g->n_emit = 0;
	uint32_t flags = a->states[start].accepting ? GSS_ACCEPT : 0;
	if (add_emit(g, (uint32_t)node) || push_calls(g, a))
		return -ENOMEM;
	return finish(g, a, flags, out);
}

int gss_start_at(struct gss *g, const struct gr_automaton *a, uint32_t state,
		 struct gss_cfg *out)
{
	uint32_t parents = g->n_plist, n = 0;
	if (a->states[state].rule != a->bottom) {
		uint32_t unknown = GSS_UNKNOWN;
		if (new_list(g, &unknown, 1) < 0)
			return -ENOMEM;
		n = 1;
	}
	int64_t node = new_node(g, a, state, parents, n);
	if (node < 0)
		return -ENOMEM;
	return gss_start_node(g, (uint32_t)node, out);
}

int gss_start_node(struct gss *g, uint32_t node, struct gss_cfg *out)
{
	if (grow((void **)&g->tops, &g->cap_tops, (uint64_t)g->n_tops + 1, sizeof(uint32_t)))
		return -ENOMEM;
	*out = (struct gss_cfg){ .tops = g->n_tops, .n_tops = 1, .cost = g->nodes[node].cost,
				 .tcost = g->nodes[node].tcost };
	g->tops[g->n_tops++] = node;
	return 0;
}

int gss_step(struct gss *g, const struct gr_automaton *a, const struct gss_cfg *from,
	     uint8_t byte, struct gss_cfg *to)
{
	/* The common case, one parse moving inside its rule: one node, nothing to close. */
	if (from->n_tops == 1) {
		const struct gss_node *n = &g->nodes[g->tops[from->tops]];
		uint32_t s = gr_next(a, n->state, byte);
		if (s == GR_DEAD) {
			*to = gss_dead(g);
			return 0;
		}
		const struct gr_state *st = &a->states[s];
		if (!st->accepting && !st->n_calls) {
			int64_t node = new_node(g, a, s, n->parents, n->n_parents);
			if (node < 0)
				return -ENOMEM;
			return gss_start_node(g, (uint32_t)node, to);
		}
	}
	g->n_cands = 0;
	for (uint32_t i = 0; i < from->n_tops; i++) {
		const struct gss_node *n = &g->nodes[g->tops[from->tops + i]];
		uint32_t s = gr_next(a, n->state, byte);
		if (s != GR_DEAD && add_cand(g, s, n->parents, n->n_parents, GR_DEAD))
			return -ENOMEM;
	}
	return close_cands(g, a, 0, to);
}

int gss_step_bytes(struct gss *g, const struct gr_automaton *a, const struct gss_cfg *from,
		   const uint8_t *bytes, size_t n, struct gss_cfg *to)
{
	struct gss_cfg cur = *from;
	for (size_t i = 0; i < n; i++) {
		if (!cur.n_tops) {
			*to = gss_dead(g);
			return 0;
		}
		int rc = gss_step(g, a, &cur, bytes[i], &cur);
		if (rc)
			return rc;
	}
	*to = cur;
	return 0;
}
