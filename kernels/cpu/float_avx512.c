/* SPDX-License-Identifier: MIT */
/*
 * float_avx512.c — the AVX-512 variants of the float parts (kernels_avx512.h): float weight
 * matrices, attention, and the element-wise parts of a layer. Compiled with AVX-512 flags
 * (Makefile), called only when cpuid says the CPU and OS support them.
 */
#include "kernels_avx512.h"

#include "t2_blocking.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Float weights (F32, F16, BF16) x float activations                                          */
/* ------------------------------------------------------------------------------------------ */

static ALWAYS_INLINE __m512 f_load(const void *row, uint32_t k, __mmask16 m, const uint32_t type)
{
	if (type == BN_TYPE_F16)
		return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k));
	if (type == BN_TYPE_BF16) {
		__m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k));
		return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
	}
	return _mm512_maskz_loadu_ps(m, (const float *)row + k);
}

/* The order of a float dot product, shared by the row kernel and the tile kernel so that a
 * row's result does not depend on its batch. The inputs go in blocks of F_K_BLOCK (the last
 * block shorter, each a multiple of 64); lane accumulator j sums the j-th quarter of every
 * block, 16 lanes at a time from its start; the inputs past the last multiple of 64 are added
 * masked, 16 per accumulator. The four are combined as (a0 + a1) + (a2 + a3) and reduced.
 * Contiguous quarters, rather than the 16-lane slices of every 64 inputs, are what let the
 * tile kernel's four passes each read whole cache lines: its passes over interleaved slices
 * touched a quarter of every activation line: one core, 65536 x 2560 F16 rows, batch 16, side
 * by side, 43-47 G multiply-adds/s with slices against 66-71 with quarters. Blocks of 640 to
 * 2048 inputs measured alike; quarters of whole 2560-input rows, 59-62. */
#define F_K_BLOCK 1024

static ALWAYS_INLINE uint32_t f_block_end(uint32_t kb, uint32_t k_full)
{
	return kb + F_K_BLOCK < k_full ? kb + F_K_BLOCK : k_full;
}

/* One step of one weight row against n_cols batch rows: 16 inputs at each of k[0..3]. The
 * weights a lead ahead of a cursor that advances by the step's bytes are prefetched. */
static ALWAYS_INLINE void f_step(const void *row, const char *ahead, const char *end,
				 const float *const *xs, const uint32_t k[4], const __mmask16 *m,
				 const uint32_t n_cols, __m512 acc[4][COLS], const uint32_t type)
{
	const uint32_t step_bytes = type == BN_TYPE_F32 ? 256 : 128;
	for (uint32_t off = 0; off < step_bytes; off += 64)
		if (ahead + off < end)
			_mm_prefetch(ahead + off, _MM_HINT_T0);
	__m512 wv[4];
	for (uint32_t j = 0; j < 4; j++)
		wv[j] = f_load(row, k[j], m[j], type);
	for (uint32_t b = 0; b < n_cols; b++)
		for (uint32_t j = 0; j < 4; j++)
			acc[j][b] = _mm512_fmadd_ps(wv[j], _mm512_maskz_loadu_ps(m[j], xs[b] + k[j]),
						    acc[j][b]);
}

/* One weight row, streamed once, against n_cols batch rows, in the order described above. */
static ALWAYS_INLINE void f_row(const struct bn_f_matrix *w, uint32_t o, const float *x,
				uint32_t ldx, uint32_t b0, const uint32_t n_cols, float *y,
				uint32_t ldy, const uint32_t type)
{
	const uint32_t step_bytes = type == BN_TYPE_F32 ? 256 : 128;
	const void *row = (const uint8_t *)w->data + (size_t)o * w->row_bytes;
	const char *end = (const char *)w->data + (size_t)w->n_out * w->row_bytes;
	const char *ahead = (const char *)row + WEIGHT_PREFETCH_BYTES;
	const float *xs[COLS];
	for (uint32_t b = 0; b < n_cols; b++)
		xs[b] = x + (size_t)(b0 + b) * ldx;
	__m512 acc[4][COLS];
	for (uint32_t j = 0; j < 4; j++)
		for (uint32_t b = 0; b < n_cols; b++)
			acc[j][b] = _mm512_setzero_ps();
	const __mmask16 full[4] = { 0xffff, 0xffff, 0xffff, 0xffff };
	const uint32_t k_full = w->n_in / 64 * 64;
	for (uint32_t kb = 0; kb < k_full; kb += F_K_BLOCK) {
		const uint32_t q = (f_block_end(kb, k_full) - kb) / 4;
		for (uint32_t i = kb; i < kb + q; i += 16, ahead += step_bytes) {
			const uint32_t k[4] = { i, i + q, i + 2 * q, i + 3 * q };
			f_step(row, ahead, end, xs, k, full, n_cols, acc, type);
		}
	}
	if (k_full < w->n_in) {
		uint32_t k[4];
		__mmask16 m[4];
		for (uint32_t j = 0; j < 4; j++) {
			k[j] = k_full + 16 * j;
			m[j] = lanes_from(k[j], w->n_in);
		}
		f_step(row, ahead, end, xs, k, m, n_cols, acc, type);
	}
	for (uint32_t b = 0; b < n_cols; b++) {
		__m512 t = _mm512_add_ps(_mm512_add_ps(acc[0][b], acc[1][b]),
					 _mm512_add_ps(acc[2][b], acc[3][b]));
		y[(size_t)(b0 + b) * ldy + o] = _mm512_reduce_add_ps(t);
	}
}

/* TILE_ROWS weight rows x COLS batch rows, for batches: four passes over each block, pass j
 * summing the block's j-th quarter of every (row, batch row) pair into one register each;
 * the four partial vectors are combined at the end exactly as f_row combines its four
 * accumulators. Every lane sees the same multiply-adds in the same order as in f_row, so the
 * results are bit-identical to it (a row's logits do not depend on its batch), while each
 * converted weight vector serves four batch rows and each activation vector four weight
 * rows. Each pass reads its quarter of the block (F16: 4 x 512 bytes of weights, 4 x 1 KiB
 * of activations) as whole, consecutive cache lines, and pass j + 1 starts where pass j
 * ended. (Why blocks beat quarters of whole rows, above, is measured, not understood.) The
 * tile that meets batch rows 0-3 prefetches the next tile's weights, which every later tile
 * of the row group then finds in cache: 44-46 against 52-55 G multiply-adds/s on one core
 * without and with. */
#define TILE_ROWS 4

static ALWAYS_INLINE void f_tile_pass(const void *const *row, const float *const *xs,
				      uint32_t k0, uint32_t k1, size_t next_tile, const char *end,
				      __m512 part[TILE_ROWS][COLS], const uint32_t type)
{
	const uint32_t elem_bytes = type == BN_TYPE_F32 ? 4 : 2;
	__m512 acc[TILE_ROWS][COLS];
	for (uint32_t r = 0; r < TILE_ROWS; r++)
		for (uint32_t b = 0; b < COLS; b++)
			acc[r][b] = part[r][b];
	for (uint32_t k = k0; k < k1; k += 16) {
		if (next_tile)
			for (uint32_t r = 0; r < TILE_ROWS; r++) {
				const char *p = (const char *)row[r] + (size_t)k * elem_bytes + next_tile;
				if (p < end)
					_mm_prefetch(p, _MM_HINT_T0);
			}
		__m512 wv[TILE_ROWS];
		for (uint32_t r = 0; r < TILE_ROWS; r++)
			wv[r] = f_load(row[r], k, 0xffff, type);
		for (uint32_t b = 0; b < COLS; b++) {
			__m512 xv = _mm512_loadu_ps(xs[b] + k);
			for (uint32_t r = 0; r < TILE_ROWS; r++)
				acc[r][b] = _mm512_fmadd_ps(wv[r], xv, acc[r][b]);
		}
	}
	for (uint32_t r = 0; r < TILE_ROWS; r++)
		for (uint32_t b = 0; b < COLS; b++)
			part[r][b] = acc[r][b];
}

static ALWAYS_INLINE void f_tile(const struct bn_f_matrix *w, uint32_t o, const float *x,
				 uint32_t ldx, uint32_t b0, float *y, uint32_t ldy,
				 const uint32_t type)
{
	const void *row[TILE_ROWS];
	for (uint32_t r = 0; r < TILE_ROWS; r++)
		row[r] = (const uint8_t *)w->data + (size_t)(o + r) * w->row_bytes;
	const char *end = (const char *)w->data + (size_t)w->n_out * w->row_bytes;
	const size_t next_tile = b0 == 0 ? (size_t)TILE_ROWS * w->row_bytes : 0;
	const float *xs[COLS];
	for (uint32_t b = 0; b < COLS; b++)
		xs[b] = x + (size_t)(b0 + b) * ldx;
	__m512 part[4][TILE_ROWS][COLS];
	for (uint32_t j = 0; j < 4; j++)
		for (uint32_t r = 0; r < TILE_ROWS; r++)
			for (uint32_t b = 0; b < COLS; b++)
				part[j][r][b] = _mm512_setzero_ps();
	const uint32_t k_full = w->n_in / 64 * 64;
	for (uint32_t kb = 0; kb < k_full; kb += F_K_BLOCK) {
		const uint32_t q = (f_block_end(kb, k_full) - kb) / 4;
		for (uint32_t j = 0; j < 4; j++)
			f_tile_pass(row, xs, kb + j * q, kb + (j + 1) * q, next_tile, end, part[j],
				    type);
	}
	if (k_full < w->n_in) /* the tail, masked as in f_row */
		for (uint32_t j = 0; j < 4; j++) {
			uint32_t k = k_full + 16 * j;
			__mmask16 m = lanes_from(k, w->n_in);
			for (uint32_t r = 0; r < TILE_ROWS; r++) {
				__m512 wv = f_load(row[r], k, m, type);
				for (uint32_t b = 0; b < COLS; b++)
					part[j][r][b] = _mm512_fmadd_ps(
						wv, _mm512_maskz_loadu_ps(m, xs[b] + k), part[j][r][b]);
			}
		}
	for (uint32_t r = 0; r < TILE_ROWS; r++)
		for (uint32_t b = 0; b < COLS; b++) {
			__m512 t = _mm512_add_ps(_mm512_add_ps(part[0][r][b], part[1][r][b]),
						 _mm512_add_ps(part[2][r][b], part[3][r][b]));
			y[(size_t)(b0 + b) * ldy + o + r] = _mm512_reduce_add_ps(t);
		}
}

static ALWAYS_INLINE void f_gemm_typed(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1,
				       const float *x, uint32_t ldx, uint32_t n_b, float *y,
				       uint32_t ldy, const uint32_t type)
{
	uint32_t o = o0;
	/* Batches of at least COLS rows: whole tiles first, the edges row by row. */
	uint32_t b_tiles = n_b / COLS * COLS;
	if (b_tiles) {
		for (; o + TILE_ROWS <= o1; o += TILE_ROWS) {
			for (uint32_t b = 0; b < b_tiles; b += COLS)
				f_tile(w, o, x, ldx, b, y, ldy, type);
			for (uint32_t r = 0; r < TILE_ROWS; r++)
				switch (n_b - b_tiles) {
				case 3: f_row(w, o + r, x, ldx, b_tiles, 3, y, ldy, type); break;
				case 2: f_row(w, o + r, x, ldx, b_tiles, 2, y, ldy, type); break;
				case 1: f_row(w, o + r, x, ldx, b_tiles, 1, y, ldy, type); break;
				default: break;
				}
		}
	}
	for (; o < o1; o++) {
		uint32_t b = 0;
		for (; b + COLS <= n_b; b += COLS)
			f_row(w, o, x, ldx, b, COLS, y, ldy, type);
		switch (n_b - b) {
		case 3: f_row(w, o, x, ldx, b, 3, y, ldy, type); break;
		case 2: f_row(w, o, x, ldx, b, 2, y, ldy, type); break;
		case 1: f_row(w, o, x, ldx, b, 1, y, ldy, type); break;
		default: break;
		}
	}
}

/* The panel layout (kernels.h): a tile is one group of 64 rows (four vectors of 16) against
 * up to P_COLS batch rows, 4 x P_COLS sums in registers. Per input k: four weight vectors
 * loaded (and converted) once, one broadcast per batch row, 4 x P_COLS fused multiply-adds,
 * each sum one chain over k in order: the same bits as the scalar variant's fmaf chain, for
 * any batch and row range. Against the 4 x 4 row-layout tile, which must load every
 * activation vector for each group of four weight rows, this reads ~6 bytes per
 * multiply-add vector instead of ~24. One core, 65536 x 2560 F16 (from memory), side by side:
 * batch 16 68.7 -> 100.8 G multiply-adds/s, batch 8 59.7 -> 101.3, batch 4 43.5 -> 68.5,
 * batch 1 15.9 -> 17.0 (31.8 -> 33.9 GB/s). */
#define P_COLS 6
#define P_VECS (BN_F_PANEL_ROWS / 16)

/* Lanes [lo, hi) of 16 (either bound may lie past 16). */
static ALWAYS_INLINE __mmask16 lanes_between(uint32_t lo, uint32_t hi)
{
	uint32_t below_hi = hi >= 16 ? 0xffffu : (1u << hi) - 1;
	uint32_t below_lo = lo >= 16 ? 0xffffu : (1u << lo) - 1;
	return (__mmask16)(below_hi & ~below_lo);
}

/* Rows [r0, r1) of one group (first row `first`) against n_cols batch rows. `ahead`, when not
 * NULL, is the weight stream's prefetch cursor: the tile meeting batch rows 0.. streams the
 * group from memory, the others find it in cache. */
static ALWAYS_INLINE void p_tile(const void *group, uint32_t n_in, const float *x, uint32_t ldx,
				 const uint32_t n_cols, float *y, uint32_t ldy, uint32_t first,
				 uint32_t r0, uint32_t r1, const char *ahead, const char *end,
				 const uint32_t type)
{
	const size_t step_bytes = (size_t)BN_F_PANEL_ROWS * (type == BN_TYPE_F32 ? 4 : 2);
	__m512 acc[P_COLS][P_VECS];
	for (uint32_t b = 0; b < n_cols; b++)
		for (uint32_t v = 0; v < P_VECS; v++)
			acc[b][v] = _mm512_setzero_ps();
	for (uint32_t k = 0; k < n_in; k++) {
		if (ahead)
			for (size_t off = 0; off < step_bytes; off += 64)
				if (ahead + k * step_bytes + off < end)
					_mm_prefetch(ahead + k * step_bytes + off, _MM_HINT_T0);
		__m512 wv[P_VECS];
		for (uint32_t v = 0; v < P_VECS; v++)
			wv[v] = f_load(group, k * BN_F_PANEL_ROWS + 16 * v, 0xffff, type);
		for (uint32_t b = 0; b < n_cols; b++) {
			__m512 xb = _mm512_set1_ps(x[(size_t)b * ldx + k]);
			for (uint32_t v = 0; v < P_VECS; v++)
				acc[b][v] = _mm512_fmadd_ps(wv[v], xb, acc[b][v]);
		}
	}
	for (uint32_t v = 0; v < P_VECS; v++) {
		uint32_t o = first + 16 * v; /* rows o .. o + 15 of this vector; store those in range */
		__mmask16 m = lanes_between(r0 > o ? r0 - o : 0, r1 > o ? r1 - o : 0);
		for (uint32_t b = 0; b < n_cols; b++)
			_mm512_mask_storeu_ps(y + (size_t)b * ldy + o, m, acc[b][v]);
	}
}

static ALWAYS_INLINE void f_gemm_panels(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1,
					const float *x, uint32_t ldx, uint32_t n_b, float *y,
					uint32_t ldy, const uint32_t type)
{
	const size_t group_bytes = (size_t)BN_F_PANEL_ROWS * w->n_in * (type == BN_TYPE_F32 ? 4 : 2);
	const char *end = (const char *)w->data + bn_f_panel_bytes(type, w->n_in, w->n_out);
	for (uint32_t g = o0 / BN_F_PANEL_ROWS; g * BN_F_PANEL_ROWS < o1; g++) {
		const char *group = (const char *)w->data + g * group_bytes;
		uint32_t first = g * BN_F_PANEL_ROWS;
		uint32_t r0 = o0 > first ? o0 : first;
		uint32_t r1 = o1 < first + BN_F_PANEL_ROWS ? o1 : first + BN_F_PANEL_ROWS;
		for (uint32_t b = 0; b < n_b; b += P_COLS) {
			const char *ahead = b == 0 ? group + WEIGHT_PREFETCH_BYTES : NULL;
			const float *xb = x + (size_t)b * ldx;
			float *yb = y + (size_t)b * ldy;
			switch (n_b - b < P_COLS ? n_b - b : P_COLS) { /* constant tile widths */
			case 6: p_tile(group, w->n_in, xb, ldx, 6, yb, ldy, first, r0, r1, ahead, end, type); break;
			case 5: p_tile(group, w->n_in, xb, ldx, 5, yb, ldy, first, r0, r1, ahead, end, type); break;
			case 4: p_tile(group, w->n_in, xb, ldx, 4, yb, ldy, first, r0, r1, ahead, end, type); break;
			case 3: p_tile(group, w->n_in, xb, ldx, 3, yb, ldy, first, r0, r1, ahead, end, type); break;
			case 2: p_tile(group, w->n_in, xb, ldx, 2, yb, ldy, first, r0, r1, ahead, end, type); break;
			default: p_tile(group, w->n_in, xb, ldx, 1, yb, ldy, first, r0, r1, ahead, end, type); break;
			}
		}
	}
}

/* One float type in either layout (the type a constant, so each loop is compiled for it). */
static ALWAYS_INLINE void f_gemm_of_type(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1,
					 const float *x, uint32_t ldx, uint32_t n_b, float *y,
					 uint32_t ldy, const uint32_t type)
{
	if (w->panel_rows)
		f_gemm_panels(w, o0, o1, x, ldx, n_b, y, ldy, type);
	else
		f_gemm_typed(w, o0, o1, x, ldx, n_b, y, ldy, type);
}

void f_gemm_avx512(const struct bn_f_matrix *w, uint32_t o0, uint32_t o1, const float *x,
		   uint32_t ldx, uint32_t n_b, float *y, uint32_t ldy)
{
	if (o0 >= o1 || n_b == 0)
		return;
	switch (w->type) {
	case BN_TYPE_F16:
		f_gemm_of_type(w, o0, o1, x, ldx, n_b, y, ldy, BN_TYPE_F16);
		break;
	case BN_TYPE_BF16:
		f_gemm_of_type(w, o0, o1, x, ldx, n_b, y, ldy, BN_TYPE_BF16);
		break;
	default:
		f_gemm_of_type(w, o0, o1, x, ldx, n_b, y, ldy, BN_TYPE_F32);
		break;
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Attention of one query over a cache                                                          */
/* ------------------------------------------------------------------------------------------ */

#define ATTEND_MAX_VECS 16 /* head dims up to 256 keep the output in registers */

void attend_avx512(const float *q, const struct bn_kv_view *kv, uint32_t L, uint32_t d,
		   float scale, float *s, float *out)
{
	uint32_t n_vec = (d + 15) / 16, rows;
	if (n_vec > ATTEND_MAX_VECS) {
		bn_kernels_scalar.attend(q, kv, L, d, scale, s, out);
		return;
	}
	__mmask16 tail = d % 16 ? (__mmask16)((1u << (d % 16)) - 1) : (__mmask16)0xffff;
	__m512 qv[ATTEND_MAX_VECS];
	for (uint32_t v = 0; v < n_vec; v++)
		qv[v] = _mm512_maskz_loadu_ps(v + 1 == n_vec ? tail : 0xffff, q + 16 * v);
	for (uint32_t t0 = 0; t0 < L; t0 += rows) {
		const float *K = bn_kv_rows(kv, kv->K, t0, L, &rows);
		for (uint32_t i = 0; i < rows; i++) {
			const float *k = K + (size_t)i * kv->ld;
			__m512 acc = _mm512_setzero_ps();
			for (uint32_t v = 0; v < n_vec; v++)
				acc = _mm512_fmadd_ps(qv[v], _mm512_maskz_loadu_ps(v + 1 == n_vec ? tail
												   : 0xffff,
										   k + 16 * v),
						      acc);
			s[t0 + i] = _mm512_reduce_add_ps(acc) * scale;
		}
	}
	bn_softmax(s, L);
	__m512 o[ATTEND_MAX_VECS];
	for (uint32_t v = 0; v < n_vec; v++)
		o[v] = _mm512_setzero_ps();
	for (uint32_t t0 = 0; t0 < L; t0 += rows) {
		const float *V = bn_kv_rows(kv, kv->V, t0, L, &rows);
		for (uint32_t i = 0; i < rows; i++) {
			const float *vt = V + (size_t)i * kv->ld;
			__m512 p = _mm512_set1_ps(s[t0 + i]);
			for (uint32_t v = 0; v < n_vec; v++)
				o[v] = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(v + 1 == n_vec ? tail
												 : 0xffff,
										 vt + 16 * v),
						       o[v]);
		}
	}
	for (uint32_t v = 0; v < n_vec; v++)
		_mm512_mask_storeu_ps(out + 16 * v, v + 1 == n_vec ? tail : 0xffff, o[v]);
}

/* Grouped-query attention: the heads that share a KV head read each cached row once. Per head
 * the arithmetic is attend_avx512's, operation for operation (the same fused multiply-adds
 * in the same order, the same reductions, bn_softmax), so each head's output is the one it
 * gets alone. n_h and n_vec are compile-time constants in every call, which keeps the
 * accumulators in registers; head dims are whole vectors, so no load needs a mask. */
static ALWAYS_INLINE void heads_scores(const float *q, const uint32_t n_h, const uint32_t n_vec,
				       const struct bn_kv_view *kv, uint32_t L, float scale, float *s)
{
	uint32_t rows;
	for (uint32_t t0 = 0; t0 < L; t0 += rows) {
		const float *K = bn_kv_rows(kv, kv->K, t0, L, &rows);
		for (uint32_t i = 0; i < rows; i++) {
			const float *k = K + (size_t)i * kv->ld;
			__m512 kr[ATTEND_MAX_VECS];
			for (uint32_t v = 0; v < n_vec; v++)
				kr[v] = _mm512_loadu_ps(k + 16 * v);
			for (uint32_t h = 0; h < n_h; h++) {
				const float *qh = q + (size_t)h * n_vec * 16;
				__m512 acc = _mm512_setzero_ps();
				for (uint32_t v = 0; v < n_vec; v++)
					acc = _mm512_fmadd_ps(_mm512_loadu_ps(qh + 16 * v), kr[v], acc);
				s[(size_t)h * L + t0 + i] = _mm512_reduce_add_ps(acc) * scale;
			}
		}
	}
}

/* out for vectors [v0, v0 + n_cv) of every head: n_h * n_cv accumulators. */
static ALWAYS_INLINE void heads_values(const uint32_t n_h, const uint32_t n_vec, uint32_t v0,
				       const uint32_t n_cv, const struct bn_kv_view *kv, uint32_t L,
				       const float *s, float *out)
{
	__m512 o[ATTEND_MAX_VECS];
	for (uint32_t a = 0; a < n_h * n_cv; a++)
		o[a] = _mm512_setzero_ps();
	uint32_t rows;
	for (uint32_t t0 = 0; t0 < L; t0 += rows) {
		const float *V = bn_kv_rows(kv, kv->V, t0, L, &rows);
		for (uint32_t i = 0; i < rows; i++) {
			const float *vt = V + (size_t)i * kv->ld;
			for (uint32_t h = 0; h < n_h; h++) {
				__m512 p = _mm512_set1_ps(s[(size_t)h * L + t0 + i]);
				for (uint32_t c = 0; c < n_cv; c++) {
					__m512 x = _mm512_loadu_ps(vt + 16 * (v0 + c));
					o[h * n_cv + c] = _mm512_fmadd_ps(p, x, o[h * n_cv + c]);
				}
			}
		}
	}
	for (uint32_t h = 0; h < n_h; h++)
		for (uint32_t c = 0; c < n_cv; c++)
			_mm512_storeu_ps(out + (size_t)h * n_vec * 16 + 16 * (v0 + c), o[h * n_cv + c]);
}

static ALWAYS_INLINE void heads_fixed(const float *q, const uint32_t n_h, const uint32_t n_vec,
				      const struct bn_kv_view *kv, uint32_t L, float scale,
				      float *s, float *out)
{
	const uint32_t n_cv = ATTEND_MAX_VECS / n_h < n_vec ? ATTEND_MAX_VECS / n_h : n_vec;
	heads_scores(q, n_h, n_vec, kv, L, scale, s);
	for (uint32_t h = 0; h < n_h; h++)
		bn_softmax(s + (size_t)h * L, L);
	for (uint32_t v0 = 0; v0 < n_vec; v0 += n_cv)
		heads_values(n_h, n_vec, v0, n_cv, kv, L, s, out);
}

/* Head dims of 64 and 128 with groups of 1, 2, 4 or 8 heads (the shapes of the models we
 * serve); anything else is one attend_avx512 per head. */
void attend_heads_avx512(const float *q, uint32_t n_heads, const struct bn_kv_view *kv,
			 uint32_t L, uint32_t d, float scale, float *s, float *out)
{
#define HEADS_CASE(n_vec)                                                                     \
	switch (n_heads) {                                                                    \
	case 1: heads_fixed(q, 1, n_vec, kv, L, scale, s, out); return;                       \
	case 2: heads_fixed(q, 2, n_vec, kv, L, scale, s, out); return;                       \
	case 4: heads_fixed(q, 4, n_vec, kv, L, scale, s, out); return;                       \
	case 8: heads_fixed(q, 8, n_vec, kv, L, scale, s, out); return;                       \
	default: break;                                                                       \
	}
	if (d == 128)
		HEADS_CASE(8)
	if (d == 64)
		HEADS_CASE(4)
#undef HEADS_CASE
	bn_attend_each_head(attend_avx512, q, n_heads, kv, L, d, scale, s, out);
}

/* ------------------------------------------------------------------------------------------ */
/* Element-wise parts of a layer: bn_rmsnorm, bn_relu2_mul, bn_add to the bit                  */
/* ------------------------------------------------------------------------------------------ */

/* v, which the compiler may no longer fold into a neighbouring operation: this file is built
 * with FMA and GNU C's fp-contract=fast, and x * x + lane fused into one rounding would not be
 * bn_rmsnorm's two. */
static ALWAYS_INLINE __m512 unfused(__m512 v)
{
	__asm__("" : "+v"(v));
	return v;
}

/* The scalar definition's 16 lanes are one register: lane l takes x[i] for i % 16 == l, in
 * order; the tail adds into its first lanes only; then the lanes are added in lane order. */
static float sum_squares_avx512(const float *x, uint32_t n)
{
	__m512 lanes = _mm512_setzero_ps();
	for (uint32_t i = 0; i < n; i += 16) {
		__mmask16 m = lanes_from(i, n);
		__m512 v = _mm512_maskz_loadu_ps(m, x + i);
		lanes = _mm512_mask_add_ps(lanes, m, lanes, unfused(_mm512_mul_ps(v, v)));
	}
	float lane[BN_RMSNORM_LANES], ss = 0.0f;
	_mm512_storeu_ps(lane, lanes);
	for (uint32_t l = 0; l < BN_RMSNORM_LANES; l++)
		ss += lane[l];
	return ss;
}

void rmsnorm_avx512(float *out, const float *x, const float *w, uint32_t n, float eps)
{
	const __m512 inv = _mm512_set1_ps(1.0f / sqrtf(sum_squares_avx512(x, n) / (float)n + eps));
	for (uint32_t i = 0; i < n; i += 16) {
		__mmask16 m = lanes_from(i, n);
		__m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv);
		_mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)));
	}
}

/* The ordered compare is false for NaN, so NaN gates become 0 as in the scalar mask. */
void relu2_mul_avx512(float *g, const float *u, uint32_t n)
{
	for (uint32_t i = 0; i < n; i += 16) {
		__mmask16 m = lanes_from(i, n);
		__m512 v = _mm512_maskz_loadu_ps(m, g + i);
		__m512 r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), v);
		__m512 rr = _mm512_mul_ps(r, r);
		_mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(rr, _mm512_maskz_loadu_ps(m, u + i)));
	}
}

void add_avx512(float *x, const float *y, uint32_t n)
{
	for (uint32_t i = 0; i < n; i += 16) {
		__mmask16 m = lanes_from(i, n);
		__m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
		_mm512_mask_storeu_ps(x + i, m, v);
	}
}
