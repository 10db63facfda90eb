/* SPDX-License-Identifier: MIT */
/*
 * schema.h — the JSON Schema front end's shared state (schema.c: documents, references,
 * keywords, objects, arrays, enums, anyOf; schema_string.c: strings and formats;
 * schema_number.c: integers and numbers with bounds; schema_common.c: errors, counts).
 */
#ifndef BITNETD_GRAMMAR_SCHEMA_H
#define BITNETD_GRAMMAR_SCHEMA_H

#include "frontends.h"

#include <jansson.h>

struct schema_ref {
	json_t *target;
	uint32_t rule;
};

struct schema {
	struct gr_ctx *c;
	json_t *doc;
	char path[200];          /* where we are, as a JSON pointer: "#/properties/a" */
	uint32_t depth;
	struct schema_ref *refs;
	uint32_t n_refs, cap_refs;
};

/* Records "<message> (at <path>)" and returns -1. */
int sc_fail(struct schema *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The value of keyword in node, or NULL; node's keywords are checked for type elsewhere. */
static inline json_t *sc_get(json_t *node, const char *keyword)
{
	return json_object_get(node, keyword);
}

/* A non-negative integer keyword (absent: *out unchanged, 0); -1 on a bad value. */
int sc_count(struct schema *s, json_t *node, const char *keyword, uint32_t *out);

struct ir_node *sc_string(struct schema *s, json_t *node);
struct ir_node *sc_integer(struct schema *s, json_t *node);
struct ir_node *sc_number(struct schema *s, json_t *node);

#endif /* BITNETD_GRAMMAR_SCHEMA_H */
