/* SPDX-License-Identifier: MIT */
/*
 * libbitnet-client: bn_classify and bn_classify_batch — each label's log-probability after one
 * prefix, the prefix computed once by the daemon (shm/PROTOCOL.md §6.12), over the batch
 * machinery bn_generate_batch uses, so an item's result is the one it gets alone and one
 * item's failure is only its own.
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "client_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct classify_job {
	struct bn_classify_item *items;
	struct bn_request *reqs;  /* [n] each item's request, alive while it runs */
	void **wire;              /* [n] each item's prompt words or text body, until settled */
	struct bn_batch_result *result;
};

/* The prefix is ids with label ids, or text with label texts; the outputs have room. */
static int check_item(const struct bn_classify_item *it)
{
	int ids = it->prefix_ids != NULL;
	if (ids == (it->text != NULL) || (ids && !(it->label_ids && it->label_n_ids)) ||
	    (!ids && !it->labels) || (it->n_labels && !it->scores))
		return -BN_E_INVALID;
	for (uint32_t i = 0; i < it->n_labels; i++)
		if (ids ? (it->label_n_ids[i] && !it->label_ids[i]) : !it->labels[i])
			return -BN_E_INVALID;
	return 0;
}

static void put_u32(uint8_t **at, uint32_t v)
{
	memcpy(*at, &v, sizeof(v));
	*at += sizeof(v);
}

/* §6.12's text body: bn_classify_head, the prefix, then each label's length and bytes. */
static uint8_t *text_body(const struct bn_classify_item *it, size_t *len)
{
	size_t n = sizeof(struct bn_classify_head) + it->text_len;
	for (uint32_t i = 0; i < it->n_labels; i++)
		n += 4 + strlen(it->labels[i]);
	uint8_t *body = malloc(n), *at = body;
	if (!body || n > UINT32_MAX) {
		free(body);
		return NULL;
	}
	put_u32(&at, it->n_labels);
	put_u32(&at, (uint32_t)it->text_len);
	memcpy(at, it->text, it->text_len);
	at += it->text_len;
	for (uint32_t i = 0; i < it->n_labels; i++) {
		size_t l = strlen(it->labels[i]);
		put_u32(&at, (uint32_t)l);
		memcpy(at, it->labels[i], l);
		at += l;
	}
	*len = n;
	return body;
}

/* §6.12's prompt words: n_labels, n_prefix, the label lengths, the prefix, the labels. */
static uint32_t *id_words(const struct bn_classify_item *it, uint32_t *n_words)
{
	uint64_t n = 2u + (uint64_t)it->n_labels + it->n_prefix_ids;
	for (uint32_t i = 0; i < it->n_labels; i++)
		n += it->label_n_ids[i];
	uint32_t *w = n <= UINT32_MAX ? malloc(n * sizeof(*w)) : NULL, *at = w;
	if (!w)
		return NULL;
	*at++ = it->n_labels;
	*at++ = it->n_prefix_ids;
	for (uint32_t i = 0; i < it->n_labels; i++)
		*at++ = it->label_n_ids[i];
	memcpy(at, it->prefix_ids, (size_t)it->n_prefix_ids * sizeof(*w));
	at += it->n_prefix_ids;
	for (uint32_t i = 0; i < it->n_labels; i++) {
		memcpy(at, it->label_ids[i], (size_t)it->label_n_ids[i] * sizeof(*w));
		at += it->label_n_ids[i];
	}
	*n_words = (uint32_t)n;
	return w;
}

static int classify_submission(void *ctx, size_t i, struct bn_submission *sub)
{
	struct classify_job *j = ctx;
	struct bn_classify_item *it = &j->items[i];
	it->best = 0;
	it->result = (struct bn_result){ 0 };
	int rc = check_item(it);
	if (rc < 0)
		return rc;
	size_t len = 0;
	uint32_t n_words = 0;
	j->wire[i] = it->text ? (void *)text_body(it, &len) : (void *)id_words(it, &n_words);
	if (!j->wire[i])
		return -ENOMEM;
	j->reqs[i] = (struct bn_request){ .prompt = it->text ? NULL : j->wire[i],
					  .n_prompt = n_words };
	*sub = (struct bn_submission){ .req = &j->reqs[i], .text = it->text ? j->wire[i] : NULL,
				       .len = len, .op = BN_OP_CLASSIFY };
	return 0;
}

/* Each label's token count: the item's own for ids, the daemon's for text (its text
 * region holds them, §6.12). */
static int label_counts(struct bn_handle *h, struct bn_classify_item *it)
{
	for (uint32_t i = 0; it->prefix_ids && i < it->n_labels; i++)
		it->scores[i].n_tokens = it->label_n_ids[i];
	if (it->prefix_ids)
		return 0;
	size_t bytes = (size_t)it->n_labels * sizeof(uint32_t);
	uint32_t *counts = malloc(bytes);
	if (!counts)
		return -ENOMEM;
	int n = bn_read_text(h, 0, (char *)counts, bytes, NULL);
	for (uint32_t i = 0; n >= 0 && (size_t)n >= bytes && i < it->n_labels; i++)
		it->scores[i].n_tokens = counts[i];
	free(counts);
	return n < 0 ? n : (size_t)n < bytes ? -BN_E_PROTOCOL : 0;
}

#define CHUNK 64

/* The records, label after label, summed in binary64; then each label's mean and its share
 * of the probability (a softmax over the sums, taken from the largest for range). */
static int read_labels(struct bn_handle *h, struct bn_classify_item *it)
{
	int rc = label_counts(h, it);
	uint64_t total = 0;
	for (uint32_t i = 0; rc == 0 && i < it->n_labels; i++)
		total += it->scores[i].n_tokens;
	if (rc == 0 && total != it->result.n_tokens)
		rc = -BN_E_PROTOCOL;
	struct bn_logprob rec[CHUNK];
	uint32_t label = 0, left = it->n_labels ? it->scores[0].n_tokens : 0;
	for (uint32_t at = 0; rc == 0 && at < total;) {
		int k = bn_read_records(h, at, rec, NULL, CHUNK);
		rc = k < 0 ? k : k == 0 ? -BN_E_PROTOCOL : 0;
		for (int i = 0; i < k; i++, at++) {
			while (left == 0)
				left = it->scores[++label].n_tokens;
			it->scores[label].logprob += rec[i].logprob;
			left--;
		}
	}
	if (rc < 0)
		return rc;
	double top = -INFINITY, norm = 0;
	for (uint32_t i = 0; i < it->n_labels; i++)
		if (it->scores[i].logprob > top) {
			top = it->scores[i].logprob;
			it->best = i;
		}
	for (uint32_t i = 0; i < it->n_labels; i++)
		norm += exp(it->scores[i].logprob - top);
	for (uint32_t i = 0; i < it->n_labels; i++) {
		struct bn_label_score *sc = &it->scores[i];
		sc->mean = sc->logprob / sc->n_tokens;
		sc->prob = exp(sc->logprob - top) / norm;
	}
	return 0;
}

static int classify_finish(void *ctx, size_t i, struct bn_handle *h, int64_t deadline)
{
	struct bn_classify_item *it = &((struct classify_job *)ctx)->items[i];
	for (uint32_t l = 0; l < it->n_labels; l++)
		it->scores[l] = (struct bn_label_score){ 0 };
	int rc = bn_wait(h, bn_time_left(deadline));
	if (rc == 0)
		rc = bn_result(h, &it->result);
	if (rc == 0)
		rc = bn_status_error(&it->result);
	if (rc == 0)
		rc = read_labels(h, it);
	bn_release(h);
	return rc;
}

static void classify_settle(void *ctx, size_t i, int rc)
{
	struct classify_job *j = ctx;
	free(j->wire[i]);
	j->wire[i] = NULL;
	bn_batch_settle(&j->items[i].error, &j->items[i].result, j->result, rc);
}

int bn_classify_batch(struct bn_client *c, struct bn_classify_item *items, size_t n,
		      struct bn_batch_result *result, int64_t timeout_ns)
{
	if (!c || (n && !items) || !result)
		return -BN_E_INVALID;
	*result = (struct bn_batch_result){ 0 };
	struct classify_job j = { .items = items, .result = result,
				  .reqs = calloc(n ? n : 1, sizeof(*j.reqs)),
				  .wire = calloc(n ? n : 1, sizeof(*j.wire)) };
	int rc = -ENOMEM;
	if (j.reqs && j.wire) {
		const struct bn_batch_job job = { .submission = classify_submission,
						  .finish = classify_finish,
						  .settle = classify_settle,
						  .ctx = &j };
		rc = bn_run_batch(c, n, &job, timeout_ns);
	}
	for (size_t i = 0; j.wire && i < n; i++)
		free(j.wire[i]);
	free(j.reqs);
	free(j.wire);
	return rc;
}

int bn_classify(struct bn_client *c, struct bn_classify_item *item, int64_t timeout_ns)
{
	if (!item)
		return -BN_E_INVALID;
	struct bn_batch_result r;
	int rc = bn_classify_batch(c, item, 1, &r, timeout_ns);
	return rc < 0 && rc != -BN_E_DISCONNECTED ? rc : item->error;
}
