/* SPDX-License-Identifier: MIT */
/*
 * gss.h — parses in progress as a graph-structured stack (Tomita's): a node is an automaton
 * state with the list of nodes it returns to (its callers' return states); parses that reach
 * the same state at the same position share one node, so ambiguity costs at most a node per
 * state per byte, never one per parse. A configuration is the set of top nodes after the same
 * bytes, fully closed (pops and pushes done): every top reads a byte next.
 *
 * One byte step is the one implementation the matcher (advancing), the token classifier (walks
 * from one state over the vocabulary's trie) and the run-time checks all use. Nodes, parent
 * lists and tops are appended to growing arrays; a mark and a reset undo everything after a
 * point (a walk backtracking, a rollback).
 */
#ifndef BITNETD_GRAMMAR_GSS_H
#define BITNETD_GRAMMAR_GSS_H

#include "automaton.h"

#include <stdint.h>

#define GSS_UNKNOWN (UINT32_MAX - 1) /* a parent the classifier does not know (the context) */

#define GSS_ACCEPT 1u /* the bottom rule may end here: the output may end */
#define GSS_CTX 2u    /* a parse ended the walked rule into the unknown context here */

struct gss_node {
	uint32_t state;
	uint32_t parents;   /* plist[parents .. parents + n_parents); none: the bottom rule */
	uint32_t n_parents;
	uint32_t cost;      /* fewest bytes from here to the output's end (saturated) */
	uint32_t tcost;     /* tokens that bring it there (gss.tdist; 0 without) */
};

struct gss_cfg {
	uint32_t tops;      /* tops[tops .. tops + n_tops) */
	uint32_t n_tops;
	uint32_t flags;     /* GSS_ACCEPT, GSS_CTX */
	uint32_t cost;      /* fewest bytes to the output's end: 0 with GSS_ACCEPT */
	uint32_t tcost;     /* tokens that bring it there (the tops' least tcost): 0 with
	                     * GSS_ACCEPT */
};

struct gss_mark {
	uint32_t nodes, plist, tops;
};

/* What one step works on, kept between steps. */
struct gss_cand {
	uint32_t state, parents, n_parents, node; /* node: an existing node, or GR_DEAD */
};

struct gss {
	const uint32_t *tdist; /* per state, tokens to its rule's end (tokenset.c), or NULL */
	struct gss_node *nodes;
	uint32_t n_nodes, cap_nodes;
	uint32_t *plist;
	uint32_t n_plist, cap_plist;
	uint32_t *tops;
	uint32_t n_tops, cap_tops;
	/* scratch */
	struct gss_cand *cands;
	uint32_t n_cands, cap_cands;
	uint32_t *seen;      /* open addressing: node + 1 of the pops done this step */
	uint32_t seen_mask, n_seen;
	uint32_t *tmp;       /* parents while merging, pending pushes */
	uint32_t cap_tmp;
	uint32_t *emit;
	uint32_t n_emit, cap_emit;
};

void gss_init(struct gss *g);
/* A configuration with no parse (a dead end). */
struct gss_cfg gss_dead(const struct gss *g);
void gss_free(struct gss *g);

static inline struct gss_mark gss_mark(const struct gss *g)
{
	return (struct gss_mark){ g->n_nodes, g->n_plist, g->n_tops };
}

static inline void gss_reset(struct gss *g, struct gss_mark m)
{
	g->n_nodes = m.nodes;
	g->n_plist = m.plist;
	g->n_tops = m.tops;
}

static inline int gss_alive(const struct gss_cfg *c)
{
	return c->n_tops > 0 || c->flags != 0;
}

/* The configuration at the start of the output. 0 or -ENOMEM. */
int gss_start(struct gss *g, const struct gr_automaton *a, struct gss_cfg *out);
/* A lone top at state, returning to the unknown context (or to nothing in the bottom rule),
 * not closed: the classifier's start. 0 or -ENOMEM. */
int gss_start_at(struct gss *g, const struct gr_automaton *a, uint32_t state,
		 struct gss_cfg *out);
/* A lone top at an existing node (a run-time check from one top). 0 or -ENOMEM. */
int gss_start_node(struct gss *g, uint32_t node, struct gss_cfg *out);
/* from after one more byte. 0 or -ENOMEM; a dead parse is a configuration with nothing. */
int gss_step(struct gss *g, const struct gr_automaton *a, const struct gss_cfg *from,
	     uint8_t byte, struct gss_cfg *to);
/* from after bytes[0..n): steps through scratch configurations. 0 or -ENOMEM. */
int gss_step_bytes(struct gss *g, const struct gr_automaton *a, const struct gss_cfg *from,
		   const uint8_t *bytes, size_t n, struct gss_cfg *to);

#endif /* BITNETD_GRAMMAR_GSS_H */
