/* SPDX-License-Identifier: MIT */
/*
 * hub_cache.c — huggingface_hub's cache layout (hub.h draws it), kept exactly, so a file
 * Python fetched is found here and one fetched here is found by Python. Every name written
 * goes through a temporary name and rename(2): a reader sees the old entry or the new one.
 */
#include "hub_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define CACHEDIR_TAG                                                                            \
	"Signature: 8a477f597d28d172789f06886806bc55\n"                                         \
	"# This file is a cache directory tag created by bitnet-model (the Hugging Face Hub\n"  \
	"# cache of huggingface_hub). For information about cache directory tags, see\n"       \
	"# https://bford.info/cachedir/\n"

int hub_repo_dir(char *out, size_t cap, const char *cache, const char *repo)
{
	/* models--ORG--NAME: the repository id with '/' as "--" (which an id cannot hold). */
	char folder[300] = "models--";
	size_t at = strlen(folder);
	for (const char *p = repo; *p && at + 3 < sizeof(folder); p++) {
		if (*p == '/') {
			memcpy(folder + at, "--", 2);
			at += 2;
		} else {
			folder[at++] = *p;
		}
	}
	folder[at] = '\0';
	return hub_path(out, cap, "%s/%s", cache, folder);
}

static int mkdir_error(const char *dir, int e, char *err, size_t err_cap)
{
	if (e == EACCES || e == EPERM || e == EROFS)
		return hub_fail(err, err_cap, -e,
				"cannot write the cache directory %s: %s; give a directory you may "
				"write with HF_HUB_CACHE (or --cache-dir)", dir, strerror(e));
	return hub_fail(err, err_cap, -e, "cannot make the cache directory %s: %s", dir,
			strerror(e));
}

int hub_mkdirs(const char *dir, char *err, size_t err_cap)
{
	char path[PATH_MAX];
	if (hub_path(path, sizeof(path), "%s", dir) < 0)
		return hub_fail(err, err_cap, -ENAMETOOLONG, "path too long: %s", dir);
	for (char *p = path + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char saved = *p;
		*p = '\0';
		struct stat st;
		if (mkdir(path, 0777) < 0 && errno != EEXIST)
			return mkdir_error(path, errno, err, err_cap);
		if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
			return mkdir_error(path, ENOTDIR, err, err_cap);
		if (saved == '\0')
			return 0;
		*p = saved;
	}
}

int hub_cache_prepare(const char *cache, char *err, size_t err_cap)
{
	int rc = hub_mkdirs(cache, err, err_cap);
	if (rc < 0)
		return rc;
	char tag[PATH_MAX];
	if (hub_path(tag, sizeof(tag), "%s/CACHEDIR.TAG", cache) < 0)
		return hub_fail(err, err_cap, -ENAMETOOLONG, "path too long: %s", cache);
	/* O_EXCL: written once, never over one Python or a backup tool may have written. */
	int fd = open(tag, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (fd < 0) {
		if (errno == EEXIST)
			return 0;
		return mkdir_error(cache, errno, err, err_cap);
	}
	/* The tag is a courtesy to backup tools: a short write costs nothing worth an error. */
	if (write(fd, CACHEDIR_TAG, strlen(CACHEDIR_TAG)) < 0)
		unlink(tag);
	close(fd);
	return 0;
}

int hub_ref_read(const char *repo_dir, const char *rev, char commit[41])
{
	char path[PATH_MAX];
	if (hub_path(path, sizeof(path), "%s/refs/%s", repo_dir, rev) < 0)
		return -ENAMETOOLONG;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	char buf[64];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return -EIO;
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0'; /* huggingface_hub writes none; a hand-made one may */
	if (!hub_is_hex(buf, 40))
		return -EBADMSG;
	memcpy(commit, buf, 41);
	return 0;
}

/* Writes data to path through path.PID.tmp and rename(2). */
static int replace_file(const char *path, const char *data, char *err, size_t err_cap)
{
	char tmp[PATH_MAX];
	if (hub_path(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid()) < 0)
		return hub_fail(err, err_cap, -ENAMETOOLONG, "path too long: %s", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0)
		return mkdir_error(tmp, errno, err, err_cap);
	ssize_t w = write(fd, data, strlen(data));
	int e = w == (ssize_t)strlen(data) ? 0 : w < 0 ? errno : ENOSPC;
	if (close(fd) < 0 && !e)
		e = errno;
	if (!e && rename(tmp, path) < 0)
		e = errno;
	if (e) {
		unlink(tmp);
		return hub_fail(err, err_cap, -e, "cannot write %s: %s", path, strerror(e));
	}
	return 0;
}

int hub_ref_write(const char *repo_dir, const char *rev, const char *commit, char *err,
		  size_t err_cap)
{
	char have[41];
	if (strcmp(rev, commit) == 0 ||
	    (hub_ref_read(repo_dir, rev, have) == 0 && strcmp(have, commit) == 0))
		return 0; /* nothing to say, and a read-only cache stays usable */
	char path[PATH_MAX], dir[PATH_MAX];
	if (hub_path(path, sizeof(path), "%s/refs/%s", repo_dir, rev) < 0)
		return hub_fail(err, err_cap, -ENAMETOOLONG, "path too long: %s/refs/%s",
				repo_dir, rev);
	strcpy(dir, path);
	*strrchr(dir, '/') = '\0'; /* a revision such as refs/pr/1 is a path */
	int rc = hub_mkdirs(dir, err, err_cap);
	return rc < 0 ? rc : replace_file(path, commit, err, err_cap);
}

/* "../../blobs/BLOB", with one "../" more for every '/' in file. */
static int link_target(const char *file, const char *blob, char *out, size_t cap)
{
	size_t at = 0;
	for (const char *p = file; *p; p++)
		if (*p == '/') {
			if (at + 3 >= cap)
				return -ENAMETOOLONG;
			memcpy(out + at, "../", 3);
			at += 3;
		}
	return hub_path(out + at, cap - at, "../../blobs/%s", blob);
}

int hub_pointer_link(const char *repo_dir, const char *commit, const char *file,
		     const char *blob, char *err, size_t err_cap)
{
	char path[PATH_MAX], dir[PATH_MAX], tmp[PATH_MAX], target[PATH_MAX];
	if (hub_path(path, sizeof(path), "%s/snapshots/%s/%s", repo_dir, commit, file) < 0 ||
	    hub_path(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid()) < 0 ||
	    link_target(file, blob, target, sizeof(target)) < 0)
		return hub_fail(err, err_cap, -ENAMETOOLONG, "path too long: %s", path);
	char existing[PATH_MAX];
	ssize_t n = readlink(path, existing, sizeof(existing) - 1);
	if (n >= 0 && (existing[n] = '\0', strcmp(existing, target) == 0))
		return 0; /* there already, as Python or an earlier pull left it */
	strcpy(dir, path);
	*strrchr(dir, '/') = '\0';
	int rc = hub_mkdirs(dir, err, err_cap);
	if (rc < 0)
		return rc;
	unlink(tmp);
	if (symlink(target, tmp) < 0)
		return mkdir_error(dir, errno, err, err_cap);
	if (rename(tmp, path) < 0) {
		int e = errno;
		unlink(tmp);
		return hub_fail(err, err_cap, -e, "cannot link %s: %s", path, strerror(e));
	}
	return 0;
}

int hub_lock_blob(const struct bn_hub_options *o, const char *repo, const char *blob,
		  int *fd, char *err, size_t err_cap)
{
	char locks[PATH_MAX], dir[PATH_MAX], path[PATH_MAX];
	if (hub_path(locks, sizeof(locks), "%s/.locks", o->cache_dir) < 0 ||
	    hub_repo_dir(dir, sizeof(dir), locks, repo) < 0 ||
	    hub_path(path, sizeof(path), "%s/%s.lock", dir, blob) < 0)
		return hub_fail(err, err_cap, -ENAMETOOLONG, "path too long: %s", o->cache_dir);
	int rc = hub_mkdirs(dir, err, err_cap);
	if (rc < 0)
		return rc;
	/* 0664 like Python's filelock, so users of one group may share a cache. */
	*fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0664);
	if (*fd < 0)
		return mkdir_error(path, errno, err, err_cap);
	if (flock(*fd, LOCK_EX | LOCK_NB) == 0)
		return 0;
	if (errno != EWOULDBLOCK) {
		int e = errno;
		close(*fd);
		return hub_fail(err, err_cap, -e, "cannot lock %s: %s", path, strerror(e));
	}
	hub_note(o, "waiting for another download of this file to finish (lock %s)", path);
	while (flock(*fd, LOCK_EX) < 0) {
		if (errno != EINTR) {
			int e = errno;
			close(*fd);
			return hub_fail(err, err_cap, -e, "cannot lock %s: %s", path, strerror(e));
		}
	}
	return 0;
}

/* The GGUF files a snapshot holds (those whose blob is there: stat follows the link). */
static size_t snapshot_ggufs(const char *snap, char names[][256], size_t cap)
{
	DIR *d = opendir(snap);
	if (!d)
		return 0;
	size_t n = 0;
	struct dirent *e;
	while ((e = readdir(d)) && n < cap) {
		size_t len = strlen(e->d_name);
		char path[PATH_MAX];
		struct stat st;
		if (len < 6 || strcasecmp(e->d_name + len - 5, ".gguf") != 0 || len >= 256 ||
		    hub_path(path, sizeof(path), "%s/%s", snap, e->d_name) < 0 ||
		    stat(path, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		strcpy(names[n++], e->d_name);
	}
	closedir(d);
	return n;
}

static int lookup_commit(const char *repo_dir, const char *rev, char commit[41])
{
	if (hub_is_hex(rev, 40)) {
		memcpy(commit, rev, 41);
		return 0;
	}
	return hub_ref_read(repo_dir, rev, commit);
}

int hub_cache_lookup(const char *cache, const struct hub_name *n, const char *rev,
		     struct bn_hub_result *r, char *err, size_t err_cap)
{
	char repo_dir[PATH_MAX], snap[PATH_MAX], commit[41];
	if (hub_repo_dir(repo_dir, sizeof(repo_dir), cache, n->repo) < 0)
		return hub_fail(err, err_cap, -ENAMETOOLONG, "path too long: %s", cache);
	if (lookup_commit(repo_dir, rev, commit) < 0 ||
	    hub_path(snap, sizeof(snap), "%s/snapshots/%s", repo_dir, commit) < 0)
		return hub_fail(err, err_cap, -ENOENT, "the cache %s has no copy of %s at %s",
				cache, n->repo, rev);
	const char *file = n->file;
	char names[64][256];
	if (!*file) {
		const char *list[64];
		size_t count = snapshot_ggufs(snap, names, 64), pick;
		for (size_t i = 0; i < count; i++)
			list[i] = names[i];
		char where[128];
		snprintf(where, sizeof(where), "in the cache at %.12s", commit);
		int rc = hub_choose_gguf(list, count, n->repo, where, &pick, err, err_cap);
		if (rc < 0)
			return rc;
		file = names[pick];
	}
	struct stat st;
	memset(r, 0, sizeof(*r));
	if (hub_path(r->path, sizeof(r->path), "%s/%s", snap, file) < 0 || stat(r->path, &st) < 0 ||
	    !S_ISREG(st.st_mode))
		return hub_fail(err, err_cap, -ENOENT, "the cache %s has no copy of %s:%s at %s",
				cache, n->repo, file, rev);
	snprintf(r->repo, sizeof(r->repo), "%s", n->repo);
	snprintf(r->file, sizeof(r->file), "%s", file);
	memcpy(r->commit, commit, 41);
	r->size = (uint64_t)st.st_size;
	r->was_cached = 1;
	return 0;
}
