/* SPDX-License-Identifier: MIT */
/*
 * calls.c — the synchronous calls: one request to its end, and batches with one result per
 * item.
 * The protocol is shm/PROTOCOL.md; section numbers in comments refer to it.
 */
#define _GNU_SOURCE
#include "client_internal.h"

#include <errno.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------------------------ */
/* Synchronous calls                                                                           */
/* ------------------------------------------------------------------------------------------ */

int bn_wait_for_slot(struct bn_client *c, int64_t deadline)
{
	int64_t now = now_ns();
	if (now >= deadline)
		return -BN_E_TIMEOUT;
	/* Abandoned slots come back without a signal, so sleep in short slices. */
	int64_t until = now + SLOT_WAIT_SLICE_NS < deadline ? now + SLOT_WAIT_SLICE_NS : deadline;
	struct timespec ts = { .tv_sec = until / 1000000000, .tv_nsec = until % 1000000000 };
	pthread_mutex_lock(&c->lock);
	if (!c->free_list)
		pthread_cond_timedwait(&c->slot_freed, &c->lock, &ts);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* bn_submit_as, but waits (until deadline) for a slot when all are busy. */
static int submit_waiting(struct bn_client *c, const struct bn_submission *sub, int64_t deadline,
			  struct bn_handle **out)
{
	for (;;) {
		int rc = bn_submit_as(c, sub, out);
		if (rc != -BN_E_AGAIN)
			return rc;
		rc = bn_wait_for_slot(c, deadline);
		if (rc < 0)
			return rc;
	}
}

int bn_status_error(const struct bn_result *r)
{
	switch (r->status) {
	case BN_STATUS_LENGTH:
	case BN_STATUS_EOS:
	case BN_STATUS_STOP:
	case BN_STATUS_COMPLETE: return 0;
	case BN_STATUS_DEADLINE: return -BN_E_TIMEOUT;
	case BN_STATUS_CANCELLED: return -BN_E_CANCELLED;
	case BN_STATUS_SHUTDOWN: return -BN_E_SHUTDOWN;
	case BN_STATUS_ERROR: return r->error ? r->error : -BN_E_PROTOCOL;
	default: return -BN_E_PROTOCOL;
	}
}

/* Waits for h until deadline, copies its result and tokens, releases it. */
static int finish_one(struct bn_handle *h, int64_t deadline, uint32_t *out, uint32_t cap,
		      struct bn_result *result)
{
	int rc = bn_wait(h, bn_time_left(deadline));
	struct bn_result r = { 0 };
	if (rc == 0 && bn_result(h, &r) == 0) {
		if (out)
			bn_read_tokens(h, 0, out, cap);
		rc = bn_status_error(&r);
	}
	if (result)
		*result = r;
	bn_release(h);
	return rc;
}

int64_t bn_deadline_of(int64_t timeout_ns)
{
	return timeout_ns < 0 ? INT64_MAX : now_ns() + timeout_ns;
}

int64_t bn_time_left(int64_t deadline)
{
	if (deadline == INT64_MAX)
		return -1;
	int64_t left = deadline - now_ns();
	return left < 0 ? 0 : left;
}

int bn_generate(struct bn_client *c, const struct bn_request *req, uint32_t *out, uint32_t cap,
		struct bn_result *result, int64_t timeout_ns)
{
	int64_t deadline = bn_deadline_of(timeout_ns);
	struct bn_handle *h;
	const struct bn_submission sub = { .req = req, .op = BN_OP_GENERATE };
	int rc = submit_waiting(c, &sub, deadline, &h);
	if (rc < 0) {
		if (result)
			*result = (struct bn_result){ .status = BN_STATUS_ERROR, .error = rc };
		return rc;
	}
	return finish_one(h, deadline, out, cap, result);
}

int bn_run_batch(struct bn_client *c, size_t n, const struct bn_batch_job *job,
		 int64_t timeout_ns)
{
	int64_t deadline = bn_deadline_of(timeout_ns);
	struct bn_handle **inflight = calloc(n ? n : 1, sizeof(*inflight));
	if (!inflight)
		return -ENOMEM;
	/* Items [0, oldest) are settled, [oldest, next) submitted (or failed at submit). */
	size_t next = 0, oldest = 0;
	int gone = 0;
	while (oldest < n) {
		while (next < n && !gone) {
			struct bn_submission sub;
			int rc = job->submission(job->ctx, next, &sub);
			if (rc == 0)
				rc = bn_submit_as(c, &sub, &inflight[next]);
			if (rc == -BN_E_AGAIN && next > oldest)
				break; /* finish one of ours first */
			if (rc == -BN_E_AGAIN) /* other threads hold every slot */
				rc = submit_waiting(c, &sub, deadline, &inflight[next]);
			if (rc < 0) {
				inflight[next] = NULL;
				job->settle(job->ctx, next, rc);
				gone = rc == -BN_E_DISCONNECTED;
			}
			next++;
		}
		if (oldest == next) { /* the daemon is gone: nothing more can be submitted */
			job->settle(job->ctx, oldest, -BN_E_DISCONNECTED);
			next = ++oldest;
			continue;
		}
		if (inflight[oldest]) {
			int rc = job->finish(job->ctx, oldest, inflight[oldest], deadline);
			job->settle(job->ctx, oldest, rc);
			gone |= rc == -BN_E_DISCONNECTED;
		}
		oldest++;
	}
	free(inflight);
	return gone ? -BN_E_DISCONNECTED : 0;
}

struct generate_job {
	struct bn_batch_item *items;
	struct bn_batch_result *result;
};

static int generate_submission(void *ctx, size_t i, struct bn_submission *sub)
{
	struct bn_batch_item *it = &((struct generate_job *)ctx)->items[i];
	it->result = (struct bn_result){ 0 };
	*sub = (struct bn_submission){ .req = &it->req, .op = BN_OP_GENERATE };
	return 0;
}

static int generate_finish(void *ctx, size_t i, struct bn_handle *h, int64_t deadline)
{
	struct bn_batch_item *it = &((struct generate_job *)ctx)->items[i];
	return finish_one(h, deadline, it->out, it->out_cap, &it->result);
}

void bn_batch_settle(int32_t *error, struct bn_result *result, struct bn_batch_result *totals,
		     int rc)
{
	*error = rc;
	if (rc < 0 && result->status == BN_STATUS_NONE)
		*result = (struct bn_result){ .status = BN_STATUS_ERROR, .error = rc };
	if (rc == 0)
		totals->n_ok++;
	else
		totals->n_failed++;
}

static void generate_settle(void *ctx, size_t i, int rc)
{
	struct generate_job *g = ctx;
	bn_batch_settle(&g->items[i].error, &g->items[i].result, g->result, rc);
}

int bn_generate_batch(struct bn_client *c, struct bn_batch_item *items, size_t n,
		      struct bn_batch_result *result, int64_t timeout_ns)
{
	if (!c || (n && !items) || !result)
		return -BN_E_INVALID;
	*result = (struct bn_batch_result){ 0 };
	struct generate_job g = { .items = items, .result = result };
	const struct bn_batch_job job = { .submission = generate_submission,
					  .finish = generate_finish,
					  .settle = generate_settle,
					  .ctx = &g };
	return bn_run_batch(c, n, &job, timeout_ns);
}
