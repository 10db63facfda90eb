/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "control.h"

#include "backends/backend.h"
#include "bitnet_client.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/stats.h"
#include "grammar/grammar.h"
#include "session.h"
#include "textprep.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define REPLY_SEND_TIMEOUT_NS (100ull * 1000000u)

/* ------------------------------------------------------------------------------------------ */
/* The vocabulary, opened at start-up                                                          */
/* ------------------------------------------------------------------------------------------ */

/* One line for each decision the file did not make itself (shm/bitnet_shm.h BN_VOCAB_*). */
static void log_choice(const struct bn_vocab_choice *c)
{
	if (c->flags & BN_VOCAB_PRE_DETECTED)
		bn_log_info("msg=\"tokenizer.ggml.pre is missing; the vocabulary is LLaMA-3's, so its "
			    "pre-tokenizer is used\" pre_tokenizer=%s",
			    bn_pre_tokenizer_name(c->pre_tokenizer));
	if (c->flags & BN_VOCAB_CHAT_PLACEHOLDER)
		bn_log_info("msg=\"the file's chat template is the BitNet 2B4T converter's placeholder; "
			    "using the format the model was trained on\" chat_template=bitnet");
	if (c->chat_template == BN_CHAT_UNKNOWN)
		bn_log_warn("msg=\"the file's chat template is not one bitnetd recognises; chat "
			    "needs --chat-template (" BN_CHAT_TEMPLATE_NAMES ") or a per-request "
			    "choice\"");
	char eog[16 * 11] = "";
	size_t at = 0;
	for (uint32_t i = 0; i < c->n_eog; i++)
		at += (size_t)snprintf(eog + at, sizeof(eog) - at, i ? ",%u" : "%u", c->eog[i]);
	bn_log_info("msg=\"vocabulary loaded\" kind=%s pre_tokenizer=%s chat_template=%s eog_ids=%s",
		    c->kind == BN_VOCAB_SPM ? "spm" : c->kind == BN_VOCAB_BPE ? "gpt2" : "other",
		    bn_pre_tokenizer_name(c->pre_tokenizer), bn_chat_template_name(c->chat_template),
		    eog);
}

static void log_text(const struct bn_control *c, int rc)
{
	if (rc < 0)
		bn_log_error("msg=\"serving without text requests\" error=%d", rc);
	else if (!c->text.vocab)
		bn_log_info("msg=\"the vocabulary cannot encode text: no text requests\"");
	else
		bn_log_info("msg=\"text requests on\" max_piece_bytes=%u", c->text.piece_bound);
}

/* Text requests get their tokenizer from the payload BN_CTL_TOKENIZER serves: the bytes every
 * client gets, so the daemon's ids are theirs (textprep.c builds it so too). */
static void open_text(struct bn_control *c)
{
	size_t size = c->vocab.tokenizer_bytes;
	void *p = mmap(NULL, size, PROT_READ, MAP_SHARED, c->vocab.tokenizer_fd, 0);
	int rc = p == MAP_FAILED ? -errno : bn_text_service_open(&c->text, p, size);
	if (p != MAP_FAILED)
		munmap(p, size);
	log_text(c, rc);
}

/* What textprep built, taken: the vocabulary checked against the model's size as
 * bn_vocab_serve_open would have, the text service and the grammar engine's vocabulary. */
static int adopt(struct bn_control *c, struct bn_text_prep *p, uint32_t n_vocab, char *err)
{
	bn_text_prep_finish(p);
	int rc = p->vocab_rc;
	snprintf(err, BN_VOCAB_ERR_LEN, "%s", p->err);
	if (rc == 1 && n_vocab) {
		struct bn_vocab_head head;
		void *m = mmap(NULL, sizeof(head), PROT_READ, MAP_SHARED, p->vocab.tokenizer_fd, 0);
		if (m != MAP_FAILED) {
			memcpy(&head, m, sizeof(head));
			munmap(m, sizeof(head));
		}
		if (m == MAP_FAILED || head.n_tokens != n_vocab) {
			snprintf(err, BN_VOCAB_ERR_LEN, "%s: the vocabulary has %u tokens, the model %u",
				 p->path, m == MAP_FAILED ? 0 : head.n_tokens, n_vocab);
			rc = -1;
		}
	}
	if (rc != 1)
		return rc;
	c->vocab = p->vocab;
	p->vocab.vocab_fd = p->vocab.tokenizer_fd = -1;
	if (p->text_rc == 0) {
		c->text = p->text;
		memset(&p->text, 0, sizeof(p->text));
		c->grammar_vocab = p->grammar;
		p->grammar = NULL;
	}
	return 1;
}

void bn_control_open(struct bn_control *c, const char *path, const char *pre_tokenizer,
		     const char *chat_template, const struct bn_model_desc *model,
		     struct bn_text_prep *prep)
{
	memset(c, 0, sizeof(*c));
	c->vocab.vocab_fd = c->vocab.tokenizer_fd = -1;
	if (!path || model->kind == BN_BACKEND_LOOPBACK)
		return;
	char err[BN_VOCAB_ERR_LEN];
	struct bn_vocab_options o = { .pre_tokenizer = pre_tokenizer,
				      .chat_template = chat_template };
	int prepared = prep && prep->state != BN_TEXT_PREP_NONE;
	int rc = prepared ? adopt(c, prep, model->vocab_size, err)
			  : bn_vocab_serve_open(path, model->vocab_size, &o, &c->vocab, err);
	if (rc < 0)
		bn_log_error("msg=\"serving without a vocabulary\" error=\"%s\"", err);
	else if (rc == 0)
		bn_log_info("msg=\"the model file has no vocabulary\" model=\"%s\"", path);
	else
		log_choice(&c->vocab.choice);
	if (rc == 1 && prepared) {
		bn_log_debug("msg=\"text side built beside the backend\" ms=%.1f",
			     (double)prep->ns / 1e6);
		log_text(c, prep->text_rc);
	} else if (rc == 1) {
		open_text(c);
	}
}

void bn_control_close(struct bn_control *c)
{
	bn_vocab_served_close(&c->vocab);
	bn_text_service_close(&c->text);
	bn_grammar_vocab_unref(c->grammar_vocab);
	c->grammar_vocab = NULL;
}

/* The payload behind fd (bytes long) equals the one behind other's. */
static int same_payload(int fd, uint32_t bytes, int other, uint32_t other_bytes)
{
	if ((fd < 0) != (other < 0) || bytes != other_bytes)
		return 0;
	if (fd < 0 || bytes == 0)
		return 1;
	void *a = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
	void *b = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, other, 0);
	int same = a != MAP_FAILED && b != MAP_FAILED && memcmp(a, b, bytes) == 0;
	if (a != MAP_FAILED)
		munmap(a, bytes);
	if (b != MAP_FAILED)
		munmap(b, bytes);
	return same;
}

int bn_control_same(const struct bn_control *a, const struct bn_control *b)
{
	return same_payload(a->vocab.vocab_fd, a->vocab.vocab_bytes, b->vocab.vocab_fd,
			    b->vocab.vocab_bytes) &&
	       same_payload(a->vocab.tokenizer_fd, a->vocab.tokenizer_bytes, b->vocab.tokenizer_fd,
			    b->vocab.tokenizer_bytes);
}

/* ------------------------------------------------------------------------------------------ */
/* Replies                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* Sends a control reply and its payload. STATS grows with the sessions (hundreds of KiB with
 * thousands) and can exceed the socket's send buffer, where one non-blocking sendmsg sends only
 * part: so raise SO_SNDBUF to fit (best effort, the kernel caps it at net.core.wmem_max), then
 * give a client that is reading REPLY_SEND_TIMEOUT_NS in all to take the rest. One that is not
 * reading stalls the loop no longer than that. Returns 0, or -1 when the reply did not go. */
int bn_control_send(int fd, struct bn_ctl_reply *head, const void *body, size_t len)
{
	size_t total = sizeof(*head) + len;
	int sndbuf = 0;
	socklen_t optlen = sizeof(sndbuf);
	if (total <= INT_MAX / 2 && getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &optlen) == 0 &&
	    (size_t)sndbuf < total) {
		int want = (int)total;
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof(want));
	}
	struct iovec iov[2] = { { head, sizeof(*head) }, { (void *)body, len } };
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };
	uint64_t deadline = 0;
	for (;;) {
		ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -1;
		size_t done = n > 0 ? (size_t)n : 0;
		while (msg.msg_iovlen && done >= msg.msg_iov->iov_len) {
			done -= msg.msg_iov->iov_len;
			msg.msg_iov++;
			msg.msg_iovlen--;
		}
		if (!msg.msg_iovlen)
			return 0;
		msg.msg_iov->iov_base = (char *)msg.msg_iov->iov_base + done;
		msg.msg_iov->iov_len -= done;
		uint64_t now = bn_now_ns();
		if (!deadline)
			deadline = now + REPLY_SEND_TIMEOUT_NS;
		if (now >= deadline)
			return -1;
		struct pollfd pfd = { .fd = fd, .events = POLLOUT };
		if (poll(&pfd, 1, (int)((deadline - now + 999999) / 1000000)) < 0 && errno != EINTR)
			return -1;
	}
}

/* The STATS text: the gauges the caller filled in, one row per session in the table. */
static long render_stats(struct bn_stats_text *t, struct bn_stats_view *v,
			 struct bn_session *const *sessions, uint32_t n_sessions)
{
	v->sessions_open = n_sessions;
	v->n_sessions = n_sessions;
	size_t n = n_sessions ? n_sessions : 1;
	uint32_t *ids = malloc(2 * n * sizeof(*ids)); /* ids, then uids */
	const struct bn_session_counters **counters = malloc(n * sizeof(*counters));
	long len = -ENOMEM;
	if (ids && counters) {
		for (uint32_t i = 0; i < n_sessions; i++) {
			ids[i] = sessions[i]->id;
			ids[n + i] = (uint32_t)sessions[i]->peer_uid;
			counters[i] = &sessions[i]->counters;
		}
		v->session_ids = ids;
		v->session_uids = ids + n;
		v->session_counters = counters;
		len = bn_stats_render(&t->buf, &t->cap, v);
	}
	free(ids);
	free(counters);
	return len;
}

int bn_control_reply_stats(struct bn_stats_text *t, int sock_fd, uint32_t session_id,
			   struct bn_stats_view *v, struct bn_session *const *sessions,
			   uint32_t n_sessions)
{
	struct bn_ctl_reply head = { .magic = BN_CTL_REPLY_MAGIC, .op = BN_CTL_STATS };
	long len = render_stats(t, v, sessions, n_sessions);
	if (len < 0) {
		bn_log_warn("msg=\"stats not rendered: out of memory\" session=%u", session_id);
		head.error = BN_E_AGAIN;
		len = 0;
	}
	head.length = (uint32_t)len;
	/* A client that does not read its replies cannot stall the loop: it loses the session. */
	return bn_control_send(sock_fd, &head, t->buf, (size_t)len);
}

/* BN_CTL_VOCAB and BN_CTL_TOKENIZER: the reply head and the sealed memfd in one sendmsg; the
 * payload itself never crosses the socket, so its size cannot stall the loop
 * (shm/PROTOCOL.md §10.3). */
int bn_control_reply_vocab(const struct bn_control *c, int sock_fd, uint32_t op)
{
	struct bn_ctl_reply head = { .magic = BN_CTL_REPLY_MAGIC, .op = op };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { &head, sizeof(head) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	int fd = op == BN_CTL_VOCAB ? c->vocab.vocab_fd : c->vocab.tokenizer_fd;
	if (fd < 0) {
		head.error = BN_E_INVALID;
	} else {
		head.length = op == BN_CTL_VOCAB ? c->vocab.vocab_bytes : c->vocab.tokenizer_bytes;
		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.buf;
		msg.msg_controllen = sizeof(ctl.buf);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	}
	ssize_t n = sendmsg(sock_fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
	return n == (ssize_t)sizeof(head) ? 0 : -1;
}
