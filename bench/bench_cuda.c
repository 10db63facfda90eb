/* SPDX-License-Identifier: MIT */
/*
 * bench_cuda — the cuda backend on the 2B4T-shape model (make bench-cuda). key=value lines:
 *
 *   copy_gbs                 device-to-device copy, bytes read + written per second
 *   t2_gemv_gbs_<shape>      ternary GEMV at batch 1: weight + activation bytes per second,
 *   t2_gemv_share_<shape>    and its share of copy_gbs
 *   f16_gemv_us_<shape>      cuBLAS FP16 GEMV (the dense baseline) on the same shape,
 *   t2_vs_f16_<shape>        and how many times faster the ternary one is
 *   decode_tps_b<N>          decode tokens/s at batch N (1, 8, 32, 128, 256), ms_per_token_b1
 *   prefill_tps_512          one 512-token prompt in one step
 *
 * Every GPU time is the median of repeated runs between CUDA events, after a warm-up; the
 * GEMV inputs rotate over copies that together exceed the L2 cache, so each run reads DRAM.
 */
#include "../daemon/backends/backend.h"
#include "cuda_kernels.h"
#include "quant.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPS 50
#define ROTATE 16

static void check(int err, const char *what)
{
	if (err) {
		fprintf(stderr, "bench_cuda: %s failed: %d (%s)\n", what, err,
			cudaGetErrorString((cudaError_t)err));
		exit(1);
	}
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

static float median(float *v, int n)
{
	qsort(v, n, sizeof(float), cmp_float);
	return v[n / 2];
}

/* Median milliseconds of fn(i) over REPS runs, i = the run's rotation index. */
static float time_ms(void (*fn)(void *, int), void *ctx)
{
	cudaEvent_t a, b;
	float ms[REPS];
	check(cudaEventCreate(&a), "event");
	check(cudaEventCreate(&b), "event");
	for (int i = 0; i < 3; i++)
		fn(ctx, i);
	for (int i = 0; i < REPS; i++) {
		check(cudaEventRecord(a, 0), "record");
		fn(ctx, i);
		check(cudaEventRecord(b, 0), "record");
		check(cudaEventSynchronize(b), "sync");
		check(cudaEventElapsedTime(&ms[i], a, b), "elapsed");
	}
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	return median(ms, REPS);
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

/* ---- copy bandwidth ------------------------------------------------------------------------ */

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
	struct copy_ctx c = { .bytes = (size_t)1 << 30 };
	check(cudaMalloc(&c.src, c.bytes), "cudaMalloc");
	check(cudaMalloc(&c.dst, c.bytes), "cudaMalloc");
	check(cudaMemset(c.src, 1, c.bytes), "memset");
	float ms = time_ms(run_copy, &c);
	cudaFree(c.src);
	cudaFree(c.dst);
	return 2.0 * (double)c.bytes / (ms * 1e6);
}

/* ---- GEMV: ternary vs cuBLAS FP16 ---------------------------------------------------------- */

struct gemv_ctx {
	struct bn_cuda_t2 t2[ROTATE];
	struct bn_cuda_q8 x;
	float *y;
	cublasHandle_t blas;
	void *f16[ROTATE], *xh, *yh;
	uint32_t n_in, n_out;
};

static void run_t2(void *p, int i)
{
	struct gemv_ctx *g = p;
	check(bn_cuda_t2_gemv_dp4a(&g->t2[i % ROTATE], &g->x, 1, g->y, g->n_out, 0), "t2 gemv");
}

static void run_f16(void *p, int i)
{
	struct gemv_ctx *g = p;
	const float one = 1.0f, zero = 0.0f;
	/* y[n_out] = W[n_out x n_in] x: W row-major is column-major [n_in x n_out], transposed */
	check(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)g->n_out, 1, (int)g->n_in, &one,
			   g->f16[i % ROTATE], CUDA_R_16F, (int)g->n_in, g->xh, CUDA_R_16F, (int)g->n_in,
			   &zero, g->yh, CUDA_R_32F, (int)g->n_out, CUBLAS_COMPUTE_32F,
			   CUBLAS_GEMM_DEFAULT),
	      "cublasGemmEx");
}

static void gemv_shape(const char *name, uint32_t n_in, uint32_t n_out, double copy, cublasHandle_t blas)
{
	struct gemv_ctx g = { .n_in = n_in, .n_out = n_out, .blas = blas };
	uint32_t row_bytes = (uint32_t)bn_t2_row_bytes(n_in);
	for (int r = 0; r < ROTATE; r++) {
		/* random codes; zero scales (finite, unlike random bytes); halves of 0x3c3c, ~1.0 */
		g.t2[r] = (struct bn_cuda_t2){ dev_random((size_t)n_out * row_bytes),
					       dev_filled((size_t)n_out * 4, 0), n_in, n_out, row_bytes };
		g.f16[r] = dev_filled((size_t)n_out * n_in * 2, 0x3c);
	}
	uint32_t k_pad = row_bytes * 4;
	g.x = (struct bn_cuda_q8){ dev_random(k_pad), dev_random(4), dev_random(4), n_in, k_pad };
	check(cudaMalloc((void **)&g.y, (size_t)n_out * 4), "cudaMalloc");
	g.xh = dev_filled((size_t)n_in * 2, 0x3c);
	check(cudaMalloc(&g.yh, (size_t)n_out * 4), "cudaMalloc");
	float t2_ms = time_ms(run_t2, &g), f16_ms = time_ms(run_f16, &g);
	double bytes = (double)n_out * (row_bytes + 4) + k_pad;
	double gbs = bytes / (t2_ms * 1e6);
	printf("t2_gemv_us_%s=%.2f\n", name, t2_ms * 1e3);
	printf("t2_gemv_gbs_%s=%.1f\n", name, gbs);
	printf("t2_gemv_share_%s=%.3f\n", name, gbs / copy);
	printf("f16_gemv_us_%s=%.2f\n", name, f16_ms * 1e3);
	printf("t2_vs_f16_%s=%.2f\n", name, f16_ms / t2_ms);
	for (int r = 0; r < ROTATE; r++) {
		cudaFree((void *)g.t2[r].codes);
		cudaFree((void *)g.t2[r].scale);
		cudaFree(g.f16[r]);
	}
	cudaFree(g.x.q), cudaFree(g.x.inv_scale), cudaFree(g.x.sum), cudaFree(g.y);
	cudaFree(g.xh), cudaFree(g.yh);
}

/* ---- the backend: decode and prefill -------------------------------------------------------- */

#define MAX_SEQS 256
#define BLOCK_TOKENS 16
#define SEQ_BLOCKS 40 /* 640 positions per sequence */
#define DECODE_STEPS 32

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct engine {
	const struct bn_backend_ops *ops;
	void *self;
	struct bn_model_desc desc;
	uint32_t *tables;         /* [MAX_SEQS][SEQ_BLOCKS] */
	const uint32_t *rows[MAX_SEQS];
	uint32_t len[MAX_SEQS];
};

/* n rows, each lens tokens (same for all), sequences 0..n-1 from their current lengths. */
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
	check(e->ops->step(e->self, &b, out) ? 1 : 0, "backend step");
	for (uint32_t r = 0; r < n; r++)
		e->len[r] += width;
}

static void reset(struct engine *e, uint32_t n)
{
	for (uint32_t s = 0; s < n; s++) {
		e->ops->seq_open(e->self, s);
		e->len[s] = 0;
	}
}

static void decode_batches(struct engine *e)
{
	static const uint32_t sizes[] = { 1, 8, 32, 128, 256 };
	uint32_t *tokens = malloc((size_t)MAX_SEQS * 16 * 4);
	for (uint32_t i = 0; i < MAX_SEQS * 16; i++)
		tokens[i] = 3 + (uint32_t)rand() % (e->desc.vocab_size - 3);
	for (unsigned k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		uint32_t n = sizes[k];
		reset(e, n);
		step(e, n, 16, tokens); /* a 16-token prompt each */
		step(e, n, 1, tokens);  /* warm-up */
		double t0 = now_s();
		for (int i = 0; i < DECODE_STEPS; i++)
			step(e, n, 1, tokens + i);
		double dt = now_s() - t0;
		printf("decode_tps_b%u=%.1f\n", n, n * DECODE_STEPS / dt);
		if (n == 1)
			printf("ms_per_token_b1=%.3f\n", dt * 1e3 / DECODE_STEPS);
	}
	free(tokens);
}

static void prefill(struct engine *e)
{
	uint32_t *tokens = malloc(512 * 4);
	for (uint32_t i = 0; i < 512; i++)
		tokens[i] = 3 + (uint32_t)rand() % (e->desc.vocab_size - 3);
	reset(e, 1);
	step(e, 1, 512, tokens); /* warm-up */
	double best = 1e9;
	for (int i = 0; i < 5; i++) {
		reset(e, 1);
		double t0 = now_s();
		step(e, 1, 512, tokens);
		double dt = now_s() - t0;
		best = dt < best ? dt : best;
	}
	printf("prefill_tps_512=%.1f\n", 512 / best);
	free(tokens);
}

int main(int argc, char **argv)
{
	if (argc != 3 || strcmp(argv[1], "--model") != 0) {
		fprintf(stderr, "usage: bench_cuda --model FILE (the 2B4T-shape model)\n");
		return 2;
	}
	int count = 0;
	if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
		fprintf(stderr, "bench_cuda: no CUDA device\n");
		return 77;
	}
	struct cudaDeviceProp prop;
	check(cudaGetDeviceProperties(&prop, 0), "properties");
	printf("device=\"%s\"\nsms=%d\n", prop.name, prop.multiProcessorCount);
	double copy = copy_gbs();
	printf("copy_gbs=%.1f\n", copy);
	cublasHandle_t blas;
	check(cublasCreate(&blas), "cublasCreate");
	gemv_shape("ffn_up_2560x6912", 2560, 6912, copy, blas);
	gemv_shape("ffn_down_6912x2560", 6912, 2560, copy, blas);
	gemv_shape("attn_q_2560x2560", 2560, 2560, copy, blas);
	cublasDestroy(blas);

	struct engine e = { .ops = &bn_backend_cuda };
	/* no weights cache: a writer thread would share the machine with the measurement */
	struct bn_backend_options opt = { .model_path = argv[2], .cache_dir = "none",
					  .max_seqs = MAX_SEQS };
	check(e.ops->open(&opt, &e.desc, &e.self) ? 1 : 0, "backend open");
	check(e.ops->kv_init(e.self, MAX_SEQS * SEQ_BLOCKS, BLOCK_TOKENS) ? 1 : 0, "kv_init");
	e.tables = malloc((size_t)MAX_SEQS * SEQ_BLOCKS * 4);
	for (uint32_t s = 0; s < MAX_SEQS; s++) {
		for (uint32_t b = 0; b < SEQ_BLOCKS; b++)
			e.tables[s * SEQ_BLOCKS + b] = s * SEQ_BLOCKS + b;
		e.rows[s] = e.tables + (size_t)s * SEQ_BLOCKS;
	}
	decode_batches(&e);
	prefill(&e);
	e.ops->close(e.self);
	free(e.tables);
	return 0;
}
