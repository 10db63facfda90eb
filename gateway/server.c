/* SPDX-License-Identifier: MIT */
/*
 * server.c — libmicrohttpd's side of the gateway: connections, routes, keys, limits.
 */
#define _GNU_SOURCE
#include "server.h"
#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Each connection's thread: the handlers keep little on the stack. */
#define THREAD_STACK_BYTES (512u << 10)

/* One TCP connection: its socket, and until when its next request's headers may take. */
struct gw_conn {
	int fd;
	int64_t header_deadline_ns; /* 0: inside a request (its headers came) */
	struct gw_conn *next;
};

/* ---- connections and the header deadline ------------------------------------------------ */

static void conn_started(struct gw_server *srv, struct MHD_Connection *c, void **ctx)
{
	const union MHD_ConnectionInfo *i =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct gw_conn *conn = calloc(1, sizeof(*conn));
	if (!conn)
		return;
	conn->fd = i ? i->connect_fd : -1;
	/* Small responses leave at once: a keep-alive client never waits on Nagle and its own
	 * delayed ACK (libmicrohttpd writes each response in one call). */
	int one = 1;
	if (conn->fd >= 0)
		setsockopt(conn->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	conn->header_deadline_ns = gw_now_ns() + (int64_t)srv->cfg->header_timeout_s * 1000000000;
	pthread_mutex_lock(&srv->conns_lock);
	conn->next = srv->conns;
	srv->conns = conn;
	pthread_mutex_unlock(&srv->conns_lock);
	*ctx = conn;
	gw_metrics_connections(1);
}

static void conn_closed(struct gw_server *srv, struct gw_conn *conn)
{
	pthread_mutex_lock(&srv->conns_lock);
	for (struct gw_conn **at = &srv->conns; *at; at = &(*at)->next)
		if (*at == conn) {
			*at = conn->next;
			break;
		}
	pthread_mutex_unlock(&srv->conns_lock);
	free(conn);
	gw_metrics_connections(-1);
}

static void notify_connection(void *cls, struct MHD_Connection *c, void **ctx,
			      enum MHD_ConnectionNotificationCode toe)
{
	if (toe == MHD_CONNECTION_NOTIFY_STARTED)
		conn_started(cls, c, ctx);
	else if (*ctx)
		conn_closed(cls, *ctx);
}

static void set_header_deadline(struct gw_server *srv, struct gw_conn *conn, int waiting)
{
	if (!conn)
		return;
	pthread_mutex_lock(&srv->conns_lock);
	conn->header_deadline_ns =
		waiting ? gw_now_ns() + (int64_t)srv->cfg->header_timeout_s * 1000000000 : 0;
	pthread_mutex_unlock(&srv->conns_lock);
}

/* Connections whose headers did not come in time (a client trickling them in, which
 * libmicrohttpd's idle timeout does not catch) are shut down; their threads then end. */
static void *watch_headers(void *arg)
{
	struct gw_server *srv = arg;
	while (!__atomic_load_n(&srv->stopping, __ATOMIC_RELAXED)) {
		usleep(200000);
		int64_t now = gw_now_ns();
		pthread_mutex_lock(&srv->conns_lock);
		for (struct gw_conn *c = srv->conns; c; c = c->next)
			if (c->header_deadline_ns && now > c->header_deadline_ns && c->fd >= 0) {
				shutdown(c->fd, SHUT_RDWR);
				c->header_deadline_ns = 0;
				gw_log_info("msg=\"a connection's request headers did not arrive in time; closed\"");
			}
		pthread_mutex_unlock(&srv->conns_lock);
	}
	return NULL;
}

/* ---- routes ------------------------------------------------------------------------------ */

static enum gw_route route_of(const char *url)
{
	if (strcmp(url, "/v1/chat/completions") == 0)
		return GW_ROUTE_CHAT;
	if (strcmp(url, "/v1/completions") == 0)
		return GW_ROUTE_COMPLETIONS;
	if (strcmp(url, "/v1/embeddings") == 0)
		return GW_ROUTE_EMBEDDINGS;
	if (strcmp(url, "/v1/models") == 0 || strncmp(url, "/v1/models/", 11) == 0)
		return GW_ROUTE_MODELS;
	if (strcmp(url, "/health") == 0)
		return GW_ROUTE_HEALTH;
	if (strcmp(url, "/metrics") == 0)
		return GW_ROUTE_METRICS;
	return GW_ROUTE_OTHER;
}

static int route_method_ok(enum gw_route r, const char *method)
{
	int post = r == GW_ROUTE_CHAT || r == GW_ROUTE_COMPLETIONS || r == GW_ROUTE_EMBEDDINGS;
	return strcmp(method, post ? "POST" : "GET") == 0 ||
	       (!post && strcmp(method, "HEAD") == 0);
}

/* The key of `Authorization: Bearer KEY`; every /v1 route needs one when keys are set. */
static int authorize(struct gw_server *srv, struct MHD_Connection *c, struct gw_req *q)
{
	q->authorized = 1;
	if (!srv->cfg->n_keys)
		return 1;
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (h && strncasecmp(h, "Bearer ", 7) == 0) {
		const char *k = h + 7;
		while (*k == ' ')
			k++;
		q->key = gw_key_find(srv->cfg, k, strlen(k));
	}
	q->authorized = q->key != NULL;
	return q->authorized;
}

static char *model_object(const struct gw_model *m)
{
	json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:I}", "id", m->id, "object", "model",
			      "created", (json_int_t)0, "owned_by", "bitnetd", "max_model_len",
			      (json_int_t)m->info.context_length);
	char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	return text;
}

static enum MHD_Result get_models(struct MHD_Connection *c, struct gw_req *q, const char *url)
{
	int err;
	struct gw_model *m = gw_ring_model(&q->srv->ring, &q->srv->anonymous, &err);
	if (!m) {
		struct gw_error e = { 0 };
		gw_error_from_bn(&e, err ? err : -BN_E_DISCONNECTED, "listing the models");
		return gw_send_error(c, q, &e);
	}
	enum MHD_Result rc;
	if (strncmp(url, "/v1/models/", 11) == 0) {
		if (strcmp(url + 11, m->id) == 0) {
			rc = gw_send_json(c, q, 200, model_object(m));
		} else {
			struct gw_error e = { 0 };
			gw_error_set(&e, 404, "model", "The model `%.128s` does not exist", url + 11);
			rc = gw_send_error(c, q, &e);
		}
	} else {
		char *one = model_object(m);
		char *list = NULL;
		if (one && asprintf(&list, "{\"object\":\"list\",\"data\":[%s]}", one) < 0)
			list = NULL;
		free(one);
		rc = gw_send_json(c, q, 200, list);
	}
	gw_model_put(&q->srv->ring, m);
	return rc;
}

/* 200 once the daemon answers a control round trip on a session, 503 otherwise. */
static enum MHD_Result get_health(struct MHD_Connection *c, struct gw_req *q)
{
	struct gw_lease l;
	char small[64];
	int rc = __atomic_load_n(&q->srv->stopping, __ATOMIC_RELAXED) ? -BN_E_SHUTDOWN
				  : gw_pool_acquire(&q->srv->anonymous, 0, gw_now_ns() + 2000000000LL, &l);
	if (rc == 0) {
		rc = bn_daemon_stats(l.client, small, sizeof(small));
		gw_pool_release(&q->srv->anonymous, &l, rc == -BN_E_DISCONNECTED);
	}
	char *body = strdup(rc >= 0 ? "{\"status\":\"ok\"}" : "{\"status\":\"unavailable\"}");
	return gw_send_json(c, q, rc >= 0 ? 200 : 503, body);
}

static enum MHD_Result get_metrics(struct MHD_Connection *c, struct gw_req *q)
{
	size_t len;
	char *text = gw_metrics_render(&len);
	return text ? gw_send_text(c, q, 200, text, len, "text/plain; version=0.0.4") : MHD_NO;
}

/* The first call of a request: its route, key and early refusals (a body is not read for
 * nothing). */
static enum MHD_Result begin(struct gw_server *srv, struct MHD_Connection *c, const char *url,
			     const char *method, void **ctx)
{
	struct gw_req *q = calloc(1, sizeof(*q));
	if (!q)
		return MHD_NO;
	q->srv = srv;
	q->t0 = gw_now_ns();
	q->route = route_of(url);
	const union MHD_ConnectionInfo *i =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	q->conn = i ? i->socket_context : NULL;
	q->fd = q->conn ? q->conn->fd : -1;
	set_header_deadline(srv, q->conn, 0);
	*ctx = q;
	struct gw_error e = { 0 };
	if (q->route == GW_ROUTE_OTHER)
		gw_error_set(&e, 404, NULL, "No route %.200s %.200s", method, url);
	else if (!route_method_ok(q->route, method))
		gw_error_set(&e, 405, NULL, "%.200s does not take %.20s", url, method);
	else if (strncmp(url, "/v1/", 4) == 0 && !authorize(srv, c, q))
		gw_error_set(&e, 401, NULL,
			     "Incorrect API key provided. Send it as `Authorization: Bearer KEY`.");
	if (!e.status)
		return MHD_YES;
	q->bad_route = 1;
	if (e.status == 405) {
		json_t *j = gw_error_json(&e);
		char *text = json_dumps(j, JSON_COMPACT);
		json_decref(j);
		struct MHD_Response *r = text ? MHD_create_response_from_buffer(
							strlen(text), text, MHD_RESPMEM_MUST_FREE)
					      : NULL;
		if (r) {
			MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
			MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW,
						q->route == GW_ROUTE_CHAT || q->route == GW_ROUTE_COMPLETIONS ||
								q->route == GW_ROUTE_EMBEDDINGS
							? "POST" : "GET, HEAD");
		} else {
			free(text);
		}
		return gw_send_response(c, q, 405, r);
	}
	return gw_send_error(c, q, &e);
}

/* Body bytes, kept up to --max-body-bytes; beyond it they are read and dropped (413). */
static void take_body(struct gw_req *q, const char *data, size_t n)
{
	if (q->body_too_large || q->body.len + n > q->srv->cfg->max_body) {
		q->body_too_large = 1;
		return;
	}
	if (gw_buf_add(&q->body, data, n) < 0)
		q->body_too_large = 1;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_size, void **ctx)
{
	(void)version;
	struct gw_server *srv = cls;
	struct gw_req *q = *ctx;
	if (!q)
		return begin(srv, c, url, method, ctx);
	if (q->bad_route) { /* refused in begin(): the body is not wanted */
		*upload_size = 0;
		return MHD_YES;
	}
	if (*upload_size) {
		take_body(q, upload, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	struct gw_error e = { 0 };
	switch (q->route) {
	case GW_ROUTE_MODELS: return get_models(c, q, url);
	case GW_ROUTE_HEALTH: return get_health(c, q);
	case GW_ROUTE_METRICS: return get_metrics(c, q);
	default: break;
	}
	if (q->body_too_large) {
		gw_error_set(&e, 413, NULL, "The request body is larger than %zu bytes",
			     srv->cfg->max_body);
		return gw_send_error(c, q, &e);
	}
	if (__atomic_load_n(&srv->stopping, __ATOMIC_RELAXED)) {
		gw_error_set(&e, 503, NULL, "The gateway is stopping");
		return gw_send_error(c, q, &e);
	}
	if (q->route == GW_ROUTE_EMBEDDINGS)
		return gw_handle_embeddings(c, q);
	return gw_handle_completion(c, q);
}

static void completed(void *cls, struct MHD_Connection *c, void **ctx,
		      enum MHD_RequestTerminationCode toe)
{
	struct gw_server *srv = cls;
	struct gw_req *q = *ctx;
	if (!q)
		return;
	if (q->choices) /* a completion lifted the idle timeout; the next request has it again */
		MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT,
					  (unsigned)srv->cfg->header_timeout_s);
	if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && q->run_started && !q->finished)
		gw_metrics_client_gone(); /* a stream whose client left: cancelled below */
	gw_completion_free(q);
	gw_metrics_request(q->route, q->status ? q->status : 500,
			   (double)(gw_now_ns() - q->t0) * 1e-9);
	set_header_deadline(srv, q->conn, 1); /* a kept-alive connection's next request */
	gw_buf_free(&q->body);
	gw_buf_free(&q->out);
	free(q);
	*ctx = NULL;
}

/* ---- start and stop ---------------------------------------------------------------------- */

/* libmicrohttpd's own messages (a client that hung up mid-request, ...) as debug lines. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char line[512];
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	gw_log_debug("msg=\"libmicrohttpd: %s\"", line);
}

static int listen_address(const struct gw_config *cfg, struct sockaddr_storage *sa,
			  socklen_t *len)
{
	struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
				  .ai_socktype = SOCK_STREAM };
	char port[8];
	snprintf(port, sizeof(port), "%u", cfg->port);
	struct addrinfo *res;
	int rc = getaddrinfo(cfg->host[0] ? cfg->host : NULL, port, &hints, &res);
	if (rc != 0) {
		gw_log_error("msg=\"cannot resolve the --listen host\" host=\"%s\" error=\"%s\"",
			     cfg->host, gai_strerror(rc));
		return -1;
	}
	memcpy(sa, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

int gw_server_start(struct gw_server *srv, const struct gw_config *cfg)
{
	*srv = (struct gw_server){ .cfg = cfg };
	pthread_mutex_init(&srv->conns_lock, NULL);
	gw_ring_init(&srv->ring, cfg->socket_path, cfg->model_name);
	gw_pool_init(&srv->anonymous, &srv->ring, 1);
	srv->key_pools = calloc(cfg->n_keys ? cfg->n_keys : 1, sizeof(*srv->key_pools));
	srv->key_running = calloc(cfg->n_keys ? cfg->n_keys : 1, sizeof(*srv->key_running));
	if (!srv->key_pools || !srv->key_running)
		return -1;
	for (size_t i = 0; i < cfg->n_keys; i++)
		gw_pool_init(&srv->key_pools[i], &srv->ring, cfg->keys[i].weight);
	struct sockaddr_storage sa;
	socklen_t sa_len;
	if (listen_address(cfg, &sa, &sa_len) < 0)
		return -1;
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
			 MHD_USE_ERROR_LOG | MHD_USE_ITC | (sa.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
	srv->mhd = MHD_start_daemon(
		flags, cfg->port, NULL, NULL, answer, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
		MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->header_timeout_s,
		MHD_OPTION_NOTIFY_COMPLETED, completed, srv, MHD_OPTION_NOTIFY_CONNECTION,
		notify_connection, srv, MHD_OPTION_THREAD_STACK_SIZE, (size_t)THREAD_STACK_BYTES,
		MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1, MHD_OPTION_END);
	if (!srv->mhd) {
		gw_log_error("msg=\"cannot listen\" listen=\"%s:%u\" error=\"%s\"", cfg->host, cfg->port,
			     strerror(errno));
		return -1;
	}
	srv->watchdog_started = pthread_create(&srv->watchdog, NULL, watch_headers, srv) == 0;
	gw_log_info("msg=\"ready\" listen=\"%s:%u\" socket=\"%s\" keys=%zu", cfg->host, cfg->port,
		    cfg->socket_path ? cfg->socket_path : "(default)", cfg->n_keys);
	return 0;
}

void gw_server_stop(struct gw_server *srv, unsigned drain_s)
{
	if (srv->mhd) {
		MHD_quiesce_daemon(srv->mhd); /* no new connections */
		int64_t until = gw_now_ns() + (int64_t)drain_s * 1000000000;
		while (gw_now_ns() < until && __atomic_load_n(&srv->running, __ATOMIC_RELAXED))
			usleep(50000);
	}
	__atomic_store_n(&srv->stopping, 1, __ATOMIC_RELAXED);
	if (srv->mhd)
		MHD_stop_daemon(srv->mhd); /* waits for the connections' threads */
	if (srv->watchdog_started)
		pthread_join(srv->watchdog, NULL);
	for (size_t i = 0; srv->key_pools && i < srv->cfg->n_keys; i++)
		gw_pool_free(&srv->key_pools[i]);
	gw_pool_free(&srv->anonymous);
	gw_ring_free(&srv->ring);
	free(srv->key_pools);
	free(srv->key_running);
	pthread_mutex_destroy(&srv->conns_lock);
}
