/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "session.h"

#include "bitnet_client.h"
#include "common/clock.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
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
	s->tenant.id = id;
	s->tenant.uid = (uint32_t)peer->uid;
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
	for (uint32_t i = 0; s->reqs && i < s->seg.slot_count; i++)
		bn_text_stream_free(s->reqs[i].stream); /* every request ends first: a guard */
	bn_session_grammars_free(s);
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
	/* A daemon that compiles grammars takes the longest grammar text in one op (§6.13): the
	 * region sized for the context alone held about half of it with LLaMA-3's vocabulary. The
	 * pages are the memfd's and cost nothing until a client writes them. */
	uint32_t grammar_op = (uint32_t)sizeof(struct bn_grammar_head) + BN_GRAMMAR_TEXT_MAX;
	if (text && lim->grammars && lim->grammars->vocab && text < grammar_op)
		text = align64(grammar_op);
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
			 const struct bn_session_limits *lim)
{
	const struct bn_model_desc *m = lim->model;
	struct bn_shm_header *h = (struct bn_shm_header *)s->mem;
	*h = *layout;
	h->magic = BN_SHM_MAGIC;
	h->abi_version = BN_ABI_VERSION;
	h->features = BN_FEAT_STREAMING | BN_FEAT_PARAMS | BN_FEAT_LOGPROBS |
		      (layout->slot_text_capacity ? BN_FEAT_TEXT : 0) | BN_FEAT_COMPUTE;
	/* An embedding model embeds and nothing else (bn_session_generates). */
	if (!m->file_pooling)
		h->features |= (m->can_score ? BN_FEAT_SCORE : 0) |
			       (m->can_classify ? BN_FEAT_CLASSIFY : 0) | BN_FEAT_SPECULATE |
			       (layout->slot_text_capacity && lim->grammars && lim->grammars->vocab
					? BN_FEAT_GRAMMAR : 0);
	else
		h->features |= BN_FEAT_EMBEDDING_MODEL;
	h->features |= m->pooling ? BN_FEAT_EMBED : 0;
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
	s->seg.slots = s->mem + h->slot_offset;
}

/* The daemon's private copies of the layout, read back from nothing the client can write. */
static void keep_layout(struct bn_session *s, const struct bn_shm_header *g)
{
	s->seg.slot_count = g->slot_count;
	s->sq_mask = g->sq_entries - 1;
	s->seg.slot_size = g->slot_size;
	s->seg.prompt_offset = g->slot_prompt_offset;
	s->seg.prompt_capacity = g->slot_prompt_capacity;
	s->seg.output_offset = g->slot_output_offset;
	s->seg.output_capacity = g->slot_output_capacity;
	s->seg.logprob_offset = g->slot_logprob_offset;
	s->seg.logprob_capacity = g->slot_logprob_capacity;
	s->seg.text_offset = g->slot_text_offset;
	s->seg.text_capacity = g->slot_text_capacity;
	s->seg.piece_offset = g->slot_piece_offset;
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
	write_header(s, &g, lim);
	s->seg.model = lim->model;
	s->seg.text = lim->text;
	s->grammar_svc = lim->grammars;
	s->grammars_off = lim->grammars_off;
	s->max_grammars = lim->max_grammars;
	s->ring->head = s->ring->tail = s->sq_head = lim->ring_start;
	s->doorbell_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->doorbell_fd < 0)
		return -errno;
	if (alloc_private(s, slots, lim) < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < slots; i++) {
		s->reqs[i].tenant = &s->tenant;
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
	s->tenant.weight = session_weight(&hello, lim);
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
	s->tenant.admitting = 1;
	bn_log_info("msg=\"session open\" session=%u pid=%d uid=%u gid=%u slots=%u weight=%u segment_bytes=%zu",
		    s->id, (int)s->peer_pid, (unsigned)s->peer_uid, (unsigned)s->peer_gid, slots,
		    s->tenant.weight, s->mem_size);
	return 0;
}
