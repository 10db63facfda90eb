/* SPDX-License-Identifier: MIT */
/*
 * draft.h — draft tokens for exact speculative decoding, looked up in a request's own tokens
 * (prompt lookup): the longest suffix of its tokens so far, of BN_DRAFT_MAX_NGRAM tokens down
 * to one, that occurred before, and the tokens that followed it there. No second model. The
 * drafts are only a guess: the scheduler verifies them in one step (sched_plan.c) and keeps
 * those the model itself produces, so a draft can make a request faster or slower, never
 * different.
 *
 * The index is a hash table of the request's n-grams, each mapped to where its latest
 * occurrence ended; an n-gram lost to a full table only costs a draft. The draft length
 * adapts: it grows while drafts are accepted whole, falls to what was accepted plus one when
 * some are not, and a request whose drafts miss entirely pauses drafting for 1, 2, 4, ... up
 * to BN_DRAFT_MAX_PAUSE steps, so one that never hits costs almost nothing.
 */
#ifndef BITNETD_DRAFT_H
#define BITNETD_DRAFT_H

#include <stdint.h>

#define BN_DRAFT_MAX_NGRAM 4
#define BN_DRAFT_MAX_TOKENS 16 /* --draft-tokens' upper bound */
#define BN_DRAFT_MAX_PAUSE 64

/* A request's tokens: its prompt, then its output so far. */
struct bn_draft_tokens {
	const uint32_t *prompt;
	uint32_t n_prompt;
	const uint32_t *output;
	uint32_t n_output;
};

struct bn_drafter {
	uint32_t *slots;     /* [cap]: 1 + the index of the token that followed an n-gram; 0 empty */
	uint32_t cap;        /* a power of two, 0 before the first use */
	uint32_t n_indexed;  /* tokens whose preceding n-grams are in the table */
	uint32_t k;          /* drafts to propose at most now */
	uint32_t k_max;
	uint32_t pause;      /* steps left without drafting */
	uint32_t next_pause; /* the pause after the next draft that misses entirely */
};

/* Ready to draft for a request of up to max_len tokens, k_max drafts at most a step. 0 or
 * -ENOMEM. */
int bn_drafter_init(struct bn_drafter *d, uint32_t max_len, uint32_t k_max);
void bn_drafter_free(struct bn_drafter *d);

/* Up to min(the current draft length, room) draft tokens into out[] that continue t; 0 when
 * no suffix of t occurred before, or while drafting is paused (a step of the pause is spent).
 * The tokens t holds are indexed first. */
uint32_t bn_drafter_propose(struct bn_drafter *d, const struct bn_draft_tokens *t,
			    uint32_t room, uint32_t *out);

/* What verification made of the last proposal: `accepted` of its `drafted` tokens were the
 * model's own. The draft length and the pause adapt. */
void bn_drafter_result(struct bn_drafter *d, uint32_t drafted, uint32_t accepted);

#endif /* BITNETD_DRAFT_H */
