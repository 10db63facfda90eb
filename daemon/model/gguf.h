/* SPDX-License-Identifier: MIT */
/*
 * gguf.h — a reader for GGUF v2 and v3 files: mmap'd read-only, the metadata and the tensor
 * directory parsed and checked against the file size before anything else reads it.
 *
 * Everything the reader returns points into the mapping or into arrays it owns; strings are
 * length-counted (GGUF strings are not NUL-terminated). A file that fails any check is
 * refused with one line naming the file and the problem, e.g.
 *     model.gguf: tensor 'blk.0.attn_q.weight' data [4096, 69632) runs past the end of the file (65536 bytes)
 */
#ifndef BITNETD_GGUF_H
#define BITNETD_GGUF_H

#include <stddef.h>
#include <stdint.h>

#define BN_GGUF_MAGIC 0x46554747u /* "GGUF" read as little-endian u32 */
#define BN_GGUF_DEFAULT_ALIGNMENT 32u
#define BN_GGUF_MAX_DIMS 4u
#define BN_GGUF_ERR_LEN 512

enum bn_gguf_vtype {
	BN_GGUF_UINT8 = 0,
	BN_GGUF_INT8 = 1,
	BN_GGUF_UINT16 = 2,
	BN_GGUF_INT16 = 3,
	BN_GGUF_UINT32 = 4,
	BN_GGUF_INT32 = 5,
	BN_GGUF_FLOAT32 = 6,
	BN_GGUF_BOOL = 7,
	BN_GGUF_STRING = 8,
	BN_GGUF_ARRAY = 9,
	BN_GGUF_UINT64 = 10,
	BN_GGUF_INT64 = 11,
	BN_GGUF_FLOAT64 = 12,
};

struct bn_gguf_str {
	const char *ptr;  /* into the mapping; not NUL-terminated */
	uint64_t len;
};

struct bn_gguf_kv {
	struct bn_gguf_str key;
	uint32_t type;                     /* enum bn_gguf_vtype */
	union {
		uint64_t u64;              /* unsigned integers and bool */
		int64_t i64;               /* signed integers */
		double f64;                /* FLOAT32 and FLOAT64 */
		struct bn_gguf_str str;
		struct {
			uint32_t type;     /* element type; never ARRAY */
			uint64_t n;
			const uint8_t *data;       /* first element in the mapping */
			const uint64_t *str_offsets; /* STRING arrays: offset of each element's
						      * length field from data; NULL otherwise */
		} arr;
	} v;
};

struct bn_gguf_tensor {
	struct bn_gguf_str name;
	uint32_t n_dims;
	uint64_t ne[BN_GGUF_MAX_DIMS];     /* ne[0] is the innermost (contiguous) dimension */
	uint64_t n_elements;
	uint32_t type;                     /* enum bn_tensor_type */
	uint64_t offset;                   /* from the start of the data section */
	uint64_t size;                     /* bytes, from the type's size rule */
	const uint8_t *data;               /* into the mapping */
};

struct bn_gguf {
	char path[256];
	const uint8_t *base;               /* the mapping (or the caller's buffer) */
	size_t size;
	int mapped;                        /* base is the file's mapping, and fd the file */
	int fd;                            /* kept open with the mapping, for bn_gguf_read */
	uint32_t version;
	uint32_t alignment;
	uint64_t data_offset;
	uint64_t n_kv;
	struct bn_gguf_kv *kv;
	uint64_t n_tensors;
	struct bn_gguf_tensor *tensors;
};

/* Maps and parses a file. Returns 0, or -1 with a one-line reason (naming the file) in err. */
int bn_gguf_open(struct bn_gguf *g, const char *path, char err[BN_GGUF_ERR_LEN]);
/* Parses a buffer the caller keeps alive (tests, fuzzing); `label` names it in errors. */
int bn_gguf_parse(struct bn_gguf *g, const void *buf, size_t size, const char *label,
		  char err[BN_GGUF_ERR_LEN]);
void bn_gguf_close(struct bn_gguf *g);
/* Copies len bytes of the file that lie at `at` in the mapping to out, through pread(2) where
 * the file is open: the pages stay in the page cache and out of the process's resident
 * memory, which reading through the mapping would grow by every page it touched. Falls back
 * to the mapping (or the parsed buffer) when the file cannot be read. */
void bn_gguf_read(const struct bn_gguf *g, const void *at, size_t len, void *out);

/* Bytes of a fixed-size value type; 0 for STRING, ARRAY and unknown types. */
uint64_t bn_gguf_value_size(uint32_t type);

int bn_gguf_str_eq(struct bn_gguf_str s, const char *c);
const struct bn_gguf_kv *bn_gguf_find_kv(const struct bn_gguf *g, const char *key);
const struct bn_gguf_tensor *bn_gguf_find_tensor(const struct bn_gguf *g, const char *name);

/* Typed getters: 0; -ENOENT when the key is absent; -EINVAL when it has another type or its
 * value does not fit (any integer type converts to u32/u64 if in range). */
int bn_gguf_get_u32(const struct bn_gguf *g, const char *key, uint32_t *out);
int bn_gguf_get_u64(const struct bn_gguf *g, const char *key, uint64_t *out);
int bn_gguf_get_f32(const struct bn_gguf *g, const char *key, float *out); /* FLOAT32/64 */
int bn_gguf_get_bool(const struct bn_gguf *g, const char *key, int *out);
int bn_gguf_get_str(const struct bn_gguf *g, const char *key, struct bn_gguf_str *out);
/* Element i of an array: a string (STRING arrays) or a number converted to double. */
int bn_gguf_arr_str(const struct bn_gguf_kv *kv, uint64_t i, struct bn_gguf_str *out);
int bn_gguf_arr_num(const struct bn_gguf_kv *kv, uint64_t i, double *out);

#endif /* BITNETD_GGUF_H */
