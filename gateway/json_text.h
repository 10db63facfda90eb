/* SPDX-License-Identifier: MIT */
/*
 * json_text.h — a request body's JSON as text, where Jansson's values lose what a schema says:
 * Jansson holds integers to 64 bits and decimals as doubles (a schema's `"maximum":
 * 100000000000000003` or `"multipleOf": 0.1` would come back changed from a re-dump), and it
 * refuses an integer beyond 64 bits outright. So the schemas (`response_format`'s and each
 * tool's `parameters`) go to the daemon as the user's own text, found by its place in the body;
 * Jansson parses a copy in which only their out-of-range numbers are written over, and the
 * gateway's checks read that.
 *
 * The scanner here only walks text Jansson has parsed or will parse: it finds values by key and
 * index and skips strings, but it never decides whether a text is JSON (Jansson does).
 */
#ifndef BITNET_GATEWAY_JSON_TEXT_H
#define BITNET_GATEWAY_JSON_TEXT_H

#include <stddef.h>
#include <stdio.h>

/* A value's bytes in the body: text[at .. at + len); len 0 when there is none. */
struct gw_span {
	size_t at, len;
};

/* The whole text as one value (leading and trailing whitespace left out); len 0 when empty. */
struct gw_span gw_json_root(const char *text, size_t len);
/* The value of member key (UTF-8, escapes in the text decoded before comparing) of the object
 * at obj; len 0 when obj is no object or has no such member. */
struct gw_span gw_json_member(const char *text, struct gw_span obj, const char *key);
/* Element i of the array at arr; len 0 when arr is no array or is shorter. */
struct gw_span gw_json_element(const char *text, struct gw_span arr, size_t i);
/* The object at obj's members one at a time: *pos starts at 0; 1 with the key's span (its
 * quotes included) and the value's, 0 after the last. */
int gw_json_next_member(const char *text, struct gw_span obj, size_t *pos, struct gw_span *key,
			struct gw_span *value);
/* 1 when the string at key (quotes included) says name. */
int gw_json_key_is(const char *text, struct gw_span key, const char *name);

/* The span's text to f without whitespace between tokens (strings and numbers as written). */
void gw_json_write_compact(FILE *f, const char *text, struct gw_span s);
/* 1 when the two spans' compact texts are equal. */
int gw_json_same_text(const char *text, struct gw_span a, struct gw_span b);

/* The body as Jansson may take it: a copy in which every number inside one of the spans that
 * Jansson cannot hold (an integer beyond 64 bits, a decimal beyond a double's range) is written
 * over as `0` and spaces, and a key's \u0000 as \u0001 (Jansson takes U+0000 in values only),
 * the same length, so every offset stays. Returns the copy (malloc'd) or NULL without memory. */
char *gw_json_masked_copy(const char *text, size_t len, const struct gw_span *spans, size_t n);
/* 1 when a string outside the spans holds the escape \u0000: the gateway's other fields are C
 * strings, so only a schema's strings may carry U+0000. */
int gw_json_nul_outside(const char *text, size_t len, const struct gw_span *spans, size_t n);

#endif /* BITNET_GATEWAY_JSON_TEXT_H */
