/* SPDX-License-Identifier: MIT */
/*
 * request.h — a request as the serving room knows it, the tenant it belongs to, and the seam
 * through which the scheduler reports back.
 *
 * A request is the daemon's private copy of what a client asked: the ring edge (daemon/
 * session.c) copies and validates it out of shared memory, the scheduler (sched.c) runs it.
 * The scheduler never touches shared memory and never calls the ring edge by name: a token
 * that is ready, a score that is ready or a request that ends goes through the bn_reply table
 * the ring edge gives it (bn_sched_new), which writes the client's slot. So the arrows run one
 * way: sessions -> scheduler, and the scheduler back only through that table.
 */
#ifndef BITNETD_REQUEST_H
#define BITNETD_REQUEST_H

#include "draft.h"
#include "kvpool.h"
#include "model/sample.h"

#include <stdint.h>

struct bn_tenant;
struct bn_text_stream;
struct bn_grammar_bound;
struct bn_grammar_matcher;
struct bn_grammar_job;

struct bn_req {
	struct bn_tenant *tenant; /* whose request it is */
	uint32_t n_prompt;
	uint32_t max_tokens;
	uint32_t flags;
	uint32_t *prompt;     /* private copy, [n_prompt], then the stop ids */
	const uint32_t *stop; /* [n_stop], right after the prompt */
	uint32_t n_stop;
	uint32_t *output;     /* private copy of the published tokens (the sampler's history) */
	uint32_t n_out;       /* tokens published to the slot */
	uint32_t n_prefilled; /* prompt tokens that have gone through the backend */
	uint32_t seq;         /* backend sequence id while running */
	uint32_t op;          /* enum bn_sq_op of the sqe that queued it */
	uint8_t running;      /* holds a backend sequence */
	struct bn_sampling sampling;
	struct bn_sample_ctx sample_ctx;
	struct bn_kv_seq kv;  /* block table while running */
	/* BN_OP_CLASSIFY: N labels continue the prefix prompt[0 .. n_prompt); the scheduler runs
	 * each in a sequence forked from the prefix's (sched.c). */
	const uint32_t *labels;    /* every label's ids, in order */
	const uint32_t *label_len; /* [n_labels] */
	uint32_t n_labels;
	uint32_t n_label_tokens;   /* sum of label_len: the records of the result */
	uint32_t longest_label;
	uint32_t next_label;       /* sched.c: the first label not started yet */
	uint32_t next_label_at;    /* its first id's index in labels (and its first record's) */
	uint32_t labels_done;
	uint32_t n_forks;          /* labels running now */
	uint32_t max_forks;        /* how many may run at once: what the request reserved for */
	uint32_t n_identified;     /* sched.c: its first blocks that have a cached identity */
	uint8_t speculate;    /* sched.c: it drafts tokens (draft.h) while decoding */
	struct bn_drafter drafter; /* its n-gram table, from its first decode step */
	/* BN_REQ_GRAMMAR (structured output): the grammar, a reference the ring edge holds from
	 * the request's take to its end; while it runs (sched_grammar.c) a matcher over its
	 * published tokens, the allowed-token bitsets of the positions its next row samples, and
	 * the sampler's check that closes the output before max_tokens, with its own bitset and
	 * the drafts it took the matcher past. */
	struct bn_grammar_bound *grammar;
	struct bn_grammar_matcher *matcher;
	uint64_t *masks;
	uint64_t *close_mask;
	struct bn_sample_check check;
	uint32_t check_drafts;
	uint64_t admitted;    /* admission order, for prefill priority */
	uint64_t planned_in;  /* sched.c: the step plan that last gave it a row */
	uint64_t t_seen;      /* when the daemon consumed the sqe */
	uint64_t deadline;    /* monotonic ns; 0: none */
	uint64_t t_started;   /* first step that included it */
	uint64_t t_first_token;
	uint64_t t_last_token;
	struct bn_req *next;  /* the tenant's waiting FIFO */

	/* The ring edge's own (daemon/session*.c, daemon/textreq.c); the scheduler neither reads
	 * nor writes them. */
	uint32_t slot;
	uint32_t events;      /* private count behind the slot's events futex word */
	uint32_t end_status, end_error; /* how it ends once its ring snapshot is taken */
	uint32_t n_text;      /* text bytes published to the slot (BN_REQ_TEXT_OUT, DETOKENIZE) */
	struct bn_text_stream *stream; /* BN_REQ_TEXT_OUT: the decoder, until the end */
	struct bn_grammar_job *job; /* BN_OP_GRAMMAR: its compile, while the service has it */
	uint8_t in_flight;    /* queued or running: the slot is the daemon's */
};

/* What the scheduler knows of one session: its waiting requests, its share of admissions and
 * the names its caps and prefix-cache scopes go by. The ring edge embeds one in each session
 * and fills the first four fields; the rest is the scheduler's. */
struct bn_tenant {
	uint32_t id;               /* the session's id: the prefix cache's session scope */
	uint32_t uid;              /* the peer's uid: per-user caps and the uid scope */
	uint32_t weight;           /* admissions per round-robin turn */
	uint8_t admitting;         /* its handshake is done: its requests may be admitted */
	uint32_t credit;           /* admissions left in the current turn */
	struct bn_req *wait_head, *wait_tail; /* accepted, not yet running (FIFO) */
	uint32_t n_waiting;
	uint32_t n_running;
	uint32_t step_decode_rows; /* its decode rows in step decode_rows_in */
	uint64_t decode_rows_in;
};

/* How the scheduler reports back: every write into a client's slot goes through these. */
struct bn_reply {
	/* The client asked to cancel. */
	int (*cancel_requested)(const struct bn_req *r);
	/* Publishes output token r->n_out. 0, or -ENOMEM when its text could not be decoded
	 * (the token itself is published; the scheduler ends the request with BN_E_BACKEND). */
	int (*publish_token)(struct bn_req *r, uint32_t token);
	/* The log-probability records of output token `index`, before it is published. */
	void (*write_logprobs)(struct bn_req *r, uint32_t index, const struct bn_sample_out *o);
	/* Record `index` of a score or classify result (published later: by n_tokens, or at
	 * the end). */
	void (*write_record)(struct bn_req *r, uint32_t index, const struct bn_sample_out *o);
	/* A score request's position `index`, published with n_tokens = index + 1. */
	void (*publish_score)(struct bn_req *r, uint32_t index, const struct bn_sample_out *o);
	/* An embedding request's vector v[0 .. dim) (enum bn_pooling `pooling`), published by
	 * the finish that follows. */
	void (*publish_embedding)(struct bn_req *r, const float *v, uint32_t dim, uint32_t pooling);
	/* Wakes a thread waiting for streamed tokens, if one declared itself. Called after a
	 * full fence that follows the step's publications. */
	void (*wake_stream_waiter)(struct bn_req *r);
	/* The terminal status: the slot goes back to the client. Exactly once per request. */
	void (*finish)(struct bn_req *r, uint32_t status, uint32_t error);
};

#endif /* BITNETD_REQUEST_H */
