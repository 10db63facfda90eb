/* SPDX-License-Identifier: MIT */
/*
 * matcher_compact.c — what bounds a matcher's memory (compaction: only the history rollback
 * may still reach, and the nodes it uses, are kept) and the way to an accepting end (the
 * fewest bytes, and those bytes).
 */
#include "matcher.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Compaction                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* Marks every node the kept positions reach. A node's parents were made before it, so one
 * pass from the newest node down reaches them all. */
static uint8_t *live_nodes(const struct bn_grammar_matcher *m, uint32_t keep_from)
{
	const struct gss *g = &m->g;
	uint8_t *live = calloc(g->n_nodes ? g->n_nodes : 1, 1);
	if (!live)
		return NULL;
	for (uint32_t k = keep_from; k < m->n_hist; k++)
		for (uint32_t i = 0; i < m->hist[k].cfg.n_tops; i++)
			live[g->tops[m->hist[k].cfg.tops + i]] = 1;
	for (uint32_t i = g->n_nodes; i-- > 0;)
		if (live[i])
			for (uint32_t k = 0; k < g->nodes[i].n_parents; k++)
				live[g->plist[g->nodes[i].parents + k]] = 1;
	return live;
}

struct compacted {
	struct gss_node *nodes;
	uint32_t n_nodes;
	uint32_t *plist;
	uint32_t n_plist, cap_plist;
	uint32_t *tops;
	uint32_t n_tops;
};

static int copy_list(struct compacted *c, const struct gss *g, const uint32_t *remap,
		     uint32_t *list_remap, struct gss_node *node)
{
	if (node->n_parents == 0) {
		node->parents = c->n_plist;
		return 0;
	}
	uint32_t old = node->parents;
	if (list_remap[old] != GR_DEAD) {
		node->parents = list_remap[old];
		return 0;
	}
	if (c->n_plist + node->n_parents > c->cap_plist) {
		uint32_t cap = (c->n_plist + node->n_parents) * 2;
		uint32_t *p = realloc(c->plist, cap * sizeof(uint32_t));
		if (!p)
			return -ENOMEM;
		c->plist = p;
		c->cap_plist = cap;
	}
	for (uint32_t k = 0; k < node->n_parents; k++)
		c->plist[c->n_plist + k] = remap[g->plist[old + k]];
	node->parents = list_remap[old] = c->n_plist;
	c->n_plist += node->n_parents;
	return 0;
}

/* The live nodes copied down in order (ids stay ordered, so every kept position's marks map to
 * the copies made before its own), lists shared as before. */
static int copy_nodes(struct bn_grammar_matcher *m, const uint8_t *live, uint32_t keep_from,
		      struct compacted *c, struct gss_mark *marks)
{
	const struct gss *g = &m->g;
	uint32_t *remap = malloc((g->n_nodes ? g->n_nodes : 1) * sizeof(uint32_t));
	uint32_t *list_remap = malloc((g->n_plist ? g->n_plist : 1) * sizeof(uint32_t));
	c->nodes = malloc((g->n_nodes ? g->n_nodes : 1) * sizeof(*c->nodes));
	int rc = -ENOMEM;
	if (!remap || !list_remap || !c->nodes)
		goto out;
	memset(list_remap, 0xff, (g->n_plist ? g->n_plist : 1) * sizeof(uint32_t));
	uint32_t k = keep_from;
	for (uint32_t i = 0; i <= g->n_nodes; i++) {
		for (; k < m->n_hist && (i == g->n_nodes || m->hist[k].end.nodes <= i); k++) {
			marks[k].nodes = c->n_nodes;
			marks[k].plist = c->n_plist;
		}
		if (i == g->n_nodes || !live[i])
			continue;
		struct gss_node node = g->nodes[i];
		if (copy_list(c, g, remap, list_remap, &node))
			goto out;
		remap[i] = c->n_nodes;
		c->nodes[c->n_nodes++] = node;
	}
	uint32_t total = 0;
	for (k = keep_from; k < m->n_hist; k++)
		total += m->hist[k].cfg.n_tops;
	c->tops = malloc((total ? total : 1) * sizeof(uint32_t));
	if (!c->tops)
		goto out;
	for (k = keep_from; k < m->n_hist; k++) {
		struct gss_cfg *cfg = &m->hist[k].cfg;
		for (uint32_t i = 0; i < cfg->n_tops; i++)
			c->tops[c->n_tops + i] = remap[g->tops[cfg->tops + i]];
		cfg->tops = c->n_tops;
		c->n_tops += cfg->n_tops;
		marks[k].tops = c->n_tops;
	}
	rc = 0;
out:
	free(remap);
	free(list_remap);
	return rc;
}

int gr_matcher_compact_if_needed(struct bn_grammar_matcher *m)
{
	if (m->g.n_nodes < m->compact_at)
		return 0;
	uint32_t keep_from = m->n_hist > m->max_rollback + 1 ? m->n_hist - m->max_rollback - 1 : 0;
	struct compacted c = { 0 };
	struct gss_mark *marks = malloc(m->n_hist * sizeof(*marks));
	struct gr_position *saved = malloc(m->n_hist * sizeof(*saved));
	uint8_t *live = live_nodes(m, keep_from);
	int rc = -ENOMEM;
	if (!marks || !saved || !live)
		goto out;
	memcpy(saved, m->hist, m->n_hist * sizeof(*saved));
	if (copy_nodes(m, live, keep_from, &c, marks)) {
		memcpy(m->hist, saved, m->n_hist * sizeof(*saved)); /* tops offsets restored */
		goto out;
	}
	struct gss *g = &m->g;
	free(g->nodes);
	free(g->plist);
	free(g->tops);
	g->nodes = c.nodes, g->n_nodes = g->cap_nodes = c.n_nodes;
	g->plist = c.plist, g->n_plist = c.n_plist, g->cap_plist = c.cap_plist;
	g->tops = c.tops, g->n_tops = g->cap_tops = c.n_tops;
	c = (struct compacted){ 0 };
	for (uint32_t k = keep_from; k < m->n_hist; k++)
		m->hist[k].end = marks[k];
	m->n_hist -= keep_from;
	memmove(m->hist, m->hist + keep_from, m->n_hist * sizeof(*m->hist));
	m->compact_at = g->n_nodes * 2 > COMPACT_MIN_NODES ? g->n_nodes * 2 : COMPACT_MIN_NODES;
	rc = 0;
out:
	free(c.nodes);
	free(c.plist);
	free(c.tops);
	free(marks);
	free(saved);
	free(live);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* The way to an accepting end                                                                */
/* ------------------------------------------------------------------------------------------ */

uint64_t bn_grammar_matcher_min_bytes_to_accept(const struct bn_grammar_matcher *m)
{
	const struct gr_position *at = &m->hist[m->n_hist - 1];
	return at->finished ? 0 : at->cfg.cost;
}

uint64_t bn_grammar_matcher_tokens_to_accept(const struct bn_grammar_matcher *m)
{
	const struct gr_position *at = &m->hist[m->n_hist - 1];
	/* Counts saturate below GR_INF: one that did is a way the vocabulary cannot spell. */
	return at->finished ? 0 : at->cfg.tcost >= GR_INF - 1 ? UINT64_MAX : at->cfg.tcost;
}

struct writer {
	uint8_t *out;
	size_t n, cap;
};

/* The smallest byte of a class of the state's rule. */
static uint8_t byte_of_class(const struct gr_automaton *a, uint32_t rule, uint32_t cls)
{
	const uint8_t *map = a->classes + (size_t)rule * 256;
	for (unsigned b = 0; b < 256; b++)
		if (map[b] == cls)
			return (uint8_t)b;
	return 0;
}

/* From state s to its rule's end by the fewest bytes: a byte or a call (of a callee that reads
 * something) whose cost matches the distance, callees entered through a stack of returns. */
static int shortest_in_rule(const struct gr_automaton *a, uint32_t s, struct writer *w,
			    uint32_t *stack)
{
	uint32_t sp = 0; /* a shortest derivation repeats no rule on a path: n_rules deep */
	for (;;) {
		const struct gr_state *st = &a->states[s];
		if (st->dist == 0) {
			if (sp == 0)
				return 0;
			s = stack[--sp];
			continue;
		}
		const struct gr_rule *r = &a->rules[st->rule];
		uint32_t next = GR_DEAD;
		for (uint32_t c = 0; c < r->n_classes && next == GR_DEAD; c++) {
			uint32_t t = a->next[st->row + c];
			if (t != GR_DEAD && a->states[t].dist + 1 == st->dist) {
				if (w->n == w->cap)
					return -ENOSPC;
				w->out[w->n++] = byte_of_class(a, st->rule, c);
				next = t;
			}
		}
		for (uint32_t j = 0; j < st->n_calls && next == GR_DEAD; j++) {
			const struct gr_call *cl = &a->calls[st->calls + j];
			uint32_t len = a->rules[cl->rule].minlen;
			if (len > 0 && (uint64_t)len + a->states[cl->ret].dist == st->dist) {
				if (sp == a->n_rules)
					return -EINVAL;
				stack[sp++] = cl->ret;
				next = a->rules[cl->rule].start;
			}
		}
		if (next == GR_DEAD)
			return -EINVAL; /* distances are consistent: unreachable */
		s = next;
	}
}

int bn_grammar_matcher_shortest_completion(const struct bn_grammar_matcher *m, uint8_t *out,
					   size_t cap)
{
	const struct gr_position *at = &m->hist[m->n_hist - 1];
	if (at->finished || (at->cfg.flags & GSS_ACCEPT))
		return 0;
	if (at->cfg.cost > cap)
		return -ENOSPC;
	const struct gss *g = &m->g;
	uint32_t node = GR_DEAD;
	for (uint32_t i = 0; i < at->cfg.n_tops; i++) {
		uint32_t t = g->tops[at->cfg.tops + i];
		if (node == GR_DEAD || g->nodes[t].cost < g->nodes[node].cost)
			node = t;
	}
	struct writer w = { out, 0, cap };
	uint32_t *stack = malloc(((size_t)m->a->n_rules + 1) * sizeof(uint32_t));
	if (!stack)
		return -ENOMEM;
	while (node != GR_DEAD) {
		const struct gss_node *n = &g->nodes[node];
		int rc = shortest_in_rule(m->a, n->state, &w, stack);
		if (rc) {
			free(stack);
			return rc;
		}
		/* Return to the parent the node's cost came through. */
		uint32_t up = GR_DEAD;
		for (uint32_t k = 0; k < n->n_parents; k++) {
			uint32_t p = g->plist[n->parents + k];
			if (up == GR_DEAD || g->nodes[p].cost < g->nodes[up].cost)
				up = p;
		}
		node = up;
	}
	free(stack);
	return (int)w.n;
}
