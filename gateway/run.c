/* SPDX-License-Identifier: MIT */
/*
 * run.c — a job's choices on the daemon.
 */
#define _GNU_SOURCE
#include "run.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* With several choices whose tokens are wanted as they come (a stream, stop strings), the run
 * waits on one of them at a time, this long, before it looks at the others: the wait is a
 * futex on one slot. */
#define MULTI_SLICE_NS 1000000LL
/* Tokens read per call. */
#define READ_BATCH 256

static int grow(char **buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t cap2 = *cap ? *cap : 256;
	while (cap2 < need)
		cap2 *= 2;
	char *p = realloc(*buf, cap2);
	if (!p)
		return -ENOMEM;
	*buf = p;
	*cap = cap2;
	return 0;
}

static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
	if (grow(buf, cap, *len + n + 1) < 0)
		return -ENOMEM;
	memcpy(*buf + *len, s, n);
	*len += n;
	(*buf)[*len] = '\0';
	return 0;
}

/* ---- text and stop strings --------------------------------------------------------------- */

/* Where the first stop string begins in s, or len when none is in it. */
static size_t first_stop(const struct gw_job *job, const char *s, size_t len)
{
	size_t best = len;
	for (size_t i = 0; i < job->n_stop; i++) {
		const char *at = memmem(s, len, job->stop[i], job->stop_len[i]);
		if (at && (size_t)(at - s) < best)
			best = (size_t)(at - s);
	}
	return best;
}

/* The longest end of s that is the beginning of some stop string (it may still become one). */
static size_t stop_prefix_tail(const struct gw_job *job, const char *s, size_t len)
{
	size_t hold = 0;
	for (size_t i = 0; i < job->n_stop; i++)
		for (size_t k = job->stop_len[i] - 1; k > hold; k--)
			if (k <= len && memcmp(s + len - k, job->stop[i], k) == 0) {
				hold = k;
				break;
			}
	return hold;
}

/* Moves decoded text from pending to text, up to a stop string (then the choice is done) or
 * to what could begin one (unless final: nothing more comes). */
static int release(struct gw_run *r, struct gw_choice *c, int final)
{
	size_t stop = first_stop(r->job, c->pending, c->pending_len);
	size_t keep = stop < c->pending_len ? c->pending_len - stop
					    : final ? 0 : stop_prefix_tail(r->job, c->pending, c->pending_len);
	size_t out = stop < c->pending_len ? stop : c->pending_len - keep;
	if (append(&c->text, &c->text_len, &c->text_cap, c->pending, out) < 0)
		return -ENOMEM;
	if (stop < c->pending_len) {
		c->pending_len = 0;
		return 1; /* a stop string: done */
	}
	memmove(c->pending, c->pending + out, keep);
	c->pending_len = keep;
	return 0;
}

/* Decoded text of new tokens into pending. */
static int decode(struct gw_run *r, struct gw_choice *c, const uint32_t *ids, uint32_t n)
{
	const char *text;
	size_t len;
	int rc = c->stream ? bn_text_stream_push(c->stream, ids, n, &text, &len) : 0;
	if (rc == 0 && c->stream)
		rc = append(&c->pending, &c->pending_len, &c->pending_cap, text, len);
	return rc < 0 ? rc : release(r, c, 0);
}

/* ---- choices ----------------------------------------------------------------------------- */

static void choice_end(struct gw_run *r, struct gw_choice *c, const char *finish)
{
	if (c->finish || c->error.status)
		return;
	if (!finish && !c->error.status)
		finish = "stop";
	c->finish = finish;
	r->n_done++;
}

static void choice_fail(struct gw_run *r, struct gw_choice *c, int bn_error)
{
	if (c->finish || c->error.status)
		return;
	gw_error_from_bn(&c->error, bn_error, "the request");
	if (bn_error == -BN_E_DISCONNECTED || bn_error == -BN_E_SHUTDOWN)
		r->daemon_gone = 1;
	r->n_done++;
}

static int grow_logprobs(struct gw_run *r, struct gw_choice *c, uint32_t need)
{
	if (need <= c->lp_cap)
		return 0;
	uint32_t cap = c->lp_cap ? c->lp_cap * 2 : 64, k = r->job->top_logprobs;
	while (cap < need)
		cap *= 2;
	struct bn_logprob *lp = realloc(c->lp, cap * sizeof(*lp));
	if (lp)
		c->lp = lp;
	struct bn_logprob *alt = k ? realloc(c->alt, (size_t)cap * k * sizeof(*alt)) : NULL;
	if (alt)
		c->alt = alt;
	if (!lp || (k && !alt))
		return -ENOMEM;
	c->lp_cap = cap;
	return 0;
}

/* New tokens of c: decoded, log-probabilities copied. 1 when a stop string ended it. */
static int take_tokens(struct gw_run *r, struct gw_choice *c)
{
	uint32_t ids[READ_BATCH];
	for (;;) {
		int n = bn_read_tokens(c->handle, c->have, ids, READ_BATCH);
		if (n <= 0)
			return n;
		if (r->job->logprobs) {
			if (grow_logprobs(r, c, c->have + (uint32_t)n) < 0)
				return -ENOMEM;
			uint32_t k = r->job->top_logprobs;
			int got = bn_read_logprobs(c->handle, c->have, c->lp + c->have,
						   k ? c->alt + (size_t)c->have * k : NULL, (uint32_t)n);
			if (got < n)
				return got < 0 ? got : -BN_E_PROTOCOL;
		}
		c->have += (uint32_t)n;
		int rc = decode(r, c, ids, (uint32_t)n);
		if (rc != 0)
			return rc;
		if (n < READ_BATCH)
			return 0;
	}
}

/* The terminal status of a request whose tokens are all read. */
static void settle(struct gw_run *r, struct gw_choice *c, const struct bn_result *res)
{
	const char *text;
	size_t len;
	if (c->stream && bn_text_stream_finish(c->stream, &text, &len) == 0)
		append(&c->pending, &c->pending_len, &c->pending_cap, text, len);
	if (release(r, c, 1) == 1) {
		choice_end(r, c, "stop");
		return;
	}
	switch (res->status) {
	case BN_STATUS_LENGTH: choice_end(r, c, "length"); return;
	case BN_STATUS_EOS:
	case BN_STATUS_STOP: choice_end(r, c, "stop"); return;
	case BN_STATUS_DEADLINE:
	case BN_STATUS_CANCELLED: choice_fail(r, c, -BN_E_TIMEOUT); return;
	case BN_STATUS_SHUTDOWN: choice_fail(r, c, -BN_E_SHUTDOWN); return;
	default: choice_fail(r, c, res->error ? res->error : -BN_E_BACKEND); return;
	}
}

/* Takes what a running choice has; ends it when it ended (its result read first, then its
 * last tokens, which were all written before the result). */
static void poll_choice(struct gw_run *r, struct gw_choice *c)
{
	if (c->finish || c->error.status || !c->handle)
		return;
	struct bn_result res;
	int ended = bn_result(c->handle, &res) == 0;
	int rc = take_tokens(r, c);
	if (rc == 1) { /* a stop string: the daemon need not go on */
		if (!ended)
			bn_cancel(c->handle);
		choice_end(r, c, "stop");
	} else if (rc < 0) {
		bn_cancel(c->handle);
		choice_fail(r, c, rc);
	} else if (ended) {
		settle(r, c, &res);
	}
}

/* ---- starting ---------------------------------------------------------------------------- */

static int score_prompt(struct gw_run *r, size_t p)
{
	struct gw_prompt *pr = &r->job->prompts[p];
	struct gw_prompt_scores *s = &r->scores[p];
	uint32_t k = r->job->top_logprobs, n = pr->n_ids > 1 ? pr->n_ids - 1 : 0;
	if (pr->error.status || n == 0)
		return 0;
	s->lp = calloc(n, sizeof(*s->lp));
	s->top = k ? calloc((size_t)n * k, sizeof(*s->top)) : NULL;
	if (!s->lp || (k && !s->top))
		return -ENOMEM;
	struct bn_score_item it = { .ids = pr->ids, .n_ids = pr->n_ids, .n_top = k, .cap = n,
				    .logprobs = s->lp, .top = s->top };
	int rc = bn_score(r->lease.client, &it, r->deadline_ns - gw_now_ns());
	if (rc < 0)
		gw_error_from_bn(&pr->error, rc, "scoring the prompt");
	s->n = rc < 0 ? 0 : n;
	if (rc == -BN_E_DISCONNECTED || rc == -BN_E_SHUTDOWN)
		r->daemon_gone = 1;
	return 0;
}

static int submit(struct gw_run *r, struct gw_choice *c, uint32_t j,
		  const struct bn_grammar_handle *g)
{
	struct gw_job *job = r->job;
	struct bn_sampling_params sp = job->sampling;
	sp.seed += j; /* n choices of one seed differ, and each is what that seed gives */
	struct bn_request req = { .prompt = c->prompt->ids, .n_prompt = c->prompt->n_ids,
				  .max_tokens = job->max_tokens, .flags = job->flags,
				  .sampling = &sp };
	if (r->model->vocab && bn_text_stream_new(r->model->vocab, 0, &c->stream) < 0)
		return -ENOMEM;
	int rc = bn_submit_grammar(r->lease.client, &req, NULL, 0, g, &c->handle);
	if (rc < 0)
		c->handle = NULL;
	return rc;
}

/* prefix and 24 random hex digits into id. */
static void random_id(char *id, size_t cap, const char *prefix)
{
	unsigned char b[12];
	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
		memset(b, 0, sizeof(b));
	int n = snprintf(id, cap, "%s", prefix);
	for (size_t i = 0; i < sizeof(b) && n + 2 < (int)cap; i++, n += 2)
		snprintf(id + n, cap - (size_t)n, "%02x", b[i]);
}

static void make_id(struct gw_run *r)
{
	random_id(r->id, sizeof(r->id), r->job->kind == GW_CHAT ? "chatcmpl-" : "cmpl-");
	r->created = (long long)time(NULL);
}

/* The job's grammar on the run's session, pinned (NULL when the job has none). 0 or -1 with
 * err set: the daemon's refusal of a schema is a 400 naming the parameter and its reason. */
static int grammar_of(struct gw_run *r, struct gw_grammar **g, struct gw_error *err)
{
	const struct gw_structured *st = &r->job->structured;
	*g = NULL;
	if (!st->kind || r->job->max_tokens == 0)
		return 0;
	const struct bn_grammar_spec spec = { .kind = st->kind, .flags = st->flags,
					      .text = st->text, .len = st->len };
	const char *what = st->tools ? "the tool's parameters" : "the schema";
	if (st->len > BN_GRAMMAR_TEXT_MAX) {
		gw_error_set(err, 400, st->param, "%s is %zu bytes without whitespace between tokens, "
			     "larger than the daemon takes: at most %u bytes", what, st->len,
			     BN_GRAMMAR_TEXT_MAX);
		return -1;
	}
	char why[300];
	int rc = gw_lease_grammar(&r->lease, &spec, r->deadline_ns, g, why, sizeof(why));
	if (rc == 0)
		return 0;
	if (rc == -BN_E_GRAMMAR || rc == -BN_E_GRAMMAR_LIMIT)
		gw_error_set(err, 400, st->param, "%s cannot be enforced: %s", what, why);
	else if (rc == -BN_E_UNSUPPORTED)
		gw_error_set(err, 400, st->param, "the daemon cannot constrain outputs: %s",
			     why[0] ? why : bn_strerror(rc));
	else if (rc == -BN_E_TOO_LONG)
		gw_error_set(err, 400, st->param, "%s is larger than the daemon takes: %s", what, why);
	else if (rc == -BN_E_BUSY)
		gw_error_set(err, 503, NULL, "the daemon's --max-grammars are all in use by running requests");
	else
		gw_error_from_bn(err, rc, "compiling the schema");
	if (rc == -BN_E_DISCONNECTED || rc == -BN_E_SHUTDOWN)
		r->daemon_gone = 1;
	return -1;
}

static void start_choice(struct gw_run *r, struct gw_choice *c, uint32_t j,
			 const struct bn_grammar_handle *g)
{
	if (c->prompt->error.status) {
		c->error = c->prompt->error;
		r->n_done++;
		return;
	}
	if (r->job->max_tokens == 0) { /* echo only: nothing to generate */
		choice_end(r, c, "length");
		return;
	}
	if (r->job->structured.tools)
		random_id(c->call_id, sizeof(c->call_id), "call_");
	int rc = submit(r, c, j, g);
	if (rc < 0)
		choice_fail(r, c, rc);
}

int gw_run_start(struct gw_run *r, struct gw_job *job, struct gw_model *m,
		 const struct gw_lease *lease, int64_t deadline_ns, struct gw_error *err)
{
	*r = (struct gw_run){ .job = job, .model = m, .lease = *lease, .deadline_ns = deadline_ns };
	make_id(r);
	r->n_choices = job->n_prompts * job->n;
	r->choices = calloc(r->n_choices, sizeof(*r->choices));
	if (job->echo && job->logprobs)
		r->scores = calloc(job->n_prompts, sizeof(*r->scores));
	if (!r->choices || (job->echo && job->logprobs && !r->scores)) {
		gw_error_set(err, 500, NULL, "out of memory");
		return -1;
	}
	for (size_t p = 0; r->scores && p < job->n_prompts; p++)
		if (score_prompt(r, p) < 0) {
			gw_error_set(err, 500, NULL, "out of memory");
			return -1;
		}
	struct gw_grammar *g;
	if (grammar_of(r, &g, err) < 0)
		return -1;
	for (size_t i = 0; i < r->n_choices; i++) {
		struct gw_choice *c = &r->choices[i];
		c->index = (uint32_t)i;
		c->prompt = &job->prompts[i / job->n];
		start_choice(r, c, (uint32_t)(i % job->n), g ? g->handle : NULL);
	}
	if (g) /* the requests are queued: a free of it now comes after them */
		gw_grammar_unpin(&r->lease, g);
	const struct gw_error *all = gw_run_failure(r);
	if (all) {
		*err = *all;
		return -1;
	}
	return 0;
}

/* ---- running ----------------------------------------------------------------------------- */

int gw_run_advance(struct gw_run *r, int64_t slice_ns)
{
	struct gw_choice *first = NULL;
	size_t running = 0;
	for (size_t i = 0; i < r->n_choices; i++) {
		struct gw_choice *c = &r->choices[i];
		if (!c->finish && !c->error.status) {
			first = first ? first : c;
			running++;
		}
	}
	if (!first)
		return 1;
	/* A whole answer without stop strings needs no token before the end: one wake-up for
	 * the request, not one per token, and its choices are waited for one after another. */
	int per_token = r->job->stream || r->job->n_stop;
	int64_t slice = per_token && running > 1 && slice_ns > MULTI_SLICE_NS ? MULTI_SLICE_NS
									     : slice_ns;
	int rc = per_token ? bn_wait_tokens(first->handle, first->have, slice)
			   : bn_wait(first->handle, slice);
	if (rc == -BN_E_DISCONNECTED)
		r->daemon_gone = 1;
	for (size_t i = 0; i < r->n_choices; i++)
		poll_choice(r, &r->choices[i]);
	if (gw_now_ns() > r->deadline_ns)
		for (size_t i = 0; i < r->n_choices; i++)
			if (!r->choices[i].finish && !r->choices[i].error.status) {
				bn_cancel(r->choices[i].handle);
				choice_fail(r, &r->choices[i], -BN_E_TIMEOUT);
			}
	return r->n_done == r->n_choices;
}

void gw_run_cancel(struct gw_run *r)
{
	for (size_t i = 0; i < r->n_choices; i++) {
		struct gw_choice *c = &r->choices[i];
		if (c->handle && !c->finish && !c->error.status) {
			bn_cancel(c->handle);
			choice_fail(r, c, -BN_E_CANCELLED);
		}
	}
}

void gw_run_free(struct gw_run *r, struct gw_pool *pool)
{
	for (size_t i = 0; r->choices && i < r->n_choices; i++) {
		struct gw_choice *c = &r->choices[i];
		if (c->handle)
			bn_release(c->handle); /* a running one is cancelled by it */
		bn_text_stream_free(c->stream);
		free(c->text);
		free(c->pending);
		free(c->lp);
		free(c->alt);
	}
	for (size_t p = 0; r->scores && p < r->job->n_prompts; p++) {
		free(r->scores[p].lp);
		free(r->scores[p].top);
	}
	free(r->scores);
	free(r->choices);
	gw_pool_release(pool, &r->lease, r->daemon_gone);
	r->choices = NULL;
	r->scores = NULL;
}

uint32_t gw_run_completion_tokens(const struct gw_run *r)
{
	uint32_t n = 0;
	for (size_t i = 0; i < r->n_choices; i++)
		n += r->choices[i].have;
	return n;
}

uint32_t gw_run_prompt_tokens(const struct gw_run *r)
{
	uint32_t n = 0;
	for (size_t p = 0; p < r->job->n_prompts; p++)
		n += r->job->prompts[p].n_ids;
	return n;
}

const struct gw_error *gw_run_failure(const struct gw_run *r)
{
	if (r->n_choices == 0 || !r->choices[0].error.status)
		return NULL;
	for (size_t i = 1; i < r->n_choices; i++)
		if (r->choices[i].error.status != r->choices[0].error.status)
			return NULL;
	return &r->choices[0].error;
}
