/* SPDX-License-Identifier: MIT */
/*
 * models_config.c — the models a daemon serves, from its command line (config.h): --model
 * NAME=SOURCE (repeatable; a plain SOURCE is named by its file's stem, hf:REPO by REPO), the
 * models of --models-config FILE (JSON, with per-model options) and the GGUF files of
 * --models DIR (named by their stems). Every error names what is wrong and where.
 */
#define _GNU_SOURCE
#include "config.h"

#include "bitnet_client.h"
#include "bitnet_shm.h"
#include "grammars.h"
#include "model/embed.h"
#include "model/vocab.h"
#include "serve/sched.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bn_model_name_valid(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n >= BN_MODEL_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (!alnum && (i == 0 || !strchr("._:@+/-", c)))
			return 0;
	}
	return 1;
}

int bn_parse_size(const char *what, const char *text, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(text, &end, 10);
	unsigned shift = 0;
	if (*end == 'K' || *end == 'k')
		shift = 10;
	else if (*end == 'M' || *end == 'm')
		shift = 20;
	else if (*end == 'G' || *end == 'g')
		shift = 30;
	if (shift)
		end++;
	if (errno || end == text || *end || text[0] == '-' || v == 0 || v > (UINT64_MAX >> shift)) {
		fprintf(stderr, "bitnetd: %s: '%s' is not a size such as 4096, 512M or 2G\n", what,
			text);
		return -1;
	}
	*out = (uint64_t)v << shift;
	return 0;
}

int bn_parse_duration_ms(const char *what, const char *text, int64_t *out)
{
	if (!strcmp(text, "-1") || !strcmp(text, "never") || !strcmp(text, "forever")) {
		*out = -1;
		return 0;
	}
	static const struct {
		const char *suffix;
		int64_t ms;
	} units[] = { { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 }, { "", 1000 } };
	char *end;
	errno = 0;
	unsigned long long v = strtoull(text, &end, 10);
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (errno || end == text || text[0] == '-' || strcmp(end, units[i].suffix))
			continue;
		if (v > (unsigned long long)(INT64_MAX / units[i].ms))
			break;
		*out = (int64_t)v * units[i].ms;
		return 0;
	}
	fprintf(stderr, "bitnetd: %s: '%s' is not a duration such as 0, 500ms, 30s, 10m, 2h or "
			"never\n", what, text);
	return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* The list                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static struct bn_model_options *add_model(struct bn_config *cfg, const char *name,
					  const char *source, const char *where)
{
	if (!bn_model_name_valid(name)) {
		fprintf(stderr, "bitnetd: %s: '%s' is not a model name (1-63 bytes of letters, digits "
				"and ._:@+/-, starting with a letter or digit)\n", where, name);
		return NULL;
	}
	for (uint32_t i = 0; i < cfg->n_models; i++)
		if (!strcmp(cfg->models[i].name, name)) {
			fprintf(stderr, "bitnetd: %s: a model named '%s' is given twice (name one of "
					"them: --model NAME=PATH)\n", where, name);
			return NULL;
		}
	struct bn_model_options *m = realloc(cfg->models, (cfg->n_models + 1) * sizeof(*m));
	if (!m) {
		fprintf(stderr, "bitnetd: out of memory\n");
		return NULL;
	}
	cfg->models = m;
	m += cfg->n_models++;
	*m = (struct bn_model_options){ .source = source, .speculative = -1, .keep_alive_ms = -1 };
	snprintf(m->name, sizeof(m->name), "%s", name);
	if (source)
		snprintf(m->path, sizeof(m->path), "%s", source);
	return m;
}

/* The name a source goes by: hf:REPO[:FILE] its REPO, a path its file's stem (".gguf" off). */
static void default_name(const char *source, char *out, size_t cap)
{
	if (!strncmp(source, "hf:", 3)) {
		snprintf(out, cap, "%s", source + 3);
		char *colon = strchr(out, ':');
		if (colon)
			*colon = 0;
		return;
	}
	const char *base = strrchr(source, '/');
	snprintf(out, cap, "%s", base ? base + 1 : source);
	size_t n = strlen(out);
	if (n > 5 && !strcmp(out + n - 5, ".gguf"))
		out[n - 5] = 0;
}

/* --model NAME=SOURCE or --model SOURCE: the text before the first '=' is a name when it is
 * one by the rules (a path with '=' after a name-like start is written ./path). */
static int add_model_arg(struct bn_config *cfg, const char *arg)
{
	const char *eq = strchr(arg, '=');
	char name[BN_MODEL_NAME_MAX + 1];
	if (eq && (size_t)(eq - arg) < sizeof(name)) {
		memcpy(name, arg, (size_t)(eq - arg));
		name[eq - arg] = 0;
		if (bn_model_name_valid(name)) {
			if (!eq[1]) {
				fprintf(stderr, "bitnetd: --model %s: no file after the name\n", arg);
				return -1;
			}
			return add_model(cfg, name, eq + 1, "--model") ? 0 : -1;
		}
	}
	if (!*arg) {
		fprintf(stderr, "bitnetd: --model: give a file, hf:REPO or NAME=FILE\n");
		return -1;
	}
	default_name(arg, name, sizeof(name));
	return add_model(cfg, name, arg, "--model") ? 0 : -1;
}

/* ------------------------------------------------------------------------------------------ */
/* --models-config FILE (JSON)                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* A size or a duration given as a JSON number or string. */
static int json_text(json_t *v, char *buf, size_t cap)
{
	if (json_is_string(v))
		snprintf(buf, cap, "%s", json_string_value(v));
	else if (json_is_integer(v))
		snprintf(buf, cap, "%lld", (long long)json_integer_value(v));
	else
		return -1;
	return 0;
}

static int speculative_from(const char *text)
{
	for (int i = 0; i < BN_SPECULATIVE_MODES; i++)
		if (!strcmp(text, bn_speculative_names[i]))
			return i;
	return -1;
}

/* Copies a string option out of the document: the options outlive it (freed with cfg). */
static const char *keep_string(struct bn_config *cfg, json_t *v)
{
	char **grown = realloc(cfg->owned, (cfg->n_owned + 1) * sizeof(*grown));
	if (!grown)
		return NULL;
	cfg->owned = grown;
	char *copy = json_is_string(v) ? strdup(json_string_value(v)) : NULL;
	if (copy)
		cfg->owned[cfg->n_owned++] = copy;
	return copy;
}

static int model_option(struct bn_config *cfg, struct bn_model_options *m, const char *key,
			json_t *v, const char *where)
{
	char text[64] = "";
	int bad = 0;
	if (!strcmp(key, "name") || !strcmp(key, "path")) {
		return 0; /* taken before */
	} else if (!strcmp(key, "context")) {
		bad = !json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 24);
		if (!bad)
			m->context = (uint32_t)json_integer_value(v);
	} else if (!strcmp(key, "kv_memory")) {
		bad = json_text(v, text, sizeof(text)) || bn_parse_size(where, text, &m->kv_memory);
	} else if (!strcmp(key, "pinned")) {
		bad = !json_is_boolean(v);
		m->pinned = json_is_true(v);
	} else if (!strcmp(key, "keep_alive")) {
		bad = json_text(v, text, sizeof(text)) ||
		      bn_parse_duration_ms(where, text, &m->keep_alive_ms);
	} else if (!strcmp(key, "speculative")) {
		bad = !json_is_string(v) || (m->speculative = speculative_from(json_string_value(v))) < 0;
	} else if (!strcmp(key, "draft_tokens")) {
		bad = !json_is_integer(v) || json_integer_value(v) < 1 ||
		      json_integer_value(v) > BN_DRAFT_MAX_TOKENS;
		if (!bad)
			m->draft_tokens = (uint32_t)json_integer_value(v);
	} else if (!strcmp(key, "pre_tokenizer")) {
		bad = !json_is_string(v) || bn_pre_tokenizer_from_name(json_string_value(v)) <= 0;
		m->pre_tokenizer = bad ? NULL : keep_string(cfg, v);
	} else if (!strcmp(key, "chat_template")) {
		bad = !json_is_string(v) || bn_chat_template_from_name(json_string_value(v)) <= 0;
		m->chat_template = bad ? NULL : keep_string(cfg, v);
	} else if (!strcmp(key, "pooling")) {
		int pooling = json_is_string(v) ? bn_pooling_from_name(json_string_value(v)) : -1;
		bad = pooling <= 0;
		m->pooling = bad ? 0 : (uint32_t)pooling;
	} else {
		fprintf(stderr, "bitnetd: %s: unknown option '%s' (name, path, context, kv_memory, "
				"pinned, keep_alive, speculative, draft_tokens, pre_tokenizer, "
				"chat_template, pooling)\n", where, key);
		return -1;
	}
	if (bad)
		fprintf(stderr, "bitnetd: %s: '%s' has a value it cannot take (bitnetd(8), "
				"--models-config)\n", where, key);
	return bad ? -1 : 0;
}

static int config_model(struct bn_config *cfg, json_t *o, size_t i)
{
	char where[PATH_MAX + 64];
	snprintf(where, sizeof(where), "%s: models[%zu]", cfg->models_config, i);
	json_t *path = json_object_get(o, "path"), *name = json_object_get(o, "name");
	if (!json_is_object(o) || !json_is_string(path) || !*json_string_value(path) ||
	    (name && !json_is_string(name))) {
		fprintf(stderr, "bitnetd: %s: each model is an object with \"path\" (a file or "
				"hf:REPO) and optionally \"name\"\n", where);
		return -1;
	}
	char fallback[BN_MODEL_NAME_MAX + 1];
	const char *source = keep_string(cfg, path);
	if (!source)
		return -1;
	default_name(source, fallback, sizeof(fallback));
	struct bn_model_options *m = add_model(cfg, name ? json_string_value(name) : fallback,
					       source, where);
	if (!m)
		return -1;
	const char *key;
	json_t *v;
	json_object_foreach(o, key, v)
		if (model_option(cfg, m, key, v, where) < 0)
			return -1;
	return 0;
}

static int read_models_config(struct bn_config *cfg)
{
	json_error_t je;
	json_t *root = json_load_file(cfg->models_config, 0, &je);
	if (!root) {
		fprintf(stderr, "bitnetd: --models-config %s: line %d: %s\n", cfg->models_config,
			je.line, je.text);
		return -1;
	}
	json_t *list = json_object_get(root, "models");
	int rc = 0;
	if (!json_is_object(root) || !json_is_array(list) || json_object_size(root) != 1) {
		fprintf(stderr, "bitnetd: --models-config %s: the file is {\"models\": [ ... ]}\n",
			cfg->models_config);
		rc = -1;
	}
	for (size_t i = 0; rc == 0 && i < json_array_size(list); i++)
		rc = config_model(cfg, json_array_get(list, i), i);
	json_decref(root);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* --models DIR                                                                                */
/* ------------------------------------------------------------------------------------------ */

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int gguf_file(const struct dirent *d)
{
	size_t n = strlen(d->d_name);
	return d->d_name[0] != '.' && n > 5 && !strcmp(d->d_name + n - 5, ".gguf");
}

static int read_models_dir(struct bn_config *cfg)
{
	struct dirent **list;
	int n = scandir(cfg->models_dir, &list, gguf_file, by_name);
	if (n < 0) {
		fprintf(stderr, "bitnetd: --models %s: %s\n", cfg->models_dir, strerror(errno));
		return -1;
	}
	int rc = 0;
	for (int i = 0; i < n; i++) {
		char name[BN_MODEL_NAME_MAX + 1];
		json_t *path = json_sprintf("%s/%s", cfg->models_dir, list[i]->d_name);
		const char *kept = path ? keep_string(cfg, path) : NULL;
		json_decref(path);
		if (!kept)
			rc = -1;
		if (rc == 0) {
			default_name(kept, name, sizeof(name));
			rc = add_model(cfg, name, kept, "--models") ? 0 : -1;
		}
		free(list[i]);
	}
	free(list);
	return rc;
}

int bn_models_config_build(struct bn_config *cfg)
{
	for (uint32_t i = 0; i < cfg->n_model_args; i++)
		if (add_model_arg(cfg, cfg->model_args[i]) < 0)
			return -1;
	if (cfg->models_config && read_models_config(cfg) < 0)
		return -1;
	if (cfg->models_dir && read_models_dir(cfg) < 0)
		return -1;
	if (cfg->n_models == 0 && !add_model(cfg, "default", NULL, "bitnetd"))
		return -1; /* the loopback backend's, which has no file */
	cfg->model_path = cfg->models[0].source ? cfg->models[0].path : NULL;
	return 0;
}

void bn_config_free(struct bn_config *cfg)
{
	for (uint32_t i = 0; i < cfg->n_owned; i++)
		free(cfg->owned[i]);
	free(cfg->owned);
	cfg->owned = NULL;
	cfg->n_owned = 0;
	free(cfg->models);
	free(cfg->model_args);
	cfg->models = NULL;
	cfg->model_args = NULL;
	cfg->n_models = cfg->n_model_args = 0;
}
