/* SPDX-License-Identifier: MIT */
/*
 * libbitnet-client: bn_score and bn_score_batch — the log-probability of every token of a text
 * given the tokens before it (shm/PROTOCOL.md §6.11), over the batch machinery bn_generate_batch
 * uses, so an item's result is the one it gets alone and one item's failure is only its own.
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "client_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct score_job {
	struct bn_score_item *items;
	struct bn_request *reqs;          /* [n] each item's request, alive while it runs */
	struct bn_sampling_params *params; /* [n] */
	struct bn_batch_result *result;
};

/* The item's prompt is ids or text, never both; its outputs have room as it says. */
static int check_item(const struct bn_score_item *it)
{
	if (!it->ids == !it->text || (it->ids && it->n_ids == 0) || (it->cap && !it->logprobs) ||
	    (it->n_top && it->cap && !it->top))
		return -BN_E_INVALID;
	return 0;
}

static int score_submission(void *ctx, size_t i, struct bn_submission *sub)
{
	struct score_job *j = ctx;
	struct bn_score_item *it = &j->items[i];
	it->n_tokens = it->n_scored = 0;
	it->sum = 0;
	it->result = (struct bn_result){ 0 };
	int rc = check_item(it);
	if (rc < 0)
		return rc;
	j->params[i] = (struct bn_sampling_params){ .n_logprobs = it->n_top };
	j->reqs[i] = (struct bn_request){ .prompt = it->ids, .n_prompt = it->text ? 0 : it->n_ids,
					  .flags = BN_REQ_LOGPROBS, .sampling = &j->params[i] };
	*sub = (struct bn_submission){ .req = &j->reqs[i], .text = it->text, .len = it->text_len,
				       .op = BN_OP_SCORE };
	return 0;
}

#define SPILL 64

/* The records, copied while the slot is still ours (those past cap only summed), and their
 * sum in double. */
static int read_scores(struct bn_handle *h, struct bn_score_item *it)
{
	uint32_t n = it->result.n_tokens;
	struct bn_logprob spill[SPILL], *spill_top = NULL;
	if (n > it->cap && it->n_top &&
	    !(spill_top = malloc((size_t)SPILL * it->n_top * sizeof(*spill_top))))
		return -ENOMEM;
	it->n_scored = n;
	int rc = 0;
	for (uint32_t at = 0; rc == 0 && at < n;) {
		int keep = at < it->cap;
		struct bn_logprob *out = keep ? it->logprobs + at : spill;
		struct bn_logprob *alt = !it->n_top ? NULL
				       : keep ? it->top + (size_t)at * it->n_top : spill_top;
		int k = bn_read_logprobs(h, at, out, alt, keep ? it->cap - at : SPILL);
		rc = k < 0 ? k : k == 0 ? -BN_E_PROTOCOL : 0;
		for (int i = 0; i < k; i++)
			it->sum += out[i].logprob;
		at += k > 0 ? (uint32_t)k : 0;
	}
	free(spill_top);
	return rc;
}

static int score_finish(void *ctx, size_t i, struct bn_handle *h, int64_t deadline)
{
	struct bn_score_item *it = &((struct score_job *)ctx)->items[i];
	int rc = bn_wait(h, bn_time_left(deadline));
	if (rc == 0)
		rc = bn_result(h, &it->result);
	if (rc == 0)
		rc = bn_status_error(&it->result);
	if (rc == 0) {
		bn_read_text(h, 0, NULL, 0, &it->n_tokens);
		if (!it->text)
			it->n_tokens = it->n_ids;
		rc = read_scores(h, it);
	}
	bn_release(h);
	return rc;
}

static void score_settle(void *ctx, size_t i, int rc)
{
	struct score_job *j = ctx;
	bn_batch_settle(&j->items[i].error, &j->items[i].result, j->result, rc);
}

int bn_score_batch(struct bn_client *c, struct bn_score_item *items, size_t n,
		   struct bn_batch_result *result, int64_t timeout_ns)
{
	if (!c || (n && !items) || !result)
		return -BN_E_INVALID;
	*result = (struct bn_batch_result){ 0 };
	struct score_job j = { .items = items, .result = result,
			       .reqs = calloc(n ? n : 1, sizeof(*j.reqs)),
			       .params = calloc(n ? n : 1, sizeof(*j.params)) };
	int rc = -ENOMEM;
	if (j.reqs && j.params) {
		const struct bn_batch_job job = { .submission = score_submission,
						  .finish = score_finish,
						  .settle = score_settle,
						  .ctx = &j };
		rc = bn_run_batch(c, n, &job, timeout_ns);
	}
	free(j.reqs);
	free(j.params);
	return rc;
}

int bn_score(struct bn_client *c, struct bn_score_item *item, int64_t timeout_ns)
{
	if (!item)
		return -BN_E_INVALID;
	struct bn_batch_result r;
	int rc = bn_score_batch(c, item, 1, &r, timeout_ns);
	return rc < 0 && rc != -BN_E_DISCONNECTED ? rc : item->error;
}
