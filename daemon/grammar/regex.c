/* SPDX-License-Identifier: MIT */
/*
 * regex.c — regular expressions (frontends.h), a PCRE-like dialect (README.md): literals and
 * escapes (\n \r \t \f \v \a \e \0 \xHH \x{H..} \uHHHH \u{H..} \cX, escaped punctuation),
 * classes [...] with ranges and negation, . \d \w \s \h and their negations, \p{..}/\P{..}
 * (Unicode properties through PCRE2), POSIX [:name:] inside classes (whole-output form only),
 * groups ( ) (?: ) (?<name> ) (?P<name> ), alternation, * + ? {n} {n,} {n,m} {,m} (lazy `?`
 * allowed: same language). ^ \A at the start and $ \z \Z at the end of a top-level alternative.
 *
 * Classes mean what every common engine agrees on, so an output is valid whichever one checks
 * it (PCRE2, ECMAScript for JSON Schema, Python's re): a positive \d, \w, \s or . is the ASCII
 * (smallest) reading, a negated one (\D, [^\d]) the complement of the Unicode (largest) one.
 * Refused with the construct named: backreferences, lookaround, atomic groups, possessive
 * quantifiers, \b \B \G \K \R \X \Q, inline flags, recursion, anchors elsewhere.
 */
#include "frontends.h"
#include "unicode.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct rx {
	struct gr_ctx *c;
	const char *s;
	size_t pos, len;
	enum gr_text_mode mode;
	int search;            /* JSON Schema semantics: anywhere, anchors as marks, ECMAScript */
	int wide;              /* the widest reading (frontends.h) */
	uint32_t depth;
	const char *where;
};

static int fail_rx(struct rx *r, size_t at, const char *what)
{
	return gr_fail(r->c, -EINVAL, "%s, column %zu: %s", r->where, at + 1, what);
}

static int peek(const struct rx *r, size_t ahead)
{
	return r->pos + ahead < r->len ? (unsigned char)r->s[r->pos + ahead] : -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Character classes                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* A class escape's two readings: the smallest (used where it adds characters) and the largest
 * (used where it takes them away, inside a negated class). */
struct two_sets {
	struct gr_cpset min, max;
};

static int add_ranges(struct gr_ctx *c, struct gr_cpset *s, const uint32_t (*r)[2], size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (gr_cpset_add(c, s, r[i][0], r[i][1]))
			return -1;
	return 0;
}

static int digit_sets(struct gr_ctx *c, struct two_sets *t)
{
	static const uint32_t ascii[][2] = { { '0', '9' } };
	return add_ranges(c, &t->min, ascii, 1) || gr_unicode_property(c, "Nd", 2, &t->max) ||
	       add_ranges(c, &t->max, ascii, 1);
}

static int word_sets(struct gr_ctx *c, struct two_sets *t)
{
	static const uint32_t ascii[][2] = { { '0', '9' }, { 'A', 'Z' }, { '_', '_' }, { 'a', 'z' } };
	return add_ranges(c, &t->min, ascii, 4) || add_ranges(c, &t->max, ascii, 4) ||
	       gr_unicode_property(c, "L", 1, &t->max) || gr_unicode_property(c, "N", 1, &t->max) ||
	       gr_unicode_property(c, "M", 1, &t->max) || gr_unicode_property(c, "Pc", 2, &t->max);
}

static int space_sets(struct gr_ctx *c, struct two_sets *t)
{
	static const uint32_t ascii[][2] = { { '\t', '\r' }, { ' ', ' ' } };
	static const uint32_t more[][2] = {
		{ 0x1C, 0x1F }, { 0x85, 0x85 }, { 0xA0, 0xA0 }, { 0x1680, 0x1680 },
		{ 0x180E, 0x180E }, { 0x2000, 0x200A }, { 0x2028, 0x2029 }, { 0x202F, 0x202F },
		{ 0x205F, 0x205F }, { 0x3000, 0x3000 }, { 0xFEFF, 0xFEFF },
	};
	return add_ranges(c, &t->min, ascii, 2) || add_ranges(c, &t->max, ascii, 2) ||
	       add_ranges(c, &t->max, more, sizeof(more) / sizeof(more[0]));
}

static int hspace_sets(struct gr_ctx *c, struct two_sets *t)
{
	static const uint32_t ascii[][2] = { { '\t', '\t' }, { ' ', ' ' } };
	static const uint32_t more[][2] = {
		{ 0xA0, 0xA0 }, { 0x1680, 0x1680 }, { 0x180E, 0x180E }, { 0x2000, 0x200A },
		{ 0x202F, 0x202F }, { 0x205F, 0x205F }, { 0x3000, 0x3000 },
	};
	return add_ranges(c, &t->min, ascii, 2) || add_ranges(c, &t->max, ascii, 2) ||
	       add_ranges(c, &t->max, more, sizeof(more) / sizeof(more[0]));
}

/* \v: ECMAScript's vertical tab, PCRE's vertical whitespace. */
static int vspace_sets(struct gr_ctx *c, struct two_sets *t)
{
	static const uint32_t tab[][2] = { { 0x0B, 0x0B } };
	static const uint32_t all[][2] = { { '\n', '\r' }, { 0x85, 0x85 }, { 0x2028, 0x2029 } };
	return add_ranges(c, &t->min, tab, 1) || add_ranges(c, &t->max, all, 3);
}

/* Both readings negated: the smallest of the negation is the complement of the largest. */
static int negate_sets(struct gr_ctx *c, struct two_sets *t)
{
	gr_cpset_normalize(&t->min);
	gr_cpset_normalize(&t->max);
	struct gr_cpset old_min = t->min;
	t->min = t->max;
	t->max = old_min;
	return gr_cpset_negate(c, &t->min) || gr_cpset_negate(c, &t->max);
}

static int posix_sets(struct rx *r, struct two_sets *t)
{
	static const struct {
		const char *name;
		uint32_t n;
		uint32_t r[4][2];
	} posix[] = {
		{ "alpha", 2, { { 'A', 'Z' }, { 'a', 'z' } } },
		{ "digit", 1, { { '0', '9' } } },
		{ "alnum", 3, { { '0', '9' }, { 'A', 'Z' }, { 'a', 'z' } } },
		{ "upper", 1, { { 'A', 'Z' } } },
		{ "lower", 1, { { 'a', 'z' } } },
		{ "space", 2, { { '\t', '\r' }, { ' ', ' ' } } },
		{ "blank", 2, { { '\t', '\t' }, { ' ', ' ' } } },
		{ "punct", 4, { { '!', '/' }, { ':', '@' }, { '[', '`' }, { '{', '~' } } },
		{ "xdigit", 3, { { '0', '9' }, { 'A', 'F' }, { 'a', 'f' } } },
		{ "word", 4, { { '0', '9' }, { 'A', 'Z' }, { '_', '_' }, { 'a', 'z' } } },
		{ "cntrl", 2, { { 0, 0x1F }, { 0x7F, 0x7F } } },
		{ "graph", 1, { { '!', '~' } } },
		{ "print", 1, { { ' ', '~' } } },
	};
	size_t at = r->pos, end = at + 2;
	while (end < r->len && r->s[end] != ':')
		end++;
	if (end + 1 >= r->len || r->s[end + 1] != ']')
		return fail_rx(r, at, "a POSIX class [:name:] is not closed");
	if (r->search)
		return fail_rx(r, at, "POSIX classes [:name:] are not ECMAScript: not supported in "
			       "a JSON Schema pattern");
	for (size_t i = 0; i < sizeof(posix) / sizeof(posix[0]); i++) {
		if (strlen(posix[i].name) != end - at - 2 ||
		    memcmp(posix[i].name, r->s + at + 2, end - at - 2))
			continue;
		if (add_ranges(r->c, &t->min, posix[i].r, posix[i].n) ||
		    add_ranges(r->c, &t->max, posix[i].r, posix[i].n))
			return -1;
		r->pos = end + 2;
		return 0;
	}
	return fail_rx(r, at, "unknown POSIX class");
}

/* ------------------------------------------------------------------------------------------ */
/* Escapes                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static int hex_run(struct rx *r, size_t at, size_t n, uint32_t *out)
{
	uint32_t v = 0;
	for (size_t i = 0; i < n; i++) {
		int ch = at + i < r->len ? (unsigned char)r->s[at + i] : -1;
		int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
			: ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
		if (d < 0 || v > 0x10FFFF)
			return fail_rx(r, at, "expected hexadecimal digits");
		v = v << 4 | (uint32_t)d;
	}
	*out = v;
	return 0;
}

/* \x{...} or \u{...}: digits up to '}'. */
static int hex_braced(struct rx *r, uint32_t *cp)
{
	size_t start = r->pos, end = start;
	while (end < r->len && r->s[end] != '}')
		end++;
	if (end >= r->len || end == start || end - start > 8)
		return fail_rx(r, start, "a braced hexadecimal escape is not closed");
	if (hex_run(r, start, end - start, cp))
		return -1;
	r->pos = end + 1;
	return 0;
}

enum escape_kind { ESC_CHAR, ESC_CLASS, ESC_START, ESC_END };

static int escape_char(struct rx *r, int e, size_t at, uint32_t *cp)
{
	switch (e) {
	case 'n': *cp = '\n'; return 0;
	case 'r': *cp = '\r'; return 0;
	case 't': *cp = '\t'; return 0;
	case 'f': *cp = '\f'; return 0;
	case 'a': *cp = 0x07; return 0;
	case 'e': *cp = 0x1B; return 0;
	case '0':
		/* \012 is an octal escape in PCRE, ECMAScript and Python alike */
		if (peek(r, 0) >= '0' && peek(r, 0) <= '9')
			return fail_rx(r, at, "octal escapes (\\0 and digits) are not supported");
		*cp = 0;
		return 0;
	case 'c': {
		int ch = peek(r, 0);
		if (ch < 0x40 || ch > 0x7E)
			return fail_rx(r, at, "\\c needs a letter");
		r->pos++;
		*cp = (uint32_t)(ch & 0x1F);
		return 0;
	}
	case 'x':
		if (peek(r, 0) == '{')
			return r->pos++, hex_braced(r, cp);
		if (hex_run(r, r->pos, 2, cp))
			return -1;
		r->pos += 2;
		return 0;
	case 'u':
		if (peek(r, 0) == '{')
			return r->pos++, hex_braced(r, cp);
		if (hex_run(r, r->pos, 4, cp))
			return -1;
		r->pos += 4;
		return 0;
	}
	return 1; /* not a character escape */
}

static const char *refused_escape(int e)
{
	switch (e) {
	case 'b': case 'B': return "word boundaries (\\b, \\B) are not supported";
	case 'G': return "\\G is not supported";
	case 'K': return "\\K is not supported";
	case 'R': return "\\R is not supported";
	case 'X': return "\\X (grapheme clusters) is not supported";
	case 'N': return "\\N is not supported";
	case 'Q': case 'E': return "\\Q...\\E quoting is not supported";
	case 'g': case 'k': return "backreferences are not supported";
	case 'C': return "\\C is not supported";
	}
	if (e >= '1' && e <= '9')
		return "backreferences are not supported";
	return NULL;
}

/* In a JSON Schema pattern (ECMAScript's dialect): escapes that are other dialects' and read
 * differently there or by Python's re (which validators use), refused rather than guessed. */
static const char *not_ecmascript(int e, int next)
{
	switch (e) {
	case 'A': case 'z': case 'Z':
		return "\\A, \\z and \\Z are anchors in PCRE and Python but letters in ECMAScript: "
		       "not supported in a JSON Schema pattern (use ^ and $)";
	case 'h': case 'H': case 'e': case 'a':
		return "\\h, \\e and \\a are not ECMAScript escapes: not supported in a JSON Schema "
		       "pattern";
	case 'x':
		return next == '{' ? "\\x{...} is not ECMAScript: not supported in a JSON Schema "
				     "pattern (use \\uHHHH)" : NULL;
	case 'u':
		return next == '{' ? "\\u{...} needs ECMAScript's u flag and is not Python's: not "
				     "supported in a JSON Schema pattern (use \\uHHHH)" : NULL;
	case 'p': case 'P':
		return next == '{' ? NULL : "\\p needs braces in ECMAScript (\\p{L})";
	}
	return NULL;
}

/* An escape after the backslash at r->pos - 1: a character, a class, or an anchor. */
static int parse_escape(struct rx *r, enum escape_kind *kind, uint32_t *cp, struct two_sets *t)
{
	size_t at = r->pos - 1;
	int e = peek(r, 0);
	if (e < 0)
		return fail_rx(r, at, "the pattern ends with a backslash");
	r->pos++;
	const char *refused = refused_escape(e);
	if (!refused && r->search)
		refused = not_ecmascript(e, peek(r, 0));
	if (refused)
		return fail_rx(r, at, refused);
	int rc = escape_char(r, e, at, cp);
	if (rc <= 0) {
		*kind = ESC_CHAR;
		if (rc == 0 && (*cp > GR_MAX_CP || (*cp >= 0xD800 && *cp <= 0xDFFF)))
			return fail_rx(r, at, "the escape is not a Unicode scalar value");
		return rc;
	}
	*kind = ESC_CLASS;
	switch (e) {
	case 'd': return digit_sets(r->c, t);
	case 'D': return digit_sets(r->c, t) || negate_sets(r->c, t);
	case 'w': return word_sets(r->c, t);
	case 'W': return word_sets(r->c, t) || negate_sets(r->c, t);
	case 's': return space_sets(r->c, t);
	case 'S': return space_sets(r->c, t) || negate_sets(r->c, t);
	case 'h': return hspace_sets(r->c, t);
	case 'H': return hspace_sets(r->c, t) || negate_sets(r->c, t);
	case 'v': return vspace_sets(r->c, t);
	case 'V': return vspace_sets(r->c, t) || negate_sets(r->c, t);
	case 'p':
	case 'P': {
		size_t name = r->pos, n = 1;
		if (peek(r, 0) == '{') {
			name = r->pos + 1;
			while (name + n - 1 < r->len && r->s[name + n - 1] != '}')
				n++;
			if (name + n - 1 >= r->len)
				return fail_rx(r, at, "\\p{ is not closed");
			n--;
			r->pos = name + n + 1;
		} else {
			if (peek(r, 0) < 0)
				return fail_rx(r, at, "\\p needs a property");
			r->pos++;
		}
		int neg = e == 'P';
		if (n > 0 && r->s[name] == '^')
			neg = !neg, name++, n--;
		if (gr_unicode_property(r->c, r->s + name, n, &t->min) ||
		    gr_unicode_property(r->c, r->s + name, n, &t->max))
			return -1;
		return neg ? negate_sets(r->c, t) : 0;
	}
	case 'A':
		*kind = ESC_START;
		return 0;
	case 'z':
	case 'Z':
		*kind = ESC_END;
		return 0;
	}
	if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9') || e >= 0x80)
		return fail_rx(r, at, "unknown escape");
	*kind = ESC_CHAR;
	*cp = (uint32_t)e; /* escaped punctuation is itself */
	return 0;
}

static int next_char(struct rx *r, uint32_t *cp)
{
	uint32_t n;
	int32_t v = gr_utf8_decode((const uint8_t *)r->s + r->pos, r->len - r->pos, &n);
	if (v < 0)
		return fail_rx(r, r->pos, "invalid UTF-8");
	*cp = (uint32_t)v;
	r->pos += n;
	return 0;
}

/* One item of a class: a character (is_char) or a set (into t). */
static int class_item(struct rx *r, int *is_char, uint32_t *cp, struct two_sets *t)
{
	*is_char = 1;
	if (peek(r, 0) == '[' && peek(r, 1) == ':') {
		*is_char = 0;
		return posix_sets(r, t);
	}
	if (peek(r, 0) != '\\')
		return next_char(r, cp);
	r->pos++;
	enum escape_kind kind;
	if (peek(r, 0) == 'b') { /* inside a class, \b is a backspace */
		r->pos++;
		*cp = 0x08;
		return 0;
	}
	if (parse_escape(r, &kind, cp, t))
		return -1;
	if (kind == ESC_START || kind == ESC_END)
		return fail_rx(r, r->pos - 2, "an anchor escape inside a class");
	*is_char = kind == ESC_CHAR;
	return 0;
}

static struct ir_node *parse_class(struct rx *r)
{
	size_t at = r->pos;
	r->pos++; /* '[' */
	int negated = peek(r, 0) == '^';
	if (negated)
		r->pos++;
	if (r->search && peek(r, 0) == ']') {
		fail_rx(r, at, "an empty class [] or [^] (ECMAScript: nothing or anything; PCRE and "
			"Python: ']' is a member) is not supported in a JSON Schema pattern");
		return NULL;
	}
	struct gr_cpset set = { 0 };
	for (int first = 1; first || peek(r, 0) != ']'; first = 0) {
		if (peek(r, 0) < 0) {
			fail_rx(r, at, "a class [...] is not closed");
			return NULL;
		}
		struct two_sets t = { { 0 }, { 0 } };
		int is_char;
		uint32_t lo, hi;
		if (class_item(r, &is_char, &lo, &t))
			return NULL;
		if (!is_char) {
			/* Inside a negated class a set takes characters away: the narrow reading
			 * takes the most, the wide one the fewest. */
			if (gr_cpset_add_set(r->c, &set, negated != r->wide ? &t.max : &t.min))
				return NULL;
			continue;
		}
		hi = lo;
		if (peek(r, 0) == '-' && peek(r, 1) != ']' && peek(r, 1) >= 0) {
			size_t dash = r->pos++;
			struct two_sets u = { { 0 }, { 0 } };
			if (class_item(r, &is_char, &hi, &u))
				return NULL;
			if (!is_char) {
				fail_rx(r, dash, "a range ends in a class escape");
				return NULL;
			}
			if (hi < lo) {
				fail_rx(r, dash, "a range is out of order");
				return NULL;
			}
		}
		if (gr_cpset_add(r->c, &set, lo, hi))
			return NULL;
	}
	r->pos++;
	gr_cpset_normalize(&set);
	if (negated && gr_cpset_negate(r->c, &set))
		return NULL;
	return ir_cpset(r->c, &set, r->mode);
}

/* ------------------------------------------------------------------------------------------ */
/* Structure                                                                                  */
/* ------------------------------------------------------------------------------------------ */

static struct ir_node *dot(struct rx *r)
{
	/* ECMAScript's dot leaves out four line ends, Python's only the line feed. */
	static const uint32_t line_ends[] = { '\n', '\r', 0x2028, 0x2029 };
	return ir_any_char_except(r->c, line_ends, r->wide ? 1 : 4, r->mode);
}

static struct ir_node *parse_alternation(struct rx *r, int top);

static const char *refused_group(const char *p, size_t n)
{
	if (n >= 1 && (p[0] == '=' || p[0] == '!'))
		return "lookahead (?= (?! is not supported";
	if (n >= 2 && p[0] == '<' && (p[1] == '=' || p[1] == '!'))
		return "lookbehind (?<= (?<! is not supported";
	if (n >= 1 && p[0] == '>')
		return "atomic groups (?> are not supported";
	if (n >= 1 && (p[0] == 'R' || (p[0] >= '0' && p[0] <= '9') || p[0] == '&' || p[0] == '+'))
		return "recursion (?R) is not supported";
	if (n >= 1 && p[0] == '#')
		return "comments (?# are not supported";
	return "inline flags and other (? groups are not supported";
}

static struct ir_node *parse_group(struct rx *r)
{
	size_t at = r->pos;
	if (++r->depth > r->c->lim.max_depth) {
		gr_fail(r->c, -E2BIG, "%s, column %zu: groups nest deeper than %u (the limit)",
			r->where, at + 1, r->c->lim.max_depth);
		return NULL;
	}
	r->pos++; /* '(' */
	if (peek(r, 0) == '?') {
		const char *p = r->s + r->pos + 1;
		size_t n = r->len - r->pos - 1;
		if (r->search && ((n >= 1 && (p[0] == '|' || p[0] == '\'')) ||
				  (n >= 2 && p[0] == 'P' && p[1] == '<'))) {
			fail_rx(r, at, "(?P<name> (?'name' and (?| are not ECMAScript: not supported in "
				"a JSON Schema pattern");
			return NULL;
		}
		if (n >= 1 && (p[0] == ':' || p[0] == '|')) {
			r->pos += 2;
		} else if ((n >= 2 && p[0] == '<' && p[1] != '=' && p[1] != '!') ||
			   (n >= 2 && p[0] == 'P' && p[1] == '<') || (n >= 1 && p[0] == '\'')) {
			char close = p[0] == '\'' ? '\'' : '>';
			while (r->pos < r->len && r->s[r->pos] != close)
				r->pos++;
			if (r->pos >= r->len) {
				fail_rx(r, at, "a group name is not closed");
				return NULL;
			}
			r->pos++;
		} else {
			fail_rx(r, at, refused_group(p, n));
			return NULL;
		}
	}
	struct ir_node *x = parse_alternation(r, 0);
	if (!x)
		return NULL;
	if (peek(r, 0) != ')') {
		fail_rx(r, at, "a group ( is not closed");
		return NULL;
	}
	r->pos++;
	r->depth--;
	return x;
}

/* A quantifier at r->pos, if any: 1 with min/max, 0 when none (a '{' that does not start one
 * is a literal), -1 on error. */
static int parse_quantifier(struct rx *r, uint32_t *min, uint32_t *max)
{
	int ch = peek(r, 0);
	size_t at = r->pos;
	if (ch == '*' || ch == '+' || ch == '?') {
		*min = ch == '+';
		*max = ch == '?' ? 1 : GR_INF;
		r->pos++;
	} else if (ch == '{') {
		size_t p = r->pos + 1;
		uint64_t a = 0, b;
		int have_a = 0, have_b = 0, comma = 0;
		while (p < r->len && r->s[p] >= '0' && r->s[p] <= '9')
			a = a * 10 + (uint64_t)(r->s[p++] - '0'), have_a = 1, a = a > GR_INF ? GR_INF : a;
		b = a;
		if (p < r->len && r->s[p] == ',') {
			comma = 1, p++, b = GR_INF;
			if (p < r->len && r->s[p] >= '0' && r->s[p] <= '9')
				b = 0;
			while (p < r->len && r->s[p] >= '0' && r->s[p] <= '9')
				b = b * 10 + (uint64_t)(r->s[p++] - '0'), have_b = 1,
				b = b > GR_INF - 1 ? GR_INF - 1 : b;
		}
		if (p >= r->len || r->s[p] != '}' || (!have_a && !(comma && have_b)))
			return 0; /* a literal '{' */
		if (!have_a && r->search)
			return fail_rx(r, at, "{,m} is a repetition in Python and PCRE but text in "
				       "ECMAScript: not supported in a JSON Schema pattern (write {0,m})");
		r->pos = p + 1;
		*min = (uint32_t)a;
		*max = (uint32_t)b;
		uint32_t lim = r->c->lim.max_repeat;
		if (*min > lim || (*max != GR_INF && *max > lim))
			return gr_fail(r->c, -E2BIG, "%s, column %zu: a repetition count over the "
				       "limit of %u", r->where, at + 1, lim);
		if (*max < *min)
			return fail_rx(r, at, "a repetition's maximum is below its minimum");
	} else {
		return 0;
	}
	if (peek(r, 0) == '+')
		return fail_rx(r, r->pos, "possessive quantifiers (*+ ++ ?+) are not supported");
	if (peek(r, 0) == '?')
		r->pos++; /* lazy: the same set of matches */
	return 1;
}

static struct ir_node *parse_atom(struct rx *r, int *anchor)
{
	int ch = peek(r, 0);
	size_t at = r->pos;
	*anchor = 0;
	switch (ch) {
	case '(':
		return parse_group(r);
	case '[':
		return parse_class(r);
	case '.':
		r->pos++;
		return dot(r);
	case '^':
		r->pos++;
		*anchor = 1;
		return NULL;
	case '$':
		r->pos++;
		*anchor = 2;
		return NULL;
	case '*': case '+': case '?':
		fail_rx(r, at, "a quantifier with nothing to repeat");
		return NULL;
	case '\\': {
		r->pos++;
		enum escape_kind kind;
		uint32_t cp;
		struct two_sets t = { { 0 }, { 0 } };
		if (parse_escape(r, &kind, &cp, &t))
			return NULL;
		if (kind == ESC_START || kind == ESC_END) {
			*anchor = kind == ESC_START ? 1 : 2;
			return NULL;
		}
		if (kind == ESC_CLASS) {
			struct gr_cpset *set = r->wide ? &t.max : &t.min;
			gr_cpset_normalize(set);
			return ir_cpset(r->c, set, r->mode);
		}
		return ir_codepoint(r->c, cp, r->mode);
	}
	}
	if (ch == '{' && r->search) {
		uint32_t min, max;
		int q = parse_quantifier(r, &min, &max);
		r->pos = at;
		if (q != 0) {
			if (q > 0)
				fail_rx(r, at, "a quantifier with nothing to repeat");
			return NULL;
		}
	}
	uint32_t cp;
	if (next_char(r, &cp))
		return NULL;
	return ir_codepoint(r->c, cp, r->mode);
}

/* A sequence up to '|', ')' or the end. At the top level it may open with ^ and close with $
 * (flags in *anchors: 1 start, 2 end); anywhere else an anchor is refused. */
static struct ir_node *parse_concat(struct rx *r, int top, int *anchors)
{
	struct ir_list seq = { 0 };
	*anchors = 0;
	while (peek(r, 0) >= 0 && peek(r, 0) != '|' && peek(r, 0) != ')') {
		size_t at = r->pos;
		int anchor;
		struct ir_node *x = parse_atom(r, &anchor);
		if (anchor && r->search) {
			/* ^ reads the start marker and $ the end one: anywhere, since the marked text
			 * has each once, at its ends (Python's $ also before a final line feed). */
			x = ir_byte_range(r->c, anchor == 1 ? GR_RE_START : GR_RE_END,
					  anchor == 1 ? GR_RE_START : GR_RE_END);
			if (anchor == 2 && r->wide)
				x = ir_seq2(r->c, ir_opt(r->c, ir_codepoint(r->c, '\n', r->mode)), x);
			int ch = peek(r, 0);
			if (ch == '*' || ch == '+' || ch == '?' || ch == '{') {
				uint32_t min, max;
				size_t back = r->pos;
				if (parse_quantifier(r, &min, &max) != 0) {
					if (!r->c->rc)
						fail_rx(r, back, "a quantified anchor is not supported");
					return NULL;
				}
			}
			if (ir_list_push(r->c, &seq, x))
				return NULL;
			continue;
		}
		if (anchor) {
			int at_edge = anchor == 1 ? seq.n == 0 && !(*anchors & 1)
					: peek(r, 0) < 0 || peek(r, 0) == '|' || peek(r, 0) == ')';
			if (!top || !at_edge) {
				fail_rx(r, at, "anchors (^ $ \\A \\z) are supported only at the start "
					"and end of the whole pattern or of a top-level alternative");
				return NULL;
			}
			*anchors |= anchor;
			continue;
		}
		if (!x)
			return NULL;
		uint32_t min, max;
		int q, n_q = 0;
		size_t q_at = r->pos;
		while ((q = parse_quantifier(r, &min, &max)) == 1) {
			if (r->search && n_q++) {
				fail_rx(r, q_at, "a quantifier follows another (ECMAScript: nothing to "
					"repeat): not supported in a JSON Schema pattern");
				return NULL;
			}
			if (!(x = ir_repeat(r->c, x, min, max)))
				return NULL;
			q_at = r->pos;
		}
		if (q < 0 || ir_list_push(r->c, &seq, x))
			return NULL;
		if (gr_tick(r->c))
			return NULL;
	}
	return ir_seq(r->c, seq.n, seq.v);
}

/* The open sides of a marked pattern: nothing (an anchor reads the mark), or the mark and
 * any text up to the match (after it, for the end). Only these, so that the automaton knows
 * the marks come once each, at the ends: a side that read marks anywhere would make the
 * determinization follow every attempt started at a mark, exponentially many. */
static struct ir_node *open_side(struct rx *r, int end)
{
	struct ir_node *text = ir_repeat(r->c, ir_any_char_except(r->c, NULL, 0, r->mode), 0, GR_INF);
	struct ir_node *mark = ir_byte_range(r->c, end ? GR_RE_END : GR_RE_START,
					     end ? GR_RE_END : GR_RE_START);
	return ir_opt(r->c, end ? ir_seq2(r->c, text, mark) : ir_seq2(r->c, mark, text));
}

static struct ir_node *parse_alternation(struct rx *r, int top)
{
	struct ir_list alts = { 0 };
	for (;;) {
		int anchors;
		struct ir_node *x = parse_concat(r, top, &anchors);
		if (!x)
			return NULL;
		if (ir_list_push(r->c, &alts, x))
			return NULL;
		if (peek(r, 0) != '|')
			break;
		r->pos++;
	}
	struct ir_node *x = ir_alt(r->c, alts.n, alts.v);
	/* JSON Schema's pattern matches anywhere: any text around the whole alternation (around
	 * each alternative, a determinization would track which ones were seen). */
	return top && r->search ? ir_seq3(r->c, open_side(r, 0), x, open_side(r, 1)) : x;
}

struct ir_node *gr_regex_expr(struct gr_ctx *c, const char *re, size_t len,
			      enum gr_text_mode mode, int flags, const char *where)
{
	struct rx r = { .c = c, .s = re, .len = len, .mode = mode,
			.search = !!(flags & GR_RE_SEARCH), .wide = !!(flags & GR_RE_WIDE),
			.where = where };
	struct ir_node *x = parse_alternation(&r, 1);
	if (x && r.pos < r.len) {
		fail_rx(&r, r.pos, "an unmatched ')'");
		return NULL;
	}
	return x;
}

int gr_regex(struct gr_ctx *c, const char *text, size_t len)
{
	int64_t root = gr_rule_new(c, "root");
	if (root < 0)
		return -1;
	struct ir_node *x = gr_regex_expr(c, text, len, GR_TEXT_RAW, 0, "regex");
	if (!x)
		return -1;
	c->rules[root].body = x;
	c->root = (uint32_t)root;
	return 0;
}
