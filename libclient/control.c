/* SPDX-License-Identifier: MIT */
/*
 * control.c — the control socket (§10): STATS, the client's counters, the vocabulary fetched
 * from the daemon; and the names of errors and statuses.
 * The protocol is shm/PROTOCOL.md; section numbers in comments refer to it.
 */
#define _GNU_SOURCE
#include "client_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ */
/* Control socket and counters                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* Reads and drops `len` payload bytes that do not fit the caller's buffer. */
static int skip_bytes(int fd, size_t len)
{
	char sink[4096];
	while (len) {
		size_t k = len < sizeof(sink) ? len : sizeof(sink);
		int rc = bn_sock_recv_all(fd, sink, k);
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
static int ctl_request(struct bn_client *c, uint32_t op, const void *extra, size_t extra_len,
		       struct bn_ctl_reply *r, int *fd)
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
	int rc = bn_sock_send_all(c->sock, &q, sizeof(q));
	if (rc == 0 && extra_len)
		rc = bn_sock_send_all(c->sock, extra, extra_len);
	if (rc < 0)
		return rc;
	ssize_t n;
	do
		n = recvmsg(c->sock, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return n == 0 ? -BN_E_DISCONNECTED : -errno;
	*fd = take_fd(&msg);
	rc = bn_sock_recv_all(c->sock, (uint8_t *)r + n, sizeof(*r) - (size_t)n);
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
	int rc = ctl_request(c, op, NULL, 0, r, fd);
	pthread_mutex_unlock(&c->lock);
	if (rc == -BN_E_DISCONNECTED)
		__atomic_store_n(&c->dead, 1, __ATOMIC_RELAXED);
	return rc;
}

static int stats_exchange(struct bn_client *c, char *buf, size_t cap)
{
	struct bn_ctl_reply r;
	int fd;
	int rc = ctl_request(c, BN_CTL_STATS, NULL, 0, &r, &fd);
	if (rc < 0)
		return rc;
	if (fd >= 0)
		close(fd); /* none belongs to a STATS reply */
	size_t keep = cap ? (r.length < cap - 1 ? r.length : cap - 1) : 0;
	rc = bn_sock_recv_all(c->sock, buf, keep);
	if (rc == 0)
		rc = skip_bytes(c->sock, r.length - keep);
	if (rc < 0)
		return rc;
	if (cap)
		buf[keep] = '\0';
	return r.error ? -(int)r.error : (int)r.length;
}

int bn_client_ctl_text(struct bn_client *c, uint32_t op, const void *extra, size_t extra_len,
		       char **text, uint32_t *len, uint32_t *error)
{
	struct bn_ctl_reply r;
	int fd;
	*text = NULL;
	pthread_mutex_lock(&c->lock);
	int rc = ctl_request(c, op, extra, extra_len, &r, &fd);
	if (rc == 0 && fd >= 0)
		close(fd); /* none belongs to a text reply */
	if (rc == 0 && !(*text = malloc((size_t)r.length + 1)))
		rc = skip_bytes(c->sock, r.length) ? -BN_E_DISCONNECTED : -ENOMEM;
	if (rc == 0 && (rc = bn_sock_recv_all(c->sock, *text, r.length)) == 0) {
		(*text)[r.length] = 0;
		*len = r.length;
		*error = r.error;
	}
	pthread_mutex_unlock(&c->lock);
	if (rc < 0) {
		free(*text);
		*text = NULL;
	}
	if (rc == -BN_E_DISCONNECTED)
		__atomic_store_n(&c->dead, 1, __ATOMIC_RELAXED);
	return rc;
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
	case BN_E_GRAMMAR:
		return "BN_E_GRAMMAR: the grammar is not valid, or asks for what cannot be enforced";
	case BN_E_GRAMMAR_LIMIT:
		return "BN_E_GRAMMAR_LIMIT: the grammar is over a limit (size, nesting, states, "
		       "compile time)";
	case BN_E_GRAMMAR_STUCK:
		return "BN_E_GRAMMAR_STUCK: no token of the vocabulary continues the output inside "
		       "the grammar";
	case BN_E_MODEL_NOT_FOUND:
		return "BN_E_MODEL_NOT_FOUND: the daemon serves no model of that name";
	case BN_E_MODEL_LOAD:
		return "BN_E_MODEL_LOAD: the model could not be loaded (its file failed, or it does "
		       "not fit the daemon's memory budget)";
	case BN_E_MODEL_UNLOADED:
		return "BN_E_MODEL_UNLOADED: the request's model was unloaded before it ended";
	case BN_E_DENIED:
		return "BN_E_DENIED: only root or the daemon's user may load, unload or reload models";
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
