/* SPDX-License-Identifier: MIT */
/*
 * schema.h — the JSON Schema front end's shared state. A schema is read in three steps:
 *
 *   schema_doc.c    the document (schema_json.c), its draft, its resources and anchors,
 *                   references resolved;
 *   schema_norm.c   each schema object as a node (struct sn) of what it asserts, per its
 *                   draft: annotations and unknown keywords dropped, siblings of $ref dropped
 *                   where the draft says so, what cannot be enforced refused by name;
 *                   conditions (not, if/then/else, dependencies) by schema_cond.c;
 *   schema.c        nodes to expressions: the nodes that must hold together are opened and
 *                   merged (schema_merge.c: allOf, $ref beside other keywords, anyOf/oneOf
 *                   beside them), anyOf and oneOf become alternatives (oneOf only where its
 *                   branches are disjoint, schema_disjoint.c), and each type is built by
 *                   schema_object.c, schema_array.c, schema_string.c or schema_number.c.
 *                   Literals (enum, const) are checked against everything beside them
 *                   (schema_valid.c).
 *
 * Files call downward only (tests/rooms.py: no circles): the two recursive steps of the walk,
 * reading a schema (sc_norm) and writing a list of nodes (sc_gen), are reached by the files
 * below them through the context (s->norm, s->gen).
 */
#ifndef BITNETD_GRAMMAR_SCHEMA_H
#define BITNETD_GRAMMAR_SCHEMA_H

#include "frontends.h"
#include "regular.h"
#include "schema_json.h"

enum sc_draft {
	SC_DRAFT4 = 1,
	SC_DRAFT6 = 2,
	SC_DRAFT7 = 4,
	SC_DRAFT2019 = 8,
	SC_DRAFT2020 = 16,
};

/* JSON types as bits. "integer" is T_INT, "number" T_INT | T_FRAC. */
enum {
	T_NULL = 1,
	T_BOOL = 2,
	T_INT = 4,
	T_FRAC = 8,
	T_STR = 16,
	T_ARR = 32,
	T_OBJ = 64,
	T_ALL = 127,
};

struct sn;

/* Nodes that must all hold (an empty list: anything). */
struct sn_list {
	struct sn **v;
	uint32_t n;
};

enum sn_kind {
	SN_TRUE = 0,   /* any value */
	SN_FALSE,      /* no value */
	SN_PLAIN,      /* the keywords below */
	SN_REF,        /* $ref: its target, made a rule where it is used alone */
	SN_ALL,        /* kids all hold (allOf, and a schema's own keywords beside applicators) */
	SN_ANY,        /* anyOf */
	SN_ONE,        /* oneOf */
};

/* A number bound: the schema's number (its text, exactly), exclusive or not. */
struct sn_bound {
	const struct jv *v;      /* NULL: none */
	uint8_t excl;
};

struct sn_prop {
	const char *name;
	uint32_t len;
	struct sn_list v;
};

struct sn_pattern {
	const struct jv *re;     /* a string */
	const char *where;
	struct sn_list v;
};

/* One schema's properties, patternProperties and additionalProperties: they decide together
 * what a key's value must be (a key another schema declares still meets this one's patterns
 * or additionalProperties). */
struct sn_clause {
	struct sn_prop *props;
	uint32_t n_props;
	struct sn_pattern *pats;
	uint32_t n_pats;
	struct sn_list ap;       /* additionalProperties; has_ap 0: absent (any value) */
	uint8_t has_ap;
};

/* A string rule: a language the string must be in (a pattern, a format) or not be in (a
 * pattern's, or the strings another node accepts: oneOf's narrowing, schema_disjoint.c). */
enum { SN_PATTERN = 0, SN_FORMAT = 1, SN_NOT_PATTERN = 2, SN_NOT_STRINGS_OF = 3 };

struct sn_text {
	uint8_t kind;            /* SN_PATTERN, SN_FORMAT, SN_NOT_PATTERN, SN_NOT_STRINGS_OF */
	const char *text;        /* the pattern, or the format's name */
	uint32_t len;
	const char *where;
	const struct sn *other;  /* SN_NOT_STRINGS_OF: the node whose strings are excluded */
};

struct sn_contains {
	struct sn_list v;
	uint32_t min, max;       /* max GR_INF: no bound */
};

struct sn {
	uint8_t kind;
	const char *where;       /* its location, "#/properties/a", for messages */
	/* SN_REF */
	const char *ref;
	const struct jv *target;
	const struct jv *target_resource;
	struct sn *to;           /* the target's node, once made */
	int64_t rule;            /* the rule the node is when used alone (SN_REF targets), or -1 */
	/* SN_ALL, SN_ANY, SN_ONE */
	struct sn **kids;
	uint32_t n_kids;
	/* SN_PLAIN */
	uint32_t types;          /* the types it allows */
	uint32_t families;       /* the types its keywords describe */
	uint8_t typed;           /* it says "type" (else outputs are of the described families) */
	uint8_t has_lits;        /* enum or const: only lits[0..n_lits) */
	const struct jv **lits;
	uint32_t n_lits;
	const struct jv **nots;  /* values it excludes (not enum, not const) */
	uint32_t n_nots;
	struct sn_bound lo, hi;  /* numbers */
	const struct jv **mult;  /* multipleOf: numbers */
	uint32_t n_mult;
	uint32_t min_len, max_len; /* strings, in code points */
	struct sn_text *texts;
	uint32_t n_texts;
	uint32_t min_items, max_items;
	struct sn_list *prefix;  /* arrays: the first n_prefix items */
	uint32_t n_prefix;
	struct sn_list items;    /* the items after the prefix */
	struct sn_contains *contains;
	uint32_t n_contains;
	uint8_t unique;
	struct sn_clause *clauses; /* objects */
	uint32_t n_clauses;
	const char **required;
	uint32_t *required_len;
	uint32_t n_required;
	const char **forbidden;  /* keys that must be absent (dependencies, not required) */
	uint32_t *forbidden_len;
	uint32_t n_forbidden;
	uint32_t min_props, max_props;
	struct sn_list names;    /* propertyNames */
	const struct gr_frag *text_frag; /* schema_valid.c's cache of the string rules */
};

struct schema {
	struct gr_ctx *c;
	const struct jv *doc;
	uint32_t draft;          /* enum sc_draft */
	char path[200];          /* where we are, as a JSON pointer: "#/properties/a" */
	uint32_t depth;
	/* schema_doc.c: the document's resources (nodes with an $id/id that sets a base URI) */
	struct sc_resource *res;
	uint32_t n_res, cap_res;
	const struct jv *resource; /* the resource being read */
	/* schema_norm.c: nodes by the JSON object they were read from */
	struct sc_memo *nodes;
	/* schema.c: rules for conjunctions of nodes */
	struct sc_memo *rules;
	struct sc_memo *frags;   /* schema_string.c: patterns' and formats' fragments */
	uint32_t valid_depth;    /* schema_valid.c's recursion */
	/* The walk's two recursive steps, called back through the context by the files below
	 * them (conditions read their schemas, types write what they contain): sc_norm, sc_gen. */
	struct sn *(*norm)(struct schema *s, const struct jv *node);
	struct ir_node *(*gen)(struct schema *s, const struct sn_list *l);
	char why[160];           /* the first reason a part allows no value, for the refusal */
};

/* ------------------------------------------------------------------------------------------ */
/* schema_common.c                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* Records why a part allows no value (the first reason), for the refusal if nothing is left;
 * fmt takes the location. */
void sc_note_why(struct schema *s, const char *fmt, const char *where);
/* Records "<message> (at <path>)" and returns -1. */
int sc_fail(struct schema *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends "/a" and "/b" (JSON pointer escapes; b may be NULL) to the path; returns the old
 * length for sc_pop. */
size_t sc_push(struct schema *s, const char *a, const char *b);
size_t sc_push_index(struct schema *s, const char *a, size_t i);
void sc_pop(struct schema *s, size_t old);
/* The path as it is now, in the arena. */
const char *sc_where(struct schema *s);
/* A count keyword's value: a non-negative integer (1.0 too); -1 with an error otherwise, or
 * past the repetition limit. */
int sc_count(struct schema *s, const struct jv *v, const char *keyword, uint32_t *out);
int sc_list_push(struct schema *s, struct sn_list *l, struct sn *x);
int sc_list_cat(struct schema *s, struct sn_list *l, const struct sn_list *m);
/* A node of kind k at the current path. */
struct sn *sc_node(struct schema *s, uint8_t kind);
/* b made the tighter of itself and (v, excl) (a lower bound is tighter when larger). */
void sc_tighten(struct sn_bound *b, const struct jv *v, int excl, int upper);
/* 1 when a plain node asserts nothing at all. */
int sc_plain_is_empty(const struct sn *p);
/* 1 when key[0..len) is among names. */
int sc_name_in(const char *const *names, const uint32_t *lens, uint32_t n, const char *key,
	       uint32_t len);
/* "type" (a name or a list of names) as T_* bits. */
int sc_read_types(struct schema *s, const struct jv *type, uint32_t *out);
/* A string rule (SN_PATTERN, SN_FORMAT, SN_NOT_PATTERN) of v's text added to p. */
int sc_add_text(struct schema *s, struct sn *p, int kind, const struct jv *v);
int sc_add_clause(struct schema *s, struct sn *p, const struct sn_clause *cl);
/* A literal value's expression (compact JSON, as written). */
struct ir_node *sc_literal(struct schema *s, const struct jv *v);
/* Appends n names to a name array (required, forbidden). */
int sc_names_add(struct schema *s, const char ***names, uint32_t **lens, uint32_t *n,
		 const char *const *add, const uint32_t *add_lens, uint32_t n_add);

/* A small map from pointers (or sorted pointer lists) to a value, for the memos. */
struct sc_memo;
int64_t sc_memo_get(const struct sc_memo *m, void *const *key, uint32_t n);
int sc_memo_put(struct schema *s, struct sc_memo **m, void *const *key, uint32_t n, int64_t v);

/* ------------------------------------------------------------------------------------------ */
/* schema_doc.c                                                                               */
/* ------------------------------------------------------------------------------------------ */

/* Reads the document's draft and resources; 0 or -1. */
int sc_doc_open(struct schema *s);
/* The role of keyword key in the document's draft (SC_KW_*), for schema_norm.c. */
enum {
	SC_KW_IGNORED = 0,       /* an annotation, or not a keyword of the draft */
	SC_KW_ASSERTS,           /* read by schema_norm.c */
	SC_KW_REFUSED,           /* asserts, and cannot be enforced */
};
int sc_keyword_role(const struct schema *s, const char *key, uint32_t len);
/* Resolves a $ref from the current resource: the target, and the resource it lies in; NULL
 * with the error recorded. */
const struct jv *sc_resolve(struct schema *s, const struct jv *ref, const struct jv **resource);
/* The member if the draft reads it as an asserting keyword, else NULL. */
const struct jv *sc_kw(const struct schema *s, const struct jv *obj, const char *name);
/* A $ref node, resolved (its target read on first use). */
struct sn *sc_ref_node(struct schema *s, const struct jv *ref);
/* The resource a node starts (its $id/id sets a base URI), or NULL. */
int sc_starts_resource(const struct schema *s, const struct jv *node);

/* ------------------------------------------------------------------------------------------ */
/* schema_norm.c                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* The node for schema `node` (an object or a boolean) read at the current path and resource;
 * the same node each time for the same JSON. NULL with the error recorded. */
struct sn *sc_norm(struct schema *s, const struct jv *node);
/* schema_cond.c: not, if/then/else and dependencies of obj, as nodes added to kids. */
int sc_read_conditions(struct schema *s, const struct jv *obj, struct sn_list *kids);
/* A REF's target node, made on first use. */
struct sn *sc_ref_target(struct schema *s, struct sn *ref);
/* Number constants (int32/int64 bounds). */
const struct jv *sc_number_constant(struct schema *s, const char *text);

/* ------------------------------------------------------------------------------------------ */
/* schema_merge.c                                                                             */
/* ------------------------------------------------------------------------------------------ */

/* Atoms: what holds together once conjunctions and references are opened (plain nodes, and
 * the disjunctions still to choose from). */
struct sc_atoms {
	struct sn **v;
	uint32_t n, cap;
	uint8_t is_false;        /* a false schema among them: nothing holds */
	uint8_t via_ref;         /* some came through a $ref: the set may recur */
	struct sn **seen;        /* $ref targets opened (each once) */
	uint32_t n_seen, cap_seen;
};
int sc_atoms_add(struct schema *s, struct sc_atoms *a, struct sn *x);
/* By pointer: the key of their memo. */
void sc_atoms_sort(struct sc_atoms *a);
/* x's atoms added to a ($refs and allOf opened). */
int sc_collect(struct schema *s, struct sc_atoms *a, struct sn *x);
/* The plain atoms merged into one fresh plain node. */
struct sn *sc_atoms_merge(struct schema *s, const struct sc_atoms *a);
/* l opened and its plain atoms merged (*out; a FALSE node when nothing holds); its
 * disjunctions are ignored, so *out holds wherever l does (a wider language). 0 or -1. */
int sc_flatten(struct schema *s, const struct sn_list *l, struct sn **out);
/* The types a merged node is written as: those it allows, narrowed without `type` to the
 * kinds its keywords describe. */
uint32_t sc_written_types(const struct sn *f);

/* ------------------------------------------------------------------------------------------ */
/* schema.c                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* The expression of values that meet every node of l. */
struct ir_node *sc_gen(struct schema *s, const struct sn_list *l);

/* ------------------------------------------------------------------------------------------ */
/* schema_disjoint.c                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* The branches of the disjunction d (anyOf, oneOf) among the atoms a: each of d's kids with
 * the rest of a (d->n_kids atom lists in the arena). A oneOf's are made pairwise disjoint, by
 * proof (types, literals, number ranges, string languages, item counts, a required property
 * whose values are disjoint or that the other forbids) or by narrowing branches (literals
 * valid in two dropped from one, strings the other accepts left out where only strings
 * overlap, a property another branch requires left out). NULL with the reason when neither
 * does, or on error. */
struct sc_atoms *sc_branches(struct schema *s, const struct sc_atoms *a, const struct sn *d);

/* ------------------------------------------------------------------------------------------ */
/* schema_valid.c                                                                             */
/* ------------------------------------------------------------------------------------------ */

/* 1 when v meets every node of l, 0 when not, -1 on error (depth, a pattern that does not
 * compile). */
int sc_valid_list(struct schema *s, const struct sn_list *l, const struct jv *v);
int sc_valid(struct schema *s, const struct sn *n, const struct jv *v);
/* The values of key key[0..len) in a merged object node: the lists every clause asks of it,
 * appended to out; 1 when the key is forbidden; -1 when whether a pattern matches the key
 * depends on the regular-expression engine (then nothing is known). */
int sc_key_values(struct schema *s, const struct sn *f, const char *key, uint32_t len,
		  struct sn_list *out);

/* ------------------------------------------------------------------------------------------ */
/* schema_range.c                                                                             */
/* ------------------------------------------------------------------------------------------ */

#define SC_MAX_DIGITS 1000 /* a bound needing more decimal digits is refused */

/* A decimal: sign, integer digits without leading zeros ("0" for none), fraction digits
 * without trailing zeros (maybe ""); never a negative zero. */
struct sc_dec {
	int neg;
	const char *ip, *fp;
};
/* digits[0..n) with the decimal point after `point` digits (may be <= 0 or > n). */
int sc_dec_make(struct gr_ctx *c, int neg, const char *digits, long n, long point,
		struct sc_dec *out);
/* The decimal printf wrote ("-ddd.ddd" or "-d.ddde+XX"). */
int sc_dec_printed(struct gr_ctx *c, const char *s, struct sc_dec *out);
/* The shortest decimal that reads back as the double d. */
int sc_dec_shortest(struct gr_ctx *c, double d, struct sc_dec *out);
int sc_dec_cmp(const struct sc_dec *a, const struct sc_dec *b);
/* Non-negative integer digit strings plus or minus one. */
char *sc_digits_add(struct gr_ctx *c, const char *a, int delta);
/* Integers a..b (digit strings; b NULL: no upper end), a <= b, without leading zeros. */
struct ir_node *sc_int_range(struct gr_ctx *c, const char *a, const char *b);
/* Non-negative decimals a <= x <= b (b NULL: no upper end). */
struct ir_node *sc_dec_nonneg(struct gr_ctx *c, const struct sc_dec *a, const struct sc_dec *b);
/* Decimals 0 < y <= b (b NULL: no upper end): what follows a minus sign. */
struct ir_node *sc_dec_positive(struct gr_ctx *c, const struct sc_dec *b);

/* ------------------------------------------------------------------------------------------ */
/* Types (schema_object.c, schema_array.c, schema_string.c, schema_number.c)                  */
/* ------------------------------------------------------------------------------------------ */

struct ir_node *sc_object(struct schema *s, const struct sn *n);
struct ir_node *sc_array(struct schema *s, const struct sn *n);
struct ir_node *sc_string(struct schema *s, const struct sn *n);
struct ir_node *sc_integer(struct schema *s, const struct sn *n);
struct ir_node *sc_number(struct schema *s, const struct sn *n);
/* The language of the string node's contents (between the quotes), as a fragment, spelled
 * as mode says; NULL with the error recorded. Patterns read as `wide` says: 0 the narrowest
 * reading every engine agrees matches, 1 the widest any engine might match. */
const struct gr_frag *sc_string_frag(struct schema *s, const struct sn *n, enum gr_text_mode mode,
				     int wide);
/* A pattern's fragment (search semantics), read narrowly or widely. */
const struct gr_frag *sc_pattern_frag(struct schema *s, const struct jv *re, const char *where,
				      enum gr_text_mode mode, int wide);
/* 1 when the string str[0..len) meets the node's string rules (patterns, formats, lengths). */
int sc_valid_string(struct schema *s, const struct sn *n, const char *str, uint32_t len);
/* 1 when the format's name is one this engine knows (enforced). */
int sc_format_known(const char *name, uint32_t len);
/* Whether a format applies to a type: int32 and int64 on numbers, the rest on strings. */
int sc_format_numeric(const char *name, uint32_t len);

#endif /* BITNETD_GRAMMAR_SCHEMA_H */
