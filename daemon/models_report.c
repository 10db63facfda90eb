/* SPDX-License-Identifier: MIT */
/*
 * models_report.c — what the registry says about its models (models.h): the MODELS control
 * op's lines (shm/PROTOCOL.md §15.3) and the per-model STATS families.
 */
#define _GNU_SOURCE
#include "models_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t bn_model_line(const struct bn_models *m, const struct bn_model_entry *e, char *buf,
		     size_t cap)
{
	const struct bn_model_desc *d = &e->view->desc;
	int64_t keep = e->opt.keep_alive_ms >= 0 ? e->opt.keep_alive_ms : m->cfg->keep_alive_ms;
	uint32_t waiting = bn_sched_waiting(e->sched), running = bn_sched_running(e->sched);
	int idle = e->state == BN_MODEL_LOADED && waiting + running == 0 && e->idle_since;
	int n = snprintf(buf, cap,
			 "name=%s state=%s default=%d pinned=%d bytes=%" PRIu64 " weight_bytes=%" PRIu64
			 " kv_bytes=%" PRIu64 " idle_since_ms=%" PRId64 " waiting=%u running=%u"
			 " context=%u vocab_size=%u loads=%" PRIu64 " keep_alive_ms=%" PRId64
			 " error=%s\n",
			 e->opt.name, bn_model_state_names[e->state], e->index == 0, e->opt.pinned,
			 models_entry_bytes(e), e->weight_bytes, e->kv_bytes,
			 idle ? e->idle_since_wall_ms : (int64_t)0, waiting, running,
			 d->context_length, d->vocab_size, e->counters.loads, keep, e->error);
	if (n < 0 || cap == 0)
		return 0;
	if ((size_t)n >= cap) { /* cut, still one line */
		buf[cap - 2] = '\n';
		return cap - 1;
	}
	return (size_t)n;
}

long bn_models_text(const struct bn_models *m, char **out)
{
	size_t cap = (size_t)m->n * 1024, len = 0;
	char *text = malloc(cap);
	if (!text)
		return -ENOMEM;
	for (uint32_t i = 0; i < m->n; i++)
		len += bn_model_line(m, &m->entries[i], text + len, cap - len);
	*out = text;
	return (long)len;
}

void bn_models_stats_view(struct bn_models *m, struct bn_stats_view *v)
{
	const struct bn_model_entry *def = &m->entries[0];
	for (uint32_t i = 0; i < m->n; i++) {
		struct bn_model_entry *e = &m->entries[i];
		struct bn_stats_model *row = &m->stats_rows[i];
		uint32_t total = 0, used = 0, reserved = 0, block_tokens = 0, cached = 0;
		uint64_t evictions = 0;
		bn_sched_kv_usage(e->sched, &total, &used, &reserved, &block_tokens);
		bn_sched_cache_usage(e->sched, &cached, &evictions);
		/* The daemon-wide families: the sums over the models. */
		v->queued += bn_sched_waiting(e->sched);
		v->running += bn_sched_running(e->sched);
		v->kv_blocks_total += total;
		v->kv_blocks_used += used;
		v->kv_blocks_reserved += reserved;
		v->kv_blocks_cached += cached;
		v->kv_evictions += evictions;
		if (block_tokens)
			v->kv_block_tokens = block_tokens;
		/* The shown seconds and path; the cache's state live (its writer may move it). */
		e->shown.weights_cache = __atomic_load_n(&e->report.weights_cache, __ATOMIC_ACQUIRE);
		*row = (struct bn_stats_model){
			.name = e->opt.name,
			.state = bn_model_state_names[e->state],
			.bytes = models_entry_bytes(e),
			.queued = bn_sched_waiting(e->sched),
			.running = bn_sched_running(e->sched),
			.kv_blocks_total = total,
			.kv_blocks_used = used,
			.counters = &e->counters,
			.load = &e->shown,
		};
	}
	if (!v->kv_block_tokens)
		v->kv_block_tokens = m->cfg->kv_block_tokens;
	v->load = &def->shown;
	v->models = m->stats_rows;
	v->n_models = m->n;
	v->model_states = bn_model_state_names;
	v->n_model_states = BN_MODEL_STATES;
	v->unload_reasons = bn_unload_reason_names;
	v->memory_budget = m->budget;
	v->memory_loaded = bn_models_loaded_bytes(m);
}
