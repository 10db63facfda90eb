/* SPDX-License-Identifier: MIT */
/*
 * session.h — one client connection: its sealed memfd segment, its ring, its slots, and the
 * daemon-private copy of every request it has in flight. Three files, one per job:
 * session.c (lifetime and handshake), session_take.c (taking requests off the ring) and
 * session_reply.c (writing responses into slots).
 *
 * The segment is written by another process at any moment. This module (with textreq.c, for
 * text) is the only one that reads it: each request field is copied out exactly once and the
 * copy is validated; everything after that (scheduler, backend) works on private memory.
 */
#ifndef BITNETD_SESSION_H
#define BITNETD_SESSION_H

#include "backends/backend.h"
#include "bitnet_shm.h"
#include "common/stats.h"
#include "grammars.h"
#include "segment.h"
#include "serve/request.h"
#include "textreq.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum bn_session_phase {
	BN_SESSION_HANDSHAKE = 0, /* waiting for bn_hello */
	BN_SESSION_ACTIVE = 1,    /* segment passed, ring live */
	BN_SESSION_CLOSING = 2,   /* io cancelled; freed when the last io completes */
};

/* What the daemon offers every session; fixed at start-up. */
struct bn_session_limits {
	uint32_t slots;            /* per-session slot count (upper bound) */
	uint32_t prompt_capacity;  /* tokens per slot prompt array */
	uint32_t output_capacity;  /* tokens per slot output array */
	uint32_t ring_start;       /* first value of head and tail */
	uint32_t logprob_capacity; /* alternatives per token a request may ask for */
	uint32_t max_weight;       /* cap on the admission weight a client asks for */
	const struct bn_model_desc *model;
	const struct bn_text_service *text; /* the tokenizer; its vocab NULL: no text */
	struct bn_grammar_service *grammars; /* its vocab NULL: no structured output */
	const char *grammars_off;  /* why there is none, for the clients that ask */
	uint32_t max_grammars;     /* compiled grammars a session may hold (--max-grammars) */
};

/* One grammar a session compiled (grammar_ops.c). */
struct bn_session_grammar {
	uint32_t id;
	struct bn_grammar_bound *bound; /* a reference */
};

struct bn_session {
	uint32_t id;
	enum bn_session_phase phase;
	int sock_fd;
	int doorbell_fd;
	int memfd;
	pid_t peer_pid;
	uid_t peer_uid;
	gid_t peer_gid;
	uint64_t t_connected;

	/* The segment, as mapped by the daemon. */
	uint8_t *mem;
	size_t mem_size;
	struct bn_shm_header *hdr;
	struct bn_sq_ring *ring;
	struct bn_sqe *sqes;
	uint32_t sq_mask;
	struct bn_segment seg;     /* where the slots lie (segment.h) */
	uint32_t sq_head;          /* private: the daemon is the ring's only consumer */

	/* Requests, indexed by slot: a slot is in flight at most once. */
	struct bn_req *reqs;       /* [slot_count] */
	uint32_t *prompt_arena;    /* [slot_count x prompt_capacity] private prompt copies */
	uint32_t *output_arena;    /* [slot_count x output_capacity] private output copies */
	uint32_t *ending;          /* [slot_count] slots that end once the ring snapshot is taken */
	uint32_t n_ending;
	size_t private_size;       /* the one mapping that holds the four above */
	uint32_t n_in_flight;
	struct bn_tenant tenant;   /* what the scheduler knows of this session (request.h) */
	/* Structured output (grammar_ops.c): the grammars this session compiled. */
	struct bn_grammar_service *grammar_svc;
	const char *grammars_off;
	struct bn_session_grammar *grammars; /* [n_grammars], unordered */
	uint32_t n_grammars, grammars_cap, max_grammars;
	uint32_t next_grammar_id;  /* ids are never reused within a session */
	uint32_t grammar_jobs;     /* compiles the service has not given back: the session is
				    * freed only once they are back (loop.c) */
	struct bn_session_counters counters;

	/* Control-socket receive state (hello, then control requests). */
	uint8_t rx[32];
	uint32_t rx_len;
	uint32_t io_pending;       /* io_uring operations still referencing this session */
	uint64_t doorbell_value;   /* eventfd read target */
	uint8_t doorbell_armed;    /* the loop has a read of the doorbell in io_uring */
	uint32_t table_index;      /* position in the loop's session table */
};

/* The session a request belongs to: the one whose tenant it names. */
static inline struct bn_session *bn_session_of(const struct bn_req *r)
{
	return (struct bn_session *)(void *)((uint8_t *)r->tenant -
					     offsetof(struct bn_session, tenant));
}

struct ucred; /* <sys/socket.h> with _GNU_SOURCE */

/* The connected peer's pid, uid and gid (SO_PEERCRED); uid and gid (uid_t)-1 and pid 0 when
 * the kernel does not say, so such peers share one uid's caps. */
void bn_peer_cred(int sock_fd, struct ucred *out);
struct bn_session *bn_session_new(uint32_t id, int sock_fd, const struct ucred *peer);
/* Closes the fds and unmaps; the caller has made sure no io references the session. */
void bn_session_free(struct bn_session *s);

/* The layout of a segment of `slots` slots under `lim`: the header's size, offset, count and
 * capacity fields (the other fields of *h are left alone). Every offset is a multiple of 64. */
void bn_segment_layout(const struct bn_session_limits *lim, uint32_t slots,
		       struct bn_shm_header *h);

/* Handles a complete bn_hello from s->rx: on success creates the segment and sends the welcome
 * with the fds. On failure sends a welcome carrying the error (where possible) and returns the
 * negative bn_error; the caller closes the session. */
int bn_session_handshake(struct bn_session *s, const struct bn_session_limits *lim,
			 int shutting_down);

/* Sends a welcome that refuses the connection (busy, shutting down). */
void bn_session_refuse(int sock_fd, uint32_t error);

/* ---- taking requests (session_take.c) ------------------------------------------------- */

struct bn_sched;
/* Takes every queued sqe: valid requests go to the scheduler, bad requests end at once with
 * their error. Returns the number of sqes taken, or -BN_E_PROTOCOL when the session broke the
 * ring protocol (the caller closes it). */
int bn_session_poll_ring(struct bn_session *s, struct bn_sched *sched, int shutting_down);

/* The ring has queued entries the daemon has not taken. */
static inline int bn_session_ring_pending(const struct bn_session *s)
{
	/* Acquire pairs with the client's store-release of tail: a tail we see covers sqes that
	 * are fully written. */
	return __atomic_load_n(&s->ring->tail, __ATOMIC_ACQUIRE) != s->sq_head;
}

/* Ends every request the session has in the scheduler. status 0: the client is gone, its
 * requests end without a word to it and its slots are simply no longer in flight; otherwise
 * each ends with that status and error. */
void bn_session_end_requests(struct bn_session *s, struct bn_sched *sched, uint32_t status,
			     uint32_t error);

/* Sleep protocol helpers (see loop.c). */
void bn_session_set_need_wakeup(struct bn_session *s, int on);
void bn_session_set_daemon_flags(struct bn_session *s, uint32_t flags);

/* ---- responses (session_reply.c): every write into a slot's response ------------------- */

/* The scheduler's way back to the clients (serve/request.h): the functions below. */
extern const struct bn_reply bn_session_reply;

/* Returns 0, or -ENOMEM when the token's text could not be decoded (the token itself is
 * published; the caller ends the request with BN_E_BACKEND). */
int bn_req_publish_token(struct bn_req *r, uint32_t token);
/* Writes the log-probability records of output token `index` (before it is published). */
void bn_req_write_logprobs(struct bn_req *r, uint32_t index, const struct bn_sample_out *o);
/* Writes record `index` of a score or classify result: o->token to the output array and its
 * log-probability records (published later: by n_tokens, or at the end). */
void bn_req_write_record(struct bn_req *r, uint32_t index, const struct bn_sample_out *o);
/* Publishes a score request's position index + 1: its token (o->token) to the output array,
 * its log-probability records, and n_tokens = index + 1. */
void bn_req_publish_score(struct bn_req *r, uint32_t index, const struct bn_sample_out *o);
/* An embedding request's vector (§6.14): v[0 .. dim) as binary32 words in the output array
 * and embed_pooling, published by the DONE that follows (n_tokens = dim). */
void bn_req_publish_embedding(struct bn_req *r, const float *v, uint32_t dim, uint32_t pooling);
/* Wakes a thread waiting for streamed tokens, if one declared itself. Call after a full fence
 * that follows the n_tokens stores. */
void bn_req_wake_stream_waiter(struct bn_req *r);
/* Writes the terminal status and hands the slot back to the client. */
void bn_req_finish(struct bn_req *r, uint32_t status, uint32_t error);
/* The client asked to cancel (reads the shared cancel word once). */
int bn_req_cancel_requested(const struct bn_req *r);
/* The reason a request ends, as text in its slot's text region (cut to fit), published by
 * the DONE that follows: n_text bytes. A daemon without text regions has nowhere to write
 * it. */
void bn_req_write_reason(struct bn_session *s, struct bn_req *r, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Drops r->grammar's reference (BN_REQ_GRAMMAR; a request at its end). */
void bn_grammar_detach(struct bn_req *r);

/* ---- structured output (grammar_ops.c): the grammar ops and the session's grammars ----- */

struct bn_grammar_job;
/* Whether the session may compile grammars (BN_FEAT_GRAMMAR). */
int bn_session_has_grammars(const struct bn_session *s);
/* A BN_OP_GRAMMAR or BN_OP_GRAMMAR_FREE just taken: its words copied once and checked. Returns
 * the bn_error that ends it (its reason written to the text region), or 0 with *status the
 * status it ends with now (BN_STATUS_COMPLETE: a free, or BN_STATUS_SHUTDOWN), or
 * BN_STATUS_NONE when its compile went to the service (bn_session_grammar_done ends it). */
uint32_t bn_grammar_op_take(struct bn_session *s, struct bn_req *r, int shutting_down,
			    uint32_t *status);
/* A generate request's BN_REQ_GRAMMAR: r->grammar takes a reference to the session's grammar
 * `id`. Returns 0 or BN_E_INVALID (no such grammar: the reason in the text region). */
uint32_t bn_grammar_attach(struct bn_session *s, struct bn_req *r, uint32_t id);
/* A compile is back from the service: its op ends (the grammar joins the table), unless the
 * session or the op ended meanwhile. The job is freed. */
void bn_session_grammar_done(struct bn_session *s, struct bn_grammar_job *job);
/* The session ends: ops still compiling end with status and error (status 0: without a
 * word, the client is gone); their jobs, when they come back, are dropped. */
void bn_session_grammar_ops_end(struct bn_session *s, uint32_t status, uint32_t error);
/* The table's grammars released (bn_session_free). */
void bn_session_grammars_free(struct bn_session *s);

#endif /* BITNETD_SESSION_H */
