/* SPDX-License-Identifier: MIT */
/*
 * The GGUF reader and writer: round trips of every metadata type and several tensor types
 * (v2 and v3, default and other alignments), then a corpus of malformed files, each made by
 * corrupting one field of a valid file from the writer and refused with a precise message.
 * Every parse reads from an allocation of exactly the file's size, so under ASan a read past
 * the end fails the test.
 */
#include "../daemon/model/gguf.h"
#include "../daemon/model/model.h"
#include "../tools/gguf_write.h"
#include "quant.h"

#include "testutil.h"

#include "ckassert.h"
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LABEL "t.gguf"

struct file {
	uint8_t *data;
	size_t size;
};

/* ------------------------------------------------------------------------------------------ */
/* Helpers                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static struct file finish(struct bn_gguf_writer *w)
{
	struct file f;
	ck_assert_int_eq(bn_gguf_write_mem(w, &f.data, &f.size), 0);
	bn_gguf_writer_free(w);
	return f;
}

/* Offset of the first occurrence of s in the file (keys and names are chosen unique). */
static size_t find(const struct file *f, const char *s)
{
	size_t n = strlen(s);
	for (size_t i = 0; i + n <= f->size; i++)
		if (memcmp(f->data + i, s, n) == 0)
			return i;
	ck_abort_msg("'%s' not found in the file", s);
	return 0;
}

static uint32_t get32(const struct file *f, size_t at)
{
	return (uint32_t)f->data[at] | (uint32_t)f->data[at + 1] << 8 |
	       (uint32_t)f->data[at + 2] << 16 | (uint32_t)f->data[at + 3] << 24;
}

static void put32(struct file *f, size_t at, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		f->data[at + i] = (uint8_t)(v >> (8 * i));
}

static void put64(struct file *f, size_t at, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		f->data[at + i] = (uint8_t)(v >> (8 * i));
}

/* Where a key's value type and value lie. */
static size_t kv_type_at(const struct file *f, const char *key)
{
	return find(f, key) + strlen(key);
}

static size_t kv_value_at(const struct file *f, const char *key)
{
	return kv_type_at(f, key) + 4;
}

/* Where the fields of a tensor's directory entry lie. */
struct info_at {
	size_t n_dims;
	size_t ne;      /* ne[0]; ne[d] is 8 * d further */
	size_t type;
	size_t offset;
};

static struct info_at tensor_info_at(const struct file *f, const char *name)
{
	struct info_at at;
	at.n_dims = find(f, name) + strlen(name);
	at.ne = at.n_dims + 4;
	at.type = at.ne + 8 * get32(f, at.n_dims);
	at.offset = at.type + 4;
	return at;
}

/* Parses a copy of the first `size` bytes held in an allocation of exactly that size. */
static int parse_exact(const struct file *f, size_t size, struct bn_gguf *g, char *err,
		       uint8_t **copy)
{
	*copy = malloc(size ? size : 1);
	ck_assert_ptr_nonnull(*copy);
	memcpy(*copy, f->data, size);
	return bn_gguf_parse(g, *copy, size, LABEL, err);
}

static void assert_one_line_about_label(const char *err)
{
	ck_assert_msg(strncmp(err, LABEL ": ", strlen(LABEL) + 2) == 0,
		      "error '%s' does not start with the label", err);
	ck_assert_msg(strchr(err, '\n') == NULL, "error '%s' is not one line", err);
	ck_assert_uint_gt(strlen(err), strlen(LABEL) + 2);
}

/* Parses the first `size` bytes of f and requires a refusal whose message contains `want`. */
static void expect_refused_at(const struct file *f, size_t size, const char *want)
{
	struct bn_gguf g;
	char err[BN_GGUF_ERR_LEN];
	uint8_t *copy;
	int rc = parse_exact(f, size, &g, err, &copy);
	ck_assert_msg(rc == -1, "parse of %zu bytes succeeded; expected '%s'", size, want);
	ck_assert_msg(strstr(err, want) != NULL, "error '%s' lacks '%s'", err, want);
	assert_one_line_about_label(err);
	ck_assert_ptr_null(g.kv);     /* a failed parse leaves nothing to free */
	ck_assert_ptr_null(g.tensors);
	bn_gguf_close(&g);
	free(copy);
}

static void expect_refused(const struct file *f, const char *want)
{
	expect_refused_at(f, f->size, want);
}

static void fill_pattern(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed * 37u + i * 11u + (i >> 8));
}

static void add_tensor(struct bn_gguf_writer *w, const char *name, uint32_t type,
		       uint32_t n_dims, const uint64_t *ne, unsigned seed)
{
	uint64_t n = 1;
	for (uint32_t d = 0; d < n_dims; d++)
		n *= ne[d];
	uint64_t size = bn_tensor_bytes(type, n);
	ck_assert_uint_gt(size, 0);
	uint8_t *data = malloc(size);
	fill_pattern(data, size, seed);
	ck_assert_int_eq(bn_gguf_add_tensor(w, name, type, n_dims, ne, data, size), 0);
	free(data);
}

/*
 * The file the malformed corpus corrupts, v3 with the default alignment. Pairs of names that
 * differ in their last byte (key.aaaa/key.aaab, t.aaaa/t.aaab) become duplicates with one
 * byte changed. Data: t.quant [0, 132) padded to 160, t.aaaa [160, 192), t.aaab [192, 224):
 * the file ends where the last tensor ends, so every shorter length is truncated.
 */
static struct file corruptible(void)
{
	struct bn_gguf_writer *w = bn_gguf_writer_new(3, 32);
	static const char *const toks[] = { "a", "bc", "def" };
	static const int32_t nums[] = { 1, 2, 3 };
	ck_assert_int_eq(bn_gguf_add_str(w, "general.name", "tiny"), 0);
	ck_assert_int_eq(bn_gguf_add_u32(w, "key.aaaa", 7), 0);
	ck_assert_int_eq(bn_gguf_add_u32(w, "key.aaab", 8), 0);
	ck_assert_int_eq(bn_gguf_add_arr_str(w, "tok.list", toks, 3), 0);
	ck_assert_int_eq(bn_gguf_add_arr_i32(w, "num.list", nums, 3), 0);
	add_tensor(w, "t.quant", BN_TYPE_TQ2_0, 2, (const uint64_t[]){ 256, 2 }, 1);
	add_tensor(w, "t.aaaa", BN_TYPE_F32, 2, (const uint64_t[]){ 4, 2 }, 2);
	add_tensor(w, "t.aaab", BN_TYPE_F32, 1, (const uint64_t[]){ 8 }, 3);
	return finish(w);
}

/* The same shape with alignment 64, so it carries general.alignment. */
static struct file aligned64(void)
{
	struct bn_gguf_writer *w = bn_gguf_writer_new(3, 64);
	ck_assert_int_eq(bn_gguf_add_str(w, "general.name", "tiny"), 0);
	add_tensor(w, "t.aaaa", BN_TYPE_F32, 1, (const uint64_t[]){ 16 }, 1);
	return finish(w);
}

/* ------------------------------------------------------------------------------------------ */
/* Round trip                                                                                 */
/* ------------------------------------------------------------------------------------------ */

struct round_trip_config {
	uint32_t version;
	uint32_t alignment;
};

static const struct round_trip_config round_trip_configs[] = {
	{ 3, 32 }, { 2, 32 }, { 3, 64 }, { 2, 128 },
};

struct tensor_spec {
	const char *name;
	uint32_t type;
	uint32_t n_dims;
	uint64_t ne[4];
};

static const struct tensor_spec tensor_specs[] = {
	{ "f32.matrix", BN_TYPE_F32, 2, { 8, 2 } },
	{ "f16.vector", BN_TYPE_F16, 1, { 16 } },
	{ "q8_0.matrix", BN_TYPE_Q8_0, 2, { 64, 2 } },
	{ "tq2_0.matrix", BN_TYPE_TQ2_0, 2, { 256, 2 } },
	{ "i2_s.matrix", BN_TYPE_I2_S, 2, { 128, 3 } },
	{ "f32.4d", BN_TYPE_F32, 4, { 1, 2, 1, 3 } },
};
#define N_TENSOR_SPECS (sizeof(tensor_specs) / sizeof(tensor_specs[0]))

static const char *const str_elems[] = { "", "hello", "w\xc3\xb6rld" };
static const float f32_elems[] = { 0.5f, -2.0f, 1e10f };
static const int32_t i32_elems[] = { -1, 0, 7 };
static const uint8_t u8_elems[] = { 1, 2, 255 };
static const int16_t i16_elems[] = { -32768, 0, 32767 };
static const uint64_t u64_elems[] = { 0, UINT64_C(1) << 63, UINT64_MAX };
static const int64_t i64_elems[] = { INT64_MIN, -1, INT64_MAX };
static const double f64_elems[] = { -0.125, 3.0, 1e300 };
static const uint8_t bool_elems[] = { 1, 0, 1 };
#define N_KV_WRITTEN 28

static void add_every_scalar(struct bn_gguf_writer *w)
{
	uint8_t u8 = 200, b = 1;
	int8_t i8 = -100;
	uint16_t u16 = 60000;
	int16_t i16 = -30000;
	int64_t i64 = -(INT64_C(1) << 40);
	double f64 = 1e300, f64_small = 0.25;
	ck_assert_int_eq(bn_gguf_add_scalar(w, "s.u8", BN_GGUF_UINT8, &u8), 0);
	ck_assert_int_eq(bn_gguf_add_scalar(w, "s.i8", BN_GGUF_INT8, &i8), 0);
	ck_assert_int_eq(bn_gguf_add_scalar(w, "s.u16", BN_GGUF_UINT16, &u16), 0);
	ck_assert_int_eq(bn_gguf_add_scalar(w, "s.i16", BN_GGUF_INT16, &i16), 0);
	ck_assert_int_eq(bn_gguf_add_scalar(w, "s.bool", BN_GGUF_BOOL, &b), 0);
	ck_assert_int_eq(bn_gguf_add_scalar(w, "s.i64", BN_GGUF_INT64, &i64), 0);
	ck_assert_int_eq(bn_gguf_add_scalar(w, "s.f64", BN_GGUF_FLOAT64, &f64), 0);
	ck_assert_int_eq(bn_gguf_add_scalar(w, "s.f64.small", BN_GGUF_FLOAT64, &f64_small), 0);
	ck_assert_int_eq(bn_gguf_add_u32(w, "s.u32", 4000000000u), 0);
	ck_assert_int_eq(bn_gguf_add_i32(w, "s.i32", -2000000000), 0);
	ck_assert_int_eq(bn_gguf_add_i32(w, "s.i32.pos", 12345), 0);
	ck_assert_int_eq(bn_gguf_add_u64(w, "s.u64", (UINT64_C(1) << 40) + 3), 0);
	ck_assert_int_eq(bn_gguf_add_u64(w, "s.u64.small", 77), 0);
	ck_assert_int_eq(bn_gguf_add_f32(w, "s.f32", 1.5f), 0);
	ck_assert_int_eq(bn_gguf_add_bool(w, "s.false", 0), 0);
	ck_assert_int_eq(bn_gguf_add_str(w, "general.name", "round trip \xe2\x9c\x93"), 0);
	ck_assert_int_eq(bn_gguf_add_str(w, "s.empty", ""), 0);
}

static void add_every_array(struct bn_gguf_writer *w)
{
	ck_assert_int_eq(bn_gguf_add_arr_str(w, "a.str", str_elems, 3), 0);
	ck_assert_int_eq(bn_gguf_add_arr_f32(w, "a.f32", f32_elems, 3), 0);
	ck_assert_int_eq(bn_gguf_add_arr_i32(w, "a.i32", i32_elems, 3), 0);
	ck_assert_int_eq(bn_gguf_add_arr(w, "a.u8", BN_GGUF_UINT8, u8_elems, 3), 0);
	ck_assert_int_eq(bn_gguf_add_arr(w, "a.i16", BN_GGUF_INT16, i16_elems, 3), 0);
	ck_assert_int_eq(bn_gguf_add_arr(w, "a.u64", BN_GGUF_UINT64, u64_elems, 3), 0);
	ck_assert_int_eq(bn_gguf_add_arr(w, "a.i64", BN_GGUF_INT64, i64_elems, 3), 0);
	ck_assert_int_eq(bn_gguf_add_arr(w, "a.f64", BN_GGUF_FLOAT64, f64_elems, 3), 0);
	ck_assert_int_eq(bn_gguf_add_arr(w, "a.bool", BN_GGUF_BOOL, bool_elems, 3), 0);
	ck_assert_int_eq(bn_gguf_add_arr(w, "a.empty", BN_GGUF_UINT32, NULL, 0), 0);
	ck_assert_int_eq(bn_gguf_add_arr_str(w, "a.str.empty", NULL, 0), 0);
}

static struct bn_gguf_writer *round_trip_writer(const struct round_trip_config *cfg)
{
	struct bn_gguf_writer *w = bn_gguf_writer_new(cfg->version, cfg->alignment);
	ck_assert_ptr_nonnull(w);
	add_every_scalar(w);
	add_every_array(w);
	for (size_t i = 0; i < N_TENSOR_SPECS; i++)
		add_tensor(w, tensor_specs[i].name, tensor_specs[i].type, tensor_specs[i].n_dims,
			   tensor_specs[i].ne, (unsigned)i);
	return w;
}

static void check_scalars(const struct bn_gguf *g)
{
	const struct bn_gguf_kv *kv;
	uint32_t u32;
	uint64_t u64;
	float f32;
	int b;
	struct bn_gguf_str s;

	kv = bn_gguf_find_kv(g, "s.u8");
	ck_assert_ptr_nonnull(kv);
	ck_assert_uint_eq(kv->type, BN_GGUF_UINT8);
	ck_assert_uint_eq(kv->v.u64, 200);
	kv = bn_gguf_find_kv(g, "s.i8");
	ck_assert_uint_eq(kv->type, BN_GGUF_INT8);
	ck_assert_int_eq(kv->v.i64, -100);
	kv = bn_gguf_find_kv(g, "s.u16");
	ck_assert_uint_eq(kv->type, BN_GGUF_UINT16);
	ck_assert_uint_eq(kv->v.u64, 60000);
	kv = bn_gguf_find_kv(g, "s.i16");
	ck_assert_uint_eq(kv->type, BN_GGUF_INT16);
	ck_assert_int_eq(kv->v.i64, -30000);
	kv = bn_gguf_find_kv(g, "s.i32");
	ck_assert_uint_eq(kv->type, BN_GGUF_INT32);
	ck_assert_int_eq(kv->v.i64, -2000000000);
	kv = bn_gguf_find_kv(g, "s.i64");
	ck_assert_uint_eq(kv->type, BN_GGUF_INT64);
	ck_assert_int_eq(kv->v.i64, -(INT64_C(1) << 40));
	kv = bn_gguf_find_kv(g, "s.f64");
	ck_assert_uint_eq(kv->type, BN_GGUF_FLOAT64);
	ck_assert(kv->v.f64 == 1e300);

	ck_assert_int_eq(bn_gguf_get_u32(g, "s.u8", &u32), 0);
	ck_assert_uint_eq(u32, 200);
	ck_assert_int_eq(bn_gguf_get_u32(g, "s.u32", &u32), 0);
	ck_assert_uint_eq(u32, 4000000000u);
	ck_assert_int_eq(bn_gguf_get_u32(g, "s.i32.pos", &u32), 0);
	ck_assert_uint_eq(u32, 12345);
	ck_assert_int_eq(bn_gguf_get_u32(g, "s.u64.small", &u32), 0);
	ck_assert_uint_eq(u32, 77);
	ck_assert_int_eq(bn_gguf_get_u32(g, "s.i8", &u32), -EINVAL);     /* negative */
	ck_assert_int_eq(bn_gguf_get_u32(g, "s.u64", &u32), -EINVAL);    /* too big */
	ck_assert_int_eq(bn_gguf_get_u32(g, "s.f32", &u32), -EINVAL);    /* not an integer */
	ck_assert_int_eq(bn_gguf_get_u32(g, "s.bool", &u32), -EINVAL);
	ck_assert_int_eq(bn_gguf_get_u32(g, "missing", &u32), -ENOENT);
	ck_assert_int_eq(bn_gguf_get_u64(g, "s.u64", &u64), 0);
	ck_assert_uint_eq(u64, (UINT64_C(1) << 40) + 3);
	ck_assert_int_eq(bn_gguf_get_u64(g, "s.u16", &u64), 0);
	ck_assert_uint_eq(u64, 60000);
	ck_assert_int_eq(bn_gguf_get_u64(g, "s.i64", &u64), -EINVAL);
	ck_assert_int_eq(bn_gguf_get_u64(g, "general.name", &u64), -EINVAL);
	ck_assert_int_eq(bn_gguf_get_u64(g, "missing", &u64), -ENOENT);

	ck_assert_int_eq(bn_gguf_get_f32(g, "s.f32", &f32), 0);
	ck_assert(f32 == 1.5f);
	ck_assert_int_eq(bn_gguf_get_f32(g, "s.f64.small", &f32), 0);
	ck_assert(f32 == 0.25f);
	ck_assert_int_eq(bn_gguf_get_f32(g, "s.f64", &f32), -EINVAL);    /* beyond float */
	ck_assert_int_eq(bn_gguf_get_f32(g, "s.u32", &f32), -EINVAL);
	ck_assert_int_eq(bn_gguf_get_f32(g, "missing", &f32), -ENOENT);

	ck_assert_int_eq(bn_gguf_get_bool(g, "s.bool", &b), 0);
	ck_assert_int_eq(b, 1);
	ck_assert_int_eq(bn_gguf_get_bool(g, "s.false", &b), 0);
	ck_assert_int_eq(b, 0);
	ck_assert_int_eq(bn_gguf_get_bool(g, "s.u8", &b), -EINVAL);
	ck_assert_int_eq(bn_gguf_get_bool(g, "missing", &b), -ENOENT);

	ck_assert_int_eq(bn_gguf_get_str(g, "general.name", &s), 0);
	ck_assert(bn_gguf_str_eq(s, "round trip \xe2\x9c\x93"));
	ck_assert_int_eq(bn_gguf_get_str(g, "s.empty", &s), 0);
	ck_assert_uint_eq(s.len, 0);
	ck_assert_int_eq(bn_gguf_get_str(g, "s.u8", &s), -EINVAL);
	ck_assert_int_eq(bn_gguf_get_str(g, "a.str", &s), -EINVAL);
	ck_assert_int_eq(bn_gguf_get_str(g, "missing", &s), -ENOENT);
}

/* Element i of every numeric array against the values written. */
static void check_numeric_array(const struct bn_gguf *g, const char *key, uint32_t elem_type,
				const double *want, uint64_t n)
{
	const struct bn_gguf_kv *kv = bn_gguf_find_kv(g, key);
	double v;
	ck_assert_ptr_nonnull(kv);
	ck_assert_uint_eq(kv->type, BN_GGUF_ARRAY);
	ck_assert_uint_eq(kv->v.arr.type, elem_type);
	ck_assert_uint_eq(kv->v.arr.n, n);
	ck_assert_ptr_null(kv->v.arr.str_offsets);
	for (uint64_t i = 0; i < n; i++) {
		ck_assert_int_eq(bn_gguf_arr_num(kv, i, &v), 0);
		ck_assert_msg(v == want[i], "%s[%" PRIu64 "] = %g, want %g", key, i, v, want[i]);
	}
	ck_assert_int_eq(bn_gguf_arr_num(kv, n, &v), -ERANGE);
}

static void check_arrays(const struct bn_gguf *g)
{
	const struct bn_gguf_kv *kv = bn_gguf_find_kv(g, "a.str");
	struct bn_gguf_str s;
	double v;
	ck_assert_ptr_nonnull(kv);
	ck_assert_uint_eq(kv->v.arr.type, BN_GGUF_STRING);
	ck_assert_uint_eq(kv->v.arr.n, 3);
	for (uint64_t i = 0; i < 3; i++) {
		ck_assert_int_eq(bn_gguf_arr_str(kv, i, &s), 0);
		ck_assert(bn_gguf_str_eq(s, str_elems[i]));
	}
	ck_assert_int_eq(bn_gguf_arr_str(kv, 3, &s), -ERANGE);
	ck_assert_int_eq(bn_gguf_arr_num(kv, 0, &v), -EINVAL);
	ck_assert_int_eq(bn_gguf_arr_str(bn_gguf_find_kv(g, "a.f32"), 0, &s), -EINVAL);
	ck_assert_int_eq(bn_gguf_arr_num(bn_gguf_find_kv(g, "s.u8"), 0, &v), -EINVAL);
	ck_assert_int_eq(bn_gguf_arr_str(bn_gguf_find_kv(g, "a.str.empty"), 0, &s), -ERANGE);

	check_numeric_array(g, "a.f32", BN_GGUF_FLOAT32, (const double[]){ 0.5, -2, 1e10 }, 3);
	check_numeric_array(g, "a.i32", BN_GGUF_INT32, (const double[]){ -1, 0, 7 }, 3);
	check_numeric_array(g, "a.u8", BN_GGUF_UINT8, (const double[]){ 1, 2, 255 }, 3);
	check_numeric_array(g, "a.i16", BN_GGUF_INT16, (const double[]){ -32768, 0, 32767 }, 3);
	check_numeric_array(g, "a.u64", BN_GGUF_UINT64,
			    (const double[]){ 0, (double)(UINT64_C(1) << 63), (double)UINT64_MAX },
			    3);
	check_numeric_array(g, "a.i64", BN_GGUF_INT64,
			    (const double[]){ (double)INT64_MIN, -1, (double)INT64_MAX }, 3);
	check_numeric_array(g, "a.f64", BN_GGUF_FLOAT64, (const double[]){ -0.125, 3, 1e300 }, 3);
	check_numeric_array(g, "a.bool", BN_GGUF_BOOL, (const double[]){ 1, 0, 1 }, 3);
	check_numeric_array(g, "a.empty", BN_GGUF_UINT32, NULL, 0);
}

static void check_tensors(const struct bn_gguf *g)
{
	ck_assert_uint_eq(g->n_tensors, N_TENSOR_SPECS);
	ck_assert_uint_eq(g->data_offset % g->alignment, 0);
	ck_assert_ptr_null(bn_gguf_find_tensor(g, "missing"));
	for (size_t i = 0; i < N_TENSOR_SPECS; i++) {
		const struct tensor_spec *spec = &tensor_specs[i];
		const struct bn_gguf_tensor *t = bn_gguf_find_tensor(g, spec->name);
		ck_assert_ptr_nonnull(t);
		ck_assert_uint_eq(t->n_dims, spec->n_dims);
		uint64_t n = 1;
		for (uint32_t d = 0; d < BN_GGUF_MAX_DIMS; d++) {
			uint64_t want = d < spec->n_dims ? spec->ne[d] : 1;
			ck_assert_uint_eq(t->ne[d], want);
			n *= want;
		}
		ck_assert_uint_eq(t->n_elements, n);
		ck_assert_uint_eq(t->type, spec->type);
		ck_assert_uint_eq(t->size, bn_tensor_bytes(spec->type, n));
		ck_assert_uint_eq(t->offset % g->alignment, 0);
		ck_assert_ptr_eq(t->data, g->base + g->data_offset + t->offset);
		uint8_t *want = malloc(t->size);
		fill_pattern(want, t->size, (unsigned)i);
		ck_assert_int_eq(memcmp(t->data, want, t->size), 0);
		free(want);
	}
	/* I2_S: n/4 code bytes and a 32-byte scale block. */
	ck_assert_uint_eq(bn_gguf_find_tensor(g, "i2_s.matrix")->size, 384 / 4 + 32);
}

static void check_round_trip(const struct bn_gguf *g, const struct round_trip_config *cfg)
{
	int explicit_alignment = cfg->alignment != BN_GGUF_DEFAULT_ALIGNMENT;
	ck_assert_uint_eq(g->version, cfg->version);
	ck_assert_uint_eq(g->alignment, cfg->alignment);
	ck_assert_uint_eq(g->n_kv, N_KV_WRITTEN + explicit_alignment);
	ck_assert(!!bn_gguf_find_kv(g, "general.alignment") == explicit_alignment);
	check_scalars(g);
	check_arrays(g);
	check_tensors(g);
}

START_TEST(round_trip_in_memory)
{
	const struct round_trip_config *cfg = &round_trip_configs[_i];
	struct file f = finish(round_trip_writer(cfg));
	struct bn_gguf g;
	char err[BN_GGUF_ERR_LEN];
	uint8_t *copy;
	ck_assert_msg(parse_exact(&f, f.size, &g, err, &copy) == 0, "%s", err);
	ck_assert_str_eq(g.path, LABEL);
	ck_assert_uint_eq(g.size, f.size);
	check_round_trip(&g, cfg);
	bn_gguf_close(&g);
	bn_gguf_close(&g);  /* closing twice is harmless */
	free(copy);
	free(f.data);
}
END_TEST

/* A scratch directory, removed with whatever plain files it holds. */
static void make_scratch(char dir[64])
{
	strcpy(dir, "/tmp/bn-gguf-test-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *e;
	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			n++;
	closedir(d);
	return n;
}

static void remove_scratch(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[512];
	while (d && (e = readdir(d)) != NULL) {
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			unlink(path);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

START_TEST(round_trip_through_a_file)
{
	const struct round_trip_config *cfg = &round_trip_configs[_i];
	char dir[64], path[128], err[BN_GGUF_ERR_LEN];
	struct bn_gguf g;
	make_scratch(dir);
	snprintf(path, sizeof(path), "%s/model.gguf", dir);
	struct bn_gguf_writer *w = round_trip_writer(cfg);
	ck_assert_int_eq(bn_gguf_write_file(w, path), 0);
	ck_assert_int_eq(bn_gguf_write_file(w, path), 0);  /* replaces the file in place */
	bn_gguf_writer_free(w);
	ck_assert_int_eq(count_entries(dir), 1);            /* no temporary file left behind */
	ck_assert_msg(bn_gguf_open(&g, path, err) == 0, "%s", err);
	ck_assert_int_eq(g.mapped, 1);
	check_round_trip(&g, cfg);
	bn_gguf_close(&g);
	remove_scratch(dir);
}
END_TEST

START_TEST(empty_file_is_valid)
{
	struct file f = finish(bn_gguf_writer_new(3, 32));
	struct bn_gguf g;
	char err[BN_GGUF_ERR_LEN];
	uint8_t *copy;
	ck_assert_uint_eq(f.size, 32);  /* header, padded to the alignment */
	ck_assert_msg(parse_exact(&f, f.size, &g, err, &copy) == 0, "%s", err);
	ck_assert_uint_eq(g.n_kv, 0);
	ck_assert_uint_eq(g.n_tensors, 0);
	ck_assert_ptr_null(bn_gguf_find_kv(&g, "general.name"));
	bn_gguf_close(&g);
	free(copy);
	/* The bare 24-byte header, without the padding, is a valid file too. */
	ck_assert_msg(parse_exact(&f, 24, &g, err, &copy) == 0, "%s", err);
	bn_gguf_close(&g);
	free(copy);
	free(f.data);
}
END_TEST

START_TEST(close_is_safe_on_a_zeroed_struct)
{
	struct bn_gguf g;
	memset(&g, 0, sizeof(g));
	bn_gguf_close(&g);
	bn_gguf_close(NULL);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Writer argument checks                                                                     */
/* ------------------------------------------------------------------------------------------ */

START_TEST(writer_refuses_bad_arguments)
{
	ck_assert_ptr_null(bn_gguf_writer_new(1, 32));
	ck_assert_ptr_null(bn_gguf_writer_new(4, 32));
	ck_assert_ptr_null(bn_gguf_writer_new(3, 0));
	ck_assert_ptr_null(bn_gguf_writer_new(3, 48));

	struct bn_gguf_writer *w = bn_gguf_writer_new(3, 32);
	uint8_t data[256] = { 0 };
	const uint64_t ne8[] = { 8 }, ne0[] = { 0 }, ne_tq[] = { 128, 2 };
	ck_assert_int_eq(bn_gguf_add_u32(w, "k", 1), 0);
	ck_assert_int_eq(bn_gguf_add_u32(w, "k", 2), -EEXIST);
	ck_assert_int_eq(bn_gguf_add_str(w, "k", "x"), -EEXIST);
	ck_assert_int_eq(bn_gguf_add_u32(w, "general.alignment", 64), -EINVAL);
	ck_assert_int_eq(bn_gguf_add_str(w, "s", NULL), -EINVAL);
	ck_assert_int_eq(bn_gguf_add_u32(w, NULL, 1), -EINVAL);
	ck_assert_int_eq(bn_gguf_add_scalar(w, "s", BN_GGUF_STRING, data), -EINVAL);
	ck_assert_int_eq(bn_gguf_add_arr(w, "s", BN_GGUF_ARRAY, data, 1), -EINVAL);
	ck_assert_int_eq(bn_gguf_add_arr_str(w, "s", (const char *const[]){ "a", NULL }, 2),
			 -EINVAL);

	ck_assert_int_eq(bn_gguf_add_tensor(w, "t", BN_TYPE_F32, 1, ne8, data, 32), 0);
	ck_assert_int_eq(bn_gguf_add_tensor(w, "t", BN_TYPE_F32, 1, ne8, data, 32), -EEXIST);
	ck_assert_int_eq(bn_gguf_add_tensor(w, "u", BN_TYPE_F32, 1, ne8, data, 31), -EINVAL);
	ck_assert_int_eq(bn_gguf_add_tensor(w, "u", 99, 1, ne8, data, 32), -EINVAL);
	/* 0 dimensions is a scalar: one F32, 4 bytes. */
	ck_assert_int_eq(bn_gguf_add_tensor(w, "u", BN_TYPE_F32, 0, ne8, data, 32), -EINVAL);
	ck_assert_int_eq(bn_gguf_add_tensor(w, "u", BN_TYPE_F32, 5, ne8, data, 32), -EINVAL);
	ck_assert_int_eq(bn_gguf_add_tensor(w, "u", BN_TYPE_F32, 1, ne0, data, 0), -EINVAL);
	/* 256 weights make one TQ2_0 block, but rows of 128 are not whole blocks. */
	ck_assert_int_eq(bn_gguf_add_tensor(w, "u", BN_TYPE_TQ2_0, 2, ne_tq, data, 66), -EINVAL);
	ck_assert_int_eq(bn_gguf_add_tensor(w, "u", BN_TYPE_F32, 1, ne8, NULL, 32), -EINVAL);

	/* The refusals left nothing behind: the file holds exactly what was accepted. */
	struct file f = finish(w);
	struct bn_gguf g;
	char err[BN_GGUF_ERR_LEN];
	uint8_t *copy;
	ck_assert_msg(parse_exact(&f, f.size, &g, err, &copy) == 0, "%s", err);
	ck_assert_uint_eq(g.n_kv, 1);
	ck_assert_uint_eq(g.n_tensors, 1);
	bn_gguf_close(&g);
	free(copy);
	free(f.data);
}
END_TEST

START_TEST(write_file_into_a_missing_directory)
{
	struct bn_gguf_writer *w = bn_gguf_writer_new(3, 32);
	ck_assert_int_eq(bn_gguf_write_file(w, "/nonexistent-bn-dir/x.gguf"), -ENOENT);
	bn_gguf_writer_free(w);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Opening                                                                                    */
/* ------------------------------------------------------------------------------------------ */

START_TEST(open_missing_file)
{
	struct bn_gguf g;
	char err[BN_GGUF_ERR_LEN];
	ck_assert_int_eq(bn_gguf_open(&g, "/nonexistent-bn-dir/x.gguf", err), -1);
	ck_assert_str_eq(err, "/nonexistent-bn-dir/x.gguf: cannot open: No such file or directory");
	bn_gguf_close(&g);
}
END_TEST

START_TEST(open_directory)
{
	struct bn_gguf g;
	char dir[64], want[128], err[BN_GGUF_ERR_LEN];
	make_scratch(dir);
	ck_assert_int_eq(bn_gguf_open(&g, dir, err), -1);
	snprintf(want, sizeof(want), "%s: is a directory, not a GGUF file", dir);
	ck_assert_str_eq(err, want);
	bn_gguf_close(&g);
	remove_scratch(dir);
}
END_TEST

START_TEST(open_fifo)
{
	struct bn_gguf g;
	char dir[64], path[128], err[BN_GGUF_ERR_LEN];
	make_scratch(dir);
	snprintf(path, sizeof(path), "%s/fifo.gguf", dir);
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	ck_assert_int_eq(bn_gguf_open(&g, path, err), -1);  /* refused, not blocked on */
	ck_assert_ptr_nonnull(strstr(err, "fifo.gguf: is not a regular file, not a GGUF file"));
	remove_scratch(dir);
}
END_TEST

START_TEST(open_empty_file)
{
	struct bn_gguf g;
	char dir[64], path[128], err[BN_GGUF_ERR_LEN];
	make_scratch(dir);
	snprintf(path, sizeof(path), "%s/empty.gguf", dir);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	ck_assert_int_eq(bn_gguf_open(&g, path, err), -1);
	ck_assert_ptr_nonnull(strstr(err, "empty.gguf: truncated in header at byte 0 "
					  "(file is 0 bytes)"));
	bn_gguf_close(&g);
	remove_scratch(dir);
}
END_TEST

START_TEST(long_label_keeps_its_end)
{
	char label[300];
	char err[BN_GGUF_ERR_LEN];
	struct bn_gguf g;
	memset(label, 'd', sizeof(label));
	strcpy(label + sizeof(label) - 12, "/model.gguf");
	ck_assert_int_eq(bn_gguf_parse(&g, "GGUX", 4, label, err), -1);
	ck_assert_msg(strncmp(err, "...", 3) == 0, "%s", err);
	ck_assert_ptr_nonnull(strstr(err, "/model.gguf: bad magic 0x58554747"));
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The malformed corpus: one defect each                                                      */
/* ------------------------------------------------------------------------------------------ */

START_TEST(corpus_base_is_valid)
{
	struct file f = corruptible();
	struct bn_gguf g;
	char err[BN_GGUF_ERR_LEN];
	uint8_t *copy;
	ck_assert_msg(parse_exact(&f, f.size, &g, err, &copy) == 0, "%s", err);
	ck_assert_uint_eq(f.size, g.data_offset + 224);  /* the layout the corruptions assume */
	ck_assert_uint_eq(bn_gguf_find_tensor(&g, "t.aaab")->offset, 192);
	bn_gguf_close(&g);
	free(copy);
	free(f.data);
}
END_TEST

START_TEST(truncated_at_every_length)
{
	struct file f = corruptible();
	for (size_t len = 0; len < f.size; len++) {
		struct bn_gguf g;
		char err[BN_GGUF_ERR_LEN];
		uint8_t *copy;
		ck_assert_int_eq(parse_exact(&f, len, &g, err, &copy), -1);
		ck_assert_msg(strstr(err, "truncated") || strstr(err, "past the end"),
			      "length %zu: unexpected error '%s'", len, err);
		assert_one_line_about_label(err);
		bn_gguf_close(&g);
		free(copy);
	}
	free(f.data);
}
END_TEST

START_TEST(truncated_messages)
{
	struct file f = corruptible();
	expect_refused_at(&f, 0, "t.gguf: truncated in header at byte 0 (file is 0 bytes)");
	expect_refused_at(&f, 20, "truncated in header at byte 16 (file is 20 bytes)");
	/* Too short for the counts in the header: refused before anything is read by them. */
	expect_refused_at(&f, 30, "n_kv 5 runs past the end of the file (the 6 bytes after the "
			  "header hold at most 0)");
	/* In a value, in a name's length, after a name: the message names what it can. */
	expect_refused_at(&f, kv_value_at(&f, "num.list") + 2,
			  "truncated in metadata 'num.list' at byte");
	expect_refused_at(&f, find(&f, "t.aaaa") - 4, "truncated in tensor info 1 at byte");
	expect_refused_at(&f, find(&f, "t.aaaa") + 8, "truncated in tensor 't.aaaa' at byte");
	free(f.data);
}
END_TEST

START_TEST(bad_magic)
{
	struct file f = corruptible();
	put32(&f, 0, 0x12345678);
	expect_refused(&f, "t.gguf: bad magic 0x12345678 (not a GGUF file)");
	free(f.data);
}
END_TEST

START_TEST(unsupported_versions)
{
	struct file f = corruptible();
	put32(&f, 4, 1);
	expect_refused(&f, "t.gguf: unsupported GGUF version 1 (versions 2 and 3 are read)");
	put32(&f, 4, 4);
	expect_refused(&f, "unsupported GGUF version 4");
	put32(&f, 4, 0x03000000);
	expect_refused(&f, "unsupported GGUF version 50331648 (versions 2 and 3 are read); "
			   "a big-endian file?");
	free(f.data);
}
END_TEST

START_TEST(absurd_counts)
{
	struct file f = corruptible();
	put64(&f, 16, UINT64_C(1) << 60);
	expect_refused(&f, "n_kv 1152921504606846976 runs past the end of the file");
	put64(&f, 16, UINT64_MAX);
	expect_refused(&f, "n_kv 18446744073709551615 runs past the end");
	free(f.data);
	f = corruptible();
	put64(&f, 8, UINT64_MAX);
	expect_refused(&f, "n_tensors 18446744073709551615 runs past the end");
	put64(&f, 8, f.size / 32 + 1);  /* just beyond what the bytes could hold */
	expect_refused(&f, "n_tensors");
	free(f.data);
}
END_TEST

START_TEST(absurd_string_lengths)
{
	struct file f = corruptible();
	put64(&f, 24, UINT64_C(1) << 62);  /* the first key's length */
	expect_refused(&f, "metadata key 0: string length 4611686018427387904 runs past the end");
	free(f.data);
	f = corruptible();
	put64(&f, kv_value_at(&f, "general.name"), UINT64_MAX);
	expect_refused(&f, "metadata 'general.name': string length 18446744073709551615 runs "
			   "past the end of the file");
	free(f.data);
	f = corruptible();
	put64(&f, find(&f, "t.aaaa") - 8, f.size);  /* a tensor name's length */
	expect_refused(&f, "tensor info 1: string length");
	free(f.data);
}
END_TEST

START_TEST(absurd_array_counts)
{
	struct file f = corruptible();
	put64(&f, kv_value_at(&f, "num.list") + 4, UINT64_C(1) << 61);
	expect_refused(&f, "metadata 'num.list': array of 2305843009213693952 INT32 elements "
			   "runs past the end of the file");
	free(f.data);
	f = corruptible();
	put64(&f, kv_value_at(&f, "tok.list") + 4, UINT64_C(1) << 61);
	expect_refused(&f, "metadata 'tok.list': array of 2305843009213693952 STRING elements");
	free(f.data);
}
END_TEST

START_TEST(nested_array)
{
	struct file f = corruptible();
	put32(&f, kv_value_at(&f, "num.list"), BN_GGUF_ARRAY);
	expect_refused(&f, "metadata 'num.list': nested arrays are not supported");
	free(f.data);
}
END_TEST

START_TEST(unknown_value_types)
{
	struct file f = corruptible();
	put32(&f, kv_type_at(&f, "key.aaaa"), 13);
	expect_refused(&f, "metadata 'key.aaaa' has unknown value type 13");
	free(f.data);
	f = corruptible();
	put32(&f, kv_value_at(&f, "num.list"), 77);
	expect_refused(&f, "metadata 'num.list' has unknown array element type 77");
	free(f.data);
}
END_TEST

START_TEST(unknown_tensor_type)
{
	struct file f = corruptible();
	put32(&f, tensor_info_at(&f, "t.aaaa").type, 99);
	expect_refused(&f, "t.gguf: tensor 't.aaaa' has unknown type 99");
	free(f.data);
}
END_TEST

START_TEST(bad_dimension_counts)
{
	struct file f = corruptible();
	size_t at = tensor_info_at(&f, "t.aaaa").n_dims;
	put32(&f, at, 5);
	expect_refused(&f, "tensor 't.aaaa' has 5 dimensions (0 to 4 allowed)");
	put32(&f, at, UINT32_MAX);
	expect_refused(&f, "tensor 't.aaaa' has 4294967295 dimensions (0 to 4 allowed)");
	free(f.data);
}
END_TEST

/* A tensor of 0 dimensions is a scalar, as ggml reads it (bitnet.cpp's converter writes the
 * scale of each TL tensor so). */
START_TEST(scalar_tensor)
{
	struct bn_gguf_writer *w = bn_gguf_writer_new(3, 32);
	const float v = 0.25f;
	ck_assert_int_eq(bn_gguf_add_tensor(w, "s", BN_TYPE_F32, 0, NULL, &v, sizeof(v)), 0);
	add_tensor(w, "t.aaaa", BN_TYPE_F32, 1, (const uint64_t[]){ 8 }, 1);
	struct file f = finish(w);
	struct bn_gguf g;
	char err[BN_GGUF_ERR_LEN];
	uint8_t *copy;
	ck_assert_msg(parse_exact(&f, f.size, &g, err, &copy) == 0, "%s", err);
	const struct bn_gguf_tensor *t = bn_gguf_find_tensor(&g, "s");
	ck_assert_ptr_nonnull(t);
	ck_assert_uint_eq(t->n_dims, 0);
	ck_assert_uint_eq(t->n_elements, 1);
	ck_assert_uint_eq(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3], 1);
	ck_assert_uint_eq(t->size, 4);
	float got;
	memcpy(&got, t->data, sizeof(got));
	ck_assert(got == v);
	bn_gguf_close(&g);
	free(copy);
	free(f.data);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* bitnet.cpp's TL1 and TL2 files: refused with what they are and what to do                  */
/* ------------------------------------------------------------------------------------------ */

#define TL1 38u
#define TL2 39u

/* The bytes bitnet.cpp's converter writes for a K x M ternary matrix in TL1 (4 bits per 2
 * weights) or TL2 (5 bits per 3 weights, the last 256 columns of a row 4 bits per 2, the
 * whole rounded up to 32 bytes): preprocess_weights_tl1/tl2 in utils/convert-hf-to-gguf-
 * bitnet.py. */
static uint64_t tl_bytes(uint32_t type, uint64_t k, uint64_t m)
{
	if (type == TL1)
		return k * m / 4;
	uint64_t n = (k - 256) * m / 3 * 5 / 8 + 256 * m / 2 * 4 / 8;
	return (n + 31) / 32 * 32;
}

/* A model file as `convert-hf-to-gguf-bitnet.py --outtype tl1|tl2 --quant-embd` writes it:
 * general.file_type the TL type's own id, the embedding F16, norms F32, each ternary matrix
 * of the TL type with its float shape [K, M] and the tiled bytes, followed by
 * "<name>_scale", the F32 scalar max|w|. `marks` says which of the two marks to write
 * (1 the scales, 2 the file type). The tiles' contents are a pattern: no program can read
 * them without the tile sizes the converter used, which is the point. */
static struct file tl_model(uint32_t type, int marks)
{
	enum { K = 256, M = 256, VOCAB = 8 };
	struct bn_gguf_writer *w = bn_gguf_writer_new(3, 32);
	ck_assert_int_eq(bn_gguf_add_str(w, "general.architecture", "llama"), 0);
	if (marks & 2)
		ck_assert_int_eq(bn_gguf_add_u32(w, "general.file_type", type), 0);
	add_tensor(w, "token_embd.weight", BN_TYPE_F16, 2, (const uint64_t[]){ K, VOCAB }, 1);
	add_tensor(w, "blk.0.attn_norm.weight", BN_TYPE_F32, 1, (const uint64_t[]){ K }, 2);
	static const char *const names[] = { "blk.0.attn_q.weight", "blk.0.ffn_up.weight" };
	for (size_t i = 0; i < 2; i++) {
		uint64_t n = tl_bytes(type, K, M);
		uint8_t *tiles = malloc(n);
		fill_pattern(tiles, n, (unsigned)i + 3);
		ck_assert_int_eq(bn_gguf_add_tensor_bytes(w, names[i], type, 2,
							  (const uint64_t[]){ K, M }, tiles, n), 0);
		free(tiles);
		if (marks & 1) {
			char scale[64];
			const float max_abs = 0.75f;
			snprintf(scale, sizeof(scale), "%s_scale", names[i]);
			ck_assert_int_eq(bn_gguf_add_tensor(w, scale, BN_TYPE_F32, 0, NULL, &max_abs,
							    sizeof(max_abs)), 0);
		}
	}
	return finish(w);
}

static const char *const convert_hint =
	"Use an I2_S file: bitnet.cpp writes one from the Hugging Face checkpoint with: python "
	"utils/convert-hf-to-gguf-bitnet.py MODEL_DIR --outtype i2_s";

START_TEST(tl_files_are_refused_with_the_way_out)
{
	for (int marks = 1; marks <= 3; marks++) {
		struct file f = tl_model(TL2, marks);
		expect_refused(&f, "tensor 'blk.0.attn_q.weight' is bitnet.cpp's TL2 (type 39), tiled "
				   "for the kernels bitnet.cpp was built with; the tile sizes are not "
				   "in the file");
		expect_refused(&f, convert_hint);
		free(f.data);
		f = tl_model(TL1, marks);
		expect_refused(&f, "tensor 'blk.0.attn_q.weight' is bitnet.cpp's TL1 (type 38)");
		expect_refused(&f, convert_hint);
		free(f.data);
	}
}
END_TEST

/* Without either mark, 39 is upstream llama.cpp's MXFP4 and 38 a type it removed. */
START_TEST(types_38_and_39_without_bitnet_cpp_marks)
{
	struct file f = tl_model(TL2, 0);
	expect_refused(&f, "tensor 'blk.0.attn_q.weight' has unknown type 39 (upstream llama.cpp's "
			   "MXFP4, which bitnetd does not support)");
	free(f.data);
	f = tl_model(TL1, 0);
	expect_refused(&f, "tensor 'blk.0.attn_q.weight' has unknown type 38");
	struct bn_gguf g;
	char err[BN_GGUF_ERR_LEN];
	uint8_t *copy;
	ck_assert_int_eq(parse_exact(&f, f.size, &g, err, &copy), -1);
	ck_assert_ptr_null(strstr(err, "MXFP4"));
	ck_assert_ptr_null(strstr(err, "TL1"));
	free(copy);
	free(f.data);
}
END_TEST

/* bitnet-model info and bitnetd say the same: the tool exits 1, the daemon 3 (a model it
 * cannot serve). */
START_TEST(tl_file_refused_by_the_tools)
{
	const char *tool = getenv("BITNET_MODEL_TOOL"), *bitnetd = getenv("BITNETD");
	if (!tool || !bitnetd) {
		printf("SKIP tl_file_refused_by_the_tools: BITNET_MODEL_TOOL and BITNETD are unset "
		       "(make check sets them)\n");
		return;
	}
	char path[] = "/tmp/bn-gguf-tl-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	struct file f = tl_model(TL2, 3);
	ck_assert_int_eq(write(fd, f.data, f.size), (ssize_t)f.size);
	close(fd);
	free(f.data);
	struct tu_run *r = malloc(sizeof(*r));
	ck_assert_int_eq(tu_run((const char *[]){ tool, "info", path, NULL }, NULL, 0, r), 0);
	ck_assert_int_eq(r->status, 1);
	ck_assert_msg(strstr(r->err, "is bitnet.cpp's TL2 (type 39)") && strstr(r->err, convert_hint),
		      "%s", r->err);
	char sock[64];
	snprintf(sock, sizeof(sock), "%s.sock", path);
	ck_assert_int_eq(tu_run((const char *[]){ bitnetd, "--socket", sock, "--backend", "cpu",
						  "--cache-dir", "none", "--model", path, NULL },
				NULL, 0, r), 0);
	ck_assert_int_eq(r->status, 3);
	ck_assert_msg(strstr(r->err, "is bitnet.cpp's TL2 (type 39)") && strstr(r->err, convert_hint),
		      "%s", r->err);
	free(r);
	unlink(path);
}
END_TEST

/* A TL file cut short, or with a malformed entry after the TL tensor: the table is read to
 * its end before the TL refusal, so these are refused for what is wrong with them. */
START_TEST(malformed_tl_files)
{
	struct file f = tl_model(TL2, 3);
	size_t scale = find(&f, "blk.0.ffn_up.weight_scale");
	expect_refused_at(&f, scale + 4, "tensor info 5: string length 25 runs past the end");
	put32(&f, tensor_info_at(&f, "blk.0.ffn_up.weight_scale").type, 99);
	expect_refused(&f, "tensor 'blk.0.ffn_up.weight_scale' has unknown type 99");
	free(f.data);
	f = tl_model(TL1, 1);
	put32(&f, tensor_info_at(&f, "blk.0.ffn_up.weight_scale").n_dims, 9);
	expect_refused(&f, "has 9 dimensions (0 to 4 allowed)");
	free(f.data);
}
END_TEST

START_TEST(zero_dimension)
{
	struct file f = corruptible();
	put64(&f, tensor_info_at(&f, "t.aaaa").ne + 8, 0);
	expect_refused(&f, "tensor 't.aaaa' ne[1] is 0");
	free(f.data);
}
END_TEST

START_TEST(element_count_overflow)
{
	struct file f = corruptible();
	size_t ne = tensor_info_at(&f, "t.aaaa").ne;
	put64(&f, ne, UINT64_C(1) << 40);
	put64(&f, ne + 8, UINT64_C(1) << 40);  /* 2^80: wraps around u64 */
	expect_refused(&f, "tensor 't.aaaa' has too many elements (ne[1]=1099511627776)");
	put64(&f, ne, UINT64_MAX);             /* too many on its own */
	expect_refused(&f, "tensor 't.aaaa' has too many elements (ne[0]=18446744073709551615)");
	free(f.data);
}
END_TEST

START_TEST(ne0_not_whole_blocks)
{
	struct file f = corruptible();
	put64(&f, tensor_info_at(&f, "t.quant").ne, 100);
	expect_refused(&f, "t.gguf: tensor 't.quant' ne[0]=100 is not a multiple of the TQ2_0 "
			   "block (256)");
	free(f.data);
}
END_TEST

START_TEST(misaligned_offset)
{
	struct file f = corruptible();
	put64(&f, tensor_info_at(&f, "t.quant").offset, 5);
	expect_refused(&f, "t.gguf: tensor 't.quant' offset 5 is not aligned to 32");
	free(f.data);
}
END_TEST

START_TEST(data_past_the_end)
{
	struct file f = corruptible();
	size_t data_offset = f.size - 224;
	char want[160];
	put64(&f, tensor_info_at(&f, "t.aaab").offset, 224);
	snprintf(want, sizeof(want), "t.gguf: tensor 't.aaab' data [%zu, %zu) runs past the end "
		 "of the file (%zu bytes)", data_offset + 224, data_offset + 256, f.size);
	expect_refused(&f, want);
	put64(&f, tensor_info_at(&f, "t.aaab").offset, UINT64_MAX - 31);
	expect_refused(&f, "tensor 't.aaab' offset 18446744073709551584 + size 32 overflows");
	free(f.data);
}
END_TEST

START_TEST(overlapping_tensors)
{
	struct file f = corruptible();
	put64(&f, tensor_info_at(&f, "t.aaab").offset, 128);  /* inside t.quant [0, 132) */
	expect_refused(&f, "t.gguf: tensors 't.quant' and 't.aaab' overlap");
	free(f.data);
}
END_TEST

START_TEST(duplicate_tensor)
{
	struct file f = corruptible();
	f.data[find(&f, "t.aaab") + 5] = 'a';
	expect_refused(&f, "t.gguf: duplicate tensor 't.aaaa'");
	free(f.data);
}
END_TEST

START_TEST(duplicate_key)
{
	struct file f = corruptible();
	f.data[find(&f, "key.aaab") + 7] = 'a';
	expect_refused(&f, "t.gguf: duplicate key 'key.aaaa'");
	free(f.data);
}
END_TEST

START_TEST(bad_alignment)
{
	struct file f = aligned64();
	size_t value = kv_value_at(&f, "general.alignment");
	put32(&f, value, 48);
	expect_refused(&f, "t.gguf: general.alignment 48 is not a power of two");
	put32(&f, value, 0);
	expect_refused(&f, "t.gguf: general.alignment 0 is not a power of two");
	put32(&f, value, 64);
	put32(&f, kv_type_at(&f, "general.alignment"), BN_GGUF_INT32);
	expect_refused(&f, "t.gguf: general.alignment has type INT32 (must be UINT32)");
	free(f.data);
}
END_TEST

START_TEST(alignment_applies_to_offsets)
{
	/* Alignment 128 moves the data section from 192 to 256: the tensor no longer fits. */
	struct file f = aligned64();
	ck_assert_uint_eq(f.size, 192 + 64);
	put32(&f, kv_value_at(&f, "general.alignment"), 128);
	expect_refused(&f, "t.gguf: tensor 't.aaaa' data [256, 320) runs past the end");
	free(f.data);
}
END_TEST

START_TEST(names_stay_one_line)
{
	struct bn_gguf_writer *w = bn_gguf_writer_new(3, 32);
	add_tensor(w, "evil\n'name\x01", BN_TYPE_F32, 1, (const uint64_t[]){ 8 }, 0);
	struct file f = finish(w);
	put32(&f, tensor_info_at(&f, "evil\n'name\x01").type, 99);
	expect_refused(&f, "tensor 'evil??name?' has unknown type 99");
	free(f.data);
}
END_TEST

static TCase *round_trip_tcase(void)
{
	const int n = sizeof(round_trip_configs) / sizeof(round_trip_configs[0]);
	TCase *tc = tcase_create("round_trip");
	tcase_add_loop_test(tc, round_trip_in_memory, 0, n);
	tcase_add_loop_test(tc, round_trip_through_a_file, 0, n);
	tcase_add_test(tc, empty_file_is_valid);
	tcase_add_test(tc, close_is_safe_on_a_zeroed_struct);
	tcase_add_test(tc, writer_refuses_bad_arguments);
	tcase_add_test(tc, write_file_into_a_missing_directory);
	tcase_add_test(tc, open_missing_file);
	tcase_add_test(tc, open_directory);
	tcase_add_test(tc, open_fifo);
	tcase_add_test(tc, open_empty_file);
	tcase_add_test(tc, long_label_keeps_its_end);
	return tc;
}

static TCase *malformed_tcase(void)
{
	TCase *tc = tcase_create("malformed");
	tcase_add_test(tc, corpus_base_is_valid);
	tcase_add_test(tc, truncated_at_every_length);
	tcase_add_test(tc, truncated_messages);
	tcase_add_test(tc, bad_magic);
	tcase_add_test(tc, unsupported_versions);
	tcase_add_test(tc, absurd_counts);
	tcase_add_test(tc, absurd_string_lengths);
	tcase_add_test(tc, absurd_array_counts);
	tcase_add_test(tc, nested_array);
	tcase_add_test(tc, unknown_value_types);
	tcase_add_test(tc, unknown_tensor_type);
	tcase_add_test(tc, bad_dimension_counts);
	tcase_add_test(tc, scalar_tensor);
	tcase_add_test(tc, tl_files_are_refused_with_the_way_out);
	tcase_add_test(tc, types_38_and_39_without_bitnet_cpp_marks);
	tcase_add_test(tc, malformed_tl_files);
	tcase_add_test(tc, tl_file_refused_by_the_tools);
	tcase_add_test(tc, zero_dimension);
	tcase_add_test(tc, element_count_overflow);
	tcase_add_test(tc, ne0_not_whole_blocks);
	tcase_add_test(tc, misaligned_offset);
	tcase_add_test(tc, data_past_the_end);
	tcase_add_test(tc, overlapping_tensors);
	tcase_add_test(tc, duplicate_tensor);
	tcase_add_test(tc, duplicate_key);
	tcase_add_test(tc, bad_alignment);
	tcase_add_test(tc, alignment_applies_to_offsets);
	tcase_add_test(tc, names_stay_one_line);
	return tc;
}

/* ------------------------------------------------------------------------------------------ */
/* The loader's reading of hostile model headers (tests/corpus/gguf/loader-*, make_corpus.c)   */
/* ------------------------------------------------------------------------------------------ */

struct header_case {
	const char *file;
	const char *error;        /* NULL: read; else in the one-line refusal */
	enum bn_activation act;   /* when read */
	uint32_t head_dim;
	float rope_freq_scale;
};

static const struct header_case header_cases[] = {
	{ "loader-llama-i2s", NULL, BN_ACT_SILU, 256, 0.5f },
	{ "loader-llama-i2s-file-type-38",
	  "in a llama file is I2_S only when general.file_type is 40 (bitnet.cpp's I2_S), and it "
	  "is 38 here; upstream llama.cpp gave type 36 to IQ4_NL_4_4", 0, 0, 0 },
	{ "loader-llama-i2s-no-file-type", "and it is missing here", 0, 0, 0 },
	{ "loader-llama-i2s-trailing-bytes",
	  "tensor 'blk.0.attn_q.weight' has type 36 and general.file_type is 40 (I2_S), but its "
	  "data takes 16480 bytes where I2_S takes 16416", 0, 0, 0 },
	{ "loader-llama-key-value-differ",
	  "llama.attention.key_length 256 and value_length 128 differ", 0, 0, 0 },
	{ "loader-llama-value-only",
	  "llama.attention.value_length is 256 but there is no key_length", 0, 0, 0 },
	{ "loader-llama-rope-yarn", "llama.rope.scaling.type 'yarn' is not supported", 0, 0, 0 },
	{ "loader-llama-gelu", NULL, BN_ACT_GELU, 256, 0.5f }, /* known since gemma3 (qwen61) */
	{ "loader-llama-act-unknown",
	  "llama.hidden_activation \"swish\" is not an activation bitnetd knows", 0, 0, 0 },
	{ "loader-bitnet-b158-spm-32002", NULL, BN_ACT_SILU, 256, 1.0f },
};

START_TEST(loader_reads_hostile_headers)
{
	const struct header_case *h = &header_cases[_i];
	char path[256];
	snprintf(path, sizeof(path), "tests/corpus/gguf/%s.gguf", h->file);
	FILE *fp = fopen(path, "rb");
	ck_assert_msg(fp != NULL, "%s (run from the repository's root)", path);
	static uint8_t buf[1 << 20];
	size_t n = fread(buf, 1, sizeof(buf), fp);
	fclose(fp);
	uint8_t *exact = malloc(n);
	ck_assert_ptr_nonnull(exact);
	memcpy(exact, buf, n);
	struct bn_gguf g;
	char err[BN_GGUF_ERR_LEN], merr[BN_MODEL_ERR_LEN];
	ck_assert_msg(bn_gguf_parse(&g, exact, n, h->file, err) == 0, "%s", err);
	struct bn_model_config c;
	int rc = bn_model_read_config(&g, NULL, &c, merr);
	if (rc == 0)
		rc = bn_model_check_i2_s(&g, &c, merr);
	if (h->error) {
		ck_assert_int_eq(rc, -1);
		ck_assert_msg(strstr(merr, h->error) && !strchr(merr, '\n'),
			      "%s: \"%s\" does not say \"%s\"", h->file, merr, h->error);
		ck_assert_msg(!strncmp(merr, h->file, strlen(h->file)), "%s", merr);
	} else {
		ck_assert_msg(rc == 0, "%s", merr);
		ck_assert_int_eq(c.act, h->act);
		ck_assert_uint_eq(c.head_dim, h->head_dim);
		ck_assert(c.rope_freq_scale == h->rope_freq_scale);
	}
	bn_gguf_close(&g);
	free(exact);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("gguf");
	suite_add_tcase(s, round_trip_tcase());
	suite_add_tcase(s, malformed_tcase());
	TCase *loader = tcase_create("loader headers");
	tcase_add_loop_test(loader, loader_reads_hostile_headers, 0,
			    (int)(sizeof(header_cases) / sizeof(header_cases[0])));
	suite_add_tcase(s, loader);
	return tu_run_suite(s);
}
