/* SPDX-License-Identifier: MIT */
/*
 * fuzz_gguf.c — the libFuzzer target for the GGUF reader. Every input is parsed; one that
 * parses is then walked whole (every getter on every key, every array element, the first and
 * last byte of every tensor), so a bound the parser failed to check shows up as a read outside
 * the input, which ASan reports. Invariants the reader promises are checked with a trap. A
 * parsed file then goes through what the loader reads from the metadata alone (model_config.c:
 * the configuration, and whether type 36 in a llama file is bitnet.cpp's I2_S): one line of
 * error, or a configuration that keeps the promises forward.c relies on.
 */
#include "../daemon/model/gguf.h"
#include "../daemon/model/model.h"
#include "quant.h"

#include <math.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Bytes read land here so the compiler cannot drop the reads. */
static volatile uint8_t touched;

#define CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

static void touch(const void *p, uint64_t len)
{
	if (len > 0) {
		touched ^= ((const uint8_t *)p)[0];
		touched ^= ((const uint8_t *)p)[len - 1];
	}
}

static void touch_str(struct bn_gguf_str s)
{
	touch(s.ptr, s.len);
}

static void walk_array(const struct bn_gguf_kv *kv)
{
	struct bn_gguf_str s;
	double v;
	for (uint64_t i = 0; i < kv->v.arr.n; i++) {
		if (kv->v.arr.type == BN_GGUF_STRING) {
			CHECK(bn_gguf_arr_str(kv, i, &s) == 0);
			touch_str(s);
		} else {
			CHECK(bn_gguf_arr_num(kv, i, &v) == 0);
		}
	}
	CHECK(bn_gguf_arr_str(kv, kv->v.arr.n, &s) < 0);
	CHECK(bn_gguf_arr_num(kv, kv->v.arr.n, &v) < 0);
}

/* The getters take C strings: a key with a NUL inside cannot be named, only walked. */
static char *key_as_c_string(struct bn_gguf_str key)
{
	if (memchr(key.ptr, '\0', key.len))
		return NULL;
	char *c = malloc(key.len + 1);
	if (c) {
		memcpy(c, key.ptr, key.len);
		c[key.len] = '\0';
	}
	return c;
}

static void walk_kv(const struct bn_gguf *g, const struct bn_gguf_kv *kv)
{
	uint32_t u32;
	uint64_t u64;
	float f;
	int b;
	struct bn_gguf_str s;

	touch_str(kv->key);
	if (kv->type == BN_GGUF_STRING)
		touch_str(kv->v.str);
	if (kv->type == BN_GGUF_ARRAY)
		walk_array(kv);
	char *key = key_as_c_string(kv->key);
	if (!key)
		return;
	CHECK(bn_gguf_find_kv(g, key) == kv);  /* keys are unique */
	(void)bn_gguf_get_u32(g, key, &u32);
	(void)bn_gguf_get_u64(g, key, &u64);
	(void)bn_gguf_get_f32(g, key, &f);
	(void)bn_gguf_get_bool(g, key, &b);
	if (bn_gguf_get_str(g, key, &s) == 0)
		touch_str(s);
	free(key);
}

static void walk_tensor(const struct bn_gguf *g, const struct bn_gguf_tensor *t)
{
	touch_str(t->name);
	CHECK(t->n_dims <= BN_GGUF_MAX_DIMS); /* 0 is a scalar */
	CHECK(t->size == bn_tensor_bytes(t->type, t->n_elements) && t->size > 0);
	CHECK(t->offset % g->alignment == 0);
	CHECK(t->data >= g->base && t->size <= g->size &&
	      (size_t)(t->data - g->base) <= g->size - t->size);
	touch(t->data, t->size);
	char *name = key_as_c_string(t->name);
	if (name) {
		CHECK(bn_gguf_find_tensor(g, name) == t);  /* names are unique */
		free(name);
	}
}

/* The loader's configuration of a parsed file: refused in one line, or usable. */
static void read_config(const struct bn_gguf *g)
{
	struct bn_model_config c;
	char err[BN_MODEL_ERR_LEN];
	if (bn_model_read_config(g, NULL, &c, err) < 0 || bn_model_check_i2_s(g, &c, err) < 0) {
		CHECK(err[0] != '\0' && strchr(err, '\n') == NULL);
		return;
	}
	CHECK(c.n_embd && c.n_layer && c.n_head && c.n_ff && c.head_dim && c.n_head_kv);
	CHECK(c.n_head % c.n_head_kv == 0);
	CHECK(c.rope_dim && c.rope_dim <= c.head_dim && c.rope_dim % 2 == 0);
	CHECK(c.rope_freq_scale > 0.0f && isfinite(c.rope_freq_scale));
	CHECK(c.act == BN_ACT_SILU || c.act == BN_ACT_RELU2 || c.act == BN_ACT_GELU);
	CHECK(c.act_why[0] != '\0');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct bn_gguf g;
	char err[BN_GGUF_ERR_LEN];
	if (bn_gguf_parse(&g, data, size, "fuzz", err) < 0) {
		CHECK(err[0] != '\0' && strchr(err, '\n') == NULL);
		bn_gguf_close(&g);  /* must be harmless after a failure */
		return 0;
	}
	CHECK(g.alignment != 0 && (g.alignment & (g.alignment - 1)) == 0);
	for (uint64_t i = 0; i < g.n_kv; i++)
		walk_kv(&g, &g.kv[i]);
	for (uint64_t i = 0; i < g.n_tensors; i++)
		walk_tensor(&g, &g.tensors[i]);
	read_config(&g);
	bn_gguf_close(&g);
	return 0;
}
