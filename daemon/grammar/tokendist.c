/* SPDX-License-Identifier: MIT */
/*
 * tokendist.c — per automaton state, how many tokens bring a parse from it to its rule's end
 * (tokens.h, gr_token_distances): what closes an output before max_tokens counts, in tokens
 * where it counted bytes. A schema whose shortest document is 216 tokens is some 600 bytes, so
 * a bound in bytes (one token a byte) cut its outputs at every budget from 250 to 700 tokens.
 *
 * The count is the fewest tokens that spell the state's shortest way to its rule's end (the
 * bytes bn_grammar_matcher_shortest_completion writes, the smallest byte where several are
 * shortest), a callee on that way spelled apart from what follows it. So it is reached: those
 * tokens, each allowed, bring the parse to the end. Taking the states by their distance in
 * bytes, a state's count is one token more than the state after the longest token that spells
 * the start of its way, which was counted before it: one walk down the vocabulary's trie per
 * state, as deep as its tokens along that way go. In a rule without calls whose shortest ways
 * tokenize best (JSON's: quotes, brackets, commas and keys are tokens), it is the fewest
 * tokens to the end of any kind.
 */
#include "tokens.h"

#include <stdlib.h>
#include <string.h>

/* A state's first step on its shortest way: a byte to next, or a call (next: the call's index
 * in calls; byte is then -1). */
struct step {
	uint32_t next;
	int16_t byte;
};

static uint32_t sat_add(uint32_t a, uint32_t b)
{
	uint64_t s = (uint64_t)a + b;
	return s >= GR_INF ? GR_INF - 1 : (uint32_t)s;
}

/* The first step of every state with a way to take (dist > 0), as shortest_in_rule
 * (matcher_compact.c) takes it: the smallest byte, else a call that reads something. */
static void first_steps(const struct gr_automaton *a, struct step *steps)
{
	uint8_t first_byte[256];
	for (uint32_t r = 0; r < a->n_rules; r++) {
		const struct gr_rule *rule = &a->rules[r];
		const uint8_t *map = a->classes + (size_t)r * 256;
		memset(first_byte, 0, sizeof(first_byte));
		for (int b = 255; b >= 0; b--)
			first_byte[map[b]] = (uint8_t)b;
		for (uint32_t s = rule->first; s < rule->first + rule->n; s++) {
			const struct gr_state *st = &a->states[s];
			steps[s] = (struct step){ GR_DEAD, -1 };
			if (st->dist == 0)
				continue;
			int16_t best = 256;
			for (uint32_t c = 0; c < rule->n_classes; c++) {
				uint32_t t = a->next[st->row + c];
				if (t != GR_DEAD && a->states[t].dist + 1 == st->dist &&
				    first_byte[c] < best) {
					best = first_byte[c];
					steps[s].next = t;
				}
			}
			if (best < 256) {
				steps[s].byte = best;
				continue;
			}
			for (uint32_t j = 0; j < st->n_calls && steps[s].next == GR_DEAD; j++) {
				const struct gr_call *cl = &a->calls[st->calls + j];
				uint32_t len = a->rules[cl->rule].minlen;
				if (len > 0 && (uint64_t)len + a->states[cl->ret].dist == st->dist)
					steps[s].next = st->calls + j;
			}
		}
	}
}

/* The child of trie node i by byte b, or 0 (the root is nobody's child). */
static uint32_t child(const struct bn_grammar_vocab *v, uint32_t i, uint8_t b)
{
	for (uint32_t j = i + 1; j < v->nodes[i].end; j = v->nodes[j].end)
		if (v->nodes[j].byte == b)
			return j;
	return 0;
}

/* State s's count from those of the states after it on its way. */
static uint32_t count_of(const struct gr_automaton *a, const struct bn_grammar_vocab *v,
			 const struct step *steps, const uint32_t *td, uint32_t s)
{
	if (a->states[s].dist == 0)
		return 0;
	if (steps[s].byte < 0) {
		if (steps[s].next == GR_DEAD)
			return GR_INF;
		const struct gr_call *cl = &a->calls[steps[s].next];
		return sat_add(td[a->rules[cl->rule].start], td[cl->ret]);
	}
	uint32_t best = GR_INF, node = 0;
	for (uint32_t at = s; a->states[at].dist > 0 && steps[at].byte >= 0;) {
		node = child(v, node, (uint8_t)steps[at].byte);
		if (!node)
			break;
		at = steps[at].next;
		if (v->nodes[node].has_tokens && td[at] != GR_INF)
			best = td[at] + 1 < best ? td[at] + 1 : best;
	}
	return best;
}

struct by_dist {
	uint32_t dist, state;
};

static int cmp_dist(const void *x, const void *y)
{
	const struct by_dist *p = x, *q = y;
	if (p->dist != q->dist)
		return p->dist < q->dist ? -1 : 1;
	return p->state < q->state ? -1 : p->state > q->state;
}

uint32_t *gr_token_distances(const struct gr_automaton *a, const struct bn_grammar_vocab *v)
{
	uint32_t n = a->n_states;
	uint32_t *td = malloc((size_t)(n ? n : 1) * sizeof(uint32_t));
	struct step *steps = malloc((size_t)(n ? n : 1) * sizeof(*steps));
	struct by_dist *order = malloc((size_t)(n ? n : 1) * sizeof(*order));
	if (!td || !steps || !order) {
		free(td);
		td = NULL;
		goto out;
	}
	first_steps(a, steps);
	for (uint32_t s = 0; s < n; s++) {
		td[s] = GR_INF;
		order[s] = (struct by_dist){ a->states[s].dist, s };
	}
	qsort(order, n, sizeof(*order), cmp_dist);
	/* A way that calls needs the callee's count, maybe not counted yet (its states are
	 * ordered by their own distances): passes until nothing changes, one per nesting of
	 * calls along shortest ways at most. */
	for (uint32_t pass = 0, changed = 1; changed && pass <= a->n_rules; pass++) {
		changed = 0;
		for (uint32_t k = 0; k < n; k++) {
			uint32_t s = order[k].state, c = count_of(a, v, steps, td, s);
			if (c < td[s]) {
				td[s] = c;
				changed = 1;
			}
		}
	}
out:
	free(steps);
	free(order);
	return td;
}
