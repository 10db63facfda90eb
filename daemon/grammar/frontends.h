/* SPDX-License-Identifier: MIT */
/*
 * frontends.h — the four grammar forms, each building rules in a compile context (ir.h) and
 * setting its root. Each returns 0, or -1 with the error in the context.
 */
#ifndef BITNETD_GRAMMAR_FRONTENDS_H
#define BITNETD_GRAMMAR_FRONTENDS_H

#include "ir.h"

/* gbnf.c: llama.cpp's GBNF, from rule `root`. */
int gr_gbnf(struct gr_ctx *c, const char *text, size_t len);

/* regex.c: a regular expression the whole output matches (README.md: the dialect). */
int gr_regex(struct gr_ctx *c, const char *text, size_t len);
/* The expression of a regular expression, each character spelled as mode says; `where`
 * prefixes its errors (a schema location). Without flags the whole text matches (anchors only
 * at its ends). GR_RE_SEARCH: JSON Schema's semantics: the pattern may match anywhere, and
 * what ECMAScript refuses or reads differently from Python is refused; anchors may stand
 * anywhere (inside groups, alternatives), as marks of the text's ends: the expression is of
 * the text with GR_RE_START before it and GR_RE_END after it (bytes no UTF-8 text has), which
 * gr_frag_between (regular.h) takes off. GR_RE_WIDE: the widest reading of any engine
 * (Unicode classes, `.` all but a line feed, `$` before a final line feed), where the default
 * is the narrowest every engine agrees on: a string outside the wide language matches under
 * no engine. */
#define GR_RE_SEARCH 1
#define GR_RE_WIDE 2
#define GR_RE_START 0xFE
#define GR_RE_END 0xFF
struct ir_node *gr_regex_expr(struct gr_ctx *c, const char *re, size_t len,
			      enum gr_text_mode mode, int flags, const char *where);

/* json.c: any JSON value (c->json_top says whether only an object), and the pieces schemas
 * are made of. */
int gr_json_any(struct gr_ctx *c);
struct ir_node *gr_json_ws(struct gr_ctx *c);          /* whitespace between tokens */
struct ir_node *gr_json_string_char(struct gr_ctx *c); /* one character inside a string */
struct ir_node *gr_json_string(struct gr_ctx *c);      /* any string, quotes included */
struct ir_node *gr_json_number(struct gr_ctx *c);      /* any number */
struct ir_node *gr_json_integer(struct gr_ctx *c);     /* any integer, no fraction/exponent */
/* The rule of any JSON value (made once per context, recursive through arrays/objects). */
int64_t gr_json_value_rule(struct gr_ctx *c);
/* An object of any members / an array of any items (made once per context). */
struct ir_node *gr_json_any_object(struct gr_ctx *c);

/* schema.c: a JSON Schema document. */
int gr_schema(struct gr_ctx *c, const char *text, size_t len);

#endif /* BITNETD_GRAMMAR_FRONTENDS_H */
