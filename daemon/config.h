/* SPDX-License-Identifier: MIT */
#ifndef BITNETD_CONFIG_H
#define BITNETD_CONFIG_H

#include "common/log.h"

#include "serve/prefix_cache.h"
#include "serve/sched.h"

#include <limits.h>
#include <stdint.h>

/* Documented exit codes (bitnetd(8)). Fatal errors happen only at start-up. */
enum bn_exit {
	BN_EXIT_OK = 0,
	BN_EXIT_USAGE = 2,     /* bad command line */
	BN_EXIT_BACKEND = 3,   /* backend or model could not be loaded (or a name found no file) */
	BN_EXIT_SOCKET = 4,    /* cannot listen on the socket (or bad inherited socket) */
	BN_EXIT_SYSTEM = 5,    /* io_uring, signalfd or memory could not be set up */
};

enum bn_device { BN_DEVICE_AUTO, BN_DEVICE_CPU, BN_DEVICE_CUDA };

/* One model the daemon serves (--model, --models-config, --models; models_config.c). */
struct bn_model_options {
	char name[64];           /* shm/bitnet_shm.h bn_model_name's rules */
	const char *source;      /* as given: a path, hf:REPO[:FILE], or NULL (loopback) */
	char path[PATH_MAX];     /* the file: the source, or hf: resolved at start-up */
	uint32_t context;        /* context_length at most this (0: the file's) */
	uint64_t kv_memory;      /* its KV pool's bytes (0: its share, config.h kv_memory) */
	int pinned;              /* loaded at start-up, never unloaded for room or idleness */
	int speculative;         /* enum bn_speculative, or -1: --speculative */
	uint32_t draft_tokens;   /* 0: --draft-tokens */
	int64_t keep_alive_ms;   /* idle time before it unloads; -1: --keep-alive */
	const char *pre_tokenizer, *chat_template; /* NULL: --pre-tokenizer, --chat-template */
	uint32_t pooling;        /* enum bn_pooling for embeddings; 0: --pooling */
};

struct bn_config {
	const char *socket_path;
	const char *backend;     /* loopback, cpu, cuda, or auto (try cuda, else cpu) */
	enum bn_device device;
	int device_index;        /* the N of cuda:N */
	int device_set;          /* --device was given */
	const char *model_path;  /* the default model's file (models[0].path), or NULL */
	/* The models, the default first: --model flags in order, then --models-config's, then
	 * --models's (models_config.c). At least one: loopback's has no file. */
	struct bn_model_options *models;
	uint32_t n_models;
	const char **model_args; /* --model values as given, [n_model_args] */
	uint32_t n_model_args;
	const char *models_config; /* --models-config FILE */
	const char *models_dir;  /* --models DIR */
	char **owned;            /* strings the options above point into, freed with cfg */
	uint32_t n_owned;
	uint64_t memory;         /* --memory: bytes of all loaded models (0: none on the CPU, the
				  * device's free memory less headroom on a GPU) */
	int64_t keep_alive_ms;   /* --keep-alive: idle time before a model unloads; -1: never */
	const char *cache_dir;   /* --cache-dir: a directory, "none", or NULL (the default) */
	const char *pre_tokenizer; /* --pre-tokenizer: a name the tokenizer knows, or NULL */
	const char *chat_template; /* --chat-template: a name the tokenizer knows, or NULL */
	uint32_t max_batch;
	uint32_t token_budget;
	uint64_t kv_memory;      /* bytes; 0: the scheduler's default */
	uint32_t kv_block_tokens;
	uint32_t prefix_cache;   /* enum bn_prefix_sharing (prefix_cache.h) */
	uint32_t speculative;    /* enum bn_speculative (serve/sched.h) */
	uint32_t draft_tokens;   /* --draft-tokens */
	uint32_t max_running_per_session;
	uint32_t max_running_per_user;
	uint32_t max_weight;
	uint32_t max_logprobs;
	uint32_t batch_window_us;
	uint32_t slots;
	uint32_t max_sessions;
	uint32_t max_sessions_per_user;   /* sessions and handshakes of one peer uid */
	uint32_t max_handshakes_per_user; /* connections of one uid that have sent no hello yet */
	uint32_t handshake_timeout_ms;    /* a connection without a whole hello is closed after */
	uint32_t idle_spin_us;
	uint32_t vocab_size;
	uint32_t step_delay_us;
	uint32_t threads;        /* cpu backend: 0 = one per online CPU */
	uint32_t lm_head_mode;   /* cpu backend: enum bn_lm_head_mode (backend.h) */
	uint32_t base3_decode;   /* cpu backend: --decode-layout base3 */
	const char *cuda_kernels; /* cuda backend: --cuda-kernels (NULL: its default) */
	uint32_t activation;     /* --activation: enum bn_activation_opt (backend.h), 0: the file's */
	uint32_t pooling;        /* --pooling: enum bn_pooling, 0: the file's (none: no embeddings) */
	uint32_t drain_timeout_ms;
	uint32_t max_grammars;   /* compiled grammars one session may hold */
	uint32_t grammar_threads; /* threads that compile grammars */
	uint32_t grammar_compile_ms; /* a grammar's compile budget, CPU time */
	uint64_t grammar_cache;  /* bytes of compiled grammars kept by content */
	uint64_t grammar_memory; /* bytes all compiled grammars may hold, kept or in use */
	uint32_t socket_mode;
	uint32_t ring_start;     /* $BITNETD_RING_START: first ring counter (tests reach the wrap) */
	enum bn_log_level log_level;
};

/* Parses argv into cfg (defaults first, then $BITNETD_SOCKET, then flags). Returns -1 after
 * printing why on stderr, 1 when --help or --version was printed, 0 to run. */
int bn_config_parse(struct bn_config *cfg, int argc, char **argv);
void bn_config_free(struct bn_config *cfg);

/* models_config.c: cfg->models from --model, --models-config and --models. Returns -1 after
 * printing why on stderr. */
int bn_models_config_build(struct bn_config *cfg);
/* A served name by bn_model_name's rules (shm/bitnet_shm.h). */
int bn_model_name_valid(const char *name);
/* A byte count with an optional K, M or G suffix; a duration in ms (ms, s, m, h suffixes; -1
 * for "never"). 0, or -1 after printing why (naming `what`). */
int bn_parse_size(const char *what, const char *text, uint64_t *out);
int bn_parse_duration_ms(const char *what, const char *text, int64_t *out);

#endif /* BITNETD_CONFIG_H */
