/* SPDX-License-Identifier: MIT */
/*
 * sched.h — iteration-level (continuous) batching.
 *
 * Every step is one batch. Running sequences that have their whole prompt in the KV cache
 * decode one token each; then prompts that are still being read get chunks of their remaining
 * tokens, from the session decoding the fewest sequences first and oldest admission first
 * among equals, until the step's token budget is spent (decode first, so a long prompt slows
 * decoding by at most one budget's worth per step). The budget counts work: a token deep in
 * its context costs more than one, by the attention it reads (the backend's
 * attn_positions_per_token), so steps along a long prompt stay as long as its first ones.
 * Waiting requests are admitted between steps by weighted round-robin over sessions, within
 * the max batch, the per-session and per-user caps on running sequences, and the KV pool
 * (kvpool.h): a request is admitted only when every block it can need is reserved for it.
 * Finished sequences leave at once and give their blocks back before the next step.
 *
 * A classify request reads its prefix but the last token (no LM head), then continues it with
 * each label in a forked sequence (backend.h, seq_fork) that shares the prefix's full KV
 * blocks: the fork's row is the prefix's last token and the label's tokens but its last, each
 * scored against the next label token. So the prefix is read once, every label costs its own
 * length, and each label's log-probabilities are those of scoring prefix + label alone (the
 * same rows over the same KV). Forks are prompt work: budgeted and ordered as prompt chunks.
 *
 * With the prefix cache, every full block a sequence writes gets an identity by its tokens
 * (prefix_cache.h), and a request admitted later takes the cached blocks its prompt starts
 * with (all but its last token, which must be read to give the first token's logits) and
 * reads only the rest: its sequence starts forked at the first uncached position. The KV of a
 * position is the same bits however it was computed (prefill and stepwise decoding are
 * bit-identical), so a hit never changes an output. Admission reserves only the blocks the
 * request still needs; score requests, which need every position's logits, take no hits.
 *
 * An embedding request reads its input as prompt chunks and asks the backend for the final
 * hidden states its pooling reads (model/embed.h: every position for mean, the first for
 * cls, the last for last), pooled in binary64 in position order as they come, so its vector
 * is the same bits whatever its chunks and batches were. Last-token pooling takes the prefix
 * cache's blocks as a generation does (only the last position is read); mean and cls need
 * positions the cache would skip, so they take none.
 *
 * Speculative decoding (exact): a decoding request that drafts (draft.h) has its decode row
 * extended by up to draft_tokens tokens guessed from its own prompt and output, within what
 * the budget leaves above the prompts' quarter. The backend samples every position of the row
 * as plain decoding would at that output index (batch.h: the same history, the same seeded
 * draw), so the row's first token is the one plain decoding gives, and each draft that equals
 * the token sampled before it makes the next position's token the next one plain decoding
 * gives. Tokens are published in order up to the first draft that differs (its position's
 * token is published in its place); stop ids, end of generation and max_tokens end the
 * request at the same token as without drafts. The sequence is then rewound to its accepted
 * tokens (backend seq_rewind) and blocks past them go back to its reservation; the prefix
 * cache names only blocks of accepted positions.
 */
#ifndef BITNETD_SCHED_H
#define BITNETD_SCHED_H

#include "backends/backend.h"
#include "draft.h"
#include "request.h"

#include <stdint.h>

struct bn_sched;

#define BN_SCHED_MAX_EOG 16

struct bn_sched_config {
	uint32_t max_batch;              /* sequences running at once */
	uint32_t token_budget;           /* tokens per step at position 0, decode tokens included */
	uint32_t max_running_per_session; /* 0: max_batch */
	uint32_t max_running_per_user;   /* 0: max_batch (by peer uid) */
	uint32_t eos_id;
	/* End-of-generation ids besides eos_id (the vocabulary's eot, eom and end-of-turn tokens,
	 * daemon/model/vocab.h): a request ends with BN_STATUS_EOS at any of them. */
	uint32_t n_eog;
	uint32_t eog[BN_SCHED_MAX_EOG];
	uint32_t context_length;
	uint64_t kv_memory;              /* bytes of KV cache; 0: the default (sched.c) */
	uint32_t kv_block_tokens;        /* positions per KV block */
	uint32_t logprob_capacity;       /* alternatives a request may ask for */
	/* Backend sequence ids past max_batch for forked sequences (a classify request's labels):
	 * the backend was opened with max_batch + fork_seqs of them. 0: no classify. */
	uint32_t fork_seqs;
	/* enum bn_prefix_sharing: full KV blocks of earlier sequences found by their tokens
	 * (prefix_cache.h), shared within a uid, a session or by all; BN_SHARE_OFF: none. Needs
	 * a backend with seq_fork (else off, logged). */
	uint32_t prefix_cache;
	/* enum bn_speculative: which generate requests draft tokens from their own and verify
	 * them in their decode row (draft.h); needs a backend with seq_rewind (else none). */
	uint32_t speculative;
	uint32_t draft_tokens;           /* drafts per row at most, 1 .. BN_DRAFT_MAX_TOKENS */
	/* Embedding requests (BN_OP_EMBED): how they pool (enum bn_pooling; 0: none come) the
	 * backend's hidden rows of embed_dim floats (model/embed.h). */
	uint32_t pooling;
	uint32_t embed_dim;
	/* The running sequences per peer uid that max_running_per_user counts: a table shared by
	 * the schedulers of a daemon's models, so the cap holds across them (they all step on
	 * the loop thread). NULL: the scheduler's own. */
	struct bn_sched_users *users;
	/* A KV budget shared with other models' schedulers (kvpool.h): kv_memory is then this
	 * pool's arena, the most it may borrow, and kv_share (bytes, a ledger of summed shares:
	 * --memory) what it brings to the ledger and is guaranteed under load. Blocks it frees
	 * keep their memory while the pools fit the cap and give it back (the backend's
	 * kv_release, where it has one) when they would not. NULL: its
	 * pool is its own. */
	struct bn_kv_ledger *kv_ledger;
	uint64_t kv_share;
};

/* A table of running sequences per peer uid for `capacity` sequences at once (the sum of
 * the max_batch of the schedulers that share it); it outlives them. NULL without memory. */
struct bn_sched_users *bn_sched_users_new(uint32_t capacity);
void bn_sched_users_free(struct bn_sched_users *u);

enum bn_speculative {
	BN_SPECULATIVE_REQUEST = 0, /* those that set BN_REQ_SPECULATE */
	BN_SPECULATIVE_NGRAM,       /* every generate request */
	BN_SPECULATIVE_OFF,         /* none: the flag is accepted and changes nothing */
	BN_SPECULATIVE_MODES
};
/* Their names, as --speculative takes them and STATS says them, by enum bn_speculative. */
extern const char *const bn_speculative_names[BN_SPECULATIVE_MODES];

/* A scheduler for a model that is not loaded yet (detached): its queues take requests (no
 * KV check until it has a pool), and its steps only end cancelled and expired waiting ones.
 * `model` is the model's description as its sessions' headers say it (its vocabulary and
 * context). Tokens, scores and terminal statuses reach the clients through `reply`
 * (request.h). NULL without memory. */
struct bn_sched *bn_sched_create(const struct bn_backend_ops *ops,
				 const struct bn_model_desc *model,
				 const struct bn_sched_config *cfg, const struct bn_reply *reply);
/* The model is loaded: its backend joins, the KV pool is sized (backend kv_init, logged), and
 * the waiting requests of tenants[0..n) that could never fit it end with BN_E_KV_SPACE.
 * 0, or < 0 (logged) when the pool does not fit or cannot be allocated (still detached). */
int bn_sched_attach(struct bn_sched *s, void *backend, const struct bn_model_desc *model,
		    struct bn_tenant **tenants, uint32_t n_tenants);
/* The model is unloaded: the KV pool (and the prefix cache) go; nothing may be running. The
 * waiting requests stay for the next attach. */
void bn_sched_detach(struct bn_sched *s);
int bn_sched_attached(const struct bn_sched *s);
/* 0: waiting requests are not admitted (those running go on); 1 again: they are. */
void bn_sched_set_admitting(struct bn_sched *s, int on);
/* Bytes of the KV pool while attached (0 detached); in a ledger of summed shares, its share
 * (what it may borrow beyond is the ledger's). */
uint64_t bn_sched_kv_bytes(const struct bn_sched *s);

/* bn_sched_create then bn_sched_attach: a scheduler of a loaded model. NULL on failure
 * (logged). */
struct bn_sched *bn_sched_new(const struct bn_backend_ops *ops, void *backend,
			      const struct bn_model_desc *model, const struct bn_sched_config *cfg,
			      const struct bn_reply *reply);
void bn_sched_free(struct bn_sched *s);

/* A validated request joins its tenant's waiting FIFO, or ends at once when it could never
 * fit in the KV pool (BN_E_KV_SPACE). */
void bn_sched_enqueue(struct bn_sched *s, struct bn_req *r);

/* Ends cancelled and expired requests, admits waiting ones over tenants[0..n) (in that
 * order, round-robin), runs one batched step and delivers its tokens. Returns the number of
 * rows run (0: nothing to do). */
uint32_t bn_sched_step(struct bn_sched *s, struct bn_tenant **tenants, uint32_t n_tenants);

/* bn_sched_step in three parts, so that steps of several models can run at once: begin
 * (cancels, deadlines, admission, the plan and the batch; returns its rows, 0: no step), run
 * (the backend's step alone: it touches only s, its backend and its requests, so it may run
 * on another thread while the caller's thread runs another model's step, when their backend
 * allows it: bn_backend_ops.concurrent_steps), end (delivery; returns the rows).
 * Begin and end run on the daemon's loop thread. */
uint32_t bn_sched_step_begin(struct bn_sched *s, struct bn_tenant **tenants, uint32_t n_tenants);
void bn_sched_step_run(struct bn_sched *s);
uint32_t bn_sched_step_end(struct bn_sched *s);

/* Ends every request of tenant t. status 0 means the client is gone: the requests are
 * dropped without a word to it (reply->finish is not called); otherwise each gets that
 * terminal status and error. */
void bn_sched_drop_tenant(struct bn_sched *s, struct bn_tenant *t, uint32_t status,
			  uint32_t error);

/* Ends all waiting (not yet running) requests of the tenants with `status`. */
void bn_sched_end_waiting(struct bn_sched *s, struct bn_tenant **tenants, uint32_t n_tenants,
			  uint32_t status);
/* Ends all running requests with `status`. */
void bn_sched_end_running(struct bn_sched *s, uint32_t status);
/* The same two with an error code (a model that could not load, or was unloaded). */
void bn_sched_end_waiting_error(struct bn_sched *s, struct bn_tenant **tenants,
				uint32_t n_tenants, uint32_t status, uint32_t error);
void bn_sched_end_running_error(struct bn_sched *s, uint32_t status, uint32_t error);

/* The most tokens of a prompt, from position `pos` and at most `max_tokens`, that fit in
 * `units` of a step's budget when a token at position p costs attn_positions + p units (or 1
 * when attn_positions is 0; see attn_positions_per_token in backend.h). */
uint32_t bn_sched_chunk_tokens(uint32_t attn_positions, uint32_t pos, uint32_t max_tokens,
			       uint64_t units);

uint32_t bn_sched_running(const struct bn_sched *s);
uint32_t bn_sched_waiting(const struct bn_sched *s);
uint32_t bn_sched_max_batch(const struct bn_sched *s);
void bn_sched_kv_usage(const struct bn_sched *s, uint32_t *total, uint32_t *used,
		       uint32_t *reserved, uint32_t *block_tokens);
/* Blocks with a cached identity (held or parked), and cached blocks taken for others. */
void bn_sched_cache_usage(const struct bn_sched *s, uint32_t *cached, uint64_t *evictions);

#endif /* BITNETD_SCHED_H */
