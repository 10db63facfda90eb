/* SPDX-License-Identifier: MIT */
/*
 * quant.c — reference decoding and encoding of the tensor types (layouts: kernels/bn_blocks.h),
 * and the repack of ternary codes into the kernels' T2 planes. Scalar, one block at a time,
 * written to be read next to the layout comments: these are the oracles the fast kernels and
 * the loader are tested against.
 *
 * Blocks are copied in and out with memcpy: a tensor inside an mmap'd file is only as aligned
 * as the file says, and the block structs want 2-byte alignment for their half scales.
 */
#include "quant.h"
#include "kernels.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Where a row lives                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* Byte offset of row `row` (n weights) in a tensor of tensor_bytes, or -1 when the row does
 * not fit. I2_S rows are slices of one flattened tensor whose last 32 bytes hold the scale;
 * every other type stores whole rows of blocks back to back. Divisions instead of products
 * so that a hostile row or n cannot wrap the arithmetic. */
static int row_offset(uint32_t type, uint64_t tensor_bytes, uint64_t row, uint64_t n,
		      uint64_t *off)
{
	uint64_t row_bytes, data_bytes = tensor_bytes;
	if (type == BN_TYPE_I2_S) {
		if (n == 0 || n % BN_QK_I2_S != 0 || tensor_bytes < BN_I2_S_TAIL_BYTES)
			return -1;
		row_bytes = n / 4;
		data_bytes = tensor_bytes - BN_I2_S_TAIL_BYTES;
	} else {
		row_bytes = bn_row_bytes(type, n);
		if (row_bytes == 0)
			return -1;
	}
	if (row >= data_bytes / row_bytes)
		return -1;
	*off = row * row_bytes;
	return 0;
}

static float i2_s_scale(const uint8_t *tensor, uint64_t tensor_bytes)
{
	float s;
	memcpy(&s, tensor + tensor_bytes - BN_I2_S_TAIL_BYTES, sizeof(s));
	return s;
}

/* ------------------------------------------------------------------------------------------ */
/* Ternary blocks to codes (0, 1, 2 = weight -1, 0, +1; 2-bit formats can also say 3)          */
/* ------------------------------------------------------------------------------------------ */

static const uint8_t pow3[6] = { 1, 3, 9, 27, 81, 243 };

/* Trit n (most significant first) of a TQ1_0 byte. The byte is the trits as a base-3 fraction
 * of 256: multiplying by 3^n (mod 256) shifts trit n to the top, and * 3 >> 8 reads it. */
static uint8_t tq1_trit(uint8_t byte, int n)
{
	uint8_t q = (uint8_t)(byte * pow3[n]);
	return (uint8_t)(((uint16_t)q * 3) >> 8);
}

static uint16_t tq1_0_codes(const uint8_t *src, uint8_t codes[BN_QK_K])
{
	struct bn_block_tq1_0 b;
	memcpy(&b, src, sizeof(b));
	for (int n = 0; n < 5; n++) /* qs[0..32): weights m + 32n */
		for (int m = 0; m < 32; m++)
			codes[32 * n + m] = tq1_trit(b.qs[m], n);
	for (int n = 0; n < 5; n++) /* qs[32..48): weights 160 + m + 16n */
		for (int m = 0; m < 16; m++)
			codes[160 + 16 * n + m] = tq1_trit(b.qs[32 + m], n);
	for (int n = 0; n < 4; n++) /* qh[0..4): weights 240 + j + 4n */
		for (int j = 0; j < 4; j++)
			codes[240 + 4 * n + j] = tq1_trit(b.qh[j], n);
	return b.d;
}

static uint16_t tq2_0_codes(const uint8_t *src, uint8_t codes[BN_QK_K])
{
	struct bn_block_tq2_0 b;
	memcpy(&b, src, sizeof(b));
	for (int h = 0; h < 2; h++)
		for (int l = 0; l < 4; l++)
			for (int m = 0; m < 32; m++)
				codes[128 * h + 32 * l + m] = (b.qs[32 * h + m] >> (2 * l)) & 3;
	return b.d;
}

/* One TQ1_0 or TQ2_0 block: its codes, and its scale as half bits. */
static uint16_t tq_block_codes(uint32_t type, const uint8_t *src, uint8_t codes[BN_QK_K])
{
	return type == BN_TYPE_TQ1_0 ? tq1_0_codes(src, codes) : tq2_0_codes(src, codes);
}

static uint64_t tq_block_bytes(uint32_t type)
{
	return type == BN_TYPE_TQ1_0 ? sizeof(struct bn_block_tq1_0)
				     : sizeof(struct bn_block_tq2_0);
}

/* n codes of an I2_S row: 128-weight blocks of 32 bytes, weights b + 32g in bits 7-6 down. */
static void i2_s_codes(const uint8_t *src, uint64_t n, uint8_t *codes)
{
	for (uint64_t blk = 0; blk < n / BN_QK_I2_S; blk++) {
		const uint8_t *b = src + blk * BN_I2_S_BLOCK_BYTES;
		uint8_t *c = codes + blk * BN_QK_I2_S;
		for (int g = 0; g < 4; g++)
			for (int m = 0; m < 32; m++)
				c[32 * g + m] = (b[m] >> (6 - 2 * g)) & 3;
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Decoding rows to float                                                                     */
/* ------------------------------------------------------------------------------------------ */

static void dequant_f16(const uint8_t *src, uint64_t n, float *out)
{
	for (uint64_t i = 0; i < n; i++) {
		uint16_t h;
		memcpy(&h, src + 2 * i, sizeof(h));
		out[i] = bn_half_to_float(h);
	}
}

static void dequant_bf16(const uint8_t *src, uint64_t n, float *out)
{
	for (uint64_t i = 0; i < n; i++) {
		uint16_t h;
		memcpy(&h, src + 2 * i, sizeof(h));
		out[i] = bn_bf16_to_float(h);
	}
}

static void dequant_q8_0(const uint8_t *src, uint64_t n, float *out)
{
	for (uint64_t blk = 0; blk < n / BN_QK8_0; blk++) {
		struct bn_block_q8_0 b;
		memcpy(&b, src + blk * sizeof(b), sizeof(b));
		float d = bn_half_to_float(b.d);
		for (int j = 0; j < BN_QK8_0; j++)
			out[blk * BN_QK8_0 + j] = d * (float)b.qs[j];
	}
}

/* ggml's dequantize_row_q6_K for one block: each half of 128 weights takes 64 ql bytes (low
 * nibbles: weights l and l+32, high nibbles: l+64 and l+96) and 32 qh bytes (two bits per
 * weight, quarters in bit pairs 0-1 .. 6-7); sub-scale k/16 covers weights k of the block. */
static void bn_dequant_q6_k(const struct bn_block_q6_k *b, float y[BN_QK_K])
{
	const float d = bn_half_to_float(b->d);
	const uint8_t *ql = b->ql, *qh = b->qh;
	const int8_t *sc = b->scales;
	for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, sc += 8) {
		for (int l = 0; l < 32; l++) {
			int is = l / 16;
			int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
			int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
			int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
			int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
			y[l] = d * sc[is] * q1;
			y[l + 32] = d * sc[is + 2] * q2;
			y[l + 64] = d * sc[is + 4] * q3;
			y[l + 96] = d * sc[is + 6] * q4;
		}
	}
}

static void dequant_q6_k(const uint8_t *src, uint64_t n, float *out)
{
	for (uint64_t blk = 0; blk < n / BN_QK_K; blk++) {
		struct bn_block_q6_k b;
		memcpy(&b, src + blk * sizeof(b), sizeof(b));
		bn_dequant_q6_k(&b, out + blk * BN_QK_K);
	}
}

/* Code c is weight c - 1, as ggml decodes it (so a stray 2-bit code 3 reads as +2). */
static float code_weight(uint8_t code, float scale)
{
	return (float)((int)code - 1) * scale;
}

static void dequant_tq(uint32_t type, const uint8_t *src, uint64_t n, float *out)
{
	uint8_t codes[BN_QK_K];
	for (uint64_t blk = 0; blk < n / BN_QK_K; blk++) {
		float d = bn_half_to_float(tq_block_codes(type, src + blk * tq_block_bytes(type),
							  codes));
		for (int j = 0; j < BN_QK_K; j++)
			out[blk * BN_QK_K + j] = code_weight(codes[j], d);
	}
}

static void dequant_i2_s(const uint8_t *src, uint64_t n, float scale, float *out)
{
	uint8_t codes[BN_QK_I2_S];
	for (uint64_t blk = 0; blk < n / BN_QK_I2_S; blk++) {
		i2_s_codes(src + blk * BN_I2_S_BLOCK_BYTES, BN_QK_I2_S, codes);
		for (int j = 0; j < BN_QK_I2_S; j++)
			out[blk * BN_QK_I2_S + j] = code_weight(codes[j], scale);
	}
}

int bn_dequant_row(uint32_t type, const void *tensor, uint64_t tensor_bytes, uint64_t row,
		   uint64_t n, float *out)
{
	const uint8_t *t = tensor;
	uint64_t off;
	if (row_offset(type, tensor_bytes, row, n, &off) != 0)
		return -1;
	switch (type) {
	case BN_TYPE_F32: memcpy(out, t + off, n * sizeof(float)); return 0;
	case BN_TYPE_F16: dequant_f16(t + off, n, out); return 0;
	case BN_TYPE_BF16: dequant_bf16(t + off, n, out); return 0;
	case BN_TYPE_Q8_0: dequant_q8_0(t + off, n, out); return 0;
	case BN_TYPE_Q6_K: dequant_q6_k(t + off, n, out); return 0;
	case BN_TYPE_TQ1_0:
	case BN_TYPE_TQ2_0: dequant_tq(type, t + off, n, out); return 0;
	case BN_TYPE_I2_S: dequant_i2_s(t + off, n, i2_s_scale(t, tensor_bytes), out); return 0;
	}
	return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Ternary rows: codes and the one scale                                                      */
/* ------------------------------------------------------------------------------------------ */

static int all_code(const uint8_t *codes, uint64_t n, uint8_t code)
{
	for (uint64_t i = 0; i < n; i++)
		if (codes[i] != code)
			return 0;
	return 1;
}

/* A TQ row's codes and its scale. An all-zero block's d carries no information (converters
 * write 0 or anything there), so only blocks with a non-zero weight must agree; the half bits
 * are compared so that equal scales are equal in every sense. -2 when they disagree. */
static int tq_row(uint32_t type, const uint8_t *src, uint64_t n, uint8_t *codes, float *scale)
{
	int have = 0, disagree = 0;
	uint16_t d = 0;
	for (uint64_t blk = 0; blk < n / BN_QK_K; blk++) {
		uint8_t *c = codes + blk * BN_QK_K;
		uint16_t bd = tq_block_codes(type, src + blk * tq_block_bytes(type), c);
		if (all_code(c, BN_QK_K, 1))
			continue;
		if (have && bd != d)
			disagree = 1;
		have = 1;
		d = bd;
	}
	*scale = have ? bn_half_to_float(d) : 0.0f;
	return disagree ? -2 : 0;
}

int bn_ternary_row(uint32_t type, const void *tensor, uint64_t tensor_bytes, uint64_t row,
		   uint64_t n, uint8_t *codes, float *scale)
{
	const uint8_t *t = tensor;
	uint64_t off;
	int rc = 0;
	if (!bn_type_is_ternary(type) || row_offset(type, tensor_bytes, row, n, &off) != 0)
		return -1;
	if (type == BN_TYPE_I2_S) {
		i2_s_codes(t + off, n, codes);
		*scale = i2_s_scale(t, tensor_bytes);
	} else {
		rc = tq_row(type, t + off, n, codes, scale);
	}
	/* Code 3 (weight +2) fits in two bits but is not ternary, and no converter writes it:
	 * refuse the row rather than hand the kernels a code outside 0..2. */
	for (uint64_t i = 0; i < n; i++)
		if (codes[i] > 2)
			return -1;
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Float rows that are ternary                                                                */
/* ------------------------------------------------------------------------------------------ */

static uint32_t load_bits(const uint8_t *p, uint64_t i, unsigned width)
{
	if (width == 4) {
		uint32_t v;
		memcpy(&v, p + 4 * i, sizeof(v));
		return v;
	}
	uint16_t v;
	memcpy(&v, p + 2 * i, sizeof(v));
	return v;
}

/* Compared as bits: the magnitude (sign bit cleared) of every non-zero value must be the
 * row's one magnitude. Bits, not floats, so that equal means equal as stored whatever the
 * type. The width is a constant at each call, so the compiler makes a loop per width. */
static inline __attribute__((always_inline)) int
ternary_bits(const uint8_t *p, uint64_t n, unsigned width, uint8_t *codes, uint32_t *mag_out)
{
	const uint32_t sign = width == 4 ? 0x80000000u : 0x8000u;
	uint32_t mag = 0;
	for (uint64_t i = 0; i < n; i++) {
		uint32_t v = load_bits(p, i, width), m = v & ~sign;
		if (m == 0) {
			codes[i] = 1;
			continue;
		}
		if (!mag)
			mag = m;
		if (m != mag)
			return 1;
		codes[i] = v & sign ? 0 : 2;
	}
	*mag_out = mag;
	return 0;
}

int bn_ternary_from_float_row(uint32_t type, const void *tensor, uint64_t tensor_bytes,
			      uint64_t row, uint64_t n, uint8_t *codes, float *scale)
{
	uint64_t off;
	uint32_t mag = 0;
	if ((type != BN_TYPE_F32 && type != BN_TYPE_F16 && type != BN_TYPE_BF16) ||
	    row_offset(type, tensor_bytes, row, n, &off) != 0)
		return -1;
	const uint8_t *p = (const uint8_t *)tensor + off;
	int rc = type == BN_TYPE_F32 ? ternary_bits(p, n, 4, codes, &mag)
				     : ternary_bits(p, n, 2, codes, &mag);
	if (rc)
		return rc;
	uint32_t exp_all = type == BN_TYPE_F32 ? 0x7f800000u : type == BN_TYPE_F16 ? 0x7c00u
										   : 0x7f80u;
	if ((mag & exp_all) == exp_all) /* an infinity or a NaN is no scale */
		return 1;
	if (type == BN_TYPE_F32)
		memcpy(scale, &mag, sizeof(*scale));
	else
		*scale = type == BN_TYPE_F16 ? bn_half_to_float((uint16_t)mag)
					     : bn_bf16_to_float((uint16_t)mag);
	return 0;
}

/* Weight k goes to chunk k/320; within it, byte k%64 and base-3 digit (k%320)/64. */
void bn_t3_pack(const uint8_t *codes, uint64_t n, uint8_t *out)
{
	uint64_t chunks = bn_t3_row_bytes(n) / BN_T3_CHUNK_BYTES;
	for (uint64_t c = 0; c < chunks; c++)
		for (uint32_t j = 0; j < BN_T3_CHUNK_BYTES; j++) {
			uint32_t byte = 0;
			for (uint32_t p = 5; p-- > 0;) {
				uint64_t k = c * BN_T3_CHUNK + 64 * p + j;
				byte = byte * 3 + (k < n ? codes[k] : 1);
			}
			out[c * BN_T3_CHUNK_BYTES + j] = (uint8_t)byte;
		}
}

void bn_t2_unpack(const uint8_t *row, uint64_t n, uint8_t *codes)
{
	for (uint64_t c = 0; c * BN_T2_CHUNK < n; c++)
		for (uint32_t p = 0; p < 4; p++)
			for (uint32_t j = 0; j < BN_T2_CHUNK_BYTES; j++) {
				uint64_t k = c * BN_T2_CHUNK + 64 * p + j;
				if (k < n)
					codes[k] = (row[c * BN_T2_CHUNK_BYTES + j] >> (2 * p)) & 3;
			}
}

/* Weight k goes to chunk k/256; within it, byte k%64 and bit pair (k%256)/64. */
void bn_t2_pack(const uint8_t *codes, uint64_t n, uint8_t *out)
{
	/* byte by byte, each gathering its four planes (a read-modify-write per weight, with two
	 * divisions, was 42 % of loading the 2B4T model) */
	uint64_t chunks = bn_t2_row_bytes(n) / BN_T2_CHUNK_BYTES;
	for (uint64_t c = 0; c < chunks; c++)
		for (uint32_t j = 0; j < BN_T2_CHUNK_BYTES; j++) {
			uint8_t byte = 0;
			for (uint32_t p = 0; p < 4; p++) {
				uint64_t k = c * BN_T2_CHUNK + 64 * p + j;
				byte |= (uint8_t)((k < n ? (codes[k] & 3) : 1) << (2 * p));
			}
			out[c * BN_T2_CHUNK_BYTES + j] = byte;
		}
}

/* One T2 chunk (64 bytes) from two I2_S blocks (32 bytes each). T2 byte j holds the codes of
 * weights j, 64 + j, 128 + j, 192 + j in bit pairs 0-1 up to 6-7; I2_S byte m of a block holds
 * weights m, 32 + m, 64 + m, 96 + m in bit pairs 7-6 down to 1-0. So T2 byte j < 32 takes bit
 * pairs 7-6 and 3-2 of byte j of each block, byte 32 + j pairs 5-4 and 1-0: eight bytes at a
 * time in a 64-bit word, every shift masked back into its own byte. Returns nonzero when a
 * code is 3 (no weight), which bn_ternary_row refuses. */
static uint64_t i2_s_chunk_to_t2(const uint8_t *b0, const uint8_t *b1, uint8_t *out)
{
	const uint64_t m = 0x0303030303030303ull, odd = 0x5555555555555555ull;
	uint64_t threes = 0;
	for (int j = 0; j < 32; j += 8) {
		uint64_t x, y;
		memcpy(&x, b0 + j, 8);
		memcpy(&y, b1 + j, 8);
		threes |= (x & (x >> 1)) | (y & (y >> 1)); /* bit 2i: pair i is 3 */
		uint64_t lo = ((x >> 6) & m) | (((x >> 2) & m) << 2) | (((y >> 6) & m) << 4) |
			      (((y >> 2) & m) << 6);
		uint64_t hi = ((x >> 4) & m) | ((x & m) << 2) | (((y >> 4) & m) << 4) | ((y & m) << 6);
		memcpy(out + j, &lo, 8);
		memcpy(out + 32 + j, &hi, 8);
	}
	return threes & odd;
}

int bn_ternary_row_t2(uint32_t type, const void *tensor, uint64_t tensor_bytes, uint64_t row,
		      uint64_t n, uint8_t *out, float *scale)
{
	uint64_t off;
	if (type != BN_TYPE_I2_S || n % BN_T2_CHUNK != 0)
		return 1;
	if (row_offset(type, tensor_bytes, row, n, &off) != 0)
		return -1;
	const uint8_t *src = (const uint8_t *)tensor + off;
	uint64_t threes = 0;
	for (uint64_t c = 0; c < n / BN_T2_CHUNK; c++)
		threes |= i2_s_chunk_to_t2(src + c * 2 * BN_I2_S_BLOCK_BYTES,
					   src + c * 2 * BN_I2_S_BLOCK_BYTES + BN_I2_S_BLOCK_BYTES,
					   out + c * BN_T2_CHUNK_BYTES);
	*scale = i2_s_scale(tensor, tensor_bytes);
	return threes ? -1 : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The panel layout of float matrices (kernels.h)                                             */
/* ------------------------------------------------------------------------------------------ */

static size_t float_type_size(uint32_t type)
{
	return type == BN_TYPE_F32 ? 4 : 2;
}

uint64_t bn_f_panel_bytes(uint32_t type, uint32_t n_in, uint32_t n_out)
{
	uint64_t groups = ((uint64_t)n_out + BN_F_PANEL_ROWS - 1) / BN_F_PANEL_ROWS;
	return groups * BN_F_PANEL_ROWS * n_in * float_type_size(type);
}

void bn_f_pack_panel(uint32_t type, const void *rows, uint64_t row_bytes, uint32_t n_in,
		     uint32_t n_rows, void *panel)
{
	size_t es = float_type_size(type);
	memset(panel, 0, (size_t)BN_F_PANEL_ROWS * n_in * es);
	for (uint32_t r = 0; r < n_rows; r++) {
		const uint8_t *row = (const uint8_t *)rows + r * row_bytes;
		if (es == 4) { /* typed copies: a memcpy call per value made loading 2B4T 1 s slower */
			uint32_t *out = (uint32_t *)panel + r;
			for (uint32_t k = 0; k < n_in; k++)
				memcpy(&out[(size_t)k * BN_F_PANEL_ROWS], row + 4 * (size_t)k, 4);
		} else {
			uint16_t *out = (uint16_t *)panel + r;
			for (uint32_t k = 0; k < n_in; k++)
				memcpy(&out[(size_t)k * BN_F_PANEL_ROWS], row + 2 * (size_t)k, 2);
		}
	}
}

float bn_f_weight(const struct bn_f_matrix *w, uint32_t o, uint32_t k)
{
	size_t es = float_type_size(w->type);
	size_t i = w->panel_rows ? ((size_t)(o / BN_F_PANEL_ROWS) * w->n_in + k) * BN_F_PANEL_ROWS +
					   o % BN_F_PANEL_ROWS
				 : (size_t)o * (w->row_bytes / es) + k;
	const uint8_t *p = (const uint8_t *)w->data + i * es;
	uint16_t h;
	float f;
	if (w->type == BN_TYPE_F32) {
		memcpy(&f, p, 4);
		return f;
	}
	memcpy(&h, p, 2);
	return w->type == BN_TYPE_F16 ? bn_half_to_float(h) : bn_bf16_to_float(h);
}

void bn_f_row(const struct bn_f_matrix *w, uint32_t o, float *out)
{
	for (uint32_t k = 0; k < w->n_in; k++)
		out[k] = bn_f_weight(w, o, k);
}

/* ------------------------------------------------------------------------------------------ */
/* Encoders                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static long clampl(long v, long lo, long hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

static float block_absmax(const float *x, int n)
{
	float m = 0.0f;
	for (int i = 0; i < n; i++)
		m = fmaxf(m, fabsf(x[i]));
	return m;
}

/* Q8_0: d = absmax / 127. The weights are rounded against d as stored (half), not against the
 * float d as ggml does, so every decoded weight is within d/2 of its input. */
static void quant_q8_0(const float *x, uint64_t n, uint8_t *out)
{
	for (uint64_t blk = 0; blk < n / BN_QK8_0; blk++, x += BN_QK8_0) {
		struct bn_block_q8_0 b;
		b.d = bn_float_to_half(block_absmax(x, BN_QK8_0) / 127.0f);
		float d = bn_half_to_float(b.d);
		for (int j = 0; j < BN_QK8_0; j++)
			b.qs[j] = (int8_t)(d > 0.0f ? clampl(lroundf(x[j] / d), -127, 127) : 0);
		memcpy(out + blk * sizeof(b), &b, sizeof(b));
	}
}

/* Stores 256 values q in [-32, 31] the way bn_dequant_q6_k reads them back. */
static void q6_k_pack(const int8_t q[BN_QK_K], struct bn_block_q6_k *b)
{
	for (int half = 0; half < 2; half++) {
		const int8_t *y = q + 128 * half;
		uint8_t *ql = b->ql + 64 * half, *qh = b->qh + 32 * half;
		for (int l = 0; l < 32; l++) {
			uint8_t u1 = (uint8_t)(y[l] + 32), u2 = (uint8_t)(y[l + 32] + 32);
			uint8_t u3 = (uint8_t)(y[l + 64] + 32), u4 = (uint8_t)(y[l + 96] + 32);
			ql[l] = (uint8_t)((u1 & 0xF) | ((u3 & 0xF) << 4));
			ql[l + 32] = (uint8_t)((u2 & 0xF) | ((u4 & 0xF) << 4));
			qh[l] = (uint8_t)((u1 >> 4) | ((u2 >> 4) << 2) | ((u3 >> 4) << 4) |
					  ((u4 >> 4) << 6));
		}
	}
}

/* Q6_K, plainly (not llama.cpp's iterative search): each 16-weight group wants the scale
 * max|x| / 31; those become int8 sub-scales of one super-scale d = largest / 127; the weights
 * are rounded against the scale as stored, d (half) * sub-scale. */
static void quant_q6_k_block(const float *x, struct bn_block_q6_k *b)
{
	float want[BN_QK_K / 16], largest = 0.0f;
	int8_t q[BN_QK_K];
	for (int g = 0; g < BN_QK_K / 16; g++) {
		want[g] = block_absmax(x + 16 * g, 16) / 31.0f;
		largest = fmaxf(largest, want[g]);
	}
	b->d = bn_float_to_half(largest / 127.0f);
	float d = bn_half_to_float(b->d);
	for (int g = 0; g < BN_QK_K / 16; g++) {
		b->scales[g] = (int8_t)(d > 0.0f ? clampl(lroundf(want[g] / d), 0, 127) : 0);
		float s = d * b->scales[g];
		for (int j = 16 * g; j < 16 * g + 16; j++)
			q[j] = (int8_t)(s > 0.0f ? clampl(lroundf(x[j] / s), -32, 31) : 0);
	}
	q6_k_pack(q, b);
}

static void quant_q6_k(const float *x, uint64_t n, uint8_t *out)
{
	for (uint64_t blk = 0; blk < n / BN_QK_K; blk++) {
		struct bn_block_q6_k b;
		quant_q6_k_block(x + blk * BN_QK_K, &b);
		memcpy(out + blk * sizeof(b), &b, sizeof(b));
	}
}

/* `count` trits (weights w[0], w[stride], ...; most significant first) as a TQ1_0 byte: the
 * base-3 value as a fraction of 243, scaled to 256 and rounded up so that tq1_trit's
 * truncating reads land inside each trit's interval. A 4-trit byte is shifted up one trit
 * first, so that its trits are the byte's first four. */
static uint8_t tq1_byte(const int8_t *w, int stride, int count)
{
	unsigned v = 0;
	for (int n = 0; n < count; n++)
		v = v * 3 + (unsigned)(w[n * stride] + 1);
	if (count == 4)
		v *= 3;
	return (uint8_t)((v * 256 + 242) / 243);
}

static void encode_tq1_0_block(const int8_t *w, uint16_t d, uint8_t *out)
{
	struct bn_block_tq1_0 b;
	for (int m = 0; m < 32; m++)
		b.qs[m] = tq1_byte(w + m, 32, 5);
	for (int m = 0; m < 16; m++)
		b.qs[32 + m] = tq1_byte(w + 160 + m, 16, 5);
	for (int j = 0; j < 4; j++)
		b.qh[j] = tq1_byte(w + 240 + j, 4, 4);
	b.d = d;
	memcpy(out, &b, sizeof(b));
}

static void encode_tq2_0_block(const int8_t *w, uint16_t d, uint8_t *out)
{
	struct bn_block_tq2_0 b;
	memset(b.qs, 0, sizeof(b.qs));
	for (int k = 0; k < BN_QK_K; k++) {
		int h = k / 128, l = (k % 128) / 32, m = k % 32;
		b.qs[32 * h + m] |= (uint8_t)((w[k] + 1) << (2 * l));
	}
	b.d = d;
	memcpy(out, &b, sizeof(b));
}

static int all_ternary(const int8_t *w, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (w[i] < -1 || w[i] > 1)
			return 0;
	return 1;
}

/* Encodes whole blocks; the caller has checked type, n and the weights. */
static void encode_tq_row(uint32_t type, const int8_t *w, uint64_t n, uint16_t d, uint8_t *out)
{
	for (uint64_t blk = 0; blk < n / BN_QK_K; blk++) {
		uint8_t *o = out + blk * tq_block_bytes(type);
		if (type == BN_TYPE_TQ1_0)
			encode_tq1_0_block(w + blk * BN_QK_K, d, o);
		else
			encode_tq2_0_block(w + blk * BN_QK_K, d, o);
	}
}

/* TQ from floats, like ggml: d = absmax of the block, weights round(x / d). */
static void quant_tq(uint32_t type, const float *x, uint64_t n, uint8_t *out)
{
	int8_t w[BN_QK_K];
	for (uint64_t blk = 0; blk < n / BN_QK_K; blk++, x += BN_QK_K) {
		float d = block_absmax(x, BN_QK_K);
		for (int j = 0; j < BN_QK_K; j++)
			w[j] = (int8_t)(d > 0.0f ? clampl(lroundf(x[j] / d), -1, 1) : 0);
		uint8_t *o = out + blk * tq_block_bytes(type);
		encode_tq_row(type, w, BN_QK_K, bn_float_to_half(d), o);
	}
}

uint64_t bn_quant_row(uint32_t type, const float *in, uint64_t n, void *out)
{
	uint64_t bytes = bn_row_bytes(type, n); /* 0 for an unknown type, I2_S, or a bad n */
	uint8_t *o = out;
	if (bytes == 0)
		return 0;
	switch (type) {
	case BN_TYPE_F32:
		memcpy(o, in, bytes);
		break;
	case BN_TYPE_F16:
	case BN_TYPE_BF16:
		for (uint64_t i = 0; i < n; i++) {
			uint16_t h = type == BN_TYPE_F16 ? bn_float_to_half(in[i])
							 : bn_float_to_bf16(in[i]);
			memcpy(o + 2 * i, &h, sizeof(h));
		}
		break;
	case BN_TYPE_Q8_0: quant_q8_0(in, n, o); break;
	case BN_TYPE_Q6_K: quant_q6_k(in, n, o); break;
	case BN_TYPE_TQ1_0:
	case BN_TYPE_TQ2_0: quant_tq(type, in, n, o); break;
	default: return 0;
	}
	return bytes;
}

/* Weights outside {-1, 0, +1} are refused (returns 0) rather than wrapped into other codes. */
uint64_t bn_encode_ternary_row(uint32_t type, const int8_t *w, uint64_t n, float scale,
			       void *out)
{
	if ((type != BN_TYPE_TQ1_0 && type != BN_TYPE_TQ2_0) || n == 0 || n % BN_QK_K != 0 ||
	    !all_ternary(w, n))
		return 0;
	encode_tq_row(type, w, n, bn_float_to_half(scale), out);
	return n / BN_QK_K * tq_block_bytes(type);
}

uint64_t bn_encode_i2_s(const int8_t *w, uint64_t n, float scale, void *out)
{
	uint8_t *o = out;
	if (n == 0 || n % BN_QK_I2_S != 0 || !all_ternary(w, n))
		return 0;
	memset(o, 0, bn_i2_s_bytes(n));
	for (uint64_t k = 0; k < n; k++) {
		uint64_t blk = k / BN_QK_I2_S, g = k % BN_QK_I2_S / 32, b = k % 32;
		o[blk * BN_I2_S_BLOCK_BYTES + b] |= (uint8_t)((w[k] + 1) << (6 - 2 * g));
	}
	memcpy(o + n / 4, &scale, sizeof(scale)); /* then 28 zero bytes */
	return bn_i2_s_bytes(n);
}

/* ------------------------------------------------------------------------------------------ */
/* Element-wise parts of a layer (kernels.h)                                                   */
/* ------------------------------------------------------------------------------------------ */

/* Unlike one running sum (a chain of n dependent adds, ~3 us for 2560 values, four norms per
 * layer and token) the lanes are independent, and the compiler turns them into vector code. */
static float sum_squares(const float *x, uint32_t n)
{
	float lane[BN_RMSNORM_LANES] = { 0 };
	const float *end = x + n;
	for (; end - x >= BN_RMSNORM_LANES; x += BN_RMSNORM_LANES)
#pragma GCC unroll 16 /* whole, so the lanes stay in registers */
		for (size_t l = 0; l < BN_RMSNORM_LANES; l++)
			lane[l] += x[l] * x[l];
	for (size_t l = 0; x + l < end; l++)
		lane[l] += x[l] * x[l];
	float ss = 0.0f;
	for (uint32_t l = 0; l < BN_RMSNORM_LANES; l++)
		ss += lane[l];
	return ss;
}

void bn_rmsnorm(float *out, const float *x, const float *w, uint32_t n, float eps)
{
	float inv = 1.0f / sqrtf(sum_squares(x, n) / (float)n + eps);
	for (uint32_t i = 0; i < n; i++)
		out[i] = x[i] * inv * w[i];
}

/* The gate is kept where g > 0 through a bit mask, not a branch: the compiler kept
 * `g > 0 ? g : 0` as a branch on the sign of each gate value, mispredicted about half the
 * time. The mask gives the same values (0 for g <= 0 and for NaN). */
void bn_relu2_mul(float *g, const float *u, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		float gi = g[i], r;
		uint32_t bits;
		memcpy(&bits, &gi, sizeof(bits));
		bits &= -(uint32_t)(gi > 0.0f);
		memcpy(&r, &bits, sizeof(r));
		g[i] = r * r * u[i];
	}
}

void bn_add(float *x, const float *y, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		x[i] += y[i];
}
