/* SPDX-License-Identifier: MIT */
/*
 * schema_string.c — JSON Schema strings (schema.h): lengths in code points (an escape is one),
 * `pattern` as a regular expression on the decoded string (ECMAScript's semantics: it matches
 * anywhere unless anchored; regex.c's dialect), and these formats, each as a regular
 * expression whose every match is valid under RFC 3339 / RFC 5321 / RFC 1123 / RFC 4291 /
 * RFC 4122 and Python's checkers: date, time, date-time, duration, email, hostname, ipv4,
 * ipv6, uuid. Some formats are a strict subset of what the RFC allows (named below); other
 * formats are refused. A string with more than one of pattern, format and lengths is refused:
 * the engine cannot intersect them.
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
#define OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
#define IPV4 OCTET "(?:\\." OCTET "){3}"
#define H16 "[0-9A-Fa-f]{1,4}"
#define LS32 "(?:" H16 ":" H16 "|" IPV4 ")"
#define HEX(n) "[0-9a-fA-F]{" #n "}"

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
	{ "email", ATOM "(?:\\." ATOM "){0,3}@" LABEL(30) "(?:\\." LABEL(30) "){1,3}" },
	/* up to 4 labels of up to 62 characters: inside 253 */
	{ "hostname", LABEL(60) "(?:\\." LABEL(60) "){0,3}" },
	{ "ipv4", IPV4 },
	{ "ipv6", "(?:(?:" H16 ":){6}" LS32 "|::(?:" H16 ":){5}" LS32 "|(?:" H16 ")?::(?:" H16
		  ":){4}" LS32 "|(?:(?:" H16 ":){0,1}" H16 ")?::(?:" H16 ":){3}" LS32 "|(?:(?:" H16
		  ":){0,2}" H16 ")?::(?:" H16 ":){2}" LS32 "|(?:(?:" H16 ":){0,3}" H16 ")?::" H16 ":"
		  LS32 "|(?:(?:" H16 ":){0,4}" H16 ")?::" LS32 "|(?:(?:" H16 ":){0,5}" H16 ")?::" H16
		  "|(?:(?:" H16 ":){0,6}" H16 ")?::)" },
	{ "uuid", HEX(8) "-" HEX(4) "-" HEX(4) "-" HEX(4) "-" HEX(12) },
};

static struct ir_node *format(struct schema *s, const char *name)
{
	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
		if (!strcmp(formats[i].name, name))
			return gr_regex_expr(s->c, formats[i].regex, strlen(formats[i].regex),
					     GR_TEXT_JSON, 0, "format");
	sc_fail(s, "\"format\": \"%.40s\" is not supported", name);
	return NULL;
}

struct ir_node *sc_string(struct schema *s, json_t *node)
{
	struct gr_ctx *c = s->c;
	uint32_t lo = 0, hi = GR_INF;
	json_t *pattern = sc_get(node, "pattern"), *fmt = sc_get(node, "format");
	if (sc_count(s, node, "minLength", &lo) || sc_count(s, node, "maxLength", &hi))
		return NULL;
	if ((pattern && !json_is_string(pattern)) || (fmt && !json_is_string(fmt))) {
		sc_fail(s, "\"pattern\" and \"format\" must be strings");
		return NULL;
	}
	int lengths = lo > 0 || hi != GR_INF;
	if (!!pattern + !!fmt + lengths > 1) {
		sc_fail(s, "\"%s\" together with \"%s\" is not supported", pattern ? "pattern"
			: "format", lengths ? "minLength/maxLength" : "format");
		return NULL;
	}
	if (lo > hi) {
		sc_fail(s, "\"minLength\" is above \"maxLength\": no string satisfies them");
		return NULL;
	}
	struct ir_node *body;
	if (pattern) {
		char *where = gr_alloc(c, sizeof(s->path) + 16);
		if (!where)
			return NULL;
		snprintf(where, sizeof(s->path) + 16, "\"pattern\" at %s", s->path);
		body = gr_regex_expr(c, json_string_value(pattern), json_string_length(pattern),
				     GR_TEXT_JSON, 1, where);
	} else if (fmt) {
		body = format(s, json_string_value(fmt));
	} else {
		body = ir_repeat(c, gr_json_string_char(c), lo, hi);
	}
	return ir_seq3(c, ir_lit(c, "\""), body, ir_lit(c, "\""));
}
