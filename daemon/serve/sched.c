/* SPDX-License-Identifier: MIT */
/*
 * sched.c — the scheduler's life and each step's frame (sched.h): set-up, the tenants' queues,
 * admission, cancellation and deadlines, and ending requests. What one step runs is planned in
 * sched_plan.c; what it gives back is delivered by sched_deliver.c.
 */
#include "sched_internal.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/stats.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Without --kv-memory the pool holds every sequence at full context, but at most this share
 * of physical memory (the rest is the model's and the system's), or on a GPU what the
 * backend says its device has free. */
#define KV_DEFAULT_MEMORY_SHARE 4

/* ------------------------------------------------------------------------------------------ */
/* Gauges                                                                                     */
/* ------------------------------------------------------------------------------------------ */

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
	return s->cfg.max_batch;
}

void bn_sched_kv_usage(const struct bn_sched *s, uint32_t *total, uint32_t *used,
		       uint32_t *reserved, uint32_t *block_tokens)
{
	*total = s->kv.n_blocks;
	*used = bn_kvpool_used(&s->kv);
	*reserved = s->kv.n_reserved;
	*block_tokens = s->kv.block_tokens;
}

void bn_sched_cache_usage(const struct bn_sched *s, uint32_t *cached, uint64_t *evictions)
{
	*cached = s->kv.cache ? bn_prefix_cache_blocks(s->kv.cache) : 0;
	*evictions = s->kv.evictions;
}

/* ------------------------------------------------------------------------------------------ */
/* Set-up                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* What the device can give the KV cache: its free memory past the headroom, or 0 (said in
 * the log) when that is less than one block. */
static uint64_t device_kv_memory(const struct bn_model_desc *model, uint64_t want,
				 uint64_t block_bytes)
{
	uint64_t room = bn_model_device_kv_room(model, block_bytes);
	if (room)
		return want < room ? want : room;
	bn_log_error("msg=\"the device has no memory left for the KV cache\" free_mib=%llu "
		     "headroom_mib=%llu block_bytes=%llu hint=\"the headroom is kept free for the "
		     "steps' scratch; --kv-memory sets the KV cache's size and overrides it\"",
		     (unsigned long long)(model->device_free >> 20),
		     (unsigned long long)(model->device_headroom >> 20),
		     (unsigned long long)block_bytes);
	return 0;
}

static uint64_t default_kv_memory(const struct bn_sched_config *c, const struct bn_model_desc *model,
				  uint64_t bytes_per_token)
{
	uint64_t want = (uint64_t)c->max_batch * c->context_length * bytes_per_token;
	if (model->kv_on_device)
		return device_kv_memory(model, want, bytes_per_token * c->kv_block_tokens);
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t cap = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page /
						       KV_DEFAULT_MEMORY_SHARE
					     : want;
	return want < cap ? want : cap;
}

/* Gives freed blocks' memory back to the system (kvpool.h bn_kv_release_fn). */
static void release_blocks(void *ctx, uint32_t first, uint32_t n)
{
	struct bn_sched *s = ctx;
	int rc = s->ops->kv_release(s->backend, first, n);
	if (rc < 0)
		bn_log_warn("msg=\"KV blocks' memory not given back\" first=%u n=%u rc=%d", first, n, rc);
}

/* The pool (of `blocks`) lends and borrows through the ledger: its blocks' bytes, its share
 * in whole blocks (one at least, the arena at most) and, where the backend can, freed
 * blocks' memory given back when the pools would hold more than the ledger's cap. */
static void join_ledger(struct bn_sched *s, const struct bn_sched_config *c, uint64_t bpt,
			uint64_t blocks)
{
	s->kv.block_bytes = bpt * c->kv_block_tokens;
	uint64_t share = c->kv_share / s->kv.block_bytes;
	share = share < 1 ? 1 : share > blocks ? blocks : share;
	s->kv.share_bytes = c->kv_ledger->summed ? share * s->kv.block_bytes : 0;
	if (s->ops->kv_release && s->ops->kv_release(s->backend, 0, 0) == 0) {
		s->kv.release = release_blocks;
		s->kv.release_ctx = s;
	}
	bn_kv_ledger_join(c->kv_ledger, &s->kv);
	bn_log_info("msg=\"kv pool lends and borrows\" share_bytes=%llu ledger_bytes=%llu summed=%d frees_memory=%d",
		    (unsigned long long)s->kv.share_bytes, (unsigned long long)c->kv_ledger->cap,
		    c->kv_ledger->summed, s->kv.release != NULL);
}

static int size_kv_pool(struct bn_sched *s, const struct bn_model_desc *model)
{
	const struct bn_sched_config *c = &s->cfg;
	uint64_t bpt = model->kv_bytes_per_token ? model->kv_bytes_per_token : 1;
	uint64_t memory = c->kv_memory ? c->kv_memory : default_kv_memory(c, model, bpt);
	uint64_t blocks = memory / (bpt * c->kv_block_tokens);
	uint64_t useful = (uint64_t)c->max_batch *
			  ((c->context_length + c->kv_block_tokens - 1) / c->kv_block_tokens);
	if (blocks > useful)
		blocks = useful; /* more could never be used at once */
	if (blocks == 0 && !c->kv_memory && model->kv_on_device)
		return -ENOMEM; /* device_kv_memory said why */
	if (blocks == 0) {
		bn_log_error("msg=\"--kv-memory is smaller than one KV block\" kv_memory=%llu block_bytes=%llu",
			     (unsigned long long)memory, (unsigned long long)(bpt * c->kv_block_tokens));
		return -EINVAL;
	}
	if (bn_kvpool_init(&s->kv, (uint32_t)blocks, c->kv_block_tokens) < 0)
		return -ENOMEM;
	if (c->prefix_cache != BN_SHARE_OFF && !s->ops->seq_fork) {
		bn_log_info("msg=\"no prefix cache: the backend cannot start a sequence past its first position\" backend=%s",
			    s->ops->name);
		s->cfg.prefix_cache = BN_SHARE_OFF;
	}
	if (s->cfg.prefix_cache != BN_SHARE_OFF && bn_kvpool_enable_cache(&s->kv) < 0)
		return -ENOMEM;
	/* A pool that lends on a backend with an elastic arena maps memory as blocks are used
	 * (backend.h kv_init_elastic); its arena may be sized past what the device has free. */
	int elastic = c->kv_ledger && s->ops->kv_init_elastic && model->kv_map_granule;
	int rc = elastic ? s->ops->kv_init_elastic(s->backend, (uint32_t)blocks, c->kv_block_tokens)
			 : s->ops->kv_init(s->backend, (uint32_t)blocks, c->kv_block_tokens);
	if (rc < 0) {
		bn_log_error("msg=\"cannot allocate the KV cache\" blocks=%llu bytes=%llu rc=%d",
			     (unsigned long long)blocks,
			     (unsigned long long)(blocks * c->kv_block_tokens * bpt), rc);
		return rc;
	}
	s->kv_slack = elastic ? bn_model_kv_slack(model, c->kv_block_tokens) : 0;
	if (c->kv_ledger)
		join_ledger(s, c, bpt, blocks); /* after kv_init: the arena it releases exists */
	bn_log_info("msg=\"kv cache\" blocks=%llu block_tokens=%u positions=%llu bytes=%llu bytes_per_token=%llu",
		    (unsigned long long)blocks, c->kv_block_tokens,
		    (unsigned long long)(blocks * c->kv_block_tokens),
		    (unsigned long long)(blocks * c->kv_block_tokens * bpt), (unsigned long long)bpt);
	return 0;
}

static int alloc_forks(struct bn_sched *s)
{
	uint32_t n = s->cfg.fork_seqs;
	s->forks = calloc(n ? n : 1, sizeof(*s->forks));
	s->free_forks = calloc(n ? n : 1, sizeof(*s->free_forks));
	if (!s->forks || !s->free_forks)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t seq = s->cfg.max_batch + i;
		s->forks[i] = (struct fork){
			.seq = seq,
			.kv.table = s->kv_tables + (size_t)seq * s->max_blocks_per_seq,
		};
		s->free_forks[i] = n - 1 - i;
	}
	s->n_free_forks = n;
	return 0;
}

/* Answers for every position of every decode row that may verify drafts: only when some
 * request may draft on this backend. */
const char *const bn_speculative_names[BN_SPECULATIVE_MODES] = {
	[BN_SPECULATIVE_REQUEST] = "request", [BN_SPECULATIVE_NGRAM] = "ngram",
	[BN_SPECULATIVE_OFF] = "off",
};

static int alloc_verify(struct bn_sched *s)
{
	if (!s->ops->seq_rewind || s->cfg.speculative == BN_SPECULATIVE_OFF)
		return 0;
	size_t n = (size_t)s->cfg.max_batch * (s->cfg.draft_tokens + 1);
	uint32_t per = s->cfg.logprob_capacity ? s->cfg.logprob_capacity : 1;
	s->verify_out = calloc(n, sizeof(*s->verify_out));
	s->verify_top = calloc(n * per, sizeof(*s->verify_top));
	if (!s->verify_out || !s->verify_top)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		s->verify_out[i].top = s->verify_top + i * per;
	return 0;
}

/* Room for each running request's pooled vector and one finished vector, when embeddings
 * may come. */
static int alloc_embed(struct bn_sched *s)
{
	if (!s->cfg.pooling || !s->cfg.embed_dim)
		return 0;
	s->embed_acc = calloc((size_t)s->cfg.max_batch * s->cfg.embed_dim, sizeof(*s->embed_acc));
	s->embed_vec = calloc(s->cfg.embed_dim, sizeof(*s->embed_vec));
	return s->embed_acc && s->embed_vec ? 0 : -ENOMEM;
}

static int alloc_buffers(struct bn_sched *s)
{
	uint32_t n = s->max_rows = s->cfg.max_batch + s->cfg.fork_seqs;
	s->running = calloc(s->cfg.max_batch, sizeof(*s->running));
	s->free_seqs = calloc(s->cfg.max_batch, sizeof(*s->free_seqs));
	if (!s->cfg.users)
		s->own_users = bn_sched_users_new(s->cfg.max_batch);
	s->users = s->cfg.users ? s->cfg.users : s->own_users;
	s->rows = calloc(n, sizeof(*s->rows));
	s->row_fork = calloc(n, sizeof(*s->row_fork));
	s->lens = calloc(n, sizeof(*s->lens));
	s->pos = calloc(n, sizeof(*s->pos));
	s->seq = calloc(n, sizeof(*s->seq));
	s->blocks = calloc(n, sizeof(*s->blocks));
	s->sample = calloc(n, sizeof(*s->sample));
	s->out = calloc(n, sizeof(*s->out));
	s->top = calloc((size_t)n * (s->cfg.logprob_capacity ? s->cfg.logprob_capacity : 1),
			sizeof(*s->top));
	s->kv_tables = calloc((size_t)n * s->max_blocks_per_seq, sizeof(*s->kv_tables));
	s->score = calloc(n, sizeof(*s->score));
	s->score_rows = calloc(n, sizeof(*s->score_rows));
	s->verify = calloc(n, sizeof(*s->verify));
	s->hidden = calloc(n, sizeof(*s->hidden));
	s->hidden_rows = calloc(n, sizeof(*s->hidden_rows));
	if (!s->running || !s->free_seqs || !s->users || !s->rows || !s->row_fork || !s->lens ||
	    !s->pos || !s->seq || !s->blocks || !s->sample || !s->out || !s->top || !s->kv_tables ||
	    !s->score || !s->score_rows || !s->verify || !s->hidden || !s->hidden_rows ||
	    alloc_verify(s) < 0 || alloc_embed(s) < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		s->out[i].top = s->top + (size_t)i * s->cfg.logprob_capacity;
	for (uint32_t i = 0; i < s->cfg.max_batch; i++)
		s->free_seqs[i] = s->cfg.max_batch - 1 - i;
	s->n_free_seqs = s->cfg.max_batch;
	return alloc_forks(s);
}

struct bn_sched *bn_sched_create(const struct bn_backend_ops *ops,
				 const struct bn_model_desc *model,
				 const struct bn_sched_config *cfg, const struct bn_reply *reply)
{
	struct bn_sched *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->ops = ops;
	s->reply = reply;
	s->cfg = *cfg;
	s->admitting = 1;
	if (s->cfg.draft_tokens == 0 || s->cfg.draft_tokens > BN_DRAFT_MAX_TOKENS)
		s->cfg.draft_tokens = s->cfg.draft_tokens ? BN_DRAFT_MAX_TOKENS : 4;
	s->model = *model;
	s->attn_positions = model->attn_positions_per_token;
	s->mask_words = bn_sample_mask_words(model->vocab_size);
	/* The block tables' width depends only on the context and the block size. */
	s->kv.block_tokens = s->cfg.kv_block_tokens;
	s->max_blocks_per_seq = bn_kvpool_blocks_for(&s->kv, s->cfg.context_length);
	s->kv.block_tokens = 0;
	if (alloc_buffers(s) < 0) {
		bn_sched_free(s);
		return NULL;
	}
	return s;
}

static uint64_t kv_need_blocks(const struct bn_sched *s, struct bn_req *r);

/* What becomes of a waiting request: BN_STATUS_NONE, it waits on; else it ends with that
 * status and *error. */
typedef uint32_t (*waiting_verdict)(struct bn_sched *s, struct bn_req *r, uint64_t now,
				    uint32_t *error);

/* Ends the waiting requests of tenants[0..n) the verdict ends; the others keep their order. */
static void end_waiting_where(struct bn_sched *s, struct bn_tenant **tenants, uint32_t n,
			      waiting_verdict verdict, uint64_t now)
{
	for (uint32_t k = 0; k < n; k++) {
		struct bn_tenant *t = tenants[k];
		struct bn_req **link = &t->wait_head, *prev = NULL;
		while (*link) {
			struct bn_req *r = *link;
			uint32_t error = 0, status = verdict(s, r, now, &error);
			if (status == BN_STATUS_NONE) {
				prev = r;
				link = &r->next;
				continue;
			}
			*link = r->next;
			if (t->wait_tail == r)
				t->wait_tail = prev;
			t->n_waiting--;
			s->n_waiting--;
			s->reply->finish(r, status, error);
		}
	}
}

static uint64_t kv_need_blocks(const struct bn_sched *s, struct bn_req *r);

/* A request that can never fit the pool just sized (checked at enqueue while the scheduler
 * had no pool) ends with BN_E_KV_SPACE. */
static uint32_t unfitting(struct bn_sched *s, struct bn_req *r, uint64_t now, uint32_t *error)
{
	(void)now;
	if (kv_need_blocks(s, r) <= s->kv.n_blocks)
		return BN_STATUS_NONE;
	*error = BN_E_KV_SPACE;
	return BN_STATUS_ERROR;
}

int bn_sched_attach(struct bn_sched *s, void *backend, const struct bn_model_desc *model,
		    struct bn_tenant **tenants, uint32_t n_tenants)
{
	s->backend = backend;
	s->model = *model;
	s->attn_positions = model->attn_positions_per_token;
	int rc = size_kv_pool(s, model);
	if (rc < 0) {
		bn_kv_ledger_leave(&s->kv);
		bn_kvpool_free(&s->kv);
		memset(&s->kv, 0, sizeof(s->kv));
		s->backend = NULL;
		return rc;
	}
	end_waiting_where(s, tenants, n_tenants, unfitting, 0);
	return 0;
}

void bn_sched_detach(struct bn_sched *s)
{
	bn_kv_ledger_leave(&s->kv);
	bn_kvpool_free(&s->kv);
	memset(&s->kv, 0, sizeof(s->kv));
	s->backend = NULL;
}

int bn_sched_attached(const struct bn_sched *s)
{
	return s->backend != NULL;
}

void bn_sched_set_admitting(struct bn_sched *s, int on)
{
	s->admitting = on != 0;
}

uint64_t bn_sched_kv_bytes(const struct bn_sched *s)
{
	if (s->kv.ledger && s->kv.ledger->summed)
		return s->kv.share_bytes + s->kv_slack;
	uint64_t bpt = s->model.kv_bytes_per_token ? s->model.kv_bytes_per_token : 1;
	return (uint64_t)s->kv.n_blocks * s->kv.block_tokens * bpt + s->kv_slack;
}

struct bn_sched *bn_sched_new(const struct bn_backend_ops *ops, void *backend,
			      const struct bn_model_desc *model, const struct bn_sched_config *cfg,
			      const struct bn_reply *reply)
{
	struct bn_sched *s = bn_sched_create(ops, model, cfg, reply);
	if (s && bn_sched_attach(s, backend, model, NULL, 0) < 0) {
		bn_sched_free(s);
		return NULL;
	}
	return s;
}

void bn_sched_free(struct bn_sched *s)
{
	if (!s)
		return;
	bn_kv_ledger_leave(&s->kv);
	bn_kvpool_free(&s->kv);
	free(s->kv_tables);
	free(s->running);
	free(s->free_seqs);
	bn_sched_users_free(s->own_users);
	free(s->tokens);
	free(s->rows);
	free(s->row_fork);
	free(s->forks);
	free(s->free_forks);
	free(s->lens);
	free(s->pos);
	free(s->seq);
	free(s->blocks);
	free(s->sample);
	free(s->out);
	free(s->top);
	free(s->score);
	free(s->score_rows);
	free(s->score_out);
	free(s->score_top);
	free(s->verify);
	free(s->verify_out);
	free(s->verify_top);
	free(s->hidden);
	free(s->hidden_rows);
	free(s->hidden_out);
	free(s->embed_acc);
	free(s->embed_vec);
	free(s);
}

/* Every block the request can ever hold in the KV cache at once: a generation's prompt and
 * output; a classify request's prefix and max_forks forks of its longest label, where
 * max_forks is set here: as many labels at once as fork ids and the pool allow (0 when not
 * even one fits: the request never can). */
static uint64_t kv_need_blocks(const struct bn_sched *s, struct bn_req *r)
{
	if (r->op != BN_OP_CLASSIFY)
		return bn_kvpool_blocks_for(&s->kv, (uint64_t)r->n_prompt + r->max_tokens);
	uint64_t prefix = bn_kvpool_blocks_for(&s->kv, fork_start(r));
	uint64_t per_fork = sched_fork_own_blocks(s, r, r->longest_label);
	uint64_t room = s->kv.n_blocks > prefix ? (s->kv.n_blocks - prefix) / per_fork : 0;
	uint32_t forks = r->n_labels < s->cfg.fork_seqs ? r->n_labels : s->cfg.fork_seqs;
	r->max_forks = room < forks ? (uint32_t)room : forks;
	return prefix + (uint64_t)(r->max_forks ? r->max_forks : 1) * per_fork;
}

void bn_sched_enqueue(struct bn_sched *s, struct bn_req *r)
{
	if (s->backend && kv_need_blocks(s, r) > s->kv.n_blocks) {
		s->reply->finish(r, BN_STATUS_ERROR, BN_E_KV_SPACE);
		return;
	}
	struct bn_tenant *t = r->tenant;
	r->next = NULL;
	if (t->wait_tail)
		t->wait_tail->next = r;
	else
		t->wait_head = r;
	t->wait_tail = r;
	t->n_waiting++;
	s->n_waiting++;
}

static struct bn_req *dequeue(struct bn_sched *s, struct bn_tenant *t)
{
	struct bn_req *r = t->wait_head;
	if (!r)
		return NULL;
	t->wait_head = r->next;
	if (!t->wait_head)
		t->wait_tail = NULL;
	r->next = NULL;
	t->n_waiting--;
	s->n_waiting--;
	return r;
}

/* ------------------------------------------------------------------------------------------ */
/* Admission: weighted round-robin over tenants                                               */
/* ------------------------------------------------------------------------------------------ */

static uint32_t cap_or_max(uint32_t cap, uint32_t max_batch)
{
	return cap ? cap : max_batch;
}

/* The session and its user are below their caps on running sequences. */
static int under_caps(struct bn_sched *s, const struct bn_tenant *t)
{
	if (t->n_running >= cap_or_max(s->cfg.max_running_per_session, s->cfg.max_batch))
		return 0;
	return sched_user_running(s, t->uid) < cap_or_max(s->cfg.max_running_per_user,
							     s->cfg.max_batch);
}

/* Blocks of the prompt the cache may give: the full ones before its last token, which is
 * read again (a generation needs its logits, a last-token embedding its hidden state; a
 * classify request's forks start there). A score request needs every position's logits, a
 * mean or cls embedding position 0 on: none (sched_may_hit). */
static uint32_t cacheable_blocks(const struct bn_sched *s, const struct bn_req *r)
{
	if (!s->kv.cache || !sched_may_hit(s, r))
		return 0;
	return (r->n_prompt - 1) / s->kv.block_tokens;
}

/* Reserves what r needs, its prompt's cached blocks taken first (they need no reservation,
 * but a parked one taken leaves the pool as a reserved one would). Returns the blocks taken,
 * or UINT32_MAX when r does not fit now (nothing taken). */
static uint32_t take_cached_prefix(struct bn_sched *s, struct bn_req *r)
{
	uint32_t need = (uint32_t)kv_need_blocks(s, r), max = cacheable_blocks(s, r), hit = 0;
	if (max)
		hit = bn_prefix_cache_lookup(s->kv.cache, sched_share_scope(s, r), r->prompt, max,
					     r->kv.table);
	uint32_t parked = bn_kvpool_parked_among(&s->kv, r->kv.table, hit);
	if ((uint64_t)need - hit + parked > bn_kvpool_available(&s->kv))
		return UINT32_MAX;
	bn_kvpool_take_cached(&s->kv, &r->kv, r->kv.table, hit);
	(void)bn_kvpool_reserve_blocks(&s->kv, &r->kv, need); /* fits: checked above */
	bn_stats.prefix_lookup_tokens += (uint64_t)max * s->kv.block_tokens;
	bn_stats.prefix_hit_tokens += (uint64_t)hit * s->kv.block_tokens;
	return hit;
}

enum admit_stop {
	STOP_TURN_OVER,  /* the session's credit, queue or cap is spent: next session */
	STOP_BATCH_FULL, /* the batch is full: the session keeps its turn for the next step */
	STOP_KV_FULL,    /* its oldest request does not fit the KV pool: everyone waits */
};

/* Takes requests from the session's FIFO while its turn's credit lasts. *taken counts them.  */
static enum admit_stop admit_from(struct bn_sched *s, struct bn_tenant *t, uint32_t *taken)
{
	while (t->credit > 0) {
		if (s->n_running >= s->cfg.max_batch)
			return STOP_BATCH_FULL;
		struct bn_req *r = t->wait_head;
		if (!r || !under_caps(s, t))
			return STOP_TURN_OVER;
		if (s->reply->cancel_requested(r)) {
			s->reply->finish(dequeue(s, t), BN_STATUS_CANCELLED, 0);
			continue;
		}
		r->kv = (struct bn_kv_seq){ .table = s->kv_tables + (size_t)s->free_seqs[s->n_free_seqs - 1] *
							       s->max_blocks_per_seq };
		/* The oldest request that does not fit holds everyone back: otherwise a stream of
		 * small requests could keep a large one waiting for ever. */
		uint32_t cached = take_cached_prefix(s, r);
		if (cached == UINT32_MAX)
			return STOP_KV_FULL;
		sched_start_running(s, dequeue(s, t), cached * s->kv.block_tokens);
		t->credit--;
		(*taken)++;
	}
	return STOP_TURN_OVER;
}

/* Weighted round-robin: the session at the cursor admits up to its weight, then the turn
 * passes on. A turn cut short by a full batch resumes at the next step, so weights hold even
 * when only one sequence can join per step. */
static void admit(struct bn_sched *s, struct bn_tenant **tenants, uint32_t n_tenants)
{
	s->kv.wanting = 0; /* set again below while the oldest waiting request does not fit */
	if (n_tenants == 0)
		return;
	uint32_t idle_turns = 0;
	while (s->n_running < s->cfg.max_batch && s->n_waiting > 0 && idle_turns < n_tenants) {
		uint32_t i = s->rr_cursor % n_tenants, taken = 0;
		struct bn_tenant *t = tenants[i];
		enum admit_stop why = STOP_TURN_OVER;
		if (t->admitting) {
			if (t->credit == 0)
				t->credit = t->weight;
			why = admit_from(s, t, &taken);
		}
		s->kv.wanting = why == STOP_KV_FULL;
		if (why == STOP_KV_FULL || why == STOP_BATCH_FULL)
			return;
		t->credit = 0;
		s->rr_cursor = (i + 1) % n_tenants;
		idle_turns = taken ? 0 : idle_turns + 1;
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Cancellation and deadlines                                                                 */
/* ------------------------------------------------------------------------------------------ */

static int expired(const struct bn_req *r, uint64_t now)
{
	return r->deadline && now >= r->deadline;
}

static void sweep_running(struct bn_sched *s, uint64_t now)
{
	for (uint32_t i = 0; i < s->n_running;) {
		struct bn_req *r = s->running[i];
		if (s->reply->cancel_requested(r))
			sched_finish_running(s, i, BN_STATUS_CANCELLED, 0); /* moved last into i */
		else if (expired(r, now))
			sched_finish_running(s, i, BN_STATUS_DEADLINE, 0);
		else
			i++;
	}
}

/* A waiting request its client cancelled, or whose deadline passed. */
static uint32_t cancelled_or_expired(struct bn_sched *s, struct bn_req *r, uint64_t now,
				     uint32_t *error)
{
	(void)error;
	return s->reply->cancel_requested(r) ? BN_STATUS_CANCELLED
	       : expired(r, now)	      ? BN_STATUS_DEADLINE
					      : BN_STATUS_NONE;
}

/* Waiting requests may wait long when the batch is full, and reading their cancel words costs
 * a cache miss each, so they are checked at most once a millisecond rather than every step. */
static void sweep_waiting(struct bn_sched *s, struct bn_tenant **tenants, uint32_t n,
			  uint64_t now)
{
	if (s->n_waiting == 0 || now - s->last_waiting_sweep < 1000000u)
		return;
	s->last_waiting_sweep = now;
	end_waiting_where(s, tenants, n, cancelled_or_expired, now);
}

/* ------------------------------------------------------------------------------------------ */
/* One step                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static void count_batch(const struct bn_batch *b, uint64_t step_ns)
{
	uint64_t used = 0;
	for (uint32_t i = 0; i < b->n_rows; i++)
		used += b->lens[i];
	bn_stats.steps++;
	bn_stats.batch_rows += b->n_rows;
	bn_stats.batch_cells += (uint64_t)b->n_rows * b->width;
	bn_stats.batch_padding += (uint64_t)b->n_rows * b->width - used;
	bn_stats_observe(BN_HIST_BATCH_ROWS, b->n_rows);
	bn_stats_observe(BN_HIST_BATCH_TOKENS, (double)used);
	bn_stats_observe(BN_HIST_STEP_SECONDS, (double)step_ns * 1e-9);
}

static void mark_started(struct bn_sched *s, uint32_t n_rows, uint64_t now)
{
	for (uint32_t k = 0; k < n_rows; k++) {
		struct bn_req *r = s->rows[k];
		if (!r->t_started) {
			r->t_started = now;
			bn_stats_observe(BN_HIST_QUEUE_SECONDS, (double)(now - r->t_seen) * 1e-9);
		}
	}
}

uint32_t bn_sched_step_begin(struct bn_sched *s, struct bn_tenant **tenants, uint32_t n_tenants)
{
	uint64_t now = bn_now_ns();
	s->step_rows = 0;
	sweep_running(s, now);
	sweep_waiting(s, tenants, n_tenants, now);
	if (!s->backend)
		return 0;
	if (s->admitting)
		admit(s, tenants, n_tenants);
	else
		s->kv.wanting = 0; /* it yields or drains: it asks other pools for nothing */
	if (s->n_running == 0)
		return 0;
	uint32_t n_rows = sched_plan(s);
	mark_started(s, n_rows, now);
	sched_grammar_plan(s, n_rows);
	s->step_rc = sched_build_batch(s, n_rows, &s->step_batch);
	s->step_ns = 0;
	s->step_rows = n_rows;
	return n_rows;
}

void bn_sched_step_run(struct bn_sched *s)
{
	if (!s->step_rows || s->step_rc != 0)
		return;
	uint64_t t0 = bn_now_ns();
	s->step_rc = s->ops->step(s->backend, &s->step_batch, s->out);
	s->step_ns = bn_now_ns() - t0;
}

uint32_t bn_sched_step_end(struct bn_sched *s)
{
	uint32_t n_rows = s->step_rows;
	if (!n_rows)
		return 0;
	s->step_rows = 0;
	if (s->step_rc < 0) {
		sched_fail_all_running(s, s->step_rc);
		return n_rows;
	}
	count_batch(&s->step_batch, s->step_ns);
	sched_identify_step(s, n_rows);
	sched_deliver_all(s, n_rows);
	return n_rows;
}

uint32_t bn_sched_step(struct bn_sched *s, struct bn_tenant **tenants, uint32_t n_tenants)
{
	if (!bn_sched_step_begin(s, tenants, n_tenants))
		return 0;
	bn_sched_step_run(s);
	return bn_sched_step_end(s);
}


/* ------------------------------------------------------------------------------------------ */
/* Ending many at once                                                                        */
/* ------------------------------------------------------------------------------------------ */

void bn_sched_drop_tenant(struct bn_sched *s, struct bn_tenant *t, uint32_t status,
			  uint32_t error)
{
	for (uint32_t i = 0; i < s->n_running;) {
		struct bn_req *r = s->running[i];
		if (r->tenant != t) {
			i++;
			continue;
		}
		sched_stop_running(s, i);
		if (status)
			s->reply->finish(r, status, error);
	}
	struct bn_req *r;
	while ((r = dequeue(s, t)) != NULL)
		if (status)
			s->reply->finish(r, status, error);
}

void bn_sched_end_waiting(struct bn_sched *s, struct bn_tenant **tenants, uint32_t n_tenants,
			  uint32_t status)
{
	bn_sched_end_waiting_error(s, tenants, n_tenants, status, 0);
}

void bn_sched_end_waiting_error(struct bn_sched *s, struct bn_tenant **tenants,
				uint32_t n_tenants, uint32_t status, uint32_t error)
{
	for (uint32_t k = 0; k < n_tenants; k++) {
		struct bn_req *r;
		while ((r = dequeue(s, tenants[k])) != NULL)
			s->reply->finish(r, status, error);
	}
}

void bn_sched_end_running(struct bn_sched *s, uint32_t status)
{
	bn_sched_end_running_error(s, status, 0);
}

void bn_sched_end_running_error(struct bn_sched *s, uint32_t status, uint32_t error)
{
	while (s->n_running)
		sched_finish_running(s, 0, status, error);
}
