/* SPDX-License-Identifier: MIT */
/*
 * schema_json.h — JSON documents as the schema front end reads them (schema_json.c): every
 * number kept as the text it was written with (a bound of 100000000000000001 or a decimal of
 * 40 digits is read exactly, where Jansson would keep a double or refuse an integer past
 * int64), strings of any bytes JSON can say (\u0000 included), members in document order,
 * duplicate keys refused. Values live in the compile context's arena.
 */
#ifndef BITNETD_GRAMMAR_SCHEMA_JSON_H
#define BITNETD_GRAMMAR_SCHEMA_JSON_H

#include "ir.h"

enum jv_kind {
	JV_NULL = 0,
	JV_FALSE,
	JV_TRUE,
	JV_NUMBER,
	JV_STRING,
	JV_ARRAY,
	JV_OBJECT,
};

/* A number's value as sign, significant digits and a power of ten: value = digits * 10^exp,
 * digits without leading or trailing zeros ("0" with exp 0 for zero, never negative). The
 * exponent saturates far beyond any bound the front end takes. */
struct jv_decimal {
	int neg;
	const char *digits;
	uint32_t n;
	int64_t exp;
};

struct jv {
	uint8_t kind;
	uint32_t n;            /* string bytes, number text bytes, array items, object members */
	const char *s;         /* string bytes (a NUL after them), number text */
	struct jv **v;         /* array items, object values */
	const char **k;        /* object keys (a NUL after each) */
	uint32_t *klen;        /* object keys' lengths */
	struct jv_decimal dec; /* a number's value */
};

/* The document text[0..len), or NULL with "the schema is not valid JSON: ... (line, column)"
 * in c. Nesting deeper than c->lim.max_depth * 4 is refused (the schema walk refuses at
 * max_depth levels of schemas, each a few levels of JSON). */
struct jv *jv_parse(struct gr_ctx *c, const char *text, size_t len);

/* The member key (NUL-terminated; or key[0..n) for jv_getn) of an object, NULL when absent or
 * when obj is not an object. */
const struct jv *jv_get(const struct jv *obj, const char *key);
const struct jv *jv_getn(const struct jv *obj, const char *key, size_t n);

/* JSON Schema's equality: numbers by mathematical value (1 equals 1.0 and 1e0), strings by
 * bytes, arrays item by item, objects as sets of members. */
int jv_equal(const struct jv *a, const struct jv *b);

/* -1, 0 or 1 as a < b, a == b, a > b. */
int jv_decimal_cmp(const struct jv_decimal *a, const struct jv_decimal *b);
/* 1 when the number is an integer (1.0 and 1e3 are). */
int jv_is_integral(const struct jv *num);

/* v written as compact JSON (numbers as written, strings with the escapes JSON requires and
 * nothing else escaped), NUL-terminated in the arena; its length in *len. */
char *jv_write(struct gr_ctx *c, const struct jv *v, size_t *len);

#endif /* BITNETD_GRAMMAR_SCHEMA_JSON_H */
