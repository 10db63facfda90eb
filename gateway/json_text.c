/* SPDX-License-Identifier: MIT */
/*
 * json_text.c — values found in a body's text by key and index, written out compact, and the
 * copy of the body Jansson parses (json_text.h).
 */
#define _GNU_SOURCE
#include "json_text.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t skip_ws(const char *t, size_t i, size_t end)
{
	while (i < end && is_ws(t[i]))
		i++;
	return i;
}

/* One past the string starting at t[i] ('"'), or 0 when it does not end before end. */
static size_t string_end(const char *t, size_t i, size_t end)
{
	for (size_t j = i + 1; j < end; j++) {
		if (t[j] == '\\')
			j++;
		else if (t[j] == '"')
			return j + 1;
	}
	return 0;
}

/* One past the value starting at t[i], or 0 when it does not end before end. */
static size_t value_end(const char *t, size_t i, size_t end)
{
	if (i >= end)
		return 0;
	if (t[i] == '"')
		return string_end(t, i, end);
	if (t[i] == '{' || t[i] == '[') {
		size_t depth = 0;
		for (size_t j = i; j < end;) {
			char c = t[j];
			if (c == '"') {
				j = string_end(t, j, end);
				if (!j)
					return 0;
				continue;
			}
			if (c == '{' || c == '[')
				depth++;
			else if ((c == '}' || c == ']') && --depth == 0)
				return j + 1;
			j++;
		}
		return 0;
	}
	size_t j = i;
	while (j < end && !is_ws(t[j]) && t[j] != ',' && t[j] != '}' && t[j] != ']')
		j++;
	return j > i ? j : 0;
}

struct gw_span gw_json_root(const char *text, size_t len)
{
	size_t i = skip_ws(text, 0, len), e = value_end(text, i, len);
	return e ? (struct gw_span){ i, e - i } : (struct gw_span){ 0, 0 };
}

int gw_json_next_member(const char *text, struct gw_span obj, size_t *pos, struct gw_span *key,
			struct gw_span *value)
{
	size_t end = obj.at + obj.len;
	if (!obj.len || text[obj.at] != '{')
		return 0;
	size_t i = skip_ws(text, *pos ? *pos : obj.at + 1, end);
	if (*pos && i < end && text[i] == ',')
		i = skip_ws(text, i + 1, end);
	if (i >= end || text[i] != '"')
		return 0;
	size_t ke = string_end(text, i, end);
	if (!ke)
		return 0;
	*key = (struct gw_span){ i, ke - i };
	i = skip_ws(text, ke, end);
	if (i >= end || text[i] != ':')
		return 0;
	i = skip_ws(text, i + 1, end);
	size_t ve = value_end(text, i, end);
	if (!ve)
		return 0;
	*value = (struct gw_span){ i, ve - i };
	*pos = ve;
	return 1;
}

int gw_json_key_is(const char *text, struct gw_span key, const char *name)
{
	size_t n = strlen(name);
	if (key.len < 2)
		return 0;
	if (!memchr(text + key.at, '\\', key.len)) /* the usual key, compared as it is */
		return key.len - 2 == n && !memcmp(text + key.at + 1, name, n);
	json_t *s = json_loadb(text + key.at, key.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	int same = json_is_string(s) && json_string_length(s) == n &&
		   !memcmp(json_string_value(s), name, n);
	json_decref(s);
	return same;
}

struct gw_span gw_json_member(const char *text, struct gw_span obj, const char *key)
{
	struct gw_span k, v;
	size_t pos = 0;
	while (gw_json_next_member(text, obj, &pos, &k, &v))
		if (gw_json_key_is(text, k, key))
			return v;
	return (struct gw_span){ 0, 0 };
}

struct gw_span gw_json_element(const char *text, struct gw_span arr, size_t i)
{
	size_t end = arr.at + arr.len;
	if (!arr.len || text[arr.at] != '[')
		return (struct gw_span){ 0, 0 };
	size_t p = skip_ws(text, arr.at + 1, end);
	for (size_t k = 0;; k++) {
		size_t e = value_end(text, p, end);
		if (!e || text[p] == ']')
			return (struct gw_span){ 0, 0 };
		if (k == i)
			return (struct gw_span){ p, e - p };
		p = skip_ws(text, e, end);
		if (p >= end || text[p] != ',')
			return (struct gw_span){ 0, 0 };
		p = skip_ws(text, p + 1, end);
	}
}

/* ---- compact text ------------------------------------------------------------------------ */

/* A cursor over a span's bytes that skips whitespace between tokens. */
struct compact {
	const char *t;
	size_t i, end;
	int in_string, escaped;
};

/* The next byte of the compact text, or -1 at the end. */
static int compact_next(struct compact *c)
{
	while (c->i < c->end) {
		char ch = c->t[c->i++];
		if (c->in_string) {
			if (c->escaped)
				c->escaped = 0;
			else if (ch == '\\')
				c->escaped = 1;
			else if (ch == '"')
				c->in_string = 0;
			return (unsigned char)ch;
		}
		if (ch == '"')
			c->in_string = 1;
		if (!is_ws(ch))
			return (unsigned char)ch;
	}
	return -1;
}

void gw_json_write_compact(FILE *f, const char *text, struct gw_span s)
{
	struct compact c = { text, s.at, s.at + s.len, 0, 0 };
	for (int ch; (ch = compact_next(&c)) >= 0;)
		fputc(ch, f);
}

int gw_json_same_text(const char *text, struct gw_span a, struct gw_span b)
{
	struct compact x = { text, a.at, a.at + a.len, 0, 0 }, y = { text, b.at, b.at + b.len, 0, 0 };
	for (;;) {
		int p = compact_next(&x), q = compact_next(&y);
		if (p != q)
			return 0;
		if (p < 0)
			return 1;
	}
}

/* ---- what Jansson parses ----------------------------------------------------------------- */

/* 1 when t[0..n) is a JSON number (RFC 8259's grammar); *integer when without fraction and
 * exponent. */
static int json_number(const char *t, size_t n, int *integer)
{
	size_t i = t[0] == '-';
	if (i >= n || t[i] < '0' || t[i] > '9' || (t[i] == '0' && i + 1 < n && t[i + 1] >= '0' &&
						   t[i + 1] <= '9'))
		return 0;
	while (i < n && t[i] >= '0' && t[i] <= '9')
		i++;
	*integer = i == n;
	if (i < n && t[i] == '.') {
		size_t d = ++i;
		while (i < n && t[i] >= '0' && t[i] <= '9')
			i++;
		if (i == d)
			return 0;
	}
	if (i < n && (t[i] == 'e' || t[i] == 'E')) {
		i++;
		if (i < n && (t[i] == '+' || t[i] == '-'))
			i++;
		size_t d = i;
		while (i < n && t[i] >= '0' && t[i] <= '9')
			i++;
		if (i == d)
			return 0;
	}
	return i == n;
}

/* 1 when the number t[0..n) is one Jansson refuses: an integer outside 64 bits (strtoll's
 * range), a decimal that overflows a double (strtod's); -1 without memory. */
static int out_of_range(const char *t, size_t n, int integer)
{
	char *s = strndup(t, n);
	if (!s)
		return -1;
	errno = 0;
	int out;
	if (integer) {
		(void)strtoll(s, NULL, 10);
		out = errno == ERANGE;
	} else {
		double d = strtod(s, NULL);
		out = errno == ERANGE && isinf(d);
	}
	free(s);
	return out;
}

static int is_number_byte(char c)
{
	return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

/* A key's \u0000 escapes written over as \u0001 in copy: Jansson takes U+0000 in values
 * (JSON_ALLOW_NUL) but not in keys. (Two keys of one object that differ only there would read
 * as duplicates: the one case refused that the daemon would take.) */
static void mask_key_nul(const char *t, char *copy, size_t at, size_t end)
{
	for (size_t j = at + 1; j + 5 < end; j++) {
		if (t[j] != '\\')
			continue;
		if (!memcmp(t + j + 1, "u0000", 5))
			copy[j + 5] = '1';
		j++;
	}
}

/* Writes over the span's out-of-range numbers (and keys' U+0000) in copy. 0 or -1 without
 * memory. */
static int mask_span(const char *t, char *copy, struct gw_span s)
{
	size_t end = s.at + s.len;
	for (size_t i = s.at; i < end;) {
		if (t[i] == '"') {
			size_t e = string_end(t, i, end);
			if (e && skip_ws(t, e, end) < end && t[skip_ws(t, e, end)] == ':')
				mask_key_nul(t, copy, i, e);
			i = e ? e : end;
			continue;
		}
		if (t[i] != '-' && (t[i] < '0' || t[i] > '9')) {
			i++;
			continue;
		}
		size_t j = i;
		while (j < end && is_number_byte(t[j]))
			j++;
		int integer, out = json_number(t + i, j - i, &integer)
					   ? out_of_range(t + i, j - i, integer) : 0;
		if (out < 0)
			return -1;
		if (out) {
			copy[i] = '0';
			memset(copy + i + 1, ' ', j - i - 1);
		}
		i = j;
	}
	return 0;
}

char *gw_json_masked_copy(const char *text, size_t len, const struct gw_span *spans, size_t n)
{
	char *copy = malloc(len ? len : 1);
	if (!copy)
		return NULL;
	memcpy(copy, text, len);
	for (size_t k = 0; k < n; k++)
		if (spans[k].len && mask_span(text, copy, spans[k]) < 0) {
			free(copy);
			return NULL;
		}
	return copy;
}

static const struct gw_span *span_at(const struct gw_span *spans, size_t n, size_t i)
{
	for (size_t k = 0; k < n; k++)
		if (spans[k].len && i == spans[k].at)
			return &spans[k];
	return NULL;
}

int gw_json_nul_outside(const char *text, size_t len, const struct gw_span *spans, size_t n)
{
	for (size_t i = 0; i < len;) {
		const struct gw_span *s = span_at(spans, n, i);
		if (s) {
			i = s->at + s->len;
			continue;
		}
		if (text[i] != '"') {
			i++;
			continue;
		}
		for (i++; i < len && text[i] != '"'; i++) {
			if (text[i] != '\\')
				continue;
			if (i + 5 < len && !memcmp(text + i + 1, "u0000", 5))
				return 1;
			i++; /* the escaped byte */
		}
		i++;
	}
	return 0;
}
