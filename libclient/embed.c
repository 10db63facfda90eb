/* SPDX-License-Identifier: MIT */
/*
 * libbitnet-client: bn_embed and bn_embed_batch — one pooled, L2-normalised vector per input
 * (shm/PROTOCOL.md §6.14), over the batch machinery bn_generate_batch uses, so an item's vector
 * is the one it gets alone and one item's failure is only its own.
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "client_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct embed_job {
	struct bn_embed_item *items;
	struct bn_request *reqs; /* [n] each item's request, alive while it runs */
	struct bn_batch_result *result;
};

/* The input is ids or text, never both; the vector has room as cap says. */
static int check_item(const struct bn_embed_item *it)
{
	if (!it->ids == !it->text || (it->ids && it->n_ids == 0) || (it->cap && !it->vector))
		return -BN_E_INVALID;
	return 0;
}

static int embed_submission(void *ctx, size_t i, struct bn_submission *sub)
{
	struct embed_job *j = ctx;
	struct bn_embed_item *it = &j->items[i];
	it->dim = it->n_tokens = it->pooling = it->trained = 0;
	it->result = (struct bn_result){ 0 };
	int rc = check_item(it);
	if (rc < 0)
		return rc;
	j->reqs[i] = (struct bn_request){ .prompt = it->ids, .n_prompt = it->text ? 0 : it->n_ids,
					  .flags = it->flags };
	*sub = (struct bn_submission){ .req = &j->reqs[i], .text = it->text, .len = it->text_len,
				       .op = BN_OP_EMBED };
	return 0;
}

/* The vector (the first cap words of it) and what the slot says of it, read while the slot
 * is still ours: after DONE, whose acquire (bn_wait) made every word below n_tokens
 * visible. */
static int read_vector(struct bn_handle *h, struct bn_embed_item *it)
{
	const struct bn_client *c = h->c;
	const struct bn_slot *s = slot_of(c, h->slot);
	uint32_t dim = it->result.n_tokens, info = bn_read_once(s->embed_pooling);
	if (dim == 0 || dim > c->layout.slot_output_capacity)
		return -BN_E_PROTOCOL;
	it->dim = dim;
	it->n_tokens = bn_read_once(s->prompt_tokens);
	it->pooling = info & 0xffu;
	it->trained = (info & BN_EMBED_TRAINED) != 0;
	const uint32_t *words = output_of(c, h->slot);
	for (uint32_t i = 0; i < dim && i < it->cap; i++) {
		uint32_t bits = bn_read_once(words[i]);
		memcpy(&it->vector[i], &bits, sizeof(bits));
	}
	return 0;
}

static int embed_finish(void *ctx, size_t i, struct bn_handle *h, int64_t deadline)
{
	struct bn_embed_item *it = &((struct embed_job *)ctx)->items[i];
	int rc = bn_wait(h, bn_time_left(deadline));
	if (rc == 0)
		rc = bn_result(h, &it->result);
	if (rc == 0 && it->result.status == BN_STATUS_ERROR)
		it->n_tokens = bn_read_once(slot_of(h->c, h->slot)->prompt_tokens);
	if (rc == 0)
		rc = bn_status_error(&it->result);
	if (rc == 0)
		rc = read_vector(h, it);
	bn_release(h);
	return rc;
}

static void embed_settle(void *ctx, size_t i, int rc)
{
	struct embed_job *j = ctx;
	bn_batch_settle(&j->items[i].error, &j->items[i].result, j->result, rc);
}

int bn_embed_batch(struct bn_client *c, struct bn_embed_item *items, size_t n,
		   struct bn_batch_result *result, int64_t timeout_ns)
{
	if (!c || (n && !items) || !result)
		return -BN_E_INVALID;
	*result = (struct bn_batch_result){ 0 };
	struct embed_job j = { .items = items, .result = result,
			       .reqs = calloc(n ? n : 1, sizeof(*j.reqs)) };
	if (!j.reqs)
		return -ENOMEM;
	const struct bn_batch_job job = { .submission = embed_submission, .finish = embed_finish,
					  .settle = embed_settle, .ctx = &j };
	int rc = bn_run_batch(c, n, &job, timeout_ns);
	free(j.reqs);
	return rc;
}

int bn_embed(struct bn_client *c, struct bn_embed_item *item, int64_t timeout_ns)
{
	if (!item)
		return -BN_E_INVALID;
	struct bn_batch_result r;
	int rc = bn_embed_batch(c, item, 1, &r, timeout_ns);
	return rc < 0 && rc != -BN_E_DISCONNECTED ? rc : item->error;
}

uint32_t bn_model_features(const struct bn_client *c)
{
	return c ? c->layout.features : 0;
}
