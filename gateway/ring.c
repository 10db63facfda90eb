/* SPDX-License-Identifier: MIT */
/*
 * ring.c — daemon sessions by key, and the model they serve.
 */
#define _GNU_SOURCE
#include "ring.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Sessions one key may hold: with the daemon's default 64 slots each, 4096 requests. */
#define MAX_SESSIONS 64

struct gw_session {
	struct bn_client *client;
	uint32_t slots, used;
	uint32_t holders;         /* leases on it, slots or not (a health check holds none) */
	int gone;                 /* takes no new requests; closed when its last lease ends */
	struct gw_session *next;
	pthread_mutex_t glock;    /* grammars */
	struct gw_grammar *grammars;
	uint32_t n_grammars;
	uint64_t clock;
};

int64_t gw_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- the model --------------------------------------------------------------------------- */

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
	model_free(r->model);
	r->model = NULL;
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

static int same_model(const struct bn_model_info *a, const struct bn_model_info *b)
{
	return strcmp(a->name, b->name) == 0 && a->vocab_size == b->vocab_size &&
	       a->context_length == b->context_length && a->eos_id == b->eos_id &&
	       a->bos_id == b->bos_id;
}

/* A new session's model: kept when it is the one the gateway knows, else fetched (the daemon
 * was restarted on another file) and made current. */
static void note_model(struct gw_ring *r, struct bn_client *c)
{
	struct bn_model_info info;
	if (bn_model_info(c, &info) < 0)
		return;
	uint32_t features = bn_model_features(c);
	pthread_mutex_lock(&r->lock);
	int known = r->model && same_model(&r->model->info, &info) &&
		    r->model->features == features;
	pthread_mutex_unlock(&r->lock);
	if (known)
		return;
	struct gw_model *m = calloc(1, sizeof(*m));
	if (!m)
		return;
	m->info = info;
	m->features = features;
	m->refs = 1; /* the ring's */
	snprintf(m->id, sizeof(m->id), "%s", r->model_name ? r->model_name : info.name);
	int rc = bn_vocab_fetch(c, &m->vocab);
	if (rc < 0) {
		m->vocab = NULL;
		gw_log_warn("msg=\"the daemon serves no vocabulary: text prompts and chat are refused\" error=\"%s\"",
			    bn_strerror(rc));
	}
	gw_log_info("msg=\"model\" id=\"%s\" daemon_name=\"%s\" vocab_size=%u context_length=%u",
		    m->id, info.name, info.vocab_size, info.context_length);
	pthread_mutex_lock(&r->lock);
	struct gw_model *old = r->model;
	r->model = m;
	int free_old = old && --old->refs == 0;
	pthread_mutex_unlock(&r->lock);
	if (free_old)
		model_free(old);
}

struct gw_model *gw_ring_model(struct gw_ring *r, struct gw_pool *probe, int *err)
{
	*err = 0;
	for (int attempt = 0; attempt < 2; attempt++) {
		pthread_mutex_lock(&r->lock);
		struct gw_model *m = r->model;
		if (m)
			m->refs++;
		pthread_mutex_unlock(&r->lock);
		if (m || attempt == 1 || !probe)
			return m;
		struct gw_lease l;
		*err = gw_pool_acquire(probe, 0, gw_now_ns() + 5000000000LL, &l);
		if (*err < 0)
			return NULL;
		gw_pool_release(probe, &l, 0);
	}
	return NULL;
}

/* ---- sessions ---------------------------------------------------------------------------- */

void gw_pool_init(struct gw_pool *p, struct gw_ring *r, uint32_t weight)
{
	*p = (struct gw_pool){ .socket_path = r->socket_path, .weight = weight,
			       .max_sessions = MAX_SESSIONS, .ring = r };
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->freed, &ca);
	pthread_condattr_destroy(&ca);
}

static void grammar_free(struct gw_grammar *g)
{
	bn_grammar_release(g->handle);
	free(g->text);
	free(g);
}

/* A session's end: its grammars freed (in the daemon too, which forgets them with the
 * session anyway), then the session. */
static void session_free(struct gw_session *s)
{
	for (struct gw_grammar *g = s->grammars, *next; g; g = next) {
		next = g->next;
		grammar_free(g);
	}
	pthread_mutex_destroy(&s->glock);
	bn_disconnect(s->client);
	free(s);
}

void gw_pool_free(struct gw_pool *p)
{
	for (struct gw_session *s = p->sessions, *next; s; s = next) {
		next = s->next;
		session_free(s);
	}
	p->sessions = NULL;
	pthread_cond_destroy(&p->freed);
	pthread_mutex_destroy(&p->lock);
}

/* Closes the sessions that are gone and idle; returns how many are live. Under the lock. */
static uint32_t prune(struct gw_pool *p)
{
	uint32_t live = 0;
	for (struct gw_session **at = &p->sessions; *at;) {
		struct gw_session *s = *at;
		if (s->gone && s->holders == 0) {
			*at = s->next;
			session_free(s);
			continue;
		}
		live += !s->gone;
		at = &s->next;
	}
	return live;
}

static struct gw_session *with_room(struct gw_pool *p, uint32_t n)
{
	for (struct gw_session *s = p->sessions; s; s = s->next)
		if (!s->gone && s->slots - s->used >= n)
			return s;
	return NULL;
}

/* A new session, outside the lock (a connect is a round trip). 0 or its error. */
static int open_session(struct gw_pool *p, struct gw_session **out)
{
	struct gw_session *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	int rc = bn_connect_weighted(p->socket_path, 0, p->weight, &s->client);
	struct bn_model_info info;
	if (rc == 0 && (rc = bn_model_info(s->client, &info)) < 0)
		bn_disconnect(s->client);
	if (rc < 0) {
		free(s);
		return rc;
	}
	s->slots = info.slots;
	pthread_mutex_init(&s->glock, NULL);
	note_model(p->ring, s->client);
	*out = s;
	return 0;
}

static int wait_freed(struct gw_pool *p, int64_t deadline_ns)
{
	struct timespec ts = { .tv_sec = deadline_ns / 1000000000, .tv_nsec = deadline_ns % 1000000000 };
	return pthread_cond_timedwait(&p->freed, &p->lock, &ts) == ETIMEDOUT ? -BN_E_TIMEOUT : 0;
}

int gw_pool_acquire(struct gw_pool *p, uint32_t n, int64_t deadline_ns, struct gw_lease *out)
{
	pthread_mutex_lock(&p->lock);
	int rc = 0;
	for (;;) {
		uint32_t live = prune(p);
		struct gw_session *s = with_room(p, n);
		if (s) {
			s->used += n;
			s->holders++;
			*out = (struct gw_lease){ .session = s, .client = s->client, .n = n };
			break;
		}
		/* One connect at a time: requests that arrive together wait for its slots rather
		 * than each opening a session (the daemon caps a user's sessions). */
		if (live < p->max_sessions && !p->opening) {
			p->opening = 1;
			pthread_mutex_unlock(&p->lock);
			rc = open_session(p, &s);
			pthread_mutex_lock(&p->lock);
			p->opening = 0;
			pthread_cond_broadcast(&p->freed);
			if (rc < 0)
				break;
			s->next = p->sessions;
			p->sessions = s;
			if (n > s->slots) { /* no session will ever have room */
				rc = -BN_E_TOO_LONG;
				break;
			}
			continue;
		}
		if ((rc = wait_freed(p, deadline_ns)) < 0)
			break;
	}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

void gw_pool_release(struct gw_pool *p, struct gw_lease *l, int gone)
{
	if (!l->session)
		return;
	pthread_mutex_lock(&p->lock);
	l->session->used -= l->n;
	l->session->holders--;
	if (gone && !l->session->gone) {
		l->session->gone = 1;
		gw_log_info("msg=\"a daemon session ended; the next request opens another\"");
	}
	prune(p);
	pthread_cond_broadcast(&p->freed);
	pthread_mutex_unlock(&p->lock);
	l->session = NULL;
	l->client = NULL;
}

/* ---- grammars ---------------------------------------------------------------------------- */

static struct gw_grammar *grammar_find(struct gw_session *s, const struct bn_grammar_spec *spec)
{
	for (struct gw_grammar *g = s->grammars; g; g = g->next)
		if (g->kind == spec->kind && g->flags == spec->flags && g->len == spec->len &&
		    (!g->len || memcmp(g->text, spec->text, g->len) == 0))
			return g;
	return NULL;
}

/* Takes unpinned grammars out of the session (all, or the least recently used one), for the
 * caller to free outside the lock. Under glock. */
static struct gw_grammar *grammar_evict(struct gw_session *s, int all)
{
	struct gw_grammar *out = NULL, **lru = NULL;
	for (struct gw_grammar **at = &s->grammars; *at;) {
		struct gw_grammar *g = *at;
		if (g->pins == 0 && all) {
			*at = g->next;
			g->next = out;
			out = g;
			s->n_grammars--;
			continue;
		}
		if (g->pins == 0 && (!lru || g->used < (*lru)->used))
			lru = at;
		at = &g->next;
	}
	if (!all && lru) {
		out = *lru;
		*lru = out->next;
		out->next = NULL;
		s->n_grammars--;
	}
	return out;
}

static void grammars_free(struct gw_grammar *list)
{
	for (struct gw_grammar *next; list; list = next) {
		next = list->next;
		grammar_free(list);
	}
}

/* The session's entry for spec, pinned, or NULL. Under glock. */
static struct gw_grammar *grammar_pin(struct gw_session *s, const struct bn_grammar_spec *spec)
{
	struct gw_grammar *g = grammar_find(s, spec);
	if (g) {
		g->pins++;
		g->used = ++s->clock;
	}
	return g;
}

/* A newly compiled grammar into the session, pinned; one that another thread put there
 * meanwhile is taken instead (ours freed). */
static struct gw_grammar *grammar_add(struct gw_session *s, struct gw_grammar *mine)
{
	pthread_mutex_lock(&s->glock);
	struct gw_grammar *g = grammar_pin(s, &(struct bn_grammar_spec){
		.kind = mine->kind, .flags = mine->flags, .text = mine->text, .len = mine->len });
	if (!g) {
		g = mine;
		g->pins = 1;
		g->used = ++s->clock;
		g->next = s->grammars;
		s->grammars = g;
		s->n_grammars++;
	}
	pthread_mutex_unlock(&s->glock);
	if (g != mine)
		grammar_free(mine);
	return g;
}

static int grammar_compile(struct gw_lease *l, const struct bn_grammar_spec *spec,
			   int64_t deadline_ns, struct gw_grammar **out, char *why, size_t why_cap)
{
	struct gw_session *s = l->session;
	struct gw_grammar *g = calloc(1, sizeof(*g));
	if (!g || (spec->len && !(g->text = malloc(spec->len)))) {
		free(g);
		return -ENOMEM;
	}
	g->kind = spec->kind;
	g->flags = spec->flags;
	g->len = spec->len;
	if (spec->len)
		memcpy(g->text, spec->text, spec->len);
	int rc = -BN_E_BUSY;
	for (int attempt = 0; attempt < 2 && rc == -BN_E_BUSY; attempt++) {
		if (attempt) { /* the daemon's --max-grammars: every grammar not in use goes */
			pthread_mutex_lock(&s->glock);
			struct gw_grammar *old = grammar_evict(s, 1);
			pthread_mutex_unlock(&s->glock);
			grammars_free(old);
		}
		rc = bn_grammar_load(l->client, spec, &g->handle, why, why_cap,
				     deadline_ns - gw_now_ns());
	}
	if (rc < 0) {
		free(g->text);
		free(g);
		return rc;
	}
	*out = grammar_add(s, g);
	return 0;
}

int gw_lease_grammar(struct gw_lease *l, const struct bn_grammar_spec *spec, int64_t deadline_ns,
		     struct gw_grammar **out, char *why, size_t why_cap)
{
	struct gw_session *s = l->session;
	if (why_cap)
		why[0] = '\0';
	pthread_mutex_lock(&s->glock);
	struct gw_grammar *g = grammar_pin(s, spec), *old = NULL;
	if (!g && s->n_grammars >= GW_SESSION_GRAMMARS)
		old = grammar_evict(s, 0);
	pthread_mutex_unlock(&s->glock);
	grammars_free(old);
	if (g) {
		*out = g;
		return 0;
	}
	return grammar_compile(l, spec, deadline_ns, out, why, why_cap);
}

void gw_grammar_unpin(struct gw_lease *l, struct gw_grammar *g)
{
	pthread_mutex_lock(&l->session->glock);
	g->pins--;
	pthread_mutex_unlock(&l->session->glock);
}
