/* SPDX-License-Identifier: MIT */
/*
 * bn-hostile — a client that breaks the protocol on purpose, to show that bitnetd survives it.
 *
 *   bn-hostile --socket PATH --mode MODE [--iterations N] [--seed N]
 *
 * It speaks the wire protocol itself (shm/PROTOCOL.md), never through libbitnet-client: the
 * library refuses to do most of what this tool is for. It prints what it saw as key=value
 * lines, always including result=closed (the daemon ended the session) or result=open, and
 * exits 0 when it could carry the mode out, 1 on a set-up error (bad arguments, no daemon,
 * handshake failed where it should not). Every wait is bounded on the monotonic clock, and an
 * alarm ends the tool if something still hangs, so a caller can run it unattended.
 */
#define _GNU_SOURCE
#include "bitnet_barrier.h"
#include "bitnet_ring.h"
#include "bitnet_shm.h"
#include "testutil.h"

#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000LL
/* What is waited for scales (tests/timescale.h); how long a session that should stay open is
 * watched, and how long a mode's loops run, do not: they are how much is tried. */
#define CLOSE_WAIT_MS tu_scaled(4000)     /* a violation must end the session within this */
#define OPEN_WAIT_MS 1000                 /* how long a session that should stay open is watched */
#define DONE_WAIT_MS tu_scaled(5000)      /* one request, on a loaded 2-core machine */
#define HANDSHAKE_WAIT_MS tu_scaled(8000) /* the daemon's own handshake timeout is 1 s by default */
#define MODE_BUDGET_MS 9000               /* loops stop here, so every mode ends within ~10 s */
#define ALARM_S tu_scaled(15)             /* last resort if a system call still hangs */
#define HOSTILE_SLOTS 4

struct options {
	const char *socket_path;
	const char *mode;
	long iterations;           /* < 0: the mode's default */
	uint64_t seed;
};

/* One raw session: the three descriptors and the mapped segment. */
struct conn {
	int sock, memfd, bell;
	uint8_t *mem;
	size_t size;
	struct bn_shm_header h;    /* private copy of the header, read once after mapping */
	struct bn_sq_ring *ring;
	struct bn_sqe *sqes;
	uint32_t tail;             /* private: we are the ring's producer */
};

/* ------------------------------------------------------------------------------------------ */
/* Small helpers                                                                               */
/* ------------------------------------------------------------------------------------------ */

static int64_t deadline_ms(int64_t ms)
{
	return tu_now_ns() + ms * MS;
}

static int expired(int64_t deadline)
{
	return tu_now_ns() >= deadline;
}

static void nap_us(long us)
{
	struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000 };
	nanosleep(&ts, NULL);
}

/* xorshift64*: reproducible garbage from the printed seed. */
static _Thread_local uint64_t rng_state; /* per thread: the flipper has its own */

static uint32_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 0x2545F4914F6CDD1DULL) >> 32);
}

static void fact_u(const char *key, unsigned long long v)
{
	printf("%s=%llu\n", key, v);
}

static void fact_s(const char *key, const char *v)
{
	printf("%s=%s\n", key, v);
}

/* The tool must end even if a system call it trusted hangs: say so and fail. */
static void on_alarm(int sig)
{
	static const char msg[] = "error=timeout\nresult=unknown\n";
	(void)sig;
	(void)!write(STDOUT_FILENO, msg, sizeof(msg) - 1);
	_exit(1);
}

/* ------------------------------------------------------------------------------------------ */
/* Socket and handshake, written from PROTOCOL.md §2–3                                         */
/* ------------------------------------------------------------------------------------------ */

/* A connected socket whose blocking calls give up after a few seconds. */
static int dial(const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(addr.sun_path))
		return -1;
	strcpy(addr.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct timeval tv = { .tv_sec = tu_scaled(5) };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int send_bytes(int fd, const void *buf, size_t len)
{
	return send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

static struct bn_hello honest_hello(void)
{
	return (struct bn_hello){ .magic = BN_HELLO_MAGIC, .abi_version = BN_ABI_VERSION,
				  .requested_slots = HOSTILE_SLOTS };
}

/* Reads the 32-byte welcome and up to two descriptors; returns how many arrived, or -1. */
static int recv_welcome(int fd, struct bn_welcome *w, int fds[2])
{
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = w, .iov_len = sizeof(*w) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	memset(w, 0, sizeof(*w));
	ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
	if (n != (ssize_t)sizeof(*w) || (msg.msg_flags & MSG_CTRUNC))
		return -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
		return 0;
	int n_fds = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
	if (n_fds > 2) /* cannot happen with a control buffer of two; keep the copy bounded */
		n_fds = 2;
	memcpy(fds, CMSG_DATA(c), (size_t)n_fds * sizeof(int));
	return n_fds;
}

/* The layout words this tool relies on, checked like any client must (§3). */
static int layout_ok(const struct bn_shm_header *h, size_t size)
{
	uint64_t slots_end = (uint64_t)h->slot_offset + (uint64_t)h->slot_size * h->slot_count;
	return h->magic == BN_SHM_MAGIC && h->abi_version == BN_ABI_VERSION &&
	       h->segment_size == size && h->slot_count >= 1 && h->sq_entries >= h->slot_count &&
	       (h->sq_entries & (h->sq_entries - 1)) == 0 &&
	       (uint64_t)h->sq_offset + sizeof(struct bn_sq_ring) <= size &&
	       (uint64_t)h->sqes_offset + 16ull * h->sq_entries <= size && slots_end <= size &&
	       h->slot_prompt_offset >= sizeof(struct bn_slot) &&
	       h->slot_output_offset >= sizeof(struct bn_slot) &&
	       (uint64_t)h->slot_prompt_offset + 4ull * h->slot_prompt_capacity <= h->slot_size &&
	       (uint64_t)h->slot_output_offset + 4ull * h->slot_output_capacity <= h->slot_size;
}

static int map_segment(struct conn *c, uint64_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, c->memfd, 0);
	if (p == MAP_FAILED)
		return -1;
	c->mem = p;
	c->size = size;
	memcpy(&c->h, c->mem, sizeof(c->h));
	if (!layout_ok(&c->h, c->size))
		return -1;
	c->ring = (struct bn_sq_ring *)(c->mem + c->h.sq_offset);
	c->sqes = (struct bn_sqe *)(c->mem + c->h.sqes_offset);
	c->tail = bn_load_acquire(c->ring->tail);
	return 0;
}

static void conn_close(struct conn *c)
{
	if (c->mem)
		munmap(c->mem, c->size);
	if (c->memfd >= 0)
		close(c->memfd);
	if (c->bell >= 0)
		close(c->bell);
	if (c->sock >= 0)
		close(c->sock);
	c->mem = NULL;
	c->memfd = c->bell = c->sock = -1;
}

/* A complete, honest handshake: the misbehaviour starts after it. */
static int conn_open(struct conn *c, const char *path)
{
	*c = (struct conn){ .sock = -1, .memfd = -1, .bell = -1 };
	c->sock = dial(path);
	struct bn_hello hello = honest_hello();
	struct bn_welcome w;
	int fds[2] = { -1, -1 };
	if (c->sock < 0 || send_bytes(c->sock, &hello, sizeof(hello)) < 0)
		goto fail;
	int n_fds = recv_welcome(c->sock, &w, fds);
	c->memfd = fds[0];
	c->bell = fds[1];
	if (n_fds != 2 || w.magic != BN_WELCOME_MAGIC || w.error != 0)
		goto fail;
	if (map_segment(c, w.segment_size) < 0)
		goto fail;
	return 0;
fail:
	fprintf(stderr, "bn-hostile: handshake with %s failed\n", path);
	conn_close(c);
	return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Observing the daemon                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* After the welcome the daemon sends nothing unasked, so readable means EOF (§11.2). */
static int hung_up(int sock)
{
	struct pollfd p = { .fd = sock, .events = POLLIN | POLLRDHUP };
	if (poll(&p, 1, 0) <= 0)
		return 0;
	if (p.revents & (POLLRDHUP | POLLHUP | POLLERR))
		return 1;
	char b;
	return recv(sock, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Whether the daemon ends the session within timeout_ms. */
static int wait_closed(int sock, int64_t timeout_ms)
{
	int64_t deadline = deadline_ms(timeout_ms);
	for (;;) {
		struct pollfd p = { .fd = sock, .events = POLLIN | POLLRDHUP };
		int64_t left = (deadline - tu_now_ns()) / MS;
		if (hung_up(sock))
			return 1;
		if (left <= 0)
			return 0;
		(void)poll(&p, 1, left > 100 ? 100 : (int)left);
	}
}

static void report_result(int sock, int64_t timeout_ms)
{
	fact_s("result", wait_closed(sock, timeout_ms) ? "closed" : "open");
}

/* ------------------------------------------------------------------------------------------ */
/* Slots and the ring (§4–6), without any of the checks a real client makes                    */
/* ------------------------------------------------------------------------------------------ */

static struct bn_slot *slot_at(const struct conn *c, uint32_t i)
{
	return (struct bn_slot *)(c->mem + c->h.slot_offset + (size_t)i * c->h.slot_size);
}

static uint32_t *prompt_at(const struct conn *c, uint32_t i)
{
	return (uint32_t *)((uint8_t *)slot_at(c, i) + c->h.slot_prompt_offset);
}

static uint32_t *output_at(const struct conn *c, uint32_t i)
{
	return (uint32_t *)((uint8_t *)slot_at(c, i) + c->h.slot_output_offset);
}

/* The prompt every slot holds whenever it is valid: prepare() wrote it over the whole array,
 * and the flip mode restores exactly these values. So any request the daemon accepts has
 * prompt = canon[0..n_prompt), whatever it copied, and its output is checkable. */
static uint32_t canon_token(const struct conn *c, uint32_t k)
{
	return 3 + (k * 7919u) % (c->h.vocab_size - 3);
}

/* Writes an ordinary request into slot i (§6.3); callers spoil it afterwards as they like. */
/* The 13 parameter words after flags (sampling, stop count, deadline, reserved), as words. */
static uint32_t *param_words(struct bn_slot *s)
{
	return (uint32_t *)(void *)((uint8_t *)s + offsetof(struct bn_slot, temperature));
}

static void zero_params(struct bn_slot *s)
{
	for (uint32_t k = 0; k < 13; k++)
		bn_write_once(param_words(s)[k], 0u);
}

static void prepare(struct conn *c, uint32_t i, uint32_t n_prompt, uint32_t max_tokens)
{
	struct bn_slot *s = slot_at(c, i);
	uint32_t *p = prompt_at(c, i);
	for (uint32_t k = 0; k < n_prompt && k < c->h.slot_prompt_capacity; k++)
		bn_write_once(p[k], canon_token(c, k));
	bn_write_once(s->n_prompt, n_prompt);
	bn_write_once(s->max_tokens, max_tokens);
	bn_write_once(s->flags, 0u);
	zero_params(s);
	bn_write_once(s->cancel, 0u);
	bn_write_once(s->n_tokens, 0u);
	bn_write_once(s->status, 0u);
	bn_write_once(s->error, 0u);
	bn_write_once(s->waiters, 0u);
	bn_write_once(s->state, (uint32_t)BN_SLOT_SUBMITTED);
}

/* Writes an sqe at the private tail; nothing is visible to the daemon until publish(). */
static void put_sqe(struct conn *c, uint32_t op, uint32_t slot, uint32_t r0, uint32_t r1)
{
	struct bn_sqe *e = &c->sqes[bn_ring_index(c->tail, c->h.sq_entries)];
	bn_write_once(e->op, op);
	bn_write_once(e->slot, slot);
	bn_write_once(e->reserved[0], r0);
	bn_write_once(e->reserved[1], r1);
	c->tail++;
}

/* Rings the doorbell unconditionally: an extra wake-up is always allowed (§8.1). */
static void ring_bell(struct conn *c)
{
	uint64_t one = 1;
	(void)!write(c->bell, &one, sizeof(one));
}

static void publish_tail(struct conn *c, uint32_t tail)
{
	/* Release: the sqes and slot words written before are visible with the new tail. */
	bn_store_release(c->ring->tail, tail);
	ring_bell(c);
}

static void publish(struct conn *c)
{
	publish_tail(c, c->tail);
}

enum wait_result { WAIT_DONE = 0, WAIT_TIMEOUT = 1, WAIT_CLOSED = 2 };

/* Polls until the word reaches want_min; gives up on timeout or when the session is gone. */
static enum wait_result wait_word(const struct conn *c, const uint32_t *word, uint32_t want_min,
				  int64_t timeout_ms)
{
	int64_t deadline = deadline_ms(timeout_ms);
	for (unsigned n = 0;; n++) {
		/* Acquire pairs with the daemon's store-release of the word we wait for. */
		if (__atomic_load_n(word, __ATOMIC_ACQUIRE) >= want_min)
			return WAIT_DONE;
		if (expired(deadline))
			return WAIT_TIMEOUT;
		if (n % 64 == 63 && hung_up(c->sock))
			return WAIT_CLOSED;
		nap_us(20);
	}
}

static enum wait_result wait_done(const struct conn *c, uint32_t i, int64_t timeout_ms)
{
	return wait_word(c, &slot_at(c, i)->state, BN_SLOT_DONE, timeout_ms);
}

/* Prints slot i's response words as slotI_state=..., for the caller to check. */
static void report_slot(const struct conn *c, uint32_t i)
{
	struct bn_slot *s = slot_at(c, i);
	char key[32];
	snprintf(key, sizeof(key), "slot%u_state", i);
	fact_u(key, bn_load_acquire(s->state));
	snprintf(key, sizeof(key), "slot%u_status", i);
	fact_u(key, bn_read_once(s->status));
	snprintf(key, sizeof(key), "slot%u_error", i);
	fact_u(key, bn_read_once(s->error));
	snprintf(key, sizeof(key), "slot%u_tokens", i);
	fact_u(key, bn_read_once(s->n_tokens));
}

/* ------------------------------------------------------------------------------------------ */
/* Ring violations: each must close the session (§6.8)                                         */
/* ------------------------------------------------------------------------------------------ */

/* Opens an honest session and prints its shape, for the reader of a failure. */
static int with_session(const struct options *o, struct conn *c)
{
	if (conn_open(c, o->socket_path) < 0)
		return -1;
	fact_u("session_id", c->h.session_id);
	fact_u("slot_count", c->h.slot_count);
	fact_u("sq_entries", c->h.sq_entries);
	return 0;
}

/* Publishes a tail too far past head: more queued entries than the ring can hold. `ahead`
 * is just past the ring's size, else the jump is half the counter space. */
static int tail_jump(const struct options *o, int ahead)
{
	struct conn c;
	if (with_session(o, &c) < 0)
		return 1;
	prepare(&c, 0, 4, 4);
	uint32_t head = bn_load_acquire(c.ring->head);
	publish_tail(&c, head + (ahead ? c.h.sq_entries + 5 : 0x80000000u));
	report_result(c.sock, CLOSE_WAIT_MS);
	conn_close(&c);
	return 0;
}

static int mode_tail_ahead(const struct options *o)
{
	return tail_jump(o, 1);
}

static int mode_tail_wild(const struct options *o)
{
	return tail_jump(o, 0);
}

/* Queues one sqe built from the given words for an otherwise valid request in slot 0. */
static int bad_sqe(const struct options *o, uint32_t op, int slot_out_of_range, uint32_t r0)
{
	struct conn c;
	if (with_session(o, &c) < 0)
		return 1;
	prepare(&c, 0, 4, 4);
	put_sqe(&c, op, slot_out_of_range ? c.h.slot_count : 0, r0, 0);
	publish(&c);
	report_result(c.sock, CLOSE_WAIT_MS);
	conn_close(&c);
	return 0;
}

static int mode_bad_slot(const struct options *o)
{
	return bad_sqe(o, BN_OP_GENERATE, 1, 0);
}

static int mode_sqe_reserved(const struct options *o)
{
	return bad_sqe(o, BN_OP_GENERATE, 0, 1);
}

/* Queues slot 0 again once it is running: the first request must end ERROR/PROTOCOL. */
static int mode_double_submit(const struct options *o)
{
	struct conn c;
	if (with_session(o, &c) < 0)
		return 1;
	uint32_t max = c.h.slot_output_capacity < 4000 ? c.h.slot_output_capacity : 4000;
	if (max + 8 > c.h.context_length)
		max = c.h.context_length - 8;
	prepare(&c, 0, 8, max);
	put_sqe(&c, BN_OP_GENERATE, 0, 0, 0);
	publish(&c);
	/* Wait for its first token, so the second sqe meets a running request. */
	enum wait_result w = wait_word(&c, &slot_at(&c, 0)->n_tokens, 1, DONE_WAIT_MS);
	fact_u("slot0_running", w == WAIT_DONE && bn_load_acquire(slot_at(&c, 0)->state) !=
						     BN_SLOT_DONE);
	put_sqe(&c, BN_OP_GENERATE, 0, 0, 0);
	publish(&c);
	report_result(c.sock, CLOSE_WAIT_MS);
	/* The daemon ends the slot before it hangs up (§11.2), so DONE is there by now. */
	report_slot(&c, 0);
	conn_close(&c);
	return 0;
}

/* Queues slot 0 twice in one publication: the first copy is still waiting, never ran. */
static int mode_double_queue(const struct options *o)
{
	struct conn c;
	if (with_session(o, &c) < 0)
		return 1;
	prepare(&c, 0, 8, 16);
	put_sqe(&c, BN_OP_GENERATE, 0, 0, 0);
	put_sqe(&c, BN_OP_GENERATE, 0, 0, 0);
	publish(&c);
	report_result(c.sock, CLOSE_WAIT_MS);
	report_slot(&c, 0);
	conn_close(&c);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Request errors: the request fails, the session lives on (§6.6)                              */
/* ------------------------------------------------------------------------------------------ */

/* Queues slot 0 as spoil() left it, with this op, waits for its end, reports it and the
 * session. */
static int op_error(const struct options *o, uint32_t op, void (*spoil)(struct conn *c))
{
	struct conn c;
	if (with_session(o, &c) < 0)
		return 1;
	prepare(&c, 0, 4, 8);
	if (spoil)
		spoil(&c);
	put_sqe(&c, op, 0, 0, 0);
	publish(&c);
	enum wait_result w = wait_done(&c, 0, DONE_WAIT_MS);
	fact_s("slot0_wait", w == WAIT_DONE ? "done" : w == WAIT_CLOSED ? "closed" : "timeout");
	report_slot(&c, 0);
	report_result(c.sock, OPEN_WAIT_MS);
	conn_close(&c);
	return 0;
}

static int request_error(const struct options *o, void (*spoil)(struct conn *c))
{
	return op_error(o, BN_OP_GENERATE, spoil);
}

static void spoil_lengths(struct conn *c)
{
	bn_write_once(slot_at(c, 0)->n_prompt, 0xFFFFFFFFu);
	bn_write_once(slot_at(c, 0)->max_tokens, 0xFFFFFFFFu);
}

static void spoil_tokens(struct conn *c)
{
	uint32_t *p = prompt_at(c, 0);
	bn_write_once(p[1], c->h.vocab_size);
	bn_write_once(p[3], 0xFFFFFFFFu);
}

/* One parameter word set to a value the daemon must refuse (BN_E_INVALID). */
static void spoil_param(struct bn_slot *s, uint32_t pick)
{
	static const struct { uint32_t word, value; } bad[] = {
		{ 0, 0x7fc00000u },  /* temperature NaN */
		{ 0, 0xbf800000u },  /* temperature -1 */
		{ 2, 0x40000000u },  /* top_p 2 */
		{ 3, 0xbf800000u },  /* min_p -1 */
		{ 4, 0xbf800000u },  /* repetition penalty -1 */
		{ 5, 0x7f800000u },  /* presence penalty +inf */
		{ 6, 0x44fa0000u },  /* frequency penalty 2000 */
		{ 7, 1u },           /* a seed without BN_REQ_SEED */
		{ 10, 1u },          /* alternatives without BN_REQ_LOGPROBS */
		{ 12, 1u },          /* grammar_id without BN_REQ_GRAMMAR */
	};
	uint32_t k = pick % (sizeof(bad) / sizeof(bad[0]));
	bn_write_once(param_words(s)[bad[k].word], bad[k].value);
}

static void spoil_reserved(struct conn *c)
{
	bn_write_once(slot_at(c, 0)->grammar_id, 7u); /* a grammar id without BN_REQ_GRAMMAR */
}

static int mode_huge_lengths(const struct options *o)
{
	return request_error(o, spoil_lengths);
}

static int mode_bad_tokens(const struct options *o)
{
	return request_error(o, spoil_tokens);
}

static int mode_reserved_request(const struct options *o)
{
	return request_error(o, spoil_reserved);
}

/* An op the daemon does not know is that request's error (UNSUPPORTED), not a violation: a
 * newer client's request kind must not cost an older daemon's session. */
static int mode_bad_op(const struct options *o)
{
	return op_error(o, 99, NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* flip: the request changes under the daemon while it copies it                               */
/* ------------------------------------------------------------------------------------------ */

#define FLIP_SLOTS 2
#define FLIP_MAX_VALID 200 /* the largest valid max_tokens the flipper writes */
#define FLIP_SPOTS 8       /* prompt positions the flipper spoils and restores */

struct flipper {
	struct conn *c;
	uint64_t seed;
	int stop;                  /* atomic: main thread asks the flipper to end */
	uint64_t flips;
};

/* Valid values of each word: any mix of them is still a valid request. */
static uint32_t valid_n_prompt(const struct conn *c, uint32_t pick)
{
	uint32_t longest = c->h.slot_prompt_capacity < c->h.context_length
				   ? c->h.slot_prompt_capacity
				   : c->h.context_length;
	const uint32_t v[4] = { 1, 8, 24, longest - FLIP_MAX_VALID };
	return v[pick % 4];
}

static const uint32_t valid_max_tokens[3] = { 1, 16, FLIP_MAX_VALID };

/* Positions in reach of every valid n_prompt, and at the end of the longest one. */
static uint32_t spot(const struct conn *c, uint32_t pick)
{
	uint32_t end = valid_n_prompt(c, 3);
	const uint32_t v[FLIP_SPOTS] = { 0, 1, 7, 23, end / 2, end - 2, end - 1, end };
	return v[pick % FLIP_SPOTS];
}

/* A whole valid request, written word by word (the daemon may copy it half-written). */
static void flip_valid(struct conn *c, uint32_t i)
{
	struct bn_slot *s = slot_at(c, i);
	for (uint32_t k = 0; k < FLIP_SPOTS; k++)
		bn_write_once(prompt_at(c, i)[spot(c, k)], canon_token(c, spot(c, k)));
	zero_params(s);
	bn_write_once(s->n_prompt, valid_n_prompt(c, rnd()));
	bn_write_once(s->max_tokens, valid_max_tokens[rnd() % 3]);
	bn_write_once(s->flags, rnd() % 2 ? BN_REQ_IGNORE_EOS : 0u);
}

/* One word made invalid: each of the daemon's checks gets its turn. */
static void flip_invalid(struct conn *c, uint32_t i)
{
	struct bn_slot *s = slot_at(c, i);
	uint32_t huge = rnd() % 2 ? 0xFFFFFFFFu : 0x80000000u;
	switch (rnd() % 7) {
	case 0: bn_write_once(s->n_prompt, 0u); break;
	case 1: bn_write_once(s->n_prompt, rnd() % 2 ? c->h.slot_prompt_capacity + 1 : huge); break;
	case 2: bn_write_once(s->max_tokens, 0u); break;
	case 3: bn_write_once(s->max_tokens, rnd() % 2 ? c->h.slot_output_capacity + 1 : huge); break;
	/* Bits 0-2 are valid; 3-9 are text flags (UNSUPPORTED without a tokenizer), the rest
	 * unknown (INVALID). */
	case 4: bn_write_once(s->flags, 1u << (3 + rnd() % 29)); break;
	case 5: spoil_param(s, rnd()); break;
	default:
		bn_write_once(prompt_at(c, i)[spot(c, rnd())], rnd() % 2 ? c->h.vocab_size : huge);
		break;
	}
}

/* The sqe's slot word changes too, always between valid slots, so the daemon may run either
 * slot. op and reserved stay valid here: breaking them is a violation (bad-op, sqe-reserved),
 * which would end the session after the first round. */
static void flip_sqes(struct conn *c)
{
	for (uint32_t k = 0; k < c->h.sq_entries; k++)
		bn_write_once(c->sqes[k].slot, rnd() % FLIP_SLOTS);
}

static void *flip_thread(void *arg)
{
	struct flipper *f = arg;
	rng_state = f->seed;
	while (!__atomic_load_n(&f->stop, __ATOMIC_RELAXED)) {
		for (uint32_t i = 0; i < FLIP_SLOTS; i++) {
			if (rnd() % 2)
				flip_valid(f->c, i);
			else
				flip_invalid(f->c, i);
		}
		flip_sqes(f->c);
		/* Two cores are shared with the daemon and the honest clients. */
		if (++f->flips % 16 == 0)
			sched_yield();
	}
	return NULL;
}

struct tally {
	uint64_t completions, ok, errors, bad, timeouts;
};

/* Whether a LENGTH/EOS result is what the loopback makes of some mix of valid words. */
static int matches_a_snapshot(const struct conn *c, uint32_t i, uint32_t status, uint32_t n)
{
	static uint32_t prompt[8192], want[FLIP_MAX_VALID];
	uint32_t len = valid_n_prompt(c, 3);
	if (len > sizeof(prompt) / sizeof(prompt[0]))
		return 1; /* a model larger than this tool plans for: only the bounds are checked */
	for (uint32_t k = 0; k < len; k++)
		prompt[k] = canon_token(c, k);
	for (uint32_t np = 0; np < 4; np++) {
		for (uint32_t mt = 0; mt < 3; mt++) {
			for (uint32_t fl = 0; fl < 2; fl++) {
				uint32_t st, got = tu_loopback(prompt, valid_n_prompt(c, np),
							       valid_max_tokens[mt], fl,
							       c->h.vocab_size, c->h.eos_id, want,
							       &st);
				if (st == status && got == n &&
				    memcmp(want, output_at(c, i), n * sizeof(uint32_t)) == 0)
					return 1;
			}
		}
	}
	return 0;
}

/* Judges one completion: a terminal status, an allowed error, tokens of a real snapshot. */
static void judge(const struct conn *c, uint32_t i, struct tally *t)
{
	struct bn_slot *s = slot_at(c, i);
	uint32_t status = bn_read_once(s->status), error = bn_read_once(s->error);
	uint32_t n = bn_read_once(s->n_tokens);
	int good = 0;
	t->completions++;
	if (status == BN_STATUS_LENGTH || status == BN_STATUS_EOS) {
		t->ok++;
		good = error == 0 && n <= FLIP_MAX_VALID && matches_a_snapshot(c, i, status, n);
	} else if (status == BN_STATUS_ERROR) {
		t->errors++;
		good = n == 0 && (error == BN_E_INVALID || error == BN_E_TOKEN ||
				  error == BN_E_TOO_LONG || error == BN_E_EMPTY ||
				  error == BN_E_UNSUPPORTED);
	}
	if (!good) {
		t->bad++;
		fprintf(stderr, "bn-hostile: flip: slot %u status=%u error=%u n_tokens=%u\n", i,
			status, error, n);
	}
}

/* Marks both slots submitted, queues one sqe and waits until either slot is DONE. */
static enum wait_result flip_round(struct conn *c, struct tally *t)
{
	for (uint32_t i = 0; i < FLIP_SLOTS; i++)
		bn_write_once(slot_at(c, i)->state, (uint32_t)BN_SLOT_SUBMITTED);
	put_sqe(c, BN_OP_GENERATE, rnd() % FLIP_SLOTS, 0, 0);
	publish(c);
	int64_t deadline = deadline_ms(DONE_WAIT_MS);
	for (unsigned n = 0; !expired(deadline); n++) {
		for (uint32_t i = 0; i < FLIP_SLOTS; i++) {
			if (bn_load_acquire(slot_at(c, i)->state) == BN_SLOT_DONE) {
				judge(c, i, t);
				return WAIT_DONE;
			}
		}
		if (n % 64 == 63 && hung_up(c->sock))
			return WAIT_CLOSED;
		nap_us(20);
	}
	t->timeouts++;
	return WAIT_TIMEOUT;
}

static int mode_flip(const struct options *o)
{
	struct conn c;
	if (with_session(o, &c) < 0)
		return 1;
	if (c.h.slot_count < FLIP_SLOTS || c.h.slot_prompt_capacity <= FLIP_MAX_VALID + 8) {
		fprintf(stderr, "bn-hostile: flip needs 2 slots and a longer prompt array\n");
		conn_close(&c);
		return 1;
	}
	for (uint32_t i = 0; i < FLIP_SLOTS; i++) {
		prepare(&c, i, c.h.slot_prompt_capacity, 16); /* the canonical prompt, all of it */
		flip_valid(&c, i);
	}
	struct flipper f = { .c = &c, .seed = rnd() | 1 };
	pthread_t th;
	if (pthread_create(&th, NULL, flip_thread, &f) != 0) {
		conn_close(&c);
		return 1;
	}
	long want = o->iterations < 0 ? 2000 : o->iterations, done = 0;
	int64_t budget = deadline_ms(MODE_BUDGET_MS - 2000);
	struct tally t = { 0 };
	while (done < want && !expired(budget) && flip_round(&c, &t) == WAIT_DONE)
		done++;
	__atomic_store_n(&f.stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	fact_u("iterations", (unsigned long long)done);
	fact_u("completions", t.completions);
	fact_u("ok", t.ok);
	fact_u("errors", t.errors);
	fact_u("bad", t.bad);
	fact_u("timeouts", t.timeouts);
	fact_u("flips", f.flips);
	report_result(c.sock, OPEN_WAIT_MS);
	conn_close(&c);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* garbage: random bytes over everything the client can write                                  */
/* ------------------------------------------------------------------------------------------ */

static void fill_random(uint8_t *p, size_t len)
{
	for (size_t k = 0; k + 4 <= len; k += 4) {
		uint32_t v = rnd();
		memcpy(p + k, &v, 4);
	}
}

/* Everything after the header is random except the tail, then one honest sqe names a random
 * slot: the daemon copies a random request and must fail it cleanly (or run it). */
static enum wait_result garbage_request(struct conn *c, uint64_t *statuses)
{
	size_t from = c->h.sq_offset;
	uint32_t tail_word = c->h.sq_offset + (uint32_t)offsetof(struct bn_sq_ring, tail);
	fill_random(c->mem + from, tail_word - from);
	fill_random(c->mem + tail_word + 4, c->size - tail_word - 4);
	uint32_t slot = rnd() % c->h.slot_count;
	bn_write_once(slot_at(c, slot)->state, (uint32_t)BN_SLOT_SUBMITTED);
	put_sqe(c, BN_OP_GENERATE, slot, 0, 0);
	publish(c);
	enum wait_result w = wait_done(c, slot, DONE_WAIT_MS);
	if (w == WAIT_DONE)
		statuses[bn_read_once(slot_at(c, slot)->status) % 8]++;
	return w;
}

/* Then everything, the tail included: almost surely an insane ring. */
static void garbage_all(struct conn *c)
{
	fill_random(c->mem + c->h.sq_offset, c->size - c->h.sq_offset);
	/* Release: the random entries are visible with the random tail the fill wrote. */
	bn_store_release(c->ring->tail, rnd());
	ring_bell(c);
}

static int mode_garbage(const struct options *o)
{
	struct conn c;
	if (with_session(o, &c) < 0)
		return 1;
	long rounds = o->iterations < 0 ? 300 : o->iterations, n1 = 0, n2 = 0;
	uint64_t statuses[8] = { 0 };
	int64_t budget = deadline_ms(MODE_BUDGET_MS / 2);
	while (n1 < rounds && !expired(budget) && garbage_request(&c, statuses) == WAIT_DONE)
		n1++;
	int closed = hung_up(c.sock);
	for (; !closed && n2 < rounds; n2++) {
		garbage_all(&c);
		closed = wait_closed(c.sock, n2 + 1 == rounds ? CLOSE_WAIT_MS : 5);
	}
	fact_u("request_rounds", (unsigned long long)n1);
	for (int s = 0; s < 8; s++) {
		char key[32];
		snprintf(key, sizeof(key), "status%d", s);
		if (statuses[s])
			fact_u(key, statuses[s]);
	}
	fact_u("ring_rounds", (unsigned long long)n2);
	fact_s("result", closed ? "closed" : "open");
	conn_close(&c);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Socket misbehaviour: handshake and control messages                                         */
/* ------------------------------------------------------------------------------------------ */

/* Sends one hello; prints key=<welcome.error> and whether fds came and the socket closed. */
static int bad_hello_once(const struct options *o, const struct bn_hello *hello,
			  const char *key, int *all_closed)
{
	int fd = dial(o->socket_path), fds[2] = { -1, -1 };
	struct bn_welcome w;
	if (fd < 0 || send_bytes(fd, hello, sizeof(*hello)) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	int n_fds = recv_welcome(fd, &w, fds);
	fact_u(key, n_fds < 0 ? 0 : w.error);
	if (n_fds > 0) {
		fact_u("fds_attached", (unsigned long long)n_fds);
		for (int k = 0; k < n_fds; k++)
			close(fds[k]);
	}
	*all_closed &= wait_closed(fd, CLOSE_WAIT_MS);
	close(fd);
	return 0;
}

static int mode_bad_hello(const struct options *o)
{
	struct bn_hello magic = honest_hello(), version = honest_hello();
	struct bn_hello flags = honest_hello(), reserved = honest_hello();
	magic.magic = 0xdeadbeefu;
	version.abi_version = 99;
	flags.flags = 1u << 1; /* bit 0 is BN_HELLO_MODEL; bit 1 is no flag */
	reserved.reserved[2] = 1;
	int closed = 1;
	if (bad_hello_once(o, &magic, "welcome_error", &closed) < 0 ||
	    bad_hello_once(o, &version, "version_error", &closed) < 0 ||
	    bad_hello_once(o, &flags, "flags_error", &closed) < 0 ||
	    bad_hello_once(o, &reserved, "reserved_error", &closed) < 0)
		return 1;
	fact_s("result", closed ? "closed" : "open");
	return 0;
}

static int mode_no_hello(const struct options *o)
{
	int fd = dial(o->socket_path);
	if (fd < 0)
		return 1;
	int64_t t0 = tu_now_ns();
	int closed = wait_closed(fd, HANDSHAKE_WAIT_MS);
	fact_u("elapsed_ms", (unsigned long long)((tu_now_ns() - t0) / MS));
	struct bn_welcome w;
	int fds[2] = { -1, -1 };
	if (closed && recv_welcome(fd, &w, fds) == 0) /* the reason, sent before the close */
		fact_u("welcome_error", w.error);
	fact_s("result", closed ? "closed" : "open");
	close(fd);
	return 0;
}

/* One control exchange (§10); returns the reply's error, or -1 if no proper reply came. */
static long ctl_exchange(int sock, uint32_t op)
{
	struct bn_ctl_request q = { .magic = BN_CTL_MAGIC, .op = op };
	struct bn_ctl_reply r;
	if (send_bytes(sock, &q, sizeof(q)) < 0 ||
	    recv(sock, &r, sizeof(r), MSG_WAITALL) != (ssize_t)sizeof(r) ||
	    r.magic != BN_CTL_REPLY_MAGIC || r.op != op)
		return -1;
	for (uint32_t left = r.length; left;) {
		char buf[4096];
		ssize_t n = recv(sock, buf, left < sizeof(buf) ? left : sizeof(buf), 0);
		if (n <= 0)
			return -1;
		left -= (uint32_t)n;
	}
	return r.error;
}

static int mode_ctl_garbage(const struct options *o)
{
	struct conn c;
	if (with_session(o, &c) < 0)
		return 1;
	/* The control path works, and an unknown op is an error reply, not a violation: so the
	 * garbage below is what ends the session. */
	fact_s("stats_reply", ctl_exchange(c.sock, BN_CTL_STATS) == 0 ? "ok" : "failed");
	fact_u("unknown_op_error", (unsigned long long)ctl_exchange(c.sock, 77));
	fact_s("after_unknown_op", hung_up(c.sock) ? "closed" : "open");
	uint8_t junk[16];
	fill_random(junk, sizeof(junk));
	if (junk[0] == (BN_CTL_MAGIC & 0xff)) /* keep the magic wrong whatever the seed */
		junk[0] ^= 0xff;
	if (send_bytes(c.sock, junk, sizeof(junk)) < 0) {
		conn_close(&c);
		return 1;
	}
	report_result(c.sock, CLOSE_WAIT_MS);
	conn_close(&c);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Command line                                                                                */
/* ------------------------------------------------------------------------------------------ */

static const struct {
	const char *name;
	int (*run)(const struct options *o);
} modes[] = {
	{ "tail-ahead", mode_tail_ahead },
	{ "tail-wild", mode_tail_wild },
	{ "bad-slot", mode_bad_slot },
	{ "bad-op", mode_bad_op },
	{ "sqe-reserved", mode_sqe_reserved },
	{ "double-submit", mode_double_submit },
	{ "double-queue", mode_double_queue },
	{ "huge-lengths", mode_huge_lengths },
	{ "bad-tokens", mode_bad_tokens },
	{ "reserved-request", mode_reserved_request },
	{ "flip", mode_flip },
	{ "garbage", mode_garbage },
	{ "bad-hello", mode_bad_hello },
	{ "no-hello", mode_no_hello },
	{ "ctl-garbage", mode_ctl_garbage },
};

static void usage(FILE *f)
{
	fprintf(f, "Usage: bn-hostile --socket PATH --mode MODE [--iterations N] [--seed N]\n"
		   "Breaks the bitnetd protocol on purpose and prints what the daemon did.\n"
		   "Modes:");
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		fprintf(f, " %s", modes[i].name);
	fprintf(f, "\nExit status: 0 the mode ran (see result=), 1 set-up error.\n");
}

static int parse_args(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "mode", required_argument, NULL, 'm' },
		{ "iterations", required_argument, NULL, 'n' },
		{ "seed", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int opt;
	*o = (struct options){ .iterations = -1, .seed = (uint64_t)tu_now_ns() ^ (uint64_t)getpid() };
	while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (opt) {
		case 's': o->socket_path = optarg; break;
		case 'm': o->mode = optarg; break;
		case 'n': o->iterations = strtol(optarg, NULL, 10); break;
		case 'r': o->seed = strtoull(optarg, NULL, 0); break;
		case 'h': usage(stdout); exit(0);
		default: return -1;
		}
	}
	return o->socket_path && o->mode && optind == argc ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct options o;
	if (parse_args(argc, argv, &o) < 0) {
		usage(stderr);
		return 1;
	}
	/* Line-buffered, so a caller reading the pipe sees each fact even if we are killed. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	alarm((unsigned)ALARM_S);
	rng_state = o.seed ? o.seed : 1;
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		if (strcmp(o.mode, modes[i].name) != 0)
			continue;
		fact_s("mode", o.mode);
		fact_u("seed", (unsigned long long)o.seed);
		return modes[i].run(&o);
	}
	fprintf(stderr, "bn-hostile: unknown mode '%s'\n", o.mode);
	usage(stderr);
	return 1;
}
