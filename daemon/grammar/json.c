/* SPDX-License-Identifier: MIT */
/*
 * json.c — any JSON value (RFC 8259; JSON mode) and the pieces schemas are built from
 * (frontends.h). Strings are valid UTF-8 without raw control characters, with every escape
 * JSON has except \u escapes of surrogates (a lone one would decode to no character); numbers
 * are JSON's. Whitespace between tokens is bounded (c->max_ws, none at all in compact mode),
 * so a model cannot loop on spaces and newlines. Objects and arrays are expanded inline and
 * only nested values go through the recursive rule `value`, so that a token closing a string
 * and opening the next key stays inside one automaton.
 */
#include "frontends.h"

struct ir_node *gr_json_ws(struct gr_ctx *c)
{
	if (!c->json_ws) {
		struct ir_byteset ws = { { 0 } };
		ir_set_add(&ws, ' ');
		ir_set_add(&ws, '\t');
		ir_set_add(&ws, '\n');
		ir_set_add(&ws, '\r');
		c->json_ws = c->max_ws ? ir_repeat(c, ir_bytes(c, &ws), 0, c->max_ws) : ir_empty(c);
	}
	return c->json_ws;
}

/* Four hexadecimal digits naming anything but a surrogate (D800..DFFF). */
static struct ir_node *hex4_not_surrogate(struct gr_ctx *c)
{
	struct ir_byteset hex = { { 0 } }, low_first = { { 0 } }, d = { { 0 } }, d_next = { { 0 } };
	for (unsigned b = 0; b < 256; b++) {
		int is_hex = (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
		if (is_hex)
			ir_set_add(&hex, b);
		if (is_hex && b != 'd' && b != 'D')
			ir_set_add(&low_first, b);
		if (b >= '0' && b <= '7')
			ir_set_add(&d_next, b);
	}
	ir_set_add(&d, 'd');
	ir_set_add(&d, 'D');
	struct ir_node *h = ir_bytes(c, &hex);
	struct ir_node *plain[] = { ir_bytes(c, &low_first), h, h, h };
	struct ir_node *dxxx[] = { ir_bytes(c, &d), ir_bytes(c, &d_next), h, h };
	return ir_alt2(c, ir_seq(c, 4, plain), ir_seq(c, 4, dxxx));
}

struct ir_node *gr_json_string_char(struct gr_ctx *c)
{
	if (!c->json_char) {
		static const uint32_t excluded[] = { 0,  1,  2,  3,  4,  5,  6,  7,  8,  9,
						     10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
						     20, 21, 22, 23, 24, 25, 26, 27, 28, 29,
						     30, 31, '"', '\\' };
		struct ir_node *raw = ir_any_char_except(c, excluded, 34, GR_TEXT_RAW);
		struct ir_byteset simple = { { 0 } };
		for (const char *e = "\"\\/bfnrt"; *e; e++)
			ir_set_add(&simple, (uint8_t)*e);
		struct ir_node *escape = ir_seq2(c, ir_lit(c, "\\"),
			ir_alt2(c, ir_bytes(c, &simple), ir_seq2(c, ir_lit(c, "u"),
								 hex4_not_surrogate(c))));
		c->json_char = ir_alt2(c, raw, escape);
	}
	return c->json_char;
}

struct ir_node *gr_json_string(struct gr_ctx *c)
{
	if (!c->json_string)
		c->json_string = ir_seq3(c, ir_lit(c, "\""),
					 ir_repeat(c, gr_json_string_char(c), 0, GR_INF),
					 ir_lit(c, "\""));
	return c->json_string;
}

/* -? (0 | [1-9][0-9]*) */
static struct ir_node *json_int_part(struct gr_ctx *c)
{
	return ir_seq2(c, ir_opt(c, ir_lit(c, "-")),
		       ir_alt2(c, ir_lit(c, "0"),
			       ir_seq2(c, ir_byte_range(c, '1', '9'),
				       ir_repeat(c, ir_byte_range(c, '0', '9'), 0, GR_INF))));
}

struct ir_node *gr_json_integer(struct gr_ctx *c)
{
	if (!c->json_integer)
		c->json_integer = json_int_part(c);
	return c->json_integer;
}

struct ir_node *gr_json_number(struct gr_ctx *c)
{
	if (!c->json_number) {
		struct ir_node *digits = ir_repeat(c, ir_byte_range(c, '0', '9'), 1, GR_INF);
		struct ir_byteset e = { { 0 } }, sign = { { 0 } };
		ir_set_add(&e, 'e');
		ir_set_add(&e, 'E');
		ir_set_add(&sign, '+');
		ir_set_add(&sign, '-');
		struct ir_node *frac = ir_opt(c, ir_seq2(c, ir_lit(c, "."), digits));
		struct ir_node *exp = ir_opt(c, ir_seq3(c, ir_bytes(c, &e),
							ir_opt(c, ir_bytes(c, &sign)), digits));
		c->json_number = ir_seq3(c, json_int_part(c), frac, exp);
	}
	return c->json_number;
}

int64_t gr_json_value_rule(struct gr_ctx *c)
{
	if (c->json_value_rule1)
		return c->json_value_rule1 - 1;
	int64_t r = gr_rule_new(c, "value");
	if (r < 0)
		return -1;
	c->json_value_rule1 = (uint32_t)r + 1;
	struct ir_node *ws = gr_json_ws(c), *value = ir_call(c, (uint32_t)r);
	/* "[" ws ( value (ws "," ws value)* ws )? "]" */
	struct ir_node *more = ir_repeat(c, ir_seq(c, 4, (struct ir_node *[]){
		ws, ir_lit(c, ","), ws, value }), 0, GR_INF);
	struct ir_node *array = ir_seq3(c, ir_seq2(c, ir_lit(c, "["), ws),
					ir_opt(c, ir_seq3(c, value, more, ws)), ir_lit(c, "]"));
	struct ir_node *kids[] = {
		gr_json_any_object(c), array, gr_json_string(c), gr_json_number(c),
		ir_lit(c, "true"), ir_lit(c, "false"), ir_lit(c, "null"),
	};
	c->rules[r].body = ir_alt(c, 7, kids);
	return c->rc ? -1 : r;
}

struct ir_node *gr_json_any_object(struct gr_ctx *c)
{
	if (c->json_object)
		return c->json_object;
	int64_t r = gr_json_value_rule(c);
	if (r < 0)
		return NULL;
	if (c->json_object) /* made while the value rule was */
		return c->json_object;
	/* "{" ws ( member (ws "," ws member)* ws )? "}", member = string ws ":" ws value */
	struct ir_node *ws = gr_json_ws(c);
	struct ir_node *member = ir_seq(c, 5, (struct ir_node *[]){
		gr_json_string(c), ws, ir_lit(c, ":"), ws, ir_call(c, (uint32_t)r) });
	struct ir_node *more = ir_repeat(c, ir_seq(c, 4, (struct ir_node *[]){
		ws, ir_lit(c, ","), ws, member }), 0, GR_INF);
	c->json_object = ir_seq3(c, ir_seq2(c, ir_lit(c, "{"), ws),
				 ir_opt(c, ir_seq3(c, member, more, ws)), ir_lit(c, "}"));
	return c->json_object;
}

int gr_json_any(struct gr_ctx *c)
{
	int64_t root = gr_rule_new(c, "root");
	int64_t value = root < 0 ? -1 : gr_json_value_rule(c);
	if (value < 0)
		return -1;
	/* The top level expanded here: the bottom rule then reads the outermost object itself. */
	struct ir_node *top = c->json_top == BN_GRAMMAR_TOP_OBJECT ? gr_json_any_object(c)
								 : c->rules[value].body;
	struct ir_node *ws = gr_json_ws(c);
	c->rules[root].body = ir_seq3(c, ws, top, ws);
	c->root = (uint32_t)root;
	return c->rc ? -1 : 0;
}
