/* SPDX-License-Identifier: MIT */
/*
 * client_internal.h — what the library's source files share without exporting it (the version
 * script keeps every name not listed there out of the shared library). The client itself is
 * five files, one per job: connect.c (handshake, segment, model info), submit.c (slots and
 * the ring), wait.c (waiting and reading results), calls.c (synchronous and batch calls) and
 * control.c (control socket, counters, names, the vocabulary).
 */
#ifndef BITNET_CLIENT_INTERNAL_H
#define BITNET_CLIENT_INTERNAL_H

#include "bitnet_barrier.h"
#include "bitnet_client.h"
#include "bitnet_shm.h"

#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* ---- the connection and its handles (connect.c, submit.c, wait.c, calls.c, control.c) --- */

#define DEFAULT_SPIN_NS 20000u
#define SLEEP_SLICE_NS 50000000 /* longest futex sleep between liveness checks */
#define SLOT_WAIT_SLICE_NS 1000000

enum handle_state { H_FREE = 0, H_IN_FLIGHT = 1, H_ABANDONED = 2 };

struct bn_handle {
	struct bn_client *c;
	uint32_t slot;
	enum handle_state state;
	int woke_daemon;        /* its submission rang the doorbell: the daemon was asleep */
	struct bn_handle *next; /* free list or abandoned list */
};

struct bn_client {
	int sock;
	int doorbell;
	uint8_t *mem;
	size_t mem_size;
	/* Validated private copies of the header's layout words. */
	struct bn_shm_header layout;
	struct bn_sq_ring *ring;
	struct bn_sqe *sqes;
	uint32_t sq_mask;
	uint32_t sq_tail;          /* private: we are the ring's only producer */
	uint32_t spin_ns;
	pthread_mutex_t lock;      /* free list, abandoned list, ring production, control socket */
	pthread_cond_t slot_freed;
	struct bn_handle *handles; /* [slot_count] */
	struct bn_handle *free_list;
	struct bn_handle *abandoned; /* released while in flight; reclaimed when DONE */
	int dead;                  /* the daemon hung up */
	struct bn_client_stats stats;
	pthread_mutex_t vocab_lock; /* its own: fetching takes `lock` for the control socket */
	struct bn_vocab *vocab;    /* bn_client_vocab's copy, fetched on first use */
};

/* ---- small helpers ------------------------------------------------------------------------ */

static inline int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static inline struct bn_slot *slot_of(const struct bn_client *c, uint32_t slot)
{
	return (struct bn_slot *)(c->mem + c->layout.slot_offset + (size_t)slot * c->layout.slot_size);
}

static inline uint32_t *prompt_of(const struct bn_client *c, uint32_t slot)
{
	return (uint32_t *)((uint8_t *)slot_of(c, slot) + c->layout.slot_prompt_offset);
}

static inline uint32_t *output_of(const struct bn_client *c, uint32_t slot)
{
	return (uint32_t *)((uint8_t *)slot_of(c, slot) + c->layout.slot_output_offset);
}

static inline int slot_done(const struct bn_client *c, uint32_t slot)
{
	/* Acquire pairs with the daemon's store-release of DONE: status, error, tokens and
	 * timings written before it are visible to our later reads. */
	return bn_load_acquire(slot_of(c, slot)->state) == BN_SLOT_DONE;
}

static inline uint32_t daemon_flags(const struct bn_client *c)
{
	return bn_read_once(((const struct bn_shm_header *)c->mem)->daemon_flags);
}

/* The daemon is gone when its end of the socket hung up. One poll(2), no waiting. */
static inline int daemon_gone(struct bn_client *c)
{
	if (__atomic_load_n(&c->dead, __ATOMIC_RELAXED))
		return 1;
	struct pollfd p = { .fd = c->sock, .events = POLLRDHUP };
	if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
		__atomic_store_n(&c->dead, 1, __ATOMIC_RELAXED);
		return 1;
	}
	return 0;
}

static inline uint8_t *text_of(const struct bn_client *c, uint32_t slot)
{
	return (uint8_t *)slot_of(c, slot) + c->layout.slot_text_offset;
}

/* The whole buffer over a stream socket (connect.c), retrying EINTR: 0, -BN_E_DISCONNECTED
 * when the peer closed, or -errno. */
int bn_sock_send_all(int fd, const void *buf, size_t len);
int bn_sock_recv_all(int fd, void *buf, size_t len);

/* ---- the rest of the library ------------------------------------------------------------- */

/* One control round trip (shm/PROTOCOL.md §10) for an op whose reply carries no payload bytes
 * on the socket: sends the request, receives the reply head into *r and the descriptor that
 * came with it into *fd (-1 when none; the caller closes it). Takes the client's lock, as
 * every use of the control socket does. 0, or -BN_E_PROTOCOL for a reply that is not this
 * op's, -BN_E_DISCONNECTED, -errno. The reply's own error is left in r->error. */
int bn_client_ctl(struct bn_client *c, uint32_t op, struct bn_ctl_reply *r, int *fd);

/* One submission: a request, its prompt as text (text non-NULL) or as req's ids, its op. */
struct bn_submission {
	const struct bn_request *req;
	const char *text;
	size_t len;
	uint32_t op; /* enum bn_sq_op: BN_OP_GENERATE, BN_OP_SCORE, BN_OP_CLASSIFY or BN_OP_EMBED */
	uint32_t grammar_id; /* BN_OP_GENERATE: non-zero, constrained by that grammar */
};
/* bn_submit and bn_submit_text, for any op this library sends. */
int bn_submit_as(struct bn_client *c, const struct bn_submission *sub, struct bn_handle **out);
/* Queues an op whose request words fill() writes into the slot (the words from n_prompt to
 * grammar_id are 0 before it; the response words are reset and the state set after). Returns
 * as bn_submit. */
int bn_submit_op(struct bn_client *c, uint32_t op,
		 void (*fill)(struct bn_client *c, uint32_t slot, const void *arg), const void *arg,
		 struct bn_handle **out);
/* Sleeps until a slot may have come free (another handle released) or deadline passes: 0, or
 * -BN_E_TIMEOUT. */
int bn_wait_for_slot(struct bn_client *c, int64_t deadline);

/* bn_read_logprobs for any request that has records (score, classify), whatever its flags. */
int bn_read_records(struct bn_handle *h, uint32_t from, struct bn_logprob *out,
		    struct bn_logprob *alt, uint32_t cap);

/* A batch of n items run with as many in flight as the slots allow (bn_generate_batch's
 * contract): submission() describes item i, finish() waits for it and reads its results
 * (returning 0 or the item's error), settle() records each item's outcome exactly once. */
struct bn_batch_job {
	int (*submission)(void *ctx, size_t i, struct bn_submission *sub);
	int (*finish)(void *ctx, size_t i, struct bn_handle *h, int64_t deadline);
	void (*settle)(void *ctx, size_t i, int rc);
	void *ctx;
};
/* 0, or -BN_E_DISCONNECTED (items not finished settle with it), -ENOMEM. */
int bn_run_batch(struct bn_client *c, size_t n, const struct bn_batch_job *job,
		 int64_t timeout_ns);

/* Records a batch item's outcome: its error, a result that says ERROR when it never got
 * one, and the batch's counts. */
void bn_batch_settle(int32_t *error, struct bn_result *result, struct bn_batch_result *totals,
		     int rc);

/* The error a terminal status means for a synchronous call: 0 for LENGTH, EOS, STOP and
 * COMPLETE, else -BN_E_*. */
int bn_status_error(const struct bn_result *r);
/* Absolute deadlines (CLOCK_MONOTONIC ns; INT64_MAX: none) and what is left of one (-1: no
 * limit, as bn_wait takes it). */
int64_t bn_deadline_of(int64_t timeout_ns);
int64_t bn_time_left(int64_t deadline);

#endif /* BITNET_CLIENT_INTERNAL_H */
