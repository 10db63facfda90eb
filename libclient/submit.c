/* SPDX-License-Identifier: MIT */
/*
 * submit.c — submissions (§5 ring, §6 slot): a free slot, filled, queued; the doorbell rung
 * only when the daemon sleeps.
 * The protocol is shm/PROTOCOL.md; section numbers in comments refer to it.
 */
#define _GNU_SOURCE
#include "client_internal.h"

#include "bitnet_ring.h"

#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ */
/* Slots: free list, abandoned requests                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Abandoned handles whose request has ended go back to the free list. Lock held. */
static void reclaim_abandoned(struct bn_client *c)
{
	struct bn_handle **link = &c->abandoned;
	while (*link) {
		struct bn_handle *h = *link;
		if (!slot_done(c, h->slot)) {
			link = &h->next;
			continue;
		}
		*link = h->next;
		h->state = H_FREE;
		h->next = c->free_list;
		c->free_list = h;
	}
}

static struct bn_handle *take_free(struct bn_client *c)
{
	if (!c->free_list && c->abandoned)
		reclaim_abandoned(c);
	struct bn_handle *h = c->free_list;
	if (h) {
		c->free_list = h->next;
		h->next = NULL;
		h->state = H_IN_FLIGHT;
	}
	return h;
}

/* ------------------------------------------------------------------------------------------ */
/* Submit (§5 ring, §6 slot): fill the slot, queue it, ring only if the daemon sleeps          */
/* ------------------------------------------------------------------------------------------ */

/* The sampling words, and the stop ids after the prompt; all zero (greedy) without
 * parameters. */
static void fill_sampling(struct bn_client *c, uint32_t slot, const struct bn_request *req)
{
	struct bn_slot *s = slot_of(c, slot);
	const struct bn_sampling_params *p = req->sampling;
	memset(&s->temperature, 0, sizeof(*s) - offsetof(struct bn_slot, temperature));
	if (!p)
		return;
	s->temperature = p->temperature;
	s->top_k = p->top_k;
	s->top_p = p->top_p;
	s->min_p = p->min_p;
	s->repetition_penalty = p->repetition_penalty;
	s->presence_penalty = p->presence_penalty;
	s->frequency_penalty = p->frequency_penalty;
	/* The seed words are zero unless the request says they hold a seed (the daemon checks). */
	if (req->flags & BN_REQ_SEED) {
		s->seed_lo = (uint32_t)p->seed;
		s->seed_hi = (uint32_t)(p->seed >> 32);
	}
	s->n_stop = p->n_stop;
	s->n_logprobs = p->n_logprobs;
	s->deadline_ms = p->deadline_ms;
	if (p->n_stop)
		memcpy(prompt_of(c, slot) + req->n_prompt, p->stop_ids,
		       (size_t)p->n_stop * sizeof(uint32_t));
}


/* The response words a reader might see before the daemon takes the request, reset; then
 * SUBMITTED (published by the tail store-release in queue_slot()). */
static void reset_response(struct bn_client *c, struct bn_slot *s)
{
	if (c->layout.features & BN_FEAT_TEXT)
		s->n_text = s->prompt_tokens = 0;
	s->embed_pooling = 0;
	s->cancel = 0;
	s->waiters = 0;
	s->status = BN_STATUS_NONE;
	s->error = 0;
	s->n_tokens = 0;
	s->state = BN_SLOT_SUBMITTED;
}

/* A text prompt (sub->text non-NULL) goes to the text region, its stop ids to the prompt
 * array from entry 0 (req->n_prompt is 0 then). */
static void fill_slot(struct bn_client *c, uint32_t slot, const struct bn_submission *sub)
{
	const struct bn_request *req = sub->req;
	const char *text = sub->text;
	size_t len = sub->len;
	struct bn_slot *s = slot_of(c, slot);
	/* Drafting changes no output: a daemon that predates it gets the request without it. */
	uint32_t flags = c->layout.features & BN_FEAT_SPECULATE ? req->flags
							       : req->flags & ~BN_REQ_SPECULATE;
	if (text) {
		memcpy(text_of(c, slot), text, len);
		s->n_prompt = (uint32_t)len;
		s->flags = flags | BN_REQ_TEXT;
	} else {
		memcpy(prompt_of(c, slot), req->prompt, (size_t)req->n_prompt * sizeof(uint32_t));
		s->n_prompt = req->n_prompt;
		s->flags = flags;
	}
	s->max_tokens = req->max_tokens;
	fill_sampling(c, slot, req);
	if (sub->grammar_id) {
		s->flags |= BN_REQ_GRAMMAR; /* check_request refused it in req->flags */
		s->grammar_id = sub->grammar_id;
	}
	reset_response(c, s);
}

/* Lock held. Returns whether the daemon was asleep and had to be rung. */
static int queue_slot(struct bn_client *c, uint32_t slot, uint32_t op)
{
	int rang = 0;
	struct bn_sqe *e = &c->sqes[bn_ring_index(c->sq_tail, c->sq_mask + 1)];
	*e = (struct bn_sqe){ .op = op, .slot = slot };
	c->sq_tail++;
	/* Release: the sqe and the slot's request are visible before the tail that covers them. */
	bn_store_release(c->ring->tail, c->sq_tail);
	/* Full fence: the tail store is ordered before the NEED_WAKEUP load. The daemon stores
	 * NEED_WAKEUP, fences, then re-reads tails: one of us sees the other's store. */
	bn_smp_mb();
	if (bn_read_once(c->ring->flags) & BN_SQ_NEED_WAKEUP) {
		uint64_t one = 1;
		if (write(c->doorbell, &one, sizeof(one)) == (ssize_t)sizeof(one))
			c->stats.doorbells++;
		rang = 1;
	}
	c->stats.submits++;
	return rang;
}

static int check_request(const struct bn_client *c, const struct bn_request *req)
{
	/* BN_REQ_GRAMMAR comes with a grammar's id (bn_submit_grammar), never from the flags. */
	if (!req || (req->n_prompt && !req->prompt) || (req->flags & BN_REQ_GRAMMAR))
		return -BN_E_INVALID;
	const struct bn_sampling_params *p = req->sampling;
	uint32_t n_stop = p ? p->n_stop : 0;
	if (p && n_stop && !p->stop_ids)
		return -BN_E_INVALID;
	/* A daemon that predates the sampling words would read them as reserved (non-zero). */
	if (p && !(c->layout.features & BN_FEAT_PARAMS))
		return -BN_E_INVALID;
	if ((req->flags & BN_REQ_LOGPROBS) && !(c->layout.features & BN_FEAT_LOGPROBS))
		return -BN_E_INVALID;
	if ((uint64_t)req->n_prompt + n_stop > c->layout.slot_prompt_capacity ||
	    req->max_tokens > c->layout.slot_output_capacity)
		return -BN_E_TOO_LONG;
	return 0;
}

#define TEXT_REQ_FLAGS (BN_REQ_TEXT | BN_REQ_CHAT | BN_REQ_PARSE_SPECIAL | BN_REQ_NO_BOS | \
			BN_REQ_TEXT_OUT | BN_REQ_SPECIAL_TEXT | BN_REQ_STRIP_SPACE)

/* The prompt's form: ids (text NULL) cannot say TEXT or CHAT; a text prompt has no ids and
 * fits the text region; text of any kind needs a daemon that offers it. */
static int check_prompt_form(const struct bn_client *c, const struct bn_request *req,
			     const char *text, size_t len)
{
	if ((req->flags & BN_REQ_CHAT) || (!text && (req->flags & BN_REQ_TEXT)) ||
	    (text && (req->n_prompt || req->prompt)))
		return -BN_E_INVALID;
	if ((text || (req->flags & TEXT_REQ_FLAGS)) && !(c->layout.features & BN_FEAT_TEXT))
		return -BN_E_UNSUPPORTED;
	if (text && len > c->layout.slot_text_capacity)
		return -BN_E_TOO_LONG;
	return 0;
}

/* The op's feature: a score request needs a daemon whose backend scores, an embedding one
 * that embeds. */
static int check_op(const struct bn_client *c, uint32_t op)
{
	if (op == BN_OP_GENERATE)
		return 0;
	if (op == BN_OP_SCORE)
		return c->layout.features & BN_FEAT_SCORE ? 0 : -BN_E_UNSUPPORTED;
	if (op == BN_OP_CLASSIFY)
		return c->layout.features & BN_FEAT_CLASSIFY ? 0 : -BN_E_UNSUPPORTED;
	if (op == BN_OP_EMBED)
		return c->layout.features & BN_FEAT_EMBED ? 0 : -BN_E_UNSUPPORTED;
	return -BN_E_INVALID;
}

int bn_submit_as(struct bn_client *c, const struct bn_submission *sub, struct bn_handle **out)
{
	const struct bn_request *req = sub->req;
	const char *text = sub->text;
	size_t len = sub->len;
	int rc = req ? check_prompt_form(c, req, text, len) : -BN_E_INVALID;
	if (rc == 0)
		rc = check_op(c, sub->op);
	if (rc == 0)
		rc = check_request(c, req);
	if (rc < 0)
		return rc;
	/* A daemon that shut down says so for good in the header, even once it is gone. */
	if (daemon_flags(c) & BN_DAEMON_SHUTTING_DOWN)
		return -BN_E_SHUTDOWN;
	/* Only the flag a wait has set: a poll(2) here would be a system call per request. A
	 * submission to a daemon that died unnoticed fails in its wait, within one slice. */
	if (__atomic_load_n(&c->dead, __ATOMIC_RELAXED))
		return -BN_E_DISCONNECTED;
	pthread_mutex_lock(&c->lock);
	struct bn_handle *h = take_free(c);
	pthread_mutex_unlock(&c->lock);
	if (!h)
		return -BN_E_AGAIN;
	/* The slot is ours alone until queued: fill it without the lock. */
	fill_slot(c, h->slot, sub);
	pthread_mutex_lock(&c->lock);
	h->woke_daemon = queue_slot(c, h->slot, sub->op);
	pthread_mutex_unlock(&c->lock);
	*out = h;
	return 0;
}

int bn_submit_op(struct bn_client *c, uint32_t op,
		 void (*fill)(struct bn_client *c, uint32_t slot, const void *arg), const void *arg,
		 struct bn_handle **out)
{
	if (daemon_flags(c) & BN_DAEMON_SHUTTING_DOWN)
		return -BN_E_SHUTDOWN;
	if (__atomic_load_n(&c->dead, __ATOMIC_RELAXED))
		return -BN_E_DISCONNECTED;
	pthread_mutex_lock(&c->lock);
	struct bn_handle *h = take_free(c);
	pthread_mutex_unlock(&c->lock);
	if (!h)
		return -BN_E_AGAIN;
	struct bn_slot *s = slot_of(c, h->slot);
	memset(&s->n_prompt, 0, sizeof(*s) - offsetof(struct bn_slot, n_prompt));
	fill(c, h->slot, arg);
	reset_response(c, s);
	pthread_mutex_lock(&c->lock);
	h->woke_daemon = queue_slot(c, h->slot, op);
	pthread_mutex_unlock(&c->lock);
	*out = h;
	return 0;
}

int bn_submit(struct bn_client *c, const struct bn_request *req, struct bn_handle **out)
{
	const struct bn_submission sub = { .req = req, .op = BN_OP_GENERATE };
	return bn_submit_as(c, &sub, out);
}

int bn_submit_text(struct bn_client *c, const struct bn_request *req, const char *text,
		   size_t len, struct bn_handle **out)
{
	if (!text && len)
		return -BN_E_INVALID;
	const struct bn_submission sub = { .req = req, .text = text ? text : "", .len = len,
					   .op = BN_OP_GENERATE };
	return bn_submit_as(c, &sub, out);
}
