/* SPDX-License-Identifier: MIT */
/*
 * grammar_internal.h — the objects behind grammar.h's handles, for the room's files.
 */
#ifndef BITNETD_GRAMMAR_INTERNAL_H
#define BITNETD_GRAMMAR_INTERNAL_H

#include "automaton.h"
#include "grammar.h"

#include <stdatomic.h>

struct bn_grammar {
	atomic_uint refs;
	struct gr_automaton *a;
	uint64_t compile_ns;
};

#endif /* BITNETD_GRAMMAR_INTERNAL_H */
