/* SPDX-License-Identifier: MIT */
/*
 * The loopback backend: no model, a documented deterministic function of the prompt, so the
 * transport and scheduler can be tested token by token and measured without compute.
 *
 * Per sequence it keeps a 32-bit FNV-1a state over whole token ids:
 *     h = 2166136261;  for each token t: h = (h ^ t) * 16777619  (mod 2^32)
 * After the prompt, each step emits fmix32(h) % vocab_size (MurmurHash3's finalizer, so the
 * token's low bits do not echo h's, which a vocabulary that is a multiple of 256 would
 * otherwise collapse), and mixes that token into h. Like a real model
 * the next token depends on the whole sequence so far, so the scheduler must feed back exactly
 * the tokens it published and keep per-sequence state across steps.
 *
 * The emitted token is certain, so sampling parameters (validated by the daemon like for any
 * backend) do not change it, and its log-probability is 0 with no alternatives. It keeps no KV
 * cache but declares LOOPBACK_KV_BYTES per position, so --kv-memory limits admission exactly
 * as it does for a model (the scheduler's KV accounting is testable without compute).
 */
#include "backend.h"
#include "bitnet_shm.h"
#include "common/clock.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOOPBACK_FNV_BASIS 2166136261U
#define LOOPBACK_FNV_PRIME 16777619U
#define LOOPBACK_CONTEXT 4096U
#define LOOPBACK_BOS 1U
#define LOOPBACK_EOS 2U
#define LOOPBACK_KV_BYTES 1024U

struct loopback {
	uint32_t vocab_size;
	uint32_t max_seqs;
	uint32_t step_delay_us;
	uint32_t *length;  /* [max_seqs] tokens mixed in so far, to check positions */
	uint32_t *history; /* [max_seqs][LOOPBACK_CONTEXT] the FNV state after each position: a
			    * sequence's state is its last one's, so rewinding (speculative
			    * decoding) is setting its length */
};

static uint32_t loopback_mix(uint32_t h, uint32_t token)
{
	return (h ^ token) * LOOPBACK_FNV_PRIME;
}

static uint32_t loopback_fmix(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x85ebca6bU;
	x ^= x >> 13;
	x *= 0xc2b2ae35U;
	x ^= x >> 16;
	return x;
}

static int loopback_open(const struct bn_backend_options *opt, struct bn_model_desc *desc,
			 void **self)
{
	if (opt->vocab_size < 3) {
		bn_log_error("msg=\"loopback vocabulary must hold bos and eos\" vocab_size=%u",
			     opt->vocab_size);
		return -EINVAL;
	}
	struct loopback *lb = calloc(1, sizeof(*lb));
	if (!lb)
		return -ENOMEM;
	lb->vocab_size = opt->vocab_size;
	lb->max_seqs = opt->max_seqs;
	lb->step_delay_us = opt->step_delay_us;
	lb->length = calloc(opt->max_seqs, sizeof(uint32_t));
	lb->history = calloc((size_t)opt->max_seqs * LOOPBACK_CONTEXT, sizeof(uint32_t));
	if (!lb->length || !lb->history) {
		free(lb->length);
		free(lb->history);
		free(lb);
		return -ENOMEM;
	}
	memset(desc, 0, sizeof(*desc));
	snprintf(desc->name, sizeof(desc->name), "loopback");
	desc->vocab_size = opt->vocab_size;
	desc->context_length = LOOPBACK_CONTEXT;
	desc->bos_id = LOOPBACK_BOS;
	desc->eos_id = LOOPBACK_EOS;
	desc->kind = BN_BACKEND_LOOPBACK;
	desc->kv_bytes_per_token = LOOPBACK_KV_BYTES;
	desc->kv_release_tokens = 1; /* it holds no KV memory: nothing stays behind a block */
	*self = lb;
	return 0;
}

static void loopback_close(void *self)
{
	struct loopback *lb = self;
	if (!lb)
		return;
	free(lb->length);
	free(lb->history);
	free(lb);
}

static int loopback_seq_open(void *self, uint32_t seq)
{
	struct loopback *lb = self;
	if (seq >= lb->max_seqs)
		return -EINVAL;
	lb->length[seq] = 0;
	return 0;
}

static int loopback_seq_rewind(void *self, uint32_t seq, uint32_t length)
{
	struct loopback *lb = self;
	if (seq >= lb->max_seqs || length > lb->length[seq])
		return -EINVAL;
	lb->length[seq] = length;
	return 0;
}

static void loopback_seq_close(void *self, uint32_t seq)
{
	(void)self;
	(void)seq;
}

static void loopback_delay(uint32_t us)
{
	/* Busy, not asleep: it stands in for compute, which keeps the core. */
	uint64_t until = bn_now_ns() + (uint64_t)us * 1000u;
	while (bn_now_ns() < until)
		bn_cpu_relax();
}

static int loopback_kv_init(void *self, uint32_t n_blocks, uint32_t block_tokens)
{
	(void)self;
	(void)n_blocks;
	(void)block_tokens;
	return 0;
}

static int loopback_kv_release(void *self, uint32_t first, uint32_t n)
{
	(void)self;
	(void)first;
	(void)n;
	return 0;
}

static int loopback_step(void *self, const struct bn_batch *batch, struct bn_sample_out *out)
{
	struct loopback *lb = self;
	for (uint32_t r = 0; r < batch->n_rows; r++) {
		uint32_t seq = batch->seq[r];
		if (seq >= lb->max_seqs || batch->pos[r] != lb->length[seq] ||
		    (uint64_t)batch->pos[r] + batch->lens[r] > LOOPBACK_CONTEXT)
			return -EINVAL; /* the scheduler lost track of a sequence: a bug, say so */
		const uint32_t *row = batch->tokens + (size_t)r * batch->width;
		uint32_t *states = lb->history + (size_t)seq * LOOPBACK_CONTEXT;
		uint32_t h = batch->pos[r] ? states[batch->pos[r] - 1] : LOOPBACK_FNV_BASIS;
		for (uint32_t i = 0; i < batch->lens[r]; i++) {
			h = loopback_mix(h, row[i]);
			states[batch->pos[r] + i] = h;
			if (bn_batch_verifies(batch, r)) /* every position's token (batch.h) */
				batch->verify[r][i] = (struct bn_sample_out){
					.token = loopback_fmix(h) % lb->vocab_size,
					.top = batch->verify[r][i].top };
		}
		lb->length[seq] += batch->lens[r];
		if (batch->sample[r] && !bn_batch_verifies(batch, r))
			out[r] = (struct bn_sample_out){ .token = loopback_fmix(h) % lb->vocab_size,
							 .top = out[r].top };
	}
	if (lb->step_delay_us)
		loopback_delay(lb->step_delay_us);
	return 0;
}

const struct bn_backend_ops bn_backend_loopback = {
	.name = "loopback",
	.open = loopback_open,
	.close = loopback_close,
	.kv_init = loopback_kv_init,
	.kv_release = loopback_kv_release,
	.seq_open = loopback_seq_open,
	.seq_close = loopback_seq_close,
	.seq_rewind = loopback_seq_rewind,
	.step = loopback_step,
	.concurrent_steps = 1, /* so the daemon's overlapped steps are tested without a GPU */
};
