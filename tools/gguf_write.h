/* SPDX-License-Identifier: MIT */
/*
 * gguf_write.h — builds GGUF v3 (or v2) files in memory and writes them: metadata first, then
 * the tensor directory, then the data, each tensor aligned. Used by the model tool and by the
 * tests (which also corrupt its output on purpose). Calls return 0 or -errno.
 */
#ifndef BITNET_GGUF_WRITE_H
#define BITNET_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

struct bn_gguf_writer;

/* version 2 or 3; alignment a power of two (32 is GGUF's default; other values are written
 * as general.alignment). NULL on bad arguments or no memory. */
struct bn_gguf_writer *bn_gguf_writer_new(uint32_t version, uint32_t alignment);
void bn_gguf_writer_free(struct bn_gguf_writer *w);

int bn_gguf_add_u32(struct bn_gguf_writer *w, const char *key, uint32_t v);
int bn_gguf_add_i32(struct bn_gguf_writer *w, const char *key, int32_t v);
int bn_gguf_add_u64(struct bn_gguf_writer *w, const char *key, uint64_t v);
int bn_gguf_add_f32(struct bn_gguf_writer *w, const char *key, float v);
int bn_gguf_add_bool(struct bn_gguf_writer *w, const char *key, int v);
int bn_gguf_add_str(struct bn_gguf_writer *w, const char *key, const char *v);
int bn_gguf_add_arr_str(struct bn_gguf_writer *w, const char *key, const char *const *v,
			uint64_t n);
int bn_gguf_add_arr_f32(struct bn_gguf_writer *w, const char *key, const float *v, uint64_t n);
int bn_gguf_add_arr_i32(struct bn_gguf_writer *w, const char *key, const int32_t *v,
			uint64_t n);
/* Any fixed-size type (BN_GGUF_UINT8 ... BN_GGUF_FLOAT64 from daemon/model/gguf.h, not STRING or
 * ARRAY): `v` points to one value of that type's C type (BOOL: one uint8_t). For metadata
 * copied from other files and for the tests, which cover every type. */
int bn_gguf_add_scalar(struct bn_gguf_writer *w, const char *key, uint32_t type, const void *v);
/* An array of n values of a fixed-size element type, packed as in C. */
int bn_gguf_add_arr(struct bn_gguf_writer *w, const char *key, uint32_t elem_type,
		    const void *v, uint64_t n);
/* Copies `size` bytes of data (size must match the type's size rule for ne). n_dims 0 is a
 * scalar (ne may then be NULL), as in ggml. */
int bn_gguf_add_tensor(struct bn_gguf_writer *w, const char *name, uint32_t type,
		       uint32_t n_dims, const uint64_t *ne, const void *data, uint64_t size);
/* Any type id and any number of bytes, as another program's converter writes them (the
 * tests' files of types bitnetd refuses, such as bitnet.cpp's TL1 and TL2). */
int bn_gguf_add_tensor_bytes(struct bn_gguf_writer *w, const char *name, uint32_t type,
			     uint32_t n_dims, const uint64_t *ne, const void *data,
			     uint64_t size);

/* The whole file in a malloc'd buffer (caller frees), or written to path (atomically: a
 * temporary file renamed into place). */
int bn_gguf_write_mem(const struct bn_gguf_writer *w, uint8_t **buf, size_t *size);
int bn_gguf_write_file(const struct bn_gguf_writer *w, const char *path);

#endif /* BITNET_GGUF_WRITE_H */
