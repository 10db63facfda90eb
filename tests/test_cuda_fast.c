/* SPDX-License-Identifier: MIT */
/*
 * The cuda backend's kernel variants (--cuda-kernels, issue 49) against the first kernels and
 * the CPU oracles. Exits 77 (skip) without a CUDA build or a usable GPU, saying which.
 *
 *  - the P16 GEMV and the mma.sync tensor-core kernel: bit-identical to the scalar t2_gemm on
 *    awkward shapes, every token count that picks another path, split k or not, both layouts;
 *  - the fused element-wise kernels: bit-identical to the sequences of first kernels they
 *    replace (add + rmsnorm + quantize, gate + quantize, rope + rope + kv_store, add + rmsnorm
 *    of chosen rows);
 *  - split attention: within 1e-5 of the scalar attend, a token's output the same bits alone
 *    and in a launch, and the first kernel's bits for contexts within one split;
 *  - the backend: `fast` (graph, fused, gemv, mma) gives base's tokens and log-probabilities bit
 *    for bit through prefill and decode; `all,split=16` (split attention over 16 positions, so
 *    the tiny contexts here span several splits) gives the cpu backend's greedy tokens, a
 *    sequence's bits alone and inside a padded graph batch of 18, and a prompt's bits in one
 *    step and one token a step; stories260K's known ids with `all,split=16` (float matrices:
 *    the unfused fallbacks); the daemon with --cuda-kernels serves the cpu daemon's tokens
 *    and says its variant in its stats.
 *
 * Built against the CUDA host harness as test_cuda_fast_host (the race check on), the same
 * cases run on the CPU; there the float parts are host floats (-ffp-contract=off), so a GPU run
 * is what checks that nvcc compiled the fused expressions as the first ones (the same PTX).
 */
#ifndef BN_HAVE_CUDA
#include <stdio.h>

int main(void)
{
	printf("SKIP: this build has no CUDA backend (no nvcc at build time, CUDA=0, or the sanitizer build)\n");
	return 77;
}
#else

#include "testutil.h"
#include "cuda_testutil.h"
#include "bitnet_client.h"
#include "../daemon/backends/backend.h"
#include "../daemon/model/forward.h"
#include "cuda_fast.h"
#include "kernels.h"
#include "quant.h"

#include "ckassert.h"
#include <cuda_runtime_api.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(BN_CUDA_HOST) && defined(__SANITIZE_ADDRESS__)
/* AddressSanitizer looks for memory errors: the prefill (prompts of up to 40 tokens, past a
 * KV block), a first decode step and graph replays reach every kernel and buffer; 24 ids of
 * stories260K cross 16 positions, where split attention splits. */
#define STORIES_IDS 24
#define STEPS 3
#elif defined(BN_CUDA_HOST)
#define STORIES_IDS 24
#define STEPS 8
#else
#define STORIES_IDS TU_STORIES_KNOWN
#define STEPS 32
#endif

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static uint32_t rnd(void)
{
	return ctu_rnd(&rng_state);
}

static float rndf(void)
{
	return ctu_rndf(&rng_state);
}

static void *dev_zero(size_t bytes)
{
	void *d = ctu_dev_copy(NULL, bytes);
	ck_assert_int_eq(cudaMemset(d, 0, bytes), cudaSuccess);
	return d;
}

static void poison(void *d, size_t bytes)
{
	ck_assert_int_eq(cudaMemset(d, 0xff, bytes), cudaSuccess);
}

/* ------------------------------------------------------------------------------------------ */
/* Ternary products: exact                                                                     */
/* ------------------------------------------------------------------------------------------ */

struct t2_case {
	uint32_t n_in, n_out, row_bytes;
	uint8_t *codes;
	float *scale;
	struct bn_cuda_t2 rows, p16; /* the device copies, T2 rows and P16 */
	struct bn_cuda_splitk sk;
	void *sk_mem;
};

static void t2_case_make(struct t2_case *c, uint32_t n_in, uint32_t n_out)
{
	*c = (struct t2_case){ .n_in = n_in, .n_out = n_out, .row_bytes = (uint32_t)bn_t2_row_bytes(n_in) };
	uint8_t *row = malloc(n_in);
	c->codes = malloc((size_t)n_out * c->row_bytes);
	c->scale = malloc(n_out * 4);
	for (uint32_t o = 0; o < n_out; o++) {
		for (uint32_t k = 0; k < n_in; k++)
			row[k] = (uint8_t)(rnd() % 3);
		bn_t2_pack(row, n_in, c->codes + (size_t)o * c->row_bytes);
		c->scale[o] = 0.5f + (float)(rnd() % 1000) / 1000.0f;
	}
	size_t pb = bn_cuda_p16_bytes(n_out, c->row_bytes);
	uint8_t *packed = malloc(pb);
	bn_cuda_p16_pack(c->codes, n_out, c->row_bytes, packed);
	void *scale = ctu_dev_copy(c->scale, n_out * 4);
	c->rows = (struct bn_cuda_t2){ .codes = ctu_dev_copy(c->codes, (size_t)n_out * c->row_bytes),
				       .scale = scale, .n_in = n_in, .n_out = n_out,
				       .row_bytes = c->row_bytes };
	c->p16 = (struct bn_cuda_t2){ .codes = ctu_dev_copy(packed, pb), .scale = scale, .n_in = n_in,
				      .n_out = n_out, .row_bytes = c->row_bytes };
	c->sk_mem = dev_zero(bn_cuda_splitk_bytes(n_out));
	bn_cuda_splitk_init(&c->sk, c->sk_mem, n_out);
	free(row), free(packed);
}

static void t2_case_free(struct t2_case *c)
{
	cudaFree((void *)c->rows.codes), cudaFree((void *)c->p16.codes), cudaFree((void *)c->rows.scale);
	cudaFree(c->sk_mem);
	free(c->codes), free(c->scale);
}

/* Quantized activations on both sides (the first kernels' quantization is tested elsewhere). */
struct acts {
	struct bn_q8_rows cpu;
	struct bn_cuda_q8 gpu;
};

static void acts_make(struct acts *a, uint32_t n, uint32_t k)
{
	uint32_t k_pad = (k + BN_T2_CHUNK - 1) / BN_T2_CHUNK * BN_T2_CHUNK;
	float *x = malloc((size_t)n * k * 4);
	for (size_t i = 0; i < (size_t)n * k; i++)
		x[i] = rndf();
	a->cpu = (struct bn_q8_rows){ .q = calloc(n, k_pad), .inv_scale = calloc(n, 4), .sum = calloc(n, 4),
				      .k = k, .k_pad = k_pad };
	bn_quantize_rows(x, k, n, &a->cpu);
	a->gpu = (struct bn_cuda_q8){ ctu_dev_copy(a->cpu.q, (size_t)n * k_pad),
				      ctu_dev_copy(a->cpu.inv_scale, n * 4),
				      ctu_dev_copy(a->cpu.sum, n * 4), k, k_pad };
	free(x);
}

static void acts_free(struct acts *a)
{
	free(a->cpu.q), free(a->cpu.inv_scale), free(a->cpu.sum);
	cudaFree(a->gpu.q), cudaFree(a->gpu.inv_scale), cudaFree(a->gpu.sum);
}

/* Runs kernel `which` (0 GEMV16, 1 mma on T2 rows, 2 mma on P16) over every token count and
 * split, each against the scalar kernel, and checks the split-k scratch is left zero. */
static void check_t2(uint32_t n_in, uint32_t n_out, int which, const uint32_t *toks, unsigned n_toks)
{
	static const uint32_t slices[] = { 1, 3, 0 };
	struct t2_case c;
	t2_case_make(&c, n_in, n_out);
	struct bn_t2_matrix cw = { .codes = c.codes, .scale = c.scale, .n_in = n_in, .n_out = n_out,
				   .row_bytes = c.row_bytes };
	for (unsigned i = 0; i < n_toks; i++) {
		uint32_t n = toks[i];
		struct acts a;
		acts_make(&a, n, n_in);
		float *want = malloc((size_t)n * n_out * 4), *got = malloc((size_t)n * n_out * 4);
		bn_kernels_scalar.t2_gemm(&cw, 0, n_out, &a.cpu, n, want, n_out);
		float *dy = ctu_dev_copy(NULL, (size_t)n * n_out * 4);
		for (unsigned s = 0; s < 3; s++) {
			poison(dy, (size_t)n * n_out * 4);
			int rc = which == 0 ? bn_cuda_t2_gemv16(&c.p16, &a.gpu, n, dy, n_out, slices[s], &c.sk, 0)
					    : bn_cuda_t2_mma(which == 2 ? &c.p16 : &c.rows, which == 2, &a.gpu, n,
							     dy, n_out, slices[s], &c.sk, 0);
			ck_assert_int_eq(rc, 0);
			ctu_host_copy(got, dy, (size_t)n * n_out * 4);
			ck_assert_msg(memcmp(got, want, (size_t)n * n_out * 4) == 0,
				      "kernel %d, %u x %u, %u tokens, slices %u", which, n_out, n_in, n, slices[s]);
		}
		size_t skb = bn_cuda_splitk_bytes(n_out);
		unsigned char *sk = malloc(skb);
		ctu_host_copy(sk, c.sk_mem, skb);
		for (size_t b = 0; b < skb; b++)
			ck_assert_msg(sk[b] == 0, "split-k scratch byte %zu left %u", b, sk[b]);
		free(sk);
		cudaFree(dy);
		free(want), free(got);
		acts_free(&a);
	}
	t2_case_free(&c);
}

START_TEST(gemv16_matches_scalar)
{
	const uint32_t toks[] = { 1, 3, 8, 13 }, few[] = { 1, 2 };
	check_t2(1000, 203, 0, toks, 4); /* a partial group, a k range of four chunks */
	check_t2(2560, 40, 0, few, 2);  /* ten chunks: more than one batch of loads a lane */
}
END_TEST

START_TEST(mma_matches_scalar)
{
	const uint32_t toks[] = { 16, 17, 33, 100 };
	check_t2(1000, 203, 1, toks, 4);
	check_t2(1000, 203, 2, toks, 4);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Fused element-wise kernels: the first kernels' bits                                          */
/* ------------------------------------------------------------------------------------------ */

static float *dev_random(size_t n, float amp)
{
	float *h = malloc(n * 4);
	for (size_t i = 0; i < n; i++)
		h[i] = amp * rndf();
	float *d = ctu_dev_copy(h, n * 4);
	free(h);
	return d;
}

static void expect_same(const void *a, const void *b, size_t bytes, const char *what)
{
	unsigned char *x = malloc(bytes), *y = malloc(bytes);
	ctu_host_copy(x, a, bytes);
	ctu_host_copy(y, b, bytes);
	size_t i = 0;
	while (i < bytes && x[i] == y[i])
		i++;
	ck_assert_msg(i == bytes, "%s: byte %zu of %zu differs", what, i, bytes);
	free(x), free(y);
}

static void q8_make(struct bn_cuda_q8 *q, uint32_t n, uint32_t k)
{
	uint32_t k_pad = (k + BN_T2_CHUNK - 1) / BN_T2_CHUNK * BN_T2_CHUNK;
	*q = (struct bn_cuda_q8){ ctu_dev_copy(NULL, (size_t)n * k_pad), ctu_dev_copy(NULL, n * 4),
				  ctu_dev_copy(NULL, n * 4), k, k_pad };
}

static void q8_same(const struct bn_cuda_q8 *a, const struct bn_cuda_q8 *b, uint32_t n, const char *what)
{
	expect_same(a->q, b->q, (size_t)n * a->k_pad, what);
	expect_same(a->inv_scale, b->inv_scale, n * 4, what);
	expect_same(a->sum, b->sum, n * 4, what);
}

START_TEST(fused_kernels_match_the_first_ones)
{
	uint32_t n = 700, ld = 768, t = 5; /* n not a multiple of the block */
	float eps = 1e-5f;
	float *x0 = dev_random((size_t)t * ld, 3.0f), *y = dev_random((size_t)t * ld, 2.0f);
	float *w = dev_random(ld, 1.5f), *xa = ctu_dev_copy(NULL, (size_t)t * ld * 4),
	      *xb = ctu_dev_copy(NULL, (size_t)t * ld * 4);
	float *norm = dev_zero((size_t)t * ld * 4);
	struct bn_cuda_q8 qa, qb;
	q8_make(&qa, t, n);
	q8_make(&qb, t, n);
	for (int with_add = 0; with_add < 2; with_add++) {
		ck_assert_int_eq(cudaMemcpy(xa, x0, (size_t)t * ld * 4, cudaMemcpyDeviceToDevice), 0);
		ck_assert_int_eq(cudaMemcpy(xb, x0, (size_t)t * ld * 4, cudaMemcpyDeviceToDevice), 0);
		if (with_add)
			ck_assert_int_eq(bn_cuda_add(xa, ld, y, ld, n, t, 0), 0);
		ck_assert_int_eq(bn_cuda_rmsnorm(norm, ld, xa, ld, NULL, w, n, t, eps, 0), 0);
		ck_assert_int_eq(bn_cuda_quantize(norm, ld, t, &qa, 0), 0);
		ck_assert_int_eq(bn_cuda_add_norm_quant(xb, ld, with_add ? y : NULL, ld, w, n, t, eps, &qb, 0), 0);
		q8_same(&qa, &qb, t, "add_norm_quant");
		expect_same(xa, xb, (size_t)t * ld * 4, "add_norm_quant's residual");
	}
	/* add_rmsnorm of chosen rows */
	uint32_t rows[2] = { 4, 1 };
	uint32_t *drows = ctu_dev_copy(rows, sizeof(rows));
	float *oa = dev_zero((size_t)2 * ld * 4), *ob = dev_zero((size_t)2 * ld * 4);
	ck_assert_int_eq(cudaMemcpy(xa, x0, (size_t)t * ld * 4, cudaMemcpyDeviceToDevice), 0);
	ck_assert_int_eq(cudaMemcpy(xb, x0, (size_t)t * ld * 4, cudaMemcpyDeviceToDevice), 0);
	ck_assert_int_eq(bn_cuda_add(xa, ld, y, ld, n, t, 0), 0);
	ck_assert_int_eq(bn_cuda_rmsnorm(oa, ld, xa, ld, drows, w, n, 2, eps, 0), 0);
	ck_assert_int_eq(bn_cuda_add_rmsnorm(ob, ld, xb, ld, y, ld, drows, w, n, 2, eps, 0), 0);
	expect_same(oa, ob, (size_t)2 * ld * 4, "add_rmsnorm");
	/* the gated activation, with and without a sub-norm */
	float *g = dev_random((size_t)t * ld, 4.0f), *u = dev_random((size_t)t * ld, 1.0f);
	float *ga = ctu_dev_copy(NULL, (size_t)t * ld * 4);
	for (int relu2 = 0; relu2 < 2; relu2++) {
		ck_assert_int_eq(cudaMemcpy(ga, g, (size_t)t * ld * 4, cudaMemcpyDeviceToDevice), 0);
		const float *sub = relu2 ? w : NULL;
		ck_assert_int_eq(bn_cuda_gate(ga, u, ld, n, t, relu2, sub, eps, 0), 0);
		ck_assert_int_eq(bn_cuda_quantize(ga, ld, t, &qa, 0), 0);
		ck_assert_int_eq(bn_cuda_gate_quant(g, u, ld, n, t, relu2, sub, eps, &qb, 0), 0);
		q8_same(&qa, &qb, t, relu2 ? "gate_quant (relu2, sub-norm)" : "gate_quant (silu)");
	}
	cudaFree(x0), cudaFree(y), cudaFree(w), cudaFree(xa), cudaFree(xb), cudaFree(norm), cudaFree(drows);
	cudaFree(oa), cudaFree(ob), cudaFree(g), cudaFree(u), cudaFree(ga);
}
END_TEST

START_TEST(rope_store_matches_rope_and_kv_store)
{
	/* heads of 16, RoPE on 12 of them (pairs both ways), a cache of 4 blocks of 8 */
	uint32_t hd = 16, nh = 4, nkv = 2, kv_dim = nkv * hd, ld = 96, t = 3, bt = 8;
	for (int neox = 0; neox < 2; neox++)
		for (uint32_t rope_dim = 12; rope_dim <= 16; rope_dim += 4) {
			float *q0 = dev_random((size_t)t * ld, 1.0f), *k0 = dev_random((size_t)t * ld, 1.0f);
			float *v = dev_random((size_t)t * ld, 1.0f), *cs = dev_random((size_t)t * rope_dim, 1.0f);
			float *qa = ctu_dev_copy(NULL, (size_t)t * ld * 4), *ka = ctu_dev_copy(NULL, (size_t)t * ld * 4);
			ck_assert_int_eq(cudaMemcpy(qa, q0, (size_t)t * ld * 4, cudaMemcpyDeviceToDevice), 0);
			ck_assert_int_eq(cudaMemcpy(ka, k0, (size_t)t * ld * 4, cudaMemcpyDeviceToDevice), 0);
			size_t cache = (size_t)4 * bt * kv_dim * 4;
			struct bn_cuda_kv_layer a = { dev_zero(cache), dev_zero(cache), kv_dim, bt };
			struct bn_cuda_kv_layer b = { dev_zero(cache), dev_zero(cache), kv_dim, bt };
			uint32_t slot[3] = { 17, 3, 30 };
			uint32_t *ds = ctu_dev_copy(slot, sizeof(slot));
			ck_assert_int_eq(bn_cuda_rope(qa, ld, nh, hd, rope_dim, neox, cs, t, 0), 0);
			ck_assert_int_eq(bn_cuda_rope(ka, ld, nkv, hd, rope_dim, neox, cs, t, 0), 0);
			ck_assert_int_eq(bn_cuda_kv_store(&a, ka, v, ld, ds, t, 0), 0);
			ck_assert_int_eq(bn_cuda_rope_store(q0, ld, k0, v, ld, nh, nkv, hd, rope_dim, neox, cs, &b, ds,
							    t, 0),
					 0);
			expect_same(qa, q0, (size_t)t * ld * 4, "rope_store's queries");
			expect_same(a.K, b.K, cache, "rope_store's keys");
			expect_same(a.V, b.V, cache, "rope_store's values");
			cudaFree(q0), cudaFree(k0), cudaFree(v), cudaFree(cs), cudaFree(qa), cudaFree(ka);
			cudaFree(a.K), cudaFree(a.V), cudaFree(b.K), cudaFree(b.V), cudaFree(ds);
		}
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Split attention                                                                             */
/* ------------------------------------------------------------------------------------------ */

START_TEST(split_attention)
{
	uint32_t hd = 64, n_head = 4, n_kv = 2, kv_dim = n_kv * hd, bt = 16, n_blocks = 24, split = 16;
	uint32_t n_tok = 4, lens[4] = { 1, 16, 77, 200 }, max_splits = 13;
	size_t cache = (size_t)n_blocks * bt * kv_dim;
	float *K = malloc(cache * 4), *V = malloc(cache * 4);
	for (size_t i = 0; i < cache; i++)
		K[i] = rndf(), V[i] = rndf();
	uint32_t tables[4][13], off[4] = { 0, 13, 26, 39 };
	for (uint32_t t = 0; t < n_tok; t++)
		for (uint32_t b = 0; b < 13; b++)
			tables[t][b] = (b * 5 + t * 7) % n_blocks;
	size_t qn = (size_t)n_tok * n_head * hd;
	float *q = malloc(qn * 4), *want = malloc(qn * 4), *got = malloc(qn * 4), *first = malloc(qn * 4);
	for (size_t i = 0; i < qn; i++)
		q[i] = 2.0f * rndf();
	float *s = malloc(200 * 4), scale = 1.0f / sqrtf((float)hd);
	for (uint32_t t = 0; t < n_tok; t++)
		for (uint32_t h = 0; h < n_head; h++) {
			uint32_t kvh = h / (n_head / n_kv);
			struct bn_kv_view v = { .K = K + kvh * hd, .V = V + kvh * hd, .blocks = tables[t],
						.block_tokens = bt, .ld = kv_dim, .block_stride = (size_t)bt * kv_dim };
			size_t at = ((size_t)t * n_head + h) * hd;
			bn_kernels_scalar.attend(q + at, &v, lens[t], hd, scale, s, want + at);
		}
	struct bn_cuda_kv_layer kv = { ctu_dev_copy(K, cache * 4), ctu_dev_copy(V, cache * 4), kv_dim, bt };
	struct bn_cuda_attn a = {
		.q = ctu_dev_copy(q, qn * 4), .ldq = n_head * hd,
		.out = ctu_dev_copy(NULL, qn * 4), .ldo = n_head * hd,
		.len = ctu_dev_copy(lens, sizeof(lens)), .table_off = ctu_dev_copy(off, sizeof(off)),
		.tables = ctu_dev_copy(tables, sizeof(tables)), .n_head = n_head, .n_head_kv = n_kv,
		.head_dim = hd, .scale = scale,
	};
	float *part = ctu_dev_copy(NULL, bn_cuda_attend_split_bytes(n_tok, n_head, hd, max_splits));
	ck_assert_int_eq(bn_cuda_attend_split(&kv, &a, n_tok, split, max_splits, part, 0), 0);
	ctu_host_copy(got, a.out, qn * 4);
	for (size_t i = 0; i < qn; i++)
		ck_assert_msg(fabsf(got[i] - want[i]) <= 1e-5f * (1.0f + fabsf(want[i])), "element %zu: %g vs %g",
			      i, got[i], want[i]);
	/* within one split: the first kernel's bits */
	poison(a.out, qn * 4);
	ck_assert_int_eq(bn_cuda_attend(&kv, &a, n_tok, 0), 0);
	ctu_host_copy(first, a.out, qn * 4);
	size_t one = (size_t)2 * n_head * hd; /* tokens 0 and 1: 1 and 16 positions */
	ck_assert_int_eq(memcmp(first, got, one * 4), 0);
	/* token 3 alone (a launch of one, another max_splits): its bits in the launch of four */
	struct bn_cuda_attn alone = a;
	alone.q = a.q + (size_t)3 * n_head * hd;
	alone.len = a.len + 3;
	alone.table_off = a.table_off + 3;
	poison(a.out, qn * 4);
	ck_assert_int_eq(bn_cuda_attend_split(&kv, &alone, 1, split, max_splits + 3, part, 0), 0);
	ctu_host_copy(first, a.out, (size_t)n_head * hd * 4);
	ck_assert_int_eq(memcmp(first, got + (size_t)3 * n_head * hd, (size_t)n_head * hd * 4), 0);
	cudaFree(kv.K), cudaFree(kv.V), cudaFree((void *)a.q), cudaFree(a.out), cudaFree((void *)a.len);
	cudaFree((void *)a.table_off), cudaFree((void *)a.tables), cudaFree(part);
	free(K), free(V), free(q), free(want), free(got), free(first), free(s);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The backend with each variant                                                               */
/* ------------------------------------------------------------------------------------------ */

#define MAX_SEQS 33
#define BLOCK_TOKENS 16
#define SEQ_BLOCKS 16
#define TOP 8

struct engine {
	const struct bn_backend_ops *ops;
	void *self;
	struct bn_model_desc desc;
	uint32_t tables[MAX_SEQS][SEQ_BLOCKS];
	uint32_t len[MAX_SEQS];
};

static void engine_open(struct engine *e, const struct bn_backend_ops *ops, const char *model,
			const char *kernels)
{
	struct bn_backend_options opt = { .model_path = model, .max_seqs = MAX_SEQS, .n_threads = 2,
					  .cuda_kernels = kernels };
	e->ops = ops;
	ck_assert_int_eq(ops->open(&opt, &e->desc, &e->self), 0);
	ck_assert_int_eq(ops->kv_init(e->self, MAX_SEQS * SEQ_BLOCKS, BLOCK_TOKENS), 0);
	for (uint32_t s = 0; s < MAX_SEQS; s++)
		for (uint32_t b = 0; b < SEQ_BLOCKS; b++) /* interleaved: neighbours share no block */
			e->tables[s][b] = b * MAX_SEQS + s;
}

static void engine_close(struct engine *e)
{
	e->ops->close(e->self);
}

/* What a run produced: each row's tokens and the first row's top-8 log-probabilities. */
struct outputs {
	uint32_t tok[MAX_SEQS][64];
	struct bn_token_logprob lp[64][TOP];
};

/* n rows, sequences 0..n-1 from empty: their prompts in one step (row r: 1 + 13 r % 40 tokens,
 * or all of prompt when given), then `steps` greedy decode steps. */
static void generate(struct engine *e, uint32_t n, const uint32_t *prompt, uint32_t plen, uint32_t steps,
		     struct outputs *o)
{
	static uint32_t prompts[MAX_SEQS][64];
	uint32_t lens[MAX_SEQS], pos[MAX_SEQS], seqs[MAX_SEQS], next[MAX_SEQS];
	const uint32_t *blocks[MAX_SEQS];
	struct bn_sampling p = { .want_logprobs = 1, .n_logprobs = TOP };
	struct bn_sample_ctx ctx[MAX_SEQS];
	const struct bn_sample_ctx *sp[MAX_SEQS];
	struct bn_sample_out out[MAX_SEQS];
	struct bn_token_logprob top[MAX_SEQS][TOP];
	rng_state = 0x9E3779B97F4A7C15ull; /* the same prompts in every run */
	for (uint32_t r = 0; r < n; r++) {
		lens[r] = prompt ? plen : 1 + (r * 13) % 40;
		for (uint32_t i = 0; i < lens[r]; i++)
			prompts[r][i] = prompt ? prompt[i] : 3 + rnd() % (e->desc.vocab_size - 3);
		seqs[r] = r;
		ck_assert_int_eq(e->ops->seq_open(e->self, r), 0);
		e->len[r] = 0;
		ctx[r] = (struct bn_sample_ctx){ &p, NULL, 0, NULL, 0, NULL, NULL };
		sp[r] = &ctx[r];
		blocks[r] = e->tables[r];
	}
	for (uint32_t i = 0; i <= steps; i++) {
		uint32_t width = 0;
		for (uint32_t r = 0; r < n; r++)
			width = lens[r] > width ? lens[r] : width;
		uint32_t *tokens = calloc((size_t)n * width, 4);
		for (uint32_t r = 0; r < n; r++) {
			memcpy(tokens + (size_t)r * width, i ? &next[r] : prompts[r], lens[r] * 4);
			pos[r] = e->len[r];
			out[r].top = top[r];
		}
		struct bn_batch b = { .n_rows = n, .width = width, .tokens = tokens, .lens = lens, .pos = pos,
				      .seq = seqs, .blocks = blocks, .sample = sp };
		ck_assert_int_eq(e->ops->step(e->self, &b, out), 0);
		free(tokens);
		for (uint32_t r = 0; r < n; r++) {
			e->len[r] += lens[r];
			o->tok[r][i] = next[r] = out[r].token;
			lens[r] = 1;
		}
		memcpy(o->lp[i], top[0], sizeof(top[0]));
	}
}

static void run_variant(const char *model, const char *kernels, uint32_t n, uint32_t steps, struct outputs *o)
{
	struct engine e;
	engine_open(&e, &bn_backend_cuda, model, kernels);
	generate(&e, n, NULL, 0, steps, o);
	engine_close(&e);
}

static void same_outputs(const struct outputs *a, const struct outputs *b, uint32_t n, uint32_t steps,
			 const char *what)
{
	for (uint32_t r = 0; r < n; r++)
		for (uint32_t i = 0; i <= steps; i++)
			ck_assert_msg(a->tok[r][i] == b->tok[r][i], "%s: row %u step %u: token %u vs %u", what, r,
				      i, a->tok[r][i], b->tok[r][i]);
	ck_assert_msg(memcmp(a->lp, b->lp, (steps + 1) * sizeof(a->lp[0])) == 0,
		      "%s: log-probabilities differ", what);
}

/* The variants that must give base's bits: every exact feature at once; graph alone (the
 * first kernels, captured, four rows of a bucket of four); gemv alone (the P16 GEMV for every
 * step, prefill's 82 tokens in passes of 8) and mma alone (the tensor cores on T2 rows). */
START_TEST(exact_variants_give_base_bits)
{
	static const char *const variants[] = { "fast", "graph", "gemv", "mma" };
	static struct outputs base, v;
	run_variant(tu_default_model(), "base", 4, STEPS, &base);
	for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
		memset(&v, 0, sizeof(v));
		run_variant(tu_default_model(), variants[i], 4, STEPS, &v);
		same_outputs(&base, &v, 4, STEPS, variants[i]);
	}
}
END_TEST

/* Split attention over 16 positions: the cpu backend's tokens; a sequence's bits alone and in
 * a graph batch of 18 (padded to 20; the tensor cores, where alone is the GEMV); and fast's
 * alone against its own in the batch. */
START_TEST(split_variant_against_cpu_and_batch)
{
	static struct outputs alone, batch, cpu;
	struct engine c;
	engine_open(&c, &bn_backend_cpu, tu_default_model(), NULL);
	generate(&c, 1, NULL, 0, STEPS, &cpu);
	engine_close(&c);
	for (int v = 0; v < 2; v++) {
		const char *name = v ? "fast" : "all,split=16";
		run_variant(tu_default_model(), name, 1, STEPS, &alone);
		run_variant(tu_default_model(), name, 18, STEPS, &batch);
		same_outputs(&alone, &batch, 1, STEPS, name);
		for (uint32_t i = 0; i <= STEPS; i++) {
			ck_assert_msg(alone.tok[0][i] == cpu.tok[0][i], "%s step %u: %u, cpu %u", name, i,
				      alone.tok[0][i], cpu.tok[0][i]);
			for (uint32_t j = 0; j < TOP; j++)
				ck_assert_msg(fabsf(alone.lp[i][j].logprob - cpu.lp[i][j].logprob) <= 2e-2f,
					      "%s step %u alternative %u: %g vs cpu %g", name, i, j,
					      alone.lp[i][j].logprob, cpu.lp[i][j].logprob);
		}
	}
}
END_TEST

/* A prompt in one step, then one token a step: the last position's log-probabilities the same
 * bits (the split depends on the position, not on the step). */
START_TEST(prefill_matches_stepwise)
{
	static const char *const variants[] = { "fast", "all,split=16" };
	enum { N = 24 };
	uint32_t prompt[N];
	for (uint32_t i = 0; i < N; i++)
		prompt[i] = 3 + (i * 37 + 11) % 500;
	for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
		static struct outputs whole, step;
		struct engine e;
		engine_open(&e, &bn_backend_cuda, tu_default_model(), variants[v]);
		generate(&e, 1, prompt, N, 0, &whole);
		/* one token a step: a greedy step each, its last the prompt's last token */
		ck_assert_int_eq(e.ops->seq_open(e.self, 0), 0);
		e.len[0] = 0;
		struct bn_sampling p = { .want_logprobs = 1, .n_logprobs = TOP };
		struct bn_sample_ctx ctx = { &p, NULL, 0, NULL, 0, NULL, NULL };
		const struct bn_sample_ctx *sp = &ctx;
		struct bn_token_logprob top[TOP];
		struct bn_sample_out out = { .top = top };
		uint32_t seq = 0, one = 1;
		for (uint32_t i = 0; i < N; i++) {
			uint32_t pos = e.len[0];
			const uint32_t *blocks = e.tables[0];
			struct bn_batch b = { .n_rows = 1, .width = 1, .tokens = &prompt[i], .lens = &one,
					      .pos = &pos, .seq = &seq, .blocks = &blocks, .sample = &sp };
			ck_assert_int_eq(e.ops->step(e.self, &b, &out), 0);
			e.len[0]++;
		}
		memcpy(step.lp[0], top, sizeof(top));
		ck_assert_msg(out.token == whole.tok[0][0], "%s: %u stepwise, %u in one step", variants[v],
			      out.token, whole.tok[0][0]);
		ck_assert_msg(memcmp(step.lp[0], whole.lp[0], sizeof(top)) == 0, "%s: log-probabilities differ",
			      variants[v]);
		engine_close(&e);
	}
}
END_TEST

START_TEST(stories_with_every_feature)
{
	const char *dir = getenv("BITNET_TEST_MODELS");
	if (!dir) {
		printf("SKIP: test model (BITNET_TEST_MODELS is not set)\n");
		return;
	}
	char path[512];
	snprintf(path, sizeof(path), "%s/stories260K.gguf", dir);
	struct engine e;
	engine_open(&e, &bn_backend_cuda, path, "all,split=16");
	uint32_t cur = 1, seq = 0, one = 1;
	struct bn_sampling p = { 0 };
	struct bn_sample_ctx ctx = { &p, NULL, 0, NULL, 0, NULL, NULL };
	const struct bn_sample_ctx *sp = &ctx;
	ck_assert_int_eq(e.ops->seq_open(e.self, 0), 0);
	for (uint32_t i = 0; i < STORIES_IDS; i++) {
		struct bn_sample_out out = { 0 };
		uint32_t pos = i;
		const uint32_t *blocks = e.tables[0];
		struct bn_batch b = { .n_rows = 1, .width = 1, .tokens = &cur, .lens = &one, .pos = &pos,
				      .seq = &seq, .blocks = &blocks, .sample = &sp };
		ck_assert_int_eq(e.ops->step(e.self, &b, &out), 0);
		cur = out.token;
		ck_assert_msg(cur == tu_stories_known[i], "id %u: %u, want %u", i, cur, tu_stories_known[i]);
	}
	engine_close(&e);
}
END_TEST

/* `bitnetd --cuda-kernels all` serves the cpu daemon's greedy tokens and names its variant. */
START_TEST(daemon_runs_a_variant)
{
	if (!ctu_have_cuda_daemon())
		return;
	const char *args[] = { "--backend", "cuda", "--model", tu_default_model(), "--kv-memory", "4M",
			       "--cuda-kernels", "all", NULL };
	struct tu_daemon gd, cd;
	ck_assert_int_eq(ctu_start_cuda_daemon(&gd, args, 0), 0);
	ck_assert_int_eq(tu_daemon_start_cpu(&cd, tu_default_model(), NULL), 0);
	struct bn_client *g, *c;
	ck_assert_int_eq(bn_connect(gd.socket_path, 8, &g), 0);
	ck_assert_int_eq(bn_connect(cd.socket_path, 8, &c), 0);
	uint32_t prompt[8] = { 5, 77, 301, 9, 12, 400, 33, 2 }, a[12], b[12];
	struct bn_request r = { .prompt = prompt, .n_prompt = 8, .max_tokens = 12, .flags = BN_REQ_IGNORE_EOS };
	ck_assert_int_eq(bn_generate(g, &r, a, 12, NULL, tu_scaled_ns(60000000000ll)), 0);
	ck_assert_int_eq(bn_generate(c, &r, b, 12, NULL, tu_scaled_ns(60000000000ll)), 0);
	ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
	static char stats[1 << 16];
	ck_assert_int_ge(bn_daemon_stats(g, stats, sizeof(stats)), 0);
	ck_assert_msg(strstr(stats, "bitnetd_cuda_kernels{variant=\"graph,fused,gemv,mma,split\"} 1"),
		      "the stats do not name the variant");
	bn_disconnect(g);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&gd, SIGTERM), 0);
	ck_assert_int_eq(tu_daemon_stop(&cd, SIGTERM), 0);
}
END_TEST

static Suite *fast_suite(void)
{
	Suite *s = suite_create("cuda_fast");
	TCase *k = tcase_create("kernels");
	tcase_set_timeout(k, 300);
	tcase_add_test(k, gemv16_matches_scalar);
	tcase_add_test(k, mma_matches_scalar);
	tcase_add_test(k, fused_kernels_match_the_first_ones);
	tcase_add_test(k, rope_store_matches_rope_and_kv_store);
	tcase_add_test(k, split_attention);
	suite_add_tcase(s, k);
	/* the backend's cases one to a test case, each with its own time limit (CK_RUN_CASE) */
	const struct {
		const char *name;
		const TTest *test;
	} backend[] = {
		{ "stories", stories_with_every_feature },
		{ "exact", exact_variants_give_base_bits },
		{ "split", split_variant_against_cpu_and_batch },
		{ "prefill", prefill_matches_stepwise },
		{ "daemon", daemon_runs_a_variant },
	};
	for (size_t i = 0; i < sizeof(backend) / sizeof(backend[0]); i++) {
		TCase *b = tcase_create(backend[i].name);
		tcase_set_timeout(b, 600);
		tcase_add_test(b, backend[i].test);
		suite_add_tcase(s, b);
	}
	return s;
}

int main(void)
{
#if defined(BN_CUDA_HOST) && defined(__SANITIZE_THREAD__)
	/* The harness runs twenty times slower there (68 s of CI's 40 minutes for the kernels
	 * and 8 ids); its threads are test_cuda_harness's and test_cuda_host's under it, and
	 * the variant kernels' races are the harness's race check's, in the plain pass. */
	printf("SKIP under ThreadSanitizer: the plain and AddressSanitizer passes run the variants\n");
	return 77;
#endif
	char device[256];
	int rc = ctu_require_device(device, sizeof(device));
	if (rc)
		return rc;
#ifdef BN_CUDA_HOST
	printf("the cuda variants on the CUDA host harness (tests/cuda_host): %s\n", device);
#endif
	return ctu_run_suite(fast_suite());
}

#endif /* BN_HAVE_CUDA */
