/* SPDX-License-Identifier: MIT */
/*
 * models.h — the models one daemon serves, by name (daemon/README.md, "Several models in one
 * daemon"; shm/PROTOCOL.md §15): the registry (models.c: states, the memory budget, loads,
 * eviction, turns, unloads, reloads, round-robin steps), its loader (models_load.c: start-up
 * probes, the thread that loads off the loop, views) and the MODELS text (models_report.c).
 *
 * Every model has a scheduler for its whole life (its sessions' queues) and, while loaded, a
 * backend instance and a KV pool. A session is bound to one model and holds a reference to
 * its *view*: the description its header was written from, the vocabulary and text service,
 * the grammar service. Everything here runs on the loop thread but the loader's open.
 */
#ifndef BITNETD_MODELS_H
#define BITNETD_MODELS_H

#include "backends/backend.h"
#include "common/stats.h"
#include "config.h"
#include "control.h"
#include "grammars.h"
#include "serve/sched.h"
#include "session.h"

#include <stdint.h>
#include <sys/types.h>

enum bn_model_state {
	BN_MODEL_UNLOADED,
	BN_MODEL_LOADING,   /* on the loader thread */
	BN_MODEL_LOADED,
	BN_MODEL_UNLOADING, /* draining its running requests (a command, keep-alive, a turn) */
	BN_MODEL_FAILED,    /* its last load failed (error says why); the next request retries */
	BN_MODEL_STATES
};
extern const char *const bn_model_state_names[BN_MODEL_STATES];

/* Why a model was unloaded: the reason label of bitnetd_model_unloads_total. */
enum bn_unload_reason {
	BN_UNLOAD_MEMORY,   /* room for another model (idle, or its turn over) */
	BN_UNLOAD_IDLE,     /* its keep_alive passed */
	BN_UNLOAD_COMMAND,  /* BN_CTL_MODEL_UNLOAD */
	BN_UNLOAD_RELOAD,   /* its file changed: BN_CTL_MODEL_RELOAD or SIGHUP */
	BN_UNLOAD_REASONS
};
_Static_assert(BN_UNLOAD_REASONS == BN_STATS_UNLOAD_REASONS, "a counter per reason");
extern const char *const bn_unload_reason_names[BN_UNLOAD_REASONS];

/* What its sessions see of a model: the header's description and the services that depend
 * on the vocabulary. A reload that changes them makes a new view; the old one lives until
 * the last session bound to it is gone. */
struct bn_model_view {
	uint32_t refs;                 /* sessions bound to it, plus the registry's while current */
	struct bn_model_entry *entry;
	struct bn_model_desc desc;
	struct bn_control control;     /* the vocabulary (VOCAB, TOKENIZER) and the text service */
	struct bn_grammar_service grammars;
	int grammars_armed;            /* the loop has a read of its eventfd in io_uring */
	int retired;                   /* a reload made another current: its sessions close */
	struct bn_session_limits limits;
	struct bn_model_view *next_retired;
};

/* The identity of a model file, to tell a changed one (a reload). */
struct bn_file_id {
	dev_t dev;
	ino_t ino;
	off_t size;
	int64_t mtime_ns;
};

struct bn_model_entry {
	struct bn_model_options opt;   /* name, path and options (config.h) */
	uint32_t index;                /* in the registry; 0 is the default model */
	enum bn_model_state state;
	struct bn_model_view *view;    /* the current one */
	struct bn_sched *sched;        /* its queues; attached while loaded */
	struct bn_sched_config sched_cfg;
	void *backend;                 /* while loaded or unloading */
	struct bn_tenant **tenants;    /* [max_sessions]: the sessions bound to it, dense */
	uint32_t n_tenants;
	uint64_t weight_bytes, kv_bytes; /* measured at its last load; kv_bytes its pool */
	uint64_t last_used;            /* monotonic ns: a request of it last taken or ended */
	uint64_t idle_since;           /* monotonic ns it last became idle; 0 while busy */
	int64_t idle_since_wall_ms;    /* the same, wall clock (MODELS) */
	uint64_t wanted_since;         /* monotonic ns it has waited for a load; 0: not */
	uint64_t first_waiting;        /* its batch window's start (config.h batch_window_us) */
	int load_asked;                /* a LOAD command (or a reload) wants it loaded */
	int unload_asked;              /* an UNLOAD command came while it was loading */
	int reload_pending;            /* a reload reads its file once it is unloaded */
	uint64_t loaded_at, load_ns;   /* when its last load ended, and how long it took */
	uint64_t unload_deadline;      /* UNLOADING: running requests end with 1022 then */
	enum bn_unload_reason unloading_for;
	int reload_after;              /* UNLOADING for a reload: load the file again after */
	int yielding;                  /* admits nothing: another model waits for its memory */
	uint64_t reload_asked, reloads; /* RELOAD commands asked and done (their replies) */
	struct bn_file_id file;
	struct bn_load_report report;  /* written by the backend (loader thread, cache writer) */
	struct bn_load_report shown;   /* its seconds and path, copied when the load ended */
	struct bn_model_counters counters;
	char error[256];               /* FAILED: why; "" otherwise */
};

struct bn_models;

/* Opens every model once (alone, so its description, bytes and packed-weight cache are
 * known), then loads the default model and the pinned ones. NULL after logging why, with
 * *exit_code set (BN_EXIT_BACKEND for a model, BN_EXIT_SYSTEM for memory or threads). */
struct bn_models *bn_models_open(const struct bn_config *cfg, int *exit_code);
/* Waits for a load in progress, unloads everything, frees the registry and every view. */
void bn_models_close(struct bn_models *m);

uint32_t bn_models_count(const struct bn_models *m);
struct bn_model_entry *bn_models_at(struct bn_models *m, uint32_t index);
/* The model named `name` (NULL or "": the default), or NULL. */
struct bn_model_entry *bn_models_find(struct bn_models *m, const char *name);
/* The memory budget in bytes (0: none), and the bytes loaded models hold now. */
uint64_t bn_models_budget(const struct bn_models *m);
uint64_t bn_models_loaded_bytes(const struct bn_models *m);
/* The default model's view (what the daemon-wide STATS families describe). */
const struct bn_model_view *bn_models_default_view(const struct bn_models *m);

/* ---- sessions ------------------------------------------------------------------------ */

/* A session's handshake binds it to e: a reference to e's current view, and its tenant in
 * e's scheduler's round-robin. */
struct bn_model_view *bn_model_bind(struct bn_model_entry *e, struct bn_tenant *t);
/* The session ends (its requests already ended): its tenant leaves, its view reference goes
 * (a view lives at least as long as the registry holds it: retired ones until the end). */
void bn_model_unbind(struct bn_models *m, struct bn_model_view *v, struct bn_tenant *t);
/* Changes whenever a view is retired: the loop then closes the sessions bound to it. */
uint64_t bn_models_retired_gen(const struct bn_models *m);
/* A request of e was taken off a ring (it holds the model from now on). */
void bn_model_request_taken(struct bn_model_entry *e, uint64_t now);

/* ---- the loop's turn ----------------------------------------------------------------- */

/* Lifecycle: loads that ended (attached, their waiting requests admitted from the next step),
 * unloads whose drain ended, keep-alive, the next load to start (idle models evicted, turns
 * asked), requests waiting for a model that can never fit. */
void bn_models_tick(struct bn_models *m, uint64_t now);
/* One step of the next loaded model that has work, round-robin (its batch window kept).
 * Returns the rows run, 0 when no model had a step due. Detached models' waiting requests
 * are swept for cancels and deadlines here too. */
uint32_t bn_models_step(struct bn_models *m, uint64_t now);
/* Requests waiting to be admitted by a loaded model (the loop spins rather than sleeps). */
int bn_models_admissible(const struct bn_models *m);
/* Requests waiting or running, over all models (a drain's end). */
uint32_t bn_models_running(const struct bn_models *m);
uint32_t bn_models_waiting(const struct bn_models *m);
/* The longest the loop may sleep: short while requests wait on a model that is not loaded
 * (their cancels and deadlines are looked at then), else UINT64_MAX. */
uint64_t bn_models_sleep_cap(const struct bn_models *m);

/* The loader's eventfd: readable when a load ended (the loop reads it in io_uring, then
 * calls bn_models_tick). */
int bn_models_event_fd(const struct bn_models *m);
uint64_t *bn_models_event_buf(struct bn_models *m);

/* ---- commands ------------------------------------------------------------------------ */

/* BN_CTL_MODEL_LOAD: e loads (when it can) as if a request waited for it; a no-op when
 * loaded. Done when e is LOADED or FAILED. */
void bn_model_command_load(struct bn_models *m, struct bn_model_entry *e);
/* BN_CTL_MODEL_UNLOAD: e drains and unloads. Done when e is UNLOADED (or FAILED). */
void bn_model_command_unload(struct bn_models *m, struct bn_model_entry *e, uint64_t now);
/* BN_CTL_MODEL_RELOAD and SIGHUP: e (NULL: every model) reads its file again where the file
 * changed. Done when every model's reloads caught up with its reload_asked. */
void bn_model_command_reload(struct bn_models *m, struct bn_model_entry *e, uint64_t now);
int bn_models_reloads_done(const struct bn_models *m);

/* ---- shutdown ------------------------------------------------------------------------ */

/* Every waiting request, of every model, ends with `status`. */
void bn_models_end_waiting(struct bn_models *m, uint32_t status);
/* Every running request ends with `status`. */
void bn_models_end_running(struct bn_models *m, uint32_t status);

/* ---- reports (models_report.c) ------------------------------------------------------- */

/* e's MODELS line (shm/PROTOCOL.md §15.3) into buf, with its '\n'. Returns its length (at
 * most cap - 1; the line is cut to fit). */
size_t bn_model_line(const struct bn_models *m, const struct bn_model_entry *e, char *buf,
		     size_t cap);
/* Every model's line; malloc'd text in *out. Returns the length, or -ENOMEM. */
long bn_models_text(const struct bn_models *m, char **out);
/* The per-model STATS families into the view the renderer takes (stats.h). */
void bn_models_stats_view(struct bn_models *m, struct bn_stats_view *v);

#endif /* BITNETD_MODELS_H */
