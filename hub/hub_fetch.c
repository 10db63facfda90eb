/* SPDX-License-Identifier: MIT */
/*
 * hub_fetch.c — one blob into the cache: downloaded into BLOB.incomplete under the blob's
 * lock, resumed from where an earlier pull stopped (a Range request), retried when the
 * connection breaks, verified whole (the LFS sha256, or the git blob id of a file outside
 * LFS) and only then renamed to BLOB. OpenSSL's EVP digests do the hashing: libcurl's TLS
 * already brings libcrypto, and it uses the CPU's SHA instructions (about 2 GB/s a core).
 *
 * A partial file is kept only while its bytes can still be the file's: after a cut
 * connection, a full disk or a refusal it stays for the next pull to resume; when the whole
 * fails the check, or a server sends more than the file's size, it is removed.
 */
#include "hub_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define MAX_ATTEMPTS 100     /* cut connections survived in one pull, progress or not */
#define MAX_WAIT_MS 8000u    /* the longest wait between attempts that got nothing */
#define HASH_CHUNK (1u << 20)

/* One download of f into the .incomplete file. */
struct download {
	const struct bn_hub_options *o;
	const struct hub_file *f;
	const char *path;         /* the .incomplete file */
	int fd;
	uint64_t done;            /* bytes in it */
	uint64_t fetched;         /* bytes this pull wrote */
	int fresh_response;       /* no byte of the current response seen yet */
	int write_errno;          /* why the sink stopped: a failed write, */
	int overflow;             /* more bytes than the file has, */
	char refused[1024];       /* or a response that is not the file's bytes */
	struct hub_rate rate;
};

static void report(struct download *d, int force)
{
	double now = hub_now();
	int due = hub_rate_sample(&d->rate, d->done, now);
	if ((!due && !force) || !d->o->report || !d->o->report->progress)
		return;
	struct bn_hub_progress p;
	hub_rate_report(&d->rate, d->f->name, d->done, d->f->size, now, &p);
	d->o->report->progress(d->o->report->ctx, &p);
}

/* The first bytes of a response: is it the part of the file we asked for? */
static int check_response(struct download *d, const struct hub_reply *rep)
{
	uint64_t total = rep->has_range ? rep->range_total
		: rep->content_length >= 0 ? (uint64_t)rep->content_length : d->f->size;
	if (rep->status == 206 && (!rep->has_range || rep->range_start != d->done)) {
		snprintf(d->refused, sizeof(d->refused),
			 "%s answered a range from byte %llu, not the %llu asked for", rep->host,
			 (unsigned long long)rep->range_start, (unsigned long long)d->done);
		return -1;
	}
	if (total != d->f->size) {
		snprintf(d->refused, sizeof(d->refused),
			 "%s has %llu bytes for %s, the listing says %llu", rep->host,
			 (unsigned long long)total, d->f->name, (unsigned long long)d->f->size);
		return -1;
	}
	if (rep->status == 200 && d->done > 0) {
		/* The server ignored the Range: it sends the whole file, so start over. */
		hub_note(d->o, "%s does not resume downloads: starting %s over", rep->host,
			 d->f->name);
		if (ftruncate(d->fd, 0) < 0) {
			d->write_errno = errno;
			return -1;
		}
		d->done = 0;
	}
	return 0;
}

static size_t sink(void *ctx, const struct hub_reply *rep, const char *data, size_t n)
{
	struct download *d = ctx;
	if (d->fresh_response) {
		d->fresh_response = 0;
		if (check_response(d, rep) < 0)
			return 0;
	}
	if (n > d->f->size - d->done) {
		d->overflow = 1;
		return 0;
	}
	for (size_t at = 0; at < n;) {
		ssize_t w = pwrite(d->fd, data + at, n - at, (off_t)d->done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			d->write_errno = w < 0 ? errno : ENOSPC;
			return 0;
		}
		at += (size_t)w;
		d->done += (uint64_t)w;
		d->fetched += (uint64_t)w;
	}
	report(d, 0);
	return n;
}

static int space_error(struct download *d, int e, char *err, size_t err_cap)
{
	char have[32], total[32];
	return hub_fail(err, err_cap, -e,
			"%s writing %s: the download stopped at %s of %s and is kept there; free "
			"space (or set HF_HUB_CACHE to another disk) and run again to resume",
			e == ENOSPC || e == EDQUOT ? "disk full" : strerror(e), d->path,
			bn_hub_size_text(d->done, have), bn_hub_size_text(d->f->size, total));
}

/* Why the sink stopped the transfer, as the pull's error. */
static int sink_error(struct download *d, char *err, size_t err_cap)
{
	if (d->write_errno)
		return space_error(d, d->write_errno, err, err_cap);
	if (d->overflow) {
		unlink(d->path);
		return hub_fail(err, err_cap, -EBADMSG,
				"the server sent more than the %llu bytes of %s: not the listed "
				"file; the partial download was removed",
				(unsigned long long)d->f->size, d->f->name);
	}
	return hub_fail(err, err_cap, -EBADMSG, "%s; the partial download (%llu bytes) is kept",
			d->refused, (unsigned long long)d->done);
}

/* Disk space for the rest, before a byte moves: a 1.2 GB download should not fail at 90%. */
static int check_space(struct download *d, const char *dir, char *err, size_t err_cap)
{
	struct statvfs vfs;
	if (statvfs(dir, &vfs) < 0)
		return 0; /* unknown: the writes will tell */
	uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize, need = d->f->size - d->done;
	if (avail >= need)
		return 0;
	char a[32], n[32];
	return hub_fail(err, err_cap, -ENOSPC,
			"disk full: %s has %s free and %s needs %s more; free space, or set "
			"HF_HUB_CACHE to a directory on another disk", dir, bn_hub_size_text(avail, a),
			d->f->name, bn_hub_size_text(need, n));
}

static int retryable(int rc)
{
	return rc == -ECONNRESET || rc == -ETIMEDOUT || rc == -ENETUNREACH || rc == -EAGAIN;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* One attempt: a GET from d->done on, its outcome as 0 (every byte here), a retryable
 * -errno, or a final one. */
static int attempt(struct hub_http *h, struct download *d, const char *url, const char *repo,
		   const char *commit, char *err, size_t err_cap)
{
	struct hub_reply rep;
	d->fresh_response = 1;
	int rc = hub_http_get(h, url, d->done, sink, d, &rep, err, err_cap);
	if (rc == -ECANCELED)
		return sink_error(d, err, err_cap);
	if (rc < 0)
		return rc;
	if (rep.status == 416) {
		/* The server's file is shorter than what is here: that is not its prefix. */
		hub_note(d->o, "%s refused to resume %s at byte %llu: starting over", rep.host,
			 d->f->name, (unsigned long long)d->done);
		d->done = 0;
		return ftruncate(d->fd, 0) < 0 ? space_error(d, errno, err, err_cap) : -EAGAIN;
	}
	if (rep.status / 100 != 2) {
		rc = hub_status_error(d->o, &rep, repo, commit, d->f->name, err, err_cap);
		return rep.status >= 500 || rep.status == 429 ? -EAGAIN : rc;
	}
	if (d->done < d->f->size)
		return hub_fail(err, err_cap, -ECONNRESET, "%s ended the file early", rep.host);
	return 0;
}

/* Attempts until every byte is here, or the retries are spent. */
static int download(struct hub_http *h, struct download *d, const char *url, const char *repo,
		    const char *commit, char *err, size_t err_cap)
{
	unsigned quiet = 0, attempts = 0;
	for (;;) {
		uint64_t before = d->done;
		int rc = attempt(h, d, url, repo, commit, err, err_cap);
		if (rc == 0 || !retryable(rc))
			return rc;
		quiet = d->done > before ? 0 : quiet + 1;
		attempts++;
		char have[32], total[32];
		bn_hub_size_text(d->done, have);
		bn_hub_size_text(d->f->size, total);
		if (quiet > d->o->max_retries || attempts > MAX_ATTEMPTS) {
			size_t len = strlen(err);
			snprintf(err + len, err_cap > len ? err_cap - len : 0,
				 "; gave up after %u attempts. The download stopped at %s of %s and "
				 "is kept in %s: run again to resume", attempts, have, total, d->path);
			return rc == -EAGAIN ? -EIO : rc;
		}
		if (d->done > before) {
			/* It moved: resume at once, the way a person would press retry. */
			hub_note(d->o, "%s; resuming at %s of %s", err, have, total);
			continue;
		}
		unsigned wait = d->o->retry_wait_ms << (quiet - 1 < 16 ? quiet - 1 : 16);
		wait = wait < MAX_WAIT_MS ? wait : MAX_WAIT_MS;
		hub_note(d->o, "%s; trying again in %.1f s (%u of %u)", err, wait / 1000.0, quiet,
			 d->o->max_retries);
		sleep_ms(wait);
	}
}

/* The digest the listing promises, of the file at d->path: sha256 of the bytes for an LFS
 * file, sha1 of "blob SIZE\0" and the bytes (git's blob id) for one outside LFS. */
static int digest_file(struct download *d, char hex[65], char *err, size_t err_cap)
{
	int git = !d->f->sha256[0];
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned md_len = 0;
	char *buf = malloc(HASH_CHUNK);
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int rc = buf && ctx && EVP_DigestInit_ex(ctx, git ? EVP_sha1() : EVP_sha256(), NULL) ? 0 :
		hub_fail(err, err_cap, -ENOMEM, "cannot start a digest");
	if (rc == 0 && git) {
		int n = snprintf(buf, 64, "blob %llu", (unsigned long long)d->f->size);
		EVP_DigestUpdate(ctx, buf, (size_t)n + 1); /* the NUL is part of git's header */
	}
	for (uint64_t at = 0; rc == 0 && at < d->done;) {
		ssize_t n = pread(d->fd, buf, HASH_CHUNK, (off_t)at);
		if (n <= 0)
			rc = hub_fail(err, err_cap, -EIO, "cannot read back %s: %s", d->path,
				      n < 0 ? strerror(errno) : "it is shorter than written");
		else if (EVP_DigestUpdate(ctx, buf, (size_t)n) != 1)
			rc = hub_fail(err, err_cap, -EIO, "the digest failed");
		at += n > 0 ? (uint64_t)n : 0;
	}
	if (rc == 0 && EVP_DigestFinal_ex(ctx, md, &md_len) != 1)
		rc = hub_fail(err, err_cap, -EIO, "the digest failed");
	for (unsigned i = 0; rc == 0 && i < md_len; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	EVP_MD_CTX_free(ctx);
	free(buf);
	return rc;
}

static int verify(struct download *d, char *err, size_t err_cap)
{
	const char *want = hub_file_blob(d->f);
	char got[65] = "";
	if (fsync(d->fd) < 0)
		return space_error(d, errno, err, err_cap);
	int rc = digest_file(d, got, err, err_cap);
	if (rc < 0 || strcmp(got, want) == 0)
		return rc;
	unlink(d->path);
	return hub_fail(err, err_cap, -EBADMSG,
			"%s is not the file the Hub lists: its %s is %s, the listing says %s. The "
			"download was removed; run again to fetch it anew (if it happens again, "
			"the server or a proxy on the way serves another file)", d->f->name,
			d->f->sha256[0] ? "sha256" : "git blob id", got, want);
}

int hub_blob_present(const char *repo_dir, const struct hub_file *f)
{
	char path[PATH_MAX];
	struct stat st;
	return hub_path(path, sizeof(path), "%s/blobs/%s", repo_dir, hub_file_blob(f)) == 0 &&
	       stat(path, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == f->size;
}

/* Under the lock: the .incomplete file opened (and what it holds counted), the rest fetched,
 * the whole verified and renamed to the blob. */
static int fetch_locked(struct hub_http *h, struct download *d, const char *repo,
			const char *commit, const char *blobs, const char *blob, char *err,
			size_t err_cap)
{
	char url[4096], file_escaped[2048];
	struct stat st;
	/* What an earlier pull left, if anything, and whether the rest fits on the disk. */
	uint64_t left = stat(d->path, &st) == 0 ? (uint64_t)st.st_size : 0;
	d->done = left > d->f->size ? 0 : left; /* longer than the file: no prefix of it */
	int rc = check_space(d, blobs, err, err_cap);
	if (rc < 0)
		return rc;
	d->fd = open(d->path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
	if (d->fd < 0) {
		int e = errno;
		return hub_fail(err, err_cap, -e,
				"cannot write %s: %s; give a cache directory you may write with "
				"HF_HUB_CACHE (or --cache-dir)", d->path, strerror(e));
	}
	if (left > d->f->size && ftruncate(d->fd, 0) < 0) {
		rc = space_error(d, errno, err, err_cap);
		close(d->fd);
		return rc;
	}
	char have[32], total[32];
	if (d->done)
		hub_note(d->o, "resuming %s at %s of %s", d->f->name,
			 bn_hub_size_text(d->done, have), bn_hub_size_text(d->f->size, total));
	if (hub_url_escape(h, d->f->name, 1, file_escaped, sizeof(file_escaped)) < 0 ||
	    hub_path(url, sizeof(url), "%s/%s/resolve/%s/%s", d->o->endpoint, repo, commit,
		     file_escaped) < 0)
		rc = hub_fail(err, err_cap, -ENAMETOOLONG, "the file name %s is too long",
			      d->f->name);
	hub_rate_start(&d->rate, d->done, hub_now());
	if (rc == 0 && d->done < d->f->size)
		rc = download(h, d, url, repo, commit, err, err_cap);
	if (rc == 0) {
		report(d, 1);
		rc = verify(d, err, err_cap);
	}
	char blob_path[PATH_MAX];
	if (rc == 0 && (hub_path(blob_path, sizeof(blob_path), "%s/%s", blobs, blob) < 0 ||
			rename(d->path, blob_path) < 0))
		rc = hub_fail(err, err_cap, -EIO, "cannot rename %s into place: %s", d->path,
			      strerror(errno));
	close(d->fd);
	return rc;
}

int hub_fetch_blob(struct hub_http *h, const struct bn_hub_options *o, const char *repo,
		   const char *commit, const struct hub_file *f, uint64_t *fetched, char *err,
		   size_t err_cap)
{
	char repo_dir[PATH_MAX], blobs[PATH_MAX], incomplete[PATH_MAX];
	const char *blob = hub_file_blob(f);
	*fetched = 0;
	if (hub_repo_dir(repo_dir, sizeof(repo_dir), o->cache_dir, repo) < 0 ||
	    hub_path(blobs, sizeof(blobs), "%s/blobs", repo_dir) < 0 ||
	    hub_path(incomplete, sizeof(incomplete), "%s/%s.incomplete", blobs, blob) < 0)
		return hub_fail(err, err_cap, -ENAMETOOLONG, "path too long: %s", o->cache_dir);
	if (hub_blob_present(repo_dir, f))
		return 0;
	int lock, rc = hub_cache_prepare(o->cache_dir, err, err_cap);
	if (rc == 0)
		rc = hub_mkdirs(blobs, err, err_cap);
	if (rc == 0)
		rc = hub_lock_blob(o, repo, blob, &lock, err, err_cap);
	if (rc < 0)
		return rc;
	/* Another pull may have finished it while this one waited for the lock. */
	if (!hub_blob_present(repo_dir, f)) {
		struct download d = { .o = o, .f = f, .path = incomplete, .fd = -1 };
		rc = fetch_locked(h, &d, repo, commit, blobs, blob, err, err_cap);
		*fetched = d.fetched;
	}
	close(lock);
	return rc;
}
