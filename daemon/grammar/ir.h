/* SPDX-License-Identifier: MIT */
/*
 * ir.h — what every front end builds: rules whose bodies are expressions over bytes (sets of
 * bytes, sequences, alternatives, bounded repetitions, calls of rules, and JSON's object
 * members), plus the compile context they build in (an arena, the limits, the clock, the
 * first error). Code-point sets (struct gr_cpset) become UTF-8 byte expressions here, raw or
 * as the inside of a JSON string.
 *
 * Expressions are trees that may share subtrees: the automaton builder expands each use, so a
 * shared part costs its size once per use, never more than the limits allow.
 */
#ifndef BITNETD_GRAMMAR_IR_H
#define BITNETD_GRAMMAR_IR_H

#include "grammar.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------------------------ */
/* The compile context                                                                        */
/* ------------------------------------------------------------------------------------------ */

struct gr_arena_block;

struct gr_arena {
	struct gr_arena_block *head;
	size_t used, cap;          /* of the head block */
	size_t total;              /* bytes of every block */
};

struct ir_rule {
	const char *name;          /* for messages: a GBNF name, a $ref, "root" */
	struct ir_node *body;      /* NULL until defined */
	uint32_t minlen;           /* shortest sentence (GR_INF: none: the rule is unproductive) */
	uint8_t recursive;         /* on a cycle of calls */
	uint8_t automaton;         /* built as its own automaton, not expanded where called */
	uint8_t reachable;
	uint32_t refs;             /* calls of it in bodies */
	uint32_t index;            /* in the automaton, once built */
};

struct gr_ctx {
	struct bn_grammar_limits lim;
	uint32_t max_ws;           /* JSON forms: whitespace run, or 0 for none */
	uint32_t json_top;
	uint64_t deadline_ns;      /* the compiling thread's CPU time (bn_thread_cpu_ns) */
	uint32_t ticks;            /* calls of gr_tick since the clock was read */
	int rc;                    /* the first error's code, 0 while none */
	char *err;                 /* BN_GRAMMAR_ERR_LEN bytes */
	struct gr_arena arena;
	struct ir_rule *rules;
	uint32_t n_rules, cap_rules;
	uint32_t root;             /* the rule a sentence is */
	/* json.c's pieces, made once per compile (0: not yet; else the node or rule + 1). */
	struct ir_node *json_ws, *json_char, *json_string, *json_number, *json_integer;
	struct ir_node *json_object;
	uint32_t json_value_rule1;
};

#define GR_INF UINT32_MAX

/* Records the first error (a message and its -errno code) and returns -1. */
int gr_fail(struct gr_ctx *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* -1 with -ETIME once the compile budget (the thread's CPU time) is spent (reads the clock
 * every 256 calls), else 0. */
int gr_tick(struct gr_ctx *c);
/* Zeroed memory from the context's arena, or NULL with -ENOMEM recorded. */
void *gr_alloc(struct gr_ctx *c, size_t size);
char *gr_strndup(struct gr_ctx *c, const char *s, size_t n);
void gr_arena_free(struct gr_arena *a);

/* A new rule named name (copied); returns its index, or -1 past max_rules. */
int64_t gr_rule_new(struct gr_ctx *c, const char *name);

/* ------------------------------------------------------------------------------------------ */
/* Expressions                                                                                */
/* ------------------------------------------------------------------------------------------ */

enum ir_kind {
	IR_NOTHING = 0, /* matches no string */
	IR_EMPTY,       /* matches the empty string */
	IR_BYTES,       /* one byte of set */
	IR_SEQ,
	IR_ALT,
	IR_REPEAT,      /* kid[0] min..max times (max GR_INF: unbounded) */
	IR_CALL,        /* rule */
	IR_MEMBERS,     /* kids in order, each present or (if !required[i]) absent, sep between two
	                 * present ones: an object's properties without listing every subset */
};

struct ir_byteset {
	uint64_t w[4];
};

struct ir_node {
	uint8_t kind;
	uint32_t n_kids;
	struct ir_node **kids;
	const struct ir_byteset *set;  /* IR_BYTES */
	uint32_t min, max;             /* IR_REPEAT */
	uint32_t rule;                 /* IR_CALL */
	const uint8_t *required;       /* IR_MEMBERS: [n_kids] */
	struct ir_node *sep;           /* IR_MEMBERS */
	/* lower.c's analysis, per node (nodes are shared): */
	uint32_t minlen;               /* shortest match, GR_INF for none */
	uint32_t size;                 /* automaton states its expansion costs, saturated */
	uint32_t gen;                  /* the pass these were computed in */
	uint32_t mark;                 /* the last walk that visited the node */
};

static inline int ir_set_has(const struct ir_byteset *s, unsigned b)
{
	return (int)((s->w[b >> 6] >> (b & 63)) & 1);
}

static inline void ir_set_add(struct ir_byteset *s, unsigned b)
{
	s->w[b >> 6] |= 1ull << (b & 63);
}

/* Builders. Each returns NULL with the error recorded when memory runs out (so a caller may
 * pass a NULL kid on and check once at the end: a builder given a NULL kid returns NULL). */
struct ir_node *ir_nothing(struct gr_ctx *c);
struct ir_node *ir_empty(struct gr_ctx *c);
struct ir_node *ir_bytes(struct gr_ctx *c, const struct ir_byteset *set);
struct ir_node *ir_byte_range(struct gr_ctx *c, unsigned lo, unsigned hi);
struct ir_node *ir_literal(struct gr_ctx *c, const void *bytes, size_t n);
struct ir_node *ir_lit(struct gr_ctx *c, const char *s); /* NUL-terminated */
struct ir_node *ir_seq(struct gr_ctx *c, uint32_t n, struct ir_node *const *kids);
struct ir_node *ir_alt(struct gr_ctx *c, uint32_t n, struct ir_node *const *kids);
struct ir_node *ir_seq2(struct gr_ctx *c, struct ir_node *a, struct ir_node *b);
struct ir_node *ir_seq3(struct gr_ctx *c, struct ir_node *a, struct ir_node *b,
			struct ir_node *d);
struct ir_node *ir_alt2(struct gr_ctx *c, struct ir_node *a, struct ir_node *b);
struct ir_node *ir_repeat(struct gr_ctx *c, struct ir_node *x, uint32_t min, uint32_t max);
struct ir_node *ir_opt(struct gr_ctx *c, struct ir_node *x);
struct ir_node *ir_call(struct gr_ctx *c, uint32_t rule);
struct ir_node *ir_members(struct gr_ctx *c, uint32_t n, struct ir_node *const *kids,
			   const uint8_t *required, struct ir_node *sep);

/* A growing list of expressions, in the arena. */
struct ir_list {
	struct ir_node **v;
	uint32_t n, cap;
};
int ir_list_push(struct gr_ctx *c, struct ir_list *l, struct ir_node *x);

/* ------------------------------------------------------------------------------------------ */
/* Code-point sets                                                                            */
/* ------------------------------------------------------------------------------------------ */

#define GR_MAX_CP 0x10FFFFu

/* Sorted, disjoint, non-adjacent ranges [lo, hi] of Unicode scalar values (surrogates are
 * dropped when a set becomes bytes), in the arena. */
struct gr_cpset {
	uint32_t (*r)[2];
	uint32_t n, cap;
};

int gr_cpset_add(struct gr_ctx *c, struct gr_cpset *s, uint32_t lo, uint32_t hi);
int gr_cpset_add_set(struct gr_ctx *c, struct gr_cpset *s, const struct gr_cpset *t);
/* Sorts and merges; call after adding. */
void gr_cpset_normalize(struct gr_cpset *s);
/* The complement within 0..GR_MAX_CP (s normalized), replacing s. */
int gr_cpset_negate(struct gr_ctx *c, struct gr_cpset *s);
/* s minus t (both normalized), replacing s. */
int gr_cpset_subtract(struct gr_ctx *c, struct gr_cpset *s, const struct gr_cpset *t);
int gr_cpset_contains(const struct gr_cpset *s, uint32_t cp);

enum gr_text_mode {
	GR_TEXT_RAW = 0,     /* UTF-8 as it is */
	GR_TEXT_JSON = 1,    /* inside a JSON string: '"', '\\' and controls as their escapes */
};

/* One code point of s, spelled as mode says (s normalized; IR_NOTHING when s is empty). */
struct ir_node *ir_cpset(struct gr_ctx *c, const struct gr_cpset *s, enum gr_text_mode mode);
/* The code point cp, spelled as mode says. */
struct ir_node *ir_codepoint(struct gr_ctx *c, uint32_t cp, enum gr_text_mode mode);
/* Any one Unicode scalar value except those in the sorted list excl (n of them). */
struct ir_node *ir_any_char_except(struct gr_ctx *c, const uint32_t *excl, uint32_t n,
				   enum gr_text_mode mode);

/* UTF-8 of cp into out[4]; returns its length. */
int gr_utf8_encode(uint32_t cp, uint8_t out[4]);
/* The code point at s[0..n) (n >= 1): its length in *len, or -1 for invalid UTF-8. */
int32_t gr_utf8_decode(const uint8_t *s, size_t n, uint32_t *len);

#endif /* BITNETD_GRAMMAR_IR_H */
