/* SPDX-License-Identifier: MIT */
/*
 * quant.h — the tensor types as data: sizes, names, half/bfloat conversion, straightforward
 * reference decoding of every type the loader accepts, encoders for the model tool and the
 * tests, and the repacking of ternary weights into the kernels' T2-plane layout
 * (kernels/bn_blocks.h). Scalar and written to be read: these are oracles, not hot paths.
 */
#ifndef BITNET_QUANT_H
#define BITNET_QUANT_H

#include "../bn_blocks.h"

#include <stddef.h>
#include <stdint.h>

/* "F32", "TQ2_0", ...; NULL for a type id bitnetd does not know. */
const char *bn_type_name(uint32_t type);
/* Weights per block (1 for F32/F16/BF16, 128 for I2_S); 0 for an unknown type. */
uint32_t bn_type_block_weights(uint32_t type);
/* Whether the type stores ternary weights (TQ1_0, TQ2_0, I2_S). */
int bn_type_is_ternary(uint32_t type);
/* Bytes of a whole tensor of n weights (I2_S: n/4 + 32). 0 when the type is unknown or n is
 * not a whole number of blocks. */
uint64_t bn_tensor_bytes(uint32_t type, uint64_t n);
/* Bytes of one row of n weights; 0 for I2_S (its rows carry no scale) or a bad n. */
uint64_t bn_row_bytes(uint32_t type, uint64_t n);

float bn_half_to_float(uint16_t h);
uint16_t bn_float_to_half(float f);      /* round to nearest even, inf/nan kept */
float bn_bf16_to_float(uint16_t b);
uint16_t bn_float_to_bf16(float f);      /* round to nearest even, nan kept quiet */

/* Decodes row `row` (n weights) of a tensor of type `type` whose data starts at `tensor` and
 * whose whole size is `tensor_bytes` (I2_S needs it to find the scale). Works for every type
 * above. Returns 0, or -1 for a type that cannot be decoded or a row out of range. */
int bn_dequant_row(uint32_t type, const void *tensor, uint64_t tensor_bytes, uint64_t row,
		   uint64_t n, float *out);

/* Ternary types only: the codes (0, 1, 2 = weight -1, 0, +1) of row `row`, and the row's
 * scale. A row whose blocks carry different non-zero scales has no single scale: returns -2
 * (bitnetd needs one scale per row; BitNet's ternary weights have one per tensor). Blocks
 * whose codes are all "zero weight" do not count. Returns 0 or -1 like bn_dequant_row. */
int bn_ternary_row(uint32_t type, const void *tensor, uint64_t tensor_bytes, uint64_t row,
		   uint64_t n, uint8_t *codes, float *scale);

/* A float row (F32, F16 or BF16) that holds a ternary row exactly: every value is -s, 0 or +s
 * for one finite s > 0 (zeros of either sign are 0; a row of zeros has s = 0). Writes its
 * codes (0, 1, 2) and s, decoded from the row's own bits, so s * (code - 1) is each value as
 * stored. Returns 0; 1 when the row is not such a row (another magnitude, an infinity, a NaN);
 * -1 for another type or a row out of range. */
int bn_ternary_from_float_row(uint32_t type, const void *tensor, uint64_t tensor_bytes,
			      uint64_t row, uint64_t n, uint8_t *codes, float *scale);

/* Bytes of one repacked row of n weights: whole 256-weight chunks of 64 bytes. */
static inline uint64_t bn_t2_row_bytes(uint64_t n)
{
	return (n + BN_T2_CHUNK - 1) / BN_T2_CHUNK * BN_T2_CHUNK_BYTES;
}
/* Repacks n codes into the T2-plane layout, padding with code 1 up to whole chunks. */
void bn_t2_pack(const uint8_t *codes, uint64_t n, uint8_t *out);
/* bn_ternary_row then bn_t2_pack, in one pass, for the rows where that is a shuffle of bits:
 * an I2_S row whose length is a whole number of T2 chunks (two I2_S blocks make one chunk,
 * the 2-bit codes moved, not decoded). Writes the row's T2 bytes and scale and returns 0;
 * -1 like bn_ternary_row; 1 when the row is not such a row (the caller takes the general
 * path). The same bytes as the general path (tests/test_quant.c). */
int bn_ternary_row_t2(uint32_t type, const void *tensor, uint64_t tensor_bytes, uint64_t row,
		      uint64_t n, uint8_t *out, float *scale);
/* Bytes of one row of n weights in the T3 layout: whole 320-weight chunks of 64 bytes. */
static inline uint64_t bn_t3_row_bytes(uint64_t n)
{
	return (n + BN_T3_CHUNK - 1) / BN_T3_CHUNK * BN_T3_CHUNK_BYTES;
}
/* The row stride of int8 activations for inputs of k values: whole T2 and whole T3 chunks,
 * so that either layout's kernel reads zeros past k. */
static inline uint32_t bn_q8_k_pad(uint32_t k)
{
	uint32_t t2 = (k + BN_T2_CHUNK - 1) / BN_T2_CHUNK * BN_T2_CHUNK;
	uint32_t t3 = (k + BN_T3_CHUNK - 1) / BN_T3_CHUNK * BN_T3_CHUNK;
	return t2 > t3 ? t2 : t3;
}
/* Repacks n codes (0, 1, 2) into the T3 layout, padding with code 1 up to whole chunks. */
void bn_t3_pack(const uint8_t *codes, uint64_t n, uint8_t *out);
/* Code of weight k in a T3-packed row: base-3 digit (k % 320) / 64 of byte k % 64 of its
 * chunk. */
static inline uint8_t bn_t3_code(const uint8_t *row, uint64_t k)
{
	uint64_t chunk = k / BN_T3_CHUNK, in = k % BN_T3_CHUNK;
	uint32_t v = row[chunk * BN_T3_CHUNK_BYTES + in % 64];
	for (uint64_t p = in / 64; p > 0; p--)
		v /= 3;
	return (uint8_t)(v % 3);
}
/* The n codes of a T2-packed row. */
void bn_t2_unpack(const uint8_t *row, uint64_t n, uint8_t *codes);
/* Code of weight k in a T2-packed row (for tests and the reference forward). */
static inline uint8_t bn_t2_code(const uint8_t *row, uint64_t k)
{
	uint64_t chunk = k / BN_T2_CHUNK, in = k % BN_T2_CHUNK;
	return (row[chunk * BN_T2_CHUNK_BYTES + in % 64] >> (2 * (in / 64))) & 3;
}

/* Encoders (model tool, tests). Float types and Q8_0/Q6_K quantize a row of n floats the
 * usual way (absmax scales); n must be a whole number of blocks. Returns bytes written. */
uint64_t bn_quant_row(uint32_t type, const float *in, uint64_t n, void *out);
/* Ternary rows from weights in {-1, 0, +1} and one scale: TQ1_0 and TQ2_0 rows (n a multiple
 * of 256). Returns bytes written, 0 for a bad type or n. */
uint64_t bn_encode_ternary_row(uint32_t type, const int8_t *w, uint64_t n, float scale,
			       void *out);
/* A whole I2_S tensor of n weights (n a multiple of 128): codes then the scale block. */
uint64_t bn_encode_i2_s(const int8_t *w, uint64_t n, float scale, void *out);

#endif /* BITNET_QUANT_H */
