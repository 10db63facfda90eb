/* SPDX-License-Identifier: MIT */
/*
 * gguf_info.c — `bitnet-model info`: what a GGUF file holds, as key=value lines.
 */
#include "gguf_info.h"

#include "../daemon/model/gguf.h"
#include "quant.h"

#include <stdio.h>
#include <stdlib.h>

/* Strings come from the file: print control bytes and backslashes escaped so that one value
 * stays on one line. */
static void print_str(struct bn_gguf_str s)
{
	for (uint64_t i = 0; i < s.len; i++) {
		unsigned char ch = (unsigned char)s.ptr[i];
		if (ch < 0x20 || ch == 0x7f || ch == '\\')
			printf("\\x%02x", ch);
		else
			putchar(ch);
	}
}

/* The shortest decimal that reads back as the same float: 1e-05, not 9.99999975e-06. */
static void print_f32(double v)
{
	char buf[32];
	for (int prec = 6; prec <= 9; prec++) {
		snprintf(buf, sizeof(buf), "%.*g", prec, v);
		if ((float)strtod(buf, NULL) == (float)v)
			break;
	}
	fputs(buf, stdout);
}

static void print_kv(const struct bn_gguf_kv *kv)
{
	print_str(kv->key);
	putchar('=');
	switch (kv->type) {
	case BN_GGUF_STRING: print_str(kv->v.str); break;
	case BN_GGUF_FLOAT32: print_f32(kv->v.f64); break;
	case BN_GGUF_FLOAT64: printf("%.17g", kv->v.f64); break;
	case BN_GGUF_INT8:
	case BN_GGUF_INT16:
	case BN_GGUF_INT32:
	case BN_GGUF_INT64: printf("%lld", (long long)kv->v.i64); break;
	case BN_GGUF_ARRAY: printf("[%llu]", (unsigned long long)kv->v.arr.n); break;
	default: printf("%llu", (unsigned long long)kv->v.u64); break; /* unsigned, bool */
	}
	putchar('\n');
}

static void print_tensor(const struct bn_gguf_tensor *t)
{
	const char *type = bn_type_name(t->type);
	printf("tensor=");
	print_str(t->name);
	if (type)
		printf(" %s ", type);
	else
		printf(" type%u ", t->type);
	for (uint32_t d = 0; d < t->n_dims; d++)
		printf("%s%llu", d ? "x" : "", (unsigned long long)t->ne[d]);
	printf(" %llu\n", (unsigned long long)t->size);
}

int gguf_info_print(const char *path)
{
	struct bn_gguf g;
	struct bn_gguf_str arch = { "", 0 };
	char err[BN_GGUF_ERR_LEN];
	uint64_t total = 0;
	if (bn_gguf_open(&g, path, err)) {
		fprintf(stderr, "bitnet-model: %s\n", err);
		return 1;
	}
	bn_gguf_get_str(&g, "general.architecture", &arch);
	printf("file=%s\narchitecture=", path);
	print_str(arch);
	printf("\ngguf_version=%u\nalignment=%u\n", g.version, g.alignment);
	for (uint64_t i = 0; i < g.n_kv; i++)
		print_kv(&g.kv[i]);
	printf("tensor_count=%llu\n", (unsigned long long)g.n_tensors);
	for (uint64_t i = 0; i < g.n_tensors; i++) {
		print_tensor(&g.tensors[i]);
		total += g.tensors[i].size;
	}
	printf("tensor_bytes=%llu\nfile_bytes=%zu\n", (unsigned long long)total, g.size);
	bn_gguf_close(&g);
	return 0;
}
