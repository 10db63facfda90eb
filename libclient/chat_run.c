/* SPDX-License-Identifier: MIT */
/*
 * libbitnet-client: bn_chat and bn_chat_batch — conversations in, replies out, over the same
 * batch machinery as bn_generate_batch, so a conversation's reply is the one the same ids get
 * alone. One item's failure (a bad role, a prompt too long) is that item's; the others run.
 */
#define _GNU_SOURCE
#include "bitnet_client.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The prompt ids of one conversation, malloc'd; item->error on failure. */
static uint32_t *chat_prompt(const struct bn_vocab *v, struct bn_chat_item *it, uint32_t *n)
{
	int k = bn_chat_tokenize(v, it->chat_template, it->messages, it->n_messages, NULL, 0);
	uint32_t *ids = k > 0 ? malloc((size_t)k * sizeof(*ids)) : NULL;
	if (k > 0 && ids)
		k = bn_chat_tokenize(v, it->chat_template, it->messages, it->n_messages, ids,
				     (uint32_t)k);
	else if (k >= 0)
		k = k == 0 ? -BN_E_EMPTY : -ENOMEM;
	if (k < 0) {
		free(ids);
		it->error = k;
		return NULL;
	}
	*n = (uint32_t)k;
	return ids;
}

/* The reply as text through a stream, so a reply cut by max_tokens inside a character still
 * ends in valid UTF-8. */
static int chat_reply(const struct bn_vocab *v, struct bn_chat_item *it, const uint32_t *ids,
		      uint32_t n)
{
	struct bn_text_stream *s;
	int rc = bn_text_stream_new(v, 0, &s);
	const char *text[2];
	size_t len[2] = { 0, 0 };
	if (rc == 0)
		rc = bn_text_stream_push(s, ids, n, &text[0], &len[0]);
	char *first = rc == 0 ? malloc(len[0] + 1) : NULL;
	if (rc == 0 && !first)
		rc = -ENOMEM;
	if (rc == 0) {
		memcpy(first, text[0], len[0]); /* finish() reuses the stream's buffer */
		rc = bn_text_stream_finish(s, &text[1], &len[1]);
	}
	if (rc == 0) {
		it->reply_len = len[0] + len[1];
		size_t room = it->reply_cap ? it->reply_cap - 1 : 0;
		size_t a = len[0] < room ? len[0] : room, b = len[1] < room - a ? len[1] : room - a;
		if (it->reply_cap) {
			memcpy(it->reply, first, a);
			memcpy(it->reply + a, text[1], b);
			it->reply[a + b] = '\0';
		}
	}
	free(first);
	bn_text_stream_free(s);
	return rc;
}

struct chat_run {
	struct bn_batch_item *items; /* one per conversation that tokenized */
	size_t *of;                  /* the conversation each belongs to */
	size_t n;
};

static int prepare(const struct bn_vocab *v, struct bn_chat_item *items, size_t n,
		   struct chat_run *run)
{
	run->items = calloc(n ? n : 1, sizeof(*run->items));
	run->of = calloc(n ? n : 1, sizeof(*run->of));
	if (!run->items || !run->of)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct bn_chat_item *it = &items[i];
		it->error = 0;
		it->reply_len = 0;
		it->result = (struct bn_result){ 0 };
		if (it->reply_cap && it->reply)
			it->reply[0] = '\0';
		if (it->reply_cap && !it->reply) {
			it->error = -BN_E_INVALID;
			continue;
		}
		uint32_t n_prompt = 0;
		uint32_t *ids = chat_prompt(v, it, &n_prompt);
		uint32_t *out = ids ? malloc(((size_t)it->max_tokens + 1) * sizeof(*out)) : NULL;
		if (!out) {
			it->error = ids ? -ENOMEM : it->error;
			free(ids);
			continue;
		}
		struct bn_batch_item *b = &run->items[run->n];
		b->req = (struct bn_request){ .prompt = ids, .n_prompt = n_prompt,
					      .max_tokens = it->max_tokens, .flags = it->flags,
					      .sampling = it->sampling };
		b->out = out;
		b->out_cap = it->max_tokens;
		run->of[run->n++] = i;
	}
	return 0;
}

static void collect(const struct bn_vocab *v, struct bn_chat_item *items, struct chat_run *run)
{
	for (size_t k = 0; k < run->n; k++) {
		struct bn_chat_item *it = &items[run->of[k]];
		struct bn_batch_item *b = &run->items[k];
		it->result = b->result;
		it->error = b->error;
		uint32_t got = b->result.n_tokens < b->out_cap ? b->result.n_tokens : b->out_cap;
		int rc = chat_reply(v, it, b->out, got);
		if (it->error == 0 && rc < 0)
			it->error = rc;
	}
}

static void run_free(struct chat_run *run)
{
	for (size_t k = 0; run->items && k < run->n; k++) {
		free((void *)run->items[k].req.prompt);
		free(run->items[k].out);
	}
	free(run->items);
	free(run->of);
}

int bn_chat_batch(struct bn_client *c, struct bn_chat_item *items, size_t n,
		  struct bn_batch_result *result, int64_t timeout_ns)
{
	if (!c || (n && !items) || !result)
		return -BN_E_INVALID;
	*result = (struct bn_batch_result){ 0 };
	const struct bn_vocab *v;
	int rc = bn_client_vocab(c, &v);
	if (rc < 0)
		return rc;
	struct chat_run run = { 0 };
	rc = prepare(v, items, n, &run);
	struct bn_batch_result br;
	if (rc == 0)
		rc = bn_generate_batch(c, run.items, run.n, &br, timeout_ns);
	if (rc == 0 || rc == -BN_E_DISCONNECTED)
		collect(v, items, &run);
	run_free(&run);
	for (size_t i = 0; i < n && rc != -ENOMEM; i++) {
		if (items[i].error)
			result->n_failed++;
		else
			result->n_ok++;
	}
	return rc;
}

int bn_chat(struct bn_client *c, struct bn_chat_item *item, int64_t timeout_ns)
{
	if (!item)
		return -BN_E_INVALID;
	struct bn_batch_result r;
	int rc = bn_chat_batch(c, item, 1, &r, timeout_ns);
	return rc < 0 ? rc : item->error;
}
