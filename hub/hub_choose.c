/* SPDX-License-Identifier: MIT */
/*
 * hub_choose.c — which GGUF file of a repository a name without a file means. Repositories
 * often hold one model in several quantizations; the daemon runs the ternary layouts natively
 * (I2_S fastest, then TQ2_0, then TQ1_0), and anything else it would have to convert, so a
 * name alone picks those, and otherwise asks the user to say which.
 */
#include "hub_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The layouts in the order the daemon prefers them, as they appear in file names. */
static const char *const preferred[] = { "i2_s", "tq2_0", "tq1_0" };

static int is_gguf(const char *name)
{
	size_t len = strlen(name);
	return len > 5 && strcasecmp(name + len - 5, ".gguf") == 0;
}

/* Does name contain tag, in any case? */
static int names_layout(const char *name, const char *tag)
{
	size_t tag_len = strlen(tag);
	for (const char *p = name; *p; p++)
		if (strncasecmp(p, tag, tag_len) == 0)
			return 1;
	return 0;
}

/* The GGUF names, comma-separated, for a message (" ..." at the end when they do not fit). */
static void list_ggufs(const char *const *names, size_t n, char *out, size_t cap)
{
	size_t used = 0;
	out[0] = '\0';
	for (size_t i = 0; i < n && used + 1 < cap; i++) {
		if (!is_gguf(names[i]))
			continue;
		int w = snprintf(out + used, cap - used, "%s%s", used ? ", " : "", names[i]);
		if (w < 0 || (size_t)w >= cap - used) {
			snprintf(out + (cap > 5 ? cap - 5 : 0), cap > 5 ? 5 : cap, " ...");
			return;
		}
		used += (size_t)w;
	}
}

int hub_choose_gguf(const char *const *names, size_t n, const char *repo, const char *where,
		    size_t *chosen, char *err, size_t err_cap)
{
	size_t n_gguf = 0, last = 0;
	for (size_t i = 0; i < n; i++)
		if (is_gguf(names[i])) {
			n_gguf++;
			last = i;
		}
	if (n_gguf == 0)
		return hub_fail(err, err_cap, -ENOENT, "%s has no GGUF file %s", repo, where);
	if (n_gguf == 1) {
		*chosen = last;
		return 0;
	}
	for (size_t p = 0; p < sizeof(preferred) / sizeof(preferred[0]); p++) {
		size_t hits = 0, hit = 0;
		for (size_t i = 0; i < n; i++)
			if (is_gguf(names[i]) && names_layout(names[i], preferred[p])) {
				hits++;
				hit = i;
			}
		if (hits == 1) {
			*chosen = hit;
			return 0;
		}
		if (hits > 1)
			break; /* two of the best layout: only the user can say which */
	}
	char list[1536];
	list_ggufs(names, n, list, sizeof(list));
	return hub_fail(err, err_cap, -ENOENT,
			"%s has %zu GGUF files %s, and no single I2_S, TQ2_0 or TQ1_0 one to prefer: "
			"name one, as %s:FILE. The files: %s", repo, n_gguf, where, repo, list);
}
