/* SPDX-License-Identifier: MIT */
/*
 * gbnf.c — llama.cpp's GBNF (frontends.h), read as llama.cpp's grammar parser reads it:
 * `name ::= alternatives`, one rule per line (newlines allowed inside parentheses and after
 * `|`), `#` comments, string literals and character classes of code points (escapes \xHH
 * \uHHHH \UHHHHHHHH \t \r \n \\ \" \[ \] \-), `.` for any character, groups, `* + ?` and
 * `{m} {m,} {m,n} {,n}`, rule names of letters, digits, `-` and `_`. The output starts at rule
 * `root`. Token references (`<...>`, `!<...>`) are refused: this engine works on the output's
 * bytes, whatever tokens spell them. A rule defined twice is refused, not overwritten.
 */
#include "frontends.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct parser {
	struct gr_ctx *c;
	const char *s;
	size_t pos, len;
	uint32_t depth;
	/* Rule names to indexes: open addressing over the context's rules, index + 1. */
	uint32_t *names;
	uint32_t names_mask;
};

static int fail_code(struct parser *p, size_t at, int code, const char *what)
{
	uint32_t line = 1, col = 1;
	for (size_t i = 0; i < at && i < p->len; i++) {
		if (p->s[i] == '\n')
			line++, col = 1;
		else
			col++;
	}
	return gr_fail(p->c, code, "GBNF line %u, column %u: %s", line, col, what);
}

static int fail_at(struct parser *p, size_t at, const char *what)
{
	return fail_code(p, at, -EINVAL, what);
}

static int peek(const struct parser *p, size_t ahead)
{
	return p->pos + ahead < p->len ? (unsigned char)p->s[p->pos + ahead] : -1;
}

static void skip_space(struct parser *p, int newlines)
{
	while (p->pos < p->len) {
		char ch = p->s[p->pos];
		if (ch == '#') {
			while (p->pos < p->len && p->s[p->pos] != '\n' && p->s[p->pos] != '\r')
				p->pos++;
		} else if (ch == ' ' || ch == '\t' || (newlines && (ch == '\n' || ch == '\r'))) {
			p->pos++;
		} else {
			break;
		}
	}
}

static int is_name_char(int ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '-' || ch == '_';
}

static uint32_t name_hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h;
}

/* The rule named s[0..n), made (undefined) on first sight. Returns its index or -1. */
static int64_t rule_named(struct parser *p, const char *s, size_t n)
{
	uint32_t at = name_hash(s, n) & p->names_mask;
	for (; p->names[at]; at = (at + 1) & p->names_mask) {
		const char *name = p->c->rules[p->names[at] - 1].name;
		if (strlen(name) == n && !memcmp(name, s, n))
			return p->names[at] - 1;
	}
	char buf[128];
	if (n >= sizeof(buf))
		return fail_at(p, (size_t)(s - p->s), "a rule name longer than 127 characters");
	memcpy(buf, s, n);
	buf[n] = 0;
	int64_t r = gr_rule_new(p->c, buf);
	if (r >= 0)
		p->names[at] = (uint32_t)r + 1;
	return r;
}

static int hex_value(struct parser *p, size_t at, uint32_t digits, uint32_t *out)
{
	uint32_t v = 0;
	for (uint32_t i = 0; i < digits; i++) {
		int ch = at + i < p->len ? (unsigned char)p->s[at + i] : -1;
		int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
			: ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
		if (d < 0) {
			char msg[64];
			snprintf(msg, sizeof(msg), "expected %u hexadecimal digits", digits);
			return fail_at(p, at, msg);
		}
		v = v << 4 | (uint32_t)d;
	}
	*out = v;
	return 0;
}

/* One character of a literal or class: an escape or a UTF-8 character. */
static int parse_char(struct parser *p, uint32_t *cp)
{
	size_t at = p->pos;
	if (p->pos >= p->len)
		return fail_at(p, at, "unexpected end of the grammar");
	if (p->s[p->pos] != '\\') {
		uint32_t n;
		int32_t v = gr_utf8_decode((const uint8_t *)p->s + p->pos, p->len - p->pos, &n);
		if (v < 0)
			return fail_at(p, at, "invalid UTF-8");
		*cp = (uint32_t)v;
		p->pos += n;
		return 0;
	}
	int e = peek(p, 1);
	uint32_t digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
	if (digits) {
		if (hex_value(p, p->pos + 2, digits, cp))
			return -1;
		p->pos += 2 + digits;
		if (*cp > GR_MAX_CP || (*cp >= 0xD800 && *cp <= 0xDFFF))
			return fail_at(p, at, "the escape is not a Unicode scalar value");
		return 0;
	}
	switch (e) {
	case 't': *cp = '\t'; break;
	case 'r': *cp = '\r'; break;
	case 'n': *cp = '\n'; break;
	case '\\': case '"': case '[': case ']': case '-':
		*cp = (uint32_t)e;
		break;
	default:
		return fail_at(p, at, "unknown escape");
	}
	p->pos += 2;
	return 0;
}

static struct ir_node *parse_literal(struct parser *p)
{
	struct ir_list seq = { 0 };
	size_t at = p->pos++; /* '"' */
	while (peek(p, 0) != '"') {
		uint32_t cp;
		if (peek(p, 0) < 0 || peek(p, 0) == '\n') {
			fail_at(p, at, "a string literal is not closed on its line");
			return NULL;
		}
		if (parse_char(p, &cp) || ir_list_push(p->c, &seq, ir_codepoint(p->c, cp, GR_TEXT_RAW)))
			return NULL;
	}
	p->pos++;
	return ir_seq(p->c, seq.n, seq.v);
}

static struct ir_node *parse_class(struct parser *p)
{
	struct gr_cpset set = { 0 };
	int negate = 0;
	size_t at = p->pos++; /* '[' */
	if (peek(p, 0) == '^') {
		negate = 1;
		p->pos++;
	}
	while (peek(p, 0) != ']') {
		uint32_t lo, hi;
		if (peek(p, 0) < 0 || peek(p, 0) == '\n') {
			fail_at(p, at, "a character class is not closed on its line");
			return NULL;
		}
		if (parse_char(p, &lo))
			return NULL;
		hi = lo;
		if (peek(p, 0) == '-' && peek(p, 1) != ']' && peek(p, 1) >= 0) {
			size_t dash = p->pos;
			p->pos++;
			if (parse_char(p, &hi))
				return NULL;
			if (hi < lo) {
				fail_at(p, dash, "a character range is out of order");
				return NULL;
			}
		}
		if (gr_cpset_add(p->c, &set, lo, hi))
			return NULL;
	}
	p->pos++;
	gr_cpset_normalize(&set);
	if (negate && gr_cpset_negate(p->c, &set))
		return NULL;
	return ir_cpset(p->c, &set, GR_TEXT_RAW);
}

static int parse_count(struct parser *p, uint32_t *v)
{
	size_t at = p->pos;
	uint64_t n = 0;
	if (peek(p, 0) < '0' || peek(p, 0) > '9')
		return fail_at(p, at, "expected a number");
	while (peek(p, 0) >= '0' && peek(p, 0) <= '9') {
		n = n * 10 + (uint64_t)(p->s[p->pos++] - '0');
		if (n > p->c->lim.max_repeat) {
			char msg[96];
			snprintf(msg, sizeof(msg), "a repetition count over the limit of %u",
				 p->c->lim.max_repeat);
			return fail_code(p, at, -E2BIG, msg);
		}
	}
	*v = (uint32_t)n;
	return 0;
}

/* `{m}`, `{m,}`, `{m,n}` or `{,n}`. */
static int parse_braces(struct parser *p, int nested, uint32_t *min, uint32_t *max)
{
	size_t at = p->pos;
	p->pos++;
	skip_space(p, nested);
	*min = 0;
	if (peek(p, 0) != ',' && parse_count(p, min))
		return -1;
	skip_space(p, nested);
	*max = *min;
	if (peek(p, 0) == ',') {
		p->pos++;
		skip_space(p, nested);
		*max = GR_INF;
		if (peek(p, 0) >= '0' && peek(p, 0) <= '9' && parse_count(p, max))
			return -1;
		skip_space(p, nested);
	}
	if (peek(p, 0) != '}')
		return fail_at(p, p->pos, "expected '}'");
	p->pos++;
	if (*max < *min)
		return fail_at(p, at, "a repetition's maximum is below its minimum");
	return 0;
}

static struct ir_node *parse_alternates(struct parser *p, int nested);

static struct ir_node *parse_primary(struct parser *p)
{
	int ch = peek(p, 0);
	if (ch == '"')
		return parse_literal(p);
	if (ch == '[')
		return parse_class(p);
	if (ch == '.') {
		p->pos++;
		return ir_any_char_except(p->c, NULL, 0, GR_TEXT_RAW);
	}
	if (ch == '(') {
		size_t at = p->pos;
		if (++p->depth > p->c->lim.max_depth) {
			fail_code(p, at, -E2BIG, "groups nest deeper than the limit");
			return NULL;
		}
		p->pos++;
		skip_space(p, 1);
		struct ir_node *x = parse_alternates(p, 1);
		if (!x)
			return NULL;
		if (peek(p, 0) != ')') {
			fail_at(p, p->pos, "expected ')'");
			return NULL;
		}
		p->pos++;
		p->depth--;
		return x;
	}
	if (ch == '<' || (ch == '!' && peek(p, 1) == '<')) {
		fail_at(p, p->pos, "token references (<...>) are not supported: the grammar "
			"constrains the output's bytes, whatever tokens spell them");
		return NULL;
	}
	size_t start = p->pos;
	while (is_name_char(peek(p, 0)))
		p->pos++;
	if (p->pos == start) {
		fail_at(p, start, "unexpected character");
		return NULL;
	}
	int64_t r = rule_named(p, p->s + start, p->pos - start);
	return r < 0 ? NULL : ir_call(p->c, (uint32_t)r);
}

static int starts_item(int ch)
{
	return ch == '"' || ch == '[' || ch == '.' || ch == '(' || ch == '<' || ch == '!' ||
	       is_name_char(ch);
}

static struct ir_node *parse_sequence(struct parser *p, int nested)
{
	struct ir_list seq = { 0 };
	while (starts_item(peek(p, 0))) {
		struct ir_node *x = parse_primary(p);
		if (!x)
			return NULL;
		skip_space(p, nested);
		for (;;) {
			int ch = peek(p, 0);
			uint32_t min, max;
			if (ch == '*')
				min = 0, max = GR_INF, p->pos++;
			else if (ch == '+')
				min = 1, max = GR_INF, p->pos++;
			else if (ch == '?')
				min = 0, max = 1, p->pos++;
			else if (ch == '{') {
				if (parse_braces(p, nested, &min, &max))
					return NULL;
			} else
				break;
			if (!(x = ir_repeat(p->c, x, min, max)))
				return NULL;
			skip_space(p, nested);
		}
		if (ir_list_push(p->c, &seq, x))
			return NULL;
	}
	return ir_seq(p->c, seq.n, seq.v);
}

static struct ir_node *parse_alternates(struct parser *p, int nested)
{
	struct ir_list alts = { 0 };
	if (ir_list_push(p->c, &alts, parse_sequence(p, nested)))
		return NULL;
	while (peek(p, 0) == '|') {
		p->pos++;
		skip_space(p, 1);
		if (ir_list_push(p->c, &alts, parse_sequence(p, nested)))
			return NULL;
	}
	return ir_alt(p->c, alts.n, alts.v);
}

static int parse_rule(struct parser *p)
{
	size_t start = p->pos;
	while (is_name_char(peek(p, 0)))
		p->pos++;
	if (p->pos == start)
		return fail_at(p, start, "expected a rule name");
	int64_t r = rule_named(p, p->s + start, p->pos - start);
	if (r < 0)
		return -1;
	if (p->c->rules[r].body)
		return fail_at(p, start, "this rule is defined twice");
	skip_space(p, 0);
	if (p->pos + 3 > p->len || memcmp(p->s + p->pos, "::=", 3))
		return fail_at(p, p->pos, "expected \"::=\"");
	p->pos += 3;
	skip_space(p, 1);
	struct ir_node *body = parse_alternates(p, 0);
	if (!body)
		return -1;
	p->c->rules[r].body = body;
	if (peek(p, 0) == '\r')
		p->pos++;
	if (peek(p, 0) == '\n')
		p->pos++;
	else if (p->pos < p->len)
		return fail_at(p, p->pos, "expected the end of the line");
	skip_space(p, 1);
	return gr_tick(p->c);
}

int gr_gbnf(struct gr_ctx *c, const char *text, size_t len)
{
	struct parser p = { .c = c, .s = text, .len = len };
	p.names_mask = 1;
	while (p.names_mask + 1 < c->lim.max_rules * 2)
		p.names_mask = p.names_mask * 2 + 1;
	p.names = gr_alloc(c, (p.names_mask + 1) * sizeof(uint32_t));
	if (!p.names)
		return -1;
	skip_space(&p, 1);
	while (p.pos < p.len)
		if (parse_rule(&p))
			return -1;
	for (uint32_t r = 0; r < c->n_rules; r++)
		if (!c->rules[r].body)
			return gr_fail(c, -EINVAL, "GBNF: rule \"%s\" is used but never defined",
				       c->rules[r].name);
	int64_t root = rule_named(&p, "root", 4);
	if (root < 0)
		return -1;
	if (!c->rules[root].body)
		return gr_fail(c, -EINVAL, "GBNF: the grammar has no rule \"root\"");
	c->root = (uint32_t)root;
	return 0;
}
