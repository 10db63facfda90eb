/* SPDX-License-Identifier: MIT */
/*
 * models_internal.h — what the registry's files share (models.h): models.c (the lifecycle),
 * models_load.c (opening models: the start-up probes, the loader thread, views) and
 * models_report.c (the MODELS text, the STATS view). Nothing else includes it.
 */
#ifndef BITNETD_MODELS_INTERNAL_H
#define BITNETD_MODELS_INTERNAL_H

#include "models.h"

#include "pool.h"
#include "textprep.h"

#include <pthread.h>

/* The thread that opens models while the loop serves the others. One load at a time: the
 * loop hands it an entry and reads the result once the eventfd says it is done. */
struct bn_loader {
	pthread_t thread;
	int started;
	pthread_mutex_t lock;
	pthread_cond_t work;
	int stop;
	struct bn_model_entry *job;    /* the entry being loaded, NULL when idle */
	int done;                      /* job's open has returned: rc, backend and desc hold it
					* (atomic: the loop looks without the lock first) */
	int rc;
	void *backend;
	struct bn_model_desc desc;
	char path[PATH_MAX];           /* what the job opens (copied: a reload may change it) */
	uint32_t load_threads;
	int text;                      /* the job builds the text side too (a reload) */
	struct bn_text_prep prep;      /* what it built, for the job's new view to take */
	int event_fd;
	uint64_t event_value;          /* the loop's read target */
};

struct bn_models {
	const struct bn_config *cfg;
	const struct bn_backend_ops *ops; /* the backend every model opens with */
	struct bn_pool *pool;          /* cpu: the one pool every model's steps run on */
	struct bn_model_entry *entries; /* [n] */
	uint32_t n;
	uint64_t budget;               /* bytes of all loaded models; 0: none */
	uint32_t step_cursor;          /* the model whose step comes next, round-robin */
	uint64_t first_waiting;        /* the batch window's start (config.h batch_window_us) */
	struct bn_model_view *retired; /* views no longer current, kept until the end */
	uint64_t retired_gen;
	struct bn_model_entry *loading; /* the entry the loader has, NULL when it is idle */
	struct bn_loader loader;
	struct bn_stats_model *stats_rows; /* [n], for bn_models_stats_view */
	struct bn_sched_users *users;  /* running sequences per uid over every model's scheduler:
					* --max-running-per-user holds across models */
	struct bn_kv_ledger kv_ledger; /* --kv-memory lent between the models (models_kv_lent) */
	struct bn_grammar_budget *grammar_budget; /* every model's grammars, inside --memory */
	struct models_stepper *steppers; /* [n]: threads for overlapped steps (models_overlap.c) */
	struct bn_model_entry **due;   /* [n] one loop turn's due models (bn_models_step) */
	struct bn_sched **due_scheds;  /* [n] those of them with a step to run */
};

/* ---- models_overlap.c ---------------------------------------------------------------- */

/* Runs the begun steps of s[0 .. n) at once: s[0]'s on the calling thread, each other on a
 * stepper thread (on the calling thread after the others where none can start); returns when
 * all have run, with how many ran on steppers (0 for n = 1). Their backend must allow it
 * (bn_backend_ops.concurrent_steps). */
uint32_t models_overlap_run(struct bn_models *m, struct bn_sched *const *s, uint32_t n);
/* Stops the steppers (none may be running a step). */
void models_overlap_close(struct bn_models *m);

/* ---- models_load.c ------------------------------------------------------------------- */

/* Opens e's file on the calling thread with the registry's backend (its description, with
 * its options applied, in *desc). 0, or < 0 after logging why. */
int models_open(struct bn_models *m, struct bn_model_entry *e, const char *path,
		uint32_t load_threads, void **backend, struct bn_model_desc *desc);
/* The --device auto choice for the first model: ops, pool and the open (as models_open). */
int models_open_first(struct bn_models *m, struct bn_model_entry *e, void **backend,
		      struct bn_model_desc *desc);
/* Starts building e's text side from the file at path (textprep.h) with e's choices. */
void models_text_prep_start(const struct bn_models *m, const struct bn_model_entry *e,
			    const char *path, struct bn_text_prep *prep);
/* A view of desc for e: the vocabulary, the text and grammar services, the session limits;
 * the text side from prep when it was built (taken), else built here. NULL without memory
 * or threads. */
struct bn_model_view *models_view_new(struct bn_models *m, struct bn_model_entry *e,
				      const struct bn_model_desc *desc, struct bn_text_prep *prep);
/* The scheduler's options for e as view v describes it: its KV share, its speculative
 * options, the vocabulary's end-of-generation ids. */
void models_sched_config(struct bn_models *m, const struct bn_model_entry *e,
			 const struct bn_model_view *v, struct bn_sched_config *out);
/* Drops a reference; the last one frees the view. */
void models_view_put(struct bn_model_view *v);
/* Whether two descriptions say the same to clients (a reload that keeps its sessions). */
int models_desc_same(const struct bn_model_desc *a, const struct bn_model_desc *b);
/* The identity of path now (0), or -errno. */
int models_file_id(const char *path, struct bn_file_id *out);
/* What --memory leaves the grammars beside the models that hold memory now (loading, loaded,
 * draining): the grammar budget's limit, which compiles check (none without a budget). */
void models_grammar_room(struct bn_models *m);

int models_loader_start(struct bn_models *m);
void models_loader_stop(struct bn_models *m);
/* Hands e to the loader (idle): it opens e's file with load_threads threads and, with
 * `text` (a reload), builds its text side beside it (bn_loader.prep, for the new view). */
void models_loader_begin(struct bn_models *m, struct bn_model_entry *e, uint32_t load_threads,
			 int text);
/* The load that ended, or NULL when none did (the result into rc, backend, desc). */
struct bn_model_entry *models_loader_take(struct bn_models *m, int *rc, void **backend,
					  struct bn_model_desc *desc);

/* ---- models.c ------------------------------------------------------------------------ */

/* e's bytes as the budget counts them: its weights and its KV pool (or the pool it will
 * get). */
static inline uint64_t models_entry_bytes(const struct bn_model_entry *e)
{
	return e->weight_bytes + e->kv_bytes;
}

/* e holds memory: loading, loaded or draining. */
static inline int models_resident(const struct bn_model_entry *e)
{
	return e->state == BN_MODEL_LOADING || e->state == BN_MODEL_LOADED ||
	       e->state == BN_MODEL_UNLOADING;
}
/* Requests of e waiting or running. */
uint32_t models_entry_refs(const struct bn_model_entry *e);

#endif /* BITNETD_MODELS_INTERNAL_H */
