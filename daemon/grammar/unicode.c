/* SPDX-License-Identifier: MIT */
/*
 * unicode.c — the code points of a Unicode property (\p{L}, \p{Greek}, \p{Nd}...), as PCRE2
 * knows them: PCRE2 is already linked and carries the Unicode tables, so rather than a copy of
 * them here, every scalar value is laid out in order as one UTF-8 subject and `\p{NAME}+` is
 * matched along it; each match is a run of consecutive code points, i.e. a range. Done once per
 * property per process (a few tens of milliseconds), then kept.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "unicode.h"

#include <errno.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct property {
	struct property *next;
	char name[48];
	uint32_t n;
	uint32_t ranges[][2];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct property *known;

/* Every scalar value in order, as UTF-8. */
static uint8_t *all_scalars(size_t *len)
{
	size_t cap = 0x80 + 0x780 * 2 + (0x10000 - 0x800 - 0x800) * 3 + 0x100000 * 4;
	uint8_t *s = malloc(cap), *p = s;
	if (!s)
		return NULL;
	for (uint32_t cp = 0; cp <= GR_MAX_CP; cp++) {
		if (cp >= 0xD800 && cp <= 0xDFFF)
			continue;
		p += gr_utf8_encode(cp, p);
	}
	*len = (size_t)(p - s);
	return s;
}

static int valid_name(const char *name, size_t len)
{
	if (len == 0 || len >= sizeof(((struct property *)0)->name))
		return 0;
	for (size_t i = 0; i < len; i++) {
		char ch = name[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		      ch == '_' || ch == ' ' || ch == '-' || ch == '&' || ch == '='))
			return 0;
	}
	return 1;
}

/* The runs of the property along the subject. NULL with *bad set when PCRE2 does not know it. */
static struct property *enumerate(const char *name, size_t len, int *bad)
{
	char pattern[64];
	memcpy(pattern, "\\p{", 3);
	memcpy(pattern + 3, name, len);
	memcpy(pattern + 3 + len, "}+", 3);
	int errcode;
	PCRE2_SIZE erroff;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF,
				       &errcode, &erroff, NULL);
	if (!re) {
		*bad = 1;
		return NULL;
	}
	pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* faster where PCRE2 has a JIT; optional */
	size_t n_subject = 0;
	uint8_t *subject = all_scalars(&n_subject);
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
	uint32_t cap = 64, n = 0;
	struct property *p = malloc(sizeof(*p) + cap * sizeof(p->ranges[0]));
	if (!subject || !md || !p)
		goto fail;
	for (PCRE2_SIZE at = 0; at < n_subject;) {
		int rc = pcre2_match(re, subject, n_subject, at, PCRE2_NO_UTF_CHECK, md, NULL);
		if (rc < 0)
			break;
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
		uint32_t l;
		uint32_t lo = (uint32_t)gr_utf8_decode(subject + ov[0], n_subject - ov[0], &l);
		PCRE2_SIZE last = ov[1] - 1;
		while ((subject[last] & 0xC0) == 0x80)
			last--;
		uint32_t hi = (uint32_t)gr_utf8_decode(subject + last, n_subject - last, &l);
		if (n == cap) {
			cap *= 2;
			struct property *q = realloc(p, sizeof(*p) + cap * sizeof(p->ranges[0]));
			if (!q)
				goto fail;
			p = q;
		}
		/* A run may cross the surrogates' gap: that is still one run of scalars. */
		p->ranges[n][0] = lo;
		p->ranges[n][1] = hi;
		n++;
		at = ov[1];
	}
	p->n = n;
	memcpy(p->name, name, len);
	p->name[len] = 0;
	free(subject);
	pcre2_match_data_free(md);
	pcre2_code_free(re);
	return p;
fail:
	free(p);
	free(subject);
	pcre2_match_data_free(md);
	pcre2_code_free(re);
	return NULL;
}

int gr_unicode_property(struct gr_ctx *c, const char *name, size_t len, struct gr_cpset *out)
{
	if (!valid_name(name, len))
		return gr_fail(c, -EINVAL, "\"\\p{%.*s}\" is not a Unicode property name",
			       (int)(len < 40 ? len : 40), name);
	pthread_mutex_lock(&lock);
	struct property *p = known;
	while (p && (strlen(p->name) != len || memcmp(p->name, name, len)))
		p = p->next;
	int bad = 0;
	if (!p && (p = enumerate(name, len, &bad))) {
		p->next = known;
		known = p;
	}
	pthread_mutex_unlock(&lock);
	if (bad)
		return gr_fail(c, -EINVAL, "\"\\p{%.*s}\" is not a Unicode property PCRE2 knows",
			       (int)len, name);
	if (!p)
		return gr_fail(c, -ENOMEM, "out of memory enumerating \\p{%.*s}", (int)len, name);
	for (uint32_t i = 0; i < p->n; i++)
		if (gr_cpset_add(c, out, p->ranges[i][0], p->ranges[i][1]))
			return -1;
	return 0;
}
