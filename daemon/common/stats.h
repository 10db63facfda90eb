/* SPDX-License-Identifier: MIT */
/*
 * stats.h — the daemon's counters, rendered as Prometheus text for the STATS control op.
 * Written by the loop thread only, so plain increments suffice.
 */
#ifndef BITNETD_STATS_H
#define BITNETD_STATS_H

#include <stddef.h>
#include <stdint.h>

#define BN_STATS_STATUSES 9 /* enum bn_status values 0..8 */
#define BN_STATS_ERRORS 23  /* enum bn_error values 1001..1023 */

/* Histograms (Prometheus cumulative buckets, fixed bounds chosen in stats.c). */
enum bn_hist {
	BN_HIST_BATCH_ROWS,     /* rows in one step */
	BN_HIST_BATCH_TOKENS,   /* tokens (non-padding cells) in one step */
	BN_HIST_STEP_SECONDS,   /* wall time of one backend step */
	BN_HIST_QUEUE_SECONDS,  /* request seen -> first step that included it */
	BN_HIST_TTFT_SECONDS,   /* request seen -> first token published */
	BN_HIST_ITL_SECONDS,    /* between consecutive tokens of one request */
	BN_HIST_COUNT
};

/* Why a connection got no session: the reason label of bitnetd_connections_refused_total. */
enum bn_refusal {
	BN_REFUSED_MAX_SESSIONS,    /* 1010 at accept: the table holds --max-sessions */
	BN_REFUSED_USER_SESSIONS,   /* 1010 at accept: the uid holds --max-sessions-per-user */
	BN_REFUSED_USER_HANDSHAKES, /* 1010: pushed out by a newer handshake of the same uid */
	BN_REFUSED_SHUTDOWN,        /* 1005: at accept or at the hello */
	BN_REFUSED_HELLO_TIMEOUT,   /* 1007: no whole hello within --handshake-timeout-ms */
	BN_REFUSED_PROTOCOL,        /* 1008: a bad hello */
	BN_REFUSED_VERSION,         /* 1009 */
	BN_REFUSED_BACKEND,         /* 1011: the segment could not be made */
	BN_REFUSED_WELCOME,         /* the welcome with the descriptors could not be sent */
	BN_REFUSED_MODEL,           /* 1020: the hello names a model the daemon does not serve */
	BN_REFUSALS
};

struct bn_stats {
	uint64_t sessions_opened;
	uint64_t sessions_closed;
	uint64_t refusals[BN_REFUSALS]; /* by enum bn_refusal; their sum is sessions_refused */
	uint64_t protocol_violations;
	uint64_t requests_submitted;
	uint64_t requests_finished[BN_STATS_STATUSES]; /* by terminal status */
	uint64_t request_errors[BN_STATS_ERRORS];      /* by error code - 1001 */
	uint64_t tokens_generated;
	uint64_t steps;
	uint64_t batch_rows;         /* sum of rows over steps */
	uint64_t batch_padding;      /* padded cells that held no token */
	uint64_t batch_cells;        /* rows x width, summed */
	uint64_t futex_wakes;        /* FUTEX_WAKE syscalls made */
	uint64_t doorbells;          /* eventfd reads completed (the daemon was rung) */
	uint64_t sleeps;             /* io_uring waits that could block */
	uint64_t sleep_timeouts;     /* of those, waits that ended by their timeout, no event */
	uint64_t uring_submits;      /* io_uring_enter calls that only submitted */
	uint64_t prefix_lookup_tokens; /* prompt positions the prefix cache could have held */
	uint64_t prefix_hit_tokens;    /* of those, positions taken from it (not computed) */
	uint64_t lm_head_screened_rows; /* greedy rows whose token came through the screen */
	uint64_t lm_head_screen_groups; /* float-head panel groups computed for them */
	uint64_t lm_head_full_rows;     /* rows the screen left to the full head (non-finite) */
	uint64_t spec_rows;             /* decode rows that verified drafts */
	uint64_t spec_drafted;          /* draft tokens they carried */
	uint64_t spec_accepted;         /* of those, published as the model's own */
	uint64_t spec_tokens;           /* tokens those rows published */
	const char *spec_mode;          /* who drafts: "request", "ngram" or "off" (NULL: off) */
	uint32_t spec_draft_tokens;     /* --draft-tokens */
	double load_seconds;            /* the backend's model load (bn_stats_set_load) */
	int weights_cache;              /* enum bn_weights_cache, read and written atomically */
	char weights_cache_path[4096];  /* the cache file, "" without one */
	char cuda_kernels[64];          /* the cuda backend's --cuda-kernels variant, "" elsewhere */
	/* The graph the weights run (the backend's model description): the FFN activation and
	 * what chose it, the float layer matrices of a bitnet* file by role and how many of them
	 * were packed to the ternary kernels, and those kept float. "" / 0 without a model. */
	char activation[8];
	char activation_why[256];
	uint32_t float_candidates[7], ternary_from_float[7];
	char kept_float[512];
};

extern struct bn_stats bn_stats;

/* The packed-weight cache's state (bitnetd_weights_cache): set at the load, and once more by
 * the thread that writes a built cache after the daemon is ready. */
enum bn_weights_cache {
	BN_WEIGHTS_CACHE_OFF,     /* none (no directory, --cache-dir none, no model) */
	BN_WEIGHTS_CACHE_HIT,     /* the weights mapped from it */
	BN_WEIGHTS_CACHE_WRITING, /* built at this start; being written */
	BN_WEIGHTS_CACHE_BUILT,   /* built at this start and written */
	BN_WEIGHTS_CACHE_FAILED,  /* built at this start, not written */
};
extern const char *const bn_weights_cache_names[]; /* [enum bn_weights_cache] */

void bn_stats_count_error(uint32_t error);
void bn_stats_observe(enum bn_hist h, double value);

/* Tokens published, at monotonic time now_ns (bn_now_ns()), for the tokens-per-second gauge.
 * Time is passed in so the window can be tested with synthetic clocks. */
void bn_stats_count_tokens(uint32_t n, uint64_t now_ns);
/* Tokens per second over the 10 s before now_ns (1-second buckets; the oldest, partly inside
 * the window, is weighted by the part that is). */
double bn_stats_tokens_per_second(uint64_t now_ns);
/* How the model was loaded: seconds, the weights cache's state and file (model/wcache.h). */
void bn_stats_set_load(double seconds, enum bn_weights_cache state, const char *cache_path);
void bn_stats_set_weights_cache(enum bn_weights_cache state);

/* How one model was loaded: written by the backend that loads it (on the thread that opens
 * it) and later once more by its cache writer's thread; the cache's state is read and
 * written atomically, the rest is read once the load is over. */
struct bn_load_report {
	double seconds;
	int weights_cache;             /* enum bn_weights_cache */
	char path[4096];               /* the cache file, "" without one */
};
/* Into r, or into the daemon-wide fields above (bn_stats_set_load) when r is NULL. */
void bn_load_report_set(struct bn_load_report *r, double seconds, enum bn_weights_cache state,
			const char *cache_path);
void bn_load_report_set_cache(struct bn_load_report *r, enum bn_weights_cache state);
/* Zeroes every counter, histogram and the token window (for tests; the daemon never does). */
void bn_stats_reset(void);

/* Per-session counters, kept in the session and rendered with its id and peer uid as labels. */
struct bn_session_counters {
	uint64_t submitted;
	uint64_t finished;
	uint64_t errors;
	uint64_t tokens;
};

/* One model's counters (daemon/models.h), rendered with its name as the `model` label. */
#define BN_STATS_UNLOAD_REASONS 4 /* memory, idle, command, reload */
struct bn_model_counters {
	uint64_t submitted, finished, errors, tokens, steps;
	uint64_t overlapped_steps; /* steps run while another model's step ran (models_overlap.c) */
	uint64_t loads, load_failures;
	uint64_t unloads[BN_STATS_UNLOAD_REASONS];
};

/* One model's line in the per-model families. */
struct bn_stats_model {
	const char *name;
	const char *state;           /* one of the view's model_states */
	uint64_t bytes;              /* weights and KV as last loaded */
	uint32_t queued, running;
	uint32_t kv_blocks_total, kv_blocks_used;
	const struct bn_model_counters *counters;
	const struct bn_load_report *load;
};

/* Gauges and per-session rows the loop hands to the renderer. */
struct bn_stats_view {
	uint32_t sessions_open;
	uint32_t queued;
	uint32_t running;
	uint32_t kv_blocks_total;
	uint32_t kv_blocks_used;     /* holding positions */
	uint32_t kv_blocks_reserved; /* promised to running sequences, not yet used */
	uint32_t kv_block_tokens;
	uint32_t kv_blocks_cached;   /* with a prefix-cache identity, held or parked */
	uint64_t kv_evictions;       /* cached blocks taken for other contents */
	uint32_t n_sessions;
	const uint32_t *session_ids;                     /* [n_sessions] */
	const uint32_t *session_uids;                    /* [n_sessions] */
	const struct bn_session_counters *const *session_counters; /* [n_sessions] */
	/* The models (daemon/models.h): the default model's load for the daemon-wide families
	 * (NULL: bn_stats'), and a line per model in the per-model ones. */
	const struct bn_load_report *load;
	const struct bn_stats_model *models;         /* [n_models] */
	uint32_t n_models;
	const char *const *model_states;             /* [n_model_states] names */
	uint32_t n_model_states;
	const char *const *unload_reasons;           /* [BN_STATS_UNLOAD_REASONS] names */
	uint64_t memory_budget, memory_loaded;
};

/* Renders the exposition text into a buffer it grows (*buf, *cap; realloc'd). Returns the
 * length, or -ENOMEM (the buffer then holds what fit). */
long bn_stats_render(char **buf, size_t *cap, const struct bn_stats_view *v);

#endif /* BITNETD_STATS_H */
