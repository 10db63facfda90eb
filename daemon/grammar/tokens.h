/* SPDX-License-Identifier: MIT */
/*
 * tokens.h — the vocabulary as the grammar engine reads it (every token's bytes; the text
 * tokens in a byte trie laid out depth-first, so a subtree is a range of nodes and of tokens)
 * and bound grammars: per automaton state, the token set computed by walking the trie from that
 * state (tokenset.c).
 */
#ifndef BITNETD_GRAMMAR_TOKENS_H
#define BITNETD_GRAMMAR_TOKENS_H

#include "grammar_internal.h"
#include "gss.h"

#include <pthread.h>
#include <stdatomic.h>

#define GR_MAX_TOKEN_BYTES 1024 /* longer text tokens are refused by bn_grammar_vocab_new */

/* A trie node, packed: a walk reads these in order, one after another. */
struct gr_trie_node {
	uint32_t end;              /* one past the node's subtree */
	uint16_t depth;            /* bytes from the root */
	uint8_t byte;              /* the byte that leads here */
	uint8_t has_tokens;        /* some token ends here */
};

struct bn_grammar_vocab {
	atomic_uint refs;
	uint32_t n_tokens, words;  /* words: of a mask, (n_tokens + 63) / 64 */
	uint8_t *bytes;            /* every token's bytes, back to back */
	uint32_t *off;             /* [n_tokens + 1] */
	uint8_t *kind;             /* [n_tokens] enum bn_grammar_token_kind */
	uint32_t *eog;             /* end-of-generation ids */
	uint32_t n_eog;
	uint32_t max_len;          /* longest text token */
	/* The trie of text tokens, depth first; node 0 is the root (no byte). */
	uint32_t n_nodes;
	struct gr_trie_node *nodes;
	uint32_t *node_tok;        /* [n_nodes + 1]: tokens ending at node i are
	                            * trie_tok[node_tok[i] .. node_tok[i + 1]) */
	uint32_t *trie_tok;        /* text tokens in trie order */
	size_t bytes_held;
};

static inline const uint8_t *vocab_bytes(const struct bn_grammar_vocab *v, uint32_t id,
					 uint32_t *len)
{
	*len = v->off[id + 1] - v->off[id];
	return v->bytes + v->off[id];
}

/* One state's tokens: accepted whatever the stack beneath (a bitset when many, shared between
 * states with equal sets, else a sorted list), and those to check against the stack at run
 * time (trie order, so checks share prefixes). The rest are rejected. */
struct gr_tset {
	uint32_t n_accepted;
	const uint64_t *bits;      /* [words] or NULL */
	uint32_t *list;            /* [n_accepted] when bits is NULL */
	uint32_t n_uncertain;
	uint32_t *uncertain;
	size_t bytes;              /* held by this set alone */
};

struct shared_bits;

struct bn_grammar_bound {
	atomic_uint refs;
	struct bn_grammar *g;
	struct bn_grammar_vocab *v;
	const struct gr_automaton *a;
	_Atomic(struct gr_tset *) *sets; /* [n_states], filled on first use */
	atomic_uint filled;
	atomic_size_t set_bytes;
	atomic_uint_fast64_t fill_ns;
	pthread_mutex_t lock;      /* the shared bitsets */
	struct shared_bits *shared;
};

/* State s's token set, computed on first use. NULL when memory ran out. */
const struct gr_tset *gr_tset_get(struct bn_grammar_bound *b, uint32_t s);

#endif /* BITNETD_GRAMMAR_TOKENS_H */
