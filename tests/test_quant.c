/* SPDX-License-Identifier: MIT */
/*
 * Tensor types: decoding hand-built blocks, ternary round trips, the T2-plane repack, and the
 * error of the float quantizers. The oracles here are written from the layout comments in
 * kernels/bn_blocks.h, one weight at a time, and share no code with kernels/cpu/quant.c;
 * half and bfloat16 conversion (types.c) is trusted, having been checked against hardware.
 */
#include "quant.h"

#include "testutil.h"

#include "ckassert.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Test helpers and independent oracles                                                       */
/* ------------------------------------------------------------------------------------------ */

/* Ternary weights, a quarter of them zero. */
static void random_ternary(int8_t *w, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t r = tu_rng_next() % 4;
		w[i] = r == 0 ? 0 : r == 1 ? 1 : -1;
	}
}

static void put_half(uint8_t *p, uint16_t h)
{
	memcpy(p, &h, sizeof(h));
}

static uint16_t get_half(const uint8_t *p)
{
	uint16_t h;
	memcpy(&h, p, sizeof(h));
	return h;
}

/* TQ2_0 weight k of a 66-byte block: half k/128, byte k%32 of that half, bit pair (k%128)/32. */
static int tq2_oracle_code(const uint8_t *blk, int k)
{
	return (blk[32 * (k / 128) + k % 32] >> (2 * ((k % 128) / 32))) & 3;
}

/* TQ1_0 weight k of a 54-byte block (qs at 0, qh at 48). A byte q is the fraction q/256; its
 * first five base-3 digits are the digits of floor(q * 243 / 256), most significant first. */
static int tq1_oracle_code(const uint8_t *blk, int k)
{
	int byte, n;
	if (k < 160) {
		byte = blk[k % 32];
		n = k / 32;
	} else if (k < 240) {
		byte = blk[32 + (k - 160) % 16];
		n = (k - 160) / 16;
	} else {
		byte = blk[48 + (k - 240) % 4];
		n = (k - 240) / 4;
	}
	int v = byte * 243 / 256;
	for (int i = n; i < 4; i++)
		v /= 3;
	return v % 3;
}

/* I2_S weight k of a flattened tensor: block k/128, byte k%32, bit pairs 7-6 downwards. */
static int i2_s_oracle_code(const uint8_t *t, uint64_t k)
{
	uint64_t in = k % 128;
	return (t[k / 128 * 32 + in % 32] >> (6 - 2 * (in / 32))) & 3;
}

/* Q6_K weight k of a 210-byte block (ql 0..128, qh 128..192, scales 192..208, d 208). Within
 * a 128-weight half, quarter q = r/32 and l = r%32: ql byte l (quarters 0, 2) or l+32
 * (quarters 1, 3), low nibble for quarters 0-1 and high for 2-3; qh byte l, bit pair q. */
static float q6_k_oracle(const uint8_t *blk, int k)
{
	int half = k / 128, r = k % 128, q = r / 32, l = r % 32;
	int ql = blk[64 * half + l + 32 * (q & 1)];
	int lo = q < 2 ? ql & 0xF : ql >> 4;
	int hi = (blk[128 + 32 * half + l] >> (2 * q)) & 3;
	int8_t sc = (int8_t)blk[192 + k / 16];
	return bn_half_to_float(get_half(blk + 208)) * sc * ((lo | hi << 4) - 32);
}

/* ------------------------------------------------------------------------------------------ */
/* Hand-built blocks                                                                          */
/* ------------------------------------------------------------------------------------------ */

START_TEST(tq2_0_hand_block)
{
	uint8_t blk[66];
	float y[256], want[256] = { 0 };
	memset(blk, 0x55, 64); /* code 1 everywhere: weight 0 */
	blk[32 + 5] = 0x92;    /* half 1, m = 5: 0b10_01_00_10 */
	blk[0] = 0x00;         /* half 0, m = 0: code 0 in all four pairs */
	put_half(blk + 64, 0x4000); /* d = 2 */
	want[128 + 5] = 2;     /* bits 0-1 = 2: +1 */
	want[128 + 5 + 32] = -2; /* bits 2-3 = 0: -1 */
	want[128 + 5 + 64] = 0;  /* bits 4-5 = 1 */
	want[128 + 5 + 96] = 2;  /* bits 6-7 = 2 */
	want[0] = want[32] = want[64] = want[96] = -2;
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_TQ2_0, blk, sizeof(blk), 0, 256, y), 0);
	for (int k = 0; k < 256; k++)
		ck_assert_msg(y[k] == want[k], "weight %d: %g, want %g", k, y[k], want[k]);
}
END_TEST

START_TEST(tq1_0_hand_block)
{
	uint8_t blk[54];
	float y[256], want[256] = { 0 };
	/* 128/256 = 0.5 = 0.1111..._3: every trit 1, weight 0. */
	memset(blk, 128, 52);
	/* trits 2,0,1,1,2 = 176; ceil(176 * 256 / 243) = 186: weights 0, 32, 64, 96, 128 */
	blk[0] = 186;
	want[0] = 0.5f, want[32] = -0.5f, want[128] = 0.5f;
	/* trits 0,2,2,0,1 = 73; ceil(73 * 256 / 243) = 77: weights 163, 179, 195, 211, 227 */
	blk[32 + 3] = 77;
	want[163] = -0.5f, want[179] = 0.5f, want[195] = 0.5f, want[211] = -0.5f;
	/* qh[2]: trits 2,2,0,1 then a 0 = 219; ceil(219 * 256 / 243) = 231: weights 242 + 4n */
	blk[48 + 2] = 231;
	want[242] = 0.5f, want[246] = 0.5f, want[250] = -0.5f;
	put_half(blk + 52, 0x3800); /* d = 0.5 */
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_TQ1_0, blk, sizeof(blk), 0, 256, y), 0);
	for (int k = 0; k < 256; k++)
		ck_assert_msg(y[k] == want[k], "weight %d: %g, want %g", k, y[k], want[k]);
}
END_TEST

/* Every byte value in every TQ1_0 position, against the floor(q * 243 / 256) reading. */
START_TEST(tq1_0_every_byte)
{
	uint8_t t[5 * 54];
	for (int b = 0; b < 5; b++) {
		for (int i = 0; i < 52; i++)
			t[54 * b + i] = (uint8_t)(52 * b + i);
		put_half(t + 54 * b + 52, 0x3c00);
	}
	for (int b = 0; b < 5; b++) {
		uint8_t codes[256];
		float scale, y[256];
		ck_assert_int_eq(bn_ternary_row(BN_TYPE_TQ1_0, t, sizeof(t), b, 256, codes, &scale),
				 0);
		ck_assert_int_eq(bn_dequant_row(BN_TYPE_TQ1_0, t, sizeof(t), b, 256, y), 0);
		for (int k = 0; k < 256; k++) {
			int want = tq1_oracle_code(t + 54 * b, k);
			ck_assert_msg(codes[k] == want, "block %d weight %d", b, k);
			ck_assert(y[k] == (float)(want - 1));
		}
	}
}
END_TEST

START_TEST(i2_s_hand_block)
{
	/* Two rows of 128 weights: 64 code bytes, then the scale block. */
	uint8_t t[64 + 32] = { 0 };
	float y[128], scale = 0.25f;
	uint8_t codes[128];
	memset(t, 0x55, 64);
	t[32 + 3] = 0x86; /* row 1, byte 3: 0b10_00_01_10 */
	memcpy(t + 64, &scale, 4);
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_I2_S, t, sizeof(t), 1, 128, y), 0);
	for (int k = 0; k < 128; k++) {
		float want = k == 3 || k == 99 ? 0.25f : k == 35 ? -0.25f : 0.0f;
		ck_assert_msg(y[k] == want, "weight %d: %g", k, y[k]);
	}
	ck_assert_int_eq(bn_ternary_row(BN_TYPE_I2_S, t, sizeof(t), 1, 128, codes, &scale), 0);
	ck_assert(scale == 0.25f);
	ck_assert(codes[3] == 2 && codes[35] == 0 && codes[67] == 1 && codes[99] == 2);
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_I2_S, t, sizeof(t), 0, 128, y), 0);
	for (int k = 0; k < 128; k++)
		ck_assert(y[k] == 0.0f);
}
END_TEST

START_TEST(q8_0_hand_block)
{
	uint8_t t[2 * 34];
	float y[32];
	put_half(t, 0x3c00);
	memset(t + 2, 7, 32);
	put_half(t + 34, 0x3400); /* row 1: d = 0.25, qs[j] = j - 16 */
	for (int j = 0; j < 32; j++)
		t[36 + j] = (uint8_t)(int8_t)(j - 16);
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_Q8_0, t, sizeof(t), 1, 32, y), 0);
	for (int j = 0; j < 32; j++)
		ck_assert(y[j] == 0.25f * (float)(j - 16));
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_Q8_0, t, sizeof(t), 0, 32, y), 0);
	ck_assert(y[0] == 7.0f && y[31] == 7.0f);
}
END_TEST

/* Q4_0 as ggml lays it out: byte j's low nibble is weight j, its high nibble weight j + 16,
 * each q + 8. */
START_TEST(q4_0_hand_block)
{
	uint8_t t[2 * 18];
	float y[32];
	put_half(t, 0x3c00);
	memset(t + 2, 0x88, 16); /* row 0: all zero */
	put_half(t + 18, 0x3800); /* row 1: d = 0.5; low nibble j, high nibble 15 - j */
	for (int j = 0; j < 16; j++)
		t[20 + j] = (uint8_t)(j | ((15 - j) << 4));
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_Q4_0, t, sizeof(t), 1, 32, y), 0);
	for (int j = 0; j < 16; j++) {
		ck_assert(y[j] == 0.5f * (float)(j - 8));
		ck_assert(y[j + 16] == 0.5f * (float)(7 - j));
	}
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_Q4_0, t, sizeof(t), 0, 32, y), 0);
	ck_assert(y[0] == 0.0f && y[31] == 0.0f);
	ck_assert_uint_eq(bn_tensor_bytes(BN_TYPE_Q4_0, 64), 36);
	ck_assert_str_eq(bn_type_name(BN_TYPE_Q4_0), "Q4_0");
}
END_TEST

/* The encoder: the largest magnitude exactly (as -8 d), every weight within d / 2, but those
 * past 7.5 d, clamped to 7 d (the code has one step more below zero than above), within d. */
START_TEST(q4_0_quant_error)
{
	float x[4 * 32], y[4 * 32];
	uint8_t t[4 * 18];
	tu_rng_seed(41);
	for (int i = 0; i < 4 * 32; i++)
		x[i] = tu_rng_float(-3.0f, 3.0f);
	x[5] = -4.0f; /* block 0's extreme, negative */
	x[32 + 7] = 5.0f; /* block 1's, positive */
	ck_assert_uint_eq(bn_quant_row(BN_TYPE_Q4_0, x, 4 * 32, t), sizeof(t));
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_Q4_0, t, sizeof(t), 0, 4 * 32, y), 0);
	ck_assert(y[5] == -4.0f && y[32 + 7] == 5.0f);
	for (int b = 0; b < 4; b++) {
		float ds = bn_half_to_float(get_half(t + 18 * b)), d = fabsf(ds);
		for (int j = 0; j < 32; j++)
			ck_assert_msg(fabsf(y[32 * b + j] - x[32 * b + j]) <=
					      (x[32 * b + j] / ds > 7.5f ? d : d / 2) + 1e-6f,
				      "block %d weight %d: %g for %g (d %g)", b, j, y[32 * b + j],
				      x[32 * b + j], d);
	}
}
END_TEST

START_TEST(q6_k_hand_block)
{
	uint8_t t[2 * 210];
	float y[256];
	tu_rng_seed(6);
	for (size_t i = 0; i < sizeof(t); i++)
		t[i] = (uint8_t)tu_rng_next();
	uint8_t *b = t + 210; /* row 1 */
	for (int g = 0; g < 16; g++)
		b[192 + g] = (uint8_t)(int8_t)(g - 8); /* sub-scales -8..7 */
	put_half(b + 208, 0x3c00);                      /* d = 1 */
	b[0] = 0x3a;  /* low nibble 10 for weight 0, high nibble 3 for weight 64 */
	b[128] = 0xe4; /* qh byte 0 = 0b11_10_01_00: weight 0 high 0, 32 -> 1, 64 -> 2, 96 -> 3 */
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_Q6_K, t, sizeof(t), 1, 256, y), 0);
	ck_assert(y[0] == -8.0f * (10 - 32));          /* sub-scale 0 = -8 */
	ck_assert(y[64] == -4.0f * ((3 | 2 << 4) - 32)); /* sub-scale 4 = -4 */
	for (int k = 0; k < 256; k++)
		ck_assert_msg(y[k] == q6_k_oracle(b, k), "weight %d: %g vs %g", k, y[k],
			      q6_k_oracle(b, k));
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_Q6_K, t, sizeof(t), 0, 256, y), 0);
	for (int k = 0; k < 256; k++)
		ck_assert(y[k] == q6_k_oracle(t, k) || (isnan(y[k]) && isnan(q6_k_oracle(t, k))));
}
END_TEST

START_TEST(float_hand_values)
{
	const uint16_t h[4] = { 0x3c00, 0xc000, 0x7bff, 0x0001 };
	const uint16_t bf[4] = { 0x3f80, 0xc040, 0x4780, 0x0000 };
	const float f[4] = { 1.5f, -0.0f, 1e30f, -7.25f };
	float y[4];
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_F16, h, sizeof(h), 0, 4, y), 0);
	ck_assert(y[0] == 1.0f && y[1] == -2.0f && y[2] == 65504.0f && y[3] == ldexpf(1, -24));
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_BF16, bf, sizeof(bf), 0, 2, y), 0);
	ck_assert(y[0] == 1.0f && y[1] == -3.0f);
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_BF16, bf, sizeof(bf), 1, 2, y), 0);
	ck_assert(y[0] == 65536.0f && y[1] == 0.0f);
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_F32, f, sizeof(f), 1, 2, y), 0);
	ck_assert(y[0] == 1e30f && y[1] == -7.25f);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Ternary round trips                                                                        */
/* ------------------------------------------------------------------------------------------ */

static void check_ternary_row(uint32_t type, const void *t, uint64_t bytes, uint64_t row,
			      uint64_t n, const int8_t *w, float scale)
{
	float *y = malloc(n * sizeof(float));
	uint8_t *codes = malloc(n);
	float got_scale = -1;
	ck_assert_int_eq(bn_dequant_row(type, t, bytes, row, n, y), 0);
	ck_assert_int_eq(bn_ternary_row(type, t, bytes, row, n, codes, &got_scale), 0);
	ck_assert(got_scale == scale);
	for (uint64_t k = 0; k < n; k++) {
		ck_assert_msg(y[k] == (float)w[k] * scale, "%s row %d weight %d",
			      bn_type_name(type), (int)row, (int)k);
		ck_assert_int_eq(codes[k], w[k] + 1);
	}
	free(y);
	free(codes);
}

static void tq_round_trip(uint32_t type, int (*oracle)(const uint8_t *, int))
{
	enum { ROWS = 3, N = 512 };
	static int8_t w[ROWS * N];
	uint64_t rb = bn_row_bytes(type, N), blk_bytes = rb / (N / 256);
	uint8_t *t = malloc(ROWS * rb);
	tu_rng_seed(type);
	random_ternary(w, ROWS * N);
	for (int r = 0; r < ROWS; r++)
		ck_assert_uint_eq(bn_encode_ternary_row(type, w + r * N, N, 0.75f, t + r * rb), rb);
	/* The bytes, read by the test's own decoder. */
	for (int r = 0; r < ROWS; r++)
		for (int k = 0; k < N; k++) {
			const uint8_t *blk = t + r * rb + (uint64_t)(k / 256) * blk_bytes;
			ck_assert_int_eq(oracle(blk, k % 256), w[r * N + k] + 1);
			ck_assert_uint_eq(get_half(blk + blk_bytes - 2), 0x3a00); /* 0.75 */
		}
	for (int r = ROWS - 1; r >= 0; r--)
		check_ternary_row(type, t, ROWS * rb, r, N, w + r * N, 0.75f);
	free(t);
}

START_TEST(tq2_0_round_trip)
{
	tq_round_trip(BN_TYPE_TQ2_0, tq2_oracle_code);
}
END_TEST

START_TEST(tq1_0_round_trip)
{
	tq_round_trip(BN_TYPE_TQ1_0, tq1_oracle_code);
}
END_TEST

START_TEST(i2_s_round_trip)
{
	enum { ROWS = 3, N = 384 };
	static int8_t w[ROWS * N];
	uint64_t bytes = bn_i2_s_bytes(ROWS * N);
	uint8_t *t = malloc(bytes);
	float scale = 0.3f, stored;
	tu_rng_seed(36);
	random_ternary(w, ROWS * N);
	ck_assert_uint_eq(bn_encode_i2_s(w, ROWS * N, scale, t), bytes);
	ck_assert_uint_eq(bytes, ROWS * N / 4 + 32);
	for (int k = 0; k < ROWS * N; k++)
		ck_assert_int_eq(i2_s_oracle_code(t, k), w[k] + 1);
	memcpy(&stored, t + ROWS * N / 4, 4); /* the scale opens the last 32 bytes */
	ck_assert(stored == scale);
	for (int i = 4; i < 32; i++)
		ck_assert_int_eq(t[ROWS * N / 4 + i], 0);
	for (int r = ROWS - 1; r >= 0; r--)
		check_ternary_row(BN_TYPE_I2_S, t, bytes, r, N, w + r * N, scale);
	/* The same bytes seen as one row of 1152, or 9 rows of 128. */
	check_ternary_row(BN_TYPE_I2_S, t, bytes, 0, ROWS * N, w, scale);
	check_ternary_row(BN_TYPE_I2_S, t, bytes, 8, 128, w + 8 * 128, scale);
	free(t);
}
END_TEST

/* TQ from floats: d is the block's absmax, the weights round(x / d). */
START_TEST(tq_from_floats)
{
	static const uint32_t types[] = { BN_TYPE_TQ1_0, BN_TYPE_TQ2_0 };
	float x[512], y[512];
	uint8_t t[2 * 66], codes[512];
	int8_t w[512];
	tu_rng_seed(2);
	random_ternary(w, 256);
	for (int k = 0; k < 256; k++) /* block 0: ternary times 1.5, plus noise under a third */
		x[k] = 1.5f * (float)w[k] + tu_rng_float(-0.4f, 0.4f) * (w[k] == 0);
	x[7] = -1.5f, w[7] = -1;
	for (int k = 256; k < 512; k++) /* block 1: all zero */
		x[k] = 0.0f, w[k] = 0;
	for (int i = 0; i < 2; i++) {
		float scale;
		ck_assert_uint_eq(bn_quant_row(types[i], x, 512, t), bn_row_bytes(types[i], 512));
		ck_assert_int_eq(bn_dequant_row(types[i], t, sizeof(t), 0, 512, y), 0);
		ck_assert_int_eq(bn_ternary_row(types[i], t, sizeof(t), 0, 512, codes, &scale), 0);
		ck_assert(scale == 1.5f);
		for (int k = 0; k < 512; k++) {
			ck_assert_int_eq(codes[k], w[k] + 1);
			ck_assert(y[k] == (k < 256 ? 1.5f * (float)w[k] : 0.0f));
		}
	}
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* One scale per row                                                                          */
/* ------------------------------------------------------------------------------------------ */

START_TEST(ternary_row_scales)
{
	int8_t w[3 * 256];
	uint8_t t[3 * 66], codes[3 * 256];
	float scale;
	tu_rng_seed(3);
	random_ternary(w, sizeof(w));
	memset(w + 256, 0, 256); /* block 1 all zero... */
	ck_assert_uint_eq(bn_encode_ternary_row(BN_TYPE_TQ2_0, w, 768, 0.5f, t), sizeof(t));
	put_half(t + 66 + 64, 0x3c00); /* ...with a different d, which does not count */
	ck_assert_int_eq(bn_ternary_row(BN_TYPE_TQ2_0, t, sizeof(t), 0, 768, codes, &scale), 0);
	ck_assert(scale == 0.5f);
	put_half(t + 2 * 66 + 64, 0x3400); /* block 2 (non-zero) at 0.25: no single scale */
	ck_assert_int_eq(bn_ternary_row(BN_TYPE_TQ2_0, t, sizeof(t), 0, 768, codes, &scale), -2);
	/* A row of zero weights only has no scale to disagree about. */
	memset(w, 0, sizeof(w));
	bn_encode_ternary_row(BN_TYPE_TQ2_0, w, 768, 0.5f, t);
	put_half(t + 64, 0x3400);
	ck_assert_int_eq(bn_ternary_row(BN_TYPE_TQ2_0, t, sizeof(t), 0, 768, codes, &scale), 0);
	/* TQ1_0 disagrees the same way. */
	uint8_t t1[2 * 54];
	random_ternary(w, 512);
	bn_encode_ternary_row(BN_TYPE_TQ1_0, w, 512, 0.5f, t1);
	put_half(t1 + 54 + 52, 0x3c00);
	ck_assert_int_eq(bn_ternary_row(BN_TYPE_TQ1_0, t1, sizeof(t1), 0, 512, codes, &scale), -2);
}
END_TEST

/* Scales per 128-weight block (bn_ternary_row_blocks): a TQ block's d for both its halves,
 * 0 for a half of zero weights; F16 rows per block on their own magnitudes. */
START_TEST(ternary_row_block_scales)
{
	int8_t w[3 * 256];
	uint8_t t[3 * 66], codes[3 * 256];
	float bs[6];
	tu_rng_seed(7);
	random_ternary(w, sizeof(w));
	memset(w + 256 + 128, 0, 128); /* block 1's second half: zeros */
	ck_assert_uint_eq(bn_encode_ternary_row(BN_TYPE_TQ2_0, w, 768, 0.5f, t), sizeof(t));
	put_half(t + 66 + 64, 0x3c00);     /* block 1 at 1.0 */
	put_half(t + 2 * 66 + 64, 0xb400); /* block 2 at -0.25 */
	ck_assert_int_eq(bn_ternary_row_blocks(BN_TYPE_TQ2_0, t, sizeof(t), 0, 768, codes, bs), 0);
	const float want[6] = { 0.5f, 0.5f, 1.0f, 0.0f, -0.25f, -0.25f };
	for (int b = 0; b < 6; b++)
		ck_assert_msg(bs[b] == want[b], "block %d: %g, want %g", b, bs[b], want[b]);
	for (int k = 0; k < 768; k++)
		ck_assert_int_eq(codes[k], w[k] + 1);
	uint8_t t1[2 * 54];
	bn_encode_ternary_row(BN_TYPE_TQ1_0, w, 512, 0.5f, t1);
	put_half(t1 + 54 + 52, 0x3c00);
	ck_assert_int_eq(bn_ternary_row_blocks(BN_TYPE_TQ1_0, t1, sizeof(t1), 0, 512, codes, bs), 0);
	ck_assert(bs[0] == 0.5f && bs[1] == 0.5f && bs[2] == 1.0f && bs[3] == 0.0f);
	/* F16: block 0 at 0.75, block 1 zeros, block 2 at 2, then a block of two magnitudes */
	uint16_t h[4 * 128];
	for (int k = 0; k < 4 * 128; k++) {
		float v = k < 128 ? 0.75f : k < 256 ? 0.0f : 2.0f;
		h[k] = bn_float_to_half(w[k] == 0 ? -0.0f : w[k] * v);
	}
	ck_assert_int_eq(bn_ternary_row_blocks(BN_TYPE_F16, h, 3 * 256, 0, 3 * 128, codes, bs), 0);
	ck_assert(bs[0] == 0.75f && bs[1] == 0.0f && bs[2] == 2.0f);
	for (int k = 0; k < 3 * 128; k++)
		ck_assert_int_eq(codes[k], k >= 128 && k < 256 ? 1 : w[k] + 1);
	h[3 * 128 + 5] = bn_float_to_half(3.0f);
	h[3 * 128 + 6] = bn_float_to_half(-2.0f);
	ck_assert_int_eq(bn_ternary_row_blocks(BN_TYPE_F16, h, sizeof(h), 0, 4 * 128, codes, bs), 1);
	h[3 * 128 + 5] = 0x7c00; /* an infinity is no scale */
	h[3 * 128 + 6] = 0x7c00;
	for (int k = 3 * 128; k < 4 * 128; k++)
		h[k] = k % 2 ? 0x7c00 : 0xfc00;
	ck_assert_int_eq(bn_ternary_row_blocks(BN_TYPE_F16, h, sizeof(h), 0, 4 * 128, codes, bs), 1);
	/* not whole blocks, I2_S (one scale a tensor) and other types: -1 */
	ck_assert_int_eq(bn_ternary_row_blocks(BN_TYPE_F16, h, sizeof(h), 0, 200, codes, bs), -1);
	uint8_t i2[32 + 32] = { 0 };
	ck_assert_int_eq(bn_ternary_row_blocks(BN_TYPE_I2_S, i2, sizeof(i2), 0, 128, codes, bs), -1);
	ck_assert_int_eq(bn_ternary_row_blocks(BN_TYPE_Q8_0, t, sizeof(t), 0, 128, codes, bs), -1);
	ck_assert_int_eq(bn_ternary_row_blocks(BN_TYPE_TQ2_0, t, sizeof(t), 3, 256, codes, bs), -1);
	t[9] = 0x57; /* a code 3 */
	ck_assert_int_eq(bn_ternary_row_blocks(BN_TYPE_TQ2_0, t, sizeof(t), 0, 768, codes, bs), -1);
}
END_TEST

/* A 2-bit code of 3 decodes as +2 like ggml's, but is not a ternary weight. */
START_TEST(ternary_row_refuses_code_3)
{
	uint8_t t[66], codes[256];
	float y[256], scale;
	memset(t, 0x55, 64);
	t[9] = 0x57; /* weight 9: code 3 */
	put_half(t + 64, 0x3c00);
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_TQ2_0, t, sizeof(t), 0, 256, y), 0);
	ck_assert(y[9] == 2.0f);
	ck_assert_int_eq(bn_ternary_row(BN_TYPE_TQ2_0, t, sizeof(t), 0, 256, codes, &scale), -1);
	uint8_t i2[32 + 32] = { 0 };
	memset(i2, 0x55, 32);
	i2[0] = 0xd5; /* weight 0: code 3 */
	ck_assert_int_eq(bn_ternary_row(BN_TYPE_I2_S, i2, sizeof(i2), 0, 128, codes, &scale), -1);
}
END_TEST

/* The direct I2_S -> T2 repack gives the general path's bytes (bn_ternary_row, then
 * bn_t2_pack) for every row, refuses what it refuses, and leaves other rows to it. */
START_TEST(i2_s_rows_to_t2_as_the_general_path)
{
	static const uint64_t lens[] = { 256, 512, 2560 };
	for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
		enum { ROWS = 5 };
		uint64_t n = lens[li], bytes = bn_i2_s_bytes(ROWS * n), rb = bn_t2_row_bytes(n);
		int8_t *w = malloc(ROWS * n);
		uint8_t *t = malloc(bytes), *codes = malloc(n), *want = malloc(rb), *got = malloc(rb);
		tu_rng_seed(700 + (uint32_t)li);
		random_ternary(w, (int)(ROWS * n));
		ck_assert_uint_eq(bn_encode_i2_s(w, ROWS * n, 0.25f, t), bytes);
		for (uint64_t r = 0; r < ROWS; r++) {
			float s_want, s_got;
			ck_assert_int_eq(bn_ternary_row(BN_TYPE_I2_S, t, bytes, r, n, codes, &s_want), 0);
			bn_t2_pack(codes, n, want);
			ck_assert_int_eq(bn_ternary_row_t2(BN_TYPE_I2_S, t, bytes, r, n, got, &s_got), 0);
			ck_assert_msg(memcmp(got, want, rb) == 0, "row %d of %d", (int)r, (int)n);
			ck_assert(s_got == s_want);
		}
		ck_assert_int_eq(bn_ternary_row_t2(BN_TYPE_I2_S, t, bytes, ROWS, n, got, &(float){ 0 }), -1);
		t[n / 4 + 3] |= 0xc0; /* a code 3 in row 1 */
		ck_assert_int_eq(bn_ternary_row(BN_TYPE_I2_S, t, bytes, 1, n, codes, &(float){ 0 }), -1);
		ck_assert_int_eq(bn_ternary_row_t2(BN_TYPE_I2_S, t, bytes, 1, n, got, &(float){ 0 }), -1);
		free(w);
		free(t);
		free(codes);
		free(want);
		free(got);
	}
	uint8_t t[96 + 32] = { 0 }, out[64];
	ck_assert_int_eq(bn_ternary_row_t2(BN_TYPE_I2_S, t, sizeof(t), 0, 384, out, &(float){ 0 }), 1);
	ck_assert_int_eq(bn_ternary_row_t2(BN_TYPE_TQ2_0, t, sizeof(t), 0, 256, out, &(float){ 0 }), 1);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Refusals                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* Float rows that are ternary, by hand: every value -s, 0 (either sign) or +s in F32, F16 and
 * BF16; another magnitude, an infinity or a NaN is not; a row of zeros is (s = 0). */
static uint64_t float_row(uint32_t type, const float *v, uint32_t n, uint8_t *out)
{
	return bn_quant_row(type, v, n, out);
}

START_TEST(ternary_from_float_rows)
{
	static const uint32_t types[] = { BN_TYPE_F32, BN_TYPE_F16, BN_TYPE_BF16 };
	const float s = 0.046875f; /* 3/64: exact in all three */
	float row[8] = { s, -s, 0.0f, -0.0f, s, 0.0f, -s, s };
	const uint8_t want[8] = { 2, 0, 1, 1, 2, 1, 0, 2 };
	uint8_t buf[64], codes[8];
	float scale;
	for (int i = 0; i < 3; i++) {
		uint32_t t = types[i];
		ck_assert_uint_gt(float_row(t, row, 8, buf), 0);
		ck_assert_int_eq(bn_ternary_from_float_row(t, buf, 64, 0, 8, codes,
							   &scale), 0);
		ck_assert_mem_eq(codes, want, 8);
		ck_assert(scale == s);
		float off[8], zeros[8] = { 0 };
		memcpy(off, row, sizeof(off));
		off[7] = 2 * s; /* another magnitude, last */
		float_row(t, off, 8, buf);
		ck_assert_int_eq(bn_ternary_from_float_row(t, buf, 64, 0, 8, codes, &scale), 1);
		off[7] = INFINITY;
		float_row(t, off, 8, buf);
		ck_assert_int_eq(bn_ternary_from_float_row(t, buf, 64, 0, 8, codes, &scale), 1);
		for (int k = 0; k < 8; k++) /* every non-zero an infinity: one magnitude, no scale */
			off[k] = row[k] == 0.0f ? 0.0f : copysignf(INFINITY, row[k]);
		float_row(t, off, 8, buf);
		ck_assert_int_eq(bn_ternary_from_float_row(t, buf, 64, 0, 8, codes, &scale), 1);
		off[0] = NAN;
		for (int k = 1; k < 8; k++)
			off[k] = 0.0f;
		float_row(t, off, 8, buf);
		ck_assert_int_eq(bn_ternary_from_float_row(t, buf, 64, 0, 8, codes, &scale), 1);
		float_row(t, zeros, 8, buf);
		ck_assert_int_eq(bn_ternary_from_float_row(t, buf, 64, 0, 8, codes, &scale), 0);
		ck_assert(scale == 0.0f);
		for (int k = 0; k < 8; k++)
			ck_assert_uint_eq(codes[k], 1);
		/* row 1 of a two-row tensor: its own scale; row 2 is out of range */
		float two[16];
		for (int k = 0; k < 16; k++)
			two[k] = k < 8 ? row[k] : 2 * row[k - 8];
		float_row(t, two, 16, buf);
		uint64_t bytes = bn_row_bytes(t, 8) * 2;
		ck_assert_int_eq(bn_ternary_from_float_row(t, buf, bytes, 1, 8, codes, &scale), 0);
		ck_assert(scale == 2 * s);
		ck_assert_mem_eq(codes, want, 8);
		ck_assert_int_eq(bn_ternary_from_float_row(t, buf, bytes, 2, 8, codes, &scale), -1);
	}
	ck_assert_int_eq(bn_ternary_from_float_row(BN_TYPE_TQ2_0, buf, 64, 0, 8, codes, &scale), -1);
}
END_TEST

START_TEST(rows_out_of_range)
{
	static const uint32_t types[] = { BN_TYPE_F32, BN_TYPE_F16, BN_TYPE_BF16, BN_TYPE_Q8_0,
					  BN_TYPE_Q6_K, BN_TYPE_TQ1_0, BN_TYPE_TQ2_0 };
	static uint8_t t[4 * 512 * 4];
	static float y[512];
	uint8_t codes[512];
	float scale;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		uint64_t bytes = 2 * bn_row_bytes(types[i], 512); /* two rows */
		ck_assert_int_eq(bn_dequant_row(types[i], t, bytes, 1, 512, y), 0);
		ck_assert_int_eq(bn_dequant_row(types[i], t, bytes, 2, 512, y), -1);
		ck_assert_int_eq(bn_dequant_row(types[i], t, bytes - 1, 1, 512, y), -1);
		ck_assert_int_eq(bn_dequant_row(types[i], t, bytes, UINT64_MAX, 512, y), -1);
		ck_assert_int_eq(bn_dequant_row(types[i], t, bytes, UINT64_MAX / 4, 512, y), -1);
		ck_assert_int_eq(bn_dequant_row(types[i], t, bytes, 0, 0, y), -1);
	}
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_Q8_0, t, sizeof(t), 0, 48, y), -1);
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_TQ2_0, t, sizeof(t), 0, 128, y), -1);
	ck_assert_int_eq(bn_dequant_row(99, t, sizeof(t), 0, 32, y), -1);
	/* I2_S: two rows of 256 are 128 code bytes and the 32-byte tail. */
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_I2_S, t, 160, 1, 256, y), 0);
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_I2_S, t, 160, 2, 256, y), -1);
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_I2_S, t, 159, 1, 256, y), -1);
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_I2_S, t, 160, 0, 192, y), -1);
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_I2_S, t, 31, 0, 128, y), -1);
	ck_assert_int_eq(bn_ternary_row(BN_TYPE_I2_S, t, 160, UINT64_MAX, 256, codes, &scale), -1);
	/* Not ternary. */
	ck_assert_int_eq(bn_ternary_row(BN_TYPE_F32, t, sizeof(t), 0, 32, codes, &scale), -1);
	ck_assert_int_eq(bn_ternary_row(BN_TYPE_Q8_0, t, sizeof(t), 0, 32, codes, &scale), -1);
}
END_TEST

START_TEST(encoders_refuse)
{
	int8_t w[256] = { 0 };
	float x[256] = { 0 };
	static uint8_t out[1024];
	ck_assert_uint_eq(bn_encode_ternary_row(BN_TYPE_TQ2_0, w, 128, 1, out), 0);
	ck_assert_uint_eq(bn_encode_ternary_row(BN_TYPE_I2_S, w, 256, 1, out), 0);
	ck_assert_uint_eq(bn_encode_ternary_row(BN_TYPE_Q8_0, w, 256, 1, out), 0);
	ck_assert_uint_eq(bn_encode_i2_s(w, 100, 1, out), 0);
	ck_assert_uint_eq(bn_encode_i2_s(w, 0, 1, out), 0);
	w[17] = 2;
	ck_assert_uint_eq(bn_encode_ternary_row(BN_TYPE_TQ1_0, w, 256, 1, out), 0);
	ck_assert_uint_eq(bn_encode_i2_s(w, 256, 1, out), 0);
	ck_assert_uint_eq(bn_quant_row(BN_TYPE_I2_S, x, 256, out), 0);
	ck_assert_uint_eq(bn_quant_row(BN_TYPE_Q6_K, x, 128, out), 0);
	ck_assert_uint_eq(bn_quant_row(BN_TYPE_Q8_0, x, 33, out), 0);
	ck_assert_uint_eq(bn_quant_row(77, x, 32, out), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* T2 planes                                                                                  */
/* ------------------------------------------------------------------------------------------ */

START_TEST(t2_pack_codes)
{
	static const uint64_t sizes[] = { 1, 64, 255, 256, 257, 612, 1024 };
	uint8_t codes[1024], row[4 * 64];
	tu_rng_seed(22);
	for (size_t i = 0; i < sizeof(codes); i++)
		codes[i] = (uint8_t)(tu_rng_next() % 3);
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		uint64_t n = sizes[s], bytes = (n + 255) / 256 * 64;
		memset(row, 0xaa, sizeof(row));
		ck_assert_uint_eq(bn_t2_row_bytes(n), bytes);
		bn_t2_pack(codes, n, row);
		for (uint64_t k = 0; k < bytes * 4; k++)
			ck_assert_msg(bn_t2_code(row, k) == (k < n ? codes[k] : 1),
				      "n %d weight %d", (int)n, (int)k);
		for (uint64_t i = bytes; i < sizeof(row); i++) /* nothing past the row */
			ck_assert_int_eq(row[i], 0xaa);
	}
}
END_TEST

/* Chunk 1, byte m: weights 256 + m, +64, +128, +192 in bits 0-1, 2-3, 4-5, 6-7. */
START_TEST(t2_pack_byte_layout)
{
	uint8_t codes[512], row[128];
	tu_rng_seed(23);
	for (int i = 0; i < 512; i++)
		codes[i] = (uint8_t)(tu_rng_next() % 3);
	bn_t2_pack(codes, 512, row);
	for (int m = 0; m < 64; m++) {
		const uint8_t *c = codes + 256 + m;
		ck_assert_int_eq(row[64 + m], c[0] | c[64] << 2 | c[128] << 4 | c[192] << 6);
	}
	/* 300 weights: the second chunk is weights 256..299 then code 1 (0b01) padding. */
	bn_t2_pack(codes, 300, row);
	ck_assert_int_eq(row[64 + 43], codes[299] | 0x54);
	ck_assert_int_eq(row[64 + 44], 0x55);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Float quantizers: error bounds                                                             */
/* ------------------------------------------------------------------------------------------ */

START_TEST(f32_f16_bf16_quant)
{
	enum { N = 1000 };
	static float x[N], y[N];
	static uint8_t t[4 * N];
	tu_rng_seed(16);
	for (int i = 0; i < N; i++)
		x[i] = ldexpf(tu_rng_float(-1, 1), (int)(tu_rng_next() % 20) - 10);
	ck_assert_uint_eq(bn_quant_row(BN_TYPE_F32, x, N, t), 4 * N);
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_F32, t, 4 * N, 0, N, y), 0);
	ck_assert(memcmp(x, y, sizeof(x)) == 0);
	ck_assert_uint_eq(bn_quant_row(BN_TYPE_F16, x, N, t), 2 * N);
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_F16, t, 2 * N, 0, N, y), 0);
	for (int i = 0; i < N; i++) /* normal halves: half an ulp of 2^-10 */
		ck_assert_msg(fabsf(y[i] - x[i]) <= fabsf(x[i]) * 0x1p-11f + 0x1p-25f, "%d", i);
	ck_assert_uint_eq(bn_quant_row(BN_TYPE_BF16, x, N, t), 2 * N);
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_BF16, t, 2 * N, 0, N, y), 0);
	for (int i = 0; i < N; i++)
		ck_assert_msg(fabsf(y[i] - x[i]) <= fabsf(x[i]) * 0x1p-8f, "%d", i);
}
END_TEST

START_TEST(q8_0_quant_error)
{
	enum { N = 32 * 40 };
	static float x[N], y[N];
	static uint8_t t[N / 32 * 34];
	tu_rng_seed(8);
	for (int i = 0; i < N; i++)
		x[i] = tu_rng_float(-3, 3) * (float)(1 + i / 256);
	for (int i = 64; i < 96; i++) /* block 2 all zero */
		x[i] = 0;
	ck_assert_uint_eq(bn_quant_row(BN_TYPE_Q8_0, x, N, t), sizeof(t));
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_Q8_0, t, sizeof(t), 0, N, y), 0);
	for (int b = 0; b < N / 32; b++) {
		float amax = 0, d = bn_half_to_float(get_half(t + 34 * b));
		for (int j = 0; j < 32; j++)
			amax = fmaxf(amax, fabsf(x[32 * b + j]));
		ck_assert(fabsf(d - amax / 127) <= amax / 127 * 0x1p-11f);
		for (int j = 0; j < 32; j++) {
			int i = 32 * b + j;
			/* plus float rounding in x / d and d * q */
			float bound = d / 2 + fabsf(x[i]) * 0x1p-22f;
			ck_assert_msg(fabsf(y[i] - x[i]) <= bound, "weight %d", i);
		}
	}
	ck_assert(y[70] == 0.0f);
}
END_TEST

START_TEST(q6_k_quant_error)
{
	enum { N = 256 * 8 };
	static float x[N], y[N];
	static uint8_t t[N / 256 * 210];
	double err = 0, sum = 0;
	tu_rng_seed(14);
	for (int i = 0; i < N; i++) /* roughly normal (sum of four uniforms), varying magnitude */
		x[i] = (tu_rng_float(-1, 1) + tu_rng_float(-1, 1) + tu_rng_float(-1, 1) + tu_rng_float(-1, 1)) *
		       (float)(1 + i % 300) * 0.01f;
	for (int i = 512; i < 768; i++) /* block 2 all zero */
		x[i] = 0;
	ck_assert_uint_eq(bn_quant_row(BN_TYPE_Q6_K, x, N, t), sizeof(t));
	ck_assert_int_eq(bn_dequant_row(BN_TYPE_Q6_K, t, sizeof(t), 0, N, y), 0);
	for (int i = 0; i < N; i++) {
		ck_assert(y[i] == q6_k_oracle(t + 210 * (i / 256), i % 256));
		err += (double)(y[i] - x[i]) * (y[i] - x[i]);
		sum += (double)x[i] * x[i];
	}
	/* Rounding to steps of max|x| / 31 per 16 weights: about 0.019 for this data. */
	ck_assert_msg(sqrt(err / sum) < 0.025, "relative RMS error %g", sqrt(err / sum));
	for (int i = 512; i < 768; i++)
		ck_assert(y[i] == 0.0f);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("quant");
	TCase *hand = tcase_create("hand-built blocks");
	tcase_add_test(hand, tq2_0_hand_block);
	tcase_add_test(hand, tq1_0_hand_block);
	tcase_add_test(hand, tq1_0_every_byte);
	tcase_add_test(hand, i2_s_hand_block);
	tcase_add_test(hand, q8_0_hand_block);
	tcase_add_test(hand, q4_0_hand_block);
	tcase_add_test(hand, q6_k_hand_block);
	tcase_add_test(hand, float_hand_values);
	suite_add_tcase(s, hand);
	TCase *tern = tcase_create("ternary");
	tcase_add_test(tern, tq2_0_round_trip);
	tcase_add_test(tern, tq1_0_round_trip);
	tcase_add_test(tern, i2_s_round_trip);
	tcase_add_test(tern, tq_from_floats);
	tcase_add_test(tern, ternary_row_scales);
	tcase_add_test(tern, ternary_row_block_scales);
	tcase_add_test(tern, ternary_row_refuses_code_3);
	tcase_add_test(tern, i2_s_rows_to_t2_as_the_general_path);
	tcase_add_test(tern, rows_out_of_range);
	tcase_add_test(tern, ternary_from_float_rows);
	tcase_add_test(tern, encoders_refuse);
	suite_add_tcase(s, tern);
	TCase *t2 = tcase_create("t2 planes");
	tcase_add_test(t2, t2_pack_codes);
	tcase_add_test(t2, t2_pack_byte_layout);
	suite_add_tcase(s, t2);
	TCase *fq = tcase_create("float quantizers");
	tcase_add_test(fq, f32_f16_bf16_quant);
	tcase_add_test(fq, q8_0_quant_error);
	tcase_add_test(fq, q4_0_quant_error);
	tcase_add_test(fq, q6_k_quant_error);
	suite_add_tcase(s, fq);
	return tu_run_suite(s);
}
