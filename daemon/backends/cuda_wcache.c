/* SPDX-License-Identifier: MIT */
/*
 * The cuda backend's weights: built, or copied up from the packed-weight cache
 * (cuda_wcache.h).
 */
#include "cuda_wcache.h"
#include "cuda_mem.h"
#include "cache_writer.h"
#include "common/log.h"
#include "kernels.h"
#include "pool.h"
#include "quant.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UPLOAD_CHUNK (64u << 20) /* host staging of a matrix built without the cache */

static uint32_t round_up(uint32_t v, uint32_t m)
{
	return (v + m - 1) / m * m;
}

void cuda_wcache_layout(const struct bn_linear *l, struct bn_cuda_fmat *f, size_t *bytes)
{
	int f16 = l->src->type == BN_TYPE_F16;
	*f = (struct bn_cuda_fmat){ .type = f16 ? BN_CUDA_F16 : BN_CUDA_F32, .n_in = l->n_in,
				    .n_out = l->n_out, .ld = round_up(l->n_in, 16) };
	uint32_t rows = f16 ? round_up(l->n_out, 64) : l->n_out;
	*bytes = (size_t)rows * f->ld * (f16 ? 2 : 4);
}

/* Rows [o0, o0 + n) of l as the device holds them, into stage (zeroed: the pads stay zero).
 * F16 rows go as they are; everything else through bn_dequant_row to F32 (exact for BF16,
 * Q8_0, Q6_K). 0 or -EINVAL. */
static int build_rows(const struct bn_linear *l, const struct bn_cuda_fmat *f, char *stage,
		      uint32_t o0, uint32_t n)
{
	const struct bn_gguf_tensor *t = l->src;
	size_t row = (size_t)f->ld * (f->type == BN_CUDA_F16 ? 2 : 4);
	for (uint32_t o = 0; o < n; o++) {
		char *dst = stage + (size_t)o * row;
		if (f->type == BN_CUDA_F16)
			memcpy(dst, (const char *)t->data + (size_t)(o0 + o) * l->n_in * 2,
			       (size_t)l->n_in * 2);
		else if (bn_dequant_row(t->type, t->data, t->size, o0 + o, l->n_in, (float *)dst))
			return -EINVAL;
	}
	return 0;
}

/* Built and uploaded UPLOAD_CHUNK at a time: the host holds a chunk, not the matrix. */
static int upload_staged(const struct bn_linear *l, const struct bn_cuda_fmat *f, void *dev,
			 size_t bytes)
{
	size_t row = (size_t)f->ld * (f->type == BN_CUDA_F16 ? 2 : 4);
	uint32_t per_chunk = (uint32_t)(UPLOAD_CHUNK / row) ? (uint32_t)(UPLOAD_CHUNK / row) : 1;
	cudaError_t e = cudaMemset(dev, 0, bytes); /* the pad rows */
	if (e != cudaSuccess)
		return bn_cuda_failed("cudaMemcpy(weights)", e);
	char *stage = calloc(per_chunk, row);
	if (!stage)
		return -ENOMEM;
	int rc = 0;
	for (uint32_t o0 = 0; o0 < l->n_out && rc == 0; o0 += per_chunk) {
		uint32_t n = l->n_out - o0 < per_chunk ? l->n_out - o0 : per_chunk;
		rc = build_rows(l, f, stage, o0, n);
		e = rc ? cudaSuccess
		       : cudaMemcpy((char *)dev + (size_t)o0 * row, stage, (size_t)n * row,
				    cudaMemcpyHostToDevice);
		if (e != cudaSuccess)
			rc = bn_cuda_failed("cudaMemcpy(weights)", e);
	}
	free(stage);
	return rc;
}

/* ---- the model's float matrices, in the cache's order ------------------------------------ */

static uint32_t float_linears(const struct bn_model *m, const struct bn_linear **out)
{
	uint32_t n = 0;
	if (m->output.kind != BN_LINEAR_T2) {
		if (out)
			out[n] = &m->output;
		n++;
	}
	for (uint32_t li = 0; li < m->cfg.n_layer; li++) {
		const struct bn_linear *all[BN_LAYER_LINEARS];
		bn_layer_linears(&m->layers[li], all);
		for (uint32_t i = 0; i < BN_LAYER_LINEARS; i++) {
			if (all[i]->kind == BN_LINEAR_T2)
				continue;
			if (out)
				out[n] = all[i];
			n++;
		}
	}
	return n;
}

static void free_images(struct cuda_wcache *w)
{
	for (uint32_t i = 0; i < w->n_float && w->own_images; i++)
		free((void *)w->image[i]);
	free(w->lin);
	free(w->image);
	w->lin = NULL;
	w->image = NULL;
	w->n_float = 0;
}

static int list_float(struct cuda_wcache *w, const struct bn_model *m)
{
	w->n_float = float_linears(m, NULL);
	w->lin = calloc(w->n_float ? w->n_float : 1, sizeof(*w->lin));
	w->image = calloc(w->n_float ? w->n_float : 1, sizeof(*w->image));
	if (!w->lin || !w->image) {
		free_images(w);
		return -ENOMEM;
	}
	float_linears(m, w->lin);
	return 0;
}

/* ---- loading -------------------------------------------------------------------------------- */

/* The model's T2 matrices and every float image out of the open cache. 0, or -1 with err set
 * when the cache does not hold this model as the file has it (the model freed). */
static int adopt(struct cuda_wcache *w, struct bn_model *m, struct bn_pool *pool, char *err)
{
	const struct bn_model_source src = { .float_layout = BN_FLOAT_IN_PLACE, .cache = &w->cache,
					     .activation = w->act, .pool = pool };
	if (bn_model_fill(m, &src, err) != 0)
		return -1;
	int rc = list_float(w, m);
	for (uint32_t i = 0; i < w->n_float && rc == 0; i++) {
		struct bn_cuda_fmat f;
		size_t bytes;
		cuda_wcache_layout(w->lin[i], &f, &bytes);
		w->image[i] = bn_wcache_take(&w->cache, BN_WCACHE_CUDA_ROWS, bytes);
		rc = w->image[i] ? 0 : -EINVAL;
	}
	if (rc == 0 && !bn_wcache_taken_all(&w->cache))
		rc = -EINVAL;
	if (rc) {
		snprintf(err, BN_MODEL_ERR_LEN, "%s",
			 rc == -ENOMEM ? "out of memory" : "the device images differ");
		free_images(w);
		bn_model_free(m);
		return -1;
	}
	return 0;
}

/* Without the cache: repacked, and images to be built for the writer when there is a file
 * to write. */
static int build(struct cuda_wcache *w, struct bn_model *m, struct bn_pool *pool, char *err)
{
	const struct bn_model_source src = { .float_layout = BN_FLOAT_IN_PLACE, .activation = w->act,
					     .pool = pool };
	if (bn_model_fill(m, &src, err) != 0)
		return -1;
	if (!w->path[0])
		return 0;
	w->from = list_float(w, m) == 0 ? BN_WEIGHTS_CACHE_WRITING : BN_WEIGHTS_CACHE_FAILED;
	w->own_images = 1;
	if (w->from == BN_WEIGHTS_CACHE_FAILED)
		bn_log_warn("msg=\"weights cache not written: no memory to list the weights\" cache=\"%s\"",
			    w->path);
	return 0;
}

/* The cache's file for this model, or "" (no directory: logged). */
static void find_path(struct cuda_wcache *w, const char *model_path, const char *cache_dir,
		      const struct bn_model *m)
{
	char dir[PATH_MAX];
	int rc = bn_wcache_dir(cache_dir, dir, sizeof(dir));
	if (rc == 0 && dir[0] &&
	    (rc = bn_wcache_key_of(&m->file, model_path, CUDA_CACHE_LAYOUT, 0, &w->key)) == 0)
		rc = bn_wcache_path(dir, model_path, &w->key, w->path, sizeof(w->path));
	if (rc < 0)
		bn_log_warn("msg=\"no weights cache: no directory for it\" error=\"%s\" hint=\"--cache-dir DIR, $CACHE_DIRECTORY, $XDG_CACHE_HOME or $HOME\"",
			    strerror(-rc));
	if (rc < 0 || !dir[0])
		w->path[0] = 0;
}

static int load(struct cuda_wcache *w, const char *model_path, const char *cache_dir,
		struct bn_model *m, struct bn_pool *pool, char *err)
{
	if (bn_model_open(m, model_path, err) != 0)
		return -1;
	find_path(w, model_path, cache_dir, m);
	if (!w->path[0])
		return build(w, m, pool, err);
	char why[BN_WCACHE_WHY_LEN];
	/* Checked with the CPU kernel variant's XXH3 (compiled for the ISA), not libxxhash's
	 * generic build, on every CPU. */
	const struct bn_kernels *k = bn_kernels_select(NULL);
	int rc = bn_wcache_open(&w->cache, w->path, &w->key, pool, k ? k->hash64 : NULL, why);
	if (rc == 0 && adopt(w, m, pool, err) == 0) {
		w->from = BN_WEIGHTS_CACHE_HIT;
		return 0;
	}
	if (rc == 0) { /* it opened, but does not hold this model: rebuilt */
		bn_log_warn("msg=\"weights cache does not match the model; rebuilding it\" cache=\"%s\" error=\"%s\"",
			    w->path, err);
		bn_wcache_close(&w->cache);
		if (bn_model_open(m, model_path, err) != 0)
			return -1;
	} else if (rc != -ENOENT && rc != -ENOTDIR) { /* not there yet: no warning */
		bn_log_warn("msg=\"weights cache not used; rebuilding it\" cache=\"%s\" why=\"%s\"",
			    w->path, why);
	}
	return build(w, m, pool, err);
}

int cuda_wcache_load(struct cuda_wcache *w, const char *model_path, const char *cache_dir,
		     const struct bn_activation_choice *act, struct bn_model *m,
		     char err[BN_MODEL_ERR_LEN])
{
	memset(w, 0, sizeof(*w));
	w->act = *act;
	w->from = BN_WEIGHTS_CACHE_OFF;
	/* The repack and the cache's check run on a pool of every CPU for the load only (NULL:
	 * on this thread): the device computes, the host's threads are free until then. */
	struct bn_pool *pool = bn_pool_new(0);
	int rc = load(w, model_path, cache_dir, m, pool, err);
	bn_pool_free(pool);
	return rc;
}

/* ---- uploading ------------------------------------------------------------------------------ */

static int index_of(const struct cuda_wcache *w, const struct bn_linear *l)
{
	for (uint32_t i = 0; i < w->n_float; i++)
		if (w->lin[i] == l)
			return (int)i;
	return -1;
}

int cuda_wcache_upload(struct cuda_wcache *w, const struct bn_linear *l,
		       const struct bn_cuda_fmat *f, void *dev, size_t bytes)
{
	int i = index_of(w, l);
	if (i >= 0 && w->from == BN_WEIGHTS_CACHE_HIT) {
		cudaError_t e = cudaMemcpy(dev, w->image[i], bytes, cudaMemcpyHostToDevice);
		return e == cudaSuccess ? 0 : bn_cuda_failed("cudaMemcpy(weights)", e);
	}
	char *image = i >= 0 && w->from == BN_WEIGHTS_CACHE_WRITING ? calloc(1, bytes) : NULL;
	if (!image) {
		if (i >= 0 && w->from == BN_WEIGHTS_CACHE_WRITING) {
			bn_log_warn("msg=\"weights cache not written: no memory to keep a matrix\" cache=\"%s\" mib=%zu",
				    w->path, bytes >> 20);
			w->from = BN_WEIGHTS_CACHE_FAILED;
		}
		return upload_staged(l, f, dev, bytes);
	}
	w->image[i] = image; /* the writer's from now on (freed with the others) */
	int rc = build_rows(l, f, image, 0, l->n_out);
	cudaError_t e = rc ? cudaSuccess : cudaMemcpy(dev, image, bytes, cudaMemcpyHostToDevice);
	return rc ? rc : e == cudaSuccess ? 0 : bn_cuda_failed("cudaMemcpy(weights)", e);
}

/* ---- after the upload ----------------------------------------------------------------------- */

/* The writer of the model's T2 blobs and the images built, which it takes; NULL without
 * memory (nothing taken). */
static struct bn_cache_writer *new_writer(struct cuda_wcache *w, const struct bn_model *m)
{
	uint32_t n_model = bn_model_cache_blobs(m, NULL), n = n_model + w->n_float;
	struct bn_wcache_blob *blobs = calloc(n ? n : 1, sizeof(*blobs));
	if (!blobs)
		return NULL;
	bn_model_cache_blobs(m, blobs);
	for (uint32_t i = 0; i < w->n_float; i++) {
		struct bn_cuda_fmat f;
		size_t bytes;
		cuda_wcache_layout(w->lin[i], &f, &bytes);
		blobs[n_model + i] = (struct bn_wcache_blob){ BN_WCACHE_CUDA_ROWS, w->image[i], bytes };
	}
	struct bn_cache_writer *wr = bn_cache_writer_new(w->path, &w->key, 0, blobs, n,
							 (void **)w->image, w->n_float);
	if (!wr) {
		free(blobs);
		return NULL;
	}
	w->image = NULL; /* the writer's */
	w->n_float = 0;
	return wr;
}

enum bn_weights_cache cuda_wcache_ready(struct cuda_wcache *w, const struct bn_model *m,
					double load_s, struct bn_load_report *report)
{
	if (w->from == BN_WEIGHTS_CACHE_WRITING && !(w->writer = new_writer(w, m))) {
		bn_log_warn("msg=\"weights cache not written: no memory to list the weights\" cache=\"%s\"",
			    w->path);
		w->from = BN_WEIGHTS_CACHE_FAILED;
	}
	free_images(w); /* what is not the writer's now is of no more use */
	if (w->writer)
		bn_cache_writer_report_to(w->writer, report);
	bn_load_report_set(report, load_s, w->from, w->path);
	if (w->from == BN_WEIGHTS_CACHE_WRITING &&
	    (w->from = bn_cache_writer_start(w->writer)) != BN_WEIGHTS_CACHE_WRITING) {
		bn_cache_writer_stop(w->writer);
		w->writer = NULL;
		bn_load_report_set_cache(report, w->from);
	}
	return w->from;
}

void cuda_wcache_close(struct cuda_wcache *w)
{
	bn_cache_writer_stop(w->writer);
	w->writer = NULL;
	free_images(w);
	bn_wcache_close(&w->cache);
}
