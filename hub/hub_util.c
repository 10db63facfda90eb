/* SPDX-License-Identifier: MIT */
/* hub_util.c — messages, sizes for people, paths that must fit. */
#include "hub_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

int hub_fail(char *err, size_t err_cap, int rc, const char *fmt, ...)
{
	if (err && err_cap) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, err_cap, fmt, ap);
		va_end(ap);
	}
	return rc;
}

void hub_note(const struct bn_hub_options *o, const char *fmt, ...)
{
	if (!o->report || !o->report->note)
		return;
	char line[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	o->report->note(o->report->ctx, line);
}

const char *bn_hub_size_text(uint64_t bytes, char buf[32])
{
	static const char *const units[] = { "kB", "MB", "GB", "TB", "PB" };
	if (bytes < 1000) {
		snprintf(buf, 32, "%u B", (unsigned)bytes);
		return buf;
	}
	double v = (double)bytes / 1000.0;
	unsigned u = 0;
	while (v >= 999.95 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1000.0;
		u++;
	}
	/* Three significant digits: 1.19 GB, 12.3 MB, 532 kB. */
	snprintf(buf, 32, v < 9.995 ? "%.2f %s" : v < 99.95 ? "%.1f %s" : "%.0f %s", v, units[u]);
	return buf;
}

int hub_is_hex(const char *s, size_t n)
{
	size_t i = 0;
	for (; s[i] && i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return i == n && s[i] == '\0';
}

int hub_path(char *out, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int len = vsnprintf(out, cap, fmt, ap);
	va_end(ap);
	return len < 0 || (size_t)len >= cap ? -ENAMETOOLONG : 0;
}

double hub_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
