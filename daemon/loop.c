/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "loop.h"

#include "bitnet_barrier.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/stats.h"
#include "control.h"
#include "grammars.h"
#include "listen.h"
#include "sdnotify.h"
#include "serve/sched.h"
#include "session.h"

#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* io_uring user_data: an owner pointer (8-byte aligned) with the operation kind in the low
 * bits. 0 marks completions nobody waits for (cancel requests). */
enum io_kind { IO_ACCEPT = 1, IO_SIGNAL = 2, IO_RECV = 3, IO_DOORBELL = 4, IO_GRAMMAR = 5 };
#define IO_KIND_MASK 7u

#define URING_ENTRIES 256
#define MAX_SLEEP_NS (1000000000ull) /* wake at least once a second for housekeeping */
#define ACCEPT_BATCH 64              /* connections taken from the backlog per accept */

struct bn_loop {
	struct io_uring ring;
	int deferred_completions;     /* the ring runs completions only when asked (open_ring) */
	const struct bn_config *cfg;
	struct bn_session_limits limits;
	struct bn_sched *sched;
	int listen_fd;
	int listen_owned;             /* bitnetd made the socket (systemd did not pass it) */
	int accepting;                /* an accept is re-armed after each completion */
	int accept_armed;             /* an accept is in the kernel */
	int accept_paused;            /* accept failed (e.g. EMFILE): housekeeping re-arms it */
	int signal_fd;
	struct signalfd_siginfo siginfo;
	struct bn_session **sessions; /* [max_sessions], dense: open and handshaking */
	struct bn_tenant **tenants;   /* [max_sessions]: sessions[i]'s tenant, for the scheduler */
	uint32_t n_sessions;
	uint32_t n_closing;           /* closed, waiting for their io to complete */
	uint32_t next_session_id;
	int shutting_down;
	uint64_t drain_deadline;
	uint64_t watchdog_ns, next_watchdog;
	uint64_t last_work;
	uint64_t first_waiting;       /* when the current waiting run began (batch window) */
	uint64_t next_housekeeping;
	uint64_t handshake_timeout_ns;
	uint64_t housekeeping_ns;     /* how often handshakes are checked for their timeout */
	struct bn_control control;    /* the control ops and the vocabulary they serve */
	struct bn_grammar_service grammars; /* structured output's compiles (grammars.h) */
};

static uint64_t tag(void *owner, enum io_kind kind)
{
	return (uint64_t)(uintptr_t)owner | kind;
}

/* Returns an SQE, submitting what is queued when the submission queue is full. */
static struct io_uring_sqe *get_sqe(struct bn_loop *l)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);
	if (!sqe) {
		io_uring_submit(&l->ring);
		bn_stats.uring_submits++;
		sqe = io_uring_get_sqe(&l->ring);
	}
	return sqe;
}

/* ------------------------------------------------------------------------------------------ */
/* Arming operations                                                                           */
/* ------------------------------------------------------------------------------------------ */

static void arm_accept(struct bn_loop *l)
{
	struct io_uring_sqe *sqe = get_sqe(l);
	io_uring_prep_accept(sqe, l->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(sqe, tag(l, IO_ACCEPT));
	l->accept_armed = 1;
}

static void arm_signal(struct bn_loop *l)
{
	struct io_uring_sqe *sqe = get_sqe(l);
	io_uring_prep_read(sqe, l->signal_fd, &l->siginfo, sizeof(l->siginfo), 0);
	io_uring_sqe_set_data64(sqe, tag(l, IO_SIGNAL));
}

/* Receives the rest of the current fixed-size message: the hello, then control requests. */
static void arm_recv(struct bn_loop *l, struct bn_session *s)
{
	uint32_t want = s->phase == BN_SESSION_HANDSHAKE ? (uint32_t)sizeof(struct bn_hello)
							 : (uint32_t)sizeof(struct bn_ctl_request);
	struct io_uring_sqe *sqe = get_sqe(l);
	io_uring_prep_recv(sqe, s->sock_fd, s->rx + s->rx_len, want - s->rx_len, 0);
	io_uring_sqe_set_data64(sqe, tag(s, IO_RECV));
	s->io_pending++;
}

/* The doorbell is read only while the loop sleeps (sleep_until_event arms it, a completion
 * disarms it): a read armed while the loop works would make every eventfd write a task-work
 * interruption, and the submit that re-armed it after each wake-up sat on the wake-up path. */
static void arm_doorbell(struct bn_loop *l, struct bn_session *s)
{
	if (s->doorbell_armed)
		return;
	struct io_uring_sqe *sqe = get_sqe(l);
	io_uring_prep_read(sqe, s->doorbell_fd, &s->doorbell_value, sizeof(s->doorbell_value), 0);
	io_uring_sqe_set_data64(sqe, tag(s, IO_DOORBELL));
	s->doorbell_armed = 1;
	s->io_pending++;
}

/* The grammar service's eventfd: a compile is back. Always armed while the service runs. */
static void arm_grammars(struct bn_loop *l)
{
	if (!l->grammars.vocab)
		return;
	struct io_uring_sqe *sqe = get_sqe(l);
	io_uring_prep_read(sqe, l->grammars.event_fd, &l->grammars.event_value,
			   sizeof(l->grammars.event_value), 0);
	io_uring_sqe_set_data64(sqe, tag(l, IO_GRAMMAR));
}

static void cancel_io(struct bn_loop *l, struct bn_session *s, enum io_kind kind)
{
	struct io_uring_sqe *sqe = get_sqe(l);
	io_uring_prep_cancel64(sqe, tag(s, kind), 0);
	io_uring_sqe_set_data64(sqe, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Sessions                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static void table_remove(struct bn_loop *l, struct bn_session *s)
{
	uint32_t i = s->table_index;
	l->sessions[i] = l->sessions[--l->n_sessions];
	l->tenants[i] = l->tenants[l->n_sessions];
	l->sessions[i]->table_index = i;
}

/* A closing session goes once the kernel holds no operation that references it. */
static void free_if_idle(struct bn_loop *l, struct bn_session *s)
{
	if (s->phase == BN_SESSION_CLOSING && s->io_pending == 0 && s->grammar_jobs == 0) {
		l->n_closing--;
		bn_session_free(s);
	}
}

/* Ends the session. status 0: the client is gone, its requests vanish with it; otherwise its
 * in-flight requests end with that status and error first. The memory is freed once the
 * kernel has returned every io_uring operation that references it. */
static void close_session(struct bn_loop *l, struct bn_session *s, uint32_t status,
			  uint32_t error, const char *why)
{
	if (s->phase == BN_SESSION_CLOSING)
		return;
	if (s->phase == BN_SESSION_ACTIVE)
		bn_session_end_requests(s, l->sched, status, error);
	table_remove(l, s);
	s->phase = BN_SESSION_CLOSING;
	l->n_closing++;
	bn_stats.sessions_closed++;
	/* Shutting the socket down makes the pending recv complete and tells the client now. */
	shutdown(s->sock_fd, SHUT_RDWR);
	cancel_io(l, s, IO_RECV);
	if (s->doorbell_armed)
		cancel_io(l, s, IO_DOORBELL);
	bn_log_info("msg=\"session closed\" session=%u pid=%d reason=\"%s\"", s->id,
		    (int)s->peer_pid, why);
	free_if_idle(l, s);
}

static void io_done(struct bn_loop *l, struct bn_session *s)
{
	s->io_pending--;
	free_if_idle(l, s);
}

static void protocol_violation(struct bn_loop *l, struct bn_session *s, const char *what)
{
	bn_stats.protocol_violations++;
	bn_log_warn("msg=\"protocol violation\" session=%u pid=%d uid=%u what=\"%s\"", s->id,
		    (int)s->peer_pid, (unsigned)s->peer_uid, what);
	close_session(l, s, BN_STATUS_ERROR, BN_E_PROTOCOL, what);
}

static void handle_hello(struct bn_loop *l, struct bn_session *s);

/* A connection that gets no session: the welcome says why, then it is closed. */
static void refuse_connection(int fd, uint32_t error, enum bn_refusal why)
{
	bn_session_refuse(fd, error);
	close(fd);
	bn_stats.refusals[why]++;
}

/* Whether a connection of `uid` may join the table: its room, and the uid's share of it
 * (sessions and handshakes together). Counted from the table itself, one pass per accepted
 * connection. Returns the refusal, or -1 to admit. */
static int admission_refusal(const struct bn_loop *l, uid_t uid)
{
	if (l->n_sessions >= l->cfg->max_sessions)
		return BN_REFUSED_MAX_SESSIONS;
	uint32_t held = 0;
	for (uint32_t i = 0; i < l->n_sessions; i++)
		held += l->sessions[i]->peer_uid == uid;
	return held >= l->cfg->max_sessions_per_user ? BN_REFUSED_USER_SESSIONS : -1;
}

/* A connection of `uid` is about to wait for its hello: if that uid has its cap of such
 * connections already, the oldest goes (1010 BUSY). The newest is kept because it is the one
 * most likely to send a hello soon; a uid that keeps connections silent only loses its own. */
static void make_room_for_handshake(struct bn_loop *l, uid_t uid)
{
	struct bn_session *oldest = NULL;
	uint32_t pending = 0;
	for (uint32_t i = 0; i < l->n_sessions; i++) {
		struct bn_session *s = l->sessions[i];
		if (s->peer_uid != uid || s->phase != BN_SESSION_HANDSHAKE)
			continue;
		pending++;
		if (!oldest || s->t_connected < oldest->t_connected)
			oldest = s;
	}
	if (pending < l->cfg->max_handshakes_per_user)
		return;
	bn_session_refuse(oldest->sock_fd, BN_E_BUSY);
	bn_stats.refusals[BN_REFUSED_USER_HANDSHAKES]++;
	close_session(l, oldest, 0, 0, "too many handshakes of its uid");
}

static void take_connection(struct bn_loop *l, int fd)
{
	struct ucred peer;
	bn_peer_cred(fd, &peer);
	int why = l->shutting_down ? BN_REFUSED_SHUTDOWN : admission_refusal(l, peer.uid);
	if (why >= 0) {
		bn_log_debug("msg=\"connection refused\" pid=%d uid=%u reason=%d", (int)peer.pid,
			     (unsigned)peer.uid, why);
		refuse_connection(fd, why == BN_REFUSED_SHUTDOWN ? BN_E_SHUTDOWN : BN_E_BUSY,
				  (enum bn_refusal)why);
		return;
	}
	/* A client sends its hello right after connecting, so it is usually here already: then
	 * the connection never counts as a pending handshake. */
	struct bn_hello hello;
	ssize_t n = recv(fd, &hello, sizeof(hello), MSG_DONTWAIT);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
		close(fd); /* gone before it said anything */
		return;
	}
	n = n < 0 ? 0 : n;
	if (n < (ssize_t)sizeof(hello))
		make_room_for_handshake(l, peer.uid);
	struct bn_session *s = bn_session_new(l->next_session_id++, fd, &peer);
	if (!s) {
		refuse_connection(fd, BN_E_BACKEND, BN_REFUSED_BACKEND);
		return;
	}
	s->table_index = l->n_sessions;
	l->tenants[l->n_sessions] = &s->tenant;
	l->sessions[l->n_sessions++] = s;
	memcpy(s->rx, &hello, (size_t)n);
	s->rx_len = (uint32_t)n;
	if (s->rx_len == sizeof(hello))
		handle_hello(l, s);
	else
		arm_recv(l, s);
}

/* The connections still waiting in the backlog, up to a batch: with one accept per loop
 * iteration a flood would be taken one connection per step under load. Called only while no
 * accept is armed, so nothing else takes from the backlog between the poll, which says a
 * connection is there, and accept4 on the (blocking: it may be systemd's) socket. */
static void accept_backlog(struct bn_loop *l)
{
	for (int i = 0; i < ACCEPT_BATCH; i++) {
		struct pollfd p = { .fd = l->listen_fd, .events = POLLIN };
		if (poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN))
			return;
		int fd = accept4(l->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			return;
		take_connection(l, fd);
	}
}

static void on_accept(struct bn_loop *l, int res)
{
	l->accept_armed = 0;
	if (res >= 0) {
		take_connection(l, res);
		if (l->accepting) /* once stopping, a passed socket's backlog is systemd's */
			accept_backlog(l);
	} else if (res != -ECANCELED && l->accepting) {
		/* EMFILE and the like fail again at once: retry from housekeeping, not in a spin. */
		bn_log_warn("msg=\"accept failed\" errno=%d", -res);
		l->accept_paused = 1;
		return;
	}
	if (l->accepting)
		arm_accept(l);
}

/* The refusal a failed hello counts as (bn_session_handshake's return value). */
static enum bn_refusal hello_refusal(int rc)
{
	switch (-rc) {
	case BN_E_SHUTDOWN: return BN_REFUSED_SHUTDOWN;
	case BN_E_VERSION: return BN_REFUSED_VERSION;
	case BN_E_BACKEND: return BN_REFUSED_BACKEND;
	case BN_E_DISCONNECTED: return BN_REFUSED_WELCOME;
	default: return BN_REFUSED_PROTOCOL;
	}
}

static void handle_hello(struct bn_loop *l, struct bn_session *s)
{
	int rc = bn_session_handshake(s, &l->limits, l->shutting_down);
	s->rx_len = 0;
	if (rc < 0) {
		bn_stats.refusals[hello_refusal(rc)]++;
		close_session(l, s, 0, 0, "handshake refused");
		return;
	}
	bn_stats.sessions_opened++;
	arm_recv(l, s);
}

static void handle_control(struct bn_loop *l, struct bn_session *s)
{
	struct bn_ctl_request q;
	memcpy(&q, s->rx, sizeof(q));
	s->rx_len = 0;
	if (q.magic != BN_CTL_MAGIC || q.reserved[0] || q.reserved[1]) {
		protocol_violation(l, s, "bad control message");
		return;
	}
	int rc = q.op == BN_CTL_VOCAB || q.op == BN_CTL_TOKENIZER
			 ? bn_control_reply_vocab(&l->control, s->sock_fd, q.op)
			 : bn_control_reply_stats(&l->control, s->sock_fd, s->id, q.op, l->sched,
						  l->sessions, l->n_sessions);
	if (rc < 0) {
		close_session(l, s, BN_STATUS_ERROR, BN_E_PROTOCOL, "control reply not accepted");
		return;
	}
	if (s->phase == BN_SESSION_ACTIVE)
		arm_recv(l, s);
}

static void on_recv(struct bn_loop *l, struct bn_session *s, int res)
{
	if (s->phase == BN_SESSION_CLOSING)
		return;
	if (res <= 0) {
		close_session(l, s, 0, 0, res == 0 ? "client hung up" : "socket error");
		return;
	}
	s->rx_len += (uint32_t)res;
	uint32_t want = s->phase == BN_SESSION_HANDSHAKE ? (uint32_t)sizeof(struct bn_hello)
							 : (uint32_t)sizeof(struct bn_ctl_request);
	if (s->rx_len < want)
		arm_recv(l, s);
	else if (s->phase == BN_SESSION_HANDSHAKE)
		handle_hello(l, s);
	else
		handle_control(l, s);
}

static void on_doorbell(struct bn_loop *l, struct bn_session *s, int res)
{
	s->doorbell_armed = 0;
	if (s->phase == BN_SESSION_CLOSING)
		return;
	if (res < 0 && res != -EAGAIN && res != -EINTR) {
		close_session(l, s, BN_STATUS_ERROR, BN_E_PROTOCOL, "doorbell error");
		return;
	}
	bn_stats.doorbells++;
}

/* Compiles that came back go to their sessions (a closed one may now be freed). */
static void on_grammars(struct bn_loop *l, int res)
{
	struct bn_grammar_job *job = bn_grammar_service_take_done(&l->grammars), *next;
	for (; job; job = next) {
		next = job->next;
		struct bn_session *s = job->owner;
		s->grammar_jobs--;
		bn_session_grammar_done(s, job);
		free_if_idle(l, s);
	}
	if (res != -ECANCELED)
		arm_grammars(l);
}

/* ------------------------------------------------------------------------------------------ */
/* Signals and shutdown                                                                        */
/* ------------------------------------------------------------------------------------------ */

static void begin_shutdown(struct bn_loop *l, const char *why)
{
	if (l->shutting_down)
		return;
	l->shutting_down = 1;
	l->drain_deadline = bn_now_ns() + (uint64_t)l->cfg->drain_timeout_ms * 1000000u;
	bn_sd_notify("STOPPING=1");
	bn_log_info("msg=\"shutting down\" signal=%s running=%u waiting=%u", why,
		    bn_sched_running(l->sched), bn_sched_waiting(l->sched));
	for (uint32_t i = 0; i < l->n_sessions; i++)
		bn_session_set_daemon_flags(l->sessions[i], BN_DAEMON_SHUTTING_DOWN);
	/* Queued work that has not started will not start. New connections are still accepted
	 * during the drain, to be told 1005 rather than left in the backlog. */
	bn_sched_end_waiting(l->sched, l->tenants, l->n_sessions, BN_STATUS_SHUTDOWN);
}

static void on_signal(struct bn_loop *l, int res)
{
	if (res == (int)sizeof(l->siginfo)) {
		uint32_t sig = l->siginfo.ssi_signo;
		if (sig == SIGTERM || sig == SIGINT)
			begin_shutdown(l, sig == SIGTERM ? "TERM" : "INT");
		else
			bn_log_info("msg=\"SIGHUP ignored: there is no configuration to reload\"");
	}
	arm_signal(l);
}

/* ------------------------------------------------------------------------------------------ */
/* Completions                                                                                 */
/* ------------------------------------------------------------------------------------------ */

static void dispatch(struct bn_loop *l, uint64_t data, int res)
{
	void *owner = (void *)(uintptr_t)(data & ~(uint64_t)IO_KIND_MASK);
	switch ((enum io_kind)(data & IO_KIND_MASK)) {
	case IO_ACCEPT: on_accept(l, res); break;
	case IO_SIGNAL: on_signal(l, res); break;
	case IO_RECV:
		on_recv(l, owner, res);
		io_done(l, owner);
		break;
	case IO_DOORBELL:
		on_doorbell(l, owner, res);
		io_done(l, owner);
		break;
	case IO_GRAMMAR: on_grammars(l, res); break;
	}
}

/* Handles every completion already there, without a system call. */
static void reap(struct bn_loop *l)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;
	/* Deferred completions are posted when the loop enters the kernel for them; the kernel
	 * sets IORING_SQ_TASKRUN when there are some. One flag load when there are none. */
	if (l->deferred_completions &&
	    (IO_URING_READ_ONCE(*l->ring.sq.kflags) & IORING_SQ_TASKRUN))
		io_uring_get_events(&l->ring);
	io_uring_for_each_cqe(&l->ring, head, cqe)
	{
		uint64_t data = io_uring_cqe_get_data64(cqe);
		int res = cqe->res;
		n++;
		if (data)
			dispatch(l, data, res);
	}
	io_uring_cq_advance(&l->ring, n);
	if (io_uring_sq_ready(&l->ring)) {
		io_uring_submit(&l->ring);
		bn_stats.uring_submits++;
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Rings, sleeping, housekeeping                                                               */
/* ------------------------------------------------------------------------------------------ */

static void poll_rings(struct bn_loop *l)
{
	for (uint32_t i = 0; i < l->n_sessions;) {
		struct bn_session *s = l->sessions[i];
		if (s->phase == BN_SESSION_ACTIVE &&
		    bn_session_poll_ring(s, l->sched, l->shutting_down) < 0) {
			protocol_violation(l, s, "ring");
			continue; /* the table's last session moved into i */
		}
		i++;
	}
}

static void set_need_wakeup(struct bn_loop *l, int on)
{
	for (uint32_t i = 0; i < l->n_sessions; i++)
		if (l->sessions[i]->phase == BN_SESSION_ACTIVE)
			bn_session_set_need_wakeup(l->sessions[i], on);
}

static int any_ring_pending(struct bn_loop *l)
{
	for (uint32_t i = 0; i < l->n_sessions; i++)
		if (l->sessions[i]->phase == BN_SESSION_ACTIVE &&
		    bn_session_ring_pending(l->sessions[i]))
			return 1;
	return 0;
}

static int any_handshake(const struct bn_loop *l)
{
	for (uint32_t i = 0; i < l->n_sessions; i++)
		if (l->sessions[i]->phase == BN_SESSION_HANDSHAKE)
			return 1;
	return 0;
}

static uint64_t sleep_budget(struct bn_loop *l, uint64_t now)
{
	uint64_t until = now + MAX_SLEEP_NS;
	if (l->watchdog_ns && l->next_watchdog < until)
		until = l->next_watchdog;
	if (l->shutting_down && l->drain_deadline < until)
		until = l->drain_deadline;
	/* A handshake's timeout, or an accept to retry, is due at the next housekeeping. */
	if ((l->accept_paused || any_handshake(l)) && l->next_housekeeping < until)
		until = l->next_housekeeping;
	return until > now ? until - now : 0;
}

/* The daemon's half of the lost-wakeup protocol: announce the sleep, fence, look once more. */
static void sleep_until_event(struct bn_loop *l, uint64_t now)
{
	set_need_wakeup(l, 1);
	/* Full fence: the NEED_WAKEUP stores are ordered before the tail loads below. A client
	 * publishes its tail, fences, then reads NEED_WAKEUP: one of us sees the other's store. */
	bn_smp_mb();
	if (!any_ring_pending(l)) {
		uint64_t ns = sleep_budget(l, now);
		struct __kernel_timespec ts = { .tv_sec = (long long)(ns / 1000000000u),
						.tv_nsec = (long long)(ns % 1000000000u) };
		struct io_uring_cqe *cqe;
		/* A client that rang between the check above and here left the eventfd readable:
		 * its read completes at once and the wait returns. */
		for (uint32_t i = 0; i < l->n_sessions; i++)
			if (l->sessions[i]->phase == BN_SESSION_ACTIVE)
				arm_doorbell(l, l->sessions[i]);
		bn_stats.sleeps++;
		if (io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1, &ts, NULL) == -ETIME)
			bn_stats.sleep_timeouts++;
	}
	set_need_wakeup(l, 0);
}

static void housekeeping(struct bn_loop *l, uint64_t now)
{
	if (l->watchdog_ns && now >= l->next_watchdog) {
		bn_sd_notify("WATCHDOG=1");
		l->next_watchdog = now + l->watchdog_ns / 2;
	}
	if (now < l->next_housekeeping)
		return;
	l->next_housekeeping = now + l->housekeeping_ns;
	if (l->accept_paused && l->accepting) {
		l->accept_paused = 0;
		arm_accept(l);
	}
	for (uint32_t i = 0; i < l->n_sessions;) {
		struct bn_session *s = l->sessions[i];
		if (s->phase == BN_SESSION_HANDSHAKE &&
		    now - s->t_connected > l->handshake_timeout_ns) {
			bn_session_refuse(s->sock_fd, BN_E_TIMEOUT);
			bn_stats.refusals[BN_REFUSED_HELLO_TIMEOUT]++;
			close_session(l, s, 0, 0, "no hello in time");
			continue; /* the table's last session moved into i */
		}
		i++;
	}
}

/* Whether a step should run now: something is running, or waiting requests have filled a
 * batch or waited out the batch window. */
static int step_due(struct bn_loop *l, uint64_t now)
{
	if (bn_sched_running(l->sched))
		return 1;
	uint32_t waiting = bn_sched_waiting(l->sched);
	if (waiting == 0) {
		l->first_waiting = 0;
		return 0;
	}
	if (!l->first_waiting)
		l->first_waiting = now;
	return waiting >= bn_sched_max_batch(l->sched) ||
	       now - l->first_waiting >= (uint64_t)l->cfg->batch_window_us * 1000u;
}

static int drained(struct bn_loop *l, uint64_t now)
{
	if (!l->shutting_down)
		return 0;
	if (bn_sched_running(l->sched) && now < l->drain_deadline)
		return 0;
	bn_sched_end_running(l->sched, BN_STATUS_SHUTDOWN);
	return 1;
}

/* Stops taking connections. The armed accept is cancelled (a connection it still takes gets
 * 1005, like every one during the drain). A socket bitnetd made is then shut down for
 * reading, so a later connect() fails at once with ECONNREFUSED, and what still waits in its
 * backlog is told 1005. A socket systemd passed keeps its backlog: systemd starts the daemon
 * again for it. */
static void stop_listening(struct bn_loop *l)
{
	l->accepting = 0;
	l->accept_paused = 0;
	if (l->accept_armed) {
		struct io_uring_sqe *sqe = get_sqe(l);
		io_uring_prep_cancel64(sqe, tag(l, IO_ACCEPT), 0);
		io_uring_sqe_set_data64(sqe, 0);
		io_uring_submit(&l->ring);
	}
	while (l->accept_armed) {
		struct io_uring_cqe *cqe;
		if (io_uring_wait_cqe(&l->ring, &cqe) < 0)
			break;
		reap(l);
	}
	if (!l->listen_owned || shutdown(l->listen_fd, SHUT_RD) < 0)
		return;
	/* After the shutdown, accept on an empty backlog fails (EINVAL) instead of waiting. */
	int fd;
	while ((fd = accept4(l->listen_fd, NULL, NULL, SOCK_CLOEXEC)) >= 0)
		refuse_connection(fd, BN_E_SHUTDOWN, BN_REFUSED_SHUTDOWN);
}

/* The last word to every connection, once every request taken has its terminal status. A
 * session's ring is marked closed (BN_DAEMON_CLOSED) and read one last time, so whatever was
 * queued until then ends with SHUTDOWN; then its socket hangs up. A client that sees the
 * hang-up also sees every DONE stored before it, so a slot it finds not DONE was never taken
 * (shm/PROTOCOL.md §11.3). A connection still in its handshake is told 1005. */
static void close_all_sessions(struct bn_loop *l)
{
	while (l->n_sessions) {
		struct bn_session *s = l->sessions[0];
		if (s->phase == BN_SESSION_HANDSHAKE) {
			bn_session_refuse(s->sock_fd, BN_E_SHUTDOWN);
			bn_stats.refusals[BN_REFUSED_SHUTDOWN]++;
			close_session(l, s, 0, 0, "daemon shutting down");
			continue;
		}
		bn_session_set_daemon_flags(s, BN_DAEMON_SHUTTING_DOWN | BN_DAEMON_CLOSED);
		if (bn_session_poll_ring(s, l->sched, 1) < 0)
			protocol_violation(l, s, "ring");
		else
			close_session(l, s, BN_STATUS_SHUTDOWN, 0, "daemon shutting down");
	}
}

int bn_loop_run(struct bn_loop *l)
{
	uint64_t idle_spin_ns = (uint64_t)l->cfg->idle_spin_us * 1000u;
	l->accepting = 1;
	arm_accept(l);
	arm_signal(l);
	arm_grammars(l);
	io_uring_submit(&l->ring);
	bn_sd_notify("READY=1");
	bn_log_info("msg=\"ready\" socket=%s uring_completions=%s", l->cfg->socket_path,
		    l->deferred_completions ? "deferred" : "task_work");
	l->last_work = bn_now_ns();
	for (;;) {
		reap(l);
		uint64_t now = bn_now_ns();
		housekeeping(l, now);
		poll_rings(l);
		if (drained(l, now))
			break;
		if (step_due(l, now)) {
			bn_sched_step(l->sched, l->tenants, l->n_sessions);
			l->first_waiting = 0;
			l->last_work = bn_now_ns();
		} else if (bn_sched_waiting(l->sched) || now - l->last_work < idle_spin_ns) {
			bn_cpu_relax();
		} else {
			sleep_until_event(l, now);
			l->last_work = bn_now_ns();
		}
	}
	stop_listening(l);
	close_all_sessions(l);
	io_uring_submit(&l->ring);
	while (l->n_closing) {
		struct io_uring_cqe *cqe;
		if (io_uring_wait_cqe(&l->ring, &cqe) < 0)
			break;
		reap(l);
	}
	bn_log_info("msg=\"stopped\"");
	return 0;
}

/* The vocabulary's end-of-generation ids for the scheduler (eos is its own field). */
/* What the model runs, for STATS (bitnet-cli info): the activation and why, the packing of a
 * float bitnet* file's matrices. */
static void copy_graph(const struct bn_model_desc *model)
{
	snprintf(bn_stats.activation, sizeof(bn_stats.activation), "%s", model->activation);
	snprintf(bn_stats.activation_why, sizeof(bn_stats.activation_why), "%s",
		 model->activation_why);
	memcpy(bn_stats.float_candidates, model->float_candidates,
	       sizeof(bn_stats.float_candidates));
	memcpy(bn_stats.ternary_from_float, model->ternary_from_float,
	       sizeof(bn_stats.ternary_from_float));
	snprintf(bn_stats.kept_float, sizeof(bn_stats.kept_float), "%s", model->kept_float);
}

static void copy_eog(const struct bn_vocab_choice *c, struct bn_sched_config *sc)
{
	for (uint32_t i = 0; i < c->n_eog && sc->n_eog < BN_SCHED_MAX_EOG; i++)
		sc->eog[sc->n_eog++] = c->eog[i];
}

/* Why this daemon constrains no outputs, or NULL when it can (given a vocabulary the grammar
 * engine takes). */
static const char *grammars_off(const struct bn_loop *l, const struct bn_model_desc *model)
{
	if (!l->control.text.vocab)
		return model->kind == BN_BACKEND_LOOPBACK
			       ? "the loopback backend has no vocabulary"
			       : "the model has no vocabulary that encodes text";
	if (!model->can_mask)
		return "the backend applies no grammar masks";
	return NULL;
}

/* The grammar service, where the model and backend allow structured output. -1 with errno
 * when threads or memory fail. */
static int open_grammars(struct bn_loop *l, const struct bn_config *cfg,
			 const struct bn_model_desc *model)
{
	const char *off = grammars_off(l, model);
	l->limits.max_grammars = cfg->max_grammars;
	l->limits.grammars = &l->grammars;
	if (!off) {
		struct bn_grammar_service_config gc = { .threads = cfg->grammar_threads,
							.compile_ms = cfg->grammar_compile_ms,
							.cache_bytes = (size_t)cfg->grammar_cache,
							.memory_bytes = (size_t)cfg->grammar_memory };
		int rc = bn_grammar_service_open(&l->grammars, l->control.text.vocab,
						 l->control.grammar_vocab, &gc);
		l->control.grammar_vocab = NULL; /* the service's now */
		if (rc < 0) {
			errno = -rc;
			return -1;
		}
		if (!l->grammars.vocab)
			off = "the vocabulary could not be given to the grammar engine";
	}
	if (off)
		bn_log_info("msg=\"no structured output\" reason=\"%s\"", off);
	l->limits.grammars_off = off;
	return 0;
}

/* The loop is the ring's only user, so completions can wait until it asks for them (in its
 * wait, or through io_uring_get_events when the kernel flags pending work) instead of
 * interrupting it as task work: SINGLE_ISSUER | DEFER_TASKRUN. Kernels before 6.1 refuse
 * those flags; the ring is then a plain one. */
static int open_ring(struct bn_loop *l)
{
	struct io_uring_params p = { .flags = IORING_SETUP_SINGLE_ISSUER |
					      IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG };
	int rc = io_uring_queue_init_params(URING_ENTRIES, &l->ring, &p);
	l->deferred_completions = rc == 0;
	if (rc == -EINVAL)
		rc = io_uring_queue_init(URING_ENTRIES, &l->ring, 0);
	return rc;
}

struct bn_loop *bn_loop_new(const struct bn_config *cfg, const struct bn_backend_ops *ops,
			    void *backend, const struct bn_model_desc *model,
			    struct bn_text_prep *prep, int *exit_code)
{
	struct bn_loop *l = calloc(1, sizeof(*l));
	*exit_code = BN_EXIT_SYSTEM;
	if (!l)
		return NULL;
	l->cfg = cfg;
	l->listen_fd = l->signal_fd = -1;
	l->next_session_id = 1;
	/* An embedding's vector goes to the output array too (§6.14). */
	uint32_t vector = model->pooling ? model->embed_dim : 0;
	l->limits = (struct bn_session_limits){ .slots = cfg->slots,
						.prompt_capacity = model->context_length,
						.output_capacity = model->context_length > vector
									   ? model->context_length
									   : vector,
						.ring_start = cfg->ring_start,
						.logprob_capacity = cfg->max_logprobs,
						.max_weight = cfg->max_weight,
						.model = model,
						.text = &l->control.text };
	l->sessions = calloc(cfg->max_sessions, sizeof(*l->sessions));
	l->tenants = calloc(cfg->max_sessions, sizeof(*l->tenants));
	struct bn_sched_config sc = {
		.max_batch = cfg->max_batch,
		.token_budget = cfg->token_budget,
		.max_running_per_session = cfg->max_running_per_session,
		.max_running_per_user = cfg->max_running_per_user,
		.eos_id = model->eos_id,
		.context_length = model->context_length,
		.kv_memory = cfg->kv_memory,
		.kv_block_tokens = cfg->kv_block_tokens,
		.logprob_capacity = cfg->max_logprobs,
		.fork_seqs = model->can_classify ? cfg->max_batch : 0, /* main.c opened that many */
		.prefix_cache = cfg->prefix_cache,
		.speculative = cfg->speculative,
		.draft_tokens = cfg->draft_tokens,
		.pooling = model->pooling,
		.embed_dim = model->embed_dim,
	};
	bn_control_open(&l->control, cfg, model, prep);
	copy_eog(&l->control.vocab.choice, &sc);
	l->sched = bn_sched_new(ops, backend, model, &sc, &bn_session_reply);
	bn_stats.spec_mode = bn_speculative_names[ops->seq_rewind ? cfg->speculative
								  : BN_SPECULATIVE_OFF];
	bn_stats.spec_draft_tokens = cfg->draft_tokens;
	snprintf(bn_stats.cuda_kernels, sizeof(bn_stats.cuda_kernels), "%s", model->kernels);
	copy_graph(model);
	if (!l->sched) {
		/* Logged by the scheduler (the KV cache does not fit or cannot be allocated). */
		*exit_code = BN_EXIT_BACKEND;
		bn_control_close(&l->control);
		free(l->sessions);
		free(l->tenants);
		free(l);
		return NULL;
	}
	int rc = open_ring(l);
	if (rc < 0) {
		bn_log_error("msg=\"io_uring_queue_init failed\" error=\"%s\"", strerror(-rc));
		free(l->sessions);
		free(l->tenants);
		bn_sched_free(l->sched);
		bn_control_close(&l->control);
		free(l);
		return NULL;
	}
	l->signal_fd = bn_signals_open();
	if (!l->sessions || !l->tenants || !l->sched || l->signal_fd < 0) {
		bn_log_error("msg=\"cannot set up the loop\" error=\"%s\"", strerror(errno));
		bn_loop_free(l);
		return NULL;
	}
	if (open_grammars(l, cfg, model) < 0) {
		bn_log_error("msg=\"cannot start the grammar service\" error=\"%s\"", strerror(errno));
		bn_loop_free(l);
		return NULL;
	}
	l->listen_fd = bn_listen_open(cfg, &l->listen_owned);
	if (l->listen_fd < 0) {
		*exit_code = BN_EXIT_SOCKET;
		bn_loop_free(l);
		return NULL;
	}
	l->watchdog_ns = bn_sd_watchdog_ns();
	l->handshake_timeout_ns = (uint64_t)cfg->handshake_timeout_ms * 1000000u;
	/* Handshakes are checked four times per timeout: closed within 1.25 timeouts. */
	l->housekeeping_ns = l->handshake_timeout_ns / 4 < MAX_SLEEP_NS ? l->handshake_timeout_ns / 4
									: MAX_SLEEP_NS;
	*exit_code = BN_EXIT_OK;
	return l;
}

void bn_loop_free(struct bn_loop *l)
{
	if (!l)
		return;
	io_uring_queue_exit(&l->ring);
	bn_grammar_service_close(&l->grammars); /* its eventfd's read went with the ring */
	if (l->listen_fd >= 0)
		close(l->listen_fd);
	if (l->signal_fd >= 0)
		close(l->signal_fd);
	bn_control_close(&l->control);
	bn_sched_free(l->sched);
	free(l->sessions);
	free(l->tenants);
	free(l);
}
