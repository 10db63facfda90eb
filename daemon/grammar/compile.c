/* SPDX-License-Identifier: MIT */
/*
 * compile.c — bn_grammar_compile (grammar.h): the options and limits checked, the text through
 * its front end, then lowered to the automaton, all within the time budget.
 */
#include "grammar_internal.h"
#include "frontends.h"

#include "common/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void limits_or_defaults(const struct bn_grammar_limits *in, struct bn_grammar_limits *out)
{
	*out = *in;
	if (!out->max_text_bytes)
		out->max_text_bytes = 256 * 1024;
	if (!out->max_depth)
		out->max_depth = 64;
	if (!out->max_rules)
		out->max_rules = 4096;
	if (!out->max_states)
		out->max_states = 250000;
	if (!out->max_repeat)
		out->max_repeat = 10000;
	if (!out->compile_ms)
		out->compile_ms = 1000;
}

static int set_err(char *err, int code, const char *msg)
{
	snprintf(err, BN_GRAMMAR_ERR_LEN, "%s", msg);
	return code;
}

static int front_end(struct gr_ctx *c, uint32_t kind, const char *text, size_t len)
{
	switch (kind) {
	case BN_GRAMMAR_JSON_SCHEMA:
		return gr_schema(c, text, len);
	case BN_GRAMMAR_JSON:
		if (len)
			return gr_fail(c, -EINVAL, "JSON mode takes no grammar text (%zu bytes given)",
				       len);
		return gr_json_any(c);
	case BN_GRAMMAR_REGEX:
		return gr_regex(c, text, len);
	case BN_GRAMMAR_GBNF:
		return gr_gbnf(c, text, len);
	}
	return gr_fail(c, -EINVAL, "unknown grammar kind %u", kind);
}

int bn_grammar_compile(const void *text, size_t len, const struct bn_grammar_options *o,
		       struct bn_grammar **out, char err[BN_GRAMMAR_ERR_LEN])
{
	uint64_t t0 = bn_now_ns();
	struct gr_ctx c = { .err = err };
	*out = NULL;
	err[0] = 0;
	limits_or_defaults(&o->limits, &c.lim);
	if (len > c.lim.max_text_bytes) {
		snprintf(err, BN_GRAMMAR_ERR_LEN, "the grammar is %zu bytes, over the limit of %u "
			 "bytes of grammar text", len, c.lim.max_text_bytes);
		return -E2BIG;
	}
	if (o->json_top > BN_GRAMMAR_TOP_OBJECT)
		return set_err(err, -EINVAL, "json_top is neither ANY nor OBJECT");
	if (o->flags & ~BN_GRAMMAR_F_COMPACT_JSON)
		return set_err(err, -EINVAL, "unknown grammar flags");
	c.json_top = o->json_top;
	c.max_ws = o->flags & BN_GRAMMAR_F_COMPACT_JSON ? 0
		   : o->max_ws ? o->max_ws : BN_GRAMMAR_WS_DEFAULT;
	if (c.max_ws > c.lim.max_repeat)
		return set_err(err, -E2BIG, "max_ws is over the repetition limit");
	/* CPU time, not wall time: a schema compiled in 1.1-1.7 s wall was refused at a 1,000 ms
	 * budget on a loaded machine and taken on a quiet one. */
	c.deadline_ns = bn_thread_cpu_ns() + (uint64_t)c.lim.compile_ms * 1000000u;
	struct gr_automaton *a = NULL;
	if (front_end(&c, o->kind, text, len) == 0 && c.rc == 0)
		a = gr_lower(&c);
	gr_arena_free(&c.arena);
	if (!a)
		return c.rc ? c.rc : set_err(err, -EINVAL, "the grammar could not be compiled");
	struct bn_grammar *g = calloc(1, sizeof(*g));
	if (!g) {
		gr_automaton_free(a);
		return set_err(err, -ENOMEM, "out of memory compiling the grammar");
	}
	atomic_init(&g->refs, 1);
	g->a = a;
	g->compile_ns = bn_now_ns() - t0;
	*out = g;
	return 0;
}

void bn_grammar_ref(struct bn_grammar *g)
{
	atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
}

void bn_grammar_unref(struct bn_grammar *g)
{
	if (!g || atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) != 1)
		return;
	gr_automaton_free(g->a);
	free(g);
}

void bn_grammar_get_info(const struct bn_grammar *g, struct bn_grammar_info *info)
{
	*info = (struct bn_grammar_info){ .n_rules = g->a->n_rules, .n_states = g->a->n_states,
					  .bytes = g->a->bytes, .compile_ns = g->compile_ns };
}
