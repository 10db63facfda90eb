/* SPDX-License-Identifier: MIT */
/*
 * The model loader (daemon/model/model.c) on small GGUF files built here with the writer, shaped
 * like the model tool's tiny preset but smaller (n_embd 256, 1 layer, 4 heads, 2 KV heads,
 * n_ff 256, vocab 300):
 *  - every defect is refused with one line that names the file and says what is wrong;
 *  - a valid file loads: the configuration equals the metadata, the documented defaults
 *    apply when optional keys are absent, the architecture picks RoPE, sub-norms and the
 *    activation, the LM head is output.weight or the tied embedding;
 *  - the repacked T2 codes and row scales equal the ternary weights written (the oracle is
 *    the generator of those weights, not a decoder).
 */
#include "../daemon/model/forward.h"
#include "../daemon/model/model.h"
#include "../tools/gguf_write.h"
#include "quant.h"

#include "testutil.h"

#include "ckassert.h"
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmp_dir[] = "/tmp/bn-model-XXXXXX";

/* ------------------------------------------------------------------------------------------ */
/* A model as data: metadata and tensor list, edited by each test, then written               */
/* ------------------------------------------------------------------------------------------ */

enum kv_kind { KV_U32, KV_I32, KV_F32, KV_STR, KV_STRS };

struct kv {
	char key[96];
	enum kv_kind kind;
	uint32_t u;         /* KV_STRS: how many strings ("t0", "t1", ...) */
	int32_t i;
	float f;
	char s[48];
};

struct tensor {
	char name[64];
	uint32_t type;
	uint32_t n_dims;
	uint64_t ne[4];
	int mixed_scales;  /* TQ rows: block b has scale (b + 1) * the row's */
	int zero_block0;   /* TQ rows: block 0 all zero weights, with a scale of its own */
	int code3;         /* TQ2_0: weight 0 of row 0 gets code 3 */
	int ternary_float; /* F32 / F16 / BF16: weight_of * scale_of, a ternary float tensor;
			    * 2: but the last weight of the last row is 1.5 * scale_of */
	int nan_scale;     /* I2_S: the scale is a NaN */
	uint32_t disk_type; /* when set: written as `type`, then its type id on disk patched to
			     * this one (how a file of another writer's type 36 looks) */
};

#define MAX_KV 40
#define MAX_TENSORS 48

struct desc {
	char arch[32];      /* the prefix of the hyper-parameter keys */
	struct kv kv[MAX_KV];
	uint32_t n_kv;
	struct tensor t[MAX_TENSORS];
	uint32_t n_t;
};

struct shape {
	const char *arch;
	uint32_t n_embd, n_layer, n_head, n_head_kv, n_ff, vocab;
	uint32_t lin_type, embed_type;
	int untied;             /* an output.weight of head_type */
	uint32_t head_type;
	uint32_t head_dim;      /* written as attention.key_length and value_length; 0: none
				 * (n_embd / n_head) */
};

static const struct shape base_shape = {
	"bitnet-b1.58", 256, 1, 4, 2, 256, 300, BN_TYPE_TQ2_0, BN_TYPE_F16, 0, 0, 0,
};

static struct kv *kv_find(struct desc *d, const char *key)
{
	for (uint32_t i = 0; i < d->n_kv; i++)
		if (!strcmp(d->kv[i].key, key))
			return &d->kv[i];
	return NULL;
}

/* The entry for `key`, added if absent. */
static struct kv *kv_slot(struct desc *d, const char *key)
{
	struct kv *kv = kv_find(d, key);
	if (kv)
		return kv;
	ck_assert_uint_lt(d->n_kv, MAX_KV);
	kv = &d->kv[d->n_kv++];
	memset(kv, 0, sizeof(*kv));
	snprintf(kv->key, sizeof(kv->key), "%s", key);
	return kv;
}

/* "<arch>.<suffix>" for a key of the description's architecture. */
static const char *akey(const struct desc *d, const char *suffix)
{
	static char key[96];
	snprintf(key, sizeof(key), "%s.%s", d->arch, suffix);
	return key;
}

static void set_u32(struct desc *d, const char *key, uint32_t v)
{
	struct kv *kv = kv_slot(d, key);
	kv->kind = KV_U32;
	kv->u = v;
}

static void set_i32(struct desc *d, const char *key, int32_t v)
{
	struct kv *kv = kv_slot(d, key);
	kv->kind = KV_I32;
	kv->i = v;
}

static void set_f32(struct desc *d, const char *key, float v)
{
	struct kv *kv = kv_slot(d, key);
	kv->kind = KV_F32;
	kv->f = v;
}

static void set_str(struct desc *d, const char *key, const char *v)
{
	struct kv *kv = kv_slot(d, key);
	kv->kind = KV_STR;
	snprintf(kv->s, sizeof(kv->s), "%s", v);
}

/* A string array of n elements "t0", "t1", ... (a vocabulary's size, for the activation). */
static void set_strs(struct desc *d, const char *key, uint32_t n)
{
	struct kv *kv = kv_slot(d, key);
	kv->kind = KV_STRS;
	kv->u = n;
}

static void del_kv(struct desc *d, const char *key)
{
	struct kv *kv = kv_find(d, key);
	ck_assert_msg(kv != NULL, "no key %s to delete", key);
	d->n_kv--;
	*kv = d->kv[d->n_kv];
}

static struct tensor *t_find(struct desc *d, const char *name)
{
	for (uint32_t i = 0; i < d->n_t; i++)
		if (!strcmp(d->t[i].name, name))
			return &d->t[i];
	return NULL;
}

static struct tensor *t_get(struct desc *d, const char *name)
{
	struct tensor *t = t_find(d, name);
	ck_assert_msg(t != NULL, "no tensor %s", name);
	return t;
}

static void del_tensor(struct desc *d, const char *name)
{
	struct tensor *t = t_get(d, name);
	d->n_t--;
	*t = d->t[d->n_t];
}

/* ne0 = n_in, ne1 = n_out (1-D when ne1 == 0). */
static struct tensor *add_tensor(struct desc *d, const char *name, uint32_t type, uint64_t ne0,
				 uint64_t ne1)
{
	ck_assert_uint_lt(d->n_t, MAX_TENSORS);
	struct tensor *t = &d->t[d->n_t++];
	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->type = type;
	t->n_dims = ne1 ? 2 : 1;
	t->ne[0] = ne0;
	t->ne[1] = ne1 ? ne1 : 1;
	t->ne[2] = t->ne[3] = 1;
	return t;
}

static void desc_init(struct desc *d, const struct shape *s)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->arch, sizeof(d->arch), "%s", s->arch);
	uint32_t hd = s->head_dim ? s->head_dim : s->n_embd / s->n_head;
	uint32_t q = s->n_head * hd, kv = s->n_head_kv * hd;
	set_str(d, "general.architecture", s->arch);
	set_str(d, "general.name", "test-model");
	set_u32(d, akey(d, "context_length"), 512);
	set_u32(d, akey(d, "embedding_length"), s->n_embd);
	set_u32(d, akey(d, "block_count"), s->n_layer);
	set_u32(d, akey(d, "feed_forward_length"), s->n_ff);
	set_u32(d, akey(d, "attention.head_count"), s->n_head);
	set_u32(d, akey(d, "attention.head_count_kv"), s->n_head_kv);
	set_u32(d, akey(d, "rope.dimension_count"), hd / 2);
	set_u32(d, akey(d, "vocab_size"), s->vocab);
	set_f32(d, akey(d, "attention.layer_norm_rms_epsilon"), 1e-6f);
	set_f32(d, akey(d, "rope.freq_base"), 500000.0f);
	set_u32(d, "tokenizer.ggml.bos_token_id", 5);
	set_u32(d, "tokenizer.ggml.eos_token_id", 7);
	if (s->head_dim) {
		set_u32(d, akey(d, "attention.key_length"), s->head_dim);
		set_u32(d, akey(d, "attention.value_length"), s->head_dim);
	}
	if (s->lin_type == BN_TYPE_I2_S) /* bitnet.cpp's I2_S files say so */
		set_u32(d, "general.file_type", 40);
	add_tensor(d, "token_embd.weight", s->embed_type, s->n_embd, s->vocab);
	add_tensor(d, "output_norm.weight", BN_TYPE_F32, s->n_embd, 0);
	if (s->untied)
		add_tensor(d, "output.weight", s->head_type, s->n_embd, s->vocab);
	int sub_norms = strncmp(s->arch, "bitnet", 6) == 0;
	int qk_norm = !strcmp(s->arch, "qwen3") || !strcmp(s->arch, "gemma3");
	int post_norms = !strcmp(s->arch, "gemma3");
	for (uint32_t i = 0; i < s->n_layer; i++) {
		char n[64];
#define NAME(suffix) (snprintf(n, sizeof(n), "blk.%u.%s", i, suffix), n)
		add_tensor(d, NAME("attn_norm.weight"), BN_TYPE_F32, s->n_embd, 0);
		add_tensor(d, NAME("attn_q.weight"), s->lin_type, s->n_embd, q);
		add_tensor(d, NAME("attn_k.weight"), s->lin_type, s->n_embd, kv);
		add_tensor(d, NAME("attn_v.weight"), s->lin_type, s->n_embd, kv);
		add_tensor(d, NAME("attn_output.weight"), s->lin_type, q, s->n_embd);
		add_tensor(d, NAME("ffn_norm.weight"), BN_TYPE_F32, s->n_embd, 0);
		add_tensor(d, NAME("ffn_gate.weight"), s->lin_type, s->n_embd, s->n_ff);
		add_tensor(d, NAME("ffn_up.weight"), s->lin_type, s->n_embd, s->n_ff);
		add_tensor(d, NAME("ffn_down.weight"), s->lin_type, s->n_ff, s->n_embd);
		if (sub_norms) {
			add_tensor(d, NAME("attn_sub_norm.weight"), BN_TYPE_F32, q, 0);
			add_tensor(d, NAME("ffn_sub_norm.weight"), BN_TYPE_F32, s->n_ff, 0);
		}
		if (qk_norm) {
			add_tensor(d, NAME("attn_q_norm.weight"), BN_TYPE_F32, hd, 0);
			add_tensor(d, NAME("attn_k_norm.weight"), BN_TYPE_F32, hd, 0);
		}
		if (post_norms) {
			add_tensor(d, NAME("post_attention_norm.weight"), BN_TYPE_F32, s->n_embd, 0);
			add_tensor(d, NAME("post_ffw_norm.weight"), BN_TYPE_F32, s->n_embd, 0);
		}
#undef NAME
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Tensor contents: functions of (name, row, k), so the tests can say what was written        */
/* ------------------------------------------------------------------------------------------ */

static uint32_t name_hash(const char *s) /* FNV-1a */
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

static uint32_t mix(uint32_t h, uint64_t row, uint64_t k)
{
	uint64_t x = h ^ (row * 0x9e3779b97f4a7c15ull) ^ (k * 0xc2b2ae3d27d4eb4full);
	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 29;
	return (uint32_t)x;
}

static int8_t weight_of(const struct tensor *t, uint64_t row, uint64_t k)
{
	if (t->zero_block0 && k < BN_QK_K)
		return 0;
	return (int8_t)(mix(name_hash(t->name), row, k) % 3) - 1;
}

/* The scale a TQ row is written with (k / 64: exact in half), or an I2_S tensor's. */
static float scale_of(const struct tensor *t, uint64_t row)
{
	uint32_t h = name_hash(t->name);
	if (t->type == BN_TYPE_I2_S)
		return (float)(1 + h % 100) / 128.0f;
	return (float)(16 + (h + row) % 48) / 64.0f;
}

/* A norm weight or a float matrix entry. */
static float float_of(const struct tensor *t, uint64_t row, uint64_t k)
{
	uint32_t r = mix(name_hash(t->name), row, k);
	if (t->n_dims == 1)
		return 1.0f + (float)(r % 17) / 64.0f;
	return (float)(r % 2001) / 1000.0f - 1.0f;
}

static void encode_tq_row(const struct tensor *t, uint64_t row, uint64_t n, uint8_t *out)
{
	int8_t *w = malloc(n);
	ck_assert_ptr_nonnull(w);
	for (uint64_t k = 0; k < n; k++)
		w[k] = weight_of(t, row, k);
	uint64_t blk_bytes = bn_row_bytes(t->type, BN_QK_K);
	for (uint64_t b = 0; b < n / BN_QK_K; b++) {
		float s = scale_of(t, row);
		if (t->mixed_scales)
			s *= (float)(b + 1);
		if (t->zero_block0 && b == 0)
			s = 0.125f;
		ck_assert_uint_eq(bn_encode_ternary_row(t->type, w + b * BN_QK_K, BN_QK_K, s,
							out + b * blk_bytes),
				  blk_bytes);
	}
	free(w);
}

static uint8_t *tensor_data(const struct tensor *t, uint64_t *size)
{
	uint64_t n_in = t->ne[0], n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3], rows = n / n_in;
	*size = bn_tensor_bytes(t->type, n);
	ck_assert_msg(*size > 0, "tensor %s: no size", t->name);
	uint8_t *data = calloc(1, *size);
	ck_assert_ptr_nonnull(data);
	if (t->type == BN_TYPE_I2_S) {
		int8_t *w = malloc(n);
		ck_assert_ptr_nonnull(w);
		for (uint64_t i = 0; i < n; i++)
			w[i] = weight_of(t, i / n_in, i % n_in);
		ck_assert_uint_eq(bn_encode_i2_s(w, n, t->nan_scale ? NAN : scale_of(t, 0), data),
				  *size);
		free(w);
		return data;
	}
	uint64_t row_bytes = bn_row_bytes(t->type, n_in);
	float *f = malloc(n_in * sizeof(float));
	ck_assert_ptr_nonnull(f);
	for (uint64_t r = 0; r < rows; r++) {
		if (bn_type_is_ternary(t->type)) {
			encode_tq_row(t, r, n_in, data + r * row_bytes);
			continue;
		}
		for (uint64_t k = 0; k < n_in; k++)
			f[k] = t->ternary_float ? (float)weight_of(t, r, k) * scale_of(t, r)
						: float_of(t, r, k);
		if (t->ternary_float == 2 && r == rows - 1)
			f[n_in - 1] = 1.5f * scale_of(t, r);
		ck_assert_uint_eq(bn_quant_row(t->type, f, n_in, data + r * row_bytes), row_bytes);
	}
	free(f);
	if (t->code3)
		data[0] |= 3;
	return data;
}

static int add_strs(struct bn_gguf_writer *w, const char *key, uint32_t n)
{
	char (*text)[12] = malloc((size_t)n * sizeof(*text) + 1);
	const char **ptrs = malloc((size_t)n * sizeof(*ptrs) + 1);
	ck_assert(text && ptrs);
	for (uint32_t i = 0; i < n; i++) {
		snprintf(text[i], sizeof(text[i]), "t%u", i);
		ptrs[i] = text[i];
	}
	int rc = bn_gguf_add_arr_str(w, key, ptrs, n);
	free(ptrs);
	free(text);
	return rc;
}

/* The tensor's type id in the file's tensor table, rewritten: the table holds its name (a u64
 * length, the bytes), n_dims (u32), the dims (u64 each), then the type (u32). */
static void patch_type(const char *path, const struct tensor *t)
{
	FILE *f = fopen(path, "r+b");
	ck_assert_ptr_nonnull(f);
	static uint8_t head[1 << 16];
	size_t n = fread(head, 1, sizeof(head), f);
	size_t len = strlen(t->name);
	for (size_t at = 8; at + len + 4 + 8 * t->n_dims + 4 <= n; at++) {
		uint64_t l;
		memcpy(&l, head + at - 8, 8);
		if (l != len || memcmp(head + at, t->name, len))
			continue;
		long type_at = (long)(at + len + 4 + 8 * t->n_dims);
		ck_assert_int_eq(fseek(f, type_at, SEEK_SET), 0);
		ck_assert_uint_eq(fwrite(&t->disk_type, 4, 1, f), 1);
		fclose(f);
		return;
	}
	ck_abort_msg("tensor %s not found in %s's table", t->name, path);
}

static void write_desc(const struct desc *d, const char *path)
{
	struct bn_gguf_writer *w = bn_gguf_writer_new(3, 32);
	ck_assert_ptr_nonnull(w);
	for (uint32_t i = 0; i < d->n_kv; i++) {
		const struct kv *kv = &d->kv[i];
		int rc = kv->kind == KV_U32    ? bn_gguf_add_u32(w, kv->key, kv->u)
			 : kv->kind == KV_I32  ? bn_gguf_add_i32(w, kv->key, kv->i)
			 : kv->kind == KV_F32  ? bn_gguf_add_f32(w, kv->key, kv->f)
			 : kv->kind == KV_STRS ? add_strs(w, kv->key, kv->u)
					       : bn_gguf_add_str(w, kv->key, kv->s);
		ck_assert_msg(rc == 0, "key %s: %d", kv->key, rc);
	}
	for (uint32_t i = 0; i < d->n_t; i++) {
		const struct tensor *t = &d->t[i];
		uint64_t size;
		uint8_t *data = tensor_data(t, &size);
		int rc = bn_gguf_add_tensor(w, t->name, t->type, t->n_dims, t->ne, data, size);
		ck_assert_msg(rc == 0, "tensor %s: %d", t->name, rc);
		free(data);
	}
	ck_assert_int_eq(bn_gguf_write_file(w, path), 0);
	bn_gguf_writer_free(w);
	for (uint32_t i = 0; i < d->n_t; i++)
		if (d->t[i].disk_type)
			patch_type(path, &d->t[i]);
}

static void temp_path(char *path, size_t cap, const char *name)
{
	snprintf(path, cap, "%s/%s.gguf", tmp_dir, name);
}

/* Writes d, loads it; on success the caller owns m. */
static void load_ok_as(const struct desc *d, const char *name, enum bn_float_layout layout,
		       struct bn_model *m, char *path, size_t cap)
{
	char err[BN_MODEL_ERR_LEN];
	temp_path(path, cap, name);
	write_desc(d, path);
	int rc = bn_model_load_as(m, path, layout, err);
	ck_assert_msg(rc == 0, "load %s: %s", path, err);
}

static void load_ok(const struct desc *d, const char *name, struct bn_model *m, char *path,
		    size_t cap)
{
	load_ok_as(d, name, BN_FLOAT_PANELS, m, path, cap);
}

/* A float value as the file stores it in `type`. */
static float stored_float(uint32_t type, float v)
{
	if (type == BN_TYPE_F16)
		return bn_half_to_float(bn_float_to_half(v));
	if (type == BN_TYPE_BF16)
		return bn_bf16_to_float(bn_float_to_bf16(v));
	return v;
}

/* Every row of a float matrix, in whichever layout it was loaded, is the file's row. */
static void check_float_rows(struct desc *d, const char *name, const struct bn_f_matrix *f)
{
	const struct tensor *t = t_get(d, name);
	float *row = malloc(f->n_in * sizeof(float));
	ck_assert_ptr_nonnull(row);
	for (uint32_t o = 0; o < f->n_out; o++) {
		bn_f_row(f, o, row);
		for (uint32_t k = 0; k < f->n_in; k++)
			ck_assert_msg(row[k] == stored_float(f->type, float_of(t, o, k)),
				      "%s (panels %u): row %u input %u", name, f->panel_rows, o, k);
	}
	free(row);
}

/* Refused, with one line that names the file and contains `phrase`. */
static void expect_refused(const char *path, const char *phrase)
{
	struct bn_model m;
	char err[BN_MODEL_ERR_LEN];
	memset(err, 0, sizeof(err));
	int rc = bn_model_load(&m, path, err);
	ck_assert_msg(rc == -1, "%s loaded (rc %d), expected an error with \"%s\"", path, rc,
		      phrase);
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	ck_assert_msg(strstr(err, base) != NULL, "error does not name the file: %s", err);
	ck_assert_msg(strstr(err, phrase) != NULL, "error \"%s\" does not say \"%s\"", err, phrase);
	ck_assert_msg(strchr(err, '\n') == NULL, "error is not one line: %s", err);
	/* freeing after a failed load is safe, twice */
	bn_model_free(&m);
	bn_model_free(&m);
}

static void expect_desc_refused(const struct desc *d, const char *name, const char *phrase)
{
	char path[256];
	temp_path(path, sizeof(path), name);
	write_desc(d, path);
	expect_refused(path, phrase);
	unlink(path);
}

/* ------------------------------------------------------------------------------------------ */
/* Defects                                                                                     */
/* ------------------------------------------------------------------------------------------ */

struct defect {
	const char *name;
	void (*edit)(struct desc *d);
	const char *phrase;
};

static void no_arch(struct desc *d) { del_kv(d, "general.architecture"); }
static void arch_gpt2(struct desc *d) { set_str(d, "general.architecture", "gpt2"); }
static void arch_not_string(struct desc *d) { set_u32(d, "general.architecture", 1); }
static void no_embd(struct desc *d) { del_kv(d, akey(d, "embedding_length")); }
static void no_blocks(struct desc *d) { del_kv(d, akey(d, "block_count")); }
static void no_ff(struct desc *d) { del_kv(d, akey(d, "feed_forward_length")); }
static void no_heads(struct desc *d) { del_kv(d, akey(d, "attention.head_count")); }
static void embd_string(struct desc *d) { set_str(d, akey(d, "embedding_length"), "256"); }
static void heads_float(struct desc *d) { set_f32(d, akey(d, "attention.head_count"), 4.0f); }
static void blocks_negative(struct desc *d) { set_i32(d, akey(d, "block_count"), -1); }
static void eps_string(struct desc *d)
{
	set_str(d, akey(d, "attention.layer_norm_rms_epsilon"), "1e-5");
}
static void rope_base_nan(struct desc *d) { set_f32(d, akey(d, "rope.freq_base"), NAN); }
static void bos_string(struct desc *d) { set_str(d, "tokenizer.ggml.bos_token_id", "1"); }
static void heads_3(struct desc *d) { set_u32(d, akey(d, "attention.head_count"), 3); }
static void kv_heads_3(struct desc *d) { set_u32(d, akey(d, "attention.head_count_kv"), 3); }
static void kv_heads_0(struct desc *d) { set_u32(d, akey(d, "attention.head_count_kv"), 0); }
static void rope_dim_odd(struct desc *d) { set_u32(d, akey(d, "rope.dimension_count"), 63); }
static void rope_dim_big(struct desc *d) { set_u32(d, akey(d, "rope.dimension_count"), 66); }
static void context_0(struct desc *d) { set_u32(d, akey(d, "context_length"), 0); }
static void no_ffn_up(struct desc *d) { del_tensor(d, "blk.0.ffn_up.weight"); }
static void no_output_norm(struct desc *d) { del_tensor(d, "output_norm.weight"); }
static void no_token_embd(struct desc *d) { del_tensor(d, "token_embd.weight"); }
static void no_attn_sub_norm(struct desc *d) { del_tensor(d, "blk.0.attn_sub_norm.weight"); }
static void no_ffn_sub_norm(struct desc *d) { del_tensor(d, "blk.0.ffn_sub_norm.weight"); }
static void two_layers_one_written(struct desc *d) { set_u32(d, akey(d, "block_count"), 2); }
static void attn_q_half(struct desc *d) { t_get(d, "blk.0.attn_q.weight")->ne[1] = 128; }
static void ffn_down_transposed(struct desc *d)
{
	struct tensor *t = t_get(d, "blk.0.ffn_down.weight");
	t->ne[0] = 256;
	t->ne[1] = 256;
	set_u32(d, akey(d, "feed_forward_length"), 512);
	t_get(d, "blk.0.ffn_gate.weight")->ne[1] = 512;
	t_get(d, "blk.0.ffn_up.weight")->ne[1] = 512;
	t_get(d, "blk.0.ffn_sub_norm.weight")->ne[0] = 512;
}
static void attn_norm_long(struct desc *d) { t_get(d, "blk.0.attn_norm.weight")->ne[0] = 512; }
static void attn_k_3d(struct desc *d)
{
	struct tensor *t = t_get(d, "blk.0.attn_k.weight");
	t->n_dims = 3;
	t->ne[1] = 64;
	t->ne[2] = 2;
}
static void embd_narrow(struct desc *d)
{
	struct tensor *t = t_get(d, "token_embd.weight");
	t->ne[0] = 128;
}
static void output_short(struct desc *d)
{
	add_tensor(d, "output.weight", BN_TYPE_F16, 256, 299);
}
static void vocab_301(struct desc *d) { set_u32(d, akey(d, "vocab_size"), 301); }
static void bos_300(struct desc *d) { set_u32(d, "tokenizer.ggml.bos_token_id", 300); }
static void eos_big(struct desc *d) { set_u32(d, "tokenizer.ggml.eos_token_id", 100000); }
static void attn_q_q8_0(struct desc *d) { t_get(d, "blk.0.attn_q.weight")->type = BN_TYPE_Q8_0; }
static void attn_v_q6_k(struct desc *d) { t_get(d, "blk.0.attn_v.weight")->type = BN_TYPE_Q6_K; }
static void attn_norm_q8_0(struct desc *d)
{
	t_get(d, "blk.0.attn_norm.weight")->type = BN_TYPE_Q8_0;
}
static void sub_norm_tq2_0(struct desc *d)
{
	t_get(d, "blk.0.ffn_sub_norm.weight")->type = BN_TYPE_TQ2_0;
}
static void embd_tq2_0(struct desc *d) { t_get(d, "token_embd.weight")->type = BN_TYPE_TQ2_0; }
static void code_3(struct desc *d) { t_get(d, "blk.0.attn_k.weight")->code3 = 1; }
/* Qwen 3 and Gemma 3 files (one layer, unless said). */
static void arch_desc(struct desc *d, const char *arch, uint32_t n_layer)
{
	struct shape s = base_shape;
	s.arch = arch;
	s.n_layer = n_layer;
	desc_init(d, &s);
}
/* BitNet-embedding's seven input norms in layer i. */
static void add_norms_in(struct desc *d, uint32_t i)
{
	static const char *const names[] = { "attn_q", "attn_k", "attn_v", "attn_output",
					     "ffn_gate", "ffn_up", "ffn_down" };
	const uint32_t len[] = { 256, 256, 256, 256, 256, 256, 256 };
	for (int k = 0; k < 7; k++) {
		char n[64];
		snprintf(n, sizeof(n), "blk.%u.%s_norm_in.weight", i, names[k]);
		add_tensor(d, n, BN_TYPE_F32, len[k], 0);
	}
}
static void qwen3_no_q_norm(struct desc *d)
{
	arch_desc(d, "qwen3", 1);
	del_tensor(d, "blk.0.attn_q_norm.weight");
}
static void qwen3_k_norm_long(struct desc *d)
{
	arch_desc(d, "qwen3", 1);
	del_tensor(d, "blk.0.attn_k_norm.weight");
	add_tensor(d, "blk.0.attn_k_norm.weight", BN_TYPE_F32, 256, 0);
}
static void gemma3_no_post_ffw(struct desc *d)
{
	arch_desc(d, "gemma3", 1);
	del_tensor(d, "blk.0.post_ffw_norm.weight");
}
static void gemma3_softcap(struct desc *d)
{
	arch_desc(d, "gemma3", 1);
	set_f32(d, "gemma3.final_logit_softcapping", 30.0f);
}
static void gemma3_swa_string(struct desc *d)
{
	arch_desc(d, "gemma3", 1);
	set_str(d, "gemma3.attention.sliding_window", "512");
}
static void gemma3_swa_base_negative(struct desc *d)
{
	arch_desc(d, "gemma3", 1);
	set_u32(d, "gemma3.attention.sliding_window", 512);
	set_f32(d, "gemma3.rope.freq_base_swa", -10000.0f);
}
static void norms_in_layer1_only(struct desc *d)
{
	arch_desc(d, "qwen3", 2);
	add_norms_in(d, 1);
}
static void norms_in_partial(struct desc *d)
{
	arch_desc(d, "qwen3", 1);
	add_norms_in(d, 0);
	del_tensor(d, "blk.0.ffn_down_norm_in.weight");
}
static void norms_in_o_long(struct desc *d)
{
	arch_desc(d, "gemma3", 1);
	add_norms_in(d, 0);
	del_tensor(d, "blk.0.attn_output_norm_in.weight");
	add_tensor(d, "blk.0.attn_output_norm_in.weight", BN_TYPE_F32, 512, 0);
}
static void qwen3_i2_s_no_file_type(struct desc *d)
{
	struct shape s = base_shape;
	s.arch = "qwen3";
	s.lin_type = BN_TYPE_I2_S;
	desc_init(d, &s);
	del_kv(d, "general.file_type");
}
static void llama_i2_s(struct desc *d)
{
	struct shape s = base_shape;
	s.arch = "llama";
	s.lin_type = BN_TYPE_I2_S;
	desc_init(d, &s);
	del_kv(d, "general.file_type");
}
static void llama_one_i2_s(struct desc *d)
{
	struct shape s = base_shape;
	s.arch = "llama";
	desc_init(d, &s);
	t_get(d, "blk.0.ffn_gate.weight")->type = BN_TYPE_I2_S;
}
static void llama_i2_s_file_type_2(struct desc *d)
{
	llama_i2_s(d);
	set_u32(d, "general.file_type", 2);
}
/* Upstream's type 36 (IQ4_NL_4_4) takes more bytes than I2_S: file_type 40 is not enough. */
static void llama_i2_s_wrong_span(struct desc *d)
{
	struct shape s = base_shape;
	s.arch = "llama";
	s.lin_type = BN_TYPE_I2_S;
	desc_init(d, &s);
	struct tensor *t = t_get(d, "blk.0.ffn_gate.weight");
	t->type = BN_TYPE_Q8_0;
	t->disk_type = BN_TYPE_I2_S;
}
static void i2_s_nan_scale(struct desc *d)
{
	struct shape s = base_shape;
	s.lin_type = BN_TYPE_I2_S;
	desc_init(d, &s);
	t_get(d, "blk.0.attn_v.weight")->nan_scale = 1;
}
static void key_value_differ(struct desc *d)
{
	set_u32(d, akey(d, "attention.key_length"), 64);
	set_u32(d, akey(d, "attention.value_length"), 32);
}
static void value_without_key(struct desc *d) { set_u32(d, akey(d, "attention.value_length"), 64); }
static void key_length_huge(struct desc *d)
{
	set_u32(d, akey(d, "attention.key_length"), 4096);
	set_u32(d, akey(d, "attention.value_length"), 4096);
}
static void key_length_string(struct desc *d) { set_str(d, akey(d, "attention.key_length"), "64"); }
static void rope_yarn(struct desc *d) { set_str(d, akey(d, "rope.scaling.type"), "yarn"); }
static void rope_type_u32(struct desc *d) { set_u32(d, akey(d, "rope.scaling.type"), 1); }
static void rope_factor_negative(struct desc *d)
{
	set_str(d, akey(d, "rope.scaling.type"), "linear");
	set_f32(d, akey(d, "rope.scaling.factor"), -2.0f);
}
static void rope_factor_inf(struct desc *d) { set_f32(d, akey(d, "rope.scale_linear"), INFINITY); }
static void rope_freqs_short(struct desc *d) { add_tensor(d, "rope_freqs.weight", BN_TYPE_F32, 15, 0); }
static void llama_gelu(struct desc *d)
{
	struct shape s = base_shape;
	s.arch = "llama";
	desc_init(d, &s);
	set_str(d, "llama.hidden_activation", "gelu_new");
}
static void b158_act_empty(struct desc *d) { set_str(d, akey(d, "hidden_activation"), ""); }
static void bitnet_gelu(struct desc *d)
{
	struct shape s = base_shape;
	s.arch = "bitnet";
	desc_init(d, &s);
	set_str(d, "bitnet.hidden_activation", "swish");
}
static void bitnet_act_u32(struct desc *d)
{
	struct shape s = base_shape;
	s.arch = "bitnet";
	desc_init(d, &s);
	set_u32(d, "bitnet.hidden_activation", 2);
}

static const struct defect defects[] = {
	{ "no_arch", no_arch, "no general.architecture string in the metadata" },
	{ "arch_gpt2", arch_gpt2, "architecture 'gpt2' is not supported" },
	{ "arch_not_string", arch_not_string, "no general.architecture string" },
	{ "no_embd", no_embd, "metadata key bitnet-b1.58.embedding_length is missing" },
	{ "no_blocks", no_blocks, "metadata key bitnet-b1.58.block_count is missing" },
	{ "no_ff", no_ff, "metadata key bitnet-b1.58.feed_forward_length is missing" },
	{ "no_heads", no_heads, "metadata key bitnet-b1.58.attention.head_count is missing" },
	{ "embd_string", embd_string,
	  "metadata key bitnet-b1.58.embedding_length is not an unsigned 32-bit integer" },
	{ "heads_float", heads_float,
	  "metadata key bitnet-b1.58.attention.head_count is not an unsigned 32-bit integer" },
	{ "blocks_negative", blocks_negative,
	  "metadata key bitnet-b1.58.block_count is not an unsigned 32-bit integer" },
	{ "eps_string", eps_string,
	  "bitnet-b1.58.attention.layer_norm_rms_epsilon is not a finite float" },
	{ "rope_base_nan", rope_base_nan, "bitnet-b1.58.rope.freq_base is not a finite float" },
	{ "bos_string", bos_string, "tokenizer.ggml.bos_token_id is not an unsigned integer" },
	{ "heads_3", heads_3, "embedding length 256 is not a multiple of the head count 3" },
	{ "kv_heads_3", kv_heads_3, "head count 4 is not a multiple of the KV head count 3" },
	{ "kv_heads_0", kv_heads_0, "head count 4 is not a multiple of the KV head count 0" },
	{ "rope_dim_odd", rope_dim_odd,
	  "rope.dimension_count 63 must be even and at most the head dim 64" },
	{ "rope_dim_big", rope_dim_big,
	  "rope.dimension_count 66 must be even and at most the head dim 64" },
	{ "context_0", context_0, "a hyper-parameter is zero" },
	{ "no_ffn_up", no_ffn_up, "tensor 'blk.0.ffn_up.weight' is missing" },
	{ "no_output_norm", no_output_norm, "tensor 'output_norm.weight' is missing" },
	{ "no_token_embd", no_token_embd, "tensor 'token_embd.weight' is missing" },
	{ "no_attn_sub_norm", no_attn_sub_norm, "tensor 'blk.0.attn_sub_norm.weight' is missing" },
	{ "no_ffn_sub_norm", no_ffn_sub_norm, "tensor 'blk.0.ffn_sub_norm.weight' is missing" },
	{ "two_layers_one_written", two_layers_one_written,
	  "tensor 'blk.1.attn_norm.weight' is missing" },
	{ "attn_q_half", attn_q_half,
	  "tensor 'blk.0.attn_q.weight' has shape [256, 128], the metadata says [256, 256]" },
	{ "ffn_down_transposed", ffn_down_transposed,
	  "tensor 'blk.0.ffn_down.weight' has shape [256, 256], the metadata says [512, 256]" },
	{ "attn_norm_long", attn_norm_long,
	  "tensor 'blk.0.attn_norm.weight' has shape [512, 1], the metadata says [256, 1]" },
	{ "attn_k_3d", attn_k_3d, "tensor 'blk.0.attn_k.weight' has shape [256, 64]" },
	{ "embd_narrow", embd_narrow,
	  "tensor 'token_embd.weight' has shape [128, 300], the metadata says [256, vocab]" },
	{ "output_short", output_short,
	  "tensor 'output.weight' has shape [256, 299], the metadata says [256, 300]" },
	{ "vocab_301", vocab_301,
	  "bitnet-b1.58.vocab_size is 301 but token_embd.weight has 300 rows" },
	{ "bos_300", bos_300, "bos id 300 or eos id 7 is outside the vocabulary (300)" },
	{ "eos_big", eos_big, "bos id 5 or eos id 100000 is outside the vocabulary (300)" },
	{ "attn_q_q8_0", attn_q_q8_0,
	  "tensor 'blk.0.attn_q.weight' has type Q8_0, which bitnetd does not accept there" },
	{ "attn_v_q6_k", attn_v_q6_k,
	  "tensor 'blk.0.attn_v.weight' has type Q6_K, which bitnetd does not accept there" },
	{ "attn_norm_q8_0", attn_norm_q8_0,
	  "tensor 'blk.0.attn_norm.weight' has type Q8_0; norm weights must be F32, F16 or BF16" },
	{ "sub_norm_tq2_0", sub_norm_tq2_0,
	  "tensor 'blk.0.ffn_sub_norm.weight' has type TQ2_0; norm weights must be" },
	{ "embd_tq2_0", embd_tq2_0,
	  "tensor 'token_embd.weight' has type TQ2_0; embeddings must be F32, F16, BF16, Q4_0, Q8_0 or Q6_K" },
	{ "code_3", code_3, "tensor 'blk.0.attn_k.weight' row 0 cannot be decoded" },
	{ "qwen3_no_q_norm", qwen3_no_q_norm, "tensor 'blk.0.attn_q_norm.weight' is missing" },
	{ "qwen3_k_norm_long", qwen3_k_norm_long,
	  "tensor 'blk.0.attn_k_norm.weight' has shape [256, 1], the metadata says [64, 1]" },
	{ "gemma3_no_post_ffw", gemma3_no_post_ffw, "tensor 'blk.0.post_ffw_norm.weight' is missing" },
	{ "gemma3_softcap", gemma3_softcap,
	  "gemma3.final_logit_softcapping is 30; bitnetd does not soft-cap logits" },
	{ "gemma3_swa_string", gemma3_swa_string,
	  "metadata key gemma3.attention.sliding_window is not an unsigned 32-bit integer" },
	{ "gemma3_swa_base_negative", gemma3_swa_base_negative,
	  "gemma3.rope.freq_base_swa must be positive" },
	{ "norms_in_layer1_only", norms_in_layer1_only,
	  "tensor 'blk.1.attn_q_norm_in.weight' is a per-projection input norm, but "
	  "blk.0.attn_q_norm_in.weight is missing" },
	{ "norms_in_partial", norms_in_partial, "tensor 'blk.0.ffn_down_norm_in.weight' is missing" },
	{ "norms_in_o_long", norms_in_o_long,
	  "tensor 'blk.0.attn_output_norm_in.weight' has shape [512, 1], the metadata says [256, 1]" },
	{ "qwen3_i2_s_no_file_type", qwen3_i2_s_no_file_type,
	  "has type 36, which in a qwen3 file is I2_S only when general.file_type is 40" },
	{ "llama_i2_s", llama_i2_s,
	  "has type 36, which in a llama file is I2_S only when general.file_type is 40 "
	  "(bitnet.cpp's I2_S), and it is missing here; upstream llama.cpp gave type 36 to "
	  "IQ4_NL_4_4, which bitnetd does not support" },
	{ "llama_one_i2_s", llama_one_i2_s,
	  "tensor 'blk.0.ffn_gate.weight' has type 36, which in a llama file is I2_S only when" },
	{ "llama_i2_s_file_type_2", llama_i2_s_file_type_2,
	  "general.file_type is 40 (bitnet.cpp's I2_S), and it is 2 here" },
	{ "llama_i2_s_wrong_span", llama_i2_s_wrong_span,
	  "tensor 'blk.0.ffn_gate.weight' has type 36 and general.file_type is 40 (I2_S), but its "
	  "data takes 69632 bytes where I2_S takes 16416 (n/4 + 32): this is not bitnet.cpp's "
	  "I2_S" },
	{ "i2_s_nan_scale", i2_s_nan_scale,
	  "tensor 'blk.0.attn_v.weight' row 0 has a scale that is not finite" },
	{ "key_value_differ", key_value_differ,
	  "bitnet-b1.58.attention.key_length 64 and value_length 32 differ" },
	{ "value_without_key", value_without_key,
	  "bitnet-b1.58.attention.value_length is 64 but there is no key_length" },
	{ "key_length_huge", key_length_huge, "bitnet-b1.58.attention.key_length 4096 is over 2048" },
	{ "key_length_string", key_length_string,
	  "metadata key bitnet-b1.58.attention.key_length is not an unsigned 32-bit integer" },
	{ "rope_yarn", rope_yarn,
	  "bitnet-b1.58.rope.scaling.type 'yarn' is not supported (none, linear)" },
	{ "rope_type_u32", rope_type_u32,
	  "metadata key bitnet-b1.58.rope.scaling.type is not a string" },
	{ "rope_factor_negative", rope_factor_negative, "the RoPE scaling factor -2 is not positive" },
	{ "rope_factor_inf", rope_factor_inf,
	  "metadata key bitnet-b1.58.rope.scale_linear is not a finite float" },
	{ "rope_freqs_short", rope_freqs_short,
	  "tensor 'rope_freqs.weight' has shape [15, 1], the metadata says [16, 1]" },
	{ "bitnet_gelu", bitnet_gelu,
	  "bitnet.hidden_activation \"swish\" is not an activation bitnetd knows (silu, relu2, gelu)" },
	{ "bitnet_act_u32", bitnet_act_u32, "bitnet.hidden_activation is not a string (silu, relu2, gelu)" },
	{ "llama_gelu", llama_gelu,
	  "llama.hidden_activation \"gelu_new\" is not an activation bitnetd knows (silu, relu2, gelu)" },
	{ "b158_act_empty", b158_act_empty,
	  "bitnet-b1.58.hidden_activation \"\" is not an activation bitnetd knows" },
};
#define N_DEFECTS ((int)(sizeof(defects) / sizeof(defects[0])))

START_TEST(refuses_defect)
{
	const struct defect *f = &defects[_i];
	struct desc d;
	desc_init(&d, &base_shape);
	f->edit(&d);
	expect_desc_refused(&d, f->name, f->phrase);
}
END_TEST

START_TEST(refuses_non_gguf)
{
	char path[256];
	temp_path(path, sizeof(path), "text");
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("this is a text file, not a model: it only has to be longer than a GGUF header\n", f);
	fclose(f);
	expect_refused(path, "not a GGUF file");
	unlink(path);
	temp_path(path, sizeof(path), "empty");
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	expect_refused(path, "truncated");
	unlink(path);
	temp_path(path, sizeof(path), "missing");
	expect_refused(path, "cannot open");
	expect_refused(tmp_dir, "is a directory, not a GGUF file");
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Valid files                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* Codes and scales of a repacked linear equal the weights written; padding codes are 1. */
static void check_t2(struct desc *d, const char *name, const struct bn_linear *l)
{
	const struct tensor *t = t_get(d, name);
	ck_assert_msg(l->kind == BN_LINEAR_T2, "%s: kind %d", name, l->kind);
	ck_assert_uint_eq(l->n_in, t->ne[0]);
	ck_assert_uint_eq(l->n_out, t->ne[1]);
	ck_assert_uint_eq(l->t2.n_in, t->ne[0]);
	ck_assert_uint_eq(l->t2.n_out, t->ne[1]);
	ck_assert_uint_eq(l->t2.row_bytes, bn_t2_row_bytes(t->ne[0]));
	ck_assert_msg(l->src && bn_gguf_str_eq(l->src->name, name), "%s: src", name);
	ck_assert_uint_eq((uintptr_t)l->t2.codes % 64, 0);
	for (uint32_t r = 0; r < l->n_out; r++) {
		const uint8_t *row = l->t2.codes + (size_t)r * l->t2.row_bytes;
		for (uint32_t k = 0; k < l->t2.row_bytes * 4; k++) {
			int want = k < l->n_in ? weight_of(t, r, k) + 1 : 1;
			ck_assert_msg(bn_t2_code(row, k) == want,
				      "%s row %u weight %u: code %u, want %d", name, r, k,
				      bn_t2_code(row, k), want);
		}
		if (!t->mixed_scales) {
			ck_assert_ptr_null(l->t2.gscale);
			ck_assert_uint_eq(l->t2.group, 0);
			ck_assert_msg(l->t2.scale[r] == scale_of(t, r), "%s row %u: scale %g, want %g",
				      name, r, l->t2.scale[r], scale_of(t, r));
			continue;
		}
		/* one scale per 256-weight block, as written (encode_tq_row) */
		ck_assert_ptr_null(l->t2.scale);
		ck_assert_uint_eq(l->t2.group, BN_QK_K);
		for (uint32_t b = 0; b < l->n_in / BN_QK_K; b++) {
			float want = scale_of(t, r) * (float)(b + 1);
			float got = l->t2.gscale[(size_t)r * (l->n_in / BN_QK_K) + b];
			ck_assert_msg(got == want, "%s row %u block %u: scale %g, want %g", name, r, b,
				      got, want);
		}
	}
}

static void check_all_t2(struct desc *d, const struct bn_model *m)
{
	for (uint32_t i = 0; i < m->cfg.n_layer; i++) {
		const struct bn_layer *L = &m->layers[i];
		const struct bn_linear *ls[] = { &L->wq, &L->wk, &L->wv, &L->wo,
						 &L->w_gate, &L->w_up, &L->w_down };
		const char *names[] = { "attn_q", "attn_k", "attn_v", "attn_output",
					"ffn_gate", "ffn_up", "ffn_down" };
		for (int j = 0; j < 7; j++) {
			char name[64];
			snprintf(name, sizeof(name), "blk.%u.%s.weight", i, names[j]);
			check_t2(d, name, ls[j]);
		}
	}
}

/* A norm vector equals the values written, as the file's type stores them. */
static void check_norm(struct desc *d, const char *name, const float *v)
{
	const struct tensor *t = t_get(d, name);
	ck_assert_ptr_nonnull(v);
	for (uint64_t k = 0; k < t->ne[0]; k++) {
		float f = float_of(t, 0, k);
		float want = t->type == BN_TYPE_F16    ? bn_half_to_float(bn_float_to_half(f))
			     : t->type == BN_TYPE_BF16 ? bn_bf16_to_float(bn_float_to_bf16(f))
						       : f;
		ck_assert_msg(v[k] == want, "%s[%llu] = %g, want %g", name, (unsigned long long)k,
			      v[k], want);
	}
}

START_TEST(loads_valid_bitnet_b158)
{
	struct desc d;
	struct bn_model m;
	char path[256];
	desc_init(&d, &base_shape);
	load_ok(&d, "valid", &m, path, sizeof(path));
	const struct bn_model_config *c = &m.cfg;
	ck_assert_int_eq(c->arch, BN_ARCH_BITNET_B158);
	ck_assert_str_eq(c->arch_name, "bitnet-b1.58");
	ck_assert_str_eq(c->name, "test-model");
	ck_assert_uint_eq(c->n_embd, 256);
	ck_assert_uint_eq(c->n_layer, 1);
	ck_assert_uint_eq(c->n_head, 4);
	ck_assert_uint_eq(c->n_head_kv, 2);
	ck_assert_uint_eq(c->head_dim, 64);
	ck_assert_uint_eq(c->n_ff, 256);
	ck_assert_uint_eq(c->n_vocab, 300);
	ck_assert_uint_eq(c->n_ctx, 512);
	ck_assert_uint_eq(c->rope_dim, 32);
	ck_assert(c->rope_base == 500000.0f);
	ck_assert(c->rms_eps == 1e-6f);
	ck_assert_int_eq(c->rope_neox, 1);
	ck_assert_int_eq(c->sub_norms, 1);
	ck_assert_int_eq(c->act, BN_ACT_RELU2);
	ck_assert_uint_eq(c->bos_id, 5);
	ck_assert_uint_eq(c->eos_id, 7);
	check_all_t2(&d, &m);
	check_norm(&d, "output_norm.weight", m.output_norm);
	check_norm(&d, "blk.0.attn_norm.weight", m.layers[0].attn_norm);
	check_norm(&d, "blk.0.ffn_norm.weight", m.layers[0].ffn_norm);
	check_norm(&d, "blk.0.attn_sub_norm.weight", m.layers[0].attn_sub_norm);
	check_norm(&d, "blk.0.ffn_sub_norm.weight", m.layers[0].ffn_sub_norm);
	/* tied: the LM head is the embedding, repacked into panels that the embedding reads */
	ck_assert_ptr_nonnull(m.tok_embd);
	ck_assert(bn_gguf_str_eq(m.tok_embd->name, "token_embd.weight"));
	ck_assert_ptr_eq(m.output.src, m.tok_embd);
	ck_assert_int_eq(m.output.kind, BN_LINEAR_FLOAT);
	ck_assert_uint_eq(m.output.f.type, BN_TYPE_F16);
	ck_assert_uint_eq(m.output.f.panel_rows, BN_F_PANEL_ROWS);
	ck_assert_int_eq(m.embed_from_output, 1);
	ck_assert_uint_eq(m.output.n_in, 256);
	ck_assert_uint_eq(m.output.n_out, 300);
	check_float_rows(&d, "token_embd.weight", &m.output.f);
	/* every linear is 256 x 256 or 256 x 128: one chunk a row; the head: 5 groups of 64 */
	uint64_t rows = 256 + 128 + 128 + 256 + 256 + 256 + 256;
	ck_assert_uint_eq(m.repacked_bytes, rows * (64 + 4) + 5 * 64 * 256 * 2);
	float row[256];
	const struct tensor *te = t_get(&d, "token_embd.weight");
	bn_model_embed(&m, 299, row);
	for (int k = 0; k < 256; k++)
		ck_assert(row[k] == bn_half_to_float(bn_float_to_half(float_of(te, 299, k))));
	bn_model_free(&m);
	bn_model_free(&m);
	unlink(path);
}
END_TEST

/* Every optional key absent: the defaults of model.h. */
START_TEST(defaults_apply)
{
	struct shape s = base_shape;
	s.n_head_kv = s.n_head; /* the default KV head count is the head count */
	struct desc d;
	desc_init(&d, &s);
	const char *optional[] = { "attention.head_count_kv", "attention.layer_norm_rms_epsilon",
				   "rope.freq_base", "rope.dimension_count", "context_length",
				   "vocab_size" };
	for (size_t i = 0; i < sizeof(optional) / sizeof(optional[0]); i++)
		del_kv(&d, akey(&d, optional[i]));
	del_kv(&d, "tokenizer.ggml.bos_token_id");
	del_kv(&d, "tokenizer.ggml.eos_token_id");
	del_kv(&d, "general.name");
	struct bn_model m;
	char path[256];
	load_ok(&d, "defaults", &m, path, sizeof(path));
	const struct bn_model_config *c = &m.cfg;
	ck_assert_uint_eq(c->n_head_kv, 4);
	ck_assert(c->rms_eps == 1e-5f);
	ck_assert(c->rope_base == 10000.0f);
	ck_assert_uint_eq(c->n_ctx, 2048);
	ck_assert_uint_eq(c->bos_id, 1);
	ck_assert_uint_eq(c->eos_id, 2);
	ck_assert_uint_eq(c->rope_dim, c->head_dim);
	ck_assert_uint_eq(c->rope_dim, 64);
	ck_assert_uint_eq(c->n_vocab, 300);
	ck_assert_str_eq(c->name, "defaults.gguf"); /* the file's base name */
	check_all_t2(&d, &m);
	bn_model_free(&m);
	unlink(path);
}
END_TEST

/* The architecture decides RoPE pairing, sub-norms and the activation. */
struct arch_case {
	const char *arch;
	const char *act_key;   /* bitnet.hidden_activation, or NULL */
	enum bn_arch want_arch;
	int neox, sub_norms;
	enum bn_activation act;
};

static const struct arch_case arch_cases[] = {
	{ "llama", NULL, BN_ARCH_LLAMA, 0, 0, BN_ACT_SILU },
	{ "bitnet-b1.58", NULL, BN_ARCH_BITNET_B158, 1, 1, BN_ACT_RELU2 },
	{ "bitnet-25", NULL, BN_ARCH_BITNET_25, 1, 1, BN_ACT_RELU2 },
	{ "bitnet", NULL, BN_ARCH_BITNET, 1, 1, BN_ACT_SILU },
	{ "bitnet", "relu2", BN_ARCH_BITNET, 1, 1, BN_ACT_RELU2 },
	{ "bitnet", "relu_squared", BN_ARCH_BITNET, 1, 1, BN_ACT_RELU2 },
	{ "bitnet", "silu", BN_ARCH_BITNET, 1, 1, BN_ACT_SILU },
	{ "qwen3", NULL, BN_ARCH_QWEN3, 1, 0, BN_ACT_SILU },
	{ "gemma3", NULL, BN_ARCH_GEMMA3, 1, 0, BN_ACT_GELU },
};

START_TEST(architecture_fields)
{
	const struct arch_case *a = &arch_cases[_i];
	struct shape s = base_shape;
	s.arch = a->arch;
	struct desc d;
	desc_init(&d, &s);
	if (a->act_key)
		set_str(&d, "bitnet.hidden_activation", a->act_key);
	struct bn_model m;
	char path[256];
	load_ok(&d, "arch", &m, path, sizeof(path));
	ck_assert_int_eq(m.cfg.arch, a->want_arch);
	ck_assert_str_eq(m.cfg.arch_name, a->arch);
	ck_assert_int_eq(m.cfg.rope_neox, a->neox);
	ck_assert_int_eq(m.cfg.sub_norms, a->sub_norms);
	ck_assert_int_eq(m.cfg.act, a->act);
	if (a->sub_norms) {
		check_norm(&d, "blk.0.attn_sub_norm.weight", m.layers[0].attn_sub_norm);
		check_norm(&d, "blk.0.ffn_sub_norm.weight", m.layers[0].ffn_sub_norm);
	} else {
		ck_assert_ptr_null(m.layers[0].attn_sub_norm);
		ck_assert_ptr_null(m.layers[0].ffn_sub_norm);
	}
	int qwen_gemma = a->want_arch == BN_ARCH_QWEN3 || a->want_arch == BN_ARCH_GEMMA3;
	int gemma = a->want_arch == BN_ARCH_GEMMA3;
	ck_assert_int_eq(m.cfg.qk_norm, qwen_gemma);
	ck_assert_int_eq(m.cfg.post_norms, gemma);
	ck_assert_int_eq(m.cfg.proj_norms, 0);
	ck_assert(m.cfg.embd_scale == (gemma ? sqrtf(256.0f) : 1.0f));
	ck_assert(m.cfg.attn_scale == 1.0f / sqrtf(64.0f));
	if (qwen_gemma) {
		check_norm(&d, "blk.0.attn_q_norm.weight", m.layers[0].attn_q_norm);
		check_norm(&d, "blk.0.attn_k_norm.weight", m.layers[0].attn_k_norm);
	}
	if (gemma) {
		check_norm(&d, "blk.0.post_attention_norm.weight", m.layers[0].post_attn_norm);
		check_norm(&d, "blk.0.post_ffw_norm.weight", m.layers[0].post_ffw_norm);
	}
	check_all_t2(&d, &m);
	bn_model_free(&m);
	unlink(path);
}
END_TEST

/* A llama file may carry sub-norm tensors it does not use. */
START_TEST(llama_ignores_sub_norms)
{
	struct shape s = base_shape;
	s.arch = "llama";
	struct desc d;
	desc_init(&d, &s);
	add_tensor(&d, "blk.0.attn_sub_norm.weight", BN_TYPE_F32, 256, 0);
	struct bn_model m;
	char path[256];
	load_ok(&d, "llama_sub", &m, path, sizeof(path));
	ck_assert_ptr_null(m.layers[0].attn_sub_norm);
	bn_model_free(&m);
	unlink(path);
}
END_TEST

/* Each ternary file type, two layers; I2_S with n_ff 384 so ffn_down rows are padded. */
struct type_case {
	uint32_t type;
	uint32_t n_ff;
};

static const struct type_case type_cases[] = {
	{ BN_TYPE_TQ2_0, 256 },
	{ BN_TYPE_TQ1_0, 512 },
	{ BN_TYPE_I2_S, 384 },
	{ BN_TYPE_I2_S, 256 },
};

START_TEST(ternary_repack)
{
	struct shape s = base_shape;
	s.lin_type = type_cases[_i].type;
	s.n_ff = type_cases[_i].n_ff;
	s.n_layer = 2;
	struct desc d;
	desc_init(&d, &s);
	struct bn_model m;
	char path[256];
	load_ok(&d, "ternary", &m, path, sizeof(path));
	ck_assert_uint_eq(m.cfg.n_layer, 2);
	check_all_t2(&d, &m);
	bn_model_free(&m);
	unlink(path);
}
END_TEST

/* A block whose weights are all zero says nothing about the row's scale. */
START_TEST(zero_block_scale_ignored)
{
	struct shape s = base_shape;
	s.n_ff = 512;
	struct desc d;
	desc_init(&d, &s);
	t_get(&d, "blk.0.ffn_down.weight")->zero_block0 = 1;
	struct bn_model m;
	char path[256];
	load_ok(&d, "zero_block", &m, path, sizeof(path));
	check_all_t2(&d, &m);
	bn_model_free(&m);
	unlink(path);
}
END_TEST

/* A TQ2_0 matrix whose 256-weight blocks carry different scales (Ternary-Bonsai's repacks):
 * one scale per block, the others one per row as before; and the forward pass (t2g_gemm)
 * against the reference, which reads the blocks' scales from the file. */
START_TEST(mixed_scales_group)
{
	struct desc d;
	struct shape s = base_shape;
	s.n_ff = 512; /* ffn_down rows: two TQ2_0 blocks */
	desc_init(&d, &s);
	t_get(&d, "blk.0.ffn_down.weight")->mixed_scales = 1;
	struct bn_model m;
	char path[256];
	load_ok(&d, "mixed_scales", &m, path, sizeof(path));
	check_all_t2(&d, &m);
	ck_assert_uint_eq(m.n_grouped, 1);
	struct bn_pool *pool = bn_pool_new(2);
	struct bn_forward *f = bn_forward_new(&m, 1, pool, bn_kernels_select(NULL));
	struct bn_ref *ref = bn_ref_new(&m, 8);
	ck_assert(pool && f && ref);
	ck_assert_int_eq(bn_forward_kv_init_simple(f, 8), 0);
	uint32_t V = m.cfg.n_vocab, seq = 0, len = 1;
	float *want = malloc(V * sizeof(float)), *got = malloc(V * sizeof(float));
	ck_assert(want && got);
	for (uint32_t pos = 0; pos < 4; pos++) {
		uint32_t tok = 3 + pos * 7;
		struct bn_batch b = { .n_rows = 1, .width = 1, .tokens = &tok, .lens = &len,
				      .pos = &pos, .seq = &seq };
		ck_assert_int_eq(bn_forward_run(f, &b, got, 0), 0);
		ck_assert_int_eq(bn_ref_step(ref, tok, want), 0);
		for (uint32_t k = 0; k < V; k++)
			ck_assert_msg(fabsf(got[k] - want[k]) <= 1e-3f * (1.0f + fabsf(want[k])),
				      "pos %u logit %u: %g, reference %g", pos, k, got[k], want[k]);
	}
	free(want);
	free(got);
	bn_ref_free(ref);
	bn_forward_free(f);
	bn_pool_free(pool);
	bn_model_free(&m);
	unlink(path);
}
END_TEST

/* Float linear weights: repacked into panels, or used in place from the mapping. */
START_TEST(float_linears)
{
	const uint32_t types[] = { BN_TYPE_F32, BN_TYPE_F16, BN_TYPE_BF16 };
	for (size_t i = 0; i < 3; i++) {
		struct shape s = base_shape;
		s.lin_type = types[i];
		struct desc d;
		desc_init(&d, &s);
		t_get(&d, "blk.0.attn_norm.weight")->type = types[i];
		for (int in_place = 0; in_place < 2; in_place++) {
			struct bn_model m;
			char path[256];
			load_ok_as(&d, "float", in_place ? BN_FLOAT_IN_PLACE : BN_FLOAT_PANELS, &m,
				   path, sizeof(path));
			const struct bn_linear *l = &m.layers[0].wk;
			ck_assert_int_eq(l->kind, BN_LINEAR_FLOAT);
			ck_assert_uint_eq(l->f.type, types[i]);
			ck_assert_uint_eq(l->f.n_in, 256);
			ck_assert_uint_eq(l->f.n_out, 128);
			ck_assert_uint_eq(l->f.panel_rows, in_place ? 0 : BN_F_PANEL_ROWS);
			ck_assert_int_eq(m.embed_from_output, !in_place);
			if (in_place) {
				ck_assert_uint_eq(l->f.row_bytes, bn_row_bytes(types[i], 256));
				ck_assert_ptr_eq(l->f.data, l->src->data);
				ck_assert_uint_eq(m.repacked_bytes, 0);
			}
			check_float_rows(&d, "blk.0.attn_k.weight", &l->f);
			check_float_rows(&d, "blk.0.ffn_down.weight", &m.layers[0].w_down.f);
			check_norm(&d, "blk.0.attn_norm.weight", m.layers[0].attn_norm);
			bn_model_free(&m);
			unlink(path);
		}
	}
}
END_TEST

/* An untied LM head, in each type the head accepts; and quantized embeddings. */
START_TEST(untied_head)
{
	const uint32_t heads[] = { BN_TYPE_F16, BN_TYPE_F32, BN_TYPE_BF16, BN_TYPE_Q8_0,
				   BN_TYPE_Q6_K };
	for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
		struct shape s = base_shape;
		s.untied = 1;
		s.head_type = heads[i];
		s.embed_type = heads[i] == BN_TYPE_Q8_0 ? BN_TYPE_Q6_K : BN_TYPE_Q8_0;
		struct desc d;
		desc_init(&d, &s);
		struct bn_model m;
		char path[256];
		load_ok(&d, "untied", &m, path, sizeof(path));
		ck_assert_ptr_nonnull(m.output.src);
		ck_assert_msg(bn_gguf_str_eq(m.output.src->name, "output.weight"), "head is '%.*s'",
			      (int)m.output.src->name.len, m.output.src->name.ptr);
		ck_assert_ptr_ne(m.output.src, m.tok_embd);
		ck_assert_uint_eq(m.output.n_in, 256);
		ck_assert_uint_eq(m.output.n_out, 300);
		int decode = heads[i] == BN_TYPE_Q8_0 || heads[i] == BN_TYPE_Q6_K;
		ck_assert_int_eq(m.output.kind, decode ? BN_LINEAR_DECODE : BN_LINEAR_FLOAT);
		ck_assert_uint_eq(m.tok_embd->type, s.embed_type);
		bn_model_free(&m);
		unlink(path);
	}
}
END_TEST

/* A tied head in Q8_0: decoded rows, not refused. */
START_TEST(tied_quantized_head)
{
	struct shape s = base_shape;
	s.embed_type = BN_TYPE_Q8_0;
	struct desc d;
	desc_init(&d, &s);
	struct bn_model m;
	char path[256];
	load_ok(&d, "tied_q8", &m, path, sizeof(path));
	ck_assert_ptr_eq(m.output.src, m.tok_embd);
	ck_assert_int_eq(m.output.kind, BN_LINEAR_DECODE);
	bn_model_free(&m);
	unlink(path);
}
END_TEST

/* bitnet.cpp's llama files (Falcon3, Falcon-E, Llama3-8B-1.58): type 36 with general.file_type
 * 40 is I2_S, run with the llama graph (SiLU, no sub-norms, adjacent RoPE pairs). */
START_TEST(llama_i2_s_loads)
{
	struct shape s = base_shape;
	s.arch = "llama";
	s.lin_type = BN_TYPE_I2_S;
	s.n_ff = 384; /* ffn_down rows padded to whole T2 chunks */
	s.untied = 1;
	s.head_type = BN_TYPE_F16;
	struct desc d;
	desc_init(&d, &s);
	struct bn_model m;
	char path[256];
	load_ok(&d, "llama_i2_s", &m, path, sizeof(path));
	ck_assert_int_eq(m.cfg.arch, BN_ARCH_LLAMA);
	ck_assert_int_eq(m.cfg.act, BN_ACT_SILU);
	ck_assert_int_eq(m.cfg.rope_neox, 0);
	ck_assert_ptr_null(m.layers[0].attn_sub_norm);
	ck_assert_msg(strstr(m.cfg.act_why, "llama") != NULL, "why: %s", m.cfg.act_why);
	check_all_t2(&d, &m);
	ck_assert(bn_gguf_str_eq(m.output.src->name, "output.weight"));
	ck_assert_int_eq(m.output.kind, BN_LINEAR_FLOAT);
	ck_assert_uint_eq(m.n_candidates, 0);
	bn_model_free(&m);
	unlink(path);
}
END_TEST

/* attention.key_length sets the head size, which need not be n_embd / n_head (Falcon3's 256
 * is; others' is not): q is n_head * 128 = 512 wide here, the embedding 256. */
START_TEST(head_dim_from_key_length)
{
	struct shape s = base_shape;
	s.head_dim = 128;
	struct desc d;
	desc_init(&d, &s);
	del_kv(&d, akey(&d, "rope.dimension_count"));
	struct bn_model m;
	char path[256];
	load_ok(&d, "key_length", &m, path, sizeof(path));
	ck_assert_uint_eq(m.cfg.head_dim, 128);
	ck_assert_uint_eq(m.cfg.rope_dim, 128);
	ck_assert_uint_eq(m.layers[0].wq.n_out, 512);
	ck_assert_uint_eq(m.layers[0].wk.n_out, 256);
	ck_assert_uint_eq(m.layers[0].wo.n_in, 512);
	check_all_t2(&d, &m);
	bn_model_free(&m);
	unlink(path);
	/* without the key, 256 / 3 heads does not divide: refused, naming the key */
	set_u32(&d, akey(&d, "attention.head_count"), 3);
	set_u32(&d, akey(&d, "attention.head_count_kv"), 3);
	del_kv(&d, akey(&d, "attention.key_length"));
	del_kv(&d, akey(&d, "attention.value_length"));
	expect_desc_refused(&d, "no_key_length",
			    "embedding length 256 is not a multiple of the head count 3, and there is no "
			    "bitnet-b1.58.attention.key_length");
}
END_TEST

/* RoPE's scaling: the factor (or scale_linear) divides every angle, rope_freqs.weight each
 * pair's; absent, the angles are rope_base's alone. */
START_TEST(rope_scaling_read)
{
	struct desc d;
	desc_init(&d, &base_shape);
	struct bn_model m;
	char path[256];
	load_ok(&d, "rope_plain", &m, path, sizeof(path));
	ck_assert(m.cfg.rope_freq_scale == 1.0f);
	ck_assert_ptr_null(m.cfg.rope_factors);
	float plain = bn_rope_freq(&m.cfg, 3);
	ck_assert(plain == powf(500000.0f, -6.0f / 32.0f));
	bn_model_free(&m);
	set_str(&d, akey(&d, "rope.scaling.type"), "linear");
	set_f32(&d, akey(&d, "rope.scaling.factor"), 4.0f);
	add_tensor(&d, "rope_freqs.weight", BN_TYPE_F32, 16, 0);
	load_ok(&d, "rope_scaled", &m, path, sizeof(path));
	ck_assert(m.cfg.rope_freq_scale == 0.25f);
	check_norm(&d, "rope_freqs.weight", m.cfg.rope_factors);
	float f3 = float_of(t_get(&d, "rope_freqs.weight"), 0, 3);
	ck_assert(bn_rope_freq(&m.cfg, 3) == plain * 0.25f / f3);
	bn_model_free(&m);
	del_kv(&d, akey(&d, "rope.scaling.factor"));
	del_kv(&d, akey(&d, "rope.scaling.type"));
	set_f32(&d, akey(&d, "rope.scale_linear"), 2.0f);
	load_ok(&d, "rope_linear", &m, path, sizeof(path));
	ck_assert(m.cfg.rope_freq_scale == 0.5f);
	bn_model_free(&m);
	unlink(path);
}
END_TEST

/* The activation on each kind of file: the key where there is one (any architecture), else
 * the architecture's, and for bitnet-b1.58 the vocabulary rule; --activation over all. */
struct act_case {
	const char *arch;
	const char *key;       /* <arch>.hidden_activation, or NULL */
	const char *tok_model; /* tokenizer.ggml.model, or NULL */
	uint32_t n_tokens;     /* tokenizer.ggml.tokens' length (0: no array) */
	int forced;            /* --activation: -1 none, else an enum bn_activation */
	enum bn_activation want;
	const char *why;       /* in cfg.act_why */
};

static const struct act_case act_cases[] = {
	{ "bitnet-b1.58", NULL, "llama", 32002, -1, BN_ACT_SILU, "SentencePiece vocabulary of 32002" },
	{ "bitnet-b1.58", NULL, "llama", 32000, -1, BN_ACT_SILU, "1bitLLM's LLaMA-2 tokenizer" },
	{ "bitnet-b1.58", NULL, "llama", 32003, -1, BN_ACT_RELU2, "SentencePiece vocabulary of 32003" },
	{ "bitnet-b1.58", NULL, "llama", 31999, -1, BN_ACT_RELU2, "ReLU squared, as 2B4T" },
	{ "bitnet-b1.58", NULL, "gpt2", 32002, -1, BN_ACT_RELU2, "byte-level BPE vocabulary of 32002" },
	{ "bitnet-b1.58", NULL, "gpt2", 2000, -1, BN_ACT_RELU2, "byte-level BPE vocabulary of 2000" },
	{ "bitnet-b1.58", NULL, NULL, 0, -1, BN_ACT_RELU2, "and no vocabulary" },
	{ "bitnet-b1.58", "silu", "gpt2", 0, -1, BN_ACT_SILU, "bitnet-b1.58.hidden_activation" },
	{ "bitnet-b1.58", "relu2", "llama", 32002, -1, BN_ACT_RELU2, "bitnet-b1.58.hidden_activation" },
	{ "bitnet-25", NULL, "llama", 32002, -1, BN_ACT_RELU2, "bitnet-25 architecture" },
	{ "bitnet-25", "silu", NULL, 0, -1, BN_ACT_SILU, "bitnet-25.hidden_activation" },
	{ "bitnet", NULL, "llama", 32002, -1, BN_ACT_SILU, "bitnet architecture" },
	{ "llama", NULL, "llama", 32002, -1, BN_ACT_SILU, "llama architecture" },
	{ "llama", "relu2", NULL, 0, -1, BN_ACT_RELU2, "llama.hidden_activation" },
	{ "bitnet-b1.58", NULL, "llama", 32002, BN_ACT_RELU2, BN_ACT_RELU2,
	  "--activation relu2 (the file's: silu by bitnet-b1.58 without" },
	{ "llama", "relu2", NULL, 0, BN_ACT_SILU, BN_ACT_SILU,
	  "--activation silu (the file's: relu2 by llama.hidden_activation)" },
};

START_TEST(activation_decided)
{
	const struct act_case *a = &act_cases[_i];
	struct shape s = base_shape;
	s.arch = a->arch;
	s.vocab = a->n_tokens > 300 ? 300 : a->n_tokens ? a->n_tokens : 300;
	struct desc d;
	desc_init(&d, &s);
	char key[96];
	snprintf(key, sizeof(key), "%s.hidden_activation", a->arch);
	if (a->key)
		set_str(&d, key, a->key);
	if (a->tok_model)
		set_str(&d, "tokenizer.ggml.model", a->tok_model);
	if (a->n_tokens)
		set_strs(&d, "tokenizer.ggml.tokens", a->n_tokens);
	del_kv(&d, akey(&d, "vocab_size")); /* the embedding's rows; the rule reads the tokens */
	char path[256];
	temp_path(path, sizeof(path), "act");
	write_desc(&d, path);
	struct bn_model m;
	char err[BN_MODEL_ERR_LEN];
	struct bn_model_source src = { .activation = { a->forced >= 0, a->forced >= 0 ? (enum bn_activation)a->forced : BN_ACT_SILU } };
	ck_assert_int_eq(bn_model_open(&m, path, err), 0);
	ck_assert_msg(bn_model_fill(&m, &src, err) == 0, "%s", err);
	ck_assert_int_eq(m.cfg.act, a->want);
	ck_assert_msg(strstr(m.cfg.act_why, a->why) != NULL, "why \"%s\" does not say \"%s\"",
		      m.cfg.act_why, a->why);
	bn_model_free(&m);
	unlink(path);
}
END_TEST

/* A float file of a bitnet* architecture whose linears are ternary-valued: packed to T2 with
 * the codes and row scales written, in every float type; in a llama file, or with one value
 * off, the matrix stays float. */
START_TEST(ternary_from_float)
{
	const uint32_t types[] = { BN_TYPE_F32, BN_TYPE_F16, BN_TYPE_BF16 };
	for (size_t i = 0; i < 3; i++) {
		struct shape s = base_shape;
		s.lin_type = types[i];
		s.n_ff = 320; /* not a multiple of the 256-weight T2 chunk */
		struct desc d;
		desc_init(&d, &s);
		for (uint32_t t = 0; t < d.n_t; t++)
			d.t[t].ternary_float = d.t[t].n_dims == 2 && strncmp(d.t[t].name, "blk.", 4) == 0;
		struct bn_model m;
		char path[256];
		load_ok(&d, "tern_float", &m, path, sizeof(path));
		check_all_t2(&d, &m);
		ck_assert_uint_eq(m.n_candidates, 7);
		ck_assert_uint_eq(m.n_from_float, 7);
		ck_assert_int_eq(m.layers[0].wq.ternary_candidate, 1);
		ck_assert_int_eq(m.output.ternary_candidate, 0);
		bn_model_free(&m);
		/* the last weight of ffn_up's last row 1.5 s: that matrix stays float, as stored */
		t_get(&d, "blk.0.ffn_up.weight")->ternary_float = 2;
		load_ok(&d, "tern_float_off", &m, path, sizeof(path));
		const struct bn_linear *up = &m.layers[0].w_up;
		ck_assert_int_eq(up->kind, BN_LINEAR_FLOAT);
		ck_assert_int_eq(up->ternary_candidate, 1);
		ck_assert_uint_eq(m.n_from_float, 6);
		const struct tensor *tu = t_get(&d, "blk.0.ffn_up.weight");
		ck_assert(bn_f_weight(&up->f, 319, 255) == 1.5f * scale_of(tu, 319));
		ck_assert(bn_f_weight(&up->f, 0, 7) == (float)weight_of(tu, 0, 7) * scale_of(tu, 0));
		bn_model_free(&m);
		/* llama keeps its float graph */
		struct shape ls = s;
		ls.arch = "llama";
		struct desc dl;
		desc_init(&dl, &ls);
		for (uint32_t t = 0; t < dl.n_t; t++)
			dl.t[t].ternary_float = dl.t[t].n_dims == 2 && !strncmp(dl.t[t].name, "blk.", 4);
		load_ok(&dl, "tern_float_llama", &m, path, sizeof(path));
		ck_assert_int_eq(m.layers[0].wq.kind, BN_LINEAR_FLOAT);
		ck_assert_uint_eq(m.n_candidates, 0);
		bn_model_free(&m);
		unlink(path);
	}
}
END_TEST

/* Files a failed test left behind, then the directory. */
static void remove_tmp_dir(void)
{
	DIR *dir = opendir(tmp_dir);
	struct dirent *e;
	while (dir && (e = readdir(dir)) != NULL) {
		char path[512];
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", tmp_dir, e->d_name);
		unlink(path);
	}
	if (dir)
		closedir(dir);
	rmdir(tmp_dir);
}

int main(void)
{
	if (TU_TSAN) { /* testutil.h */
		puts(TU_TSAN_SKIP_MSG);
		return 77;
	}
	if (!mkdtemp(tmp_dir)) {
		perror("mkdtemp");
		return EXIT_FAILURE;
	}
	Suite *s = suite_create("model");
	TCase *bad = tcase_create("defects");
	tcase_set_timeout(bad, 60);
	tcase_add_loop_test(bad, refuses_defect, 0, N_DEFECTS);
	tcase_add_test(bad, refuses_non_gguf);
	suite_add_tcase(s, bad);
	TCase *good = tcase_create("valid files");
	tcase_set_timeout(good, 60);
	tcase_add_test(good, loads_valid_bitnet_b158);
	tcase_add_test(good, defaults_apply);
	tcase_add_loop_test(good, architecture_fields, 0,
			    (int)(sizeof(arch_cases) / sizeof(arch_cases[0])));
	tcase_add_test(good, llama_ignores_sub_norms);
	tcase_add_loop_test(good, ternary_repack, 0,
			    (int)(sizeof(type_cases) / sizeof(type_cases[0])));
	tcase_add_test(good, zero_block_scale_ignored);
	tcase_add_test(good, mixed_scales_group);
	tcase_add_test(good, float_linears);
	tcase_add_test(good, untied_head);
	tcase_add_test(good, tied_quantized_head);
	tcase_add_test(good, llama_i2_s_loads);
	tcase_add_test(good, head_dim_from_key_length);
	tcase_add_test(good, rope_scaling_read);
	tcase_add_loop_test(good, activation_decided, 0,
			    (int)(sizeof(act_cases) / sizeof(act_cases[0])));
	tcase_add_test(good, ternary_from_float);
	suite_add_tcase(s, good);
	int rc = tu_run_suite(s);
	remove_tmp_dir();
	return rc;
}
