/* SPDX-License-Identifier: MIT */
/*
 * models.c — the registry's lifecycle (models.h; daemon/README.md "Several models in one
 * daemon"): start-up, the memory budget, loads in the order models began to wait, eviction of
 * idle models and turns of busy ones, keep-alive, unloads and reloads, and the round-robin of
 * steps. Runs on the loop thread; opening is models_load.c's.
 */
#define _GNU_SOURCE
#include "models_internal.h"

#include "common/clock.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *const bn_model_state_names[BN_MODEL_STATES] = { "unloaded", "loading", "loaded",
							    "unloading", "failed" };
const char *const bn_unload_reason_names[BN_UNLOAD_REASONS] = { "memory", "idle", "command",
								"reload" };

/* A model that became loaded does not give its turn up before this long, nor before twice
 * what its load took: a swap never costs more than a third of the time. */
#define MIN_RESIDENCY_NS (50ull * 1000000u)
/* How often requests waiting on a model that is not loaded are looked at for their cancels
 * and deadlines while the loop would otherwise sleep. */
#define DETACHED_SWEEP_NS (10ull * 1000000u)

/* ------------------------------------------------------------------------------------------ */
/* Small facts                                                                                 */
/* ------------------------------------------------------------------------------------------ */

uint32_t models_entry_refs(const struct bn_model_entry *e)
{
	return bn_sched_waiting(e->sched) + bn_sched_running(e->sched);
}

uint32_t bn_models_count(const struct bn_models *m)
{
	return m->n;
}

struct bn_model_entry *bn_models_at(struct bn_models *m, uint32_t index)
{
	return index < m->n ? &m->entries[index] : NULL;
}

struct bn_model_entry *bn_models_find(struct bn_models *m, const char *name)
{
	if (!name || !*name)
		return &m->entries[0];
	for (uint32_t i = 0; i < m->n; i++)
		if (!strcmp(m->entries[i].opt.name, name))
			return &m->entries[i];
	return NULL;
}

uint64_t bn_models_budget(const struct bn_models *m)
{
	return m->budget;
}

uint64_t bn_models_loaded_bytes(const struct bn_models *m)
{
	/* What the lent pools borrowed from a model that left, until their sequences end. */
	uint64_t sum = bn_kv_ledger_overflow(&m->kv_ledger);
	for (uint32_t i = 0; i < m->n; i++)
		if (models_resident(&m->entries[i]))
			sum += models_entry_bytes(&m->entries[i]);
	return sum;
}

const struct bn_model_view *bn_models_default_view(const struct bn_models *m)
{
	return m->entries[0].view;
}

static int64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------------------------------ */
/* Loaded and unloaded                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* The load ended well: the backend joins e's scheduler (its KV pool sized). 0, or < 0 when
 * the pool could not be made (the backend closed then). */
static int attach(struct bn_models *m, struct bn_model_entry *e, void *backend,
		  const struct bn_model_desc *desc, uint64_t now)
{
	int rc = bn_sched_attach(e->sched, backend, desc, e->tenants, e->n_tenants);
	if (rc < 0) {
		m->ops->close(backend);
		return rc;
	}
	e->backend = backend;
	e->state = BN_MODEL_LOADED;
	e->weight_bytes = desc->weight_bytes;
	e->kv_bytes = bn_sched_kv_bytes(e->sched);
	e->loaded_at = now;
	e->load_ns = (uint64_t)(e->report.seconds * 1e9);
	e->shown.seconds = e->report.seconds;
	snprintf(e->shown.path, sizeof(e->shown.path), "%s", e->report.path);
	e->counters.loads++;
	e->wanted_since = 0;
	e->load_asked = 0;
	e->yielding = 0;
	e->error[0] = 0;
	e->idle_since = models_entry_refs(e) ? 0 : now;
	e->idle_since_wall_ms = e->idle_since ? wall_ms() : 0;
	bn_sched_set_admitting(e->sched, 1);
	if (m->budget && bn_models_loaded_bytes(m) > m->budget)
		bn_log_warn("msg=\"the loaded models hold more than --memory\" model=%s loaded_bytes=%llu budget=%llu",
			    e->opt.name, (unsigned long long)bn_models_loaded_bytes(m),
			    (unsigned long long)m->budget);
	bn_log_info("msg=\"model ready\" model=%s weight_bytes=%llu kv_bytes=%llu loaded_bytes=%llu",
		    e->opt.name, (unsigned long long)e->weight_bytes,
		    (unsigned long long)e->kv_bytes, (unsigned long long)bn_models_loaded_bytes(m));
	return 0;
}

/* e's backend goes (nothing of it runs); its waiting requests stay for its next load. */
static void unload(struct bn_models *m, struct bn_model_entry *e, enum bn_unload_reason why,
		   uint64_t now)
{
	bn_sched_detach(e->sched);
	m->ops->close(e->backend);
	e->backend = NULL;
	e->state = BN_MODEL_UNLOADED;
	e->yielding = 0;
	e->counters.unloads[why]++;
	bn_sched_set_admitting(e->sched, 1);
	if (bn_sched_waiting(e->sched) && !e->wanted_since)
		e->wanted_since = now;
	if (e->reload_pending)
		e->load_asked = 1;
	bn_log_info("msg=\"model unloaded\" model=%s reason=%s waiting=%u loaded_bytes=%llu",
		    e->opt.name, bn_unload_reason_names[why], bn_sched_waiting(e->sched),
		    (unsigned long long)bn_models_loaded_bytes(m));
}

/* e failed to load (or can never fit): its waiting requests end with BN_E_MODEL_LOAD. */
static void fail(struct bn_model_entry *e, const char *why)
{
	snprintf(e->error, sizeof(e->error), "%s", why);
	e->state = BN_MODEL_FAILED;
	e->counters.load_failures++;
	e->wanted_since = 0;
	e->load_asked = 0;
	if (e->reload_pending) {
		e->reload_pending = 0;
		e->reloads = e->reload_asked;
	}
	bn_sched_end_waiting_error(e->sched, e->tenants, e->n_tenants, BN_STATUS_ERROR,
				   BN_E_MODEL_LOAD);
	bn_log_warn("msg=\"model not loaded\" model=%s why=\"%s\"", e->opt.name, why);
}

/* Drains e: nothing more is admitted, its running requests finish until the drain timeout. */
static void begin_unload(struct bn_models *m, struct bn_model_entry *e, enum bn_unload_reason why,
			 uint64_t now)
{
	e->state = BN_MODEL_UNLOADING;
	e->unloading_for = why;
	e->unload_deadline = now + (uint64_t)m->cfg->drain_timeout_ms * 1000000u;
	bn_sched_set_admitting(e->sched, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* A reload's outcome                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* The file e loaded says something else to clients than its view: a new view (and scheduler)
 * for the sessions to come; the sessions bound to the old one lose their waiting requests
 * (1022) and are closed by the loop (a retired view). 0, or -ENOMEM. */
static int new_facts(struct bn_models *m, struct bn_model_entry *e, const struct bn_model_desc *desc)
{
	struct bn_model_view *v = models_view_new(m, e, desc, &m->loader.prep);
	if (!v)
		return -ENOMEM;
	if (models_desc_same(&e->view->desc, desc) && bn_control_same(&e->view->control, &v->control)) {
		models_view_put(v); /* the same to every client: the sessions stay */
		return 0;
	}
	struct bn_sched_config sc;
	models_sched_config(m, e, v, &sc);
	struct bn_sched *s = bn_sched_create(m->ops, &v->desc, &sc, &bn_session_reply);
	if (!s) {
		models_view_put(v);
		return -ENOMEM;
	}
	bn_sched_end_waiting_error(e->sched, e->tenants, e->n_tenants, BN_STATUS_ERROR,
				   BN_E_MODEL_UNLOADED);
	bn_sched_free(e->sched);
	e->sched = s;
	e->sched_cfg = sc;
	/* The old view keeps the registry's reference until the daemon ends: its grammar
	 * service's eventfd may be read in the loop's io_uring until then. */
	e->view->next_retired = m->retired;
	m->retired = e->view;
	e->view->retired = 1;
	m->retired_gen++;
	e->view = v;
	bn_log_info("msg=\"model changed: its sessions end and reconnect\" model=%s name=\"%s\" vocab_size=%u context_length=%u",
		    e->opt.name, desc->name, desc->vocab_size, desc->context_length);
	return 0;
}

static void finish_load(struct bn_models *m, uint64_t now)
{
	int rc;
	void *backend;
	struct bn_model_desc desc;
	if (!m->loading)
		return;
	struct bn_model_entry *e = models_loader_take(m, &rc, &backend, &desc);
	if (!e)
		return;
	m->loading = NULL;
	if (rc < 0) {
		fail(e, "the model file could not be loaded (the daemon's log says why)");
		return;
	}
	int reload = e->reload_pending;
	if (reload && new_facts(m, e, &desc) < 0) {
		m->ops->close(backend);
		fail(e, "no memory for the reloaded model's vocabulary");
		return;
	}
	if (!reload && !models_desc_same(&e->view->desc, &desc)) {
		m->ops->close(backend);
		fail(e, "the file says something else than when the daemon started: reload it "
			"(bitnet-cli models reload)");
		return;
	}
	if (attach(m, e, backend, &desc, now) < 0) {
		fail(e, "its KV cache could not be allocated (the daemon's log says why)");
		return;
	}
	if (reload) {
		models_file_id(e->opt.path, &e->file);
		e->reload_pending = 0;
		e->reloads = e->reload_asked;
	}
	if (e->unload_asked) {
		e->unload_asked = 0;
		begin_unload(m, e, BN_UNLOAD_COMMAND, now);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Room: eviction, turns, the next load                                                        */
/* ------------------------------------------------------------------------------------------ */

/* The loaded, unpinned model unused longest among those `pick` accepts, or NULL. */
static struct bn_model_entry *least_used(struct bn_models *m, const struct bn_model_entry *not,
					 int (*pick)(const struct bn_model_entry *, uint64_t),
					 uint64_t now)
{
	struct bn_model_entry *best = NULL;
	for (uint32_t i = 0; i < m->n; i++) {
		struct bn_model_entry *e = &m->entries[i];
		if (e == not || e->state != BN_MODEL_LOADED || e->opt.pinned || !pick(e, now))
			continue;
		if (!best || e->last_used < best->last_used)
			best = e;
	}
	return best;
}

static int idle(const struct bn_model_entry *e, uint64_t now)
{
	(void)now;
	return models_entry_refs(e) == 0;
}

/* Busy, not yielding yet, and resident long enough to give its turn up. */
static int may_yield(const struct bn_model_entry *e, uint64_t now)
{
	uint64_t stay = 2 * e->load_ns > MIN_RESIDENCY_NS ? 2 * e->load_ns : MIN_RESIDENCY_NS;
	return !e->yielding && now - e->loaded_at >= stay;
}

/* The model that has waited for a load longest, or NULL. */
static struct bn_model_entry *next_wanted(struct bn_models *m, uint64_t now)
{
	struct bn_model_entry *head = NULL;
	for (uint32_t i = 0; i < m->n; i++) {
		struct bn_model_entry *e = &m->entries[i];
		if (e->state != BN_MODEL_UNLOADED && e->state != BN_MODEL_FAILED)
			continue;
		if (!e->wanted_since && (bn_sched_waiting(e->sched) || e->load_asked))
			e->wanted_since = now;
		if (e->wanted_since && (!head || e->wanted_since < head->wanted_since))
			head = e;
	}
	return head;
}

static uint64_t pinned_bytes(const struct bn_models *m, const struct bn_model_entry *not)
{
	uint64_t sum = 0;
	for (uint32_t i = 0; i < m->n; i++)
		if (&m->entries[i] != not && m->entries[i].opt.pinned && models_resident(&m->entries[i]))
			sum += models_entry_bytes(&m->entries[i]);
	return sum;
}

/* What every model's compiled grammars hold now (kept in its cache or used by sessions,
 * current views and retired ones): inside --memory too. With `trim`, the caches first let go
 * of what nobody uses. */
static uint64_t grammar_bytes(struct bn_models *m, int trim)
{
	uint64_t sum = 0;
	for (uint32_t i = 0; i <= m->n; i++)
		for (struct bn_model_view *v = i < m->n ? m->entries[i].view : m->retired; v;
		     v = i < m->n ? NULL : v->next_retired) {
			if (trim)
				bn_grammar_service_trim(&v->grammars);
			sum += bn_grammar_service_bytes(&v->grammars);
		}
	return sum;
}

/* Frees room for `need` bytes beside the loaded models and every model's grammars: grammars
 * kept for a next time go first, then idle models at once, then busy ones are asked for their
 * turn (they admit nothing more and go once their running requests are done). KV that the
 * loaded models borrowed from one unloaded here (the ledger's overflow) comes back as their
 * requests end: no turn is asked for it. Returns whether the room is there now. */
static int make_room(struct bn_models *m, const struct bn_model_entry *for_whom, uint64_t need,
		     uint64_t now)
{
	uint64_t loaded = bn_models_loaded_bytes(m) + grammar_bytes(m, 0);
	if (loaded + need > m->budget)
		loaded = bn_models_loaded_bytes(m) + grammar_bytes(m, 1);
	struct bn_model_entry *e;
	while (loaded + need > m->budget && (e = least_used(m, for_whom, idle, now))) {
		unload(m, e, BN_UNLOAD_MEMORY, now);
		loaded = bn_models_loaded_bytes(m) + grammar_bytes(m, 0);
	}
	uint64_t firm = loaded - bn_kv_ledger_overflow(&m->kv_ledger), leaving = 0;
	for (uint32_t i = 0; i < m->n; i++)
		if (m->entries[i].yielding)
			leaving += models_entry_bytes(&m->entries[i]);
	while (firm + need > m->budget + leaving && (e = least_used(m, for_whom, may_yield, now))) {
		e->yielding = 1;
		bn_sched_set_admitting(e->sched, 0);
		leaving += models_entry_bytes(e);
		bn_log_info("msg=\"model gives its turn up\" model=%s for=%s running=%u waiting=%u",
			    e->opt.name, for_whom->opt.name, bn_sched_running(e->sched),
			    bn_sched_waiting(e->sched));
	}
	return loaded + need <= m->budget;
}

/* Models that gave their turn up go once nothing of theirs runs; when no model waits for
 * room any more, the others admit again. */
static void settle_turns(struct bn_models *m, int someone_waits, uint64_t now)
{
	for (uint32_t i = 0; i < m->n; i++) {
		struct bn_model_entry *e = &m->entries[i];
		if (!e->yielding || e->state != BN_MODEL_LOADED)
			continue;
		if (!someone_waits) {
			e->yielding = 0;
			bn_sched_set_admitting(e->sched, 1);
		} else if (bn_sched_running(e->sched) == 0) {
			unload(m, e, BN_UNLOAD_MEMORY, now);
		}
	}
}

static void start_load(struct bn_models *m, struct bn_model_entry *e)
{
	uint32_t threads = m->cfg->threads;
	for (uint32_t i = 0; i < m->n; i++)
		if (m->entries[i].state == BN_MODEL_LOADED) {
			/* The others keep serving: the repack takes half the threads. */
			long cpus = sysconf(_SC_NPROCESSORS_ONLN);
			uint32_t all = threads ? threads : cpus > 0 ? (uint32_t)cpus : 1;
			threads = all / 2 ? all / 2 : 1;
			break;
		}
	e->state = BN_MODEL_LOADING;
	e->error[0] = 0;
	bn_log_info("msg=\"loading model\" model=%s waiting=%u loaded_bytes=%llu",
		    e->opt.name, bn_sched_waiting(e->sched),
		    (unsigned long long)bn_models_loaded_bytes(m));
	m->loading = e;
	models_loader_begin(m, e, threads, e->reload_pending);
}

static void schedule_load(struct bn_models *m, uint64_t now)
{
	struct bn_model_entry *h = next_wanted(m, now);
	settle_turns(m, h != NULL, now);
	if (!h || m->loading)
		return;
	struct bn_file_id id;
	if (!h->reload_pending && h->opt.source && m->ops != &bn_backend_loopback &&
	    models_file_id(h->opt.path, &id) == 0 && memcmp(&id, &h->file, sizeof(id)) != 0) {
		fail(h, "the model file changed since the daemon read it: reload it "
			"(bitnet-cli models reload)");
		return;
	}
	uint64_t need = models_entry_bytes(h);
	if (m->budget && need + pinned_bytes(m, h) > m->budget) {
		char why[200];
		snprintf(why, sizeof(why), "the model needs %llu bytes (weights %llu, KV %llu); "
			 "--memory is %llu and pinned models hold %llu",
			 (unsigned long long)need, (unsigned long long)h->weight_bytes,
			 (unsigned long long)h->kv_bytes, (unsigned long long)m->budget,
			 (unsigned long long)pinned_bytes(m, h));
		fail(h, why);
		return;
	}
	if (m->budget && !make_room(m, h, need, now))
		return;
	settle_turns(m, 0, now);
	start_load(m, h);
}

/* ------------------------------------------------------------------------------------------ */
/* The loop's turn                                                                             */
/* ------------------------------------------------------------------------------------------ */

static void finish_unloads(struct bn_models *m, uint64_t now)
{
	for (uint32_t i = 0; i < m->n; i++) {
		struct bn_model_entry *e = &m->entries[i];
		if (e->state != BN_MODEL_UNLOADING)
			continue;
		if (bn_sched_running(e->sched) && now < e->unload_deadline)
			continue;
		bn_sched_end_running_error(e->sched, BN_STATUS_ERROR, BN_E_MODEL_UNLOADED);
		unload(m, e, e->unloading_for, now);
	}
}

/* Idle times: when each model last became idle, and those whose keep-alive passed. */
static void keep_alive(struct bn_models *m, uint64_t now)
{
	for (uint32_t i = 0; i < m->n; i++) {
		struct bn_model_entry *e = &m->entries[i];
		if (e->state != BN_MODEL_LOADED)
			continue;
		if (models_entry_refs(e)) {
			e->idle_since = 0;
			continue;
		}
		if (!e->idle_since) {
			e->idle_since = now;
			e->idle_since_wall_ms = wall_ms();
			e->last_used = now;
		}
		int64_t ka = e->opt.keep_alive_ms >= 0 ? e->opt.keep_alive_ms : m->cfg->keep_alive_ms;
		if (ka >= 0 && !e->opt.pinned && now - e->idle_since >= (uint64_t)ka * 1000000u)
			unload(m, e, BN_UNLOAD_IDLE, now);
	}
}

void bn_models_tick(struct bn_models *m, uint64_t now)
{
	finish_load(m, now);
	finish_unloads(m, now);
	keep_alive(m, now);
	schedule_load(m, now);
	models_grammar_room(m); /* after the loads and unloads begun or ended */
}

static int step_due(struct bn_model_entry *e, uint64_t now, uint32_t window_us)
{
	if (bn_sched_running(e->sched))
		return 1;
	uint32_t waiting = bn_sched_waiting(e->sched);
	if (waiting == 0 || e->yielding || e->state != BN_MODEL_LOADED) {
		e->first_waiting = 0;
		return 0;
	}
	if (!e->first_waiting)
		e->first_waiting = now;
	return waiting >= bn_sched_max_batch(e->sched) ||
	       now - e->first_waiting >= (uint64_t)window_us * 1000u;
}

/* The models whose steps are due, in round-robin order from the cursor: the first, and, where
 * the registry's backend lets steps overlap (models_overlap.c), every other. Returns how many
 * (0: none due). */
static uint32_t due_models(struct bn_models *m, uint64_t now)
{
	struct bn_model_entry **due = m->due;
	uint32_t n = 0, start = m->step_cursor;
	for (uint32_t k = 0; k < m->n; k++) {
		uint32_t i = (start + k) % m->n;
		struct bn_model_entry *e = &m->entries[i];
		if (!bn_sched_attached(e->sched) || !step_due(e, now, m->cfg->batch_window_us))
			continue;
		if (!n)
			m->step_cursor = (i + 1) % m->n;
		due[n++] = e;
		if (!m->ops->concurrent_steps)
			break; /* one step at a time: the others wait for their turn */
	}
	return n;
}

/* Several due steps at once: each planned, then run together, then delivered in turn. */
static void step_together(struct bn_models *m, uint32_t n)
{
	struct bn_model_entry **due = m->due;
	struct bn_sched **run = m->due_scheds;
	uint32_t n_run = 0;
	for (uint32_t k = 0; k < n; k++)
		if (bn_sched_step_begin(due[k]->sched, due[k]->tenants, due[k]->n_tenants))
			run[n_run++] = due[k]->sched;
	uint32_t beside = n_run ? models_overlap_run(m, run, n_run) : 0;
	for (uint32_t k = 0; k < n; k++) {
		struct bn_model_entry *e = due[k];
		uint32_t rows = bn_sched_step_end(e->sched);
		e->first_waiting = 0;
		e->counters.steps += rows > 0;
		e->counters.overlapped_steps += rows > 0 && beside > 0;
	}
}

uint32_t bn_models_step(struct bn_models *m, uint64_t now)
{
	for (uint32_t i = 0; i < m->n; i++) {
		struct bn_model_entry *e = &m->entries[i];
		if (!bn_sched_attached(e->sched) && bn_sched_waiting(e->sched))
			bn_sched_step(e->sched, e->tenants, e->n_tenants); /* cancels, deadlines */
	}
	uint32_t n = due_models(m, now);
	if (!n)
		return 0;
	step_together(m, n);
	return 1;
}

int bn_models_admissible(const struct bn_models *m)
{
	for (uint32_t i = 0; i < m->n; i++) {
		const struct bn_model_entry *e = &m->entries[i];
		if (e->state == BN_MODEL_LOADED && !e->yielding && bn_sched_waiting(e->sched))
			return 1;
	}
	return 0;
}

uint32_t bn_models_running(const struct bn_models *m)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < m->n; i++)
		n += bn_sched_running(m->entries[i].sched);
	return n;
}

uint32_t bn_models_waiting(const struct bn_models *m)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < m->n; i++)
		n += bn_sched_waiting(m->entries[i].sched);
	return n;
}

uint64_t bn_models_sleep_cap(const struct bn_models *m)
{
	for (uint32_t i = 0; i < m->n; i++) {
		const struct bn_model_entry *e = &m->entries[i];
		if (bn_sched_waiting(e->sched) || e->state == BN_MODEL_UNLOADING || e->yielding)
			return DETACHED_SWEEP_NS;
	}
	return UINT64_MAX;
}

int bn_models_event_fd(const struct bn_models *m)
{
	return m->loader.event_fd;
}

uint64_t *bn_models_event_buf(struct bn_models *m)
{
	return &m->loader.event_value;
}

/* ------------------------------------------------------------------------------------------ */
/* Sessions                                                                                    */
/* ------------------------------------------------------------------------------------------ */

struct bn_model_view *bn_model_bind(struct bn_model_entry *e, struct bn_tenant *t)
{
	e->tenants[e->n_tenants++] = t;
	e->view->refs++;
	return e->view;
}

void bn_model_unbind(struct bn_models *m, struct bn_model_view *v, struct bn_tenant *t)
{
	(void)m;
	struct bn_model_entry *e = v->entry;
	for (uint32_t i = 0; i < e->n_tenants; i++)
		if (e->tenants[i] == t) {
			e->tenants[i] = e->tenants[--e->n_tenants];
			break;
		}
	models_view_put(v); /* never the last: the registry holds one, retired views too */
}

uint64_t bn_models_retired_gen(const struct bn_models *m)
{
	return m->retired_gen;
}

void bn_model_request_taken(struct bn_model_entry *e, uint64_t now)
{
	e->last_used = now;
	e->idle_since = 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Commands                                                                                    */
/* ------------------------------------------------------------------------------------------ */

void bn_model_command_load(struct bn_models *m, struct bn_model_entry *e)
{
	(void)m;
	if (e->state == BN_MODEL_UNLOADED || e->state == BN_MODEL_FAILED)
		e->load_asked = 1;
	e->unload_asked = 0;
}

void bn_model_command_unload(struct bn_models *m, struct bn_model_entry *e, uint64_t now)
{
	e->load_asked = 0;
	if (e->state == BN_MODEL_LOADING)
		e->unload_asked = 1;
	else if (e->state == BN_MODEL_LOADED)
		begin_unload(m, e, BN_UNLOAD_COMMAND, now);
}

static void reload_one(struct bn_models *m, struct bn_model_entry *e, uint64_t now)
{
	struct bn_file_id id;
	e->reload_asked++;
	if (!e->opt.source || m->ops == &bn_backend_loopback || (e->state != BN_MODEL_FAILED && models_file_id(e->opt.path, &id) == 0 &&
			       !memcmp(&id, &e->file, sizeof(id)))) {
		e->reloads = e->reload_asked; /* unchanged: nothing to do */
		return;
	}
	e->reload_pending = 1;
	if (e->state == BN_MODEL_LOADED)
		begin_unload(m, e, BN_UNLOAD_RELOAD, now);
	else if (e->state == BN_MODEL_UNLOADED || e->state == BN_MODEL_FAILED)
		e->load_asked = 1;
	bn_log_info("msg=\"model file changed: reloading\" model=%s path=\"%s\"", e->opt.name,
		    e->opt.path);
}

void bn_model_command_reload(struct bn_models *m, struct bn_model_entry *e, uint64_t now)
{
	for (uint32_t i = 0; i < m->n; i++)
		if (!e || e == &m->entries[i])
			reload_one(m, &m->entries[i], now);
}

int bn_models_reloads_done(const struct bn_models *m)
{
	for (uint32_t i = 0; i < m->n; i++)
		if (m->entries[i].reloads != m->entries[i].reload_asked)
			return 0;
	return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Shutdown                                                                                    */
/* ------------------------------------------------------------------------------------------ */

void bn_models_end_waiting(struct bn_models *m, uint32_t status)
{
	for (uint32_t i = 0; i < m->n; i++) {
		struct bn_model_entry *e = &m->entries[i];
		bn_sched_end_waiting(e->sched, e->tenants, e->n_tenants, status);
	}
}

void bn_models_end_running(struct bn_models *m, uint32_t status)
{
	for (uint32_t i = 0; i < m->n; i++)
		bn_sched_end_running(m->entries[i].sched, status);
}
