/* SPDX-License-Identifier: MIT */
#include "cuda_variant.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
	const char *name;
	uint32_t flags;
} features[] = {
	{ "graph", BN_CUDA_K_GRAPH }, { "fused", BN_CUDA_K_FUSED }, { "gemv", BN_CUDA_K_GEMV },
	{ "mma", BN_CUDA_K_MMA },     { "split", BN_CUDA_K_SPLIT }, { "fast", BN_CUDA_K_FAST },
	{ "all", BN_CUDA_K_ALL },
};

/* One feature, `len` bytes at s; split may carry =N. */
static int parse_one(const char *s, size_t len, struct bn_cuda_kernels *k)
{
	const char *eq = memchr(s, '=', len);
	size_t name_len = eq ? (size_t)(eq - s) : len;
	if (eq) {
		if (name_len != 5 || memcmp(s, "split", 5) != 0)
			return -EINVAL;
		char num[16];
		size_t n = len - name_len - 1;
		if (n == 0 || n >= sizeof(num))
			return -EINVAL;
		memcpy(num, eq + 1, n);
		num[n] = 0;
		char *end;
		unsigned long v = strtoul(num, &end, 10);
		if (*end || v < 16 || v > 65536 || (v & (v - 1)))
			return -EINVAL;
		k->split = (uint32_t)v;
		k->flags |= BN_CUDA_K_SPLIT;
		return 0;
	}
	for (size_t i = 0; i < sizeof(features) / sizeof(features[0]); i++)
		if (strlen(features[i].name) == len && memcmp(s, features[i].name, len) == 0) {
			k->flags |= features[i].flags;
			return 0;
		}
	return -EINVAL;
}

int bn_cuda_kernels_parse(const char *text, struct bn_cuda_kernels *k)
{
	*k = (struct bn_cuda_kernels){ .split = BN_CUDA_SPLIT_DEFAULT };
	if (!text || !*text)
		text = BN_CUDA_KERNELS_DEFAULT;
	if (strcmp(text, "base") == 0)
		return 0;
	for (const char *s = text;;) {
		size_t len = strcspn(s, ",+");
		if (len == 0 || parse_one(s, len, k) != 0)
			return -EINVAL;
		if (!s[len])
			return 0;
		s += len + 1;
	}
}

void bn_cuda_kernels_name(const struct bn_cuda_kernels *k, char *buf, size_t cap)
{
	size_t at = 0;
	buf[0] = 0;
	if (!k->flags) {
		snprintf(buf, cap, "base");
		return;
	}
	for (size_t i = 0; i < 5; i++) { /* the single features, in order */
		if (!(k->flags & features[i].flags))
			continue;
		int n = features[i].flags == BN_CUDA_K_SPLIT && k->split != BN_CUDA_SPLIT_DEFAULT
				? snprintf(buf + at, cap - at, "%ssplit=%u", at ? "," : "", k->split)
				: snprintf(buf + at, cap - at, "%s%s", at ? "," : "", features[i].name);
		if (n < 0 || (size_t)n >= cap - at)
			return;
		at += (size_t)n;
	}
}
