/* SPDX-License-Identifier: MIT */
/*
 * automaton.h — the compiled form every grammar becomes: a recursive transition network over
 * bytes. Each rule that stays a rule (the bottom rule, recursive rules, large parts used many
 * times) is a deterministic automaton over bytes whose states may also call other rules (push
 * a return state, go to the callee's start); everything else was expanded in place. Left
 * recursion is refused, a nullable callee is also skipped by an empty edge, and every state can
 * reach an accepting one, so a live parse can always be completed.
 *
 * Built by lower.c (expressions to rules), nfa.c (rules to automata with empty edges) and
 * dfa.c (determinized, minimized, laid out here). Immutable once built.
 */
#ifndef BITNETD_GRAMMAR_AUTOMATON_H
#define BITNETD_GRAMMAR_AUTOMATON_H

#include "ir.h"

#include <stddef.h>
#include <stdint.h>

#define GR_DEAD UINT32_MAX

struct gr_state {
	uint32_t rule;
	uint32_t row;        /* this state's transitions: next[row + class of the byte] */
	uint32_t calls;      /* calls[calls .. calls + n_calls) */
	uint16_t n_calls;
	uint8_t accepting;   /* the rule may end here */
	uint8_t has_bytes;   /* some byte moves on from here */
	uint32_t dist;       /* fewest bytes from here to the rule's end (callees at their
	                      * shortest) */
};

struct gr_call {
	uint32_t rule;       /* the callee */
	uint32_t ret;        /* where the caller goes once the callee ends */
};

struct gr_rule {
	uint32_t start;      /* state */
	uint32_t first, n;   /* its states are first .. first + n - 1 */
	uint32_t minlen;     /* its shortest sentence */
	uint32_t topo;       /* rank in the order of calls made without reading a byte (callers
	                      * before callees); pushes are done in this order */
	uint32_t n_classes;
	uint32_t name;       /* offset in names */
	struct ir_byteset follow; /* bytes that may come right after the rule ends, anywhere */
};

struct gr_automaton {
	uint32_t n_states, n_rules;
	uint32_t bottom;     /* the rule a whole output is; never called */
	struct gr_state *states;
	struct gr_rule *rules;
	uint8_t *classes;    /* [n_rules][256]: byte -> class in the rule's rows */
	uint32_t *next;      /* rows of transitions */
	size_t n_next;
	struct gr_call *calls;
	uint32_t n_calls;
	char *names;
	size_t bytes;        /* all of the above */
};

static inline uint32_t gr_next(const struct gr_automaton *a, uint32_t s, uint8_t byte)
{
	const struct gr_state *st = &a->states[s];
	return a->next[st->row + a->classes[(size_t)st->rule * 256 + byte]];
}

/* lower.c: the rules' analysis (shortest sentences, productive rules, recursion), the
 * decisions what stays a rule, and the automaton built through nfa.c and dfa.c. The context's
 * rules must be complete (c->root set). Returns the automaton (malloc'd, gr_automaton_free) or
 * NULL with the error in c. */
struct gr_automaton *gr_lower(struct gr_ctx *c);
void gr_automaton_free(struct gr_automaton *a);

/* nfa.c: a rule's nondeterministic automaton with empty edges (Thompson's construction). */
#define NFA_EPS UINT32_MAX
#define NFA_CALL 0x80000000u

struct nfa_edge {
	uint32_t from, to, label; /* label: NFA_EPS, NFA_CALL | rule (the context's index), or
	                           * an index in sets */
};

struct gr_nfa {
	uint32_t n_states, start, final;
	struct nfa_edge *edges;    /* grouped by from: first[s] .. first[s + 1] are s's */
	uint32_t n_edges, cap_edges;
	uint32_t *first;
	struct ir_byteset *sets;
	uint32_t n_sets, cap_sets;
	uint32_t max_states;
	uint8_t no_calls;          /* regular.c's: a call is an error */
};

struct gr_nfa *gr_nfa_build(struct gr_ctx *c, uint32_t rule);
void gr_nfa_free(struct gr_nfa *n);
/* Pieces for regular.c, which builds automata of its own (start and final made by new; seal
 * indexes the edges once every edge is in). An expression built with gr_nfa_expr may not call
 * a rule (one that does is refused). */
struct gr_nfa *gr_nfa_new(struct gr_ctx *c);
int gr_nfa_state(struct gr_ctx *c, struct gr_nfa *n, uint32_t *s);
int gr_nfa_bytes(struct gr_ctx *c, struct gr_nfa *n, uint32_t from, uint32_t to,
		 const struct ir_byteset *set);
int gr_nfa_empty_edge(struct gr_ctx *c, struct gr_nfa *n, uint32_t from, uint32_t to);
int gr_nfa_expr(struct gr_ctx *c, struct gr_nfa *n, const struct ir_node *x, uint32_t in,
		uint32_t out);
int gr_nfa_seal(struct gr_ctx *c, struct gr_nfa *n);
/* The distinct rules n may call before reading a byte (left calls), into out (cap: the number
 * of rules); returns how many, or UINT32_MAX when memory ran out. */
uint32_t gr_nfa_left_calls(struct gr_nfa *n, uint32_t *out, uint32_t cap);

/* dfa.c: n determinized and minimized, appended to the automaton under construction.
 * Returns 0, or -1 with the error in c. */
struct gr_dfa_builder;
struct gr_dfa_builder *gr_dfa_builder_new(struct gr_ctx *c, uint32_t n_rules);
void gr_dfa_builder_free(struct gr_dfa_builder *b);
int gr_dfa_add_rule(struct gr_ctx *c, struct gr_dfa_builder *b, uint32_t index,
		    const char *name, struct gr_nfa *n);
/* A call-free automaton made deterministic and minimal, as a fragment in the arena
 * (regular.h). 0, or -1 with the error in c. */
int gr_dfa_fragment(struct gr_ctx *c, struct gr_nfa *n, struct gr_frag *out);
/* The same for an automaton already deterministic, as a table: state 0 the start,
 * delta[n][n_classes] (GR_DEAD for none), cls mapping bytes to classes. */
int gr_dfa_fragment_of_table(struct gr_ctx *c, uint32_t n, uint32_t n_classes,
			     const uint8_t cls[256], const uint32_t *delta,
			     const uint8_t *accepting, struct gr_frag *out);
/* The finished automaton: call targets resolved, distances, follow sets and the push order
 * computed. topo[index] is each rule's rank in the left-call order. b is freed. */
struct gr_automaton *gr_dfa_finish(struct gr_ctx *c, struct gr_dfa_builder *b, uint32_t bottom,
				   const uint32_t *minlen, const uint32_t *topo);

#endif /* BITNETD_GRAMMAR_AUTOMATON_H */
