/* SPDX-License-Identifier: MIT */
#ifndef BITNETD_CONFIG_H
#define BITNETD_CONFIG_H

#include "common/log.h"

#include "serve/prefix_cache.h"
#include "serve/sched.h"

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

struct bn_config {
	const char *socket_path;
	const char *backend;     /* loopback, cpu, cuda, or auto (try cuda, else cpu) */
	enum bn_device device;
	int device_index;        /* the N of cuda:N */
	int device_set;          /* --device was given */
	const char *model_path;
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

#endif /* BITNETD_CONFIG_H */
