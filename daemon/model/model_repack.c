/* SPDX-License-Identifier: MIT */
/*
 * model_repack.c — the ternary layouts the kernels read, made at load (model_load.h): every
 * ternary tensor (and every ternary float matrix of a BitLinear graph) into the T2 planes
 * with its scales, or taken from the weights cache; and the T3 decode copies of them.
 *
 * Scales: BitNet's files have one per tensor (I2_S) or one per 256-weight block that all agree
 * (TQ1_0/TQ2_0 of a BitNet model); Ternary-Bonsai's have one per group (its TQ1_0/TQ2_0
 * repacks one per 256-weight block, its F16 file one per 128 weights). The loader reads a
 * tensor's scales per 128-weight block (bn_ternary_row_blocks) and keeps the coarsest form
 * that says the same: one scale a row when each row's blocks agree (the kernels' t2_gemm, and
 * the bits the files had before groups existed), else one per 256 weights when each pair of
 * blocks agrees, else one per 128 (t2g_gemm). A block of zero weights agrees with anything.
 * So the same weights give the same matrix, and the same bits, from any file type that can
 * hold them (an F16 twin of a TQ2_0 file included).
 */
#include "model_load.h"
#include "quant.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define REPACK_TASK_ROWS 64 /* ternary rows one repack task decodes and packs */

const uint32_t bn_ld_packed_flag[2] = { 0, 1 };

/* Rows are decoded and packed by tasks; the lowest row that does not decode is reported, as
 * a row-by-row loop would. From a float tensor (from_float) the first row found not ternary
 * stops every task: the tensor stays float. */
struct ternary_job {
	const struct bn_gguf_tensor *t;
	const struct bn_linear *l;
	uint8_t *codes;           /* [n_out][row_bytes] */
	float *scale;             /* [n_out] one scale a row, or NULL (grouped) */
	float *gscale;            /* [n_out][n_in / group] (grouped), or NULL */
	uint32_t group;           /* 0: one scale a row */
	float *bscale;            /* [n_out][nb] each 128-weight block's scale, while building */
	uint32_t nb;              /* blocks a row when read per block; 0: one scale a row */
	uint64_t row_bytes;
	uint8_t *scratch;         /* [threads][n_in]: one row's codes */
	int from_float;           /* t is F32, F16 or BF16 */
	int not_ternary;          /* from_float: a row is not {-s, 0, +s} */
	uint32_t bad_row;         /* UINT32_MAX: none */
	int bad_rc;
};

static void note_bad_row(struct ternary_job *j, uint32_t r, int rc)
{
	uint32_t seen = __atomic_load_n(&j->bad_row, __ATOMIC_RELAXED);
	while (r < seen && !__atomic_compare_exchange_n(&j->bad_row, &seen, r, 0, __ATOMIC_RELAXED,
							__ATOMIC_RELAXED))
		;
	if (r <= seen)
		__atomic_store_n(&j->bad_rc, rc, __ATOMIC_RELAXED);
}

/* One row's codes into row_codes, and its scale or its blocks' scales: 0, or the decoder's
 * failure (1: a float row that is not ternary). */
static int row_codes_of(struct ternary_job *j, uint32_t r, uint8_t *row_codes)
{
	const struct bn_gguf_tensor *t = j->t;
	int rc;
	if (j->nb)
		rc = bn_ternary_row_blocks(t->type, t->data, t->size, r, j->l->n_in, row_codes,
					   j->bscale + (size_t)r * j->nb);
	else if (!j->from_float)
		rc = bn_ternary_row(t->type, t->data, t->size, r, j->l->n_in, row_codes, &j->scale[r]);
	else
		rc = bn_ternary_from_float_row(t->type, t->data, t->size, r, j->l->n_in, row_codes,
					       &j->scale[r]);
	if (rc == 1)
		__atomic_store_n(&j->not_ternary, 1, __ATOMIC_RELAXED);
	return rc;
}

static void ternary_task(void *ctx, uint32_t task)
{
	struct ternary_job *j = ctx;
	const struct bn_linear *l = j->l;
	uint8_t *row_codes = j->scratch + (size_t)bn_pool_thread_index() * l->n_in;
	uint32_t r1 = (task + 1) * REPACK_TASK_ROWS < l->n_out ? (task + 1) * REPACK_TASK_ROWS
							     : l->n_out;
	for (uint32_t r = task * REPACK_TASK_ROWS; r < r1; r++) {
		if (__atomic_load_n(&j->not_ternary, __ATOMIC_RELAXED))
			return;
		uint8_t *out = j->codes + (size_t)r * j->row_bytes;
		int rc = j->from_float || j->nb ? 1
						: bn_ternary_row_t2(j->t->type, j->t->data, j->t->size,
								    r, l->n_in, out, &j->scale[r]);
		if (rc == 0)
			continue; /* moved as it lies */
		if (rc == 1)
			rc = row_codes_of(j, r, row_codes);
		if (rc == 1)
			return;
		if (rc != 0) {
			note_bad_row(j, r, rc);
			return;
		}
		bn_t2_pack(row_codes, l->n_in, out);
	}
}

/* ---- scales per row or per group ----------------------------------------------------------- */

static int same_bits(float a, float b)
{
	uint32_t x, y;
	memcpy(&x, &a, sizeof(x));
	memcpy(&y, &b, sizeof(y));
	return x == y;
}

/* The one scale of n block scales (0 for a block of zeros agrees with any), or 0 when all
 * are 0; *agree is cleared when two non-zero ones differ. */
static float one_scale(const float *s, uint32_t n, int *agree)
{
	float one = 0.0f;
	for (uint32_t i = 0; i < n; i++) {
		if (s[i] == 0.0f)
			continue;
		if (one != 0.0f && !same_bits(one, s[i]))
			*agree = 0;
		one = one != 0.0f ? one : s[i];
	}
	return one;
}

/* Whether every run of `per` blocks of every row has one scale. */
static int runs_agree(const struct ternary_job *j, uint32_t per)
{
	int agree = 1;
	for (size_t i = 0; agree && i < (size_t)j->l->n_out * j->nb; i += per)
		one_scale(j->bscale + i, per, &agree);
	return agree;
}

/* The coarsest grouping the blocks' scales allow (the file's comment above), into scale or
 * gscale. 0, or -ENOMEM. */
static int settle_groups(struct loader *ld, struct ternary_job *j)
{
	const struct bn_linear *l = j->l;
	uint32_t per = runs_agree(j, j->nb) ? j->nb : j->nb % 2 == 0 && runs_agree(j, 2) ? 2 : 1;
	int agree = 1;
	if (per == j->nb) {
		j->scale = bn_ld_own(ld, (size_t)l->n_out * sizeof(float));
		if (!j->scale)
			return -1;
		for (uint32_t r = 0; r < l->n_out; r++)
			j->scale[r] = one_scale(j->bscale + (size_t)r * j->nb, j->nb, &agree);
		bn_model_disown(ld->m, j->bscale);
		return 0;
	}
	/* in place: run i's scale goes to i, read from blocks i * per.. (never behind it) */
	for (size_t i = 0; i < (size_t)l->n_out * j->nb / per; i++)
		j->bscale[i] = one_scale(j->bscale + i * per, per, &agree);
	j->gscale = j->bscale;
	j->group = per * BN_T2_GROUP_BLOCK;
	return 0;
}

static int scales_finite(struct loader *ld, const struct bn_gguf_tensor *t,
			 const struct ternary_job *j)
{
	uint32_t per_row = j->group ? j->l->n_in / j->group : 1;
	const float *s = j->group ? j->gscale : j->scale;
	for (size_t i = 0; i < (size_t)j->l->n_out * per_row; i++)
		if (!isfinite(s[i]))
			return bn_ld_fail(ld, "tensor '%.*s' row %zu has a scale that is not finite (%g)",
					  (int)t->name.len, t->name.ptr, i / per_row, (double)s[i]);
	return 0;
}

/* ---- building, or taking from the cache ------------------------------------------------------ */

/* The T2 codes and scales of a matrix the cache holds: codes, the group word, then the row
 * scales or the group scales. */
static int t2_from_cache(struct loader *ld, const struct bn_gguf_tensor *t, struct ternary_job *j)
{
	const struct bn_linear *l = j->l;
	j->codes = (uint8_t *)bn_wcache_take(ld->cache, BN_WCACHE_T2_CODES, j->row_bytes * l->n_out);
	const uint32_t *group = j->codes ? bn_wcache_take(ld->cache, BN_WCACHE_T2_GROUP,
							   sizeof(uint32_t))
					 : NULL;
	if (!group || (*group && (*group % BN_T2_GROUP_BLOCK || l->n_in % *group)))
		return bn_ld_cache_mismatch(ld, t);
	j->group = *group;
	if (j->group)
		j->gscale = (float *)bn_wcache_take(ld->cache, BN_WCACHE_T2_GSCALE,
						    (uint64_t)l->n_out * (l->n_in / j->group) *
							    sizeof(float));
	else
		j->scale = (float *)bn_wcache_take(ld->cache, BN_WCACHE_T2_SCALE,
						   (uint64_t)l->n_out * sizeof(float));
	return j->scale || j->gscale ? 0 : bn_ld_cache_mismatch(ld, t);
}

/* Repacks every row on the pool. 0; 1 when a float tensor is not ternary (nothing kept); -1
 * with the reason set. */
static int t2_build(struct loader *ld, const struct bn_gguf_tensor *t, struct ternary_job *j)
{
	const struct bn_linear *l = j->l;
	j->nb = t->type != BN_TYPE_I2_S && l->n_in % BN_T2_GROUP_BLOCK == 0
			? l->n_in / BN_T2_GROUP_BLOCK
			: 0;
	j->codes = bn_ld_own(ld, j->row_bytes * l->n_out);
	if (j->nb)
		j->bscale = bn_ld_own(ld, (size_t)l->n_out * j->nb * sizeof(float));
	else
		j->scale = bn_ld_own(ld, (size_t)l->n_out * sizeof(float));
	j->scratch = malloc((size_t)bn_ld_run_threads(ld->pool) * l->n_in);
	if (!j->codes || (!j->bscale && !j->scale) || !j->scratch) {
		free(j->scratch);
		return bn_ld_oom(ld, t);
	}
	bn_ld_run_tasks(ld->pool, (l->n_out + REPACK_TASK_ROWS - 1) / REPACK_TASK_ROWS,
			ternary_task, j);
	free(j->scratch);
	if (j->not_ternary) {
		bn_model_disown(ld->m, j->codes);
		bn_model_disown(ld->m, j->nb ? j->bscale : j->scale);
		return 1;
	}
	if (j->bad_row != UINT32_MAX)
		return bn_ld_fail(ld, "tensor '%.*s' row %u cannot be decoded", (int)t->name.len,
				  t->name.ptr, j->bad_row);
	if (j->nb && settle_groups(ld, j))
		return bn_ld_oom(ld, t);
	if (scales_finite(ld, t, j))
		return -1;
	bn_ld_drop_pages(t);
	return 0;
}

static void t2_adopt(struct loader *ld, struct bn_linear *l, const struct ternary_job *j)
{
	uint64_t scales = j->group ? (uint64_t)l->n_out * (l->n_in / j->group) : l->n_out;
	l->kind = BN_LINEAR_T2;
	l->t2 = (struct bn_t2_matrix){ .codes = j->codes, .scale = j->scale, .gscale = j->gscale,
				       .group = j->group, .n_in = l->n_in, .n_out = l->n_out,
				       .row_bytes = (uint32_t)j->row_bytes };
	ld->m->repacked_bytes += j->row_bytes * l->n_out + scales * sizeof(float);
	ld->m->n_grouped += j->group != 0;
}

int bn_ld_repack_ternary(struct loader *ld, const struct bn_gguf_tensor *t, struct bn_linear *l)
{
	struct ternary_job j = { .t = t, .l = l, .row_bytes = bn_t2_row_bytes(l->n_in),
				 .bad_row = UINT32_MAX };
	int rc = ld->cache ? t2_from_cache(ld, t, &j) : t2_build(ld, t, &j);
	if (rc)
		return -1;
	t2_adopt(ld, l, &j);
	return 0;
}

/* A float layer matrix of a BitLinear graph, packed to T2 when every row is ternary (per row,
 * or per 128-weight block), so that BitLinear runs on the ternary kernels (lossless: each
 * weight is code * s as stored). The cache records the decision in a word of its own, so a
 * start from it reads no weight. */
int bn_ld_pack_from_float(struct loader *ld, const struct bn_gguf_tensor *t, struct bn_linear *l)
{
	struct ternary_job j = { .t = t, .l = l, .row_bytes = bn_t2_row_bytes(l->n_in),
				 .bad_row = UINT32_MAX, .from_float = 1 };
	l->ternary_candidate = 1;
	ld->m->n_candidates++;
	int rc;
	if (ld->cache) {
		const uint32_t *flag = bn_wcache_take(ld->cache, BN_WCACHE_FROM_FLOAT,
						      sizeof(bn_ld_packed_flag[0]));
		if (!flag || *flag > 1)
			return bn_ld_cache_mismatch(ld, t);
		if (!*flag)
			return 0;
		rc = t2_from_cache(ld, t, &j);
	} else {
		rc = t2_build(ld, t, &j);
	}
	if (rc)
		return rc < 0 ? -1 : 0;
	t2_adopt(ld, l, &j);
	ld->m->n_from_float++;
	return 1;
}

uint32_t bn_ld_t2_blobs(const struct bn_linear *l, struct bn_wcache_blob *out)
{
	const struct bn_t2_matrix *w = &l->t2;
	if (out) {
		out[0] = (struct bn_wcache_blob){ BN_WCACHE_T2_CODES, w->codes,
						  (uint64_t)w->row_bytes * l->n_out };
		out[1] = (struct bn_wcache_blob){ BN_WCACHE_T2_GROUP, &w->group, sizeof(w->group) };
		out[2] = w->group ? (struct bn_wcache_blob){ BN_WCACHE_T2_GSCALE, w->gscale,
							     (uint64_t)l->n_out * (l->n_in / w->group) *
								     sizeof(float) }
				  : (struct bn_wcache_blob){ BN_WCACHE_T2_SCALE, w->scale,
							     (uint64_t)l->n_out * sizeof(float) };
	}
	return 3;
}

/* ---- the T3 decode copy ------------------------------------------------------------------ */

/* The matrices with a T3 copy: ternary ones with one scale a row (T3 chunks of 320 weights
 * cross the 128-weight groups, and t2g_gemm has no T3 twin). */
static int has_t3(const struct bn_linear *l)
{
	return l->kind == BN_LINEAR_T2 && !l->t2.gscale;
}


#define T3_TASK_ROWS 256 /* rows one task repacks */

struct t3_job {
	struct bn_linear *l;
	uint8_t *codes;         /* [pool threads][n_in]: one row's codes */
};

static void t3_task(void *ctx, uint32_t task)
{
	const struct t3_job *j = ctx;
	const struct bn_t2_matrix *t2 = &j->l->t2;
	struct bn_t3_matrix *t3 = &j->l->t3;
	uint8_t *codes = j->codes + (size_t)bn_pool_thread_index() * t2->n_in;
	uint32_t r1 = (task + 1) * T3_TASK_ROWS < t2->n_out ? (task + 1) * T3_TASK_ROWS : t2->n_out;
	for (uint32_t r = task * T3_TASK_ROWS; r < r1; r++) {
		bn_t2_unpack(t2->codes + (size_t)r * t2->row_bytes, t2->n_in, codes);
		bn_t3_pack(codes, t2->n_in, (uint8_t *)t3->codes + (size_t)r * t3->row_bytes);
	}
}

static int add_t3(struct bn_model *m, struct bn_linear *l, uint8_t *codes, struct bn_pool *pool)
{
	uint32_t row_bytes = (uint32_t)bn_t3_row_bytes(l->n_in);
	uint8_t *buf = bn_model_own(m, (size_t)row_bytes * l->n_out);
	if (!buf)
		return -ENOMEM;
	l->t3 = (struct bn_t3_matrix){ .codes = buf, .scale = l->t2.scale, .n_in = l->n_in,
				       .n_out = l->n_out, .row_bytes = row_bytes };
	struct t3_job j = { .l = l, .codes = codes };
	bn_pool_run(pool, (l->n_out + T3_TASK_ROWS - 1) / T3_TASK_ROWS, t3_task, &j);
	m->t3_bytes += (uint64_t)row_bytes * l->n_out;
	return 0;
}

int bn_model_add_t3(struct bn_model *m, struct bn_pool *pool)
{
	const struct bn_model_config *c = &m->cfg;
	uint32_t widest = c->n_embd > c->n_ff ? c->n_embd : c->n_ff; /* the longest row */
	widest = widest > c->n_head * c->head_dim ? widest : c->n_head * c->head_dim;
	uint8_t *codes = malloc((size_t)bn_pool_threads(pool) * widest);
	int rc = codes ? 0 : -ENOMEM;
	for (uint32_t li = 0; rc == 0 && li < m->cfg.n_layer; li++) {
		const struct bn_linear *all[BN_LAYER_LINEARS];
		bn_layer_linears(&m->layers[li], all);
		for (uint32_t i = 0; rc == 0 && i < BN_LAYER_LINEARS; i++)
			if (has_t3(all[i]))
				rc = add_t3(m, (struct bn_linear *)all[i], codes, pool);
	}
	free(codes);
	for (uint32_t li = 0; rc != 0 && li < m->cfg.n_layer; li++) {
		const struct bn_linear *all[BN_LAYER_LINEARS];
		bn_layer_linears(&m->layers[li], all);
		for (uint32_t i = 0; i < BN_LAYER_LINEARS; i++)
			((struct bn_linear *)all[i])->t3.codes = NULL; /* all or none */
	}
	return rc;
}


uint32_t bn_model_t3_blobs(const struct bn_model *m, struct bn_wcache_blob *out)
{
	uint32_t n = 0;
	for (uint32_t li = 0; li < m->cfg.n_layer; li++) {
		const struct bn_linear *all[BN_LAYER_LINEARS];
		bn_layer_linears(&m->layers[li], all);
		for (uint32_t i = 0; i < BN_LAYER_LINEARS; i++) {
			const struct bn_t3_matrix *t3 = &all[i]->t3;
			if (!t3->codes)
				continue;
			if (out)
				out[n] = (struct bn_wcache_blob){ BN_WCACHE_T3_CODES, t3->codes,
								  (uint64_t)t3->row_bytes * t3->n_out };
			n++;
		}
	}
	return n;
}

int bn_model_t3_from_cache(struct bn_model *m, struct bn_wcache *c)
{
	for (uint32_t li = 0; li < m->cfg.n_layer; li++) {
		const struct bn_linear *all[BN_LAYER_LINEARS];
		bn_layer_linears(&m->layers[li], all);
		for (uint32_t i = 0; i < BN_LAYER_LINEARS; i++) {
			struct bn_linear *l = (struct bn_linear *)all[i];
			if (!has_t3(l))
				continue;
			uint32_t row_bytes = (uint32_t)bn_t3_row_bytes(l->n_in);
			const void *codes = bn_wcache_take(c, BN_WCACHE_T3_CODES,
							   (uint64_t)row_bytes * l->n_out);
			if (!codes)
				return -EINVAL;
			l->t3 = (struct bn_t3_matrix){ .codes = codes, .scale = l->t2.scale,
						       .n_in = l->n_in, .n_out = l->n_out,
						       .row_bytes = row_bytes };
			m->t3_bytes += (uint64_t)row_bytes * l->n_out;
		}
	}
	return 0;
}
