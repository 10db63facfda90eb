/* SPDX-License-Identifier: MIT */
/*
 * schema_common.c — what the JSON Schema files share (schema.h): errors with their location,
 * count keywords.
 */
#include "schema.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

int sc_fail(struct schema *s, const char *fmt, ...)
{
	char msg[BN_GRAMMAR_ERR_LEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return gr_fail(s->c, -EINVAL, "%s (at %s)", msg, s->path);
}

int sc_count(struct schema *s, json_t *node, const char *keyword, uint32_t *out)
{
	json_t *v = sc_get(node, keyword);
	if (!v)
		return 0;
	double d = json_is_integer(v) ? (double)json_integer_value(v)
		   : json_is_real(v) ? json_real_value(v) : -1;
	if (d < 0 || d != floor(d))
		return sc_fail(s, "\"%s\" must be a non-negative integer", keyword);
	if (d > s->c->lim.max_repeat)
		return gr_fail(s->c, -E2BIG, "\"%s\" %.0f is over the limit of %u (at %s)", keyword,
			       d, s->c->lim.max_repeat, s->path);
	*out = (uint32_t)d;
	return 0;
}
