/* SPDX-License-Identifier: MIT */
/*
 * sched_internal.h — what the scheduler's files share: sched.c (life, queues, admission,
 * the step's frame), sched_plan.c (one step's rows and batch), sched_deliver.c (its results)
 * and sched_running.c (the running set, which the other three use). Nothing outside
 * serve/sched*.c includes it.
 */
#ifndef BITNETD_SCHED_INTERNAL_H
#define BITNETD_SCHED_INTERNAL_H

#include "sched.h"

#include "kvpool.h"

#include <stddef.h>
#include <stdint.h>

/* A label of a classify request, running in its own sequence forked from the prefix's. Its
 * row sequence is the prefix's last token, then the label's tokens but the last, at positions
 * from n_prompt - 1; token i of it is scored against label token i. */
struct fork {
	struct bn_req *owner;     /* NULL: free */
	uint32_t seq;             /* backend sequence id, past max_batch */
	uint32_t label;
	uint32_t at;              /* the label's first id in owner->labels, and its first record */
	uint32_t done;            /* tokens of its row sequence read */
	struct bn_kv_seq kv;
};

/* Running sequences of one peer uid. */
struct uid_count {
	uint32_t uid;
	uint32_t n;
};

/* Those of every running uid (sched.h). */
struct bn_sched_users {
	struct uid_count *uids;   /* [capacity], dense */
	uint32_t n, capacity;
};

struct bn_sched {
	const struct bn_backend_ops *ops;
	void *backend;            /* NULL while detached: the model is not loaded */
	struct bn_model_desc model; /* what it was created or last attached with */
	uint8_t admitting;        /* 0: waiting requests stay waiting (a model yielding or
				   * unloading) */
	const struct bn_reply *reply; /* how tokens, scores and ends reach the clients */
	struct bn_sched_config cfg;
	struct bn_kvpool kv;
	/* What the backend's elastic arena may hold besides the pool's blocks (backend.h
	 * bn_model_kv_slack; 0 for any other arena): counted in bn_sched_kv_bytes. */
	uint64_t kv_slack;
	uint32_t *kv_tables;      /* [max_batch + fork_seqs][max_blocks_per_seq], by sequence id */
	uint32_t max_blocks_per_seq;
	struct bn_req **running;  /* [max_batch], dense */
	uint32_t n_running;
	uint32_t n_waiting;       /* over all tenants */
	uint32_t *free_seqs;      /* stack of unused backend sequence ids */
	uint32_t n_free_seqs;
	struct bn_sched_users *users; /* cfg.users, or own_users */
	struct bn_sched_users *own_users;
	uint32_t attn_positions;  /* the model's attn_positions_per_token (backend.h) */
	struct fork *forks;       /* [fork_seqs] */
	uint32_t *free_forks;     /* stack of unused indices into forks */
	uint32_t n_free_forks;
	uint32_t max_rows;        /* rows one step may have: max_batch + fork_seqs */
	uint64_t plans;           /* steps planned so far: marks which requests have a row */
	uint32_t rr_cursor;       /* tenant index where the next admission round starts */
	uint64_t admissions;
	uint64_t last_waiting_sweep;
	/* One step's batch, grown on demand. */
	uint32_t *tokens;
	size_t tokens_cap;
	struct bn_req **rows;     /* [max_rows] the request of each row */
	struct fork **row_fork;   /* [max_rows] the fork a row reads, NULL: the request's own */
	uint32_t *lens, *pos, *seq;
	const uint32_t **blocks;
	const struct bn_sample_ctx **sample;
	struct bn_sample_out *out;
	struct bn_token_logprob *top; /* [max_batch][logprob_capacity] */
	/* Score rows (BN_OP_SCORE): what each asks, and its positions' answers, grown on demand. */
	const struct bn_score_row **score; /* [max_rows] NULL: not scored */
	struct bn_score_row *score_rows;   /* [max_rows] */
	struct bn_sample_out *score_out;
	struct bn_token_logprob *score_top; /* [score_cap][logprob_capacity] */
	size_t score_cap;
	uint32_t n_score_rows;             /* in this step's batch */
	/* Verify rows (speculative decoding): each decode row's answers, one per position. */
	struct bn_sample_out **verify;     /* [max_rows] NULL: not a verify row */
	struct bn_sample_out *verify_out;  /* [max_batch][draft_tokens + 1]; NULL: no drafts */
	struct bn_token_logprob *verify_top; /* [that][logprob_capacity] */
	uint32_t mask_words;               /* of an allowed-token bitset (structured output) */
	/* Embedding rows (BN_OP_EMBED): the hidden states each asks, grown on demand, and each
	 * running request's pooled vector so far, by backend sequence id (model/embed.h). */
	const struct bn_hidden_row **hidden; /* [max_rows] NULL: none */
	struct bn_hidden_row *hidden_rows;   /* [max_rows] */
	float *hidden_out;                 /* [hidden_cap][embed_dim] */
	size_t hidden_cap;
	uint32_t n_hidden_rows;            /* in this step's batch */
	double *embed_acc;                 /* [max_batch][embed_dim]; NULL: no embeddings */
	float *embed_vec;                  /* [embed_dim] a finished vector */
	/* The step bn_sched_step_begin planned, until bn_sched_step_end delivers it. */
	struct bn_batch step_batch;
	uint32_t step_rows;                /* 0: none */
	int step_rc;                       /* building the batch, then the backend's step */
	uint64_t step_ns;                  /* the backend's step */
};

/* ---- what a request is doing ------------------------------------------------------------ */

/* A classify request's forks continue the prefix from its last token: they share the
 * prefix's blocks before that position and copy the partial one. */
static inline uint32_t fork_start(const struct bn_req *r)
{
	return r->n_prompt - 1;
}

/* The positions a request reads as prompt chunks: a classify request's prefix but its last
 * token, which each fork reads again (fork_start). */
static inline uint32_t prefill_end(const struct bn_req *r)
{
	return r->op == BN_OP_CLASSIFY ? fork_start(r) : r->n_prompt;
}

static inline int prompt_done(const struct bn_req *r)
{
	return r->n_prefilled == prefill_end(r);
}

/* Prefix-cache blocks a request may take: a score request and an embedding that reads every
 * position (mean) or the first (cls) need positions a hit would skip. */
static inline int sched_may_hit(const struct bn_sched *s, const struct bn_req *r)
{
	return r->op != BN_OP_SCORE && (r->op != BN_OP_EMBED || s->cfg.pooling == BN_POOLING_LAST);
}

/* It has its prompt and generates a token a step. */
static inline int decoding(const struct bn_req *r)
{
	return r->op == BN_OP_GENERATE && prompt_done(r);
}

/* A classify request whose prefix is read: its labels are what is left. */
static inline int reading_labels(const struct bn_req *r)
{
	return r->op == BN_OP_CLASSIFY && prompt_done(r);
}

/* The blocks a fork of a label of len tokens holds that are its own. */
static inline uint32_t sched_fork_own_blocks(const struct bn_sched *s, const struct bn_req *r, uint32_t len)
{
	return bn_kvpool_blocks_for(&s->kv, (uint64_t)fork_start(r) + len) -
	       fork_start(r) / s->kv.block_tokens;
}

/* Whose blocks a request may share. */
static inline uint64_t sched_share_scope(const struct bn_sched *s, const struct bn_req *r)
{
	switch (s->cfg.prefix_cache) {
	case BN_SHARE_UID: return 1ull << 32 | r->tenant->uid;
	case BN_SHARE_SESSION: return 2ull << 32 | r->tenant->id;
	default: return 0;
	}
}

/* An end-of-generation id: eos_id or one of the vocabulary's others. */
static inline int sched_is_eog(const struct bn_sched *s, uint32_t token)
{
	if (token == s->cfg.eos_id)
		return 1;
	for (uint32_t i = 0; i < s->cfg.n_eog; i++)
		if (s->cfg.eog[i] == token)
			return 1;
	return 0;
}

/* One of the request's stop ids. */
static inline int sched_is_stop(const struct bn_req *r, uint32_t token)
{
	for (uint32_t i = 0; i < r->n_stop; i++)
		if (r->stop[i] == token)
			return 1;
	return 0;
}

/* ---- sched_running.c --------------------------------------------------------------------- */

/* r starts running in a sequence that already holds positions [0, start) (its cached
 * blocks); a backend that cannot open it ends r with BN_E_BACKEND. */
void sched_start_running(struct bn_sched *s, struct bn_req *r, uint32_t start);
/* The running request at `index` leaves the running set: its forks end, its KV blocks go
 * back to the pool, its backend sequence id is reused (the last request moves into index). */
void sched_stop_running(struct bn_sched *s, uint32_t index);
/* The same, and the request ends with status and error. */
void sched_finish_running(struct bn_sched *s, uint32_t index, uint32_t status, uint32_t error);
/* Where r is in the running set. */
uint32_t sched_running_index(const struct bn_sched *s, const struct bn_req *r);
/* A fork ends: its own blocks back to its request's reservation, its id reused. */
void sched_end_fork(struct bn_sched *s, struct fork *f);
/* Running sequences of a peer uid. */
uint32_t sched_user_running(struct bn_sched *s, uint32_t uid);

/* ---- sched_plan.c ------------------------------------------------------------------------ */

/* Extends decode rows rows[0 .. n_decode) of requests that draft with their drafts, within
 * `spare` budget units. Returns the units spent. */
uint64_t sched_plan_drafts(struct bn_sched *s, uint32_t n_decode, uint64_t spare);
/* The drafts of verify row k that its answers confirm: before the first whose position's
 * token differs. */
uint32_t sched_verified_drafts(const struct bn_sched *s, uint32_t k);
/* Plans the step's rows (the request, fork, length, position, sequence, blocks and what each
 * wants). Returns the number of rows. */
uint32_t sched_plan(struct bn_sched *s);
/* Grows each planned row's block table over its new positions and fills the batch. 0, -ENOMEM,
 * or -ENOSPC (a reservation that does not cover the rows: a bug, reported). */
int sched_build_batch(struct bn_sched *s, uint32_t n_rows, struct bn_batch *b);
/* Every block the step filled gets its identity in the prefix cache (when there is one). */
void sched_identify_step(struct bn_sched *s, uint32_t n_rows);

/* ---- sched_deliver.c --------------------------------------------------------------------- */

/* The step's results to their requests; the stream waiters woken. */
void sched_deliver_all(struct bn_sched *s, uint32_t n_rows);

/* ---- sched_grammar.c --------------------------------------------------------------------- */

/* r starts running: a matcher at the start of its output, the first position's mask. 0, or
 * the bn_error that ends it (BN_E_GRAMMAR_STUCK, BN_E_BACKEND without memory). Nothing for a
 * request without a grammar. */
uint32_t sched_grammar_start(struct bn_sched *s, struct bn_req *r);
/* r stops running: its matcher and masks freed. */
void sched_grammar_stop(struct bn_req *r);
/* The planned rows' constraints, before the batch is built: a verify row's drafts cut where
 * the grammar refuses them (lens and verify change) and each of its positions' masks. */
void sched_grammar_plan(struct bn_sched *s, uint32_t n_rows);
/* After the step, before a constrained row's tokens are delivered: the matcher back after the
 * published tokens (the sampler's check may have taken it past drafts). */
void sched_grammar_settle(struct bn_req *r);
/* A token about to be published advances the matcher: 0, or < 0 when the grammar refuses it
 * (a bug: the request ends with BN_E_BACKEND). */
int sched_grammar_accept(struct bn_req *r, uint32_t token);
/* After a row's tokens were published: the next position's mask. 0, or the bn_error that
 * ends the request: BN_E_GRAMMAR_STUCK when no token can continue it. */
uint32_t sched_grammar_next(struct bn_sched *s, struct bn_req *r);
/* The backend failed the step: every running request ends with BN_E_BACKEND. */
void sched_fail_all_running(struct bn_sched *s, int rc);

#endif /* BITNETD_SCHED_INTERNAL_H */
