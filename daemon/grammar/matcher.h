/* SPDX-License-Identifier: MIT */
/*
 * matcher.h — a matcher's insides, shared by matcher.c (advancing, masks, rollback) and
 * matcher_compact.c (bounding its memory, the shortest completion).
 */
#ifndef BITNETD_GRAMMAR_MATCHER_H
#define BITNETD_GRAMMAR_MATCHER_H

#include "tokens.h"

#define COMPACT_MIN_NODES 4096 /* a stack this small is never compacted */

/* The configuration after a token, and the stack's marks right after it was made. */
struct gr_position {
	struct gss_cfg cfg;
	struct gss_mark end;
	uint8_t finished;        /* an end-of-generation token was accepted */
};

/* Tokens run one after another in trie order share the configurations of common prefixes. */
struct gr_prefix_run {
	struct gss_cfg *cfg;     /* [max_len + 2]: cfg[d] after d bytes of the current token */
	struct gss_mark *mark;   /* [max_len + 2] */
	uint32_t reached;        /* cfg[0 .. reached] are valid */
	uint32_t died;           /* cfg[died] has no tops (GR_INF: none) */
	const uint8_t *prev;
	uint32_t prev_len;
};

struct bn_grammar_matcher {
	struct bn_grammar_bound *b;
	const struct gr_automaton *a;
	const struct bn_grammar_vocab *v;
	struct gss g;
	struct gr_position *hist; /* [0] the start; [n_hist - 1] now */
	uint32_t n_hist, cap_hist;
	uint32_t max_rollback;
	uint32_t compact_at;      /* nodes past which the stack is compacted */
	struct gr_prefix_run run;
	uint64_t *scratch;        /* [words]: a delta set's bits, made on first need */
};

int gr_run_token(struct bn_grammar_matcher *m, const uint8_t *bytes, uint32_t len,
		 struct gss_cfg *end);

/* Past compact_at nodes: history beyond max_rollback dropped, the nodes the rest reaches
 * copied down in order. 0 or -ENOMEM (the matcher is unchanged then). */
int gr_matcher_compact_if_needed(struct bn_grammar_matcher *m);

#endif /* BITNETD_GRAMMAR_MATCHER_H */
