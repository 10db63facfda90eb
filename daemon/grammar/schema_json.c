/* SPDX-License-Identifier: MIT */
/*
 * schema_json.c — JSON documents for the schema front end (schema_json.h). Jansson keeps a
 * number as an int64 or a double, so a bound past 2^53 or a long decimal would be compared
 * inexactly, and an integer past int64 refused; this reader keeps each number's text, checks
 * the whole of RFC 8259 (UTF-8, escapes, surrogate pairs, numbers), and refuses duplicate
 * keys, which JSON Schema leaves undefined.
 */
#include "schema_json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jp {
	struct gr_ctx *c;
	const char *s;
	size_t pos, len;
	uint32_t depth, max_depth;
};

static int jp_fail(struct jp *p, const char *what)
{
	size_t line = 1, col = 1;
	for (size_t i = 0; i < p->pos && i < p->len; i++) {
		if (p->s[i] == '\n')
			line++, col = 1;
		else
			col++;
	}
	return gr_fail(p->c, -EINVAL, "the schema is not valid JSON: %s (line %zu, column %zu)",
		       what, line, col);
}

static void skip_ws(struct jp *p)
{
	while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
				   p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
		p->pos++;
}

static struct jv *new_value(struct jp *p, uint8_t kind)
{
	struct jv *v = gr_alloc(p->c, sizeof(*v));
	if (v)
		v->kind = kind;
	return v;
}

/* ------------------------------------------------------------------------------------------ */
/* Strings                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static int hex4(struct jp *p, uint32_t *out)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++) {
		char ch = p->pos < p->len ? p->s[p->pos] : 0;
		int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
			: ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
		if (d < 0)
			return jp_fail(p, "a \\u escape needs four hexadecimal digits");
		v = v << 4 | (uint32_t)d;
		p->pos++;
	}
	*out = v;
	return 0;
}

/* After "\u": one code point, a surrogate pair taken whole. */
static int unicode_escape(struct jp *p, uint32_t *cp)
{
	if (hex4(p, cp))
		return -1;
	if (*cp >= 0xDC00 && *cp <= 0xDFFF)
		return jp_fail(p, "a \\u escape is a lone low surrogate");
	if (*cp < 0xD800 || *cp > 0xDBFF)
		return 0;
	uint32_t low;
	if (p->pos + 2 > p->len || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
		return jp_fail(p, "a \\u escape is a high surrogate without its low half");
	p->pos += 2;
	if (hex4(p, &low))
		return -1;
	if (low < 0xDC00 || low > 0xDFFF)
		return jp_fail(p, "a \\u escape is a high surrogate without its low half");
	*cp = 0x10000 + ((*cp - 0xD800) << 10) + (low - 0xDC00);
	return 0;
}

static int escape(struct jp *p, uint8_t *out, uint32_t *n)
{
	char e = p->pos < p->len ? p->s[p->pos++] : 0;
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	const char *k = e ? strchr(from, e) : NULL;
	if (k) {
		out[0] = (uint8_t)to[k - from];
		*n = 1;
		return 0;
	}
	if (e != 'u')
		return jp_fail(p, "an unknown escape in a string");
	uint32_t cp;
	if (unicode_escape(p, &cp))
		return -1;
	*n = (uint32_t)gr_utf8_encode(cp, out);
	return 0;
}

/* A string at p->pos (the opening quote), decoded into the arena. The decoded form is never
 * longer than the text, so one allocation of the text's length serves. */
static int parse_string(struct jp *p, const char **out, uint32_t *out_len)
{
	size_t start = ++p->pos, end = start;
	while (end < p->len && p->s[end] != '"')
		end += p->s[end] == '\\' ? 2 : 1;
	if (end >= p->len)
		return jp_fail(p, "a string is not closed");
	if (end - start > UINT32_MAX - 1)
		return jp_fail(p, "a string is too long");
	char *buf = gr_alloc(p->c, end - start + 1);
	if (!buf)
		return -1;
	uint32_t w = 0;
	while (p->s[p->pos] != '"') {
		uint8_t b = (uint8_t)p->s[p->pos];
		if (b < 0x20)
			return jp_fail(p, "a control character inside a string");
		if (b == '\\') {
			uint32_t n = 0;
			p->pos++;
			if (escape(p, (uint8_t *)buf + w, &n))
				return -1;
			w += n;
			continue;
		}
		uint32_t n;
		if (gr_utf8_decode((const uint8_t *)p->s + p->pos, p->len - p->pos, &n) < 0)
			return jp_fail(p, "invalid UTF-8 in a string");
		memcpy(buf + w, p->s + p->pos, n);
		w += n;
		p->pos += n;
	}
	p->pos++;
	*out = buf;
	*out_len = w;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Numbers                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* The exponent's value, saturated far past anything a bound can use (schema_number.c refuses
 * bounds of more than a few hundred digits). */
static int64_t exponent(const char *s, const char *end)
{
	int neg = *s == '-';
	s += *s == '-' || *s == '+';
	int64_t e = 0;
	for (; s < end; s++)
		if (e < (int64_t)1 << 40)
			e = e * 10 + (*s - '0');
	return neg ? -e : e;
}

/* The number text[0..n) (valid JSON) as a normalized decimal, its digits in the arena. */
static int make_decimal(struct gr_ctx *c, const char *s, uint32_t n, struct jv_decimal *out)
{
	const char *end = s + n, *e = s;
	*out = (struct jv_decimal){ .neg = *s == '-', .digits = "0", .n = 1 };
	s += out->neg;
	while (e < end && *e != 'e' && *e != 'E')
		e++;
	char *buf = gr_alloc(c, (size_t)(e - s) + 1);
	if (!buf)
		return -1;
	uint32_t w = 0;
	int64_t frac = 0, in_frac = 0;
	for (const char *q = s; q < e; q++) {
		if (*q == '.') {
			in_frac = 1;
			continue;
		}
		frac += in_frac;
		if (w || *q != '0')
			buf[w++] = *q;
	}
	int64_t exp = (e < end ? exponent(e + 1, end) : 0) - frac;
	while (w > 0 && buf[w - 1] == '0')
		w--, exp++;
	if (w == 0) {
		out->neg = 0;
		return 0;
	}
	buf[w] = 0;
	out->digits = buf;
	out->n = w;
	out->exp = exp;
	return 0;
}

static int is_digit(struct jp *p)
{
	return p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9';
}

static void digits(struct jp *p)
{
	while (is_digit(p))
		p->pos++;
}

static struct jv *parse_number(struct jp *p)
{
	size_t start = p->pos;
	if (p->s[p->pos] == '-')
		p->pos++;
	if (!is_digit(p)) {
		jp_fail(p, "a number needs a digit");
		return NULL;
	}
	if (p->s[p->pos] == '0')
		p->pos++;
	else
		digits(p);
	if (p->pos < p->len && p->s[p->pos] == '.') {
		p->pos++;
		if (!is_digit(p)) {
			jp_fail(p, "a number's fraction needs a digit");
			return NULL;
		}
		digits(p);
	}
	if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
		p->pos++;
		if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
			p->pos++;
		if (!is_digit(p)) {
			jp_fail(p, "a number's exponent needs a digit");
			return NULL;
		}
		digits(p);
	}
	struct jv *v = new_value(p, JV_NUMBER);
	if (!v || !(v->s = gr_strndup(p->c, p->s + start, p->pos - start)))
		return NULL;
	v->n = (uint32_t)(p->pos - start);
	return make_decimal(p->c, v->s, v->n, &v->dec) ? NULL : v;
}

/* ------------------------------------------------------------------------------------------ */
/* Structure                                                                                  */
/* ------------------------------------------------------------------------------------------ */

static struct jv *parse_value(struct jp *p);

/* A growing list of values (and keys) in the arena. */
struct members {
	struct jv **v;
	const char **k;
	uint32_t *klen;
	uint32_t n, cap;
};

static int members_push(struct jp *p, struct members *m, const char *k, uint32_t klen,
			struct jv *v)
{
	if (m->n == m->cap) {
		uint32_t cap = m->cap ? m->cap * 2 : 8;
		struct jv **nv = gr_alloc(p->c, cap * sizeof(*nv));
		const char **nk = gr_alloc(p->c, cap * sizeof(*nk));
		uint32_t *nl = gr_alloc(p->c, cap * sizeof(*nl));
		if (!nv || !nk || !nl)
			return -1;
		if (m->n) {
			memcpy(nv, m->v, m->n * sizeof(*nv));
			memcpy(nk, m->k, m->n * sizeof(*nk));
			memcpy(nl, m->klen, m->n * sizeof(*nl));
		}
		m->v = nv, m->k = nk, m->klen = nl, m->cap = cap;
	}
	m->v[m->n] = v;
	m->k[m->n] = k;
	m->klen[m->n] = klen;
	m->n++;
	return 0;
}

static const struct jv *sort_base;

static int cmp_key(const void *a, const void *b)
{
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
	uint32_t li = sort_base->klen[i], lj = sort_base->klen[j];
	int r = memcmp(sort_base->k[i], sort_base->k[j], li < lj ? li : lj);
	return r ? r : li < lj ? -1 : li > lj;
}

/* A key written twice, by sorting the member indexes (an object may have thousands). */
static const char *duplicate_key(struct jp *p, const struct jv *obj)
{
	if (obj->n < 2)
		return NULL;
	uint32_t *idx = malloc(obj->n * sizeof(uint32_t));
	if (!idx) {
		gr_fail(p->c, -ENOMEM, "out of memory reading the schema");
		return NULL;
	}
	for (uint32_t i = 0; i < obj->n; i++)
		idx[i] = i;
	sort_base = obj; /* qsort has no context argument; compiles are not nested in a thread */
	qsort(idx, obj->n, sizeof(uint32_t), cmp_key);
	const char *dup = NULL;
	for (uint32_t i = 1; i < obj->n && !dup; i++)
		if (cmp_key(&idx[i - 1], &idx[i]) == 0)
			dup = obj->k[idx[i]];
	free(idx);
	return dup;
}

static struct jv *parse_object(struct jp *p)
{
	struct members m = { 0 };
	struct jv *obj = new_value(p, JV_OBJECT);
	p->pos++;
	skip_ws(p);
	if (p->pos < p->len && p->s[p->pos] == '}') {
		p->pos++;
		return obj;
	}
	for (;;) {
		const char *k;
		uint32_t klen;
		skip_ws(p);
		if (p->pos >= p->len || p->s[p->pos] != '"') {
			jp_fail(p, "an object member needs a string key");
			return NULL;
		}
		if (parse_string(p, &k, &klen))
			return NULL;
		skip_ws(p);
		if (p->pos >= p->len || p->s[p->pos] != ':') {
			jp_fail(p, "a key needs a ':' after it");
			return NULL;
		}
		p->pos++;
		struct jv *v = parse_value(p);
		if (!v || members_push(p, &m, k, klen, v))
			return NULL;
		skip_ws(p);
		char ch = p->pos < p->len ? p->s[p->pos++] : 0;
		if (ch == '}')
			break;
		if (ch != ',') {
			p->pos -= ch != 0;
			jp_fail(p, "an object needs ',' or '}'");
			return NULL;
		}
	}
	if (!obj)
		return NULL;
	obj->n = m.n, obj->v = m.v, obj->k = m.k, obj->klen = m.klen;
	const char *dup = duplicate_key(p, obj);
	if (dup) {
		gr_fail(p->c, -EINVAL, "the schema is not valid JSON: the key \"%.60s\" is written "
			"twice in one object", dup);
		return NULL;
	}
	return p->c->rc ? NULL : obj;
}

static struct jv *parse_array(struct jp *p)
{
	struct members m = { 0 };
	struct jv *arr = new_value(p, JV_ARRAY);
	p->pos++;
	skip_ws(p);
	if (p->pos < p->len && p->s[p->pos] == ']') {
		p->pos++;
		return arr;
	}
	for (;;) {
		struct jv *v = parse_value(p);
		if (!v || members_push(p, &m, NULL, 0, v))
			return NULL;
		skip_ws(p);
		char ch = p->pos < p->len ? p->s[p->pos++] : 0;
		if (ch == ']')
			break;
		if (ch != ',') {
			p->pos -= ch != 0;
			jp_fail(p, "an array needs ',' or ']'");
			return NULL;
		}
	}
	if (arr)
		arr->n = m.n, arr->v = m.v;
	return arr;
}

static struct jv *parse_word(struct jp *p, const char *word, uint8_t kind)
{
	size_t n = strlen(word);
	if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n)) {
		jp_fail(p, "an unexpected character");
		return NULL;
	}
	p->pos += n;
	return new_value(p, kind);
}

static struct jv *parse_value(struct jp *p)
{
	skip_ws(p);
	if (p->pos >= p->len) {
		jp_fail(p, "the text ends where a value should be");
		return NULL;
	}
	if (gr_tick(p->c))
		return NULL;
	char ch = p->s[p->pos];
	if (ch == '{' || ch == '[') {
		if (++p->depth > p->max_depth) {
			gr_fail(p->c, -E2BIG, "the schema nests deeper than %u JSON levels (the limit)",
				p->max_depth);
			return NULL;
		}
		struct jv *v = ch == '{' ? parse_object(p) : parse_array(p);
		p->depth--;
		return v;
	}
	if (ch == '"') {
		struct jv *v = new_value(p, JV_STRING);
		return v && parse_string(p, &v->s, &v->n) == 0 ? v : NULL;
	}
	if (ch == '-' || (ch >= '0' && ch <= '9'))
		return parse_number(p);
	if (ch == 't')
		return parse_word(p, "true", JV_TRUE);
	if (ch == 'f')
		return parse_word(p, "false", JV_FALSE);
	if (ch == 'n')
		return parse_word(p, "null", JV_NULL);
	jp_fail(p, "an unexpected character");
	return NULL;
}

struct jv *jv_parse(struct gr_ctx *c, const char *text, size_t len)
{
	struct jp p = { .c = c, .s = text, .len = len,
			.max_depth = c->lim.max_depth > UINT32_MAX / 4 ? UINT32_MAX
				     : c->lim.max_depth * 4 };
	struct jv *v = parse_value(&p);
	if (!v)
		return NULL;
	skip_ws(&p);
	if (p.pos < p.len) {
		jp_fail(&p, "text after the value");
		return NULL;
	}
	return v;
}

/* ------------------------------------------------------------------------------------------ */
/* Reading                                                                                    */
/* ------------------------------------------------------------------------------------------ */

const struct jv *jv_getn(const struct jv *obj, const char *key, size_t n)
{
	if (!obj || obj->kind != JV_OBJECT)
		return NULL;
	for (uint32_t i = 0; i < obj->n; i++)
		if (obj->klen[i] == n && !memcmp(obj->k[i], key, n))
			return obj->v[i];
	return NULL;
}

const struct jv *jv_get(const struct jv *obj, const char *key)
{
	return jv_getn(obj, key, strlen(key));
}

int jv_decimal_cmp(const struct jv_decimal *a, const struct jv_decimal *b)
{
	int a_zero = a->digits[0] == '0', b_zero = b->digits[0] == '0';
	int sa = a_zero ? 0 : a->neg ? -1 : 1, sb = b_zero ? 0 : b->neg ? -1 : 1;
	if (sa != sb || sa == 0)
		return sa < sb ? -1 : sa > sb;
	/* Same sign: the position of the leading digit decides, then the digits. */
	int64_t ta = a->exp + a->n, tb = b->exp + b->n;
	if (ta != tb)
		return ta < tb ? -sa : sa;
	uint32_t n = a->n > b->n ? a->n : b->n;
	for (uint32_t i = 0; i < n; i++) {
		char x = i < a->n ? a->digits[i] : '0', y = i < b->n ? b->digits[i] : '0';
		if (x != y)
			return x < y ? -sa : sa;
	}
	return 0;
}

int jv_is_integral(const struct jv *num)
{
	return num->dec.exp >= 0;
}

int jv_equal(const struct jv *a, const struct jv *b)
{
	if (a->kind != b->kind)
		return 0;
	switch (a->kind) {
	case JV_NUMBER:
		return jv_decimal_cmp(&a->dec, &b->dec) == 0;
	case JV_STRING:
		return a->n == b->n && !memcmp(a->s, b->s, a->n);
	case JV_ARRAY:
		if (a->n != b->n)
			return 0;
		for (uint32_t i = 0; i < a->n; i++)
			if (!jv_equal(a->v[i], b->v[i]))
				return 0;
		return 1;
	case JV_OBJECT:
		if (a->n != b->n)
			return 0;
		for (uint32_t i = 0; i < a->n; i++) {
			const struct jv *w = jv_getn(b, a->k[i], a->klen[i]);
			if (!w || !jv_equal(a->v[i], w))
				return 0;
		}
		return 1;
	}
	return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Writing                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Writes s[0..n) as a JSON string into out (NULL: only counts); returns the bytes. */
static size_t write_string(char *out, const char *s, uint32_t n)
{
	size_t w = 0;
	if (out)
		out[w] = '"';
	w++;
	for (uint32_t i = 0; i < n; i++) {
		uint8_t b = (uint8_t)s[i];
		char esc[8] = "";
		switch (b) {
		case '"': strcpy(esc, "\\\""); break;
		case '\\': strcpy(esc, "\\\\"); break;
		case '\b': strcpy(esc, "\\b"); break;
		case '\f': strcpy(esc, "\\f"); break;
		case '\n': strcpy(esc, "\\n"); break;
		case '\r': strcpy(esc, "\\r"); break;
		case '\t': strcpy(esc, "\\t"); break;
		default:
			if (b < 0x20)
				snprintf(esc, sizeof(esc), "\\u%04x", b);
		}
		size_t k = esc[0] ? strlen(esc) : 1;
		if (out)
			memcpy(out + w, esc[0] ? esc : (const char *)&s[i], k);
		w += k;
	}
	if (out)
		out[w] = '"';
	return w + 1;
}

static size_t write_value(char *out, const struct jv *v)
{
	static const char *const words[] = { "null", "false", "true" };
	size_t w = 0;
	switch (v->kind) {
	case JV_NULL: case JV_FALSE: case JV_TRUE:
		w = strlen(words[v->kind]);
		if (out)
			memcpy(out, words[v->kind], w);
		return w;
	case JV_NUMBER:
		if (out)
			memcpy(out, v->s, v->n);
		return v->n;
	case JV_STRING:
		return write_string(out, v->s, v->n);
	}
	int obj = v->kind == JV_OBJECT;
	if (out)
		out[w] = obj ? '{' : '[';
	w++;
	for (uint32_t i = 0; i < v->n; i++) {
		if (i) {
			if (out)
				out[w] = ',';
			w++;
		}
		if (obj) {
			w += write_string(out ? out + w : NULL, v->k[i], v->klen[i]);
			if (out)
				out[w] = ':';
			w++;
		}
		w += write_value(out ? out + w : NULL, v->v[i]);
	}
	if (out)
		out[w] = obj ? '}' : ']';
	return w + 1;
}

char *jv_write(struct gr_ctx *c, const struct jv *v, size_t *len)
{
	size_t n = write_value(NULL, v);
	char *out = gr_alloc(c, n + 1);
	if (!out)
		return NULL;
	write_value(out, v);
	*len = n;
	return out;
}
