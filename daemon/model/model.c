/* SPDX-License-Identifier: MIT */
/* model.c — GGUF → struct bn_model: checks, the tensors, float matrices (ternary ones:
 * model_repack.c). */
#include "model_load.h"
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

#define PANEL_TASK_GROUPS 16  /* panel groups one packing task fills */

/* ------------------------------------------------------------------------------------------ */
/* Tensors                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* The tensor `name` with shape [ne0] (n_dims 1) or [ne0, ne1]; trailing dims of 1 are fine. */
static int find_shaped(struct loader *ld, const char *name, uint32_t n_dims, uint64_t ne0,
		       uint64_t ne1, const struct bn_gguf_tensor **out)
{
	const struct bn_gguf_tensor *t = bn_gguf_find_tensor(&ld->m->file, name);
	if (!t)
		return bn_ld_fail(ld, "tensor '%s' is missing", name);
	uint64_t want1 = n_dims == 2 ? ne1 : 1;
	uint64_t got1 = t->n_dims >= 2 ? t->ne[1] : 1;
	int extra = (t->n_dims >= 3 && t->ne[2] != 1) || (t->n_dims == 4 && t->ne[3] != 1);
	if (t->ne[0] != ne0 || got1 != want1 || extra)
		return bn_ld_fail(ld, "tensor '%s' has shape [%llu, %llu], the metadata says [%llu, %llu]",
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
		return bn_ld_fail(ld, "tensor '%s' has type %s; norm weights must be F32, F16 or BF16", name,
			    bn_type_name(t->type));
	float *v = bn_ld_own(ld, n * sizeof(float));
	if (!v)
		return bn_ld_fail(ld, "out of memory");
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
			return bn_ld_fail(ld, "tensor 'rope_freqs.weight' value %u is %g; it must be positive "
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

/* Once the model is loaded, every file page that no step reads goes back to the kernel: all but
 * the tensors used in place (Q4_0 / Q8_0 / Q6_K matrices, float ones not in panels; the embedding's
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
		return bn_ld_fail(ld, "out of memory");
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
		bn_ld_drop_range(from, start & ~(page - 1));
		end = (end + page - 1) & ~(page - 1);
		from = end > from ? end : from;
	}
	bn_ld_drop_range(from, ((uintptr_t)m->file.base + m->file.size) & ~(page - 1));
	free(in_place);
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
	bn_ld_drop_range((lo + page - 1) & ~(page - 1), hi & ~(page - 1));
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
			return bn_ld_cache_mismatch(ld, t);
	} else {
		j.panels = bn_ld_own(ld, bytes);
		if (!j.panels)
			return bn_ld_oom(ld, t);
		bn_ld_run_tasks(ld->pool, (n_groups + PANEL_TASK_GROUPS - 1) / PANEL_TASK_GROUPS,
			  panel_task, &j);
	}
	l->f = (struct bn_f_matrix){ .data = j.panels, .type = t->type, .n_in = l->n_in,
				     .n_out = l->n_out, .row_bytes = j.row_bytes,
				     .panel_rows = BN_F_PANEL_ROWS };
	ld->m->repacked_bytes += bytes;
	return 0;
}

/* A graph whose linears are BitLinear (weights ternary, activations int8): the bitnet*
 * architectures, and BitNet-embedding's qwen3/gemma3 (the per-projection input norms are
 * BitLinear's, bitnet.cpp's embedding guide). Their float matrices are ternary candidates. */
static int bitlinear(const struct bn_model_config *c)
{
	return c->sub_norms || c->proj_norms;
}

/* `decodable`: Q4_0, Q8_0 and Q6_K are accepted (embedding / LM head only). */
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
		return bn_ld_repack_ternary(ld, t, l);
	if (t->type == BN_TYPE_F32 || t->type == BN_TYPE_F16 || t->type == BN_TYPE_BF16) {
		int rc = !decodable && bitlinear(&ld->m->cfg) ? bn_ld_pack_from_float(ld, t, l) : 0;
		if (rc)
			return rc < 0 ? -1 : 0;
		l->kind = BN_LINEAR_FLOAT;
		if (ld->float_layout == BN_FLOAT_PANELS && !(decodable && ld->head_in_place))
			return pack_float_panels(ld, t, l);
		l->f = (struct bn_f_matrix){ .data = t->data, .type = t->type, .n_in = n_in,
					     .n_out = n_out, .row_bytes = bn_row_bytes(t->type, n_in) };
		return 0;
	}
	if (decodable && (t->type == BN_TYPE_Q4_0 || t->type == BN_TYPE_Q8_0 ||
			  t->type == BN_TYPE_Q6_K)) {
		l->kind = BN_LINEAR_DECODE;
		return 0;
	}
	return bn_ld_fail(ld, "tensor '%s' has type %s, which bitnetd does not accept there", name,
		    bn_type_name(t->type) ? bn_type_name(t->type) : "?");
}

/* The per-projection input norms' tensors, in bn_layer_linears' order. */
static const char *const norm_in_names[BN_LAYER_LINEARS] = {
	"attn_q_norm_in.weight", "attn_k_norm_in.weight", "attn_v_norm_in.weight",
	"attn_output_norm_in.weight", "ffn_gate_norm_in.weight", "ffn_up_norm_in.weight",
	"ffn_down_norm_in.weight",
};

/* BitNet-embedding's seven input norms of a layer, all or none: in every layer when the first
 * has them (cfg proj_norms), else in none, so that no layer's norm goes unread. */
static int load_norm_in(struct loader *ld, uint32_t i, struct bn_layer *L)
{
	const struct bn_model_config *c = &ld->m->cfg;
	uint32_t n_in[BN_LAYER_LINEARS] = { c->n_embd, c->n_embd, c->n_embd, c->n_head * c->head_dim,
					     c->n_embd, c->n_embd, c->n_ff };
	char name[96];
	for (uint32_t k = 0; k < BN_LAYER_LINEARS; k++) {
		snprintf(name, sizeof(name), "blk.%u.%s", i, norm_in_names[k]);
		if (c->proj_norms && load_vector(ld, name, n_in[k], &L->norm_in[k]))
			return -1;
		if (!c->proj_norms && bn_gguf_find_tensor(&ld->m->file, name))
			return bn_ld_fail(ld, "tensor '%s' is a per-projection input norm, but "
					      "blk.0.%s is missing", name, norm_in_names[0]);
	}
	return 0;
}

/* What qwen3 and gemma3 add: per-head q/k norms, gemma3's post-norms. */
static int load_arch_norms(struct loader *ld, uint32_t i, struct bn_layer *L)
{
	const struct bn_model_config *c = &ld->m->cfg;
	char name[96];
#define TENSOR(suffix) (snprintf(name, sizeof(name), "blk.%u.%s", i, suffix), name)
	if (c->qk_norm &&
	    (load_vector(ld, TENSOR("attn_q_norm.weight"), c->head_dim, &L->attn_q_norm) ||
	     load_vector(ld, TENSOR("attn_k_norm.weight"), c->head_dim, &L->attn_k_norm)))
		return -1;
	if (c->post_norms &&
	    (load_vector(ld, TENSOR("post_attention_norm.weight"), c->n_embd, &L->post_attn_norm) ||
	     load_vector(ld, TENSOR("post_ffw_norm.weight"), c->n_embd, &L->post_ffw_norm)))
		return -1;
#undef TENSOR
	return load_norm_in(ld, i, L);
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
	return load_arch_norms(ld, i, L);
}

static int load_embedding(struct loader *ld)
{
	struct bn_model *m = ld->m;
	struct bn_model_config *c = &m->cfg;
	const struct bn_gguf_tensor *t = bn_gguf_find_tensor(&m->file, "token_embd.weight");
	if (!t)
		return bn_ld_fail(ld, "tensor 'token_embd.weight' is missing");
	uint64_t rows = t->n_dims >= 2 ? t->ne[1] : 1;
	int extra = (t->n_dims >= 3 && t->ne[2] != 1) || (t->n_dims == 4 && t->ne[3] != 1);
	if (extra)
		return bn_ld_fail(ld, "tensor 'token_embd.weight' has %u dims; it must be 2-D [n_embd, vocab]",
			    t->n_dims);
	if (t->ne[0] != c->n_embd || rows > UINT32_MAX || rows < 1)
		return bn_ld_fail(ld, "tensor 'token_embd.weight' has shape [%llu, %llu], the metadata says [%u, vocab]",
			    (unsigned long long)t->ne[0], (unsigned long long)rows, c->n_embd);
	char key[64];
	snprintf(key, sizeof(key), "%s.vocab_size", c->arch_name);
	int rc = bn_gguf_get_u32(&m->file, key, &c->n_vocab);
	if (rc == -ENOENT)
		c->n_vocab = (uint32_t)rows;
	else if (rc != 0)
		return bn_ld_fail(ld, "metadata key %s is not an unsigned 32-bit integer", key);
	if (c->n_vocab != rows)
		return bn_ld_fail(ld, "%s.vocab_size is %u but token_embd.weight has %llu rows", c->arch_name,
			    c->n_vocab, (unsigned long long)rows);
	if (c->bos_id >= c->n_vocab || c->eos_id >= c->n_vocab)
		return bn_ld_fail(ld, "bos id %u or eos id %u is outside the vocabulary (%u)", c->bos_id,
			    c->eos_id, c->n_vocab);
	if (bn_type_is_ternary(t->type) || !bn_type_name(t->type))
		return bn_ld_fail(ld, "tensor 'token_embd.weight' has type %s; embeddings must be F32, F16, BF16, Q4_0, Q8_0 or Q6_K",
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
	if (bn_model_read_config(&m->file, &src->activation, &m->cfg, err))
		goto fail;
	m->cfg.proj_norms = (m->cfg.arch == BN_ARCH_QWEN3 || m->cfg.arch == BN_ARCH_GEMMA3) &&
			    bn_gguf_find_tensor(&m->file, "blk.0.attn_q_norm_in.weight");
	if (bn_model_check_i2_s(&m->file, &m->cfg, err) || load_embedding(&ld) ||
	    load_vector(&ld, "output_norm.weight", m->cfg.n_embd, &m->output_norm) ||
	    load_rope_factors(&ld))
		goto fail;
	m->layers = calloc(m->cfg.n_layer, sizeof(*m->layers));
	if (!m->layers) {
		bn_ld_fail(&ld, "out of memory");
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
	uint32_t n = 0;
	if (l->ternary_candidate) {
		if (out)
			out[0] = (struct bn_wcache_blob){ BN_WCACHE_FROM_FLOAT,
							  &bn_ld_packed_flag[l->kind == BN_LINEAR_T2],
							  sizeof(bn_ld_packed_flag[0]) };
		n = 1;
	}
	if (l->kind == BN_LINEAR_T2)
		return n + bn_ld_t2_blobs(l, out ? out + n : NULL);
	if (l->kind == BN_LINEAR_FLOAT && l->f.panel_rows) {
		if (out)
			out[n] = (struct bn_wcache_blob){ BN_WCACHE_F_PANELS, l->f.data,
							  bn_f_panel_bytes(l->f.type, l->n_in,
									   l->n_out) };
		return n + 1;
	}
	return n;
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

void bn_model_free(struct bn_model *m)
{
	for (uint32_t i = 0; i < m->n_owned; i++)
		bn_big_free(m->owned[i].p, m->owned[i].size);
	free(m->owned);
	free(m->layers);
	bn_gguf_close(&m->file);
	memset(m, 0, sizeof(*m));
}

uint64_t bn_model_release_head_panels(struct bn_model *m)
{
	struct bn_linear *head = &m->output;
	if (head->kind != BN_LINEAR_FLOAT || !head->f.panel_rows)
		return 0;
	uint64_t bytes = bn_f_panel_bytes(head->f.type, head->n_in, head->n_out);
	bn_model_disown(m, (void *)head->f.data);
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
