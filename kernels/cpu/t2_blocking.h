/* SPDX-License-Identifier: MIT */
/*
 * t2_blocking.h — the cache blocking every SIMD ternary kernel shares.
 *
 * A tile (a few weight rows against a few batch rows) reads its weight rows once and every
 * activation row of the tile once per weight row. Without blocking, a batch of more than a
 * few rows makes each weight row walk all of the batch's activations, which then come from
 * L2 rather than L1: measured on the 2B4T shapes (one Zen 5 core, AVX-512 VNNI), the kernel
 * fell from ~280 G multiply-adds/s at 4 batch rows to ~115 at 32. So the loops go over
 * blocks: weight rows whose codes stay in L2, and within them batch rows whose activations
 * stay in L1; every weight row of the block then meets those activations from L1, and the
 * block's codes come from L2 once per batch block. Integer sums are exact, so the order of
 * blocks cannot change any output.
 */
#ifndef BITNET_T2_BLOCKING_H
#define BITNET_T2_BLOCKING_H

#include "kernels.h"

/* Activation bytes one batch block may hold: under the smallest L1 data cache of the CPUs we
 * run on (32 KiB) with room for the weights streaming through. */
#define BN_T2_L1_BYTES (24u << 10)
/* Weight code bytes one row block may hold: a quarter of the smallest L2 (1 MiB). */
#define BN_T2_L2_BYTES (256u << 10)

/* Rows [o, o + n_rows) of matrix w against batch rows [b0, b0 + n_cols), n_rows <= the
 * variant's tile height and n_cols <= its tile width. w is the caller's matrix type (the
 * ternary kernels' bn_t2_matrix, the int8 head's bn_i8_matrix). */
typedef void (*bn_gemm_tile_fn)(const void *w, uint32_t o, uint32_t n_rows,
				const struct bn_q8_rows *x, uint32_t b0, uint32_t n_cols, float *y,
				uint32_t ldy);

static inline uint32_t bn_t2_block(uint32_t budget, uint64_t unit_bytes, uint32_t tile)
{
	uint64_t n = budget / unit_bytes / tile * tile;
	return n < tile ? tile : n > UINT32_MAX ? UINT32_MAX / tile * tile : (uint32_t)n;
}

static inline uint32_t bn_t2_min(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

/* A gemm over int8 activations (t2_gemm, i8_gemm of kernels.h) in tiles of tile_rows x
 * tile_cols computed by `tile`, for a matrix of row_bytes per weight row. */
static inline void bn_gemm_blocked(const void *w, uint32_t row_bytes, uint32_t o0, uint32_t o1,
				   const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy,
				   uint32_t tile_rows, uint32_t tile_cols, bn_gemm_tile_fn tile)
{
	uint32_t row_block = bn_t2_block(BN_T2_L2_BYTES, row_bytes, tile_rows);
	uint32_t col_block = bn_t2_block(BN_T2_L1_BYTES, x->k_pad, tile_cols);
	for (uint32_t ob = o0; ob < o1; ob += bn_t2_min(row_block, o1 - ob)) {
		uint32_t oe = ob + bn_t2_min(row_block, o1 - ob);
		for (uint32_t bb = 0; bb < n_b; bb += bn_t2_min(col_block, n_b - bb)) {
			uint32_t be = bb + bn_t2_min(col_block, n_b - bb);
			for (uint32_t o = ob; o < oe; o += tile_rows)
				for (uint32_t b = bb; b < be; b += tile_cols)
					tile(w, o, bn_t2_min(tile_rows, oe - o), x, b,
					     bn_t2_min(tile_cols, be - b), y, ldy);
		}
	}
}

#endif /* BITNET_T2_BLOCKING_H */
