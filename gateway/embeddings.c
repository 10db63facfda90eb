/* SPDX-License-Identifier: MIT */
/*
 * embeddings.c — POST /v1/embeddings (OpenAI's API reference): `input` a string, an array of
 * strings, an array of token ids or an array of such arrays; `encoding_format` float or base64;
 * `dimensions`; `user`. The inputs run on the daemon as EMBED requests (shm/PROTOCOL.md §6.14,
 * bn_embed_batch), a lease's worth at a time; the answer is written as its text, not built
 * as Jansson values (2048 vectors of 2560 floats would be five million of them).
 *
 * `dimensions`: the first that many numbers, divided again by their L2 norm (OpenAI's and
 * Matryoshka's truncation), for a model trained to embed (its file names a pooling: the
 * daemon says so in each vector's embed_pooling); a generative model pooled by bitnetd
 * --pooling was never trained to be cut short, so it takes only its own length. An input
 * that fails (empty, longer than the context, a token outside the vocabulary) fails the
 * request with a 400 naming it, as OpenAI's endpoint does: its answer has no place for one
 * item's error.
 */
#define _GNU_SOURCE
#include "server.h"
#include "log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenAI's limit on inputs in one request. */
#define MAX_INPUTS 2048
/* Daemon slots one request holds at once (fewer when the daemon's sessions have fewer): its
 * inputs run that many at a time. */
#define EMBED_SLOTS 32

struct embed_job {
	json_t *root;
	struct bn_embed_item *items;
	uint32_t **ids;           /* [n] an ids input's copy, else NULL */
	size_t n;
	int base64;
	uint32_t dimensions;      /* 0: the model's */
	uint64_t tokens;
};

static void job_free(struct embed_job *j)
{
	for (size_t i = 0; j->ids && i < j->n; i++)
		free(j->ids[i]);
	free(j->ids);
	free(j->items);
	json_decref(j->root);
}

/* ---- the request ------------------------------------------------------------------------- */

static int is_id_array(json_t *v)
{
	if (!json_is_array(v) || json_array_size(v) == 0)
		return 0;
	size_t i;
	json_t *x;
	json_array_foreach(v, i, x)
		if (!json_is_integer(x))
			return 0;
	return 1;
}

/* Input i as ids (each in the vocabulary) or text, into j->items[i]. */
static int take_input(struct embed_job *j, size_t i, json_t *v, const struct gw_model *m,
		      struct gw_error *err)
{
	struct bn_embed_item *it = &j->items[i];
	if (json_is_string(v)) {
		if (json_string_length(v) == 0) {
			gw_error_set(err, 400, "input", "input[%zu] is an empty string", i);
			return -1;
		}
		it->text = json_string_value(v);
		it->text_len = json_string_length(v);
		return 0;
	}
	size_t n = json_array_size(v);
	j->ids[i] = malloc(n * sizeof(uint32_t));
	if (!j->ids[i]) {
		gw_error_set(err, 500, NULL, "out of memory");
		return -1;
	}
	for (size_t k = 0; k < n; k++) {
		json_int_t id = json_integer_value(json_array_get(v, k));
		if (id < 0 || id >= m->info.vocab_size) {
			gw_error_set(err, 400, "input", "input[%zu] holds token id %lld; ids are 0 to %u",
				     i, (long long)id, m->info.vocab_size - 1);
			return -1;
		}
		j->ids[i][k] = (uint32_t)id;
	}
	it->ids = j->ids[i];
	it->n_ids = (uint32_t)n;
	return 0;
}

/* `input`: a string, strings, ids, or arrays of ids (never mixed). */
static int parse_input(struct embed_job *j, const struct gw_model *m, struct gw_error *err)
{
	json_t *in = json_object_get(j->root, "input");
	json_t *one[1] = { in };
	int single = json_is_string(in) || is_id_array(in);
	j->n = single ? 1 : json_is_array(in) ? json_array_size(in) : 0;
	if (!in || (!single && !json_is_array(in)) || j->n == 0 || j->n > MAX_INPUTS) {
		gw_error_set(err, 400, "input",
			     "input must be a string, an array of 1 to %d strings, an array of token "
			     "ids, or an array of 1 to %d arrays of token ids", MAX_INPUTS, MAX_INPUTS);
		return -1;
	}
	j->items = calloc(j->n, sizeof(*j->items));
	j->ids = calloc(j->n, sizeof(*j->ids));
	if (!j->items || !j->ids) {
		gw_error_set(err, 500, NULL, "out of memory");
		return -1;
	}
	int strings = single ? json_is_string(in) : json_is_string(json_array_get(in, 0));
	for (size_t i = 0; i < j->n; i++) {
		json_t *v = single ? one[0] : json_array_get(in, i);
		if (strings ? !json_is_string(v) : !is_id_array(v)) {
			gw_error_set(err, 400, "input",
				     "input[%zu] is not %s like input[0]: give strings or arrays of "
				     "token ids, not both", i, strings ? "a string" : "an array of token ids");
			return -1;
		}
		if (strings && !m->vocab) {
			gw_error_set(err, 400, "input",
				     "this model has no vocabulary: give the input as token ids");
			return -1;
		}
		if (take_input(j, i, v, m, err) < 0)
			return -1;
	}
	return 0;
}

static int parse_options(struct embed_job *j, struct gw_error *err)
{
	const char *name;
	json_t *v;
	json_object_foreach(j->root, name, v)
	{
		if (strcmp(name, "model") && strcmp(name, "input") && strcmp(name, "encoding_format") &&
		    strcmp(name, "dimensions") && strcmp(name, "user")) {
			gw_error_set(err, 400, name, "%.64s is not supported on /v1/embeddings", name);
			return -1;
		}
	}
	json_t *f = json_object_get(j->root, "encoding_format");
	if (f && !json_is_null(f)) {
		if (!json_is_string(f) || (strcmp(json_string_value(f), "float") &&
					   strcmp(json_string_value(f), "base64"))) {
			gw_error_set(err, 400, "encoding_format", "encoding_format must be \"float\" or \"base64\"");
			return -1;
		}
		j->base64 = !strcmp(json_string_value(f), "base64");
	}
	json_t *d = json_object_get(j->root, "dimensions");
	if (d && !json_is_null(d)) {
		if (!json_is_integer(d) || json_integer_value(d) < 1 ||
		    json_integer_value(d) > UINT32_MAX) {
			gw_error_set(err, 400, "dimensions", "dimensions must be a positive integer");
			return -1;
		}
		j->dimensions = (uint32_t)json_integer_value(d);
	}
	return 0;
}

static int parse(struct embed_job *j, const char *body, size_t len, const struct gw_model *m,
		 struct gw_error *err)
{
	json_error_t je;
	j->root = json_loadb(body, len, 0, &je);
	if (!j->root || !json_is_object(j->root)) {
		gw_error_set(err, 400, NULL, "the body must be a JSON object%s%s", j->root ? "" : ": ",
			     j->root ? "" : je.text);
		return -1;
	}
	json_t *name = json_object_get(j->root, "model");
	if (name && !json_is_null(name) && !json_is_string(name)) {
		gw_error_set(err, 400, "model", "model must be a string");
		return -1;
	}
	if (name && json_is_string(name) && strcmp(json_string_value(name), m->id)) {
		gw_error_set(err, 404, "model", "The model `%.128s` does not exist; this server has `%s`",
			     json_string_value(name), m->id);
		return -1;
	}
	return parse_options(j, err) < 0 ? -1 : parse_input(j, m, err);
}

/* ---- the answer -------------------------------------------------------------------------- */

/* What an input's failure is to the client. */
static void item_error(const struct bn_embed_item *it, size_t i, const struct gw_model *m,
		       struct gw_error *e)
{
	switch (-it->error) {
	case BN_E_EMPTY:
		gw_error_set(e, 400, "input", "input[%zu] is empty: it encodes to no token", i);
		return;
	case BN_E_TOO_LONG:
		gw_error_set(e, 400, "input",
			     "input[%zu] is %u tokens; this model's maximum context length is %u tokens",
			     i, it->n_tokens ? it->n_tokens : it->n_ids, m->info.context_length);
		e->code = "context_length_exceeded";
		return;
	case BN_E_TOKEN:
		gw_error_set(e, 400, "input", "input[%zu] holds a token id outside the vocabulary", i);
		return;
	}
	char what[32];
	snprintf(what, sizeof(what), "input[%zu]", i);
	gw_error_from_bn(e, it->error, what);
}

/* The vector as the answer gives it: cut to `dimensions` and normalised again (binary64,
 * summed in order, then binary32: what python/bitnetd/embed.py's truncate does too). */
static uint32_t cut(float *v, uint32_t dim, uint32_t dimensions)
{
	if (!dimensions || dimensions >= dim)
		return dim;
	double norm = 0;
	for (uint32_t i = 0; i < dimensions; i++)
		norm += (double)v[i] * v[i];
	norm = sqrt(norm);
	for (uint32_t i = 0; norm > 0 && i < dimensions; i++)
		v[i] = (float)(v[i] / norm);
	return dimensions;
}

static int put(struct gw_buf *b, const char *s)
{
	return gw_buf_add(b, s, strlen(s));
}

/* Standard base64 of the vector's little-endian binary32 bytes (OpenAI's base64 format). */
static int put_base64(struct gw_buf *b, const float *v, uint32_t n)
{
	static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const uint8_t *p = (const uint8_t *)v;
	size_t len = (size_t)n * sizeof(float);
	char q[4];
	int rc = put(b, "\"");
	for (size_t i = 0; rc == 0 && i < len; i += 3) {
		uint32_t w = (uint32_t)p[i] << 16 | (i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0) |
			     (i + 2 < len ? p[i + 2] : 0);
		q[0] = abc[w >> 18 & 63];
		q[1] = abc[w >> 12 & 63];
		q[2] = i + 1 < len ? abc[w >> 6 & 63] : '=';
		q[3] = i + 2 < len ? abc[w & 63] : '=';
		rc = gw_buf_add(b, q, 4);
	}
	return rc ? rc : put(b, "\"");
}

/* `{"object":"embedding","index":i,"embedding":...}`: 9 digits give every float back. */
static int put_item(struct gw_buf *b, size_t index, const float *v, uint32_t n, int base64)
{
	char num[48];
	snprintf(num, sizeof(num), "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":",
		 index ? "," : "", index);
	int rc = put(b, num);
	if (base64) {
		rc = rc ? rc : put_base64(b, v, n);
		return rc ? rc : put(b, "}");
	}
	rc = rc ? rc : put(b, "[");
	for (uint32_t i = 0; rc == 0 && i < n; i++) {
		snprintf(num, sizeof(num), i ? ",%.9g" : "%.9g", (double)v[i]);
		rc = put(b, num);
	}
	return rc ? rc : put(b, "]}");
}

/* Finished items into the answer; a failure or a refused `dimensions` sets e. */
static int render_chunk(struct embed_job *j, size_t at, size_t n, struct gw_buf *out,
			const struct gw_model *m, struct gw_error *e)
{
	for (size_t i = at; i < at + n; i++) {
		struct bn_embed_item *it = &j->items[i];
		if (it->error) {
			item_error(it, i, m, e);
			return -1;
		}
		if (j->dimensions > it->dim ||
		    (j->dimensions && j->dimensions < it->dim && !it->trained)) {
			gw_error_set(e, 400, "dimensions",
				     j->dimensions > it->dim
					     ? "dimensions must be at most %u, this model's"
					     : "this model was not trained to embed (bitnetd pools a generative model by --pooling): its vectors cannot be cut short; dimensions may only be %u",
				     it->dim);
			return -1;
		}
		for (uint32_t k = 0; k < it->dim; k++)
			if (!isfinite(it->vector[k])) {
				gw_error_set(e, 500, NULL, "input[%zu]: the model gave a vector that is not finite", i);
				return -1;
			}
		j->tokens += it->n_tokens;
		if (put_item(out, i, it->vector, cut(it->vector, it->dim, j->dimensions), j->base64)) {
			gw_error_set(e, 500, NULL, "out of memory");
			return -1;
		}
	}
	return 0;
}

/* Every input on the lease, lease.n at a time (no more in flight than the slots it holds),
 * each chunk's vectors written out before the next runs. 0, or -1 with e set (or not: the
 * client left); *daemon_gone when the session is. */
static int run(struct gw_req *q, struct embed_job *j, struct gw_lease *l, int64_t deadline,
	       struct gw_buf *out, int *daemon_gone, struct gw_error *e)
{
	uint32_t cap = q->model->info.max_output_tokens;
	float *vectors = malloc((size_t)l->n * cap * sizeof(float));
	if (!vectors) {
		gw_error_set(e, 500, NULL, "out of memory");
		return -1;
	}
	int rc = 0;
	for (size_t at = 0; rc == 0 && at < j->n; at += l->n) {
		size_t n = j->n - at < l->n ? j->n - at : l->n;
		for (size_t i = 0; i < n; i++) {
			j->items[at + i].vector = vectors + i * cap;
			j->items[at + i].cap = cap;
		}
		struct bn_batch_result br;
		int64_t left = deadline - gw_now_ns();
		rc = bn_embed_batch(l->client, j->items + at, n, &br, left > 0 ? left : 0);
		if (rc < 0) {
			*daemon_gone = rc == -BN_E_DISCONNECTED;
			gw_error_from_bn(e, rc, "embedding");
			break;
		}
		rc = render_chunk(j, at, n, out, q->model, e);
		if (rc == 0 && gw_client_gone(q))
			rc = -1; /* nobody to answer: the rest is not run */
	}
	free(vectors);
	return rc;
}

enum MHD_Result gw_handle_embeddings(struct MHD_Connection *c, struct gw_req *q)
{
	struct gw_server *srv = q->srv;
	struct gw_error e = { 0 };
	if (gw_handler_model(q, &e) < 0)
		return gw_send_error(c, q, &e);
	struct embed_job j = { 0 };
	struct gw_buf out = { 0 };
	struct gw_lease l = { 0 };
	int64_t deadline = q->t0 + (int64_t)srv->cfg->request_timeout_s * 1000000000;
	if (parse(&j, q->body.data ? q->body.data : "", q->body.len, q->model, &e) < 0)
		goto fail;
	if (!(q->model->features & BN_FEAT_EMBED)) {
		gw_error_set(&e, 400, "model",
			     "The model `%s` does not embed: bitnetd embeds with a pooling, the file's "
			     "(an embedding model) or bitnetd --pooling mean, cls or last", q->model->id);
		goto fail;
	}
	/* at most what a session of this daemon holds (its --slots) */
	uint32_t slots = q->model->info.slots < EMBED_SLOTS ? q->model->info.slots : EMBED_SLOTS;
	q->choices = (uint32_t)(j.n < slots ? j.n : slots ? slots : 1);
	MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u); /* as completions do */
	if (gw_handler_admit(q, &e) < 0 || gw_handler_lease(q, &l, deadline, &e) < 0)
		goto fail;
	int gone = 0;
	if (put(&out, "{\"object\":\"list\",\"data\":[") ||
	    run(q, &j, &l, deadline, &out, &gone, &e) < 0) {
		gw_pool_release(q->pool, &l, gone);
		if (!e.status) /* the client left */
			goto client_left;
		goto fail;
	}
	gw_pool_release(q->pool, &l, 0);
	json_t *id = json_string(q->model->id);
	char *id_text = id ? json_dumps(id, JSON_ENCODE_ANY) : NULL, tail[160];
	json_decref(id);
	snprintf(tail, sizeof(tail), ",\"usage\":{\"prompt_tokens\":%llu,\"total_tokens\":%llu}}",
		 (unsigned long long)j.tokens, (unsigned long long)j.tokens);
	gw_metrics_tokens((uint32_t)j.tokens, 0);
	int bad = !id_text || put(&out, "],\"model\":") || put(&out, id_text) || put(&out, tail) ||
		  gw_buf_add(&out, "", 1);
	free(id_text);
	if (bad) {
		gw_error_set(&e, 500, NULL, "out of memory");
		goto fail;
	}
	job_free(&j);
	return gw_send_json(c, q, 200, out.data); /* takes the buffer */
client_left:
	gw_metrics_client_gone();
	job_free(&j);
	gw_buf_free(&out);
	return MHD_NO;
fail:
	job_free(&j);
	gw_buf_free(&out);
	return gw_send_error(c, q, &e);
}
