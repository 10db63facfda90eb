/* SPDX-License-Identifier: MIT */
/*
 * hub_internal.h — what the files of hub/ share and nothing outside it uses.
 *
 * Arrows run one way: hub_pull.c (the public call) -> hub_list.c, hub_fetch.c -> hub_http.c,
 * hub_errors.c, hub_cache.c -> hub_choose.c, hub_name.c, hub_rate.c, hub_util.c. Every call
 * returns 0 or a negative errno and writes its message into (err, cap); nothing here exits,
 * prints or logs: people hear of it through the caller's bn_hub_reporter.
 */
#ifndef BITNET_HUB_INTERNAL_H
#define BITNET_HUB_INTERNAL_H

#include "hub.h"

#include <curl/curl.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- hub_util.c -- */

/* Writes the message into err (when err_cap > 0) and returns rc. */
int hub_fail(char *err, size_t err_cap, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* A line for the caller's reporter, if it listens. */
void hub_note(const struct bn_hub_options *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* 1 when s is exactly n lowercase hexadecimal digits. */
int hub_is_hex(const char *s, size_t n);
/* snprintf into out; -ENAMETOOLONG when it does not fit. */
int hub_path(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Monotonic seconds. */
double hub_now(void);

/* ---------------------------------------------------------------- hub_name.c -- */

struct hub_name {
	char repo[256];  /* ORG/NAME (or NAME alone, as the Hub's oldest repositories are) */
	char file[512];  /* "" when the name does not say which file */
};

/* "hf:ORG/NAME:FILE", "ORG/NAME:FILE", "ORG/NAME" ... into n. 0, or -EINVAL with why. */
int hub_name_parse(const char *text, struct hub_name *n, char *err, size_t err_cap);
/* huggingface_hub's rules for a repository id: [A-Za-z0-9_.-] in one or two parts, no "--"
 * or "..", no part that starts or ends with '-' or '.', at most 96 characters. */
int hub_repo_id_valid(const char *repo);
/* A path inside a repository or the cache (a file name, a revision): '/'-separated parts,
 * none empty, "." or "..", no control character, no part over NAME_MAX. Whatever a server
 * says goes through this before it becomes part of a path on disk. */
int hub_rel_path_valid(const char *path, size_t max_len);

/* -------------------------------------------------------------- hub_choose.c -- */

/* Which of names[0..n) a pull of repo takes when the name does not say: the only GGUF file,
 * else the one whose name says I2_S, then TQ2_0, then TQ1_0 (the layouts the daemon runs
 * best), when that one is alone in its class. *chosen gets its index; otherwise -ENOENT with
 * a message that lists the GGUF files (where names the place, for the message). */
int hub_choose_gguf(const char *const *names, size_t n, const char *repo, const char *where,
		    size_t *chosen, char *err, size_t err_cap);

/* ---------------------------------------------------------------- hub_rate.c -- */

#define HUB_RATE_SAMPLES 64

/* The download rate over the last seconds, from samples at least 100 ms apart. */
struct hub_rate {
	double t0;                       /* when the download began */
	double last_report;              /* when the reporter last heard */
	uint64_t start;                  /* bytes on disk at t0 */
	double t[HUB_RATE_SAMPLES];
	uint64_t bytes[HUB_RATE_SAMPLES];
	unsigned head, n;
};

void hub_rate_start(struct hub_rate *r, uint64_t done, double now);
/* Records done at now; 1 when a report is due (100 ms since the last), else 0. */
int hub_rate_sample(struct hub_rate *r, uint64_t done, double now);
/* A report of done of total at now. */
void hub_rate_report(struct hub_rate *r, const char *file, uint64_t done, uint64_t total,
		     double now, struct bn_hub_progress *p);

/* --------------------------------------------------------------- hub_cache.c -- */

/* CACHE/models--ORG--NAME into out. */
int hub_repo_dir(char *out, size_t cap, const char *cache, const char *repo);
/* mkdir -p, with a message that says which directory could not be made and why. */
int hub_mkdirs(const char *dir, char *err, size_t err_cap);
/* The cache directory made, with the CACHEDIR.TAG that tells backup tools to skip it. */
int hub_cache_prepare(const char *cache, char *err, size_t err_cap);
/* The commit refs/REV names: 0, -ENOENT (no such ref), -EBADMSG (not a commit id). */
int hub_ref_read(const char *repo_dir, const char *rev, char commit[41]);
/* refs/REV := commit (a temporary file renamed; nothing when rev is the commit itself). */
int hub_ref_write(const char *repo_dir, const char *rev, const char *commit, char *err,
		  size_t err_cap);
/* snapshots/COMMIT/FILE -> ../../blobs/BLOB, relative, replaced atomically. */
int hub_pointer_link(const char *repo_dir, const char *commit, const char *file,
		     const char *blob, char *err, size_t err_cap);
/* Takes huggingface_hub's lock for blob (CACHE/.locks/models--ORG--NAME/BLOB.lock, flock),
 * waiting for another pull (ours or Python's) and saying so. *fd gets the lock: close it to
 * release. */
int hub_lock_blob(const struct bn_hub_options *o, const char *repo, const char *blob,
		  int *fd, char *err, size_t err_cap);
/* The cached file n names at rev, without the network: rev is a commit, or refs/REV names
 * one; its snapshot holds the named file, or the GGUF file hub_choose_gguf picks among those
 * it holds. Fills r (hub_asked 0, was_cached 1). -ENOENT when the cache has no such file. */
int hub_cache_lookup(const char *cache, const struct hub_name *n, const char *rev,
		     struct bn_hub_result *r, char *err, size_t err_cap);

/* ---------------------------------------------------------------- hub_http.c -- */

/* What one GET (and the redirects it followed) ended with. */
struct hub_reply {
	long status;                 /* of the last response; 0 when none came */
	char error_code[64];         /* the Hub's X-Error-Code (RepoNotFound, GatedRepo, ...) */
	char error_message[256];     /* its X-Error-Message */
	char host[256];              /* the host of the last request */
	int has_range;               /* a Content-Range came: */
	uint64_t range_start, range_total;
	int64_t content_length;      /* of the body under way; -1 when not said */
	int token_sent;              /* the last request carried the token */
	char body[1024];             /* the start of a body that was not a 2xx's */
	size_t body_len;
};

/* A 2xx body's bytes as they arrive, with the response's status and headers in rep: returns
 * n to go on, anything else to stop (the sink keeps its own reason). */
typedef size_t (*hub_sink_fn)(void *ctx, const struct hub_reply *rep, const char *data,
			      size_t n);

struct hub_http;

int hub_http_new(const struct bn_hub_options *o, struct hub_http **out, char *err,
		 size_t err_cap);
void hub_http_free(struct hub_http *h);
/* GET url, from byte range_from on when it is not 0, following up to ten redirects by hand:
 * the token goes only to the endpoint's own origin (scheme, host and port), never to the
 * host a redirect names. 0 when a response came whole (any status: rep says which);
 * -ENETUNREACH when no server answered (resolve, connect, TLS), -ETIMEDOUT, -ECONNRESET when
 * the connection broke mid-way, -ECANCELED when the sink stopped it, -EPROTO for a bad
 * redirect; err says which. */
int hub_http_get(struct hub_http *h, const char *url, uint64_t range_from, hub_sink_fn sink,
		 void *sink_ctx, struct hub_reply *rep, char *err, size_t err_cap);
/* url-encoded s into out; '/' kept when keep_slash. */
int hub_url_escape(struct hub_http *h, const char *s, int keep_slash, char *out, size_t cap);

/* -------------------------------------------------------------- hub_errors.c -- */

/* A non-2xx answer of the Hub as a person's message: -ENOENT (no such repository, revision
 * or file), -EACCES (gated, private, a refused token) or -EIO (anything else). */
int hub_status_error(const struct bn_hub_options *o, const struct hub_reply *rep,
		     const char *repo, const char *rev, const char *file, char *err,
		     size_t err_cap);

/* ---------------------------------------------------------------- hub_list.c -- */

struct hub_file {
	char *name;          /* rfilename */
	uint64_t size;
	char sha256[65];     /* the LFS object's, "" when the file is not in LFS */
	char blob_id[41];    /* the git blob id */
};

struct hub_listing {
	char commit[41];
	int gated;
	struct hub_file *files;
	size_t n_files;
};

/* The listing of repo at rev (GET /api/models/REPO/revision/REV?blobs=true), every field a
 * path will be made of checked. 0 or -errno: hub_http_get's, hub_status_error's, -EBADMSG
 * for an answer that is not a listing. */
int hub_list(struct hub_http *h, const struct bn_hub_options *o, const char *repo,
	     const char *rev, struct hub_listing *l, char *err, size_t err_cap);
void hub_listing_free(struct hub_listing *l);
/* The blob's name in the cache: the sha256 for an LFS file, else the git blob id. */
const char *hub_file_blob(const struct hub_file *f);

/* --------------------------------------------------------------- hub_fetch.c -- */

/* Makes CACHE/models--ORG--NAME/blobs/BLOB hold f (the file of repo at commit), downloading
 * what is missing under the blob's lock, resuming a partial download, retrying a cut
 * connection, verifying the whole before the rename. *fetched gets the bytes downloaded. */
int hub_fetch_blob(struct hub_http *h, const struct bn_hub_options *o, const char *repo,
		   const char *commit, const struct hub_file *f, uint64_t *fetched, char *err,
		   size_t err_cap);
/* Whether the blob is already there (0 or 1). */
int hub_blob_present(const char *repo_dir, const struct hub_file *f);

#endif /* BITNET_HUB_INTERNAL_H */
