/* SPDX-License-Identifier: MIT */
/*
 * kernels_neon.c — the aarch64 integer products: ternary weights (the T2 planes, and the T3
 * digits) and the int8 head against int8 activations, and the three kernel tables. Compiled
 * once per variant:
 *  - plainly, for ARMv8.0 Advanced SIMD (Raspberry Pi 4): smull/smlal products summed in
 *    16-bit lanes, widened by sadalp before they can overflow;
 *  - with BN_DOTPROD (kernels_dotprod.c, -march=armv8.2-a+dotprod): sdot, four products into a
 *    32-bit lane in one instruction;
 *  - with BN_I8MM too (kernels_i8mm.c, +i8mm): smmla, a 2x2 block of 8-long products, for
 *    batches of two rows or more (prefill, batched decode); single rows keep sdot.
 * The codes 0, 1, 2 are signed bytes as they are, so every product is a signed one, and the
 * activation sum taken off at the end undoes the +1 offset (kernels.h). Integer sums are
 * exact, so every variant gives the scalar kernels' bits. The float parts, the same in every
 * table, are common_neon.c's.
 *
 * No software prefetch: the cores these run on (Cortex-A72/A76/A78, Neoverse N1/N2/V1/V2)
 * follow a stream of consecutive rows with their own prefetchers, and a lead that pays on one
 * of them is a guess on the others until measured there (bench-model's t2 figures).
 */
#include "kernels.h"
#include "kernels_neon.h"
#include "t2_blocking.h"
#include "t2g.h"

#include <arm_neon.h>
#include <math.h>

/* The four code planes of 16 code bytes (weights m, m + 64, m + 128, m + 192 of byte m), each
 * as 16 codes 0..2 in signed bytes. */
static ALWAYS_INLINE int8x16_t t2_plane(uint8x16_t v, const uint32_t p)
{
	const uint8x16_t m3 = vdupq_n_u8(3);
	switch (p) {
	case 0: return vreinterpretq_s8_u8(vandq_u8(v, m3));
	case 1: return vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(v, 2), m3));
	case 2: return vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(v, 4), m3));
	default: return vreinterpretq_s8_u8(vshrq_n_u8(v, 6));
	}
}

static ALWAYS_INLINE float t2_out(int32_t isum, const struct bn_t2_matrix *w, uint32_t o,
				  const struct bn_q8_rows *x, uint32_t b)
{
	return ((float)(isum - x->sum[b]) * w->scale[o]) * x->inv_scale[b];
}

/* The batch rows of x from b0 on (a tile's). */
static ALWAYS_INLINE struct bn_q8_rows rows_from(const struct bn_q8_rows *x, uint32_t b0)
{
	struct bn_q8_rows xs = *x;
	xs.q += (size_t)b0 * xs.k_pad;
	xs.inv_scale += b0;
	xs.sum += b0;
	return xs;
}

/* ------------------------------------------------------------------------------------------ */
/* Batch 1: one weight row streamed at a time                                                  */
/* ------------------------------------------------------------------------------------------ */

#ifdef BN_DOTPROD
/* Planes 0..2 are masked where they lie (code times 1, 4, 16: at most 32, a signed byte) and
 * summed apart, then shifted back once (each product is a multiple of 4^p, so the shift is
 * exact); plane 3 is a shift alone. Four instructions take a vector's planes apart where
 * shifting every plane down takes seven. Two sums per plane keep eight sdot chains going.
 * A lane of plane 2 adds at most 4 * 32 * 128 per 16 code bytes: exact for rows of up to 2 MB
 * of codes (8M weights). */
static ALWAYS_INLINE void t2_row(const struct bn_t2_matrix *w, uint32_t o,
				 const struct bn_q8_rows *x, float *y)
{
	const uint8_t *row = w->codes + (size_t)o * w->row_bytes;
	const uint8x16_t m0 = vdupq_n_u8(0x03), m1 = vdupq_n_u8(0x0c), m2 = vdupq_n_u8(0x30);
	int32x4_t acc[4][2];
	for (uint32_t p = 0; p < 4; p++)
		acc[p][0] = acc[p][1] = vdupq_n_s32(0);
	uint32_t n_chunks = w->row_bytes / BN_T2_CHUNK_BYTES;
	for (uint32_t c = 0; c < n_chunks; c++) {
		const uint8_t *chunk = row + (size_t)c * BN_T2_CHUNK_BYTES;
		const int8_t *xc = x->q + (size_t)c * BN_T2_CHUNK;
		for (uint32_t h = 0; h < 4; h++) {
			uint8x16_t v = vld1q_u8(chunk + 16 * h);
			int8x16_t p0 = vreinterpretq_s8_u8(vandq_u8(v, m0));
			int8x16_t p1 = vreinterpretq_s8_u8(vandq_u8(v, m1));
			int8x16_t p2 = vreinterpretq_s8_u8(vandq_u8(v, m2));
			int8x16_t p3 = vreinterpretq_s8_u8(vshrq_n_u8(v, 6));
			acc[0][h & 1] = vdotq_s32(acc[0][h & 1], p0, vld1q_s8(xc + 16 * h));
			acc[1][h & 1] = vdotq_s32(acc[1][h & 1], p1, vld1q_s8(xc + 64 + 16 * h));
			acc[2][h & 1] = vdotq_s32(acc[2][h & 1], p2, vld1q_s8(xc + 128 + 16 * h));
			acc[3][h & 1] = vdotq_s32(acc[3][h & 1], p3, vld1q_s8(xc + 192 + 16 * h));
		}
	}
	int32x4_t s = vaddq_s32(acc[0][0], acc[0][1]);
	s = vaddq_s32(s, vshrq_n_s32(vaddq_s32(acc[1][0], acc[1][1]), 2));
	s = vaddq_s32(s, vshrq_n_s32(vaddq_s32(acc[2][0], acc[2][1]), 4));
	s = vaddq_s32(s, vaddq_s32(acc[3][0], acc[3][1]));
	y[o] = t2_out(vaddvq_s32(s), w, o, x, 0);
}
#else
/* A 16-bit sum per plane: a chunk adds 8 products of |code x| <= 256 to each of its lanes, so
 * ROW_ACC_CHUNKS (15: 30720) chunks fit before sadalp widens them into 32 bits. */
#define ROW_ACC_CHUNKS 15

static ALWAYS_INLINE void t2_row(const struct bn_t2_matrix *w, uint32_t o,
				 const struct bn_q8_rows *x, float *y)
{
	const uint8_t *row = w->codes + (size_t)o * w->row_bytes;
	int32x4_t acc32[4];
	for (uint32_t p = 0; p < 4; p++)
		acc32[p] = vdupq_n_s32(0);
	uint32_t n_chunks = w->row_bytes / BN_T2_CHUNK_BYTES;
	for (uint32_t c0 = 0; c0 < n_chunks;) {
		uint32_t c1 = n_chunks - c0 < ROW_ACC_CHUNKS ? n_chunks : c0 + ROW_ACC_CHUNKS;
		int16x8_t acc[4];
		for (uint32_t p = 0; p < 4; p++)
			acc[p] = vdupq_n_s16(0);
		for (uint32_t c = c0; c < c1; c++) {
			const uint8_t *chunk = row + (size_t)c * BN_T2_CHUNK_BYTES;
			const int8_t *xc = x->q + (size_t)c * BN_T2_CHUNK;
			for (uint32_t h = 0; h < 4; h++) {
				uint8x16_t v = vld1q_u8(chunk + 16 * h);
				for (uint32_t p = 0; p < 4; p++) {
					int8x16_t pl = t2_plane(v, p);
					int8x16_t xv = vld1q_s8(xc + 64 * p + 16 * h);
					acc[p] = vmlal_s8(acc[p], vget_low_s8(pl), vget_low_s8(xv));
					acc[p] = vmlal_high_s8(acc[p], pl, xv);
				}
			}
		}
		for (uint32_t p = 0; p < 4; p++)
			acc32[p] = vpadalq_s16(acc32[p], acc[p]);
		c0 = c1;
	}
	int32x4_t s = vaddq_s32(vaddq_s32(acc32[0], acc32[1]), vaddq_s32(acc32[2], acc32[3]));
	y[o] = t2_out(vaddvq_s32(s), w, o, x, 0);
}
#endif

/* ------------------------------------------------------------------------------------------ */
/* Batches: tiles of weight rows x batch rows (t2_blocking.h blocks them for the caches)        */
/* ------------------------------------------------------------------------------------------ */

#ifdef BN_I8MM
/* smmla multiplies a 2x8 block of weights (two rows, 8 inputs each, one register) by an 8x2
 * block of activations (two batch rows) into a 2x2 block of 32-bit sums: a pair of rows is
 * zipped 8 bytes at a time (zip1/zip2 on 64-bit halves) to make its operands, and so is a pair
 * of batch rows. A tile is 8 weight rows x 4 batch rows: 8 registers of 2x2 sums, the 8 code
 * vectors of its rows, the 4 zipped activation operands; per 16 inputs it zips 8 code and 4
 * activation vectors for 16 smmla (512 products), where dotprod's 4 x 4 tile spends 16 sdot
 * on 256. An odd row or batch row is paired with a copy of another, whose sums are dropped.
 * Sums: 8 products of |code x| <= 256 a step, 2^20 steps before a lane could overflow. */
#define TILE_ROWS 8
#define TILE_COLS 4

static ALWAYS_INLINE int8x16_t zip_lo(int8x16_t a, int8x16_t b)
{
	return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

static ALWAYS_INLINE int8x16_t zip_hi(int8x16_t a, int8x16_t b)
{
	return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

/* Rows o.. (n_rp pairs, n_rows of them real) against batch rows 0.. of x (n_cp pairs, n_cols
 * real). */
static ALWAYS_INLINE void t2_tile(const struct bn_t2_matrix *w, uint32_t o, const uint32_t n_rp,
				  uint32_t n_rows, const struct bn_q8_rows *x, const uint32_t n_cp,
				  uint32_t n_cols, float *y, uint32_t ldy)
{
	const uint8_t *rows[TILE_ROWS];
	const int8_t *xs[TILE_COLS];
	for (uint32_t r = 0; r < 2 * n_rp; r++)
		rows[r] = w->codes + (size_t)(o + (r < n_rows ? r : 0)) * w->row_bytes;
	for (uint32_t b = 0; b < 2 * n_cp; b++)
		xs[b] = x->q + (size_t)(b < n_cols ? b : 0) * x->k_pad;
	int32x4_t acc[TILE_ROWS / 2][TILE_COLS / 2];
	for (uint32_t rp = 0; rp < n_rp; rp++)
		for (uint32_t cp = 0; cp < n_cp; cp++)
			acc[rp][cp] = vdupq_n_s32(0);
	uint32_t n_chunks = w->row_bytes / BN_T2_CHUNK_BYTES;
	for (uint32_t c = 0; c < n_chunks; c++)
		for (uint32_t h = 0; h < 4; h++) {
			uint8x16_t v[TILE_ROWS];
			for (uint32_t r = 0; r < 2 * n_rp; r++)
				v[r] = vld1q_u8(rows[r] + (size_t)c * BN_T2_CHUNK_BYTES + 16 * h);
			for (uint32_t p = 0; p < 4; p++) {
				size_t at = (size_t)c * BN_T2_CHUNK + 64 * p + 16 * h;
				int8x16_t xo[TILE_COLS / 2][2];
				for (uint32_t cp = 0; cp < n_cp; cp++) {
					int8x16_t a = vld1q_s8(xs[2 * cp] + at), b = vld1q_s8(xs[2 * cp + 1] + at);
					xo[cp][0] = zip_lo(a, b);
					xo[cp][1] = zip_hi(a, b);
				}
				for (uint32_t rp = 0; rp < n_rp; rp++) {
					int8x16_t pa = t2_plane(v[2 * rp], p), pb = t2_plane(v[2 * rp + 1], p);
					int8x16_t w0 = zip_lo(pa, pb), w1 = zip_hi(pa, pb);
					for (uint32_t cp = 0; cp < n_cp; cp++) {
						acc[rp][cp] = vmmlaq_s32(acc[rp][cp], w0, xo[cp][0]);
						acc[rp][cp] = vmmlaq_s32(acc[rp][cp], w1, xo[cp][1]);
					}
				}
			}
		}
	/* lane 2i + j of a block: row 2 rp + i, batch row 2 cp + j */
	for (uint32_t rp = 0; rp < n_rp; rp++)
		for (uint32_t cp = 0; cp < n_cp; cp++) {
			int32_t s[4];
			vst1q_s32(s, acc[rp][cp]);
			for (uint32_t l = 0; l < 4; l++) {
				uint32_t r = 2 * rp + l / 2, b = 2 * cp + l % 2;
				if (r < n_rows && b < n_cols)
					y[(size_t)b * ldy + o + r] = t2_out(s[l], w, o + r, x, b);
			}
		}
}

static void t2_tile_at(const void *mat, uint32_t o, uint32_t n_rows, const struct bn_q8_rows *x,
		       uint32_t b0, uint32_t n_cols, float *y, uint32_t ldy)
{
	const struct bn_t2_matrix *w = mat;
	struct bn_q8_rows xs = rows_from(x, b0);
	y += (size_t)b0 * ldy;
#define TILE_CASE(rp, cp)                                              \
	case (rp - 1) * 2 + (cp - 1):                                  \
		t2_tile(w, o, rp, n_rows, &xs, cp, n_cols, y, ldy);    \
		break
	switch (((n_rows + 1) / 2 - 1) * 2 + ((n_cols + 1) / 2 - 1)) {
	TILE_CASE(4, 2); TILE_CASE(4, 1); TILE_CASE(3, 2); TILE_CASE(3, 1);
	TILE_CASE(2, 2); TILE_CASE(2, 1); TILE_CASE(1, 2); TILE_CASE(1, 1);
	default: break;
	}
#undef TILE_CASE
}
#else
/* sdot (dotprod): a tile of 4 weight rows x 4 batch rows, 16 sums of 32 bits, each unpacked
 * plane used for the four batch rows and each activation vector for the four weight rows.
 * Plain NEON: 2 x 4, each sum 16 bits (smlal) for TILE_ACC_CHUNKS chunks, then widened
 * (sadalp) into one of 32: a chunk adds 32 products of |code x| <= 256 to a lane, so 3 chunks
 * (24576) fit. */
#ifdef BN_DOTPROD
#define TILE_ROWS 4
#define TILE_COLS 4
typedef int32x4_t tile_acc;
static ALWAYS_INLINE tile_acc tile_dot(tile_acc acc, int8x16_t codes, int8x16_t x)
{
	return vdotq_s32(acc, codes, x);
}
static ALWAYS_INLINE tile_acc tile_zero(void)
{
	return vdupq_n_s32(0);
}
#else
#define TILE_ROWS 2
#define TILE_COLS 4
#define TILE_ACC_CHUNKS 3
typedef int16x8_t tile_acc;
static ALWAYS_INLINE tile_acc tile_dot(tile_acc acc, int8x16_t codes, int8x16_t x)
{
	return vmlal_high_s8(vmlal_s8(acc, vget_low_s8(codes), vget_low_s8(x)), codes, x);
}
static ALWAYS_INLINE tile_acc tile_zero(void)
{
	return vdupq_n_s16(0);
}
#endif

/* Chunks [c0, c1) of rows o.. (n_rows) against batch rows 0..n_cols of x, added into acc. */
static ALWAYS_INLINE void tile_chunks(const struct bn_t2_matrix *w, uint32_t o,
				      const uint32_t n_rows, const struct bn_q8_rows *x,
				      const uint32_t n_cols, uint32_t c0, uint32_t c1,
				      tile_acc acc[TILE_ROWS][TILE_COLS])
{
	const uint8_t *row = w->codes + (size_t)o * w->row_bytes;
	for (uint32_t c = c0; c < c1; c++) {
		const uint8_t *chunk = row + (size_t)c * BN_T2_CHUNK_BYTES;
		for (uint32_t h = 0; h < 4; h++) {
			uint8x16_t v[TILE_ROWS];
			for (uint32_t r = 0; r < n_rows; r++)
				v[r] = vld1q_u8(chunk + (size_t)r * w->row_bytes + 16 * h);
			for (uint32_t p = 0; p < 4; p++) {
				int8x16_t pl[TILE_ROWS];
				for (uint32_t r = 0; r < n_rows; r++)
					pl[r] = t2_plane(v[r], p);
				for (uint32_t b = 0; b < n_cols; b++) {
					int8x16_t xv = vld1q_s8(x->q + (size_t)b * x->k_pad +
								(size_t)c * BN_T2_CHUNK + 64 * p + 16 * h);
					for (uint32_t r = 0; r < n_rows; r++)
						acc[r][b] = tile_dot(acc[r][b], pl[r], xv);
				}
			}
		}
	}
}

static ALWAYS_INLINE void t2_tile(const struct bn_t2_matrix *w, uint32_t o, const uint32_t n_rows,
				  const struct bn_q8_rows *x, const uint32_t n_cols, float *y,
				  uint32_t ldy)
{
	uint32_t n_chunks = w->row_bytes / BN_T2_CHUNK_BYTES;
	tile_acc acc[TILE_ROWS][TILE_COLS];
	for (uint32_t r = 0; r < n_rows; r++)
		for (uint32_t b = 0; b < n_cols; b++)
			acc[r][b] = tile_zero();
#ifdef BN_DOTPROD
	tile_chunks(w, o, n_rows, x, n_cols, 0, n_chunks, acc);
#define TILE_SUM(r, b) vaddvq_s32(acc[r][b])
#else
	int32x4_t acc32[TILE_ROWS][TILE_COLS];
	for (uint32_t r = 0; r < n_rows; r++)
		for (uint32_t b = 0; b < n_cols; b++)
			acc32[r][b] = vdupq_n_s32(0);
	for (uint32_t c0 = 0; c0 < n_chunks;) {
		uint32_t c1 = n_chunks - c0 < TILE_ACC_CHUNKS ? n_chunks : c0 + TILE_ACC_CHUNKS;
		tile_chunks(w, o, n_rows, x, n_cols, c0, c1, acc);
		for (uint32_t r = 0; r < n_rows; r++)
			for (uint32_t b = 0; b < n_cols; b++) {
				acc32[r][b] = vpadalq_s16(acc32[r][b], acc[r][b]);
				acc[r][b] = tile_zero();
			}
		c0 = c1;
	}
#define TILE_SUM(r, b) vaddvq_s32(acc32[r][b])
#endif
	for (uint32_t r = 0; r < n_rows; r++)
		for (uint32_t b = 0; b < n_cols; b++)
			y[(size_t)b * ldy + o + r] = t2_out(TILE_SUM(r, b), w, o + r, x, b);
#undef TILE_SUM
}

/* Rows [o, o + n_rows) against batch rows [b0, b0 + n_cols): each count a constant in its own
 * copy of the tile, so the sums stay in registers. */
static void t2_tile_at(const void *mat, uint32_t o, uint32_t n_rows, const struct bn_q8_rows *x,
		       uint32_t b0, uint32_t n_cols, float *y, uint32_t ldy)
{
	const struct bn_t2_matrix *w = mat;
	struct bn_q8_rows xs = rows_from(x, b0);
	y += (size_t)b0 * ldy;
#define TILE_CASE(r, c)                                          \
	case (r - 1) * TILE_COLS + (c - 1):                      \
		t2_tile(w, o, r, &xs, c, y, ldy);                \
		break
	switch ((n_rows - 1) * TILE_COLS + (n_cols - 1)) {
#ifdef BN_DOTPROD
	TILE_CASE(4, 4); TILE_CASE(4, 3); TILE_CASE(4, 2); TILE_CASE(4, 1);
	TILE_CASE(3, 4); TILE_CASE(3, 3); TILE_CASE(3, 2); TILE_CASE(3, 1);
#endif
	TILE_CASE(2, 4); TILE_CASE(2, 3); TILE_CASE(2, 2); TILE_CASE(2, 1);
	TILE_CASE(1, 4); TILE_CASE(1, 3); TILE_CASE(1, 2); TILE_CASE(1, 1);
	default: break; /* no rows or no batch rows */
	}
#undef TILE_CASE
}
#endif

static void t2_gemm_neon(const struct bn_t2_matrix *w, uint32_t o0, uint32_t o1,
			 const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy)
{
	if (n_b == 1) { /* a stream of the weights: the row kernel keeps up with memory */
		for (uint32_t o = o0; o < o1; o++)
			t2_row(w, o, x, y);
		return;
	}
	bn_gemm_blocked(w, w->row_bytes, o0, o1, x, n_b, y, ldy, TILE_ROWS, TILE_COLS, t2_tile_at);
}

/* ------------------------------------------------------------------------------------------ */
/* The grouped product (kernels.h: t2g_gemm): one scale per group of whole 128-weight blocks    */
/* ------------------------------------------------------------------------------------------ */

/* Batch rows a weight row is read once for. */
#define T2G_COLS 4

/* 16 codes against 16 activations, added into 32-bit lanes: sdot, or smull and sadalp (a
 * product is at most 2 * 128 in magnitude, a pair of them fits a 16-bit lane). */
static ALWAYS_INLINE int32x4_t t2g_dot(int32x4_t acc, int8x16_t codes, int8x16_t x)
{
#ifdef BN_DOTPROD
	return vdotq_s32(acc, codes, x);
#else
	acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(codes), vget_low_s8(x)));
	return vpadalq_s16(acc, vmull_high_s8(codes, x));
#endif
}

/* Weight row o against batch rows b0 .. b0 + n_cols: per group the exact integer sum of its
 * blocks (block j is planes 2(j%2), 2(j%2)+1 of chunk j/2) less the activations' block sums,
 * then one fused multiply-add per group in group order, as the scalar definition. */
static ALWAYS_INLINE void t2g_row(const struct bn_t2_matrix *w, uint32_t o,
				  const struct bn_q8_rows *x, uint32_t b0, const uint32_t n_cols,
				  float *y, uint32_t ldy)
{
	const uint8_t *row = w->codes + (size_t)o * w->row_bytes;
	const uint32_t n_groups = w->n_in / w->group, blocks = w->group / BN_T2_GROUP_BLOCK;
	const float *gs = w->gscale + (size_t)o * n_groups;
	float s[T2G_COLS] = { 0.0f };
	for (uint32_t g = 0; g < n_groups; g++) {
		int32x4_t acc[T2G_COLS];
		for (uint32_t b = 0; b < n_cols; b++)
			acc[b] = vdupq_n_s32(0);
		for (uint32_t j = g * blocks; j < (g + 1) * blocks; j++) {
			const uint8_t *chunk = row + (size_t)(j / 2) * BN_T2_CHUNK_BYTES;
			size_t xoff = (size_t)(j / 2) * BN_T2_CHUNK;
			for (uint32_t h = 0; h < 4; h++) {
				uint8x16_t v = vld1q_u8(chunk + 16 * h);
				int8x16_t lo = j % 2 ? t2_plane(v, 2) : t2_plane(v, 0);
				int8x16_t hi = j % 2 ? t2_plane(v, 3) : t2_plane(v, 1);
				uint32_t p = 2 * (j % 2);
				for (uint32_t b = 0; b < n_cols; b++) {
					const int8_t *xq = x->q + (size_t)(b0 + b) * x->k_pad + xoff;
					acc[b] = t2g_dot(acc[b], lo, vld1q_s8(xq + 64 * p + 16 * h));
					acc[b] = t2g_dot(acc[b], hi,
							 vld1q_s8(xq + 64 * (p + 1) + 16 * h));
				}
			}
		}
		for (uint32_t b = 0; b < n_cols; b++) {
			int32_t a = vaddvq_s32(acc[b]) - bn_t2g_group_xsum(x, b0 + b, g, blocks);
			s[b] = fmaf((float)a, gs[g], s[b]);
		}
	}
	for (uint32_t b = 0; b < n_cols; b++)
		y[(size_t)(b0 + b) * ldy + o] = s[b] * x->inv_scale[b0 + b];
}

static void t2g_gemm_neon(const struct bn_t2_matrix *w, uint32_t o0, uint32_t o1,
			  const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy)
{
	for (uint32_t o = o0; o < o1; o++)
		for (uint32_t b = 0; b < n_b; b += T2G_COLS)
			switch (n_b - b < T2G_COLS ? n_b - b : T2G_COLS) { /* constant widths */
			case 4: t2g_row(w, o, x, b, 4, y, ldy); break;
			case 3: t2g_row(w, o, x, b, 3, y, ldy); break;
			case 2: t2g_row(w, o, x, b, 2, y, ldy); break;
			default: t2g_row(w, o, x, b, 1, y, ldy); break;
			}
}

/* ------------------------------------------------------------------------------------------ */
/* The int8 head: int8 rows x int8 activations                                                 */
/* ------------------------------------------------------------------------------------------ */

/* One weight row against up to I8_COLS batch rows, 16 inputs a step: sdot (dotprod, i8mm) or
 * smull + sadalp (a pair of int8 products can reach 2^15, past an int16 lane, so each product
 * is widened at once). The 32-bit lanes are added into 64 bits every I8_BLOCK inputs: a lane
 * then holds at most I8_BLOCK / 4 * 2^14 (2^22), so rows of any length sum exactly. */
#define I8_COLS 4
#define I8_BLOCK 4096u

static ALWAYS_INLINE int32x4_t i8_dot(int32x4_t acc, int8x16_t w, int8x16_t x)
{
#ifdef BN_DOTPROD
	return vdotq_s32(acc, w, x);
#else
	acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(w), vget_low_s8(x)));
	return vpadalq_s16(acc, vmull_high_s8(w, x));
#endif
}

static ALWAYS_INLINE void i8_row(const struct bn_i8_matrix *w, uint32_t o,
				 const struct bn_q8_rows *x, uint32_t b0, const uint32_t n_cols,
				 float *y, uint32_t ldy)
{
	const int8_t *row = w->q + (size_t)o * w->row_bytes;
	int64x2_t total[I8_COLS];
	for (uint32_t b = 0; b < n_cols; b++)
		total[b] = vdupq_n_s64(0);
	for (uint32_t k0 = 0; k0 < w->row_bytes; k0 += I8_BLOCK) {
		uint32_t k1 = w->row_bytes - k0 < I8_BLOCK ? w->row_bytes : k0 + I8_BLOCK;
		int32x4_t acc[I8_COLS];
		for (uint32_t b = 0; b < n_cols; b++)
			acc[b] = vdupq_n_s32(0);
		for (uint32_t k = k0; k < k1; k += 16) {
			int8x16_t wv = vld1q_s8(row + k);
			for (uint32_t b = 0; b < n_cols; b++)
				acc[b] = i8_dot(acc[b], wv,
						vld1q_s8(x->q + (size_t)(b0 + b) * x->k_pad + k));
		}
		for (uint32_t b = 0; b < n_cols; b++)
			total[b] = vpadalq_s32(total[b], acc[b]);
	}
	for (uint32_t b = 0; b < n_cols; b++)
		y[(size_t)(b0 + b) * ldy + o] =
			((float)vaddvq_s64(total[b]) * w->scale[o]) * x->inv_scale[b0 + b];
}

static void i8_gemm_neon(const struct bn_i8_matrix *w, uint32_t o0, uint32_t o1,
			 const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy)
{
	for (uint32_t o = o0; o < o1; o++)
		for (uint32_t b = 0; b < n_b; b += I8_COLS)
			switch (n_b - b < I8_COLS ? n_b - b : I8_COLS) { /* constant tile widths */
			case 4: i8_row(w, o, x, b, 4, y, ldy); break;
			case 3: i8_row(w, o, x, b, 3, y, ldy); break;
			case 2: i8_row(w, o, x, b, 2, y, ldy); break;
			default: i8_row(w, o, x, b, 1, y, ldy); break;
			}
}

/* ------------------------------------------------------------------------------------------ */
/* The T3 layout (dotprod): base-3 digits by arithmetic                                        */
/* ------------------------------------------------------------------------------------------ */

#if defined(BN_DOTPROD) && !defined(BN_I8MM)
/* floor(v / 3) for bytes v <= 255: (v * 171) >> 9 (the error v * (171/512 - 1/3) stays under
 * 1/6, below the 1/3 that would carry past a multiple of 3). umull, the high bytes by uzp2,
 * one shift: four instructions. */
static ALWAYS_INLINE uint8x16_t div3(uint8x16_t v)
{
	const uint8x16_t m = vdupq_n_u8(171);
	uint16x8_t lo = vmull_u8(vget_low_u8(v), vget_low_u8(m)), hi = vmull_high_u8(v, m);
	return vshrq_n_u8(vuzp2q_u8(vreinterpretq_u8_u16(lo), vreinterpretq_u8_u16(hi)), 1);
}

/* The five code planes of 16 T3 bytes (each < 243): digit p = (v / 3^p) % 3, the quotient
 * carried from digit to digit and the remainder by one mls. */
static ALWAYS_INLINE void t3_digits(uint8x16_t v, int8x16_t d[5])
{
	const uint8x16_t three = vdupq_n_u8(3);
	for (uint32_t p = 0; p < 4; p++) {
		uint8x16_t q = div3(v);
		d[p] = vreinterpretq_s8_u8(vmlsq_u8(v, q, three));
		v = q;
	}
	d[4] = vreinterpretq_s8_u8(v);
}

#define T3_COLS 4 /* batch rows per pass: each decoded vector meets them all */

static ALWAYS_INLINE void t3_row(const struct bn_t3_matrix *w, uint32_t o,
				 const struct bn_q8_rows *x, uint32_t b0, const uint32_t n_cols,
				 float *y, uint32_t ldy)
{
	const uint8_t *row = w->codes + (size_t)o * w->row_bytes;
	int32x4_t acc[T3_COLS][2];
	for (uint32_t b = 0; b < n_cols; b++)
		acc[b][0] = acc[b][1] = vdupq_n_s32(0);
	uint32_t n_chunks = w->row_bytes / BN_T3_CHUNK_BYTES;
	for (uint32_t c = 0; c < n_chunks; c++)
		for (uint32_t h = 0; h < 4; h++) {
			int8x16_t d[5];
			t3_digits(vld1q_u8(row + (size_t)c * BN_T3_CHUNK_BYTES + 16 * h), d);
			for (uint32_t b = 0; b < n_cols; b++) {
				const int8_t *xc = x->q + (size_t)(b0 + b) * x->k_pad +
						   (size_t)c * BN_T3_CHUNK + 16 * h;
				for (uint32_t p = 0; p < 5; p++)
					acc[b][p & 1] = vdotq_s32(acc[b][p & 1], d[p], vld1q_s8(xc + 64 * p));
			}
		}
	for (uint32_t b = 0; b < n_cols; b++) {
		int32_t s = vaddvq_s32(vaddq_s32(acc[b][0], acc[b][1])) - x->sum[b0 + b];
		y[(size_t)(b0 + b) * ldy + o] = ((float)s * w->scale[o]) * x->inv_scale[b0 + b];
	}
}

void bn_t3_gemm_dotprod(const struct bn_t3_matrix *w, uint32_t o0, uint32_t o1,
			const struct bn_q8_rows *x, uint32_t n_b, float *y, uint32_t ldy)
{
	for (uint32_t o = o0; o < o1; o++)
		for (uint32_t b = 0; b < n_b; b += T3_COLS)
			switch (n_b - b < T3_COLS ? n_b - b : T3_COLS) {
			case 4: t3_row(w, o, x, b, 4, y, ldy); break;
			case 3: t3_row(w, o, x, b, 3, y, ldy); break;
			case 2: t3_row(w, o, x, b, 2, y, ldy); break;
			default: t3_row(w, o, x, b, 1, y, ldy); break;
			}
}
#endif

#if defined(BN_I8MM)
const struct bn_kernels bn_kernels_i8mm = {
	.name = "i8mm",
#elif defined(BN_DOTPROD)
const struct bn_kernels bn_kernels_dotprod = {
	.name = "dotprod",
#else
const struct bn_kernels bn_kernels_neon = {
	.name = "neon",
#endif
	.t2_gemm = t2_gemm_neon,
	.t2g_gemm = t2g_gemm_neon,
	.f_gemm = bn_neon_f_gemm,
	.attend = bn_neon_attend,
	.attend_heads = bn_neon_attend_heads,
	.quantize_rows = bn_neon_quantize_rows,
	.rmsnorm = bn_neon_rmsnorm,
	.relu2_mul = bn_neon_relu2_mul,
	.add = bn_neon_add,
	.i8_dots = bn_neon_i8_dots,
	.i8_gemm = i8_gemm_neon,
	.hash64 = bn_neon_hash64,
};
