/* SPDX-License-Identifier: MIT */
/*
 * gguf.c — the GGUF reader. The file is untrusted input: every length, count and offset is
 * checked against the bytes that remain before it is used, every sum and product against
 * u64 overflow, and no allocation is sized by a count before the count is known to fit in the
 * file. Values are decoded byte by byte as little-endian, so the host's byte order and the
 * buffer's alignment do not matter.
 */
#include "gguf.h"
#include "quant.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The smallest encodings, used to refuse counts that the remaining bytes cannot hold: a kv is
 * a key length, a value type and at least a one-byte value; a tensor info is a name length,
 * n_dims, one dimension, a type and an offset. */
#define KV_MIN_BYTES (8u + 4u + 1u)
#define TENSOR_INFO_MIN_BYTES (8u + 4u + 8u + 4u + 8u)
/* No type stores more than 4 bytes a weight (F32), so below this bound bn_tensor_bytes
 * cannot overflow; a tensor this large could not fit in any file anyway. */
#define MAX_ELEMENTS (UINT64_C(1) << 60)
#define SHOWN_NAME_MAX 64   /* bytes of an untrusted name quoted in an error */
#define SHOWN_LABEL_MAX 96  /* bytes of the file name at the head of an error */

struct parser {
	struct bn_gguf *g;
	const uint8_t *buf;
	size_t size;
	size_t pos;
	char *err;          /* BN_GGUF_ERR_LEN bytes, or NULL */
	char where[128];    /* what is being read, for "truncated in ..." */
	const struct bn_gguf_tensor *tiled; /* the first tensor of type 38 or 39 (TL_TYPE_*) */
};

/* bitnet.cpp's TL1 and TL2 (ggml types 38 and 39 in its files): ternary weights cut into tiles
 * whose sizes (BM, BK, bm per matrix shape) are chosen when bitnet.cpp is built
 * (utils/codegen_tl1.py, codegen_tl2.py, include/kernel_config.ini) and used by its converter
 * to lay the tiles out, but are written nowhere in the file; its own kernels read a file right
 * only when built with the same choice. The same bytes decode to different matrices under
 * different tiles, so bitnetd refuses these files and says how to get one it reads. Upstream
 * llama.cpp gave 38 to a repacking type it later removed and 39 to MXFP4. */
#define TL_TYPE_TL1 38u
#define TL_TYPE_TL2 39u

/* ------------------------------------------------------------------------------------------ */
/* Errors: one line, "label: problem"                                                         */
/* ------------------------------------------------------------------------------------------ */

static int vfail(char *err, const char *label, const char *fmt, va_list ap)
{
	if (!err)
		return -1;
	size_t len = strlen(label);
	/* Keep the end of a long path: the file name is the part that identifies it. */
	const char *dots = len > SHOWN_LABEL_MAX ? "..." : "";
	const char *shown = len > SHOWN_LABEL_MAX ? label + len - SHOWN_LABEL_MAX : label;
	int n = snprintf(err, BN_GGUF_ERR_LEN, "%s%s: ", dots, shown);
	if (n > 0 && n < BN_GGUF_ERR_LEN)
		vsnprintf(err + n, BN_GGUF_ERR_LEN - (size_t)n, fmt, ap);
	return -1;
}

__attribute__((format(printf, 3, 4)))
static int fail_label(char *err, const char *label, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfail(err, label, fmt, ap);
	va_end(ap);
	return -1;
}

__attribute__((format(printf, 2, 3)))
static int fail(struct parser *p, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfail(p->err, p->g->path, fmt, ap);
	va_end(ap);
	return -1;
}

/* An untrusted name made safe to quote: cut short, and every byte that could break the
 * one-line message (controls, quotes, non-ASCII) shown as '?'. */
struct shown_name {
	char s[SHOWN_NAME_MAX + 4];
};

static struct shown_name show(struct bn_gguf_str name)
{
	struct shown_name out;
	uint64_t n = name.len < SHOWN_NAME_MAX ? name.len : SHOWN_NAME_MAX;
	for (uint64_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)name.ptr[i];
		out.s[i] = c >= 0x20 && c < 0x7f && c != '\'' ? (char)c : '?';
	}
	strcpy(out.s + n, name.len > SHOWN_NAME_MAX ? "..." : "");
	return out;
}

static void set_where(struct parser *p, const char *what, uint64_t index)
{
	snprintf(p->where, sizeof(p->where), "%s %" PRIu64, what, index);
}

static void set_where_name(struct parser *p, const char *what, struct bn_gguf_str name)
{
	snprintf(p->where, sizeof(p->where), "%s '%s'", what, show(name).s);
}

/* ------------------------------------------------------------------------------------------ */
/* Bounded reads                                                                              */
/* ------------------------------------------------------------------------------------------ */

static uint16_t load_le16(const uint8_t *b)
{
	return (uint16_t)(b[0] | b[1] << 8);
}

static uint32_t load_le32(const uint8_t *b)
{
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static uint64_t load_le64(const uint8_t *b)
{
	return (uint64_t)load_le32(b) | (uint64_t)load_le32(b + 4) << 32;
}

static size_t bytes_left(const struct parser *p)
{
	return p->size - p->pos;
}

static int need(struct parser *p, uint64_t n)
{
	if (n > bytes_left(p))
		return fail(p, "truncated in %s at byte %zu (file is %zu bytes)", p->where, p->pos,
			    p->size);
	return 0;
}

static int take_u32(struct parser *p, uint32_t *v)
{
	if (need(p, 4) < 0)
		return -1;
	*v = load_le32(p->buf + p->pos);
	p->pos += 4;
	return 0;
}

static int take_u64(struct parser *p, uint64_t *v)
{
	if (need(p, 8) < 0)
		return -1;
	*v = load_le64(p->buf + p->pos);
	p->pos += 8;
	return 0;
}

static int take_str(struct parser *p, struct bn_gguf_str *s)
{
	uint64_t len;
	if (take_u64(p, &len) < 0)
		return -1;
	if (len > bytes_left(p))
		return fail(p, "%s: string length %" PRIu64 " runs past the end of the file "
			    "(%zu bytes left)", p->where, len, bytes_left(p));
	s->ptr = (const char *)p->buf + p->pos;
	s->len = len;
	p->pos += len;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Metadata values                                                                            */
/* ------------------------------------------------------------------------------------------ */

static const char *vtype_name(uint32_t type)
{
	static const char *const names[] = {
		"UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
		"BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64",
	};
	return type < sizeof(names) / sizeof(names[0]) ? names[type] : NULL;
}

uint64_t bn_gguf_value_size(uint32_t type)
{
	switch (type) {
	case BN_GGUF_UINT8: case BN_GGUF_INT8: case BN_GGUF_BOOL:
		return 1;
	case BN_GGUF_UINT16: case BN_GGUF_INT16:
		return 2;
	case BN_GGUF_UINT32: case BN_GGUF_INT32: case BN_GGUF_FLOAT32:
		return 4;
	case BN_GGUF_UINT64: case BN_GGUF_INT64: case BN_GGUF_FLOAT64:
		return 8;
	default:
		return 0;
	}
}

static int vtype_is_signed(uint32_t type)
{
	return type == BN_GGUF_INT8 || type == BN_GGUF_INT16 || type == BN_GGUF_INT32 ||
	       type == BN_GGUF_INT64;
}

/* Decodes one fixed-size value into the union member its type uses (see gguf.h). */
static void load_scalar(uint32_t type, const uint8_t *b, struct bn_gguf_kv *kv)
{
	uint32_t u32;
	uint64_t u64;
	float f;
	switch (type) {
	case BN_GGUF_UINT8: kv->v.u64 = b[0]; break;
	case BN_GGUF_BOOL: kv->v.u64 = b[0] != 0; break;
	case BN_GGUF_INT8: kv->v.i64 = (int8_t)b[0]; break;
	case BN_GGUF_UINT16: kv->v.u64 = load_le16(b); break;
	case BN_GGUF_INT16: kv->v.i64 = (int16_t)load_le16(b); break;
	case BN_GGUF_UINT32: kv->v.u64 = load_le32(b); break;
	case BN_GGUF_INT32: kv->v.i64 = (int32_t)load_le32(b); break;
	case BN_GGUF_UINT64: kv->v.u64 = load_le64(b); break;
	case BN_GGUF_INT64:
		u64 = load_le64(b);
		memcpy(&kv->v.i64, &u64, sizeof(u64));
		break;
	case BN_GGUF_FLOAT32:
		u32 = load_le32(b);
		memcpy(&f, &u32, sizeof(f));
		kv->v.f64 = f;
		break;
	case BN_GGUF_FLOAT64:
		u64 = load_le64(b);
		memcpy(&kv->v.f64, &u64, sizeof(u64));
		break;
	}
}

static double scalar_as_double(const struct bn_gguf_kv *kv)
{
	if (vtype_is_signed(kv->type))
		return (double)kv->v.i64;
	if (kv->type == BN_GGUF_FLOAT32 || kv->type == BN_GGUF_FLOAT64)
		return kv->v.f64;
	return (double)kv->v.u64;
}

static int parse_scalar(struct parser *p, struct bn_gguf_kv *kv)
{
	uint64_t size = bn_gguf_value_size(kv->type);
	if (need(p, size) < 0)
		return -1;
	load_scalar(kv->type, p->buf + p->pos, kv);
	p->pos += size;
	return 0;
}

static int array_too_long(struct parser *p, const struct bn_gguf_kv *kv)
{
	return fail(p, "%s: array of %" PRIu64 " %s elements runs past the end of the file "
		    "(%zu bytes left)", p->where, kv->v.arr.n, vtype_name(kv->v.arr.type),
		    bytes_left(p));
}

/* String elements vary in size, so lookups by index need each element's offset: built here,
 * once, after the count has been bounded by the bytes left (each element has at least its
 * 8-byte length). */
static int parse_string_array(struct parser *p, struct bn_gguf_kv *kv)
{
	uint64_t n = kv->v.arr.n;
	if (n > bytes_left(p) / 8)
		return array_too_long(p, kv);
	uint64_t *offsets = malloc(n ? n * sizeof(*offsets) : 1);
	if (!offsets)
		return fail(p, "%s: out of memory for %" PRIu64 " strings", p->where, n);
	kv->v.arr.str_offsets = offsets;  /* owned by kv from here: freed by bn_gguf_close */
	size_t start = p->pos;
	for (uint64_t i = 0; i < n; i++) {
		struct bn_gguf_str s;
		offsets[i] = p->pos - start;
		if (take_str(p, &s) < 0)
			return -1;
	}
	return 0;
}

static int parse_array(struct parser *p, struct bn_gguf_kv *kv)
{
	uint32_t elem_type;
	uint64_t n;
	if (take_u32(p, &elem_type) < 0 || take_u64(p, &n) < 0)
		return -1;
	if (elem_type == BN_GGUF_ARRAY)
		return fail(p, "%s: nested arrays are not supported", p->where);
	if (!vtype_name(elem_type))
		return fail(p, "%s has unknown array element type %" PRIu32, p->where, elem_type);
	kv->v.arr.type = elem_type;
	kv->v.arr.n = n;
	kv->v.arr.data = p->buf + p->pos;
	if (elem_type == BN_GGUF_STRING)
		return parse_string_array(p, kv);
	uint64_t elem_size = bn_gguf_value_size(elem_type);
	if (n > bytes_left(p) / elem_size)
		return array_too_long(p, kv);
	p->pos += n * elem_size;
	return 0;
}

static int parse_kv(struct parser *p, uint64_t index, struct bn_gguf_kv *kv)
{
	uint32_t type;
	set_where(p, "metadata key", index);
	if (take_str(p, &kv->key) < 0)
		return -1;
	set_where_name(p, "metadata", kv->key);
	if (take_u32(p, &type) < 0)
		return -1;
	if (!vtype_name(type))
		return fail(p, "%s has unknown value type %" PRIu32, p->where, type);
	kv->type = type;
	if (type == BN_GGUF_ARRAY)
		return parse_array(p, kv);
	if (type == BN_GGUF_STRING)
		return take_str(p, &kv->v.str);
	return parse_scalar(p, kv);
}

/* ------------------------------------------------------------------------------------------ */
/* Duplicates and overlaps: found by sorting pointers, so hostile counts stay n log n         */
/* ------------------------------------------------------------------------------------------ */

static int str_cmp(struct bn_gguf_str a, struct bn_gguf_str b)
{
	uint64_t n = a.len < b.len ? a.len : b.len;
	int c = n ? memcmp(a.ptr, b.ptr, n) : 0;
	if (c)
		return c;
	return (a.len > b.len) - (a.len < b.len);
}

static int kv_key_cmp(const void *a, const void *b)
{
	const struct bn_gguf_kv *const *x = a, *const *y = b;
	return str_cmp((*x)->key, (*y)->key);
}

static int tensor_name_cmp(const void *a, const void *b)
{
	const struct bn_gguf_tensor *const *x = a, *const *y = b;
	return str_cmp((*x)->name, (*y)->name);
}

static int tensor_offset_cmp(const void *a, const void *b)
{
	const struct bn_gguf_tensor *const *x = a, *const *y = b;
	return ((*x)->offset > (*y)->offset) - ((*x)->offset < (*y)->offset);
}

/* Pointers to the entries, sorted by cmp; NULL if no memory. Typed arrays, so the
 * comparators read each pointer as the type it was stored as. */
static const struct bn_gguf_kv **sorted_kvs(const struct bn_gguf *g)
{
	const struct bn_gguf_kv **sorted = malloc(g->n_kv ? g->n_kv * sizeof(*sorted) : 1);
	if (!sorted)
		return NULL;
	for (uint64_t i = 0; i < g->n_kv; i++)
		sorted[i] = &g->kv[i];
	qsort(sorted, g->n_kv, sizeof(*sorted), kv_key_cmp);
	return sorted;
}

static const struct bn_gguf_tensor **sorted_tensors(const struct bn_gguf *g,
						    int (*cmp)(const void *, const void *))
{
	const struct bn_gguf_tensor **sorted =
		malloc(g->n_tensors ? g->n_tensors * sizeof(*sorted) : 1);
	if (!sorted)
		return NULL;
	for (uint64_t i = 0; i < g->n_tensors; i++)
		sorted[i] = &g->tensors[i];
	qsort(sorted, g->n_tensors, sizeof(*sorted), cmp);
	return sorted;
}

static int check_unique_keys(struct parser *p)
{
	const struct bn_gguf *g = p->g;
	const struct bn_gguf_kv **sorted = sorted_kvs(g);
	if (!sorted)
		return fail(p, "out of memory checking %" PRIu64 " keys", g->n_kv);
	int rc = 0;
	for (uint64_t i = 1; i < g->n_kv && rc == 0; i++)
		if (str_cmp(sorted[i - 1]->key, sorted[i]->key) == 0)
			rc = fail(p, "duplicate key '%s'", show(sorted[i]->key).s);
	free(sorted);
	return rc;
}

static int check_unique_tensor_names(struct parser *p)
{
	const struct bn_gguf *g = p->g;
	const struct bn_gguf_tensor **sorted = sorted_tensors(g, tensor_name_cmp);
	if (!sorted)
		return fail(p, "out of memory checking %" PRIu64 " tensors", g->n_tensors);
	int rc = 0;
	for (uint64_t i = 1; i < g->n_tensors && rc == 0; i++)
		if (str_cmp(sorted[i - 1]->name, sorted[i]->name) == 0)
			rc = fail(p, "duplicate tensor '%s'", show(sorted[i]->name).s);
	free(sorted);
	return rc;
}

/* Runs after every tensor is known to lie inside the file, so offset + size cannot overflow. */
static int check_no_overlap(struct parser *p)
{
	const struct bn_gguf *g = p->g;
	const struct bn_gguf_tensor **sorted = sorted_tensors(g, tensor_offset_cmp);
	if (!sorted)
		return fail(p, "out of memory checking %" PRIu64 " tensors", g->n_tensors);
	int rc = 0;
	for (uint64_t i = 1; i < g->n_tensors && rc == 0; i++) {
		const struct bn_gguf_tensor *a = sorted[i - 1], *b = sorted[i];
		if (a->offset + a->size > b->offset)
			rc = fail(p, "tensors '%s' and '%s' overlap", show(a->name).s,
				  show(b->name).s);
	}
	free(sorted);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Header and metadata                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* GGUF allows big-endian files, recognisable by a byte-swapped version; bitnetd reads only
 * little-endian ones. */
static int looks_big_endian(uint32_t version)
{
	uint32_t swapped = __builtin_bswap32(version);
	return swapped == 2 || swapped == 3;
}

static int parse_header(struct parser *p, uint64_t *n_kv, uint64_t *n_tensors)
{
	struct bn_gguf *g = p->g;
	uint32_t magic;
	strcpy(p->where, "header");
	if (take_u32(p, &magic) < 0)
		return -1;
	if (magic != BN_GGUF_MAGIC)
		return fail(p, "bad magic 0x%08" PRIx32 " (not a GGUF file)", magic);
	if (take_u32(p, &g->version) < 0)
		return -1;
	if (g->version != 2 && g->version != 3)
		return fail(p, "unsupported GGUF version %" PRIu32 " (versions 2 and 3 are read)%s",
			    g->version, looks_big_endian(g->version) ? "; a big-endian file?" : "");
	if (take_u64(p, n_tensors) < 0 || take_u64(p, n_kv) < 0)
		return -1;
	/* Refuse counts the file cannot hold before anything is allocated by them. */
	size_t left = bytes_left(p);
	if (*n_kv > left / KV_MIN_BYTES)
		return fail(p, "n_kv %" PRIu64 " runs past the end of the file (the %zu bytes "
			    "after the header hold at most %zu)", *n_kv, left, left / KV_MIN_BYTES);
	left -= (size_t)*n_kv * KV_MIN_BYTES;
	if (*n_tensors > left / TENSOR_INFO_MIN_BYTES)
		return fail(p, "n_tensors %" PRIu64 " runs past the end of the file (the %zu bytes "
			    "left for them hold at most %zu)", *n_tensors, left,
			    left / TENSOR_INFO_MIN_BYTES);
	return 0;
}

static int parse_metadata(struct parser *p, uint64_t n_kv)
{
	struct bn_gguf *g = p->g;
	if (n_kv == 0)
		return 0;
	g->kv = calloc(n_kv, sizeof(*g->kv));
	if (!g->kv)
		return fail(p, "out of memory for %" PRIu64 " metadata entries", n_kv);
	g->n_kv = n_kv;  /* entries not yet parsed are zero: bn_gguf_close can free them all */
	for (uint64_t i = 0; i < n_kv; i++)
		if (parse_kv(p, i, &g->kv[i]) < 0)
			return -1;
	return check_unique_keys(p);
}

static int read_alignment(struct parser *p)
{
	struct bn_gguf *g = p->g;
	const struct bn_gguf_kv *kv = bn_gguf_find_kv(g, "general.alignment");
	g->alignment = BN_GGUF_DEFAULT_ALIGNMENT;
	if (!kv)
		return 0;
	if (kv->type != BN_GGUF_UINT32)
		return fail(p, "general.alignment has type %s (must be UINT32)",
			    vtype_name(kv->type));
	if (kv->v.u64 == 0 || (kv->v.u64 & (kv->v.u64 - 1)) != 0)
		return fail(p, "general.alignment %" PRIu64 " is not a power of two", kv->v.u64);
	g->alignment = (uint32_t)kv->v.u64;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Tensor directory                                                                           */
/* ------------------------------------------------------------------------------------------ */

/* The shape and type: everything about a tensor that does not depend on where it lies. */
static int check_tensor_shape(struct parser *p, struct bn_gguf_tensor *t)
{
	struct shown_name shown = show(t->name);
	const char *name = shown.s;
	uint64_t n = 1;
	for (uint32_t d = 0; d < t->n_dims; d++) {
		if (t->ne[d] == 0)
			return fail(p, "tensor '%s' ne[%" PRIu32 "] is 0", name, d);
		if (__builtin_mul_overflow(n, t->ne[d], &n) || n > MAX_ELEMENTS)
			return fail(p, "tensor '%s' has too many elements (ne[%" PRIu32 "]=%"
				    PRIu64 ")", name, d, t->ne[d]);
	}
	t->n_elements = n;
	const char *type_name = bn_type_name(t->type);
	if (!type_name && (t->type == TL_TYPE_TL1 || t->type == TL_TYPE_TL2)) {
		/* Refused once the whole table is read: its other tensors say whose it is. */
		if (!p->tiled)
			p->tiled = t;
		return 0;
	}
	if (!type_name)
		return fail(p, "tensor '%s' has unknown type %" PRIu32, name, t->type);
	uint32_t block = bn_type_block_weights(t->type);
	if (t->ne[0] % block != 0)
		return fail(p, "tensor '%s' ne[0]=%" PRIu64 " is not a multiple of the %s block "
			    "(%" PRIu32 ")", name, t->ne[0], type_name, block);
	t->size = bn_tensor_bytes(t->type, n);
	if (t->size == 0)  /* a whole number of rows is a whole number of blocks: cannot happen */
		return fail(p, "tensor '%s' has no %s size for %" PRIu64 " weights", name,
			    type_name, n);
	return 0;
}

static int parse_tensor_info(struct parser *p, uint64_t index, struct bn_gguf_tensor *t)
{
	set_where(p, "tensor info", index);
	if (take_str(p, &t->name) < 0)
		return -1;
	set_where_name(p, "tensor", t->name);
	if (take_u32(p, &t->n_dims) < 0)
		return -1;
	/* 0 dimensions is a scalar, as in ggml (bitnet.cpp's converter writes each TL tensor's
	 * scale so). */
	if (t->n_dims > BN_GGUF_MAX_DIMS)
		return fail(p, "tensor '%s' has %" PRIu32 " dimensions (0 to %u allowed)",
			    show(t->name).s, t->n_dims, BN_GGUF_MAX_DIMS);
	for (uint32_t d = 0; d < BN_GGUF_MAX_DIMS; d++)
		t->ne[d] = 1;  /* the dimensions a tensor lacks count as 1, as in ggml */
	for (uint32_t d = 0; d < t->n_dims; d++)
		if (take_u64(p, &t->ne[d]) < 0)
			return -1;
	if (take_u32(p, &t->type) < 0 || take_u64(p, &t->offset) < 0)
		return -1;
	return check_tensor_shape(p, t);
}

/* Where the data lies: aligned, and wholly inside the file. */
static int place_tensor(struct parser *p, struct bn_gguf_tensor *t)
{
	const struct bn_gguf *g = p->g;
	uint64_t start, end;
	if (t->offset % g->alignment != 0)
		return fail(p, "tensor '%s' offset %" PRIu64 " is not aligned to %" PRIu32,
			    show(t->name).s, t->offset, g->alignment);
	if (__builtin_add_overflow(g->data_offset, t->offset, &start) ||
	    __builtin_add_overflow(start, t->size, &end))
		return fail(p, "tensor '%s' offset %" PRIu64 " + size %" PRIu64 " overflows",
			    show(t->name).s, t->offset, t->size);
	if (end > p->size)
		return fail(p, "tensor '%s' data [%" PRIu64 ", %" PRIu64 ") runs past the end of "
			    "the file (%zu bytes)", show(t->name).s, start, end, p->size);
	t->data = p->buf + start;
	return 0;
}

/* A tensor of type 38 or 39, refused with what it is. bitnet.cpp's converter writes each TL
 * tensor's scale as the F32 scalar "<name>_scale" after it, and the file's general.file_type
 * as the TL type itself; either mark makes the file bitnet.cpp's. */
static int refuse_tiled(struct parser *p, const struct bn_gguf_tensor *t)
{
	struct shown_name name = show(t->name);
	char scale[SHOWN_NAME_MAX + 16];
	snprintf(scale, sizeof(scale), "%.*s_scale", (int)t->name.len, t->name.ptr);
	uint32_t file_type = 0;
	int marked = (t->name.len <= SHOWN_NAME_MAX && bn_gguf_find_tensor(p->g, scale)) ||
		     (bn_gguf_get_u32(p->g, "general.file_type", &file_type) == 0 &&
		      file_type == t->type);
	if (!marked)
		return fail(p, "tensor '%s' has unknown type %" PRIu32 "%s", name.s, t->type,
			    t->type == TL_TYPE_TL2 ? " (upstream llama.cpp's MXFP4, which bitnetd does "
						     "not support)" : "");
	const char *tl = t->type == TL_TYPE_TL1 ? "TL1" : "TL2";
	return fail(p, "tensor '%s' is bitnet.cpp's %s (type %" PRIu32 "), tiled for the kernels "
		       "bitnet.cpp was built with; the tile sizes are not in the file, so it cannot "
		       "be read exactly. Use an I2_S file: bitnet.cpp writes one from the Hugging "
		       "Face checkpoint with: python utils/convert-hf-to-gguf-bitnet.py MODEL_DIR "
		       "--outtype i2_s", name.s, tl, t->type);
}

static int parse_tensors(struct parser *p, uint64_t n_tensors)
{
	struct bn_gguf *g = p->g;
	if (n_tensors > 0) {
		g->tensors = calloc(n_tensors, sizeof(*g->tensors));
		if (!g->tensors)
			return fail(p, "out of memory for %" PRIu64 " tensors", n_tensors);
		g->n_tensors = n_tensors;
	}
	for (uint64_t i = 0; i < n_tensors; i++)
		if (parse_tensor_info(p, i, &g->tensors[i]) < 0)
			return -1;
	if (check_unique_tensor_names(p) < 0)
		return -1;
	if (p->tiled)
		return refuse_tiled(p, p->tiled);
	/* pos is at most the buffer size and alignment at most 2^31: no overflow. */
	g->data_offset = ((uint64_t)p->pos + g->alignment - 1) & ~((uint64_t)g->alignment - 1);
	for (uint64_t i = 0; i < n_tensors; i++)
		if (place_tensor(p, &g->tensors[i]) < 0)
			return -1;
	return check_no_overlap(p);
}

/* ------------------------------------------------------------------------------------------ */
/* Open, parse, close                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* Keeps the end of a label too long for the field: the file name is what identifies it. */
static void copy_label(char *dst, size_t cap, const char *label)
{
	size_t len = strlen(label);
	if (len < cap)
		memcpy(dst, label, len + 1);
	else
		snprintf(dst, cap, "...%s", label + len - (cap - 4));
}

int bn_gguf_parse(struct bn_gguf *g, const void *buf, size_t size, const char *label,
		  char err[BN_GGUF_ERR_LEN])
{
	static const uint8_t empty[1];
	uint64_t n_kv = 0, n_tensors = 0;

	memset(g, 0, sizeof(*g));
	if (err)
		err[0] = '\0';
	copy_label(g->path, sizeof(g->path), label ? label : "(buffer)");
	if (!buf && size > 0)
		return fail_label(err, g->path, "no buffer for %zu bytes", size);
	g->base = buf ? buf : empty;  /* never NULL: pointer arithmetic on it stays defined */
	g->size = size;

	struct parser p = { .g = g, .buf = g->base, .size = size, .err = err };
	if (parse_header(&p, &n_kv, &n_tensors) < 0 || parse_metadata(&p, n_kv) < 0 ||
	    read_alignment(&p) < 0 || parse_tensors(&p, n_tensors) < 0) {
		bn_gguf_close(g);
		return -1;
	}
	return 0;
}

int bn_gguf_open(struct bn_gguf *g, const char *path, char err[BN_GGUF_ERR_LEN])
{
	struct stat st;
	memset(g, 0, sizeof(*g));
	/* O_NONBLOCK: a FIFO put where a model should be is refused below, not waited on. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return fail_label(err, path, "cannot open: %s", strerror(errno));
	if (fstat(fd, &st) < 0) {
		fail_label(err, path, "cannot stat: %s", strerror(errno));
		close(fd);
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		fail_label(err, path, "%s, not a GGUF file",
			   S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file");
		close(fd);
		return -1;
	}
	size_t size = (size_t)st.st_size;
	void *map = NULL;
	/* An empty file cannot be mapped; parsing it still gives the precise error. */
	if (size > 0) {
		map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (map == MAP_FAILED) {
			fail_label(err, path, "cannot map %zu bytes: %s", size, strerror(errno));
			close(fd);
			return -1;
		}
	}
	if (bn_gguf_parse(g, map, size, path, err) < 0) {
		if (map)
			munmap(map, size);
		close(fd);
		return -1;
	}
	g->mapped = map != NULL;
	if (g->mapped)
		g->fd = fd; /* kept with the mapping, for bn_gguf_read */
	else
		close(fd);
	return 0;
}

void bn_gguf_close(struct bn_gguf *g)
{
	if (!g)
		return;
	for (uint64_t i = 0; g->kv && i < g->n_kv; i++)
		if (g->kv[i].type == BN_GGUF_ARRAY)
			free((void *)g->kv[i].v.arr.str_offsets);
	free(g->kv);
	free(g->tensors);
	if (g->mapped) {
		munmap((void *)g->base, g->size);
		close(g->fd);
	}
	memset(g, 0, sizeof(*g));
}

void bn_gguf_read(const struct bn_gguf *g, const void *at, size_t len, void *out)
{
	size_t off = (size_t)((const uint8_t *)at - g->base), done = 0;
	while (g->mapped && done < len) {
		ssize_t n = pread(g->fd, (uint8_t *)out + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; /* an I/O error or a file cut short: the mapping's bytes below */
		done += (size_t)n;
	}
	if (done < len)
		memcpy((uint8_t *)out + done, (const uint8_t *)at + done, len - done);
}

/* ------------------------------------------------------------------------------------------ */
/* Lookups and typed getters                                                                  */
/* ------------------------------------------------------------------------------------------ */

int bn_gguf_str_eq(struct bn_gguf_str s, const char *c)
{
	size_t n = strlen(c);
	return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

const struct bn_gguf_kv *bn_gguf_find_kv(const struct bn_gguf *g, const char *key)
{
	for (uint64_t i = 0; i < g->n_kv; i++)
		if (bn_gguf_str_eq(g->kv[i].key, key))
			return &g->kv[i];
	return NULL;
}

const struct bn_gguf_tensor *bn_gguf_find_tensor(const struct bn_gguf *g, const char *name)
{
	for (uint64_t i = 0; i < g->n_tensors; i++)
		if (bn_gguf_str_eq(g->tensors[i].name, name))
			return &g->tensors[i];
	return NULL;
}

/* Any integer type, if it is not negative. */
static int kv_as_u64(const struct bn_gguf_kv *kv, uint64_t *out)
{
	switch (kv->type) {
	case BN_GGUF_UINT8: case BN_GGUF_UINT16: case BN_GGUF_UINT32: case BN_GGUF_UINT64:
		*out = kv->v.u64;
		return 0;
	case BN_GGUF_INT8: case BN_GGUF_INT16: case BN_GGUF_INT32: case BN_GGUF_INT64:
		if (kv->v.i64 < 0)
			return -EINVAL;
		*out = (uint64_t)kv->v.i64;
		return 0;
	default:
		return -EINVAL;
	}
}

int bn_gguf_get_u64(const struct bn_gguf *g, const char *key, uint64_t *out)
{
	const struct bn_gguf_kv *kv = bn_gguf_find_kv(g, key);
	return kv ? kv_as_u64(kv, out) : -ENOENT;
}

int bn_gguf_get_u32(const struct bn_gguf *g, const char *key, uint32_t *out)
{
	uint64_t v;
	int rc = bn_gguf_get_u64(g, key, &v);
	if (rc < 0)
		return rc;
	if (v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

int bn_gguf_get_f32(const struct bn_gguf *g, const char *key, float *out)
{
	const struct bn_gguf_kv *kv = bn_gguf_find_kv(g, key);
	if (!kv)
		return -ENOENT;
	if (kv->type != BN_GGUF_FLOAT32 && kv->type != BN_GGUF_FLOAT64)
		return -EINVAL;
	double v = kv->v.f64;
	/* A finite double beyond float's range does not fit; inf and nan carry over. */
	if (isfinite(v) && (v > FLT_MAX || v < -FLT_MAX))
		return -EINVAL;
	*out = (float)v;
	return 0;
}

int bn_gguf_get_bool(const struct bn_gguf *g, const char *key, int *out)
{
	const struct bn_gguf_kv *kv = bn_gguf_find_kv(g, key);
	if (!kv)
		return -ENOENT;
	if (kv->type != BN_GGUF_BOOL)
		return -EINVAL;
	*out = kv->v.u64 != 0;
	return 0;
}

int bn_gguf_get_str(const struct bn_gguf *g, const char *key, struct bn_gguf_str *out)
{
	const struct bn_gguf_kv *kv = bn_gguf_find_kv(g, key);
	if (!kv)
		return -ENOENT;
	if (kv->type != BN_GGUF_STRING)
		return -EINVAL;
	*out = kv->v.str;
	return 0;
}

/* Array element getters: -EINVAL for a kv that is not an array of the right kind, -ERANGE
 * for an index past the end. */
int bn_gguf_arr_str(const struct bn_gguf_kv *kv, uint64_t i, struct bn_gguf_str *out)
{
	if (kv->type != BN_GGUF_ARRAY || kv->v.arr.type != BN_GGUF_STRING ||
	    !kv->v.arr.str_offsets)
		return -EINVAL;
	if (i >= kv->v.arr.n)
		return -ERANGE;
	const uint8_t *elem = kv->v.arr.data + kv->v.arr.str_offsets[i];
	out->len = load_le64(elem);
	out->ptr = (const char *)elem + 8;
	return 0;
}

int bn_gguf_arr_num(const struct bn_gguf_kv *kv, uint64_t i, double *out)
{
	if (kv->type != BN_GGUF_ARRAY)
		return -EINVAL;
	uint64_t elem_size = bn_gguf_value_size(kv->v.arr.type);
	if (elem_size == 0)
		return -EINVAL;
	if (i >= kv->v.arr.n)
		return -ERANGE;
	struct bn_gguf_kv elem = { .type = kv->v.arr.type };
	load_scalar(elem.type, kv->v.arr.data + i * elem_size, &elem);
	*out = scalar_as_double(&elem);
	return 0;
}
