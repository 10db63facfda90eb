/* SPDX-License-Identifier: MIT */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static enum bn_log_level current_level = BN_LOG_INFO;
static const char *const level_names[] = { "error", "warn", "info", "debug" };

void bn_log_set_level(enum bn_log_level level)
{
	current_level = level;
}

int bn_log_parse_level(const char *name, enum bn_log_level *out)
{
	for (int i = 0; i <= BN_LOG_DEBUG; i++) {
		if (strcmp(name, level_names[i]) == 0) {
			*out = (enum bn_log_level)i;
			return 0;
		}
	}
	return -1;
}

int bn_log_enabled(enum bn_log_level level)
{
	return level <= current_level;
}

void bn_log(enum bn_log_level level, const char *fmt, ...)
{
	if (!bn_log_enabled(level))
		return;
	/* One fprintf per line: stderr is unbuffered, so building the line first keeps it whole
	 * when another thread or process writes to the same journal stream. */
	char line[1024];
	int n = snprintf(line, sizeof(line), "level=%s ", level_names[level]);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", line);
}
