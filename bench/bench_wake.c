/* SPDX-License-Identifier: MIT */
/*
 * bench-wake — what the kernel charges to wake a sleeping process, by the way it sleeps: the
 * floor under bitnetd's idle round trip (`make bench-wake`; docs/PERFORMANCE.md, issue 42).
 *
 * Two processes: a "daemon" that spins --daemon-spin-ns on a shared doorbell word, then
 * announces its sleep (NEED_WAKEUP), fences, looks again and sleeps in one of the ways below;
 * and a "client" that sleeps --gap-us before each round (long enough for an idle CPU to halt),
 * bumps the doorbell word, fences, and makes the way's wake-up call only when the daemon
 * announced its sleep; then it waits for the answer on a shared futex word, spinning --spin-ns
 * first unless it had to wake the daemon (--rang-spin-ns then, 0 by default: libbitnet-client
 * does not spin after a wake-up, wait.c says why). Printed per way, medians over --rounds:
 *   wake_<way>_p50_ns   the client's wake-up call to the daemon running (one shared clock)
 *   rtt_<way>_p50_ns    the client's wake-up call to the answer seen
 *   ping_<way>_p50_ns   the same round trip with no gap (the daemon never goes idle long)
 * Ways: uring_eventfd (an io_uring read of an eventfd: bitnetd's doorbell), uring_eventfd_defer
 * (the same ring with SINGLE_ISSUER | DEFER_TASKRUN), uring_futex (IORING_OP_FUTEX_WAIT), futex
 * (FUTEX_WAIT), eventfd (a blocking read), uds (a blocking read of a Unix stream socket),
 * epoll_uds and epoll_eventfd(_et) (epoll_wait on them, level- or edge-triggered), uring_uds
 * (an io_uring recv). --only WAY runs one.
 */
#define _GNU_SOURCE
#include "bench_util.h"
#include "bitnet_barrier.h"
#include "bitnet_futex.h"
#include "common/clock.h"

#include <errno.h>
#include <liburing.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef IORING_OP_FUTEX_WAIT
#define IORING_OP_FUTEX_WAIT 51 /* Linux 6.7; liburing 2.3's header predates it */
#endif
#define FUTEX2_SIZE_U32_FLAG 0x02u
#define FUTEX_MATCH_ANY 0xffffffffu

enum way { W_URING_EVENTFD, W_URING_EVENTFD_DEFER, W_URING_FUTEX, W_FUTEX, W_EVENTFD, W_UDS,
	   W_EPOLL_UDS, W_URING_UDS, W_EPOLL_EVENTFD, W_EPOLL_EVENTFD_ET, W_COUNT };
static const char *const way_names[W_COUNT] = {
	"uring_eventfd", "uring_eventfd_defer", "uring_futex", "futex", "eventfd", "uds",
	"epoll_uds", "uring_uds", "epoll_eventfd", "epoll_eventfd_et",
};

/* One cache line each: what the client and the daemon write. */
struct shared {
	uint32_t doorbell;     /* client: bumped for each request (the daemon's "tail") */
	uint32_t pad0[15];
	uint32_t need_wakeup;  /* daemon: 1 while it sleeps or is about to */
	uint32_t pad2[15];
	uint32_t answer;       /* daemon: bumped when it answered */
	uint32_t waiting;      /* client: 1 while it sleeps on answer */
	uint32_t pad1[14];
	int64_t t_woke;        /* daemon: when it ran after the wake */
	uint32_t stop;
};

static int64_t median(int64_t *v, uint32_t n)
{
	qsort(v, n, sizeof(*v), bench_cmp_i64);
	return v[n / 2];
}

/* ---- daemon side ------------------------------------------------------------------------- */

struct sleeper {
	enum way way;
	int efd, sock, ep;
	struct io_uring ring;
	uint64_t value;
	char buf[8];
};

static void arm(struct sleeper *s, uint32_t seen, uint32_t *doorbell)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
	switch (s->way) {
	case W_URING_EVENTFD:
	case W_URING_EVENTFD_DEFER:
		io_uring_prep_read(sqe, s->efd, &s->value, sizeof(s->value), 0);
		break;
	case W_URING_UDS:
		io_uring_prep_recv(sqe, s->sock, s->buf, 1, 0);
		break;
	default: /* W_URING_FUTEX */
		io_uring_prep_rw(IORING_OP_FUTEX_WAIT, sqe, (int)FUTEX2_SIZE_U32_FLAG,
				 (void *)doorbell, 0, 0);
		sqe->addr2 = seen;
		sqe->addr3 = FUTEX_MATCH_ANY;
		break;
	}
	io_uring_sqe_set_data64(sqe, 1);
}

/* Sleeps until the client rings (or spuriously: the caller re-checks the doorbell word). */
static void sleep_once(struct sleeper *s, struct shared *sh, uint32_t seen)
{
	ssize_t n = 0;
	struct io_uring_cqe *cqe;
	struct epoll_event ev;
	switch (s->way) {
	case W_FUTEX: bn_futex_wait(&sh->doorbell, seen, -1); break;
	case W_EVENTFD: n = read(s->efd, &s->value, 8); break;
	case W_UDS: n = read(s->sock, s->buf, 1); break;
	case W_EPOLL_UDS:
		while (epoll_wait(s->ep, &ev, 1, -1) != 1)
			;
		n = read(s->sock, s->buf, 1);
		break;
	case W_EPOLL_EVENTFD:
		while (epoll_wait(s->ep, &ev, 1, -1) != 1)
			;
		n = read(s->efd, &s->value, 8);
		break;
	case W_EPOLL_EVENTFD_ET:
		while (epoll_wait(s->ep, &ev, 1, -1) != 1)
			;
		break;
	default:
		arm(s, seen, &sh->doorbell);
		io_uring_submit_and_wait(&s->ring, 1);
		if (io_uring_peek_cqe(&s->ring, &cqe) == 0)
			io_uring_cqe_seen(&s->ring, cqe);
		break;
	}
	(void)n;
}

static void answer(struct shared *sh)
{
	bn_store_release(sh->answer, sh->answer + 1);
	bn_smp_mb(); /* the answer before the load of `waiting` (the client's FUTEX_WAIT pairs) */
	if (bn_read_once(sh->waiting))
		bn_futex_wake_all(&sh->answer);
}

/* bitnetd's loop in small: spin spin_ns on the doorbell word, then announce the sleep, fence,
 * look once more, and sleep. */
static void daemon_loop(struct sleeper *s, struct shared *sh, int64_t spin_ns)
{
	uint32_t seen = 0;
	for (;;) {
		int64_t until = bench_now_ns() + spin_ns;
		while (bn_load_acquire(sh->doorbell) == seen && bench_now_ns() < until)
			bn_cpu_relax();
		if (bn_load_acquire(sh->doorbell) == seen) {
			bn_write_once(sh->need_wakeup, 1);
			bn_smp_mb(); /* the flag before the re-check (the client's fence pairs) */
			if (bn_load_acquire(sh->doorbell) == seen)
				sleep_once(s, sh, seen);
			bn_write_once(sh->need_wakeup, 0);
		}
		if (bn_load_acquire(sh->doorbell) == seen)
			continue; /* a spurious or stale wake-up */
		seen = bn_load_acquire(sh->doorbell);
		sh->t_woke = bench_now_ns();
		if (bn_read_once(sh->stop))
			break;
		answer(sh);
	}
}

/* ---- client side ------------------------------------------------------------------------- */

/* Returns whether the daemon slept and had to be woken. */
static int ring(enum way w, struct sleeper *s, struct shared *sh)
{
	uint64_t one = 1;
	bn_store_release(sh->doorbell, sh->doorbell + 1);
	bn_smp_mb(); /* the doorbell word before the flag (the daemon's fence pairs) */
	if (!bn_read_once(sh->need_wakeup))
		return 0;
	switch (w) {
	case W_FUTEX:
	case W_URING_FUTEX: bn_futex_wake_all(&sh->doorbell); break;
	case W_UDS:
	case W_EPOLL_UDS:
	case W_URING_UDS:
		if (write(s->sock, "x", 1) != 1)
			abort();
		break;
	default:
		if (write(s->efd, &one, 8) != 8)
			abort();
		break;
	}
	return 1;
}

/* Spins up to spin_ns for the answer after `before`, then sleeps on it. */
static void await(struct shared *sh, uint32_t before, int64_t spin_ns)
{
	int64_t until = bench_now_ns() + spin_ns;
	while (bn_load_acquire(sh->answer) == before && bench_now_ns() < until)
		bn_cpu_relax();

	while (bn_load_acquire(sh->answer) == before) {
		bn_write_once(sh->waiting, 1);
		bn_smp_mb(); /* `waiting` before the re-check (the daemon's fence pairs) */
		if (bn_load_acquire(sh->answer) == before)
			bn_futex_wait(&sh->answer, before, -1);
		bn_write_once(sh->waiting, 0);
	}
}

struct opts {
	uint32_t rounds, gap_us;
	int64_t spin_ns, daemon_spin_ns, rang_spin_ns;
	int only;
};

static void run_way(enum way w, const struct opts *o)
{
	struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int sv[2];
	if (sh == MAP_FAILED || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		abort();
	struct sleeper s = { .way = w, .efd = eventfd(0, 0), .ep = -1 };
	pid_t pid = fork();
	if (pid == 0) {
		s.sock = sv[1];
		if (w == W_EPOLL_UDS || w == W_EPOLL_EVENTFD || w == W_EPOLL_EVENTFD_ET) {
			s.ep = epoll_create1(0);
			struct epoll_event ev = { .events = EPOLLIN | (w == W_EPOLL_EVENTFD_ET ? EPOLLET : 0) };
			epoll_ctl(s.ep, EPOLL_CTL_ADD, w == W_EPOLL_UDS ? s.sock : s.efd, &ev);
		}
		unsigned flags = w == W_URING_EVENTFD_DEFER
					 ? IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN : 0;
		if (io_uring_queue_init(8, &s.ring, flags) < 0)
			_exit(2);
		daemon_loop(&s, sh, o->daemon_spin_ns);
		_exit(0);
	}
	s.sock = sv[0];
	uint32_t n = o->rounds;
	int64_t *wake = calloc(n, sizeof(*wake)), *rtt = calloc(n, sizeof(*rtt)),
		*ping = calloc(n, sizeof(*ping));
	for (uint32_t i = 0; i < n + n / 10; i++) { /* the first tenth warms up */
		usleep(o->gap_us);
		uint32_t before = bn_load_acquire(sh->answer);
		int64_t t0 = bench_now_ns();
		/* libbitnet-client does not spin after it woke the daemon (wait.c says why). */
		int rang = ring(w, &s, sh);
		await(sh, before, rang ? o->rang_spin_ns : o->spin_ns);
		int64_t t1 = bench_now_ns();
		if (i >= n / 10) {
			wake[i - n / 10] = sh->t_woke - t0;
			rtt[i - n / 10] = t1 - t0;
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t before = bn_load_acquire(sh->answer);
		int64_t t0 = bench_now_ns();
		int rang = ring(w, &s, sh);
		await(sh, before, rang ? o->rang_spin_ns : o->spin_ns);
		ping[i] = bench_now_ns() - t0;
	}
	bn_write_once(sh->stop, 1);
	(void)ring(w, &s, sh);
	waitpid(pid, NULL, 0);
	printf("wake_%s_p50_ns=%lld\nrtt_%s_p50_ns=%lld\nping_%s_p50_ns=%lld\n", way_names[w],
	       (long long)median(wake, n), way_names[w], (long long)median(rtt, n), way_names[w],
	       (long long)median(ping, n));
	fflush(stdout);
	free(wake);
	free(rtt);
	free(ping);
	close(sv[0]);
	close(sv[1]);
	close(s.efd);
	munmap(sh, sizeof(*sh));
}

int main(int argc, char **argv)
{
	struct opts o = { .rounds = 300, .gap_us = 2000, .spin_ns = 20000, .daemon_spin_ns = 50000,
			  .only = -1 };
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			o.rounds = (uint32_t)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--gap-us") && i + 1 < argc)
			o.gap_us = (uint32_t)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--spin-ns") && i + 1 < argc)
			o.spin_ns = strtoll(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--rang-spin-ns") && i + 1 < argc)
			o.rang_spin_ns = strtoll(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--daemon-spin-ns") && i + 1 < argc)
			o.daemon_spin_ns = strtoll(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
			const char *name = argv[++i];
			for (int w = 0; w < W_COUNT; w++)
				if (!strcmp(name, way_names[w]))
					o.only = w;
			if (o.only < 0) {
				fprintf(stderr, "bench-wake: unknown way '%s'\n", name);
				return 2;
			}
		} else {
			fprintf(stderr, "usage: bench-wake [--rounds N] [--gap-us N] [--spin-ns N] "
					"[--daemon-spin-ns N] [--only WAY]\n");
			return 2;
		}
	}
	if (o.rounds < 10)
		o.rounds = 10;
	printf("rounds=%u\ngap_us=%u\nspin_ns=%lld\ndaemon_spin_ns=%lld\n", o.rounds, o.gap_us,
	       (long long)o.spin_ns, (long long)o.daemon_spin_ns);
	for (int w = 0; w < W_COUNT; w++)
		if (o.only < 0 || o.only == w)
			run_way((enum way)w, &o);
	return 0;
}
