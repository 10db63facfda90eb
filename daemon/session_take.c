/* SPDX-License-Identifier: MIT */
/*
 * session_take.c — taking requests off a session's ring (session.h): each sqe and each request
 * field copied out of shared memory once, the private copy validated; valid requests go to the
 * scheduler, the others end at once with their error.
 */
#define _GNU_SOURCE
#include "session.h"

#include "bitnet_barrier.h"
#include "bitnet_ring.h"
#include "common/clock.h"
#include "model/embed.h"
#include "serve/sched.h"

#include <string.h>
#include <sys/random.h>

/* A request without BN_REQ_SEED still gets a fixed seed for its whole life (its tokens are
 * then reproducible from the daemon's logs only, not by the client). */
static uint64_t bn_random_seed(void)
{
	uint64_t seed;
	if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) == (ssize_t)sizeof(seed))
		return seed;
	return bn_now_ns() * 0x9E3779B97F4A7C15ull; /* entropy pool not ready: still varies */
}

static float read_float(const float *word)
{
	const uint32_t *w = (const uint32_t *)(const void *)word;
	uint32_t bits = bn_read_once(*w);
	float f;
	memcpy(&f, &bits, sizeof(f));
	return f;
}

/* Copies the sampling words into r->sampling; returns 0 or BN_E_INVALID. */
static uint32_t copy_sampling(const struct bn_session *s, const struct bn_slot *sl,
			      struct bn_req *r)
{
	struct bn_sampling *p = &r->sampling;
	p->temperature = read_float(&sl->temperature);
	p->top_k = bn_read_once(sl->top_k);
	p->top_p = read_float(&sl->top_p);
	p->min_p = read_float(&sl->min_p);
	p->repetition_penalty = read_float(&sl->repetition_penalty);
	p->presence_penalty = read_float(&sl->presence_penalty);
	p->frequency_penalty = read_float(&sl->frequency_penalty);
	uint64_t seed = bn_read_once(sl->seed_lo) | (uint64_t)bn_read_once(sl->seed_hi) << 32;
	p->want_logprobs = (r->flags & BN_REQ_LOGPROBS) != 0;
	p->n_logprobs = bn_read_once(sl->n_logprobs);
	/* Without BN_REQ_SEED the seed words must be zero, like any unused word. */
	if (!(r->flags & BN_REQ_SEED) && seed)
		return BN_E_INVALID;
	/* A greedy request never draws: it needs no seed, and getrandom(2) is a system call on
	 * every request's path. */
	p->seed = r->flags & BN_REQ_SEED ? seed : p->temperature != 0.0f ? bn_random_seed() : 0;
	return bn_sampling_check(p, s->seg.logprob_capacity) < 0 ? BN_E_INVALID : 0;
}

#define TEXT_IN_FLAGS (BN_REQ_TEXT | BN_REQ_CHAT)
#define TEXT_OUT_FLAGS (BN_REQ_TEXT_OUT | BN_REQ_SPECIAL_TEXT | BN_REQ_STRIP_SPACE)
#define TEXT_FLAGS (TEXT_IN_FLAGS | BN_REQ_PARSE_SPECIAL | BN_REQ_NO_BOS | TEXT_OUT_FLAGS)

/* Text flags that mean nothing together, or for this op: 0 or BN_E_INVALID. */
static uint32_t check_text_flags(uint32_t flags, uint32_t op)
{
	uint32_t in = flags & TEXT_IN_FLAGS;
	if (in == TEXT_IN_FLAGS || ((flags & (BN_REQ_PARSE_SPECIAL | BN_REQ_NO_BOS)) &&
				    !(flags & BN_REQ_TEXT)))
		return BN_E_INVALID;
	switch (op) {
	case BN_OP_GENERATE:
		return (flags & (BN_REQ_SPECIAL_TEXT | BN_REQ_STRIP_SPACE)) &&
		       !(flags & BN_REQ_TEXT_OUT) ? BN_E_INVALID : 0;
	case BN_OP_TOKENIZE:
		return in && !(flags & ~(uint32_t)(TEXT_IN_FLAGS | BN_REQ_PARSE_SPECIAL | BN_REQ_NO_BOS))
			       ? 0 : BN_E_INVALID;
	default: /* BN_OP_DETOKENIZE */
		return flags & ~(uint32_t)(BN_REQ_SPECIAL_TEXT | BN_REQ_STRIP_SPACE) ? BN_E_INVALID : 0;
	}
}

/* Copies an id prompt and its stop ids out of the slot (lengths already checked); returns 0
 * or BN_E_TOKEN. */
static uint32_t copy_ids(struct bn_session *s, struct bn_req *r)
{
	/* The one copy of the prompt and stop ids; only the private copy is checked and used. */
	const uint32_t *src = bn_slot_prompt(&s->seg, r->slot);
	uint32_t vocab = s->seg.model->vocab_size, bad = 0;
	for (uint32_t i = 0; i < r->n_prompt + r->n_stop; i++) {
		uint32_t t = bn_read_once(src[i]);
		r->prompt[i] = t;
		bad |= t >= vocab;
	}
	return bad ? BN_E_TOKEN : 0;
}

/* The stop ids of a text prompt (its ids come from the tokenizer, always in range). */
static uint32_t check_stops(const struct bn_session *s, const struct bn_req *r)
{
	for (uint32_t i = 0; i < r->n_stop; i++)
		if (r->prompt[r->n_prompt + i] >= s->seg.model->vocab_size)
			return BN_E_TOKEN;
	return 0;
}

/* What every prompt is checked for first (§6.6 steps 2a and 2b): text asked of a daemon
 * without it, then an empty prompt. Returns 0 or the bn_error. */
static uint32_t check_prompt_present(const struct bn_session *s, const struct bn_req *r)
{
	if ((r->flags & TEXT_FLAGS) && !s->seg.text_capacity)
		return BN_E_UNSUPPORTED;
	return r->n_prompt == 0 ? BN_E_EMPTY : 0;
}

/* What every prompt goes through (§6.6 steps 2a to 4): check_prompt_present, then a text
 * prompt's encoding (r->n_prompt becomes its token count) or an id prompt's length. Returns 0
 * or the bn_error that ends the request. */
static uint32_t take_prompt(struct bn_session *s, struct bn_req *r)
{
	uint32_t err = check_prompt_present(s, r);
	if (err)
		return err;
	if (r->flags & TEXT_IN_FLAGS)
		return bn_text_prompt_take(&s->seg, r);
	return (uint64_t)r->n_prompt + r->n_stop > s->seg.prompt_capacity ? BN_E_TOO_LONG : 0;
}

/* Copies a generate request's words into r; returns 0 or the bn_error that ends it. */
static uint32_t copy_request(struct bn_session *s, struct bn_req *r)
{
	struct bn_slot *sl = bn_slot_at(&s->seg, r->slot);
	r->n_prompt = bn_read_once(sl->n_prompt);
	r->max_tokens = bn_read_once(sl->max_tokens);
	r->flags = bn_read_once(sl->flags);
	r->n_stop = bn_read_once(sl->n_stop);
	uint32_t deadline_ms = bn_read_once(sl->deadline_ms);
	r->deadline = deadline_ms ? r->t_seen + (uint64_t)deadline_ms * 1000000u : 0;
	uint32_t grammar_id = bn_read_once(sl->grammar_id);
	int constrained = (r->flags & BN_REQ_GRAMMAR) != 0;
	/* A grammar's matcher is finished by the end-of-generation id it accepts: nothing can
	 * follow it, so IGNORE_EOS means nothing there. */
	if ((grammar_id && !constrained) || (r->flags & ~BN_REQ_KNOWN_FLAGS) || r->max_tokens == 0 ||
	    check_text_flags(r->flags, BN_OP_GENERATE) ||
	    (constrained && (r->flags & BN_REQ_IGNORE_EOS)))
		return BN_E_INVALID;
	if (copy_sampling(s, sl, r))
		return BN_E_INVALID;
	if (constrained && !bn_session_has_grammars(s))
		return BN_E_UNSUPPORTED;
	uint32_t err = take_prompt(s, r);
	if (!err && (r->max_tokens > s->seg.output_capacity ||
		     (uint64_t)r->n_prompt + r->max_tokens > s->seg.model->context_length))
		err = BN_E_TOO_LONG;
	if (err)
		return err;
	err = r->flags & TEXT_IN_FLAGS ? check_stops(s, r) : copy_ids(s, r);
	r->stop = r->prompt + r->n_prompt;
	r->sample_ctx = (struct bn_sample_ctx){ .params = &r->sampling, .prompt = r->prompt,
						.n_prompt = r->n_prompt, .output = r->output };
	if (!err && constrained)
		err = bn_grammar_attach(s, r, grammar_id);
	if (!err && (r->flags & BN_REQ_TEXT_OUT))
		err = bn_text_out_begin(&s->seg, r);
	return err;
}

/* A tokenize or detokenize request: its flags and n_prompt; every other request word must
 * be 0. Returns 0 or BN_E_INVALID. */
static uint32_t copy_op_request(struct bn_session *s, struct bn_req *r)
{
	struct bn_slot *sl = bn_slot_at(&s->seg, r->slot);
	r->n_prompt = bn_read_once(sl->n_prompt);
	r->flags = bn_read_once(sl->flags);
	/* max_tokens, then the 13 words from temperature to grammar_id (bytes 76..127). */
	const uint32_t *words = (const uint32_t *)(const void *)&sl->temperature;
	uint32_t nonzero = bn_read_once(sl->max_tokens);
	for (uint32_t i = 0; i < 13; i++)
		nonzero |= bn_read_once(words[i]);
	if (nonzero || (r->flags & ~BN_REQ_KNOWN_FLAGS) || check_text_flags(r->flags, r->op))
		return BN_E_INVALID;
	return 0;
}

/* The words of a request that reads a given sequence (score, classify): n_prompt, flags
 * (within `allowed`), n_logprobs and a deadline; max_tokens, the nine sampling words
 * (temperature .. seed_hi), n_stop and grammar_id must be 0. Returns 0 or BN_E_INVALID. */
static uint32_t copy_reading_words(struct bn_session *s, struct bn_req *r, uint32_t allowed)
{
	struct bn_slot *sl = bn_slot_at(&s->seg, r->slot);
	r->n_prompt = bn_read_once(sl->n_prompt);
	r->flags = bn_read_once(sl->flags);
	r->max_tokens = 0;
	r->n_stop = 0;
	uint32_t deadline_ms = bn_read_once(sl->deadline_ms);
	r->deadline = deadline_ms ? r->t_seen + (uint64_t)deadline_ms * 1000000u : 0;
	const uint32_t *words = (const uint32_t *)(const void *)&sl->temperature;
	uint32_t nonzero = bn_read_once(sl->max_tokens) | bn_read_once(sl->n_stop) |
			   bn_read_once(sl->grammar_id);
	for (uint32_t i = 0; i < 9; i++)
		nonzero |= bn_read_once(words[i]);
	r->sampling = (struct bn_sampling){ .want_logprobs = (r->flags & BN_REQ_LOGPROBS) != 0,
					    .n_logprobs = bn_read_once(sl->n_logprobs) };
	if (nonzero || (r->flags & ~allowed) || check_text_flags(r->flags, BN_OP_GENERATE) ||
	    (r->sampling.n_logprobs && !r->sampling.want_logprobs) ||
	    r->sampling.n_logprobs > s->seg.logprob_capacity)
		return BN_E_INVALID;
	return 0;
}

/* A request that reads one given sequence (score, embed): its words (flags within allowed),
 * then the sequence as for generate (ids, or text with its flags), no longer than the
 * context. Returns 0 or the bn_error that ends it. */
static uint32_t copy_sequence_request(struct bn_session *s, struct bn_req *r, uint32_t allowed)
{
	uint32_t err = copy_reading_words(s, r, allowed);
	if (!err)
		err = take_prompt(s, r);
	if (!err && r->n_prompt > s->seg.model->context_length)
		err = BN_E_TOO_LONG;
	if (!err && !(r->flags & BN_REQ_TEXT))
		err = copy_ids(s, r);
	r->stop = r->prompt + r->n_prompt;
	return err;
}

/* A score request: n_logprobs alternatives per position with LOGPROBS, a deadline. */
static uint32_t copy_score_request(struct bn_session *s, struct bn_req *r)
{
	return copy_sequence_request(s, r, BN_REQ_LOGPROBS | BN_REQ_TEXT | BN_REQ_PARSE_SPECIAL |
					   BN_REQ_NO_BOS);
}

/* Reverses w[0 .. n). */
static void reverse_words(uint32_t *w, uint32_t n)
{
	for (uint32_t i = 0; i < n / 2; i++) {
		uint32_t t = w[i];
		w[i] = w[n - 1 - i];
		w[n - 1 - i] = t;
	}
}

/* An id classify request's words (§6.12): n_labels, n_prefix, the label lengths, the prefix,
 * the labels. Copied once, then rotated so the ids come first and the label lengths last, as
 * a text request lays them out (bn_text_classify_take). Returns 0 or the bn_error. */
static uint32_t copy_classify_ids(struct bn_session *s, struct bn_req *r)
{
	uint32_t n = r->n_prompt;
	if (n > s->seg.prompt_capacity)
		return BN_E_TOO_LONG;
	const uint32_t *src = bn_slot_prompt(&s->seg, r->slot);
	for (uint32_t i = 0; i < n; i++)
		r->prompt[i] = bn_read_once(src[i]);
	if (n < 2 || r->prompt[0] > n - 2 || r->prompt[1] > n - 2)
		return BN_E_INVALID;
	uint32_t n_labels = r->prompt[0], n_prefix = r->prompt[1], head = 2 + n_labels;
	uint64_t sum = n_prefix;
	for (uint32_t i = 2; i < head; i++)
		sum += r->prompt[i];
	if (head + sum != n)
		return BN_E_INVALID;
	/* Rotating left by `head` is three reversals: [head][ids] -> [ids][head]. */
	reverse_words(r->prompt, head);
	reverse_words(r->prompt + head, n - head);
	reverse_words(r->prompt, n);
	for (uint32_t i = 0; i < n - head; i++)
		if (r->prompt[i] >= s->seg.model->vocab_size)
			return BN_E_TOKEN;
	r->n_prompt = n_prefix;
	r->n_labels = n_labels;
	r->labels = r->prompt + n_prefix;
	r->label_len = r->prompt + n - n_labels;
	return 0;
}

/* What the labels add up to, against the slot's and the context's room. */
static uint32_t check_labels(const struct bn_session *s, struct bn_req *r)
{
	if (r->n_prompt == 0 || r->n_labels == 0)
		return BN_E_EMPTY;
	uint64_t total = 0;
	r->longest_label = 0;
	for (uint32_t i = 0; i < r->n_labels; i++) {
		if (r->label_len[i] == 0)
			return BN_E_EMPTY;
		total += r->label_len[i];
		if (r->label_len[i] > r->longest_label)
			r->longest_label = r->label_len[i];
	}
	if (total > s->seg.output_capacity ||
	    (uint64_t)r->n_prompt + r->longest_label > s->seg.model->context_length)
		return BN_E_TOO_LONG;
	r->n_label_tokens = (uint32_t)total;
	return 0;
}

/* A classify request (§6.12): a prefix and labels as ids, or as text (TEXT, PARSE_SPECIAL and
 * NO_BOS apply to the prefix), a deadline. Returns 0 or the bn_error that ends it. */
static uint32_t copy_classify_request(struct bn_session *s, struct bn_req *r)
{
	const uint32_t allowed = BN_REQ_TEXT | BN_REQ_PARSE_SPECIAL | BN_REQ_NO_BOS;
	uint32_t err = copy_reading_words(s, r, allowed);
	if (!err)
		err = check_prompt_present(s, r);
	if (!err)
		err = r->flags & BN_REQ_TEXT ? bn_text_classify_take(&s->seg, r) : copy_classify_ids(s, r);
	if (!err)
		err = check_labels(s, r);
	r->stop = r->prompt + r->n_prompt;
	return err;
}

/* An embedding request (§6.14): its input as for score, a deadline. */
static uint32_t copy_embed_request(struct bn_session *s, struct bn_req *r)
{
	uint32_t err = copy_sequence_request(s, r, BN_REQ_TEXT | BN_REQ_PARSE_SPECIAL | BN_REQ_NO_BOS);
	/* Every input says its token count, ids as well as text (usage figures). */
	if (!(r->flags & BN_REQ_TEXT))
		bn_write_once(bn_slot_at(&s->seg, r->slot)->prompt_tokens, r->n_prompt);
	return err;
}

/* An embedding model (its file names a pooling) embeds and nothing else: the ops that need
 * the LM head are not offered. */
static int op_offered(const struct bn_session *s, uint32_t op)
{
	const struct bn_model_desc *m = s->seg.model;
	int head = !m->file_pooling;
	return (op == BN_OP_GENERATE && head) ||
	       ((op == BN_OP_TOKENIZE || op == BN_OP_DETOKENIZE) && s->seg.text_capacity) ||
	       (op == BN_OP_SCORE && m->can_score && head) ||
	       (op == BN_OP_CLASSIFY && m->can_classify && head) ||
	       (op == BN_OP_EMBED && m->pooling);
}

/* Why an op a request named is not offered, in its text region where the daemon has one. */
static void explain_unsupported(struct bn_session *s, struct bn_req *r, uint32_t op)
{
	const struct bn_model_desc *m = s->seg.model;
	if (op == BN_OP_EMBED)
		bn_req_write_reason(s, r, "this daemon does not embed: %s", m->embed_off);
	else if (m->file_pooling && (op == BN_OP_GENERATE || op == BN_OP_SCORE ||
				     op == BN_OP_CLASSIFY))
		bn_req_write_reason(s, r, "%s is an embedding model (its file's pooling_type is "
				    "%s): it embeds (op EMBED) and does not generate, score or "
				    "classify", m->name, bn_pooling_name(m->file_pooling));
}

static void reset_response(struct bn_session *s, struct bn_req *r)
{
	struct bn_slot *sl = bn_slot_at(&s->seg, r->slot);
	bn_write_once(sl->status, BN_STATUS_NONE);
	bn_write_once(sl->error, 0);
	if (s->seg.text_capacity)
		bn_write_once(sl->n_text, 0);
	bn_write_once(sl->prompt_tokens, 0);
	bn_write_once(sl->embed_pooling, 0);
	bn_store_release(sl->n_tokens, 0);
	r->n_out = 0;
	r->n_text = 0;
	r->running = 0;
	r->n_prefilled = 0;
	r->n_stop = 0;
	r->deadline = 0;
	r->next = NULL;
}

/* A request that ends without the scheduler (a request error, a shutdown, a tokenize or
 * detokenize op) ends only after the snapshot's head store: a client that sees DONE and queues
 * the slot again must find its ring entry free. */
static void end_after_snapshot(struct bn_session *s, struct bn_req *r, uint32_t status,
			       uint32_t error)
{
	r->end_status = status;
	r->end_error = error;
	s->ending[s->n_ending++] = r->slot; /* at most once per slot: it is in flight */
}

/* Runs a tokenize or detokenize request to its end. */
static void run_op(struct bn_session *s, struct bn_req *r)
{
	uint32_t err = r->op == BN_OP_TOKENIZE ? bn_text_tokenize_op(&s->seg, r)
					       : bn_text_detokenize_op(&s->seg, r);
	bn_req_finish(r, err ? BN_STATUS_ERROR : BN_STATUS_COMPLETE, err);
}

static void end_requests_of_snapshot(struct bn_session *s)
{
	for (uint32_t i = 0; i < s->n_ending; i++) {
		struct bn_req *r = &s->reqs[s->ending[i]];
		if (r->end_status == BN_STATUS_NONE)
			run_op(s, r);
		else
			bn_req_finish(r, r->end_status, r->end_error);
	}
	s->n_ending = 0;
}

/* A grammar op: it ends with the snapshot, or when its compile comes back. */
static void take_grammar_op(struct bn_session *s, struct bn_req *r, int shutting_down)
{
	uint32_t status = BN_STATUS_NONE;
	uint32_t err = bn_grammar_op_take(s, r, shutting_down, &status);
	if (err)
		end_after_snapshot(s, r, BN_STATUS_ERROR, err);
	else if (status != BN_STATUS_NONE)
		end_after_snapshot(s, r, status, 0);
}

/* One sqe, already copied. Returns 0 or -BN_E_PROTOCOL. */
static int take_sqe(struct bn_session *s, struct bn_sched *sched, const struct bn_sqe *e,
		    int shutting_down)
{
	if (e->reserved[0] || e->reserved[1] || e->slot >= s->seg.slot_count)
		return -BN_E_PROTOCOL;
	struct bn_req *r = &s->reqs[e->slot];
	if (r->in_flight)
		return -BN_E_PROTOCOL; /* queued twice: the client lost track of its slots */
	r->in_flight = 1;
	s->n_in_flight++;
	r->t_seen = bn_now_ns();
	r->t_started = r->t_first_token = r->t_last_token = 0;
	r->op = e->op;
	bn_stats.requests_submitted++;
	s->counters.submitted++;
	reset_response(s, r);
	if (e->op == BN_OP_GRAMMAR || e->op == BN_OP_GRAMMAR_FREE) {
		take_grammar_op(s, r, shutting_down);
		return 0;
	}
	int scheduled = e->op == BN_OP_GENERATE || e->op == BN_OP_SCORE ||
			e->op == BN_OP_CLASSIFY || e->op == BN_OP_EMBED;
	uint32_t err = !op_offered(s, e->op)	     ? BN_E_UNSUPPORTED
		       : e->op == BN_OP_GENERATE ? copy_request(s, r)
		       : e->op == BN_OP_SCORE	 ? copy_score_request(s, r)
		       : e->op == BN_OP_CLASSIFY ? copy_classify_request(s, r)
		       : e->op == BN_OP_EMBED	 ? copy_embed_request(s, r)
						 : copy_op_request(s, r);
	if (err == BN_E_UNSUPPORTED && !op_offered(s, e->op))
		explain_unsupported(s, r, e->op);
	if (err)
		end_after_snapshot(s, r, BN_STATUS_ERROR, err);
	else if (shutting_down)
		end_after_snapshot(s, r, BN_STATUS_SHUTDOWN, 0);
	else if (!scheduled)
		end_after_snapshot(s, r, BN_STATUS_NONE, 0); /* runs then */
	else
		bn_sched_enqueue(sched, r);
	return 0;
}

/* The session broke the protocol at entry `from`: the slots of that entry and of every entry
 * queued behind it, which the client believes submitted, end with ERROR/PROTOCOL too (requests
 * already taken are ended by the scheduler when the session closes). Nothing is copied. */
static void end_untaken(struct bn_session *s, uint32_t from, uint32_t tail)
{
	for (uint32_t c = from; c != tail; c++) {
		uint32_t slot = bn_read_once(s->sqes[bn_ring_index(c, s->sq_mask + 1)].slot);
		if (slot >= s->seg.slot_count || s->reqs[slot].in_flight)
			continue;
		struct bn_req *r = &s->reqs[slot];
		r->in_flight = 1;
		s->n_in_flight++;
		r->t_seen = bn_now_ns();
		r->t_started = r->t_first_token = 0;
		reset_response(s, r);
		bn_req_finish(r, BN_STATUS_ERROR, BN_E_PROTOCOL);
	}
}

int bn_session_poll_ring(struct bn_session *s, struct bn_sched *sched, int shutting_down)
{
	/* Acquire pairs with the client's store-release of tail: the sqes and slot contents it
	 * wrote before publishing are visible once we see the tail. Read once: the client may
	 * move it again meanwhile, and we act only on this snapshot. */
	uint32_t tail = bn_load_acquire(s->ring->tail);
	uint32_t queued = bn_ring_count(s->sq_head, tail);
	if (queued == 0)
		return 0;
	if (!bn_ring_sane(s->sq_head, tail, s->sq_mask + 1))
		return -BN_E_PROTOCOL; /* a tail beyond head + entries was never produced honestly */
	for (uint32_t i = 0; i < queued; i++) {
		const struct bn_sqe *src = &s->sqes[bn_ring_index(s->sq_head + i, s->sq_mask + 1)];
		struct bn_sqe e = {
			.op = bn_read_once(src->op),
			.slot = bn_read_once(src->slot),
			.reserved = { bn_read_once(src->reserved[0]), bn_read_once(src->reserved[1]) },
		};
		if (take_sqe(s, sched, &e, shutting_down) < 0) {
			end_requests_of_snapshot(s);
			end_untaken(s, s->sq_head + i, tail);
			return -BN_E_PROTOCOL;
		}
	}
	s->sq_head = tail;
	/* Release: our copies of the entries are complete before the client may overwrite them. */
	bn_store_release(s->ring->head, tail);
	end_requests_of_snapshot(s);
	return (int)queued;
}

void bn_session_end_requests(struct bn_session *s, struct bn_sched *sched, uint32_t status,
			     uint32_t error)
{
	bn_sched_drop_tenant(sched, &s->tenant, status, error);
	bn_session_grammar_ops_end(s, status, error);
	/* A vanished client's requests end without a status: nobody is left to read it. */
	for (uint32_t i = 0; i < s->seg.slot_count && s->reqs; i++) {
		s->reqs[i].in_flight = 0;
		bn_grammar_detach(&s->reqs[i]);
	}
	s->n_in_flight = 0;
}

void bn_session_set_need_wakeup(struct bn_session *s, int on)
{
	bn_write_once(s->ring->flags, on ? BN_SQ_NEED_WAKEUP : 0u);
}

void bn_session_set_daemon_flags(struct bn_session *s, uint32_t flags)
{
	if (s->hdr)
		bn_write_once(s->hdr->daemon_flags, flags);
}
