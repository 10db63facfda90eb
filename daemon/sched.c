/* SPDX-License-Identifier: MIT */
#include "sched.h"

#include "../shm/bitnet_barrier.h"
#include "clock.h"
#include "log.h"
#include "stats.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct bn_sched {
	const struct bn_backend_ops *ops;
	void *backend;
	uint32_t max_batch;
	uint32_t eos_id;
	struct bn_req **running;  /* [max_batch], dense */
	uint32_t n_running;
	uint32_t n_waiting;       /* over all sessions */
	uint32_t *free_seqs;      /* stack of unused backend sequence ids */
	uint32_t n_free_seqs;
	uint32_t rr_cursor;       /* session index where the next admission round starts */
	uint64_t last_cancel_sweep;
	/* Batch buffers, grown on demand. */
	uint32_t *tokens;
	size_t tokens_cap;
	uint32_t *lens, *pos, *seq, *next_token;
};

struct bn_sched *bn_sched_new(const struct bn_backend_ops *ops, void *backend, uint32_t max_batch,
			      uint32_t eos_id)
{
	struct bn_sched *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->ops = ops;
	s->backend = backend;
	s->max_batch = max_batch;
	s->eos_id = eos_id;
	s->running = calloc(max_batch, sizeof(*s->running));
	s->free_seqs = calloc(max_batch, sizeof(uint32_t));
	s->lens = calloc(max_batch, sizeof(uint32_t));
	s->pos = calloc(max_batch, sizeof(uint32_t));
	s->seq = calloc(max_batch, sizeof(uint32_t));
	s->next_token = calloc(max_batch, sizeof(uint32_t));
	if (!s->running || !s->free_seqs || !s->lens || !s->pos || !s->seq || !s->next_token) {
		bn_sched_free(s);
		return NULL;
	}
	for (uint32_t i = 0; i < max_batch; i++)
		s->free_seqs[i] = max_batch - 1 - i;
	s->n_free_seqs = max_batch;
	return s;
}

void bn_sched_free(struct bn_sched *s)
{
	if (!s)
		return;
	free(s->running);
	free(s->free_seqs);
	free(s->tokens);
	free(s->lens);
	free(s->pos);
	free(s->seq);
	free(s->next_token);
	free(s);
}

uint32_t bn_sched_running(const struct bn_sched *s)
{
	return s->n_running;
}

uint32_t bn_sched_waiting(const struct bn_sched *s)
{
	return s->n_waiting;
}

uint32_t bn_sched_max_batch(const struct bn_sched *s)
{
	return s->max_batch;
}

/* ------------------------------------------------------------------------------------------ */
/* Queues                                                                                      */
/* ------------------------------------------------------------------------------------------ */

void bn_sched_enqueue(struct bn_sched *s, struct bn_req *r)
{
	struct bn_session *sess = r->sess;
	r->next = NULL;
	if (sess->wait_tail)
		sess->wait_tail->next = r;
	else
		sess->wait_head = r;
	sess->wait_tail = r;
	sess->n_waiting++;
	s->n_waiting++;
}

static struct bn_req *dequeue(struct bn_sched *s, struct bn_session *sess)
{
	struct bn_req *r = sess->wait_head;
	if (!r)
		return NULL;
	sess->wait_head = r->next;
	if (!sess->wait_head)
		sess->wait_tail = NULL;
	r->next = NULL;
	sess->n_waiting--;
	s->n_waiting--;
	return r;
}

/* Leaves the running set: the backend sequence is closed and its id reused. */
static void stop_running(struct bn_sched *s, uint32_t index)
{
	struct bn_req *r = s->running[index];
	s->ops->seq_close(s->backend, r->seq);
	s->free_seqs[s->n_free_seqs++] = r->seq;
	r->running = 0;
	s->running[index] = s->running[--s->n_running];
}

static void finish_running(struct bn_sched *s, uint32_t index, uint32_t status, uint32_t error)
{
	struct bn_req *r = s->running[index];
	stop_running(s, index);
	bn_req_finish(r, status, error);
}

/* ------------------------------------------------------------------------------------------ */
/* Admission: round-robin over sessions, one request per session per turn                      */
/* ------------------------------------------------------------------------------------------ */

static int start_running(struct bn_sched *s, struct bn_req *r)
{
	uint32_t seq = s->free_seqs[--s->n_free_seqs];
	int rc = s->ops->seq_open(s->backend, seq);
	if (rc < 0) {
		s->free_seqs[s->n_free_seqs++] = seq;
		bn_req_finish(r, BN_STATUS_ERROR, BN_E_BACKEND);
		return rc;
	}
	r->seq = seq;
	r->running = 1;
	r->prefilled = 0;
	s->running[s->n_running++] = r;
	return 0;
}

static void admit(struct bn_sched *s, struct bn_session **sessions, uint32_t n_sessions)
{
	if (n_sessions == 0)
		return;
	uint32_t idle_turns = 0, i = s->rr_cursor % n_sessions;
	while (s->n_running < s->max_batch && s->n_waiting > 0 && idle_turns < n_sessions) {
		struct bn_session *sess = sessions[i];
		i = (i + 1) % n_sessions;
		struct bn_req *r = sess->phase == BN_SESSION_ACTIVE ? dequeue(s, sess) : NULL;
		if (!r) {
			idle_turns++;
			continue;
		}
		idle_turns = 0;
		s->rr_cursor = i; /* the next round starts after the last session served */
		if (bn_req_cancel_requested(r))
			bn_req_finish(r, BN_STATUS_CANCELLED, 0);
		else
			(void)start_running(s, r);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Cancellation                                                                                */
/* ------------------------------------------------------------------------------------------ */

static void sweep_cancel_running(struct bn_sched *s)
{
	for (uint32_t i = 0; i < s->n_running;) {
		if (bn_req_cancel_requested(s->running[i]))
			finish_running(s, i, BN_STATUS_CANCELLED, 0); /* moved last into i */
		else
			i++;
	}
}

/* Waiting requests are few and may wait long when the batch is full, so they are checked
 * at most once a millisecond rather than every step. */
static void sweep_cancel_waiting(struct bn_sched *s, struct bn_session **sessions, uint32_t n)
{
	uint64_t now = bn_now_ns();
	if (s->n_waiting == 0 || now - s->last_cancel_sweep < 1000000u)
		return;
	s->last_cancel_sweep = now;
	for (uint32_t k = 0; k < n; k++) {
		struct bn_session *sess = sessions[k];
		struct bn_req **link = &sess->wait_head, *prev = NULL;
		while (*link) {
			struct bn_req *r = *link;
			if (!bn_req_cancel_requested(r)) {
				prev = r;
				link = &r->next;
				continue;
			}
			*link = r->next;
			if (sess->wait_tail == r)
				sess->wait_tail = prev;
			sess->n_waiting--;
			s->n_waiting--;
			bn_req_finish(r, BN_STATUS_CANCELLED, 0);
		}
	}
}

/* ------------------------------------------------------------------------------------------ */
/* One step                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static int reserve_tokens(struct bn_sched *s, size_t cells)
{
	if (cells <= s->tokens_cap)
		return 0;
	uint32_t *t = realloc(s->tokens, cells * sizeof(uint32_t));
	if (!t)
		return -ENOMEM;
	s->tokens = t;
	s->tokens_cap = cells;
	return 0;
}

/* Fills the padded [rows x width] matrix: a new request's prompt, or the last token. */
static int build_batch(struct bn_sched *s, struct bn_batch *b)
{
	uint32_t width = 1;
	for (uint32_t i = 0; i < s->n_running; i++) {
		struct bn_req *r = s->running[i];
		s->lens[i] = r->prefilled ? 1 : r->n_prompt;
		s->pos[i] = r->prefilled ? r->n_prompt + r->n_out - 1 : 0;
		s->seq[i] = r->seq;
		if (s->lens[i] > width)
			width = s->lens[i];
	}
	if (reserve_tokens(s, (size_t)s->n_running * width) < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < s->n_running; i++) {
		struct bn_req *r = s->running[i];
		uint32_t *row = s->tokens + (size_t)i * width;
		if (r->prefilled)
			row[0] = r->last_token;
		else
			memcpy(row, r->prompt, (size_t)r->n_prompt * sizeof(uint32_t));
	}
	*b = (struct bn_batch){ .n_rows = s->n_running, .width = width, .tokens = s->tokens,
				.lens = s->lens, .pos = s->pos, .seq = s->seq };
	return 0;
}

static void count_batch(const struct bn_batch *b)
{
	uint64_t used = 0;
	for (uint32_t i = 0; i < b->n_rows; i++)
		used += b->lens[i];
	bn_stats.steps++;
	bn_stats.batch_rows += b->n_rows;
	bn_stats.batch_cells += (uint64_t)b->n_rows * b->width;
	bn_stats.batch_padding += (uint64_t)b->n_rows * b->width - used;
}

/* Applies one sampled token to a running request. Returns 1 when the request ended. */
static int deliver(struct bn_sched *s, uint32_t index, uint32_t token, uint64_t now)
{
	struct bn_req *r = s->running[index];
	r->prefilled = 1;
	if (!r->t_first_token)
		r->t_first_token = now;
	if (token == s->eos_id && !(r->flags & BN_REQ_IGNORE_EOS)) {
		finish_running(s, index, BN_STATUS_EOS, 0);
		return 1;
	}
	bn_req_publish_token(r, token);
	r->last_token = token;
	if (r->n_out == r->max_tokens) {
		finish_running(s, index, BN_STATUS_LENGTH, 0);
		return 1;
	}
	return 0;
}

static void fail_all_running(struct bn_sched *s, int rc)
{
	bn_log_error("msg=\"backend step failed\" backend=%s rc=%d rows=%u", s->ops->name, rc,
		     s->n_running);
	while (s->n_running)
		finish_running(s, 0, BN_STATUS_ERROR, BN_E_BACKEND);
}

uint32_t bn_sched_step(struct bn_sched *s, struct bn_session **sessions, uint32_t n_sessions)
{
	sweep_cancel_running(s);
	sweep_cancel_waiting(s, sessions, n_sessions);
	admit(s, sessions, n_sessions);
	if (s->n_running == 0)
		return 0;
	struct bn_batch b;
	uint64_t now = bn_now_ns();
	for (uint32_t i = 0; i < s->n_running; i++)
		if (!s->running[i]->t_started)
			s->running[i]->t_started = now;
	int rc = build_batch(s, &b);
	if (rc == 0)
		rc = s->ops->step(s->backend, &b, s->next_token);
	if (rc < 0) {
		uint32_t rows = s->n_running;
		fail_all_running(s, rc);
		return rows;
	}
	count_batch(&b);
	now = bn_now_ns();
	/* Rows are delivered from the last: a finished row is replaced by the last running one,
	 * which has then already been handled. */
	for (uint32_t i = b.n_rows; i-- > 0;)
		(void)deliver(s, i, s->next_token[i], now);
	/* Full fence: the events stores above are ordered before the loads of the waiters words
	 * in which streaming clients announce that they sleep (see bn_req_wake_stream_waiter). */
	bn_smp_mb();
	for (uint32_t i = 0; i < s->n_running; i++)
		bn_req_wake_stream_waiter(s->running[i]);
	return b.n_rows;
}

/* ------------------------------------------------------------------------------------------ */
/* Ending many at once                                                                         */
/* ------------------------------------------------------------------------------------------ */

void bn_sched_drop_session(struct bn_sched *s, struct bn_session *sess, uint32_t status,
			   uint32_t error)
{
	for (uint32_t i = 0; i < s->n_running;) {
		struct bn_req *r = s->running[i];
		if (r->sess != sess) {
			i++;
			continue;
		}
		stop_running(s, i);
		if (status)
			bn_req_finish(r, status, error);
	}
	struct bn_req *r;
	while ((r = dequeue(s, sess)) != NULL)
		if (status)
			bn_req_finish(r, status, error);
	/* A vanished client's requests end without a status: nobody is left to read it. */
	for (uint32_t i = 0; i < sess->slot_count && sess->reqs; i++)
		sess->reqs[i].in_flight = 0;
	sess->n_in_flight = 0;
}

void bn_sched_end_waiting(struct bn_sched *s, struct bn_session **sessions, uint32_t n_sessions,
			  uint32_t status)
{
	for (uint32_t k = 0; k < n_sessions; k++) {
		struct bn_req *r;
		while ((r = dequeue(s, sessions[k])) != NULL)
			bn_req_finish(r, status, 0);
	}
}

void bn_sched_end_running(struct bn_sched *s, uint32_t status)
{
	while (s->n_running)
		finish_running(s, 0, status, 0);
}
