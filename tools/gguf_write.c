/* SPDX-License-Identifier: MIT */
/*
 * gguf_write.c — the GGUF writer. Metadata is encoded (little-endian) as it is added; tensors
 * are copied and laid out at write time: header, metadata, tensor directory, padding to the
 * alignment, then each tensor's data padded to the alignment, the last one included, as ggml
 * writes it (readers that load the whole data section expect the trailing padding).
 */
#include "gguf_write.h"
#include "../daemon/model/gguf.h"
#include "quant.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Same bound as the reader's: no type stores more than 4 bytes a weight, so the size rule
 * cannot overflow below it. */
#define MAX_ELEMENTS (UINT64_C(1) << 60)

struct byte_buf {
	uint8_t *data;
	size_t len;
	size_t cap;
};

struct pending_tensor {
	char *name;
	uint32_t type;
	uint32_t n_dims;
	uint64_t ne[BN_GGUF_MAX_DIMS];
	uint8_t *data;
	uint64_t size;
};

struct bn_gguf_writer {
	uint32_t version;
	uint32_t alignment;
	struct byte_buf kv;             /* the metadata entries, encoded as they are added */
	uint64_t n_kv;
	char **keys;                    /* each key added, to refuse duplicates */
	size_t keys_cap;
	struct pending_tensor *tensors;
	size_t n_tensors;
	size_t tensors_cap;
};

/* ------------------------------------------------------------------------------------------ */
/* Byte buffer                                                                                */
/* ------------------------------------------------------------------------------------------ */

static int buf_reserve(struct byte_buf *b, size_t extra)
{
	if (extra <= b->cap - b->len)
		return 0;
	size_t cap = b->cap ? b->cap : 256;
	while (cap - b->len < extra) {
		if (cap > SIZE_MAX / 2)
			return -ENOMEM;
		cap *= 2;
	}
	uint8_t *data = realloc(b->data, cap);
	if (!data)
		return -ENOMEM;
	b->data = data;
	b->cap = cap;
	return 0;
}

static int buf_put(struct byte_buf *b, const void *src, size_t n)
{
	int rc = buf_reserve(b, n);
	if (rc < 0)
		return rc;
	if (n)
		memcpy(b->data + b->len, src, n);
	b->len += n;
	return 0;
}

static int buf_zeros(struct byte_buf *b, size_t n)
{
	int rc = buf_reserve(b, n);
	if (rc < 0)
		return rc;
	memset(b->data + b->len, 0, n);
	b->len += n;
	return 0;
}

/* The low `n` bytes of v, least significant first. */
static int buf_le(struct byte_buf *b, uint64_t v, size_t n)
{
	uint8_t le[8];
	for (size_t i = 0; i < n; i++)
		le[i] = (uint8_t)(v >> (8 * i));
	return buf_put(b, le, n);
}

static int buf_str(struct byte_buf *b, const char *s)
{
	size_t n = strlen(s);
	int rc = buf_le(b, n, 8);
	return rc < 0 ? rc : buf_put(b, s, n);
}

/* ------------------------------------------------------------------------------------------ */
/* Values                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* One value of `size` bytes from its C object (any byte order) to little-endian. */
static int buf_value(struct byte_buf *b, const void *v, size_t size)
{
	uint8_t u8;
	uint16_t u16;
	uint32_t u32;
	uint64_t u64;
	switch (size) {
	case 1: memcpy(&u8, v, 1); return buf_le(b, u8, 1);
	case 2: memcpy(&u16, v, 2); return buf_le(b, u16, 2);
	case 4: memcpy(&u32, v, 4); return buf_le(b, u32, 4);
	default: memcpy(&u64, v, 8); return buf_le(b, u64, 8);
	}
}

static int has_key(const struct bn_gguf_writer *w, const char *key)
{
	for (uint64_t i = 0; i < w->n_kv; i++)
		if (strcmp(w->keys[i], key) == 0)
			return 1;
	return 0;
}

/* Validates the key and encodes it and the value type; *mark is where the entry starts, so
 * kv_end can take it back if the value fails. */
static int kv_begin(struct bn_gguf_writer *w, const char *key, uint32_t type, size_t *mark)
{
	if (!w || !key)
		return -EINVAL;
	/* The writer owns general.alignment: it is written from the writer's alignment. */
	if (strcmp(key, "general.alignment") == 0)
		return -EINVAL;
	if (has_key(w, key))
		return -EEXIST;
	*mark = w->kv.len;
	int rc = buf_str(&w->kv, key);
	if (rc == 0)
		rc = buf_le(&w->kv, type, 4);
	if (rc < 0)
		w->kv.len = *mark;
	return rc;
}

static int kv_end(struct bn_gguf_writer *w, const char *key, size_t mark, int rc)
{
	if (rc == 0 && w->n_kv == w->keys_cap) {
		size_t cap = w->keys_cap ? 2 * w->keys_cap : 16;
		char **keys = realloc(w->keys, cap * sizeof(*keys));
		if (keys) {
			w->keys = keys;
			w->keys_cap = cap;
		} else {
			rc = -ENOMEM;
		}
	}
	char *copy = rc == 0 ? strdup(key) : NULL;
	if (!copy) {
		w->kv.len = mark;
		return rc < 0 ? rc : -ENOMEM;
	}
	w->keys[w->n_kv++] = copy;
	return 0;
}

int bn_gguf_add_scalar(struct bn_gguf_writer *w, const char *key, uint32_t type, const void *v)
{
	size_t size = (size_t)bn_gguf_value_size(type), mark;
	if (!v || size == 0)
		return -EINVAL;
	int rc = kv_begin(w, key, type, &mark);
	if (rc < 0)
		return rc;
	return kv_end(w, key, mark, buf_value(&w->kv, v, size));
}

int bn_gguf_add_u32(struct bn_gguf_writer *w, const char *key, uint32_t v)
{
	return bn_gguf_add_scalar(w, key, BN_GGUF_UINT32, &v);
}

int bn_gguf_add_i32(struct bn_gguf_writer *w, const char *key, int32_t v)
{
	return bn_gguf_add_scalar(w, key, BN_GGUF_INT32, &v);
}

int bn_gguf_add_u64(struct bn_gguf_writer *w, const char *key, uint64_t v)
{
	return bn_gguf_add_scalar(w, key, BN_GGUF_UINT64, &v);
}

int bn_gguf_add_f32(struct bn_gguf_writer *w, const char *key, float v)
{
	return bn_gguf_add_scalar(w, key, BN_GGUF_FLOAT32, &v);
}

int bn_gguf_add_bool(struct bn_gguf_writer *w, const char *key, int v)
{
	uint8_t b = v != 0;
	return bn_gguf_add_scalar(w, key, BN_GGUF_BOOL, &b);
}

int bn_gguf_add_str(struct bn_gguf_writer *w, const char *key, const char *v)
{
	size_t mark;
	if (!v)
		return -EINVAL;
	int rc = kv_begin(w, key, BN_GGUF_STRING, &mark);
	if (rc < 0)
		return rc;
	return kv_end(w, key, mark, buf_str(&w->kv, v));
}

static int put_array(struct byte_buf *b, uint32_t elem_type, const void *v, uint64_t n)
{
	size_t size = (size_t)bn_gguf_value_size(elem_type);
	int rc = buf_le(b, elem_type, 4);
	if (rc == 0)
		rc = buf_le(b, n, 8);
	for (uint64_t i = 0; i < n && rc == 0; i++)
		rc = buf_value(b, (const uint8_t *)v + i * size, size);
	return rc;
}

int bn_gguf_add_arr(struct bn_gguf_writer *w, const char *key, uint32_t elem_type,
		    const void *v, uint64_t n)
{
	size_t size = (size_t)bn_gguf_value_size(elem_type), mark;
	if (size == 0 || (!v && n > 0) || n > SIZE_MAX / size)
		return -EINVAL;
	int rc = kv_begin(w, key, BN_GGUF_ARRAY, &mark);
	if (rc < 0)
		return rc;
	return kv_end(w, key, mark, put_array(&w->kv, elem_type, v, n));
}

int bn_gguf_add_arr_f32(struct bn_gguf_writer *w, const char *key, const float *v, uint64_t n)
{
	return bn_gguf_add_arr(w, key, BN_GGUF_FLOAT32, v, n);
}

int bn_gguf_add_arr_i32(struct bn_gguf_writer *w, const char *key, const int32_t *v,
			uint64_t n)
{
	return bn_gguf_add_arr(w, key, BN_GGUF_INT32, v, n);
}

static int put_str_array(struct byte_buf *b, const char *const *v, uint64_t n)
{
	int rc = buf_le(b, BN_GGUF_STRING, 4);
	if (rc == 0)
		rc = buf_le(b, n, 8);
	for (uint64_t i = 0; i < n && rc == 0; i++)
		rc = buf_str(b, v[i]);
	return rc;
}

int bn_gguf_add_arr_str(struct bn_gguf_writer *w, const char *key, const char *const *v,
			uint64_t n)
{
	size_t mark;
	if (!v && n > 0)
		return -EINVAL;
	for (uint64_t i = 0; i < n; i++)
		if (!v[i])
			return -EINVAL;
	int rc = kv_begin(w, key, BN_GGUF_ARRAY, &mark);
	if (rc < 0)
		return rc;
	return kv_end(w, key, mark, put_str_array(&w->kv, v, n));
}

/* ------------------------------------------------------------------------------------------ */
/* Tensors                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static int has_tensor(const struct bn_gguf_writer *w, const char *name)
{
	for (size_t i = 0; i < w->n_tensors; i++)
		if (strcmp(w->tensors[i].name, name) == 0)
			return 1;
	return 0;
}

/* The element count of a valid shape (every dimension non-zero, no overflow); 0 otherwise. */
static uint64_t shape_elements(uint32_t n_dims, const uint64_t *ne)
{
	uint64_t n = 1;
	for (uint32_t d = 0; d < n_dims; d++)
		if (ne[d] == 0 || __builtin_mul_overflow(n, ne[d], &n) || n > MAX_ELEMENTS)
			return 0;
	return n;
}

/* 0 dimensions is a scalar, as in ggml. */
static int tensor_args_valid(uint32_t type, uint32_t n_dims, const uint64_t *ne,
			     const void *data, uint64_t size)
{
	if ((!ne && n_dims) || !data || n_dims > BN_GGUF_MAX_DIMS)
		return 0;
	uint64_t n = shape_elements(n_dims, ne);
	uint32_t block = bn_type_block_weights(type);
	/* The reader refuses rows that are not whole blocks, so the writer does too. */
	uint64_t row = n_dims ? ne[0] : 1;
	return n != 0 && block != 0 && row % block == 0 && bn_tensor_bytes(type, n) == size &&
	       size <= SIZE_MAX;
}

static int add_tensor(struct bn_gguf_writer *w, const char *name, uint32_t type,
		      uint32_t n_dims, const uint64_t *ne, const void *data, uint64_t size)
{
	if (has_tensor(w, name))
		return -EEXIST;
	if (w->n_tensors == w->tensors_cap) {
		size_t cap = w->tensors_cap ? 2 * w->tensors_cap : 16;
		struct pending_tensor *t = realloc(w->tensors, cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		w->tensors = t;
		w->tensors_cap = cap;
	}
	struct pending_tensor t = { .type = type, .n_dims = n_dims, .size = size };
	for (uint32_t d = 0; d < BN_GGUF_MAX_DIMS; d++)
		t.ne[d] = d < n_dims ? ne[d] : 1; /* ne is NULL for a scalar */
	t.name = strdup(name);
	t.data = malloc((size_t)size);
	if (!t.name || !t.data) {
		free(t.name);
		free(t.data);
		return -ENOMEM;
	}
	memcpy(t.data, data, (size_t)size);
	w->tensors[w->n_tensors++] = t;
	return 0;
}

int bn_gguf_add_tensor(struct bn_gguf_writer *w, const char *name, uint32_t type,
		       uint32_t n_dims, const uint64_t *ne, const void *data, uint64_t size)
{
	if (!w || !name || !tensor_args_valid(type, n_dims, ne, data, size))
		return -EINVAL;
	return add_tensor(w, name, type, n_dims, ne, data, size);
}

int bn_gguf_add_tensor_bytes(struct bn_gguf_writer *w, const char *name, uint32_t type,
			     uint32_t n_dims, const uint64_t *ne, const void *data, uint64_t size)
{
	if (!w || !name || (!ne && n_dims) || n_dims > BN_GGUF_MAX_DIMS || (!data && size) ||
	    shape_elements(n_dims, ne) == 0 || size > SIZE_MAX)
		return -EINVAL;
	return add_tensor(w, name, type, n_dims, ne, data ? data : "", size);
}

/* ------------------------------------------------------------------------------------------ */
/* Writer lifetime                                                                            */
/* ------------------------------------------------------------------------------------------ */

struct bn_gguf_writer *bn_gguf_writer_new(uint32_t version, uint32_t alignment)
{
	if ((version != 2 && version != 3) || alignment == 0 || (alignment & (alignment - 1)))
		return NULL;
	struct bn_gguf_writer *w = calloc(1, sizeof(*w));
	if (w) {
		w->version = version;
		w->alignment = alignment;
	}
	return w;
}

void bn_gguf_writer_free(struct bn_gguf_writer *w)
{
	if (!w)
		return;
	for (uint64_t i = 0; i < w->n_kv; i++)
		free(w->keys[i]);
	free(w->keys);
	for (size_t i = 0; i < w->n_tensors; i++) {
		free(w->tensors[i].name);
		free(w->tensors[i].data);
	}
	free(w->tensors);
	free(w->kv.data);
	free(w);
}

/* ------------------------------------------------------------------------------------------ */
/* Layout and output                                                                          */
/* ------------------------------------------------------------------------------------------ */

static uint64_t padding(uint64_t n, uint32_t alignment)
{
	return (alignment - n % alignment) % alignment;
}

static int put_tensor_info(struct byte_buf *b, const struct pending_tensor *t, uint64_t offset)
{
	int rc = buf_str(b, t->name);
	if (rc == 0)
		rc = buf_le(b, t->n_dims, 4);
	for (uint32_t d = 0; d < t->n_dims && rc == 0; d++)
		rc = buf_le(b, t->ne[d], 8);
	if (rc == 0)
		rc = buf_le(b, t->type, 4);
	if (rc == 0)
		rc = buf_le(b, offset, 8);
	return rc;
}

/* Everything before the data: header, metadata, tensor directory, padding. */
static int encode_head(const struct bn_gguf_writer *w, struct byte_buf *head)
{
	int explicit_alignment = w->alignment != BN_GGUF_DEFAULT_ALIGNMENT;
	int rc = buf_le(head, BN_GGUF_MAGIC, 4);
	if (rc == 0)
		rc = buf_le(head, w->version, 4);
	if (rc == 0)
		rc = buf_le(head, w->n_tensors, 8);
	if (rc == 0)
		rc = buf_le(head, w->n_kv + (uint64_t)explicit_alignment, 8);
	if (rc == 0 && explicit_alignment) {
		rc = buf_str(head, "general.alignment");
		if (rc == 0)
			rc = buf_le(head, BN_GGUF_UINT32, 4);
		if (rc == 0)
			rc = buf_le(head, w->alignment, 4);
	}
	if (rc == 0)
		rc = buf_put(head, w->kv.data, w->kv.len);
	uint64_t offset = 0;
	for (size_t i = 0; i < w->n_tensors && rc == 0; i++) {
		const struct pending_tensor *t = &w->tensors[i];
		rc = put_tensor_info(head, t, offset);
		offset += t->size + padding(t->size, w->alignment);
	}
	if (rc == 0)
		rc = buf_zeros(head, padding(head->len, w->alignment));
	return rc;
}

int bn_gguf_write_mem(const struct bn_gguf_writer *w, uint8_t **buf, size_t *size)
{
	struct byte_buf out = { 0 };
	if (!w || !buf || !size)
		return -EINVAL;
	int rc = encode_head(w, &out);
	for (size_t i = 0; i < w->n_tensors && rc == 0; i++) {
		const struct pending_tensor *t = &w->tensors[i];
		rc = buf_put(&out, t->data, (size_t)t->size);
		if (rc == 0)
			rc = buf_zeros(&out, padding(t->size, w->alignment));
	}
	if (rc < 0) {
		free(out.data);
		return rc;
	}
	*buf = out.data;
	*size = out.len;
	return 0;
}

static int write_all(FILE *f, const void *p, size_t n)
{
	errno = 0;
	if (n && fwrite(p, 1, n, f) != n)
		return -(errno ? errno : EIO);
	return 0;
}

static int write_zeros(FILE *f, uint64_t n)
{
	static const uint8_t zeros[4096];
	int rc = 0;
	while (n > 0 && rc == 0) {
		size_t chunk = n < sizeof(zeros) ? (size_t)n : sizeof(zeros);
		rc = write_all(f, zeros, chunk);
		n -= chunk;
	}
	return rc;
}

/* Streams the file: the data is written from the writer's copies, not assembled again. */
static int write_stream(const struct bn_gguf_writer *w, FILE *f)
{
	struct byte_buf head = { 0 };
	int rc = encode_head(w, &head);
	if (rc == 0)
		rc = write_all(f, head.data, head.len);
	free(head.data);
	for (size_t i = 0; i < w->n_tensors && rc == 0; i++) {
		const struct pending_tensor *t = &w->tensors[i];
		rc = write_all(f, t->data, (size_t)t->size);
		if (rc == 0)
			rc = write_zeros(f, padding(t->size, w->alignment));
	}
	if (rc == 0 && fflush(f) != 0)
		rc = -errno;
	/* On disk before the rename, so a crash leaves the old file or the whole new one. */
	if (rc == 0 && fsync(fileno(f)) != 0)
		rc = -errno;
	return rc;
}

int bn_gguf_write_file(const struct bn_gguf_writer *w, const char *path)
{
	char tmp[4096];
	if (!w || !path)
		return -EINVAL;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path) >= sizeof(tmp))
		return -ENAMETOOLONG;
	int fd = mkstemp(tmp);  /* same directory as path, so rename(2) is atomic */
	if (fd < 0)
		return -errno;
	/* mkstemp makes the file 0600; a model is read by the daemon's own user. */
	int rc = fchmod(fd, 0644) < 0 ? -errno : 0;
	FILE *f = fdopen(fd, "wb");
	if (!f) {
		rc = -errno;
		close(fd);
	} else {
		if (rc == 0)
			rc = write_stream(w, f);
		if (fclose(f) != 0 && rc == 0)
			rc = -errno;
	}
	if (rc == 0 && rename(tmp, path) != 0)
		rc = -errno;
	if (rc < 0)
		unlink(tmp);
	return rc;
}
