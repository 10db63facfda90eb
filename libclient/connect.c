/* SPDX-License-Identifier: MIT */
/*
 * connect.c — connecting (shm/PROTOCOL.md §2 handshake, §3 segment), disconnecting, the model
 * the header describes.
 * The protocol is shm/PROTOCOL.md; section numbers in comments refer to it.
 */
#define _GNU_SOURCE
#include "client_internal.h"


#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

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

int bn_sock_send_all(int fd, const void *buf, size_t len)
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

int bn_sock_recv_all(int fd, void *buf, size_t len)
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

/* The hello, with the model's name record after it when one is named (§2.2, §15.1). */
static int send_hello(struct bn_client *c, uint32_t slots, uint32_t weight, const char *model)
{
	struct {
		struct bn_hello hello;
		struct bn_model_name name;
	} msg = { .hello = { .magic = BN_HELLO_MAGIC, .abi_version = BN_ABI_VERSION,
			     .requested_slots = slots, .weight = weight } };
	size_t len = sizeof(msg.hello);
	if (model && *model) {
		msg.hello.flags = BN_HELLO_MODEL;
		memcpy(msg.name.name, model, strlen(model));
		len = sizeof(msg);
	}
	_Static_assert(sizeof(msg) == sizeof(struct bn_hello) + sizeof(struct bn_model_name),
		       "the name follows the hello at once");
	return bn_sock_send_all(c->sock, &msg, len);
}

static int handshake(struct bn_client *c, uint32_t slots, uint32_t weight, const char *model)
{
	/* A daemon that refuses at accept (busy, shutting down) may close before our hello
	 * lands; its welcome still waits in our receive buffer and says why. */
	int sent = send_hello(c, slots, weight, model);
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
	if (rc == 0 && (c->layout.features & BN_FEAT_MODELS))
		memcpy(c->served_name, c->layout.served_name, sizeof(c->layout.served_name));
	return rc;
}

/* A model name as the protocol takes it (shm/bitnet_shm.h bn_model_name). */
int bn_client_model_name_ok(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n >= BN_MODEL_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char ch = name[i];
		int alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			    (ch >= '0' && ch <= '9');
		if (!alnum && (i == 0 || !strchr("._:@+/-", ch)))
			return 0;
	}
	return 1;
}

int bn_connect(const char *socket_path, uint32_t slots, struct bn_client **out)
{
	return bn_connect_weighted(socket_path, slots, 0, out);
}

int bn_connect_weighted(const char *socket_path, uint32_t slots, uint32_t weight,
			struct bn_client **out)
{
	return bn_connect_model(socket_path, NULL, slots, weight, out);
}

int bn_connect_model(const char *socket_path, const char *model, uint32_t slots, uint32_t weight,
		     struct bn_client **out)
{
	if (model && *model && !bn_client_model_name_ok(model))
		return -BN_E_INVALID;
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
		rc = handshake(c, slots, weight, model);
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

int bn_model_served_name(struct bn_client *c, char *out, size_t cap)
{
	if (!out || cap == 0)
		return -BN_E_INVALID;
	snprintf(out, cap, "%s", c->served_name);
	return c->served_name[0] ? 0 : -BN_E_UNSUPPORTED;
}

int bn_model_compute(struct bn_client *c, uint32_t *lm_head, uint32_t *decode_layout)
{
	const struct bn_shm_header *h = &c->layout;
	int told = (h->features & BN_FEAT_COMPUTE) != 0;
	*lm_head = told ? h->lm_head : BN_HEAD_NONE;
	*decode_layout = told ? h->decode_layout : BN_DECODE_LAYOUT_NONE;
	return told ? 0 : -BN_E_UNSUPPORTED;
}
