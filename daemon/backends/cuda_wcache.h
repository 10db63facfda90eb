/* SPDX-License-Identifier: MIT */
/*
 * cuda_wcache.h — the cuda backend's start from the packed-weight cache (model/wcache.h).
 *
 * What the device holds is built on the host once: the ternary matrices' T2 planes and scales
 * (the cpu backend's repack), and every other matrix as the device holds it (cuda_wcache_layout:
 * F16 rows as the file has them, anything else converted to F32; rows padded to 16 weights,
 * F16 ones also to 64 rows, zeros). A start that finds them in the cache maps the file and
 * copies them up from it: no repack, no conversion. A start that builds them uploads them and,
 * once the daemon is ready, writes them to the cache from a thread (cache_writer.h).
 *
 * The cache file is the cpu backend's format, with its own name and key: "kernels" is
 * CUDA_CACHE_LAYOUT, the version of these device layouts (a change to them changes it, so an
 * older file is stale, never used), options none. Its blobs: the model's T2 matrices in the
 * order the loader takes them (bn_model_cache_blobs), then one BN_WCACHE_CUDA_ROWS blob per
 * float matrix (the LM head, then each layer's in bn_layer_linears's order). All are checked
 * before the first upload: a cache that does not hold this model is rebuilt, as on the cpu.
 */
#ifndef BITNETD_CUDA_WCACHE_H
#define BITNETD_CUDA_WCACHE_H

#include "common/stats.h"
#include "cuda_kernels.h"
#include "model/model.h"
#include "model/wcache.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define CUDA_CACHE_LAYOUT "cuda1"

struct bn_cache_writer;

struct cuda_wcache {
	enum bn_weights_cache from;   /* off, hit, or writing (built: to be written) / failed */
	char path[PATH_MAX];          /* the cache file, "" without one */
	struct bn_wcache_key key;
	struct bn_wcache cache;       /* mapped on a hit: the images lie in it */
	uint32_t n_float;             /* the model's matrices that are not ternary */
	const struct bn_linear **lin; /* [n_float], in the cache's order */
	const void **image;           /* [n_float]: each one's device image, in the mapping (hit)
				       * or built on the host (writing), else NULL */
	int own_images;               /* the images are built ones, freed with the list */
	struct bn_activation_choice act; /* --activation, for the loader */
	struct bn_cache_writer *writer;
};

/* Opens model_path into m with the float matrices in place (the file's rows, bn_model_load_as)
 * and the ternary ones from the cache of cache_dir (--cache-dir: a directory, "none", or
 * NULL for the default) when it holds this model, else repacked; act is --activation (model.h).
 * 0, or -1 with err set (m freed). */
int cuda_wcache_load(struct cuda_wcache *w, const char *model_path, const char *cache_dir,
		     const struct bn_activation_choice *act, struct bn_model *m,
		     char err[BN_MODEL_ERR_LEN]);

/* The device layout of a matrix that is not ternary: f's type, sizes and row stride (f->data
 * NULL), and the bytes of its image. */
void cuda_wcache_layout(const struct bn_linear *l, struct bn_cuda_fmat *f, size_t *bytes);

/* The image of matrix l (laid out as f, `bytes` long) into device memory dev: copied up from
 * the cache, or built (and kept for the writer). 0, -ENOMEM, -EINVAL (a row the file cannot
 * decode) or -EIO (a failed copy, logged). */
int cuda_wcache_upload(struct cuda_wcache *w, const struct bn_linear *l,
		       const struct bn_cuda_fmat *f, void *dev, size_t bytes);

/* Every matrix is on the device: STATS learn how the weights were loaded (bn_stats_set_load,
 * load_s seconds), and a start that built them starts writing the cache. Returns the state
 * (hit, writing, failed or off). */
enum bn_weights_cache cuda_wcache_ready(struct cuda_wcache *w, const struct bn_model *m,
					double load_s);

/* Stops a write in progress and unmaps the cache: before the model is freed (the writer reads
 * its T2 planes). */
void cuda_wcache_close(struct cuda_wcache *w);

#endif /* BITNETD_CUDA_WCACHE_H */
