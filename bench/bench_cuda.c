/* SPDX-License-Identifier: MIT */
/*
 * bench_cuda — the cuda backend's kernel variants (--cuda-kernels) side by side in one
 * process, on the 2B4T-shape model (make bench-cuda; issue 49). Each variant is a backend of
 * its own on the same GPU; every measurement runs the variants one after another, in an order
 * that rotates each round, and reports each one's median, so that a GPU that drifts (clocks,
 * heat, neighbours) drifts for all of them alike. key@variant=value lines, then
 * `gain_KEY@COLUMN` for every column after the first that has the key (how many times better
 * than it: a ratio of rates, or of times the other way round), then a table. The columns are
 * the variants in the order named (so the first named is the reference: base by default), then
 * the GEMV section's kernels (gemv, mma) against base's.
 *
 *   copy_gbs                         device-to-device copy, bytes read + written per second
 *   t2_gemv_us_<shape>@base|gemv     ternary GEMV at batch 1: ternary.cu's dp4a kernel (base)
 *   t2_gemv_gbs_<shape>@..           and the P16 GEMV (gemv, the kernel of fast and all):
 *   t2_gemv_share_<shape>@..         time, weight + activation bytes a second, and their share
 *                                    of copy_gbs
 *   f16_gemv_us_<shape>, t2_vs_f16_<shape>@..  cuBLAS FP16 GEMV on the shape, and how many
 *                                    times faster each ternary kernel is
 *   t2_gemm_us_b64_<shape>@base|mma  64 tokens: ternary.cu's WMMA tiles and the mma.sync kernel
 *   decode_tps_b<N>@<variant>        decode tokens/s at batch N (1, 8, 32, 128, 256) through the
 *   ms_per_token_b1@<variant>        backend: every layer, the LM head, the sampler, the host
 *                                    round trip
 *   prefill_tps_512@<variant>        one 512-token prompt in one step
 *   ms_per_token_b1_ctx<N>@<variant> batch 1 after a prompt of N positions (split attention)
 *
 * Usage: bench_cuda --model FILE [--variants LIST] [--rounds N] [--quick]
 *   LIST: up to MAX_VARIANTS --cuda-kernels names (base, fast, all, or features joined by
 *   commas: graph,fused,gemv,mma,split[=N]) separated by ':', default base:fast:all; N rounds,
 *   1 to MAX_ROUNDS, default 3; --quick: small shapes and batches, for a smoke run on the CUDA
 *   host harness (bench_cuda_host, no cuBLAS; its times say nothing about a GPU).
 * Every GPU time is a median of repeated runs between CUDA events after a warm-up; the GEMV
 * inputs rotate over copies that together exceed the L2 cache, so each run reads DRAM.
 */
#include "../daemon/backends/backend.h"
#include "../daemon/backends/cuda_variant.h"
#include "cuda_fast.h"
#include "cuda_kernels.h"
#include "quant.h"

#ifndef BN_CUDA_HOST
#include <cublas_v2.h>
#endif
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPS 30
#define ROTATE 16
#define MAX_VARIANTS 10          /* every name cuda_variant.c knows fits in one run */
#define MAX_ROUNDS 9

static struct {
	int quick;
	int rounds;
	int reps, rotate;
} cfg = { .rounds = 3, .reps = REPS, .rotate = ROTATE };

static void check(int err, const char *what)
{
	if (err) {
		fprintf(stderr, "bench_cuda: %s failed: %d (%s)\n", what, err,
			cudaGetErrorString((cudaError_t)err));
		exit(1);
	}
}

/* A failure that is not a CUDA error (the backend's calls return -errno). */
static void need(int rc, const char *what)
{
	if (rc) {
		fprintf(stderr, "bench_cuda: %s failed: %d\n", what, rc);
		exit(1);
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	double c[64];
	memcpy(c, v, (size_t)n * sizeof(double));
	qsort(c, (size_t)n, sizeof(double), cmp_double);
	return n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
}

/* Median milliseconds of fn(ctx, i) over the reps, i the run's rotation index. */
static double time_ms(void (*fn)(void *, int), void *ctx)
{
	cudaEvent_t a, b;
	double ms[64];
	check(cudaEventCreate(&a), "event");
	check(cudaEventCreate(&b), "event");
	for (int i = 0; i < 3; i++)
		fn(ctx, i);
	for (int i = 0; i < cfg.reps; i++) {
		float t;
		check(cudaEventRecord(a, 0), "record");
		fn(ctx, i);
		check(cudaEventRecord(b, 0), "record");
		check(cudaEventSynchronize(b), "sync");
		check(cudaEventElapsedTime(&t, a, b), "elapsed");
		ms[i] = t;
	}
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	return median(ms, cfg.reps);
}

static void *dev_random(size_t bytes)
{
	unsigned char *h = malloc(bytes);
	for (size_t i = 0; i < bytes; i++)
		h[i] = (unsigned char)(rand() & 0xff);
	void *d;
	check(cudaMalloc(&d, bytes), "cudaMalloc");
	check(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), "upload");
	free(h);
	return d;
}

static void *dev_filled(size_t bytes, int byte)
{
	void *d;
	check(cudaMalloc(&d, bytes), "cudaMalloc");
	check(cudaMemset(d, byte, bytes), "memset");
	return d;
}

/* ---- the report ------------------------------------------------------------------------ */

#define MAX_KEYS 64
#define MAX_COLUMNS (MAX_VARIANTS + 3) /* the variants, base's kernels, gemv, mma */

/* Each key's value per column (a variant, or a kernel of the GEMV section); higher_better
 * says which way the gains go. */
static struct {
	char key[MAX_KEYS][64];
	int higher_better[MAX_KEYS];
	double v[MAX_KEYS][MAX_COLUMNS];
	int has[MAX_KEYS][MAX_COLUMNS];
	int n;
} report;

static const char *columns[MAX_COLUMNS];
static int n_columns;

/* A column's index, added at the end the first time; the variants are added first (main), so
 * the gains are against the first variant named. A variant named gemv or mma shares the
 * kernel's column: their keys differ. */
static int column(const char *name)
{
	for (int i = 0; i < n_columns; i++)
		if (strcmp(columns[i], name) == 0)
			return i;
	if (n_columns == MAX_COLUMNS) {
		fprintf(stderr, "bench_cuda: more than %d columns\n", MAX_COLUMNS);
		exit(1);
	}
	columns[n_columns] = name;
	return n_columns++;
}

/* Prints key@col=value and keeps it for the gains and the table. */
static void put(const char *key, const char *col, double value, int higher_better)
{
	int k = 0;
	while (k < report.n && strcmp(report.key[k], key) != 0)
		k++;
	if (k == report.n && report.n < MAX_KEYS) {
		snprintf(report.key[k], sizeof(report.key[k]), "%s", key);
		report.higher_better[k] = higher_better;
		report.n++;
	}
	int c = column(col);
	printf("%s@%s=%.4g\n", key, col, value);
	fflush(stdout);
	if (k < MAX_KEYS) {
		report.v[k][c] = value;
		report.has[k][c] = 1;
	}
}

/* The gains of every column over the first one that has the key, and a table. */
static void print_report(void)
{
	for (int k = 0; k < report.n; k++) {
		int ref = 0;
		while (ref < n_columns && !report.has[k][ref])
			ref++;
		for (int c = ref + 1; c < n_columns; c++)
			if (report.has[k][c] && report.v[k][c] > 0 && report.v[k][ref] > 0)
				printf("gain_%s@%s=%.3f\n", report.key[k], columns[c],
				       report.higher_better[k] ? report.v[k][c] / report.v[k][ref]
							       : report.v[k][ref] / report.v[k][c]);
	}
	printf("\n%-34s", "key");
	for (int c = 0; c < n_columns; c++)
		printf(" %12s", columns[c]);
	printf("\n");
	for (int k = 0; k < report.n; k++) {
		printf("%-34s", report.key[k]);
		for (int c = 0; c < n_columns; c++)
			if (report.has[k][c])
				printf(" %12.4g", report.v[k][c]);
			else
				printf(" %12s", "-");
		printf("\n");
	}
}

/* ---- copy bandwidth -------------------------------------------------------------------- */

struct copy_ctx {
	void *src, *dst;
	size_t bytes;
};

static void run_copy(void *p, int i)
{
	struct copy_ctx *c = p;
	(void)i;
	check(cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, 0), "copy");
}

static double copy_gbs(void)
{
	struct copy_ctx c = { .bytes = cfg.quick ? (size_t)1 << 20 : (size_t)1 << 30 };
	check(cudaMalloc(&c.src, c.bytes), "cudaMalloc");
	check(cudaMalloc(&c.dst, c.bytes), "cudaMalloc");
	check(cudaMemset(c.src, 1, c.bytes), "memset");
	double ms = time_ms(run_copy, &c);
	cudaFree(c.src);
	cudaFree(c.dst);
	return 2.0 * (double)c.bytes / (ms * 1e6);
}

/* ---- matrix kernels: the first ones against the new ones, alternating --------------------- */

#define GEMM_TOKENS 64

struct gemv_ctx {
	struct bn_cuda_t2 rows[ROTATE], p16[ROTATE];
	struct bn_cuda_q8 x, x64;
	struct bn_cuda_splitk sk;
	void *sk_mem;
	float *y;
	uint32_t n_in, n_out;
#ifndef BN_CUDA_HOST
	cublasHandle_t blas;
	void *f16[ROTATE], *xh, *yh;
#endif
};

static void run_dp4a(void *p, int i)
{
	struct gemv_ctx *g = p;
	check(bn_cuda_t2_gemv_dp4a(&g->rows[i % cfg.rotate], &g->x, 1, g->y, g->n_out, 0), "dp4a gemv");
}

static void run_gemv16(void *p, int i)
{
	struct gemv_ctx *g = p;
	check(bn_cuda_t2_gemv16(&g->p16[i % cfg.rotate], &g->x, 1, g->y, g->n_out, 0, &g->sk, 0), "gemv16");
}

static void run_tc64(void *p, int i)
{
	struct gemv_ctx *g = p;
	check(bn_cuda_t2_gemm(&g->rows[i % cfg.rotate], &g->x64, GEMM_TOKENS, g->y, g->n_out, 0), "tc gemm");
}

static void run_mma64(void *p, int i)
{
	struct gemv_ctx *g = p;
	check(bn_cuda_t2_mma(&g->p16[i % cfg.rotate], 1, &g->x64, GEMM_TOKENS, g->y, g->n_out, 0, &g->sk, 0),
	      "mma gemm");
}

#ifndef BN_CUDA_HOST
static void run_f16(void *p, int i)
{
	struct gemv_ctx *g = p;
	const float one = 1.0f, zero = 0.0f;
	/* y[n_out] = W[n_out x n_in] x: W row-major is column-major [n_in x n_out], transposed */
	check(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)g->n_out, 1, (int)g->n_in, &one,
			   g->f16[i % cfg.rotate], CUDA_R_16F, (int)g->n_in, g->xh, CUDA_R_16F, (int)g->n_in,
			   &zero, g->yh, CUDA_R_32F, (int)g->n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
	      "cublasGemmEx");
}
#endif

static struct bn_cuda_q8 random_acts(uint32_t n, uint32_t k_pad, uint32_t n_in)
{
	return (struct bn_cuda_q8){ dev_random((size_t)n * k_pad), dev_filled((size_t)n * 4, 0),
				    dev_filled((size_t)n * 4, 0), n_in, k_pad };
}

static void matrix_shape(const char *name, uint32_t n_in, uint32_t n_out, double copy, void *blas)
{
	struct gemv_ctx g = { .n_in = n_in, .n_out = n_out };
	uint32_t row_bytes = (uint32_t)bn_t2_row_bytes(n_in), k_pad = row_bytes * 4;
	for (int r = 0; r < cfg.rotate; r++) {
		/* random codes (timing only); zero scales (finite, unlike random bytes) */
		float *scale = dev_filled((size_t)n_out * 4, 0);
		g.rows[r] = (struct bn_cuda_t2){ .codes = dev_random((size_t)n_out * row_bytes),
						 .scale = scale, .n_in = n_in, .n_out = n_out,
						 .row_bytes = row_bytes };
		g.p16[r] = (struct bn_cuda_t2){ .codes = dev_random(bn_cuda_p16_bytes(n_out, row_bytes)),
						.scale = scale, .n_in = n_in, .n_out = n_out,
						.row_bytes = row_bytes };
	}
	g.x = random_acts(1, k_pad, n_in);
	g.x64 = random_acts(GEMM_TOKENS, k_pad, n_in);
	g.sk_mem = dev_filled(bn_cuda_splitk_bytes(n_out), 0);
	bn_cuda_splitk_init(&g.sk, g.sk_mem, n_out);
	check(cudaMalloc((void **)&g.y, (size_t)GEMM_TOKENS * n_out * 4), "cudaMalloc");
	double f16_ms = 0;
#ifndef BN_CUDA_HOST
	g.blas = blas;
	for (int r = 0; r < cfg.rotate; r++)
		g.f16[r] = dev_filled((size_t)n_out * n_in * 2, 0x3c); /* halves of 0x3c3c, ~1.0 */
	g.xh = dev_filled((size_t)n_in * 2, 0x3c);
	check(cudaMalloc(&g.yh, (size_t)n_out * 4), "cudaMalloc");
	f16_ms = time_ms(run_f16, &g);
#else
	(void)blas;
#endif
	double ms[4][MAX_ROUNDS];
	void (*fns[4])(void *, int) = { run_dp4a, run_gemv16, run_tc64, run_mma64 };
	for (int round = 0; round < cfg.rounds; round++)
		for (int j = 0; j < 4; j++) {
			int f = (j + round) % 4;
			ms[f][round] = time_ms(fns[f], &g);
		}
	double bytes = (double)n_out * (row_bytes + 4) + k_pad;
	char key[64];
	for (int f = 0; f < 2; f++) {
		double t = median(ms[f], cfg.rounds);
		const char *col = f ? "gemv" : "base";
		snprintf(key, sizeof(key), "t2_gemv_us_%s", name);
		put(key, col, t * 1e3, 0);
		snprintf(key, sizeof(key), "t2_gemv_gbs_%s", name);
		put(key, col, bytes / (t * 1e6), 1);
		snprintf(key, sizeof(key), "t2_gemv_share_%s", name);
		put(key, col, bytes / (t * 1e6) / copy, 1);
		if (f16_ms > 0) {
			snprintf(key, sizeof(key), "t2_vs_f16_%s", name);
			put(key, col, f16_ms / t, 1);
		}
	}
	if (f16_ms > 0)
		printf("f16_gemv_us_%s=%.2f\n", name, f16_ms * 1e3);
	snprintf(key, sizeof(key), "t2_gemm_us_b%d_%s", GEMM_TOKENS, name);
	put(key, "base", median(ms[2], cfg.rounds) * 1e3, 0);
	put(key, "mma", median(ms[3], cfg.rounds) * 1e3, 0);
	for (int r = 0; r < cfg.rotate; r++) {
		cudaFree((void *)g.rows[r].codes);
		cudaFree((void *)g.p16[r].codes);
		cudaFree((void *)g.rows[r].scale);
#ifndef BN_CUDA_HOST
		cudaFree(g.f16[r]);
#endif
	}
#ifndef BN_CUDA_HOST
	cudaFree(g.xh), cudaFree(g.yh);
#endif
	cudaFree(g.x.q), cudaFree(g.x.inv_scale), cudaFree(g.x.sum);
	cudaFree(g.x64.q), cudaFree(g.x64.inv_scale), cudaFree(g.x64.sum);
	cudaFree(g.sk_mem), cudaFree(g.y);
}

/* ---- the backend, one per variant --------------------------------------------------------- */

#define MAX_SEQS 256
#define BLOCK_TOKENS 16
#define SHORT_BLOCKS 4            /* a decode sequence: 16 prompt + 3 + 32 steps < 64 positions */
#define PROMPT 16

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct engine {
	const char *name;
	const struct bn_backend_ops *ops;
	void *self;
	struct bn_model_desc desc;
	uint32_t *tables;
	const uint32_t *rows[MAX_SEQS];
	uint32_t len[MAX_SEQS];
};

static struct {
	uint32_t long_blocks;     /* sequence 0's blocks: the long prompt and the 512-token one */
	uint32_t long_prompt;     /* positions before the long-context decode */
	uint32_t decode_steps;
	uint32_t sizes[5], n_sizes;
	uint32_t prefill;
} shape;

/* n rows of `width` tokens each, sequences 0..n-1 from their current lengths, greedy. */
static void step(struct engine *e, uint32_t n, uint32_t width, const uint32_t *tokens)
{
	static uint32_t seq[MAX_SEQS], lens[MAX_SEQS], pos[MAX_SEQS];
	static struct bn_sampling greedy;
	static struct bn_sample_ctx ctx[MAX_SEQS];
	static const struct bn_sample_ctx *sp[MAX_SEQS];
	static struct bn_sample_out out[MAX_SEQS];
	for (uint32_t r = 0; r < n; r++) {
		seq[r] = r;
		lens[r] = width;
		pos[r] = e->len[r];
		ctx[r] = (struct bn_sample_ctx){ .params = &greedy };
		sp[r] = &ctx[r];
	}
	struct bn_batch b = { .n_rows = n, .width = width, .tokens = tokens, .lens = lens, .pos = pos,
			      .seq = seq, .blocks = e->rows, .sample = sp };
	need(e->ops->step(e->self, &b, out), "backend step");
	for (uint32_t r = 0; r < n; r++)
		e->len[r] += width;
}

static void reset(struct engine *e, uint32_t n)
{
	for (uint32_t s = 0; s < n; s++) {
		need(e->ops->seq_open(e->self, s), "seq_open");
		e->len[s] = 0;
	}
}

static void engine_open(struct engine *e, const char *model, const char *name)
{
	*e = (struct engine){ .name = name, .ops = &bn_backend_cuda };
	/* no weights cache: a writer thread would share the machine with the measurement */
	struct bn_backend_options opt = { .model_path = model, .cache_dir = "none", .max_seqs = MAX_SEQS,
					  .cuda_kernels = name };
	need(e->ops->open(&opt, &e->desc, &e->self), "backend open");
	/* sequence 0 long, the others short: every variant's cache fits beside the others' */
	uint32_t blocks = shape.long_blocks + (MAX_SEQS - 1) * SHORT_BLOCKS;
	need(e->ops->kv_init(e->self, blocks, BLOCK_TOKENS), "kv_init");
	e->tables = malloc((size_t)blocks * 4);
	for (uint32_t b = 0; b < blocks; b++)
		e->tables[b] = b;
	e->rows[0] = e->tables;
	for (uint32_t s = 1; s < MAX_SEQS; s++)
		e->rows[s] = e->tables + shape.long_blocks + (s - 1) * SHORT_BLOCKS;
}

static uint32_t *random_tokens(const struct engine *e, uint32_t n)
{
	uint32_t *t = malloc((size_t)n * 4);
	for (uint32_t i = 0; i < n; i++)
		t[i] = 3 + (uint32_t)rand() % (e->desc.vocab_size - 3);
	return t;
}

/* Seconds of decode_steps steps at batch n after a 16-token prompt each (a step or two of
 * warm-up first: a graph is captured at its first step). */
static double decode_seconds(struct engine *e, uint32_t n, const uint32_t *tokens)
{
	reset(e, n);
	step(e, n, PROMPT, tokens);
	step(e, n, 1, tokens);
	step(e, n, 1, tokens + 1);
	check(cudaDeviceSynchronize(), "sync");
	double t0 = now_s();
	for (uint32_t i = 0; i < shape.decode_steps; i++)
		step(e, n, 1, tokens + i);
	return now_s() - t0;
}

static void decode_batches(struct engine *v, int nv, const uint32_t *tokens)
{
	static double secs[5][MAX_VARIANTS][MAX_ROUNDS];
	/* round 0 warms every bucket's graphs at every table stride; it is not counted */
	for (int round = 0; round <= cfg.rounds; round++)
		for (uint32_t k = 0; k < shape.n_sizes; k++)
			for (int j = 0; j < nv; j++) {
				int i = (j + round) % nv;
				double s = decode_seconds(&v[i], shape.sizes[k], tokens);
				if (round)
					secs[k][i][round - 1] = s;
			}
	for (uint32_t k = 0; k < shape.n_sizes; k++)
		for (int i = 0; i < nv; i++) {
			double s = median(secs[k][i], cfg.rounds);
			char key[64];
			snprintf(key, sizeof(key), "decode_tps_b%u", shape.sizes[k]);
			put(key, v[i].name, shape.sizes[k] * shape.decode_steps / s, 1);
			if (shape.sizes[k] == 1)
				put("ms_per_token_b1", v[i].name, s * 1e3 / shape.decode_steps, 0);
		}
}

static void prefill(struct engine *v, int nv, const uint32_t *tokens)
{
	double secs[MAX_VARIANTS][MAX_ROUNDS];
	for (int round = 0; round <= cfg.rounds; round++)
		for (int j = 0; j < nv; j++) {
			int i = (j + round) % nv;
			reset(&v[i], 1);
			check(cudaDeviceSynchronize(), "sync");
			double t0 = now_s();
			step(&v[i], 1, shape.prefill, tokens);
			if (round)
				secs[i][round - 1] = now_s() - t0;
		}
	char key[64];
	snprintf(key, sizeof(key), "prefill_tps_%u", shape.prefill);
	for (int i = 0; i < nv; i++)
		put(key, v[i].name, shape.prefill / median(secs[i], cfg.rounds), 1);
}

/* Batch 1 deep in a long context, where attention is most of the step. */
static void long_context(struct engine *v, int nv, const uint32_t *tokens)
{
	double secs[MAX_VARIANTS][MAX_ROUNDS];
	uint32_t steps = shape.decode_steps / 4;
	for (int i = 0; i < nv; i++) {
		reset(&v[i], 1);
		for (uint32_t at = 0; at < shape.long_prompt; at += shape.prefill)
			step(&v[i], 1, shape.prefill, tokens + at % 4096);
		step(&v[i], 1, 1, tokens);
		step(&v[i], 1, 1, tokens + 1);
	}
	for (int round = 0; round < cfg.rounds; round++)
		for (int j = 0; j < nv; j++) {
			int i = (j + round) % nv;
			check(cudaDeviceSynchronize(), "sync");
			double t0 = now_s();
			for (uint32_t s = 0; s < steps; s++)
				step(&v[i], 1, 1, tokens + s);
			secs[i][round] = now_s() - t0;
		}
	char key[64];
	snprintf(key, sizeof(key), "ms_per_token_b1_ctx%u", shape.long_prompt);
	for (int i = 0; i < nv; i++)
		put(key, v[i].name, median(secs[i], cfg.rounds) * 1e3 / steps, 0);
}

/* The copy rate, then the first kernels against the new ones on the 2B4T shapes (one small
 * shape with --quick, for the harness, which runs the grids on one CPU core). */
static void matrix_section(void)
{
	double copy = copy_gbs();
	printf("copy_gbs=%.1f\n", copy);
	void *blas = NULL;
#ifndef BN_CUDA_HOST
	check(cublasCreate((cublasHandle_t *)&blas), "cublasCreate");
#endif
	if (cfg.quick) {
		matrix_shape("q_256x96", 256, 96, copy, blas);
	} else {
		matrix_shape("ffn_up_2560x6912", 2560, 6912, copy, blas);
		matrix_shape("ffn_down_6912x2560", 6912, 2560, copy, blas);
		matrix_shape("attn_q_2560x2560", 2560, 2560, copy, blas);
	}
#ifndef BN_CUDA_HOST
	cublasDestroy((cublasHandle_t)blas);
#endif
}

/* The 2B4T run (sequence 0 holds 3,584 positions and more: a model with a shorter context
 * fails its step), or --quick's, sized for the harness and the tiny preset: batch 17 takes the
 * mma path and is padded to a graph bucket (20), and 96 positions span several splits of a
 * variant that names split=16. */
static void pick_shapes(void)
{
	if (cfg.quick) {
		cfg.reps = 2;
		cfg.rotate = 2;
		shape = (typeof(shape)){ .long_blocks = 16, .long_prompt = 96, .decode_steps = 4,
					 .sizes = { 1, 17 }, .n_sizes = 2, .prefill = 48 };
	} else {
		shape = (typeof(shape)){ .long_blocks = 232, .long_prompt = 3584, .decode_steps = 32,
					 .sizes = { 1, 8, 32, 128, 256 }, .n_sizes = 5, .prefill = 512 };
	}
}

static int usage(void)
{
	fprintf(stderr, "usage: bench_cuda --model FILE [--variants base:fast:all] [--rounds N] [--quick]\n");
	return 2;
}

/* Splits LIST (':' between names) into names[], each a name the backend takes, none twice, so
 * that a typo fails before the minutes of the GEMV section; adds their columns in that order
 * (the first is the gains' reference) and keeps each one's canonical name. Returns how many,
 * 0 on a bad list. */
static int parse_variants(char *list, const char **names, char (*canonical)[BN_CUDA_KERNELS_NAME_MAX])
{
	int n = 0;
	for (char *save, *name = strtok_r(list, ":", &save); name; name = strtok_r(NULL, ":", &save)) {
		struct bn_cuda_kernels k;
		if (bn_cuda_kernels_parse(name, &k) != 0) {
			fprintf(stderr, "bench_cuda: '%s' is not a --cuda-kernels name\n", name);
			return 0;
		}
		for (int i = 0; i < n; i++)
			if (strcmp(names[i], name) == 0) {
				fprintf(stderr, "bench_cuda: '%s' is named twice\n", name);
				return 0;
			}
		if (n == MAX_VARIANTS) {
			fprintf(stderr, "bench_cuda: more than %d variants\n", MAX_VARIANTS);
			return 0;
		}
		bn_cuda_kernels_name(&k, canonical[n], sizeof(canonical[n]));
		column(name);
		names[n++] = name;
	}
	return n;
}

int main(int argc, char **argv)
{
	const char *model = NULL;
	char variants[256] = "base:fast:all";
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
			model = argv[++i];
		else if (strcmp(argv[i], "--variants") == 0 && i + 1 < argc)
			snprintf(variants, sizeof(variants), "%s", argv[++i]);
		else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
			cfg.rounds = atoi(argv[++i]);
		else if (strcmp(argv[i], "--quick") == 0)
			cfg.quick = 1;
		else
			return usage();
	}
	if (!model || cfg.rounds < 1 || cfg.rounds > MAX_ROUNDS)
		return usage();
	char list[sizeof(variants)];
	memcpy(list, variants, sizeof(list)); /* parse_variants cuts variants into the names */
	const char *names[MAX_VARIANTS];
	static char canonical[MAX_VARIANTS][BN_CUDA_KERNELS_NAME_MAX];
	int nv = parse_variants(variants, names, canonical);
	if (nv == 0)
		return usage();
	int count = 0;
	if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
		fprintf(stderr, "bench_cuda: no CUDA device\n");
		return 77;
	}
	struct cudaDeviceProp prop;
	check(cudaGetDeviceProperties(&prop, 0), "properties");
	printf("device=\"%s\"\nsms=%d\nvariants=%s\nrounds=%d\n", prop.name, prop.multiProcessorCount, list,
	       cfg.rounds);
	for (int i = 0; i < nv; i++)
		printf("kernels@%s=%s\n", names[i], canonical[i]);
	pick_shapes();
	matrix_section();
	static struct engine v[MAX_VARIANTS];
	for (int i = 0; i < nv; i++)
		engine_open(&v[i], model, names[i]);
	uint32_t *tokens = random_tokens(&v[0], 4096 + MAX_SEQS * PROMPT);
	decode_batches(v, nv, tokens);
	prefill(v, nv, tokens);
	long_context(v, nv, tokens);
	print_report();
	for (int i = 0; i < nv; i++) {
		v[i].ops->close(v[i].self);
		free(v[i].tables);
	}
	free(tokens);
	return 0;
}
