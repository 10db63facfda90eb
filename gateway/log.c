/* SPDX-License-Identifier: MIT */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>

static int max_level = GW_LOG_INFO;

void gw_log_set_level(int level)
{
	max_level = level;
}

void gw_log(int level, const char *fmt, ...)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	if (level > max_level)
		return;
	char line[2048];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	/* one call per line: stdio locks the stream for it, so threads never interleave */
	fprintf(stderr, "level=%s %s\n", names[level], line);
}
