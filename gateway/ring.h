/* SPDX-License-Identifier: MIT */
/*
 * ring.h — the gateway's sessions with bitnetd. Each API key (or the one anonymous user) has a
 * pool of daemon sessions, opened on demand with the key's admission weight; a request holds
 * slots on one of them while it runs. A session the daemon dropped (a restart) is closed once
 * its last request lets go, and the next request opens a new one. The model the daemon serves
 * (its info and vocabulary) is fetched with the first session and again whenever a new session
 * reports another model.
 */
#ifndef BITNET_GATEWAY_RING_H
#define BITNET_GATEWAY_RING_H

#include "bitnet_client.h"

#include <pthread.h>
#include <stdint.h>

/* The daemon's model as the gateway serves it; shared by the requests that took it
 * (gw_model_put). */
struct gw_model {
	struct bn_model_info info;
	struct bn_vocab *vocab;   /* NULL: the daemon serves no vocabulary (ids only) */
	uint32_t features;        /* the session header's BN_FEAT_* (BN_FEAT_EMBED, ...) */
	char id[128];             /* what /v1/models reports and requests name */
	int refs;
};

struct gw_session;

/* Slots taken on one session. */
struct gw_lease {
	struct gw_session *session;
	struct bn_client *client;
	uint32_t n;               /* slots */
};

struct gw_pool {
	pthread_mutex_t lock;
	pthread_cond_t freed;     /* a slot came back, or a new session is open */
	const char *socket_path;
	uint32_t weight;
	uint32_t max_sessions;
	int opening;              /* a thread is connecting a new session */
	struct gw_session *sessions;
	struct gw_ring *ring;
};

/* Everything the gateway holds of the daemon. */
struct gw_ring {
	pthread_mutex_t lock;     /* model */
	const char *socket_path;
	const char *model_name;   /* --served-model-name, or NULL */
	struct gw_model *model;
};

void gw_ring_init(struct gw_ring *r, const char *socket_path, const char *model_name);
void gw_ring_free(struct gw_ring *r);
/* The current model with a reference (gw_model_put), or NULL when no session has told it yet:
 * then, with connect, a session is opened to ask (0, or its -BN_E_* / -errno in *err). */
struct gw_model *gw_ring_model(struct gw_ring *r, struct gw_pool *probe, int *err);
void gw_model_put(struct gw_ring *r, struct gw_model *m);

void gw_pool_init(struct gw_pool *p, struct gw_ring *r, uint32_t weight);
void gw_pool_free(struct gw_pool *p);
/* n slots on one session, opened when none has them free (up to max_sessions), waiting
 * until deadline_ns (CLOCK_MONOTONIC) for one to come back otherwise. 0, -BN_E_TIMEOUT, or
 * the connect error (-BN_E_BUSY, -BN_E_SHUTDOWN, -errno of connect(2), ...). */
int gw_pool_acquire(struct gw_pool *p, uint32_t n, int64_t deadline_ns, struct gw_lease *out);
/* Gives the slots back; gone: a call on the session returned -BN_E_DISCONNECTED (or the
 * daemon is shutting down), so it takes no new requests and closes with its last one. */
void gw_pool_release(struct gw_pool *p, struct gw_lease *l, int gone);

/* Grammars compiled on a session, kept by content (kind, flags, text) so a schema a session
 * has seen is not compiled again: at most GW_SESSION_GRAMMARS, the least recently used
 * unpinned one freed in the daemon for a new one; when the daemon says the session holds its
 * --max-grammars (-BN_E_BUSY), every unpinned one is freed and the compile tried once more.
 * A grammar is pinned from its look-up until its requests are queued (gw_grammar_unpin): a
 * free queued after them cannot overtake them. */
#define GW_SESSION_GRAMMARS 16
struct gw_grammar {
	struct bn_grammar_handle *handle;
	uint32_t kind, flags;
	char *text;
	size_t len;
	uint32_t pins;
	uint64_t used;            /* the session's clock at the last look-up */
	struct gw_grammar *next;
};

/* The grammar of spec on the lease's session, pinned: compiled (the lease's slots take the
 * round trip) unless the session has it. 0, or as bn_grammar_load with the daemon's reason
 * in why. */
int gw_lease_grammar(struct gw_lease *l, const struct bn_grammar_spec *spec, int64_t deadline_ns,
		     struct gw_grammar **out, char *why, size_t why_cap);
void gw_grammar_unpin(struct gw_lease *l, struct gw_grammar *g);

int64_t gw_now_ns(void);

#endif /* BITNET_GATEWAY_RING_H */
