/* SPDX-License-Identifier: MIT */
/*
 * handlers.c — POST /v1/completions and /v1/chat/completions: parse, admit (the key's
 * requests at once), lease slots, run on the daemon, answer whole or as a stream. Whatever
 * ends a request (its end, an error, its client leaving, the gateway stopping) releases its
 * handles, so nothing runs on in the daemon for nobody.
 */
#define _GNU_SOURCE
#include "server.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>

/* How long a wait on the daemon lasts before the client's socket is looked at again: how soon
 * a client that left is noticed, against how often every waiting request wakes for nothing
 * (at 20 ms, 256 queued streams woke 12,800 times a second and took 15 % of the daemon's
 * throughput on two cores). */
#define SLICE_NS 200000000LL
/* Bytes libmicrohttpd takes from a stream at a time. */
#define STREAM_BLOCK 16384
/* OpenAI's most alternatives per token; the daemon may allow fewer (--max-logprobs). */
#define MAX_TOP_LOGPROBS 20

/* The daemon refused the request as a whole: a 400 names the likely parameter. */
static void refine_invalid(const struct gw_req *q, struct gw_error *e)
{
	if (e->status == 400 && !e->param[0] && q->job.top_logprobs)
		gw_error_set(e, 400, q->job.kind == GW_CHAT ? "top_logprobs" : "logprobs",
			     "more alternatives per token than the daemon gives (its --max-logprobs)");
}

int gw_handler_admit(struct gw_req *q, struct gw_error *e)
{
	struct gw_server *srv = q->srv;
	size_t k = q->key ? (size_t)(q->key - srv->cfg->keys) : 0;
	uint32_t limit = q->key && q->key->max_requests ? q->key->max_requests
							 : srv->cfg->max_requests_per_key;
	q->running = q->key ? &srv->key_running[k] : &srv->anonymous_running;
	uint32_t now = __atomic_add_fetch(q->running, q->choices, __ATOMIC_RELAXED);
	__atomic_add_fetch(&srv->running, q->choices, __ATOMIC_RELAXED);
	gw_metrics_running(1);
	if (now <= limit)
		return 0;
	gw_error_set(e, 429, NULL, "Too many requests at once: this key runs at most %u (choices count one by one)",
		     limit);
	e->code = "rate_limit_exceeded";
	return -1;
}

int gw_handler_lease(struct gw_req *q, struct gw_lease *l, int64_t deadline, struct gw_error *e)
{
	int rc = gw_pool_acquire(q->pool, q->choices, deadline, l);
	if (rc == -BN_E_TOO_LONG)
		gw_error_set(e, 400, q->job.n > 1 ? "n" : "prompt",
			     "%u choices (prompts times n) are more than one daemon session holds",
			     q->choices);
	else if (rc == -BN_E_TIMEOUT)
		gw_error_set(e, 503, NULL, "The daemon has no free slot for this request now");
	else if (rc < 0)
		gw_error_from_bn(e, rc, "connecting to the daemon");
	return rc;
}

/* ---- streams ----------------------------------------------------------------------------- */

static void note_first_token(struct gw_req *q)
{
	if (q->first_token_seen)
		return;
	for (size_t i = 0; i < q->run.n_choices; i++)
		if (q->run.choices[i].have) {
			q->first_token_seen = 1;
			gw_metrics_first_token((double)(gw_now_ns() - q->t0) * 1e-9);
			return;
		}
}

/* Fills q->out with the next events: waits a slice at a time, watching the client. -1 when
 * the client left (its requests cancelled). */
static int next_events(struct gw_req *q)
{
	q->out.len = q->out_pos = 0;
	while (!q->finished && q->out.len == 0) {
		if (gw_client_gone(q)) {
			gw_run_cancel(&q->run);
			return -1;
		}
		if (__atomic_load_n(&q->srv->stopping, __ATOMIC_RELAXED)) {
			gw_run_cancel(&q->run);
			struct gw_error e = { 0 };
			gw_error_set(&e, 503, NULL, "The gateway is stopping");
			gw_render_stream_error(&e, &q->out);
			q->finished = 1;
			break;
		}
		int done = gw_run_advance(&q->run, SLICE_NS);
		if (gw_render_stream(&q->run, done, &q->out) < 0)
			return -1;
		note_first_token(q);
		q->finished = done;
	}
	return 0;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	struct gw_req *q = cls;
	if (q->out_pos == q->out.len) {
		if (q->finished)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (next_events(q) < 0)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (q->out.len == 0)
			return MHD_CONTENT_READER_END_OF_STREAM;
	}
	size_t n = q->out.len - q->out_pos < max ? q->out.len - q->out_pos : max;
	memcpy(buf, q->out.data + q->out_pos, n);
	q->out_pos += n;
	return (ssize_t)n;
}

static enum MHD_Result start_stream(struct MHD_Connection *c, struct gw_req *q)
{
	struct MHD_Response *r =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_reader, q,
						  NULL);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	q->status = 200;
	enum MHD_Result rc = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return rc;
}

/* ---- whole answers ----------------------------------------------------------------------- */

static enum MHD_Result answer_whole(struct MHD_Connection *c, struct gw_req *q)
{
	while (!gw_run_advance(&q->run, SLICE_NS)) {
		if (gw_client_gone(q)) {
			gw_run_cancel(&q->run);
			gw_metrics_client_gone();
			return MHD_NO; /* nobody to answer: the connection closes */
		}
		if (__atomic_load_n(&q->srv->stopping, __ATOMIC_RELAXED)) {
			gw_run_cancel(&q->run);
			struct gw_error e = { 0 };
			gw_error_set(&e, 503, NULL, "The gateway is stopping");
			return gw_send_error(c, q, &e);
		}
	}
	q->finished = 1;
	/* every choice failed alike (an array's prompts too): that error, not a 200 of errors */
	const struct gw_error *failed = gw_run_failure(&q->run);
	if (failed) {
		struct gw_error e = *failed;
		refine_invalid(q, &e);
		return gw_send_error(c, q, &e);
	}
	return gw_send_json(c, q, 200, gw_render_response(&q->run));
}

int gw_handler_model(struct gw_req *q, struct gw_error *e)
{
	struct gw_server *srv = q->srv;
	int err;
	q->pool = q->key ? &srv->key_pools[q->key - srv->cfg->keys] : &srv->anonymous;
	q->model = gw_ring_model(&srv->ring, q->pool, &err);
	if (q->model)
		return 0;
	gw_error_from_bn(e, err ? err : -BN_E_DISCONNECTED, "reaching the daemon");
	return -1;
}

enum MHD_Result gw_handle_completion(struct MHD_Connection *c, struct gw_req *q)
{
	struct gw_server *srv = q->srv;
	struct gw_error e = { 0 };
	if (gw_handler_model(q, &e) < 0)
		return gw_send_error(c, q, &e);
	if (q->model->features & BN_FEAT_EMBEDDING_MODEL) {
		gw_error_set(&e, 400, "model",
			     "The model `%s` is an embedding model: it answers /v1/embeddings, and "
			     "does not generate", q->model->id);
		return gw_send_error(c, q, &e);
	}
	enum gw_endpoint kind = q->route == GW_ROUTE_CHAT ? GW_CHAT : GW_COMPLETIONS;
	if (gw_job_parse(&q->job, kind, q->body.data ? q->body.data : "", q->body.len, q->model,
			 MAX_TOP_LOGPROBS, &e) < 0)
		return gw_send_error(c, q, &e);
	q->choices = (uint32_t)(q->job.n_prompts * q->job.n);
	/* The connection's idle timeout is for clients, not for the daemon's queue: a request
	 * may wait its turn (and a stream between tokens) far longer; --request-timeout-s bounds
	 * it instead. completed() restores it. */
	MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
	int64_t deadline = q->t0 + (int64_t)srv->cfg->request_timeout_s * 1000000000;
	struct gw_lease l;
	if (gw_handler_admit(q, &e) < 0 || gw_handler_lease(q, &l, deadline, &e) < 0)
		return gw_send_error(c, q, &e);
	q->run_started = 1; /* the run holds the lease from here: gw_run_free gives it back */
	if (gw_run_start(&q->run, &q->job, q->model, &l, deadline, &e) < 0) {
		refine_invalid(q, &e);
		return gw_send_error(c, q, &e);
	}
	return q->job.stream ? start_stream(c, q) : answer_whole(c, q);
}

void gw_completion_free(struct gw_req *q)
{
	if (q->run_started) {
		gw_metrics_tokens(gw_run_prompt_tokens(&q->run), gw_run_completion_tokens(&q->run));
		gw_run_free(&q->run, q->pool);
	}
	if (q->running) {
		__atomic_sub_fetch(q->running, q->choices, __ATOMIC_RELAXED);
		__atomic_sub_fetch(&q->srv->running, q->choices, __ATOMIC_RELAXED);
		gw_metrics_running(-1);
	}
	gw_job_free(&q->job);
	gw_model_put(&q->srv->ring, q->model);
	q->run_started = 0;
	q->running = NULL;
	q->model = NULL;
}
