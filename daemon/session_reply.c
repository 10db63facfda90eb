/* SPDX-License-Identifier: MIT */
/*
 * session_reply.c — every write into a slot's response (session.h): tokens, log-probability
 * records, score positions, stream wake-ups and the terminal status. The scheduler reaches
 * these through bn_session_reply only (serve/request.h).
 */
#define _GNU_SOURCE
#include "session.h"

#include "bitnet_barrier.h"
#include "bitnet_futex.h"
#include "common/clock.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Shared words are stored with integer atomics (which do not take floats): as their bits,
 * through a word view of the record. */
static void write_logprob(struct bn_logprob *dst, uint32_t token, float logprob)
{
	uint32_t bits, *words = (uint32_t *)(void *)dst;
	memcpy(&bits, &logprob, sizeof(bits));
	bn_write_once(words[0], token);
	bn_write_once(words[1], bits);
}

void bn_req_write_logprobs(struct bn_req *r, uint32_t index, const struct bn_sample_out *o)
{
	struct bn_session *s = bn_session_of(r);
	uint32_t stride = 1u + s->seg.logprob_capacity;
	struct bn_logprob *dst = bn_slot_logprobs(&s->seg, r->slot) + (size_t)index * stride;
	write_logprob(&dst[0], o->token, o->logprob);
	for (uint32_t i = 0; i < o->n_top && i < s->seg.logprob_capacity; i++)
		write_logprob(&dst[1 + i], o->top[i].token, o->top[i].logprob);
	/* Fewer tokens than asked for can be allowed (a grammar): the rest say none, rather than
	 * leave what an earlier request wrote there. */
	for (uint32_t i = o->n_top; i < r->sampling.n_logprobs && i < s->seg.logprob_capacity; i++)
		write_logprob(&dst[1 + i], UINT32_MAX, -INFINITY);
}

int bn_req_publish_token(struct bn_req *r, uint32_t token)
{
	struct bn_session *s = bn_session_of(r);
	/* The text first: n_tokens, stored below, then covers its piece end too. */
	int rc = r->stream ? bn_text_out_token(&s->seg, r, token) : 0;
	bn_write_once(bn_slot_output(&s->seg, r->slot)[r->n_out], token);
	r->output[r->n_out] = token;
	r->n_out++;
	r->sample_ctx.n_output = r->n_out;
	s->counters.tokens++;
	/* Release: the token store above is visible before the count that covers it. */
	bn_store_release(bn_slot_at(&s->seg, r->slot)->n_tokens, r->n_out);
	/* Release: the count is visible before the event that announces it. */
	bn_store_release(bn_slot_at(&s->seg, r->slot)->events, ++r->events);
	bn_stats.tokens_generated++;
	bn_stats_count_tokens(1, bn_now_ns());
	return rc;
}

void bn_req_write_record(struct bn_req *r, uint32_t index, const struct bn_sample_out *o)
{
	bn_req_write_logprobs(r, index, o);
	bn_write_once(bn_slot_output(&bn_session_of(r)->seg, r->slot)[index], o->token);
}

void bn_req_publish_score(struct bn_req *r, uint32_t index, const struct bn_sample_out *o)
{
	struct bn_session *s = bn_session_of(r);
	bn_req_write_record(r, index, o);
	r->n_out = index + 1;
	/* Release: the records and the token are visible before the count that covers them. */
	bn_store_release(bn_slot_at(&s->seg, r->slot)->n_tokens, r->n_out);
	/* Release: the count is visible before the event that announces it. */
	bn_store_release(bn_slot_at(&s->seg, r->slot)->events, ++r->events);
}

void bn_req_publish_embedding(struct bn_req *r, const float *v, uint32_t dim, uint32_t pooling)
{
	struct bn_session *s = bn_session_of(r);
	uint32_t *out = bn_slot_output(&s->seg, r->slot);
	for (uint32_t i = 0; i < dim; i++) {
		uint32_t bits;
		memcpy(&bits, &v[i], sizeof(bits));
		bn_write_once(out[i], bits);
	}
	uint32_t trained = s->seg.model->file_pooling ? BN_EMBED_TRAINED : 0;
	bn_write_once(bn_slot_at(&s->seg, r->slot)->embed_pooling, pooling | trained);
	r->n_out = dim; /* bn_req_finish stores it as n_tokens, before DONE */
}

void bn_req_write_reason(struct bn_session *s, struct bn_req *r, const char *fmt, ...)
{
	if (!s->seg.text_capacity)
		return;
	char msg[BN_GRAMMAR_ERR_LEN + 128];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	size_t len = n < 0 ? 0 : (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1;
	if (len > s->seg.text_capacity)
		len = s->seg.text_capacity;
	memcpy(bn_slot_text(&s->seg, r->slot), msg, len);
	r->n_text = (uint32_t)len;
	bn_write_once(bn_slot_at(&s->seg, r->slot)->n_text, r->n_text);
}

static void wake(uint32_t *word)
{
	bn_stats.futex_wakes++;
	(void)bn_futex_wake_all(word);
}

void bn_req_wake_stream_waiter(struct bn_req *r)
{
	struct bn_slot *sl = bn_slot_at(&bn_session_of(r)->seg, r->slot);
	/* The caller's full fence ordered our events stores before this load. The client stores
	 * `waiters` before FUTEX_WAIT, whose full barrier precedes the kernel's read of events.
	 * So either the kernel sees the new value (no sleep) or we see the flag (wake). */
	if (bn_read_once(sl->waiters) & BN_WAIT_TOKENS)
		wake(&sl->events);
}

void bn_req_finish(struct bn_req *r, uint32_t status, uint32_t error)
{
	struct bn_session *s = bn_session_of(r);
	struct bn_slot *sl = bn_slot_at(&s->seg, r->slot);
	uint64_t now = bn_now_ns();
	bn_text_out_end(&s->seg, r);
	bn_grammar_detach(r);
	bn_write_once(sl->error, error);
	bn_write_once(sl->status, status);
	bn_write_once(sl->queue_ns, r->t_started ? r->t_started - r->t_seen : 0);
	bn_write_once(sl->first_token_ns, r->t_first_token ? r->t_first_token - r->t_seen : 0);
	bn_write_once(sl->total_ns, now - r->t_seen);
	bn_write_once(sl->n_tokens, r->n_out);
	/* Release: every response store above is visible before DONE. */
	bn_store_release(sl->state, BN_SLOT_DONE);
	/* After DONE, so a waiter that read the old events value cannot have missed DONE. */
	bn_store_release(sl->events, ++r->events);
	/* Full fence: the events store is ordered before the load of `waiters` (the other half
	 * is the kernel's barrier in FUTEX_WAIT before it compares events). */
	bn_smp_mb();
	if (bn_read_once(sl->waiters))
		wake(&sl->events);
	r->in_flight = 0;
	s->n_in_flight--;
	s->counters.finished++;
	bn_stats.requests_finished[status < BN_STATS_STATUSES ? status : 0]++;
	if (status == BN_STATUS_ERROR) {
		s->counters.errors++;
		bn_stats_count_error(error);
	}
}

void bn_grammar_detach(struct bn_req *r)
{
	bn_grammar_bound_unref(r->grammar);
	r->grammar = NULL;
}

int bn_req_cancel_requested(const struct bn_req *r)
{
	return bn_read_once(bn_slot_at(&bn_session_of(r)->seg, r->slot)->cancel) != 0;
}

const struct bn_reply bn_session_reply = {
	.cancel_requested = bn_req_cancel_requested,
	.publish_token = bn_req_publish_token,
	.write_logprobs = bn_req_write_logprobs,
	.write_record = bn_req_write_record,
	.publish_score = bn_req_publish_score,
	.publish_embedding = bn_req_publish_embedding,
	.wake_stream_waiter = bn_req_wake_stream_waiter,
	.finish = bn_req_finish,
};
