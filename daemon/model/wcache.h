/* SPDX-License-Identifier: MIT */
/*
 * wcache.h — the packed-weight cache: the layouts the loader repacks a model file into (T2
 * planes, float panels, the LM head's int8 copy, T3 planes), written once to one file and
 * mapped read-only (MAP_SHARED) at later starts, so a restart does not repack and two daemons
 * on one model share one copy of the weights in the page cache.
 *
 * A cache file is an input like any other and is trusted for nothing:
 *  - its key must equal the daemon's: the model file's identity (device, inode, size, mtime
 *    and ctime in ns: ctime too, because `touch -d` can put an edited file's mtime back but
 *    not its ctime), a hash of the file's bytes before its tensor data (metadata and tensor
 *    table), the layout version, the kernel variant and the options that change what is built;
 *  - every byte after the header is covered by a hash per 1 MiB chunk, and the header, its
 *    directory and the chunk table by one more; all are checked before the first use (on the
 *    pool's threads: ~18 GB/s on two cores), so a flipped byte never reaches a logit;
 *  - blobs are taken in the order the loader asks for them, each checked against the tag and
 *    size it expects.
 * It is written to a temporary file in the same directory and renamed over the final name, so a
 * crash or two daemons writing at once never leave a torn file under that name; the data is
 * not fsync'd (a cache lost to a crash fails its hashes and is rebuilt). The data goes out in
 * 2 MiB-aligned windows of 2 MiB, which a filesystem with large folios (ext4, xfs) keeps as
 * 2 MiB folios, and a start maps the file 2 MiB-aligned, so the kernel maps those with one
 * page table entry (PMD) each: mapping 1.5 GB costs next to nothing, and decode walks fewer
 * TLB entries. One file per model
 * path and option set: a changed model file replaces its cache rather than adding one.
 *
 * The header records the model file's resolved path, so a cache can be traced to its model.
 * A cache that can never be used again (an older layout version, its model file gone or
 * replaced: a key no file can match) is dead; bn_wcache_prune lists a directory's caches and
 * removes the dead ones. The daemon prunes its directory at start-up (a start whose caches all
 * hit writes none) and the cache writer before it writes a cache, and
 * `bitnet-model cache [--prune]` does it on demand: the directory holds what can still be
 * used, not every model ever tried.
 */
#ifndef BITNETD_WCACHE_H
#define BITNETD_WCACHE_H

#include "gguf.h"
#include "pool.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* Bump when a layout the cache holds changes (bn_blocks.h, kernels.h, head_screen.h). 2: a
 * float layer matrix of a bitnet* file has a BN_WCACHE_FROM_FLOAT word (packed to T2 or not).
 * 3: a T2 matrix's codes are followed by its BN_WCACHE_T2_GROUP word, then its row scales
 * (group 0) or its group scales. 4: the header records the model file's resolved path (and is
 * 8 KiB to hold any), so that bn_wcache_prune can tell a cache whose model is gone. */
#define BN_WCACHE_VERSION 4u
#define BN_WCACHE_WHY_LEN 160

/* What the daemon was asked to build (part of the key). */
enum {
	BN_WCACHE_OPT_SCREEN = 1u << 0,    /* --lm-head screened */
	BN_WCACHE_OPT_INT8_HEAD = 1u << 1, /* --lm-head int8 */
	BN_WCACHE_OPT_BASE3 = 1u << 2,     /* --decode-layout base3 */
};

/* What a cache holds besides the model's repacked matrices. */
enum {
	BN_WCACHE_HAS_SCREEN = 1u << 0,    /* the head's int8 copy, used as a screen */
	BN_WCACHE_HAS_INT8_HEAD = 1u << 1, /* the head's int8 copy, used as the head (no panels) */
	BN_WCACHE_HAS_T3 = 1u << 2,        /* T3 copies of the ternary matrices */
};

/* Blob tags, in the order a model's blobs are written (bn_model_cache_blobs). */
enum bn_wcache_tag {
	BN_WCACHE_T2_CODES = 1,
	BN_WCACHE_T2_SCALE = 2,
	BN_WCACHE_F_PANELS = 3,
	BN_WCACHE_I8_Q = 4,
	BN_WCACHE_I8_SCALE = 5,
	BN_WCACHE_I8_ERR = 6,
	BN_WCACHE_I8_L1 = 7,
	BN_WCACHE_I8_ROW_SUM = 8,
	BN_WCACHE_T3_CODES = 9,
	BN_WCACHE_CUDA_ROWS = 10,  /* a float matrix as the cuda backend's device holds it */
	BN_WCACHE_FROM_FLOAT = 11, /* a uint32: 1 when the float matrix after it was packed to
				    * T2 (its T2 blobs follow), 0 when it stays float */
	BN_WCACHE_T2_GROUP = 12,   /* a uint32: the T2 matrix's weights per scale (0: one a row) */
	BN_WCACHE_T2_GSCALE = 13,  /* its scales per group, [n_out][n_in / group] floats */
};

struct bn_wcache_key {
	uint64_t dev, ino, size, mtime_ns, ctime_ns;
	uint64_t header_hash;     /* XXH3-64 of the model file's bytes before its tensor data */
	uint32_t options;         /* BN_WCACHE_OPT_* */
	char kernels[16];         /* the kernel variant's name (kernels.h) */
	char model[PATH_MAX];     /* the model file's path, resolved (realpath): the cache's name
				   * hashes it, its header records it */
};

/* The key of g, the model file opened from model_path, under the daemon's choices. 0 or
 * -errno. */
int bn_wcache_key_of(const struct bn_gguf *g, const char *model_path, const char *kernels,
		     uint32_t options, struct bn_wcache_key *out);

/* The cache directory: `opt` (--cache-dir) when given ("none": no cache, *out empty), else
 * $CACHE_DIRECTORY (systemd's CacheDirectory=; the first of a colon-separated list), else
 * $XDG_CACHE_HOME/bitnetd, else $HOME/.cache/bitnetd. -ENAMETOOLONG, or -ENOENT when no
 * variable names one. */
int bn_wcache_dir(const char *opt, char *out, size_t cap);

/* The cache file for a model path and its key in dir: one name per (resolved model path, as
 * the key holds it, options, kernel variant), so a changed file replaces its cache; the name
 * begins with model_path's own file name, readable. */
int bn_wcache_path(const char *dir, const char *model_path, const struct bn_wcache_key *k,
		   char *out, size_t cap);

/* An open cache: the file's read-only shared mapping. */
struct bn_wcache {
	const uint8_t *base;
	size_t size;
	uint32_t contents;        /* BN_WCACHE_HAS_* */
	uint32_t n_entries, next; /* the directory, and the next blob bn_wcache_take gives */
	const struct bn_wcache_entry *dir;
};

/* Maps and checks path against k: 0; -ENOENT (no file); -ESTALE (another key, version or
 * variant: built from something else); -EBADMSG (short, torn or corrupt: a hash differs);
 * -errno. *why says which, for the log. The pool (NULL: the caller's thread) hashes, with
 * hash64 (kernels.h: the variant's XXH3; NULL: the library's). */
typedef uint64_t (*bn_wcache_hash_fn)(const void *p, size_t n);
int bn_wcache_open(struct bn_wcache *c, const char *path, const struct bn_wcache_key *k,
		   struct bn_pool *pool, bn_wcache_hash_fn hash64, char why[BN_WCACHE_WHY_LEN]);
void bn_wcache_close(struct bn_wcache *c);

/* The next blob, which must carry `tag` and hold `size` bytes (page-aligned in the mapping);
 * NULL when it does not: the cache was written for another model. */
const void *bn_wcache_take(struct bn_wcache *c, enum bn_wcache_tag tag, uint64_t size);

/* Everything was taken: a cache with blobs left over was written for another model. */
int bn_wcache_taken_all(const struct bn_wcache *c);

/* One blob to write. */
struct bn_wcache_blob {
	enum bn_wcache_tag tag;
	const void *data;
	uint64_t size;
};

/* Writes blobs[0..n) under k (and `contents`) to a temporary file in path's directory (made
 * when missing), hashing it on the caller's thread, and renames it to path. *stop (NULL: never)
 * is read between chunks of a MiB: once set, the write gives up with -ECANCELED. 0 or -errno
 * (nothing left behind); *why says what failed. */
int bn_wcache_write(const char *path, const struct bn_wcache_key *k, uint32_t contents,
		    const struct bn_wcache_blob *blobs, uint32_t n, const int *stop,
		    char why[BN_WCACHE_WHY_LEN]);

/* ---- what a directory holds, and pruning it ------------------------------------------------ */

/* What bn_wcache_prune makes of a file. */
enum bn_wcache_fate {
	BN_WCACHE_LIVE = 0,       /* can be used: its model file is there, as its key says */
	BN_WCACHE_DEAD = 1,       /* can never be used again: pruning removes it */
	BN_WCACHE_KEPT = 2,       /* cannot tell (a newer layout, a model it cannot look at) */
};

/* One file bn_wcache_prune looked at: a cache, or a writer's temporary file. */
struct bn_wcache_file {
	const char *name;         /* in the directory */
	uint64_t bytes;           /* its size */
	enum bn_wcache_fate fate;
	char why[BN_WCACHE_WHY_LEN]; /* why it is dead or kept ("" when live) */
	int temporary;            /* a writer's temporary file, not a cache */
	uint32_t version;         /* a cache's layout version */
	uint32_t options;         /* BN_WCACHE_OPT_*, and */
	char kernels[17];         /* the kernel variant: from a header of this version that adds
				   * up, else 0 and "" */
	char model[PATH_MAX];     /* the model file it was built from ("" when not recorded) */
	int removed;              /* 1 removed; 0 not; -errno when removing it failed, -EBUSY
				   * when another file took its name while it was looked at */
};
typedef void (*bn_wcache_file_fn)(void *ctx, const struct bn_wcache_file *f);

/* Calls each(ctx, f) for every cache in dir (a regular file named *.wcache that starts with
 * the cache's magic) and every writer's temporary file (<cache>.tmp.PID.XXXXXX: dead once
 * process PID is gone), in name order; with `remove` it first removes the dead ones. Nothing
 * else is touched or reported: not a file without the magic, another name, a directory, a
 * symlink (names are looked up in dir without following links: the directory may be shared).
 * A cache is dead when its layout version is older than this build's, it is shorter than its
 * header or its header does not add up (never usable again), or the model file its header
 * names is gone or is another file now (its identity differs from the key's: a key no file
 * can match again). A newer version's cache is kept: another bitnetd may use it. 0, or -errno
 * when dir cannot be read. */
int bn_wcache_prune(const char *dir, int remove, bn_wcache_file_fn each, void *ctx);

#endif /* BITNETD_WCACHE_H */
