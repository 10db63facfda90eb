/* SPDX-License-Identifier: MIT */
/*
 * grammar.h — structured output: grammars compiled to one byte-level automaton, bound to a
 * vocabulary, and a matcher per sequence that says which tokens keep the output inside the
 * grammar (issue 46; daemon/grammar/README.md has the design and the dialects).
 *
 * Four forms compile to the same representation: a JSON Schema (drafts 4 to 2020-12 by its
 * $schema; README.md lists what each asserts), any JSON value (JSON mode), a regular expression
 * (the whole output matches) and llama.cpp's GBNF. What asserts and cannot be enforced is
 * refused with an error that names the keyword or construct and where it is; what asserts
 * nothing (annotations, keywords the draft does not define) is ignored, as the specification
 * says.
 *
 * Life of a request (phase 2):
 *   once per model     bn_grammar_vocab_new: every token's bytes, which are special, which end
 *                      generation (bn_grammar_piece_bytes turns stored pieces into bytes);
 *                      bn_grammar_cache_new over it.
 *   per request        bn_grammar_cache_get(text, options): the bound grammar, compiled on a
 *                      miss (refusals are cached too); bn_grammar_matcher_new on it.
 *   per step           bn_grammar_matcher_fill_mask -> the sampler draws among set bits ->
 *                      bn_grammar_matcher_accept(token). An end-of-generation id is in the mask
 *                      only where the grammar accepts; accepting one finishes the matcher.
 *   speculation        fill_mask / accept per draft position, then rollback(n) for the drafts
 *                      the model did not confirm; bn_grammar_matcher_accept_tokens checks a run.
 *   budget running out draw t from the mask and accept it; when tokens_to_accept + 1 is
 *                      then over the tokens left after t, roll t back and draw again from
 *                      bn_grammar_matcher_fill_mask_within(tokens left): every draw that fits
 *                      stands, and the output ends in time wherever the count says it can.
 *   fork               bn_grammar_matcher_clone: the same state, independent afterwards.
 *
 * Thread safety: compiled grammars, vocabularies, bound grammars and the cache may be shared by
 * threads (bound grammars fill their per-state token sets on first use, lock-free); a matcher
 * belongs to one thread at a time. Every call returns 0 (or a count) or -errno and leaves errno
 * alone. Compiling recurses as deep as the grammar nests (bounded by the limits): give it a
 * thread with the usual 8 MiB stack, not a small one.
 */
#ifndef BITNETD_GRAMMAR_H
#define BITNETD_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#define BN_GRAMMAR_ERR_LEN 256

/* ------------------------------------------------------------------------------------------ */
/* Compiling                                                                                  */
/* ------------------------------------------------------------------------------------------ */

enum bn_grammar_kind {
	BN_GRAMMAR_JSON_SCHEMA = 1, /* text: a JSON Schema document */
	BN_GRAMMAR_JSON = 2,        /* any JSON value; text must be empty */
	BN_GRAMMAR_REGEX = 3,       /* text: a regular expression the whole output matches */
	BN_GRAMMAR_GBNF = 4,        /* text: llama.cpp's GBNF, starting at rule `root` */
};

/* JSON forms: what the top level may be. OpenAI's json_object is BN_GRAMMAR_TOP_OBJECT. */
enum bn_grammar_json_top {
	BN_GRAMMAR_TOP_ANY = 0,
	BN_GRAMMAR_TOP_OBJECT = 1,
};

/* What a compile may cost. A field left 0 takes the default beside it. */
struct bn_grammar_limits {
	uint32_t max_text_bytes; /* grammar text; default 256 KiB */
	uint32_t max_depth;      /* nesting of the text (schemas, groups, brackets); default 64 */
	uint32_t max_rules;      /* rules, named and made (GBNF, $refs, repetitions); default 4096 */
	uint32_t max_states;     /* automaton states, all rules together; default 250000 */
	uint32_t max_repeat;     /* a repetition's bound ({m,n}, lengths, item counts); default
	                          * 100000 */
	uint32_t compile_ms;     /* budget for bn_grammar_compile in CPU time of the calling
	                          * thread (the same grammar passes or not whatever the machine's
	                          * load); default 1000 */
};

#define BN_GRAMMAR_WS_DEFAULT 20 /* the longest whitespace run between JSON tokens */

struct bn_grammar_options {
	uint32_t kind;           /* enum bn_grammar_kind */
	uint32_t json_top;       /* enum bn_grammar_json_top: JSON mode only (a schema says it) */
	uint32_t flags;          /* BN_GRAMMAR_F_* */
	uint32_t max_ws;         /* JSON forms: longest whitespace run between tokens; 0: default */
	struct bn_grammar_limits limits;
};

#define BN_GRAMMAR_F_COMPACT_JSON (1U << 0) /* JSON forms: no whitespace between tokens at all */

/* An immutable compiled grammar, reference-counted. */
struct bn_grammar;

/* Compiles text[0..len) (no NUL needed) as o says. 0 with *out (one reference), or -EINVAL
 * with the reason in err (what and where: `"unevaluatedItems" is not supported (at
 * #/properties/a)`, `GBNF line 3, column 7: expected "::="`), -E2BIG for a limit (named in err),
 * -ETIME past the time budget (CPU time), -ENOMEM. */
int bn_grammar_compile(const void *text, size_t len, const struct bn_grammar_options *o,
		       struct bn_grammar **out, char err[BN_GRAMMAR_ERR_LEN]);
void bn_grammar_ref(struct bn_grammar *g);
void bn_grammar_unref(struct bn_grammar *g);

struct bn_grammar_info {
	uint32_t n_rules;        /* rules kept as automata (recursion, large repeated parts) */
	uint32_t n_states;       /* automaton states */
	size_t bytes;            /* memory the automaton holds */
	uint64_t compile_ns;
};
void bn_grammar_get_info(const struct bn_grammar *g, struct bn_grammar_info *info);

/* ------------------------------------------------------------------------------------------ */
/* The vocabulary                                                                             */
/* ------------------------------------------------------------------------------------------ */

/* How a token is used. A special token is never text (control tokens, unused ids); an
 * end-of-generation token is special and allowed only where the grammar accepts. */
enum bn_grammar_token_kind {
	BN_GRAMMAR_TOKEN_TEXT = 0,
	BN_GRAMMAR_TOKEN_SPECIAL = 1,
	BN_GRAMMAR_TOKEN_EOG = 2,
};

/* Every token's bytes, arranged for the matchers (a byte trie), reference-counted. kinds may
 * be NULL (all text). A text token of no bytes is never allowed: it would not move the output.
 * 0 with *out, -EINVAL (n_tokens 0 or over 2^24, a kind out of range, a text token over 1024
 * bytes), -ENOMEM. */
struct bn_grammar_vocab;
int bn_grammar_vocab_new(uint32_t n_tokens, const uint8_t *const *bytes, const uint32_t *lens,
			 const uint8_t *kinds, struct bn_grammar_vocab **out);
void bn_grammar_vocab_ref(struct bn_grammar_vocab *v);
void bn_grammar_vocab_unref(struct bn_grammar_vocab *v);
uint32_t bn_grammar_vocab_size(const struct bn_grammar_vocab *v);

/* How a tokenizer stores its pieces. */
enum bn_grammar_piece_style {
	BN_GRAMMAR_PIECES_BYTE_LEVEL = 1,    /* GPT-2's byte alphabet (LLaMA-3): Ġ is a space... */
	BN_GRAMMAR_PIECES_SENTENCEPIECE = 2, /* U+2581 is a space, <0xNN> the byte NN */
};

/* The bytes the piece piece[0..len) stands for, into out (cap bytes). Returns their count, or
 * -EINVAL when the piece is not of that style (a byte-level piece with a character outside the
 * alphabet), -ENOSPC when cap is too small. Special tokens are the caller's to mark. */
int bn_grammar_piece_bytes(uint32_t style, const char *piece, size_t len, uint8_t *out,
			   size_t cap);

/* ------------------------------------------------------------------------------------------ */
/* Bound grammars and their cache                                                             */
/* ------------------------------------------------------------------------------------------ */

/* A grammar bound to a vocabulary: per automaton state, the tokens accepted whatever the stack
 * beneath (a set), the tokens to check against the stack at run time (a short list), the rest
 * rejected. Filled per state on first use; shared. Holds a reference to both. */
struct bn_grammar_bound;
int bn_grammar_bind(struct bn_grammar *g, struct bn_grammar_vocab *v,
		    struct bn_grammar_bound **out);
void bn_grammar_bound_ref(struct bn_grammar_bound *b);
void bn_grammar_bound_unref(struct bn_grammar_bound *b);
/* Fills the token sets of states not filled yet until budget_ns runs out. Returns 1 when every
 * state is filled, 0 when the budget ran out first, -ENOMEM. */
int bn_grammar_bound_warm(struct bn_grammar_bound *b, uint64_t budget_ns);
struct bn_grammar_bound_info {
	uint32_t states_filled;
	uint32_t n_states;
	size_t set_bytes;        /* memory the token sets hold */
	uint64_t fill_ns;        /* time spent filling them */
};
void bn_grammar_bound_get_info(const struct bn_grammar_bound *b,
			       struct bn_grammar_bound_info *info);
/* Memory the bound grammar holds now: its automaton, its token sets (which grow as they are
 * filled) and their table. */
size_t bn_grammar_bound_bytes(const struct bn_grammar_bound *b);

/* Compiled grammars bound to one vocabulary, by content (kind, options and text, XXH3-128),
 * least recently used out first past max_bytes; refusals are kept too, so a hostile grammar
 * sent again costs a look-up. Thread-safe. */
struct bn_grammar_cache;
int bn_grammar_cache_new(struct bn_grammar_vocab *v, size_t max_bytes,
			 struct bn_grammar_cache **out);
void bn_grammar_cache_free(struct bn_grammar_cache *c);
/* The bound grammar for text and o (a new reference), compiling on a miss; errors as
 * bn_grammar_compile, a cached refusal with its first message. */
int bn_grammar_cache_get(struct bn_grammar_cache *c, const void *text, size_t len,
			 const struct bn_grammar_options *o, struct bn_grammar_bound **out,
			 char err[BN_GRAMMAR_ERR_LEN]);
/* A limit on what every bound grammar this cache made holds while alive, kept or in use
 * (bn_grammar_bound_bytes, summed; 0: none, the default). Checked when a miss compiles: the
 * new grammar with the others as they are then (token sets filled later add to it); past it
 * the least recently used entries nobody else holds go first, then the compile is refused
 * with -E2BIG, "over its grammar memory limit". */
void bn_grammar_cache_limit_memory(struct bn_grammar_cache *c, size_t max_live_bytes);
/* Drops every entry nobody else holds (what the cache keeps for a next time, not what
 * sessions use): the daemon's memory budget wants the room. */
void bn_grammar_cache_trim(struct bn_grammar_cache *c);
/* Who holds the cache's grammars only to fill their token sets ahead of use (the daemon's
 * grammar service) lets go of them: called, from a compiling thread holding no lock, before a
 * new grammar is refused for memory (its cache's limit or its budget's); it returns once those
 * references are dropped, and the compile then tries to make room once more. A grammar held
 * only for that is thus never a reason to refuse another one. Set before the first compile. */
typedef void bn_grammar_shed_fn(void *ctx);
void bn_grammar_cache_on_shed(struct bn_grammar_cache *c, bn_grammar_shed_fn *fn, void *ctx);

/* What the grammars of several caches (a daemon's models, its members) hold together, against a
 * limit its owner moves (what the daemon's memory budget leaves beside its loaded models), and
 * a cap on their entries' bytes together (--grammar-cache). A member checks the limit when a
 * miss compiles, after its own limit, and the cap whenever its entries grow: past either, the
 * entries that may go (for the limit: grammars nobody else holds) are dropped least recently
 * used first, whichever member keeps them; a compile still past the limit is refused with
 * -E2BIG, "over what the memory budget leaves". Reference-counted: the caches and their
 * grammars hold it. */
struct bn_grammar_budget;
struct bn_grammar_budget *bn_grammar_budget_new(void); /* no limit yet; NULL without memory */
void bn_grammar_budget_unref(struct bn_grammar_budget *b);
void bn_grammar_budget_set_limit(struct bn_grammar_budget *b, size_t limit); /* SIZE_MAX: none */
void bn_grammar_budget_set_cache_cap(struct bn_grammar_budget *b, size_t cap); /* SIZE_MAX: none */
size_t bn_grammar_budget_bytes(const struct bn_grammar_budget *b);  /* held by the grammars */
size_t bn_grammar_budget_cached(const struct bn_grammar_budget *b); /* the members' entries */
/* c becomes a member of b (before its first compile, once; a reference). 0 or -ENOMEM. */
int bn_grammar_cache_count_in(struct bn_grammar_cache *c, struct bn_grammar_budget *b);
struct bn_grammar_cache_info {
	uint64_t hits, misses, refusals_cached;
	uint32_t entries;
	size_t bytes;
	size_t live_bytes;       /* what every bound grammar made here holds, in use or kept */
};
void bn_grammar_cache_get_info(struct bn_grammar_cache *c, struct bn_grammar_cache_info *info);

/* ------------------------------------------------------------------------------------------ */
/* Matchers: one per sequence                                                                 */
/* ------------------------------------------------------------------------------------------ */

#define BN_GRAMMAR_ROLLBACK_DEFAULT 64

struct bn_grammar_matcher;
/* A matcher at the start of the output. max_rollback: how many tokens back rollback may go
 * (0: BN_GRAMMAR_ROLLBACK_DEFAULT); memory beyond what those tokens and the live parse need is
 * given back as the output grows. 0 or -ENOMEM. */
int bn_grammar_matcher_new(struct bn_grammar_bound *b, uint32_t max_rollback,
			   struct bn_grammar_matcher **out);
void bn_grammar_matcher_free(struct bn_grammar_matcher *m);
/* An independent copy of m in its current state (its rollback history too). */
int bn_grammar_matcher_clone(const struct bn_grammar_matcher *m,
			     struct bn_grammar_matcher **out);

/* The allowed tokens as a bitset: bit (id % 64) of mask[id / 64], (n_tokens + 63) / 64 words,
 * all written. Returns how many are allowed (0 once finished, or when the vocabulary cannot
 * spell what the grammar needs next), or -ENOMEM. */
int bn_grammar_matcher_fill_mask(struct bn_grammar_matcher *m, uint64_t *mask);
/* fill_mask, less the tokens that would leave the output unable to end in time: tokens_left
 * tokens may follow this one (max_tokens minus those generated minus one), so a text token is
 * kept when, after it, bn_grammar_matcher_tokens_to_accept is at most tokens_left - 1 (those
 * tokens, then an end-of-generation token); with tokens_left 0 only an end-of-generation id is
 * left, where the grammar accepts. A kept token always leaves such a way open, so the output
 * ends in time from then on. */
int bn_grammar_matcher_fill_mask_within(struct bn_grammar_matcher *m, uint64_t *mask,
					uint32_t tokens_left);
/* Advances by one token: 0, or -EPERM when the grammar does not allow it (nothing changes),
 * -ERANGE for an id outside the vocabulary, -ENOMEM. An end-of-generation id is allowed where
 * the grammar accepts and finishes the matcher. */
int bn_grammar_matcher_accept(struct bn_grammar_matcher *m, uint32_t token);
/* Advances over ids[0..n) while they are allowed: returns how many were (the matcher stays
 * after them; rollback undoes them), or -ENOMEM. */
int bn_grammar_matcher_accept_tokens(struct bn_grammar_matcher *m, const uint32_t *ids,
				     uint32_t n);
/* Advances by raw bytes (a forced prefix, tests): 0, -EPERM (nothing changes), -ENOMEM. Counts
 * as one token for rollback. */
int bn_grammar_matcher_accept_bytes(struct bn_grammar_matcher *m, const void *bytes, size_t n);
/* Undoes the last n accepted tokens: 0, or -ERANGE past the start or max_rollback. */
int bn_grammar_matcher_rollback(struct bn_grammar_matcher *m, uint32_t n);

/* 1 when the output so far is a whole sentence of the grammar (it may still continue). */
int bn_grammar_matcher_is_accepting(const struct bn_grammar_matcher *m);
/* 1 after an end-of-generation token was accepted. */
int bn_grammar_matcher_is_finished(const struct bn_grammar_matcher *m);
/* Tokens accepted and still undoable: the rollback depth available. */
uint32_t bn_grammar_matcher_history(const struct bn_grammar_matcher *m);
/* The fewest bytes that bring the output to an accepting end (0 when accepting). */
uint64_t bn_grammar_matcher_min_bytes_to_accept(const struct bn_grammar_matcher *m);
/* Tokens that bring the output to an accepting end, allowed one after another (0 when
 * accepting; UINT64_MAX when the vocabulary cannot spell the way): the fewest that spell the
 * shortest way of each rule on the stack to its end (daemon/grammar/tokendist.c). In the
 * bottom rule of a grammar without calls whose shortest ways tokenize best (JSON's), the
 * fewest tokens of any way; elsewhere an upper bound, since a token may span a rule's end. */
uint64_t bn_grammar_matcher_tokens_to_accept(const struct bn_grammar_matcher *m);
/* Those bytes, into out (cap bytes): returns their count, or -ENOSPC (the count does not fit;
 * bn_grammar_matcher_min_bytes_to_accept says how many are needed). */
int bn_grammar_matcher_shortest_completion(const struct bn_grammar_matcher *m, uint8_t *out,
					   size_t cap);
/* Memory the matcher holds now, in bytes. */
size_t bn_grammar_matcher_bytes(const struct bn_grammar_matcher *m);

#endif /* BITNETD_GRAMMAR_H */
