/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "session.h"

#include "bitnet_barrier.h"
#include "bitnet_futex.h"
#include "bitnet_ring.h"
#include "bitnet_client.h"
#include "common/clock.h"
#include "common/log.h"
#include "serve/sched.h"
#include "common/stats.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ */
/* Lifetime                                                                                    */
/* ------------------------------------------------------------------------------------------ */

void bn_peer_cred(int sock_fd, struct ucred *out)
{
	socklen_t len = sizeof(*out);
	if (getsockopt(sock_fd, SOL_SOCKET, SO_PEERCRED, out, &len) < 0 || len != sizeof(*out))
		*out = (struct ucred){ .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
}

struct bn_session *bn_session_new(uint32_t id, int sock_fd, const struct ucred *peer)
{
	struct bn_session *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->id = id;
	s->sock_fd = sock_fd;
	s->doorbell_fd = -1;
	s->memfd = -1;
	s->t_connected = bn_now_ns();
	s->peer_pid = peer->pid;
	s->peer_uid = peer->uid;
	s->peer_gid = peer->gid;
	return s;
}

void bn_session_free(struct bn_session *s)
{
	if (!s)
		return;
	if (s->mem)
		munmap(s->mem, s->mem_size);
	if (s->memfd >= 0)
		close(s->memfd);
	if (s->doorbell_fd >= 0)
		close(s->doorbell_fd);
	if (s->sock_fd >= 0)
		close(s->sock_fd);
	for (uint32_t i = 0; s->reqs && i < s->slot_count; i++)
		bn_text_stream_free(s->reqs[i].stream); /* every request ends first: a guard */
	if (s->reqs)
		munmap(s->reqs, s->private_size);
	free(s);
}

/* ------------------------------------------------------------------------------------------ */
/* Handshake: size and seal the segment, pass it with the doorbell                             */
/* ------------------------------------------------------------------------------------------ */

static uint32_t align64(uint32_t v)
{
	return (v + 63u) & ~63u;
}

static uint32_t pow2_at_least(uint32_t v)
{
	uint32_t p = 1;
	while (p < v)
		p <<= 1;
	return p;
}

void bn_segment_layout(const struct bn_session_limits *lim, uint32_t slots,
		       struct bn_shm_header *h)
{
	uint32_t entries = pow2_at_least(slots);
	h->header_size = (uint32_t)sizeof(*h);
	h->slot_count = slots;
	h->slot_prompt_offset = (uint32_t)sizeof(struct bn_slot);
	h->slot_prompt_capacity = lim->prompt_capacity;
	h->slot_output_offset = align64(h->slot_prompt_offset + 4u * lim->prompt_capacity);
	h->slot_output_capacity = lim->output_capacity;
	h->slot_logprob_offset = align64(h->slot_output_offset + 4u * lim->output_capacity);
	h->slot_logprob_capacity = lim->logprob_capacity;
	h->slot_size = align64(h->slot_logprob_offset + (uint32_t)sizeof(struct bn_logprob) *
						     (1u + lim->logprob_capacity) * lim->output_capacity);
	uint32_t tokens = lim->prompt_capacity > lim->output_capacity ? lim->prompt_capacity
								     : lim->output_capacity;
	uint32_t text = bn_text_capacity(lim->text, tokens);
	if (text) {
		/* The text of any prompt or output the slot holds fits (textreq.c sizes it). */
		h->slot_text_offset = h->slot_size;
		h->slot_text_capacity = text;
		h->slot_piece_offset = align64(h->slot_text_offset + text);
		h->slot_size = align64(h->slot_piece_offset + 4u * lim->output_capacity);
	}
	h->sq_offset = (uint32_t)sizeof(*h);
	h->sq_entries = entries;
	h->sqes_offset = align64(h->sq_offset + (uint32_t)sizeof(struct bn_sq_ring));
	h->slot_offset = align64(h->sqes_offset + entries * (uint32_t)sizeof(struct bn_sqe));
	h->segment_size = (uint64_t)h->slot_offset + (uint64_t)h->slot_size * slots;
}

/* The header: the layout, then who we are and what the model is. */
static void write_header(struct bn_session *s, const struct bn_shm_header *layout,
			 const struct bn_model_desc *m)
{
	struct bn_shm_header *h = (struct bn_shm_header *)s->mem;
	*h = *layout;
	h->magic = BN_SHM_MAGIC;
	h->abi_version = BN_ABI_VERSION;
	h->features = BN_FEAT_STREAMING | BN_FEAT_PARAMS | BN_FEAT_LOGPROBS |
		      (layout->slot_text_capacity ? BN_FEAT_TEXT : 0) |
		      (m->can_score ? BN_FEAT_SCORE : 0) | (m->can_classify ? BN_FEAT_CLASSIFY : 0) |
		      BN_FEAT_COMPUTE;
	h->session_id = s->id;
	h->vocab_size = m->vocab_size;
	h->context_length = m->context_length;
	h->bos_id = m->bos_id;
	h->eos_id = m->eos_id;
	h->backend = m->kind;
	h->lm_head = m->lm_head;
	h->decode_layout = m->decode_layout;
	memcpy(h->model_name, m->name, sizeof(h->model_name));
	s->hdr = h;
	s->ring = (struct bn_sq_ring *)(s->mem + h->sq_offset);
	s->sqes = (struct bn_sqe *)(s->mem + h->sqes_offset);
	s->slots = s->mem + h->slot_offset;
}

/* The daemon's private copies of the layout, read back from nothing the client can write. */
static void keep_layout(struct bn_session *s, const struct bn_shm_header *g)
{
	s->slot_count = g->slot_count;
	s->sq_mask = g->sq_entries - 1;
	s->slot_size = g->slot_size;
	s->prompt_offset = g->slot_prompt_offset;
	s->prompt_capacity = g->slot_prompt_capacity;
	s->output_offset = g->slot_output_offset;
	s->output_capacity = g->slot_output_capacity;
	s->logprob_offset = g->slot_logprob_offset;
	s->logprob_capacity = g->slot_logprob_capacity;
	s->text_offset = g->slot_text_offset;
	s->text_capacity = g->slot_text_capacity;
	s->piece_offset = g->slot_piece_offset;
	s->mem_size = (size_t)g->segment_size;
}

/* The daemon's private copies of every slot's request, prompt and output, in one anonymous
 * mapping per session (hundreds of KiB): a session that ends gives these pages back to the
 * system at once. From the heap they left holes that kept the daemon's resident size at the
 * high-water mark of sessions alive together (measured with bn-faults: 30-250 KiB more after
 * 100 killed clients). Anonymous pages also start zeroed, as reqs[] must. */
static int alloc_private(struct bn_session *s, uint32_t slots, const struct bn_session_limits *lim)
{
	size_t reqs = ((size_t)slots * sizeof(struct bn_req) + 63) & ~(size_t)63;
	size_t prompts = (size_t)slots * lim->prompt_capacity * sizeof(uint32_t);
	size_t outputs = (size_t)slots * lim->output_capacity * sizeof(uint32_t);
	size_t ending = (size_t)slots * sizeof(uint32_t);
	size_t size = reqs + prompts + outputs + ending;
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	s->private_size = size;
	s->reqs = p;
	s->prompt_arena = (uint32_t *)(void *)((uint8_t *)p + reqs);
	s->output_arena = (uint32_t *)(void *)((uint8_t *)p + reqs + prompts);
	s->ending = (uint32_t *)(void *)((uint8_t *)p + reqs + prompts + outputs);
	return 0;
}

static int create_segment(struct bn_session *s, uint32_t slots, const struct bn_session_limits *lim)
{
	struct bn_shm_header g = { 0 };
	bn_segment_layout(lim, slots, &g);
	keep_layout(s, &g);
	s->memfd = memfd_create("bitnetd-session", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (s->memfd < 0)
		return -errno;
	if (ftruncate(s->memfd, (off_t)s->mem_size) < 0)
		return -errno;
	void *p = mmap(NULL, s->mem_size, PROT_READ | PROT_WRITE, MAP_SHARED, s->memfd, 0);
	if (p == MAP_FAILED)
		return -errno;
	s->mem = p;
	/* Sealed before the client sees it: it can never shrink the file under our mapping
	 * (which would turn our next access into SIGBUS), nor grow it or change the seals. */
	if (fcntl(s->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		return -errno;
	write_header(s, &g, lim->model);
	s->model = lim->model;
	s->text = lim->text;
	s->ring->head = s->ring->tail = s->sq_head = lim->ring_start;
	s->doorbell_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->doorbell_fd < 0)
		return -errno;
	if (alloc_private(s, slots, lim) < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < slots; i++) {
		s->reqs[i].sess = s;
		s->reqs[i].slot = i;
		s->reqs[i].prompt = s->prompt_arena + (size_t)i * lim->prompt_capacity;
		s->reqs[i].output = s->output_arena + (size_t)i * lim->output_capacity;
	}
	return 0;
}

static int send_welcome(int sock_fd, const struct bn_welcome *w, const int *fds, int n_fds)
{
	struct iovec iov = { .iov_base = (void *)w, .iov_len = sizeof(*w) };
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (n_fds) {
		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.buf;
		msg.msg_controllen = CMSG_SPACE((size_t)n_fds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)n_fds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)n_fds * sizeof(int));
	}
	ssize_t n = sendmsg(sock_fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n < 0)
		return -errno;
	return n == (ssize_t)sizeof(*w) ? 0 : -EIO;
}

void bn_session_refuse(int sock_fd, uint32_t error)
{
	struct bn_welcome w = { .magic = BN_WELCOME_MAGIC, .abi_version = BN_ABI_VERSION,
				.error = error };
	(void)send_welcome(sock_fd, &w, NULL, 0);
}

static uint32_t check_hello(const struct bn_hello *h)
{
	if (h->magic != BN_HELLO_MAGIC)
		return BN_E_PROTOCOL;
	if (h->abi_version != BN_ABI_VERSION)
		return BN_E_VERSION;
	if (h->flags != 0)
		return BN_E_PROTOCOL;
	for (size_t i = 0; i < sizeof(h->reserved) / sizeof(h->reserved[0]); i++)
		if (h->reserved[i] != 0)
			return BN_E_PROTOCOL;
	return 0;
}

static uint32_t session_weight(const struct bn_hello *h, const struct bn_session_limits *lim)
{
	if (h->weight == 0)
		return 1;
	return h->weight < lim->max_weight ? h->weight : lim->max_weight;
}

int bn_session_handshake(struct bn_session *s, const struct bn_session_limits *lim,
			 int shutting_down)
{
	struct bn_hello hello;
	memcpy(&hello, s->rx, sizeof(hello)); /* s->rx is private: the socket copied it in */
	uint32_t err = shutting_down ? BN_E_SHUTDOWN : check_hello(&hello);
	if (err) {
		bn_session_refuse(s->sock_fd, err);
		return -(int)err;
	}
	uint32_t slots = lim->slots;
	if (hello.requested_slots && hello.requested_slots < slots)
		slots = hello.requested_slots;
	s->weight = session_weight(&hello, lim);
	int rc = create_segment(s, slots, lim);
	if (rc < 0) {
		bn_log_error("msg=\"cannot create session segment\" session=%u errno=%d", s->id, -rc);
		bn_session_refuse(s->sock_fd, BN_E_BACKEND);
		return -BN_E_BACKEND;
	}
	struct bn_welcome w = { .magic = BN_WELCOME_MAGIC, .abi_version = BN_ABI_VERSION,
				.session_id = s->id, .segment_size = s->mem_size };
	int fds[2] = { s->memfd, s->doorbell_fd };
	rc = send_welcome(s->sock_fd, &w, fds, 2);
	if (rc < 0) {
		bn_log_warn("msg=\"cannot send welcome\" session=%u errno=%d", s->id, -rc);
		return -BN_E_DISCONNECTED;
	}
	s->phase = BN_SESSION_ACTIVE;
	bn_log_info("msg=\"session open\" session=%u pid=%d uid=%u gid=%u slots=%u weight=%u segment_bytes=%zu",
		    s->id, (int)s->peer_pid, (unsigned)s->peer_uid, (unsigned)s->peer_gid, slots,
		    s->weight, s->mem_size);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Ring: copy each sqe and each request field out once, validate the private copy             */
/* ------------------------------------------------------------------------------------------ */

/* A request without BN_REQ_SEED still gets a fixed seed for its whole life (its tokens are
 * then reproducible from the daemon's logs only, not by the client). */
static uint64_t bn_random_seed(void)
{
	uint64_t seed;
	if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) == (ssize_t)sizeof(seed))
		return seed;
	return bn_now_ns() * 0x9E3779B97F4A7C15ull; /* entropy pool not ready: still varies */
}

static float read_float(const float *word)
{
	const uint32_t *w = (const uint32_t *)(const void *)word;
	uint32_t bits = bn_read_once(*w);
	float f;
	memcpy(&f, &bits, sizeof(f));
	return f;
}

/* Copies the sampling words into r->sampling; returns 0 or BN_E_INVALID. */
static uint32_t copy_sampling(const struct bn_session *s, const struct bn_slot *sl,
			      struct bn_req *r)
{
	struct bn_sampling *p = &r->sampling;
	p->temperature = read_float(&sl->temperature);
	p->top_k = bn_read_once(sl->top_k);
	p->top_p = read_float(&sl->top_p);
	p->min_p = read_float(&sl->min_p);
	p->repetition_penalty = read_float(&sl->repetition_penalty);
	p->presence_penalty = read_float(&sl->presence_penalty);
	p->frequency_penalty = read_float(&sl->frequency_penalty);
	uint64_t seed = bn_read_once(sl->seed_lo) | (uint64_t)bn_read_once(sl->seed_hi) << 32;
	p->want_logprobs = (r->flags & BN_REQ_LOGPROBS) != 0;
	p->n_logprobs = bn_read_once(sl->n_logprobs);
	/* Without BN_REQ_SEED the seed words must be zero, like any unused word. */
	if (!(r->flags & BN_REQ_SEED) && seed)
		return BN_E_INVALID;
	p->seed = r->flags & BN_REQ_SEED ? seed : bn_random_seed();
	return bn_sampling_check(p, s->logprob_capacity) < 0 ? BN_E_INVALID : 0;
}

#define TEXT_IN_FLAGS (BN_REQ_TEXT | BN_REQ_CHAT)
#define TEXT_OUT_FLAGS (BN_REQ_TEXT_OUT | BN_REQ_SPECIAL_TEXT | BN_REQ_STRIP_SPACE)
#define TEXT_FLAGS (TEXT_IN_FLAGS | BN_REQ_PARSE_SPECIAL | BN_REQ_NO_BOS | TEXT_OUT_FLAGS)

/* Text flags that mean nothing together, or for this op: 0 or BN_E_INVALID. */
static uint32_t check_text_flags(uint32_t flags, uint32_t op)
{
	uint32_t in = flags & TEXT_IN_FLAGS;
	if (in == TEXT_IN_FLAGS || ((flags & (BN_REQ_PARSE_SPECIAL | BN_REQ_NO_BOS)) &&
				    !(flags & BN_REQ_TEXT)))
		return BN_E_INVALID;
	switch (op) {
	case BN_OP_GENERATE:
		return (flags & (BN_REQ_SPECIAL_TEXT | BN_REQ_STRIP_SPACE)) &&
		       !(flags & BN_REQ_TEXT_OUT) ? BN_E_INVALID : 0;
	case BN_OP_TOKENIZE:
		return in && !(flags & ~(uint32_t)(TEXT_IN_FLAGS | BN_REQ_PARSE_SPECIAL | BN_REQ_NO_BOS))
			       ? 0 : BN_E_INVALID;
	default: /* BN_OP_DETOKENIZE */
		return flags & ~(uint32_t)(BN_REQ_SPECIAL_TEXT | BN_REQ_STRIP_SPACE) ? BN_E_INVALID : 0;
	}
}

/* Copies an id prompt and its stop ids out of the slot (lengths already checked); returns 0
 * or BN_E_TOKEN. */
static uint32_t copy_ids(struct bn_session *s, struct bn_req *r)
{
	/* The one copy of the prompt and stop ids; only the private copy is checked and used. */
	const uint32_t *src = bn_slot_prompt(s, r->slot);
	uint32_t vocab = s->model->vocab_size, bad = 0;
	for (uint32_t i = 0; i < r->n_prompt + r->n_stop; i++) {
		uint32_t t = bn_read_once(src[i]);
		r->prompt[i] = t;
		bad |= t >= vocab;
	}
	return bad ? BN_E_TOKEN : 0;
}

/* The stop ids of a text prompt (its ids come from the tokenizer, always in range). */
static uint32_t check_stops(const struct bn_session *s, const struct bn_req *r)
{
	for (uint32_t i = 0; i < r->n_stop; i++)
		if (r->prompt[r->n_prompt + i] >= s->model->vocab_size)
			return BN_E_TOKEN;
	return 0;
}

/* What every prompt is checked for first (§6.6 steps 2a and 2b): text asked of a daemon
 * without it, then an empty prompt. Returns 0 or the bn_error. */
static uint32_t check_prompt_present(const struct bn_session *s, const struct bn_req *r)
{
	if ((r->flags & TEXT_FLAGS) && !s->text_capacity)
		return BN_E_UNSUPPORTED;
	return r->n_prompt == 0 ? BN_E_EMPTY : 0;
}

/* What every prompt goes through (§6.6 steps 2a to 4): check_prompt_present, then a text
 * prompt's encoding (r->n_prompt becomes its token count) or an id prompt's length. Returns 0
 * or the bn_error that ends the request. */
static uint32_t take_prompt(struct bn_session *s, struct bn_req *r)
{
	uint32_t err = check_prompt_present(s, r);
	if (err)
		return err;
	if (r->flags & TEXT_IN_FLAGS)
		return bn_text_prompt_take(s, r);
	return (uint64_t)r->n_prompt + r->n_stop > s->prompt_capacity ? BN_E_TOO_LONG : 0;
}

/* Copies a generate request's words into r; returns 0 or the bn_error that ends it. */
static uint32_t copy_request(struct bn_session *s, struct bn_req *r)
{
	struct bn_slot *sl = bn_slot_at(s, r->slot);
	r->n_prompt = bn_read_once(sl->n_prompt);
	r->max_tokens = bn_read_once(sl->max_tokens);
	r->flags = bn_read_once(sl->flags);
	r->n_stop = bn_read_once(sl->n_stop);
	uint32_t deadline_ms = bn_read_once(sl->deadline_ms);
	r->deadline = deadline_ms ? r->t_seen + (uint64_t)deadline_ms * 1000000u : 0;
	if (bn_read_once(sl->reserved2) || (r->flags & ~BN_REQ_KNOWN_FLAGS) || r->max_tokens == 0 ||
	    check_text_flags(r->flags, BN_OP_GENERATE))
		return BN_E_INVALID;
	if (copy_sampling(s, sl, r))
		return BN_E_INVALID;
	uint32_t err = take_prompt(s, r);
	if (!err && (r->max_tokens > s->output_capacity ||
		     (uint64_t)r->n_prompt + r->max_tokens > s->model->context_length))
		err = BN_E_TOO_LONG;
	if (err)
		return err;
	err = r->flags & TEXT_IN_FLAGS ? check_stops(s, r) : copy_ids(s, r);
	r->stop = r->prompt + r->n_prompt;
	r->sample_ctx = (struct bn_sample_ctx){ .params = &r->sampling, .prompt = r->prompt,
						.n_prompt = r->n_prompt, .output = r->output };
	if (!err && (r->flags & BN_REQ_TEXT_OUT))
		err = bn_text_out_begin(r);
	return err;
}

/* A tokenize or detokenize request: its flags and n_prompt; every other request word must
 * be 0. Returns 0 or BN_E_INVALID. */
static uint32_t copy_op_request(struct bn_session *s, struct bn_req *r)
{
	struct bn_slot *sl = bn_slot_at(s, r->slot);
	r->n_prompt = bn_read_once(sl->n_prompt);
	r->flags = bn_read_once(sl->flags);
	/* max_tokens, then the 13 words from temperature to reserved2 (bytes 76..127). */
	const uint32_t *words = (const uint32_t *)(const void *)&sl->temperature;
	uint32_t nonzero = bn_read_once(sl->max_tokens);
	for (uint32_t i = 0; i < 13; i++)
		nonzero |= bn_read_once(words[i]);
	if (nonzero || (r->flags & ~BN_REQ_KNOWN_FLAGS) || check_text_flags(r->flags, r->op))
		return BN_E_INVALID;
	return 0;
}

/* The words of a request that reads a given sequence (score, classify): n_prompt, flags
 * (within `allowed`), n_logprobs and a deadline; max_tokens, the nine sampling words
 * (temperature .. seed_hi), n_stop and reserved2 must be 0. Returns 0 or BN_E_INVALID. */
static uint32_t copy_reading_words(struct bn_session *s, struct bn_req *r, uint32_t allowed)
{
	struct bn_slot *sl = bn_slot_at(s, r->slot);
	r->n_prompt = bn_read_once(sl->n_prompt);
	r->flags = bn_read_once(sl->flags);
	r->max_tokens = 0;
	r->n_stop = 0;
	uint32_t deadline_ms = bn_read_once(sl->deadline_ms);
	r->deadline = deadline_ms ? r->t_seen + (uint64_t)deadline_ms * 1000000u : 0;
	const uint32_t *words = (const uint32_t *)(const void *)&sl->temperature;
	uint32_t nonzero = bn_read_once(sl->max_tokens) | bn_read_once(sl->n_stop) |
			   bn_read_once(sl->reserved2);
	for (uint32_t i = 0; i < 9; i++)
		nonzero |= bn_read_once(words[i]);
	r->sampling = (struct bn_sampling){ .want_logprobs = (r->flags & BN_REQ_LOGPROBS) != 0,
					    .n_logprobs = bn_read_once(sl->n_logprobs) };
	if (nonzero || (r->flags & ~allowed) || check_text_flags(r->flags, BN_OP_GENERATE) ||
	    (r->sampling.n_logprobs && !r->sampling.want_logprobs) ||
	    r->sampling.n_logprobs > s->logprob_capacity)
		return BN_E_INVALID;
	return 0;
}

/* A score request: its prompt as for generate (ids, or text with its flags), n_logprobs
 * alternatives per position with LOGPROBS, a deadline. Returns 0 or the bn_error that ends
 * it. */
static uint32_t copy_score_request(struct bn_session *s, struct bn_req *r)
{
	const uint32_t allowed = BN_REQ_LOGPROBS | BN_REQ_TEXT | BN_REQ_PARSE_SPECIAL | BN_REQ_NO_BOS;
	uint32_t err = copy_reading_words(s, r, allowed);
	if (!err)
		err = take_prompt(s, r);
	if (!err && r->n_prompt > s->model->context_length)
		err = BN_E_TOO_LONG;
	if (!err && !(r->flags & BN_REQ_TEXT))
		err = copy_ids(s, r);
	r->stop = r->prompt + r->n_prompt;
	return err;
}

/* Reverses w[0 .. n). */
static void reverse_words(uint32_t *w, uint32_t n)
{
	for (uint32_t i = 0; i < n / 2; i++) {
		uint32_t t = w[i];
		w[i] = w[n - 1 - i];
		w[n - 1 - i] = t;
	}
}

/* An id classify request's words (§6.12): n_labels, n_prefix, the label lengths, the prefix,
 * the labels. Copied once, then rotated so the ids come first and the label lengths last, as
 * a text request lays them out (bn_text_classify_take). Returns 0 or the bn_error. */
static uint32_t copy_classify_ids(struct bn_session *s, struct bn_req *r)
{
	uint32_t n = r->n_prompt;
	if (n > s->prompt_capacity)
		return BN_E_TOO_LONG;
	const uint32_t *src = bn_slot_prompt(s, r->slot);
	for (uint32_t i = 0; i < n; i++)
		r->prompt[i] = bn_read_once(src[i]);
	if (n < 2 || r->prompt[0] > n - 2 || r->prompt[1] > n - 2)
		return BN_E_INVALID;
	uint32_t n_labels = r->prompt[0], n_prefix = r->prompt[1], head = 2 + n_labels;
	uint64_t sum = n_prefix;
	for (uint32_t i = 2; i < head; i++)
		sum += r->prompt[i];
	if (head + sum != n)
		return BN_E_INVALID;
	/* Rotating left by `head` is three reversals: [head][ids] -> [ids][head]. */
	reverse_words(r->prompt, head);
	reverse_words(r->prompt + head, n - head);
	reverse_words(r->prompt, n);
	for (uint32_t i = 0; i < n - head; i++)
		if (r->prompt[i] >= s->model->vocab_size)
			return BN_E_TOKEN;
	r->n_prompt = n_prefix;
	r->n_labels = n_labels;
	r->labels = r->prompt + n_prefix;
	r->label_len = r->prompt + n - n_labels;
	return 0;
}

/* What the labels add up to, against the slot's and the context's room. */
static uint32_t check_labels(const struct bn_session *s, struct bn_req *r)
{
	if (r->n_prompt == 0 || r->n_labels == 0)
		return BN_E_EMPTY;
	uint64_t total = 0;
	r->longest_label = 0;
	for (uint32_t i = 0; i < r->n_labels; i++) {
		if (r->label_len[i] == 0)
			return BN_E_EMPTY;
		total += r->label_len[i];
		if (r->label_len[i] > r->longest_label)
			r->longest_label = r->label_len[i];
	}
	if (total > s->output_capacity ||
	    (uint64_t)r->n_prompt + r->longest_label > s->model->context_length)
		return BN_E_TOO_LONG;
	r->n_label_tokens = (uint32_t)total;
	return 0;
}

/* A classify request (§6.12): a prefix and labels as ids, or as text (TEXT, PARSE_SPECIAL and
 * NO_BOS apply to the prefix), a deadline. Returns 0 or the bn_error that ends it. */
static uint32_t copy_classify_request(struct bn_session *s, struct bn_req *r)
{
	const uint32_t allowed = BN_REQ_TEXT | BN_REQ_PARSE_SPECIAL | BN_REQ_NO_BOS;
	uint32_t err = copy_reading_words(s, r, allowed);
	if (!err)
		err = check_prompt_present(s, r);
	if (!err)
		err = r->flags & BN_REQ_TEXT ? bn_text_classify_take(s, r) : copy_classify_ids(s, r);
	if (!err)
		err = check_labels(s, r);
	r->stop = r->prompt + r->n_prompt;
	return err;
}

static int op_offered(const struct bn_session *s, uint32_t op)
{
	return op == BN_OP_GENERATE ||
	       ((op == BN_OP_TOKENIZE || op == BN_OP_DETOKENIZE) && s->text_capacity) ||
	       (op == BN_OP_SCORE && s->model->can_score) ||
	       (op == BN_OP_CLASSIFY && s->model->can_classify);
}

static void reset_response(struct bn_session *s, struct bn_req *r)
{
	struct bn_slot *sl = bn_slot_at(s, r->slot);
	bn_write_once(sl->status, BN_STATUS_NONE);
	bn_write_once(sl->error, 0);
	if (s->text_capacity) {
		bn_write_once(sl->n_text, 0);
		bn_write_once(sl->prompt_tokens, 0);
	}
	bn_store_release(sl->n_tokens, 0);
	r->n_out = 0;
	r->n_text = 0;
	r->running = 0;
	r->n_prefilled = 0;
	r->n_stop = 0;
	r->deadline = 0;
	r->next = NULL;
}

/* A request that ends without the scheduler (a request error, a shutdown, a tokenize or
 * detokenize op) ends only after the snapshot's head store: a client that sees DONE and queues
 * the slot again must find its ring entry free. */
static void end_after_snapshot(struct bn_session *s, struct bn_req *r, uint32_t status,
			       uint32_t error)
{
	r->end_status = status;
	r->end_error = error;
	s->ending[s->n_ending++] = r->slot; /* at most once per slot: it is in flight */
}

/* Runs a tokenize or detokenize request to its end. */
static void run_op(struct bn_session *s, struct bn_req *r)
{
	uint32_t err = r->op == BN_OP_TOKENIZE ? bn_text_tokenize_op(s, r)
					       : bn_text_detokenize_op(s, r);
	bn_req_finish(r, err ? BN_STATUS_ERROR : BN_STATUS_COMPLETE, err);
}

static void end_requests_of_snapshot(struct bn_session *s)
{
	for (uint32_t i = 0; i < s->n_ending; i++) {
		struct bn_req *r = &s->reqs[s->ending[i]];
		if (r->end_status == BN_STATUS_NONE)
			run_op(s, r);
		else
			bn_req_finish(r, r->end_status, r->end_error);
	}
	s->n_ending = 0;
}

/* One sqe, already copied. Returns 0 or -BN_E_PROTOCOL. */
static int take_sqe(struct bn_session *s, struct bn_sched *sched, const struct bn_sqe *e,
		    int shutting_down)
{
	if (e->reserved[0] || e->reserved[1] || e->slot >= s->slot_count)
		return -BN_E_PROTOCOL;
	struct bn_req *r = &s->reqs[e->slot];
	if (r->in_flight)
		return -BN_E_PROTOCOL; /* queued twice: the client lost track of its slots */
	r->in_flight = 1;
	s->n_in_flight++;
	r->t_seen = bn_now_ns();
	r->t_started = r->t_first_token = r->t_last_token = 0;
	r->op = e->op;
	bn_stats.requests_submitted++;
	s->counters.submitted++;
	reset_response(s, r);
	int scheduled = e->op == BN_OP_GENERATE || e->op == BN_OP_SCORE ||
			e->op == BN_OP_CLASSIFY;
	uint32_t err = !op_offered(s, e->op)	     ? BN_E_UNSUPPORTED
		       : e->op == BN_OP_GENERATE ? copy_request(s, r)
		       : e->op == BN_OP_SCORE	 ? copy_score_request(s, r)
		       : e->op == BN_OP_CLASSIFY ? copy_classify_request(s, r)
						 : copy_op_request(s, r);
	if (err)
		end_after_snapshot(s, r, BN_STATUS_ERROR, err);
	else if (shutting_down)
		end_after_snapshot(s, r, BN_STATUS_SHUTDOWN, 0);
	else if (!scheduled)
		end_after_snapshot(s, r, BN_STATUS_NONE, 0); /* runs then */
	else
		bn_sched_enqueue(sched, r);
	return 0;
}

/* The session broke the protocol at entry `from`: the slots of that entry and of every entry
 * queued behind it, which the client believes submitted, end with ERROR/PROTOCOL too (requests
 * already taken are ended by the scheduler when the session closes). Nothing is copied. */
static void end_untaken(struct bn_session *s, uint32_t from, uint32_t tail)
{
	for (uint32_t c = from; c != tail; c++) {
		uint32_t slot = bn_read_once(s->sqes[bn_ring_index(c, s->sq_mask + 1)].slot);
		if (slot >= s->slot_count || s->reqs[slot].in_flight)
			continue;
		struct bn_req *r = &s->reqs[slot];
		r->in_flight = 1;
		s->n_in_flight++;
		r->t_seen = bn_now_ns();
		r->t_started = r->t_first_token = 0;
		reset_response(s, r);
		bn_req_finish(r, BN_STATUS_ERROR, BN_E_PROTOCOL);
	}
}

int bn_session_poll_ring(struct bn_session *s, struct bn_sched *sched, int shutting_down)
{
	/* Acquire pairs with the client's store-release of tail: the sqes and slot contents it
	 * wrote before publishing are visible once we see the tail. Read once: the client may
	 * move it again meanwhile, and we act only on this snapshot. */
	uint32_t tail = bn_load_acquire(s->ring->tail);
	uint32_t queued = bn_ring_count(s->sq_head, tail);
	if (queued == 0)
		return 0;
	if (!bn_ring_sane(s->sq_head, tail, s->sq_mask + 1))
		return -BN_E_PROTOCOL; /* a tail beyond head + entries was never produced honestly */
	for (uint32_t i = 0; i < queued; i++) {
		const struct bn_sqe *src = &s->sqes[bn_ring_index(s->sq_head + i, s->sq_mask + 1)];
		struct bn_sqe e = {
			.op = bn_read_once(src->op),
			.slot = bn_read_once(src->slot),
			.reserved = { bn_read_once(src->reserved[0]), bn_read_once(src->reserved[1]) },
		};
		if (take_sqe(s, sched, &e, shutting_down) < 0) {
			end_requests_of_snapshot(s);
			end_untaken(s, s->sq_head + i, tail);
			return -BN_E_PROTOCOL;
		}
	}
	s->sq_head = tail;
	/* Release: our copies of the entries are complete before the client may overwrite them. */
	bn_store_release(s->ring->head, tail);
	end_requests_of_snapshot(s);
	return (int)queued;
}

void bn_session_set_need_wakeup(struct bn_session *s, int on)
{
	bn_write_once(s->ring->flags, on ? BN_SQ_NEED_WAKEUP : 0u);
}

void bn_session_set_daemon_flags(struct bn_session *s, uint32_t flags)
{
	if (s->hdr)
		bn_write_once(s->hdr->daemon_flags, flags);
}

/* ------------------------------------------------------------------------------------------ */
/* Responses                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* Shared words are stored with integer atomics (which do not take floats): as their bits,
 * through a word view of the record. */
static void write_logprob(struct bn_logprob *dst, uint32_t token, float logprob)
{
	uint32_t bits, *words = (uint32_t *)(void *)dst;
	memcpy(&bits, &logprob, sizeof(bits));
	bn_write_once(words[0], token);
	bn_write_once(words[1], bits);
}

void bn_req_write_logprobs(struct bn_req *r, uint32_t index, const struct bn_sample_out *o)
{
	struct bn_session *s = r->sess;
	uint32_t stride = 1u + s->logprob_capacity;
	struct bn_logprob *dst = (struct bn_logprob *)((uint8_t *)bn_slot_at(s, r->slot) +
						       s->logprob_offset) + (size_t)index * stride;
	write_logprob(&dst[0], o->token, o->logprob);
	for (uint32_t i = 0; i < o->n_top && i < s->logprob_capacity; i++)
		write_logprob(&dst[1 + i], o->top[i].token, o->top[i].logprob);
}

int bn_req_publish_token(struct bn_req *r, uint32_t token)
{
	struct bn_session *s = r->sess;
	/* The text first: n_tokens, stored below, then covers its piece end too. */
	int rc = r->stream ? bn_text_out_token(r, token) : 0;
	bn_write_once(bn_slot_output(s, r->slot)[r->n_out], token);
	r->output[r->n_out] = token;
	r->n_out++;
	r->sample_ctx.n_output = r->n_out;
	s->counters.tokens++;
	/* Release: the token store above is visible before the count that covers it. */
	bn_store_release(bn_slot_at(s, r->slot)->n_tokens, r->n_out);
	/* Release: the count is visible before the event that announces it. */
	bn_store_release(bn_slot_at(s, r->slot)->events, ++r->events);
	bn_stats.tokens_generated++;
	bn_stats_count_tokens(1, bn_now_ns());
	return rc;
}

void bn_req_write_record(struct bn_req *r, uint32_t index, const struct bn_sample_out *o)
{
	bn_req_write_logprobs(r, index, o);
	bn_write_once(bn_slot_output(r->sess, r->slot)[index], o->token);
}

void bn_req_publish_score(struct bn_req *r, uint32_t index, const struct bn_sample_out *o)
{
	struct bn_session *s = r->sess;
	bn_req_write_record(r, index, o);
	r->n_out = index + 1;
	/* Release: the records and the token are visible before the count that covers them. */
	bn_store_release(bn_slot_at(s, r->slot)->n_tokens, r->n_out);
	/* Release: the count is visible before the event that announces it. */
	bn_store_release(bn_slot_at(s, r->slot)->events, ++r->events);
}

static void wake(uint32_t *word)
{
	bn_stats.futex_wakes++;
	(void)bn_futex_wake_all(word);
}

void bn_req_wake_stream_waiter(struct bn_req *r)
{
	struct bn_slot *sl = bn_slot_at(r->sess, r->slot);
	/* The caller's full fence ordered our events stores before this load. The client stores
	 * `waiters` before FUTEX_WAIT, whose full barrier precedes the kernel's read of events.
	 * So either the kernel sees the new value (no sleep) or we see the flag (wake). */
	if (bn_read_once(sl->waiters) & BN_WAIT_TOKENS)
		wake(&sl->events);
}

void bn_req_finish(struct bn_req *r, uint32_t status, uint32_t error)
{
	struct bn_session *s = r->sess;
	struct bn_slot *sl = bn_slot_at(s, r->slot);
	uint64_t now = bn_now_ns();
	bn_text_out_end(r);
	bn_write_once(sl->error, error);
	bn_write_once(sl->status, status);
	bn_write_once(sl->queue_ns, r->t_started ? r->t_started - r->t_seen : 0);
	bn_write_once(sl->first_token_ns, r->t_first_token ? r->t_first_token - r->t_seen : 0);
	bn_write_once(sl->total_ns, now - r->t_seen);
	bn_write_once(sl->n_tokens, r->n_out);
	/* Release: every response store above is visible before DONE. */
	bn_store_release(sl->state, BN_SLOT_DONE);
	/* After DONE, so a waiter that read the old events value cannot have missed DONE. */
	bn_store_release(sl->events, ++r->events);
	/* Full fence: the events store is ordered before the load of `waiters` (the other half
	 * is the kernel's barrier in FUTEX_WAIT before it compares events). */
	bn_smp_mb();
	if (bn_read_once(sl->waiters))
		wake(&sl->events);
	r->in_flight = 0;
	s->n_in_flight--;
	s->counters.finished++;
	bn_stats.requests_finished[status < BN_STATS_STATUSES ? status : 0]++;
	if (status == BN_STATUS_ERROR) {
		s->counters.errors++;
		bn_stats_count_error(error);
	}
}

int bn_req_cancel_requested(const struct bn_req *r)
{
	return bn_read_once(bn_slot_at(r->sess, r->slot)->cancel) != 0;
}
