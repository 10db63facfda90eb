/* SPDX-License-Identifier: MIT */
/*
 * hub_env.c — the settings huggingface_hub reads from the environment, read the same way, so
 * one `export` serves both (HF_ENDPOINT for a mirror, HF_HUB_CACHE, HF_TOKEN, HF_HUB_OFFLINE).
 * The token is a secret: it is kept in one buffer, zeroed when done, and every message names
 * where it came from instead.
 */
#include "hub_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static const char *env(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? v : NULL;
}

/* huggingface_hub's truth: 1, ON, YES or TRUE, in any case. */
static int env_true(const char *name)
{
	const char *v = env(name);
	return v && (!strcmp(v, "1") || !strcasecmp(v, "on") || !strcasecmp(v, "yes") ||
		     !strcasecmp(v, "true"));
}

static const char *home_dir(void)
{
	const char *home = env("HOME");
	if (home)
		return home;
	struct passwd *pw = getpwuid(getuid());
	return pw && pw->pw_dir && *pw->pw_dir ? pw->pw_dir : NULL;
}

/* $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface; -ENOENT without a
 * home directory to put it in. */
static int hf_home(char *out, size_t cap)
{
	if (env("HF_HOME"))
		return hub_path(out, cap, "%s", env("HF_HOME"));
	if (env("XDG_CACHE_HOME"))
		return hub_path(out, cap, "%s/huggingface", env("XDG_CACHE_HOME"));
	const char *home = home_dir();
	return home ? hub_path(out, cap, "%s/.cache/huggingface", home) : -ENOENT;
}

static int cache_dir(char *out, size_t cap, char *err, size_t err_cap)
{
	const char *dir = env("HF_HUB_CACHE") ? env("HF_HUB_CACHE") : env("HUGGINGFACE_HUB_CACHE");
	if (dir)
		return hub_path(out, cap, "%s", dir) ? hub_fail(err, err_cap, -ENAMETOOLONG,
							       "HF_HUB_CACHE is too long") : 0;
	char home[PATH_MAX];
	if (hf_home(home, sizeof(home)) < 0 || hub_path(out, cap, "%s/hub", home) < 0)
		return hub_fail(err, err_cap, -ENOENT,
				"no cache directory: no home directory, and none of HF_HUB_CACHE, "
				"HF_HOME or XDG_CACHE_HOME is set");
	return 0;
}

/* A token goes into an HTTP header: only printable ASCII without spaces may. */
static int token_check(const char *token, const char *source, char *err, size_t err_cap)
{
	for (const char *p = token; *p; p++)
		if (*p < 0x21 || *p > 0x7e)
			return hub_fail(err, err_cap, -EINVAL,
					"the token from %s holds a character a token cannot "
					"(space, control or non-ASCII)", source);
	return 0;
}

/* Surrounding white space (the newline an editor or `echo` adds) is not part of a token. */
static void trim(char *s)
{
	size_t len = strlen(s);
	while (len && (s[len - 1] == '\n' || s[len - 1] == '\r' || s[len - 1] == ' ' ||
		       s[len - 1] == '\t'))
		s[--len] = '\0';
	size_t lead = strspn(s, " \t\r\n");
	memmove(s, s + lead, len - lead + 1);
}

static int read_token_file(struct bn_hub_options *o, const char *path, char *err,
			   size_t err_cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0; /* no token saved: public repositories need none */
		return hub_fail(err, err_cap, -errno, "cannot read the token file %s: %s", path,
				strerror(errno));
	}
	ssize_t n = read(fd, o->token, sizeof(o->token) - 1);
	int saved = errno;
	close(fd);
	if (n < 0)
		return hub_fail(err, err_cap, -saved, "cannot read the token file %s: %s", path,
				strerror(saved));
	if ((size_t)n == sizeof(o->token) - 1)
		return hub_fail(err, err_cap, -EINVAL, "the token file %s is too long for a token",
				path);
	o->token[n] = '\0';
	trim(o->token);
	snprintf(o->token_source, sizeof(o->token_source), "%s", path);
	return 0;
}

static int load_token(struct bn_hub_options *o, char *err, size_t err_cap)
{
	const char *var = env("HF_TOKEN") ? "HF_TOKEN" : env("HUGGING_FACE_HUB_TOKEN") ?
		"HUGGING_FACE_HUB_TOKEN" : NULL;
	int rc = 0;
	if (var) {
		if (strlen(env(var)) >= sizeof(o->token))
			return hub_fail(err, err_cap, -EINVAL, "%s is too long for a token", var);
		strcpy(o->token, env(var));
		trim(o->token);
		snprintf(o->token_source, sizeof(o->token_source), "%s", var);
	} else {
		char path[PATH_MAX], home[PATH_MAX];
		if (env("HF_TOKEN_PATH"))
			rc = hub_path(path, sizeof(path), "%s", env("HF_TOKEN_PATH"));
		else if (hf_home(home, sizeof(home)) == 0)
			rc = hub_path(path, sizeof(path), "%s/token", home);
		else
			return 0;
		if (rc == 0)
			rc = read_token_file(o, path, err, err_cap);
	}
	if (rc == 0 && o->token[0])
		rc = token_check(o->token, o->token_source, err, err_cap);
	return rc;
}

int bn_hub_options_from_env(struct bn_hub_options *o, char *err, size_t err_cap)
{
	memset(o, 0, sizeof(*o));
	o->max_retries = 5;
	o->retry_wait_ms = 1000;
	o->offline = env_true("HF_HUB_OFFLINE") || env_true("TRANSFORMERS_OFFLINE");
	const char *endpoint = env("HF_ENDPOINT") ? env("HF_ENDPOINT") : BN_HUB_DEFAULT_ENDPOINT;
	if (hub_path(o->endpoint, sizeof(o->endpoint), "%s", endpoint) < 0)
		return hub_fail(err, err_cap, -EINVAL, "HF_ENDPOINT is too long");
	/* "https://hub.example/" and "https://hub.example" are one endpoint. */
	size_t len = strlen(o->endpoint);
	while (len && o->endpoint[len - 1] == '/')
		o->endpoint[--len] = '\0';
	int rc = cache_dir(o->cache_dir, sizeof(o->cache_dir), err, err_cap);
	if (rc == 0)
		rc = load_token(o, err, err_cap);
	if (rc < 0)
		bn_hub_options_clear(o);
	return rc;
}

void bn_hub_options_clear(struct bn_hub_options *o)
{
	explicit_bzero(o->token, sizeof(o->token));
}
