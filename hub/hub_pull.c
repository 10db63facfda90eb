/* SPDX-License-Identifier: MIT */
/*
 * hub_pull.c — a model name to a file on disk (bn_hub_pull, hub.h): ask the Hub what the
 * revision holds, pick the file, fetch its blob unless the cache has it, link the snapshot
 * and the ref as huggingface_hub does. Without the network, the cache answers alone.
 */
#include "hub_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bn_hub_is_name(const char *name)
{
	return strncmp(name, "hf:", 3) == 0;
}

/* The Hub could not be asked (no network, a server failure), as opposed to its answer "no". */
static int unreachable(int rc)
{
	return rc == -ENETUNREACH || rc == -ETIMEDOUT || rc == -ECONNRESET || rc == -EIO ||
	       rc == -EPROTO;
}

/* The listing's file the name means: the one named, or hub_choose_gguf's pick. */
static int find_file(const struct hub_listing *l, const struct hub_name *n, const char *rev,
		     const struct hub_file **out, char *err, size_t err_cap)
{
	const char **names = calloc(l->n_files + 1, sizeof(*names));
	if (!names)
		return hub_fail(err, err_cap, -ENOMEM, "out of memory");
	size_t pick = l->n_files;
	for (size_t i = 0; i < l->n_files; i++) {
		names[i] = l->files[i].name;
		if (n->file[0] && strcmp(names[i], n->file) == 0)
			pick = i;
	}
	char where[300];
	snprintf(where, sizeof(where), "at revision %s", rev);
	int rc = 0;
	if (!n->file[0]) {
		rc = hub_choose_gguf(names, l->n_files, n->repo, where, &pick, err, err_cap);
	} else if (pick == l->n_files) {
		/* The choice's message lists the files that are there. */
		char choices[1400];
		size_t ignored;
		if (hub_choose_gguf(names, l->n_files, n->repo, where, &ignored, choices,
				    sizeof(choices)) == 0)
			snprintf(choices, sizeof(choices), "its GGUF file is %s", names[ignored]);
		rc = hub_fail(err, err_cap, -ENOENT, "%s has no file '%s' at revision %s (%s)",
			      n->repo, n->file, rev, choices);
	}
	free(names);
	if (rc == 0)
		*out = &l->files[pick];
	return rc;
}

static int offline_answer(const struct bn_hub_options *o, const struct hub_name *n,
			  const char *rev, struct bn_hub_result *r, char *err, size_t err_cap)
{
	int rc = hub_cache_lookup(o->cache_dir, n, rev, r, err, err_cap);
	if (rc != -ENOENT)
		return rc;
	char why[1024];
	snprintf(why, sizeof(why), "%s", err);
	return hub_fail(err, err_cap, rc,
			"%s, and HF_HUB_OFFLINE is set (no network): pull it where the network "
			"is, e.g. `HF_HUB_CACHE=%s bitnet-model pull %s%s%s`", why, o->cache_dir,
			n->repo, n->file[0] ? ":" : "", n->file);
}

/* The Hub out of reach: the cache's copy, said so, or the reason and that there is none. */
static int unreachable_answer(const struct bn_hub_options *o, const struct hub_name *n,
			      const char *rev, struct bn_hub_result *r, char *err, size_t err_cap)
{
	char why[1024], ignored[256];
	snprintf(why, sizeof(why), "%s", err);
	if (hub_cache_lookup(o->cache_dir, n, rev, r, ignored, sizeof(ignored)) == 0) {
		hub_note(o, "cannot ask %s (%s): using the copy in the cache, commit %.12s",
			 o->endpoint, why, r->commit);
		return 0;
	}
	return hub_fail(err, err_cap, -ENETUNREACH,
			"cannot ask %s for %s: %s; and the cache %s has no copy of it", o->endpoint,
			n->repo, why, o->cache_dir);
}

/* snapshots/COMMIT/FILE and refs/REV, as huggingface_hub leaves them. */
static int place(const char *repo_dir, const char *rev, const struct bn_hub_result *r,
		 const struct hub_file *f, char *err, size_t err_cap)
{
	int rc = hub_pointer_link(repo_dir, r->commit, f->name, hub_file_blob(f), err, err_cap);
	return rc < 0 ? rc : hub_ref_write(repo_dir, rev, r->commit, err, err_cap);
}

static int pull_listed(struct hub_http *h, const struct bn_hub_options *o,
		       const struct hub_name *n, const char *rev, const struct hub_listing *l,
		       struct bn_hub_result *r, char *err, size_t err_cap)
{
	const struct hub_file *f = NULL;
	char repo_dir[PATH_MAX], size[32];
	int rc = find_file(l, n, rev, &f, err, err_cap);
	if (rc < 0)
		return rc;
	if (hub_repo_dir(repo_dir, sizeof(repo_dir), o->cache_dir, n->repo) < 0 ||
	    hub_path(r->path, sizeof(r->path), "%s/snapshots/%s/%s", repo_dir, l->commit,
		     f->name) < 0)
		return hub_fail(err, err_cap, -ENAMETOOLONG, "path too long: %s", o->cache_dir);
	snprintf(r->repo, sizeof(r->repo), "%s", n->repo);
	snprintf(r->file, sizeof(r->file), "%s", f->name);
	memcpy(r->commit, l->commit, sizeof(r->commit));
	r->size = f->size;
	r->hub_asked = 1;
	r->was_cached = hub_blob_present(repo_dir, f);
	if (o->dry_run)
		return 0;
	if (r->was_cached)
		hub_note(o, "%s:%s (%s) is in the cache", n->repo, f->name,
			 bn_hub_size_text(f->size, size));
	else
		hub_note(o, "downloading %s:%s (%s) from %s into %s", n->repo, f->name,
			 bn_hub_size_text(f->size, size), o->endpoint, o->cache_dir);
	rc = hub_fetch_blob(h, o, n->repo, l->commit, f, &r->fetched, err, err_cap);
	return rc < 0 ? rc : place(repo_dir, rev, r, f, err, err_cap);
}

int bn_hub_pull(const struct bn_hub_options *o, const char *name, const char *revision,
		struct bn_hub_result *r, char *err, size_t err_cap)
{
	struct hub_name n;
	const char *rev = revision ? revision : BN_HUB_DEFAULT_REVISION;
	memset(r, 0, sizeof(*r));
	int rc = hub_name_parse(name, &n, err, err_cap);
	if (rc < 0)
		return rc;
	if (!hub_rel_path_valid(rev, 256))
		return hub_fail(err, err_cap, -EINVAL, "'%s' is not a revision (a branch, tag or "
				"commit)", rev);
	if (o->offline)
		return offline_answer(o, &n, rev, r, err, err_cap);
	if (o->prefer_cache && hub_cache_lookup(o->cache_dir, &n, rev, r, err, err_cap) == 0)
		return 0;
	struct hub_http *h;
	struct hub_listing l;
	rc = hub_http_new(o, &h, err, err_cap);
	if (rc < 0)
		return rc;
	rc = hub_list(h, o, n.repo, rev, &l, err, err_cap);
	if (rc == 0)
		rc = pull_listed(h, o, &n, rev, &l, r, err, err_cap);
	else if (unreachable(rc))
		rc = unreachable_answer(o, &n, rev, r, err, err_cap);
	hub_listing_free(&l);
	hub_http_free(h);
	return rc;
}
