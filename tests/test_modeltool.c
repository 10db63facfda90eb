/* SPDX-License-Identifier: MIT */
/*
 * The model tool (tools/bitnet-model.c), run as a program ($BITNET_MODEL_TOOL) on the tiny
 * preset and read back with the daemon's GGUF reader: every weight and embedding type opens,
 * the metadata and the tensor list are the preset's, ternary rows decode with the promised
 * scale, files are deterministic in the seed, a float file holds the ternary file's weights
 * times the scale, and bad arguments are refused with exit 2.
 */
#define _GNU_SOURCE
#include "../daemon/model/gguf.h"
#include "quant.h"

#include "testutil.h"

#include "ckassert.h"
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The tiny preset (tools/bitnet-model.c), written down again here on purpose. */
#define N_EMBD 256u
#define N_LAYER 2u
#define N_HEAD 4u
#define N_HEAD_KV 2u
#define HEAD_DIM 64u
#define N_FF 768u
#define VOCAB 512u
#define N_CTX 1024u
#define TENSORS_PER_LAYER 11u
#define N_TENSORS (2u + N_LAYER * TENSORS_PER_LAYER)

static const char *tool;      /* $BITNET_MODEL_TOOL */
static char scratch[] = "/tmp/bn-modeltool-XXXXXX";

/* ------------------------------------------------------------------------------------------ */
/* Running the tool                                                                            */
/* ------------------------------------------------------------------------------------------ */

struct run {
	int status;         /* exit status; 128 + signal if killed */
	char out[1 << 16];  /* stdout, NUL-terminated (truncated) */
	char err[4096];     /* stderr, NUL-terminated (truncated) */
};

static void slurp_fd(int fd, char *buf, size_t cap)
{
	ssize_t n = pread(fd, buf, cap - 1, 0);
	buf[n > 0 ? n : 0] = 0;
	close(fd);
}

static int scratch_fd(const char *what)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/%s-XXXXXX", scratch, what);
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	unlink(path);
	return fd;
}

/* Runs the tool with argv[1..] (NULL-terminated), capturing its output. */
static void run_argv(struct run *r, const char *const *args)
{
	const char *argv[64] = { tool };
	int n = 1, out = scratch_fd("out"), err = scratch_fd("err"), status;
	while (args[n - 1] && n < 63) {
		argv[n] = args[n - 1];
		n++;
	}
	argv[n] = NULL;
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(out, 1);
		dup2(err, 2);
		execv(tool, (char *const *)argv);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	slurp_fd(out, r->out, sizeof(r->out));
	slurp_fd(err, r->err, sizeof(r->err));
}

/* Runs "write --preset tiny --out SCRATCH/name" plus the extra arguments (NULL-terminated),
 * checks that it succeeded, and leaves the file's path in path. */
static void make_model(char *path, size_t cap, const char *name, ...)
{
	const char *args[32] = { "write", "--preset", "tiny", "--out", path };
	int n = 5;
	va_list ap;
	snprintf(path, cap, "%s/%s", scratch, name);
	va_start(ap, name);
	for (const char *a; (a = va_arg(ap, const char *)) && n < 31;)
		args[n++] = a;
	va_end(ap);
	args[n] = NULL;
	struct run *r = malloc(sizeof(*r));
	run_argv(r, args);
	ck_assert_msg(r->status == 0, "%s: exit %d: %s", name, r->status, r->err);
	free(r);
}

static void open_model(struct bn_gguf *g, const char *path)
{
	char err[BN_GGUF_ERR_LEN];
	int rc = bn_gguf_open(g, path, err);
	ck_assert_msg(rc == 0, "%s", err);
}

static const struct bn_gguf_tensor *need_tensor(const struct bn_gguf *g, const char *name)
{
	const struct bn_gguf_tensor *t = bn_gguf_find_tensor(g, name);
	ck_assert_msg(t != NULL, "tensor %s missing", name);
	return t;
}

/* ------------------------------------------------------------------------------------------ */
/* The expected tensor list                                                                    */
/* ------------------------------------------------------------------------------------------ */

enum kind { K_EMBED, K_NORM, K_LINEAR };

struct expect {
	char name[64];
	enum kind kind;
	uint64_t ne0, ne1;  /* ne1 = 0: a vector */
};

static size_t expected_tensors(struct expect *e, int untied, int sub_norms)
{
	static const struct {
		const char *fmt;
		enum kind kind;
		uint32_t ne0, ne1;
	} per_layer[] = {
		{ "blk.%u.attn_norm.weight", K_NORM, N_EMBD, 0 },
		{ "blk.%u.attn_q.weight", K_LINEAR, N_EMBD, N_HEAD * HEAD_DIM },
		{ "blk.%u.attn_k.weight", K_LINEAR, N_EMBD, N_HEAD_KV * HEAD_DIM },
		{ "blk.%u.attn_v.weight", K_LINEAR, N_EMBD, N_HEAD_KV * HEAD_DIM },
		{ "blk.%u.attn_output.weight", K_LINEAR, N_HEAD * HEAD_DIM, N_EMBD },
		{ "blk.%u.ffn_norm.weight", K_NORM, N_EMBD, 0 },
		{ "blk.%u.ffn_gate.weight", K_LINEAR, N_EMBD, N_FF },
		{ "blk.%u.ffn_up.weight", K_LINEAR, N_EMBD, N_FF },
		{ "blk.%u.ffn_down.weight", K_LINEAR, N_FF, N_EMBD },
		{ "blk.%u.attn_sub_norm.weight", K_NORM, N_HEAD * HEAD_DIM, 0 },
		{ "blk.%u.ffn_sub_norm.weight", K_NORM, N_FF, 0 },
	};
	size_t n = 0;
	e[n++] = (struct expect){ "token_embd.weight", K_EMBED, N_EMBD, VOCAB };
	e[n++] = (struct expect){ "output_norm.weight", K_NORM, N_EMBD, 0 };
	if (untied)
		e[n++] = (struct expect){ "output.weight", K_EMBED, N_EMBD, VOCAB };
	for (uint32_t l = 0; l < N_LAYER; l++)
		for (size_t i = 0; i < (sub_norms ? 11u : 9u); i++) {
			snprintf(e[n].name, sizeof(e[n].name), per_layer[i].fmt, l);
			e[n].kind = per_layer[i].kind;
			e[n].ne0 = per_layer[i].ne0;
			e[n].ne1 = per_layer[i].ne1;
			n++;
		}
	return n;
}

/* The file holds exactly the expected tensors, with exact dims and the expected types. */
static void check_tensor_list(const struct bn_gguf *g, int untied, int sub_norms,
			      uint32_t linear_type, uint32_t embed_type)
{
	struct expect e[64];
	size_t n = expected_tensors(e, untied, sub_norms);
	ck_assert_uint_eq(g->n_tensors, n);
	for (size_t i = 0; i < n; i++) {
		const struct bn_gguf_tensor *t = need_tensor(g, e[i].name);
		uint32_t type = e[i].kind == K_EMBED ? embed_type
			      : e[i].kind == K_LINEAR ? linear_type : BN_TYPE_F32;
		ck_assert_msg(t->type == type, "%s: type %u, want %u", e[i].name, t->type, type);
		ck_assert_uint_eq(t->n_dims, e[i].ne1 ? 2 : 1);
		ck_assert_uint_eq(t->ne[0], e[i].ne0);
		if (e[i].ne1)
			ck_assert_uint_eq(t->ne[1], e[i].ne1);
	}
}

static int is_linear(const struct bn_gguf_tensor *t)
{
	static const char *const names[] = { "attn_q", "attn_k", "attn_v", "attn_output",
					     "ffn_gate", "ffn_up", "ffn_down" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char suffix[32];
		snprintf(suffix, sizeof(suffix), ".%s.weight", names[i]);
		size_t len = strlen(suffix);
		if (t->name.len > len && !memcmp(t->name.ptr + t->name.len - len, suffix, len))
			return 1;
	}
	return 0;
}

/* 1 / sqrt(n_in * 2/3), rounded to bfloat16 so that half and bfloat16 hold it exactly. */
static float expected_scale(uint64_t n_in)
{
	return bn_bf16_to_float(bn_float_to_bf16((float)(1.0 / sqrt((double)n_in * 2.0 / 3.0))));
}

/* ------------------------------------------------------------------------------------------ */
/* Types                                                                                       */
/* ------------------------------------------------------------------------------------------ */

static const struct {
	const char *name;
	uint32_t type;
} weight_types[] = {
	{ "i2_s", BN_TYPE_I2_S }, { "tq2_0", BN_TYPE_TQ2_0 }, { "tq1_0", BN_TYPE_TQ1_0 },
	{ "f16", BN_TYPE_F16 },   { "f32", BN_TYPE_F32 },     { "bf16", BN_TYPE_BF16 },
};

static const struct {
	const char *name;
	uint32_t type;
	float tolerance;    /* max |value - f32 value| for values in [-1, 1) */
} embed_types[] = {
	{ "f32", BN_TYPE_F32, 0.0f },      { "f16", BN_TYPE_F16, 1e-3f },
	{ "bf16", BN_TYPE_BF16, 4e-3f },   { "q8_0", BN_TYPE_Q8_0, 6e-3f },
	{ "q6_k", BN_TYPE_Q6_K, 0.04f },
};

START_TEST(each_weight_type_opens)
{
	for (size_t i = 0; i < sizeof(weight_types) / sizeof(weight_types[0]); i++) {
		char path[256], name[64];
		struct bn_gguf g;
		snprintf(name, sizeof(name), "type-%s.gguf", weight_types[i].name);
		make_model(path, sizeof(path), name, "--type", weight_types[i].name, NULL);
		open_model(&g, path);
		ck_assert_uint_eq(g.version, 3);
		check_tensor_list(&g, 0, 1, weight_types[i].type, BN_TYPE_F16);
		bn_gguf_close(&g);
		unlink(path);
	}
}
END_TEST

/* Every embedding type holds the same values as the f32 one, to the type's precision. */
START_TEST(each_embed_type_opens)
{
	char ref_path[256];
	struct bn_gguf ref;
	float want[N_EMBD], got[N_EMBD];
	make_model(ref_path, sizeof(ref_path), "embed-ref.gguf", "--embed-type", "f32", NULL);
	open_model(&ref, ref_path);
	const struct bn_gguf_tensor *rt = need_tensor(&ref, "token_embd.weight");
	for (size_t i = 0; i < sizeof(embed_types) / sizeof(embed_types[0]); i++) {
		char path[256], name[64];
		struct bn_gguf g;
		snprintf(name, sizeof(name), "embed-%s.gguf", embed_types[i].name);
		make_model(path, sizeof(path), name, "--embed-type", embed_types[i].name,
			   "--untied", NULL);
		open_model(&g, path);
		check_tensor_list(&g, 1, 1, BN_TYPE_I2_S, embed_types[i].type);
		const struct bn_gguf_tensor *t = need_tensor(&g, "token_embd.weight");
		for (uint64_t r = 0; r < VOCAB; r++) {
			ck_assert_int_eq(bn_dequant_row(BN_TYPE_F32, rt->data, rt->size, r, N_EMBD,
							want), 0);
			ck_assert_int_eq(bn_dequant_row(t->type, t->data, t->size, r, N_EMBD, got), 0);
			float worst = 0.0f;
			int in_range = 1;
			for (uint32_t k = 0; k < N_EMBD; k++) {
				in_range &= want[k] >= -1.0f && want[k] < 1.0f;
				worst = fmaxf(worst, fabsf(got[k] - want[k]));
			}
			ck_assert(in_range);
			ck_assert_msg(worst <= embed_types[i].tolerance, "%s row %llu: error %g",
				      embed_types[i].name, (unsigned long long)r, worst);
		}
		bn_gguf_close(&g);
		unlink(path);
	}
	bn_gguf_close(&ref);
	unlink(ref_path);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Metadata                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static uint32_t get_u32(const struct bn_gguf *g, const char *key)
{
	uint32_t v = 0;
	ck_assert_msg(bn_gguf_get_u32(g, key, &v) == 0, "%s missing", key);
	return v;
}

static void check_str(const struct bn_gguf *g, const char *key, const char *want)
{
	struct bn_gguf_str s;
	ck_assert_msg(bn_gguf_get_str(g, key, &s) == 0, "%s missing", key);
	ck_assert_msg(bn_gguf_str_eq(s, want), "%s: want %s", key, want);
}

static void check_hparams(const struct bn_gguf *g, const char *arch, uint32_t n_layer,
			  uint32_t vocab)
{
	char key[128];
	float f;
	const struct {
		const char *suffix;
		uint32_t value;
	} u32s[] = {
		{ "context_length", N_CTX },       { "embedding_length", N_EMBD },
		{ "block_count", n_layer },        { "feed_forward_length", N_FF },
		{ "attention.head_count", N_HEAD }, { "attention.head_count_kv", N_HEAD_KV },
		{ "rope.dimension_count", HEAD_DIM }, { "vocab_size", vocab },
	};
	check_str(g, "general.architecture", arch);
	check_str(g, "general.name", "bitnet-tiny");
	for (size_t i = 0; i < sizeof(u32s) / sizeof(u32s[0]); i++) {
		snprintf(key, sizeof(key), "%s.%s", arch, u32s[i].suffix);
		ck_assert_msg(get_u32(g, key) == u32s[i].value, "%s", key);
	}
	snprintf(key, sizeof(key), "%s.attention.layer_norm_rms_epsilon", arch);
	ck_assert_int_eq(bn_gguf_get_f32(g, key, &f), 0);
	ck_assert(f == 1e-5f);
	snprintf(key, sizeof(key), "%s.rope.freq_base", arch);
	ck_assert_int_eq(bn_gguf_get_f32(g, key, &f), 0);
	ck_assert(f == 10000.0f);
}

static int valid_utf8(struct bn_gguf_str s)
{
	const unsigned char *p = (const unsigned char *)s.ptr;
	for (uint64_t i = 0; i < s.len;) {
		int extra = p[i] < 0x80 ? 0 : (p[i] & 0xe0) == 0xc0 ? 1
			  : (p[i] & 0xf0) == 0xe0 ? 2 : (p[i] & 0xf8) == 0xf0 ? 3 : -1;
		if (extra < 0 || i + (uint64_t)extra >= s.len)
			return 0;
		for (int k = 1; k <= extra; k++)
			if ((p[i + k] & 0xc0) != 0x80)
				return 0;
		i += 1 + (uint64_t)extra;
	}
	return 1;
}

static int str_cmp(const void *a, const void *b)
{
	const struct bn_gguf_str *x = a, *y = b;
	int c = memcmp(x->ptr, y->ptr, x->len < y->len ? x->len : y->len);
	return c ? c : (x->len > y->len) - (x->len < y->len);
}

static void check_tokenizer(const struct bn_gguf *g, uint32_t vocab)
{
	const struct bn_gguf_kv *tok = bn_gguf_find_kv(g, "tokenizer.ggml.tokens");
	const struct bn_gguf_kv *sc = bn_gguf_find_kv(g, "tokenizer.ggml.scores");
	const struct bn_gguf_kv *ty = bn_gguf_find_kv(g, "tokenizer.ggml.token_type");
	struct bn_gguf_str *all = calloc(vocab, sizeof(*all));
	ck_assert(tok && sc && ty && all);
	ck_assert_uint_eq(tok->v.arr.n, vocab);
	ck_assert_uint_eq(sc->v.arr.n, vocab);
	ck_assert_uint_eq(ty->v.arr.n, vocab);
	check_str(g, "tokenizer.ggml.model", "llama");
	ck_assert_uint_eq(get_u32(g, "tokenizer.ggml.bos_token_id"), 1);
	ck_assert_uint_eq(get_u32(g, "tokenizer.ggml.eos_token_id"), 2);
	for (uint32_t i = 0; i < vocab; i++) {
		double type;
		ck_assert_int_eq(bn_gguf_arr_str(tok, i, &all[i]), 0);
		ck_assert_int_eq(bn_gguf_arr_num(ty, i, &type), 0);
		ck_assert_msg(all[i].len > 0 && valid_utf8(all[i]), "token %u", i);
		ck_assert_int_eq((int)type, i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1);
	}
	ck_assert(bn_gguf_str_eq(all[0], "<unk>") && bn_gguf_str_eq(all[1], "<s>"));
	ck_assert(bn_gguf_str_eq(all[2], "</s>") && bn_gguf_str_eq(all[3 + 0x41], "<0x41>"));
	ck_assert(bn_gguf_str_eq(all[258], "<0xFF>"));
	qsort(all, vocab, sizeof(*all), str_cmp);
	for (uint32_t i = 1; i < vocab; i++)
		ck_assert_msg(str_cmp(&all[i - 1], &all[i]) != 0, "duplicate token");
	free(all);
}

START_TEST(metadata_is_the_preset)
{
	char path[256];
	struct bn_gguf g;
	make_model(path, sizeof(path), "meta.gguf", NULL);
	open_model(&g, path);
	check_hparams(&g, "bitnet-b1.58", N_LAYER, VOCAB);
	check_tokenizer(&g, VOCAB);
	/* the activation is always written (the preset's relu2), and the converters' marks */
	check_str(&g, "bitnet-b1.58.hidden_activation", "relu2");
	ck_assert_uint_eq(get_u32(&g, "general.file_type"), 40);
	ck_assert_uint_eq(get_u32(&g, "general.quantization_version"), 2);
	bn_gguf_close(&g);
	make_model(path, sizeof(path), "meta.gguf", "--no-activation-key", "--type", "f16", NULL);
	open_model(&g, path);
	ck_assert_ptr_null(bn_gguf_find_kv(&g, "bitnet-b1.58.hidden_activation"));
	ck_assert_uint_eq(get_u32(&g, "general.file_type"), 1);
	ck_assert_ptr_null(bn_gguf_find_kv(&g, "general.quantization_version"));
	bn_gguf_close(&g);
	unlink(path);
}
END_TEST

START_TEST(vocab_and_layers_override)
{
	char path[256];
	struct bn_gguf g;
	make_model(path, sizeof(path), "small.gguf", "--vocab", "260", "--layers", "3", NULL);
	open_model(&g, path);
	check_hparams(&g, "bitnet-b1.58", 3, 260);
	check_tokenizer(&g, 260);
	ck_assert_uint_eq(g.n_tensors, 2 + 3 * TENSORS_PER_LAYER);
	ck_assert_uint_eq(need_tensor(&g, "token_embd.weight")->ne[1], 260);
	need_tensor(&g, "blk.2.ffn_sub_norm.weight");
	bn_gguf_close(&g);
	unlink(path);
}
END_TEST

START_TEST(architectures)
{
	char path[256];
	struct bn_gguf g;
	struct bn_gguf_str s;
	make_model(path, sizeof(path), "llama.gguf", "--arch", "llama", "--type", "f32", NULL);
	open_model(&g, path);
	check_hparams(&g, "llama", N_LAYER, VOCAB);
	check_tensor_list(&g, 0, 0, BN_TYPE_F32, BN_TYPE_F16);
	bn_gguf_close(&g);
	/* bitnet names its activation; the preset's (relu2) unless told otherwise. */
	make_model(path, sizeof(path), "bitnet.gguf", "--arch", "bitnet", NULL);
	open_model(&g, path);
	check_hparams(&g, "bitnet", N_LAYER, VOCAB);
	check_tensor_list(&g, 0, 1, BN_TYPE_I2_S, BN_TYPE_F16);
	ck_assert_int_eq(bn_gguf_get_str(&g, "bitnet.hidden_activation", &s), 0);
	ck_assert(bn_gguf_str_eq(s, "relu2"));
	bn_gguf_close(&g);
	make_model(path, sizeof(path), "bitnet.gguf", "--arch", "bitnet", "--activation", "silu",
		   NULL);
	open_model(&g, path);
	ck_assert_int_eq(bn_gguf_get_str(&g, "bitnet.hidden_activation", &s), 0);
	ck_assert(bn_gguf_str_eq(s, "silu"));
	bn_gguf_close(&g);
	make_model(path, sizeof(path), "b25.gguf", "--arch", "bitnet-25", NULL);
	open_model(&g, path);
	check_hparams(&g, "bitnet-25", N_LAYER, VOCAB);
	bn_gguf_close(&g);
	unlink(path);
	snprintf(path, sizeof(path), "%s/llama.gguf", scratch);
	unlink(path);
	snprintf(path, sizeof(path), "%s/bitnet.gguf", scratch);
	unlink(path);
}
END_TEST

START_TEST(gguf_version_2)
{
	char path[256];
	struct bn_gguf g;
	make_model(path, sizeof(path), "v2.gguf", "--gguf-version", "2", NULL);
	open_model(&g, path);
	ck_assert_uint_eq(g.version, 2);
	check_tensor_list(&g, 0, 1, BN_TYPE_I2_S, BN_TYPE_F16);
	bn_gguf_close(&g);
	unlink(path);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Weights                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* All codes of a ternary tensor, row by row; checks each row's scale on the way. */
static uint8_t *ternary_codes(const struct bn_gguf_tensor *t, uint64_t counts[3])
{
	uint64_t n_in = t->ne[0], n_out = t->ne[1];
	uint8_t *codes = malloc(n_in * n_out);
	float want = expected_scale(n_in), scale; /* the same in every type: exact in half */
	ck_assert_ptr_nonnull(codes);
	for (uint64_t r = 0; r < n_out; r++) {
		uint8_t *row = codes + r * n_in;
		ck_assert_int_eq(bn_ternary_row(t->type, t->data, t->size, r, n_in, row, &scale), 0);
		ck_assert_msg(scale == want, "%.*s row %llu: scale %g, want %g", (int)t->name.len,
			      t->name.ptr, (unsigned long long)r, scale, want);
		uint64_t bad = 0;
		for (uint64_t k = 0; k < n_in; k++) { /* no asserts per weight: each one costs */
			bad += row[k] > 2;
			counts[row[k] > 2 ? 0 : row[k]]++;
		}
		ck_assert_uint_eq(bad, 0);
	}
	return codes;
}

/* Decoding with the right scale, the same codes in every ternary type, uniform codes. */
START_TEST(ternary_rows_decode)
{
	static const char *const types[] = { "i2_s", "tq2_0", "tq1_0" };
	struct bn_gguf g[3];
	uint64_t counts[3] = { 0 };
	for (int i = 0; i < 3; i++) {
		char path[256], name[64];
		snprintf(name, sizeof(name), "codes-%s.gguf", types[i]);
		make_model(path, sizeof(path), name, "--type", types[i], NULL);
		open_model(&g[i], path);
		unlink(path); /* the mapping stays */
	}
	for (uint64_t j = 0; j < g[0].n_tensors; j++) {
		const struct bn_gguf_tensor *t0 = &g[0].tensors[j];
		if (!is_linear(t0))
			continue;
		uint8_t *c0 = ternary_codes(t0, counts);
		for (int i = 1; i < 3; i++) {
			uint64_t ignored[3] = { 0 };
			const struct bn_gguf_tensor *ti = &g[i].tensors[j];
			ck_assert(t0->name.len == ti->name.len &&
				  !memcmp(t0->name.ptr, ti->name.ptr, t0->name.len));
			uint8_t *ci = ternary_codes(ti, ignored);
			ck_assert(!memcmp(c0, ci, t0->n_elements));
			free(ci);
		}
		free(c0);
	}
	uint64_t total = counts[0] + counts[1] + counts[2];
	for (int c = 0; c < 3; c++)
		ck_assert_msg(fabs((double)counts[c] / (double)total - 1.0 / 3.0) < 0.01,
			      "code %d: %llu of %llu", c, (unsigned long long)counts[c],
			      (unsigned long long)total);
	for (int i = 0; i < 3; i++)
		bn_gguf_close(&g[i]);
}
END_TEST

/* A float file holds the ternary file's weights times the scale (the same seed), exactly in
 * every float type: the files of one seed are twins. */
START_TEST(float_weights_are_ternary_times_scale)
{
	static const char *const types[] = { "f32", "f16", "bf16" };
	char path[256];
	struct bn_gguf tern;
	make_model(path, sizeof(path), "ref-i2s.gguf", "--type", "i2_s", NULL);
	open_model(&tern, path);
	unlink(path);
	for (int i = 0; i < 3; i++) {
		char name[64];
		struct bn_gguf g;
		snprintf(name, sizeof(name), "float-%s.gguf", types[i]);
		make_model(path, sizeof(path), name, "--type", types[i], NULL);
		open_model(&g, path);
		unlink(path);
		for (uint64_t j = 0; j < tern.n_tensors; j++) {
			const struct bn_gguf_tensor *t = &tern.tensors[j], *f = &g.tensors[j];
			if (!is_linear(t))
				continue;
			uint64_t n_in = t->ne[0];
			uint8_t *codes = malloc(n_in);
			float *row = malloc(n_in * sizeof(*row)), scale;
			for (uint64_t r = 0; r < t->ne[1]; r++) {
				ck_assert_int_eq(bn_ternary_row(t->type, t->data, t->size, r, n_in,
								codes, &scale), 0);
				ck_assert_int_eq(bn_dequant_row(f->type, f->data, f->size, r, n_in,
								row), 0);
				uint64_t bad = 0;
				for (uint64_t k = 0; k < n_in; k++)
					bad += row[k] != ((int)codes[k] - 1) * scale;
				ck_assert_msg(bad == 0, "%s %.*s row %llu: %llu weights differ",
					      types[i], (int)t->name.len, t->name.ptr,
					      (unsigned long long)r, (unsigned long long)bad);
			}
			free(codes);
			free(row);
		}
		bn_gguf_close(&g);
	}
	bn_gguf_close(&tern);
}
END_TEST

static uint8_t *read_file(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	struct stat st;
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fstat(fileno(f), &st), 0);
	uint8_t *buf = malloc((size_t)st.st_size + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)st.st_size, f), (size_t)st.st_size);
	fclose(f);
	*size = (size_t)st.st_size;
	return buf;
}

static int tensor_differs(const struct bn_gguf *a, const struct bn_gguf *b, const char *name)
{
	const struct bn_gguf_tensor *x = need_tensor(a, name), *y = need_tensor(b, name);
	ck_assert_uint_eq(x->size, y->size);
	return memcmp(x->data, y->data, x->size) != 0;
}

START_TEST(seed_determines_the_file)
{
	char p1[256], p2[256], p3[256];
	size_t n1, n2;
	struct bn_gguf a, b;
	make_model(p1, sizeof(p1), "seed-a.gguf", "--type", "tq2_0", NULL);
	make_model(p2, sizeof(p2), "seed-b.gguf", "--type", "tq2_0", "--seed", "1", NULL);
	make_model(p3, sizeof(p3), "seed-c.gguf", "--type", "tq2_0", "--seed", "2", NULL);
	uint8_t *f1 = read_file(p1, &n1), *f2 = read_file(p2, &n2);
	ck_assert_uint_eq(n1, n2);
	ck_assert(!memcmp(f1, f2, n1));
	free(f1);
	free(f2);
	open_model(&a, p1);
	open_model(&b, p3);
	ck_assert_uint_eq(a.n_tensors, b.n_tensors);
	ck_assert(tensor_differs(&a, &b, "token_embd.weight"));
	ck_assert(tensor_differs(&a, &b, "blk.0.attn_q.weight"));
	ck_assert(tensor_differs(&a, &b, "blk.1.ffn_down.weight"));
	ck_assert(tensor_differs(&a, &b, "output_norm.weight"));
	/* Within a file, different tensors of one shape differ too. */
	ck_assert(memcmp(need_tensor(&a, "blk.0.attn_k.weight")->data,
			 need_tensor(&a, "blk.0.attn_v.weight")->data,
			 need_tensor(&a, "blk.0.attn_k.weight")->size) != 0);
	bn_gguf_close(&a);
	bn_gguf_close(&b);
	unlink(p1);
	unlink(p2);
	unlink(p3);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The command line                                                                            */
/* ------------------------------------------------------------------------------------------ */

START_TEST(info_prints_the_model)
{
	char path[256];
	struct run *r = malloc(sizeof(*r));
	make_model(path, sizeof(path), "info.gguf", NULL);
	run_argv(r, (const char *const[]){ "info", path, NULL });
	ck_assert_msg(r->status == 0, "%s", r->err);
	ck_assert_ptr_nonnull(strstr(r->out, "\narchitecture=bitnet-b1.58\n"));
	ck_assert_ptr_nonnull(strstr(r->out, "\nbitnet-b1.58.block_count=2\n"));
	ck_assert_ptr_nonnull(strstr(r->out, "\nbitnet-b1.58.rope.freq_base=10000\n"));
	ck_assert_ptr_nonnull(strstr(r->out, "\ntensor=blk.0.attn_q.weight I2_S 256x256 16416\n"));
	ck_assert_ptr_nonnull(strstr(r->out, "\ntensor=output_norm.weight F32 256 1024\n"));
	unsigned lines = 0;
	for (const char *p = r->out; (p = strstr(p, "\ntensor=")); p++)
		lines++;
	ck_assert_uint_eq(lines, N_TENSORS);
	run_argv(r, (const char *const[]){ "--help", NULL });
	ck_assert_int_eq(r->status, 0);
	ck_assert_ptr_nonnull(strstr(r->out, "Usage"));
	free(r);
	unlink(path);
}
END_TEST

/* The published models' shapes and keys, written down again here from their config.json and
 * their converter (tools/model_presets.c says where each number comes from). */
START_TEST(presets_as_published)
{
	static const char *const want[] = {
		"preset=falcon3-1b general.name=Falcon3-1B-Instruct-1.58bit arch=llama "
		"embedding_length=2048 block_count=18 head_count=8 head_count_kv=4 head_dim=256 "
		"feed_forward_length=8192 vocab_size=131072 context_length=8192 "
		"rope.freq_base=1000042 rms_epsilon=9.99999997e-07 activation=silu type=I2_S "
		"embed_type=F16 untied=1 file_type=40 pre=falcon3\n",
		"preset=falcon3-3b general.name=Falcon3-3B-Instruct-1.58bit arch=llama "
		"embedding_length=3072 block_count=22 head_count=12 head_count_kv=4 head_dim=256 "
		"feed_forward_length=9216 vocab_size=131072 context_length=4096 ",
		"preset=falcon3-7b general.name=Falcon3-7B-Instruct-1.58bit arch=llama "
		"embedding_length=3072 block_count=28 head_count=12 head_count_kv=4 head_dim=256 "
		"feed_forward_length=23040 vocab_size=131072 context_length=8192 ",
		"preset=falcon3-10b general.name=Falcon3-10B-Instruct-1.58bit arch=llama "
		"embedding_length=3072 block_count=40 head_count=12 head_count_kv=4 head_dim=256 "
		"feed_forward_length=23040 vocab_size=131072 context_length=32768 ",
		"preset=llama3-8b-1.58 general.name=Llama3-8B-1.58-100B-tokens arch=llama "
		"embedding_length=4096 block_count=32 head_count=32 head_count_kv=8 head_dim=128 "
		"feed_forward_length=14336 vocab_size=128256 context_length=8192 "
		"rope.freq_base=500000 rms_epsilon=9.99999975e-06 activation=silu type=I2_S "
		"embed_type=F16 untied=1 file_type=40 pre=llama-bpe\n",
		"preset=bitnet-large general.name=bitnet_b1_58-large arch=bitnet-b1.58 "
		"embedding_length=1536 block_count=24 head_count=16 head_count_kv=16 head_dim=96 "
		"feed_forward_length=4096 vocab_size=32002 context_length=2048 rope.freq_base=10000 "
		"rms_epsilon=9.99999975e-06 activation=silu type=I2_S embed_type=F16 untied=0 "
		"file_type=40 pre=none\n",
		"preset=bitnet-3b general.name=bitnet_b1_58-3B arch=bitnet-b1.58 "
		"embedding_length=3200 block_count=26 head_count=32 head_count_kv=32 head_dim=100 "
		"feed_forward_length=8640 vocab_size=32002 context_length=2048 rope.freq_base=10000 "
		"rms_epsilon=9.99999975e-06 activation=silu type=F16 embed_type=F16 untied=0 "
		"file_type=1 pre=none\n",
		"preset=2b4t general.name=bitnet-2b4t arch=bitnet-b1.58 embedding_length=2560 "
		"block_count=30 head_count=20 head_count_kv=5 head_dim=128 feed_forward_length=6912 "
		"vocab_size=128256 context_length=4096 rope.freq_base=500000 ",
	};
	struct run *r = malloc(sizeof(*r));
	run_argv(r, (const char *const[]){ "presets", NULL });
	ck_assert_msg(r->status == 0, "%s", r->err);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		ck_assert_msg(strstr(r->out, want[i]) != NULL, "no line with \"%s\" in:\n%s",
			      want[i], r->out);
	free(r);
}
END_TEST

/* Every merge joins two tokens of the vocabulary into a third: what a BPE tokenizer needs. */
static void check_merges(const struct bn_gguf *g)
{
	const struct bn_gguf_kv *tok = bn_gguf_find_kv(g, "tokenizer.ggml.tokens");
	const struct bn_gguf_kv *mer = bn_gguf_find_kv(g, "tokenizer.ggml.merges");
	ck_assert(tok && mer && mer->v.arr.n > 0);
	uint64_t n = tok->v.arr.n;
	struct bn_gguf_str *all = calloc(n, sizeof(*all));
	ck_assert_ptr_nonnull(all);
	for (uint64_t i = 0; i < n; i++)
		ck_assert_int_eq(bn_gguf_arr_str(tok, i, &all[i]), 0);
	qsort(all, n, sizeof(*all), str_cmp);
	for (uint64_t i = 1; i < n; i++)
		ck_assert_msg(str_cmp(&all[i - 1], &all[i]) != 0, "duplicate token");
	for (uint64_t m = 0; m < mer->v.arr.n; m++) {
		struct bn_gguf_str s, parts[3];
		char joined[64];
		ck_assert_int_eq(bn_gguf_arr_str(mer, m, &s), 0);
		const char *sp = memchr(s.ptr, ' ', s.len);
		ck_assert_msg(sp && s.len < sizeof(joined), "merge %llu", (unsigned long long)m);
		parts[0] = (struct bn_gguf_str){ s.ptr, (uint64_t)(sp - s.ptr) };
		parts[1] = (struct bn_gguf_str){ sp + 1, s.len - parts[0].len - 1 };
		memcpy(joined, parts[0].ptr, parts[0].len);
		memcpy(joined + parts[0].len, parts[1].ptr, parts[1].len);
		parts[2] = (struct bn_gguf_str){ joined, s.len - 1 };
		for (int k = 0; k < 3; k++)
			ck_assert_msg(bsearch(&parts[k], all, n, sizeof(*all), str_cmp),
				      "merge %llu: part %d not a token", (unsigned long long)m, k);
	}
	free(all);
}

/* The token text of id `key`'s value. */
static void check_special(const struct bn_gguf *g, const char *key, const char *text)
{
	const struct bn_gguf_kv *tok = bn_gguf_find_kv(g, "tokenizer.ggml.tokens");
	const struct bn_gguf_kv *ty = bn_gguf_find_kv(g, "tokenizer.ggml.token_type");
	struct bn_gguf_str s;
	double type;
	uint32_t id = get_u32(g, key);
	ck_assert_int_eq(bn_gguf_arr_str(tok, id, &s), 0);
	ck_assert_msg(bn_gguf_str_eq(s, text), "%s is %u, '%.*s', want '%s'", key, id, (int)s.len,
		      s.ptr, text);
	ck_assert_int_eq(bn_gguf_arr_num(ty, id, &type), 0);
	ck_assert_int_eq((int)type, 3);
}

/* The families' test presets write the keys their published files carry: llama, I2_S linears
 * with general.file_type 40, F16 token_embd and output.weight, the family's pre-tokenizer and
 * specials, and a byte-level BPE vocabulary whose merges hold together. */
START_TEST(family_presets_write_their_keys)
{
	static const struct {
		const char *preset, *pre, *bos, *eos;
		uint32_t head_dim, heads, kv_heads;
	} fam[] = {
		{ "falcon3-test", "falcon3", "<|endoftext|>", "<|endoftext|>", 256, 2, 1 },
		{ "falcon-e-test", "falcon_e", "<|begin_of_text|>", "<|end_of_text|>", 128, 4, 2 },
		{ "llama3-test", "llama-bpe", "<|begin_of_text|>", "<|eot_id|>", 128, 4, 1 },
	};
	for (size_t i = 0; i < sizeof(fam) / sizeof(fam[0]); i++) {
		char path[256];
		struct bn_gguf g;
		make_model(path, sizeof(path), "family.gguf", "--preset", fam[i].preset, NULL);
		open_model(&g, path);
		check_str(&g, "general.architecture", "llama");
		ck_assert_uint_eq(get_u32(&g, "general.file_type"), 40);
		check_str(&g, "llama.hidden_activation", "silu");
		ck_assert_uint_eq(get_u32(&g, "llama.rope.dimension_count"), fam[i].head_dim);
		ck_assert_uint_eq(get_u32(&g, "llama.attention.head_count"), fam[i].heads);
		ck_assert_uint_eq(get_u32(&g, "llama.attention.head_count_kv"), fam[i].kv_heads);
		ck_assert_uint_eq(get_u32(&g, "llama.embedding_length"), 512);
		check_str(&g, "tokenizer.ggml.model", "gpt2");
		check_str(&g, "tokenizer.ggml.pre", fam[i].pre);
		check_special(&g, "tokenizer.ggml.bos_token_id", fam[i].bos);
		check_special(&g, "tokenizer.ggml.eos_token_id", fam[i].eos);
		check_merges(&g);
		ck_assert_uint_eq(need_tensor(&g, "token_embd.weight")->type, BN_TYPE_F16);
		ck_assert_uint_eq(need_tensor(&g, "output.weight")->type, BN_TYPE_F16);
		ck_assert_uint_eq(need_tensor(&g, "blk.1.attn_q.weight")->ne[1],
				  fam[i].heads * fam[i].head_dim);
		ck_assert_uint_eq(need_tensor(&g, "blk.1.attn_k.weight")->ne[1],
				  fam[i].kv_heads * fam[i].head_dim);
		ck_assert_uint_eq(need_tensor(&g, "blk.1.ffn_down.weight")->type, BN_TYPE_I2_S);
		ck_assert_ptr_null(bn_gguf_find_tensor(&g, "blk.0.attn_sub_norm.weight"));
		bn_gguf_close(&g);
		unlink(path);
	}
}
END_TEST

/* BitNet-embedding's seven per-projection input norms per layer are the preset's, and
 * --no-input-norms leaves exactly them out (the q/k norms stay): the plain qwen3 graph. */
START_TEST(input_norms_optional)
{
	static const char *const in_norms[] = { "attn_q", "attn_k", "attn_v", "attn_output",
						"ffn_gate", "ffn_up", "ffn_down" };
	char path[256], name[64];
	struct bn_gguf with, without;
	make_model(path, sizeof(path), "norms.gguf", "--preset", "bitnet-embedding-0.6b-test", NULL);
	open_model(&with, path);
	make_model(path, sizeof(path), "plain.gguf", "--preset", "bitnet-embedding-0.6b-test",
		   "--no-input-norms", NULL);
	open_model(&without, path);
	ck_assert_uint_eq(with.n_tensors, without.n_tensors + 7 * 2);
	for (int layer = 0; layer < 2; layer++)
		for (size_t k = 0; k < sizeof(in_norms) / sizeof(in_norms[0]); k++) {
			snprintf(name, sizeof(name), "blk.%d.%s_norm_in.weight", layer, in_norms[k]);
			need_tensor(&with, name);
			ck_assert_ptr_null(bn_gguf_find_tensor(&without, name));
		}
	need_tensor(&without, "blk.1.attn_q_norm.weight");
	need_tensor(&without, "blk.1.attn_k_norm.weight");
	ck_assert_uint_eq(get_u32(&without, "qwen3.pooling_type"), 3);
	bn_gguf_close(&with);
	bn_gguf_close(&without);
	unlink(path);
}
END_TEST

/* Bad usage: exit 2 and one line on stderr; I/O problems: exit 1. */
START_TEST(bad_arguments)
{
	char out[256], bad_dir[256], junk[256];
	snprintf(out, sizeof(out), "%s/never.gguf", scratch);
	snprintf(bad_dir, sizeof(bad_dir), "%s/no/such/dir/x.gguf", scratch);
	snprintf(junk, sizeof(junk), "%s/junk.gguf", scratch);
	const struct {
		int status;
		const char *args[12];
	} cases[] = {
		{ 2, { NULL } },
		{ 2, { "frobnicate", NULL } },
		{ 2, { "write", "--out", out, NULL } },
		{ 2, { "write", "--preset", "tiny", NULL } },
		{ 2, { "write", "--preset", "huge", "--out", out, NULL } },
		{ 2, { "write", "--preset", "tiny", "--out", out, "--type", "q4_0", NULL } },
		{ 2, { "write", "--preset", "tiny", "--out", out, "--embed-type", "i2_s", NULL } },
		{ 2, { "write", "--preset", "tiny", "--out", out, "--arch", "gpt2", NULL } },
		{ 2, { "write", "--preset", "tiny", "--out", out, "--vocab", "259", NULL } },
		{ 2, { "write", "--preset", "tiny", "--out", out, "--vocab", "12x", NULL } },
		{ 2, { "write", "--preset", "tiny", "--out", out, "--layers", "0", NULL } },
		{ 2, { "write", "--preset", "tiny", "--out", out, "--seed", "-1", NULL } },
		{ 2, { "write", "--preset", "tiny", "--out", out, "--gguf-version", "1", NULL } },
		{ 2, { "write", "--preset", "tiny", "--out", out, "--activation", "tanh", NULL } },
		{ 2, { "write", "--preset", "tiny", "--out", out, "--group", "64", NULL } },
		{ 2, { "write", "--preset", "tiny", "--out", out, "--add-eos", "yes", NULL } },
		{ 2, { "write", "--preset", "tiny", "--out", out, "--activation", "silu",
		       "--no-activation-key", NULL } },
		{ 2, { "write", "--preset", "falcon3-test", "--out", out, "--vocab", "260", NULL } },
		{ 2, { "write", "--preset", "tiny", "--out", out, "--no-input-norms", NULL } },
		{ 2, { "write", "--preset", "bitnet-3b-test", "--out", out, "--type", "i2_s", NULL } },
		{ 2, { "presets", "extra", NULL } },
		{ 2, { "write", "--preset", "tiny", "--out", out, "--frobnicate", NULL } },
		{ 2, { "write", "--preset", "tiny", "--out", out, "extra", NULL } },
		{ 2, { "write", "--preset", "tiny", "--out", NULL } },
		{ 2, { "info", NULL } },
		{ 1, { "write", "--preset", "tiny", "--out", bad_dir, NULL } },
		{ 1, { "info", bad_dir, NULL } },
		{ 1, { "info", junk, NULL } },
	};
	FILE *f = fopen(junk, "w");
	ck_assert_ptr_nonnull(f);
	fputs("GGUF but not really", f);
	fclose(f);
	struct run *r = malloc(sizeof(*r));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		run_argv(r, cases[i].args);
		ck_assert_msg(r->status == cases[i].status, "case %zu: exit %d, want %d (%s)", i,
			      r->status, cases[i].status, r->err);
		char *nl = strchr(r->err, '\n');
		ck_assert_msg(!strncmp(r->err, "bitnet-model: ", 14) && nl && !nl[1],
			      "case %zu: stderr '%s'", i, r->err);
	}
	ck_assert_int_ne(access(out, F_OK), 0);
	free(r);
	unlink(junk);
}
END_TEST

static void remove_scratch(void)
{
	DIR *d = opendir(scratch);
	struct dirent *e;
	char path[512];
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", scratch, e->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	rmdir(scratch);
}

int main(void)
{
	tool = getenv("BITNET_MODEL_TOOL");
	if (!tool || !*tool) {
		fprintf(stderr, "test_modeltool: BITNET_MODEL_TOOL is not set (make check sets it "
				"to build/bitnet-model)\n");
		return EXIT_FAILURE;
	}
	if (!mkdtemp(scratch)) {
		perror("test_modeltool: mkdtemp");
		return EXIT_FAILURE;
	}
	Suite *s = suite_create("modeltool");
	TCase *tc = tcase_create("tiny");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, each_weight_type_opens);
	tcase_add_test(tc, each_embed_type_opens);
	tcase_add_test(tc, metadata_is_the_preset);
	tcase_add_test(tc, vocab_and_layers_override);
	tcase_add_test(tc, architectures);
	tcase_add_test(tc, gguf_version_2);
	tcase_add_test(tc, ternary_rows_decode);
	tcase_add_test(tc, float_weights_are_ternary_times_scale);
	tcase_add_test(tc, seed_determines_the_file);
	tcase_add_test(tc, info_prints_the_model);
	tcase_add_test(tc, bad_arguments);
	tcase_add_test(tc, presets_as_published);
	tcase_add_test(tc, family_presets_write_their_keys);
	tcase_add_test(tc, input_norms_optional);
	suite_add_tcase(s, tc);
	int rc = tu_run_suite(s);
	remove_scratch();
	return rc;
}
