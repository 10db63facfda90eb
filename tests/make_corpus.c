/* SPDX-License-Identifier: MIT */
/*
 * make_corpus.c — writes the GGUF fuzzing seed corpus (tests/corpus/gguf/): small valid files
 * of v2 and v3 with every metadata type and every tensor type, and broken ones, each one
 * defect away from a valid file, so the fuzzer starts next to both sides of every check; and
 * model headers (loader-*) for the configuration the loader reads from a parsed file
 * (model_config.c: bitnet.cpp's I2_S in a llama file, the head size, RoPE scaling, the
 * activation), valid ones and one defect away from them; and bitnet.cpp's TL1/TL2 files
 * (tl-*: the reader reads their whole table before refusing them), with a scalar tensor.
 * Run it again only to change the corpus:
 *
 *   cc -std=gnu11 -Ikernels -Ikernels/cpu tests/make_corpus.c tools/gguf_write.c \
 *       daemon/model/gguf.c kernels/cpu/types.c -o /tmp/make_corpus -lm && \
 *       /tmp/make_corpus tests/corpus/gguf
 */
#include "../daemon/model/gguf.h"
#include "../tools/gguf_write.h"
#include "quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct file {
	uint8_t *data;
	size_t size;
};

static void die(const char *what)
{
	fprintf(stderr, "make_corpus: %s\n", what);
	exit(1);
}

static void check(int rc, const char *what)
{
	if (rc != 0)
		die(what);
}

static void add_tensor(struct bn_gguf_writer *w, const char *name, uint32_t type,
		       uint32_t n_dims, const uint64_t *ne)
{
	uint64_t n = 1;
	for (uint32_t d = 0; d < n_dims; d++)
		n *= ne[d];
	uint64_t size = bn_tensor_bytes(type, n);
	uint8_t *data = malloc(size);
	if (!data)
		die("out of memory");
	for (uint64_t i = 0; i < size; i++)
		data[i] = (uint8_t)(i * 7 + n);
	check(bn_gguf_add_tensor(w, name, type, n_dims, ne, data, size), name);
	free(data);
}

static struct file finish(struct bn_gguf_writer *w)
{
	struct file f;
	check(bn_gguf_write_mem(w, &f.data, &f.size), "write_mem");
	bn_gguf_writer_free(w);
	return f;
}

static size_t find(const struct file *f, const char *s)
{
	size_t n = strlen(s);
	for (size_t i = 0; i + n <= f->size; i++)
		if (memcmp(f->data + i, s, n) == 0)
			return i;
	die(s);
	return 0;
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

/* ------------------------------------------------------------------------------------------ */
/* Valid files                                                                                */
/* ------------------------------------------------------------------------------------------ */

static struct file header_only(void)
{
	return finish(bn_gguf_writer_new(3, 32));
}

static struct file every_metadata_type(void)
{
	struct bn_gguf_writer *w = bn_gguf_writer_new(3, 32);
	uint8_t u8 = 200, b = 1;
	int8_t i8 = -3;
	uint16_t u16 = 65535;
	int16_t i16 = -2;
	int64_t i64 = -5;
	double f64 = 2.5;
	static const char *const strs[] = { "", "x", "yz" };
	static const int16_t i16s[] = { -1, 2 };
	static const double f64s[] = { 1.0, -1e300 };
	check(bn_gguf_add_scalar(w, "u8", BN_GGUF_UINT8, &u8), "u8");
	check(bn_gguf_add_scalar(w, "i8", BN_GGUF_INT8, &i8), "i8");
	check(bn_gguf_add_scalar(w, "u16", BN_GGUF_UINT16, &u16), "u16");
	check(bn_gguf_add_scalar(w, "i16", BN_GGUF_INT16, &i16), "i16");
	check(bn_gguf_add_u32(w, "u32", 7), "u32");
	check(bn_gguf_add_i32(w, "i32", -7), "i32");
	check(bn_gguf_add_f32(w, "f32", 0.5f), "f32");
	check(bn_gguf_add_scalar(w, "bool", BN_GGUF_BOOL, &b), "bool");
	check(bn_gguf_add_str(w, "str", "hello"), "str");
	check(bn_gguf_add_u64(w, "u64", UINT64_MAX), "u64");
	check(bn_gguf_add_scalar(w, "i64", BN_GGUF_INT64, &i64), "i64");
	check(bn_gguf_add_scalar(w, "f64", BN_GGUF_FLOAT64, &f64), "f64");
	check(bn_gguf_add_arr_str(w, "a.str", strs, 3), "a.str");
	check(bn_gguf_add_arr(w, "a.i16", BN_GGUF_INT16, i16s, 2), "a.i16");
	check(bn_gguf_add_arr(w, "a.f64", BN_GGUF_FLOAT64, f64s, 2), "a.f64");
	check(bn_gguf_add_arr(w, "a.empty", BN_GGUF_UINT8, NULL, 0), "a.empty");
	return finish(w);
}

static struct file float_tensors_v3(void)
{
	struct bn_gguf_writer *w = bn_gguf_writer_new(3, 32);
	check(bn_gguf_add_str(w, "general.architecture", "bitnet"), "arch");
	add_tensor(w, "f32", BN_TYPE_F32, 2, (const uint64_t[]){ 4, 3 });
	add_tensor(w, "f16", BN_TYPE_F16, 1, (const uint64_t[]){ 8 });
	add_tensor(w, "bf16", BN_TYPE_BF16, 3, (const uint64_t[]){ 2, 2, 2 });
	add_tensor(w, "q8_0", BN_TYPE_Q8_0, 2, (const uint64_t[]){ 32, 2 });
	return finish(w);
}

static struct file ternary_tensors_v3(void)
{
	struct bn_gguf_writer *w = bn_gguf_writer_new(3, 32);
	check(bn_gguf_add_str(w, "general.architecture", "bitnet"), "arch");
	add_tensor(w, "tq1_0", BN_TYPE_TQ1_0, 1, (const uint64_t[]){ 256 });
	add_tensor(w, "tq2_0", BN_TYPE_TQ2_0, 2, (const uint64_t[]){ 256, 2 });
	add_tensor(w, "i2_s", BN_TYPE_I2_S, 2, (const uint64_t[]){ 128, 2 });
	return finish(w);
}

static struct file mixed_v2_align64(void)
{
	struct bn_gguf_writer *w = bn_gguf_writer_new(2, 64);
	check(bn_gguf_add_u32(w, "bitnet.block_count", 1), "blocks");
	add_tensor(w, "q6_k", BN_TYPE_Q6_K, 1, (const uint64_t[]){ 256 });
	add_tensor(w, "f32.4d", BN_TYPE_F32, 4, (const uint64_t[]){ 1, 2, 1, 2 });
	return finish(w);
}

/* The shape of a real model's header: architecture, hyperparameters, a small vocabulary. */
static struct file model_like_v3(void)
{
	struct bn_gguf_writer *w = bn_gguf_writer_new(3, 32);
	const char *tokens[24];
	char storage[24][8];
	float scores[24];
	int32_t types[24];
	for (int i = 0; i < 24; i++) {
		snprintf(storage[i], sizeof(storage[i]), "t%d", i);
		tokens[i] = storage[i];
		scores[i] = -(float)i;
		types[i] = i < 3 ? 3 : 1;
	}
	check(bn_gguf_add_str(w, "general.architecture", "bitnet"), "arch");
	check(bn_gguf_add_str(w, "general.name", "corpus"), "name");
	check(bn_gguf_add_u32(w, "bitnet.context_length", 64), "ctx");
	check(bn_gguf_add_u32(w, "bitnet.embedding_length", 256), "embd");
	check(bn_gguf_add_f32(w, "bitnet.attention.layer_norm_rms_epsilon", 1e-5f), "eps");
	check(bn_gguf_add_str(w, "tokenizer.ggml.model", "llama"), "tok model");
	check(bn_gguf_add_arr_str(w, "tokenizer.ggml.tokens", tokens, 24), "tokens");
	check(bn_gguf_add_arr_f32(w, "tokenizer.ggml.scores", scores, 24), "scores");
	check(bn_gguf_add_arr_i32(w, "tokenizer.ggml.token_type", types, 24), "types");
	check(bn_gguf_add_bool(w, "tokenizer.ggml.add_bos_token", 1), "bos");
	add_tensor(w, "token_embd.weight", BN_TYPE_F16, 2, (const uint64_t[]){ 8, 24 });
	add_tensor(w, "blk.0.attn_q.weight", BN_TYPE_I2_S, 2, (const uint64_t[]){ 256, 2 });
	add_tensor(w, "output_norm.weight", BN_TYPE_F32, 1, (const uint64_t[]){ 8 });
	return finish(w);
}

/* A TL2 file as bitnet.cpp's converter writes one (daemon/model/gguf.c refuses it): the
 * tiled matrix of ggml type 39 with its float shape, its F32 scalar scale (0 dimensions)
 * after it, general.file_type 39; `scale` 0 leaves the scale out. */
static struct file tl2(int scale)
{
	struct bn_gguf_writer *w = bn_gguf_writer_new(3, 32);
	static uint8_t tiles[256 * 256 / 4];
	const float max_abs = 0.5f;
	check(bn_gguf_add_str(w, "general.architecture", "llama"), "arch");
	check(bn_gguf_add_u32(w, "general.file_type", scale ? 39 : 1), "file type");
	add_tensor(w, "token_embd.weight", BN_TYPE_F16, 2, (const uint64_t[]){ 256, 2 });
	check(bn_gguf_add_tensor_bytes(w, "blk.0.attn_q.weight", 39, 2,
				       (const uint64_t[]){ 256, 256 }, tiles, sizeof(tiles)), "tl2");
	if (scale)
		check(bn_gguf_add_tensor(w, "blk.0.attn_q.weight_scale", BN_TYPE_F32, 0, NULL,
					 &max_abs, sizeof(max_abs)), "scale");
	add_tensor(w, "output_norm.weight", BN_TYPE_F32, 1, (const uint64_t[]){ 256 });
	return finish(w);
}

static struct file tl2_marked(void) { return tl2(1); }
static struct file tl2_unmarked(void) { return tl2(0); }

/* The base of the broken files: every kind of field a corruption can reach. */
static struct file base(void)
{
	struct bn_gguf_writer *w = bn_gguf_writer_new(3, 32);
	static const char *const toks[] = { "a", "bc" };
	static const int32_t nums[] = { 1, 2 };
	check(bn_gguf_add_str(w, "general.name", "base"), "name");
	check(bn_gguf_add_u32(w, "key.aaaa", 1), "aaaa");
	check(bn_gguf_add_u32(w, "key.aaab", 2), "aaab");
	check(bn_gguf_add_arr_str(w, "tok.list", toks, 2), "toks");
	check(bn_gguf_add_arr_i32(w, "num.list", nums, 2), "nums");
	add_tensor(w, "t.quant", BN_TYPE_TQ2_0, 1, (const uint64_t[]){ 256 });
	add_tensor(w, "t.aaaa", BN_TYPE_F32, 2, (const uint64_t[]){ 4, 2 });
	add_tensor(w, "t.aaab", BN_TYPE_F32, 1, (const uint64_t[]){ 8 });
	return finish(w);
}

/* ------------------------------------------------------------------------------------------ */
/* Broken files: the base with one defect                                                     */
/* ------------------------------------------------------------------------------------------ */

/* Offsets of a tensor's directory fields (after its name). */
static size_t n_dims_at(const struct file *f, const char *name)
{
	return find(f, name) + strlen(name);
}

static size_t type_at(const struct file *f, const char *name)
{
	size_t at = n_dims_at(f, name);
	return at + 4 + 8 * (size_t)f->data[at];
}

static void bad_magic(struct file *f) { put32(f, 0, 0x46554746); }
static void version_1(struct file *f) { put32(f, 4, 1); }
static void truncated(struct file *f) { f->size = f->size * 2 / 3; }
static void absurd_n_kv(struct file *f) { put64(f, 16, UINT64_C(1) << 60); }
static void absurd_string(struct file *f) { put64(f, find(f, "general.name") + 16, 1u << 20); }
static void nested_array(struct file *f) { put32(f, find(f, "num.list") + 12, BN_GGUF_ARRAY); }
static void unknown_tensor_type(struct file *f) { put32(f, type_at(f, "t.aaaa"), 99); }
static void five_dims(struct file *f) { put32(f, n_dims_at(f, "t.aaaa"), 5); }
static void misaligned(struct file *f) { put64(f, type_at(f, "t.aaaa") + 4, 161); }
static void overlap(struct file *f) { put64(f, type_at(f, "t.aaab") + 4, 64); }
static void duplicate_key(struct file *f) { f->data[find(f, "key.aaab") + 7] = 'a'; }
static void duplicate_tensor(struct file *f) { f->data[find(f, "t.aaab") + 5] = 'a'; }

/* ------------------------------------------------------------------------------------------ */
/* Model headers: what the loader reads from a parsed file                                     */
/* ------------------------------------------------------------------------------------------ */

/* A llama header as bitnet.cpp's Falcon3 files have it (scaled down): one layer's query in
 * I2_S with general.file_type 40, the head size from key_length, linear RoPE scaling, the
 * activation key; each variant changes one thing. */
struct header {
	const char *name;
	const char *arch;
	uint32_t file_type;      /* 0: no key */
	uint32_t key_length, value_length;
	const char *rope_type;   /* NULL: no key */
	const char *act;         /* NULL: no key */
	uint32_t spm_tokens;     /* a SentencePiece vocabulary of this many tokens; 0: none */
	uint32_t trailing;       /* bytes appended after the last tensor's padding */
};

static const struct header headers[] = {
	{ "loader-llama-i2s", "llama", 40, 256, 256, "linear", "silu", 0, 0 },
	{ "loader-llama-i2s-file-type-38", "llama", 38, 256, 256, "linear", "silu", 0, 0 },
	{ "loader-llama-i2s-no-file-type", "llama", 0, 256, 256, "linear", "silu", 0, 0 },
	{ "loader-llama-i2s-trailing-bytes", "llama", 40, 256, 256, "linear", "silu", 0, 64 },
	{ "loader-llama-key-value-differ", "llama", 40, 256, 128, "linear", "silu", 0, 0 },
	{ "loader-llama-value-only", "llama", 40, 0, 256, "linear", "silu", 0, 0 },
	{ "loader-llama-rope-yarn", "llama", 40, 256, 256, "yarn", "silu", 0, 0 },
	{ "loader-llama-gelu", "llama", 40, 256, 256, "linear", "gelu", 0, 0 },
	{ "loader-llama-act-unknown", "llama", 40, 256, 256, "linear", "swish", 0, 0 },
	{ "loader-bitnet-b158-spm-32002", "bitnet-b1.58", 40, 0, 0, NULL, NULL, 32002, 0 },
};

static void add_spm(struct bn_gguf_writer *w, uint32_t n)
{
	char (*text)[8] = malloc((size_t)n * sizeof(*text));
	const char **ptrs = malloc((size_t)n * sizeof(*ptrs));
	if (!text || !ptrs)
		die("out of memory");
	for (uint32_t i = 0; i < n; i++) {
		snprintf(text[i], sizeof(text[i]), "%x", i);
		ptrs[i] = text[i];
	}
	check(bn_gguf_add_str(w, "tokenizer.ggml.model", "llama"), "tok model");
	check(bn_gguf_add_arr_str(w, "tokenizer.ggml.tokens", ptrs, n), "tokens");
	free(ptrs);
	free(text);
}

static struct file model_header(const struct header *h)
{
	struct bn_gguf_writer *w = bn_gguf_writer_new(3, 32);
	char key[96];
#define KEY(suffix) (snprintf(key, sizeof(key), "%s.%s", h->arch, suffix), key)
	check(bn_gguf_add_str(w, "general.architecture", h->arch), "arch");
	check(bn_gguf_add_u32(w, KEY("embedding_length"), 256), "embd");
	check(bn_gguf_add_u32(w, KEY("block_count"), 1), "blocks");
	check(bn_gguf_add_u32(w, KEY("feed_forward_length"), 256), "ffn");
	check(bn_gguf_add_u32(w, KEY("attention.head_count"), 1), "heads");
	if (h->file_type)
		check(bn_gguf_add_u32(w, "general.file_type", h->file_type), "file_type");
	if (h->key_length)
		check(bn_gguf_add_u32(w, KEY("attention.key_length"), h->key_length), "k");
	if (h->value_length)
		check(bn_gguf_add_u32(w, KEY("attention.value_length"), h->value_length), "v");
	if (h->rope_type) {
		check(bn_gguf_add_str(w, KEY("rope.scaling.type"), h->rope_type), "rope type");
		check(bn_gguf_add_f32(w, KEY("rope.scaling.factor"), 2.0f), "rope factor");
	}
	if (h->act)
		check(bn_gguf_add_str(w, KEY("hidden_activation"), h->act), "act");
	if (h->spm_tokens)
		add_spm(w, h->spm_tokens);
#undef KEY
	add_tensor(w, "token_embd.weight", BN_TYPE_F16, 2, (const uint64_t[]){ 256, 4 });
	add_tensor(w, "blk.0.attn_q.weight", BN_TYPE_I2_S, 2, (const uint64_t[]){ 256, 256 });
	struct file f = finish(w);
	if (h->trailing) {
		uint8_t *more = realloc(f.data, f.size + h->trailing);
		if (!more)
			die("out of memory");
		memset(more + f.size, 0, h->trailing);
		f.data = more;
		f.size += h->trailing;
	}
	return f;
}

struct broken {
	const char *name;
	void (*corrupt)(struct file *f);
};

static const struct broken broken_files[] = {
	{ "bad-magic", bad_magic },
	{ "version-1", version_1 },
	{ "truncated", truncated },
	{ "absurd-n-kv", absurd_n_kv },
	{ "absurd-string-length", absurd_string },
	{ "nested-array", nested_array },
	{ "unknown-tensor-type", unknown_tensor_type },
	{ "five-dims", five_dims },
	{ "misaligned-offset", misaligned },
	{ "overlapping-tensors", overlap },
	{ "duplicate-key", duplicate_key },
	{ "duplicate-tensor", duplicate_tensor },
};

struct valid {
	const char *name;
	struct file (*make)(void);
};

static const struct valid valid_files[] = {
	{ "valid-v3-header-only", header_only },
	{ "valid-v3-every-metadata-type", every_metadata_type },
	{ "valid-v3-float-tensors", float_tensors_v3 },
	{ "valid-v3-ternary-tensors", ternary_tensors_v3 },
	{ "valid-v2-align64", mixed_v2_align64 },
	{ "valid-v3-model-like", model_like_v3 },
	{ "valid-v3-base", base },
	{ "tl-bitnet-cpp-tl2", tl2_marked },      /* refused, not valid: a seed all the same */
	{ "tl-type-39-unmarked", tl2_unmarked },
};

static void save(const char *dir, const char *name, const struct file *f)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s.gguf", dir, name);
	FILE *out = fopen(path, "wb");
	if (!out || fwrite(f->data, 1, f->size, out) != f->size || fclose(out) != 0)
		die(path);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	for (size_t i = 0; i < sizeof(valid_files) / sizeof(valid_files[0]); i++) {
		struct file f = valid_files[i].make();
		save(argv[1], valid_files[i].name, &f);
		free(f.data);
	}
	for (size_t i = 0; i < sizeof(broken_files) / sizeof(broken_files[0]); i++) {
		struct file f = base();
		broken_files[i].corrupt(&f);
		save(argv[1], broken_files[i].name, &f);
		free(f.data);
	}
	for (size_t i = 0; i < sizeof(headers) / sizeof(headers[0]); i++) {
		struct file f = model_header(&headers[i]);
		save(argv[1], headers[i].name, &f);
		free(f.data);
	}
	return 0;
}
