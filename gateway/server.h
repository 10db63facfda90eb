/* SPDX-License-Identifier: MIT */
/*
 * server.h — the HTTP side: libmicrohttpd with a thread per connection (a request blocks on
 * the daemon in its own thread; a stream's body is produced in it, slice by slice), the
 * routes, API keys, limits, and the responses they make.
 */
#ifndef BITNET_GATEWAY_SERVER_H
#define BITNET_GATEWAY_SERVER_H

#include "config.h"
#include "job.h"
#include "metrics.h"
#include "render.h"
#include "ring.h"
#include "run.h"

#include <microhttpd.h>
#include <pthread.h>

struct gw_conn; /* one TCP connection (server.c) */

struct gw_server {
	const struct gw_config *cfg;
	struct MHD_Daemon *mhd;
	struct gw_ring ring;
	struct gw_pool anonymous;  /* without --api-key-file */
	struct gw_pool *key_pools; /* [cfg->n_keys] */
	uint32_t anonymous_running;
	uint32_t running;          /* completions running, every key's */
	uint32_t *key_running;     /* [cfg->n_keys]: choices running, per key */
	pthread_mutex_t conns_lock;
	struct gw_conn *conns;     /* every open connection, for the header deadline */
	pthread_t watchdog;
	int watchdog_started;
	int stopping;              /* SIGTERM: running requests end, new ones get 503 */
};

/* One HTTP request. */
struct gw_req {
	struct gw_server *srv;
	struct gw_conn *conn;
	int fd;                    /* the connection's socket, -1 if unknown */
	enum gw_route route;
	int64_t t0;
	int status;                /* sent or to send */
	struct gw_buf body;
	int body_too_large;
	int bad_route;             /* 404 or 405, known from the first call */
	const struct gw_key *key;  /* NULL: anonymous */
	int authorized;
	/* a completion */
	struct gw_pool *pool;
	uint32_t *running;         /* the key's counter, taken while it runs */
	uint32_t choices;
	struct gw_model *model;
	struct gw_job job;
	struct gw_run run;
	int run_started;
	int finished;              /* a stream's last event is in out */
	int first_token_seen;
	struct gw_buf out;         /* a stream's events not yet handed to libmicrohttpd */
	size_t out_pos;
};

int gw_server_start(struct gw_server *srv, const struct gw_config *cfg);
/* New connections refused; running requests given drain_s, then ended. */
void gw_server_stop(struct gw_server *srv, unsigned drain_s);

/* respond.c: the response of q (r or body is freed in any case; 429 and 503 get
 * Retry-After). */
enum MHD_Result gw_send_response(struct MHD_Connection *c, struct gw_req *q, int status,
				 struct MHD_Response *r);
enum MHD_Result gw_send_json(struct MHD_Connection *c, struct gw_req *q, int status,
			     char *body);
enum MHD_Result gw_send_text(struct MHD_Connection *c, struct gw_req *q, int status,
			     char *body, size_t len, const char *type);
enum MHD_Result gw_send_error(struct MHD_Connection *c, struct gw_req *q,
			      const struct gw_error *e);
/* The HTTP client of q closed its connection (or reset it). */
int gw_client_gone(struct gw_req *q);

/* handlers.c: the key's count of running choices (q->choices) and the gateway's, 429 beyond
 * the key's limit (gw_completion_free gives them back); q->choices slots on one of the key's
 * sessions. 0, or -1 with e set. */
int gw_handler_admit(struct gw_req *q, struct gw_error *e);
/* The key's pool (q->pool) and the daemon's model (q->model, a reference gw_completion_free
 * puts back). 0, or -1 with e set. */
int gw_handler_model(struct gw_req *q, struct gw_error *e);
int gw_handler_lease(struct gw_req *q, struct gw_lease *l, int64_t deadline, struct gw_error *e);
/* embeddings.c: POST /v1/embeddings, once the body is in. */
enum MHD_Result gw_handle_embeddings(struct MHD_Connection *c, struct gw_req *q);
/* handlers.c: POST /v1/completions and /v1/chat/completions, once the body is in. */
enum MHD_Result gw_handle_completion(struct MHD_Connection *c, struct gw_req *q);
/* Frees what a completion held (the run, its lease, the key's count). */
void gw_completion_free(struct gw_req *q);

#endif /* BITNET_GATEWAY_SERVER_H */
