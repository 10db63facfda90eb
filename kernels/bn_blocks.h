/* SPDX-License-Identifier: MIT */
/*
 * bn_blocks.h — tensor type ids and quantized block layouts, defined once for the C and CUDA
 * kernels, the GGUF reader and the model tool. Type ids are ggml's (what GGUF files store);
 * I2_S = 36 is Microsoft bitnet.cpp's meaning of that id, which upstream llama.cpp reuses for
 * another type: the loader decides by architecture (docs in daemon/model/model.c).
 *
 * Every block layout carries a size assert. Scales stored as IEEE half are kept as raw
 * uint16_t so the structs are plain bytes in C and CUDA alike.
 */
#ifndef BITNET_BLOCKS_H
#define BITNET_BLOCKS_H

#include <stdint.h>

/* C11 and C++ (CUDA) spell the compile-time assert differently. */
#ifdef __cplusplus
#define BN_STATIC_ASSERT static_assert
#else
#define BN_STATIC_ASSERT _Static_assert
#endif

enum bn_tensor_type {
	BN_TYPE_F32 = 0,
	BN_TYPE_F16 = 1,
	BN_TYPE_Q4_0 = 2,
	BN_TYPE_Q8_0 = 8,
	BN_TYPE_Q6_K = 14,
	BN_TYPE_BF16 = 30,
	BN_TYPE_TQ1_0 = 34,
	BN_TYPE_TQ2_0 = 35,
	BN_TYPE_I2_S = 36,
};

#define BN_QK_K 256 /* weights per super-block: Q6_K, TQ1_0, TQ2_0 */
#define BN_QK8_0 32 /* weights per Q8_0 block */
#define BN_QK4_0 32 /* weights per Q4_0 block */
#define BN_QK_I2_S 128 /* weights per I2_S block */

/* Q8_0: 32 int8 weights times one half scale. */
struct bn_block_q8_0 {
	uint16_t d;        /* half: scale */
	int8_t qs[BN_QK8_0];
};
BN_STATIC_ASSERT(sizeof(struct bn_block_q8_0) == 34, "Q8_0 block is 34 bytes");

/* Q4_0: 32 weights of 4 bits times one half scale; byte j holds weight j in its low nibble and
 * weight j + 16 in its high nibble, each as q + 8 (weight q * d, q in [-8, 7]). Ternary-Bonsai's
 * community TQ1_0/TQ2_0 repacks store their embedding and LM head so. */
struct bn_block_q4_0 {
	uint16_t d;        /* half: scale */
	uint8_t qs[BN_QK4_0 / 2];
};
BN_STATIC_ASSERT(sizeof(struct bn_block_q4_0) == 18, "Q4_0 block is 18 bytes");

/* Q6_K: 256 weights of 6 bits (4 low bits in ql, 2 high in qh) minus 32, 16 int8 sub-scales
 * of 16 weights each, one half super-scale. Decoding order: see bn_dequant_q6_k. */
struct bn_block_q6_k {
	uint8_t ql[BN_QK_K / 2];
	uint8_t qh[BN_QK_K / 4];
	int8_t scales[BN_QK_K / 16];
	uint16_t d;        /* half: super-block scale */
};
BN_STATIC_ASSERT(sizeof(struct bn_block_q6_k) == 210, "Q6_K block is 210 bytes");

/* TQ1_0: 256 ternary weights in base 3. qs[0..32) hold 5 trits each for weights
 * [0,160) (byte m: weights m + 32n, n = 0..4, most significant trit first); qs[32..48)
 * hold 5 trits each for weights [160,240) (byte m: weights 160 + m + 16n); qh[0..4) hold 4
 * trits each for weights [240,256) (byte j: weights 240 + j + 4n). A byte stores the trits
 * as a fixed-point fraction: q = ceil(value * 256 / 243); trit n is ((uint8)(q * 3^n) * 3) >> 8.
 * Trit t means weight t - 1, times d. */
struct bn_block_tq1_0 {
	uint8_t qs[(BN_QK_K - 4 * BN_QK_K / 64) / 5];
	uint8_t qh[BN_QK_K / 64];
	uint16_t d;        /* half: scale */
};
BN_STATIC_ASSERT(sizeof(struct bn_block_tq1_0) == 54, "TQ1_0 block is 54 bytes");

/* TQ2_0: 256 ternary weights of 2 bits. In each 32-byte half h, byte m holds weights
 * 128h + m + 32l in bits 2l..2l+1, l = 0..3. Code c means weight c - 1, times d. */
struct bn_block_tq2_0 {
	uint8_t qs[BN_QK_K / 4];
	uint16_t d;        /* half: scale */
};
BN_STATIC_ASSERT(sizeof(struct bn_block_tq2_0) == 66, "TQ2_0 block is 66 bytes");

/* I2_S (bitnet.cpp): the whole tensor, flattened row-major, cut into 128-weight blocks of
 * 32 bytes; byte b of a block holds weights b, b+32, b+64, b+96 in bit pairs 7-6, 5-4, 3-2,
 * 1-0. Code c means weight c - 1. After the n/4 code bytes: one float scale for the whole
 * tensor, padded to 32 bytes. */
#define BN_I2_S_BLOCK_BYTES 32
#define BN_I2_S_TAIL_BYTES 32
static inline uint64_t bn_i2_s_bytes(uint64_t n_weights)
{
	return n_weights / 4 + BN_I2_S_TAIL_BYTES;
}

/* The kernels' ternary layout ("T2 planes"), made at load from any ternary file type. Each
 * row is cut into 256-weight chunks of 64 bytes; byte m of a chunk holds weights m, m+64,
 * m+128, m+192 in bits 0-1, 2-3, 4-5, 6-7, so plane p = (byte >> 2p) & 3 is the codes of
 * weights [64p, 64p+64) in order: a 64-byte vector of codes that lines up with 64
 * consecutive activations. Code c means weight c - 1; rows are padded to whole chunks with
 * code 1 (weight 0). */
#define BN_T2_CHUNK 256
#define BN_T2_CHUNK_BYTES 64
BN_STATIC_ASSERT(BN_T2_CHUNK_BYTES * 4 == BN_T2_CHUNK, "four 2-bit codes per byte");
/* A ternary matrix with one scale per group (Ternary-Bonsai's 128 weights, a TQ block's 256)
 * is read in blocks of 128 weights, half a chunk: planes 0-1 or 2-3. A group is whole blocks,
 * and the kernels' integer sums are per block. */
#define BN_T2_GROUP_BLOCK 128

/* The decode copy's ternary layout ("T3", base 3, 1.6 bits a weight), made at load from the T2
 * planes when asked (bitnetd --decode-layout base3). Each row is cut into 320-weight chunks of
 * 64 bytes; byte j of a chunk holds weights j, j+64, j+128, j+192, j+256 as the base-3 number
 * c0 + 3 c1 + 9 c2 + 27 c3 + 81 c4 (0..242) of their codes, so code plane p is again 64
 * consecutive weights that line up with 64 consecutive activations. Code c means weight c - 1;
 * rows are padded to whole chunks with code 1 (weight 0). */
#define BN_T3_CHUNK 320
#define BN_T3_CHUNK_BYTES 64

#endif /* BITNET_BLOCKS_H */
