/* SPDX-License-Identifier: MIT */
/*
 * hub_name.c — what a model name may say. A repository id and a file name end up as parts of
 * paths in the cache, so they are checked here against huggingface_hub's own rules before
 * anything else sees them.
 */
#include "hub_internal.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

#define REPO_ID_MAX 96

static int repo_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '-' || c == '.';
}

static int repo_part_valid(const char *s, size_t len)
{
	if (len == 0 || s[0] == '-' || s[0] == '.' || s[len - 1] == '-' || s[len - 1] == '.')
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!repo_char(s[i]))
			return 0;
	return 1;
}

int hub_repo_id_valid(const char *repo)
{
	size_t len = strlen(repo);
	if (len == 0 || len > REPO_ID_MAX || strstr(repo, "--") || strstr(repo, ".."))
		return 0;
	if (len >= 4 && strcmp(repo + len - 4, ".git") == 0)
		return 0;
	const char *slash = strchr(repo, '/');
	if (!slash)
		return repo_part_valid(repo, len);
	if (strchr(slash + 1, '/'))
		return 0;
	return repo_part_valid(repo, (size_t)(slash - repo)) &&
	       repo_part_valid(slash + 1, len - (size_t)(slash - repo) - 1);
}

int hub_rel_path_valid(const char *path, size_t max_len)
{
	size_t len = strlen(path);
	if (len == 0 || len >= max_len || path[0] == '/')
		return 0;
	const char *part = path;
	for (;;) {
		const char *end = strchr(part, '/');
		size_t n = end ? (size_t)(end - part) : strlen(part);
		if (n == 0 || n > NAME_MAX || (n == 1 && part[0] == '.') ||
		    (n == 2 && part[0] == '.' && part[1] == '.'))
			return 0;
		for (size_t i = 0; i < n; i++)
			if ((unsigned char)part[i] < 0x20 || part[i] == 0x7f || part[i] == '\\')
				return 0;
		if (!end)
			return 1;
		part = end + 1;
	}
}

int hub_name_parse(const char *text, struct hub_name *n, char *err, size_t err_cap)
{
	memset(n, 0, sizeof(*n));
	if (strncmp(text, "hf:", 3) == 0)
		text += 3;
	const char *colon = strchr(text, ':');
	size_t repo_len = colon ? (size_t)(colon - text) : strlen(text);
	if (repo_len == 0)
		return hub_fail(err, err_cap, -EINVAL,
				"'%s' names no repository: give ORG/NAME[:FILE], e.g. "
				"microsoft/bitnet-b1.58-2B-4T-gguf", text);
	if (repo_len >= sizeof(n->repo))
		return hub_fail(err, err_cap, -EINVAL, "the repository id is too long");
	memcpy(n->repo, text, repo_len);
	if (!hub_repo_id_valid(n->repo))
		return hub_fail(err, err_cap, -EINVAL,
				"'%s' is not a repository id of the Hub (ORG/NAME: letters, digits, "
				"'-', '_' and '.', at most %d characters, no '--' or '..')",
				n->repo, REPO_ID_MAX);
	if (!colon)
		return 0;
	if (!hub_rel_path_valid(colon + 1, sizeof(n->file)))
		return hub_fail(err, err_cap, -EINVAL,
				"'%s' is not a file name in a repository (parts separated by '/', "
				"none empty, '.' or '..')", colon + 1);
	strcpy(n->file, colon + 1);
	return 0;
}
