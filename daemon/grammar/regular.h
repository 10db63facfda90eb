/* SPDX-License-Identifier: MIT */
/*
 * regular.h — regular languages over bytes as minimal deterministic automata ("fragments"),
 * for what the expressions of ir.h cannot say alone: the intersection of two languages (a
 * pattern and a length, two patterns, a key pattern and propertyNames) and a difference (keys
 * that match no patternProperties, strings that are not in an enum). A fragment is built from
 * a call-free expression (nfa.c, then dfa.c's determinization and minimization), combined
 * with another by the product construction, and becomes an expression again (IR_FRAG), which
 * nfa.c copies state for state. Fragments live in the compile context's arena.
 */
#ifndef BITNETD_GRAMMAR_REGULAR_H
#define BITNETD_GRAMMAR_REGULAR_H

#include "ir.h"

struct gr_nfa;

struct gr_frag {
	uint32_t n;                   /* states; 0 for the empty language; the start is 0 */
	uint32_t n_classes;
	uint8_t cls[256];             /* byte -> class */
	struct ir_byteset *class_set; /* [n_classes]: the bytes of each class */
	uint32_t *delta;              /* [n][n_classes]: the next state, or GR_DEAD */
	uint8_t *accepting;           /* [n] */
	uint32_t minlen;              /* the shortest member's bytes; GR_INF when empty */
};

/* The language of x, an expression without calls. NULL with the error in c (a limit, or the
 * budget). */
const struct gr_frag *gr_frag_of(struct gr_ctx *c, const struct ir_node *x);
/* The language of an automaton built with nfa.c's pieces (sealed here; n is freed). */
const struct gr_frag *gr_frag_of_nfa(struct gr_ctx *c, struct gr_nfa *n);
/* a ∩ b, and a minus b. */
const struct gr_frag *gr_frag_and(struct gr_ctx *c, const struct gr_frag *a,
				  const struct gr_frag *b);
const struct gr_frag *gr_frag_minus(struct gr_ctx *c, const struct gr_frag *a,
				    const struct gr_frag *b);
/* The texts w with open w close in f (open and close bytes no member has elsewhere). */
const struct gr_frag *gr_frag_between(struct gr_ctx *c, const struct gr_frag *f, uint8_t open,
				      uint8_t close);
/* 1 when bytes[0..n) is a member. */
int gr_frag_matches(const struct gr_frag *f, const void *bytes, size_t n);
/* The fewest and most code points of a member (*max GR_INF: unbounded); both GR_INF when
 * the language is empty. The members must be valid UTF-8. */
void gr_frag_code_points(const struct gr_frag *f, uint32_t *min, uint32_t *max);
/* f as an expression (IR_NOTHING when empty). */
struct ir_node *ir_frag(struct gr_ctx *c, const struct gr_frag *f);

#endif /* BITNETD_GRAMMAR_REGULAR_H */
