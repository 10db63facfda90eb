/* SPDX-License-Identifier: MIT */
/*
 * bench-lut — does an exact table-lookup kernel beat the multiply-add kernels on AVX2?
 *
 * Table lookup (T-MAC, bitnet.cpp's TL kernels): a group of ternary weights indexes a table of
 * the partial sums its activations can make, and vpshufb looks up 32 of them at once. Exact
 * sums need 16-bit tables: two weights w0, w1 against activations a0, a1 make w0*a0 + w1*a1
 * in [-256, 256], so each table is a low-byte and a high-byte half of 16 entries (9 used,
 * index (w0 + 1) * 3 + (w1 + 1)), and a lookup is two vpshufb whose bytes vpunpck{l,h}bw
 * pairs into 16-bit values. (Three weights with a sign bit, bitnet.cpp's TL2, fit 14 entries
 * but need the sign applied: the same count of instructions per weight.)
 *
 * The kernel here: blocks of 16 weight rows, one 128-bit lane's pshufb indices each; for every
 * 8 weights of a row a 32-byte step holds the 16 rows' four group indices as nibbles (lane 0:
 * groups 0 and 2, lane 1: groups 1 and 3), so 2 bits a weight, as the T2 planes. Per step and
 * batch row: four table loads, four vpshufb, four unpacks, four 16-bit adds for 128
 * multiply-adds; the 16-bit sums are widened every 32 steps. The result is exact: y =
 * ((float)dot * scale) * inv_scale, the bits of every t2_gemm, which the run checks against
 * the avx2 kernels for every matrix and batch before it times anything.
 *
 * Timed: every ternary matrix of --layers layers of the 2B4T shape (random codes), against
 * 1, 16 and 256 token rows, the LUT kernel, the avx2 kernels and (where the CPU has them) the
 * avxvnni kernels in turn over --rounds rounds, split over the thread pool by row blocks.
 * Keys: lut_gmacs_tT (tables built per input, on the pool, then the lookups),
 * lut_lookups_only_gmacs_tT (the lookups alone: the method's upper bound), avx2_gmacs_tT,
 * avxvnni_gmacs_tT (medians), lut_over_avx2_tT and lut_lookups_only_over_avx2_tT (medians of
 * the rounds' ratios).
 */
#define _GNU_SOURCE
#include "bench_util.h"
#include "kernels.h"
#include "pool.h"
#include "quant.h"

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LUT_ROWS 16          /* rows of a block: a lane's 16 indices */
#define LUT_STEP 8           /* weights of a row per 32-byte step */
#define LUT_FLUSH_STEPS 32   /* 16-bit sums gain at most 512 a step: 64 would still fit */
#define LUT_COLS 4           /* batch rows a block meets together */
#define MAX_ROUNDS 16

/* Weights in the lookup layout: n_out rounded up to 16, n_in up to 8 (padding weights 0). */
struct lut_matrix {
	uint8_t *idx;            /* [n_out / 16][n_steps][32] */
	const float *scale;
	uint32_t n_in, n_out, n_steps;
};

/* Tables of one batch row: per step, four 32-byte vectors: low bytes of groups 0|1, high bytes
 * of groups 0|1, low bytes of groups 2|3, high bytes of groups 2|3 (lane 0 | lane 1). */
struct lut_tables {
	uint8_t *t;              /* [n_b][n_steps][4][32] */
	uint32_t n_steps;
};

static void *xalloc(size_t n)
{
	void *p = aligned_alloc(64, (n + 63) / 64 * 64);
	if (!p)
		abort();
	return p;
}

/* code c of weight k of T2 row r: w = c - 1 */
static void lut_pack(const struct bn_t2_matrix *w, struct lut_matrix *l)
{
	l->n_in = w->n_in;
	l->n_out = (w->n_out + LUT_ROWS - 1) / LUT_ROWS * LUT_ROWS;
	l->n_steps = (w->n_in + LUT_STEP - 1) / LUT_STEP;
	l->scale = w->scale;
	l->idx = xalloc((size_t)l->n_out / LUT_ROWS * l->n_steps * 32);
	uint8_t *codes = malloc((size_t)l->n_steps * LUT_STEP);
	for (uint32_t o = 0; o < l->n_out; o++) {
		memset(codes, 1, (size_t)l->n_steps * LUT_STEP);
		if (o < w->n_out)
			bn_t2_unpack(w->codes + (size_t)o * w->row_bytes, w->n_in, codes);
		uint8_t *blk = l->idx + (size_t)(o / LUT_ROWS) * l->n_steps * 32;
		for (uint32_t s = 0; s < l->n_steps; s++) {
			const uint8_t *c = codes + (size_t)s * LUT_STEP;
			uint8_t g[4];
			for (int i = 0; i < 4; i++)
				g[i] = (uint8_t)(c[2 * i] * 3 + c[2 * i + 1]);
			blk[(size_t)s * 32 + o % LUT_ROWS] = (uint8_t)(g[0] | g[2] << 4);
			blk[(size_t)s * 32 + 16 + o % LUT_ROWS] = (uint8_t)(g[1] | g[3] << 4);
		}
	}
	free(codes);
}

/* Batch row b's tables. */
static void lut_build_row(const struct bn_q8_rows *x, uint32_t b, uint32_t n_steps,
			  struct lut_tables *t)
{
	for (uint32_t s = 0; s < n_steps; s++) {
		uint8_t *v = t->t + ((size_t)b * n_steps + s) * 128;
		memset(v, 0, 128);
			for (int grp = 0; grp < 4; grp++) {
				uint32_t k = s * LUT_STEP + 2 * (uint32_t)grp;
				int a0 = k < x->k ? x->q[(size_t)b * x->k_pad + k] : 0;
				int a1 = k + 1 < x->k ? x->q[(size_t)b * x->k_pad + k + 1] : 0;
				/* groups 0, 1 in the first pair of vectors, lanes 0, 1; 2, 3 in the next */
				uint8_t *lo = v + (grp / 2) * 64 + (grp % 2) * 16, *hi = lo + 32;
				for (int i = 0; i < 9; i++) {
					int16_t val = (int16_t)((i / 3 - 1) * a0 + (i % 3 - 1) * a1);
					lo[i] = (uint8_t)((uint16_t)val & 0xff);
					hi[i] = (uint8_t)((uint16_t)val >> 8);
				}
			}
	}
}

struct tables_job {
	const struct bn_q8_rows *x;
	uint32_t n_steps;
	struct lut_tables *t;
};

static void tables_task(void *ctx, uint32_t b)
{
	const struct tables_job *j = ctx;
	lut_build_row(j->x, b, j->n_steps, j->t);
}

/* Every batch row's tables, split over the pool. */
static void lut_build_tables(struct bn_pool *pool, const struct bn_q8_rows *x, uint32_t n_b,
			     uint32_t n_steps, struct lut_tables *t)
{
	t->n_steps = n_steps;
	struct tables_job j = { x, n_steps, t };
	bn_pool_run(pool, n_b, tables_task, &j);
}

/* 16-bit sums of the lanes into 32 bits: lane 0 and lane 1 are other groups of the same rows. */
__attribute__((target("avx2"))) static inline __m256i widen_lanes(__m256i acc)
{
	return _mm256_add_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(acc)),
				_mm256_cvtepi16_epi32(_mm256_extracti128_si256(acc, 1)));
}

/* Block `blk` (16 rows) against batch rows [b0, b0 + n_cols), n_cols <= LUT_COLS. */
__attribute__((target("avx2"))) static inline void lut_block(const struct lut_matrix *l,
							       uint32_t blk, const struct lut_tables *t,
							       const struct bn_q8_rows *x, uint32_t b0,
							       const uint32_t n_cols, float *y,
							       uint32_t ldy, uint32_t n_out)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	__m256i lo32[LUT_COLS], hi32[LUT_COLS];
	for (uint32_t c = 0; c < n_cols; c++)
		lo32[c] = hi32[c] = _mm256_setzero_si256();
	const uint8_t *w = l->idx + (size_t)blk * l->n_steps * 32;
	for (uint32_t s0 = 0; s0 < l->n_steps; s0 += LUT_FLUSH_STEPS) {
		uint32_t s1 = s0 + LUT_FLUSH_STEPS < l->n_steps ? s0 + LUT_FLUSH_STEPS : l->n_steps;
		__m256i lo16[LUT_COLS], hi16[LUT_COLS];
		for (uint32_t c = 0; c < n_cols; c++)
			lo16[c] = hi16[c] = _mm256_setzero_si256();
		for (uint32_t s = s0; s < s1; s++) {
			__m256i wv = _mm256_load_si256((const __m256i *)(w + (size_t)s * 32));
			__m256i ia = _mm256_and_si256(wv, m4);
			__m256i ib = _mm256_and_si256(_mm256_srli_epi16(wv, 4), m4);
			for (uint32_t c = 0; c < n_cols; c++) {
				const __m256i *tv = (const __m256i *)(t->t + ((size_t)(b0 + c) * t->n_steps + s) * 128);
				__m256i la = _mm256_shuffle_epi8(_mm256_load_si256(tv), ia);
				__m256i ha = _mm256_shuffle_epi8(_mm256_load_si256(tv + 1), ia);
				__m256i lb = _mm256_shuffle_epi8(_mm256_load_si256(tv + 2), ib);
				__m256i hb = _mm256_shuffle_epi8(_mm256_load_si256(tv + 3), ib);
				lo16[c] = _mm256_add_epi16(lo16[c], _mm256_unpacklo_epi8(la, ha));
				hi16[c] = _mm256_add_epi16(hi16[c], _mm256_unpackhi_epi8(la, ha));
				lo16[c] = _mm256_add_epi16(lo16[c], _mm256_unpacklo_epi8(lb, hb));
				hi16[c] = _mm256_add_epi16(hi16[c], _mm256_unpackhi_epi8(lb, hb));
			}
		}
		for (uint32_t c = 0; c < n_cols; c++) {
			lo32[c] = _mm256_add_epi32(lo32[c], widen_lanes(lo16[c])); /* rows 0-7 */
			hi32[c] = _mm256_add_epi32(hi32[c], widen_lanes(hi16[c])); /* rows 8-15 */
		}
	}
	for (uint32_t c = 0; c < n_cols; c++) {
		int32_t dot[LUT_ROWS];
		_mm256_storeu_si256((__m256i *)dot, lo32[c]);
		_mm256_storeu_si256((__m256i *)(dot + 8), hi32[c]);
		for (uint32_t j = 0; j < LUT_ROWS; j++) {
			uint32_t o = blk * LUT_ROWS + j;
			if (o < n_out)
				y[(size_t)(b0 + c) * ldy + o] =
					((float)dot[j] * l->scale[o]) * x->inv_scale[b0 + c];
		}
	}
}

static void lut_gemm(const struct lut_matrix *l, uint32_t blk0, uint32_t blk1,
		     const struct lut_tables *t, const struct bn_q8_rows *x, uint32_t n_b, float *y,
		     uint32_t ldy, uint32_t n_out)
{
	for (uint32_t blk = blk0; blk < blk1; blk++)
		for (uint32_t b = 0; b < n_b; b += LUT_COLS)
			switch (n_b - b < LUT_COLS ? n_b - b : LUT_COLS) {
			case 4: lut_block(l, blk, t, x, b, 4, y, ldy, n_out); break;
			case 3: lut_block(l, blk, t, x, b, 3, y, ldy, n_out); break;
			case 2: lut_block(l, blk, t, x, b, 2, y, ldy, n_out); break;
			default: lut_block(l, blk, t, x, b, 1, y, ldy, n_out); break;
			}
}

/* ---- the model's matrices and a timed pass over them --------------------------------------- */

struct mat {
	struct bn_t2_matrix t2;
	struct lut_matrix lut;
};

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static void make_mat(struct mat *m, uint32_t n_in, uint32_t n_out)
{
	uint32_t rb = (uint32_t)bn_t2_row_bytes(n_in);
	uint8_t *codes = xalloc((size_t)rb * n_out), *row = malloc(n_in);
	float *scale = malloc(n_out * sizeof(float));
	for (uint32_t o = 0; o < n_out; o++) {
		for (uint32_t k = 0; k < n_in; k++)
			row[k] = (uint8_t)(next_u32() % 3);
		bn_t2_pack(row, n_in, codes + (size_t)o * rb);
		scale[o] = 0.5f + (float)(next_u32() % 1000) / 1000.0f;
	}
	free(row);
	m->t2 = (struct bn_t2_matrix){ .codes = codes, .scale = scale, .n_in = n_in,
				       .n_out = n_out, .row_bytes = rb };
	lut_pack(&m->t2, &m->lut);
}

/* K_LUT_ONLY: the lookups with tables already built (an upper bound for the method). */
enum kind { K_LUT, K_TABLE, K_LUT_ONLY };

struct pass_job {
	enum kind kind;
	const struct bn_kernels *k;
	const struct mat *m;
	const struct bn_q8_rows *x;
	const struct lut_tables *t;
	uint32_t n_b, chunk;
	float *y;
};

/* Task i: rows [i * chunk, +chunk) (a multiple of 16). */
static void pass_task(void *ctx, uint32_t i)
{
	const struct pass_job *j = ctx;
	uint32_t o0 = i * j->chunk, n_out = j->m->t2.n_out;
	uint32_t o1 = o0 + j->chunk < n_out ? o0 + j->chunk : n_out;
	if (j->kind != K_TABLE)
		lut_gemm(&j->m->lut, o0 / LUT_ROWS, (o1 + LUT_ROWS - 1) / LUT_ROWS, j->t, j->x, j->n_b,
			 j->y, n_out, n_out);
	else
		j->k->t2_gemm(&j->m->t2, o0, o1, j->x, j->n_b, j->y, n_out);
}

static void run_matrix(struct bn_pool *pool, enum kind kind, const struct bn_kernels *k,
		       const struct mat *m, const struct bn_q8_rows *x, struct lut_tables *t,
		       uint32_t n_b, float *y)
{
	struct bn_q8_rows xs = *x;
	xs.k = m->t2.n_in;
	if (kind == K_LUT) /* the tables are the lookup kernel's work, built per input */
		lut_build_tables(pool, &xs, n_b, m->lut.n_steps, t);
	else if (kind == K_LUT_ONLY)
		t->n_steps = m->lut.n_steps; /* what the tables hold does not change the time */
	uint32_t tasks = 4 * bn_pool_threads(pool);
	uint32_t chunk = (m->t2.n_out + tasks - 1) / tasks;
	chunk = (chunk + LUT_ROWS - 1) / LUT_ROWS * LUT_ROWS;
	struct pass_job j = { kind, k, m, &xs, t, n_b, chunk, y };
	bn_pool_run(pool, (m->t2.n_out + chunk - 1) / chunk, pass_task, &j);
}

int main(int argc, char **argv)
{
	uint32_t layers = 8, rounds = 5;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--layers"))
			layers = (uint32_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = (uint32_t)atoi(argv[i + 1]);
	}
	if (argc % 2 == 0 || layers < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
		fprintf(stderr, "usage: bench-lut [--layers N] [--rounds N (<= %d)]\n", MAX_ROUNDS);
		return 2;
	}
	const struct bn_kernels *avx2 = bn_kernels_select("avx2"), *vnni = bn_kernels_select("avxvnni");
	if (!avx2) {
		fprintf(stderr, "bench-lut: this CPU has no AVX2\n");
		return 1;
	}
	/* the 2B4T layer: q, o 2560 x 2560; k, v 640 x 2560; gate, up 6912 x 2560; down 2560 x 6912 */
	static const uint32_t shapes[7][2] = { { 2560, 2560 }, { 2560, 640 }, { 2560, 640 },
					       { 2560, 2560 }, { 2560, 6912 }, { 2560, 6912 },
					       { 6912, 2560 } };
	uint32_t n_mats = 7 * layers;
	struct mat *mats = calloc(n_mats, sizeof(*mats));
	double macs = 0;
	for (uint32_t i = 0; i < n_mats; i++) {
		make_mat(&mats[i], shapes[i % 7][0], shapes[i % 7][1]);
		macs += (double)shapes[i % 7][0] * shapes[i % 7][1];
	}
	struct bn_pool *pool = bn_pool_new(0);
	const uint32_t toks[] = { 1, 16, 256 }, k_pad = 7168;
	struct bn_q8_rows x = { .q = xalloc((size_t)256 * k_pad), .inv_scale = malloc(256 * sizeof(float)),
				.sum = calloc(256, sizeof(int32_t)), .k_pad = k_pad };
	for (size_t i = 0; i < (size_t)256 * k_pad; i++)
		x.q[i] = (int8_t)(next_u32() % 256 - 128);
	for (uint32_t b = 0; b < 256; b++)
		x.inv_scale[b] = 1.0f / (float)(b + 1);
	struct lut_tables t = { .t = xalloc((size_t)256 * (k_pad / LUT_STEP) * 128) };
	float *y = xalloc((size_t)256 * 6912 * sizeof(float)), *want = xalloc((size_t)256 * 6912 * sizeof(float));
	printf("layers=%u\nrounds=%u\nthreads=%u\n", layers, rounds, bn_pool_threads(pool));
	for (size_t ti = 0; ti < sizeof(toks) / sizeof(toks[0]); ti++) {
		uint32_t T = toks[ti];
		/* the exact sums first: every matrix's outputs, LUT against avx2, to the bit */
		for (uint32_t m = 0; m < 7; m++) {
			for (uint32_t b = 0; b < T; b++) {
				/* the sums t2_gemm subtracts: the rows' own (k differs per matrix) */
				int32_t s = 0;
				for (uint32_t k = 0; k < mats[m].t2.n_in; k++)
					s += x.q[(size_t)b * k_pad + k];
				x.sum[b] = s;
			}
			run_matrix(pool, K_TABLE, avx2, &mats[m], &x, &t, T, want);
			memset(y, 0xff, (size_t)T * mats[m].t2.n_out * sizeof(float));
			run_matrix(pool, K_LUT, NULL, &mats[m], &x, &t, T, y);
			if (memcmp(want, y, (size_t)T * mats[m].t2.n_out * sizeof(float)) != 0) {
				fprintf(stderr, "bench-lut: matrix %u, %u rows: the LUT kernel's outputs differ\n", m, T);
				return 1;
			}
		}
		/* runs: the LUT kernel with its tables, its lookups alone, avx2, avxvnni */
		static const enum kind kinds[4] = { K_LUT, K_LUT_ONLY, K_TABLE, K_TABLE };
		static const char *const names[4] = { "lut", "lut_lookups_only", "avx2", "avxvnni" };
		double g[4][MAX_ROUNDS], ratio[2][MAX_ROUNDS];
		int n_kinds = vnni ? 4 : 3;
		for (uint32_t r = 0; r < rounds; r++) {
			for (int i = 0; i < n_kinds; i++) {
				int which = (i + (int)r) % n_kinds;
				double t0 = (double)bench_now_ns();
				for (uint32_t m = 0; m < n_mats; m++)
					run_matrix(pool, kinds[which], which == 3 ? vnni : avx2, &mats[m], &x,
						   &t, T, y);
				g[which][r] = macs * T / ((double)bench_now_ns() - t0);
			}
			ratio[0][r] = g[0][r] / g[2][r];
			ratio[1][r] = g[1][r] / g[2][r];
		}
		for (int i = 0; i < n_kinds; i++)
			printf("%s_gmacs_t%u=%.1f\n", names[i], T, bench_median(g[i], (int)rounds));
		printf("lut_over_avx2_t%u=%.3f\nlut_lookups_only_over_avx2_t%u=%.3f\n", T,
		       bench_median(ratio[0], (int)rounds), T, bench_median(ratio[1], (int)rounds));
		fflush(stdout);
	}
	return 0;
}
