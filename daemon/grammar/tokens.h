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

/* One state's tokens: accepted whatever the stack beneath, and those to check against the
 * stack at run time (trie order, so checks share prefixes). The rest are rejected. The
 * accepted set is a bitset when large, else a sorted list; both are shared by every state with
 * the same one, and a bitset close to one made before is that one and the few tokens whose bit
 * differs (delta): counted repetitions (a string's maxLength, a format's digits) make long runs
 * of states whose large sets differ by a token length or two, and each was a 16 KiB bitset at
 * LLaMA-3's vocabulary (a 20-property schema's sets held 11 MB; 2.7 MB so). */
struct gr_tset {
	uint32_t n_accepted;
	const uint64_t *bits;      /* [words]: the set, or with delta the set it differs from */
	const uint32_t *delta;     /* [n_delta] tokens whose bit is the other way, or NULL */
	uint32_t n_delta;
	const uint32_t *list;      /* [n_accepted] when bits is NULL */
	uint32_t n_uncertain;
	uint32_t *uncertain;
	size_t bytes;              /* held by this set, and by shared ones it made */
};

#define GR_SHARED_BUCKETS 1024
#define GR_RECENT_BASES 16 /* the last whole bitsets made: where a new one looks for a base */

struct gr_shared;

/* What the bound grammars of one cache hold together (its memory limit): each adds its bytes
 * when made and as its sets fill, and takes them back when freed. Reference-counted, since
 * bound grammars may outlive the cache. A cache's account may count in a parent too, the
 * budget of several caches (bn_grammar_budget), whose limit its owner moves. */
struct gr_account {
	atomic_uint refs;
	atomic_size_t bytes;
	struct gr_account *parent;  /* NULL, or a reference: it counts the same bytes */
	atomic_size_t limit;        /* a budget's: SIZE_MAX for none */
	void (*destroy)(struct gr_account *account); /* the last reference's: NULL for free() */
};

struct bn_grammar_cache;

/* bn_grammar_budget is an account with no parent, and the caches that count in it (its
 * members, cache.c): past its limit, or past cache_cap, the least recently used entries go
 * first whichever member holds them, so one model's compile pushes out another model's
 * grammars kept for a next time, not only its own. */
struct bn_grammar_budget {
	struct gr_account account;
	atomic_size_t cache_cap;       /* the members' entries' bytes together; SIZE_MAX: none */
	atomic_size_t cached;          /* those bytes now */
	atomic_uint_fast64_t clock;    /* recency stamps over every member */
	pthread_mutex_t lock;          /* the members list; taken before a member's lock, never
					* while one is held */
	struct bn_grammar_cache **members;
	uint32_t n_members, cap_members;
};

/* Adds (or takes back) n bytes in account and every account above it. */
void gr_account_add(struct gr_account *account, size_t n);
void gr_account_sub(struct gr_account *account, size_t n);

struct bn_grammar_bound {
	atomic_uint refs;
	struct bn_grammar *g;
	struct bn_grammar_vocab *v;
	const struct gr_automaton *a;
	_Atomic(struct gr_tset *) *sets; /* [n_states], filled on first use */
	atomic_uint filled;
	atomic_size_t set_bytes;
	atomic_uint_fast64_t fill_ns;
	pthread_mutex_t lock;      /* the shared sets */
	struct gr_shared **shared; /* [GR_SHARED_BUCKETS] by hash, allocated on first use */
	const uint64_t *recent[GR_RECENT_BASES];
	uint32_t n_recent;
	struct gr_account *account; /* NULL, or where its bytes are counted (a reference) */
	uint32_t *tdist;           /* [n_states]: tokens to the state's rule's end (tokendist.c) */
};

/* tokendist.c: per state, the fewest tokens of v that spell its shortest way to its rule's end
 * (GR_INF where v cannot spell it). malloc'd, or NULL without memory. */
uint32_t *gr_token_distances(const struct gr_automaton *a, const struct bn_grammar_vocab *v);

/* Counts b (unshared yet: just bound) in account from now on; takes a reference. */
void gr_bound_count_in(struct bn_grammar_bound *b, struct gr_account *account);
void gr_account_unref(struct gr_account *account);

/* State s's token set, computed on first use. NULL when memory ran out. */
const struct gr_tset *gr_tset_get(struct bn_grammar_bound *b, uint32_t s);

#endif /* BITNETD_GRAMMAR_TOKENS_H */
