/* SPDX-License-Identifier: MIT */
/*
 * client_internal.h — what the library's source files share without exporting it (the version
 * script keeps every name not listed there out of the shared library).
 */
#ifndef BITNET_CLIENT_INTERNAL_H
#define BITNET_CLIENT_INTERNAL_H

#include "bitnet_client.h"

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
	uint32_t op; /* enum bn_sq_op: BN_OP_GENERATE, BN_OP_SCORE or BN_OP_CLASSIFY */
};
/* bn_submit and bn_submit_text, for any op this library sends. */
int bn_submit_as(struct bn_client *c, const struct bn_submission *sub, struct bn_handle **out);

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
