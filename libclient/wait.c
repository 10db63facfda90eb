/* SPDX-License-Identifier: MIT */
/*
 * wait.c — waiting for a request (§8: spin, then sleep on the slot's futex in bounded slices),
 * reading its tokens, text, log-probabilities and result, cancelling and releasing it.
 * The protocol is shm/PROTOCOL.md; section numbers in comments refer to it.
 */
#define _GNU_SOURCE
#include "client_internal.h"

#include "bitnet_futex.h"

#include <errno.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Waiting (§8): spin, then declare the wait and sleep on the futex in bounded slices          */
/* ------------------------------------------------------------------------------------------ */

/* Whether the thing waited for has happened: the request ended, or (have >= 0) more than
 * `have` tokens exist. */
static int wait_satisfied(struct bn_handle *h, int64_t have)
{
	if (slot_done(h->c, h->slot))
		return 1;
	/* Acquire pairs with the daemon's store-release of n_tokens. */
	return have >= 0 && bn_load_acquire(slot_of(h->c, h->slot)->n_tokens) != (uint32_t)have;
}

/* Declares the wait, re-checks, and sleeps on the events word while it holds `seen`.
 * Returns -ETIMEDOUT when the whole slice passed without a wake-up. */
static int sleep_on(struct bn_handle *h, uint32_t seen, int64_t have, int64_t slice_ns)
{
	struct bn_slot *s = slot_of(h->c, h->slot);
	bn_write_once(s->waiters, have >= 0 ? BN_WAIT_TOKENS : BN_WAIT_DONE);
	/* Full fence: the waiters store is ordered before the re-check below (FUTEX_WAIT fences
	 * again before the kernel compares events). The daemon stores events, fences, then reads
	 * waiters: either it sees our flag and wakes us, or we see its change and do not sleep. */
	bn_smp_mb();
	int rc = 0;
	if (!wait_satisfied(h, have)) {
		__atomic_fetch_add(&h->c->stats.futex_waits, 1, __ATOMIC_RELAXED);
		rc = bn_futex_wait(&s->events, seen, slice_ns);
	}
	bn_write_once(s->waiters, 0);
	return rc;
}

/* The daemon hung up and h's slot is not DONE. If it closed the ring first (a shutdown,
 * §11.3), it took its last request and answered it before the hang-up: h's was never taken
 * and ended with SHUTDOWN, which goes into the slot as the daemon would have written it (the
 * segment is ours alone now). Returns 1 then; 0 when the daemon just vanished. */
static int end_untaken(struct bn_handle *h)
{
	if (!(daemon_flags(h->c) & BN_DAEMON_CLOSED))
		return 0;
	struct bn_slot *s = slot_of(h->c, h->slot);
	s->status = BN_STATUS_SHUTDOWN;
	s->error = 0;
	s->n_tokens = 0;
	s->queue_ns = s->first_token_ns = s->total_ns = 0;
	bn_store_release(s->state, BN_SLOT_DONE);
	return 1;
}

static int wait_on(struct bn_handle *h, int64_t have, int64_t timeout_ns)
{
	struct bn_client *c = h->c;
	struct bn_slot *s = slot_of(c, h->slot);
	int64_t start = now_ns();
	int64_t deadline = timeout_ns < 0 ? INT64_MAX : start + timeout_ns;
	/* A daemon we had to wake is often placed on our CPU: spinning here would keep it from
	 * running until our spin ends (measured: 165 us round trips with a 100 us spin, 24 us
	 * without), so such a wait sleeps at once. */
	int64_t spin = h->woke_daemon ? 0 : (int64_t)c->spin_ns;
	for (;;) {
		/* Read events before the condition: a change after this read wakes the futex. */
		uint32_t seen = bn_load_acquire(s->events);
		if (wait_satisfied(h, have))
			return 0;
		int64_t now = now_ns();
		if (now - start < spin && now < deadline) {
			cpu_relax();
			continue;
		}
		if (now >= deadline)
			return -BN_E_TIMEOUT;
		int64_t slice = deadline - now < SLEEP_SLICE_NS ? deadline - now : SLEEP_SLICE_NS;
		/* Liveness costs a poll(2): check it only when a whole slice passed in silence, so
		 * a dead daemon is noticed within one slice and a live one costs nothing extra. */
		if (sleep_on(h, seen, have, slice) == -ETIMEDOUT && daemon_gone(c))
			return wait_satisfied(h, have) || end_untaken(h) ? 0 : -BN_E_DISCONNECTED;
	}
}

int bn_wait(struct bn_handle *h, int64_t timeout_ns)
{
	return wait_on(h, -1, timeout_ns);
}

int bn_wait_tokens(struct bn_handle *h, uint32_t have, int64_t timeout_ns)
{
	return wait_on(h, have, timeout_ns);
}

int bn_read_tokens(struct bn_handle *h, uint32_t from, uint32_t *out, uint32_t cap)
{
	struct bn_client *c = h->c;
	/* Acquire pairs with the daemon's store-release of n_tokens: tokens below it are written. */
	uint32_t n = bn_load_acquire(slot_of(c, h->slot)->n_tokens);
	if (n > c->layout.slot_output_capacity)
		n = c->layout.slot_output_capacity;
	if (from >= n)
		return 0;
	uint32_t k = n - from < cap ? n - from : cap;
	memcpy(out, output_of(c, h->slot) + from, (size_t)k * sizeof(uint32_t));
	return (int)k;
}

int bn_read_text(struct bn_handle *h, size_t from, char *buf, size_t cap, uint32_t *prompt_tokens)
{
	struct bn_client *c = h->c;
	const struct bn_slot *s = slot_of(c, h->slot);
	if (!(c->layout.features & BN_FEAT_TEXT) || (cap && !buf))
		return -BN_E_INVALID;
	/* Acquire pairs with the daemon's store-release of n_text: bytes below it are written. */
	uint32_t n = bn_load_acquire(s->n_text);
	if (n > c->layout.slot_text_capacity)
		n = c->layout.slot_text_capacity;
	if (prompt_tokens)
		*prompt_tokens = bn_read_once(s->prompt_tokens);
	if (from < n)
		memcpy(buf, text_of(c, h->slot) + from, n - from < cap ? n - from : cap);
	return (int)n;
}

int bn_read_logprobs(struct bn_handle *h, uint32_t from, struct bn_logprob *out,
		     struct bn_logprob *alt, uint32_t cap)
{
	const struct bn_slot *s = slot_of(h->c, h->slot);
	if (!(bn_read_once(s->flags) & BN_REQ_LOGPROBS))
		return -BN_E_INVALID;
	return bn_read_records(h, from, out, alt, cap);
}

int bn_read_records(struct bn_handle *h, uint32_t from, struct bn_logprob *out,
		    struct bn_logprob *alt, uint32_t cap)
{
	struct bn_client *c = h->c;
	const struct bn_slot *s = slot_of(c, h->slot);
	if (!(c->layout.features & BN_FEAT_LOGPROBS))
		return -BN_E_INVALID;
	uint32_t n_alt = bn_read_once(s->n_logprobs);
	size_t stride = 1u + (size_t)c->layout.slot_logprob_capacity;
	if (n_alt > c->layout.slot_logprob_capacity || (n_alt && !alt))
		return -BN_E_INVALID;
	/* Acquire pairs with the daemon's store-release of n_tokens: records below it are written. */
	uint32_t n = bn_load_acquire(s->n_tokens);
	if (n > c->layout.slot_output_capacity)
		n = c->layout.slot_output_capacity;
	if (from >= n)
		return 0;
	uint32_t k = n - from < cap ? n - from : cap;
	const struct bn_logprob *rec = (const struct bn_logprob *)((const uint8_t *)s +
								   c->layout.slot_logprob_offset);
	for (uint32_t i = 0; i < k; i++) {
		const struct bn_logprob *r = rec + (size_t)(from + i) * stride;
		out[i] = r[0];
		if (n_alt)
			memcpy(alt + (size_t)i * n_alt, r + 1, (size_t)n_alt * sizeof(*r));
	}
	return (int)k;
}

int bn_cancel(struct bn_handle *h)
{
	bn_write_once(slot_of(h->c, h->slot)->cancel, 1);
	return 0;
}

int bn_result(struct bn_handle *h, struct bn_result *out)
{
	struct bn_client *c = h->c;
	if (!slot_done(c, h->slot))
		return -BN_E_NOT_DONE;
	const struct bn_slot *s = slot_of(c, h->slot);
	*out = (struct bn_result){ .status = s->status,
				   .error = s->error ? -(int32_t)s->error : 0,
				   .n_tokens = s->n_tokens,
				   .queue_ns = s->queue_ns,
				   .first_token_ns = s->first_token_ns,
				   .total_ns = s->total_ns };
	if (out->n_tokens > c->layout.slot_output_capacity)
		out->n_tokens = c->layout.slot_output_capacity;
	return 0;
}

int bn_release(struct bn_handle *h)
{
	struct bn_client *c = h->c;
	int done = slot_done(c, h->slot);
	if (!done)
		bn_cancel(h);
	pthread_mutex_lock(&c->lock);
	if (done) {
		slot_of(c, h->slot)->state = BN_SLOT_FREE;
		h->state = H_FREE;
		h->next = c->free_list;
		c->free_list = h;
	} else {
		h->state = H_ABANDONED;
		h->next = c->abandoned;
		c->abandoned = h;
	}
	pthread_cond_signal(&c->slot_freed);
	pthread_mutex_unlock(&c->lock);
	return 0;
}
