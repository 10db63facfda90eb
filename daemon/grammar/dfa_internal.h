/* SPDX-License-Identifier: MIT */
/*
 * dfa_internal.h — the automaton under construction, shared by dfa.c (which appends each
 * rule's minimal automaton) and dfa_finish.c (which completes it).
 */
#ifndef BITNETD_GRAMMAR_DFA_INTERNAL_H
#define BITNETD_GRAMMAR_DFA_INTERNAL_H

#include "automaton.h"

struct gr_dfa_builder {
	uint32_t n_rules;
	struct gr_state *states;
	size_t n_states, cap_states;
	uint32_t *next;
	size_t n_next, cap_next;
	struct gr_call *calls;   /* .rule is the context's rule index until gr_dfa_finish */
	size_t n_calls, cap_calls;
	struct gr_rule *rules;   /* [n_rules] */
	uint8_t *classes;        /* [n_rules][256] */
	char *names;
	size_t n_names, cap_names;
};

#endif /* BITNETD_GRAMMAR_DFA_INTERNAL_H */
