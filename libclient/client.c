/* SPDX-License-Identifier: MIT */
/*
 * libbitnet-client: connection, submission ring (producer side), slot waits, batch calls.
 * The protocol is shm/PROTOCOL.md; section numbers in comments refer to it.
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "client_internal.h"

#include "bitnet_barrier.h"
#include "bitnet_futex.h"
#include "bitnet_ring.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_SPIN_NS 20000u
#define SLEEP_SLICE_NS 50000000 /* longest futex sleep between liveness checks */
#define SLOT_WAIT_SLICE_NS 1000000

enum handle_state { H_FREE = 0, H_IN_FLIGHT = 1, H_ABANDONED = 2 };

struct bn_handle {
	struct bn_client *c;
	uint32_t slot;
	enum handle_state state;
	int woke_daemon;        /* its submission rang the doorbell: the daemon was asleep */
	struct bn_handle *next; /* free list or abandoned list */
};

struct bn_client {
	int sock;
	int doorbell;
	uint8_t *mem;
	size_t mem_size;
	/* Validated private copies of the header's layout words. */
	struct bn_shm_header layout;
	struct bn_sq_ring *ring;
	struct bn_sqe *sqes;
	uint32_t sq_mask;
	uint32_t sq_tail;          /* private: we are the ring's only producer */
	uint32_t spin_ns;
	pthread_mutex_t lock;      /* free list, abandoned list, ring production, control socket */
	pthread_cond_t slot_freed;
	struct bn_handle *handles; /* [slot_count] */
	struct bn_handle *free_list;
	struct bn_handle *abandoned; /* released while in flight; reclaimed when DONE */
	int dead;                  /* the daemon hung up */
	struct bn_client_stats stats;
	pthread_mutex_t vocab_lock; /* its own: fetching takes `lock` for the control socket */
	struct bn_vocab *vocab;    /* bn_client_vocab's copy, fetched on first use */
};

/* ------------------------------------------------------------------------------------------ */
/* Small helpers                                                                               */
/* ------------------------------------------------------------------------------------------ */

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static struct bn_slot *slot_of(const struct bn_client *c, uint32_t slot)
{
	return (struct bn_slot *)(c->mem + c->layout.slot_offset + (size_t)slot * c->layout.slot_size);
}

static uint32_t *prompt_of(const struct bn_client *c, uint32_t slot)
{
	return (uint32_t *)((uint8_t *)slot_of(c, slot) + c->layout.slot_prompt_offset);
}

static uint32_t *output_of(const struct bn_client *c, uint32_t slot)
{
	return (uint32_t *)((uint8_t *)slot_of(c, slot) + c->layout.slot_output_offset);
}

static int slot_done(const struct bn_client *c, uint32_t slot)
{
	/* Acquire pairs with the daemon's store-release of DONE: status, error, tokens and
	 * timings written before it are visible to our later reads. */
	return bn_load_acquire(slot_of(c, slot)->state) == BN_SLOT_DONE;
}

static uint32_t daemon_flags(const struct bn_client *c)
{
	return bn_read_once(((const struct bn_shm_header *)c->mem)->daemon_flags);
}

/* The daemon is gone when its end of the socket hung up. One poll(2), no waiting. */
static int daemon_gone(struct bn_client *c)
{
	if (__atomic_load_n(&c->dead, __ATOMIC_RELAXED))
		return 1;
	struct pollfd p = { .fd = c->sock, .events = POLLRDHUP };
	if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
		__atomic_store_n(&c->dead, 1, __ATOMIC_RELAXED);
		return 1;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Connect: handshake (§2), map and validate the segment (§3)                                  */
/* ------------------------------------------------------------------------------------------ */

static int open_socket(const char *path, int *out)
{
	if (!path || !*path)
		path = getenv(BN_SOCKET_ENV);
	if (!path || !*path)
		path = BN_DEFAULT_SOCKET_PATH;
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	strcpy(addr.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	*out = fd;
	return 0;
}

static int send_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n == 0 ? -BN_E_DISCONNECTED : -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int recv_all(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;
	while (len) {
		ssize_t n = recv(fd, p, len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n == 0 ? -BN_E_DISCONNECTED : -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Receives the welcome and, with it, the two fds. */
static int recv_welcome(int sock, struct bn_welcome *w, int fds[2])
{
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = w, .iov_len = sizeof(*w) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	ssize_t n;
	do
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n != (ssize_t)sizeof(*w))
		return -BN_E_DISCONNECTED;
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
	    cm->cmsg_len == CMSG_LEN(2 * sizeof(int)))
		memcpy(fds, CMSG_DATA(cm), 2 * sizeof(int));
	if (w->magic != BN_WELCOME_MAGIC)
		return -BN_E_PROTOCOL;
	if (w->abi_version != BN_ABI_VERSION && !w->error)
		return -BN_E_VERSION;
	if (w->error)
		return -(int)w->error;
	return fds[0] >= 0 && fds[1] >= 0 ? 0 : -BN_E_PROTOCOL;
}

static int region_ok(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

/* The daemon is trusted, but a wrong header must give an error, not a wild pointer. */
static int validate_layout(const struct bn_shm_header *h, size_t size)
{
	if (h->magic != BN_SHM_MAGIC || h->abi_version != BN_ABI_VERSION)
		return -BN_E_VERSION;
	uint32_t n = h->sq_entries;
	if (h->segment_size != size || h->header_size < sizeof(*h) || n == 0 || (n & (n - 1)) ||
	    n < h->slot_count ||
	    h->slot_count == 0 || h->slot_size < sizeof(struct bn_slot) || h->vocab_size == 0)
		return -BN_E_PROTOCOL;
	if (!region_ok(h->sq_offset, sizeof(struct bn_sq_ring), size) ||
	    !region_ok(h->sqes_offset, (uint64_t)n * sizeof(struct bn_sqe), size) ||
	    !region_ok(h->slot_offset, (uint64_t)h->slot_count * h->slot_size, size) ||
	    !region_ok(h->slot_prompt_offset, (uint64_t)h->slot_prompt_capacity * 4, h->slot_size) ||
	    !region_ok(h->slot_output_offset, (uint64_t)h->slot_output_capacity * 4, h->slot_size) ||
	    h->slot_prompt_offset < sizeof(struct bn_slot) ||
	    h->slot_output_offset < sizeof(struct bn_slot) ||
	    ((h->sq_offset | h->sqes_offset | h->slot_offset | h->slot_size) & 7) ||
	    ((h->slot_prompt_offset | h->slot_output_offset) & 3))
		return -BN_E_PROTOCOL;
	/* One token's records fit the slot before the product is taken, so it fits 64 bits. */
	uint64_t per_token = (1ull + h->slot_logprob_capacity) * sizeof(struct bn_logprob);
	if ((h->features & BN_FEAT_LOGPROBS) &&
	    (h->slot_logprob_offset < sizeof(struct bn_slot) || (h->slot_logprob_offset & 7) ||
	     per_token > h->slot_size ||
	     !region_ok(h->slot_logprob_offset, per_token * h->slot_output_capacity, h->slot_size)))
		return -BN_E_PROTOCOL;
	if ((h->features & BN_FEAT_TEXT) &&
	    (!region_ok(h->slot_text_offset, h->slot_text_capacity, h->slot_size) ||
	     !region_ok(h->slot_piece_offset, (uint64_t)h->slot_output_capacity * 4, h->slot_size) ||
	     h->slot_text_offset < sizeof(struct bn_slot) ||
	     h->slot_piece_offset < sizeof(struct bn_slot) || (h->slot_piece_offset & 3)))
		return -BN_E_PROTOCOL;
	return 0;
}

static int map_segment(struct bn_client *c, int memfd, uint64_t size)
{
	if (size < sizeof(struct bn_shm_header) || size > SIZE_MAX)
		return -BN_E_PROTOCOL;
	void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (p == MAP_FAILED)
		return -errno;
	c->mem = p;
	c->mem_size = (size_t)size;
	memcpy(&c->layout, p, sizeof(c->layout));
	int rc = validate_layout(&c->layout, c->mem_size);
	if (rc < 0)
		return rc;
	c->ring = (struct bn_sq_ring *)(c->mem + c->layout.sq_offset);
	c->sqes = (struct bn_sqe *)(c->mem + c->layout.sqes_offset);
	c->sq_mask = c->layout.sq_entries - 1;
	c->sq_tail = bn_read_once(c->ring->tail);
	return 0;
}

static int init_handles(struct bn_client *c)
{
	uint32_t n = c->layout.slot_count;
	c->handles = calloc(n, sizeof(*c->handles));
	if (!c->handles)
		return -ENOMEM;
	for (uint32_t i = n; i-- > 0;) {
		c->handles[i] = (struct bn_handle){ .c = c, .slot = i, .next = c->free_list };
		c->free_list = &c->handles[i];
	}
	return 0;
}

static int handshake(struct bn_client *c, uint32_t slots, uint32_t weight)
{
	struct bn_hello hello = { .magic = BN_HELLO_MAGIC, .abi_version = BN_ABI_VERSION,
				  .requested_slots = slots, .weight = weight };
	/* A daemon that refuses at accept (busy, shutting down) may close before our hello
	 * lands; its welcome still waits in our receive buffer and says why. */
	int sent = send_all(c->sock, &hello, sizeof(hello));
	struct bn_welcome w;
	int fds[2] = { -1, -1 };
	int rc = recv_welcome(c->sock, &w, fds);
	if (rc == -BN_E_DISCONNECTED && sent < 0)
		rc = sent;
	if (rc < 0) {
		if (fds[0] >= 0)
			close(fds[0]);
		if (fds[1] >= 0)
			close(fds[1]);
		return rc;
	}
	c->doorbell = fds[1];
	rc = map_segment(c, fds[0], w.segment_size);
	close(fds[0]); /* the mapping keeps the memory */
	return rc;
}

int bn_connect(const char *socket_path, uint32_t slots, struct bn_client **out)
{
	return bn_connect_weighted(socket_path, slots, 0, out);
}

int bn_connect_weighted(const char *socket_path, uint32_t slots, uint32_t weight,
			struct bn_client **out)
{
	struct bn_client *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->sock = c->doorbell = -1;
	c->spin_ns = DEFAULT_SPIN_NS;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->vocab_lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->slot_freed, &ca);
	pthread_condattr_destroy(&ca);
	int rc = open_socket(socket_path, &c->sock);
	if (rc == 0)
		rc = handshake(c, slots, weight);
	if (rc == 0)
		rc = init_handles(c);
	if (rc < 0) {
		bn_disconnect(c);
		return rc;
	}
	*out = c;
	return 0;
}

int bn_disconnect(struct bn_client *c)
{
	if (!c)
		return 0;
	if (c->mem)
		munmap(c->mem, c->mem_size);
	if (c->doorbell >= 0)
		close(c->doorbell);
	if (c->sock >= 0)
		close(c->sock);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->vocab_lock);
	pthread_cond_destroy(&c->slot_freed);
	bn_vocab_free(c->vocab);
	free(c->handles);
	free(c);
	return 0;
}

int bn_client_set_spin_ns(struct bn_client *c, uint32_t spin_ns)
{
	c->spin_ns = spin_ns;
	return 0;
}

static const char *backend_name(uint32_t kind)
{
	switch (kind) {
	case BN_BACKEND_LOOPBACK: return "loopback";
	case BN_BACKEND_CPU: return "cpu";
	case BN_BACKEND_CUDA: return "cuda";
	default: return "unknown";
	}
}

int bn_model_info(struct bn_client *c, struct bn_model_info *out)
{
	const struct bn_shm_header *h = &c->layout;
	memset(out, 0, sizeof(*out));
	memcpy(out->name, h->model_name, sizeof(h->model_name));
	strcpy(out->backend, backend_name(h->backend));
	out->vocab_size = h->vocab_size;
	out->context_length = h->context_length;
	out->bos_id = h->bos_id;
	out->eos_id = h->eos_id;
	out->max_prompt_tokens = h->slot_prompt_capacity;
	out->max_output_tokens = h->slot_output_capacity;
	out->slots = h->slot_count;
	return 0;
}

int bn_model_compute(struct bn_client *c, uint32_t *lm_head, uint32_t *decode_layout)
{
	const struct bn_shm_header *h = &c->layout;
	int told = (h->features & BN_FEAT_COMPUTE) != 0;
	*lm_head = told ? h->lm_head : BN_HEAD_NONE;
	*decode_layout = told ? h->decode_layout : BN_DECODE_LAYOUT_NONE;
	return told ? 0 : -BN_E_UNSUPPORTED;
}

/* ------------------------------------------------------------------------------------------ */
/* Slots: free list, abandoned requests                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Abandoned handles whose request has ended go back to the free list. Lock held. */
static void reclaim_abandoned(struct bn_client *c)
{
	struct bn_handle **link = &c->abandoned;
	while (*link) {
		struct bn_handle *h = *link;
		if (!slot_done(c, h->slot)) {
			link = &h->next;
			continue;
		}
		*link = h->next;
		h->state = H_FREE;
		h->next = c->free_list;
		c->free_list = h;
	}
}

static struct bn_handle *take_free(struct bn_client *c)
{
	if (!c->free_list && c->abandoned)
		reclaim_abandoned(c);
	struct bn_handle *h = c->free_list;
	if (h) {
		c->free_list = h->next;
		h->next = NULL;
		h->state = H_IN_FLIGHT;
	}
	return h;
}

/* ------------------------------------------------------------------------------------------ */
/* Submit (§5 ring, §6 slot): fill the slot, queue it, ring only if the daemon sleeps          */
/* ------------------------------------------------------------------------------------------ */

/* The sampling words, and the stop ids after the prompt; all zero (greedy) without
 * parameters. */
static void fill_sampling(struct bn_client *c, uint32_t slot, const struct bn_request *req)
{
	struct bn_slot *s = slot_of(c, slot);
	const struct bn_sampling_params *p = req->sampling;
	memset(&s->temperature, 0, sizeof(*s) - offsetof(struct bn_slot, temperature));
	if (!p)
		return;
	s->temperature = p->temperature;
	s->top_k = p->top_k;
	s->top_p = p->top_p;
	s->min_p = p->min_p;
	s->repetition_penalty = p->repetition_penalty;
	s->presence_penalty = p->presence_penalty;
	s->frequency_penalty = p->frequency_penalty;
	/* The seed words are zero unless the request says they hold a seed (the daemon checks). */
	if (req->flags & BN_REQ_SEED) {
		s->seed_lo = (uint32_t)p->seed;
		s->seed_hi = (uint32_t)(p->seed >> 32);
	}
	s->n_stop = p->n_stop;
	s->n_logprobs = p->n_logprobs;
	s->deadline_ms = p->deadline_ms;
	if (p->n_stop)
		memcpy(prompt_of(c, slot) + req->n_prompt, p->stop_ids,
		       (size_t)p->n_stop * sizeof(uint32_t));
}

static uint8_t *text_of(const struct bn_client *c, uint32_t slot)
{
	return (uint8_t *)slot_of(c, slot) + c->layout.slot_text_offset;
}

/* A text prompt (text non-NULL) goes to the text region, its stop ids to the prompt array
 * from entry 0 (req->n_prompt is 0 then). */
static void fill_slot(struct bn_client *c, uint32_t slot, const struct bn_request *req,
		      const char *text, size_t len)
{
	struct bn_slot *s = slot_of(c, slot);
	if (text) {
		memcpy(text_of(c, slot), text, len);
		s->n_prompt = (uint32_t)len;
		s->flags = req->flags | BN_REQ_TEXT;
	} else {
		memcpy(prompt_of(c, slot), req->prompt, (size_t)req->n_prompt * sizeof(uint32_t));
		s->n_prompt = req->n_prompt;
		s->flags = req->flags;
	}
	if (c->layout.features & BN_FEAT_TEXT)
		s->n_text = s->prompt_tokens = 0;
	s->max_tokens = req->max_tokens;
	fill_sampling(c, slot, req);
	s->cancel = 0;
	s->waiters = 0;
	s->status = BN_STATUS_NONE;
	s->error = 0;
	s->n_tokens = 0;
	s->state = BN_SLOT_SUBMITTED; /* published by the tail store-release in queue_slot() */
}

/* Lock held. Returns whether the daemon was asleep and had to be rung. */
static int queue_slot(struct bn_client *c, uint32_t slot, uint32_t op)
{
	int rang = 0;
	struct bn_sqe *e = &c->sqes[bn_ring_index(c->sq_tail, c->sq_mask + 1)];
	*e = (struct bn_sqe){ .op = op, .slot = slot };
	c->sq_tail++;
	/* Release: the sqe and the slot's request are visible before the tail that covers them. */
	bn_store_release(c->ring->tail, c->sq_tail);
	/* Full fence: the tail store is ordered before the NEED_WAKEUP load. The daemon stores
	 * NEED_WAKEUP, fences, then re-reads tails: one of us sees the other's store. */
	bn_smp_mb();
	if (bn_read_once(c->ring->flags) & BN_SQ_NEED_WAKEUP) {
		uint64_t one = 1;
		if (write(c->doorbell, &one, sizeof(one)) == (ssize_t)sizeof(one))
			c->stats.doorbells++;
		rang = 1;
	}
	c->stats.submits++;
	return rang;
}

static int check_request(const struct bn_client *c, const struct bn_request *req)
{
	if (!req || (req->n_prompt && !req->prompt))
		return -BN_E_INVALID;
	const struct bn_sampling_params *p = req->sampling;
	uint32_t n_stop = p ? p->n_stop : 0;
	if (p && n_stop && !p->stop_ids)
		return -BN_E_INVALID;
	/* A daemon that predates the sampling words would read them as reserved (non-zero). */
	if (p && !(c->layout.features & BN_FEAT_PARAMS))
		return -BN_E_INVALID;
	if ((req->flags & BN_REQ_LOGPROBS) && !(c->layout.features & BN_FEAT_LOGPROBS))
		return -BN_E_INVALID;
	if ((uint64_t)req->n_prompt + n_stop > c->layout.slot_prompt_capacity ||
	    req->max_tokens > c->layout.slot_output_capacity)
		return -BN_E_TOO_LONG;
	return 0;
}

#define TEXT_REQ_FLAGS (BN_REQ_TEXT | BN_REQ_CHAT | BN_REQ_PARSE_SPECIAL | BN_REQ_NO_BOS | \
			BN_REQ_TEXT_OUT | BN_REQ_SPECIAL_TEXT | BN_REQ_STRIP_SPACE)

/* The prompt's form: ids (text NULL) cannot say TEXT or CHAT; a text prompt has no ids and
 * fits the text region; text of any kind needs a daemon that offers it. */
static int check_prompt_form(const struct bn_client *c, const struct bn_request *req,
			     const char *text, size_t len)
{
	if ((req->flags & BN_REQ_CHAT) || (!text && (req->flags & BN_REQ_TEXT)) ||
	    (text && (req->n_prompt || req->prompt)))
		return -BN_E_INVALID;
	if ((text || (req->flags & TEXT_REQ_FLAGS)) && !(c->layout.features & BN_FEAT_TEXT))
		return -BN_E_UNSUPPORTED;
	if (text && len > c->layout.slot_text_capacity)
		return -BN_E_TOO_LONG;
	return 0;
}

/* The op's feature: a score request needs a daemon whose backend scores. */
static int check_op(const struct bn_client *c, uint32_t op)
{
	if (op == BN_OP_GENERATE)
		return 0;
	if (op == BN_OP_SCORE)
		return c->layout.features & BN_FEAT_SCORE ? 0 : -BN_E_UNSUPPORTED;
	if (op == BN_OP_CLASSIFY)
		return c->layout.features & BN_FEAT_CLASSIFY ? 0 : -BN_E_UNSUPPORTED;
	return -BN_E_INVALID;
}

int bn_submit_as(struct bn_client *c, const struct bn_submission *sub, struct bn_handle **out)
{
	const struct bn_request *req = sub->req;
	const char *text = sub->text;
	size_t len = sub->len;
	int rc = req ? check_prompt_form(c, req, text, len) : -BN_E_INVALID;
	if (rc == 0)
		rc = check_op(c, sub->op);
	if (rc == 0)
		rc = check_request(c, req);
	if (rc < 0)
		return rc;
	/* A daemon that shut down says so for good in the header, even once it is gone. */
	if (daemon_flags(c) & BN_DAEMON_SHUTTING_DOWN)
		return -BN_E_SHUTDOWN;
	/* Only the flag a wait has set: a poll(2) here would be a system call per request. A
	 * submission to a daemon that died unnoticed fails in its wait, within one slice. */
	if (__atomic_load_n(&c->dead, __ATOMIC_RELAXED))
		return -BN_E_DISCONNECTED;
	pthread_mutex_lock(&c->lock);
	struct bn_handle *h = take_free(c);
	pthread_mutex_unlock(&c->lock);
	if (!h)
		return -BN_E_AGAIN;
	/* The slot is ours alone until queued: fill it without the lock. */
	fill_slot(c, h->slot, req, text, len);
	pthread_mutex_lock(&c->lock);
	h->woke_daemon = queue_slot(c, h->slot, sub->op);
	pthread_mutex_unlock(&c->lock);
	*out = h;
	return 0;
}

int bn_submit(struct bn_client *c, const struct bn_request *req, struct bn_handle **out)
{
	const struct bn_submission sub = { .req = req, .op = BN_OP_GENERATE };
	return bn_submit_as(c, &sub, out);
}

int bn_submit_text(struct bn_client *c, const struct bn_request *req, const char *text,
		   size_t len, struct bn_handle **out)
{
	if (!text && len)
		return -BN_E_INVALID;
	const struct bn_submission sub = { .req = req, .text = text ? text : "", .len = len,
					   .op = BN_OP_GENERATE };
	return bn_submit_as(c, &sub, out);
}

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

/* ------------------------------------------------------------------------------------------ */
/* Synchronous calls                                                                           */
/* ------------------------------------------------------------------------------------------ */

/* bn_submit_as, but waits (until deadline) for a slot when all are busy. */
static int submit_waiting(struct bn_client *c, const struct bn_submission *sub, int64_t deadline,
			  struct bn_handle **out)
{
	for (;;) {
		int rc = bn_submit_as(c, sub, out);
		if (rc != -BN_E_AGAIN)
			return rc;
		int64_t now = now_ns();
		if (now >= deadline)
			return -BN_E_TIMEOUT;
		/* Abandoned slots come back without a signal, so sleep in short slices. */
		int64_t until = now + SLOT_WAIT_SLICE_NS < deadline ? now + SLOT_WAIT_SLICE_NS : deadline;
		struct timespec ts = { .tv_sec = until / 1000000000, .tv_nsec = until % 1000000000 };
		pthread_mutex_lock(&c->lock);
		if (!c->free_list)
			pthread_cond_timedwait(&c->slot_freed, &c->lock, &ts);
		pthread_mutex_unlock(&c->lock);
	}
}

int bn_status_error(const struct bn_result *r)
{
	switch (r->status) {
	case BN_STATUS_LENGTH:
	case BN_STATUS_EOS:
	case BN_STATUS_STOP:
	case BN_STATUS_COMPLETE: return 0;
	case BN_STATUS_DEADLINE: return -BN_E_TIMEOUT;
	case BN_STATUS_CANCELLED: return -BN_E_CANCELLED;
	case BN_STATUS_SHUTDOWN: return -BN_E_SHUTDOWN;
	case BN_STATUS_ERROR: return r->error ? r->error : -BN_E_PROTOCOL;
	default: return -BN_E_PROTOCOL;
	}
}

/* Waits for h until deadline, copies its result and tokens, releases it. */
static int finish_one(struct bn_handle *h, int64_t deadline, uint32_t *out, uint32_t cap,
		      struct bn_result *result)
{
	int rc = bn_wait(h, bn_time_left(deadline));
	struct bn_result r = { 0 };
	if (rc == 0 && bn_result(h, &r) == 0) {
		if (out)
			bn_read_tokens(h, 0, out, cap);
		rc = bn_status_error(&r);
	}
	if (result)
		*result = r;
	bn_release(h);
	return rc;
}

int64_t bn_deadline_of(int64_t timeout_ns)
{
	return timeout_ns < 0 ? INT64_MAX : now_ns() + timeout_ns;
}

int64_t bn_time_left(int64_t deadline)
{
	if (deadline == INT64_MAX)
		return -1;
	int64_t left = deadline - now_ns();
	return left < 0 ? 0 : left;
}

int bn_generate(struct bn_client *c, const struct bn_request *req, uint32_t *out, uint32_t cap,
		struct bn_result *result, int64_t timeout_ns)
{
	int64_t deadline = bn_deadline_of(timeout_ns);
	struct bn_handle *h;
	const struct bn_submission sub = { .req = req, .op = BN_OP_GENERATE };
	int rc = submit_waiting(c, &sub, deadline, &h);
	if (rc < 0) {
		if (result)
			*result = (struct bn_result){ .status = BN_STATUS_ERROR, .error = rc };
		return rc;
	}
	return finish_one(h, deadline, out, cap, result);
}

int bn_run_batch(struct bn_client *c, size_t n, const struct bn_batch_job *job,
		 int64_t timeout_ns)
{
	int64_t deadline = bn_deadline_of(timeout_ns);
	struct bn_handle **inflight = calloc(n ? n : 1, sizeof(*inflight));
	if (!inflight)
		return -ENOMEM;
	/* Items [0, oldest) are settled, [oldest, next) submitted (or failed at submit). */
	size_t next = 0, oldest = 0;
	int gone = 0;
	while (oldest < n) {
		while (next < n && !gone) {
			struct bn_submission sub;
			int rc = job->submission(job->ctx, next, &sub);
			if (rc == 0)
				rc = bn_submit_as(c, &sub, &inflight[next]);
			if (rc == -BN_E_AGAIN && next > oldest)
				break; /* finish one of ours first */
			if (rc == -BN_E_AGAIN) /* other threads hold every slot */
				rc = submit_waiting(c, &sub, deadline, &inflight[next]);
			if (rc < 0) {
				inflight[next] = NULL;
				job->settle(job->ctx, next, rc);
				gone = rc == -BN_E_DISCONNECTED;
			}
			next++;
		}
		if (oldest == next) { /* the daemon is gone: nothing more can be submitted */
			job->settle(job->ctx, oldest, -BN_E_DISCONNECTED);
			next = ++oldest;
			continue;
		}
		if (inflight[oldest]) {
			int rc = job->finish(job->ctx, oldest, inflight[oldest], deadline);
			job->settle(job->ctx, oldest, rc);
			gone |= rc == -BN_E_DISCONNECTED;
		}
		oldest++;
	}
	free(inflight);
	return gone ? -BN_E_DISCONNECTED : 0;
}

struct generate_job {
	struct bn_batch_item *items;
	struct bn_batch_result *result;
};

static int generate_submission(void *ctx, size_t i, struct bn_submission *sub)
{
	struct bn_batch_item *it = &((struct generate_job *)ctx)->items[i];
	it->result = (struct bn_result){ 0 };
	*sub = (struct bn_submission){ .req = &it->req, .op = BN_OP_GENERATE };
	return 0;
}

static int generate_finish(void *ctx, size_t i, struct bn_handle *h, int64_t deadline)
{
	struct bn_batch_item *it = &((struct generate_job *)ctx)->items[i];
	return finish_one(h, deadline, it->out, it->out_cap, &it->result);
}

void bn_batch_settle(int32_t *error, struct bn_result *result, struct bn_batch_result *totals,
		     int rc)
{
	*error = rc;
	if (rc < 0 && result->status == BN_STATUS_NONE)
		*result = (struct bn_result){ .status = BN_STATUS_ERROR, .error = rc };
	if (rc == 0)
		totals->n_ok++;
	else
		totals->n_failed++;
}

static void generate_settle(void *ctx, size_t i, int rc)
{
	struct generate_job *g = ctx;
	bn_batch_settle(&g->items[i].error, &g->items[i].result, g->result, rc);
}

int bn_generate_batch(struct bn_client *c, struct bn_batch_item *items, size_t n,
		      struct bn_batch_result *result, int64_t timeout_ns)
{
	if (!c || (n && !items) || !result)
		return -BN_E_INVALID;
	*result = (struct bn_batch_result){ 0 };
	struct generate_job g = { .items = items, .result = result };
	const struct bn_batch_job job = { .submission = generate_submission,
					  .finish = generate_finish,
					  .settle = generate_settle,
					  .ctx = &g };
	return bn_run_batch(c, n, &job, timeout_ns);
}

/* ------------------------------------------------------------------------------------------ */
/* Control socket and counters                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* Reads and drops `len` payload bytes that do not fit the caller's buffer. */
static int skip_bytes(int fd, size_t len)
{
	char sink[4096];
	while (len) {
		size_t k = len < sizeof(sink) ? len : sizeof(sink);
		int rc = recv_all(fd, sink, k);
		if (rc < 0)
			return rc;
		len -= k;
	}
	return 0;
}

/* The descriptor a reply carries, or -1; any further ones are closed. */
static int take_fd(struct msghdr *msg)
{
	int fd = -1;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR(msg, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int one;
			memcpy(&one, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (fd < 0)
				fd = one;
			else
				close(one);
		}
	}
	return fd;
}

/* One control request and its reply head (§10), with the descriptor that may come with the
 * head's first byte (BN_CTL_VOCAB); payload bytes that follow on the socket are the caller's
 * to read. c->lock held: the socket carries one exchange at a time. */
static int ctl_request(struct bn_client *c, uint32_t op, struct bn_ctl_reply *r, int *fd)
{
	struct bn_ctl_request q = { .magic = BN_CTL_MAGIC, .op = op };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = r, .iov_len = sizeof(*r) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	*fd = -1;
	int rc = send_all(c->sock, &q, sizeof(q));
	if (rc < 0)
		return rc;
	ssize_t n;
	do
		n = recvmsg(c->sock, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return n == 0 ? -BN_E_DISCONNECTED : -errno;
	*fd = take_fd(&msg);
	rc = recv_all(c->sock, (uint8_t *)r + n, sizeof(*r) - (size_t)n);
	if (rc == 0 && (r->magic != BN_CTL_REPLY_MAGIC || r->op != op || (msg.msg_flags & MSG_CTRUNC)))
		rc = -BN_E_PROTOCOL;
	if (rc < 0 && *fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	return rc;
}

int bn_client_ctl(struct bn_client *c, uint32_t op, struct bn_ctl_reply *r, int *fd)
{
	pthread_mutex_lock(&c->lock);
	int rc = ctl_request(c, op, r, fd);
	pthread_mutex_unlock(&c->lock);
	if (rc == -BN_E_DISCONNECTED)
		__atomic_store_n(&c->dead, 1, __ATOMIC_RELAXED);
	return rc;
}

static int stats_exchange(struct bn_client *c, char *buf, size_t cap)
{
	struct bn_ctl_reply r;
	int fd;
	int rc = ctl_request(c, BN_CTL_STATS, &r, &fd);
	if (rc < 0)
		return rc;
	if (fd >= 0)
		close(fd); /* none belongs to a STATS reply */
	size_t keep = cap ? (r.length < cap - 1 ? r.length : cap - 1) : 0;
	rc = recv_all(c->sock, buf, keep);
	if (rc == 0)
		rc = skip_bytes(c->sock, r.length - keep);
	if (rc < 0)
		return rc;
	if (cap)
		buf[keep] = '\0';
	return r.error ? -(int)r.error : (int)r.length;
}

int bn_daemon_stats(struct bn_client *c, char *buf, size_t cap)
{
	if (!buf && cap)
		return -BN_E_INVALID;
	pthread_mutex_lock(&c->lock);
	int rc = stats_exchange(c, buf, cap);
	pthread_mutex_unlock(&c->lock);
	if (rc == -BN_E_DISCONNECTED)
		__atomic_store_n(&c->dead, 1, __ATOMIC_RELAXED);
	return rc;
}

int bn_client_stats(struct bn_client *c, struct bn_client_stats *out)
{
	pthread_mutex_lock(&c->lock);
	*out = c->stats;
	out->futex_waits = __atomic_load_n(&c->stats.futex_waits, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Names                                                                                       */
/* ------------------------------------------------------------------------------------------ */

const char *bn_strerror(int code)
{
	switch (code < 0 ? -code : code) {
	case 0: return "success";
	case BN_E_INVALID: return "BN_E_INVALID: invalid argument or request parameter";
	case BN_E_TOKEN: return "BN_E_TOKEN: token id outside the vocabulary";
	case BN_E_TOO_LONG: return "BN_E_TOO_LONG: prompt or output exceeds capacity or context";
	case BN_E_AGAIN: return "BN_E_AGAIN: no free slot, try again";
	case BN_E_SHUTDOWN: return "BN_E_SHUTDOWN: the daemon is shutting down";
	case BN_E_DISCONNECTED: return "BN_E_DISCONNECTED: the daemon is gone";
	case BN_E_TIMEOUT: return "BN_E_TIMEOUT: timed out";
	case BN_E_PROTOCOL: return "BN_E_PROTOCOL: protocol violation";
	case BN_E_VERSION: return "BN_E_VERSION: ABI version mismatch";
	case BN_E_BUSY:
		return "BN_E_BUSY: no room for this connection (the sessions, or this user's share)";
	case BN_E_BACKEND: return "BN_E_BACKEND: the backend failed";
	case BN_E_CANCELLED: return "BN_E_CANCELLED: the request was cancelled";
	case BN_E_NOT_DONE: return "BN_E_NOT_DONE: the request has not ended yet";
	case BN_E_EMPTY: return "BN_E_EMPTY: empty prompt";
	case BN_E_KV_SPACE:
		return "BN_E_KV_SPACE: prompt + max_tokens needs more KV cache than the daemon has";
	case BN_E_UNSUPPORTED:
		return "BN_E_UNSUPPORTED: the daemon does not offer this (an unknown request kind, or "
		       "text without a tokenizer)";
	default: return strerrordesc_np(code < 0 ? -code : code) ?: "unknown error";
	}
}

const char *bn_status_name(uint32_t status)
{
	static const char *const names[] = { "none",  "length",   "eos",  "cancelled",
					     "error", "shutdown", "stop", "deadline", "complete" };
	return status < sizeof(names) / sizeof(names[0]) ? names[status] : "unknown";
}

/* ------------------------------------------------------------------------------------------ */
/* The vocabulary                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* The memfd must be sealed against shrinking (a mapping past its end would fault) and writing
 * (its bytes could change between the checks and their use). */
static int map_payload(int fd, uint32_t length, struct bn_vocab **out)
{
	const int need = F_SEAL_SHRINK | F_SEAL_WRITE;
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & need) != need || fstat(fd, &st) < 0 ||
	    (uint64_t)st.st_size < length || length < sizeof(struct bn_vocab_head))
		return -BN_E_PROTOCOL;
	/* MAP_PRIVATE: kernels before 6.7 refuse shared mappings of a write-sealed memfd. */
	void *p = mmap(NULL, length, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	int rc = bn_vocab_from_payload(p, length, out);
	munmap(p, length);
	return rc;
}

static int fetch_payload(struct bn_client *c, uint32_t op, struct bn_vocab **out)
{
	struct bn_ctl_reply r;
	int fd = -1;
	int rc = bn_client_ctl(c, op, &r, &fd);
	if (rc == 0 && r.error)
		rc = -(int)r.error;
	else if (rc == 0 && fd < 0)
		rc = -BN_E_PROTOCOL;
	if (rc == 0)
		rc = map_payload(fd, r.length, out);
	if (fd >= 0)
		close(fd);
	return rc;
}

/* BN_CTL_TOKENIZER first; a daemon that predates it answers BN_E_INVALID, as it does when it
 * serves no vocabulary at all, and BN_CTL_VOCAB then tells the two apart. */
int bn_vocab_fetch(struct bn_client *c, struct bn_vocab **out)
{
	if (!c || !out)
		return -BN_E_INVALID;
	int rc = fetch_payload(c, BN_CTL_TOKENIZER, out);
	if (rc == -BN_E_INVALID)
		rc = fetch_payload(c, BN_CTL_VOCAB, out);
	return rc;
}

int bn_client_vocab(struct bn_client *c, const struct bn_vocab **out)
{
	if (!c || !out)
		return -BN_E_INVALID;
	pthread_mutex_lock(&c->vocab_lock);
	int rc = c->vocab ? 0 : bn_vocab_fetch(c, &c->vocab);
	*out = c->vocab;
	pthread_mutex_unlock(&c->vocab_lock);
	return rc;
}
