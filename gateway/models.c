/* SPDX-License-Identifier: MIT */
/*
 * models.c — the daemon's models as the gateway serves them (models.h): which model a
 * request's `model` names, each model's info and vocabulary (fetched with its first session
 * and again when a new session reports it changed), and /v1/models from the daemon's MODELS
 * list (shm/PROTOCOL.md §15).
 */
#define _GNU_SOURCE
#include "models.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A MODELS round trip may wait for the daemon's answer; a model's first session too. */
#define PROBE_NS 5000000000LL

void gw_ring_init(struct gw_ring *r, const char *socket_path, const char *model_name)
{
	*r = (struct gw_ring){ .socket_path = socket_path, .model_name = model_name };
	pthread_mutex_init(&r->lock, NULL);
}

static void model_free(struct gw_model *m)
{
	if (m && m->vocab)
		bn_vocab_free(m->vocab);
	free(m);
}

void gw_ring_free(struct gw_ring *r)
{
	for (struct gw_model *m = r->models, *next; m; m = next) {
		next = m->next;
		model_free(m);
	}
	r->models = NULL;
	pthread_mutex_destroy(&r->lock);
}

void gw_model_put(struct gw_ring *r, struct gw_model *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&r->lock);
	int last = --m->refs == 0;
	pthread_mutex_unlock(&r->lock);
	if (last)
		model_free(m);
}

/* The id /v1/models gives a model: --served-model-name for the default; else its name in
 * the daemon, except the default of a daemon of one model (or without names), which keeps
 * the name its file gives, as gateways before several models said. */
static void model_id(const struct gw_ring *r, struct gw_model *m)
{
	const char *id = m->served;
	if (m->is_default && r->model_name)
		id = r->model_name;
	else if (m->is_default && (r->n_served <= 1 || !m->served[0]))
		id = m->info.name;
	snprintf(m->id, sizeof(m->id), "%s", id);
}

int gw_model_named(const struct gw_ring *r, const struct gw_model *m, const char *name)
{
	const char *alias = r ? r->model_name : NULL;
	if (!name || !*name)
		return m->is_default;
	if (!strcmp(name, m->id) || (m->served[0] && !strcmp(name, m->served)))
		return 1;
	/* the default answers to every name it had: the alias, its file's name */
	return m->is_default && ((alias && !strcmp(name, alias)) || !strcmp(name, m->info.name));
}

static struct gw_model *find_locked(struct gw_ring *r, const char *name)
{
	for (struct gw_model *m = r->models; m; m = m->next)
		if (gw_model_named(r, m, name))
			return m;
	return NULL;
}

static int same_model(const struct bn_model_info *a, const struct bn_model_info *b)
{
	return strcmp(a->name, b->name) == 0 && a->vocab_size == b->vocab_size &&
	       a->context_length == b->context_length && a->eos_id == b->eos_id &&
	       a->bos_id == b->bos_id;
}

/* The current model of that served name, its place in the list. Under the lock. */
static struct gw_model **slot_of(struct gw_ring *r, const char *served)
{
	struct gw_model **at = &r->models;
	while (*at && strcmp((*at)->served, served))
		at = &(*at)->next;
	return at;
}

void gw_models_note(struct gw_ring *r, struct bn_client *c, const char *asked)
{
	struct bn_model_info info;
	char served[BN_MODEL_NAME_MAX] = "";
	if (bn_model_info(c, &info) < 0)
		return;
	(void)bn_model_served_name(c, served, sizeof(served)); /* "" from a daemon without */
	uint32_t features = bn_model_features(c);
	pthread_mutex_lock(&r->lock);
	if (!asked || !*asked)
		snprintf(r->default_served, sizeof(r->default_served), "%s", served);
	struct gw_model *cur = *slot_of(r, served);
	int known = cur && same_model(&cur->info, &info) && cur->features == features;
	pthread_mutex_unlock(&r->lock);
	if (known)
		return;
	struct gw_model *m = calloc(1, sizeof(*m));
	if (!m)
		return;
	m->info = info;
	m->features = features;
	m->refs = 1; /* the ring's */
	snprintf(m->served, sizeof(m->served), "%s", served);
	int rc = bn_vocab_fetch(c, &m->vocab);
	if (rc < 0) {
		m->vocab = NULL;
		gw_log_warn("msg=\"the daemon serves no vocabulary for this model: text prompts and chat are refused\" model=\"%s\" error=\"%s\"",
			    served, bn_strerror(rc));
	}
	pthread_mutex_lock(&r->lock);
	m->is_default = !strcmp(served, r->default_served);
	model_id(r, m);
	struct gw_model **at = slot_of(r, served), *old = *at;
	m->next = old ? old->next : NULL;
	*at = m;
	int free_old = old && --old->refs == 0;
	pthread_mutex_unlock(&r->lock);
	gw_log_info("msg=\"model\" id=\"%s\" served=\"%s\" daemon_name=\"%s\" vocab_size=%u context_length=%u",
		    m->id, served, info.name, info.vocab_size, info.context_length);
	if (free_old)
		model_free(old);
}

/* The daemon's models (its MODELS list, through a session of the default model) into
 * *out, malloc'd; their count, or < 0: -BN_E_UNSUPPORTED from a daemon without names. */
static int catalog(struct gw_ring *r, struct gw_pool *probe, struct bn_model_status **out)
{
	struct gw_lease l;
	*out = NULL;
	int rc = gw_pool_acquire(probe, NULL, 0, gw_now_ns() + PROBE_NS, &l);
	if (rc < 0)
		return rc;
	int n = bn_models_list(l.client, NULL, 0);
	if (n >= 0 && !(*out = calloc((size_t)n + 1, sizeof(**out))))
		n = -ENOMEM;
	if (n > 0) {
		int got = bn_models_list(l.client, *out, (size_t)n);
		n = got < n ? got : n; /* a model added meanwhile waits for the next look */
	}
	if (n >= 0 || n == -BN_E_UNSUPPORTED) {
		pthread_mutex_lock(&r->lock);
		r->listed = 1;
		r->n_served = n > 0 ? (uint32_t)n : 0;
		for (int i = 0; i < n; i++)
			if ((*out)[i].is_default)
				snprintf(r->default_served, sizeof(r->default_served), "%s",
					 (*out)[i].name);
		pthread_mutex_unlock(&r->lock);
	}
	if (l.fresh) /* after the count: the default's id depends on it */
		gw_models_note(r, l.client, NULL);
	gw_pool_release(probe, &l, n == -BN_E_DISCONNECTED);
	return n;
}

/* The daemon's name of the model `name` asks for (what its sessions are opened with), or
 * -BN_E_MODEL_NOT_FOUND. NULL and "" are the default. */
static int resolve(struct gw_ring *r, struct gw_pool *probe, const char *name, char *served,
		   size_t cap)
{
	served[0] = 0;
	if (!name || !*name || (r->model_name && !strcmp(name, r->model_name)))
		return 0;
	struct bn_model_status *list;
	int n = catalog(r, probe, &list);
	if (n == -BN_E_UNSUPPORTED)
		return 0; /* one model: whether its name fits, the job's check says */
	if (n < 0)
		return n;
	int rc = -BN_E_MODEL_NOT_FOUND;
	for (int i = 0; i < n && rc < 0; i++)
		if (!strcmp(list[i].name, name)) {
			snprintf(served, cap, "%s", list[i].is_default ? "" : name);
			rc = 0;
		}
	free(list);
	if (rc < 0) { /* the default's other names: its file's (the catalog's session noted it) */
		pthread_mutex_lock(&r->lock);
		struct gw_model *d = find_locked(r, NULL);
		rc = d && gw_model_named(r, d, name) ? 0 : rc;
		pthread_mutex_unlock(&r->lock);
	}
	return rc;
}

struct gw_model *gw_ring_model(struct gw_ring *r, struct gw_pool *probe, const char *name,
			       int *err)
{
	*err = 0;
	pthread_mutex_lock(&r->lock);
	struct gw_model *m = find_locked(r, name);
	if (m)
		m->refs++;
	pthread_mutex_unlock(&r->lock);
	if (m || !probe)
		return m;
	pthread_mutex_lock(&r->lock);
	int listed = r->listed;
	pthread_mutex_unlock(&r->lock);
	struct bn_model_status *list = NULL;
	if (!listed) /* how many models: the default's id depends on it (model_id) */
		(void)catalog(r, probe, &list);
	free(list);
	char served[BN_MODEL_NAME_MAX];
	if ((*err = resolve(r, probe, name, served, sizeof(served))) < 0)
		return NULL;
	/* a session of the model tells it (and, for the default, its name) */
	struct gw_lease l;
	if ((*err = gw_pool_acquire(probe, served, 0, gw_now_ns() + PROBE_NS, &l)) < 0)
		return NULL;
	gw_models_note(r, l.client, served);
	gw_pool_release(probe, &l, 0);
	pthread_mutex_lock(&r->lock);
	m = served[0] ? *slot_of(r, served) : find_locked(r, NULL);
	if (m)
		m->refs++;
	pthread_mutex_unlock(&r->lock);
	if (!m)
		*err = -BN_E_DISCONNECTED;
	return m;
}

/* ---- /v1/models -------------------------------------------------------------------------- */

/* One entry of /v1/models: OpenAI's fields, and the daemon's state of the model. */
static json_t *model_json(struct gw_ring *r, const struct bn_model_status *s)
{
	char id[128];
	snprintf(id, sizeof(id), "%s", s->name);
	if (s->is_default) {
		pthread_mutex_lock(&r->lock);
		struct gw_model *m = find_locked(r, NULL);
		if (m || r->model_name)
			snprintf(id, sizeof(id), "%s", m ? m->id : r->model_name);
		pthread_mutex_unlock(&r->lock);
	}
	return json_pack("{s:s, s:s, s:I, s:s, s:I, s:s, s:b, s:I, s:o}", "id", id, "object",
			 "model", "created", (json_int_t)0, "owned_by", "bitnetd", "max_model_len",
			 (json_int_t)s->context_length, "state", bn_model_state_name(s->state),
			 "default", s->is_default, "bytes", (json_int_t)s->bytes, "idle_since",
			 s->idle_since_ms > 0 ? json_integer(s->idle_since_ms / 1000) : json_null());
}

/* A daemon without names: its one model, as the gateway knows it. */
static json_t *single_json(const struct gw_model *m)
{
	return json_pack("{s:s, s:s, s:I, s:s, s:I}", "id", m->id, "object", "model", "created",
			 (json_int_t)0, "owned_by", "bitnetd", "max_model_len",
			 (json_int_t)m->info.context_length);
}

json_t *gw_models_json(struct gw_ring *r, struct gw_pool *probe, const char *one, int *err)
{
	struct bn_model_status *list = NULL;
	int n = catalog(r, probe, &list);
	json_t *data = json_array(), *found = NULL;
	*err = n == -BN_E_UNSUPPORTED ? 0 : n < 0 ? n : 0;
	if (n == -BN_E_UNSUPPORTED) {
		struct gw_model *m = gw_ring_model(r, probe, NULL, err);
		if (m)
			json_array_append_new(data, single_json(m));
		gw_model_put(r, m);
	}
	for (int i = 0; i < n; i++) {
		json_t *o = model_json(r, &list[i]);
		if (!o)
			continue;
		if (one && (!strcmp(json_string_value(json_object_get(o, "id")), one) ||
			    !strcmp(list[i].name, one)))
			found = json_incref(o);
		json_array_append_new(data, o);
	}
	if (n == -BN_E_UNSUPPORTED && one && json_array_size(data) &&
	    !strcmp(json_string_value(json_object_get(json_array_get(data, 0), "id")), one))
		found = json_incref(json_array_get(data, 0));
	free(list);
	if (*err < 0) {
		json_decref(data);
		return NULL;
	}
	if (one) {
		json_decref(data);
		if (!found)
			*err = -BN_E_MODEL_NOT_FOUND;
		return found;
	}
	return json_pack("{s:s, s:o}", "object", "list", "data", data);
}
