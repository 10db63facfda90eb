/* SPDX-License-Identifier: MIT */
/*
 * respond.c — a request's response handed to libmicrohttpd (JSON, an error object, text), and
 * whether its client is still there. Used by the routes (server.c) and the completion
 * handlers (handlers.c); it calls neither.
 */
#define _GNU_SOURCE
#include "server.h"
#include "log.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>

enum MHD_Result gw_send_response(struct MHD_Connection *c, struct gw_req *q, int status,
				 struct MHD_Response *r)
{
	if (!r)
		return MHD_NO;
	if (status == 429 || status == 503)
		MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
	q->status = status;
	enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
	MHD_destroy_response(r);
	return rc;
}

enum MHD_Result gw_send_json(struct MHD_Connection *c, struct gw_req *q, int status, char *body)
{
	if (!body)
		return MHD_NO;
	struct MHD_Response *r =
		MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	return gw_send_response(c, q, status, r);
}

enum MHD_Result gw_send_error(struct MHD_Connection *c, struct gw_req *q,
			      const struct gw_error *e)
{
	json_t *j = gw_error_json(e);
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (e->status >= 500)
		gw_log_warn("msg=\"request failed\" status=%d error=\"%s\"", e->status, e->message);
	return gw_send_json(c, q, e->status, text);
}

enum MHD_Result gw_send_text(struct MHD_Connection *c, struct gw_req *q, int status,
			     char *body, size_t len, const char *type)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	return gw_send_response(c, q, status, r);
}

int gw_client_gone(struct gw_req *q)
{
	if (q->fd < 0)
		return 0;
	struct pollfd p = { .fd = q->fd, .events = POLLRDHUP };
	return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}
