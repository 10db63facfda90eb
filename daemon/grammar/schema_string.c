/* SPDX-License-Identifier: MIT */
/*
 * schema_string.c — JSON Schema strings (schema.h): lengths in code points (an escape is one),
 * `pattern` as a regular expression on the decoded string (ECMAScript's semantics: it
 * matches anywhere unless anchored; regex.c's dialect), the formats below, each as a regular
 * expression whose every match is valid under its RFC and Python's checkers, and `not` a
 * pattern or an enum. A string with several of these is their intersection (regular.h), and
 * one with lengths alone a plain repetition.
 *
 * Formats: date, time, date-time (RFC 3339), duration (ISO 8601 as JSON Schema's appendix
 * gives it), email and idn-email (RFC 5321 dot-atoms), hostname (RFC 1123), ipv4, ipv6
 * (RFC 4291), uuid (RFC 4122), uri and iri (RFC 3986's URI, which every IRI grammar takes),
 * uri-reference and iri-reference, json-pointer (RFC 6901), relative-json-pointer, regex
 * (ECMA-262, a subset Python's re reads alike). Some are narrower than their RFC (named
 * below). int32 and int64 bound numbers (schema_norm.c).
 */
#include "schema.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define YEAR "(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
#define LEAP_YEAR "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
#define DATE "(?:" YEAR "-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-" \
	"(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|" LEAP_YEAR "-02-29)"
#define HOUR "(?:[01][0-9]|2[0-3])"
#define TIME HOUR ":[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:Z|[+-]" HOUR ":[0-5][0-9])"
#define DUR_TIME "T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
#define DURATION "P(?:[0-9]+W|(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)" \
	"(?:" DUR_TIME ")?|" DUR_TIME ")"
#define LABEL(n) "[A-Za-z0-9](?:[A-Za-z0-9-]{0," #n "}[A-Za-z0-9])?"
#define ATOM "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,15}"
#define EMAIL ATOM "(?:\\." ATOM "){0,3}@" LABEL(30) "(?:\\." LABEL(30) "){1,3}"
#define OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
#define IPV4 OCTET "(?:\\." OCTET "){3}"
#define H16 "[0-9A-Fa-f]{1,4}"
#define LS32 "(?:" H16 ":" H16 "|" IPV4 ")"
#define HEX(n) "[0-9a-fA-F]{" #n "}"
/* RFC 3986 without IP-literal hosts ([v6]): pchar, query and fragment characters, paths. */
#define PCT "%[0-9A-Fa-f]{2}"
#define PCHAR "(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|" PCT ")"
#define PCHAR_NC "(?:[A-Za-z0-9._~!$&'()*+,;=@-]|" PCT ")"
#define QCHAR "(?:[A-Za-z0-9._~!$&'()*+,;=:@/?-]|" PCT ")"
#define AUTHORITY "(?:(?:[A-Za-z0-9._~!$&'()*+,;=:-]|" PCT ")*@)?(?:[A-Za-z0-9._~!$&'()*+,;=-]|" \
	PCT ")*(?::[0-9]*)?"
#define PATH_ABEMPTY "(?:/" PCHAR "*)*"
#define PATH_ABSOLUTE "/(?:" PCHAR "+(?:/" PCHAR "*)*)?"
#define TAIL "(?:\\?" QCHAR "*)?(?:#" QCHAR "*)?"
/* The hier-part is not empty: RFC 3986 allows "a:" and "a:?q", ajv-formats does not (Github_easy
 * o67010 answered {"uri":"With:"}, valid to Python's rfc3987, not to ajv) */
#define URI "[A-Za-z][A-Za-z0-9+.-]*:(?://" AUTHORITY PATH_ABEMPTY "|" PATH_ABSOLUTE "|" \
	PCHAR "+(?:/" PCHAR "*)*)" TAIL
#define RELATIVE "(?://" AUTHORITY PATH_ABEMPTY "|" PATH_ABSOLUTE "|" PCHAR_NC "+(?:/" PCHAR \
	"*)*)?" TAIL
#define POINTER "(?:/(?:[^/~]|~[01])*)*"
/* ECMAScript regular expressions (with the u flag, as ajv reads them) that Python's re reads
 * too: literals, ., \d \w \s and their negations, escaped syntax characters, classes of
 * letters, digits, _, space, a-z, A-Z, 0-9 and \d \w \s, each optionally followed by * + or
 * ?; groups of alternatives of those, unquantified; ^ first and $ last. */
#define RE_LIT "[^\\\\^$.|?*+()\\[\\]{}\\x00-\\x1f]"
#define RE_ESC "\\\\[dwsDWS\\\\^$.|?*+()\\[\\]{}/]"
#define RE_CLASS "\\[\\^?(?:[A-Za-z0-9_ ]|a-z|A-Z|0-9|\\\\[dws])+\\]"
#define RE_PIECE "(?:" RE_LIT "|\\.|" RE_ESC "|" RE_CLASS ")[*+?]?"
#define RE_GROUP "\\((?:" RE_PIECE ")+(?:\\|(?:" RE_PIECE ")+)*\\)"

/* Each format's expression. Where it is narrower than its RFC, the comment says how. */
static const struct {
	const char *name;
	const char *regex;
} formats[] = {
	{ "date", DATE },                    /* years 0001..9999 (Python's date has no 0000) */
	{ "time", TIME },                    /* upper-case Z, no leap second :60 */
	{ "date-time", DATE "T" TIME },      /* upper-case T and Z */
	{ "duration", DURATION },
	/* dot-atoms of up to 4 atoms of up to 15 characters, then up to 4 labels of up to 32:
	 * inside RFC 5321's 64 and 254 characters */
	{ "email", EMAIL },
	{ "idn-email", EMAIL },              /* the ASCII addresses */
	/* up to 4 labels of up to 62 characters: inside 253 */
	{ "hostname", LABEL(60) "(?:\\." LABEL(60) "){0,3}" },
	{ "ipv4", IPV4 },
	{ "ipv6", "(?:(?:" H16 ":){6}" LS32 "|::(?:" H16 ":){5}" LS32 "|(?:" H16 ")?::(?:" H16
		  ":){4}" LS32 "|(?:(?:" H16 ":){0,1}" H16 ")?::(?:" H16 ":){3}" LS32 "|(?:(?:" H16
		  ":){0,2}" H16 ")?::(?:" H16 ":){2}" LS32 "|(?:(?:" H16 ":){0,3}" H16 ")?::" H16 ":"
		  LS32 "|(?:(?:" H16 ":){0,4}" H16 ")?::" LS32 "|(?:(?:" H16 ":){0,5}" H16 ")?::" H16
		  "|(?:(?:" H16 ":){0,6}" H16 ")?::)" },
	{ "uuid", HEX(8) "-" HEX(4) "-" HEX(4) "-" HEX(4) "-" HEX(12) },
	/* no IP-literal hosts, no empty hier-part; an IRI as its ASCII URIs */
	{ "uri", URI },
	{ "iri", URI },
	{ "uri-reference", "(?:" URI "|" RELATIVE ")" },
	{ "iri-reference", "(?:" URI "|" RELATIVE ")" },
	{ "json-pointer", POINTER },
	{ "relative-json-pointer", "(?:0|[1-9][0-9]*)(?:#|" POINTER ")" },
	/* the subset above (RE_*) */
	{ "regex", "\\^?(?:" RE_PIECE "|" RE_GROUP ")*\\$?" },
};

static int name_is(const char *name, uint32_t len, const char *want)
{
	return strlen(want) == len && !memcmp(name, want, len);
}

int sc_format_known(const char *name, uint32_t len)
{
	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
		if (name_is(name, len, formats[i].name))
			return 1;
	return 0;
}

int sc_format_numeric(const char *name, uint32_t len)
{
	return name_is(name, len, "int32") || name_is(name, len, "int64");
}

/* ------------------------------------------------------------------------------------------ */
/* Languages                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* A pattern's or a format's fragment, made once per text and reading. */
static const struct gr_frag *text_frag(struct schema *s, const struct sn_text *t,
				       enum gr_text_mode mode, int wide)
{
	void *key[3] = { (void *)t->text, (void *)(uintptr_t)(t->kind == SN_FORMAT),
			 (void *)(uintptr_t)(mode * 2 + wide) };
	int64_t had = sc_memo_get(s->frags, key, 3);
	if (had >= 0)
		return (const struct gr_frag *)(uintptr_t)had;
	struct ir_node *x = NULL;
	if (t->kind == SN_FORMAT) {
		for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
			if (name_is(t->text, t->len, formats[i].name))
				x = gr_regex_expr(s->c, formats[i].regex, strlen(formats[i].regex),
						  mode, 0, "format");
	} else {
		char *where = gr_alloc(s->c, strlen(t->where) + 16);
		if (!where)
			return NULL;
		sprintf(where, "\"pattern\" at %s", t->where);
		x = gr_regex_expr(s->c, t->text, t->len, mode,
				  GR_RE_SEARCH | (wide ? GR_RE_WIDE : 0), where);
	}
	const struct gr_frag *f = gr_frag_of(s->c, x);
	if (f && t->kind != SN_FORMAT)
		f = gr_frag_between(s->c, f, GR_RE_START, GR_RE_END);
	if (f && sc_memo_put(s, &s->frags, key, 3, (int64_t)(uintptr_t)f))
		return NULL;
	return f;
}

const struct gr_frag *sc_pattern_frag(struct schema *s, const struct jv *re, const char *where,
				      enum gr_text_mode mode, int wide)
{
	struct sn_text t = { SN_PATTERN, re->s, re->n, where, NULL };
	return text_frag(s, &t, mode, wide);
}

static struct ir_node *any_chars(struct schema *s, enum gr_text_mode mode, uint32_t lo,
				 uint32_t hi)
{
	return ir_repeat(s->c, ir_any_char_except(s->c, NULL, 0, mode), lo, hi);
}

const struct gr_frag *sc_string_frag(struct schema *s, const struct sn *n, enum gr_text_mode mode,
				     int wide)
{
	const struct gr_frag *f = NULL;
	for (uint32_t i = 0; i < n->n_texts; i++) {
		const struct sn_text *t = &n->texts[i];
		if (t->kind == SN_FORMAT && wide)
			continue; /* a format some validators do not check: any string, widely */
		int negated = t->kind == SN_NOT_PATTERN || t->kind == SN_NOT_STRINGS_OF;
		/* What is excluded is read the other way: the narrowest reading of a language
		 * excludes the least, the widest the most. */
		const struct gr_frag *g = t->kind == SN_NOT_STRINGS_OF
			? sc_string_frag(s, t->other, mode, !wide)
			: text_frag(s, t, mode, negated ? !wide : wide);
		if (!g)
			return NULL;
		if (negated) {
			if (!f && !(f = gr_frag_of(s->c, any_chars(s, mode, 0, GR_INF))))
				return NULL;
			f = gr_frag_minus(s->c, f, g);
		} else {
			f = f ? gr_frag_and(s->c, f, g) : g;
		}
		if (!f)
			return NULL;
	}
	uint32_t lo = n->min_len, hi = n->max_len, have_lo = 0, have_hi = GR_INF;
	if (f)
		gr_frag_code_points(f, &have_lo, &have_hi);
	if (!f || lo > have_lo || (hi != GR_INF && (have_hi == GR_INF || hi < have_hi))) {
		/* The lengths say more than the rules: their own language, intersected. */
		const struct gr_frag *len = gr_frag_of(s->c, any_chars(s, mode, lo, hi));
		f = f ? gr_frag_and(s->c, f, len) : len;
	}
	return f;
}

/* ------------------------------------------------------------------------------------------ */
/* Checking and writing                                                                       */
/* ------------------------------------------------------------------------------------------ */

int sc_valid_string(struct schema *s, const struct sn *n, const char *str, uint32_t len)
{
	uint32_t cps = 0;
	for (uint32_t i = 0; i < len; i++)
		cps += ((uint8_t)str[i] & 0xC0) != 0x80;
	if (cps < n->min_len || cps > n->max_len)
		return 0;
	if (!n->n_texts)
		return 1;
	struct sn *m = (struct sn *)n; /* the cache is the node's own */
	if (!m->text_frag && !(m->text_frag = sc_string_frag(s, n, GR_TEXT_RAW, 0)))
		return -1;
	return gr_frag_matches(m->text_frag, str, len);
}

/* The strings among excluded values, left out of f (spelled as a JSON string's inside). */
static const struct gr_frag *without_excluded(struct schema *s, const struct sn *n,
					      const struct gr_frag *f)
{
	for (uint32_t i = 0; i < n->n_nots && f; i++) {
		const struct jv *v = n->nots[i];
		if (v->kind != JV_STRING)
			continue;
		size_t len;
		char *text = jv_write(s->c, v, &len);
		if (!text)
			return NULL;
		const struct gr_frag *g = gr_frag_of(s->c, ir_literal(s->c, text + 1, len - 2));
		f = g ? gr_frag_minus(s->c, f, g) : NULL;
	}
	return f;
}

static int excludes_strings(const struct sn *n)
{
	for (uint32_t i = 0; i < n->n_nots; i++)
		if (n->nots[i]->kind == JV_STRING)
			return 1;
	return 0;
}

struct ir_node *sc_string(struct schema *s, const struct sn *n)
{
	struct gr_ctx *c = s->c;
	struct ir_node *body;
	if (n->min_len > n->max_len) {
		sc_fail(s, "\"minLength\" is above \"maxLength\": no string satisfies them");
		return NULL;
	}
	if (!n->n_texts && !excludes_strings(n)) {
		/* Lengths alone: every spelling of every character (escapes count as one). */
		body = ir_repeat(c, gr_json_string_char(c), n->min_len, n->max_len);
	} else {
		/* Otherwise one spelling per character (the expressions are of decoded text). */
		const struct gr_frag *f = sc_string_frag(s, n, GR_TEXT_JSON, 0);
		if (f && excludes_strings(n))
			f = without_excluded(s, n, f);
		if (f && !f->n)
			sc_note_why(s, "no string meets its pattern, format and lengths together (at "
				    "%s)", n->where);
		body = ir_frag(c, f);
	}
	return ir_seq3(c, ir_lit(c, "\""), body, ir_lit(c, "\""));
}
