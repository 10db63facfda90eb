/* SPDX-License-Identifier: MIT */
/*
 * draft.c — prompt-lookup drafts (draft.h): an n-gram table over a request's tokens, the
 * lookup of its suffix, and the adaptive draft length.
 */
#include "draft.h"

#include <errno.h>
#include <stdlib.h>

static uint32_t token_at(const struct bn_draft_tokens *t, uint32_t i)
{
	return i < t->n_prompt ? t->prompt[i] : t->output[i - t->n_prompt];
}

static uint32_t length_of(const struct bn_draft_tokens *t)
{
	return t->n_prompt + t->n_output;
}

/* The hash of the n tokens that end before `end`, n itself mixed in so that sizes differ. */
static uint32_t ngram_hash(const struct bn_draft_tokens *t, uint32_t end, uint32_t n)
{
	uint64_t h = 0x9E3779B97F4A7C15ull * (n + 1);
	for (uint32_t i = end - n; i < end; i++) {
		h ^= token_at(t, i);
		h *= 0xff51afd7ed558ccdull;
		h ^= h >> 32;
	}
	return (uint32_t)h;
}

/* The n tokens before a and before b are the same. */
static int same_ngram(const struct bn_draft_tokens *t, uint32_t a, uint32_t b, uint32_t n)
{
	for (uint32_t i = 1; i <= n; i++)
		if (token_at(t, a - i) != token_at(t, b - i))
			return 0;
	return 1;
}

int bn_drafter_init(struct bn_drafter *d, uint32_t max_len, uint32_t k_max)
{
	/* At most BN_DRAFT_MAX_NGRAM entries per token, at most half full. */
	uint64_t want = (uint64_t)max_len * BN_DRAFT_MAX_NGRAM * 2;
	uint32_t cap = 64;
	while (cap < want && cap < (1u << 30))
		cap <<= 1;
	*d = (struct bn_drafter){ .slots = calloc(cap, sizeof(uint32_t)), .cap = cap,
				  .k = k_max, .k_max = k_max, .next_pause = 1 };
	return d->slots ? 0 : -ENOMEM;
}

void bn_drafter_free(struct bn_drafter *d)
{
	free(d->slots);
	*d = (struct bn_drafter){ 0 };
}

/* The n-gram that ends before `end` now points at end (its latest occurrence): it replaces
 * the slot of an equal n-gram, or takes the first empty one. A full probe run drops it. */
static void insert(struct bn_drafter *d, const struct bn_draft_tokens *t, uint32_t end, uint32_t n)
{
	uint32_t mask = d->cap - 1, at = ngram_hash(t, end, n) & mask;
	for (uint32_t probe = 0; probe < 32; probe++, at = (at + 1) & mask) {
		uint32_t v = d->slots[at];
		if (v == 0 || (v - 1 >= n && same_ngram(t, v - 1, end, n))) {
			d->slots[at] = end + 1;
			return;
		}
	}
}

/* Where the n tokens that end `t` last occurred before: the index of the token after them,
 * or 0 when they did not (index 0 cannot follow an n-gram). */
static uint32_t lookup(const struct bn_drafter *d, const struct bn_draft_tokens *t, uint32_t n)
{
	uint32_t len = length_of(t), mask = d->cap - 1, at = ngram_hash(t, len, n) & mask;
	for (uint32_t probe = 0; probe < 32; probe++, at = (at + 1) & mask) {
		uint32_t v = d->slots[at];
		if (v == 0)
			return 0;
		if (v - 1 >= n && same_ngram(t, v - 1, len, n))
			return v - 1;
	}
	return 0;
}

/* Every n-gram followed by a token of t goes in: those ending before index 1 .. len - 1. */
static void index_tokens(struct bn_drafter *d, const struct bn_draft_tokens *t)
{
	uint32_t len = length_of(t);
	if (d->n_indexed == 0)
		d->n_indexed = 1;
	for (; d->n_indexed < len; d->n_indexed++)
		for (uint32_t n = 1; n <= BN_DRAFT_MAX_NGRAM && n <= d->n_indexed; n++)
			insert(d, t, d->n_indexed, n);
}

uint32_t bn_drafter_propose(struct bn_drafter *d, const struct bn_draft_tokens *t,
			    uint32_t room, uint32_t *out)
{
	index_tokens(d, t);
	if (d->pause) {
		d->pause--;
		return 0;
	}
	uint32_t len = length_of(t), want = d->k < room ? d->k : room;
	for (uint32_t n = BN_DRAFT_MAX_NGRAM; n >= 1 && want; n--) {
		if (n > len)
			continue;
		uint32_t from = lookup(d, t, n);
		if (!from)
			continue;
		/* Copied like an overlapping LZ77 match: past the end of t the copy reads its own
		 * drafts, so a run that repeats with period len - from continues in full. */
		for (uint32_t i = 0; i < want; i++)
			out[i] = from + i < len ? token_at(t, from + i) : out[from + i - len];
		return want;
	}
	return 0;
}

void bn_drafter_result(struct bn_drafter *d, uint32_t drafted, uint32_t accepted)
{
	if (drafted == 0)
		return;
	if (accepted == drafted) {
		if (d->k < d->k_max)
			d->k++;
		d->next_pause = 1;
	} else if (accepted > 0) {
		d->k = accepted + 1;
		d->next_pause = 1;
	} else {
		d->k = 1;
		d->pause = d->next_pause;
		if (d->next_pause < BN_DRAFT_MAX_PAUSE)
			d->next_pause *= 2;
	}
}
