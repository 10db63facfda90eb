/* SPDX-License-Identifier: MIT */
/* wcache.c — the packed-weight cache file (wcache.h): its format, key, checks and writing. */
#define _GNU_SOURCE
#include "wcache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#define WC_MAGIC "BNWCACHE"
#define WC_HEADER_BYTES 8192u     /* the header struct, the model's path included */
#define WC_CHUNK_BYTES (1u << 20)  /* one hash per MiB: parallel checks, a small table */
#define WC_ALIGN 4096u             /* every blob starts on a page */
#define WC_MAX_ENTRIES (1u << 20)
#define WC_HUGE_BYTES (2u << 20)   /* a huge page: the writer's unit, the mapping's alignment */

/* ---- the file ----------------------------------------------------------------------------
 * [header: 4096 bytes][directory: n_entries x 32][chunk table: n_chunks x 8][pad][data ...]
 * Fields are the machine's own byte order: a cache never leaves the machine that wrote it. */

struct bn_wcache_entry {
	uint32_t tag;             /* enum bn_wcache_tag */
	uint32_t reserved;        /* 0 */
	uint64_t offset;          /* from the start of the file, a multiple of WC_ALIGN */
	uint64_t size;
	uint64_t reserved2;       /* 0 */
};
_Static_assert(sizeof(struct bn_wcache_entry) == 32, "wcache entry");

struct wc_header {
	char magic[8];
	uint32_t version;         /* BN_WCACHE_VERSION */
	uint32_t header_bytes;    /* WC_HEADER_BYTES */
	uint64_t file_size;
	uint64_t dev, ino, size, mtime_ns, ctime_ns, header_hash; /* struct bn_wcache_key */
	uint32_t options;
	uint32_t contents;        /* BN_WCACHE_HAS_* */
	char kernels[16];
	uint32_t n_entries;
	uint32_t chunk_bytes;     /* WC_CHUNK_BYTES */
	uint64_t dir_offset;      /* WC_HEADER_BYTES */
	uint64_t chunks_offset;   /* the chunk table */
	uint64_t n_chunks;
	uint64_t data_offset;     /* the first byte the chunks cover */
	uint64_t meta_hash;       /* XXH3-64 of the header (this field 0), directory, chunk table */
	char model_path[PATH_MAX]; /* struct bn_wcache_key's model, zero-padded */
};
_Static_assert(sizeof(struct wc_header) <= WC_HEADER_BYTES, "wcache header");
/* No padding: meta_hash hashes the struct's bytes. */
_Static_assert(sizeof(struct wc_header) == offsetof(struct wc_header, model_path) + PATH_MAX,
	       "wcache header padding");

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static void set_why(char *why, const char *fmt, const char *a)
{
	snprintf(why, BN_WCACHE_WHY_LEN, fmt, a);
}

/* ---- key, directory, name ---------------------------------------------------------------- */

/* A file's identity, as a key holds it. */
static void identity_of(const struct stat *st, struct bn_wcache_key *k)
{
	k->dev = (uint64_t)st->st_dev;
	k->ino = (uint64_t)st->st_ino;
	k->size = (uint64_t)st->st_size;
	k->mtime_ns = (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
	k->ctime_ns = (uint64_t)st->st_ctim.tv_sec * 1000000000u + (uint64_t)st->st_ctim.tv_nsec;
}

int bn_wcache_key_of(const struct bn_gguf *g, const char *model_path, const char *kernels,
		     uint32_t options, struct bn_wcache_key *out)
{
	struct stat st;
	if (!g->mapped || fstat(g->fd, &st) < 0)
		return g->mapped ? -errno : -EINVAL;
	memset(out, 0, sizeof(*out));
	identity_of(&st, out);
	out->header_hash = XXH3_64bits(g->base, g->data_offset);
	out->options = options;
	snprintf(out->kernels, sizeof(out->kernels), "%s", kernels);
	/* The path as given where it cannot be resolved (it was just opened: hardly ever). */
	if (!realpath(model_path, out->model) &&
	    snprintf(out->model, sizeof(out->model), "%s", model_path) >= (int)sizeof(out->model))
		return -ENAMETOOLONG;
	return 0;
}

static int copy_dir(char *out, size_t cap, const char *a, const char *b)
{
	int n = snprintf(out, cap, "%s%s", a, b);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int bn_wcache_dir(const char *opt, char *out, size_t cap)
{
	if (opt)
		return strcmp(opt, "none") == 0 ? copy_dir(out, cap, "", "")
						: copy_dir(out, cap, opt, "");
	const char *v = getenv("CACHE_DIRECTORY");
	if (v && *v) {
		size_t n = strcspn(v, ":");
		if (n >= cap)
			return -ENAMETOOLONG;
		memcpy(out, v, n);
		out[n] = 0;
		return 0;
	}
	v = getenv("XDG_CACHE_HOME");
	if (v && v[0] == '/') /* the spec ignores a relative value */
		return copy_dir(out, cap, v, "/bitnetd");
	v = getenv("HOME");
	if (v && *v)
		return copy_dir(out, cap, v, "/.cache/bitnetd");
	return -ENOENT;
}

int bn_wcache_path(const char *dir, const char *model_path, const struct bn_wcache_key *k,
		   char *out, size_t cap)
{
	char base[65];
	const char *slash = strrchr(model_path, '/');
	const char *name = slash ? slash + 1 : model_path;
	size_t n = 0;
	for (; name[n] && n < sizeof(base) - 1; n++) /* a readable name, nothing a shell minds */
		base[n] = (name[n] >= 'a' && name[n] <= 'z') || (name[n] >= 'A' && name[n] <= 'Z') ||
					  (name[n] >= '0' && name[n] <= '9') || name[n] == '.' ||
					  name[n] == '_' || name[n] == '-'
				  ? name[n]
				  : '_';
	base[n] = 0;
	int len = snprintf(out, cap, "%s/%s.%016llx.o%u.%s.wcache", dir, base,
			   (unsigned long long)XXH3_64bits(k->model, strlen(k->model)), k->options,
			   k->kernels);
	return len < 0 || (size_t)len >= cap ? -ENAMETOOLONG : 0;
}

/* ---- checking a file --------------------------------------------------------------------- */

static uint64_t meta_hash(const struct wc_header *h, const void *dir, const void *chunks)
{
	struct wc_header copy = *h;
	copy.meta_hash = 0;
	XXH3_state_t *st = XXH3_createState();
	if (!st)
		return 0;
	XXH3_64bits_reset(st);
	XXH3_64bits_update(st, &copy, sizeof(copy));
	XXH3_64bits_update(st, dir, (size_t)h->n_entries * sizeof(struct bn_wcache_entry));
	XXH3_64bits_update(st, chunks, (size_t)h->n_chunks * sizeof(uint64_t));
	uint64_t v = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	return v;
}

/* The model file h was built from is the one k names (its identity). */
static int same_file(const struct wc_header *h, const struct bn_wcache_key *k)
{
	return h->dev == k->dev && h->ino == k->ino && h->size == k->size &&
	       h->mtime_ns == k->mtime_ns && h->ctime_ns == k->ctime_ns;
}

static int key_equal(const struct wc_header *h, const struct bn_wcache_key *k)
{
	return same_file(h, k) && h->header_hash == k->header_hash && h->options == k->options &&
	       memcmp(h->kernels, k->kernels, sizeof(h->kernels)) == 0 &&
	       strncmp(h->model_path, k->model, sizeof(h->model_path)) == 0;
}

/* The header's regions lie inside the file, in order, and every blob inside the data. */
static int layout_ok(const struct wc_header *h, const struct bn_wcache_entry *dir, size_t size)
{
	uint64_t dir_end = h->dir_offset + (uint64_t)h->n_entries * sizeof(*dir);
	if (h->header_bytes != WC_HEADER_BYTES || h->chunk_bytes != WC_CHUNK_BYTES ||
	    h->file_size != size || h->dir_offset != WC_HEADER_BYTES ||
	    h->n_entries > WC_MAX_ENTRIES || h->chunks_offset != dir_end ||
	    h->n_chunks > size / sizeof(uint64_t) ||
	    h->data_offset != align_up(h->chunks_offset + h->n_chunks * sizeof(uint64_t), WC_ALIGN) ||
	    h->data_offset > size ||
	    h->n_chunks != (size - h->data_offset + WC_CHUNK_BYTES - 1) / WC_CHUNK_BYTES)
		return 0;
	for (uint32_t i = 0; i < h->n_entries; i++)
		if (dir[i].offset % WC_ALIGN || dir[i].offset < h->data_offset ||
		    dir[i].offset > size || dir[i].size > size - dir[i].offset || dir[i].reserved ||
		    dir[i].reserved2)
			return 0;
	return 1;
}

struct verify_job {
	bn_wcache_hash_fn hash64;
	const uint8_t *data;      /* the first chunk */
	uint64_t data_size;
	const uint64_t *want;     /* [n_chunks] */
	uint64_t n_chunks;
	uint32_t n_tasks;
	int populate;             /* MADV_POPULATE_READ works here (Linux 5.14 and later) */
	int bad;                  /* set by any task that finds a chunk that differs */
};

/* Maps a chunk's pages before hashing it: one call per chunk instead of a fault per page,
 * on every pool thread at once (MAP_POPULATE would do the whole file on the caller's).
 * Where the page cache holds the file in 2 MiB folios (the writer's windows) each is one
 * PMD, and this is nearly free. A kernel without MADV_POPULATE_READ faults the pages in
 * as the hash reads them. */
static void populate(struct verify_job *j, const uint8_t *p, uint64_t n)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)p & ~(page - 1), hi = (uintptr_t)p + n;
	if (__atomic_load_n(&j->populate, __ATOMIC_RELAXED) &&
	    madvise((void *)lo, hi - lo, MADV_POPULATE_READ) < 0 && errno == EINVAL)
		__atomic_store_n(&j->populate, 0, __ATOMIC_RELAXED);
}

static void verify_task(void *ctx, uint32_t task)
{
	struct verify_job *j = ctx;
	for (uint64_t c = task; c < j->n_chunks; c += j->n_tasks) {
		uint64_t at = c * WC_CHUNK_BYTES;
		uint64_t n = j->data_size - at < WC_CHUNK_BYTES ? j->data_size - at : WC_CHUNK_BYTES;
		uint64_t want;
		memcpy(&want, &j->want[c], sizeof(want));
		populate(j, j->data + at, n);
		if (j->hash64(j->data + at, (size_t)n) != want)
			__atomic_store_n(&j->bad, 1, __ATOMIC_RELAXED);
	}
}

static uint64_t library_hash64(const void *p, size_t n)
{
	return XXH3_64bits(p, n);
}

static int verify_chunks(const struct wc_header *h, const uint8_t *base, struct bn_pool *pool,
			 bn_wcache_hash_fn hash64)
{
	struct verify_job j = { .hash64 = hash64 ? hash64 : library_hash64,
				.data = base + h->data_offset, .data_size = h->file_size - h->data_offset,
				.want = (const uint64_t *)(const void *)(base + h->chunks_offset),
				.n_chunks = h->n_chunks, .populate = 1 };
	uint32_t threads = pool ? bn_pool_threads(pool) : 1;
	j.n_tasks = (uint32_t)(j.n_chunks < 4u * threads ? (j.n_chunks ? j.n_chunks : 1) : 4u * threads);
	if (pool)
		bn_pool_run(pool, j.n_tasks, verify_task, &j);
	else
		for (uint32_t t = 0; t < j.n_tasks; t++)
			verify_task(&j, t);
	return j.bad ? -EBADMSG : 0;
}

/* A read-only shared mapping of fd at an address aligned to WC_HUGE_BYTES, so that the page
 * cache's 2 MiB folios of the file (written whole by the writer) can be mapped as huge pages:
 * a start maps the weights with a PMD per 2 MiB instead of 512 page table entries, and the
 * forward pass walks fewer TLB entries. MAP_FAILED and errno when it cannot be mapped. */
static void *map_aligned(int fd, size_t size)
{
	size_t span = size + WC_HUGE_BYTES;
	uint8_t *area = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			     -1, 0);
	if (area == MAP_FAILED)
		return MAP_FAILED;
	uint8_t *at = (uint8_t *)(((uintptr_t)area + WC_HUGE_BYTES - 1) & ~(uintptr_t)(WC_HUGE_BYTES - 1));
	void *p = mmap(at, size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		munmap(area, span);
		errno = e;
		return MAP_FAILED;
	}
	size_t page = (size_t)sysconf(_SC_PAGESIZE), end = (size + page - 1) & ~(page - 1);
	if (at > area)
		munmap(area, (size_t)(at - area));
	if (at + end < area + span)
		munmap(at + end, (size_t)(area + span - (at + end)));
	return p;
}

static int map_file(const char *path, const uint8_t **base, size_t *size, char *why)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		if (e != ENOENT)
			set_why(why, "cannot open it: %s", strerror(e));
		return -e;
	}
	struct stat st;
	int rc = fstat(fd, &st) < 0 ? -errno : 0;
	if (rc == 0 && (uint64_t)st.st_size < WC_HEADER_BYTES) {
		set_why(why, "%s", "it is shorter than its header (torn or empty)");
		rc = -EBADMSG;
	}
	void *p = MAP_FAILED;
	if (rc == 0) {
		/* Not populated here: the checks populate each chunk on the pool (verify_task). */
		p = map_aligned(fd, (size_t)st.st_size);
		rc = p == MAP_FAILED ? -errno : 0;
		if (rc)
			set_why(why, "cannot map it: %s", strerror(-rc));
	}
	close(fd);
	if (rc == 0) {
		*base = p;
		*size = (size_t)st.st_size;
	}
	return rc;
}

int bn_wcache_open(struct bn_wcache *c, const char *path, const struct bn_wcache_key *k,
		   struct bn_pool *pool, bn_wcache_hash_fn hash64, char why[BN_WCACHE_WHY_LEN])
{
	memset(c, 0, sizeof(*c));
	why[0] = 0;
	const uint8_t *base = NULL;
	size_t size = 0;
	int rc = map_file(path, &base, &size, why);
	if (rc < 0)
		return rc;
	struct wc_header h;
	memcpy(&h, base, sizeof(h));
	const struct bn_wcache_entry *dir = (const void *)(base + WC_HEADER_BYTES);
	if (memcmp(h.magic, WC_MAGIC, 8) != 0) {
		set_why(why, "%s", "it is not a bitnetd weights cache");
		rc = -EBADMSG;
	} else if (h.version != BN_WCACHE_VERSION || !key_equal(&h, k)) {
		set_why(why, "%s", h.version != BN_WCACHE_VERSION
					   ? "it has another layout version"
					   : "it was built from another file, options or kernel variant");
		rc = -ESTALE;
	} else if (!layout_ok(&h, dir, size) ||
		   meta_hash(&h, dir, base + h.chunks_offset) != h.meta_hash) {
		set_why(why, "%s", "its header does not add up (torn or corrupt)");
		rc = -EBADMSG;
	} else if (verify_chunks(&h, base, pool, hash64) < 0) {
		set_why(why, "%s", "a chunk of its data differs from its hash (corrupt)");
		rc = -EBADMSG;
	}
	if (rc < 0) {
		munmap((void *)base, size);
		return rc;
	}
	*c = (struct bn_wcache){ .base = base, .size = size, .contents = h.contents,
				 .n_entries = h.n_entries, .dir = dir };
	return 0;
}

void bn_wcache_close(struct bn_wcache *c)
{
	if (c->base)
		munmap((void *)c->base, c->size);
	memset(c, 0, sizeof(*c));
}

const void *bn_wcache_take(struct bn_wcache *c, enum bn_wcache_tag tag, uint64_t size)
{
	if (c->next >= c->n_entries)
		return NULL;
	const struct bn_wcache_entry *e = &c->dir[c->next];
	if (e->tag != (uint32_t)tag || e->size != size)
		return NULL;
	c->next++;
	return c->base + e->offset;
}

int bn_wcache_taken_all(const struct bn_wcache *c)
{
	return c->next == c->n_entries;
}

/* ---- writing ----------------------------------------------------------------------------- */

static int pwrite_all(int fd, const void *p, size_t n, off_t at)
{
	for (size_t done = 0; done < n;) {
		ssize_t w = pwrite(fd, (const uint8_t *)p + done, n - done, at + (off_t)done);
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		done += (size_t)w;
	}
	return 0;
}

/* The data goes out in windows of WC_HUGE_BYTES aligned in the file, one pwritev each: a
 * filesystem with large folios (ext4, xfs) then keeps each window in the page cache as one
 * 2 MiB folio, which a later start maps as one huge page (map_aligned). Written in 1 MiB
 * pieces, the same file came back in 512 page table entries per 2 MiB, and populating them
 * cost more than hashing the data. */
#define WC_WINDOW_IOVS 64

struct write_job {
	int fd;
	const struct bn_wcache_blob *blobs;
	const struct bn_wcache_entry *dir;
	uint32_t n_blobs;
	uint32_t blob;            /* the first blob that ends past what is written */
	uint64_t data_offset, data_size, n_chunks;
	uint64_t *hashes;         /* [n_chunks] */
	uint64_t at;              /* the file offset hashed and queued up to */
	XXH3_state_t *st;         /* the chunk that holds `at` */
	struct iovec iov[WC_WINDOW_IOVS];
	uint32_t n_iov;
	uint64_t iov_at;          /* the file offset of iov[0] */
	const int *stop;          /* NULL, or set when the write is to give up */
};

static int pwritev_all(int fd, struct iovec *iov, int n, off_t at)
{
	while (n > 0) {
		ssize_t w = pwritev(fd, iov, n, at);
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		at += w;
		for (; n > 0 && (size_t)w >= iov->iov_len; iov++, n--)
			w -= (ssize_t)iov->iov_len;
		if (n > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

static int flush_iov(struct write_job *j)
{
	int rc = pwritev_all(j->fd, j->iov, (int)j->n_iov, (off_t)j->iov_at);
	j->n_iov = 0;
	return rc;
}

/* n bytes at p are the file's from j->at on: hashed into their chunks, queued for the write. */
static int put(struct write_job *j, const uint8_t *p, uint64_t n)
{
	if (j->n_iov == WC_WINDOW_IOVS) { /* a window of many small blobs: written in parts */
		int rc = flush_iov(j);
		if (rc < 0)
			return rc;
	}
	if (j->n_iov == 0)
		j->iov_at = j->at;
	j->iov[j->n_iov++] = (struct iovec){ (void *)p, (size_t)n };
	while (n) {
		uint64_t chunk = (j->at - j->data_offset) / WC_CHUNK_BYTES;
		uint64_t chunk_end = j->data_offset + (chunk + 1) * WC_CHUNK_BYTES;
		uint64_t take = chunk_end - j->at < n ? chunk_end - j->at : n;
		XXH3_64bits_update(j->st, p, (size_t)take);
		p += take;
		n -= take;
		j->at += take;
		if (j->at == chunk_end || j->at == j->data_offset + j->data_size) {
			j->hashes[chunk] = XXH3_64bits_digest(j->st);
			XXH3_64bits_reset(j->st);
		}
	}
	return 0;
}

/* The file from j->at to hi: the blobs' bytes where they lie, zeros in the padding between
 * them (less than WC_ALIGN each). 0 or -errno. */
static int put_window(struct write_job *j, uint64_t hi)
{
	static const uint8_t zeros[WC_ALIGN];
	while (j->at < hi) {
		const struct bn_wcache_entry *e = j->blob < j->n_blobs ? &j->dir[j->blob] : NULL;
		uint64_t b0 = e ? e->offset : hi, b1 = e ? e->offset + e->size : hi;
		int rc;
		if (j->at < b0) {
			uint64_t end = b0 < hi ? b0 : hi;
			rc = put(j, zeros, end - j->at);
		} else {
			uint64_t end = b1 < hi ? b1 : hi;
			rc = put(j, (const uint8_t *)j->blobs[j->blob].data + (j->at - b0), end - j->at);
			if (j->at == b1)
				j->blob++;
		}
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Every window in turn, until one fails or *stop is set. 0 or an errno. */
static int write_chunks(struct write_job *j)
{
	j->st = XXH3_createState();
	int e = j->st ? 0 : ENOMEM;
	if (e == 0)
		XXH3_64bits_reset(j->st);
	uint64_t end = j->data_offset + j->data_size;
	j->at = j->data_offset;
	while (e == 0 && j->at < end) {
		if (j->stop && __atomic_load_n(j->stop, __ATOMIC_RELAXED)) {
			e = ECANCELED;
			break;
		}
		uint64_t hi = (j->at / WC_HUGE_BYTES + 1) * WC_HUGE_BYTES;
		int rc = put_window(j, hi < end ? hi : end);
		if (rc == 0)
			rc = flush_iov(j);
		e = -rc;
	}
	XXH3_freeState(j->st);
	return e;
}

/* mkdir -p for the cache directory. */
static int make_dirs(const char *file)
{
	char d[PATH_MAX];
	snprintf(d, sizeof(d), "%s", file);
	char *slash = strrchr(d, '/');
	if (!slash || slash == d)
		return 0;
	*slash = 0;
	for (char *p = d + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(d, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return mkdir(d, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

/* The header and directory of blobs laid out after it; *dir is allocated. */
static int plan(const struct bn_wcache_key *k, uint32_t contents,
		const struct bn_wcache_blob *blobs, uint32_t n, struct wc_header *h,
		struct bn_wcache_entry **dir)
{
	if (n > WC_MAX_ENTRIES)
		return -EINVAL;
	*dir = calloc(n ? n : 1, sizeof(**dir));
	if (!*dir)
		return -ENOMEM;
	uint64_t data = 0;
	for (uint32_t i = 0; i < n; i++) {
		(*dir)[i] = (struct bn_wcache_entry){ .tag = blobs[i].tag, .offset = data,
						      .size = blobs[i].size };
		data = align_up(data + blobs[i].size, WC_ALIGN);
	}
	uint64_t n_chunks = (data + WC_CHUNK_BYTES - 1) / WC_CHUNK_BYTES;
	uint64_t chunks_offset = WC_HEADER_BYTES + (uint64_t)n * sizeof(**dir);
	uint64_t data_offset = align_up(chunks_offset + n_chunks * sizeof(uint64_t), WC_ALIGN);
	for (uint32_t i = 0; i < n; i++)
		(*dir)[i].offset += data_offset;
	*h = (struct wc_header){ .version = BN_WCACHE_VERSION, .header_bytes = WC_HEADER_BYTES,
				 .file_size = data_offset + data, .dev = k->dev, .ino = k->ino,
				 .size = k->size, .mtime_ns = k->mtime_ns, .ctime_ns = k->ctime_ns,
				 .header_hash = k->header_hash, .options = k->options,
				 .contents = contents, .n_entries = n, .chunk_bytes = WC_CHUNK_BYTES,
				 .dir_offset = WC_HEADER_BYTES, .chunks_offset = chunks_offset,
				 .n_chunks = n_chunks, .data_offset = data_offset };
	memcpy(h->magic, WC_MAGIC, 8);
	memcpy(h->kernels, k->kernels, sizeof(h->kernels));
	snprintf(h->model_path, sizeof(h->model_path), "%s", k->model);
	return 0;
}

/* The data, then the header, directory and chunk table. */
static int write_body(int fd, struct wc_header *h, const struct bn_wcache_entry *dir,
		      const struct bn_wcache_blob *blobs, uint32_t n, const int *stop)
{
	if (ftruncate(fd, (off_t)h->file_size) < 0)
		return -errno;
	/* Reserved up front: a full disk fails here, not half-way through. */
	int rc = posix_fallocate(fd, 0, (off_t)h->file_size);
	if (rc && rc != EOPNOTSUPP && rc != EINVAL)
		return -rc;
	struct write_job j = { .fd = fd, .blobs = blobs, .dir = dir, .n_blobs = n,
			       .data_offset = h->data_offset,
			       .data_size = h->file_size - h->data_offset, .n_chunks = h->n_chunks,
			       .stop = stop };
	j.hashes = calloc(h->n_chunks ? h->n_chunks : 1, sizeof(uint64_t));
	if (!j.hashes)
		return -ENOMEM;
	rc = -write_chunks(&j);
	if (rc == 0) {
		h->meta_hash = meta_hash(h, dir, j.hashes);
		uint8_t head[WC_HEADER_BYTES] = { 0 };
		memcpy(head, h, sizeof(*h));
		rc = pwrite_all(fd, head, sizeof(head), 0);
		if (rc == 0)
			rc = pwrite_all(fd, dir, (size_t)n * sizeof(*dir), (off_t)h->dir_offset);
		if (rc == 0)
			rc = pwrite_all(fd, j.hashes, (size_t)h->n_chunks * sizeof(uint64_t),
					(off_t)h->chunks_offset);
	}
	free(j.hashes);
	return rc;
}

/* The pid in a writer's temporary file's name, "<cache>.wcache.tmp.PID.XXXXXX"
 * (bn_wcache_write), or 0 when name is not one. */
static long writer_of(const char *name)
{
	static const char mark[] = ".wcache.tmp.";
	const char *t = strstr(name, mark);
	if (!t)
		return 0;
	t += sizeof(mark) - 1;
	char *end = NULL;
	long pid = *t >= '1' && *t <= '9' ? strtol(t, &end, 10) : 0;
	return pid > 0 && pid <= INT_MAX && *end == '.' && strlen(end + 1) == 6 ? pid : 0;
}

/* The process is gone (a process of another user is there: EPERM). */
static int writer_gone(long pid)
{
	return kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

/* Temporary files of this cache name left by writers that died (SIGKILL, a crash): the
 * writer's pid is in the name, and a live writer's file is left alone. */
static void remove_orphans(const char *path)
{
	char dir[PATH_MAX], prefix[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash)
		return;
	*slash = 0;
	int n = snprintf(prefix, sizeof(prefix), "%s.tmp.", slash + 1);
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && n > 0 && (e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, prefix, (size_t)n) != 0)
			continue;
		long pid = writer_of(e->d_name);
		if (pid == 0 || writer_gone(pid))
			unlinkat(dirfd(d), e->d_name, 0);
	}
	if (d)
		closedir(d);
}

int bn_wcache_write(const char *path, const struct bn_wcache_key *k, uint32_t contents,
		    const struct bn_wcache_blob *blobs, uint32_t n, const int *stop,
		    char why[BN_WCACHE_WHY_LEN])
{
	why[0] = 0;
	struct wc_header h;
	struct bn_wcache_entry *dir;
	int rc = make_dirs(path);
	if (rc < 0) {
		set_why(why, "cannot make its directory: %s", strerror(-rc));
		return rc;
	}
	rc = plan(k, contents, blobs, n, &h, &dir);
	if (rc < 0) {
		set_why(why, "%s", "no memory to plan it");
		return rc;
	}
	char tmp[PATH_MAX];
	int fd = -1;
	remove_orphans(path);
	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d.XXXXXX", path, (int)getpid()) >= (int)sizeof(tmp))
		rc = -ENAMETOOLONG;
	else if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0)
		rc = -errno;
	if (rc == 0) {
		rc = write_body(fd, &h, dir, blobs, n, stop);
		if (close(fd) < 0 && rc == 0)
			rc = -errno;
		/* The rename is the commit: a reader sees the old file or the whole new one. */
		if (rc == 0 && rename(tmp, path) < 0)
			rc = -errno;
		if (rc < 0)
			unlink(tmp);
	}
	if (rc == -ECANCELED)
		set_why(why, "%s", "the daemon stopped before it was written");
	else if (rc < 0)
		set_why(why, "cannot write it: %s", strerror(-rc));
	free(dir);
	return rc;
}

/* ---- pruning a directory ------------------------------------------------------------------
 * A cache is removed only once no daemon can ever use it; one that a daemon has mapped can be
 * removed all the same: a MAP_SHARED mapping of an unlinked file stays valid until it is
 * unmapped (the disk is freed then), so a daemon serving from it goes on unharmed. */

static void set_fate(struct bn_wcache_file *f, enum bn_wcache_fate fate, const char *fmt,
		     const char *a)
{
	f->fate = fate;
	set_why(f->why, fmt, a);
}

/* The model file a cache names (h, which adds up), against the key it was built under. */
static void judge_model(const struct wc_header *h, struct bn_wcache_file *f)
{
	struct stat st;
	struct bn_wcache_key now = { 0 };
	if (!f->model[0]) {
		set_fate(f, BN_WCACHE_KEPT, "%s", "it names no model file");
		return;
	}
	/* Followed, as the daemon's open follows it: what a start would find there. */
	if (stat(f->model, &st) < 0) {
		int e = errno;
		if (e == ENOENT || e == ENOTDIR)
			set_fate(f, BN_WCACHE_DEAD, "%s", "its model file is gone");
		else
			set_fate(f, BN_WCACHE_KEPT, "its model file cannot be looked at: %s",
				 strerror(e));
		return;
	}
	identity_of(&st, &now);
	if (!same_file(h, &now))
		set_fate(f, BN_WCACHE_DEAD, "%s", "its model file was replaced or changed since");
}

static int pread_all(int fd, void *p, size_t n, off_t at)
{
	for (size_t done = 0; done < n;) {
		ssize_t r = pread(fd, (uint8_t *)p + done, n - done, at + (off_t)done);
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		done += (size_t)r;
	}
	return 0;
}

/* The header, directory and chunk table of fd (size bytes) into *meta (allocated), when their
 * sizes can be those of a file of that size: 0, or -EBADMSG, -ENOMEM, -errno. Read, not
 * mapped: a file cut short meanwhile is a short read here, not a SIGBUS in a daemon. */
static int read_meta(int fd, uint64_t size, uint8_t **meta)
{
	struct wc_header h;
	int rc = pread_all(fd, &h, sizeof(h), 0);
	if (rc < 0)
		return rc;
	uint64_t chunks_offset = WC_HEADER_BYTES + (uint64_t)h.n_entries * sizeof(struct bn_wcache_entry);
	if (h.n_entries > WC_MAX_ENTRIES || h.n_chunks > size / WC_CHUNK_BYTES + 1 ||
	    h.data_offset > size ||
	    h.data_offset != align_up(chunks_offset + h.n_chunks * sizeof(uint64_t), WC_ALIGN))
		return -EBADMSG;
	*meta = malloc((size_t)h.data_offset);
	if (!*meta)
		return -ENOMEM;
	rc = pread_all(fd, *meta, (size_t)h.data_offset, 0);
	if (rc < 0) {
		free(*meta);
		*meta = NULL;
	}
	return rc;
}

/* A header of this version, from fd (size bytes): its regions and meta hash, as
 * bn_wcache_open checks them, then its model. */
static void judge_header(int fd, uint64_t size, struct bn_wcache_file *f)
{
	if (size < WC_HEADER_BYTES) {
		set_fate(f, BN_WCACHE_DEAD, "%s", "it is shorter than its header (truncated)");
		return;
	}
	uint8_t *meta = NULL;
	int rc = read_meta(fd, size, &meta);
	if (rc < 0 && rc != -EBADMSG) {
		set_fate(f, BN_WCACHE_KEPT, "cannot read it: %s", strerror(-rc));
		return;
	}
	struct wc_header h;
	int adds_up = rc == 0;
	if (adds_up) {
		memcpy(&h, meta, sizeof(h));
		const struct bn_wcache_entry *dir = (const void *)(meta + WC_HEADER_BYTES);
		adds_up = layout_ok(&h, dir, (size_t)size) &&
			  meta_hash(&h, dir, meta + h.chunks_offset) == h.meta_hash;
	}
	if (!adds_up) {
		set_fate(f, BN_WCACHE_DEAD, "%s", "its header does not add up (torn or corrupt)");
	} else {
		f->options = h.options;
		memcpy(f->kernels, h.kernels, sizeof(h.kernels));
		memcpy(f->model, h.model_path, sizeof(f->model) - 1);
		judge_model(&h, f);
	}
	free(meta);
}

/* A regular file named *.wcache, open as fd: 0 when it is not a cache (no magic). One that
 * is shorter than its header is dead: a *.wcache name only ever appears by the writer's rename
 * of a whole file, so it was cut short afterwards (a copy onto a full disk, a crash of the
 * tool that copied it); every open refuses it, it never becomes usable again, and its magic
 * says it is a cache's. */
static int judge_cache(int fd, uint64_t size, struct bn_wcache_file *f)
{
	struct {
		char magic[8];
		uint32_t version;
	} head;
	ssize_t n = pread(fd, &head, sizeof(head), 0);
	if (n < (ssize_t)sizeof(head.magic) || memcmp(head.magic, WC_MAGIC, 8) != 0)
		return 0;
	char v[32];
	f->version = n == (ssize_t)sizeof(head) ? head.version : 0;
	snprintf(v, sizeof(v), "%u", f->version);
	if (n < (ssize_t)sizeof(head))
		set_fate(f, BN_WCACHE_DEAD, "%s", "it is shorter than its header (truncated)");
	else if (f->version < BN_WCACHE_VERSION)
		set_fate(f, BN_WCACHE_DEAD, "it has an older layout version (%s)", v);
	else if (f->version > BN_WCACHE_VERSION)
		set_fate(f, BN_WCACHE_KEPT, "it has a newer layout version (%s): another bitnetd's", v);
	else
		judge_header(fd, size, f);
	return 1;
}

/* Removes name if it is still the file looked at (st): a daemon may have renamed a new
 * cache over it since (between this check and the unlink there is no way to be sure; the
 * worst case is a start that builds that cache again). 1, or -errno. */
static int remove_same(int dfd, const char *name, const struct stat *st)
{
	struct stat now;
	if (fstatat(dfd, name, &now, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (now.st_dev != st->st_dev || now.st_ino != st->st_ino)
		return -EBUSY;
	return unlinkat(dfd, name, 0) < 0 ? -errno : 1;
}

static int ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), m = strlen(tail);
	return n > m && strcmp(s + n - m, tail) == 0;
}

/* What name in dfd is: 0 when it is nothing to report (not a regular file of a cache's or a
 * writer's name, not a cache), else 1 with *f filled. */
static int look_at(int dfd, const char *name, struct stat *st, struct bn_wcache_file *f)
{
	long pid = writer_of(name);
	if ((!pid && !ends_with(name, ".wcache")) ||
	    fstatat(dfd, name, st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st->st_mode))
		return 0;
	memset(f, 0, sizeof(*f));
	f->name = name;
	f->bytes = (uint64_t)st->st_size;
	if (pid) { /* no magic yet: the header is written last */
		char p[32];
		snprintf(p, sizeof(p), "%ld", pid);
		f->temporary = 1;
		if (writer_gone(pid))
			set_fate(f, BN_WCACHE_DEAD, "a temporary file of a writer that died (pid %s)", p);
		else
			set_why(f->why, "being written (pid %s)", p);
		return 1;
	}
	/* O_NOFOLLOW and O_NONBLOCK: the name may have become a link or a FIFO since. */
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return 0;
	struct stat fst;
	int ours = fstat(fd, &fst) == 0 && S_ISREG(fst.st_mode) && fst.st_dev == st->st_dev &&
		   fst.st_ino == st->st_ino && judge_cache(fd, (uint64_t)fst.st_size, f);
	close(fd);
	return ours;
}

int bn_wcache_prune(const char *dir, int remove, bn_wcache_file_fn each, void *ctx)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	struct dirent **names;
	int n = scandirat(dfd, ".", &names, NULL, alphasort);
	int rc = n < 0 ? -errno : 0;
	for (int i = 0; i < n; i++) {
		struct bn_wcache_file f;
		struct stat st;
		if (look_at(dfd, names[i]->d_name, &st, &f)) {
			if (remove && f.fate == BN_WCACHE_DEAD)
				f.removed = remove_same(dfd, f.name, &st);
			each(ctx, &f);
		}
		free(names[i]);
	}
	if (n >= 0)
		free(names);
	close(dfd);
	return rc;
}
