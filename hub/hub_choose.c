/* SPDX-License-Identifier: MIT */
/*
 * hub_choose.c — which GGUF file of a repository a name without a file means. Repositories
 * often hold one model in several quantizations; the daemon runs the ternary layouts natively
 * (I2_S fastest, then TQ2_0, then TQ1_0), and anything else it would have to convert, so a
 * name alone picks those, and otherwise asks the user to say which. bitnet.cpp's TL1 and TL2
 * files (ggml-model-tl1.gguf, as its converter names them) are never chosen: no program but the
 * bitnet.cpp build that wrote one can read it (daemon/model/gguf.c says why), so a repository
 * of an F16 file and its TL conversions means the F16 file.
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

/* bitnet.cpp's tiled layouts, as a word of the name: "ggml-model-tl2.gguf", "x_TL1-y.gguf". */
static int names_tiled(const char *name)
{
	static const char *const tags[] = { "tl1", "tl2" };
	for (size_t t = 0; t < 2; t++)
		for (const char *p = name; *p; p++) {
			if (strncasecmp(p, tags[t], 3) != 0)
				continue;
			int starts = p == name || strchr("-_.", p[-1]);
			int ends = p[3] == '\0' || strchr("-_.", p[3]);
			if (starts && ends)
				return 1;
		}
	return 0;
}

/* A GGUF file the daemon could read: not one of bitnet.cpp's tiled layouts. */
static int is_readable_gguf(const char *name)
{
	return is_gguf(name) && !names_tiled(name);
}

/* The GGUF names (only the readable ones, or all), comma-separated, for a message (" ..." at
 * the end when they do not fit). */
static void list_ggufs(const char *const *names, size_t n, int readable, char *out, size_t cap)
{
	size_t used = 0;
	out[0] = '\0';
	for (size_t i = 0; i < n && used + 1 < cap; i++) {
		if (!(readable ? is_readable_gguf(names[i]) : is_gguf(names[i])))
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
	size_t n_gguf = 0, n_readable = 0, last = 0;
	for (size_t i = 0; i < n; i++) {
		n_gguf += is_gguf(names[i]) != 0;
		if (is_readable_gguf(names[i])) {
			n_readable++;
			last = i;
		}
	}
	if (n_gguf == 0)
		return hub_fail(err, err_cap, -ENOENT, "%s has no GGUF file %s", repo, where);
	if (n_readable == 0) {
		char list[1536];
		list_ggufs(names, n, 0, list, sizeof(list));
		return hub_fail(err, err_cap, -ENOENT,
				"%s has only bitnet.cpp TL1/TL2 GGUF files %s (%s), which bitnetd "
				"cannot read: their tile sizes are not in the file. Convert the model's "
				"Hugging Face checkpoint to I2_S with bitnet.cpp: python "
				"utils/convert-hf-to-gguf-bitnet.py MODEL_DIR --outtype i2_s", repo, where,
				list);
	}
	if (n_readable == 1) {
		*chosen = last;
		return 0;
	}
	for (size_t p = 0; p < sizeof(preferred) / sizeof(preferred[0]); p++) {
		size_t hits = 0, hit = 0;
		for (size_t i = 0; i < n; i++)
			if (is_readable_gguf(names[i]) && names_layout(names[i], preferred[p])) {
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
	list_ggufs(names, n, 1, list, sizeof(list));
	return hub_fail(err, err_cap, -ENOENT,
			"%s has %zu GGUF files %s, and no single I2_S, TQ2_0 or TQ1_0 one to prefer: "
			"name one, as %s:FILE. The files: %s", repo, n_readable, where, repo, list);
}
