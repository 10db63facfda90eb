/* SPDX-License-Identifier: MIT */
/*
 * make_request_corpus.c — writes the seed corpus of the request-path fuzz target
 * (tests/corpus/requests/): scripts of honest requests of every kind that run to their end,
 * and the ring violations, each a small step from the others, so the fuzzer starts on both
 * sides of every check. Offsets come from the daemon's own layout (bn_segment_layout). Run it
 * again only to change the corpus:
 *
 *   make build/libbitnetd-core.a && cc -std=gnu11 -Ishm -Ikernels -Ikernels/cpu \
 *       tests/make_request_corpus.c build/libbitnetd-core.a -o /tmp/mrc -luring -lm \
 *       && /tmp/mrc tests/corpus/requests
 */
#include "../daemon/session.h"
#include "bitnet_shm.h"
#include "fuzz_requests.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct script {
	uint8_t buf[4096];
	size_t len;
	struct bn_shm_header layout;
};

static void put(struct script *s, uint32_t v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		s->buf[s->len++] = (uint8_t)(v >> (8 * i));
}

static void begin(struct script *s, uint32_t slots)
{
	memset(s, 0, sizeof(*s));
	struct bn_session_limits lim = { .slots = FUZZ_SLOTS, .prompt_capacity = FUZZ_CONTEXT,
					 .output_capacity = FUZZ_CONTEXT,
					 .logprob_capacity = FUZZ_LOGPROBS };
	bn_segment_layout(&lim, slots, &s->layout);
	put(s, slots - 1, 1); /* requested_slots = 1 + byte % FUZZ_SLOTS */
	put(s, 1, 1);         /* weight */
}

/* One u32 word written at `offset` of slot `slot`'s fixed part (or its arrays). */
static void slot_word(struct script *s, uint32_t slot, size_t offset, uint32_t v)
{
	put(s, FUZZ_WRITE, 1);
	put(s, (uint32_t)(s->layout.slot_offset + slot * s->layout.slot_size + offset), 2);
	put(s, 3, 1); /* four bytes */
	put(s, v, 4);
}

static void slot_float(struct script *s, uint32_t slot, size_t offset, float f)
{
	uint32_t v;
	memcpy(&v, &f, sizeof(v));
	slot_word(s, slot, offset, v);
}

/* A request in `slot`: n prompt tokens 3, 4, ... (below the vocabulary), max_tokens, flags. */
static void request(struct script *s, uint32_t slot, uint32_t n, uint32_t max_tokens,
		    uint32_t flags)
{
	slot_word(s, slot, offsetof(struct bn_slot, n_prompt), n);
	slot_word(s, slot, offsetof(struct bn_slot, max_tokens), max_tokens);
	slot_word(s, slot, offsetof(struct bn_slot, flags), flags);
	for (uint32_t i = 0; i < n; i++)
		slot_word(s, slot, s->layout.slot_prompt_offset + 4 * i, 3 + i % 90);
	slot_word(s, slot, offsetof(struct bn_slot, state), BN_SLOT_SUBMITTED);
}

static void op(struct script *s, enum fuzz_op o, uint32_t arg, size_t n)
{
	put(s, o, 1);
	put(s, arg, n);
}

static void steps(struct script *s, int n)
{
	for (int i = 0; i < n; i++)
		op(s, FUZZ_STEP, 0, 0);
}

static void save(const struct script *s, const char *dir, const char *name)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(s->buf, 1, s->len, f) != s->len || fclose(f) != 0) {
		fprintf(stderr, "make_request_corpus: cannot write %s\n", path);
		exit(1);
	}
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: make_request_corpus DIR\n");
		return 2;
	}
	const char *dir = argv[1];
	struct script s;

	begin(&s, 2); /* greedy to its length, then the slot again */
	request(&s, 0, 3, 5, BN_REQ_IGNORE_EOS);
	op(&s, FUZZ_QUEUE, 0, 1);
	op(&s, FUZZ_POLL, 0, 0);
	steps(&s, 8);
	op(&s, FUZZ_QUEUE, 0, 1);
	op(&s, FUZZ_POLL, 0, 0);
	steps(&s, 8);
	save(&s, dir, "greedy-twice");

	begin(&s, 2); /* sampling, log-probabilities and a stop id; a cancel */
	request(&s, 0, 4, 20, BN_REQ_SEED | BN_REQ_LOGPROBS);
	slot_float(&s, 0, offsetof(struct bn_slot, temperature), 0.8f);
	slot_word(&s, 0, offsetof(struct bn_slot, top_k), 10);
	slot_float(&s, 0, offsetof(struct bn_slot, top_p), 0.9f);
	slot_word(&s, 0, offsetof(struct bn_slot, seed_lo), 42);
	slot_word(&s, 0, offsetof(struct bn_slot, n_logprobs), FUZZ_LOGPROBS);
	slot_word(&s, 0, offsetof(struct bn_slot, n_stop), 1);
	slot_word(&s, 0, s.layout.slot_prompt_offset + 4 * 4, 7);
	request(&s, 1, 2, 30, BN_REQ_IGNORE_EOS);
	op(&s, FUZZ_QUEUE, 0, 1);
	op(&s, FUZZ_QUEUE, 1, 1);
	op(&s, FUZZ_POLL, 0, 0);
	steps(&s, 5);
	slot_word(&s, 1, offsetof(struct bn_slot, cancel), 1);
	steps(&s, 5);
	save(&s, dir, "sampled-cancelled");

	begin(&s, 4); /* the drain: one running, one queued, one arriving after */
	request(&s, 0, 2, 40, BN_REQ_IGNORE_EOS);
	request(&s, 1, 2, 40, BN_REQ_IGNORE_EOS);
	request(&s, 2, 2, 40, 0);
	op(&s, FUZZ_QUEUE, 0, 1);
	op(&s, FUZZ_POLL, 0, 0);
	steps(&s, 3);
	op(&s, FUZZ_QUEUE, 1, 1);
	op(&s, FUZZ_POLL, 0, 0);
	op(&s, FUZZ_DRAIN, 0, 0);
	op(&s, FUZZ_QUEUE, 2, 1);
	op(&s, FUZZ_POLL, 0, 0);
	steps(&s, 3);
	save(&s, dir, "drain");

	begin(&s, 4); /* request errors: too long, a token out of range, no KV room, empty */
	request(&s, 0, 30, 40, 0);
	request(&s, 1, 3, 5, 0);
	slot_word(&s, 1, s.layout.slot_prompt_offset, FUZZ_VOCAB + 5);
	request(&s, 2, 20, 40, 0);
	request(&s, 3, 0, 5, 0);
	for (uint32_t i = 0; i < 4; i++)
		op(&s, FUZZ_QUEUE, i, 1);
	op(&s, FUZZ_POLL, 0, 0);
	steps(&s, 2);
	save(&s, dir, "request-errors");

	begin(&s, 2); /* a deadline and the KV pool full: one waits for the other */
	request(&s, 0, 10, 30, BN_REQ_IGNORE_EOS);
	slot_word(&s, 0, offsetof(struct bn_slot, deadline_ms), 1);
	request(&s, 1, 10, 30, BN_REQ_IGNORE_EOS);
	op(&s, FUZZ_QUEUE, 0, 1);
	op(&s, FUZZ_QUEUE, 1, 1);
	op(&s, FUZZ_POLL, 0, 0);
	steps(&s, 40);
	save(&s, dir, "deadline-kv-wait");

	begin(&s, 2); /* violations: a slot out of range behind an honest one */
	request(&s, 0, 3, 10, 0);
	op(&s, FUZZ_QUEUE, 0, 1);
	op(&s, FUZZ_POLL, 0, 0);
	steps(&s, 2);
	request(&s, 1, 3, 10, 0);
	op(&s, FUZZ_QUEUE, 1, 1);
	op(&s, FUZZ_QUEUE, 5, 1);
	op(&s, FUZZ_POLL, 0, 0);
	save(&s, dir, "bad-slot");

	begin(&s, 2); /* a slot queued while in flight */
	request(&s, 0, 3, 30, BN_REQ_IGNORE_EOS);
	op(&s, FUZZ_QUEUE, 0, 1);
	op(&s, FUZZ_POLL, 0, 0);
	steps(&s, 2);
	op(&s, FUZZ_QUEUE, 0, 1);
	op(&s, FUZZ_POLL, 0, 0);
	save(&s, dir, "double-queue");

	begin(&s, 1); /* a tail far beyond head */
	op(&s, FUZZ_TAIL, 1000, 4);
	op(&s, FUZZ_POLL, 0, 0);
	save(&s, dir, "tail-ahead");
	return 0;
}
