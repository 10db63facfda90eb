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

#define DEFAULT_RMS_EPS 1e-5f
#define DEFAULT_ROPE_BASE 10000.0f
#define DEFAULT_CONTEXT 2048u
#define DEFAULT_BOS 1u
#define DEFAULT_EOS 2u

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
/* Configuration                                                                               */
/* ------------------------------------------------------------------------------------------ */

static const struct {
	const char *name;
	enum bn_arch arch;
} arch_table[] = {
	{ "llama", BN_ARCH_LLAMA },
	{ "bitnet", BN_ARCH_BITNET },
	{ "bitnet-b1.58", BN_ARCH_BITNET_B158 },
	{ "bitnet-25", BN_ARCH_BITNET_25 },
};

static int parse_arch(struct loader *ld, struct bn_model_config *c)
{
	struct bn_gguf_str s;
	if (bn_gguf_get_str(&ld->m->file, "general.architecture", &s) != 0)
		return fail(ld, "no general.architecture string in the metadata");
	for (size_t i = 0; i < sizeof(arch_table) / sizeof(arch_table[0]); i++)
		if (bn_gguf_str_eq(s, arch_table[i].name)) {
			c->arch = arch_table[i].arch;
			snprintf(c->arch_name, sizeof(c->arch_name), "%s", arch_table[i].name);
			return 0;
		}
	return fail(ld, "architecture '%.*s' is not supported (llama, bitnet, bitnet-b1.58, bitnet-25)",
		    (int)(s.len > 64 ? 64 : s.len), s.ptr);
}

/* "<arch>.<suffix>" */
static const char *arch_key(const struct bn_model_config *c, const char *suffix, char *buf,
			    size_t cap)
{
	snprintf(buf, cap, "%s.%s", c->arch_name, suffix);
	return buf;
}

static int get_u32(struct loader *ld, const char *suffix, uint32_t *out, int required,
		   uint32_t def)
{
	char key[128];
	arch_key(&ld->m->cfg, suffix, key, sizeof(key));
	int rc = bn_gguf_get_u32(&ld->m->file, key, out);
	if (rc == -ENOENT && !required) {
		*out = def;
		return 0;
	}
	if (rc == -ENOENT)
		return fail(ld, "metadata key %s is missing", key);
	if (rc != 0)
		return fail(ld, "metadata key %s is not an unsigned 32-bit integer", key);
	return 0;
}

static int get_f32(struct loader *ld, const char *suffix, float *out, float def)
{
	char key[128];
	arch_key(&ld->m->cfg, suffix, key, sizeof(key));
	int rc = bn_gguf_get_f32(&ld->m->file, key, out);
	if (rc == -ENOENT) {
		*out = def;
		return 0;
	}
	if (rc != 0 || !isfinite(*out))
		return fail(ld, "metadata key %s is not a finite float", key);
	return 0;
}

static int parse_activation(struct loader *ld, struct bn_model_config *c)
{
	c->act = c->arch == BN_ARCH_BITNET_B158 || c->arch == BN_ARCH_BITNET_25 ? BN_ACT_RELU2
										 : BN_ACT_SILU;
	if (c->arch != BN_ARCH_BITNET)
		return 0;
	struct bn_gguf_str s;
	int rc = bn_gguf_get_str(&ld->m->file, "bitnet.hidden_activation", &s);
	if (rc == -ENOENT)
		return 0;
	if (rc == 0 && (bn_gguf_str_eq(s, "relu2") || bn_gguf_str_eq(s, "relu_squared")))
		c->act = BN_ACT_RELU2;
	else if (rc != 0 || !bn_gguf_str_eq(s, "silu"))
		return fail(ld, "bitnet.hidden_activation must be \"silu\" or \"relu2\"");
	return 0;
}

static int parse_tokens(struct loader *ld, struct bn_model_config *c)
{
	const struct bn_gguf *g = &ld->m->file;
	int rc = bn_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &c->bos_id);
	if (rc == -ENOENT)
		c->bos_id = DEFAULT_BOS;
	else if (rc != 0)
		return fail(ld, "tokenizer.ggml.bos_token_id is not an unsigned integer");
	rc = bn_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &c->eos_id);
	if (rc == -ENOENT)
		c->eos_id = DEFAULT_EOS;
	else if (rc != 0)
		return fail(ld, "tokenizer.ggml.eos_token_id is not an unsigned integer");
	return 0;
}

static int check_config(struct loader *ld, const struct bn_model_config *c)
{
	if (!c->n_embd || !c->n_layer || !c->n_head || !c->n_ff || !c->n_ctx)
		return fail(ld, "a hyper-parameter is zero (embedding %u, layers %u, heads %u, ffn %u, context %u)",
			    c->n_embd, c->n_layer, c->n_head, c->n_ff, c->n_ctx);
	if (c->n_embd % c->n_head)
		return fail(ld, "embedding length %u is not a multiple of the head count %u", c->n_embd,
			    c->n_head);
	if (!c->n_head_kv || c->n_head % c->n_head_kv)
		return fail(ld, "head count %u is not a multiple of the KV head count %u", c->n_head,
			    c->n_head_kv);
	if (c->rope_dim == 0 || c->rope_dim > c->head_dim || c->rope_dim % 2)
		return fail(ld, "rope.dimension_count %u must be even and at most the head dim %u",
			    c->rope_dim, c->head_dim);
	if (!(c->rms_eps > 0.0f) || !(c->rope_base > 0.0f))
		return fail(ld, "rms epsilon and rope.freq_base must be positive");
	if (c->n_layer > 4096 || c->n_embd > 65536 || c->n_ff > 1u << 20 || c->n_head > 4096)
		return fail(ld, "hyper-parameters out of range (layers %u, embedding %u, ffn %u, heads %u)",
			    c->n_layer, c->n_embd, c->n_ff, c->n_head);
	return 0;
}

static void default_name(struct loader *ld, struct bn_model_config *c)
{
	struct bn_gguf_str s;
	if (bn_gguf_get_str(&ld->m->file, "general.name", &s) == 0 && s.len > 0) {
		snprintf(c->name, sizeof(c->name), "%.*s", (int)(s.len > 63 ? 63 : s.len), s.ptr);
		return;
	}
	const char *base = strrchr(ld->path, '/');
	snprintf(c->name, sizeof(c->name), "%.63s", base ? base + 1 : ld->path);
}

static int parse_config(struct loader *ld)
{
	struct bn_model_config *c = &ld->m->cfg;
	if (parse_arch(ld, c) || get_u32(ld, "embedding_length", &c->n_embd, 1, 0) ||
	    get_u32(ld, "block_count", &c->n_layer, 1, 0) ||
	    get_u32(ld, "feed_forward_length", &c->n_ff, 1, 0) ||
	    get_u32(ld, "attention.head_count", &c->n_head, 1, 0) ||
	    get_u32(ld, "attention.head_count_kv", &c->n_head_kv, 0, c->n_head) ||
	    get_u32(ld, "context_length", &c->n_ctx, 0, DEFAULT_CONTEXT) ||
	    get_f32(ld, "attention.layer_norm_rms_epsilon", &c->rms_eps, DEFAULT_RMS_EPS) ||
	    get_f32(ld, "rope.freq_base", &c->rope_base, DEFAULT_ROPE_BASE) ||
	    parse_activation(ld, c) || parse_tokens(ld, c))
		return -1;
	c->head_dim = c->n_head ? c->n_embd / c->n_head : 0;
	if (get_u32(ld, "rope.dimension_count", &c->rope_dim, 0, c->head_dim))
		return -1;
	c->rope_neox = c->arch != BN_ARCH_LLAMA;
	c->sub_norms = c->arch != BN_ARCH_LLAMA;
	default_name(ld, c);
	return check_config(ld, c);
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
 * a row-by-row loop would. */
struct ternary_job {
	const struct bn_gguf_tensor *t;
	const struct bn_linear *l;
	uint8_t *codes;           /* [n_out][row_bytes] */
	float *scale;             /* [n_out] */
	uint64_t row_bytes;
	uint8_t *scratch;         /* [threads][n_in]: one row's codes */
	uint32_t bad_row;         /* UINT32_MAX: none */
	int bad_rc;
};

static void ternary_task(void *ctx, uint32_t task)
{
	struct ternary_job *j = ctx;
	const struct bn_linear *l = j->l;
	uint8_t *row_codes = j->scratch + (size_t)bn_pool_thread_index() * l->n_in;
	uint32_t r1 = (task + 1) * REPACK_TASK_ROWS < l->n_out ? (task + 1) * REPACK_TASK_ROWS
							     : l->n_out;
	for (uint32_t r = task * REPACK_TASK_ROWS; r < r1; r++) {
		uint8_t *out = j->codes + (size_t)r * j->row_bytes;
		int rc = bn_ternary_row_t2(j->t->type, j->t->data, j->t->size, r, l->n_in, out,
					   &j->scale[r]);
		if (rc == 0)
			continue; /* moved as it lies */
		if (rc == 1)
			rc = bn_ternary_row(j->t->type, j->t->data, j->t->size, r, l->n_in,
					    row_codes, &j->scale[r]);
		if (rc != 0) {
			uint32_t seen = __atomic_load_n(&j->bad_row, __ATOMIC_RELAXED);
			while (r < seen && !__atomic_compare_exchange_n(&j->bad_row, &seen, r, 0,
									__ATOMIC_RELAXED,
									__ATOMIC_RELAXED))
				;
			if (r <= seen)
				__atomic_store_n(&j->bad_rc, rc, __ATOMIC_RELAXED);
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

static int repack_ternary(struct loader *ld, const struct bn_gguf_tensor *t, struct bn_linear *l)
{
	uint64_t row_bytes = bn_t2_row_bytes(l->n_in);
	struct ternary_job j = { .t = t, .l = l, .row_bytes = row_bytes, .bad_row = UINT32_MAX };
	if (ld->cache) {
		j.codes = (uint8_t *)bn_wcache_take(ld->cache, BN_WCACHE_T2_CODES, row_bytes * l->n_out);
		j.scale = j.codes ? (float *)bn_wcache_take(ld->cache, BN_WCACHE_T2_SCALE,
							    (uint64_t)l->n_out * sizeof(float))
				  : NULL;
		if (!j.scale)
			return cache_mismatch(ld, t);
	} else {
		j.codes = own(ld, row_bytes * l->n_out);
		j.scale = own(ld, (size_t)l->n_out * sizeof(float));
		j.scratch = malloc((size_t)run_threads(ld->pool) * l->n_in);
		if (!j.codes || !j.scale || !j.scratch) {
			free(j.scratch);
			return oom(ld, t);
		}
		run_tasks(ld->pool, (l->n_out + REPACK_TASK_ROWS - 1) / REPACK_TASK_ROWS,
			  ternary_task, &j);
		free(j.scratch);
		if (j.bad_row != UINT32_MAX)
			return fail(ld, j.bad_rc == -2 ? "tensor '%.*s' row %u: its blocks have different scales; bitnetd needs one scale per row"
						       : "tensor '%.*s' row %u cannot be decoded",
				    (int)t->name.len, t->name.ptr, j.bad_row);
		drop_pages(t);
	}
	l->kind = BN_LINEAR_T2;
	l->t2 = (struct bn_t2_matrix){ .codes = j.codes, .scale = j.scale, .n_in = l->n_in,
				       .n_out = l->n_out, .row_bytes = (uint32_t)row_bytes };
	ld->m->repacked_bytes += row_bytes * l->n_out + (uint64_t)l->n_out * sizeof(float);
	return 0;
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

/* Type 36 is I2_S only in bitnet.cpp's files; upstream llama.cpp gave it to another type. */
static int check_type_36(struct loader *ld)
{
	if (ld->m->cfg.arch != BN_ARCH_LLAMA)
		return 0;
	for (uint64_t i = 0; i < ld->m->file.n_tensors; i++) {
		const struct bn_gguf_tensor *t = &ld->m->file.tensors[i];
		if (t->type == BN_TYPE_I2_S)
			return fail(ld, "tensor '%.*s' has type 36, which is I2_S only in bitnet.cpp files (architectures bitnet*); in a llama file it is upstream llama.cpp's Q4_0_4_4, which bitnetd does not support",
				    (int)t->name.len, t->name.ptr);
	}
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
	if (get_u32(ld, "vocab_size", &c->n_vocab, 0, (uint32_t)rows))
		return -1;
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
	if (parse_config(&ld) || check_type_36(&ld) || load_embedding(&ld) ||
	    load_vector(&ld, "output_norm.weight", m->cfg.n_embd, &m->output_norm))
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

/* One matrix's blobs, as fill takes them: T2 codes and scales, or float panels. */
static uint32_t linear_blobs(const struct bn_linear *l, struct bn_wcache_blob *out)
{
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
