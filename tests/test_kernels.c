/* SPDX-License-Identifier: MIT */
/*
 * The CPU kernels (kernels/cpu/kernels.h) and the thread pool (kernels/cpu/pool.h), against
 * oracles written here, not taken from kernels_scalar.c:
 *  - t2_gemm: ternary weights kept as int8 -1/0/+1, the activations as the int8 rows the
 *    quantizer made, summed in int32 with plain loops. Every variant this CPU runs must equal
 *    ((float)isum * scale[o]) * inv_scale[b] exactly: the integer part has one right answer
 *    and the two float products are the contract's;
 *  - bn_quantize_rows: x * 127 / absmax rounded half to even, computed in double;
 *  - f_gemm and attend: double-precision sums, within the tolerances stated at each test (the
 *    variants sum floats in different orders), and bit-identical within one variant whatever
 *    the batch, the output range, the call, or the garbage past the cache's end;
 *  - bn_kernels_select and $BITNET_KERNELS;
 *  - the pool: every task exactly once, many jobs back to back, prompt shutdown.
 * Outputs the kernels must not touch are filled with a sentinel and checked afterwards;
 * inputs they must not read (row padding, cache rows past L) hold NaN.
 * A variant this CPU cannot run is skipped with a note.
 */
#include "kernels.h"
#include "pool.h"
#include "quant.h"

#include "testutil.h"

#include "ckassert.h"
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ */
/* Helpers                                                                                     */
/* ------------------------------------------------------------------------------------------ */

#define variant_names bn_kernel_variant_names
#define N_VARIANTS BN_KERNEL_VARIANTS

/* Each architecture's tables, in bn_kernel_variant_names' order, with the features each needs;
 * the T3 kernel the tables that have one give (t3_table: the first of them). */
#if defined(__aarch64__)
static const struct bn_kernels *const tables[N_VARIANTS] = {
	&bn_kernels_scalar, &bn_kernels_neon, &bn_kernels_dotprod, &bn_kernels_i8mm
};

static int cpu_runs(const struct bn_cpu_features *f, int i)
{
	return i == 0 || (i == 1 ? f->neon : i == 2 ? f->dotprod : f->i8mm);
}

static void check_feature_order(const struct bn_cpu_features *f)
{
	ck_assert(!f->dotprod || f->neon);
	ck_assert(!f->i8mm || f->dotprod);
}

static bn_t3_gemm_fn t3_of_table(const struct bn_cpu_features *f, int i)
{
	return i >= 2 && f->dotprod ? bn_t3_gemm_dotprod : NULL;
}
#define T3_SIMD_TABLE "dotprod"
#define T3_SIMD_NAME "dotprod"
#else
static const struct bn_kernels *const tables[N_VARIANTS] = {
	&bn_kernels_scalar, &bn_kernels_avx2, &bn_kernels_avxvnni, &bn_kernels_avx512
};

static int cpu_runs(const struct bn_cpu_features *f, int i)
{
	return i == 0 || (i == 1 ? f->avx2_fma_f16c : i == 2 ? f->avx_vnni : f->avx512_vnni);
}

static void check_feature_order(const struct bn_cpu_features *f)
{
	ck_assert(!f->avx512_vnni || f->avx2_fma_f16c);
	ck_assert(!f->avx_vnni || f->avx2_fma_f16c);
}

static bn_t3_gemm_fn t3_of_table(const struct bn_cpu_features *f, int i)
{
	return i == 3 && f->avx512_vbmi ? bn_t3_gemm_vbmi : NULL;
}
#define T3_SIMD_TABLE "avx512vnni"
#define T3_SIMD_NAME "vbmi"
#endif

static const uint32_t batch_sizes[] = { 1, 2, 3, 4, 5, 7, 16, 33, 64 };
#define N_BATCH_SIZES (sizeof(batch_sizes) / sizeof(batch_sizes[0]))

/* The batch sizes checked in a reduced run (testutil.h: tu_reduced): every tile width and
 * remainder of every variant (1 to 9: the NEON tiles are 4, 2x2 blocks and 8 wide), a batch
 * block's border (16, 33), and under a sanitizer also the largest (64: the buffers' ends);
 * natively and unsanitized every one. */
static int batch_sampled(uint32_t n_b)
{
	return !tu_reduced() || n_b <= 9 || n_b == 16 || n_b == 33 ||
	       (!tu_emulated() && n_b == batch_sizes[N_BATCH_SIZES - 1]);
}
#define MAX_B 64

/* A bit pattern no kernel computes: a NaN with a payload. */
#define SENTINEL_BITS 0x7fc0deadu

static uint32_t float_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	return u;
}

static float bits_float(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

static void fill_sentinel(float *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] = bits_float(SENTINEL_BITS);
}

static int is_sentinel(float f)
{
	return float_bits(f) == SENTINEL_BITS;
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	ck_assert_ptr_nonnull(p);
	return p;
}

/* The variant `_i` of a loop test, or NULL (with a note) when this CPU cannot run it. */
static const struct bn_kernels *variant(int i)
{
	const struct bn_kernels *k = bn_kernels_select(variant_names[i]);
	if (!k) {
		printf("SKIP: %s kernels (this CPU cannot run them)\n", variant_names[i]);
		fflush(stdout);
	}
	return k;
}

static void q8_alloc(struct bn_q8_rows *x, uint32_t n, uint32_t k)
{
	x->k = k;
	x->k_pad = bn_q8_k_pad(k); /* whole T2 and T3 chunks, as the forward pass pads */
	x->q = aligned_alloc(64, (size_t)n * x->k_pad);
	x->inv_scale = xmalloc(n * sizeof(float));
	x->sum = xmalloc(n * sizeof(int32_t));
	x->bsum = NULL;
	ck_assert_ptr_nonnull(x->q);
	memset(x->q, 0x5a, (size_t)n * x->k_pad); /* the quantizer must zero the padding */
}

static void q8_free(struct bn_q8_rows *x)
{
	free(x->q);
	free(x->inv_scale);
	free(x->sum);
}

/* ------------------------------------------------------------------------------------------ */
/* t2_gemm                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* A ternary matrix with its oracle copy: w[o][k] in {-1, 0, +1}. */
struct t2_case {
	uint32_t n_in, n_out;
	int8_t *w;
	uint8_t *codes;
	float *scale;
	struct bn_t2_matrix m;
};

static void t2_case_new(struct t2_case *c, uint32_t n_in, uint32_t n_out)
{
	c->n_in = n_in;
	c->n_out = n_out;
	c->w = xmalloc((size_t)n_in * n_out);
	uint32_t row_bytes = (uint32_t)bn_t2_row_bytes(n_in);
	c->codes = xmalloc((size_t)row_bytes * n_out);
	c->scale = xmalloc(n_out * sizeof(float));
	uint8_t *row_codes = xmalloc(n_in);
	for (uint32_t o = 0; o < n_out; o++) {
		int8_t *w = c->w + (size_t)o * n_in;
		for (uint32_t k = 0; k < n_in; k++) {
			uint32_t r = tu_rng_next() % 4;
			/* rows 0 and 1 all +1 and all -1: the largest sums either way */
			w[k] = o == 0 ? 1 : o == 1 ? -1 : r == 0 ? 0 : r == 1 ? 1 : -1;
			row_codes[k] = (uint8_t)(w[k] + 1);
		}
		bn_t2_pack(row_codes, n_in, c->codes + (size_t)o * row_bytes);
		c->scale[o] = tu_rng_float(0.01f, 2.0f);
	}
	free(row_codes);
	c->m = (struct bn_t2_matrix){ .codes = c->codes, .scale = c->scale, .n_in = n_in,
				      .n_out = n_out, .row_bytes = row_bytes };
}

static void t2_case_free(struct t2_case *c)
{
	free(c->w);
	free(c->codes);
	free(c->scale);
}

/* isum[b][o] = sum_k w[o][k] * q[b][k], for b < n_b. */
static int32_t *t2_oracle(const struct t2_case *c, const struct bn_q8_rows *x, uint32_t n_b)
{
	int32_t *isum = xmalloc((size_t)n_b * c->n_out * sizeof(int32_t));
	for (uint32_t b = 0; b < n_b; b++)
		for (uint32_t o = 0; o < c->n_out; o++) {
			int32_t s = 0;
			const int8_t *w = c->w + (size_t)o * c->n_in;
			const int8_t *q = x->q + (size_t)b * x->k_pad;
			for (uint32_t k = 0; k < c->n_in; k++)
				s += (int32_t)w[k] * q[k];
			isum[(size_t)b * c->n_out + o] = s;
		}
	return isum;
}

/* One call: y[b][o] exact for b < n_b and o in [o0, o1), every other entry untouched. */
static void t2_check_call(const struct bn_kernels *kern, const struct t2_case *c,
			  const struct bn_q8_rows *x, const int32_t *isum, const char *what,
			  uint32_t n_b, uint32_t o0, uint32_t o1)
{
	uint32_t n_out = c->n_out, ldy = n_out + 5;
	float *y = xmalloc((size_t)(n_b + 2) * ldy * sizeof(float));
	fill_sentinel(y, (size_t)(n_b + 2) * ldy);
	kern->t2_gemm(&c->m, o0, o1, x, n_b, y, ldy);
	for (uint32_t b = 0; b < n_b + 2; b++)
		for (uint32_t o = 0; o < ldy; o++) {
			float got = y[(size_t)b * ldy + o];
			if (b >= n_b || o < o0 || o >= o1) {
				ck_assert_msg(is_sentinel(got),
					      "%s %s n_in %u n_b %u [%u,%u): y[%u][%u] written",
					      kern->name, what, c->n_in, n_b, o0, o1, b, o);
				continue;
			}
			int32_t is = isum[(size_t)b * n_out + o];
			float want = ((float)is * c->scale[o]) * x->inv_scale[b];
			ck_assert_msg(float_bits(got) == float_bits(want),
				      "%s %s n_in %u n_b %u [%u,%u): y[%u][%u] = %.9g, want %.9g (isum %d)",
				      kern->name, what, c->n_in, n_b, o0, o1, b, o, got, want, is);
		}
	free(y);
}

/* Every batch size and a few output ranges. */
static void t2_check_all(const struct bn_kernels *kern, const struct t2_case *c,
			 const struct bn_q8_rows *x, const int32_t *isum, const char *what)
{
	uint32_t n_out = c->n_out;
	uint32_t ranges[][2] = { { 0, n_out }, { 1, n_out }, { n_out / 2, n_out / 2 + 1 },
				 { 3, n_out < 10 ? n_out : 10 }, { 0, n_out - 1 } };
	for (size_t bi = 0; bi < N_BATCH_SIZES; bi++)
		for (size_t ri = 0; ri < sizeof(ranges) / sizeof(ranges[0]); ri++) {
			uint32_t o0 = ranges[ri][0], o1 = ranges[ri][1];
			if (o0 < o1 && batch_sampled(batch_sizes[bi]))
				t2_check_call(kern, c, x, isum, what, batch_sizes[bi], o0, o1);
		}
}

/* No batch rows or no outputs: nothing written. */
static void t2_check_empty(const struct bn_kernels *kern, const struct t2_case *c,
			   const struct bn_q8_rows *x)
{
	float y[4 * 16];
	fill_sentinel(y, 4 * 16);
	kern->t2_gemm(&c->m, 0, c->n_out, x, 0, y, 16);
	kern->t2_gemm(&c->m, 2, 2, x, 3, y, 16);
	for (int i = 0; i < 4 * 16; i++)
		ck_assert_msg(is_sentinel(y[i]), "%s: an empty t2_gemm wrote y[%d]", kern->name, i);
}

/* 6912 x 157: more rows than one cache block holds (t2_blocking.h: 151 rows of 1,728 code
 * bytes, 148 for the four-row tiles of AVX-512), so outputs on both sides of a block border are checked; with
 * 1000 inputs a batch of 33 or 64 spans several batch blocks. */
static const uint32_t t2_shapes[][2] = {
	{ 256, 13 }, { 512, 4 }, { 768, 9 }, { 1000, 13 }, { 6912, 5 }, { 6912, 157 },
};

/* Activations from floats through bn_quantize_rows, as the forward pass makes them. */
START_TEST(t2_gemm_exact)
{
	const struct bn_kernels *kern = variant(_i);
	if (!kern)
		return;
	for (size_t si = 0; si < sizeof(t2_shapes) / sizeof(t2_shapes[0]); si++) {
		uint32_t n_in = t2_shapes[si][0], n_out = t2_shapes[si][1], ldx = n_in + 3;
		tu_rng_seed(100 + si);
		struct t2_case c;
		t2_case_new(&c, n_in, n_out);
		float *xf = xmalloc((size_t)MAX_B * ldx * sizeof(float));
		for (uint32_t b = 0; b < MAX_B; b++)
			for (uint32_t k = 0; k < ldx; k++) {
				float v = tu_rng_float(-4.0f, 4.0f);
				/* rows 2 and 3 constant: every q is +127 or -127 */
				v = b == 2 ? 7.0f : b == 3 ? -7.0f : b == 4 ? 0.0f : v;
				xf[(size_t)b * ldx + k] = k < n_in ? v : NAN;
			}
		struct bn_q8_rows x;
		q8_alloc(&x, MAX_B, n_in);
		bn_quantize_rows(xf, ldx, MAX_B, &x);
		int32_t *isum = t2_oracle(&c, &x, MAX_B);
		t2_check_all(kern, &c, &x, isum, "quantized");
		t2_check_empty(kern, &c, &x);
		free(isum);
		q8_free(&x);
		free(xf);
		t2_case_free(&c);
	}
}
END_TEST

/* n rows of x over the whole int8 range (row 0 all -128, row 1 all +127, the rest random),
 * zero past x->k, with their sums and random scales. */
static void fill_raw_int8(struct bn_q8_rows *x, uint32_t n)
{
	for (uint32_t b = 0; b < n; b++) {
		int8_t *q = x->q + (size_t)b * x->k_pad;
		int32_t sum = 0;
		for (uint32_t k = 0; k < x->k_pad; k++) {
			int v = (int)(tu_rng_next() % 256) - 128;
			v = b == 0 ? -128 : b == 1 ? 127 : v;
			q[k] = (int8_t)(k < x->k ? v : 0);
			sum += q[k];
		}
		x->sum[b] = sum;
		x->inv_scale[b] = tu_rng_float(1e-4f, 0.1f);
	}
}

/* Any int8 row is valid input, -128 included (the quantizer never makes it). */
START_TEST(t2_gemm_full_int8_range)
{
	const struct bn_kernels *kern = variant(_i);
	if (!kern)
		return;
	for (size_t si = 0; si < sizeof(t2_shapes) / sizeof(t2_shapes[0]); si++) {
		uint32_t n_in = t2_shapes[si][0], n_out = t2_shapes[si][1];
		tu_rng_seed(200 + si);
		struct t2_case c;
		t2_case_new(&c, n_in, n_out);
		struct bn_q8_rows x;
		q8_alloc(&x, MAX_B, n_in);
		fill_raw_int8(&x, MAX_B);
		int32_t *isum = t2_oracle(&c, &x, MAX_B);
		t2_check_all(kern, &c, &x, isum, "raw int8");
		free(isum);
		q8_free(&x);
		t2_case_free(&c);
	}
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* t2g_gemm: one scale per group of weights                                                    */
/* ------------------------------------------------------------------------------------------ */

/* The t2_case's matrix with group scales instead of row scales: negative, zero and tiny ones
 * among them, and in row 2 every other group all zero weights. */
static float *t2g_case_group(struct t2_case *c, uint32_t group)
{
	uint32_t n_groups = c->n_in / group;
	float *gs = xmalloc((size_t)c->n_out * n_groups * sizeof(float));
	for (uint32_t o = 0; o < c->n_out; o++)
		for (uint32_t g = 0; g < n_groups; g++) {
			uint32_t r = tu_rng_next() % 8;
			float v = tu_rng_float(0.001f, 3.0f);
			gs[(size_t)o * n_groups + g] = r == 0 ? -v : r == 1 ? 0.0f : r == 2 ? 1e-30f : v;
			if (o == 2 && g % 2)
				memset(c->w + (size_t)o * c->n_in + g * group, 0, group);
		}
	uint8_t *codes = xmalloc(c->n_in);
	for (uint32_t k = 0; c->n_out > 2 && k < c->n_in; k++)
		codes[k] = (uint8_t)(c->w[2 * (size_t)c->n_in + k] + 1);
	if (c->n_out > 2)
		bn_t2_pack(codes, c->n_in, c->codes + 2 * (size_t)c->m.row_bytes);
	free(codes);
	c->m.scale = NULL;
	c->m.gscale = gs;
	c->m.group = group;
	return gs;
}

/* The contract from the oracle's integer sums of each group (not from codes and block sums). */
static float t2g_want(const struct t2_case *c, const struct bn_q8_rows *x, uint32_t o, uint32_t b)
{
	uint32_t group = c->m.group, n_groups = c->n_in / group;
	const int8_t *w = c->w + (size_t)o * c->n_in, *q = x->q + (size_t)b * x->k_pad;
	float s = 0.0f;
	for (uint32_t g = 0; g < n_groups; g++) {
		int32_t a = 0;
		for (uint32_t k = g * group; k < (g + 1) * group; k++)
			a += (int32_t)w[k] * q[k];
		s = fmaf((float)a, c->m.gscale[(size_t)o * n_groups + g], s);
	}
	return s * x->inv_scale[b];
}

static void t2g_check_call(const struct bn_kernels *kern, const struct t2_case *c,
			   const struct bn_q8_rows *x, uint32_t n_b, uint32_t o0, uint32_t o1)
{
	uint32_t ldy = c->n_out + 3;
	float *y = xmalloc((size_t)(n_b + 1) * ldy * sizeof(float));
	fill_sentinel(y, (size_t)(n_b + 1) * ldy);
	kern->t2g_gemm(&c->m, o0, o1, x, n_b, y, ldy);
	for (uint32_t b = 0; b < n_b + 1; b++)
		for (uint32_t o = 0; o < ldy; o++) {
			float got = y[(size_t)b * ldy + o];
			if (b >= n_b || o < o0 || o >= o1) {
				ck_assert_msg(is_sentinel(got), "%s t2g n_in %u group %u n_b %u: y[%u][%u] written",
					      kern->name, c->n_in, c->m.group, n_b, b, o);
				continue;
			}
			float want = t2g_want(c, x, o, b);
			ck_assert_msg(float_bits(got) == float_bits(want),
				      "%s t2g n_in %u group %u n_b %u [%u,%u): y[%u][%u] = %.9g, want %.9g",
				      kern->name, c->n_in, c->m.group, n_b, o0, o1, b, o, got, want);
		}
	free(y);
}

/* 384 and 1000 + 24: rows that end inside a chunk (the last group is half a chunk); 6912 x 157
 * crosses the cache blocks as for t2_gemm. */
static const uint32_t t2g_shapes[][3] = {
	{ 128, 5, 128 }, { 384, 13, 128 }, { 1024, 9, 256 }, { 1024, 9, 512 },
	{ 2560, 37, 128 }, { 6912, 157, 256 },
};

/* Every variant to the bit of the contract, for activations from floats and raw int8 rows
 * over the whole range (-128 included), every batch size and a few output ranges. */
START_TEST(t2g_gemm_exact)
{
	const struct bn_kernels *kern = variant(_i);
	if (!kern)
		return;
	for (size_t si = 0; si < sizeof(t2g_shapes) / sizeof(t2g_shapes[0]); si++) {
		uint32_t n_in = t2g_shapes[si][0], n_out = t2g_shapes[si][1];
		tu_rng_seed(300 + si);
		struct t2_case c;
		t2_case_new(&c, n_in, n_out);
		float *gs = t2g_case_group(&c, t2g_shapes[si][2]);
		struct bn_q8_rows x;
		q8_alloc(&x, MAX_B, n_in);
		x.bsum = xmalloc((size_t)MAX_B * bn_q8_blocks(x.k_pad) * sizeof(int32_t));
		for (int raw = 0; raw < 2; raw++) {
			if (raw) {
				fill_raw_int8(&x, MAX_B);
			} else {
				float *xf = xmalloc((size_t)MAX_B * n_in * sizeof(float));
				for (size_t i = 0; i < (size_t)MAX_B * n_in; i++)
					xf[i] = tu_rng_float(-4.0f, 4.0f);
				bn_quantize_rows(xf, n_in, MAX_B, &x);
				free(xf);
			}
			bn_q8_block_sums(&x, MAX_B);
			uint32_t ranges[][2] = { { 0, n_out }, { 1, n_out }, { n_out / 2, n_out / 2 + 1 },
						 { 3, n_out < 10 ? n_out : 10 } };
			for (size_t bi = 0; bi < N_BATCH_SIZES; bi++)
				for (size_t ri = 0; ri < 4; ri++)
					if (ranges[ri][0] < ranges[ri][1])
						t2g_check_call(kern, &c, &x, batch_sizes[bi], ranges[ri][0],
							       ranges[ri][1]);
		}
		free(x.bsum);
		q8_free(&x);
		free(gs);
		t2_case_free(&c);
	}
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The T3 (base-3) kernel                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* Shapes for T3: a row shorter than one chunk, one chunk, rows that end inside a chunk (the
 * padding digits), the 2B4T rows (2560 = 8 chunks, 6912 = 21.6), and enough rows to cross
 * the prefetch's end-of-matrix guard. */
static const uint32_t t3_shapes[][2] = {
	{ 100, 7 }, { 320, 5 }, { 1000, 13 }, { 2560, 9 }, { 6912, 5 }, { 640, 400 },
};

/* The T3 kernels: the scalar twin, and the SIMD kernel where this CPU has it (VBMI on x86-64,
 * dotprod on aarch64; NULL otherwise: on a CPU without them their table itself is NULL). */
static bn_t3_gemm_fn t3_variant(int i, const char **name)
{
	*name = i ? T3_SIMD_NAME : "scalar";
	return i ? bn_t3_kernel(bn_kernels_select(T3_SIMD_TABLE)) : bn_t3_gemm_scalar;
}

/* Which tables have a T3 kernel: the AVX-512 one on a CPU with VBMI, the dotprod and i8mm
 * ones on a CPU with dotprod; none for a table this CPU cannot run (bn_kernels_select's NULL),
 * which must not crash the caller. */
START_TEST(t3_kernel_per_table)
{
	struct bn_cpu_features f;
	bn_cpu_detect(&f);
	ck_assert_ptr_null(bn_t3_kernel(NULL));
	for (int i = 0; i < N_VARIANTS; i++) {
		ck_assert_ptr_eq(bn_t3_kernel(tables[i]), t3_of_table(&f, i));
		ck_assert_ptr_eq(bn_t3_kernel(bn_kernels_select(variant_names[i])),
				 cpu_runs(&f, i) ? t3_of_table(&f, i) : NULL);
	}
}
END_TEST

#define T3_MAX_B 40

/* One call: y[b][o] exact for b < n_b and o in [o0, o1), every other entry untouched. */
static void t3_check_call(bn_t3_gemm_fn t3, const char *name, const struct t2_case *c,
			  const struct bn_t3_matrix *m, const struct bn_q8_rows *x,
			  const int32_t *isum, uint32_t n_b, uint32_t o0, uint32_t o1)
{
	uint32_t n_out = c->n_out, ldy = n_out + 2;
	float *y = xmalloc((size_t)(n_b + 1) * ldy * sizeof(float));
	fill_sentinel(y, (size_t)(n_b + 1) * ldy);
	t3(m, o0, o1, x, n_b, y, ldy);
	for (uint32_t b = 0; b <= n_b; b++)
		for (uint32_t o = 0; o < ldy; o++) {
			float got = y[(size_t)b * ldy + o];
			if (b >= n_b || o < o0 || o >= o1) {
				ck_assert_msg(is_sentinel(got), "t3 %s n_in %u n_b %u: y[%u][%u] written",
					      name, c->n_in, n_b, b, o);
				continue;
			}
			float want = ((float)isum[(size_t)b * n_out + o] * c->scale[o]) * x->inv_scale[b];
			ck_assert_msg(float_bits(got) == float_bits(want),
				      "t3 %s n_in %u n_b %u: y[%u][%u] = %.9g, want %.9g", name, c->n_in,
				      n_b, b, o, got, want);
		}
	free(y);
}

/* Each T3 kernel against the oracle of t2_gemm_exact: the same bits as ((float)isum *
 * scale[o]) * inv_scale[b] for every batch of 1..40 rows, the whole int8 range of
 * activations, output ranges that start and end anywhere, and no batch rows or outputs. */
START_TEST(t3_gemm_exact)
{
	const char *name;
	bn_t3_gemm_fn t3 = t3_variant(_i, &name);
	if (!t3) {
		printf("SKIP: T3 %s kernel (this CPU has no " BN_T3_NEEDS ")\n", name);
		return;
	}
	for (size_t si = 0; si < sizeof(t3_shapes) / sizeof(t3_shapes[0]); si++) {
		uint32_t n_in = t3_shapes[si][0], n_out = t3_shapes[si][1];
		tu_rng_seed(400 + si);
		struct t2_case c;
		t2_case_new(&c, n_in, n_out);
		uint32_t row_bytes = (uint32_t)bn_t3_row_bytes(n_in);
		uint8_t *codes = aligned_alloc(64, (size_t)n_out * row_bytes), *row = xmalloc(n_in);
		ck_assert_ptr_nonnull(codes);
		for (uint32_t o = 0; o < n_out; o++) {
			for (uint32_t k = 0; k < n_in; k++)
				row[k] = (uint8_t)(c.w[(size_t)o * n_in + k] + 1);
			bn_t3_pack(row, n_in, codes + (size_t)o * row_bytes);
		}
		struct bn_t3_matrix m = { .codes = codes, .scale = c.scale, .n_in = n_in,
					  .n_out = n_out, .row_bytes = row_bytes };
		struct bn_q8_rows x;
		q8_alloc(&x, T3_MAX_B, n_in);
		fill_raw_int8(&x, T3_MAX_B);
		int32_t *isum = t2_oracle(&c, &x, T3_MAX_B);
		for (uint32_t n_b = 1; n_b <= T3_MAX_B; n_b++) {
			if (!batch_sampled(n_b))
				continue;
			t3_check_call(t3, name, &c, &m, &x, isum, n_b, 0, n_out);
			if (n_out > 2)
				t3_check_call(t3, name, &c, &m, &x, isum, n_b, 1, n_out - 1);
		}
		t3_check_call(t3, name, &c, &m, &x, isum, 0, 0, n_out);
		t3_check_call(t3, name, &c, &m, &x, isum, 3, 1, 1);
		free(isum);
		q8_free(&x);
		free(codes);
		free(row);
		t2_case_free(&c);
	}
}
END_TEST

/* bn_t3_pack and bn_t2_unpack against the layouts' definitions (bn_blocks.h). */
START_TEST(t3_pack_layout)
{
	for (uint32_t n = 1; n < 700; n += 37) {
		uint8_t codes[700], back[700], t2[768], t3[640];
		for (uint32_t k = 0; k < n; k++)
			codes[k] = (uint8_t)(tu_rng_next() % 3);
		bn_t3_pack(codes, n, t3);
		for (uint32_t k = 0; k < bn_t3_row_bytes(n) / 64 * 320; k++) {
			uint32_t v = t3[k / 320 * 64 + k % 64], p = k % 320 / 64;
			for (uint32_t i = 0; i < p; i++)
				v /= 3;
			ck_assert_uint_eq(v % 3, k < n ? codes[k] : 1);
			ck_assert_uint_eq(bn_t3_code(t3, k), v % 3);
		}
		bn_t2_pack(codes, n, t2);
		bn_t2_unpack(t2, n, back);
		ck_assert_int_eq(memcmp(codes, back, n), 0);
	}
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* i8_gemm (the int8 LM head)                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* Int8 rows over the whole int8 range (row 0 all +127, row 1 all -128: the largest sums
 * either way), zero past n_in as the head's copy has them. */
struct i8_case {
	int8_t *q;
	float *scale;
	int32_t *row_sum;
	struct bn_i8_matrix m;
};

static void i8_case_new(struct i8_case *c, uint32_t n_in, uint32_t n_out)
{
	uint32_t row_bytes = (n_in + BN_I8_ROW_ALIGN - 1) / BN_I8_ROW_ALIGN * BN_I8_ROW_ALIGN;
	c->q = aligned_alloc(64, (size_t)n_out * row_bytes);
	c->scale = xmalloc(n_out * sizeof(float));
	c->row_sum = xmalloc(n_out * sizeof(int32_t));
	ck_assert_ptr_nonnull(c->q);
	for (uint32_t o = 0; o < n_out; o++) {
		int8_t *row = c->q + (size_t)o * row_bytes;
		int32_t sum = 0;
		for (uint32_t k = 0; k < row_bytes; k++) {
			int v = (int)(tu_rng_next() % 256) - 128;
			v = o == 0 ? 127 : o == 1 ? -128 : v;
			row[k] = (int8_t)(k < n_in ? v : 0);
			sum += row[k];
		}
		c->row_sum[o] = sum;
		c->scale[o] = tu_rng_float(1e-3f, 0.05f);
	}
	c->m = (struct bn_i8_matrix){ .q = c->q, .scale = c->scale, .row_sum = c->row_sum,
				      .n_in = n_in, .n_out = n_out, .row_bytes = row_bytes };
}

static void i8_case_free(struct i8_case *c)
{
	free(c->q);
	free(c->scale);
	free(c->row_sum);
}

/* Rows [o0, o1) against n_b batch rows: ((float)isum * scale[o]) * inv_scale[b] to the bit,
 * isum summed here in 64 bits over the n_in inputs; nothing else written. */
static void i8_check_call(const struct bn_kernels *kern, const struct i8_case *c,
			  const struct bn_q8_rows *x, uint32_t n_b, uint32_t o0, uint32_t o1)
{
	const struct bn_i8_matrix *w = &c->m;
	uint32_t ldy = w->n_out + 3;
	float *y = xmalloc((size_t)(n_b + 1) * ldy * sizeof(float));
	fill_sentinel(y, (size_t)(n_b + 1) * ldy);
	kern->i8_gemm(w, o0, o1, x, n_b, y, ldy);
	for (uint32_t b = 0; b < n_b + 1; b++)
		for (uint32_t o = 0; o < ldy; o++) {
			float got = y[(size_t)b * ldy + o];
			if (b >= n_b || o < o0 || o >= o1) {
				ck_assert_msg(is_sentinel(got), "%s i8_gemm n_in %u n_b %u: y[%u][%u] written",
					      kern->name, w->n_in, n_b, b, o);
				continue;
			}
			int64_t is = 0;
			for (uint32_t k = 0; k < w->n_in; k++)
				is += (int32_t)w->q[(size_t)o * w->row_bytes + k] * x->q[(size_t)b * x->k_pad + k];
			float want = ((float)is * w->scale[o]) * x->inv_scale[b];
			ck_assert_msg(float_bits(got) == float_bits(want),
				      "%s i8_gemm n_in %u n_b %u [%u,%u): y[%u][%u] = %.9g, want %.9g",
				      kern->name, w->n_in, n_b, o0, o1, b, o, got, want);
		}
	free(y);
}

/* Shapes: one 64-byte chunk, an odd number of chunks (the row loop's tail), rows that are not
 * whole tiles, and 2560 x 230: more than one cache block of rows (t2_blocking.h: 100 rows
 * of 2,560 bytes). Batches 1..40, so every tile width and the blocks of batch rows. The
 * activations past n_in hold garbage: the weights' zero padding must be what cancels them. */
static const uint32_t i8_shapes[][2] = { { 64, 5 }, { 100, 9 }, { 192, 7 }, { 2560, 230 } };

START_TEST(i8_gemm_exact)
{
	const struct bn_kernels *kern = variant(_i);
	if (!kern)
		return;
	for (size_t si = 0; si < sizeof(i8_shapes) / sizeof(i8_shapes[0]); si++) {
		uint32_t n_in = i8_shapes[si][0], n_out = i8_shapes[si][1];
		tu_rng_seed(300 + si);
		struct i8_case c;
		i8_case_new(&c, n_in, n_out);
		struct bn_q8_rows x;
		q8_alloc(&x, 40, n_in);
		for (uint32_t b = 0; b < 40; b++) {
			for (uint32_t k = 0; k < x.k_pad; k++) {
				int v = (int)(tu_rng_next() % 256) - 128;
				x.q[(size_t)b * x.k_pad + k] = (int8_t)(b == 0 ? -128 : b == 1 ? 127 : v);
			}
			x.inv_scale[b] = tu_rng_float(1e-4f, 0.1f);
		}
		for (uint32_t n_b = 1; n_b <= 40; n_b++) {
			if (!batch_sampled(n_b))
				continue;
			i8_check_call(kern, &c, &x, n_b, 0, n_out);
			if (n_b % 7 == 1) /* and ranges that start and end off the tiles */
				i8_check_call(kern, &c, &x, n_b, 1, n_out - 1);
		}
		i8_check_call(kern, &c, &x, 0, 0, n_out); /* nothing to do: nothing written */
		i8_check_call(kern, &c, &x, 3, 2, 2);
		q8_free(&x);
		i8_case_free(&c);
	}
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* bn_quantize_rows                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* The quantizer multiplies by the float 127 / absmax, so a value whose exact x * 127 / absmax
 * lies within 1e-4 of a rounding boundary may land on either side; elsewhere the result is
 * the double oracle's. */
static void check_quantized_row(const float *x, uint32_t k, const struct bn_q8_rows *q,
				uint32_t r)
{
	const int8_t *qr = q->q + (size_t)r * q->k_pad;
	double amax = 0.0;
	for (uint32_t i = 0; i < k; i++)
		amax = fmax(amax, fabs((double)x[i]));
	int32_t sum = 0;
	for (uint32_t i = 0; i < k; i++) {
		double exact = amax > 0.0 ? (double)x[i] * 127.0 / amax : 0.0;
		double want = nearbyint(exact);
		double frac = exact - floor(exact);
		int near_half = fabs(frac - 0.5) < 1e-4;
		ck_assert_msg(qr[i] == want || (near_half && fabs(qr[i] - exact) < 0.5 + 1e-4),
			      "row %u k %u: x %.9g amax %.9g -> q %d, want %.0f", r, i, x[i], amax,
			      qr[i], want);
		ck_assert(qr[i] >= -127 && qr[i] <= 127);
		if (fabs((double)x[i]) == amax && amax > 0.0)
			ck_assert_int_eq(qr[i], x[i] > 0 ? 127 : -127);
		sum += qr[i];
	}
	for (uint32_t i = k; i < q->k_pad; i++)
		ck_assert_msg(qr[i] == 0, "row %u: padding byte %u is %d", r, i, qr[i]);
	ck_assert_int_eq(q->sum[r], sum);
	if (amax == 0.0)
		ck_assert(float_bits(q->inv_scale[r]) == 0);
	else
		ck_assert_msg(fabs(q->inv_scale[r] - amax / 127.0) <= 1e-7 * amax / 127.0,
			      "row %u: inv_scale %.9g, amax/127 %.9g", r, q->inv_scale[r],
			      amax / 127.0);
}

/* n rows of k values in [-3, 3), row 5 scaled to ~1e-30 and row 6 to ~1e30, NaN in the
 * padding up to ldx (which the quantizer must not read). */
static float *quant_input_rows(uint32_t n, uint32_t k, uint32_t ldx)
{
	float *x = xmalloc((size_t)n * ldx * sizeof(float));
	for (uint32_t r = 0; r < n; r++)
		for (uint32_t i = 0; i < ldx; i++) {
			float mag = r == 5 ? 1e-30f : r == 6 ? 1e30f : 1.0f;
			x[(size_t)r * ldx + i] = i < k ? tu_rng_float(-3.0f, 3.0f) * mag : NAN;
		}
	return x;
}

START_TEST(quantize_rows)
{
	const uint32_t ks[] = { 1, 100, 256, 1000, 2560 };
	for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
		uint32_t k = ks[ki], ldx = k + 9, n = 8;
		tu_rng_seed(300 + ki);
		float *x = quant_input_rows(n, k, ldx);
		/* row 1 all zero; row 2 one huge value; row 3 one huge negative value */
		for (uint32_t i = 0; i < k; i++)
			x[1 * ldx + i] = 0.0f;
		x[2 * ldx + k / 2] = 3e38f;
		x[3 * ldx + k - 1] = -1e30f;
		struct bn_q8_rows q;
		q8_alloc(&q, n, k);
		bn_quantize_rows(x, ldx, n, &q);
		for (uint32_t r = 0; r < n; r++)
			check_quantized_row(x + (size_t)r * ldx, k, &q, r);
		for (uint32_t i = 0; i < q.k_pad; i++)
			ck_assert(q.q[1 * q.k_pad + i] == 0);
		ck_assert(q.inv_scale[1] == 0.0f && q.sum[1] == 0);
		ck_assert_int_eq(q.q[2 * q.k_pad + k / 2], 127);
		ck_assert_int_eq(q.q[3 * q.k_pad + k - 1], -127);
		if (k > 1) /* the rest of a row with one huge value rounds to zero */
			ck_assert_int_eq(q.sum[2], 127);
		q8_free(&q);
		free(x);
	}
}
END_TEST

/* absmax 127 makes the factor exactly 1: halves go to the even neighbour. */
START_TEST(quantize_rounds_half_to_even)
{
	const float x[] = { 127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.49f, -126.5f };
	const int8_t want[] = { 127, 0, 2, 2, 0, -2, -2, 3, -126 };
	uint32_t k = sizeof(x) / sizeof(x[0]);
	struct bn_q8_rows q;
	q8_alloc(&q, 1, k);
	bn_quantize_rows(x, k, 1, &q);
	int32_t sum = 0;
	for (uint32_t i = 0; i < k; i++) {
		ck_assert_msg(q.q[i] == want[i], "x %g -> %d, want %d", x[i], q.q[i], want[i]);
		sum += want[i];
	}
	ck_assert_int_eq(q.sum[0], sum);
	ck_assert(q.inv_scale[0] == 1.0f);
	q8_free(&q);
}
END_TEST

/* Element-wise inputs of n values: mostly in [-3, 3), with zeros of both signs, a NaN, an
 * infinity, tiny and huge values at fixed places when n allows. */
static float *elementwise_input(uint32_t n, int special)
{
	float *x = xmalloc((n + 1) * sizeof(float));
	for (uint32_t i = 0; i < n; i++)
		x[i] = tu_rng_float(-3.0f, 3.0f);
	if (special && n > 8) {
		x[1] = 0.0f, x[2] = -0.0f, x[3] = 1e-30f, x[4] = -1e30f;
		x[n - 1] = NAN, x[n / 2] = INFINITY, x[n / 3] = -INFINITY;
	}
	return x;
}

static void assert_same_floats(const char *what, const char *name, uint32_t n, const float *want,
			       const float *got)
{
	for (uint32_t i = 0; i < n; i++)
		ck_assert_msg(float_bits(want[i]) == float_bits(got[i]),
			      "%s %s n %u [%u]: %a, want %a", name, what, n, i, got[i], want[i]);
}

/* bn_rmsnorm against the definition in double: the 16-lane sum in float is within a few
 * ulps of the exact sum, and each output within a few ulps of x / rms * w. */
START_TEST(rmsnorm_vs_double)
{
	const uint32_t ns[] = { 1, 15, 16, 17, 100, 2560, 6912 };
	for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
		uint32_t n = ns[ni];
		tu_rng_seed(900 + ni);
		float *x = elementwise_input(n, 0), *w = elementwise_input(n, 0);
		float *out = xmalloc(n * sizeof(float));
		bn_rmsnorm(out, x, w, n, 1e-5f);
		double ss = 0;
		for (uint32_t i = 0; i < n; i++)
			ss += (double)x[i] * x[i];
		double inv = 1.0 / sqrt(ss / n + 1e-5);
		for (uint32_t i = 0; i < n; i++) {
			double want = x[i] * inv * w[i];
			ck_assert_msg(fabs(out[i] - want) <= 1e-5 * fabs(want) + 1e-30,
				      "n %u [%u]: %.9g, want %.9g", n, i, out[i], want);
		}
		free(x);
		free(w);
		free(out);
	}
}
END_TEST

/* Each variant's rmsnorm, relu2_mul and add give the scalar definitions' bits, in place and
 * not, on lengths around the vector widths and inputs with zeros, NaN and infinities; and
 * they write nothing past n. */
START_TEST(elementwise_variant_equals_scalar)
{
	const struct bn_kernels *kern = variant(_i);
	if (!kern)
		return;
	const uint32_t ns[] = { 1, 7, 15, 16, 17, 31, 33, 100, 2560, 6912 };
	for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
		for (int special = 0; special < 2; special++) {
			uint32_t n = ns[ni];
			tu_rng_seed(1000 + 2 * ni + special);
			float *x = elementwise_input(n, special), *w = elementwise_input(n, 0);
			float *want = xmalloc((n + 1) * sizeof(float)), *got = xmalloc((n + 1) * sizeof(float));
			want[n] = got[n] = 7.0f;
			bn_rmsnorm(want, x, w, n, 1e-6f);
			kern->rmsnorm(got, x, w, n, 1e-6f);
			assert_same_floats("rmsnorm", kern->name, n + 1, want, got);
			memcpy(got, x, n * sizeof(float));
			kern->rmsnorm(got, got, w, n, 1e-6f);
			assert_same_floats("rmsnorm in place", kern->name, n + 1, want, got);
			memcpy(want, x, n * sizeof(float));
			memcpy(got, x, n * sizeof(float));
			bn_relu2_mul(want, w, n);
			kern->relu2_mul(got, w, n);
			assert_same_floats("relu2_mul", kern->name, n + 1, want, got);
			memcpy(want, x, n * sizeof(float));
			memcpy(got, x, n * sizeof(float));
			bn_add(want, w, n);
			kern->add(got, w, n);
			assert_same_floats("add", kern->name, n + 1, want, got);
			free(x);
			free(w);
			free(want);
			free(got);
		}
	}
	/* Two squares in lane 0 whose sum, fused into one rounding (x * x + lane as one FMA),
	 * changes the norm's scale: found by search, so that a variant that fuses fails. */
	float x[32] = { [0] = 0x1.a336ap+0f, [16] = 0x1.8637bp+0f }, w[32], want[32], got[32];
	for (int i = 0; i < 32; i++)
		w[i] = 1.0f;
	bn_rmsnorm(want, x, w, 32, 1e-6f);
	kern->rmsnorm(got, x, w, 32, 1e-6f);
	assert_same_floats("rmsnorm (fused squares)", kern->name, 32, want, got);
}
END_TEST

/* The scalar ReLU² gate on the values where a branch or fmaxf could differ. */
START_TEST(relu2_mul_values)
{
	float g[] = { 2.0f, -2.0f, 0.0f, -0.0f, NAN, INFINITY, -INFINITY, 0.5f };
	const float u[] = { 3.0f, 3.0f, 3.0f, -3.0f, 3.0f, 2.0f, 2.0f, -1.0f };
	const float want[] = { 12.0f, 0.0f, 0.0f, -0.0f, 0.0f, INFINITY, 0.0f, -0.25f };
	bn_relu2_mul(g, u, 8);
	assert_same_floats("relu2_mul", "scalar", 8, want, g);
}
END_TEST

/* Each variant's quantize_rows gives bn_quantize_rows's bytes, scales and sums exactly, on
 * lengths around the vector widths and rows with zeros, huge values, NaN and infinities. */
START_TEST(quantize_variant_equals_scalar)
{
	const struct bn_kernels *kern = variant(_i);
	if (!kern)
		return;
	const uint32_t ks[] = { 1, 7, 15, 16, 17, 33, 255, 256, 1000, 2560, 6912 };
	for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
		uint32_t k = ks[ki], ldx = k + 3, n = 9;
		tu_rng_seed(700 + ki);
		float *x = quant_input_rows(n, k, ldx);
		for (uint32_t i = 0; i < k; i++) /* row 1 zeros, row 2 exact halves when amax 127 */
			x[1 * ldx + i] = 0.0f, x[2 * ldx + i] = (float)((int)(tu_rng_next() % 255) - 127) + 0.5f;
		x[2 * ldx] = 127.0f;
		x[3 * ldx + k / 2] = NAN;       /* left out of the absmax, becomes 0 */
		x[4 * ldx + k - 1] = -INFINITY; /* absmax inf: every product 0 or NaN */
		x[7 * ldx + k / 3] = 3e38f;
		struct bn_q8_rows want, got;
		q8_alloc(&want, n, k);
		q8_alloc(&got, n, k);
		memset(got.q, 0x55, (size_t)n * got.k_pad);
		bn_quantize_rows(x, ldx, n, &want);
		kern->quantize_rows(x, ldx, n, &got);
		for (uint32_t r = 0; r < n; r++) {
			ck_assert_msg(memcmp(want.q + (size_t)r * want.k_pad, got.q + (size_t)r * got.k_pad,
					     want.k_pad) == 0, "%s k %u row %u: bytes differ", kern->name, k, r);
			ck_assert_msg(float_bits(want.inv_scale[r]) == float_bits(got.inv_scale[r]),
				      "%s k %u row %u: inv_scale %g, want %g", kern->name, k, r,
				      got.inv_scale[r], want.inv_scale[r]);
			ck_assert_int_eq(want.sum[r], got.sum[r]);
		}
		ck_assert_int_eq(want.q[3 * want.k_pad + k / 2], 0);
		q8_free(&want);
		q8_free(&got);
		free(x);
	}
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* f_gemm                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static const uint32_t f_types[] = { BN_TYPE_F32, BN_TYPE_F16, BN_TYPE_BF16 };
static const uint32_t f_n_ins[] = { 1, 15, 16, 17, 64, 100, 2560, 2600 };

/* In a reduced run (tu_reduced) the long rows are 2600's alone (2560, a whole number of
 * vectors, costs as much and adds no path that 64 and 2600 do not take). */
static int width_sampled(uint32_t n_in)
{
	return !tu_reduced() || n_in != 2560;
}
#define F_N_OUT 7
/* Float sums in any order: |err| <= F_REL * sum_k |w x| + F_ABS. A sum of n products in float
 * is off by at most about n * 2^-24 of sum |w x| in the worst case, and by sqrt(n) times that
 * typically: 1e-5 is the typical error of n = 2560 with a margin of 100. */
#define F_REL 1e-5
#define F_ABS 1e-6

/* The panel layout (kernels.h) gets more rows: two groups, the second partial. */
#define F_N_OUT_PANELS 100

struct f_case {
	uint32_t type, n_in, n_out, ldx;
	uint8_t *data;  /* the encoded matrix, exactly its size */
	uint8_t *panels; /* the same in the panel layout, or NULL (then m is the row layout) */
	float *wd;      /* [n_out][n_in] the weights as encoded, decoded */
	float *x;       /* [MAX_B][ldx], NaN past n_in */
	struct bn_f_matrix m;
};

static float decode_weight(uint32_t type, const uint8_t *row, uint32_t k)
{
	uint16_t h;
	float f;
	if (type == BN_TYPE_F32) {
		memcpy(&f, row + 4 * k, sizeof(f));
		return f;
	}
	memcpy(&h, row + 2 * k, sizeof(h));
	return type == BN_TYPE_F16 ? bn_half_to_float(h) : bn_bf16_to_float(h);
}

/* The case's matrix in the panel layout, packed group by group; m then points at it. */
static void f_case_pack_panels(struct f_case *c)
{
	uint64_t row_bytes = c->m.row_bytes, bytes = bn_f_panel_bytes(c->type, c->n_in, c->n_out);
	uint64_t group_bytes = bytes / ((c->n_out + BN_F_PANEL_ROWS - 1) / BN_F_PANEL_ROWS);
	c->panels = xmalloc(bytes);
	for (uint32_t g = 0; g * BN_F_PANEL_ROWS < c->n_out; g++) {
		uint32_t first = g * BN_F_PANEL_ROWS, n = c->n_out - first;
		bn_f_pack_panel(c->type, c->data + first * row_bytes, row_bytes, c->n_in,
				n < BN_F_PANEL_ROWS ? n : BN_F_PANEL_ROWS, c->panels + g * group_bytes);
	}
	c->m.data = c->panels;
	c->m.panel_rows = BN_F_PANEL_ROWS;
}

static void f_case_new(struct f_case *c, uint32_t type, uint32_t n_in, uint32_t n_out)
{
	c->panels = NULL;
	c->type = type;
	c->n_in = n_in;
	c->n_out = n_out;
	c->ldx = n_in + 5;
	uint64_t row_bytes = bn_row_bytes(type, n_in);
	ck_assert_uint_gt(row_bytes, 0);
	c->data = xmalloc(row_bytes * n_out);
	c->wd = xmalloc((size_t)n_in * n_out * sizeof(float));
	float *row = xmalloc(n_in * sizeof(float));
	for (uint32_t o = 0; o < n_out; o++) {
		for (uint32_t k = 0; k < n_in; k++)
			row[k] = tu_rng_float(-1.0f, 1.0f);
		uint8_t *enc = c->data + o * row_bytes;
		ck_assert_uint_eq(bn_quant_row(type, row, n_in, enc), row_bytes);
		for (uint32_t k = 0; k < n_in; k++)
			c->wd[(size_t)o * n_in + k] = decode_weight(type, enc, k);
	}
	free(row);
	c->x = xmalloc((size_t)MAX_B * c->ldx * sizeof(float));
	for (uint32_t b = 0; b < MAX_B; b++)
		for (uint32_t k = 0; k < c->ldx; k++)
			c->x[(size_t)b * c->ldx + k] = k < n_in ? tu_rng_float(-2.0f, 2.0f) : NAN;
	c->m = (struct bn_f_matrix){ .data = c->data, .type = type, .n_in = n_in, .n_out = n_out,
				     .row_bytes = row_bytes };
}

static void f_case_free(struct f_case *c)
{
	free(c->panels);
	free(c->data);
	free(c->wd);
	free(c->x);
}

static void f_check(const struct bn_kernels *kern, const struct f_case *c, uint32_t o0,
		    uint32_t o1, uint32_t n_b)
{
	uint32_t ldy = c->n_out + 3;
	const char *tname = bn_type_name(c->type);
	float *y = xmalloc((size_t)(n_b + 2) * ldy * sizeof(float));
	fill_sentinel(y, (size_t)(n_b + 2) * ldy);
	kern->f_gemm(&c->m, o0, o1, c->x, c->ldx, n_b, y, ldy);
	for (uint32_t b = 0; b < n_b + 2; b++)
		for (uint32_t o = 0; o < ldy; o++) {
			float got = y[(size_t)b * ldy + o];
			if (b >= n_b || o < o0 || o >= o1) {
				ck_assert_msg(is_sentinel(got),
					      "%s %s n_in %u n_b %u [%u,%u): y[%u][%u] written",
					      kern->name, tname, c->n_in, n_b, o0, o1, b, o);
				continue;
			}
			double ref = 0.0, mag = 0.0;
			for (uint32_t k = 0; k < c->n_in; k++) {
				double p = (double)c->wd[(size_t)o * c->n_in + k] *
					   c->x[(size_t)b * c->ldx + k];
				ref += p;
				mag += fabs(p);
			}
			ck_assert_msg(fabs(got - ref) <= F_REL * mag + F_ABS,
				      "%s %s n_in %u n_b %u [%u,%u): y[%u][%u] = %.9g, ref %.9g (|wx| %.3g)",
				      kern->name, tname, c->n_in, n_b, o0, o1, b, o, got, ref, mag);
		}
	free(y);
}

/* Both layouts: the row layout over F_N_OUT rows, the panel layout over F_N_OUT_PANELS rows
 * (ranges inside a group, across the group boundary, and the partial last group). */
static void f_check_ranges(const struct bn_kernels *kern, const struct f_case *c, uint32_t n_b)
{
	if (!c->panels) {
		f_check(kern, c, 0, F_N_OUT, n_b);
		f_check(kern, c, 2, 5, n_b);
		f_check(kern, c, 6, 7, n_b);
		return;
	}
	f_check(kern, c, 0, F_N_OUT_PANELS, n_b);
	f_check(kern, c, 2, 5, n_b);
	f_check(kern, c, 60, 70, n_b);
	f_check(kern, c, 64, F_N_OUT_PANELS, n_b);
}

/* Case (type ti, width ni) of the f_types x f_n_ins grid, in the row or the panel layout. */
static void f_case_grid(struct f_case *c, size_t ti, size_t ni, int panels, uint32_t seed)
{
	tu_rng_seed(seed + 10 * ti + ni);
	f_case_new(c, f_types[ti], f_n_ins[ni], panels ? F_N_OUT_PANELS : F_N_OUT);
	if (panels)
		f_case_pack_panels(c);
}

/* Every case of the f_types x f_n_ins grid in both layouts, through `check`. */
static void f_for_grid(const struct bn_kernels *kern, uint32_t seed,
		       void (*check)(const struct bn_kernels *, const struct f_case *))
{
	for (int panels = 0; panels < 2; panels++)
		for (size_t ti = 0; ti < sizeof(f_types) / sizeof(f_types[0]); ti++)
			for (size_t ni = 0; ni < sizeof(f_n_ins) / sizeof(f_n_ins[0]); ni++) {
				if (!width_sampled(f_n_ins[ni]))
					continue;
				struct f_case c;
				f_case_grid(&c, ti, ni, panels, seed);
				check(kern, &c);
				f_case_free(&c);
			}
}

/* Empty calls write nothing; every batch size and range against the double sums. */
static void f_check_case(const struct bn_kernels *kern, const struct f_case *c)
{
	float y[4 * 16];
	fill_sentinel(y, 4 * 16);
	kern->f_gemm(&c->m, 0, c->n_out, c->x, c->ldx, 0, y, 16);
	kern->f_gemm(&c->m, 3, 3, c->x, c->ldx, 3, y, 16);
	for (int i = 0; i < 4 * 16; i++)
		ck_assert_msg(is_sentinel(y[i]), "%s: an empty f_gemm wrote y[%d]", kern->name, i);
	for (size_t bi = 0; bi < N_BATCH_SIZES; bi++)
		if (batch_sampled(batch_sizes[bi]))
			f_check_ranges(kern, c, batch_sizes[bi]);
}

START_TEST(f_gemm_vs_double)
{
	const struct bn_kernels *kern = variant(_i);
	if (kern)
		f_for_grid(kern, 400, f_check_case);
}
END_TEST

/* Row b alone, inside a batch of 16, inside a batch of 7 that starts at row 9, and output o
 * alone: the same bits. */
static void f_check_invariance(const struct bn_kernels *kern, const struct f_case *c)
{
	const uint32_t ldy = c->n_out, ldx = c->ldx, n = c->n_out;
	const char *tname = bn_type_name(c->type);
	float *y16 = xmalloc(16 * n * sizeof(float)), *y7 = xmalloc(7 * n * sizeof(float));
	float *y1 = xmalloc(n * sizeof(float)), *yo = xmalloc(n * sizeof(float));
	kern->f_gemm(&c->m, 0, n, c->x, ldx, 16, y16, ldy);
	kern->f_gemm(&c->m, 0, n, c->x + 9 * ldx, ldx, 7, y7, ldy);
	for (uint32_t b = 0; b < 16; b++) {
		const float *want = y16 + b * ldy;
		kern->f_gemm(&c->m, 0, n, c->x + b * ldx, ldx, 1, y1, ldy);
		ck_assert_msg(memcmp(y1, want, n * sizeof(float)) == 0,
			      "%s %s n_in %u panels %d: row %u alone differs from inside 16",
			      kern->name, tname, c->n_in, c->panels != NULL, b);
		ck_assert_msg(b < 9 || memcmp(y7 + (b - 9) * ldy, want, n * sizeof(float)) == 0,
			      "%s %s n_in %u panels %d: row %u inside 7 differs from inside 16",
			      kern->name, tname, c->n_in, c->panels != NULL, b);
		/* in a reduced run each output alone for two of the rows (one call per output) */
		for (uint32_t o = 0; o < n && (!tu_reduced() || b == 0 || b == 9); o++) {
			kern->f_gemm(&c->m, o, o + 1, c->x + b * ldx, ldx, 1, yo, ldy);
			ck_assert_msg(float_bits(yo[o]) == float_bits(want[o]),
				      "%s %s n_in %u panels %d: output %u row %u alone differs",
				      kern->name, tname, c->n_in, c->panels != NULL, o, b);
		}
	}
	free(y16);
	free(y7);
	free(y1);
	free(yo);
}

START_TEST(f_gemm_batch_invariance)
{
	const struct bn_kernels *kern = variant(_i);
	if (kern)
		f_for_grid(kern, 500, f_check_invariance);
}
END_TEST

/* The panel layout's order is defined (one fused chain per sum, k in order), so every variant
 * must give the scalar variant's bits, for every batch size and row range; and bn_f_row must
 * give back the rows that were packed. */
START_TEST(f_gemm_panels_exact)
{
	const struct bn_kernels *kern = variant(_i);
	if (!kern)
		return;
	for (size_t ti = 0; ti < sizeof(f_types) / sizeof(f_types[0]); ti++)
		for (size_t ni = 0; ni < sizeof(f_n_ins) / sizeof(f_n_ins[0]); ni++) {
			if (!width_sampled(f_n_ins[ni]))
				continue;
			struct f_case c;
			f_case_grid(&c, ti, ni, 1, 600);
			const uint32_t n = c.n_out;
			float *row = xmalloc(c.n_in * sizeof(float));
			for (uint32_t o = 0; o < n; o++) {
				bn_f_row(&c.m, o, row);
				ck_assert_msg(memcmp(row, c.wd + (size_t)o * c.n_in,
						     c.n_in * sizeof(float)) == 0,
					      "%s n_in %u: bn_f_row %u is not the packed row",
					      bn_type_name(c.type), c.n_in, o);
			}
			free(row);
			float *want = xmalloc(MAX_B * n * sizeof(float));
			float *got = xmalloc(MAX_B * n * sizeof(float));
			for (size_t bi = 0; bi < N_BATCH_SIZES; bi++) {
				if (!batch_sampled(batch_sizes[bi]))
					continue;
				uint32_t n_b = batch_sizes[bi], ranges[][2] = { { 0, n }, { 61, 67 } };
				for (int ri = 0; ri < 2; ri++) {
					uint32_t o0 = ranges[ri][0], o1 = ranges[ri][1];
					fill_sentinel(want, (size_t)MAX_B * n);
					fill_sentinel(got, (size_t)MAX_B * n);
					bn_kernels_scalar.f_gemm(&c.m, o0, o1, c.x, c.ldx, n_b, want, n);
					kern->f_gemm(&c.m, o0, o1, c.x, c.ldx, n_b, got, n);
					ck_assert_msg(memcmp(want, got, (size_t)MAX_B * n * sizeof(float)) == 0,
						      "%s %s n_in %u n_b %u [%u,%u): not the scalar bits",
						      kern->name, bn_type_name(c.type), c.n_in, n_b, o0,
						      o1);
				}
			}
			free(want);
			free(got);
			f_case_free(&c);
		}
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* attend                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static const uint32_t attend_ds[] = { 8, 16, 64, 100, 128, 200 }; /* 200: past AVX2's registers */
static const uint32_t attend_ls[] = { 1, 2, 17, 300 };
#define ATTEND_PAST 5 /* cache rows past L, holding garbage */
/* |err| <= A_REL * sum_t p_t |V[t][i]| + A_ABS. The scores' float error (about d * 2^-24 of
 * sum |q K| times the scale, a few units of 1e-6 here) moves each p_t by that much relative
 * to itself; expf and the final sums add a few ulps. */
#define A_REL 2e-5
#define A_ABS 1e-6

struct attend_case {
	uint32_t d, L, ld;
	float *q, *K, *V;  /* K, V: [L + ATTEND_PAST][ld] */
	float scale;
};

static void attend_garbage(struct attend_case *c, float g)
{
	for (uint32_t t = 0; t < c->L + ATTEND_PAST; t++)
		for (uint32_t i = 0; i < c->ld; i++)
			if (t >= c->L || i >= c->d) {
				c->K[(size_t)t * c->ld + i] = g;
				c->V[(size_t)t * c->ld + i] = -g;
			}
}

static void attend_case_new(struct attend_case *c, uint32_t d, uint32_t L)
{
	c->d = d;
	c->L = L;
	c->ld = d + 7;
	c->scale = 1.0f / sqrtf((float)d);
	size_t n = (size_t)(L + ATTEND_PAST) * c->ld;
	c->q = xmalloc(d * sizeof(float));
	c->K = xmalloc(n * sizeof(float));
	c->V = xmalloc(n * sizeof(float));
	for (uint32_t i = 0; i < d; i++)
		c->q[i] = tu_rng_float(-4.0f, 4.0f);
	for (size_t i = 0; i < n; i++) {
		c->K[i] = tu_rng_float(-1.0f, 1.0f);
		c->V[i] = tu_rng_float(-1.0f, 1.0f);
	}
	attend_garbage(c, NAN);
}

static void attend_case_free(struct attend_case *c)
{
	free(c->q);
	free(c->K);
	free(c->V);
}

/* out[d + 4]: the 4 past d must keep their sentinel. */
static void attend_run(const struct bn_kernels *kern, const struct attend_case *c, float *out)
{
	float *s = xmalloc(c->L * sizeof(float));
	fill_sentinel(s, c->L);
	fill_sentinel(out, c->d + 4);
	struct bn_kv_view kv = { .K = c->K, .V = c->V, .block_tokens = 16, .ld = c->ld };
	kern->attend(c->q, &kv, c->L, c->d, c->scale, s, out);
	for (uint32_t i = c->d; i < c->d + 4; i++)
		ck_assert_msg(is_sentinel(out[i]), "%s d %u L %u: out[%u] written", kern->name,
			      c->d, c->L, i);
	free(s);
}

static void attend_check(const struct bn_kernels *kern, const struct attend_case *c,
			 const float *out)
{
	uint32_t d = c->d, L = c->L;
	double *p = xmalloc(L * sizeof(double)), max = -INFINITY, z = 0.0;
	for (uint32_t t = 0; t < L; t++) {
		double dot = 0.0;
		for (uint32_t i = 0; i < d; i++)
			dot += (double)c->q[i] * c->K[(size_t)t * c->ld + i];
		p[t] = dot * c->scale;
		max = fmax(max, p[t]);
	}
	for (uint32_t t = 0; t < L; t++) {
		p[t] = exp(p[t] - max);
		z += p[t];
	}
	for (uint32_t i = 0; i < d; i++) {
		double ref = 0.0, mag = 0.0;
		for (uint32_t t = 0; t < L; t++) {
			ref += p[t] / z * c->V[(size_t)t * c->ld + i];
			mag += p[t] / z * fabs(c->V[(size_t)t * c->ld + i]);
		}
		ck_assert_msg(fabs(out[i] - ref) <= A_REL * mag + A_ABS,
			      "%s d %u L %u: out[%u] = %.9g, ref %.9g (err %.3g of %.3g)",
			      kern->name, d, L, i, out[i], ref, fabs(out[i] - ref), mag);
	}
	free(p);
}

START_TEST(attend_vs_double)
{
	const struct bn_kernels *kern = variant(_i);
	if (!kern)
		return;
	for (size_t di = 0; di < sizeof(attend_ds) / sizeof(attend_ds[0]); di++)
		for (size_t li = 0; li < sizeof(attend_ls) / sizeof(attend_ls[0]); li++) {
			tu_rng_seed(600 + 10 * di + li);
			struct attend_case c;
			attend_case_new(&c, attend_ds[di], attend_ls[li]);
			float *out = xmalloc((c.d + 4) * sizeof(float));
			attend_run(kern, &c, out);
			attend_check(kern, &c, out);
			free(out);
			attend_case_free(&c);
		}
}
END_TEST

/* bn_softmax against double for lengths 1 to 37: each probability within the rounding of
 * s[t] - max (relative 2^-24 of it) and a few ulps of the exponential, the sum and the
 * product; the same bits from a copy. A NaN score makes every output NaN (the sum holds
 * it): the forward pass then sees it. */
START_TEST(softmax_vs_double)
{
	tu_rng_seed(710);
	for (uint32_t n = 1; n <= 37; n++) {
		float s[40], t[40], orig[40];
		for (uint32_t i = 0; i < n; i++)
			orig[i] = tu_rng_float(-30.0f, 10.0f);
		uint32_t nan_at = n % 5 == 3 ? n / 2 : n; /* a few lengths hold a NaN */
		if (nan_at < n)
			orig[nan_at] = NAN;
		double max = -INFINITY, z = 0;
		for (uint32_t i = 0; i < n; i++)
			if (i != nan_at)
				max = fmax(max, orig[i]);
		for (uint32_t i = 0; i < n; i++)
			if (i != nan_at)
				z += exp((double)orig[i] - max);
		memcpy(s, orig, sizeof(orig));
		memcpy(t, orig, sizeof(orig));
		bn_softmax(s, n);
		bn_softmax(t, n);
		ck_assert_mem_eq(s, t, n * sizeof(float));
		for (uint32_t i = 0; i < n; i++) {
			if (nan_at < n) {
				ck_assert_msg(s[i] != s[i], "n %u: p[%u] = %g beside a NaN", n, i, s[i]);
				continue;
			}
			double want = exp((double)orig[i] - max) / z;
			double tol = want * (fabs(orig[i] - max) * 0x1p-24 + 8 * 0x1p-24);
			ck_assert_msg(fabs(s[i] - want) <= tol, "n %u: p[%u] = %.9g, want %.9g", n, i,
				      s[i], want);
		}
	}
}
END_TEST

/* The same (q, K, V, L) twice, then with other garbage past L and past d: the same bits. */
/* The same positions scattered over blocks in a shuffled arena (a paged KV cache, with rows
 * of garbage between and after them): the output is bit-identical to the contiguous one. */
/* A copy of the case's cache scattered over blocks of bt positions in a shuffled arena, with a
 * garbage row after each block and unused blocks below. */
struct paged_kv {
	float *K, *V;
	uint32_t *table;
	struct bn_kv_view view;
};

static void paged_kv_new(struct paged_kv *p, const struct attend_case *c, uint32_t bt)
{
	uint32_t n_blocks = (c->L + bt - 1) / bt, spare = 3, total = n_blocks + spare;
	size_t stride = (size_t)(bt + 1) * c->ld; /* a garbage row after each block */
	p->K = xmalloc((size_t)total * stride * sizeof(float));
	p->V = xmalloc((size_t)total * stride * sizeof(float));
	for (size_t i = 0; i < (size_t)total * stride; i++)
		p->K[i] = p->V[i] = NAN;
	p->table = xmalloc(n_blocks * sizeof(uint32_t));
	for (uint32_t b = 0; b < n_blocks; b++)
		p->table[b] = total - 1 - b; /* backwards, with unused blocks below */
	for (uint32_t t = 0; t < c->L; t++) {
		size_t dst = (size_t)p->table[t / bt] * stride + (size_t)(t % bt) * c->ld;
		memcpy(p->K + dst, c->K + (size_t)t * c->ld, c->d * sizeof(float));
		memcpy(p->V + dst, c->V + (size_t)t * c->ld, c->d * sizeof(float));
	}
	p->view = (struct bn_kv_view){ .K = p->K, .V = p->V, .blocks = p->table,
				       .block_tokens = bt, .ld = c->ld, .block_stride = stride };
}

static void paged_kv_free(struct paged_kv *p)
{
	free(p->table);
	free(p->K);
	free(p->V);
}

static void attend_paged_run(const struct bn_kernels *kern, const struct attend_case *c,
			     uint32_t bt, float *out)
{
	struct paged_kv p;
	paged_kv_new(&p, c, bt);
	float *s = xmalloc(c->L * sizeof(float));
	kern->attend(c->q, &p.view, c->L, c->d, c->scale, s, out);
	free(s);
	paged_kv_free(&p);
}

/* attend_heads over a paged cache equals one attend per head, to the bit, for the group sizes
 * and head dims the AVX-512 variant specializes and for others. */
START_TEST(attend_heads_equal_each_head)
{
	const struct bn_kernels *kern = variant(_i);
	if (!kern)
		return;
	static const uint32_t n_heads[] = { 1, 2, 3, 4, 8 };
	static const uint32_t ds[] = { 64, 100, 128 };
	for (size_t di = 0; di < sizeof(ds) / sizeof(ds[0]); di++)
		for (size_t li = 0; li < sizeof(attend_ls) / sizeof(attend_ls[0]); li++)
			for (size_t hi = 0; hi < sizeof(n_heads) / sizeof(n_heads[0]); hi++) {
				uint32_t d = ds[di], L = attend_ls[li], nh = n_heads[hi];
				tu_rng_seed(900 + 100 * di + 10 * li + hi);
				struct attend_case c;
				attend_case_new(&c, d, L);
				struct paged_kv p;
				paged_kv_new(&p, &c, 5);
				float *q = xmalloc((size_t)nh * d * sizeof(float));
				for (size_t i = 0; i < (size_t)nh * d; i++)
					q[i] = tu_rng_float(-4.0f, 4.0f);
				float *s = xmalloc((size_t)nh * L * sizeof(float));
				float *want = xmalloc((size_t)nh * d * sizeof(float));
				float *got = xmalloc(((size_t)nh * d + 4) * sizeof(float));
				fill_sentinel(got, (size_t)nh * d + 4);
				for (uint32_t h = 0; h < nh; h++)
					kern->attend(q + (size_t)h * d, &p.view, L, d, c.scale, s,
						     want + (size_t)h * d);
				kern->attend_heads(q, nh, &p.view, L, d, c.scale, s, got);
				ck_assert_msg(memcmp(want, got, (size_t)nh * d * sizeof(float)) == 0,
					      "%s d %u L %u heads %u: differs from one attend per head",
					      kern->name, d, L, nh);
				for (uint32_t i = 0; i < 4; i++)
					ck_assert(is_sentinel(got[(size_t)nh * d + i]));
				free(got);
				free(want);
				free(s);
				free(q);
				paged_kv_free(&p);
				attend_case_free(&c);
			}
}
END_TEST

/* A sliding window (kv->first > 0) over a paged cache: the same bits as attention over a
 * contiguous cache holding the window's positions alone (kernels.h: the order depends on d
 * and L only), for attend and for attend_heads of 2 and 8 heads. */
START_TEST(attend_window_equals_its_rows)
{
	const struct bn_kernels *kern = variant(_i);
	if (!kern)
		return;
	static const uint32_t ds[] = { 64, 100, 128 }, ls[] = { 1, 17, 40 }, firsts[] = { 3, 13 };
	for (size_t di = 0; di < 3; di++)
		for (size_t li = 0; li < 3; li++)
			for (size_t fi = 0; fi < 2; fi++) {
				uint32_t d = ds[di], L = ls[li], f = firsts[fi], nh = 8;
				tu_rng_seed(1700 + 100 * di + 10 * li + fi);
				struct attend_case c;
				attend_case_new(&c, d, f + L);
				struct paged_kv p;
				paged_kv_new(&p, &c, 5);
				p.view.first = f;
				struct bn_kv_view rows = { .K = c.K + (size_t)f * c.ld,
							   .V = c.V + (size_t)f * c.ld,
							   .block_tokens = 16, .ld = c.ld };
				float *q = xmalloc((size_t)nh * d * sizeof(float));
				for (size_t i = 0; i < (size_t)nh * d; i++)
					q[i] = tu_rng_float(-4.0f, 4.0f);
				float *s = xmalloc((size_t)nh * L * sizeof(float));
				float *want = xmalloc((size_t)nh * d * sizeof(float));
				float *got = xmalloc((size_t)nh * d * sizeof(float));
				for (uint32_t h = 0; h < nh; h++)
					kern->attend(q + (size_t)h * d, &rows, L, d, c.scale, s,
						     want + (size_t)h * d);
				kern->attend(q, &p.view, L, d, c.scale, s, got);
				ck_assert_msg(memcmp(want, got, d * sizeof(float)) == 0,
					      "%s d %u window %u from %u: not its rows' bits",
					      kern->name, d, L, f);
				for (uint32_t g = 2; g <= nh; g *= 4) {
					kern->attend_heads(q, g, &p.view, L, d, c.scale, s, got);
					ck_assert_msg(memcmp(want, got, (size_t)g * d * sizeof(float)) == 0,
						      "%s d %u window %u from %u, %u heads: not their rows' bits",
						      kern->name, d, L, f, g);
				}
				free(got);
				free(want);
				free(s);
				free(q);
				paged_kv_free(&p);
				attend_case_free(&c);
			}
}
END_TEST

#if defined(__aarch64__)
/* On aarch64 every variant's attention gives the scalar kernel's bits (common_neon.c says
 * why): attend over a contiguous and a paged cache, and attend_heads for groups of 2 and 8
 * heads (the specialised ones) and 3 (one attend per head), every shape of attend_vs_double. */
START_TEST(attend_equals_scalar)
{
	const struct bn_kernels *kern = variant(_i);
	if (!kern)
		return;
	for (size_t di = 0; di < sizeof(attend_ds) / sizeof(attend_ds[0]); di++)
		for (size_t li = 0; li < sizeof(attend_ls) / sizeof(attend_ls[0]); li++) {
			tu_rng_seed(800 + 10 * di + li);
			struct attend_case c;
			attend_case_new(&c, attend_ds[di], attend_ls[li]);
			float *want = xmalloc((c.d + 4) * sizeof(float)), *got = xmalloc((c.d + 4) * sizeof(float));
			attend_run(&bn_kernels_scalar, &c, want);
			attend_run(kern, &c, got);
			ck_assert_msg(memcmp(want, got, c.d * sizeof(float)) == 0,
				      "%s d %u L %u: not the scalar bits", kern->name, c.d, c.L);
			attend_paged_run(kern, &c, 5, got);
			ck_assert_msg(memcmp(want, got, c.d * sizeof(float)) == 0,
				      "%s d %u L %u paged: not the scalar bits", kern->name, c.d, c.L);
			static const uint32_t groups[] = { 2, 3, 8 };
			for (size_t gi = 0; gi < sizeof(groups) / sizeof(groups[0]); gi++) {
				uint32_t nh = groups[gi], d = c.d, L = c.L;
				float *q = xmalloc((size_t)nh * d * sizeof(float));
				float *s = xmalloc((size_t)nh * L * sizeof(float));
				float *hw = xmalloc((size_t)nh * d * sizeof(float));
				float *hg = xmalloc((size_t)nh * d * sizeof(float));
				for (size_t i = 0; i < (size_t)nh * d; i++)
					q[i] = tu_rng_float(-4.0f, 4.0f);
				struct bn_kv_view kv = { .K = c.K, .V = c.V, .block_tokens = 16, .ld = c.ld };
				bn_kernels_scalar.attend_heads(q, nh, &kv, L, d, c.scale, s, hw);
				kern->attend_heads(q, nh, &kv, L, d, c.scale, s, hg);
				ck_assert_msg(memcmp(hw, hg, (size_t)nh * d * sizeof(float)) == 0,
					      "%s d %u L %u heads %u: not the scalar bits", kern->name, d, L, nh);
				free(q);
				free(s);
				free(hw);
				free(hg);
			}
			free(want);
			free(got);
			attend_case_free(&c);
		}
}
END_TEST
#endif

START_TEST(attend_paged_equals_contiguous)
{
	const struct bn_kernels *kern = variant(_i);
	if (!kern)
		return;
	static const uint32_t bts[] = { 1, 5, 16 };
	for (size_t di = 0; di < sizeof(attend_ds) / sizeof(attend_ds[0]); di++)
		for (size_t li = 0; li < sizeof(attend_ls) / sizeof(attend_ls[0]); li++)
			for (size_t bi = 0; bi < sizeof(bts) / sizeof(bts[0]); bi++) {
				struct attend_case c;
				attend_case_new(&c, attend_ds[di], attend_ls[li]);
				float *a = xmalloc((c.d + 4) * sizeof(float));
				float *b = xmalloc((c.d + 4) * sizeof(float));
				attend_run(kern, &c, a);
				attend_paged_run(kern, &c, bts[bi], b);
				ck_assert_msg(memcmp(a, b, c.d * sizeof(float)) == 0,
					      "%s d %u L %u block %u: paged differs", kern->name, c.d,
					      c.L, bts[bi]);
				free(a);
				free(b);
				attend_case_free(&c);
			}
}
END_TEST

START_TEST(attend_deterministic)
{
	const struct bn_kernels *kern = variant(_i);
	if (!kern)
		return;
	for (size_t di = 0; di < sizeof(attend_ds) / sizeof(attend_ds[0]); di++)
		for (size_t li = 0; li < sizeof(attend_ls) / sizeof(attend_ls[0]); li++) {
			tu_rng_seed(700 + 10 * di + li);
			struct attend_case c;
			attend_case_new(&c, attend_ds[di], attend_ls[li]);
			size_t bytes = (c.d + 4) * sizeof(float);
			float *a = xmalloc(bytes), *b = xmalloc(bytes);
			attend_run(kern, &c, a);
			attend_run(kern, &c, b);
			ck_assert_msg(memcmp(a, b, bytes) == 0, "%s d %u L %u: two calls differ",
				      kern->name, c.d, c.L);
			const float garbage[] = { 1e30f, -3.0f, 0.0f, INFINITY };
			for (size_t g = 0; g < sizeof(garbage) / sizeof(garbage[0]); g++) {
				attend_garbage(&c, garbage[g]);
				attend_run(kern, &c, b);
				ck_assert_msg(memcmp(a, b, bytes) == 0,
					      "%s d %u L %u: garbage %g past the cache changes the result",
					      kern->name, c.d, c.L, garbage[g]);
			}
			free(a);
			free(b);
			attend_case_free(&c);
		}
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* bn_kernels_select                                                                           */
/* ------------------------------------------------------------------------------------------ */

/* The best variant this CPU runs: the last of bn_kernel_variant_names it has. */
static int best_index(void)
{
	struct bn_cpu_features f;
	bn_cpu_detect(&f);
	int best = 0;
	for (int i = 1; i < N_VARIANTS; i++)
		if (cpu_runs(&f, i))
			best = i;
	return best;
}

START_TEST(select_by_name)
{
	struct bn_cpu_features f;
	bn_cpu_detect(&f);
	check_feature_order(&f);
	unsetenv("BITNET_KERNELS");
	ck_assert_ptr_null(bn_kernels_select("nonsense"));
	for (int i = 0; i < N_VARIANTS; i++)
		ck_assert_ptr_eq(bn_kernels_select(variant_names[i]), cpu_runs(&f, i) ? tables[i] : NULL);
	const struct bn_kernels *best = bn_kernels_select(NULL);
	ck_assert_ptr_nonnull(best);
	ck_assert_str_eq(best->name, variant_names[best_index()]);
	for (int i = 0; i < N_VARIANTS; i++) {
		const struct bn_kernels *k = bn_kernels_select(variant_names[i]);
		if (!k)
			continue;
		ck_assert_str_eq(k->name, variant_names[i]);
		ck_assert(k->t2_gemm && k->f_gemm && k->attend && k->attend_heads && k->quantize_rows &&
			  k->i8_dots && k->i8_gemm && k->rmsnorm && k->relu2_mul && k->add && k->hash64);
	}
}
END_TEST

START_TEST(select_from_environment)
{
	char *saved = getenv("BITNET_KERNELS") ? strdup(getenv("BITNET_KERNELS")) : NULL;
	struct bn_cpu_features f;
	bn_cpu_detect(&f);
	setenv("BITNET_KERNELS", "scalar", 1);
	ck_assert_ptr_eq(bn_kernels_select(NULL), &bn_kernels_scalar);
	/* an explicit name wins over the environment */
	ck_assert_ptr_eq(bn_kernels_select(variant_names[1]), cpu_runs(&f, 1) ? tables[1] : NULL);
	for (int i = 1; i < N_VARIANTS; i++) {
		setenv("BITNET_KERNELS", variant_names[i], 1);
		ck_assert_ptr_eq(bn_kernels_select(NULL), cpu_runs(&f, i) ? tables[i] : NULL);
	}
	/* a name the daemon cannot honour is refused, not silently replaced */
	setenv("BITNET_KERNELS", "nonsense", 1);
	ck_assert_ptr_null(bn_kernels_select(NULL));
	setenv("BITNET_KERNELS", "", 1); /* empty: as if unset */
	ck_assert_str_eq(bn_kernels_select(NULL)->name, variant_names[best_index()]);
	unsetenv("BITNET_KERNELS");
	ck_assert_str_eq(bn_kernels_select(NULL)->name, variant_names[best_index()]);
	if (saved)
		setenv("BITNET_KERNELS", saved, 1);
	free(saved);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Pool                                                                                        */
/* ------------------------------------------------------------------------------------------ */

static const uint32_t pool_threads[] = { 1, 2, 4 };

struct count_ctx {
	uint32_t *hits;       /* atomic, one per task */
	uint64_t *out;        /* plain writes, read by the caller after the run */
	uint64_t job;
	uint32_t work;        /* busy iterations per task, so that workers get a share */
};

static void count_task(void *arg, uint32_t t)
{
	struct count_ctx *c = arg;
	volatile uint32_t spin = 0;
	for (uint32_t i = 0; i < c->work; i++)
		spin += i;
	__atomic_fetch_add(&c->hits[t], 1, __ATOMIC_RELAXED);
	c->out[t] = c->job * 4096 + t;
}

START_TEST(pool_each_task_once)
{
	uint32_t threads = pool_threads[_i];
	struct bn_pool *p = bn_pool_new(threads);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(bn_pool_threads(p), threads);
	const uint32_t n_tasks[] = { 0, 1, 7, 1000, 7, 0, 1 };
	struct count_ctx c = { .hits = xmalloc(1001 * sizeof(uint32_t)),
			       .out = xmalloc(1001 * sizeof(uint64_t)) };
	for (size_t j = 0; j < sizeof(n_tasks) / sizeof(n_tasks[0]); j++) {
		uint32_t n = n_tasks[j];
		memset(c.hits, 0, 1001 * sizeof(uint32_t));
		memset(c.out, 0xff, 1001 * sizeof(uint64_t));
		c.job = j;
		c.work = j == 3 ? 2000 : 0;
		bn_pool_run(p, n, count_task, &c);
		for (uint32_t t = 0; t < 1001; t++) {
			ck_assert_msg(c.hits[t] == (uint32_t)(t < n),
				      "threads %u, %u tasks: task %u ran %u times", threads, n, t,
				      c.hits[t]);
			ck_assert(c.out[t] == (t < n ? j * 4096 + t : UINT64_MAX));
		}
	}
	free(c.hits);
	free(c.out);
	bn_pool_free(p);
}
END_TEST

/* 10,000 jobs; 1,000 when the pool has more threads than the machine has CPUs: every job
 * waits until each worker has been scheduled once (the caller counts workers out, not tasks),
 * so there a job costs a scheduler time slice, milliseconds. */
/* Jobs with read-ahead spans run every task once, as without: spans of live memory, more
 * spans than threads, fewer, and a span of memory already unmapped (a prefetch does not
 * fault); then the spans cleared. */
START_TEST(pool_read_ahead_changes_nothing)
{
	uint32_t threads = pool_threads[_i];
	struct bn_pool *p = bn_pool_new(threads);
	ck_assert_ptr_nonnull(p);
	size_t bytes = 4u << 20;
	uint8_t *live = xmalloc(bytes);
	memset(live, 1, bytes);
	uint8_t *gone = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert(gone != MAP_FAILED);
	ck_assert_int_eq(munmap(gone, bytes), 0);
	struct count_ctx c = { .hits = xmalloc(1001 * sizeof(uint32_t)),
			       .out = xmalloc(1001 * sizeof(uint64_t)) };
	for (uint32_t j = 0; j < 6; j++) {
		struct bn_pool_ahead a = { .n = j % 3 == 0 ? BN_POOL_AHEAD_SPANS : 1 + j % 2 };
		for (uint32_t i = 0; i < a.n; i++) {
			a.start[i] = (j == 4 ? gone : live) + (size_t)i * (bytes / BN_POOL_AHEAD_SPANS);
			a.bytes[i] = bytes / BN_POOL_AHEAD_SPANS;
		}
		bn_pool_set_ahead(p, j == 5 ? NULL : &a);
		for (uint32_t n = 1; n <= 1000; n *= 10) {
			memset(c.hits, 0, 1001 * sizeof(uint32_t));
			c.job = j;
			c.work = 50;
			bn_pool_run(p, n, count_task, &c);
			for (uint32_t t = 0; t < 1001; t++)
				ck_assert_msg(c.hits[t] == (uint32_t)(t < n),
					      "threads %u, spans %u, %u tasks: task %u ran %u times",
					      threads, a.n, n, t, c.hits[t]);
			for (uint32_t t = 0; t < n; t++)
				ck_assert(c.out[t] == j * 4096 + t);
		}
	}
	bn_pool_set_ahead(p, NULL);
	free(c.hits);
	free(c.out);
	free(live);
	bn_pool_free(p);
}
END_TEST

START_TEST(pool_many_small_jobs)
{
	uint32_t threads = pool_threads[_i];
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint32_t n_jobs = cpus > 0 && threads > (uint32_t)cpus ? 1000 : 10000;
	struct bn_pool *p = bn_pool_new(threads);
	ck_assert_ptr_nonnull(p);
	uint32_t hits[16];
	uint64_t out[16];
	struct count_ctx c = { .hits = hits, .out = out };
	int64_t t0 = tu_now_ns();
	for (uint32_t j = 0; j < n_jobs; j++) {
		uint32_t n = 1 + j % 13;
		memset(hits, 0, sizeof(hits));
		c.job = j;
		bn_pool_run(p, n, count_task, &c);
		for (uint32_t t = 0; t < n; t++)
			ck_assert_msg(hits[t] == 1 && out[t] == (uint64_t)j * 4096 + t,
				      "threads %u job %u task %u: ran %u times, out %llu", threads, j,
				      t, hits[t], (unsigned long long)out[t]);
		ck_assert(hits[n] == 0);
	}
	printf("pool: %u jobs on %u threads (%ld CPUs) in %.1f ms\n", n_jobs, threads, cpus,
	       (double)(tu_now_ns() - t0) / 1e6);
	fflush(stdout);
	bn_pool_free(p);
}
END_TEST

/* Per-thread scratch indexed by bn_pool_thread_index is safe: an index is below the thread
 * count, and no two tasks running at the same time have the same one (each task marks its
 * index busy while it works; finding it already busy is a collision). */
struct index_ctx {
	uint32_t threads;
	uint32_t busy[8];
	uint32_t collisions, out_of_range;
	uint32_t used[8];
};

static void index_task(void *ctx, uint32_t t)
{
	struct index_ctx *c = ctx;
	(void)t;
	uint32_t i = bn_pool_thread_index();
	if (i >= c->threads) {
		__atomic_fetch_add(&c->out_of_range, 1, __ATOMIC_RELAXED);
		return;
	}
	if (__atomic_exchange_n(&c->busy[i], 1, __ATOMIC_ACQ_REL) != 0)
		__atomic_fetch_add(&c->collisions, 1, __ATOMIC_RELAXED);
	for (volatile int spin = 0; spin < 2000; spin++)
		;
	__atomic_fetch_add(&c->used[i], 1, __ATOMIC_RELAXED);
	__atomic_store_n(&c->busy[i], 0, __ATOMIC_RELEASE);
}

START_TEST(pool_thread_index_unique)
{
	uint32_t threads = pool_threads[_i];
	struct bn_pool *p = bn_pool_new(threads);
	ck_assert_ptr_nonnull(p);
	struct index_ctx c = { .threads = threads };
	for (int j = 0; j < 200; j++)
		bn_pool_run(p, 64, index_task, &c);
	ck_assert_uint_eq(c.out_of_range, 0);
	ck_assert_uint_eq(c.collisions, 0);
	uint32_t total = 0;
	for (uint32_t i = 0; i < threads; i++)
		total += c.used[i];
	ck_assert_uint_eq(total, 200 * 64);
	ck_assert_uint_eq(bn_pool_thread_index(), 0); /* the caller, outside a job */
	bn_pool_free(p);
}
END_TEST

/* Workers idle past their spin sleep in the futex; freeing the pool must wake them. */
START_TEST(pool_free_with_sleepers)
{
	uint32_t threads = pool_threads[_i];
	uint32_t hits[8];
	uint64_t out[8];
	struct count_ctx c = { .hits = hits, .out = out };
	struct bn_pool *p = bn_pool_new(threads);
	ck_assert_ptr_nonnull(p);
	memset(hits, 0, sizeof(hits));
	bn_pool_run(p, 8, count_task, &c);
	struct timespec nap = { 0, 10 * 1000 * 1000 };
	nanosleep(&nap, NULL);
	/* a job after the sleep: the workers must wake for it too */
	memset(hits, 0, sizeof(hits));
	bn_pool_run(p, 8, count_task, &c);
	for (int t = 0; t < 8; t++)
		ck_assert_uint_eq(hits[t], 1);
	nanosleep(&nap, NULL);
	int64_t t0 = tu_now_ns();
	bn_pool_free(p);
	double ms = (double)(tu_now_ns() - t0) / 1e6;
	ck_assert_msg(ms < 500.0, "bn_pool_free took %.1f ms", ms);
	/* and a pool freed before its workers ever ran a job */
	p = bn_pool_new(threads);
	ck_assert_ptr_nonnull(p);
	bn_pool_free(p);
	bn_pool_free(NULL);
}
END_TEST

START_TEST(pool_defaults_and_signals)
{
	sigset_t before, after;
	pthread_sigmask(SIG_SETMASK, NULL, &before);
	struct bn_pool *p = bn_pool_new(0);
	ck_assert_ptr_nonnull(p);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	ck_assert_uint_eq(bn_pool_threads(p), n > 0 ? (uint32_t)n : 1);
	pthread_sigmask(SIG_SETMASK, NULL, &after);
	/* the caller's signal mask is its own again after the workers started blocked */
	for (int s = 1; s < 32; s++)
		ck_assert_int_eq(sigismember(&before, s), sigismember(&after, s));
	bn_pool_free(p);
}
END_TEST

/* The kernels' cases: they run on the calling thread. */
static void add_kernel_cases(Suite *s)
{
	TCase *k = tcase_create("kernels");
	tcase_set_timeout(k, 300);
	tcase_add_loop_test(k, t2_gemm_exact, 0, N_VARIANTS);
	tcase_add_loop_test(k, t2_gemm_full_int8_range, 0, N_VARIANTS);
	tcase_add_loop_test(k, t2g_gemm_exact, 0, N_VARIANTS);
	tcase_add_loop_test(k, i8_gemm_exact, 0, N_VARIANTS);
	tcase_add_loop_test(k, t3_gemm_exact, 0, 2);
	tcase_add_test(k, t3_kernel_per_table);
	tcase_add_test(k, t3_pack_layout);
	tcase_add_test(k, quantize_rows);
	tcase_add_test(k, quantize_rounds_half_to_even);
	tcase_add_loop_test(k, quantize_variant_equals_scalar, 0, N_VARIANTS);
	tcase_add_test(k, rmsnorm_vs_double);
	tcase_add_test(k, relu2_mul_values);
	tcase_add_loop_test(k, elementwise_variant_equals_scalar, 0, N_VARIANTS);
	tcase_add_loop_test(k, f_gemm_vs_double, 0, N_VARIANTS);
	tcase_add_loop_test(k, f_gemm_batch_invariance, 0, N_VARIANTS);
	tcase_add_loop_test(k, f_gemm_panels_exact, 0, N_VARIANTS);
	tcase_add_test(k, softmax_vs_double);
	tcase_add_loop_test(k, attend_vs_double, 0, N_VARIANTS);
	tcase_add_loop_test(k, attend_deterministic, 0, N_VARIANTS);
	tcase_add_loop_test(k, attend_paged_equals_contiguous, 0, N_VARIANTS);
	tcase_add_loop_test(k, attend_heads_equal_each_head, 0, N_VARIANTS);
	tcase_add_loop_test(k, attend_window_equals_its_rows, 0, N_VARIANTS);
#if defined(__aarch64__)
	tcase_add_loop_test(k, attend_equals_scalar, 1, N_VARIANTS);
#endif
	tcase_add_test(k, select_by_name);
	tcase_add_test(k, select_from_environment);
	suite_add_tcase(s, k);
}

int main(void)
{
	if (!tu_forced_kernels_runnable())
		return 77;
	for (int i = 0; i < N_VARIANTS; i++)
		if (!bn_kernels_select(variant_names[i]))
			printf("SKIP: %s kernels: this CPU cannot run them\n", variant_names[i]);
	Suite *s = suite_create("kernels");
	/* under ThreadSanitizer only the pool's cases (testutil.h) */
	if (TU_TSAN)
		printf("note: under ThreadSanitizer only the pool's cases run\n");
	else
		add_kernel_cases(s);
	TCase *pool = tcase_create("pool");
	tcase_set_timeout(pool, 120);
	tcase_add_loop_test(pool, pool_each_task_once, 0, 3);
	tcase_add_loop_test(pool, pool_many_small_jobs, 0, 3);
	tcase_add_loop_test(pool, pool_read_ahead_changes_nothing, 0, 3);
	tcase_add_loop_test(pool, pool_free_with_sleepers, 0, 3);
	tcase_add_loop_test(pool, pool_thread_index_unique, 0, 3);
	tcase_add_test(pool, pool_defaults_and_signals);
	suite_add_tcase(s, pool);
	return tu_run_suite(s);
}
