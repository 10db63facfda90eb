/* SPDX-License-Identifier: MIT */
/*
 * model.h — a LLaMA-family model loaded from GGUF: the configuration (from metadata, with the
 * documented defaults), and the weights, ternary ones repacked into the kernels' T2 layout,
 * float ones into their panel layout (or, for the CUDA backend, used in place from the
 * read-only mapping: bn_model_load_as), Q8_0 / Q6_K heads used in place.
 *
 * Architectures (general.architecture), after DESIGN.md:
 *   bitnet-b1.58, bitnet-25   sub-norms, NeoX RoPE
 *   bitnet                    sub-norms, NeoX RoPE
 *   llama                     no sub-norms, RoPE on adjacent pairs; type 36 is bitnet.cpp's
 *                             I2_S when general.file_type is 40 (bn_model_check_i2_s)
 * The FFN activation is A.hidden_activation (silu or relu2) where the file has it, in every
 * architecture; where not: silu for llama and bitnet, relu2 for bitnet-25, and for
 * bitnet-b1.58 silu with a SentencePiece vocabulary of 32000-32002 tokens (1bitLLM's models,
 * as bitnet.cpp's converter labels them), else relu2 (2B4T); --activation overrides, and
 * cfg.act_why says which rule decided.
 * In the bitnet* architectures, whose linears are BitLinear, a float layer matrix whose rows
 * are exactly {-s, 0, +s} (bn_ternary_from_float_row) is packed to T2 like a ternary file's:
 * the same outputs as its I2_S or TQ twin; any other float matrix stays float.
 * Defaults when a key is absent (A = the architecture string): A.attention.head_count_kv =
 * head_count; A.attention.key_length (= value_length) = embedding_length / head_count;
 * A.attention.layer_norm_rms_epsilon = 1e-5; A.rope.freq_base = 10000;
 * A.rope.dimension_count = head dim; A.rope.scaling.factor (or rope.scale_linear) = 1, type
 * linear or none; A.context_length = 2048; A.vocab_size = rows of token_embd;
 * tokenizer.ggml.bos_token_id = 1, eos_token_id = 2. A rope_freqs.weight tensor divides each
 * pair's angle, as llama.cpp's. The other hyper-parameters (embedding_length, block_count,
 * feed_forward_length, attention.head_count) are required.
 */
#ifndef BITNETD_MODEL_H
#define BITNETD_MODEL_H

#include "gguf.h"
#include "kernels.h"

#include <stdint.h>

#define BN_MODEL_ERR_LEN 640

enum bn_arch { BN_ARCH_LLAMA, BN_ARCH_BITNET, BN_ARCH_BITNET_B158, BN_ARCH_BITNET_25 };
enum bn_activation { BN_ACT_SILU, BN_ACT_RELU2 };

struct bn_model_config {
	enum bn_arch arch;
	char arch_name[32];
	char name[64];            /* general.name, else the file's base name */
	uint32_t n_embd;
	uint32_t n_layer;
	uint32_t n_head;
	uint32_t n_head_kv;
	uint32_t head_dim;        /* attention.key_length, else n_embd / n_head */
	uint32_t n_ff;
	uint32_t n_vocab;
	uint32_t n_ctx;
	uint32_t rope_dim;        /* leading dimensions of each head that RoPE rotates */
	float rope_base;
	float rms_eps;
	float rope_freq_scale;    /* every pair's angle times this: 1 / rope.scaling.factor */
	const float *rope_factors; /* [rope_dim / 2] each pair's angle divided by it (the file's
				    * rope_freqs.weight), or NULL */
	int rope_neox;            /* pairs (i, i + rope_dim/2) instead of (2i, 2i + 1) */
	enum bn_activation act;
	char act_why[256];        /* the key, the rule or the override that chose act */
	int sub_norms;
	uint32_t bos_id;
	uint32_t eos_id;
	/* <arch>.pooling_type as llama.cpp writes it for an embedding model: 1 mean, 2 cls,
	 * 3 last (shm's enum bn_pooling); 0 when absent or 0 (a generative model). */
	uint32_t pooling;
};

/* A weight matrix y = W x with W of n_out rows of n_in. */
enum bn_linear_kind {
	BN_LINEAR_T2,      /* ternary: int8 activations, T2 kernels */
	BN_LINEAR_FLOAT,   /* F32 / F16 / BF16 rows, float kernels */
	BN_LINEAR_DECODE,  /* Q8_0 / Q6_K (embedding and LM head only): rows decoded to float */
	BN_LINEAR_I8,      /* int8 rows, int8 activations: the --lm-head int8 copy (forward.c) */
};

struct bn_linear {
	enum bn_linear_kind kind;
	uint32_t n_in, n_out;
	const struct bn_gguf_tensor *src; /* the file's tensor (the reference reads this) */
	struct bn_t2_matrix t2;           /* BN_LINEAR_T2 */
	struct bn_f_matrix f;             /* BN_LINEAR_FLOAT */
	struct bn_i8_matrix i8;           /* BN_LINEAR_I8 */
	struct bn_t3_matrix t3;           /* BN_LINEAR_T2's decode copy (bn_model_add_t3), or
					   * codes NULL */
	int ternary_candidate;            /* a float layer matrix of a bitnet* file: packed to
					   * T2 (kind T2) when its rows are ternary, else FLOAT */
};

struct bn_layer {
	const float *attn_norm;           /* [n_embd] */
	const float *attn_sub_norm;       /* [n_head * head_dim], NULL without sub-norms */
	const float *ffn_norm;            /* [n_embd] */
	const float *ffn_sub_norm;        /* [n_ff], NULL without sub-norms */
	struct bn_linear wq, wk, wv, wo;  /* q: n_embd -> n_head*hd; k, v: -> n_head_kv*hd */
	struct bn_linear w_gate, w_up;    /* n_embd -> n_ff */
	struct bn_linear w_down;          /* n_ff -> n_embd */
};

/* A buffer the model allocated (bigmem.h) and frees with itself. */
struct bn_owned_buf {
	void *p;
	size_t size;
};

struct bn_model {
	struct bn_model_config cfg;
	struct bn_gguf file;
	const struct bn_gguf_tensor *tok_embd; /* [n_vocab rows of n_embd], any accepted type */
	const float *output_norm;              /* [n_embd] */
	struct bn_linear output;               /* LM head: output.weight, or token_embd if tied */
	struct bn_layer *layers;               /* [n_layer] */
	struct bn_owned_buf *owned;            /* buffers the model allocated */
	uint32_t n_owned, cap_owned;
	uint64_t repacked_bytes;               /* T2 codes and scales, float panels */
	uint64_t t3_bytes;                     /* the T3 decode copies (bn_model_add_t3) */
	int embed_from_output;                 /* tied embedding read from output's panels */
	uint32_t n_from_float;                 /* ternary candidates packed to T2 */
	uint32_t n_candidates;                 /* float layer matrices of a bitnet* file */
};

/* --activation: the daemon's choice instead of the file's (forced 0: the file decides). */
struct bn_activation_choice {
	int forced;
	enum bn_activation act;
};

/* "silu" or "relu2"; the reverse (also "relu_squared"), 0 or -1 for another name. */
const char *bn_activation_name(enum bn_activation a);
int bn_activation_from_name(const char *name, enum bn_activation *out);

/* The configuration the file's metadata gives (model_config.c): 0, or -1 with one line naming
 * the file in err. act may be NULL (the file decides). */
int bn_model_read_config(const struct bn_gguf *g, const struct bn_activation_choice *act,
			 struct bn_model_config *c, char err[BN_MODEL_ERR_LEN]);
/* Type 36 in a llama file is bitnet.cpp's I2_S only when general.file_type is 40 and every
 * such tensor spans n/4 + 32 bytes up to the alignment; else it is upstream llama.cpp's
 * IQ4_NL_4_4, refused. 0, or -1 with err set. */
int bn_model_check_i2_s(const struct bn_gguf *g, const struct bn_model_config *c,
			char err[BN_MODEL_ERR_LEN]);

/* How the loader lays out float matrices (F32, F16, BF16 linears and LM heads). */
enum bn_float_layout {
	BN_FLOAT_PANELS,   /* repacked into the CPU kernels' panel layout (kernels.h) */
	BN_FLOAT_IN_PLACE, /* the file's rows, used where they lie (the CUDA backend copies them) */
};

/* Loads and checks everything, float matrices in panels. Returns 0, or -1 with one line
 * (naming the file) in err. */
int bn_model_load(struct bn_model *m, const char *path, char err[BN_MODEL_ERR_LEN]);
int bn_model_load_as(struct bn_model *m, const char *path, enum bn_float_layout layout,
		     char err[BN_MODEL_ERR_LEN]);
void bn_model_free(struct bn_model *m);

/* The same in two steps, for a loader that decides between repacking and the weights cache
 * (wcache.h) once the file is open: bn_model_open maps and parses the file (m->file, for the
 * cache's key); bn_model_fill reads the configuration, checks every tensor and repacks each
 * matrix, on the pool's threads when there is one, or takes it from the cache (blobs in the
 * order bn_model_cache_blobs lists them). Each returns 0, or -1 with one line in err and the
 * model freed. */
struct bn_pool;
struct bn_wcache;
struct bn_model_source {
	enum bn_float_layout float_layout;
	struct bn_pool *pool;     /* NULL: repack on the calling thread */
	struct bn_wcache *cache;  /* NULL: repack */
	int head_in_place;        /* a float LM head keeps the file's rows, no panels (what
				   * bn_model_release_head_panels leaves, for --lm-head int8) */
	struct bn_activation_choice activation; /* --activation */
};
int bn_model_open(struct bn_model *m, const char *path, char err[BN_MODEL_ERR_LEN]);
int bn_model_fill(struct bn_model *m, const struct bn_model_source *src,
		  char err[BN_MODEL_ERR_LEN]);

/* The repacked matrices as cache blobs, in the order bn_model_fill takes them (out NULL:
 * only the count), and the T3 copies' (taken by bn_model_t3_from_cache, 0 or -EINVAL when the
 * cache holds something else). */
struct bn_wcache_blob;
uint32_t bn_model_cache_blobs(const struct bn_model *m, struct bn_wcache_blob *out);
uint32_t bn_model_t3_blobs(const struct bn_model *m, struct bn_wcache_blob *out);
int bn_model_t3_from_cache(struct bn_model *m, struct bn_wcache *c);

/* A second copy of every ternary matrix in the T3 layout (1.6 bits a weight, bn_blocks.h), for
 * the decode steps a T3 kernel serves (kernels.h: bn_t3_kernel): made from the T2 planes on
 * the pool's threads. 0, or -ENOMEM with no copy kept in use. */
struct bn_pool;
int bn_model_add_t3(struct bn_model *m, struct bn_pool *pool);

/* For --lm-head int8, which reads no float head: the panels of a float LM head are freed (656
 * MB on the 2B4T shape) and the head's matrix describes the file's rows in place instead
 * (not read by the int8 head); a tied embedding then reads its rows from the file as an
 * untied one does: the same floats (F16 and BF16 widen exactly, F32 is copied). Returns the
 * bytes freed, 0 when the head has no panels. */
uint64_t bn_model_release_head_panels(struct bn_model *m);

/* 1 when the layers hold ternary matrices (the 2-bit planes), 0 for a float model. */
int bn_model_is_ternary(const struct bn_model *m);

/* The seven matrices of a layer, in file order: q, k, v, output, gate, up, down. */
#define BN_LAYER_LINEARS 7
void bn_layer_linears(const struct bn_layer *L, const struct bn_linear *out[BN_LAYER_LINEARS]);

/* Row `token` of the embedding, as floats [n_embd]: from the LM head's panels when they hold
 * it, else read from the file (bn_gguf_read), so that rows do not stay resident. */
void bn_model_embed(const struct bn_model *m, uint32_t token, float *out);

#endif /* BITNETD_MODEL_H */
