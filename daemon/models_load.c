/* SPDX-License-Identifier: MIT */
/*
 * models_load.c — opening models (models.h): a model's backend options, the --device auto
 * choice, the loader thread that opens a model while the loop serves the others, and the
 * views sessions see (the description, the vocabulary, the text and grammar services).
 */
#define _GNU_SOURCE
#include "models_internal.h"

#include "common/clock.h"
#include "backends/cache_writer.h"
#include "common/log.h"
#include "common/thread.h"
#include "model/embed.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ */
/* Opening                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static void backend_options(const struct bn_models *m, struct bn_model_entry *e,
			    const char *path, uint32_t load_threads, int probing,
			    struct bn_backend_options *o)
{
	const struct bn_config *cfg = m->cfg;
	*o = (struct bn_backend_options){
		.model_path = e->opt.source ? path : NULL,
		.pool = m->pool,
		.load_threads = load_threads,
		.report = &e->report,
		.cache_dir = cfg->cache_dir,
		/* The second half is for forked sequences: a classify request's labels (sched.h). */
		.max_seqs = 2 * cfg->max_batch,
		.vocab_size = cfg->vocab_size,
		.step_delay_us = cfg->step_delay_us,
		.n_threads = cfg->threads,
		.lm_head_mode = cfg->lm_head_mode,
		.base3_decode = cfg->base3_decode,
		.device_index = cfg->device_index,
		.cuda_kernels = cfg->cuda_kernels,
		.probing = probing,
		.activation = cfg->activation,
	};
}

/* The model's own options on what the backend described: a shorter context, how its
 * embeddings pool (its own choice, else --pooling, else the file's). */
static void apply_options(const struct bn_models *m, const struct bn_model_entry *e,
			  struct bn_model_desc *desc)
{
	if (e->opt.context && e->opt.context < desc->context_length)
		desc->context_length = e->opt.context;
	bn_model_describe_embedding(desc, e->opt.pooling ? e->opt.pooling : m->cfg->pooling);
}

static int open_with(struct bn_models *m, const struct bn_backend_ops *ops,
		     struct bn_model_entry *e, const char *path, uint32_t load_threads,
		     int probing, void **backend, struct bn_model_desc *desc)
{
	struct bn_backend_options o;
	backend_options(m, e, path, load_threads, probing, &o);
	memset(desc, 0, sizeof(*desc));
	int rc = ops->open(&o, desc, backend);
	if (rc < 0) {
		if (!probing)
			bn_log_error("msg=\"model failed to load\" model=%s backend=%s path=\"%s\"",
				     e->opt.name, ops->name, path);
		return rc;
	}
	apply_options(m, e, desc);
	bn_log_info("msg=\"model loaded\" model=%s backend=%s name=\"%s\" vocab_size=%u "
		    "context_length=%u weight_bytes=%llu load_ms=%.0f",
		    e->opt.name, ops->name, desc->name, desc->vocab_size, desc->context_length,
		    (unsigned long long)desc->weight_bytes, e->report.seconds * 1e3);
	return 0;
}

int models_open(struct bn_models *m, struct bn_model_entry *e, const char *path,
		uint32_t load_threads, void **backend, struct bn_model_desc *desc)
{
	return open_with(m, m->ops, e, path, load_threads, 0, backend, desc);
}

/* The pool the cpu backend's steps run on, made when the cpu is the backend. */
static int choose(struct bn_models *m, const struct bn_backend_ops *ops)
{
	m->ops = ops;
	if (ops == &bn_backend_cpu && !m->pool && !(m->pool = bn_pool_new(m->cfg->threads)))
		return -ENOMEM;
	return 0;
}

static int open_named(struct bn_models *m, const char *name, struct bn_model_entry *e,
		      int probing, void **backend, struct bn_model_desc *desc)
{
	const struct bn_backend_ops *ops = bn_backend_find(name);
	if (!ops) {
		bn_log_error("msg=\"unknown backend or not in this build\" backend=%s", name);
		return -EINVAL;
	}
	int rc = choose(m, ops);
	return rc ? rc : open_with(m, ops, e, e->opt.path, m->cfg->threads, probing, backend, desc);
}

/* Whether the default KV pool has room on the device just opened: without --kv-memory, one
 * whose memory is taken (by the weights, or by other processes) down to the scratch headroom
 * would leave the scheduler no KV block, and the daemon would not start. */
static int device_has_kv_room(const struct bn_config *cfg, const struct bn_model_desc *model)
{
	if (!model->kv_on_device || cfg->kv_memory)
		return 1;
	uint64_t block = model->kv_bytes_per_token * cfg->kv_block_tokens;
	if (bn_model_device_kv_room(model, block))
		return 1;
	bn_log_info("msg=\"the GPU has no memory left for the KV cache\" free_mib=%llu headroom_mib=%llu",
		    (unsigned long long)(model->device_free >> 20),
		    (unsigned long long)(model->device_headroom >> 20));
	return 0;
}

/* --device auto: the GPU when this build has the cuda backend, it opens and its memory has
 * room for the default KV pool; else the CPU. */
int models_open_first(struct bn_models *m, struct bn_model_entry *e, void **backend,
		      struct bn_model_desc *desc)
{
	const struct bn_config *cfg = m->cfg;
	if (strcmp(cfg->backend, "auto") != 0)
		return open_named(m, cfg->backend, e, 0, backend, desc);
	if (!bn_backend_find("cuda")) {
		bn_log_info("msg=\"--device auto: this build has no cuda backend (built without nvcc); using the cpu\"");
		return open_named(m, "cpu", e, 0, backend, desc);
	}
	if (open_named(m, "cuda", e, 1, backend, desc) == 0) {
		if (device_has_kv_room(cfg, desc))
			return 0;
		m->ops->close(*backend);
		*backend = NULL;
	}
	bn_log_info("msg=\"--device auto: the GPU cannot be used (reason above); using the cpu\"");
	return open_named(m, "cpu", e, 0, backend, desc);
}

int models_desc_same(const struct bn_model_desc *a, const struct bn_model_desc *b)
{
	return !strcmp(a->name, b->name) && a->vocab_size == b->vocab_size &&
	       a->context_length == b->context_length && a->bos_id == b->bos_id &&
	       a->eos_id == b->eos_id && a->kind == b->kind && a->lm_head == b->lm_head &&
	       a->decode_layout == b->decode_layout && a->can_score == b->can_score &&
	       a->can_classify == b->can_classify && a->can_mask == b->can_mask &&
	       a->pooling == b->pooling && a->file_pooling == b->file_pooling &&
	       a->embed_dim == b->embed_dim;
}

int models_file_id(const char *path, struct bn_file_id *out)
{
	struct stat st;
	if (!path || stat(path, &st) < 0) {
		memset(out, 0, sizeof(*out));
		return path ? -errno : 0;
	}
	*out = (struct bn_file_id){ .dev = st.st_dev, .ino = st.st_ino, .size = st.st_size,
				    .mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 +
						st.st_mtim.tv_nsec };
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Views                                                                                       */
/* ------------------------------------------------------------------------------------------ */

/* Why a model gets no structured output, or NULL when it can (given a vocabulary the
 * grammar engine takes). */
static const char *grammars_off(const struct bn_model_view *v)
{
	if (!v->control.text.vocab)
		return v->desc.kind == BN_BACKEND_LOOPBACK
			       ? "the loopback backend has no vocabulary"
			       : "the model has no vocabulary that encodes text";
	if (!v->desc.can_mask)
		return "the backend applies no grammar masks";
	return NULL;
}

/* The grammar service, where the model and backend allow structured output. Its memory limit
 * is the model's share of --grammar-memory (divided by the number of models, as --kv-memory
 * is): what sessions hold cannot be taken back, so a share keeps one model's sessions from
 * leaving another's none. Its cache is a member of the registry's grammar budget, which bounds
 * the entries of every model's cache together by --grammar-cache and what every model's
 * grammars hold by what --memory leaves beside the loaded models (models_grammar_room); past
 * either, grammars kept for a next time go least recently used first, whichever model's they
 * are. -1 with errno when threads or memory fail. */
static int open_grammars(struct bn_model_view *v, const struct bn_models *m)
{
	const struct bn_config *cfg = m->cfg;
	uint32_t n_models = m->n;
	const char *off = grammars_off(v);
	v->limits.max_grammars = cfg->max_grammars;
	v->limits.grammars = &v->grammars;
	v->grammars.event_fd = -1;
	if (!off) {
		struct bn_grammar_service_config gc = { .threads = cfg->grammar_threads,
							.compile_ms = cfg->grammar_compile_ms,
							.cache_bytes = (size_t)cfg->grammar_cache,
							.memory_bytes = (size_t)(cfg->grammar_memory / n_models) };
		int rc = bn_grammar_service_open(&v->grammars, v->control.text.vocab,
						 v->control.grammar_vocab, &gc);
		v->control.grammar_vocab = NULL; /* the service's now */
		if (rc < 0) {
			errno = -rc;
			return -1;
		}
		if (!v->grammars.vocab)
			off = "the vocabulary could not be given to the grammar engine";
		else if ((rc = bn_grammar_cache_count_in(v->grammars.cache, m->grammar_budget)) < 0) {
			bn_grammar_service_close(&v->grammars);
			errno = -rc;
			return -1;
		}
	}
	if (off)
		bn_log_info("msg=\"no structured output\" model=%s reason=\"%s\"",
			    v->entry->opt.name, off);
	v->limits.grammars_off = off;
	return 0;
}

/* The file whose text side e's view builds (textprep.h), or NULL: none (loopback). */
static const char *text_path(const struct bn_models *m, const struct bn_model_entry *e,
			     const char *path)
{
	return e->opt.source && strcmp(m->cfg->backend, "loopback") != 0 ? path : NULL;
}

void models_text_prep_start(const struct bn_models *m, const struct bn_model_entry *e,
			    const char *path, struct bn_text_prep *prep)
{
	const struct bn_config *cfg = m->cfg;
	bn_text_prep_start(prep, text_path(m, e, path),
			   e->opt.pre_tokenizer ? e->opt.pre_tokenizer : cfg->pre_tokenizer,
			   e->opt.chat_template ? e->opt.chat_template : cfg->chat_template);
}

struct bn_model_view *models_view_new(struct bn_models *m, struct bn_model_entry *e,
				      const struct bn_model_desc *desc, struct bn_text_prep *prep)
{
	const struct bn_config *cfg = m->cfg;
	struct bn_model_view *v = calloc(1, sizeof(*v));
	if (!v)
		return NULL;
	v->refs = 1;
	v->entry = e;
	v->desc = *desc;
	bn_control_open(&v->control, e->opt.source ? e->opt.path : NULL,
			e->opt.pre_tokenizer ? e->opt.pre_tokenizer : cfg->pre_tokenizer,
			e->opt.chat_template ? e->opt.chat_template : cfg->chat_template, &v->desc,
			prep);
	/* An embedding's vector goes to the output array too (§6.14). */
	uint32_t vector = desc->pooling ? desc->embed_dim : 0;
	v->limits = (struct bn_session_limits){ .slots = cfg->slots,
						.prompt_capacity = desc->context_length,
						.output_capacity = desc->context_length > vector
									   ? desc->context_length
									   : vector,
						.ring_start = cfg->ring_start,
						.logprob_capacity = cfg->max_logprobs,
						.max_weight = cfg->max_weight,
						.model = &v->desc,
						.text = &v->control.text,
						.served_name = e->opt.name };
	if (open_grammars(v, m) < 0) {
		bn_log_error("msg=\"cannot start the grammar service\" model=%s error=\"%s\"",
			     e->opt.name, strerror(errno));
		bn_control_close(&v->control);
		free(v);
		return NULL;
	}
	return v;
}

void models_view_put(struct bn_model_view *v)
{
	if (!v || --v->refs)
		return;
	bn_grammar_service_close(&v->grammars);
	bn_control_close(&v->control);
	free(v);
}

/* ------------------------------------------------------------------------------------------ */
/* The loader thread                                                                           */
/* ------------------------------------------------------------------------------------------ */

static void *loader_main(void *arg)
{
	struct bn_models *m = arg;
	struct bn_loader *l = &m->loader;
	pthread_mutex_lock(&l->lock);
	for (;;) {
		while (!l->stop && (!l->job || __atomic_load_n(&l->done, __ATOMIC_RELAXED)))
			pthread_cond_wait(&l->work, &l->lock);
		if (l->stop)
			break;
		struct bn_model_entry *e = l->job;
		uint32_t threads = l->load_threads;
		int text = l->text;
		pthread_mutex_unlock(&l->lock);
		void *backend = NULL;
		struct bn_model_desc desc;
		/* A reload's new vocabulary is built here too, beside the weights: the loop only
		 * takes it (models_loader_prep). */
		if (text)
			models_text_prep_start(m, e, l->path, &l->prep);
		int rc = models_open(m, e, l->path, threads, &backend, &desc);
		bn_text_prep_finish(&l->prep);
		pthread_mutex_lock(&l->lock);
		l->rc = rc;
		l->backend = backend;
		l->desc = desc;
		__atomic_store_n(&l->done, 1, __ATOMIC_RELEASE);
		uint64_t one = 1;
		if (write(l->event_fd, &one, sizeof(one)) < 0)
			bn_log_warn("msg=\"the loader could not ring the loop\" errno=%d", errno);
	}
	pthread_mutex_unlock(&l->lock);
	return NULL;
}

int models_loader_start(struct bn_models *m)
{
	struct bn_loader *l = &m->loader;
	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->work, NULL);
	l->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->event_fd < 0)
		return -errno;
	int rc = bn_thread_start(&l->thread, loader_main, m);
	if (rc)
		return -rc;
	l->started = 1;
	return 0;
}

void models_loader_stop(struct bn_models *m)
{
	struct bn_loader *l = &m->loader;
	if (l->started) {
		pthread_mutex_lock(&l->lock);
		l->stop = 1;
		pthread_cond_signal(&l->work);
		pthread_mutex_unlock(&l->lock);
		pthread_join(l->thread, NULL); /* an open in progress ends first */
		if (l->job && __atomic_load_n(&l->done, __ATOMIC_RELAXED) && l->rc == 0)
			m->ops->close(l->backend);
		l->started = 0;
		pthread_mutex_destroy(&l->lock);
		pthread_cond_destroy(&l->work);
	}
	bn_text_prep_free(&l->prep);
	if (l->event_fd >= 0)
		close(l->event_fd);
	l->event_fd = -1;
}

void models_loader_begin(struct bn_models *m, struct bn_model_entry *e, uint32_t load_threads,
			 int text)
{
	struct bn_loader *l = &m->loader;
	pthread_mutex_lock(&l->lock);
	bn_text_prep_free(&l->prep); /* the last load's, whatever its view did not take */
	bn_text_prep_start(&l->prep, NULL, NULL, NULL);
	l->text = text;
	l->job = e;
	__atomic_store_n(&l->done, 0, __ATOMIC_RELAXED);
	l->load_threads = load_threads;
	snprintf(l->path, sizeof(l->path), "%s", e->opt.path);
	pthread_cond_signal(&l->work);
	pthread_mutex_unlock(&l->lock);
}

struct bn_model_entry *models_loader_take(struct bn_models *m, int *rc, void **backend,
					  struct bn_model_desc *desc)
{
	struct bn_loader *l = &m->loader;
	struct bn_model_entry *e = NULL;
	if (!__atomic_load_n(&l->done, __ATOMIC_ACQUIRE))
		return NULL; /* the loop asks every turn: no lock while the open runs */
	pthread_mutex_lock(&l->lock);
	if (l->job && l->done) {
		e = l->job;
		*rc = l->rc;
		*backend = l->backend;
		*desc = l->desc;
		l->job = NULL;
		__atomic_store_n(&l->done, 0, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&l->lock);
	return e;
}

/* ------------------------------------------------------------------------------------------ */
/* Start-up                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* A probe's weights that are being written to the packed-weight cache stay open until the
 * file is there: closing would give the write up, and the model's first load would repack. */
static void wait_cache_written(const struct bn_model_entry *e)
{
	while (__atomic_load_n(&e->report.weights_cache, __ATOMIC_ACQUIRE) == BN_WEIGHTS_CACHE_WRITING)
		usleep(10000);
}

/* Opens e at start-up: its description (the view), bytes and file identity. `keep`: it
 * stays open (its KV comes later), else it is closed once its cache is written. */
static int probe(struct bn_models *m, struct bn_model_entry *e, int keep, int *exit_code)
{
	void *backend = NULL;
	struct bn_model_desc desc;
	/* The vocabulary and tokenizers are built while the backend loads the weights. */
	struct bn_text_prep prep;
	models_text_prep_start(m, e, e->opt.path, &prep);
	int rc = m->ops ? models_open(m, e, e->opt.path, m->cfg->threads, &backend, &desc)
			: models_open_first(m, e, &backend, &desc);
	if (rc < 0) {
		bn_text_prep_free(&prep);
		*exit_code = rc == -ENOMEM && !m->ops ? BN_EXIT_SYSTEM : BN_EXIT_BACKEND;
		return -1;
	}
	e->view = models_view_new(m, e, &desc, &prep);
	bn_text_prep_free(&prep); /* what the view did not take */
	if (!e->view) {
		m->ops->close(backend);
		*exit_code = BN_EXIT_SYSTEM;
		return -1;
	}
	e->weight_bytes = desc.weight_bytes;
	e->shown.seconds = e->report.seconds;
	snprintf(e->shown.path, sizeof(e->shown.path), "%s", e->report.path);
	models_file_id(e->opt.source ? e->opt.path : NULL, &e->file);
	if (desc.kv_on_device) {
		/* Alone on the device: what it had free before this model, less the headroom. */
		uint64_t before = desc.device_free + desc.weight_bytes;
		uint64_t room = before > desc.device_headroom ? before - desc.device_headroom : 0;
		if (!m->budget || room < m->budget)
			m->budget = room;
	}
	if (keep) {
		e->backend = backend;
		return 0;
	}
	wait_cache_written(e);
	m->ops->close(backend);
	return 0;
}

/* The end-of-generation ids besides eos for the scheduler. */
static void copy_eog(const struct bn_vocab_choice *c, struct bn_sched_config *sc)
{
	for (uint32_t i = 0; i < c->n_eog && sc->n_eog < BN_SCHED_MAX_EOG; i++)
		sc->eog[sc->n_eog++] = c->eog[i];
}

/* Whether the backend's KV arena takes memory only under the blocks in use: host KV (the
 * cpu backend: an arena is mapped, and only its touched pages hold memory), or device KV in
 * an elastic arena (the cuda backend where the driver maps memory in granules:
 * backend.h kv_init_elastic). */
static int kv_elastic(const struct bn_models *m, const struct bn_model_desc *d)
{
	return !d->kv_on_device || (m->ops->kv_init_elastic && d->kv_map_granule);
}

/* Whether e's KV pool lends and borrows through the registry's ledger (serve/kvpool.h):
 * several models, an elastic arena (kv_elastic), not the model's own kv_memory; then either
 * no memory budget and --kv-memory (a fixed ledger of it), or a budget (a ledger of the
 * loaded models' shares), which counts what the pools hold, so their freed blocks must give
 * their memory back: only where the backend can give whole blocks back (desc
 * kv_release_tokens), else the static share. */
static int models_kv_lent(const struct bn_models *m, const struct bn_model_entry *e,
			  const struct bn_model_desc *d)
{
	if (m->n < 2 || e->opt.kv_memory || !kv_elastic(m, d))
		return 0;
	if (!m->budget)
		return m->cfg->kv_memory != 0;
	return d->kv_release_tokens && m->cfg->kv_block_tokens % d->kv_release_tokens == 0;
}

/* e's guaranteed KV: its own option; else an equal share of --kv-memory; else, under a
 * budget with several models (or --memory), its full-context size at most an n-th of what
 * the budget leaves beside its weights; else the scheduler's default (0). */
static uint64_t kv_share(const struct bn_models *m, const struct bn_model_entry *e,
			 const struct bn_model_desc *d)
{
	const struct bn_config *cfg = m->cfg;
	if (e->opt.kv_memory)
		return e->opt.kv_memory;
	if (cfg->kv_memory)
		return cfg->kv_memory / m->n;
	if (!m->budget || (m->n == 1 && !cfg->memory))
		return 0;
	uint64_t want = (uint64_t)cfg->max_batch * d->context_length * d->kv_bytes_per_token;
	uint64_t room = m->budget > e->weight_bytes ? (m->budget - e->weight_bytes) / m->n : 0;
	uint64_t block = d->kv_bytes_per_token * cfg->kv_block_tokens;
	room = room > block ? room : block; /* one block at least: never a pool of none */
	return want < room ? want : room;
}

/* Models whose every subset kv_reachable tries (2^12 sets of 12 sums: well under a
 * millisecond, at each load). */
#define BN_KV_EXACT_SETS 12

static uint64_t kv_estimate(const struct bn_models *m, const struct bn_model_entry *e,
			    uint64_t kv);

/* Candidates to load beside a model, as the budget counts them (models_entry_bytes) and by
 * the KV share each brings to the ledger. */
struct kv_candidates {
	uint64_t bytes[BN_KV_EXACT_SETS], share[BN_KV_EXACT_SETS];
	uint32_t n;
	uint64_t frac;           /* past BN_KV_EXACT_SETS: the rest, as a fractional fill */
	uint64_t frac_room;
};

/* The most share a subset of the candidates brings within room: every subset (at most
 * 2^BN_KV_EXACT_SETS), exact. */
static uint64_t best_subset_share(const struct kv_candidates *c, uint64_t room)
{
	uint64_t best = 0;
	for (uint32_t set = 0; set < (1u << c->n); set++) {
		uint64_t bytes = 0, share = 0;
		for (uint32_t i = 0; i < c->n; i++)
			if (set & (1u << i)) {
				bytes += c->bytes[i];
				share += c->share[i];
			}
		if (bytes <= room && share > best)
			best = share;
	}
	return best;
}

/* The most the ledger's cap can ever be while e is loaded: e's share, the pinned models'
 * (always loaded), and the shares of the other lending models that fit the budget beside
 * them at once, the subset with the most (exact over up to BN_KV_EXACT_SETS candidates;
 * with more, each past them counts as if any fraction of it could load, an upper bound, so
 * that no request that could ever fit is refused). A request that needs more KV than this
 * could only wait for a set of loaded models that cannot exist. */
static uint64_t kv_reachable(const struct bn_models *m, const struct bn_model_entry *e,
			     const struct bn_model_desc *d)
{
	uint64_t share = kv_share(m, e, d), used = e->weight_bytes + share;
	if (d->kv_on_device && models_kv_lent(m, e, d))
		used += bn_model_kv_slack(d, m->cfg->kv_block_tokens); /* kv_estimate's */
	struct kv_candidates c = { .n = 0 };
	uint64_t rest_bytes = 0, rest_share = 0;
	for (uint32_t i = 0; i < m->n; i++) {
		const struct bn_model_entry *x = &m->entries[i];
		if (x == e || !x->view)
			continue;
		const struct bn_model_desc *xd = &x->view->desc;
		int lent = models_kv_lent(m, x, xd);
		uint64_t x_share = lent ? kv_share(m, x, xd) : 0;
		uint64_t bytes = x->weight_bytes + kv_estimate(m, x, kv_share(m, x, xd));
		if (x->opt.pinned) {
			used += bytes;
			share += x_share;
		} else if (lent && c.n < BN_KV_EXACT_SETS) {
			c.bytes[c.n] = bytes;
			c.share[c.n++] = x_share;
		} else if (lent) {
			rest_bytes += bytes;
			rest_share += x_share;
		}
	}
	if (used >= m->budget)
		return share;
	uint64_t room = m->budget - used;
	/* With more candidates than the exact search takes, the rest may add at most their
	 * shares scaled by the room over their bytes (a fraction of every one of them). */
	uint64_t rest = rest_bytes && rest_share
				? (room >= rest_bytes ? rest_share
						      : (uint64_t)((double)rest_share * room / rest_bytes))
				: 0;
	return share + best_subset_share(&c, room) + rest;
}

/* The arena of a pool that lends (the most it may borrow): --kv-memory without a budget;
 * under one, what the ledger's cap can ever reach with e loaded (kv_reachable), at most what
 * the budget leaves beside e's weights and --kv-memory (the cap on all KV), at least its
 * share. The scheduler caps it at what its sequences can use, and refuses at once a request
 * that needs more than the arena (BN_E_KV_SPACE). */
static uint64_t kv_arena(const struct bn_models *m, const struct bn_model_entry *e,
			 const struct bn_model_desc *d)
{
	const struct bn_config *cfg = m->cfg;
	if (!m->budget)
		return cfg->kv_memory;
	uint64_t room = m->budget > e->weight_bytes ? m->budget - e->weight_bytes : 0;
	if (cfg->kv_memory && cfg->kv_memory < room)
		room = cfg->kv_memory;
	/* never more than every lending model's share: kv_reachable adds up a subset of them */
	uint64_t share = kv_share(m, e, d), reachable = kv_reachable(m, e, d);
	room = reachable < room ? reachable : room;
	return room > share ? room : share;
}

/* What the pool of kv bytes holds once sized (whole blocks, at most what can be used). */
static uint64_t kv_estimate(const struct bn_models *m, const struct bn_model_entry *e, uint64_t kv)
{
	const struct bn_config *cfg = m->cfg;
	const struct bn_model_desc *d = &e->view->desc;
	uint64_t bpt = d->kv_bytes_per_token ? d->kv_bytes_per_token : 1;
	uint64_t per_seq = (d->context_length + cfg->kv_block_tokens - 1) / cfg->kv_block_tokens;
	uint64_t useful = (uint64_t)cfg->max_batch * per_seq;
	uint64_t blocks = kv ? kv / (bpt * cfg->kv_block_tokens) : useful;
	if (!kv && m->budget) {
		/* The default pool under a budget (the device's memory past its headroom, one
		 * model): the backend sizes it to what the weights leave, one block at least. */
		uint64_t room = m->budget > e->weight_bytes ? m->budget - e->weight_bytes : 0;
		uint64_t fit = room / (bpt * cfg->kv_block_tokens);
		blocks = fit < blocks ? (fit ? fit : 1) : blocks;
	}
	uint64_t held = (blocks < useful ? blocks : useful) * cfg->kv_block_tokens * bpt;
	/* an elastic device arena also holds one partly used group of granules */
	if (d->kv_on_device && models_kv_lent(m, e, d))
		held += bn_model_kv_slack(d, cfg->kv_block_tokens);
	return held;
}

void models_sched_config(struct bn_models *m, const struct bn_model_entry *e,
			 const struct bn_model_view *v, struct bn_sched_config *out)
{
	const struct bn_config *cfg = m->cfg;
	const struct bn_model_desc *d = &v->desc;
	*out = (struct bn_sched_config){
		.max_batch = cfg->max_batch,
		.token_budget = cfg->token_budget,
		.max_running_per_session = cfg->max_running_per_session,
		.max_running_per_user = cfg->max_running_per_user,
		.eos_id = d->eos_id,
		.context_length = d->context_length,
		.kv_memory = models_kv_lent(m, e, d) ? kv_arena(m, e, d) : kv_share(m, e, d),
		.kv_block_tokens = cfg->kv_block_tokens,
		.logprob_capacity = cfg->max_logprobs,
		.fork_seqs = d->can_classify ? cfg->max_batch : 0, /* opened with that many */
		.prefix_cache = cfg->prefix_cache,
		.speculative = e->opt.speculative >= 0 ? (uint32_t)e->opt.speculative : cfg->speculative,
		.draft_tokens = e->opt.draft_tokens ? e->opt.draft_tokens : cfg->draft_tokens,
		.pooling = d->pooling,
		.embed_dim = d->embed_dim,
		.users = m->users,
		.kv_ledger = models_kv_lent(m, e, d) ? &m->kv_ledger : NULL,
		.kv_share = kv_share(m, e, d),
	};
	copy_eog(&v->control.vocab.choice, out);
}

static int make_sched(struct bn_models *m, struct bn_model_entry *e)
{
	const struct bn_config *cfg = m->cfg;
	const struct bn_model_desc *d = &e->view->desc;
	models_sched_config(m, e, e->view, &e->sched_cfg);
	/* Under a budget a pool that lends is counted at its share (the ledger's cap is the
	 * shares of the loaded models: what one borrows is another's, kvpool.h). */
	int shared = e->sched_cfg.kv_ledger && m->kv_ledger.summed;
	if (m->budget && m->n > 1 && !e->sched_cfg.kv_ledger && !e->opt.kv_memory)
		bn_log_info("msg=\"KV pool not lent: an equal share under --memory\" model=%s "
			    "why=\"%s\" kv_block_tokens=%u kv_release_tokens=%u",
			    e->opt.name,
			    kv_elastic(m, d) ? "the backend cannot give a block's memory back whole"
					     : "the device cannot map KV memory as blocks are used",
			    cfg->kv_block_tokens, d->kv_release_tokens);
	e->kv_bytes = kv_estimate(m, e, shared ? e->sched_cfg.kv_share : e->sched_cfg.kv_memory);
	e->sched = bn_sched_create(m->ops, d, &e->sched_cfg, &bn_session_reply);
	e->tenants = calloc(cfg->max_sessions, sizeof(*e->tenants));
	return e->sched && e->tenants ? 0 : -ENOMEM;
}

/* What the default model runs, for the daemon-wide STATS families (bitnet-cli info). */
static void copy_graph(const struct bn_models *m, const struct bn_model_entry *e)
{
	const struct bn_model_desc *d = &e->view->desc;
	snprintf(bn_stats.activation, sizeof(bn_stats.activation), "%s", d->activation);
	snprintf(bn_stats.activation_why, sizeof(bn_stats.activation_why), "%s", d->activation_why);
	memcpy(bn_stats.float_candidates, d->float_candidates, sizeof(bn_stats.float_candidates));
	memcpy(bn_stats.ternary_from_float, d->ternary_from_float,
	       sizeof(bn_stats.ternary_from_float));
	snprintf(bn_stats.kept_float, sizeof(bn_stats.kept_float), "%s", d->kept_float);
	snprintf(bn_stats.cuda_kernels, sizeof(bn_stats.cuda_kernels), "%s", d->kernels);
	bn_stats.spec_mode = bn_speculative_names[m->ops->seq_rewind ? e->sched_cfg.speculative
								     : BN_SPECULATIVE_OFF];
	bn_stats.spec_draft_tokens = e->sched_cfg.draft_tokens;
}

void models_grammar_room(struct bn_models *m)
{
	uint64_t loaded = bn_kv_ledger_overflow(&m->kv_ledger);
	for (uint32_t i = 0; i < m->n; i++)
		if (models_resident(&m->entries[i]))
			loaded += models_entry_bytes(&m->entries[i]);
	uint64_t room = m->budget > loaded ? m->budget - loaded : 0;
	bn_grammar_budget_set_limit(m->grammar_budget,
				    !m->budget ? SIZE_MAX : room > SIZE_MAX ? SIZE_MAX : (size_t)room);
}

/* A start whose every model hit its packed-weight cache writes none, so the writer's pruning
 * never runs: the daemon prunes the directory once here too, after the probes' writes, so a
 * model taken out of the configuration (or deleted) leaves no dead cache past the next start.
 * A few headers read (8 KiB each); loopback has no cache. */
static void prune_cache_dir(const struct bn_config *cfg)
{
	char dir[PATH_MAX];
	if (strcmp(cfg->backend, "loopback") != 0 &&
	    bn_wcache_dir(cfg->cache_dir, dir, sizeof(dir)) == 0 && dir[0])
		bn_cache_prune_dir(dir);
}

/* A model loaded at start-up (the default, a pinned one) must fit the budget. */
static int fits_at_start(const struct bn_models *m, const struct bn_model_entry *e)
{
	uint64_t loaded = 0;
	for (uint32_t i = 0; i < m->n; i++)
		if (m->entries[i].backend && &m->entries[i] != e)
			loaded += models_entry_bytes(&m->entries[i]);
	if (!m->budget || loaded + models_entry_bytes(e) <= m->budget)
		return 1;
	bn_log_error("msg=\"a model loaded at start-up does not fit the memory budget\" model=%s "
		     "bytes=%llu weight_bytes=%llu kv_bytes=%llu budget=%llu loaded_bytes=%llu "
		     "hint=\"--memory sets the budget; --kv-memory or the model's kv_memory its KV\"",
		     e->opt.name, (unsigned long long)models_entry_bytes(e),
		     (unsigned long long)e->weight_bytes, (unsigned long long)e->kv_bytes,
		     (unsigned long long)m->budget, (unsigned long long)loaded);
	return 0;
}

/* The default model (open since its probe) and the pinned ones join their schedulers. */
static int load_at_start(struct bn_models *m, int *exit_code)
{
	uint64_t now = bn_now_ns();
	*exit_code = BN_EXIT_BACKEND;
	for (uint32_t i = 0; i < m->n; i++) {
		struct bn_model_entry *e = &m->entries[i];
		if (i > 0 && !e->opt.pinned)
			continue;
		void *backend = e->backend;
		struct bn_model_desc desc = e->view->desc;
		if (!backend && models_open(m, e, e->opt.path, m->cfg->threads, &backend, &desc) < 0)
			return -1;
		e->backend = NULL;
		if (!fits_at_start(m, e) ||
		    bn_sched_attach(e->sched, backend, &desc, NULL, 0) < 0) {
			m->ops->close(backend);
			return -1;
		}
		e->backend = backend;
		e->state = BN_MODEL_LOADED;
		e->kv_bytes = bn_sched_kv_bytes(e->sched);
		e->loaded_at = e->last_used = e->idle_since = now;
		e->idle_since_wall_ms = (int64_t)time(NULL) * 1000;
		e->load_ns = (uint64_t)(e->report.seconds * 1e9);
		e->counters.loads++;
		if (!fits_at_start(m, e))
			return -1;
	}
	return 0;
}

struct bn_models *bn_models_open(const struct bn_config *cfg, int *exit_code)
{
	struct bn_models *m = calloc(1, sizeof(*m));
	*exit_code = BN_EXIT_SYSTEM;
	if (!m)
		return NULL;
	m->cfg = cfg;
	m->n = cfg->n_models;
	m->budget = cfg->memory;
	m->grammar_budget = bn_grammar_budget_new();
	if (m->grammar_budget)
		bn_grammar_budget_set_cache_cap(m->grammar_budget, (size_t)cfg->grammar_cache);
	m->loader.event_fd = -1;
	bn_text_prep_start(&m->loader.prep, NULL, NULL, NULL);
	m->entries = calloc(m->n, sizeof(*m->entries));
	m->stats_rows = calloc(m->n, sizeof(*m->stats_rows));
	m->due = calloc(m->n, sizeof(*m->due));
	m->due_scheds = calloc(m->n, sizeof(*m->due_scheds));
	m->users = bn_sched_users_new(m->n * (cfg->max_batch ? cfg->max_batch : 1));
	if (!m->entries || !m->stats_rows || !m->due || !m->due_scheds || !m->users ||
	    !m->grammar_budget ||
	    models_loader_start(m) < 0) {
		bn_log_error("msg=\"cannot set up the models\" error=\"%s\"", strerror(errno));
		bn_models_close(m);
		return NULL;
	}
	for (uint32_t i = 0; i < m->n; i++) {
		m->entries[i].opt = cfg->models[i];
		m->entries[i].index = i;
	}
	/* Each alone, the default last: it stays open, the others are closed after. */
	for (uint32_t k = m->n; k-- > 0;)
		if (probe(m, &m->entries[k], k == 0, exit_code) < 0) {
			bn_models_close(m);
			return NULL;
		}
	/* Under a budget the lent KV is the loaded models' shares (kvpool.h, summed). */
	m->kv_ledger.summed = m->budget != 0;
	m->kv_ledger.cap = m->budget ? 0 : cfg->kv_memory;
	for (uint32_t i = 0; i < m->n; i++)
		if (make_sched(m, &m->entries[i]) < 0) {
			*exit_code = BN_EXIT_SYSTEM;
			bn_models_close(m);
			return NULL;
		}
	if (load_at_start(m, exit_code) < 0) {
		bn_models_close(m);
		return NULL;
	}
	copy_graph(m, &m->entries[0]);
	models_grammar_room(m);
	prune_cache_dir(cfg);
	uint64_t loaded = 0;
	for (uint32_t i = 0; i < m->n; i++)
		loaded += models_resident(&m->entries[i]) ? models_entry_bytes(&m->entries[i]) : 0;
	if (m->n > 1 || m->budget)
		bn_log_info("msg=\"models\" count=%u default=%s budget=%llu loaded_bytes=%llu",
			    m->n, m->entries[0].opt.name, (unsigned long long)m->budget,
			    (unsigned long long)loaded);
	*exit_code = BN_EXIT_OK;
	return m;
}

void bn_models_close(struct bn_models *m)
{
	if (!m)
		return;
	models_loader_stop(m);
	models_overlap_close(m);
	for (uint32_t i = 0; m->entries && i < m->n; i++) {
		struct bn_model_entry *e = &m->entries[i];
		if (e->sched && bn_sched_attached(e->sched))
			bn_sched_detach(e->sched);
		if (e->backend)
			m->ops->close(e->backend);
		bn_sched_free(e->sched);
		models_view_put(e->view);
		free(e->tenants);
	}
	while (m->retired) {
		struct bn_model_view *v = m->retired;
		m->retired = v->next_retired;
		models_view_put(v); /* the registry's: the sessions bound to it are gone */
	}
	if (m->pool)
		bn_pool_free(m->pool);
	free(m->entries);
	free(m->stats_rows);
	free(m->due);
	free(m->due_scheds);
	bn_sched_users_free(m->users); /* after the schedulers that counted in it */
	bn_grammar_budget_unref(m->grammar_budget); /* grammars still alive hold their own */
	free(m);
}
