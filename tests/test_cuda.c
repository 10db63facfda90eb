/* SPDX-License-Identifier: MIT */
/*
 * The CUDA kernels and backend against the CPU oracles. Exits 77 (skip) without a CUDA build
 * or without a usable GPU, saying which.
 *
 *  - int8 quantization and both ternary kernels (dp4a, tensor cores): bit-identical to
 *    bn_quantize_rows and the scalar t2_gemm, on random inputs of awkward sizes;
 *  - float products: F32 within 1e-5 of a double reference (relative to the row's norm), F16
 *    (inputs rounded to half, as the kernel documents) within 1e-3; a token's outputs alone
 *    and inside a launch of 40 tokens bit-identical;
 *  - attention over a paged cache against the scalar attend: within 1e-5;
 *  - the sampler: the token bn_sample picks, on the same logits and parameters, for greedy,
 *    top-k, top-p, min-p and penalties; log-probabilities within 1e-4;
 *  - the whole backend: the test model's 200 greedy ids; the tiny preset's greedy ids and
 *    top-8 log-probabilities against the cpu backend (within 2e-2: the F16 LM head rounds its
 *    input to half); the same for issue 57's families (head size 256 with GQA, 4 heads to 1
 *    KV head, a bitnet F16 file packed to T2); a sequence's tokens and log-probabilities alone and inside a batch of 32,
 *    bit-identical;
 *  - issue 61's qwen3 and gemma3 graphs (case qwen3_gemma3): the grouped ternary kernel
 *    bit-identical to the scalar t2g_gemm (in the kernels case); the four -test presets'
 *    greedy ids and top-8 log-probabilities against the cpu backend as the families' above
 *    (q/k and per-projection norms, GELU, post-norms, the embedding scale, groups of 256 with
 *    a Q4_0 head, a sliding window), `fast` running base for them; BitNet-embedding's two
 *    graphs embedded by the cuda daemon within 1e-4 of the cpu daemon's, batch = alone;
 *  - the daemon: `bitnetd --backend cuda` serves greedy requests with the cpu daemon's tokens,
 *    and a seeded, penalised sampled request alone and among others with the same tokens;
 *    on the harness only (its device memory is an environment variable): a device too small
 *    for the weights, for one KV block past the scratch headroom, or for --kv-memory, is
 *    refused with exit status 3 and the reason (--backend auto takes the cpu instead); a
 *    little room past the headroom is the default KV cache, and serves.
 *
 * Built against the CUDA host harness (tests/cuda_host, BN_CUDA_HOST) as test_cuda_host, the
 * same cases run on the CPU, with the harness's race check on, on every machine; there the
 * test model's run stops after its first 64 known ids and the batch of 32 after 16 steps (a
 * token of stories260K costs about 0.1 s on the harness, 0.25 s with the race check). Under
 * AddressSanitizer (about 0.6 s a token, make check's check-san pass), which looks for memory
 * errors, not for other outputs, each run is cut to the steps that still reach every kernel
 * and buffer: 24 ids (past the first KV block), 4 steps of the batch (its ragged prefill of
 * up to 40 tokens, then decode rows), 8 steps against the cpu backend, 4 tokens a request
 * of the daemon's unconstrained ones, a JSON object's roomy budget of 16 (48; it is closed
 * by EOS at the budget either way) and 12 tokens for the seeded pair (24); the regular
 * expression's speculation keeps its budgets (its EOS after 24 tokens and its length at 7
 * are what it checks).
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
#include "../daemon/backends/cuda_kv.h"
#include "../daemon/model/forward.h"
#include "../daemon/model/model.h"
#include "cuda_kernels.h"
#include "kernels.h"
#include "quant.h"

#include "ckassert.h"
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(BN_CUDA_HOST) && defined(__SANITIZE_ADDRESS__)
#define STORIES_IDS 12      /* AddressSanitizer: each kernel and buffer, not every output */
#define INVARIANCE_STEPS 4
#define PROMPT_SPREAD 8     /* prompts of 1 to 8 tokens: a batch's prefill of ragged rows */
#define TINY_STEPS 5
#define SERVE_TOKENS 3
#define JSON_ROOM 12        /* a JSON object's roomy budget: closed in time all the same */
#define SEEDED_TOKENS 6
#define SPECULATION_ROOM 16 /* "(ab ){8,30}": drafts verified from the fourth token or so */
#define FAMILY_STEPS 2      /* a prefill and a decode step of each family's shapes */
#define EMBED_LONG 72       /* three chunks of the daemon's 32-token budget, the last partial */
#else
#if defined(BN_CUDA_HOST) && defined(__SANITIZE_THREAD__)
#define STORIES_IDS 2       /* ThreadSanitizer: the BOS step and one decode step (40 s an id) */
#define INVARIANCE_STEPS 16
#elif defined(BN_CUDA_HOST)
#define STORIES_IDS 64      /* of the TU_STORIES_KNOWN */
#define INVARIANCE_STEPS 16
#else
#define STORIES_IDS TU_STORIES_KNOWN
#define INVARIANCE_STEPS 32
#endif
#define PROMPT_SPREAD 40
#define TINY_STEPS 24
#define SERVE_TOKENS 12
#define JSON_ROOM (4 * DAEMON_TOKENS)
#define SEEDED_TOKENS (2 * DAEMON_TOKENS)
#define SPECULATION_ROOM (4 * DAEMON_TOKENS)
#define FAMILY_STEPS 8
#define EMBED_LONG 120
#endif

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void)
{
	return ctu_rnd(&rng_state);
}

static float rndf(void)
{
	return ctu_rndf(&rng_state); /* [-1, 1) */
}

/* ------------------------------------------------------------------------------------------ */
/* Ternary: quantization and both kernels, exact                                               */
/* ------------------------------------------------------------------------------------------ */

struct q8_pair {
	struct bn_q8_rows cpu;
	struct bn_cuda_q8 gpu;
};

static void quantize_both(const float *x, uint32_t n, uint32_t k, struct q8_pair *p)
{
	uint32_t k_pad = (k + BN_T2_CHUNK - 1) / BN_T2_CHUNK * BN_T2_CHUNK;
	p->cpu = (struct bn_q8_rows){ .q = calloc((size_t)n, k_pad), .inv_scale = calloc(n, 4),
				      .sum = calloc(n, 4), .k = k, .k_pad = k_pad };
	bn_quantize_rows(x, k, n, &p->cpu);
	float *dx = ctu_dev_copy(x, (size_t)n * k * 4);
	p->gpu = (struct bn_cuda_q8){ .q = ctu_dev_copy(NULL, (size_t)n * k_pad),
				      .inv_scale = ctu_dev_copy(NULL, n * 4), .sum = ctu_dev_copy(NULL, n * 4),
				      .k = k, .k_pad = k_pad };
	ck_assert_int_eq(bn_cuda_quantize(dx, k, n, &p->gpu, 0), 0);
	cudaFree(dx);
}

static void q8_pair_free(struct q8_pair *p)
{
	free(p->cpu.q), free(p->cpu.inv_scale), free(p->cpu.sum);
	cudaFree(p->gpu.q), cudaFree(p->gpu.inv_scale), cudaFree(p->gpu.sum);
}

START_TEST(quantize_matches_cpu)
{
	const uint32_t ks[] = { 172, 2560, 6912 };
	for (unsigned c = 0; c < 3; c++) {
		uint32_t n = 37, k = ks[c];
		float *x = malloc((size_t)n * k * 4);
		for (size_t i = 0; i < (size_t)n * k; i++)
			x[i] = rndf() * (float)(1 + i % 7);
		memset(x + k, 0, k * 4); /* an all-zero row */
		struct q8_pair p;
		quantize_both(x, n, k, &p);
		int8_t *q = malloc((size_t)n * p.cpu.k_pad);
		float *inv = malloc(n * 4);
		int32_t *sum = malloc(n * 4);
		ctu_host_copy(q, p.gpu.q, (size_t)n * p.cpu.k_pad);
		ctu_host_copy(inv, p.gpu.inv_scale, n * 4);
		ctu_host_copy(sum, p.gpu.sum, n * 4);
		ck_assert_int_eq(memcmp(q, p.cpu.q, (size_t)n * p.cpu.k_pad), 0);
		ck_assert_int_eq(memcmp(inv, p.cpu.inv_scale, n * 4), 0);
		ck_assert_int_eq(memcmp(sum, p.cpu.sum, n * 4), 0);
		q8_pair_free(&p);
		free(x), free(q), free(inv), free(sum);
	}
}
END_TEST

START_TEST(ternary_kernels_match_scalar)
{
	uint32_t n_in = 1000, n_out = 203, row_bytes = (uint32_t)bn_t2_row_bytes(n_in);
	uint8_t *codes = malloc((size_t)n_out * row_bytes), *row = malloc(n_in);
	float *scale = malloc(n_out * 4);
	for (uint32_t o = 0; o < n_out; o++) {
		for (uint32_t k = 0; k < n_in; k++)
			row[k] = (uint8_t)(rnd() % 3);
		bn_t2_pack(row, n_in, codes + (size_t)o * row_bytes);
		scale[o] = 0.5f + (float)(rnd() % 1000) / 1000.0f;
	}
	struct bn_t2_matrix cw = { .codes = codes, .scale = scale, .n_in = n_in, .n_out = n_out,
				   .row_bytes = row_bytes };
	struct bn_cuda_t2 gw = { .codes = ctu_dev_copy(codes, (size_t)n_out * row_bytes),
				 .scale = ctu_dev_copy(scale, n_out * 4), .n_in = n_in, .n_out = n_out,
				 .row_bytes = row_bytes };
	const uint32_t toks[] = { 1, 5, 33, 100 };
	for (unsigned c = 0; c < 4; c++) {
		uint32_t n = toks[c];
		float *x = malloc((size_t)n * n_in * 4), *want = malloc((size_t)n * n_out * 4);
		float *got = malloc((size_t)n * n_out * 4);
		for (size_t i = 0; i < (size_t)n * n_in; i++)
			x[i] = rndf();
		struct q8_pair p;
		quantize_both(x, n, n_in, &p);
		bn_kernels_scalar.t2_gemm(&cw, 0, n_out, &p.cpu, n, want, n_out);
		float *dy = ctu_dev_copy(NULL, (size_t)n * n_out * 4);
		ck_assert_int_eq(bn_cuda_t2_gemv_dp4a(&gw, &p.gpu, n, dy, n_out, 0), 0);
		ctu_host_copy(got, dy, (size_t)n * n_out * 4);
		ck_assert_msg(memcmp(got, want, (size_t)n * n_out * 4) == 0, "dp4a, %u tokens", n);
		ck_assert_int_eq(cudaMemset(dy, 0xff, (size_t)n * n_out * 4), cudaSuccess);
		ck_assert_int_eq(bn_cuda_t2_gemm_tc(&gw, &p.gpu, n, dy, n_out, 0), 0);
		ctu_host_copy(got, dy, (size_t)n * n_out * 4);
		ck_assert_msg(memcmp(got, want, (size_t)n * n_out * 4) == 0, "tensor cores, %u tokens", n);
		cudaFree(dy);
		q8_pair_free(&p);
		free(x), free(want), free(got);
	}
	free(codes), free(row), free(scale);
}
END_TEST

/* Grouped scales (Ternary-Bonsai's, issue 61): bn_cuda_t2g_gemv bit-identical to the scalar
 * t2g_gemm, with groups of 128, 256 and 384 weights (a chunk's two blocks in one group, in
 * two, or a group across chunks), rows of 9,216 weights (72 blocks: a full round of 64 and a
 * partial one, and with 384 a group that a round boundary cuts), and batches below, at and
 * past the kernel's eight tokens a pass; bn_cuda_t2_gemm sends a grouped matrix there
 * whatever the batch. */
START_TEST(grouped_ternary_matches_scalar)
{
	const uint32_t groups[] = { 128, 256, 384 }, n_in = 9216, n_out = 37;
	uint32_t row_bytes = (uint32_t)bn_t2_row_bytes(n_in);
	uint8_t *codes = malloc((size_t)n_out * row_bytes), *row = malloc(n_in);
	for (uint32_t o = 0; o < n_out; o++) {
		for (uint32_t k = 0; k < n_in; k++)
			row[k] = (uint8_t)(rnd() % 3);
		bn_t2_pack(row, n_in, codes + (size_t)o * row_bytes);
	}
	uint8_t *dcodes = ctu_dev_copy(codes, (size_t)n_out * row_bytes);
	for (unsigned gi = 0; gi < 3; gi++) {
		uint32_t group = groups[gi], per_row = n_in / group;
		float *gscale = malloc((size_t)n_out * per_row * 4);
		for (uint32_t i = 0; i < n_out * per_row; i++)
			gscale[i] = 0.01f + (float)(rnd() % 1000) / 997.0f;
		struct bn_t2_matrix cw = { .codes = codes, .gscale = gscale, .group = group,
					   .n_in = n_in, .n_out = n_out, .row_bytes = row_bytes };
		struct bn_cuda_t2 gw = { .codes = dcodes, .n_in = n_in, .n_out = n_out,
					 .row_bytes = row_bytes, .group = group,
					 .gscale = ctu_dev_copy(gscale, (size_t)n_out * per_row * 4) };
		const uint32_t toks[] = { 1, 8, 9, 40 };
		for (unsigned c = 0; c < 4; c++) {
			uint32_t n = toks[c];
			float *x = malloc((size_t)n * n_in * 4), *want = malloc((size_t)n * n_out * 4);
			float *got = malloc((size_t)n * n_out * 4);
			for (size_t i = 0; i < (size_t)n * n_in; i++)
				x[i] = rndf();
			struct q8_pair p;
			quantize_both(x, n, n_in, &p);
			p.cpu.bsum = malloc((size_t)n * bn_q8_blocks(p.cpu.k_pad) * 4);
			bn_q8_block_sums(&p.cpu, n);
			bn_kernels_scalar.t2g_gemm(&cw, 0, n_out, &p.cpu, n, want, n_out);
			float *dy = ctu_dev_copy(NULL, (size_t)n * n_out * 4);
			ck_assert_int_eq(bn_cuda_t2_gemm(&gw, &p.gpu, n, dy, n_out, 0), 0);
			ctu_host_copy(got, dy, (size_t)n * n_out * 4);
			ck_assert_msg(memcmp(got, want, (size_t)n * n_out * 4) == 0,
				      "group %u, %u tokens", group, n);
			cudaFree(dy);
			free(p.cpu.bsum);
			q8_pair_free(&p);
			free(x), free(want), free(got);
		}
		cudaFree((void *)gw.gscale);
		free(gscale);
	}
	cudaFree(dcodes);
	free(codes), free(row);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Float products                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* Rows of n_in floats (ld 16-aligned, zero padded) for the kernels, from x [n][n_in]. */
static float *padded_rows(const float *x, uint32_t n, uint32_t n_in, uint32_t ld)
{
	float *p = calloc((size_t)n * ld, 4);
	for (uint32_t t = 0; t < n; t++)
		memcpy(p + (size_t)t * ld, x + (size_t)t * n_in, n_in * 4);
	return p;
}

static void check_f_gemm(enum bn_cuda_ftype type, double tol)
{
	uint32_t n_in = 300, n_out = 130, ld = 304, n = 40;
	float *w = malloc((size_t)n_out * n_in * 4), *x = malloc((size_t)n * n_in * 4);
	for (size_t i = 0; i < (size_t)n_out * n_in; i++)
		w[i] = rndf();
	for (size_t i = 0; i < (size_t)n * n_in; i++)
		x[i] = rndf();
	uint32_t rows = (n_out + 63) / 64 * 64;
	void *wdev;
	if (type == BN_CUDA_F16) {
		uint16_t *h = calloc((size_t)rows * ld, 2);
		for (uint32_t o = 0; o < n_out; o++)
			for (uint32_t k = 0; k < n_in; k++) {
				h[(size_t)o * ld + k] = bn_float_to_half(w[(size_t)o * n_in + k]);
				w[(size_t)o * n_in + k] = bn_half_to_float(h[(size_t)o * ld + k]);
			}
		for (size_t i = 0; i < (size_t)n * n_in; i++)
			x[i] = bn_half_to_float(bn_float_to_half(x[i])); /* what the kernel multiplies */
		wdev = ctu_dev_copy(h, (size_t)rows * ld * 2);
		free(h);
	} else {
		float *p = padded_rows(w, n_out, n_in, ld);
		wdev = ctu_dev_copy(p, (size_t)n_out * ld * 4);
		free(p);
	}
	struct bn_cuda_fmat m = { wdev, type, n_in, n_out, ld };
	float *xp = padded_rows(x, n, n_in, ld), *dx = ctu_dev_copy(xp, (size_t)n * ld * 4);
	uint16_t *xh = ctu_dev_copy(NULL, (size_t)64 * ld * 2);
	float *dy = ctu_dev_copy(NULL, (size_t)n * n_out * 4), *got = malloc((size_t)n * n_out * 4);
	float *alone = malloc(n_out * 4);
	ck_assert_int_eq(bn_cuda_f_gemm(&m, dx, ld, n, dy, n_out, xh, 0), 0);
	ctu_host_copy(got, dy, (size_t)n * n_out * 4);
	for (uint32_t t = 0; t < n; t++)
		for (uint32_t o = 0; o < n_out; o++) {
			double ref = 0, norm = 0;
			for (uint32_t k = 0; k < n_in; k++) {
				double a = w[(size_t)o * n_in + k], b = x[(size_t)t * n_in + k];
				ref += a * b;
				norm += fabs(a * b);
			}
			ck_assert_msg(fabs(got[(size_t)t * n_out + o] - ref) <= tol * norm,
				      "type %d token %u row %u: %g vs %g", type, t, o,
				      got[(size_t)t * n_out + o], ref);
		}
	/* token 7 alone: bit-identical to its row in the launch of 40 */
	ck_assert_int_eq(bn_cuda_f_gemm(&m, dx + (size_t)7 * ld, ld, 1, dy, n_out, xh, 0), 0);
	ctu_host_copy(alone, dy, n_out * 4);
	ck_assert_int_eq(memcmp(alone, got + (size_t)7 * n_out, n_out * 4), 0);
	cudaFree(wdev), cudaFree(dx), cudaFree(xh), cudaFree(dy);
	free(w), free(x), free(xp), free(got), free(alone);
}

START_TEST(f32_gemm_matches_reference)
{
	check_f_gemm(BN_CUDA_F32, 1e-5);
}
END_TEST

START_TEST(f16_gemm_matches_reference)
{
	check_f_gemm(BN_CUDA_F16, 1e-3);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Attention over a paged cache                                                                */
/* ------------------------------------------------------------------------------------------ */

START_TEST(attention_matches_scalar)
{
	uint32_t hd = 64, n_head = 8, n_kv = 2, kv_dim = n_kv * hd, bt = 16, n_blocks = 40;
	uint32_t n_tok = 3, lens[3] = { 1, 77, 300 };
	size_t cache = (size_t)n_blocks * bt * kv_dim;
	float *K = malloc(cache * 4), *V = malloc(cache * 4);
	for (size_t i = 0; i < cache; i++)
		K[i] = rndf(), V[i] = rndf();
	uint32_t tables[3][20];
	for (uint32_t t = 0; t < n_tok; t++) /* blocks in a scrambled order */
		for (uint32_t b = 0; b < 20; b++)
			tables[t][b] = (b * 7 + t * 3) % n_blocks;
	uint32_t off[3] = { 0, 20, 40 };
	float *q = malloc((size_t)n_tok * n_head * hd * 4), *want = malloc((size_t)n_tok * n_head * hd * 4);
	for (size_t i = 0; i < (size_t)n_tok * n_head * hd; i++)
		q[i] = rndf();
	float *s = malloc(300 * 4), scale = 1.0f / sqrtf((float)hd);
	for (uint32_t t = 0; t < n_tok; t++)
		for (uint32_t h = 0; h < n_head; h++) {
			uint32_t kvh = h / (n_head / n_kv);
			struct bn_kv_view v = { .K = K + kvh * hd, .V = V + kvh * hd, .blocks = tables[t],
						.block_tokens = bt, .ld = kv_dim,
						.block_stride = (size_t)bt * kv_dim };
			size_t at = ((size_t)t * n_head + h) * hd;
			bn_kernels_scalar.attend(q + at, &v, lens[t], hd, scale, s, want + at);
		}
	struct bn_cuda_kv_layer kv = { ctu_dev_copy(K, cache * 4), ctu_dev_copy(V, cache * 4), kv_dim, bt };
	struct bn_cuda_attn a = {
		.q = ctu_dev_copy(q, (size_t)n_tok * n_head * hd * 4), .ldq = n_head * hd,
		.out = ctu_dev_copy(NULL, (size_t)n_tok * n_head * hd * 4), .ldo = n_head * hd,
		.len = ctu_dev_copy(lens, sizeof(lens)), .table_off = ctu_dev_copy(off, sizeof(off)),
		.tables = ctu_dev_copy(tables, sizeof(tables)), .n_head = n_head, .n_head_kv = n_kv,
		.head_dim = hd, .scale = scale,
	};
	ck_assert_int_eq(bn_cuda_attend(&kv, &a, n_tok, 0), 0);
	float *got = malloc((size_t)n_tok * n_head * hd * 4);
	ctu_host_copy(got, a.out, (size_t)n_tok * n_head * hd * 4);
	for (size_t i = 0; i < (size_t)n_tok * n_head * hd; i++)
		ck_assert_msg(fabsf(got[i] - want[i]) <= 1e-5f * (1.0f + fabsf(want[i])),
			      "element %zu: %g vs %g", i, got[i], want[i]);
	free(K), free(V), free(q), free(want), free(s), free(got);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The sampler                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* Structured output's masks for the sampler test: row r's allowed tokens (NULL: all). Rows
 * 9..11 sample, greedy and with log-probabilities from one allowed token, a sparse handful and
 * nearly all; row 1 (greedy, penalized) and row 4 (top_p) from half. */
static const uint64_t *test_mask(uint32_t r, uint32_t n_vocab, uint64_t *buf)
{
	uint32_t words = (n_vocab + 63) / 64;
	if (r != 1 && r != 4 && r < 9)
		return NULL;
	memset(buf, 0, words * 8);
	for (uint32_t i = 0; i < n_vocab; i++) {
		int on = r == 9	    ? i == 4321
			 : r == 10  ? i % 97 == 3
			 : r == 11  ? i % 50 != 0
				    : (i * 2654435761u) >> 31;
		if (on)
			buf[i / 64] |= 1ull << (i % 64);
	}
	return buf;
}

START_TEST(sampler_matches_cpu)
{
	uint32_t n_vocab = 5000, n_rows = 12;
	struct bn_sampling params[12];
	for (uint32_t r = 0; r < n_rows; r++)
		params[r] = (struct bn_sampling){ .temperature = r < 2 ? 0.0f : 0.3f + 0.2f * (float)r,
						  .seed = 1000 + r, .want_logprobs = r % 2,
						  .n_logprobs = r % 2 ? 5 : 0 };
	params[3].top_k = 40;
	params[4].top_p = 0.9f;
	params[5].min_p = 0.05f;
	params[6].top_k = 100, params[6].top_p = 0.5f, params[6].min_p = 0.01f;
	params[7].repetition_penalty = 1.3f, params[7].frequency_penalty = 0.4f;
	params[8].presence_penalty = 0.7f;
	params[1].repetition_penalty = 1.5f;
	params[9].temperature = 0; /* one allowed token, with its log-probability: 0 */
	uint32_t prompt[6] = { 5, 9, 9, 100, 4999, 7 }, output[5] = { 9, 12, 12, 300, 5 };
	uint32_t words = (n_vocab + 63) / 64, row_mask[12], n_masks = 0;
	uint64_t *masks = calloc((size_t)n_rows * words, 8), *mask_of[12];
	for (uint32_t r = 0; r < n_rows; r++) {
		mask_of[r] = test_mask(r, n_vocab, masks + (size_t)n_masks * words) ? masks + (size_t)n_masks * words
										   : NULL;
		row_mask[r] = mask_of[r] ? n_masks++ : BN_CUDA_NO_MASK;
	}
	float *logits = malloc((size_t)n_rows * n_vocab * 4), *cpu = malloc(n_vocab * 4);
	for (size_t i = 0; i < (size_t)n_rows * n_vocab; i++)
		logits[i] = 4.0f * rndf();
	float *dl = ctu_dev_copy(logits, (size_t)n_rows * n_vocab * 4);
	struct bn_sampler smp;
	bn_sampler_init(&smp);
	struct bn_cuda_penalty pen[64];
	struct bn_penalty list[16];
	struct bn_cuda_sample_row rank[12];
	uint32_t n_pen = 0, n_rank = 0;
	for (uint32_t r = 0; r < n_rows; r++) {
		struct bn_sample_ctx ctx = { &params[r], prompt, 6, output, 5, NULL, NULL };
		uint32_t n = bn_sample_penalties(&smp, &ctx, n_vocab, list);
		for (uint32_t i = 0; i < n; i++)
			pen[n_pen++] = (struct bn_cuda_penalty){ r, list[i].token, list[i].repeat, list[i].subtract };
		if (params[r].temperature != 0 || params[r].want_logprobs)
			rank[n_rank++] = (struct bn_cuda_sample_row){
				.logit_row = r, .temperature = params[r].temperature, .top_k = params[r].top_k,
				.top_p = params[r].top_p, .min_p = params[r].min_p,
				.u = bn_sample_uniform(params[r].seed, 5), .n_top = params[r].n_logprobs,
				.want_logprob = params[r].want_logprobs, .mask = row_mask[r] };
	}
	const uint64_t *dmasks = ctu_dev_copy(masks, (size_t)n_masks * words * 8);
	uint32_t *dtok = ctu_dev_copy(NULL, n_rows * 4), tok[12];
	struct bn_cuda_sample_result *dres = ctu_dev_copy(NULL, n_rank * sizeof(*dres));
	struct bn_cuda_sample_result *res = malloc(n_rank * sizeof(*res));
	size_t scratch_bytes = bn_cuda_sample_scratch_bytes(n_vocab, n_rank);
	void *scratch = ctu_dev_copy(NULL, scratch_bytes);
	ck_assert_int_eq(bn_cuda_penalize(dl, n_vocab, ctu_dev_copy(pen, n_pen * sizeof(*pen)), n_pen, 0),
			 0);
	ck_assert_int_eq(bn_cuda_argmax(dl, n_vocab, n_vocab, n_rows, dmasks,
					ctu_dev_copy(row_mask, sizeof(row_mask)), dtok, 0), 0);
	ck_assert_int_eq(bn_cuda_sample(dl, n_vocab, n_vocab, ctu_dev_copy(rank, n_rank * sizeof(*rank)),
					n_rank, dmasks, scratch, scratch_bytes, dres, 0), 0);
	ctu_host_copy(tok, dtok, n_rows * 4);
	ctu_host_copy(res, dres, n_rank * sizeof(*res));
	for (uint32_t r = 0, k = 0; r < n_rows; r++) {
		struct bn_sample_ctx ctx = { &params[r], prompt, 6, output, 5, mask_of[r], NULL };
		struct bn_token_logprob top[8];
		struct bn_sample_out want = { .top = top };
		memcpy(cpu, logits + (size_t)r * n_vocab, n_vocab * 4);
		ck_assert_int_eq(bn_sample(&smp, &ctx, cpu, n_vocab, &want), 0);
		int ranked = params[r].temperature != 0 || params[r].want_logprobs;
		uint32_t got = ranked ? res[k].token : tok[r];
		ck_assert_msg(got == want.token, "row %u: token %u, cpu %u", r, got, want.token);
		if (ranked && params[r].want_logprobs) {
			ck_assert_float_eq_tol(res[k].logprob, want.logprob, 1e-4);
			ck_assert_uint_eq(res[k].n_top, want.n_top);
			for (uint32_t i = 0; i < want.n_top; i++) {
				ck_assert_uint_eq(res[k].top[i].token, top[i].token);
				ck_assert_float_eq_tol(res[k].top[i].logprob, top[i].logprob, 1e-4);
			}
		}
		k += ranked;
	}
	bn_sampler_free(&smp);
	free(logits), free(cpu), free(res), free(masks);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The elastic KV arena                                                                        */
/* ------------------------------------------------------------------------------------------ */

#define ARENA_LAYERS 3
#define ARENA_DIM 128
#define ARENA_BT 16
#define ARENA_ROW (ARENA_BT * ARENA_DIM) /* floats of one block in one layer */

/* What block b's rows hold in layer li of K (kv 0) or V (kv 1), for the arena's checks. */
static float arena_value(uint32_t b, uint32_t li, uint32_t kv, uint32_t i)
{
	return (float)(b * 64 + li * 2 + kv) + (float)i / ARENA_ROW;
}

static float *arena_rows(const struct cuda_kv *kv, uint32_t li, uint32_t which, uint32_t slot)
{
	float *base = which ? kv->v : kv->k;
	return base + ((size_t)li * kv->n_slots + slot) * ARENA_ROW;
}

static void arena_write(struct cuda_kv *kv, uint32_t b)
{
	static float row[ARENA_ROW];
	uint32_t slot;
	ck_assert_int_eq(cuda_kv_slot(kv, b, &slot), 0);
	for (uint32_t li = 0; li < ARENA_LAYERS; li++)
		for (uint32_t which = 0; which < 2; which++) {
			for (uint32_t i = 0; i < ARENA_ROW; i++)
				row[i] = arena_value(b, li, which, i);
			ck_assert_int_eq(cudaMemcpy(arena_rows(kv, li, which, slot), row, sizeof(row),
						    cudaMemcpyHostToDevice), cudaSuccess);
		}
}

/* Every block held reads back what arena_write put in it, the slots in use are [0, live)
 * one to one, and the device holds exactly the groups over them. */
static void arena_check(const struct cuda_kv *kv, const uint8_t *held)
{
	static float row[ARENA_ROW];
	uint32_t n_held = 0;
	for (uint32_t b = 0; b < kv->n_blocks; b++) {
		if (!held[b]) {
			ck_assert_uint_eq(kv->slot_of[b], CUDA_KV_NO_SLOT);
			continue;
		}
		uint32_t slot = kv->slot_of[b];
		ck_assert_uint_lt(slot, kv->live);
		ck_assert_uint_eq(kv->block_at[slot], b);
		n_held++;
		for (uint32_t li = 0; li < ARENA_LAYERS; li++)
			for (uint32_t which = 0; which < 2; which++) {
				ck_assert_int_eq(cudaMemcpy(row, arena_rows(kv, li, which, slot), sizeof(row),
							    cudaMemcpyDeviceToHost), cudaSuccess);
				for (uint32_t i = 0; i < ARENA_ROW; i++)
					ck_assert_msg(row[i] == arena_value(b, li, which, i),
						      "block %u (slot %u) layer %u %c row %u: %g", b, slot,
						      li, which ? 'V' : 'K', i, row[i]);
			}
	}
	ck_assert_uint_eq(n_held, kv->live);
	uint32_t groups = (kv->live + kv->group_slots - 1) / kv->group_slots;
	ck_assert_uint_eq(kv->groups_mapped, groups);
}

static size_t device_free(void)
{
	size_t free_b = 0, total = 0;
	ck_assert_int_eq(cudaMemGetInfo(&free_b, &total), cudaSuccess);
	return free_b;
}

/* The device's free memory with the arena's groups mapped: exact on the harness; on a GPU
 * the driver's own bookkeeping moves it by a granule or so. */
static void arena_check_free(const struct cuda_kv *kv, const struct cuda_vmm *vmm, size_t before)
{
	uint64_t mapped = (uint64_t)kv->groups_mapped * cuda_kv_group_bytes(vmm, &kv->shape);
	ck_assert_uint_eq(cuda_kv_device_bytes(kv), mapped);
	size_t now = device_free();
#ifdef BN_CUDA_HOST
	ck_assert_uint_eq(now + mapped, before);
#else
	ck_assert_msg(now + mapped + 2 * vmm->granule >= before && now + mapped <= before + 2 * vmm->granule,
		      "free %zu + mapped %llu, before %zu", now, (unsigned long long)mapped, before);
#endif
}

/* The elastic KV arena (cuda_kv.h): blocks get slots in the order they are first named,
 * memory is mapped a group at a time; a released block's slot takes the last slot's block
 * (copied on the device) and the groups above the slots in use go back. Through releases
 * one at a time, in runs, of blocks that never had a slot, and new blocks after them, every
 * block held reads back its own rows and the device's free memory follows the groups
 * mapped; at the end nothing is mapped. */
START_TEST(elastic_kv_arena)
{
	struct cuda_vmm vmm;
	if (cuda_vmm_probe(&vmm) != 0) {
		printf("SKIP elastic_kv_arena: the device has no virtual memory management\n");
		return;
	}
	struct cuda_kv_shape shape = { ARENA_LAYERS, ARENA_DIM, ARENA_BT };
	uint32_t g = cuda_kv_group_slots(&vmm, &shape);
	ck_assert_uint_gt(g, 0);
	uint32_t n = 3 * g + 3; /* three groups and a part of a fourth */
	cudaStream_t stream;
	ck_assert_int_eq(cudaStreamCreate(&stream), cudaSuccess);
	size_t before = device_free();
	struct cuda_kv kv;
	ck_assert_int_eq(cuda_kv_elastic(&kv, &vmm, &shape, n, stream), 0);
	ck_assert_uint_eq(kv.n_slots % g, 0);
	arena_check_free(&kv, &vmm, before);
	uint8_t *held = calloc(n, 1);
	for (uint32_t i = 0; i < n; i++) { /* named out of order: slots follow first use */
		uint32_t b = (uint32_t)(((uint64_t)i * 7) % n), slot;
		if (held[b])
			continue;
		ck_assert_int_eq(cuda_kv_slot(&kv, b, &slot), 0);
		ck_assert_uint_eq(slot, kv.live - 1);
		arena_write(&kv, b);
		held[b] = 1;
	}
	arena_check(&kv, held);
	arena_check_free(&kv, &vmm, before);
	for (uint32_t b = 0; b < n; b += 3) { /* one at a time: holes all over */
		ck_assert_int_eq(cuda_kv_give_back(&kv, b, 1), 0);
		held[b] = 0;
	}
	ck_assert_uint_gt(kv.moves, 0);
	arena_check(&kv, held);
	arena_check_free(&kv, &vmm, before);
	ck_assert_int_eq(cuda_kv_give_back(&kv, g, g + 1), 0); /* a run, some never held */
	memset(held + g, 0, g + 1);
	arena_check(&kv, held);
	arena_check_free(&kv, &vmm, before);
	for (uint32_t b = 0; b < n; b += 6) { /* some come back: fresh slots at the end */
		arena_write(&kv, b);
		held[b] = 1;
	}
	arena_check(&kv, held);
	arena_check_free(&kv, &vmm, before);
	ck_assert_int_eq(cuda_kv_give_back(&kv, 0, n), 0);
	memset(held, 0, n);
	arena_check(&kv, held);
	ck_assert_uint_eq(kv.groups_mapped, 0);
	arena_check_free(&kv, &vmm, before);
	ck_assert_int_eq(cuda_kv_give_back(&kv, n - 1, 2), -EINVAL);
	uint32_t slot;
	ck_assert_int_eq(cuda_kv_slot(&kv, n, &slot), -EINVAL);
	cuda_kv_free(&kv);
	arena_check_free(&kv, &vmm, before); /* kv is empty: nothing mapped, nothing reserved */
	free(held);
	cudaStreamDestroy(stream);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The backend                                                                                 */
/* ------------------------------------------------------------------------------------------ */

#define MAX_SEQS 33
#define BLOCK_TOKENS 16
#define SEQ_BLOCKS 16 /* 256 positions per sequence */

struct engine {
	const struct bn_backend_ops *ops;
	void *self;
	struct bn_model_desc desc;
	uint32_t tables[MAX_SEQS][SEQ_BLOCKS];
	uint32_t len[MAX_SEQS];
};

static void engine_open_kernels(struct engine *e, const struct bn_backend_ops *ops,
				const char *model, const char *kernels)
{
	struct bn_backend_options opt = { .model_path = model, .max_seqs = MAX_SEQS, .n_threads = 2,
					  .cuda_kernels = kernels };
	e->ops = ops;
	ck_assert_int_eq(ops->open(&opt, &e->desc, &e->self), 0);
	ck_assert_int_eq(ops->kv_init(e->self, MAX_SEQS * SEQ_BLOCKS, BLOCK_TOKENS), 0);
	for (uint32_t s = 0; s < MAX_SEQS; s++) {
		for (uint32_t b = 0; b < SEQ_BLOCKS; b++) /* interleaved: neighbours share no block */
			e->tables[s][b] = b * MAX_SEQS + s;
		e->len[s] = 0;
		ck_assert_int_eq(ops->seq_open(e->self, s), 0);
	}
}

/* The first kernels, named: this suite tests them (test_cuda_fast the variants), and the
 * default is `fast` (the cpu backend ignores the name). */
static void engine_open(struct engine *e, const struct bn_backend_ops *ops, const char *model)
{
	engine_open_kernels(e, ops, model, "base");
}

/* One step: row r feeds prompts[r][0..lens[r]) to sequence seqs[r] and samples. */
static void engine_step(struct engine *e, uint32_t n, const uint32_t *seqs, uint32_t *const *prompts,
			const uint32_t *lens, const struct bn_sampling *p, struct bn_sample_out *out,
			uint32_t **history, uint32_t *n_hist)
{
	uint32_t width = 0;
	for (uint32_t r = 0; r < n; r++)
		width = lens[r] > width ? lens[r] : width;
	uint32_t *tokens = calloc((size_t)n * width, 4), pos[MAX_SEQS];
	const uint32_t *blocks[MAX_SEQS];
	struct bn_sample_ctx ctx[MAX_SEQS];
	const struct bn_sample_ctx *sp[MAX_SEQS];
	for (uint32_t r = 0; r < n; r++) {
		memcpy(tokens + (size_t)r * width, prompts[r], lens[r] * 4);
		pos[r] = e->len[seqs[r]];
		blocks[r] = e->tables[seqs[r]];
		ctx[r] = (struct bn_sample_ctx){ &p[r], history[r], n_hist[r], NULL, 0, NULL, NULL };
		sp[r] = &ctx[r];
	}
	struct bn_batch b = { .n_rows = n, .width = width, .tokens = tokens, .lens = lens, .pos = pos,
			      .seq = seqs, .blocks = blocks, .sample = sp };
	ck_assert_int_eq(e->ops->step(e->self, &b, out), 0);
	for (uint32_t r = 0; r < n; r++)
		e->len[seqs[r]] += lens[r];
	free(tokens);
}

/* Greedy continuation of `prompt` for n_gen tokens, rows of a batch of n sequences (all with
 * the same parameters): tokens[r][i], top-8 logprobs of the first row in lp. */
static void generate(struct engine *e, uint32_t n, uint32_t *const *prompts, const uint32_t *plen,
		     uint32_t n_gen, uint32_t tokens[][64], struct bn_token_logprob lp[][8])
{
	uint32_t seqs[MAX_SEQS], lens[MAX_SEQS], *cur[MAX_SEQS], next[MAX_SEQS], zero[MAX_SEQS] = { 0 };
	struct bn_sampling p[MAX_SEQS];
	struct bn_sample_out out[MAX_SEQS];
	struct bn_token_logprob top[MAX_SEQS][8];
	for (uint32_t r = 0; r < n; r++) {
		seqs[r] = r;
		lens[r] = plen[r];
		cur[r] = prompts[r];
		p[r] = (struct bn_sampling){ .want_logprobs = 1, .n_logprobs = 8 };
		ck_assert_int_eq(e->ops->seq_open(e->self, r), 0);
		e->len[r] = 0;
	}
	for (uint32_t i = 0; i < n_gen; i++) {
		for (uint32_t r = 0; r < n; r++)
			out[r].top = top[r];
		engine_step(e, n, seqs, cur, lens, p, out, cur, zero);
		for (uint32_t r = 0; r < n; r++) {
			tokens[r][i] = next[r] = out[r].token;
			cur[r] = &next[r];
			lens[r] = 1;
		}
		if (lp)
			memcpy(lp[i], top[0], sizeof(top[0]));
	}
}

START_TEST(test_model_greedy_ids)
{
	const char *dir = getenv("BITNET_TEST_MODELS");
	if (!dir) {
		printf("SKIP: test model (BITNET_TEST_MODELS is not set)\n");
		return;
	}
	char path[512];
	snprintf(path, sizeof(path), "%s/stories260K.gguf", dir);
	struct engine e;
	engine_open(&e, &bn_backend_cuda, path);
	/* BOS, then each greedy token fed back, one step each */
	uint32_t got[TU_STORIES_KNOWN], seq = 0, cur = 1, zero = 0;
	struct bn_sampling p = { 0 };
	for (uint32_t n = 0; n < STORIES_IDS; n++) {
		struct bn_sample_out out = { 0 };
		uint32_t *curp = &cur, one = 1;
		engine_step(&e, 1, &seq, &curp, &one, &p, &out, &curp, &zero);
		got[n] = cur = out.token;
	}
	for (uint32_t i = 0; i < STORIES_IDS; i++)
		ck_assert_msg(got[i] == tu_stories_known[i], "id %u: %u, want %u", i, got[i],
			      tu_stories_known[i]);
	e.ops->close(e.self);
}
END_TEST

static uint32_t prompt_store[MAX_SEQS][64];

static void make_prompts(uint32_t n, uint32_t vocab, uint32_t **prompts, uint32_t *lens)
{
	for (uint32_t r = 0; r < n; r++) {
		lens[r] = 1 + (r * 13) % PROMPT_SPREAD;
		for (uint32_t i = 0; i < lens[r]; i++)
			prompt_store[r][i] = 3 + rnd() % (vocab - 3);
		prompts[r] = prompt_store[r];
	}
}

START_TEST(tiny_matches_cpu_backend)
{
	struct engine g, c;
	engine_open(&g, &bn_backend_cuda, tu_default_model());
	engine_open(&c, &bn_backend_cpu, tu_default_model());
	uint32_t *prompts[4], lens[4];
	make_prompts(4, g.desc.vocab_size, prompts, lens);
	static uint32_t tg[MAX_SEQS][64], tc[MAX_SEQS][64];
	static struct bn_token_logprob lg[64][8], lc[64][8];
	generate(&g, 4, prompts, lens, TINY_STEPS, tg, lg);
	generate(&c, 4, prompts, lens, TINY_STEPS, tc, lc);
	for (uint32_t i = 0; i < TINY_STEPS; i++) {
		ck_assert_msg(tg[0][i] == tc[0][i], "token %u: %u vs cpu %u", i, tg[0][i], tc[0][i]);
		for (uint32_t j = 0; j < 8; j++)
			ck_assert_msg(fabsf(lg[i][j].logprob - lc[i][j].logprob) <= 2e-2f,
				      "step %u alternative %u: %g vs cpu %g", i, j, lg[i][j].logprob,
				      lc[i][j].logprob);
	}
	g.ops->close(g.self);
	c.ops->close(c.self);
}
END_TEST

#define CONTINUED_STEPS 8

/* Steps of sequences seqs[0..n) from tokens cur, each row's top-8 into lp[step][row]. */
static void continue_rows(struct engine *e, uint32_t n, const uint32_t *seqs, uint32_t *cur,
			  uint32_t steps, uint32_t tokens[][2], struct bn_token_logprob lp[][2][8])
{
	struct bn_sampling p[2] = { { .want_logprobs = 1, .n_logprobs = 8 },
				    { .want_logprobs = 1, .n_logprobs = 8 } };
	uint32_t lens[2] = { 1, 1 }, zero[2] = { 0 }, *rows[2] = { &cur[0], &cur[1] };
	for (uint32_t i = 0; i < steps; i++) {
		struct bn_sample_out out[2] = { { .top = lp[i][0] }, { .top = lp[i][1] } };
		engine_step(e, n, seqs, rows, lens, p, out, rows, zero);
		for (uint32_t r = 0; r < n; r++)
			tokens[i][r] = cur[r] = out[r].token;
	}
}

/* The cuda backend on an elastic arena (a pool that lends KV between models:
 * kv_init_elastic) gives the fixed arena's bits: four sequences decoded together, then 0 and
 * 2 end and their blocks' memory goes back (kv_release: blocks of 1 and 3 move into the
 * freed slots, on the device), and 1 and 3 go on. Every token and top-8 log-probability is
 * the fixed arena's, bit for bit. */
START_TEST(elastic_kv_matches_fixed)
{
	struct engine f, el;
	engine_open_kernels(&f, &bn_backend_cuda, tu_default_model(), "fast");
	engine_open_kernels(&el, &bn_backend_cuda, tu_default_model(), "fast");
	ck_assert_int_eq(f.ops->kv_release(f.self, 0, 0), -EOPNOTSUPP);
	if (!el.desc.kv_map_granule) {
		printf("SKIP elastic_kv_matches_fixed: the device has no virtual memory management\n");
		f.ops->close(f.self);
		el.ops->close(el.self);
		return;
	}
	ck_assert_uint_eq(el.desc.kv_release_tokens, 1);
	ck_assert_int_eq(el.ops->kv_init_elastic(el.self, MAX_SEQS * SEQ_BLOCKS, BLOCK_TOKENS), 0);
	ck_assert_int_eq(el.ops->kv_release(el.self, 0, 0), 0);
	uint32_t *prompts[4], lens[4];
	make_prompts(4, f.desc.vocab_size, prompts, lens);
	static uint32_t tf[MAX_SEQS][64], te[MAX_SEQS][64];
	static struct bn_token_logprob lf[64][8], le[64][8];
	generate(&f, 4, prompts, lens, TINY_STEPS, tf, lf);
	generate(&el, 4, prompts, lens, TINY_STEPS, te, le);
	ck_assert_msg(!memcmp(tf, te, sizeof(tf)) && !memcmp(lf, le, sizeof(lf)),
		      "the elastic arena's tokens or log-probabilities differ from the fixed one's");
	for (uint32_t s = 0; s < 4; s += 2)
		for (uint32_t b = 0; b < SEQ_BLOCKS; b++)
			ck_assert_int_eq(el.ops->kv_release(el.self, el.tables[s][b], 1), 0);
	uint32_t seqs[2] = { 1, 3 }, cf[2] = { tf[1][TINY_STEPS - 1], tf[3][TINY_STEPS - 1] };
	uint32_t ce[2] = { cf[0], cf[1] };
	static uint32_t nf[CONTINUED_STEPS][2], ne[CONTINUED_STEPS][2];
	static struct bn_token_logprob pf[CONTINUED_STEPS][2][8], pe[CONTINUED_STEPS][2][8];
	continue_rows(&f, 2, seqs, cf, CONTINUED_STEPS, nf, pf);
	continue_rows(&el, 2, seqs, ce, CONTINUED_STEPS, ne, pe);
	ck_assert_msg(!memcmp(nf, ne, sizeof(nf)) && !memcmp(pf, pe, sizeof(pf)),
		      "after a release moved blocks, the elastic arena's outputs differ");
	f.ops->close(f.self);
	el.ops->close(el.self);
}
END_TEST

/* The families of issue 57 (the model tool's -test presets, one layer): Falcon3's head size
 * 256 with 2 heads to 1 KV head, Llama3-8B-1.58's 4 to 1 (both llama, I2_S, F16 untied head,
 * adjacent RoPE pairs), bitnet_b1_58-3B's F16 file (packed to T2 at load, head size 100,
 * FFN 320): the cuda backend's greedy tokens equal the cpu backend's, and its top-8
 * log-probabilities are within the F16 head's bound (2e-2, as for the tiny preset). */
static const char *const family_presets[] = { "falcon3-test", "llama3-test", "bitnet-3b-test" };

START_TEST(families_match_cpu_backend)
{
	char dir[] = "/tmp/bn-cuda-families-XXXXXX", path[256], cmd[512];
	tu_models_dir(dir);
	snprintf(path, sizeof(path), "%s/%s.gguf", dir, family_presets[_i]);
	snprintf(cmd, sizeof(cmd), "%s write --preset %s --layers 1 --out %s >/dev/null",
		 getenv("BITNET_MODEL_TOOL"), family_presets[_i], path);
	ck_assert_int_eq(system(cmd), 0);
	struct engine g, c;
	engine_open(&g, &bn_backend_cuda, path);
	engine_open(&c, &bn_backend_cpu, path);
	uint32_t prompt[6] = { 300, 401, 502, 603, 704, 305 }, *prompts[1] = { prompt }, lens[1] = { 6 };
	static uint32_t tg[MAX_SEQS][64], tc[MAX_SEQS][64];
	static struct bn_token_logprob lg[64][8], lc[64][8];
	generate(&g, 1, prompts, lens, FAMILY_STEPS, tg, lg);
	generate(&c, 1, prompts, lens, FAMILY_STEPS, tc, lc);
	for (uint32_t i = 0; i < FAMILY_STEPS; i++) {
		ck_assert_msg(tg[0][i] == tc[0][i], "%s token %u: %u vs cpu %u", family_presets[_i], i,
			      tg[0][i], tc[0][i]);
		for (uint32_t j = 0; j < 8; j++)
			ck_assert_msg(fabsf(lg[i][j].logprob - lc[i][j].logprob) <= 2e-2f,
				      "%s step %u alternative %u: %g vs cpu %g", family_presets[_i], i,
				      j, lg[i][j].logprob, lc[i][j].logprob);
	}
	g.ops->close(g.self);
	c.ops->close(c.self);
	tu_remove_dir(dir);
}
END_TEST

/* Issue 61's qwen3 and gemma3 families (the model tool's -test presets): BitNet-embedding
 * 0.6B's (qwen3: per-head q/k norms, seven per-projection input norms, I2_S), 270M's (gemma3:
 * the same norms, GELU, post-norms, embedding scale, head size 256 of one KV head),
 * Ternary-Bonsai's (qwen3, TQ2_0 with one scale per 256 weights: bn_cuda_t2g_gemv; Q4_0
 * embedding and untied head) and a gemma3 with sliding-window layers (window 5; of its 6
 * layers 0-4 local with their own RoPE base, 5 global): the cuda backend's greedy tokens are
 * the cpu backend's and its top-8 log-probabilities within the F16 head's bound (2e-2, as
 * above), over a prompt of 6 and FAMILY_STEPS tokens (past the window). `fast` asked for
 * runs base (cuda_norms.h): its description says base and its tokens and log-probabilities
 * are base's bits. */
static const struct {
	const char *preset;
	uint32_t layers;
} graph61_presets[] = { { "bitnet-embedding-0.6b-test", 1 }, { "bitnet-embedding-270m-test", 1 },
			{ "bonsai-test", 1 }, { "gemma3-swa-test", 6 } };

START_TEST(qwen3_gemma3_match_cpu_backend)
{
	char dir[] = "/tmp/bn-cuda-graph61-XXXXXX", path[256], cmd[512];
	const char *name = graph61_presets[_i].preset;
	tu_models_dir(dir);
	snprintf(path, sizeof(path), "%s/%s.gguf", dir, name);
	snprintf(cmd, sizeof(cmd), "%s write --preset %s --layers %u --out %s >/dev/null",
		 getenv("BITNET_MODEL_TOOL"), name, graph61_presets[_i].layers, path);
	ck_assert_int_eq(system(cmd), 0);
	struct engine g, c, v;
	engine_open(&g, &bn_backend_cuda, path);
	engine_open(&c, &bn_backend_cpu, path);
	engine_open_kernels(&v, &bn_backend_cuda, path, "fast");
	ck_assert_str_eq(v.desc.kernels, "base");
	uint32_t prompt[6] = { 300, 401, 502, 603, 704, 305 }, *prompts[1] = { prompt }, lens[1] = { 6 };
	static uint32_t tg[MAX_SEQS][64], tc[MAX_SEQS][64], tv[MAX_SEQS][64];
	static struct bn_token_logprob lg[64][8], lc[64][8], lv[64][8];
	generate(&g, 1, prompts, lens, FAMILY_STEPS, tg, lg);
	generate(&c, 1, prompts, lens, FAMILY_STEPS, tc, lc);
	/* under AddressSanitizer `fast`'s fallback is base's code again: its description suffices */
	if (!TU_SANITIZED)
		generate(&v, 1, prompts, lens, FAMILY_STEPS, tv, lv);
	for (uint32_t i = 0; i < FAMILY_STEPS; i++) {
		ck_assert_msg(tg[0][i] == tc[0][i], "%s token %u: %u vs cpu %u", name, i, tg[0][i],
			      tc[0][i]);
		for (uint32_t j = 0; j < 8; j++)
			ck_assert_msg(fabsf(lg[i][j].logprob - lc[i][j].logprob) <= 2e-2f,
				      "%s step %u alternative %u: %g vs cpu %g", name, i, j,
				      lg[i][j].logprob, lc[i][j].logprob);
	}
	if (!TU_SANITIZED) {
		ck_assert_mem_eq(tv[0], tg[0], FAMILY_STEPS * sizeof(tg[0][0]));
		ck_assert_mem_eq(lv, lg, FAMILY_STEPS * sizeof(lg[0]));
	}
	g.ops->close(g.self);
	c.ops->close(c.self);
	v.ops->close(v.self);
	tu_remove_dir(dir);
}
END_TEST

START_TEST(batch_invariance_32)
{
	struct engine e;
	engine_open(&e, &bn_backend_cuda, tu_default_model());
	uint32_t *prompts[32], lens[32];
	make_prompts(32, e.desc.vocab_size, prompts, lens);
	static uint32_t alone[MAX_SEQS][64], batch[MAX_SEQS][64];
	static struct bn_token_logprob la[64][8], lb[64][8];
	generate(&e, 1, prompts, lens, INVARIANCE_STEPS, alone, la);
	generate(&e, 32, prompts, lens, INVARIANCE_STEPS, batch, lb);
	ck_assert_int_eq(memcmp(alone[0], batch[0], INVARIANCE_STEPS * 4), 0);
	ck_assert_int_eq(memcmp(la, lb, INVARIANCE_STEPS * sizeof(la[0])), 0);
	e.ops->close(e.self);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The daemon                                                                                  */
/* ------------------------------------------------------------------------------------------ */

#define DAEMON_PROMPTS 3
#define DAEMON_TOKENS 12 /* the constrained requests' unit (SERVE_TOKENS the others') */
/* A request's wait: on progress (tu_wait) or, for a call that waits for a total, scaled */
#define DAEMON_WAIT_NS 60000000000ll

static void start_cuda_daemon(struct tu_daemon *d)
{
	/* a small KV cache: on the harness the race check copies it at every attention launch */
	const char *args[] = { "--backend", "cuda", "--model", tu_default_model(), "--kv-memory", "4M",
			       "--cuda-kernels", "base", NULL };
	ck_assert_msg(ctu_start_cuda_daemon(d, args, 0) == 0, "%s --backend cuda did not start",
		      ctu_cuda_daemon());
}

/* Greedy tokens of each prompt, then one seeded sampled request with penalties, alone. */
static void daemon_run(struct bn_client *c, uint32_t prompts[][8], uint32_t greedy[][SERVE_TOKENS],
		       uint32_t *sampled, const struct bn_sampling_params *sp)
{
	for (uint32_t p = 0; p < DAEMON_PROMPTS; p++) {
		struct bn_request r = { .prompt = prompts[p], .n_prompt = 8, .max_tokens = SERVE_TOKENS,
					.flags = BN_REQ_IGNORE_EOS };
		ck_assert_int_eq(bn_generate(c, &r, greedy[p], SERVE_TOKENS, NULL,
					     tu_scaled_ns(DAEMON_WAIT_NS)), 0);
	}
	struct bn_request r = { .prompt = prompts[0], .n_prompt = 8, .max_tokens = SERVE_TOKENS,
				.flags = BN_REQ_IGNORE_EOS | BN_REQ_SEED, .sampling = sp };
	ck_assert_int_eq(bn_generate(c, &r, sampled, SERVE_TOKENS, NULL,
				     tu_scaled_ns(DAEMON_WAIT_NS)), 0);
}

START_TEST(daemon_serves_as_the_cpu_daemon)
{
	if (!ctu_have_cuda_daemon())
		return;
	struct tu_daemon gd, cd;
	start_cuda_daemon(&gd);
	ck_assert_int_eq(tu_daemon_start_cpu(&cd, tu_default_model(), NULL), 0);
	struct bn_client *g, *c;
	ck_assert_int_eq(bn_connect(gd.socket_path, 8, &g), 0);
	ck_assert_int_eq(bn_connect(cd.socket_path, 8, &c), 0);
	struct bn_model_info info;
	ck_assert_int_eq(bn_model_info(g, &info), 0);
	ck_assert_str_eq(info.backend, "cuda");
	uint32_t prompts[DAEMON_PROMPTS][8];
	for (uint32_t p = 0; p < DAEMON_PROMPTS; p++)
		for (uint32_t i = 0; i < 8; i++)
			prompts[p][i] = 3 + (p * 131 + i * 37) % (info.vocab_size - 3);
	/* hot enough that the draw decides: the tiny preset's random weights are very sure */
	struct bn_sampling_params sp = { .temperature = 4.0f, .top_k = 40, .top_p = 0.95f,
					 .repetition_penalty = 1.3f, .seed = 7 };
	uint32_t g_greedy[DAEMON_PROMPTS][SERVE_TOKENS], c_greedy[DAEMON_PROMPTS][SERVE_TOKENS];
	uint32_t alone[SERVE_TOKENS], together[SERVE_TOKENS], unused[SERVE_TOKENS];
	daemon_run(g, prompts, g_greedy, alone, &sp);
	daemon_run(c, prompts, c_greedy, unused, &sp);
	ck_assert_int_eq(memcmp(g_greedy, c_greedy, sizeof(g_greedy)), 0);
	/* the sampled request again, in flight with the greedy ones */
	struct bn_batch_item items[DAEMON_PROMPTS + 1];
	uint32_t batch_out[DAEMON_PROMPTS][SERVE_TOKENS];
	memset(items, 0, sizeof(items));
	for (uint32_t p = 0; p < DAEMON_PROMPTS; p++)
		items[p] = (struct bn_batch_item){
			.req = { .prompt = prompts[p], .n_prompt = 8, .max_tokens = SERVE_TOKENS,
				 .flags = BN_REQ_IGNORE_EOS },
			.out = batch_out[p], .out_cap = SERVE_TOKENS };
	items[DAEMON_PROMPTS] = (struct bn_batch_item){
		.req = { .prompt = prompts[0], .n_prompt = 8, .max_tokens = SERVE_TOKENS,
			 .flags = BN_REQ_IGNORE_EOS | BN_REQ_SEED, .sampling = &sp },
		.out = together, .out_cap = SERVE_TOKENS };
	struct bn_batch_result br;
	ck_assert_int_eq(bn_generate_batch(g, items, DAEMON_PROMPTS + 1, &br,
					   tu_scaled_ns(DAEMON_WAIT_NS)), 0);
	ck_assert_uint_eq(br.n_ok, DAEMON_PROMPTS + 1);
	ck_assert_int_eq(memcmp(batch_out, g_greedy, sizeof(batch_out)), 0);
	ck_assert_int_eq(memcmp(together, alone, sizeof(alone)), 0);
	bn_disconnect(g);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&gd, SIGTERM), 0);
	ck_assert_int_eq(tu_daemon_stop(&cd, SIGTERM), 0);
}
END_TEST

/* Embeddings on the cuda backend (base, and fast's fused final norm, which must leave every
 * token's residual stream whole): each vector within 1e-4 of the cpu daemon's (the device
 * sums attention in another order, and an activation's int8 rounding can flip: 1.8e-5 seen on
 * components of 0.06), and a batch's vectors the bits each gets alone (prompts of 40 and
 * EMBED_LONG tokens: several chunks). */
#define EMBED_ITEMS 4
#define EMBED_DIM 256 /* the tiny preset's */

static void embed_all(struct bn_client *c, uint32_t ids[][EMBED_LONG], const uint32_t *lens,
		      float vec[][EMBED_DIM])
{
	struct bn_embed_item items[EMBED_ITEMS];
	for (uint32_t k = 0; k < EMBED_ITEMS; k++)
		items[k] = (struct bn_embed_item){ .ids = ids[k], .n_ids = lens[k], .vector = vec[k],
						   .cap = EMBED_DIM };
	struct bn_batch_result br;
	ck_assert_int_eq(bn_embed_batch(c, items, EMBED_ITEMS, &br, tu_scaled_ns(DAEMON_WAIT_NS)), 0);
	ck_assert_uint_eq(br.n_ok, EMBED_ITEMS);
}

START_TEST(daemon_embeds_as_the_cpu_daemon)
{
	if (!ctu_have_cuda_daemon())
		return;
	static const char *const variants[] = { "base", "fast" }, *const poolings[] = { "mean", "last" };
	static uint32_t ids[EMBED_ITEMS][EMBED_LONG];
	static const uint32_t lens[EMBED_ITEMS] = { 1, 9, 40, EMBED_LONG };
	static float gv[EMBED_ITEMS][EMBED_DIM], cv[EMBED_ITEMS][EMBED_DIM], one[EMBED_DIM];
	for (uint32_t k = 0; k < EMBED_ITEMS; k++)
		ctu_make_ids(ids[k], lens[k], 40 + k, 512);
	const char *gargs[] = { "--backend", "cuda", "--model", tu_default_model(), "--kv-memory", "4M",
				"--pooling", poolings[_i], "--cuda-kernels", variants[_i], NULL };
	const char *cargs[] = { "--pooling", poolings[_i], NULL };
	struct tu_daemon gd, cd;
	ck_assert_msg(ctu_start_cuda_daemon(&gd, gargs, 0) == 0, "the cuda daemon did not start");
	ck_assert_int_eq(tu_daemon_start_cpu(&cd, tu_default_model(), cargs), 0);
	struct bn_client *g, *c;
	ck_assert_int_eq(bn_connect(gd.socket_path, 8, &g), 0);
	ck_assert_int_eq(bn_connect(cd.socket_path, 8, &c), 0);
	ck_assert(bn_model_features(g) & BN_FEAT_EMBED);
	embed_all(g, ids, lens, gv);
	embed_all(c, ids, lens, cv);
	for (uint32_t k = 0; k < EMBED_ITEMS; k++) {
		for (uint32_t i = 0; i < EMBED_DIM; i++)
			ck_assert_msg(fabsf(gv[k][i] - cv[k][i]) <= 1e-4f,
				      "%s %s, %u tokens, [%u]: cuda %.9g, cpu %.9g", variants[_i],
				      poolings[_i], lens[k], i, (double)gv[k][i], (double)cv[k][i]);
		struct bn_embed_item it = { .ids = ids[k], .n_ids = lens[k], .vector = one,
					    .cap = EMBED_DIM };
		ck_assert_int_eq(bn_embed(g, &it, tu_scaled_ns(DAEMON_WAIT_NS)), 0);
		ck_assert_mem_eq(one, gv[k], sizeof(one));
	}
	bn_disconnect(g);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&gd, SIGTERM), 0);
	ck_assert_int_eq(tu_daemon_stop(&cd, SIGTERM), 0);
}
END_TEST

/* BitNet-embedding's two graphs (the -test presets, one layer; their files' pooling: the last
 * token) embedded by the cuda daemon asked for `fast` (it runs base, cuda_norms.h): each
 * vector within 1e-4 of the cpu daemon's, as above, and a batch's vectors the bits each gets
 * alone. */
START_TEST(daemon_embeds_qwen3_gemma3)
{
	if (!ctu_have_cuda_daemon())
		return;
	static const char *const presets[] = { "bitnet-embedding-0.6b-test",
					       "bitnet-embedding-270m-test" };
	char dir[] = "/tmp/bn-cuda-embed61-XXXXXX", path[256], cmd[512];
	tu_models_dir(dir);
	snprintf(path, sizeof(path), "%s/%s.gguf", dir, presets[_i]);
	snprintf(cmd, sizeof(cmd), "%s write --preset %s --layers 1 --out %s >/dev/null",
		 getenv("BITNET_MODEL_TOOL"), presets[_i], path);
	ck_assert_int_eq(system(cmd), 0);
	static uint32_t ids[EMBED_ITEMS][EMBED_LONG];
	static const uint32_t lens[EMBED_ITEMS] = { 1, 9, 40, EMBED_LONG };
	static float gv[EMBED_ITEMS][EMBED_DIM], cv[EMBED_ITEMS][EMBED_DIM], one[EMBED_DIM];
	for (uint32_t k = 0; k < EMBED_ITEMS; k++)
		ctu_make_ids(ids[k], lens[k], 60 + k, 512);
	const char *gargs[] = { "--backend", "cuda", "--model", path, "--kv-memory", "4M",
				"--cuda-kernels", "fast", NULL };
	struct tu_daemon gd, cd;
	ck_assert_msg(ctu_start_cuda_daemon(&gd, gargs, 0) == 0, "the cuda daemon did not start");
	ck_assert_int_eq(tu_daemon_start_cpu(&cd, path, NULL), 0);
	struct bn_client *g, *c;
	ck_assert_int_eq(bn_connect(gd.socket_path, 8, &g), 0);
	ck_assert_int_eq(bn_connect(cd.socket_path, 8, &c), 0);
	embed_all(g, ids, lens, gv);
	embed_all(c, ids, lens, cv);
	for (uint32_t k = 0; k < EMBED_ITEMS; k++) {
		for (uint32_t i = 0; i < EMBED_DIM; i++)
			ck_assert_msg(fabsf(gv[k][i] - cv[k][i]) <= 1e-4f,
				      "%s, %u tokens, [%u]: cuda %.9g, cpu %.9g", presets[_i], lens[k],
				      i, (double)gv[k][i], (double)cv[k][i]);
		struct bn_embed_item it = { .ids = ids[k], .n_ids = lens[k], .vector = one,
					    .cap = EMBED_DIM };
		ck_assert_int_eq(bn_embed(g, &it, tu_scaled_ns(DAEMON_WAIT_NS)), 0);
		ck_assert_mem_eq(one, gv[k], sizeof(one));
	}
	bn_disconnect(g);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&gd, SIGTERM), 0);
	ck_assert_int_eq(tu_daemon_stop(&cd, SIGTERM), 0);
	tu_remove_dir(dir);
}
END_TEST

/* Structured output on the cuda backend: a constrained request's greedy tokens are the cpu
 * daemon's, with a budget long enough to end on its own and one so short that draws are closed
 * in time (a second draw on the device); a seeded one is the same alone and batched. */
static void constrained_run(struct bn_client *c, const uint32_t *prompt, uint32_t max_tokens,
			    const struct bn_grammar_handle *g, const struct bn_sampling_params *sp,
			    uint32_t flags, uint32_t *out, struct bn_result *res)
{
	struct bn_request r = { .prompt = prompt, .n_prompt = 8, .max_tokens = max_tokens,
				.flags = flags, .sampling = sp };
	struct bn_handle *h;
	ck_assert_int_eq(bn_submit_grammar(c, &r, NULL, 0, g, &h), 0);
	ck_assert_int_eq(tu_wait(h, DAEMON_WAIT_NS), 0);
	ck_assert_int_eq(bn_result(h, res), 0);
	memset(out, 0, DAEMON_TOKENS * 4 * sizeof(uint32_t));
	bn_read_tokens(h, 0, out, 4 * DAEMON_TOKENS);
	bn_release(h);
}

/* Speculative decoding under a grammar that makes the output repeat itself, so that drafts
 * are proposed and pass it: verify rows masked position by position (each its own bitset) and
 * the closing check along them (at least 8 runs, so a budget of 7 ends by length and one of 48 by EOS). The cuda daemon's
 * ids and ends equal its plain decoding's and the cpu daemon's speculative ones. */
static void constrained_speculation(struct bn_client *g, struct bn_client *c, const uint32_t *prompt)
{
	static const char re[] = "(ab ){8,30}";
	struct bn_grammar_spec spec = { .kind = BN_GRAMMAR_KIND_REGEX, .text = re, .len = strlen(re) };
	struct bn_grammar_handle *gg, *cg;
	ck_assert_int_eq(bn_grammar_load(g, &spec, &gg, NULL, 0, -1), 0);
	ck_assert_int_eq(bn_grammar_load(c, &spec, &cg, NULL, 0, -1), 0);
	long long rows = ctu_daemon_stat(g, "bitnetd_speculative_rows_total");
	uint32_t budgets[2] = { SPECULATION_ROOM, 7 };
	struct bn_result plain, spec_g, spec_c;
	uint32_t plain_ids[4 * DAEMON_TOKENS], g_ids[4 * DAEMON_TOKENS], c_ids[4 * DAEMON_TOKENS];
	for (uint32_t k = 0; k < 2; k++) {
		constrained_run(g, prompt, budgets[k], gg, NULL, 0, plain_ids, &plain);
		constrained_run(g, prompt, budgets[k], gg, NULL, BN_REQ_SPECULATE, g_ids, &spec_g);
		constrained_run(c, prompt, budgets[k], cg, NULL, BN_REQ_SPECULATE, c_ids, &spec_c);
		ck_assert_msg(plain.status == spec_g.status && plain.n_tokens == spec_g.n_tokens &&
				      memcmp(plain_ids, g_ids, sizeof(g_ids)) == 0,
			      "budget %u: cuda speculative %s after %u tokens, plain %s after %u",
			      budgets[k], bn_status_name(spec_g.status), spec_g.n_tokens,
			      bn_status_name(plain.status), plain.n_tokens);
		ck_assert_msg(spec_c.status == spec_g.status && spec_c.n_tokens == spec_g.n_tokens &&
				      memcmp(c_ids, g_ids, sizeof(g_ids)) == 0,
			      "budget %u: cuda and cpu speculative outputs differ", budgets[k]);
	}
	long long drafted = ctu_daemon_stat(g, "bitnetd_speculative_rows_total") - rows;
	printf("constrained speculation on cuda: %lld rows verified drafts\n", drafted);
	ck_assert_int_gt(drafted, 0);
	bn_grammar_release(gg);
	bn_grammar_release(cg);
}

START_TEST(daemon_constrains_as_the_cpu_daemon)
{
	if (!ctu_have_cuda_daemon())
		return;
	struct tu_daemon gd, cd;
	start_cuda_daemon(&gd);
	ck_assert_int_eq(tu_daemon_start_cpu(&cd, tu_default_model(), NULL), 0);
	struct bn_client *g, *c;
	ck_assert_int_eq(bn_connect(gd.socket_path, 8, &g), 0);
	ck_assert_int_eq(bn_connect(cd.socket_path, 8, &c), 0);
	struct bn_grammar_spec spec = { .kind = BN_GRAMMAR_KIND_JSON, .flags = BN_GRAMMAR_JSON_OBJECT };
	struct bn_grammar_handle *gg, *cg;
	ck_assert_int_eq(bn_grammar_load(g, &spec, &gg, NULL, 0, -1), 0);
	ck_assert_int_eq(bn_grammar_load(c, &spec, &cg, NULL, 0, -1), 0);
	uint32_t prompt[8] = { 1, 40, 77, 300, 12, 5, 99, 200 };
	uint32_t budgets[2] = { JSON_ROOM, 6 };
	struct bn_result gr, cr;
	uint32_t gout[4 * DAEMON_TOKENS], cout[4 * DAEMON_TOKENS];
	for (uint32_t k = 0; k < 2; k++) {
		constrained_run(g, prompt, budgets[k], gg, NULL, 0, gout, &gr);
		constrained_run(c, prompt, budgets[k], cg, NULL, 0, cout, &cr);
		ck_assert_msg(gr.status == cr.status && gr.n_tokens == cr.n_tokens,
			      "budget %u: cuda %s after %u tokens, cpu %s after %u", budgets[k],
			      bn_status_name(gr.status), gr.n_tokens, bn_status_name(cr.status),
			      cr.n_tokens);
		ck_assert_int_eq(memcmp(gout, cout, sizeof(gout)), 0);
		ck_assert_uint_eq(gr.status, BN_STATUS_EOS); /* closed in time, even in 6 */
	}
	struct bn_sampling_params sp = { .temperature = 4.0f, .top_k = 40, .seed = 11 };
	uint32_t alone[4 * DAEMON_TOKENS], together[4 * DAEMON_TOKENS], other[4 * DAEMON_TOKENS];
	constrained_run(g, prompt, SEEDED_TOKENS, gg, &sp, BN_REQ_SEED, alone, &gr);
	struct bn_request r = { .prompt = prompt, .n_prompt = 8, .max_tokens = SEEDED_TOKENS,
				.flags = BN_REQ_SEED, .sampling = &sp };
	struct bn_request plain = { .prompt = prompt, .n_prompt = 8, .max_tokens = SEEDED_TOKENS,
				    .flags = BN_REQ_IGNORE_EOS };
	struct bn_handle *h1, *h2;
	ck_assert_int_eq(bn_submit(g, &plain, &h2), 0);
	ck_assert_int_eq(bn_submit_grammar(g, &r, NULL, 0, gg, &h1), 0);
	ck_assert_int_eq(tu_wait(h1, DAEMON_WAIT_NS), 0);
	ck_assert_int_eq(tu_wait(h2, DAEMON_WAIT_NS), 0);
	memset(together, 0, sizeof(together));
	bn_read_tokens(h1, 0, together, 4 * DAEMON_TOKENS);
	bn_read_tokens(h2, 0, other, 4 * DAEMON_TOKENS);
	bn_release(h1);
	bn_release(h2);
	ck_assert_int_eq(memcmp(alone, together, sizeof(alone)), 0);
	constrained_speculation(g, c, prompt);
	bn_grammar_release(gg);
	bn_grammar_release(cg);
	bn_disconnect(g);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&gd, SIGTERM), 0);
	ck_assert_int_eq(tu_daemon_stop(&cd, SIGTERM), 0);
}
END_TEST

#ifdef BN_CUDA_HOST
/* ------------------------------------------------------------------------------------------ */
/* A device the model does not fit (the harness's BN_CUDA_HOST_DEVICE_MEMORY)                  */
/* ------------------------------------------------------------------------------------------ */

#define KV_BLOCK_BYTES (16 * 2048) /* the tiny preset: 16 positions of 2,048 bytes */

/* The cuda daemon on a device of `memory`, which must not start: its exit status and log. */
static void start_refused(const char *memory, const char *kv_memory, struct tu_run *r)
{
	char dir[] = "/tmp/bn-cuda-small-XXXXXX", sock[64];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(sock, sizeof(sock), "%s/sock", dir);
	/* timeout: a daemon that starts after all is ended (124) instead of waited for forever */
	char limit[16];
	snprintf(limit, sizeof(limit), "%d", tu_scaled(60));
	const char *argv[16] = { "/usr/bin/timeout", limit, ctu_cuda_daemon(), "--socket", sock,
				 "--backend", "cuda", "--model", tu_default_model(), "--cache-dir", dir,
				 "--log-level", "warn" };
	int argc = 13;
	if (kv_memory) {
		argv[argc++] = "--kv-memory";
		argv[argc++] = kv_memory;
	}
	setenv("BN_CUDA_HOST_DEVICE_MEMORY", memory, 1);
	ck_assert_int_eq(tu_run(argv, NULL, 0, r), 0);
	unsetenv("BN_CUDA_HOST_DEVICE_MEMORY");
	tu_remove_dir(dir);
	ck_assert_msg(r->status == 3, "device %s: exit %d, want 3\n%s", memory, r->status, r->err);
}

static void start_on_device(struct tu_daemon *d, const char *memory, const char *const *args)
{
	setenv("BN_CUDA_HOST_DEVICE_MEMORY", memory, 1);
	int rc = ctu_start_cuda_daemon(d, args, 0);
	unsetenv("BN_CUDA_HOST_DEVICE_MEMORY");
	ck_assert_msg(rc == 0, "the daemon did not start on a device of %s", memory);
}

/* Weights that do not fit, no room past the scratch headroom (a tenth of the device, at
 * least 1 GiB) for one KV block, and a --kv-memory larger than the device: each refused with
 * exit status 3 and a line that says which and by how much (--backend auto goes on with the
 * cpu instead). A device with a little room past the headroom gets a KV cache of that size by
 * default, and serves. */
START_TEST(daemon_on_a_small_device)
{
	if (!ctu_have_cuda_daemon())
		return;
	static struct tu_run r;
	start_refused("256K", NULL, &r);
	ck_assert_msg(strstr(r.err, "out of device memory loading the weights\" need_bytes="),
		      "%s", r.err);
	start_refused("1G", NULL, &r);
	ck_assert_msg(strstr(r.err, "the device has no memory left for the KV cache\"") &&
		      strstr(r.err, "headroom_mib=1024"), "%s", r.err);
	start_refused("4M", "64M", &r);
	ck_assert_msg(strstr(r.err, "out of device memory for the KV cache\" need_mib=64"),
		      "%s", r.err);

	struct tu_daemon d;
	struct bn_client *c;
	struct bn_model_info info;
	/* --backend auto (the default with a model) takes the cpu there instead */
	const char *auto_args[] = { "--backend", "auto", "--model", tu_default_model(), NULL };
	start_on_device(&d, "1G", auto_args);
	ck_assert_int_eq(bn_connect(d.socket_path, 8, &c), 0);
	ck_assert_int_eq(bn_model_info(c, &info), 0);
	ck_assert_str_eq(info.backend, "cpu");
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);

	const char *args[] = { "--backend", "cuda", "--model", tu_default_model(), NULL };
	start_on_device(&d, "1030M", args);
	ck_assert_int_eq(bn_connect(d.socket_path, 8, &c), 0);
	long long blocks = ctu_daemon_stat(c, "bitnetd_kv_blocks_total");
	ck_assert_msg(blocks >= 16 && blocks * KV_BLOCK_BYTES <= (6ll << 20),
		      "%lld KV blocks on a device with 6 MiB past its headroom", blocks);
	/* without --cuda-kernels: the default, fast (exact: base's bits; the figures in
	 * docs/PERFORMANCE.md) */
	static char stats[1 << 17];
	ck_assert_int_ge(bn_daemon_stats(c, stats, sizeof(stats)), 0);
	ck_assert_msg(strstr(stats, "bitnetd_cuda_kernels{variant=\"graph,fused,gemv,mma\"} 1"),
		      "the default variant is not fast");
	uint32_t prompt[4] = { 5, 77, 301, 9 }, out[8];
	struct bn_request q = { .prompt = prompt, .n_prompt = 4, .max_tokens = 8,
				.flags = BN_REQ_IGNORE_EOS };
	struct bn_result res;
	ck_assert_int_eq(bn_generate(c, &q, out, 8, &res, tu_scaled_ns(DAEMON_WAIT_NS)), 0);
	ck_assert_uint_eq(res.n_tokens, 8);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST
#endif

static Suite *cuda_suite(void)
{
	Suite *s = suite_create("cuda");
	TCase *k = tcase_create("kernels");
	tcase_set_timeout(k, 120);
	tcase_add_test(k, quantize_matches_cpu);
	tcase_add_test(k, ternary_kernels_match_scalar);
	tcase_add_test(k, grouped_ternary_matches_scalar);
	tcase_add_test(k, f32_gemm_matches_reference);
	tcase_add_test(k, f16_gemm_matches_reference);
	tcase_add_test(k, attention_matches_scalar);
	tcase_add_test(k, sampler_matches_cpu);
	tcase_add_test(k, elastic_kv_arena);
	suite_add_tcase(s, k);
	TCase *b = tcase_create("backend");
	tcase_set_timeout(b, 300);
	tcase_add_test(b, test_model_greedy_ids);
#if defined(BN_CUDA_HOST) && defined(__SANITIZE_THREAD__)
	/* Under ThreadSanitizer the harness runs about twenty times slower: there the test
	 * model's first ids (every kernel of a llama step) stand for the backend's cases, which
	 * the plain and AddressSanitizer passes run whole. */
	printf("note: under ThreadSanitizer the backend's cases are the test model's first %d ids\n",
	       STORIES_IDS);
	(void)tiny_matches_cpu_backend;
	(void)elastic_kv_matches_fixed;
	(void)families_match_cpu_backend;
	(void)qwen3_gemma3_match_cpu_backend;
	(void)batch_invariance_32;
	(void)daemon_serves_as_the_cpu_daemon;
	(void)daemon_constrains_as_the_cpu_daemon;
	(void)daemon_embeds_as_the_cpu_daemon;
	(void)daemon_embeds_qwen3_gemma3;
	(void)daemon_on_a_small_device;
#else
	tcase_add_test(b, tiny_matches_cpu_backend);
	tcase_add_test(b, elastic_kv_matches_fixed);
	tcase_add_loop_test(b, families_match_cpu_backend, 0,
			    (int)(sizeof(family_presets) / sizeof(family_presets[0])));
	tcase_add_test(b, batch_invariance_32);
	tcase_add_test(b, daemon_serves_as_the_cpu_daemon);
#if defined(BN_CUDA_HOST) && defined(__SANITIZE_ADDRESS__)
	/* Under AddressSanitizer (half of this suite's time there): the masked rows and the
	 * verified drafts on the device are test_cuda_fast_ops_host's and test_cuda_ops_host's
	 * in-process cases, the daemon's grammar code test_structured's; the plain pass runs it. */
	(void)daemon_constrains_as_the_cpu_daemon;
#else
	tcase_add_test(b, daemon_constrains_as_the_cpu_daemon);
#endif
	tcase_add_loop_test(b, daemon_embeds_as_the_cpu_daemon, 0, 2);
#ifdef BN_CUDA_HOST
	tcase_add_test(b, daemon_on_a_small_device);
#endif
#endif
	suite_add_tcase(s, b);
	/* issue 61's qwen3 and gemma3 graphs (not under ThreadSanitizer, as the backend's) */
	TCase *q = tcase_create("qwen3_gemma3");
	tcase_set_timeout(q, 300);
#if !(defined(BN_CUDA_HOST) && defined(__SANITIZE_THREAD__))
	tcase_add_loop_test(q, qwen3_gemma3_match_cpu_backend, 0,
			    (int)(sizeof(graph61_presets) / sizeof(graph61_presets[0])));
	tcase_add_loop_test(q, daemon_embeds_qwen3_gemma3, 0, 2);
#endif
	suite_add_tcase(s, q);
	return s;
}

int main(void)
{
	char device[256];
	int rc = ctu_require_device(device, sizeof(device));
	if (rc)
		return rc;
#ifdef BN_CUDA_HOST
	printf("the cuda suite on the CUDA host harness (tests/cuda_host): %s\n", device);
	/* a small mapping granule: the elastic KV arena's tests then cross groups often */
	setenv("BN_CUDA_HOST_VMM_GRANULARITY", "16384", 0);
#endif
	return ctu_run_suite(cuda_suite());
}

#endif /* BN_HAVE_CUDA */
