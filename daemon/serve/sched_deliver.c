/* SPDX-License-Identifier: MIT */
/*
 * sched_deliver.c — what one step gives back (sched.h): each row's token (a verify row's
 * tokens up to its first rejected draft, then the sequence rewound), score positions or label
 * records to its request through the reply table, the requests that end with them, and the
 * stream waiters' wake-ups.
 */
#include "sched_internal.h"

#include "bitnet_barrier.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/stats.h"
#include "model/embed.h"

static void observe_token(struct bn_req *r, uint64_t now)
{
	if (!r->t_first_token) {
		r->t_first_token = now;
		bn_stats_observe(BN_HIST_TTFT_SECONDS, (double)(now - r->t_seen) * 1e-9);
	} else {
		bn_stats_observe(BN_HIST_ITL_SECONDS, (double)(now - r->t_last_token) * 1e-9);
	}
	r->t_last_token = now;
}

/* Applies one sampled token to its request; ends it on an end-of-generation id, a stop id or
 * max_tokens. Returns 1 when it ended the request. */
static int deliver(struct bn_sched *s, struct bn_req *r, const struct bn_sample_out *o,
		    uint64_t now)
{
	observe_token(r, now);
	uint32_t status = BN_STATUS_NONE;
	if (sched_is_eog(s, o->token) && !(r->flags & BN_REQ_IGNORE_EOS))
		status = BN_STATUS_EOS;
	else if (sched_is_stop(r, o->token))
		status = BN_STATUS_STOP;
	if (status == BN_STATUS_NONE && r->matcher && sched_grammar_accept(r, o->token) < 0)
		status = BN_STATUS_ERROR;
	else if (status == BN_STATUS_NONE) {
		if (r->sampling.want_logprobs)
			s->reply->write_logprobs(r, r->n_out, o);
		if (s->reply->publish_token(r, o->token) < 0)
			status = BN_STATUS_ERROR; /* its text could not be decoded: no memory */
		else if (r->n_out == r->max_tokens)
			status = BN_STATUS_LENGTH;
	}
	if (status == BN_STATUS_NONE)
		return 0;
	sched_finish_running(s, sched_running_index(s, r), status,
			     status == BN_STATUS_ERROR ? BN_E_BACKEND : 0);
	return 1;
}

/* Before the row's tokens are published, its drafts sit in its request's output after
 * n_out (sched_plan_drafts). */
uint32_t sched_verified_drafts(const struct bn_sched *s, uint32_t k)
{
	const struct bn_req *r = s->rows[k];
	uint32_t n = 0;
	while (n + 1 < s->lens[k] && s->verify[k][n].token == r->output[r->n_out + n])
		n++;
	return n;
}

/* A verify row: its positions' tokens in order, each as deliver() takes a decode row's, up to
 * and including the first whose draft was not the model's token (the token published in the
 * draft's place). A request still running then holds in its sequence exactly the positions
 * of its published tokens but the last, as after plain decoding: the rest is rewound and the
 * blocks past it go back to its reservation. */
static void deliver_verified(struct bn_sched *s, uint32_t k, struct bn_req *r, uint64_t now)
{
	uint32_t drafts = s->lens[k] - 1, accepted = sched_verified_drafts(s, k), before = r->n_out;
	for (uint32_t j = 0; j <= accepted; j++)
		if (deliver(s, r, &s->verify[k][j], now))
			break;
	/* Position j's token is draft j + 1 for j < accepted: of the tokens published (an end
	 * of generation or stop id is not), those were drafts. */
	uint32_t published = r->n_out - before;
	bn_stats.spec_rows++;
	bn_stats.spec_drafted += drafts;
	bn_stats.spec_accepted += published < accepted ? published : accepted;
	bn_stats.spec_tokens += published;
	if (!r->running)
		return;
	bn_drafter_result(&r->drafter, drafts, accepted);
	uint32_t length = r->n_prompt + r->n_out - 1;
	int rc = s->ops->seq_rewind(s->backend, r->seq, length);
	if (rc < 0) {
		bn_log_error("msg=\"backend cannot rewind a sequence\" backend=%s rc=%d", s->ops->name, rc);
		sched_finish_running(s, sched_running_index(s, r), BN_STATUS_ERROR, BN_E_BACKEND);
		return;
	}
	bn_kvpool_trim(&s->kv, &r->kv, length);
}

void sched_fail_all_running(struct bn_sched *s, int rc)
{
	bn_log_error("msg=\"backend step failed\" backend=%s rc=%d rows=%u", s->ops->name, rc,
		     s->n_running);
	while (s->n_running)
		sched_finish_running(s, 0, BN_STATUS_ERROR, BN_E_BACKEND);
}

static void deliver_score(struct bn_sched *s, uint32_t k, struct bn_req *r)
{
	const struct bn_score_row *sr = s->score[k];
	for (uint32_t j = 0; j < sr->n_targets; j++)
		s->reply->publish_score(r, r->n_prefilled + j, &sr->out[j]);
	r->n_prefilled += s->lens[k];
	if (prompt_done(r))
		sched_finish_running(s, sched_running_index(s, r), BN_STATUS_COMPLETE, 0);
}

/* An embedding's chunk: its hidden states into its pooled vector; the last chunk publishes
 * the vector (normalised) and ends the request. */
static void deliver_embed(struct bn_sched *s, uint32_t k, struct bn_req *r)
{
	uint32_t dim = s->cfg.embed_dim;
	double *acc = s->embed_acc + (size_t)r->seq * dim;
	if (s->hidden[k])
		bn_embed_take(s->cfg.pooling, acc, s->hidden[k]->out, s->hidden[k]->count, dim);
	r->n_prefilled += s->lens[k];
	if (!prompt_done(r))
		return;
	bn_embed_finish(s->cfg.pooling, acc, dim, r->n_prompt, s->embed_vec);
	s->reply->publish_embedding(r, s->embed_vec, dim, s->cfg.pooling);
	sched_finish_running(s, sched_running_index(s, r), BN_STATUS_COMPLETE, 0);
}

/* A fork's records go to the slot (published at the end); the last label to end ends the
 * request with every record. */
static void deliver_fork(struct bn_sched *s, uint32_t k, struct fork *f)
{
	struct bn_req *r = f->owner;
	const struct bn_score_row *sr = s->score[k];
	for (uint32_t j = 0; j < sr->n_targets; j++)
		s->reply->write_record(r, f->at + f->done + j, &sr->out[j]);
	f->done += s->lens[k];
	if (f->done < r->label_len[f->label])
		return;
	sched_end_fork(s, f);
	if (++r->labels_done == r->n_labels) {
		r->n_out = r->n_label_tokens;
		sched_finish_running(s, sched_running_index(s, r), BN_STATUS_COMPLETE, 0);
	}
}

void sched_deliver_all(struct bn_sched *s, uint32_t n_rows)
{
	uint64_t now = bn_now_ns();
	for (uint32_t k = 0; k < n_rows; k++) {
		struct bn_req *r = s->rows[k];
		if (s->row_fork[k]) {
			deliver_fork(s, k, s->row_fork[k]);
			continue;
		}
		if (s->score[k]) {
			deliver_score(s, k, r);
			continue;
		}
		if (r->op == BN_OP_EMBED) {
			deliver_embed(s, k, r);
			continue;
		}
		if (!prompt_done(r))
			r->n_prefilled += s->lens[k];
		if (r->matcher && s->sample[k])
			sched_grammar_settle(r);
		if (s->verify[k])
			deliver_verified(s, k, r, now);
		else if (s->sample[k])
			deliver(s, r, &s->out[k], now);
		uint32_t err = r->running && r->matcher && s->sample[k] ? sched_grammar_next(s, r) : 0;
		if (err)
			sched_finish_running(s, sched_running_index(s, r), BN_STATUS_ERROR, err);
	}
	/* Full fence: the events stores above are ordered before the loads of the waiters words
	 * in which streaming clients announce that they sleep (see bn_req_wake_stream_waiter). */
	bn_smp_mb();
	for (uint32_t i = 0; i < s->n_running; i++)
		s->reply->wake_stream_waiter(s->running[i]);
}
