/* SPDX-License-Identifier: MIT */
/* model.c — GGUF → struct bn_model: configuration, checks, weight repacking. */
#include "model.h"
#include "common/bigmem.h"
#include "pool.h"
#include "quant.h"
#include "wcache.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct loader {
	struct bn_model *m;
	char *err;
	const char *path;
	enum bn_float_layout float_layout;
	struct bn_pool *pool;     /* repacks on its threads; NULL: on the caller's */
	struct bn_wcache *cache;  /* the repacked layouts come from it; NULL: repack */
	int head_in_place;        /* a float LM head keeps the file's rows (no panels) */
};

#define REPACK_TASK_ROWS 64   /* ternary rows one repack task decodes and packs */
#define PANEL_TASK_GROUPS 16  /* panel groups one packing task fills */

/* Tasks on the pool, or one after the other on this thread without one. */
static void run_tasks(struct bn_pool *pool, uint32_t n, bn_pool_fn fn, void *ctx)
{
	if (pool) {
		bn_pool_run(pool, n, fn, ctx);
		return;
	}
	for (uint32_t t = 0; t < n; t++)
		fn(ctx, t);
}

static uint32_t run_threads(const struct bn_pool *pool)
{
	return pool ? bn_pool_threads(pool) : 1;
}

static int fail(struct loader *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct loader *ld, const char *fmt, ...)
{
	int n = snprintf(ld->err, BN_MODEL_ERR_LEN, "%s: ", ld->path);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ld->err + n, BN_MODEL_ERR_LEN - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

/* A 64-byte aligned buffer the model frees with itself; a large one in huge pages
 * (bigmem.h): the repacked weights are the bytes a start that repacks writes. */
static void *model_own(struct bn_model *m, size_t size)
{
	if (m->n_owned == m->cap_owned) {
		uint32_t cap = m->cap_owned ? 2 * m->cap_owned : 64;
		struct bn_owned_buf *p = realloc(m->owned, cap * sizeof(*p));
		if (!p)
			return NULL;
		m->owned = p;
		m->cap_owned = cap;
	}
	void *buf = bn_big_alloc(size);
	if (buf)
		m->owned[m->n_owned++] = (struct bn_owned_buf){ buf, size };
	return buf;
}

static void *own(struct loader *ld, size_t size)
{
	return model_own(ld->m, size);
}

/* Frees one buffer of model_own's before the model goes. */
static void model_disown(struct bn_model *m, void *buf)
{
	for (uint32_t i = 0; i < m->n_owned; i++)
		if (m->owned[i].p == buf) {
			bn_big_free(buf, m->owned[i].size);
			m->owned[i] = m->owned[--m->n_owned];
			return;
		}
}

/* ------------------------------------------------------------------------------------------ */
/* Tensors                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* The tensor `name` with shape [ne0] (n_dims 1) or [ne0, ne1]; trailing dims of 1 are fine. */
static int find_shaped(struct loader *ld, const char *name, uint32_t n_dims, uint64_t ne0,
		       uint64_t ne1, const struct bn_gguf_tensor **out)
{
	const struct bn_gguf_tensor *t = bn_gguf_find_tensor(&ld->m->file, name);
	if (!t)
		return fail(ld, "tensor '%s' is missing", name);
	uint64_t want1 = n_dims == 2 ? ne1 : 1;
	uint64_t got1 = t->n_dims >= 2 ? t->ne[1] : 1;
	int extra = (t->n_dims >= 3 && t->ne[2] != 1) || (t->n_dims == 4 && t->ne[3] != 1);
	if (t->ne[0] != ne0 || got1 != want1 || extra)
		return fail(ld, "tensor '%s' has shape [%llu, %llu], the metadata says [%llu, %llu]",
			    name, (unsigned long long)t->ne[0], (unsigned long long)got1,
			    (unsigned long long)ne0, (unsigned long long)want1);
	*out = t;
	return 0;
}

/* A norm weight as floats, copied out of the file: a step that read it in place would map
 * the file pages around it again (see drop_unused_pages). */
static int load_vector(struct loader *ld, const char *name, uint64_t n, const float **out)
{
	const struct bn_gguf_tensor *t;
	if (find_shaped(ld, name, 1, n, 1, &t))
		return -1;
	if (t->type != BN_TYPE_F32 && t->type != BN_TYPE_F16 && t->type != BN_TYPE_BF16)
		return fail(ld, "tensor '%s' has type %s; norm weights must be F32, F16 or BF16", name,
			    bn_type_name(t->type));
	float *v = own(ld, n * sizeof(float));
	if (!v)
		return fail(ld, "out of memory");
	bn_dequant_row(t->type, t->data, t->size, 0, n, v);
	*out = v;
	return 0;
}

/* rope_freqs.weight, where the file has one (llama.cpp's per-pair divisors of the angle, made
 * by converters for LLaMA-3.1-style RoPE scaling): [rope_dim / 2] positive finite values. */
static int load_rope_factors(struct loader *ld)
{
	struct bn_model_config *c = &ld->m->cfg;
	if (!bn_gguf_find_tensor(&ld->m->file, "rope_freqs.weight"))
		return 0;
	const float *f;
	if (load_vector(ld, "rope_freqs.weight", c->rope_dim / 2, &f))
		return -1;
	for (uint32_t p = 0; p < c->rope_dim / 2; p++)
		if (!(f[p] > 0.0f) || !isfinite(f[p]))
			return fail(ld, "tensor 'rope_freqs.weight' value %u is %g; it must be positive "
					"and finite", p, (double)f[p]);
	c->rope_factors = f;
	return 0;
}

static int tensor_before(const void *a, const void *b)
{
	const uint8_t *x = (*(const struct bn_gguf_tensor *const *)a)->data;
	const uint8_t *y = (*(const struct bn_gguf_tensor *const *)b)->data;
	return x < y ? -1 : x > y;
}

static void add_in_place(const struct bn_linear *l, const struct bn_gguf_tensor **list,
			 uint32_t *n)
{
	if ((l->kind == BN_LINEAR_FLOAT && !l->f.panel_rows) || l->kind == BN_LINEAR_DECODE)
		list[(*n)++] = l->src;
}

static void drop_range(uintptr_t start, uintptr_t end)
{
	if (end > start)
		madvise((void *)start, end - start, MADV_DONTNEED);
}

/* Once the model is loaded, every file page that no step reads goes back to the kernel: all but
 * the tensors used in place (Q8_0 / Q6_K matrices, float ones not in panels; the embedding's
 * rows are read with pread, bn_model_embed). drop_pages did
 * this for each repacked tensor as it went, but a later fault nearby can map those pages again:
 * the page cache holds folios of up to 2 MB and maps them whole, which left 60-90 MB of
 * dropped ternary data resident (2B4T: rss_over_file 0.99 in one run, 1.08 in another). The
 * mapping is private and read-only, so anything that does read a dropped page later (metadata
 * looked up after loading) reads it back from the page cache; nothing is lost. */
static int drop_unused_pages(struct loader *ld)
{
	struct bn_model *m = ld->m;
	if (!m->file.mapped)
		return 0;
	uint32_t cap = 2 + 7 * m->cfg.n_layer, n = 0;
	const struct bn_gguf_tensor **in_place = malloc(cap * sizeof(*in_place));
	if (!in_place)
		return fail(ld, "out of memory");
	add_in_place(&m->output, in_place, &n); /* the embedding is read, not mapped */
	for (uint32_t i = 0; i < m->cfg.n_layer; i++) {
		const struct bn_linear *lin[BN_LAYER_LINEARS];
		bn_layer_linears(&m->layers[i], lin);
		for (size_t j = 0; j < BN_LAYER_LINEARS; j++)
			add_in_place(lin[j], in_place, &n);
	}
	qsort(in_place, n, sizeof(*in_place), tensor_before);
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t from = (uintptr_t)m->file.base; /* the mapping starts on a page */
	for (uint32_t i = 0; i < n; i++) {
		uintptr_t start = (uintptr_t)in_place[i]->data, end = start + in_place[i]->size;
		drop_range(from, start & ~(page - 1));
		end = (end + page - 1) & ~(page - 1);
		from = end > from ? end : from;
	}
	drop_range(from, ((uintptr_t)m->file.base + m->file.size) & ~(page - 1));
	free(in_place);
	return 0;
}

/* Hands the file pages of a repacked tensor back to the kernel: only the repacked copy stays
 * resident, which keeps the model within 1.1 x its file size. */
static void drop_pages(const struct bn_gguf_tensor *t)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	drop_range(((uintptr_t)t->data + page - 1) & ~(page - 1),
		   ((uintptr_t)t->data + t->size) & ~(page - 1));
}

/* Rows are decoded and packed by tasks; the lowest row that does not decode is reported, as
 * a row-by-row loop would. From a float tensor (from_float) the first row found not ternary
 * stops every task: the tensor stays float. */
struct ternary_job {
	const struct bn_gguf_tensor *t;
	const struct bn_linear *l;
	uint8_t *codes;           /* [n_out][row_bytes] */
	float *scale;             /* [n_out] */
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

/* One row's codes and scale into row_codes: 0, or the decoder's failure. */
static int row_codes_of(struct ternary_job *j, uint32_t r, uint8_t *row_codes)
{
	const struct bn_gguf_tensor *t = j->t;
	if (!j->from_float)
		return bn_ternary_row(t->type, t->data, t->size, r, j->l->n_in, row_codes,
				      &j->scale[r]);
	int rc = bn_ternary_from_float_row(t->type, t->data, t->size, r, j->l->n_in, row_codes,
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
		int rc = j->from_float ? 1
				       : bn_ternary_row_t2(j->t->type, j->t->data, j->t->size, r,
							   l->n_in, out, &j->scale[r]);
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

static int oom(struct loader *ld, const struct bn_gguf_tensor *t)
{
	return fail(ld, "out of memory repacking '%.*s'", (int)t->name.len, t->name.ptr);
}

static int cache_mismatch(struct loader *ld, const struct bn_gguf_tensor *t)
{
	return fail(ld, "the weights cache does not hold '%.*s' as this file has it",
		    (int)t->name.len, t->name.ptr);
}

/* The T2 codes and scales of a matrix the cache holds. */
static int t2_from_cache(struct loader *ld, const struct bn_gguf_tensor *t, struct ternary_job *j)
{
	const struct bn_linear *l = j->l;
	j->codes = (uint8_t *)bn_wcache_take(ld->cache, BN_WCACHE_T2_CODES, j->row_bytes * l->n_out);
	j->scale = j->codes ? (float *)bn_wcache_take(ld->cache, BN_WCACHE_T2_SCALE,
						      (uint64_t)l->n_out * sizeof(float))
			    : NULL;
	return j->scale ? 0 : cache_mismatch(ld, t);
}

/* Repacks every row on the pool. 0; 1 when a float tensor is not ternary (nothing kept); -1
 * with the reason set. */
static int t2_build(struct loader *ld, const struct bn_gguf_tensor *t, struct ternary_job *j)
{
	const struct bn_linear *l = j->l;
	j->codes = own(ld, j->row_bytes * l->n_out);
	j->scale = own(ld, (size_t)l->n_out * sizeof(float));
	j->scratch = malloc((size_t)run_threads(ld->pool) * l->n_in);
	if (!j->codes || !j->scale || !j->scratch) {
		free(j->scratch);
		return oom(ld, t);
	}
	run_tasks(ld->pool, (l->n_out + REPACK_TASK_ROWS - 1) / REPACK_TASK_ROWS, ternary_task, j);
	free(j->scratch);
	if (j->not_ternary) {
		model_disown(ld->m, j->codes);
		model_disown(ld->m, j->scale);
		return 1;
	}
	if (j->bad_row != UINT32_MAX)
		return fail(ld, j->bad_rc == -2 ? "tensor '%.*s' row %u: its blocks have different scales; bitnetd needs one scale per row"
						: "tensor '%.*s' row %u cannot be decoded",
			    (int)t->name.len, t->name.ptr, j->bad_row);
	for (uint32_t r = 0; r < l->n_out; r++)
		if (!isfinite(j->scale[r]))
			return fail(ld, "tensor '%.*s' row %u has a scale that is not finite (%g)",
				    (int)t->name.len, t->name.ptr, r, (double)j->scale[r]);
	drop_pages(t);
	return 0;
}

static void t2_adopt(struct loader *ld, struct bn_linear *l, const struct ternary_job *j)
{
	l->kind = BN_LINEAR_T2;
	l->t2 = (struct bn_t2_matrix){ .codes = j->codes, .scale = j->scale, .n_in = l->n_in,
				       .n_out = l->n_out, .row_bytes = (uint32_t)j->row_bytes };
	ld->m->repacked_bytes += j->row_bytes * l->n_out + (uint64_t)l->n_out * sizeof(float);
}

static int repack_ternary(struct loader *ld, const struct bn_gguf_tensor *t, struct bn_linear *l)
{
	struct ternary_job j = { .t = t, .l = l, .row_bytes = bn_t2_row_bytes(l->n_in),
				 .bad_row = UINT32_MAX };
	int rc = ld->cache ? t2_from_cache(ld, t, &j) : t2_build(ld, t, &j);
	if (rc)
		return -1;
	t2_adopt(ld, l, &j);
	return 0;
}

/* The cache's word before a ternary candidate's blobs: whether the loader packed it. */
static const uint32_t packed_flag[2] = { 0, 1 };

/* A float layer matrix of a bitnet* file, packed to T2 when every row is ternary, so that
 * BitLinear runs on the ternary kernels (lossless: each weight is code * s as stored). 1:
 * packed; 0: not ternary, the caller keeps it float; -1 with the reason set. The cache
 * records the decision in a word of its own, so a start from it reads no weight. */
static int pack_from_float(struct loader *ld, const struct bn_gguf_tensor *t, struct bn_linear *l)
{
	struct ternary_job j = { .t = t, .l = l, .row_bytes = bn_t2_row_bytes(l->n_in),
				 .bad_row = UINT32_MAX, .from_float = 1 };
	l->ternary_candidate = 1;
	ld->m->n_candidates++;
	int rc;
	if (ld->cache) {
		const uint32_t *flag = bn_wcache_take(ld->cache, BN_WCACHE_FROM_FLOAT,
						      sizeof(packed_flag[0]));
		if (!flag || *flag > 1)
			return cache_mismatch(ld, t);
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

/* A float matrix into the panel layout (kernels.h), groups of rows by tasks, each task's file
 * rows handed back to the kernel once packed so that the file and the copy are not both
 * resident (a tied embedding then reads the panels: bn_model_embed). A page two tasks share
 * is left to drop_unused_pages. */
struct panel_job {
	const struct bn_gguf_tensor *t;
	const struct bn_linear *l;
	uint8_t *panels;
	uint64_t row_bytes, group_bytes;
	int drop;                 /* the file is mapped: its pages may be handed back */
};

static void panel_task(void *ctx, uint32_t task)
{
	const struct panel_job *j = ctx;
	const struct bn_linear *l = j->l;
	uint32_t g0 = task * PANEL_TASK_GROUPS, n_groups = (l->n_out + BN_F_PANEL_ROWS - 1) /
							     BN_F_PANEL_ROWS;
	uint32_t g1 = g0 + PANEL_TASK_GROUPS < n_groups ? g0 + PANEL_TASK_GROUPS : n_groups;
	for (uint32_t g = g0; g < g1; g++) {
		uint32_t first = g * BN_F_PANEL_ROWS;
		uint32_t n = l->n_out - first < BN_F_PANEL_ROWS ? l->n_out - first : BN_F_PANEL_ROWS;
		bn_f_pack_panel(j->t->type, (const uint8_t *)j->t->data + first * j->row_bytes,
				j->row_bytes, l->n_in, n, j->panels + g * j->group_bytes);
	}
	if (!j->drop)
		return;
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)j->t->data + (uint64_t)g0 * BN_F_PANEL_ROWS * j->row_bytes;
	uint32_t last = g1 * BN_F_PANEL_ROWS < l->n_out ? g1 * BN_F_PANEL_ROWS : l->n_out;
	uintptr_t hi = (uintptr_t)j->t->data + (uint64_t)last * j->row_bytes;
	drop_range((lo + page - 1) & ~(page - 1), hi & ~(page - 1));
}

static int pack_float_panels(struct loader *ld, const struct bn_gguf_tensor *t,
			     struct bn_linear *l)
{
	uint64_t bytes = bn_f_panel_bytes(t->type, l->n_in, l->n_out);
	uint32_t n_groups = (l->n_out + BN_F_PANEL_ROWS - 1) / BN_F_PANEL_ROWS;
	struct panel_job j = { .t = t, .l = l, .row_bytes = bn_row_bytes(t->type, l->n_in),
			       .group_bytes = bytes / n_groups, .drop = ld->m->file.mapped };
	if (ld->cache) {
		j.panels = (uint8_t *)bn_wcache_take(ld->cache, BN_WCACHE_F_PANELS, bytes);
		if (!j.panels)
			return cache_mismatch(ld, t);
	} else {
		j.panels = own(ld, bytes);
		if (!j.panels)
			return oom(ld, t);
		run_tasks(ld->pool, (n_groups + PANEL_TASK_GROUPS - 1) / PANEL_TASK_GROUPS,
			  panel_task, &j);
	}
	l->f = (struct bn_f_matrix){ .data = j.panels, .type = t->type, .n_in = l->n_in,
				     .n_out = l->n_out, .row_bytes = j.row_bytes,
				     .panel_rows = BN_F_PANEL_ROWS };
	ld->m->repacked_bytes += bytes;
	return 0;
}

/* `decodable`: Q8_0 and Q6_K are accepted (embedding / LM head only). */
static int load_linear(struct loader *ld, const char *name, uint32_t n_in, uint32_t n_out,
		       int decodable, struct bn_linear *l)
{
	const struct bn_gguf_tensor *t;
	if (find_shaped(ld, name, 2, n_in, n_out, &t))
		return -1;
	memset(l, 0, sizeof(*l));
	l->n_in = n_in;
	l->n_out = n_out;
	l->src = t;
	if (bn_type_is_ternary(t->type))
		return repack_ternary(ld, t, l);
	if (t->type == BN_TYPE_F32 || t->type == BN_TYPE_F16 || t->type == BN_TYPE_BF16) {
		int rc = !decodable && ld->m->cfg.arch != BN_ARCH_LLAMA ? pack_from_float(ld, t, l) : 0;
		if (rc)
			return rc < 0 ? -1 : 0;
		l->kind = BN_LINEAR_FLOAT;
		if (ld->float_layout == BN_FLOAT_PANELS && !(decodable && ld->head_in_place))
			return pack_float_panels(ld, t, l);
		l->f = (struct bn_f_matrix){ .data = t->data, .type = t->type, .n_in = n_in,
					     .n_out = n_out, .row_bytes = bn_row_bytes(t->type, n_in) };
		return 0;
	}
	if (decodable && (t->type == BN_TYPE_Q8_0 || t->type == BN_TYPE_Q6_K)) {
		l->kind = BN_LINEAR_DECODE;
		return 0;
	}
	return fail(ld, "tensor '%s' has type %s, which bitnetd does not accept there", name,
		    bn_type_name(t->type) ? bn_type_name(t->type) : "?");
}

static int load_layer(struct loader *ld, uint32_t i, struct bn_layer *L)
{
	const struct bn_model_config *c = &ld->m->cfg;
	uint32_t q_dim = c->n_head * c->head_dim, kv_dim = c->n_head_kv * c->head_dim;
	char name[96];
#define TENSOR(suffix) (snprintf(name, sizeof(name), "blk.%u.%s", i, suffix), name)
	if (load_vector(ld, TENSOR("attn_norm.weight"), c->n_embd, &L->attn_norm) ||
	    load_vector(ld, TENSOR("ffn_norm.weight"), c->n_embd, &L->ffn_norm) ||
	    load_linear(ld, TENSOR("attn_q.weight"), c->n_embd, q_dim, 0, &L->wq) ||
	    load_linear(ld, TENSOR("attn_k.weight"), c->n_embd, kv_dim, 0, &L->wk) ||
	    load_linear(ld, TENSOR("attn_v.weight"), c->n_embd, kv_dim, 0, &L->wv) ||
	    load_linear(ld, TENSOR("attn_output.weight"), q_dim, c->n_embd, 0, &L->wo) ||
	    load_linear(ld, TENSOR("ffn_gate.weight"), c->n_embd, c->n_ff, 0, &L->w_gate) ||
	    load_linear(ld, TENSOR("ffn_up.weight"), c->n_embd, c->n_ff, 0, &L->w_up) ||
	    load_linear(ld, TENSOR("ffn_down.weight"), c->n_ff, c->n_embd, 0, &L->w_down))
		return -1;
	if (c->sub_norms &&
	    (load_vector(ld, TENSOR("attn_sub_norm.weight"), q_dim, &L->attn_sub_norm) ||
	     load_vector(ld, TENSOR("ffn_sub_norm.weight"), c->n_ff, &L->ffn_sub_norm)))
		return -1;
#undef TENSOR
	return 0;
}

static int load_embedding(struct loader *ld)
{
	struct bn_model *m = ld->m;
	struct bn_model_config *c = &m->cfg;
	const struct bn_gguf_tensor *t = bn_gguf_find_tensor(&m->file, "token_embd.weight");
	if (!t)
		return fail(ld, "tensor 'token_embd.weight' is missing");
	uint64_t rows = t->n_dims >= 2 ? t->ne[1] : 1;
	int extra = (t->n_dims >= 3 && t->ne[2] != 1) || (t->n_dims == 4 && t->ne[3] != 1);
	if (extra)
		return fail(ld, "tensor 'token_embd.weight' has %u dims; it must be 2-D [n_embd, vocab]",
			    t->n_dims);
	if (t->ne[0] != c->n_embd || rows > UINT32_MAX || rows < 1)
		return fail(ld, "tensor 'token_embd.weight' has shape [%llu, %llu], the metadata says [%u, vocab]",
			    (unsigned long long)t->ne[0], (unsigned long long)rows, c->n_embd);
	char key[64];
	snprintf(key, sizeof(key), "%s.vocab_size", c->arch_name);
	int rc = bn_gguf_get_u32(&m->file, key, &c->n_vocab);
	if (rc == -ENOENT)
		c->n_vocab = (uint32_t)rows;
	else if (rc != 0)
		return fail(ld, "metadata key %s is not an unsigned 32-bit integer", key);
	if (c->n_vocab != rows)
		return fail(ld, "%s.vocab_size is %u but token_embd.weight has %llu rows", c->arch_name,
			    c->n_vocab, (unsigned long long)rows);
	if (c->bos_id >= c->n_vocab || c->eos_id >= c->n_vocab)
		return fail(ld, "bos id %u or eos id %u is outside the vocabulary (%u)", c->bos_id,
			    c->eos_id, c->n_vocab);
	if (bn_type_is_ternary(t->type) || !bn_type_name(t->type))
		return fail(ld, "tensor 'token_embd.weight' has type %s; embeddings must be F32, F16, BF16, Q8_0 or Q6_K",
			    bn_type_name(t->type) ? bn_type_name(t->type) : "?");
	m->tok_embd = t;
	const char *head = bn_gguf_find_tensor(&m->file, "output.weight") ? "output.weight"
									    : "token_embd.weight";
	if (load_linear(ld, head, c->n_embd, c->n_vocab, 1, &m->output))
		return -1;
	m->embed_from_output = m->output.src == t && m->output.kind == BN_LINEAR_FLOAT &&
			       m->output.f.panel_rows;
	return 0;
}

int bn_model_load(struct bn_model *m, const char *path, char err[BN_MODEL_ERR_LEN])
{
	return bn_model_load_as(m, path, BN_FLOAT_PANELS, err);
}

int bn_model_load_as(struct bn_model *m, const char *path, enum bn_float_layout layout,
		     char err[BN_MODEL_ERR_LEN])
{
	const struct bn_model_source src = { .float_layout = layout };
	int rc = bn_model_open(m, path, err);
	return rc == 0 ? bn_model_fill(m, &src, err) : rc;
}

int bn_model_open(struct bn_model *m, const char *path, char err[BN_MODEL_ERR_LEN])
{
	memset(m, 0, sizeof(*m));
	char gerr[BN_GGUF_ERR_LEN];
	if (bn_gguf_open(&m->file, path, gerr) != 0) {
		snprintf(err, BN_MODEL_ERR_LEN, "%s", gerr);
		return -1;
	}
	return 0;
}

int bn_model_fill(struct bn_model *m, const struct bn_model_source *src,
		  char err[BN_MODEL_ERR_LEN])
{
	struct loader ld = { .m = m, .err = err, .path = m->file.path,
			     .float_layout = src->float_layout, .pool = src->pool,
			     .cache = src->cache, .head_in_place = src->head_in_place };
	if (bn_model_read_config(&m->file, &src->activation, &m->cfg, err) ||
	    bn_model_check_i2_s(&m->file, &m->cfg, err) || load_embedding(&ld) ||
	    load_vector(&ld, "output_norm.weight", m->cfg.n_embd, &m->output_norm) ||
	    load_rope_factors(&ld))
		goto fail;
	m->layers = calloc(m->cfg.n_layer, sizeof(*m->layers));
	if (!m->layers) {
		fail(&ld, "out of memory");
		goto fail;
	}
	for (uint32_t i = 0; i < m->cfg.n_layer; i++)
		if (load_layer(&ld, i, &m->layers[i]))
			goto fail;
	if (drop_unused_pages(&ld))
		goto fail;
	return 0;
fail:
	bn_model_free(m);
	return -1;
}

/* ---- the weights cache ------------------------------------------------------------------- */

/* One matrix's blobs, as fill takes them: a ternary candidate's word saying whether it was
 * packed, then T2 codes and scales, or float panels. */
static uint32_t linear_blobs(const struct bn_linear *l, struct bn_wcache_blob *out)
{
	if (l->ternary_candidate) {
		if (out)
			out[0] = (struct bn_wcache_blob){ BN_WCACHE_FROM_FLOAT,
							  &packed_flag[l->kind == BN_LINEAR_T2],
							  sizeof(packed_flag[0]) };
		struct bn_linear rest = *l;
		rest.ternary_candidate = 0;
		return 1 + linear_blobs(&rest, out ? out + 1 : NULL);
	}
	if (l->kind == BN_LINEAR_T2) {
		if (out) {
			out[0] = (struct bn_wcache_blob){ BN_WCACHE_T2_CODES, l->t2.codes,
							  (uint64_t)l->t2.row_bytes * l->n_out };
			out[1] = (struct bn_wcache_blob){ BN_WCACHE_T2_SCALE, l->t2.scale,
							  (uint64_t)l->n_out * sizeof(float) };
		}
		return 2;
	}
	if (l->kind == BN_LINEAR_FLOAT && l->f.panel_rows) {
		if (out)
			out[0] = (struct bn_wcache_blob){ BN_WCACHE_F_PANELS, l->f.data,
							  bn_f_panel_bytes(l->f.type, l->n_in,
									   l->n_out) };
		return 1;
	}
	return 0;
}

uint32_t bn_model_cache_blobs(const struct bn_model *m, struct bn_wcache_blob *out)
{
	uint32_t n = linear_blobs(&m->output, out);
	for (uint32_t li = 0; li < m->cfg.n_layer; li++) {
		const struct bn_linear *all[BN_LAYER_LINEARS];
		bn_layer_linears(&m->layers[li], all);
		for (uint32_t i = 0; i < BN_LAYER_LINEARS; i++)
			n += linear_blobs(all[i], out ? out + n : NULL);
	}
	return n;
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
			if (l->kind != BN_LINEAR_T2)
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

void bn_model_free(struct bn_model *m)
{
	for (uint32_t i = 0; i < m->n_owned; i++)
		bn_big_free(m->owned[i].p, m->owned[i].size);
	free(m->owned);
	free(m->layers);
	bn_gguf_close(&m->file);
	memset(m, 0, sizeof(*m));
}

/* ---- the T3 decode copy ------------------------------------------------------------------ */

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
	uint8_t *buf = model_own(m, (size_t)row_bytes * l->n_out);
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
			if (all[i]->kind == BN_LINEAR_T2)
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

uint64_t bn_model_release_head_panels(struct bn_model *m)
{
	struct bn_linear *head = &m->output;
	if (head->kind != BN_LINEAR_FLOAT || !head->f.panel_rows)
		return 0;
	uint64_t bytes = bn_f_panel_bytes(head->f.type, head->n_in, head->n_out);
	model_disown(m, (void *)head->f.data);
	head->f = (struct bn_f_matrix){ .data = head->src->data, .type = head->src->type,
					.n_in = head->n_in, .n_out = head->n_out,
					.row_bytes = bn_row_bytes(head->src->type, head->n_in) };
	m->embed_from_output = 0;
	m->repacked_bytes -= bytes;
	return bytes;
}

int bn_model_is_ternary(const struct bn_model *m)
{
	for (uint32_t li = 0; li < m->cfg.n_layer; li++) {
		const struct bn_linear *all[BN_LAYER_LINEARS];
		bn_layer_linears(&m->layers[li], all);
		for (uint32_t i = 0; i < BN_LAYER_LINEARS; i++)
			if (all[i]->kind == BN_LINEAR_T2)
				return 1;
	}
	return 0;
}

void bn_layer_linears(const struct bn_layer *L, const struct bn_linear *out[BN_LAYER_LINEARS])
{
	const struct bn_linear *all[BN_LAYER_LINEARS] = { &L->wq, &L->wk, &L->wv, &L->wo,
							  &L->w_gate, &L->w_up, &L->w_down };
	memcpy(out, all, sizeof(all));
}

/* Embedding rows up to this size are read into the stack; longer ones into the heap. */
#define EMBED_STACK_ROW 16384

void bn_model_embed(const struct bn_model *m, uint32_t token, float *out)
{
	if (m->embed_from_output) {
		bn_f_row(&m->output.f, token, out);
		return;
	}
	/* Read, not mapped: the rows a long run touches would otherwise stay resident, up to
	 * the whole table (656 MB for BitNet 2B4T). The same bytes, so the same floats. */
	const struct bn_gguf_tensor *t = m->tok_embd;
	uint64_t row_bytes = bn_row_bytes(t->type, m->cfg.n_embd);
	uint8_t stack_row[EMBED_STACK_ROW];
	uint8_t *heap_row = row_bytes > sizeof(stack_row) ? malloc(row_bytes) : NULL;
	uint8_t *row = heap_row ? heap_row : stack_row;
	if (row_bytes > sizeof(stack_row) && !heap_row) { /* no memory: from the mapping */
		bn_dequant_row(t->type, t->data, t->size, token, m->cfg.n_embd, out);
		return;
	}
	bn_gguf_read(&m->file, (const uint8_t *)t->data + (uint64_t)token * row_bytes, row_bytes,
		     row);
	bn_dequant_row(t->type, row, row_bytes, 0, m->cfg.n_embd, out);
	free(heap_row);
}
