/* SPDX-License-Identifier: MIT */
/*
 * fuzz_requests.c — the libFuzzer target for the request path: whatever a client writes into
 * its ring and slots goes through the daemon's own code (bn_session_handshake,
 * bn_session_poll_ring, the scheduler with the loopback backend, bn_session_end_requests), not a
 * copy of it. A real session is made over a socketpair; then the input is a script of what
 * the client side does to the shared segment, interleaved with what the daemon's loop does:
 *
 *   byte 0, 1     the hello's requested_slots (1..4) and weight
 *   then commands (fuzz_requests.h): raw bytes anywhere in the segment, a raw ring tail, an
 *   honest sqe for a slot, the daemon taking the ring, a scheduler step, the drain.
 *
 * Afterwards the session ends the way the loop ends one (end_session), and the target traps
 * unless the daemon is back where it started: no request in flight, nothing running or
 * waiting, no KV block used or reserved. ASan and UBSan catch the rest. `make fuzz-requests` runs it under libFuzzer;
 * `make check` replays tests/corpus/requests.
 */
#define _GNU_SOURCE
#include "../daemon/backends/backend.h"
#include "../daemon/common/log.h"
#include "../daemon/serve/sched.h"
#include "../daemon/session.h"
#include "bitnet_ring.h"
#include "bitnet_shm.h"
#include "fuzz_requests.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond) do { if (!(cond)) __builtin_trap(); } while (0)

/* The daemon side, made once: a loopback backend and its scheduler, shared by every input
 * (each input must leave them as it found them, which is one of the checks). */
struct daemon_side {
	const struct bn_backend_ops *ops;
	void *backend;
	struct bn_model_desc model;
	struct bn_sched *sched;
	struct bn_session_limits lim;
};

static struct daemon_side *daemon_side(void)
{
	static struct daemon_side d;
	if (d.sched)
		return &d;
	bn_log_set_level(BN_LOG_ERROR);
	d.ops = &bn_backend_loopback;
	struct bn_backend_options opt = { .max_seqs = 4, .vocab_size = FUZZ_VOCAB };
	CHECK(d.ops && d.ops->open(&opt, &d.model, &d.backend) == 0);
	d.model.context_length = FUZZ_CONTEXT;
	struct bn_sched_config sc = { .max_batch = 4, .token_budget = 8, .eos_id = d.model.eos_id,
				      .context_length = FUZZ_CONTEXT, .kv_memory = FUZZ_KV_MEMORY,
				      .kv_block_tokens = FUZZ_KV_BLOCK,
				      .logprob_capacity = FUZZ_LOGPROBS };
	d.sched = bn_sched_new(d.ops, d.backend, &d.model, &sc, &bn_session_reply);
	CHECK(d.sched != NULL);
	d.lim = (struct bn_session_limits){ .slots = FUZZ_SLOTS, .prompt_capacity = FUZZ_CONTEXT,
					    .output_capacity = FUZZ_CONTEXT,
					    .logprob_capacity = FUZZ_LOGPROBS, .max_weight = 4,
					    .model = &d.model };
	return &d;
}

/* The input, read front to back; past its end every read gives zeros. */
struct script {
	const uint8_t *p;
	size_t left;
};

static uint32_t take(struct script *s, size_t n)
{
	uint32_t v = 0;
	for (size_t i = 0; i < n; i++, s->p++, s->left--)
		if (s->left)
			v |= (uint32_t)*s->p << (8 * i);
		else
			break;
	return v;
}

/* A session as the loop opens one: the hello goes through bn_session_handshake, which sends
 * the welcome with the memfd and the doorbell to the other end. Nobody reads them there:
 * closing that end disposes of the descriptors in flight. */
static struct bn_session *open_session(struct daemon_side *d, struct script *in, int *peer)
{
	int sv[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	struct ucred cred = { .pid = getpid(), .uid = getuid(), .gid = getgid() };
	struct bn_session *s = bn_session_new(1, sv[0], &cred);
	CHECK(s != NULL);
	struct bn_hello hello = { .magic = BN_HELLO_MAGIC, .abi_version = BN_ABI_VERSION,
				  .requested_slots = 1 + take(in, 1) % FUZZ_SLOTS,
				  .weight = take(in, 1) };
	memcpy(s->rx, &hello, sizeof(hello));
	CHECK(bn_session_handshake(s, &d->lim) == 0);
	*peer = sv[1];
	return s;
}

/* The client's side: raw bytes into the segment (its mapping is the daemon's too). */
static void client_write(struct bn_session *s, struct script *in)
{
	size_t off = take(in, 2) % s->mem_size, len = 1 + take(in, 1) % 64;
	for (size_t i = 0; i < len && off + i < s->mem_size; i++)
		s->mem[off + i] = (uint8_t)take(in, 1);
}

static void client_queue(struct bn_session *s, struct script *in)
{
	uint32_t tail = __atomic_load_n(&s->ring->tail, __ATOMIC_RELAXED);
	struct bn_sqe *e = &s->sqes[bn_ring_index(tail, s->sq_mask + 1)];
	*e = (struct bn_sqe){ .op = BN_OP_GENERATE, .slot = take(in, 1) % 8 };
	__atomic_store_n(&s->ring->tail, tail + 1, __ATOMIC_RELEASE);
}

/* The session ends as the loop ends one: after a violation, ERROR/PROTOCOL; after a drain,
 * what still runs ends SHUTDOWN, the ring is closed and read a last time, and the rest ends
 * SHUTDOWN; otherwise the client is gone and its requests vanish. */
static void end_session(struct daemon_side *d, struct bn_session *s, int violated,
			int shutting_down)
{
	if (!violated && shutting_down) {
		bn_sched_end_running(d->sched, BN_STATUS_SHUTDOWN);
		bn_session_set_daemon_flags(s, BN_DAEMON_SHUTTING_DOWN | BN_DAEMON_CLOSED);
		violated = bn_session_poll_ring(s, d->sched, 1) < 0;
	}
	if (violated)
		bn_session_end_requests(s, d->sched, BN_STATUS_ERROR, BN_E_PROTOCOL);
	else
		bn_session_end_requests(s, d->sched, shutting_down ? BN_STATUS_SHUTDOWN : 0, 0);
}

static void check_idle(struct daemon_side *d, const struct bn_session *s)
{
	uint32_t total, used, reserved, block_tokens;
	bn_sched_kv_usage(d->sched, &total, &used, &reserved, &block_tokens);
	CHECK(bn_sched_running(d->sched) == 0 && bn_sched_waiting(d->sched) == 0);
	CHECK(used == 0 && reserved == 0);
	CHECK(s->n_in_flight == 0 && s->tenant.n_waiting == 0 && s->tenant.n_running == 0);
	for (uint32_t i = 0; i < s->seg.slot_count; i++)
		CHECK(!s->reqs[i].in_flight && !s->reqs[i].running);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct daemon_side *d = daemon_side();
	struct script in = { data, size };
	int peer;
	struct bn_session *s = open_session(d, &in, &peer);
	struct bn_tenant *tenant = &s->tenant;
	int shutting_down = 0, violated = 0, steps = 0;
	while (in.left && !violated) {
		switch ((enum fuzz_op)(take(&in, 1) % FUZZ_OPS)) {
		case FUZZ_WRITE: client_write(s, &in); break;
		case FUZZ_TAIL: __atomic_store_n(&s->ring->tail, take(&in, 4), __ATOMIC_RELEASE); break;
		case FUZZ_QUEUE: client_queue(s, &in); break;
		case FUZZ_POLL: violated = bn_session_poll_ring(s, d->sched, shutting_down) < 0; break;
		case FUZZ_STEP:
			if (steps++ < FUZZ_MAX_STEPS)
				bn_sched_step(d->sched, &tenant, 1);
			break;
		case FUZZ_DRAIN:
			shutting_down = 1;
			bn_sched_end_waiting(d->sched, &tenant, 1, BN_STATUS_SHUTDOWN);
			break;
		}
	}
	end_session(d, s, violated, shutting_down);
	check_idle(d, s);
	bn_session_free(s);
	close(peer);
	return 0;
}
