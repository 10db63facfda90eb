/* SPDX-License-Identifier: MIT */
/*
 * model_load.h — what the loader's files share (model.c reads the file's tensors and float
 * matrices, model_repack.c makes the ternary layouts): the loading state, its error line, the
 * buffers the model owns, tasks on the pool, handing file pages back. Not for other rooms.
 */
#ifndef BITNETD_MODEL_LOAD_H
#define BITNETD_MODEL_LOAD_H

#include "model.h"
#include "pool.h"
#include "wcache.h"

#include <stddef.h>
#include <stdint.h>

struct loader {
	struct bn_model *m;
	char *err;
	const char *path;
	enum bn_float_layout float_layout;
	struct bn_pool *pool;     /* repacks on its threads; NULL: on the caller's */
	struct bn_wcache *cache;  /* the repacked layouts come from it; NULL: repack */
	int head_in_place;        /* a float LM head keeps the file's rows (no panels) */
};

/* The loader's one error line, "path: reason"; returns -1. */
int bn_ld_fail(struct loader *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "out of memory repacking 't'" and "the weights cache does not hold 't' as this file has
 * it"; -1. */
int bn_ld_oom(struct loader *ld, const struct bn_gguf_tensor *t);
int bn_ld_cache_mismatch(struct loader *ld, const struct bn_gguf_tensor *t);

/* A 64-byte aligned buffer the model frees with itself; a large one in huge pages
 * (bigmem.h): the repacked weights are the bytes a start that repacks writes. NULL on no
 * memory. bn_model_disown frees one before the model goes. */
void *bn_model_own(struct bn_model *m, size_t size);
void bn_model_disown(struct bn_model *m, void *buf);
static inline void *bn_ld_own(struct loader *ld, size_t size)
{
	return bn_model_own(ld->m, size);
}

/* Tasks on the pool, or one after the other on this thread without one; the threads that
 * run them (1 without a pool). */
void bn_ld_run_tasks(struct bn_pool *pool, uint32_t n, bn_pool_fn fn, void *ctx);
uint32_t bn_ld_run_threads(const struct bn_pool *pool);

/* Hands the whole pages in [start, end) of a mapped file back to the kernel (nothing when
 * end <= start), and those of a repacked tensor: only the repacked copy stays resident. */
void bn_ld_drop_range(uintptr_t start, uintptr_t end);
void bn_ld_drop_pages(const struct bn_gguf_tensor *t);

/* model_repack.c: a ternary tensor into the T2 layout (or from the cache): 0 or -1 with the
 * reason set. A float layer matrix of a BitLinear graph, packed the same when every row is
 * ternary: 1 packed, 0 left float, -1. */
int bn_ld_repack_ternary(struct loader *ld, const struct bn_gguf_tensor *t, struct bn_linear *l);
int bn_ld_pack_from_float(struct loader *ld, const struct bn_gguf_tensor *t, struct bn_linear *l);
/* A T2 matrix's cache blobs as bn_ld_repack_ternary takes them (out NULL: only the count). */
uint32_t bn_ld_t2_blobs(const struct bn_linear *l, struct bn_wcache_blob *out);
/* The word before a ternary candidate's blobs: whether the loader packed it. */
extern const uint32_t bn_ld_packed_flag[2];

#endif /* BITNETD_MODEL_LOAD_H */
