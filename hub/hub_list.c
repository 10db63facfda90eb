/* SPDX-License-Identifier: MIT */
/*
 * hub_list.c — a repository's files at a revision, as the Hub lists them:
 * GET /api/models/REPO/revision/REV?blobs=true answers the commit the revision names ("sha")
 * and "siblings", each with its "rfilename", "size", git "blobId" and, for a file in LFS,
 * "lfs": {"sha256", "size"}. The commit and the hashes become names on disk, so each is
 * checked for what it must be (40 or 64 lowercase hexadecimal digits, a relative path)
 * before it is kept; a sibling that fails is left out.
 */
#include "hub_internal.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define LISTING_MAX (64u << 20) /* the listing of a repository of thousands of files */

struct buffer {
	char *data;
	size_t len, cap;
	int too_big;
};

static size_t collect(void *ctx, const struct hub_reply *rep, const char *data, size_t n)
{
	(void)rep;
	struct buffer *b = ctx;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 65536;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *grown = cap <= LISTING_MAX ? realloc(b->data, cap) : NULL;
		if (!grown) {
			b->too_big = 1;
			return 0;
		}
		b->data = grown;
		b->cap = cap;
	}
	memcpy(b->data + b->len, data, n);
	b->len += n;
	b->data[b->len] = '\0';
	return n;
}

static const char *string_of(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

/* One sibling into f; 0 when it is not one a pull can take. */
static int parse_sibling(json_t *s, struct hub_file *f)
{
	const char *name = string_of(s, "rfilename");
	const char *blob = string_of(s, "blobId");
	json_t *lfs = json_object_get(s, "lfs");
	json_t *size = json_object_get(lfs ? lfs : s, "size");
	memset(f, 0, sizeof(*f));
	if (!name || !hub_rel_path_valid(name, 512) || !json_is_integer(size) ||
	    json_integer_value(size) < 0)
		return 0;
	f->size = (uint64_t)json_integer_value(size);
	if (blob && hub_is_hex(blob, 40))
		strcpy(f->blob_id, blob);
	if (lfs) {
		const char *sha = string_of(lfs, "sha256");
		if (!sha || !hub_is_hex(sha, 64))
			return 0;
		strcpy(f->sha256, sha);
	} else if (!f->blob_id[0]) {
		return 0; /* neither hash: nothing to name the blob by, nothing to check it with */
	}
	f->name = strdup(name);
	return f->name != NULL;
}

static int parse_listing(const char *data, size_t len, const char *repo, struct hub_listing *l,
			 char *err, size_t err_cap)
{
	json_error_t jerr;
	json_t *root = json_loadb(data, len, 0, &jerr);
	json_t *siblings = json_object_get(root, "siblings");
	const char *sha = string_of(root, "sha");
	if (!json_is_object(root) || !sha || !hub_is_hex(sha, 40) || !json_is_array(siblings)) {
		json_decref(root);
		return hub_fail(err, err_cap, -EBADMSG,
				"the Hub's listing of %s is not one (no commit id or no files%s%s)",
				repo, root ? "" : ": ", root ? "" : jerr.text);
	}
	strcpy(l->commit, sha);
	json_t *gated = json_object_get(root, "gated");
	l->gated = json_is_string(gated) || json_is_true(gated);
	l->files = calloc(json_array_size(siblings) + 1, sizeof(*l->files));
	if (!l->files) {
		json_decref(root);
		return hub_fail(err, err_cap, -ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < json_array_size(siblings); i++)
		if (parse_sibling(json_array_get(siblings, i), &l->files[l->n_files]))
			l->n_files++;
	json_decref(root);
	return 0;
}

int hub_list(struct hub_http *h, const struct bn_hub_options *o, const char *repo,
	     const char *rev, struct hub_listing *l, char *err, size_t err_cap)
{
	char rev_escaped[1024], url[2048];
	memset(l, 0, sizeof(*l));
	/* The revision is one path segment: "refs/pr/1" goes as refs%2Fpr%2F1. */
	if (hub_url_escape(h, rev, 0, rev_escaped, sizeof(rev_escaped)) < 0 ||
	    hub_path(url, sizeof(url), "%s/api/models/%s/revision/%s?blobs=true", o->endpoint,
		     repo, rev_escaped) < 0)
		return hub_fail(err, err_cap, -EINVAL, "the revision '%s' is too long", rev);
	struct buffer body = { 0 };
	struct hub_reply rep;
	int rc = hub_http_get(h, url, 0, collect, &body, &rep, err, err_cap);
	if (rc == -ECANCELED)
		rc = hub_fail(err, err_cap, body.too_big ? -EBADMSG : -ENOMEM,
			      "the Hub's listing of %s is over %u MiB", repo, LISTING_MAX >> 20);
	else if (rc == 0 && rep.status != 200)
		rc = hub_status_error(o, &rep, repo, rev, NULL, err, err_cap);
	else if (rc == 0)
		rc = parse_listing(body.data ? body.data : "", body.len, repo, l, err, err_cap);
	free(body.data);
	return rc;
}

void hub_listing_free(struct hub_listing *l)
{
	for (size_t i = 0; i < l->n_files; i++)
		free(l->files[i].name);
	free(l->files);
	memset(l, 0, sizeof(*l));
}

const char *hub_file_blob(const struct hub_file *f)
{
	return f->sha256[0] ? f->sha256 : f->blob_id;
}
