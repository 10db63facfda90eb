/* SPDX-License-Identifier: MIT */
/*
 * sched_running.c — the scheduler's running set (sched.h): a request starts running in a
 * backend sequence, its classify labels in forks, and leaves with its blocks given back; and
 * the running sequences of each uid, for the per-user cap. The other sched*.c files call it;
 * it calls only sched_grammar.c (a constrained request's matcher lives as long as its
 * sequence).
 */
#include "sched_internal.h"

#include "common/stats.h"
#include "model/embed.h"

static struct uid_count *uid_entry(struct bn_sched *s, uint32_t uid)
{
	for (uint32_t i = 0; i < s->n_uids; i++)
		if (s->uids[i].uid == uid)
			return &s->uids[i];
	return NULL;
}

static void uid_add(struct bn_sched *s, uint32_t uid)
{
	struct uid_count *u = uid_entry(s, uid);
	if (!u) {
		u = &s->uids[s->n_uids++]; /* at most max_batch distinct running uids */
		*u = (struct uid_count){ .uid = uid };
	}
	u->n++;
}

static void uid_remove(struct bn_sched *s, uint32_t uid)
{
	struct uid_count *u = uid_entry(s, uid);
	if (u && --u->n == 0)
		*u = s->uids[--s->n_uids];
}

/* A fork ends: its own blocks back to its request's reservation, its id reused. */
void sched_end_fork(struct bn_sched *s, struct fork *f)
{
	s->ops->seq_close(s->backend, f->seq);
	bn_kvpool_release_to(&s->kv, &f->kv, &f->owner->kv);
	f->owner->n_forks--;
	f->owner = NULL;
	s->free_forks[s->n_free_forks++] = (uint32_t)(f - s->forks);
}

static void end_forks_of(struct bn_sched *s, const struct bn_req *r)
{
	for (uint32_t i = 0; i < s->cfg.fork_seqs && r->n_forks; i++)
		if (s->forks[i].owner == r)
			sched_end_fork(s, &s->forks[i]);
}

/* Leaves the running set: KV blocks back to the pool, the backend sequence id reused. */
void sched_stop_running(struct bn_sched *s, uint32_t index)
{
	struct bn_req *r = s->running[index];
	end_forks_of(s, r);
	s->ops->seq_close(s->backend, r->seq);
	bn_kvpool_release(&s->kv, &r->kv);
	if (r->drafter.cap)
		bn_drafter_free(&r->drafter);
	sched_grammar_stop(r);
	s->free_seqs[s->n_free_seqs++] = r->seq;
	r->running = 0;
	r->tenant->n_running--;
	uid_remove(s, r->tenant->uid);
	s->running[index] = s->running[--s->n_running];
}

uint32_t sched_running_index(const struct bn_sched *s, const struct bn_req *r)
{
	for (uint32_t i = 0; i < s->n_running; i++)
		if (s->running[i] == r)
			return i;
	return UINT32_MAX;
}

void sched_finish_running(struct bn_sched *s, uint32_t index, uint32_t status, uint32_t error)
{
	struct bn_req *r = s->running[index];
	sched_stop_running(s, index);
	s->reply->finish(r, status, error);
}

/* r starts in a sequence that already holds positions [0, start) (its cached blocks). */
void sched_start_running(struct bn_sched *s, struct bn_req *r, uint32_t start)
{
	uint32_t seq = s->free_seqs[--s->n_free_seqs];
	int rc = start ? s->ops->seq_fork(s->backend, seq, start, 0, 0, 0)
		       : s->ops->seq_open(s->backend, seq);
	if (rc < 0) {
		s->free_seqs[s->n_free_seqs++] = seq;
		bn_kvpool_release(&s->kv, &r->kv);
		s->reply->finish(r, BN_STATUS_ERROR, BN_E_BACKEND);
		return;
	}
	r->seq = seq;
	r->running = 1;
	r->n_prefilled = start;
	r->n_identified = start / s->kv.block_tokens;
	r->next_label = r->next_label_at = r->labels_done = r->n_forks = 0;
	r->admitted = ++s->admissions;
	if (r->op == BN_OP_EMBED && s->embed_acc)
		bn_embed_clear(s->embed_acc + (size_t)seq * s->cfg.embed_dim, s->cfg.embed_dim);
	r->speculate = s->verify_out && r->op == BN_OP_GENERATE &&
		       (s->cfg.speculative == BN_SPECULATIVE_NGRAM || (r->flags & BN_REQ_SPECULATE));
	r->tenant->n_running++;
	uid_add(s, r->tenant->uid);
	s->running[s->n_running++] = r;
	uint32_t err = sched_grammar_start(s, r);
	if (err)
		sched_finish_running(s, s->n_running - 1, BN_STATUS_ERROR, err);
}

uint32_t sched_user_running(struct bn_sched *s, uint32_t uid)
{
	const struct uid_count *u = uid_entry(s, uid);
	return u ? u->n : 0;
}
