/* SPDX-License-Identifier: MIT */
/*
 * grammars.c — the grammar service (grammars.h): the engine's vocabulary built from the
 * daemon's, the cache, and the workers that compile, bind and warm.
 */
#define _GNU_SOURCE
#include "grammars.h"

#include "bitnet_client.h"
#include "common/clock.h"
#include "common/log.h"
#include "tokenizer_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* The engine recurses as deep as a grammar nests: the usual 8 MiB (grammar.h). */
#define WORKER_STACK (8u << 20)
/* Warming runs in slices this long, so a closing daemon does not wait for a whole one. */
#define WARM_SLICE_NS (20ull * 1000000u)
/* After its compile, a grammar's token sets are filled for up to this many compile budgets. */
#define WARM_BUDGETS 4

/* ------------------------------------------------------------------------------------------ */
/* The vocabulary                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* How the engine must treat token id: control, unknown and unused tokens are never text, the
 * end-of-generation ids end it, every other token is its bytes. */
static uint8_t token_kind(const struct bn_vocab *v, uint32_t id)
{
	if (bn_vocab_is_eog(v, id))
		return BN_GRAMMAR_TOKEN_EOG;
	switch (v->type[id]) {
	case TYPE_CONTROL:
	case TYPE_UNKNOWN:
	case TYPE_UNUSED: return BN_GRAMMAR_TOKEN_SPECIAL;
	default: return BN_GRAMMAR_TOKEN_TEXT;
	}
}

/* Every token's bytes as the daemon's text out gives them (bn_detokenize_ex without flags:
 * SentencePiece's U+2581 a space, byte tokens their byte, byte-level pieces their bytes), so
 * what the grammar reads is what a client reads. */
int bn_grammar_service_vocab(const struct bn_vocab *v, struct bn_grammar_vocab **out)
{
	uint32_t n = bn_vocab_n_tokens(v);
	uint8_t **bytes = calloc(n, sizeof(*bytes));
	uint32_t *lens = calloc(n, sizeof(*lens));
	uint8_t *kinds = calloc(n, 1);
	int rc = bytes && lens && kinds ? 0 : -ENOMEM;
	char buf[2048];
	for (uint32_t id = 0; id < n && rc == 0; id++) {
		kinds[id] = token_kind(v, id);
		int len = kinds[id] == BN_GRAMMAR_TOKEN_TEXT
				  ? bn_detokenize_ex(v, &id, 1, 0, buf, sizeof(buf)) : 0;
		if (len < 0 || len >= (int)sizeof(buf)) {
			rc = -EINVAL; /* the engine takes text tokens of up to 1024 bytes */
			break;
		}
		bytes[id] = malloc((size_t)len + 1);
		if (!bytes[id]) {
			rc = -ENOMEM;
			break;
		}
		memcpy(bytes[id], buf, (size_t)len);
		lens[id] = (uint32_t)len;
	}
	if (rc == 0)
		rc = bn_grammar_vocab_new(n, (const uint8_t *const *)bytes, lens, kinds, out);
	for (uint32_t id = 0; bytes && id < n; id++)
		free(bytes[id]);
	free(bytes);
	free(lens);
	free(kinds);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Workers                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* The oldest job whose session has none on another worker, else the oldest: one session's
 * hostile grammars take one worker at a time while others still compile. Lock held. */
static struct bn_grammar_job *pick_job(struct bn_grammar_service *g)
{
	struct bn_grammar_job **pick = &g->queue, **link;
	for (link = &g->queue; *link; link = &(*link)->next) {
		int busy = 0;
		for (uint32_t w = 0; w < g->n_workers && !busy; w++)
			busy = g->compiling[w] == (*link)->owner;
		if (!busy) {
			pick = link;
			break;
		}
	}
	struct bn_grammar_job *job = *pick;
	*pick = job->next;
	__atomic_store_n(&g->queued, g->queued - 1, __ATOMIC_RELAXED);
	if (g->queue_tail == job) {
		g->queue_tail = NULL;
		for (struct bn_grammar_job *j = g->queue; j; j = j->next)
			g->queue_tail = j;
	}
	job->next = NULL;
	return job;
}

/* Lock held. */
static void post_done(struct bn_grammar_service *g, struct bn_grammar_job *job)
{
	int was_empty = g->done == NULL;
	if (g->done_tail)
		g->done_tail->next = job;
	else
		g->done = job;
	g->done_tail = job;
	if (was_empty) {
		uint64_t one = 1;
		/* The counter cannot come near its limit: the loop drains it at every job. */
		(void)!write(g->event_fd, &one, sizeof(one));
	}
}

/* What warm() stopped for. */
enum warm_end { WARM_DONE, WARM_YIELDED, WARM_SHED };

/* Fills the grammar's token sets until done, *left_ns is spent, the service closes, a job is
 * queued (a compile or a cache hit some session waits for goes before filling ahead what the
 * loop could fill on first use: with every worker warming, a hit waited up to WARM_BUDGETS
 * compile budgets), or a compile wants the memory (the epoch moved from `epoch`). */
static enum warm_end warm(struct bn_grammar_service *g, struct bn_grammar_bound *b,
			  uint64_t *left_ns, uint64_t epoch)
{
	while (*left_ns > 0 && !__atomic_load_n(&g->stop, __ATOMIC_RELAXED)) {
		if (__atomic_load_n(&g->shed_epoch, __ATOMIC_RELAXED) != epoch)
			return WARM_SHED;
		if (__atomic_load_n(&g->queued, __ATOMIC_RELAXED))
			return WARM_YIELDED;
		uint64_t slice = *left_ns < WARM_SLICE_NS ? *left_ns : WARM_SLICE_NS;
		uint64_t t0 = bn_now_ns();
		int rc = bn_grammar_bound_warm(b, slice);
		uint64_t spent = bn_now_ns() - t0;
		*left_ns = spent < *left_ns ? *left_ns - spent : 0;
		if (rc != 0)
			return WARM_DONE; /* 1: all filled; -ENOMEM: the loop fills on first use */
	}
	return WARM_DONE;
}

/* Lock held. Keeps b (and its reference) to be warmed once the queue is empty; when the list
 * is full, the grammar waiting longest is left to be filled on first use. */
static void warm_later(struct bn_grammar_service *g, struct bn_grammar_bound *b, uint64_t left_ns)
{
	if (g->n_to_warm == BN_GRAMMAR_WARM_LATER) {
		bn_grammar_bound_unref(g->to_warm[0].bound);
		memmove(g->to_warm, g->to_warm + 1, (BN_GRAMMAR_WARM_LATER - 1) * sizeof(g->to_warm[0]));
		g->n_to_warm--;
	}
	g->to_warm[g->n_to_warm++] = (struct bn_grammar_to_warm){ b, left_ns };
}

/* Lock held on entry and return. Warms b (whose reference it takes) with the lock let go. */
static void warm_unlocked(struct bn_grammar_service *g, struct bn_grammar_bound *b,
			  uint64_t left_ns)
{
	uint64_t epoch = g->shed_epoch;
	g->warming++;
	pthread_mutex_unlock(&g->lock);
	enum warm_end end = warm(g, b, &left_ns, epoch);
	pthread_mutex_lock(&g->lock);
	if (end == WARM_YIELDED && !g->stop && g->shed_epoch == epoch)
		warm_later(g, b, left_ns);
	else
		bn_grammar_bound_unref(b);
	if (--g->warming == 0)
		pthread_cond_broadcast(&g->warmed);
}

/* The longest a compile short of memory waits for the workers filling grammars to let go:
 * each does at its next slice. */
#define SHED_WAIT_NS (4 * WARM_SLICE_NS)

/* bn_grammar_cache_on_shed's: the grammars held only to be filled ahead are let go, those
 * waiting to be (now) and those being filled (at their next slice, waited for). */
static void shed(void *ctx)
{
	struct bn_grammar_service *g = ctx;
	pthread_mutex_lock(&g->lock);
	while (g->n_to_warm)
		bn_grammar_bound_unref(g->to_warm[--g->n_to_warm].bound);
	__atomic_store_n(&g->shed_epoch, g->shed_epoch + 1, __ATOMIC_RELAXED);
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	uint64_t ns = (uint64_t)until.tv_nsec + SHED_WAIT_NS;
	until.tv_sec += (time_t)(ns / 1000000000u);
	until.tv_nsec = (long)(ns % 1000000000u);
	while (g->warming && pthread_cond_timedwait(&g->warmed, &g->lock, &until) == 0)
		;
	pthread_mutex_unlock(&g->lock);
}

static void compile_job(struct bn_grammar_service *g, struct bn_grammar_job *job)
{
	job->err[0] = 0;
	job->rc = bn_grammar_cache_get(g->cache, job->text, job->len, &job->options, &job->bound,
				       job->err);
	if (job->rc < 0)
		job->bound = NULL;
}

static void *worker_main(void *arg)
{
	struct bn_grammar_service *g = arg;
	pthread_mutex_lock(&g->lock);
	uint32_t me = 0;
	while (g->workers[me] != pthread_self())
		me++;
	for (;;) {
		while (!g->stop && !g->queue && !g->n_to_warm)
			pthread_cond_wait(&g->work, &g->lock);
		if (g->stop)
			break;
		if (!g->queue) {
			struct bn_grammar_to_warm w = g->to_warm[--g->n_to_warm];
			warm_unlocked(g, w.bound, w.left_ns);
			continue;
		}
		struct bn_grammar_job *job = pick_job(g);
		g->compiling[me] = job->owner;
		pthread_mutex_unlock(&g->lock);
		compile_job(g, job);
		struct bn_grammar_bound *b = job->bound;
		if (b)
			bn_grammar_bound_ref(b); /* the job's own reference goes to the loop */
		pthread_mutex_lock(&g->lock);
		g->compiling[me] = NULL;
		post_done(g, job);
		if (b)
			warm_unlocked(g, b, (uint64_t)g->cfg.compile_ms * 1000000u * WARM_BUDGETS);
	}
	pthread_mutex_unlock(&g->lock);
	return NULL;
}

static int start_workers(struct bn_grammar_service *g)
{
	pthread_attr_t attr;
	if (pthread_attr_init(&attr))
		return -ENOMEM;
	pthread_attr_setstacksize(&attr, WORKER_STACK);
	int rc = 0;
	/* The lock makes each worker find its own index only once all are recorded. */
	pthread_mutex_lock(&g->lock);
	for (uint32_t i = 0; i < g->cfg.threads && rc == 0; i++) {
		rc = -pthread_create(&g->workers[i], &attr, worker_main, g);
		if (rc == 0)
			g->n_workers++;
	}
	pthread_mutex_unlock(&g->lock);
	pthread_attr_destroy(&attr);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* The service                                                                                 */
/* ------------------------------------------------------------------------------------------ */

int bn_grammar_service_open(struct bn_grammar_service *g, const struct bn_vocab *v,
			    struct bn_grammar_vocab *built, const struct bn_grammar_service_config *cfg)
{
	memset(g, 0, sizeof(*g));
	g->event_fd = -1;
	g->cfg = *cfg;
	if (!v) {
		bn_grammar_vocab_unref(built);
		return 0;
	}
	uint64_t t0 = bn_now_ns();
	int rc = 0;
	if (built)
		g->vocab = built;
	else
		rc = bn_grammar_service_vocab(v, &g->vocab);
	if (rc < 0) {
		bn_log_warn("msg=\"no structured output: the vocabulary cannot be given to the grammar engine\" error=%d",
			    rc);
		g->vocab = NULL;
		return rc == -ENOMEM ? rc : 0;
	}
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->work, NULL);
	pthread_condattr_t monotonic;
	pthread_condattr_init(&monotonic);
	pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
	pthread_cond_init(&g->warmed, &monotonic);
	pthread_condattr_destroy(&monotonic);
	g->event_fd = eventfd(0, EFD_CLOEXEC);
	rc = g->event_fd < 0 ? -errno : bn_grammar_cache_new(g->vocab, cfg->cache_bytes, &g->cache);
	if (rc == 0) {
		bn_grammar_cache_limit_memory(g->cache, cfg->memory_bytes);
		bn_grammar_cache_on_shed(g->cache, shed, g);
		rc = start_workers(g);
	}
	if (rc < 0) {
		bn_grammar_service_close(g);
		return rc;
	}
	bn_log_info("msg=\"structured output on\" grammar_threads=%u compile_ms=%u cache_bytes=%zu memory_bytes=%zu vocab_ms=%.1f",
		    cfg->threads, cfg->compile_ms, cfg->cache_bytes, cfg->memory_bytes,
		    (double)(bn_now_ns() - t0) / 1e6);
	return 0;
}

size_t bn_grammar_service_bytes(struct bn_grammar_service *g)
{
	if (!g->vocab)
		return 0;
	struct bn_grammar_cache_info info;
	bn_grammar_cache_get_info(g->cache, &info);
	return info.live_bytes;
}

void bn_grammar_service_trim(struct bn_grammar_service *g)
{
	if (!g->vocab)
		return;
	/* Grammars waiting to be warmed are held only for that: let them go too. */
	pthread_mutex_lock(&g->lock);
	while (g->n_to_warm)
		bn_grammar_bound_unref(g->to_warm[--g->n_to_warm].bound);
	pthread_mutex_unlock(&g->lock);
	bn_grammar_cache_trim(g->cache);
}

void bn_grammar_service_close(struct bn_grammar_service *g)
{
	if (!g->vocab)
		return;
	pthread_mutex_lock(&g->lock);
	__atomic_store_n(&g->stop, 1, __ATOMIC_RELAXED); /* warm() reads it without the lock */
	pthread_cond_broadcast(&g->work);
	pthread_mutex_unlock(&g->lock);
	for (uint32_t i = 0; i < g->n_workers; i++)
		pthread_join(g->workers[i], NULL);
	for (struct bn_grammar_job *j = g->queue, *next; j; j = next) {
		next = j->next;
		bn_grammar_job_free(j);
	}
	for (struct bn_grammar_job *j = g->done, *next; j; j = next) {
		next = j->next;
		bn_grammar_job_free(j);
	}
	for (uint32_t i = 0; i < g->n_to_warm; i++)
		bn_grammar_bound_unref(g->to_warm[i].bound);
	bn_grammar_cache_free(g->cache);
	bn_grammar_vocab_unref(g->vocab);
	if (g->event_fd >= 0)
		close(g->event_fd);
	pthread_cond_destroy(&g->work);
	pthread_cond_destroy(&g->warmed);
	pthread_mutex_destroy(&g->lock);
	memset(g, 0, sizeof(*g));
	g->event_fd = -1;
}

void bn_grammar_service_submit(struct bn_grammar_service *g, struct bn_grammar_job *job)
{
	job->next = NULL;
	pthread_mutex_lock(&g->lock);
	if (g->queue_tail)
		g->queue_tail->next = job;
	else
		g->queue = job;
	g->queue_tail = job;
	__atomic_store_n(&g->queued, g->queued + 1, __ATOMIC_RELAXED);
	pthread_cond_signal(&g->work);
	pthread_mutex_unlock(&g->lock);
}

struct bn_grammar_job *bn_grammar_service_take_done(struct bn_grammar_service *g)
{
	pthread_mutex_lock(&g->lock);
	struct bn_grammar_job *list = g->done;
	g->done = g->done_tail = NULL;
	pthread_mutex_unlock(&g->lock);
	return list;
}

void bn_grammar_job_free(struct bn_grammar_job *job)
{
	if (!job)
		return;
	bn_grammar_bound_unref(job->bound);
	free(job->text);
	free(job);
}
