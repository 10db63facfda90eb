/* SPDX-License-Identifier: MIT */
#include "sched.h"

#include "bitnet_barrier.h"
#include "common/clock.h"
#include "kvpool.h"
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

struct bn_sched {
	const struct bn_backend_ops *ops;
	void *backend;
	const struct bn_reply *reply; /* how tokens, scores and ends reach the clients */
	struct bn_sched_config cfg;
	struct bn_kvpool kv;
	uint32_t *kv_tables;      /* [max_batch + fork_seqs][max_blocks_per_seq], by sequence id */
	uint32_t max_blocks_per_seq;
	struct bn_req **running;  /* [max_batch], dense */
	uint32_t n_running;
	uint32_t n_waiting;       /* over all tenants */
	uint32_t *free_seqs;      /* stack of unused backend sequence ids */
	uint32_t n_free_seqs;
	struct uid_count *uids;   /* [max_batch], dense */
	uint32_t n_uids;
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
};

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
/* Set-up                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static uint64_t default_kv_memory(const struct bn_sched_config *c, const struct bn_model_desc *model,
				  uint64_t bytes_per_token)
{
	uint64_t want = (uint64_t)c->max_batch * c->context_length * bytes_per_token;
	if (model->kv_bytes_free) /* a device with its own memory: what it has left */
		return want < model->kv_bytes_free ? want : model->kv_bytes_free;
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t cap = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page /
						       KV_DEFAULT_MEMORY_SHARE
					     : want;
	return want < cap ? want : cap;
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
	s->max_blocks_per_seq = bn_kvpool_blocks_for(&s->kv, c->context_length);
	int rc = s->ops->kv_init(s->backend, (uint32_t)blocks, c->kv_block_tokens);
	if (rc < 0) {
		bn_log_error("msg=\"cannot allocate the KV cache\" blocks=%llu bytes=%llu rc=%d",
			     (unsigned long long)blocks,
			     (unsigned long long)(blocks * c->kv_block_tokens * bpt), rc);
		return rc;
	}
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

static int alloc_buffers(struct bn_sched *s)
{
	uint32_t n = s->max_rows = s->cfg.max_batch + s->cfg.fork_seqs;
	s->running = calloc(s->cfg.max_batch, sizeof(*s->running));
	s->free_seqs = calloc(s->cfg.max_batch, sizeof(*s->free_seqs));
	s->uids = calloc(s->cfg.max_batch, sizeof(*s->uids));
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
	if (!s->running || !s->free_seqs || !s->uids || !s->rows || !s->row_fork || !s->lens ||
	    !s->pos || !s->seq || !s->blocks || !s->sample || !s->out || !s->top || !s->kv_tables ||
	    !s->score || !s->score_rows)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		s->out[i].top = s->top + (size_t)i * s->cfg.logprob_capacity;
	for (uint32_t i = 0; i < s->cfg.max_batch; i++)
		s->free_seqs[i] = s->cfg.max_batch - 1 - i;
	s->n_free_seqs = s->cfg.max_batch;
	return alloc_forks(s);
}

struct bn_sched *bn_sched_new(const struct bn_backend_ops *ops, void *backend,
			      const struct bn_model_desc *model, const struct bn_sched_config *cfg,
			      const struct bn_reply *reply)
{
	struct bn_sched *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->ops = ops;
	s->backend = backend;
	s->reply = reply;
	s->cfg = *cfg;
	s->attn_positions = model->attn_positions_per_token;
	if (size_kv_pool(s, model) < 0 || alloc_buffers(s) < 0) {
		bn_sched_free(s);
		return NULL;
	}
	return s;
}

void bn_sched_free(struct bn_sched *s)
{
	if (!s)
		return;
	bn_kvpool_free(&s->kv);
	free(s->kv_tables);
	free(s->running);
	free(s->free_seqs);
	free(s->uids);
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
	free(s);
}

/* ------------------------------------------------------------------------------------------ */
/* Queues                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* A classify request's forks continue the prefix from its last token: they share the
 * prefix's blocks before that position and copy the partial one. */
static uint32_t fork_start(const struct bn_req *r)
{
	return r->n_prompt - 1;
}

/* The blocks a fork of a label of len tokens holds that are its own. */
static uint32_t fork_own_blocks(const struct bn_sched *s, const struct bn_req *r, uint32_t len)
{
	return bn_kvpool_blocks_for(&s->kv, (uint64_t)fork_start(r) + len) -
	       fork_start(r) / s->kv.block_tokens;
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
	uint64_t per_fork = fork_own_blocks(s, r, r->longest_label);
	uint64_t room = s->kv.n_blocks > prefix ? (s->kv.n_blocks - prefix) / per_fork : 0;
	uint32_t forks = r->n_labels < s->cfg.fork_seqs ? r->n_labels : s->cfg.fork_seqs;
	r->max_forks = room < forks ? (uint32_t)room : forks;
	return prefix + (uint64_t)(r->max_forks ? r->max_forks : 1) * per_fork;
}

void bn_sched_enqueue(struct bn_sched *s, struct bn_req *r)
{
	if (kv_need_blocks(s, r) > s->kv.n_blocks) {
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
static void end_fork(struct bn_sched *s, struct fork *f)
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
			end_fork(s, &s->forks[i]);
}

/* Leaves the running set: KV blocks back to the pool, the backend sequence id reused. */
static void stop_running(struct bn_sched *s, uint32_t index)
{
	struct bn_req *r = s->running[index];
	end_forks_of(s, r);
	s->ops->seq_close(s->backend, r->seq);
	bn_kvpool_release(&s->kv, &r->kv);
	s->free_seqs[s->n_free_seqs++] = r->seq;
	r->running = 0;
	r->tenant->n_running--;
	uid_remove(s, r->tenant->uid);
	s->running[index] = s->running[--s->n_running];
}

static uint32_t running_index(const struct bn_sched *s, const struct bn_req *r)
{
	for (uint32_t i = 0; i < s->n_running; i++)
		if (s->running[i] == r)
			return i;
	return UINT32_MAX;
}

static void finish_running(struct bn_sched *s, uint32_t index, uint32_t status, uint32_t error)
{
	struct bn_req *r = s->running[index];
	stop_running(s, index);
	s->reply->finish(r, status, error);
}

/* ------------------------------------------------------------------------------------------ */
/* Admission: weighted round-robin over sessions                                               */
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
	const struct uid_count *u = uid_entry(s, t->uid);
	return !u || u->n < cap_or_max(s->cfg.max_running_per_user, s->cfg.max_batch);
}

/* r starts in a sequence that already holds positions [0, start) (its cached blocks). */
static void start_running(struct bn_sched *s, struct bn_req *r, uint32_t start)
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
	r->tenant->n_running++;
	uid_add(s, r->tenant->uid);
	s->running[s->n_running++] = r;
}

/* Whose blocks a request may share. */
static uint64_t share_scope(const struct bn_sched *s, const struct bn_req *r)
{
	switch (s->cfg.prefix_cache) {
	case BN_SHARE_UID: return 1ull << 32 | r->tenant->uid;
	case BN_SHARE_SESSION: return 2ull << 32 | r->tenant->id;
	default: return 0;
	}
}

/* Blocks of the prompt the cache may give: the full ones before its last token, which is
 * read again (a generation needs its logits; a classify request's forks start there). A score
 * request needs every position's logits: none. */
static uint32_t cacheable_blocks(const struct bn_sched *s, const struct bn_req *r)
{
	if (!s->kv.cache || r->op == BN_OP_SCORE)
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
		hit = bn_prefix_cache_lookup(s->kv.cache, share_scope(s, r), r->prompt, max,
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

/* Takes requests from the session's FIFO while its turn's credit lasts. *taken counts them. */
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
		start_running(s, dequeue(s, t), cached * s->kv.block_tokens);
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
		if (why == STOP_KV_FULL || why == STOP_BATCH_FULL)
			return;
		t->credit = 0;
		s->rr_cursor = (i + 1) % n_tenants;
		idle_turns = taken ? 0 : idle_turns + 1;
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Cancellation and deadlines                                                                  */
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
			finish_running(s, i, BN_STATUS_CANCELLED, 0); /* moved last into i */
		else if (expired(r, now))
			finish_running(s, i, BN_STATUS_DEADLINE, 0);
		else
			i++;
	}
}

/* Waiting requests may wait long when the batch is full, and reading their cancel words costs
 * a cache miss each, so they are checked at most once a millisecond rather than every step. */
static void sweep_waiting(struct bn_sched *s, struct bn_tenant **tenants, uint32_t n,
			  uint64_t now)
{
	if (s->n_waiting == 0 || now - s->last_waiting_sweep < 1000000u)
		return;
	s->last_waiting_sweep = now;
	for (uint32_t k = 0; k < n; k++) {
		struct bn_tenant *t = tenants[k];
		struct bn_req **link = &t->wait_head, *prev = NULL;
		while (*link) {
			struct bn_req *r = *link;
			uint32_t status = s->reply->cancel_requested(r) ? BN_STATUS_CANCELLED
				       : expired(r, now)	    ? BN_STATUS_DEADLINE
								    : BN_STATUS_NONE;
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
			s->reply->finish(r, status, 0);
		}
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Planning one step                                                                           */
/* ------------------------------------------------------------------------------------------ */

/* The positions a request reads as prompt chunks: a classify request's prefix but its last
 * token, which each fork reads again (fork_start). */
static uint32_t prefill_end(const struct bn_req *r)
{
	return r->op == BN_OP_CLASSIFY ? fork_start(r) : r->n_prompt;
}

static int prompt_done(const struct bn_req *r)
{
	return r->n_prefilled == prefill_end(r);
}

/* It has its prompt and generates a token a step. */
static int decoding(const struct bn_req *r)
{
	return r->op == BN_OP_GENERATE && prompt_done(r);
}

/* A classify request whose prefix is read: its labels are what is left. */
static int reading_labels(const struct bn_req *r)
{
	return r->op == BN_OP_CLASSIFY && prompt_done(r);
}

static int planned(const struct bn_sched *s, const struct bn_req *r)
{
	return r->planned_in == s->plans;
}

/* A session's decode rows in the step being planned (marked like planned(), so no session
 * needs resetting before a step). */
static void count_decode_row(const struct bn_sched *s, struct bn_tenant *t)
{
	if (t->decode_rows_in != s->plans) {
		t->decode_rows_in = s->plans;
		t->step_decode_rows = 0;
	}
	t->step_decode_rows++;
}

static uint32_t decode_rows(const struct bn_sched *s, const struct bn_tenant *t)
{
	return t->decode_rows_in == s->plans ? t->step_decode_rows : 0;
}

/* The next prompt to read from: among running requests still reading their prompt and not
 * in the batch yet, the one whose session decodes the fewest sequences in this step
 * (step_decode_rows), the earliest admitted on a tie; NULL when none. So a session with many
 * decoding sequences cannot keep another's prompt waiting behind its own, while prompts of
 * equally served sessions (one request each, say) are still read oldest first, each to its
 * end, rather than all a little at a time. */
static struct bn_req *next_prefill(struct bn_sched *s)
{
	struct bn_req *best = NULL;
	uint32_t best_rows = 0;
	for (uint32_t i = 0; i < s->n_running; i++) {
		struct bn_req *r = s->running[i];
		if (decoding(r) || planned(s, r))
			continue;
		uint32_t rows = decode_rows(s, r->tenant);
		if (!best || rows < best_rows || (rows == best_rows && r->admitted < best->admitted)) {
			best = r;
			best_rows = rows;
		}
	}
	return best;
}

/* Row k wants no token but the log-probabilities of targets at its first n_targets tokens. */
static void set_score_row(struct bn_sched *s, uint32_t k, const uint32_t *targets,
			  uint32_t n_targets, uint32_t n_top)
{
	s->score_rows[k] = (struct bn_score_row){ .targets = targets, .n_targets = n_targets,
						  .n_top = n_top };
	s->score[k] = &s->score_rows[k];
	s->sample[k] = NULL;
	s->n_score_rows++;
}

/* A score request's chunk: each new token's next token is its target; the text's last token
 * has none. */
static void plan_score_row(struct bn_sched *s, uint32_t k, struct bn_req *r, uint32_t len)
{
	uint32_t end = r->n_prefilled + len;
	set_score_row(s, k, r->prompt + r->n_prefilled + 1, end == r->n_prompt ? len - 1 : len,
		      r->sampling.n_logprobs);
}

static void plan_row(struct bn_sched *s, uint32_t k, struct bn_req *r, uint32_t len)
{
	r->planned_in = s->plans;
	s->rows[k] = r;
	s->row_fork[k] = NULL;
	s->lens[k] = len;
	s->seq[k] = r->seq;
	s->blocks[k] = r->kv.table;
	s->score[k] = NULL;
	if (r->op == BN_OP_SCORE) {
		s->pos[k] = r->n_prefilled;
		plan_score_row(s, k, r, len);
	} else if (decoding(r)) {
		s->pos[k] = r->n_prompt + r->n_out - 1;
		s->sample[k] = &r->sample_ctx;
	} else {
		s->pos[k] = r->n_prefilled;
		s->sample[k] = r->op == BN_OP_GENERATE && r->n_prefilled + len == r->n_prompt
				       ? &r->sample_ctx : NULL;
	}
}

/* Budget units: with attention weighed (attn_positions A > 0) a token at position p costs
 * A + p units and a step may spend token_budget x A; otherwise every token costs 1. */
static uint64_t token_cost(uint32_t attn_positions, uint64_t pos)
{
	return attn_positions ? attn_positions + pos : 1;
}

/* The most tokens from position pos (at most max_tokens) whose costs fit in *units, which
 * they are taken from. */
static uint32_t take_chunk(uint32_t attn_positions, uint32_t pos, uint32_t max_tokens,
			   uint64_t *units)
{
	uint32_t n = 0;
	while (n < max_tokens) {
		uint64_t cost = token_cost(attn_positions, (uint64_t)pos + n);
		if (cost > *units)
			break;
		*units -= cost;
		n++;
	}
	return n;
}

uint32_t bn_sched_chunk_tokens(uint32_t attn_positions, uint32_t pos, uint32_t max_tokens,
			       uint64_t units)
{
	return take_chunk(attn_positions, pos, max_tokens, &units);
}

/* A fork's chunk: its tokens at positions fork_start + done, each scored against the label
 * token that follows it. */
static void plan_fork_row(struct bn_sched *s, uint32_t k, struct fork *f, uint32_t len)
{
	struct bn_req *r = f->owner;
	s->rows[k] = r;
	s->row_fork[k] = f;
	s->lens[k] = len;
	s->pos[k] = fork_start(r) + f->done;
	s->seq[k] = f->seq;
	s->blocks[k] = f->kv.table;
	set_score_row(s, k, r->labels + f->at + f->done, len, 0);
}

/* The next label of r starts in a fork: the prefix's full blocks shared, its partial block
 * copied, the label's own blocks lent from r's reservation. 0 or the backend's error. */
static int start_fork(struct bn_sched *s, struct bn_req *r)
{
	struct fork *f = &s->forks[s->free_forks[--s->n_free_forks]];
	uint32_t len = r->label_len[r->next_label], start = fork_start(r);
	uint32_t full = start / s->kv.block_tokens, part = start % s->kv.block_tokens;
	f->owner = r;
	r->n_forks++;
	bn_kvpool_share(&s->kv, &f->kv, &r->kv, full);
	bn_kvpool_lend(&r->kv, &f->kv, fork_own_blocks(s, r, len));
	uint32_t dst = 0, src = 0;
	if (part) {
		(void)bn_kvpool_grow(&s->kv, &f->kv, start); /* within what was just lent */
		dst = f->kv.table[full];
		src = r->kv.table[full];
	}
	int rc = s->ops->seq_fork(s->backend, f->seq, start, dst, src, part);
	if (rc < 0) {
		end_fork(s, f);
		return rc;
	}
	f->label = r->next_label++;
	f->at = r->next_label_at;
	f->done = 0;
	r->next_label_at += len;
	return 0;
}

/* Chunks of r's forks within the budget, starting labels while it may run more; the first
 * gets a token even past the budget when `force`. A fork the backend cannot start ends r
 * (BN_E_BACKEND) before any row of it is planned. */
static void plan_forks(struct bn_sched *s, struct bn_req *r, uint32_t *n, uint64_t *left,
		       int force)
{
	r->planned_in = s->plans;
	while (r->next_label < r->n_labels && r->n_forks < r->max_forks && s->n_free_forks) {
		if (start_fork(s, r) < 0) {
			finish_running(s, running_index(s, r), BN_STATUS_ERROR, BN_E_BACKEND);
			return;
		}
	}
	for (uint32_t i = 0; i < s->cfg.fork_seqs; i++) {
		struct fork *f = &s->forks[i];
		if (f->owner != r)
			continue;
		uint32_t rest = r->label_len[f->label] - f->done;
		uint32_t chunk = take_chunk(s->attn_positions, fork_start(r) + f->done, rest, left);
		if (chunk == 0 && force) {
			chunk = 1;
			*left = 0;
		}
		if (chunk == 0)
			break;
		force = 0;
		plan_fork_row(s, (*n)++, f, chunk);
	}
}

/* Decode rows first, then prompt chunks (next_prefill: the session decoding the fewest
 * sequences first, then oldest) within the step's budget (counted in work, see token_cost).
 * When decoding leaves less than a quarter of the budget, prompts still get that quarter, and
 * the first prompt at least one token. The oldest prompt reads at least one token every step
 * even when others took the budget (a session that never decodes, sending prompt after
 * prompt, would otherwise always go first), so every admitted prompt progresses. Returns the
 * number of rows. */
static uint32_t plan(struct bn_sched *s)
{
	s->n_score_rows = 0;
	uint32_t n = 0, a = s->attn_positions;
	uint64_t budget = (uint64_t)s->cfg.token_budget * (a ? a : 1), used = 0;
	s->plans++; /* planned() is true from here for the requests plan_row marks */
	struct bn_req *r, *oldest = NULL; /* the earliest admitted prompt still being read */
	for (uint32_t i = 0; i < s->n_running; i++) {
		r = s->running[i];
		if (decoding(r)) {
			plan_row(s, n++, r, 1);
			used += token_cost(a, r->n_prompt + r->n_out - 1);
			count_decode_row(s, r->tenant);
		} else if (!oldest || r->admitted < oldest->admitted) {
			oldest = r;
		}
	}
	uint64_t left = budget > used ? budget - used : 0;
	if (left < budget / 4)
		left = budget / 4;
	uint32_t n_decode = n;
	/* Past the budget only the first prompt may still come in (see above): no search then. */
	while ((left > 0 || n == n_decode) && (r = next_prefill(s)) != NULL) {
		if (reading_labels(r)) {
			plan_forks(s, r, &n, &left, n == n_decode);
			continue;
		}
		uint32_t rest = prefill_end(r) - r->n_prefilled;
		uint32_t chunk = take_chunk(a, r->n_prefilled, rest, &left);
		if (chunk == 0 && n == n_decode) {
			chunk = 1; /* it costs more than is left: nothing is left after it */
			left = 0;
		}
		if (chunk == 0)
			break;
		plan_row(s, n++, r, chunk);
	}
	if (oldest && !planned(s, oldest)) {
		if (reading_labels(oldest))
			plan_forks(s, oldest, &n, &left, 1);
		else
			plan_row(s, n++, oldest, 1);
	}
	return n;
}

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

/* Room for every scored position of the step's score rows, and each row's share of it. */
static int score_outputs(struct bn_sched *s, uint32_t n_rows)
{
	size_t need = 0;
	for (uint32_t k = 0; k < n_rows; k++)
		need += s->score[k] ? s->score[k]->n_targets : 0;
	uint32_t per = s->cfg.logprob_capacity ? s->cfg.logprob_capacity : 1;
	if (need > s->score_cap) {
		struct bn_sample_out *o = realloc(s->score_out, need * sizeof(*o));
		if (o)
			s->score_out = o;
		struct bn_token_logprob *t = realloc(s->score_top, need * per * sizeof(*t));
		if (t)
			s->score_top = t;
		if (!o || !t)
			return -ENOMEM;
		s->score_cap = need;
	}
	size_t at = 0;
	for (uint32_t k = 0; k < n_rows; k++) {
		if (!s->score[k])
			continue;
		s->score_rows[k].out = s->score_out + at;
		for (uint32_t j = 0; j < s->score_rows[k].n_targets; j++)
			s->score_out[at + j].top = s->score_top + (at + j) * per;
		at += s->score_rows[k].n_targets;
	}
	return 0;
}

/* Token i of a fork's row sequence: the prefix's last token, then the label's. */
static void fill_fork_row(const struct fork *f, uint32_t len, uint32_t *row)
{
	const struct bn_req *r = f->owner;
	for (uint32_t i = 0; i < len; i++) {
		uint32_t at = f->done + i;
		row[i] = at == 0 ? r->prompt[fork_start(r)] : r->labels[f->at + at - 1];
	}
}

/* Grows each row's block table over its new positions and fills the padded token matrix. */
static int build_batch(struct bn_sched *s, uint32_t n_rows, struct bn_batch *b)
{
	uint32_t width = 1;
	for (uint32_t k = 0; k < n_rows; k++) {
		struct bn_kv_seq *kv = s->row_fork[k] ? &s->row_fork[k]->kv : &s->rows[k]->kv;
		int rc = bn_kvpool_grow(&s->kv, kv, s->pos[k] + s->lens[k]);
		if (rc < 0)
			return rc; /* the reservation covers every position: a bug, reported */
		if (s->lens[k] > width)
			width = s->lens[k];
	}
	if (reserve_tokens(s, (size_t)n_rows * width) < 0 || score_outputs(s, n_rows) < 0)
		return -ENOMEM;
	for (uint32_t k = 0; k < n_rows; k++) {
		struct bn_req *r = s->rows[k];
		uint32_t *row = s->tokens + (size_t)k * width;
		if (s->row_fork[k])
			fill_fork_row(s->row_fork[k], s->lens[k], row);
		else if (decoding(r))
			row[0] = r->output[r->n_out - 1];
		else
			memcpy(row, r->prompt + r->n_prefilled, (size_t)s->lens[k] * sizeof(uint32_t));
	}
	*b = (struct bn_batch){ .n_rows = n_rows, .width = width, .tokens = s->tokens,
				.lens = s->lens, .pos = s->pos, .seq = s->seq,
				.blocks = s->blocks, .sample = s->sample,
				.score = s->n_score_rows ? s->score : NULL };
	return 0;
}

/* The token at position p of r's sequence: its prompt, then its output. */
static uint32_t token_at(const struct bn_req *r, uint32_t p)
{
	return p < r->n_prompt ? r->prompt[p] : r->output[p - r->n_prompt];
}

/* Every block of r the step filled gets its identity, so later prompts can find it. A block
 * whose parent has none (an equal block was cached first by another sequence) ends the
 * chain: nothing after it could be found. */
static void identify_blocks(struct bn_sched *s, struct bn_req *r, uint32_t end)
{
	/* --kv-block-tokens is at most 4096 (config.c). */
	uint32_t bt = s->kv.block_tokens, full = end / bt, tokens[4096];
	for (; r->n_identified < full; r->n_identified++) {
		uint32_t i = r->n_identified, block = r->kv.table[i];
		for (uint32_t k = 0; k < bt; k++)
			tokens[k] = token_at(r, i * bt + k);
		uint32_t parent = i ? r->kv.table[i - 1] : BN_NO_BLOCK;
		bn_prefix_cache_insert(s->kv.cache, block, parent, share_scope(s, r), tokens);
	}
}

static void identify_step(struct bn_sched *s, uint32_t n_rows)
{
	if (!s->kv.cache)
		return;
	for (uint32_t k = 0; k < n_rows; k++)
		if (!s->row_fork[k])
			identify_blocks(s, s->rows[k], s->pos[k] + s->lens[k]);
}

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

/* ------------------------------------------------------------------------------------------ */
/* Delivering one step's tokens                                                                */
/* ------------------------------------------------------------------------------------------ */

static int is_stop(const struct bn_req *r, uint32_t token)
{
	for (uint32_t i = 0; i < r->n_stop; i++)
		if (r->stop[i] == token)
			return 1;
	return 0;
}

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

static int is_eog(const struct bn_sched *s, uint32_t token)
{
	if (token == s->cfg.eos_id)
		return 1;
	for (uint32_t i = 0; i < s->cfg.n_eog; i++)
		if (s->cfg.eog[i] == token)
			return 1;
	return 0;
}

/* Applies one sampled token to its request; ends it on an end-of-generation id, a stop id or
 * max_tokens. */
static void deliver(struct bn_sched *s, struct bn_req *r, const struct bn_sample_out *o,
		    uint64_t now)
{
	observe_token(r, now);
	uint32_t status = BN_STATUS_NONE;
	if (is_eog(s, o->token) && !(r->flags & BN_REQ_IGNORE_EOS))
		status = BN_STATUS_EOS;
	else if (is_stop(r, o->token))
		status = BN_STATUS_STOP;
	if (status == BN_STATUS_NONE) {
		if (r->sampling.want_logprobs)
			s->reply->write_logprobs(r, r->n_out, o);
		if (s->reply->publish_token(r, o->token) < 0)
			status = BN_STATUS_ERROR; /* its text could not be decoded: no memory */
		else if (r->n_out == r->max_tokens)
			status = BN_STATUS_LENGTH;
	}
	if (status != BN_STATUS_NONE)
		finish_running(s, running_index(s, r), status,
			       status == BN_STATUS_ERROR ? BN_E_BACKEND : 0);
}

static void fail_all_running(struct bn_sched *s, int rc)
{
	bn_log_error("msg=\"backend step failed\" backend=%s rc=%d rows=%u", s->ops->name, rc,
		     s->n_running);
	while (s->n_running)
		finish_running(s, 0, BN_STATUS_ERROR, BN_E_BACKEND);
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

/* A score row's positions go to its slot; the chunk that reaches the text's end ends it. */
static void deliver_score(struct bn_sched *s, uint32_t k, struct bn_req *r)
{
	const struct bn_score_row *sr = s->score[k];
	for (uint32_t j = 0; j < sr->n_targets; j++)
		s->reply->publish_score(r, r->n_prefilled + j, &sr->out[j]);
	r->n_prefilled += s->lens[k];
	if (prompt_done(r))
		finish_running(s, running_index(s, r), BN_STATUS_COMPLETE, 0);
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
	end_fork(s, f);
	if (++r->labels_done == r->n_labels) {
		r->n_out = r->n_label_tokens;
		finish_running(s, running_index(s, r), BN_STATUS_COMPLETE, 0);
	}
}

static void deliver_all(struct bn_sched *s, uint32_t n_rows)
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
		if (!prompt_done(r))
			r->n_prefilled += s->lens[k];
		if (s->sample[k])
			deliver(s, r, &s->out[k], now);
	}
	/* Full fence: the events stores above are ordered before the loads of the waiters words
	 * in which streaming clients announce that they sleep (see bn_req_wake_stream_waiter). */
	bn_smp_mb();
	for (uint32_t i = 0; i < s->n_running; i++)
		s->reply->wake_stream_waiter(s->running[i]);
}

uint32_t bn_sched_step(struct bn_sched *s, struct bn_tenant **tenants, uint32_t n_tenants)
{
	uint64_t now = bn_now_ns();
	sweep_running(s, now);
	sweep_waiting(s, tenants, n_tenants, now);
	admit(s, tenants, n_tenants);
	if (s->n_running == 0)
		return 0;
	uint32_t n_rows = plan(s);
	mark_started(s, n_rows, now);
	struct bn_batch b;
	int rc = build_batch(s, n_rows, &b);
	uint64_t t0 = bn_now_ns();
	if (rc == 0)
		rc = s->ops->step(s->backend, &b, s->out);
	if (rc < 0) {
		fail_all_running(s, rc);
		return n_rows;
	}
	count_batch(&b, bn_now_ns() - t0);
	identify_step(s, n_rows);
	deliver_all(s, n_rows);
	return n_rows;
}

/* ------------------------------------------------------------------------------------------ */
/* Ending many at once                                                                         */
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
		stop_running(s, i);
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
	for (uint32_t k = 0; k < n_tenants; k++) {
		struct bn_req *r;
		while ((r = dequeue(s, tenants[k])) != NULL)
			s->reply->finish(r, status, 0);
	}
}

void bn_sched_end_running(struct bn_sched *s, uint32_t status)
{
	while (s->n_running)
		finish_running(s, 0, status, 0);
}
