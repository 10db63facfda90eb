/* SPDX-License-Identifier: MIT */
/*
 * grammars.h — the grammar service (structured output, shm/PROTOCOL.md §6.13): the grammars
 * clients send with BN_OP_GRAMMAR are compiled here, on worker threads, so that one which
 * takes its whole compile budget delays no step of the loop; each is bound to the model's
 * vocabulary, cached by content (refusals too: a hostile grammar sent again costs a look-up)
 * and, once its answer is on its way, warmed (its per-state token sets filled ahead of use, so
 * the loop's masks find them ready). The loop learns of finished jobs through an eventfd and
 * hands each back to its session (grammar_ops.c), which owns everything about slots.
 *
 * The service never reads shared memory: a job carries a private copy of the grammar's text.
 */
#ifndef BITNETD_GRAMMARS_H
#define BITNETD_GRAMMARS_H

#include "grammar/grammar.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct bn_vocab;

#define BN_GRAMMAR_MAX_THREADS 64
/* Grammars that may wait to be warmed; past it the oldest is filled on first use instead.
 * Few: each waiting grammar holds a reference, which keeps the cache from letting it go. */
#define BN_GRAMMAR_WARM_LATER 8

/* One compile: what to compile, whose it is, and (once done) what came of it. */
struct bn_grammar_job {
	struct bn_grammar_job *next;
	void *owner;                 /* the session; the service never looks inside */
	uint32_t slot;               /* the slot of the op that asked */
	struct bn_grammar_options options;
	uint8_t *text;               /* private copy, len bytes; freed with the job */
	size_t len;
	int rc;                      /* 0, or bn_grammar_compile's -EINVAL, -E2BIG, -ETIME, -ENOMEM */
	struct bn_grammar_bound *bound; /* rc 0: one reference, the job's */
	char err[BN_GRAMMAR_ERR_LEN];   /* rc < 0: the engine's message */
};

struct bn_grammar_service_config {
	uint32_t threads;            /* workers, 1 .. BN_GRAMMAR_MAX_THREADS */
	uint32_t compile_ms;         /* a compile's budget: CPU time on its thread */
	size_t cache_bytes;          /* compiled grammars kept by content, least used out first */
	size_t memory_bytes;         /* what all compiled grammars may hold, kept or in use */
};

struct bn_grammar_service {
	struct bn_grammar_vocab *vocab; /* NULL: no structured output (BN_FEAT_GRAMMAR unset) */
	struct bn_grammar_cache *cache;
	struct bn_grammar_service_config cfg;
	pthread_mutex_t lock;
	pthread_cond_t work;
	struct bn_grammar_job *queue, *queue_tail; /* waiting for a worker, oldest first */
	struct bn_grammar_job *done, *done_tail;   /* finished, for the loop */
	uint32_t queued;             /* jobs in queue; warming workers read it without the lock */
	/* Grammars whose warming gave way to a queued job, resumed when the queue is empty, the
	 * most recent first; each holds a reference and the warm budget it has left. */
	struct bn_grammar_to_warm {
		struct bn_grammar_bound *bound;
		uint64_t left_ns;
	} to_warm[BN_GRAMMAR_WARM_LATER];
	uint32_t n_to_warm;
	/* Workers filling a grammar now, each holding a reference; a compile short of memory
	 * (bn_grammar_cache_on_shed) moves shed_epoch on, which makes them let go at their next
	 * slice, and waits on `warmed` until none is left. */
	uint32_t warming;
	uint64_t shed_epoch;         /* warm() reads it without the lock */
	pthread_cond_t warmed;
	void *compiling[BN_GRAMMAR_MAX_THREADS];   /* each worker's job's owner, NULL when idle */
	pthread_t workers[BN_GRAMMAR_MAX_THREADS];
	uint32_t n_workers;
	int stop;
	int event_fd;                /* written when done becomes non-empty; -1 without workers */
	uint64_t event_value;        /* the loop's read target */
};

/* The engine's vocabulary of the daemon's: every token's bytes as the daemon decodes them,
 * control, unknown and unused tokens special, the end-of-generation ids ending. 0, -EINVAL
 * when a text token is longer than the engine takes, -ENOMEM. */
int bn_grammar_service_vocab(const struct bn_vocab *v, struct bn_grammar_vocab **out);

/* Opens the service over the daemon's vocabulary, with the engine's vocabulary `built` from
 * it by bn_grammar_service_vocab (taken over; NULL: built here). A NULL vocabulary (no text),
 * or one that cannot be turned into the engine's, leaves it closed (vocab NULL; logged) and
 * returns 0; -errno when threads or memory fail. */
int bn_grammar_service_open(struct bn_grammar_service *g, const struct bn_vocab *v,
			    struct bn_grammar_vocab *built,
			    const struct bn_grammar_service_config *cfg);
void bn_grammar_service_close(struct bn_grammar_service *g);
/* What its compiled grammars hold now, kept or in use (0 when it is closed). */
size_t bn_grammar_service_bytes(struct bn_grammar_service *g);
/* Lets go of the grammars it keeps for a next time and nobody uses (bn_grammar_cache_trim). */
void bn_grammar_service_trim(struct bn_grammar_service *g);

/* Queues a job (the service owns it until bn_grammar_service_take_done returns it). */
void bn_grammar_service_submit(struct bn_grammar_service *g, struct bn_grammar_job *job);
/* The jobs finished since the last call, oldest first (a list through next); NULL if none. */
struct bn_grammar_job *bn_grammar_service_take_done(struct bn_grammar_service *g);
/* A job the caller is done with: its text and its reference to the bound grammar. */
void bn_grammar_job_free(struct bn_grammar_job *job);

#endif /* BITNETD_GRAMMARS_H */
